//! HTTP API integration tests: a real server on an ephemeral port, both backends.

use crate::common;

use common::TestDb;
use factledger::infra::auth::{Role, ADMIN_KEY_FILE};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The running service (`common::app`), with this file's request helpers.
struct TestApp(common::app::App);

impl std::ops::Deref for TestApp {
    type Target = common::app::App;

    fn deref(&self) -> &common::app::App {
        &self.0
    }
}

async fn spawn_app(db: &TestDb) -> TestApp {
    TestApp(common::spawn_app(db).await)
}

/// A response, read whole.
struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    bytes: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.bytes)
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Assert a problem response: status, media type, code and field.
    #[track_caller]
    fn problem(&self, status: u16, code: &str, field: Option<&str>) -> Value {
        let body = self.json();
        assert_eq!(self.status.as_u16(), status, "status of {body}");
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{body}"
        );
        assert_eq!(body["code"], code, "{body}");
        assert_eq!(body["status"], status, "{body}");
        assert_eq!(body["field"].as_str(), field, "field of {body}");
        assert!(body["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("/problems/")));
        assert!(body["detail"].is_string(), "{body}");
        body
    }
}

async fn read(resp: reqwest::Response) -> Resp {
    Resp {
        status: resp.status(),
        headers: resp.headers().clone(),
        bytes: resp.bytes().await.expect("body").to_vec(),
    }
}

impl TestApp {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST a raw body to a wallet's commands with the admin key and extra headers.
    async fn post_raw(
        &self,
        wallet: &str,
        body: impl Into<String>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut req = self
            .client
            .post(self.url(&format!("/v1/wallets/{wallet}/commands")))
            .bearer_auth(&self.admin)
            .header("content-type", "application/json")
            .body(body.into());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        read(req.send().await.expect("request")).await
    }

    /// GET a wallet once the projection has applied everything committed so far
    /// (read-your-writes through `min_position`).
    async fn wallet(&self, wallet: &str) -> Resp {
        let health: Value = self
            .client
            .get(self.url("/health"))
            .bearer_auth(&self.admin)
            .send()
            .await
            .expect("health")
            .json()
            .await
            .expect("health json");
        let head = health["head_position"].as_i64().expect("head_position");
        self.get(&format!("/v1/wallets/{wallet}?min_position={head}"))
            .await
    }

    async fn post(&self, wallet: &str, body: &Value) -> Resp {
        self.post_raw(wallet, body.to_string(), &[]).await
    }

    /// POST a command that must succeed; returns the response JSON.
    async fn ok(&self, wallet: &str, body: Value) -> Value {
        let r = self.post(wallet, &body).await;
        assert_eq!(r.status, StatusCode::OK, "{body} -> {}", r.json());
        r.json()
    }

    async fn get_as(&self, path: &str, key: Option<&str>) -> Resp {
        let mut req = self.client.get(self.url(path));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        read(req.send().await.expect("request")).await
    }

    async fn get(&self, path: &str) -> Resp {
        self.get_as(path, Some(&self.admin)).await
    }

    /// All events of a wallet stream.
    async fn events(&self, wallet: &str) -> Vec<Value> {
        let r = self
            .get(&format!("/v1/streams/wallet/{wallet}/events?limit=1000"))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        r.json()["events"].as_array().expect("events").clone()
    }

    /// The global head position, from /health (a key sees more than the status).
    async fn head(&self) -> i64 {
        let r = self.get("/health").await;
        assert_eq!(r.status, StatusCode::OK);
        r.json()["head_position"].as_i64().expect("head_position")
    }
}

fn open(user: &str) -> Value {
    json!({"type": "Open", "user_id": user, "currency": "IDR"})
}

fn moving(kind: &str, ref_type: &str, ref_id: &str, amount: i64) -> Value {
    json!({"type": kind, "ref_type": ref_type, "ref_id": ref_id, "amount_minor": amount})
}

/// Open `wallet` and make `available` spendable.
async fn funded(app: &TestApp, wallet: &str, available: i64) {
    app.ok(wallet, open("user-1")).await;
    app.ok(
        wallet,
        moving(
            "CreditPending",
            "COMMISSION",
            &format!("{wallet}-c"),
            available,
        ),
    )
    .await;
    app.ok(
        wallet,
        moving(
            "ReleasePending",
            "COMMISSION",
            &format!("{wallet}-c"),
            available,
        ),
    )
    .await;
}

// 1 ---------------------------------------------------------------------------------

