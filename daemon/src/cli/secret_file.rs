//! Writing a secret (a session credential) to a file the operator names.
//!
//! The file is readable by its owner only and is never written through anything an attacker
//! could have planted at its name:
//!
//! - the secret goes into a fresh temporary file beside the target, created with `O_EXCL`,
//!   `O_NOFOLLOW` and mode 0600 (set explicitly, whatever the umask), written and fsynced;
//! - the temporary file is renamed over the target and the directory fsynced, so the target is
//!   replaced atomically: a reader sees the old file or the whole new one, and an existing file
//!   of another mode (0644, say) is replaced by a 0600 one rather than rewritten in place;
//! - a target that is a symbolic link is refused (writing through it would put the secret
//!   wherever the link points; `rename` would replace the link, which the operator may not
//!   expect either), as is one that exists and is not a regular file.
//!
//! [`SecretFile::prepare`] does every check and creates the temporary file *before* the secret
//! exists, so a caller can refuse before minting anything; [`SecretFile::commit`] writes it.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a secret file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("refusing to write the credential to {0}: it is a symbolic link (a credential is never written through a link; name the file itself)")]
    Symlink(PathBuf),
    #[error("refusing to write the credential to {0}: it exists and is not a regular file")]
    NotAFile(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The directory it would go into cannot take it: said before anything is asked.
    #[error("cannot write {path}: {why}")]
    Directory { path: PathBuf, why: String },
}

/// A secret file being written: the checked target and its temporary file.
#[derive(Debug)]
pub struct SecretFile {
    target: PathBuf,
    dir: PathBuf,
    temp: PathBuf,
    file: Option<File>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl SecretFile {
    /// Check `target` as [`SecretFile::prepare`] does, creating nothing: for a caller that
    /// asks a question first, so that an answer never comes (an interrupt at the prompt)
    /// leaves no temporary file behind.
    pub fn check(target: &Path) -> Result<(), SecretFileError> {
        check_directory(target)?;
        match std::fs::symlink_metadata(target) {
            Ok(md) if md.file_type().is_symlink() => {
                Err(SecretFileError::Symlink(target.to_path_buf()))
            }
            Ok(md) if !md.is_file() => Err(SecretFileError::NotAFile(target.to_path_buf())),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(SecretFileError::Io {
                path: target.to_path_buf(),
                source,
            }),
        }
    }
}

/// The directory `target` goes into exists, is a directory, and can be written: otherwise
/// the write would fail only after the question, with a bare `No such file or directory`.
fn check_directory(target: &Path) -> Result<(), SecretFileError> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let refuse = |why: String| SecretFileError::Directory {
        path: target.to_path_buf(),
        why,
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(refuse(format!(
            "the directory {} does not exist (create it first, or name a file in an existing directory)",
            dir.display()
        ))),
        Err(e) => Err(refuse(format!("{}: {e}", dir.display()))),
        Ok(md) if !md.is_dir() => Err(refuse(format!("{} is not a directory", dir.display()))),
        Ok(_) => {
            use std::os::unix::ffi::OsStrExt;
            let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
                .map_err(|_| refuse(format!("{} holds a NUL byte", dir.display())))?;
            // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
            if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
                let e = io::Error::last_os_error();
                return Err(refuse(format!(
                    "the directory {} is not writable by you ({e})",
                    dir.display()
                )));
            }
            Ok(())
        }
    }
}

impl SecretFile {
    /// Check `target` and create the temporary file beside it.
    pub fn prepare(target: &Path) -> Result<SecretFile, SecretFileError> {
        let io_err = |source: io::Error| SecretFileError::Io {
            path: target.to_path_buf(),
            source,
        };
        let name = target
            .file_name()
            .ok_or_else(|| SecretFileError::NotAFile(target.to_path_buf()))?;
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        SecretFile::check(target)?;
        let mut temp_name = OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let temp = dir.join(temp_name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
            .map_err(io_err)?;
        let prepared = SecretFile {
            target: target.to_path_buf(),
            dir,
            temp,
            file: Some(file),
        };
        // The umask can only take bits away; set the mode outright anyway.
        if let Some(f) = &prepared.file {
            f.set_permissions(Permissions::from_mode(0o600))
                .map_err(io_err)?;
        }
        Ok(prepared)
    }

    /// Write `contents` and put the file in place.
    pub fn commit(mut self, contents: &[u8]) -> Result<(), SecretFileError> {
        let io_err = |source: io::Error| SecretFileError::Io {
            path: self.target.clone(),
            source,
        };
        let mut file = self
            .file
            .take()
            .ok_or_else(|| io_err(io::ErrorKind::Other.into()))?;
        file.write_all(contents).map_err(io_err)?;
        file.sync_all().map_err(io_err)?;
        drop(file);
        std::fs::rename(&self.temp, &self.target).map_err(io_err)?;
        // Renamed: nothing left for Drop to remove.
        self.temp = PathBuf::new();
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err)
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn a_new_file_is_0600() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ep.session");
        SecretFile::prepare(&p)
            .unwrap()
            .commit(b"secret\n")
            .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"secret\n");
        assert_eq!(mode(&p), 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
    }

    #[test]
    fn an_existing_0644_file_is_replaced_by_a_0600_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ep.session");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        let other = dir.path().join("hard");
        std::fs::hard_link(&p, &other).unwrap();
        SecretFile::prepare(&p).unwrap().commit(b"new\n").unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"new\n");
        // Replaced, not rewritten: another name of the old file keeps the old content.
        assert_eq!(std::fs::read(&other).unwrap(), b"old");
    }

    #[test]
    fn a_symlink_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "victim").unwrap();
        let p = dir.path().join("ep.session");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let e = SecretFile::prepare(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("refusing to write the credential to {}: it is a symbolic link (a credential is never written through a link; name the file itself)", p.display())
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"victim");
        // A dangling link is refused too.
        std::fs::remove_file(&victim).unwrap();
        assert!(matches!(
            SecretFile::prepare(&p),
            Err(SecretFileError::Symlink(_))
        ));
        assert!(!victim.exists());
    }

    #[test]
    fn a_directory_is_refused_and_an_abandoned_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            SecretFile::prepare(dir.path()),
            Err(SecretFileError::NotAFile(_))
        ));
        let p = dir.path().join("ep.session");
        drop(SecretFile::prepare(&p).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(matches!(
            SecretFile::prepare(&dir.path().join("missing/ep.session")),
            Err(SecretFileError::Directory { .. })
        ));
    }
}
