//! Jobs and cron (issue 20 item 7): the queue by kind and status (`GET /v1/jobs`,
//! filtered by `kind` and `status`, paged by `after`), counts per kind × status, a
//! job's page with its three levels of success, attempts, last error and payload
//! (`GET /v1/jobs/{code}`), and the actions: retry (`POST /v1/jobs:retry`), kick
//! (`POST /v1/jobs/{code}:kick`), pause and resume (`POST /v1/jobs:pause` /
//! `:resume`, with an optional reason). The cron schedules ([`cron`]) close the page.
//!
//! Test hooks: `#jobs-paused[data-paused]`, `#job-counts` with cells
//! `#count-<kind>-<STATUS>[data-count]`, `#jobs` with rows `#job-<code>` (code made an
//! id: anything but letters, digits, `-` and `_` becomes `_`) carrying `data-code`,
//! `data-status`, `data-retry-count`; buttons `#retry-<code>`, `#kick-<code>`,
//! `#pause`, `#resume`; on a job's page `#job-status[data-status]`,
//! `#job-retry-count`, `#job-last-error`, `#level-scheduler`, `#level-round`,
//! `#level-business` (`data-ok`), `#job-payload`.

mod cron;

use super::super::api::{enc, Problem};
use super::super::layout::{self, group};
use super::super::session::Session;
use super::super::Console;
use super::fields::{id_part, int, text};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const ACTIVE: &str = "/console/jobs";
pub(super) const STATUSES: &[&str] = &["PENDING", "RUNNING", "SUCCESS", "FAILED", "CANCELLED"];
/// Jobs read to count per kind × status: pages of the API's largest page.
const COUNT_PAGE: i64 = 500;
const COUNT_PAGES_MAX: usize = 20;
/// Jobs listed per page.
const LIST_PAGE: i64 = 100;

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/jobs", get(list))
        .route("/console/jobs/pause", post(pause))
        .route("/console/jobs/resume", post(resume))
        .route("/console/jobs/{code}", get(show))
        .route("/console/jobs/{code}/retry", post(retry))
        .route("/console/jobs/{code}/kick", post(kick))
}

pub(super) fn job_href(code: &str) -> String {
    format!("/console/jobs/{}", enc(code))
}

fn invalid(field: &str, detail: String) -> Problem {
    Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        code: "INVALID_FIELD".to_owned(),
        field: Some(field.to_owned()),
        detail,
    }
}

/// The query string for `GET /v1/jobs` from the page's filters (checked by the API,
/// which names the field it refuses); `after` is checked here.
fn filters(q: &HashMap<String, String>) -> Result<Vec<(&'static str, String)>, Problem> {
    let mut out = Vec::new();
    for k in ["kind", "status"] {
        if let Some(v) = q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            out.push((k, v.to_owned()));
        }
    }
    if let Some(a) = q.get("after").map(|v| v.trim()).filter(|v| !v.is_empty()) {
        let n: i64 = a.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
            invalid(
                "after",
                format!("{a:?} is not a job id (a whole number ≥ 0)"),
            )
        })?;
        out.push(("after", n.to_string()));
    }
    Ok(out)
}

