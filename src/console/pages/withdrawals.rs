//! Withdrawals: `/console/withdrawals` (the approval queue first: those REQUESTED and
//! waiting for an operator; then the list from `GET /v1/withdrawals` filtered by
//! status and user) and `/console/withdrawals/{id}` (amounts, status, attempts and
//! every event of its stream, from `GET /v1/withdrawals/{id}`). Operators approve
//! and reject (`POST /v1/withdrawals/{id}:approve|:reject`, a reason required); each
//! form carries a key made when it was drawn, so a double submit is one action.

use super::super::api::{enc, Problem};
use super::super::layout::{self, money};
use super::super::session::Session;
use super::super::Console;
use super::fields::text as s;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;

const ACTIVE: &str = "/console/withdrawals";

/// The R-PAY-2 statuses, for the filter.
const STATUSES: &[&str] = &[
    "REQUESTED",
    "REJECTED",
    "PAYOUT_PENDING",
    "PROCESSING",
    "PROVIDER_UNKNOWN",
    "FUNDS_HELD",
    "PAID",
    "FAILED",
];

/// Review forms already submitted: form key → where its answer sent the browser
/// (`None` while the first submit is still running). Kept an hour, at most
/// [`SUBMITTED_MAX`] keys.
static SUBMITTED: Mutex<Option<Submitted>> = Mutex::new(None);
/// Form key → (when first seen, ms; the redirect of its answer once known).
type Submitted = HashMap<String, (i64, Option<String>)>;
const SUBMITTED_MAX: usize = 10_000;
const SUBMITTED_KEEP_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

enum Seen {
    /// First time: go on.
    New,
    /// Submitted before and finished: redirect where the first one went.
    Done(String),
    /// Submitted before and still running.
    Running,
}

