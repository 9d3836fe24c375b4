//! The wallet page (`/console/wallets/{wallet_id}`): the four buckets
//! (`GET /v1/wallets/{id}`), each with a "why" link to the event that last moved it;
//! the ledger paged (`GET /v1/wallets/{id}/ledger?cursor=&limit=`), every line linked
//! to its event; and the state **as of** a global position (a slider over the
//! stream's positions) or a time (a date picker), replayed by
//! `GET /v1/streams/wallet/{id}/state`.
//!
//! A bucket's "why" is the latest ledger line (at or before the as-of point) whose
//! delta moved that bucket, read back from there with the ledger's `before` paging
//! (usually one page); a bucket no line ever moved is explained by the event that
//! opened the wallet (sequence 1).

use super::super::api::{enc, Api, Problem};
use super::super::layout::{self, money, stream_href};
use super::super::session::Session;
use super::super::Console;
use super::stream::{bad_query, event_page_href, int, positive, text};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;

/// Ledger lines per page, by default and at most.
const PAGE_DEFAULT: i64 = 50;
const PAGE_MAX: i64 = 1000;
/// Pages of 1,000 ledger lines read back to find each bucket's last movement.
const SCAN_PAGES_MAX: usize = 100;

pub(super) fn routes() -> Router<Console> {
    Router::new().route("/console/wallets/{wallet_id}", get(wallet_page))
}

/// The bucket names the page shows, in order.
const BUCKETS: [&str; 4] = ["pending", "available", "frozen", "risk_hold"];

/// The as-of point asked for: a global position or a time (RFC 3339 or a
/// `datetime-local` value, read as UTC).
enum AsOf {
    Position(i64),
    Time(chrono::DateTime<chrono::Utc>),
}

impl AsOf {
    fn parse(q: &HashMap<String, String>) -> Result<Option<AsOf>, Problem> {
        let position = positive(q, "as_of_position").map_err(|m| bad_query("as_of_position", m))?;
        let time = q.get("as_of").map(|s| s.trim()).filter(|s| !s.is_empty());
        match (position, time) {
            (Some(_), Some(_)) => Err(bad_query(
                "as_of",
                "as_of: give either as_of_position or as_of, not both".to_owned(),
            )),
            (Some(p), None) => Ok(Some(AsOf::Position(p))),
            (None, Some(t)) => parse_time(t)
                .map(|t| Some(AsOf::Time(t)))
                .ok_or_else(|| {
                    bad_query(
                        "as_of",
                        format!("as_of: must be a time like 2025-01-31T23:59:59Z (RFC 3339) or 2025-01-31T23:59 (UTC), got {t:?}"),
                    )
                }),
            (None, None) => Ok(None),
        }
    }

