//! Concurrent wallet commands with Idempotency-Keys, for the fault tests (issue 14
//! item 9): clients that keep going while a database or a server is killed under
//! them, and the checks that every command then took effect exactly once.
//!
//! Each command is a `CreditPending` of its own amount with `ref_id` = its
//! Idempotency-Key, so the log, the ledger refs and the balances can all be matched
//! back to the commands. A client sends a command until it gets an answer that
//! decides it: a 200 (first or replayed) or a 4xx. A 5xx or no answer at all
//! (connection refused or reset, timeout) leaves the outcome unknown, so the client
//! sends the SAME key and body again — to whichever server is up — a bounded number
//! of times within a bounded time. Every attempt is recorded.

use serde_json::{json, Value};
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Attempts per command before the client gives up (the test then fails).
pub const ATTEMPTS_MAX: usize = 300;
/// Time per command before the client gives up (the test then fails).
pub const RESOLVE_WITHIN: Duration = Duration::from_secs(30);
/// One HTTP request: longer than any command takes when the database is up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause before a retry, times the attempt number, capped at 10 times.
const RETRY_DELAY: Duration = Duration::from_millis(40);
/// The ledger `ref_type` of the load's credits.
pub const REF_TYPE: &str = "FAULT_TEST";

/// The servers the clients send to, and the admin key; a test swaps an entry when it
/// restarts a server on a new port.
#[derive(Clone)]
pub struct Targets {
    bases: Arc<RwLock<Vec<String>>>,
    admin: String,
    client: reqwest::Client,
}

impl Targets {
    pub fn new(bases: Vec<String>, admin: &str) -> Targets {
        Targets {
            bases: Arc::new(RwLock::new(bases)),
            admin: admin.to_owned(),
            client: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()
                .expect("http client"),
        }
    }

    /// The same servers, called with another API key.
    pub fn with_key(&self, secret: &str) -> Targets {
        Targets {
            bases: self.bases.clone(),
            admin: secret.to_owned(),
            client: self.client.clone(),
        }
    }

    pub fn replace(&self, index: usize, base: String) {
        self.bases.write().unwrap()[index] = base;
    }

    fn pick(&self, n: usize) -> String {
        let bases = self.bases.read().unwrap();
        bases[n % bases.len()].clone()
    }

    /// GET as the admin, on the server `n` picks: status and JSON body.
    pub async fn get(&self, n: usize, path: &str) -> Result<(u16, Value), String> {
        let r = self
            .client
            .get(format!("{}{path}", self.pick(n)))
            .bearer_auth(&self.admin)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }
}

/// What one HTTP attempt of a command got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// 200: the command's events, first time or replayed.
    Done { replayed: bool },
    /// A 5xx problem: the outcome is unknown or nothing was written; retry.
    ServerError { status: u16, code: String },
    /// No HTTP answer (refused, reset, timed out): the outcome is unknown; retry.
    NoAnswer(String),
    /// Any other status: the command was refused (a test failure here).
    Refused { status: u16, body: String },
}

impl Attempt {
    pub fn failed(&self) -> bool {
        matches!(self, Attempt::ServerError { .. } | Attempt::NoAnswer(_))
    }
}

/// One command of the load and what became of it.
#[derive(Debug, Clone)]
pub struct CommandRun {
    pub key: String,
    pub wallet: String,
    pub amount_minor: i64,
    pub body: Value,
    pub attempts: Vec<Attempt>,
    /// Global positions of the events of the 200 that resolved it.
    pub positions: Vec<i64>,
    pub event_ids: Vec<String>,
}

impl CommandRun {
    pub fn acknowledged(&self) -> bool {
        matches!(self.attempts.last(), Some(Attempt::Done { .. }))
    }
}

/// Live counters the test watches to time its kills.
#[derive(Default)]
pub struct Progress {
    pub in_flight: AtomicUsize,
    pub acknowledged: AtomicUsize,
    pub failed_attempts: AtomicUsize,
    /// Attempts answered 503 `OUTCOME_UNKNOWN`.
    pub outcome_unknown: AtomicUsize,
}

impl Progress {
    pub fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

/// The shape of a load.
#[derive(Debug, Clone)]
pub struct Load {
    /// Prefix of every key and wallet id, unique per run.
    pub run: String,
    pub clients: usize,
    pub commands_per_client: usize,
    /// Wallets the clients share (several clients per wallet: appends contend).
    pub wallets: usize,
    /// Pause of a client between two commands.
    pub pace: Duration,
}

impl Load {
    pub fn total(&self) -> usize {
        self.clients * self.commands_per_client
    }

