//! Bookings and their candy holds (SPEC §10 R-HOLD-1, seed 000): the no-show rule in
//! each branch, its re-check and no back-fill, the call finish once, the call-finish
//! scan, the moderation abort without income and its repair scan, the candy refund
//! through the candy account, and holds never past the balance. Candy adds up across
//! streams after every test.

use crate::common::TestDb;
use crate::services_env::{ServicesEnv, PRICE};
use chrono::{DateTime, Duration, Utc};
use factledger::services::flow;
use factledger::services::scans::Scan;
use factledger::services::units;
use factledger_aggregates::booking::BookingCommand;
use serde_json::{json, Value};

const FUNDS: i64 = 10_000;

/// The log's head: what a read after a direct flow or scan waits for.
async fn head(env: &ServicesEnv) -> i64 {
    env.app.state.store.head_position().await.expect("head")
}

/// GET `path` once the projections have everything written so far; (status, body).
/// The service waits a bounded time for its projection: a 503 `PROJECTION_BEHIND`
/// on a loaded machine is asked again (at most 30 s).
async fn fresh(env: &ServicesEnv, path: &str) -> (u16, Value) {
    let h = head(env).await;
    let sep = if path.contains('?') { '&' } else { '?' };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, body) = env.app.get(&format!("{path}{sep}min_position={h}")).await;
        if status != 503 || std::time::Instant::now() >= deadline {
            return (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The booking once the projection has everything written so far.
async fn booking(env: &ServicesEnv, no: &str) -> Value {
    let (status, body) = fresh(env, &format!("/v1/bookings/{no}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// (balance, held) of `user` once the projection has everything written so far.
async fn candy(env: &ServicesEnv, user: i64) -> (i64, i64) {
    let (status, body) = fresh(env, &format!("/v1/candy-accounts/{user}")).await;
    match status {
        200 => (
            body["balance"].as_i64().expect("balance"),
            body["held"].as_i64().expect("held"),
        ),
        404 => (0, 0),
        _ => panic!("candy account {user}: {status} {body}"),
    }
}

/// A journal account's `balance_minor`, `None` when it was never touched.
async fn account(env: &ServicesEnv, name: &str) -> Option<i64> {
    let (status, body) = fresh(env, &format!("/v1/accounts/{name}")).await;
    match status {
        200 => Some(body["balance_minor"].as_i64().expect("balance_minor")),
        404 => None,
        _ => panic!("account {name}: {status} {body}"),
    }
}

async fn income(env: &ServicesEnv, artist: i64) -> i64 {
    account(env, &format!("artist_income:{artist}:ZZC"))
        .await
        .unwrap_or(0)
}

/// The event types of one stream, in order.
async fn events(env: &ServicesEnv, aggregate_type: &str, id: &str) -> Vec<String> {
    env.app
        .state
        .store
        .read_stream(aggregate_type, id, 1, 1_000)
        .await
        .expect("read stream")
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn count(events: &[String], name: &str) -> usize {
    events.iter().filter(|e| *e == name).count()
}

/// The refund number a no-show decision names.
fn refund_no(booking_no: &str) -> String {
    units::bookings::no_show_refund_no(booking_no)
}

fn start_of(booked: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(booked["start_at"].as_str().expect("start_at"))
        .expect("RFC 3339 start_at")
        .with_timezone(&Utc)
}

async fn join(env: &ServicesEnv, no: &str, parties: &[&str]) {
    for party in parties {
        let (status, body) = env.action(no, "join", json!({ "party": party })).await;
        assert_eq!(status, 200, "{party} joins {no}: {body}");
    }
}

/// A call in progress (status 3): both joined, started.
async fn in_call(env: &ServicesEnv, no: &str, fan: i64, artist: i64) -> Value {
    let booked = env.book(no, fan, artist, Duration::minutes(1)).await;
    join(env, no, &["FAN", "ARTIST"]).await;
    let (status, body) = env.action(no, "start", json!({})).await;
    assert_eq!((status, body["status"].clone()), (200, json!(3)), "{body}");
    booked
}

/// Run the no-show scan on one booking at `at`; returns how many it decided.
async fn no_show_scan(env: &ServicesEnv, no: &str, at: DateTime<Utc>) -> u32 {
    let report = env.scan(Scan::NoShow, Some(no), at).await;
    assert_eq!((report.candidates, report.failed), (1, 0), "{report:?}");
    report.acted
}

/// The no-show refund of `no` ran (by its queued job): a CANDY refund of PRICE,
/// SUCCEEDED, and the hold back on the balance.
async fn refunded(env: &ServicesEnv, no: &str) -> Value {
    let rno = refund_no(no);
    let refund = env
        .wait(&format!("/v1/refunds/{rno}"), |r| r["status"] == 3)
        .await;
    assert_eq!(refund["status_name"], "SUCCEEDED", "{refund}");
    assert_eq!(refund["method"], "CANDY", "{refund}");
    assert_eq!(refund["amount"], PRICE, "{refund}");
    assert_eq!(refund["booking_no"], no, "{refund}");
    let b = booking(env, no).await;
    assert_eq!(b["hold"]["state"], "REFUNDED", "{b}");
    assert_eq!(b["hold"]["refund_no"], rno.as_str(), "{b}");
    refund
}

both_backends!(
    no_show_only_the_fan_joined_is_an_artist_no_show_with_a_full_candy_refund,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let booked = env.book("BK-A", 11, 22, Duration::minutes(1)).await;
        join(&env, "BK-A", &["FAN"]).await;
        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, PRICE));

        let at = start_of(&booked) + Duration::minutes(12);
        assert_eq!(no_show_scan(&env, "BK-A", at).await, 1);
        let b = booking(&env, "BK-A").await;
        assert_eq!(b["status"], 5, "{b}");
        assert_eq!(b["status_name"], "ARTIST_NO_SHOW", "{b}");

        refunded(&env, "BK-A").await;
        assert_eq!(candy(&env, 11).await, (FUNDS, 0), "the hold is back");
        assert_eq!(income(&env, 22).await, 0, "no income for a no-show artist");
        let t = env.conserved().await;
        assert_eq!((t.refunded, t.open_holds), (PRICE, 0), "{t:?}");
    }
);

both_backends!(
    no_show_only_the_artist_joined_is_a_fan_no_show_settled_to_the_artist_without_refund,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let booked = env.book("BK-F", 11, 22, Duration::minutes(1)).await;
        join(&env, "BK-F", &["ARTIST"]).await;

        let at = start_of(&booked) + Duration::minutes(12);
        assert_eq!(no_show_scan(&env, "BK-F", at).await, 1);
        let b = booking(&env, "BK-F").await;
        assert_eq!(b["status"], 6, "{b}");
        assert_eq!(b["status_name"], "FAN_NO_SHOW", "{b}");
        assert_eq!(b["hold"]["state"], "SETTLED", "{b}");
        assert_eq!(b["hold"]["refund_no"], Value::Null, "{b}");

        let (status, body) = fresh(&env, &format!("/v1/refunds/{}", refund_no("BK-F"))).await;
        assert_eq!(status, 404, "no refund record: {body}");
        assert!(events(&env, "refund", &refund_no("BK-F")).await.is_empty());

        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, 0));
        assert_eq!(income(&env, 22).await, PRICE, "the hold went to the artist");
        let t = env.conserved().await;
        assert_eq!((t.refunded, t.open_holds), (0, 0), "{t:?}");
    }
);

