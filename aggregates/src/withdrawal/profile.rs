//! A user's payout profile (R-PAY-1): KYC status and the payout accounts an
//! operator verified, one stream per user (stream id = user id). A withdrawal may
//! only go to a verified account of a KYC-verified user; both facts are events, so
//! who verified what and when is in the log. The payment password is not here: its
//! hash never enters an event (see the service's `payouts::password`).

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::BoundedId;
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The stream type of payout profiles.
pub const PAYOUT_PROFILE_AGGREGATE_TYPE: &str = "payout_profile";
/// Payout accounts one user may register.
pub const PAYOUT_ACCOUNTS_MAX: usize = 20;
/// Longest channel code, account number and holder name.
pub const ACCOUNT_FIELD_LEN_MAX: usize = 64;
pub const HOLDER_LEN_MAX: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum KycStatus {
    #[default]
    None,
    Pending,
    Verified,
    Rejected,
}

impl KycStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::Pending => "PENDING",
            Self::Verified => "VERIFIED",
            Self::Rejected => "REJECTED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutAccount {
    pub account_id: String,
    pub channel_code: String,
    pub account_number: String,
    pub account_holder: String,
    pub registered_at: DateTime<Utc>,
    pub verified_at: Option<DateTime<Utc>>,
    pub verified_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PayoutProfile {
    pub kyc: KycStatus,
    pub accounts: BTreeMap<String, PayoutAccount>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileCommand {
    SetKyc {
        status: KycStatus,
        actor: String,
        reason: String,
        now: DateTime<Utc>,
    },
    RegisterAccount {
        account_id: BoundedId,
        channel_code: String,
        account_number: String,
        account_holder: String,
        actor: String,
        now: DateTime<Utc>,
    },
    VerifyAccount {
        account_id: BoundedId,
        actor: String,
        now: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ProfileEvent {
    KycStatusSet {
        status: KycStatus,
        actor: String,
        reason: String,
        at: DateTime<Utc>,
    },
    PayoutAccountRegistered {
        account_id: String,
        channel_code: String,
        account_number: String,
        account_holder: String,
        actor: String,
        at: DateTime<Utc>,
    },
    PayoutAccountVerified {
        account_id: String,
        actor: String,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("payout account {account_id} is not registered")]
    AccountNotFound { account_id: String },
    #[error("payout account {account_id} is registered with other details")]
    AccountIdTaken { account_id: String },
    #[error("at most {max} payout accounts per user")]
    TooManyAccounts { max: usize },
    #[error("{field} must be 1 to {max} characters of [A-Za-z0-9_ .-]")]
    BadField { field: &'static str, max: usize },
    #[error("reason must not be empty")]
    ReasonMissing,
}

impl ProfileError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::AccountNotFound { .. } => "PAYOUT_ACCOUNT_NOT_FOUND",
            Self::AccountIdTaken { .. } => "PAYOUT_ACCOUNT_ID_TAKEN",
            Self::TooManyAccounts { .. } => "PAYOUT_ACCOUNTS_LIMIT",
            Self::BadField { .. } => "INVALID_FIELD",
            Self::ReasonMissing => "REASON_MISSING",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::AccountNotFound { .. } | Self::AccountIdTaken { .. } => Some("account_id"),
            Self::TooManyAccounts { .. } => None,
            Self::BadField { field, .. } => Some(field),
            Self::ReasonMissing => Some("reason"),
        }
    }
}

fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), ProfileError> {
    let ok = !value.trim().is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ' ' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ProfileError::BadField { field, max })
    }
}

impl PayoutProfile {
    /// The account if it is registered and verified.
    pub fn verified_account(&self, account_id: &str) -> Option<&PayoutAccount> {
        self.accounts
            .get(account_id)
            .filter(|a| a.verified_at.is_some())
    }
}

