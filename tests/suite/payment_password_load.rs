//! Payment passwords under load (issue 32 item 4): argon2 work is bounded by a
//! semaphore sized to the cores, so a burst of password changes neither grows the
//! service's memory by a hash's 19 MiB per request nor queues without end; what finds
//! no permit in time is answered 503 `BUSY` with `Retry-After`. (The atomic lockout
//! under 40 concurrent attempts is `payouts::password::tests` in the library.)

use crate::common;

use common::serve_child::ServeChild;
use common::{Backend, TestDb};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Concurrent `PUT …/payment-password` of the burst (the issue measured 100).
const BURST: usize = 100;
/// How much above idle the service's resident memory may go under the burst.
const RSS_GROWTH_MAX_KB: u64 = 200 * 1024;
/// Longest the burst may take to be answered.
const BURST_WAIT_MAX: Duration = Duration::from_secs(120);

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_password_sets_stay_within_200_mb_of_idle_rss() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    // The default argon2 cost (19 MiB a hash): no FACTLEDGER_PASSWORD_COST.
    let serve = ServeChild::start(dir.path(), &db.url, &["--settlement-every", "off"], &[]);
    let admin = std::fs::read_to_string(dir.path().join("factledger-admin.key"))
        .unwrap()
        .trim()
        .to_owned();
    let client = reqwest::Client::new();
    let put = |i: usize| {
        client
            .put(format!("{}/v1/users/u-{i}/payment-password", serve.base))
            .bearer_auth(&admin)
            .json(&serde_json::json!({"password": "correct horse"}))
            .send()
    };
    // One hash first, so the idle figure includes argon2's code and one run's pages.
    let first = put(0).await.unwrap();
    assert_eq!(first.status(), 204);
    let idle = rss_kb(serve.pid);
    assert!(idle > 0, "no VmRSS for pid {}", serve.pid);
    let (peak, done) = (
        Arc::new(AtomicU64::new(idle)),
        Arc::new(AtomicBool::new(false)),
    );
    let sampler = {
        let (peak, done, pid) = (peak.clone(), done.clone(), serve.pid);
        tokio::spawn(async move {
            let deadline = Instant::now() + BURST_WAIT_MAX;
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                peak.fetch_max(rss_kb(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let answers = tokio::time::timeout(
        BURST_WAIT_MAX,
        futures::future::join_all((1..=BURST).map(|i| async move {
            let r = put(i).await.unwrap();
            let retry_after = r.headers().get("retry-after").cloned();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            (status, body, retry_after)
        })),
    )
    .await
    .expect("the burst is answered in time");
    done.store(true, Ordering::SeqCst);
    sampler.await.unwrap();
    let peak = peak.load(Ordering::SeqCst).max(rss_kb(serve.pid));
    let set = answers.iter().filter(|(s, _, _)| *s == 204).count();
    for (status, body, retry_after) in &answers {
        if *status != 204 {
            assert_eq!(
                (*status, body["code"].as_str()),
                (503, Some("BUSY")),
                "{body}"
            );
            assert_eq!(retry_after.as_ref().map(|v| v.to_str().unwrap()), Some("1"));
        }
    }
    assert!(set > 0, "no password was set");
    assert!(
        peak.saturating_sub(idle) <= RSS_GROWTH_MAX_KB,
        "RSS grew from {idle} kB to {peak} kB under {BURST} concurrent sets ({set} set)"
    );
}
