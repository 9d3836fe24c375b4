//! `bench scale` (issue 21 item 5): the same closed-loop client load against several
//! database topologies, one table row each, so that what a topology buys reads as a
//! ratio to one node.
//!
//! The load is `bench http`'s closed loop ([`crate::http::closed::worker`]):
//! `--connections` workers, each sending its next request when the last is answered,
//! every request a fresh `CreditPending` (its own ledger reference) with its own
//! `Idempotency-Key`, after the wallets were opened. A run warms up for
//! `--warmup-secs` (not counted), waits until the projectors caught up, then counts
//! `--secs` (bounded in count too: [`REQUESTS_PER_SEC_BOUND`] per worker-second).
//!
//! Topologies (`--topologies`), each on freshly re-created databases, each `serve` a
//! child process of its own ([`crate::http::server`]) in its own temporary directory:
//!
//! - `single`: one `serve` on the first standalone node.
//! - `galera-writer`: one `serve` with the failover URL over the Galera nodes: every
//!   write goes through the first node, the others apply its write sets.
//! - `galera-multi`: one `serve` per Galera node, each with that node's plain URL to
//!   the SAME database. The first mints the admin key (the key table replicates) and
//!   the integrity key file, which the others are given (`--integrity-keys`): one
//!   chain, one keyring, as three hosts of one deployment would have.
//! - `partitions`: ONE `serve --partitions "ID=…3321/DB;TH=…3322/DB;VN=…3323/DB"`;
//!   each partition mints its own admin key, and the client names its partition with
//!   the `Ledger-Partition` header.
//! - `partition-procs`: one `serve --partitions … --partition XX` per partition.
//!
//! With several targets (serve processes or partitions), the workers and the wallets
//! are dealt round robin over them (same total connections), and each target's
//! wallets over its workers, so that no two workers (nor two nodes) write one wallet:
//! the topologies differ in where the writes go, not in contention on a stream.
//!
//! Before each topology its nodes are probed (login, and on Galera `wsrep_ready`);
//! one that does not answer skips the topology with a message saying how to start it.
//! CPU is read from /proc: this generator, the `serve` processes, the topology's own
//! `mariadbd` processes (found through `@@pid_file` when the node is on this machine),
//! and the whole machine's busy cores (other `mariadbd`, e.g. the async replica of
//! `tools/cluster.sh start`, and anything else running, show up only there).

use crate::http::closed::{worker, Request};
use crate::http::server::{Server, Spawn, ADMIN_KEY_FILE};
use crate::http::usage::{ticks_per_s, Procs};
use crate::http::{credit_body, open_wallets, Api, Tally, REQUESTS_PER_SEC_BOUND};
use anyhow::Context;
use sqlx::Connection;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `bench scale`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The `factledger` binary to run `serve` from.
    #[arg(long, default_value = "target/release/factledger")]
    serve_bin: PathBuf,
    /// Seconds of measured load per topology.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Seconds of the same load before each measured run, not counted.
    #[arg(long, default_value_t = 2)]
    warmup_secs: u64,
    /// Workers in all (each one request at a time), dealt over the targets.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Wallets in all, dealt over the targets (opened before the clock starts).
    #[arg(long, default_value_t = 64)]
    wallets: usize,
    /// Topologies to run, in this order (comma separated): single, galera-writer,
    /// galera-multi, partitions, partition-procs.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "single,galera-writer,galera-multi,partitions,partition-procs"
    )]
    topologies: Vec<String>,
    /// The standalone nodes, HOST:PORT (`tools/cluster.sh start-standalone`); the
    /// first is the `single` topology's, one per partition.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "127.0.0.1:3321,127.0.0.1:3322,127.0.0.1:3323"
    )]
    standalone: Vec<String>,
    /// The Galera nodes, HOST:PORT, in failover order (`tools/cluster.sh start`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "127.0.0.1:3311,127.0.0.1:3312,127.0.0.1:3313"
    )]
    galera: Vec<String>,
    /// The database user of every node (no password).
    #[arg(long, default_value = "root")]
    db_user: String,
    /// The database of every node: dropped and re-created before each topology
    /// (must start with `factledger_bench_`).
    #[arg(long, default_value = "factledger_bench_scale")]
    database: String,
    /// Partition codes, one per standalone node.
    #[arg(long, value_delimiter = ',', default_value = "ID,TH,VN")]
    partitions: Vec<String>,
    /// One more argument for every `serve` (repeatable).
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// One more KEY=VALUE in every `serve`'s environment (repeatable).
    #[arg(long = "serve-env")]
    serve_env: Vec<String>,
}

