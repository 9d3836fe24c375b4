//! Rebuilds on demand: a full rebuild gives the rows the live projection has, swaps
//! them in atomically (also while commands and the runner go on), a killed rebuild
//! leaves the live tables untouched, a scoped rebuild touches one wallet. Both backends.

use crate::common;

use common::{run, TestDb};
use factledger::infra::db::Db;
use factledger::infra::store;
use factledger::runtime::bus::CommandBus;
use factledger::runtime::projection::catch_up_wallet;
use factledger::runtime::rebuild::{self, RebuildError, RebuildOptions, RebuildStatus, Scope};
use factledger_aggregates::wallet::Wallet;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `wallets` wallets, each opened, credited three times, one credit released, a
/// freeze, and on every third wallet a withdrawal block placed and (on every sixth)
/// lifted again: every kind of row the projection writes.
async fn history(bus: &CommandBus<Wallet>, prefix: &str, wallets: usize) {
    for n in 0..wallets {
        let w = format!("{prefix}{n}");
        run(
            bus,
            &w,
            json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
        )
        .await;
        for c in 1..=3 {
            run(
                bus,
                &w,
                json!({"type": "CreditPending", "ref_type": "COMMISSION",
                    "ref_id": format!("{w}-c{c}"), "amount_minor": 100 * c}),
            )
            .await;
        }
        run(
            bus,
            &w,
            json!({"type": "ReleasePending", "ref_type": "COMMISSION",
                "ref_id": format!("{w}-c3"), "amount_minor": 300}),
        )
        .await;
        run(
            bus,
            &w,
            json!({"type": "FreezeForWithdrawal", "ref_type": "WITHDRAWAL",
                "ref_id": format!("{w}-wd"), "amount_minor": 120}),
        )
        .await;
        if n % 3 == 0 {
            run(
                bus,
                &w,
                json!({"type": "BlockWithdrawals", "ref_type": "RISK", "ref_id": format!("{w}-r"),
                    "reason": "it's \"checked\" \\ twice"}),
            )
            .await;
        }
        if n % 6 == 0 {
            run(
                bus,
                &w,
                json!({"type": "UnblockWithdrawals", "ref_type": "RISK", "ref_id": format!("{w}-r")}),
            )
            .await;
        }
    }
}

fn joined(columns: &[&str], mysql: bool) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|c| format!("COALESCE(CAST({c} AS CHAR), '~')"))
        .collect();
    if mysql {
        format!("CONCAT_WS('|', {})", cols.join(", "))
    } else {
        cols.join(" || '|' || ")
    }
}

/// Every row of the wallet projection's tables, as text, in key order; and the
/// checkpoint position.
async fn dump(db: &Db) -> (Vec<String>, i64) {
    let tables: [(&str, &[&str], &str); 3] = [
        (
            "wallet_balances",
            &[
                "wallet_id",
                "user_id",
                "currency",
                "pending_minor",
                "available_minor",
                "frozen_minor",
                "risk_hold_minor",
                "version",
                "last_position",
            ],
            "wallet_id",
        ),
        (
            "wallet_ledger",
            &[
                "wallet_id",
                "sequence",
                "global_position",
                "ref_type",
                "ref_id",
                "entry_type",
                "amount_minor",
                "delta_pending_minor",
                "delta_available_minor",
                "delta_frozen_minor",
                "delta_risk_hold_minor",
                "before_pending_minor",
                "before_available_minor",
                "before_frozen_minor",
                "before_risk_hold_minor",
                "after_pending_minor",
                "after_available_minor",
                "after_frozen_minor",
                "after_risk_hold_minor",
                "recorded_at",
            ],
            "wallet_id, sequence",
        ),
        (
            "wallet_blocks",
            &["wallet_id", "ref_type", "ref_id", "reason"],
            "wallet_id, ref_type, ref_id",
        ),
    ];
    let mut rows = Vec::new();
    for (table, columns, order) in tables {
        let is_mysql = matches!(db, Db::Mysql(_));
        let sql = format!(
            "SELECT {} FROM {table} ORDER BY {order}",
            joined(columns, is_mysql)
        );
        let texts: Vec<Vec<u8>> = match db {
            Db::Mysql(p) => sqlx::query_scalar(&sql).fetch_all(p).await.unwrap(),
            Db::Sqlite(p) => sqlx::query_scalar::<_, String>(&sql)
                .fetch_all(p)
                .await
                .unwrap()
                .into_iter()
                .map(String::into_bytes)
                .collect(),
        };
        rows.extend(
            texts
                .into_iter()
                .map(|t| format!("{table}: {}", String::from_utf8(t).unwrap())),
        );
    }
    let position = db.checkpoint("wallet", 1).await.unwrap();
    (rows, position)
}

