//! Sizes in bytes as an operator writes them: `--store-ceiling 64GiB`, `body_budget_bytes =
//! "16 MiB"`, or a bare number of bytes as before.
//!
//! A unit says which base it means: `KiB`, `MiB`, `GiB`, `TiB` (or `Ki` … `Ti`) are powers of
//! 1024, `kB`, `MB`, `GB`, `TB` powers of 1000, `B` one byte; case does not matter. A bare `K`,
//! `M`, `G` or `T` is refused, because tools disagree on it (systemd and `dd` read `16G` as
//! 16 GiB, Kubernetes as 16 GB) and a limit off by 7 % is found late. A size is a whole
//! number of its unit (no fractions, signs or exponents), and one that does not fit in 64
//! bits is refused rather than wrapped.
//!
//! ```
//! use worldd::byte_size::ByteSize;
//!
//! assert_eq!("64GiB".parse::<ByteSize>().unwrap().get(), 64 << 30);
//! assert_eq!("16 MB".parse::<ByteSize>().unwrap().get(), 16_000_000);
//! assert_eq!("4096".parse::<ByteSize>().unwrap().get(), 4096);
//! assert!("16G".parse::<ByteSize>().unwrap_err().to_string().contains("16GiB"));
//! ```

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A number of bytes, read from a bare number or a number with a unit ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(u64);

impl ByteSize {
    pub const fn new(bytes: u64) -> ByteSize {
        ByteSize(bytes)
    }

    /// The number of bytes.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The size for a person to read, in the largest binary unit it reaches, to one decimal:
    /// `512 B`, `1.5 KiB`, `16.0 GiB`.
    pub fn human(self) -> String {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if self.0 < 1024 {
            return format!("{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        format!("{value:.1} {}", UNITS[unit])
    }

    /// The number of bytes as a `usize`; a size past `usize::MAX` (on a 32-bit target) is
    /// taken as `usize::MAX`, which every limit's range check refuses.
    pub fn get_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// Why a size was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ByteSizeError {
    #[error(
        "{0:?} is not a size: write a whole number of bytes, optionally with a unit ({UNITS})"
    )]
    NotASize(String),
    #[error("{given:?} has the unit {unit:?}, which tools read both ways: write {number}{unit}iB ({number} × 2^{power} bytes) or {number}{unit}B ({number} × 10^{decimal} bytes)")]
    Ambiguous {
        given: String,
        number: String,
        unit: char,
        power: u32,
        decimal: u32,
    },
    #[error("{given:?} has the unit {unit:?}, which is not one of {UNITS}")]
    UnknownUnit { given: String, unit: String },
    #[error("{0:?} is not a size: a size cannot be negative")]
    Negative(String),
    #[error(
        "{0:?} is a fraction: a size is a whole number of its unit (write it in a smaller unit)"
    )]
    Fraction(String),
    #[error("{0:?} is more bytes than 2^64 - 1")]
    TooLarge(String),
}

/// The longest value read as a size, in bytes; longer ones are refused and shown cut here.
const LONGEST: usize = 32;

const UNITS: &str = "B; KiB, MiB, GiB, TiB (powers of 1024); kB, MB, GB, TB (powers of 1000)";

/// The multiplier of `unit` (any case), or why it has none.
fn multiplier(given: &str, number: &str, unit: &str) -> Result<u64, ByteSizeError> {
    let lower = unit.to_ascii_lowercase();
    let binary = |power: u32| Ok(1u64 << power);
    match lower.as_str() {
        "" | "b" => Ok(1),
        "kib" | "ki" => binary(10),
        "mib" | "mi" => binary(20),
        "gib" | "gi" => binary(30),
        "tib" | "ti" => binary(40),
        "kb" => Ok(1_000),
        "mb" => Ok(1_000_000),
        "gb" => Ok(1_000_000_000),
        "tb" => Ok(1_000_000_000_000),
        "k" | "m" | "g" | "t" => {
            let step = "kmgt".find(&lower[..]).unwrap_or(0) as u32 + 1;
            let unit = unit.chars().next().unwrap_or('G').to_ascii_uppercase();
            Err(ByteSizeError::Ambiguous {
                given: given.into(),
                number: number.into(),
                unit,
                power: 10 * step,
                decimal: 3 * step,
            })
        }
        _ => Err(ByteSizeError::UnknownUnit {
            given: given.into(),
            unit: unit.into(),
        }),
    }
}

impl FromStr for ByteSize {
    type Err = ByteSizeError;

    fn from_str(given: &str) -> Result<ByteSize, ByteSizeError> {
        let s = given.trim();
        // The longest size is 20 digits, a space and a unit; a longer value is echoed cut.
        if s.len() > LONGEST {
            return Err(ByteSizeError::NotASize(format!(
                "{}…",
                crate::text::head(s, LONGEST)
            )));
        }
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (number, rest) = s.split_at(digits);
        if number.is_empty() {
            let negative = s
                .strip_prefix('-')
                .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()));
            return Err(if negative {
                ByteSizeError::Negative(given.into())
            } else {
                ByteSizeError::NotASize(given.into())
            });
        }
        if rest.starts_with(['.', ',']) && rest[1..].starts_with(|c: char| c.is_ascii_digit()) {
            return Err(ByteSizeError::Fraction(given.into()));
        }
        let unit = rest.trim_start();
        if !unit.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(ByteSizeError::NotASize(given.into()));
        }
        let times = multiplier(given, number, unit)?;
        let too_large = || ByteSizeError::TooLarge(given.into());
        number
            .parse::<u64>()
            .map_err(|_| too_large())?
            .checked_mul(times)
            .map(ByteSize)
            .ok_or_else(too_large)
    }
}

