//! The affiliate projectors, folded in memory: what rows a stream makes.

use super::*;
use crate::table::{MemTables, Projector};
use chrono::TimeZone;
use factledger_aggregates::affiliate::Bps;
use factledger_aggregates::affiliate_order::OrderSignal;
use factledger_aggregates::campaign::{CampaignOpened, QuotaReleased, QuotaReserved};
use factledger_aggregates::commission::{
    BeneficiaryRole, CommissionAmounts, CommissionRecorded, CommissionReleased, CommissionUnfrozen,
    OrderReaction,
};
use factledger_aggregates::commission_rules::RuleSnapshot;
use factledger_aggregates::Currency;
use serde_json::Value;

fn t(day: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, day, 10, 0, 0).unwrap()
}

fn rules() -> RuleSnapshot {
    RuleSnapshot {
        rule_set_id: "SHOPEE:ID".into(),
        version: 3,
        effective_from: t(1),
        cashback_bps: Bps::parse(6_000).unwrap(),
        inviter_bps: Bps::parse(1_000).unwrap(),
        max_commission_base_bps: Bps::parse(800).unwrap(),
        release_delay_days: 14,
    }
}

/// Fold `(aggregate_type, aggregate_id, payload)` events, positions from 1.
fn fold(p: &dyn Projector, events: &[(&str, &str, Value)]) -> Result<MemTables, String> {
    let mut mem = MemTables::default();
    for (i, (ty, id, payload)) in events.iter().enumerate() {
        let event_type = payload["type"].as_str().unwrap_or("").to_owned();
        let e = ProjectedEvent {
            global_position: i as i64 + 1,
            aggregate_type: ty,
            aggregate_id: id,
            sequence: i as i64 + 1,
            event_type: &event_type,
            payload,
            recorded_at: "2026-01-02T10:00:00.000000Z",
        };
        for change in p.project(&e).map_err(|e| e.to_string())? {
            mem.apply(p.tables(), &change)?;
        }
    }
    Ok(mem)
}

fn commission(v: CommissionEvent) -> (&'static str, &'static str, Value) {
    (
        COMMISSION_AGGREGATE_TYPE,
        "SHOPEE:1:CASHBACK",
        serde_json::to_value(v).unwrap(),
    )
}

fn recorded() -> CommissionEvent {
    CommissionEvent::CommissionRecorded(CommissionRecorded {
        commission_id: "SHOPEE:1:CASHBACK".into(),
        order_id: "SHOPEE:1".into(),
        role: BeneficiaryRole::Cashback,
        beneficiary_user_id: "u-1".into(),
        wallet_id: "w-1".into(),
        currency: Currency::parse("IDR").unwrap(),
        amount_minor: 12_000,
        order_amounts: CommissionAmounts {
            base_minor: 20_000,
            cashback_minor: 12_000,
            inviter_reward_minor: 2_000,
        },
        ordered_at: t(2),
        release_at: t(16),
        rules: rules(),
        order_revision: 1,
    })
}

fn reaction(revision: u32, signal: OrderSignal, amount_minor: i64) -> OrderReaction {
    OrderReaction {
        order_revision: revision,
        signal,
        order_updated_at: t(3),
        amount_minor,
    }
}

fn row<'a>(mem: &'a MemTables, table: &str, key: &str) -> &'a crate::table::MemRow {
    mem.tables[table]
        .get(&vec![Cell::text(key)])
        .unwrap_or_else(|| panic!("no {table} row {key}"))
}

#[test]
fn a_commission_row_follows_its_status_and_amount_and_keeps_its_rule_version() {
    let mem = fold(
        &CommissionsProjector,
        &[
            commission(recorded()),
            commission(CommissionEvent::CommissionFrozen(reaction(
                2,
                OrderSignal::PartiallyRefunded,
                12_000,
            ))),
            commission(CommissionEvent::CommissionUnfrozen(CommissionUnfrozen {
                order_revision: 3,
                signal: OrderSignal::PartialRefundSettled,
                order_updated_at: t(4),
                amount_minor: 9_000,
                reduced_by_minor: 3_000,
                adjustment_ref_id: Some("SHOPEE:1:CASHBACK:ADJ3".into()),
            })),
            commission(CommissionEvent::CommissionReleased(CommissionReleased {
                amount_minor: 9_000,
                release_at: t(16),
                released_at: t(17),
            })),
        ],
    )
    .unwrap();
    let r = row(&mem, "commission_records", "SHOPEE:1:CASHBACK");
    assert_eq!(r["status"], Cell::text("AVAILABLE"));
    assert_eq!(r["amount_minor"], Cell::Int(9_000));
    assert_eq!(r["recorded_amount_minor"], Cell::Int(12_000));
    assert_eq!(r["rule_version"], Cell::Int(3));
    assert_eq!(r["cashback_bps"], Cell::Int(6_000));
    assert_eq!(r["release_at"], Cell::text("2026-01-16T10:00:00.000000Z"));
    assert_eq!(r["released_at"], Cell::text("2026-01-17T10:00:00.000000Z"));
    assert_eq!(r["order_revision"], Cell::Int(3));
    assert_eq!(r["version"], Cell::Int(4));
    assert_eq!(r["last_position"], Cell::Int(4));
}

