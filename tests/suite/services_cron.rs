//! The paid-services scans on cron (issue 18, SPEC R-JOB-9) with two real
//! `factledger serve` processes on ONE MariaDB database, every scan on one
//! expression (`--services-cron '*/2 * * * * *'`): each of the 9 schedules fires
//! every 2 s, each firing is recorded once (whichever process holds the lease) with
//! exactly one job `cron:<schedule>:<fire_at_ms>`, and that job ran once to SUCCESS.
//! And a `serve` killed in the middle of a scan round: a restarted one runs the scan
//! again within two intervals (the round's short lease, issue 32 item 0b).
//! MariaDB only: the tests are about processes sharing one database.

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

/// The scans of the kill test fire every 15 s: the order-timeout close of a killed
/// round must come within two of these intervals (issue 32 item 0b).
const EVERY_15_S: &str = "*/15 * * * * *";
const SCAN_INTERVAL_MS: i64 = 15_000;
/// Most time allowed for a step of the kill test (a start, a firing, a wait).
const STEP_MAX: Duration = Duration::from_secs(40);

/// `factledger serve` with the scans every 15 s and the cron lease of the tests.
fn serve_scans(dir: &std::path::Path, url: &str) -> ServeChild {
    let lease = LEASE_MS.to_string();
    ServeChild::start(
        dir,
        url,
        &[
            "--cron-lease-ms",
            &lease,
            "--services-cron",
            EVERY_15_S,
            "--settlement-every",
            "off",
        ],
        &[],
    )
}

/// Wait (bounded by [`STEP_MAX`]) until `sql` counts at least one row.
async fn wait_for_rows(pool: &Db, sql: &str, what: &str) {
    common::eventually(STEP_MAX, || async { scalar(pool, sql).await > 0 })
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {STEP_MAX:?}"));
}

/// Issue 32 item 0b: a `serve` SIGKILLed in the middle of an order-timeout scan left
/// the scan's kind blocked for its 5-minute lease (the close ran up to 304 s late,
/// and the order stayed payable meanwhile). The round is cut off at its append (the
/// test holds the lock every append takes first), the process killed and started
/// again: the order is closed within two scan intervals of the killed firing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_killed_mid_round_is_taken_over_within_two_intervals() {
    use common::mariadb::{a_statement_waits, hold_appends};
    use factledger::services::scans::ORDER_TIMEOUT_CLOSE;
    use factledger_aggregates::service_order::{CreateOrder, OrderBusiness, ORDER_AGGREGATE_TYPE};
    use factledger_aggregates::services::{PaymentMethod, UserId};
    if std::env::var_os("FACTLEDGER_TEST_MYSQL_URL").is_none() {
        eprintln!("skipped: FACTLEDGER_TEST_MYSQL_URL is not set (MariaDB only)");
        return;
    }
    let db = TestDb::new(common::Backend::Mysql).await;
    let database = db.database().await;
    let pool = database.db.clone();
    let dir = tempfile::tempdir().unwrap();
    let server = serve_scans(dir.path(), &db.url);

    // An unpaid order already past its timeout, in the projection the scan reads.
    let now = chrono::Utc::now();
    let order_no = "SO-KILLED-SCAN";
    let create = CreateOrder {
        order_no: order_no.into(),
        user_id: UserId::parse(7).unwrap(),
        business: OrderBusiness::Recharge { candy: 100 },
        method: PaymentMethod::Wechat,
        amount: 100,
        currency: Some(factledger_aggregates::Currency::parse("CNY").unwrap()),
        created_at: now - chrono::Duration::seconds(20),
        timeout_at: now - chrono::Duration::seconds(10),
    };
    factledger::services::units::orders::create(&database.store, &common::meta(), create, None)
        .await
        .expect("create the order");
    // Projectors take no append lock: the row still reaches the projection, and the
    // next order-timeout round runs into the held lock at its close; then the kill.
    let held = hold_appends(&db.url).await;
    wait_for_rows(
        &pool,
        &format!("SELECT COUNT(*) FROM service_orders WHERE order_no = '{order_no}'"),
        "the order in the projection",
    )
    .await;
    assert!(
        a_statement_waits(&db.url, "UPDATE event_sequence", STEP_MAX).await,
        "no order-timeout round reached its append"
    );
    let kind = ORDER_TIMEOUT_CLOSE.name;
    let fired_at = scalar(
        &pool,
        &format!(
            "SELECT CAST(SUBSTRING_INDEX(business_key, ':', -1) AS SIGNED) FROM jobs \
             WHERE kind = '{kind}' AND status = 1"
        ),
    )
    .await;
    drop(server);
    // The dead process's connections die with it: MariaDB would otherwise run the
    // waiting append (a script sent whole) to its commit once the lock is free.
    let waiting = ints(
        &pool,
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
         AND INFO LIKE 'UPDATE event_sequence%'",
    )
    .await;
    assert!(!waiting.is_empty(), "the killed round's append is gone");
    if let Db::Mysql(p) = &pool {
        for id in waiting {
            // Gone already is as good.
            let _ = sqlx::query(&format!("KILL {id}")).execute(p).await;
        }
    }
    held.rollback().await.expect("release the append lock");
    let killed_at = now_ms();
    let stream = || {
        database
            .store
            .read_stream(ORDER_AGGREGATE_TYPE, order_no, 1, 100)
    };
    let closed = |events: &[factledger::infra::store::StoredEvent]| {
        events.iter().any(|e| e.event_type == "OrderClosed")
    };
    assert!(
        !closed(&stream().await.expect("read the order")),
        "the killed round closed the order"
    );

    let _server = serve_scans(dir.path(), &db.url);
    let due = fired_at + 2 * SCAN_INTERVAL_MS;
    loop {
        if closed(&stream().await.expect("read the order")) {
            break;
        }
        assert!(
            now_ms() < due,
            "the order is still open {} ms after the killed firing (killed at +{} ms): \
             the killed round's lease still blocks its kind",
            now_ms() - fired_at,
            killed_at - fired_at
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "killed at +{} ms after the firing, closed by +{} ms",
        killed_at - fired_at,
        now_ms() - fired_at
    );
}
