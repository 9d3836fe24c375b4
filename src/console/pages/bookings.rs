//! Paid services: `/console/bookings` (look up a booking, a service order, a refund or
//! a user) and the pages of each, rendered from the services reads:
//! `GET /v1/bookings/{booking_no}` (status and hold), `/v1/service-orders/{order_no}`
//! (amount, recharge, payment transactions), `/v1/refunds/{refund_no}`,
//! `/v1/candy-accounts/{user_id}` and `/v1/subscriptions`. Every page links to the
//! stream behind it and to the event that last changed its row (`last_position`).
//!
//! No actions: the bookings API's commands (`:join`, `:start`, `:finish`, `:moderate`)
//! are the video service's, not an operator's review.

use super::super::api::{enc, Problem};
use super::super::layout::{self, money};
use super::super::session::Session;
use super::super::Console;
use super::fields::text as s;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;

const ACTIVE: &str = "/console/bookings";
/// Candy is counted in 1/100-candy units.
const CANDY: &str = "1/100 candy";

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/bookings", get(index))
        .route("/console/bookings/{booking_no}", get(booking))
        .route("/console/bookings/orders/{order_no}", get(order))
        .route("/console/bookings/refunds/{refund_no}", get(refund))
        .route("/console/bookings/users/{user_id}", get(user))
}

fn booking_href(no: &str) -> String {
    format!("/console/bookings/{}", enc(no))
}
fn order_href(no: &str) -> String {
    format!("/console/bookings/orders/{}", enc(no))
}
fn refund_href(no: &str) -> String {
    format!("/console/bookings/refunds/{}", enc(no))
}
fn user_href(id: &str) -> String {
    format!("/console/bookings/users/{}", enc(id))
}

/// A business number as the services API takes it: 1–64 of `A-Z a-z 0-9 _ -`.
fn check_no(field: &str, raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    if !raw.is_empty()
        && raw.len() <= 64
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(raw.to_owned())
    } else {
        Err(format!(
            "{field}: `{raw}` is not a number of 1 to 64 letters, digits, `_` or `-`"
        ))
    }
}

fn check_user(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    match raw.parse::<i64>() {
        Ok(v) if v > 0 && raw.bytes().all(|b| b.is_ascii_digit()) => Ok(raw.to_owned()),
        _ => Err(format!("user_id: `{raw}` is not a positive whole number")),
    }
}

fn invalid(field: &str, detail: String) -> Problem {
    Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "INVALID_FIELD".into(),
        field: Some(field.into()),
        detail,
    }
}

/// A value as a table cell (a dash for null).
fn cell(v: &Value) -> Markup {
    html! {
        @match v {
            Value::Null => span.muted { "—" },
            Value::String(s) => (s),
            Value::Number(n) => (n.to_string()),
            Value::Bool(b) => (b.to_string()),
            other => (layout::json_block(other)),
        }
    }
}

/// Every column of a row (nested objects and arrays left to their own sections).
fn fields(id: &str, row: &Value) -> Markup {
    html! {
        table id=(id) {
            tbody {
                @if let Some(o) = row.as_object() {
                    @for (k, v) in o {
                        @if !v.is_object() && !v.is_array() {
                            tr data-field=(k) { th { (k) } td data-value=(v.to_string()) { (cell(v)) } }
                        }
                    }
                }
            }
        }
    }
}

fn card(label: &str, id: &str, value: Markup) -> Markup {
    html! { div.card { div.label { (label) } div.value id=(id) { (value) } } }
}

/// The row's last change: the event at `last_position`.
fn last_change(row: &Value) -> Markup {
    html! {
        @if let Some(p) = row["last_position"].as_i64() {
            a #last-change href=(layout::event_href(p)) data-position=(p) { "the event that last changed it (position " (p) ")" }
        }
    }
}

