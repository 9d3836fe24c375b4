//! Reconciliations (SPEC R-REC-1): start one, read its report as JSON or as a page.
//! Starting one is a write (a repair rebuilds rows); reading is open to every role.

use crate::runtime::http::body::JsonBody;
use crate::runtime::http::headers::HTML_PAGE_HEADERS;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use crate::runtime::reconcile::{self, Finding, ReconcileError, ReconcileOptions, Run, RunStatus};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use factledger_aggregates::admin_action::AdminAction;
use serde::Deserialize;
use std::fmt::Write as _;

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// Rebuild the wallets that only drifted (scoped rebuild) and check them again.
    /// Event-level findings are never repaired.
    #[serde(default)]
    repair: bool,
}

impl From<ReconcileError> for Problem {
    fn from(e: ReconcileError) -> Self {
        tracing::error!(error = %e, "reconciliation store failed");
        Problem::internal(e.to_string())
    }
}

fn not_found(id: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "RECONCILIATION_NOT_FOUND",
        format!("no reconciliation with id {id:?}"),
    )
    .field("id")
}

async fn find(state: &AppState, id: &str) -> Result<Run, Problem> {
    reconcile::find_run(&state.db, id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Start a reconciliation: replay the wallet events up to the projection's checkpoint
/// and compare. Returns at once with the run's id; follow it with
/// `GET /v1/reconciliations/{id}`.
#[utoipa::path(
    post,
    path = "/v1/reconciliations",
    request_body = ReconcileRequest,
    responses(
        (status = 202, body = Run),
        (status = 403, body = ProblemBody),
        (status = 422, body = ProblemBody)
    ),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor(), request_id = %caller.request_id))]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<impl IntoResponse, Problem> {
    caller.require_write()?;
    let req: ReconcileRequest = body.parse_or_default()?;
    // A run that only compares is allowed to every writer (it changes nothing); one
    // that may repair projection rows is an operator action (F7).
    if req.repair {
        caller.require_operator("a reconciliation with repair")?;
    }
    let options = ReconcileOptions {
        repair: req.repair,
        ..ReconcileOptions::default()
    };
    let run = reconcile::start_run(&state.db, options, &caller.principal.actor()).await?;
    if req.repair {
        caller
            .record_admin(
                &state,
                AdminAction::ReconciliationRepairStarted,
                &format!("reconciliation:{}", run.id),
                None,
                None,
            )
            .await?;
    }
    let (store, db, started) = (state.store.clone(), state.db.clone(), run.clone());
    let anchor_file = state.config.anchor_file.clone();
    let external = state
        .parts
        .get::<reconcile::ExternalChecks>()
        .cloned()
        .unwrap_or_default();
    tokio::spawn(async move {
        let id = started.id.clone();
        if let Err(e) = reconcile::finish_run(&store, &db, started, anchor_file, external).await {
            tracing::error!(reconciliation = %id, error = %e, "reconciliation outcome not recorded");
        }
    });
    let location = format!("/v1/reconciliations/{}", run.id);
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(run),
    ))
}

/// A reconciliation (started from the API or the CLI): `status`, and when it
/// succeeded `up_to_position`, `counts` per class and `findings`.
#[utoipa::path(
    get,
    path = "/v1/reconciliations/{id}",
    params(("id" = String, Path, description = "The id returned when the run started")),
    responses((status = 200, body = Run), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Run>, Problem> {
    Ok(Json(find(&state, &id).await?))
}

/// The report as a self-contained page: counts per class and a table of findings.
#[utoipa::path(
    get,
    path = "/v1/reconciliations/{id}/report.html",
    params(("id" = String, Path)),
    responses((status = 200, content_type = "text/html", body = String), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn report_html(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, Problem> {
    let run = find(&state, &id).await?;
    let [csp, frames, referrer, cache] = HTML_PAGE_HEADERS;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            csp,
            frames,
            referrer,
            cache,
        ],
        render(&run),
    ))
}

/// Text safe inside HTML elements and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn json_cell(v: &Option<serde_json::Value>) -> String {
    match v {
        Some(v) => format!("<code>{}</code>", esc(&v.to_string())),
        None => "—".to_owned(),
    }
}

