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

/// Whether `file` (the sealed copy) names `$ORIGIN` in its dynamic section's RUNPATH or RPATH.
/// Read only after a failed load, to say why. The entries themselves are read, not the whole
/// file searched: a library holding the text `$ORIGIN` elsewhere (a message, a doc string)
/// was given the hint though its loader never looked there.
fn names_origin(file: &std::fs::File) -> bool {
    search_paths(file).is_some_and(|paths| {
        paths.iter().any(|p| {
            p.windows(7).any(|w| w == b"$ORIGIN") || p.windows(9).any(|w| w == b"${ORIGIN}")
        })
    })
}

/// The RUNPATH and RPATH strings of a 64-bit little-endian ELF file's dynamic section (the
/// only shape this daemon loads); `None` where the file is not one, or does not read as one.
fn search_paths(file: &std::fs::File) -> Option<Vec<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: u64 = 0;
    const DT_STRTAB: u64 = 5;
    const DT_RPATH: u64 = 15;
    const DT_RUNPATH: u64 = 29;
    const MOST_PATHS: usize = 16;
    let read = |at: u64, len: usize| -> Option<Vec<u8>> {
        let mut bytes = vec![0u8; len];
        let n = file.read_at(&mut bytes, at).ok()?;
        bytes.truncate(n);
        Some(bytes)
    };
    let u16_at =
        |b: &[u8], at: usize| Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?));
    let u32_at =
        |b: &[u8], at: usize| Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let u64_at =
        |b: &[u8], at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
    let head = read(0, 64)?;
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if head.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(&head, 32)?, u16_at(&head, 54)?, u16_at(&head, 56)?);
    let (phentsize, phnum) = (usize::from(phentsize), usize::from(phnum));
    // A header's sizes are the file's word: a table of 64 K entries of 64 KiB each would be
    // 4 GiB to read.
    if phentsize < 56 || phentsize * phnum > 1 << 20 {
        return None;
    }
    let table = read(phoff, phentsize * phnum)?;
    let (mut loads, mut dynamic) = (Vec::new(), None);
    for ph in table.chunks_exact(phentsize) {
        let (offset, vaddr, filesz) = (u64_at(ph, 8)?, u64_at(ph, 16)?, u64_at(ph, 32)?);
        match u32_at(ph, 0)? {
            PT_LOAD => loads.push((vaddr, offset, filesz)),
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    let (offset, size) = dynamic?;
    let entries = read(offset, usize::try_from(size.min(1 << 20)).ok()?)?;
    let (mut strtab, mut at) = (None, Vec::new());
    for entry in entries.chunks_exact(16) {
        match u64_at(entry, 0)? {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(u64_at(entry, 8)?),
            // A real library has one RUNPATH and at most one RPATH (the loader keeps one of
            // each); a section of 65,536 of them read 4 KiB each, 256 MiB held at once.
            DT_RPATH | DT_RUNPATH if at.len() < MOST_PATHS => at.push(u64_at(entry, 8)?),
            _ => {}
        }
    }
    // DT_STRTAB is an address: the file offset is found through the segment that loads it.
    let strtab = strtab?;
    // The segment's offset is the file's word too: a sum past 2^64 is no place in it.
    let strtab = loads.iter().find_map(|&(vaddr, offset, filesz)| {
        (strtab >= vaddr && strtab - vaddr < filesz)
            .then_some(strtab - vaddr)
            .and_then(|into| into.checked_add(offset))
    })?;
    at.into_iter()
        .map(|name| {
            let mut text = read(strtab.checked_add(name)?, 4096)?;
            text.truncate(text.iter().position(|&b| b == 0)?);
            text.shrink_to_fit();
            Some(text)
        })
        .collect()
}

/// Open the file at `at` (said as `path`), hash the bytes read from the open file, and load
/// that same file.
pub(super) fn load_hashed(path: &Path, at: &Path) -> Result<(Ref, LoadedPlugin), PluginError> {
    OpenedLibrary::open_at(path, at)?.load()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    fn file_of(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    /// A library's headers are its author's word: sizes that claim 4 GiB of program headers,
    /// a dynamic section past the end of the file, or no ELF at all name no search path, and
    /// panic nowhere.
    #[test]
    fn a_library_whose_headers_lie_names_no_search_path() {
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        // e_phoff 64, e_phentsize 65535, e_phnum 65535.
        head[32..40].copy_from_slice(&64u64.to_le_bytes());
        head[54..56].copy_from_slice(&u16::MAX.to_le_bytes());
        head[56..58].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(super::search_paths(&file_of(&head)), None);
        // One PT_DYNAMIC header whose section lies past the end of the file.
        head[54..56].copy_from_slice(&56u16.to_le_bytes());
        head[56..58].copy_from_slice(&1u16.to_le_bytes());
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&2u32.to_le_bytes());
        ph[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        ph[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        let file = [head.clone(), ph].concat();
        assert_eq!(super::search_paths(&file_of(&file)), None);
        assert!(!super::names_origin(&file_of(&file)));
        for junk in [&b""[..], b"\x7fELF", b"$ORIGIN $ORIGIN", &[0xff; 200]] {
            assert_eq!(super::search_paths(&file_of(junk)), None);
        }
    }

    /// A dynamic section of thousands of RUNPATH entries (a 1 MiB section holds 65,536) read
    /// 4 KiB for each and held them all: 256 MiB from a 1 MiB file. At most 16 are read.
    #[test]
    fn a_dynamic_section_of_thousands_of_runpaths_reads_sixteen() {
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        head[32..40].copy_from_slice(&64u64.to_le_bytes());
        head[54..56].copy_from_slice(&56u16.to_le_bytes());
        head[56..58].copy_from_slice(&2u16.to_le_bytes());
        let header = |kind: u32, offset: u64, filesz: u64| {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&kind.to_le_bytes());
            ph[8..16].copy_from_slice(&offset.to_le_bytes());
            ph[32..40].copy_from_slice(&filesz.to_le_bytes());
            ph
        };
        // The string table right after the headers: one path; then the dynamic section.
        let strings = b"$ORIGIN/lib\0".to_vec();
        let strtab = 64 + 2 * 56;
        let dynamic_at = strtab + strings.len() as u64;
        let mut words = vec![5u64, strtab];
        for _ in 0..10_000 {
            words.extend([29, 0]);
        }
        words.extend([0, 0]);
        let dynamic: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let len = dynamic_at + dynamic.len() as u64;
        let file = [
            head,
            header(2, dynamic_at, dynamic.len() as u64),
            // Addresses are file offsets: one segment maps the whole file at 0.
            header(1, 0, len),
            strings,
            dynamic,
        ]
        .concat();
        let paths = super::search_paths(&file_of(&file)).unwrap();
        assert_eq!(paths.len(), 16);
        assert!(paths.iter().all(|p| p == b"$ORIGIN/lib"));
        assert!(super::names_origin(&file_of(&file)));
    }

    /// A loadable segment whose file offset is near 2^64: the string table's offset through it
    /// would overflow (a panic in a build with overflow checks, a wrong read without): no
    /// search path.
    #[test]
    fn a_segment_offset_that_overflows_names_no_search_path() {
        let mut head = vec![0u8; 64];
        head[..6].copy_from_slice(b"\x7fELF\x02\x01");
        head[32..40].copy_from_slice(&64u64.to_le_bytes());
        head[54..56].copy_from_slice(&56u16.to_le_bytes());
        head[56..58].copy_from_slice(&2u16.to_le_bytes());
        let header = |kind: u32, offset: u64, vaddr: u64, filesz: u64| {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&kind.to_le_bytes());
            ph[8..16].copy_from_slice(&offset.to_le_bytes());
            ph[16..24].copy_from_slice(&vaddr.to_le_bytes());
            ph[32..40].copy_from_slice(&filesz.to_le_bytes());
            ph
        };
        // The dynamic section right after the two headers: DT_STRTAB at address 16, one
        // DT_RUNPATH; the one PT_LOAD maps address 0 from file offset 2^64 - 1.
        let dynamic = [5u64, 16, 29, 0, 0, 0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<u8>>();
        let file = [
            head,
            header(2, 64 + 2 * 56, 0, dynamic.len() as u64),
            header(1, u64::MAX, 0, 1 << 40),
            dynamic,
        ]
        .concat();
        assert_eq!(super::search_paths(&file_of(&file)), None);
        assert!(!super::names_origin(&file_of(&file)));
    }
}
