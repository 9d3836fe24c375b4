//! The job engine (issue 4, R-JOB-1 … R-JOB-10, seed 001 §4, §5.1, §8, §9): every rule
//! on both backends.

use crate::common;

use async_trait::async_trait;
use common::{exec, scalar, TestDb};
use factledger::infra::db::{now_ms, Db};
use factledger::infra::jobs::engine::{Engine, EngineConfig, JobFailure, JobHandler, RoundReport};
use factledger::infra::jobs::{Backoff, ClaimedJob, JobKind, JobSubmit, Selector};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// An uncapped kind with the default backoff and a long lease (no heartbeat fires).
static QUICK: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    ..JobKind::new("test_quick", "TQ")
};
/// A capped kind (quota 2).
static CAPPED: JobKind = JobKind {
    cap: Some(2),
    lease_ms: 60_000,
    ..JobKind::new("test_capped", "TC")
};
/// Another capped kind (quota 2), for the total quota.
static OTHER: JobKind = JobKind {
    cap: Some(2),
    lease_ms: 60_000,
    ..JobKind::new("test_other", "TO")
};
/// The seconds schedule of seed 000.
static SECONDS: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    backoff: Backoff::Seconds(factledger::infra::jobs::BACKOFF_SECONDS_DEFAULT),
    ..JobKind::new("test_seconds", "TS")
};

/// A handler that records its rounds, answers from a script (default: succeed) and
/// can be held at the start of a round until released.
#[derive(Default)]
struct Probe {
    rounds: Mutex<Vec<(String, i64, i64, String)>>,
    script: Mutex<VecDeque<Result<RoundReport, JobFailure>>>,
    always_fail: Option<String>,
    hold: Option<(Arc<Notify>, Arc<Notify>)>,
}

impl Probe {
    fn failing(message: &str) -> Arc<Probe> {
        Arc::new(Probe {
            always_fail: Some(message.to_owned()),
            ..Default::default()
        })
    }

    /// Rounds wait after `entered` is notified until `release` is.
    fn holding() -> (Arc<Probe>, Arc<Notify>, Arc<Notify>) {
        let entered = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let p = Arc::new(Probe {
            hold: Some((entered.clone(), release.clone())),
            ..Default::default()
        });
        (p, entered, release)
    }

    fn rounds(&self) -> Vec<(String, i64, i64, String)> {
        self.rounds.lock().unwrap().clone()
    }
}

#[async_trait]
impl JobHandler for Probe {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        self.rounds.lock().unwrap().push((
            job.code.clone(),
            job.running_attempt,
            job.generation,
            job.payload.clone(),
        ));
        if let Some((entered, release)) = &self.hold {
            entered.notify_one();
            release.notified().await;
        }
        if let Some(m) = &self.always_fail {
            return Err(JobFailure::new(m.clone()));
        }
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Ok(RoundReport::done(json!({"changed_rows": 0}))))
    }
}

