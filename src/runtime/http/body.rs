//! The one way a handler reads a JSON request body.
//!
//! [`JsonBody`] only collects the bytes (under the router's body limit, 413
//! `BODY_TOO_LARGE` beyond) and notes whether the client said `Content-Type:
//! application/json`; it never refuses on content, so a handler checks the caller's
//! role *before* it looks at the body (a forbidden caller gets 403, not a parse error).
//! The handler then asks for the body as a value, an object or a typed command; all
//! three go through [`crate::infra::json::parse_unique`], so a repeated key anywhere —
//! nested objects and the `"type"` tag of a command included — is a 422
//! `DUPLICATE_FIELD` naming its path, before any typed parse.
//!
//! [`RawBody`] is the same for a body that is not JSON (a provider callback): bytes
//! under the limit, and the same problem+json 413 beyond it.
//!
//! A request that *declares* a `Content-Length` over the route's limit is answered
//! 413 before a byte of its body is awaited ([`declared_over_limit`], issue 32 item
//! 7): it used to wait for a body the client may never send, until the request
//! timeout answered 503 thirty seconds later. The console's forms get the same
//! answer from [`refuse_declared_over_limit`].

use super::Problem;
use crate::infra::json::{parse_unique, JsonError};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A request body meant to be JSON, not parsed yet.
pub struct JsonBody {
    bytes: Bytes,
    /// The request said `Content-Type: application/json` (or `…+json`).
    json_type: bool,
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    let Some((kind, sub)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (sub.eq_ignore_ascii_case("json") || sub.to_ascii_lowercase().ends_with("+json"))
}

/// The 413 of a body over its route's limit.
fn too_large() -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "BODY_TOO_LARGE",
        "the request body is over this route's size limit",
    )
}

/// The request with its body under the route's limit (axum's `DefaultBodyLimit`),
/// and whether its declared `Content-Length` is over that limit. The limit is not
/// public, so it is read through a limited body's size hint: the limit caps the upper
/// bound of a body of unknown size (a route without a limit leaves it unbounded).
///
/// A request over the limit keeps none of its body: it is answered 413 at once, and
/// its body is read and dropped in the background ([`drain_refused`]), so a client
/// still writing it reads the 413 rather than a reset connection.
pub fn declared_over_limit(req: Request) -> (Request, bool) {
    use axum::RequestExt;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (parts, body) = req.into_parts();
    let unknown_size = axum::body::Body::from_stream(futures::stream::empty::<
        Result<Bytes, std::convert::Infallible>,
    >());
    let probe = Request::from_parts(parts, unknown_size).with_limited_body();
    let limit = axum::body::HttpBody::size_hint(probe.body()).upper();
    let (parts, _) = probe.into_parts();
    let over = matches!((declared, limit), (Some(d), Some(l)) if d > l);
    if over {
        drain_refused(body);
        return (Request::from_parts(parts, axum::body::Body::empty()), true);
    }
    (Request::from_parts(parts, body).with_limited_body(), false)
}

/// Most bytes of a refused body read after its 413 ([`drain_refused`]).
pub const DRAIN_BYTES_MAX: usize = 1024 * 1024;
/// Longest a refused body is read after its 413.
pub const DRAIN_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// Read and drop a refused request's body in the background, at most
/// [`DRAIN_BYTES_MAX`] for at most [`DRAIN_FOR`] (a lingering close, as nginx does):
/// the 413 is already on its way, and closing with the client's bytes unread would
/// reset the connection and lose it. A client that declared more, or writes slower,
/// is cut off when either bound is reached; nothing waits on it.
fn drain_refused(body: axum::body::Body) {
    use futures::StreamExt;
    tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        let _ = tokio::time::timeout(DRAIN_FOR, async {
            let mut read = 0usize;
            while let Some(Ok(chunk)) = stream.next().await {
                read += chunk.len();
                if read >= DRAIN_BYTES_MAX {
                    break;
                }
            }
        })
        .await;
    });
}

/// Middleware for routes whose handlers read the body with axum's own extractors (the
/// console's forms): a declared `Content-Length` over the limit is 413 at once.
pub async fn refuse_declared_over_limit(
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (req, over) = declared_over_limit(req);
    if over {
        return too_large().into_response();
    }
    next.run(req).await
}

