//! Projections (issue 20 item 5): every projector's position, head, lag (events and
//! seconds, and a chart of the last hour from the console's own samples), last error
//! and stuck flag, from `GET /v1/projections`; a rebuild form per projector (full, or
//! scoped to one wallet: `POST /v1/projections/{name}/rebuild`), and the rebuild's
//! page, refreshed every second from `GET /v1/projections/rebuilds/{id}` until it
//! ends.
//!
//! Test hooks: table rows `#proj-<name>` with `data-position`, `data-head`,
//! `data-lag-events`; charts `figure.chart[data-title="lag of <name>"]`; rebuild
//! forms `#rebuild-form-<name>` with button `#rebuild-<name>` and input
//! `#rebuild-scope-<name>`; on the rebuild page `#rebuild-live[data-refresh]` holding
//! `#rebuild-status[data-status]` (with `data-final` once it ended).

use super::super::api::enc;
use super::super::layout::{self, chart, group, Series};
use super::super::session::Session;
use super::super::Console;
use super::fields::{id_part, int, text};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

const ACTIVE: &str = "/console/projections";

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/projections", get(list))
        .route("/console/projections/{name}/rebuild", post(start_rebuild))
        .route("/console/projections/rebuilds/{id}", get(rebuild_page))
        .route(
            "/console/projections/rebuilds/{id}/progress",
            get(rebuild_progress),
        )
}

/// Milliseconds as seconds with one decimal (lag display only).
fn seconds(ms: i64) -> String {
    format!("{}.{}", group(ms / 1000), (ms % 1000).abs() / 100)
}

