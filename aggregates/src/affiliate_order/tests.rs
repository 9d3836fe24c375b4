//! Affiliate order tests: given these events, when this command, then these events
//! or this error (cqrs-es `TestFramework`, which calls `handle` → `decide`), plus the
//! status matrix and the signal table, and the seed's counter-intuitive replays
//! (acceptance cases 1, 4, 7 and 8 at aggregate level).

use super::*;
use crate::affiliate::{AuditReason, Bps, ReportedMinor};
use crate::affiliate_values::{AmountError, CommissionAmounts};
use crate::money::BoundedId;
use chrono::TimeZone;
use cqrs_es::test::TestFramework;
use OrderStatus as S;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn order_test() -> TestFramework<AffiliateOrder> {
    TestFramework::<AffiliateOrder>::with(())
}

fn id(s: &str) -> BoundedId {
    BoundedId::parse(s).unwrap()
}

fn bps(v: i64) -> Bps {
    Bps::parse(v).unwrap()
}

fn minor(v: i64) -> ReportedMinor {
    ReportedMinor::parse(v).unwrap()
}

/// 2 January 2026 at `hour`:00 UTC.
fn t(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, hour, 0, 0).unwrap()
}

fn idr() -> Currency {
    Currency::parse("IDR").unwrap()
}

fn country() -> CountryCode {
    CountryCode::parse("ID").unwrap()
}

/// Cashback 60 %, inviter 10 %, base capped at 8 % of GMV, released after 14 days.
fn rules_v1() -> RuleSnapshot {
    RuleSnapshot {
        rule_set_id: "SHOPEE:ID".to_owned(),
        version: 1,
        effective_from: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
        cashback_bps: bps(6_000),
        inviter_bps: bps(1_000),
        max_commission_base_bps: bps(800),
        release_delay_days: 14,
    }
}

/// M = min(pc, gmv × 8 %), cashback 60 % of M, inviter 10 % of M (rounded down).
fn amounts(gmv: i64, pc: i64) -> CommissionAmounts {
    let base = pc.min(gmv * 800 / 10_000);
    CommissionAmounts {
        base_minor: base,
        cashback_minor: base * 6_000 / 10_000,
        inviter_reward_minor: base * 1_000 / 10_000,
    }
}

/// Shopee order 5781234, ordered at 10:00, as the platform reports it.
fn order(status: OrderStatus, gmv: i64, pc: i64, updated_at: DateTime<Utc>) -> NormalisedOrder {
    NormalisedOrder {
        platform: Platform::Shopee,
        country: country(),
        platform_order_id: PlatformOrderId::parse("5781234").unwrap(),
        status,
        currency: idr(),
        gmv_minor: minor(gmv),
        platform_commission_minor: minor(pc),
        ordered_at: t(10),
        platform_updated_at: updated_at,
        attribution: Some(Attribution::ClickId(id("clk-9"))),
    }
}

fn ingest(o: NormalisedOrder) -> IngestOrder {
    IngestOrder {
        order: o,
        owner_user_id: Some(id("u-1")),
        inviter_user_id: Some(id("u-0")),
        rules: Some(rules_v1()),
    }
}

fn ingest_cmd(o: NormalisedOrder) -> OrderCommand {
    OrderCommand::Ingest(ingest(o))
}

fn ingested(status: OrderStatus, gmv: i64, pc: i64, updated_at: DateTime<Utc>) -> OrderEvent {
    OrderEvent::OrderIngested(OrderIngested {
        revision: 1,
        platform: Platform::Shopee,
        country: country(),
        platform_order_id: PlatformOrderId::parse("5781234").unwrap(),
        status,
        currency: idr(),
        gmv_minor: gmv,
        platform_commission_minor: pc,
        ordered_at: t(10),
        platform_updated_at: updated_at,
        attribution: Some(Attribution::ClickId(id("clk-9"))),
        owner_user_id: Some("u-1".to_owned()),
        inviter_user_id: Some("u-0".to_owned()),
        rules: rules_v1(),
        amounts: amounts(gmv, pc),
        audit_only: status.is_void(),
    })
}

