//! Subscriptions and IM membership over the gateway simulator (seed 000): a paid
//! subscription order grants the entitlement, adds the fan to the artist's IM group
//! and queues the subscription message once; the expiry scan expires it and queues
//! one targeted membership sync that removes the fan; an expiry racing a renewal
//! keeps the fan subscribed and in the group; IM messages go through their own
//! outbox sink with its retry schedule and dead letters, never blocking the others.

use crate::common::{scalar, TestDb};
use crate::services_env::ServicesEnv;
use chrono::{DateTime, Duration, Utc};
use factledger::infra::outbox::webhook::{WebhookConfig, WebhookSink};
use factledger::infra::outbox::{RelayConfig, Sink, SinkPolicy};
use factledger::runtime::bus::load;
use factledger::services::scans::{parse_member_target, Scan};
use factledger::services::units;
use factledger_aggregates::im_member::ImMember;
use factledger_aggregates::services::{pair_id, UserId};
use factledger_aggregates::subscription::{Subscription, SubscriptionStatus};
use serde_json::{json, Value};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The price of a test subscription (CNY minor units).
const SUBSCRIPTION_PRICE: i64 = 3_000;

fn user(id: i64) -> UserId {
    UserId::parse(id).expect("a user id")
}

/// Create subscription order `order_no` (30 days of `artist` for `fan`).
async fn subscription_order(env: &ServicesEnv, order_no: &str, artist: i64, fan: i64) {
    let (status, body) = env
        .create_order(json!({
            "order_no": order_no, "user_id": fan,
            "business": {"kind": "SUBSCRIPTION", "artist_id": artist, "days": 30},
            "method": "WECHAT", "amount_minor": SUBSCRIPTION_PRICE, "currency": "CNY"
        }))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["business_type"], "SUBSCRIPTION", "{body}");
}

/// A paid and delivered subscription order.
async fn subscribe(env: &ServicesEnv, order_no: &str, artist: i64, fan: i64) -> Value {
    subscription_order(env, order_no, artist, fan).await;
    let paid = env.pay(order_no, SUBSCRIPTION_PRICE, "CNY").await;
    assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
    env.wait_order(order_no, |o| o["status"] == 3).await
}

/// The subscription row of `artist` × `fan` once it satisfies `done`.
async fn wait_subscription(
    env: &ServicesEnv,
    artist: i64,
    fan: i64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let v = env
        .wait(
            &format!("/v1/subscriptions?artist_id={artist}&fan_user_id={fan}"),
            |v| {
                v["subscriptions"].as_array().is_some_and(|s| s.len() == 1)
                    && done(&v["subscriptions"][0])
            },
        )
        .await;
    v["subscriptions"][0].clone()
}

fn instant(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().expect("an instant"))
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

/// Poll `count` (at most 30 s) until it equals `want`.
async fn wait_count(db: &factledger::infra::db::Db, sql: &str, want: i64) {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let n = scalar(db, sql).await;
        if n == want {
            return;
        }
        assert!(Instant::now() < deadline, "{sql}: {n}, never {want}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn outbox_count(message_type: &str, aggregate_id: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM outbox WHERE type = '{message_type}' AND aggregateid = '{aggregate_id}'"
    )
}

both_backends!(
    a_paid_subscription_grants_the_entitlement_adds_the_member_and_queues_its_message_once,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        let before = Utc::now();
        let order = subscribe(&env, "SUB-1", 501, 601).await;
        let after = Utc::now();
        assert_eq!(
            order["payment_transactions"][0]["status"], "PAID",
            "{order}"
        );

        // The im_members job added the fan.
        let s = wait_subscription(&env, 501, 601, |s| s["member_status"] == 1).await;
        assert_eq!(s["status"], 1, "{s}");
        assert_eq!(s["last_order_no"], "SUB-1", "{s}");
        let expires = instant(&s["expires_at"]);
        assert!(
            expires >= before + Duration::days(30) && expires <= after + Duration::days(30),
            "{s}"
        );

        // The subscription message was queued once (its outbox message).
        let d = &env.app.state.db;
        wait_count(
            d,
            "SELECT COUNT(*) FROM subscription_grants WHERE order_no = 'SUB-1' AND message_queued = 1",
            1,
        )
        .await;
        let queued = outbox_count("subscription.SubscriptionMessageQueued", "501:601");
        assert_eq!(scalar(d, &queued).await, 1);
        let added = outbox_count("im_member.MemberAdded", "501:601");
        assert_eq!(scalar(d, &added).await, 1);

        // Its scan finds nothing left to queue; the message job again writes nothing.
        let report = env
            .scan(
                Scan::SubscriptionMessage,
                None,
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        let report = env
            .scan(
                Scan::SubscriptionMessage,
                Some("SUB-1"),
                Utc::now() + Duration::minutes(1),
            )
            .await;
        assert_eq!((report.acted, report.failed), (0, 0), "{report:?}");
        // A targeted re-sync of a member finds nothing to change.
        let report = env.scan(Scan::ImMembers, Some("501:601"), Utc::now()).await;
        assert_eq!((report.acted, report.failed), (1, 0), "{report:?}");
        assert_eq!(scalar(d, &queued).await, 1);
        assert_eq!(scalar(d, &added).await, 1);
    }
);

