//! Withdrawal tests: the R-PAY-2 table pair by pair (every edge allowed, every other
//! pair refused), the provider-report fold, given/when/then scenarios through the
//! cqrs-es `TestFramework`, and the wallet effects applied to a real wallet.

use super::*;
use crate::wallet::{OpenWallet, Wallet, WalletError};
use chrono::TimeZone;
use cqrs_es::test::TestFramework;
use ProviderReport as R;
use WithdrawalStatus as S;

fn t(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 10, minute, 0).unwrap()
}

fn id(s: &str) -> BoundedId {
    BoundedId::parse(s).unwrap()
}

fn idr() -> Currency {
    Currency::parse("IDR").unwrap()
}

fn destination() -> PayoutDestination {
    PayoutDestination {
        account_id: "pa-1".into(),
        channel_code: "ID_BCA".into(),
        account_number: "1234567890".into(),
        account_holder: "Budi".into(),
    }
}

fn request_cmd(review: Review) -> WithdrawalCommand {
    WithdrawalCommand::Request(Box::new(RequestWithdrawal {
        withdrawal_id: id("wd-1"),
        user_id: id("u-1"),
        wallet_id: id("w-1"),
        currency: idr(),
        amount_minor: AmountMinor::parse(50_000).unwrap(),
        provider: id("xendit"),
        destination: destination(),
        review,
        actor: "user:u-1".into(),
        now: t(0),
    }))
}

fn requested() -> WithdrawalEvent {
    WithdrawalEvent::WithdrawalRequested(WithdrawalRequested {
        withdrawal_id: "wd-1".into(),
        user_id: "u-1".into(),
        wallet_id: "w-1".into(),
        currency: idr(),
        amount_minor: 50_000,
        provider: "xendit".into(),
        destination: destination(),
        review: Review::Manual {
            reasons: vec!["amount above 40000".into()],
        },
        actor: "user:u-1".into(),
        requested_at: t(0),
    })
}

fn decided(actor: &str, reason: &str, minute: u32) -> Decided {
    Decided {
        actor: actor.into(),
        reason: reason.into(),
        at: t(minute),
    }
}

fn approved() -> WithdrawalEvent {
    WithdrawalEvent::WithdrawalApproved(decided("op:ana", "looks fine", 1))
}

fn started(attempt: u32, key: &str) -> WithdrawalEvent {
    WithdrawalEvent::PayoutAttemptStarted(PayoutAttemptStarted {
        attempt,
        idempotency_key: key.into(),
        actor: "worker".into(),
        at: t(2),
    })
}

fn outcome(source: OutcomeSource, attempt: Option<u32>, key: &str, reason: &str) -> PayoutOutcome {
    PayoutOutcome {
        actor: "worker".into(),
        reason: reason.into(),
        source,
        attempt,
        idempotency_key: key.into(),
        provider_payout_id: None,
        call: None,
        at: t(3),
    }
}

fn record(report: R, source: OutcomeSource, attempt: Option<u32>, key: &str) -> WithdrawalCommand {
    WithdrawalCommand::RecordOutcome(Box::new(RecordOutcome {
        report,
        source,
        attempt,
        idempotency_key: key.into(),
        provider_payout_id: None,
        call: None,
        actor: "worker".into(),
        now: t(3),
    }))
}

fn state_in(status: WithdrawalStatus) -> Withdrawal {
    let mut w = Withdrawal::default();
    w.apply(requested());
    w.record.as_mut().unwrap().status = status;
    w
}

fn fold_events(given: &[WithdrawalEvent]) -> Withdrawal {
    let mut w = Withdrawal::default();
    for e in given {
        w.check(e).unwrap();
        w.apply(e.clone());
    }
    w
}

fn decide_on(given: &[WithdrawalEvent], cmd: WithdrawalCommand) -> Vec<WithdrawalEvent> {
    let w = fold_events(given);
    let events = w.decide(cmd).unwrap();
    let mut after = w;
    for e in &events {
        after.check(e).unwrap();
        after.apply(e.clone());
    }
    events
}

fn status_of(given: &[WithdrawalEvent]) -> WithdrawalStatus {
    fold_events(given).record.unwrap().status
}