/// Every topology, in the default order.
const TOPOLOGIES: [&str; 5] = [
    "single",
    "galera-writer",
    "galera-multi",
    "partitions",
    "partition-procs",
];
/// How long a node may take to accept a login before its topology is skipped.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections each `serve` accepts beyond the workers (setup, metrics, settling).
const CONNECTIONS_SPARE: usize = 64;

/// One topology: its nodes and the `serve` processes to start, in order.
struct Topology {
    name: &'static str,
    /// What the row calls it.
    label: String,
    /// HOST:PORT of every node it uses (probed, and their `mariadbd` measured).
    nodes: Vec<String>,
    /// Nodes whose database is re-created (Galera: the first; DDL replicates).
    recreate: Vec<String>,
    /// What to do when a node does not answer.
    hint: &'static str,
    procs: Vec<ProcSpec>,
}

/// One `serve` process of a topology.
struct ProcSpec {
    /// Global flags before `serve` (`--database-url …`, `--partitions …`).
    global: Vec<String>,
    /// The partitions it serves, each a target of the client (`None`: unpartitioned).
    targets: Vec<Option<String>>,
    /// Same database as the first process: uses its integrity key file and admin key
    /// (mints none).
    shares_first: bool,
}

/// Where the client sends: one `serve` (and one partition of it).
struct Target {
    api: Arc<Api>,
    /// The `serve` process (index into the started ones).
    proc: usize,
    name: String,
    /// The wallet command URLs of its wallets.
    wallets: Vec<String>,
}

/// A measured run.
struct Row {
    name: &'static str,
    topology: String,
    procs: usize,
    targets: usize,
    tally: Tally,
    per_target: Vec<(String, u64)>,
    elapsed_s: f64,
    /// Cores: generator, serve, the topology's mariadbd, the whole machine.
    cores: [f64; 4],
    /// `mariadbd` processes of the topology found (of its nodes).
    db_found: (usize, usize),
    bus_batch: f64,
    settle_s: f64,
    /// ERROR lines the `serve` logs hold at the end (setup and warm-up included).
    log_errors: usize,
    /// Galera transactions aborted over the measured run, summed over the nodes:
    /// certification failures, brute-force aborts (`None`: no Galera node).
    wsrep_aborts: Option<(u64, u64)>,
}

impl Row {
    fn ok_per_s(&self) -> f64 {
        self.tally.ok as f64 / self.elapsed_s.max(1e-9)
    }
}

