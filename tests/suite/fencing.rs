//! Fencing (issue 4 item 2, seed 001 §9.2 fixed) and enqueue-with-events (item 3):
//! a job handler's business writes are fenced by its claim, and a command appends its
//! events, follow-up jobs and outbox rows in one transaction. Both backends.

use crate::common;

use async_trait::async_trait;
use common::{exec, meta, scalar, TestDb};
use factledger::infra::db::now_ms;
use factledger::infra::jobs::engine::{Engine, EngineConfig, JobFailure, JobHandler, RoundReport};
use factledger::infra::jobs::{ClaimedJob, JobKind, JobSubmit};
use factledger::infra::store::{Fence, StoreError, UnitOfWork};
use factledger::runtime::bus::{CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{Wallet, WalletCommand};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::Notify;

static CREDIT: JobKind = JobKind {
    cap: None,
    // Long: the heartbeat (every third) never fires during the test, so a stalled
    // worker is simulated by expiring its lease in the database.
    lease_ms: 60_000,
    ..JobKind::new("test_credit", "TCR")
};

fn cmd(v: serde_json::Value) -> WalletCommand {
    serde_json::from_value(v).expect("valid command")
}

/// Credits the wallet once per round, fenced by the round's claim; the first worker
/// can be made to stall before it writes.
struct Credit {
    bus: CommandBus<Wallet>,
    stall: Option<(Arc<Notify>, Arc<Notify>)>,
}

#[async_trait]
impl JobHandler for Credit {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        if let Some((entered, release)) = &self.stall {
            entered.notify_one();
            release.notified().await;
        }
        let mut env = CommandEnvelope::new(
            "w-1",
            cmd(json!({"type": "CreditPending", "ref_type": "COMMISSION",
                "ref_id": format!("round-{}", job.running_attempt), "amount_minor": 100})),
            meta(),
        );
        env.fence = Some(job.fence());
        self.bus.execute(env).await?;
        Ok(RoundReport::done(json!({"credited": 1})))
    }
}

async fn engine(db: &TestDb, handler: Credit) -> Engine {
    let d = db.database().await;
    Engine::new(
        d.db,
        d.store,
        EngineConfig::new(format!("w-{}", uuid::Uuid::new_v4().simple())),
        vec![(&CREDIT, Arc::new(handler))],
    )
    .expect("engine")
}

