//! Unit tests of the reconciliation: pages, replay checks and differences.

use super::diff::*;
use super::pages::*;
use super::pass::*;
use super::report::*;
use super::rows::*;
use super::wallet::*;
use crate::infra::store::{StoredEvent, GENESIS_HASH};
use chrono::{DateTime, Utc};
use factledger_aggregates::wallet::Buckets;
use factledger_aggregates::wallet::EntryType;
use serde_json::json;
use serde_json::Value;

fn test_keyring() -> std::sync::Arc<crate::infra::store::Keyring> {
    static RING: std::sync::OnceLock<std::sync::Arc<crate::infra::store::Keyring>> =
        std::sync::OnceLock::new();
    RING.get_or_init(|| std::sync::Arc::new(crate::infra::store::Keyring::generate()))
        .clone()
}

fn stored(sequence: i64, prev: &str, payload: Value) -> (EventRow, String) {
    let event_type = payload["type"].as_str().unwrap_or("?").to_owned();
    let mut e = StoredEvent {
        global_position: 100 + sequence,
        aggregate_type: "wallet".into(),
        aggregate_id: "w-1".into(),
        sequence,
        event_type,
        event_version: 2,
        event_id: format!("id-{sequence}"),
        payload: payload.to_string(),
        metadata: "{}".into(),
        correlation_id: "c".into(),
        actor: "a".into(),
        hash: String::new(),
        hash_key: test_keyring().active().id.clone(),
        recorded_at: DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc),
    };
    e.hash = e.recompute_hash(&test_keyring(), prev).unwrap();
    let ledger_ref = payload.get("ref_id").map(|id| {
        (
            payload["ref_type"].as_str().unwrap().to_owned(),
            id.as_str().unwrap().to_owned(),
            payload["entry_type"].as_str().unwrap().to_owned(),
        )
    });
    let hash = e.hash.clone();
    (
        EventRow {
            event: e,
            ledger_ref,
        },
        hash,
    )
}

fn b(pending: i64, available: i64) -> Value {
    json!({"pending_minor": pending, "available_minor": available,
           "frozen_minor": 0, "risk_hold_minor": 0})
}

fn credit(id: &str, amount: i64, before: Value, delta: Value, after: Value) -> Value {
    json!({"type": "PendingCredited", "ref_type": "COMMISSION", "ref_id": id,
           "entry_type": "CREDIT_PENDING", "amount_minor": amount,
           "delta": delta, "before": before, "after": after})
}

/// Replay `payloads` as a chained stream; the kinds of event findings, in order.
fn kinds(payloads: Vec<Value>) -> Vec<FindingKind> {
    let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
    let mut prev = GENESIS_HASH.to_owned();
    for (i, p) in payloads.into_iter().enumerate() {
        let (row, hash) = stored(i as i64 + 1, &prev, p);
        w.event(&row);
        prev = hash;
    }
    w.kept.iter().map(|f| f.kind).collect()
}

fn open() -> Value {
    json!({"type": "WalletOpened", "user_id": "u-1", "currency": "IDR"})
}

#[test]
fn a_sound_stream_has_no_findings_and_projects_its_rows() {
    let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
    let (o, h1) = stored(1, GENESIS_HASH, open());
    let (c, _) = stored(2, &h1, credit("c-1", 500, b(0, 0), b(500, 0), b(500, 0)));
    assert_eq!(w.event(&o), ExpectedLedger::Nothing);
    let ExpectedLedger::Row(row) = w.event(&c) else {
        panic!("a credit has a ledger row")
    };
    assert_eq!((row.sequence, row.amount_minor), (2, 500));
    assert_eq!(row.entry_type, EntryType::CreditPending.as_str());
    assert!(w.kept.is_empty(), "{:?}", w.kept);
    let balance = w.expected_balance.clone().expect("opened");
    assert_eq!((balance.balances.pending_minor, balance.version), (500, 2));
}

#[test]
fn a_before_that_is_not_the_previous_after_breaks_the_balance_chain() {
    let found = kinds(vec![
        open(),
        credit("c-1", 500, b(0, 0), b(500, 0), b(500, 0)),
        credit("c-2", 100, b(400, 0), b(100, 0), b(500, 0)),
    ]);
    assert_eq!(found, vec![FindingKind::BalanceChainBroken]);
}

#[test]
fn after_not_before_plus_delta_breaks_conservation() {
    let found = kinds(vec![
        open(),
        credit("c-1", 500, b(0, 0), b(500, 0), b(600, 0)),
    ]);
    assert_eq!(found, vec![FindingKind::ConservationBroken]);
}

#[test]
fn a_negative_bucket_and_a_delta_that_does_not_match_the_amount_are_found() {
    let found = kinds(vec![
        open(),
        credit("c-1", 500, b(0, 0), b(-500, 0), b(-500, 0)),
    ]);
    assert_eq!(
        found,
        vec![FindingKind::DeltaMismatch, FindingKind::NegativeBucket]
    );
}

