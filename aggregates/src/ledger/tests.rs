use super::*;
use crate::candy::{CandyAccount, CandyAfter, CandyEvent, CreditSource, SettleReason};
use crate::decide::Decide;
use crate::service_order::{
    CreateOrder, LateReason, OrderBusiness, OrderEvent, Payment, ServiceOrder,
};
use crate::services::{candy_currency, PaymentMethod, UserId};
use crate::wallet::{Buckets, Movement};

fn idr() -> Currency {
    Currency::parse("IDR").unwrap()
}

fn movement(entry_type: EntryType, ref_type: &str, ref_id: &str) -> Movement {
    Movement {
        ref_type: ref_type.to_owned(),
        ref_id: ref_id.to_owned(),
        entry_type,
        amount_minor: 500,
        delta: Buckets::default(),
        before: Buckets::default(),
        after: Buckets::default(),
        counterparty: None,
    }
}

const CASHBACK: &str = "SHOPEE:5781234:CASHBACK";
const INVITER: &str = "SHOPEE:5781234:INVITER_REWARD";

/// Every wallet event, each variant once: a new variant fails the match in
/// `wallet_posting` at build time, and its expected posting must be added here.
fn every_wallet_event() -> Vec<(WalletEvent, Option<(&'static str, &'static str)>)> {
    let m = |e, rt, id| movement(e, rt, id);
    vec![
        (
            WalletEvent::WalletOpened {
                user_id: "u1".into(),
                currency: idr(),
            },
            None,
        ),
        (
            WalletEvent::PendingCredited(m(
                EntryType::CreditPending,
                COMMISSION_REF_TYPE,
                CASHBACK,
            )),
            Some(("commission_expense:SHOPEE:IDR", "wallet:w1:pending")),
        ),
        (
            WalletEvent::PendingReleased(m(
                EntryType::ReleasePending,
                COMMISSION_REF_TYPE,
                CASHBACK,
            )),
            Some(("wallet:w1:pending", "wallet:w1:available")),
        ),
        (
            WalletEvent::PendingReversed(m(
                EntryType::ReversePending,
                COMMISSION_ADJUSTMENT_REF_TYPE,
                INVITER,
            )),
            Some(("wallet:w1:pending", "inviter_rewards:SHOPEE:IDR")),
        ),
        (
            WalletEvent::WithdrawalFrozen(m(EntryType::WithdrawFreeze, WITHDRAWAL_REF_TYPE, "wd1")),
            Some(("wallet:w1:available", "wallet:w1:frozen")),
        ),
        (
            WalletEvent::WithdrawalUnfrozen(m(
                EntryType::WithdrawUnfreeze,
                WITHDRAWAL_REF_TYPE,
                "wd1",
            )),
            Some(("wallet:w1:frozen", "wallet:w1:available")),
        ),
        (
            WalletEvent::FrozenPaidOut(m(EntryType::WithdrawPayout, WITHDRAWAL_REF_TYPE, "wd1")),
            Some(("wallet:w1:frozen", "provider_clearing:UNASSIGNED:IDR")),
        ),
        (
            WalletEvent::RiskHoldPlaced(m(EntryType::RiskHold, "RISK_REVIEW", "r1")),
            Some(("wallet:w1:available", "wallet:w1:risk_hold")),
        ),
        (
            WalletEvent::RiskHoldReleased(m(EntryType::RiskHoldRelease, "RISK_REVIEW", "r1")),
            Some(("wallet:w1:risk_hold", "wallet:w1:available")),
        ),
        (
            WalletEvent::WithdrawalsBlocked {
                ref_type: "RECOVERY_REVIEW".into(),
                ref_id: CASHBACK.into(),
                reason: None,
            },
            None,
        ),
        (
            WalletEvent::WithdrawalsUnblocked {
                ref_type: "RECOVERY_REVIEW".into(),
                ref_id: CASHBACK.into(),
            },
            None,
        ),
    ]
}

