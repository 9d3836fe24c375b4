//! Wallet aggregate tests: given these events, when this command, then these events
//! or this error (cqrs-es `TestFramework`, which calls `handle`, which calls `decide`).
//!
//! Expected events are written out literally (delta, before, after) rather than
//! computed with `EntryType::delta`, so the transition table itself is under test.
//! Given histories are built by [`History`], which does use the table, and every
//! given event passes `Wallet::check` (debug-asserted inside `apply`).

use super::*;
use crate::decide::{Decide, LedgerRef};
use crate::money::{AmountMinor, BoundedId, Currency};
use cqrs_es::test::TestFramework;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

type WalletTest = TestFramework<Wallet>;

fn wallet_test() -> WalletTest {
    TestFramework::<Wallet>::with(())
}

fn id(s: &str) -> BoundedId {
    BoundedId::parse(s).unwrap()
}

fn amount(v: i64) -> AmountMinor {
    AmountMinor::parse(v).unwrap()
}

fn idr() -> Currency {
    Currency::parse("IDR").unwrap()
}

fn usd() -> Currency {
    Currency::parse("USD").unwrap()
}

/// Balances in bucket order: pending, available, frozen, risk_hold.
fn bal(pending: i64, available: i64, frozen: i64, risk_hold: i64) -> Buckets {
    Buckets {
        pending_minor: pending,
        available_minor: available,
        frozen_minor: frozen,
        risk_hold_minor: risk_hold,
    }
}

fn zero() -> Buckets {
    Buckets::default()
}

fn opened_event() -> WalletEvent {
    WalletEvent::WalletOpened {
        user_id: "u-1".to_owned(),
        currency: idr(),
    }
}

fn open_cmd() -> WalletCommand {
    WalletCommand::Open(OpenWallet {
        user_id: id("u-1"),
        currency: idr(),
    })
}

fn funds(ref_type: &str, ref_id: &str, amount_minor: i64) -> MoveFunds {
    MoveFunds {
        ref_type: id(ref_type),
        ref_id: id(ref_id),
        amount_minor: amount(amount_minor),
        currency: None,
        counterparty: None,
    }
}

fn funds_in(ref_type: &str, ref_id: &str, amount_minor: i64, currency: Currency) -> MoveFunds {
    MoveFunds {
        currency: Some(currency),
        ..funds(ref_type, ref_id, amount_minor)
    }
}

fn block_ref(ref_type: &str, ref_id: &str, reason: Option<&str>) -> BlockRef {
    BlockRef {
        ref_type: id(ref_type),
        ref_id: id(ref_id),
        reason: reason.map(str::to_owned),
    }
}

fn movement(
    ref_type: &str,
    ref_id: &str,
    entry_type: EntryType,
    amount_minor: i64,
    delta: Buckets,
    before: Buckets,
    after: Buckets,
) -> Movement {
    Movement {
        ref_type: ref_type.to_owned(),
        ref_id: ref_id.to_owned(),
        entry_type,
        amount_minor,
        delta,
        before,
        after,
        counterparty: None,
    }
}

/// A movement command constructor, e.g. `WalletCommand::CreditPending`.
type MoveCmd = fn(MoveFunds) -> WalletCommand;

/// Every movement command, paired with its entry type, for table-driven tests.
fn movement_commands() -> Vec<(MoveCmd, EntryType)> {
    vec![
        (WalletCommand::CreditPending, EntryType::CreditPending),
        (WalletCommand::ReleasePending, EntryType::ReleasePending),
        (WalletCommand::ReversePending, EntryType::ReversePending),
        (
            WalletCommand::FreezeForWithdrawal,
            EntryType::WithdrawFreeze,
        ),
        (WalletCommand::Unfreeze, EntryType::WithdrawUnfreeze),
        (WalletCommand::PayOutFrozen, EntryType::WithdrawPayout),
        (WalletCommand::PlaceRiskHold, EntryType::RiskHold),
        (WalletCommand::ReleaseRiskHold, EntryType::RiskHoldRelease),
    ]
}

/// A consistent event history for `given`: an opened wallet, then movements whose
/// before/after follow from the previous balance.
#[derive(Clone)]
struct History {
    events: Vec<WalletEvent>,
    balances: Buckets,
}

impl History {
    fn opened() -> Self {
        Self {
            events: vec![opened_event()],
            balances: zero(),
        }
    }

    fn moved(self, entry_type: EntryType, ref_id: &str, amount_minor: i64) -> Self {
        self.moved_ref(entry_type, "SETUP", ref_id, amount_minor)
    }

    fn moved_ref(
        mut self,
        entry_type: EntryType,
        ref_type: &str,
        ref_id: &str,
        amount_minor: i64,
    ) -> Self {
        let delta = entry_type.delta(amount_minor);
        let before = self.balances;
        let after = before.checked_add(&delta).expect("given history overflows");
        assert_eq!(
            after.first_broken_flag(),
            None,
            "given history goes negative"
        );
        self.events.push(WalletEvent::movement(movement(
            ref_type,
            ref_id,
            entry_type,
            amount_minor,
            delta,
            before,
            after,
        )));
        self.balances = after;
        self
    }

    /// A wallet holding exactly these balances, reached through real movements.
    fn with_balances(b: Buckets) -> Self {
        let (p, a, f, r) = (
            b.pending_minor,
            b.available_minor,
            b.frozen_minor,
            b.risk_hold_minor,
        );
        let released = a + f + r;
        let mut h = Self::opened();
        if p + released > 0 {
            h = h.moved(EntryType::CreditPending, "setup-credit", p + released);
        }
        if released > 0 {
            h = h.moved(EntryType::ReleasePending, "setup-release", released);
        }
        if f > 0 {
            h = h.moved(EntryType::WithdrawFreeze, "setup-freeze", f);
        }
        if r > 0 {
            h = h.moved(EntryType::RiskHold, "setup-hold", r);
        }
        assert_eq!(h.balances, b);
        h
    }

