//! The App Store's notifications as a callback provider (`POST /v1/callbacks/appstore`):
//! the adapter between the callback inbox and paid services, beside the composition
//! root because it knows both. The protocol itself (JWS, x5c chain, payloads, the
//! mapping table) is `services::appstore`; here it is wired:
//! - [`AppStoreAuthenticator`]: the inbox's verification step — the whole notification
//!   verified (chain, signatures, bundle id, environment) before anything is stored;
//!   a refusal names its reason (`bad_chain`, `wrong_root`, `bad_signature`, …);
//! - [`AppStoreNormalizer`]: event id `notificationUUID`, event type
//!   `notificationType[.subtype]`, data the verified decoded payload (it verifies
//!   again: pure, so a stored payload is always a verified one);
//! - [`AppStoreCallbacks`]: the handler, running the paid-services flows the mapping
//!   asks for (a payment and delivery, a late payment's refund settled, a
//!   subscription's expiry), idempotent by `transactionId`.
//!
//! Configuration: [`config_from_env`] (`FACTLEDGER_APPSTORE_*`, see
//! `services::appstore::config`); the provider is registered when it is set.

use crate::callbacks::{
    Authenticator, CallbackFailure, CallbackHandler, CallbackProvider, NormalizeError, Normalized,
    NormalizedCallback, Normalizer, Verifier, VerifyError,
};
use crate::infra::store::Fence;
use crate::runtime::bus::load;
use crate::runtime::unit::UnitError;
use crate::services::appstore::mapping::{self, Action, Purchase, TransactionRef};
use crate::services::appstore::{AppStoreConfig, AppStoreVerifier, ConfigError, Notification};
use crate::services::units::{self, ServiceRefusal, ServiceUnitError};
use crate::services::{flow, jobs, Ctx};
use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use factledger_aggregates::refund::Refund;
use factledger_aggregates::service_order::{
    CreateOrder, OrderBusiness, OrderError, Payment, ServiceOrder,
};
use factledger_aggregates::services::PaymentMethod;
use std::sync::Arc;

/// The provider's name: `POST /v1/callbacks/appstore`.
pub const PROVIDER: &str = "appstore";
/// What a refusal names: the body field that carries the proof.
pub const PROOF_FIELD: &str = "signedpayload";

/// The App Store settings from the environment (`None`: not configured); a malformed
/// value refuses the start, naming its variable.
pub fn config_from_env() -> Result<Option<AppStoreConfig>, ConfigError> {
    AppStoreConfig::from_lookup(
        |k| std::env::var(k).ok(),
        |path| std::fs::read(path).map_err(|e| format!("{path}: {e}")),
    )
}

/// The inbox's verification step: the notification verified as a whole.
pub struct AppStoreAuthenticator(pub AppStoreVerifier);

impl Authenticator for AppStoreAuthenticator {
    fn header(&self) -> &str {
        PROOF_FIELD
    }

    fn verify(
        &self,
        _headers: &[(String, Vec<u8>)],
        body: &[u8],
        _now_ms: i64,
    ) -> Result<(), VerifyError> {
        self.0
            .verify_body(body)
            .map(|_| ())
            .map_err(|r| VerifyError::Rejected {
                header: PROOF_FIELD.to_owned(),
                reason: r.failure.reason(),
                message: r.to_string(),
            })
    }
}

/// `notificationUUID`, `notificationType[.subtype]`, the verified decoded payload.
pub struct AppStoreNormalizer(pub AppStoreVerifier);