pub async fn bench(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.secs > 0, "--secs must be at least 1");
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(
        args.database.starts_with("factledger_bench_")
            && args
                .database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "--database: factledger_bench_[A-Za-z0-9_]* (it is dropped and re-created)"
    );
    anyhow::ensure!(
        !args.partitions.is_empty() && args.standalone.len() >= args.partitions.len(),
        "--partitions: one standalone node each (--standalone lists {})",
        args.standalone.len()
    );
    anyhow::ensure!(!args.galera.is_empty(), "--galera: at least one node");
    let env = crate::http::serve_env(&args.serve_env)?;
    let mut chosen = Vec::new();
    for t in &args.topologies {
        let t = t.trim();
        let Some(name) = TOPOLOGIES.iter().find(|n| **n == t) else {
            anyhow::bail!(
                "--topologies: unknown {t:?} (one of {})",
                TOPOLOGIES.join(", ")
            );
        };
        chosen.push(topology(&args, name));
    }
    let most_targets = chosen.iter().map(targets_of).max().unwrap_or(1);
    anyhow::ensure!(
        args.connections >= most_targets && args.wallets >= most_targets,
        "--connections and --wallets: at least {most_targets} (one per target)"
    );
    println!(
        "bench scale: {} connections, {} wallets, {} s measured after {} s warm-up per topology; fresh CreditPending, each with its own Idempotency-Key",
        args.connections, args.wallets, args.secs, args.warmup_secs
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average before the runs: {}", load.trim());
    let mut rows: Vec<Result<Row, String>> = Vec::new();
    let mut failed = None;
    for t in &chosen {
        println!();
        println!("== {}", t.label);
        match run(&args, &env, t).await {
            Ok(Some(row)) => rows.push(Ok(row)),
            Ok(None) => rows.push(Err(format!("{}: skipped (see above)", t.label))),
            Err(e) => {
                println!("FAILED: {e:#}");
                rows.push(Err(format!("{}: FAILED: {e:#}", t.label)));
                failed.get_or_insert(e);
            }
        }
    }
    print_table(&rows);
    match failed {
        Some(e) => Err(e.context("bench scale: a topology failed (its line above)")),
        None => Ok(()),
    }
}

/// The targets a topology's client load is split over.
fn targets_of(t: &Topology) -> usize {
    t.procs.iter().map(|p| p.targets.len()).sum()
}

fn topology(args: &Args, name: &'static str) -> Topology {
    let url = |host: &str| format!("mysql://{}@{host}/{}", args.db_user, args.database);
    let plain = |global: Vec<String>, targets: Vec<Option<String>>| ProcSpec {
        global,
        targets,
        shares_first: false,
    };
    let standalone_hint = "start the standalone nodes: tools/cluster.sh start-standalone";
    let galera_hint = "start the Galera cluster: tools/cluster.sh start";
    let parts: Vec<(String, String)> = args
        .partitions
        .iter()
        .zip(&args.standalone)
        .map(|(code, host)| (code.trim().to_owned(), host.clone()))
        .collect();
    let spec = parts
        .iter()
        .map(|(code, host)| format!("{code}={}", url(host)))
        .collect::<Vec<_>>()
        .join(";");
    let part_hosts: Vec<String> = parts.iter().map(|(_, h)| h.clone()).collect();
    match name {
        "single" => Topology {
            name,
            label: format!("1 node ({})", args.standalone[0]),
            nodes: vec![args.standalone[0].clone()],
            recreate: vec![args.standalone[0].clone()],
            hint: standalone_hint,
            procs: vec![plain(
                vec!["--database-url".into(), url(&args.standalone[0])],
                vec![None],
            )],
        },
        "galera-writer" => Topology {
            name,
            label: format!(
                "{}-node Galera, one writer (failover URL)",
                args.galera.len()
            ),
            nodes: args.galera.clone(),
            recreate: vec![args.galera[0].clone()],
            hint: galera_hint,
            procs: vec![plain(
                vec![
                    "--database-url".into(),
                    format!(
                        "mysql://{}@{}/{}",
                        args.db_user,
                        args.galera.join(","),
                        args.database
                    ),
                ],
                vec![None],
            )],
        },
        "galera-multi" => Topology {
            name,
            label: format!(
                "{}-node Galera, multi-primary ({} serve)",
                args.galera.len(),
                args.galera.len()
            ),
            nodes: args.galera.clone(),
            recreate: vec![args.galera[0].clone()],
            hint: galera_hint,
            procs: args
                .galera
                .iter()
                .enumerate()
                .map(|(i, host)| ProcSpec {
                    global: vec!["--database-url".into(), url(host)],
                    targets: vec![None],
                    shares_first: i > 0,
                })
                .collect(),
        },
        "partitions" => Topology {
            name,
            label: format!(
                "{} partitions on {} nodes, 1 serve",
                parts.len(),
                parts.len()
            ),
            nodes: part_hosts.clone(),
            recreate: part_hosts,
            hint: standalone_hint,
            procs: vec![plain(
                vec!["--partitions".into(), spec],
                parts.iter().map(|(c, _)| Some(c.clone())).collect(),
            )],
        },
        _ => Topology {
            name,
            label: format!(
                "{} partitions on {} nodes, 1 serve each",
                parts.len(),
                parts.len()
            ),
            nodes: part_hosts.clone(),
            recreate: part_hosts,
            hint: standalone_hint,
            procs: parts
                .iter()
                .map(|(code, _)| {
                    plain(
                        vec![
                            "--partitions".into(),
                            spec.clone(),
                            "--partition".into(),
                            code.clone(),
                        ],
                        vec![Some(code.clone())],
                    )
                })
                .collect(),
        },
    }
}

