//! The callback inbox over HTTP (issue 4 item 7): `POST /v1/callbacks/{provider}`
//! receives a provider's callback; `GET /v1/callbacks` and `GET /v1/callbacks/{id}`
//! read the inbox (every role).
//!
//! `POST /v1/callbacks/{provider}` is the only write route without a bearer key:
//! providers cannot hold our API keys, they prove themselves by an HMAC signature or
//! a token in a header, checked in `crate::callbacks` BEFORE anything is stored. It
//! shares the router's body limit (`BODY_BYTES_MAX`, 413 beyond). An unknown provider
//! (404) or an unverified delivery (401) stores nothing but a counter and, for the
//! latter, a bounded sample (`callbacks::guard`): storing whatever anyone posts to an
//! unauthenticated URL would let anybody fill the table.

use crate::callbacks::inbox::{self, CallbackRow, CallbackSummary};
use crate::callbacks::{self, CallbackError, Delivery, HandleStatus, Receipt, VerifyStatus};
use crate::runtime::http::body::RawBody;
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a provider expects its delivery answered: what makes it stop re-sending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AnswerFormat {
    /// Our receipt as JSON (200 handled or duplicate, 202 failed and replayed) and
    /// problem+json errors. Xendit and Apple only read the 2xx status.
    #[default]
    Json,
    /// WeChat Pay APIv3: a stored delivery is answered 200 with no body; a refusal
    /// 4xx/5xx with `{"code":"FAIL","message":…}` (WeChat re-sends on anything else).
    WechatPayV3,
    /// Alipay: a stored delivery is answered with the text `success`; a refusal
    /// with `fail` (Alipay re-sends until it reads `success`).
    AlipayText,
}

impl From<CallbackError> for Problem {
    fn from(e: CallbackError) -> Self {
        match &e {
            CallbackError::UnknownProvider(_) => Problem::new(
                StatusCode::NOT_FOUND,
                "UNKNOWN_CALLBACK_PROVIDER",
                e.to_string(),
            )
            .field("provider"),
            CallbackError::RateLimited(_) => {
                Problem::new(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED", e.to_string())
                    .retry_after(callbacks::guard::RETRY_AFTER_S)
            }
            CallbackError::Backlog { .. } => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "CALLBACK_BACKLOG_FULL",
                e.to_string(),
            )
            .retry_after(callbacks::guard::RETRY_AFTER_S),
            // The database went away mid-delivery: the provider retries on a 503.
            CallbackError::Database(db) if crate::infra::store::is_connection_failure(db) => {
                Problem::database_unavailable()
            }
            CallbackError::Job(crate::infra::jobs::JobError::Database(db))
                if crate::infra::store::is_connection_failure(db) =>
            {
                Problem::database_unavailable()
            }
            CallbackError::Job(crate::infra::jobs::JobError::Store(
                crate::infra::store::StoreError::Unavailable(_),
            )) => Problem::database_unavailable(),
            _ => {
                tracing::error!(error = %e, "callback inbox failed");
                Problem::internal(e.to_string())
            }
        }
    }
}

/// What the provider is told about its callback.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbackReceipt {
    /// The stored callback (`GET /v1/callbacks/{id}`).
    pub id: i64,
    /// HANDLED, DUPLICATE, or FAILED (accepted; a replay will retry it).
    pub status: HandleStatus,
    /// The delivery that owns this provider event id, for a duplicate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<i64>,
    /// The `callback_replay` job code that retries a failed handling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_job: Option<String>,
}

fn receipt(status: StatusCode, r: CallbackReceipt) -> Response {
    (status, Json(r)).into_response()
}

