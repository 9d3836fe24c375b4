//! Scope and least privilege (issue 14 item 6): idempotency keys per API key (F6),
//! operator actions kept from the service role (F7), no new admin key once keys have
//! existed (F9), admin actions as audited events. Both backends.

use crate::common;

use common::app::{spawn_roles, Reply, RoleApp};
use common::TestDb;
use reqwest::Method;

async fn command(app: &RoleApp, key: &str, wallet: &str, body: &str, idem: &str) -> Reply {
    app.send(
        Method::POST,
        &format!("/v1/wallets/{wallet}/commands"),
        Some(key),
        Some(body),
        &[("idempotency-key", idem)],
    )
    .await
}

fn replayed(r: &Reply) -> bool {
    r.headers.get("idempotent-replayed").is_some()
}

both_backends!(
    f6_the_same_idempotency_key_from_two_api_keys_is_two_commands,
    |db: TestDb| async move {
        let app = spawn_roles(&db).await;
        let first = r#"{"type":"Open","user_id":"u-a","currency":"IDR"}"#;
        let second = r#"{"type":"Open","user_id":"u-b","currency":"USD"}"#;
        // Two callers, one key, different bodies: both run, neither blocks the other.
        let a = command(&app, &app.service, "w-a", first, "shared-key").await;
        assert_eq!(a.status.as_u16(), 200, "{}", a.body);
        assert!(!replayed(&a));
        let b = command(&app, &app.operator, "w-b", second, "shared-key").await;
        assert_eq!(b.status.as_u16(), 200, "{}", b.body);
        assert!(!replayed(&b), "{}", b.body);
        assert_ne!(a.body["position"], b.body["position"]);
        assert_eq!(b.body["wallet_id"], "w-b");
        assert_eq!(b.body["events"][0]["payload"]["currency"], "USD");
        let actor_a = a.body["events"][0]["metadata"]["actor"].clone();
        let actor_b = b.body["events"][0]["metadata"]["actor"].clone();
        assert_ne!(actor_a, actor_b, "{actor_a} {actor_b}");

        // Each caller's replay returns its own stored response.
        let again = command(&app, &app.service, "w-a", first, "shared-key").await;
        assert_eq!(again.status.as_u16(), 200, "{}", again.body);
        assert!(replayed(&again));
        assert_eq!(again.body, a.body);
        let again = command(&app, &app.operator, "w-b", second, "shared-key").await;
        assert!(replayed(&again));
        assert_eq!(again.body, b.body);

        // A caller reusing its own key for another body is still refused.
        let r = command(&app, &app.service, "w-b", second, "shared-key").await;
        r.problem(422, "IDEMPOTENCY_KEY_REUSED", Some("Idempotency-Key"));
        // Exactly two wallets were opened, once each.
        for w in ["w-a", "w-b"] {
            let r = app
                .get(&format!("/v1/streams/wallet/{w}/events"), &app.auditor)
                .await;
            assert_eq!(
                r.body["events"].as_array().map(Vec::len),
                Some(1),
                "{}",
                r.body
            );
        }
    }
);