/// Probe a node: it accepts the login and, on Galera, is ready; the pid of its
/// `mariadbd` when its pid file is readable here (`None`: not on this machine).
async fn probe(user: &str, host: &str) -> anyhow::Result<Option<u32>> {
    let url = format!("mysql://{user}@{host}");
    let mut conn = tokio::time::timeout(PROBE_TIMEOUT, sqlx::MySqlConnection::connect(&url))
        .await
        .map_err(|_| anyhow::anyhow!("{host}: no answer within {PROBE_TIMEOUT:?}"))?
        .with_context(|| format!("{host}: cannot log in"))?;
    let (pid_file, datadir): (String, String) =
        sqlx::query_as("SELECT @@GLOBAL.pid_file, @@GLOBAL.datadir")
            .fetch_one(&mut conn)
            .await?;
    // MariaDB has @@wsrep_on (0 without Galera); MySQL has no such variable.
    let wsrep = sqlx::query_scalar::<_, i64>("SELECT CAST(@@GLOBAL.wsrep_on AS SIGNED)")
        .fetch_one(&mut conn)
        .await
        .unwrap_or(0);
    if wsrep == 1 {
        let ready: Option<(String, String)> =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'wsrep_ready'")
                .fetch_optional(&mut conn)
                .await?;
        anyhow::ensure!(
            matches!(&ready, Some((_, v)) if v == "ON"),
            "{host}: Galera node not ready (wsrep_ready {:?})",
            ready.map(|r| r.1)
        );
    }
    conn.close().await?;
    let local = host.starts_with("127.") || host.starts_with("localhost");
    let path = PathBuf::from(&datadir).join(pid_file);
    Ok(local
        .then(|| std::fs::read_to_string(&path).ok())
        .flatten()
        .and_then(|p| p.trim().parse().ok()))
}

/// Start a topology, load it, stop it: its row, or `None` when a node did not answer.
async fn run(args: &Args, env: &[(String, String)], t: &Topology) -> anyhow::Result<Option<Row>> {
    let mut db_pids = Vec::new();
    for host in &t.nodes {
        match probe(&args.db_user, host).await {
            Ok(pid) => db_pids.extend(pid),
            Err(e) => {
                println!("skipped: {e:#}; {}", t.hint);
                return Ok(None);
            }
        }
    }
    for host in &t.recreate {
        crate::recreate_mysql_database(&format!("mysql://{}@{host}", args.db_user), &args.database)
            .await?;
    }
    let mut servers: Vec<Server> = Vec::new();
    let result = async {
        for (i, p) in t.procs.iter().enumerate() {
            let server = start(args, env, p, servers.first()).await?;
            println!(
                "serve {} pid {} at {} ({}; log {})",
                i + 1,
                server.pid,
                server.base,
                p.global.join(" "),
                server.log.display()
            );
            servers.push(server);
        }
        load(args, t, &servers, db_pids).await
    }
    .await;
    for s in servers {
        s.stop().await;
    }
    result.map(Some)
}