    fn query(&self) -> String {
        match self {
            AsOf::Position(p) => format!("as_of_position={p}"),
            AsOf::Time(t) => format!(
                "as_of={}",
                enc(&t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
            ),
        }
    }
}

/// RFC 3339, or a `datetime-local` value (minutes or seconds) taken as UTC.
fn parse_time(t: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Some(d.with_timezone(&chrono::Utc));
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
    .map(|n| n.and_utc())
}

/// A ledger line that explains a bucket: its sequence and global position.
struct Line {
    sequence: i64,
    position: i64,
}

/// For each bucket, the newest ledger line before sequence `before` that moved it,
/// read back from there a page of 1,000 at a time until every bucket has one or the
/// ledger's start (at most [`SCAN_PAGES_MAX`] pages).
/// `complete` is false when the pages ran out first.
async fn last_moves(
    api: &Api<'_>,
    wallet_id: &str,
    mut before: i64,
) -> Result<([Option<Line>; 4], bool), Problem> {
    let mut found: [Option<Line>; 4] = [None, None, None, None];
    for _ in 0..SCAN_PAGES_MAX {
        let page = api
            .read(&format!(
                "/v1/wallets/{}/ledger?before={before}&limit=1000",
                enc(wallet_id)
            ))
            .await?;
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        for e in entries.iter().rev() {
            for (i, b) in BUCKETS.iter().enumerate() {
                if found[i].is_none() && int(e, &format!("delta_{b}_minor")) != 0 {
                    found[i] = Some(Line {
                        sequence: int(e, "sequence"),
                        position: int(e, "global_position"),
                    });
                }
            }
        }
        match page["previous_before"].as_i64() {
            Some(b) if found.iter().any(Option::is_none) => before = b,
            _ => return Ok((found, true)),
        }
    }
    Ok((found, false))
}

/// The cursor of the page of `limit` ledger lines before sequence `first` (None
/// when there are none).
async fn previous_cursor(
    api: &Api<'_>,
    wallet_id: &str,
    first: i64,
    limit: i64,
) -> Result<Option<i64>, Problem> {
    let page = api
        .read(&format!(
            "/v1/wallets/{}/ledger?before={first}&limit={limit}",
            enc(wallet_id)
        ))
        .await?;
    Ok(page["entries"]
        .as_array()
        .and_then(|e| e.first())
        .map(|e| int(e, "sequence") - 1))
}

/// The position of event `sequence` of the wallet's stream (None past its end).
async fn position_of(api: &Api<'_>, wallet_id: &str, sequence: i64) -> Option<i64> {
    let page = api
        .read(&format!(
            "/v1/streams/wallet/{}/events?from={sequence}&limit=1",
            enc(wallet_id)
        ))
        .await
        .ok()?;
    page["events"]
        .as_array()?
        .first()
        .map(|e| int(e, "global_position"))
}

async fn wallet_page(
    State(console): State<Console>,
    session: Session,
    Path(wallet_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let title = format!("Wallet {wallet_id}");
    let fail = |p: &Problem| layout::problem_page(&session, &title, "/console", p);
    let as_of = match AsOf::parse(&q) {
        Ok(a) => a,
        Err(p) => return fail(&p),
    };
    let cursor = match q.get("cursor").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(c) if c >= 0 => c,
            _ => {
                return fail(&bad_query(
                    "cursor",
                    format!("cursor: must be a whole number of at least 0, got {s:?}"),
                ))
            }
        },
    };
    let limit = match positive(&q, "limit") {
        Ok(l) => l.unwrap_or(PAGE_DEFAULT).min(PAGE_MAX),
        Err(m) => return fail(&bad_query("limit", m)),
    };
    let api = session.api(&console);
    let view = match api.read(&format!("/v1/wallets/{}", enc(&wallet_id))).await {
        Ok(v) => v,
        Err(p) => return fail(&p),
    };
    let currency = text(&view, "currency");
    let shown = match &as_of {
        Some(a) => match super::stream::wallet_state_at(&api, &wallet_id, &a.query()).await {
            Ok(s) => Some(s),
            Err(p) => return fail(&p),
        },
        None => None,
    };
    let ledger = match api
        .read(&format!(
            "/v1/wallets/{}/ledger?cursor={cursor}&limit={limit}",
            enc(&wallet_id)
        ))
        .await
    {
        Ok(l) => l,
        Err(p) => return fail(&p),
    };
    // The as-of cutoff: the stream version the as-of state applied.
    let before = shown
        .as_ref()
        .map(|s| int(s, "version") + 1)
        .unwrap_or(i64::MAX);
    let (why, complete) = match last_moves(&api, &wallet_id, before).await {
        Ok(w) => w,
        Err(p) => return fail(&p),
    };
    let first_position = position_of(&api, &wallet_id, 1).await.unwrap_or(1);
    let last_position = position_of(&api, &wallet_id, int(&view, "version").max(1))
        .await
        .unwrap_or(int(&view, "position"));
    let figures: Vec<i64> = BUCKETS
        .iter()
        .map(|b| match &shown {
            Some(s) => super::stream::bucket_of(&s["state"], b),
            None => int(&view, &format!("{b}_minor")),
        })
        .collect();
    let entries = ledger["entries"].as_array().cloned().unwrap_or_default();
    let prev_cursor = match entries.first() {
        Some(first) => match previous_cursor(&api, &wallet_id, int(first, "sequence"), limit).await
        {
            Ok(c) => c,
            Err(p) => return fail(&p),
        },
        None => None,
    };
    let here = |cursor: i64| {
        let mut h = format!(
            "/console/wallets/{}?cursor={cursor}&limit={limit}",
            enc(&wallet_id)
        );
        if let Some(a) = &as_of {
            h.push('&');
            h.push_str(&a.query());
        }
        h
    };
    let slider_value = shown
        .as_ref()
        .map(|s| int(s, "position"))
        .unwrap_or(last_position);
    let user_id = text(&view, "user_id");
    let body = html! {
        p.muted {
            "User " a #user-link href=(format!("/console/users/{}", enc(&user_id))) { code { (user_id) } }
            " · currency " (currency)
            " · version " span #version { (int(&view, "version")) }
            " · projection at position " (int(&view, "position"))
            " · " a #stream-link href=(stream_href("wallet", &wallet_id, None)) { "event stream" }
        }
        @if let Some(s) = &shown {
            p #as-of.notice data-position=(int(s, "position")) data-version=(int(s, "version")) {
                "As of position " (int(s, "position")) " (stream version " (int(s, "version")) ")"
                @if let Some(AsOf::Time(t)) = &as_of { ", the last event at or before " (t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) }
                ". " a #as-of-now href=(format!("/console/wallets/{}", enc(&wallet_id))) { "Back to now" }
            }
        }
        div.cards #buckets {
            @for (i, b) in BUCKETS.iter().enumerate() {
                div.card id=(format!("bucket-{b}")) data-bucket=(b) {
                    div.label { (b) }
                    div.value data-minor=(figures[i]) { (money(figures[i], &currency)) }
                    @match &why[i] {
                        Some(l) => a id=(format!("why-{b}")) data-position=(l.position) href=(event_page_href("wallet", &wallet_id, l.sequence)) { "why: event #" (l.sequence) " (position " (l.position) ")" },
                        None if complete => a id=(format!("why-{b}")) data-position=(first_position) href=(event_page_href("wallet", &wallet_id, 1)) { "why: never moved since the wallet opened" },
                        None => span.muted id=(format!("why-{b}")) { "not moved in the newest " (SCAN_PAGES_MAX * 1000) " ledger lines" },
                    }
                }
            }
        }
        (withdrawal_state(&view, &currency))
        h2 { "As of" }
        form.inline #as-of-position-form method="get" action=(format!("/console/wallets/{}", enc(&wallet_id))) data-autosubmit {
            label {
                "Position "
                input #as-of-position type="range" name="as_of_position" min=(first_position) max=(last_position.max(first_position)) step="1" value=(slider_value) data-show="as-of-position-value";
                " " output #as-of-position-value { (slider_value) }
            }
            " " button type="submit" { "Show" }
        }
        form.inline #as-of-time-form method="get" action=(format!("/console/wallets/{}", enc(&wallet_id))) data-autosubmit {
            label {
                "Time (UTC) "
                input #as-of-time type="datetime-local" name="as_of" step="1" value=(q.get("as_of").map(String::as_str).unwrap_or(""));
            }
            " " button type="submit" { "Show" }
        }
        h2 { "Ledger" }
        (ledger_table(&wallet_id, &entries, &currency))
        nav.pager {
            @if let Some(c) = prev_cursor { a #prev-page rel="prev" href=(here(c)) { "← previous" } " " }
            @if let Some(c) = ledger["next_cursor"].as_i64() { a #next-page rel="next" href=(here(c)) { "next →" } }
        }
    };
    layout::ok(layout::page(&session, &title, "/console", body))
}