/// Receive a provider's callback. No bearer key: the provider's signature or token
/// (its header, per provider) authenticates it, before anything is stored. A verified
/// callback is stored raw, normalised, deduplicated by the provider event id and
/// handled; a failed handling is retried from the stored normalised payload, and a
/// redelivery of an event whose handling never finished handles it again.
#[utoipa::path(post, path = "/v1/callbacks/{provider}",
    params(("provider" = String, Path, description = "A configured callback provider")),
    request_body(content = String, description = "The provider's body, exactly as it signs it"),
    responses(
        (status = 200, body = CallbackReceipt, description = "Handled, or a duplicate of a delivery already stored"),
        (status = 202, body = CallbackReceipt, description = "Stored and verified, handling failed: a replay will retry it"),
        (status = 401, body = ProblemBody, description = "Signature or token wrong or missing (the field names the header); not stored, never handled"),
        (status = 404, body = ProblemBody, description = "No such provider; nothing stored"),
        (status = 413, body = ProblemBody, description = "BODY_TOO_LARGE: body over the limit"),
        (status = 422, body = ProblemBody, description = "Verified but not normalisable; stored, never handled"),
        (status = 429, body = ProblemBody, description = "RATE_LIMITED: the provider's rate is exceeded; retry after Retry-After"),
        (status = 503, body = ProblemBody, description = "CALLBACK_BACKLOG_FULL (the provider's unhandled callbacks are at the cap) or DATABASE_UNAVAILABLE; retry after Retry-After")))]
pub async fn receive(
    State(state): State<AppState>,
    Path(provider): Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, Problem> {
    let delivery = Delivery {
        provider,
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
    };
    let registry = state.part::<callbacks::Registry>()?;
    let answer = registry
        .get(&delivery.provider)
        .map_or(AnswerFormat::Json, |p| p.answer);
    let outcome = match callbacks::receive(&state.jobs, registry, delivery).await {
        Ok(r) => outcome(r),
        Err(e) => Err(Problem::from(e)),
    };
    Ok(render(answer, outcome))
}

/// A delivery's outcome before it is put in the provider's format: stored (with the
/// status and receipt), or refused.
fn outcome(r: Receipt) -> Result<(StatusCode, CallbackReceipt), Problem> {
    let stored = |status, handle_status, duplicate_of, replay_job| {
        Ok((
            status,
            CallbackReceipt {
                id: 0,
                status: handle_status,
                duplicate_of,
                replay_job,
            },
        ))
    };
    let (id, result) = match r {
        Receipt::Handled { id } => (
            id,
            stored(StatusCode::OK, HandleStatus::Handled, None, None),
        ),
        Receipt::Duplicate { id, duplicate_of } => (
            id,
            stored(
                StatusCode::OK,
                HandleStatus::Duplicate,
                Some(duplicate_of),
                None,
            ),
        ),
        Receipt::Failed { id, replay_job } => (
            id,
            stored(StatusCode::ACCEPTED, HandleStatus::Failed, None, replay_job),
        ),
        Receipt::Unverified { error, .. } => {
            return Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "CALLBACK_UNVERIFIED",
                format!("{error} (not stored, not handled)"),
            )
            .field(error.header()))
        }
        Receipt::NotNormalised { id, error } => {
            return Err(Problem::invalid(
                "CALLBACK_NOT_NORMALISABLE",
                "body",
                format!("{error} (stored as callback {id}; it will not be handled)"),
            ))
        }
    };
    result.map(|(status, receipt)| (status, CallbackReceipt { id, ..receipt }))
}

