//! The event page ("why"): one event of a stream with its metadata, payload and
//! served version, and for a wallet event the wallet's state just before and just
//! after it (`GET /v1/streams/wallet/{id}/state?as_of_position=`) with each bucket's
//! difference.

use super::super::super::api::{enc, Api, Problem};
use super::super::super::layout::{self, json_block, money, stream_href};
use super::super::super::session::Session;
use super::super::super::Console;
use super::{bad_query, event_page_href, int, metadata_list, recorded, text, upcast_note};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde_json::Value;

/// The four buckets, as the wallet state and views name them.
const BUCKETS: [&str; 4] = ["pending", "available", "frozen", "risk_hold"];

/// A bucket's figure in a wallet state (`state.balances`) or view (`*_minor`).
pub(in super::super) fn bucket_of(v: &Value, bucket: &str) -> i64 {
    let key = format!("{bucket}_minor");
    v.get("balances")
        .and_then(|b| b.get(&key))
        .or_else(|| v.get(&key))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The wallet's state as of a global position (`state` of the API's answer).
pub(in super::super) async fn wallet_state_at(
    api: &Api<'_>,
    wallet_id: &str,
    as_of: &str,
) -> Result<Value, Problem> {
    api.read(&format!(
        "/v1/streams/wallet/{}/state?{as_of}",
        enc(wallet_id)
    ))
    .await
}

fn not_found(detail: String) -> Problem {
    Problem {
        status: StatusCode::NOT_FOUND,
        code: "EVENT_NOT_FOUND".to_owned(),
        field: None,
        detail,
    }
}

pub(super) async fn event_page(
    State(console): State<Console>,
    session: Session,
    Path((aggregate_type, aggregate_id, sequence)): Path<(String, String, String)>,
) -> Response {
    let title = format!("Event {aggregate_type}/{aggregate_id} #{sequence}");
    let sequence = match sequence.parse::<i64>() {
        Ok(s) if s >= 1 => s,
        _ => {
            let p = bad_query(
                "sequence",
                format!("sequence: must be a whole number of at least 1, got {sequence:?}"),
            );
            return layout::problem_page(&session, &title, "", &p);
        }
    };
    let api = session.api(&console);
    let page = match api
        .read(&format!(
            "/v1/streams/{}/{}/events?from={sequence}&limit=2",
            enc(&aggregate_type),
            enc(&aggregate_id)
        ))
        .await
    {
        Ok(p) => p,
        Err(p) => return layout::problem_page(&session, &title, "", &p),
    };
    let Some(e) = page["events"].as_array().and_then(|a| a.first()).cloned() else {
        let p = not_found(format!(
            "stream {aggregate_type}/{aggregate_id} has no event {sequence}"
        ));
        return layout::problem_page(&session, &title, "", &p);
    };
    let has_next = page["events"].as_array().is_some_and(|a| a.len() > 1);
    let position = int(&e, "global_position");
    let event_type = text(&e, "event_type");
    let version = int(&e, "event_version");
    // A wallet event: the state before and after it.
    let states = if aggregate_type == "wallet" {
        let before = wallet_state_at(
            &api,
            &aggregate_id,
            &format!("as_of_position={}", position - 1),
        )
        .await;
        let after =
            wallet_state_at(&api, &aggregate_id, &format!("as_of_position={position}")).await;
        Some((before, after))
    } else {
        None
    };
    let m = &e["metadata"];
    let body = html! {
        dl.event #event data-position=(position) data-sequence=(sequence) data-type=(event_type) {
            dt { "Stream" }
            dd { a #stream-link href=(stream_href(&aggregate_type, &aggregate_id, Some(sequence))) { code { (aggregate_type) "/" (aggregate_id) } } }
            dt { "Sequence" } dd #sequence { (sequence) }
            dt { "Global position" } dd #position { (position) }
            dt { "Type" } dd #event-type { code { (event_type) } }
            dt { "Recorded" } dd #recorded-at { (recorded(&e)) }
            dt { "Event id" } dd { code { (text(&e, "event_id")) } }
            dt { "Schema version" } dd #event-version data-version=(version) { "v" (version) " · " span.muted { (upcast_note(&e)) } }
            dt { "Hash" } dd { code { (text(&e, "hash")) } }
        }
        nav.pager {
            @if sequence > 1 { a #prev-event rel="prev" href=(event_page_href(&aggregate_type, &aggregate_id, sequence - 1)) { "← previous event" } " " }
            @if has_next { a #next-event rel="next" href=(event_page_href(&aggregate_type, &aggregate_id, sequence + 1)) { "next event →" } }
        }
        @if let Some((before, after)) = &states {
            h2 { "Wallet state before and after" }
            @match (before, after) {
                (Ok(b), Ok(a)) => {
                    @let currency = text(&a["state"], "currency");
                    table.buckets #state-diff {
                        thead { tr { th { "Bucket" } th.num { "Before (position " (int(b, "position")) ")" } th.num { "After (position " (int(a, "position")) ")" } th.num { "Difference" } } }
                        tbody {
                            @for bucket in BUCKETS {
                                @let (x, y) = (bucket_of(&b["state"], bucket), bucket_of(&a["state"], bucket));
                                @let d = y.checked_sub(x);
                                tr data-bucket=(bucket) {
                                    td { (bucket) }
                                    td.num id=(format!("before-{bucket}")) data-minor=(x) { (money(x, &currency)) }
                                    td.num id=(format!("after-{bucket}")) data-minor=(y) { (money(y, &currency)) }
                                    td.num.changed[d.unwrap_or(0) != 0] id=(format!("diff-{bucket}")) data-minor=(d.map(|d| d.to_string()).unwrap_or_default()) {
                                        @match d {
                                            Some(d) => { @if d > 0 { "+" } (layout::group(d)) }
                                            None => { "overflow" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    p { a href=(format!("/console/wallets/{}?as_of_position={position}", enc(&aggregate_id))) { "The wallet as of this event" } }
                }
                (Err(p), _) | (_, Err(p)) => { (layout::problem_box(p)) }
            }
        }
        h2 { "Metadata" }
        (metadata_list(m))
        h2 { "Payload" }
        (json_block(&e["payload"]))
    };
    layout::ok(layout::page(&session, &title, "", body))
}

/// `/console/events/{position}`: the event at that global position (303 to its page
/// in its stream), read with `GET /v1/audit/events/{position}`.
pub(super) async fn by_position(
    State(console): State<Console>,
    session: Session,
    Path(position): Path<String>,
) -> Response {
    let title = format!("Event at position {position}");
    let position = match position.parse::<i64>() {
        Ok(p) if p >= 1 => p,
        _ => {
            let p = bad_query(
                "position",
                format!("position: must be a whole number of at least 1, got {position:?}"),
            );
            return layout::problem_page(&session, &title, "", &p);
        }
    };
    match session
        .api(&console)
        .read(&format!("/v1/audit/events/{position}"))
        .await
    {
        Ok(e) => Redirect::to(&event_page_href(
            &text(&e, "aggregate_type"),
            &text(&e, "aggregate_id"),
            int(&e, "sequence"),
        ))
        .into_response(),
        Err(p) => layout::problem_page(&session, &title, "", &p),
    }
}
