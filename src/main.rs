//! The `factledger` binary: the service and its operator commands.
//!
//! Every argument read from the environment hides its value in `--help`
//! (`hide_env_values`): `DATABASE_URL` may carry a password (issue 14, F11); a test
//! below walks the whole command tree to keep it so.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use factledger::infra::auth::Role;
use factledger::infra::store;
use factledger::server::{DATABASE_URL_DEFAULT, LISTEN_DEFAULT};
use factledger_aggregates::admin_action::AdminAction;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "factledger", version, about = "Event-sourced money ledger")]
struct Cli {
    /// Database: sqlite://FILE (created if missing) or mysql://USER@HOST:PORT/DB.
    #[arg(long, global = true, env = "DATABASE_URL", default_value = DATABASE_URL_DEFAULT, hide_env_values = true)]
    database_url: String,
    /// The integrity key file (chain keys and the anchor signing key; created 0600 on
    /// first use). Keep it off the database host and back it up: without it the log
    /// cannot be verified.
    #[arg(long, global = true, env = "FACTLEDGER_INTEGRITY_KEYS", default_value = factledger::infra::store::integrity::keys::KEY_FILE_DEFAULT, hide_env_values = true)]
    integrity_keys: std::path::PathBuf,
    /// The append-only file signed chain anchors are written to and verified against.
    #[arg(long, global = true, env = "FACTLEDGER_ANCHOR_FILE", default_value = factledger::infra::store::integrity::anchor::ANCHOR_FILE_DEFAULT, hide_env_values = true)]
    anchor_file: std::path::PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (migrates the database first).
    Serve {
        #[arg(long, env = "FACTLEDGER_LISTEN", default_value = LISTEN_DEFAULT, hide_env_values = true)]
        listen: String,
        /// The metrics listener and the HTTP limits (boxed: `serve` has many flags).
        #[command(flatten)]
        http: Box<HttpArgs>,
        /// Country / data centre recorded on every event.
        #[arg(
            long,
            env = "FACTLEDGER_COUNTRY",
            default_value = "ID",
            hide_env_values = true
        )]
        country_code: String,
        /// Environment stamped on alerts (production, staging, dev…).
        #[arg(
            long,
            env = "FACTLEDGER_ENV",
            default_value = "dev",
            hide_env_values = true
        )]
        environment: String,
        /// Base URL operators reach this API at; alerts link to the audit view there.
        #[arg(long, env = "FACTLEDGER_PUBLIC_URL", hide_env_values = true)]
        public_url: Option<String>,
        /// How long the cron lease lasts without renewal (ms); a dead holder's
        /// firings are taken over after it.
        #[arg(long, env = "FACTLEDGER_CRON_LEASE_MS", hide_env_values = true)]
        cron_lease_ms: Option<i64>,
        /// Test only: also fire a no-op `heartbeat` schedule with this cron
        /// expression (six fields for seconds), to prove singleton firing.
        #[arg(
            long,
            hide = true,
            env = "FACTLEDGER_TEST_CRON_HEARTBEAT",
            hide_env_values = true
        )]
        test_cron_heartbeat: Option<String>,
        #[command(flatten)]
        outbox: Box<OutboxArgs>,
        /// Platform order sync: comma-separated countries (`ID`: every platform with a
        /// FACTLEDGER_PLATFORM_<PLATFORM>_URL) or pairs (`TIKTOK:ID`). Empty: none.
        #[arg(
            long,
            env = "FACTLEDGER_PLATFORM_COUNTRIES",
            default_value = "",
            hide_env_values = true
        )]
        platform_countries: String,
        /// When commission settlement fires: a cron expression, or `off` (another
        /// process settles). Default every 5 minutes.
        #[arg(long, env = "FACTLEDGER_SETTLEMENT_EVERY", default_value = factledger::affiliate::settlement::SETTLEMENT_EVERY, hide_env_values = true)]
        settlement_every: String,
        /// Sign a chain anchor this often (seconds) when the log moved; 0: only on
        /// demand (`factledger anchor`, `POST /v1/audit/anchors`).
        #[arg(long, env = "FACTLEDGER_ANCHOR_EVERY_S", default_value_t = ANCHOR_EVERY_S_DEFAULT, hide_env_values = true)]
        anchor_every_s: u64,
    },
    /// Apply pending migrations and exit.
    Migrate,
    /// Bring every projection up to the head of the log once, then exit.
    CatchUp,
    /// Rebuild a projection from the log: in full (shadow tables, swapped in at the
    /// end; the live tables serve reads until then) or one wallet's rows. Shows a
    /// progress bar on a terminal and prints the outcome as JSON.
    Rebuild {
        /// The projection: wallet, affiliate_orders, commission_records,
        /// campaign_usage (the affiliate ones: full rebuild only, in one transaction)
        /// or bill.
        projection: String,
        /// Only these rows: wallet:<wallet id>; for bill: station-month:<station>:<yyyymm>,
        /// account:small:<id> or account:partner:<id>.
        #[arg(long)]
        scope: Option<String>,
        /// Events written to the shadow tables per transaction.
        #[arg(long, default_value_t = factledger::runtime::rebuild::FLUSH_EVENTS_DEFAULT)]
        batch_events: usize,
        /// Test hook: sleep this many milliseconds after each batch.
        #[arg(long, hide = true)]
        pause_ms: Option<u64>,
    },
    /// Replay the wallet events up to the projection's checkpoint and compare them
    /// with the projection and the invariants. Prints the report as JSON; exits 0 when
    /// no finding remains, 2 when some do.
    Reconcile {
        /// Rebuild the wallets that only drifted (scoped) and check them again; events
        /// themselves are never repaired.
        #[arg(long)]
        repair: bool,
    },
    /// Print the events of one stream as JSON lines.
    Events {
        aggregate_type: String,
        aggregate_id: String,
    },
    /// Verify the log: every hash chain under its key, positions without holes, and
    /// the log against every signed anchor (the anchor file's and the database's).
    /// Prints the report as JSON; exits 2 naming the first bad position and its kind
    /// (gap, edited, truncated, re_chained).
    Verify {
        /// Only this stream's chain, as TYPE/ID (default: the whole log).
        #[arg(long)]
        stream: Option<String>,
        /// Also print the whole report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign a chain anchor at the log's head now: stored, published to the outbox and
    /// appended to the anchor file. Prints it as JSON.
    Anchor,
    /// Manage the integrity key file.
    Integrity {
        #[command(subcommand)]
        action: IntegrityAction,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
    /// Inspect and operate durable jobs (prints JSON).
    Jobs {
        #[command(subcommand)]
        action: JobsAction,
    },
    /// Operate the callback inbox (prints JSON).
    Callbacks {
        #[command(subcommand)]
        action: CallbacksAction,
    },
    /// Inspect cron schedules (prints JSON).
    Cron {
        #[command(subcommand)]
        action: CronAction,
    },
    /// The outbox relay's sinks (prints JSON).
    Outbox {
        #[command(subcommand)]
        action: OutboxAction,
    },
}

/// `serve`'s HTTP settings: where `/metrics` is open, and every limit of
/// `factledger::runtime::http::limits` (README "Security: HTTP limits").
#[derive(clap::Args)]
struct HttpArgs {
    /// Also serve `/metrics` here without authentication (a private address for the
    /// scraper; on the main listener `/metrics` needs an admin, operator or auditor
    /// key).
    #[arg(long, env = "FACTLEDGER_METRICS_LISTEN", hide_env_values = true)]
    metrics_listen: Option<String>,
    #[command(flatten)]
    limits: factledger::runtime::http::limits::HttpLimits,
}

#[derive(Subcommand)]
enum CronAction {
    /// Every schedule with its next fire time, the lease holder and the newest
    /// firings (as `GET /v1/cron`).
    List,
}

#[derive(Subcommand)]
enum OutboxAction {
    /// Every sink's checkpoint, backlog and failure streak (as GET /v1/outbox/sinks).
    Status,
}

/// Where `serve` relays outbox messages. Webhooks come from the environment only
/// (`FACTLEDGER_WEBHOOK_<NAME>_URL` and `FACTLEDGER_WEBHOOK_<NAME>_SECRET`): their
/// secrets must never be on a command line, where the process list shows them.
#[derive(clap::Args)]
struct OutboxArgs {
    /// Relay to NATS JetStream at this URL (nats://HOST:PORT). Credentials in the URL
    /// only through FACTLEDGER_NATS_URL.
    #[arg(long, env = "FACTLEDGER_NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// Subjects are <prefix>.<outbox type>.
    #[arg(long, env = "FACTLEDGER_NATS_SUBJECT_PREFIX", default_value = factledger::infra::outbox::nats::SUBJECT_PREFIX_DEFAULT, hide_env_values = true)]
    nats_subject_prefix: String,
    /// The JetStream stream created over <prefix>.> when missing; empty: operations
    /// create streams themselves.
    #[arg(long, env = "FACTLEDGER_NATS_STREAM", default_value = factledger::infra::outbox::nats::STREAM_DEFAULT, hide_env_values = true)]
    nats_stream: String,
    /// Write every outbox message to the log (target factledger::infra::outbox).
    #[arg(long, env = "FACTLEDGER_OUTBOX_LOG", default_value_t = true, action = clap::ArgAction::Set, hide_env_values = true)]
    outbox_log: bool,
}

impl OutboxArgs {
    /// The sinks these settings and the environment describe.
    fn sinks(self) -> anyhow::Result<Vec<std::sync::Arc<dyn factledger::infra::outbox::Sink>>> {
        use factledger::infra::outbox::log::LogSink;
        use factledger::infra::outbox::{nats, webhook};
        let mut sinks: Vec<std::sync::Arc<dyn factledger::infra::outbox::Sink>> = Vec::new();
        if self.outbox_log {
            sinks.push(std::sync::Arc::new(LogSink));
        }
        if let Some(url) = self.nats_url.filter(|u| !u.trim().is_empty()) {
            let from_env =
                std::env::var("FACTLEDGER_NATS_URL").ok().as_deref() == Some(url.as_str());
            if url.contains('@') && !from_env {
                anyhow::bail!(
                    "--nats-url carries credentials, which the process list would show: \
                     set FACTLEDGER_NATS_URL instead"
                );
            }
            let stream = Some(self.nats_stream).filter(|s| !s.trim().is_empty());
            sinks.push(std::sync::Arc::new(nats::NatsSink::new(nats::NatsConfig {
                url,
                subject_prefix: self.nats_subject_prefix,
                stream,
            })));
        }
        for hook in webhook::webhooks_from_env(std::env::vars())? {
            sinks.push(std::sync::Arc::new(webhook::WebhookSink::new(hook)?));
        }
        Ok(sinks)
    }
}

#[derive(Subcommand)]
enum CallbacksAction {
    /// Submit a replay job for every failed, verified, normalised callback (never an
    /// unverified or unnormalised one); the running service's job engine replays them
    /// from their stored normalised payload.
    ReplayFailed {
        /// Also restart replay jobs that used up their rounds (retries reset).
        #[arg(long)]
        revive: bool,
    },
}

#[derive(Subcommand)]
enum JobsAction {
    /// List jobs in id order.
    List {
        #[arg(long)]
        kind: Option<String>,
        /// PENDING, RUNNING, SUCCESS, FAILED or CANCELLED.
        #[arg(long)]
        status: Option<String>,
        /// Jobs with an id above this one.
        #[arg(long, default_value_t = 0)]
        after: i64,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// One job with each level of success.
    Show { code: String },
    /// Run the named jobs now, one after the other (no quota, due time or retry
    /// limit; only PENDING/FAILED ones run).
    Retry {
        /// A job code (repeatable).
        #[arg(long = "code")]
        codes: Vec<String>,
        /// A business key (repeatable).
        #[arg(long = "key")]
        business_keys: Vec<String>,
    },
    /// Stop every entry point from claiming jobs; submissions are still accepted.
    Pause {
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resume after a pause.
    Resume,
    /// Take a job now if the scan would (due, retries left, within quota).
    Kick { code: String },
}

#[derive(Subcommand)]
enum IntegrityAction {
    /// Add a fresh chain key and make it the one new events are sealed with (old keys
    /// stay so old events verify). Restart `serve` to use it.
    RotateKey,
    /// Print the anchor signing key's public key (hex) to pin outside the service.
    PublicKey,
}

/// How often `serve` anchors by default: a deleted tail younger than this is what
/// the anchors cannot vouch for.
const ANCHOR_EVERY_S_DEFAULT: u64 = 60;

#[derive(Subcommand)]
enum KeysAction {
    /// Create a key and print it (it is shown only once).
    Create {
        #[arg(long, value_parser = |s: &str| s.parse::<Role>())]
        role: Role,
    },
    /// Revoke a key by its id.
    Revoke { key_id: String },
    /// Create an admin key when no unrevoked admin key exists, and print it (shown
    /// only once). `serve` mints the first admin key only on an empty key table; this
    /// is the way back in after every admin key was revoked.
    Bootstrap,
    /// List keys (ids and roles; never secrets).
    List,
}

/// Open the database with the integrity key file of this deployment.
async fn open_db(database_url: &str, keys: &std::path::Path) -> anyhow::Result<store::Database> {
    store::open_with(database_url, store::load_keyring(keys)?).await
}

#[tokio::main]
async fn main() -> ExitCode {
    factledger::infra::telemetry::init();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            listen,
            http,
            country_code,
            environment,
            public_url,
            cron_lease_ms,
            test_cron_heartbeat,
            outbox,
            platform_countries,
            settlement_every,
            anchor_every_s,
        } => {
            let cwd = std::env::current_dir()?;
            let platform_sync =
                factledger::affiliate::sync::SyncConfig::from_env(&platform_countries)?;
            let sinks = (*outbox).sinks()?;
            tracing::info!(
                sinks = ?sinks.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>(),
                "outbox sinks"
            );
            let options = factledger::server::ServeOptions {
                environment: Some(environment),
                public_url,
                cron_lease_ms,
                test_cron_heartbeat,
                outbox_sinks: sinks,
                platform_sync,
                settlement_cron: factledger::server::SettlementCron::parse(&settlement_every),
                integrity_keys: Some(cli.integrity_keys.clone()),
                anchor_file: Some(cli.anchor_file.clone()),
                anchor_every: (anchor_every_s > 0)
                    .then(|| std::time::Duration::from_secs(anchor_every_s)),
                http_limits: http.limits.clone(),
                ..Default::default()
            };
            let started =
                factledger::server::start_with(&cli.database_url, &country_code, &cwd, options)
                    .await?;
            if let Some(key) = &started.admin_key {
                println!(
                    "First start: created admin API key (shown once, also written to {}):\n{}",
                    factledger::infra::auth::ADMIN_KEY_FILE,
                    key.secret
                );
            }
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            println!("factledger listening on http://{}", listener.local_addr()?);
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
            let metrics = match &http.metrics_listen {
                Some(addr) => {
                    Some(serve_metrics(&started.state, addr, &http.limits, stop_rx).await?)
                }
                None => None,
            };
            let shutdown = async move {
                shutdown_signal().await;
                let _ = stop_tx.send(());
            };
            factledger::server::serve(started.state, listener, shutdown).await?;
            if let Some(task) = metrics {
                task.await??;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            println!(
                "migrated {} database; head position {}",
                db.store.backend(),
                db.store.head_position().await?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::CatchUp => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let started = std::time::Instant::now();
            let applied =
                factledger::runtime::projection::catch_up_wallet(&db.store, &db.db).await?;
            let position = db
                .db
                .checkpoint(
                    factledger_projections::wallet::NAME,
                    factledger_projections::wallet::VERSION,
                )
                .await?;
            println!(
                "wallet: applied {applied} events in {:.1} s, now at position {position}",
                started.elapsed().as_secs_f64()
            );
            for projector in factledger::runtime::projector::all() {
                let started = std::time::Instant::now();
                let applied =
                    factledger::runtime::projector::catch_up(&db.store, &db.db, projector.as_ref())
                        .await?;
                let position = db
                    .db
                    .checkpoint(projector.name(), projector.version())
                    .await?;
                println!(
                    "{}: applied {applied} events in {:.1} s, now at position {position}",
                    projector.name(),
                    started.elapsed().as_secs_f64()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Rebuild {
            projection,
            scope,
            batch_events,
            pause_ms,
        } => {
            use factledger::runtime::rebuild::{self, RebuildOptions, Scope};
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            // Recorded once the rebuild is under way (a refused attempt — another
            // rebuild holds the lease — is no action); the one-transaction rebuilds
            // of the other projections record it just before they start.
            let target = format!("projection:{projection}");
            let detail = format!("scope {}", scope.as_deref().unwrap_or("full"));
            if projection == factledger::bill::projection::NAME {
                audit(
                    &db,
                    AdminAction::RebuildStarted,
                    &target,
                    None,
                    Some(detail),
                )
                .await?;
                let done = rebuild_bill(&db, scope.as_deref()).await?;
                println!("{done}");
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(projector) = factledger::runtime::projector::find(&projection) {
                if scope.is_some() {
                    anyhow::bail!("{projection} has full rebuilds only: drop --scope");
                }
                // Recorded first, so the rebuilt rows reach the head, this event included.
                audit(
                    &db,
                    AdminAction::RebuildStarted,
                    &target,
                    None,
                    Some(detail),
                )
                .await?;
                let done = factledger::runtime::projector::rebuild_full(
                    &db.store,
                    &db.db,
                    projector.as_ref(),
                )
                .await?;
                println!("{}", serde_json::to_string(&done)?);
                return Ok(ExitCode::SUCCESS);
            }
            let scope = Scope::parse(scope.as_deref())?;
            let started = rebuild::begin(&db.store, &db.db, &projection, scope, "cli").await?;
            let detail = format!("rebuild {} {detail}", started.id);
            audit(
                &db,
                AdminAction::RebuildStarted,
                &target,
                None,
                Some(detail),
            )
            .await?;
            eprintln!(
                "rebuild {} of {projection}: {} events to copy",
                started.id, started.target_position
            );
            let bar = indicatif::ProgressBar::new(started.target_position.max(0) as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg:12} [{elapsed_precise}] {wide_bar} {pos}/{len} events \
                     {events_per_s} ETA {eta}",
                )
                .context("progress bar template")?
                .with_key(
                    "events_per_s",
                    |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.0}/s", s.per_sec());
                    },
                ),
            );
            let options = RebuildOptions {
                flush_events: batch_events,
                pause_between_batches: pause_ms.map(std::time::Duration::from_millis),
            };
            let status = rebuild::run(&db.store, &db.db, &started, &options, &|p| {
                bar.set_message(p.stage);
                bar.set_length(p.target_position.max(0) as u64);
                bar.set_position(p.position.max(0) as u64);
            })
            .await;
            bar.finish_and_clear();
            println!("{}", serde_json::to_string(&status?)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Reconcile { repair } => {
            use factledger::runtime::reconcile::{self, ReconcileOptions, RunStatus};
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let options = ReconcileOptions {
                repair,
                ..ReconcileOptions::default()
            };
            let run = reconcile::start_run(&db.db, options, "cli").await?;
            if repair {
                let target = format!("reconciliation:{}", run.id);
                let action = AdminAction::ReconciliationRepairStarted;
                audit(&db, action, &target, None, None).await?;
            }
            let run = reconcile::finish_run(&db.store, &db.db, run, Some(cli.anchor_file.clone()))
                .await?;
            println!("{}", serde_json::to_string_pretty(&run)?);
            match (&run.status, &run.report) {
                (RunStatus::Succeeded, Some(r)) if r.remaining.total() == 0 => {
                    Ok(ExitCode::SUCCESS)
                }
                (RunStatus::Succeeded, Some(_)) => Ok(ExitCode::from(2)),
                _ => anyhow::bail!(
                    "reconciliation {} failed: {}",
                    run.id,
                    run.error.as_deref().unwrap_or("no report")
                ),
            }
        }
        Command::Events {
            aggregate_type,
            aggregate_id,
        } => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let mut from = 1;
            loop {
                let page = db
                    .store
                    .read_stream(&aggregate_type, &aggregate_id, from, store::READ_LIMIT_MAX)
                    .await?;
                let Some(last) = page.last() else { break };
                from = last.sequence + 1;
                for e in &page {
                    println!("{}", serde_json::to_string(&e.view()?)?);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { stream, json } => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let report = match &stream {
                Some(s) => {
                    let target = s
                        .split_once('/')
                        .context("--stream must be TYPE/ID, e.g. wallet/w-1")?;
                    store::verify(&*db.store, Some(target)).await?
                }
                None => {
                    store::integrity::verify_log(&db.store, &db.db, Some(&cli.anchor_file)).await?
                }
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            }
            if report.ok {
                println!(
                    "ok: {} events in {} streams verified, {} signed anchors matched",
                    report.events_checked, report.streams_checked, report.anchors_checked
                );
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(f) = &report.first {
                let kind = serde_json::to_value(f.kind)?;
                println!(
                    "BROKEN at position {} ({}): {} [{} finding(s)]",
                    f.global_position,
                    kind.as_str().unwrap_or_default(),
                    f.detail,
                    report.findings_count
                );
            }
            if let Some(b) = &report.first_broken {
                println!(
                    "BROKEN: {}/{} sequence {} (global position {}): {}",
                    b.aggregate_type, b.aggregate_id, b.sequence, b.global_position, b.reason
                );
            }
            Ok(ExitCode::from(2))
        }
        Command::Anchor => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let sinks = store::integrity::AnchorSinks {
                file: Some(cli.anchor_file.clone()),
            };
            let anchor =
                store::integrity::anchor::create(&db.store, &db.db, &sinks, "cli", false).await?;
            println!("{}", serde_json::to_string_pretty(&anchor)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Integrity { action } => match action {
            IntegrityAction::RotateKey => {
                let ring = store::Keyring::rotate(&cli.integrity_keys)?;
                println!(
                    "{}: new events are sealed with {} (keys: {:?}); restart serve to use it",
                    cli.integrity_keys.display(),
                    ring.active().id,
                    ring.chain_key_ids()
                );
                Ok(ExitCode::SUCCESS)
            }
            IntegrityAction::PublicKey => {
                let ring = store::Keyring::load(&cli.integrity_keys)?;
                println!("{} {}", ring.signing_key_id(), ring.public_key_hex());
                Ok(ExitCode::SUCCESS)
            }
        },
        Command::Keys { action } => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            match action {
                KeysAction::Create { role } => {
                    let key = db.keys.create(role).await?;
                    println!("created {} key {} (shown once):", key.role, key.key_id);
                    println!("{}", key.secret);
                    let target = format!("key:{}", key.key_id);
                    let detail = Some(format!("role={role}"));
                    audit(&db, AdminAction::KeyCreated, &target, None, detail).await?;
                }
                KeysAction::Revoke { key_id } => {
                    if !db.keys.revoke(&key_id).await? {
                        anyhow::bail!("no active key with id {key_id}");
                    }
                    println!("revoked key {key_id}");
                    let target = format!("key:{key_id}");
                    audit(&db, AdminAction::KeyRevoked, &target, None, None).await?;
                }
                KeysAction::Bootstrap => {
                    let Some(key) = db.keys.bootstrap().await? else {
                        anyhow::bail!(
                            "an unrevoked admin key exists: create keys with it, or revoke it first"
                        );
                    };
                    println!("created admin key {} (shown once):", key.key_id);
                    println!("{}", key.secret);
                    let target = format!("key:{}", key.key_id);
                    let detail = Some("role=admin, keys bootstrap: no unrevoked admin key".into());
                    audit(&db, AdminAction::KeyBootstrapped, &target, None, detail).await?;
                }
                KeysAction::List => {
                    for k in db.keys.list().await? {
                        println!("{}", serde_json::to_string(&k)?);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Jobs { action } => jobs(&cli.database_url, &cli.integrity_keys, action).await,
        Command::Cron {
            action: CronAction::List,
        } => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
            let mut options = factledger::server::ServeOptions::default();
            let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
            let cron = factledger::server::cron_scheduler(&engine, &options)?;
            println!("{}", serde_json::to_string_pretty(&cron.status().await?)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Outbox {
            action: OutboxAction::Status,
        } => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let status = factledger::infra::outbox::status(&db.db).await?;
            println!("{}", serde_json::to_string_pretty(&status)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Callbacks {
            action: CallbacksAction::ReplayFailed { revive },
        } => {
            let db = open_db(&cli.database_url, &cli.integrity_keys).await?;
            let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
            let mut options = factledger::server::ServeOptions::default();
            let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
            let options = factledger::callbacks::ReplayFailedOptions { revive };
            let report = factledger::callbacks::replay_failed(&engine, options).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Record an admin action taken by the CLI (actor `cli:<user>`).
async fn audit(
    db: &store::Database,
    action: AdminAction,
    target: &str,
    reason: Option<&str>,
    detail: Option<String>,
) -> anyhow::Result<()> {
    let metadata = factledger::runtime::admin_log::local_metadata(
        &factledger::runtime::admin_log::cli_actor(),
    );
    factledger::runtime::admin_log::record(&db.store, &metadata, action, target, reason, detail)
        .await?;
    Ok(())
}

/// `factledger jobs …`: the same operations as `/v1/jobs`, printed as JSON.
async fn jobs(
    database_url: &str,
    keys: &std::path::Path,
    action: JobsAction,
) -> anyhow::Result<ExitCode> {
    use factledger::infra::jobs::{ops, JobStatus, Selector};
    let db = open_db(database_url, keys).await?;
    let country = std::env::var("FACTLEDGER_COUNTRY").unwrap_or_else(|_| "ID".into());
    let mut options = factledger::server::ServeOptions::default();
    let engine = factledger::server::job_engine(&db, &country, &mut options).await?;
    let actor = "cli";
    let out = match action {
        JobsAction::List {
            kind,
            status,
            after,
            limit,
        } => {
            let status = match status.as_deref() {
                None => None,
                Some(s) => Some(JobStatus::parse(s).with_context(|| {
                    format!(
                        "--status {s:?}: expected PENDING, RUNNING, SUCCESS, FAILED or CANCELLED"
                    )
                })?),
            };
            serde_json::to_value(ops::list(&db.db, kind.as_deref(), status, after, limit).await?)?
        }
        JobsAction::Show { code } => match ops::show(&db.db, &code).await? {
            Some(job) => serde_json::to_value(job)?,
            None => anyhow::bail!("code: no job with code {code:?}"),
        },
        JobsAction::Retry {
            codes,
            business_keys,
        } => {
            let selector = Selector::parse(codes, business_keys)?;
            let out = serde_json::to_value(engine.retry(&selector).await?)?;
            let detail = serde_json::json!({
                "codes": selector.codes, "business_keys": selector.business_keys,
            });
            let action = AdminAction::JobsRetried;
            audit(&db, action, "jobs", None, Some(detail.to_string())).await?;
            out
        }
        JobsAction::Pause { reason } => {
            engine.set_paused(true, actor, reason.as_deref()).await?;
            audit(
                &db,
                AdminAction::JobsPaused,
                "jobs",
                reason.as_deref(),
                None,
            )
            .await?;
            serde_json::json!({"paused": true})
        }
        JobsAction::Resume => {
            engine.set_paused(false, actor, None).await?;
            audit(&db, AdminAction::JobsResumed, "jobs", None, None).await?;
            serde_json::json!({"paused": false})
        }
        JobsAction::Kick { code } => {
            if ops::show(&db.db, &code).await?.is_none() {
                anyhow::bail!("code: no job with code {code:?}");
            }
            let out = serde_json::to_value(engine.kick(std::slice::from_ref(&code)).await?)?;
            audit(
                &db,
                AdminAction::JobKicked,
                &format!("job:{code}"),
                None,
                None,
            )
            .await?;
            out
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// Bind `addr` and serve `/metrics` there until `stop` changes.
async fn serve_metrics(
    state: &factledger::runtime::http::AppState,
    addr: &str,
    limits: &factledger::runtime::http::limits::HttpLimits,
    mut stop: tokio::sync::watch::Receiver<()>,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?;
    println!("metrics on http://{}/metrics", listener.local_addr()?);
    let (metrics, limits) = (state.metrics.clone(), limits.clone());
    Ok(tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.changed().await;
        };
        factledger::server::serve_metrics(metrics, listener, limits, stopped).await
    }))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// `rebuild bill`: in full (one transaction from position 0), or the station-months of
/// one scope recomputed from the fact tables. The outcome as JSON.
async fn rebuild_bill(db: &store::Database, scope: Option<&str>) -> anyhow::Result<String> {
    use factledger::bill::projection::{self as bills, Account};
    use factledger_projections::bill::StationMonth;
    let Some(scope) = scope else {
        let done = bills::rebuild_full(&db.store, &db.db).await?;
        return Ok(serde_json::to_string(&done)?);
    };
    let bad = || {
        anyhow::anyhow!(
            "--scope {scope}: expected station-month:<station_id>:<yyyymm>, \
             account:small:<id> or account:partner:<id>"
        )
    };
    let recomputed = if let Some(sm) = scope.strip_prefix("station-month:") {
        let sm = StationMonth::parse(sm).map_err(|e| anyhow::anyhow!("--scope: {e}"))?;
        bills::recompute_station_months(&db.db, &[sm]).await?
    } else if let Some(account) = scope.strip_prefix("account:") {
        let (side, id) = account.split_once(':').ok_or_else(bad)?;
        let id: i64 = id.parse().ok().filter(|id| *id > 0).ok_or_else(bad)?;
        let account = match side {
            "small" => Account::Small(id),
            "partner" => Account::Partner(id),
            _ => return Err(bad()),
        };
        bills::rebuild_account(&db.db, account).await?
    } else {
        return Err(bad());
    };
    Ok(
        serde_json::json!({"projection": bills::NAME, "scope": scope,
        "station_months_recomputed": recomputed})
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    fn unhidden_env_args(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if arg.get_env().is_some() && !arg.is_hide_env_values_set() {
                out.push(format!("{path} --{}", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            unhidden_env_args(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn f11_every_argument_from_the_environment_hides_its_value_in_help() {
        let mut unhidden = Vec::new();
        unhidden_env_args(&Cli::command(), "factledger", &mut unhidden);
        assert!(
            unhidden.is_empty(),
            "env values shown by --help: {unhidden:?}"
        );
    }
}
