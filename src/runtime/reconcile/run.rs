//! Run bookkeeping: every reconciliation, from the CLI or the API, recorded with its
//! report, its heartbeat, and `abandoned` when that stops.

use super::check::*;
use super::diff::*;
use super::report::*;
use crate::infra::db::{Db, Get};
use crate::infra::store::{time_text, DynStore};
use crate::runtime::projection::{RUN_HEARTBEAT_MS, RUN_HEARTBEAT_TIMEOUT_MS};
use chrono::Utc;
use factledger_projections::table::{Cell, ColType, Column};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------
// Runs: every reconciliation, from the CLI or the API, recorded with its report.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    /// Still `running` in its row, but its process stopped renewing the heartbeat
    /// (killed or restarted): it will never finish.
    Abandoned,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Abandoned => "abandoned",
        }
    }

    pub(super) fn parse(s: &str) -> Option<RunStatus> {
        match s {
            "running" => Some(RunStatus::Running),
            "succeeded" => Some(RunStatus::Succeeded),
            "failed" => Some(RunStatus::Failed),
            _ => None,
        }
    }
}

/// A reconciliation run as stored: while it runs, and its report when done.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Run {
    pub id: String,
    pub status: RunStatus,
    pub repair: bool,
    /// The actor that asked for it (`key:<id>` or `cli`).
    pub requested_by: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Why a failed run failed.
    pub error: Option<String>,
    /// The report, once the run succeeded (its `repair` is the run's own, written
    /// once).
    #[serde(flatten, serialize_with = "report_fields")]
    #[schema(schema_with = report_fields_schema)]
    pub report: Option<Report>,
}

/// The report's fields as flattened into a [`Run`], without `repair`: the run has
/// that field itself, and flattening both wrote the key `"repair"` twice in one
/// object (a JSON object whose keys must be unique; strict parsers such as
/// `infra::json::parse_unique` refuse it). The stored report keeps its own.
fn report_fields<S: serde::Serializer>(report: &Option<Report>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    match report {
        None => s.serialize_none(),
        Some(r) => match serde_json::to_value(r).map_err(S::Error::custom)? {
            serde_json::Value::Object(mut fields) => {
                fields.remove("repair");
                serde::Serialize::serialize(&fields, s)
            }
            other => Err(S::Error::custom(format!(
                "a reconciliation report serialises as an object, not {other}"
            ))),
        },
    }
}

/// `report`'s schema in [`Run`]: the report's fields, flattened into the run and all
/// absent until the run succeeded. utoipa's own schema for a flattened `Option`
/// (`oneOf: [null, Report]` inside `allOf`) matches no run that is still going or
/// failed, as the API fuzzer found (issue 14 item 10).
pub(super) fn report_fields_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    let mut schema = <Report as utoipa::PartialSchema>::schema();
    if let RefOr::T(Schema::Object(object)) = &mut schema {
        object.required.clear();
        // The run's own `repair` stands for it (see `report_fields`).
        object.properties.remove("repair");
    }
    schema
}

/// Record a new run as `running`.
pub async fn start_run(
    db: &Db,
    options: ReconcileOptions,
    requested_by: &str,
) -> Result<Run, ReconcileError> {
    let run = Run {
        id: uuid::Uuid::new_v4().to_string(),
        status: RunStatus::Running,
        repair: options.repair,
        requested_by: requested_by.to_owned(),
        started_at: time_text(&Utc::now()),
        finished_at: None,
        error: None,
        report: None,
    };
    let sql = "INSERT INTO reconciliations (id, status, repair, requested_by, started_at, \
               heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)";
    let args = [
        Cell::text(&run.id),
        Cell::text(run.status.as_str()),
        Cell::Int(i64::from(run.repair)),
        Cell::text(&run.requested_by),
        Cell::text(&run.started_at),
        Cell::text(&run.started_at),
    ];
    db.exec(sql, &args).await?;
    Ok(run)
}

