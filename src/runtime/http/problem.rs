//! Errors as RFC 9457 problem details (`application/problem+json`), each with a
//! stable `code` and, where there is one, the offending `field`. This is the only
//! place errors become HTTP.
//!
//! **500s never carry internal text** (issue 14, F11). [`Problem::internal`] and
//! [`Problem::internal_coded`] log the real error at `error` level under a fresh
//! `error_id` and answer only a fixed sentence with that id; the client quotes the id,
//! the operator finds the log line. As a safety net, any other 500 that reaches
//! [`IntoResponse`] without an id gets one the same way and its detail replaced.

use crate::infra::store::StoreError;
use crate::runtime::bus::BusError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use factledger_aggregates::wallet::WalletError;
use factledger_aggregates::{Refusal, RefusalKind};
use serde::Serialize;

/// A problem as it travels through handlers: small (the `type` URI and `title` are
/// derived from `code` and `status` when it is written out).
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    /// Stable machine-readable code, e.g. `INSUFFICIENT_BALANCE`.
    pub code: &'static str,
    pub detail: String,
    /// The request field the problem is about.
    pub field: Option<String>,
    /// For 500s: the id the error was logged under.
    pub error_id: Option<String>,
    /// Sent as `Retry-After` (seconds) with 429 and 503 answers.
    pub retry_after_s: Option<u64>,
}

/// `Retry-After` of a 503 `DATABASE_UNAVAILABLE`: a restarting database is back
/// within seconds.
const DATABASE_RETRY_AFTER_S: u64 = 1;

/// The detail every 500 answers with; the error itself is only in the log.
const INTERNAL_DETAIL: &str = "the service failed to handle this request";

/// The RFC 9457 body of a [`Problem`].
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Problem)]
pub struct ProblemBody {
    /// A URI reference naming the problem type: `/problems/<code>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable machine-readable code, e.g. `INSUFFICIENT_BALANCE`.
    pub code: String,
    /// The request field the problem is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For 500s: quote it to the operator, who finds the error logged under it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_id: Option<String>,
}

impl Problem {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            field: None,
            error_id: None,
            retry_after_s: None,
        }
    }

    pub fn body(&self) -> ProblemBody {
        ProblemBody {
            type_uri: format!(
                "/problems/{}",
                self.code.to_ascii_lowercase().replace('_', "-")
            ),
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code.to_owned(),
            field: self.field.clone(),
            error_id: self.error_id.clone(),
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        let f = field.into();
        self.field = (!f.is_empty()).then_some(f);
        self
    }

    pub fn unauthorized(detail: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", detail)
    }

    pub fn forbidden(detail: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", detail)
    }

    pub fn invalid(code: &'static str, field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, detail).field(field)
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// A 503 `DATABASE_UNAVAILABLE`: the database could not be reached (it may be
    /// restarting); the client retries, commands with the same Idempotency-Key.
    pub fn database_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "DATABASE_UNAVAILABLE",
            "the database cannot be reached right now; retry shortly (a command with the \
             same Idempotency-Key)",
        )
        .retry_after(DATABASE_RETRY_AFTER_S)
    }

    /// A 500 `INTERNAL`: `error` is logged under a fresh error id and never answered.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        Self::internal_coded("INTERNAL", INTERNAL_DETAIL, error)
    }

    /// A 500 with its own stable `code` and a fixed public sentence (which must hold
    /// no internal text); `error` is logged under a fresh error id.
    pub fn internal_coded(
        code: &'static str,
        public_detail: &str,
        error: impl std::fmt::Display,
    ) -> Self {
        let error_id = uuid::Uuid::new_v4().simple().to_string();
        tracing::error!(%error_id, code, error = %error, "internal error");
        let mut p = Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            code,
            format!("{public_detail}; error_id {error_id} identifies it in the service log"),
        );
        p.error_id = Some(error_id);
        p
    }

    /// What goes on the wire: a 500 built without [`Problem::internal_coded`] is
    /// logged and scrubbed here.
    fn scrubbed(self) -> Self {
        if self.status != StatusCode::INTERNAL_SERVER_ERROR || self.error_id.is_some() {
            return self;
        }
        let mut p = Self::internal_coded(self.code, INTERNAL_DETAIL, &self.detail);
        p.retry_after_s = self.retry_after_s;
        p
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let problem = self.scrubbed();
        let body = serde_json::to_vec(&problem.body()).unwrap_or_default();
        let mut response = (
            problem.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body,
        )
            .into_response();
        if let Some(s) = problem.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        response
    }
}