impl Decide for PayoutProfile {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: ProfileCommand) -> Result<Vec<ProfileEvent>, ProfileError> {
        match command {
            ProfileCommand::SetKyc {
                status,
                actor,
                reason,
                now,
            } => {
                if reason.trim().is_empty() {
                    return Err(ProfileError::ReasonMissing);
                }
                if status == self.kyc {
                    return Ok(vec![]);
                }
                Ok(vec![ProfileEvent::KycStatusSet {
                    status,
                    actor,
                    reason,
                    at: now,
                }])
            }
            ProfileCommand::RegisterAccount {
                account_id,
                channel_code,
                account_number,
                account_holder,
                actor,
                now,
            } => {
                check_text("channel_code", &channel_code, ACCOUNT_FIELD_LEN_MAX)?;
                check_text("account_number", &account_number, ACCOUNT_FIELD_LEN_MAX)?;
                check_text("account_holder", &account_holder, HOLDER_LEN_MAX)?;
                if let Some(a) = self.accounts.get(account_id.as_str()) {
                    let same = a.channel_code == channel_code
                        && a.account_number == account_number
                        && a.account_holder == account_holder;
                    return if same {
                        Ok(vec![])
                    } else {
                        Err(ProfileError::AccountIdTaken {
                            account_id: account_id.as_str().to_owned(),
                        })
                    };
                }
                if self.accounts.len() >= PAYOUT_ACCOUNTS_MAX {
                    return Err(ProfileError::TooManyAccounts {
                        max: PAYOUT_ACCOUNTS_MAX,
                    });
                }
                Ok(vec![ProfileEvent::PayoutAccountRegistered {
                    account_id: account_id.as_str().to_owned(),
                    channel_code,
                    account_number,
                    account_holder,
                    actor,
                    at: now,
                }])
            }
            ProfileCommand::VerifyAccount {
                account_id,
                actor,
                now,
            } => match self.accounts.get(account_id.as_str()) {
                None => Err(ProfileError::AccountNotFound {
                    account_id: account_id.as_str().to_owned(),
                }),
                Some(a) if a.verified_at.is_some() => Ok(vec![]),
                Some(_) => Ok(vec![ProfileEvent::PayoutAccountVerified {
                    account_id: account_id.as_str().to_owned(),
                    actor,
                    at: now,
                }]),
            },
        }
    }

    fn check(&self, event: &ProfileEvent) -> Result<(), InvariantViolation> {
        match event {
            ProfileEvent::PayoutAccountRegistered { account_id, .. }
                if self.accounts.contains_key(account_id) =>
            {
                Err(InvariantViolation(format!(
                    "payout account {account_id} registered twice"
                )))
            }
            ProfileEvent::PayoutAccountVerified { account_id, .. }
                if !self.accounts.contains_key(account_id) =>
            {
                Err(InvariantViolation(format!(
                    "payout account {account_id} verified before it was registered"
                )))
            }
            _ => Ok(()),
        }
    }

    fn ledger_ref(_event: &ProfileEvent) -> Option<LedgerRef> {
        None
    }
}

impl DomainEvent for ProfileEvent {
    fn event_type(&self) -> String {
        match self {
            Self::KycStatusSet { .. } => "KycStatusSet",
            Self::PayoutAccountRegistered { .. } => "PayoutAccountRegistered",
            Self::PayoutAccountVerified { .. } => "PayoutAccountVerified",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

impl Aggregate for PayoutProfile {
    const TYPE: &'static str = PAYOUT_PROFILE_AGGREGATE_TYPE;
    type Command = ProfileCommand;
    type Event = ProfileEvent;
    type Error = ProfileError;
    type Services = ();

    async fn handle(
        &mut self,
        command: ProfileCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), ProfileError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: ProfileEvent) {
        match event {
            ProfileEvent::KycStatusSet { status, .. } => self.kyc = status,
            ProfileEvent::PayoutAccountRegistered {
                account_id,
                channel_code,
                account_number,
                account_holder,
                at,
                ..
            } => {
                self.accounts.insert(
                    account_id.clone(),
                    PayoutAccount {
                        account_id,
                        channel_code,
                        account_number,
                        account_holder,
                        registered_at: at,
                        verified_at: None,
                        verified_by: None,
                    },
                );
            }
            ProfileEvent::PayoutAccountVerified {
                account_id,
                actor,
                at,
            } => {
                if let Some(a) = self.accounts.get_mut(&account_id) {
                    a.verified_at = Some(at);
                    a.verified_by = Some(actor);
                }
            }
        }
    }
}
