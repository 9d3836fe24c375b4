//! Fault test (issue 14 item 9): two real `factledger serve` processes on one MariaDB
//! database take concurrent wallet commands while each in turn is SIGKILLed and
//! started again.
//!
//! Clients send every command with its own Idempotency-Key to both processes in
//! turn; when a process dies under a command (no answer) or is down (connection
//! refused), the client sends the same key and body to whichever process is up.
//! Both processes also run the 1-second heartbeat cron (the hidden
//! `--test-cron-heartbeat` flag) on the database lease. The test proves that nothing
//! is lost (every acknowledged command is in the log once), nothing is doubled
//! (one event per command and per ledger ref; balances are the sums of the
//! acknowledged credits) and the heartbeat fired each second of the run exactly
//! once, the seconds a dead lease holder missed caught up by the other process.

mod common;

use common::load::{self, Load, Progress, Targets};
use common::mariadb::{a_statement_waits, hold_appends};
use common::serve_child::ServeChild;
use common::{Backend, TestDb};
use factledger::infra::db::now_ms;
use factledger::infra::jobs::cron;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Cron lease: a dead holder is replaced 3 to 6 s after the kill.
const PROCESS_LEASE_MS: i64 = 3_000;
/// How long a killed process stays down before it is started again.
const DOWN_FOR: Duration = Duration::from_millis(500);
/// Time allowed for each wait of the test (load progress, cron catching up).
const WAIT_MAX: Duration = Duration::from_secs(25);

