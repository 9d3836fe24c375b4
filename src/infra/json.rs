//! JSON from outside with duplicate keys refused (issue 14 F5).
//!
//! `serde_json::Value` — and every derived `Deserialize` — keeps the *last* of two equal
//! keys, so `{"amount_minor":1,"amount_minor":1000000}` credits a million while a proxy,
//! a log or a signature check that reads the first key sees 1, and `{"type":"Credit…",
//! "type":"Freeze…"}` runs the second command. A money API must not let two readers of
//! one body disagree: [`parse_unique`] parses the raw text once with a serde visitor that
//! keeps, per object, the keys seen so far and stops at the first repeat, naming its
//! path (`lines[0].amount_minor`, the same dotted form `serde_path_to_error` reports for
//! typed errors). Only then is the value parsed into its typed command.
//!
//! **Every body that comes from outside goes through [`parse_unique`]**: the HTTP
//! extractor in `api::body`, wallet commands, bill refresh requests and provider
//! callbacks. Nesting depth stays bounded by serde_json's own recursion limit (128).

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// Why a body is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// An object names the same key twice; `path` is the repeated key's path.
    #[error("{path} appears twice in the same JSON object; send each field once")]
    DuplicateField { path: String },
    /// Not JSON at all (syntax, trailing characters, nesting too deep).
    #[error("the body is not JSON: {0}")]
    Malformed(String),
}

/// Parse JSON text into a [`Value`], refusing any object that repeats a key.
pub fn parse_unique(bytes: &[u8]) -> Result<Value, JsonError> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Unique {
        path: String::new(),
        duplicate: &duplicate,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    if let Some(path) = duplicate.into_inner() {
        return Err(JsonError::DuplicateField { path });
    }
    parsed.map_err(|e| JsonError::Malformed(e.to_string()))
}

/// The path of `key` inside the object at `parent`.
fn key_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// One value at `path`; the first repeated key found anywhere lands in `duplicate`.
struct Unique<'a> {
    path: String,
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
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
        // JSON text has no NaN or infinity, so `from_f64` always has a number here.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
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
        while let Some(v) = seq.next_element_seed(Unique {
            path: format!("{}[{}]", self.path, items.len()),
            duplicate: self.duplicate,
        })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = key_path(&self.path, &key);
            if object.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(path);
                return Err(A::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(Unique {
                path,
                duplicate: self.duplicate,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn duplicate(text: &str) -> String {
        match parse_unique(text.as_bytes()) {
            Err(JsonError::DuplicateField { path }) => path,
            other => panic!("{text}: expected a duplicate, got {other:?}"),
        }
    }

    #[test]
    fn f5_a_repeated_top_level_key_is_named() {
        assert_eq!(
            duplicate(r#"{"amount_minor":1,"amount_minor":1000000}"#),
            "amount_minor"
        );
        assert_eq!(
            duplicate(r#"{"type":"Open","x":1,"type":"Unfreeze"}"#),
            "type"
        );
    }

    #[test]
    fn f5_nested_and_array_paths_are_named() {
        assert_eq!(duplicate(r#"{"a":{"b":1,"b":2}}"#), "a.b");
        assert_eq!(
            duplicate(r#"{"lines":[{"x":1},{"y":1,"y":2}]}"#),
            "lines[1].y"
        );
        assert_eq!(duplicate(r#"[{"k":1,"k":1}]"#), "[0].k");
    }

    #[test]
    fn equal_keys_in_different_objects_are_fine() {
        let v = parse_unique(br#"{"a":{"k":1},"b":{"k":2},"c":[{"k":3},{"k":4}]}"#).unwrap();
        assert_eq!(v, json!({"a":{"k":1},"b":{"k":2},"c":[{"k":3},{"k":4}]}));
    }

    #[test]
    fn values_are_parsed_as_serde_json_would() {
        let text =
            r#"{"i":-5,"u":18446744073709551615,"f":1.5,"s":"\u00e9","n":null,"t":true,"e":[]}"#;
        let expected: Value = serde_json::from_str(text).unwrap();
        assert_eq!(parse_unique(text.as_bytes()).unwrap(), expected);
    }

    #[test]
    fn malformed_text_and_trailing_garbage_are_refused() {
        for bad in ["", "{", r#"{"a":1}x"#, "{'a':1}", &"[".repeat(200)] {
            assert!(
                matches!(parse_unique(bad.as_bytes()), Err(JsonError::Malformed(_))),
                "{bad}"
            );
        }
    }
}
