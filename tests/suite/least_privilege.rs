//! Least privilege at the database (issue 14 item 3, finding F3's TRUNCATE): migrations
//! run as an owner; `serve` runs as the user `tools/db-grant.sh` makes, which may
//! append and read events but never UPDATE, DELETE, TRUNCATE or DROP them, nor touch
//! their triggers — and the service still does all its work: commands, projections,
//! a full rebuild with its shadow tables. MariaDB only (SQLite has no users; there
//! the REPLACE path is closed by triggers, see tests/suite/integrity.rs).

use crate::common;

use common::{run, Backend, TestDb};
use factledger::runtime::rebuild::{self, RebuildOptions, Scope};
use serde_json::json;
use sqlx::Connection;

fn grant(database: &str, user: &str, password: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/db-grant.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args([database, user, password])
        .output()
        .expect("bash runs tools/db-grant.sh (the mariadb client must be installed)");
    assert!(
        out.status.success(),
        "db-grant.sh failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn as_root(sql: &str) {
    let mut conn = sqlx::MySqlConnection::connect(&common::mysql_server_url())
        .await
        .expect("root connection");
    sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn least_privilege_serve_runs_as_a_user_that_cannot_truncate_or_alter_events() {
    let db = TestDb::new(Backend::Mysql).await; // migrated by root, the owner here
    let database = db.url.rsplit('/').next().unwrap().to_owned();
    let user = format!(
        "fl_svc_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let password = "svc-'pw\\1";
    grant(&database, &user, password);
    let server = common::mysql_server_url();
    let (scheme, rest) = server.split_once("://").unwrap();
    let host = rest
        .split_once('@')
        .map_or(rest, |(_, h)| h)
        .trim_end_matches('/');
    let encoded: String = password
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let service_url = format!("{scheme}://{user}:{encoded}@{host}/{database}");

    // The service starts under that user (nothing to migrate) and does its work.
    let started = common::spawn_app_at(&service_url).settlement_off().await;
    let wallets = &started.state.wallets;
    run(
        wallets,
        "w-1",
        json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
    )
    .await;
    run(
        wallets,
        "w-1",
        json!({"type": "CreditPending", "ref_type": "COMMISSION",
        "ref_id": "c-1", "amount_minor": 700}),
    )
    .await;
    // (The service's own projector tasks run the projections meanwhile.)
    let p = &started.state.db;
    let begun = rebuild::begin(&started.state.store, p, "wallet", Scope::Full, "svc")
        .await
        .expect("a full rebuild starts as the service user");
    let options = RebuildOptions {
        flush_events: 10,
        pause_between_batches: None,
    };
    rebuild::run(&started.state.store, p, &begun, &options, &|_| {})
        .await
        .expect("a full rebuild (shadow tables, rename) runs as the service user");

    // What the service user may never do to the log.
    let mut svc = sqlx::MySqlConnection::connect(&service_url).await.unwrap();
    for sql in [
        "TRUNCATE TABLE events",
        "DELETE FROM events",
        "UPDATE events SET payload = '{}'",
        "REPLACE INTO events SELECT * FROM events WHERE global_position = 1",
        "DROP TRIGGER events_refuse_delete",
        "DROP TABLE events",
        "ALTER TABLE events ADD COLUMN x INT",
        "DELETE FROM chain_anchors",
    ] {
        let refused = sqlx::raw_sql(sql).execute(&mut svc).await;
        // (The appender needs UPDATE on the sequence row; a rewind of it is caught by
        // the anchors and the sequence check of `verify`, see tests/suite/integrity.rs.)
        let text = match refused {
            Ok(_) => panic!("{sql} must be refused to the service user"),
            Err(e) => e.to_string(),
        };
        assert!(text.contains("denied"), "{sql}: {text}");
    }
    assert_eq!(started.state.store.head_position().await.unwrap(), 2);
    drop(svc);
    drop(started);
    as_root(&format!("DROP USER '{user}'@'%'")).await;
}
