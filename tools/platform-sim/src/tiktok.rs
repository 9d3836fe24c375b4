//! TikTok Shop's *Search Creator Affiliate Orders* as TikTok documents it:
//! `POST /tiktok/affiliate_creator/202410/orders/search?app_key=&timestamp=&page_size=
//! &page_token=&sign=` with header `x-tts-access-token` (a creator token; its market
//! is the country served) and body `{"create_time_ge": s, "create_time_lt": s}` — a
//! creation-time window in Unix seconds. Answers `{"code": 0, "message": "Success",
//! "request_id", "data": {"orders": [...], "next_page_token", "total_count"}}`; a bad
//! `sign` is `{"code": 106001, …}`, a bad token, app key or timestamp `{"code":
//! 36009004, …}`, both with HTTP 401.
//!
//! Each stored order is rendered as one TikTok affiliate order with one SKU: status
//! `PENDING`→`ORDERED`, `COMPLETED`→`SETTLED`, `REFUND_PROCESSING`→`FROZEN`,
//! `PARTIAL_REFUND`→`SETTLED` with one of two units returned, `REFUNDED` and
//! `CANCELLED`→`REFUNDED` (anything else is served as is); `create_time` and
//! `delivery_time` (the order's update time, the latest time TikTok shows) in seconds;
//! amounts as decimal strings in major units (`estimated_*` always, `actual_*` once
//! settled); `sub_id.value` as the SKU `tag`. Raw (malformed) orders are served as given.

use crate::auth::{now_s, same, tiktok_sign, TIKTOK_SKEW_AHEAD_S, TIKTOK_SKEW_BEHIND_S};
use crate::{delay, major, Fault, OrdersQuery, Sim, SimOrder};
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The documented path (under `/tiktok` here).
pub const ORDERS_PATH: &str = "/affiliate_creator/202410/orders/search";

fn envelope(http: u16, code: i64, message: &str) -> Response {
    let status = StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"code": code, "message": message, "request_id": "sim-refused"})),
    )
        .into_response()
}

/// The TikTok rendering of one stored order (see the module docs).
pub fn render(o: &SimOrder) -> Value {
    let status = match o.order_status.as_str() {
        "PENDING" => "ORDERED",
        "COMPLETED" | "PARTIAL_REFUND" => "SETTLED",
        "REFUND_PROCESSING" => "FROZEN",
        "REFUNDED" | "CANCELLED" => "REFUNDED",
        other => other,
    };
    let money = |minor: i64| json!({"amount": major(minor, &o.currency), "currency": o.currency});
    let partial = o.order_status == "PARTIAL_REFUND";
    let mut sku = json!({
        "id": format!("{}-sku1", o.order_id),
        "product_id": "1729793769377859852",
        "product_name": "simulated item",
        "content_type": "VIDEO",
        "quantity": if partial { 2 } else { 1 },
        "returned_quantity": i64::from(partial),
        "refunded_quantity": 0,
        "commission_rate": 1000,
        "price": money(o.gmv_minor),
        "estimated_commission_base": money(o.gmv_minor),
        "estimated_commission": money(o.commission_minor),
    });
    if status == "SETTLED" {
        sku["actual_commission_base"] = money(o.gmv_minor);
        sku["actual_commission"] = money(o.commission_minor);
    }
    if let Some(sub) = &o.sub_id {
        sku["tag"] = json!(sub.value);
    }
    json!({
        "id": o.order_id,
        "create_time": o.create_time_ms.div_euclid(1_000),
        "delivery_time": o.update_time_ms.div_euclid(1_000),
        "status": status,
        "skus": [sku],
    })
}

fn check(
    sim: &Sim,
    query: &[(String, String)],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<String, Box<Response>> {
    let c = sim.credentials();
    let get = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let refuse = |code: i64, message: &str| {
        sim.refuse(format!("tiktok: {message}"));
        Err(Box::new(envelope(401, code, message)))
    };
    let Some(sign) = get("sign") else {
        return refuse(
            36_009_004,
            "Missing credentials. The request does not include a required signature in the query.",
        );
    };
    if get("app_key") != Some(c.tiktok_app_key.as_str()) {
        return refuse(
            36_009_004,
            "Invalid credentials. Invalid `app_key` query parameter.",
        );
    }
    let now = now_s();
    match get("timestamp").and_then(|t| t.parse::<i64>().ok()) {
        Some(t) if t >= now - TIKTOK_SKEW_BEHIND_S && t <= now + TIKTOK_SKEW_AHEAD_S => {}
        _ => return refuse(36_009_004, "Invalid timestamp."),
    }
    let expected = tiktok_sign(&c.tiktok_app_secret, ORDERS_PATH, query, body);
    if !same(sign, &expected) {
        return refuse(
            106_001,
            "Invalid credentials. The `sign` query parameter is invalid.",
        );
    }
    let token = headers
        .get("x-tts-access-token")
        .and_then(|v| v.to_str().ok());
    match token.and_then(|t| c.tiktok_tokens.get(t)) {
        Some(country) => Ok(country.clone()),
        None => refuse(
            36_009_004,
            "Invalid credentials. The `x-tts-access-token` header is invalid.",
        ),
    }
}

/// `POST /tiktok/affiliate_creator/202410/orders/search`.
pub async fn orders_search(
    State(sim): State<Sim>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query: Vec<(String, String)> = raw.as_deref().map(url_pairs).unwrap_or_default();
    let country = match check(&sim, &query, &headers, &body) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let window: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let seconds = |k: &str| window.get(k).and_then(Value::as_i64);
    let get = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let q = OrdersQuery {
        country: Some(country),
        updated_from: Some(seconds("create_time_ge").unwrap_or(0) * 1_000),
        updated_to: Some(seconds("create_time_lt").map_or(now_s() * 1_000, |s| s * 1_000)),
        page_token: get("page_token"),
        page_size: get("page_size").and_then(|s| s.parse().ok()),
        by_create_time: true,
    };
    let (fault, outcome) = sim.orders("tiktok", &q);
    delay(&fault).await;
    match (fault, outcome) {
        (Some(Fault::Garbage), Ok(_)) => {
            (StatusCode::OK, "<html>upstream gateway says hello</html>").into_response()
        }
        (_, Ok(page)) => {
            let orders: Vec<Value> = page
                .orders
                .iter()
                .map(|b| {
                    serde_json::from_value::<SimOrder>(b.clone())
                        .map_or_else(|_| b.clone(), |o| render(&o))
                })
                .collect();
            Json(json!({
                "code": 0,
                "message": "Success",
                "request_id": page.request_id,
                "data": {
                    "total_count": orders.len(),
                    "orders": orders,
                    "next_page_token": page.next_page_token.unwrap_or_default(),
                },
            }))
            .into_response()
        }
        (Some(Fault::Status { status }), Err((_, message))) => crate::error(status, message),
        (_, Err((status, message))) => envelope(status, 40_006, &message),
    }
}

/// `a=1&b=x%2By` → pairs, percent-decoded (`+` is a space).
pub fn url_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
