//! Campaign tests: given these events, when this command, then these events or this
//! error (cqrs-es `TestFramework`, which calls `handle` → `decide`), and acceptance
//! case 5 at aggregate level.

use super::*;
use crate::money::{AmountMinor, BoundedId};
use chrono::TimeZone;
use cqrs_es::test::TestFramework;

fn campaign_test() -> TestFramework<Campaign> {
    TestFramework::<Campaign>::with(())
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

fn day(d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, d, 0, 0, 0).unwrap()
}

fn opened(unit: QuotaUnit, limit: i64) -> CampaignEvent {
    CampaignEvent::CampaignOpened(CampaignOpened {
        campaign_id: "fund-jan".to_owned(),
        quota_unit: unit,
        quota_limit: limit,
        currency: (unit == QuotaUnit::MinorUnits).then(idr),
        starts_at: day(1),
        ends_at: Some(day(31)),
    })
}

fn open_cmd(unit: QuotaUnit, limit: i64) -> OpenCampaign {
    OpenCampaign {
        campaign_id: id("fund-jan"),
        quota_unit: unit,
        quota_limit: amount(limit),
        currency: (unit == QuotaUnit::MinorUnits).then(idr),
        starts_at: day(1),
        ends_at: Some(day(31)),
    }
}

fn reserve(order: &str, amount_minor: Option<i64>) -> CampaignCommand {
    CampaignCommand::Reserve(ReserveQuota {
        order_id: id(order),
        ordered_at: day(5),
        amount_minor: amount_minor.map(amount),
        currency: amount_minor.map(|_| idr()),
    })
}

fn reserved(order: &str, units: i64, after: i64) -> CampaignEvent {
    CampaignEvent::QuotaReserved(QuotaReserved {
        order_id: order.to_owned(),
        units,
        ordered_at: day(5),
        reserved_after: after,
    })
}

fn release(order: &str) -> CampaignCommand {
    CampaignCommand::Release(ReleaseQuota {
        order_id: id(order),
        reason: ReleaseReason::OrderRefunded,
    })
}

fn released(order: &str, units: i64, after: i64) -> CampaignEvent {
    CampaignEvent::QuotaReleased(QuotaReleased {
        order_id: order.to_owned(),
        units,
        reason: ReleaseReason::OrderRefunded,
        reserved_after: after,
    })
}

fn decide_and_apply(c: &mut Campaign, cmd: CampaignCommand) -> Result<usize, CampaignError> {
    let events = c.decide(cmd)?;
    let n = events.len();
    for e in events {
        assert_eq!(c.check(&e), Ok(()));
        c.apply(e);
    }
    Ok(n)
}

#[test]
fn opening_a_campaign_records_its_quota_and_window() {
    campaign_test()
        .given_no_previous_events()
        .when(CampaignCommand::Open(open_cmd(
            QuotaUnit::MinorUnits,
            50_000,
        )))
        .then_expect_events(vec![opened(QuotaUnit::MinorUnits, 50_000)]);
}

#[test]
fn opening_twice_is_refused() {
    assert_eq!(CampaignError::AlreadyOpen.code(), "CAMPAIGN_ALREADY_OPEN");
    campaign_test()
        .given(vec![opened(QuotaUnit::Orders, 1)])
        .when(CampaignCommand::Open(open_cmd(QuotaUnit::Orders, 1)))
        .then_expect_error(CampaignError::AlreadyOpen);
}

#[test]
fn a_campaign_that_ends_before_it_starts_is_refused() {
    let mut cmd = open_cmd(QuotaUnit::Orders, 1);
    cmd.ends_at = Some(day(1));
    assert_eq!(
        (
            CampaignError::InvalidWindow.code(),
            CampaignError::InvalidWindow.field()
        ),
        ("INVALID_CAMPAIGN_WINDOW", Some("ends_at"))
    );
    campaign_test()
        .given_no_previous_events()
        .when(CampaignCommand::Open(cmd))
        .then_expect_error(CampaignError::InvalidWindow);
}

#[test]
fn a_fund_in_minor_units_without_a_currency_is_refused() {
    let mut cmd = open_cmd(QuotaUnit::MinorUnits, 50_000);
    cmd.currency = None;
    assert_eq!(CampaignError::CurrencyRequired.code(), "CURRENCY_REQUIRED");
    campaign_test()
        .given_no_previous_events()
        .when(CampaignCommand::Open(cmd))
        .then_expect_error(CampaignError::CurrencyRequired);
}

