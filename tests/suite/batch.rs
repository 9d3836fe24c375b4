//! Bulk commands (issue 19, item 1): `POST /v1/commands:batch` on both backends —
//! per-item results in order, a retried batch replaying every item, atomic batches
//! leaving nothing behind one bad item, items of one stream applied in request
//! order, the limits (nothing applied on a malformed batch), keys shared with the
//! single-command route, and duplicates refused before the append.

use crate::common;
use crate::common::hooked_store::{AppendHook, HookedStore};
use common::TestDb;
use factledger::infra::store::{CommittedUnit, DynStore, StoreError, UnitOfWork};
use factledger::runtime::bus::{BusError, CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{Wallet, WalletCommand};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn open(user: &str) -> Value {
    json!({"type": "Open", "user_id": user, "currency": "IDR"})
}

fn moving(kind: &str, ref_id: &str, amount: i64) -> Value {
    json!({"type": kind, "ref_type": "ORDER", "ref_id": ref_id, "amount_minor": amount})
}

fn item(wallet: &str, key: &str, command: Value) -> Value {
    json!({"aggregate_type": "wallet", "aggregate_id": wallet, "idempotency_key": key, "command": command})
}

async fn batch(app: &common::app::App, atomic: bool, items: Vec<Value>) -> (u16, Value) {
    app.post(
        "/v1/commands:batch",
        json!({"atomic": atomic, "commands": items}),
    )
    .await
}

async fn head(app: &common::app::App) -> i64 {
    let (status, body) = app.get("/health").await;
    assert_eq!(status, 200, "{body}");
    body["head_position"].as_i64().expect("head_position")
}

/// A wallet's (pending, available) as the projection has it at `position` (a 503
/// `PROJECTION_BEHIND` on a loaded machine is asked again, for up to 20 s).
async fn balances(app: &common::app::App, wallet: &str, position: i64) -> (i64, i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (status, w) = loop {
        let (status, w) = app
            .get(&format!("/v1/wallets/{wallet}?min_position={position}"))
            .await;
        if status != 503 || std::time::Instant::now() > deadline {
            break (status, w);
        }
    };
    assert_eq!(status, 200, "{w}");
    (
        w["pending_minor"].as_i64().expect("pending"),
        w["available_minor"].as_i64().expect("available"),
    )
}

fn statuses(body: &Value) -> Vec<u64> {
    body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_u64().expect("status"))
        .collect()
}

fn code(body: &Value, i: usize) -> &str {
    body["results"][i]["problem"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("item {i} has no problem: {body}"))
}

both_backends!(
    each_item_gets_its_own_result_in_order_and_a_retried_batch_replays_them,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).await;
        let items = vec![
            item("b-1", "k0", open("u1")),
            item("b-2", "k1", open("u2")),
            item("b-1", "k2", moving("CreditPending", "o-1", 500)),
            // The same ledger reference under another key: refused alone.
            item("b-1", "k3", moving("CreditPending", "o-1", 500)),
            item("b-2", "k4", moving("CreditPending", "o-2", 70)),
            item("b-1", "k5", moving("ReleasePending", "o-1", 500)),
            // A wallet never opened: refused alone.
            item("b-3", "k6", moving("CreditPending", "o-3", 1)),
        ];
        let (status, first) = batch(&app, false, items.clone()).await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(statuses(&first), [200, 200, 200, 409, 200, 200, 404]);
        assert_eq!(code(&first, 3), "DUPLICATE_LEDGER_REF");
        assert_eq!(
            (&first["applied"], &first["replayed"], &first["refused"]),
            (&json!(5), &json!(0), &json!(2))
        );
        for (i, r) in first["results"]
            .as_array()
            .expect("results")
            .iter()
            .enumerate()
        {
            assert_eq!(r["index"], i, "{first}");
        }
        // Items of one stream: positions in request order.
        let pos = |b: &Value, i: usize| b["results"][i]["position"].as_i64().expect("position");
        assert!(pos(&first, 0) < pos(&first, 2) && pos(&first, 2) < pos(&first, 5));
        let last = pos(&first, 5);
        assert_eq!(balances(&app, "b-1", last).await, (0, 500));
        assert_eq!(balances(&app, "b-2", last).await, (70, 0));

        // The same batch again: every applied item replays its original position,
        // the refused ones are refused again, and nothing new is written.
        let before = head(&app).await;
        let (status, again) = batch(&app, false, items).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(statuses(&again), [200, 200, 200, 409, 200, 200, 404]);
        for i in [0, 1, 2, 4, 5] {
            assert_eq!(again["results"][i]["replayed"], true, "{again}");
            assert_eq!(pos(&again, i), pos(&first, i), "item {i}");
        }
        assert_eq!(again["replayed"], 5);
        assert_eq!(head(&app).await, before, "a replayed batch wrote events");
        assert_eq!(balances(&app, "b-1", last).await, (0, 500));
    }
);