/// An event that moves the withdrawal to `to` (and changes nothing else).
fn event_to(to: WithdrawalStatus) -> WithdrawalEvent {
    let o = outcome(OutcomeSource::Webhook, None, "wd-1", "table");
    match to {
        S::Requested => requested(),
        S::Rejected => WithdrawalEvent::WithdrawalRejected(decided("op", "no", 1)),
        S::PayoutPending => WithdrawalEvent::WithdrawalApproved(decided("op", "ok", 1)),
        S::Processing => WithdrawalEvent::PayoutAccepted(o),
        S::ProviderUnknown => WithdrawalEvent::PayoutOutcomeUnknown(o),
        S::FundsHeld => WithdrawalEvent::PayoutFundsHeld(o),
        S::Paid => WithdrawalEvent::PayoutSucceeded(o),
        S::Failed => WithdrawalEvent::PayoutFailed(o),
    }
}

// ---------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------

#[test]
fn every_r_pay_2_edge_is_allowed_and_every_other_pair_refused() {
    let spec_edges = [
        (S::Requested, S::Rejected),
        (S::Requested, S::PayoutPending),
        (S::PayoutPending, S::Processing),
        (S::PayoutPending, S::ProviderUnknown),
        (S::PayoutPending, S::Failed),
        (S::ProviderUnknown, S::Processing),
        (S::ProviderUnknown, S::PayoutPending),
        (S::Processing, S::Paid),
        (S::Processing, S::FundsHeld),
        (S::Processing, S::Failed),
        (S::FundsHeld, S::Processing),
    ];
    let extensions = [
        (S::PayoutPending, S::FundsHeld),
        (S::FundsHeld, S::ProviderUnknown),
        (S::FundsHeld, S::Failed),
    ];
    let mut checked = 0;
    for from in S::ALL {
        for to in S::ALL {
            let listed = spec_edges.contains(&(from, to)) || extensions.contains(&(from, to));
            assert_eq!(from.can_move_to(to), listed, "{from:?} -> {to:?}");
            if to == S::Requested {
                // Requested is where a stream starts, never an edge target.
                assert!(!listed);
                continue;
            }
            let w = state_in(from);
            let verdict = w.check(&event_to(to));
            assert_eq!(verdict.is_ok(), listed, "{from:?} -> {to:?}: {verdict:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 8 * 7);
    assert_eq!(WITHDRAWAL_EDGES.len(), spec_edges.len() + extensions.len());
    for s in S::ALL {
        assert_eq!(
            s.is_terminal(),
            !S::ALL.iter().any(|to| s.can_move_to(*to)),
            "{s:?}: terminal means no edge leaves it"
        );
    }
}

#[test]
fn every_fold_of_a_provider_report_walks_edges_only() {
    let reports = [
        R::Accepted,
        R::Succeeded,
        R::Failed {
            code: "X".into(),
            recoverable: false,
        },
        R::Failed {
            code: "INSUFFICIENT_BALANCE".into(),
            recoverable: true,
        },
        R::Refused {
            code: "X".into(),
            recoverable: false,
        },
        R::Refused {
            code: "INSUFFICIENT_BALANCE".into(),
            recoverable: true,
        },
        R::Absent,
        R::Unknown {
            reason: "timeout".into(),
        },
        R::Reversed,
    ];
    for from in S::ALL {
        for report in &reports {
            if let Fold::Move(path) = targets(from, report) {
                let mut at = from;
                for to in path {
                    assert!(at.can_move_to(to), "{from:?} {report:?}: {at:?} -> {to:?}");
                    at = to;
                }
            }
            // Money never moves on an unknown outcome.
            if let R::Unknown { .. } = report {
                if let Fold::Move(path) = targets(from, report) {
                    assert!(!path.contains(&S::Failed) && !path.contains(&S::Paid));
                }
            }
        }
    }
}

#[test]
fn a_reversal_after_paid_contradicts_and_before_paid_fails_for_good() {
    assert_eq!(targets(S::Paid, &R::Reversed), Fold::Contradiction);
    assert_eq!(
        targets(S::Processing, &R::Reversed),
        Fold::Move(vec![S::Failed])
    );
    assert_eq!(
        targets(S::ProviderUnknown, &R::Reversed),
        Fold::Move(vec![S::Processing, S::Failed])
    );
    assert_eq!(targets(S::Failed, &R::Reversed), Fold::Stay);
}

// ---------------------------------------------------------------------------------
// Request and review
// ---------------------------------------------------------------------------------

#[test]
fn an_auto_reviewed_request_is_approved_by_the_risk_rule_in_the_same_decision() {
    let events = Withdrawal::default()
        .decide(request_cmd(Review::Auto))
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].name(), "WithdrawalApproved");
    assert_eq!(events[1].actor(), RISK_RULE_ACTOR);
    assert_eq!(status_of(&events), S::PayoutPending);
}

#[test]
fn a_repeated_request_writes_nothing_and_a_different_one_under_the_id_is_refused() {
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested()])
        .when(request_cmd(Review::Auto))
        .then_expect_events(vec![]);
    let WithdrawalCommand::Request(mut other) = request_cmd(Review::Auto) else {
        unreachable!()
    };
    other.amount_minor = AmountMinor::parse(1).unwrap();
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested()])
        .when(WithdrawalCommand::Request(other))
        .then_expect_error(WithdrawalError::IdTaken { id: "wd-1".into() });
}

