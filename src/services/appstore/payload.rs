//! The decoded payloads, as Apple documents them (App Store Server Notifications V2:
//! `responseBodyV2DecodedPayload`, `data`, `JWSTransactionDecodedPayload`,
//! `JWSRenewalInfoDecodedPayload`): only the fields the mapping reads; the rest stays
//! in the stored JSON. Dates are epoch milliseconds, `price` is in milliunits of
//! `currency` (ISO 4217), ids are strings.

use serde::{Deserialize, Serialize};

/// Apple's `environment` values this service can be configured for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Environment {
    Production,
    Sandbox,
}

impl Environment {
    /// Apple's spelling (`Production`, `Sandbox`); configuration may use any case.
    pub fn parse(s: &str) -> Option<Environment> {
        match s.to_ascii_lowercase().as_str() {
            "production" => Some(Environment::Production),
            "sandbox" => Some(Environment::Sandbox),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "Production",
            Environment::Sandbox => "Sandbox",
        }
    }
}

/// `responseBodyV2DecodedPayload`, with the nested signed info replaced by its
/// verified decoding (`data.transactionInfo`, `data.renewalInfo`): what the inbox
/// stores as the normalised payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    pub notification_type: String,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(rename = "notificationUUID")]
    pub notification_uuid: String,
    #[serde(default)]
    pub data: Option<NotificationData>,
    #[serde(default)]
    pub version: Option<String>,
    pub signed_date: i64,
}

impl Notification {
    /// `notificationType` or `notificationType.subtype`: the inbox's event type.
    pub fn event_type(&self) -> String {
        match &self.subtype {
            Some(s) if !s.is_empty() => format!("{}.{s}", self.notification_type),
            _ => self.notification_type.clone(),
        }
    }
}

/// The notification's `data` (app metadata and the signed transaction/renewal info).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationData {
    #[serde(default)]
    pub app_apple_id: Option<i64>,
    #[serde(default)]
    pub bundle_id: Option<String>,
    #[serde(default)]
    pub environment: Option<String>,
    /// Decoded and verified `signedTransactionInfo`.
    #[serde(default)]
    pub transaction_info: Option<Transaction>,
    /// Decoded and verified `signedRenewalInfo`.
    #[serde(default)]
    pub renewal_info: Option<RenewalInfo>,
    /// 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
    #[serde(default)]
    pub status: Option<i64>,
}

/// `JWSTransactionDecodedPayload` (the fields the mapping reads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transaction {
    pub transaction_id: String,
    #[serde(default)]
    pub original_transaction_id: Option<String>,
    #[serde(default)]
    pub bundle_id: Option<String>,
    #[serde(default)]
    pub product_id: Option<String>,
    #[serde(default)]
    pub purchase_date: Option<i64>,
    #[serde(default)]
    pub expires_date: Option<i64>,
    /// `Auto-Renewable Subscription`, `Non-Consumable`, `Consumable`,
    /// `Non-Renewing Subscription`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The UUID the app set at purchase: our order number.
    #[serde(default)]
    pub app_account_token: Option<String>,
    #[serde(default)]
    pub environment: Option<String>,
    /// Milliunits of `currency`.
    #[serde(default)]
    pub price: Option<i64>,
    #[serde(default)]
    pub currency: Option<String>,
    #[serde(default)]
    pub revocation_date: Option<i64>,
    #[serde(default)]
    pub revocation_reason: Option<i64>,
    #[serde(default)]
    pub signed_date: Option<i64>,
}

/// `JWSRenewalInfoDecodedPayload` (the fields worth typing; it moves no money).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewalInfo {
    #[serde(default)]
    pub original_transaction_id: Option<String>,
    #[serde(default)]
    pub auto_renew_status: Option<i64>,
    #[serde(default)]
    pub expiration_intent: Option<i64>,
    #[serde(default)]
    pub environment: Option<String>,
    #[serde(default)]
    pub signed_date: Option<i64>,
}
