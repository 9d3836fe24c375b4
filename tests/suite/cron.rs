//! Cron on the job engine (issue 4 item 5, SPEC R-JOB-9): singleton firing through the
//! database lease, each firing recorded once with its job, catch-up after a takeover,
//! delayed single-item jobs; and two real `factledger serve` processes on one MariaDB
//! database, one of them killed.

use crate::common;

use async_trait::async_trait;
use common::serve_child::ServeChild;
use common::{exec, scalar, TestDb};
use factledger::infra::db::{now_ms, Db};
use factledger::infra::jobs::cron::{
    self, record_firing, CronConfig, CronSchedule, FireOutcome, LeaseToken, Scheduler,
};
use factledger::infra::jobs::engine::{Engine, EngineConfig, JobFailure, JobHandler, RoundReport};
use factledger::infra::jobs::{ClaimedJob, JobKind, JobSubmit};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The job kind the test schedules submit.
static TICK: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    ..JobKind::new("cron_test_tick", "CTT")
};

/// Lease of the in-process tests (their clock is injected, so it never expires by
/// itself).
const LEASE_MS: i64 = 10_000;

/// Records the business key of every round.
#[derive(Default)]
struct Probe {
    keys: Mutex<Vec<String>>,
}

#[async_trait]
impl JobHandler for Probe {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        self.keys.lock().unwrap().push(job.business_key.clone());
        Ok(RoundReport::done(job.payload_json()?))
    }
}

async fn engine(db: &TestDb, probe: Arc<Probe>) -> Engine {
    let database = db.database().await;
    let config = EngineConfig::new(format!("test-{}", uuid::Uuid::new_v4().simple()));
    Engine::new(database.db, database.store, config, vec![(&TICK, probe)]).expect("engine")
}

fn every_second() -> CronSchedule {
    CronSchedule::new("every_second", "* * * * * *", &TICK).expect("schedule")
}

fn scheduler(engine: &Engine, owner: &str) -> Scheduler {
    let mut config = CronConfig::new(owner);
    config.lease_ms = LEASE_MS;
    Scheduler::new(engine.clone(), vec![every_second()], config).expect("scheduler")
}

/// A whole second an hour ago: firings in the past are due for the engine at once.
fn t0() -> i64 {
    (now_ms() / 1_000) * 1_000 - 3_600_000
}

