//! Contract tests of the WeChat Pay protocol: the documented examples in, our
//! normalised model out; our signed request against the documented signing string;
//! every refusal naming its header and reason; the answer mapping tables row by row.
//!
//! Fixtures quote WeChat Pay's APIv3 documentation ("签名生成" for the signing string
//! `GET\n/v3/certificates\n1554208460\n593BEC0C930BF1AFEB40B4A08C8FB242\n\n`; "支付通知"
//! for the notification envelope `EV-2018022511223320873` and its transaction
//! example; "退款结果通知" for the refund resource). The keys are minted here: WeChat
//! publishes no private key to sign its examples with.

use super::crypto::{self, ApiV3Key, MerchantKey, PlatformKeys, SignedHeaders};
use super::wire::{self, TradeState};
use super::*;
use crate::services::gateway::{PayMethod, RefundAnswer, RefundRequest};
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::signature::Verifier;
use rsa::{RsaPrivateKey, RsaPublicKey};
use serde_json::json;
use std::sync::OnceLock;

const APIV3_KEY: &str = "0123456789abcdefghijABCDEFGHIJ01";
const SERIAL: &str = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1";
const NOW_S: i64 = 1_554_208_460;

/// One RSA-2048 key per test binary (minting is slow).
fn key() -> &'static RsaPrivateKey {
    static KEY: OnceLock<RsaPrivateKey> = OnceLock::new();
    KEY.get_or_init(|| RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("key"))
}

fn platform() -> PlatformKeys {
    PlatformKeys::from_keys([(SERIAL.to_owned(), key().to_public_key())])
}

/// The documented transaction example (支付通知, 解密后的资源).
fn documented_transaction() -> serde_json::Value {
    json!({
        "transaction_id": "1217752501201407033233368018",
        "amount": {"payer_total": 100, "total": 100, "currency": "CNY", "payer_currency": "CNY"},
        "mchid": "1230000109",
        "trade_state": "SUCCESS",
        "bank_type": "CMC",
        "promotion_detail": [],
        "success_time": "2018-06-08T10:34:56+08:00",
        "payer": {"openid": "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"},
        "out_trade_no": "1217752501201407033233368018",
        "appid": "wxd678efh567hg6787",
        "trade_state_desc": "支付成功",
        "trade_type": "MICROPAY",
        "attach": "自定义数据",
        "scene_info": {"device_id": "013467007045764"}
    })
}

/// A notification in the documented envelope with `resource` sealed.
fn notification(
    id: &str,
    event_type: &str,
    original_type: &str,
    resource: &serde_json::Value,
) -> String {
    let key = ApiV3Key::parse(APIV3_KEY).expect("key");
    let ciphertext = key
        .encrypt(
            resource.to_string().as_bytes(),
            "fdasflkja484",
            original_type,
        )
        .expect("seal");
    json!({
        "id": id,
        "create_time": "2015-05-20T13:29:35+08:00",
        "resource_type": "encrypt-resource",
        "event_type": event_type,
        "summary": "支付成功",
        "resource": {"original_type": original_type, "algorithm": "AEAD_AES_256_GCM",
                     "ciphertext": ciphertext, "associated_data": original_type,
                     "nonce": "fdasflkja484"}
    })
    .to_string()
}

/// The four headers WeChat would send with `body` at `timestamp`.
fn headers(body: &[u8], timestamp: i64, serial: &str) -> SignedHeaders {
    let nonce = "593BEC0C930BF1AFEB40B4A08C8FB242";
    let message = crypto::response_message(&timestamp.to_string(), nonce, body);
    SignedHeaders {
        timestamp: timestamp.to_string(),
        nonce: nonce.into(),
        signature: MerchantKey::from_key(key().clone()).sign(&message),
        serial: serial.into(),
    }
}