    pub fn wallet(&self, w: usize) -> String {
        format!("{}-w{w}", self.run)
    }

    /// Open every wallet (no fault yet: each must succeed).
    pub async fn open_wallets(&self, targets: &Targets) {
        for w in 0..self.wallets {
            let mut run = CommandRun {
                key: format!("{}-open-{w}", self.run),
                wallet: self.wallet(w),
                amount_minor: 0,
                body: json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
                attempts: Vec::new(),
                positions: Vec::new(),
                event_ids: Vec::new(),
            };
            resolve(targets, &Progress::default(), &mut run, w).await;
            assert!(
                run.acknowledged(),
                "open {}: {:?}",
                run.wallet,
                run.attempts
            );
        }
    }

    fn command(&self, client: usize, i: usize) -> CommandRun {
        let key = format!("{}-c{client}-{i}", self.run);
        // Distinct amounts: a doubled or lost credit shows in the sums.
        let amount_minor = 1_000 + (client * self.commands_per_client + i) as i64;
        CommandRun {
            wallet: self.wallet((client + i) % self.wallets),
            body: json!({"type": "CreditPending", "ref_type": REF_TYPE, "ref_id": key,
                         "amount_minor": amount_minor}),
            key,
            amount_minor,
            attempts: Vec::new(),
            positions: Vec::new(),
            event_ids: Vec::new(),
        }
    }

