//! Refund tests: given these events, when this command, then these events or this
//! error (cqrs-es `TestFramework`): R-REF-1's REFUNDING before any gateway outcome,
//! candy refunds settled directly, and a settled refund that never moves again.

use super::*;
use crate::refusal::{Refusal, RefusalKind};
use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::test::TestFramework;

fn refund_test() -> TestFramework<Refund> {
    TestFramework::<Refund>::with(())
}

fn t(minute: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 1, 11, minute, 0).unwrap()
}

/// A WeChat refund of a payment that arrived after its order closed.
fn cash_request() -> RequestRefund {
    RequestRefund {
        refund_no: "RF1".into(),
        order_no: "O1".into(),
        booking_no: None,
        business: RefundBusiness::LatePayment,
        method: PaymentMethod::Wechat,
        transaction_no: "tx1".into(),
        account_id: "wx-openid-42".into(),
        amount: 600,
        currency: "CNY".into(),
        at: t(0),
    }
}

/// A booking's hold given back after an artist no-show.
fn candy_request() -> RequestRefund {
    RequestRefund {
        refund_no: "RF2".into(),
        order_no: "O2".into(),
        booking_no: Some("B1".into()),
        business: RefundBusiness::BookingNoShow,
        method: PaymentMethod::Candy,
        transaction_no: "candy-O2".into(),
        account_id: "42".into(),
        amount: 5_000,
        currency: "ZZC".into(),
        at: t(0),
    }
}

fn cash() -> RefundEvent {
    RefundEvent::RefundRequested(cash_request())
}

fn candy() -> RefundEvent {
    RefundEvent::RefundRequested(candy_request())
}

fn submitted() -> RefundEvent {
    RefundEvent::RefundSubmitted { at: t(1) }
}

fn succeed() -> RefundCommand {
    RefundCommand::Succeed {
        gateway_refund_id: Some("50300001".into()),
        response: "SUCCESS".into(),
        at: t(5),
    }
}

fn succeeded() -> RefundEvent {
    RefundEvent::RefundSucceeded {
        gateway_refund_id: Some("50300001".into()),
        response: "SUCCESS".into(),
        at: t(5),
    }
}

fn fail() -> RefundCommand {
    RefundCommand::Fail {
        reason: "ACCOUNT_FROZEN".into(),
        response: "CHANGE".into(),
        at: t(5),
    }
}

fn failed() -> RefundEvent {
    RefundEvent::RefundFailed {
        reason: "ACCOUNT_FROZEN".into(),
        response: "CHANGE".into(),
        at: t(5),
    }
}

fn close() -> RefundCommand {
    RefundCommand::Close {
        response: "CLOSED".into(),
        at: t(5),
    }
}

fn closed() -> RefundEvent {
    RefundEvent::RefundClosed {
        response: "CLOSED".into(),
        at: t(5),
    }
}

fn respond(response: &str) -> RefundCommand {
    RefundCommand::RecordResponse {
        response: response.into(),
        at: t(2),
    }
}

fn fold(events: &[RefundEvent]) -> Refund {
    let mut r = Refund::default();
    for e in events {
        r.check(e).unwrap();
        r.apply(e.clone());
    }
    r
}

fn wrong(status: RefundStatus, rule: &'static str) -> RefundError {
    RefundError::WrongStatus { status, rule }
}

#[test]
fn a_refund_request_is_validated() {
    let cases: [(RequestRefund, &str); 5] = [
        (
            RequestRefund {
                refund_no: String::new(),
                ..cash_request()
            },
            "refund_no",
        ),
        (
            RequestRefund {
                refund_no: "RF/1".into(),
                ..cash_request()
            },
            "refund_no",
        ),
        (
            RequestRefund {
                amount: 0,
                ..cash_request()
            },
            "amount",
        ),
        (
            RequestRefund {
                amount: -5_000,
                ..candy_request()
            },
            "amount",
        ),
        (
            RequestRefund {
                booking_no: None,
                ..candy_request()
            },
            "booking_no",
        ),
    ];
    for (request, field) in cases {
        let err = refund_test()
            .given_no_previous_events()
            .when(RefundCommand::Request(request))
            .inspect_result()
            .unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.kind()),
            ("INVALID_FIELD", Some(field), RefusalKind::Invalid),
            "{err}"
        );
    }
    for (request, event) in [(cash_request(), cash()), (candy_request(), candy())] {
        refund_test()
            .given_no_previous_events()
            .when(RefundCommand::Request(request))
            .then_expect_events(vec![event]);
    }
    assert_eq!(fold(&[cash()]).status.code(), 1, "PENDING");
}

