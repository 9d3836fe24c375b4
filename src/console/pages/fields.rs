//! Reading the API's JSON on a page: a field as text or as an integer (absent → ""
//! or 0: a page shows what the API answered, and a missing field reads as empty),
//! and a name turned into an HTML id fragment.

use serde_json::Value;

/// `v[k]` when it is a string, else "".
pub(super) fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `v[k]` as an integer (0 when absent).
pub(super) fn int(v: &Value, k: &str) -> i64 {
    v.get(k).and_then(Value::as_i64).unwrap_or(0)
}

/// A name as an HTML id fragment: letters, digits, `-` and `_` kept, the rest `_`.
pub(super) fn id_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
