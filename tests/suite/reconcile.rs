//! Reconciliation as a replay (issue 3 item 5): differences planted by hand in the
//! database are found with the right class, drift is repaired by scoped rebuild, event
//! findings are refused. Library, HTTP and CLI; both backends.

use crate::common;

use common::{run, TestDb};
use factledger::infra::auth::Role;
use factledger::infra::db::Db;
use factledger::infra::store;
use factledger::runtime::bus::CommandBus;
use factledger::runtime::projection::catch_up_wallet;
use factledger::runtime::reconcile::{self, FindingClass, ReconcileOptions, Report, RunStatus};
use factledger::runtime::unit::run_unit;
use factledger_aggregates::wallet::{EntryType, Movement, Wallet, WalletError, WalletEvent};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Three wallets, each opened with three pending credits (100, 200, 300); w-1 releases
/// and freezes, w-2 releases, places a risk hold and blocks withdrawals.
async fn history(db: &TestDb) {
    let bus = CommandBus::<Wallet>::start(db.store.clone());
    for w in ["w-1", "w-2", "w-3"] {
        run(
            &bus,
            w,
            json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
        )
        .await;
        for c in 1..=3 {
            run(
                &bus,
                w,
                json!({"type": "CreditPending", "ref_type": "COMMISSION",
                       "ref_id": format!("{w}-c{c}"), "amount_minor": 100 * c}),
            )
            .await;
        }
    }
    for (w, c) in [
        (
            "w-1",
            json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "w-1-c3", "amount_minor": 300}),
        ),
        (
            "w-1",
            json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL", "ref_id": "wd-1", "amount_minor": 120}),
        ),
        (
            "w-2",
            json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "w-2-c1", "amount_minor": 100}),
        ),
        (
            "w-2",
            json!({"type": "PlaceRiskHold", "ref_type": "RISK", "ref_id": "x", "amount_minor": 1}),
        ),
        (
            "w-2",
            json!({"type": "BlockWithdrawals", "ref_type": "RISK", "ref_id": "r-1", "reason": "review"}),
        ),
    ] {
        run(&bus, w, c).await;
    }
}

async fn projections(db: &TestDb) -> Db {
    store::open(&db.url).await.unwrap().db
}

/// `(class, kind, wallet, table, key)` of every finding, as JSON names.
fn found(report: &Report) -> BTreeSet<(String, String, String, String, String)> {
    report
        .findings
        .iter()
        .map(|f| {
            let name = |v: Value| v.as_str().unwrap_or_default().to_owned();
            (
                name(serde_json::to_value(f.class).unwrap()),
                name(serde_json::to_value(f.kind).unwrap()),
                f.wallet_id.clone(),
                f.table.clone(),
                f.key.clone(),
            )
        })
        .collect()
}

fn row(
    class: &str,
    kind: &str,
    w: &str,
    table: &str,
    key: &str,
) -> (String, String, String, String, String) {
    (
        class.into(),
        kind.into(),
        w.into(),
        table.into(),
        key.into(),
    )
}

/// Append a withdrawal movement the wallet's decision would refuse (an unfreeze or
/// payout no open freeze pairs), sealed like any event: as history written before
/// pairing was enforced holds them.
async fn plant_unpaired(
    db: &TestDb,
    wallet: &str,
    entry_type: EntryType,
    ref_id: &str,
    amount: i64,
) {
    run_unit::<(), WalletError, _, _>(&db.store, &common::meta(), |mut unit| async move {
        let mut w = unit.load::<Wallet, WalletError>(wallet).await?;
        let before = w.state.balances;
        let delta = entry_type.delta(amount);
        let event = WalletEvent::movement(Movement {
            ref_type: "WITHDRAWAL".into(),
            ref_id: ref_id.into(),
            entry_type,
            amount_minor: amount,
            delta,
            before,
            after: before.checked_add(&delta).expect("no overflow"),
            counterparty: None,
        });
        unit.append::<Wallet, WalletError>(&mut w, wallet, &[event])?;
        Ok(((), unit))
    })
    .await
    .expect("planted");
}