both_backends!(
    no_show_neither_joined_is_a_both_no_show_with_a_full_refund,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let booked = env.book("BK-N", 11, 22, Duration::minutes(1)).await;
        assert_eq!(booked["status"], 1, "{booked}");

        let at = start_of(&booked) + Duration::minutes(12);
        assert_eq!(no_show_scan(&env, "BK-N", at).await, 1);
        let b = booking(&env, "BK-N").await;
        assert_eq!(b["status"], 7, "{b}");
        assert_eq!(b["status_name"], "BOTH_NO_SHOW", "{b}");

        refunded(&env, "BK-N").await;
        assert_eq!(candy(&env, 11).await, (FUNDS, 0));
        assert_eq!(income(&env, 22).await, 0);
        env.conserved().await;
    }
);

both_backends!(
    no_show_both_joined_but_never_started_is_a_both_no_show_with_a_full_refund,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let booked = env.book("BK-B", 11, 22, Duration::minutes(1)).await;
        join(&env, "BK-B", &["FAN", "ARTIST"]).await;
        assert_eq!(booking(&env, "BK-B").await["status"], 2);

        // Through the flow directly (what the queued `video_no_show` job runs).
        let at = start_of(&booked) + Duration::minutes(11);
        let out = flow::no_show(&env.ctx(), "BK-B", at, None)
            .await
            .expect("no-show");
        assert_eq!(out["events"], json!(["NoShowDecided"]), "{out}");
        assert_eq!(out["refund_no"], refund_no("BK-B").as_str(), "{out}");
        let b = booking(&env, "BK-B").await;
        assert_eq!(b["status"], 7, "{b}");
        assert_eq!(b["started_at"], Value::Null, "{b}");

        refunded(&env, "BK-B").await;
        assert_eq!(candy(&env, 11).await, (FUNDS, 0));
        assert_eq!(income(&env, 22).await, 0);
        env.conserved().await;
    }
);