/// `/console/bookings?booking_no=|order_no=|refund_no=|user_id=`: the form; one field
/// given goes to its page.
async fn index(session: Session, Query(q): Query<HashMap<String, String>>) -> Response {
    let get = |k: &str| q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut problem = None;
    let target = if let Some(v) = get("booking_no") {
        check_no("booking_no", v)
            .map(|n| booking_href(&n))
            .map_err(|e| ("booking_no", e))
    } else if let Some(v) = get("order_no") {
        check_no("order_no", v)
            .map(|n| order_href(&n))
            .map_err(|e| ("order_no", e))
    } else if let Some(v) = get("refund_no") {
        check_no("refund_no", v)
            .map(|n| refund_href(&n))
            .map_err(|e| ("refund_no", e))
    } else if let Some(v) = get("user_id") {
        check_user(v)
            .map(|n| user_href(&n))
            .map_err(|e| ("user_id", e))
    } else {
        Err(("", String::new()))
    };
    match target {
        Ok(to) => return Redirect::to(&to).into_response(),
        Err(("", _)) => {}
        Err((field, detail)) => problem = Some(invalid(field, detail)),
    }
    let value = |k: &str| q.get(k).map(String::as_str).unwrap_or_default().to_owned();
    let body = html! {
        p.muted { "Look up one of: a booking (video call), a service order (recharge, subscription or a booking's candy order), a refund, or a user's candy account and subscriptions." }
        @if let Some(p) = &problem { (layout::problem_box(p)) }
        form.inline #lookup-booking method="get" action="/console/bookings" {
            label { "booking_no" input #booking-no name="booking_no" value=(value("booking_no")); }
            button #open-booking type="submit" { "Open booking" }
        }
        form.inline #lookup-order method="get" action="/console/bookings" {
            label { "order_no" input #order-no name="order_no" value=(value("order_no")); }
            button #open-order type="submit" { "Open service order" }
        }
        form.inline #lookup-refund method="get" action="/console/bookings" {
            label { "refund_no" input #refund-no name="refund_no" value=(value("refund_no")); }
            button #open-refund type="submit" { "Open refund" }
        }
        form.inline #lookup-user method="get" action="/console/bookings" {
            label { "user_id" input #user-id name="user_id" inputmode="numeric" value=(value("user_id")); }
            button #open-user type="submit" { "Candy account and subscriptions" }
        }
    };
    let page = layout::page(&session, "Bookings", ACTIVE, body);
    if problem.is_some() {
        (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
    } else {
        layout::ok(page)
    }
}

fn bad_path(session: &Session, title: &str, field: &str, detail: String) -> Response {
    layout::problem_page(session, title, ACTIVE, &invalid(field, detail))
}

/// `/console/bookings/{booking_no}`: status, hold, its order and refund.
async fn booking(
    State(console): State<Console>,
    session: Session,
    Path(no): Path<String>,
) -> Response {
    let title = format!("Booking {no}");
    let no = match check_no("booking_no", &no) {
        Ok(n) => n,
        Err(e) => return bad_path(&session, &title, "booking_no", e),
    };
    let api = session.api(&console);
    let b = match api.read(&format!("/v1/bookings/{}", enc(&no))).await {
        Ok(b) => b,
        Err(p) => return layout::problem_page(&session, &title, ACTIVE, &p),
    };
    let order_no = s(&b, "order_no").to_owned();
    let order = if order_no.is_empty() {
        None
    } else {
        Some(
            api.read(&format!("/v1/service-orders/{}", enc(&order_no)))
                .await,
        )
    };
    let refund_no = b["hold"]["refund_no"]
        .as_str()
        .or(b["refund_no"].as_str())
        .map(str::to_owned);
    let refund = match &refund_no {
        Some(r) => Some(api.read(&format!("/v1/refunds/{}", enc(r))).await),
        None => None,
    };
    let fan = b["fan_user_id"].to_string();
    let artist = b["artist_id"].to_string();
    let body = html! {
        div.cards #booking data-booking=(no) data-status=(b["status"].as_i64().unwrap_or_default()) {
            (card("status", "booking-status", html! { (s(&b, "status_name")) " (" (b["status"].as_i64().unwrap_or_default()) ")" }))
            (card("price held", "booking-price", money(b["price_candy"].as_i64().unwrap_or_default(), CANDY)))
            (card("hold", "hold-state", html! { (b["hold"]["state"].as_str().unwrap_or(s(&b, "hold_state"))) }))
            (card("fan", "booking-fan", html! { a href=(user_href(&fan)) { (fan) } }))
            (card("artist", "booking-artist", html! { a href=(user_href(&artist)) { (artist) } }))
        }
        p {
            a #booking-stream href=(layout::stream_href("booking", &no, None)) { "Stream booking / " (no) }
            " · " (last_change(&b))
            " · projection position " (b["position"].as_i64().unwrap_or_default())
        }
        h2 { "Booking" }
        (fields("booking-fields", &b))
        h2 { "Hold" }
        table #booking-hold {
            tbody {
                tr { th { "state" } td { (cell(&b["hold"]["state"])) } }
                tr { th { "candy" } td.num { (money(b["hold"]["candy"].as_i64().unwrap_or_default(), CANDY)) } }
                tr { th { "refund" } td { @match &refund_no { Some(r) => a href=(refund_href(r)) { (r) }, None => span.muted { "—" } } } }
            }
        }
        h2 { "Order " (order_no) }
        @match &order {
            Some(Ok(o)) => (order_summary(o)),
            Some(Err(p)) => (layout::problem_box(p)),
            None => p.muted { "No order." },
        }
        @if let Some(r) = &refund {
            h2 { "Refund" }
            @match r {
                Ok(r) => (refund_summary(r)),
                Err(p) => (layout::problem_box(p)),
            }
        }
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

fn order_amount(o: &Value) -> Markup {
    let amount = o["amount"].as_i64().unwrap_or_default();
    match o["currency"].as_str() {
        Some(c) => money(amount, c),
        // A booking's candy order is paid in candy.
        None => money(amount, CANDY),
    }
}

fn order_summary(o: &Value) -> Markup {
    let no = s(o, "order_no");
    html! {
        table.order-summary data-order=(no) {
            tbody {
                tr { th { "order" } td { a href=(order_href(no)) { (no) } } }
                tr { th { "business" } td { (s(o, "business_type")) } }
                tr { th { "status" } td data-status=(o["status"].as_i64().unwrap_or_default()) { (s(o, "status_name")) " (" (o["status"].as_i64().unwrap_or_default()) ")" } }
                tr { th { "amount" } td.num { (order_amount(o)) } }
                tr { th { "method" } td { (s(o, "method")) } }
                tr { th { "stream" } td { a href=(layout::stream_href("service_order", no, None)) { "service_order / " (no) } } }
            }
        }
    }
}

fn refund_summary(r: &Value) -> Markup {
    let no = s(r, "refund_no");
    html! {
        table.refund-summary data-refund=(no) {
            tbody {
                tr { th { "refund" } td { a href=(refund_href(no)) { (no) } } }
                tr { th { "status" } td data-status=(r["status"].as_i64().unwrap_or_default()) { (s(r, "status_name")) " (" (r["status"].as_i64().unwrap_or_default()) ")" } }
                tr { th { "amount" } td.num { (money(r["amount"].as_i64().unwrap_or_default(), s(r, "currency"))) } }
                tr { th { "failure" } td { (cell(&r["failure_reason"])) } }
                tr { th { "stream" } td { a href=(layout::stream_href("refund", no, None)) { "refund / " (no) } } }
            }
        }
    }
}

/// `/console/bookings/orders/{order_no}`: the order, its recharge and payments.
async fn order(
    State(console): State<Console>,
    session: Session,
    Path(no): Path<String>,
) -> Response {
    let title = format!("Service order {no}");
    let no = match check_no("order_no", &no) {
        Ok(n) => n,
        Err(e) => return bad_path(&session, &title, "order_no", e),
    };
    let api = session.api(&console);
    let o = match api.read(&format!("/v1/service-orders/{}", enc(&no))).await {
        Ok(o) => o,
        Err(p) => return layout::problem_page(&session, &title, ACTIVE, &p),
    };
    let payments = o["payment_transactions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let user = o["user_id"].to_string();
    let body = html! {
        div.cards #order data-order=(no) data-status=(o["status"].as_i64().unwrap_or_default()) {
            (card("status", "order-status", html! { (s(&o, "status_name")) " (" (o["status"].as_i64().unwrap_or_default()) ")" }))
            (card("amount", "order-amount", order_amount(&o)))
            (card("business", "order-business", html! { (s(&o, "business_type")) }))
            (card("user", "order-user", html! { a href=(user_href(&user)) { (user) } }))
        }
        p {
            a #order-stream href=(layout::stream_href("service_order", &no, None)) { "Stream service_order / " (no) }
            " · " (last_change(&o))
            @if let Some(b) = o["booking_no"].as_str() { " · booking " a #order-booking href=(booking_href(b)) { (b) } }
            @if let Some(r) = o["refund_no"].as_str() { " · refund " a #order-refund href=(refund_href(r)) { (r) } }
        }
        h2 { "Order" }
        (fields("order-fields", &o))
        h2 { "Recharge" }
        @if o["recharge"].is_object() {
            table #order-recharge {
                tbody {
                    tr { th { "candy" } td.num { (money(o["recharge"]["candy"].as_i64().unwrap_or_default(), CANDY)) } }
                    tr { th { "status" } td { (cell(&o["recharge"]["status"])) } }
                    tr { th { "updated" } td { (cell(&o["recharge"]["updated_at"])) } }
                }
            }
        } @else { p.muted #order-recharge data-empty="true" { "Not a recharge." } }
        h2 { "Payment transactions" }
        @if payments.is_empty() { p.muted #order-payments data-empty="true" { "No payment yet." } }
        @else {
            table #order-payments {
                thead { tr { th { "transaction" } th { "method" } th { "account" } th.num { "amount" } th { "status" } th { "refund" } th { "paid at" } } }
                tbody {
                    @for t in payments {
                        tr data-transaction=(s(t, "transaction_no")) {
                            td { code { (s(t, "transaction_no")) } }
                            td { (s(t, "method")) }
                            td { (s(t, "account_id")) }
                            td.num { (money(t["amount_minor"].as_i64().unwrap_or_default(), s(t, "currency"))) }
                            td { (s(t, "status")) }
                            td { @match t["refund_no"].as_str() { Some(r) => a href=(refund_href(r)) { (r) }, None => span.muted { "—" } } }
                            td { (s(t, "paid_at")) }
                        }
                    }
                }
            }
        }
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

/// `/console/bookings/refunds/{refund_no}`.
async fn refund(
    State(console): State<Console>,
    session: Session,
    Path(no): Path<String>,
) -> Response {
    let title = format!("Refund {no}");
    let no = match check_no("refund_no", &no) {
        Ok(n) => n,
        Err(e) => return bad_path(&session, &title, "refund_no", e),
    };
    let api = session.api(&console);
    let r = match api.read(&format!("/v1/refunds/{}", enc(&no))).await {
        Ok(r) => r,
        Err(p) => return layout::problem_page(&session, &title, ACTIVE, &p),
    };
    let body = html! {
        div.cards #refund data-refund=(no) data-status=(r["status"].as_i64().unwrap_or_default()) {
            (card("status", "refund-status", html! { (s(&r, "status_name")) " (" (r["status"].as_i64().unwrap_or_default()) ")" }))
            (card("amount", "refund-amount", money(r["amount"].as_i64().unwrap_or_default(), s(&r, "currency"))))
            (card("business", "refund-business", html! { (s(&r, "business")) }))
        }
        p {
            a #refund-stream href=(layout::stream_href("refund", &no, None)) { "Stream refund / " (no) }
            " · " (last_change(&r))
            " · order " a #refund-order href=(order_href(s(&r, "order_no"))) { (s(&r, "order_no")) }
            @if let Some(b) = r["booking_no"].as_str() { " · booking " a #refund-booking href=(booking_href(b)) { (b) } }
        }
        h2 { "Refund" }
        (fields("refund-fields", &r))
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

/// `/console/bookings/users/{user_id}`: candy account, subscriptions as fan and as
/// artist.
async fn user(
    State(console): State<Console>,
    session: Session,
    Path(raw): Path<String>,
) -> Response {
    let title = format!("User {raw}");
    let id = match check_user(&raw) {
        Ok(id) => id,
        Err(e) => return bad_path(&session, &title, "user_id", e),
    };
    let api = session.api(&console);
    let candy = api.get(&format!("/v1/candy-accounts/{id}")).await;
    if !candy.ok() && candy.status != StatusCode::NOT_FOUND {
        return layout::problem_page(&session, &title, ACTIVE, &candy.problem());
    }
    let as_fan = api
        .read(&format!("/v1/subscriptions?fan_user_id={id}"))
        .await;
    let as_artist = api.read(&format!("/v1/subscriptions?artist_id={id}")).await;
    let body = html! {
        h2 { "Candy account" }
        @if candy.ok() {
            @let a = &candy.body;
            div.cards #candy-account data-user=(id) {
                (card("balance", "candy-balance", money(a["balance"].as_i64().unwrap_or_default(), CANDY)))
                (card("held", "candy-held", money(a["held"].as_i64().unwrap_or_default(), CANDY)))
                (card("updated", "candy-updated", html! { (s(a, "updated_at")) }))
            }
            p {
                a #candy-stream href=(layout::stream_href("candy_account", &id, None)) { "Stream candy_account / " (id) }
                " · " (last_change(a))
            }
        } @else {
            p.muted #candy-account data-empty="true" { (candy.problem().detail) }
        }
        h2 { "Subscriptions as fan" }
        (subscriptions("subscriptions-fan", &as_fan))
        h2 { "Subscribers as artist" }
        (subscriptions("subscriptions-artist", &as_artist))
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

fn member(status: &Value) -> &'static str {
    match status.as_i64() {
        Some(1) => "in the group",
        Some(2) => "removed",
        Some(3) => "failed",
        _ => "—",
    }
}

fn subscriptions(id: &str, read: &Result<Value, Problem>) -> Markup {
    html! {
        @match read {
            Err(p) => (layout::problem_box(p)),
            Ok(v) => {
                @let list = v["subscriptions"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                @if list.is_empty() { p.muted id=(id) data-empty="true" { "None." } }
                @else {
                    table id=(id) {
                        thead { tr { th { "artist" } th { "fan" } th { "status" } th { "expires" } th { "last order" } th { "IM member" } th { "stream" } } }
                        tbody {
                            @for sub in list {
                                @let artist = sub["artist_id"].to_string();
                                @let fan = sub["fan_user_id"].to_string();
                                @let pair = format!("{artist}:{fan}");
                                tr data-pair=(pair) data-status=(sub["status"].as_i64().unwrap_or_default()) {
                                    td { a href=(user_href(&artist)) { (artist) } }
                                    td { a href=(user_href(&fan)) { (fan) } }
                                    td { @match sub["status"].as_i64() { Some(1) => "active", Some(2) => "expired", _ => (cell(&sub["status"])) } }
                                    td { (s(sub, "expires_at")) }
                                    td { a href=(order_href(s(sub, "last_order_no"))) { (s(sub, "last_order_no")) } }
                                    td {
                                        (member(&sub["member_status"]))
                                        @if let Some(r) = sub["member_failed_reason"].as_str() { ": " span.bad { (r) } }
                                    }
                                    td {
                                        a href=(layout::stream_href("subscription", &pair, None)) { "subscription" }
                                        @if let Some(p) = sub["last_position"].as_i64() { " · " a href=(layout::event_href(p)) { "last change" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lookups_name_the_field() {
        assert_eq!(
            super::check_no("booking_no", " BK-1 ").as_deref(),
            Ok("BK-1")
        );
        assert!(super::check_no("order_no", "a/b")
            .unwrap_err()
            .starts_with("order_no"));
        assert!(super::check_no("refund_no", "").is_err());
        assert_eq!(super::check_user("42").as_deref(), Ok("42"));
        assert!(super::check_user("0").unwrap_err().starts_with("user_id"));
    }
}
