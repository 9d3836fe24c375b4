//! Errors as RFC 9457 problem details (`application/problem+json`), each with a
//! stable `code` and, where there is one, the offending `field`. This is the only
//! place errors become HTTP.

use crate::bus::BusError;
use crate::store::StoreError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use factledger_aggregates::wallet::WalletError;
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
}

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
}

impl Problem {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            field: None,
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

    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body,
        )
            .into_response()
    }
}

impl From<WalletError> for Problem {
    fn from(e: WalletError) -> Self {
        let status = match e {
            WalletError::NotFound => StatusCode::NOT_FOUND,
            WalletError::CurrencyMismatch { .. }
            | WalletError::BalanceOverflow { .. }
            | WalletError::ReasonTooLong { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            WalletError::AlreadyOpen
            | WalletError::InsufficientBalance { .. }
            | WalletError::WithdrawalsBlocked { .. }
            | WalletError::AlreadyBlocked { .. }
            | WalletError::BlockNotFound { .. } => StatusCode::CONFLICT,
        };
        let p = Problem::new(status, e.code(), e.to_string());
        match e.field() {
            Some(f) => p.field(f),
            None => p,
        }
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
            StoreError::Conflict { .. } => {
                Problem::new(StatusCode::CONFLICT, "CONCURRENCY_CONFLICT", e.to_string())
            }
            other => {
                tracing::error!(error = %other, "store error");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "STORE_ERROR",
                    "the event store failed; nothing was written",
                )
            }
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
            BusError::Invariant(v) => {
                tracing::error!(error = %v, "invariant violation in stored events");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "INVARIANT_VIOLATION",
                    v.to_string(),
                )
            }
            BusError::Store(s) => s.into(),
            BusError::ShutDown => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "SHUTTING_DOWN",
                "the service is shutting down",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::BusError;

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
}