/// Wait (bounded) until `share` of the load is acknowledged.
async fn wait_for_share(progress: &Progress, load: &Load, share_percent: usize) {
    let wanted = load.total() * share_percent / 100;
    let deadline = Instant::now() + WAIT_MAX;
    while Progress::get(&progress.acknowledged) < wanted {
        assert!(
            Instant::now() < deadline,
            "the load stalled before {share_percent} %"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn ints(pool: &sqlx::MySqlPool, sql: &str) -> Vec<i64> {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn count(pool: &sqlx::MySqlPool, sql: &str) -> i64 {
    ints(pool, sql).await.first().copied().unwrap_or(0)
}

/// Wait (bounded) until the heartbeat fired past `cutoff` and every job of a firing
/// up to `cutoff` is done.
async fn wait_for_heartbeats_past(pool: &sqlx::MySqlPool, cutoff: i64) {
    let hb = cron::HEARTBEAT_SCHEDULE;
    let fired_past = format!(
        "SELECT COUNT(*) FROM cron_firings WHERE schedule = '{hb}' AND fire_at_ms > {cutoff}"
    );
    let unfinished = format!(
        "SELECT COUNT(*) FROM cron_firings f JOIN jobs j ON j.code = f.job_code \
         WHERE f.schedule = '{hb}' AND f.fire_at_ms <= {cutoff} AND j.status <> 2"
    );
    let deadline = Instant::now() + WAIT_MAX;
    while count(pool, &fired_past).await == 0 || count(pool, &unfinished).await > 0 {
        assert!(Instant::now() < deadline, "the heartbeat did not catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The heartbeat fired every second from its first firing to `cutoff` exactly once,
/// each firing with one job that ran to SUCCESS.
async fn assert_each_second_fired_once(pool: &sqlx::MySqlPool, cutoff: i64) {
    let hb = cron::HEARTBEAT_SCHEDULE;
    let times = ints(
        pool,
        &format!(
            "SELECT fire_at_ms FROM cron_firings WHERE schedule = '{hb}' \
             AND fire_at_ms <= {cutoff} ORDER BY fire_at_ms"
        ),
    )
    .await;
    let first = *times.first().expect("the heartbeat fired");
    let expected: Vec<i64> = (first / 1_000..=cutoff / 1_000)
        .map(|s| s * 1_000)
        .collect();
    assert_eq!(times, expected, "each second once, no gap, no duplicate");
    // Which process held the lease when each was killed is up to the race at start,
    // and a takeover may come after the last firing checked, so who fired is printed,
    // not asserted: the property is the one above — each second once, no gap.
    let owners = count(
        pool,
        &format!("SELECT COUNT(DISTINCT owner) FROM cron_firings WHERE schedule = '{hb}'"),
    )
    .await;
    println!("heartbeat fired by {owners} lease holder(s)");
    let done = count(
        pool,
        &format!(
            "SELECT COUNT(DISTINCT j.code) FROM cron_firings f JOIN jobs j ON j.code = f.job_code \
             WHERE f.schedule = '{hb}' AND f.fire_at_ms <= {cutoff} AND j.status = 2 \
             AND j.business_key = CONCAT('cron:{hb}:', f.fire_at_ms)"
        ),
    )
    .await;
    assert_eq!(done, times.len() as i64, "one finished job per firing");
    let jobs = count(
        pool,
        &format!("SELECT COUNT(*) FROM jobs WHERE business_key LIKE 'cron:{hb}:%'"),
    )
    .await;
    let firings = count(
        pool,
        &format!("SELECT COUNT(*) FROM cron_firings WHERE schedule = '{hb}'"),
    )
    .await;
    assert_eq!(jobs, firings, "no job without its firing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_serves_under_load_with_sigkills_lose_nothing_double_nothing_and_fire_each_cron_once() {
    let started = Instant::now();
    let db = TestDb::new(Backend::Mysql).await;
    let pool = sqlx::MySqlPool::connect(&db.url).await.expect("connect");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut servers = vec![
        Some(ServeChild::with_heartbeat(
            dir.path(),
            &db.url,
            PROCESS_LEASE_MS,
        )),
        Some(ServeChild::with_heartbeat(
            dir.path(),
            &db.url,
            PROCESS_LEASE_MS,
        )),
    ];
    let admin = std::fs::read_to_string(dir.path().join(factledger::infra::auth::ADMIN_KEY_FILE))
        .expect("the first serve wrote the admin key");
    let targets = Targets::new(
        servers.iter().flatten().map(|s| s.base.clone()).collect(),
        admin.trim(),
    );
    let load = Load {
        run: format!("two{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
        clients: 8,
        commands_per_client: 40,
        wallets: 4,
        pace: Duration::from_millis(20),
    };
    load.open_wallets(&targets).await;

    let progress = Arc::new(Progress::default());
    let driving = {
        let (load, targets, progress) = (load.clone(), targets.clone(), progress.clone());
        tokio::spawn(async move { load.drive(targets, progress).await })
    };
    // SIGKILL each process in turn under the load, and start it again (on a new
    // port, which the clients then use). Appends are held at the kill, so commands
    // are in flight at both processes (the clients send to both in turn) and the
    // victim dies in the middle of some.
    for (victim, share_percent) in [(0, 20), (1, 55)] {
        wait_for_share(&progress, &load, share_percent).await;
        let held = hold_appends(&db.url).await;
        let in_flight = a_statement_waits(&db.url, "UPDATE event_sequence", WAIT_MAX).await;
        assert!(in_flight, "no append was in flight at the kill");
        servers[victim] = None;
        held.rollback().await.expect("release the sequence lock");
        tokio::time::sleep(DOWN_FOR).await;
        let (dir, url) = (dir.path().to_owned(), db.url.clone());
        let back = tokio::task::spawn_blocking(move || {
            ServeChild::with_heartbeat(&dir, &url, PROCESS_LEASE_MS)
        })
        .await
        .expect("restart serve");
        targets.replace(victim, back.base.clone());
        servers[victim] = Some(back);
    }
    let runs = driving.await.expect("load");
    let cutoff = now_ms();
    let failures = load::failure_summary(&runs);
    let replayed_after_a_failure = runs
        .iter()
        .filter(|r| r.attempts.iter().any(|a| a.failed()))
        .filter(|r| r.attempts.last() == Some(&load::Attempt::Done { replayed: true }))
        .count();
    println!(
        "{} commands, failed attempts: {failures:?}, {replayed_after_a_failure} retried \
         command(s) had committed before the kill and were replayed",
        runs.len()
    );

    // The kills were felt: commands went unanswered and were retried elsewhere.
    assert!(failures.contains_key("no answer"), "{failures:?}");
    // Nothing lost, nothing doubled.
    load::assert_every_command_acknowledged(&load, &runs);
    load::assert_replays_match(&targets, &runs).await;
    load::assert_one_event_per_command(&pool, &load, &runs).await;
    let head = runs.iter().flat_map(|r| r.positions.clone()).max().unwrap();
    load::assert_balances(&targets, &load, &runs, head).await;

    // The heartbeat fired each second of the run once, across both kills.
    wait_for_heartbeats_past(&pool, cutoff).await;
    assert_each_second_fired_once(&pool, cutoff).await;
    drop(servers);
    pool.close().await;
    println!("took {:?}", started.elapsed());
}