#[test]
fn the_signing_string_of_a_request_is_the_documented_one() {
    let message = crypto::request_message(
        "GET",
        "/v3/certificates",
        1554208460,
        "593BEC0C930BF1AFEB40B4A08C8FB242",
        "",
    );
    assert_eq!(
        message,
        "GET\n/v3/certificates\n1554208460\n593BEC0C930BF1AFEB40B4A08C8FB242\n\n"
    );
    let body = r#"{"transaction_id":"1217752501201407033233368018"}"#;
    assert_eq!(
        crypto::request_message("POST", "/v3/refund/domestic/refunds", 1554208460, "N", body),
        format!("POST\n/v3/refund/domestic/refunds\n1554208460\nN\n{body}\n")
    );
}

#[test]
fn our_authorization_header_is_the_documented_shape_and_verifies() {
    let merchant = MerchantKey::from_key(key().clone());
    let header = crypto::Authorization {
        mchid: "1900009191",
        serial: "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C",
        timestamp: 1554208460,
        nonce: "593BEC0C930BF1AFEB40B4A08C8FB242",
    }
    .header(&merchant, "GET", "/v3/certificates", "");
    let prefix = "WECHATPAY2-SHA256-RSA2048 mchid=\"1900009191\",nonce_str=\"593BEC0C930BF1AFEB40B4A08C8FB242\",signature=\"";
    assert!(header.starts_with(prefix), "{header}");
    assert!(header.ends_with(
        "\",timestamp=\"1554208460\",serial_no=\"1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C\""
    ));
    let signature = &header[prefix.len()..header.find("\",timestamp").expect("timestamp")];
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, signature)
        .expect("base64");
    let verifying = VerifyingKey::<sha2::Sha256>::new(key().to_public_key());
    verifying
        .verify(
            b"GET\n/v3/certificates\n1554208460\n593BEC0C930BF1AFEB40B4A08C8FB242\n\n",
            &Signature::try_from(bytes.as_slice()).expect("signature"),
        )
        .expect("the documented signing string is what was signed");
    assert_eq!(format!("{merchant:?}"), "MerchantKey(<redacted>)");
}

#[test]
fn a_documented_pay_notification_verifies_decrypts_and_becomes_a_payment_notice() {
    let body = notification(
        "EV-2018022511223320873",
        "TRANSACTION.SUCCESS",
        "transaction",
        &documented_transaction(),
    );
    let h = headers(body.as_bytes(), NOW_S, SERIAL);
    platform()
        .verify(&h, body.as_bytes(), NOW_S * 1000 + 299_000)
        .expect("verifies within the window");
    let key = ApiV3Key::parse(APIV3_KEY).expect("key");
    let n = decode_notification(body.as_bytes(), &key).expect("decodes");
    assert_eq!(n.id, "EV-2018022511223320873");
    assert_eq!(n.event_type, "TRANSACTION.SUCCESS");
    let notice = wire::parse_payment(&n.data, "1230000109", "wxd678efh567hg6787").expect("notice");
    assert_eq!(notice.order_no, "1217752501201407033233368018");
    assert_eq!(notice.transaction_no, "1217752501201407033233368018");
    assert_eq!(notice.method, PayMethod::Wechat);
    assert_eq!(notice.account_id, "1230000109");
    assert_eq!(
        (notice.amount_minor, notice.currency.as_str()),
        (100, "CNY")
    );
    assert_eq!(notice.paid_at_ms, 1_528_425_296_000);
    // Another merchant's or app's transaction is not ours.
    assert!(
        wire::parse_payment(&n.data, "1900000000", "wxd678efh567hg6787")
            .unwrap_err()
            .starts_with("mchid")
    );
    assert!(wire::parse_payment(&n.data, "1230000109", "wx-other")
        .unwrap_err()
        .starts_with("appid"));
}