both_backends!(
    a_wallet_round_trip_shows_positions_balances_blocks_and_paged_history,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        let w = "w-1";
        let mut last_position = 0;
        let commands = [
            open("user-1"),
            moving("CreditPending", "COMMISSION", "c-1", 10_000),
            moving("ReleasePending", "COMMISSION", "c-1", 7_000),
            moving("FreezeForWithdrawal", "WITHDRAWAL", "wd-1", 4_000),
            json!({"type": "PlaceRiskHold", "ref_type": "RISK_REVIEW", "ref_id": "r-1",
                   "amount_minor": 1_000, "currency": "IDR"}),
        ];
        for c in commands {
            let body = app.ok(w, c.clone()).await;
            assert_eq!(body["wallet_id"], w);
            let events = body["events"].as_array().expect("events");
            assert_eq!(events.len(), 1, "{body}");
            let pos = events[0]["global_position"].as_i64().expect("position");
            assert!(pos > last_position, "positions increase: {body}");
            assert_eq!(body["position"], events.last().unwrap()["global_position"]);
            assert_eq!(events[0]["aggregate_type"], "wallet");
            assert_eq!(events[0]["aggregate_id"], w);
            last_position = pos;
        }

        let r = app.wallet(w).await;
        assert_eq!(r.status, StatusCode::OK);
        let v = r.json();
        assert_eq!(v["wallet_id"], w);
        assert_eq!(v["user_id"], "user-1");
        assert_eq!(v["currency"], "IDR");
        assert_eq!(v["pending_minor"], 3_000);
        assert_eq!(v["available_minor"], 2_000);
        assert_eq!(v["frozen_minor"], 4_000);
        assert_eq!(v["risk_hold_minor"], 1_000);
        assert_eq!(v["version"], 5);
        assert_eq!(v["withdrawals_blocked"], false);
        assert_eq!(v["withdrawal_blocks"], json!([]));

        let block = app
            .ok(
                w,
                json!({"type": "BlockWithdrawals", "ref_type": "RECOVERY_RISK",
                       "ref_id": "rr-9", "reason": "chargeback review"}),
            )
            .await;
        assert_eq!(block["events"][0]["event_type"], "WithdrawalsBlocked");
        let v = app.wallet(w).await.json();
        assert_eq!(v["version"], 6);
        assert_eq!(v["withdrawals_blocked"], true);
        assert_eq!(
            v["withdrawal_blocks"],
            json!([{"ref_type": "RECOVERY_RISK", "ref_id": "rr-9", "reason": "chargeback review"}])
        );

        // Paging: 6 events, pages of 4.
        let page1 = app
            .get(&format!("/v1/streams/wallet/{w}/events?from=1&limit=4"))
            .await;
        assert_eq!(page1.status, StatusCode::OK);
        let page1 = page1.json();
        assert_eq!(page1["aggregate_type"], "wallet");
        assert_eq!(page1["aggregate_id"], w);
        let events1 = page1["events"].as_array().unwrap();
        assert_eq!(events1.len(), 4);
        assert_eq!(page1["next_from"], 5);
        let seqs: Vec<i64> = events1
            .iter()
            .map(|e| e["sequence"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        let types: Vec<&str> = events1
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "WalletOpened",
                "PendingCredited",
                "PendingReleased",
                "WithdrawalFrozen"
            ]
        );
        let page2 = app
            .get(&format!("/v1/streams/wallet/{w}/events?from=5&limit=4"))
            .await
            .json();
        let events2 = page2["events"].as_array().unwrap();
        assert_eq!(events2.len(), 2);
        assert_eq!(events2[0]["sequence"], 5);
        assert_eq!(events2[1]["sequence"], 6);
        assert_eq!(page2["next_from"], Value::Null);
        assert_eq!(events2[1]["global_position"], block["position"]);
        // A page that ends exactly at the head points past it; that page is empty.
        let exact = app
            .get(&format!("/v1/streams/wallet/{w}/events?from=4&limit=3"))
            .await
            .json();
        assert_eq!(exact["events"].as_array().unwrap().len(), 3);
        assert_eq!(exact["next_from"], 7);
        let past = app
            .get(&format!("/v1/streams/wallet/{w}/events?from=7"))
            .await
            .json();
        assert_eq!(past["events"], json!([]));
        assert_eq!(past["next_from"], Value::Null);

        // Metadata of every event.
        let mut positions = Vec::new();
        for e in events1.iter().chain(events2) {
            let m = &e["metadata"];
            assert_eq!(m["event_id"], e["event_id"], "{e}");
            assert!(uuid::Uuid::parse_str(m["event_id"].as_str().unwrap()).is_ok());
            assert_eq!(m["actor"], format!("key:{}", app.admin_key_id));
            assert_eq!(m["country_code"], "ID");
            for k in ["correlation_id", "request_id", "trace_id", "recorded_at"] {
                assert!(
                    m[k].as_str().is_some_and(|s| !s.is_empty()),
                    "metadata {k} of {e}"
                );
            }
            let recorded = chrono::DateTime::parse_from_rfc3339(m["recorded_at"].as_str().unwrap())
                .expect("recorded_at is RFC 3339");
            let top = chrono::DateTime::parse_from_rfc3339(e["recorded_at"].as_str().unwrap())
                .expect("recorded_at is RFC 3339");
            assert_eq!(recorded, top);
            assert_eq!(e["hash"].as_str().unwrap().len(), 64);
            positions.push(e["global_position"].as_i64().unwrap());
        }
        assert!(positions.windows(2).all(|p| p[0] < p[1]), "{positions:?}");
        assert_eq!(events2[1]["payload"]["ref_id"], "rr-9");
        assert_eq!(events1[3]["payload"]["after"]["frozen_minor"], 4_000);
    }
);

// 2 ---------------------------------------------------------------------------------