/// Run a recorded reconciliation to its end and record the outcome; returns the run
/// as stored. A failed reconciliation is a failed run, not an error; only failing to
/// record it is.
pub async fn finish_run(
    store: &DynStore,
    db: &Db,
    run: Run,
    anchor_file: Option<std::path::PathBuf>,
    external: super::ExternalChecks,
) -> Result<Run, ReconcileError> {
    let options = ReconcileOptions {
        repair: run.repair,
        anchor_file,
        external,
        ..ReconcileOptions::default()
    };
    // Renew the heartbeat while the replay works (it holds one snapshot on its own
    // connection; the heartbeat uses another).
    let heartbeat = tokio::spawn({
        let (db, id) = (db.clone(), run.id.clone());
        async move {
            let sql = "UPDATE reconciliations SET heartbeat_at = ? WHERE id = ?";
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(RUN_HEARTBEAT_MS)).await;
                let now = time_text(&Utc::now());
                let renewed = db.exec(sql, &[Cell::text(now), Cell::text(&id)]).await;
                if let Err(e) = renewed {
                    tracing::warn!(id = %id, error = %e, "cannot renew the reconciliation heartbeat");
                }
            }
        }
    });
    let outcome = reconcile(store, db, options).await;
    heartbeat.abort();
    let mut run = run;
    run.finished_at = Some(time_text(&Utc::now()));
    match outcome {
        Ok(report) => {
            run.status = RunStatus::Succeeded;
            run.report = Some(report);
        }
        Err(e) => {
            tracing::error!(id = %run.id, error = %e, "reconciliation failed");
            run.status = RunStatus::Failed;
            run.error = Some(e.to_string());
        }
    }
    let report_json = run.report.as_ref().map(|r| value(r).to_string());
    let sql = "UPDATE reconciliations SET status = ?, up_to_position = ?, finished_at = ?, \
               report = ?, error = ? WHERE id = ?";
    let args = [
        Cell::text(run.status.as_str()),
        run.report
            .as_ref()
            .map_or(Cell::Null, |r| Cell::Int(r.up_to_position)),
        Cell::opt_text(run.finished_at.clone()),
        Cell::opt_text(report_json),
        Cell::opt_text(run.error.clone()),
        Cell::text(&run.id),
    ];
    db.exec(sql, &args).await?;
    Ok(run)
}

/// A recorded run by id.
pub async fn find_run(db: &Db, id: &str) -> Result<Option<Run>, ReconcileError> {
    const RUN: &[Column] = &[
        Column {
            name: "id",
            ty: ColType::Text,
        },
        Column {
            name: "status",
            ty: ColType::Text,
        },
        Column {
            name: "repair",
            ty: ColType::Int,
        },
        Column {
            name: "requested_by",
            ty: ColType::Text,
        },
        Column {
            name: "started_at",
            ty: ColType::Text,
        },
        Column {
            name: "finished_at",
            ty: ColType::OptText,
        },
        Column {
            name: "report",
            ty: ColType::OptText,
        },
        Column {
            name: "error",
            ty: ColType::OptText,
        },
        Column {
            name: "heartbeat_at",
            ty: ColType::Text,
        },
    ];
    let sql = "SELECT id, status, repair, requested_by, started_at, finished_at, report, error, \
               heartbeat_at FROM reconciliations WHERE id = ?";
    let Some(row) = db.fetch_optional(sql, &[Cell::text(id)], RUN).await? else {
        return Ok(None);
    };
    let (id, status, beat) = (
        row.text("id")?,
        row.text("status")?,
        row.text("heartbeat_at")?,
    );
    let repair = row.int("repair")? != 0;
    let (requested_by, started_at) = (row.text("requested_by")?, row.text("started_at")?);
    let finished_at = row.opt_text("finished_at")?;
    let (report, error) = (row.opt_text("report")?, row.opt_text("error")?);
    let mut status = RunStatus::parse(&status).ok_or_else(|| ReconcileError::StoredStatus {
        id: id.clone(),
        status,
    })?;
    let stale = crate::infra::store::time_text_ago(RUN_HEARTBEAT_TIMEOUT_MS);
    if status == RunStatus::Running && beat < stale {
        status = RunStatus::Abandoned;
    }
    let report = report
        .map(|r| serde_json::from_str::<Report>(&r))
        .transpose()
        .map_err(|source| ReconcileError::StoredReport {
            id: id.clone(),
            source,
        })?;
    Ok(Some(Run {
        status,
        id,
        repair,
        requested_by,
        started_at,
        finished_at,
        error,
        report,
    }))
}
