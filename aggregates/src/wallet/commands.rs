//! Wallet commands (SPEC R-WAL-2). Tagged by `"type"` on the wire; unknown fields are
//! refused so a typo never silently drops a value.

use crate::money::{AmountMinor, BoundedId, Currency};
use serde::{Deserialize, Serialize};

/// What a money movement refers to: the business action that caused it.
/// `(ref_type, ref_id, entry_type)` is unique across the ledger (R-INV-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveFunds {
    /// e.g. `COMMISSION`, `WITHDRAWAL`, `RISK_REVIEW`.
    pub ref_type: BoundedId,
    pub ref_id: BoundedId,
    pub amount_minor: AmountMinor,
    /// Optional guard: when given it must equal the wallet's currency, so a caller
    /// that thinks in another currency is refused instead of booking a wrong amount.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::money::iso_currency_opt"
    )]
    pub currency: Option<Currency>,
    /// Who is on the other side outside the wallet, where the chart names one: the
    /// payout provider of a `PayOutFrozen` (its clearing account takes the money).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterparty: Option<BoundedId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenWallet {
    pub user_id: BoundedId,
    /// A circulating ISO 4217 code (`ZZZ`, `XXX` and the like are refused).
    #[serde(deserialize_with = "crate::money::iso_currency")]
    pub currency: Currency,
}

/// The reference that blocks (or unblocked) withdrawals, e.g. a recovery-risk record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockRef {
    pub ref_type: BoundedId,
    pub ref_id: BoundedId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Longest free-text reason stored on a block.
pub const REASON_LEN_MAX: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum WalletCommand {
    Open(OpenWallet),
    /// pending += amount (a commission was recorded).
    CreditPending(MoveFunds),
    /// pending -= amount, available += amount (a commission was settled).
    ReleasePending(MoveFunds),
    /// pending -= amount (a pending commission was cancelled or refunded).
    ReversePending(MoveFunds),
    /// available -= amount, frozen += amount (`WITHDRAW_FREEZE`); refused while blocked.
    FreezeForWithdrawal(MoveFunds),
    /// frozen -= amount, available += amount (withdrawal rejected or failed): only
    /// the open freeze of the same reference, for exactly its amount.
    Unfreeze(MoveFunds),
    /// frozen -= amount (the payout provider paid the withdrawal): only the open
    /// freeze of the same reference, for exactly its amount.
    PayOutFrozen(MoveFunds),
    /// available -= amount, risk_hold += amount.
    PlaceRiskHold(MoveFunds),
    /// risk_hold -= amount, available += amount.
    ReleaseRiskHold(MoveFunds),
    /// Withdrawals are refused until every block is lifted (R-COM-3).
    BlockWithdrawals(BlockRef),
    UnblockWithdrawals(BlockRef),
}

impl WalletCommand {
    /// The command's name as it appears in `"type"`, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Open(_) => "Open",
            Self::CreditPending(_) => "CreditPending",
            Self::ReleasePending(_) => "ReleasePending",
            Self::ReversePending(_) => "ReversePending",
            Self::FreezeForWithdrawal(_) => "FreezeForWithdrawal",
            Self::Unfreeze(_) => "Unfreeze",
            Self::PayOutFrozen(_) => "PayOutFrozen",
            Self::PlaceRiskHold(_) => "PlaceRiskHold",
            Self::ReleaseRiskHold(_) => "ReleaseRiskHold",
            Self::BlockWithdrawals(_) => "BlockWithdrawals",
            Self::UnblockWithdrawals(_) => "UnblockWithdrawals",
        }
    }
}

/// Why a JSON command could not be parsed, naming the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CommandParseError {
    /// Stable code: `MISSING_FIELD`, `UNKNOWN_FIELD`, `INVALID_FIELD`, `UNKNOWN_COMMAND`.
    pub code: &'static str,
    /// Dotted path of the field (`amount_minor`), or `type` for the tag.
    pub field: String,
    pub message: String,
}

impl WalletCommand {
    /// Parse a command from JSON, naming the field of any error. The tag is read
    /// first and the rest is decoded into that variant's struct with its path
    /// tracked, so `{"type":"CreditPending","amount_minor":1.5,…}` fails on
    /// `amount_minor`, not on the whole body.
    pub fn parse_json(value: serde_json::Value) -> Result<WalletCommand, CommandParseError> {
        let serde_json::Value::Object(mut obj) = value else {
            return Err(CommandParseError {
                code: "INVALID_FIELD",
                field: String::new(),
                message: "the body must be a JSON object".into(),
            });
        };
        let tag = match obj.remove("type") {
            Some(serde_json::Value::String(t)) => t,
            Some(_) => {
                return Err(CommandParseError {
                    code: "INVALID_FIELD",
                    field: "type".into(),
                    message: "must be a string naming the command".into(),
                })
            }
            None => {
                return Err(CommandParseError {
                    code: "MISSING_FIELD",
                    field: "type".into(),
                    message: "missing field `type`".into(),
                })
            }
        };
        let rest = serde_json::Value::Object(obj);
        Ok(match tag.as_str() {
            "Open" => Self::Open(fields(rest)?),
            "CreditPending" => Self::CreditPending(fields(rest)?),
            "ReleasePending" => Self::ReleasePending(fields(rest)?),
            "ReversePending" => Self::ReversePending(fields(rest)?),
            "FreezeForWithdrawal" => Self::FreezeForWithdrawal(fields(rest)?),
            "Unfreeze" => Self::Unfreeze(fields(rest)?),
            "PayOutFrozen" => Self::PayOutFrozen(fields(rest)?),
            "PlaceRiskHold" => Self::PlaceRiskHold(fields(rest)?),
            "ReleaseRiskHold" => Self::ReleaseRiskHold(fields(rest)?),
            "BlockWithdrawals" => Self::BlockWithdrawals(fields(rest)?),
            "UnblockWithdrawals" => Self::UnblockWithdrawals(fields(rest)?),
            unknown => {
                return Err(CommandParseError {
                    code: "UNKNOWN_COMMAND",
                    field: "type".into(),
                    message: format!("unknown wallet command `{unknown}`"),
                })
            }
        })
    }
}

fn fields<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, CommandParseError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        // serde reports unknown and missing fields at the parent; name the field.
        let named = message.split('`').nth(1).map(str::to_owned);
        let (code, field) = if message.starts_with("unknown field") {
            ("UNKNOWN_FIELD", named.unwrap_or(path))
        } else if message.starts_with("missing field") {
            ("MISSING_FIELD", named.unwrap_or(path))
        } else {
            ("INVALID_FIELD", path)
        };
        CommandParseError {
            code,
            field: if field == "." { String::new() } else { field },
            message,
        }
    })
}