both_backends!(
    items_of_one_stream_are_applied_in_request_order,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).await;
        // Each release needs the credit just before it: out of order, it is refused.
        let mut items = vec![item("o-1", "open", open("u1"))];
        for n in 0..150 {
            let r = format!("r-{n}");
            items.push(item(
                "o-1",
                &format!("c{n}"),
                moving("CreditPending", &r, 10),
            ));
            items.push(item(
                "o-1",
                &format!("r{n}"),
                moving("ReleasePending", &r, 10),
            ));
        }
        let (status, body) = batch(&app, false, items).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["applied"], 301, "{body}");
        let positions: Vec<i64> = body["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["position"].as_i64().expect("position"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        let last = *positions.last().expect("items");
        assert_eq!(balances(&app, "o-1", last).await, (0, 1_500));
    }
);

both_backends!(
    an_atomic_batch_with_one_refused_item_writes_nothing,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).await;
        let (status, body) = batch(
            &app,
            false,
            vec![
                item("a-0", "pre-open", open("u0")),
                item("a-0", "pre-credit", moving("CreditPending", "taken", 5)),
            ],
        )
        .await;
        assert_eq!((status, &body["applied"]), (200, &json!(2)), "{body}");
        let before = head(&app).await;
        let good = vec![
            item("a-1", "a0", open("u1")),
            item("a-2", "a1", open("u2")),
            item("a-1", "a2", moving("CreditPending", "x-1", 300)),
            item("a-2", "a3", moving("CreditPending", "x-2", 40)),
        ];
        // One item over its pending balance.
        let mut bad = good.clone();
        bad.push(item("a-1", "a4", moving("ReleasePending", "x-1", 301)));
        let (status, body) = batch(&app, true, bad).await;
        assert_eq!(status, 200, "{body}");
        let s = statuses(&body);
        assert_eq!(&s[..4], [424, 424, 424, 424], "{body}");
        assert!((400..500).contains(&s[4]) && s[4] != 424, "{body}");
        for i in 0..4 {
            assert_eq!(code(&body, i), "LINKED_ITEM_REFUSED");
            let detail = body["results"][i]["problem"]["detail"]
                .as_str()
                .unwrap_or("");
            assert!(detail.contains("item 4"), "{detail}");
        }
        assert_eq!((&body["applied"], &body["refused"]), (&json!(0), &json!(5)));
        assert_eq!(
            head(&app).await,
            before,
            "a refused atomic batch wrote events"
        );
        let (status, _) = app.get("/v1/wallets/a-1").await;
        assert_eq!(status, 404, "the wallet of a refused atomic batch exists");

        // An item whose ledger reference is already stored: named, nothing written.
        let mut dup = good.clone();
        dup.insert(2, item("a-2", "a9", moving("CreditPending", "taken", 5)));
        let (_, body) = batch(&app, true, dup).await;
        assert_eq!(code(&body, 2), "DUPLICATE_LEDGER_REF", "{body}");
        assert_eq!(code(&body, 0), "LINKED_ITEM_REFUSED");
        assert_eq!(head(&app).await, before);

        // Without the bad item, all of it, in one go; then replayed whole.
        let (_, body) = batch(&app, true, good.clone()).await;
        assert_eq!(statuses(&body), [200, 200, 200, 200], "{body}");
        let last = body["results"][3]["position"].as_i64().expect("position");
        assert_eq!(last, before + 4, "four events, contiguous");
        assert_eq!(balances(&app, "a-1", last).await, (300, 0));
        let (_, again) = batch(&app, true, good).await;
        assert_eq!(again["replayed"], 4, "{again}");
        assert_eq!(head(&app).await, last);
    }
);

