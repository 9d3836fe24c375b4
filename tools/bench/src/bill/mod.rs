//! Bill projector throughput (issue 6 item 9): seed station-months of bill facts
//! straight through the store in large units, then time
//! 1. a catch-up of the `bill` projection from position 0 as the running projector
//!    does it (events/s, wall time, peak RSS): far behind the head it folds in bulk,
//!    then sweeps every station-month once;
//! 2. a full rebuild of the same log in one transaction;
//! 3. one more month for `--live-stations` stations applied by the live path (each
//!    batch recomputes what it affects, a partner group's earlier months included);
//! 4. a scoped refresh of one customer account with 120 months (`rebuild_account`,
//!    p50/p99).
//!
//! The seed writes the event contract of `factledger_aggregates::bill` exactly (its
//! aggregate types, stream ids and payloads), in the order a live system would:
//! reference data first, then month by month every station's small bill, diff and
//! partner bill, and the payment orders of the month (one order per partner org and
//! chunk of [`plan::CHUNK_STATIONS`] stations) with their lines, locks and results. The
//! order kinds and per-line outcomes are spread so that every R-BILL-2 rule fires
//! somewhere; the distribution of `payment_status` is printed afterwards.
//!
//! Every loop is bounded by its count and by `--max-secs`: a catch-up cut off by the
//! deadline reports the events it committed and their rate.

use factledger::bill::projection as bill_projection;
use factledger::infra::db::Db;
use factledger::infra::store::DynStore;
use measure::{
    checkpoint, print_distribution, print_status_delta, refresh_latency, sample_progress,
    server_status, table_counts,
};
use seed::{seed, seed_live_month};
use seeder::Seeder;
use std::time::{Duration, Instant};

mod measure;
mod orders;
mod plan;
mod seed;
mod seeder;

pub struct Options {
    pub stations: u64,
    /// Stations given one more month after the catch-up, applied live.
    pub live_stations: u64,
    /// Also time `rebuild_full` of the whole log.
    pub full_rebuild: bool,
    pub months: u64,
    pub account_months: u64,
    pub refresh_runs: usize,
    pub max_secs: u64,
}

pub async fn bench(url: &str, o: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(o.stations >= 1 && o.months >= 1, "--stations, --months ≥ 1");
    anyhow::ensure!(
        (1..=1200).contains(&o.months) && (1..=1200).contains(&o.account_months),
        "--months, --account-months: 1..=1200"
    );
    let deadline = Instant::now() + Duration::from_secs(o.max_secs);
    let store = super::fresh_store(url).await?;
    let db = factledger::infra::store::open(url).await?;

    // 1. Seed.
    let mut seeder = Seeder::new(store.clone());
    let (seeded_sm, mut ids) = seed_and_report(&mut seeder, o, deadline).await?;

    // 2. Full catch-up from position 0, bounded by the deadline; then the result: one
    // row per station-month in each bill table, and the statuses.
    let complete = catch_up(&store, &db.db, seeder.total, seeded_sm, deadline).await?;
    let rows = report_rows(&db.db, seeded_sm, complete).await?;
    if !complete {
        println!("full rebuild, live month and scoped refresh skipped: the catch-up did not reach the head");
        return Ok(());
    }

    // 3. The same log rebuilt in one transaction (opt-in: at full size it takes longer
    // than the catch-up, and a rebuild cut off rolls back for minutes).
    if o.full_rebuild && !full_rebuild(&store, &db.db, &rows, seeded_sm, deadline).await? {
        println!("live month and scoped refresh skipped: the rebuild's rollback holds its locks");
        return Ok(());
    }

    // 4. Live: one more month for some stations, applied at the head batch by batch
    // (each batch recomputes what it affects, a group's earlier months included).
    if o.live_stations > 0 && Instant::now() < deadline {
        let events = seed_live_month(&mut seeder, &mut ids, o, o.live_stations).await?;
        live_month(&store, &db.db, o, events, deadline).await?;
    }

    // 5. Scoped refresh of the 120-month account.
    if Instant::now() < deadline {
        refresh_latency(&db.db, o, deadline).await?;
    }
    Ok(())
}

/// Seed the log and print what was seeded; returns the station-months seeded and the
/// id counters (the live month goes on from them).
async fn seed_and_report(
    seeder: &mut Seeder,
    o: &Options,
    deadline: Instant,
) -> anyhow::Result<(u64, plan::Ids)> {
    let t = Instant::now();
    let (seeded_sm, ids) = seed(seeder, o, deadline).await?;
    let seed_s = t.elapsed().as_secs_f64();
    let seeded = seeder.total;
    println!(
        "seeded {seeded} events ({seeded_sm} station-months: {} × {} + 1 × {}) in {seed_s:.1} s",
        o.stations, o.months, o.account_months
    );
    println!("| event type | events |");
    println!("|---|---|");
    for (t, n) in &seeder.counts {
        println!("| {t} | {n} |");
    }
    Ok((seeded_sm, ids))
}