fn query(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Counts per kind × status over every job (at most [`COUNT_PAGES_MAX`] pages), and
/// whether the count stopped early.
async fn counts(
    api: &super::super::api::Api<'_>,
) -> Result<(BTreeMap<String, BTreeMap<String, i64>>, bool), Problem> {
    let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    let mut after = 0i64;
    for _ in 0..COUNT_PAGES_MAX {
        let page = api
            .read(&format!("/v1/jobs?limit={COUNT_PAGE}&after={after}"))
            .await?;
        for j in page["jobs"].as_array().into_iter().flatten() {
            *out.entry(text(j, "kind").to_owned())
                .or_default()
                .entry(text(j, "status").to_owned())
                .or_default() += 1;
        }
        match page["next_after"].as_i64() {
            Some(n) => after = n,
            None => return Ok((out, false)),
        }
    }
    Ok((out, true))
}

async fn list(
    State(console): State<Console>,
    session: Session,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let title = "Jobs & cron";
    let api = session.api(&console);
    let pairs = match filters(&q) {
        Ok(p) => p,
        Err(p) => return layout::problem_page(&session, title, ACTIVE, &p),
    };
    let mut listed = pairs.clone();
    listed.push(("limit", LIST_PAGE.to_string()));
    let page = match api.read(&format!("/v1/jobs?{}", query(&listed))).await {
        Ok(v) => v,
        Err(p) => return layout::problem_page(&session, title, ACTIVE, &p),
    };
    let (counted, capped) = match counts(&api).await {
        Ok(c) => c,
        Err(p) => return layout::problem_page(&session, title, ACTIVE, &p),
    };
    let cron = api.read("/v1/cron").await;
    let paused = page["paused"] == true;
    let jobs = page["jobs"].as_array().cloned().unwrap_or_default();
    let kind = q.get("kind").map(|k| k.trim()).unwrap_or("");
    let status = q
        .get("status")
        .map(|s| s.trim().to_ascii_uppercase())
        .unwrap_or_default();
    let kinds: BTreeSet<&str> = counted
        .keys()
        .map(String::as_str)
        .chain((!kind.is_empty()).then_some(kind))
        .collect();
    let next_href = page["next_after"].as_i64().map(|next| {
        let mut more: Vec<_> = pairs
            .iter()
            .filter(|(k, _)| *k != "after")
            .cloned()
            .collect();
        more.push(("after", next.to_string()));
        format!("/console/jobs?{}", query(&more))
    });
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        div.cards {
            div.card { div.label { "Jobs" } div.value #jobs-paused data-paused=(paused) class=[paused.then_some("bad")] {
                @if paused { "paused" } @else { "running" } } }
            @for s in STATUSES {
                @let n: i64 = counted.values().map(|m| m.get(*s).copied().unwrap_or(0)).sum();
                div.card { div.label { (s) } div.value id=(format!("total-{s}")) data-count=(n) { (group(n)) } }
            }
        }
        (pause_forms(&session, paused))
        h2 { "Queue by kind and status" }
        @if capped { p.muted { "Counted over the first " (group(COUNT_PAGE * COUNT_PAGES_MAX as i64)) " jobs." } }
        @if counted.is_empty() { p.muted #no-jobs { "No jobs." } } @else {
            table #job-counts {
                thead { tr { th { "Kind" } @for s in STATUSES { th.num { (s) } } } }
                tbody {
                    @for (k, row) in &counted {
                        tr data-kind=(k) {
                            td { a href=(format!("/console/jobs?kind={}", enc(k))) { (k) } }
                            @for s in STATUSES {
                                @let n = row.get(*s).copied().unwrap_or(0);
                                td.num id=(format!("count-{}-{s}", id_part(k))) data-count=(n) {
                                    @if n > 0 { a href=(format!("/console/jobs?kind={}&status={s}", enc(k))) { (group(n)) } } @else { "0" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Jobs" }
        form.inline #job-filter method="get" action="/console/jobs" {
            label { "Kind " select name="kind" {
                option value="" selected[kind.is_empty()] { "any" }
                @for k in &kinds { option value=(k) selected[*k == kind] { (k) } }
            } }
            " "
            label { "Status " select name="status" {
                option value="" selected[status.is_empty()] { "any" }
                @for s in STATUSES { option value=(s) selected[*s == status] { (s) } }
            } }
            " " button type="submit" #filter { "Show" }
        }
        @if jobs.is_empty() { p.muted { "No job matches." } } @else {
            table #jobs {
                thead { tr {
                    th.num { "Id" } th { "Code" } th { "Kind" } th { "Business key" } th { "Status" }
                    th.num { "Attempts" } th { "Next run" } th { "Last error" } th { "Updated" } th { "Actions" }
                } }
                tbody { @for j in &jobs { (job_row(&session, j)) } }
            }
        }
        @if let Some(next) = &next_href {
            p.pager { a #next-page href=(next) { "Next jobs →" } }
        }
        h2 { "Cron" }
        (cron::section(cron))
    };
    layout::ok(layout::page(&session, title, ACTIVE, body))
}

fn job_row(session: &Session, j: &Value) -> Markup {
    let code = text(j, "code");
    let idp = id_part(code);
    let status = text(j, "status");
    html! {
        tr id=(format!("job-{idp}")) data-code=(code) data-status=(status) data-retry-count=(int(j, "retry_count")) {
            td.num { (int(j, "id")) }
            td { a href=(job_href(code)) { code { (code) } } }
            td { (text(j, "kind")) }
            td { (text(j, "business_key")) }
            td { span class=[status_class(status)] { (status) } }
            td.num { (int(j, "retry_count")) " / " (int(j, "max_retry_count")) }
            td { (j["next_execute_at"].as_str().unwrap_or("—")) }
            td { @if let Some(e) = j["last_error"].as_str() { span.bad { (e) } } @else { "—" } }
            td { (j["updated_at"].as_str().unwrap_or("—")) }
            td { (actions(session, code, status)) }
        }
    }
}

fn status_class(status: &str) -> Option<&'static str> {
    match status {
        "SUCCESS" => Some("ok"),
        "FAILED" | "CANCELLED" => Some("bad"),
        _ => None,
    }
}

/// Retry and kick, for PENDING and FAILED jobs (the only ones a manual retry runs),
/// drawn for sessions that may act; each button carries the job's `data-code`.
fn actions(session: &Session, code: &str, status: &str) -> Markup {
    let idp = id_part(code);
    html! {
        @if session.can_act() && matches!(status, "PENDING" | "FAILED") {
            @for (verb, label) in [("retry", "Retry"), ("kick", "Kick")] {
                form.action.inline method="post" action=(format!("/console/jobs/{}/{verb}", enc(code))) {
                    input type="hidden" name="csrf" value=(session.csrf());
                    button type="submit" id=(format!("{verb}-{idp}")) data-code=(code) data-action=(verb) { (label) }
                }
            }
        }
    }
}

fn pause_forms(session: &Session, paused: bool) -> Markup {
    let (path, id, label) = if paused {
        ("/console/jobs/resume", "resume", "Resume jobs")
    } else {
        ("/console/jobs/pause", "pause", "Pause jobs")
    };
    html! {
        @if session.can_act() {
            form.inline method="post" action=(path) id=(format!("{id}-form")) {
                input type="hidden" name="csrf" value=(session.csrf());
                label { "Reason " input type="text" name="reason" maxlength="500" placeholder="optional, recorded with the action"; }
                " " button type="submit" id=(id) data-action=(id) { (label) }
            }
        }
    }
}

async fn show(
    State(console): State<Console>,
    session: Session,
    Path(code): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let api = session.api(&console);
    let title = format!("Job {code}");
    let j = match api.read(&job_api(&code)).await {
        Ok(v) => v,
        Err(p) => return layout::problem_page(&session, &title, ACTIVE, &p),
    };
    let status = text(&j, "status");
    let levels = &j["levels"];
    let ok_attr = |v: &Value| match v.as_bool() {
        Some(true) => "true",
        Some(false) => "false",
        None => "unknown",
    };
    let body = html! {
        (layout::notice(q.get("done").map(String::as_str)))
        table.facts #job-facts data-code=(code) {
            tr { th { "Status" } td #job-status data-status=(status) { span class=[status_class(status)] { (status) } } }
            tr { th { "Kind" } td { (text(&j, "kind")) } }
            tr { th { "Business key" } td { (text(&j, "business_key")) } }
            tr { th { "Attempts" } td #job-retry-count data-count=(int(&j, "retry_count")) { (int(&j, "retry_count")) " of " (int(&j, "max_retry_count")) " (running attempt " (int(&j, "running_attempt")) ")" } }
            tr { th { "Last error" } td #job-last-error { @if let Some(e) = j["last_error"].as_str() { span.bad { (e) } } @else { "—" } } }
            tr { th { "First failed" } td { (j["first_failed_at"].as_str().unwrap_or("—")) } }
            tr { th { "Next run" } td { (j["next_execute_at"].as_str().unwrap_or("—")) } }
            tr { th { "Generation" } td { "requested " (int(&j, "request_generation")) ", running " (int(&j, "running_generation")) } }
            tr { th { "Lease" } td { (j["lease_owner"].as_str().unwrap_or("—")) @if let Some(u) = j["lease_until"].as_str() { " until " (u) } } }
            tr { th { "Heartbeat" } td { (j["heartbeat_at"].as_str().unwrap_or("—")) } }
            tr { th { "Fenced writes" } td { (int(&j, "fenced_writes")) } }
            tr { th { "Request / trace" } td { (j["request_id"].as_str().unwrap_or("—")) " / " (j["trace_id"].as_str().unwrap_or("—")) } }
            tr { th { "Created / updated" } td { (j["created_at"].as_str().unwrap_or("—")) " / " (j["updated_at"].as_str().unwrap_or("—")) } }
        }
        (actions(&session, &code, status))
        h2 { "Levels of success" }
        table #levels {
            thead { tr { th { "Level" } th { "OK" } th { "What" } } }
            tbody {
                @let s = &levels["scheduler"];
                tr #level-scheduler data-ok=(ok_attr(&s["ok"])) {
                    td { "1 · scheduler run" }
                    td { (ok_attr(&s["ok"])) }
                    td { @if s.is_null() { "never taken" } @else {
                        "run " (int(s, "run_id")) " (" (text(s, "entry")) ") by " (text(s, "owner"))
                        ", started " (s["started_at"].as_str().unwrap_or("—")) ", finished " (s["finished_at"].as_str().unwrap_or("—"))
                        "; claimed " (int(s, "claimed")) ", succeeded " (int(s, "succeeded")) ", failed " (int(s, "failed"))
                    } }
                }
                @let r = &levels["round"];
                tr #level-round data-ok=(ok_attr(&r["ok"])) {
                    td { "2 · round" }
                    td { (ok_attr(&r["ok"])) }
                    td { @if r.is_null() { "no round yet" } @else {
                        (text(r, "outcome")) ", attempt " (int(r, "attempt")) ", generation " (int(r, "generation"))
                        @if r["newer_generation_pending"] == true { " (a newer generation is pending)" }
                        @if let Some(e) = r["error"].as_str() { "; error " span.bad { (e) } }
                        ", finished " (r["finished_at"].as_str().unwrap_or("—"))
                        (layout::json_block(&r["summary"]))
                    } }
                }
                @let b = &levels["business"];
                tr #level-business data-ok=(ok_attr(&b["done"])) {
                    td { "3 · business data and downstream" }
                    td { (ok_attr(&b["done"])) }
                    td { (text(b, "reason")) }
                }
            }
        }
        h2 { "Payload" }
        div #job-payload { (layout::json_block(&j["payload"])) }
        p { a href=(format!("/console/jobs?kind={}", enc(text(&j, "kind")))) { "Jobs of this kind" } " · " a href="/console/jobs" { "All jobs" } }
    };
    layout::ok(layout::page(&session, &title, ACTIVE, body))
}

fn job_api(code: &str) -> String {
    format!("/v1/jobs/{}", enc(code))
}

/// A run report (retry, kick) in words.
fn run_words(what: &str, r: &Value) -> String {
    if r["paused"] == true {
        return format!("{what}: jobs are paused, nothing was taken");
    }
    format!(
        "{what}: run {} claimed {}, succeeded {}, failed {}, skipped {}",
        int(r, "run_id"),
        int(r, "claimed"),
        int(r, "succeeded"),
        int(r, "failed"),
        int(r, "skipped")
    )
}

async fn retry(
    State(console): State<Console>,
    session: Session,
    Path(code): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    on_job(&console, &session, &code, &form, "retried").await
}

async fn kick(
    State(console): State<Console>,
    session: Session,
    Path(code): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    on_job(&console, &session, &code, &form, "kicked").await
}

/// Retry (`POST /v1/jobs:retry`) or kick (`POST /v1/jobs/{code}:kick`) one job, then
/// back to its page with the run's counts.
async fn on_job(
    console: &Console,
    session: &Session,
    code: &str,
    form: &HashMap<String, String>,
    what: &str,
) -> Response {
    if let Err(r) = session.check_action(form) {
        return r;
    }
    let api = session.api(console);
    let a = if what == "retried" {
        let body = json!({ "codes": [code] });
        api.post("/v1/jobs:retry", Some(body), None).await
    } else {
        api.post(&format!("{}:kick", job_api(code)), None, None)
            .await
    };
    if !a.ok() {
        return layout::problem_page(session, "Refused", ACTIVE, &a.problem());
    }
    let done = run_words(&format!("{what} {code}"), &a.body);
    Redirect::to(&format!("{}?done={}", job_href(code), enc(&done))).into_response()
}

async fn pause(
    State(console): State<Console>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    pause_or_resume(console, session, form, "pause").await
}

async fn resume(
    State(console): State<Console>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    pause_or_resume(console, session, form, "resume").await
}

async fn pause_or_resume(
    console: Console,
    session: Session,
    form: HashMap<String, String>,
    what: &str,
) -> Response {
    if let Err(r) = session.check_action(&form) {
        return r;
    }
    let reason = form
        .get("reason")
        .map(|r| r.trim())
        .filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.chars().count() > 500) {
        let p = invalid("reason", "at most 500 characters".to_owned());
        return layout::problem_page(&session, "Jobs", ACTIVE, &p);
    }
    let body = match reason {
        Some(r) => json!({ "reason": r }),
        None => json!({}),
    };
    let api = session.api(&console);
    let a = api
        .post(&format!("/v1/jobs:{what}"), Some(body), None)
        .await;
    if !a.ok() {
        return layout::problem_page(&session, "Jobs", ACTIVE, &a.problem());
    }
    let done = if what == "pause" {
        "jobs paused"
    } else {
        "jobs resumed"
    };
    Redirect::to(&format!("/console/jobs?done={}", enc(done))).into_response()
}