both_backends!(
    the_expiry_scan_expires_and_its_targeted_sync_removes_the_member,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        subscribe(&env, "SUB-X", 502, 602).await;
        let s = wait_subscription(&env, 502, 602, |s| s["member_status"] == 1).await;
        let expires = instant(&s["expires_at"]);

        // Before its end nothing expires.
        let report = env
            .scan(
                Scan::SubscriptionExpiry,
                None,
                expires - Duration::minutes(1),
            )
            .await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");

        let report = env
            .scan(
                Scan::SubscriptionExpiry,
                None,
                Utc::now() + Duration::days(31),
            )
            .await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        let extra = report.extra.clone().expect("dispatch counts");
        assert_eq!(
            (
                &extra["im_member_dispatch_ok"],
                &extra["im_member_dispatch_failed"]
            ),
            (&json!(1), &json!(0)),
            "{report:?}"
        );
        // The queued sync runs on the real clock, at which the entitlement is expired.
        let s = wait_subscription(&env, 502, 602, |s| {
            s["status"] == 2 && s["member_status"] == 2
        })
        .await;
        assert_eq!(
            s["expires_at"].as_str(),
            Some(
                expires
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                    .as_str()
            ),
            "{s}"
        );
        let removed = outbox_count("im_member.MemberRemoved", "502:602");
        assert_eq!(scalar(&env.app.state.db, &removed).await, 1);

        // Expired already: the next firing takes nothing and queues nothing.
        let report = env
            .scan(
                Scan::SubscriptionExpiry,
                None,
                Utc::now() + Duration::days(31),
            )
            .await;
        assert_eq!((report.candidates, report.acted), (0, 0), "{report:?}");
        assert_eq!(report.extra.expect("counts")["im_member_dispatch_ok"], 0);

        // Subscribing again starts a new period and its sync adds the fan back (the
        // same targeted job, queued by a new fact).
        let before = Utc::now();
        subscribe(&env, "SUB-X2", 502, 602).await;
        let s = wait_subscription(&env, 502, 602, |s| {
            s["status"] == 1 && s["member_status"] == 1
        })
        .await;
        assert!(
            instant(&s["expires_at"]) >= before + Duration::days(30),
            "{s}"
        );
        let added = outbox_count("im_member.MemberAdded", "502:602");
        assert_eq!(scalar(&env.app.state.db, &added).await, 2);
    }
);

both_backends!(
    an_expiry_racing_a_renewal_keeps_the_fan_subscribed_and_in_the_group,
    |db: TestDb| async move {
        let env = ServicesEnv::start(&db).await;
        let store = env.app.state.store.clone();
        let meta = env.ctx().metadata("test:race");
        let artist = 700;
        for i in 0..10 {
            let fan = 710 + i;
            let (a, f) = (user(artist), user(fan));
            let pair = pair_id(a, f);
            subscribe(&env, &format!("RACE-A-{i}"), artist, fan).await;
            // The renewal: paid, its delivery failed and its job not queued.
            let renewal = format!("RACE-B-{i}");
            subscription_order(&env, &renewal, artist, fan).await;
            env.services.faults.delivery.store(1, SeqCst);
            env.services.faults.enqueue.store(1, SeqCst);
            env.pay(&renewal, SUBSCRIPTION_PRICE, "CNY").await;
            assert_eq!(env.services.faults.delivery.load(SeqCst), 0);
            assert_eq!(env.services.faults.enqueue.load(SeqCst), 0);
            env.wait_order(&renewal, |o| o["status"] == 2).await;

            let first = load::<Subscription>(&store, &pair).await.expect("load");
            let end = first.state.expires_at.expect("an end");
            // One instant past the first period's end for both.
            let t = end + Duration::seconds(1);
            let (expired, delivered) = tokio::join!(
                units::subscriptions::expire(&store, &meta, a, f, t, None),
                units::orders::deliver(&store, &meta, &renewal, t, None),
            );
            expired.expect("the expiry runs");
            let delivered = delivered.expect("the renewal is delivered");
            assert!(
                matches!(
                    delivered.value,
                    units::orders::Delivered::Subscription { .. }
                ),
                "{:?}",
                delivered.value
            );
            let synced = units::subscriptions::sync_member(&store, &meta, a, f, t, None)
                .await
                .expect("sync");
            assert!(synced.member, "run {i}: {synced:?}");

            let s = load::<Subscription>(&store, &pair)
                .await
                .expect("load")
                .state;
            assert!(s.is_active_at(t), "run {i}: {s:?}");
            assert_eq!(s.status, Some(SubscriptionStatus::Active), "run {i}");
            // Whoever won, the renewal's period starts at t (the first one ended).
            assert_eq!(s.expires_at, Some(t + Duration::days(30)), "run {i}: {s:?}");
            let m = load::<ImMember>(&store, &pair).await.expect("load").state;
            assert!(m.member, "run {i}: {m:?}");
        }
    }
);

