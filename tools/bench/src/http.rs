//! `bench http`: load against a real `factledger serve` process over HTTP.
//!
//! The child runs from its own binary (`--serve-bin`) on a freshly re-created
//! database, in a temporary working directory that holds its log (stdout and stderr);
//! the bench reads the first admin key it mints there. Three modes:
//!
//! - **open loop** (`open`): request i is scheduled at t0 + i/rate and sent by its own
//!   task; latency runs from the scheduled time, so a stalled server is not hidden by
//!   a client that waits for it (coordinated omission). Then the highest rate whose p99
//!   stays under `--p99-ms`, by bisection between the list's highest passing and lowest
//!   failing rate.
//! - **closed loop** (`closed`): `--connections` workers, one request after another:
//!   fresh credits, then credits whose ledger reference already exists (409).
//! - **bulk** (`bulk`): `POST /v1/commands:batch` of `--bulk-size` items per request.
//!
//! Besides latency, each row shows where the CPU went (cores used by this generator,
//! by `serve` and by the database server, when it runs on this machine) and the bytes
//! `serve` logged per request.

mod bulk;
pub(crate) mod closed;
mod open;
pub(crate) mod server;
pub(crate) mod usage;

use futures::StreamExt;
use hdrhistogram::Histogram;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use usage::{usage_header, Procs, Usage};

/// The header naming the partition a request acts on (`serve --partitions`).
const PARTITION_HEADER: &str = "Ledger-Partition";

/// `bench http`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The `factledger` binary to run `serve` from.
    #[arg(long, default_value = "target/release/factledger")]
    serve_bin: std::path::PathBuf,
    /// Dropped and re-created first (mysql://…/DB, or sqlite:///ABSOLUTE/PATH).
    #[arg(
        long,
        default_value = "mysql://root@127.0.0.1:3306/factledger_bench_http"
    )]
    database_url: String,
    /// Modes to run, in this order: open, closed, bulk (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "open,closed,bulk")]
    modes: Vec<String>,
    /// Seconds of load per open-loop rate, per closed-loop run and of the bulk run.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Open loop: target rates in requests/s (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "500,1000,2000,4000")]
    rates: Vec<u64>,
    /// Open and closed loop: wallets the credits are spread over (fresh ones per run).
    #[arg(long, default_value_t = 16)]
    wallets: usize,
    /// Open loop: requests in flight at most (past it, sends wait; their latency still
    /// counts from the scheduled time).
    #[arg(long, default_value_t = 2_048)]
    max_in_flight: usize,
    /// Open loop: the p99 (ms) a rate must stay under to pass (and no error, no non-2xx).
    #[arg(long, default_value_t = 20.0)]
    p99_ms: f64,
    /// Open loop: extra rates tried at most by bisection after the list.
    #[arg(long, default_value_t = 4)]
    search_steps: u32,
    /// Closed loop: workers (each one request at a time).
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Bulk: clients, each one batch request at a time.
    #[arg(long, default_value_t = 8)]
    bulk_clients: usize,
    /// Bulk: commands per batch request (1 to 8190).
    #[arg(long, default_value_t = 1_000)]
    bulk_size: usize,
    /// Bulk: wallets the batch items are spread over.
    #[arg(long, default_value_t = 1_000)]
    bulk_wallets: usize,
    /// One more argument for `serve` (repeatable), e.g. `--serve-arg=--outbox-log=true`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// One more KEY=VALUE in `serve`'s environment (repeatable), e.g.
    /// `--serve-env FACTLEDGER_LOG_FORMAT=json`; RUST_LOG defaults to info.
    #[arg(long = "serve-env")]
    serve_env: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Open,
    Closed,
    Bulk,
}

/// How long a request may take before the client gives up on it.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the bench waits for the projectors to reach the log's head after a run.
const SETTLE_MAX: Duration = Duration::from_secs(60);
/// Requests one worker may send per second of its run, at most (a bound on loops that
/// time already bounds).
pub(crate) const REQUESTS_PER_SEC_BOUND: u64 = 1_000_000;