async fn engine_with(
    db: &TestDb,
    config: impl FnOnce(&mut EngineConfig),
    kinds: Vec<(&'static JobKind, Arc<dyn JobHandler>)>,
) -> Engine {
    let database = db.database().await;
    let mut c = EngineConfig::new(format!("test-{}", uuid::Uuid::new_v4().simple()));
    config(&mut c);
    Engine::new(database.db, database.store, c, kinds).expect("engine")
}

async fn engine(db: &TestDb, kinds: Vec<(&'static JobKind, Arc<dyn JobHandler>)>) -> Engine {
    engine_with(db, |_| {}, kinds).await
}

/// `(status, retry_count, request_generation, running_attempt, last_error)`.
async fn job(db: &Db, code: &str) -> (i64, i64, i64, i64, Option<String>) {
    let q = |c: &str| format!("SELECT {c} FROM jobs WHERE code = '{code}'");
    let error = match db {
        Db::Mysql(p) => sqlx::query_scalar::<_, Option<Vec<u8>>>(&q("last_error"))
            .fetch_one(p)
            .await
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap()),
        Db::Sqlite(p) => sqlx::query_scalar::<_, Option<String>>(&q("last_error"))
            .fetch_one(p)
            .await
            .unwrap(),
    };
    (
        scalar(db, &q("CAST(status AS SIGNED)")).await,
        scalar(db, &q("CAST(retry_count AS SIGNED)")).await,
        scalar(db, &q("request_generation")).await,
        scalar(db, &q("running_attempt")).await,
        error,
    )
}

async fn next_due_in_ms(db: &Db, code: &str) -> i64 {
    scalar(
        db,
        &format!("SELECT next_execute_at_ms FROM jobs WHERE code = '{code}'"),
    )
    .await
        - now_ms()
}

/// Make a job due now (as if its backoff had passed).
async fn make_due(db: &Db, code: &str) {
    exec(
        db,
        &format!("UPDATE jobs SET next_execute_at_ms = 0 WHERE code = '{code}'"),
    )
    .await;
}

async fn submit(e: &Engine, kind: &'static JobKind, key: &str) -> String {
    e.submit(&JobSubmit::plain(kind, key, json!({"key": key})))
        .await
        .expect("submit")
}

async fn alerts(db: &Db, alert: &str) -> Vec<serde_json::Value> {
    let sql = format!("SELECT payload FROM outbox WHERE type = 'alert.{alert}' ORDER BY id");
    let rows: Vec<String> = match db {
        Db::Mysql(p) => sqlx::query_scalar::<_, Vec<u8>>(&sql)
            .fetch_all(p)
            .await
            .unwrap()
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect(),
        Db::Sqlite(p) => sqlx::query_scalar(&sql).fetch_all(p).await.unwrap(),
    };
    rows.iter()
        .map(|r| serde_json::from_str(r).unwrap())
        .collect()
}

both_backends!(
    a_plain_submit_creates_or_reuses_and_never_resets,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, vec![(&QUICK, probe.clone())]).await;
        let code = submit(&e, &QUICK, "k-1").await;
        assert_eq!(code, QUICK.code("k-1"));
        assert_eq!(job(e.db(), &code).await.0, 0, "PENDING on creation");
        e.scan(QUICK.name, None).await.unwrap();
        assert_eq!(job(e.db(), &code).await.0, 2, "SUCCESS");
        // A plain submit of the same key reuses the job: no reset, payload kept, and a
        // kick of a SUCCESS job runs nothing.
        e.submit(&JobSubmit::plain(&QUICK, "k-1", json!({"key": "changed"})))
            .await
            .unwrap();
        let kick = e.kick(std::slice::from_ref(&code)).await.unwrap();
        assert_eq!((kick.claimed, kick.skipped), (0, 0));
        let (status, _, generation, attempt, _) = job(e.db(), &code).await;
        assert_eq!((status, generation, attempt), (2, 0, 1));
        assert_eq!(
            scalar(
                e.db(),
                "SELECT COUNT(*) FROM jobs WHERE payload LIKE '%changed%'"
            )
            .await,
            0
        );
        assert_eq!(scalar(e.db(), "SELECT COUNT(*) FROM jobs").await, 1);
        assert_eq!(probe.rounds().len(), 1);
    }
);

both_backends!(
    a_fact_change_submit_bumps_the_generation_and_revives_a_job_that_is_not_running,
    |db: TestDb| async move {
        let probe = Probe::failing("upstream said no");
        let e = engine(&db, vec![(&QUICK, probe.clone())]).await;
        for (key, end) in [("done", 2), ("failed", 3), ("cancelled", 4)] {
            let code = submit(&e, &QUICK, key).await;
            exec(
                e.db(),
                &format!(
                    "UPDATE jobs SET status = {end}, retry_count = 2, last_error = 'x', \
                     next_execute_at_ms = {} WHERE code = '{code}'",
                    now_ms() + 3_600_000
                ),
            )
            .await;
            e.submit(&JobSubmit::fact_change(
                &QUICK,
                key,
                json!({"key": key, "v": 2}),
            ))
            .await
            .unwrap();
            let (status, retries, generation, _, error) = job(e.db(), &code).await;
            assert_eq!(
                (status, retries, generation, error),
                (0, 0, 1, None),
                "{key}"
            );
            assert!(next_due_in_ms(e.db(), &code).await <= 0, "due now");
            let payload = scalar(
                e.db(),
                &format!(
                    "SELECT COUNT(*) FROM jobs WHERE code = '{code}' AND payload LIKE '%\"v\":2%'"
                ),
            )
            .await;
            assert_eq!(payload, 1, "payload updated");
        }
    }
);