both_backends!(
    an_idempotency_key_replays_the_original_response_and_refuses_a_different_body,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        app.ok("w-1", open("user-1")).await;
        let key = [("idempotency-key", "idem-credit-1")];
        let first = app
            .post_raw(
                "w-1",
                r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":500}"#,
                &key,
            )
            .await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.json());
        assert_eq!(first.header("idempotent-replayed"), None);
        let body = first.json();
        assert_eq!(body["events"][0]["metadata"]["command_id"], "idem-credit-1");
        let head = app.head().await;
        assert_eq!(app.events("w-1").await.len(), 2);

        // Same request, other key order and whitespace: the original bytes again.
        let again = app
            .post_raw(
                "w-1",
                "{\n  \"amount_minor\" : 500,\n  \"ref_id\": \"c-1\",\n\t\"ref_type\":\"COMMISSION\", \"type\": \"CreditPending\"\n}\n",
                &key,
            )
            .await;
        assert_eq!(again.status, StatusCode::OK, "{}", again.json());
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(
            String::from_utf8_lossy(&again.bytes),
            String::from_utf8_lossy(&first.bytes)
        );
        let third = app
            .post_raw(
                "w-1",
                r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":500}"#,
                &key,
            )
            .await;
        assert_eq!(third.bytes, first.bytes);
        assert_eq!(third.header("idempotent-replayed"), Some("true"));
        assert_eq!(app.head().await, head);
        assert_eq!(app.events("w-1").await.len(), 2);

        // Same key, different body: refused, nothing written.
        let other = app
            .post_raw(
                "w-1",
                r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":501}"#,
                &key,
            )
            .await;
        other.problem(422, "IDEMPOTENCY_KEY_REUSED", Some("Idempotency-Key"));
        // Same body on another wallet is a different request too.
        let elsewhere = app
            .post_raw(
                "w-2",
                r#"{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":500}"#,
                &key,
            )
            .await;
        elsewhere.problem(422, "IDEMPOTENCY_KEY_REUSED", Some("Idempotency-Key"));
        assert_eq!(app.head().await, head);
        let v = app.wallet("w-1").await.json();
        assert_eq!(v["pending_minor"], 500);
        assert_eq!(v["version"], 2);
    }
);

// 3 ---------------------------------------------------------------------------------

