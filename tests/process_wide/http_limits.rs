//! Issue 14, HTTP limits and leak-free errors (F1, F8, F11): a real server on an
//! ephemeral port with small limits, both backends. Every loop is bounded.

use crate::common;

use common::TestDb;
use factledger::infra::auth::Role;
use factledger::runtime::http::limits::HttpLimits;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The running service (`common::app`), with this file's request helpers.
struct App(common::app::App);

impl std::ops::Deref for App {
    type Target = common::app::App;

    fn deref(&self) -> &common::app::App {
        &self.0
    }
}

async fn spawn_app(db: &TestDb, http_limits: HttpLimits) -> App {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    App(common::spawn_app(db)
        .settlement_off()
        .http_limits(http_limits)
        .client(client)
        .await)
}

impl App {
    async fn get(&self, path: &str, key: Option<&str>) -> reqwest::Response {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send().await.expect("request")
    }

    async fn metrics(&self) -> String {
        let r = self.get("/metrics", Some(&self.admin)).await;
        assert_eq!(r.status(), 200);
        r.text().await.expect("metrics text")
    }

    async fn key(&self, role: Role) -> String {
        self.keys.create(role).await.expect("create key").secret
    }
}

/// Assert a problem response and return its body.
async fn problem(r: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(r.status().as_u16(), status);
    let ct = r.headers().get("content-type").cloned();
    assert_eq!(
        ct.as_ref().and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    let body: Value = r.json().await.expect("problem JSON");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status, "{body}");
    body
}

