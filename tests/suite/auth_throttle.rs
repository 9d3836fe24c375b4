//! Sessions, sign-ins and failed authentication (issue 32 item 5): console sessions
//! are capped per key (a key's oldest is evicted, never another user's), a sign-in
//! takes a token of its key's rate limit, and failed authentications are throttled
//! per client address, counted in a metric and alerted past a threshold.

use crate::common::app::spawn_app;
use crate::common::console::{cookie_in, ConsoleClient};
use crate::common::TestDb;
use factledger::console::session::SESSIONS_PER_KEY_MAX;
use factledger::infra::auth::Role;
use factledger::runtime::http::limits::HttpLimits;
use std::time::Duration;

/// Longest a test waits for the alert's outbox row.
const ALERT_WAIT_MAX: Duration = Duration::from_secs(20);

both_backends!(
    one_key_signing_in_again_and_again_evicts_only_its_own_oldest_session,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor])
            .settlement_off()
            .await;
        let operator = ConsoleClient::sign_in(&app.base, &app.operator).await;
        let first = ConsoleClient::sign_in(&app.base, &app.auditor).await;
        for _ in 0..SESSIONS_PER_KEY_MAX {
            let (status, page) = ConsoleClient::try_sign_in(&app.base, &app.auditor).await;
            assert_eq!(status, 303, "{}", page.html);
        }
        // The auditor's first session was its oldest: gone. The operator's stays.
        let p = first.get("/console").await;
        assert_eq!(p.status, 303, "the auditor's oldest session survived");
        let p = operator.get("/console").await;
        assert_eq!(
            p.status, 200,
            "another user's session was evicted: {}",
            p.html
        );
    }
);

both_backends!(
    a_console_sign_in_takes_a_token_of_its_keys_rate_limit,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Auditor])
            .settlement_off()
            .http_limits(HttpLimits {
                rate_limit_per_key_rps: 1,
                rate_limit_per_key_burst: 3,
                ..HttpLimits::default()
            })
            .await;
        for _ in 0..3 {
            let (status, page) = ConsoleClient::try_sign_in(&app.base, &app.auditor).await;
            assert_eq!(status, 303, "{}", page.html);
        }
        let (status, page) = ConsoleClient::try_sign_in(&app.base, &app.auditor).await;
        assert_eq!(status, 429, "{}", page.html);
        assert!(page.html.contains("RATE_LIMITED"), "{}", page.html);
        // No session was opened for the refusal.
        assert!(cookie_in(&page.set_cookies, "fl_console").is_none());
    }
);

both_backends!(
    failed_authentications_are_throttled_per_address_counted_and_alerted,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .settlement_off()
            .http_limits(HttpLimits {
                auth_failures_per_ip_burst: 3,
                auth_failures_per_ip_per_min: 1,
                auth_failures_alert_per_min: 3,
                ..HttpLimits::default()
            })
            .await;
        let get = |key: &str| {
            app.client
                .get(format!("{}/v1/wallets/w-none", app.base))
                .bearer_auth(key.to_owned())
                .send()
        };
        // Two wrong keys on the API, one on the console: the address's three.
        for _ in 0..2 {
            assert_eq!(get("flk_wrong").await.unwrap().status(), 401);
        }
        let (status, _) = ConsoleClient::try_sign_in(&app.base, "flk_wrong").await;
        assert_eq!(status, 401);
        // Throttled now: even the right key is refused before it is looked up.
        for key in ["flk_wrong", app.admin.as_str()] {
            let r = get(key).await.unwrap();
            assert_eq!(r.status(), 429);
            assert_eq!(r.headers()["retry-after"], "60");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["code"], "AUTH_THROTTLED", "{body}");
        }
        let (status, page) = ConsoleClient::try_sign_in(&app.base, &app.admin).await;
        assert_eq!(status, 429, "{}", page.html);
        assert!(page.html.contains("AUTH_THROTTLED"), "{}", page.html);
        // Counted (the recorder is the process's: at least this test's three).
        let metrics = app.state.metrics.render();
        let counted: u64 = metrics
            .lines()
            .filter(|l| l.starts_with("factledger_auth_failures_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert!(counted >= 3, "{metrics}");
        // The third failure in the minute raised the alert, once.
        let alerts = || async {
            app.state
                .db
                .fetch_i64(
                    "SELECT COUNT(*) FROM outbox WHERE type = 'alert.auth.failures'",
                    &[],
                )
                .await
                .unwrap()
        };
        crate::common::eventually(ALERT_WAIT_MAX, || async { alerts().await >= 1 })
            .await
            .expect("the auth.failures alert is raised");
        assert_eq!(alerts().await, 1, "raised once");
    }
);
