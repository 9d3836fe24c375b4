//! Benchmarks of factledger, run by hand (never in CI). Prints a table.
//!
//! `cargo run --release -p factledger-bench -- commands --database-url mysql://root@127.0.0.1:3306/factledger_bench`
//!
//! The database named in the URL is dropped and re-created for every scenario.
#![forbid(unsafe_code)]

mod bill;
mod bookings;
mod http;
mod ingest;
mod jobs;
mod payouts;
mod scale;

use anyhow::Context;
use clap::{Parser, Subcommand};
use factledger::infra::store::{self, DynStore, Metadata};
use factledger::runtime::bus::{BusError, CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{MoveFunds, OpenWallet, Wallet, WalletCommand};
use factledger_aggregates::{AmountMinor, BoundedId, Currency};
use sqlx::Connection;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "bench", about = "factledger benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Durable wallet commands/s through the command bus (issue 2, item 7).
    Commands {
        #[arg(long, default_value = "mysql://root@127.0.0.1:3306/factledger_bench")]
        database_url: String,
        /// Scenarios to run: a, b, c (comma separated).
        #[arg(long, default_value = "a,b,c")]
        scenarios: String,
        /// Seconds per run of b and c.
        #[arg(long, default_value_t = 10)]
        secs: u64,
        /// Commands of scenario a (one client, one wallet, sequential).
        #[arg(long, default_value_t = 100_000)]
        a_commands: u64,
        /// Hard time limit of scenario a.
        #[arg(long, default_value_t = 120)]
        a_max_secs: u64,
    },
    /// Full rebuild and reconciliation of the wallet projection (issue 3, item 6) and
    /// of the journal (issue 16): seeds wallet events, and at each count rebuilds the
    /// wallet projection and then the journal (events/s, peak RSS of each) and then
    /// reconciles (seconds).
    Rebuild {
        #[arg(long, default_value = "mysql://root@127.0.0.1:3306/factledger_bench")]
        database_url: String,
        /// Event counts to rebuild at (comma separated, ascending): the log grows to
        /// each in turn.
        #[arg(long, default_value = "100000,1000000")]
        events: String,
        /// Events per wallet stream (an open, then credits and releases).
        #[arg(long, default_value_t = 100)]
        per_wallet: u64,
        /// Events per shadow-table transaction.
        #[arg(long, default_value_t = factledger::runtime::rebuild::FLUSH_EVENTS_DEFAULT)]
        batch_events: usize,
    },
    /// Orders ingested per second in pages of 100 (issue 5, item 8): every order
    /// attributed, with cashback, inviter reward and a campaign reservation.
    Ingest {
        #[arg(
            long,
            default_value = "mysql://root@127.0.0.1:3306/factledger_bench_ingest"
        )]
        database_url: String,
        #[arg(long, default_value_t = 50_000)]
        orders: u64,
        /// Hard time limit of the ingest (the orders done by then are counted).
        #[arg(long, default_value_t = 120)]
        max_secs: u64,
        /// Users owning the orders (each with a tracking id and an inviter).
        #[arg(long, default_value_t = 10_000)]
        users: u64,
        /// Pages ingested at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Each order in its own transaction (`ingest_one`), as before group commit.
        #[arg(long)]
        one_by_one: bool,
    },
    /// The bill projector (issue 6, item 9): seeds station-months of bill facts, then
    /// times a full catch-up of the `bill` projection from position 0 (events/s, peak
    /// RSS) and `rebuild_account` of one customer account with 120 months (p50/p99).
    Bill {
        #[arg(
            long,
            default_value = "mysql://root@127.0.0.1:3306/factledger_bench_bill"
        )]
        database_url: String,
        #[arg(long, default_value_t = 10_000)]
        stations: u64,
        /// Months per station (the main set starts 2023-01).
        #[arg(long, default_value_t = 24)]
        months: u64,
        /// Stations given one more month after the catch-up and the rebuild, applied
        /// by the live path (0: skip).
        #[arg(long, default_value_t = 2_000)]
        live_stations: u64,
        /// Also time a full rebuild of the whole log in one transaction (at full size
        /// it takes longer than the catch-up).
        #[arg(long)]
        full_rebuild: bool,
        /// Months of the separate customer account the scoped refresh rebuilds.
        #[arg(long, default_value_t = 120)]
        account_months: u64,
        /// Runs of the scoped refresh.
        #[arg(long, default_value_t = 20)]
        refresh_runs: usize,
        /// Hard time limit of the whole run (seed, catch-up, refreshes): a catch-up
        /// cut off reports the events it committed by then.
        #[arg(long, default_value_t = 900)]
        max_secs: u64,
    },
    /// Withdrawals end to end against the payout simulator (issue 17): request →
    /// approve → worker → provider → webhook → PAID; requests/s and payouts/s, and
    /// the check that nothing was paid twice.
    Payouts {
        #[arg(
            long,
            default_value = "mysql://root@127.0.0.1:3306/factledger_bench_payouts"
        )]
        database_url: String,
        #[arg(long, default_value_t = 10_000)]
        withdrawals: u64,
        #[arg(long, default_value_t = 1_000)]
        users: u64,
        /// Requests (and approvals) in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// argon2id cost of the payment passwords: memory KiB, iterations, lanes.
        #[arg(long, default_value = "19456,2,1")]
        password_cost: String,
        #[arg(long, default_value_t = 600)]
        max_secs: u64,
    },
    /// Video-call bookings end to end (issue 18): book → join → start → finish, one in
    /// ten a no-show refunded by the scan; bookings/s and hold settlements/s.
    Bookings {
        #[arg(
            long,
            default_value = "mysql://root@127.0.0.1:3306/factledger_bench_bookings"
        )]
        database_url: String,
        #[arg(long, default_value_t = 10_000)]
        bookings: u64,
        #[arg(long, default_value_t = 1_000)]
        fans: u64,
        /// Bookings in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 900)]
        max_secs: u64,
    },
    /// Load over HTTP against a real `factledger serve` child on a fresh database:
    /// open loop at fixed rates (latency from the scheduled send, p99 search), closed
    /// loop of fresh and of duplicate credits, and bulk `POST /v1/commands:batch`.
    Http(http::Args),
    /// The same closed-loop HTTP load (fresh credits, each with its own
    /// Idempotency-Key) against each database topology of issue 21: 1 node, Galera
    /// with one writer, Galera multi-primary, 3 partitions on 3 nodes; one row each.
    Scale(scale::Args),
    /// Jobs claimed and completed per second (issue 4, item 10).
    Jobs {
        #[arg(long, default_value = "mysql://root@127.0.0.1:3306/factledger_bench")]
        database_url: String,
        #[arg(long, default_value_t = 50_000)]
        jobs: u64,
        /// Engines scanning at once, each with its own pool.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// noop, or fenced (one wallet event per job through a fenced unit).
        #[arg(long, default_value = "noop")]
        handler: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs to stderr only when `RUST_LOG` asks (the tables go to stdout).
    if std::env::var_os("RUST_LOG").is_some() {
        factledger::infra::telemetry::init();
    }
    match Cli::parse().command {
        Cmd::Commands {
            database_url,
            scenarios,
            secs,
            a_commands,
            a_max_secs,
        } => {
            println!(
                "| scenario | commands ok | seconds | cmds/s | first 1 s | last 1 s | conflicts surfaced | other errors | p50 ms | p99 ms |"
            );
            println!("|---|---|---|---|---|---|---|---|---|---|");
            for s in scenarios.split(',') {
                let r = match s.trim() {
                    "a" => {
                        let limit = Limit {
                            commands: a_commands,
                            secs: a_max_secs,
                        };
                        run(&database_url, "a: 1 client, 1 wallet", 1, 1, limit).await?
                    }
                    "b" => {
                        let limit = Limit {
                            commands: u64::MAX,
                            secs,
                        };
                        run(&database_url, "b: 16 clients, 16 wallets", 16, 16, limit).await?
                    }
                    "c" => {
                        let limit = Limit {
                            commands: u64::MAX,
                            secs,
                        };
                        run(&database_url, "c: 16 clients, ONE wallet", 16, 1, limit).await?
                    }
                    other => anyhow::bail!("unknown scenario {other:?}: use a, b or c"),
                };
                r.print();
            }
        }
        Cmd::Payouts {
            database_url,
            withdrawals,
            users,
            concurrency,
            password_cost,
            max_secs,
        } => {
            let options = payouts::Options {
                withdrawals,
                users,
                concurrency,
                password_cost: payouts::parse_cost(&password_cost)?,
                max_secs,
                amount_minor: 10_000,
            };
            payouts::bench(&database_url, options).await?
        }
        Cmd::Bookings {
            database_url,
            bookings,
            fans,
            concurrency,
            max_secs,
        } => {
            bookings::bench(
                &database_url,
                bookings::Options {
                    bookings,
                    fans,
                    concurrency,
                    max_secs,
                },
            )
            .await?
        }
        Cmd::Rebuild {
            database_url,
            events,
            per_wallet,
            batch_events,
        } => rebuild_bench(&database_url, &events, per_wallet, batch_events).await?,
        Cmd::Ingest {
            database_url,
            orders,
            max_secs,
            users,
            concurrency,
            one_by_one,
        } => {
            let options = ingest::Options {
                orders,
                max_secs,
                users,
                concurrency,
                one_by_one,
            };
            ingest::bench(&database_url, &options).await?
        }
        Cmd::Bill {
            database_url,
            stations,
            live_stations,
            full_rebuild,
            months,
            account_months,
            refresh_runs,
            max_secs,
        } => {
            let options = bill::Options {
                stations,
                live_stations,
                full_rebuild,
                months,
                account_months,
                refresh_runs,
                max_secs,
            };
            bill::bench(&database_url, &options).await?
        }
        Cmd::Http(args) => http::bench(args).await?,
        Cmd::Scale(args) => scale::bench(args).await?,
        Cmd::Jobs {
            database_url,
            jobs,
            workers,
            handler,
        } => jobs::bench(&database_url, jobs, workers, &handler).await?,
    }
    Ok(())
}

