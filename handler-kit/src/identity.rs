//! Which build of a handler served a call (the `tool` ref), and the SHA-256
//! helpers behind it and behind `policy_digest`.
//!
//! Needs the `identity` cargo feature (off by default; it adds the `sha2` and
//! `libc` dependencies):
//!
//! ```toml
//! handler-kit = { path = "…/handler-kit", features = ["identity"] }
//! ```
//!
//! The `tool` ref of a plugin is `sha256:` + the hex SHA-256 of the file its
//! code was loaded from, found with `dladdr`: the plugin library when the
//! daemon loaded it, the executable when the crate is linked in statically
//! (as in its own tests). The lookup must start from an address *in the
//! plugin's code*: use [`tool_ref!`](crate::tool_ref), which expands in the
//! plugin crate (its own anchor function, its own package name and version):
//!
//! ```
//! use handler_kit::identity::ToolSource;
//!
//! /// `sha256:` + 64 hex identifying this handler build, and its source.
//! pub fn tool_ref() -> &'static (String, ToolSource) {
//!     handler_kit::tool_ref!()
//! }
//!
//! let (tool, source) = tool_ref();
//! assert!(tool.starts_with("sha256:") && tool.len() == 7 + 64);
//! assert!(matches!(source, ToolSource::File(_)));
//! ```

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where a `tool` ref came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// SHA-256 of the file holding the plugin's code: the plugin library when
    /// the daemon loaded it (or the executable, when linked in statically).
    File(PathBuf),
    /// The file could not be found or read: SHA-256 of
    /// `"<CARGO_PKG_NAME>@<CARGO_PKG_VERSION>"` instead.
    Name,
}

/// Lowercase hex SHA-256 of `bytes` (a `policy_digest` is this of the
/// policy's canonical JSON).
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    format!("{:x}", Sha256::digest(bytes.as_ref()))
}

/// Lowercase hex SHA-256 of the file at `path`, read in 64 KiB blocks.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(format!("{:x}", hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

/// The `tool` ref of the code at `anchor` (an address in the plugin, e.g. a
/// function of the plugin crate): `sha256:` + the SHA-256 of the file the
/// loader mapped it from, or, when that file cannot be found or read, of
/// `fallback` (`"<package>@<version>"`). Prefer [`tool_ref!`](crate::tool_ref),
/// which computes it once per process with the right anchor and fallback.
pub fn tool_ref_at(anchor: *const (), fallback: &str) -> (String, ToolSource) {
    if let Some(path) = library_path(anchor) {
        if let Ok(digest) = sha256_file(&path) {
            return (format!("sha256:{digest}"), ToolSource::File(path));
        }
    }
    (format!("sha256:{}", sha256_hex(fallback)), ToolSource::Name)
}

/// The file the dynamic loader mapped `anchor` from (a shared library, or the
/// executable), found with `dladdr`. `None` when the loader does not know the
/// address.
#[cfg(unix)]
pub fn library_path(anchor: *const ()) -> Option<PathBuf> {
    use std::ffi::{CStr, OsStr};
    use std::os::unix::ffi::OsStrExt;

    // SAFETY: `Dl_info` is plain old data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only inspects the loader's tables for `anchor` (it never
    // dereferences it) and fills `info`.
    let found = unsafe { libc::dladdr(anchor as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: on success dli_fname points to a NUL-terminated string owned by
    // the loader, valid while the object stays loaded (plugins never unload).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(OsStr::from_bytes(name.to_bytes()));
    if path.as_os_str().is_empty() {
        // glibc reports the main program as "": use its real path instead.
        return std::env::current_exe().ok();
    }
    Some(path)
}

/// Without `dladdr` the file is unknown: [`tool_ref_at`] falls back to the
/// name.
#[cfg(not(unix))]
pub fn library_path(_anchor: *const ()) -> Option<PathBuf> {
    None
}

/// The calling plugin's `tool` ref and its [`ToolSource`], as a
/// `&'static (String, ToolSource)` computed once per process (hashing a
/// library takes milliseconds; there is no reason to do it twice).
///
/// Expands in the calling crate, so `dladdr` looks up a function of *that*
/// crate (the plugin library, not wherever handler-kit's code would live)
/// and the fallback names *its* `CARGO_PKG_NAME@CARGO_PKG_VERSION`. Needs the
/// `identity` feature. See [`identity`](crate::identity).
#[macro_export]
macro_rules! tool_ref {
    () => {{
        // An address in the calling crate's code, for `dladdr`.
        fn __worldd_tool_ref_anchor() {}
        static TOOL: ::std::sync::OnceLock<(::std::string::String, $crate::identity::ToolSource)> =
            ::std::sync::OnceLock::new();
        TOOL.get_or_init(|| {
            $crate::identity::tool_ref_at(
                __worldd_tool_ref_anchor as fn() as *const (),
                ::std::concat!(
                    ::std::env!("CARGO_PKG_NAME"),
                    "@",
                    ::std::env!("CARGO_PKG_VERSION")
                ),
            )
        })
    }};
}
