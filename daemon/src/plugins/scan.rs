//! Finding the plugin libraries in the plugin directory and asking each what it is: every
//! library is loaded (`library`) and describes itself in its manifest, or is named broken.

use std::path::{Path, PathBuf};
use std::time::Duration;

use broker_core::broker::HandlerIdentity;
use broker_core::object::Ref;
use handler_api::{LoadedPlugin, Manifest};

use super::deadline::{within, Stops};
use super::library::load_hashed;
use super::{writers, PluginError};

/// A library that loaded and described itself.
#[derive(Debug, Clone)]
pub struct PluginInfo {
    pub path: PathBuf,
    /// sha256 of the library bytes that were loaded: provenance names the exact handler build.
    pub file_ref: Ref,
    pub manifest: Manifest,
}

impl PluginInfo {
    /// The identity every effect record this plugin runs carries.
    pub fn identity(&self) -> HandlerIdentity {
        HandlerIdentity {
            plugin: self.manifest.name.clone(),
            version: self.manifest.version.clone(),
            library: self.file_ref,
        }
    }
}

/// The result of scanning one library.
#[derive(Debug)]
pub enum Scanned {
    Plugin(PluginInfo, LoadedPlugin),
    Broken(PluginError),
}

/// The default plugin directory: the one holding the running executable.
pub fn default_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A library by its file name's ending, read as bytes: a name that is not UTF-8 is a library
/// all the same, not one skipped without a word. So is a symbolic link whose target cannot be
/// read (dangling, a loop): opening it says why ([`super::OpenedLibrary::open`]), where
/// following it first (`Path::is_file`) had skipped it, and `serve` started without the
/// plugin.
fn is_library(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let name = path.file_name().map(OsStrExt::as_bytes).unwrap_or_default();
    if !(name.ends_with(b".so") || name.ends_with(b".dylib")) {
        return false;
    }
    match std::fs::symlink_metadata(path) {
        Ok(own) if own.file_type().is_symlink() => {
            std::fs::metadata(path).map_or(true, |target| target.is_file())
        }
        Ok(own) => own.is_file(),
        Err(_) => false,
    }
}

/// Load every library in `dir`, in file-name order. A library whose loading (its initialisers
/// and manifest) outlasts `deadline` stops the scan: its code is still running in this process.
///
/// Each library is named before its code runs (stderr for `worldd handlers`, the log for
/// `serve`): one that ends the process while it loads (`exit()`, `abort()` in an
/// initialiser or its manifest) is then the last one named.
pub fn scan(dir: &Path, deadline: Duration, stops: Stops) -> Result<Vec<Scanned>, PluginError> {
    // A relative directory is said with where it was looked for, and why there: it is the
    // working directory's, not the config file's.
    let unreadable = |e: std::io::Error| {
        let whole = match std::path::absolute(dir) {
            Ok(whole) if dir.is_relative() => format!(
                " (looked for at {}: a relative plugin directory is taken from the directory worldd starts in)",
                whole.display()
            ),
            _ => String::new(),
        };
        PluginError::new(dir, format!("cannot read the plugin directory: {e}{whole}"))
    };
    writers::check_dir(dir, &std::fs::metadata(dir).map_err(unreadable)?)?;
    let entries = std::fs::read_dir(dir).map_err(unreadable)?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_library(p))
        .collect();
    paths.sort();
    // Each library is opened at its absolute path, resolved before any library's code runs:
    // one that changes the working directory as it loads must not make the next one another
    // file (or none).
    let dir_at = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let scanned = paths
        .into_iter()
        .map(|p| {
            say_loading(&p, stops);
            let at = p
                .file_name()
                .map_or_else(|| p.clone(), |name| dir_at.join(name));
            within(deadline, &p.clone(), "loading", stops, move || {
                scan_one(&p, &at)
            })
        })
        .collect();
    crate::exit_guard::doing("started its plugins (their constructors, Plugin::new)");
    scanned
}

/// `loading FILE`, said before the library's code runs.
fn say_loading(path: &Path, stops: Stops) {
    let shown = crate::text::one_line(&path.display().to_string()).into_owned();
    crate::exit_guard::doing(&format!("loaded the plugin library {shown}"));
    match stops {
        Stops::Handlers => {
            use std::io::Write;
            // As the command line's messages: where stderr takes nothing, nothing is said.
            let _ = writeln!(std::io::stderr(), "worldd handlers: loading {shown}");
        }
        Stops::Serve | Stops::Trial => {
            tracing::info!(path = %path.display(), "loading plugin library")
        }
    }
}

fn scan_one(path: &Path, at: &Path) -> Scanned {
    let (file_ref, plugin) = match load_hashed(path, at) {
        Ok(loaded) => loaded,
        Err(e) => return Scanned::Broken(e),
    };
    let manifest = match plugin.manifest() {
        Ok(m) => m,
        Err(e) => return Scanned::Broken(PluginError::new(path, super::cut_plugin_text(e))),
    };
    Scanned::Plugin(
        PluginInfo {
            path: path.to_path_buf(),
            file_ref,
            manifest,
        },
        plugin,
    )
}
