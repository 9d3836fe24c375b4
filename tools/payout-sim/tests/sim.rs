//! The simulator driven over HTTP in Xendit's Payouts API shape, as the payout
//! adapter drives it: idempotent creates, look-ups by reference, the transactions
//! listing, webhooks with their token and webhook id, and every fault.

use payout_sim::{spawn, SimConfig, SimHandle, CALLBACK_TOKEN_HEADER, WEBHOOK_ID_HEADER};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "xnd_development_sim_test";
const TOKEN: &str = "cb-token";

/// A callback received: its token and webhook-id headers and its raw body.
#[derive(Debug, Clone)]
struct Received {
    token: Option<String>,
    webhook_id: Option<String>,
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
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    };
                    let token = header(CALLBACK_TOKEN_HEADER);
                    let webhook_id = header(WEBHOOK_ID_HEADER);
                    me.got.lock().unwrap().push(Received {
                        token,
                        webhook_id,
                        body,
                    });
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

fn body(reference_id: &str, amount: i64) -> Value {
    json!({"reference_id": reference_id, "channel_code": "ID_BCA",
           "channel_properties": {"account_number": "1234567890",
                                  "account_holder_name": "Ani"},
           "amount": amount, "description": "payout", "currency": "IDR"})
}

impl Harness {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.base_url())
    }

    async fn create_with(&self, key: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.url("/v2/payouts"))
            .basic_auth(SECRET, None::<&str>)
            .header("Idempotency-key", key)
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
        f["reference_id"] = json!(external_id);
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
            .map(|r| {
                r.json()["data"]["status"]
                    .as_str()
                    .unwrap_or("garbage")
                    .to_owned()
            })
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
    assert_eq!(first["status"], "ACCEPTED");
    assert_eq!(first["amount"], 150_000);
    assert_eq!(first["reference_id"], "po-1");
    assert_eq!(first["channel_properties"]["account_holder_name"], "Ani");
    let (status, again) = h.create("po-1").await;
    assert_eq!(status, 200);
    assert_eq!(json_of(&again)["id"], first["id"]);
    assert_eq!(h.payouts_of("po-1").await, 1);
    // The same key with another body is refused, and still creates nothing.
    let r = h.create_with("po-1", &body("po-1", 999)).await;
    assert_eq!(r.status(), 409);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error_code"], "DUPLICATE_ERROR");
    assert_eq!(h.payouts_of("po-1").await, 1);
    let (_, counts) = h.get("/control/requests").await;
    assert_eq!(counts["create"], 3);
}

