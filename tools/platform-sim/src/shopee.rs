//! Shopee's Affiliate Open API `conversionReport` as Shopee documents it: `POST
//! /shopee/graphql` with `Authorization: SHA256 Credential=<AppId>, Timestamp=<s>,
//! Signature=<SHA-256(AppId + Timestamp + body + Secret)>` (the AppId's account is
//! the market served) and `{"query": "{conversionReport(purchaseTimeStart: S,
//! purchaseTimeEnd: E, limit: N, scrollId: \"…\") {…}}"}` — a purchase-time window in
//! Unix seconds, both ends inclusive. Answers HTTP 200 `{"data": {"conversionReport":
//! {"nodes": [...], "pageInfo": {"limit", "hasNextPage", "scrollId"}}}}`, or `{"errors":
//! [{"message", "path", "extensions": {"code", "message"}}]}` (10020 for a bad signature,
//! credential or timestamp; 11001 for bad parameters). This simulator's `scrollId`s do
//! not expire (Shopee's last 30 seconds).
//!
//! Each stored order is one conversion node with one order and one item: status
//! `PENDING` and `REFUND_PROCESSING`→`PENDING`, `COMPLETED` and
//! `PARTIAL_REFUND`→`COMPLETED`, `REFUNDED` and `CANCELLED`→`CANCELLED` (anything else
//! as is); `purchaseTime` = creation, the item's `completeTime` = the update time, in
//! seconds; `itemPrice` (qty 1), `itemTotalCommission` and `totalCommission` as decimal
//! strings in major units (a sparse replay's 0 is `"0.00"`); `sub_id.value` as
//! `utmContent`. Raw (malformed) orders are served as the node's only order.

use crate::auth::{now_s, parse_shopee_authorization, same, shopee_signature, SHOPEE_SKEW_S};
use crate::{delay, major, Fault, OrdersQuery, Sim, SimOrder};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The documented path (under `/shopee` here).
pub const GRAPHQL_PATH: &str = "/graphql";

fn graphql_error(code: i64, message: &str) -> Response {
    (
        StatusCode::OK,
        Json(
            json!({"errors": [{"message": message, "path": "conversionReport",
            "extensions": {"code": code, "message": message}}]}),
        ),
    )
        .into_response()
}

/// The Shopee rendering of one stored order (see the module docs).
pub fn render(o: &SimOrder, seq: usize) -> Value {
    let status = match o.order_status.as_str() {
        "PENDING" | "REFUND_PROCESSING" => "PENDING",
        "COMPLETED" | "PARTIAL_REFUND" => "COMPLETED",
        "REFUNDED" | "CANCELLED" => "CANCELLED",
        other => other,
    };
    let created = o.create_time_ms.div_euclid(1_000);
    json!({
        "purchaseTime": created,
        "clickTime": created - 60,
        "conversionId": seq,
        "totalCommission": major(o.commission_minor, &o.currency),
        "utmContent": o.sub_id.as_ref().map(|s| s.value.clone()).unwrap_or_default(),
        "orders": [{
            "orderId": o.order_id,
            "orderStatus": status,
            "items": [{
                "itemId": 6309028319u64,
                "itemPrice": major(o.gmv_minor, &o.currency),
                "qty": 1,
                "itemTotalCommission": major(o.commission_minor, &o.currency),
                "completeTime": o.update_time_ms.div_euclid(1_000),
            }],
        }],
    })
}

/// The value of `name: …` in a GraphQL argument list (a number or a JSON string).
pub fn argument(query: &str, name: &str) -> Option<String> {
    let at = query.find(&format!("{name}:"))? + name.len() + 1;
    let rest = query[at..].trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        let end = quoted.find('"')?;
        return Some(quoted[..end].to_owned());
    }
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    Some(rest[..end].to_owned()).filter(|s| !s.is_empty())
}

fn check(sim: &Sim, headers: &HeaderMap, body: &[u8]) -> Result<String, Box<Response>> {
    let refuse = |message: &str| {
        sim.refuse(format!("shopee: {message}"));
        Err(Box::new(graphql_error(10_020, message)))
    };
    let header = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some((app_id, timestamp, signature)) = parse_shopee_authorization(header) else {
        return refuse("Invalid Authorization Header");
    };
    let credentials = sim.credentials();
    let Some(account) = credentials.shopee_accounts.get(&app_id) else {
        return refuse("Invalid Credential");
    };
    match timestamp.parse::<i64>() {
        Ok(t) if (t - now_s()).abs() <= SHOPEE_SKEW_S => {}
        Ok(_) => return refuse("Request Expired"),
        Err(_) => return refuse("Invalid Timestamp"),
    }
    if !same(
        &signature,
        &shopee_signature(&app_id, &timestamp, body, &account.secret),
    ) {
        return refuse("Invalid Signature");
    }
    Ok(account.country.clone())
}

/// `POST /shopee/graphql`.
pub async fn graphql(State(sim): State<Sim>, headers: HeaderMap, body: Bytes) -> Response {
    let country = match check(&sim, &headers, &body) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let query = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("query").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    if !query.contains("conversionReport") {
        return graphql_error(10_010, "Parse Error: only conversionReport is simulated");
    }
    let int = |name: &str| argument(&query, name).and_then(|s| s.parse::<i64>().ok());
    let (Some(start), Some(end)) = (int("purchaseTimeStart"), int("purchaseTimeEnd")) else {
        return graphql_error(
            11_001,
            "Params Error : purchaseTimeStart and purchaseTimeEnd are required",
        );
    };
    let q = OrdersQuery {
        country: Some(country),
        updated_from: Some(start * 1_000),
        updated_to: Some((end + 1) * 1_000),
        page_token: argument(&query, "scrollId"),
        page_size: int("limit").and_then(|l| usize::try_from(l).ok()),
        by_create_time: true,
    };
    let (fault, outcome) = sim.orders("shopee", &q);
    delay(&fault).await;
    match (fault, outcome) {
        (Some(Fault::Garbage), Ok(_)) => {
            (StatusCode::OK, "<html>upstream gateway says hello</html>").into_response()
        }
        (_, Ok(page)) => {
            let nodes: Vec<Value> = page
                .orders
                .iter()
                .enumerate()
                .map(
                    |(i, b)| match serde_json::from_value::<SimOrder>(b.clone()) {
                        Ok(o) => render(&o, i + 1),
                        Err(_) => json!({"purchaseTime": start, "orders": [b]}),
                    },
                )
                .collect();
            Json(json!({"data": {"conversionReport": {
                "nodes": nodes,
                "pageInfo": {
                    "limit": q.page_size,
                    "hasNextPage": page.next_page_token.is_some(),
                    "scrollId": page.next_page_token.unwrap_or_default(),
                },
            }}}))
            .into_response()
        }
        (Some(Fault::Status { status }), Err((_, message))) => crate::error(status, message),
        (_, Err((_, message))) => graphql_error(11_001, &format!("Params Error : {message}")),
    }
}