impl Problem {
    /// A domain refusal of any aggregate: 404 (unknown), 422 (the request contradicts
    /// itself or its stream), 409 (the current state does not allow it), with the
    /// aggregate's stable `code` and `field`. The one place refusals become answers.
    pub fn refusal<R: Refusal + ?Sized>(e: &R) -> Problem {
        let status = match e.kind() {
            RefusalKind::NotFound => StatusCode::NOT_FOUND,
            RefusalKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            RefusalKind::Conflict => StatusCode::CONFLICT,
        };
        let p = Problem::new(status, e.code(), e.to_string());
        match e.field() {
            Some(f) => p.field(f),
            None => p,
        }
    }
}

impl From<WalletError> for Problem {
    fn from(e: WalletError) -> Self {
        Problem::refusal(&e)
    }
}

impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::OutcomeUnknown(_) => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "OUTCOME_UNKNOWN",
                "the database connection failed while the command was in flight; retry with \
                 the same Idempotency-Key to learn its outcome",
            ),
            StoreError::Unavailable(_) => Problem::database_unavailable(),
            StoreError::Conflict { .. } => {
                Problem::new(StatusCode::CONFLICT, "CONCURRENCY_CONFLICT", e.to_string())
            }
            other => Problem::internal_coded(
                "STORE_ERROR",
                "the event store failed; nothing was written",
                other,
            ),
        }
    }
}

impl<E> From<BusError<E>> for Problem
where
    E: std::error::Error + Into<Problem>,
{
    fn from(e: BusError<E>) -> Self {
        match e {
            BusError::Domain(d) => d.into(),
            BusError::Conflict(n) => Problem::new(
                StatusCode::CONFLICT,
                "CONCURRENCY_CONFLICT",
                format!("the stream kept changing; gave up after {n} attempts, nothing written"),
            ),
            BusError::IdempotencyMismatch => Problem::invalid(
                "IDEMPOTENCY_KEY_REUSED",
                "Idempotency-Key",
                "this Idempotency-Key was already used with a different request",
            ),
            BusError::DuplicateLedgerRef(r) => Problem::new(
                StatusCode::CONFLICT,
                "DUPLICATE_LEDGER_REF",
                format!("a ledger entry for {r} already exists; it takes effect once"),
            )
            .field("ref_id"),
            BusError::Invariant(v) => Problem::internal_coded(
                "INVARIANT_VIOLATION",
                "the stored events of this stream break an invariant; nothing was written",
                format!("invariant violation in stored events: {v}"),
            ),
            BusError::Store(s) => s.into(),
            BusError::ShutDown => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "SHUTTING_DOWN",
                "the service is shutting down",
            ),
            BusError::Aborted(culprit) => Problem::new(
                StatusCode::FAILED_DEPENDENCY,
                "LINKED_ITEM_REFUSED",
                format!(
                    "not applied: item {culprit} of this atomic batch was refused, so nothing \
                     of the batch was written"
                ),
            ),
        }
    }
}