#[tokio::test]
async fn bad_credentials_a_missing_key_and_bad_fields_are_refused() {
    let h = harness().await;
    let r = h
        .http
        .post(h.url("/v2/payouts"))
        .basic_auth("wrong", None::<&str>)
        .header("Idempotency-key", "k")
        .json(&body("po-1", 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = h
        .http
        .post(h.url("/v2/payouts"))
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
async fn a_payout_is_found_by_reference_and_by_id_and_an_unknown_reference_lists_none() {
    let h = harness().await;
    let (status, none) = h.get("/v2/payouts?reference_id=nope").await;
    assert_eq!((status, none), (200, json!([])));
    let created = json_of(&h.create("po-2").await.1);
    let (status, list) = h.get("/v2/payouts?reference_id=po-2").await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], created["id"]);
    let (status, one) = h
        .get(&format!("/v2/payouts/{}", created["id"].as_str().unwrap()))
        .await;
    assert_eq!((status, &one["reference_id"]), (200, &json!("po-2")));
    assert_eq!(h.get("/v2/payouts/disb-999999").await.0, 404);
}

#[tokio::test]
async fn a_payout_completes_and_its_callback_carries_the_token() {
    let h = harness().await;
    h.create("po-3").await;
    let got = h.receiver.wait_for(1).await;
    assert_eq!(got[0].token.as_deref(), Some(TOKEN));
    assert!(got[0].webhook_id.as_deref().unwrap().starts_with("evt-"));
    let event = got[0].json();
    assert_eq!(event["event"], "payout.succeeded");
    assert_eq!(event["business_id"], payout_sim::BUSINESS_ID);
    let data = &event["data"];
    assert_eq!(data["status"], "SUCCEEDED");
    assert_eq!(data["reference_id"], "po-3");
    assert_eq!(data["amount"], 150_000);
    assert_eq!(data["channel_code"], "ID_BCA");
    assert_eq!(data.get("failure_code"), None);
    let (_, list) = h.get("/v2/payouts?reference_id=po-3").await;
    assert_eq!(list[0]["status"], "SUCCEEDED");
}

#[tokio::test]
async fn a_callback_answered_500_is_retried_until_delivered() {
    let h = harness().await;
    h.receiver.answers.lock().unwrap().extend([500, 503]);
    h.create("po-4").await;
    let got = h.receiver.wait_for(3).await;
    assert_eq!(got[0].webhook_id, got[2].webhook_id);
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
async fn the_transactions_listing_pages_the_payouts_created_that_day() {
    let h = harness().await;
    for r in ["po-5", "po-6", "po-7"] {
        h.create(r).await;
    }
    let (_, payouts) = h.get("/control/payouts").await;
    let created = payouts["disbursements"][0]["created"].as_str().unwrap();
    let day = &created[..10];
    let window = format!(
        "types=DISBURSEMENT&created[gte]={day}T00:00:00.000Z&created[lt]=2999-01-01T00:00:00.000Z"
    );
    let (status, page) = h.get(&format!("/transactions?{window}&limit=2")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["has_more"], true);
    let refs = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["reference_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(refs(&page), ["po-5", "po-6"]);
    let first = &page["data"][0];
    assert_eq!(first["type"], "DISBURSEMENT");
    assert_eq!(first["amount"], 150_000);
    assert_eq!(first["cashflow"], "MONEY_OUT");
    assert!(first["product_id"].as_str().unwrap().starts_with("disb-"));
    let last = page["data"][1]["id"].as_str().unwrap();
    let (_, next) = h
        .get(&format!("/transactions?{window}&limit=2&after_id={last}"))
        .await;
    assert_eq!(
        (refs(&next), &next["has_more"]),
        (vec!["po-7".to_owned()], &json!(false))
    );
    let (_, none) = h
        .get("/transactions?created[gte]=2001-01-01T00:00:00Z&created[lt]=2001-01-02T00:00:00Z")
        .await;
    assert_eq!(none["data"], json!([]));
    assert_eq!(h.get("/transactions?created[gte]=yesterday").await.0, 400);
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
        .post(h.url("/v2/payouts"))
        .basic_auth(SECRET, None::<&str>)
        .header("Idempotency-key", "po-7")
        .json(&body("po-7", 150_000))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(r.unwrap_err().is_timeout());
    // The money moved anyway: the payout exists and completes.
    assert_eq!(h.payouts_of("po-7").await, 1);
    assert_eq!(
        h.receiver.wait_for(1).await[0].json()["data"]["status"],
        "SUCCEEDED"
    );
    let (status, again) = h.create("po-7").await;
    assert_eq!(status, 200);
    assert_eq!(json_of(&again)["status"], "SUCCEEDED");
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
    assert_eq!(event["event"], "payout.failed");
    assert_eq!(
        (&event["data"]["status"], &event["data"]["failure_code"]),
        (&json!("FAILED"), &json!("INVALID_DESTINATION"))
    );
    let (_, list) = h.get("/v2/payouts?reference_id=po-11").await;
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
        .post(h.url("/v2/payouts"))
        .basic_auth(SECRET, None::<&str>)
        .header("Idempotency-key", "po-19")
        .json(&body("po-19", 150_000))
        .send()
        .await;
    assert!(hung_up.is_err(), "the caller was meant to time out");
    // As a real provider would, the simulator completes the payout all the same.
    let event = h.receiver.wait_for(1).await[0].json();
    assert_eq!(
        (&event["data"]["reference_id"], &event["data"]["status"]),
        (&json!("po-19"), &json!("SUCCEEDED"))
    );
    let (_, list) = h.get("/v2/payouts?reference_id=po-19").await;
    assert_eq!(list[0]["status"], "SUCCEEDED", "{list}");
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
    assert_eq!(json_of(&text)["status"], "ACCEPTED");
    let got = h.receiver.got();
    assert_eq!(got.len(), 1, "the callback came first");
    assert_eq!(got[0].json()["data"]["status"], "SUCCEEDED");
}

#[tokio::test]
async fn duplicate_webhook_sends_the_same_event_twice() {
    let h = harness().await;
    h.fault("po-14", json!({"kind": "duplicate_webhook"})).await;
    h.create("po-14").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(got[0].body, got[1].body);
    assert_eq!(got[0].webhook_id, got[1].webhook_id);
    assert_eq!(h.statuses(), vec!["SUCCEEDED", "SUCCEEDED"]);
}

#[tokio::test]
async fn out_of_order_webhooks_send_succeeded_then_a_stale_accepted() {
    let h = harness().await;
    h.fault("po-15", json!({"kind": "out_of_order_webhooks"}))
        .await;
    h.create("po-15").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(h.statuses(), vec!["SUCCEEDED", "ACCEPTED"]);
    assert_ne!(got[0].webhook_id, got[1].webhook_id);
    let (_, list) = h.get("/v2/payouts?reference_id=po-15").await;
    assert_eq!(list[0]["status"], "SUCCEEDED");
}

#[tokio::test]
async fn failed_after_completed_contradicts_the_completed_callback() {
    let h = harness().await;
    h.fault("po-16", json!({"kind": "failed_after_completed"}))
        .await;
    h.create("po-16").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(h.statuses(), vec!["SUCCEEDED", "FAILED"]);
    assert_eq!(got[1].json()["data"]["failure_code"], "INVALID_DESTINATION");
    let (_, list) = h.get("/v2/payouts?reference_id=po-16").await;
    assert_eq!(list[0]["status"], "FAILED");
}

#[tokio::test]
async fn reversed_after_succeeded_sends_payout_reversed_and_lists_it_reversed() {
    let h = harness().await;
    h.fault("po-20", json!({"kind": "reversed_after_succeeded"}))
        .await;
    h.create("po-20").await;
    let got = h.receiver.wait_for(2).await;
    assert_eq!(h.statuses(), vec!["SUCCEEDED", "REVERSED"]);
    assert_eq!(got[1].json()["event"], "payout.reversed");
    let (_, list) = h.get("/v2/payouts?reference_id=po-20").await;
    assert_eq!(list[0]["status"], "REVERSED");
    let (_, page) = h.get("/transactions?types=DISBURSEMENT").await;
    assert_eq!(page["data"][0]["status"], "REVERSED");
}

#[tokio::test]
async fn webhooks_go_without_a_webhook_id_when_turned_off() {
    let h = harness().await;
    h.control("settings", json!({"webhook_id": false})).await;
    h.create("po-21").await;
    let got = h.receiver.wait_for(1).await;
    assert_eq!(got[0].webhook_id, None);
    assert_eq!(got[0].token.as_deref(), Some(TOKEN));
}

#[tokio::test]
async fn amounts_are_major_units_exactly_per_currency() {
    let h = harness().await;
    let mut php = body("po-22", 0);
    php["currency"] = json!("PHP");
    php["amount"] = json!(1.11);
    let r = h.create_with("po-22", &php).await;
    assert_eq!(r.status(), 200);
    let answered: Value = r.json().await.unwrap();
    assert_eq!(answered["amount"], json!(1.11));
    let (_, payouts) = h.get("/control/payouts").await;
    assert_eq!(payouts["disbursements"][0]["amount_minor"], 111);
    let mut idr_fraction = body("po-23", 0);
    idr_fraction["amount"] = json!(100.5);
    let r = h.create_with("po-23", &idr_fraction).await;
    assert_eq!(r.status(), 400);
    let raw = r#"{"reference_id":"po-24","channel_code":"PH_GCASH","channel_properties":{"account_number":"0917","account_holder_name":"A"},"amount":1.005,"description":"d","currency":"PHP"}"#;
    let r = h
        .http
        .post(h.url("/v2/payouts"))
        .basic_auth(SECRET, None::<&str>)
        .header("Idempotency-key", "po-24")
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "three decimals of PHP are refused");
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
    assert_eq!(got[1].json()["data"]["status"], "SUCCEEDED");
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
            json!({"reference_id": "po-19", "status": "FAILED", "failure_code": "BANK_CLOSED"}),
        )
        .await;
    assert_eq!(d["status"], "FAILED");
    let event = h.receiver.wait_for(1).await[0].json();
    assert_eq!(event["data"]["failure_code"], "BANK_CLOSED");
    h.control("reset", json!({})).await;
    assert_eq!(h.get("/v2/payouts?reference_id=po-19").await.1, json!([]));
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
        .map(|r| {
            r.json()["data"]["reference_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
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