/// One delivery as a [`Receiver`] saw it: outbox id, type, aggregate id, status.
type Hit = (i64, String, String, u16);

/// A webhook receiver on loopback answering 500 to the deliveries of one aggregate
/// while it refuses, 204 to the rest, remembering (outbox id, type, aggregate id,
/// status) of each.
struct Receiver {
    url: String,
    refuse: Arc<Mutex<Option<String>>>,
    hits: Arc<Mutex<Vec<Hit>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(refuse: Option<&str>) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let refuse = Arc::new(Mutex::new(refuse.map(str::to_owned)));
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let (r, h) = (refuse.clone(), hits.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (r, h) = (r.clone(), h.clone());
                async move {
                    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let aggregate = v["aggregateid"].as_str().unwrap_or("").to_owned();
                    let refused = r.lock().expect("lock").as_deref() == Some(aggregate.as_str());
                    let status = if refused {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        axum::http::StatusCode::NO_CONTENT
                    };
                    h.lock().expect("lock").push((
                        v["id"].as_i64().unwrap_or(-1),
                        v["type"].as_str().unwrap_or("").to_owned(),
                        aggregate,
                        status.as_u16(),
                    ));
                    status
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            refuse,
            hits,
            task,
        }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().expect("lock").clone()
    }

    /// (outbox id, type, aggregate id) of what it accepted.
    fn accepted(&self) -> Vec<(i64, String, String)> {
        self.hits()
            .into_iter()
            .filter(|h| h.3 == 204)
            .map(|(id, t, a, _)| (id, t, a))
            .collect()
    }

    fn recover(&self) {
        *self.refuse.lock().expect("lock") = None;
    }
}

const HOOK_SECRET: &[u8] = b"a-webhook-secret-of-enough-bytes";

fn webhook(name: &str, url: &str, policy: SinkPolicy) -> Arc<dyn Sink> {
    let config = WebhookConfig::new(name, url.to_owned(), HOOK_SECRET.to_vec())
        .expect("a valid webhook")
        .with_policy(policy);
    Arc::new(WebhookSink::new(config).expect("a client"))
}

/// Wait (at most 30 s) until `check` holds.
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