/// Withdrawal blocks and open freezes, from the wallet view.
fn withdrawal_state(view: &Value, currency: &str) -> Markup {
    let blocks = view["withdrawal_blocks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let freezes = view["frozen_by"].as_array().cloned().unwrap_or_default();
    html! {
        @if !blocks.is_empty() {
            div.problem #withdrawal-blocks {
                "Withdrawals blocked by: "
                @for b in &blocks { code { (text(b, "ref_type")) "/" (text(b, "ref_id")) } " " (text(b, "reason")) "; " }
            }
        }
        @if !freezes.is_empty() {
            p #frozen-by { "Frozen for: "
                @for f in &freezes {
                    @let (rt, rid) = (text(f, "ref_type"), text(f, "ref_id"));
                    @if rt == "WITHDRAWAL" { a href=(format!("/console/withdrawals/{}", enc(&rid))) { code { (rt) "/" (rid) } } }
                    @else { code { (rt) "/" (rid) } }
                    " " (money(int(f, "amount_minor"), currency)) "; "
                }
            }
        }
    }
}

/// One page of ledger lines, each with its "why" link.
fn ledger_table(wallet_id: &str, entries: &[Value], currency: &str) -> Markup {
    html! {
        @if entries.is_empty() { p.muted #ledger-empty { "No ledger line on this page." } }
        @else {
            table #ledger {
                thead { tr {
                    th.num { "Seq" } th.num { "Position" } th { "Recorded" } th { "Entry" } th { "Reference" }
                    th.num { "Amount" } th.num { "Δ pending" } th.num { "Δ available" } th.num { "Δ frozen" } th.num { "Δ risk hold" }
                    th.num { "Available after" } th { "Why" }
                } }
                tbody {
                    @for e in entries {
                        @let seq = int(e, "sequence");
                        @let pos = int(e, "global_position");
                        tr data-position=(pos) data-sequence=(seq) {
                            td.num { (seq) } td.num { (pos) } td { (text(e, "recorded_at")) }
                            td { code { (text(e, "entry_type")) } }
                            td { code { (text(e, "ref_type")) "/" (text(e, "ref_id")) } }
                            td.num data-minor=(int(e, "amount_minor")) { (money(int(e, "amount_minor"), currency)) }
                            @for b in BUCKETS {
                                @let d = int(e, &format!("delta_{b}_minor"));
                                td.num data-bucket=(b) data-minor=(d) { @if d > 0 { "+" } (layout::group(d)) }
                            }
                            td.num data-minor=(int(e, "after_available_minor")) { (layout::group(int(e, "after_available_minor"))) }
                            td { a.why href=(event_page_href("wallet", wallet_id, seq)) { "why" } }
                        }
                    }
                }
            }
        }
    }
}
