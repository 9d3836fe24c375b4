//! A simulated App Store sending **App Store Server Notifications V2** exactly as
//! Apple documents them: `POST <callback url>` with `content-type: application/json`
//! and the body `{"signedPayload": "<JWS>"}`, the JWS ES256 with `x5c` =
//! `[leaf, intermediate, root]` (this simulator's own chain, see
//! [`crate::appstore_certs`]), its payload `responseBodyV2DecodedPayload`
//! (`notificationType`, `subtype`, `notificationUUID`, `data` with `appAppleId`,
//! `bundleId`, `environment`, `signedTransactionInfo`, `signedRenewalInfo`, `status`;
//! `version` "2.0", `signedDate`), the nested transaction and renewal info signed the
//! same way. A delivery not answered 2xx is retried ([`DELIVERY_ATTEMPTS_MAX`]
//! attempts, [`RETRY_BACKOFF_MS`] doubling; Apple retries over days), each retry with
//! the same `notificationUUID`.
//!
//! Scripted faults per notification ([`AppStoreFault`]): `duplicate` (delivered twice,
//! same UUID), `late` (held back `delay_ms` before the first attempt), `wrong_chain`
//! (signed under a second, unpinned root), `bad_signature` (one signature byte
//! flipped).
//!
//! # Control API (tests and demos)
//!
//! - `GET /control/appstore/root`: `{"root_der_base64": …, "sha256": …}` — the root to
//!   pin (`FACTLEDGER_APPSTORE_ROOT_CERT_FILE`).
//! - `POST /control/appstore/settings` `{"callback_url", "bundle_id", "environment",
//!   "app_apple_id"}` (each optional); `GET` shows them.
//! - `POST /control/appstore/notify` a [`NotifySpec`]: builds, signs and sends it;
//!   answers `{"notificationUUID", "deliveries": [...]}` once sent (or scheduled, for
//!   `late`).
//! - `GET /control/appstore/deliveries`: every attempt so far.

use crate::appstore_certs::{Chain, ChainSpec, MintError};
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Attempts per notification (the first and the retries).
pub const DELIVERY_ATTEMPTS_MAX: u32 = 4;
/// Wait before the first retry, doubled before each further one.
pub const RETRY_BACKOFF_MS: u64 = 50;
/// One attempt's time limit.
pub const DELIVERY_TIMEOUT_MS: u64 = 5_000;
/// Attempts kept in the log.
pub const DELIVERY_LOG_MAX: usize = 10_000;
/// Longest `late` delay.
pub const LATE_DELAY_MS_MAX: u64 = 60_000;

/// Where and as which app the simulator notifies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppStoreSettings {
    pub callback_url: Option<String>,
    pub bundle_id: String,
    /// `Sandbox` or `Production`.
    pub environment: String,
    pub app_apple_id: i64,
}

impl Default for AppStoreSettings {
    fn default() -> AppStoreSettings {
        AppStoreSettings {
            callback_url: None,
            bundle_id: "com.example.factledger".into(),
            environment: "Sandbox".into(),
            app_apple_id: 1_234_567_890,
        }
    }
}

/// The transaction a notification carries (`JWSTransactionDecodedPayload`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransactionSpec {
    pub transaction_id: String,
    /// Defaults to `transaction_id` (a first purchase).
    #[serde(default)]
    pub original_transaction_id: Option<String>,
    #[serde(default)]
    pub app_account_token: Option<String>,
    #[serde(default = "default_product")]
    pub product_id: String,
    /// Milliunits of `currency`.
    pub price: i64,
    pub currency: String,
    /// Epoch ms; now when absent.
    #[serde(default)]
    pub purchase_date: Option<i64>,
    #[serde(default)]
    pub expires_date: Option<i64>,
    #[serde(default = "default_type", rename = "type")]
    pub kind: String,
    /// A different bundle id than the settings' (tests).
    #[serde(default)]
    pub bundle_id: Option<String>,
}

fn default_product() -> String {
    "com.example.factledger.premium".into()
}

fn default_type() -> String {
    "Auto-Renewable Subscription".into()
}

/// A scripted fault of one notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AppStoreFault {
    Duplicate,
    Late { delay_ms: u64 },
    WrongChain,
    BadSignature,
}

/// One notification to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifySpec {
    pub notification_type: String,
    #[serde(default)]
    pub subtype: Option<String>,
    /// Minted when absent.
    #[serde(default, rename = "notificationUUID")]
    pub notification_uuid: Option<String>,
    #[serde(default)]
    pub transaction: Option<TransactionSpec>,
    /// Include a `signedRenewalInfo` for the transaction.
    #[serde(default)]
    pub renewal_info: bool,
    #[serde(default)]
    pub fault: Option<AppStoreFault>,
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppStoreDelivery {
    #[serde(rename = "notificationUUID")]
    pub notification_uuid: String,
    pub attempt: u32,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub delivered: bool,
}

