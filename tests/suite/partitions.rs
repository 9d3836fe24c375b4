//! Ledger partitions (issue 21 item 1, R-SCALE-1): one process serving ID and TH,
//! each on its own database with its own order, chain and keys; requests routed by
//! the `Ledger-Partition` header or the `/partitions/<CODE>/` prefix; requests that
//! state another country, or two, refused with nothing written; the CLI acting on the
//! partition it is given.

use crate::common::TestDb;
use factledger::server::{ServeOptions, SettlementCron};
use serde_json::{json, Value};

/// Two partitions served by one in-process dispatcher.
struct Pair {
    base: String,
    /// Each partition's first admin key, ID's first.
    keys: Vec<(String, String)>,
    client: reqwest::Client,
    _dirs: Vec<tempfile::TempDir>,
    _dbs: Vec<TestDb>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_pair(first: TestDb) -> Pair {
    let second = TestDb::new(first.backend).await;
    let (mut served, mut keys, mut dirs) = (Vec::new(), Vec::new(), Vec::new());
    for (code, db) in [("ID", &first), ("TH", &second)] {
        let dir = tempfile::tempdir().expect("key dir");
        let options = ServeOptions {
            partitioned: true,
            settlement_cron: SettlementCron::Off,
            ..Default::default()
        };
        let started = factledger::server::start_with(&db.url, code, dir.path(), options)
            .await
            .expect("partition starts");
        keys.push((
            code.to_owned(),
            started.admin_key.expect("admin key").secret,
        ));
        served.push((code.to_owned(), started.state));
        dirs.push(dir);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        factledger::server::serve_partitions(served, listener, std::future::pending())
            .await
            .expect("serve");
    });
    Pair {
        base,
        keys,
        client: reqwest::Client::new(),
        _dirs: dirs,
        _dbs: vec![first, second],
        task,
    }
}

impl Pair {
    fn key(&self, code: &str) -> &str {
        // A partition not served here: any key (the request is refused before auth).
        let found = self.keys.iter().find(|(c, _)| c == code);
        &found.unwrap_or(&self.keys[0]).1
    }

    /// Send with the partition's own key; `how`: "header", "path" or "none".
    async fn send(
        &self,
        method: reqwest::Method,
        code: &str,
        how: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = match how {
            "path" => format!("{}/partitions/{code}{path}", self.base),
            _ => format!("{}{path}", self.base),
        };
        let mut req = self.client.request(method, url).bearer_auth(self.key(code));
        if how == "header" {
            req = req.header("Ledger-Partition", code);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, code: &str, how: &str, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, code, how, path, Some(body))
            .await
    }

    async fn get(&self, code: &str, how: &str, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, code, how, path, None).await
    }

    async fn head(&self, code: &str) -> i64 {
        let (s, v) = self.get(code, "header", "/health").await;
        assert_eq!(s, 200, "{v}");
        v["head_position"].as_i64().expect("head_position")
    }
}

fn open(user: &str) -> Value {
    json!({"type": "Open", "user_id": user, "currency": "IDR"})
}

fn credit(ref_id: &str, amount: i64) -> Value {
    json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": ref_id,
           "amount_minor": amount})
}

fn order(country: &str, id: &str) -> Value {
    json!({
        "platform": "SHOPEE", "country": country, "platform_order_id": id,
        "status": "PENDING", "currency": "IDR", "gmv_minor": 100_000,
        "platform_commission_minor": 5_000,
        "ordered_at": "2026-03-01T00:00:00Z",
        "platform_updated_at": "2026-03-01T00:01:00Z",
        "attribution": {"kind": "TRACKING_ID", "value": "t-1"}
    })
}

