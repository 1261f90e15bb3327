//! Reading a plugin's answer object (an outcome's `output`, a preflight's decline, a finish
//! function's output) whatever its depth.
//!
//! serde_json stops at 128 levels ("recursion limit exceeded"): an answer nested deeper would
//! not be read at all, so a decline would count as proceed (and the call spend its budget) and
//! an outcome would be `indeterminate` (as if the handler had not answered in full). The host
//! does not judge depth: the broker does, and refuses anything past its own limit
//! (`MAX_OUTPUT_DEPTH`, 100 levels), a decline as a decline and an output as a failed effect.
//! So the answer is read to [`READ_DEPTH`] levels, past any depth the broker commits, and a
//! container at that level is read without what it holds, which serde_json skips without
//! recursion (its `ignore_value` keeps its own stack): what the broker is given is as deep as
//! it needs to see, and no deeper than serde_json can go.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::types::JsonObject;

/// How deep the host reads an answer object, the object itself being level 1: an array or
/// object at this level is read empty. Deeper than any answer the broker commits (100 levels),
/// and with room under serde_json's 128 for the outcome around an `output`.
pub(crate) const READ_DEPTH: usize = 120;

/// Read `text` as an answer object.
pub(crate) fn object(text: &str) -> serde_json::Result<JsonObject> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let object = Bounded { left: READ_DEPTH }.object(&mut deserializer)?;
    deserializer.end()?;
    Ok(object)
}

/// An answer object inside a larger document (an outcome's `output`), read as [`object`] reads
/// one.
pub(crate) struct AnswerObject;

impl<'de> DeserializeSeed<'de> for AnswerObject {
    type Value = JsonObject;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<JsonObject, D::Error> {
        Bounded { left: READ_DEPTH }.object(deserializer)
    }
}

/// A JSON value whose containers may take `left` more levels, itself included; one at the last
/// level is read without what it holds.
#[derive(Clone, Copy)]
struct Bounded {
    left: usize,
}

impl Bounded {
    /// An object, as serde_json's `Map` reads one (in its words when it is not one).
    fn object<'de, D: Deserializer<'de>>(self, deserializer: D) -> Result<JsonObject, D::Error> {
        deserializer.deserialize_map(Members(self))
    }

    /// What a container inside this one may take.
    fn inner(self) -> Bounded {
        Bounded {
            left: self.left.saturating_sub(1),
        }
    }

    /// The members of an object at this level (a member given twice keeps the last, as in
    /// serde_json's `Map`).
    fn members<'de, A: MapAccess<'de>>(self, mut map: A) -> Result<JsonObject, A::Error> {
        let mut members = Map::new();
        if self.left <= 1 {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(members);
        }
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.inner())?;
            members.insert(key, value);
        }
        Ok(members)
    }
}

/// An object read by [`Bounded`]'s rules, and nothing else.
struct Members(Bounded);

impl<'de> Visitor<'de> for Members {
    type Value = JsonObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<JsonObject, A::Error> {
        self.0.members(map)
    }
}

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own `Value` reads it (a JSON text has no NaN or infinity).
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        if self.left <= 1 {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Value::Array(items));
        }
        while let Some(item) = seq.next_element_seed(self.inner())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        self.members(map).map(Value::Object)
    }
}