/// Start one `serve` of a topology (`first`: the topology's first, already running).
async fn start(
    args: &Args,
    env: &[(String, String)],
    p: &ProcSpec,
    first: Option<&Server>,
) -> anyhow::Result<Server> {
    let mut global = p.global.clone();
    let mut key_files: Vec<PathBuf> = p
        .targets
        .iter()
        .map(|t| match t {
            None => PathBuf::from(ADMIN_KEY_FILE),
            Some(code) => PathBuf::from("partitions").join(code).join(ADMIN_KEY_FILE),
        })
        .collect();
    if p.shares_first {
        let first = first.context("a shared serve needs the first one running")?;
        let keys = first
            .dir
            .join(factledger::infra::store::integrity::keys::KEY_FILE_DEFAULT);
        anyhow::ensure!(
            keys.exists(),
            "{}: the first serve wrote no integrity key file",
            keys.display()
        );
        global.extend(["--integrity-keys".into(), keys.display().to_string()]);
        key_files.clear();
    }
    let mut server = Server::start(&Spawn {
        bin: &args.serve_bin,
        global: &global,
        key_files: &key_files,
        connections_max: args.connections + CONNECTIONS_SPARE,
        args: &args.serve_args,
        env,
    })
    .await?;
    if p.shares_first {
        let first = first.context("a shared serve needs the first one running")?;
        server.keys = first.keys.clone();
        server.key = first.key.clone();
    }
    Ok(server)
}

/// Open the wallets, warm up, settle, then the measured run.
async fn load(
    args: &Args,
    t: &Topology,
    servers: &[Server],
    db_pids: Vec<u32>,
) -> anyhow::Result<Row> {
    let mut targets = Vec::new();
    for (i, (p, s)) in t.procs.iter().zip(servers).enumerate() {
        for (k, part) in p.targets.iter().enumerate() {
            let key = s.keys.get(k).context("serve read no admin key")?;
            targets.push(Target {
                api: Arc::new(Api::new(&s.base, key, args.connections, part.as_deref())?),
                proc: i,
                name: match part {
                    Some(code) => code.clone(),
                    None => format!("serve {}", i + 1),
                },
                wallets: Vec::new(),
            });
        }
    }
    let n = targets.len();
    for (k, target) in targets.iter_mut().enumerate() {
        let ids: Vec<String> = (k..args.wallets)
            .step_by(n)
            .map(|w| format!("sw-{w}"))
            .collect();
        open_wallets(&target.api, &ids)
            .await
            .with_context(|| format!("{}: open the wallets", target.name))?;
        target.wallets = ids.iter().map(|w| target.api.wallet_url(w)).collect();
    }
    if args.warmup_secs > 0 {
        closed_loop(args, &targets, "wu", args.warmup_secs).await?;
    }
    for target in &targets {
        target.api.settle().await?;
    }
    // One `/metrics` per process: its bus metrics are process-wide.
    let firsts: Vec<&Target> = (0..servers.len())
        .filter_map(|i| targets.iter().find(|t| t.proc == i))
        .collect();
    let bus_before = bus(&firsts).await;
    let wsrep_before = wsrep_aborts(&args.db_user, &t.nodes).await;
    let procs = Procs::new(servers.iter().map(|s| s.pid).collect(), db_pids.clone());
    let cpu = procs.snap();
    let machine = MachineCpu::now();
    let started = Instant::now();
    let tallies = closed_loop(args, &targets, "m", args.secs).await?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let cores = procs.since(cpu);
    let machine_cores = machine.busy_cores_since();
    let bus_after = bus(&firsts).await;
    let wsrep_after = wsrep_aborts(&args.db_user, &t.nodes).await;
    let mut settle_s: f64 = 0.0;
    for target in &targets {
        settle_s = settle_s.max(target.api.settle().await?);
    }
    let mut tally = Tally::new();
    let mut per_target = Vec::new();
    for (target, part) in targets.iter().zip(&tallies) {
        tally.merge(part);
        per_target.push((target.name.clone(), part.ok));
    }
    Ok(Row {
        name: t.name,
        topology: t.label.clone(),
        procs: servers.len(),
        targets: n,
        tally,
        per_target,
        elapsed_s,
        cores: [cores.bench, cores.serve, cores.db, machine_cores],
        db_found: (db_pids.len(), t.nodes.len()),
        bus_batch: (bus_after.0 - bus_before.0) / (bus_after.1 - bus_before.1).max(1.0),
        settle_s,
        log_errors: servers.iter().map(|s| error_lines(&s.log)).sum(),
        wsrep_aborts: wsrep_before
            .zip(wsrep_after)
            .map(|(b, a)| (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1))),
    })
}