both_backends!(
    a_running_job_with_a_newer_generation_goes_back_to_pending_when_its_round_ends,
    |db: TestDb| async move {
        let (probe, entered, release) = Probe::holding();
        let e = engine(&db, vec![(&QUICK, probe.clone())]).await;
        let code = submit(&e, &QUICK, "k").await;
        let scanning = {
            let e = e.clone();
            tokio::spawn(async move { e.scan(QUICK.name, None).await.unwrap() })
        };
        entered.notified().await;
        // A new fact arrives while the round runs: RUNNING stays RUNNING.
        e.submit(&JobSubmit::fact_change(
            &QUICK,
            "k",
            json!({"key": "k", "v": 2}),
        ))
        .await
        .unwrap();
        assert_eq!(job(e.db(), &code).await.0, 1);
        release.notify_one();
        let report = scanning.await.unwrap();
        assert_eq!((report.succeeded, report.requeued), (0, 1));
        let (status, retries, generation, _, error) = job(e.db(), &code).await;
        assert_eq!((status, retries, generation, error), (0, 0, 1, None));
        assert!(next_due_in_ms(e.db(), &code).await <= 0);
        // The round level says ok; the business level says a newer generation waits.
        let view = factledger::infra::jobs::ops::show(e.db(), &code)
            .await
            .unwrap()
            .unwrap();
        let round = view.levels.round.expect("a round");
        assert!(round.ok && round.newer_generation_pending);
        assert_eq!(round.outcome, "requeued_for_newer_generation");
        assert!(!view.levels.business.done);
        // The next round works on generation 1 with the new payload, and succeeds.
        let next = {
            let e = e.clone();
            tokio::spawn(async move { e.scan(QUICK.name, None).await.unwrap() })
        };
        entered.notified().await;
        release.notify_one();
        assert_eq!(next.await.unwrap().succeeded, 1);
        let rounds = probe.rounds();
        assert_eq!(rounds.len(), 2);
        assert_eq!((rounds[0].2, rounds[1].2), (0, 1));
        assert!(rounds[1].3.contains("\"v\":2"));
        let view = factledger::infra::jobs::ops::show(e.db(), &code)
            .await
            .unwrap()
            .unwrap();
        assert!(view.levels.business.done, "{}", view.levels.business.reason);
        assert_eq!(view.levels.scheduler.expect("a run").entry, "scan");
    }
);

/// Four engines scan the same 120 jobs at once: each job runs exactly once.
async fn concurrent_scans_take_each_job_once(db: TestDb, skip_locked: bool) {
    let probe = Arc::new(Probe::default());
    let first = engine_with(
        &db,
        |c| {
            c.skip_locked = skip_locked;
            c.auto_target = 20;
        },
        vec![(&QUICK, probe.clone())],
    )
    .await;
    let mut engines = vec![first.clone()];
    for _ in 0..3 {
        engines.push(
            engine_with(
                &db,
                |c| {
                    c.skip_locked = skip_locked;
                    c.auto_target = 20;
                },
                vec![(&QUICK, probe.clone())],
            )
            .await,
        );
    }
    for i in 0..120 {
        submit(&first, &QUICK, &format!("j-{i}")).await;
    }
    let mut scans = Vec::new();
    for e in engines {
        scans.push(tokio::spawn(async move {
            let mut claimed = 0;
            for _ in 0..200 {
                let r = e.scan(QUICK.name, None).await.unwrap();
                claimed += r.claimed;
                if r.candidates == 0 {
                    break;
                }
            }
            claimed
        }));
    }
    let mut claimed = 0;
    for s in scans {
        claimed += s.await.unwrap();
    }
    let mut codes: Vec<String> = probe.rounds().into_iter().map(|r| r.0).collect();
    assert_eq!(codes.len(), 120, "every job ran");
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), 120, "no job ran twice");
    assert_eq!(claimed, 120);
    assert_eq!(
        scalar(
            first.db(),
            "SELECT COUNT(*) FROM jobs WHERE status = 2 AND running_attempt = 1"
        )
        .await,
        120
    );
}

