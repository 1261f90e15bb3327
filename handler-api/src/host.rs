//! The daemon's side: loading plugin libraries, talking to their handlers
//! through safe wrappers, and building the host callback table.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use abi_stable::{
    library::{lib_header_from_path, LibraryError, RootModuleError},
    prefix_type::PrefixTypeTrait,
    std_types::{RErr, ROk, RResult, RStr, RString},
};
use serde_json::Value;

use crate::abi::{HandlerBox, HostCallbacks, HostCallbacksRef, PluginModRef, ABI_VERSION};
use crate::plugin::{panic_text, NO_PUBLISH};
use crate::types::{FinishInput, JsonObject, LogLevel, Manifest, Outcome, Preflight, Request};

/// Longest summary a [`LoadError`] puts on its one line.
const SUMMARY_LIMIT: usize = 240;

/// Why a plugin library could not be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadErrorKind {
    /// The dynamic loader could not open the file (missing, not a shared
    /// object, unresolved symbols, wrong architecture).
    Open,
    /// The file opened but exports no worldd root module. A plugin built
    /// against another abi_stable minor version looks like this too, because
    /// the root symbol's name is mangled per abi_stable version.
    NotAPlugin,
    /// abi_stable's load-time check refused it: another handler-api version,
    /// another abi_stable, or a type layout that differs.
    IncompatibleAbi,
    /// The plugin's root module initialiser failed or panicked.
    InitFailed,
    /// The plugin reports another [`ABI_VERSION`].
    AbiVersion,
}

/// A plugin that cannot be loaded. `Display` is one line naming the file and
/// the cause, for the operator; [`LoadError::detail`] keeps abi_stable's full
/// (often very long) report for debug logging.
#[derive(Debug, Clone)]
pub struct LoadError {
    path: PathBuf,
    kind: LoadErrorKind,
    summary: String,
    detail: String,
}

impl LoadError {
    /// The library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The class of failure.
    pub fn kind(&self) -> LoadErrorKind {
        self.kind
    }

    /// The one-line cause, without the file name.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// abi_stable's full report (may span hundreds of lines).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    fn new(path: &Path, kind: LoadErrorKind, summary: String, detail: String) -> LoadError {
        LoadError {
            path: path.to_path_buf(),
            kind,
            summary: one_line(&summary),
            detail,
        }
    }

    /// After an ABI mismatch, what to do about it: [`rebuild_hint`], said after the cause (so
    /// that a long cause, cut, never cuts it).
    fn with_rebuild_hint(mut self, library: Option<&str>) -> LoadError {
        if matches!(
            self.kind,
            LoadErrorKind::IncompatibleAbi | LoadErrorKind::AbiVersion
        ) {
            let hint = rebuild_hint(&self.summary, library);
            self.summary.push_str(&hint);
        }
        self
    }
}

/// The handler-api version this daemon was built with: the one abi_stable compares a
/// plugin's with (`package_version_strings!` of [`crate::PluginModRef`]).
const OUR_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `; rebuild the plugin against handler-api X, the version this worldd expects`, followed by
/// the version the library names when it is known and `summary` does not already say it.
pub(crate) fn rebuild_hint(summary: &str, library: Option<&str>) -> String {
    let mut hint = format!(
        "; rebuild the plugin against handler-api {OUR_VERSION}, the version this worldd expects"
    );
    if let Some(library) = library.filter(|v| !summary.contains(&format!(" {v} found"))) {
        hint.push_str(&format!(" (the library was built against {library})"));
    }
    hint
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "plugin {}: {}", self.path.display(), self.summary)
    }
}

impl std::error::Error for LoadError {}

/// Collapse whitespace runs (newlines included) and cap the length.
fn one_line(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.chars().count() > SUMMARY_LIMIT {
        out = out.chars().take(SUMMARY_LIMIT).collect::<String>() + "…";
    }
    out
}

