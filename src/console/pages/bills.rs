//! Bills: `/console/bills` (find a station-month, the latest inspection findings) and
//! `/console/bills/{station_id}/{yyyymm}`: the station-month's three bill rows as
//! `GET /v1/bills/{station_id}/{yyyymm}` returns them, the decision that fired
//! (`decided_by`) with the facts it read, the dimension snapshot, the inspections of
//! that station-month, links to the streams the facts came from, and an operator's
//! refresh (`POST /v1/bills:refresh`, one STATION_MONTH scope).

use super::super::api::{enc, Problem};
use super::super::layout::{self, money};
use super::super::session::Session;
use super::super::Console;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use factledger_aggregates::bill::YearMonth;
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

const ACTIVE: &str = "/console/bills";

/// Columns of the bill rows and the snapshot that hold minor units.
const AMOUNT_COLUMNS: &[&str] = &[
    "rent",
    "pre_rent",
    "deduction",
    "paid_amount",
    "cumulative_paid_amount",
    "current_payment_amount",
    "planned_amount",
    "failed_amount",
    "payment_diff",
];

/// Bill amounts carry no currency in the API: minor units of the station's money.
const UNIT: &str = "minor";

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/bills", get(index))
        .route("/console/bills/{station_id}/{yyyymm}", get(station_month))
        .route(
            "/console/bills/{station_id}/{yyyymm}/refresh",
            post(refresh),
        )
}

/// The station id of a form or path: a positive integer, or a message naming the field.
fn parse_station(raw: &str) -> Result<i64, String> {
    let raw = raw.trim();
    match raw.parse::<i64>() {
        Ok(v) if v > 0 && raw.bytes().all(|b| b.is_ascii_digit()) => Ok(v),
        _ => Err(format!(
            "station_id: `{raw}` is not a positive whole number"
        )),
    }
}

/// A bill month `YYYYMM` as commands accept it (`YearMonth::parse_bill_month`), or a
/// message naming the field.
fn parse_month(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    YearMonth::parse_bill_month(raw)
        .map(|m| m.to_string())
        .map_err(|_| format!("month: `{raw}` is not a month as YYYYMM (e.g. 202609)"))
}

/// The station and month of a path, or the page naming the field at fault.
// The refusal is the page answered at once, never carried further: no need to box.
#[allow(clippy::result_large_err)]
fn station_month_of(
    session: &Session,
    title: &str,
    raw_station: &str,
    raw_month: &str,
) -> Result<(i64, String), Response> {
    let station =
        parse_station(raw_station).map_err(|e| bad_field(session, title, "station_id", e))?;
    let month = parse_month(raw_month).map_err(|e| bad_field(session, title, "month", e))?;
    Ok((station, month))
}

fn bad_field(session: &Session, title: &str, field: &str, detail: String) -> Response {
    let p = Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "INVALID_FIELD".into(),
        field: Some(field.into()),
        detail,
    };
    layout::problem_page(session, title, ACTIVE, &p)
}

/// A JSON value as a table cell: money for amount columns, a dash for null.
fn cell(name: &str, v: &Value) -> Markup {
    html! {
        @match v {
            Value::Null => span.muted { "—" },
            Value::Number(n) if AMOUNT_COLUMNS.contains(&name) && n.as_i64().is_some() => {
                (money(n.as_i64().unwrap_or_default(), UNIT))
            }
            Value::String(s) => (s),
            Value::Number(n) => (n.to_string()),
            Value::Bool(b) => (b.to_string()),
            other => (layout::json_block(other)),
        }
    }
}

/// One projected row as a two-column table (`id` on the table, `data-field` per row).
fn row_table(id: &str, row: &Value) -> Markup {
    html! {
        @if let Some(o) = row.as_object() {
            table id=(id) {
                tbody {
                    @for (k, v) in o {
                        tr data-field=(k) {
                            th { (k) }
                            td.num[AMOUNT_COLUMNS.contains(&k.as_str())] data-value=(v.to_string()) { (cell(k, v)) }
                        }
                    }
                }
            }
        } @else {
            p.muted id=(id) data-empty="true" { "no row" }
        }
    }
}