both_backends!(
    concurrent_scans_claim_each_job_once_by_compare_and_set,
    |db: TestDb| async move { concurrent_scans_take_each_job_once(db, false).await }
);

mod concurrent_scans_with_skip_locked_claim_each_job_once {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mysql() {
        let db = TestDb::new(common::Backend::Mysql).await;
        concurrent_scans_take_each_job_once(db, true).await;
    }
}

both_backends!(
    failures_back_off_by_the_kinds_schedule_and_stop_at_the_retry_limit,
    |db: TestDb| async move {
        let probe = Probe::failing("the partner API answered 503");
        let e = engine(
            &db,
            vec![(&QUICK, probe.clone()), (&SECONDS, probe.clone())],
        )
        .await;
        let code = submit(&e, &QUICK, "k").await;
        // min(60, max(1, retry + 1) × 5) minutes from the incremented retry count.
        for (retry, minutes) in [(1, 10), (2, 15), (3, 20)] {
            make_due(e.db(), &code).await;
            let r = e.scan(QUICK.name, None).await.unwrap();
            assert_eq!(r.failed, 1);
            let (status, retries, _, _, error) = job(e.db(), &code).await;
            assert_eq!((status, retries), (3, retry));
            assert_eq!(error.as_deref(), Some("the partner API answered 503"));
            let due = next_due_in_ms(e.db(), &code).await;
            assert!(
                (minutes * 60_000 - 5_000..=minutes * 60_000).contains(&due),
                "retry {retry}: due in {due} ms, expected {minutes} min"
            );
        }
        // 3 = first run + 2 retries: the third failure exhausts it, and the scan no
        // longer takes it even when due.
        make_due(e.db(), &code).await;
        let r = e.scan(QUICK.name, None).await.unwrap();
        assert_eq!((r.candidates, r.claimed), (0, 0));
        assert_eq!(probe.rounds().len(), 3);
        let exhausted = alerts(e.db(), "job.retries_exhausted").await;
        assert_eq!(exhausted.len(), 1);
        let a = &exhausted[0];
        common::assert_alert_context(a);
        assert_eq!(a["retry_count"], 3);
        assert_eq!(a["business_id"], "k");
        assert_eq!(a["job"]["code"], code.as_str());
        assert!(a["audit_link"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/jobs/{code}")));
        assert!(a["first_failure_at"].is_string());

        // The seconds schedule: 10, 30, 60 s.
        let code = submit(&e, &SECONDS, "s").await;
        for (retry, seconds) in [(1, 10), (2, 30)] {
            make_due(e.db(), &code).await;
            e.scan(SECONDS.name, None).await.unwrap();
            assert_eq!(job(e.db(), &code).await.1, retry);
            let due = next_due_in_ms(e.db(), &code).await;
            assert!(
                (seconds * 1_000 - 5_000..=seconds * 1_000).contains(&due),
                "{due}"
            );
        }
    }
);

both_backends!(
    the_last_error_keeps_1000_characters,
    |db: TestDb| async move {
        let long = "é".repeat(1_500);
        let e = engine(&db, vec![(&QUICK, Probe::failing(&long))]).await;
        let code = submit(&e, &QUICK, "k").await;
        e.scan(QUICK.name, None).await.unwrap();
        let error = job(e.db(), &code).await.4.expect("an error");
        assert_eq!(error.chars().count(), 1_000);
    }
);

both_backends!(
    an_expired_lease_is_recovered_before_the_scan_as_failed_with_one_more_retry,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, vec![(&QUICK, probe.clone())]).await;
        let live = submit(&e, &QUICK, "live").await;
        let dead = submit(&e, &QUICK, "dead").await;
        let last = submit(&e, &QUICK, "last-chance").await;
        // Three jobs left RUNNING by a worker that died: two with expired leases (one
        // of them on its last retry), one still within its lease.
        let past = now_ms() - 1_000;
        exec(
            e.db(),
            &format!(
                "UPDATE jobs SET status = 1, running_attempt = 1, lease_owner = 'gone', \
                 lease_until_ms = {past} WHERE code IN ('{dead}', '{last}')"
            ),
        )
        .await;
        exec(
            e.db(),
            &format!("UPDATE jobs SET retry_count = 2 WHERE code = '{last}'"),
        )
        .await;
        exec(
            e.db(),
            &format!(
                "UPDATE jobs SET status = 1, running_attempt = 1, lease_owner = 'alive', \
                 lease_until_ms = {} WHERE code = '{live}'",
                now_ms() + 60_000
            ),
        )
        .await;
        let r = e.scan(QUICK.name, None).await.unwrap();
        assert_eq!(r.recovered, 2);
        // Recovered: FAILED with retry + 1 and due now, so the same scan takes `dead`
        // (1 < 3) but not `last-chance` (3 < 3 fails).
        assert_eq!(r.claimed, 1);
        let rounds = probe.rounds();
        assert_eq!(rounds.len(), 1);
        assert_eq!((rounds[0].0.as_str(), rounds[0].1), (dead.as_str(), 2));
        let (status, retries, _, _, error) = job(e.db(), &last).await;
        assert_eq!((status, retries), (3, 3));
        assert!(error.unwrap().contains("lease expired"));
        assert_eq!(job(e.db(), &live).await.0, 1, "a live lease is left alone");
        assert_eq!(alerts(e.db(), "job.retries_exhausted").await.len(), 1);
    }
);

