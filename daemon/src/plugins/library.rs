//! Opening one plugin library: who may have written it (`writers`), its size, its bytes taken
//! as the loader will map them (`image`: a sealed copy, hashed as it is made), and then loaded
//! from that copy, never from the path again.

use std::path::{Path, PathBuf};

use broker_core::object::Ref;
use handler_api::LoadedPlugin;

use super::image::{self, ImageError};
use super::{writers, PluginError};

/// A plugin library opened and hashed, not loaded yet: [`OpenedLibrary::load`] loads exactly
/// the bytes that were hashed.
pub struct OpenedLibrary {
    path: PathBuf,
    /// The sealed copy of the library's bytes, or (without one) the library's own open file.
    file: std::fs::File,
    file_ref: Ref,
}

impl OpenedLibrary {
    /// Open `path`, check who may write it and its size, and take its bytes as the loader will
    /// map them ([`image::of`]: a sealed copy, hashed as it is made).
    pub fn open(path: &Path) -> Result<OpenedLibrary, PluginError> {
        OpenedLibrary::open_at(path, path)
    }

    /// [`OpenedLibrary::open`] of the file at `at`, said as `path` (the path as the operator
    /// gave it, where `at` is that path made absolute).
    pub(super) fn open_at(path: &Path, at: &Path) -> Result<OpenedLibrary, PluginError> {
        let unreadable =
            |e: std::io::Error| PluginError::new(path, format!("cannot read the library: {e}"));
        let file = std::fs::File::open(at).map_err(|e| match std::fs::read_link(at) {
            // A link whose target is gone (a build directory removed) names where it points.
            Ok(target) => PluginError::new(
                path,
                format!(
                    "cannot read the library: {e} (it is a symbolic link to {})",
                    target.display()
                ),
            ),
            Err(_) => unreadable(e),
        })?;
        // Of the open descriptor: the inode that is copied or loaded.
        let meta = file.metadata().map_err(unreadable)?;
        writers::check_library(path, &meta)?;
        let too_large = |size: Option<u64>| {
            let max = image::MAX_LIBRARY_BYTES;
            PluginError::new(
                path,
                match size {
                    Some(bytes) => format!("not a worldd plugin: the file is {bytes} bytes, more than the {max} a plugin library may be"),
                    None => format!("not a worldd plugin: the file grew past the {max} bytes a plugin library may be while it was read"),
                },
            )
        };
        if meta.len() > image::MAX_LIBRARY_BYTES {
            return Err(too_large(Some(meta.len())));
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let image = image::of(&name, file, image::MAX_LIBRARY_BYTES).map_err(|e| match e {
            ImageError::Read(e) => unreadable(e),
            ImageError::TooLarge => too_large(None),
            ImageError::Write(e) => {
                PluginError::new(path, format!("cannot copy the library into memory: {e}"))
            }
        })?;
        Ok(OpenedLibrary {
            path: path.to_path_buf(),
            file: image.file,
            file_ref: image.file_ref,
        })
    }

    /// The sha256 of the bytes read.
    pub fn file_ref(&self) -> Ref {
        self.file_ref
    }

    /// Load the bytes that were hashed.
    ///
    /// On Linux the loader opens `/proc/self/fd/N` of the sealed copy (or of the hashed file),
    /// so the code mapped is what was read, whatever happens to the path meanwhile. The
    /// descriptor is then kept open for the life of the process: plugins are never unloaded, a
    /// plugin that looks up its own file (`dladdr`, e.g. for its `tool` ref) is told that path,
    /// and the loader must never see one `/proc/self/fd/N` name stand for two files. Elsewhere
    /// the path is loaded after hashing (there is no equivalent of `/proc/self/fd`).
    pub fn load(self) -> Result<(Ref, LoadedPlugin), PluginError> {
        #[cfg(target_os = "linux")]
        let load_from = {
            use std::os::fd::AsRawFd;
            PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
        };
        #[cfg(not(target_os = "linux"))]
        let load_from = self.path.clone();
        let loaded = LoadedPlugin::load(&load_from);
        let origin_hint = match &loaded {
            Err(e) if e.summary().contains(MISSING_DEPENDENCY) && names_origin(&self.file) => {
                ORIGIN_HINT
            }
            _ => "",
        };
        // Kept open until the process exits, loaded or not: the loader knows a library it
        // mapped by this `/proc/self/fd/N` name (even one refused after mapping, whose code
        // stays mapped), and would hand that library back for a later file opened under a
        // reused N.
        std::mem::forget(self.file);
        match loaded {
            Ok(plugin) => Ok((self.file_ref, plugin)),
            Err(e) => {
                tracing::debug!(path = %self.path.display(), "plugin load detail: {}", e.detail());
                Err(PluginError::new(
                    &self.path,
                    format!("{}{origin_hint}", e.summary()),
                ))
            }
        }
    }
}

/// What the dynamic loader says of a shared library a library needs that it did not find.
const MISSING_DEPENDENCY: &str = "cannot open shared object file";

/// Said after a missing dependency of a library that names `$ORIGIN`: loaded through
/// `/proc/self/fd/N`, its `$ORIGIN` is `/proc/self/fd`, never the plugin directory, and the
/// loader's own words point nowhere near that.
const ORIGIN_HINT: &str = " (the library names $ORIGIN, as a RUNPATH or RPATH does: the daemon loads a sealed copy of it through /proc/self/fd/N, where $ORIGIN is /proc/self/fd, so a library beside it is not found; link it statically or install it where the system's loader looks: docs/handler-authors.md, Your plugin in provenance)";

/// Whether the bytes of `file` (the sealed copy) hold `$ORIGIN`: as a rule, in the dynamic
/// section's RUNPATH or RPATH. Read only after a failed load, to say why.
fn names_origin(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    const NEEDLE: &[u8] = b"$ORIGIN";
    let mut chunk = vec![0u8; 1 << 16];
    // The last bytes of the chunk before, so that a needle across two chunks is found.
    let mut carried = 0;
    let mut at = 0u64;
    loop {
        let n = match file.read_at(&mut chunk[carried..], at) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        at += n as u64;
        let seen = carried + n;
        if chunk[..seen].windows(NEEDLE.len()).any(|w| w == NEEDLE) {
            return true;
        }
        carried = (NEEDLE.len() - 1).min(seen);
        chunk.copy_within(seen - carried..seen, 0);
    }
}

/// Open the file at `at` (said as `path`), hash the bytes read from the open file, and load
/// that same file.
pub(super) fn load_hashed(path: &Path, at: &Path) -> Result<(Ref, LoadedPlugin), PluginError> {
    OpenedLibrary::open_at(path, at)?.load()
}
