//! Alipay's async notifications through the callback inbox: the adapters between the
//! callbacks capability and the Alipay protocol of paid services
//! (`services::alipay::notify`), which cannot import each other.
//!
//! - [`AlipayAuthenticator`]: the notification's RSA2 signature (a body field, so
//!   the refusals name `sign`), `sign_type` RSA2 only, our `app_id` and seller —
//!   checked before anything is stored. Refusal reasons (the metric label):
//!   `malformed` (not a form, a repeated field, not UTF-8), `missing_signature`,
//!   `unsupported_sign_type`, `bad_signature`, `wrong_app`, `wrong_account`.
//! - [`AlipayNormalizer`]: event id `notify_id` (Alipay keeps it across re-sends of
//!   one notification, so the inbox stores a re-send as a duplicate), event type
//!   `trade_status`, data the form as a JSON object of strings.
//! - [`AlipayNotices`]: a payment notice (TRADE_SUCCESS, TRADE_FINISHED without
//!   refund fields) goes to [`PaymentCallbacks`]; every other notice (WAIT_BUYER_PAY,
//!   TRADE_CLOSED, a refund notice) is acknowledged and recorded nowhere: refunds
//!   settle by query (R-REF-1) and unpaid orders close on their timeout.
//!
//! Alipay is answered `success` for a stored notification, `fail` otherwise
//! (`AnswerFormat::AlipayText`).

use crate::callbacks::{
    AnswerFormat, Authenticator, CallbackFailure, CallbackHandler, CallbackProvider,
    NormalizeError, Normalized, NormalizedCallback, Normalizer, Verifier, VerifyError,
};
use crate::infra::store::Fence;
use crate::server::services::PaymentCallbacks;
use crate::services::alipay::notify::{self, NoticeKind, NotifyVerifier, SIGN_FIELD};
use crate::services::gateway::PaymentGateway;
use crate::services::Ctx;
use async_trait::async_trait;
use std::sync::Arc;

/// Verifies a notification (see the module docs).
pub struct AlipayAuthenticator(pub NotifyVerifier);

impl Authenticator for AlipayAuthenticator {
    fn header(&self) -> &str {
        SIGN_FIELD
    }

    fn verify(
        &self,
        _headers: &[(String, Vec<u8>)],
        body: &[u8],
        _now_ms: i64,
    ) -> Result<(), VerifyError> {
        // Alipay's notification carries no timestamp window: its notify_id dedupes
        // a replay, and the signature covers notify_time.
        self.0.verify(body).map_err(|r| VerifyError::Rejected {
            header: SIGN_FIELD.to_owned(),
            reason: r.reason,
            message: r.message,
        })
    }
}

/// Normalises a notification (see the module docs).
pub struct AlipayNormalizer;

impl Normalizer for AlipayNormalizer {
    fn normalize(&self, raw: &[u8]) -> Result<Normalized, NormalizeError> {
        let (event_id, event_type, data) = notify::normalize(raw).map_err(NormalizeError)?;
        Ok(Normalized {
            event_id,
            event_type,
            data,
        })
    }
}

/// Hands payment notices to paid services; acknowledges the rest.
pub struct AlipayNotices(pub PaymentCallbacks);

#[async_trait]
impl CallbackHandler for AlipayNotices {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        match notify::kind(&cb.data) {
            NoticeKind::Payment => self.0.handle(cb, fence).await,
            other => {
                tracing::info!(
                    event_id = %cb.event_id,
                    event_type = %cb.event_type,
                    kind = ?other,
                    "alipay notification acknowledged, nothing to record"
                );
                Ok(())
            }
        }
    }
}

/// The callback provider of the Alipay gateway (`POST /v1/callbacks/{name}`).
pub fn provider(
    ctx: Ctx,
    gateway: Arc<dyn PaymentGateway>,
    verifier: NotifyVerifier,
) -> CallbackProvider {
    CallbackProvider::new(
        gateway.name().to_owned(),
        Verifier::custom(Arc::new(AlipayAuthenticator(verifier))),
        Arc::new(AlipayNormalizer),
        Arc::new(AlipayNotices(PaymentCallbacks { ctx, gateway })),
    )
    .answering(AnswerFormat::AlipayText)
}