#[test]
fn requesting_twice_is_refused_and_anything_before_the_request_is_not_found() {
    refund_test()
        .given(vec![cash()])
        .when(RefundCommand::Request(cash_request()))
        .then_expect_error(RefundError::AlreadyExists);
    assert_eq!(
        (RefundError::NotFound.code(), RefundError::NotFound.kind()),
        ("REFUND_NOT_FOUND", RefusalKind::NotFound)
    );
    for cmd in [
        RefundCommand::Submit { at: t(1) },
        respond("PROCESSING"),
        succeed(),
        fail(),
        close(),
    ] {
        refund_test()
            .given_no_previous_events()
            .when(cmd)
            .then_expect_error(RefundError::NotFound);
    }
}

#[test]
fn a_candy_refund_succeeds_directly_from_pending() {
    refund_test()
        .given(vec![candy()])
        .when(succeed())
        .then_expect_events(vec![succeeded()]);
    let r = fold(&[candy(), succeeded()]);
    assert_eq!(r.status, RefundStatus::Succeeded);
    // No gateway: it is never submitted, and it neither fails nor closes there.
    refund_test()
        .given(vec![candy()])
        .when(RefundCommand::Submit { at: t(1) })
        .then_expect_error(wrong(
            RefundStatus::Pending,
            "only a pending cash refund is submitted to its gateway",
        ));
    refund_test()
        .given(vec![candy()])
        .when(fail())
        .then_expect_error(wrong(
            RefundStatus::Pending,
            "only a refund at its gateway fails",
        ));
}

#[test]
fn a_cash_refund_is_refunding_before_it_succeeds_fails_or_closes() {
    for (cmd, err) in [
        (
            succeed(),
            wrong(
                RefundStatus::Pending,
                "a cash refund succeeds only from REFUNDING",
            ),
        ),
        (
            fail(),
            wrong(RefundStatus::Pending, "only a refund at its gateway fails"),
        ),
        (
            close(),
            wrong(RefundStatus::Pending, "only a refund at its gateway closes"),
        ),
    ] {
        refund_test()
            .given(vec![cash()])
            .when(cmd)
            .then_expect_error(err);
    }
    refund_test()
        .given(vec![cash()])
        .when(RefundCommand::Submit { at: t(1) })
        .then_expect_events(vec![submitted()]);
    assert_eq!(fold(&[cash(), submitted()]).status.code(), 2, "REFUNDING");
    refund_test()
        .given(vec![cash(), submitted()])
        .when(RefundCommand::Submit { at: t(2) })
        .then_expect_events(vec![]);
    for (cmd, event, status) in [
        (succeed(), succeeded(), RefundStatus::Succeeded),
        (fail(), failed(), RefundStatus::Failed),
        (close(), closed(), RefundStatus::Closed),
    ] {
        refund_test()
            .given(vec![cash(), submitted()])
            .when(cmd)
            .then_expect_events(vec![event.clone()]);
        assert_eq!(fold(&[cash(), submitted(), event]).status, status);
    }
}