/// Reduce abi_stable's layout report to "<what>: <expected> expected, <found>
/// found", from its first `Error:/Expected:/Found:` block.
pub(crate) fn summarise_layout_report(report: &str) -> String {
    let lines: Vec<&str> = report.lines().collect();
    let first_value = |from: usize| -> Option<(usize, String)> {
        lines
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (i, l.trim().to_string()))
    };
    for (i, line) in lines.iter().enumerate() {
        let Some(what) = line.trim().strip_prefix("Error:") else {
            continue;
        };
        let what = what.trim();
        let expected_at = lines.iter().skip(i).position(|l| l.trim() == "Expected:");
        let found_at = lines.iter().skip(i).position(|l| l.trim() == "Found:");
        if let (Some(e), Some(f)) = (expected_at, found_at) {
            let expected = first_value(i + e + 1).filter(|(at, _)| *at < i + f);
            let found = first_value(i + f + 1);
            if let (Some((_, expected)), Some((_, found))) = (expected, found) {
                if what == "incompatible package versions" {
                    return format!("handler-api {expected} expected, {found} found");
                }
                return match field_path(&lines[..i]) {
                    Some(at) => format!("{what} at {at}: {expected} expected, {found} found"),
                    None => format!("{what}: {expected} expected, {found} found"),
                };
            }
        }
        if !what.is_empty() {
            return what.to_string();
        }
    }
    // No recognisable block: the first non-empty line is the best we have.
    report
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("the type layouts differ")
        .to_string()
}

/// The field path of the last "N error(s)inside:" stack trace before an
/// error block, e.g. `abi_version.__returns` (the newtype field `0` of a
/// prefix reference is skipped as noise).
fn field_path(lines: &[&str]) -> Option<String> {
    let start = lines.iter().rposition(|l| l.contains("error(s)inside:"))?;
    let fields: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| !l.starts_with("Layout of expected type:"))
        .filter_map(|l| l.strip_prefix("    field_name:"))
        .map(str::trim)
        .filter(|f| *f != "0")
        .collect();
    (!fields.is_empty()).then(|| fields.join("."))
}

fn classify(path: &Path, err: &LibraryError) -> (LoadErrorKind, String) {
    match err {
        LibraryError::OpenError { err, .. } => {
            let text = err.to_string();
            // dlerror() repeats the file name; the Display already names it.
            let display = path.display().to_string();
            let text = text
                .strip_prefix(&format!("{display}: "))
                .map(str::to_string)
                .unwrap_or_else(|| text.replace(&display, "<file>"));
            (LoadErrorKind::Open, format!("cannot be opened: {text}"))
        }
        LibraryError::GetSymbolError { .. } => (
            LoadErrorKind::NotAPlugin,
            "not a worldd plugin: it exports no abi_stable 0.11 root module \
             (a handler-kit crate exports it with handler_kit::export_plugin!(YourPlugin) in \
             lib.rs, built as crate-type [\"cdylib\"]; one built against another abi_stable \
             looks like this too)"
                .to_string(),
        ),
        LibraryError::ParseVersionError(e) => (
            LoadErrorKind::IncompatibleAbi,
            format!("incompatible ABI: unreadable handler-api version: {e}"),
        ),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => (
            LoadErrorKind::IncompatibleAbi,
            format!(
                "incompatible ABI: handler-api {expected_version} expected, {actual_version} found"
            ),
        ),
        LibraryError::AbiInstability(report) => (
            LoadErrorKind::IncompatibleAbi,
            format!(
                "incompatible ABI: {}",
                summarise_layout_report(&report.to_string())
            ),
        ),
        LibraryError::InvalidAbiHeader(_) => (
            LoadErrorKind::IncompatibleAbi,
            "incompatible ABI: built against an incompatible abi_stable (ABI header differs)"
                .to_string(),
        ),
        LibraryError::InvalidCAbi { .. } => (
            LoadErrorKind::IncompatibleAbi,
            "incompatible ABI: the C ABI differs (another compiler or target?)".to_string(),
        ),
        LibraryError::RootModule { err, .. } => match err {
            RootModuleError::Unwound => (
                LoadErrorKind::InitFailed,
                "root module initialisation panicked".to_string(),
            ),
            RootModuleError::Returned(e) => (
                LoadErrorKind::InitFailed,
                format!("root module initialisation failed: {e}"),
            ),
        },
        LibraryError::Many(list) => match list.first() {
            Some(first) => {
                let (kind, summary) = classify(path, first);
                if list.len() > 1 {
                    (
                        kind,
                        format!("{summary} (and {} more errors)", list.len() - 1),
                    )
                } else {
                    (kind, summary)
                }
            }
            None => (
                LoadErrorKind::IncompatibleAbi,
                "unknown load error".to_string(),
            ),
        },
    }
}

