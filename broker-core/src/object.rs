//! Content addresses (`sha256:` refs) and stored objects.
//!
//! A [`Ref`] is `sha256:` followed by 64 lowercase hex digits of SHA-256 over the payload bytes,
//! with no domain prefix. An [`Object`] is the unit the store keeps: the payload plus the
//! semantic id that says how to read it, `interfaceHash = sha256(semanticId)`, and the
//! provenance of its first writer.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::canon::{self, CanonError};

/// Semantic ids of every object kind the broker writes.
pub mod sid {
    pub const INVOCATION_INPUT: &str = "world/invocation-input/v1";
    pub const INVOCATION_OUTPUT: &str = "world/invocation-output/v1";
    pub const INVOCATION_RECORD: &str = "world/invocation-record/v2";
    pub const EFFECT_PLAN: &str = "world/effect-plan/v1";
    pub const EFFECT_REQUEST: &str = "world/effect-request/v1";
    pub const EFFECT_RESULT: &str = "world/effect-result/v1";
    pub const EFFECT_RECORD: &str = "world/effect-record/v1";
    pub const TRANSITION: &str = "world/transition/v1";
    /// A registry revision of earlier builds, each tool's descriptor copied into it: read, no
    /// longer written.
    pub const TRANSITION_REGISTRY: &str = "world/transition-registry/v1";
    /// A registry revision listing each tool by its refs (`crate::registry`).
    pub const TRANSITION_REGISTRY_V2: &str = "world/transition-registry/v2";
    pub const INTERPRETER: &str = "world/plan-interpreter/v1";
    pub const GENESIS: &str = "world/genesis/v1";
}

/// A content address: SHA-256 of some bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ref([u8; 32]);

/// Why a text is not a ref. Display is `hashref: <reason>: "<text>"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hashref: {reason}: {text:?}")]
pub struct RefError {
    pub reason: &'static str,
    pub text: String,
}

impl Ref {
    /// The all-zero ref: the `prevEntryHash` of the genesis entry.
    pub const ZERO: Ref = Ref([0; 32]);

    /// The ref of `bytes`.
    pub fn of(bytes: &[u8]) -> Ref {
        Ref(Sha256::digest(bytes).into())
    }

    /// The ref of the canonical JSON form of `value`.
    pub fn of_json(value: &serde_json::Value) -> Result<Ref, CanonError> {
        Ok(Ref::of(&canon::to_vec(value)?))
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Ref {
        Ref(bytes)
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Ref> {
        <[u8; 32]>::try_from(bytes).ok().map(Ref)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex digits, without the `sha256:` prefix.
    pub fn hex(&self) -> String {
        self.text().as_str()[PREFIX.len()..].to_owned()
    }

    /// `sha256:` + the digest in hex, without allocating (refs are printed on every hot path:
    /// JSON fields, log lines, verification).
    fn text(&self) -> RefText {
        let mut buf = [0u8; PREFIX.len() + 64];
        buf[..PREFIX.len()].copy_from_slice(PREFIX.as_bytes());
        hex_into(&self.0, &mut buf[PREFIX.len()..]);
        RefText(buf)
    }

    /// `sha256:` + the first `n` hex digits, for human-readable output.
    pub fn short(&self, n: usize) -> String {
        let hex = self.hex();
        format!("sha256:{}…", &hex[..n.min(64)])
    }
}

const PREFIX: &str = "sha256:";
const HEX: &[u8; 16] = b"0123456789abcdef";

/// `bytes` in lowercase hex into `out`, which is twice as long (a shorter `out` takes the hex
/// of as many bytes as fit). Four bytes a step: each nibble is spread into a byte of its own
/// and made a digit by arithmetic, where a table takes a byte at a time. Every ref printed
/// (records, entries, answers) and every credential id goes through here.
pub(crate) fn hex_into(bytes: &[u8], out: &mut [u8]) {
    let mut chunks = bytes.chunks_exact(4);
    let mut digits = out.chunks_exact_mut(8);
    for (chunk, digits) in (&mut chunks).zip(&mut digits) {
        let mut four = [0u8; 4];
        four.copy_from_slice(chunk);
        digits.copy_from_slice(&hex8(u32::from_be_bytes(four)));
    }
    let rest = &mut out[bytes.len() / 4 * 8..];
    for (b, pair) in chunks.remainder().iter().zip(rest.chunks_exact_mut(2)) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0xf)];
    }
}