#[test]
fn every_wallet_money_event_is_one_balanced_posting_between_chart_accounts() {
    let events = every_wallet_event();
    let mut names: Vec<&str> = events.iter().map(|(e, _)| e.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), events.len(), "each variant once");
    for (event, expected) in &events {
        let posting = wallet_posting("w1", idr(), event);
        assert_eq!(
            posting
                .as_ref()
                .map(|p| (p.debit.as_str(), p.credit.as_str())),
            *expected,
            "{}",
            event.name()
        );
        assert_eq!(
            posting.is_some(),
            event.as_movement().is_some(),
            "{}",
            event.name()
        );
        if let Some(p) = posting {
            assert_ne!(p.debit, p.credit);
            assert_eq!(p.amount_minor, 500);
            assert!(
                AccountKind::of(&p.debit).is_some(),
                "{} in the chart",
                p.debit
            );
            assert!(
                AccountKind::of(&p.credit).is_some(),
                "{} in the chart",
                p.credit
            );
        }
    }
}

#[test]
fn a_movement_of_any_other_reference_clears_through_its_external_account() {
    let e = WalletEvent::PendingCredited(movement(EntryType::CreditPending, "PROMO", "p1"));
    let p = wallet_posting("w1", idr(), &e).unwrap();
    assert_eq!(p.debit, "external:PROMO:IDR");
    assert_eq!(AccountKind::of(&p.debit), Some(AccountKind::External));
}

fn commission_event(json: serde_json::Value) -> CommissionEvent {
    serde_json::from_value(json).unwrap()
}

#[test]
fn a_recovery_books_a_receivable_and_its_write_off_reverses_it() {
    let opened = commission_event(serde_json::json!({
        "type": "RecoveryReviewOpened", "order_revision": 3, "signal": "REFUND_CONFIRMED",
        "order_updated_at": "2026-01-01T00:00:00Z", "amount_minor": 700
    }));
    let p = commission_posting(CASHBACK, idr(), &opened).unwrap();
    assert_eq!(
        (p.debit.as_str(), p.credit.as_str(), p.amount_minor),
        (
            "recovery_receivable:SHOPEE:IDR",
            "commission_expense:SHOPEE:IDR",
            700
        )
    );
    let resolved = commission_event(serde_json::json!({
        "type": "RecoveryManuallyResolved", "actor": "op", "reason": "written off",
        "resolved_at": "2026-01-02T00:00:00Z", "amount_minor": 700
    }));
    let q = commission_posting(CASHBACK, idr(), &resolved).unwrap();
    assert_eq!((q.debit, q.credit), (p.credit, p.debit));
}

#[test]
fn only_wallet_buckets_campaign_budgets_and_candy_buckets_carry_the_no_overdraft_flag() {
    for kind in AccountKind::ALL {
        let flags = kind.flags();
        assert_eq!(
            flags.debits_must_not_exceed_credits,
            matches!(
                kind,
                AccountKind::WalletBucket | AccountKind::CampaignBudget | AccountKind::CandyBucket
            ),
            "{kind:?}"
        );
        assert!(!flags.credits_must_not_exceed_debits);
    }
    assert_eq!(AccountKind::WalletBucket.normal_side(), Side::Credit);
    assert_eq!(AccountKind::of("nonsense:x"), None);
}

fn campaign_event(json: serde_json::Value) -> CampaignEvent {
    serde_json::from_value(json).unwrap()
}

fn fund_opened(quota_unit: &str) -> crate::campaign::CampaignOpened {
    serde_json::from_value(serde_json::json!({
        "campaign_id": "SHOPEE:ID", "quota_unit": quota_unit, "quota_limit": 10_000,
        "currency": "IDR", "starts_at": "2026-01-01T00:00:00Z", "ends_at": null
    }))
    .unwrap()
}

