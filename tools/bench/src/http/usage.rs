//! What a run of `bench http` cost besides its latencies: cores used by the bench, by
//! `serve` and by the database server (from /proc), log bytes, and the database
//! server's statements, commits and fsyncs (`SHOW GLOBAL STATUS`: server-wide, so
//! another workload on the same server shows up too; the idle line measures it).

use super::{Api, Ctx};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The processes whose CPU time is sampled: this bench, `serve` (one or several), the
/// database server (none, one or several `mariadbd`).
pub(crate) struct Procs {
    serve: Vec<u32>,
    pub(crate) db: Vec<u32>,
    ticks_per_s: f64,
}

/// CPU time so far (clock ticks) of each group of processes, and when it was read.
#[derive(Clone, Copy)]
pub(crate) struct CpuSnap {
    at: Instant,
    bench: u64,
    serve: u64,
    db: u64,
}

/// Cores used between two snapshots: CPU seconds / wall seconds of each group.
pub(crate) struct Cores {
    pub(crate) bench: f64,
    pub(crate) serve: f64,
    pub(crate) db: f64,
}

impl Procs {
    /// `serve` and the first `mariadbd`/`mysqld` process found on this machine.
    pub(super) fn find(serve: u32) -> Self {
        let db = std::fs::read_dir("/proc").ok().and_then(|dir| {
            dir.flatten().find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
            })
        });
        Self::new(vec![serve], db.into_iter().collect())
    }

    /// These `serve` processes and these database server processes.
    pub(crate) fn new(serve: Vec<u32>, db: Vec<u32>) -> Self {
        Self {
            serve,
            db,
            ticks_per_s: ticks_per_s(),
        }
    }

    /// utime + stime of a process from /proc/PID/stat (0 when unreadable).
    fn ticks(pid: &str) -> u64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return 0;
        };
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return 0;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        field(14).unwrap_or(0) + field(15).unwrap_or(0)
    }

    fn sum(pids: &[u32]) -> u64 {
        pids.iter().map(|p| Self::ticks(&p.to_string())).sum()
    }

    pub(crate) fn snap(&self) -> CpuSnap {
        CpuSnap {
            at: Instant::now(),
            bench: Self::ticks("self"),
            serve: Self::sum(&self.serve),
            db: Self::sum(&self.db),
        }
    }

    pub(crate) fn since(&self, before: CpuSnap) -> Cores {
        let now = self.snap();
        let wall = now.at.duration_since(before.at).as_secs_f64().max(1e-9) * self.ticks_per_s;
        Cores {
            bench: now.bench.saturating_sub(before.bench) as f64 / wall,
            serve: now.serve.saturating_sub(before.serve) as f64 / wall,
            db: now.db.saturating_sub(before.db) as f64 / wall,
        }
    }
}

/// Clock ticks per second (`getconf CLK_TCK`, else 100).
pub(crate) fn ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

impl std::fmt::Display for Cores {
    /// "bench/serve/db" cores.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2}/{:.2}/{:.2}", self.bench, self.serve, self.db)
    }
}

/// Counters read before a run, to report the run's own share after it.
pub(super) struct Mark {
    cpu: CpuSnap,
    log: u64,
    sent: u64,
    db: [u64; 3],
    bus: (f64, f64),
}

/// What a run cost: cores, requests sent, the database's statements, commits and
/// fsyncs (`SHOW GLOBAL STATUS`, the whole server's) while it ran; log bytes until the
/// projectors and outbox sinks caught up after it (the `log` sink writes late).
pub(super) struct Usage {
    pub(super) cores: Cores,
    pub(super) requests: u64,
    pub(super) log_bytes: u64,
    pub(super) db: [u64; 3],
    /// Commands per group-commit transaction of the wallet bus (`serve`'s
    /// `factledger_bus_batch_commands`), over the run.
    pub(super) bus_batch: f64,
    /// Seconds the projectors and outbox sinks took to catch up after the run.
    pub(super) settle_s: f64,
}

/// The columns `Usage::columns` prints, per `unit` (req, command).
pub(super) fn usage_header(unit: &str) -> String {
    format!(
        "cores bench/serve/db | log B/{unit} | db stmts/{unit} | db commits/{unit} | fsyncs/{unit} | bus cmds/txn | catch-up s"
    )
}

impl Usage {
    /// Per request sent, or per `units` when given (e.g. commands of batches).
    pub(super) fn columns(&self, units: Option<u64>) -> String {
        let n = units.unwrap_or(self.requests).max(1) as f64;
        format!(
            "{} | {:.0} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1}",
            self.cores,
            self.log_bytes as f64 / n,
            self.db[0] as f64 / n,
            self.db[1] as f64 / n,
            self.db[2] as f64 / n,
            self.bus_batch,
            self.settle_s,
        )
    }
}

/// `SHOW GLOBAL STATUS` counters: statements, commits, InnoDB data fsyncs.
const DB_COUNTERS: [&str; 3] = ["Questions", "Handler_commit", "Innodb_data_fsyncs"];

impl Ctx {
    async fn db_counters(&self) -> [u64; 3] {
        let mut out = [0; 3];
        let Some(conn) = &self.db else {
            return out;
        };
        let sql = "SHOW GLOBAL STATUS WHERE Variable_name IN \
                   ('Questions', 'Handler_commit', 'Innodb_data_fsyncs')";
        let rows: Vec<(String, String)> =
            match sqlx::query_as(sql).fetch_all(&mut *conn.lock().await).await {
                Ok(rows) => rows,
                Err(_) => return out,
            };
        for (name, value) in rows {
            if let Some(i) = DB_COUNTERS.iter().position(|c| *c == name) {
                out[i] = value.parse().unwrap_or(0);
            }
        }
        out
    }

    pub(super) async fn mark(&self) -> Mark {
        Mark {
            cpu: self.procs.snap(),
            log: self.log_len(),
            sent: self.api.sent.load(Ordering::Relaxed),
            db: self.db_counters().await,
            bus: self.api.bus_batches().await,
        }
    }

    /// What the run since `m` used; waits for the catch-up (bounded) first.
    pub(super) async fn finish(&self, m: &Mark) -> anyhow::Result<Usage> {
        let cores = self.procs.since(m.cpu);
        let db = self.db_counters().await;
        let bus = self.api.bus_batches().await;
        let requests = self.api.sent.load(Ordering::Relaxed) - m.sent;
        let settle_s = self.settle().await?;
        Ok(Usage {
            cores,
            requests,
            log_bytes: self.log_len().saturating_sub(m.log),
            db: [0, 1, 2].map(|i| db[i].saturating_sub(m.db[i])),
            bus_batch: (bus.0 - m.bus.0) / (bus.1 - m.bus.1).max(1.0),
            settle_s,
        })
    }
}

impl Api {
    /// Sum and count of the wallet bus's `factledger_bus_batch_commands` (0 when
    /// `/metrics` does not have it).
    pub(crate) async fn bus_batches(&self) -> (f64, f64) {
        let text = match self.get(&self.url("/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let value = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(name) && l.contains("aggregate=\"wallet\""))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        };
        (
            value("factledger_bus_batch_commands_sum"),
            value("factledger_bus_batch_commands_count"),
        )
    }
}
