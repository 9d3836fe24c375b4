//! Commission tests: given these events, when this command, then these events or this
//! error (cqrs-es `TestFramework`, which calls `handle` → `decide`); the R-COM-1
//! transition table pair by pair; the reaction table; and acceptance cases 2, 6 and 7
//! at aggregate level, with the wallet effects applied to a real wallet.

use super::*;
use crate::affiliate::{AuditReason, Bps, ReportedMinor};
use crate::wallet::{Buckets, OpenWallet, Wallet};
use chrono::TimeZone;
use cqrs_es::test::TestFramework;
use CommissionStatus as C;
use OrderSignal as G;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn commission_test() -> TestFramework<Commission> {
    TestFramework::<Commission>::with(())
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

fn idr() -> Currency {
    Currency::parse("IDR").unwrap()
}

/// 2 January 2026 at `hour`:00 UTC (the order is placed at 10:00).
fn t(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, hour, 0, 0).unwrap()
}

/// ordered_at + 14 days.
fn release_at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 16, 10, 0, 0).unwrap()
}

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

const CASHBACK_ID: &str = "SHOPEE:5781234:CASHBACK";

/// GMV 250,000, platform commission 30,000 → M 20,000, cashback 12,000, inviter 2,000.
fn record_cmd(role: BeneficiaryRole, order_status: OrderStatus) -> RecordCommission {
    let (beneficiary, wallet) = match role {
        BeneficiaryRole::Cashback => ("u-1", "w-u-1-IDR"),
        BeneficiaryRole::InviterReward => ("u-0", "w-u-0-IDR"),
    };
    RecordCommission {
        commission_id: id(&commission_id("SHOPEE:5781234", role)),
        order_id: id("SHOPEE:5781234"),
        role,
        beneficiary_user_id: id(beneficiary),
        wallet_id: id(wallet),
        currency: idr(),
        gmv_minor: minor(250_000),
        platform_commission_minor: minor(30_000),
        ordered_at: t(10),
        order_updated_at: t(11),
        order_status,
        order_revision: 1,
        rules: rules_v1(),
    }
}

fn record(order_status: OrderStatus) -> CommissionCommand {
    CommissionCommand::Record(record_cmd(BeneficiaryRole::Cashback, order_status))
}

fn recorded() -> CommissionEvent {
    CommissionEvent::CommissionRecorded(CommissionRecorded {
        commission_id: CASHBACK_ID.to_owned(),
        order_id: "SHOPEE:5781234".to_owned(),
        role: BeneficiaryRole::Cashback,
        beneficiary_user_id: "u-1".to_owned(),
        wallet_id: "w-u-1-IDR".to_owned(),
        currency: idr(),
        amount_minor: 12_000,
        order_amounts: CommissionAmounts {
            base_minor: 20_000,
            cashback_minor: 12_000,
            inviter_reward_minor: 2_000,
        },
        ordered_at: t(10),
        release_at: release_at(),
        rules: rules_v1(),
        order_revision: 1,
    })
}

fn react(
    revision: u32,
    signal: OrderSignal,
    status: OrderStatus,
    amount: i64,
) -> CommissionCommand {
    CommissionCommand::ReactToOrder(ReactToOrder {
        order_revision: revision,
        signal,
        order_status: status,
        amount_minor: minor(amount),
        order_updated_at: t(12),
    })
}

fn reaction_of(revision: u32, signal: OrderSignal, amount: i64) -> OrderReaction {
    OrderReaction {
        order_revision: revision,
        signal,
        order_updated_at: t(12),
        amount_minor: amount,
    }
}

fn frozen(revision: u32, signal: OrderSignal) -> CommissionEvent {
    CommissionEvent::CommissionFrozen(reaction_of(revision, signal, 12_000))
}

fn released() -> CommissionEvent {
    CommissionEvent::CommissionReleased(CommissionReleased {
        amount_minor: 12_000,
        release_at: release_at(),
        released_at: release_at(),
    })
}

fn release(now: DateTime<Utc>) -> CommissionCommand {
    CommissionCommand::Release(ReleaseCommission { now })
}