/// Every campaign event, each variant once: a new variant fails the match in
/// `campaign_posting` at build time, and its expected posting must be added here.
#[test]
fn every_campaign_fund_event_is_one_balanced_posting_between_its_budget_accounts() {
    let opened = fund_opened("MINOR_UNITS");
    let currency = campaign_currency(&opened).expect("a fund in minor units has one");
    let events = [
        (
            CampaignEvent::CampaignOpened(opened),
            (
                "campaign_funding:SHOPEE:ID:IDR",
                "campaign_budget:SHOPEE:ID:IDR",
                10_000,
            ),
        ),
        (
            campaign_event(
                serde_json::json!({"type": "QuotaReserved", "order_id": "SHOPEE:o1",
                "units": 600, "ordered_at": "2026-03-01T00:00:00Z", "reserved_after": 600}),
            ),
            (
                "campaign_budget:SHOPEE:ID:IDR",
                "campaign_reserved:SHOPEE:ID:IDR",
                600,
            ),
        ),
        (
            campaign_event(
                serde_json::json!({"type": "QuotaReleased", "order_id": "SHOPEE:o1",
                "units": 600, "reason": "ORDER_REFUNDED", "reserved_after": 0}),
            ),
            (
                "campaign_reserved:SHOPEE:ID:IDR",
                "campaign_budget:SHOPEE:ID:IDR",
                600,
            ),
        ),
    ];
    for (event, (debit, credit, amount)) in events {
        let p = campaign_posting("SHOPEE:ID", currency, &event);
        assert_eq!(
            (p.debit.as_str(), p.credit.as_str(), p.amount_minor),
            (debit, credit, amount),
            "{}",
            event.name()
        );
        for account in [&p.debit, &p.credit] {
            assert!(AccountKind::of(account).is_some(), "{account} in the chart");
        }
    }
}

#[test]
fn a_quota_counted_in_orders_is_no_money_and_names_no_currency() {
    assert_eq!(campaign_currency(&fund_opened("ORDERS")), None);
}

#[test]
fn a_payout_clears_through_the_provider_its_movement_names() {
    let mut m = movement(EntryType::WithdrawPayout, WITHDRAWAL_REF_TYPE, "wd1");
    m.counterparty = Some("xendit".into());
    let p = wallet_posting("w1", idr(), &WalletEvent::FrozenPaidOut(m)).unwrap();
    assert_eq!(
        (p.debit.as_str(), p.credit.as_str()),
        ("wallet:w1:frozen", "provider_clearing:xendit:IDR")
    );
}

// ---------------------------------------------------------------------------------
// Seed 000's paid services (`services.rs`)
// ---------------------------------------------------------------------------------

fn user(n: i64) -> UserId {
    UserId::parse(n).unwrap()
}

/// The (debit, credit) of a posting, and the kinds its accounts are of.
type Sides = Option<(&'static str, &'static str)>;

/// Every candy event, each variant once: a new variant fails the match in
/// `candy_posting` at build time, and its expected posting must be added here.
fn every_candy_event() -> Vec<(CandyEvent, Sides)> {
    let after = CandyAfter {
        balance: 0,
        held: 0,
    };
    vec![
        (CandyEvent::CandyAccountOpened { user_id: user(42) }, None),
        (
            CandyEvent::CandyCredited {
                source: CreditSource::Recharge,
                order_no: "R1".into(),
                candy: 500,
                after,
            },
            Some(("candy_issued:RECHARGE:ZZC", "candy:42:balance")),
        ),
        (
            CandyEvent::HoldPlaced {
                booking_no: "B1".into(),
                candy: 500,
                after,
            },
            Some(("candy:42:balance", "candy:42:held")),
        ),
        (
            CandyEvent::HoldSettled {
                booking_no: "B1".into(),
                artist_id: user(7),
                reason: SettleReason::CallIncome,
                candy: 500,
                after,
            },
            Some(("candy:42:held", "artist_income:7:ZZC")),
        ),
        (
            CandyEvent::HoldForfeited {
                booking_no: "B1".into(),
                reason: "MODERATION".into(),
                candy: 500,
                after,
            },
            Some(("candy:42:held", "candy_forfeited:MODERATION:ZZC")),
        ),
        (
            CandyEvent::HoldRefunded {
                booking_no: "B1".into(),
                refund_no: "RF1".into(),
                candy: 500,
                after,
            },
            Some(("candy:42:held", "candy:42:balance")),
        ),
    ]
}