#[test]
fn only_a_requested_withdrawal_is_reviewed_and_a_reason_is_required() {
    let reject = |reason: &str| {
        WithdrawalCommand::Reject(Decision {
            actor: "op:ana".into(),
            reason: reason.into(),
            now: t(1),
        })
    };
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested()])
        .when(reject(" "))
        .then_expect_error(WithdrawalError::ReasonMissing);
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested()])
        .when(reject("name mismatch"))
        .then_expect_events(vec![WithdrawalEvent::WithdrawalRejected(decided(
            "op:ana",
            "name mismatch",
            1,
        ))]);
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested(), approved()])
        .when(reject("too late"))
        .then_expect_error(WithdrawalError::NotReviewable {
            status: S::PayoutPending,
        });
    TestFramework::<Withdrawal>::with(())
        .given_no_previous_events()
        .when(reject("x"))
        .then_expect_error(WithdrawalError::NotFound);
}

// ---------------------------------------------------------------------------------
// Attempts and outcomes
// ---------------------------------------------------------------------------------

#[test]
fn an_attempt_is_recorded_before_the_call_and_a_second_waits_for_its_answer() {
    let start = || {
        WithdrawalCommand::StartAttempt(StartAttempt {
            actor: "worker".into(),
            now: t(2),
        })
    };
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested(), approved()])
        .when(start())
        .then_expect_events(vec![started(1, "wd-1")]);
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested(), approved(), started(1, "wd-1")])
        .when(start())
        .then_expect_error(WithdrawalError::AttemptOpen { attempt: 1 });
    TestFramework::<Withdrawal>::with(())
        .given(vec![requested()])
        .when(start())
        .then_expect_error(WithdrawalError::NotPayable {
            status: S::Requested,
        });
}

#[test]
fn a_timeout_is_unknown_then_the_query_finds_the_payout_paid() {
    let given = vec![requested(), approved(), started(1, "wd-1")];
    let events = decide_on(
        &given,
        record(
            R::Unknown {
                reason: "timeout".into(),
            },
            OutcomeSource::Call,
            Some(1),
            "wd-1",
        ),
    );
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name(), "PayoutOutcomeUnknown");
    let mut all = given.clone();
    all.extend(events);
    assert_eq!(fold_events(&all).record.unwrap().open_attempt, None);
    let found = decide_on(
        &all,
        record(R::Succeeded, OutcomeSource::Query, None, "wd-1"),
    );
    let names: Vec<_> = found.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["PayoutAccepted", "PayoutSucceeded"]);
}

#[test]
fn a_query_that_finds_nothing_sends_it_back_to_payout_pending_under_the_same_key() {
    let given = vec![
        requested(),
        approved(),
        started(1, "wd-1"),
        WithdrawalEvent::PayoutOutcomeUnknown(outcome(OutcomeSource::Call, Some(1), "wd-1", "t")),
    ];
    let events = decide_on(
        &given,
        record(R::Absent, OutcomeSource::Query, None, "wd-1"),
    );
    assert_eq!(events[0].name(), "PayoutConfirmedAbsent");
    let mut all = given;
    all.extend(events);
    let w = fold_events(&all);
    assert_eq!(w.record.as_ref().unwrap().status, S::PayoutPending);
    let retry = w
        .decide(WithdrawalCommand::StartAttempt(StartAttempt {
            actor: "worker".into(),
            now: t(2),
        }))
        .unwrap();
    assert_eq!(retry, vec![started(2, "wd-1")]);
}

