//! Vocabulary shared by the affiliate aggregates (orders, commissions, campaigns, rule
//! sets, invite relations): platforms, countries, platform order ids, basis points and
//! audit reasons. Parse, don't validate: a value that exists is valid.

use crate::money::{ParseError, ID_LEN_MAX};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

fn rule(text: &str) -> ParseError {
    ParseError {
        rule: text.to_owned(),
    }
}

/// An affiliate platform we pull orders from (SPEC R-ORD-1). The wire names are
/// upper case (`TIKTOK`); they are part of stream ids and stored events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Platform {
    TikTok,
    Shopee,
    Lazada,
    Traveloka,
}

impl Platform {
    pub const ALL: [Platform; 4] = [
        Platform::TikTok,
        Platform::Shopee,
        Platform::Lazada,
        Platform::Traveloka,
    ];

    /// Parse a platform name case-insensitively (`TikTok`, `tiktok`, `TIKTOK`).
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| rule("must be one of TIKTOK, SHOPEE, LAZADA, TRAVELOKA"))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::TikTok => "TIKTOK",
            Platform::Shopee => "SHOPEE",
            Platform::Lazada => "LAZADA",
            Platform::Traveloka => "TRAVELOKA",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An ISO 3166-1 alpha-2 country code (`ID`, `MY`). Recorded for self-description and
/// audit only (R-INV-11): one deployment serves one country.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CountryCode([u8; 2]);

impl CountryCode {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let b = s.as_bytes();
        if b.len() != 2 || !b.iter().all(u8::is_ascii_uppercase) {
            return Err(rule(
                "must be a two-letter upper-case ISO 3166-1 code, e.g. ID",
            ));
        }
        Ok(Self([b[0], b[1]]))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII upper-case letters are ever stored (see `parse`).
        std::str::from_utf8(&self.0).unwrap_or("??")
    }
}