async fn ledger_refs(db: &TestDb) -> Vec<String> {
    db.store
        .read_stream("wallet", "w-1", 1, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == "PendingCredited")
        .map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
            v["PendingCredited"]["ref_id"]
                .as_str()
                .or_else(|| v["ref_id"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

both_backends!(
    a_stalled_worker_whose_lease_was_recovered_writes_nothing_and_the_new_result_stands,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        bus.execute(CommandEnvelope::new(
            "w-1",
            cmd(json!({"type": "Open", "user_id": "u-1", "currency": "IDR"})),
            meta(),
        ))
        .await
        .unwrap();
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let a = engine(
            &db,
            Credit {
                bus: bus.clone(),
                stall: Some((entered.clone(), release.clone())),
            },
        )
        .await;
        let b = engine(
            &db,
            Credit {
                bus: bus.clone(),
                stall: None,
            },
        )
        .await;
        let code = a
            .submit(&JobSubmit::plain(&CREDIT, "settle:c-1", json!({})))
            .await
            .unwrap();
        // Worker A claims (attempt 1) and stalls past its lease.
        let worker_a = {
            let a = a.clone();
            tokio::spawn(async move { a.scan(CREDIT.name, None).await.unwrap() })
        };
        entered.notified().await;
        exec(
            a.db(),
            &format!(
                "UPDATE jobs SET lease_until_ms = {} WHERE code = '{code}'",
                now_ms() - 1
            ),
        )
        .await;
        // Worker B recovers the lease and claims the job (attempt 2), credits, succeeds.
        let rb = b.scan(CREDIT.name, None).await.unwrap();
        assert_eq!((rb.recovered, rb.claimed, rb.succeeded), (1, 1, 1));
        // A wakes up and tries to write under attempt 1: refused, nothing written.
        release.notify_one();
        let ra = worker_a.await.unwrap();
        assert_eq!((ra.claimed, ra.succeeded, ra.fenced), (1, 0, 1));
        assert_eq!(ledger_refs(&db).await, vec!["round-2".to_owned()]);
        let balance = bus.state("w-1").await.unwrap().state;
        assert_eq!(
            serde_json::to_value(&balance).unwrap()["balances"]["pending_minor"],
            100,
            "{balance:?}"
        );
        // B's result stands: SUCCESS at attempt 2 with one fenced write committed.
        let q = |c: &str| format!("SELECT {c} FROM jobs WHERE code = '{code}'");
        assert_eq!(scalar(a.db(), &q("CAST(status AS SIGNED)")).await, 2);
        assert_eq!(scalar(a.db(), &q("running_attempt")).await, 2);
        assert_eq!(scalar(a.db(), &q("fenced_writes")).await, 1);
        assert_eq!(
            scalar(
                a.db(),
                "SELECT COUNT(*) FROM outbox WHERE type = 'alert.job.fenced'"
            )
            .await,
            1,
            "the rejection is alerted"
        );
    }
);

both_backends!(
    a_fenced_unit_writes_nothing_even_inside_a_batch_with_good_units,
    |db: TestDb| async move {
        let d = db.database().await;
        let e = Engine::new(
            d.db.clone(),
            d.store.clone(),
            EngineConfig::new("t"),
            vec![(
                &CREDIT,
                Arc::new(Credit {
                    bus: CommandBus::start(db.store.clone()),
                    stall: None,
                }),
            )],
        )
        .unwrap();
        let code = e
            .submit(&JobSubmit::plain(&CREDIT, "k", json!({})))
            .await
            .unwrap();
        let id = scalar(&d.db, &format!("SELECT id FROM jobs WHERE code = '{code}'")).await;
        // Not running at all: any fence on it is stale.
        let fenced = UnitOfWork {
            outbox: vec![factledger::infra::store::OutboxRow {
                aggregatetype: "t".into(),
                aggregateid: "x".into(),
                r#type: "t.Fenced".into(),
                payload: "{}".into(),
            }],
            fence: Some(Fence {
                job_id: id,
                running_attempt: 1,
            }),
            ..Default::default()
        };
        let good = UnitOfWork {
            jobs: vec![JobSubmit::plain(&CREDIT, "follow-up", json!({}))
                .row(now_ms())
                .unwrap()],
            ..Default::default()
        };
        let err = d.store.append(&[good.clone(), fenced.clone()]).await;
        assert!(
            matches!(err, Err(StoreError::Fenced { job_id, running_attempt: 1 }) if job_id == id),
            "{err:?}"
        );
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM outbox").await, 0);
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM jobs").await, 1);
        // With the job RUNNING at attempt 1 the same unit commits.
        exec(
            &d.db,
            &format!("UPDATE jobs SET status = 1, running_attempt = 1 WHERE id = {id}"),
        )
        .await;
        d.store.append(&[good, fenced]).await.unwrap();
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM outbox").await, 1);
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM jobs").await, 2);
    }
);

both_backends!(
    a_command_appends_its_events_follow_up_jobs_and_outbox_rows_in_one_transaction,
    |db: TestDb| async move {
        let d = db.database().await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        let follow_up = |key: &str| {
            JobSubmit::plain(&CREDIT, key, json!({"wallet": "w-1"}))
                .row(now_ms())
                .unwrap()
        };
        let mut open = CommandEnvelope::new(
            "w-1",
            cmd(json!({"type": "Open", "user_id": "u-1", "currency": "IDR"})),
            meta(),
        );
        open.jobs = vec![follow_up("welcome:w-1")];
        let done = bus.execute(open).await.unwrap();
        assert_eq!(
            scalar(
                &d.db,
                "SELECT COUNT(*) FROM jobs WHERE business_key = 'welcome:w-1'"
            )
            .await,
            1
        );
        // Every wallet event has its outbox row, with ids dense from 1.
        assert_eq!(
            scalar(
                &d.db,
                "SELECT COUNT(*) FROM outbox WHERE type = 'wallet.WalletOpened' \
                AND aggregateid = 'w-1' AND id = 1"
            )
            .await,
            1
        );
        assert!(done.position > 0);
        // A refused command enqueues nothing.
        let mut refused = CommandEnvelope::new(
            "w-1",
            cmd(
                json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "c-9",
                "amount_minor": 5}),
            ),
            meta(),
        );
        refused.jobs = vec![follow_up("never")];
        assert!(bus.execute(refused).await.is_err());
        assert_eq!(
            scalar(
                &d.db,
                "SELECT COUNT(*) FROM jobs WHERE business_key = 'never'"
            )
            .await,
            0
        );
        // A unit that fails after its events are written takes its jobs and outbox
        // rows with it.
        let (version, hash) = db.store.stream_head("wallet", "w-1").await.unwrap();
        let sealed = factledger::infra::store::SealedEvent::seal(
            db.store.keyring().active(),
            &hash,
            "wallet",
            "w-1",
            version + 1,
            "Noted".into(),
            1,
            "{}".into(),
            &meta(),
            uuid::Uuid::new_v4(),
            chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6),
        );
        let failing = UnitOfWork {
            streams: vec![factledger::infra::store::StreamAppend {
                aggregate_type: "wallet".into(),
                aggregate_id: "w-1".into(),
                expected_version: version,
                expected_hash: hash,
                events: vec![sealed],
            }],
            jobs: vec![follow_up("lost-with-its-unit")],
            outbox: vec![factledger::infra::store::OutboxRow {
                aggregatetype: "wallet".into(),
                aggregateid: "w-1".into(),
                r#type: "wallet.Noted".into(),
                payload: "{}".into(),
            }],
            fail_after_streams: Some(1),
            ..Default::default()
        };
        assert!(matches!(
            db.store.append(&[failing]).await,
            Err(StoreError::Injected(1))
        ));
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM jobs").await, 1);
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM outbox").await, 1);
        assert_eq!(db.store.head_position().await.unwrap(), done.position);
        // The next append continues the outbox ids without a hole.
        let mut credit = CommandEnvelope::new(
            "w-1",
            cmd(
                json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1",
                "amount_minor": 700}),
            ),
            meta(),
        );
        credit.jobs = vec![factledger::infra::jobs::JobSubmit::fact_change(
            &CREDIT,
            "welcome:w-1",
            json!({"v": 2}),
        )
        .row(now_ms())
        .unwrap()];
        bus.execute(credit).await.unwrap();
        assert_eq!(
            scalar(
                &d.db,
                "SELECT COUNT(*) FROM outbox WHERE id = 2 AND type = 'wallet.PendingCredited'"
            )
            .await,
            1
        );
        assert_eq!(
            scalar(
                &d.db,
                "SELECT request_generation FROM jobs WHERE business_key = 'welcome:w-1'"
            )
            .await,
            1,
            "a fact-change submit inside the unit"
        );
    }
);