fn findings_table(findings: &[Value], link_station_month: bool) -> Markup {
    html! {
        @if findings.is_empty() {
            p.muted { "No inspection findings." }
        } @else {
            table #inspections {
                thead { tr { th { "id" } th { "station-month" } th { "rule" } th { "severity" } th { "row" } th { "message" } th { "job" } th { "found at" } } }
                tbody {
                    @for f in findings {
                        @let station = f["station_id"].as_i64().unwrap_or_default();
                        @let month = f["bill_month"].as_str().unwrap_or_default();
                        tr data-finding=(f["id"].as_i64().unwrap_or_default()) {
                            td.num { (f["id"].as_i64().unwrap_or_default()) }
                            td {
                                @if link_station_month {
                                    a href=(format!("/console/bills/{station}/{}", enc(month))) { (station) ":" (month) }
                                } @else { (station) ":" (month) }
                            }
                            td { (f["rule_id"].as_str().unwrap_or_default()) }
                            td class=(if f["severity"] == "ERROR" { "bad" } else { "" }) { (f["severity"].as_str().unwrap_or_default()) }
                            td {
                                (f["row_table"].as_str().unwrap_or("—"))
                                @if let Some(id) = f["row_id"].as_i64() { " #" (id) }
                            }
                            td { (f["message"].as_str().unwrap_or_default()) }
                            td { code { (f["job_code"].as_str().unwrap_or_default()) } " gen " (f["generation"].as_i64().unwrap_or_default()) }
                            td { (f["found_at"].as_str().unwrap_or_default()) }
                        }
                    }
                }
            }
        }
    }
}