/// Load one plugin library and check it is compatible.
///
/// Uses `lib_header_from_path` + `init_root_module`, never abi_stable's
/// `RootModule::load_from_*` (those cache one module per *type*, so a second
/// plugin would silently get the first one's module). The library is leaked:
/// plugins are never unloaded.
///
/// Checks, in order: the file opens; it exports an abi_stable root module;
/// its handler-api version and the layout of every type reachable from
/// [`crate::PluginMod`] are compatible (abi_stable); its `abi_version()`
/// equals [`ABI_VERSION`].
pub fn load_plugin(path: &Path) -> Result<PluginModRef, LoadError> {
    let to_error = |err: LibraryError, library: Option<&str>| {
        let (kind, summary) = classify(path, &err);
        LoadError::new(path, kind, summary, err.to_string()).with_rebuild_hint(library)
    };
    let header = lib_header_from_path(path).map_err(|e| to_error(e, None))?;
    // The handler-api version the library names (its header passed abi_stable's check, so it
    // can be read), for the rebuild hint.
    let library = header.version_strings().version.as_str();
    let module = header
        .init_root_module::<PluginModRef>()
        .map_err(|e| to_error(e, Some(library)))?;
    let found = (module.abi_version())();
    if found != ABI_VERSION {
        return Err(LoadError::new(
            path,
            LoadErrorKind::AbiVersion,
            format!("incompatible ABI: handler ABI version {ABI_VERSION} expected, {found} found"),
            String::new(),
        )
        .with_rebuild_hint(Some(library)));
    }
    Ok(module)
}

/// A loaded plugin (its root module), with safe wrappers around its entries.
#[derive(Clone, Copy, Debug)]
pub struct LoadedPlugin {
    module: PluginModRef,
}

impl LoadedPlugin {
    /// [`load_plugin`] and wrap.
    pub fn load(path: &Path) -> Result<LoadedPlugin, LoadError> {
        load_plugin(path).map(LoadedPlugin::from_module)
    }

    /// Wrap a root module: one from [`load_plugin`], or one built in-process
    /// with [`crate::plugin_module`] (tests, built-in handlers).
    pub fn from_module(module: PluginModRef) -> LoadedPlugin {
        LoadedPlugin { module }
    }

    /// The raw root module.
    pub fn module(&self) -> PluginModRef {
        self.module
    }

    /// The plugin's manifest. `Err` when the plugin reported an error
    /// (`{"error":"…"}`) or sent something that is not a manifest.
    pub fn manifest(&self) -> Result<Manifest, String> {
        let json = (self.module.manifest())().into_bytes();
        let json = std::str::from_utf8(&json)
            .map_err(|e| format!("the plugin's manifest is not JSON: {}", not_utf8(e)))?;
        let value: Value = serde_json::from_str(json)
            .map_err(|e| format!("the plugin's manifest is not JSON: {e}"))?;
        if let Some(message) = value.as_object().and_then(|o| {
            (o.len() == 1)
                .then(|| o.get("error"))
                .flatten()
                .and_then(Value::as_str)
        }) {
            return Err(format!("the plugin could not describe itself: {message}"));
        }
        serde_json::from_value(value)
            .map_err(|e| format!("the plugin's manifest is malformed: {e}"))
    }

    /// Build a handler from the operator's config object. `Err` carries the
    /// plugin's one-line reason (e.g. an unknown config key).
    pub fn new_handler(
        &self,
        config: &Value,
        host: HostCallbacksRef,
    ) -> Result<LoadedHandler, String> {
        let config = config.to_string();
        match (self.module.new_handler())(RStr::from_str(&config), host) {
            ROk(inner) => Ok(LoadedHandler { inner }),
            RErr(message) => Err(lossy(message)),
        }
    }
}

/// A handler object from a plugin, behind safe, typed methods.
pub struct LoadedHandler {
    inner: HandlerBox,
}

impl fmt::Debug for LoadedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LoadedHandler { .. }")
    }
}

/// The longest answer the host reads from a handler: an outcome, a preflight's decline or a
/// finish function's output. A longer one is not parsed (parsing can take many times its size
/// in memory). The broker keeps at most 1 MiB of a call's output, so no answer of a call that
/// can succeed comes near it.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// Why an answer that is not UTF-8 was not read: a plugin that builds its `RString` from bytes
/// with `unsafe` can send any bytes, and read as text they would pass through the JSON parser
/// into what is committed and logged.
fn not_utf8(e: std::str::Utf8Error) -> String {
    format!("its bytes are not UTF-8 ({e})")
}

