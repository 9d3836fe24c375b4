//! The payment-gateway simulator driven over HTTP, as the gateway adapter drives it:
//! payments with signed pay callbacks, idempotent refunds and their refusals, refund
//! queries, and every scripted fault. Loopback only; no sleep beyond a few hundred ms.

use hmac::{Hmac, Mac};
use payout_sim::gateway::{signature, SIGNATURE_HEADER};
use payout_sim::{spawn, SimConfig, SimHandle};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "sk-gateway-test";
const CALLBACK_SECRET: &str = "gw-callback-secret";

/// A pay callback received: its signature header and its raw body.
#[derive(Debug, Clone)]
struct Received {
    signature: Option<String>,
    body: String,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Whether the signature is HMAC-SHA256(CALLBACK_SECRET, raw body), checked here
    /// independently of the simulator's own signing code.
    fn verifies(&self) -> bool {
        let mut mac = Hmac::<Sha256>::new_from_slice(CALLBACK_SECRET.as_bytes()).unwrap();
        mac.update(self.body.as_bytes());
        let tag = self.signature.as_deref().and_then(|s| hex::decode(s).ok());
        tag.is_some_and(|t| mac.verify_slice(&t).is_ok())
    }
}

/// A callback receiver on loopback; answers the scripted statuses first, then 200.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    answers: Arc<Mutex<VecDeque<u16>>>,
}