impl fmt::Display for CountryCode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CountryCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CountryCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CountryCode::parse(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

impl Default for CountryCode {
    /// Only used by `Default` of an empty aggregate; never reaches an event.
    fn default() -> Self {
        Self(*b"XX")
    }
}

/// Longest platform order id. Platform ids are at most ~32 characters in practice;
/// 64 leaves room for the prefixes and suffixes of derived ids (order stream
/// `TRAVELOKA:<id>`, commission `TRAVELOKA:<id>:INVITER_REWARD`, adjustment refs
/// `…:ADJ<n>`) within [`ID_LEN_MAX`].
pub const PLATFORM_ORDER_ID_LEN_MAX: usize = 64;

const _: () = assert!(PLATFORM_ORDER_ID_LEN_MAX + 48 <= ID_LEN_MAX);

/// A platform's order id: 1..=64 characters of `[A-Za-z0-9_.-]`. No `:` so that
/// `<platform>:<platform_order_id>` splits unambiguously.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(transparent)]
pub struct PlatformOrderId(String);

impl PlatformOrderId {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.is_empty() || s.len() > PLATFORM_ORDER_ID_LEN_MAX {
            return Err(rule(&format!(
                "must be 1 to {PLATFORM_ORDER_ID_LEN_MAX} characters long"
            )));
        }
        let ok = s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !ok {
            return Err(rule("may contain only letters, digits and _ - ."));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PlatformOrderId {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PlatformOrderId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PlatformOrderId::parse(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

/// The stream id of an affiliate order: `<PLATFORM>:<platform_order_id>` (R-ORD-1:
/// the identity is the pair). Always a valid `BoundedId` by construction.
pub fn order_stream_id(platform: Platform, platform_order_id: &PlatformOrderId) -> String {
    format!("{}:{}", platform.as_str(), platform_order_id.as_str())
}

/// One basis point is 1/10,000. Rates and caps are basis points (R-INV-4: no floats).
pub const BPS_DENOMINATOR: i64 = 10_000;

/// A rate in basis points, `0..=10_000` (0 % to 100 %). Above 100 % would pay out more
/// than the base it is a share of, so it is refused at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(transparent)]
pub struct Bps(u16);

impl Bps {
    pub fn parse(value: i64) -> Result<Self, ParseError> {
        if !(0..=BPS_DENOMINATOR).contains(&value) {
            return Err(rule(
                "must be an integer number of basis points, 0 to 10000",
            ));
        }
        // In range 0..=10_000, so it fits a u16.
        Ok(Self(u16::try_from(value).unwrap_or(0)))
    }

    pub fn get(self) -> i64 {
        i64::from(self.0)
    }
}

impl<'de> Deserialize<'de> for Bps {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // i64 refuses floats and strings with a type error.
        let v = i64::deserialize(d)?;
        Bps::parse(v).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

/// Longest audit reason, in bytes (matches the wallet's block reason limit; a
/// reason is a sentence for an auditor, not a document).
pub const AUDIT_REASON_LEN_MAX: usize = crate::wallet::REASON_LEN_MAX;

/// Why a person changed a money-relevant fact (attribution correction, inviter
/// correction, manual resolution): required, non-blank, at most 500 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct AuditReason(String);

impl AuditReason {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.trim().is_empty() {
            return Err(rule("must say why; a blank reason is not an audit trail"));
        }
        if s.len() > AUDIT_REASON_LEN_MAX {
            return Err(rule(&format!(
                "must be at most {AUDIT_REASON_LEN_MAX} bytes long"
            )));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for AuditReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        AuditReason::parse(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

/// An amount a platform reports, in minor units, `>= 0`. Zero means "not sent"
/// (sparse replays, R-ORD-6), never "refunded to zero".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(transparent)]
pub struct ReportedMinor(i64);

impl ReportedMinor {
    pub fn parse(value: i64) -> Result<Self, ParseError> {
        if value < 0 {
            return Err(rule("must be a non-negative integer number of minor units"));
        }
        Ok(Self(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }

    /// Whether the platform left the amount out (sent 0).
    pub fn is_sparse(self) -> bool {
        self.0 == 0
    }
}

impl<'de> Deserialize<'de> for ReportedMinor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        ReportedMinor::parse(v).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_parse_case_insensitively_and_serialize_upper_case() {
        assert_eq!(Platform::parse("TikTok").unwrap(), Platform::TikTok);
        assert_eq!(Platform::parse("shopee").unwrap(), Platform::Shopee);
        assert_eq!(Platform::parse("LAZADA").unwrap(), Platform::Lazada);
        assert_eq!(Platform::parse("Traveloka").unwrap(), Platform::Traveloka);
        assert!(Platform::parse("Tokopedia").is_err());
        assert!(Platform::parse("").is_err());
        assert_eq!(
            serde_json::to_value(Platform::TikTok).unwrap(),
            serde_json::json!("TIKTOK")
        );
        assert!(serde_json::from_str::<Platform>("\"tiktok\"").is_err());
    }

    #[test]
    fn country_codes_are_two_upper_case_letters() {
        assert_eq!(CountryCode::parse("ID").unwrap().as_str(), "ID");
        for bad in ["id", "IDN", "I", "1D", ""] {
            assert!(CountryCode::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn platform_order_ids_are_bounded_and_contain_no_colon() {
        assert!(PlatformOrderId::parse("5781234.99-x_y").is_ok());
        assert!(PlatformOrderId::parse(&"9".repeat(64)).is_ok());
        assert!(PlatformOrderId::parse(&"9".repeat(65)).is_err());
        for bad in ["", "a:b", "a b", "a/b"] {
            assert!(PlatformOrderId::parse(bad).is_err(), "{bad}");
        }
        let id = PlatformOrderId::parse("123").unwrap();
        assert_eq!(order_stream_id(Platform::Shopee, &id), "SHOPEE:123");
    }

    #[test]
    fn basis_points_are_between_zero_and_one_hundred_percent() {
        assert_eq!(Bps::parse(0).unwrap().get(), 0);
        assert_eq!(Bps::parse(10_000).unwrap().get(), 10_000);
        assert!(Bps::parse(10_001).is_err());
        assert!(Bps::parse(-1).is_err());
        assert!(serde_json::from_str::<Bps>("12.5").is_err());
        assert!(serde_json::from_str::<Bps>("\"100\"").is_err());
    }

    #[test]
    fn audit_reasons_are_required_and_bounded_in_bytes() {
        assert!(AuditReason::parse("customer proved the click").is_ok());
        assert!(AuditReason::parse("").is_err());
        assert!(AuditReason::parse("   ").is_err());
        assert!(AuditReason::parse(&"a".repeat(AUDIT_REASON_LEN_MAX)).is_ok());
        assert!(AuditReason::parse(&"a".repeat(AUDIT_REASON_LEN_MAX + 1)).is_err());
        // 167 three-byte characters are 501 bytes.
        assert!(AuditReason::parse(&"退".repeat(167)).is_err());
    }

    #[test]
    fn reported_amounts_may_be_zero_but_not_negative() {
        assert!(ReportedMinor::parse(0).unwrap().is_sparse());
        assert!(!ReportedMinor::parse(1).unwrap().is_sparse());
        assert!(ReportedMinor::parse(-1).is_err());
        assert!(serde_json::from_str::<ReportedMinor>("1.0").is_err());
    }
}