#[test]
fn reserving_or_releasing_before_open_is_refused_as_not_found() {
    assert_eq!(CampaignError::NotFound.code(), "CAMPAIGN_NOT_FOUND");
    for cmd in [reserve("SHOPEE:1", None), release("SHOPEE:1")] {
        campaign_test()
            .given_no_previous_events()
            .when(cmd)
            .then_expect_error(CampaignError::NotFound);
    }
}

#[test]
fn an_order_reserves_one_unit_of_an_order_count_quota() {
    campaign_test()
        .given(vec![opened(QuotaUnit::Orders, 2)])
        .when(reserve("SHOPEE:1", None))
        .then_expect_events(vec![reserved("SHOPEE:1", 1, 1)]);
}

#[test]
fn an_order_reserves_its_amount_of_a_fund() {
    campaign_test()
        .given(vec![opened(QuotaUnit::MinorUnits, 50_000)])
        .when(reserve("SHOPEE:1", Some(12_000)))
        .then_expect_events(vec![reserved("SHOPEE:1", 12_000, 12_000)]);
}

#[test]
fn a_reservation_that_does_not_fit_is_refused_as_quota_exhausted() {
    let err = CampaignError::QuotaExhausted {
        remaining: 8_000,
        requested: 8_001,
    };
    assert_eq!(
        (err.code(), err.field()),
        ("QUOTA_EXHAUSTED", Some("amount_minor"))
    );
    campaign_test()
        .given(vec![
            opened(QuotaUnit::MinorUnits, 20_000),
            reserved("SHOPEE:1", 12_000, 12_000),
        ])
        .when(reserve("SHOPEE:2", Some(8_001)))
        .then_expect_error(err);
    // Exactly the remainder fits.
    campaign_test()
        .given(vec![
            opened(QuotaUnit::MinorUnits, 20_000),
            reserved("SHOPEE:1", 12_000, 12_000),
        ])
        .when(reserve("SHOPEE:2", Some(8_000)))
        .then_expect_events(vec![reserved("SHOPEE:2", 8_000, 20_000)]);
}

#[test]
fn a_reservation_replayed_writes_nothing_even_after_its_release() {
    for given in [
        vec![opened(QuotaUnit::Orders, 1), reserved("SHOPEE:1", 1, 1)],
        vec![
            opened(QuotaUnit::Orders, 1),
            reserved("SHOPEE:1", 1, 1),
            released("SHOPEE:1", 1, 0),
        ],
    ] {
        campaign_test()
            .given(given)
            .when(reserve("SHOPEE:1", None))
            .then_expect_events(vec![]);
    }
}

#[test]
fn an_order_outside_the_campaign_window_is_refused() {
    for ordered_at in [day(1) - chrono::TimeDelta::seconds(1), day(31)] {
        let err = CampaignError::OrderOutsideCampaign { ordered_at };
        assert_eq!(
            (err.code(), err.field()),
            ("ORDER_OUTSIDE_CAMPAIGN", Some("ordered_at"))
        );
        campaign_test()
            .given(vec![opened(QuotaUnit::Orders, 5)])
            .when(CampaignCommand::Reserve(ReserveQuota {
                order_id: id("SHOPEE:1"),
                ordered_at,
                amount_minor: None,
                currency: None,
            }))
            .then_expect_error(err);
    }
}

#[test]
fn a_fund_reservation_without_an_amount_is_refused() {
    let mut cmd = ReserveQuota {
        order_id: id("SHOPEE:1"),
        ordered_at: day(5),
        amount_minor: None,
        currency: Some(idr()),
    };
    assert_eq!(CampaignError::AmountRequired.code(), "AMOUNT_REQUIRED");
    campaign_test()
        .given(vec![opened(QuotaUnit::MinorUnits, 50_000)])
        .when(CampaignCommand::Reserve(cmd.clone()))
        .then_expect_error(CampaignError::AmountRequired);
    cmd.amount_minor = Some(amount(5));
    cmd.currency = Some(Currency::parse("MYR").unwrap());
    let err = CampaignError::CurrencyMismatch {
        given: cmd.currency,
        campaign: idr(),
    };
    assert_eq!(
        (err.code(), err.field()),
        ("CURRENCY_MISMATCH", Some("currency"))
    );
    campaign_test()
        .given(vec![opened(QuotaUnit::MinorUnits, 50_000)])
        .when(CampaignCommand::Reserve(cmd))
        .then_expect_error(err);
}