/// A plugin's error message as text, any byte that is not UTF-8 replaced (U+FFFD).
fn lossy(message: RString) -> String {
    String::from_utf8_lossy(&message.into_bytes()).into_owned()
}

/// Why an answer of `len` bytes was not read.
fn too_long(len: usize) -> String {
    format!("the handler's answer is {len} bytes; the host reads at most {MAX_ANSWER_BYTES}")
}

impl LoadedHandler {
    /// Wrap a handler object (e.g. one a built-in handler boxed itself).
    pub fn from_box(inner: HandlerBox) -> LoadedHandler {
        LoadedHandler { inner }
    }

    /// Execute one effect. An answer that is not a valid [`Outcome`] (not UTF-8
    /// among them), or is longer than [`MAX_ANSWER_BYTES`], is reported as
    /// `indeterminate`: the handler ran, and nobody can tell what it did. An output (as a
    /// decline or a finish output) is read to any depth, but only its first 120 levels are
    /// kept, an array or object at the 120th read empty: the broker refuses one past 100.
    pub fn execute(&self, request: &Request) -> Outcome {
        match serde_json::to_string(request) {
            Ok(json) => self.execute_request_json(&json),
            Err(e) => Outcome::failed(format!("request could not be serialised: {e}")),
        }
    }

    /// [`LoadedHandler::execute`] for a host that writes the [`Request`] document itself
    /// (`request_json` must be one).
    pub fn execute_request_json(&self, request_json: &str) -> Outcome {
        let answer = self
            .inner
            .execute(RStr::from_str(request_json))
            .into_bytes();
        if answer.len() > MAX_ANSWER_BYTES {
            return Outcome::indeterminate(too_long(answer.len()));
        }
        let malformed = |why: String| {
            Outcome::indeterminate(format!("the handler returned a malformed outcome: {why}"))
        };
        match std::str::from_utf8(&answer) {
            Ok(text) => serde_json::from_str(text).unwrap_or_else(|e| malformed(e.to_string())),
            Err(e) => malformed(not_utf8(e)),
        }
    }

    /// Execute with the request as JSON text and the raw answer (for callers
    /// that already hold JSON, and for tests of malformed input).
    pub fn execute_raw(&self, request_json: &str) -> String {
        lossy(self.inner.execute(RStr::from_str(request_json)))
    }

    /// Ask the handler whether it declines `request` before admission. A malformed answer
    /// (not UTF-8 among them, or one longer than [`MAX_ANSWER_BYTES`]) proceeds (see [`crate::Preflight`]):
    /// `execute` checks everything again.
    pub fn preflight(&self, request: &Request) -> Preflight {
        match serde_json::to_string(request) {
            Ok(json) => self.preflight_request_json(&json),
            Err(_) => Preflight::Proceed,
        }
    }

    /// [`LoadedHandler::preflight`] for a host that writes the [`Request`] document itself
    /// (`request_json` must be one).
    pub fn preflight_request_json(&self, request_json: &str) -> Preflight {
        match self
            .inner
            .preflight(RStr::from_str(request_json))
            .into_option()
        {
            Some(answer) if answer.len() > MAX_ANSWER_BYTES => Preflight::Proceed,
            Some(answer) => match std::str::from_utf8(&answer.into_bytes())
                .ok()
                .and_then(|text| crate::answer::object(text).ok())
            {
                Some(output) => Preflight::Decline(output),
                None => Preflight::Proceed,
            },
            None => Preflight::Proceed,
        }
    }

    /// Run the finish function `name`. An answer that is not a JSON object (not UTF-8 among
    /// them), or is longer than [`MAX_ANSWER_BYTES`], is its error.
    pub fn finish(&self, name: &str, input: &FinishInput) -> Result<JsonObject, String> {
        let json = serde_json::to_string(input)
            .map_err(|e| format!("finish input could not be serialised: {e}"))?;
        match self
            .inner
            .finish(RStr::from_str(name), RStr::from_str(&json))
        {
            ROk(output) if output.len() > MAX_ANSWER_BYTES => Err(format!(
                "finish function {name:?}: {}",
                too_long(output.len())
            )),
            ROk(output) => {
                let output = output.into_bytes();
                let text = std::str::from_utf8(&output).map_err(|e| {
                    format!(
                        "finish function {name:?} returned a non-object: {}",
                        not_utf8(e)
                    )
                })?;
                crate::answer::object(text)
                    .map_err(|e| format!("finish function {name:?} returned a non-object: {e}"))
            }
            RErr(message) => Err(lossy(message)),
        }
    }
}