/// One text column on either backend (MariaDB reports `_bin` columns as bytes).
async fn texts(db: &Db, sql: &str) -> Vec<String> {
    match db {
        Db::Mysql(p) => sqlx::query_scalar::<_, Vec<u8>>(sql)
            .fetch_all(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect(),
        Db::Sqlite(p) => sqlx::query_scalar::<_, String>(sql)
            .fetch_all(p)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    }
}

async fn ints(db: &Db, sql: &str) -> Vec<i64> {
    match db {
        Db::Mysql(p) => sqlx::query_scalar::<_, i64>(sql).fetch_all(p).await,
        Db::Sqlite(p) => sqlx::query_scalar::<_, i64>(sql).fetch_all(p).await,
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `(fire_at_ms, owner)` of every firing of a schedule, in fire-time order.
async fn firings(db: &Db, schedule: &str) -> Vec<(i64, String)> {
    let w = format!("FROM cron_firings WHERE schedule = '{schedule}' ORDER BY fire_at_ms");
    let times = ints(db, &format!("SELECT fire_at_ms {w}")).await;
    let owners = texts(db, &format!("SELECT owner {w}")).await;
    times.into_iter().zip(owners).collect()
}

/// Every firing has exactly one job, keyed by its schedule and fire time.
async fn assert_one_job_per_firing(db: &Db, schedule: &str) {
    let firings = scalar(
        db,
        &format!("SELECT COUNT(*) FROM cron_firings WHERE schedule = '{schedule}'"),
    )
    .await;
    let key = match db {
        Db::Mysql(_) => format!("CONCAT('cron:{schedule}:', f.fire_at_ms)"),
        Db::Sqlite(_) => format!("'cron:{schedule}:' || f.fire_at_ms"),
    };
    let joined = scalar(
        db,
        &format!(
            "SELECT COUNT(*) FROM cron_firings f JOIN jobs j ON j.code = f.job_code \
             WHERE f.schedule = '{schedule}' AND j.business_key = {key}"
        ),
    )
    .await;
    let jobs = scalar(
        db,
        &format!("SELECT COUNT(*) FROM jobs WHERE business_key LIKE 'cron:{schedule}:%'"),
    )
    .await;
    assert_eq!((joined, jobs), (firings, firings), "one job per firing");
}

/// The fire times are every second of `(from, to]`, each once.
#[track_caller]
fn assert_every_second(times: &[i64], from: i64, to: i64) {
    let expected: Vec<i64> = ((from / 1_000 + 1)..=(to / 1_000))
        .map(|s| s * 1_000)
        .collect();
    assert_eq!(times, expected.as_slice());
}

// -----------------------------------------------------------------------------------

both_backends!(
    a_firing_is_recorded_once_with_its_job_when_writers_race_for_it,
    |db: TestDb| async move {
        let e = engine(&db, Arc::new(Probe::default())).await;
        let s = scheduler(&e, "holder");
        let t = t0();
        let (lease, took) = s.acquire(t).await.unwrap().expect("the lease is free");
        assert!(took);
        s.tick_at(t).await.unwrap(); // creates the schedule row (cursor = t)
        let fire_at = t + 1_000;
        let schedule = every_second();
        // Eight writers with the live lease race for the same firing.
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (db2, lease, schedule) = (e.db().clone(), lease.clone(), schedule.clone());
            tasks.push(tokio::spawn(async move {
                record_firing(&db2, &lease, LEASE_MS, &schedule, fire_at, t + 1_100).await
            }));
        }
        let mut recorded = 0;
        for task in tasks {
            match task.await.unwrap().unwrap() {
                FireOutcome::Recorded { job_code } => {
                    recorded += 1;
                    assert_eq!(job_code, TICK.code(&format!("cron:every_second:{fire_at}")));
                }
                FireOutcome::Duplicate => {}
                FireOutcome::LeaseLost => panic!("the lease is live"),
            }
        }
        assert_eq!(recorded, 1, "exactly one writer records the firing");
        assert_eq!(
            firings(e.db(), "every_second").await,
            vec![(fire_at, "holder".to_owned())]
        );
        assert_one_job_per_firing(e.db(), "every_second").await;
        assert_eq!(
            scalar(
                e.db(),
                "SELECT cursor_ms FROM cron_schedules WHERE name = 'every_second'"
            )
            .await,
            fire_at,
            "the cursor moved with the firing"
        );
        // A token that is not the lease's (another owner, or an old epoch) writes
        // nothing at all: no firing, no job.
        let stranger = LeaseToken {
            owner: "stranger".into(),
            epoch: lease.epoch,
        };
        let stale = LeaseToken {
            epoch: lease.epoch - 1,
            ..lease.clone()
        };
        for token in [stranger, stale] {
            let out = record_firing(e.db(), &token, LEASE_MS, &schedule, t + 2_000, t + 2_100)
                .await
                .unwrap();
            assert_eq!(out, FireOutcome::LeaseLost);
        }
        // The holder's own lease, once expired, writes nothing either.
        let out = record_firing(e.db(), &lease, LEASE_MS, &schedule, t + 2_000, t + 60_000)
            .await
            .unwrap();
        assert_eq!(out, FireOutcome::LeaseLost);
        assert_eq!(firings(e.db(), "every_second").await.len(), 1);
        assert_one_job_per_firing(e.db(), "every_second").await;
    }
);

both_backends!(only_the_lease_holder_fires, |db: TestDb| async move {
    let e = engine(&db, Arc::new(Probe::default())).await;
    let (a, b) = (scheduler(&e, "a"), scheduler(&e, "b"));
    let t = t0();
    let r = a.tick_at(t).await.unwrap();
    assert!(r.holder && r.took_over && r.fired.is_empty(), "{r:?}");
    for step in 1..=5 {
        let now = t + step * 1_000 + 200;
        let rb = b.tick_at(now).await.unwrap();
        assert!(!rb.holder && rb.fired.is_empty(), "b never fires: {rb:?}");
        let ra = a.tick_at(now).await.unwrap();
        assert!(ra.holder && !ra.took_over, "{ra:?}");
        assert_eq!(
            ra.fired,
            vec![("every_second".to_owned(), t + step * 1_000)]
        );
    }
    let all = firings(e.db(), "every_second").await;
    assert!(all.iter().all(|(_, owner)| owner == "a"), "{all:?}");
    let times: Vec<i64> = all.iter().map(|(t, _)| *t).collect();
    assert_every_second(&times, t, t + 5_200);
    assert_one_job_per_firing(e.db(), "every_second").await;
});

both_backends!(
    a_takeover_after_expiry_fires_the_missed_times_once,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, probe.clone()).await;
        let (a, b) = (scheduler(&e, "a"), scheduler(&e, "b"));
        let t = t0();
        a.tick_at(t).await.unwrap();
        let r = a.tick_at(t + 2_300).await.unwrap();
        assert_eq!(r.fired.len(), 2);
        // `a` dies. Until its lease (renewed at t + 2.3 s) expires, `b` waits.
        let r = b.tick_at(t + 2_300 + LEASE_MS - 1).await.unwrap();
        assert!(!r.holder && r.fired.is_empty(), "{r:?}");
        let takeover = t + 2_300 + LEASE_MS + 500;
        let r = b.tick_at(takeover).await.unwrap();
        assert!(r.holder && r.took_over, "{r:?}");
        // Every second `a` missed, each once.
        let missed: Vec<i64> = r.fired.iter().map(|(_, t)| *t).collect();
        assert_every_second(&missed, t + 2_000, takeover);
        // `a` comes back: it cannot renew, cannot take the live lease, and its old
        // token records nothing.
        let r = a.tick_at(takeover + 100).await.unwrap();
        assert!(!r.holder && r.fired.is_empty(), "{r:?}");
        let old = LeaseToken {
            owner: "a".into(),
            epoch: 1,
        };
        let out = record_firing(
            e.db(),
            &old,
            LEASE_MS,
            &every_second(),
            takeover + 1_000,
            takeover + 1_100,
        )
        .await
        .unwrap();
        assert_eq!(out, FireOutcome::LeaseLost);
        let r = b.tick_at(takeover + 1_000).await.unwrap();
        assert_eq!(
            r.fired,
            vec![("every_second".to_owned(), (takeover / 1_000 + 1) * 1_000)]
        );

        let all = firings(e.db(), "every_second").await;
        let times: Vec<i64> = all.iter().map(|(t, _)| *t).collect();
        assert_every_second(&times, t, takeover + 1_000);
        let owners: Vec<&str> = all.iter().map(|(_, o)| o.as_str()).collect();
        assert_eq!(&owners[..2], &["a", "a"]);
        assert!(owners[2..].iter().all(|o| *o == "b"), "{owners:?}");
        assert_eq!(
            ints(
                e.db(),
                "SELECT DISTINCT lease_epoch FROM cron_firings ORDER BY lease_epoch"
            )
            .await,
            vec![1, 2],
            "each holder's firings carry its epoch"
        );
        assert_one_job_per_firing(e.db(), "every_second").await;
        // The jobs run on the ordinary engine, each once.
        loop {
            let r = e.scan(TICK.name, Some(500)).await.unwrap();
            if r.claimed == 0 {
                break;
            }
        }
        let mut ran = probe.keys.lock().unwrap().clone();
        ran.sort();
        let mut expected: Vec<String> = times
            .iter()
            .map(|t| format!("cron:every_second:{t}"))
            .collect();
        expected.sort();
        assert_eq!(ran, expected, "each firing's job ran once");
    }
);