/// `wsrep_local_cert_failures` and `wsrep_local_bf_aborts` summed over the nodes
/// (`None` when none reports them: no Galera, or unreachable).
async fn wsrep_aborts(user: &str, nodes: &[String]) -> Option<(u64, u64)> {
    let mut sum = None;
    for host in nodes {
        let Ok(mut conn) = sqlx::MySqlConnection::connect(&format!("mysql://{user}@{host}")).await
        else {
            continue;
        };
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap_or_default();
        let _ = conn.close().await;
        // A node without a Galera provider still shows wsrep_local_bf_aborts (0).
        if !rows.iter().any(|(n, _)| n == "wsrep_local_cert_failures") {
            continue;
        }
        for (name, value) in rows {
            let v: u64 = value.parse().unwrap_or(0);
            let s: &mut (u64, u64) = sum.get_or_insert((0, 0));
            match name.as_str() {
                "wsrep_local_cert_failures" => s.0 += v,
                _ => s.1 += v,
            }
        }
    }
    sum
}

/// Lines at level ERROR in a `serve` log (JSON or text format).
fn error_lines(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"level\":\"ERROR\"") || l.contains(" ERROR "))
        .count()
}

/// Sum and count of the wallet bus batch sizes over these processes.
async fn bus(firsts: &[&Target]) -> (f64, f64) {
    let mut sum = (0.0, 0.0);
    for t in firsts {
        let (s, c) = t.api.bus_batches().await;
        sum = (sum.0 + s, sum.1 + c);
    }
    sum
}

/// `--connections` closed-loop workers dealt over the targets for `secs`: worker c
/// sends to target c mod n, over that target's wallets dealt among its workers. Each
/// request a fresh reference `<phase>-<c>-<i>` with the same Idempotency-Key. One
/// tally per target.
async fn closed_loop(
    args: &Args,
    targets: &[Target],
    phase: &'static str,
    secs: u64,
) -> anyhow::Result<Vec<Tally>> {
    let n = targets.len();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let most = secs * REQUESTS_PER_SEC_BOUND;
    let mut workers: Vec<Vec<_>> = (0..n).map(|_| Vec::new()).collect();
    for c in 0..args.connections {
        let (k, j) = (c % n, c / n);
        let target = &targets[k];
        // This target's workers, and the wallets worker j takes turns on.
        let peers = (args.connections - k).div_ceil(n);
        let m = target.wallets.len();
        let mine: Vec<String> = if m >= peers {
            (j..m)
                .step_by(peers)
                .map(|w| target.wallets[w].clone())
                .collect()
        } else {
            vec![target.wallets[j % m].clone()]
        };
        workers[k].push(worker(target.api.clone(), deadline, most, move |i| {
            let reference = format!("{phase}-{c}-{i}");
            Request {
                url: mine[i as usize % mine.len()].clone(),
                body: credit_body(&reference),
                idempotency_key: Some(reference),
            }
        }));
    }
    let mut out = Vec::new();
    for group in workers {
        let mut tally = Tally::new();
        for w in group {
            tally.merge(&w.await?);
        }
        out.push(tally);
    }
    Ok(out)
}

