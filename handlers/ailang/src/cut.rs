//! What a run's result keeps of the child's output. Each stream may hold 8 MiB, and JSON
//! escaping makes a control byte six (`\u0000`): two full streams of them were a 100 MB
//! answer the host refused after the plugin had built it. A result keeps at most what the
//! coordinator accepts (1 MiB with its `world` block), measured as escaped JSON before any
//! string is built, and reports the bytes it left out.

/// The coordinator's cap on a whole tool result: its canonical JSON, `world` block included.
pub const RESULT_CAP: usize = 1 << 20;

/// What a policy-tool op's result, stamps included, leaves of [`RESULT_CAP`] for the `world`
/// block the daemon adds (one effect's is under 200 bytes), so that a result over the cap is
/// this handler's failure in its own words, not one the daemon finds after the effect.
pub const WORLD_ROOM: usize = 4 << 10;

/// What a run's result keeps aside for everything but the two streams' text: the `world`
/// block, the keys, the `cut` report, and the differences between this crate's JSON and the
/// canonical form (numbers).
pub const RESERVED: usize = 64 << 10;

/// The most a run's outcome envelope (`admitted`, `exit_code`, `decision`, `limit`, `policy`)
/// may take as JSON; `ailang` writes a few hundred bytes, and a larger one fails the effect.
pub const ENVELOPE_MAX: usize = 64 << 10;

/// Which end of a stream a cut keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The beginning (stdout: what the program printed first).
    Start,
    /// The end (stderr: the error and the `policy:` line come last).
    End,
}

/// What was kept of a stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Kept {
    /// The kept bytes as text (invalid UTF-8 replaced by U+FFFD).
    pub text: String,
    /// How many of the stream's bytes were left out.
    pub dropped: usize,
}

/// Bytes `b` (an ASCII byte) takes in a JSON string: serde_json's and canonical JSON's
/// escaping (short forms for `"` `\` and five controls, `\u00xx` for the other controls).
fn escaped(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0c | b'\r' => 2,
        0..=0x1f => 6,
        _ => 1,
    }
}

/// The stream as the units a cut may fall between, each (its bytes, its escaped length): a
/// character, or an invalid sequence (one U+FFFD, three bytes, when decoded).
fn units(bytes: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    bytes.utf8_chunks().flat_map(|chunk| {
        let chars = chunk.valid().chars().map(|c| match c.len_utf8() {
            1 => (1, escaped(c as u8)),
            n => (n, n),
        });
        let invalid = chunk.invalid().len();
        chars.chain((invalid > 0).then_some((invalid, 3)))
    })
}

/// The length of `bytes` as a JSON string (decoded as [`String::from_utf8_lossy`] does),
/// quotes included, without building it.
pub fn quoted_len(bytes: &[u8]) -> usize {
    2 + units(bytes).map(|(_, e)| e).sum::<usize>()
}

/// The most of `bytes` whose JSON string, quotes included, takes at most `budget` bytes,
/// from its start or its end, cut between characters.
pub fn keep(bytes: &[u8], budget: usize, end: Keep) -> Kept {
    let room = budget.saturating_sub(2);
    let range = match end {
        Keep::Start => {
            let (mut raw, mut used) = (0, 0);
            for (r, e) in units(bytes) {
                if used + e > room {
                    break;
                }
                used += e;
                raw += r;
            }
            0..raw
        }
        Keep::End => {
            let mut over = (quoted_len(bytes) - 2).saturating_sub(room);
            let mut raw = 0;
            for (r, e) in units(bytes) {
                if over == 0 {
                    break;
                }
                over = over.saturating_sub(e);
                raw += r;
            }
            raw..bytes.len()
        }
    };
    Kept {
        dropped: bytes.len() - range.len(),
        text: String::from_utf8_lossy(&bytes[range]).into_owned(),
    }
}

/// How the streams share `room` bytes of JSON when their quoted lengths `a` and `b` do not
/// both fit: each gets half, and a stream that needs less than half leaves the rest to the
/// other.
pub fn shares(a: usize, b: usize, room: usize) -> (usize, usize) {
    let half = room / 2;
    if a + b <= room {
        (a, b)
    } else if a <= half {
        (a, room - a)
    } else if b <= half {
        (room - b, b)
    } else {
        (half, room - half)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_kit::serde_json;

    fn json_len(bytes: &[u8]) -> usize {
        serde_json::to_string(&String::from_utf8_lossy(bytes))
            .unwrap()
            .len()
    }

    #[test]
    fn quoted_len_is_what_serde_json_writes() {
        let mut all: Vec<u8> = (0..=255u8).collect();
        all.extend_from_slice("é€😀\u{2028}".as_bytes());
        all.extend_from_slice(b"\xe2\x82A\xf0\x9f\x98");
        assert_eq!(quoted_len(&all), json_len(&all));
        assert_eq!(quoted_len(b""), 2);
    }

    #[test]
    fn a_cut_fits_its_budget_falls_between_characters_and_counts_what_it_left_out() {
        let stream = [
            vec![0u8; 1000],
            "é😀x".repeat(300).into_bytes(),
            vec![0xff; 200],
            b"\npolicy: {}\n".to_vec(),
        ]
        .concat();
        for budget in [0, 1, 2, 3, 7, 8, 100, 1001, 4000, 9000] {
            for end in [Keep::Start, Keep::End] {
                let kept = keep(&stream, budget, end);
                let len = serde_json::to_string(&kept.text).unwrap().len();
                assert!(len <= budget.max(2), "{budget} {end:?}: {len}");
                // Nothing more would have fitted: one more unit passes the budget.
                assert!(
                    len + 6 > budget || kept.dropped == 0,
                    "{budget} {end:?}: {len}"
                );
                let raw = stream.len() - kept.dropped;
                let part = match end {
                    Keep::Start => &stream[..raw],
                    Keep::End => &stream[kept.dropped..],
                };
                assert_eq!(kept.text, String::from_utf8_lossy(part), "{budget} {end:?}");
            }
        }
        let whole = keep(&stream, quoted_len(&stream), Keep::End);
        assert_eq!(
            (whole.dropped, whole.text.len()),
            (0, String::from_utf8_lossy(&stream).len())
        );
        assert!(keep(&stream, 40, Keep::End)
            .text
            .ends_with("\npolicy: {}\n"));
    }

    #[test]
    fn streams_share_the_room_and_lend_what_they_do_not_need() {
        assert_eq!(shares(10, 20, 100), (10, 20));
        assert_eq!(shares(10, 200, 100), (10, 90));
        assert_eq!(shares(200, 10, 100), (90, 10));
        assert_eq!(shares(200, 300, 100), (50, 50));
    }
}