/// Plant, as someone with database access would:
/// - w-1: its balance edited and a ledger row no event accounts for;
/// - w-3: a ledger row deleted;
/// - `ghost`: a balance row for a wallet that has no events;
/// - w-2: the payload of its second credit altered (the append-only trigger dropped
///   first, as the database owner) and its withdrawal block deleted.
///
/// Returns the global position of the altered event.
async fn plant(db: &TestDb) -> i64 {
    let s = &db.store;
    s.execute_raw(
        "UPDATE wallet_balances SET available_minor = available_minor + 999 \
         WHERE wallet_id = 'w-1'",
    )
    .await
    .unwrap();
    s.execute_raw(
        "INSERT INTO wallet_ledger (wallet_id, sequence, global_position, ref_type, ref_id, \
         entry_type, amount_minor, delta_pending_minor, delta_available_minor, \
         delta_frozen_minor, delta_risk_hold_minor, before_pending_minor, \
         before_available_minor, before_frozen_minor, before_risk_hold_minor, \
         after_pending_minor, after_available_minor, after_frozen_minor, \
         after_risk_hold_minor, recorded_at) VALUES ('w-1', 99, 99, 'COMMISSION', 'forged', \
         'CREDIT_PENDING', 5, 5, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, '2026-01-01T00:00:00.000000Z')",
    )
    .await
    .unwrap();
    let n = s
        .execute_raw("DELETE FROM wallet_ledger WHERE wallet_id = 'w-3' AND sequence = 2")
        .await
        .unwrap();
    assert_eq!(n, 1);
    s.execute_raw(
        "INSERT INTO wallet_balances (wallet_id, user_id, currency, pending_minor, \
         available_minor, frozen_minor, risk_hold_minor, version, last_position) \
         VALUES ('ghost', 'u-ghost', 'IDR', 5, 0, 0, 0, 1, 1)",
    )
    .await
    .unwrap();
    let credit = s
        .read_stream("wallet", "w-2", 3, 1)
        .await
        .unwrap()
        .remove(0);
    assert!(
        credit.payload.contains(r#""amount_minor":200"#),
        "{}",
        credit.payload
    );
    s.execute_raw("DROP TRIGGER events_refuse_update")
        .await
        .unwrap();
    let n = s
        .execute_raw(&format!(
            "UPDATE events SET payload = REPLACE(payload, '\"amount_minor\":200', \
             '\"amount_minor\":250') WHERE global_position = {}",
            credit.global_position
        ))
        .await
        .unwrap();
    assert_eq!(n, 1);
    s.execute_raw("DELETE FROM wallet_blocks WHERE wallet_id = 'w-2'")
        .await
        .unwrap();
    credit.global_position
}

both_backends!(
    a_clean_history_reconciles_with_no_findings,
    |db: TestDb| async move {
        history(&db).await;
        let p = projections(&db).await;
        catch_up_wallet(&db.store, &p).await.unwrap();
        let head = db.store.head_position().await.unwrap();
        // Default pages, and pages so small that every wallet spans several.
        for page_rows in [reconcile::PAGE_ROWS, 1, 2] {
            let options = ReconcileOptions {
                page_rows,
                ..ReconcileOptions::default()
            };
            let report = reconcile::reconcile(&db.store, &p, options).await.unwrap();
            assert_eq!(report.findings, vec![], "pages of {page_rows}");
            assert_eq!(report.counts.total(), 0);
            assert_eq!(report.up_to_position, head);
            assert_eq!(report.events_checked as i64, head);
            assert_eq!(report.wallets_checked, 3);
        }
        // The run replays up to the checkpoint, not the head: events the projection
        // has not applied yet are not drift.
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        run(
            &bus,
            "w-3",
            json!({"type": "ReleasePending", "ref_type": "COMMISSION",
                                "ref_id": "w-3-c1", "amount_minor": 100}),
        )
        .await;
        let report = reconcile::reconcile(&db.store, &p, ReconcileOptions::default())
            .await
            .unwrap();
        assert_eq!((report.counts.total(), report.up_to_position), (0, head));
        // A full rebuild renamed a new set of tables in (MariaDB) and the checkpoint,
        // still the old set's, has not adopted it yet: the rows are the set's, at the
        // set's own position, and that is what the run compares.
        db.store
            .execute_raw(&format!(
                "UPDATE wallet_generation SET generation = generation + 1, position = {head}"
            ))
            .await
            .unwrap();
        db.store
            .execute_raw("UPDATE projection_checkpoints SET position = 3 WHERE name = 'wallet'")
            .await
            .unwrap();
        let report = reconcile::reconcile(&db.store, &p, ReconcileOptions::default())
            .await
            .unwrap();
        assert_eq!((report.counts.total(), report.up_to_position), (0, head));
    }
);

both_backends!(
    planted_differences_are_classified_and_only_drift_is_repaired,
    |db: TestDb| async move {
        history(&db).await;
        let p = projections(&db).await;
        catch_up_wallet(&db.store, &p).await.unwrap();
        let baseline_w1 = (
            p.wallet("w-1").await.unwrap(),
            p.ledger("w-1", 0, 100).await.unwrap(),
        );
        let baseline_w3 = (
            p.wallet("w-3").await.unwrap(),
            p.ledger("w-3", 0, 100).await.unwrap(),
        );
        let altered = plant(&db).await;
        let w3_credit =
            db.store.read_stream("wallet", "w-3", 2, 1).await.unwrap()[0].global_position;

        let report = reconcile::reconcile(&db.store, &p, ReconcileOptions::default())
            .await
            .unwrap();
        // Pages of 2 rows cross every wallet's boundaries: the same findings.
        let small_pages = ReconcileOptions {
            page_rows: 2,
            ..ReconcileOptions::default()
        };
        let paged = reconcile::reconcile(&db.store, &p, small_pages)
            .await
            .unwrap();
        assert_eq!(paged.findings, report.findings);
        let drift = "projection_drift";
        let w2_drift = [
            row(
                drift,
                "ledger_differs",
                "w-2",
                "wallet_ledger",
                "sequence=3",
            ),
            row(
                drift,
                "block_missing",
                "w-2",
                "wallet_blocks",
                "ref=RISK/r-1",
            ),
        ];
        let w2_events = [
            row("event", "hash_chain_broken", "w-2", "events", "sequence=3"),
            row("event", "delta_mismatch", "w-2", "events", "sequence=3"),
        ];
        let repairable = [
            row(
                drift,
                "balance_differs",
                "w-1",
                "wallet_balances",
                "wallet_id=w-1",
            ),
            row(drift, "ledger_extra", "w-1", "wallet_ledger", "sequence=99"),
            row(
                drift,
                "balance_extra",
                "ghost",
                "wallet_balances",
                "wallet_id=ghost",
            ),
            row(
                drift,
                "ledger_missing",
                "w-3",
                "wallet_ledger",
                "sequence=2",
            ),
        ];
        // The edited payload is also what `verify` finds: the log itself failed.
        let log = row(
            "event",
            "log_integrity",
            "",
            "events",
            &format!("global_position={altered}"),
        );
        let everything: BTreeSet<_> = w2_drift
            .iter()
            .chain(&w2_events)
            .chain(&repairable)
            .chain(std::iter::once(&log))
            .cloned()
            .collect();
        assert_eq!(found(&report), everything);
        assert_eq!(
            (report.counts.projection_drift, report.counts.event),
            (6, 3)
        );
        assert_eq!(report.remaining, report.counts);
        assert_eq!(report.wallets_checked, 4);
        assert!(!report.findings_truncated);
        for f in &report.findings {
            match (f.class, f.wallet_id.as_str()) {
                (FindingClass::Event, "") => {
                    assert!(f.repair.starts_with("refused"), "{f:?}");
                    assert!(f.detail.starts_with("edited"), "{f:?}");
                }
                (FindingClass::Event, _) => {
                    assert!(f.repair.starts_with("refused"), "{f:?}");
                    assert_eq!(f.events[0].global_position, altered);
                    assert_eq!(f.events[0].stream, "wallet/w-2");
                }
                // While the log fails verification, no drift is repaired anywhere.
                (FindingClass::ProjectionDrift, _) => {
                    assert!(f.repair.contains("failed its integrity check"), "{f:?}")
                }
            }
        }
        let balance = report
            .findings
            .iter()
            .find(|f| f.kind == reconcile::FindingKind::BalanceDiffers)
            .unwrap();
        assert_eq!(
            balance.actual.as_ref().unwrap()["available_minor"]
                .as_i64()
                .unwrap()
                - balance.expected.as_ref().unwrap()["available_minor"]
                    .as_i64()
                    .unwrap(),
            999
        );
        assert!(
            balance.detail.contains("available_minor"),
            "{}",
            balance.detail
        );
        let missing = report
            .findings
            .iter()
            .find(|f| f.kind == reconcile::FindingKind::LedgerMissing)
            .unwrap();
        assert_eq!(missing.events[0].global_position, w3_credit);
        let differs = report
            .findings
            .iter()
            .find(|f| f.kind == reconcile::FindingKind::LedgerDiffers)
            .unwrap();
        assert!(
            differs
                .detail
                .contains("amount_minor: expected 250, actual 200"),
            "{}",
            differs.detail
        );

        // Repair is refused whole while the log fails verification: nothing rebuilt.
        let repair = ReconcileOptions {
            repair: true,
            page_rows: 3,
            anchor_file: None,
            ..Default::default()
        };
        let refused = reconcile::reconcile(&db.store, &p, repair.clone())
            .await
            .unwrap();
        assert_eq!(found(&refused), everything);
        assert!(
            refused.repair_outcome.is_none(),
            "{:?}",
            refused.repair_outcome
        );
        assert_eq!(refused.remaining, refused.counts);
        assert_ne!(p.wallet("w-1").await.unwrap(), baseline_w1.0);

        // The operator restores the event (from a backup): the log verifies again, and
        // the drift is repaired; w-2's drift, which came from the edit, with the rest.
        let everything: BTreeSet<_> = w2_drift[1..].iter().chain(&repairable).cloned().collect();
        db.store
            .execute_raw(&format!(
                "UPDATE events SET payload = REPLACE(payload, '\"amount_minor\":250', \
                 '\"amount_minor\":200') WHERE global_position = {altered}"
            ))
            .await
            .unwrap();
        let repaired = reconcile::reconcile(&db.store, &p, repair).await.unwrap();
        assert_eq!(found(&repaired), everything);
        for f in &repaired.findings {
            assert_eq!(f.repaired, Some(true), "{f:?}");
        }
        assert_eq!(repaired.remaining.total(), 0);
        let outcome = repaired.repair_outcome.clone().unwrap();
        assert_eq!((outcome.wallets_rebuilt, outcome.wallets_failed), (4, 0));

        // Nothing is left, and the repaired rows are what the projection wrote from the
        // events in the first place.
        let after = reconcile::reconcile(&db.store, &p, ReconcileOptions::default())
            .await
            .unwrap();
        assert_eq!(found(&after), BTreeSet::new());
        assert_eq!(
            (
                p.wallet("w-1").await.unwrap(),
                p.ledger("w-1", 0, 100).await.unwrap()
            ),
            baseline_w1
        );
        assert_eq!(
            (
                p.wallet("w-3").await.unwrap(),
                p.ledger("w-3", 0, 100).await.unwrap()
            ),
            baseline_w3
        );
        assert_eq!(p.wallet("ghost").await.unwrap(), None);
    }
);

// HTTP ------------------------------------------------------------------------------

/// The running service (`common::app`) with an auditor key, and this file's request
/// helpers.
struct App(common::app::App);

impl std::ops::Deref for App {
    type Target = common::app::App;

    fn deref(&self) -> &common::app::App {
        &self.0
    }
}

impl App {
    async fn send(&self, req: reqwest::RequestBuilder, key: &str) -> (u16, String) {
        let r = req.bearer_auth(key).send().await.expect("request");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    async fn get(&self, path: &str, key: &str) -> (u16, String) {
        self.send(self.client.get(format!("{}{path}", self.base)), key)
            .await
    }

    async fn post(&self, path: &str, key: &str, body: Option<&str>) -> (u16, String) {
        let mut req = self.client.post(format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        self.send(req, key).await
    }

    /// Poll a run until it is no longer running.
    async fn finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (status, body) = self
                .get(&format!("/v1/reconciliations/{id}"), &self.admin)
                .await;
            assert_eq!(status, 200, "{body}");
            // One object, each key once: the run's `repair` and the report's were
            // both written (issue 32 item 0b).
            let run = factledger::infra::json::parse_unique(body.as_bytes())
                .unwrap_or_else(|e| panic!("the run is not JSON with unique keys: {e}: {body}"));
            if run["status"] != "running" {
                return run;
            }
            assert!(
                Instant::now() < deadline,
                "reconciliation {id} never finished"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn spawn_app(db: &TestDb) -> App {
    let app = common::spawn_app(db).role_keys(&[Role::Auditor]).await;
    // Let the service's projection runner apply the history before anything is planted.
    let head = db.store.head_position().await.unwrap();
    assert_eq!(app.state.db.wait_for(head).await.unwrap(), head);
    App(app)
}

both_backends!(
    reconciliations_run_in_the_background_and_auditors_read_but_never_start_them,
    |db: TestDb| async move {
        history(&db).await;
        let app = spawn_app(&db).await;
        db.store
            .execute_raw("UPDATE wallet_balances SET pending_minor = 7 WHERE wallet_id = 'w-3'")
            .await
            .unwrap();
        // A planted id is text like any other: the page must escape it.
        db.store
            .execute_raw(
                "INSERT INTO wallet_balances (wallet_id, user_id, currency, pending_minor, \
                 available_minor, frozen_minor, risk_hold_minor, version, last_position) \
                 VALUES ('<b>x</b>', 'u', 'IDR', 0, 0, 0, 0, 1, 1)",
            )
            .await
            .unwrap();

        let (status, body) = app.post("/v1/reconciliations", &app.admin, None).await;
        assert_eq!(status, 202, "{body}");
        let started: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(started["status"], "running");
        assert_eq!(started["repair"], false);
        let id = started["id"].as_str().unwrap().to_owned();

        let run = app.finished(&id).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(
            run["up_to_position"],
            db.store.head_position().await.unwrap()
        );
        assert_eq!(run["counts"], json!({"projection_drift": 2, "event": 0}));
        let kinds: BTreeSet<(String, String)> = run["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["kind"].as_str().unwrap().into(),
                    f["wallet_id"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            BTreeSet::from([
                ("balance_differs".to_owned(), "w-3".to_owned()),
                ("balance_extra".to_owned(), "<b>x</b>".to_owned())
            ])
        );

        // The page: counts per class, a row per finding, nothing unescaped.
        let (status, page) = app
            .get(
                &format!("/v1/reconciliations/{id}/report.html"),
                &app.auditor,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("<td>projection_drift</td><td>2</td>"),
            "{page}"
        );
        assert!(page.contains("<td>event</td><td>0</td>"), "{page}");
        assert!(
            page.contains("balance_differs") && page.contains("&lt;b&gt;x&lt;/b&gt;"),
            "{page}"
        );
        assert!(!page.contains("<b>x</b>"), "{page}");

        // Auditors read runs but may not start one (a repair writes).
        let (status, body) = app
            .get(&format!("/v1/reconciliations/{id}"), &app.auditor)
            .await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = app
            .post("/v1/reconciliations", &app.auditor, Some("{}"))
            .await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("\"FORBIDDEN\""), "{body}");

        // A repair run through the API fixes w-3 and the planted row.
        let (status, body) = app
            .post(
                "/v1/reconciliations",
                &app.admin,
                Some(r#"{"repair": true}"#),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let run = app.finished(&id).await;
        assert_eq!(
            run["remaining"],
            json!({"projection_drift": 0, "event": 0}),
            "{run}"
        );

        let (status, doc) = app.get("/openapi.json", &app.auditor).await;
        assert_eq!(status, 200);
        let doc: Value = serde_json::from_str(&doc).unwrap();
        for path in [
            "/v1/reconciliations",
            "/v1/reconciliations/{id}",
            "/v1/reconciliations/{id}/report.html",
        ] {
            assert!(
                doc["paths"][path].is_object(),
                "{path} missing from the OpenAPI"
            );
        }
        assert!(doc["components"]["schemas"]["Finding"].is_object());
        assert!(doc["components"]["schemas"]["Run"].is_object());

        let (status, body) = app
            .post(
                "/v1/reconciliations",
                &app.admin,
                Some(r#"{"repair": "yes"}"#),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        for path in [
            "/v1/reconciliations/00000000-0000-0000-0000-000000000000",
            "/v1/reconciliations/nope/report.html",
        ] {
            let (status, body) = app.get(path, &app.auditor).await;
            assert_eq!(status, 404, "{body}");
            assert!(body.contains("RECONCILIATION_NOT_FOUND"), "{body}");
        }
    }
);

// CLI -------------------------------------------------------------------------------

fn cli(db: &TestDb, args: &[&str]) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .arg("--database-url")
        .arg(&db.url)
        .args(args)
        .output()
        .expect("run factledger");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON report ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

both_backends!(
    the_cli_exits_2_while_findings_remain_and_records_every_run,
    |db: TestDb| async move {
        history(&db).await;
        let p = projections(&db).await;
        catch_up_wallet(&db.store, &p).await.unwrap();

        let (code, clean) = cli(&db, &["reconcile"]);
        assert_eq!(code, Some(0), "{clean}");
        assert_eq!(clean["status"], "succeeded");
        assert_eq!(clean["counts"], json!({"projection_drift": 0, "event": 0}));

        db.store
            .execute_raw("DELETE FROM wallet_ledger WHERE wallet_id = 'w-2' AND sequence = 5")
            .await
            .unwrap();
        let (code, drifted) = cli(&db, &["reconcile"]);
        assert_eq!(code, Some(2), "{drifted}");
        assert_eq!(drifted["findings"][0]["kind"], "ledger_missing");
        assert_eq!(drifted["findings"][0]["key"], "sequence=5");

        let (code, repaired) = cli(&db, &["reconcile", "--repair"]);
        assert_eq!(code, Some(0), "{repaired}");
        assert_eq!(repaired["counts"]["projection_drift"], 1);
        assert_eq!(repaired["findings"][0]["repaired"], true);
        assert_eq!(cli(&db, &["reconcile"]).0, Some(0));

        // Every run is stored with its report, readable after the process is gone.
        let id = drifted["id"].as_str().unwrap();
        let stored = reconcile::find_run(&p, id)
            .await
            .unwrap()
            .expect("recorded");
        assert_eq!(stored.status, RunStatus::Succeeded);
        assert_eq!(stored.requested_by, "cli");
        let report = stored.report.expect("report");
        assert_eq!(report.counts.projection_drift, 1);
        assert_eq!(
            serde_json::to_value(&report).unwrap()["findings"],
            drifted["findings"]
        );
    }
);

both_backends!(
    a_run_whose_process_died_reads_as_abandoned,
    |db: TestDb| async move {
        let p = projections(&db).await;
        let old = "2000-01-01T00:00:00.000000Z";
        let fresh = factledger::infra::store::time_text(&chrono::Utc::now());
        for (id, beat) in [("run-dead", old), ("run-alive", fresh.as_str())] {
            db.store
                .execute_raw(&format!(
                    "INSERT INTO reconciliations (id, status, repair, requested_by, started_at, \
                     heartbeat_at) VALUES ('{id}', 'running', 0, 'test', '{old}', '{beat}')"
                ))
                .await
                .unwrap();
        }
        let status = |id: &'static str| {
            let p = p.clone();
            async move { reconcile::find_run(&p, id).await.unwrap().unwrap().status }
        };
        assert_eq!(status("run-dead").await, RunStatus::Abandoned);
        assert_eq!(status("run-alive").await, RunStatus::Running);
    }
);

// SPEC §11 case 15, withdrawal/frozen: the wallet aggregate checks only the frozen
// bucket, so with another withdrawal's money frozen it lets one withdrawal leave
// frozen twice (paid out, then unfrozen: a duplicate "failed" webhook after the
// payout) or release what it never froze. Reconciliation finds each, as an event
// finding whose automatic repair is refused; wallet w-1's clean withdrawal wd-1 is
// not reported.
both_backends!(
    withdrawal_frozen_reconciliation_finds_planted_double_releases_and_refuses_repair,
    |db: TestDb| async move {
        history(&db).await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        for c in [
            json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL", "ref_id": "wd-2", "amount_minor": 50}),
            json!({"type": "PayOutFrozen", "ref_type": "WITHDRAWAL", "ref_id": "wd-2", "amount_minor": 50}),
        ] {
            run(&bus, "w-1", c).await;
        }
        // The wallet refuses both now (FREEZE_NOT_OPEN); history written before that
        // rule can still hold them, so they are planted past the command path.
        // Planted: wd-2's money leaves frozen a second time (wd-1 still holds 120).
        plant_unpaired(&db, "w-1", EntryType::WithdrawUnfreeze, "wd-2", 50).await;
        // Planted: a release of a withdrawal that never froze.
        plant_unpaired(&db, "w-1", EntryType::WithdrawUnfreeze, "wd-9", 10).await;
        let p = projections(&db).await;
        catch_up_wallet(&db.store, &p).await.unwrap();
        for page_rows in [reconcile::PAGE_ROWS, 1] {
            let options = ReconcileOptions {
                page_rows,
                repair: true,
                anchor_file: None,
                ..Default::default()
            };
            let report = reconcile::reconcile(&db.store, &p, options).await.unwrap();
            assert_eq!(report.withdrawals_checked, 3, "wd-1, wd-2, wd-9");
            let withdrawals: Vec<_> = report
                .findings
                .iter()
                .filter(|f| f.kind == reconcile::FindingKind::WithdrawalFrozenMismatch)
                .collect();
            let keys: BTreeSet<_> = withdrawals.iter().map(|f| f.key.clone()).collect();
            assert_eq!(
                keys,
                BTreeSet::from([
                    "wallet_id=w-1, ref_type=WITHDRAWAL, ref_id=wd-2".to_owned(),
                    "wallet_id=w-1, ref_type=WITHDRAWAL, ref_id=wd-9".to_owned(),
                ]),
                "pages of {page_rows}: {withdrawals:#?}"
            );
            for f in &withdrawals {
                assert_eq!(f.class, FindingClass::Event);
                assert!(f.repair.starts_with("refused"), "{f:?}");
                assert_ne!(f.repaired, Some(true), "{f:?}");
            }
            let wd2 = withdrawals
                .iter()
                .find(|f| f.key.ends_with("wd-2"))
                .unwrap();
            assert!(
                wd2.detail.contains("both unfrozen (50) and paid out (50)"),
                "{}",
                wd2.detail
            );
            assert_eq!(
                (wd2.expected.clone(), wd2.actual.clone()),
                (Some(json!(50)), Some(json!(100)))
            );
            assert_eq!(wd2.events.len(), 3);
            let wd9 = withdrawals
                .iter()
                .find(|f| f.key.ends_with("wd-9"))
                .unwrap();
            assert!(
                wd9.detail.contains("without ever freezing"),
                "{}",
                wd9.detail
            );
            // Nothing else is wrong: the wallets' own replay agrees with the rows, and
            // the withdrawals (120 − 50 − 10 = 60 held) account for the frozen bucket.
            assert_eq!(report.findings.len(), 2, "{:#?}", report.findings);
            assert_eq!(report.remaining.event, 2);
        }
    }
);
