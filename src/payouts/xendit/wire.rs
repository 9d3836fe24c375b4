//! Xendit's Payout object and error body as they come over the wire, the create
//! request body we send, the status vocabulary mapped onto [`ProviderStatus`], and
//! the shape of the secret key.
//!
//! Statuses (docs, "Payout Status Lifecycle"), every one mapped and nothing guessed:
//!
//! | Xendit status | [`ProviderStatus`] |
//! |---|---|
//! | `ACCEPTED`, `REQUESTED`, `PENDING`, `PENDING_COMPLIANCE_ASSESSMENT`, `READY`, `LOCKED` | `Accepted` (not settled yet) |
//! | `SUCCEEDED` | `Succeeded` |
//! | `FAILED` + `failure_code` | `Failed { code, recoverable: code == INSUFFICIENT_BALANCE }` |
//! | `CANCELLED`, `COMPLIANCE_REJECTED`, `EXPIRED` | `Failed { code: the status, recoverable: false }` |
//! | `REVERSED` (after `SUCCEEDED`) | `Reversed` |
//! | anything else | an error naming the field: the callback fails and is kept |
//!
//! `READY`, `LOCKED` and `EXPIRED` are cash pick-up states (OTC channels); they are
//! mapped so that a cash channel never makes a payout unreadable.

use super::amount;
use crate::payouts::provider::{PayoutRequest, ProviderPayout, ProviderStatus};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The failure code that means "try again later": our Xendit balance was short.
pub const INSUFFICIENT_BALANCE: &str = "INSUFFICIENT_BALANCE";

/// The documented `failure_code`s of a FAILED payout (Payout object, `failure_code`):
/// only [`INSUFFICIENT_BALANCE`] is recoverable (a later payout under a new reference
/// may succeed); the rest concern the destination or the request and are final
/// (`TEMPORARY_TRANSFER_ERROR` too: a person retries it, not the worker). An
/// undocumented code is kept as it came and is final as well.
pub const FAILURE_CODES: [&str; 7] = [
    INSUFFICIENT_BALANCE,
    "INVALID_DESTINATION",
    "REJECTED_BY_CHANNEL",
    "TEMPORARY_TRANSFER_ERROR",
    "TRANSFER_ERROR",
    "UNKNOWN_BANK_NETWORK_ERROR",
    "DESTINATION_MAXIMUM_LIMIT",
];

/// The code of a FAILED payout that names none.
pub const FAILURE_CODE_MISSING: &str = "UNKNOWN_FAILURE";

/// Xendit's status (and failure code) as a [`ProviderStatus`]; `field` names where
/// the status was read (`status`, `data.status`) for the error of an unknown one.
pub fn status(
    field: &str,
    status: &str,
    failure_code: Option<&str>,
) -> Result<ProviderStatus, String> {
    let failed = |code: &str| ProviderStatus::Failed {
        code: code.to_owned(),
        recoverable: code == INSUFFICIENT_BALANCE,
    };
    match status {
        "ACCEPTED"
        | "REQUESTED"
        | "PENDING"
        | "PENDING_COMPLIANCE_ASSESSMENT"
        | "READY"
        | "LOCKED" => Ok(ProviderStatus::Accepted),
        "SUCCEEDED" => Ok(ProviderStatus::Succeeded),
        "FAILED" => Ok(failed(
            failure_code
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .unwrap_or(FAILURE_CODE_MISSING),
        )),
        "CANCELLED" | "COMPLIANCE_REJECTED" | "EXPIRED" => Ok(ProviderStatus::Failed {
            code: status.to_owned(),
            recoverable: false,
        }),
        "REVERSED" => Ok(ProviderStatus::Reversed),
        other => Err(format!("{field}: unknown payout status {other:?}")),
    }
}

