//! Wiring the payouts capability to the rest: the Xendit adapter as the worker's
//! provider, and Xendit's payout webhooks through the callback inbox, handed to
//! `payouts::webhook::apply_report`. Capabilities never import each other; this
//! adapter is where callbacks meet payouts.
//!
//! A webhook (`POST /v1/callbacks/xendit`) is
//! - verified by its `x-callback-token` against the configured verification token
//!   (`Verifier::token`), before anything is stored;
//! - normalised by [`XenditNormalizer`] from the raw body and headers: the event id
//!   the inbox dedupes on is the `webhook-id` header where Xendit sends it, else
//!   `<payout id>:<status>` (see `payouts::xendit::callback`); the event type is the
//!   envelope's `event`; `data` is the payout in our model (`ProviderPayout`, amount
//!   in exact minor units), so the handler never reads Xendit's float-shaped JSON;
//! - handled by applying the payout's status to its withdrawal. A `REVERSED` payout
//!   whose withdrawal is PAID is recorded as a contradiction (no money moves) and
//!   raises a `payout.reversed` alert for a person.
//!
//! The `webhook-id` header is kept with the raw body so a replay normalises to the
//! same event id.

use crate::callbacks::{
    CallbackFailure, CallbackHandler, CallbackProvider, NormalizeError, Normalized,
    NormalizedCallback, Normalizer, Secret, Verifier,
};
use crate::infra::alerts::{Alert, AlertContext, AlertKind};
use crate::infra::store::{DynStore, Fence};
use crate::payouts::provider::{PayoutProvider, ProviderPayout, ProviderStatus};
use crate::payouts::units::PayoutUnitError;
use crate::payouts::webhook::{apply_report, WebhookError};
use crate::payouts::xendit::{self, callback, XenditConfig, XenditProvider};
use async_trait::async_trait;
use factledger_aggregates::withdrawal::{withdrawal_of_reference, WithdrawalEvent};
use std::sync::Arc;

/// Where the payout provider is and how it authenticates both ways.
#[derive(Clone)]
pub struct PayoutProviderConfig {
    pub base_url: String,
    /// The provider's API secret (Basic auth); from the environment only.
    pub secret_key: String,
    /// The token the provider sends in `x-callback-token`.
    pub callback_token: String,
    pub timeout: Option<std::time::Duration>,
}

impl std::fmt::Debug for PayoutProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayoutProviderConfig")
            .field("base_url", &self.base_url)
            .field("secret_key", &"<redacted>")
            .field("callback_token", &"<redacted>")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl PayoutProviderConfig {
    /// Refuses a malformed secret, naming it (never showing it): an empty or
    /// whitespace-bearing key or token, or a key not shaped `xnd_development_…` /
    /// `xnd_production_…`.
    pub fn check(&self) -> anyhow::Result<()> {
        xendit::check_secret_key(&self.secret_key)
            .map_err(|e| anyhow::anyhow!("payout secret_key (FACTLEDGER_PAYOUT_SECRET): {e}"))?;
        xendit::check_callback_token(&self.callback_token).map_err(|e| {
            anyhow::anyhow!("payout callback_token (FACTLEDGER_PAYOUT_CALLBACK_TOKEN): {e}")
        })?;
        Ok(())
    }
}

/// The Xendit adapter for `config` (checked first).
pub fn xendit_provider(config: &PayoutProviderConfig) -> anyhow::Result<Arc<dyn PayoutProvider>> {
    config.check()?;
    let mut c = XenditConfig::new(&config.base_url, &config.secret_key);
    if let Some(t) = config.timeout {
        c.timeout = t;
    }
    Ok(Arc::new(XenditProvider::new(c)?))
}

/// The provider's webhooks: `POST /v1/callbacks/xendit`.
pub fn xendit_callbacks(
    store: DynStore,
    country_code: &str,
    token: &str,
    alerts: AlertContext,
) -> anyhow::Result<CallbackProvider> {
    xendit::check_callback_token(token).map_err(|e| {
        anyhow::anyhow!("payout callback_token (FACTLEDGER_PAYOUT_CALLBACK_TOKEN): {e}")
    })?;
    Ok(CallbackProvider::new(
        xendit::NAME,
        Verifier::token(Some(Secret::new(token)), xendit::CALLBACK_TOKEN_HEADER),
        Arc::new(XenditNormalizer),
        Arc::new(PayoutCallbacks {
            store,
            country_code: country_code.to_owned(),
            alerts,
        }),
    )
    .keeping(&[callback::WEBHOOK_ID_HEADER]))
}

/// Xendit's webhook envelope as the inbox's `{event_id, event_type, data}`.
pub struct XenditNormalizer;

impl Normalizer for XenditNormalizer {
    fn normalize(&self, raw: &[u8]) -> Result<Normalized, NormalizeError> {
        self.normalize_delivery(&[], raw)
    }

    fn normalize_delivery(
        &self,
        headers: &[(String, Vec<u8>)],
        raw: &[u8],
    ) -> Result<Normalized, NormalizeError> {
        let webhook_id = headers
            .iter()
            .find(|(name, _)| name == callback::WEBHOOK_ID_HEADER)
            .map(|(_, v)| std::str::from_utf8(v))
            .transpose()
            .map_err(|_| NormalizeError("webhook-id is not UTF-8".into()))?;
        let event = callback::parse(webhook_id, raw).map_err(NormalizeError)?;
        let data =
            serde_json::to_value(&event.payout).map_err(|e| NormalizeError(e.to_string()))?;
        Ok(Normalized {
            event_id: event.event_id,
            event_type: event.event_type,
            data,
        })
    }
}

