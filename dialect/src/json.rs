//! JSON text read one way on both sides of the plugin boundary: as serde_json reads it, except
//! that an object naming a member twice is refused.
//!
//! JSON leaves duplicate names undefined, and parsers split on them: serde_json keeps the last,
//! others the first, some refuse. So a document someone checked (a proxy reading a request, a
//! reviewer reading a bundle file) may say one thing while this process acts on another. Names
//! are compared after unescaping (`"a"` and `"\u0061"` are the same member).
//!
//! ```
//! use dialect::json::{parse, Unparsed};
//! assert_eq!(parse(br#"{"path":"a.txt"}"#).unwrap()["path"], "a.txt");
//! assert_eq!(
//!     parse(br#"{"path":"a.txt","\u0070ath":"b.txt"}"#).unwrap_err(),
//!     Unparsed::DuplicateKey("path".into())
//! );
//! assert!(matches!(parse(b"{"), Err(Unparsed::Syntax(_))));
//! ```
//!
//! Writing goes the other way: [`write_compact`] writes what `serde_json::to_string` writes,
//! byte for byte, with strings quoted 32 bytes a step ([`crate::quote`]).

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a text is not one JSON value with unique member names.
#[derive(Debug)]
pub enum Unparsed {
    /// Not JSON (or nested past serde_json's recursion limit), with serde_json's account.
    Syntax(serde_json::Error),
    /// An object names this member twice (the first such name met).
    DuplicateKey(String),
    /// More values than the caller's bound ([`parse_bounded`]), which it names.
    TooManyValues(usize),
}

impl PartialEq for Unparsed {
    fn eq(&self, other: &Unparsed) -> bool {
        match (self, other) {
            (Unparsed::Syntax(a), Unparsed::Syntax(b)) => a.to_string() == b.to_string(),
            (Unparsed::DuplicateKey(a), Unparsed::DuplicateKey(b)) => a == b,
            (Unparsed::TooManyValues(a), Unparsed::TooManyValues(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Unparsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unparsed::Syntax(e) => write!(f, "{e}"),
            Unparsed::DuplicateKey(key) => {
                write!(f, "duplicate key {}", crate::quote::quote(key))
            }
            Unparsed::TooManyValues(limit) => write!(f, "more than {limit} JSON values"),
        }
    }
}

impl Unparsed {
    /// Whether the text nests arrays and objects past serde_json's recursion limit (128
    /// levels): a limit of the parser's own, which callers count apart from other syntax.
    pub fn is_too_deep(&self) -> bool {
        matches!(self, Unparsed::Syntax(e)
            if e.classify() == serde_json::error::Category::Syntax
                && e.to_string().starts_with("recursion limit exceeded"))
    }
}

impl std::error::Error for Unparsed {}

/// `bytes` as one JSON value (whitespace around it allowed), every object's member names
/// unique. The value is the one `serde_json::from_slice` would build.
pub fn parse(bytes: &[u8]) -> Result<Value, Unparsed> {
    parse_bounded(bytes, usize::MAX)
}

/// [`parse`], refusing a text of more than `max_values` values (every scalar, array and
/// object counts one, member names none) as soon as it meets the next one, so that what it
/// builds is bounded whatever the bytes: `{"a":0}` is 7 bytes of text and several hundred
/// bytes of `Value`.
///
/// ```
/// use dialect::json::{parse_bounded, Unparsed};
/// assert!(parse_bounded(br#"{"a":[1,2]}"#, 4).is_ok());
/// assert_eq!(
///     parse_bounded(br#"{"a":[1,2,3]}"#, 4).unwrap_err(),
///     Unparsed::TooManyValues(4)
/// );
/// ```
pub fn parse_bounded(bytes: &[u8], max_values: usize) -> Result<Value, Unparsed> {
    parse_noting_wide(bytes, max_values).map(|(value, _)| value)
}

/// [`parse_bounded`], and whether the value holds a whole number of at least 2^63 in
/// magnitude that was read as a double. serde_json reads an integer literal too wide for
/// `u64` or `i64` as the nearest double, so `1000000000000000000001` and `1e21` build the
/// same value: only the text tells an inexact integer from a float, and a caller that
/// refuses the first reads the text again when this is true (rarely: floats that large
/// are).
///
/// ```
/// use dialect::json::parse_noting_wide;
/// assert!(parse_noting_wide(br#"{"n":1000000000000000000001}"#, 8).unwrap().1);
/// assert!(parse_noting_wide(br#"{"n":1e21}"#, 8).unwrap().1);
/// assert!(!parse_noting_wide(br#"{"n":18446744073709551615,"f":0.5}"#, 8).unwrap().1);
/// ```
pub fn parse_noting_wide(bytes: &[u8], max_values: usize) -> Result<(Value, bool), Unparsed> {
    let state = State {
        duplicate: RefCell::new(None),
        values_left: Cell::new(max_values),
        too_many: Cell::new(false),
        wide: Cell::new(false),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Unique(&state)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(v) => Ok((v, state.wide.get())),
        Err(_) if state.too_many.get() => Err(Unparsed::TooManyValues(max_values)),
        Err(e) => match state.duplicate.into_inner() {
            Some(key) => Err(Unparsed::DuplicateKey(key)),
            None => Err(Unparsed::Syntax(e)),
        },
    }
}

/// What one parse has seen: the first repeated member name, and the values it may still
/// build.
struct State {
    duplicate: RefCell<Option<String>>,
    values_left: Cell<usize>,
    too_many: Cell<bool>,
    /// A whole double of at least 2^63 in magnitude was built ([`parse_noting_wide`]).
    wide: Cell<bool>,
}

/// Builds a `Value` as serde_json's own visitor does, and records the first member name an
/// object repeats.
#[derive(Clone, Copy)]
struct Unique<'a>(&'a State);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let Some(left) = self.0.values_left.get().checked_sub(1) else {
            self.0.too_many.set(true);
            return Err(D::Error::custom("too many values"));
        };
        self.0.values_left.set(left);
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // Where an integer literal past u64 and i64 lands; 2^63 exactly as a double.
        if v.fract() == 0.0 && v.abs() >= 9_223_372_036_854_775_808.0 {
            self.0.wide.set(true);
        }
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            if members.contains_key(&key) {
                *self.0.duplicate.borrow_mut() = Some(key);
                return Err(A::Error::custom("duplicate key"));
            }
            members.insert(key, value);
        }
        Ok(Value::Object(members))
    }
}