both_backends!(
    commands_need_a_writing_key_and_reads_need_any_active_key,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        app.ok("w-1", open("user-1")).await;
        let head = app.head().await;
        let cmd = moving("CreditPending", "COMMISSION", "c-1", 100).to_string();
        let url = app.url("/v1/wallets/w-1/commands");

        let none = read(
            app.client
                .post(&url)
                .body(cmd.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        none.problem(401, "UNAUTHORIZED", None);
        let bad = read(
            app.client
                .post(&url)
                .bearer_auth("flk_000000000000_deadbeef")
                .body(cmd.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        bad.problem(401, "UNAUTHORIZED", None);
        let basic = read(
            app.client
                .post(&url)
                .header("authorization", format!("Basic {}", app.admin))
                .body(cmd.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        basic.problem(401, "UNAUTHORIZED", None);
        app.get_as("/v1/wallets/w-1", None)
            .await
            .problem(401, "UNAUTHORIZED", None);
        app.get_as("/v1/wallets/w-1", Some("nope"))
            .await
            .problem(401, "UNAUTHORIZED", None);

        let auditor = app.keys.create(Role::Auditor).await.unwrap();
        assert!(auditor.secret.starts_with("flk_"));
        let denied = read(
            app.client
                .post(&url)
                .bearer_auth(&auditor.secret)
                .body(cmd.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        denied.problem(403, "FORBIDDEN", None);
        // Read-your-writes: the projection may not have applied the open yet.
        let r = app
            .get_as(
                &format!("/v1/wallets/w-1?min_position={head}"),
                Some(&auditor.secret),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json()["version"], 1);
        let r = app
            .get_as("/v1/streams/wallet/w-1/events", Some(&auditor.secret))
            .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json()["events"].as_array().unwrap().len(), 1);

        // A service key may write; its events name it.
        let service = app.keys.create(Role::Service).await.unwrap();
        let r = read(
            app.client
                .post(&url)
                .bearer_auth(&service.secret)
                .body(cmd.clone())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        assert_eq!(
            r.json()["events"][0]["metadata"]["actor"],
            format!("key:{}", service.key_id)
        );
        assert_eq!(app.head().await, head + 1);

        // Revoked keys are refused at once.
        assert!(app.keys.revoke(&auditor.key_id).await.unwrap());
        app.get_as("/v1/wallets/w-1", Some(&auditor.secret))
            .await
            .problem(401, "UNAUTHORIZED", None);
        assert!(!app.keys.revoke(&auditor.key_id).await.unwrap());

        // A key revoked by another process (straight in the table) is refused once the
        // cache's TTL has passed.
        let other = app.keys.create(Role::Auditor).await.unwrap();
        let r = app.get_as("/v1/wallets/w-1", Some(&other.secret)).await;
        assert_eq!(r.status, StatusCode::OK);
        let revoked = common::exec(
            &app.store.db(),
            &format!(
                "UPDATE api_keys SET revoked_at = created_at WHERE key_id = '{}'",
                other.key_id
            ),
        )
        .await;
        assert_eq!(revoked, 1);
        tokio::time::sleep(std::time::Duration::from_millis(
            factledger::infra::auth::AUTH_CACHE_TTL_MS + 100,
        ))
        .await;
        app.get_as("/v1/wallets/w-1", Some(&other.secret))
            .await
            .problem(401, "UNAUTHORIZED", None);

        // Health is open, and without a key says only the status (issue 32 item 7).
        let h = app.get_as("/health", None).await;
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.json(), json!({"status": "ok"}));
        let h = app.get("/health").await;
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.json()["status"], "ok");
        assert_eq!(h.json()["head_position"], head + 1);
    }
);

// 4 ---------------------------------------------------------------------------------

both_backends!(
    oversized_and_invalid_requests_are_refused_naming_the_field,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        app.ok("w-1", open("user-1")).await;
        let head = app.head().await;

        // Body limit: 64 KiB + 1 byte of otherwise valid JSON.
        let mut big = String::from(r#"{"type":"Open","user_id":"u-2","currency":"IDR"}"#);
        big.push_str(&" ".repeat(64 * 1024 + 1 - big.len()));
        assert_eq!(big.len(), 64 * 1024 + 1);
        app.post_raw("w-2", big, &[])
            .await
            .problem(413, "BODY_TOO_LARGE", None);
        // Exactly at the limit is fine.
        let mut fits = String::from(r#"{"type":"Open","user_id":"u-2","currency":"IDR"}"#);
        fits.push_str(&" ".repeat(64 * 1024 - fits.len()));
        let r = app.post_raw("w-2", fits, &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        let head = head + 1;

        let credit = |amount: &str| {
            format!(
                r#"{{"type":"CreditPending","ref_type":"COMMISSION","ref_id":"c-1","amount_minor":{amount}}}"#
            )
        };
        for amount in [
            "1.5",
            "\"15\"",
            "0",
            "-1",
            "9223372036854775808",
            "null",
            "1e3",
        ] {
            app.post_raw("w-1", credit(amount), &[]).await.problem(
                422,
                "INVALID_FIELD",
                Some("amount_minor"),
            );
        }
        let b = app
            .post(
                "w-1",
                &json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1",
                        "amount_minor": 5, "colour": "red"}),
            )
            .await
            .problem(422, "UNKNOWN_FIELD", Some("colour"));
        assert!(b["detail"].as_str().unwrap().contains("colour"), "{b}");
        app.post(
            "w-1",
            &json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1"}),
        )
        .await
        .problem(422, "MISSING_FIELD", Some("amount_minor"));
        app.post(
            "w-1",
            &json!({"ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": 5}),
        )
        .await
        .problem(422, "MISSING_FIELD", Some("type"));
        app.post("w-1", &json!({"type": "Teleport", "amount_minor": 5}))
            .await
            .problem(422, "UNKNOWN_COMMAND", Some("type"));
        app.post("w-1", &json!({"type": 7}))
            .await
            .problem(422, "INVALID_FIELD", Some("type"));
        app.post(
            "w-1",
            &json!({"type": "Open", "user_id": "u 1", "currency": "IDR"}),
        )
        .await
        .problem(422, "INVALID_FIELD", Some("user_id"));
        app.post(
            "w-9",
            &json!({"type": "Open", "user_id": "u-1", "currency": "idr"}),
        )
        .await
        .problem(422, "INVALID_FIELD", Some("currency"));

        // Wallet ids: no spaces, at most 128 characters.
        let long = "a".repeat(129);
        for id in ["w%201", long.as_str()] {
            app.post(id, &open("user-1"))
                .await
                .problem(422, "INVALID_FIELD", Some("wallet_id"));
            app.wallet(id)
                .await
                .problem(422, "INVALID_FIELD", Some("wallet_id"));
        }
        let r = app.post(&"a".repeat(128), &open("user-1")).await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "128 characters are allowed: {}",
            r.json()
        );
        let head = head + 1;

        let long_key = "k".repeat(200);
        app.post_raw(
            "w-1",
            credit("5"),
            &[("idempotency-key", long_key.as_str())],
        )
        .await
        .problem(422, "INVALID_FIELD", Some("Idempotency-Key"));

        for bad in [r#"{"type":"#, "", "not json", r#"{"type":"Open"}}"#] {
            app.post_raw("w-1", bad, &[])
                .await
                .problem(422, "MALFORMED_JSON", None);
        }
        app.post_raw("w-1", "[1, 2]", &[])
            .await
            .problem(422, "INVALID_FIELD", None);

        // Stream queries.
        let events = "/v1/streams/wallet/w-1/events";
        for (query, field) in [
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("from=0", "from"),
            ("from=-3", "from"),
        ] {
            app.get(&format!("{events}?{query}"))
                .await
                .problem(422, "INVALID_FIELD", Some(field));
        }
        let r = app.get(&format!("{events}?limit=1000")).await;
        assert_eq!(r.status, StatusCode::OK);
        let p = app.get(&format!("{events}?cursor=9")).await.problem(
            422,
            "INVALID_QUERY",
            Some("cursor"),
        );
        assert!(p["detail"].as_str().unwrap().contains("cursor"), "{p}");
        let p = app.get(&format!("{events}?limit=ten")).await.problem(
            422,
            "INVALID_QUERY",
            Some("limit"),
        );
        assert!(p["detail"].as_str().unwrap().contains("limit"), "{p}");
        app.get("/v1/streams/wallet/w%201/events").await.problem(
            422,
            "INVALID_FIELD",
            Some("aggregate_id"),
        );
        app.get(&format!("/v1/streams/{long}/w-1/events"))
            .await
            .problem(422, "INVALID_FIELD", Some("aggregate_type"));

        assert_eq!(app.head().await, head, "refused requests write nothing");
        assert_eq!(app.events("w-1").await.len(), 1);
    }
);

// 5 ---------------------------------------------------------------------------------

both_backends!(
    domain_refusals_map_to_problems_and_write_nothing,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;

        let r = app
            .post("ghost", &moving("CreditPending", "COMMISSION", "g-1", 5))
            .await;
        r.problem(404, "WALLET_NOT_FOUND", None);
        assert!(app.events("ghost").await.is_empty());
        app.get("/v1/wallets/ghost")
            .await
            .problem(404, "WALLET_NOT_FOUND", None);
        assert_eq!(app.head().await, 0);

        funded(&app, "w-1", 1_000).await;
        let count = app.events("w-1").await.len();
        assert_eq!(count, 3);
        let head = app.head().await;

        let unchanged = |what: &'static str| {
            let app = &app;
            async move {
                assert_eq!(app.events("w-1").await.len(), count, "{what}");
                assert_eq!(app.head().await, head, "{what}");
            }
        };

        let r = app
            .post(
                "w-1",
                &moving("FreezeForWithdrawal", "WITHDRAWAL", "wd-1", 1_001),
            )
            .await;
        r.problem(409, "INSUFFICIENT_BALANCE", Some("amount_minor"));
        unchanged("insufficient").await;

        app.post("w-1", &open("user-1"))
            .await
            .problem(409, "WALLET_ALREADY_OPEN", None);
        unchanged("already open").await;

        let r = app
            .post(
                "w-1",
                &json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-2",
                        "amount_minor": 5, "currency": "USD"}),
            )
            .await;
        r.problem(422, "CURRENCY_MISMATCH", Some("currency"));
        unchanged("currency").await;

        // The ledger reference `w-1-c` was credited by `funded`.
        let r = app
            .post("w-1", &moving("CreditPending", "COMMISSION", "w-1-c", 5))
            .await;
        r.problem(409, "DUPLICATE_LEDGER_REF", Some("ref_id"));
        unchanged("duplicate ref").await;

        let blocked = app
            .ok(
                "w-1",
                json!({"type": "BlockWithdrawals", "ref_type": "RECOVERY_RISK", "ref_id": "rr-1"}),
            )
            .await;
        let count = count + 1;
        let head = blocked["position"].as_i64().unwrap();
        let r = app
            .post(
                "w-1",
                &moving("FreezeForWithdrawal", "WITHDRAWAL", "wd-1", 10),
            )
            .await;
        r.problem(409, "WITHDRAWALS_BLOCKED", None);
        app.post(
            "w-1",
            &json!({"type": "BlockWithdrawals", "ref_type": "RECOVERY_RISK", "ref_id": "rr-1"}),
        )
        .await
        .problem(409, "WITHDRAWALS_ALREADY_BLOCKED", Some("ref_id"));
        app.post(
            "w-1",
            &json!({"type": "UnblockWithdrawals", "ref_type": "RECOVERY_RISK", "ref_id": "rr-2"}),
        )
        .await
        .problem(409, "WITHDRAWAL_BLOCK_NOT_FOUND", Some("ref_id"));
        assert_eq!(app.events("w-1").await.len(), count);
        assert_eq!(app.head().await, head);

        let v = app.wallet("w-1").await.json();
        assert_eq!(v["available_minor"], 1_000);
        assert_eq!(v["frozen_minor"], 0);
        assert_eq!(v["version"], count as i64);
    }
);

