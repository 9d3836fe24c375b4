//! Scope and least privilege (issue 14 item 6): idempotency keys per API key (F6),
//! operator actions kept from the service role (F7), no new admin key once keys have
//! existed (F9), admin actions as audited events. Both backends.

mod common;

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
            assert_eq!(r.body["events"].as_array().map(Vec::len), Some(1), "{}", r.body);
        }
    }
);
