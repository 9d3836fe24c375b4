//! Scale tests (issue 21 items 2–4) on the MariaDB topologies `tools/cluster.sh start`
//! runs on this machine: a 3-node Galera cluster (SQL ports 3311–3313) and an async
//! replica of node 1 (3314). `tools/test.sh` starts them before the suite and stops
//! them after; by hand: `tools/cluster.sh start`, then `cargo test --test scale`.
//!
//! - Multi-primary appends: clients write the same wallets through three services,
//!   one per node. Certification failures at commit are retried like any conflict and
//!   never answered as an unknown outcome; positions stay dense and ordered and every
//!   node holds the same log.
//! - Triggers and `SKIP LOCKED` on Galera: the append-only triggers refuse UPDATE and
//!   DELETE on every node; two job engines on two nodes run each job once.
//! - Node failure under load: the bank-style load (16 clients, idempotent retries)
//!   against `serve` given all three nodes while node 1 is SIGKILLed and rejoins:
//!   nothing acknowledged is lost or doubled, verify and reconcile are clean.
//! - Read replicas: reads served from the replica wait for `min_position`, and
//!   answer 503 when replication is held back past the wait.
//!
//! The tests share one cluster, so they take turns ([`CLUSTER`]).

mod common;

use common::load::{self, Load, Progress, Targets};
use serde_json::{json, Value};
use sqlx::Connection;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One test at a time: they kill nodes and hold replication back.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a node may take to rejoin, or replication to catch up, in these tests.
const CATCH_UP_MAX: Duration = Duration::from_secs(120);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The Galera nodes' server URLs (no database), node 1 first.
fn galera_urls() -> Vec<String> {
    env_or(
        "FACTLEDGER_TEST_GALERA_URLS",
        "mysql://root@127.0.0.1:3311,mysql://root@127.0.0.1:3312,mysql://root@127.0.0.1:3313",
    )
    .split(',')
    .map(|u| u.trim().to_owned())
    .collect()
}

fn replica_url() -> String {
    env_or("FACTLEDGER_TEST_REPLICA_URL", "mysql://root@127.0.0.1:3314")
}

fn replica_primary_url() -> String {
    env_or(
        "FACTLEDGER_TEST_REPLICA_PRIMARY_URL",
        "mysql://root@127.0.0.1:3311",
    )
}

/// `tools/cluster.sh args…`, which must succeed.
fn cluster(args: &[&str]) {
    let script = std::env::var("FACTLEDGER_CLUSTER_SCRIPT")
        .unwrap_or_else(|_| format!("{}/tools/cluster.sh", env!("CARGO_MANIFEST_DIR")));
    succeeded(
        &format!("tools/cluster.sh {args:?}"),
        std::process::Command::new(&script).args(args),
    );
}