fn finding_row(out: &mut String, f: &Finding) {
    let events = f
        .events
        .iter()
        .map(|e| format!("{} #{} @{}", e.stream, e.sequence, e.global_position))
        .collect::<Vec<_>>()
        .join(", ");
    let repaired = match f.repaired {
        Some(true) => "yes",
        Some(false) => "no",
        None => "—",
    };
    let class = serde_json::to_value(f.class).unwrap_or_default();
    let kind = serde_json::to_value(f.kind).unwrap_or_default();
    let _ = writeln!(
        out,
        "<tr class=\"{c}\"><td>{c}</td><td>{k}</td><td>{w}</td><td>{t}</td><td>{key}</td>\
         <td>{d}</td><td>{e}</td><td>{a}</td><td>{ev}</td><td>{r}</td><td>{rd}</td></tr>",
        c = esc(class.as_str().unwrap_or("")),
        k = esc(kind.as_str().unwrap_or("")),
        w = esc(&f.wallet_id),
        t = esc(&f.table),
        key = esc(&f.key),
        d = esc(&f.detail),
        e = json_cell(&f.expected),
        a = json_cell(&f.actual),
        ev = esc(&events),
        r = esc(&f.repair),
        rd = repaired,
    );
}

/// The page of one run. Every piece of stored text is escaped: wallet ids, keys and
/// values come from the database and may have been planted by anyone with access.
fn render(run: &Run) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Reconciliation {id}</title>\
         <link rel=\"stylesheet\" href=\"/console/assets/console.css\">\
         </head><body class=\"report\">\n<h1>Reconciliation {id}</h1>\n<table>\
         <tr><th>Status</th><td>{status}</td></tr>\
         <tr><th>Repair</th><td>{repair}</td></tr>\
         <tr><th>Requested by</th><td>{by}</td></tr>\
         <tr><th>Started</th><td>{started}</td></tr>\
         <tr><th>Finished</th><td>{finished}</td></tr>",
        id = esc(&run.id),
        status = run.status.as_str(),
        repair = if run.repair { "yes" } else { "no" },
        by = esc(&run.requested_by),
        started = esc(&run.started_at),
        finished = esc(run.finished_at.as_deref().unwrap_or("—")),
    );
    if let Some(e) = &run.error {
        let _ = write!(out, "<tr><th>Error</th><td>{}</td></tr>", esc(e));
    }
    let Some(r) = &run.report else {
        out.push_str("</table>\n");
        if run.status == RunStatus::Running {
            out.push_str("<p>Still running: reload this page.</p>\n");
        }
        out.push_str("</body></html>\n");
        return out;
    };
    let _ = write!(
        out,
        "<tr><th>Up to global position</th><td>{}</td></tr>\
         <tr><th>Events checked</th><td>{}</td></tr>\
         <tr><th>Wallets checked</th><td>{}</td></tr>\
         <tr><th>Duration</th><td>{} ms</td></tr></table>\n\
         <h2>Counts per class</h2>\n<table><tr><th>Class</th><th>Found</th><th>Remaining</th></tr>\
         <tr><td>projection_drift</td><td>{}</td><td>{}</td></tr>\
         <tr><td>event</td><td>{}</td><td>{}</td></tr>\
         <tr><th>total</th><th>{}</th><th>{}</th></tr></table>\n",
        r.up_to_position,
        r.events_checked,
        r.wallets_checked,
        r.duration_ms,
        r.counts.projection_drift,
        r.remaining.projection_drift,
        r.counts.event,
        r.remaining.event,
        r.counts.total(),
        r.remaining.total(),
    );
    if let Some(o) = &r.repair_outcome {
        let _ = writeln!(
            out,
            "<p>Repair: {} wallets rebuilt, {} failed; re-checked at position {}.</p>",
            o.wallets_rebuilt, o.wallets_failed, o.recheck_position
        );
    }
    let _ = writeln!(out, "<h2>Findings ({} listed)</h2>", r.findings.len());
    if r.findings_truncated {
        let _ = writeln!(
            out,
            "<p><strong>Truncated:</strong> only the first {} findings are listed; the \
             counts above are exact.</p>",
            reconcile::FINDINGS_STORED_MAX
        );
    }
    if r.findings.is_empty() {
        out.push_str("<p>None: the projection matches the replay and every event holds.</p>\n");
    } else {
        out.push_str(
            "<table><tr><th>Class</th><th>Kind</th><th>Wallet</th><th>Table</th><th>Key</th>\
             <th>Detail</th><th>Expected</th><th>Actual</th><th>Events</th><th>Repair</th>\
             <th>Repaired</th></tr>\n",
        );
        for f in &r.findings {
            finding_row(&mut out, f);
        }
        out.push_str("</table>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_is_escaped_everywhere_on_the_page() {
        let run = Run {
            id: "<script>".into(),
            status: RunStatus::Failed,
            repair: false,
            requested_by: "a&b".into(),
            started_at: "t".into(),
            finished_at: None,
            error: Some("<img src=x onerror=alert(1)>".into()),
            report: None,
        };
        let page = render(&run);
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("<img"), "{page}");
        assert!(page.contains("&lt;script&gt;") && page.contains("a&amp;b"));
    }
}