/// Seed wallet events up to each count and time a full rebuild there.
async fn rebuild_bench(
    url: &str,
    counts: &str,
    per_wallet: u64,
    batch_events: usize,
) -> anyhow::Result<()> {
    use factledger::runtime::rebuild::{self, RebuildOptions, Scope};
    let counts = counts
        .split(',')
        .map(|c| c.trim().parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .context("--events: comma separated counts")?;
    let store = fresh_store(url).await?;
    let db = store::open(url).await?;
    println!(
        "| backend | events | seed s | rebuild s | rebuild events/s | RSS MB before rebuild | peak RSS MB (rebuild) | journal rebuild s | journal events/s | peak RSS MB (journal) | journal / wallet time | verify s | peak RSS MB (verify) | verify / rebuild time | reconcile s (verify included) | findings |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut seeded = 0u64;
    for target in counts {
        let t = Instant::now();
        seeded = seed(&store, seeded, target, per_wallet).await?;
        let seed_s = t.elapsed().as_secs_f64();
        reset_peak_rss();
        let rss_before_mb = rss_kb("VmRSS:") as f64 / 1024.0;
        let t = Instant::now();
        let started = rebuild::begin(&db.store, &db.db, "wallet", Scope::Full, "bench").await?;
        let options = RebuildOptions {
            flush_events: batch_events,
            pause_between_batches: None,
        };
        let status = rebuild::run(&db.store, &db.db, &started, &options, &|_| {}).await?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::ensure!(
            status.events_applied as u64 == seeded,
            "rebuild applied {} of {seeded} events",
            status.events_applied
        );
        let rss_mb = rss_kb("VmHWM:") as f64 / 1024.0;
        // The journal (double entry) rebuilt from the same log, beside the wallet figure.
        reset_peak_rss();
        let t = Instant::now();
        let journal = factledger::ledger::rebuild::rebuild_full(&db.store, &db.db).await?;
        let journal_s = t.elapsed().as_secs_f64();
        let journal_rss_mb = rss_kb("VmHWM:") as f64 / 1024.0;
        anyhow::ensure!(
            journal.events_read == seeded,
            "the journal read {} of {seeded} events",
            journal.events_read
        );
        // The full verify every reconciliation (and so every repair) runs first: one
        // pass in global order; it must stay within the rebuild's own replay time.
        reset_peak_rss();
        let t = Instant::now();
        let verified =
            factledger::infra::store::integrity::verify_log(&db.store, &db.db, None).await?;
        let verify_s = t.elapsed().as_secs_f64();
        let verify_rss_mb = rss_kb("VmHWM:") as f64 / 1024.0;
        anyhow::ensure!(
            verified.ok && verified.events_checked == seeded,
            "verify checked {} of {seeded} events, ok={}",
            verified.events_checked,
            verified.ok
        );
        // Reconciliation of the same log against the rows just rebuilt.
        let t = Instant::now();
        let report = factledger::runtime::reconcile::reconcile(
            &db.store,
            &db.db,
            factledger::runtime::reconcile::ReconcileOptions::default(),
        )
        .await?;
        let reconcile_s = t.elapsed().as_secs_f64();
        anyhow::ensure!(
            report.events_checked == seeded,
            "reconciliation checked {} of {seeded} events",
            report.events_checked
        );
        println!(
            "| {} | {seeded} | {seed_s:.1} | {secs:.1} | {:.0} | {rss_before_mb:.0} | {rss_mb:.0} | {journal_s:.1} | {:.0} | {journal_rss_mb:.0} | {:.2} | {verify_s:.1} | {verify_rss_mb:.0} | {:.2} | {reconcile_s:.1} | {} |",
            store.backend(),
            seeded as f64 / secs,
            seeded as f64 / journal_s,
            journal_s / secs,
            verify_s / secs,
            report.counts.total()
        );
    }
    Ok(())
}

/// Append wallet events until the log holds `target` (from `have`): wallets of
/// `per_wallet` events (an open, then credits and releases alternating), decided by
/// the aggregate and sealed as the bus seals them, appended in large units.
async fn seed(store: &DynStore, have: u64, target: u64, per_wallet: u64) -> anyhow::Result<u64> {
    use cqrs_es::{Aggregate, DomainEvent};
    use factledger::infra::store::{
        LedgerRefRow, SealedEvent, StreamAppend, UnitOfWork, GENESIS_HASH,
    };
    use factledger_aggregates::decide::Decide;
    const EVENTS_PER_APPEND: u64 = 5_000;
    let per_wallet = per_wallet.max(2);
    let meta = metadata();
    let mut done = have;
    let mut units = Vec::new();
    let mut pending = 0u64;
    while done < target {
        let n = done / per_wallet;
        let wallet_id = format!("bw-{n:08}");
        let count = per_wallet.min(target - done);
        let mut state = Wallet::default();
        let mut prev = GENESIS_HASH.to_owned();
        let mut sealed = Vec::new();
        let mut refs = Vec::new();
        let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6);
        for k in 0..count {
            let command = if k == 0 {
                WalletCommand::Open(OpenWallet {
                    user_id: id(&format!("u{n}")),
                    currency: Currency::parse("IDR")?,
                })
            } else {
                // Credit c-j at k = 2j - 1, release it at k = 2j.
                let j = k.div_ceil(2);
                let moved = MoveFunds {
                    ref_type: id("COMMISSION"),
                    ref_id: id(&format!("c{n}-{j}")),
                    amount_minor: AmountMinor::parse(100 + j as i64)?,
                    currency: None,
                    counterparty: None,
                };
                if k % 2 == 1 {
                    WalletCommand::CreditPending(moved)
                } else {
                    WalletCommand::ReleasePending(moved)
                }
            };
            for e in state
                .decide(command)
                .map_err(|e| anyhow::anyhow!("seed command refused: {e}"))?
            {
                state.check(&e)?;
                if let Some(r) = Wallet::ledger_ref(&e) {
                    refs.push(LedgerRefRow {
                        ref_type: r.ref_type,
                        ref_id: r.ref_id,
                        entry_type: r.entry_type,
                        event_index: sealed.len(),
                    });
                }
                let event = SealedEvent::seal(
                    store.keyring().active(),
                    &prev,
                    "wallet",
                    &wallet_id,
                    sealed.len() as i64 + 1,
                    e.event_type(),
                    e.event_version().parse().unwrap_or(1),
                    serde_json::to_string(&e)?,
                    &meta,
                    uuid::Uuid::new_v4(),
                    now,
                );
                prev = event.hash.clone();
                sealed.push(event);
                state.apply(e);
            }
        }
        done += sealed.len() as u64;
        pending += sealed.len() as u64;
        units.push(UnitOfWork {
            streams: vec![StreamAppend {
                aggregate_type: "wallet".into(),
                aggregate_id: wallet_id,
                expected_version: 0,
                expected_hash: GENESIS_HASH.to_owned(),
                events: sealed,
            }],
            ledger_refs: refs,
            ..Default::default()
        });
        if pending >= EVENTS_PER_APPEND || done >= target {
            store.append(&units).await?;
            units.clear();
            pending = 0;
        }
    }
    Ok(done)
}

/// Forget this process's peak resident set so far (Linux: `clear_refs` 5).
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A memory figure of this process from /proc/self/status, in KiB: `VmRSS:` (now) or
/// `VmHWM:` (peak since the last reset).
pub(crate) fn rss_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Clone, Copy)]
struct Limit {
    commands: u64,
    secs: u64,
}

