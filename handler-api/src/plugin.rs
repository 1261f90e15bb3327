//! The ABI's safe side for plugins: the traits a plugin implements, the host
//! callbacks as a safe [`Host`], and the adapter that turns them into the FFI
//! root module. (Authoring conveniences beyond the ABI live in `handler-kit`.)
//!
//! Every entry point the daemon can call is wrapped in
//! [`std::panic::catch_unwind`]: a panic must never unwind across the
//! `extern "C"` boundary (that aborts the whole daemon). The adapters are
//! ordinary generic functions, so tests can drive the exact code a loaded
//! plugin runs without `dlopen` (see [`plugin_module`]).

use std::any::Any;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use abi_stable::{
    prefix_type::WithMetadata,
    sabi_trait::TD_Opaque,
    staticref,
    std_types::{RErr, ROk, ROption, RResult, RStr, RString},
};
use serde_json::Value;

use crate::abi::{
    HandlerBox, Handler_TO, HostCallbacks, HostCallbacksRef, PluginMod, PluginModRef, ABI_VERSION,
};
use crate::types::{FinishInput, JsonObject, LogLevel, Manifest, Outcome, Preflight, Request};

/// The behaviour of a handler, in plain Rust. Implement this; the export
/// macro takes care of JSON, the FFI and panics.
pub trait EffectHandler: Send + Sync + 'static {
    /// Execute one admitted effect. Called on a blocking thread, possibly on
    /// several threads at once (different episodes), so `&self` must be safe
    /// to share. A panic becomes `Outcome::Failed("handler panicked: …")`.
    fn execute(&self, request: Request) -> Outcome;

    /// Run the pure, deterministic finish function `name`. The default
    /// refuses every name; override it when the manifest lists `finish`
    /// functions. A panic becomes `Err("finish function panicked: …")`. It runs
    /// after a successful `execute`, within the same deadline.
    fn finish(&self, name: &str, input: FinishInput) -> Result<JsonObject, String> {
        let _ = input;
        Err(format!("no finish function {name:?}"))
    }

    /// Look at a request before the broker admits it and debits its budget. The default
    /// proceeds. Override it for refusals the handler can foresee cheaply and without side
    /// effects (a size over a limit); return [`Preflight::Decline`] with the output `execute`
    /// would have given. Called under the same deadline as `execute`, on the same kind of
    /// thread; a panic counts as [`Preflight::Proceed`].
    fn preflight(&self, request: &Request) -> Preflight {
        let _ = request;
        Preflight::Proceed
    }
}

/// A plugin: its manifest and how to build its handler from the operator's
/// config. Export it with [`crate::export_plugin!`].
pub trait Plugin: 'static {
    /// The handler type [`Plugin::new`] builds.
    type Handler: EffectHandler;

    /// Describe the plugin. The adapter sets [`Manifest::abi`] to
    /// [`crate::ABI_VERSION`]; an `Err` (or a panic) makes the daemon refuse
    /// to load the plugin with that message.
    fn manifest() -> Result<Manifest, String>;

    /// Build the handler. `config` is the operator's config object (`{}` when
    /// none was given). Validate it and refuse anything unknown with a clear
    /// one-line `Err`: the daemon prints it and does not start.
    fn new(config: Value, host: Host) -> Result<Self::Handler, String>;
}

/// The host's services, as seen by a plugin: logging and (for the plugin that
/// handles `Registry.Publish`) registry publishing.
///
/// Cheap to copy; keep one in your handler.
#[derive(Clone, Copy, Debug)]
pub struct Host {
    callbacks: HostCallbacksRef,
}

// SAFETY: `HostCallbacks` is a table of function pointers plus an opaque
// context pointer. Its contract (documented on the type) obliges the host to
// keep the table valid for the life of the process and to make every callback
// callable from any thread, which is exactly what Send + Sync require.
unsafe impl Send for Host {}
// SAFETY: see the `Send` impl above.
unsafe impl Sync for Host {}

