//! Reconciliation (issue 20 item 6): start one (`POST /v1/reconciliations`, with or
//! without repair), follow it (`GET /v1/reconciliations/{id}`, refreshed every second
//! until it ends), read its findings per class, start a repair run when the run found
//! projection drift, and read the API's HTML report through the console (a browser
//! cannot send the bearer key).
//!
//! The API keeps no list of past runs: a run is opened by its id (the form on the
//! page, or the redirect after starting one).
//!
//! Test hooks: `#start-reconciliation` (button), `#repair` (checkbox), `#open-run`
//! (form); on a run's page `#reconciliation-live[data-refresh]` holding
//! `#reconciliation-status[data-status]` (with `data-final` once it ended),
//! `#count-projection_drift`, `#count-event` (`data-count`, `data-remaining`),
//! `#findings-<class>` tables with rows `tr.finding[data-kind][data-wallet]`,
//! `#report-link`, `#repair-run` (button).

use super::super::api::enc;
use super::super::layout::{self, group};
use super::super::session::Session;
use super::super::Console;
use super::fields::{int, text};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;

const ACTIVE: &str = "/console/reconciliations";
/// The finding classes, as the API names them, and how the page titles them.
const CLASSES: &[(&str, &str)] = &[
    (
        "projection_drift",
        "Projection drift (a row differs from the replay: repairable by a scoped rebuild)",
    ),
    (
        "event",
        "Event (the events themselves are wrong: manual, never repaired automatically)",
    ),
];

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/reconciliations", get(index).post(start))
        .route("/console/reconciliations/{id}", get(run_page))
        .route("/console/reconciliations/{id}/progress", get(run_progress))
        .route("/console/reconciliations/{id}/report", get(report))
}

async fn index(session: Session, Query(q): Query<HashMap<String, String>>) -> Response {
    // Opening a run by id: a GET form, checked here so a bad id names its field.
    if let Some(id) = q.get("id") {
        let id = id.trim();
        if id.is_empty() || id.len() > 128 || id.contains('/') {
            let p = super::super::api::Problem {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: "INVALID_FIELD".to_owned(),
                field: Some("id".to_owned()),
                detail: "give a reconciliation id (1 to 128 characters, no '/')".to_owned(),
            };
            return layout::problem_page(&session, "Reconciliation", ACTIVE, &p);
        }
        return Redirect::to(&format!("/console/reconciliations/{}", enc(id))).into_response();
    }
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        p {
            "A reconciliation replays the wallet events up to the projection's checkpoint and compares the replay with the projected rows, "
            "the commissions, the withdrawals and the affiliate projections. Findings come in two classes: "
            em { "projection drift" } " (a repair rebuilds the wallet's rows and checks again) and " em { "event" } " (manual)."
        }
        @if session.can_act() {
            h2 { "Start one" }
            form.inline #start-form method="post" action="/console/reconciliations" {
                input type="hidden" name="csrf" value=(session.csrf());
                label { input #repair type="checkbox" name="repair" value="true"; " repair projection drift (rebuild the drifted wallets and check them again)" }
                " "
                button #start-reconciliation type="submit" data-action="start reconciliation" { "Start reconciliation" }
            }
        } @else {
            p.muted #no-actions { "Your role (" (session.role().as_str()) ") reads runs; starting one is for operators and admins." }
        }
        h2 { "Open a run" }
        p.muted { "The API keeps no list of runs: open one by the id it was given when it started (the CLI prints it too)." }
        form.inline #open-run method="get" action="/console/reconciliations" {
            label { "Run id " input #run-id type="text" name="id" required maxlength="128"; }
            " " button type="submit" { "Open" }
        }
    };
    layout::ok(layout::page(&session, "Reconciliation", ACTIVE, body))
}