both_backends!(
    im_messages_are_retried_on_their_schedule_then_dead_lettered_without_blocking_and_replayed,
    |db: TestDb| async move {
        let im = Receiver::start(Some("900:901")).await;
        let everything = Receiver::start(None).await;
        let schedule = [30u64, 60, 90];
        let im_sink = webhook(
            "im",
            &im.url,
            SinkPolicy {
                types: vec!["im_member.".into()],
                retry_schedule: Some(
                    schedule
                        .iter()
                        .map(|ms| std::time::Duration::from_millis(*ms))
                        .collect(),
                ),
            },
        );
        let all_sink = webhook("all", &everything.url, SinkPolicy::default());
        let env = ServicesEnv::start_configured(&db, move |o| {
            o.outbox_sinks = vec![im_sink, all_sink];
            o.outbox_relay = RelayConfig {
                poll_idle_ms: 20,
                backoff_ms_min: 20,
                backoff_ms_max: 200,
                delivery_timeout_ms: 3_000,
                hole_wait_ms: 200,
                ..RelayConfig::default()
            };
        })
        .await;

        subscribe(&env, "IMQ-1", 900, 901).await;
        // Member added (1) is brief here: the IM sink's retries end within ~200 ms, and
        // a slow poll may first see the member already failed (3).
        wait_subscription(&env, 900, 901, |s| {
            s["member_status"] == 1 || s["member_status"] == 3
        })
        .await;
        let list = "/v1/outbox/dead-letters?sink=webhook:im";
        let page = env
            .wait(list, |p| {
                p["dead_letters"].as_array().is_some_and(|d| d.len() == 1)
            })
            .await;
        let dead = page["dead_letters"][0].clone();
        assert_eq!(
            (&dead["type"], &dead["aggregateid"], &dead["attempts"]),
            (
                &json!("im_member.MemberAdded"),
                &json!("900:901"),
                &json!(schedule.len() + 1)
            ),
            "{dead}"
        );
        assert!(
            dead["last_error"].as_str().unwrap_or("").contains("500"),
            "{dead}"
        );
        assert!(dead["replayed_at"].is_null(), "{dead}");
        // The member reads failed (seed 000's 3) with the IM service's answer.
        let failed = wait_subscription(&env, 900, 901, |s| s["member_status"] == 3).await;
        assert!(
            failed["member_failed_reason"]
                .as_str()
                .unwrap_or("")
                .contains("500"),
            "{failed}"
        );
        let outbox_id = dead["outbox_id"].as_i64().expect("outbox id");
        let tries: Vec<u16> = im
            .hits()
            .into_iter()
            .filter(|h| h.0 == outbox_id)
            .map(|h| h.3)
            .collect();
        assert_eq!(tries, vec![500; schedule.len() + 1]);
        // The IM sink takes only IM messages; the other sink got this one too.
        assert!(im.hits().iter().all(|h| h.1.starts_with("im_member.")));
        until("the other sink to take the IM message", || {
            everything.accepted().iter().any(|h| h.0 == outbox_id)
        })
        .await;

        // Later IM messages flow; the money path is untouched.
        subscribe(&env, "IMQ-2", 900, 902).await;
        wait_subscription(&env, 900, 902, |s| s["member_status"] == 1).await;
        until("the next IM message to be delivered", || {
            im.accepted()
                .iter()
                .any(|h| h.1 == "im_member.MemberAdded" && h.2 == "900:902")
        })
        .await;
        env.recharge_order("IMQ-R", 903, 1_000).await;
        env.pay("IMQ-R", 1_000, "CNY").await;
        env.wait_order("IMQ-R", |o| o["status"] == 3).await;
        assert_eq!(env.candy(903).await, (1_000, 0));
        until("the other sink to take the recharge", || {
            everything
                .accepted()
                .iter()
                .any(|h| h.1 == "service_order.OrderDelivered" && h.2 == "IMQ-R")
        })
        .await;
        assert!(im.hits().iter().all(|h| h.1.starts_with("im_member.")));
        let (status, all_dead) = env.app.get("/v1/outbox/dead-letters").await;
        assert_eq!(status, 200, "{all_dead}");
        assert_eq!(
            all_dead["dead_letters"].as_array().map(Vec::len),
            Some(1),
            "{all_dead}"
        );

        // The receiver recovers: the operator's replay delivers the dead letter.
        im.recover();
        let id = dead["id"].as_i64().expect("id");
        let (status, replayed) = env
            .app
            .post(&format!("/v1/outbox/dead-letters/{id}:replay"), json!({}))
            .await;
        assert_eq!(status, 200, "{replayed}");
        assert!(replayed["replayed_at"].is_string(), "{replayed}");
        assert!(replayed["replay_error"].is_null(), "{replayed}");
        assert!(im
            .accepted()
            .iter()
            .any(|h| h.0 == outbox_id && h.2 == "900:901"));
        let (_, page) = env.app.get(list).await;
        assert_eq!(page["dead_letters"], json!([]), "{page}");
        let synced = wait_subscription(&env, 900, 901, |s| s["member_status"] == 1).await;
        assert!(synced["member_failed_reason"].is_null(), "{synced}");
    }
);

#[test]
fn im_members_jobs_retry_after_10_30_60_and_300_seconds() {
    let kind = &factledger::services::jobs::IM_MEMBERS;
    let delays: Vec<i64> = (1..=4).map(|r| kind.backoff.delay_ms(r)).collect();
    assert_eq!(delays, vec![10_000, 30_000, 60_000, 300_000]);
    assert!(kind.max_retry_count >= 4, "{}", kind.max_retry_count);
}

#[test]
fn im_members_targets_are_an_artist_or_an_artist_and_fan_both_positive() {
    for bad in ["0:5", "7:-1", "x", ":5", "7:", "-7"] {
        let e = parse_member_target(bad).expect_err(bad).to_string();
        assert!(e.contains("positive integers"), "{bad}: {e}");
    }
    assert_eq!(parse_member_target("7").expect("full"), (user(7), None));
    assert_eq!(
        parse_member_target("7:9").expect("targeted"),
        (user(7), Some(user(9)))
    );
}