// 6 ---------------------------------------------------------------------------------

both_backends!(
    request_correlation_and_trace_ids_are_echoed_and_recorded,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;

        // Without any ids: the server makes a request id and uses it for the rest.
        let r = app.post("w-1", &open("user-1")).await;
        assert_eq!(r.status, StatusCode::OK);
        let rid = r.header("x-request-id").expect("x-request-id").to_owned();
        assert!(uuid::Uuid::parse_str(&rid).is_ok(), "{rid}");
        let m = &r.json()["events"][0]["metadata"];
        assert_eq!(m["request_id"], rid);
        assert_eq!(m["correlation_id"], rid);
        assert_eq!(m["trace_id"], rid.replace('-', ""));
        assert_eq!(m["causation_id"], Value::Null);

        let h = app.get_as("/health", None).await;
        assert!(h.header("x-request-id").is_some());
        let problem = app.get_as("/v1/wallets/w-1", None).await;
        assert!(problem.header("x-request-id").is_some());

        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let r = app
            .post_raw(
                "w-1",
                moving("CreditPending", "COMMISSION", "c-1", 10).to_string(),
                &[
                    ("x-request-id", "req-client-42"),
                    ("x-correlation-id", "order-7781"),
                    ("x-causation-id", "evt-123"),
                    ("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01")),
                ],
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json());
        assert_eq!(r.header("x-request-id"), Some("req-client-42"));
        let stored = app.events("w-1").await;
        let m = &stored[1]["metadata"];
        assert_eq!(m["request_id"], "req-client-42");
        assert_eq!(m["correlation_id"], "order-7781");
        assert_eq!(m["causation_id"], "evt-123");
        assert_eq!(m["trace_id"], trace);
        assert_eq!(&r.json()["events"][0]["metadata"], m);

        // A malformed traceparent falls back to the request id.
        let r = app
            .post_raw(
                "w-1",
                moving("CreditPending", "COMMISSION", "c-2", 10).to_string(),
                &[("x-request-id", "req-43"), ("traceparent", "garbage")],
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json()["events"][0]["metadata"]["trace_id"], "req43");
    }
);

