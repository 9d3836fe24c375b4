//! R-BILL-8, table-driven: one row per parsing and limit rule (accepted rows show the
//! business key, refused rows the error naming the field), then the key, the task code,
//! the resubmit merge, the mode, and one row per resolution rule.

use super::*;
use crate::bill::{PaymentStatus, StationMonth, YearMonth};
use factledger_aggregates::bill::TriggerSource;

fn sm(s: &str) -> StationMonth {
    StationMonth::parse(s).unwrap()
}

fn ym(s: &str) -> YearMonth {
    YearMonth::parse(s).unwrap()
}

fn parsed(json: &str) -> RefreshRequest {
    RefreshRequest::parse(json).unwrap_or_else(|e| panic!("refused: {e}\n{json}"))
}

fn ids_json(ids: impl IntoIterator<Item = i64>) -> String {
    let ids: Vec<String> = ids.into_iter().map(|i| i.to_string()).collect();
    format!("[{}]", ids.join(","))
}

/// An accepted request and the business key it must produce.
struct KeyRow {
    name: &'static str,
    json: String,
    key: &'static str,
}

fn key_rows() -> Vec<KeyRow> {
    let row = |name, json: &str, key| KeyRow {
        name,
        json: json.to_owned(),
        key,
    };
    vec![
        row(
            "seed example: one station-month, mode defaults to ALL",
            r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":100,"bill_month":"202609"}]}"#,
            "STATION_MONTH:100:202609|MODE=ALL",
        ),
        row(
            "seed example: diffs are sorted and deduplicated",
            r#"{"scope_type":"DIFF","diff_ids":[10002,10001,10002]}"#,
            "DIFF:10001,10002|MODE=ALL",
        ),
        row(
            "seed example: an order bill in UNFINISHED mode",
            r#"{"scope_type":"ORDER_BILL","order_bill_ids":[20001],"mode":"UNFINISHED"}"#,
            "ORDER_BILL:20001|MODE=UNFINISHED",
        ),
        row(
            "seed example: an account scope with both sides",
            r#"{"scope_type":"ACCOUNT_SCOPE","small_account_ids":[101],"partner_account_ids":[201],"month_end":"202609"}"#,
            "ACCOUNT_SCOPE:SMALL=101|PARTNER=201|MONTH_END=202609|MODE=ALL",
        ),
        row(
            "scope_type may be given as its code",
            r#"{"scope_type":10,"station_months":[{"station_id":100,"bill_month":"202609"}]}"#,
            "STATION_MONTH:100:202609|MODE=ALL",
        ),
        row(
            "partner bills key like diffs",
            r#"{"scope_type":20,"partner_bill_ids":[30002,30001]}"#,
            "PARTNER_BILL:30001,30002|MODE=ALL",
        ),
        row(
            "station-months sort by station then month",
            r#"{"scope_type":"STATION_MONTH","station_months":[
                {"station_id":200,"bill_month":"202601"},
                {"station_id":100,"bill_month":"202610"},
                {"station_id":100,"bill_month":"202609"}]}"#,
            "STATION_MONTH:100:202609,100:202610,200:202601|MODE=ALL",
        ),
        row(
            "locators and trigger sources are not part of the key (seed §9.6)",
            r#"{"scope_type":"STATION_MONTH","station_months":[
                {"station_id":100,"bill_month":"202609","diff_id":41},
                {"station_id":100,"bill_month":"202609","partner_bill_id":21}],
               "trigger_sources":["PAYMENT_IMPORT_EFFECTIVE"]}"#,
            "STATION_MONTH:100:202609|MODE=ALL",
        ),
        row(
            "an account scope with the partner side only omits SMALL",
            r#"{"scope_type":50,"partner_account_ids":[202,201,202],"month_end":"202609","mode":"UNFINISHED"}"#,
            "ACCOUNT_SCOPE:PARTNER=201,202|MONTH_END=202609|MODE=UNFINISHED",
        ),
        row(
            "an account scope with the small side only omits PARTNER",
            r#"{"scope_type":50,"small_account_ids":[101],"partner_account_ids":[],"month_end":"202512"}"#,
            "ACCOUNT_SCOPE:SMALL=101|MONTH_END=202512|MODE=ALL",
        ),
    ]
}

#[test]
fn accepted_requests_produce_the_business_key_in_the_seed_format() {
    for r in key_rows() {
        let req =
            RefreshRequest::parse(&r.json).unwrap_or_else(|e| panic!("{}: refused: {e}", r.name));
        assert_eq!(req.business_key().as_str(), r.key, "{}", r.name);
    }
}

/// A refused request and a check of the error: the field it names and the rule.
struct ErrorRow {
    name: &'static str,
    json: String,
    expect: fn(&RefreshRequestError) -> bool,
}

