//! WeChat Pay APIv3 notifications through the callback inbox: the adapters between
//! `callbacks` and `services::wechatpay` (which cannot import each other).
//!
//! - [`NotificationAuthenticator`]: `Verifier::custom`, the four `Wechatpay-*`
//!   headers checked against the configured platform keys before anything is stored
//!   (refusals name the header: `wechatpay-serial` `unknown_serial`,
//!   `wechatpay-timestamp` `stale_timestamp`, `wechatpay-signature` `bad_signature`,
//!   a missing header `missing_header`). WeChat's own probes (signatures starting
//!   `WECHATPAY/SIGNTEST/`) fail as `bad_signature`, as the docs expect.
//! - [`NotificationNormalizer`]: the notification `id` is the event id (the inbox's
//!   dedupe key; WeChat re-sends under the same id), `event_type` the type, and
//!   `data` the resource decrypted under the APIv3 key. A resource that does not
//!   decrypt leaves the delivery stored, unnormalised, never handled.
//! - [`WechatPayHandler`]: `TRANSACTION.SUCCESS` goes to the gateway's
//!   [`PaymentCallbacks`] (an order paid); `REFUND.SUCCESS`/`ABNORMAL`/`CLOSED`
//!   settle the refund through `services::flow::refund_answered`, the same record a
//!   refund query makes, so a notification and a query agree and apply once.
//!
//! Answers are `AnswerFormat::WechatPayV3`: 200 with no body once stored, a 4xx/5xx
//! with `{"code": "FAIL", "message"}` otherwise (WeChat re-sends until a 2xx).

use super::services::PaymentCallbacks;
use crate::callbacks::{
    AnswerFormat, Authenticator, CallbackFailure, CallbackHandler, CallbackProvider,
    NormalizeError, Normalized, NormalizedCallback, Normalizer, Verifier, VerifyError,
};
use crate::infra::store::Fence;
use crate::services::gateway::PaymentGateway;
use crate::services::wechatpay::crypto::{self, ApiV3Key, PlatformKeys, SignedHeaders};
use crate::services::wechatpay::{decode_notification, wire};
use crate::services::Ctx;
use async_trait::async_trait;
use std::sync::Arc;

/// The callback half of WeChat Pay's protocol (`GatewayCallbacks::WechatPay`).
#[derive(Clone, Debug)]
pub struct WechatPayCallbacks {
    pub platform_keys: PlatformKeys,
    pub apiv3_key: ApiV3Key,
    /// Our merchant id: a refund notification for another is refused.
    pub mchid: String,
}

impl WechatPayCallbacks {
    /// The callback half of a gateway's configuration.
    pub fn of(config: &crate::services::wechatpay::WechatPayConfig) -> WechatPayCallbacks {
        WechatPayCallbacks {
            platform_keys: config.platform_keys.clone(),
            apiv3_key: config.apiv3_key.clone(),
            mchid: config.mchid.clone(),
        }
    }
}

/// Checks a notification's signature headers (see the module docs).
pub struct NotificationAuthenticator {
    pub keys: PlatformKeys,
}

impl Authenticator for NotificationAuthenticator {
    fn header(&self) -> &str {
        crypto::SIGNATURE_HEADER
    }

    fn verify(
        &self,
        headers: &[(String, Vec<u8>)],
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), VerifyError> {
        SignedHeaders::collect(headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())))
            .and_then(|h| self.keys.verify(&h, body, now_ms))
            .map_err(|e| VerifyError::Rejected {
                header: e.header.to_owned(),
                reason: e.reason,
                message: e.message,
            })
    }
}

/// Decrypts a notification's resource (see the module docs).
pub struct NotificationNormalizer {
    pub key: ApiV3Key,
}

impl Normalizer for NotificationNormalizer {
    fn normalize(&self, raw: &[u8]) -> Result<Normalized, NormalizeError> {
        let n = decode_notification(raw, &self.key).map_err(NormalizeError)?;
        Ok(Normalized {
            event_id: n.id,
            event_type: n.event_type,
            data: n.data,
        })
    }
}

/// Pay notifications to the payment path, refund notifications to the refund path.
pub struct WechatPayHandler {
    pub payments: PaymentCallbacks,
    pub mchid: String,
}

#[async_trait]
impl CallbackHandler for WechatPayHandler {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        match cb.event_type.as_str() {
            wire::TRANSACTION_SUCCESS => self.payments.handle(cb, fence).await,
            wire::REFUND_SUCCESS | wire::REFUND_ABNORMAL | wire::REFUND_CLOSED => {
                let (refund_no, answer) = wire::parse_refund_notice(&cb.data, &self.mchid)
                    .map_err(CallbackFailure::new)?;
                crate::services::flow::refund_answered(
                    &self.payments.ctx,
                    &refund_no,
                    &answer,
                    chrono::Utc::now(),
                    fence,
                )
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    crate::runtime::unit::UnitError::Store(s) => s.into(),
                    other => CallbackFailure::new(other.to_string()),
                })
            }
            other => Err(CallbackFailure::new(format!(
                "event_type {other:?}: not a WeChat Pay notification this service handles"
            ))),
        }
    }
}

/// The gateway's callback provider over WeChat Pay's protocol.
pub fn provider(
    ctx: Ctx,
    gateway: Arc<dyn PaymentGateway>,
    callbacks: &WechatPayCallbacks,
) -> CallbackProvider {
    let authenticator = NotificationAuthenticator {
        keys: callbacks.platform_keys.clone(),
    };
    CallbackProvider::new(
        gateway.name().to_owned(),
        Verifier::custom(Arc::new(authenticator)),
        Arc::new(NotificationNormalizer {
            key: callbacks.apiv3_key.clone(),
        }),
        Arc::new(WechatPayHandler {
            payments: PaymentCallbacks { ctx, gateway },
            mchid: callbacks.mchid.clone(),
        }),
    )
    .keeping(&[
        crypto::SERIAL_HEADER,
        crypto::TIMESTAMP_HEADER,
        crypto::NONCE_HEADER,
    ])
    .answering(AnswerFormat::WechatPayV3)
}
