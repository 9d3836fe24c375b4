//! App Store Server Notifications V2 (issue 33 item 4): Apple tells us about in-app
//! purchases by `POST`ing `{"signedPayload": "<JWS>"}` to `/v1/callbacks/appstore`.
//! This module is the protocol, pure: verifying the JWS and its x5c chain up to the
//! pinned Apple Root CA - G3 ([`chain`], [`jws`], [`root`]), checking the app it names
//! ([`verify`]), the payload types ([`payload`]) and the mapping onto paid services
//! ([`mapping`]). The composition root's adapter (`server::appstore`) turns it into a
//! callback provider: verification before anything is stored, the normaliser, and
//! the handler that runs the paid-services flows.
//!
//! # Verification (every step refuses with a named reason, nothing stored)
//!
//! | step | refusal reason |
//! |------|----------------|
//! | body is JSON with a `signedPayload` string, three base64url parts, JSON header and payload (no repeated keys) | `malformed` |
//! | header `alg` is `ES256` (`none`, `HS256`, … refused) | `bad_alg` |
//! | `x5c` is `[leaf, intermediate, root]`, DER, names chain, each signature verifies with its issuer's key (ECDSA P-256/P-384, SHA-256/SHA-384), intermediate is a CA | `bad_chain` |
//! | the chain's root is the pinned one (same subject and public key; the intermediate verified with the pinned key) | `wrong_root` |
//! | each certificate valid at the payload's `signedDate` | `certificate_not_valid` |
//! | leaf has `1.2.840.113635.100.6.11.1`, intermediate `1.2.840.113635.100.6.2.1` | `missing_oid` |
//! | the ES256 signature verifies with the leaf's P-256 key | `bad_signature` |
//! | `data.bundleId` (or `summary`/`appData`/`externalPurchaseToken`) is ours | `wrong_bundle_id` |
//! | `environment` is the configured `Production`/`Sandbox` | `wrong_environment` |
//! | in Production, `appAppleId` is ours | `wrong_app_apple_id` |
//! | `data.signedTransactionInfo` and `data.signedRenewalInfo`: the same JWS and chain checks, transaction bundle id and environment, renewal environment | as above |
//!
//! # Normalised callback (the inbox's row)
//!
//! - **event id** = `notificationUUID`: Apple re-sends a notification (up to five
//!   retries over three days when not answered 2xx) with the same UUID, so the inbox
//!   dedupes retries; two notifications about one transaction have two UUIDs, and the
//!   handlers are idempotent by `transactionId` instead.
//! - **event type** = `notificationType` or `notificationType.subtype`
//!   (`SUBSCRIBED.INITIAL_BUY`, `DID_RENEW`, `REFUND`, `EXPIRED.VOLUNTARY`).
//! - **data** = the decoded payload, with `data.signedTransactionInfo` and
//!   `data.signedRenewalInfo` replaced by their verified decodings
//!   `data.transactionInfo` and `data.renewalInfo` (the raw body keeps the signed
//!   originals for an auditor).
//!
//! # Mapping onto paid services
//!
//! An App Store purchase names our order by `appAccountToken`: the app creates the
//! order (`POST /v1/service-orders`, method `APPLE`) with `order_no` = a UUID and passes
//! the same UUID to StoreKit as the purchase's `appAccountToken` (Apple's documented
//! way to associate a transaction with a customer's account or order). A
//! transaction whose `transactionId` equals its `originalTransactionId` is the first
//! purchase and pays that order; any later transaction of the same purchase (a
//! renewal, a resubscribe) pays its own **renewal order** `AP-<transactionId>`,
//! created from the named order (same user and business, the transaction's price),
//! so the answer is the same whichever notification arrives first.
//!
//! | notification | action |
//! |--------------|--------|
//! | `SUBSCRIBED.*`, `DID_RENEW.*`, `ONE_TIME_CHARGE` | the order's payment: method `APPLE`, transaction `transactionId`, `price` milliunits → minor units exactly by the currency's ISO 4217 digits (a fraction refuses), paid at `purchaseDate`; then delivery (candy, entitlement days). Idempotent by `transactionId` (the order ignores a transaction it holds). |
//! | `REFUND` | the refund of that transaction: when the order holds it as a late payment (owed back), its refund `RFL…` is settled as succeeded (Apple paid it back). A refund of a kept payment is **not supported** by the service-order aggregate (it refunds only late payments): the handling fails, named, and stays FAILED in the inbox for an operator. |
//! | `EXPIRED.*`, `GRACE_PERIOD_EXPIRED` | the subscription's expiry re-check on its stream (it expires only past its paid end; otherwise the expiry scan ends it then), and the IM membership re-sync |
//! | every other type (`DID_CHANGE_RENEWAL_*`, `DID_FAIL_TO_RENEW`, `PRICE_INCREASE`, `RENEWAL_EXTEN*`, `OFFER_REDEEMED`, `REFUND_DECLINED`, `REFUND_REVERSED`, `CONSUMPTION_REQUEST`, `REVOKE`, `TEST`, …) | stored, answered 200 and marked HANDLED without effect (the inbox's SKIPPED is for unverified or unnormalised callbacks) |

pub mod chain;
pub mod config;
pub mod jws;
pub mod mapping;
pub mod payload;
pub mod root;
pub mod verify;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod tests;

pub use config::{AppStoreConfig, ConfigError};
pub use mapping::{Action, Purchase, TransactionRef};
pub use payload::{Environment, Notification};
pub use verify::{AppStoreVerifier, Verified};

/// Why a JWS or a notification was refused (see the module's table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("not a notification: {0}")]
    Malformed(String),
    #[error("alg {0:?}: only ES256 is accepted")]
    Algorithm(String),
    #[error("x5c: {0}")]
    Chain(String),
    #[error("x5c: not the pinned root: {0}")]
    WrongRoot(String),
    #[error("x5c: {0}")]
    NotValidAt(String),
    #[error("x5c: {0}")]
    MissingOid(String),
    #[error("signature: {0}")]
    Signature(String),
    #[error("bundleId {got:?} is not this app's ({want:?})")]
    BundleId { got: String, want: String },
    #[error("environment {got:?} is not the configured {want}")]
    Environment { got: String, want: &'static str },
    #[error("appAppleId {got:?} is not this app's ({want:?})")]
    AppAppleId { got: Option<i64>, want: Option<i64> },
}

impl Failure {
    /// The `reason` label of a refused callback.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::Malformed(_) => "malformed",
            Failure::Algorithm(_) => "bad_alg",
            Failure::Chain(_) => "bad_chain",
            Failure::WrongRoot(_) => "wrong_root",
            Failure::NotValidAt(_) => "certificate_not_valid",
            Failure::MissingOid(_) => "missing_oid",
            Failure::Signature(_) => "bad_signature",
            Failure::BundleId { .. } => "wrong_bundle_id",
            Failure::Environment { .. } => "wrong_environment",
            Failure::AppAppleId { .. } => "wrong_app_apple_id",
        }
    }
}

/// A [`Failure`] and where in the notification it was found (`signedPayload`,
/// `data.signedTransactionInfo`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {failure}")]
pub struct Refusal {
    pub at: &'static str,
    pub failure: Failure,
}
