//! The currencies a request may name: ISO 4217's current list of circulating
//! currencies (List One, 2025), alphabetic codes, sorted for a binary search.
//!
//! Left out on purpose, though ISO lists them: the codes that are not money a wallet
//! can hold — `XXX` (no currency), `XTS` (reserved for testing), precious metals
//! (`XAU`, `XAG`, `XPD`, `XPT`), the SDR and bond-market units (`XDR`, `XSU`, `XUA`,
//! `XBA`…`XBD`) — and the fund codes (`BOV`, `CHE`, `CHW`, `CLF`, `COU`, `MXV`, `USN`,
//! `UYI`, `UYW`). Codes ISO has withdrawn (`HRK`, `SLL`, `CUC`, …) are refused for new
//! data; events stored with any three-letter code stay readable (see
//! `Currency::from_stored`). No seed needs a test code (SPEC, seeds 000/001/003).

/// Sorted; checked by `iso_list_is_sorted_and_unique`.
pub(crate) const CIRCULATING: [&str; 158] = [
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
    "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD",
    "CDF", "CHF", "CLP", "CNY", "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD",
    "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ",
    "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD", "JOD",
    "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR",
    "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR",
    "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN",
    "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR",
    "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB",
    "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS",
    "VED", "VES", "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW",
    "ZWG", "ZWL",
];

/// Whether `code` is in [`CIRCULATING`].
pub(crate) fn is_circulating(code: &str) -> bool {
    CIRCULATING.binary_search(&code).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_list_is_sorted_and_unique() {
        assert!(CIRCULATING.windows(2).all(|w| w[0] < w[1]));
        assert!(CIRCULATING
            .iter()
            .all(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase())));
    }

    #[test]
    fn the_seed_currencies_are_listed_and_test_codes_are_not() {
        for ok in [
            "IDR", "MYR", "THB", "VND", "PHP", "SGD", "USD", "EUR", "XOF",
        ] {
            assert!(is_circulating(ok), "{ok}");
        }
        for bad in [
            "ZZZ", "XXX", "XTS", "XAU", "XDR", "CHE", "USN", "HRK", "ABC",
        ] {
            assert!(!is_circulating(bad), "{bad}");
        }
    }
}