#[test]
fn funds_held_retries_under_a_new_reference_and_ignores_the_old_one() {
    let given = vec![
        requested(),
        approved(),
        started(1, "wd-1"),
        WithdrawalEvent::PayoutAccepted(outcome(OutcomeSource::Call, Some(1), "wd-1", "ok")),
    ];
    let held = decide_on(
        &given,
        record(
            R::Failed {
                code: "INSUFFICIENT_BALANCE".into(),
                recoverable: true,
            },
            OutcomeSource::Webhook,
            None,
            "wd-1",
        ),
    );
    assert_eq!(held[0].name(), "PayoutFundsHeld");
    let mut all = given;
    all.extend(held);
    let w = fold_events(&all);
    assert_eq!(w.record.as_ref().unwrap().idempotency_key(), "wd-1:r1");
    // The same failure told again about the old reference changes nothing.
    let again = decide_on(
        &all,
        record(
            R::Failed {
                code: "INSUFFICIENT_BALANCE".into(),
                recoverable: true,
            },
            OutcomeSource::Webhook,
            None,
            "wd-1",
        ),
    );
    assert!(again.is_empty());
    // A success of the old reference would be a second payout: a contradiction.
    let old_paid = decide_on(
        &all,
        record(R::Succeeded, OutcomeSource::Webhook, None, "wd-1"),
    );
    assert_eq!(old_paid[0].name(), "ProviderContradicted");
    assert_eq!(withdrawal_of_reference("wd-1:r1"), "wd-1");
    assert_eq!(withdrawal_of_reference("wd-1"), "wd-1");
    assert_eq!(withdrawal_of_reference("wd:r"), "wd:r");
}

#[test]
fn a_webhook_overtaking_the_call_answer_pays_once_and_the_answer_only_closes_the_attempt() {
    let given = vec![requested(), approved(), started(1, "wd-1")];
    let paid = decide_on(
        &given,
        record(R::Succeeded, OutcomeSource::Webhook, None, "wd-1"),
    );
    let mut all = given;
    all.extend(paid);
    assert_eq!(status_of(&all), S::Paid);
    let answer = decide_on(
        &all,
        record(R::Accepted, OutcomeSource::Call, Some(1), "wd-1"),
    );
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].name(), "PayoutAttemptEnded");
    all.extend(answer);
    assert_eq!(fold_events(&all).record.unwrap().open_attempt, None);
}

#[test]
fn out_of_order_and_repeated_reports_never_move_money_twice() {
    // PAID before PROCESSING, then PROCESSING, PAID again, FAILED after PAID.
    let mut all = vec![
        requested(),
        approved(),
        started(1, "wd-1"),
        WithdrawalEvent::PayoutAccepted(outcome(OutcomeSource::Call, Some(1), "wd-1", "ok")),
    ];
    let mut money_events = 0;
    for report in [
        R::Succeeded,
        R::Accepted,
        R::Succeeded,
        R::Failed {
            code: "X".into(),
            recoverable: false,
        },
    ] {
        let events = decide_on(&all, record(report, OutcomeSource::Webhook, None, "wd-1"));
        let w = fold_events(&all);
        money_events += events
            .iter()
            .filter(|e| w.wallet_effect(e).unwrap().is_some())
            .count();
        all.extend(events);
    }
    assert_eq!(money_events, 1);
    let s = fold_events(&all).record.unwrap();
    assert_eq!(s.status, S::Paid);
    assert_eq!(s.contradictions, 1);
}

#[test]
fn an_answer_to_an_attempt_already_closed_writes_nothing() {
    let given = vec![
        requested(),
        approved(),
        started(1, "wd-1"),
        WithdrawalEvent::PayoutOutcomeUnknown(outcome(
            OutcomeSource::Call,
            Some(1),
            "wd-1",
            "interrupted",
        )),
    ];
    let late = decide_on(
        &given,
        record(R::Accepted, OutcomeSource::Call, Some(1), "wd-1"),
    );
    assert!(late.is_empty());
}

#[test]
fn attempts_stop_at_the_limit() {
    let mut w = state_in(S::PayoutPending);
    w.record.as_mut().unwrap().attempts = PAYOUT_ATTEMPTS_MAX;
    let err = w
        .decide(WithdrawalCommand::StartAttempt(StartAttempt {
            actor: "worker".into(),
            now: t(2),
        }))
        .unwrap_err();
    assert_eq!(err.code(), "PAYOUT_ATTEMPTS_EXHAUSTED");
}

// ---------------------------------------------------------------------------------
// Wallet effects against a real wallet
// ---------------------------------------------------------------------------------

