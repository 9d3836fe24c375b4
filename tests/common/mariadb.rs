//! A throw-away MariaDB server the test owns, for fault tests that must kill the
//! database itself (the shared server on 3306 runs the rest of the suite and is never
//! touched).
//!
//! [`PrivateMariadb::start`] installs a fresh data directory in a temporary directory
//! with `mariadb-install-db` (root over TCP with an empty password, `--no-defaults` so
//! no option file of the machine leaks in) and runs `mariadbd` on a free loopback port,
//! kept small so it starts in about a second. [`PrivateMariadb::kill`] is a SIGKILL —
//! no clean shutdown, InnoDB recovers from its redo log on the next start —
//! and [`PrivateMariadb::restart`] starts it again on the same data directory and
//! port. The server is killed when the handle is dropped, on panic too.

use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start (fresh or after a kill, crash recovery included) may take.
const START_WAIT_MAX: Duration = Duration::from_secs(30);

/// Options that keep the server small: one test's data fits in a 32 MB buffer pool,
/// and nothing needs the binary log, the performance schema or name resolution.
const SMALL_SERVER: [&str; 5] = [
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=8M",
    "--skip-log-bin",
    "--skip-name-resolve",
    "--performance-schema=OFF",
];

pub struct PrivateMariadb {
    dir: tempfile::TempDir,
    port: u16,
    mariadbd: PathBuf,
    child: Option<Child>,
}

/// The first of `name` found on `PATH` or in the usual system directories (`mariadbd`
/// lives in `/usr/sbin`, often not on a test's `PATH`).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `mariadbd` refuses to run as root unless told the user; as anyone else it runs
/// as that user.
fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

impl PrivateMariadb {
    /// A running private server, or `None` (with a message) where MariaDB is not
    /// installed.
    pub async fn start() -> Option<PrivateMariadb> {
        let (Some(mariadbd), Some(install)) =
            (find_program("mariadbd"), find_program("mariadb-install-db"))
        else {
            println!("skipped: mariadbd or mariadb-install-db is not installed");
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir for the private MariaDB");
        let datadir = dir.path().join("data");
        // Its own temporary directory: another MariaDB or test sharing /tmp cannot
        // collide with its temporary files (a fault test once failed that way).
        std::fs::create_dir_all(dir.path().join("tmp")).expect("private MariaDB tmpdir");
        let mut install = Command::new(install);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", datadir.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(SMALL_SERVER);
        if running_as_root() {
            install.arg("--user=root");
        }
        let out = install.output().expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = PrivateMariadb {
            dir,
            port: free_port(),
            mariadbd,
            child: None,
        };
        server.restart().await;
        Some(server)
    }

    /// `mysql://` URL of the server (no database).
    pub fn server_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// Create a database and return its URL.
    pub async fn create_database(&self, name: &str) -> String {
        let mut conn = sqlx::MySqlConnection::connect(&self.server_url())
            .await
            .expect("connect to the private MariaDB");
        sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create database");
        let _ = conn.close().await;
        format!("{}/{name}", self.server_url())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// SIGKILL the server and reap it: connections die mid-statement, nothing is
    /// flushed beyond what InnoDB already made durable.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the server (again) on the same data directory and port, and wait until
    /// it answers a query.
    pub async fn restart(&mut self) {
        self.kill();
        let mut cmd = Command::new(&self.mariadbd);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.path("data").display()))
            .arg(format!("--tmpdir={}", self.path("tmp").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.path("sock").display()))
            .arg(format!("--pid-file={}", self.path("pid").display()))
            .arg(format!("--log-error={}", self.path("error.log").display()))
            .arg("--bind-address=127.0.0.1")
            .args(SMALL_SERVER)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if running_as_root() {
            cmd.arg("--user=root");
        }
        self.child = Some(cmd.spawn().expect("spawn mariadbd"));
        self.wait_until_it_answers().await;
    }

    async fn wait_until_it_answers(&mut self) {
        let deadline = Instant::now() + START_WAIT_MAX;
        loop {
            if let Ok(mut conn) = sqlx::MySqlConnection::connect(&self.server_url()).await {
                if sqlx::Executor::execute(&mut conn, "SELECT 1").await.is_ok() {
                    let _ = conn.close().await;
                    return;
                }
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the private mariadbd did not start ({exited:?}); its log:\n{}",
                log_tail(&self.path("error.log"))
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Hold the lock every append takes first (the event sequence row of the database
/// `url` names), so the appends of the commands now arriving wait inside their
/// transaction: a kill then cuts them off mid-way, whatever the timing of the
/// machine. Reads do not wait on it. Release with `rollback` (or kill the server).
pub async fn hold_appends(url: &str) -> sqlx::Transaction<'static, sqlx::MySql> {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect to hold the sequence lock");
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SELECT last_position FROM event_sequence WHERE id = 1 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("hold the sequence lock");
    tx
}

/// Wait, at most `within`, until another connection to the database `url` names
/// runs a statement whose text starts with `statement` (e.g. waiting for a lock the
/// test holds).
pub async fn a_statement_waits(url: &str, statement: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND INFO LIKE '{statement}%'"
    );
    let mut conn = sqlx::MySqlConnection::connect(url)
        .await
        .expect("connect to watch the statements");
    while Instant::now() < deadline {
        let waiting: i64 = sqlx::query_scalar(&sql)
            .fetch_one(&mut conn)
            .await
            .expect("read the process list");
        if waiting > 0 {
            let _ = conn.close().await;
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = conn.close().await;
    false
}