both_backends!(
    malformed_and_oversized_batches_are_refused_whole,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).await;
        let before = head(&app).await;
        let refused =
            |status: u16, body: &Value, want_status: u16, want_code: &str, field: &str| {
                assert_eq!(status, want_status, "{body}");
                assert_eq!(body["code"], want_code, "{body}");
                assert_eq!(body["field"], field, "{body}");
            };
        let too_many: Vec<Value> = (0..8_191)
            .map(|n| {
                item(
                    "m-1",
                    &format!("k{n}"),
                    moving("CreditPending", &format!("r{n}"), 1),
                )
            })
            .collect();
        let (status, body) = batch(&app, false, too_many).await;
        refused(status, &body, 413, "BATCH_TOO_LARGE", "commands");
        let (status, body) = batch(&app, false, vec![]).await;
        refused(status, &body, 422, "INVALID_FIELD", "commands");
        let ok = item("m-1", "k0", open("u1"));
        let (status, body) =
            batch(&app, false, vec![ok.clone(), item("m-2", "k0", open("u2"))]).await;
        refused(
            status,
            &body,
            422,
            "DUPLICATE_IDEMPOTENCY_KEY",
            "commands[1].idempotency_key",
        );
        let (status, body) = batch(
            &app,
            false,
            vec![ok.clone(), item("m-1", "k1", json!({"type": "CreditPending", "ref_type": "ORDER", "ref_id": "r", "amount_minor": -5}))],
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert!(
            body["field"]
                .as_str()
                .is_some_and(|f| f.starts_with("commands[1].command")),
            "{body}"
        );
        let mut other = item("m-1", "k1", open("u1"));
        other["aggregate_type"] = json!("payout");
        let (status, body) = batch(&app, false, vec![ok.clone(), other]).await;
        refused(
            status,
            &body,
            422,
            "INVALID_FIELD",
            "commands[1].aggregate_type",
        );
        let mut bad_id = item("m 1", "k1", open("u1"));
        bad_id["aggregate_id"] = json!("m 1");
        let (status, body) = batch(&app, false, vec![ok.clone(), bad_id]).await;
        refused(
            status,
            &body,
            422,
            "INVALID_FIELD",
            "commands[1].aggregate_id",
        );
        let (status, body) =
            batch(&app, false, vec![ok.clone(), item("m-1", "", open("u1"))]).await;
        refused(
            status,
            &body,
            422,
            "INVALID_FIELD",
            "commands[1].idempotency_key",
        );
        let mut no_key = ok.clone();
        no_key
            .as_object_mut()
            .expect("item")
            .remove("idempotency_key");
        let (status, body) = batch(&app, false, vec![no_key]).await;
        assert_eq!(status, 422, "{body}");
        assert!(
            body["field"]
                .as_str()
                .is_some_and(|f| f.contains("idempotency_key")),
            "{body}"
        );
        assert_eq!(head(&app).await, before, "a refused batch wrote events");
    }
);

both_backends!(
    a_key_is_one_record_for_the_batch_and_the_single_command_route,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).await;
        let r = app
            .client
            .post(format!("{}/v1/wallets/s-1/commands", app.base))
            .bearer_auth(&app.admin)
            .header("Idempotency-Key", "same-key")
            .json(&open("u1"))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200);
        let single: Value = r.json().await.expect("json");
        let (_, body) = batch(
            &app,
            false,
            vec![
                item("s-1", "same-key", open("u1")),
                // The key again with another command: refused, named.
                item("s-1", "other", moving("CreditPending", "q", 3)),
            ],
        )
        .await;
        assert_eq!(body["results"][0]["replayed"], true, "{body}");
        assert_eq!(body["results"][0]["position"], single["position"]);
        assert_eq!(body["results"][1]["status"], 200, "{body}");
        let (_, body) = batch(
            &app,
            false,
            vec![item("s-1", "same-key", moving("CreditPending", "q2", 3))],
        )
        .await;
        assert_eq!(body["results"][0]["status"], 422, "{body}");
        assert_eq!(code(&body, 0), "IDEMPOTENCY_KEY_REUSED");
        // Atomic: the reused key refuses everything.
        let before = head(&app).await;
        let (_, body) = batch(
            &app,
            true,
            vec![
                item("s-1", "fresh", moving("CreditPending", "q3", 3)),
                item("s-1", "same-key", moving("CreditPending", "q4", 3)),
            ],
        )
        .await;
        assert_eq!(statuses(&body), [424, 422], "{body}");
        assert_eq!(head(&app).await, before);
    }
);

/// Counts appends, and appends of several commands the database refused.
#[derive(Default)]
struct Counting {
    appends: AtomicUsize,
    failed: AtomicUsize,
}