/// The usual starting point: PENDING, GMV 250,000, platform commission 30,000
/// (M = 20,000; cashback 12,000; inviter 2,000), platform version 11:00.
fn pending() -> OrderEvent {
    ingested(S::Pending, 250_000, 30_000, t(11))
}

#[allow(clippy::too_many_arguments)]
fn updated(
    revision: u32,
    from: OrderStatus,
    to: OrderStatus,
    reported: (i64, i64),
    known: (i64, i64),
    updated_at: DateTime<Utc>,
    signal: OrderSignal,
) -> OrderEvent {
    OrderEvent::OrderUpdated(OrderUpdated {
        revision,
        from_status: from,
        status: to,
        reported_gmv_minor: reported.0,
        reported_platform_commission_minor: reported.1,
        gmv_minor: known.0,
        platform_commission_minor: known.1,
        platform_updated_at: updated_at,
        amounts: amounts(known.0, known.1),
        signal,
    })
}

fn state(events: &[OrderEvent]) -> AffiliateOrder {
    let mut o = AffiliateOrder::default();
    for e in events {
        o.apply(e.clone());
    }
    o
}

/// Decide and apply each command in turn, as the ingest unit would; returns the
/// outcomes and the final state.
fn replay(commands: Vec<IngestOrder>) -> (Vec<IngestOutcome>, AffiliateOrder) {
    let mut o = AffiliateOrder::default();
    let mut outcomes = vec![];
    for cmd in commands {
        let decision = o.plan_ingest(&cmd).unwrap();
        outcomes.push(decision.outcome);
        for e in decision.events {
            assert_eq!(o.check(&e), Ok(()));
            o.apply(e);
        }
    }
    (outcomes, o)
}

fn outcome(given: &[OrderEvent], o: NormalisedOrder) -> IngestOutcome {
    state(given).plan_ingest(&ingest(o)).unwrap().outcome
}

// ---------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------

#[test]
fn a_new_order_is_created_with_its_owner_inviter_rule_snapshot_and_amounts() {
    order_test()
        .given_no_previous_events()
        .when(ingest_cmd(order(S::Pending, 250_000, 30_000, t(11))))
        .then_expect_events(vec![pending()]);
    assert_eq!(
        amounts(250_000, 30_000),
        CommissionAmounts {
            base_minor: 20_000,
            cashback_minor: 12_000,
            inviter_reward_minor: 2_000
        }
    );
    assert_eq!(
        outcome(&[], order(S::Pending, 250_000, 30_000, t(11))),
        IngestOutcome::Created
    );
}

#[test]
fn an_order_first_seen_refunded_or_cancelled_is_recorded_for_audit_only() {
    for status in [S::Refunded, S::Cancelled] {
        let event = ingested(status, 250_000, 30_000, t(11));
        let OrderEvent::OrderIngested(e) = &event else {
            unreachable!()
        };
        assert!(e.audit_only);
        order_test()
            .given_no_previous_events()
            .when(ingest_cmd(order(status, 250_000, 30_000, t(11))))
            .then_expect_events(vec![event.clone()]);
        assert_eq!(
            outcome(&[], order(status, 250_000, 30_000, t(11))),
            IngestOutcome::AuditOnlyInvalid
        );
    }
}

#[test]
fn an_unattributed_order_is_recorded_without_owner_or_inviter() {
    let mut cmd = ingest(order(S::Pending, 250_000, 30_000, t(11)));
    cmd.owner_user_id = None;
    cmd.inviter_user_id = None;
    let events = AffiliateOrder::default().plan_ingest(&cmd).unwrap().events;
    let OrderEvent::OrderIngested(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!(
        (e.owner_user_id.as_deref(), e.inviter_user_id.as_deref()),
        (None, None)
    );
}

#[test]
fn a_new_order_without_a_rule_version_is_refused() {
    let mut cmd = ingest(order(S::Pending, 250_000, 30_000, t(11)));
    cmd.rules = None;
    assert_eq!(
        (
            OrderError::RulesMissing.code(),
            OrderError::RulesMissing.field()
        ),
        ("RULES_MISSING", Some("rules"))
    );
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Ingest(cmd))
        .then_expect_error(OrderError::RulesMissing);
}