#[test]
fn a_forged_notification_is_refused_naming_its_header_and_reason() {
    let body = notification(
        "EV-1",
        "TRANSACTION.SUCCESS",
        "transaction",
        &documented_transaction(),
    );
    let now_ms = NOW_S * 1000;
    let h = headers(body.as_bytes(), NOW_S, SERIAL);
    let refusal = |h: &SignedHeaders, body: &[u8], now_ms: i64| {
        let e = platform().verify(h, body, now_ms).unwrap_err();
        (e.header, e.reason)
    };
    let tampered = body.replace("EV-1", "EV-2");
    assert_eq!(
        refusal(&h, tampered.as_bytes(), now_ms),
        ("wechatpay-signature", "bad_signature")
    );
    let wrong_serial = headers(body.as_bytes(), NOW_S, "0000");
    assert_eq!(
        refusal(&wrong_serial, body.as_bytes(), now_ms),
        ("wechatpay-serial", "unknown_serial")
    );
    assert_eq!(
        refusal(&h, body.as_bytes(), now_ms + 301_000),
        ("wechatpay-timestamp", "stale_timestamp")
    );
    assert_eq!(
        refusal(&h, body.as_bytes(), now_ms - 301_000),
        ("wechatpay-timestamp", "stale_timestamp")
    );
    // A header missing or sent twice is named too.
    let sent = [
        ("Wechatpay-Timestamp", h.timestamp.as_bytes()),
        ("Wechatpay-Nonce", h.nonce.as_bytes()),
        ("Wechatpay-Signature", h.signature.as_bytes()),
    ];
    let e = SignedHeaders::collect(sent).unwrap_err();
    assert_eq!((e.header, e.reason), ("wechatpay-serial", "missing_header"));
    let twice = [
        ("wechatpay-serial", SERIAL.as_bytes()),
        ("wechatpay-serial", SERIAL.as_bytes()),
    ];
    let e = SignedHeaders::collect(twice).unwrap_err();
    assert_eq!(
        (e.header, e.reason),
        ("wechatpay-serial", "repeated_header")
    );
}

#[test]
fn a_resource_with_a_bad_tag_or_another_key_does_not_normalise() {
    let body = notification(
        "EV-1",
        "TRANSACTION.SUCCESS",
        "transaction",
        &documented_transaction(),
    );
    let mut v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let ct = v["resource"]["ciphertext"].as_str().expect("ct").to_owned();
    let mut bytes =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &ct).expect("b64");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    v["resource"]["ciphertext"] = json!(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        bytes
    ));
    let key = ApiV3Key::parse(APIV3_KEY).expect("key");
    let e = decode_notification(v.to_string().as_bytes(), &key).unwrap_err();
    assert!(e.contains("does not decrypt"), "{e}");
    let other = ApiV3Key::parse("ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ").expect("key");
    assert!(decode_notification(body.as_bytes(), &other).is_err());
    // associated_data is authenticated too.
    let mut v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["resource"]["associated_data"] = json!("refund");
    assert!(decode_notification(v.to_string().as_bytes(), &key).is_err());
    // A refund event must carry a refund resource.
    let mixed = notification(
        "EV-1",
        "REFUND.SUCCESS",
        "transaction",
        &documented_transaction(),
    );
    assert!(decode_notification(mixed.as_bytes(), &key)
        .unwrap_err()
        .contains("original_type"));
    assert!(ApiV3Key::parse("short").is_err());
    assert_eq!(format!("{key:?}"), "ApiV3Key(<redacted>)");
}

#[test]
fn only_a_successful_trade_state_is_a_payment() {
    let states = [
        ("SUCCESS", Some(TradeState::Success)),
        ("REFUND", Some(TradeState::Refund)),
        ("NOTPAY", Some(TradeState::NotPay)),
        ("CLOSED", Some(TradeState::Closed)),
        ("REVOKED", Some(TradeState::Revoked)),
        ("USERPAYING", Some(TradeState::UserPaying)),
        ("PAYERROR", Some(TradeState::PayError)),
        ("ACCEPT", None),
    ];
    for (text, state) in states {
        assert_eq!(TradeState::parse(text), state, "{text}");
        let mut t = documented_transaction();
        t["trade_state"] = json!(text);
        let parsed = wire::parse_payment(&t, "1230000109", "wxd678efh567hg6787");
        assert_eq!(parsed.is_ok(), text == "SUCCESS", "{text}: {parsed:?}");
    }
}