#[async_trait::async_trait]
impl AppendHook for Counting {
    async fn append(
        &self,
        inner: &DynStore,
        units: &[UnitOfWork],
    ) -> Result<Vec<CommittedUnit>, StoreError> {
        self.appends.fetch_add(1, Ordering::SeqCst);
        let out = inner.append(units).await;
        // A command alone may meet its duplicate in its own append; one that shares a
        // transaction must never fail the others.
        if out.is_err() && units.len() > 1 {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        out
    }
}

fn envelope(wallet: &str, key: &str, command: Value) -> CommandEnvelope<WalletCommand> {
    let mut env = CommandEnvelope::new(
        wallet,
        serde_json::from_value(command).expect("command"),
        common::meta(),
    );
    env.idempotency = Some(factledger::infra::store::IdempotencyRow {
        scope: "tester".into(),
        key: key.into(),
        request_hash: format!("hash-{key}"),
    });
    env
}

both_backends!(
    duplicate_references_are_refused_before_the_append_and_the_rest_commit_together,
    |db: TestDb| async move {
        let database = db.database().await;
        let store = Arc::new(HookedStore {
            inner: database.store.clone(),
            hook: Counting::default(),
        });
        let bus = CommandBus::<Wallet>::start(store.clone());
        let mut items = vec![envelope("d-1", "open", open("u"))];
        for n in 0..40 {
            items.push(envelope(
                "d-1",
                &format!("c{n}"),
                moving("CreditPending", &format!("r{n}"), 1),
            ));
        }
        let out = bus.execute_batch(items, false).await;
        assert!(out.iter().all(Result::is_ok));
        // Again under new keys: 40 duplicates and 40 fresh credits, interleaved.
        let appends = store.appends.load(Ordering::SeqCst);
        let mut items = Vec::new();
        for n in 0..40 {
            items.push(envelope(
                "d-1",
                &format!("dup{n}"),
                moving("CreditPending", &format!("r{n}"), 1),
            ));
            items.push(envelope(
                "d-1",
                &format!("new{n}"),
                moving("CreditPending", &format!("n{n}"), 1),
            ));
        }
        let out = bus.execute_batch(items, false).await;
        for (i, r) in out.iter().enumerate() {
            match (i % 2, r) {
                (0, Err(BusError::DuplicateLedgerRef(_))) | (1, Ok(_)) => {}
                (_, other) => panic!("item {i}: {other:?}"),
            }
        }
        assert_eq!(
            store.failed.load(Ordering::SeqCst),
            0,
            "a duplicate reached the database and failed a shared transaction"
        );
        // The fresh ones committed in group transactions, not one each.
        let used = store.appends.load(Ordering::SeqCst) - appends;
        assert!(used < 20, "{used} appends for 40 fresh commands");
        let w = bus.state("d-1").await.expect("state");
        assert_eq!(w.state.balances.pending_minor, 80);
    }
);

/// `factledger commands apply` on a file: the whole file checked first, each line's
/// result on stdout, a re-run replaying, an atomic file all or nothing.
#[test]
fn the_cli_applies_a_file_of_json_lines_and_a_rerun_replays_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("cli.db").display());
    let apply = |file: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .args(["--database-url", &url, "commands", "apply", file])
            .args(extra)
            .output()
            .expect("run factledger")
    };
    let lines = |items: &[Value]| {
        items
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let results = |o: &std::process::Output| -> Vec<Value> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    let file = dir.path().join("items.jsonl");
    let items = [
        item("f-1", "l0", open("u1")),
        item("f-1", "l1", moving("CreditPending", "fr-1", 25)),
        item("f-1", "l2", moving("CreditPending", "fr-1", 25)),
    ];
    // A blank line is skipped; results name the line each item came from.
    std::fs::write(&file, lines(&items).replacen('\n', "\n\n", 1)).expect("write");
    let path = file.to_str().expect("utf-8 path");
    let first = apply(path, &[]);
    assert_eq!(first.status.code(), Some(2), "one item refused: exit 2");
    let r = results(&first);
    let got: Vec<(u64, u64)> = r
        .iter()
        .map(|x| (x["status"].as_u64().unwrap(), x["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, [(200, 1), (200, 3), (409, 4)], "{r:?}");
    let again = results(&apply(path, &[]));
    assert_eq!(again[0]["replayed"], true);
    assert_eq!(again[1]["position"], r[1]["position"]);

    // A malformed line: named, and nothing of the file applied.
    let bad = dir.path().join("bad.jsonl");
    let mut bad_items = vec![item("f-2", "b0", open("u2"))];
    bad_items
        .push(json!({"aggregate_type": "wallet", "aggregate_id": "f-2", "command": open("u2")}));
    std::fs::write(&bad, lines(&bad_items)).expect("write");
    let out = apply(bad.to_str().expect("path"), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2") && err.contains("idempotency_key"),
        "{err}"
    );
    // Atomic: the refused duplicate keeps the new wallet from being opened.
    let atomic = dir.path().join("atomic.jsonl");
    std::fs::write(
        &atomic,
        lines(&[
            item("f-3", "t0", open("u3")),
            item("f-3", "t1", moving("CreditPending", "fr-1", 5)),
        ]),
    )
    .expect("write");
    let out = apply(atomic.to_str().expect("path"), &["--atomic"]);
    assert_eq!(out.status.code(), Some(2));
    let r = results(&out);
    assert_eq!(
        (&r[0]["status"], &r[1]["status"]),
        (&json!(424), &json!(409))
    );
    // f-2 and f-3 were never opened: a batch naming them again opens them now.
    let both = dir.path().join("both.jsonl");
    std::fs::write(
        &both,
        lines(&[item("f-2", "n0", open("u2")), item("f-3", "n1", open("u3"))]),
    )
    .expect("write");
    let r = results(&apply(both.to_str().expect("path"), &[]));
    assert!(
        r.iter()
            .all(|x| x["status"] == 200 && x.get("replayed").is_none()),
        "{r:?}"
    );
}
