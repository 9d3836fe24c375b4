//! The simulator's Alipay mode on the wire: a request not signed by the app is
//! refused and changes nothing; a signed one is answered with a signed node; a pay
//! notification carries a sign that verifies over Alipay's documented signing string.

use payout_sim::gateway::alipay::{self, AlipayMode};
use payout_sim::gateway::model::PaymentRequest;
use payout_sim::gateway::Method;
use payout_sim::SimConfig;
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::{DecodePublicKey, EncodePublicKey, LineEnding};
use rsa::signature::{SignatureEncoding, Signer, Verifier};
use rsa::RsaPrivateKey;
use sha2::Sha256;
use std::collections::BTreeMap;

use base64::Engine as _;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn only_requests_signed_by_the_app_are_served_and_answers_are_signed_by_alipay() {
    let mint = || RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("key");
    let (app, other) = (mint(), mint());
    let app_pem = app
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    let mode = AlipayMode::new("2021000000000001", &app_pem).expect("mode");
    let sim = payout_sim::spawn(SimConfig {
        alipay: Some(mode.clone()),
        ..SimConfig::default()
    })
    .await
    .expect("sim");
    let paid = sim
        .gateway()
        .pay(PaymentRequest {
            order_no: "o-1".into(),
            amount_minor: 8888,
            currency: "CNY".into(),
            method: Method::Alipay,
            account_id: "2088000000000001".into(),
            paid_at_ms: Some(1_468_908_647_000),
        })
        .await;
    // The notification a receiver would get: Alipay's sign over the sorted fields.
    let body = alipay::notification(&mode, &paid.payment, "n-1", "TRADE_SUCCESS", false);
    let form: BTreeMap<String, String> = form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    assert_eq!(form["total_amount"], "88.88");
    assert_eq!(form["gmt_payment"], "2016-07-19 14:10:47");
    let content = alipay::signing_string(&form, &["sign", "sign_type"]);
    let alipay_key =
        rsa::RsaPublicKey::from_public_key_pem(mode.alipay_public_key_pem()).expect("pem");
    let sig_bytes = base64::engine::general_purpose::STANDARD
        .decode(&form["sign"])
        .expect("b64");
    let sig = Signature::try_from(sig_bytes.as_slice()).expect("sig");
    VerifyingKey::<Sha256>::new(alipay_key.clone())
        .verify(content.as_bytes(), &sig)
        .expect("signed");

    let call = |key: &RsaPrivateKey| {
        let mut p: BTreeMap<String, String> = [
            ("app_id", "2021000000000001"),
            ("method", "alipay.trade.fastpay.refund.query"),
            ("format", "JSON"),
            ("charset", "utf-8"),
            ("sign_type", "RSA2"),
            ("timestamp", "2026-01-01 08:00:00"),
            ("version", "1.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        p.insert(
            "biz_content".into(),
            format!(
                "{{\"trade_no\":\"{}\",\"out_request_no\":\"r-1\"}}",
                paid.payment.transaction_no
            ),
        );
        let s: Signature = SigningKey::<Sha256>::new(key.clone())
            .sign(alipay::signing_string(&p, &["sign"]).as_bytes());
        p.insert("sign".into(), b64(&s.to_bytes()));
        let mut f = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &p {
            f.append_pair(k, v);
        }
        f.finish()
    };
    let client = reqwest::Client::new();
    let url = format!("{}/gateway.do", sim.base_url());
    let forged: serde_json::Value = client
        .post(&url)
        .body(call(&other))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(
        forged["error_response"]["sub_code"], "isv.invalid-signature",
        "{forged}"
    );
    assert_eq!(sim.gateway().requests().unauthorized, 1);
    let text = client
        .post(&url)
        .body(call(&app))
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("text");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let node = &v["alipay_trade_fastpay_refund_query_response"];
    assert_eq!(node["code"], "10000", "{v}");
    assert!(
        node.get("refund_status").is_none(),
        "no refund under r-1: {v}"
    );
    // The answer's sign covers the node's text as sent.
    let start = text.find(":{").expect("node") + 1;
    let end = text.rfind(",\"sign\"").expect("sign");
    let sig_bytes = base64::engine::general_purpose::STANDARD
        .decode(v["sign"].as_str().expect("sign"))
        .expect("b64");
    let sig = Signature::try_from(sig_bytes.as_slice()).expect("sig");
    VerifyingKey::<Sha256>::new(alipay_key)
        .verify(&text.as_bytes()[start..end], &sig)
        .expect("answer signed");
}