both_backends!(
    two_schedulers_ticking_together_fire_each_second_once,
    |db: TestDb| async move {
        let e = engine(&db, Arc::new(Probe::default())).await;
        let (a, b) = (scheduler(&e, "a"), scheduler(&e, "b"));
        let t = t0();
        let mut end = t;
        let mut holders = std::collections::BTreeSet::new();
        for step in 0..24 {
            end = t + step * 700;
            if step == 12 {
                // The holder stalls past its lease: whoever ticks next may take over.
                exec(e.db(), "UPDATE cron_leases SET lease_until_ms = 0").await;
            }
            let (ra, rb) = tokio::join!(a.tick_at(end), b.tick_at(end));
            let (ra, rb) = (ra.unwrap(), rb.unwrap());
            assert_ne!(ra.holder, rb.holder, "exactly one holder: {ra:?} {rb:?}");
            if ra.holder {
                holders.insert("a");
            }
            if rb.holder {
                holders.insert("b");
            }
        }
        let times: Vec<i64> = firings(e.db(), "every_second")
            .await
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        assert_every_second(&times, t, end);
        assert_one_job_per_firing(e.db(), "every_second").await;
        assert!(!holders.is_empty());
    }
);

both_backends!(
    catch_up_fires_at_most_the_newest_missed_firings_and_counts_the_rest,
    |db: TestDb| async move {
        let e = engine(&db, Arc::new(Probe::default())).await;
        let (a, b) = (scheduler(&e, "a"), scheduler(&e, "b"));
        let t = t0() - 600_000;
        a.tick_at(t).await.unwrap();
        let extra = 20;
        let now = t + (cron::CATCH_UP_FIRINGS_MAX as i64 + extra) * 1_000;
        assert!(now - t > LEASE_MS);
        let r = b.tick_at(now).await.unwrap();
        assert!(r.took_over);
        assert_eq!(r.fired.len(), cron::CATCH_UP_FIRINGS_MAX);
        assert_eq!(r.skipped, extra as u64);
        let times: Vec<i64> = firings(e.db(), "every_second")
            .await
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        assert_every_second(&times, t + extra * 1_000, now);
        assert_eq!(
            scalar(
                e.db(),
                "SELECT skipped_firings FROM cron_schedules WHERE name = 'every_second'"
            )
            .await,
            extra
        );
        // The operator view tells the same.
        let status = b.status().await.unwrap();
        assert_eq!(status.lease.owner.as_deref(), Some("b"));
        let s = &status.schedules[0];
        assert_eq!(
            (s.name.as_str(), s.skipped_firings),
            ("every_second", extra)
        );
        assert_eq!(s.cursor_ms, Some(now));
        assert_eq!(s.next_fire_at_ms, Some(now + 1_000));
        assert_eq!(s.last_firings.len(), cron::LAST_FIRINGS_SHOWN as usize);
        assert_eq!(s.last_firings[0].fire_at_ms, now);
        assert_eq!(
            s.last_firings[0].job_status,
            Some(factledger::infra::jobs::JobStatus::Pending)
        );
    }
);

