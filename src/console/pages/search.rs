//! The console's home (`/console`): one search box and a kind, sending the operator
//! to the page that explains what was searched (303): a wallet, a user's wallets, a
//! withdrawal, an affiliate order's stream, a station-month's bills, any stream, or
//! the events of one correlation id (`/console/events?correlation_id=`, listed here
//! from `GET /v1/audit/events`). Bad input answers the form again (422) with a
//! message naming the field.

use super::super::api::{enc, Api, Problem};
use super::super::layout::{self, money, stream_href, time_ms};
use super::super::session::Session;
use super::super::Console;
use super::stream::{correlation_href, event_page_href, int, recorded, text};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console", get(home))
        .route("/console/users/{user_id}", get(user_page))
        .route("/console/events", get(correlation_page))
}

/// The kinds of search: (value, label, what the box holds).
const KINDS: &[(&str, &str, &str)] = &[
    ("wallet", "Wallet id", "e.g. user-1:IDR"),
    ("user", "User id", "e.g. user-1"),
    ("withdrawal", "Withdrawal id", "e.g. wd-1"),
    (
        "order",
        "Affiliate order",
        "PLATFORM/platform order id, e.g. SHOPEE/123",
    ),
    (
        "station_month",
        "Station + month",
        "station id/YYYYMM, e.g. 1001/202501",
    ),
    ("stream", "Stream", "type/id, e.g. wallet/user-1:IDR"),
    (
        "correlation",
        "Correlation id",
        "the x-correlation-id of a request",
    ),
];

/// Currencies a user's wallet (`{user_id}:{CURRENCY}`) is looked for in, besides
/// those the user's withdrawals and commissions name.
const PROBED_CURRENCIES: [&str; 12] = [
    "IDR", "USD", "SGD", "MYR", "THB", "VND", "PHP", "EUR", "CNY", "JPY", "GBP", "AUD",
];

/// A refusal of the search input: the field it is about and why.
struct Bad {
    field: &'static str,
    detail: String,
}

fn bad(field: &'static str, detail: impl Into<String>) -> Bad {
    Bad {
        field,
        detail: detail.into(),
    }
}

fn form(kind: &str, q: &str, problem: Option<&Bad>) -> Markup {
    html! {
        @if let Some(b) = problem {
            div.problem #search-problem role="alert" data-field=(b.field) { strong { (b.field) } ": " (b.detail) }
        }
        form #search.inline method="get" action="/console" {
            label { "Kind "
                select #search-kind name="kind" {
                    @for (value, label, _) in KINDS {
                        option value=(value) selected[*value == kind] { (label) }
                    }
                }
            }
            " "
            label { "Search " input #search-q type="search" name="q" value=(q) size="40" autofocus; }
            " " button #search-button type="submit" { "Search" }
        }
        dl.muted #search-kinds {
            @for (_, label, hint) in KINDS { dt { (label) } dd { (hint) } }
        }
        h2 { "What each page is for" }
        ul #page-guide {
            li { strong { "Wallet" } ": the four buckets, each with a \"why\" link to the event that last moved it; the ledger; the state as of any position or time." }
            li { strong { "Stream" } ": one aggregate's events in order with metadata, payload, served version (upcasts), and its hash-chain verification." }
            li { strong { "Event" } ": one event, its metadata and correlation, and for a wallet event the buckets before and after." }
            li { a href="/console/projections" { "Projections" } ": every projector's position, lag and last error; rebuilds with live progress." }
            li { a href="/console/reconciliations" { "Reconciliation" } ": start one, follow it, read findings, repair where allowed." }
            li { a href="/console/jobs" { "Jobs & cron" } ": the queue by kind and status, retry, kick, pause and resume; cron schedules." }
            li { a href="/console/bills" { "Bills" } ": a station-month's rows, decided_by, facts, snapshot and inspections." }
            li { a href="/console/withdrawals" { "Withdrawals" } ": the payout queue; approve or reject." }
            li { a href="/console/bookings" { "Bookings" } ": paid-service bookings and their orders." }
            li { a href="/console/metrics" { "Metrics" } ": command rate, append latency and projection lag over the last hour." }
        }
    }
}

async fn home(
    State(console): State<Console>,
    session: Session,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let kind = q.get("kind").map(|k| k.trim()).unwrap_or("");
    let value = q.get("q").map(|v| v.trim()).unwrap_or("");
    if kind.is_empty() && !q.contains_key("q") {
        return layout::ok(layout::page(
            &session,
            "Search",
            "/console",
            form("wallet", "", None),
        ));
    }
    let api = session.api(&console);
    match target(&api, kind, value).await {
        Ok(to) => Redirect::to(&to).into_response(),
        Err(b) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            layout::page(&session, "Search", "/console", form(kind, value, Some(&b))),
        )
            .into_response(),
    }
}