#[test]
fn a_rule_version_not_yet_in_force_at_ordered_at_is_refused() {
    let mut cmd = ingest(order(S::Pending, 250_000, 30_000, t(11)));
    let mut rules = rules_v1();
    rules.effective_from = t(10) + chrono::TimeDelta::seconds(1);
    cmd.rules = Some(rules.clone());
    let err = OrderError::RulesNotInForce {
        version: 1,
        effective_from: rules.effective_from,
        ordered_at: t(10),
    };
    assert_eq!(err.code(), "RULES_NOT_IN_FORCE");
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Ingest(cmd.clone()))
        .then_expect_error(err);
    // Effective exactly at ordered_at is in force.
    rules.effective_from = t(10);
    cmd.rules = Some(rules);
    assert!(AffiliateOrder::default().plan_ingest(&cmd).is_ok());
}

#[test]
fn an_owner_who_is_their_own_inviter_is_refused() {
    let mut cmd = ingest(order(S::Pending, 250_000, 30_000, t(11)));
    cmd.inviter_user_id = Some(id("u-1"));
    assert_eq!(OrderError::InviterIsOwner.code(), "INVITER_IS_OWNER");
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Ingest(cmd))
        .then_expect_error(OrderError::InviterIsOwner);
}

#[test]
fn an_inviter_without_an_owner_is_refused() {
    let mut cmd = ingest(order(S::Pending, 250_000, 30_000, t(11)));
    cmd.owner_user_id = None;
    assert_eq!(
        (
            OrderError::InviterWithoutOwner.code(),
            OrderError::InviterWithoutOwner.field()
        ),
        ("INVITER_WITHOUT_OWNER", Some("inviter_user_id"))
    );
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::Ingest(cmd))
        .then_expect_error(OrderError::InviterWithoutOwner);
}

// ---------------------------------------------------------------------------------
// Replays and out-of-order messages (R-ORD-3, acceptance cases 1 and 4)
// ---------------------------------------------------------------------------------

#[test]
fn the_same_order_replayed_100_times_is_one_order_event() {
    let cmd = ingest(order(S::Pending, 250_000, 30_000, t(11)));
    let (outcomes, o) = replay(vec![cmd; 100]);
    assert_eq!(outcomes[0], IngestOutcome::Created);
    assert!(outcomes[1..].iter().all(|x| *x == IngestOutcome::Unchanged));
    assert_eq!(o.order.unwrap().revision, 1);
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(order(S::Pending, 250_000, 30_000, t(11))))
        .then_expect_events(vec![]);
}

#[test]
fn an_update_older_than_the_order_is_ignored_as_stale() {
    let given = [pending()];
    let stale = order(S::Completed, 250_000, 30_000, t(10));
    assert_eq!(outcome(&given, stale.clone()), IngestOutcome::IgnoredStale);
    order_test()
        .given(given.to_vec())
        .when(ingest_cmd(stale))
        .then_expect_events(vec![]);
}

#[test]
fn pending_then_completed_then_an_old_pending_ends_completed() {
    // Acceptance case 4: PENDING → COMPLETED → old PENDING.
    let (outcomes, o) = replay(vec![
        ingest(order(S::Pending, 250_000, 30_000, t(11))),
        ingest(order(S::Completed, 250_000, 30_000, t(13))),
        ingest(order(S::Pending, 250_000, 30_000, t(11))),
    ]);
    assert_eq!(
        outcomes,
        vec![
            IngestOutcome::Created,
            IngestOutcome::Updated,
            IngestOutcome::IgnoredStale
        ]
    );
    assert_eq!(o.order.unwrap().status, S::Completed);
}

