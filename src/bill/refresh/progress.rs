//! The progress row of a refresh job (`bill_refresh_progress`): the request generation
//! and the last station-month done, saved only while the job's claim holds, so a retry
//! of the same generation resumes after it.

use crate::infra::db::{Db, Get, Tx};
use crate::infra::store::{time_text, Fence};
use chrono::Utc;
use factledger_projections::bill::{parse_month, StationMonth};
use factledger_projections::table::{Cell, ColType, Column};

/// The saved progress of a job: the generation and the last station-month done.
pub async fn load_progress(
    db: &Db,
    job_code: &str,
) -> Result<Option<(i64, StationMonth)>, sqlx::Error> {
    let sql = "SELECT generation, last_station_id, last_month FROM bill_refresh_progress \
               WHERE job_code = ?";
    const PROGRESS: &[Column] = &[
        Column {
            name: "generation",
            ty: ColType::Int,
        },
        Column {
            name: "last_station_id",
            ty: ColType::Int,
        },
        Column {
            name: "last_month",
            ty: ColType::Text,
        },
    ];
    let Some(r) = db
        .fetch_optional(sql, &[Cell::text(job_code)], PROGRESS)
        .await?
    else {
        return Ok(None);
    };
    let month = parse_month(&r.text("last_month")?)
        .map_err(|e| sqlx::Error::Decode(e.to_string().into()))?;
    let station_id = r.int("last_station_id")?;
    Ok(Some((
        r.int("generation")?,
        StationMonth { station_id, month },
    )))
}

/// Save (or, with `None`, clear) the progress, only while `fence` is the job's
/// current claim. False when fenced (nothing written).
pub(super) async fn save_progress(
    db: &Db,
    fence: Fence,
    job_code: &str,
    progress: Option<(i64, StationMonth)>,
) -> Result<bool, sqlx::Error> {
    let Some(mut tx) = Tx::fenced(db, fence).await? else {
        return Ok(false);
    };
    let clear = "DELETE FROM bill_refresh_progress WHERE job_code = ?";
    tx.exec(clear, &[Cell::text(job_code)]).await?;
    if let Some((generation, sm)) = progress {
        let insert = "INSERT INTO bill_refresh_progress \
                      (job_code, generation, last_station_id, last_month, updated_at) \
                      VALUES (?, ?, ?, ?, ?)";
        let args = [
            Cell::text(job_code),
            Cell::Int(generation),
            Cell::Int(sm.station_id),
            Cell::Text(sm.month.to_string()),
            Cell::Text(time_text(&Utc::now())),
        ];
        tx.exec(insert, &args).await?;
    }
    tx.commit().await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker whose claim was recovered and re-claimed (the attempt moved on) or
    /// whose job is no longer running cannot save or clear the progress: a retry then
    /// resumes after what the current claim committed, never after a stale round's.
    #[tokio::test]
    async fn a_stale_worker_cannot_save_or_clear_the_progress() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let db = crate::infra::store::open(&url).await.expect("open").db;
        let Db::Sqlite(pool) = &db else {
            panic!("a SQLite database")
        };
        sqlx::query(
            "INSERT INTO jobs (id, kind, code, business_key, payload, status, retry_count, \
             max_retry_count, next_execute_at_ms, request_generation, running_generation, \
             running_attempt, created_at_ms, updated_at_ms) \
             VALUES (1, 'bill_refresh', 'RIPSR:x', 'k', '{}', 1, 0, 3, 0, 0, 0, 2, 0, 0)",
        )
        .execute(pool)
        .await
        .expect("job");
        let code = "RIPSR:x";
        let sm = |station_id| StationMonth {
            station_id,
            month: parse_month("202609").expect("month"),
        };
        let (stale, current) = (
            Fence {
                job_id: 1,
                running_attempt: 1,
            },
            Fence {
                job_id: 1,
                running_attempt: 2,
            },
        );
        let saved = |fence, progress| save_progress(&db, fence, code, progress);

        assert!(!saved(stale, Some((0, sm(31)))).await.expect("save"));
        assert_eq!(load_progress(&db, code).await.expect("load"), None);
        assert!(saved(current, Some((0, sm(31)))).await.expect("save"));
        assert!(!saved(stale, Some((0, sm(32)))).await.expect("save"));
        assert!(!saved(stale, None).await.expect("clear"));
        assert_eq!(
            load_progress(&db, code).await.expect("load"),
            Some((0, sm(31)))
        );

        // A job no longer running refuses its own last claim too.
        sqlx::query("UPDATE jobs SET status = 2 WHERE id = 1")
            .execute(pool)
            .await
            .expect("finish");
        assert!(!saved(current, Some((0, sm(33)))).await.expect("save"));
        assert_eq!(
            load_progress(&db, code).await.expect("load"),
            Some((0, sm(31)))
        );
    }
}