async fn list(
    State(console): State<Console>,
    session: Session,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let api = session.api(&console);
    let projectors = match api.read("/v1/projections").await {
        Ok(v) => v.as_array().cloned().unwrap_or_default(),
        Err(p) => return layout::problem_page(&session, "Projections", ACTIVE, &p),
    };
    let samples = console.history.samples();
    let head = projectors.iter().map(|p| int(p, "head")).max().unwrap_or(0);
    let stuck = projectors.iter().filter(|p| p["stuck"] == true).count();
    let failing = projectors
        .iter()
        .filter(|p| !p["last_error"].is_null())
        .count();
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        div.cards {
            div.card { div.label { "Projectors" } div.value #projector-count data-count=(projectors.len()) { (projectors.len()) } }
            div.card { div.label { "Head of the log" } div.value #head-position data-position=(head) { (group(head)) } }
            div.card { div.label { "Stuck" } div.value #stuck-count class=[(stuck > 0).then_some("bad")] data-count=(stuck) { (stuck) } }
            div.card { div.label { "With an error" } div.value #error-count class=[(failing > 0).then_some("bad")] data-count=(failing) { (failing) } }
        }
        table #projections {
            thead { tr {
                th { "Projector" } th { "Version" } th.num { "Position" } th.num { "Head" }
                th.num { "Lag (events)" } th.num { "Lag (s)" } th { "Last error" } th { "Stuck" }
            } }
            tbody {
                @for p in &projectors {
                    @let name = text(p, "name");
                    tr id=(format!("proj-{}", id_part(name))) data-name=(name)
                        data-position=(int(p, "position")) data-head=(int(p, "head"))
                        data-lag-events=(int(p, "lag_events")) data-lag-ms=(int(p, "lag_ms")) {
                        td { strong { (name) } }
                        td.num { (int(p, "version")) }
                        td.num {
                            @if int(p, "position") > 0 {
                                a href=(layout::event_href(int(p, "position"))) title="the last event applied" { (group(int(p, "position"))) }
                            } @else { "0" }
                        }
                        td.num { (group(int(p, "head"))) }
                        td.num class=[(int(p, "lag_events") > 0).then_some("bad")] { (group(int(p, "lag_events"))) }
                        td.num { (seconds(int(p, "lag_ms"))) }
                        td {
                            @if let Some(e) = p["last_error"].as_str() {
                                span.bad { (e) }
                                @if let Some(at) = p["error_position"].as_i64() {
                                    " at " a href=(layout::event_href(at)) { "event " (group(at)) }
                                }
                                " · " (int(p, "retries")) " retries"
                                @if let Some(since) = p["failing_since_ms"].as_i64() { " since " (layout::time_ms(since)) }
                            } @else { span.ok { "none" } }
                        }
                        td { @if p["stuck"] == true { span.bad { "stuck" } } @else { span.ok { "no" } } }
                    }
                }
            }
        }
        h2 { "Lag over the last hour" }
        @if samples.is_empty() { p.muted { "No samples yet: the console samples every few seconds." } }
        @for p in &projectors {
            @let name = text(p, "name");
            @let points = samples.iter().filter_map(|s| s.projections.get(name).map(|l| (s.at_ms, l.lag_events as f64))).collect::<Vec<_>>();
            @let secs = samples.iter().filter_map(|s| s.projections.get(name).map(|l| (s.at_ms, l.lag_ms as f64 / 1000.0))).collect::<Vec<_>>();
            (chart(&format!("lag of {name}"), "events; seconds", &[
                Series { label: "lag (events)", points },
                Series { label: "lag (s)", points: secs },
            ]))
        }
        h2 { "Rebuild" }
        p.muted {
            "A full rebuild recomputes every row into shadow tables and swaps them in; a scoped one recomputes one wallet's rows in place. "
            "The API rebuilds the projections marked rebuildable; the others are rebuilt with "
            code { "factledger rebuild <name>" } "."
        }
        @if session.can_act() {
            @for p in projectors.iter().filter(|p| p["rebuildable"] == true) {
                @let name = text(p, "name");
                @let idp = id_part(name);
                form.inline method="post" id=(format!("rebuild-form-{idp}")) action=(format!("/console/projections/{}/rebuild", enc(name))) {
                    input type="hidden" name="csrf" value=(session.csrf());
                    strong { (name) } " "
                    label { "wallet id (empty: full rebuild) "
                        input type="text" name="wallet_id" id=(format!("rebuild-scope-{idp}")) maxlength="128" placeholder="full";
                    }
                    " "
                    button type="submit" id=(format!("rebuild-{idp}")) data-action="rebuild" { "Rebuild " (name) }
                }
            }
        } @else {
            p.muted #no-actions { "Your role (" (session.role().as_str()) ") reads; rebuilds are for operators and admins." }
        }
    };
    layout::ok(layout::page(&session, "Projections", ACTIVE, body))
}

async fn start_rebuild(
    State(console): State<Console>,
    session: Session,
    Path(name): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(r) = session.check_action(&form) {
        return r;
    }
    let wallet = form.get("wallet_id").map(|w| w.trim()).unwrap_or("");
    let body = if wallet.is_empty() {
        json!({})
    } else {
        json!({"scope": format!("wallet:{wallet}")})
    };
    let api = session.api(&console);
    let answer = api
        .post(
            &format!("/v1/projections/{}/rebuild", enc(&name)),
            Some(body),
            None,
        )
        .await;
    if !answer.ok() {
        return layout::problem_page(&session, "Rebuild refused", ACTIVE, &answer.problem());
    }
    let id = text(&answer.body, "id");
    Redirect::to(&format!("/console/projections/rebuilds/{}", enc(id))).into_response()
}

async fn rebuild_page(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Response {
    let api = session.api(&console);
    let status = match api
        .read(&format!("/v1/projections/rebuilds/{}", enc(&id)))
        .await
    {
        Ok(v) => v,
        Err(p) => return layout::problem_page(&session, "Rebuild", ACTIVE, &p),
    };
    let body = html! {
        table.facts #rebuild-facts {
            tr { th { "Rebuild" } td { code #rebuild-id { (text(&status, "id")) } } }
            tr { th { "Projection" } td #rebuild-projection { (text(&status, "projection")) } }
            tr { th { "Scope" } td #rebuild-scope { (status["scope"].as_str().unwrap_or("full")) } }
            tr { th { "Requested by" } td { (text(&status, "requested_by")) } }
            tr { th { "Started" } td { (text(&status, "started_at")) } }
        }
        div #rebuild-live data-refresh=(format!("/console/projections/rebuilds/{}/progress", enc(&id))) {
            (progress(&status))
        }
        p { a href="/console/projections" { "Back to the projections" } }
    };
    layout::ok(layout::page(&session, "Rebuild", ACTIVE, body))
}

async fn rebuild_progress(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Response {
    let api = session.api(&console);
    match api.read(&format!("/v1/projections/rebuilds/{}", enc(&id))).await {
        Ok(v) => progress(&v).into_response(),
        // The fragment of a refusal ends the refresh: it will not change by waiting.
        Err(p) => (
            p.status,
            html! { div #rebuild-status data-status="unknown" data-final { (layout::problem_box(&p)) } },
        )
            .into_response(),
    }
}

/// The live part of a rebuild's page: status, stage, a progress bar and the numbers;
/// `data-final` once it is no longer running.
fn progress(s: &Value) -> Markup {
    let status = text(s, "status");
    let done = status != "running";
    let target = int(s, "target_position").max(0);
    let position = int(s, "position").max(0);
    let value = if status == "succeeded" {
        target
    } else {
        position.min(target)
    };
    html! {
        div #rebuild-status data-status=(status) data-stage=(text(s, "stage"))
            data-position=(int(s, "position")) data-target=(target)
            data-events-applied=(int(s, "events_applied")) data-final[done] {
            p {
                "Status " strong class=[match status { "succeeded" => Some("ok"), "running" => None, _ => Some("bad") }] { (status) }
                " · stage " strong { (text(s, "stage")) }
            }
            progress #rebuild-progress max=(target.max(1)) value=(if target == 0 && status == "succeeded" { 1 } else { value }) {}
            table.facts {
                tr { th { "Position" } td.num { (group(int(s, "position"))) " of " (group(target)) } }
                tr { th { "Events applied" } td.num #rebuild-events-applied { (group(int(s, "events_applied"))) } }
                tr { th { "Events per second" } td.num { (group(int(s, "events_per_second"))) } }
                tr { th { "Updated" } td { (text(s, "updated_at")) } }
                @if let Some(f) = s["finished_at"].as_str() { tr { th { "Finished" } td #rebuild-finished { (f) } } }
                @if let Some(e) = s["error"].as_str() { tr { th { "Error" } td.bad #rebuild-error { (e) } } }
            }
        }
    }
}