/// The documented refund resource (退款结果通知) for refund `no` in `status`.
fn refund_resource(no: &str, status: &str) -> serde_json::Value {
    json!({
        "mchid": "1900000100",
        "transaction_id": "1008450740201411110005820873",
        "out_trade_no": "20150806125346",
        "refund_id": "50200207182018070300011301001",
        "out_refund_no": no,
        "refund_status": status,
        "success_time": "2018-06-08T10:34:56+08:00",
        "user_received_account": "招商银行信用卡0403",
        "amount": {"total": 999, "refund": 999, "payer_total": 999, "payer_refund": 999}
    })
}

#[test]
fn a_refund_notification_maps_each_status() {
    let rows = [
        ("SUCCESS", "SUCCEEDED"),
        ("CLOSED", "CLOSED"),
        ("ABNORMAL", "PROCESSING"),
        ("PROCESSING", "PROCESSING"),
    ];
    for (status, answer) in rows {
        let (no, a) = wire::parse_refund_notice(
            &refund_resource("1217752501201407033233368018", status),
            "1900000100",
        )
        .expect(status);
        assert_eq!(no, "1217752501201407033233368018");
        let got = serde_json::to_value(&a).expect("json")["status"].clone();
        assert_eq!(got, answer, "{status}");
    }
    assert!(wire::parse_refund_notice(&refund_resource("r", "WHATEVER"), "1900000100").is_err());
    assert!(wire::parse_refund_notice(&refund_resource("r", "SUCCESS"), "1230000109").is_err());
}

fn request() -> RefundRequest {
    RefundRequest {
        refund_no: "late-txn-1".into(),
        order_no: "o-1".into(),
        transaction_no: "4200000000001".into(),
        method: PayMethod::Wechat,
        account_id: "1230000109".into(),
        amount_minor: 600,
        currency: "CNY".into(),
        paid_minor: Some(600),
    }
}

#[test]
fn the_refund_create_table_fails_only_where_no_refund_can_exist() {
    let r = request();
    let refund = |status: &str, refund: i64| {
        json!({"refund_id": "50300", "out_refund_no": "late-txn-1", "transaction_id": "4200000000001",
               "status": status, "amount": {"total": 600, "refund": refund, "currency": "CNY"}})
        .to_string()
    };
    let kind = |a: &RefundAnswer| {
        serde_json::to_value(a).expect("json")["status"]
            .as_str()
            .map(str::to_owned)
    };
    let err = |code: &str| json!({"code": code, "message": "m"}).to_string();
    let rows: Vec<(u16, String, &str)> = vec![
        (200, refund("SUCCESS", 600), "SUCCEEDED"),
        (200, refund("PROCESSING", 600), "PROCESSING"),
        (200, refund("ABNORMAL", 600), "PROCESSING"),
        (200, refund("CLOSED", 600), "CLOSED"),
        (200, refund("SUCCESS", 500), "UNKNOWN"),
        (200, refund("NEW", 600), "UNKNOWN"),
        (200, "<html>".into(), "UNKNOWN"),
        (400, err("PARAM_ERROR"), "FAILED"),
        (404, err("RESOURCE_NOT_EXISTS"), "FAILED"),
        (400, err("INVALID_REQUEST"), "UNKNOWN"),
        (403, err("NOT_ENOUGH"), "UNKNOWN"),
        (403, err("NO_AUTH"), "UNKNOWN"),
        (401, err("SIGN_ERROR"), "UNKNOWN"),
        (429, err("FREQUENCY_LIMITED"), "UNKNOWN"),
        (500, err("SYSTEM_ERROR"), "UNKNOWN"),
        (404, "not found".into(), "UNKNOWN"),
    ];
    for (status, body, want) in rows {
        let got = map_refund(&r, status, body.as_bytes());
        assert_eq!(
            kind(&got).as_deref(),
            Some(want),
            "{status} {body}: {got:?}"
        );
    }
    let q = map_query("late-txn-1", 404, err("RESOURCE_NOT_EXISTS").as_bytes());
    assert!(
        matches!(&q, RefundAnswer::Unknown { error } if error.starts_with(crate::services::gateway_http::NOT_FOUND_PREFIX)),
        "{q:?}"
    );
    assert!(matches!(
        map_query("late-txn-1", 400, err("PARAM_ERROR").as_bytes()),
        RefundAnswer::Unknown { .. }
    ));
    assert!(matches!(
        map_query("other", 200, refund("SUCCESS", 600).as_bytes()),
        RefundAnswer::Unknown { .. }
    ));
}

