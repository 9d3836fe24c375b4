//! API key rows are sealed with the integrity key file (issue 32 item 5): a row
//! written into `api_keys` by anyone without the key file — inserted, or an existing
//! key's role raised — is refused at authentication; emptying `api_keys` on a
//! database with history never makes `serve` mint a new admin key; and the keys that
//! existed before seals did are sealed once, by the process that migrates.

use crate::common;

use common::app::spawn_app;
use common::TestDb;
use factledger::infra::auth::hash_key;
use factledger_projections::table::Cell;
use serde_json::json;
use std::time::Duration;

/// Longest a test waits for a change to pass the key cache.
const CACHE_WAIT_MAX: Duration = Duration::from_secs(10);

async fn status_with(app: &common::app::App, secret: &str) -> u16 {
    app.client
        .get(format!("{}/v1/wallets/w-none", app.base))
        .bearer_auth(secret)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

/// Wait (bounded) until `secret` gets `want`: a key cached before a change keeps
/// working for up to the cache's TTL.
async fn until_status(app: &common::app::App, secret: &str, want: u16) {
    common::eventually(CACHE_WAIT_MAX, || async {
        status_with(app, secret).await == want
    })
    .await
    .unwrap_or_else(|_| panic!("still not {want} after {CACHE_WAIT_MAX:?}"));
}

fn key_id_of(secret: &str) -> String {
    secret
        .split('_')
        .nth(1)
        .expect("flk_<id>_<secret>")
        .to_owned()
}

both_backends!(
    a_key_row_written_without_the_key_file_is_refused,
    |db: TestDb| async move {
        use factledger::infra::auth::Role;
        let app = spawn_app(&db).role_keys(&[Role::Auditor]).await;
        let sql = app.state.db.dialect();
        // An admin row inserted straight into the table: unsealed, and with a made-up seal.
        for (n, mac) in [(1, None), (2, Some("c-00000000:00"))] {
            let secret = format!("flk_forged{n}_{}", "ab".repeat(32));
            app.state
                .db
                .exec(
                    "INSERT INTO api_keys (key_id, key_hash, role, created_at, mac) \
                     VALUES (?, ?, 'admin', ?, ?)",
                    &[
                        Cell::text(format!("forged{n}")),
                        Cell::text(hash_key(&secret)),
                        sql.datetime(&chrono::Utc::now()),
                        Cell::opt_text(mac),
                    ],
                )
                .await
                .unwrap();
            assert_eq!(status_with(&app, &secret).await, 401, "{mac:?}");
        }
        // Nor do they hold off `keys bootstrap`: only the sealed admin key counts.
        assert_eq!(app.keys.count_active_admins().await.unwrap(), 1);
        // An auditor key raised to admin in the table is refused altogether.
        assert_eq!(status_with(&app, &app.auditor).await, 404);
        app.state
            .db
            .exec(
                "UPDATE api_keys SET role = 'admin' WHERE key_id = ?",
                &[Cell::text(key_id_of(&app.auditor))],
            )
            .await
            .unwrap();
        until_status(&app, &app.auditor, 401).await;
        // The keys made by factledger still work.
        assert_eq!(status_with(&app, &app.admin).await, 404);
    }
);

both_backends!(
    emptying_api_keys_on_a_database_with_history_mints_no_admin_key,
    |db: TestDb| async move {
        let app = spawn_app(&db).settlement_off().await;
        let (status, body) = app
            .post(
                "/v1/wallets/w-1/commands",
                json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        drop(app);
        let factledger_db = factledger::infra::store::open(&db.url).await.unwrap();
        factledger_db
            .db
            .exec("DELETE FROM api_keys", &[])
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let started = factledger::server::start_with(
            &db.url,
            "ID",
            dir.path(),
            factledger::server::ServeOptions::default(),
        )
        .await
        .expect("serve starts without keys");
        assert!(started.admin_key.is_none(), "serve minted an admin key");
        assert!(!dir
            .path()
            .join(factledger::infra::auth::ADMIN_KEY_FILE)
            .exists());
        assert_eq!(factledger_db.keys.count_ever().await.unwrap(), 0);
        // `keys bootstrap` (an operator, with the key file) is the way back.
        let key = factledger_db
            .keys
            .bootstrap()
            .await
            .unwrap()
            .expect("a new admin key");
        assert!(started
            .state
            .keys
            .authenticate(&key.secret)
            .await
            .unwrap()
            .is_some());
    }
);

both_backends!(
    keys_made_before_seals_are_sealed_by_the_migrating_process_and_only_those,
    |db: TestDb| async move {
        let app = spawn_app(&db).settlement_off().await;
        let admin = app.admin.clone();
        drop(app);
        // The database as it was before migration 25: no seal column.
        let old = factledger::infra::store::open(&db.url).await.unwrap();
        let rollback = [
            "ALTER TABLE api_keys DROP COLUMN mac",
            "DELETE FROM _sqlx_migrations WHERE version = 25",
        ];
        for sql in rollback {
            old.db.exec(sql, &[]).await.unwrap();
        }
        drop(old);
        // The upgrade: this open applies 25 and seals the key that existed.
        let upgraded = factledger::infra::store::open(&db.url).await.unwrap();
        assert!(upgraded.keys.authenticate(&admin).await.unwrap().is_some());
        // A row inserted afterwards without a seal is refused, and a later open
        // (nothing to migrate) does not seal it.
        let secret = format!("flk_late_{}", "cd".repeat(32));
        upgraded
            .db
            .exec(
                "INSERT INTO api_keys (key_id, key_hash, role, created_at) VALUES ('late', ?, 'admin', ?)",
                &[
                    Cell::text(hash_key(&secret)),
                    upgraded.db.dialect().datetime(&chrono::Utc::now()),
                ],
            )
            .await
            .unwrap();
        assert!(upgraded.keys.authenticate(&secret).await.unwrap().is_none());
        let again = factledger::infra::store::open(&db.url).await.unwrap();
        assert!(again.keys.authenticate(&secret).await.unwrap().is_none());
        assert!(again.keys.authenticate(&admin).await.unwrap().is_some());
    }
);