both_backends!(
    no_show_checked_before_ten_minutes_is_recorded_and_decided_by_the_later_scan,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let one = env.book("BK-R1", 11, 22, Duration::minutes(1)).await;
        let two = env.book("BK-R2", 11, 23, Duration::minutes(1)).await;
        join(&env, "BK-R2", &["FAN"]).await;
        let start = start_of(&one).max(start_of(&two));

        // Too early: recorded, status unchanged, decided nothing.
        for (no, status) in [("BK-R1", 1), ("BK-R2", 2)] {
            assert_eq!(no_show_scan(&env, no, Utc::now()).await, 0);
            let b = booking(&env, no).await;
            assert_eq!(b["status"], status, "{b}");
            assert!(b["no_show_checked_at"].is_string(), "{b}");
            assert_eq!(b["hold"]["state"], "OPEN", "{b}");
        }
        // Still too early at start + 9 min: checked again, still nothing decided.
        let early = start + Duration::minutes(9);
        let report = env.scan(Scan::NoShow, None, early).await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        assert_eq!(no_show_scan(&env, "BK-R1", early).await, 0);
        assert_eq!(booking(&env, "BK-R1").await["status"], 1);
        assert_eq!(candy(&env, 11).await, (FUNDS - 2 * PRICE, 2 * PRICE));

        // The 5-minute scan at start + 12 min takes both (already checked) bookings.
        let report = env
            .scan(Scan::NoShow, None, start + Duration::minutes(12))
            .await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (2, 2, 0),
            "{report:?}"
        );
        assert_eq!(booking(&env, "BK-R1").await["status"], 7);
        assert_eq!(booking(&env, "BK-R2").await["status"], 5);
        refunded(&env, "BK-R1").await;
        refunded(&env, "BK-R2").await;
        assert_eq!(candy(&env, 11).await, (FUNDS, 0));
        let deferred = events(&env, "booking", "BK-R1").await;
        assert_eq!(count(&deferred, "NoShowCheckDeferred"), 2, "{deferred:?}");
        assert_eq!(count(&deferred, "NoShowDecided"), 1, "{deferred:?}");
        env.conserved().await;
    }
);