both_backends!(
    quotas_count_live_leases_per_kind_and_in_total_and_skipped_candidates_are_not_back_filled,
    |db: TestDb| async move {
        let (probe, entered, release) = Probe::holding();
        let e = engine_with(
            &db,
            |c| c.total_cap = 3,
            vec![(&CAPPED, probe.clone()), (&OTHER, probe.clone())],
        )
        .await;
        // A total configured below the sum of the kind caps is raised to it.
        assert_eq!(e.total_cap(), 4);
        for i in 0..5 {
            submit(&e, &CAPPED, &format!("c-{i}")).await;
        }
        // A RUNNING job of the kind with an expired lease does not count (and is
        // recovered); one with a live lease does.
        let busy = submit(&e, &CAPPED, "busy-elsewhere").await;
        exec(
            e.db(),
            &format!(
                "UPDATE jobs SET status = 1, running_attempt = 1, lease_owner = 'other', \
                 lease_until_ms = {} WHERE code = '{busy}'",
                now_ms() + 60_000
            ),
        )
        .await;
        let scanning = {
            let e = e.clone();
            tokio::spawn(async move { e.scan(CAPPED.name, None).await.unwrap() })
        };
        entered.notified().await;
        // Cap 2 with one live lease elsewhere: this scan may claim one more only.
        let second = e.scan(CAPPED.name, None).await.unwrap();
        assert_eq!(second.claimed, 0, "quota full while the first round runs");
        release.notify_one();
        let first = scanning.await.unwrap();
        assert_eq!(first.candidates, 5);
        assert_eq!((first.claimed, first.skipped), (1, 4), "no back-fill");
        assert_eq!(probe.rounds().len(), 1);

        // The total: 3 running CAPPED jobs (a manual retry ignores quotas) leave room
        // for only one OTHER job under the total of 4.
        let (c1, c2) = (CAPPED.code("c-1"), CAPPED.code("c-2"));
        exec(
            e.db(),
            &format!(
                "UPDATE jobs SET status = 1, running_attempt = running_attempt + 1, \
                 lease_owner = 'other', lease_until_ms = {} WHERE code IN ('{c1}', '{c2}')",
                now_ms() + 60_000
            ),
        )
        .await;
        let running: i64 = scalar(
            e.db(),
            "SELECT COUNT(*) FROM jobs WHERE kind = 'test_capped' AND status = 1",
        )
        .await;
        assert_eq!(running, 3);
        for i in 0..3 {
            submit(&e, &OTHER, &format!("o-{i}")).await;
        }
        let (probe_other_entered, probe_release) = (entered.clone(), release.clone());
        let other = {
            let e = e.clone();
            tokio::spawn(async move { e.scan(OTHER.name, None).await.unwrap() })
        };
        probe_other_entered.notified().await;
        probe_release.notify_one();
        let other = other.await.unwrap();
        assert_eq!(
            (other.candidates, other.claimed),
            (3, 1),
            "the total quota binds"
        );
    }
);

