//! Ledger partitions (R-SCALE-1): one deployment may serve several countries / data
//! centres, each a partition with its own database, global order, hash chain,
//! anchors, workers and API keys (seed 003 §15: no cross-centre transaction).
//!
//! **Routing rule.** A request names its partition by the path prefix
//! `/partitions/<CODE>/…` (what a provider's callback URL carries) or by the
//! `Ledger-Partition: <CODE>` header; a deployment of one partition needs neither.
//! The code is the ISO 3166-1 alpha-2 country of the entity the request is about:
//! the wallet's owner, the order's `country`, the withdrawal's wallet, the station.
//! A stream therefore lives in exactly one partition: its identity is
//! `(partition, aggregate_type, aggregate_id)`, and nothing reads or writes across two.
//!
//! Where a request itself states a country (an order's `country`, a rule set or
//! campaign id `<PLATFORM>:<COUNTRY>`), a partitioned deployment checks it against
//! the partition the request was routed to ([`ServiceConfig::own_countries`]): a
//! request whose entities all belong elsewhere is refused `WRONG_PARTITION`, one whose
//! entities span partitions `CROSS_PARTITION`, both 422 with the offending field and
//! nothing written. The dispatch itself is the composition root's
//! (`server::partitions`).

use super::{Problem, ServiceConfig};
use axum::http::HeaderName;

/// The header that names a request's partition.
pub static PARTITION_HEADER: HeaderName = HeaderName::from_static("ledger-partition");
/// The header as problems name it (`field`).
pub const PARTITION_FIELD: &str = "Ledger-Partition";
/// The path prefix that names a request's partition: `/partitions/<CODE>/v1/…`.
pub const PARTITION_PATH_PREFIX: &str = "/partitions/";

/// Parse a partition code: an ISO 3166-1 alpha-2 country, two ASCII letters
/// (upper-cased). The error says the rule.
pub fn parse_partition_code(raw: &str) -> Result<String, String> {
    let code = raw.trim();
    if code.len() == 2 && code.bytes().all(|b| b.is_ascii_alphabetic()) {
        Ok(code.to_ascii_uppercase())
    } else {
        Err(format!(
            "a partition code is an ISO 3166-1 alpha-2 country (two letters, e.g. ID), not {code:?}"
        ))
    }
}

/// The country part of a `<PLATFORM>:<COUNTRY>` id (rule sets, campaigns).
pub fn country_of_pair_id(id: &str) -> Option<&str> {
    id.rsplit_once(':').map(|(_, country)| country)
}

impl ServiceConfig {
    /// Check the countries a request states (`(field, country)` pairs) against the
    /// partition it was routed to. A deployment of one, unpartitioned ledger accepts
    /// every country (R-INV-11: `country_code` only describes the data).
    pub fn own_countries<'a>(
        &self,
        stated: impl IntoIterator<Item = (String, &'a str)>,
    ) -> Result<(), Problem> {
        if !self.partitioned {
            return Ok(());
        }
        let here = self.country_code.as_str();
        let mut foreign: Option<(String, String)> = None;
        let mut own_seen = false;
        let mut others = std::collections::BTreeSet::new();
        for (field, country) in stated {
            let country = country.trim().to_ascii_uppercase();
            if country == here {
                own_seen = true;
                continue;
            }
            others.insert(country.clone());
            foreign.get_or_insert((field, country));
        }
        let Some((field, country)) = foreign else {
            return Ok(());
        };
        if own_seen || others.len() > 1 {
            let mut all: Vec<String> = others.into_iter().collect();
            if own_seen {
                all.push(here.to_owned());
            }
            all.sort();
            return Err(Problem::invalid(
                "CROSS_PARTITION",
                &field,
                format!(
                    "this request spans the partitions {}; a request writes to one \
                     partition only (no cross-partition unit): split it by country",
                    all.join(", ")
                ),
            ));
        }
        Err(Problem::invalid(
            "WRONG_PARTITION",
            &field,
            format!(
                "{field} is {country}, which belongs to partition {country}; this request \
                 was routed to partition {here}: send it with `Ledger-Partition: {country}` \
                 or under /partitions/{country}/"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(partitioned: bool) -> ServiceConfig {
        ServiceConfig {
            country_code: "ID".into(),
            partitioned,
            anchor_file: None,
        }
    }

    #[test]
    fn codes_are_two_letters() {
        assert_eq!(parse_partition_code(" th ").unwrap(), "TH");
        for bad in ["", "T", "THA", "T1", "é!"] {
            assert!(parse_partition_code(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unpartitioned_ledger_takes_every_country() {
        let stated = [("orders[0].country".to_owned(), "TH")];
        assert!(config(false).own_countries(stated).is_ok());
    }

    #[test]
    fn own_foreign_and_mixed_countries() {
        let c = config(true);
        assert!(c
            .own_countries([("a".to_owned(), "id"), ("b".to_owned(), "ID")])
            .is_ok());
        let wrong = c
            .own_countries([("orders[0].country".to_owned(), "TH")])
            .unwrap_err();
        assert_eq!(wrong.code, "WRONG_PARTITION");
        assert_eq!(wrong.field.as_deref(), Some("orders[0].country"));
        let mixed = c
            .own_countries([
                ("orders[0].country".to_owned(), "ID"),
                ("orders[1].country".to_owned(), "TH"),
            ])
            .unwrap_err();
        assert_eq!(mixed.code, "CROSS_PARTITION");
        assert_eq!(mixed.field.as_deref(), Some("orders[1].country"));
        assert!(mixed.detail.contains("ID, TH"), "{}", mixed.detail);
        let two_foreign = c
            .own_countries([("x".to_owned(), "TH"), ("y".to_owned(), "VN")])
            .unwrap_err();
        assert_eq!(two_foreign.code, "CROSS_PARTITION");
    }
}
