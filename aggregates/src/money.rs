//! Money and identifier newtypes: parse, don't validate. A value that exists is valid.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

/// Why an input could not become a domain value. `rule` is stable text for clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule}")]
pub struct ParseError {
    pub rule: String,
}

impl ParseError {
    /// A refusal naming the rule the value broke.
    pub fn new(rule: impl Into<String>) -> Self {
        Self { rule: rule.into() }
    }
}

/// A strictly positive amount in minor units (R-INV-4: integers only, never floats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct AmountMinor(i64);

impl AmountMinor {
    pub fn parse(value: i64) -> Result<Self, ParseError> {
        if value <= 0 {
            return Err(ParseError::new(
                "must be a positive integer number of minor units",
            ));
        }
        Ok(Self(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for AmountMinor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = AmountMinor;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a positive integer number of minor units within i64")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<AmountMinor, E> {
                AmountMinor::parse(v).map_err(|e| E::custom(e.rule))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<AmountMinor, E> {
                let v = i64::try_from(v)
                    .map_err(|_| E::custom("must fit in a signed 64-bit integer"))?;
                self.visit_i64(v)
            }
        }
        // deserialize_i64 makes serde_json refuse floats and strings with a type error.
        deserializer.deserialize_i64(Visitor)
    }
}

/// An ISO 4217 alphabetic currency code: three upper-case ASCII letters.
///
/// Requests may only name a circulating currency ([`Currency::parse`], and
/// [`iso_currency`] on every command field); stored events are read back by shape only
/// ([`Currency::from_stored`], which `Deserialize` uses), because events are kept
/// forever and were written before the list was enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency([u8; 3]);

/// The ledger's minor-unit digits of currency `code`: how many decimal places one
/// `i64` minor unit sits below the major unit. This is the one table every adapter
/// converts a provider's major-unit amounts with (`1250.50` MYR is 125050 minor).
///
/// ISO 4217 List One's exponent (2 unless listed below), **except the rupiah**: ISO
/// lists IDR with 2 digits, but the sen is not in use; Xendit refuses IDR fractions,
/// TikTok Shop and Shopee write whole rupiah, and seed 003's amounts are whole rupiah.
/// So the ledger counts IDR in whole rupiah (0 digits): 1 minor unit is Rp 1, and a
/// provider amount with sen is refused, never rounded.
pub fn minor_digits(code: &str) -> u32 {
    match code {
        "IDR" => 0,
        "BIF" | "CLP" | "DJF" | "GNF" | "ISK" | "JPY" | "KMF" | "KRW" | "PYG" | "RWF" | "UGX"
        | "UYI" | "VND" | "VUV" | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "IQD" | "JOD" | "KWD" | "LYD" | "OMR" | "TND" => 3,
        _ => 2,
    }
}

impl Currency {
    /// [`minor_digits`] of this currency.
    pub fn minor_digits(&self) -> u32 {
        minor_digits(self.as_str())
    }

    /// A currency from outside: an active ISO 4217 code of a circulating currency
    /// (see `crate::iso4217` for what is left out and why).
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        let c = Self::from_stored(s)?;
        if !crate::iso4217::is_circulating(s) {
            return Err(ParseError::new(format!(
                "{s} is not a circulating ISO 4217 currency (test, fund and metal codes \
                 such as XXX, XTS or XAU are refused), e.g. IDR"
            )));
        }
        Ok(c)
    }

    /// A currency read back from stored data: three upper-case letters, any code.
    pub fn from_stored(s: &str) -> Result<Self, ParseError> {
        let b = s.as_bytes();
        if b.len() != 3 || !b.iter().all(u8::is_ascii_uppercase) {
            return Err(ParseError::new(
                "must be a three-letter upper-case ISO 4217 code, e.g. IDR",
            ));
        }
        Ok(Self([b[0], b[1], b[2]]))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII upper-case letters are ever stored (see `from_stored`).
        std::str::from_utf8(&self.0).unwrap_or("???")
    }
}

