//! Measuring: the bill checkpoint and its sampled rate, the server's counters, the
//! row counts and status distribution of the result, and the scoped refresh latency.

use super::plan::ACCOUNT_CUSTOMER;
use super::Options;
use factledger::bill::projection::{self as bill_projection, Account};
use factledger::infra::db::Db;
use sqlx::Row;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Seconds between two samples of the catch-up's progress.
const SAMPLE_SECS: u64 = 30;

pub(super) async fn checkpoint(db: &Db) -> anyhow::Result<i64> {
    Ok(db.checkpoint("bill", 1).await?)
}

/// Print the catch-up's rate every [`SAMPLE_SECS`]: a rate that falls as the log
/// advances means later events cost more (work grows with history).
pub(super) async fn sample_progress(db: Db, total: u64) {
    let mut last = (Instant::now(), 0i64);
    loop {
        tokio::time::sleep(Duration::from_secs(SAMPLE_SECS)).await;
        let Ok(p) = checkpoint(&db).await else {
            continue;
        };
        let now = Instant::now();
        let rate = (p - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
        eprintln!(
            "catch-up: position {p} of {total} ({:.1} %), {rate:.0} events/s over the last {SAMPLE_SECS} s",
            p as f64 * 100.0 / total.max(1) as f64
        );
        last = (now, p);
    }
}

/// Server-wide statement and row counters (MariaDB; other clients of the server add
/// to them, so they are an upper bound).
pub(super) async fn server_status(db: &Db) -> BTreeMap<String, i64> {
    let Db::Mysql(pool) = db else {
        return BTreeMap::new();
    };
    let sql = "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select', 'Com_delete', \
               'Com_update', 'Com_insert', 'Com_replace', 'Innodb_rows_read', \
               'Handler_read_rnd_next', 'Handler_read_next', 'Handler_read_key')";
    match sqlx::query(sql).fetch_all(pool).await {
        Ok(rows) => rows
            .iter()
            .filter_map(|r| {
                let name: String = r.try_get(0).ok()?;
                let value: String = r.try_get(1).ok()?;
                Some((name, value.parse().ok()?))
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

pub(super) fn print_status_delta(
    before: &BTreeMap<String, i64>,
    after: &BTreeMap<String, i64>,
    events: u64,
    station_months: u64,
) {
    if after.is_empty() {
        return;
    }
    println!("| server counter (global, during the catch-up) | delta | per event |");
    println!("|---|---|---|");
    for (name, a) in after {
        let d = a - before.get(name).copied().unwrap_or(0);
        println!("| {name} | {d} | {:.1} |", d as f64 / events.max(1) as f64);
    }
    // Every recomputation of a station-month deletes from four tables.
    let deletes = after.get("Com_delete").copied().unwrap_or(0)
        - before.get("Com_delete").copied().unwrap_or(0);
    // Each recomputed chunk (≤ 256 station-months) deletes from 4 tables once.
    println!(
        "recomputed chunks ≈ Com_delete / 4 = {} for {station_months} station-months",
        deletes / 4
    );
}

pub(super) async fn table_counts(db: &Db) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let Db::Mysql(pool) = db else {
        anyhow::bail!("the bill bench runs on MariaDB/MySQL");
    };
    let mut out = Vec::new();
    for t in [
        "fi_customer_bill",
        "fi_customer_bill_partner",
        "fi_monthly_income_difference",
        "bill_decisions",
        "bill_decision_findings",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {t}"))
            .fetch_one(pool)
            .await?;
        out.push((t, n as u64));
    }
    Ok(out)
}

/// The distribution of the two statuses the decision writes, one table each.
pub(super) async fn print_distribution(db: &Db) -> anyhow::Result<()> {
    let Db::Mysql(pool) = db else {
        return Ok(());
    };
    print_status_counts(pool, "payment_status", "fi_customer_bill", "NULL (finding)").await?;
    print_status_counts(
        pool,
        "partner_query_status",
        "fi_customer_bill_partner",
        "NULL (undecided)",
    )
    .await
}

/// Rows of `table` per value of its `column`; NULL printed as `null`.
async fn print_status_counts(
    pool: &sqlx::MySqlPool,
    column: &str,
    table: &str,
    null: &str,
) -> anyhow::Result<()> {
    println!("| {column} ({table}) | rows |");
    println!("|---|---|");
    let rows = sqlx::query(&format!(
        "SELECT CAST({column} AS CHAR), COUNT(*) FROM {table} \
         GROUP BY {column} ORDER BY {column}"
    ))
    .fetch_all(pool)
    .await?;
    for r in rows {
        let status: Option<String> = r.try_get(0)?;
        let n: i64 = r.try_get(1)?;
        println!("| {} | {n} |", status.as_deref().unwrap_or(null));
    }
    Ok(())
}

/// `rebuild_account` of the 120-month account, `--refresh-runs` times (bounded by the
/// deadline); also its two halves, resolving and recomputing, once each.
pub(super) async fn refresh_latency(db: &Db, o: &Options, deadline: Instant) -> anyhow::Result<()> {
    let account = Account::Small(ACCOUNT_CUSTOMER);
    let t = Instant::now();
    let sms = bill_projection::station_months_of_account(db, account).await?;
    let resolve_ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(
        sms.len() as u64 == o.account_months,
        "the account resolves to {} station-months, want {}",
        sms.len(),
        o.account_months
    );
    let t = Instant::now();
    bill_projection::recompute_station_months(db, &sms).await?;
    let recompute_ms = t.elapsed().as_secs_f64() * 1000.0;
    let mut ms = Vec::new();
    for _ in 0..o.refresh_runs {
        if Instant::now() >= deadline {
            break;
        }
        let t = Instant::now();
        let n = bill_projection::rebuild_account(db, account).await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            n as u64 == o.account_months,
            "rebuild_account recomputed {n}"
        );
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        ms.get(((ms.len() as f64 * p) as usize).min(ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "| scoped refresh | station-months | runs | p50 ms | p99 ms | max ms | resolve ms (once) | recompute_station_months ms (once) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| rebuild_account(Small({ACCOUNT_CUSTOMER})) | {} | {} | {:.1} | {:.1} | {:.1} | {resolve_ms:.1} | {recompute_ms:.1} |",
        sms.len(),
        ms.len(),
        pct(0.50),
        pct(0.99),
        ms.last().copied().unwrap_or(0.0),
    );
    Ok(())
}
