//! The stream page (`/console/streams/{type}/{id}`): one aggregate's event timeline,
//! paged by sequence (`?from=`), each event with its sequence, global position, type,
//! time, metadata, payload and the version its payload is served in (stored events
//! are upcast on read, never rewritten), and the stream's hash-chain verification
//! (`POST /v1/audit/verify` for that stream, open to every role).
//!
//! The event page ("why", [`event`]) lives at
//! `/console/streams/{type}/{id}/events/{sequence}` ([`event_page_href`]);
//! `/console/events/{position}` (`layout::event_href`) finds the event at a global
//! position with `GET /v1/audit/events/{position}` and redirects there.

mod event;

pub(super) use event::{bucket_of, wallet_state_at};

use super::super::api::{enc, Problem};
use super::super::layout::{self, json_block, time_ms};
use super::super::session::Session;
use super::super::Console;
pub(super) use super::fields::int;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Events per stream page, by default and at most.
const PAGE_DEFAULT: i64 = 50;
const PAGE_MAX: i64 = 500;

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route(
            "/console/streams/{aggregate_type}/{aggregate_id}",
            get(stream_page),
        )
        .route(
            "/console/streams/{aggregate_type}/{aggregate_id}/events/{sequence}",
            get(event::event_page),
        )
        .route("/console/events/{position}", get(event::by_position))
}

/// The page of one event ("why"): the stream and the sequence name it.
pub(super) fn event_page_href(aggregate_type: &str, aggregate_id: &str, sequence: i64) -> String {
    format!(
        "/console/streams/{}/{}/events/{sequence}",
        enc(aggregate_type),
        enc(aggregate_id)
    )
}

/// The events sharing a correlation id (the search's listing).
pub(super) fn correlation_href(correlation_id: &str) -> String {
    format!("/console/events?correlation_id={}", enc(correlation_id))
}

/// `v[key]` as text ("" when absent; numbers as their digits).
pub(super) fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A query value as a positive integer, or the message naming the field.
pub(super) fn positive(q: &HashMap<String, String>, field: &str) -> Result<Option<i64>, String> {
    match q.get(field).map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!(
                "{field}: must be a whole number of at least 1, got {s:?}"
            )),
        },
    }
}

/// A refusal of the console's own query validation (422, naming the field).
pub(super) fn bad_query(field: &str, detail: String) -> Problem {
    Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "INVALID_FIELD".to_owned(),
        field: Some(field.to_owned()),
        detail,
    }
}

/// An event's schema versions, from the API's view: the version it was written in
/// (`stored_version`) and the one its payload is served in after upcasting
/// (`event_version`). Stored rows are never rewritten.
pub(super) fn upcast_note(e: &Value) -> String {
    let (stored, served) = (int(e, "stored_version"), int(e, "event_version"));
    if stored == served {
        format!("stored and served as v{served}")
    } else {
        format!("stored as v{stored}, upcast on read to v{served}")
    }
}

/// One event's metadata as a definition list (the correlation id links to its search).
pub(super) fn metadata_list(m: &Value) -> Markup {
    let known = [
        "actor",
        "correlation_id",
        "causation_id",
        "command_id",
        "request_id",
        "trace_id",
        "country_code",
        "event_id",
        "recorded_at",
    ];
    html! {
        dl.metadata {
            @for k in known {
                @let v = text(m, k);
                dt { (k) }
                dd data-field=(k) {
                    @if v.is_empty() { span.muted { "—" } }
                    @else if k == "correlation_id" { a href=(correlation_href(&v)) { code { (v) } } }
                    @else { code { (v) } }
                }
            }
            @if let Some(o) = m.as_object() {
                @for (k, v) in o.iter().filter(|(k, _)| !known.contains(&k.as_str())) {
                    dt { (k) } dd data-field=(k) { code { (v) } }
                }
            }
        }
    }
}