#[test]
fn every_candy_movement_is_one_balanced_posting_in_zzc_between_chart_accounts() {
    let events = every_candy_event();
    let mut names: Vec<&str> = events.iter().map(|(e, _)| e.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), events.len(), "each variant once");
    assert_eq!(names.len(), 6, "every CandyEvent variant");
    for (event, expected) in &events {
        let posting = candy_posting("42", event);
        assert_eq!(
            posting
                .as_ref()
                .map(|p| (p.debit.as_str(), p.credit.as_str())),
            *expected,
            "{}",
            event.name()
        );
        assert_eq!(
            posting.is_some(),
            event.movement().is_some(),
            "{}",
            event.name()
        );
        // The posting's reference is the event's unique ledger key.
        assert_eq!(
            posting
                .as_ref()
                .map(|p| (p.ref_type.clone(), p.ref_id.clone(), p.entry_type.clone())),
            CandyAccount::ledger_ref(event).map(|r| (r.ref_type, r.ref_id, r.entry_type)),
            "{}",
            event.name()
        );
        if let Some(p) = posting {
            assert_ne!(p.debit, p.credit);
            assert_eq!(p.amount_minor, 500);
            assert_eq!(p.currency, candy_currency());
            assert_eq!(p.currency.as_str(), "ZZC");
            for account in [&p.debit, &p.credit] {
                assert!(AccountKind::of(account).is_some(), "{account} in the chart");
            }
        }
    }
    assert_eq!(candy_account("42", "held"), "candy:42:held");
}

#[test]
fn candy_accounts_are_of_their_kinds_with_their_sides() {
    for (account, kind, side) in [
        ("candy:42:balance", AccountKind::CandyBucket, Side::Credit),
        ("candy:42:held", AccountKind::CandyBucket, Side::Credit),
        (
            "candy_issued:RECHARGE:ZZC",
            AccountKind::CandyIssued,
            Side::Debit,
        ),
        (
            "artist_income:7:ZZC",
            AccountKind::ArtistIncome,
            Side::Credit,
        ),
        (
            "candy_forfeited:MODERATION:ZZC",
            AccountKind::CandyForfeited,
            Side::Credit,
        ),
        (
            "gateway_clearing:WECHAT:CNY",
            AccountKind::GatewayClearing,
            Side::Debit,
        ),
        (
            "service_sales:RECHARGE:CNY",
            AccountKind::ServiceSales,
            Side::Credit,
        ),
        (
            "refund_payable:WECHAT:CNY",
            AccountKind::RefundPayable,
            Side::Credit,
        ),
    ] {
        assert_eq!(AccountKind::of(account), Some(kind), "{account}");
        assert_eq!(kind.normal_side(), side, "{account}");
    }
}

fn cny() -> Currency {
    Currency::parse("CNY").unwrap()
}

fn wechat_payment(tx: &str) -> Payment {
    Payment {
        transaction_no: tx.into(),
        method: PaymentMethod::Wechat,
        account_id: "wx-openid-42".into(),
        amount_minor: 600,
        currency: "CNY".into(),
        paid_at: "2026-05-01T10:05:00Z".parse().unwrap(),
    }
}