async fn exec(db: &TestDb, sql: &str) {
    db.store.execute_raw(sql).await.expect(sql);
}

async fn full_rebuild(db: &TestDb, projections: &Db, flush_events: usize) -> RebuildStatus {
    let started = rebuild::begin(&db.store, projections, "wallet", Scope::Full, "tester")
        .await
        .expect("rebuild starts");
    let options = RebuildOptions {
        flush_events,
        pause_between_batches: None,
    };
    rebuild::run(&db.store, projections, &started, &options, &|_| {})
        .await
        .expect("rebuild succeeds")
}

both_backends!(
    a_full_rebuild_yields_the_rows_of_the_live_projection,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus, "w-", 7).await;
        let projections = store::open(&db.url).await.unwrap().db;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let live = dump(&projections).await;
        let head = db.store.head_position().await.unwrap();
        assert_eq!(live.1, head);
        assert!(live.0.iter().any(|r| r.starts_with("wallet_blocks: ")));

        // Small batches: wallets span batches, blocks are placed and lifted in one.
        let status = full_rebuild(&db, &projections, 4).await;
        assert_eq!(status.status, "succeeded");
        assert_eq!(status.stage, "done");
        assert_eq!(status.events_applied, head);
        assert_eq!(status.position, head);
        assert_eq!(dump(&projections).await, live);

        // The swapped-in tables are live: the runner goes on from the new checkpoint,
        // and a second rebuild (over tables that were themselves swapped in) agrees.
        history(&bus, "x-", 2).await;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let after = dump(&projections).await;
        assert_eq!(after.1, db.store.head_position().await.unwrap());
        assert!(after.0.len() > live.0.len());
        full_rebuild(&db, &projections, 1000).await;
        assert_eq!(dump(&projections).await, after);
    }
);

both_backends!(
    a_rebuild_under_load_swaps_without_losing_or_doubling_rows,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus, "w-", 6).await;
        let projections = store::open(&db.url).await.unwrap().db;
        let _runner =
            factledger::runtime::projection::spawn_wallet(db.store.clone(), projections.clone());
        // Commands keep coming and the runner keeps applying them while the rebuild
        // copies, holds, catches up and swaps.
        let writer = {
            let bus = bus.clone();
            tokio::spawn(async move { history(&bus, "load-", 8).await })
        };
        let status = full_rebuild(&db, &projections, 3).await;
        assert_eq!(status.status, "succeeded");
        writer.await.unwrap();
        let head = db.store.head_position().await.unwrap();
        assert_eq!(projections.wait_for(head).await.unwrap(), head);
        let concurrent = dump(&projections).await;
        // The reference: the same log rebuilt with nothing else going on.
        full_rebuild(&db, &projections, 1000).await;
        assert_eq!(dump(&projections).await, concurrent);
        // 14 wallets × 5 movements.
        let ledger = concurrent
            .0
            .iter()
            .filter(|r| r.starts_with("wallet_ledger: "))
            .count();
        assert_eq!(ledger, 14 * 5);
    }
);