both_backends!(
    each_partition_is_a_ledger_of_its_own_reached_by_header_or_prefix,
    |db: TestDb| async move {
        let p = serve_pair(db).await;
        // The same wallet id in two partitions: two streams, two orders, two chains.
        let (s, id_open) = p
            .post("ID", "header", "/v1/wallets/w-1/commands", open("u-id"))
            .await;
        assert_eq!(s, 200, "{id_open}");
        let (s, _) = p
            .post("ID", "path", "/v1/wallets/w-1/commands", credit("c-1", 700))
            .await;
        assert_eq!(s, 200);
        let (s, th_open) = p
            .post("TH", "path", "/v1/wallets/w-1/commands", open("u-th"))
            .await;
        assert_eq!(s, 200, "{th_open}");
        assert_eq!(
            th_open["position"], 1,
            "TH has its own global order: {th_open}"
        );
        assert_eq!(p.head("ID").await, 2);
        assert_eq!(p.head("TH").await, 1);
        let (s, w) = p
            .get("ID", "header", "/v1/wallets/w-1?min_position=2")
            .await;
        assert_eq!(
            (s, w["user_id"].as_str(), w["pending_minor"].as_i64()),
            (200, Some("u-id"), Some(700))
        );
        let (s, w) = p.get("TH", "path", "/v1/wallets/w-1?min_position=1").await;
        assert_eq!(
            (s, w["user_id"].as_str(), w["pending_minor"].as_i64()),
            (200, Some("u-th"), Some(0))
        );
        // Position 1 is a different event in each partition.
        for (code, user) in [("ID", "u-id"), ("TH", "u-th")] {
            let (s, e) = p.get(code, "header", "/v1/audit/events/1").await;
            assert_eq!(s, 200, "{e}");
            assert_eq!(e["payload"]["user_id"], user, "{code}: {e}");
        }
        let (s, e) = p.get("TH", "header", "/v1/audit/events/2").await;
        assert_eq!(s, 404, "TH has one event: {e}");
        // Each partition verifies its own chain.
        for code in ["ID", "TH"] {
            let (s, v) = p.post(code, "header", "/v1/audit/verify", json!({})).await;
            assert_eq!(s, 200, "{code}: {v}");
        }
        // Projections, jobs and reconciliation are each partition's own too.
        for (code, head) in [("ID", 2), ("TH", 1)] {
            let (s, v) = p.get(code, "header", "/v1/projections").await;
            assert_eq!(s, 200, "{v}");
            let wallet = v.as_array().unwrap().iter().find(|x| x["name"] == "wallet");
            assert_eq!(wallet.unwrap()["head"], head, "{code}: {v}");
            let (s, v) = p.get(code, "path", "/v1/jobs?limit=10").await;
            assert_eq!(s, 200, "{code}: {v}");
            let (s, run) = p
                .post(code, "header", "/v1/reconciliations", json!({}))
                .await;
            assert_eq!(s, 202, "{code}: {run}");
            let id = run["id"].as_str().unwrap().to_owned();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let done = loop {
                let (_, r) = p
                    .get(code, "header", &format!("/v1/reconciliations/{id}"))
                    .await;
                if r["status"] != "running" {
                    break r;
                }
                assert!(std::time::Instant::now() < deadline, "{r}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            };
            assert_eq!(done["status"], "succeeded", "{code}: {done}");
            assert_eq!(done["up_to_position"], head, "{code}: {done}");
            // The run is the partition's own: the other one does not know its id.
            let other = if code == "ID" { "TH" } else { "ID" };
            let (s, _) = p
                .get(other, "header", &format!("/v1/reconciliations/{id}"))
                .await;
            assert_eq!(s, 404, "{code}'s run seen from {other}");
        }
        // API keys are a partition's own: ID's admin key is unknown in TH.
        let (s, _) = p
            .client
            .get(format!("{}/partitions/TH/v1/wallets/w-1", p.base))
            .bearer_auth(p.key("ID"))
            .send()
            .await
            .map(|r| (r.status().as_u16(), ()))
            .unwrap();
        assert_eq!(s, 401);
        // A request that names no partition, an unknown one, a malformed one, or two.
        let (s, v) = p.get("ID", "none", "/v1/wallets/w-1").await;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("PARTITION_REQUIRED")),
            "{v}"
        );
        assert_eq!(v["field"], "Ledger-Partition");
        let (s, v) = p.get("VN", "path", "/v1/wallets/w-1").await;
        assert_eq!(
            (s, v["code"].as_str()),
            (404, Some("UNKNOWN_PARTITION")),
            "{v}"
        );
        let (s, v) = p.get("IDN", "path", "/v1/wallets/w-1").await;
        assert_eq!(
            (s, v["code"].as_str()),
            (400, Some("INVALID_PARTITION")),
            "{v}"
        );
        let resp = p
            .client
            .get(format!("{}/partitions/ID/v1/wallets/w-1", p.base))
            .header("Ledger-Partition", "TH")
            .bearer_auth(p.key("ID"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["code"], "PARTITION_CONFLICT", "{v}");
        // Console pages link to /console/… without a prefix: opened under one, the
        // page remembers its partition in a cookie the dispatcher reads.
        let under_prefix = p
            .client
            .get(format!("{}/partitions/TH/console/sign-in", p.base))
            .send()
            .await
            .unwrap();
        assert_eq!(under_prefix.status().as_u16(), 200);
        let remembered = under_prefix
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|c| c.starts_with("fl_partition=TH;") && c.contains("Path=/console"));
        assert!(remembered, "{:?}", under_prefix.headers());
        for (cookie, status) in [(Some("fl_partition=TH"), 200), (None, 400)] {
            let mut req = p.client.get(format!("{}/console/sign-in", p.base));
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            assert_eq!(
                req.send().await.unwrap().status().as_u16(),
                status,
                "{cookie:?}"
            );
        }
        // /health without a partition answers for every partition.
        let v: Value = p
            .client
            .get(format!("{}/health", p.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["status"], "ok", "{v}");
        // Without a key each partition says only its status (issue 32 item 7)…
        assert_eq!(v["partitions"]["ID"], json!({"status": "ok"}), "{v}");
        assert_eq!(v["partitions"]["TH"], json!({"status": "ok"}), "{v}");
        // …and a partition's own key sees its head.
        assert_eq!(p.head("ID").await, 2);
        assert_eq!(p.head("TH").await, 1);
    }
);

both_backends!(
    a_request_stating_another_country_or_two_is_refused_with_nothing_written,
    |db: TestDb| async move {
        let p = serve_pair(db).await;
        let before = p.head("ID").await;
        let (s, v) = p
            .post(
                "ID",
                "header",
                "/v1/orders:ingest",
                json!({"orders": [order("TH", "o-1")]}),
            )
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (422, Some("WRONG_PARTITION")),
            "{v}"
        );
        assert_eq!(v["field"], "orders[0].country");
        assert!(
            v["detail"]
                .as_str()
                .unwrap()
                .contains("Ledger-Partition: TH"),
            "{v}"
        );
        let page = json!({"orders": [order("ID", "o-2"), order("TH", "o-3")]});
        let (s, v) = p.post("ID", "header", "/v1/orders:ingest", page).await;
        assert_eq!(
            (s, v["code"].as_str()),
            (422, Some("CROSS_PARTITION")),
            "{v}"
        );
        assert_eq!(v["field"], "orders[1].country");
        let (s, v) = p
            .post(
                "ID",
                "header",
                "/v1/commission-rules/SHOPEE:TH/versions",
                json!({}),
            )
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (422, Some("WRONG_PARTITION")),
            "{v}"
        );
        assert_eq!(v["field"], "rule_set_id");
        let (s, v) = p
            .post("ID", "header", "/v1/campaigns/SHOPEE:TH", json!({}))
            .await;
        assert_eq!(
            (s, v["code"].as_str()),
            (422, Some("WRONG_PARTITION")),
            "{v}"
        );
        assert_eq!(v["field"], "campaign_id");
        assert_eq!(p.head("ID").await, before, "nothing was written");
        assert_eq!(p.head("TH").await, 0, "nothing was written");
        // The same page sent to its own partition is taken.
        let (s, v) = p
            .post(
                "TH",
                "path",
                "/v1/orders:ingest",
                json!({"orders": [order("TH", "o-1")]}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["results"].as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(p.head("ID").await, before);
    }
);

/// The binary with `--partitions`: commands act on the partition named, a command
/// that needs one refuses to guess, and each partition has its own key file.
fn factledger(dir: &std::path::Path, partitions: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("FACTLEDGER_PARTITION")
        .env("RUST_LOG", "warn")
        .arg("--partitions")
        .arg(partitions)
        .args(args)
        .output()
        .expect("run factledger")
}

both_backends!(
    the_cli_acts_on_the_partition_it_is_given,
    |db: TestDb| async move {
        let second = TestDb::new(db.backend).await;
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("ID={};TH={}", db.url, second.url);
        let keys = dir.path().join("chain.keys");
        let keys = keys.to_str().unwrap();
        let cli = |args: &[&str]| {
            let mut all = vec!["--integrity-keys", keys];
            all.extend_from_slice(args);
            factledger(dir.path(), &spec, &all)
        };
        // One event in TH only: a key made there.
        let made = cli(&["--partition", "TH", "keys", "create", "--role", "service"]);
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let ambiguous = cli(&["keys", "list"]);
        assert!(!ambiguous.status.success());
        let said = String::from_utf8_lossy(&ambiguous.stderr);
        assert!(
            said.contains("choose one with --partition <CODE>"),
            "{said}"
        );
        assert!(said.contains("(ID, TH)"), "{said}");
        let listed = |code: &str| {
            let out = cli(&["--partition", code, "keys", "list"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines().filter(|l| l.contains("\"service\"")).count()
        };
        assert_eq!(listed("th"), 1);
        assert_eq!(listed("ID"), 0);
        for code in ["ID", "TH"] {
            let verified = cli(&["--partition", code, "verify", "--allow-no-anchors"]);
            assert!(
                verified.status.success(),
                "{code}: {}",
                String::from_utf8_lossy(&verified.stderr)
            );
            let reconciled = cli(&["--partition", code, "reconcile"]);
            assert!(
                reconciled.status.success(),
                "{code}: {}",
                String::from_utf8_lossy(&reconciled.stderr)
            );
        }
        let both = cli(&["--database-url", "sqlite://other.db", "keys", "list"]);
        assert!(!both.status.success());
        let said = String::from_utf8_lossy(&both.stderr);
        assert!(said.contains("drop --database-url"), "{said}");
        let unknown = cli(&["--partition", "VN", "keys", "list"]);
        assert!(!unknown.status.success());
        let said = String::from_utf8_lossy(&unknown.stderr);
        assert!(said.contains("not among --partitions (ID, TH)"), "{said}");
        // Each partition's chain keys are a file of its own; ID has made none yet.
        assert!(dir.path().join("chain.TH.keys").exists());
        assert!(!dir.path().join("chain.keys").exists());
    }
);