#[test]
fn a_backward_status_with_an_equal_or_newer_version_is_ignored_by_the_matrix() {
    let given = [
        pending(),
        updated(
            2,
            S::Pending,
            S::Completed,
            (250_000, 30_000),
            (250_000, 30_000),
            t(13),
            OrderSignal::Completed,
        ),
    ];
    for updated_at in [t(13), t(14)] {
        let back = order(S::Pending, 100_000, 5_000, updated_at);
        assert_eq!(
            outcome(&given, back.clone()),
            IngestOutcome::IgnoredIllegalTransition
        );
        order_test()
            .given(given.to_vec())
            .when(ingest_cmd(back))
            .then_expect_events(vec![]);
    }
}

#[test]
fn an_update_with_an_equal_version_still_moves_forward() {
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(order(S::Completed, 250_000, 30_000, t(11))))
        .then_expect_events(vec![updated(
            2,
            S::Pending,
            S::Completed,
            (250_000, 30_000),
            (250_000, 30_000),
            t(11),
            OrderSignal::Completed,
        )]);
}

#[test]
fn a_newer_version_with_nothing_else_changed_is_recorded_without_a_signal() {
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(order(S::Pending, 250_000, 30_000, t(12))))
        .then_expect_events(vec![updated(
            2,
            S::Pending,
            S::Pending,
            (250_000, 30_000),
            (250_000, 30_000),
            t(12),
            OrderSignal::None,
        )]);
}

#[test]
fn updates_of_a_terminal_order_that_leave_its_status_are_ignored() {
    let given = [ingested(S::Cancelled, 250_000, 30_000, t(11))];
    for status in [S::Pending, S::Completed, S::Refunding, S::Refunded] {
        assert_eq!(
            outcome(&given, order(status, 250_000, 30_000, t(15))),
            IngestOutcome::IgnoredIllegalTransition,
            "{status:?}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Amounts: sparse replays, lower amounts, refunds (acceptance cases 7 and 8)
// ---------------------------------------------------------------------------------

#[test]
fn a_sparse_replay_with_amount_zero_keeps_the_known_amounts() {
    // Acceptance case 8: Shopee sends 0; never a partial refund.
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(order(S::Completed, 0, 0, t(12))))
        .then_expect_events(vec![updated(
            2,
            S::Pending,
            S::Completed,
            (0, 0),
            (250_000, 30_000),
            t(12),
            OrderSignal::Completed,
        )]);
    // The same sparse message at the order's own version says nothing new.
    assert_eq!(
        outcome(&[pending()], order(S::Pending, 0, 0, t(11))),
        IngestOutcome::Unchanged
    );
}

#[test]
fn one_sparse_amount_is_kept_while_the_other_is_updated() {
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(order(S::Pending, 0, 25_000, t(12))))
        .then_expect_events(vec![updated(
            2,
            S::Pending,
            S::Pending,
            (0, 25_000),
            (250_000, 25_000),
            t(12),
            OrderSignal::None, // M is still 20,000 (the GMV cap)
        )]);
}

#[test]
fn a_lower_positive_amount_signals_amount_decreased() {
    // Acceptance case 7, order side: the platform lowers the commission to 12,000.
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(order(S::Pending, 250_000, 12_000, t(12))))
        .then_expect_events(vec![updated(
            2,
            S::Pending,
            S::Pending,
            (250_000, 12_000),
            (250_000, 12_000),
            t(12),
            OrderSignal::AmountDecreased,
        )]);
}