/// A TOML value: an integer of bytes, or a string read as [`FromStr`] reads it.
impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        struct Size;
        impl Visitor<'_> for Size {
            type Value = ByteSize;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of bytes, or a string such as \"64MiB\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(ByteSizeError::Negative(v.to_string())))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn size(s: &str) -> Result<u64, String> {
        s.parse::<ByteSize>()
            .map(ByteSize::get)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn sizes_read_with_each_unit_and_without_one() {
        for (given, bytes) in [
            ("0", 0),
            ("4096", 4096),
            ("17179869184", 16 << 30),
            ("1B", 1),
            ("512 b", 512),
            ("1KiB", 1024),
            ("1ki", 1024),
            ("16 MiB", 16 << 20),
            ("64GiB", 64 << 30),
            ("64gib", 64 << 30),
            ("2TiB", 2 << 40),
            ("1kB", 1000),
            ("1KB", 1000),
            ("100MB", 100_000_000),
            ("16 GB", 16_000_000_000),
            ("3TB", 3_000_000_000_000),
            ("  8MiB  ", 8 << 20),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(size(given), Ok(bytes), "{given}");
        }
    }

    #[test]
    fn a_size_reads_in_the_largest_binary_unit_it_reaches() {
        for (bytes, shown) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (20 << 20, "20.0 MiB"),
            (16 << 30, "16.0 GiB"),
            (3 << 40, "3.0 TiB"),
            (5000 << 40, "5000.0 TiB"),
        ] {
            assert_eq!(ByteSize::new(bytes).human(), shown);
        }
    }

    #[test]
    fn a_bare_unit_letter_is_refused_with_both_readings_spelled_out() {
        assert_eq!(
            size("16G").unwrap_err(),
            "\"16G\" has the unit 'G', which tools read both ways: write 16GiB (16 × 2^30 bytes) or 16GB (16 × 10^9 bytes)"
        );
        assert_eq!(
            size("512k").unwrap_err(),
            "\"512k\" has the unit 'K', which tools read both ways: write 512KiB (512 × 2^10 bytes) or 512KB (512 × 10^3 bytes)"
        );
        assert!(size("1 t").unwrap_err().contains("2^40"));
        assert!(size("3M")
            .unwrap_err()
            .contains("3MiB (3 × 2^20 bytes) or 3MB (3 × 10^6 bytes)"));
    }

    #[test]
    fn what_is_not_a_whole_size_is_refused_by_what_it_is() {
        assert_eq!(
            size("1.5GiB").unwrap_err(),
            "\"1.5GiB\" is a fraction: a size is a whole number of its unit (write it in a smaller unit)"
        );
        assert!(size("2,5MB").unwrap_err().contains("is a fraction"));
        assert_eq!(
            size("-1").unwrap_err(),
            "\"-1\" is not a size: a size cannot be negative"
        );
        for not_a_size in [
            "", "GiB", "-", "+5", "1e9", "0x100", "16 Gi B", "12MiB!", "1 2",
        ] {
            assert!(
                size(not_a_size).unwrap_err().contains("is not a size"),
                "{not_a_size:?}: {:?}",
                size(not_a_size)
            );
        }
        assert_eq!(
            size("16 gigs").unwrap_err(),
            format!("\"16 gigs\" has the unit \"gigs\", which is not one of {UNITS}")
        );
        assert!(size("16PiB").unwrap_err().contains("which is not one of"));
        assert_eq!(
            size("18446744073709551616").unwrap_err(),
            "\"18446744073709551616\" is more bytes than 2^64 - 1"
        );
        assert!(size("16777216TiB")
            .unwrap_err()
            .contains("more bytes than 2^64 - 1"));
        // A value no size is as long as is refused whole, and shown cut.
        let long = format!("{}G", "9".repeat(100_000));
        assert_eq!(
            size(&long).unwrap_err(),
            format!("\"{}…\" is not a size: write a whole number of bytes, optionally with a unit ({UNITS})", "9".repeat(32))
        );
    }

    #[test]
    fn a_toml_value_is_an_integer_or_a_string_with_a_unit() {
        #[derive(Deserialize)]
        struct T {
            a: ByteSize,
        }
        let read = |v: &str| toml::from_str::<T>(&format!("a = {v}")).map(|t| t.a.get());
        assert_eq!(read("1048576").unwrap(), 1 << 20);
        assert_eq!(read("\"1 MiB\"").unwrap(), 1 << 20);
        assert_eq!(read("\"1048576\"").unwrap(), 1 << 20);
        let negative = read("-1").unwrap_err().to_string();
        assert!(
            negative.contains("\"-1\" is not a size: a size cannot be negative"),
            "{negative}"
        );
        let ambiguous = read("\"16G\"").unwrap_err().to_string();
        assert!(ambiguous.contains("write 16GiB"), "{ambiguous}");
        let float = read("1.5").unwrap_err().to_string();
        assert!(
            float.contains("a number of bytes, or a string such as \"64MiB\""),
            "{float}"
        );
    }

    proptest! {
        #[test]
        fn every_number_with_every_unit_is_that_many_bytes_or_refused_as_too_large(
            n in any::<u64>(),
            unit in prop::sample::select(vec![
                ("", 1u64), ("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30),
                ("TiB", 1 << 40), ("kB", 1_000), ("MB", 1_000_000), ("GB", 1_000_000_000),
                ("TB", 1_000_000_000_000),
            ]),
            space in any::<bool>(),
        ) {
            let given = format!("{n}{}{}", if space { " " } else { "" }, unit.0);
            match n.checked_mul(unit.1) {
                Some(bytes) => prop_assert_eq!(size(&given), Ok(bytes)),
                None => prop_assert!(size(&given).unwrap_err().contains("more bytes than")),
            }
        }
    }
}