/// # Safety
///
/// None needed: the context is ignored. `unsafe` only to fit the table.
unsafe extern "C" fn noop_log(_context: *const (), _level: u8, _message: RStr<'_>) {}

/// # Safety
///
/// None needed: the context is ignored. `unsafe` only to fit the table.
unsafe extern "C" fn noop_publish(
    _context: *const (),
    _bundle: RStr<'_>,
) -> RResult<RString, RString> {
    RErr(RString::from(NO_PUBLISH))
}

/// How the error of a constructor that panicked begins (the panic's message follows), so that
/// the daemon can tell a plugin's bug from a plugin refusing its config. Plugins built against
/// any handler-api 0.3 send these words.
pub const NEW_PANICKED: &str = "handler constructor panicked: ";

/// The error a host without registry publishing answers.
pub const NO_PUBLISH: &str = "publishing is not available to this plugin";

struct NoopHost;

impl NoopHost {
    staticref! {
        const TABLE: WithMetadata<HostCallbacks> = WithMetadata::new(HostCallbacks {
            context: std::ptr::null(),
            log: noop_log,
            publish: noop_publish,
        })
    }
}

impl Host {
    /// Wrap a callback table received from the daemon.
    ///
    /// # Safety
    ///
    /// `callbacks` must be a table whose functions accept its own `context`: one the daemon
    /// handed to `new_handler`, or one built by [`crate::host_callbacks`] or
    /// [`Host::noop`]. [`Host::log`] and [`Host::publish`] call its functions with that
    /// context, so a table pairing a host's functions with another context is undefined
    /// behaviour.
    pub unsafe fn from_callbacks(callbacks: HostCallbacksRef) -> Host {
        Host { callbacks }
    }

    /// A host backed by `services` (tests, and tools that build handlers outside the daemon).
    pub fn from_services(services: std::sync::Arc<dyn crate::HostServices>) -> Host {
        Host {
            callbacks: crate::host_callbacks(services),
        }
    }

    /// A host that discards log messages and refuses to publish. For tests,
    /// and for tools that construct a handler outside the daemon.
    pub fn noop() -> Host {
        Host {
            callbacks: HostCallbacksRef(NoopHost::TABLE.as_prefix()),
        }
    }

    /// The raw callback table (to hand on to another FFI call).
    pub fn callbacks(&self) -> HostCallbacksRef {
        self.callbacks
    }

    /// Log `message` at `level` through the daemon's logger.
    pub fn log(&self, level: LogLevel, message: &str) {
        // SAFETY: `self.callbacks` is a table whose functions accept its own context (the
        // contract of `Host::from_callbacks`, or a table `Host::noop`/`from_services` built),
        // and that context is what is passed.
        unsafe {
            (self.callbacks.log())(
                self.callbacks.context(),
                level as u8,
                RStr::from_str(message),
            )
        };
    }

    /// Publish a transition bundle (JSON text) into the registry. Returns the
    /// host's answer (JSON text), or an error such as [`NO_PUBLISH`].
    pub fn publish(&self, bundle_json: &str) -> Result<String, String> {
        // SAFETY: as in `Host::log`: the table's own context goes to the table's function.
        let answer = unsafe {
            (self.callbacks.publish())(self.callbacks.context(), RStr::from_str(bundle_json))
        };
        match answer {
            ROk(answer) => Ok(answer.into_string()),
            RErr(message) => Err(message.into_string()),
        }
    }
}

/// The text of a panic payload (`&str` and `String` payloads; anything else
/// is described, not guessed).
pub fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}

/// Serialise an outcome. Cannot fail for these types (all map keys are
/// strings), but the boundary must never panic, so a failure still yields a
/// well-formed `failed` outcome.
fn outcome_json(outcome: &Outcome) -> String {
    serde_json::to_string(outcome).unwrap_or_else(|e| {
        let message = format!("handler output could not be serialised: {e}");
        serde_json::json!({"status": "failed", "message": message}).to_string()
    })
}

/// The `execute` adapter: JSON request in, JSON outcome out, no panic ever
/// escapes. Public so that tests can exercise it directly.
pub fn execute_json<H: EffectHandler + ?Sized>(handler: &H, request_json: &str) -> String {
    let request: Request = match serde_json::from_str(request_json) {
        Ok(r) => r,
        Err(e) => {
            return outcome_json(&Outcome::failed(format!(
                "malformed request: the daemon sent JSON this handler cannot read: {e}"
            )))
        }
    };
    let outcome = match crate::caught::caught(|| handler.execute(request)) {
        Ok(outcome) => outcome,
        Err(text) => Outcome::failed(format!("handler panicked: {text}")),
    };
    outcome_json(&outcome)
}

/// The `finish` adapter: JSON in, JSON object out, no panic ever escapes.
pub fn finish_json<H: EffectHandler + ?Sized>(
    handler: &H,
    name: &str,
    input_json: &str,
) -> Result<String, String> {
    let input: FinishInput = serde_json::from_str(input_json)
        .map_err(|e| format!("malformed finish input for {name:?}: {e}"))?;
    let output = crate::caught::caught(|| handler.finish(name, input))
        .map_err(|text| format!("finish function panicked: {text}"))??;
    serde_json::to_string(&output)
        .map_err(|e| format!("finish output could not be serialised: {e}"))
}

/// The `preflight` adapter: `None` to proceed, or the declining output as JSON text. A request
/// the handler cannot read, a panic, or an output that cannot be serialised all proceed:
/// preflight may only spare budget, and `execute` answers for everything.
pub fn preflight_json<H: EffectHandler + ?Sized>(
    handler: &H,
    request_json: &str,
) -> Option<String> {
    let request: Request = serde_json::from_str(request_json).ok()?;
    match crate::caught::caught(|| handler.preflight(&request)) {
        Ok(Preflight::Decline(output)) => serde_json::to_string(&output).ok(),
        Ok(Preflight::Proceed) | Err(_) => None,
    }
}