both_backends!(
    a_scoped_rebuild_recomputes_exactly_that_wallets_rows,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus, "w-", 4).await;
        let projections = store::open(&db.url).await.unwrap().db;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let live = dump(&projections).await;
        // Damage two wallets' rows; rebuild only one of them.
        exec(
            &db,
            "UPDATE wallet_balances SET available_minor = 999 WHERE wallet_id = 'w-0'",
        )
        .await;
        exec(
            &db,
            "DELETE FROM wallet_ledger WHERE wallet_id = 'w-0' AND sequence = 3",
        )
        .await;
        exec(&db, "DELETE FROM wallet_blocks WHERE wallet_id = 'w-3'").await;
        exec(
            &db,
            "UPDATE wallet_balances SET frozen_minor = 7 WHERE wallet_id = 'w-1'",
        )
        .await;
        let replayed = rebuild::rebuild_wallet_scoped(&db.store, &projections, "w-0")
            .await
            .unwrap();
        assert_eq!(
            replayed, 8,
            "open, 3 credits, release, freeze, block, unblock"
        );
        let scoped = dump(&projections).await;
        let wallet = |rows: &[String], w: &str| -> Vec<String> {
            rows.iter()
                .filter(|r| r.split(": ").nth(1).unwrap().starts_with(&format!("{w}|")))
                .cloned()
                .collect()
        };
        assert_eq!(wallet(&scoped.0, "w-0"), wallet(&live.0, "w-0"));
        assert_ne!(
            wallet(&scoped.0, "w-1"),
            wallet(&live.0, "w-1"),
            "untouched"
        );
        assert_ne!(
            wallet(&scoped.0, "w-3"),
            wallet(&live.0, "w-3"),
            "untouched"
        );
        assert_eq!(scoped.1, live.1, "the checkpoint does not move");
        // Through the rebuild entry point too (as the CLI and the API run it), with
        // its record.
        let started = rebuild::begin(
            &db.store,
            &projections,
            "wallet",
            Scope::parse(Some("wallet:w-3")).unwrap(),
            "tester",
        )
        .await
        .unwrap();
        let status = rebuild::run(
            &db.store,
            &projections,
            &started,
            &RebuildOptions::default(),
            &|_| {},
        )
        .await
        .unwrap();
        assert_eq!(
            (
                status.status.as_str(),
                status.scope.as_deref(),
                status.events_applied
            ),
            ("succeeded", Some("wallet:w-3"), 7)
        );
        assert_eq!(
            wallet(&dump(&projections).await.0, "w-3"),
            wallet(&live.0, "w-3")
        );
        // A wallet with no events loses rows it should not have.
        exec(
            &db,
            "INSERT INTO wallet_blocks (wallet_id, ref_type, ref_id) VALUES ('ghost', 'RISK', 'g')",
        )
        .await;
        assert_eq!(
            rebuild::rebuild_wallet_scoped(&db.store, &projections, "ghost")
                .await
                .unwrap(),
            0
        );
        assert!(wallet(&dump(&projections).await.0, "ghost").is_empty());
    }
);

both_backends!(
    one_full_rebuild_at_a_time_and_bad_requests_are_named,
    |db: TestDb| async move {
        let projections = store::open(&db.url).await.unwrap().db;
        let first = rebuild::begin(&db.store, &projections, "wallet", Scope::Full, "a")
            .await
            .unwrap();
        let second = rebuild::begin(&db.store, &projections, "wallet", Scope::Full, "b").await;
        match second {
            Err(RebuildError::AlreadyRunning { id, .. }) => assert_eq!(id, first.id),
            other => panic!("expected AlreadyRunning, got {other:?}"),
        }
        // Scoped rebuilds do not need the lease.
        rebuild::begin(
            &db.store,
            &projections,
            "wallet",
            Scope::Wallet("w-1".into()),
            "c",
        )
        .await
        .unwrap();
        assert!(matches!(
            rebuild::begin(&db.store, &projections, "orders", Scope::Full, "a").await,
            Err(RebuildError::UnknownProjection(_))
        ));
        for bad in ["wallet:", "order:1", "w-1"] {
            assert!(
                matches!(Scope::parse(Some(bad)), Err(RebuildError::BadScope(_))),
                "{bad}"
            );
        }
    }
);