impl Normalizer for AppStoreNormalizer {
    fn normalize(&self, raw: &[u8]) -> Result<Normalized, NormalizeError> {
        use crate::callbacks::normalize::{EVENT_ID_CHARS_MAX, EVENT_TYPE_CHARS_MAX};
        let v = self
            .0
            .verify_body(raw)
            .map_err(|r| NormalizeError(r.to_string()))?;
        let event_id = v.notification.notification_uuid.trim().to_owned();
        let event_type = v.notification.event_type();
        if event_id.is_empty() || event_id.chars().count() > EVENT_ID_CHARS_MAX {
            return Err(NormalizeError(format!(
                "notificationUUID must be 1 to {EVENT_ID_CHARS_MAX} characters"
            )));
        }
        if event_type.chars().count() > EVENT_TYPE_CHARS_MAX {
            return Err(NormalizeError(format!(
                "notificationType.subtype is longer than {EVENT_TYPE_CHARS_MAX} characters"
            )));
        }
        Ok(Normalized {
            event_id,
            event_type,
            data: v.decoded,
        })
    }
}

/// The callback provider `appstore`.
pub fn provider(ctx: Ctx, config: AppStoreConfig) -> CallbackProvider {
    let verifier = AppStoreVerifier::new(config.clone());
    CallbackProvider::new(
        PROVIDER,
        Verifier::custom(Arc::new(AppStoreAuthenticator(verifier.clone()))),
        Arc::new(AppStoreNormalizer(verifier)),
        Arc::new(AppStoreCallbacks {
            ctx,
            bundle_id: config.bundle_id,
        }),
    )
}

/// Runs what a notification asks of paid services (the mapping table).
pub struct AppStoreCallbacks {
    pub ctx: Ctx,
    /// The merchant account an App Store payment arrives at (`Payment::account_id`).
    pub bundle_id: String,
}

fn unit_failure(e: ServiceUnitError) -> CallbackFailure {
    match e {
        UnitError::Store(s) => s.into(),
        other => CallbackFailure::new(other.to_string()),
    }
}

fn millis(ms: i64, what: &str) -> Result<DateTime<Utc>, CallbackFailure> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| CallbackFailure::new(format!("{what}: not an instant")))
}

#[async_trait]
impl CallbackHandler for AppStoreCallbacks {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        let n: Notification = serde_json::from_value(cb.data.clone())
            .map_err(|e| CallbackFailure::new(format!("stored notification: {e}")))?;
        let action = mapping::action(&n).map_err(|e| CallbackFailure::new(e.0))?;
        let now = Utc::now();
        match action {
            Action::NoEffect { why } => {
                tracing::info!(event_type = %cb.event_type, event_id = %cb.event_id, why, "App Store notification handled without effect");
                Ok(())
            }
            Action::Pay(p) => self.pay(&p, now, fence).await,
            Action::Refund(tx) => self.refund(&tx, &cb.event_id, now, fence).await,
            Action::Expire { order_no } => self.expire(&order_no, now, fence).await,
        }
    }
}

impl AppStoreCallbacks {
    async fn order(&self, order_no: &str) -> Result<ServiceOrder, CallbackFailure> {
        load::<ServiceOrder>(&self.ctx.store, order_no)
            .await
            .map(|l| l.state)
            .map_err(CallbackFailure::from)
    }

    /// The renewal order of a later transaction, created from the order the app named
    /// (same user and business, this transaction's price) unless it exists.
    async fn renewal_order(&self, p: &Purchase, now: DateTime<Utc>) -> Result<(), CallbackFailure> {
        if self.order(&p.tx.order_no).await?.order.is_some() {
            return Ok(());
        }
        let named = self.order(&p.tx.named_order_no).await?;
        let Some(original) = named.order else {
            return Err(CallbackFailure::new(format!(
                "appAccountToken names order {} which does not exist",
                p.tx.named_order_no
            )));
        };
        let cmd = CreateOrder {
            order_no: p.tx.order_no.clone(),
            user_id: original.user_id,
            business: original.business,
            method: PaymentMethod::Apple,
            amount: p.amount_minor,
            currency: Some(p.currency),
            created_at: now,
            timeout_at: now + Duration::milliseconds(self.ctx.services.order_timeout_ms),
        };
        let meta = self.ctx.metadata("callback:appstore:renewal");
        match units::orders::create(&self.ctx.store, &meta, cmd, None).await {
            Ok(_) => Ok(()),
            // Created by a concurrent delivery of the same transaction.
            Err(UnitError::Refused(ServiceRefusal::Order(OrderError::AlreadyExists))) => Ok(()),
            Err(e) => Err(unit_failure(e)),
        }
    }