    /// `ref_type/ref_id` freezes `amount_minor` of available.
    fn frozen_by(self, ref_type: &str, ref_id: &str, amount_minor: i64) -> Self {
        self.moved_ref(EntryType::WithdrawFreeze, ref_type, ref_id, amount_minor)
    }

    /// A payout no freeze opened, as history written before pairing was enforced
    /// holds them: it leaves every open freeze as it was.
    fn legacy_payout(self, ref_id: &str, amount_minor: i64) -> Self {
        self.moved_ref(EntryType::WithdrawPayout, "LEGACY", ref_id, amount_minor)
    }

    fn blocked(mut self, ref_type: &str, ref_id: &str) -> Self {
        self.events.push(WalletEvent::WithdrawalsBlocked {
            ref_type: ref_type.to_owned(),
            ref_id: ref_id.to_owned(),
            reason: None,
        });
        self
    }

    fn unblocked(mut self, ref_type: &str, ref_id: &str) -> Self {
        self.events.push(WalletEvent::WithdrawalsUnblocked {
            ref_type: ref_type.to_owned(),
            ref_id: ref_id.to_owned(),
        });
        self
    }

    fn events(self) -> Vec<WalletEvent> {
        self.events
    }

    /// The wallet state these events produce.
    fn wallet(self) -> Wallet {
        let mut w = Wallet::default();
        for e in self.events {
            w.apply(e);
        }
        w
    }
}

// ---------------------------------------------------------------------------------
// Open
// ---------------------------------------------------------------------------------

#[test]
fn opening_a_new_wallet_records_its_owner_and_currency() {
    wallet_test()
        .given_no_previous_events()
        .when(open_cmd())
        .then_expect_events(vec![opened_event()]);
}

#[test]
fn opening_a_wallet_that_is_already_open_is_refused() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::Open(OpenWallet {
            user_id: id("u-2"),
            currency: usd(),
        }))
        .then_expect_error(WalletError::AlreadyOpen);
    assert_eq!(WalletError::AlreadyOpen.code(), "WALLET_ALREADY_OPEN");
}

#[test]
fn every_command_before_open_is_refused_as_wallet_not_found() {
    let mut commands: Vec<WalletCommand> = movement_commands()
        .into_iter()
        .map(|(cmd, _)| cmd(funds("COMMISSION", "c-1", 1500)))
        .collect();
    commands.push(WalletCommand::BlockWithdrawals(block_ref(
        "RISK_REVIEW",
        "r-1",
        None,
    )));
    commands.push(WalletCommand::UnblockWithdrawals(block_ref(
        "RISK_REVIEW",
        "r-1",
        None,
    )));
    assert_eq!(commands.len(), 10);
    for cmd in commands {
        let name = cmd.name();
        let result = wallet_test()
            .given_no_previous_events()
            .when(cmd)
            .inspect_result();
        assert_eq!(result, Err(WalletError::NotFound), "{name}");
    }
    assert_eq!(WalletError::NotFound.code(), "WALLET_NOT_FOUND");
}

// ---------------------------------------------------------------------------------
// Each movement, exact event
// ---------------------------------------------------------------------------------

#[test]
fn crediting_pending_adds_the_amount_to_pending_only() {
    wallet_test()
        .given(History::with_balances(bal(100, 20, 0, 0)).events())
        .when(WalletCommand::CreditPending(funds(
            "COMMISSION",
            "c-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::PendingCredited(movement(
            "COMMISSION",
            "c-1",
            EntryType::CreditPending,
            1500,
            bal(1500, 0, 0, 0),
            bal(100, 20, 0, 0),
            bal(1600, 20, 0, 0),
        ))]);
}

#[test]
fn crediting_pending_on_a_fresh_wallet_starts_from_zero() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::CreditPending(funds(
            "COMMISSION",
            "c-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::PendingCredited(movement(
            "COMMISSION",
            "c-1",
            EntryType::CreditPending,
            1500,
            bal(1500, 0, 0, 0),
            zero(),
            bal(1500, 0, 0, 0),
        ))]);
}

#[test]
fn releasing_pending_moves_the_amount_from_pending_to_available() {
    wallet_test()
        .given(History::with_balances(bal(2000, 300, 0, 0)).events())
        .when(WalletCommand::ReleasePending(funds(
            "COMMISSION",
            "c-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::PendingReleased(movement(
            "COMMISSION",
            "c-1",
            EntryType::ReleasePending,
            1500,
            bal(-1500, 1500, 0, 0),
            bal(2000, 300, 0, 0),
            bal(500, 1800, 0, 0),
        ))]);
}

#[test]
fn reversing_pending_removes_the_amount_from_the_wallet() {
    wallet_test()
        .given(History::with_balances(bal(2000, 300, 0, 0)).events())
        .when(WalletCommand::ReversePending(funds("REFUND", "rf-1", 1500)))
        .then_expect_events(vec![WalletEvent::PendingReversed(movement(
            "REFUND",
            "rf-1",
            EntryType::ReversePending,
            1500,
            bal(-1500, 0, 0, 0),
            bal(2000, 300, 0, 0),
            bal(500, 300, 0, 0),
        ))]);
}

#[test]
fn freezing_for_withdrawal_moves_available_to_frozen() {
    wallet_test()
        .given(History::with_balances(bal(10, 2000, 40, 0)).events())
        .when(WalletCommand::FreezeForWithdrawal(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalFrozen(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawFreeze,
            1500,
            bal(0, -1500, 1500, 0),
            bal(10, 2000, 40, 0),
            bal(10, 500, 1540, 0),
        ))]);
}

#[test]
fn unfreezing_returns_frozen_money_to_available() {
    wallet_test()
        .given(
            History::with_balances(bal(0, 1600, 0, 7))
                .frozen_by("WITHDRAWAL", "w-1", 1500)
                .events(),
        )
        .when(WalletCommand::Unfreeze(funds("WITHDRAWAL", "w-1", 1500)))
        .then_expect_events(vec![WalletEvent::WithdrawalUnfrozen(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawUnfreeze,
            1500,
            bal(0, 1500, -1500, 0),
            bal(0, 100, 1500, 7),
            bal(0, 1600, 0, 7),
        ))]);
}

