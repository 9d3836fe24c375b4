//! The adapter against the payment-gateway simulator (spawned in-process on
//! loopback): every [`RefundAnswer`] mapping, the accepted-then-timeout case, retries
//! that never refund twice, the pay callback from signature to [`PaymentNotice`], and
//! the pure mappings' edge cases.

use super::*;
use hmac::{Hmac, Mac};
use payout_sim::gateway::{
    CallbackState, GatewayFault, Method, Payment, PaymentRequest, RefundStatus,
};
use payout_sim::{SimConfig, SimHandle};
use sha2::Sha256;
use std::sync::{Arc, Mutex};

const KEY: &str = "sk-gateway-adapter-test";
const CALLBACK_SECRET: &str = "gateway-callback-secret";

async fn sim() -> SimHandle {
    payout_sim::spawn(SimConfig {
        secret: KEY.into(),
        gateway_callback_secret: CALLBACK_SECRET.into(),
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn gateway_with(sim: &SimHandle, key: &str, timeout: Duration) -> HttpGateway {
    HttpGateway::new(HttpGatewayConfig {
        name: "paysim".into(),
        base_url: sim.base_url(),
        api_key: key.into(),
        timeout,
    })
    .unwrap()
}

async fn setup() -> (SimHandle, HttpGateway) {
    let sim = sim().await;
    let g = gateway_with(&sim, KEY, Duration::from_secs(2));
    (sim, g)
}

async fn pay(sim: &SimHandle, order_no: &str, amount_minor: i64) -> Payment {
    sim.gateway()
        .pay(PaymentRequest {
            order_no: order_no.into(),
            amount_minor,
            currency: "CNY".into(),
            method: Method::Wechat,
            account_id: "mch-1".into(),
            paid_at_ms: None,
        })
        .await
        .payment
}

fn request(refund_no: &str, p: &Payment, amount_minor: i64) -> RefundRequest {
    RefundRequest {
        refund_no: refund_no.into(),
        order_no: p.order_no.clone(),
        transaction_no: p.transaction_no.clone(),
        method: PayMethod::Wechat,
        account_id: p.account_id.clone(),
        amount_minor,
        currency: p.currency.clone(),
        paid_minor: None,
    }
}

fn made(sim: &SimHandle, refund_no: &str) -> u64 {
    sim.gateway().refunds_made(refund_no)
}

fn is_unknown(a: &RefundAnswer) -> bool {
    matches!(a, RefundAnswer::Unknown { .. })
}

fn failed_reason(a: RefundAnswer) -> String {
    match a {
        RefundAnswer::Failed { reason, .. } => reason,
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_new_refund_is_processing_and_a_query_finds_it_succeeded() {
    let (sim, g) = setup().await;
    let p = pay(&sim, "o-1", 600).await;
    let a = g.refund(&request("r-1", &p, 600)).await;
    match &a {
        RefundAnswer::Processing { response } => assert!(response.contains("PROCESSING")),
        other => panic!("{other:?}"),
    }
    match g.query_refund("r-1").await {
        RefundAnswer::Succeeded {
            gateway_refund_id,
            response,
        } => {
            assert!(gateway_refund_id.starts_with("grf-"));
            assert!(response.contains("SUCCEEDED"));
        }
        other => panic!("{other:?}"),
    }
    // A retried create answers the refund as it stands now, and makes nothing.
    assert!(matches!(
        g.refund(&request("r-1", &p, 600)).await,
        RefundAnswer::Succeeded { .. }
    ));
    assert_eq!(made(&sim, "r-1"), 1);
    assert_eq!(g.name(), "paysim");
}

#[tokio::test]
async fn a_query_says_processing_n_times_then_failed_or_closed() {
    let (sim, g) = setup().await;
    let p = pay(&sim, "o-2", 900).await;
    let gw = sim.gateway();
    gw.add_fault(
        "r-2",
        GatewayFault::ProcessingThen {
            times: 2,
            status: RefundStatus::Failed,
            failure_reason: Some("ACCOUNT_FROZEN".into()),
        },
    )
    .unwrap();
    gw.add_fault(
        "r-3",
        GatewayFault::ProcessingThen {
            times: 0,
            status: RefundStatus::Closed,
            failure_reason: None,
        },
    )
    .unwrap();
    assert!(matches!(
        g.refund(&request("r-2", &p, 300)).await,
        RefundAnswer::Processing { .. }
    ));
    for _ in 0..2 {
        assert!(matches!(
            g.query_refund("r-2").await,
            RefundAnswer::Processing { .. }
        ));
    }
    assert_eq!(failed_reason(g.query_refund("r-2").await), "ACCOUNT_FROZEN");
    g.refund(&request("r-3", &p, 300)).await;
    assert!(matches!(
        g.query_refund("r-3").await,
        RefundAnswer::Closed { .. }
    ));
}

#[tokio::test]
async fn a_4xx_refusal_of_the_create_is_failed_with_the_gateway_s_words_and_makes_nothing() {
    let (sim, g) = setup().await;
    let p = pay(&sim, "o-4", 600).await;
    let reason = failed_reason(g.refund(&request("r-4", &p, 601)).await);
    assert!(reason.starts_with("AMOUNT_EXCEEDS_REFUNDABLE"), "{reason}");
    assert!(reason.contains("amount_minor"), "{reason}");
    let mut other = request("r-5", &p, 100);
    other.transaction_no = "txn-unknown".into();
    let reason = failed_reason(g.refund(&other).await);
    assert!(reason.starts_with("TRANSACTION_NOT_FOUND"), "{reason}");
    let mut other = request("r-6", &p, 100);
    other.method = PayMethod::Apple;
    let reason = failed_reason(g.refund(&other).await);
    assert!(
        reason.starts_with("PAYMENT_MISMATCH") && reason.contains("method"),
        "{reason}"
    );
    sim.gateway()
        .add_fault(
            "r-7",
            GatewayFault::Reject {
                error_code: "PAYMENT_TOO_OLD".into(),
                message: "paid more than a year ago".into(),
            },
        )
        .unwrap();
    match g.refund(&request("r-7", &p, 100)).await {
        RefundAnswer::Failed { reason, response } => {
            assert_eq!(reason, "PAYMENT_TOO_OLD: paid more than a year ago");
            assert!(response.contains("PAYMENT_TOO_OLD"));
        }
        other => panic!("{other:?}"),
    }
    for n in ["r-4", "r-5", "r-6", "r-7"] {
        assert_eq!(made(&sim, n), 0, "{n}");
    }
}

#[tokio::test]
async fn a_refund_no_reused_with_another_amount_is_unknown_not_failed() {
    let (sim, g) = setup().await;
    let p = pay(&sim, "o-8", 600).await;
    g.refund(&request("r-8", &p, 100)).await;
    let a = g.refund(&request("r-8", &p, 200)).await;
    match &a {
        RefundAnswer::Unknown { error } => assert!(error.contains(REFUND_NO_REUSED), "{error}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(made(&sim, "r-8"), 1);
}

#[tokio::test]
async fn accepted_then_timeout_is_unknown_and_a_later_query_tells_the_truth() {
    let sim = sim().await;
    let g = gateway_with(&sim, KEY, Duration::from_millis(300));
    let p = pay(&sim, "o-9", 600).await;
    sim.gateway()
        .add_fault("r-9", GatewayFault::AcceptThenTimeout { delay_ms: 5_000 })
        .unwrap();
    match g.refund(&request("r-9", &p, 600)).await {
        RefundAnswer::Unknown { error } => {
            assert!(error.contains("no answer within 300 ms"), "{error}");
            assert!(!error.contains(KEY));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(made(&sim, "r-9"), 1, "the refund exists at the gateway");
    assert!(matches!(
        g.query_refund("r-9").await,
        RefundAnswer::Succeeded { .. }
    ));
    // A retry under the same number finds it; still one refund.
    assert!(matches!(
        g.refund(&request("r-9", &p, 600)).await,
        RefundAnswer::Succeeded { .. }
    ));
    let refunds = sim.gateway().refunds();
    assert_eq!(refunds.refunds_per_refund_no["r-9"], 1);
    assert_eq!(refunds.create_requests_per_refund_no["r-9"], 2);
    assert_eq!(
        refunds.refunded_minor_per_transaction_no[&p.transaction_no],
        600
    );
}

#[tokio::test]
async fn a_5xx_or_an_unreadable_body_is_unknown_whether_or_not_the_refund_was_made() {
    let (sim, g) = setup().await;
    let p = pay(&sim, "o-10", 900).await;
    let gw = sim.gateway();
    gw.add_fault("r-10", GatewayFault::Error5xxBeforeAccept { status: 503 })
        .unwrap();
    gw.add_fault("r-11", GatewayFault::Error5xxAfterAccept { status: 502 })
        .unwrap();
    gw.add_fault("r-12", GatewayFault::GarbageBody).unwrap();
    let a = g.refund(&request("r-10", &p, 300)).await;
    assert!(
        matches!(&a, RefundAnswer::Unknown { error } if error.starts_with("HTTP 503")),
        "{a:?}"
    );
    assert_eq!(made(&sim, "r-10"), 0);
    // The gateway never got it: the query says so, and it is still not a failure.
    match g.query_refund("r-10").await {
        RefundAnswer::Unknown { error } => assert!(error.starts_with(NOT_FOUND_PREFIX), "{error}"),
        other => panic!("{other:?}"),
    }
    let a = g.refund(&request("r-11", &p, 300)).await;
    assert!(
        matches!(&a, RefundAnswer::Unknown { error } if error.starts_with("HTTP 502")),
        "{a:?}"
    );
    assert_eq!(made(&sim, "r-11"), 1);
    assert!(matches!(
        g.query_refund("r-11").await,
        RefundAnswer::Succeeded { .. }
    ));
    let a = g.refund(&request("r-12", &p, 300)).await;
    assert!(
        matches!(&a, RefundAnswer::Unknown { error } if error.contains("unreadable")),
        "{a:?}"
    );
    assert_eq!(made(&sim, "r-12"), 1);
    // The retry of the refused one goes through, once.
    assert!(matches!(
        g.refund(&request("r-10", &p, 300)).await,
        RefundAnswer::Processing { .. }
    ));
    assert_eq!(made(&sim, "r-10"), 1);
}

#[tokio::test]
async fn query_errors_are_unknown_and_the_refund_is_found_afterwards() {
    let sim = sim().await;
    let g = gateway_with(&sim, KEY, Duration::from_millis(300));
    let p = pay(&sim, "o-13", 600).await;
    let gw = sim.gateway();
    gw.add_fault(
        "r-13",
        GatewayFault::ProcessingThen {
            times: 1,
            status: RefundStatus::Succeeded,
            failure_reason: None,
        },
    )
    .unwrap();
    g.refund(&request("r-13", &p, 600)).await;
    gw.add_fault(
        "r-13",
        GatewayFault::Query5xx {
            times: 2,
            status: 503,
        },
    )
    .unwrap();
    gw.add_fault("r-13", GatewayFault::QueryTimeout { delay_ms: 5_000 })
        .unwrap();
    gw.add_fault("r-13", GatewayFault::QueryGarbageBody)
        .unwrap();
    for _ in 0..4 {
        let a = g.query_refund("r-13").await;
        assert!(is_unknown(&a), "{a:?}");
    }
    assert!(matches!(
        g.query_refund("r-13").await,
        RefundAnswer::Processing { .. }
    ));
    assert!(matches!(
        g.query_refund("r-13").await,
        RefundAnswer::Succeeded { .. }
    ));
}

#[tokio::test]
async fn a_wrong_key_or_no_server_is_unknown_and_makes_nothing() {
    let (sim, _) = setup().await;
    let p = pay(&sim, "o-14", 600).await;
    let wrong = gateway_with(&sim, "not-the-key", Duration::from_secs(2));
    let a = wrong.refund(&request("r-14", &p, 100)).await;
    assert!(
        matches!(&a, RefundAnswer::Unknown { error } if error.starts_with("HTTP 401")),
        "{a:?}"
    );
    assert!(is_unknown(&wrong.query_refund("r-14").await));
    assert_eq!(made(&sim, "r-14"), 0);
    let g = gateway_with(&sim, KEY, Duration::from_secs(2));
    sim.shutdown().await;
    assert!(is_unknown(&g.refund(&request("r-14", &p, 100)).await));
    assert!(is_unknown(&g.query_refund("r-14").await));
}

#[tokio::test]
async fn retries_through_every_fault_never_refund_twice() {
    let sim = sim().await;
    let g = gateway_with(&sim, KEY, Duration::from_millis(300));
    let p = pay(&sim, "o-15", 1_000).await;
    let gw = sim.gateway();
    for fault in [
        GatewayFault::Error5xxBeforeAccept { status: 503 },
        GatewayFault::AcceptThenTimeout { delay_ms: 5_000 },
        GatewayFault::Error5xxAfterAccept { status: 500 },
        GatewayFault::GarbageBody,
    ] {
        gw.add_fault("r-15", fault).unwrap();
    }
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.push(g.refund(&request("r-15", &p, 700)).await);
    }
    assert!(answers[..4].iter().all(is_unknown), "{answers:?}");
    assert!(!is_unknown(&answers[4]), "{answers:?}");
    let refunds = gw.refunds();
    assert_eq!(refunds.refunds_per_refund_no["r-15"], 1);
    assert_eq!(refunds.refunds_per_transaction_no[&p.transaction_no], 1);
    assert_eq!(
        refunds.refunded_minor_per_transaction_no[&p.transaction_no],
        700
    );
    assert_eq!(refunds.create_requests_per_refund_no["r-15"], 6);
}

#[tokio::test]
async fn a_refund_number_is_sent_percent_encoded_and_blank_ones_are_not_sent() {
    let (sim, g) = setup().await;
    let p = pay(&sim, "o-16", 600).await;
    g.refund(&request("r/16 ü?#", &p, 100)).await;
    assert!(matches!(
        g.query_refund("r/16 ü?#").await,
        RefundAnswer::Succeeded { .. }
    ));
    let reason = failed_reason(g.refund(&request(" ", &p, 100)).await);
    assert!(reason.contains("refund_no"), "{reason}");
    let reason = failed_reason(g.refund(&request("r-17", &p, 0)).await);
    assert!(reason.contains("amount_minor"), "{reason}");
    assert!(is_unknown(&g.query_refund("").await));
    assert_eq!(sim.gateway().requests().refund, 1);
}

/// A callback received: the signature header and the raw body.
type Received = (Option<String>, Vec<u8>);

/// Receives pay callbacks.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn spawn(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/v1/callbacks/paysim",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                    let sig = headers
                        .get(SIGNATURE_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    me.got.lock().unwrap().push((sig, body.to_vec()));
                    axum::http::StatusCode::OK
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/v1/callbacks/paysim")
    }
}

/// What the callback inbox does with a verified body (the `Verifier::hmac` check and
/// the `JsonPointers` normaliser, restated: this capability may not import them).
fn verify_and_normalise(signature: Option<&str>, raw: &[u8]) -> (String, String, Value) {
    let hex_sig = signature.expect("a signature header");
    let tag = hex::decode(hex_sig).unwrap();
    assert_eq!(tag.len(), 32, "64 hex digits");
    let mut mac = Hmac::<Sha256>::new_from_slice(CALLBACK_SECRET.as_bytes()).unwrap();
    mac.update(raw);
    mac.verify_slice(&tag)
        .expect("the signature matches the raw body");
    let body = crate::infra::json::parse_unique(raw).unwrap();
    let p = callback_pointers();
    let event_id = body
        .pointer(p.event_id)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let event_type = body
        .pointer(p.event_type)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    (event_id, event_type, body)
}

#[tokio::test]
async fn a_signed_pay_callback_verifies_normalises_and_parses_into_a_notice() {
    let (sim, g) = setup().await;
    let receiver = Receiver::default();
    let url = receiver.spawn().await;
    sim.gateway().set_settings(Some(url), None).unwrap();
    let out = sim
        .gateway()
        .pay(PaymentRequest {
            order_no: "o-18".into(),
            amount_minor: 1_288,
            currency: "CNY".into(),
            method: Method::Alipay,
            account_id: "mch-9".into(),
            paid_at_ms: Some(1_767_225_600_000),
        })
        .await;
    assert_eq!(out.callback.state, CallbackState::Delivered);
    let (sig, raw) = receiver.got.lock().unwrap()[0].clone();
    let (event_id, event_type, data) = verify_and_normalise(sig.as_deref(), &raw);
    assert_eq!(event_type, PAYMENT_SUCCEEDED);
    let notice = g.parse_payment(&data).unwrap();
    assert_eq!(
        notice,
        PaymentNotice {
            event_id,
            order_no: "o-18".into(),
            transaction_no: out.payment.transaction_no.clone(),
            method: PayMethod::Alipay,
            account_id: "mch-9".into(),
            amount_minor: 1_288,
            currency: "CNY".into(),
            paid_at_ms: 1_767_225_600_000,
        }
    );
    assert_eq!(
        callback_pointers(),
        CallbackPointers {
            signature_header: "x-gateway-signature",
            event_id: "/event_id",
            event_type: "/type",
        }
    );
}

fn good_callback() -> Value {
    json!({"event_id": "gevt-1", "type": "payment.succeeded", "order_no": "o-1",
           "transaction_no": "txn-1", "method": "WECHAT", "account_id": "mch-1",
           "amount_minor": 600, "currency": "CNY", "paid_at_ms": 1_767_225_600_000_i64})
}

#[test]
fn parse_payment_names_the_offending_field() {
    assert!(parse_payment(&good_callback()).is_ok());
    let cases: [(&str, Option<Value>); 16] = [
        ("order_no", None),
        ("order_no", Some(json!(""))),
        ("order_no", Some(json!("  "))),
        ("order_no", Some(json!(42))),
        ("order_no", Some(json!("o 1"))),
        ("transaction_no", None),
        ("event_id", None),
        ("amount_minor", None),
        ("amount_minor", Some(json!(6.5))),
        ("amount_minor", Some(json!("600"))),
        ("amount_minor", Some(json!(0))),
        ("amount_minor", Some(json!(-600))),
        ("method", Some(json!("PAYPAL"))),
        ("currency", Some(json!("yuan"))),
        ("paid_at_ms", Some(json!("yesterday"))),
        ("account_id", Some(json!("x".repeat(129)))),
    ];
    for (field, value) in cases {
        let mut data = good_callback();
        match value.clone() {
            Some(v) => data[field] = v,
            None => {
                data.as_object_mut().unwrap().remove(field);
            }
        }
        let e = parse_payment(&data).unwrap_err();
        assert!(
            e.starts_with(&format!("{field}: ")),
            "{field} {value:?}: {e}"
        );
    }
    let mut refund = good_callback();
    refund["type"] = json!("refund.succeeded");
    let e = parse_payment(&refund).unwrap_err();
    assert!(e.starts_with("type: "), "{e}");
    assert!(parse_payment(&json!([1, 2])).is_err());
    let e = parse_payment(&json!({"type": "payment.succeeded"})).unwrap_err();
    assert_eq!(e, "event_id: missing");
}

#[test]
fn the_pure_mappings_refuse_to_guess() {
    let r = RefundRequest {
        refund_no: "r-1".into(),
        order_no: "o-1".into(),
        transaction_no: "txn-1".into(),
        method: PayMethod::Wechat,
        account_id: "mch-1".into(),
        amount_minor: 100,
        currency: "CNY".into(),
        paid_minor: None,
    };
    let ok = |status: &str| {
        json!({"refund_no": "r-1", "gateway_refund_id": "grf-1", "amount_minor": 100,
               "currency": "CNY", "status": status})
        .to_string()
    };
    assert!(matches!(
        map_refund(&r, 200, ok("SUCCEEDED").as_bytes()),
        RefundAnswer::Succeeded { .. }
    ));
    assert!(matches!(
        map_refund(&r, 201, ok("CLOSED").as_bytes()),
        RefundAnswer::Closed { .. }
    ));
    let unknowns: [(u16, String); 10] = [
        (200, ok("REFUNDED")),
        (200, ok("SUCCEEDED").replace("r-1", "r-2")),
        (200, ok("SUCCEEDED").replace("100", "99")),
        (
            200,
            json!({"refund_no": "r-1", "status": "SUCCEEDED"}).to_string(),
        ),
        (200, "<html>".into()),
        (
            400,
            json!({"error_code": REFUND_NO_REUSED, "message": "m"}).to_string(),
        ),
        (400, "<html>Bad Request</html>".into()),
        (
            401,
            json!({"error_code": "INVALID_API_KEY", "message": "m"}).to_string(),
        ),
        (
            404,
            json!({"error_code": "NOT_FOUND", "message": "m"}).to_string(),
        ),
        (
            429,
            json!({"error_code": "RATE_LIMITED", "message": "m"}).to_string(),
        ),
    ];
    for (status, body) in &unknowns {
        let a = map_refund(&r, *status, body.as_bytes());
        assert!(is_unknown(&a), "{status} {body}: {a:?}");
    }
    let refused = json!({"error_code": "AMOUNT_EXCEEDS_REFUNDABLE", "message": "m"}).to_string();
    assert!(matches!(
        map_refund(&r, 422, refused.as_bytes()),
        RefundAnswer::Failed { .. }
    ));
    // A query: a refund FAILED is Failed; an HTTP error never is.
    let failed = json!({"refund_no": "r-1", "status": "FAILED"}).to_string();
    assert_eq!(
        failed_reason(map_query("r-1", 200, failed.as_bytes())),
        "FAILED"
    );
    for status in [400, 404, 409, 500, 503] {
        assert!(is_unknown(&map_query("r-1", status, refused.as_bytes())));
    }
    let not_found = json!({"error_code": REFUND_NOT_FOUND, "message": "m"}).to_string();
    match map_query("r-1", 404, not_found.as_bytes()) {
        RefundAnswer::Unknown { error } => assert!(error.starts_with(NOT_FOUND_PREFIX)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_config_is_checked_and_never_shows_the_key() {
    let mut c = HttpGatewayConfig::new("http://127.0.0.1:9", "sk-secret");
    assert_eq!(
        (c.name.as_str(), c.timeout),
        (NAME_DEFAULT, TIMEOUT_DEFAULT)
    );
    assert!(!format!("{c:?}").contains("sk-secret"));
    let g = HttpGateway::new(c.clone()).unwrap();
    assert!(!format!("{g:?}").contains("sk-secret"));
    assert_eq!(g.config().name, NAME_DEFAULT);
    c.name = "Pay Sim".into();
    assert!(HttpGateway::new(c.clone()).unwrap_err().0.contains("name"));
    c.name = "wechat".into();
    for bad in ["ftp://x", "not a url", "mailto:a@b"] {
        c.base_url = bad.into();
        assert!(HttpGateway::new(c.clone()).is_err(), "{bad}");
    }
    c.base_url = "https://gateway.example/api/".into();
    let g = HttpGateway::new(c.clone()).unwrap();
    assert_eq!(
        g.url(&["gateway", "refunds", "r/1"]).as_str(),
        "https://gateway.example/api/gateway/refunds/r%2F1"
    );
    c.timeout = Duration::ZERO;
    assert!(HttpGateway::new(c).is_err());
}