struct Report {
    name: String,
    ok: u64,
    elapsed: Duration,
    per_second: Vec<u64>,
    conflicts: u64,
    errors: u64,
    latencies_us: Vec<u64>,
}

impl Report {
    fn print(&self) {
        let mut l = self.latencies_us.clone();
        l.sort_unstable();
        let pct = |p: f64| {
            l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0) as f64
                / 1000.0
        };
        // The last, partial second is not a full second: report the last complete one.
        let full = &self.per_second[..self
            .per_second
            .len()
            .saturating_sub(1)
            .max(1)
            .min(self.per_second.len())];
        println!(
            "| {} | {} | {:.1} | {:.0} | {} | {} | {} | {} | {:.2} | {:.2} |",
            self.name,
            self.ok,
            self.elapsed.as_secs_f64(),
            self.ok as f64 / self.elapsed.as_secs_f64(),
            full.first().copied().unwrap_or(0),
            full.last().copied().unwrap_or(0),
            self.conflicts,
            self.errors,
            pct(0.50),
            pct(0.99),
        );
    }
}

/// Drop MariaDB database `db` on `server` and create it empty.
pub(crate) async fn recreate_mysql_database(server: &str, db: &str) -> anyhow::Result<()> {
    let mut conn = sqlx::MySqlConnection::connect(server)
        .await
        .map_err(|e| anyhow::anyhow!("connect to {server}: {e}"))?;
    for sql in [
        format!("DROP DATABASE IF EXISTS {db}"),
        format!("CREATE DATABASE {db}"),
    ] {
        sqlx::Executor::execute(&mut conn, sql.as_str()).await?;
    }
    conn.close().await?;
    Ok(())
}

