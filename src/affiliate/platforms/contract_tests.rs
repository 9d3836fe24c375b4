//! Contract tests: the platforms' documented examples in, our normalised model out;
//! our signed requests checked against the documented signing strings.

use super::{shopee, tiktok};
use crate::affiliate::platform::{FetchError, PageRequest, Window};
use factledger_aggregates::affiliate::CountryCode;
use factledger_aggregates::affiliate_order::{Attribution, OrderStatus};
use serde_json::{json, Value};

fn id() -> CountryCode {
    CountryCode::parse("ID").unwrap()
}

/// TikTok Shop's published response sample of *Search Creator Affiliate Orders*
/// (Partner Center API reference, `/affiliate_creator/202410/orders/search`), trimmed
/// to the fields we read; its amounts are the localized display form.
fn tiktok_sample() -> Value {
    json!({"code":0,"data":{"orders":[{"id":"789078671231123124","create_time":1685548800,
    "delivery_time":1685548800,"status":"SETTLED","skus":[{"id":"1729793769377925388",
    "product_id":"1729793769377859852","price":{"amount":"Rp9.900","currency":"IDR"},
    "quantity":2,"estimated_commission_base":{"amount":"Rp9.900","currency":"IDR"},
    "estimated_commission":{"amount":"Rp1.980","currency":"IDR"},
    "actual_commission":{"amount":"Rp1.900","currency":"IDR"},
    "actual_commission_base":{"amount":"Rp9.900","currency":"IDR"},
    "returned_quantity":1,"refunded_quantity":0,"tag":"test-01"}]}],
    "next_page_token":"b2Zmc2V0PTEw","total_count":10},"message":"Success",
    "request_id":"202203070749000101890810281E8C70B7"})
}

#[test]
fn tiktoks_documented_sample_localized_amounts_are_refused_naming_the_field() {
    let body = tiktok_sample().to_string();
    let page = tiktok::read_page(id(), 200, body.as_bytes()).unwrap();
    assert_eq!(page.next_page_token.as_deref(), Some("b2Zmc2V0PTEw"));
    assert_eq!(
        page.request_id.as_deref(),
        Some("202203070749000101890810281E8C70B7")
    );
    assert!(page.orders.is_empty());
    let m = &page.malformed[0];
    assert_eq!(m.platform_order_id.as_deref(), Some("789078671231123124"));
    assert!(
        m.error
            .to_string()
            .starts_with("actual_commission_base: \"Rp9.900\""),
        "{}",
        m.error
    );
}

#[test]
fn tiktoks_documented_sample_with_plain_decimals_becomes_a_normalised_order() {
    // The same sample with amounts in the plain form of the seller and partner
    // order searches' samples ("1000").
    let text = tiktok_sample()
        .to_string()
        .replace("Rp9.900", "9900")
        .replace("Rp1.980", "1980")
        .replace("Rp1.900", "1900");
    let page = tiktok::read_page(id(), 200, text.as_bytes()).unwrap();
    let o = &page.orders[0];
    assert_eq!(o.platform_order_id.as_str(), "789078671231123124");
    // SETTLED with one of two units returned.
    assert_eq!(o.status, OrderStatus::PartiallyRefunded);
    assert_eq!(o.currency.as_str(), "IDR");
    assert_eq!(o.gmv_minor.get(), 9_900, "9900 IDR in whole rupiah");
    assert_eq!(
        o.platform_commission_minor.get(),
        1_900,
        "actual before estimated"
    );
    assert_eq!(o.ordered_at.timestamp(), 1_685_548_800);
    assert_eq!(o.platform_updated_at.timestamp(), 1_685_548_800);
    assert!(matches!(&o.attribution, Some(Attribution::TrackingId(t)) if t.as_str() == "test-01"));
}

