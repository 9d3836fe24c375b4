//! F10 (issue 14): MariaDB connections over TLS.
//!
//! The MariaDB tests need a server with a certificate: `tools/test.sh` (through
//! `tools/mariadb-tls.sh`) gives the test server a self-signed CA and exports its path
//! as `FACTLEDGER_TEST_MYSQL_TLS_CA`. Without that variable they print why and pass
//! without checking anything. The refusal of a server that offers no TLS needs no
//! server: a listener plays a MySQL greeting without the SSL capability.

use crate::common;

use common::{Backend, TestDb};
use factledger::infra::db::Db;
use factledger::runtime::bus::CommandBus;
use factledger_aggregates::wallet::Wallet;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The CA that signed the test server's certificate, or `None` (with a message) when
/// the server was not configured for TLS.
fn test_ca() -> Option<String> {
    match std::env::var("FACTLEDGER_TEST_MYSQL_TLS_CA") {
        Ok(ca) if !ca.is_empty() => Some(ca),
        _ => {
            eprintln!(
                "skipped: FACTLEDGER_TEST_MYSQL_TLS_CA is not set \
                 (run tools/test.sh, or tools/mariadb-tls.sh and export it)"
            );
            None
        }
    }
}

/// The cipher of the session one pooled connection of `db` has; empty without TLS.
async fn session_cipher(db: &Db) -> String {
    let Db::Mysql(pool) = db else {
        panic!("a MariaDB database was opened")
    };
    let (_, cipher): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(pool)
        .await
        .expect("read Ssl_cipher");
    cipher
}

/// Open the test database again with `params` added to its URL, run a wallet command
/// through the store, and return the session cipher of the store's pool.
async fn command_over(db: &TestDb, params: &str) -> String {
    let url = format!("{}?{params}", db.url);
    let database = factledger::infra::store::open(&url)
        .await
        .unwrap_or_else(|e| panic!("open the store with {params}: {e:#}"));
    let bus = CommandBus::<Wallet>::start(database.store.clone());
    common::run(
        &bus,
        "wallet-tls",
        json!({"type": "Open", "user_id": "user-tls", "currency": "IDR"}),
    )
    .await;
    let events = common::scalar(
        &database.db,
        "SELECT COUNT(*) FROM events WHERE aggregate_id = 'wallet-tls'",
    )
    .await;
    assert!(events > 0, "the command's events were stored");
    session_cipher(&database.db).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_ssl_mode_required_runs_commands_over_an_encrypted_session() {
    let Some(_) = test_ca() else { return };
    let db = TestDb::new(Backend::Mysql).await;
    let cipher = command_over(&db, "ssl-mode=required").await;
    assert!(
        !cipher.is_empty(),
        "ssl-mode=required gave a session without TLS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_verify_ca_with_the_servers_ca_runs_commands_over_an_encrypted_session() {
    let Some(ca) = test_ca() else { return };
    let db = TestDb::new(Backend::Mysql).await;
    let cipher = command_over(&db, &format!("ssl-mode=verify_ca&ssl-ca={ca}")).await;
    assert!(
        !cipher.is_empty(),
        "ssl-mode=verify_ca gave a session without TLS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_verify_identity_accepts_the_address_the_certificate_names() {
    let Some(ca) = test_ca() else { return };
    let db = TestDb::new(Backend::Mysql).await;
    assert!(
        db.url.contains("@127.0.0.1:"),
        "the test server is reached as 127.0.0.1, which its certificate names: {}",
        db.url
    );
    let cipher = command_over(&db, &format!("ssl-mode=verify_identity&ssl-ca={ca}")).await;
    assert!(!cipher.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_verify_ca_refuses_a_server_whose_ca_is_not_trusted() {
    let Some(_) = test_ca() else { return };
    let db = TestDb::new(Backend::Mysql).await;
    // No ssl-ca: the self-signed test CA is in no trust store, so verification must
    // fail rather than fall back to an unverified session.
    let url = format!("{}?ssl-mode=verify_ca", db.url);
    let err = match factledger::infra::store::open(&url).await {
        Ok(_) => panic!("verify_ca accepted a certificate from an untrusted CA"),
        Err(e) => format!("{e:#}"),
    };
    eprintln!("refused as expected: {err}");
    assert!(err.contains("ssl-mode=verify_ca"), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_preferred_is_the_default_and_uses_tls_when_the_server_offers_it() {
    let Some(_) = test_ca() else { return };
    let db = TestDb::new(Backend::Mysql).await;
    let database = db.database().await;
    assert!(
        !session_cipher(&database.db).await.is_empty(),
        "a URL without ssl-mode should still encrypt when the server offers TLS"
    );
}

/// The greeting MySQL 8.0.18 sends (sqlx's own handshake test vector), with the SSL
/// capability bit (0x0800) cleared: a server that cannot do TLS.
const GREETING_WITHOUT_TLS: &[u8] = b"\n8.0.18\x00\x19\x00\x00\x00\x114aB0c\x06g\x00\xff\xf7\xff\x02\x00\xff\xc7\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00tL\x03s\x0f[4\rl4. \x00caching_sha2_password\x00";

/// A listener that greets each connection as a server without TLS and then waits for
/// the client to hang up.
async fn server_without_tls() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let len = GREETING_WITHOUT_TLS.len().to_le_bytes();
                let header = [len[0], len[1], len[2], 0];
                let _ = socket.write_all(&header).await;
                let _ = socket.write_all(GREETING_WITHOUT_TLS).await;
                let mut rest = Vec::new();
                let _ = socket.read_to_end(&mut rest).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn f10_ssl_mode_required_refuses_a_server_without_tls_with_a_clear_error() {
    let addr = server_without_tls().await;
    let url = format!("mysql://app:secret@{addr}/ledger?ssl-mode=required");
    let opened = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        factledger::infra::store::open(&url),
    )
    .await
    .expect("the refusal is immediate, not a hang");
    let err = match opened {
        Ok(_) => panic!("ssl-mode=required connected to a server without TLS"),
        Err(e) => format!("{e:#}"),
    };
    eprintln!("refused as expected: {err}");
    assert!(err.contains("server does not support TLS"), "{err}");
    assert!(err.contains("ssl-mode=required"), "{err}");
    assert!(
        !err.contains("secret"),
        "the error must not show the password: {err}"
    );
}