both_backends!(
    a_hold_left_by_a_dead_rebuild_is_resolved_by_what_the_tables_say,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus, "w-", 2).await;
        let projections = store::open(&db.url).await.unwrap().db;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let live = dump(&projections).await;
        let stale = "2000-01-01T00:00:00.000000Z";
        // Died while catching up: the live tables and checkpoint are kept.
        exec(
            &db,
            "UPDATE projection_checkpoints SET hold = 'catchup' WHERE name = 'wallet'",
        )
        .await;
        exec(
            &db,
            &format!(
                "INSERT INTO projection_leases (name, rebuild_id, heartbeat) \
                 VALUES ('wallet', 'rb_dead', '{stale}')"
            ),
        )
        .await;
        history(&bus, "y-", 1).await;
        // Held: the runner cannot advance...
        assert!(catch_up_wallet(&db.store, &projections).await.is_err());
        // ...until the stale hold is resolved (the continuous runner does this).
        rebuild::resolve_stale_hold(&projections).await.unwrap();
        assert_eq!(dump(&projections).await, live);
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let caught_up = dump(&projections).await;
        assert_eq!(caught_up.1, db.store.head_position().await.unwrap());

        // Died (or stalled) after the rename, before the checkpoint moved: the live
        // set's own generation and position differ from the checkpoint's. The runner
        // cannot advance past that; the checkpoint adopts the set's position.
        let target = caught_up.1;
        exec(
            &db,
            &format!("UPDATE wallet_generation SET generation = 7, position = {target}"),
        )
        .await;
        exec(
            &db,
            "UPDATE projection_checkpoints SET position = 1, hold = NULL WHERE name = 'wallet'",
        )
        .await;
        assert!(catch_up_wallet(&db.store, &projections).await.is_err());
        rebuild::resolve_stale_hold(&projections).await.unwrap();
        assert_eq!(dump(&projections).await, caught_up);
        let generation: i64 = match &projections {
            Db::Mysql(p) => sqlx::query_scalar(
                "SELECT generation FROM projection_checkpoints WHERE name = 'wallet'",
            )
            .fetch_one(p)
            .await
            .unwrap(),
            Db::Sqlite(p) => sqlx::query_scalar(
                "SELECT generation FROM projection_checkpoints WHERE name = 'wallet'",
            )
            .fetch_one(p)
            .await
            .unwrap(),
        };
        assert_eq!(generation, 7);
        history(&bus, "w2-", 1).await;
        catch_up_wallet(&db.store, &projections).await.unwrap();

        // A fresh lease is not stale: its hold stays.
        exec(
            &db,
            "UPDATE projection_checkpoints SET hold = 'catchup' WHERE name = 'wallet'",
        )
        .await;
        let fresh = factledger::infra::store::time_text(&chrono::Utc::now());
        exec(
            &db,
            &format!("UPDATE projection_leases SET rebuild_id = 'rb_alive', heartbeat = '{fresh}'"),
        )
        .await;
        rebuild::resolve_stale_hold(&projections).await.unwrap();
        history(&bus, "z-", 1).await;
        assert!(catch_up_wallet(&db.store, &projections).await.is_err());
    }
);