both_backends!(
    the_candidate_count_is_normalised_and_bounds_a_scan,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine_with(&db, |c| c.auto_target = 3, vec![(&QUICK, probe.clone())]).await;
        for i in 0..10 {
            submit(&e, &QUICK, &format!("n-{i}")).await;
        }
        let r = e.scan(QUICK.name, Some(500)).await.unwrap();
        assert_eq!((r.candidates, r.claimed), (3, 3));
        let r = e.scan(QUICK.name, Some(2)).await.unwrap();
        assert_eq!((r.candidates, r.claimed), (2, 2));
        // Taken in the order due time, retries, id (rounds of one scan run at once,
        // so compare each scan's set).
        let rounds: Vec<String> = probe.rounds().into_iter().map(|r| r.0).collect();
        let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
        let codes: Vec<String> = (0..5).map(|i| QUICK.code(&format!("n-{i}"))).collect();
        assert_eq!(set(&rounds[..3]), set(&codes[..3]));
        assert_eq!(set(&rounds[3..]), set(&codes[3..]));
    }
);

both_backends!(
    a_manual_retry_ignores_due_time_retry_limit_and_quota_but_only_takes_pending_or_failed,
    |db: TestDb| async move {
        let probe = Probe::failing("still broken");
        let e = engine(&db, vec![(&CAPPED, probe.clone())]).await;
        let exhausted = submit(&e, &CAPPED, "exhausted").await;
        let long_key = format!("STATION_MONTH:{}|MODE=ALL", "100:202609,".repeat(20));
        let by_key = e
            .submit(&JobSubmit::plain(&CAPPED, long_key.clone(), json!({})))
            .await
            .unwrap();
        let succeeded = submit(&e, &CAPPED, "succeeded").await;
        let future = now_ms() + 3_600_000;
        exec(
            e.db(),
            &format!(
                "UPDATE jobs SET status = 3, retry_count = 3, next_execute_at_ms = {future} \
                 WHERE code = '{exhausted}'"
            ),
        )
        .await;
        exec(
            e.db(),
            &format!("UPDATE jobs SET status = 2 WHERE code = '{succeeded}'"),
        )
        .await;
        // The quota is full of other work: a manual retry does not care.
        for i in 0..2 {
            let c = submit(&e, &CAPPED, &format!("busy-{i}")).await;
            exec(
                e.db(),
                &format!(
                    "UPDATE jobs SET status = 1, running_attempt = 1, lease_until_ms = {future} \
                     WHERE code = '{c}'"
                ),
            )
            .await;
        }
        // The long key is stored hashed; the selector names it in full.
        assert_eq!(
            scalar(
                e.db(),
                &format!(
                    "SELECT COUNT(*) FROM jobs WHERE business_key = '{}'",
                    CAPPED.stored_key(&long_key)
                )
            )
            .await,
            1
        );
        let selector = Selector::parse(
            vec![exhausted.clone(), succeeded.clone(), by_key.clone()],
            vec![long_key.clone(), "exhausted".into()],
        )
        .unwrap();
        let r = e.retry(&selector).await.unwrap();
        assert_eq!(r.entry, "manual");
        assert_eq!((r.candidates, r.claimed, r.skipped), (3, 2, 1));
        let ran: Vec<String> = probe.rounds().into_iter().map(|r| r.0).collect();
        assert_eq!(
            ran,
            vec![exhausted.clone(), by_key.clone()],
            "serial, each once"
        );
        // A manual failure still counts.
        assert_eq!(job(e.db(), &exhausted).await.1, 4);
        assert_eq!(job(e.db(), &succeeded).await.0, 2);
    }
);