/// `/console/bills?station_id=&month=`: the form (a valid pair goes to its page) and
/// the latest inspection findings.
async fn index(
    State(console): State<Console>,
    session: Session,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let title = "Bills";
    let station_raw = q.get("station_id").map(|s| s.trim()).unwrap_or("");
    let month_raw = q.get("month").map(|s| s.trim()).unwrap_or("");
    let mut problem = None;
    if !station_raw.is_empty() || !month_raw.is_empty() {
        match (parse_station(station_raw), parse_month(month_raw)) {
            (Ok(s), Ok(m)) => {
                return Redirect::to(&format!("/console/bills/{s}/{m}")).into_response()
            }
            (Err(e), _) => problem = Some(("station_id", e)),
            (_, Err(e)) => problem = Some(("month", e)),
        }
    }
    let api = session.api(&console);
    let findings = api.read("/v1/bills/inspections?limit=50").await;
    let body = html! {
        form.inline #bill-search method="get" action="/console/bills" {
            label { "station_id" input #station-id name="station_id" inputmode="numeric" value=(station_raw) required; }
            label { "month (YYYYMM)" input #bill-month name="month" placeholder="202609" value=(month_raw) required; }
            button #bill-open type="submit" { "Open station-month" }
        }
        @if let Some((field, detail)) = &problem {
            div.problem role="alert" data-field=(field) { strong { "422 INVALID_FIELD" } " · field " code { (field) } ": " (detail) }
        }
        h2 { "Inspection findings" }
        p.muted { "The latest findings of the inspections after refresh runs (" code { "GET /v1/bills/inspections" } "), oldest first." }
        @match &findings {
            Ok(v) => (findings_table(v["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]), true)),
            Err(p) => (layout::problem_box(p)),
        }
    };
    let page = layout::page(&session, title, ACTIVE, body);
    if problem.is_some() {
        (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
    } else {
        layout::ok(page)
    }
}

/// The streams the decision's facts came from: (label, href).
fn fact_streams(station_month: &str, facts: &Value, rows: &[&Value]) -> Vec<(String, String)> {
    let mut out = vec![(
        format!("bill_station_month {station_month}"),
        layout::stream_href("bill_station_month", station_month, None),
    )];
    let mut push = |ty: &str, id: Option<i64>| {
        if let Some(id) = id {
            let href = layout::stream_href(ty, &id.to_string(), None);
            if !out.iter().any(|(_, h)| *h == href) {
                out.push((format!("{ty} {id}"), href));
            }
        }
    };
    push("bill_partner_bill", facts["partner_bill"]["id"].as_i64());
    for (list, ty) in [
        ("orders", "bill_payment_order"),
        ("locks", "bill_lock"),
        ("results", "bill_payment_result"),
    ] {
        for item in facts[list].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            push(ty, item["id"].as_i64());
        }
    }
    for line in facts["lines"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        push("bill_payment_order", line["order_id"].as_i64());
    }
    for row in rows {
        push(
            "bill_payment_order",
            row["locked_payment_order_id"].as_i64(),
        );
        push("bill_partner_bill", row["partner_bill_id"].as_i64());
        push("bill_payment_order", row["order_id"].as_i64());
    }
    out
}

/// `/console/bills/{station_id}/{yyyymm}`.
async fn station_month(
    State(console): State<Console>,
    session: Session,
    Path((raw_station, raw_month)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let title = format!("Bill {raw_station}:{raw_month}");
    let (station, month) = match station_month_of(&session, &title, &raw_station, &raw_month) {
        Ok(sm) => sm,
        Err(r) => return r,
    };
    let api = session.api(&console);
    let bill = match api.read(&format!("/v1/bills/{station}/{month}")).await {
        Ok(v) => v,
        Err(p) => {
            let body = html! {
                (layout::notice(q.get("done").map(String::as_str)))
                (layout::problem_box(&p))
                p { a href="/console/bills" { "Find another station-month" } }
                (refresh_form(&session, station, &month))
            };
            let status = if p.status.is_client_error() || p.status.is_server_error() {
                p.status
            } else {
                StatusCode::BAD_GATEWAY
            };
            return (status, layout::page(&session, &title, ACTIVE, body)).into_response();
        }
    };
    let inspections = api
        .read(&format!(
            "/v1/bills/inspections?station_id={station}&month={month}&limit=200"
        ))
        .await;
    let sm = bill["station_month"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let decision = &bill["decision"];
    let finding = &bill["finding"];
    let facts = if decision.is_object() {
        &decision["facts"]
    } else {
        &finding["facts"]
    };
    let customer = &bill["fi_customer_bill"];
    let partner = &bill["fi_customer_bill_partner"];
    let difference = &bill["fi_monthly_income_difference"];
    let snapshot = &bill["snapshot"];
    let streams = fact_streams(&sm, facts, &[customer, partner, difference, snapshot]);
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        div.cards #bill-summary data-station-month=(sm) {
            div.card { div.label { "station-month" } div.value #station-month { (sm) } }
            div.card { div.label { "decided by" } div.value #decided-by { (decision["decided_by"].as_str().unwrap_or("—")) } }
            div.card { div.label { "payment status" } div.value #payment-status { (cell("payment_status", &decision["payment_status"])) } }
            div.card { div.label { "projection position" } div.value #bill-position data-position=(bill["position"].as_i64().unwrap_or_default()) { (bill["position"].as_i64().unwrap_or_default()) } }
            @if bill["sweep_pending"] == json!(true) {
                div.card { div.label { "sweep" } div.value.bad #sweep-pending { "pending: a bulk catch-up has not recomputed this station-month yet" } }
            }
        }
        (refresh_form(&session, station, &month))
        h2 { "Decision" }
        @if decision.is_object() {
            table #decision {
                tbody {
                    @for k in ["decided_by", "payment_status", "partner_query_status", "partner_query_rule", "pre_rent_check_result", "pre_rent_available", "decided_at"] {
                        tr data-field=(k) { th { (k) } td { (cell(k, &decision[k])) } }
                    }
                }
            }
        } @else {
            p.muted #decision data-empty="true" { "No decision recorded." }
        }
        @if finding.is_object() {
            div.problem #finding role="alert" data-code=(finding["code"].as_str().unwrap_or_default()) {
                strong { "Decision failed: " (finding["code"].as_str().unwrap_or_default()) }
                ": " (finding["message"].as_str().unwrap_or_default())
                @if let Some(at) = finding["found_at"].as_str() { " (" (at) ")" }
            }
        }
        h2 { "The three rows" }
        h3 { code { "fi_customer_bill" } }
        (row_table("bill-customer", customer))
        h3 { code { "fi_customer_bill_partner" } }
        (row_table("bill-partner", partner))
        h3 { code { "fi_monthly_income_difference" } }
        (row_table("bill-difference", difference))
        h2 { "Streams behind these figures" }
        ul #bill-streams {
            @for (label, href) in &streams { li { a href=(href) { (label) } } }
        }
        h2 { "Facts used" }
        @if facts.is_null() { p.muted #facts { "No facts recorded." } }
        @else { div #facts { (layout::json_block(facts)) } }
        h2 { "Snapshot" }
        @if snapshot.is_object() {
            (row_table("bill-snapshot", snapshot))
        } @else {
            p.muted #bill-snapshot data-empty="true" { "No dimension snapshot: its order has not been approved." }
        }
        h2 { "Inspections" }
        @match &inspections {
            Ok(v) => (findings_table(v["findings"].as_array().map(Vec::as_slice).unwrap_or(&[]), false)),
            Err(p) => (layout::problem_box(p)),
        }
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

fn refresh_form(session: &Session, station: i64, month: &str) -> Markup {
    html! {
        @if session.can_act() {
            p.muted { "Refresh recomputes this station-month in a " code { "bill_refresh" } " job (" code { "POST /v1/bills:refresh" } ", scope STATION_MONTH)." }
            (layout::action(session, &format!("/console/bills/{station}/{month}/refresh"), "refresh-bill", "Refresh this bill", &[("mode", "ALL")]))
            (layout::action(session, &format!("/console/bills/{station}/{month}/refresh"), "refresh-bill-unfinished", "Refresh if unfinished", &[("mode", "UNFINISHED")]))
        }
    }
}

/// `POST /console/bills/{station_id}/{yyyymm}/refresh` (mode ALL or UNFINISHED).
async fn refresh(
    State(console): State<Console>,
    session: Session,
    Path((raw_station, raw_month)): Path<(String, String)>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(r) = session.check_action(&form) {
        return r;
    }
    let title = format!("Refresh {raw_station}:{raw_month}");
    let (station, month) = match station_month_of(&session, &title, &raw_station, &raw_month) {
        Ok(sm) => sm,
        Err(r) => return r,
    };
    let mode = form.get("mode").map(String::as_str).unwrap_or("ALL");
    if !matches!(mode, "ALL" | "UNFINISHED") {
        return bad_field(
            &session,
            &title,
            "mode",
            format!("mode: `{mode}` is not ALL or UNFINISHED"),
        );
    }
    let body = json!({
        "scope_type": "STATION_MONTH",
        "station_months": [{"station_id": station, "bill_month": month}],
        "mode": mode,
    });
    let api = session.api(&console);
    let answer = api.post("/v1/bills:refresh", Some(body), None).await;
    if !answer.ok() {
        return layout::problem_page(&session, &title, ACTIVE, &answer.problem());
    }
    let job = answer.body["job_code"].as_str().unwrap_or_default();
    let done = format!(
        "refresh submitted: job {job} ({} scope{}, mode {mode}{})",
        answer.body["scope_count"].as_i64().unwrap_or_default(),
        if answer.body["scope_count"] == json!(1) {
            ""
        } else {
            "s"
        },
        if answer.body["resubmitted"] == json!(true) {
            ", merged into the job already queued"
        } else {
            ""
        }
    );
    Redirect::to(&format!(
        "/console/bills/{station}/{month}?done={}",
        enc(&done)
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn fields_are_checked_and_named() {
        assert_eq!(super::parse_station("100"), Ok(100));
        assert!(super::parse_station("0")
            .unwrap_err()
            .starts_with("station_id"));
        assert!(super::parse_station("-3").is_err());
        assert_eq!(super::parse_month("202609").as_deref(), Ok("202609"));
        assert!(super::parse_month("202613")
            .unwrap_err()
            .starts_with("month"));
        assert!(super::parse_month("2026-09").is_err());
    }
}