both_backends!(
    the_callback_replay_scan_fires_every_two_minutes_and_runs_replay_failed,
    |db: TestDb| async move {
        let database = db.database().await;
        let mut options = factledger::server::ServeOptions::default();
        let e = factledger::server::job_engine(&database, "ID", &mut options)
            .await
            .unwrap();
        let s = factledger::server::cron_scheduler(&e, &options).unwrap();
        let t = (now_ms() / 120_000) * 120_000 - 3_600_000; // on a 2-minute boundary
        s.tick_at(t + 1).await.unwrap();
        let r = s.tick_at(t + 4 * 60_000 + 1).await.unwrap();
        let name = factledger::callbacks::replay::CALLBACK_REPLAY_SCAN_SCHEDULE.to_owned();
        // Settlement (every 5 min) may fire in the same four minutes.
        let fired: Vec<(String, i64)> = r.fired.into_iter().filter(|f| f.0 == name).collect();
        assert_eq!(
            fired,
            vec![(name.clone(), t + 120_000), (name, t + 240_000)]
        );
        // Two firings, one round at a time (the kind's cap is 1).
        for _ in 0..2 {
            let scan = e
                .scan(
                    factledger::callbacks::replay::CALLBACK_REPLAY_SCAN.name,
                    None,
                )
                .await
                .unwrap();
            assert_eq!((scan.claimed, scan.succeeded), (1, 1), "{scan:?}");
        }
        let code = factledger::callbacks::replay::CALLBACK_REPLAY_SCAN.code(&format!(
            "cron:{}:{}",
            factledger::callbacks::replay::CALLBACK_REPLAY_SCAN_SCHEDULE,
            t + 120_000
        ));
        let job = factledger::infra::jobs::ops::show(e.db(), &code)
            .await
            .unwrap()
            .unwrap();
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(v["status"], "SUCCESS", "{v}");
        assert!(v.to_string().contains("\"submitted\":0"), "{v}");
    }
);