both_backends!(
    a_kick_obeys_due_time_retry_limit_and_quota_like_the_scan,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, vec![(&CAPPED, probe.clone())]).await;
        let later = e
            .submit(&JobSubmit::plain(&CAPPED, "later", json!({})).due_at_ms(now_ms() + 600_000))
            .await
            .unwrap();
        let exhausted = submit(&e, &CAPPED, "exhausted").await;
        exec(
            e.db(),
            &format!("UPDATE jobs SET status = 3, retry_count = 3 WHERE code = '{exhausted}'"),
        )
        .await;
        let r = e.kick(&[later.clone(), exhausted.clone()]).await.unwrap();
        assert_eq!((r.candidates, r.claimed), (0, 0), "not due / no retry left");
        // Quota full: the kick waits for the scan like everyone else.
        let due = submit(&e, &CAPPED, "due").await;
        let future = now_ms() + 600_000;
        for i in 0..2 {
            let c = submit(&e, &CAPPED, &format!("busy-{i}")).await;
            exec(
                e.db(),
                &format!(
                    "UPDATE jobs SET status = 1, running_attempt = 1, lease_until_ms = {future} \
                     WHERE code = '{c}'"
                ),
            )
            .await;
        }
        let r = e.kick(std::slice::from_ref(&due)).await.unwrap();
        assert_eq!((r.candidates, r.claimed, r.skipped), (1, 0, 1));
        exec(e.db(), "UPDATE jobs SET status = 2 WHERE status = 1").await;
        let r = e.kick(std::slice::from_ref(&due)).await.unwrap();
        assert_eq!(r.claimed, 1);
        assert_eq!(r.entry, "kick");
        assert_eq!(probe.rounds().len(), 1);
        assert_eq!(job(e.db(), &due).await.0, 2);
    }
);

both_backends!(
    a_maintenance_pause_stops_scan_manual_and_kick_while_submissions_are_accepted,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, vec![(&QUICK, probe.clone())]).await;
        e.set_paused(true, "ops", Some("database upgrade"))
            .await
            .unwrap();
        let code = submit(&e, &QUICK, "k").await;
        assert_eq!(job(e.db(), &code).await.0, 0, "submitted while paused");
        let scan = e.scan(QUICK.name, None).await.unwrap();
        assert!(scan.paused);
        assert_eq!(scan.claimed, 0);
        let kick = e.kick(std::slice::from_ref(&code)).await.unwrap();
        assert!(kick.paused);
        let manual = e
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await;
        assert!(matches!(
            manual,
            Err(factledger::infra::jobs::JobError::Paused)
        ));
        assert!(probe.rounds().is_empty());
        e.set_paused(false, "ops", None).await.unwrap();
        assert_eq!(e.scan(QUICK.name, None).await.unwrap().succeeded, 1);
    }
);

both_backends!(
    an_oversize_payload_is_refused_at_submit_and_one_found_at_execution_exhausts_its_retries,
    |db: TestDb| async move {
        let probe = Arc::new(Probe::default());
        let e = engine(&db, vec![(&QUICK, probe.clone())]).await;
        let big = json!({"scopes": "x".repeat(factledger::infra::jobs::PAYLOAD_BYTES_MAX)});
        let refused = e.submit(&JobSubmit::plain(&QUICK, "big", big)).await;
        let err = refused.expect_err("refused");
        assert_eq!(err.field(), Some("payload"));
        assert!(err.to_string().contains("16384"), "{err}");
        let nodes = json!((0..1_300).collect::<Vec<_>>());
        let refused = e.submit(&JobSubmit::plain(&QUICK, "nodes", nodes)).await;
        assert!(refused.unwrap_err().to_string().contains("1200"));
        assert_eq!(scalar(e.db(), "SELECT COUNT(*) FROM jobs").await, 0);
        // A row that got in some other way is claimed, checked and exhausted at once.
        let code = submit(&e, &QUICK, "sneaky").await;
        exec(
            e.db(),
            &format!(
                "UPDATE jobs SET payload = '\"{}\"' WHERE code = '{code}'",
                "y".repeat(20_000)
            ),
        )
        .await;
        let r = e.scan(QUICK.name, None).await.unwrap();
        assert_eq!(r.failed, 1);
        let (status, retries, ..) = job(e.db(), &code).await;
        assert_eq!((status, retries), (3, 3));
        assert!(probe.rounds().is_empty(), "the handler never saw it");
    }
);