async fn start(
    State(console): State<Console>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(r) = session.check_action(&form) {
        return r;
    }
    let repair = match form.get("repair").map(String::as_str) {
        None | Some("") | Some("false") => false,
        Some("true") | Some("on") => true,
        Some(other) => {
            let p = super::super::api::Problem {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                code: "INVALID_FIELD".to_owned(),
                field: Some("repair".to_owned()),
                detail: format!("{other:?} is not true or false"),
            };
            return layout::problem_page(&session, "Reconciliation refused", ACTIVE, &p);
        }
    };
    let api = session.api(&console);
    let answer = api
        .post(
            "/v1/reconciliations",
            Some(json!({ "repair": repair })),
            None,
        )
        .await;
    if !answer.ok() {
        return layout::problem_page(
            &session,
            "Reconciliation refused",
            ACTIVE,
            &answer.problem(),
        );
    }
    let id = text(&answer.body, "id");
    Redirect::to(&format!("/console/reconciliations/{}", enc(id))).into_response()
}

async fn run_page(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Response {
    let api = session.api(&console);
    let run = match api.read(&format!("/v1/reconciliations/{}", enc(&id))).await {
        Ok(v) => v,
        Err(p) => return layout::problem_page(&session, "Reconciliation", ACTIVE, &p),
    };
    let body = html! {
        table.facts #run-facts {
            tr { th { "Run" } td { code #run-id { (text(&run, "id")) } } }
            tr { th { "Repair" } td #run-repair { @if run["repair"] == true { "yes" } @else { "no" } } }
            tr { th { "Requested by" } td { (text(&run, "requested_by")) } }
            tr { th { "Started" } td { (text(&run, "started_at")) } }
        }
        p { a #report-link href=(format!("/console/reconciliations/{}/report", enc(&id))) { "The report page" } }
        div #reconciliation-live data-refresh=(format!("/console/reconciliations/{}/progress", enc(&id))) {
            (progress(&session, &run))
        }
        p { a href="/console/reconciliations" { "Start or open another run" } }
    };
    layout::ok(layout::page(&session, "Reconciliation", ACTIVE, body))
}

async fn run_progress(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Response {
    let api = session.api(&console);
    match api.read(&format!("/v1/reconciliations/{}", enc(&id))).await {
        Ok(run) => progress(&session, &run).into_response(),
        Err(p) => (
            p.status,
            html! { div #reconciliation-status data-status="unknown" data-final { (layout::problem_box(&p)) } },
        )
            .into_response(),
    }
}

/// The API's HTML report, fetched with the session's key and served as it is (the
/// API escapes every stored text on it).
async fn report(
    State(console): State<Console>,
    session: Session,
    Path(id): Path<String>,
) -> Response {
    let api = session.api(&console);
    let answer = api
        .get(&format!("/v1/reconciliations/{}/report.html", enc(&id)))
        .await;
    if !answer.ok() {
        return layout::problem_page(&session, "Reconciliation report", ACTIVE, &answer.problem());
    }
    let html = match &answer.body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// The live part of a run's page: its status, and once it succeeded the counts per
/// class, the findings per class and the repair; `data-final` once it ended.
fn progress(session: &Session, run: &Value) -> Markup {
    let status = text(run, "status");
    let done = status != "running";
    let succeeded = status == "succeeded";
    let findings = run["findings"].as_array().cloned().unwrap_or_default();
    let drift = run["counts"]["projection_drift"].as_i64().unwrap_or(0);
    let remaining_drift = run["remaining"]["projection_drift"].as_i64().unwrap_or(0);
    html! {
        div #reconciliation-status data-status=(status) data-final[done] {
            p {
                "Status " strong class=[match status { "succeeded" => Some("ok"), "running" => None, _ => Some("bad") }] { (status) }
                @if let Some(f) = run["finished_at"].as_str() { " · finished " (f) }
            }
            @if !done {
                progress #reconciliation-progress {}
                p.muted { "Replaying and comparing: this part of the page follows the run." }
            }
            @if let Some(e) = run["error"].as_str() { div.problem #run-error role="alert" { (e) } }
            @if succeeded {
                table.facts #run-report {
                    tr { th { "Up to position" } td.num { a href=(layout::event_href(int(run, "up_to_position"))) { (group(int(run, "up_to_position"))) } } }
                    tr { th { "Events checked" } td.num { (group(int(run, "events_checked"))) } }
                    tr { th { "Wallets checked" } td.num { (group(int(run, "wallets_checked"))) } }
                    tr { th { "Commissions checked" } td.num { (group(int(run, "commissions_checked"))) } }
                    tr { th { "Withdrawals checked" } td.num { (group(int(run, "withdrawals_checked"))) } }
                    tr { th { "Duration" } td.num { (group(int(run, "duration_ms"))) " ms" } }
                    @for p in run["projections_checked"].as_array().into_iter().flatten() {
                        tr { th { "Projection " (text(p, "name")) } td.num { (group(int(p, "rows_checked"))) " rows up to " (group(int(p, "up_to_position"))) } }
                    }
                }
                h2 { "Findings per class" }
                table #counts {
                    thead { tr { th { "Class" } th.num { "Found" } th.num { "Remaining" } } }
                    tbody {
                        @for (class, _) in CLASSES {
                            @let found = run["counts"][*class].as_i64().unwrap_or(0);
                            @let left = run["remaining"][*class].as_i64().unwrap_or(0);
                            tr id=(format!("count-{class}")) data-count=(found) data-remaining=(left) {
                                td { (class) } td.num class=[(found > 0).then_some("bad")] { (group(found)) } td.num { (group(left)) }
                            }
                        }
                    }
                }
                @if let Some(o) = run["repair_outcome"].as_object() {
                    p #repair-outcome {
                        "Repair: " (o.get("wallets_rebuilt").and_then(Value::as_i64).unwrap_or(0)) " wallets rebuilt, "
                        (o.get("wallets_failed").and_then(Value::as_i64).unwrap_or(0)) " failed; re-checked at position "
                        (o.get("recheck_position").and_then(Value::as_i64).unwrap_or(0)) "."
                    }
                }
                @if run["findings_truncated"] == true {
                    p.bad { "Truncated: only the first " (findings.len()) " findings are listed; the counts above are exact." }
                }
                @for (class, title) in CLASSES {
                    @let rows = findings.iter().filter(|f| f["class"] == *class).collect::<Vec<_>>();
                    h3 { (title) " · " (rows.len()) " listed" }
                    @if rows.is_empty() {
                        p.muted { "None." }
                    } @else {
                        table id=(format!("findings-{class}")) {
                            thead { tr { th { "Kind" } th { "Wallet" } th { "Table / key" } th { "Detail" } th { "Expected" } th { "Actual" } th { "Events" } th { "Repair" } } }
                            tbody {
                                @for f in rows {
                                    tr.finding data-kind=(text(f, "kind")) data-wallet=(text(f, "wallet_id")) {
                                        td { (text(f, "kind")) }
                                        td { @if text(f, "wallet_id").is_empty() { (f["projection"].as_str().unwrap_or("—")) } @else {
                                            a href=(layout::stream_href("wallet", text(f, "wallet_id"), None)) { (text(f, "wallet_id")) } } }
                                        td { (text(f, "table")) br; code { (text(f, "key")) } }
                                        td { (text(f, "detail")) }
                                        td { @if f["expected"].is_null() { "—" } @else { code { (f["expected"].to_string()) } } }
                                        td { @if f["actual"].is_null() { "—" } @else { code { (f["actual"].to_string()) } } }
                                        td { @for e in f["events"].as_array().into_iter().flatten() {
                                            a href=(layout::event_href(int(e, "global_position"))) { (text(e, "stream")) " #" (int(e, "sequence")) } " "
                                        } }
                                        td { (text(f, "repair"))
                                            @match f["repaired"].as_bool() { Some(true) => { " · " span.ok { "repaired" } } Some(false) => { " · " span.bad { "not repaired" } } None => {} } }
                                    }
                                }
                            }
                        }
                    }
                }
                @if remaining_drift > 0 || (drift > 0 && run["repair"] != true) {
                    h2 { "Repair" }
                    p { "This run found projection drift the API can repair: a new run with repair rebuilds the drifted wallets and checks them again (event findings are never repaired)." }
                    (layout::action(session, "/console/reconciliations", "repair-run", "Start a run with repair", &[("repair", "true")]))
                    @if !session.can_act() { p.muted { "Repairs are for operators and admins." } }
                }
            }
        }
    }
}
