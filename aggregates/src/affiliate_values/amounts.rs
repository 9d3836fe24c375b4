//! Commission amount arithmetic (SPEC R-ORD-5, R-INV-4): integers only, rates in basis
//! points, every division rounds DOWN to whole minor units, every multiplication is
//! done in `i128` and checked back into `i64`.
//!
//! ```text
//! M                = min(platform_commission, GMV × max_commission_base_bps / 10000)
//! cashback         = M × cashback_bps / 10000
//! inviter_reward   = M × inviter_bps  / 10000
//! ```
//!
//! Rounding down means the platform's money always covers what we credit: the sum of
//! the shares never exceeds `M`, and `M` never exceeds the platform commission.

use crate::affiliate::{Bps, BPS_DENOMINATOR};
use crate::commission_rules::RuleSnapshot;
use serde::{Deserialize, Serialize};

/// Why an amount could not be computed. With validated inputs (non-negative amounts,
/// `Bps <= 10000`) neither can happen; the checks make that a proof, not a hope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("{field} is negative ({value_minor}); amounts here are never negative")]
    Negative {
        field: &'static str,
        value_minor: i64,
    },
    #[error("{field} does not fit a signed 64-bit integer")]
    Overflow { field: &'static str },
}

impl AmountError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            AmountError::Negative { .. } => "AMOUNT_NEGATIVE",
            AmountError::Overflow { .. } => "AMOUNT_OVERFLOW",
        }
    }

    /// The field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            AmountError::Negative { field, .. } | AmountError::Overflow { field } => field,
        }
    }
}

/// `amount × bps / 10000`, rounded down, in `i128` so the product cannot overflow.
/// Only non-negative amounts and rates are accepted (rounding down is then rounding
/// toward zero, so there is no sign subtlety).
fn mul_bps_floor(field: &'static str, amount_minor: i64, bps: i64) -> Result<i64, AmountError> {
    if amount_minor < 0 {
        return Err(AmountError::Negative {
            field,
            value_minor: amount_minor,
        });
    }
    if bps < 0 {
        return Err(AmountError::Negative {
            field,
            value_minor: bps,
        });
    }
    let product = i128::from(amount_minor)
        .checked_mul(i128::from(bps))
        .ok_or(AmountError::Overflow { field })?;
    // Both factors are non-negative, so `/` (truncation) is rounding down.
    let quotient = product / i128::from(BPS_DENOMINATOR);
    i64::try_from(quotient).map_err(|_| AmountError::Overflow { field })
}

/// The commission base `M = min(platform_commission, GMV × max_commission_base_bps /
/// 10000)`, rounded down. Inputs are the *known* amounts (a sparse 0 has already been
/// replaced by the last known value, R-ORD-6).
pub fn commission_base_minor(
    gmv_minor: i64,
    platform_commission_minor: i64,
    max_commission_base_bps: Bps,
) -> Result<i64, AmountError> {
    if platform_commission_minor < 0 {
        return Err(AmountError::Negative {
            field: "platform_commission_minor",
            value_minor: platform_commission_minor,
        });
    }
    let cap = mul_bps_floor("gmv_minor", gmv_minor, max_commission_base_bps.get())?;
    Ok(platform_commission_minor.min(cap))
}

/// A share of the base: `base × bps / 10000`, rounded down.
pub fn share_minor(base_minor: i64, bps: Bps) -> Result<i64, AmountError> {
    mul_bps_floor("commission_base_minor", base_minor, bps.get())
}

/// Who a commission is for: the buyer who owns the order, or the owner's direct
/// inviter. One commission per order × role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BeneficiaryRole {
    Cashback,
    InviterReward,
}

impl BeneficiaryRole {
    pub const ALL: [BeneficiaryRole; 2] =
        [BeneficiaryRole::Cashback, BeneficiaryRole::InviterReward];

    pub fn as_str(self) -> &'static str {
        match self {
            BeneficiaryRole::Cashback => "CASHBACK",
            BeneficiaryRole::InviterReward => "INVITER_REWARD",
        }
    }
}

/// The amounts an order yields under one rule version, as recorded in order events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommissionAmounts {
    /// `M`, the base both shares are taken from.
    pub base_minor: i64,
    pub cashback_minor: i64,
    pub inviter_reward_minor: i64,
}

impl CommissionAmounts {
    pub fn for_role(&self, role: BeneficiaryRole) -> i64 {
        match role {
            BeneficiaryRole::Cashback => self.cashback_minor,
            BeneficiaryRole::InviterReward => self.inviter_reward_minor,
        }
    }
}