// 7 ---------------------------------------------------------------------------------

both_backends!(
    metrics_and_the_openapi_document_are_served,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        assert_eq!(app.get_as("/health", None).await.status, StatusCode::OK);
        app.ok("w-1", open("user-1")).await;

        // /metrics needs a key on the main listener (issue 14, F1).
        app.get_as("/metrics", None)
            .await
            .problem(401, "UNAUTHORIZED", None);
        let m = app.get("/metrics").await;
        assert_eq!(m.status, StatusCode::OK);
        assert!(m.header("content-type").unwrap().starts_with("text/plain"));
        let text = String::from_utf8(m.bytes.clone()).unwrap();
        assert!(text.contains("factledger_http_requests_total"), "{text}");
        assert!(
            text.contains(r#"route="/v1/wallets/{wallet_id}/commands""#),
            "{text}"
        );
        assert!(
            text.contains("factledger_http_request_duration_seconds"),
            "{text}"
        );

        let o = app.get_as("/openapi.json", None).await;
        assert_eq!(o.status, StatusCode::OK);
        let doc = o.json();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
        let paths = doc["paths"].as_object().expect("paths");
        for p in [
            "/v1/wallets/{wallet_id}/commands",
            "/v1/wallets/{wallet_id}",
            "/v1/streams/{aggregate_type}/{aggregate_id}/events",
            "/health",
        ] {
            assert!(paths.contains_key(p), "{p} missing from {:?}", paths.keys());
        }
        assert!(paths["/v1/wallets/{wallet_id}/commands"]["post"].is_object());
        assert!(doc["components"]["schemas"]["Problem"].is_object());
        assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    }
);

// 8 ---------------------------------------------------------------------------------

both_backends!(
    the_first_start_writes_the_admin_key_once_with_private_permissions,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        let path = app.key_dir.path().join(ADMIN_KEY_FILE);
        let text = std::fs::read_to_string(&path).expect("admin key file");
        assert_eq!(text.trim(), app.admin);
        assert!(app.admin.starts_with(&format!("flk_{}_", app.admin_key_id)));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        // The key works.
        assert_eq!(app.ok("w-1", open("user-1")).await["position"], 1);

        // Second start on the same database: no new key, no file.
        let dir2 = tempfile::tempdir().unwrap();
        let again = factledger::server::start(&db.url, "ID", dir2.path())
            .await
            .unwrap();
        assert!(again.admin_key.is_none());
        assert!(!dir2.path().join(ADMIN_KEY_FILE).exists());
        // Same key dir: the file is left as it was.
        let again = factledger::server::start(&db.url, "ID", app.key_dir.path())
            .await
            .unwrap();
        assert!(again.admin_key.is_none());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let keys = app.keys.list().await.unwrap();
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(keys[0].role, "admin");
        assert_eq!(keys[0].key_id, app.admin_key_id);
    }
);

