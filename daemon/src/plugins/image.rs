//! A plugin library's bytes, copied once into a sealed memory file (Linux `memfd`) that the
//! dynamic loader then maps: the code that runs is exactly the bytes that were hashed, and
//! stays so for the life of the process.
//!
//! Mapping the library's own file left the running code at the mercy of that file. The loader
//! maps it privately, but a private mapping shows every later write to the file in the pages
//! the process has not written itself; so a library rewritten in place (as `cp` does over an
//! installed plugin, or any write between the hash and the mapping) became code of another
//! build than the hash every effect record names, and the daemon crashed at its next call. A
//! sealed copy cannot be written, grown or shrunk by anyone, this process included.

use std::fs::File;
use std::io::{self, Read, Write};

use broker_core::object::Ref;

/// The largest library copied. A plugin is a few megabytes (the shipped ones 1–2 MiB built
/// for release, about 15 MiB with debug information); a larger file in the plugin directory is
/// no plugin, and copying it would take its size in memory before the loader could say so.
pub const MAX_LIBRARY_BYTES: u64 = 512 << 20;

/// A library's bytes as the loader will map them, and their sha256.
pub struct Image {
    /// A memory file sealed against every change, or (where the system has none) the library's
    /// own open file.
    pub file: File,
    pub file_ref: Ref,
}

/// Why a library's bytes could not be taken.
#[derive(Debug)]
pub enum ImageError {
    /// Reading the library failed.
    Read(io::Error),
    /// Writing the copy failed (no memory left for it).
    Write(io::Error),
    /// The library held more than the bound (it grew past it while it was read, its size
    /// having been checked first).
    TooLarge,
}

/// What the loader is to map of `library`, at most `max` bytes of it: a sealed copy named after
/// `name` (shown in `/proc/PID/maps` as `/memfd:worldd-plugin:NAME`) where the system has sealed
/// memory files; elsewhere (a kernel without `memfd_create`, one that forbids executable memory
/// files, not Linux) the library's own file. Either way hashed as it is read.
pub fn of(name: &str, mut library: File, max: u64) -> Result<Image, ImageError> {
    if let Some(image) = sealed_copy(name, &mut library, max)? {
        return Ok(image);
    }
    use std::io::Seek;
    library.rewind().map_err(ImageError::Read)?;
    let file_ref = read_hashed(&mut library, max, &mut io::sink())?;
    Ok(Image {
        file: library,
        file_ref,
    })
}

/// Copy `library` into a new sealed memory file, hashing it on the way; `None` (said in the
/// log) where the system offers no such file.
#[cfg(target_os = "linux")]
fn sealed_copy(name: &str, library: &mut File, max: u64) -> Result<Option<Image>, ImageError> {
    use std::os::fd::AsRawFd;
    let unavailable = |why: io::Error| {
        tracing::debug!(
            library = name,
            "mapped from its own file (no sealed copy: {why})"
        );
        Ok(None)
    };
    let mut file = match memory_file(name) {
        Ok(file) => file,
        Err(why) => return unavailable(why),
    };
    let file_ref = read_hashed(library, max, &mut file)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS on a descriptor `file` owns; it reads no memory.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return unavailable(io::Error::last_os_error());
    }
    Ok(Some(Image { file, file_ref }))
}

/// No sealed memory files here.
#[cfg(not(target_os = "linux"))]
fn sealed_copy(_name: &str, _library: &mut File, _max: u64) -> Result<Option<Image>, ImageError> {
    Ok(None)
}

/// Read `from` to its end into `into`, at most `max` bytes, and hash what was read.
fn read_hashed(from: &mut File, max: u64, into: &mut impl Write) -> Result<Ref, ImageError> {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0u64;
    let mut from = from.take(max.saturating_add(1));
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ImageError::Read(e)),
        };
        read += n as u64;
        if read > max {
            return Err(ImageError::TooLarge);
        }
        hasher.update(&buf[..n]);
        into.write_all(&buf[..n]).map_err(ImageError::Write)?;
    }
    Ok(Ref::from_bytes(hasher.finalize().into()))
}

/// A new memory file that may be sealed, and executed: `MFD_EXEC` says so explicitly where the
/// kernel knows the flag (6.3 and later log a warning without it, and refuse executable memory
/// files altogether under `vm.memfd_noexec = 2`); older kernels refuse the flag itself.
#[cfg(target_os = "linux")]
fn memory_file(name: &str) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(format!("worldd-plugin:{name}"))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let create = |flags: libc::c_uint| {
        // SAFETY: `name` is a valid NUL-terminated string for the call's duration.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: `fd` is a new descriptor nothing else owns.
            Ok(unsafe { File::from_raw_fd(fd) })
        }
    };
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    match create(flags | libc::MFD_EXEC) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => create(flags),
        other => other,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Seek;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_sealed_copy_holds_the_bytes_it_hashed_and_refuses_every_change() {
        let mut source = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        source.write_all(&bytes).unwrap();
        source.rewind().unwrap();

        let Ok(mut image) = of("test.so", source.try_clone().unwrap(), MAX_LIBRARY_BYTES) else {
            panic!("no sealed copy")
        };
        use sha2::Digest;
        let expected: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        assert_eq!(image.file_ref, Ref::from_bytes(expected));
        let mut copied = Vec::new();
        image.file.rewind().unwrap();
        image.file.read_to_end(&mut copied).unwrap();
        assert_eq!(copied, bytes);

        // Rewriting the source changes nothing in the copy.
        source.rewind().unwrap();
        source.write_all(&[0u8; 1024]).unwrap();
        image.file.rewind().unwrap();
        copied.clear();
        image.file.read_to_end(&mut copied).unwrap();
        assert_eq!(copied, bytes);

        // The copy itself can be neither written, shrunk, grown nor unsealed.
        let fd = image.file.as_raw_fd();
        // SAFETY: pwrite from a live buffer into a descriptor `image` owns.
        let wrote = unsafe { libc::pwrite(fd, b"x".as_ptr().cast(), 1, 0) };
        assert_eq!(wrote, -1);
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
        assert!(image.file.set_len(10).is_err());
        assert!(image.file.set_len(300_000).is_err());
        // SAFETY: F_ADD_SEALS on a descriptor `image` owns; it reads no memory.
        let unsealed = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, 0) };
        assert_eq!(unsealed, -1);
    }

    #[test]
    fn a_library_past_the_bound_is_not_copied_whole() {
        let mut source = tempfile::tempfile().unwrap();
        source.write_all(&[7u8; 2000]).unwrap();
        source.rewind().unwrap();
        assert!(matches!(
            of("big.so", source.try_clone().unwrap(), 1999),
            Err(ImageError::TooLarge)
        ));
        source.rewind().unwrap();
        assert!(of("big.so", source, 2000).is_ok());
    }
}