both_backends!(
    no_show_final_states_are_never_decided_again,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let a = env.book("BK-X1", 11, 22, Duration::minutes(1)).await;
        join(&env, "BK-X1", &["FAN"]).await;
        let f = env.book("BK-X2", 11, 23, Duration::minutes(1)).await;
        join(&env, "BK-X2", &["ARTIST"]).await;
        let start = start_of(&a).max(start_of(&f));

        let report = env
            .scan(Scan::NoShow, None, start + Duration::minutes(12))
            .await;
        assert_eq!((report.candidates, report.acted), (2, 2), "{report:?}");
        refunded(&env, "BK-X1").await;
        let balances = candy(&env, 11).await;
        assert_eq!(balances, (FUNDS - PRICE, 0));
        assert_eq!(income(&env, 23).await, PRICE);
        let booking_events = [
            events(&env, "booking", "BK-X1").await,
            events(&env, "booking", "BK-X2").await,
        ];
        let refund_events = events(&env, "refund", &refund_no("BK-X1")).await;
        assert_eq!(
            refund_events,
            ["RefundRequested", "RefundSucceeded"],
            "{refund_events:?}"
        );
        let candy_events = events(&env, "candy_account", "11").await;

        // A second scan, by batch and one by one, and the flow itself: nothing.
        let later = start + Duration::minutes(20);
        let report = env.scan(Scan::NoShow, None, later).await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        for no in ["BK-X1", "BK-X2"] {
            assert_eq!(no_show_scan(&env, no, later).await, 0, "{no}");
            let out = flow::no_show(&env.ctx(), no, later, None)
                .await
                .expect("no-show");
            assert_eq!(out["events"], json!([]), "{out}");
            assert_eq!(out["refund_no"], Value::Null, "{out}");
        }
        // Give a wrongly queued refund job time to show up.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;

        assert_eq!(booking(&env, "BK-X1").await["status"], 5);
        assert_eq!(booking(&env, "BK-X2").await["status"], 6);
        assert_eq!(events(&env, "booking", "BK-X1").await, booking_events[0]);
        assert_eq!(events(&env, "booking", "BK-X2").await, booking_events[1]);
        assert_eq!(
            events(&env, "refund", &refund_no("BK-X1")).await,
            refund_events
        );
        assert!(events(&env, "refund", &refund_no("BK-X2")).await.is_empty());
        assert_eq!(events(&env, "candy_account", "11").await, candy_events);
        assert_eq!(candy(&env, 11).await, balances);
        assert_eq!(income(&env, 23).await, PRICE);
        let t = env.conserved().await;
        assert_eq!(t.refunded, PRICE, "one refund: {t:?}");
    }
);

both_backends!(
    call_finish_under_two_concurrent_finishers_settles_the_hold_once,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;

        // Two concurrent `POST :finish`.
        in_call(&env, "BK-C1", 11, 22).await;
        let (one, two) = tokio::join!(
            env.action("BK-C1", "finish", json!({})),
            env.action("BK-C1", "finish", json!({}))
        );
        assert_eq!(one.0, 200, "{}", one.1);
        assert_eq!(two.0, 200, "{}", two.1);
        // Each answer is the booking after the action: finished.
        assert_eq!(one.1["status"], 4, "{}", one.1);
        assert_eq!(two.1["status"], 4, "{}", two.1);
        let b = booking(&env, "BK-C1").await;
        assert_eq!(b["status"], 4, "{b}");
        assert_eq!(b["hold"]["state"], "SETTLED", "{b}");
        assert_eq!(b["abnormal"], 0, "{b}");
        assert!(b["duration_s"].is_i64(), "{b}");
        let stream = events(&env, "booking", "BK-C1").await;
        assert_eq!(count(&stream, "CallFinished"), 1, "{stream:?}");
        assert_eq!(income(&env, 22).await, PRICE);
        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, 0));

        // Two concurrent finishers through the flow (the finish job's step): one
        // finishes, the other finds a finished call.
        in_call(&env, "BK-C2", 11, 23).await;
        let ctx = env.ctx();
        let now = Utc::now();
        let (a, b) = tokio::join!(
            flow::finish_call(&ctx, "BK-C2", now, None),
            flow::finish_call(&ctx, "BK-C2", now, None)
        );
        let (a, b) = (a.expect("finish"), b.expect("finish"));
        let finished = [&a, &b].iter().filter(|v| v["finished"] == true).count();
        assert_eq!(finished, 1, "{a} {b}");
        let stream = events(&env, "booking", "BK-C2").await;
        assert_eq!(count(&stream, "CallFinished"), 1, "{stream:?}");
        let fan = events(&env, "candy_account", "11").await;
        assert_eq!(count(&fan, "HoldSettled"), 2, "one per call: {fan:?}");
        assert_eq!(booking(&env, "BK-C2").await["status"], 4);
        assert_eq!(income(&env, 23).await, PRICE);
        assert_eq!(candy(&env, 11).await, (FUNDS - 2 * PRICE, 0));

        // A finish afterwards changes nothing either.
        let (status, body) = env.action("BK-C1", "finish", json!({})).await;
        assert_eq!((status, body["status"].clone()), (200, json!(4)), "{body}");
        assert_eq!(income(&env, 22).await, PRICE);
        let t = env.conserved().await;
        assert_eq!(t.open_holds, 0, "{t:?}");
    }
);