both_backends!(
    a_delayed_job_runs_at_its_time_and_not_before,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, probe.clone()).await;
        let due = now_ms() + 1_500;
        let submit = |key: &str| JobSubmit::plain(&TICK, key, json!({})).due_at_ms(due);
        let by_kick = e.submit(&submit("delayed-kick")).await.unwrap();
        let by_scan = e.submit(&submit("delayed-scan")).await.unwrap();
        let early = e.scan(TICK.name, None).await.unwrap();
        assert_eq!((early.candidates, early.claimed), (0, 0), "not due yet");
        let early = e.kick(std::slice::from_ref(&by_kick)).await.unwrap();
        assert_eq!(
            (early.candidates, early.claimed),
            (0, 0),
            "a kick obeys the due time"
        );
        assert!(probe.keys.lock().unwrap().is_empty());
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(due - now_ms() + 50).unwrap_or(0),
        ))
        .await;
        let kicked = e.kick(std::slice::from_ref(&by_kick)).await.unwrap();
        assert_eq!((kicked.claimed, kicked.succeeded), (1, 1), "{kicked:?}");
        let scanned = e.scan(TICK.name, None).await.unwrap();
        assert_eq!((scanned.claimed, scanned.succeeded), (1, 1), "{scanned:?}");
        assert_eq!(scanned.codes, vec![by_scan]);
        assert_eq!(
            *probe.keys.lock().unwrap(),
            vec!["delayed-kick".to_owned(), "delayed-scan".to_owned()]
        );
    }
);

// -----------------------------------------------------------------------------------
// Two `factledger serve` processes on one MariaDB database.

/// Cron lease of the process test: a dead holder is replaced 2 to 4 s after the kill,
/// so at least two firings are missed and must be caught up (a takeover that fired only
/// the newest would leave a gap).
const PROCESS_LEASE_MS: i64 = 3_000;

/// The pid in a lease owner id (`host:pid:suffix`).
fn owner_pid(owner: &str) -> Option<u32> {
    owner.rsplit(':').nth(1)?.parse().ok()
}

async fn lease_owner(db: &Db) -> Option<String> {
    texts(db, "SELECT owner FROM cron_leases WHERE owner IS NOT NULL")
        .await
        .into_iter()
        .next()
}