#[test]
fn paying_out_frozen_money_removes_it_from_the_wallet() {
    wallet_test()
        .given(
            History::with_balances(bal(0, 1600, 500, 0))
                .frozen_by("WITHDRAWAL", "w-1", 1500)
                .events(),
        )
        .when(WalletCommand::PayOutFrozen(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::FrozenPaidOut(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawPayout,
            1500,
            bal(0, 0, -1500, 0),
            bal(0, 100, 2000, 0),
            bal(0, 100, 500, 0),
        ))]);
}

#[test]
fn placing_a_risk_hold_moves_available_to_risk_hold() {
    wallet_test()
        .given(History::with_balances(bal(5, 2000, 0, 100)).events())
        .when(WalletCommand::PlaceRiskHold(funds(
            "RISK_REVIEW",
            "r-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::RiskHoldPlaced(movement(
            "RISK_REVIEW",
            "r-1",
            EntryType::RiskHold,
            1500,
            bal(0, -1500, 0, 1500),
            bal(5, 2000, 0, 100),
            bal(5, 500, 0, 1600),
        ))]);
}

#[test]
fn releasing_a_risk_hold_returns_the_money_to_available() {
    wallet_test()
        .given(History::with_balances(bal(0, 10, 0, 1500)).events())
        .when(WalletCommand::ReleaseRiskHold(funds(
            "RISK_REVIEW",
            "r-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::RiskHoldReleased(movement(
            "RISK_REVIEW",
            "r-1",
            EntryType::RiskHoldRelease,
            1500,
            bal(0, 1500, 0, -1500),
            bal(0, 10, 0, 1500),
            bal(0, 1510, 0, 0),
        ))]);
}

#[test]
fn debiting_exactly_the_whole_bucket_leaves_it_at_zero() {
    wallet_test()
        .given(History::with_balances(bal(0, 1500, 0, 0)).events())
        .when(WalletCommand::FreezeForWithdrawal(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalFrozen(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawFreeze,
            1500,
            bal(0, -1500, 1500, 0),
            bal(0, 1500, 0, 0),
            bal(0, 0, 1500, 0),
        ))]);
}

#[test]
fn a_currency_guard_equal_to_the_wallet_currency_is_accepted() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::CreditPending(funds_in(
            "COMMISSION",
            "c-1",
            1500,
            idr(),
        )))
        .then_expect_events(vec![WalletEvent::PendingCredited(movement(
            "COMMISSION",
            "c-1",
            EntryType::CreditPending,
            1500,
            bal(1500, 0, 0, 0),
            zero(),
            bal(1500, 0, 0, 0),
        ))]);
}

// ---------------------------------------------------------------------------------
// Movement rejections
// ---------------------------------------------------------------------------------

#[test]
fn every_movement_in_another_currency_is_refused_with_currency_mismatch() {
    for (cmd, entry_type) in movement_commands() {
        let result = wallet_test()
            .given(History::with_balances(bal(5000, 5000, 5000, 5000)).events())
            .when(cmd(funds_in("COMMISSION", "c-1", 1500, usd())))
            .inspect_result();
        assert_eq!(
            result,
            Err(WalletError::CurrencyMismatch {
                given: usd(),
                wallet: idr(),
            }),
            "{}",
            entry_type.as_str()
        );
    }
    let err = WalletError::CurrencyMismatch {
        given: usd(),
        wallet: idr(),
    };
    assert_eq!(err.code(), "CURRENCY_MISMATCH");
    assert_eq!(err.field(), Some("currency"));
}

#[test]
fn debiting_more_than_a_bucket_holds_is_refused_for_every_debited_bucket() {
    // One row per debiting entry type; the debited bucket holds one unit too little
    // while every other bucket is generously funded (so only the debited one counts).
    let rows: Vec<(MoveCmd, Buckets, &str, i64)> = vec![
        (
            WalletCommand::ReleasePending,
            bal(1499, 9000, 9000, 9000),
            "pending",
            1499,
        ),
        (
            WalletCommand::ReversePending,
            bal(1499, 9000, 9000, 9000),
            "pending",
            1499,
        ),
        (
            WalletCommand::FreezeForWithdrawal,
            bal(9000, 1499, 9000, 9000),
            "available",
            1499,
        ),
        (
            WalletCommand::PlaceRiskHold,
            bal(9000, 1499, 9000, 9000),
            "available",
            1499,
        ),
        (
            WalletCommand::Unfreeze,
            bal(9000, 9000, 1499, 9000),
            "frozen",
            1499,
        ),
        (
            WalletCommand::PayOutFrozen,
            bal(9000, 9000, 1499, 9000),
            "frozen",
            1499,
        ),
        (
            WalletCommand::ReleaseRiskHold,
            bal(9000, 9000, 9000, 1499),
            "risk_hold",
            1499,
        ),
    ];
    for (cmd, balances, bucket, balance_minor) in rows {
        let command = cmd(funds("REF", "x-1", 1500));
        let name = command.name();
        let history = match command {
            // The freeze of REF/x-1 is open for 1,500, but a payout written before
            // pairing was enforced left the frozen bucket one unit short of it.
            WalletCommand::Unfreeze(_) | WalletCommand::PayOutFrozen(_) => {
                History::with_balances(bal(9000, 10_500, 0, 9000))
                    .frozen_by("REF", "x-1", 1500)
                    .legacy_payout("old-1", 1)
            }
            _ => History::with_balances(balances),
        };
        let result = wallet_test()
            .given(history.events())
            .when(command)
            .inspect_result();
        assert_eq!(
            result,
            Err(WalletError::InsufficientBalance {
                bucket,
                balance_minor,
                amount_minor: 1500,
            }),
            "{name}"
        );
    }
}

#[test]
fn debiting_an_empty_bucket_on_a_fresh_wallet_is_refused() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::ReleasePending(funds("COMMISSION", "c-1", 1)))
        .then_expect_error(WalletError::InsufficientBalance {
            bucket: "pending",
            balance_minor: 0,
            amount_minor: 1,
        });
    let err = WalletError::InsufficientBalance {
        bucket: "frozen",
        balance_minor: 0,
        amount_minor: 1,
    };
    assert_eq!(err.code(), "INSUFFICIENT_BALANCE");
    assert_eq!(err.field(), Some("amount_minor"));
}