both_backends!(
    call_finish_scan_finishes_only_calls_in_progress_at_their_booked_end,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        in_call(&env, "BK-S3", 11, 22).await;
        let started = DateTime::parse_from_rfc3339(
            booking(&env, "BK-S3").await["started_at"]
                .as_str()
                .expect("started_at"),
        )
        .expect("RFC 3339")
        .with_timezone(&Utc);
        let idle = env.book("BK-S1", 11, 23, Duration::minutes(1)).await;
        assert_eq!(idle["status"], 1, "{idle}");

        // Before its booked end (30 minutes): not due.
        let report = env
            .scan(Scan::CallFinish, None, started + Duration::minutes(29))
            .await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        assert_eq!(booking(&env, "BK-S3").await["status"], 3);

        let at = started + Duration::minutes(31);
        let report = env.scan(Scan::CallFinish, None, at).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        let b = booking(&env, "BK-S3").await;
        assert_eq!(b["status"], 4, "{b}");
        assert_eq!(b["hold"]["state"], "SETTLED", "{b}");
        // The real duration, in whole seconds (started_at is read back in microseconds).
        let duration = b["duration_s"].as_i64().expect("duration_s");
        assert!((31 * 60 - 1..=31 * 60).contains(&duration), "{b}");
        assert_eq!(income(&env, 22).await, PRICE);

        // The booking in status 1 is not a call in progress: untouched, by batch, by
        // number and through the flow.
        let report = env.scan(Scan::CallFinish, Some("BK-S1"), at).await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        let out = flow::finish_call(&env.ctx(), "BK-S1", at, None)
            .await
            .expect("finish");
        assert_eq!(out["finished"], false, "{out}");
        let b = booking(&env, "BK-S1").await;
        assert_eq!(b["status"], 1, "{b}");
        assert_eq!(b["hold"]["state"], "OPEN", "{b}");
        assert_eq!(b["ended_at"], Value::Null, "{b}");
        assert_eq!(income(&env, 23).await, 0);
        let (status, body) = env.action("BK-S1", "finish", json!({})).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["code"], "BOOKING_STATUS_CONFLICT", "{body}");

        // A second scan finds nothing more.
        let report = env
            .scan(Scan::CallFinish, None, at + Duration::minutes(1))
            .await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        assert_eq!(candy(&env, 11).await, (FUNDS - 2 * PRICE, PRICE));
        let t = env.conserved().await;
        assert_eq!(t.open_holds, PRICE, "{t:?}");
    }
);

