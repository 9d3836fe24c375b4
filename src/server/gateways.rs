//! The cash gateway's callback half, per protocol: how its pay (and refund)
//! notifications are verified and read ([`GatewayCallbacks`]), and the callback
//! provider the composition root registers for it ([`payment_callbacks`]). Each
//! protocol's adapters live beside it (`gateway_wechatpay`, `gateway_alipay`); the
//! paysim protocol's are the inbox's own HMAC verifier and JSON pointers.

use super::services::PaymentCallbacks;
use crate::services::gateway::PaymentGateway;
use crate::services::Ctx;
use std::sync::Arc;

/// How the cash gateway's pay (and refund) notifications are verified and read: the
/// callback half of its protocol. One variant per gateway protocol; the composition
/// root turns it into the gateway's callback provider ([`payment_callbacks`]).
#[derive(Clone, Default)]
pub enum GatewayCallbacks {
    /// Not configured: every callback to the gateway's name fails verification.
    #[default]
    Unconfigured,
    /// `tools/payout-sim`'s paysim protocol: lower-case hex HMAC-SHA256 of the raw
    /// body under this secret in `x-gateway-signature`.
    Paysim { secret: String },
    /// WeChat Pay APIv3: the platform keys by serial, the APIv3 key and our merchant
    /// id (`server::gateway_wechatpay`).
    WechatPay(super::gateway_wechatpay::WechatPayCallbacks),
    /// Alipay's async notifications: RSA2 over the sorted form with the Alipay public
    /// key, our app id and seller (`server::gateway_alipay`).
    Alipay(crate::services::alipay::NotifyVerifier),
}

/// The callback provider of `gateway` (`POST /v1/callbacks/{name}`), verified and
/// normalised as `callbacks` says, handled by [`PaymentCallbacks`].
pub fn payment_callbacks(
    ctx: Ctx,
    gateway: Arc<dyn PaymentGateway>,
    callbacks: &GatewayCallbacks,
) -> crate::callbacks::CallbackProvider {
    use crate::callbacks::{CallbackProvider, JsonPointers, Secret, Verifier};
    use crate::services::gateway_http::callback_pointers;
    let p = callback_pointers();
    let secret = match callbacks {
        GatewayCallbacks::Unconfigured => None,
        GatewayCallbacks::Paysim { secret } => Some(Secret::new(secret)),
        GatewayCallbacks::WechatPay(w) => {
            return super::gateway_wechatpay::provider(ctx, gateway, w);
        }
        GatewayCallbacks::Alipay(verifier) => {
            return super::gateway_alipay::provider(ctx, gateway, verifier.clone())
        }
    };
    CallbackProvider::new(
        gateway.name().to_owned(),
        Verifier::hmac(secret, p.signature_header),
        Arc::new(JsonPointers::new(p.event_id, p.event_type)),
        Arc::new(PaymentCallbacks { ctx, gateway }),
    )
}