/// Every operator action, as a service key would send it.
const OPERATOR_ACTIONS: &[(&str, &str)] = &[
    (
        "/v1/orders/SHOPEE/o-1:correct-attribution",
        r#"{"new_owner_user_id":"u-2","reason":"wrong link"}"#,
    ),
    (
        "/v1/commissions/SHOPEE:o-1:CASHBACK:resolve",
        r#"{"reason":"refund recovered by hand"}"#,
    ),
    ("/v1/projections/wallet/rebuild", r#"{}"#),
    ("/v1/reconciliations", r#"{"repair":true}"#),
    ("/v1/jobs:retry", r#"{"codes":["X:1"]}"#),
    ("/v1/jobs:pause", r#"{"reason":"maintenance"}"#),
    ("/v1/jobs:resume", r#"{}"#),
    ("/v1/jobs/X:1:kick", r#"{}"#),
    (
        "/v1/bills:refresh",
        r#"{"scope_type":"STATION_MONTH","station_months":[{"station_id":1,"bill_month":"202601"}],"mode":"UNFINISHED"}"#,
    ),
];

both_backends!(
    f7_the_service_role_is_refused_operator_actions_naming_the_role,
    |db: TestDb| async move {
        let app = spawn_roles(&db).await;
        let head = app.store.head_position().await.unwrap();
        for (path, body) in OPERATOR_ACTIONS {
            let r = app.post(path, &app.service, body).await;
            r.problem(403, "FORBIDDEN", None);
            let detail = r.body["detail"].as_str().unwrap();
            assert!(
                detail.contains("operator or admin") && detail.contains("service"),
                "{path}: {detail}"
            );
        }
        // Nothing was done or recorded.
        assert_eq!(app.store.head_position().await.unwrap(), head);
        // A reconciliation that only compares stays open to the service role.
        let r = app
            .post("/v1/reconciliations", &app.service, r#"{"repair":false}"#)
            .await;
        assert_eq!(r.status.as_u16(), 202, "{}", r.body);
        // The operator may.
        let r = app
            .post("/v1/projections/wallet/rebuild", &app.operator, "{}")
            .await;
        assert_eq!(r.status.as_u16(), 202, "{}", r.body);
        let r = app
            .post("/v1/reconciliations", &app.operator, r#"{"repair":true}"#)
            .await;
        assert_eq!(r.status.as_u16(), 202, "{}", r.body);
        let r = app
            .post(
                "/v1/orders/SHOPEE/o-1:correct-attribution",
                &app.operator,
                r#"{"new_owner_user_id":"u-2","reason":"wrong link"}"#,
            )
            .await;
        // Past the role check: the order does not exist.
        assert_eq!(r.status.as_u16(), 404, "{}", r.body);
    }
);

/// The `factledger` binary against `url`, in `dir`.
fn cli(dir: &std::path::Path, url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .env("USER", "ops-tester")
        .arg("--database-url")
        .arg(url)
        .args(args)
        .output()
        .expect("run factledger")
}

both_backends!(
    f9_serve_mints_no_admin_key_once_keys_have_existed,
    |db: TestDb| async move {
        use factledger::infra::auth::{Role, ADMIN_KEY_FILE};
        let dir = tempfile::tempdir().unwrap();
        let first = factledger::server::start(&db.url, "ID", dir.path())
            .await
            .unwrap();
        let admin = first.admin_key.expect("the first start mints");
        let keys = first.state.keys.clone();
        let service = keys.create(Role::Service).await.unwrap();
        let file = dir.path().join(ADMIN_KEY_FILE);
        let text = std::fs::read_to_string(&file).unwrap();
        // Every key revoked: the table is not empty, only inactive.
        assert!(keys.revoke(&admin.key_id).await.unwrap());
        assert!(keys.revoke(&service.key_id).await.unwrap());
        assert_eq!(keys.count_active().await.unwrap(), 0);
        for key_dir in [dir.path(), tempfile::tempdir().unwrap().path()] {
            let again = factledger::server::start(&db.url, "ID", key_dir)
                .await
                .unwrap();
            assert!(again.admin_key.is_none(), "no admin key is minted");
        }
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            text,
            "file untouched"
        );
        assert_eq!(keys.list().await.unwrap().len(), 2);
        assert_eq!(keys.count_active().await.unwrap(), 0);
    }
);

both_backends!(
    f9_keys_bootstrap_mints_an_admin_key_only_when_no_admin_is_left,
    |db: TestDb| async move {
        let dir = tempfile::tempdir().unwrap();
        let first = factledger::server::start(&db.url, "ID", dir.path())
            .await
            .unwrap();
        let admin = first.admin_key.expect("the first start mints");
        let keys = first.state.keys.clone();
        // An unrevoked admin exists: refused, nothing created.
        let o = cli(dir.path(), &db.url, &["keys", "bootstrap"]);
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("unrevoked admin key exists"));
        assert_eq!(keys.list().await.unwrap().len(), 1);
        // No admin left (an operator key does not count).
        keys.create(factledger::infra::auth::Role::Operator)
            .await
            .unwrap();
        assert!(keys.revoke(&admin.key_id).await.unwrap());
        let o = cli(dir.path(), &db.url, &["keys", "bootstrap"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let secret = out.lines().find(|l| l.starts_with("flk_")).expect("secret");
        let p = keys.authenticate(secret).await.unwrap().expect("active");
        assert_eq!(p.role, factledger::infra::auth::Role::Admin);
        // Recorded as an admin action of the CLI's user on the new key.
        let events = first
            .state
            .store
            .read_stream("admin", &format!("key:{}", p.key_id), 1, 10)
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
        let payload: serde_json::Value = serde_json::from_str(&events[0].payload).unwrap();
        assert_eq!(payload["action"], "key_bootstrapped");
        assert_eq!(payload["actor"], "cli:ops-tester");
        // Once is enough: the new admin exists now.
        let o = cli(dir.path(), &db.url, &["keys", "bootstrap"]);
        assert!(!o.status.success());
        assert_eq!(keys.count_active_admins().await.unwrap(), 1);
    }
);

/// Every `AdminActionRecorded` event, oldest first.
async fn admin_events(app: &RoleApp) -> Vec<serde_json::Value> {
    let r = app
        .get(
            "/v1/audit/events?event_type=AdminActionRecorded&from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z",
            &app.auditor,
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    r.body["events"].as_array().unwrap().clone()
}

both_backends!(
    admin_actions_are_recorded_as_audited_events_with_actor_target_and_reason,
    |db: TestDb| async move {
        let app = spawn_roles(&db).await;
        let ops = app
            .send(
                Method::POST,
                "/v1/jobs:pause",
                Some(&app.operator),
                Some(r#"{"reason":"db upgrade"}"#),
                &[],
            )
            .await;
        assert_eq!(ops.status.as_u16(), 200, "{}", ops.body);
        let r = app
            .post("/v1/jobs:resume", &app.operator, r#"{"reason":"done"}"#)
            .await;
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
        let r = app
            .post(
                "/v1/projections/wallet/rebuild",
                &app.admin,
                r#"{"scope":"wallet:w-1"}"#,
            )
            .await;
        assert_eq!(r.status.as_u16(), 202, "{}", r.body);
        let r = app
            .post("/v1/reconciliations", &app.operator, r#"{"repair":true}"#)
            .await;
        assert_eq!(r.status.as_u16(), 202, "{}", r.body);
        let reconciliation = r.body["id"].as_str().unwrap().to_owned();
        // Key management from the CLI.
        let o = cli(
            app.key_dir.path(),
            &db.url,
            &["keys", "create", "--role", "service"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let secret = out.lines().find(|l| l.starts_with("flk_")).unwrap();
        let key_id = secret.split('_').nth(1).unwrap().to_owned();
        let o = cli(app.key_dir.path(), &db.url, &["keys", "revoke", &key_id]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

        let events = admin_events(&app).await;
        let seen: Vec<(String, String, String, Option<String>)> = events
            .iter()
            .map(|e| {
                let p = &e["payload"];
                (
                    p["action"].as_str().unwrap().to_owned(),
                    p["target"].as_str().unwrap().to_owned(),
                    p["actor"].as_str().unwrap().to_owned(),
                    p["reason"].as_str().map(str::to_owned),
                )
            })
            .collect();
        let operator = seen[0].2.clone();
        assert!(operator.starts_with("key:"), "{seen:?}");
        let admin = seen[2].2.clone();
        let expected = vec![
            (
                "jobs_paused".into(),
                "jobs".into(),
                operator.clone(),
                Some("db upgrade".into()),
            ),
            (
                "jobs_resumed".into(),
                "jobs".into(),
                operator.clone(),
                Some("done".into()),
            ),
            (
                "rebuild_started".into(),
                "projection:wallet".into(),
                admin.clone(),
                None,
            ),
            (
                "reconciliation_repair_started".into(),
                format!("reconciliation:{reconciliation}"),
                operator.clone(),
                None,
            ),
            (
                "key_created".into(),
                format!("key:{key_id}"),
                "cli:ops-tester".into(),
                None,
            ),
            (
                "key_revoked".into(),
                format!("key:{key_id}"),
                "cli:ops-tester".into(),
                None,
            ),
        ];
        assert_eq!(seen, expected);
        assert_ne!(operator, admin);
        // Each is an event of the `admin` stream of its target, with the caller as the
        // event's actor too (so `?actor=` finds it).
        for e in &events {
            assert_eq!(e["aggregate_type"], "admin", "{e}");
            assert_eq!(e["aggregate_id"], e["payload"]["target"], "{e}");
            assert_eq!(e["metadata"]["actor"], e["payload"]["actor"], "{e}");
        }
        assert!(events[2]["payload"]["detail"]
            .as_str()
            .unwrap()
            .contains("wallet:w-1"));
        assert!(events[4]["payload"]["detail"]
            .as_str()
            .unwrap()
            .contains("role=service"));
    }
);