    /// Run every client to the end; the runs of all commands, in no particular order.
    pub async fn drive(&self, targets: Targets, progress: Arc<Progress>) -> Vec<CommandRun> {
        let mut tasks = Vec::new();
        for client in 0..self.clients {
            let (load, targets, progress) = (self.clone(), targets.clone(), progress.clone());
            tasks.push(tokio::spawn(async move {
                let mut runs = Vec::new();
                for i in 0..load.commands_per_client {
                    let mut run = load.command(client, i);
                    resolve(&targets, &progress, &mut run, client).await;
                    runs.push(run);
                    tokio::time::sleep(load.pace).await;
                }
                runs
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.expect("client task"));
        }
        all
    }
}

/// Send `run` until an answer decides it (200 or 4xx), retrying the same key and body
/// after a 5xx or no answer, within [`ATTEMPTS_MAX`] and [`RESOLVE_WITHIN`].
pub async fn resolve(targets: &Targets, progress: &Progress, run: &mut CommandRun, client: usize) {
    let deadline = Instant::now() + RESOLVE_WITHIN;
    for n in 0..ATTEMPTS_MAX {
        progress.in_flight.fetch_add(1, Ordering::SeqCst);
        let attempt = send(targets, run, client + n).await;
        progress.in_flight.fetch_sub(1, Ordering::SeqCst);
        let failed = attempt.failed();
        run.attempts.push(attempt);
        if !failed {
            if run.acknowledged() {
                progress.acknowledged.fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        progress.failed_attempts.fetch_add(1, Ordering::SeqCst);
        if let Some(Attempt::ServerError { code, .. }) = run.attempts.last() {
            if code == "OUTCOME_UNKNOWN" {
                progress.outcome_unknown.fetch_add(1, Ordering::SeqCst);
            }
        }
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(RETRY_DELAY * (n as u32 + 1).min(10)).await;
    }
}

async fn send(targets: &Targets, run: &mut CommandRun, n: usize) -> Attempt {
    let url = format!("{}/v1/wallets/{}/commands", targets.pick(n), run.wallet);
    let sent = targets
        .client
        .post(url)
        .bearer_auth(&targets.admin)
        .header("Idempotency-Key", &run.key)
        .json(&run.body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => return Attempt::NoAnswer(e.to_string()),
    };
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let text = match response.text().await {
        Ok(t) => t,
        Err(e) => return Attempt::NoAnswer(format!("{status}, body cut off: {e}")),
    };
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    match status {
        200 => {
            let events = body["events"].as_array().cloned().unwrap_or_default();
            run.positions = events
                .iter()
                .map(|e| e["global_position"].as_i64().expect("global_position"))
                .collect();
            run.event_ids = events
                .iter()
                .map(|e| e["event_id"].as_str().expect("event_id").to_owned())
                .collect();
            Attempt::Done { replayed }
        }
        500..=599 => Attempt::ServerError {
            status,
            code: body["code"].as_str().unwrap_or("").to_owned(),
        },
        _ => Attempt::Refused { status, body: text },
    }
}

/// `(status or "no answer", code) → count` over every failed attempt.
pub fn failure_summary(runs: &[CommandRun]) -> BTreeMap<String, usize> {
    let mut summary = BTreeMap::new();
    for a in runs.iter().flat_map(|r| &r.attempts) {
        let label = match a {
            Attempt::ServerError { status, code } => format!("{status} {code}"),
            Attempt::NoAnswer(_) => "no answer".to_owned(),
            _ => continue,
        };
        *summary.entry(label).or_default() += 1;
    }
    summary
}

/// Every command was acknowledged in the end (nothing refused, nothing given up),
/// with exactly one event.
#[track_caller]
pub fn assert_every_command_acknowledged(load: &Load, runs: &[CommandRun]) {
    assert_eq!(runs.len(), load.total());
    for r in runs {
        assert!(
            r.acknowledged(),
            "{} never succeeded: {:?}",
            r.key,
            r.attempts
        );
        assert_eq!(r.positions.len(), 1, "{}: one event per credit", r.key);
    }
}

/// Each command sent once more with its key replays the outcome it was acknowledged
/// with: the same events at the same positions, nothing appended.
pub async fn assert_replays_match(targets: &Targets, runs: &[CommandRun]) {
    for (n, r) in runs.iter().enumerate() {
        let mut again = CommandRun {
            attempts: Vec::new(),
            positions: Vec::new(),
            event_ids: Vec::new(),
            ..r.clone()
        };
        resolve(targets, &Progress::default(), &mut again, n).await;
        assert_eq!(
            again.attempts.last(),
            Some(&Attempt::Done { replayed: true }),
            "{}: {:?}",
            r.key,
            again.attempts
        );
        assert_eq!(
            (&again.positions, &again.event_ids),
            (&r.positions, &r.event_ids),
            "{}: the replay names other events",
            r.key
        );
    }
}

async fn ints(pool: &MySqlPool, sql: &str) -> Vec<i64> {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The log holds exactly the acknowledged events: one per command (by ledger ref and
/// by the command id its metadata records) and one idempotency record per key.
pub async fn assert_one_event_per_command(pool: &MySqlPool, load: &Load, runs: &[CommandRun]) {
    let mine = format!(
        "ledger_ref_type = '{REF_TYPE}' AND ledger_ref_id LIKE '{}-c%'",
        load.run
    );
    let logged = ints(
        pool,
        &format!("SELECT global_position FROM events WHERE {mine} ORDER BY global_position"),
    )
    .await;
    let mut acknowledged: Vec<i64> = runs.iter().flat_map(|r| r.positions.clone()).collect();
    acknowledged.sort_unstable();
    assert_eq!(
        logged, acknowledged,
        "the log's credits are exactly the acknowledged ones"
    );
    let per_command = ints(
        pool,
        &format!(
            "SELECT COUNT(*) FROM events WHERE {mine} \
             GROUP BY JSON_VALUE(metadata, '$.command_id')"
        ),
    )
    .await;
    assert_eq!(
        per_command.len(),
        load.total(),
        "one command id per command"
    );
    assert!(per_command.iter().all(|&n| n == 1), "{per_command:?}");
    let keys = ints(
        pool,
        &format!(
            "SELECT COUNT(*) FROM command_log WHERE idempotency_key LIKE '{}-c%'",
            load.run
        ),
    )
    .await;
    assert_eq!(
        keys,
        vec![load.total() as i64],
        "one idempotency record per key"
    );
}

/// Every wallet's pending balance, read through the projection once it reached
/// `head`, is the sum of the credits acknowledged for it.
pub async fn assert_balances(targets: &Targets, load: &Load, runs: &[CommandRun], head: i64) {
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.acknowledged()) {
        *expected.entry(r.wallet.clone()).or_default() += r.amount_minor;
    }
    let deadline = Instant::now() + RESOLVE_WITHIN;
    for (n, (wallet, sum)) in expected.iter().enumerate() {
        let path = format!("/v1/wallets/{wallet}?min_position={head}");
        let view = loop {
            match targets.get(n, &path).await {
                Ok((200, v)) => break v,
                other => assert!(Instant::now() < deadline, "{path}: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            view["pending_minor"].as_i64(),
            Some(*sum),
            "{wallet}: {view}"
        );
    }
    assert_eq!(expected.len(), load.wallets);
}