both_backends!(
    moderation_abort_completes_the_call_abnormally_without_income,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        in_call(&env, "BK-M1", 11, 22).await;

        let (status, b) = env
            .action("BK-M1", "moderate", json!({"reason": "nudity"}))
            .await;
        assert_eq!(status, 200, "{b}");
        assert_eq!(b["status"], 4, "{b}");
        assert_eq!(b["abnormal"], 1, "{b}");
        assert!(b["duration_s"].is_i64(), "{b}");
        assert!(b["ended_at"].is_string(), "{b}");
        assert_eq!(b["moderation_reason"], "nudity", "{b}");
        assert_eq!(b["hold"]["state"], "FORFEITED", "{b}");
        assert_eq!(income(&env, 22).await, 0, "no income");
        assert_eq!(
            account(&env, "candy_forfeited:MODERATION:ZZC").await,
            Some(PRICE)
        );
        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, 0));
        let stream = events(&env, "booking", "BK-M1").await;

        // A later finish changes nothing.
        let (status, b) = env.action("BK-M1", "finish", json!({})).await;
        assert_eq!(status, 200, "{b}");
        let b = booking(&env, "BK-M1").await;
        assert_eq!(
            (b["status"].clone(), b["abnormal"].clone()),
            (json!(4), json!(1))
        );
        assert_eq!(b["hold"]["state"], "FORFEITED", "{b}");
        assert_eq!(events(&env, "booking", "BK-M1").await, stream);
        assert_eq!(count(&stream, "CallFinished"), 0, "{stream:?}");
        assert_eq!(income(&env, 22).await, 0);
        assert_eq!(
            account(&env, "candy_forfeited:MODERATION:ZZC").await,
            Some(PRICE)
        );
        let t = env.conserved().await;
        assert_eq!(t.open_holds, 0, "{t:?}");
    }
);

both_backends!(
    moderation_repair_scan_aborts_a_flagged_call_whose_abort_failed,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        in_call(&env, "BK-M2", 11, 22).await;

        // Flagged, but the abort never ran.
        let meta = env.ctx().metadata("test:moderation");
        let flagged = units::booking_step(
            &env.app.state.store,
            &meta,
            "BK-M2",
            BookingCommand::FlagModeration {
                reason: "nudity".into(),
                at: Utc::now(),
            },
            None,
        )
        .await
        .expect("flag");
        assert_eq!(flagged.value.len(), 1);
        let b = booking(&env, "BK-M2").await;
        assert_eq!(b["status"], 3, "{b}");
        assert_eq!(b["moderation_reason"], "nudity", "{b}");

        // A flagged call never ends by a finish (no income).
        let (status, body) = env.action("BK-M2", "finish", json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(booking(&env, "BK-M2").await["status"], 3);

        let report = env.scan(Scan::ModerationRepair, None, Utc::now()).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        let b = booking(&env, "BK-M2").await;
        assert_eq!(b["status"], 4, "{b}");
        assert_eq!(b["abnormal"], 1, "{b}");
        assert!(b["duration_s"].is_i64(), "{b}");
        assert_eq!(b["hold"]["state"], "FORFEITED", "{b}");
        assert_eq!(income(&env, 22).await, 0);
        assert_eq!(
            account(&env, "candy_forfeited:MODERATION:ZZC").await,
            Some(PRICE)
        );
        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, 0));

        // Repaired once: the scan again finds nothing, by batch or by number.
        let report = env.scan(Scan::ModerationRepair, None, Utc::now()).await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        let report = env
            .scan(Scan::ModerationRepair, Some("BK-M2"), Utc::now())
            .await;
        // Not `acted`: the scan counts a refund found already settled as acted.
        assert_eq!(report.failed, 0, "{report:?}");
        let stream = events(&env, "booking", "BK-M2").await;
        assert_eq!(count(&stream, "CallAborted"), 1, "{stream:?}");
        assert_eq!(count(&stream, "CallFinished"), 0, "{stream:?}");
        env.conserved().await;
    }
);