/// `#[serde(deserialize_with = "iso_currency")]` for a command's currency: only
/// circulating ISO 4217 codes ([`Currency::parse`]).
pub fn iso_currency<'de, D: Deserializer<'de>>(d: D) -> Result<Currency, D::Error> {
    let s = String::deserialize(d)?;
    Currency::parse(&s).map_err(|e| serde::de::Error::custom(e.rule))
}

/// [`iso_currency`] for an optional field (use with `#[serde(default)]`).
pub fn iso_currency_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Currency>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| Currency::parse(&s).map_err(|e| serde::de::Error::custom(e.rule)))
        .transpose()
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Currency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Currency::from_stored(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

impl Default for Currency {
    /// Only used by `Default` of an unopened aggregate; never reaches a ledger entry.
    fn default() -> Self {
        Self(*b"XXX")
    }
}

/// Longest identifier accepted anywhere (ids are stored in VARCHAR(128) columns).
pub const ID_LEN_MAX: usize = 128;

/// An identifier from the outside world (wallet id, user id, ref id, ...): 1..=128
/// characters of `[A-Za-z0-9_.:@-]`, so it is safe in URLs, logs and keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(transparent)]
pub struct BoundedId(String);

impl BoundedId {
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.is_empty() || s.len() > ID_LEN_MAX {
            return Err(ParseError::new(format!(
                "must be 1 to {ID_LEN_MAX} characters long"
            )));
        }
        let ok = s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'@'));
        if !ok {
            return Err(ParseError::new(
                "may contain only letters, digits and _ - . : @",
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BoundedId {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for BoundedId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        BoundedId::parse(&s).map_err(|e| serde::de::Error::custom(e.rule))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_must_be_positive_integers() {
        assert!(AmountMinor::parse(0).is_err());
        assert!(AmountMinor::parse(-5).is_err());
        assert_eq!(AmountMinor::parse(1500).unwrap().get(), 1500);
        assert!(serde_json::from_str::<AmountMinor>("1.5").is_err());
        assert!(serde_json::from_str::<AmountMinor>("\"15\"").is_err());
        assert!(serde_json::from_str::<AmountMinor>("9223372036854775808").is_err());
        assert_eq!(
            serde_json::from_str::<AmountMinor>("9223372036854775807")
                .unwrap()
                .get(),
            i64::MAX
        );
    }

    #[test]
    fn currencies_are_three_upper_case_letters() {
        assert_eq!(Currency::parse("IDR").unwrap().as_str(), "IDR");
        // The ledger's minor units: whole rupiah, ISO elsewhere.
        for (code, digits) in [
            ("IDR", 0),
            ("PHP", 2),
            ("JPY", 0),
            ("VND", 0),
            ("KWD", 3),
            ("CNY", 2),
        ] {
            assert_eq!(
                Currency::parse(code).unwrap().minor_digits(),
                digits,
                "{code}"
            );
        }
        for bad in ["idr", "ID", "IDRX", "1DR", ""] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
            assert!(Currency::from_stored(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn currency_zzz_is_refused_from_requests_but_stored_codes_stay_readable() {
        for code in ["ZZZ", "XXX", "XTS"] {
            let e = Currency::parse(code).unwrap_err();
            assert!(e.rule.contains("ISO 4217"), "{e}");
            let json = format!("\"{code}\"");
            assert!(iso_currency(&mut serde_json::Deserializer::from_str(&json)).is_err());
            // An event written before the list was enforced still loads.
            let stored: Currency = serde_json::from_str(&json).unwrap();
            assert_eq!(stored.as_str(), code);
        }
    }

    #[test]
    fn ids_are_bounded_in_length_and_charset() {
        assert!(BoundedId::parse("u-1").is_ok());
        assert!(BoundedId::parse("").is_err());
        assert!(BoundedId::parse(&"a".repeat(129)).is_err());
        assert!(BoundedId::parse("a b").is_err());
        assert!(BoundedId::parse("a/b").is_err());
    }
}