/// The eight hex digits of `v`, most significant first.
fn hex8(v: u32) -> [u8; 8] {
    const NIBBLES: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut x = u64::from(v);
    // Each 16-bit half, then each byte, then each nibble into a byte of its own, in order.
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & NIBBLES;
    // 1 in each byte whose nibble is 10 or more (adding 6 carries it into bit 4).
    let letters = ((x + 6 * ONES) >> 4) & ONES;
    (x + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
}

/// A ref's text form on the stack.
struct RefText([u8; PREFIX.len() + 64]);

impl RefText {
    fn as_str(&self) -> &str {
        // Only ASCII is ever written into the buffer.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

/// The text form (`sha256:` + the digest in hex), pushed without `fmt`.
impl canon::Plain for Ref {
    fn push_plain(&self, out: &mut String) {
        out.push_str(self.text().as_str());
    }
}

impl fmt::Debug for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Ref {
    type Err = RefError;

    fn from_str(text: &str) -> Result<Ref, RefError> {
        let err = |reason| RefError {
            reason,
            text: text.to_owned(),
        };
        if text.is_empty() {
            return Err(err("empty ref"));
        }
        let Some((algo, digest)) = text.split_once(':') else {
            return Err(err("missing algorithm prefix"));
        };
        if algo != "sha256" {
            return Err(err("unsupported algorithm"));
        }
        let digest = digest.as_bytes();
        let bad = || err("digest must be 64 lowercase hex digits");
        if digest.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(digest.chunks_exact(2)) {
            *o = (nibble(pair[0]).ok_or_else(bad)? << 4) | nibble(pair[1]).ok_or_else(bad)?;
        }
        Ok(Ref(out))
    }
}

/// One lowercase hex digit's value (refs are canonical: no upper case).
fn nibble(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl Serialize for Ref {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ref {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ref, D::Error> {
        // Parse from the borrowed text where the format allows it: refs are read by the
        // hundred thousand when a store is verified.
        struct RefVisitor;
        impl serde::de::Visitor<'_> for RefVisitor {
            type Value = Ref;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sha256:<64 hex digits> reference")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Ref, E> {
                text.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(RefVisitor)
    }
}

/// A stored, content-addressed object.
#[derive(Clone, PartialEq, Eq)]
pub struct Object {
    pub hash: Ref,
    pub interface_hash: Ref,
    pub semantic_id: String,
    pub provenance: String,
    pub payload: Vec<u8>,
}

impl Object {
    /// An object over raw payload bytes; `interfaceHash = sha256(semanticId)`.
    pub fn new(semantic_id: &str, provenance: &str, payload: Vec<u8>) -> Object {
        Object {
            hash: Ref::of(&payload),
            interface_hash: Ref::of(semantic_id.as_bytes()),
            semantic_id: semantic_id.to_owned(),
            provenance: provenance.to_owned(),
            payload,
        }
    }

    /// An object whose payload is the canonical JSON form of `value`.
    pub fn json(
        semantic_id: &str,
        provenance: &str,
        value: &serde_json::Value,
    ) -> Result<Object, CanonError> {
        Ok(Object::new(semantic_id, provenance, canon::to_vec(value)?))
    }

    /// True when the payload still hashes to the object's address.
    pub fn verify(&self) -> bool {
        Ref::of(&self.payload) == self.hash
    }

    /// The payload parsed as JSON (strictly).
    pub fn payload_json(&self) -> Result<serde_json::Value, CanonError> {
        canon::parse(&self.payload)
    }

    /// Storage encoding of everything but the hash (the key):
    /// `interfaceHash(32) | u16 len | semanticId | u16 len | provenance | payload`.
    pub(crate) fn encode_value(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            36 + self.semantic_id.len() + self.provenance.len() + self.payload.len(),
        );
        self.encode_header_into(&mut out);
        out.extend_from_slice(&self.payload);
        out
    }

    /// [`Object::encode_value`] without the payload: what the object says about its bytes.
    pub(crate) fn encode_header(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.semantic_id.len() + self.provenance.len());
        self.encode_header_into(&mut out);
        out
    }

    fn encode_header_into(&self, out: &mut Vec<u8>) {
        let sid = self.semantic_id.as_bytes();
        let prov = self.provenance.as_bytes();
        out.extend_from_slice(self.interface_hash.as_bytes());
        out.extend_from_slice(&(sid.len().min(u16::MAX as usize) as u16).to_be_bytes());
        out.extend_from_slice(&sid[..sid.len().min(u16::MAX as usize)]);
        out.extend_from_slice(&(prov.len().min(u16::MAX as usize) as u16).to_be_bytes());
        out.extend_from_slice(&prov[..prov.len().min(u16::MAX as usize)]);
    }

    /// True when `view` says of its bytes what this object says of the same bytes: the same
    /// interface hash, semantic id and provenance.
    pub(crate) fn same_header(&self, view: &ObjectView<'_>) -> bool {
        self.interface_hash == view.interface_hash
            && self.semantic_id == view.semantic_id
            && self.provenance == view.provenance
    }

    /// Inverse of [`Object::encode_value`]; `None` when the stored bytes are damaged.
    pub(crate) fn decode_value(hash: Ref, bytes: &[u8]) -> Option<Object> {
        let v = ObjectView::decode(hash, bytes)?;
        Some(Object {
            hash,
            interface_hash: v.interface_hash,
            semantic_id: v.semantic_id.to_owned(),
            provenance: v.provenance.to_owned(),
            payload: v.payload.to_vec(),
        })
    }
}

/// A stored object borrowed from a read transaction: no copy of the payload (verification
/// hashes and parses hundreds of thousands of them).
#[derive(Debug, Clone, Copy)]
pub struct ObjectView<'a> {
    pub hash: Ref,
    pub interface_hash: Ref,
    pub semantic_id: &'a str,
    pub provenance: &'a str,
    pub payload: &'a [u8],
}

impl<'a> ObjectView<'a> {
    pub(crate) fn decode(hash: Ref, bytes: &'a [u8]) -> Option<ObjectView<'a>> {
        let interface_hash = Ref::from_slice(bytes.get(..32)?)?;
        let mut rest = bytes.get(32..)?;
        let mut take_str = || -> Option<&'a str> {
            let len = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
            let s = std::str::from_utf8(rest.get(2..2 + len)?).ok()?;
            rest = rest.get(2 + len..)?;
            Some(s)
        };
        let semantic_id = take_str()?;
        let provenance = take_str()?;
        Some(ObjectView {
            hash,
            interface_hash,
            semantic_id,
            provenance,
            payload: rest,
        })
    }

    /// The payload hashes to the object's address.
    pub fn verify(&self) -> bool {
        Ref::of(self.payload) == self.hash
    }

    /// The same bytes under another header ([`Object::encode_header`]): what an episode that
    /// stored them as another kind reads them as. `None` when the header is damaged.
    pub(crate) fn with_header(self, header: &'a [u8]) -> Option<ObjectView<'a>> {
        let told = ObjectView::decode(self.hash, header)?;
        told.payload.is_empty().then_some(ObjectView {
            payload: self.payload,
            ..told
        })
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("hash", &self.hash)
            .field("semantic_id", &self.semantic_id)
            .field("provenance", &self.provenance)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_of(bytes: &[u8]) -> String {
        let mut out = vec![0u8; 2 * bytes.len()];
        hex_into(bytes, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_byte_is_written_in_hex_as_the_hex_crate_writes_it() {
        // Each byte value in each of a step's four places, and a remainder of every length.
        for shift in 0..4 {
            let bytes: Vec<u8> = (0..=255u8).map(|b| b.rotate_left(shift)).collect();
            for start in 0..4 {
                assert_eq!(hex_of(&bytes[start..]), hex::encode(&bytes[start..]));
            }
        }
        assert_eq!(hex_of(&[]), "");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_written_in_hex_as_the_hex_crate_writes_them(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
        ) {
            proptest::prop_assert_eq!(hex_of(&bytes), hex::encode(&bytes));
        }
    }

    #[test]
    fn ref_of_empty_is_the_sha256_vector() {
        assert_eq!(
            Ref::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            Ref::of(b"abc").to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn ref_parse_rejects_bad_text() {
        for (text, reason) in [
            ("", "empty ref"),
            ("abc", "missing algorithm prefix"),
            ("md5:00", "unsupported algorithm"),
            ("sha256:ABC", "digest must be 64 lowercase hex digits"),
            (
                "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
                "digest must be 64 lowercase hex digits",
            ),
        ] {
            let err = text.parse::<Ref>().unwrap_err();
            assert_eq!(err.reason, reason, "{text}");
        }
        let r = Ref::of(b"x");
        assert_eq!(r.to_string().parse::<Ref>().unwrap(), r);
        // Every byte value prints as two lowercase digits and parses back.
        for b in 0..=255u8 {
            let r = Ref([b; 32]);
            assert_eq!(r.hex(), format!("{b:02x}").repeat(32));
            assert_eq!(r.to_string().parse::<Ref>().unwrap(), r);
        }
        let bad_digit = format!("sha256:{}g", "0".repeat(63));
        let multibyte = format!("sha256:{}é", "0".repeat(62));
        for text in [bad_digit, multibyte] {
            assert_eq!(
                text.parse::<Ref>().unwrap_err().reason,
                "digest must be 64 lowercase hex digits"
            );
        }
        assert_eq!(
            "x".parse::<Ref>().unwrap_err().to_string(),
            "hashref: missing algorithm prefix: \"x\""
        );
    }

    #[test]
    fn object_encoding_round_trips_and_detects_damage() {
        let o = Object::new("world/x/v1", "test", b"payload".to_vec());
        assert_eq!(o.interface_hash, Ref::of(b"world/x/v1"));
        let enc = o.encode_value();
        let back = Object::decode_value(o.hash, &enc).unwrap();
        assert_eq!(back, o);
        assert!(back.verify());
        assert!(Object::decode_value(o.hash, &enc[..10]).is_none());
        let mut damaged = enc.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(!Object::decode_value(o.hash, &damaged).unwrap().verify());
    }
}
