//! Run bookkeeping: every reconciliation, from the CLI or the API, recorded with its
//! report, its heartbeat, and `abandoned` when that stops.

use super::check::*;
use super::diff::*;
use super::report::*;
use super::rows::*;
use crate::infra::db::Db;
use crate::infra::store::{time_text, DynStore};
use crate::runtime::projection::{RUN_HEARTBEAT_MS, RUN_HEARTBEAT_TIMEOUT_MS};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use sqlx::mysql::MySqlRow;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

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
    /// The report, once the run succeeded.
    #[serde(flatten)]
    #[schema(schema_with = report_fields_schema)]
    pub report: Option<Report>,
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
    macro_rules! insert {
        ($p:expr) => {
            sqlx::query(sql)
                .bind(&run.id)
                .bind(run.status.as_str())
                .bind(run.repair)
                .bind(&run.requested_by)
                .bind(&run.started_at)
                .bind(&run.started_at)
                .execute($p)
                .await?
        };
    }
    match db {
        Db::Mysql(p) => insert!(p).rows_affected(),
        Db::Sqlite(p) => insert!(p).rows_affected(),
    };
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
) -> Result<Run, ReconcileError> {
    let options = ReconcileOptions {
        repair: run.repair,
        anchor_file,
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
                let renewed = match &db {
                    Db::Mysql(p) => sqlx::query(sql)
                        .bind(&now)
                        .bind(&id)
                        .execute(p)
                        .await
                        .map(|_| ()),
                    Db::Sqlite(p) => sqlx::query(sql)
                        .bind(&now)
                        .bind(&id)
                        .execute(p)
                        .await
                        .map(|_| ()),
                };
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
    macro_rules! update {
        ($p:expr) => {
            sqlx::query(sql)
                .bind(run.status.as_str())
                .bind(run.report.as_ref().map(|r| r.up_to_position))
                .bind(&run.finished_at)
                .bind(&report_json)
                .bind(&run.error)
                .bind(&run.id)
                .execute($p)
                .await?
        };
    }
    match db {
        Db::Mysql(p) => update!(p).rows_affected(),
        Db::Sqlite(p) => update!(p).rows_affected(),
    };
    Ok(run)
}

/// A recorded run by id.
pub async fn find_run(db: &Db, id: &str) -> Result<Option<Run>, ReconcileError> {
    let sql = "SELECT id, status, repair, requested_by, started_at, finished_at, report, error, \
               heartbeat_at FROM reconciliations WHERE id = ?";
    type Stored = (
        String,
        String,
        bool,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
    );
    macro_rules! read {
        ($p:expr, $row:ty) => {{
            let row: Option<$row> = sqlx::query(sql).bind(id).fetch_optional($p).await?;
            row.map(|r| -> Result<Stored, sqlx::Error> {
                Ok((
                    r.text(0)?,
                    r.text(1)?,
                    r.try_get(2)?,
                    r.text(3)?,
                    r.text(4)?,
                    r.opt_text(5)?,
                    r.opt_text(6)?,
                    r.opt_text(7)?,
                    r.text(8)?,
                ))
            })
            .transpose()?
        }};
    }
    let stored = match db {
        Db::Mysql(p) => read!(p, MySqlRow),
        Db::Sqlite(p) => read!(p, SqliteRow),
    };
    let Some((id, status, repair, requested_by, started_at, finished_at, report, error, beat)) =
        stored
    else {
        return Ok(None);
    };
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