/// The `manifest` adapter: the manifest JSON with `abi` forced to
/// [`ABI_VERSION`], or `{"error":"…"}`.
pub fn manifest_json<P: Plugin>() -> String {
    let result = crate::caught::caught(P::manifest).unwrap_or_else(|text| {
        // No host is told of a panic here (there is none yet): its place goes in the error.
        let place = crate::caught::take_place().unwrap_or_default();
        Err(format!("manifest panicked{place}: {text}"))
    });
    let result = result.and_then(|mut manifest| {
        manifest.abi = ABI_VERSION;
        serde_json::to_string(&manifest)
            .map_err(|e| format!("manifest could not be serialised: {e}"))
    });
    match result {
        Ok(json) => json,
        Err(message) => serde_json::json!({ "error": message }).to_string(),
    }
}

/// The `new_handler` adapter: parses the config, calls [`Plugin::new`], and
/// boxes the handler as an FFI trait object.
pub fn new_handler_boxed<P: Plugin>(config_json: &str, host: Host) -> Result<HandlerBox, String> {
    let config: Value = if config_json.trim().is_empty() {
        Value::Object(JsonObject::new())
    } else {
        serde_json::from_str(config_json).map_err(|e| format!("config is not JSON: {e}"))?
    };
    crate::caught::remember(host);
    let handler = crate::caught::caught(|| P::new(config, host))
        .map_err(|text| format!("{NEW_PANICKED}{text}"))??;
    Ok(Handler_TO::from_value(
        Adapter(ManuallyDrop::new(handler)),
        TD_Opaque,
    ))
}

/// Wraps a user handler as the FFI [`crate::Handler`] trait.
struct Adapter<H: EffectHandler>(ManuallyDrop<H>);

/// The handler's drop is an entry the host calls too (abi_stable's `destroy_box`, an
/// `extern "C"` function): a panic in it must not unwind into the host, which aborts.
impl<H: EffectHandler> Drop for Adapter<H> {
    fn drop(&mut self) {
        let _ = crate::caught::caught(|| {
            // SAFETY: the handler is dropped here, once, as its adapter goes: nothing uses it
            // after (a panic part-way leaves it half dropped, and still unused).
            unsafe { ManuallyDrop::drop(&mut self.0) }
        });
    }
}

impl<H: EffectHandler> crate::abi::Handler for Adapter<H> {
    fn execute(&self, request_json: RStr<'_>) -> RString {
        RString::from(execute_json(&*self.0, request_json.as_str()))
    }

    fn finish(&self, name: RStr<'_>, input_json: RStr<'_>) -> RResult<RString, RString> {
        match finish_json(&*self.0, name.as_str(), input_json.as_str()) {
            Ok(json) => ROk(RString::from(json)),
            Err(message) => RErr(RString::from(message)),
        }
    }

    fn preflight(&self, request_json: RStr<'_>) -> ROption<RString> {
        preflight_json(&*self.0, request_json.as_str())
            .map(RString::from)
            .into()
    }
}

extern "C" fn abi_version_entry() -> u32 {
    ABI_VERSION
}

extern "C" fn manifest_entry<P: Plugin>() -> RString {
    RString::from(manifest_json::<P>())
}

extern "C" fn new_handler_entry<P: Plugin>(
    config: RStr<'_>,
    host: HostCallbacksRef,
) -> RResult<HandlerBox, RString> {
    // new_handler_boxed already catches panics from the plugin's code; this
    // outer guard covers the adapter itself (it must not unwind either).
    let result = crate::caught::caught(|| {
        // SAFETY: `host` is the table the daemon passed to this entry: by the
        // `HostCallbacks` contract its functions accept its own context.
        let host = unsafe { Host::from_callbacks(host) };
        new_handler_boxed::<P>(config.as_str(), host)
    })
    .unwrap_or_else(|text| Err(format!("{NEW_PANICKED}{text}")));
    match result {
        Ok(handler) => ROk(handler),
        Err(message) => RErr(RString::from(message)),
    }
}

struct Entries<P>(PhantomData<P>);

impl<P: Plugin> Entries<P> {
    staticref! {
        const MODULE: WithMetadata<PluginMod> = WithMetadata::new(PluginMod {
            abi_version: abi_version_entry,
            manifest: manifest_entry::<P>,
            new_handler: new_handler_entry::<P>,
        })
    }
}

/// The root module for plugin `P`: exactly what a loaded cdylib hands the
/// daemon. [`crate::export_plugin!`] exports it; tests call it directly to
/// drive the FFI entry points in-process.
pub fn plugin_module<P: Plugin>() -> PluginModRef {
    PluginModRef(Entries::<P>::MODULE.as_prefix())
}