/// The answer in the provider's format ([`AnswerFormat`]): a stored delivery is what
/// stops it re-sending; a refusal keeps its status (and `Retry-After`).
fn render(
    answer: AnswerFormat,
    outcome: Result<(StatusCode, CallbackReceipt), Problem>,
) -> Response {
    match (answer, outcome) {
        (AnswerFormat::Json, Ok((status, r))) => receipt(status, r),
        (AnswerFormat::Json, Err(p)) => p.into_response(),
        (AnswerFormat::WechatPayV3, Ok(_)) => StatusCode::OK.into_response(),
        (AnswerFormat::AlipayText, Ok(_)) => {
            (StatusCode::OK, [(CONTENT_TYPE, "text/plain")], "success").into_response()
        }
        (format, Err(p)) => {
            let mut response = if format == AnswerFormat::WechatPayV3 {
                let body = serde_json::json!({"code": "FAIL", "message": p.detail});
                (p.status, Json(body)).into_response()
            } else {
                (p.status, [(CONTENT_TYPE, "text/plain")], "fail").into_response()
            };
            if let Some(s) = p.retry_after_s {
                response.headers_mut().insert(RETRY_AFTER, s.into());
            }
            response
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    provider: Option<String>,
    /// PENDING, HANDLED, FAILED, SKIPPED or DUPLICATE (or 0 … 4).
    handle_status: Option<String>,
    /// Callbacks with an id above this one (the `next_after` of the previous page).
    after: Option<i64>,
    limit: Option<i64>,
}

fn time(ms: Option<i64>) -> Option<String> {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| crate::infra::store::time_text(&t))
}

/// A callback in a list.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbackView {
    pub id: i64,
    pub provider: String,
    /// Set on the delivery that owns the event id (not on duplicates).
    pub provider_event_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: Option<String>,
    pub verify_status: VerifyStatus,
    pub verify_error: Option<String>,
    /// Whether a normalised payload is stored.
    pub normalized: bool,
    pub normalize_error: Option<String>,
    pub handle_status: HandleStatus,
    pub handle_attempts: i32,
    pub handle_error: Option<String>,
    pub handled_at: Option<String>,
    pub duplicate_of: Option<i64>,
    pub updated_at: Option<String>,
}