#[test]
fn a_commission_event_before_its_record_stops_the_projector() {
    let err = fold(
        &CommissionsProjector,
        &[commission(CommissionEvent::CommissionFrozen(reaction(
            2,
            OrderSignal::RefundStarted,
            1,
        )))],
    )
    .unwrap_err();
    assert!(err.contains("no row"), "{err}");
}

#[test]
fn an_undecodable_commission_event_names_the_projection_and_the_event() {
    let e = ProjectedEvent {
        global_position: 7,
        aggregate_type: COMMISSION_AGGREGATE_TYPE,
        aggregate_id: "x",
        sequence: 1,
        event_type: "CommissionRecorded",
        payload: &serde_json::json!({"type": "CommissionRecorded", "amount_minor": "lots"}),
        recorded_at: "",
    };
    let err = CommissionsProjector.project(&e).unwrap_err();
    assert_eq!((err.projection, err.global_position), (COMMISSIONS, 7));
    assert!(err.reason.contains("CommissionRecorded"), "{}", err.reason);
}

#[test]
fn campaign_usage_tracks_reserved_quota_and_each_reservation() {
    let campaign = |v: CampaignEvent| {
        (
            "campaign",
            "cashback-fund",
            serde_json::to_value(v).unwrap(),
        )
    };
    let mem = fold(
        &CampaignsProjector,
        &[
            campaign(CampaignEvent::CampaignOpened(CampaignOpened {
                campaign_id: "cashback-fund".into(),
                quota_unit: QuotaUnit::Orders,
                quota_limit: 2,
                currency: None,
                starts_at: t(1),
                ends_at: None,
            })),
            campaign(CampaignEvent::QuotaReserved(QuotaReserved {
                order_id: "SHOPEE:1".into(),
                units: 1,
                ordered_at: t(2),
                reserved_after: 1,
            })),
            campaign(CampaignEvent::QuotaReserved(QuotaReserved {
                order_id: "SHOPEE:2".into(),
                units: 1,
                ordered_at: t(2),
                reserved_after: 2,
            })),
            campaign(CampaignEvent::QuotaReleased(QuotaReleased {
                order_id: "SHOPEE:1".into(),
                units: 1,
                reason: ReleaseReason::OrderRefunded,
                reserved_after: 1,
            })),
        ],
    )
    .unwrap();
    let usage = row(&mem, "campaign_usage", "cashback-fund");
    assert_eq!(usage["reserved"], Cell::Int(1));
    assert_eq!(usage["quota_limit"], Cell::Int(2));
    assert_eq!(usage["quota_unit"], Cell::text("ORDERS"));
    let reservations = &mem.tables["campaign_reservations"];
    let first = &reservations[&vec![Cell::text("cashback-fund"), Cell::text("SHOPEE:1")]];
    assert_eq!(first["status"], Cell::text(RESERVATION_RELEASED));
    assert_eq!(first["release_reason"], Cell::text("ORDER_REFUNDED"));
    let second = &reservations[&vec![Cell::text("cashback-fund"), Cell::text("SHOPEE:2")]];
    assert_eq!(second["status"], Cell::text(RESERVATION_ACTIVE));
}

#[test]
fn other_aggregates_make_no_rows() {
    for p in all() {
        let mem = fold(
            p.as_ref(),
            &[("wallet", "w-1", serde_json::json!({"type": "WalletOpened"}))],
        )
        .unwrap();
        assert!(mem.tables.values().all(|t| t.is_empty()), "{}", p.name());
    }
}