/// The HTTP metric lines the spam below could touch (the recorder is process-wide:
/// other tests of this binary add series of their own routes meanwhile).
fn spam_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("factledger_http_"))
        .filter(|l| l.contains(r#"route="/health""#) || l.contains(r#"route="unmatched""#))
        .collect()
}

/// Their distinct label sets, values stripped.
fn label_sets(text: &str) -> BTreeSet<String> {
    spam_lines(text)
        .iter()
        .filter_map(|l| l.split_once(' ').map(|(labels, _)| labels.to_owned()))
        .collect()
}

fn spam_bytes(text: &str) -> usize {
    spam_lines(text).iter().map(|l| l.len() + 1).sum()
}

// F1 --------------------------------------------------------------------------------

both_backends!(
    f1_unknown_http_methods_and_unmatched_paths_do_not_grow_metrics,
    |db: TestDb| async move {
        let app = spawn_app(&db, HttpLimits::default()).await;
        let other = |i: usize| reqwest::Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
        // Warm every label set the spam below can reach, then take the baseline.
        let warm = app.client.request(other(0), format!("{}/health", app.base));
        assert_eq!(warm.send().await.unwrap().status(), 405);
        assert_eq!(app.get("/health", None).await.status(), 200);
        assert_eq!(app.get("/nowhere-0", None).await.status(), 404);
        let warm = app
            .client
            .request(other(0), format!("{}/nowhere", app.base));
        assert_eq!(warm.send().await.unwrap().status(), 404);
        let _ = app.metrics().await;
        let before = app.metrics().await;

        for i in 1..=300 {
            let r = app.client.request(other(i), format!("{}/health", app.base));
            assert_eq!(r.send().await.unwrap().status(), 405);
            let path = format!("/nowhere-{i}/{i}");
            assert_eq!(app.get(&path, None).await.status(), 404);
            let r = app.client.request(other(i), format!("{}{path}", app.base));
            assert_eq!(r.send().await.unwrap().status(), 404);
        }
        let after = app.metrics().await;

        let (sets_before, sets_after) = (label_sets(&before), label_sets(&after));
        assert!(!sets_before.is_empty());
        assert_eq!(sets_before, sets_after, "label sets changed");
        assert!(
            after.contains(r#"method="OTHER",route="/health",status="405""#),
            "{after}"
        );
        assert!(after.contains(r#"route="unmatched""#), "{after}");
        assert!(
            !after.contains("X17") && !after.contains("nowhere"),
            "{after}"
        );
        // Only counter values and histogram sums moved: a few bytes, not 600 series.
        let (bytes_before, bytes_after) = (spam_bytes(&before), spam_bytes(&after));
        assert!(
            bytes_after < bytes_before + 512,
            "their lines grew from {bytes_before} to {bytes_after} bytes"
        );
    }
);

both_backends!(
    f1_metrics_on_the_main_listener_need_an_admin_operator_or_auditor_key,
    |db: TestDb| async move {
        let app = spawn_app(&db, HttpLimits::default()).await;
        problem(app.get("/metrics", None).await, 401, "UNAUTHORIZED").await;
        let service = app.key(Role::Service).await;
        problem(app.get("/metrics", Some(&service)).await, 403, "FORBIDDEN").await;
        for role in [Role::Admin, Role::Operator, Role::Auditor] {
            let key = app.key(role).await;
            let r = app.get("/metrics", Some(&key)).await;
            assert_eq!(r.status(), 200, "{role}");
            let text = r.text().await.unwrap();
            assert!(text.contains("factledger_http_requests_total"), "{text}");
        }
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_the_metrics_listener_serves_metrics_alone_without_a_key() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let app = spawn_app(&db, HttpLimits::default()).await;
    assert_eq!(app.get("/health", None).await.status(), 200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(factledger::server::serve_metrics(
        factledger::server::metrics_handle(),
        listener,
        HttpLimits::default(),
        std::future::pending(),
    ));
    let r = app
        .client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("factledger_http_requests_total"), "{text}");
    // Nothing else is served there.
    let r = app
        .client
        .get(format!("{base}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    task.abort();
}

// F8 --------------------------------------------------------------------------------

/// Read until the peer closes (EOF or reset) or `within` passes; how long it took,
/// and every byte read.
async fn wait_closed(stream: &mut TcpStream, within: Duration) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < within {
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (Some(started.elapsed()), seen),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    (None, seen)
}

both_backends!(
    f8_a_slow_header_client_is_disconnected_by_the_header_timeout,
    |db: TestDb| async move {
        let limits = HttpLimits {
            header_read_timeout_ms: 300,
            idle_timeout_ms: 60_000,
            ..HttpLimits::default()
        };
        let app = spawn_app(&db, limits).await;
        let mut slow = TcpStream::connect(app.addr).await.unwrap();
        slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let mut closed = None;
        // One header line every 50 ms, for at most 3 s: the head never completes.
        for i in 0..60 {
            if slow
                .write_all(format!("X-Slow-{i}: a\r\n").as_bytes())
                .await
                .is_err()
            {
                closed = Some(started.elapsed());
                break;
            }
            let (gone, bytes) = wait_closed(&mut slow, Duration::from_millis(50)).await;
            assert!(bytes.is_empty(), "{}", String::from_utf8_lossy(&bytes));
            if gone.is_some() {
                closed = Some(started.elapsed());
                break;
            }
        }
        let closed = closed.expect("the trickling client was never disconnected");
        assert!(
            closed >= Duration::from_millis(250),
            "closed after {closed:?}"
        );
        // A client that sends its head at once is served.
        assert_eq!(app.get("/health", None).await.status(), 200);
    }
);

both_backends!(
    f8_idle_connections_are_closed_after_the_idle_timeout,
    |db: TestDb| async move {
        let limits = HttpLimits {
            header_read_timeout_ms: 60_000,
            idle_timeout_ms: 300,
            ..HttpLimits::default()
        };
        let app = spawn_app(&db, limits).await;
        // A connection that never sends anything.
        let mut silent = TcpStream::connect(app.addr).await.unwrap();
        // A keep-alive connection after one answered request.
        let mut kept = TcpStream::connect(app.addr).await.unwrap();
        kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (gone, answer) = wait_closed(&mut kept, Duration::from_secs(5)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let after_answer = gone.expect("the idle keep-alive connection stayed open");
        assert!(after_answer < Duration::from_secs(3), "{after_answer:?}");
        let (gone, bytes) = wait_closed(&mut silent, Duration::from_secs(3)).await;
        assert!(gone.is_some(), "the silent connection stayed open");
        assert!(bytes.is_empty());
    }
);

both_backends!(
    f8_connections_over_the_cap_get_503_problem_json,
    |db: TestDb| async move {
        let limits = HttpLimits {
            connections_max: 2,
            idle_timeout_ms: 30_000,
            ..HttpLimits::default()
        };
        let app = spawn_app(&db, limits).await;
        let held = [
            TcpStream::connect(app.addr).await.unwrap(),
            TcpStream::connect(app.addr).await.unwrap(),
        ];
        tokio::time::sleep(Duration::from_millis(100)).await;
        let fresh = reqwest::Client::new();
        let r = fresh
            .get(format!("{}/health", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let body = problem(r, 503, "TOO_MANY_CONNECTIONS").await;
        assert!(body["detail"].is_string(), "{body}");
        // Closing one held connection frees its place (bounded wait for the server
        // to see the close).
        drop(held);
        let mut status = 0;
        for _ in 0..40 {
            let fresh = reqwest::Client::new();
            status = fresh
                .get(format!("{}/health", app.base))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0);
            if status == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(status, 200);
    }
);

/// Hold the database's write lock from another connection until dropped.
enum Lock {
    Sqlite(sqlx::SqliteConnection),
    Mysql(sqlx::MySqlConnection),
}

impl Lock {
    async fn release(self) {
        match self {
            Lock::Sqlite(mut c) => sqlx::raw_sql("ROLLBACK").execute(&mut c).await.map(drop),
            Lock::Mysql(mut c) => sqlx::raw_sql("ROLLBACK").execute(&mut c).await.map(drop),
        }
        .expect("release the lock");
    }
}

async fn lock_database(db: &TestDb) -> Lock {
    use sqlx::Connection;
    match db.backend {
        common::Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql("BEGIN IMMEDIATE")
                .execute(&mut c)
                .await
                .unwrap();
            Lock::Sqlite(c)
        }
        common::Backend::Mysql => {
            let mut c = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql(
                "BEGIN; SELECT last_position FROM event_sequence WHERE id = 1 FOR UPDATE",
            )
            .execute(&mut c)
            .await
            .unwrap();
            Lock::Mysql(c)
        }
    }
}

both_backends!(
    f8_a_command_stuck_on_a_locked_database_hits_the_request_timeout,
    |db: TestDb| async move {
        let limits = HttpLimits {
            request_timeout_ms: 300,
            ..HttpLimits::default()
        };
        let app = spawn_app(&db, limits).await;
        let lock = lock_database(&db).await;
        let started = Instant::now();
        let r = app
            .client
            .post(format!("{}/v1/wallets/w-1/commands", app.base))
            .bearer_auth(&app.admin)
            .header("Idempotency-Key", "open-w-1")
            .body(r#"{"type":"Open","user_id":"u-1","currency":"IDR"}"#)
            .send()
            .await
            .expect("an answer before the client's 5 s timeout");
        let took = started.elapsed();
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let body = problem(r, 503, "REQUEST_TIMEOUT").await;
        assert!(
            body["detail"].as_str().unwrap().contains("Idempotency-Key"),
            "{body}"
        );
        assert!(took < Duration::from_secs(3), "answered after {took:?}");
        lock.release().await;
    }
);

both_backends!(
    f8_a_key_over_its_rate_limit_gets_429_with_retry_after,
    |db: TestDb| async move {
        let limits = HttpLimits {
            rate_limit_per_key_rps: 1,
            rate_limit_per_key_burst: 3,
            ..HttpLimits::default()
        };
        let app = spawn_app(&db, limits).await;
        let auditor = app.key(Role::Auditor).await;
        for _ in 0..3 {
            assert_eq!(
                app.get("/v1/projections", Some(&app.admin)).await.status(),
                200
            );
        }
        let r = app.get("/v1/projections", Some(&app.admin)).await;
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1")
        );
        problem(r, 429, "RATE_LIMITED").await;
        // Another key has its own bucket; unauthenticated routes are not limited.
        assert_eq!(
            app.get("/v1/projections", Some(&auditor)).await.status(),
            200
        );
        for _ in 0..5 {
            assert_eq!(app.get("/health", None).await.status(), 200);
        }
        // The bucket refills at 1 token a second (bounded wait).
        let mut status = 0;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            status = app
                .get("/v1/projections", Some(&app.admin))
                .await
                .status()
                .as_u16();
            if status == 200 {
                break;
            }
        }
        assert_eq!(status, 200);
    }
);

// F11 -------------------------------------------------------------------------------

both_backends!(
    f11_a_500_carries_an_error_id_and_no_internal_text,
    |db: TestDb| async move {
        let app = spawn_app(&db, HttpLimits::default()).await;
        assert_eq!(
            app.get("/v1/projections", Some(&app.admin)).await.status(),
            200
        );
        // A key never presented, so its lookup is not served from the cache of
        // accepted keys (`infra::auth`).
        let fresh = app.key(Role::Admin).await;
        // Sabotage: the key lookup's table disappears, so authenticating fails inside.
        db.store
            .execute_raw("ALTER TABLE api_keys RENAME TO api_keys_moved_away")
            .await
            .expect("rename api_keys");
        let r = app.get("/v1/projections", Some(&fresh)).await;
        let body = problem(r, 500, "INTERNAL").await;
        let id = body["error_id"].as_str().expect("error_id");
        assert_eq!(id.len(), 32, "{body}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{body}");
        assert!(body["detail"].as_str().unwrap().contains(id), "{body}");
        let text = body.to_string().to_ascii_lowercase();
        for leak in [
            "api_keys",
            "no such table",
            "doesn't exist",
            "key lookup",
            "sqlx",
        ] {
            assert!(!text.contains(leak), "{leak:?} leaked: {body}");
        }
    }
);

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f11_sqlite_database_files_are_created_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::new(common::Backend::Sqlite).await;
    // The migrations wrote through this still-open pool: the WAL and its index exist.
    assert!(common::scalar(&db.database().await.db, "SELECT COUNT(*) FROM events").await >= 0);
    let path = db.url.trim_start_matches("sqlite://").to_owned();
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{path}{suffix}");
        let mode = std::fs::metadata(&file)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file} has mode {:o}", mode & 0o777);
    }
}
