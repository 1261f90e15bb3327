//! One event, one line, even after a write that stopped part-way.
//!
//! A log event is handed to its writer whole (`write_all`), but the kernel may take only part
//! of it: a disk that fills mid-line takes the rest of the file's last block, and the next write
//! fails. The fragment then stays without its newline, and the first event written once there
//! is room again would be glued onto it: a text reader takes the fragment's timestamp and level
//! for it, a JSON collector rejects the joined line, and the event lost is typically the one
//! that says what happened. So an event cut short is remembered, and the next event that is
//! written starts by ending the fragment's line.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the last event written stopped part-way through its line.
static TORN: AtomicBool = AtomicBool::new(false);

/// A writer of one event: ends a line left torn by the event before it, and marks its own
/// line torn when a write fails after part of it went out.
pub(super) struct EventWriter<W> {
    to: W,
    torn: &'static AtomicBool,
    /// Some of this event's bytes were taken.
    wrote: bool,
}

impl<W> EventWriter<W> {
    pub(super) fn new(to: W) -> EventWriter<W> {
        EventWriter::with_flag(to, &TORN)
    }

    fn with_flag(to: W, torn: &'static AtomicBool) -> EventWriter<W> {
        EventWriter {
            to,
            torn,
            wrote: false,
        }
    }

    pub(super) fn inner(&self) -> &W {
        &self.to
    }
}

impl<W: Write> Write for EventWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.wrote && self.torn.load(Ordering::Acquire) {
            // The line before this event ends first; if it cannot, neither can this event.
            match self.to.write(b"\n") {
                Ok(1) => self.torn.store(false, Ordering::Release),
                Ok(_) => return Err(io::ErrorKind::WriteZero.into()),
                Err(e) => return Err(e),
            }
        }
        match self.to.write(buf) {
            Ok(n) => {
                if n > 0 {
                    self.wrote = true;
                }
                Ok(n)
            }
            Err(e) => {
                if self.wrote {
                    self.torn.store(true, Ordering::Release);
                }
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.to.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file on a disk that takes `room` more bytes, then fails with "no space".
    struct FillingDisk<'a> {
        bytes: &'a mut Vec<u8>,
        room: usize,
    }

    impl Write for FillingDisk<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = buf.len().min(self.room);
            self.bytes.extend_from_slice(&buf[..n]);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn event(bytes: &mut Vec<u8>, room: usize, torn: &'static AtomicBool, line: &str) -> bool {
        let mut w = EventWriter::with_flag(FillingDisk { bytes, room }, torn);
        w.write_all(line.as_bytes()).is_ok()
    }

    /// A disk that filled mid-line left the line's fragment without its newline, and the first
    /// event written once there was room again was glued onto it ("one event is always one
    /// line" broke, and a JSON collector rejected both). The next event now ends the fragment's
    /// line first, so only the event the disk cut short is damaged.
    #[test]
    fn an_event_cut_short_by_a_full_disk_does_not_glue_the_next_one_onto_its_fragment() {
        static TORN: AtomicBool = AtomicBool::new(false);
        let mut file = Vec::new();
        assert!(event(&mut file, usize::MAX, &TORN, "{\"n\":1}\n"));
        // The disk takes 5 bytes of the second event, then is full.
        assert!(!event(&mut file, 5, &TORN, "{\"n\":2,\"x\":\"long\"}\n"));
        // Full: the third event is lost whole, and changes nothing.
        assert!(!event(&mut file, 0, &TORN, "{\"n\":3}\n"));
        // Room again.
        assert!(event(&mut file, usize::MAX, &TORN, "{\"n\":4}\n"));
        assert!(event(&mut file, usize::MAX, &TORN, "{\"n\":5}\n"));
        let text = String::from_utf8(file).unwrap();
        assert_eq!(text, "{\"n\":1}\n{\"n\":\n{\"n\":4}\n{\"n\":5}\n");
        let whole: Vec<_> = text
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
            .collect();
        assert_eq!(whole, ["{\"n\":1}", "{\"n\":4}", "{\"n\":5}"]);
    }

    /// A write refused before any byte of the event went out leaves nothing to end.
    #[test]
    fn an_event_refused_whole_leaves_no_line_to_end() {
        static TORN: AtomicBool = AtomicBool::new(false);
        let mut file = Vec::new();
        assert!(!event(&mut file, 0, &TORN, "lost\n"));
        assert!(event(&mut file, usize::MAX, &TORN, "kept\n"));
        assert_eq!(file, b"kept\n");
    }
}
