//! A real `factledger serve` child process for the tests that kill one: started on a
//! database with extra flags and environment, ready once it prints that it listens,
//! SIGKILLed when dropped (no clean shutdown).

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a process may take to say it listens.
pub const START_WAIT_MAX: Duration = Duration::from_secs(30);

pub struct ServeChild {
    pub child: Child,
    pub pid: u32,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        // `Child::kill` is SIGKILL on Unix.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeChild {
    /// `factledger serve --listen 127.0.0.1:0 --database-url url args…` in `dir`
    /// (where it keeps its admin key file), with `envs` set.
    pub fn start(dir: &Path, url: &str, args: &[&str], envs: &[(&str, &str)]) -> ServeChild {
        let mut child = Command::new(env!("CARGO_BIN_EXE_factledger"))
            .current_dir(dir)
            .env_remove("FACTLEDGER_LISTEN")
            .env("RUST_LOG", "warn")
            .envs(envs.iter().copied())
            .args(["serve", "--listen", "127.0.0.1:0", "--database-url", url])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn serve");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + START_WAIT_MAX;
        let base = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).expect("serve never said it listens");
            if let Some(addr) = line.strip_prefix("factledger listening on ") {
                break addr.trim().to_owned();
            }
        };
        ServeChild {
            pid: child.id(),
            child,
            base,
        }
    }
}

impl ServeChild {
    /// A child whose cron lease is `lease_ms` and that fires the test heartbeat every
    /// second (the two-process cron and fault tests).
    pub fn with_heartbeat(dir: &Path, url: &str, lease_ms: i64) -> ServeChild {
        let lease = lease_ms.to_string();
        ServeChild::start(
            dir,
            url,
            &[
                "--cron-lease-ms",
                &lease,
                "--test-cron-heartbeat",
                "* * * * * *",
            ],
            &[],
        )
    }
}
