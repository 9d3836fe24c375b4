//! The command line: every subcommand, flag and its environment variable.
//!
//! Every argument read from the environment hides its value in `--help`
//! (`hide_env_values`): `DATABASE_URL` may carry a password (issue 14, F11); a test
//! below walks the whole command tree to keep it so.

pub(super) use super::providers::{PayoutArgs, ServicesArgs};
use clap::{Parser, Subcommand};
use factledger::infra::auth::Role;
use factledger::server::{DATABASE_URL_DEFAULT, LISTEN_DEFAULT};

#[derive(Parser)]
#[command(name = "factledger", version, about = "Event-sourced money ledger")]
pub struct Cli {
    /// Database: sqlite://FILE (created if missing) or mysql://USER@HOST:PORT/DB.
    #[arg(long, global = true, env = "DATABASE_URL", default_value = DATABASE_URL_DEFAULT, hide_env_values = true)]
    pub(super) database_url: String,
    /// The integrity key file (chain keys and the anchor signing key; created 0600 on
    /// first use). Keep it off the database host and back it up: without it the log
    /// cannot be verified.
    #[arg(long, global = true, env = "FACTLEDGER_INTEGRITY_KEYS", default_value = factledger::infra::store::integrity::keys::KEY_FILE_DEFAULT, hide_env_values = true)]
    pub(super) integrity_keys: std::path::PathBuf,
    /// The append-only file signed chain anchors are written to and verified against.
    #[arg(long, global = true, env = "FACTLEDGER_ANCHOR_FILE", default_value = factledger::infra::store::integrity::anchor::ANCHOR_FILE_DEFAULT, hide_env_values = true)]
    pub(super) anchor_file: std::path::PathBuf,
    /// Ledger partitions, one per country / data centre: `CODE=URL;CODE=URL` (e.g.
    /// `ID=mysql://…/fl_id;TH=mysql://…/fl_th`), instead of --database-url. Each has its
    /// own database, order, chain, API keys, integrity key file and anchor file (the
    /// file names above with `.<CODE>` before the extension).
    #[arg(
        long,
        global = true,
        env = "FACTLEDGER_PARTITIONS",
        hide_env_values = true
    )]
    pub(super) partitions: Option<String>,
    /// The partition a command acts on (default: the only one). `serve` serves every
    /// partition of --partitions unless one is named here.
    #[arg(
        long,
        global = true,
        env = "FACTLEDGER_PARTITION",
        hide_env_values = true
    )]
    pub(super) partition: Option<String>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Run the HTTP service (migrates the database first).
    Serve {
        #[arg(long, env = "FACTLEDGER_LISTEN", default_value = LISTEN_DEFAULT, hide_env_values = true)]
        listen: String,
        /// The metrics listener and the HTTP limits (boxed: `serve` has many flags).
        #[command(flatten)]
        http: Box<HttpArgs>,
        /// A read replica of the database (MariaDB replication): wallet, journal and
        /// audit reads are served from it, waiting for `min_position` on it (503
        /// REPLICA_BEHIND past the wait). One partition per process when set.
        #[arg(long, env = "FACTLEDGER_READ_DATABASE_URL", hide_env_values = true)]
        read_database_url: Option<String>,
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
        /// Withdrawals: the payout provider, limits and password cost.
        #[command(flatten)]
        payouts: Box<PayoutArgs>,
        /// Paid services: the cash gateway, order timeout and the compensation scans.
        #[command(flatten)]
        services: Box<ServicesArgs>,
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
        /// campaign_usage (the affiliate ones: full rebuild only, in one transaction),
        /// bill or journal.
        projection: String,
        /// Only these rows: wallet:<wallet id>; for bill: station-month:<station>:<yyyymm>,
        /// account:small:<id> or account:partner:<id>; for journal: stream:<type>:<id>
        /// (the postings of one wallet or commission stream).
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
    /// (gap, edited, truncated, re_chained), 3 when there was no anchor to compare
    /// with (see --allow-no-anchors).
    Verify {
        /// Only this stream's chain, as TYPE/ID (default: the whole log).
        #[arg(long)]
        stream: Option<String>,
        /// Accept a whole-log verify with no signed anchor to compare against (the
        /// anchor file missing and the database holding none). Without it such a log
        /// is "integrity unproven" and verify exits 3: a log rewritten end to end, or
        /// re-sealed as unkeyed rows, verifies against itself.
        #[arg(long)]
        allow_no_anchors: bool,
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
    /// Read the double-entry accounts (prints JSON).
    Accounts {
        #[command(subcommand)]
        action: AccountsAction,
    },
    /// Inspect and operate durable jobs (prints JSON).
    Jobs {
        #[command(subcommand)]
        action: JobsAction,
    },
    /// Run one of seed 000's compensation scans now (prints its report as JSON):
    /// order-timeout-close, payment-delivery, subscription-expiry,
    /// subscription-message, video-call-finish, video-no-show,
    /// video-moderation-repair, refund, im-members.
    Compensate {
        /// The scan's name.
        job: String,
        /// Only this business id (an order, booking or refund number; a subscription
        /// `artist:fan`; an artist id, or `artist:fan`, for im-members).
        #[arg(long)]
        business_id: Option<String>,
        /// Rows taken at most (1 to 10000).
        #[arg(long, default_value_t = 1000)]
        limit: i64,
        #[command(flatten)]
        services: Box<ServicesArgs>,
    },
    /// Bulk commands from a file (the same items as `POST /v1/commands:batch`).
    Commands {
        #[command(subcommand)]
        action: CommandsAction,
    },
    /// Withdrawals: list, show, and an operator's approval or rejection (prints JSON).
    Withdrawals {
        #[command(subcommand)]
        action: WithdrawalsAction,
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
#[derive(clap::Args, Clone)]
pub(super) struct HttpArgs {
    /// Also serve `/metrics` here without authentication (a private address for the
    /// scraper; on the main listener `/metrics` needs an admin, operator or auditor
    /// key).
    #[arg(long, env = "FACTLEDGER_METRICS_LISTEN", hide_env_values = true)]
    pub(super) metrics_listen: Option<String>,
    #[command(flatten)]
    pub(super) limits: factledger::runtime::http::limits::HttpLimits,
}

#[derive(Subcommand)]
pub(super) enum CommandsAction {
    /// Apply a file of JSON lines, one batch item per line
    /// (`{"aggregate_type":"wallet","aggregate_id":…,"idempotency_key":…,"command":{…}}`),
    /// on the database directly. The whole file is checked first: a malformed line
    /// is named and nothing is applied. Prints one JSON result per line (its `index`
    /// is the line's, from 0) and a summary; exits 2 when an item was refused.
    /// Re-running the same file replays every item already applied.
    Apply {
        /// The JSON-lines file (`-` for standard input).
        file: std::path::PathBuf,
        /// All or nothing: the file (at most 8,190 lines) is one atomic batch.
        #[arg(long)]
        atomic: bool,
        /// Items sent to the command bus per batch (1 to 8,190).
        #[arg(long, default_value_t = 1_000)]
        chunk: usize,
    },
}

#[derive(Subcommand)]
pub(super) enum CronAction {
    /// Every schedule with its next fire time, the lease holder and the newest
    /// firings (as `GET /v1/cron`).
    List,
}

#[derive(Subcommand)]
pub(super) enum OutboxAction {
    /// Every sink's checkpoint, backlog and failure streak (as GET /v1/outbox/sinks).
    Status,
    /// Messages a sink refused past its retry schedule, oldest first (as GET
    /// /v1/outbox/dead-letters): those still to handle, or all with --all.
    DeadLetters {
        /// Only this sink's (webhook:<name>, nats, log).
        #[arg(long)]
        sink: Option<String>,
        /// Also the replayed ones.
        #[arg(long)]
        all: bool,
        /// Dead letters with an id above this one.
        #[arg(long, default_value_t = 0)]
        after: i64,
        #[arg(long, default_value_t = factledger::infra::outbox::dead_letter::PAGE_DEAD_LETTERS_DEFAULT)]
        limit: i64,
    },
    /// Deliver one dead letter's message to its sink now and mark it replayed (as POST
    /// /v1/outbox/dead-letters/{id}:replay). The sink is built from the same flags and
    /// environment as `serve`'s; exits 2 when the sink does not take it.
    Replay {
        /// The dead letter's id.
        id: i64,
        #[command(flatten)]
        outbox: Box<OutboxArgs>,
    },
}

/// Where `serve` relays outbox messages. Webhooks come from the environment only
/// (`FACTLEDGER_WEBHOOK_<NAME>_URL` and `FACTLEDGER_WEBHOOK_<NAME>_SECRET`, optionally
/// `…_TYPES` and `…_RETRY_SECONDS`): their secrets must never be on a command line,
/// where the process list shows them.
#[derive(clap::Args, Clone)]
pub(super) struct OutboxArgs {
    /// Relay to NATS JetStream at this URL (nats://HOST:PORT). Credentials in the URL
    /// only through FACTLEDGER_NATS_URL.
    #[arg(long, env = "FACTLEDGER_NATS_URL", hide_env_values = true)]
    pub(super) nats_url: Option<String>,
    /// Subjects are <prefix>.<outbox type>.
    #[arg(long, env = "FACTLEDGER_NATS_SUBJECT_PREFIX", default_value = factledger::infra::outbox::nats::SUBJECT_PREFIX_DEFAULT, hide_env_values = true)]
    pub(super) nats_subject_prefix: String,
    /// The JetStream stream created over <prefix>.> when missing; empty: operations
    /// create streams themselves.
    #[arg(long, env = "FACTLEDGER_NATS_STREAM", default_value = factledger::infra::outbox::nats::STREAM_DEFAULT, hide_env_values = true)]
    pub(super) nats_stream: String,
    /// Write every outbox message to the log (target factledger::outbox), at INFO with
    /// its payload: for development and debugging. Off by default: under load it was
    /// ~970 log bytes per command and halved bulk throughput (issue 19).
    #[arg(long, env = "FACTLEDGER_OUTBOX_LOG", default_value_t = false, action = clap::ArgAction::Set, hide_env_values = true)]
    pub(super) outbox_log: bool,
}

impl OutboxArgs {
    /// The sinks these settings and the environment describe.
    /// The sinks of one partition (`None`: unpartitioned). A partition publishes
    /// under `<prefix>.<CODE>` into its own stream `<stream>_<CODE>`: outbox ids are
    /// per partition, and JetStream deduplicates by id within a stream.
    pub(super) fn sinks(
        mut self,
        partition: Option<&str>,
    ) -> anyhow::Result<Vec<std::sync::Arc<dyn factledger::infra::outbox::Sink>>> {
        if let Some(code) = partition {
            self.nats_subject_prefix = format!("{}.{code}", self.nats_subject_prefix);
            if !self.nats_stream.trim().is_empty() {
                self.nats_stream = format!("{}_{code}", self.nats_stream);
            }
        }
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
pub(super) enum CallbacksAction {
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
pub(super) enum JobsAction {
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
pub(super) enum IntegrityAction {
    /// Add a fresh chain key and make it the one new events are sealed with (old keys
    /// stay so old events verify). Restart `serve` to use it.
    RotateKey,
    /// Print the anchor signing key's public key (hex) to pin outside the service.
    PublicKey,
}

/// How often `serve` anchors by default: a deleted tail younger than this is what
/// the anchors cannot vouch for.
pub(super) const ANCHOR_EVERY_S_DEFAULT: u64 = 60;

#[derive(Subcommand)]
pub(super) enum AccountsAction {
    /// Σ debits and Σ credits per currency over every account; exits 2 when a
    /// currency does not balance.
    TrialBalance {
        /// As of this global position (default: the journal's head).
        #[arg(long)]
        as_of_position: Option<i64>,
    },
}

#[derive(Subcommand)]
pub(super) enum KeysAction {
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

#[derive(Subcommand)]
pub(super) enum WithdrawalsAction {
    /// Withdrawals from the `withdrawal_records` projection, by id.
    List {
        #[arg(long)]
        user_id: Option<String>,
        /// REQUESTED, REJECTED, PAYOUT_PENDING, PROCESSING, PROVIDER_UNKNOWN,
        /// FUNDS_HELD, PAID or FAILED.
        #[arg(long)]
        status: Option<String>,
        /// The last withdrawal id of the previous page.
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// One withdrawal from its stream: status, attempts and events.
    Show { id: String },
    /// Approve a withdrawal waiting for review (the payout job takes it).
    Approve {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Reject a withdrawal waiting for review (its frozen money goes back).
    Reject {
        id: String,
        #[arg(long)]
        reason: String,
    },
}