/// A short lease (300 ms, renewed every 100 ms) for the heartbeat test.
static SHORT: JobKind = JobKind {
    cap: None,
    lease_ms: 300,
    ..JobKind::new("test_short", "TSH")
};

/// Works for 1.2 s (four leases), then reports whether it still held its claim.
struct Slow(Arc<Mutex<Vec<bool>>>);

#[async_trait]
impl JobHandler for Slow {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
        self.0.lock().unwrap().push(job.claim_lost());
        Ok(RoundReport::done(json!({})))
    }
}

both_backends!(
    a_heartbeat_keeps_a_long_round_leased_and_a_round_whose_claim_went_is_told,
    |db: TestDb| async move {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let e = engine(&db, vec![(&SHORT, Arc::new(Slow(seen.clone())))]).await;
        let other = engine(&db, vec![(&SHORT, Arc::new(Slow(seen.clone())))]).await;
        let code = submit(&e, &SHORT, "long").await;
        let round = {
            let e = e.clone();
            tokio::spawn(async move { e.scan(SHORT.name, None).await.unwrap() })
        };
        // Meanwhile another worker scans again and again: the lease never expires.
        for _ in 0..8 {
            tokio::time::sleep(std::time::Duration::from_millis(120)).await;
            let r = other.scan(SHORT.name, None).await.unwrap();
            assert_eq!((r.recovered, r.claimed), (0, 0), "recovered a live round");
        }
        let r = round.await.unwrap();
        assert_eq!(r.succeeded, 1);
        assert_eq!(*seen.lock().unwrap(), vec![false]);
        assert!(
            scalar(
                e.db(),
                &format!("SELECT heartbeat_at_ms FROM jobs WHERE code = '{code}'")
            )
            .await
                > 0
        );
        // A round whose job is taken from it (recovered, re-claimed) learns so from
        // its heartbeat.
        exec(
            e.db(),
            &format!("UPDATE jobs SET status = 0, next_execute_at_ms = 0 WHERE code = '{code}'"),
        )
        .await;
        let round = {
            let e = e.clone();
            tokio::spawn(async move { e.scan(SHORT.name, None).await.unwrap() })
        };
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        exec(
            e.db(),
            &format!("UPDATE jobs SET running_attempt = running_attempt + 1 WHERE code = '{code}'"),
        )
        .await;
        let r = round.await.unwrap();
        assert_eq!(r.fenced, 1, "its completion is refused");
        assert_eq!(*seen.lock().unwrap(), vec![false, true]);
    }
);

/// A manual retry names its job: a row another transaction holds for a moment (a
/// scan's next-key lock, a heartbeat, an upsert) is waited for, never skipped — SKIP
/// LOCKED is for scans and kicks, which take whatever is free.
mod a_manual_retry_waits_for_a_locked_row_instead_of_skipping_it {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mysql() {
        let db = TestDb::new(common::Backend::Mysql).await;
        let probe = Arc::new(Probe::default());
        let e = engine_with(&db, |c| c.skip_locked = true, vec![(&QUICK, probe.clone())]).await;
        // Due in a minute: no kick or scan takes it first.
        let code = e
            .submit(
                &JobSubmit::plain(&QUICK, "locked", json!({"key": "locked"}))
                    .due_at_ms(now_ms() + 60_000),
            )
            .await
            .unwrap();
        let Db::Mysql(pool) = e.db() else {
            unreachable!("a MariaDB engine")
        };
        let mut holder = pool.begin().await.unwrap();
        sqlx::query(&format!(
            "SELECT id FROM jobs WHERE code = '{code}' FOR UPDATE"
        ))
        .fetch_all(&mut *holder)
        .await
        .unwrap();
        let retry = {
            let (e, code) = (e.clone(), code.clone());
            tokio::spawn(async move {
                e.retry(&Selector::parse(vec![code], vec![]).unwrap())
                    .await
                    .unwrap()
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        holder.commit().await.unwrap();
        let r = retry.await.unwrap();
        assert_eq!((r.candidates, r.claimed, r.succeeded), (1, 1, 1), "{r:?}");
        assert_eq!(probe.rounds().len(), 1);
    }
}
