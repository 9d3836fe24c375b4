//! Bill input values: parse, don't validate. Ids are the source system's positive
//! numeric ids, months are [`YearMonth`]s (`month.rs`), money is `i64` minor units. A value that exists
//! is valid; deserialising refuses anything else with the rule as the message, so the
//! HTTP edge names the field at fault.

use super::month::{StationMonth, YearMonth};
use crate::money::ParseError;
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

pub(super) fn rule(text: &str) -> ParseError {
    ParseError::new(text)
}

/// A source-system id: a strictly positive integer (bill, diff, account, partner org,
/// station, order, line, lock and result ids alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct BillId(i64);

impl BillId {
    pub fn parse(value: i64) -> Result<Self, ParseError> {
        if value <= 0 {
            return Err(rule("must be a positive integer id"));
        }
        Ok(Self(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for BillId {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl<'de> Deserialize<'de> for BillId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // i64::deserialize makes serde_json refuse floats and strings with a type error.
        let v = i64::deserialize(d)?;
        BillId::parse(v).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

/// An amount that cannot be negative (rent, pre_rent, deduction, planned and result
/// amounts, openings), in minor units; zero is legal (`pre_rent = 0` means "no payment
/// needed", R-BILL-2 rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct NonNegativeMinor(i64);

impl NonNegativeMinor {
    pub fn parse(value: i64) -> Result<Self, ParseError> {
        if value < 0 {
            return Err(rule("must be a non-negative integer number of minor units"));
        }
        Ok(Self(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for NonNegativeMinor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        NonNegativeMinor::parse(v).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

/// Longest configuration code (payment cycle, rent pay method, change type).
pub const BILL_CODE_LEN_MAX: usize = 64;

/// A configuration code as the source records it (`MONTHLY`, `SHARE_RULE_COMPOSITE`,
/// …): 1 to [`BILL_CODE_LEN_MAX`] of `[A-Z0-9_]`. Unknown codes are legal facts — the
/// decision treats them as "no legal cycle" (R-BILL-4) — so no list is enforced here.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct BillCode(String);

impl BillCode {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let ok = !s.is_empty()
            && s.len() <= BILL_CODE_LEN_MAX
            && s.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(rule(&format!(
                "must be a code of 1 to {BILL_CODE_LEN_MAX} characters A-Z, 0-9 or _"
            )));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for BillCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        BillCode::parse(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

/// The stream id of a station-month (`<station_id>:<yyyymm>`, its [`StationMonth`]
/// written out), shared by the station-month facts and its lock.
pub fn station_month_stream_id(station_id: BillId, month: YearMonth) -> String {
    StationMonth {
        station_id: station_id.get(),
        month,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_positive_integers() {
        assert!(BillId::parse(1).is_ok());
        assert!(BillId::parse(0).is_err());
        assert!(BillId::parse(-3).is_err());
        assert!(serde_json::from_str::<BillId>("1.5").is_err());
        assert!(serde_json::from_str::<BillId>("\"7\"").is_err());
    }

    #[test]
    fn amounts_may_be_zero_but_not_negative() {
        assert_eq!(NonNegativeMinor::parse(0).map(NonNegativeMinor::get), Ok(0));
        assert!(NonNegativeMinor::parse(-1).is_err());
        assert!(serde_json::from_str::<NonNegativeMinor>("10.0").is_err());
    }

    #[test]
    fn codes_are_upper_snake_case_and_bounded() {
        assert!(BillCode::parse("MONTH_PAY_PREVIOUS_MONTH").is_ok());
        assert!(BillCode::parse("").is_err());
        assert!(BillCode::parse("monthly").is_err());
        assert!(BillCode::parse(&"A".repeat(BILL_CODE_LEN_MAX + 1)).is_err());
    }

    #[test]
    fn a_station_month_stream_is_station_colon_month() {
        let id = station_month_stream_id(
            BillId::parse(100).unwrap(),
            YearMonth::parse_bill_month("202609").unwrap(),
        );
        assert_eq!(id, "100:202609");
    }
}

/// What kind of id a claim is of; see `claim.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClaimKind {
    SmallBill,
    Diff,
    Line,
    Lock,
    /// A partner bill is linked by at most one diff (seed §4.4: a partner bill must
    /// hit a unique difference-ledger row); released when that diff links another.
    PartnerBillLink,
}

impl ClaimKind {
    pub const ALL: [ClaimKind; 5] = [
        Self::SmallBill,
        Self::Diff,
        Self::Line,
        Self::Lock,
        Self::PartnerBillLink,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SmallBill => "SMALL_BILL",
            Self::Diff => "DIFF",
            Self::Line => "LINE",
            Self::Lock => "LOCK",
            Self::PartnerBillLink => "PARTNER_BILL_LINK",
        }
    }

    /// A permanent claim is never released: the id names its holder's row for good.
    pub fn permanent(self) -> bool {
        !matches!(self, Self::PartnerBillLink)
    }

    /// The request field that carries the id.
    pub fn field(self) -> &'static str {
        match self {
            Self::SmallBill => "bill_id",
            Self::Diff => "diff_id",
            Self::Line => "line_id",
            Self::Lock => "lock_id",
            Self::PartnerBillLink => "partner_bill_id",
        }
    }

    /// The stable code of a refused claim.
    pub fn taken_code(self) -> &'static str {
        match self {
            Self::SmallBill => "BILL_ID_TAKEN",
            Self::Diff => "DIFF_ID_TAKEN",
            Self::Line => "LINE_ID_TAKEN",
            Self::Lock => "LOCK_ID_TAKEN",
            Self::PartnerBillLink => "PARTNER_BILL_ALREADY_LINKED",
        }
    }

    /// What holds such an id, for messages.
    pub fn holder_noun(self) -> &'static str {
        match self {
            Self::SmallBill => "the small bill of station-month",
            Self::Diff => "the diff of station-month",
            Self::Line => "a line of payment order",
            Self::Lock => "a lock of station-month",
            Self::PartnerBillLink => "linked by the diff of station-month",
        }
    }

    /// The claim stream of an id: `<KIND>:<id>`.
    pub fn stream_id(self, id: i64) -> String {
        format!("{}:{id}", self.as_str())
    }

    /// The claim a permanent claim's ledger reference names, back from its
    /// `ledger_ref_id` (`<KIND>:<id>`).
    pub fn parse_stream_id(stream_id: &str) -> Option<(ClaimKind, i64)> {
        let (kind, id) = stream_id.split_once(':')?;
        let kind = Self::ALL.into_iter().find(|k| k.as_str() == kind)?;
        Some((kind, id.parse().ok()?))
    }
}
