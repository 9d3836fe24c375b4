//! Wiring the payouts capability to the rest: the Xendit adapter as the worker's
//! provider, and the provider's webhooks through the callback inbox (verified by the
//! callback token, normalised to `{event_id, status}`, deduplicated by event id),
//! handed to `payouts::webhook::apply_report`. Capabilities never import each
//! other; this adapter is where callbacks meet payouts.

use crate::callbacks::{
    CallbackFailure, CallbackHandler, CallbackProvider, JsonPointers, NormalizedCallback, Secret,
    Verifier,
};
use crate::infra::store::{DynStore, Fence};
use crate::payouts::provider::PayoutProvider;
use crate::payouts::units::PayoutUnitError;
use crate::payouts::webhook::{apply_report, WebhookError};
use crate::payouts::xendit::{self, XenditConfig, XenditProvider};
use async_trait::async_trait;
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

/// The Xendit adapter for `config`.
pub fn xendit_provider(config: &PayoutProviderConfig) -> anyhow::Result<Arc<dyn PayoutProvider>> {
    let mut c = XenditConfig::new(&config.base_url, &config.secret_key);
    if let Some(t) = config.timeout {
        c.timeout = t;
    }
    Ok(Arc::new(XenditProvider::new(c)?))
}

/// The provider's callbacks: `POST /v1/callbacks/xendit`.
pub fn xendit_callbacks(store: DynStore, country_code: &str, token: &str) -> CallbackProvider {
    let pointers = xendit::callback_pointers();
    CallbackProvider::new(
        xendit::NAME,
        Verifier::token(Some(Secret::new(token)), xendit::CALLBACK_TOKEN_HEADER),
        Arc::new(JsonPointers::new(pointers.event_id, pointers.event_type)),
        Arc::new(PayoutCallbacks {
            store,
            country_code: country_code.to_owned(),
        }),
    )
}

struct PayoutCallbacks {
    store: DynStore,
    country_code: String,
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

#[async_trait]
impl CallbackHandler for PayoutCallbacks {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        let payout = xendit::parse_callback(&cb.data).map_err(CallbackFailure::new)?;
        let metadata = crate::affiliate::service_metadata(
            &format!("callback:{}", cb.callback_id),
            &self.country_code,
        );
        apply_report(&self.store, &metadata, &cb.provider, &payout, fence)
            .await
            .map(|_| ())
            .map_err(failure)
    }
}