    async fn pay(
        &self,
        p: &Purchase,
        now: DateTime<Utc>,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        if !p.tx.first {
            self.renewal_order(p, now).await?;
        }
        let payment = Payment {
            transaction_no: p.tx.transaction_id.clone(),
            method: PaymentMethod::Apple,
            account_id: self.bundle_id.clone(),
            amount_minor: p.amount_minor,
            currency: p.currency.as_str().to_owned(),
            paid_at: millis(p.purchased_at_ms, "purchaseDate")?,
        };
        flow::payment_received(&self.ctx, &p.tx.order_no, payment, now, fence)
            .await
            .map(|_| ())
            .map_err(unit_failure)
    }

    /// Apple paid a transaction back. A late payment's refund (owed back already) is
    /// settled as succeeded; a kept payment cannot be refunded by the aggregate.
    async fn refund(
        &self,
        tx: &TransactionRef,
        event_id: &str,
        now: DateTime<Utc>,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        let order = self.order(&tx.order_no).await?;
        let txn = &tx.transaction_id;
        if !order.late.contains_key(txn) {
            let kept = order
                .payment
                .as_ref()
                .is_some_and(|p| &p.transaction_no == txn);
            return Err(CallbackFailure::new(if kept {
                format!(
                    "App Store refunded transaction {txn}, the payment order {} keeps: the \
                     service-order aggregate refunds only late payments; an operator must \
                     settle it",
                    tx.order_no
                )
            } else {
                format!(
                    "transaction {txn} is not recorded on order {} (yet): its purchase \
                     notification may still come; the replay retries",
                    tx.order_no
                )
            }));
        }
        let refund_no = units::orders::late_refund_no(txn);
        let refund = load::<Refund>(&self.ctx.store, &refund_no)
            .await
            .map_err(CallbackFailure::from)?
            .state;
        if refund.status.is_final() {
            return Ok(());
        }
        let meta = self.ctx.metadata("callback:appstore:refund");
        units::refunds::submit(&self.ctx.store, &meta, &refund_no, now, fence)
            .await
            .map_err(unit_failure)?;
        let answer = crate::services::gateway::RefundAnswer::Succeeded {
            gateway_refund_id: format!("appstore:{txn}"),
            response: format!("App Store REFUND notification {event_id}"),
        };
        units::refunds::record_answer(&self.ctx.store, &meta, &refund_no, &answer, now, fence)
            .await
            .map(|_| ())
            .map_err(unit_failure)
    }

    /// The subscription the named order bought: its expiry re-check, then the
    /// membership re-sync when it expired.
    async fn expire(
        &self,
        order_no: &str,
        now: DateTime<Utc>,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        let Some(order) = self.order(order_no).await?.order else {
            return Err(CallbackFailure::new(format!(
                "appAccountToken names order {order_no} which does not exist"
            )));
        };
        let OrderBusiness::Subscription { artist_id, .. } = order.business else {
            tracing::info!(
                order_no,
                "EXPIRED for an order that is not a subscription: no effect"
            );
            return Ok(());
        };
        let meta = self.ctx.metadata("callback:appstore:expired");
        let out = units::subscriptions::expire(
            &self.ctx.store,
            &meta,
            artist_id,
            order.user_id,
            now,
            fence,
        )
        .await;
        match out {
            Ok(out) if !out.value.is_empty() => {
                let (a, f) = (artist_id.to_string(), order.user_id.to_string());
                self.ctx
                    .enqueue(
                        jobs::im_members_job(artist_id, Some(order.user_id)),
                        &[("artist_id", &a), ("fan_user_id", &f)],
                    )
                    .await;
                Ok(())
            }
            Ok(_) => Ok(()),
            // Never granted (the purchase was never paid here): nothing to expire.
            Err(UnitError::Refused(ServiceRefusal::Subscription(_))) => Ok(()),
            Err(e) => Err(unit_failure(e)),
        }
    }
}
