//! Several database hosts behind one URL (issue 21 item 3):
//! `mysql://user@host1:3311,host2:3312,host3:3313/db?…` names the nodes of a Galera
//! cluster in order of preference. The pool connects to one node at a time, so all
//! of this process's writes go through one node and certification conflicts between
//! its own transactions cannot happen.
//!
//! A monitor probes the current node every [`FAILOVER_PROBE_MS`] with a fresh
//! connection: it must accept the login and, on Galera, report `wsrep_ready = ON`
//! and `Synced` (a node cut off from the primary component answers pings but
//! refuses statements with 1047). When the probe fails, the first healthy node in
//! list order becomes current (`Pool::set_connect_options`), and every pooled
//! connection opened before the switch is dropped at its next checkout
//! (`before_acquire`), so no request keeps talking to the node that failed.
//!
//! A transaction cut off by the failure reports its outcome as unknown
//! (`StoreError::OutcomeUnknown`), exactly as with one server that dies: the client
//! retries with its Idempotency-Key, and the command log, written in the same
//! transaction as the events, answers whether it committed. Galera commits a
//! transaction on every node or on none, so the retry sees the same answer on
//! whichever node is current.

use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::{ConnectOptions, Connection};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the current node is probed.
pub const FAILOVER_PROBE_MS: u64 = 500;
/// How long a probe may take (login and status query) before the node counts as
/// down: well under the HTTP request timeout, so a failover finishes while clients
/// are still retrying.
pub const FAILOVER_PROBE_TIMEOUT_MS: u64 = 1_500;

/// The single-host URLs of `url`: one per host of a comma-separated host list (one
/// URL when it names one host). User, database and parameters are every host's.
pub fn host_urls(url: &str) -> Vec<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return vec![url.to_owned()];
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    let list: Vec<&str> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    if list.len() < 2 {
        return vec![url.to_owned()];
    }
    list.into_iter()
        .map(|h| format!("{scheme}://{userinfo}{h}{tail}"))
        .collect()
}

/// The nodes, which one is current, and when the current one was chosen.
pub(super) struct Failover {
    hosts: Vec<MySqlConnectOptions>,
    current: AtomicUsize,
    epoch: Instant,
    /// When the current node was chosen, in ms since `epoch`.
    switched_at_ms: AtomicU64,
}

impl Failover {
    pub(super) fn new(hosts: Vec<MySqlConnectOptions>) -> Arc<Failover> {
        Arc::new(Failover {
            hosts,
            current: AtomicUsize::new(0),
            epoch: Instant::now(),
            switched_at_ms: AtomicU64::new(0),
        })
    }

    /// Where a node is, for logs (never the password).
    fn name(&self, i: usize) -> String {
        self.hosts
            .get(i)
            .map(|o| format!("{}:{}", o.get_host(), o.get_port()))
            .unwrap_or_default()
    }

    /// The options of the first healthy node, made current (the first node when
    /// none answers: the pool's own errors then say why).
    pub(super) async fn choose_first(&self) -> MySqlConnectOptions {
        let chosen = self.first_healthy(None).await.unwrap_or(0);
        self.current.store(chosen, Ordering::SeqCst);
        tracing::info!(node = %self.name(chosen), "database node chosen");
        self.hosts[chosen].clone()
    }

    async fn first_healthy(&self, skip: Option<usize>) -> Option<usize> {
        for i in 0..self.hosts.len() {
            if Some(i) != skip && healthy(&self.hosts[i]).await {
                return Some(i);
            }
        }
        None
    }

    /// Whether a pooled connection `age` old was opened after the current node was
    /// chosen (else it may be a connection to the node that failed).
    pub(super) fn is_fresh(&self, age: Duration) -> bool {
        let opened_ms = (self.epoch.elapsed().saturating_sub(age)).as_millis() as u64;
        opened_ms >= self.switched_at_ms.load(Ordering::SeqCst)
    }

    /// Probe the current node for as long as the returned task runs; switch the pool
    /// to the first healthy node when it fails.
    pub(super) fn monitor(self: Arc<Self>, pool: MySqlPool) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(FAILOVER_PROBE_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let now = self.current.load(Ordering::SeqCst);
                if healthy(&self.hosts[now]).await {
                    continue;
                }
                let Some(next) = self.first_healthy(Some(now)).await else {
                    tracing::warn!(node = %self.name(now), "database node down and no other node is healthy");
                    continue;
                };
                pool.set_connect_options(self.hosts[next].clone());
                self.switched_at_ms
                    .store(self.epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
                self.current.store(next, Ordering::SeqCst);
                metrics::counter!("factledger_db_failovers_total").increment(1);
                tracing::warn!(from = %self.name(now), to = %self.name(next), "database failover");
            }
        })
    }
}

/// A node is healthy when it takes a login within the probe timeout and, on Galera,
/// is ready and synced.
async fn healthy(options: &MySqlConnectOptions) -> bool {
    let probe = async {
        let mut conn = options.clone().connect().await.ok()?;
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state_comment')",
        )
        .fetch_all(&mut conn)
        .await
        .ok()?;
        let _ = conn.close().await;
        Some(rows.iter().all(|(name, value)| match name.as_str() {
            "wsrep_ready" => value.eq_ignore_ascii_case("ON"),
            _ => value.eq_ignore_ascii_case("Synced"),
        }))
    };
    tokio::time::timeout(Duration::from_millis(FAILOVER_PROBE_TIMEOUT_MS), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::host_urls;

    #[test]
    fn a_host_list_becomes_one_url_per_host() {
        assert_eq!(
            host_urls("mysql://u:p@a:1,b:2, c:3/db?ssl-mode=disabled"),
            vec![
                "mysql://u:p@a:1/db?ssl-mode=disabled",
                "mysql://u:p@b:2/db?ssl-mode=disabled",
                "mysql://u:p@c:3/db?ssl-mode=disabled",
            ]
        );
        assert_eq!(
            host_urls("mysql://a:1,b:2"),
            vec!["mysql://a:1", "mysql://b:2"]
        );
        assert_eq!(host_urls("mysql://u@a:1/db"), vec!["mysql://u@a:1/db"]);
    }
}