fn claim(key: &str) -> Seen {
    let mut guard = SUBMITTED.lock().unwrap_or_else(|p| p.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    let now = now_ms();
    if map.len() >= SUBMITTED_MAX {
        map.retain(|_, (at, _)| now - *at < SUBMITTED_KEEP_MS);
    }
    match map.get(key) {
        Some((_, Some(to))) => Seen::Done(to.clone()),
        Some((_, None)) => Seen::Running,
        None => {
            if map.len() < SUBMITTED_MAX {
                map.insert(key.to_owned(), (now, None));
            }
            Seen::New
        }
    }
}

fn settle(key: &str, to: Option<String>) {
    let mut guard = SUBMITTED.lock().unwrap_or_else(|p| p.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    match to {
        Some(to) => {
            map.insert(key.to_owned(), (now_ms(), Some(to)));
        }
        // Refused: the same form may be sent again (e.g. with a reason now).
        None => {
            map.remove(key);
        }
    }
}

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/withdrawals", get(index))
        .route("/console/withdrawals/{id}", get(detail))
        .route("/console/withdrawals/{id}/approve", post(approve))
        .route("/console/withdrawals/{id}/reject", post(reject))
}

fn detail_href(id: &str) -> String {
    format!("/console/withdrawals/{}", enc(id))
}

/// The approve and reject forms of a REQUESTED withdrawal (operators and admins only),
/// each with a fresh form key.
fn review_forms(session: &Session, id: &str) -> Markup {
    let approve_key = uuid::Uuid::new_v4().to_string();
    let reject_key = uuid::Uuid::new_v4().to_string();
    html! {
        @if session.can_act() {
            div.review data-withdrawal=(id) {
                form.inline method="post" action=(format!("{}/approve", detail_href(id))) {
                    input type="hidden" name="csrf" value=(session.csrf());
                    input type="hidden" name="form_key" value=(approve_key);
                    label { "approval note" input name="reason" id=(format!("approve-reason-{id}")) value="approved in the console" required maxlength="500"; }
                    button type="submit" id=(format!("approve-{id}")) data-action="approve" { "Approve" }
                }
                form.inline method="post" action=(format!("{}/reject", detail_href(id))) {
                    input type="hidden" name="csrf" value=(session.csrf());
                    input type="hidden" name="form_key" value=(reject_key);
                    label { "rejection reason" input name="reason" id=(format!("reject-reason-{id}")) required maxlength="500"; }
                    button type="submit" id=(format!("reject-{id}")) data-action="reject" { "Reject" }
                }
            }
        }
    }
}

fn rows_table(id: &str, rows: &[Value], session: &Session, with_review: bool) -> Markup {
    html! {
        table id=(id) {
            thead { tr {
                th { "withdrawal" } th { "user" } th.num { "amount" } th { "status" } th { "review" }
                th.num { "attempts" } th { "requested" } th { "updated" }
                @if with_review && session.can_act() { th { "decide" } }
            } }
            tbody {
                @for r in rows {
                    @let wid = s(r, "withdrawal_id");
                    tr data-withdrawal=(wid) data-status=(s(r, "status")) {
                        td { a href=(detail_href(wid)) { (wid) } }
                        td { a href=(format!("/console/withdrawals?user_id={}", enc(s(r, "user_id")))) { (s(r, "user_id")) } }
                        td.num data-amount=(r["amount_minor"].as_i64().unwrap_or_default()) { (money(r["amount_minor"].as_i64().unwrap_or_default(), s(r, "currency"))) }
                        td { (s(r, "status")) }
                        td { (s(r, "review")) }
                        td.num { (r["attempts"].as_i64().unwrap_or_default()) }
                        td { (s(r, "requested_at")) }
                        td { (s(r, "updated_at")) }
                        @if with_review && session.can_act() { td { (review_forms(session, wid)) } }
                    }
                }
            }
        }
    }
}

/// `/console/withdrawals?status=&user_id=&cursor=`.
async fn index(
    State(console): State<Console>,
    session: Session,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let get = |k: &str| q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let status = get("status").map(str::to_ascii_uppercase);
    let user_id = get("user_id");
    let cursor = get("cursor");
    let mut problem: Option<Problem> = None;
    if let Some(st) = &status {
        if !STATUSES.contains(&st.as_str()) {
            problem = Some(Problem {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: "INVALID_FIELD".into(),
                field: Some("status".into()),
                detail: format!("status: `{st}` is not one of {}", STATUSES.join(", ")),
            });
        }
    }
    let api = session.api(&console);
    let user_q = user_id
        .map(|u| format!("&user_id={}", enc(u)))
        .unwrap_or_default();
    // The queue: every REQUESTED withdrawal (of this user when filtered).
    let queue = if problem.is_none() {
        Some(
            api.read(&format!(
                "/v1/withdrawals?status=REQUESTED&limit=200{user_q}"
            ))
            .await,
        )
    } else {
        None
    };
    let list = if problem.is_none() {
        let mut path = format!("/v1/withdrawals?limit=100{user_q}");
        if let Some(st) = &status {
            path.push_str(&format!("&status={}", enc(st)));
        }
        if let Some(c) = cursor {
            path.push_str(&format!("&cursor={}", enc(c)));
        }
        Some(api.read(&path).await)
    } else {
        None
    };
    if let Some(Err(p)) = &list {
        problem = Some(p.clone());
    }
    let list_href = |next: Option<&str>| {
        let mut parts = Vec::new();
        if let Some(st) = &status {
            parts.push(format!("status={}", enc(st)));
        }
        if let Some(u) = user_id {
            parts.push(format!("user_id={}", enc(u)));
        }
        if let Some(c) = next {
            parts.push(format!("cursor={}", enc(c)));
        }
        format!("/console/withdrawals?{}", parts.join("&"))
    };
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        form.inline #withdrawal-filter method="get" action="/console/withdrawals" data-autosubmit {
            label { "status" select #filter-status name="status" {
                option value="" selected[status.is_none()] { "any" }
                @for st in STATUSES { option value=(st) selected[status.as_deref() == Some(*st)] { (st) } }
            } }
            label { "user_id" input #filter-user name="user_id" value=(user_id.unwrap_or_default()); }
            button #filter-apply type="submit" { "Filter" }
        }
        @if let Some(p) = &problem { (layout::problem_box(p)) }
        h2 { "Approval queue" }
        p.muted { "Withdrawals the risk rule sent to manual review (status REQUESTED): their amount is frozen until an operator approves or rejects." }
        @match &queue {
            Some(Ok(v)) => {
                @let rows = v["withdrawals"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                @if rows.is_empty() { p.muted #approval-queue data-empty="true" { "Nothing awaits approval." } }
                @else { (rows_table("approval-queue", rows, &session, true)) }
            }
            Some(Err(p)) => (layout::problem_box(p)),
            None => {}
        }
        h2 { "Withdrawals" }
        @if let Some(Ok(v)) = &list {
            @let rows = v["withdrawals"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            p.muted { "From the " code { "withdrawal_records" } " projection at position " (v["position"].as_i64().unwrap_or_default()) ", by id." }
            @if rows.is_empty() { p.muted #withdrawals data-empty="true" { "No withdrawals match." } }
            @else { (rows_table("withdrawals", rows, &session, false)) }
            div.pager {
                @if cursor.is_some() { a #page-first href=(list_href(None)) { "First page" } }
                @if let Some(next) = v["next_cursor"].as_str() { a #page-next href=(list_href(Some(next))) { "Next page" } }
            }
        }
    };
    let page = layout::page(&session, "Withdrawals", ACTIVE, body);
    match &problem {
        Some(p) if p.status.is_client_error() || p.status.is_server_error() => {
            (p.status, page).into_response()
        }
        _ => layout::ok(page),
    }
}

fn kv(label: &str, id: &str, value: Markup) -> Markup {
    html! { div.card { div.label { (label) } div.value id=(id) { (value) } } }
}

/// `/console/withdrawals/{id}`.
async fn detail(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let title = format!("Withdrawal {id}");
    let api = session.api(&console);
    let w = match api.read(&format!("/v1/withdrawals/{}", enc(&id))).await {
        Ok(w) => w,
        Err(p) => return layout::problem_page(&session, &title, ACTIVE, &p),
    };
    let currency = s(&w, "currency");
    let amount = |k: &str| w[k].as_i64().unwrap_or_default();
    let events = w["events"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let attempts = w["attempts"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        div.cards #withdrawal data-withdrawal=(s(&w, "withdrawal_id")) data-status=(s(&w, "status")) {
            (kv("amount", "withdrawal-amount", money(amount("amount_minor"), currency)))
            (kv("status", "withdrawal-status", html! { (s(&w, "status")) }))
            (kv("still frozen", "withdrawal-frozen", money(amount("frozen_minor"), currency)))
            (kv("paid", "withdrawal-paid", money(amount("paid_minor"), currency)))
            (kv("contradictions", "withdrawal-contradictions", html! { (amount("contradictions")) }))
        }
        @if s(&w, "status") == "REQUESTED" {
            h2 { "Review" }
            @if session.can_act() { (review_forms(&session, s(&w, "withdrawal_id"))) }
            @else { p.muted #review-readonly { "Awaiting an operator's approval (your role sees, never acts)." } }
        }
        table #withdrawal-facts {
            tbody {
                tr { th { "user" } td { a href=(format!("/console/withdrawals?user_id={}", enc(s(&w, "user_id")))) { (s(&w, "user_id")) } } }
                tr { th { "wallet" } td { a href=(layout::stream_href("wallet", s(&w, "wallet_id"), None)) { (s(&w, "wallet_id")) } } }
                tr { th { "provider" } td { (s(&w, "provider")) } }
                tr { th { "provider reference" } td { code { (s(&w, "provider_reference")) } } }
                tr { th { "provider payout id" } td { (w["provider_payout_id"].as_str().unwrap_or("—")) } }
                tr { th { "stream" } td { a #withdrawal-stream href=(layout::stream_href("withdrawal", s(&w, "withdrawal_id"), None)) { "withdrawal / " (s(&w, "withdrawal_id")) } } }
                tr { th { "last event" } td { a #withdrawal-last-event href=(layout::event_href(amount("position"))) { "position " (amount("position")) } } }
            }
        }
        h2 { "Review rule" }
        (layout::json_block(&w["review"]))
        h2 { "Destination" }
        (layout::json_block(&w["destination"]))
        h2 { "Attempts" }
        @if attempts.is_empty() { p.muted #attempts data-empty="true" { "No provider call yet." } }
        @else {
            table #attempts {
                thead { tr { th.num { "attempt" } th { "idempotency key" } th { "started" } th { "outcome" } th { "reason" } th { "ended" } th { "call" } } }
                tbody {
                    @for a in attempts {
                        tr data-attempt=(a["attempt"].as_i64().unwrap_or_default()) {
                            td.num { (a["attempt"].as_i64().unwrap_or_default()) }
                            td { code { (s(a, "idempotency_key")) } }
                            td { (s(a, "started_at")) }
                            td { (a["outcome"].as_str().unwrap_or("open")) }
                            td { (a["outcome_reason"].as_str().unwrap_or("—")) }
                            td { (a["ended_at"].as_str().unwrap_or("—")) }
                            td { @if a["call"].is_null() { span.muted { "—" } } @else { details { summary { "request / response" } (layout::json_block(&a["call"])) } } }
                        }
                    }
                }
            }
        }
        h2 { "Events" }
        (events_table(events))
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

fn events_table(events: &[Value]) -> Markup {
    html! {
        table #withdrawal-events {
            thead { tr { th.num { "position" } th.num { "seq" } th { "event" } th { "actor" } th { "recorded" } th { "payload" } } }
            tbody {
                @for e in events {
                    @let pos = e["global_position"].as_i64().unwrap_or_default();
                    @let seq = e["sequence"].as_i64().unwrap_or_default();
                    tr data-position=(pos) data-event=(s(e, "event_type")) {
                        td.num { a href=(layout::event_href(pos)) { (pos) } }
                        td.num { a href=(layout::stream_href(s(e, "aggregate_type"), s(e, "aggregate_id"), Some(seq))) { (seq) } }
                        td { (s(e, "event_type")) }
                        td { (e["metadata"]["actor"].as_str().unwrap_or("—")) }
                        td { (s(e, "recorded_at")) }
                        td { details { summary { "payload" } (layout::json_block(&e["payload"])) } }
                    }
                }
            }
        }
    }
}

async fn approve(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    review(console, session, id, form, true).await
}

async fn reject(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    review(console, session, id, form, false).await
}

fn invalid(session: &Session, title: &str, field: &str, detail: &str) -> Response {
    let p = Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "INVALID_FIELD".into(),
        field: Some(field.into()),
        detail: detail.into(),
    };
    layout::problem_page(session, title, ACTIVE, &p)
}

/// Approve or reject through the API (which checks the role again and records the
/// decision with the actor); a form key seen before answers as the first submit did.
async fn review(
    console: Console,
    session: Session,
    id: String,
    form: HashMap<String, String>,
    approve: bool,
) -> Response {
    if let Err(r) = session.check_action(&form) {
        return r;
    }
    let verb = if approve { "approve" } else { "reject" };
    let title = format!(
        "{} withdrawal {id}",
        if approve { "Approve" } else { "Reject" }
    );
    let key = form.get("form_key").map(|k| k.trim()).unwrap_or("");
    if key.is_empty() || key.len() > 64 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return invalid(
            &session,
            &title,
            "form_key",
            "form_key: missing or malformed; reload the withdrawal page and submit its form",
        );
    }
    let reason = form.get("reason").map(|r| r.trim()).unwrap_or("");
    if reason.is_empty() || reason.chars().count() > 500 {
        return invalid(
            &session,
            &title,
            "reason",
            &format!("reason: say why you {verb} this withdrawal (1 to 500 characters)"),
        );
    }
    match claim(key) {
        Seen::Done(to) => return Redirect::to(&to).into_response(),
        Seen::Running => {
            return Redirect::to(&format!(
                "{}?done={}",
                detail_href(&id),
                enc("this form was already submitted; its decision is being recorded")
            ))
            .into_response()
        }
        Seen::New => {}
    }
    let api = session.api(&console);
    let answer = api
        .post(
            &format!("/v1/withdrawals/{}:{verb}", enc(&id)),
            Some(json!({ "reason": reason })),
            Some(key),
        )
        .await;
    if !answer.ok() {
        settle(key, None);
        return layout::problem_page(&session, &title, ACTIVE, &answer.problem());
    }
    let done = format!(
        "withdrawal {id} {}; status {}",
        if approve { "approved" } else { "rejected" },
        answer.body["status"].as_str().unwrap_or_default()
    );
    let to = format!("{}?done={}", detail_href(&id), enc(&done));
    settle(key, Some(to.clone()));
    Redirect::to(&to).into_response()
}