impl From<CallbackSummary> for CallbackView {
    fn from(s: CallbackSummary) -> Self {
        CallbackView {
            id: s.id,
            provider: s.provider,
            provider_event_id: s.provider_event_id,
            event_type: s.event_type,
            received_at: time(Some(s.received_at_ms)),
            verify_status: s.verify_status,
            verify_error: s.verify_error,
            normalized: s.normalized,
            normalize_error: s.normalize_error,
            handle_status: s.handle_status,
            handle_attempts: s.handle_attempts,
            handle_error: s.handle_error,
            handled_at: time(s.handled_at_ms),
            duplicate_of: s.duplicate_of,
            updated_at: time(Some(s.updated_at_ms)),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbacksPage {
    pub callbacks: Vec<CallbackView>,
    /// Pass as `after` for the next page; absent on the last one.
    pub next_after: Option<i64>,
}

/// Stored callbacks, optionally of one provider and handle status, in id order.
#[utoipa::path(get, path = "/v1/callbacks", params(ListQuery),
    responses((status = 200, body = CallbacksPage), (status = 422, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    _caller: Caller,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<CallbacksPage>, Problem> {
    let status = match q.handle_status.as_deref() {
        None => None,
        Some(s) => Some(HandleStatus::parse(s).ok_or_else(|| {
            Problem::invalid(
                "INVALID_FIELD",
                "handle_status",
                format!("{s:?} is not PENDING, HANDLED, FAILED, SKIPPED or DUPLICATE"),
            )
        })?),
    };
    let limit = crate::runtime::http::page_limit(q.limit)?;
    let rows = inbox::list(
        state.jobs.db(),
        q.provider.as_deref(),
        status,
        q.after.unwrap_or(0),
        limit,
    )
    .await?;
    let next_after = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    Ok(Json(CallbacksPage {
        callbacks: rows.into_iter().map(CallbackView::from).collect(),
        next_after,
    }))
}

/// One callback whole: what was received and what became of it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbackDetail {
    #[serde(flatten)]
    pub callback: CallbackView,
    /// The request headers kept (a token header only as a fingerprint).
    #[schema(value_type = Object)]
    pub headers: Value,
    /// The body as received, when it is UTF-8.
    pub raw_body: Option<String>,
    /// The body as received in hex, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_body_hex: Option<String>,
    /// `{event_id, event_type, data}`: what handlers and replays see.
    #[schema(value_type = Option<Object>)]
    pub normalized_payload: Option<Value>,
    /// The code of this callback's `callback_replay` job (`GET /v1/jobs/{code}`); the
    /// job exists only once a handling failed.
    pub replay_job: String,
}

impl From<CallbackRow> for CallbackDetail {
    fn from(r: CallbackRow) -> Self {
        let (raw_body, raw_body_hex) = match String::from_utf8(r.raw_body) {
            Ok(text) => (Some(text), None),
            Err(e) => (None, Some(hex::encode(e.as_bytes()))),
        };
        let parse = |t: &str| serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.into()));
        let replay_job =
            callbacks::CALLBACK_REPLAY.code(&callbacks::replay::business_key(r.summary.id));
        CallbackDetail {
            headers: parse(&r.headers),
            raw_body,
            raw_body_hex,
            normalized_payload: r.normalized_payload.as_deref().map(parse),
            replay_job,
            callback: r.summary.into(),
        }
    }
}

/// One stored callback with its headers, raw body and normalised payload.
#[utoipa::path(get, path = "/v1/callbacks/{id}",
    params(("id" = i64, Path, description = "The callback id")),
    responses((status = 200, body = CallbackDetail), (status = 404, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn show(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<CallbackDetail>, Problem> {
    let not_found = || {
        Problem::new(
            StatusCode::NOT_FOUND,
            "CALLBACK_NOT_FOUND",
            format!("no callback with id {id:?}"),
        )
        .field("id")
    };
    let n: i64 = id.parse().map_err(|_| not_found())?;
    inbox::load(state.jobs.db(), n)
        .await?
        .map(|r| Json(r.into()))
        .ok_or_else(not_found)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parts(r: Response) -> (StatusCode, Option<String>, String) {
        let status = r.status();
        let retry = r
            .headers()
            .get(RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        (status, retry, String::from_utf8(body.to_vec()).unwrap())
    }

    fn stored() -> Result<(StatusCode, CallbackReceipt), Problem> {
        outcome(Receipt::Failed {
            id: 7,
            replay_job: Some("J-1".into()),
        })
    }

    fn refused() -> Result<(StatusCode, CallbackReceipt), Problem> {
        Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "CALLBACK_BACKLOG_FULL",
            "full",
        )
        .retry_after(5))
    }

    #[tokio::test]
    async fn each_provider_is_answered_in_its_documented_format() {
        let (s, _, body) = parts(render(AnswerFormat::Json, stored())).await;
        assert_eq!(s, StatusCode::ACCEPTED);
        assert!(body.contains(r#""id":7"#) && body.contains("J-1"), "{body}");
        // WeChat Pay APIv3: success is 200 (or 204) with no body; a failure is 4xx/5xx
        // with {"code":"FAIL","message":…}, and WeChat re-sends.
        assert_eq!(
            parts(render(AnswerFormat::WechatPayV3, stored())).await,
            (StatusCode::OK, None, String::new())
        );
        let (s, retry, body) = parts(render(AnswerFormat::WechatPayV3, refused())).await;
        assert_eq!(
            (s, retry.as_deref()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("5"))
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v, serde_json::json!({"code": "FAIL", "message": "full"}));
        // Alipay reads the body: `success` stops its re-sending, anything else does not.
        assert_eq!(
            parts(render(AnswerFormat::AlipayText, stored())).await,
            (StatusCode::OK, None, "success".to_owned())
        );
        let (s, _, body) = parts(render(AnswerFormat::AlipayText, refused())).await;
        assert_eq!(
            (s, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "fail")
        );
        let unverified = outcome(Receipt::Unverified {
            sample: None,
            error: crate::callbacks::VerifyError::Rejected {
                header: "wechatpay-signature".into(),
                reason: "bad_signature",
                message: "the signature does not match".into(),
            },
        });
        let (s, _, body) = parts(render(AnswerFormat::AlipayText, unverified)).await;
        assert_eq!((s, body.as_str()), (StatusCode::UNAUTHORIZED, "fail"));
    }
}
