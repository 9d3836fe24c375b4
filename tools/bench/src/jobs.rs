//! Jobs claimed and completed per second (issue 4 item 10): `workers` engines (each
//! with its own pool, as separate worker processes would have) scan one kind until
//! every seeded job has succeeded. Handlers: `noop`, and `fenced`, which appends one
//! wallet event per job through a unit fenced by the job's claim (a shared command
//! bus, as worker tasks of one process share theirs).

use async_trait::async_trait;
use factledger::infra::jobs::{
    ClaimedJob, Engine, EngineConfig, JobFailure, JobHandler, JobKind, JobSubmit, RoundReport,
};
use factledger::infra::store::UnitOfWork;
use factledger::runtime::bus::{CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{MoveFunds, OpenWallet, Wallet, WalletCommand};
use factledger_aggregates::{AmountMinor, BoundedId, Currency};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Uncapped (quotas are not what is measured), a long lease (no heartbeat fires).
static BENCH: JobKind = JobKind {
    cap: None,
    lease_ms: 300_000,
    parallelism: 20,
    ..JobKind::new("bench", "BENCH")
};

/// Wallets the fenced handler spreads its credits over.
const WALLETS: u64 = 64;
/// Jobs submitted per seeding transaction.
const SEED_BATCH: usize = 1_000;

struct Noop(Arc<AtomicU64>);

#[async_trait]
impl JobHandler for Noop {
    async fn run(&self, _job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(RoundReport::default())
    }
}

struct Fenced {
    bus: CommandBus<Wallet>,
    done: Arc<AtomicU64>,
}

#[async_trait]
impl JobHandler for Fenced {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let wallet = format!("bw-{}", job.id as u64 % WALLETS);
        let command = WalletCommand::CreditPending(MoveFunds {
            ref_type: BoundedId::parse("JOB").map_err(|e| JobFailure::new(e.to_string()))?,
            ref_id: BoundedId::parse(&job.code).map_err(|e| JobFailure::new(e.to_string()))?,
            amount_minor: AmountMinor::parse(1).map_err(|e| JobFailure::new(e.to_string()))?,
            currency: None,
            counterparty: None,
        });
        let mut env = CommandEnvelope::new(wallet, command, super::metadata());
        env.fence = Some(job.fence());
        self.bus.execute(env).await?;
        self.done.fetch_add(1, Ordering::Relaxed);
        Ok(RoundReport::default())
    }
}

pub async fn bench(url: &str, jobs: u64, workers: usize, name: &str) -> anyhow::Result<()> {
    let store = super::fresh_store(url).await?;
    let done = Arc::new(AtomicU64::new(0));
    let handler: Arc<dyn JobHandler> = match name {
        "noop" => Arc::new(Noop(done.clone())),
        "fenced" => {
            let bus = CommandBus::<Wallet>::start(store.clone());
            for w in 0..WALLETS {
                bus.execute(CommandEnvelope::new(
                    format!("bw-{w}"),
                    WalletCommand::Open(OpenWallet {
                        user_id: BoundedId::parse(&format!("u-{w}"))?,
                        currency: Currency::parse("IDR")?,
                    }),
                    super::metadata(),
                ))
                .await?;
            }
            Arc::new(Fenced {
                bus,
                done: done.clone(),
            })
        }
        other => anyhow::bail!("unknown handler {other:?}: use noop or fenced"),
    };
    let seeding = Instant::now();
    let now = factledger::infra::db::now_ms();
    let mut rows = Vec::with_capacity(SEED_BATCH);
    for i in 0..jobs {
        rows.push(
            JobSubmit::plain(&BENCH, format!("job-{i}"), serde_json::json!({"i": i})).row(now)?,
        );
        if rows.len() == SEED_BATCH || i + 1 == jobs {
            store
                .append(&[UnitOfWork {
                    jobs: std::mem::take(&mut rows),
                    ..Default::default()
                }])
                .await?;
        }
    }
    eprintln!(
        "seeded {jobs} jobs in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
    let mut engines = Vec::new();
    for w in 0..workers {
        let db = factledger::infra::store::open(url).await?;
        let mut config = EngineConfig::new(format!("bench-worker-{w}"));
        config.skip_locked = factledger::server::supports_skip_locked(&db.db).await;
        config.auto_target = factledger::infra::jobs::engine::AUTO_TARGET_MAX;
        engines.push(Engine::new(
            db.db,
            db.store,
            config,
            vec![(&BENCH, handler.clone())],
        )?);
    }
    let skip_locked = engines[0].config().skip_locked;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut tasks = Vec::new();
    for e in engines {
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut scans = 0u64;
            while done.load(Ordering::Relaxed) < jobs && Instant::now() < deadline {
                let r = e
                    .scan(
                        BENCH.name,
                        Some(factledger::infra::jobs::engine::MAX_TASK_COUNT_MAX),
                    )
                    .await?;
                scans += 1;
                if r.candidates == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            anyhow::Ok(scans)
        }));
    }
    let mut scans = 0;
    for t in tasks {
        scans += t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let finished = done.load(Ordering::Relaxed);
    let check = factledger::infra::store::open(url).await?;
    let succeeded = match &check.db {
        factledger::infra::db::Db::Mysql(p) => {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM jobs WHERE status = 2")
                .fetch_one(p)
                .await?
        }
        factledger::infra::db::Db::Sqlite(p) => {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM jobs WHERE status = 2")
                .fetch_one(p)
                .await?
        }
    };
    println!(
        "| handler | workers | skip locked | jobs | succeeded rows | seconds | jobs/s | scans |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {workers} | {skip_locked} | {finished} | {succeeded} | {secs:.2} | {:.0} | {scans} |",
        if name == "noop" { "noop" } else { "fenced append" },
        finished as f64 / secs
    );
    Ok(())
}