#[test]
fn a_partial_refund_then_its_rejection_are_signalled() {
    let (_, o) = replay(vec![
        ingest(order(S::Completed, 250_000, 30_000, t(11))),
        ingest(order(S::PartiallyRefunded, 150_000, 18_000, t(12))),
    ]);
    let known = o.order.clone().unwrap();
    assert_eq!(known.amounts.base_minor, 12_000);
    let refunding = OrderEvent::OrderUpdated(OrderUpdated {
        revision: 2,
        from_status: S::Completed,
        status: S::Refunding,
        reported_gmv_minor: 0,
        reported_platform_commission_minor: 0,
        gmv_minor: 250_000,
        platform_commission_minor: 30_000,
        platform_updated_at: t(12),
        amounts: amounts(250_000, 30_000),
        signal: OrderSignal::RefundStarted,
    });
    order_test()
        .given(vec![ingested(S::Completed, 250_000, 30_000, t(11))])
        .when(ingest_cmd(order(S::Refunding, 0, 0, t(12))))
        .then_expect_events(vec![refunding.clone()]);
    order_test()
        .given(vec![
            ingested(S::Completed, 250_000, 30_000, t(11)),
            refunding,
        ])
        .when(ingest_cmd(order(S::Completed, 0, 0, t(13))))
        .then_expect_events(vec![updated(
            3,
            S::Refunding,
            S::Completed,
            (0, 0),
            (250_000, 30_000),
            t(13),
            OrderSignal::RefundRejected,
        )]);
}