fn padded(json: &str, bytes: usize) -> String {
    let mut s = json.to_owned();
    while s.len() < bytes {
        s.push(' ');
    }
    s
}

fn error_rows() -> Vec<ErrorRow> {
    use RefreshRequestError as E;
    let row = |name, json: String, expect| ErrorRow { name, json, expect };
    let sm_list = |n: usize| {
        let one = r#"{"station_id":100,"bill_month":"202609"}"#;
        format!(
            r#"{{"scope_type":"STATION_MONTH","station_months":[{}]}}"#,
            vec![one; n].join(",")
        )
    };
    vec![
        // Size, in UTF-8 bytes.
        row(
            "one byte over 16,384 is refused",
            padded(r#"{"scope_type":"DIFF","diff_ids":[1]}"#, 16_385),
            |e| matches!(e, E::TooManyBytes { bytes: 16_385, max: 16_384 }),
        ),
        row(
            "the size counts UTF-8 bytes, not characters: 8,200 'é' are 16,400 bytes",
            format!(
                r#"{{"scope_type":"DIFF","diff_ids":[1],"mode":"{}"}}"#,
                "é".repeat(8_200)
            ),
            |e| matches!(e, E::TooManyBytes { .. }),
        ),
        // JSON nodes.
        row(
            "1,201 nodes are refused even though the ids are one distinct scope",
            format!(
                r#"{{"scope_type":"DIFF","diff_ids":{}}}"#,
                ids_json(vec![1; 1_198])
            ),
            |e| matches!(e, E::TooManyNodes { nodes: 1_201, max: 1_200 }),
        ),
        // Scope counts, per type.
        row(
            "201 distinct diff ids are refused",
            format!(r#"{{"scope_type":"DIFF","diff_ids":{}}}"#, ids_json(1..=201)),
            |e| {
                matches!(e, E::TooManyScopes { field: "diff_ids", count: 201, counted_as: "distinct ids", .. })
            },
        ),
        row(
            "201 copies of one station-month are refused: the list length counts",
            sm_list(201),
            |e| {
                matches!(e, E::TooManyScopes { field: "station_months", count: 201, counted_as: "list length", .. })
            },
        ),
        row(
            "150 small + 51 partner accounts are refused: both sides count",
            format!(
                r#"{{"scope_type":"ACCOUNT_SCOPE","small_account_ids":{},"partner_account_ids":{},"month_end":"202609"}}"#,
                ids_json(1..=150),
                ids_json(1..=51)
            ),
            |e| matches!(e, E::TooManyScopes { count: 201, counted_as: "small + partner account ids", .. }),
        ),
        // JSON shape.
        row("not JSON", "{".into(), |e| matches!(e, E::Json { .. })),
        row(
            "an unknown field is refused, not ignored",
            r#"{"scope_type":"DIFF","diff_ids":[1],"difids":[2]}"#.into(),
            |e| matches!(e, E::Json { message } if message.contains("difids")),
        ),
        row(
            "an unknown scope type",
            r#"{"scope_type":60,"diff_ids":[1]}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "scope_type"),
        ),
        row(
            "the scope type's list is required",
            r#"{"scope_type":"DIFF"}"#.into(),
            |e| matches!(e, E::MissingField { field, scope_type: ScopeType::Diff } if field == "diff_ids"),
        ),
        row(
            "another type's list is refused",
            r#"{"scope_type":"DIFF","diff_ids":[1],"order_bill_ids":[2]}"#.into(),
            |e| matches!(e, E::FieldNotAllowed { field: "order_bill_ids", scope_type: ScopeType::Diff }),
        ),
        row(
            "an empty list",
            r#"{"scope_type":"ORDER_BILL","order_bill_ids":[]}"#.into(),
            |e| matches!(e, E::EmptyScope { field: "order_bill_ids" }),
        ),
        row(
            "a non-positive id names its position",
            r#"{"scope_type":"DIFF","diff_ids":[1,0]}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "diff_ids[1]"),
        ),
        // Station-month scopes.
        row(
            "a station-month needs a station",
            r#"{"scope_type":"STATION_MONTH","station_months":[{"bill_month":"202609"}]}"#.into(),
            |e| matches!(e, E::MissingField { field, .. } if field == "station_months[0].station_id"),
        ),
        row(
            "station 0 is no station",
            r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":0,"bill_month":"202609"}]}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "station_months[0].station_id"),
        ),
        row(
            "a station-month needs a legal month",
            r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":1,"bill_month":"202609"},{"station_id":1,"bill_month":"202613"}]}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "station_months[1].bill_month"),
        ),
        row(
            "a locator id must be positive",
            r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":1,"bill_month":"202609","diff_id":-4}]}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "station_months[0].diff_id"),
        ),
        // Account scopes.
        row(
            "an account scope needs month_end",
            r#"{"scope_type":"ACCOUNT_SCOPE","small_account_ids":[101]}"#.into(),
            |e| matches!(e, E::MissingField { field, .. } if field == "month_end"),
        ),
        row(
            "month_end must be a legal month",
            r#"{"scope_type":"ACCOUNT_SCOPE","small_account_ids":[101],"month_end":"2026-09"}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "month_end"),
        ),
        row(
            "an account scope needs at least one side",
            r#"{"scope_type":"ACCOUNT_SCOPE","small_account_ids":[],"month_end":"202609"}"#.into(),
            |e| matches!(e, E::NoAccountSide),
        ),
        row(
            "month_end belongs to the account scope only",
            r#"{"scope_type":"DIFF","diff_ids":[1],"month_end":"202609"}"#.into(),
            |e| matches!(e, E::FieldNotAllowed { field: "month_end", .. }),
        ),
        // Mode and trigger sources.
        row(
            "mode is ALL or UNFINISHED",
            r#"{"scope_type":"DIFF","diff_ids":[1],"mode":"PAID"}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "mode"),
        ),
        row(
            "a trigger source outside the event contract",
            r#"{"scope_type":"DIFF","diff_ids":[1],"trigger_sources":["MANUAL","PARTNER_DIFF_COMMITTED"]}"#.into(),
            |e| matches!(e, E::InvalidField { field, .. } if field == "trigger_sources[1]"),
        ),
    ]
}

#[test]
fn refused_requests_name_the_field_and_the_rule() {
    for r in error_rows() {
        match RefreshRequest::parse(&r.json) {
            Ok(req) => panic!("{}: accepted as {}", r.name, req.business_key()),
            Err(e) => assert!((r.expect)(&e), "{}: wrong error {e:?}", r.name),
        }
    }
}

#[test]
fn the_limits_admit_requests_exactly_at_the_edge() {
    let at_bytes = padded(r#"{"scope_type":"DIFF","diff_ids":[1]}"#, 16_384);
    assert_eq!(parsed(&at_bytes).business_key().as_str(), "DIFF:1|MODE=ALL");
    // 1 object + scope_type + array + 1,197 ids = 1,200 nodes; one distinct scope.
    let at_nodes = format!(
        r#"{{"scope_type":"DIFF","diff_ids":{}}}"#,
        ids_json(vec![7; 1_197])
    );
    assert_eq!(parsed(&at_nodes).scope().count(), 1);
    let at_scopes = format!(
        r#"{{"scope_type":"DIFF","diff_ids":{}}}"#,
        ids_json(1..=200)
    );
    assert_eq!(parsed(&at_scopes).scope().count(), 200);
    let accounts = format!(
        r#"{{"scope_type":"ACCOUNT_SCOPE","small_account_ids":{},"partner_account_ids":{},"month_end":"202609"}}"#,
        ids_json(1..=100),
        ids_json(1..=100)
    );
    assert_eq!(parsed(&accounts).scope().count(), 200);
}

#[test]
fn only_oversize_errors_are_oversize() {
    let oversize = RefreshRequest::parse(&padded("{}", 20_000)).unwrap_err();
    assert!(oversize.is_oversize());
    let bad = RefreshRequest::parse(r#"{"scope_type":"DIFF"}"#).unwrap_err();
    assert!(!bad.is_oversize());
}

#[test]
fn station_months_dedupe_on_the_locator_too() {
    let req = parsed(
        r#"{"scope_type":"STATION_MONTH","station_months":[
            {"station_id":100,"bill_month":"202609","diff_id":41},
            {"station_id":100,"bill_month":"202609"},
            {"station_id":100,"bill_month":"202609","diff_id":41},
            {"station_id":100,"bill_month":"202609","diff_id":41,"partner_org_id":51},
            {"station_id":100,"bill_month":"202609","partner_bill_id":21},
            {"station_id":100,"bill_month":"202609","partner_account_id":31}]}"#,
    );
    let RefreshScope::StationMonths(list) = req.scope() else {
        panic!("not station-months");
    };
    // Five distinct (station-month, locator) pairs; one station-month in the key.
    assert_eq!(list.as_slice().len(), 5);
    assert_eq!(list.station_months(), vec![sm("100:202609")]);
    assert!(list.as_slice().windows(2).all(|w| w[0] < w[1]));
    assert_eq!(list.as_slice()[0].locator, Locator::NONE);
}

#[test]
fn task_code_is_ripsr_and_the_lowercase_md5_of_the_full_key() {
    let cases = [
        (
            "STATION_MONTH:100:202609|MODE=ALL",
            r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":100,"bill_month":"202609"}]}"#,
            "44e57cf63b96f8555396b6123dd633d6",
        ),
        (
            "DIFF:10001,10002|MODE=ALL",
            r#"{"scope_type":"DIFF","diff_ids":[10001,10002]}"#,
            "6df791eb4c9a7a34d1b47fadad26c0d4",
        ),
        (
            "ORDER_BILL:20001|MODE=UNFINISHED",
            r#"{"scope_type":"ORDER_BILL","order_bill_ids":[20001],"mode":"UNFINISHED"}"#,
            "deaadc85271a12de7dfd3aed57f7adb9",
        ),
        (
            "ACCOUNT_SCOPE:SMALL=101|PARTNER=201|MONTH_END=202609|MODE=ALL",
            r#"{"scope_type":"ACCOUNT_SCOPE","small_account_ids":[101],"partner_account_ids":[201],"month_end":"202609"}"#,
            "c7db3c2bb3a7ee4b09473938ec24d3ef",
        ),
    ];
    for (key, json, md5) in cases {
        let k = parsed(json).business_key();
        assert_eq!(k.as_str(), key);
        assert_eq!(k.task_code(), format!("RIPSR:{md5}"), "{key}");
        assert_eq!(k.stored_key(), key, "short keys are stored as they are");
    }
}

#[test]
fn a_key_over_128_characters_is_stored_as_its_digest_but_coded_from_the_full_key() {
    let base: Vec<i64> = (100_000..100_016).collect();
    let key_of = |extra: i64| {
        let ids = ids_json(base.iter().copied().chain([extra]));
        parsed(&format!(r#"{{"scope_type":"DIFF","diff_ids":{ids}}}"#)).business_key()
    };
    let at_128 = key_of(10);
    assert_eq!(at_128.as_str().chars().count(), 128);
    assert_eq!(at_128.stored_key(), at_128.as_str());
    let at_129 = key_of(100);
    assert_eq!(at_129.as_str().chars().count(), 129);
    assert_eq!(
        at_129.stored_key(),
        "RIPSR_BK:7361fe6caef535175f5d8a3b02f1f90a"
    );
    assert_eq!(at_129.task_code(), "RIPSR:7361fe6caef535175f5d8a3b02f1f90a");
}

#[test]
fn a_claimed_task_must_match_both_its_stored_key_and_its_code() {
    let req = parsed(r#"{"scope_type":"DIFF","diff_ids":[10001,10002]}"#);
    let key = req.business_key();
    assert_eq!(
        req.check_identity(&key.stored_key(), &key.task_code()),
        Ok(())
    );
    let wrong_key = req.check_identity("DIFF:10001|MODE=ALL", &key.task_code());
    assert!(matches!(
        wrong_key,
        Err(RefreshRequestError::IdentityMismatch {
            field: "business_key",
            ..
        })
    ));
    let wrong_code =
        req.check_identity(&key.stored_key(), "RIPSR:00000000000000000000000000000000");
    assert!(matches!(
        wrong_code,
        Err(RefreshRequestError::IdentityMismatch {
            field: "task_code",
            ..
        })
    ));
}

#[test]
fn task_data_round_trips() {
    for r in key_rows() {
        let req = parsed(&r.json);
        assert_eq!(parsed(&req.to_task_data()), req, "{}", r.name);
    }
}

fn station_month_request(locator_json: &str, sources: &str) -> RefreshRequest {
    parsed(&format!(
        r#"{{"scope_type":"STATION_MONTH","station_months":[{{"station_id":100,"bill_month":"202609"{locator_json}}}],"trigger_sources":[{sources}]}}"#
    ))
}

#[test]
fn a_fact_change_resubmit_merges_sources_and_locators_instead_of_overwriting() {
    let first = station_month_request(r#","diff_id":41"#, r#""MANUAL""#);
    let again = station_month_request(r#","partner_bill_id":21"#, r#""PAYMENT_IMPORT_DELETE""#);
    assert!(!first.reconciles_order_status());
    let merged = first.merge_resubmit(&again).unwrap();
    assert_eq!(merged.business_key(), first.business_key());
    assert_eq!(
        merged.trigger_sources().iter().copied().collect::<Vec<_>>(),
        vec![TriggerSource::PaymentImportDelete, TriggerSource::Manual]
    );
    // Reconcile if any merged source is whitelisted.
    assert!(merged.reconciles_order_status());
    assert!(!merged.writes_back_import());
    let RefreshScope::StationMonths(list) = merged.scope() else {
        panic!("not station-months");
    };
    let diff_ids: Vec<_> = list
        .as_slice()
        .iter()
        .map(|s| s.locator.diff_id())
        .collect();
    let bill_ids: Vec<_> = list
        .as_slice()
        .iter()
        .map(|s| s.locator.partner_bill_id())
        .collect();
    assert_eq!(list.as_slice().len(), 2);
    assert!(diff_ids.contains(&Some(41)) && bill_ids.contains(&Some(21)));
    // Merging the same resubmit again changes nothing.
    assert_eq!(merged.merge_resubmit(&again).unwrap(), merged);
}

#[test]
fn a_resubmit_of_another_key_does_not_merge() {
    let a = station_month_request("", "");
    let b = parsed(r#"{"scope_type":"DIFF","diff_ids":[1]}"#);
    assert!(matches!(
        a.merge_resubmit(&b),
        Err(RefreshRequestError::KeyMismatch { .. })
    ));
    let unfinished = parsed(
        r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":100,"bill_month":"202609"}],"mode":"UNFINISHED"}"#,
    );
    assert!(matches!(
        a.merge_resubmit(&unfinished),
        Err(RefreshRequestError::KeyMismatch { .. })
    ));
}

#[test]
fn a_merge_that_outgrows_the_limit_is_refused() {
    let locators = |from: i64| {
        let list: Vec<String> = (from..from + 150)
            .map(|d| format!(r#"{{"station_id":100,"bill_month":"202609","diff_id":{d}}}"#))
            .collect();
        parsed(&format!(
            r#"{{"scope_type":"STATION_MONTH","station_months":[{}]}}"#,
            list.join(",")
        ))
    };
    let merged = locators(1).merge_resubmit(&locators(1_000));
    assert!(
        merged.as_ref().is_err_and(|e| e.is_oversize()),
        "{merged:?}"
    );
}

#[test]
fn fact_change_requests_are_always_mode_all() {
    let scope = parsed(r#"{"scope_type":"DIFF","diff_ids":[1]}"#)
        .scope()
        .clone();
    let req = RefreshRequest::fact_change(scope, [TriggerSource::PaymentImportEffective]);
    assert_eq!(req.mode(), RefreshMode::All);
    assert!(req.writes_back_import() && req.reconciles_order_status());
}

#[test]
fn unfinished_mode_takes_20_30_40_60_70_99_and_never_projected_bills() {
    use PaymentStatus as P;
    let rows = [
        (P::NoPaymentNeeded, false),
        (P::Unpaid, true),
        (P::InReview, true),
        (P::AwaitingPayment, true),
        (P::Paid, false),
        (P::PartiallyPaid, true),
        (P::PaymentFailed, true),
        (P::PartnerBillNotPushed, true),
    ];
    for (status, unfinished) in rows {
        assert_eq!(
            RefreshMode::Unfinished.admits(Some(status)),
            unfinished,
            "{status:?}"
        );
        assert!(RefreshMode::All.admits(Some(status)), "{status:?}");
    }
    assert!(RefreshMode::Unfinished.admits(None));
}

// ---- resolution ----

const PB: i64 = 21;
const PA: i64 = 31;
const ORG: i64 = 51;
const DIFF: i64 = 41;

fn bill() -> PartnerBillRef {
    PartnerBillRef {
        id: PB,
        partner_account_id: PA,
        month: ym("202609"),
    }
}

fn account(platform: Option<i64>) -> PartnerAccountRef {
    PartnerAccountRef {
        id: PA,
        partner_org_id: ORG,
        platform_station_id: platform,
    }
}

fn diff(id: i64, station_month: &str, partner_bill_id: Option<i64>) -> DiffRef {
    DiffRef {
        id,
        station_month: sm(station_month),
        partner_bill_id,
    }
}

fn full(station_month: &str) -> StationMonthScope {
    StationMonthScope {
        station_month: sm(station_month),
        locator: Locator::new("t", Some(ORG), Some(PB), Some(PA), Some(DIFF)).unwrap(),
    }
}

#[test]
fn partner_bill_resolution_rules() {
    use ScopeResolveError as E;
    let one_diff = [diff(DIFF, "100:202609", Some(PB))];
    let rows: Vec<(&str, Result<StationMonthScope, ScopeResolveError>)> = vec![
        (
            "partner bill → account → platform station → its one diff",
            resolve_partner_bill(PB, Some(&bill()), Some(&account(Some(100))), &one_diff),
        ),
        (
            "no partner bill",
            resolve_partner_bill(PB, None, Some(&account(Some(100))), &one_diff),
        ),
        (
            "no partner account",
            resolve_partner_bill(PB, Some(&bill()), None, &one_diff),
        ),
        (
            "the account maps to no platform station",
            resolve_partner_bill(PB, Some(&bill()), Some(&account(None)), &one_diff),
        ),
        (
            "no diff has the partner bill",
            resolve_partner_bill(PB, Some(&bill()), Some(&account(Some(100))), &[]),
        ),
        (
            "two diffs have the partner bill",
            resolve_partner_bill(
                PB,
                Some(&bill()),
                Some(&account(Some(100))),
                &[one_diff[0], diff(42, "100:202609", Some(PB))],
            ),
        ),
        (
            "the diff is of another station",
            resolve_partner_bill(
                PB,
                Some(&bill()),
                Some(&account(Some(100))),
                &[diff(DIFF, "999:202609", Some(PB))],
            ),
        ),
    ];
    let expected: Vec<Result<StationMonthScope, ScopeResolveError>> = vec![
        Ok(full("100:202609")),
        Err(E::PartnerBillNotFound {
            partner_bill_id: PB,
        }),
        Err(E::PartnerAccountNotFound {
            partner_account_id: PA,
        }),
        Err(E::PlatformStationMissing {
            partner_account_id: PA,
        }),
        Err(E::PartnerBillWithoutDiff {
            partner_bill_id: PB,
        }),
        Err(E::PartnerBillWithSeveralDiffs {
            partner_bill_id: PB,
            diff_ids: vec![DIFF, 42],
        }),
        Err(E::LocatorInconsistent {
            fields: "partner_bill_id, diff_id",
            detail: String::new(),
        }),
    ];
    for ((name, got), want) in rows.into_iter().zip(expected) {
        match (&got, &want) {
            (
                Err(E::LocatorInconsistent { fields: a, .. }),
                Err(E::LocatorInconsistent { fields: b, .. }),
            ) => {
                assert_eq!(a, b, "{name}")
            }
            _ => assert_eq!(got, want, "{name}"),
        }
    }
}

#[test]
fn diff_resolution_takes_the_recorded_station_month_and_real_locator() {
    let with_bill = diff(DIFF, "100:202609", Some(PB));
    let got = resolve_diff(DIFF, Some(&with_bill), Some((&bill(), &account(Some(100))))).unwrap();
    assert_eq!(got, full("100:202609"));
    // A diff recorded without a partner bill is legal: the locator is the diff alone.
    let alone = diff(DIFF, "100:202609", None);
    let got = resolve_diff(DIFF, Some(&alone), None).unwrap();
    assert_eq!(got.station_month, sm("100:202609"));
    assert_eq!(
        got.locator,
        Locator::new("t", None, None, None, Some(DIFF)).unwrap()
    );
    assert_eq!(
        resolve_diff(DIFF, None, None),
        Err(ScopeResolveError::DiffNotFound { diff_id: DIFF })
    );
    assert_eq!(
        resolve_diff(DIFF, Some(&with_bill), None),
        Err(ScopeResolveError::PartnerBillNotFound {
            partner_bill_id: PB
        })
    );
}

#[test]
fn order_bill_resolution_needs_the_current_publication_of_a_published_master() {
    use ScopeResolveError as E;
    let line = OrderBillRef {
        id: 20_001,
        order_id: 7,
        station_month: sm("100:202609"),
        publish_version: 2,
        submit_round: 3,
        deleted: false,
    };
    let order = OrderRef {
        id: 7,
        published: true,
        publish_version: 2,
        submit_round: 3,
        deleted: false,
    };
    type Row = (
        &'static str,
        OrderBillRef,
        Option<OrderRef>,
        Result<StationMonth, E>,
    );
    let rows: Vec<Row> = vec![
        (
            "current publication",
            line,
            Some(order),
            Ok(sm("100:202609")),
        ),
        (
            "deleted line",
            OrderBillRef {
                deleted: true,
                ..line
            },
            Some(order),
            Err(E::OrderBillDeleted {
                order_bill_id: 20_001,
            }),
        ),
        (
            "no master",
            line,
            None,
            Err(E::OrderNotFound {
                order_bill_id: 20_001,
                order_id: 7,
            }),
        ),
        (
            "deleted master",
            line,
            Some(OrderRef {
                deleted: true,
                ..order
            }),
            Err(E::OrderDeleted {
                order_bill_id: 20_001,
                order_id: 7,
            }),
        ),
        (
            "unpublished master",
            line,
            Some(OrderRef {
                published: false,
                ..order
            }),
            Err(E::OrderNotPublished {
                order_bill_id: 20_001,
                order_id: 7,
            }),
        ),
        (
            "a line of an older submit round",
            OrderBillRef {
                submit_round: 2,
                ..line
            },
            Some(order),
            Err(E::NotCurrentPublication {
                order_bill_id: 20_001,
                order_id: 7,
                line_identity: (2, 2),
                current_identity: (2, 3),
            }),
        ),
        (
            "a line of an older publish version",
            OrderBillRef {
                publish_version: 1,
                ..line
            },
            Some(order),
            Err(E::NotCurrentPublication {
                order_bill_id: 20_001,
                order_id: 7,
                line_identity: (1, 3),
                current_identity: (2, 3),
            }),
        ),
    ];
    for (name, l, o, want) in rows {
        assert_eq!(
            resolve_order_bill(20_001, Some(&l), o.as_ref()),
            want,
            "{name}"
        );
    }
    assert_eq!(
        resolve_order_bill(20_001, None, Some(&order)),
        Err(E::OrderBillNotFound {
            order_bill_id: 20_001
        })
    );
}

/// Locator ids: partner org, partner bill, partner account, diff.
type Ids = (Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// A station-month scope with a locator, checked against the reference data.
struct LocatorRow {
    name: &'static str,
    locator: Ids,
    diff: Option<DiffRef>,
    partner_bill: Option<PartnerBillRef>,
    partner_account: Option<PartnerAccountRef>,
    diffs_of_bill: Vec<DiffRef>,
    /// `Ok(completed locator)` or the fields an inconsistency names / another error.
    want: Result<Ids, &'static str>,
}

fn locator_rows() -> Vec<LocatorRow> {
    let ok_diff = diff(DIFF, "100:202609", Some(PB));
    let base = || LocatorRow {
        name: "",
        locator: (None, None, None, None),
        diff: Some(ok_diff),
        partner_bill: Some(bill()),
        partner_account: Some(account(Some(100))),
        diffs_of_bill: vec![ok_diff],
        want: Ok((None, None, None, None)),
    };
    let all = (Some(ORG), Some(PB), Some(PA), Some(DIFF));
    vec![
        LocatorRow {
            name: "no exact ids: the station-month alone",
            ..base()
        },
        LocatorRow {
            name: "a partner org alone does not enter the locator branch",
            locator: (Some(999), None, None, None),
            want: Ok((Some(999), None, None, None)),
            ..base()
        },
        LocatorRow {
            name: "a full consistent locator",
            locator: all,
            want: Ok(all),
            ..base()
        },
        LocatorRow {
            name: "a partner bill alone finds its unique diff and its account",
            locator: (None, Some(PB), None, None),
            diff: None,
            want: Ok(all),
            ..base()
        },
        LocatorRow {
            name: "a diff recorded without a partner bill is legal",
            locator: (None, None, None, Some(DIFF)),
            diff: Some(diff(DIFF, "100:202609", None)),
            partner_bill: None,
            partner_account: None,
            want: Ok((None, None, None, Some(DIFF))),
            ..base()
        },
        LocatorRow {
            name: "L1 a diff that does not exist",
            locator: (None, None, None, Some(DIFF)),
            diff: None,
            want: Err("DiffNotFound"),
            ..base()
        },
        LocatorRow {
            name: "L1 a diff of another month",
            locator: (None, None, None, Some(DIFF)),
            diff: Some(diff(DIFF, "100:202608", Some(PB))),
            want: Err("diff_id, station_id, bill_month"),
            ..base()
        },
        LocatorRow {
            name: "L2 the diff belongs to another partner bill",
            locator: (None, Some(PB), None, Some(DIFF)),
            diff: Some(diff(DIFF, "100:202609", Some(22))),
            want: Err("diff_id, partner_bill_id"),
            ..base()
        },
        LocatorRow {
            name: "L3 the partner bill is of another month",
            locator: (None, Some(PB), None, Some(DIFF)),
            partner_bill: Some(PartnerBillRef {
                month: ym("202608"),
                ..bill()
            }),
            want: Err("partner_bill_id, bill_month"),
            ..base()
        },
        LocatorRow {
            name: "L3 a partner bill alone with two diffs",
            locator: (None, Some(PB), None, None),
            diff: None,
            diffs_of_bill: vec![ok_diff, diff(42, "100:202609", Some(PB))],
            want: Err("PartnerBillWithSeveralDiffs"),
            ..base()
        },
        LocatorRow {
            name: "L3 a partner bill alone whose diff is of another station",
            locator: (None, Some(PB), None, None),
            diff: None,
            diffs_of_bill: vec![diff(DIFF, "200:202609", Some(PB))],
            want: Err("partner_bill_id, station_id, bill_month"),
            ..base()
        },
        LocatorRow {
            name: "L4 the partner bill belongs to another account",
            locator: (None, Some(PB), Some(32), Some(DIFF)),
            want: Err("partner_bill_id, partner_account_id"),
            ..base()
        },
        LocatorRow {
            name: "L5 the account maps to another platform station",
            locator: (None, None, Some(PA), Some(DIFF)),
            partner_account: Some(account(Some(200))),
            want: Err("partner_account_id, station_id"),
            ..base()
        },
        LocatorRow {
            name: "L5 the account maps to no platform station",
            locator: (None, None, Some(PA), Some(DIFF)),
            partner_account: Some(account(None)),
            want: Err("PlatformStationMissing"),
            ..base()
        },
        LocatorRow {
            name: "L6 the account belongs to another partner org",
            locator: (Some(52), Some(PB), Some(PA), Some(DIFF)),
            want: Err("partner_account_id, partner_org_id"),
            ..base()
        },
    ]
}

#[test]
fn locator_consistency_rules() {
    for r in locator_rows() {
        let (org, pb, pa, d) = r.locator;
        let scope = StationMonthScope {
            station_month: sm("100:202609"),
            locator: Locator::new("t", org, pb, pa, d).unwrap(),
        };
        let facts = LocatorFacts {
            diff: r.diff.as_ref(),
            partner_bill: r.partner_bill.as_ref(),
            partner_account: r.partner_account.as_ref(),
            diffs_of_partner_bill: &r.diffs_of_bill,
        };
        let got = check_locator(&scope, &facts);
        match (got, r.want) {
            (Ok(s), Ok((org, pb, pa, d))) => {
                assert_eq!(s.station_month, scope.station_month, "{}", r.name);
                assert_eq!(
                    s.locator,
                    Locator::new("t", org, pb, pa, d).unwrap(),
                    "{}",
                    r.name
                );
            }
            (Err(ScopeResolveError::LocatorInconsistent { fields, .. }), Err(want)) => {
                assert_eq!(fields, want, "{}", r.name)
            }
            (Err(e), Err(want)) => assert!(format!("{e:?}").starts_with(want), "{}: {e:?}", r.name),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", r.name),
        }
    }
}

#[test]
fn inconsistent_locator_errors_name_the_fields() {
    let scope = StationMonthScope {
        station_month: sm("100:202609"),
        locator: Locator::new("t", Some(52), Some(PB), Some(PA), Some(DIFF)).unwrap(),
    };
    let (d, b, a) = (
        diff(DIFF, "100:202609", Some(PB)),
        bill(),
        account(Some(100)),
    );
    let facts = LocatorFacts {
        diff: Some(&d),
        partner_bill: Some(&b),
        partner_account: Some(&a),
        diffs_of_partner_bill: &[],
    };
    let message = check_locator(&scope, &facts).unwrap_err().to_string();
    assert!(
        message.contains("partner_account_id, partner_org_id"),
        "{message}"
    );
}

fn account_bill(
    station_month: &str,
    small: Option<i64>,
    partner: Option<i64>,
    status: Option<PaymentStatus>,
) -> AccountBillRef {
    AccountBillRef {
        station_month: sm(station_month),
        small_account_id: small,
        partner_account_id: partner,
        payment_status: status,
    }
}

#[test]
fn an_account_scope_expands_in_pages_of_100_station_months_with_a_cursor() {
    let scope = AccountScope::new([101], [201], ym("202612")).unwrap();
    // 250 station-months of account 101 (stations 1..=250, one month each), each also
    // pushed by partner account 201: counted once.
    let mut bills = Vec::new();
    for station in 1..=250 {
        let s = format!("{station}:202601");
        bills.push(account_bill(&s, Some(101), None, None));
        bills.push(account_bill(&s, None, Some(201), None));
    }
    let mut cursor = None;
    let mut pages = Vec::new();
    loop {
        let page = account_scope_page(&scope, RefreshMode::All, &bills, cursor);
        pages.push(page.station_months.len());
        assert!(page.station_months.windows(2).all(|w| w[0] < w[1]));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
        assert_eq!(cursor, page.station_months.last().copied());
    }
    assert_eq!(pages, vec![100, 100, 50]);
}

#[test]
fn an_account_scope_takes_its_accounts_bills_up_to_month_end_filtered_by_mode() {
    use PaymentStatus as P;
    let scope = AccountScope::new([101], [], ym("202609")).unwrap();
    let bills = [
        account_bill("1:202609", Some(101), None, Some(P::Unpaid)),
        account_bill("2:202609", Some(101), None, Some(P::Paid)),
        account_bill("3:202609", Some(101), None, Some(P::NoPaymentNeeded)),
        account_bill("4:202610", Some(101), None, Some(P::Unpaid)),
        account_bill("5:202609", Some(102), None, Some(P::Unpaid)),
        account_bill("6:202609", None, Some(101), Some(P::Unpaid)),
        account_bill("7:202601", Some(101), None, None),
    ];
    let all = account_scope_page(&scope, RefreshMode::All, &bills, None);
    assert_eq!(
        all.station_months,
        vec![
            sm("1:202609"),
            sm("2:202609"),
            sm("3:202609"),
            sm("7:202601")
        ]
    );
    let unfinished = account_scope_page(&scope, RefreshMode::Unfinished, &bills, None);
    assert_eq!(
        unfinished.station_months,
        vec![sm("1:202609"), sm("7:202601")]
    );
    assert_eq!(unfinished.next_cursor, None);
}
