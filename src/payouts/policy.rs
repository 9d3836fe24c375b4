//! What a withdrawal request must satisfy beyond the wallet's balance (R-PAY-1): the
//! amount range, the daily count and amount per user and currency, and the risk
//! rule that sends a request to manual review instead of paying it at once.
//!
//! One [`Limits`] per currency (amounts are minor units of that currency); a
//! currency without its own uses `default`. Configured with
//! `serve --withdrawal-policy FILE` (JSON of [`PayoutPolicy`]).

use chrono::{DateTime, TimeDelta, Utc};
use factledger_aggregates::withdrawal::profile::PayoutAccount;
use factledger_aggregates::withdrawal::Review;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub min_minor: i64,
    pub max_minor: i64,
    pub daily_count: u32,
    pub daily_amount_minor: i64,
    /// A request of at least this much waits for an operator.
    pub review_at_or_above_minor: i64,
    /// A request to an account verified less than this many hours ago waits for an
    /// operator (a freshly added account is how a taken-over user is emptied).
    pub review_account_younger_than_hours: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_minor: 1_000,
            max_minor: 1_000_000_000,
            daily_count: 5,
            daily_amount_minor: 2_000_000_000,
            review_at_or_above_minor: 500_000_000,
            review_account_younger_than_hours: 24,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutPolicy {
    #[serde(default)]
    pub default: Limits,
    /// Per ISO 4217 code.
    #[serde(default)]
    pub currencies: BTreeMap<String, Limits>,
}

/// A request outside the limits, naming the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("amount_minor {amount} is below the minimum withdrawal of {min}")]
    BelowMinimum { amount: i64, min: i64 },
    #[error("amount_minor {amount} is above the maximum withdrawal of {max}")]
    AboveMaximum { amount: i64, max: i64 },
}

impl PolicyError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::BelowMinimum { .. } => "AMOUNT_BELOW_MINIMUM",
            Self::AboveMaximum { .. } => "AMOUNT_ABOVE_MAXIMUM",
        }
    }
}

impl PayoutPolicy {
    pub fn limits(&self, currency: &str) -> &Limits {
        self.currencies.get(currency).unwrap_or(&self.default)
    }

    /// Check the amount range and decide the review (the daily limits are counted by
    /// the `withdrawal_day` stream in the request's unit).
    pub fn admit(
        &self,
        currency: &str,
        amount_minor: i64,
        account: &PayoutAccount,
        now: DateTime<Utc>,
    ) -> Result<Review, PolicyError> {
        let l = self.limits(currency);
        if amount_minor < l.min_minor {
            return Err(PolicyError::BelowMinimum {
                amount: amount_minor,
                min: l.min_minor,
            });
        }
        if amount_minor > l.max_minor {
            return Err(PolicyError::AboveMaximum {
                amount: amount_minor,
                max: l.max_minor,
            });
        }
        let mut reasons = Vec::new();
        if amount_minor >= l.review_at_or_above_minor {
            reasons.push(format!(
                "amount {amount_minor} is at or above the review threshold {}",
                l.review_at_or_above_minor
            ));
        }
        let young = account.verified_at.is_some_and(|at| {
            now.signed_duration_since(at) < TimeDelta::hours(l.review_account_younger_than_hours)
        });
        if young {
            reasons.push(format!(
                "payout account {} was verified less than {} hours ago",
                account.account_id, l.review_account_younger_than_hours
            ));
        }
        Ok(if reasons.is_empty() {
            Review::Auto
        } else {
            Review::Manual { reasons }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn account(verified_hours_ago: i64, now: DateTime<Utc>) -> PayoutAccount {
        PayoutAccount {
            account_id: "pa-1".into(),
            channel_code: "ID_BCA".into(),
            account_number: "1".into(),
            account_holder: "B".into(),
            registered_at: now,
            verified_at: Some(now - TimeDelta::hours(verified_hours_ago)),
            verified_by: Some("op".into()),
        }
    }

    #[test]
    fn the_range_is_enforced_and_large_or_new_account_requests_go_to_review() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        let mut p = PayoutPolicy::default();
        p.currencies.insert(
            "IDR".into(),
            Limits {
                min_minor: 100,
                max_minor: 1_000,
                review_at_or_above_minor: 500,
                ..Limits::default()
            },
        );
        let old = account(48, now);
        assert_eq!(
            p.admit("IDR", 99, &old, now).unwrap_err().code(),
            "AMOUNT_BELOW_MINIMUM"
        );
        assert_eq!(
            p.admit("IDR", 1_001, &old, now).unwrap_err().code(),
            "AMOUNT_ABOVE_MAXIMUM"
        );
        assert_eq!(p.admit("IDR", 499, &old, now).unwrap(), Review::Auto);
        assert!(matches!(
            p.admit("IDR", 500, &old, now).unwrap(),
            Review::Manual { .. }
        ));
        let Review::Manual { reasons } = p.admit("IDR", 100, &account(1, now), now).unwrap() else {
            panic!("a day-old account is reviewed")
        };
        assert!(reasons[0].contains("verified less than 24 hours ago"));
        // Another currency falls back to the default limits.
        assert_eq!(
            p.admit("USD", 999, &old, now).unwrap_err().code(),
            "AMOUNT_BELOW_MINIMUM"
        );
    }
}