struct PayoutCallbacks {
    store: DynStore,
    country_code: String,
    alerts: AlertContext,
}

fn failure(e: WebhookError) -> CallbackFailure {
    match e {
        WebhookError::Unit(PayoutUnitError::Store(s)) => s.into(),
        other => CallbackFailure {
            fenced: false,
            message: other.to_string(),
        },
    }
}

impl PayoutCallbacks {
    /// A reversal of a PAID withdrawal: the money is back in our Xendit balance and
    /// the user's wallet was debited. A person decides (pay again, or return it).
    async fn alert_reversal(&self, payout: &ProviderPayout, callback_id: i64) {
        let id = withdrawal_of_reference(&payout.reference);
        let alert = Alert {
            kind: AlertKind::PayoutReversed,
            subject: id.to_owned(),
            message: format!(
                "Xendit reversed payout {} ({} {} minor units) of PAID withdrawal {id}: \
                 the money is back in the provider balance, the wallet was debited",
                payout.provider_id, payout.amount_minor, payout.currency
            ),
            job: None,
            platform: None,
            business_id: Some(id.to_owned()),
            user_affiliate_code: None,
            request_id: None,
            trace_id: None,
            first_failure_at_ms: None,
            retry_count: None,
            audit_path: format!("/v1/withdrawals/{id}?callback={callback_id}"),
        };
        if let Err(e) = crate::infra::alerts::raise(&self.store, &self.alerts, &alert).await {
            tracing::error!(error = %e, withdrawal = id, "the reversal alert was not written");
        }
    }
}

#[async_trait]
impl CallbackHandler for PayoutCallbacks {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        let payout: ProviderPayout = serde_json::from_value(cb.data.clone())
            .map_err(|e| CallbackFailure::new(format!("normalised payout: {e}")))?;
        let metadata = crate::affiliate::service_metadata(
            &format!("callback:{}", cb.callback_id),
            &self.country_code,
        );
        let events = apply_report(&self.store, &metadata, &cb.provider, &payout, fence)
            .await
            .map_err(failure)?;
        let contradicted = events
            .iter()
            .any(|e| matches!(e, WithdrawalEvent::ProviderContradicted(_)));
        if payout.status == ProviderStatus::Reversed && contradicted {
            self.alert_reversal(&payout, cb.callback_id).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs.xendit.co/apidocs/payout-webhook-notification, `payoutWebhookExample`
    /// (cut to the fields the normaliser reads).
    const WEBHOOK: &[u8] =
        br#"{"event": "payout.succeeded", "business_id": "5f27a14a9bf05c73dd040bc8",
        "created": "2025-01-01T23:55:59Z",
        "data": {"id": "disb-571f3644d2b4edf0745e9703", "amount": 10000, "channel_code": "ID_BCA",
                 "currency": "IDR", "status": "SUCCEEDED", "reference_id": "myref-1482928194"}}"#;

    #[test]
    fn the_event_id_is_the_webhook_id_header_else_payout_id_and_status() {
        let n = XenditNormalizer;
        let header = vec![("webhook-id".to_owned(), b"whk-7".to_vec())];
        let with = n.normalize_delivery(&header, WEBHOOK).unwrap();
        assert_eq!(with.event_id, "whk-7");
        assert_eq!(with.event_type, "payout.succeeded");
        let without = n.normalize(WEBHOOK).unwrap();
        assert_eq!(without.event_id, "disb-571f3644d2b4edf0745e9703:SUCCEEDED");
        assert_eq!(with.data, without.data);
        let payout: ProviderPayout = serde_json::from_value(with.data).unwrap();
        assert_eq!(
            (
                payout.amount_minor,
                payout.status,
                payout.reference.as_str()
            ),
            (10_000, ProviderStatus::Succeeded, "myref-1482928194")
        );
        // Pure: the same delivery normalises the same on a replay.
        assert_eq!(
            n.normalize_delivery(&header, WEBHOOK).unwrap().event_id,
            "whk-7"
        );
        let unknown = String::from_utf8_lossy(WEBHOOK).replace("\"SUCCEEDED\"", "\"ON_HOLD\"");
        let e = n.normalize(unknown.as_bytes()).unwrap_err();
        assert!(e.0.contains("data.status"), "{e}");
    }

    #[test]
    fn a_malformed_secret_is_refused_naming_it_and_never_shown() {
        let config = |key: &str, token: &str| PayoutProviderConfig {
            base_url: "http://127.0.0.1:1".into(),
            secret_key: key.into(),
            callback_token: token.into(),
            timeout: None,
        };
        let e = config("", "t").check().unwrap_err().to_string();
        assert!(
            e.contains("FACTLEDGER_PAYOUT_SECRET") && e.contains("empty"),
            "{e}"
        );
        let e = config("sk_live_123", "t").check().unwrap_err().to_string();
        assert!(
            e.contains("secret_key") && !e.contains("sk_live_123"),
            "{e}"
        );
        let e = config("xnd_production_k", " t")
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("FACTLEDGER_PAYOUT_CALLBACK_TOKEN"), "{e}");
        assert!(config("xnd_production_k", "t").check().is_ok());
        let shown = format!("{:?}", config("xnd_production_k", "tok"));
        assert!(
            !shown.contains("xnd_production_k") && !shown.contains("tok\""),
            "{shown}"
        );
    }
}