both_backends!(
    candy_refund_returns_the_hold_through_the_candy_account_once,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        let booked = env.book("BK-RF", 11, 22, Duration::minutes(1)).await;
        join(&env, "BK-RF", &["FAN"]).await;
        let rno = refund_no("BK-RF");

        // The refund job is not queued (enqueue fails): the refund scan is the backstop.
        env.services
            .faults
            .enqueue
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let decided_at = start_of(&booked) + Duration::minutes(12);
        assert_eq!(no_show_scan(&env, "BK-RF", decided_at).await, 1);
        let (status, refund) = fresh(&env, &format!("/v1/refunds/{rno}")).await;
        assert_eq!(status, 200, "{refund}");
        assert_eq!(refund["status"], 1, "PENDING: {refund}");
        assert_eq!(refund["method"], "CANDY", "{refund}");
        assert_eq!(refund["amount"], PRICE, "{refund}");
        assert_eq!(booking(&env, "BK-RF").await["hold"]["state"], "REFUND_DUE");
        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, PRICE));
        env.conserved().await;

        // The refund scan (PENDING for more than 30 s) runs it.
        let at = Utc::now() + Duration::minutes(1);
        let report = env.scan(Scan::Refund, None, at).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        let refund = refunded(&env, "BK-RF").await;
        assert_eq!(refund["status"], 3, "{refund}");
        assert_eq!(candy(&env, 11).await, (FUNDS, 0));
        let refund_events = events(&env, "refund", &rno).await;
        assert_eq!(refund_events, ["RefundRequested", "RefundSucceeded"]);
        let fan = events(&env, "candy_account", "11").await;
        assert_eq!(count(&fan, "HoldRefunded"), 1, "{fan:?}");

        // Again: by batch nothing is due; by number and through the flow nothing moves.
        let report = env.scan(Scan::Refund, None, at).await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        let report = env.scan(Scan::Refund, Some(&rno), at).await;
        // Not `acted`: the scan counts a refund found already settled as acted.
        assert_eq!(report.failed, 0, "{report:?}");
        let out = flow::run_refund(&env.ctx(), &rno, at, None)
            .await
            .expect("refund");
        assert_eq!(out["status"], "SUCCEEDED", "{out}");
        assert_eq!(events(&env, "refund", &rno).await, refund_events);
        assert_eq!(events(&env, "candy_account", "11").await, fan);
        assert_eq!(candy(&env, 11).await, (FUNDS, 0));
        let (status, refund) = fresh(&env, &format!("/v1/refunds/{rno}")).await;
        assert_eq!(status, 200, "{refund}");
        assert_eq!(
            (refund["status"].clone(), refund["status_name"].clone()),
            (json!(3), json!("SUCCEEDED")),
            "{refund}"
        );
        let t = env.conserved().await;
        assert_eq!((t.refunded, t.open_holds), (PRICE, 0), "{t:?}");
    }
);

both_backends!(
    a_hold_never_goes_past_the_balance,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, PRICE - 1).await;
        let start_at = (Utc::now() + Duration::minutes(1)).to_rfc3339();
        // Too little candy, and no candy account at all.
        for (no, fan) in [("BK-P1", 11), ("BK-P2", 12)] {
            let (status, body) = env
                .app
                .post(
                    "/v1/bookings",
                    json!({"booking_no": no, "fan_user_id": fan, "artist_id": 22,
                           "start_at": start_at, "minutes": 30, "price_candy": PRICE}),
                )
                .await;
            assert_eq!(status, 409, "{body}");
            assert_eq!(body["code"], "INSUFFICIENT_CANDY", "{body}");

            // Nothing written: no booking, no order, no hold.
            let (status, body) = fresh(&env, &format!("/v1/bookings/{no}")).await;
            assert_eq!(status, 404, "{body}");
            let (status, body) = fresh(&env, &format!("/v1/service-orders/BKO-{no}")).await;
            assert_eq!(status, 404, "{body}");
            assert!(events(&env, "booking", no).await.is_empty());
            assert!(events(&env, "service_order", &format!("BKO-{no}"))
                .await
                .is_empty());
        }
        assert_eq!(candy(&env, 11).await, (PRICE - 1, 0));
        assert_eq!(candy(&env, 12).await, (0, 0));
        let fan = events(&env, "candy_account", "11").await;
        assert_eq!(count(&fan, "HoldPlaced"), 0, "{fan:?}");
        assert!(events(&env, "candy_account", "12").await.is_empty());

        // Exactly the balance is fine.
        env.fund(11, 1).await;
        let booked = env.book("BK-P3", 11, 22, Duration::minutes(1)).await;
        assert_eq!(booked["hold"]["state"], "OPEN", "{booked}");
        assert_eq!(candy(&env, 11).await, (0, PRICE));
        let t = env.conserved().await;
        assert_eq!((t.issued, t.holds, t.open_holds), (PRICE, PRICE, PRICE));
    }
);