/// Time the catch-up of the `seeded` events from position 0 as the running projector
/// does it (rate sampled, peak RSS, server counters); false when the deadline cut it
/// off.
async fn catch_up(
    store: &DynStore,
    db: &Db,
    seeded: u64,
    seeded_sm: u64,
    deadline: Instant,
) -> anyhow::Result<bool> {
    let status_before = server_status(db).await;
    let sampler = tokio::spawn(sample_progress(db.clone(), seeded));
    super::reset_peak_rss();
    let rss_before_mb = super::rss_kb("VmRSS:") as f64 / 1024.0;
    let t = Instant::now();
    let left = deadline.saturating_duration_since(Instant::now());
    let outcome = tokio::time::timeout(left, bill_projection::catch_up(store, db)).await;
    let secs = t.elapsed().as_secs_f64();
    let peak_mb = super::rss_kb("VmHWM:") as f64 / 1024.0;
    sampler.abort();
    let status_after = server_status(db).await;
    let complete = match outcome {
        Ok(r) => {
            let read = r.map_err(|e| anyhow::anyhow!("catch-up: {e}"))?;
            anyhow::ensure!(read == seeded, "catch-up read {read} of {seeded} events");
            true
        }
        Err(_) => false,
    };
    let applied = checkpoint(db).await? as u64;
    println!(
        "| catch-up | events applied | of seeded | seconds | events/s | station-months/s | RSS MiB before | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {applied} | {seeded} | {secs:.1} | {:.0} | {:.0} | {rss_before_mb:.0} | {peak_mb:.0} |",
        if complete { "complete" } else { "cut off by --max-secs" },
        applied as f64 / secs,
        applied as f64 / secs * seeded_sm as f64 / seeded.max(1) as f64,
    );
    print_status_delta(&status_before, &status_after, applied, seeded_sm);
    Ok(complete)
}

/// Print the bill tables' row counts and the status distribution; after a complete
/// catch-up every decision table must hold one row per station-month seeded.
async fn report_rows(
    db: &Db,
    seeded_sm: u64,
    complete: bool,
) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let rows = table_counts(db).await?;
    println!("| table | rows | station-months seeded |");
    println!("|---|---|---|");
    for (t, n) in &rows {
        println!("| {t} | {n} | {seeded_sm} |");
    }
    if complete {
        for (t, n) in &rows {
            if t.starts_with("fi_") {
                anyhow::ensure!(*n == seeded_sm, "{t}: {n} rows, want {seeded_sm}");
            }
        }
    }
    print_distribution(db).await?;
    Ok(rows)
}

/// Apply the live month's `events` at the head as the live projector does (no bulk
/// folding), timed and bounded by the deadline.
async fn live_month(
    store: &DynStore,
    db: &Db,
    o: &Options,
    events: u64,
    deadline: Instant,
) -> anyhow::Result<()> {
    let live = bill_projection::CatchUp {
        bulk_lag: i64::MAX,
        ..Default::default()
    };
    let from = checkpoint(db).await?;
    let t = Instant::now();
    let left = deadline.saturating_duration_since(Instant::now());
    let done = tokio::time::timeout(left, bill_projection::catch_up_with(store, db, live))
        .await
        .is_ok();
    let secs = t.elapsed().as_secs_f64();
    let applied = checkpoint(db).await? - from;
    println!("| live month | stations | events seeded | events applied | seconds | events/s |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {events} | {applied} | {secs:.1} | {:.0} |",
        if done {
            "complete"
        } else {
            "cut off by --max-secs"
        },
        o.live_stations.min(o.stations),
        applied as f64 / secs
    );
    Ok(())
}

/// Time `rebuild_full` of the whole log and check it left the same row counts; false
/// when the deadline cut it off.
async fn full_rebuild(
    store: &DynStore,
    db: &Db,
    rows: &[(&'static str, u64)],
    seeded_sm: u64,
    deadline: Instant,
) -> anyhow::Result<bool> {
    let t = Instant::now();
    let left = deadline.saturating_duration_since(Instant::now());
    Ok(
        match tokio::time::timeout(left, bill_projection::rebuild_full(store, db)).await {
            Ok(r) => {
                let outcome = r.map_err(|e| anyhow::anyhow!("full rebuild: {e}"))?;
                let secs = t.elapsed().as_secs_f64();
                println!("| full rebuild | events | seconds | events/s | station-months/s |");
                println!("|---|---|---|---|---|");
                println!(
                    "| one transaction | {} | {secs:.1} | {:.0} | {:.0} |",
                    outcome.events_read,
                    outcome.events_read as f64 / secs,
                    seeded_sm as f64 / secs
                );
                let rebuilt = table_counts(db).await?;
                anyhow::ensure!(rebuilt == rows, "the full rebuild changed the row counts");
                true
            }
            Err(_) => {
                println!(
                    "full rebuild cut off by --max-secs after {:.1} s",
                    t.elapsed().as_secs_f64()
                );
                false
            }
        },
    )
}