/// Poll `check` every 100 ms until it holds, at most `within`.
async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_processes_fire_each_second_once_and_none_is_lost_when_the_holder_is_killed() {
    let db = TestDb::new(common::Backend::Mysql).await;
    let pool = db.database().await.db;
    let dir = tempfile::tempdir().unwrap();
    let first = ServeChild::with_heartbeat(dir.path(), &db.url, PROCESS_LEASE_MS);
    let second = ServeChild::with_heartbeat(dir.path(), &db.url, PROCESS_LEASE_MS);
    let mut servers = vec![first, second];

    // Firings start; find the holder.
    wait_until(
        Duration::from_secs(10),
        "three heartbeat firings",
        || async { firings(&pool, cron::HEARTBEAT_SCHEDULE).await.len() >= 3 },
    )
    .await;
    let owner = lease_owner(&pool).await.expect("a lease holder");
    let holder_pid = owner_pid(&owner).expect("pid in the owner id");
    let holder = servers
        .iter()
        .position(|s| s.pid == holder_pid)
        .unwrap_or_else(|| panic!("the holder {owner} is neither server"));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Kill the holder mid-way (SIGKILL: no clean shutdown, its lease just expires).
    let killed = servers.remove(holder);
    let killed_pid = killed.pid;
    drop(killed);
    let killed_at = now_ms();
    let survivor = &servers[0];
    wait_until(
        Duration::from_secs(10),
        "the survivor to take the lease",
        || async { lease_owner(&pool).await.and_then(|o| owner_pid(&o)) == Some(survivor.pid) },
    )
    .await;
    let took_over_at = now_ms();
    assert!(
        took_over_at - killed_at < 3 * PROCESS_LEASE_MS + 2_000,
        "takeover took {} ms",
        took_over_at - killed_at
    );

    // A few more seconds under the new holder, until every job up to then has run.
    let cutoff = took_over_at + 3_000;
    wait_until(
        Duration::from_secs(20),
        "firings past the cutoff and their jobs done",
        || async {
            let fired_past = scalar(
                &pool,
                &format!(
                    "SELECT COUNT(*) FROM cron_firings WHERE schedule = 'heartbeat' \
                     AND fire_at_ms > {cutoff}"
                ),
            )
            .await;
            let unfinished = scalar(
                &pool,
                &format!(
                    "SELECT COUNT(*) FROM cron_firings f JOIN jobs j ON j.code = f.job_code \
                     WHERE f.schedule = 'heartbeat' AND f.fire_at_ms <= {cutoff} \
                     AND j.status <> 2"
                ),
            )
            .await;
            fired_past > 0 && unfinished == 0
        },
    )
    .await;

    // The operator view of the live server names the holder and the firings.
    let key = std::fs::read_to_string(dir.path().join("factledger-admin.key")).unwrap();
    let view: Value = reqwest::Client::new()
        .get(format!("{}/v1/cron", survivor.base))
        .bearer_auth(key.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let survivor_pid = survivor.pid;
    drop(servers);

    assert_eq!(
        view["lease"]["owner"].as_str().and_then(owner_pid),
        Some(survivor_pid),
        "{view}"
    );
    let hb = view["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "heartbeat")
        .unwrap_or_else(|| panic!("{view}"));
    assert_eq!(hb["expression"], "* * * * * *");
    assert!(!hb["last_firings"].as_array().unwrap().is_empty(), "{view}");
    assert!(
        view["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == factledger::callbacks::replay::CALLBACK_REPLAY_SCAN_SCHEDULE),
        "{view}"
    );

    // Every second from the first firing to the cutoff fired exactly once: no
    // duplicate, and no gap — the seconds the dead holder missed were caught up.
    let all: Vec<(i64, String)> = firings(&pool, cron::HEARTBEAT_SCHEDULE)
        .await
        .into_iter()
        .filter(|(t, _)| *t <= cutoff)
        .collect();
    let times: Vec<i64> = all.iter().map(|(t, _)| *t).collect();
    let first = times[0];
    assert_every_second(&times, first - 1_000, cutoff);
    assert!(times.len() >= 6, "{times:?}");
    let by_killed = all
        .iter()
        .filter(|(_, o)| owner_pid(o) == Some(killed_pid))
        .count();
    let by_survivor = all
        .iter()
        .filter(|(_, o)| owner_pid(o) == Some(survivor_pid))
        .count();
    assert!(by_killed >= 3 && by_survivor >= 3, "{all:?}");
    assert_eq!(by_killed + by_survivor, all.len(), "{all:?}");
    // The survivor recorded some firings late: those the dead holder missed.
    let caught_up = scalar(
        &pool,
        &format!(
            "SELECT COUNT(*) FROM cron_firings WHERE schedule = 'heartbeat' \
             AND recorded_at_ms - fire_at_ms >= 500 AND fire_at_ms > {killed_at} - 2000 \
             AND fire_at_ms <= {cutoff}"
        ),
    )
    .await;
    assert!(caught_up >= 1, "no firing was caught up after the kill");

    // Each firing's job ran to SUCCESS, once: only a round cut off by the kill may
    // have been run again (its lease recovered), and then it is the second attempt.
    let w = format!(
        "FROM cron_firings f JOIN jobs j ON j.code = f.job_code \
         WHERE f.schedule = 'heartbeat' AND f.fire_at_ms <= {cutoff}"
    );
    assert_eq!(
        scalar(&pool, &format!("SELECT COUNT(*) {w} AND j.status = 2")).await,
        all.len() as i64
    );
    let attempts = ints(&pool, &format!("SELECT j.running_attempt {w}")).await;
    let rerun = attempts.iter().filter(|&&a| a != 1).count();
    assert!(
        rerun <= 1 && attempts.iter().all(|&a| a == 1 || a == 2),
        "attempts: {attempts:?}"
    );
}