/// Every order event, each variant once (and a candy order's payment besides): a new
/// variant must be added here with its expected posting.
fn every_order_event() -> Vec<(OrderEvent, Sides)> {
    let at: chrono::DateTime<chrono::Utc> = "2026-05-01T10:00:00Z".parse().unwrap();
    vec![
        (
            OrderEvent::OrderCreated(CreateOrder {
                order_no: "O1".into(),
                user_id: user(42),
                business: OrderBusiness::Recharge { candy: 10_000 },
                method: PaymentMethod::Wechat,
                amount: 600,
                currency: Some(cny()),
                created_at: at,
                timeout_at: at + chrono::Duration::minutes(15),
            }),
            None,
        ),
        (OrderEvent::PaymentStarted { at }, None),
        (
            OrderEvent::OrderPaid {
                business: "RECHARGE".into(),
                payment: wechat_payment("tx1"),
            },
            Some(("gateway_clearing:WECHAT:CNY", "service_sales:RECHARGE:CNY")),
        ),
        (
            OrderEvent::LatePaymentReceived {
                payment: wechat_payment("tx2"),
                reason: LateReason::Closed,
            },
            Some(("gateway_clearing:WECHAT:CNY", "refund_payable:WECHAT:CNY")),
        ),
        (
            OrderEvent::OrderDelivered {
                business: "RECHARGE".into(),
                at,
            },
            None,
        ),
        (
            OrderEvent::OrderClosed {
                business: "RECHARGE".into(),
                at,
            },
            None,
        ),
        (
            OrderEvent::OrderRefunded {
                refund_no: "RF1".into(),
                transaction_no: "tx2".into(),
                method: PaymentMethod::Wechat,
                amount_minor: 600,
                order_refunded: true,
                at,
            },
            Some(("refund_payable:WECHAT:CNY", "gateway_clearing:WECHAT:CNY")),
        ),
    ]
}

#[test]
fn every_cash_order_event_is_one_balanced_posting_between_chart_accounts() {
    let events = every_order_event();
    let mut names: Vec<&str> = events.iter().map(|(e, _)| e.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), events.len(), "each variant once");
    assert_eq!(names.len(), 7, "every OrderEvent variant");
    for (event, expected) in &events {
        let posting = order_posting(cny(), event);
        assert_eq!(
            posting
                .as_ref()
                .map(|p| (p.debit.as_str(), p.credit.as_str())),
            *expected,
            "{}",
            event.name()
        );
        assert_eq!(
            posting
                .as_ref()
                .map(|p| (p.ref_type.clone(), p.ref_id.clone(), p.entry_type.clone())),
            ServiceOrder::ledger_ref(event).map(|r| (r.ref_type, r.ref_id, r.entry_type)),
            "{}",
            event.name()
        );
        if let Some(p) = posting {
            assert_ne!(p.debit, p.credit);
            assert_eq!((p.amount_minor, p.currency), (600, cny()));
            for account in [&p.debit, &p.credit] {
                assert!(AccountKind::of(account).is_some(), "{account} in the chart");
            }
        }
    }
}

#[test]
fn a_late_payment_and_its_refund_leave_refund_payable_and_clearing_as_they_were() {
    let events = every_order_event();
    let late = order_posting(cny(), &events[3].0).unwrap();
    let refund = order_posting(cny(), &events[6].0).unwrap();
    assert_eq!((&late.debit, &late.credit), (&refund.credit, &refund.debit));
    assert_eq!(late.amount_minor, refund.amount_minor);
    // A second payment of a paid order is owed back the same way.
    let duplicate = OrderEvent::LatePaymentReceived {
        payment: wechat_payment("tx3"),
        reason: LateReason::AlreadyPaid,
    };
    let p = order_posting(cny(), &duplicate).unwrap();
    assert_eq!(p.credit, "refund_payable:WECHAT:CNY");
}

#[test]
fn a_candy_order_s_payment_posts_nothing_on_the_order() {
    // Its payment is the hold, posted on the candy account.
    let paid = OrderEvent::OrderPaid {
        business: "BOOKING".into(),
        payment: Payment {
            transaction_no: "candy-O2".into(),
            method: PaymentMethod::Candy,
            account_id: "42".into(),
            amount_minor: 5_000,
            currency: "ZZC".into(),
            paid_at: "2026-05-01T10:00:00Z".parse().unwrap(),
        },
    };
    assert_eq!(order_posting(cny(), &paid), None);
    assert_eq!(ServiceOrder::ledger_ref(&paid), None);
}