impl Receiver {
    async fn spawn(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/callbacks/paysim",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: String| async move {
                    let signature = headers
                        .get(SIGNATURE_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    me.got.lock().unwrap().push(Received { signature, body });
                    let status = me.answers.lock().unwrap().pop_front().unwrap_or(200);
                    axum::http::StatusCode::from_u16(status).unwrap()
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/callbacks/paysim")
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits (at most 2 s) until `n` callbacks arrived.
    async fn wait_for(&self, n: usize) -> Vec<Received> {
        for _ in 0..200 {
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
        gateway_callback_url: Some(url),
        gateway_callback_secret: CALLBACK_SECRET.into(),
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

fn payment(order_no: &str, amount_minor: i64) -> Value {
    json!({"order_no": order_no, "amount_minor": amount_minor, "currency": "CNY",
           "method": "WECHAT", "account_id": "mch-1"})
}

fn refund(refund_no: &str, transaction_no: &str, amount_minor: i64) -> Value {
    json!({"refund_no": refund_no, "transaction_no": transaction_no,
           "amount_minor": amount_minor, "currency": "CNY"})
}

impl Harness {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.base_url())
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(path))
            .basic_auth(SECRET, None::<&str>)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
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

    /// Pays `order_no`; the payment answer.
    async fn pay(&self, order_no: &str, amount_minor: i64) -> Value {
        let (status, v) = self
            .post("/gateway/payments", &payment(order_no, amount_minor))
            .await;
        assert_eq!(status, 200, "{v}");
        v
    }

    /// Pays and returns the transaction number.
    async fn paid(&self, order_no: &str, amount_minor: i64) -> String {
        let v = self.pay(order_no, amount_minor).await;
        v["payment"]["transaction_no"].as_str().unwrap().to_owned()
    }

    async fn refund(&self, refund_no: &str, txn: &str, amount_minor: i64) -> (u16, Value) {
        self.post("/gateway/refunds", &refund(refund_no, txn, amount_minor))
            .await
    }

    async fn query(&self, refund_no: &str) -> (u16, Value) {
        self.get(&format!("/gateway/refunds/{refund_no}")).await
    }

    async fn status_of(&self, refund_no: &str) -> String {
        let (code, v) = self.query(refund_no).await;
        assert_eq!(code, 200, "{v}");
        v["status"].as_str().unwrap().to_owned()
    }

    async fn control(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(&format!("/control/gateway/{path}")))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn fault(&self, entry: Value) {
        let (status, v) = self.control("faults", json!({ "faults": [entry] })).await;
        assert_eq!(status, 200, "{v}");
    }

    /// Refunds made under `refund_no` (from the control API).
    async fn made(&self, refund_no: &str) -> u64 {
        let (_, v) = self.get("/control/gateway/refunds").await;
        v["refunds_per_refund_no"][refund_no].as_u64().unwrap_or(0)
    }
}

#[tokio::test]
async fn a_payment_posts_a_signed_pay_callback_and_answers_its_status() {
    let h = harness().await;
    let v = h.pay("o-1", 600).await;
    assert_eq!(v["callback"]["state"], "DELIVERED");
    assert_eq!(v["callback"]["http_status"], 200);
    let p = &v["payment"];
    assert!(p["transaction_no"].as_str().unwrap().starts_with("txn-"));
    let got = h.receiver.got();
    assert_eq!(got.len(), 1, "delivered before the answer");
    assert!(got[0].verifies(), "{:?}", got[0]);
    assert_eq!(
        got[0].signature.as_deref(),
        Some(signature(CALLBACK_SECRET.as_bytes(), got[0].body.as_bytes()).as_str())
    );
    let event = got[0].json();
    assert_eq!(event["type"], "payment.succeeded");
    assert_eq!(event["event_id"], v["callback"]["event_id"]);
    for field in [
        "order_no",
        "transaction_no",
        "method",
        "account_id",
        "amount_minor",
    ] {
        assert_eq!(event[field], p[field], "{field}");
    }
    assert_eq!(
        (event["currency"].as_str(), event["amount_minor"].as_i64()),
        (Some("CNY"), Some(600))
    );
    assert!(event["paid_at_ms"].as_i64().unwrap() > 0);
    // The same order paid again is a second payment, with its own event.
    let again = h.pay("o-1", 600).await;
    assert_ne!(again["payment"]["transaction_no"], p["transaction_no"]);
    assert_ne!(again["callback"]["event_id"], v["callback"]["event_id"]);
    let (_, payments) = h.get("/control/gateway/payments").await;
    assert_eq!(payments.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_payment_with_a_bad_field_is_refused_naming_it() {
    let h = harness().await;
    for (field, value) in [
        ("amount_minor", json!(6.5)),
        ("amount_minor", json!(-1)),
        ("method", json!("PAYPAL")),
        ("currency", json!("yuan")),
        ("order_no", json!("")),
    ] {
        let mut b = payment("o-1", 600);
        b[field] = value;
        let (status, e) = h.post("/gateway/payments", &b).await;
        assert_eq!(
            (status, e["error_code"].as_str()),
            (400, Some("INVALID_REQUEST"))
        );
        assert!(e["message"].as_str().unwrap().contains(field), "{e}");
    }
    assert!(h.receiver.got().is_empty());
}

#[tokio::test]
async fn a_refund_is_idempotent_by_refund_no_and_another_body_is_refused() {
    let h = harness().await;
    let txn = h.paid("o-2", 600).await;
    let (status, first) = h.refund("r-1", &txn, 200).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "PROCESSING");
    assert_eq!(first["refund_no"], "r-1");
    assert!(first["gateway_refund_id"]
        .as_str()
        .unwrap()
        .starts_with("grf-"));
    let (status, again) = h.refund("r-1", &txn, 200).await;
    assert_eq!(status, 200);
    assert_eq!(again["gateway_refund_id"], first["gateway_refund_id"]);
    let (status, e) = h.refund("r-1", &txn, 300).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("REFUND_NO_REUSED"))
    );
    assert!(e["message"].as_str().unwrap().contains("refund_no"), "{e}");
    let (_, v) = h.get("/control/gateway/refunds").await;
    assert_eq!(v["refunds_per_refund_no"]["r-1"], 1);
    assert_eq!(v["create_requests_per_refund_no"]["r-1"], 3);
    assert_eq!(v["refunds_per_transaction_no"][&txn], 1);
    assert_eq!(v["refunded_minor_per_transaction_no"][&txn], 200);
    assert_eq!(h.sim.gateway().refunds_made("r-1"), 1);
}

#[tokio::test]
async fn refunds_are_refused_for_bad_keys_unknown_payments_and_too_much() {
    let h = harness().await;
    let txn = h.paid("o-3", 600).await;
    let r = h
        .http
        .post(h.url("/gateway/refunds"))
        .basic_auth("wrong", None::<&str>)
        .json(&refund("r-2", &txn, 100))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let (status, e) = h.refund("r-2", "txn-404", 100).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("TRANSACTION_NOT_FOUND"))
    );
    assert!(e["message"].as_str().unwrap().contains("transaction_no"));
    let (status, e) = h.refund("r-2", &txn, 0).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("INVALID_REQUEST"))
    );
    assert!(e["message"].as_str().unwrap().contains("amount_minor"));
    let mut b = refund("r-2", &txn, 100);
    b["currency"] = json!("USD");
    let (status, e) = h.post("/gateway/refunds", &b).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("CURRENCY_MISMATCH"))
    );
    let mut b = refund("r-2", &txn, 100);
    b["order_no"] = json!("o-other");
    let (status, e) = h.post("/gateway/refunds", &b).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("PAYMENT_MISMATCH"))
    );
    assert!(e["message"].as_str().unwrap().contains("order_no"));
    // 600 paid: 400 refunded leaves 200.
    assert_eq!(h.refund("r-2", &txn, 400).await.0, 200);
    let (status, e) = h.refund("r-3", &txn, 300).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("AMOUNT_EXCEEDS_REFUNDABLE"))
    );
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("amount_minor") && message.contains("200"),
        "{message}"
    );
    // A FAILED refund gives its amount back.
    let (status, _) = h
        .control("settle", json!({"refund_no": "r-2", "status": "FAILED"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(h.refund("r-3", &txn, 300).await.0, 200);
    assert_eq!(h.made("r-2").await + h.made("r-3").await, 2);
    let (_, counts) = h.get("/control/gateway/requests").await;
    assert_eq!(counts["unauthorized"], 1);
    assert_eq!(counts["payment"], 1);
}

#[tokio::test]
async fn a_query_finds_the_refund_succeeded_by_default_and_404s_an_unknown_one() {
    let h = harness().await;
    let (status, e) = h.query("r-none").await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (404, Some("REFUND_NOT_FOUND"))
    );
    let txn = h.paid("o-4", 600).await;
    h.refund("r-4", &txn, 600).await;
    assert_eq!(h.status_of("r-4").await, "SUCCEEDED");
    // A replayed create answers it as it now stands.
    assert_eq!(h.refund("r-4", &txn, 600).await.1["status"], "SUCCEEDED");
    let r = h
        .http
        .get(h.url("/gateway/refunds/r-4"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn processing_then_answers_processing_n_times_then_the_scripted_status() {
    let h = harness().await;
    let txn = h.paid("o-5", 900).await;
    h.fault(
        json!({"refund_no": "r-5", "kind": "processing_then", "times": 2,
                   "status": "FAILED", "failure_reason": "ACCOUNT_FROZEN"}),
    )
    .await;
    h.fault(
        json!({"refund_no": "r-6", "kind": "processing_then", "times": 1,
                   "status": "CLOSED"}),
    )
    .await;
    assert_eq!(h.refund("r-5", &txn, 300).await.1["status"], "PROCESSING");
    assert_eq!(h.status_of("r-5").await, "PROCESSING");
    assert_eq!(h.status_of("r-5").await, "PROCESSING");
    let (_, v) = h.query("r-5").await;
    assert_eq!(
        (v["status"].as_str(), v["failure_reason"].as_str()),
        (Some("FAILED"), Some("ACCOUNT_FROZEN"))
    );
    assert_eq!(h.status_of("r-5").await, "FAILED", "final stays final");
    h.refund("r-6", &txn, 300).await;
    assert_eq!(h.status_of("r-6").await, "PROCESSING");
    assert_eq!(h.status_of("r-6").await, "CLOSED");
    // Scripted on an existing refund, it replaces the course.
    h.refund("r-7", &txn, 300).await;
    h.fault(
        json!({"refund_no": "r-7", "kind": "processing_then", "times": 1,
                   "status": "SUCCEEDED"}),
    )
    .await;
    assert_eq!(h.status_of("r-7").await, "PROCESSING");
    assert_eq!(h.status_of("r-7").await, "SUCCEEDED");
}

#[tokio::test]
async fn accept_then_timeout_makes_the_refund_and_a_query_then_finds_it() {
    let h = harness().await;
    let txn = h.paid("o-8", 600).await;
    h.fault(json!({"refund_no": "r-8", "kind": "accept_then_timeout", "delay_ms": 5000}))
        .await;
    let sent = h
        .http
        .post(h.url("/gateway/refunds"))
        .basic_auth(SECRET, None::<&str>)
        .json(&refund("r-8", &txn, 600))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(sent.unwrap_err().is_timeout());
    assert_eq!(h.made("r-8").await, 1, "the refund exists at the gateway");
    assert_eq!(h.status_of("r-8").await, "SUCCEEDED");
    // A retry under the same number finds it and makes nothing more.
    assert_eq!(h.refund("r-8", &txn, 600).await.0, 200);
    assert_eq!(h.made("r-8").await, 1);
}

#[tokio::test]
async fn create_faults_5xx_before_and_after_accepting_reject_and_garbage() {
    let h = harness().await;
    let txn = h.paid("o-9", 1000).await;
    h.fault(json!({"refund_no": "r-9", "kind": "error_5xx_before_accept"}))
        .await;
    assert_eq!(h.refund("r-9", &txn, 100).await.0, 503);
    assert_eq!(h.made("r-9").await, 0);
    assert_eq!(
        h.refund("r-9", &txn, 100).await.0,
        200,
        "the retry goes through"
    );
    h.fault(json!({"refund_no": "r-10", "kind": "error_5xx_after_accept", "status": 500}))
        .await;
    assert_eq!(h.refund("r-10", &txn, 100).await.0, 500);
    assert_eq!(h.made("r-10").await, 1);
    h.fault(
        json!({"refund_no": "r-11", "kind": "reject", "error_code": "PAYMENT_TOO_OLD",
                   "message": "paid more than a year ago"}),
    )
    .await;
    let (status, e) = h.refund("r-11", &txn, 100).await;
    assert_eq!(
        (status, e["error_code"].as_str()),
        (400, Some("PAYMENT_TOO_OLD"))
    );
    assert_eq!(h.made("r-11").await, 0);
    h.fault(json!({"refund_no": "r-12", "kind": "garbage_body"}))
        .await;
    let r = h
        .http
        .post(h.url("/gateway/refunds"))
        .basic_auth(SECRET, None::<&str>)
        .json(&refund("r-12", &txn, 100))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(serde_json::from_str::<Value>(&r.text().await.unwrap()).is_err());
    assert_eq!(h.made("r-12").await, 1);
}

#[tokio::test]
async fn query_faults_5xx_n_times_timeout_and_garbage_do_not_move_the_refund() {
    let h = harness().await;
    let txn = h.paid("o-13", 600).await;
    h.fault(
        json!({"refund_no": "r-13", "kind": "processing_then", "times": 1,
                   "status": "SUCCEEDED"}),
    )
    .await;
    h.refund("r-13", &txn, 600).await;
    h.fault(json!({"refund_no": "r-13", "kind": "query_5xx", "times": 2, "status": 502}))
        .await;
    assert_eq!(h.query("r-13").await.0, 502);
    assert_eq!(h.query("r-13").await.0, 502);
    h.fault(json!({"refund_no": "r-13", "kind": "query_timeout", "delay_ms": 5000}))
        .await;
    let sent = h
        .http
        .get(h.url("/gateway/refunds/r-13"))
        .basic_auth(SECRET, None::<&str>)
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(sent.unwrap_err().is_timeout());
    h.fault(json!({"refund_no": "r-13", "kind": "query_garbage_body"}))
        .await;
    let r = h
        .http
        .get(h.url("/gateway/refunds/r-13"))
        .basic_auth(SECRET, None::<&str>)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(serde_json::from_str::<Value>(&r.text().await.unwrap()).is_err());
    // None of those moved the course: one PROCESSING, then SUCCEEDED.
    assert_eq!(h.status_of("r-13").await, "PROCESSING");
    assert_eq!(h.status_of("r-13").await, "SUCCEEDED");
}

#[tokio::test]
async fn duplicate_callback_delivers_the_same_signed_event_twice() {
    let h = harness().await;
    h.fault(json!({"order_no": "o-14", "kind": "duplicate_callback"}))
        .await;
    let v = h.pay("o-14", 600).await;
    assert_eq!(v["callback"]["state"], "DELIVERED");
    let got = h.receiver.got();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].body, got[1].body);
    assert_eq!(got[0].signature, got[1].signature);
    assert!(got[1].verifies());
    let (_, log) = h.get("/control/gateway/callbacks").await;
    let copies: Vec<u64> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["copy"].as_u64().unwrap())
        .collect();
    assert_eq!(copies, vec![1, 2]);
    // The fault was used up: the next payment of the order calls back once.
    h.pay("o-14", 600).await;
    assert_eq!(h.receiver.got().len(), 3);
}

#[tokio::test]
async fn late_callback_arrives_after_the_delay() {
    let h = harness().await;
    h.fault(json!({"order_no": "o-15", "kind": "late_callback", "delay_ms": 150}))
        .await;
    let v = h.pay("o-15", 600).await;
    assert_eq!(v["callback"]["state"], "DELAYED");
    assert!(h.receiver.got().is_empty(), "not yet");
    let got = h.receiver.wait_for(1).await;
    assert!(got[0].verifies());
    let paid_at = v["payment"]["paid_at_ms"].as_i64().unwrap();
    assert_eq!(got[0].json()["paid_at_ms"].as_i64(), Some(paid_at));
    let (_, log) = h.get("/control/gateway/callbacks").await;
    let at = log[0]["at_ms"].as_i64().unwrap();
    assert!(at - paid_at >= 150, "{at} - {paid_at}");
}

#[tokio::test]
async fn a_held_callback_goes_out_when_released() {
    let h = harness().await;
    h.fault(json!({"order_no": "o-16", "kind": "hold_callback"}))
        .await;
    let v = h.pay("o-16", 600).await;
    assert_eq!(v["callback"]["state"], "HELD");
    assert!(h.receiver.got().is_empty());
    let (status, released) = h.control("release", json!({"order_no": "o-16"})).await;
    assert_eq!(status, 200);
    assert_eq!(released["callbacks"][0]["state"], "DELIVERED");
    assert_eq!(
        released["callbacks"][0]["event_id"],
        v["callback"]["event_id"]
    );
    assert_eq!(h.receiver.got().len(), 1);
    assert_eq!(
        h.control("release", json!({"order_no": "o-16"})).await.0,
        404
    );
}

#[tokio::test]
async fn bad_signature_callback_does_not_verify_and_a_500_is_retried() {
    let h = harness().await;
    h.fault(json!({"order_no": "o-17", "kind": "bad_signature_callback"}))
        .await;
    h.pay("o-17", 600).await;
    let got = h.receiver.got();
    assert!(!got[0].verifies());
    let (_, log) = h.get("/control/gateway/callbacks").await;
    assert_eq!(log[0]["signed"], false);
    h.receiver.answers.lock().unwrap().extend([500]);
    let v = h.pay("o-18", 600).await;
    assert_eq!(v["callback"]["state"], "DELIVERED");
    let got = h.receiver.got();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].body, got[2].body, "the retry is the same event");
}