/// The machine's busy CPU time (/proc/stat: user, nice, system, irq, softirq).
struct MachineCpu {
    at: Instant,
    busy: u64,
}

impl MachineCpu {
    fn now() -> Self {
        Self {
            at: Instant::now(),
            busy: Self::busy_ticks(),
        }
    }

    fn busy_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
            return 0;
        };
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal…: idle, iowait, steal are not
        // work done here.
        [0, 1, 2, 5, 6].iter().filter_map(|&i| f.get(i)).sum()
    }

    fn busy_cores_since(&self) -> f64 {
        let wall = self.at.elapsed().as_secs_f64().max(1e-9) * ticks_per_s();
        Self::busy_ticks().saturating_sub(self.busy) as f64 / wall
    }
}

fn print_table(rows: &[Result<Row, String>]) {
    println!();
    println!(
        "| topology | serve procs × targets | cmds ok/s | × 1 node | answered | p50 ms | p99 ms | errors / non-2xx | ok/s per target | cores gen/serve/db | machine busy cores | bus cmds/txn | catch-up s | serve log ERROR lines | Galera cert fails / BF aborts |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let base = rows
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .find(|r| r.name == "single")
        .map(Row::ok_per_s);
    let mut notes = Vec::new();
    for r in rows {
        let r = match r {
            Ok(r) => r,
            Err(note) => {
                notes.push(note.clone());
                continue;
            }
        };
        let t = &r.tally;
        let problems = t.count() - t.ok;
        let outcomes = if problems == 0 {
            "0".to_owned()
        } else {
            t.outcomes()
        };
        let ratio = base.map_or("–".to_owned(), |b| {
            format!("{:.2}", r.ok_per_s() / b.max(1e-9))
        });
        let per_target = r
            .per_target
            .iter()
            .map(|(name, ok)| format!("{name} {:.0}", *ok as f64 / r.elapsed_s.max(1e-9)))
            .collect::<Vec<_>>()
            .join(" / ");
        let db = if r.db_found.0 == r.db_found.1 {
            format!("{:.2}", r.cores[2])
        } else {
            format!(
                "{:.2} ({} of {} found)",
                r.cores[2], r.db_found.0, r.db_found.1
            )
        };
        println!(
            "| {} | {} × {} | {:.0} | {ratio} | {} | {:.2} | {:.2} | {outcomes} | {per_target} | {:.2}/{:.2}/{db} | {:.2} | {:.1} | {:.1} | {} | {} |",
            r.topology,
            r.procs,
            r.targets,
            r.ok_per_s(),
            t.count(),
            t.ms(0.50),
            t.ms(0.99),
            r.cores[0],
            r.cores[1],
            r.cores[3],
            r.bus_batch,
            r.settle_s,
            r.log_errors,
            r.wsrep_aborts
                .map_or("–".to_owned(), |(c, b)| format!("{c} / {b}")),
        );
    }
    for note in notes {
        println!("- {note}");
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "cmds ok/s: 2xx answers per second of the measured run; × 1 node: that over the 1-node row. Cores: this generator / every serve of the row / the row's own mariadbd (its nodes only); machine busy cores: every process on the machine (other mariadbd, e.g. the async replica of galera1, included). bus cmds/txn: commands per group-commit transaction of the wallet bus. Galera aborts: over the measured run, all nodes, projectors' transactions included."
    );
    println!(
        "Caveat: this machine has {cores} cores. The load generator, every serve and up to three mariadbd (plus the Galera nodes' replication work, and any other process: see machine busy cores) share them, so no topology gets more hardware than the 1-node row: the multi-node rows measure the coordination cost, and the partitions figure is a lower bound of what three machines give (each partition would have its own cores and disk)."
    );
}