fn recovery_opened(revision: u32, signal: OrderSignal) -> CommissionEvent {
    CommissionEvent::RecoveryReviewOpened(reaction_of(revision, signal, 12_000))
}

fn resolve() -> CommissionCommand {
    CommissionCommand::ResolveRecovery(ResolveRecovery {
        actor: id("fin-budi"),
        reason: AuditReason::parse("recovered from the next payout by agreement").unwrap(),
        resolved_at: t(20),
    })
}

fn state(events: &[CommissionEvent]) -> Commission {
    let mut c = Commission::default();
    for e in events {
        c.apply(e.clone());
    }
    c
}

fn effect(given: &[CommissionEvent], event: &CommissionEvent) -> Option<WalletEffect> {
    state(given).wallet_effect(event).unwrap()
}

fn funds(ref_type: &str, ref_id: &str, amount: i64) -> MoveFunds {
    MoveFunds {
        ref_type: id(ref_type),
        ref_id: id(ref_id),
        amount_minor: AmountMinor::parse(amount).unwrap(),
        currency: Some(idr()),
        counterparty: None,
    }
}

fn to_wallet(command: WalletCommand) -> Option<WalletEffect> {
    Some(WalletEffect {
        wallet_id: id("w-u-1-IDR"),
        command,
    })
}

// ---------------------------------------------------------------------------------
// Record
// ---------------------------------------------------------------------------------

#[test]
fn recording_a_cashback_commission_credits_its_share_with_the_rule_snapshot() {
    commission_test()
        .given_no_previous_events()
        .when(record(OrderStatus::Pending))
        .then_expect_events(vec![recorded()]);
    assert_eq!(
        effect(&[], &recorded()),
        to_wallet(WalletCommand::CreditPending(funds(
            "COMMISSION",
            CASHBACK_ID,
            12_000
        )))
    );
}