/// Append `value` to `out` as compact JSON, byte for byte what `serde_json::to_string` writes
/// (members in the map's order, numbers as serde_json prints them), with every string quoted by
/// [`crate::quote`]: 32 bytes a step where serde_json goes a byte at a time. For the
/// documents that carry a whole file across the plugin boundary.
pub fn write_compact(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => crate::quote::push_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => write_compact_object(out, map),
    }
}

/// [`write_compact`] of an object held as its map.
pub fn write_compact_object(out: &mut String, map: &Map<String, Value>) {
    out.push('{');
    for (i, (name, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        crate::quote::push_json_string(out, name);
        out.push(':');
        write_compact(out, value);
    }
    out.push('}');
}

/// A number as serde_json prints it (its `Display` is its serialization).
fn write_number(out: &mut String, n: &Number) {
    use fmt::Write as _;
    let _ = write!(out, "{n}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 17-digit decimal was read as its neighbouring double (serde_json's default float
    /// parser is not correctly rounded), so `…964` and `…96` were one argument: an MCP resend
    /// with other arguments replayed the first call, and `why` showed an input not sent.
    #[test]
    fn an_agents_decimal_is_read_as_the_double_it_names() {
        let a = parse(br#"[36.103759997804964]"#).unwrap();
        let b = parse(br#"[36.10375999780496]"#).unwrap();
        assert_eq!(a[0].as_f64(), Some(36.103759997804964_f64));
        assert_ne!(a, b);
        // A tie between two doubles rounds to the even one.
        assert_eq!(
            parse(b"4503599627370496.5").unwrap().as_f64(),
            Some(4503599627370496.0)
        );
        // A decimal just past the largest double that still rounds to it is that double.
        assert_eq!(
            parse(b"1.7976931348623157900e308").unwrap().as_f64(),
            Some(f64::MAX)
        );
    }

    fn compact(value: &Value) -> String {
        let mut out = String::new();
        write_compact(&mut out, value);
        out
    }

    /// Every scalar, array and object counts one value, member names none; the parse stops at
    /// the first value past the bound, before building it, whatever follows.
    #[test]
    fn a_text_past_its_values_is_refused_at_the_first_value_too_many() {
        // The object, its array and the array's three items, and the empty object: 6.
        let text = br#"{"a":[1,"x",null],"b":{}}"#;
        assert_eq!(
            parse_bounded(text, 6).unwrap(),
            serde_json::json!({"a": [1, "x", null], "b": {}})
        );
        assert_eq!(
            parse_bounded(text, 5).unwrap_err(),
            Unparsed::TooManyValues(5)
        );
        assert_eq!(
            Unparsed::TooManyValues(6).to_string(),
            "more than 6 JSON values"
        );
        let mut hostile = String::from("[");
        hostile.push_str(&r#"{"a":0},"#.repeat(150_000));
        hostile.push_str("oops");
        assert_eq!(
            parse_bounded(hostile.as_bytes(), 16_384).unwrap_err(),
            Unparsed::TooManyValues(16_384)
        );
        assert!(matches!(
            parse(hostile.as_bytes()),
            Err(Unparsed::Syntax(_))
        ));
        // What is met before the bound is reported as it was.
        assert_eq!(
            parse_bounded(br#"[1,{"a":1,"a":2}]"#, 100).unwrap_err(),
            Unparsed::DuplicateKey("a".into())
        );
    }

    /// serde_json parses 127 levels of nesting; the 128th is its recursion limit, told apart
    /// from other syntax errors by its message, which this pins.
    #[test]
    fn nesting_past_serde_jsons_limit_is_told_apart() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(nested(127).as_bytes()).is_ok());
        let deep = parse(nested(128).as_bytes()).unwrap_err();
        assert!(deep.is_too_deep(), "{deep}");
        assert_eq!(
            deep.to_string(),
            "recursion limit exceeded at line 1 column 128"
        );
        for other in [&b"[1,"[..], br#"{"a":1,"a":2}"#, b"[[[]]"] {
            assert!(!parse(other).unwrap_err().is_too_deep());
        }
        assert!(!Unparsed::TooManyValues(1).is_too_deep());
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let value = serde_json::json!({
            "content": "a \"b\"\n\t\u{1}\u{7f} é \u{2028} 😀 \\",
            "n": [0, -1, u64::MAX, i64::MIN, 1.5, -0.0, 1e300, 5e-324, 0.1],
            "nested": {"b": [true, false, null, {}], "a": []},
            "\u{1}key\"": "",
        });
        assert_eq!(compact(&value), serde_json::to_string(&value).unwrap());
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "(\\PC|[\\x00-\\x1f\"\\\\]|é|😀){0,24}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("(\\PC|[\\x00-\\x1f\"]){0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Any value, whatever its strings and numbers, is written as serde_json writes it.
        #[test]
        fn any_value_is_written_as_serde_json_writes_it(value in any_value()) {
            proptest::prop_assert_eq!(compact(&value), serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn builds_what_serde_json_builds_and_refuses_a_member_named_twice() {
        for text in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,-2,3.5,1e300,18446744073709551615,123456789012345678901234567890],"b":null,"c":true,"d":"\u00e9\ud83d\ude00"}}}"#,
            r#"[{"a":{"a":{"a":1}}},{"a":2},[],{}]"#,
            " 7 ",
        ] {
            let ours = parse(text.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
        for (text, key) in [
            (r#"{"a":1,"a":2}"#, "a"),
            (r#"{"a":1,"\u0061":2}"#, "a"),
            (r#"[{"x":{"k":{},"k":[]}}]"#, "k"),
            (r#"{"p":{"q":1},"p":{"q":1}}"#, "p"),
        ] {
            assert_eq!(
                parse(text.as_bytes()),
                Err(Unparsed::DuplicateKey(key.into())),
                "{text}"
            );
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        for text in ["", "{", "[1,]", "{}{}", "\u{feff}{}", deep.as_str()] {
            let e = parse(text.as_bytes()).unwrap_err();
            assert!(matches!(e, Unparsed::Syntax(_)), "{text:.20}: {e}");
        }
        let long = "k".repeat(1000);
        let text = Unparsed::DuplicateKey(long).to_string();
        assert!(text.len() < 300 && text.ends_with("…\""), "{text}");
    }
}