#[tokio::test]
async fn faults_must_name_their_key_and_be_possible() {
    let h = harness().await;
    for entry in [
        json!({"order_no": "o-1", "kind": "accept_then_timeout"}),
        json!({"refund_no": "r-1", "kind": "duplicate_callback"}),
        json!({"refund_no": "r-1", "kind": "query_5xx", "status": 404}),
        json!({"refund_no": "r-1", "kind": "processing_then", "status": "PROCESSING"}),
        json!({"order_no": "o-1", "kind": "late_callback", "delay_ms": 999_999_999}),
    ] {
        let (status, _) = h
            .control("faults", json!({ "faults": [entry.clone()] }))
            .await;
        assert_eq!(status, 400, "{entry}");
    }
    // A refused list queues nothing, the good entry included.
    let (status, _) = h
        .control(
            "faults",
            json!({"faults": [{"refund_no": "r-1", "kind": "error_5xx_before_accept"},
                              {"order_no": "o-1", "kind": "nope"}]}),
        )
        .await;
    assert!(status >= 400);
    let txn = h.paid("o-1", 600).await;
    assert_eq!(h.refund("r-1", &txn, 100).await.0, 200);
}

#[tokio::test]
async fn settings_turn_callbacks_off_and_a_reset_forgets_the_gateway() {
    let h = harness().await;
    let txn = h.paid("o-19", 600).await;
    h.refund("r-19", &txn, 100).await;
    h.fault(json!({"refund_no": "r-20", "kind": "error_5xx_before_accept"}))
        .await;
    let (status, s) = h.control("settings", json!({"callback_url": ""})).await;
    assert_eq!((status, &s["callback_url"]), (200, &Value::Null));
    assert_eq!(h.pay("o-20", 600).await["callback"]["state"], "OFF");
    let r = h.http.post(h.url("/control/reset")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(h.query("r-19").await.0, 404);
    let (_, v) = h.get("/control/gateway/refunds").await;
    assert_eq!(v["refunds"], json!([]));
    let (_, payments) = h.get("/control/gateway/payments").await;
    assert_eq!(payments, json!([]));
    // Back to the configured callback URL, and the fault is gone.
    let txn = h.paid("o-21", 600).await;
    assert_eq!(h.receiver.got().len(), 2);
    assert_eq!(h.refund("r-20", &txn, 100).await.0, 200);
}

#[tokio::test]
async fn the_in_process_api_pays_scripts_and_reads_the_same_state() {
    use payout_sim::gateway::{CallbackState, GatewayFault, Method, PaymentRequest};
    let h = harness().await;
    let gw = h.sim.gateway();
    gw.add_fault("o-22", GatewayFault::HoldCallback).unwrap();
    let out = gw
        .pay(PaymentRequest {
            order_no: "o-22".into(),
            amount_minor: 600,
            currency: "CNY".into(),
            method: Method::Alipay,
            account_id: "mch-2".into(),
            paid_at_ms: Some(1_767_225_600_000),
        })
        .await;
    assert_eq!(out.callback.state, CallbackState::Held);
    assert_eq!(out.payment.paid_at_ms, 1_767_225_600_000);
    let reports = gw.release("o-22").await.unwrap();
    assert_eq!(reports[0].state, CallbackState::Delivered);
    assert_eq!(h.receiver.got()[0].json()["method"], "ALIPAY");
    assert!(gw.add_fault(" ", GatewayFault::HoldCallback).is_err());
}