fn wallet_with(available: i64) -> Wallet {
    let mut w = Wallet::default();
    let run = |w: &mut Wallet, cmd| {
        for e in w.decide(cmd).unwrap() {
            w.apply(e);
        }
    };
    run(
        &mut w,
        WalletCommand::Open(OpenWallet {
            user_id: id("u-1"),
            currency: idr(),
        }),
    );
    let funds = |ref_id: &str| MoveFunds {
        ref_type: id("COMMISSION"),
        ref_id: id(ref_id),
        amount_minor: AmountMinor::parse(available).unwrap(),
        currency: None,
        counterparty: None,
    };
    run(&mut w, WalletCommand::CreditPending(funds("c-1")));
    run(&mut w, WalletCommand::ReleasePending(funds("c-1")));
    w
}

fn apply_effect(
    wallet: &mut Wallet,
    withdrawal: &Withdrawal,
    event: &WithdrawalEvent,
) -> Result<(), WalletError> {
    if let Some(effect) = withdrawal.wallet_effect(event).unwrap() {
        assert_eq!(effect.wallet_id.as_str(), "w-1");
        for e in wallet.decide(effect.command)? {
            wallet.apply(e);
        }
    }
    Ok(())
}

#[test]
fn a_paid_withdrawal_moves_frozen_to_the_provider_and_a_failed_one_gives_it_back() {
    for (last, available, frozen) in [
        (R::Succeeded, 70_000, 0),
        (
            R::Failed {
                code: "INVALID_DESTINATION".into(),
                recoverable: false,
            },
            120_000,
            0,
        ),
    ] {
        let mut wallet = wallet_with(120_000);
        let mut w = Withdrawal::default();
        let mut events = w.decide(request_cmd(Review::Auto)).unwrap();
        events.extend(vec![started(1, "wd-1")]);
        for e in &events {
            apply_effect(&mut wallet, &w, e).unwrap();
            w.apply(e.clone());
        }
        assert_eq!(wallet.balances.frozen_minor, 50_000);
        for e in w
            .decide(record(last, OutcomeSource::Call, Some(1), "wd-1"))
            .unwrap()
        {
            apply_effect(&mut wallet, &w, &e).unwrap();
            w.apply(e);
        }
        assert_eq!(wallet.balances.available_minor, available);
        assert_eq!(wallet.balances.frozen_minor, frozen);
    }
}

#[test]
fn the_wallet_refuses_a_second_money_effect_even_if_the_withdrawal_stream_allowed_one() {
    let mut wallet = wallet_with(120_000);
    let w0 = Withdrawal::default();
    let req = requested();
    apply_effect(&mut wallet, &w0, &req).unwrap();
    let w = fold_events(&[req, approved()]);
    let paid = WithdrawalEvent::PayoutSucceeded(outcome(OutcomeSource::Webhook, None, "wd-1", "p"));
    apply_effect(&mut wallet, &w, &paid).unwrap();
    let failed = WithdrawalEvent::PayoutFailed(outcome(OutcomeSource::Webhook, None, "wd-1", "f"));
    let err = apply_effect(&mut wallet, &w, &failed).unwrap_err();
    assert_eq!(err.code(), "FREEZE_NOT_OPEN");
    let err = apply_effect(&mut wallet, &w, &paid).unwrap_err();
    assert_eq!(err.code(), "FREEZE_NOT_OPEN");
}

// ---------------------------------------------------------------------------------
// Daily limits
// ---------------------------------------------------------------------------------

#[test]
fn the_day_counts_each_withdrawal_once_and_refuses_past_either_limit() {
    use limits::{CountWithdrawal, LimitError, WithdrawalDay};
    let count = |wd: &str, amount: i64| CountWithdrawal {
        withdrawal_id: id(wd),
        amount_minor: AmountMinor::parse(amount).unwrap(),
        count_limit: 2,
        amount_limit_minor: 100,
    };
    let mut day = WithdrawalDay::default();
    for cmd in [count("a", 40), count("a", 40), count("b", 60)] {
        for e in day.decide(cmd).unwrap() {
            day.check(&e).unwrap();
            day.apply(e);
        }
    }
    assert_eq!((day.count, day.amount_minor), (2, 100));
    assert_eq!(
        day.decide(count("c", 1)).unwrap_err(),
        LimitError::DailyCountExceeded { count: 2, limit: 2 }
    );
    let mut small = WithdrawalDay::default();
    for e in small.decide(count("a", 90)).unwrap() {
        small.apply(e);
    }
    assert_eq!(
        small.decide(count("b", 11)).unwrap_err().code(),
        "DAILY_AMOUNT_LIMIT"
    );
    assert_eq!(
        limits::day_stream_id(
            "u-1",
            "IDR",
            chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap()
        ),
        "u-1:IDR:20260301"
    );
}