/// A Payout object (create, get, list and webhook `data`): the fields we read.
#[derive(Debug, Deserialize)]
pub struct PayoutBody {
    pub id: String,
    pub reference_id: String,
    /// A JSON number in the major unit, kept as its text (see [`amount`]).
    pub amount: Box<RawValue>,
    pub currency: String,
    pub status: String,
    #[serde(default)]
    pub failure_code: Option<String>,
}

impl PayoutBody {
    /// The payout in our model; `at` prefixes field names in errors (`data.`).
    pub fn payout(&self, at: &str) -> Result<ProviderPayout, String> {
        let status = status(
            &format!("{at}status"),
            &self.status,
            self.failure_code.as_deref(),
        )?;
        let digits = amount::digits(&self.currency)
            .ok_or_else(|| format!("{at}currency: {:?} is not paid out", self.currency))?;
        let amount_minor = amount::from_major(self.amount.get(), digits)
            .map_err(|e| format!("{at}amount: {e}"))?;
        Ok(ProviderPayout {
            provider_id: self.id.clone(),
            reference: self.reference_id.clone(),
            amount_minor,
            currency: self.currency.clone(),
            status,
        })
    }
}

/// Xendit's error body (`{"error_code", "message"}`, sometimes `errors`).
#[derive(Debug, Default, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub error_code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// `channel_properties` of a bank or e-wallet payout.
#[derive(Debug, Serialize)]
pub struct ChannelProperties<'a> {
    pub account_number: &'a str,
    pub account_holder_name: &'a str,
}

/// The `POST /v2/payouts` body. `amount` is written as exact decimal text.
#[derive(Debug, Serialize)]
pub struct CreateBody<'a> {
    pub reference_id: &'a str,
    pub channel_code: &'a str,
    pub channel_properties: ChannelProperties<'a>,
    pub amount: Box<RawValue>,
    pub currency: &'a str,
    pub description: &'a str,
}

impl<'a> CreateBody<'a> {
    /// The body for `request`, or why it cannot be sent (a currency Xendit does not
    /// pay out in: nothing is created).
    pub fn of(request: &'a PayoutRequest) -> Result<CreateBody<'a>, String> {
        let currency = request.currency.as_str();
        let digits = amount::digits(currency)
            .ok_or_else(|| format!("Xendit pays out no {currency} (currency)"))?;
        let text = amount::to_major(request.amount_minor, digits);
        let amount = RawValue::from_string(text).map_err(|e| format!("amount: {e}"))?;
        Ok(CreateBody {
            reference_id: &request.reference,
            channel_code: &request.channel_code,
            channel_properties: ChannelProperties {
                account_number: &request.account_number,
                account_holder_name: &request.account_holder,
            },
            amount,
            currency,
            description: &request.description,
        })
    }
}

/// The prefixes of Xendit's secret API keys (`xnd_development_…` in test mode,
/// `xnd_production_…` live). A public key (`xnd_public_…`) cannot make payouts.
pub const SECRET_KEY_PREFIXES: [&str; 2] = ["xnd_development_", "xnd_production_"];

/// Checks the shape of a secret key: not empty, no whitespace anywhere, one of
/// [`SECRET_KEY_PREFIXES`] and something after it. The error names the secret and
/// never repeats it.
pub fn check_secret_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the Xendit secret key is empty".into());
    }
    if key.chars().any(char::is_whitespace) {
        return Err("the Xendit secret key contains whitespace".into());
    }
    let shaped = SECRET_KEY_PREFIXES
        .iter()
        .any(|p| key.len() > p.len() && key.starts_with(p));
    if !shaped {
        return Err(format!(
            "the Xendit secret key is not shaped like one ({}…)",
            SECRET_KEY_PREFIXES.join("… or ")
        ));
    }
    Ok(())
}

/// Checks the webhook verification token: not empty, no whitespace anywhere.
pub fn check_callback_token(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err("the Xendit callback verification token is empty".into());
    }
    if token.chars().any(char::is_whitespace) {
        return Err("the Xendit callback verification token contains whitespace".into());
    }
    Ok(())
}