/// Every amount of an order under a rule version (R-ORD-5), rounded down.
pub fn commission_amounts(
    gmv_minor: i64,
    platform_commission_minor: i64,
    rules: &RuleSnapshot,
) -> Result<CommissionAmounts, AmountError> {
    let base_minor = commission_base_minor(
        gmv_minor,
        platform_commission_minor,
        rules.max_commission_base_bps,
    )?;
    Ok(CommissionAmounts {
        base_minor,
        cashback_minor: share_minor(base_minor, rules.cashback_bps)?,
        inviter_reward_minor: share_minor(base_minor, rules.inviter_bps)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bps(v: i64) -> Bps {
        Bps::parse(v).unwrap()
    }

    #[test]
    fn the_base_is_the_platform_commission_when_it_is_below_the_cap() {
        // GMV 1,000,000 × 10 % = 100,000 cap; platform pays 60,000.
        assert_eq!(
            commission_base_minor(1_000_000, 60_000, bps(1_000)),
            Ok(60_000)
        );
    }

    #[test]
    fn the_base_is_capped_by_gmv_times_the_cap_rate() {
        // GMV 1,000,000 × 5 % = 50,000 cap; platform pays 60,000.
        assert_eq!(
            commission_base_minor(1_000_000, 60_000, bps(500)),
            Ok(50_000)
        );
    }

    /// One row per rounding case: (gmv, platform commission, cap bps, expected M).
    #[test]
    fn the_base_rounds_down_to_whole_minor_units() {
        let rows: [(i64, i64, i64, i64); 8] = [
            (9_999, 1_000, 1, 0),              // 0.9999 → 0
            (10_000, 1_000, 1, 1),             // exactly 1
            (19_999, 1_000, 1, 1),             // 1.9999 → 1
            (12_345, 1_000_000, 3_333, 4_114), // 4114.5885 → 4114
            (0, 500, 10_000, 0),               // no GMV, no base
            (500, 0, 10_000, 0),               // no platform commission, no base
            (1, 1, 10_000, 1),                 // 100 % cap of 1 is 1
            (1, 1, 9_999, 0),                  // 0.9999 → 0
        ];
        for (gmv, pc, cap, expected) in rows {
            assert_eq!(
                commission_base_minor(gmv, pc, bps(cap)),
                Ok(expected),
                "gmv {gmv} pc {pc} cap {cap}"
            );
        }
    }

    #[test]
    fn shares_round_down_and_never_exceed_the_base() {
        let rows: [(i64, i64, i64); 7] = [
            (0, 5_000, 0),
            (1, 5_000, 0),          // 0.5 → 0
            (3, 3_333, 0),          // 0.9999 → 0
            (10_001, 5_000, 5_000), // 5000.5 → 5000
            (4_114, 7_000, 2_879),  // 2879.8 → 2879
            (4_114, 10_000, 4_114), // 100 %
            (4_114, 0, 0),          // 0 %
        ];
        for (base, rate, expected) in rows {
            assert_eq!(
                share_minor(base, bps(rate)),
                Ok(expected),
                "{base} × {rate}"
            );
        }
        // Two shares that together are 100 % may lose a unit to rounding, never gain.
        let (a, b) = (
            share_minor(3, bps(5_000)).unwrap(),
            share_minor(3, bps(5_000)).unwrap(),
        );
        assert_eq!(a + b, 2);
    }

    #[test]
    fn the_largest_amounts_compute_without_overflow_through_i128() {
        // i64::MAX × 10,000 overflows i64 but not i128; the result is exact.
        assert_eq!(
            commission_base_minor(i64::MAX, i64::MAX, bps(10_000)),
            Ok(i64::MAX)
        );
        assert_eq!(share_minor(i64::MAX, bps(10_000)), Ok(i64::MAX));
        assert_eq!(share_minor(i64::MAX, bps(5_000)), Ok(i64::MAX / 2));
        assert_eq!(
            commission_base_minor(i64::MAX, i64::MAX, bps(1)),
            Ok(i64::MAX / 10_000)
        );
    }

    #[test]
    fn a_product_that_does_not_fit_i64_is_an_overflow_error_not_a_wrap() {
        // Only reachable with a rate above 100 %, which `Bps` refuses; the arithmetic
        // still refuses to wrap.
        assert_eq!(
            mul_bps_floor("x", i64::MAX, 20_000),
            Err(AmountError::Overflow { field: "x" })
        );
        assert_eq!(
            mul_bps_floor("x", i64::MAX, i64::MAX),
            Err(AmountError::Overflow { field: "x" })
        );
        assert_eq!(
            AmountError::Overflow { field: "x" }.code(),
            "AMOUNT_OVERFLOW"
        );
    }

    #[test]
    fn negative_amounts_are_refused() {
        let err = commission_base_minor(-1, 10, bps(100)).unwrap_err();
        assert_eq!(err.code(), "AMOUNT_NEGATIVE");
        assert_eq!(err.field(), "gmv_minor");
        let err = commission_base_minor(10, -1, bps(100)).unwrap_err();
        assert_eq!(err.field(), "platform_commission_minor");
        assert!(share_minor(-5, bps(100)).is_err());
        assert!(mul_bps_floor("x", 5, -1).is_err());
    }

    #[test]
    fn amounts_of_an_order_follow_the_rule_version() {
        let rules = RuleSnapshot {
            rule_set_id: "SHOPEE:ID".to_owned(),
            version: 1,
            effective_from: chrono::DateTime::UNIX_EPOCH,
            cashback_bps: bps(6_000),
            inviter_bps: bps(1_000),
            max_commission_base_bps: bps(800),
            release_delay_days: 14,
        };
        // GMV 250,000 × 8 % = 20,000 cap < platform 30,000 → M = 20,000.
        let a = commission_amounts(250_000, 30_000, &rules).unwrap();
        assert_eq!(
            a,
            CommissionAmounts {
                base_minor: 20_000,
                cashback_minor: 12_000,
                inviter_reward_minor: 2_000,
            }
        );
        assert_eq!(a.for_role(BeneficiaryRole::Cashback), 12_000);
        assert_eq!(a.for_role(BeneficiaryRole::InviterReward), 2_000);
    }
}
