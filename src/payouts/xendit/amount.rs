//! Amounts on Xendit's wire: a JSON **number in the currency's major unit** (docs,
//! Create Payout: "For IDR currency, number should be integer; for PHP currency,
//! number can be up to 2 decimal places"; VND integer; MYR and THB 2 places).
//! Inside the ledger an amount is `i64` minor units; this module converts exactly,
//! by decimal text, never through a float: 12345 minor PHP is written `123.45`, and
//! `123.45` read back is 12345.
//!
//! The digits per currency are Xendit's, which for the rupiah differ from ISO 4217
//! (ISO lists IDR with 2 minor digits; the rupiah has no circulating minor unit,
//! factledger counts IDR in whole rupiah and Xendit refuses fractions). A currency
//! Xendit does not pay out in has no entry, and a payout in it is refused before
//! any call.

/// The currencies Xendit's Payouts API pays out in.
const PAID_OUT: [&str; 6] = ["IDR", "MYR", "PHP", "THB", "USD", "VND"];

/// Digits after the point `currency` is written with, if Xendit pays out in it: the
/// ledger's own minor digits (`factledger_aggregates::money::minor_digits`), which
/// are Xendit's for every currency it pays out in (a test holds them to the docs).
pub fn digits(currency: &str) -> Option<u32> {
    PAID_OUT
        .contains(&currency)
        .then(|| factledger_aggregates::money::minor_digits(currency))
}

/// `amount_minor` as the decimal text of a JSON number in the major unit:
/// `to_major(12345, 2) == "123.45"`, `to_major(5, 2) == "0.05"`,
/// `to_major(250000, 0) == "250000"`. Negative amounts keep their sign.
pub fn to_major(amount_minor: i64, digits: u32) -> String {
    let sign = if amount_minor < 0 { "-" } else { "" };
    let magnitude = amount_minor.unsigned_abs().to_string();
    let d = digits as usize;
    if d == 0 {
        return format!("{sign}{magnitude}");
    }
    let padded = format!("{magnitude:0>width$}", width = d + 1);
    let (whole, fraction) = padded.split_at(padded.len() - d);
    format!("{sign}{whole}.{fraction}")
}

/// The JSON number `text` (as written on the wire) in minor units of a currency
/// with `digits`. Exact: a number with more non-zero decimals than the currency has
/// (`1.005` PHP), an exponent (`1e3`), or one past `i64` is refused, never rounded.
/// Trailing zeros past the digits carry no value and are accepted (`10000.0` IDR).
pub fn from_major(text: &str, digits: u32) -> Result<i64, String> {
    let t = text.trim();
    let (negative, unsigned) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || (unsigned.contains('.') && fraction.is_empty())
    {
        return Err(format!("amount {t} is not a plain decimal number"));
    }
    let d = digits as usize;
    let (kept, extra) = fraction.split_at(fraction.len().min(d));
    if extra.bytes().any(|b| b != b'0') {
        return Err(format!(
            "amount {t} has more than {digits} decimals for its currency"
        ));
    }
    let scaled = format!("{whole}{kept:0<d$}");
    let magnitude: i64 = scaled
        .parse()
        .map_err(|_| format!("amount {t} is out of range"))?;
    Ok(if negative { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_s_minor_digits_are_xendit_s_documented_wire_digits() {
        // Create Payout: "For IDR currency, number should be integer; for PHP currency,
        // number can be up to 2 decimal places"; VND integer; MYR, THB, USD 2 places.
        for (currency, wire) in [
            ("IDR", 0),
            ("PHP", 2),
            ("VND", 0),
            ("MYR", 2),
            ("THB", 2),
            ("USD", 2),
        ] {
            assert_eq!(digits(currency), Some(wire), "{currency}");
        }
        assert_eq!(digits("CNY"), None);
    }

    #[test]
    fn minor_units_are_written_in_the_major_unit_per_currency() {
        let php = digits("PHP").unwrap();
        let idr = digits("IDR").unwrap();
        assert_eq!(to_major(12_345, php), "123.45");
        assert_eq!(to_major(5, php), "0.05");
        assert_eq!(to_major(100, php), "1.00");
        assert_eq!(to_major(111, php), "1.11"); // Xendit's own PHP example amount
        assert_eq!(to_major(250_000, idr), "250000");
        assert_eq!(to_major(-7, php), "-0.07");
        assert_eq!(to_major(i64::MAX, php), "92233720368547758.07");
        assert_eq!(digits("EUR"), None);
    }

    #[test]
    fn major_numbers_are_read_back_exactly_or_refused() {
        let php = digits("PHP").unwrap();
        let idr = digits("IDR").unwrap();
        assert_eq!(from_major("123.45", php), Ok(12_345));
        assert_eq!(from_major("1.1", php), Ok(110));
        assert_eq!(from_major("10000", php), Ok(1_000_000));
        assert_eq!(from_major("10000", idr), Ok(10_000));
        assert_eq!(from_major("10000.0", idr), Ok(10_000));
        assert_eq!(from_major("0.05", php), Ok(5));
        for bad in [
            "1.005", "1e3", "1.", ".5", "", "-", "abc", "1,00", "+1", "1.2.3",
        ] {
            assert!(from_major(bad, php).is_err(), "{bad}");
        }
        assert!(from_major("100.5", idr).is_err());
        assert!(from_major("99999999999999999999", idr).is_err());
        for minor in [0, 1, 99, 100, 12_345, 999_999_999_999] {
            assert_eq!(from_major(&to_major(minor, php), php), Ok(minor));
            assert_eq!(from_major(&to_major(minor, idr), idr), Ok(minor));
        }
    }
}