struct Inner {
    chain: Chain,
    /// A second chain under another root: what `wrong_chain` signs with.
    rogue: Chain,
    settings: Mutex<AppStoreSettings>,
    log: Mutex<Vec<AppStoreDelivery>>,
    http: reqwest::Client,
}

/// The simulated App Store (cheap to clone).
#[derive(Clone)]
pub struct AppStoreSim(Arc<Inner>);

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AppStoreSim {
    /// A simulator with a freshly minted chain.
    pub fn new(settings: AppStoreSettings) -> Result<AppStoreSim, MintError> {
        Ok(AppStoreSim(Arc::new(Inner {
            chain: Chain::mint(&ChainSpec::default())?,
            rogue: Chain::mint(&ChainSpec {
                name: "Rogue".into(),
                ..ChainSpec::default()
            })?,
            settings: Mutex::new(settings),
            log: Mutex::new(Vec::new()),
            http: reqwest::Client::new(),
        })))
    }

    /// The root to pin (DER).
    pub fn root_der(&self) -> Vec<u8> {
        self.0.chain.root_der.clone()
    }

    /// The chain notifications are signed with.
    pub fn chain(&self) -> &Chain {
        &self.0.chain
    }

    pub fn settings(&self) -> AppStoreSettings {
        lock(&self.0.settings).clone()
    }

    pub fn configure(&self, settings: AppStoreSettings) {
        *lock(&self.0.settings) = settings;
    }

    pub fn deliveries(&self) -> Vec<AppStoreDelivery> {
        lock(&self.0.log).clone()
    }

    /// The decoded notification payload of `spec` (nested info signed by `chain`).
    pub fn payload(&self, spec: &NotifySpec, uuid: &str, chain: &Chain) -> Value {
        let s = self.settings();
        let now = now_ms();
        let mut data = json!({
            "appAppleId": s.app_apple_id,
            "bundleId": s.bundle_id,
            "bundleVersion": "1.0",
            "environment": s.environment,
            "status": 1,
        });
        if let Some(t) = &spec.transaction {
            let original = t
                .original_transaction_id
                .clone()
                .unwrap_or(t.transaction_id.clone());
            let mut tx = json!({
                "transactionId": t.transaction_id,
                "originalTransactionId": original,
                "bundleId": t.bundle_id.clone().unwrap_or(s.bundle_id.clone()),
                "productId": t.product_id,
                "purchaseDate": t.purchase_date.unwrap_or(now),
                "originalPurchaseDate": t.purchase_date.unwrap_or(now),
                "quantity": 1,
                "type": t.kind,
                "inAppOwnershipType": "PURCHASED",
                "signedDate": now,
                "environment": s.environment,
                "transactionReason": if original == t.transaction_id { "PURCHASE" } else { "RENEWAL" },
                "storefront": "USA",
                "storefrontId": "143441",
                "price": t.price,
                "currency": t.currency,
            });
            if let Some(token) = &t.app_account_token {
                tx["appAccountToken"] = json!(token);
            }
            if let Some(e) = t.expires_date {
                tx["expiresDate"] = json!(e);
            }
            if spec.notification_type == "REFUND" {
                tx["revocationDate"] = json!(now);
                tx["revocationReason"] = json!(0);
            }
            data["signedTransactionInfo"] = json!(chain.sign(&tx));
            if spec.renewal_info {
                let renewal = json!({
                    "originalTransactionId": original,
                    "autoRenewProductId": t.product_id,
                    "productId": t.product_id,
                    "autoRenewStatus": 1,
                    "signedDate": now,
                    "environment": s.environment,
                    "renewalPrice": t.price,
                    "currency": t.currency,
                });
                data["signedRenewalInfo"] = json!(chain.sign(&renewal));
            }
        }
        let mut payload = json!({
            "notificationType": spec.notification_type,
            "notificationUUID": uuid,
            "data": data,
            "version": "2.0",
            "signedDate": now,
        });
        if let Some(sub) = &spec.subtype {
            payload["subtype"] = json!(sub);
        }
        payload
    }

    /// The body Apple would POST for `spec` (its fault applied), and its UUID.
    pub fn body(&self, spec: &NotifySpec) -> (String, String) {
        let uuid = spec
            .notification_uuid
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let chain = match spec.fault {
            Some(AppStoreFault::WrongChain) => &self.0.rogue,
            _ => &self.0.chain,
        };
        let mut jws = chain.sign(&self.payload(spec, &uuid, chain));
        if spec.fault == Some(AppStoreFault::BadSignature) {
            jws = flip_signature(&jws);
        }
        (json!({ "signedPayload": jws }).to_string(), uuid)
    }

    /// Build, sign and deliver `spec` (with retries, and its fault). Returns the UUID and
    /// the attempts made (none yet for a `late` one: it is sent in the background).
    pub async fn notify(&self, spec: &NotifySpec) -> (String, Vec<AppStoreDelivery>) {
        let (body, uuid) = self.body(spec);
        if let Some(AppStoreFault::Late { delay_ms }) = spec.fault {
            let me = self.clone();
            let (b, u) = (body, uuid.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay_ms.min(LATE_DELAY_MS_MAX))).await;
                me.deliver(&u, &b).await;
            });
            return (uuid, Vec::new());
        }
        let mut attempts = self.deliver(&uuid, &body).await;
        if spec.fault == Some(AppStoreFault::Duplicate) {
            attempts.extend(self.deliver(&uuid, &body).await);
        }
        (uuid, attempts)
    }

    /// POST `body` until a 2xx or [`DELIVERY_ATTEMPTS_MAX`] attempts.
    pub async fn deliver(&self, uuid: &str, body: &str) -> Vec<AppStoreDelivery> {
        let Some(url) = self.settings().callback_url else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for attempt in 1..=DELIVERY_ATTEMPTS_MAX {
            let sent = self
                .0
                .http
                .post(&url)
                .header("content-type", "application/json")
                .timeout(Duration::from_millis(DELIVERY_TIMEOUT_MS))
                .body(body.to_owned())
                .send()
                .await;
            let (http_status, error) = match sent {
                Ok(r) => {
                    let s = r.status().as_u16();
                    let _ = r.bytes().await;
                    (Some(s), None)
                }
                Err(e) => (None, Some(e.to_string())),
            };
            let delivered = http_status.is_some_and(|s| (200..300).contains(&s));
            let d = AppStoreDelivery {
                notification_uuid: uuid.to_owned(),
                attempt,
                http_status,
                error,
                delivered,
            };
            {
                let mut log = lock(&self.0.log);
                if log.len() < DELIVERY_LOG_MAX {
                    log.push(d.clone());
                }
            }
            out.push(d);
            if delivered {
                break;
            }
            tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS << (attempt - 1))).await;
        }
        out
    }
}