#[test]
fn recording_an_inviter_reward_uses_the_inviter_rate_and_the_inviters_wallet() {
    let events = Commission::default()
        .decide(CommissionCommand::Record(record_cmd(
            BeneficiaryRole::InviterReward,
            OrderStatus::Completed,
        )))
        .unwrap();
    let CommissionEvent::CommissionRecorded(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!(e.commission_id, "SHOPEE:5781234:INVITER_REWARD");
    assert_eq!(
        (e.amount_minor, e.beneficiary_user_id.as_str()),
        (2_000, "u-0")
    );
    let fx = Commission::default()
        .wallet_effect(&events[0])
        .unwrap()
        .unwrap();
    assert_eq!(fx.wallet_id, id("w-u-0-IDR"));
}

#[test]
fn recording_for_an_order_with_a_refund_open_freezes_it_at_once() {
    for (status, signal) in [
        (OrderStatus::Refunding, G::RefundStarted),
        (OrderStatus::PartiallyRefunded, G::PartiallyRefunded),
    ] {
        commission_test()
            .given_no_previous_events()
            .when(record(status))
            .then_expect_events(vec![
                recorded(),
                CommissionEvent::CommissionFrozen(OrderReaction {
                    order_revision: 1,
                    signal,
                    order_updated_at: t(11),
                    amount_minor: 12_000,
                }),
            ]);
    }
}

#[test]
fn recording_again_from_a_replayed_ingest_writes_nothing() {
    commission_test()
        .given(vec![recorded()])
        .when(record(OrderStatus::Pending))
        .then_expect_events(vec![]);
}

#[test]
fn recording_again_for_another_beneficiary_is_refused() {
    let mut cmd = record_cmd(BeneficiaryRole::Cashback, OrderStatus::Pending);
    cmd.beneficiary_user_id = id("u-2");
    assert_eq!(
        CommissionError::AlreadyRecorded.code(),
        "COMMISSION_ALREADY_RECORDED"
    );
    commission_test()
        .given(vec![recorded()])
        .when(CommissionCommand::Record(cmd))
        .then_expect_error(CommissionError::AlreadyRecorded);
}

#[test]
fn a_commission_id_that_is_not_order_and_role_is_refused() {
    let mut cmd = record_cmd(BeneficiaryRole::Cashback, OrderStatus::Pending);
    cmd.commission_id = id("SHOPEE:5781234:INVITER_REWARD");
    let err = CommissionError::IdMismatch {
        given: "SHOPEE:5781234:INVITER_REWARD".to_owned(),
        expected: CASHBACK_ID.to_owned(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("COMMISSION_ID_MISMATCH", Some("commission_id"))
    );
    commission_test()
        .given_no_previous_events()
        .when(CommissionCommand::Record(cmd))
        .then_expect_error(err);
}

#[test]
fn a_void_order_gets_no_commission() {
    for status in [OrderStatus::Refunded, OrderStatus::Cancelled] {
        let err = CommissionError::OrderNotValid { status };
        assert_eq!(
            (err.code(), err.field()),
            ("ORDER_NOT_VALID", Some("order_status"))
        );
        commission_test()
            .given_no_previous_events()
            .when(record(status))
            .then_expect_error(err);
    }
}

#[test]
fn a_share_that_rounds_down_to_zero_is_refused_as_nothing_to_credit() {
    let mut cmd = record_cmd(BeneficiaryRole::InviterReward, OrderStatus::Pending);
    cmd.gmv_minor = minor(100); // M = min(30,000, 8) = 8; 10 % of 8 = 0.8 → 0
    assert_eq!(CommissionError::NothingToCredit.code(), "NOTHING_TO_CREDIT");
    commission_test()
        .given_no_previous_events()
        .when(CommissionCommand::Record(cmd))
        .then_expect_error(CommissionError::NothingToCredit);
}

#[test]
fn a_release_time_beyond_the_calendar_is_refused() {
    let mut cmd = record_cmd(BeneficiaryRole::Cashback, OrderStatus::Pending);
    cmd.ordered_at = DateTime::<Utc>::MAX_UTC;
    cmd.rules.effective_from = DateTime::<Utc>::MIN_UTC;
    assert_eq!(
        (
            CommissionError::ReleaseAtOutOfRange.code(),
            CommissionError::ReleaseAtOutOfRange.field()
        ),
        ("RELEASE_AT_OUT_OF_RANGE", Some("ordered_at"))
    );
    commission_test()
        .given_no_previous_events()
        .when(CommissionCommand::Record(cmd))
        .then_expect_error(CommissionError::ReleaseAtOutOfRange);
}

#[test]
fn every_command_before_record_is_refused_as_not_found() {
    for cmd in [
        react(2, G::Cancelled, OrderStatus::Cancelled, 0),
        release(release_at()),
        resolve(),
    ] {
        let name = cmd.name();
        let result = commission_test()
            .given_no_previous_events()
            .when(cmd)
            .inspect_result();
        assert_eq!(result, Err(CommissionError::NotFound), "{name}");
    }
    assert_eq!(CommissionError::NotFound.code(), "COMMISSION_NOT_FOUND");
}

// ---------------------------------------------------------------------------------
// Release (R-COM-2, acceptance case 2)
// ---------------------------------------------------------------------------------

#[test]
fn a_pending_commission_is_released_once_its_release_time_is_reached() {
    commission_test()
        .given(vec![recorded()])
        .when(release(release_at()))
        .then_expect_events(vec![released()]);
    assert_eq!(
        effect(&[recorded()], &released()),
        to_wallet(WalletCommand::ReleasePending(funds(
            "COMMISSION",
            CASHBACK_ID,
            12_000
        )))
    );
}

#[test]
fn releasing_before_the_release_time_is_refused_as_not_due() {
    let now = release_at() - chrono::TimeDelta::seconds(1);
    let err = CommissionError::NotDue {
        release_at: release_at(),
        now,
    };
    assert_eq!(
        (err.code(), err.field()),
        ("COMMISSION_NOT_DUE", Some("now"))
    );
    commission_test()
        .given(vec![recorded()])
        .when(release(now))
        .then_expect_error(err);
}

#[test]
fn the_second_of_two_settlements_is_refused_and_moves_no_money() {
    // Acceptance case 2: the loser re-decides on the winner's state.
    commission_test()
        .given(vec![recorded(), released()])
        .when(release(release_at()))
        .then_expect_error(CommissionError::IllegalTransition {
            from: C::Available,
            to: C::Available,
        });
}

#[test]
fn a_frozen_commission_is_never_released() {
    let err = CommissionError::IllegalTransition {
        from: C::Frozen,
        to: C::Available,
    };
    assert_eq!(
        (err.code(), err.field()),
        ("ILLEGAL_COMMISSION_TRANSITION", None)
    );
    commission_test()
        .given(vec![recorded(), frozen(2, G::AmountDecreased)])
        .when(release(release_at() + chrono::TimeDelta::days(30)))
        .then_expect_error(err);
}

// ---------------------------------------------------------------------------------
// Reactions to order signals (acceptance cases 6 and 7)
// ---------------------------------------------------------------------------------

#[test]
fn a_lower_positive_amount_freezes_a_pending_commission() {
    commission_test()
        .given(vec![recorded()])
        .when(react(2, G::AmountDecreased, OrderStatus::Pending, 7_200))
        .then_expect_events(vec![frozen(2, G::AmountDecreased)]);
    assert_eq!(effect(&[recorded()], &frozen(2, G::AmountDecreased)), None);
}

#[test]
fn a_refund_in_progress_or_a_partial_refund_freezes_a_pending_commission() {
    for (signal, status) in [
        (G::RefundStarted, OrderStatus::Refunding),
        (G::PartiallyRefunded, OrderStatus::PartiallyRefunded),
    ] {
        commission_test()
            .given(vec![recorded()])
            .when(react(2, signal, status, 12_000))
            .then_expect_events(vec![frozen(2, signal)]);
    }
}

#[test]
fn a_rejected_refund_returns_a_frozen_commission_to_pending_unchanged() {
    // Acceptance case 7: refund rejected → back to PENDING.
    let back = CommissionEvent::CommissionUnfrozen(CommissionUnfrozen {
        order_revision: 3,
        signal: G::RefundRejected,
        order_updated_at: t(12),
        amount_minor: 12_000,
        reduced_by_minor: 0,
        adjustment_ref_id: None,
    });
    commission_test()
        .given(vec![recorded(), frozen(2, G::RefundStarted)])
        .when(react(3, G::RefundRejected, OrderStatus::Completed, 12_000))
        .then_expect_events(vec![back.clone()]);
    assert_eq!(effect(&[recorded()], &back), None);
}

#[test]
fn a_settled_partial_refund_returns_the_commission_to_pending_at_the_lower_amount() {
    let back = CommissionEvent::CommissionUnfrozen(CommissionUnfrozen {
        order_revision: 3,
        signal: G::PartialRefundSettled,
        order_updated_at: t(12),
        amount_minor: 7_200,
        reduced_by_minor: 4_800,
        adjustment_ref_id: Some("SHOPEE:5781234:CASHBACK:ADJ3".to_owned()),
    });
    commission_test()
        .given(vec![recorded(), frozen(2, G::PartiallyRefunded)])
        .when(react(
            3,
            G::PartialRefundSettled,
            OrderStatus::Completed,
            7_200,
        ))
        .then_expect_events(vec![back.clone()]);
    assert_eq!(
        effect(&[recorded()], &back),
        to_wallet(WalletCommand::ReversePending(funds(
            "COMMISSION_ADJUSTMENT",
            "SHOPEE:5781234:CASHBACK:ADJ3",
            4_800
        )))
    );
}

#[test]
fn an_unfrozen_commission_never_goes_above_its_amount() {
    let events = state(&[recorded(), frozen(2, G::AmountDecreased)])
        .decide(react(3, G::AmountIncreased, OrderStatus::Completed, 50_000))
        .unwrap();
    let CommissionEvent::CommissionUnfrozen(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!((e.amount_minor, e.reduced_by_minor), (12_000, 0));
}

#[test]
fn a_frozen_commission_with_nothing_left_is_invalidated_instead_of_unfrozen() {
    commission_test()
        .given(vec![recorded(), frozen(2, G::PartiallyRefunded)])
        .when(react(3, G::PartialRefundSettled, OrderStatus::Completed, 0))
        .then_expect_events(vec![CommissionEvent::CommissionInvalidated(reaction_of(
            3,
            G::PartialRefundSettled,
            12_000,
        ))]);
}

#[test]
fn a_cancel_or_full_refund_invalidates_a_pending_or_frozen_commission() {
    for given in [
        vec![recorded()],
        vec![recorded(), frozen(2, G::RefundStarted)],
    ] {
        for signal in [G::Cancelled, G::RefundConfirmed] {
            let invalidated =
                CommissionEvent::CommissionInvalidated(reaction_of(3, signal, 12_000));
            commission_test()
                .given(given.clone())
                .when(react(3, signal, OrderStatus::Refunded, 12_000))
                .then_expect_events(vec![invalidated.clone()]);
            assert_eq!(
                effect(&given, &invalidated),
                to_wallet(WalletCommand::ReversePending(funds(
                    "COMMISSION",
                    CASHBACK_ID,
                    12_000
                )))
            );
        }
    }
}

#[test]
fn refund_after_release_opens_one_recovery_review_and_blocks_withdrawals() {
    // Acceptance case 6: no debit of available, no debt; one recovery; blocked.
    let given = vec![recorded(), released()];
    commission_test()
        .given(given.clone())
        .when(react(3, G::RefundConfirmed, OrderStatus::Refunded, 12_000))
        .then_expect_events(vec![recovery_opened(3, G::RefundConfirmed)]);
    let fx = effect(&given, &recovery_opened(3, G::RefundConfirmed)).unwrap();
    let WalletCommand::BlockWithdrawals(block) = fx.command else {
        panic!("expected a withdrawal block, got {:?}", fx.command)
    };
    assert_eq!(
        (block.ref_type.as_str(), block.ref_id.as_str()),
        ("RECOVERY_REVIEW", CASHBACK_ID)
    );
}

#[test]
fn replays_of_a_refund_after_release_create_nothing_more() {
    let given = vec![
        recorded(),
        released(),
        recovery_opened(3, G::RefundConfirmed),
    ];
    // The same signal again, a newer refund signal, and a late older one.
    for cmd in [
        react(3, G::RefundConfirmed, OrderStatus::Refunded, 12_000),
        react(4, G::RefundConfirmed, OrderStatus::Refunded, 12_000),
        react(5, G::Cancelled, OrderStatus::Cancelled, 12_000),
        react(2, G::RefundStarted, OrderStatus::Refunding, 12_000),
    ] {
        commission_test()
            .given(given.clone())
            .when(cmd)
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_signal_at_or_below_the_last_applied_revision_is_ignored() {
    commission_test()
        .given(vec![recorded(), frozen(3, G::RefundStarted)])
        .when(react(2, G::RefundRejected, OrderStatus::Completed, 12_000))
        .then_expect_events(vec![]);
    commission_test()
        .given(vec![recorded()])
        .when(react(1, G::Cancelled, OrderStatus::Cancelled, 12_000))
        .then_expect_events(vec![]);
}

#[test]
fn signals_that_do_not_move_a_commission_write_nothing() {
    for signal in [G::None, G::Completed, G::AmountIncreased, G::RefundRejected] {
        commission_test()
            .given(vec![recorded()])
            .when(react(2, signal, OrderStatus::Completed, 12_000))
            .then_expect_events(vec![]);
    }
}

// ---------------------------------------------------------------------------------
// Manual resolution
// ---------------------------------------------------------------------------------

#[test]
fn finance_resolves_a_recovery_review_by_hand_with_actor_and_reason() {
    let given = vec![
        recorded(),
        released(),
        recovery_opened(3, G::RefundConfirmed),
    ];
    let resolved = CommissionEvent::RecoveryManuallyResolved(RecoveryManuallyResolved {
        actor: "fin-budi".to_owned(),
        reason: "recovered from the next payout by agreement".to_owned(),
        resolved_at: t(20),
        amount_minor: 12_000,
    });
    commission_test()
        .given(given.clone())
        .when(resolve())
        .then_expect_events(vec![resolved.clone()]);
    let fx = effect(&given, &resolved).unwrap();
    assert!(
        matches!(fx.command, WalletCommand::UnblockWithdrawals(b) if b.ref_id.as_str() == CASHBACK_ID)
    );
}

#[test]
fn resolving_a_commission_that_is_not_in_recovery_review_is_refused() {
    for (given, from) in [
        (vec![recorded()], C::Pending),
        (vec![recorded(), released()], C::Available),
        (
            vec![
                recorded(),
                released(),
                recovery_opened(3, G::RefundConfirmed),
                CommissionEvent::RecoveryManuallyResolved(RecoveryManuallyResolved {
                    actor: "fin-budi".to_owned(),
                    reason: "done".to_owned(),
                    resolved_at: t(20),
                    amount_minor: 12_000,
                }),
            ],
            C::ManualResolved,
        ),
    ] {
        commission_test()
            .given(given)
            .when(resolve())
            .then_expect_error(CommissionError::IllegalTransition {
                from,
                to: C::ManualResolved,
            });
    }
}

// ---------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------

#[test]
fn the_transition_table_allows_exactly_the_seven_edges_of_r_com_1() {
    let legal = [
        (C::Pending, C::Available),
        (C::Pending, C::Invalid),
        (C::Pending, C::Frozen),
        (C::Frozen, C::Pending),
        (C::Frozen, C::Invalid),
        (C::Available, C::RecoveryReview),
        (C::RecoveryReview, C::ManualResolved),
    ];
    let mut allowed = 0;
    for from in C::ALL {
        for to in C::ALL {
            let expected = legal.contains(&(from, to));
            assert_eq!(from.can_move_to(to), expected, "{from:?} → {to:?}");
            allowed += usize::from(expected);
        }
    }
    assert_eq!(allowed, 7);
    assert_eq!(COMMISSION_EDGES.len(), 7);
}

#[test]
fn every_reaction_is_a_legal_edge_and_terminal_states_ignore_every_signal() {
    for status in C::ALL {
        for signal in G::ALL {
            if let Some(to) = reaction(status, signal) {
                assert!(status.can_move_to(to), "{status:?} --{signal:?}--> {to:?}");
            }
        }
    }
    for status in [C::Invalid, C::RecoveryReview, C::ManualResolved] {
        for signal in G::ALL {
            assert_eq!(reaction(status, signal), None, "{status:?} {signal:?}");
        }
    }
}

#[test]
fn reactions_follow_the_table_row_by_row() {
    let rows = [
        (C::Pending, G::AmountDecreased, Some(C::Frozen)),
        (C::Pending, G::RefundStarted, Some(C::Frozen)),
        (C::Pending, G::PartiallyRefunded, Some(C::Frozen)),
        (C::Pending, G::RefundConfirmed, Some(C::Invalid)),
        (C::Pending, G::Cancelled, Some(C::Invalid)),
        (C::Pending, G::Completed, None),
        (C::Pending, G::AmountIncreased, None),
        (C::Pending, G::None, None),
        (C::Frozen, G::RefundRejected, Some(C::Pending)),
        (C::Frozen, G::PartialRefundSettled, Some(C::Pending)),
        (C::Frozen, G::Completed, Some(C::Pending)),
        (C::Frozen, G::AmountIncreased, Some(C::Pending)),
        (C::Frozen, G::RefundConfirmed, Some(C::Invalid)),
        (C::Frozen, G::Cancelled, Some(C::Invalid)),
        (C::Frozen, G::AmountDecreased, None),
        (C::Frozen, G::RefundStarted, None),
        (C::Available, G::AmountDecreased, Some(C::RecoveryReview)),
        (C::Available, G::RefundStarted, Some(C::RecoveryReview)),
        (C::Available, G::PartiallyRefunded, Some(C::RecoveryReview)),
        (C::Available, G::RefundConfirmed, Some(C::RecoveryReview)),
        (C::Available, G::Cancelled, Some(C::RecoveryReview)),
        (C::Available, G::RefundRejected, None),
        (C::Available, G::Completed, None),
    ];
    for (status, signal, expected) in rows {
        assert_eq!(reaction(status, signal), expected, "{status:?} {signal:?}");
    }
}

// ---------------------------------------------------------------------------------
// Money through a real wallet
// ---------------------------------------------------------------------------------

/// Decide each commission command, apply its events, and send each event's wallet
/// effect to one wallet, as the ingest unit and the settlement job would.
fn run_with_wallet(commands: Vec<CommissionCommand>) -> (Commission, Wallet) {
    let mut commission = Commission::default();
    let mut wallet = Wallet::default();
    let open = WalletCommand::Open(OpenWallet {
        user_id: id("u-1"),
        currency: idr(),
    });
    for e in wallet.decide(open).unwrap() {
        wallet.apply(e);
    }
    for cmd in commands {
        for event in commission.decide(cmd).unwrap() {
            if let Some(fx) = commission.wallet_effect(&event).unwrap() {
                assert_eq!(fx.wallet_id, id("w-u-1-IDR"));
                for w in wallet.decide(fx.command).unwrap() {
                    assert_eq!(wallet.check(&w), Ok(()));
                    wallet.apply(w);
                }
            }
            assert_eq!(commission.check(&event), Ok(()));
            commission.apply(event);
        }
    }
    (commission, wallet)
}

#[test]
fn a_reduced_then_released_commission_moves_exactly_its_final_amount() {
    let (c, w) = run_with_wallet(vec![
        record(OrderStatus::Pending),
        react(
            2,
            G::PartiallyRefunded,
            OrderStatus::PartiallyRefunded,
            7_200,
        ),
        react(3, G::PartialRefundSettled, OrderStatus::Completed, 7_200),
        release(release_at()),
    ]);
    let s = c.record.unwrap();
    assert_eq!(
        (s.status, s.amount_minor, s.recorded_amount_minor),
        (C::Available, 7_200, 12_000)
    );
    assert_eq!(
        w.balances,
        Buckets {
            pending_minor: 0,
            available_minor: 7_200,
            frozen_minor: 0,
            risk_hold_minor: 0
        }
    );
}

#[test]
fn refund_after_release_never_debits_available_and_blocks_withdrawals_until_resolved() {
    let (_, blocked) = run_with_wallet(vec![
        record(OrderStatus::Pending),
        release(release_at()),
        react(3, G::RefundConfirmed, OrderStatus::Refunded, 12_000),
    ]);
    assert_eq!(blocked.balances.available_minor, 12_000);
    assert_eq!(blocked.withdrawal_blocks.len(), 1);
    let (c, resolved) = run_with_wallet(vec![
        record(OrderStatus::Pending),
        release(release_at()),
        react(3, G::RefundConfirmed, OrderStatus::Refunded, 12_000),
        resolve(),
    ]);
    assert!(resolved.withdrawal_blocks.is_empty());
    assert_eq!(c.record.unwrap().status, C::ManualResolved);
}

#[test]
fn a_cancelled_commission_leaves_nothing_in_pending() {
    let (_, w) = run_with_wallet(vec![
        record(OrderStatus::Pending),
        react(2, G::AmountDecreased, OrderStatus::Pending, 6_000),
        react(3, G::Cancelled, OrderStatus::Cancelled, 6_000),
    ]);
    assert_eq!(w.balances, Buckets::default());
}

// ---------------------------------------------------------------------------------
// Decide::check and wire formats
// ---------------------------------------------------------------------------------

#[test]
fn check_refuses_events_that_do_not_follow_from_the_commission() {
    let empty = Commission::default();
    let pending = state(&[recorded()]);
    assert_eq!(empty.check(&recorded()), Ok(()));
    assert!(pending.check(&recorded()).is_err(), "recorded twice");
    assert!(empty.check(&released()).is_err(), "release before record");
    // PENDING → MANUAL_RESOLVED is not an edge.
    let resolved = CommissionEvent::RecoveryManuallyResolved(RecoveryManuallyResolved {
        actor: "x".to_owned(),
        reason: "x".to_owned(),
        resolved_at: t(20),
        amount_minor: 12_000,
    });
    assert!(pending.check(&resolved).is_err());
    // A release of another amount than the commission's.
    let CommissionEvent::CommissionReleased(mut r) = released() else {
        unreachable!()
    };
    r.amount_minor = 13_000;
    assert!(pending
        .check(&CommissionEvent::CommissionReleased(r))
        .is_err());
    // An unfreeze whose reduction does not add up.
    let frozen_state = state(&[recorded(), frozen(2, G::AmountDecreased)]);
    let bad = CommissionEvent::CommissionUnfrozen(CommissionUnfrozen {
        order_revision: 3,
        signal: G::Completed,
        order_updated_at: t(12),
        amount_minor: 7_000,
        reduced_by_minor: 4_000,
        adjustment_ref_id: Some("x".to_owned()),
    });
    assert!(frozen_state.check(&bad).is_err());
    // A non-positive recorded amount.
    let CommissionEvent::CommissionRecorded(mut zero) = recorded() else {
        unreachable!()
    };
    zero.amount_minor = 0;
    let zero = CommissionEvent::CommissionRecorded(zero);
    assert!(empty.check(&zero).is_err());
    assert!(empty.wallet_effect(&zero).is_err());
    assert_eq!(Commission::ledger_ref(&recorded()), None);
}

#[test]
fn a_recorded_commission_has_a_stable_stored_shape() {
    let expected = serde_json::json!({
        "type": "CommissionRecorded",
        "commission_id": "SHOPEE:5781234:CASHBACK",
        "order_id": "SHOPEE:5781234",
        "role": "CASHBACK",
        "beneficiary_user_id": "u-1",
        "wallet_id": "w-u-1-IDR",
        "currency": "IDR",
        "amount_minor": 12_000,
        "order_amounts": {"base_minor": 20_000, "cashback_minor": 12_000, "inviter_reward_minor": 2_000},
        "ordered_at": "2026-01-02T10:00:00Z",
        "release_at": "2026-01-16T10:00:00Z",
        "rules": {
            "rule_set_id": "SHOPEE:ID", "version": 1, "effective_from": "2026-01-01T00:00:00Z",
            "cashback_bps": 6000, "inviter_bps": 1000, "max_commission_base_bps": 800,
            "release_delay_days": 14
        },
        "order_revision": 1
    });
    assert_eq!(serde_json::to_value(recorded()).unwrap(), expected);
    assert_eq!(
        serde_json::from_value::<CommissionEvent>(expected).unwrap(),
        recorded()
    );
    let frozen_json = serde_json::to_value(frozen(2, G::AmountDecreased)).unwrap();
    assert_eq!(
        frozen_json,
        serde_json::json!({
            "type": "CommissionFrozen", "order_revision": 2, "signal": "AMOUNT_DECREASED",
            "order_updated_at": "2026-01-02T12:00:00Z", "amount_minor": 12_000
        })
    );
}

#[test]
fn commission_commands_parse_from_json_and_refuse_unknown_fields() {
    assert_eq!(
        serde_json::from_str::<CommissionCommand>(
            r#"{"type":"Release","now":"2026-01-16T10:00:00Z"}"#
        )
        .unwrap(),
        release(release_at())
    );
    for bad in [
        r#"{"type":"Release","now":"2026-01-16T10:00:00Z","force":true}"#,
        r#"{"type":"ResolveRecovery","actor":"fin","reason":"  ","resolved_at":"2026-01-16T10:00:00Z"}"#,
        r#"{"type":"ReactToOrder","order_revision":2,"signal":"REFUND_STARTED","order_status":"REFUNDING","amount_minor":-1,"order_updated_at":"2026-01-16T10:00:00Z"}"#,
        r#"{"type":"Settle","now":"2026-01-16T10:00:00Z"}"#,
    ] {
        assert!(
            serde_json::from_str::<CommissionCommand>(bad).is_err(),
            "{bad}"
        );
    }
}
