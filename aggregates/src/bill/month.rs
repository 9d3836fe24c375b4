//! The two values every bill rule is keyed by: a [`YearMonth`] (`yyyymm`) and a
//! [`StationMonth`] (one station, one bill month; `<station_id>:<yyyymm>`). One type
//! each for commands, events' stream ids, the projections and the service.
//!
//! A month has two parse rules, as it had before the types were one: a command may
//! record only a month from [`BILL_YEAR_MIN`] ([`YearMonth::parse_bill_month`], also
//! what deserialising a command applies), while a reader of stored rows, refresh
//! requests and read paths takes any `yyyymm` ([`YearMonth::parse`]). Both serialise
//! as the `"yyyymm"` string, so command and event JSON read as they always did.

use crate::money::ParseError;
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

fn rule(text: &str) -> ParseError {
    ParseError::new(text)
}

/// Earliest bill year a command may record: no resident-income bill predates the
/// source system.
pub const BILL_YEAR_MIN: u32 = 1970;

/// The refusal of a month in a command (stable text: clients read it).
const BILL_MONTH_RULE: &str = "must be a month as yyyymm, e.g. 202609 (month 01 to 12)";

/// A bill month, `yyyymm` (a four-digit year, month 01 to 12). Ordered by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct YearMonth {
    // Field order matters: the derived `Ord` compares the year first.
    year: u16,
    month: u8,
}

impl YearMonth {
    /// `month` is 1..=12, `year` has four digits (1000..=9999).
    pub fn new(year: u16, month: u8) -> Result<YearMonth, ParseError> {
        if !(1..=12).contains(&month) || !(1000..=9999).contains(&year) {
            return Err(rule(BILL_MONTH_RULE));
        }
        Ok(YearMonth { year, month })
    }

    /// Six ASCII digits, `yyyymm`, of any four-digit year: how stored rows, refresh
    /// requests and read paths spell a month.
    pub fn parse(s: &str) -> Result<YearMonth, ParseError> {
        let bad = || rule(BILL_MONTH_RULE);
        if s.len() != 6 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        // Both slices are ASCII digits of bounded length: the parses cannot fail.
        let year = s[..4].parse().map_err(|_| bad())?;
        let month = s[4..].parse().map_err(|_| bad())?;
        YearMonth::new(year, month)
    }

    /// A month a command may record: [`YearMonth::parse`], and a year from
    /// [`BILL_YEAR_MIN`].
    pub fn parse_bill_month(s: &str) -> Result<YearMonth, ParseError> {
        let month = YearMonth::parse(s)?;
        if u32::from(month.year) < BILL_YEAR_MIN {
            return Err(rule(BILL_MONTH_RULE));
        }
        Ok(month)
    }

    pub fn year(self) -> u16 {
        self.year
    }

    pub fn month(self) -> u8 {
        self.month
    }

    /// The last month whose rent the pre-rent check of this month can sum: every
    /// cutoff (R-BILL-4) is at most the end of the target month's half-year (the
    /// longest cycle), so later small bills never change this month's decision.
    pub fn last_rent_month_read(self) -> YearMonth {
        self.end_of_period(6)
    }

    /// The first month whose pre-rent check can read this month's rent: the first
    /// month of its half-year (the converse of [`YearMonth::last_rent_month_read`]).
    pub fn first_month_reading_rent(self) -> YearMonth {
        YearMonth {
            year: self.year,
            month: (self.month - 1) / 6 * 6 + 1,
        }
    }

    /// The last month of the calendar period of `months_per_period` months (3: a
    /// quarter, 6: a half-year) that holds this month.
    pub fn end_of_period(self, months_per_period: u8) -> YearMonth {
        debug_assert!(12 % months_per_period == 0, "periods tile the year");
        let period = (self.month - 1) / months_per_period;
        YearMonth {
            year: self.year,
            month: (period + 1) * months_per_period,
        }
    }
}

/// `"yyyymm"`, as commands, events, tables and business keys spell it.
impl Serialize for YearMonth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A month in a command: [`YearMonth::parse_bill_month`], refused with its rule as the
/// message so the HTTP edge names the field at fault.
impl<'de> Deserialize<'de> for YearMonth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        YearMonth::parse_bill_month(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

impl fmt::Display for YearMonth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}{:02}", self.year, self.month)
    }
}

/// The unit every bill decision is about: one station, one bill month. Written
/// `"<station_id>:<yyyymm>"`, as the station-month and lock streams are keyed and
/// refresh business keys spell it (`STATION_MONTH:100:202609`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StationMonth {
    pub station_id: i64,
    pub month: YearMonth,
}

impl StationMonth {
    /// `<station_id>:<yyyymm>`: a positive station id in ASCII digits and a month as
    /// [`YearMonth::parse`] reads it.
    pub fn parse(s: &str) -> Result<StationMonth, ParseError> {
        let bad = || rule("must be a station-month as <station_id>:<yyyymm>, e.g. 100:202609");
        let (station, month) = s.split_once(':').ok_or_else(bad)?;
        if station.is_empty() || !station.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let station_id: i64 = station.parse().map_err(|_| bad())?;
        if station_id == 0 {
            return Err(bad());
        }
        let month = YearMonth::parse(month).map_err(|_| bad())?;
        Ok(StationMonth { station_id, month })
    }
}

/// `"<station_id>:<yyyymm>"`.
impl Serialize for StationMonth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for StationMonth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.station_id, self.month)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_month_is_yyyymm_from_the_bill_year_min() {
        for ok in ["202601", "202612", "197001"] {
            assert!(YearMonth::parse_bill_month(ok).is_ok(), "{ok}");
        }
        for bad in [
            "202600", "202613", "2026-01", "20261", "2026011", "196912", "abcdef",
        ] {
            let refused = YearMonth::parse_bill_month(bad).expect_err(bad);
            assert_eq!(refused.rule, BILL_MONTH_RULE, "{bad}");
        }
        let json = |s: &str| serde_json::from_str::<YearMonth>(s);
        assert_eq!(
            json("\"202609\"").map(|m| m.to_string()).ok(),
            Some("202609".into())
        );
        assert!(json("\"196912\"").is_err());
        assert!(json("202609").is_err());
    }

    #[test]
    fn a_read_month_is_any_four_digit_year() {
        assert_eq!(
            YearMonth::parse("100001").map(|m| (m.year(), m.month())),
            Ok((1000, 1))
        );
        assert!(YearMonth::parse("099912").is_err());
        assert!(YearMonth::parse("2026x9").is_err());
    }

    #[test]
    fn a_month_serialises_as_the_yyyymm_string_and_orders_by_time() {
        let m = |s: &str| YearMonth::parse(s).unwrap();
        assert_eq!(serde_json::to_string(&m("202609")).unwrap(), "\"202609\"");
        assert!(m("202512") < m("202601"));
        assert!(m("202601") < m("202602"));
    }

    #[test]
    fn a_station_month_is_station_colon_month() {
        let sm = StationMonth::parse("100:202609").unwrap();
        assert_eq!(
            (sm.station_id, sm.month.to_string()),
            (100, "202609".into())
        );
        assert_eq!(sm.to_string(), "100:202609");
        assert_eq!(serde_json::to_string(&sm).unwrap(), "\"100:202609\"");
        for bad in [
            "",
            "100",
            "100:2026",
            "100:202613",
            "0:202609",
            "-1:202609",
            "x:202609",
        ] {
            assert!(StationMonth::parse(bad).is_err(), "{bad}");
        }
    }
}