both_backends!(
    a_booking_made_again_after_a_crash_before_its_delivery_is_active_at_once,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        // The first request wrote its unit (booking, paid candy order, hold) and the
        // process died before the delivery that activates the booking.
        let now = Utc::now();
        let call = factledger_aggregates::booking::BookCall {
            order_no: "BKO-BK-CR".into(),
            booking_no: "BK-CR".into(),
            fan_user_id: factledger_aggregates::services::UserId::parse(11).unwrap(),
            artist_id: factledger_aggregates::services::UserId::parse(22).unwrap(),
            start_at: now + Duration::minutes(5),
            minutes: 30,
            price_candy: PRICE,
            at: now,
        };
        let meta = factledger::infra::store::Metadata::service("tester", "ID");
        let timeout = now + Duration::minutes(15);
        units::bookings::book(&env.app.state.store, &meta, call.clone(), timeout, None)
            .await
            .expect("the first request's unit");
        assert_eq!(booking(&env, "BK-CR").await["status"], 0);

        // The client sends the booking again under its number: it comes back active
        // (not after the delivery scan's 30 s grace), and the parties can join.
        let (status, body) = env
            .app
            .post(
                "/v1/bookings",
                json!({"booking_no": "BK-CR", "fan_user_id": 11, "artist_id": 22,
                       "start_at": call.start_at.to_rfc3339(), "minutes": 30,
                       "price_candy": PRICE}),
            )
            .await;
        assert_eq!(status, 200, "booked before: {body}");
        assert_eq!(
            (&body["status"], &body["status_name"]),
            (&json!(1), &json!("BOOKED")),
            "{body}"
        );
        join(&env, "BK-CR", &["FAN", "ARTIST"]).await;
        // Once: one hold, one delivery.
        let order = events(&env, "service_order", "BKO-BK-CR").await;
        assert_eq!(count(&order, "OrderDelivered"), 1, "{order:?}");
        assert_eq!(candy(&env, 11).await, (FUNDS - PRICE, PRICE));
    }
);

/// `POST /v1/bookings/{no}:{action}` with a raw body and content type (or none).
async fn action_raw(
    env: &ServicesEnv,
    no: &str,
    action: &str,
    content_type: Option<&str>,
    body: &'static str,
) -> (u16, Value) {
    let mut req = env
        .app
        .client
        .post(format!("{}/v1/bookings/{no}:{action}", env.app.base))
        .bearer_auth(&env.app.admin)
        .body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

both_backends!(
    actions_take_an_empty_body_with_or_without_a_json_content_type,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        env.fund(11, FUNDS).await;
        env.book("BK-E", 11, 22, Duration::minutes(1)).await;
        let json_type = Some("application/json");
        // `:join` needs its party: an empty body is a missing field, named.
        let (status, body) = action_raw(&env, "BK-E", "join", json_type, "").await;
        assert_eq!(
            (status, &body["code"], &body["field"]),
            (422, &json!("MISSING_FIELD"), &json!("party")),
            "{body}"
        );
        join(&env, "BK-E", &["FAN", "ARTIST"]).await;
        // `:start` and `:finish` need nothing: empty, labelled JSON or not at all.
        let (status, body) = action_raw(&env, "BK-E", "start", json_type, "").await;
        assert_eq!((status, &body["status"]), (200, &json!(3)), "{body}");
        let (status, body) = action_raw(&env, "BK-E", "finish", None, "").await;
        assert_eq!((status, &body["status"]), (200, &json!(4)), "{body}");
        // A body that is there is still checked: not JSON, or without the JSON type.
        let (status, body) = action_raw(&env, "BK-E", "finish", json_type, "{").await;
        assert_eq!(
            (status, &body["code"]),
            (422, &json!("MALFORMED_JSON")),
            "{body}"
        );
        let (status, body) = action_raw(&env, "BK-E", "finish", None, "{}").await;
        assert_eq!(
            (status, &body["code"]),
            (422, &json!("INVALID_BODY")),
            "{body}"
        );
    }
);