/// A unit that did not commit, as a problem; `domain` maps the aggregate's refusal.
pub(crate) fn unit_problem<E: std::error::Error>(
    e: crate::runtime::unit::UnitError<E>,
    domain: impl Fn(E) -> Problem,
) -> Problem {
    match e {
        crate::runtime::unit::UnitError::Refused(d) => domain(d),
        crate::runtime::unit::UnitError::Conflict(n) => Problem::new(
            StatusCode::CONFLICT,
            "CONCURRENCY_CONFLICT",
            format!("the streams kept changing; gave up after {n} attempts, nothing written"),
        ),
        crate::runtime::unit::UnitError::DuplicateLedgerRef(r) => Problem::new(
            StatusCode::CONFLICT,
            "DUPLICATE_LEDGER_REF",
            format!("ledger reference {r} already exists; nothing written"),
        ),
        crate::runtime::unit::UnitError::TooManyStreams => Problem::internal(e.to_string()),
        crate::runtime::unit::UnitError::Invariant(v) => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INVARIANT_VIOLATION",
            format!("stored events contradict the aggregate: {v}"),
        ),
        crate::runtime::unit::UnitError::Store(s) => s.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bus::BusError;

    #[test]
    fn an_exhausted_conflict_is_409_concurrency_conflict() {
        let p = Problem::from(BusError::<WalletError>::Conflict(10));
        assert_eq!(p.status, StatusCode::CONFLICT);
        assert_eq!(p.code, "CONCURRENCY_CONFLICT");
        let p = Problem::from(StoreError::Conflict {
            aggregate_type: "wallet".into(),
            aggregate_id: "w-1".into(),
            expected_version: 3,
        });
        assert_eq!(p.status, StatusCode::CONFLICT);
        assert_eq!(p.code, "CONCURRENCY_CONFLICT");
    }

    #[test]
    fn an_unknown_outcome_is_503_and_tells_the_client_to_retry_with_its_key() {
        let p = Problem::from(StoreError::OutcomeUnknown("connection reset".into()));
        assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(p.code, "OUTCOME_UNKNOWN");
        assert!(p.detail.contains("Idempotency-Key"));
    }

    #[test]
    fn a_database_that_cannot_be_reached_is_503_database_unavailable_with_retry_after() {
        let p = Problem::from(StoreError::Unavailable("connection refused".into()));
        assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(p.code, "DATABASE_UNAVAILABLE");
        assert_eq!(p.retry_after_s, Some(DATABASE_RETRY_AFTER_S));
        assert!(p.detail.contains("Idempotency-Key"));
        assert!(crate::infra::store::is_connection_failure(
            &sqlx::Error::PoolTimedOut
        ));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(crate::infra::store::is_connection_failure(
            &sqlx::Error::Io(reset)
        ));
        assert!(!crate::infra::store::is_connection_failure(
            &sqlx::Error::RowNotFound
        ));
    }

    #[test]
    fn the_body_is_rfc_9457_with_code_and_field() {
        let body = Problem::from(WalletError::InsufficientBalance {
            bucket: "available",
            balance_minor: 0,
            amount_minor: 5,
        })
        .body();
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(json["type"], "/problems/insufficient-balance");
        assert_eq!(json["status"], 409);
        assert_eq!(json["code"], "INSUFFICIENT_BALANCE");
        assert_eq!(json["field"], "amount_minor");
        assert_eq!(json["title"], "Conflict");
    }

    /// A log sink for one test (the subscriber is set for this thread only).
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        let sink = Captured::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let out = tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        (out, text)
    }

    #[test]
    fn f11_internal_errors_are_logged_under_their_error_id_and_never_answered() {
        let (p, log) = logged(|| Problem::internal("no such table: api_keys"));
        let id = p.error_id.clone().expect("error id");
        let body = serde_json::to_string(&p.body()).unwrap();
        assert!(!body.contains("api_keys"), "{body}");
        assert!(body.contains(&id), "{body}");
        assert_eq!(p.code, "INTERNAL");
        assert!(log.contains("ERROR"), "{log}");
        assert!(
            log.contains(&id) && log.contains("no such table: api_keys"),
            "{log}"
        );
    }

    #[test]
    fn f11_store_and_invariant_errors_keep_their_code_but_not_their_text() {
        let (p, log) = logged(|| Problem::from(StoreError::OutcomeUnknown("x".into())));
        assert_eq!(p.code, "OUTCOME_UNKNOWN");
        assert!(log.is_empty(), "{log}");
        let (p, _) = logged(|| {
            Problem::from(BusError::<WalletError>::Invariant(
                factledger_aggregates::InvariantViolation("balance 7 != 9 in w-secret".into()),
            ))
        });
        assert_eq!(p.code, "INVARIANT_VIOLATION");
        assert!(p.error_id.is_some());
        assert!(!p.detail.contains("w-secret"), "{}", p.detail);
    }

    #[tokio::test]
    async fn f11_a_500_built_by_hand_is_scrubbed_on_the_way_out() {
        let p = Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "SOME_CODE",
            "pool: secret",
        );
        let response = p.into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["code"], "SOME_CODE");
        assert!(body["error_id"].is_string(), "{body}");
        assert!(!body.to_string().contains("secret"), "{body}");
    }

    #[tokio::test]
    async fn a_problem_with_retry_after_sends_the_header() {
        let response = Problem::new(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED", "slow down")
            .retry_after(3)
            .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    }
}