/// A body that could not be read: 413 `BODY_TOO_LARGE` over the route's limit, else
/// 422 `INVALID_BODY` — problem+json either way (axum's own rejection is plain text).
fn unreadable(e: BytesRejection) -> Problem {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        Problem::invalid("INVALID_BODY", "", e.body_text())
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let json_type = is_json(req.headers());
        let (req, over) = declared_over_limit(req);
        if over {
            return Err(too_large());
        }
        let bytes = Bytes::from_request(req, state).await.map_err(unreadable)?;
        Ok(JsonBody { bytes, json_type })
    }
}

/// A body taken as it is, whatever its type (a provider callback, verified against
/// its signature byte for byte); only its size is limited, with the same 413 problem
/// as [`JsonBody`].
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let (req, over) = declared_over_limit(req);
        if over {
            return Err(too_large());
        }
        Bytes::from_request(req, state)
            .await
            .map(RawBody)
            .map_err(unreadable)
    }
}

/// A [`JsonError`] as a 422 naming the field (the repeated key's path).
pub fn json_problem(e: JsonError) -> Problem {
    match e {
        JsonError::DuplicateField { ref path } => {
            let path = path.clone();
            Problem::invalid("DUPLICATE_FIELD", &path, e.to_string())
        }
        JsonError::Malformed(m) => {
            Problem::invalid("MALFORMED_JSON", "", format!("the body is not JSON: {m}"))
        }
    }
}

/// Parse a value into a typed command, naming the field at fault.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let (path, message) = (e.path().to_string(), e.into_inner().to_string());
        let field = field_at_fault(&path, &message);
        Problem::invalid("INVALID_FIELD", &field, message)
    })
}

impl JsonBody {
    /// The body as JSON; it must be sent as `application/json`.
    pub fn value(&self) -> Result<Value, Problem> {
        if !self.json_type {
            return Err(Problem::invalid(
                "INVALID_BODY",
                "Content-Type",
                "send the body as Content-Type: application/json",
            ));
        }
        parse_unique(&self.bytes).map_err(json_problem)
    }

    /// The body as JSON, or `None` for a request that sent no body (nothing, or only
    /// white space), with or without a JSON content type: the handler's defaults.
    /// Many clients label every POST `application/json`, empty ones too, so an empty
    /// body is "no body", never malformed JSON. A body sent without the JSON content
    /// type is refused rather than ignored.
    pub fn optional(&self) -> Result<Option<Value>, Problem> {
        if self.bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        self.value().map(Some)
    }

    /// The body as checked JSON text — sent as `application/json`, well-formed, no
    /// repeated key — for a request type with a parser of its own.
    pub fn text(&self) -> Result<&str, Problem> {
        self.value()?;
        // Well-formed JSON is UTF-8 (serde_json checks); kept as an error, not a panic.
        std::str::from_utf8(&self.bytes).map_err(|e| {
            Problem::invalid("MALFORMED_JSON", "", format!("the body is not UTF-8: {e}"))
        })
    }

    /// The body as a JSON object.
    pub fn object(&self) -> Result<Map<String, Value>, Problem> {
        match self.value()? {
            Value::Object(map) => Ok(map),
            _ => Err(Problem::invalid(
                "INVALID_BODY",
                "",
                "the body must be a JSON object",
            )),
        }
    }

    /// The body parsed into `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Problem> {
        typed(self.value()?)
    }

    /// The body parsed into `T`, or `T::default()` when there is no body.
    pub fn parse_or_default<T: DeserializeOwned + Default>(&self) -> Result<T, Problem> {
        match self.optional()? {
            Some(v) => typed(v),
            None => Ok(T::default()),
        }
    }
}

/// The field a parse error is about: its path, or, for a missing, unknown or
/// repeated field (reported at the object itself), the name serde quotes in the
/// message.
pub(crate) fn field_at_fault(path: &str, message: &str) -> String {
    let quoted = message.split('`').nth(1).filter(|_| {
        ["missing field", "unknown field", "duplicate field"]
            .iter()
            .any(|kind| message.starts_with(kind))
    });
    match (path, quoted) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => String::new(),
        // An unknown field's path already ends with it; a missing one's is its parent.
        (p, Some(name)) if p == name || p.ends_with(&format!(".{name}")) => p.to_owned(),
        (p, Some(name)) => format!("{p}.{name}"),
        (p, None) => p.to_owned(),
    }
}
