//! The `tool` ref: which build of this handler served a call.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// Where the `tool` ref came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// SHA-256 of the file holding this code: the plugin library when the
    /// daemon loaded it (or the executable, when linked in statically).
    File(PathBuf),
    /// The file could not be found or read: SHA-256 of
    /// `"<CARGO_PKG_NAME>@<CARGO_PKG_VERSION>"` instead.
    Name,
}

/// `sha256:` + 64 hex identifying this handler build, and its source.
/// Computed once per process (hashing a library is milliseconds, but there is
/// no reason to do it twice).
pub fn tool_ref() -> &'static (String, ToolSource) {
    static TOOL: OnceLock<(String, ToolSource)> = OnceLock::new();
    TOOL.get_or_init(|| {
        if let Some(path) = own_library_path() {
            if let Ok(digest) = hash_file(&path) {
                return (format!("sha256:{digest}"), ToolSource::File(path));
            }
        }
        let name = format!("{}@{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
        (
            format!("sha256:{}", hex::encode(Sha256::digest(name.as_bytes()))),
            ToolSource::Name,
        )
    })
}

fn hash_file(path: &PathBuf) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The file the dynamic loader mapped this function from.
fn own_library_path() -> Option<PathBuf> {
    // SAFETY: `Dl_info` is plain old data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let address = own_library_path as *const () as *const libc::c_void;
    // SAFETY: dladdr only inspects the loader's tables for `address` (a
    // function of this library) and fills `info`.
    let found = unsafe { libc::dladdr(address, &mut info) };
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