pub(crate) async fn fresh_store(url: &str) -> anyhow::Result<DynStore> {
    if let Some((server, db)) = url.rsplit_once('/').filter(|_| url.starts_with("mysql://")) {
        recreate_mysql_database(server, db).await?;
    } else if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
    store::connect(url).await.context("open the bench database")
}

pub(crate) fn metadata() -> Metadata {
    Metadata {
        correlation_id: "bench".into(),
        causation_id: None,
        command_id: None,
        actor: "bench".into(),
        request_id: "bench".into(),
        trace_id: "bench".into(),
        country_code: "ID".into(),
    }
}

fn id(s: &str) -> BoundedId {
    BoundedId::parse(s).expect("bench ids are valid")
}

async fn run(
    url: &str,
    name: &str,
    clients: usize,
    wallets: usize,
    limit: Limit,
) -> anyhow::Result<Report> {
    let store = fresh_store(url).await?;
    let bus = CommandBus::<Wallet>::start(store);
    for w in 0..wallets {
        bus.execute(CommandEnvelope {
            aggregate_id: format!("bench-w{w}"),
            command: WalletCommand::Open(OpenWallet {
                user_id: id(&format!("u{w}")),
                currency: Currency::parse("IDR")?,
            }),
            metadata: metadata(),
            idempotency: None,
            jobs: Vec::new(),
            fence: None,
        })
        .await
        .map_err(|e| anyhow::anyhow!("open wallet: {e}"))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let issued = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let conflicts = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let bus = bus.clone();
        let (stop, issued, ok, conflicts, errors, latencies) = (
            stop.clone(),
            issued.clone(),
            ok.clone(),
            conflicts.clone(),
            errors.clone(),
            latencies.clone(),
        );
        let wallet = format!("bench-w{}", c % wallets);
        tasks.push(tokio::spawn(async move {
            let mut local = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if issued.fetch_add(1, Ordering::Relaxed) >= limit.commands {
                    break;
                }
                n += 1;
                let cmd = WalletCommand::CreditPending(MoveFunds {
                    ref_type: id("BENCH"),
                    ref_id: id(&format!("c{c}-{n}")),
                    amount_minor: AmountMinor::parse(1).expect("1 is positive"),
                    currency: None,
                    counterparty: None,
                });
                let t = Instant::now();
                let r = bus
                    .execute(CommandEnvelope {
                        aggregate_id: wallet.clone(),
                        command: cmd,
                        metadata: metadata(),
                        idempotency: None,
                        jobs: Vec::new(),
                        fence: None,
                    })
                    .await;
                local.push(t.elapsed().as_micros() as u64);
                match r {
                    Ok(_) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(BusError::Conflict(_)) => {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("error: {e}");
                        }
                    }
                }
            }
            if let Ok(mut l) = latencies.lock() {
                l.extend(local);
            }
        }));
    }
    // Sample completed commands once per second.
    let mut per_second = Vec::new();
    let mut last = 0;
    let deadline = started + Duration::from_secs(limit.secs);
    loop {
        let done = tasks.iter().all(|t| t.is_finished());
        if done || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1).min(deadline - Instant::now())).await;
        let now = ok.load(Ordering::Relaxed);
        per_second.push(now - last);
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed();
    let latencies_us = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    Ok(Report {
        name: name.to_owned(),
        ok: ok.load(Ordering::Relaxed),
        elapsed,
        per_second,
        conflicts: conflicts.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        latencies_us,
    })
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves the data usable (pushes only).
    m.lock().unwrap_or_else(|p| p.into_inner())
}