both_backends!(
    a_batch_with_several_fences_fails_whole_and_names_the_stale_claim,
    |db: TestDb| async move {
        let d = db.database().await;
        let now = now_ms();
        let mut ids = Vec::new();
        for key in ["a", "b"] {
            d.store
                .append(&[UnitOfWork {
                    jobs: vec![JobSubmit::plain(&CREDIT, key, json!({})).row(now).unwrap()],
                    ..Default::default()
                }])
                .await
                .unwrap();
            ids.push(
                scalar(
                    &d.db,
                    &format!("SELECT id FROM jobs WHERE code = '{}'", CREDIT.code(key)),
                )
                .await,
            );
        }
        // Job a is RUNNING at attempt 3; job b is RUNNING at attempt 1.
        exec(
            &d.db,
            &format!(
                "UPDATE jobs SET status = 1, running_attempt = 3 WHERE id = {}",
                ids[0]
            ),
        )
        .await;
        exec(
            &d.db,
            &format!(
                "UPDATE jobs SET status = 1, running_attempt = 1 WHERE id = {}",
                ids[1]
            ),
        )
        .await;
        let unit = |job_id, running_attempt| UnitOfWork {
            outbox: vec![factledger::infra::store::OutboxRow {
                aggregatetype: "t".into(),
                aggregateid: "x".into(),
                r#type: "t.Fenced".into(),
                payload: "{}".into(),
            }],
            fence: Some(Fence {
                job_id,
                running_attempt,
            }),
            ..Default::default()
        };
        // Two current claims and two units of one claim: all commit, counted twice.
        d.store
            .append(&[unit(ids[0], 3), unit(ids[1], 1), unit(ids[1], 1)])
            .await
            .unwrap();
        assert_eq!(
            scalar(
                &d.db,
                &format!("SELECT fenced_writes FROM jobs WHERE id = {}", ids[1])
            )
            .await,
            2
        );
        // One stale claim (attempt 2 of job a) fails the batch and is named.
        let err = d
            .store
            .append(&[unit(ids[1], 1), unit(ids[0], 2)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Fenced { job_id, running_attempt: 2 } if job_id == ids[0]),
            "{err:?}"
        );
        assert_eq!(scalar(&d.db, "SELECT COUNT(*) FROM outbox").await, 3);
    }
);