#[test]
fn crediting_pending_past_i64_max_is_refused_as_overflow() {
    wallet_test()
        .given(History::with_balances(bal(i64::MAX - 10, 0, 0, 0)).events())
        .when(WalletCommand::CreditPending(funds("COMMISSION", "c-1", 11)))
        .then_expect_error(WalletError::BalanceOverflow { bucket: "pending" });
    assert_eq!(
        WalletError::BalanceOverflow { bucket: "pending" }.code(),
        "BALANCE_OVERFLOW"
    );
}

#[test]
fn crediting_pending_up_to_exactly_i64_max_is_accepted() {
    wallet_test()
        .given(History::with_balances(bal(i64::MAX - 10, 0, 0, 0)).events())
        .when(WalletCommand::CreditPending(funds("COMMISSION", "c-1", 10)))
        .then_expect_events(vec![WalletEvent::PendingCredited(movement(
            "COMMISSION",
            "c-1",
            EntryType::CreditPending,
            10,
            bal(10, 0, 0, 0),
            bal(i64::MAX - 10, 0, 0, 0),
            bal(i64::MAX, 0, 0, 0),
        ))]);
}

#[test]
fn releasing_pending_into_a_full_available_bucket_is_refused_as_overflow() {
    // available = i64::MAX, then 100 more pending: releasing any of it would overflow.
    let history = History::opened()
        .moved(EntryType::CreditPending, "c-big", i64::MAX)
        .moved(EntryType::ReleasePending, "c-big", i64::MAX)
        .moved(EntryType::CreditPending, "c-small", 100);
    assert_eq!(history.balances, bal(100, i64::MAX, 0, 0));
    wallet_test()
        .given(history.events())
        .when(WalletCommand::ReleasePending(funds(
            "COMMISSION",
            "c-small",
            1,
        )))
        .then_expect_error(WalletError::BalanceOverflow {
            bucket: "available",
        });
}

// ---------------------------------------------------------------------------------
// Withdrawal blocks
// ---------------------------------------------------------------------------------

#[test]
fn blocking_withdrawals_records_the_reference_and_reason() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            Some("refund after release"),
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalsBlocked {
            ref_type: "RISK_REVIEW".to_owned(),
            ref_id: "r-1".to_owned(),
            reason: Some("refund after release".to_owned()),
        }]);
}

#[test]
fn blocking_withdrawals_without_a_reason_is_allowed() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            None,
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalsBlocked {
            ref_type: "RISK_REVIEW".to_owned(),
            ref_id: "r-1".to_owned(),
            reason: None,
        }]);
}

#[test]
fn a_second_block_by_another_reference_is_allowed() {
    wallet_test()
        .given(History::opened().blocked("RISK_REVIEW", "r-1").events())
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-2",
            None,
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalsBlocked {
            ref_type: "RISK_REVIEW".to_owned(),
            ref_id: "r-2".to_owned(),
            reason: None,
        }]);
}

#[test]
fn blocking_twice_by_the_same_reference_is_refused_as_already_blocked() {
    wallet_test()
        .given(History::opened().blocked("RISK_REVIEW", "r-1").events())
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            Some("again"),
        )))
        .then_expect_error(WalletError::AlreadyBlocked {
            block: "RISK_REVIEW/r-1".to_owned(),
        });
    let err = WalletError::AlreadyBlocked {
        block: "RISK_REVIEW/r-1".to_owned(),
    };
    assert_eq!(err.code(), "WITHDRAWALS_ALREADY_BLOCKED");
    assert_eq!(err.field(), Some("ref_id"));
}

#[test]
fn a_reason_longer_than_the_limit_is_refused() {
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            Some(&"x".repeat(REASON_LEN_MAX + 1)),
        )))
        .then_expect_error(WalletError::ReasonTooLong {
            max: REASON_LEN_MAX,
        });
    let err = WalletError::ReasonTooLong {
        max: REASON_LEN_MAX,
    };
    assert_eq!(err.code(), "REASON_TOO_LONG");
    assert_eq!(err.field(), Some("reason"));
}

#[test]
fn the_reason_limit_counts_bytes_not_characters() {
    // 251 two-byte characters = 502 bytes: fewer characters than the limit, more bytes.
    let reason = "é".repeat(251);
    assert!(reason.chars().count() < REASON_LEN_MAX && reason.len() > REASON_LEN_MAX);
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            Some(&reason),
        )))
        .then_expect_error(WalletError::ReasonTooLong {
            max: REASON_LEN_MAX,
        });
}

#[test]
fn a_reason_of_exactly_the_limit_is_accepted() {
    let reason = "x".repeat(REASON_LEN_MAX);
    wallet_test()
        .given(vec![opened_event()])
        .when(WalletCommand::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            Some(&reason),
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalsBlocked {
            ref_type: "RISK_REVIEW".to_owned(),
            ref_id: "r-1".to_owned(),
            reason: Some(reason.clone()),
        }]);
}

#[test]
fn unblocking_withdrawals_lifts_the_named_block() {
    wallet_test()
        .given(History::opened().blocked("RISK_REVIEW", "r-1").events())
        .when(WalletCommand::UnblockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            None,
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalsUnblocked {
            ref_type: "RISK_REVIEW".to_owned(),
            ref_id: "r-1".to_owned(),
        }]);
}

#[test]
fn unblocking_a_reference_that_never_blocked_is_refused_as_block_not_found() {
    wallet_test()
        .given(History::opened().blocked("RISK_REVIEW", "r-1").events())
        .when(WalletCommand::UnblockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-2",
            None,
        )))
        .then_expect_error(WalletError::BlockNotFound {
            block: "RISK_REVIEW/r-2".to_owned(),
        });
    let err = WalletError::BlockNotFound {
        block: "RISK_REVIEW/r-2".to_owned(),
    };
    assert_eq!(err.code(), "WITHDRAWAL_BLOCK_NOT_FOUND");
    assert_eq!(err.field(), Some("ref_id"));
}

