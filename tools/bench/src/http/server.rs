//! The `factledger serve` child of `bench http`: a re-created database, a temporary
//! working directory with its log, readiness, the admin key it mints, and a guard
//! that kills it when dropped (an error or a panic in the bench included).

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long `serve` may take to migrate the empty database and answer `/health`.
const READY_MAX: Duration = Duration::from_secs(120);
/// The line `serve` prints on stdout once it listens.
const LISTENING: &str = "factledger listening on http://";

/// Where `serve` writes a minted admin key (in its directory, or per partition in
/// `partitions/<CODE>/`).
pub(crate) use factledger::infra::auth::ADMIN_KEY_FILE;
/// Working directories made so far by this process (keeps same-millisecond names apart).
static DIRS: AtomicU64 = AtomicU64::new(0);

pub(crate) struct Spawn<'a> {
    pub(crate) bin: &'a Path,
    /// Global flags before `serve`: `--database-url URL`, or `--partitions SPEC` (and
    /// `--partition CODE`, `--integrity-keys FILE`…).
    pub(crate) global: &'a [String],
    /// The admin key files `serve` mints at its first start, relative to its working
    /// directory, read in this order ([`ADMIN_KEY_FILE`], or
    /// `partitions/<CODE>/factledger-admin.key` per partition). Empty: none awaited
    /// (the database already holds a key).
    pub(crate) key_files: &'a [PathBuf],
    pub(crate) connections_max: usize,
    pub(crate) args: &'a [String],
    pub(crate) env: &'a [(String, String)],
}

/// A running `serve`; killed on drop.
pub(crate) struct Server {
    child: Option<tokio::process::Child>,
    pub(crate) pid: u32,
    pub(crate) dir: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) base: String,
    /// The first admin key (empty when none was awaited).
    pub(crate) key: String,
    /// Every admin key read, in the order of `Spawn::key_files`.
    pub(crate) keys: Vec<String>,
    key_files: Vec<PathBuf>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
    }
}

impl Server {
    pub(crate) async fn start(s: &Spawn<'_>) -> anyhow::Result<Server> {
        // Relative to this directory, not the child's.
        let bin = std::fs::canonicalize(s.bin).with_context(|| {
            format!(
                "--serve-bin {}: not found (cargo build --release --bin factledger)",
                s.bin.display()
            )
        })?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis();
        let dir = std::env::temp_dir().join(format!(
            "factledger-bench-serve-{}-{stamp}-{}",
            std::process::id(),
            DIRS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let log = dir.join("serve.log");
        let out = std::fs::File::create(&log)?;
        let mut command = tokio::process::Command::new(&bin);
        command
            .current_dir(&dir)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info")
            .args(s.global)
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(["--connections-max", &s.connections_max.to_string()])
            // One key sends everything: the per-key limit would be the bottleneck.
            .args(["--rate-limit-per-key-rps", "1000000"])
            .args(["--rate-limit-per-key-burst", "1000000"])
            .args(s.args)
            .envs(s.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("start {} serve", bin.display()))?;
        let pid = child.id().context("serve exited at once")?;
        let mut server = Server {
            child: Some(child),
            pid,
            dir,
            log,
            base: String::new(),
            key: String::new(),
            keys: Vec::new(),
            key_files: s.key_files.to_vec(),
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// Wait for the listening line, the admin key files and a 200 from `/health`.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_MAX;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        loop {
            if let Some(child) = &mut self.child {
                if let Some(status) = child.try_wait()? {
                    self.child = None;
                    anyhow::bail!(
                        "serve exited ({status}) before it was ready:\n{}",
                        self.tail()
                    );
                }
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "serve not ready after {READY_MAX:?}:\n{}",
                self.tail()
            );
            if self.base.is_empty() {
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                if let Some(addr) = text.lines().find_map(|l| l.strip_prefix(LISTENING)) {
                    self.base = format!("http://{}", addr.trim());
                }
            }
            // It listens only once every partition has started (and minted its key).
            if !self.base.is_empty() && self.keys.len() < self.key_files.len() {
                for name in &self.key_files {
                    let file = self.dir.join(name);
                    let key = std::fs::read_to_string(&file).with_context(|| {
                        format!(
                            "{}: serve minted no admin key (not an empty database?)",
                            file.display()
                        )
                    })?;
                    self.keys.push(key.trim().to_owned());
                }
                self.key = self.keys.first().cloned().unwrap_or_default();
            }
            if !self.base.is_empty() {
                let health = client.get(format!("{}/health", self.base)).send().await;
                if matches!(&health, Ok(r) if r.status().is_success()) {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The log's last lines, for an error.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kill `serve` and wait (bounded) for it to exit.
    pub(crate) async fn stop(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
    }
}

/// Drop and re-create the database named in a mysql:// URL, or delete the files of an
/// absolute sqlite:// one.
pub(crate) async fn fresh_database(url: &str) -> anyhow::Result<()> {
    if url.starts_with("mysql://") {
        let (server, db) = url
            .rsplit_once('/')
            .context("--database-url: mysql://USER@HOST:PORT/DB")?;
        let db = db.split('?').next().unwrap_or(db);
        anyhow::ensure!(
            !db.is_empty() && db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "--database-url: the database name {db:?} must be [A-Za-z0-9_]"
        );
        crate::recreate_mysql_database(server, db).await?;
    } else if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        anyhow::ensure!(
            path.starts_with('/'),
            "--database-url: sqlite:///ABSOLUTE/PATH (serve runs in a temporary directory)"
        );
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    } else {
        anyhow::bail!("--database-url: mysql://… or sqlite:///…");
    }
    Ok(())
}
