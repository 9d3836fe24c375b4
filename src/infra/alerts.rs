//! Alerts (SPEC R-MON-1): jobs that exhaust their retries, fencing rejections and
//! stalled projections are told to people through the outbox, like any other message
//! for the outside world — so an alert is durable, relayed at least once to every
//! sink (NATS, webhooks, the log) and never blocks the work that raised it.
//!
//! Every alert carries the whole context an on-call engineer needs, never just "job
//! failed": environment, data centre, job, platform, business id, user affiliate
//! code, request and trace id, first failure time, retry count and a link to the
//! audit view. A field the subject does not have is `null`, not missing.

use crate::infra::store::{DynStore, OutboxRow, StoreError, UnitOfWork};
use serde_json::{json, Value};

/// Where this deployment runs, stamped on every alert.
#[derive(Debug, Clone)]
pub struct AlertContext {
    /// `FACTLEDGER_ENV`: production, staging, dev…
    pub environment: String,
    /// The data centre's country (R-INV-11).
    pub country_code: String,
    /// Base URL operators reach the API at; audit links start with it.
    pub public_url: String,
}

impl Default for AlertContext {
    fn default() -> Self {
        AlertContext {
            environment: "dev".into(),
            country_code: "ID".into(),
            public_url: format!("http://{}", crate::infra::LISTEN_DEFAULT),
        }
    }
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    /// A job failed and has no automatic retry left.
    JobRetriesExhausted,
    /// A stale claim tried to write: a fenced unit or a completion was refused.
    JobFenced,
    /// A projection stopped at an event and keeps failing on it.
    ProjectionStalled,
    /// A callback provider's stored, unhandled callbacks reached the inbox's cap.
    CallbackBacklog,
    /// Failed authentications (API keys, console sign-ins) passed the per-minute
    /// threshold: someone may be guessing keys.
    AuthFailures,
    /// The payout provider reversed a payout after the withdrawal was PAID: the money
    /// is back in the provider balance and the user's wallet was debited.
    PayoutReversed,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::JobRetriesExhausted => "job.retries_exhausted",
            AlertKind::JobFenced => "job.fenced",
            AlertKind::ProjectionStalled => "projection.stalled",
            AlertKind::CallbackBacklog => "callback.backlog",
            AlertKind::AuthFailures => "auth.failures",
            AlertKind::PayoutReversed => "payout.reversed",
        }
    }
}

/// One alert and its context (R-MON-1).
#[derive(Debug, Clone)]
pub struct Alert {
    pub kind: AlertKind,
    /// The subject's id: a job code, a projection name.
    pub subject: String,
    pub message: String,
    /// `{kind, code, business_key}` of the job, when a job raised it.
    pub job: Option<Value>,
    pub platform: Option<String>,
    pub business_id: Option<String>,
    pub user_affiliate_code: Option<String>,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub first_failure_at_ms: Option<i64>,
    pub retry_count: Option<i64>,
    /// Path of the audit view under the public URL (`/v1/jobs/<code>`).
    pub audit_path: String,
}

impl Alert {
    /// The alert as its outbox row.
    pub fn outbox_row(&self, ctx: &AlertContext) -> OutboxRow {
        let time = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms).map(|t| crate::infra::store::time_text(&t))
        };
        let payload = json!({
            "alert": self.kind.as_str(),
            "message": self.message,
            "environment": ctx.environment,
            "data_centre": ctx.country_code,
            "job": self.job,
            "platform": self.platform,
            "business_id": self.business_id,
            "user_affiliate_code": self.user_affiliate_code,
            "request_id": self.request_id,
            "trace_id": self.trace_id,
            "first_failure_at": self.first_failure_at_ms.and_then(time),
            "retry_count": self.retry_count,
            "audit_link": format!("{}{}", ctx.public_url.trim_end_matches('/'), self.audit_path),
            "raised_at": time(crate::infra::db::now_ms()),
        });
        OutboxRow {
            aggregatetype: "alert".into(),
            aggregateid: self.subject.clone(),
            r#type: format!("alert.{}", self.kind.as_str()),
            payload: payload.to_string(),
        }
    }
}

/// Raise an alert: log it and write it to the outbox (its own small transaction).
pub async fn raise(store: &DynStore, ctx: &AlertContext, alert: &Alert) -> Result<(), StoreError> {
    tracing::error!(
        alert = alert.kind.as_str(),
        subject = %alert.subject,
        business_id = ?alert.business_id,
        request_id = ?alert.request_id,
        trace_id = ?alert.trace_id,
        retry_count = ?alert.retry_count,
        message = %alert.message,
        "alert raised"
    );
    metrics::counter!("factledger_alerts_total", "alert" => alert.kind.as_str()).increment(1);
    store
        .append(&[UnitOfWork {
            outbox: vec![alert.outbox_row(ctx)],
            ..Default::default()
        }])
        .await
        .map(|_| ())
}

/// A string field of a JSON payload, if it has one (`platform`, `affiliate_code`…).
pub fn payload_field(payload: &Value, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| match payload.get(*n) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(x)) => Some(x.to_string()),
        _ => None,
    })
}