/// The same JWS with one bit of its signature changed.
pub fn flip_signature(jws: &str) -> String {
    use base64::Engine as _;
    let Some((input, sig)) = jws.rsplit_once('.') else {
        return jws.to_owned();
    };
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut bytes = engine.decode(sig).unwrap_or_default();
    if let Some(b) = bytes.get_mut(10) {
        *b ^= 0x01;
    }
    format!("{input}.{}", engine.encode(bytes))
}

/// The control routes (see the module doc).
pub fn routes(sim: AppStoreSim) -> Router {
    Router::new()
        .route(
            "/control/appstore/root",
            get(|State(s): State<AppStoreSim>| async move {
                use base64::Engine as _;
                let der = s.root_der();
                Json(json!({
                    "root_der_base64": base64::engine::general_purpose::STANDARD.encode(&der),
                    "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&der)),
                }))
            }),
        )
        .route(
            "/control/appstore/settings",
            get(|State(s): State<AppStoreSim>| async move { Json(s.settings()) }).post(
                |State(s): State<AppStoreSim>, Json(patch): Json<Value>| async move {
                    let mut now = s.settings();
                    if let Some(u) = patch.get("callback_url").and_then(Value::as_str) {
                        now.callback_url = (!u.is_empty()).then(|| u.to_owned());
                    }
                    if let Some(b) = patch.get("bundle_id").and_then(Value::as_str) {
                        now.bundle_id = b.to_owned();
                    }
                    if let Some(e) = patch.get("environment").and_then(Value::as_str) {
                        now.environment = e.to_owned();
                    }
                    if let Some(id) = patch.get("app_apple_id").and_then(Value::as_i64) {
                        now.app_apple_id = id;
                    }
                    s.configure(now.clone());
                    Json(now)
                },
            ),
        )
        .route(
            "/control/appstore/notify",
            post(
                |State(s): State<AppStoreSim>, Json(spec): Json<NotifySpec>| async move {
                    let (uuid, deliveries) = s.notify(&spec).await;
                    Json(json!({ "notificationUUID": uuid, "deliveries": deliveries }))
                },
            ),
        )
        .route(
            "/control/appstore/deliveries",
            get(|State(s): State<AppStoreSim>| async move { Json(s.deliveries()) }),
        )
        .with_state(sim)
}
