//! The simulator driven over HTTP, as the payout adapter drives it: idempotent
//! creates, queries, the daily report, callbacks with their token, and every fault.

use payout_sim::{spawn, SimConfig, SimHandle, CALLBACK_TOKEN_HEADER};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "sk-test";
const TOKEN: &str = "cb-token";

/// A callback received: its token header and its raw body.
#[derive(Debug, Clone)]
struct Received {
    token: Option<String>,
    body: String,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A tiny callback receiver on loopback; answers the scripted statuses first, then 200.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<VecDeque<u16>>>,
}

impl Receiver {
    async fn spawn(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/callbacks",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: String| async move {
                    let token = headers
                        .get(CALLBACK_TOKEN_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    me.got.lock().unwrap().push(Received { token, body });
                    let status = me.answers.lock().unwrap().pop_front().unwrap_or(200);
                    axum::http::StatusCode::from_u16(status).unwrap()
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/callbacks")
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits (at most 5 s) until `n` callbacks arrived.
    async fn wait_for(&self, n: usize) -> Vec<Received> {
        for _ in 0..500 {
            let got = self.got();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("waited for {n} callbacks, got {:?}", self.got());
    }
}

struct Harness {
    sim: SimHandle,
    http: reqwest::Client,
    receiver: Receiver,
}

async fn harness() -> Harness {
    let receiver = Receiver::default();
    let url = receiver.spawn().await;
    let sim = spawn(SimConfig {
        secret: SECRET.into(),
        callback_url: Some(url),
        callback_token: TOKEN.into(),
        ..SimConfig::default()
    })
    .await
    .unwrap();
    Harness {
        sim,
        http: reqwest::Client::new(),
        receiver,
    }
}

fn body(external_id: &str, amount: i64) -> Value {
    json!({"external_id": external_id, "amount": amount, "currency": "IDR",
           "bank_code": "BCA", "account_holder_name": "Ani",
           "account_number": "1234567890", "description": "payout"})
}

impl Harness {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.base_url())
    }

    async fn create_with(&self, key: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.url("/disbursements"))
            .basic_auth(SECRET, None::<&str>)
            .header("X-IDEMPOTENCY-KEY", key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn create(&self, external_id: &str) -> (u16, String) {
        let r = self
            .create_with(external_id, &body(external_id, 150_000))
            .await;
        let status = r.status().as_u16();
        (status, r.text().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(path))
            .basic_auth(SECRET, None::<&str>)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn control(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(self.url(&format!("/control/{path}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "control {path}");
        r.json().await.unwrap()
    }

    async fn fault(&self, external_id: &str, fault: Value) {
        let mut f = fault;
        f["external_id"] = json!(external_id);
        self.control("faults", json!({ "faults": [f] })).await;
    }

    /// How many disbursements carry `external_id`.
    async fn payouts_of(&self, external_id: &str) -> u64 {
        let (_, v) = self.get("/control/payouts").await;
        v["creates_per_external_id"][external_id]
            .as_u64()
            .unwrap_or(0)
    }

    /// The statuses of the callbacks received, in order.
    fn statuses(&self) -> Vec<String> {
        self.receiver
            .got()
            .iter()
            .map(|r| r.json()["status"].as_str().unwrap_or("garbage").to_owned())
            .collect()
    }
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn a_create_retried_with_the_same_key_returns_the_same_payout_and_creates_one() {
    let h = harness().await;
    let (status, first) = h.create("po-1").await;
    assert_eq!(status, 200, "{first}");
    let first = json_of(&first);
    assert_eq!(first["status"], "PENDING");
    assert_eq!(first["amount"], 150_000);
    let (status, again) = h.create("po-1").await;
    assert_eq!(status, 200);
    assert_eq!(json_of(&again)["id"], first["id"]);
    assert_eq!(h.payouts_of("po-1").await, 1);
    // The same key with another body is refused, and still creates nothing.
    let r = h.create_with("po-1", &body("po-1", 999)).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error_code"], "DUPLICATE_TRANSACTION_ERROR");
    assert_eq!(h.payouts_of("po-1").await, 1);
    let (_, counts) = h.get("/control/requests").await;
    assert_eq!(counts["create"], 3);
}

#[tokio::test]
async fn bad_credentials_a_missing_key_and_bad_fields_are_refused() {
    let h = harness().await;
    let r = h
        .http
        .post(h.url("/disbursements"))
        .basic_auth("wrong", None::<&str>)
        .header("X-IDEMPOTENCY-KEY", "k")
        .json(&body("po-1", 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = h
        .http
        .post(h.url("/disbursements"))
        .basic_auth(SECRET, None::<&str>)
        .json(&body("po-1", 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let mut b = body("po-1", 1);
    b["amount"] = json!(10.5);
    let r = h.create_with("k", &b).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error_code"], "API_VALIDATION_ERROR");
    assert!(e["message"].as_str().unwrap().contains("amount"), "{e}");
    assert_eq!(h.payouts_of("po-1").await, 0);
    let (_, counts) = h.get("/control/requests").await;
    assert_eq!(counts["unauthorized"], 1);
}

#[tokio::test]
async fn a_payout_is_found_by_external_id_and_by_id_and_absent_ones_are_404() {
    let h = harness().await;
    let (status, e) = h.get("/disbursements?external_id=nope").await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (404, Some("DIRECT_DISBURSEMENT_NOT_FOUND_ERROR"))
    );
    let created = json_of(&h.create("po-2").await.1);
    let (status, list) = h.get("/disbursements?external_id=po-2").await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], created["id"]);
    let (status, one) = h
        .get(&format!(
            "/disbursements/{}",
            created["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!((status, &one["external_id"]), (200, &json!("po-2")));
    assert_eq!(h.get("/disbursements/disb-999999").await.0, 404);
}

#[tokio::test]
async fn a_payout_completes_and_its_callback_carries_the_token() {
    let h = harness().await;
    h.create("po-3").await;
    let got = h.receiver.wait_for(1).await;
    assert_eq!(got[0].token.as_deref(), Some(TOKEN));
    let event = got[0].json();
    assert_eq!(event["status"], "COMPLETED");
    assert_eq!(event["external_id"], "po-3");
    assert_eq!(event["amount"], 150_000);
    assert!(event["event_id"].as_str().unwrap().starts_with("evt-"));
    assert_eq!(event["failure_code"], Value::Null);
    let (_, list) = h.get("/disbursements?external_id=po-3").await;
    assert_eq!(list[0]["status"], "COMPLETED");
}

#[tokio::test]
async fn a_callback_answered_500_is_retried_until_delivered() {
    let h = harness().await;
    h.receiver.answers.lock().unwrap().extend([500, 503]);
    h.create("po-4").await;
    let got = h.receiver.wait_for(3).await;
    assert_eq!(got[0].json()["event_id"], got[2].json()["event_id"]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.receiver.got().len(), 3, "no delivery after the 2xx");
    let (_, attempts) = h.get("/control/callbacks").await;
    let delivered: Vec<bool> = attempts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["delivered"].as_bool().unwrap())
        .collect();
    assert_eq!(delivered, vec![false, false, true]);
}

#[tokio::test]
async fn the_daily_report_lists_the_payouts_created_that_day() {
    let h = harness().await;
    h.create("po-5").await;
    h.create("po-6").await;
    let (_, payouts) = h.get("/control/payouts").await;
    let created = payouts["disbursements"][0]["created"].as_str().unwrap();
    let day = &created[..10];
    let (status, rows) = h.get(&format!("/reports/disbursements?date={day}")).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["external_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["po-5", "po-6"]);
    assert_eq!(rows[0]["amount"], 150_000);
    let (_, none) = h.get("/reports/disbursements?date=2001-01-01").await;
    assert_eq!(none, json!([]));
    assert_eq!(h.get("/reports/disbursements?date=yesterday").await.0, 400);
}

#[tokio::test]
async fn accept_then_timeout_creates_the_payout_and_a_retry_finds_it() {
    let h = harness().await;
    h.fault(
        "po-7",
        json!({"kind": "accept_then_timeout", "delay_ms": 5000}),
    )
    .await;
    let r = h
        .http
        .post(h.url("/disbursements"))
        .basic_auth(SECRET, None::<&str>)
        .header("X-IDEMPOTENCY-KEY", "po-7")
        .json(&body("po-7", 150_000))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(r.unwrap_err().is_timeout());
    // The money moved anyway: the payout exists and completes.
    assert_eq!(h.payouts_of("po-7").await, 1);
    assert_eq!(
        h.receiver.wait_for(1).await[0].json()["status"],
        "COMPLETED"
    );
    let (status, again) = h.create("po-7").await;
    assert_eq!(status, 200);
    assert_eq!(json_of(&again)["status"], "COMPLETED");
    assert_eq!(h.payouts_of("po-7").await, 1);
}

#[tokio::test]
async fn a_5xx_before_accepting_creates_nothing_and_the_retry_goes_through() {
    let h = harness().await;
    h.fault("po-8", json!({"kind": "error_5xx_before_accept"}))
        .await;
    assert_eq!(h.create("po-8").await.0, 503);
    assert_eq!(h.payouts_of("po-8").await, 0);
    assert_eq!(h.create("po-8").await.0, 200);
    assert_eq!(h.payouts_of("po-8").await, 1);
}

#[tokio::test]
async fn a_5xx_after_accepting_leaves_one_payout() {
    let h = harness().await;
    h.fault("po-9", json!({"kind": "error_5xx_after_accept"}))
        .await;
    assert_eq!(h.create("po-9").await.0, 502);
    assert_eq!(h.payouts_of("po-9").await, 1);
    assert_eq!(h.create("po-9").await.0, 200);
    assert_eq!(h.payouts_of("po-9").await, 1);
}

#[tokio::test]
async fn insufficient_balance_is_a_400_and_creates_nothing() {
    let h = harness().await;
    h.fault("po-10", json!({"kind": "insufficient_balance"}))
        .await;
    let (status, text) = h.create("po-10").await;
    assert_eq!(status, 400);
    assert_eq!(json_of(&text)["error_code"], "INSUFFICIENT_BALANCE");
    assert_eq!(h.payouts_of("po-10").await, 0);
}

#[tokio::test]
async fn fail_settles_the_payout_failed_with_its_code() {
    let h = harness().await;
    h.fault(
        "po-11",
        json!({"kind": "fail", "failure_code": "INVALID_DESTINATION"}),
    )
    .await;
    assert_eq!(h.create("po-11").await.0, 200);
    let event = h.receiver.wait_for(1).await[0].json();
    assert_eq!(
        (&event["status"], &event["failure_code"]),
        (&json!("FAILED"), &json!("INVALID_DESTINATION"))
    );
    let (_, list) = h.get("/disbursements?external_id=po-11").await;
    assert_eq!(list[0]["failure_code"], "INVALID_DESTINATION");
}

#[tokio::test]
async fn slow_success_answers_after_the_delay() {
    let h = harness().await;
    h.fault("po-12", json!({"kind": "slow_success", "delay_ms": 300}))
        .await;
    let start = Instant::now();
    assert_eq!(h.create("po-12").await.0, 200);
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn slow_success_settles_even_when_the_caller_hangs_up() {
    let h = harness().await;
    h.fault("po-19", json!({"kind": "slow_success", "delay_ms": 300}))
        .await;
    // The caller gives up long before the answer is due.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let hung_up = impatient
        .post(h.url("/disbursements"))
        .basic_auth(SECRET, None::<&str>)
        .header("X-IDEMPOTENCY-KEY", "po-19")
        .json(&body("po-19", 150_000))
        .send()
        .await;
    assert!(hung_up.is_err(), "the caller was meant to time out");
    // As a real provider would, the simulator completes the payout all the same.
    let event = h.receiver.wait_for(1).await[0].json();
    assert_eq!(
        (&event["external_id"], &event["status"]),
        (&json!("po-19"), &json!("COMPLETED"))
    );
    let (_, list) = h.get("/disbursements?external_id=po-19").await;
    assert_eq!(list[0]["status"], "COMPLETED", "{list}");
}

#[tokio::test]
async fn webhook_before_response_delivers_the_callback_before_the_answer() {
    let h = harness().await;
    h.control("settings", json!({"complete_after_ms": 60_000}))
        .await;
    h.fault("po-13", json!({"kind": "webhook_before_response"}))
        .await;
    let (status, text) = h.create("po-13").await;
    assert_eq!(status, 200);
    assert_eq!(json_of(&text)["status"], "PENDING");
    let got = h.receiver.got();
    assert_eq!(got.len(), 1, "the callback came first");
    assert_eq!(got[0].json()["status"], "COMPLETED");
}

#[tokio::test]
async fn duplicate_webhook_sends_the_same_event_twice() {
    let h = harness().await;
    h.fault("po-14", json!({"kind": "duplicate_webhook"})).await;
    h.create("po-14").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(got[0].body, got[1].body);
    assert_eq!(h.statuses(), vec!["COMPLETED", "COMPLETED"]);
}

#[tokio::test]
async fn out_of_order_webhooks_send_completed_then_a_stale_pending() {
    let h = harness().await;
    h.fault("po-15", json!({"kind": "out_of_order_webhooks"}))
        .await;
    h.create("po-15").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(h.statuses(), vec!["COMPLETED", "PENDING"]);
    assert_ne!(got[0].json()["event_id"], got[1].json()["event_id"]);
    let (_, list) = h.get("/disbursements?external_id=po-15").await;
    assert_eq!(list[0]["status"], "COMPLETED");
}

#[tokio::test]
async fn failed_after_completed_contradicts_the_completed_callback() {
    let h = harness().await;
    h.fault("po-16", json!({"kind": "failed_after_completed"}))
        .await;
    h.create("po-16").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(h.statuses(), vec!["COMPLETED", "FAILED"]);
    assert_eq!(got[1].json()["failure_code"], "INVALID_DESTINATION");
    let (_, list) = h.get("/disbursements?external_id=po-16").await;
    assert_eq!(list[0]["status"], "FAILED");
}

#[tokio::test]
async fn garbage_body_creates_the_payout_and_answers_no_json() {
    let h = harness().await;
    h.fault("po-17", json!({"kind": "garbage_body"})).await;
    let (status, text) = h.create("po-17").await;
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
    assert_eq!(h.payouts_of("po-17").await, 1);
}

#[tokio::test]
async fn garbage_webhook_sends_a_non_json_callback_before_the_real_one() {
    let h = harness().await;
    h.fault("po-18", json!({"kind": "garbage_webhook"})).await;
    h.create("po-18").await;
    let got = h.receiver.wait_for(2).await;
    assert!(serde_json::from_str::<Value>(&got[0].body).is_err());
    assert_eq!(got[1].json()["status"], "COMPLETED");
}

#[tokio::test]
async fn a_payout_is_settled_by_hand_and_a_reset_forgets_everything() {
    let h = harness().await;
    h.control("settings", json!({"complete_after_ms": 600_000}))
        .await;
    h.create("po-19").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(h.receiver.got().is_empty());
    let d = h
        .control(
            "complete",
            json!({"external_id": "po-19", "status": "FAILED", "failure_code": "BANK_CLOSED"}),
        )
        .await;
    assert_eq!(d["status"], "FAILED");
    let event = h.receiver.wait_for(1).await[0].json();
    assert_eq!(event["failure_code"], "BANK_CLOSED");
    h.control("reset", json!({})).await;
    assert_eq!(h.get("/disbursements?external_id=po-19").await.0, 404);
    let (_, counts) = h.get("/control/requests").await;
    assert_eq!(counts["create"], 0);
    let (_, settings) = h.get("/control/settings").await;
    assert_eq!(settings["complete_after_ms"], 0);
}

#[tokio::test]
async fn a_thousand_concurrent_payouts_each_complete_once_with_one_callback() {
    let h = harness().await;
    let h = Arc::new(h);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..1_000 {
        let h = h.clone();
        tasks.spawn(async move { h.create(&format!("bulk-{i}")).await.0 });
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    let got = h.receiver.wait_for(1_000).await;
    let mut events: Vec<String> = got
        .iter()
        .map(|r| r.json()["external_id"].as_str().unwrap().to_owned())
        .collect();
    events.sort();
    events.dedup();
    assert_eq!(events.len(), 1_000);
    let (_, payouts) = h.get("/control/payouts").await;
    assert_eq!(payouts["disbursements"].as_array().unwrap().len(), 1_000);
}

#[tokio::test]
async fn it_binds_loopback_only_and_shuts_down() {
    let wide = SimConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..SimConfig::default()
    };
    assert!(spawn(wide).await.is_err());
    let sim = spawn(SimConfig::default()).await.unwrap();
    let url = format!("{}/control/requests", sim.base_url());
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
    sim.shutdown().await;
    assert!(reqwest::get(&url).await.is_err());
}

/// Many payouts in flight at once each settle and call back exactly once (bounded in
/// count and time; `bench payouts` times 10,000 end to end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_payouts_each_call_back() {
    const PAYOUTS: usize = 500;
    const IN_FLIGHT_MAX: usize = 64;
    let h = Arc::new(harness().await);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..PAYOUTS {
        if tasks.len() >= IN_FLIGHT_MAX {
            assert_eq!(tasks.join_next().await.unwrap().unwrap(), 200);
        }
        let h = h.clone();
        tasks.spawn(async move { h.create(&format!("load-{i}")).await.0 });
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    for _ in 0..6_000 {
        if h.receiver.got.lock().unwrap().len() >= PAYOUTS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.receiver.got().len(), PAYOUTS);
}