#[test]
fn unblocking_a_block_that_was_already_lifted_is_refused_as_block_not_found() {
    wallet_test()
        .given(
            History::opened()
                .blocked("RISK_REVIEW", "r-1")
                .unblocked("RISK_REVIEW", "r-1")
                .events(),
        )
        .when(WalletCommand::UnblockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            None,
        )))
        .then_expect_error(WalletError::BlockNotFound {
            block: "RISK_REVIEW/r-1".to_owned(),
        });
}

#[test]
fn freeze_while_blocked_is_refused_and_writes_nothing() {
    let given = History::with_balances(bal(0, 5000, 0, 0))
        .blocked("RISK_REVIEW", "r-1")
        .events();
    let result = wallet_test()
        .given(given)
        .when(WalletCommand::FreezeForWithdrawal(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .inspect_result();
    // An `Err` from `handle` means the sink's events are discarded: nothing is written.
    assert_eq!(
        result,
        Err(WalletError::WithdrawalsBlocked {
            blocks: vec!["RISK_REVIEW/r-1".to_owned()],
        })
    );
    let err = WalletError::WithdrawalsBlocked { blocks: vec![] };
    assert_eq!(err.code(), "WITHDRAWALS_BLOCKED");
    assert_eq!(err.field(), None);
}

#[test]
fn freeze_stays_refused_until_the_last_block_is_lifted() {
    let history = History::with_balances(bal(0, 5000, 0, 0))
        .blocked("RISK_REVIEW", "r-1")
        .blocked("FRAUD_CASE", "f-9")
        .unblocked("RISK_REVIEW", "r-1");
    wallet_test()
        .given(history.events())
        .when(WalletCommand::FreezeForWithdrawal(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_error(WalletError::WithdrawalsBlocked {
            blocks: vec!["FRAUD_CASE/f-9".to_owned()],
        });
}

#[test]
fn freeze_is_refused_with_every_active_block_listed_in_key_order() {
    let history = History::with_balances(bal(0, 5000, 0, 0))
        .blocked("RISK_REVIEW", "r-1")
        .blocked("FRAUD_CASE", "f-9");
    wallet_test()
        .given(history.events())
        .when(WalletCommand::FreezeForWithdrawal(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_error(WalletError::WithdrawalsBlocked {
            blocks: vec!["FRAUD_CASE/f-9".to_owned(), "RISK_REVIEW/r-1".to_owned()],
        });
}

#[test]
fn freeze_is_allowed_again_once_every_block_is_lifted() {
    let history = History::with_balances(bal(0, 5000, 0, 0))
        .blocked("RISK_REVIEW", "r-1")
        .unblocked("RISK_REVIEW", "r-1");
    wallet_test()
        .given(history.events())
        .when(WalletCommand::FreezeForWithdrawal(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::WithdrawalFrozen(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawFreeze,
            1500,
            bal(0, -1500, 1500, 0),
            bal(0, 5000, 0, 0),
            bal(0, 3500, 1500, 0),
        ))]);
}

#[test]
fn every_movement_other_than_freeze_is_still_allowed_while_blocked() {
    for (cmd, entry_type) in movement_commands() {
        if entry_type == EntryType::WithdrawFreeze {
            continue;
        }
        let before = bal(5000, 5000, 5000, 5000);
        // Unfreeze and payout close the open freeze of the reference they name.
        let history = History::with_balances(bal(5000, 6500, 3500, 5000))
            .frozen_by("REF", "x-1", 1500)
            .blocked("RISK_REVIEW", "r-1");
        let expected_delta = entry_type.delta(1500);
        let expected_after = before.checked_add(&expected_delta).unwrap();
        wallet_test()
            .given(history.events())
            .when(cmd(funds("REF", "x-1", 1500)))
            .then_expect_events(vec![WalletEvent::movement(movement(
                "REF",
                "x-1",
                entry_type,
                1500,
                expected_delta,
                before,
                expected_after,
            ))]);
    }
}

#[test]
fn paying_out_an_already_frozen_withdrawal_is_allowed_while_blocked() {
    // Freeze is the gate; money frozen before the block may still leave.
    wallet_test()
        .given(
            History::with_balances(bal(0, 1500, 0, 0))
                .frozen_by("WITHDRAWAL", "w-1", 1500)
                .blocked("RISK_REVIEW", "r-1")
                .events(),
        )
        .when(WalletCommand::PayOutFrozen(funds(
            "WITHDRAWAL",
            "w-1",
            1500,
        )))
        .then_expect_events(vec![WalletEvent::FrozenPaidOut(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawPayout,
            1500,
            bal(0, 0, -1500, 0),
            bal(0, 0, 1500, 0),
            zero(),
        ))]);
}

// ---------------------------------------------------------------------------------
// Decide::check refuses tampered events
// ---------------------------------------------------------------------------------

/// A wallet with pending 1000, available 500, and a well-formed next event
/// (release 300) that tests then tamper with.
fn check_fixture() -> (Wallet, Movement) {
    let wallet = History::with_balances(bal(1000, 500, 0, 0)).wallet();
    let good = movement(
        "COMMISSION",
        "c-1",
        EntryType::ReleasePending,
        300,
        bal(-300, 300, 0, 0),
        bal(1000, 500, 0, 0),
        bal(700, 800, 0, 0),
    );
    (wallet, good)
}

#[test]
fn check_accepts_a_well_formed_event() {
    let (wallet, good) = check_fixture();
    assert_eq!(wallet.check(&WalletEvent::PendingReleased(good)), Ok(()));
}

#[test]
fn check_refuses_an_event_whose_before_is_not_the_current_balance() {
    let (wallet, mut m) = check_fixture();
    m.before = bal(900, 500, 0, 0);
    m.after = bal(600, 800, 0, 0); // consistent with the tampered before
    let err = wallet.check(&WalletEvent::PendingReleased(m)).unwrap_err();
    assert!(err.0.contains("not the current balance"), "{err}");
}

#[test]
fn check_refuses_an_event_whose_after_is_not_before_plus_delta() {
    let (wallet, mut m) = check_fixture();
    m.after = bal(700, 900, 0, 0); // 100 minted out of nowhere
    let err = wallet.check(&WalletEvent::PendingReleased(m)).unwrap_err();
    assert!(err.0.contains("!= before + delta"), "{err}");
}

#[test]
fn check_refuses_an_event_that_leaves_a_bucket_negative() {
    let (wallet, mut m) = check_fixture();
    m.amount_minor = 1200;
    m.delta = bal(-1200, 1200, 0, 0);
    m.after = bal(-200, 1700, 0, 0); // arithmetic right, but pending goes negative
    let err = wallet.check(&WalletEvent::PendingReleased(m)).unwrap_err();
    assert!(err.0.contains("pending would be negative"), "{err}");
}

#[test]
fn check_refuses_an_event_whose_delta_does_not_match_its_entry_type() {
    let (wallet, mut m) = check_fixture();
    // A release that credits risk_hold instead of available; before/after consistent.
    m.delta = bal(-300, 0, 0, 300);
    m.after = bal(700, 500, 0, 300);
    let err = wallet.check(&WalletEvent::PendingReleased(m)).unwrap_err();
    assert!(err.0.contains("does not match"), "{err}");

    // A credit booked as a release: entry type and delta disagree.
    let (wallet, mut m) = check_fixture();
    m.entry_type = EntryType::CreditPending;
    assert!(wallet.check(&WalletEvent::PendingReleased(m)).is_err());
}

#[test]
fn check_refuses_a_non_positive_amount_without_panicking() {
    for amount_minor in [0, -300, i64::MIN] {
        let (wallet, mut m) = check_fixture();
        m.amount_minor = amount_minor;
        let result = wallet.check(&WalletEvent::PendingReleased(m));
        assert!(result.is_err(), "amount {amount_minor} accepted");
    }
}

#[test]
fn check_refuses_a_movement_on_an_unopened_wallet_and_a_second_open() {
    let (_, m) = check_fixture();
    let unopened = Wallet::default();
    assert!(unopened.check(&WalletEvent::PendingCredited(m)).is_err());
    assert_eq!(unopened.check(&opened_event()), Ok(()));

    let opened = History::opened().wallet();
    assert!(opened.check(&opened_event()).is_err());
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "assertion")]
fn applying_a_tampered_event_panics_in_debug_builds() {
    let (mut wallet, mut m) = check_fixture();
    m.after = bal(700, 900, 0, 0);
    wallet.apply(WalletEvent::PendingReleased(m));
}

// ---------------------------------------------------------------------------------
// Conservation over a long mixed sequence
// ---------------------------------------------------------------------------------

#[test]
fn balances_are_conserved_across_a_long_mixed_sequence_of_commands() {
    use WalletCommand as C;
    let commands: Vec<WalletCommand> = vec![
        open_cmd(),
        C::CreditPending(funds("COMMISSION", "c-1", 10_000)),
        C::CreditPending(funds("COMMISSION", "c-2", 2_500)),
        C::ReleasePending(funds("COMMISSION", "c-1", 10_000)),
        C::ReversePending(funds("REFUND", "c-2", 500)),
        C::FreezeForWithdrawal(funds("WITHDRAWAL", "w-1", 4_000)),
        C::PayOutFrozen(funds("WITHDRAWAL", "w-1", 4_000)),
        C::PlaceRiskHold(funds("RISK_REVIEW", "r-1", 1_000)),
        C::BlockWithdrawals(block_ref(
            "RISK_REVIEW",
            "r-1",
            Some("refund after release"),
        )),
        C::FreezeForWithdrawal(funds("WITHDRAWAL", "w-2", 100)), // refused: blocked
        C::CreditPending(funds("COMMISSION", "c-3", 7_777)),
        C::ReleasePending(funds("COMMISSION", "c-2", 2_000)),
        C::ReleasePending(funds("COMMISSION", "c-3", 99_999)), // refused: pending short
        C::ReleaseRiskHold(funds("RISK_REVIEW", "r-1", 600)),
        C::UnblockWithdrawals(block_ref("RISK_REVIEW", "r-1", None)),
        C::FreezeForWithdrawal(funds("WITHDRAWAL", "w-2", 3_000)),
        C::Unfreeze(funds("WITHDRAWAL", "w-2", 1_000)), // refused: w-2 froze 3_000
        C::PayOutFrozen(funds("WITHDRAWAL", "w-2", 3_000)),
        C::PayOutFrozen(funds("WITHDRAWAL", "w-2", 1)), // refused: w-2 is paid out
        C::ReleaseRiskHold(funds("RISK_REVIEW", "r-1", 401)), // refused: hold is 400
        C::ReleaseRiskHold(funds("RISK_REVIEW", "r-1", 400)),
        C::CreditPending(funds_in("COMMISSION", "c-4", 5, usd())), // refused: currency
        C::CreditPending(funds_in("COMMISSION", "c-4", 5, idr())),
        C::ReleasePending(funds("COMMISSION", "c-3", 7_777)),
        C::PlaceRiskHold(funds("RISK_REVIEW", "r-2", 12_345)),
        C::FreezeForWithdrawal(funds("WITHDRAWAL", "w-3", 1)),
        C::ReversePending(funds("REFUND", "c-4", 5)),
        C::ReversePending(funds("REFUND", "c-4", 1)), // refused: pending is empty
        C::Unfreeze(funds("WITHDRAWAL", "w-3", 1)),
        open_cmd(), // refused: already open
        C::ReleaseRiskHold(funds("RISK_REVIEW", "r-2", 12_345)),
        C::FreezeForWithdrawal(funds("WITHDRAWAL", "w-4", 1_000)),
    ];
    assert!(commands.len() >= 30);

    let mut wallet = Wallet::default();
    let mut delta_sum = Buckets::default();
    let mut accepted = 0;
    let mut refused = 0;
    for (step, command) in commands.into_iter().enumerate() {
        let name = command.name();
        let state_before = wallet.clone();
        let events = match wallet.decide(command) {
            Ok(events) => events,
            Err(_) => {
                refused += 1;
                assert_eq!(
                    wallet, state_before,
                    "step {step} {name}: refusal changed state"
                );
                continue;
            }
        };
        accepted += 1;
        assert_eq!(events.len(), 1, "step {step} {name}");
        for event in events {
            assert_eq!(wallet.check(&event), Ok(()), "step {step} {name}");
            if let Some(m) = event.as_movement() {
                assert_eq!(m.before, wallet.balances, "step {step} {name}: before");
                for b in Buckets::ALL {
                    assert_eq!(
                        m.after.get(b),
                        m.before.get(b) + m.delta.get(b),
                        "step {step} {name}: {} after != before + delta",
                        b.name()
                    );
                    assert!(
                        m.after.get(b) >= 0,
                        "step {step} {name}: {} negative",
                        b.name()
                    );
                }
                // Money only enters via CreditPending and leaves via ReversePending or
                // WithdrawPayout; every other entry type moves it between buckets.
                let net: i64 = Buckets::ALL.iter().map(|b| m.delta.get(*b)).sum();
                let expected_net = match m.entry_type {
                    EntryType::CreditPending => m.amount_minor,
                    EntryType::ReversePending | EntryType::WithdrawPayout => -m.amount_minor,
                    _ => 0,
                };
                assert_eq!(net, expected_net, "step {step} {name}: net");
                delta_sum = delta_sum.checked_add(&m.delta).unwrap();
            }
            wallet.apply(event);
            assert_eq!(
                wallet.balances.first_broken_flag(),
                None,
                "step {step} {name}"
            );
        }
    }
    assert_eq!(refused, 8);
    assert_eq!(accepted, 32 - 8);
    assert_eq!(
        delta_sum, wallet.balances,
        "sum of deltas != final balances"
    );
    // Hand-computed end state: in = 10_000 + 2_500 + 7_777 + 5 = 20_282,
    // out = 500 + 4_000 + 3_000 + 5 = 7_505, total 12_777.
    assert_eq!(wallet.balances, bal(0, 11_777, 1_000, 0));
    assert!(wallet.withdrawal_blocks.is_empty());
}

// ---------------------------------------------------------------------------------
// Wire formats: commands parse at the edge, events are stored forever
// ---------------------------------------------------------------------------------

#[test]
fn commands_with_a_non_positive_or_non_integer_amount_do_not_deserialize() {
    let with_amount = |amount: &str| {
        format!(
            r#"{{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":{amount}}}"#
        )
    };
    // Positive control: the same shape with a valid amount parses.
    assert_eq!(
        serde_json::from_str::<WalletCommand>(&with_amount("1500")).unwrap(),
        WalletCommand::CreditPending(funds("COMMISSION", "c-1", 1500))
    );
    for bad in ["0", "-1", "1.5", "\"15\"", "9223372036854775808", "null"] {
        let json = with_amount(bad);
        assert!(
            serde_json::from_str::<WalletCommand>(&json).is_err(),
            "accepted {json}"
        );
        // The HTTP edge's path-tracking parser refuses it too, naming the field.
        let err = WalletCommand::parse_json(serde_json::from_str(&json).unwrap()).unwrap_err();
        assert_eq!(err.field, "amount_minor", "{json}: {err}");
    }
}

#[test]
fn commands_with_unknown_fields_or_types_do_not_deserialize() {
    let refused = [
        r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":1500,"amount":1500}"#,
        r#"{"type":"Open","user_id":"u-1","currency":"IDR","country":"ID"}"#,
        r#"{"type":"BlockWithdrawals","ref_type":"RISK_REVIEW","ref_id":"r-1","reasons":"x"}"#,
        r#"{"type":"MintMoney","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":1500}"#,
        r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":1500,"currency":"idr"}"#,
        r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c 1","amount_minor":1500}"#,
    ];
    for json in refused {
        assert!(
            serde_json::from_str::<WalletCommand>(json).is_err(),
            "accepted {json}"
        );
        assert!(
            WalletCommand::parse_json(serde_json::from_str(json).unwrap()).is_err(),
            "parse_json accepted {json}"
        );
    }
    assert_eq!(
        serde_json::from_str::<WalletCommand>(
            r#"{"type":"Open","user_id":"u-1","currency":"IDR"}"#
        )
        .unwrap(),
        open_cmd()
    );
}

#[test]
fn a_movement_event_has_a_stable_stored_shape() {
    let event = WalletEvent::WithdrawalFrozen(movement(
        "WITHDRAWAL",
        "w-1",
        EntryType::WithdrawFreeze,
        1500,
        bal(0, -1500, 1500, 0),
        bal(10, 2000, 40, 0),
        bal(10, 500, 1540, 0),
    ));
    let expected = serde_json::json!({
        "type": "WithdrawalFrozen",
        "ref_type": "WITHDRAWAL",
        "ref_id": "w-1",
        "entry_type": "WITHDRAW_FREEZE",
        "amount_minor": 1500,
        "delta": {"pending_minor": 0, "available_minor": -1500, "frozen_minor": 1500, "risk_hold_minor": 0},
        "before": {"pending_minor": 10, "available_minor": 2000, "frozen_minor": 40, "risk_hold_minor": 0},
        "after": {"pending_minor": 10, "available_minor": 500, "frozen_minor": 1540, "risk_hold_minor": 0}
    });
    assert_eq!(serde_json::to_value(&event).unwrap(), expected);
    assert_eq!(
        serde_json::from_value::<WalletEvent>(expected).unwrap(),
        event
    );
    assert_eq!(event.version(), MOVEMENT_EVENT_VERSION);
}

#[test]
fn movements_carry_a_unique_ledger_ref_and_other_events_do_not() {
    let (_, m) = check_fixture();
    assert_eq!(
        Wallet::ledger_ref(&WalletEvent::PendingReleased(m)),
        Some(LedgerRef {
            ref_type: "COMMISSION".to_owned(),
            ref_id: "c-1".to_owned(),
            entry_type: "RELEASE_PENDING".to_owned(),
        })
    );
    assert_eq!(Wallet::ledger_ref(&opened_event()), None);
    assert_eq!(
        Wallet::ledger_ref(&WalletEvent::WithdrawalsUnblocked {
            ref_type: "RISK_REVIEW".to_owned(),
            ref_id: "r-1".to_owned(),
        }),
        None
    );
}

// ---------------------------------------------------------------------------------
// Withdrawal pairing (issue 17 item 2): frozen money leaves only through the
// reference that froze it, for exactly its amount, once.
// ---------------------------------------------------------------------------------

fn frozen_w1() -> History {
    History::with_balances(bal(0, 5000, 0, 0)).frozen_by("WITHDRAWAL", "w-1", 1500)
}

#[test]
fn frozen_money_leaves_only_through_its_own_open_freeze() {
    let not_open = |r: &str| WalletError::FreezeNotOpen {
        freeze: format!("WITHDRAWAL/{r}"),
    };
    type Row = (&'static str, History, WalletCommand, WalletError);
    let rows: Vec<Row> = vec![
        (
            "an unfreeze of a reference that never froze",
            frozen_w1(),
            WalletCommand::Unfreeze(funds("WITHDRAWAL", "w-2", 1500)),
            not_open("w-2"),
        ),
        (
            "a payout of a reference that never froze",
            frozen_w1(),
            WalletCommand::PayOutFrozen(funds("WITHDRAWAL", "w-2", 1500)),
            not_open("w-2"),
        ),
        (
            "a payout after the unfreeze",
            frozen_w1().moved_ref(EntryType::WithdrawUnfreeze, "WITHDRAWAL", "w-1", 1500),
            WalletCommand::PayOutFrozen(funds("WITHDRAWAL", "w-1", 1500)),
            not_open("w-1"),
        ),
        (
            "an unfreeze after the payout",
            frozen_w1().moved_ref(EntryType::WithdrawPayout, "WITHDRAWAL", "w-1", 1500),
            WalletCommand::Unfreeze(funds("WITHDRAWAL", "w-1", 1500)),
            not_open("w-1"),
        ),
        (
            "a second unfreeze",
            frozen_w1().moved_ref(EntryType::WithdrawUnfreeze, "WITHDRAWAL", "w-1", 1500),
            WalletCommand::Unfreeze(funds("WITHDRAWAL", "w-1", 1500)),
            not_open("w-1"),
        ),
        (
            "a part of the frozen amount",
            frozen_w1(),
            WalletCommand::Unfreeze(funds("WITHDRAWAL", "w-1", 500)),
            WalletError::FreezeAmountMismatch {
                freeze: "WITHDRAWAL/w-1".into(),
                frozen_minor: 1500,
                amount_minor: 500,
            },
        ),
        (
            "more than the frozen amount",
            frozen_w1().frozen_by("WITHDRAWAL", "w-9", 100),
            WalletCommand::PayOutFrozen(funds("WITHDRAWAL", "w-1", 1600)),
            WalletError::FreezeAmountMismatch {
                freeze: "WITHDRAWAL/w-1".into(),
                frozen_minor: 1500,
                amount_minor: 1600,
            },
        ),
        (
            "a second freeze of an open reference",
            frozen_w1(),
            WalletCommand::FreezeForWithdrawal(funds("WITHDRAWAL", "w-1", 100)),
            WalletError::FreezeAlreadyOpen {
                freeze: "WITHDRAWAL/w-1".into(),
                frozen_minor: 1500,
            },
        ),
    ];
    for (why, history, command, error) in rows {
        let code = error.code();
        let result = wallet_test()
            .given(history.events())
            .when(command)
            .inspect_result();
        assert_eq!(result, Err(error), "{why}");
        assert_eq!(
            crate::Refusal::kind(&result.unwrap_err()),
            crate::RefusalKind::Conflict,
            "{why}: 409 {code}"
        );
    }
}

#[test]
fn a_payout_names_its_provider_for_the_clearing_account() {
    let mut pay = funds("WITHDRAWAL", "w-1", 1500);
    pay.counterparty = Some(id("xendit"));
    let events = frozen_w1()
        .wallet()
        .decide(WalletCommand::PayOutFrozen(pay))
        .unwrap();
    let m = events[0].as_movement().unwrap();
    assert_eq!(m.counterparty.as_deref(), Some("xendit"));
    let wallet = {
        let mut w = frozen_w1().wallet();
        w.apply(events[0].clone());
        w
    };
    assert!(wallet.open_freezes.is_empty(), "the payout closed w-1");
}

#[test]
fn history_written_before_pairing_still_loads_and_keeps_what_it_left_open() {
    // Before pairing, w-1 froze 1,500 and was given back in two parts; w-2 paid out
    // money no freeze of its own held.
    let history = History::with_balances(bal(0, 5000, 0, 0))
        .frozen_by("WITHDRAWAL", "w-1", 1500)
        .moved_ref(EntryType::WithdrawUnfreeze, "WITHDRAWAL", "w-1", 500)
        .frozen_by("WITHDRAWAL", "w-3", 200)
        .legacy_payout("w-2", 100);
    let wallet = history.clone().wallet();
    assert_eq!(
        wallet.open_freezes,
        BTreeMap::from([
            ("WITHDRAWAL/w-1".to_owned(), 1000),
            ("WITHDRAWAL/w-3".to_owned(), 200),
        ])
    );
    // What is left open closes like any freeze: exactly, once.
    wallet_test()
        .given(history.events())
        .when(WalletCommand::Unfreeze(funds("WITHDRAWAL", "w-1", 1000)))
        .then_expect_events(vec![WalletEvent::WithdrawalUnfrozen(movement(
            "WITHDRAWAL",
            "w-1",
            EntryType::WithdrawUnfreeze,
            1000,
            bal(0, 1000, -1000, 0),
            bal(0, 3800, 1100, 0),
            bal(0, 4800, 100, 0),
        ))]);
}
