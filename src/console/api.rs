//! The console's calls to the JSON API: in-process (`tower::ServiceExt::oneshot` on
//! the API router), with the session's key as `Authorization: Bearer`, so the API's
//! own extractors authenticate, rate-limit, check the role and record the actor.
//! Each call carries `x-correlation-id: console-<uuid>`, so the events an action
//! writes are found by that id (and the page that wrote them says which).

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;

/// The largest API answer a page reads (a page of 1,000 ledger lines is well under).
const ANSWER_BYTES_MAX: usize = 16 * 1024 * 1024;

/// An API answer: its status and its JSON body (`Value::Null` when there is none;
/// a non-JSON body, e.g. an HTML report, as a string).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// The problem's detail (RFC 9457 body), or the status text.
    pub fn problem(&self) -> Problem {
        let text = |k: &str| self.body.get(k).and_then(Value::as_str).map(str::to_owned);
        Problem {
            status: self.status,
            code: text("code").unwrap_or_else(|| self.status.as_str().to_owned()),
            field: text("field"),
            detail: text("detail").unwrap_or_else(|| {
                self.status
                    .canonical_reason()
                    .unwrap_or("request failed")
                    .to_owned()
            }),
        }
    }
}

/// Why an API call was refused, as the page shows it.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    pub code: String,
    pub field: Option<String>,
    pub detail: String,
}

/// One page's API client: the router, the key and the correlation id of this page
/// view (every call of one action shares it).
pub struct Api<'a> {
    router: &'a Router,
    secret: &'a str,
    pub correlation_id: String,
}

impl<'a> Api<'a> {
    pub fn new(router: &'a Router, secret: &'a str) -> Self {
        Api {
            router,
            secret,
            correlation_id: format!("console-{}", uuid::Uuid::new_v4()),
        }
    }

    /// `GET path` (with its query string).
    pub async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, None, None).await
    }

    /// `GET path`, its body when 2xx, else the problem.
    pub async fn read(&self, path: &str) -> Result<Value, Problem> {
        let a = self.get(path).await;
        if a.ok() {
            Ok(a.body)
        } else {
            Err(a.problem())
        }
    }

    /// `POST path` with a JSON body (or none) and an `Idempotency-Key` when given.
    pub async fn post(
        &self,
        path: &str,
        body: Option<Value>,
        idempotency_key: Option<&str>,
    ) -> Answer {
        self.call(Method::POST, path, body, idempotency_key).await
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        idempotency_key: Option<&str>,
    ) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.secret))
            .header("x-correlation-id", &self.correlation_id);
        if let Some(k) = idempotency_key {
            req = req.header("idempotency-key", k);
        }
        let body = match body {
            Some(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        let req = match req.body(body) {
            Ok(r) => r,
            Err(e) => return internal(format!("request to {path} could not be built: {e}")),
        };
        let resp = match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let bytes = match axum::body::to_bytes(resp.into_body(), ANSWER_BYTES_MAX).await {
            Ok(b) => b,
            Err(e) => return internal(format!("answer of {path} could not be read: {e}")),
        };
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Answer { status, body }
    }
}

fn internal(detail: String) -> Answer {
    Answer {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        body: serde_json::json!({"code": "CONSOLE_CALL_FAILED", "detail": detail}),
    }
}

/// `s` percent-encoded for a path segment or a query value.
pub fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