/// Run `cmd` to completion; it must succeed (else its output is the failure).
fn succeeded(what: &str, cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh database on the cluster (created through node 1; Galera creates it on
/// every node, and the replica replays it), dropped by [`ClusterDb::drop_now`].
struct ClusterDb {
    name: String,
}

impl ClusterDb {
    async fn create(prefix: &str) -> ClusterDb {
        // The chain keys every service and CLI run of these tests seals with.
        common::integrity_keys_path();
        let name = format!(
            "fl_scale_{prefix}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        let mut conn = sqlx::MySqlConnection::connect(&galera_urls()[0])
            .await
            .unwrap_or_else(|e| {
                panic!("the Galera cluster does not answer ({e}): start it with tools/cluster.sh start")
            });
        sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE `{name}`").as_str())
            .await
            .expect("create database");
        ClusterDb { name }
    }

    /// The database on one server (`mysql://…:port`).
    fn on(&self, server: &str) -> String {
        format!("{server}/{}", self.name)
    }

    /// The database on node `i` (0-based).
    fn node(&self, i: usize) -> String {
        self.on(&galera_urls()[i])
    }

    /// A failover URL over all three nodes: `mysql://root@h:p1,h:p2,h:p3/db`.
    fn failover(&self) -> String {
        let hosts: Vec<String> = galera_urls()
            .iter()
            .map(|u| u.trim_start_matches("mysql://root@").to_owned())
            .collect();
        format!("mysql://root@{}/{}", hosts.join(","), self.name)
    }

    async fn drop_now(self) {
        if let Ok(mut conn) = sqlx::MySqlConnection::connect(&galera_urls()[0]).await {
            let _ = sqlx::Executor::execute(
                &mut conn,
                format!("DROP DATABASE IF EXISTS `{}`", self.name).as_str(),
            )
            .await;
        }
    }
}

/// `factledger --database-url url args…` in `dir`, which must succeed.
fn cli(url: &str, args: &[&str], dir: &std::path::Path) {
    succeeded(
        &format!("factledger {args:?}"),
        std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
            .current_dir(dir)
            .env("RUST_LOG", "warn")
            .arg("--database-url")
            .arg(url)
            .args(args),
    );
}

/// Galera applies another node's write sets asynchronously: a session that must see
/// every commit made anywhere before its statements waits for them first
/// (`wsrep_sync_wait`: reads, UPDATE/DELETE, INSERT/REPLACE). A plain replica
/// accepts the setting and ignores it.
const CAUSAL: &str = "SET SESSION wsrep_sync_wait = 7";

async fn causal(url: &str) -> sqlx::MySqlConnection {
    let mut conn = sqlx::MySqlConnection::connect(url).await.expect("connect");
    sqlx::Executor::execute(&mut conn, CAUSAL)
        .await
        .expect("wsrep_sync_wait");
    conn
}

async fn causal_pool(url: &str) -> sqlx::MySqlPool {
    sqlx::mysql::MySqlPoolOptions::new()
        .after_connect(|conn, _| {
            Box::pin(async move { sqlx::Executor::execute(conn, CAUSAL).await.map(|_| ()) })
        })
        .connect(url)
        .await
        .expect("pool")
}

async fn count(url: &str, sql: &str) -> i64 {
    let mut conn = causal(url).await;
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The log as every node holds it: `(count, min, max)` of the positions and the
/// last event's hash, equal on all nodes, with positions 1..=count (dense).
async fn assert_same_dense_log(db: &ClusterDb) -> i64 {
    let mut seen: Option<(i64, i64, i64, String)> = None;
    for i in 0..3 {
        let url = db.node(i);
        let mut conn = causal(&url).await;
        let (n, lo, hi): (i64, i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(MIN(global_position), 0), COALESCE(MAX(global_position), 0) FROM events",
        )
        .fetch_one(&mut conn)
        .await
        .expect("positions");
        let hash: String = sqlx::query_scalar(
            "SELECT HEX(hash) FROM events ORDER BY global_position DESC LIMIT 1",
        )
        .fetch_one(&mut conn)
        .await
        .expect("last hash");
        assert_eq!(
            (lo, hi),
            (1, n),
            "node {}: positions are dense 1..={n}",
            i + 1
        );
        match &seen {
            None => seen = Some((n, lo, hi, hash)),
            Some(first) => assert_eq!(
                first,
                &(n, lo, hi, hash),
                "node {} holds another log",
                i + 1
            ),
        }
    }
    seen.map(|s| s.0).unwrap_or(0)
}

/// Another service on a database a first one already started (no admin key is
/// made: the database has one): its base URL and the task serving it.
async fn serve_more(url: &str) -> (String, tokio::task::JoinHandle<()>) {
    let dir = tempfile::tempdir().unwrap();
    let started = factledger::server::start_with(url, "ID", dir.path(), no_settlement())
        .await
        .expect("start");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _dir = dir;
        factledger::server::serve(started.state, listener, std::future::pending())
            .await
            .expect("serve");
    });
    (base, task)
}

fn no_settlement() -> factledger::server::ServeOptions {
    factledger::server::ServeOptions {
        settlement_cron: factledger::server::SettlementCron::Off,
        ..Default::default()
    }
}

/// A counter's series as the metrics page shows them (`name{labels} value`).
async fn series(base: &str, key: &str, name: &str) -> Vec<String> {
    let text = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .bearer_auth(key)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .filter(|l| l.starts_with(name))
        .map(str::to_owned)
        .collect()
}

/// The sum of a counter's series so far, from the process-wide metrics.
async fn counter(base: &str, key: &str, name: &str) -> f64 {
    series(base, key, name)
        .await
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_multi_primary_appends_retry_certification_failures_and_stay_dense() {
    let _turn = CLUSTER.lock().await;
    let db = ClusterDb::create("mp").await;
    let first = common::Server::start_at(&db.node(0), no_settlement()).await;
    let mut bases = vec![first.base.clone()];
    let mut others = Vec::new();
    for i in 1..3 {
        let (base, task) = serve_more(&db.node(i)).await;
        bases.push(base);
        others.push(task);
    }
    // One admin key works everywhere: the key table is the cluster's.
    let admin = first.admin.clone();
    let targets = Targets::new(bases.clone(), &admin);
    let load = Load {
        run: format!("mp{}", &uuid::Uuid::new_v4().simple().to_string()[..6]),
        clients: 12,
        commands_per_client: 25,
        wallets: 6,
        pace: Duration::ZERO,
    };
    load.open_wallets(&targets).await;
    const RETRIES: &str = "factledger_bus_conflict_retries_total";
    const ROLLED_BACK: &str = "factledger_store_rolled_back_total";
    let retries_before = counter(&bases[0], &admin, RETRIES).await;
    let rolled_back_before = counter(&bases[0], &admin, ROLLED_BACK).await;
    let progress = Arc::new(Progress::default());
    let runs = load.drive(targets.clone(), progress).await;
    let failures = load::failure_summary(&runs);
    let retries = counter(&bases[0], &admin, RETRIES).await - retries_before;
    let rolled_back = counter(&bases[0], &admin, ROLLED_BACK).await - rolled_back_before;
    println!(
        "{} commands through 3 nodes: {rolled_back} appends rolled back ({}), {retries} \
         conflict retries, failed attempts {failures:?}",
        runs.len(),
        series(&bases[0], &admin, ROLLED_BACK).await.join("; ")
    );
    // Writers on three nodes to six wallets collide: certification failures happened
    // and were retried inside the service, never answered as an unknown outcome.
    assert!(
        retries > 0.0,
        "no conflict was retried: the test did not contend"
    );
    assert!(
        !failures
            .keys()
            .any(|k| k.contains("OUTCOME_UNKNOWN") || k.starts_with("500")),
        "{failures:?}"
    );
    load::assert_every_command_acknowledged(&load, &runs);
    let pool = causal_pool(&db.node(1)).await;
    load::assert_one_event_per_command(&pool, &load, &runs).await;
    load::assert_replays_match(&targets, &runs).await;
    load::assert_one_event_per_command(&pool, &load, &runs).await;
    pool.close().await;
    let head = assert_same_dense_log(&db).await;
    load::assert_balances(&targets, &load, &runs, head).await;
    // Each node's service verifies the whole chain.
    for base in &bases {
        let v: Value = reqwest::Client::new()
            .post(format!("{base}/v1/audit/verify"))
            .bearer_auth(&admin)
            .json(&json!({}))
            .send()
            .await
            .expect("verify")
            .json()
            .await
            .expect("verify json");
        assert_eq!(v["ok"], true, "{base}: {v}");
    }
    drop(first);
    others.iter().for_each(|t| t.abort());
    // A replay of the whole log agrees with every projection.
    cli(
        &db.node(2),
        &["reconcile"],
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
    );
    db.drop_now().await;
}

#[derive(Default)]
struct Counting(std::sync::Mutex<std::collections::BTreeMap<String, usize>>);

#[async_trait::async_trait]
impl factledger::infra::jobs::engine::JobHandler for Counting {
    async fn run(
        &self,
        job: &factledger::infra::jobs::ClaimedJob,
    ) -> Result<
        factledger::infra::jobs::engine::RoundReport,
        factledger::infra::jobs::engine::JobFailure,
    > {
        tokio::time::sleep(Duration::from_millis(5)).await;
        *self.0.lock().unwrap().entry(job.code.clone()).or_default() += 1;
        Ok(factledger::infra::jobs::engine::RoundReport::done(
            json!({}),
        ))
    }
}

static ONCE: factledger::infra::jobs::JobKind = factledger::infra::jobs::JobKind {
    cap: None,
    lease_ms: 60_000,
    ..factledger::infra::jobs::JobKind::new("scale_once", "SO")
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_keeps_the_append_only_triggers_and_runs_each_job_once_across_nodes() {
    use factledger::infra::jobs::engine::{Engine, EngineConfig, JobHandler};
    let _turn = CLUSTER.lock().await;
    let db = ClusterDb::create("tr").await;
    let app = common::Server::start_at(&db.node(0), no_settlement()).await;
    let (s, _) = app
        .post(
            "/v1/wallets/w-1/commands",
            json!({"type": "Open", "user_id": "u", "currency": "IDR"}),
        )
        .await;
    assert_eq!(s, 200);
    // The triggers were created through node 1 and exist, and refuse, on the others.
    for i in 1..3 {
        let url = db.node(i);
        assert_eq!(
            count(&url, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'events'").await,
            2,
            "node {}",
            i + 1
        );
        let mut conn = causal(&url).await;
        for change in ["UPDATE events SET actor = 'x'", "DELETE FROM events"] {
            let e = sqlx::Executor::execute(&mut conn, change)
                .await
                .expect_err("the log is append-only on every node");
            assert!(
                e.to_string().contains("append-only"),
                "node {}: {change}: {e}",
                i + 1
            );
        }
        assert_eq!(count(&url, "SELECT COUNT(*) FROM events").await, 1);
    }
    drop(app);

    // Two engines on two nodes claim the same jobs with SKIP LOCKED: row locks are
    // each node's own, so both may pick a row; certification lets one claim commit.
    let counting = Arc::new(Counting::default());
    let mut engines = Vec::new();
    for i in 0..2 {
        let database = factledger::infra::store::open(&db.node(i)).await.unwrap();
        let mut config = EngineConfig::new(format!("scale-{i}"));
        config.skip_locked = true;
        let kinds = vec![(&ONCE, counting.clone() as Arc<dyn JobHandler>)];
        engines.push(Engine::new(database.db, database.store, config, kinds).unwrap());
    }
    const JOBS: usize = 60;
    for j in 0..JOBS {
        let key = format!("job-{j}");
        engines[j % 2]
            .submit(&factledger::infra::jobs::JobSubmit::plain(
                &ONCE,
                &key,
                json!({"key": key}),
            ))
            .await
            .expect("submit");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let done_sql = "SELECT COUNT(*) FROM jobs WHERE kind = 'scale_once' AND status = 2";
    while count(&db.node(2), done_sql).await < JOBS as i64 {
        assert!(Instant::now() < deadline, "jobs did not finish");
        let (a, b) = (engines[0].clone(), engines[1].clone());
        let (ra, rb) = tokio::join!(a.scan(ONCE.name, None), b.scan(ONCE.name, None));
        // A scan that lost a claim at commit reports an error or skips; either way
        // the job stays with the winner.
        let _ = (ra, rb);
    }
    let runs = counting.0.lock().unwrap().clone();
    assert_eq!(runs.len(), JOBS, "{runs:?}");
    assert!(runs.values().all(|&n| n == 1), "a job ran twice: {runs:?}");
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_under_load_loses_and_doubles_nothing() {
    let _turn = CLUSTER.lock().await;
    let db = ClusterDb::create("kill").await;
    let dir = tempfile::tempdir().unwrap();
    let serve = common::serve_child::ServeChild::start(
        dir.path(),
        &db.failover(),
        &["--settlement-every", "off"],
        &[],
    );
    let admin = std::fs::read_to_string(dir.path().join(factledger::infra::auth::ADMIN_KEY_FILE))
        .expect("admin key file");
    let admin = admin.trim().to_owned();
    let targets = Targets::new(vec![serve.base.clone()], &admin);
    let load = Load {
        run: format!("k{}", &uuid::Uuid::new_v4().simple().to_string()[..6]),
        clients: 16,
        commands_per_client: 40,
        wallets: 8,
        pace: Duration::from_millis(10),
    };
    load.open_wallets(&targets).await;
    let progress = Arc::new(Progress::default());
    let driving = {
        let (load, targets, progress) = (load.clone(), targets.clone(), progress.clone());
        tokio::spawn(async move { load.drive(targets, progress).await })
    };
    // Kill node 1 (the one serve is on) once a fifth of the load is in.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Progress::get(&progress.acknowledged) < load.total() / 5 {
        assert!(Instant::now() < deadline, "the load did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = Progress::get(&progress.acknowledged);
    tokio::task::spawn_blocking(|| cluster(&["kill", "1"]))
        .await
        .unwrap();
    // The load goes on through nodes 2 and 3 while node 1 is down …
    let deadline = Instant::now() + Duration::from_secs(60);
    while Progress::get(&progress.acknowledged) < killed_at + load.total() / 5 {
        assert!(
            Instant::now() < deadline,
            "no command succeeded after the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let during = Progress::get(&progress.acknowledged) - killed_at;
    // … and node 1 rejoins (IST or SST) while it still runs.
    tokio::task::spawn_blocking(|| cluster(&["start-node", "1"]))
        .await
        .unwrap();
    let runs = driving.await.expect("load");
    let failures = load::failure_summary(&runs);
    println!(
        "{} commands, node 1 killed after {killed_at}, {during} acknowledged while it was down; failed attempts {failures:?}",
        runs.len()
    );
    // A command cut off by the kill is told to retry (503) or gets no answer; never
    // a 500, never a refusal.
    assert!(
        failures
            .keys()
            .all(|k| k == "no answer" || k.starts_with("503 ")),
        "{failures:?}"
    );
    load::assert_every_command_acknowledged(&load, &runs);
    load::assert_replays_match(&targets, &runs).await;
    let pool = causal_pool(&db.node(2)).await;
    load::assert_one_event_per_command(&pool, &load, &runs).await;
    pool.close().await;
    let head = runs.iter().flat_map(|r| r.positions.clone()).max().unwrap();
    load::assert_balances(&targets, &load, &runs, head).await;
    // The rejoined node holds the same dense log as the others.
    let deadline = Instant::now() + CATCH_UP_MAX;
    loop {
        let on_node1 = count(&db.node(0), "SELECT COUNT(*) FROM events").await;
        let on_node3 = count(&db.node(2), "SELECT COUNT(*) FROM events").await;
        if on_node1 == on_node3 {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 did not catch up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_same_dense_log(&db).await;
    drop(serve);
    // verify (against an anchor signed now) and reconcile, with the key file serve
    // used, through the cluster.
    cli(&db.failover(), &["anchor"], dir.path());
    cli(&db.failover(), &["verify"], dir.path());
    cli(&db.failover(), &["reconcile"], dir.path());
    db.drop_now().await;
}

async fn replica_sql(statement: &str) {
    let mut conn = sqlx::MySqlConnection::connect(&replica_url())
        .await
        .expect("the replica answers (tools/cluster.sh start)");
    sqlx::Executor::execute(&mut conn, statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_from_a_replica_wait_for_min_position_then_answer_503() {
    let _turn = CLUSTER.lock().await;
    let db = ClusterDb::create("rep").await;
    // The database arrives on the replica through replication.
    let deadline = Instant::now() + CATCH_UP_MAX;
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{}'",
        db.name
    );
    while count(&replica_url(), &sql).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the replica never saw the database"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut options = no_settlement();
    options.read_database_url = Some(db.on(&replica_url()));
    let primary = db.on(&replica_primary_url());
    let app = common::Server::start_at(&primary, options).await;
    assert!(app.state.reads_from_replica());
    let (s, w) = app
        .post(
            "/v1/wallets/w-1/commands",
            json!({"type": "Open", "user_id": "u", "currency": "IDR"}),
        )
        .await;
    assert_eq!(s, 200, "{w}");
    let (s, w) = app
        .post(
            "/v1/wallets/w-1/commands",
            json!({"type": "CreditPending", "ref_type": "T", "ref_id": "t-1", "amount_minor": 500}),
        )
        .await;
    assert_eq!(s, 200, "{w}");
    let first = w["position"].as_i64().unwrap();
    // Replicated within the wait: the read sees the write.
    let (s, v) = app
        .get(&format!("/v1/wallets/w-1?min_position={first}"))
        .await;
    assert_eq!((s, v["pending_minor"].as_i64()), (200, Some(500)), "{v}");
    let (s, v) = app.get(&format!("/v1/audit/events/{first}")).await;
    assert_eq!(
        (s, v["payload"]["ref_id"].as_str()),
        (200, Some("t-1")),
        "{v}"
    );

    // Replication held back: a write is on the primary, not on the replica.
    replica_sql("STOP SLAVE SQL_THREAD").await;
    let (s, w) = app
        .post(
            "/v1/wallets/w-1/commands",
            json!({"type": "CreditPending", "ref_type": "T", "ref_id": "t-2", "amount_minor": 700}),
        )
        .await;
    assert_eq!(s, 200, "{w}");
    let second = w["position"].as_i64().unwrap();
    let started = Instant::now();
    let (s, v) = app
        .get(&format!("/v1/wallets/w-1?min_position={second}"))
        .await;
    let waited = started.elapsed();
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("PROJECTION_BEHIND")),
        "{v}"
    );
    assert!(
        waited >= Duration::from_millis(1_500),
        "it waited first: {waited:?}"
    );
    let (s, v) = app.get(&format!("/v1/audit/events/{second}")).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (503, Some("REPLICA_BEHIND")),
        "{v}"
    );
    // Without min_position the replica answers what it has: the first credit only.
    let (s, v) = app.get("/v1/wallets/w-1").await;
    assert_eq!((s, v["pending_minor"].as_i64()), (200, Some(500)), "{v}");

    // Released: the same reads see the write.
    replica_sql("START SLAVE SQL_THREAD").await;
    let deadline = Instant::now() + CATCH_UP_MAX;
    let v = loop {
        let (s, v) = app
            .get(&format!("/v1/wallets/w-1?min_position={second}"))
            .await;
        if s == 200 {
            break v;
        }
        assert!(Instant::now() < deadline, "{v}");
    };
    assert_eq!(v["pending_minor"].as_i64(), Some(1_200), "{v}");
    let (s, v) = app.get(&format!("/v1/audit/events/{second}")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["payload"]["ref_id"], "t-2", "{v}");
    drop(app);
    db.drop_now().await;
}