#[test]
fn a_full_campaign_stream_refuses_another_order() {
    let mut given = vec![opened(QuotaUnit::Orders, i64::MAX)];
    for n in 0..CAMPAIGN_RESERVATIONS_MAX as i64 {
        given.push(reserved(&format!("SHOPEE:{n}"), 1, n + 1));
    }
    let err = CampaignError::TooManyReservations {
        max: CAMPAIGN_RESERVATIONS_MAX,
    };
    assert_eq!(err.code(), "CAMPAIGN_RESERVATIONS_LIMIT");
    let mut c = Campaign::default();
    for e in given {
        c.apply(e);
    }
    assert_eq!(c.decide(reserve("SHOPEE:new", None)), Err(err));
}

#[test]
fn releasing_gives_the_quota_back() {
    campaign_test()
        .given(vec![
            opened(QuotaUnit::Orders, 1),
            reserved("SHOPEE:1", 1, 1),
        ])
        .when(release("SHOPEE:1"))
        .then_expect_events(vec![released("SHOPEE:1", 1, 0)]);
}

#[test]
fn releasing_an_order_that_holds_no_reservation_writes_nothing() {
    for given in [
        vec![opened(QuotaUnit::Orders, 1)],
        vec![
            opened(QuotaUnit::Orders, 1),
            reserved("SHOPEE:1", 1, 1),
            released("SHOPEE:1", 1, 0),
        ],
    ] {
        campaign_test()
            .given(given)
            .when(release("SHOPEE:1"))
            .then_expect_events(vec![]);
    }
}

#[test]
fn of_two_orders_for_a_one_order_quota_only_the_first_reserves_until_a_refund() {
    // Acceptance case 5: the store serialises the two appends; the second is
    // re-decided on the first one's state and refused; a refund passes the quota on.
    let mut c = Campaign::default();
    decide_and_apply(
        &mut c,
        CampaignCommand::Open(open_cmd(QuotaUnit::Orders, 1)),
    )
    .unwrap();
    assert_eq!(decide_and_apply(&mut c, reserve("SHOPEE:A", None)), Ok(1));
    assert_eq!(
        decide_and_apply(&mut c, reserve("SHOPEE:B", None)),
        Err(CampaignError::QuotaExhausted {
            remaining: 0,
            requested: 1
        })
    );
    assert_eq!(decide_and_apply(&mut c, release("SHOPEE:A")), Ok(1));
    assert_eq!(decide_and_apply(&mut c, reserve("SHOPEE:B", None)), Ok(1));
    // Replays after all that change nothing.
    for _ in 0..3 {
        assert_eq!(decide_and_apply(&mut c, reserve("SHOPEE:A", None)), Ok(0));
        assert_eq!(decide_and_apply(&mut c, reserve("SHOPEE:B", None)), Ok(0));
        assert_eq!(decide_and_apply(&mut c, release("SHOPEE:A")), Ok(0));
    }
    assert_eq!(c.reserved, 1);
    assert!(c.reservations["SHOPEE:A"].released);
    assert!(!c.reservations["SHOPEE:B"].released);
}

#[test]
fn check_refuses_reservations_over_the_quota_or_releases_of_nothing() {
    let mut c = Campaign::default();
    c.apply(opened(QuotaUnit::Orders, 1));
    assert!(c.check(&reserved("SHOPEE:1", 2, 2)).is_err(), "over quota");
    assert!(
        c.check(&reserved("SHOPEE:1", 1, 5)).is_err(),
        "bad running total"
    );
    assert!(
        c.check(&released("SHOPEE:1", 1, 0)).is_err(),
        "nothing reserved"
    );
    assert!(
        c.check(&opened(QuotaUnit::Orders, 1)).is_err(),
        "opened twice"
    );
    c.apply(reserved("SHOPEE:1", 1, 1));
    assert!(
        c.check(&reserved("SHOPEE:1", 0, 1)).is_err(),
        "reserved twice"
    );
    assert_eq!(Campaign::ledger_ref(&reserved("SHOPEE:1", 1, 1)), None);
}

#[test]
fn campaign_events_have_a_stable_stored_shape() {
    assert_eq!(
        serde_json::to_value(reserved("SHOPEE:1", 12_000, 12_000)).unwrap(),
        serde_json::json!({
            "type": "QuotaReserved", "order_id": "SHOPEE:1", "units": 12_000,
            "ordered_at": "2026-01-05T00:00:00Z", "reserved_after": 12_000
        })
    );
    assert_eq!(
        serde_json::to_value(released("SHOPEE:1", 1, 0)).unwrap(),
        serde_json::json!({
            "type": "QuotaReleased", "order_id": "SHOPEE:1", "units": 1,
            "reason": "ORDER_REFUNDED", "reserved_after": 0
        })
    );
    assert_eq!(
        serde_json::to_value(opened(QuotaUnit::MinorUnits, 50_000)).unwrap()["quota_unit"],
        "MINOR_UNITS"
    );
}