/// What the daemon offers a plugin, in plain Rust. Implement it and turn it
/// into a callback table with [`host_callbacks`].
pub trait HostServices: Send + Sync + 'static {
    /// Log a plugin's message.
    fn log(&self, level: LogLevel, message: &str);

    /// Whether a message at `level` would be logged at all. When not, its bytes are not read:
    /// a plugin sending millions of messages the daemon does not log costs it a call each, not
    /// a pass over each message's text. The default logs every level.
    fn logs(&self, level: LogLevel) -> bool {
        let _ = level;
        true
    }

    /// Publish a transition bundle. The default refuses: only the plugin that
    /// handles `Registry.Publish` should get a host that accepts.
    fn publish(&self, bundle_json: &str) -> Result<String, String> {
        let _ = bundle_json;
        Err(NO_PUBLISH.to_string())
    }
}

/// # Safety
///
/// `context` must be null or the context of a table built by [`host_callbacks`].
unsafe fn services(context: *const ()) -> Option<&'static Arc<dyn HostServices>> {
    // SAFETY: by this function's contract `context` is either null or the
    // pointer `host_callbacks` leaked from a `Box<Arc<dyn HostServices>>`,
    // which is never freed.
    unsafe { context.cast::<Arc<dyn HostServices>>().as_ref() }
}

/// # Safety
///
/// `context` must be the context of the table this function came in.
unsafe extern "C" fn services_log(context: *const (), level: u8, message: RStr<'_>) {
    // SAFETY: the caller passes this table's own context (the `HostCallbacks`
    // contract), which `host_callbacks` made.
    if let Some(s) = unsafe { services(context) } {
        let level = LogLevel::from_u8(level);
        // A panicking logger must not unwind into the plugin (abort).
        let _ = catch_unwind(AssertUnwindSafe(|| {
            if !s.logs(level) {
                return;
            }
            // The bytes are the plugin's: `RStr` promises UTF-8, which unsafe plugin code can
            // break, and a `str` that is not is undefined behaviour in the host. Checked at
            // `from_utf8`'s speed; only bytes that are not UTF-8 take the lossy copy.
            let bytes = message.as_rslice().as_slice();
            match std::str::from_utf8(bytes) {
                Ok(text) => s.log(level, text),
                Err(_) => s.log(level, &String::from_utf8_lossy(bytes)),
            }
        }));
    }
}

/// # Safety
///
/// `context` must be the context of the table this function came in.
unsafe extern "C" fn services_publish(
    context: *const (),
    bundle: RStr<'_>,
) -> RResult<RString, RString> {
    // SAFETY: the caller passes this table's own context (the `HostCallbacks`
    // contract), which `host_callbacks` made.
    let Some(s) = (unsafe { services(context) }) else {
        return RErr(RString::from(NO_PUBLISH));
    };
    // As for a log message: the plugin's bytes, checked, not trusted to be UTF-8.
    let Ok(bundle) = std::str::from_utf8(bundle.as_rslice().as_slice()) else {
        return RErr(RString::from("the bundle is not UTF-8"));
    };
    match catch_unwind(AssertUnwindSafe(|| s.publish(bundle))) {
        Ok(Ok(answer)) => ROk(RString::from(answer)),
        Ok(Err(message)) => RErr(RString::from(message)),
        Err(payload) => RErr(RString::from(format!(
            "host publish panicked: {}",
            panic_text(&*payload)
        ))),
    }
}

/// Build the callback table for `services`. The table and `services` are
/// leaked (they must outlive every handler, and plugins are never unloaded),
/// so create one per plugin at start-up, not per call.
pub fn host_callbacks(services: Arc<dyn HostServices>) -> HostCallbacksRef {
    let context = Box::into_raw(Box::new(services)) as *const ();
    HostCallbacks {
        context,
        log: services_log,
        publish: services_publish,
    }
    .leak_into_prefix()
}