both_backends!(
    reads_come_from_projections_and_wait_for_min_position,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        let w = "w-proj";
        app.ok(
            w,
            json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
        )
        .await;
        let mut last = 0;
        for c in 1..=5 {
            let r = app
                .ok(
                    w,
                    json!({"type": "CreditPending", "ref_type": "COMMISSION",
                           "ref_id": format!("p-{c}"), "amount_minor": 100 * c}),
                )
                .await;
            last = r["position"].as_i64().unwrap();
        }

        // Read-your-writes: with the command's position the read reflects it.
        let v = app
            .get(&format!("/v1/wallets/{w}?min_position={last}"))
            .await
            .json();
        assert_eq!(v["pending_minor"], 1_500);
        assert_eq!(v["version"], 6);
        assert!(v["position"].as_i64().unwrap() >= last, "{v}");

        // The ledger, paged by sequence.
        let page = app
            .get(&format!(
                "/v1/wallets/{w}/ledger?min_position={last}&limit=2"
            ))
            .await
            .json();
        let entries = page["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["sequence"], 2);
        assert_eq!(entries[0]["entry_type"], "CREDIT_PENDING");
        assert_eq!(entries[0]["delta_pending_minor"], 100);
        assert_eq!(page["next_cursor"], 3);
        let rest = app
            .get(&format!("/v1/wallets/{w}/ledger?cursor=3&limit=100"))
            .await
            .json();
        assert_eq!(rest["entries"].as_array().unwrap().len(), 3);
        assert_eq!(rest["next_cursor"], Value::Null);
        assert_eq!(rest["entries"][2]["after_pending_minor"], 1_500);
        // Read back from the newest: the last two lines in sequence order, then the
        // two before them, then the first one alone.
        let newest = app
            .get(&format!(
                "/v1/wallets/{w}/ledger?before={}&limit=2",
                i64::MAX
            ))
            .await
            .json();
        let seqs = |p: &Value| -> Vec<i64> {
            p["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["sequence"].as_i64().unwrap())
                .collect()
        };
        assert_eq!(seqs(&newest), [5, 6]);
        assert_eq!(
            (
                newest["previous_before"].as_i64(),
                newest["next_cursor"].as_i64()
            ),
            (Some(5), None)
        );
        let older = app
            .get(&format!("/v1/wallets/{w}/ledger?before=5&limit=2"))
            .await
            .json();
        assert_eq!(seqs(&older), [3, 4]);
        let oldest = app
            .get(&format!("/v1/wallets/{w}/ledger?before=3&limit=2"))
            .await
            .json();
        assert_eq!(
            (seqs(&oldest), oldest["previous_before"].as_i64()),
            (vec![2], None)
        );
        app.get(&format!("/v1/wallets/{w}/ledger?before=0"))
            .await
            .problem(422, "INVALID_FIELD", Some("before"));
        app.get(&format!("/v1/wallets/{w}/ledger?before=3&cursor=1"))
            .await
            .problem(422, "INVALID_FIELD", Some("before"));

        // A position the log has not reached yet: bounded wait, then a clear 503.
        let started = std::time::Instant::now();
        app.get(&format!("/v1/wallets/{w}?min_position={}", last + 1_000))
            .await
            .problem(503, "PROJECTION_BEHIND", Some("min_position"));
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        app.get(&format!("/v1/wallets/{w}?min_position=-1"))
            .await
            .problem(422, "INVALID_FIELD", Some("min_position"));
        app.get(&format!("/v1/wallets/{w}/ledger?limit=0"))
            .await
            .problem(422, "INVALID_FIELD", Some("limit"));

        // The projector reports where it is; lag shows on /metrics.
        let p = app.get("/v1/projections").await.json();
        assert_eq!(p[0]["name"], "wallet");
        assert!(p[0]["position"].as_i64().unwrap() >= last, "{p}");
        assert_eq!(p[0]["last_error"], Value::Null);
        let metrics = app.get("/metrics").await;
        let text = String::from_utf8_lossy(&metrics.bytes).into_owned();
        assert!(text.contains("factledger_projection_lag_events"), "{text}");
    }
);

both_backends!(
    an_appended_event_shows_in_the_projection_quickly,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        app.ok(
            "w-fast",
            json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
        )
        .await;
        let started = std::time::Instant::now();
        loop {
            let r = app.get("/v1/wallets/w-fast").await;
            if r.status == StatusCode::OK {
                break;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "never projected"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // The budget is 100 ms under light load; a shared CI machine gets slack, the
        // figure is printed for the record.
        println!("projected within {:?}", started.elapsed());
    }
);

both_backends!(
    auditors_query_history_by_correlation_actor_and_type_and_verify_it,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        let auditor = app.keys.create(Role::Auditor).await.unwrap();
        let w = "w-audit";
        let open = app
            .post_raw(
                w,
                json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}).to_string(),
                &[("x-correlation-id", "case-7")],
            )
            .await
            .json();
        let mut positions = vec![open["position"].as_i64().unwrap()];
        for c in 1..=3 {
            let r = app
                .post_raw(
                    w,
                    json!({"type": "CreditPending", "ref_type": "COMMISSION",
                           "ref_id": format!("a-{c}"), "amount_minor": 100 * c})
                    .to_string(),
                    &[("x-correlation-id", if c == 2 { "case-8" } else { "case-7" })],
                )
                .await
                .json();
            positions.push(r["position"].as_i64().unwrap());
        }
        let as_auditor = |path: String| {
            let app = &app;
            let key = auditor.secret.clone();
            async move { app.get_as(&path, Some(&key)).await }
        };

        // By correlation id, paged.
        let p = as_auditor("/v1/audit/events?correlation_id=case-7&limit=2".into())
            .await
            .json();
        let got: Vec<i64> = p["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["global_position"].as_i64().unwrap())
            .collect();
        assert_eq!(got, vec![positions[0], positions[1]]);
        let next = p["next_after"].as_i64().unwrap();
        let p = as_auditor(format!(
            "/v1/audit/events?correlation_id=case-7&after={next}"
        ))
        .await
        .json();
        assert_eq!(p["events"].as_array().unwrap().len(), 1);
        assert_eq!(p["events"][0]["global_position"], positions[3]);
        assert_eq!(p["next_after"], Value::Null);

        // By actor.
        let actor = format!("key:{}", app.admin_key_id);
        let p = as_auditor(format!("/v1/audit/events?actor={actor}"))
            .await
            .json();
        assert_eq!(p["events"].as_array().unwrap().len(), 4);

        // By type within a time range.
        let first = &p["events"][1]["recorded_at"];
        let from = first.as_str().unwrap();
        let to = "2999-01-01T00:00:00Z";
        let p = as_auditor(format!(
            "/v1/audit/events?event_type=PendingCredited&from={}&to={to}",
            from.replace('+', "%2B")
        ))
        .await
        .json();
        assert_eq!(p["events"].as_array().unwrap().len(), 3, "{p}");
        let p = as_auditor(format!(
            "/v1/audit/events?event_type=PendingCredited&from={to}&to=3000-01-01T00:00:00Z"
        ))
        .await
        .json();
        assert_eq!(p["events"].as_array().unwrap().len(), 0);

        // Selectors are explicit.
        as_auditor("/v1/audit/events".into())
            .await
            .problem(422, "INVALID_QUERY", None);
        as_auditor("/v1/audit/events?actor=a&correlation_id=b".into())
            .await
            .problem(422, "INVALID_QUERY", None);
        as_auditor("/v1/audit/events?event_type=X&from=2026-01-02T00:00:00Z".into())
            .await
            .problem(422, "MISSING_FIELD", Some("to"));
        as_auditor(
            "/v1/audit/events?event_type=X&from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z"
                .into(),
        )
        .await
        .problem(422, "INVALID_FIELD", Some("to"));

        // State as of a position and as of a time.
        let s = as_auditor(format!(
            "/v1/streams/wallet/{w}/state?as_of_position={}",
            positions[2]
        ))
        .await
        .json();
        assert_eq!(s["version"], 3);
        assert_eq!(s["position"], positions[2]);
        assert_eq!(s["state"]["balances"]["pending_minor"], 300);
        let opened_at = app.events(w).await[0]["recorded_at"]
            .as_str()
            .unwrap()
            .replace('+', "%2B");
        let s = as_auditor(format!("/v1/streams/wallet/{w}/state?as_of={opened_at}"))
            .await
            .json();
        assert!(s["version"].as_i64().unwrap() >= 1, "{s}");
        assert_eq!(s["state"]["opened"], true);
        as_auditor(format!("/v1/streams/order/{w}/state?as_of_position=1"))
            .await
            .problem(422, "UNKNOWN_AGGREGATE_TYPE", Some("aggregate_type"));

        // Verify, all streams and one, as an auditor.
        let client = reqwest::Client::new();
        for body in [json!({}), json!({"stream": format!("wallet/{w}")})] {
            let r = client
                .post(app.url("/v1/audit/verify"))
                .bearer_auth(&auditor.secret)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["first_broken"], Value::Null, "{v}");
            assert_eq!(v["events_checked"], 4);
        }
        // Auditors still cannot write.
        let r = client
            .post(app.url(&format!("/v1/wallets/{w}/commands")))
            .bearer_auth(&auditor.secret)
            .body(json!({"type": "Open", "user_id": "u", "currency": "IDR"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
    }
);

both_backends!(
    a_rebuild_is_started_over_http_and_followed_to_its_end,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        funded(&app, "w-1", 500).await;
        funded(&app, "w-2", 700).await;
        let before = app.wallet("w-1").await.json();
        let client = reqwest::Client::new();
        let start = |name: &'static str, body: Option<Value>, key: String| {
            let client = client.clone();
            let url = app.url(&format!("/v1/projections/{name}/rebuild"));
            async move {
                let mut req = client.post(url).bearer_auth(key);
                if let Some(b) = body {
                    req = req.json(&b);
                }
                read(req.send().await.unwrap()).await
            }
        };
        let r = start("wallet", None, app.admin.clone()).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json());
        let id = r.json()["id"].as_str().unwrap().to_owned();
        assert_eq!(r.json()["status"], "running");
        // Follow it to the end.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let done = loop {
            let s = app
                .get(&format!("/v1/projections/rebuilds/{id}"))
                .await
                .json();
            if s["status"] != "running" {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "{s}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["stage"], "done");
        assert_eq!(done["events_applied"], app.head().await);
        // The same balances; the position it reflects moved past the rebuild's own
        // audit record (an `admin` event, issue 14), so it is compared apart.
        let (mut after, mut before) = (app.wallet("w-1").await.json(), before);
        let (after_at, before_at) = (after["position"].take(), before["position"].take());
        assert_eq!(after, before);
        assert_eq!(after_at.as_i64(), before_at.as_i64().map(|p| p + 1));

        // Scoped, and the requests that are refused, each naming what is wrong.
        let r = start(
            "wallet",
            Some(json!({"scope": "wallet:w-2"})),
            app.admin.clone(),
        )
        .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json());
        assert_eq!(r.json()["scope"], "wallet:w-2");
        start("wallet", Some(json!({"scope": "w-2"})), app.admin.clone())
            .await
            .problem(422, "INVALID_FIELD", Some("scope"));
        start("orders", None, app.admin.clone()).await.problem(
            404,
            "UNKNOWN_PROJECTION",
            Some("name"),
        );
        app.get("/v1/projections/rebuilds/rb_nope").await.problem(
            404,
            "REBUILD_NOT_FOUND",
            Some("id"),
        );
        let auditor = app.keys.create(Role::Auditor).await.unwrap();
        start("wallet", None, auditor.secret.clone())
            .await
            .problem(403, "FORBIDDEN", None);
        let r = app
            .get_as(
                &format!("/v1/projections/rebuilds/{id}"),
                Some(&auditor.secret),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
    }
);