pub async fn bench(args: Args) -> anyhow::Result<()> {
    let modes = args
        .modes
        .iter()
        .map(|m| match m.trim() {
            "open" => Ok(Mode::Open),
            "closed" => Ok(Mode::Closed),
            "bulk" => Ok(Mode::Bulk),
            other => anyhow::bail!("--modes: unknown mode {other:?} (open, closed, bulk)"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(args.secs > 0, "--secs must be at least 1");
    anyhow::ensure!(args.wallets > 0, "--wallets must be at least 1");
    anyhow::ensure!(args.max_in_flight > 0, "--max-in-flight must be at least 1");
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(args.bulk_clients > 0, "--bulk-clients must be at least 1");
    anyhow::ensure!(args.bulk_wallets > 0, "--bulk-wallets must be at least 1");
    anyhow::ensure!(
        (1..=8_190).contains(&args.bulk_size),
        "--bulk-size: 1 to 8190"
    );
    anyhow::ensure!(
        !args.rates.is_empty() && args.rates.iter().all(|r| *r > 0),
        "--rates: positive requests/s"
    );
    let env = serve_env(&args.serve_env)?;
    let connections = args
        .max_in_flight
        .max(args.connections)
        .max(args.bulk_clients);
    server::fresh_database(&args.database_url).await?;
    let global = ["--database-url".to_owned(), args.database_url.clone()];
    let server = server::Server::start(&server::Spawn {
        bin: &args.serve_bin,
        global: &global,
        key_files: &[server::ADMIN_KEY_FILE.into()],
        connections_max: connections + 64,
        args: &args.serve_args,
        env: &env,
    })
    .await?;
    println!(
        "serve pid {} at {} (working directory {}); per-key rate limit lifted, connection cap {}",
        server.pid,
        server.base,
        server.dir.display(),
        connections + 64
    );
    let db = match args.database_url.rsplit_once('/') {
        Some((server, _)) if server.starts_with("mysql://") => Some(tokio::sync::Mutex::new(
            sqlx::Connection::connect(server).await?,
        )),
        _ => None,
    };
    let ctx = Ctx {
        api: Arc::new(Api::new(&server.base, &server.key, connections, None)?),
        procs: Procs::find(server.pid),
        log: server.log.clone(),
        db,
    };
    if ctx.procs.db.is_empty() {
        println!("(no mariadbd/mysqld process on this machine: db cores shown as 0)");
    }
    // What serve and the database cost with no request at all (another workload on
    // this machine or database server shows here too).
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before the run: {}", load.trim());
    ctx.settle().await?;
    let mark = ctx.mark().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = ctx.finish(&mark).await?;
    println!(
        "idle for 3 s: cores bench/serve/db {}; {} log bytes; {} db statements, {} commits, {} fsyncs",
        idle.cores, idle.log_bytes, idle.db[0], idle.db[1], idle.db[2]
    );
    let mut summaries = Vec::new();
    let mut failed = None;
    for mode in modes {
        let result = match mode {
            Mode::Open => open::run(&ctx, &args).await,
            Mode::Closed => closed::run(&ctx, &args).await,
            Mode::Bulk => bulk::run(&ctx, &args).await,
        };
        match result {
            Ok(line) => summaries.push(line),
            Err(e) => {
                let line = format!("{mode:?}: FAILED: {e:#}");
                println!("{line}");
                summaries.push(line);
                failed.get_or_insert(e);
            }
        }
    }
    let log_bytes = ctx.log_len();
    let requests = ctx.api.sent.load(Ordering::Relaxed);
    let commands = ctx.api.commands.load(Ordering::Relaxed);
    let log_path = ctx.log.display().to_string();
    server.stop().await;
    println!();
    for line in summaries {
        println!("{line}");
    }
    println!(
        "serve log: {log_bytes} bytes for {requests} requests carrying {commands} commands = {:.0} bytes/request, {:.0} bytes/command ({log_path})",
        log_bytes as f64 / requests.max(1) as f64,
        log_bytes as f64 / commands.max(1) as f64
    );
    match failed {
        Some(e) => Err(e.context("bench http: a mode failed (its line above)")),
        None => Ok(()),
    }
}

/// What every mode runs against.
pub(crate) struct Ctx {
    api: Arc<Api>,
    procs: Procs,
    log: std::path::PathBuf,
    /// A connection for `SHOW GLOBAL STATUS` (MariaDB/MySQL only).
    db: Option<tokio::sync::Mutex<sqlx::MySqlConnection>>,
}

impl Ctx {
    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// See [`Api::settle`].
    async fn settle(&self) -> anyhow::Result<f64> {
        self.api.settle().await
    }
}

/// The HTTP client: one pooled keep-alive client with the admin key (and the
/// partition it names in the `Ledger-Partition` header, when one).
pub(crate) struct Api {
    client: reqwest::Client,
    base: String,
    auth: HeaderValue,
    partition: Option<HeaderValue>,
    /// Requests sent so far (every mode, setup included).
    sent: AtomicU64,
    /// Commands they carried (a batch request carries many).
    commands: AtomicU64,
}

/// What a command request got back: the status, and a problem's `code` when not 2xx.
pub(crate) struct Answer {
    status: u16,
    code: Option<String>,
}

impl Answer {
    /// A 2xx, or an error naming `what` with the status and problem code.
    fn ensure_2xx(&self, what: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            (200..300).contains(&self.status),
            "{what}: {} {:?}",
            self.status,
            self.code
        );
        Ok(())
    }
}

impl Api {
    pub(crate) fn new(
        base: &str,
        key: &str,
        pool: usize,
        partition: Option<&str>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(pool)
                // Below serve's 5 s keep-alive timeout: never reuse a socket it closed.
                .pool_idle_timeout(Duration::from_secs(2))
                .tcp_nodelay(true)
                .timeout(REQUEST_TIMEOUT)
                .build()?,
            base: base.to_owned(),
            auth: HeaderValue::from_str(&format!("Bearer {key}"))?,
            partition: partition.map(HeaderValue::from_str).transpose()?,
            sent: AtomicU64::new(0),
            commands: AtomicU64::new(0),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn wallet_url(&self, wallet: &str) -> String {
        self.url(&format!("/v1/wallets/{wallet}/commands"))
    }

    /// Every request: the admin key, and the partition header when one.
    fn authorized(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let r = r.header(AUTHORIZATION, self.auth.clone());
        match &self.partition {
            Some(p) => r.header(PARTITION_HEADER, p.clone()),
            None => r,
        }
    }

    fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.authorized(self.client.get(url))
    }

    /// A JSON POST carrying `commands` commands (counted), not yet sent.
    fn post_request(&self, url: &str, body: String, commands: u64) -> reqwest::RequestBuilder {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(commands, Ordering::Relaxed);
        self.authorized(self.client.post(url))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
    }

    /// POST a JSON body carrying `commands` commands; the answer is left to the caller.
    async fn post_raw(
        &self,
        url: &str,
        body: String,
        commands: u64,
    ) -> reqwest::Result<reqwest::Response> {
        self.post_request(url, body, commands).send().await
    }

    /// POST a JSON body; read the answer whole (so the connection is reused) and keep
    /// only its status and, when not 2xx, its problem code (no JSON parsing).
    pub(crate) async fn post(&self, url: &str, body: String) -> reqwest::Result<Answer> {
        Self::answer(self.post_request(url, body, 1).send().await?).await
    }

    /// [`Api::post`] with an `Idempotency-Key`.
    pub(crate) async fn post_keyed(
        &self,
        url: &str,
        body: String,
        idempotency_key: &str,
    ) -> reqwest::Result<Answer> {
        let request = self
            .post_request(url, body, 1)
            .header("Idempotency-Key", idempotency_key);
        Self::answer(request.send().await?).await
    }

    async fn answer(response: reqwest::Response) -> reqwest::Result<Answer> {
        let status = response.status().as_u16();
        let body = response.bytes().await?;
        let code = if (200..300).contains(&status) {
            None
        } else {
            problem_code(&body)
        };
        Ok(Answer { status, code })
    }

    /// Wait (bounded) until every projector has applied the log's head and every
    /// outbox sink has delivered every message (the `log` sink writes to the log);
    /// the seconds it took. Still behind at the bound: reported, not fatal.
    pub(crate) async fn settle(&self) -> anyhow::Result<f64> {
        let started = Instant::now();
        let (projections, outbox) = (self.url("/v1/projections"), self.url("/v1/outbox/sinks"));
        loop {
            let statuses: Vec<serde_json::Value> = self
                .get(&projections)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let sinks: serde_json::Value = self
                .get(&outbox)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let mut behind: Vec<String> = statuses
                .iter()
                .filter(|s| s["lag_events"].as_i64().unwrap_or(0) > 0 || s["stuck"] == true)
                .map(|s| {
                    format!(
                        "projector {} lag {} error {}",
                        s["name"], s["lag_events"], s["last_error"]
                    )
                })
                .collect();
            let sinks = sinks["sinks"].as_array().cloned().unwrap_or_default();
            behind.extend(
                sinks
                    .iter()
                    .filter(|s| s["backlog"].as_i64().unwrap_or(0) > 0)
                    .map(|s| {
                        format!(
                            "sink {} backlog {} error {}",
                            s["name"], s["backlog"], s["last_error"]
                        )
                    }),
            );
            if behind.is_empty() {
                return Ok(started.elapsed().as_secs_f64());
            }
            if started.elapsed() >= SETTLE_MAX {
                println!("(still behind after {SETTLE_MAX:?}: {behind:?})");
                return Ok(started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The `code` of a compact problem+json body, found by scanning.
fn problem_code(body: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"code\":\"";
    let at = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = body[at..].iter().position(|&b| b == b'"')?;
    Some(String::from_utf8_lossy(&body[at..at + len]).into_owned())
}

/// A `CreditPending` of 100 minor units under ledger reference `ref_id`.
/// `--serve-env KEY=VALUE` flags as pairs for `serve`'s environment.
pub(crate) fn serve_env(flags: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    flags
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| anyhow::anyhow!("--serve-env {kv:?}: KEY=VALUE"))
        })
        .collect()
}

pub(crate) fn credit_body(ref_id: &str) -> String {
    format!(
        r#"{{"type":"CreditPending","ref_type":"order","ref_id":"{ref_id}","amount_minor":100}}"#
    )
}

/// Open these wallets (IDR), 16 at a time; every one must answer 2xx.
pub(crate) async fn open_wallets(api: &Api, ids: &[String]) -> anyhow::Result<()> {
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(ids.iter().map(|id| async move {
        let body = format!(r#"{{"type":"Open","user_id":"u-{id}","currency":"IDR"}}"#);
        api.post(&api.wallet_url(id), body)
            .await?
            .ensure_2xx(&format!("open wallet {id}"))
    }))
    .buffer_unordered(16)
    .collect()
    .await;
    results.into_iter().collect()
}

/// Latencies (µs) and outcomes of a run.
pub(crate) struct Tally {
    hist: Histogram<u64>,
    pub(crate) ok: u64,
    non2xx: u64,
    errors: u64,
    /// Non-2xx answers by "status CODE", and transport errors.
    outcomes: BTreeMap<String, u64>,
}

/// Transport errors printed so far (the first few only).
static ERRORS_SHOWN: AtomicU64 = AtomicU64::new(0);

impl Tally {
    pub(crate) fn new() -> Self {
        Self {
            // 1 µs to 1 h, 3 significant digits: bounds that cannot be wrong.
            hist: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("constant histogram bounds are valid"),
            ok: 0,
            non2xx: 0,
            errors: 0,
            outcomes: BTreeMap::new(),
        }
    }

    /// A 2xx without a `code` counts as success; anything else by status and code.
    pub(crate) fn record(&mut self, latency: Duration, answer: Result<&Answer, &reqwest::Error>) {
        self.hist.saturating_record(latency.as_micros() as u64);
        match answer {
            Ok(a) if (200..300).contains(&a.status) && a.code.is_none() => self.ok += 1,
            Ok(a) => {
                self.non2xx += 1;
                let key = match &a.code {
                    Some(code) => format!("{} {code}", a.status),
                    None => a.status.to_string(),
                };
                *self.outcomes.entry(key).or_default() += 1;
            }
            Err(e) => {
                self.errors += 1;
                let kind = if e.is_timeout() { "timeout" } else { "error" };
                *self.outcomes.entry(kind.to_owned()).or_default() += 1;
                if ERRORS_SHOWN.fetch_add(1, Ordering::Relaxed) < 3 {
                    eprintln!("request error: {e:#}");
                }
            }
        }
    }

    pub(crate) fn merge(&mut self, other: &Tally) {
        let _ = self.hist.add(&other.hist);
        self.ok += other.ok;
        self.non2xx += other.non2xx;
        self.errors += other.errors;
        for (k, n) in &other.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += n;
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.ok + self.non2xx + self.errors
    }

    /// The latency at quantile `q`, in ms.
    pub(crate) fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    fn max_ms(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    /// "2xx 1234, 409 DUPLICATE_LEDGER_REF 55, error 3".
    pub(crate) fn outcomes(&self) -> String {
        let mut parts = vec![format!("2xx {}", self.ok)];
        parts.extend(self.outcomes.iter().map(|(k, n)| format!("{k} {n}")));
        parts.join(", ")
    }
}