async fn stream_page(
    State(console): State<Console>,
    session: Session,
    Path((aggregate_type, aggregate_id)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let title = format!("Stream {aggregate_type}/{aggregate_id}");
    let from = match positive(&q, "from") {
        Ok(f) => f.unwrap_or(1),
        Err(m) => return layout::problem_page(&session, &title, "", &bad_query("from", m)),
    };
    let limit = match positive(&q, "limit") {
        Ok(l) => l.unwrap_or(PAGE_DEFAULT).min(PAGE_MAX),
        Err(m) => return layout::problem_page(&session, &title, "", &bad_query("limit", m)),
    };
    let api = session.api(&console);
    let path = format!(
        "/v1/streams/{}/{}/events?from={from}&limit={limit}",
        enc(&aggregate_type),
        enc(&aggregate_id)
    );
    let page = match api.read(&path).await {
        Ok(p) => p,
        Err(p) => return layout::problem_page(&session, &title, "", &p),
    };
    let events = page["events"].as_array().cloned().unwrap_or_default();
    if events.is_empty() && from == 1 {
        let p = Problem {
            status: StatusCode::NOT_FOUND,
            code: "STREAM_NOT_FOUND".to_owned(),
            field: None,
            detail: format!("no event in stream {aggregate_type}/{aggregate_id}"),
        };
        return layout::problem_page(&session, &title, "", &p);
    }
    let verify = api
        .post(
            "/v1/audit/verify",
            Some(json!({"stream": format!("{aggregate_type}/{aggregate_id}")})),
            None,
        )
        .await;
    let next_from = page["next_from"].as_i64();
    let here = |from: i64| {
        format!(
            "/console/streams/{}/{}?from={from}&limit={limit}",
            enc(&aggregate_type),
            enc(&aggregate_id)
        )
    };
    let body = html! {
        p {
            @if aggregate_type == "wallet" {
                a #wallet-link href=(format!("/console/wallets/{}", enc(&aggregate_id))) { "Wallet page (balances, ledger, as of)" }
                " · "
            }
            "Events " (from) " to " (from + events.len() as i64 - 1) " of stream "
            code { (aggregate_type) "/" (aggregate_id) }
        }
        (chain_status(&verify))
        nav.pager {
            @if from > 1 { a #prev-page rel="prev" href=(here((from - limit).max(1))) { "← earlier" } }
            @if let Some(n) = next_from { " " a #next-page rel="next" href=(here(n)) { "later →" } }
        }
        ol.timeline {
            @for e in &events {
                @let seq = int(e, "sequence");
                @let pos = int(e, "global_position");
                @let et = text(e, "event_type");
                @let ver = int(e, "event_version");
                li.event id=(format!("seq-{seq}")) data-sequence=(seq) data-position=(pos) data-type=(et) {
                    h3 {
                        a href=(event_page_href(&aggregate_type, &aggregate_id, seq)) { "#" (seq) " " (et) }
                    }
                    p.muted {
                        "position " span.num.position { (pos) }
                        " · " (recorded(e))
                        " · event_version " span.event-version data-version=(ver) { (ver) }
                    }
                    p.upcast.muted data-stored-version=(int(e, "stored_version")) { (upcast_note(e)) }
                    details {
                        summary { "metadata and payload" }
                        (metadata_list(&e["metadata"]))
                        (json_block(&e["payload"]))
                        p.muted { "hash " code { (text(e, "hash")) } }
                    }
                }
            }
        }
        nav.pager {
            @if from > 1 { a rel="prev" href=(here((from - limit).max(1))) { "← earlier" } }
            @if let Some(n) = next_from { " " a rel="next" href=(here(n)) { "later →" } }
        }
    };
    layout::ok(layout::page(&session, &title, "", body))
}

/// `recorded_at` of an event view (RFC 3339) as the console writes times.
pub(super) fn recorded(e: &Value) -> String {
    let t = text(e, "recorded_at");
    chrono::DateTime::parse_from_rfc3339(&t)
        .map(|d| time_ms(d.timestamp_millis()))
        .unwrap_or(t)
}

/// The stream's hash-chain verification: ok, or its findings.
fn chain_status(verify: &super::super::api::Answer) -> Markup {
    if !verify.ok() {
        let p = verify.problem();
        return html! {
            div #chain-status.bad data-ok="false" {
                "Hash chain not verified: " (layout::problem_box(&p))
            }
        };
    }
    let r = &verify.body;
    let ok = r["ok"].as_bool().unwrap_or(false);
    let findings = r["findings"].as_array().cloned().unwrap_or_default();
    html! {
        div #chain-status class=(if ok { "ok" } else { "bad" }) data-ok=(ok) {
            @if ok {
                "Hash chain ok: " (int(r, "events_checked")) " events verified"
            } @else {
                "Hash chain BROKEN: " (int(r, "findings_count")) " finding(s)"
                ul.findings {
                    @for f in &findings {
                        li data-position=(int(f, "global_position")) {
                            strong { (text(f, "kind")) } " at position " (int(f, "global_position"))
                            @if let Some(s) = f["sequence"].as_i64() { " (sequence " (s) ")" }
                            ": " (text(f, "detail"))
                        }
                    }
                }
            }
        }
    }
}
