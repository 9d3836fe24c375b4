//! The paid-services scans on cron (issue 18, SPEC R-JOB-9) with two real
//! `factledger serve` processes on ONE MariaDB database, every scan on one
//! expression (`--services-cron '*/2 * * * * *'`): each of the 9 schedules fires
//! every 2 s, each firing is recorded once (whichever process holds the lease) with
//! exactly one job `cron:<schedule>:<fire_at_ms>`, and that job ran once to SUCCESS.
//! MariaDB only: the test is about one database shared by two processes.

use crate::common;

use common::serve_child::ServeChild;
use common::{scalar, TestDb};
use factledger::infra::db::{now_ms, Db};
use factledger::services::scans::Scan;
use std::time::{Duration, Instant};

/// Cron lease of the two processes (as the two-process heartbeat test).
const LEASE_MS: i64 = 3_000;
/// Every scan on this expression: every 2 seconds.
const EVERY_2_S: &str = "*/2 * * * * *";
/// How long both processes run before the cutoff.
const RUN_FOR: Duration = Duration::from_secs(9);
/// Most time allowed for the firings up to the cutoff to have run their jobs.
const SETTLE_MAX: Duration = Duration::from_secs(30);

async fn ints(db: &Db, sql: &str) -> Vec<i64> {
    match db {
        Db::Mysql(p) => sqlx::query_scalar::<_, i64>(sql).fetch_all(p).await,
        Db::Sqlite(p) => sqlx::query_scalar::<_, i64>(sql).fetch_all(p).await,
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn serve(dir: &std::path::Path, url: &str) -> ServeChild {
    let lease = LEASE_MS.to_string();
    ServeChild::start(
        dir,
        url,
        &[
            "--cron-lease-ms",
            &lease,
            "--services-cron",
            EVERY_2_S,
            "--settlement-every",
            "off",
        ],
        &[],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_processes_fire_each_services_scan_once_per_firing() {
    if std::env::var_os("FACTLEDGER_TEST_MYSQL_URL").is_none() {
        eprintln!("skipped: FACTLEDGER_TEST_MYSQL_URL is not set (MariaDB only)");
        return;
    }
    let started = Instant::now();
    let db = TestDb::new(common::Backend::Mysql).await;
    let pool = db.database().await.db;
    let dir = tempfile::tempdir().unwrap();
    let servers = [serve(dir.path(), &db.url), serve(dir.path(), &db.url)];

    tokio::time::sleep(RUN_FOR).await;
    let cutoff = now_ms();
    // Every firing up to the cutoff has run its job (bounded), and every schedule fired
    // at least twice by then.
    let deadline = Instant::now() + SETTLE_MAX;
    loop {
        let unfinished = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM cron_firings f LEFT JOIN jobs j ON j.code = f.job_code \
                 WHERE f.fire_at_ms <= {cutoff} AND (j.id IS NULL OR j.status IN (0, 1))"
            ),
        )
        .await;
        let mut fewest = i64::MAX;
        for scan in Scan::ALL {
            let n = scalar(
                &pool,
                &format!(
                    "SELECT COUNT(*) FROM cron_firings WHERE schedule = '{}' \
                     AND fire_at_ms <= {cutoff}",
                    scan.kind().name
                ),
            )
            .await;
            fewest = fewest.min(n);
        }
        if unfinished == 0 && fewest >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after {SETTLE_MAX:?}: {unfinished} firings up to the cutoff unfinished, \
             fewest firings of a schedule {fewest}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pids: Vec<u32> = servers.iter().map(|s| s.pid).collect();
    // Both stop (SIGKILL); only what was committed up to the cutoff is judged.
    drop(servers);

    // No firing twice (the primary key's promise, checked).
    assert_eq!(
        scalar(
            &pool,
            "SELECT COUNT(*) FROM (SELECT schedule, fire_at_ms FROM cron_firings \
             GROUP BY schedule, fire_at_ms HAVING COUNT(*) > 1) d"
        )
        .await,
        0
    );
    let mut report = Vec::new();
    for scan in Scan::ALL {
        let kind = scan.kind().name;
        let times = ints(
            &pool,
            &format!(
                "SELECT fire_at_ms FROM cron_firings WHERE schedule = '{kind}' \
                 AND fire_at_ms <= {cutoff} ORDER BY fire_at_ms"
            ),
        )
        .await;
        assert!(times.len() >= 2, "{kind}: {times:?}");
        // Every 2 s on the even second, none missed between the first and the last.
        for pair in times.windows(2) {
            assert_eq!(pair[1] - pair[0], 2_000, "{kind}: {times:?}");
        }
        assert!(times.iter().all(|t| t % 2_000 == 0), "{kind}: {times:?}");
        // Each firing: exactly one job, its own (code and business key), run once to
        // SUCCESS without a retry.
        let w = format!(
            "FROM cron_firings f JOIN jobs j ON j.code = f.job_code \
             WHERE f.schedule = '{kind}' AND f.fire_at_ms <= {cutoff}"
        );
        let firings = times.len() as i64;
        let keyed = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) {w} AND j.kind = '{kind}' \
                 AND j.business_key = CONCAT('cron:{kind}:', f.fire_at_ms)"
            ),
        )
        .await;
        assert_eq!(keyed, firings, "{kind}: one job per firing, its own");
        let by_key = ints(
            &pool,
            &format!(
                "SELECT (SELECT COUNT(*) FROM jobs j WHERE j.business_key = \
                 CONCAT('cron:{kind}:', f.fire_at_ms)) FROM cron_firings f \
                 WHERE f.schedule = '{kind}' AND f.fire_at_ms <= {cutoff}"
            ),
        )
        .await;
        assert!(
            by_key.iter().all(|&n| n == 1),
            "{kind}: jobs per firing key {by_key:?}"
        );
        let ran_once = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) {w} AND j.status = 2 AND j.retry_count = 0 \
                 AND j.running_attempt = 1"
            ),
        )
        .await;
        assert_eq!(ran_once, firings, "{kind}: every job SUCCESS, run once");
        // No job of the scan's kind without its firing (none ran outside cron).
        let orphans = scalar(
            &pool,
            &format!(
                "SELECT COUNT(*) FROM jobs j WHERE j.kind = '{kind}' AND NOT EXISTS \
                 (SELECT 1 FROM cron_firings f WHERE f.job_code = j.code)"
            ),
        )
        .await;
        assert_eq!(orphans, 0, "{kind}: a job of the kind without its firing");
        report.push(format!("{kind}={firings}"));
    }
    // Which process fired: the lease holder, one of the two.
    let owners = scalar(
        &pool,
        &format!("SELECT COUNT(DISTINCT owner) FROM cron_firings WHERE fire_at_ms <= {cutoff}"),
    )
    .await;
    assert!((1..=2).contains(&owners), "{owners} owners");
    eprintln!(
        "services cron, two serves {pids:?}: firings {}; {owners} lease holder(s); {:?}",
        report.join(" "),
        started.elapsed()
    );
}