#[test]
fn every_documented_tiktok_status_is_mapped_and_others_are_refused() {
    let table = [
        ("UNSPECIFIED", OrderStatus::Pending),
        ("ORDERED", OrderStatus::Pending),
        ("SETTLED", OrderStatus::Completed),
        ("FROZEN", OrderStatus::Refunding),
        ("REFUNDED", OrderStatus::Refunded),
        ("DEDUCTED", OrderStatus::Refunded),
    ];
    for (raw, ours) in table {
        assert_eq!(tiktok::status(raw), Some(ours), "{raw}");
    }
    let mut o = tiktok_sample()["data"]["orders"][0].clone();
    o["status"] = json!("SHIPPED");
    let e = tiktok::normalise(id(), &o).unwrap_err().to_string();
    assert!(e.contains("unknown platform status \"SHIPPED\""), "{e}");
}

#[test]
fn tiktoks_error_envelope_is_retryable_only_for_the_transient_codes() {
    for (code, retryable) in [
        (106_001, false),
        (105_002, false),
        (36_009_004, false),
        (36_009_002, true),
        (36_009_003, true),
    ] {
        let body = json!({"code": code, "message": "m", "request_id": "r1"}).to_string();
        let Err(Ok(e)) = tiktok::read_page(id(), 401, body.as_bytes()) else {
            panic!("{code}: an envelope error");
        };
        assert!(
            matches!(&e, FetchError::Platform { code: c, request_id: Some(r), .. } if *c == code.to_string() && r == "r1")
        );
        assert_eq!(e.is_retryable(), retryable, "{code}");
    }
}

/// The documentation's worked example (*Create a hash to sign your test API call*:
/// app_key 123456, timestamp 1234567890, secret abc000def111, path
/// /authorization/202309/shops). It publishes no digest, so the expected ones were
/// computed independently with Python's `hmac` over the documented string
/// `secret + path + "app_key123456timestamp1234567890" + body + secret`.
#[test]
fn tiktoks_signature_follows_the_documented_string() {
    let q = [
        ("timestamp", "1234567890".to_owned()),
        ("app_key", "123456".to_owned()),
        ("access_token", "ignored".to_owned()),
    ];
    assert_eq!(
        tiktok::sign("abc000def111", "/authorization/202309/shops", &q, ""),
        "c8767e4fd7a1b48a0ce3fd23197f058159ce11b53f1ae1ad6d1ec931a1da5540"
    );
    // Our order search request: the documented request sample's body.
    let creds = tiktok::TikTokCredentials {
        app_key: "123456".into(),
        app_secret: super::PlatformSecret::new("abc000def111"),
        access_tokens: Default::default(),
    };
    let adapter =
        tiktok::TikTokAdapter::new("https://open-api.tiktokglobalshop.com", creds, 1_000).unwrap();
    let request = PageRequest {
        country: id(),
        window: Window {
            from: chrono::DateTime::from_timestamp(1_719_807_456, 0).unwrap(),
            to: chrono::DateTime::from_timestamp(1_728_443_155, 0).unwrap(),
        },
        page_token: None,
        page_size: 20,
    };
    let (query, body) = adapter.signed_request(&request, 1_234_567_890);
    assert_eq!(
        body,
        r#"{"create_time_ge":1719807456,"create_time_lt":1728443155}"#
    );
    let sign = query
        .iter()
        .find(|(k, _)| *k == "sign")
        .map(|(_, v)| v.as_str());
    assert_eq!(
        sign,
        Some("e4910b8ddf02e5a93e72bf8926e5d8fe8d1b9ed6d752ccb027aa9fb2439f4892")
    );
}