#[test]
fn updates_are_priced_with_the_orders_own_rule_snapshot() {
    // The ingest unit may send today's rule version; the order keeps its own (R-INV-5).
    let mut cmd = ingest(order(S::Pending, 250_000, 12_000, t(12)));
    let mut today = rules_v1();
    today.version = 2;
    today.cashback_bps = bps(9_000);
    cmd.rules = Some(today);
    let events = state(&[pending()]).plan_ingest(&cmd).unwrap().events;
    let OrderEvent::OrderUpdated(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!(e.amounts.cashback_minor, 12_000 * 6_000 / 10_000);
    assert_eq!(state(&[pending()]).order.unwrap().rules, rules_v1());
}

#[test]
fn ingest_never_changes_the_owner_of_a_known_order() {
    let mut cmd = ingest(order(S::Completed, 250_000, 30_000, t(12)));
    cmd.owner_user_id = Some(id("u-7"));
    cmd.inviter_user_id = None;
    let (_, o) = replay(vec![ingest(order(S::Pending, 250_000, 30_000, t(11))), cmd]);
    let known = o.order.unwrap();
    assert_eq!(known.owner_user_id.as_deref(), Some("u-1"));
    assert_eq!(known.inviter_user_id.as_deref(), Some("u-0"));
}

// ---------------------------------------------------------------------------------
// Update rejections
// ---------------------------------------------------------------------------------

#[test]
fn an_update_in_another_currency_is_refused() {
    let mut o = order(S::Completed, 250_000, 30_000, t(12));
    o.currency = Currency::parse("MYR").unwrap();
    let err = OrderError::CurrencyMismatch {
        given: o.currency,
        order: idr(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("CURRENCY_MISMATCH", Some("currency"))
    );
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(o))
        .then_expect_error(err);
}

#[test]
fn an_update_from_another_country_is_refused() {
    let mut o = order(S::Completed, 250_000, 30_000, t(12));
    o.country = CountryCode::parse("MY").unwrap();
    let err = OrderError::CountryMismatch {
        given: o.country,
        order: country(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("COUNTRY_MISMATCH", Some("country"))
    );
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(o))
        .then_expect_error(err);
}

#[test]
fn an_update_for_another_order_is_refused() {
    let mut o = order(S::Completed, 250_000, 30_000, t(12));
    o.platform = Platform::Lazada;
    let err = OrderError::IdentityMismatch {
        given: "LAZADA:5781234".to_owned(),
        stream: "SHOPEE:5781234".to_owned(),
    };
    assert_eq!(err.code(), "ORDER_IDENTITY_MISMATCH");
    order_test()
        .given(vec![pending()])
        .when(ingest_cmd(o))
        .then_expect_error(err);
}

#[test]
fn amount_errors_keep_their_code_and_field() {
    let err = OrderError::Amount(AmountError::Overflow { field: "gmv_minor" });
    assert_eq!(
        (err.code(), err.field()),
        ("AMOUNT_OVERFLOW", Some("gmv_minor"))
    );
}

// ---------------------------------------------------------------------------------
// Attribution corrections (R-ORD-4)
// ---------------------------------------------------------------------------------

fn correction(owner: Option<&str>, inviter: Option<&str>) -> CorrectAttribution {
    CorrectAttribution {
        new_owner_user_id: owner.map(id),
        new_inviter_user_id: inviter.map(id),
        actor: id("ops-ana"),
        reason: AuditReason::parse("click belonged to u-2 (ticket 881)").unwrap(),
        corrected_at: t(15),
    }
}

#[test]
fn an_attribution_correction_records_old_and_new_owner_actor_and_reason() {
    order_test()
        .given(vec![pending()])
        .when(OrderCommand::CorrectAttribution(correction(
            Some("u-2"),
            None,
        )))
        .then_expect_events(vec![OrderEvent::AttributionCorrected(
            AttributionCorrected {
                revision: 2,
                old_owner_user_id: Some("u-1".to_owned()),
                new_owner_user_id: Some("u-2".to_owned()),
                old_inviter_user_id: Some("u-0".to_owned()),
                new_inviter_user_id: None,
                actor: "ops-ana".to_owned(),
                reason: "click belonged to u-2 (ticket 881)".to_owned(),
                corrected_at: t(15),
            },
        )]);
}

#[test]
fn a_correction_that_changes_nothing_is_refused() {
    assert_eq!(
        (
            OrderError::AttributionUnchanged.code(),
            OrderError::AttributionUnchanged.field()
        ),
        ("ATTRIBUTION_UNCHANGED", Some("new_owner_user_id"))
    );
    order_test()
        .given(vec![pending()])
        .when(OrderCommand::CorrectAttribution(correction(
            Some("u-1"),
            Some("u-0"),
        )))
        .then_expect_error(OrderError::AttributionUnchanged);
}

#[test]
fn correcting_an_unknown_order_is_refused_as_not_found() {
    assert_eq!(OrderError::NotFound.code(), "ORDER_NOT_FOUND");
    order_test()
        .given_no_previous_events()
        .when(OrderCommand::CorrectAttribution(correction(
            Some("u-2"),
            None,
        )))
        .then_expect_error(OrderError::NotFound);
}

#[test]
fn a_correction_that_makes_the_owner_their_own_inviter_is_refused() {
    order_test()
        .given(vec![pending()])
        .when(OrderCommand::CorrectAttribution(correction(
            Some("u-2"),
            Some("u-2"),
        )))
        .then_expect_error(OrderError::InviterIsOwner);
    order_test()
        .given(vec![pending()])
        .when(OrderCommand::CorrectAttribution(correction(
            None,
            Some("u-2"),
        )))
        .then_expect_error(OrderError::InviterWithoutOwner);
}

// ---------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------

#[test]
fn the_status_matrix_allows_exactly_the_listed_edges() {
    let allowed = [
        (S::Pending, S::Completed),
        (S::Pending, S::Refunding),
        (S::Pending, S::PartiallyRefunded),
        (S::Pending, S::Refunded),
        (S::Pending, S::Cancelled),
        (S::Completed, S::Refunding),
        (S::Completed, S::PartiallyRefunded),
        (S::Completed, S::Refunded),
        (S::Completed, S::Cancelled),
        (S::Refunding, S::Pending),
        (S::Refunding, S::Completed),
        (S::Refunding, S::PartiallyRefunded),
        (S::Refunding, S::Refunded),
        (S::Refunding, S::Cancelled),
        (S::PartiallyRefunded, S::Refunding),
        (S::PartiallyRefunded, S::Refunded),
        (S::PartiallyRefunded, S::Completed),
        (S::PartiallyRefunded, S::Cancelled),
    ];
    for from in S::ALL {
        for to in S::ALL {
            let expected = from == to || allowed.contains(&(from, to));
            assert_eq!(from.can_move_to(to), expected, "{from:?} → {to:?}");
        }
    }
    // Terminal statuses go nowhere else.
    for to in S::ALL {
        assert_eq!(S::Refunded.can_move_to(to), to == S::Refunded);
        assert_eq!(S::Cancelled.can_move_to(to), to == S::Cancelled);
    }
}

#[test]
fn order_signals_follow_the_status_edge_and_the_base() {
    use OrderSignal as G;
    // (from, to, old M, new M, signal)
    let rows = [
        (S::Pending, S::Completed, 100, 100, G::Completed),
        (S::Pending, S::Completed, 100, 120, G::Completed),
        (S::Pending, S::Completed, 100, 80, G::AmountDecreased),
        (S::Pending, S::Pending, 100, 80, G::AmountDecreased),
        (S::Completed, S::Completed, 100, 80, G::AmountDecreased),
        (S::Completed, S::Completed, 100, 120, G::AmountIncreased),
        (S::Completed, S::Completed, 100, 100, G::None),
        (S::Pending, S::Pending, 100, 100, G::None),
        (S::Pending, S::Refunding, 100, 100, G::RefundStarted),
        (S::Completed, S::Refunding, 100, 80, G::RefundStarted),
        (S::Refunding, S::Refunding, 100, 80, G::None),
        (
            S::Completed,
            S::PartiallyRefunded,
            100,
            60,
            G::PartiallyRefunded,
        ),
        (
            S::PartiallyRefunded,
            S::PartiallyRefunded,
            60,
            40,
            G::PartiallyRefunded,
        ),
        (S::PartiallyRefunded, S::PartiallyRefunded, 60, 60, G::None),
        (S::Refunding, S::Completed, 100, 100, G::RefundRejected),
        (S::Refunding, S::Pending, 100, 100, G::RefundRejected),
        (S::Refunding, S::Completed, 100, 70, G::RefundRejected),
        (
            S::PartiallyRefunded,
            S::Completed,
            60,
            60,
            G::PartialRefundSettled,
        ),
        (S::Completed, S::Refunded, 100, 100, G::RefundConfirmed),
        (S::Refunding, S::Refunded, 100, 100, G::RefundConfirmed),
        (S::Refunded, S::Refunded, 100, 100, G::None),
        (S::Pending, S::Cancelled, 100, 100, G::Cancelled),
        (S::Completed, S::Cancelled, 100, 100, G::Cancelled),
        (S::Cancelled, S::Cancelled, 100, 0, G::None),
    ];
    for (from, to, old, new, signal) in rows {
        assert_eq!(
            OrderSignal::of_update(from, to, old, new),
            signal,
            "{from:?} → {to:?}, M {old} → {new}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Decide::check and wire formats
// ---------------------------------------------------------------------------------

#[test]
fn check_refuses_events_that_do_not_follow_from_the_order() {
    let empty = AffiliateOrder::default();
    let known = state(&[pending()]);
    assert_eq!(empty.check(&pending()), Ok(()));
    assert!(known.check(&pending()).is_err(), "second ingest");
    let forward = updated(
        2,
        S::Pending,
        S::Completed,
        (1, 1),
        (1, 1),
        t(12),
        OrderSignal::None,
    );
    assert_eq!(known.check(&forward), Ok(()));
    assert!(empty.check(&forward).is_err(), "update before ingest");
    let skipped = updated(
        3,
        S::Pending,
        S::Completed,
        (1, 1),
        (1, 1),
        t(12),
        OrderSignal::None,
    );
    assert!(known.check(&skipped).is_err(), "revision skipped");
    let completed = state(&[pending(), forward]);
    let back = updated(
        3,
        S::Completed,
        S::Pending,
        (1, 1),
        (1, 1),
        t(13),
        OrderSignal::None,
    );
    assert!(completed.check(&back).is_err(), "backwards edge");
    let older = updated(
        3,
        S::Completed,
        S::Completed,
        (1, 1),
        (1, 1),
        t(10),
        OrderSignal::None,
    );
    assert!(completed.check(&older).is_err(), "older version");
    assert_eq!(AffiliateOrder::ledger_ref(&pending()), None);
}

#[test]
fn an_order_update_has_a_stable_stored_shape() {
    let event = updated(
        2,
        S::Pending,
        S::Completed,
        (0, 0),
        (250_000, 30_000),
        t(12),
        OrderSignal::Completed,
    );
    let expected = serde_json::json!({
        "type": "OrderUpdated",
        "revision": 2,
        "from_status": "PENDING",
        "status": "COMPLETED",
        "reported_gmv_minor": 0,
        "reported_platform_commission_minor": 0,
        "gmv_minor": 250_000,
        "platform_commission_minor": 30_000,
        "platform_updated_at": "2026-01-02T12:00:00Z",
        "amounts": {"base_minor": 20_000, "cashback_minor": 12_000, "inviter_reward_minor": 2_000},
        "signal": "COMPLETED"
    });
    assert_eq!(serde_json::to_value(&event).unwrap(), expected);
    assert_eq!(
        serde_json::from_value::<OrderEvent>(expected).unwrap(),
        event
    );
}

#[test]
fn an_order_ingest_has_a_stable_stored_shape() {
    let value = serde_json::to_value(pending()).unwrap();
    assert_eq!(value["type"], "OrderIngested");
    assert_eq!(value["platform"], "SHOPEE");
    assert_eq!(value["country"], "ID");
    assert_eq!(
        value["attribution"],
        serde_json::json!({"kind": "CLICK_ID", "value": "clk-9"})
    );
    assert_eq!(value["rules"]["version"], 1);
    assert_eq!(value["rules"]["max_commission_base_bps"], 800);
    assert_eq!(value["ordered_at"], "2026-01-02T10:00:00Z");
    assert_eq!(value["audit_only"], false);
    assert_eq!(
        serde_json::from_value::<OrderEvent>(value).unwrap(),
        pending()
    );
}

#[test]
fn ingest_commands_parse_from_json_and_refuse_bad_fields() {
    let json = serde_json::json!({
        "type": "Ingest",
        "order": {
            "platform": "SHOPEE", "country": "ID", "platform_order_id": "5781234",
            "status": "PENDING", "currency": "IDR", "gmv_minor": 250000,
            "platform_commission_minor": 30000,
            "ordered_at": "2026-01-02T10:00:00Z", "platform_updated_at": "2026-01-02T11:00:00Z",
            "attribution": {"kind": "CLICK_ID", "value": "clk-9"}
        },
        "owner_user_id": "u-1",
        "inviter_user_id": "u-0",
        "rules": serde_json::to_value(rules_v1()).unwrap()
    });
    assert_eq!(
        serde_json::from_value::<OrderCommand>(json.clone()).unwrap(),
        ingest_cmd(order(S::Pending, 250_000, 30_000, t(11)))
    );
    for (field, value) in [
        ("gmv_minor", serde_json::json!(-1)),
        ("gmv_minor", serde_json::json!(1.5)),
        ("status", serde_json::json!("SHIPPED")),
        ("platform", serde_json::json!("TOKOPEDIA")),
        ("platform_order_id", serde_json::json!("a:b")),
        ("country", serde_json::json!("IDN")),
        ("extra", serde_json::json!(1)),
    ] {
        let mut bad = json.clone();
        bad["order"][field] = value;
        assert!(
            serde_json::from_value::<OrderCommand>(bad).is_err(),
            "{field}"
        );
    }
}

#[test]
fn ingest_outcomes_have_stable_names() {
    let names: Vec<&str> = [
        IngestOutcome::Created,
        IngestOutcome::Updated,
        IngestOutcome::Unchanged,
        IngestOutcome::IgnoredStale,
        IngestOutcome::IgnoredIllegalTransition,
        IngestOutcome::AuditOnlyInvalid,
    ]
    .iter()
    .map(|o| o.as_str())
    .collect();
    assert_eq!(
        names,
        [
            "created",
            "updated",
            "unchanged",
            "ignored_stale",
            "ignored_illegal_transition",
            "audit_only_invalid"
        ]
    );
    assert_eq!(
        serde_json::to_value(IngestOutcome::IgnoredStale).unwrap(),
        "ignored_stale"
    );
}