#[test]
fn a_tampered_event_breaks_its_own_link_only() {
    let (o, h1) = stored(1, GENESIS_HASH, open());
    let (mut c, h2) = stored(2, &h1, credit("c-1", 500, b(0, 0), b(500, 0), b(500, 0)));
    let (r, _) = stored(3, &h2, credit("c-2", 1, b(500, 0), b(1, 0), b(501, 0)));
    c.event.actor = "someone else".into();
    let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
    for e in [&o, &c, &r] {
        w.event(e);
    }
    let found: Vec<_> = w.kept.iter().map(|f| (f.kind, f.key.as_str())).collect();
    assert_eq!(found, vec![(FindingKind::HashChainBroken, "sequence=2")]);
    assert_eq!(w.kept[0].events[0].global_position, 102);
}

#[test]
fn a_payload_ref_that_differs_from_its_row_key_and_a_deleted_event_are_found() {
    let (o, h1) = stored(1, GENESIS_HASH, open());
    // Event 2 existed (event 3 is chained to it) and was deleted.
    let (_, h2) = stored(2, &h1, credit("c-0", 5, b(0, 0), b(5, 0), b(5, 0)));
    let (mut c, _) = stored(3, &h2, credit("c-1", 5, b(0, 0), b(5, 0), b(5, 0)));
    c.ledger_ref = Some((
        "COMMISSION".into(),
        "c-OTHER".into(),
        "CREDIT_PENDING".into(),
    ));
    let mut w = WalletReplay::new("w-1".into(), 100, test_keyring());
    w.event(&o);
    w.event(&c);
    let found: Vec<_> = w.kept.iter().map(|f| f.kind).collect();
    assert_eq!(
        found,
        vec![
            FindingKind::SequenceGap,
            FindingKind::HashChainBroken,
            FindingKind::LedgerRefMismatch
        ]
    );
}

#[test]
fn events_on_an_unopened_wallet_and_an_undecodable_payload_are_event_findings() {
    let found = kinds(vec![
        credit("c-1", 5, b(0, 0), b(5, 0), b(5, 0)),
        json!({"type": "PendingCredited", "amount_minor": "lots"}),
    ]);
    assert_eq!(
        found,
        vec![
            FindingKind::LifecycleBroken,
            FindingKind::PayloadUndecodable
        ]
    );
    assert!(found.iter().all(|k| k.class() == FindingClass::Event));
}

#[test]
fn counts_stay_exact_when_findings_are_not_kept() {
    let mut w = WalletReplay::new("w-1".into(), 1, test_keyring());
    w.balance(Some(BalanceRecord {
        wallet_id: "w-1".into(),
        user_id: "u".into(),
        currency: "IDR".into(),
        balances: Buckets::default(),
        version: 1,
        last_position: 1,
    }));
    w.ledger(
        None,
        Some(&LedgerRecord {
            wallet_id: "w-1".into(),
            sequence: 9,
            global_position: 9,
            ref_type: "X".into(),
            ref_id: "y".into(),
            entry_type: "CREDIT_PENDING".into(),
            amount_minor: 1,
            delta: Buckets::default(),
            before: Buckets::default(),
            after: Buckets::default(),
            recorded_at: "t".into(),
        }),
    );
    assert_eq!(w.counts.projection_drift, 2);
    assert_eq!(w.kept.len(), 1);
    let mut pass = Pass::new(test_keyring(), 0);
    pass.take(w);
    assert!(pass.truncated);
    assert_eq!(pass.counts.projection_drift, 2);
}

#[test]
fn keyset_conditions_are_spelled_for_each_backend() {
    let key = || vec![Arg::Text("w".into()), Arg::Text("t".into()), Arg::Int(7)];
    let cols = ["wallet_id", "ref_type", "ref_id"];
    let (sql, args) = keyset_after(true, &cols, key());
    assert_eq!(sql, "(wallet_id, ref_type, ref_id) > (?, ?, ?)");
    assert_eq!(args.len(), 3);
    let (sql, args) = keyset_after(false, &cols, key());
    assert_eq!(
        sql,
        "(wallet_id > ? OR (wallet_id = ? AND (ref_type > ? OR (ref_type = ? AND ref_id > ?))))"
    );
    let shown: Vec<String> = args
        .iter()
        .map(|a| match a {
            Arg::Text(s) => s.clone(),
            Arg::Int(i) => i.to_string(),
        })
        .collect();
    assert_eq!(shown, ["w", "w", "t", "t", "7"]);
    assert_eq!(
        keyset_after(false, &["wallet_id"], vec![Arg::Int(1)]).0,
        "wallet_id > ?"
    );
}

#[test]
fn differences_name_each_differing_field() {
    let d = differences(
        &json!({"a": 1, "b": {"c": 2, "d": 3}}),
        &json!({"a": 1, "b": {"c": 5, "d": 3}}),
    );
    assert_eq!(d, "b.c: expected 2, actual 5");
}