/// Shopee's published signing example (Affiliate Open API, *Authentication*): AppId
/// 123456, Secret demo, Timestamp 1577836800 and its brandOffer payload give
/// Signature dc88d72f…5412.
#[test]
fn shopees_authorization_matches_the_documented_example() {
    let payload = r#"{"query":"{\nbrandOffer{\n    nodes{\n        commissionRate\n        offerName\n    }\n}\n}"}"#;
    assert_eq!(
        shopee::authorization("123456", "demo", 1_577_836_800, payload),
        "SHA256 Credential=123456, Timestamp=1577836800, \
         Signature=dc88d72feea70c80c52c3399751a7d34966763f51a7f056aa070a5e9df645412"
    );
    // The half-open millisecond window becomes Shopee's inclusive seconds.
    let q = shopee::query((1_600_621_200_000, 1_601_226_000_000), 500, Some("s-1"));
    assert!(q.contains("purchaseTimeStart: 1600621200, purchaseTimeEnd: 1601225999, limit: 500, scrollId: \"s-1\""), "{q}");
}

/// A conversion node in the field names of Shopee's conversionReport schema (Shopee
/// publishes no response sample; the names are the schema's). Amounts are whole
/// rupiah, as the ledger counts IDR (`money::minor_digits`).
fn shopee_answer() -> Value {
    json!({"data":{"conversionReport":{"nodes":[{"purchaseTime":1600621300,"clickTime":1600621200,
      "conversionId":1,"totalCommission":"6253","utmContent":"u-42",
      "orders":[{"orderId":"220602QAVKQKCM","orderStatus":"COMPLETED","items":[
        {"itemId":1,"itemPrice":"125050","qty":2,"itemTotalCommission":"5003","completeTime":1601000000},
        {"itemId":2,"itemPrice":"10000","qty":1,"itemTotalCommission":"1250.0","completeTime":0}]},
        {"orderId":"220602QAVKQKCN","orderStatus":"SHIPPED","items":[]}]}],
      "pageInfo":{"limit":500,"hasNextPage":true,"scrollId":"abc"}}}})
}

#[test]
fn a_shopee_conversion_becomes_one_normalised_order_per_order() {
    let page = shopee::read_page(id(), shopee_answer().to_string().as_bytes()).unwrap();
    assert_eq!(page.next_page_token.as_deref(), Some("abc"));
    let o = &page.orders[0];
    assert_eq!(o.platform_order_id.as_str(), "220602QAVKQKCM");
    assert_eq!(o.status, OrderStatus::Completed);
    assert_eq!(o.currency.as_str(), "IDR");
    assert_eq!(o.gmv_minor.get(), 2 * 125_050 + 10_000);
    assert_eq!(o.platform_commission_minor.get(), 5_003 + 1_250);
    assert_eq!(o.ordered_at.timestamp(), 1_600_621_300);
    assert_eq!(o.platform_updated_at.timestamp(), 1_601_000_000);
    assert!(matches!(&o.attribution, Some(Attribution::TrackingId(t)) if t.as_str() == "u-42"));
    assert_eq!(page.malformed.len(), 1);
    assert_eq!(
        page.malformed[0].platform_order_id.as_deref(),
        Some("220602QAVKQKCN")
    );
    for (raw, ours) in [
        ("UNPAID", OrderStatus::Pending),
        ("PENDING", OrderStatus::Pending),
        ("COMPLETED", OrderStatus::Completed),
        ("CANCELLED", OrderStatus::Cancelled),
    ] {
        assert_eq!(shopee::status(raw), Some(ours));
    }
}

#[test]
fn shopees_graphql_errors_map_to_retryable_or_not() {
    for (code, retryable) in [
        (10_020, false),
        (11_001, false),
        (10_035, false),
        (10_000, true),
        (10_030, true),
    ] {
        let body = json!({"errors":[{"message":"m","path":"conversionReport","extensions":{"code":code,"message":"Invalid Signature"}}]});
        let Err(Ok(e)) = shopee::read_page(id(), body.to_string().as_bytes()) else {
            panic!("{code}: an error");
        };
        assert_eq!(e.is_retryable(), retryable, "{code}");
        assert!(
            e.to_string()
                .contains(&format!("error {code}: Invalid Signature")),
            "{e}"
        );
    }
}