fn factledger(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_factledger"));
    cmd.arg("--database-url")
        .arg(url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

both_backends!(
    killing_a_rebuild_leaves_the_live_tables_untouched_and_it_can_be_rerun,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus, "w-", 6).await;
        let projections = store::open(&db.url).await.unwrap().db;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let live = dump(&projections).await;

        // Two events per batch and a pause after each: slow enough to kill mid-copy.
        let mut child = factledger(&db.url)
            .args([
                "rebuild",
                "wallet",
                "--batch-events",
                "2",
                "--pause-ms",
                "200",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn factledger rebuild");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let copied: Option<i64> = match &projections {
                Db::Mysql(p) => sqlx::query_scalar(
                    "SELECT MAX(events_applied) FROM projection_rebuilds WHERE status = 'running'",
                )
                .fetch_one(p)
                .await
                .unwrap(),
                Db::Sqlite(p) => sqlx::query_scalar(
                    "SELECT MAX(events_applied) FROM projection_rebuilds WHERE status = 'running'",
                )
                .fetch_one(p)
                .await
                .unwrap(),
            };
            if copied.unwrap_or(0) >= 4 {
                break;
            }
            assert!(Instant::now() < deadline, "the rebuild never made progress");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child.kill().expect("kill the rebuild");
        child.wait().unwrap();

        // The live tables are as they were, and the runner goes on.
        assert_eq!(dump(&projections).await, live);
        history(&bus, "more-", 1).await;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let advanced = dump(&projections).await;
        assert_eq!(advanced.1, db.store.head_position().await.unwrap());

        // Re-run: refused while the dead rebuild's lease is fresh, then it completes.
        let deadline = Instant::now() + Duration::from_millis(rebuild::LEASE_MS as u64 + 10_000);
        let output = loop {
            let out = factledger(&db.url)
                .args(["rebuild", "wallet"])
                .output()
                .expect("run factledger rebuild");
            if out.status.success() {
                break out;
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("already running"), "{stderr}");
            assert!(
                Instant::now() < deadline,
                "the dead rebuild's lease never expired"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(status["status"], "succeeded");
        // The same rows; the checkpoint is one further: the rebuild recorded itself as
        // an admin action (an `admin` event, issue 14) and caught up past it.
        let rebuilt = dump(&projections).await;
        assert_eq!(rebuilt.0, advanced.0);
        assert_eq!(rebuilt.1, advanced.1 + 1);
        assert_eq!(rebuilt.1, db.store.head_position().await.unwrap());
        // The killed one is on record as failed (abandoned), not running forever.
        let running: i64 = match &projections {
            Db::Mysql(p) => sqlx::query_scalar(
                "SELECT COUNT(*) FROM projection_rebuilds WHERE status = 'running'",
            )
            .fetch_one(p)
            .await
            .unwrap(),
            Db::Sqlite(p) => sqlx::query_scalar(
                "SELECT COUNT(*) FROM projection_rebuilds WHERE status = 'running'",
            )
            .fetch_one(p)
            .await
            .unwrap(),
        };
        assert_eq!(running, 0);
    }
);

both_backends!(
    a_full_rebuild_waits_for_a_running_reconciliation_before_it_swaps,
    |db: TestDb| async move {
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        history(&bus, "w-", 3).await;
        let projections = store::open(&db.url).await.unwrap().db;
        catch_up_wallet(&db.store, &projections).await.unwrap();
        let live = dump(&projections).await;
        // A reconciliation whose process died (old heartbeat) does not hold anything
        // up; a live one does.
        let old = "2000-01-01T00:00:00.000000Z";
        let fresh = factledger::infra::store::time_text(&chrono::Utc::now());
        for (id, beat) in [("run-dead", old), ("run-alive", fresh.as_str())] {
            exec(
                &db,
                &format!(
                    "INSERT INTO reconciliations (id, status, repair, requested_by, \
                     started_at, heartbeat_at) VALUES ('{id}', 'running', 0, 't', '{old}', \
                     '{beat}')"
                ),
            )
            .await;
        }
        let started = rebuild::begin(&db.store, &projections, "wallet", Scope::Full, "t")
            .await
            .unwrap();
        let task = {
            let (store, p, started) = (db.store.clone(), projections.clone(), started.clone());
            tokio::spawn(async move {
                rebuild::run(&store, &p, &started, &RebuildOptions::default(), &|_| {}).await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = rebuild::status(&projections, &started.id)
                .await
                .unwrap()
                .unwrap();
            if s.stage == "waiting" {
                break;
            }
            assert!(Instant::now() < deadline, "never waited: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!task.is_finished(), "swapped while a reconciliation ran");
        exec(
            &db,
            "UPDATE reconciliations SET status = 'succeeded' WHERE id = 'run-alive'",
        )
        .await;
        let status = task.await.unwrap().expect("rebuild succeeds");
        assert_eq!(status.status, "succeeded");
        assert_eq!(dump(&projections).await, live);
    }
);
