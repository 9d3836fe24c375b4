//! Money on the platforms' wire: decimal strings in the currency's major unit
//! (TikTok Shop's `{"amount": "1250.50", "currency": "MYR"}`, Shopee's
//! `"itemTotalCommission": "62.53"`), converted exactly to `i64` minor units by the
//! currency's ISO 4217 exponent. No floats anywhere (R-INV-4): the string is split at
//! its point and scaled with checked integer arithmetic.

/// The ledger's minor-unit digits of `code` (`factledger_aggregates::money::
/// minor_digits`: ISO 4217's, whole rupiah for IDR).
pub fn exponent(code: &str) -> u32 {
    factledger_aggregates::money::minor_digits(code)
}

/// Longest amount string read: 19 digits overflow `i64` anyway; a longer one is not
/// an amount.
const AMOUNT_CHARS_MAX: usize = 32;

/// `"1250.5"` in a currency of exponent 2 → `125050`. Refused: a sign, an exponent,
/// separators or symbols (`"Rp9.900"`, `"1,000"`), more fractional digits than the
/// currency has (unless they are zeros: `"10.500"` in MYR is `1050`), overflow.
pub fn to_minor(text: &str, exponent: u32) -> Result<i64, String> {
    let bad = |why: &str| format!("{text:?} is not a plain decimal amount: {why}");
    if text.is_empty() || text.len() > AMOUNT_CHARS_MAX {
        return Err(bad("empty or too long"));
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("digits expected before the point"));
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) || (text.ends_with('.')) {
        return Err(bad("digits expected after the point"));
    }
    let places = usize::try_from(exponent).unwrap_or(usize::MAX);
    let (kept, dropped) = fraction.split_at(fraction.len().min(places));
    if dropped.bytes().any(|b| b != b'0') {
        return Err(bad(&format!("more than {exponent} decimal places")));
    }
    let overflow = || bad("too large");
    let mut minor: i64 = 0;
    for b in whole.bytes().chain(kept.bytes()) {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(i64::from(b - b'0')))
            .ok_or_else(overflow)?;
    }
    for _ in kept.len()..places {
        minor = minor.checked_mul(10).ok_or_else(overflow)?;
    }
    Ok(minor)
}

/// The inverse, for the simulator and for tests: `125050` at exponent 2 → `"1250.50"`.
pub fn from_minor(minor: i64, exponent: u32) -> String {
    let digits = minor.unsigned_abs().to_string();
    let sign = if minor < 0 { "-" } else { "" };
    let places = usize::try_from(exponent).unwrap_or(0);
    if places == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = places + 1);
    let (whole, fraction) = padded.split_at(padded.len() - places);
    format!("{sign}{whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_strings_become_exact_minor_units_by_the_currency_exponent() {
        let cases = [
            ("1250.50", "MYR", 125_050),
            ("1250.5", "MYR", 125_050),
            ("1250", "MYR", 125_000),
            ("10.500", "MYR", 1_050),
            ("9900", "IDR", 9_900),
            ("9900.00", "IDR", 9_900),
            ("20000", "VND", 20_000),
            ("20000.00", "VND", 20_000),
            ("1.234", "KWD", 1_234),
            ("0.01", "USD", 1),
            ("0", "MYR", 0),
        ];
        for (text, currency, minor) in cases {
            assert_eq!(
                to_minor(text, exponent(currency)),
                Ok(minor),
                "{text} {currency}"
            );
        }
    }

    #[test]
    fn anything_but_a_plain_decimal_is_refused_never_rounded() {
        for text in [
            "",
            "Rp9.900",
            "1,000",
            "-5",
            "+5",
            "1e3",
            "12.345",
            "1.",
            ".5",
            "0x10",
            "99999999999999999999",
            " 5",
        ] {
            assert!(to_minor(text, 2).is_err(), "{text}");
        }
        assert!(to_minor("1.5", 0).is_err(), "VND has no minor digits");
        assert!(
            to_minor("9900.50", exponent("IDR")).is_err(),
            "whole rupiah"
        );
    }

    #[test]
    fn minor_units_format_back_with_the_exponents_places() {
        assert_eq!(from_minor(5, 2), "0.05");
        assert_eq!(from_minor(125_000, 2), "1250.00");
        assert_eq!(from_minor(7, 0), "7");
        assert_eq!(from_minor(1_234, 3), "1.234");
        for minor in [0, 1, 99, 100, 125_050, i64::MAX] {
            assert_eq!(to_minor(&from_minor(minor, 2), 2), Ok(minor), "{minor}");
        }
    }
}