#[test]
fn settling_is_idempotent_and_a_settled_refund_never_moves_again() {
    for (settled, status) in [
        (succeeded(), RefundStatus::Succeeded),
        (failed(), RefundStatus::Failed),
        (closed(), RefundStatus::Closed),
    ] {
        let given = vec![cash(), submitted(), settled];
        let commands = [
            (succeed(), "a cash refund succeeds only from REFUNDING"),
            (fail(), "only a refund at its gateway fails"),
            (close(), "only a refund at its gateway closes"),
            (
                RefundCommand::Submit { at: t(6) },
                "only a pending cash refund is submitted to its gateway",
            ),
        ];
        for (cmd, rule) in commands {
            let same = matches!(
                (&cmd, status),
                (RefundCommand::Succeed { .. }, RefundStatus::Succeeded)
                    | (RefundCommand::Fail { .. }, RefundStatus::Failed)
                    | (RefundCommand::Close { .. }, RefundStatus::Closed)
            );
            let result = refund_test()
                .given(given.clone())
                .when(cmd)
                .inspect_result();
            if same {
                assert_eq!(result, Ok(vec![]), "{status:?} told again");
            } else {
                assert_eq!(result, Err(wrong(status, rule)), "{status:?}");
            }
        }
    }
    // A candy refund that succeeded stays succeeded too.
    refund_test()
        .given(vec![candy(), succeeded()])
        .when(succeed())
        .then_expect_events(vec![]);
    refund_test()
        .given(vec![candy(), succeeded()])
        .when(close())
        .then_expect_error(wrong(
            RefundStatus::Succeeded,
            "only a refund at its gateway closes",
        ));
}

#[test]
fn a_gateway_answer_is_kept_only_while_refunding() {
    refund_test()
        .given(vec![cash()])
        .when(respond("PROCESSING"))
        .then_expect_error(wrong(
            RefundStatus::Pending,
            "a gateway answer is kept only while refunding",
        ));
    refund_test()
        .given(vec![cash(), submitted()])
        .when(respond("PROCESSING"))
        .then_expect_events(vec![RefundEvent::RefundResponseRecorded {
            response: "PROCESSING".into(),
            at: t(2),
        }]);
    let answered = vec![
        cash(),
        submitted(),
        RefundEvent::RefundResponseRecorded {
            response: "PROCESSING".into(),
            at: t(2),
        },
    ];
    let r = fold(&answered);
    assert_eq!(
        (r.status, r.last_response.as_deref()),
        (RefundStatus::Refunding, Some("PROCESSING"))
    );
    // The same answer again is not kept twice; a new one is.
    refund_test()
        .given(answered.clone())
        .when(respond("PROCESSING"))
        .then_expect_events(vec![]);
    refund_test()
        .given(answered)
        .when(respond("SYSTEMERROR"))
        .then_expect_events(vec![RefundEvent::RefundResponseRecorded {
            response: "SYSTEMERROR".into(),
            at: t(2),
        }]);
    // Settled: a late answer decides nothing.
    for settled in [succeeded(), failed(), closed()] {
        refund_test()
            .given(vec![cash(), submitted(), settled])
            .when(respond("PROCESSING"))
            .then_expect_events(vec![]);
    }
}

#[test]
fn a_gateway_answer_is_cut_to_its_bound() {
    let long = "é".repeat(RESPONSE_CHARS_MAX + 10);
    let events = fold(&[cash(), submitted()])
        .decide(RefundCommand::RecordResponse {
            response: long,
            at: t(2),
        })
        .unwrap();
    let RefundEvent::RefundResponseRecorded { response, .. } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(response.chars().count(), RESPONSE_CHARS_MAX);
}

#[test]
fn check_refuses_events_that_do_not_follow_from_the_stream() {
    assert!(Refund::default().check(&submitted()).is_err());
    let pending = fold(&[cash()]);
    assert!(pending.check(&cash()).is_err(), "requested twice");
    for e in [succeeded(), failed(), closed()] {
        assert!(pending.check(&e).is_err(), "{} before REFUNDING", e.name());
    }
    let candy_pending = fold(&[candy()]);
    assert!(candy_pending.check(&submitted()).is_err());
    assert_eq!(candy_pending.check(&succeeded()), Ok(()));
    let done = fold(&[cash(), submitted(), succeeded()]);
    for e in [submitted(), succeeded(), failed(), closed()] {
        assert!(done.check(&e).is_err(), "{} after success", e.name());
    }
    assert_eq!(Refund::ledger_ref(&succeeded()), None);
}