/// `a/b`, `a:b` or `a b` split at the first separator, both sides non-empty.
fn pair(v: &str) -> Option<(&str, &str)> {
    let at = v.find(['/', ' '])?;
    let (a, b) = (v[..at].trim(), v[at + 1..].trim());
    (!a.is_empty() && !b.is_empty()).then_some((a, b))
}

/// `YYYYMM` with a month 01..=12.
fn month_ok(m: &str) -> bool {
    m.len() == 6
        && m.bytes().all(|b| b.is_ascii_digit())
        && matches!(m[4..].parse::<u32>(), Ok(1..=12))
}

/// The API's refusal as the search's: its field when it names one.
fn refused(p: Problem, default_field: &'static str) -> Bad {
    let field = match p.field.as_deref() {
        Some("platform") => "platform",
        Some("platform_order_id") => "platform_order_id",
        _ => default_field,
    };
    bad(
        field,
        format!("{} ({} {})", p.detail, p.status.as_u16(), p.code),
    )
}

/// Where a search goes, or why it cannot.
async fn target(api: &Api<'_>, kind: &str, v: &str) -> Result<String, Bad> {
    let Some((_, label, hint)) = KINDS.iter().find(|(k, _, _)| *k == kind) else {
        return Err(bad(
            "kind",
            format!(
                "choose one of: {}",
                KINDS.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    if v.is_empty() {
        return Err(bad(
            "q",
            format!("give a {} to search for ({hint})", label.to_lowercase()),
        ));
    }
    if v.len() > 256 {
        return Err(bad("q", "at most 256 characters"));
    }
    match kind {
        "wallet" => {
            api.read(&format!("/v1/wallets/{}", enc(v)))
                .await
                .map_err(|p| refused(p, "q"))?;
            Ok(format!("/console/wallets/{}", enc(v)))
        }
        "user" => Ok(format!("/console/users/{}", enc(v))),
        "withdrawal" => {
            api.read(&format!("/v1/withdrawals/{}", enc(v)))
                .await
                .map_err(|p| refused(p, "q"))?;
            Ok(format!("/console/withdrawals/{}", enc(v)))
        }
        "order" => {
            let (platform, id) = v
                .split_once(['/', ':', ' '])
                .filter(|(p, id)| !p.trim().is_empty() && !id.trim().is_empty())
                .ok_or_else(|| bad("q", format!("an order is {hint}")))?;
            let order = api
                .read(&format!(
                    "/v1/orders/{}/{}",
                    enc(platform.trim()),
                    enc(id.trim())
                ))
                .await
                .map_err(|p| refused(p, "q"))?;
            Ok(stream_href(
                "affiliate_order",
                &text(&order, "order_id"),
                None,
            ))
        }
        "station_month" => {
            let (station, month) =
                pair(v).ok_or_else(|| bad("q", format!("a station-month is {hint}")))?;
            if !month_ok(month) {
                return Err(bad(
                    "month",
                    format!("must be YYYYMM with a month 01 to 12 (e.g. 202501), got {month:?}"),
                ));
            }
            Ok(format!("/console/bills/{}/{month}", enc(station)))
        }
        "stream" => {
            let (t, id) = v
                .split_once('/')
                .filter(|(t, id)| !t.is_empty() && !id.is_empty())
                .ok_or_else(|| bad("q", format!("a stream is {hint}")))?;
            Ok(stream_href(t, id, None))
        }
        _ => Ok(correlation_href(v)),
    }
}

/// What is known of one user: their wallets (found by the `{user_id}:{CURRENCY}`
/// convention and named by their withdrawals and commissions), with links to their
/// withdrawals and bookings.
async fn user_page(
    State(console): State<Console>,
    session: Session,
    Path(user_id): Path<String>,
) -> Response {
    let title = format!("User {user_id}");
    let api = session.api(&console);
    let u = enc(&user_id);
    let mut candidates: BTreeSet<String> = PROBED_CURRENCIES
        .iter()
        .map(|c| format!("{user_id}:{c}"))
        .collect();
    let withdrawals = api
        .read(&format!("/v1/withdrawals?user_id={u}&limit=100"))
        .await
        .ok();
    let commissions = api
        .read(&format!("/v1/commissions?user_id={u}&limit=100"))
        .await
        .ok();
    for (page, key) in [(&withdrawals, "withdrawals"), (&commissions, "commissions")] {
        for row in page
            .as_ref()
            .and_then(|p| p[key].as_array())
            .into_iter()
            .flatten()
        {
            let w = text(row, "wallet_id");
            if !w.is_empty() {
                candidates.insert(w);
            }
        }
    }
    let mut wallets = Vec::new();
    for w in &candidates {
        if let Ok(view) = api.read(&format!("/v1/wallets/{}", enc(w))).await {
            wallets.push(view);
        }
    }
    let payout_profile = api
        .read(&format!("/v1/users/{u}/payout-profile"))
        .await
        .ok();
    let withdrawal_count = withdrawals
        .as_ref()
        .and_then(|p| p["withdrawals"].as_array())
        .map(Vec::len);
    let body = html! {
        h2 { "Wallets" }
        @if wallets.is_empty() {
            p.muted #no-wallets { "No wallet found for this user (looked for " code { (user_id) ":CURRENCY" } " in " (PROBED_CURRENCIES.join(", ")) " and in the user's withdrawals and commissions)." }
        } @else {
            table #user-wallets {
                thead { tr { th { "Wallet" } th.num { "Pending" } th.num { "Available" } th.num { "Frozen" } th.num { "Risk hold" } } }
                tbody {
                    @for w in &wallets {
                        @let id = text(w, "wallet_id");
                        @let cur = text(w, "currency");
                        tr data-wallet=(id) {
                            td { a href=(format!("/console/wallets/{}", enc(&id))) { code { (id) } } }
                            @for b in ["pending", "available", "frozen", "risk_hold"] {
                                @let m = int(w, &format!("{b}_minor"));
                                td.num data-minor=(m) { (money(m, &cur)) }
                            }
                        }
                    }
                }
            }
        }
        form.inline #other-wallet method="get" action="/console" {
            input type="hidden" name="kind" value="wallet";
            label { "A wallet in another currency " input type="search" name="q" value=(format!("{user_id}:")) size="24"; }
            " " button type="submit" { "Open" }
        }
        h2 { "Elsewhere" }
        ul {
            li { a #user-withdrawals href=(format!("/console/withdrawals?user_id={u}")) { "Withdrawals" }
                @if let Some(n) = withdrawal_count { " (" (n) @if n == 100 { "+" } ")" } }
            li { a #user-bookings href=(format!("/console/bookings?user_id={u}")) { "Bookings" } }
        }
        @if let Some(p) = &payout_profile {
            h2 { "Payout profile" }
            (layout::json_block(p))
        }
    };
    layout::ok(layout::page(&session, &title, "/console", body))
}

/// The events of one correlation id (`GET /v1/audit/events?correlation_id=`), paged
/// by position, each linked to its event page and its stream.
async fn correlation_page(
    State(console): State<Console>,
    session: Session,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let id = q.get("correlation_id").map(|s| s.trim()).unwrap_or("");
    let title = format!("Correlation {id}");
    if id.is_empty() {
        let b = bad(
            "correlation_id",
            "give the correlation id whose events to list",
        );
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            layout::page(
                &session,
                "Search",
                "/console",
                form("correlation", "", Some(&b)),
            ),
        )
            .into_response();
    }
    let after = match q.get("after").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(a) if a >= 0 => a,
            _ => {
                let p = super::stream::bad_query(
                    "after",
                    format!("after: must be a whole number of at least 0, got {s:?}"),
                );
                return layout::problem_page(&session, &title, "/console", &p);
            }
        },
    };
    let api = session.api(&console);
    let page = match api
        .read(&format!(
            "/v1/audit/events?correlation_id={}&after={after}&limit=100",
            enc(id)
        ))
        .await
    {
        Ok(p) => p,
        Err(p) => return layout::problem_page(&session, &title, "/console", &p),
    };
    let events: Vec<Value> = page["events"].as_array().cloned().unwrap_or_default();
    let body = html! {
        p.muted { (events.len()) " event(s) with correlation id " code { (id) } @if after > 0 { " after position " (after) } "." }
        @if events.is_empty() { p #no-events { "No event carries this correlation id." } }
        @else {
            table #correlation-events {
                thead { tr { th.num { "Position" } th { "Stream" } th.num { "Seq" } th { "Type" } th { "Recorded" } th { "Actor" } th { "Event" } } }
                tbody {
                    @for e in &events {
                        @let (t, sid, seq) = (text(e, "aggregate_type"), text(e, "aggregate_id"), int(e, "sequence"));
                        tr data-position=(int(e, "global_position")) {
                            td.num { (int(e, "global_position")) }
                            td { a href=(stream_href(&t, &sid, Some(seq))) { code { (t) "/" (sid) } } }
                            td.num { (seq) }
                            td { code { (text(e, "event_type")) } }
                            td { (recorded(e)) }
                            td { code { (text(&e["metadata"], "actor")) } }
                            td { a.event-link href=(event_page_href(&t, &sid, seq)) { "event" } }
                        }
                    }
                }
            }
        }
        @if let Some(n) = page["next_after"].as_i64() {
            nav.pager { a #next-page rel="next" href=(format!("{}&after={n}", correlation_href(id))) { "later →" } }
        }
        p.muted { "Listed at " (time_ms(chrono::Utc::now().timestamp_millis())) "." }
    };
    layout::ok(layout::page(&session, &title, "/console", body))
}