#[test]
fn the_refund_body_carries_the_original_total() {
    let mut r = request();
    r.amount_minor = 200;
    let body: serde_json::Value =
        serde_json::from_str(&refund_body(&r, Some("https://example.com/n"))).expect("json");
    assert_eq!(
        body,
        json!({"transaction_id": "4200000000001", "out_refund_no": "late-txn-1",
               "reason": REFUND_REASON, "notify_url": "https://example.com/n",
               "amount": {"refund": 200, "total": 600, "currency": "CNY"}})
    );
}

#[test]
fn a_missing_or_malformed_secret_is_refused_naming_its_variable() {
    let dir = tempfile::tempdir().expect("dir");
    let pem = key().to_pkcs8_pem(LineEnding::LF).expect("pem").to_string();
    let public = RsaPublicKey::from(key())
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    let platform_path = dir.path().join("platform.pem");
    std::fs::write(&platform_path, public).expect("write");
    let vars = |skip: &str, bad: Option<(&str, &str)>| {
        let mut m = std::collections::HashMap::from([
            (config::MCHID_VAR.to_owned(), "1230000109".to_owned()),
            (
                config::APPID_VAR.to_owned(),
                "wxd678efh567hg6787".to_owned(),
            ),
            (
                config::MERCHANT_SERIAL_VAR.to_owned(),
                "1DDE55AD98ED71D6EDD4A4A16996DE7B47773A8C".to_owned(),
            ),
            (config::MERCHANT_KEY_VAR.to_owned(), pem.clone()),
            (config::APIV3_KEY_VAR.to_owned(), APIV3_KEY.to_owned()),
            (
                config::PLATFORM_KEYS_VAR.to_owned(),
                format!("{SERIAL}={}", platform_path.display()),
            ),
        ]);
        m.remove(skip);
        if let Some((k, v)) = bad {
            m.insert(k.to_owned(), v.to_owned());
        }
        move |k: &str| m.get(k).cloned()
    };
    let config = WechatPayConfig::from_lookup(vars("", None)).expect("config");
    let shown = format!("{config:?}");
    assert!(
        !shown.contains(APIV3_KEY) && !shown.contains("PRIVATE"),
        "{shown}"
    );
    for var in [
        config::MCHID_VAR,
        config::MERCHANT_KEY_VAR,
        config::APIV3_KEY_VAR,
        config::PLATFORM_KEYS_VAR,
    ] {
        let e = WechatPayConfig::from_lookup(vars(var, None)).unwrap_err();
        assert_eq!(e.variable, var, "{e}");
    }
    let e = WechatPayConfig::from_lookup(vars("", Some((config::APIV3_KEY_VAR, "too-short"))))
        .unwrap_err();
    assert_eq!(e.variable, config::APIV3_KEY_VAR);
    assert!(!e.to_string().contains("too-short"), "{e}");
    let e = WechatPayConfig::from_lookup(vars(
        "",
        Some((
            config::MERCHANT_KEY_VAR,
            "-----BEGIN PRIVATE KEY-----\nnope",
        )),
    ))
    .unwrap_err();
    assert_eq!(e.variable, config::MERCHANT_KEY_VAR);
    assert!(!e.to_string().contains("nope"), "{e}");
    let e = WechatPayConfig::from_lookup(vars(
        "",
        Some((config::PLATFORM_KEYS_VAR, "S1=/no/such.pem")),
    ))
    .unwrap_err();
    assert_eq!(e.variable, config::PLATFORM_KEYS_VAR);
}
