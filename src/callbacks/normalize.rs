//! Normalising a provider's raw body into `{event_id, event_type, data}`: the one
//! shape handlers and replays see (the anti-corruption layer between a provider's JSON
//! and the ledger). A body that is not JSON, or lacks the event id or type, is kept raw
//! but unnormalised — and an unnormalised callback is never handled or replayed.

use serde_json::Value;

/// Longest event id (the `provider_event_id` column).
pub const EVENT_ID_CHARS_MAX: usize = 128;
/// Longest event type (the `event_type` column).
pub const EVENT_TYPE_CHARS_MAX: usize = 128;

/// A provider's callback in the common shape (what `normalized_payload` stores).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Normalized {
    /// The provider's id of the event: the dedupe key (R-PAY-4).
    pub event_id: String,
    pub event_type: String,
    /// The part of the body the handler needs (the whole body unless configured).
    pub data: Value,
}

/// Why a body could not be normalised (stored in `normalize_error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NormalizeError(pub String);

/// Turns a raw body into [`Normalized`]. Pure: no I/O, no clock — a replay must be
/// able to trust that the stored result is what this produced.
pub trait Normalizer: Send + Sync + 'static {
    fn normalize(&self, raw: &[u8]) -> Result<Normalized, NormalizeError>;

    /// A delivery with its headers (names lower-case), for a provider whose event id
    /// is in a header (Xendit's `webhook-id`). Pure like [`Normalizer::normalize`],
    /// which it calls unless overridden.
    fn normalize_delivery(
        &self,
        headers: &[(String, Vec<u8>)],
        raw: &[u8],
    ) -> Result<Normalized, NormalizeError> {
        let _ = headers;
        self.normalize(raw)
    }
}

/// A JSON body whose fields sit at these JSON pointers (RFC 6901), e.g. Xendit's
/// `{"id": …, "status": …}` is `JsonPointers::new("/id", "/status")`.
#[derive(Debug, Clone)]
pub struct JsonPointers {
    pub event_id: String,
    pub event_type: String,
    /// Where `data` is; `None` takes the whole body.
    pub data: Option<String>,
}

impl JsonPointers {
    pub fn new(event_id: impl Into<String>, event_type: impl Into<String>) -> JsonPointers {
        JsonPointers {
            event_id: event_id.into(),
            event_type: event_type.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, pointer: impl Into<String>) -> JsonPointers {
        self.data = Some(pointer.into());
        self
    }
}

/// A string (or an integer: some providers number their events) of 1 to `max`
/// characters after trimming.
fn id_at(body: &Value, pointer: &str, what: &str, max: usize) -> Result<String, NormalizeError> {
    let text = match body.pointer(pointer) {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
        Some(_) => {
            return Err(NormalizeError(format!(
                "{what} at {pointer} is neither a string nor an integer"
            )))
        }
        None => {
            return Err(NormalizeError(format!(
                "the body has no {what} at {pointer}"
            )))
        }
    };
    let n = text.chars().count();
    if n == 0 || n > max {
        return Err(NormalizeError(format!(
            "{what} at {pointer} must be 1 to {max} characters, got {n}"
        )));
    }
    Ok(text)
}

impl Normalizer for JsonPointers {
    fn normalize(&self, raw: &[u8]) -> Result<Normalized, NormalizeError> {
        // Repeated keys refused (issue 14 F5): the signature covers the raw text, and
        // two readers must not see two different event ids in it.
        let body: Value =
            crate::infra::json::parse_unique(raw).map_err(|e| NormalizeError(e.to_string()))?;
        let event_id = id_at(&body, &self.event_id, "event id", EVENT_ID_CHARS_MAX)?;
        let event_type = id_at(&body, &self.event_type, "event type", EVENT_TYPE_CHARS_MAX)?;
        let data = match &self.data {
            None => body,
            Some(p) => body
                .pointer(p)
                .cloned()
                .ok_or_else(|| NormalizeError(format!("the body has no data at {p}")))?,
        };
        Ok(Normalized {
            event_id,
            event_type,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_json_body_becomes_event_id_type_and_data() {
        let n = JsonPointers::new("/id", "/status")
            .normalize(br#"{"id":" inv-1 ","status":"PAID","amount":5}"#)
            .unwrap();
        assert_eq!(
            (n.event_id.as_str(), n.event_type.as_str()),
            ("inv-1", "PAID")
        );
        assert_eq!(n.data, json!({"id":" inv-1 ","status":"PAID","amount":5}));
        let nested = JsonPointers::new("/event/id", "/event/type")
            .with_data("/event/data")
            .normalize(br#"{"event":{"id":7,"type":"payout.paid","data":{"x":1}}}"#)
            .unwrap();
        assert_eq!(nested.event_id, "7");
        assert_eq!(nested.data, json!({"x": 1}));
    }

    #[test]
    fn a_body_that_is_not_json_or_lacks_the_event_id_is_not_normalised() {
        let n = JsonPointers::new("/id", "/type");
        for (raw, why) in [
            (&b"id=1&type=x"[..], "not JSON"),
            (br#"{"type":"x"}"#, "no event id"),
            (br#"{"id":"","type":"x"}"#, "1 to 128"),
            (br#"{"id":{"a":1},"type":"x"}"#, "neither"),
            (br#"{"id":"e-1"}"#, "no event type"),
        ] {
            let e = n.normalize(raw).unwrap_err();
            assert!(e.0.contains(why), "{raw:?}: {e}");
        }
        let long = format!(r#"{{"id":"{}","type":"x"}}"#, "e".repeat(129));
        assert!(n.normalize(long.as_bytes()).is_err());
    }

    #[test]
    fn f5_a_callback_that_repeats_a_key_is_not_normalised() {
        let n = JsonPointers::new("/id", "/type");
        let e = n
            .normalize(br#"{"id":"e-1","type":"PAID","id":"e-2"}"#)
            .unwrap_err();
        assert!(e.0.contains("id appears twice"), "{e}");
    }
}
