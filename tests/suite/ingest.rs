//! The ingest unit (R-ORD-2) and settlement (R-COM-2), with the acceptance cases of
//! seed 003 §18 (SPEC §11) they cover, each named after its case. Both backends.

use crate::common;

use common::{meta, reference_data, TestDb};
use factledger::affiliate::ingest::Ingestor;
use factledger::affiliate::settlement::{settle_one, Settled};
use factledger::affiliate::{IngestResult, OrderIngestor};
use factledger::runtime::bus::load;
use factledger::runtime::unit::run_command;
use factledger_aggregates::affiliate_order::{AffiliateOrder, NormalisedOrder, OrderStatus};
use factledger_aggregates::campaign::Campaign;
use factledger_aggregates::commission::{Commission, CommissionStatus};
use factledger_aggregates::wallet::Wallet;
use serde_json::{json, Value};

const ORDER: &str = "SHOPEE:o-1";
const CASHBACK: &str = "SHOPEE:o-1:CASHBACK";
const INVITER: &str = "SHOPEE:o-1:INVITER_REWARD";
const OWNER_WALLET: &str = "u-1:IDR";
const INVITER_WALLET: &str = "u-0:IDR";

/// A campaign for SHOPEE × ID whose quota fits `orders` orders.
async fn campaign(db: &TestDb, orders: i64) {
    run_command::<Campaign>(
        &db.store,
        &meta(),
        "SHOPEE:ID",
        serde_json::from_value(json!({"type": "Open", "campaign_id": "SHOPEE:ID",
            "quota_unit": "ORDERS", "quota_limit": orders,
            "starts_at": "2026-01-01T00:00:00Z"}))
        .unwrap(),
    )
    .await
    .unwrap();
}

/// Order `id` as the platform reports it at minute `minute` of 2026-03-01.
fn order(id: &str, status: &str, gmv: i64, commission: i64, minute: u32) -> NormalisedOrder {
    serde_json::from_value(json!({
        "platform": "SHOPEE", "country": "ID", "platform_order_id": id,
        "status": status, "currency": "IDR", "gmv_minor": gmv,
        "platform_commission_minor": commission,
        "ordered_at": "2026-03-01T00:00:00Z",
        "platform_updated_at": format!("2026-03-01T00:{minute:02}:00Z"),
        "attribution": {"kind": "TRACKING_ID", "value": "t-1"}
    }))
    .unwrap()
}

fn ingestor(db: &TestDb) -> Ingestor {
    Ingestor::new(db.store.clone(), meta())
}

async fn ingest(db: &TestDb, o: NormalisedOrder) -> IngestResult {
    ingestor(db).ingest_one(o, None).await.unwrap()
}

async fn events(db: &TestDb, aggregate_type: &str, id: &str) -> Vec<String> {
    db.store
        .read_stream(aggregate_type, id, 1, 1_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

async fn wallet(db: &TestDb, id: &str) -> Wallet {
    load::<Wallet>(&db.store, id).await.unwrap().state
}

async fn commission(db: &TestDb, id: &str) -> (CommissionStatus, i64) {
    let c = load::<Commission>(&db.store, id).await.unwrap().state;
    let r = c.record.expect("commission recorded");
    (r.status, r.amount_minor)
}

async fn outbox_rows(db: &TestDb) -> i64 {
    let sql = "SELECT COUNT(*) FROM outbox";
    match store_db(db).await {
        factledger::infra::db::Db::Mysql(p) => sqlx::query_scalar(sql).fetch_one(&p).await.unwrap(),
        factledger::infra::db::Db::Sqlite(p) => {
            sqlx::query_scalar(sql).fetch_one(&p).await.unwrap()
        }
    }
}

async fn store_db(db: &TestDb) -> factledger::infra::db::Db {
    factledger::infra::store::open(&db.url).await.unwrap().db
}

fn at(s: &str) -> chrono::DateTime<chrono::Utc> {
    s.parse().unwrap()
}

store_backends!(
    same_order_replayed_100_times_is_one_of_each,
    |db: TestDb| async move {
        reference_data(&db).await;
        campaign(&db, 10).await;
        let first = ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await;
        assert_eq!(first.result, "created", "{first:?}");
        let outbox = outbox_rows(&db).await;
        let head = db.store.head_position().await.unwrap();
        for _ in 0..99 {
            let again = ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await;
            assert_eq!(again.result, "unchanged", "{again:?}");
        }
        // One order, one commission per role, one reservation, one ledger entry.
        assert_eq!(
            events(&db, "affiliate_order", ORDER).await,
            ["OrderIngested"]
        );
        assert_eq!(
            events(&db, "commission", CASHBACK).await,
            ["CommissionRecorded"]
        );
        assert_eq!(
            events(&db, "commission", INVITER).await,
            ["CommissionRecorded"]
        );
        assert_eq!(
            events(&db, "campaign", "SHOPEE:ID").await,
            ["CampaignOpened", "QuotaReserved"]
        );
        assert_eq!(
            events(&db, "wallet", OWNER_WALLET).await,
            ["WalletOpened", "PendingCredited"]
        );
        assert_eq!(
            events(&db, "wallet", INVITER_WALLET).await,
            ["WalletOpened", "PendingCredited"]
        );
        // M = min(12,000, 10 % × 100,000) = 10,000: cashback 6,000, inviter 1,000.
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            6_000
        );
        assert_eq!(
            wallet(&db, INVITER_WALLET).await.balances.pending_minor,
            1_000
        );
        assert_eq!(db.store.head_position().await.unwrap(), head);
        assert_eq!(outbox_rows(&db).await, outbox);
    }
);

store_backends!(
    an_exception_after_the_commission_leaves_nothing_of_the_unit,
    |db: TestDb| async move {
        reference_data(&db).await;
        let (head, outbox) = (
            db.store.head_position().await.unwrap(),
            outbox_rows(&db).await,
        );
        // The store fails the unit after writing the order and a commission.
        let failed = ingestor(&db)
            .failing_after_streams(2)
            .ingest_page(vec![order("o-1", "PENDING", 100_000, 12_000, 1)], None)
            .await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(db.store.head_position().await.unwrap(), head);
        assert_eq!(outbox_rows(&db).await, outbox);
        assert!(events(&db, "affiliate_order", ORDER).await.is_empty());
        assert!(events(&db, "commission", CASHBACK).await.is_empty());
        assert!(events(&db, "wallet", OWNER_WALLET).await.is_empty());
        // The same order then goes through whole.
        assert_eq!(
            ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1))
                .await
                .result,
            "created"
        );
    }
);

store_backends!(
    out_of_order_replay_pending_completed_old_pending_ends_completed,
    |db: TestDb| async move {
        reference_data(&db).await;
        let results = [
            ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await,
            ingest(&db, order("o-1", "COMPLETED", 100_000, 12_000, 5)).await,
            ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await,
            // Newer but contradicting the matrix: ignored too.
            ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 9)).await,
        ];
        let kinds: Vec<&str> = results.iter().map(|r| r.result.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "created",
                "updated",
                "ignored_stale",
                "ignored_illegal_transition"
            ]
        );
        let o = load::<AffiliateOrder>(&db.store, ORDER)
            .await
            .unwrap()
            .state;
        assert_eq!(o.order.unwrap().status, OrderStatus::Completed);
        assert_eq!(
            commission(&db, CASHBACK).await,
            (CommissionStatus::Pending, 6_000)
        );
    }
);

store_backends!(
    campaign_quota_for_one_order_goes_to_the_first_and_passes_on_after_a_refund,
    |db: TestDb| async move {
        reference_data(&db).await;
        campaign(&db, 1).await;
        let ing = ingestor(&db);
        let (a, b) = tokio::join!(
            ing.ingest_one(order("o-1", "PENDING", 100_000, 12_000, 1), None),
            ing.ingest_one(order("o-2", "PENDING", 100_000, 12_000, 1), None)
        );
        assert_eq!(
            (a.unwrap().result, b.unwrap().result),
            ("created".into(), "created".into())
        );
        let c = load::<Campaign>(&db.store, "SHOPEE:ID")
            .await
            .unwrap()
            .state;
        assert_eq!(c.reserved, 1);
        assert_eq!(c.reservations.len(), 1, "{:?}", c.reservations);
        let (winner, loser) = if c.reservations.contains_key("SHOPEE:o-1") {
            ("o-1", "o-2")
        } else {
            ("o-2", "o-1")
        };
        // The loser's replay cannot reserve while the quota is taken.
        assert_eq!(
            ingest(&db, order(loser, "PENDING", 100_000, 12_000, 1))
                .await
                .result,
            "unchanged"
        );
        let c = load::<Campaign>(&db.store, "SHOPEE:ID")
            .await
            .unwrap()
            .state;
        assert_eq!(c.reservations.len(), 1);
        // The winner is refunded: its reservation is given back …
        assert_eq!(
            ingest(&db, order(winner, "REFUNDED", 100_000, 12_000, 3))
                .await
                .result,
            "updated"
        );
        let c = load::<Campaign>(&db.store, "SHOPEE:ID")
            .await
            .unwrap()
            .state;
        assert_eq!(c.reserved, 0);
        // … and the next ingest of the other order takes it.
        ingest(&db, order(loser, "PENDING", 100_000, 12_000, 1)).await;
        let c = load::<Campaign>(&db.store, "SHOPEE:ID")
            .await
            .unwrap()
            .state;
        assert_eq!(c.reserved, 1);
        let held = &c.reservations[&format!("SHOPEE:{loser}")];
        assert!(!held.released);
        assert!(c.reservations[&format!("SHOPEE:{winner}")].released);
    }
);

store_backends!(
    refund_after_release_opens_one_recovery_and_blocks_withdrawals,
    |db: TestDb| async move {
        reference_data(&db).await;
        ingest(&db, order("o-1", "COMPLETED", 100_000, 12_000, 1)).await;
        let (settled, _) = settle_one(
            &db.store,
            &meta(),
            CASHBACK,
            at("2026-03-09T00:00:00Z"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(settled, Settled::Released);
        let w = wallet(&db, OWNER_WALLET).await;
        assert_eq!(
            (w.balances.pending_minor, w.balances.available_minor),
            (0, 6_000)
        );
        for minute in [5, 5, 5, 6] {
            ingest(&db, order("o-1", "REFUNDED", 100_000, 12_000, minute)).await;
        }
        // No debit of available, no debt; one recovery review; withdrawals blocked.
        let w = wallet(&db, OWNER_WALLET).await;
        assert_eq!(
            (w.balances.pending_minor, w.balances.available_minor),
            (0, 6_000)
        );
        assert_eq!(
            w.withdrawal_blocks.keys().collect::<Vec<_>>(),
            ["RECOVERY_REVIEW/SHOPEE:o-1:CASHBACK"]
        );
        assert_eq!(
            events(&db, "commission", CASHBACK).await,
            [
                "CommissionRecorded",
                "CommissionReleased",
                "RecoveryReviewOpened"
            ]
        );
        assert_eq!(
            commission(&db, CASHBACK).await.0,
            CommissionStatus::RecoveryReview
        );
        assert_eq!(
            events(&db, "wallet", OWNER_WALLET).await,
            [
                "WalletOpened",
                "PendingCredited",
                "PendingReleased",
                "WithdrawalsBlocked"
            ]
        );
        // The inviter's reward was never released: it is simply reversed.
        assert_eq!(commission(&db, INVITER).await.0, CommissionStatus::Invalid);
        assert_eq!(wallet(&db, INVITER_WALLET).await.balances.pending_minor, 0);
    }
);

store_backends!(
    partial_refund_freezes_the_commission_and_a_rejected_refund_restores_it,
    |db: TestDb| async move {
        reference_data(&db).await;
        ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await;
        // A refund opens: FROZEN, and settlement does not release it when due.
        assert_eq!(
            ingest(&db, order("o-1", "REFUNDING", 100_000, 12_000, 2))
                .await
                .result,
            "updated"
        );
        assert_eq!(
            commission(&db, CASHBACK).await,
            (CommissionStatus::Frozen, 6_000)
        );
        let due = at("2026-03-09T00:00:00Z");
        let (settled, _) = settle_one(&db.store, &meta(), CASHBACK, due, None)
            .await
            .unwrap();
        assert_eq!(settled, Settled::NotPending);
        assert_eq!(wallet(&db, OWNER_WALLET).await.balances.available_minor, 0);
        // Refund rejected: PENDING again, at the same amount, and then released.
        ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 3)).await;
        assert_eq!(
            commission(&db, CASHBACK).await,
            (CommissionStatus::Pending, 6_000)
        );
        let (settled, _) = settle_one(&db.store, &meta(), CASHBACK, due, None)
            .await
            .unwrap();
        assert_eq!(settled, Settled::Released);
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.available_minor,
            6_000
        );
    }
);

store_backends!(
    a_lower_positive_amount_freezes_the_commission,
    |db: TestDb| async move {
        reference_data(&db).await;
        ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await;
        // The platform commission drops to 5,000 (< M = 10,000): frozen, not released.
        ingest(&db, order("o-1", "PENDING", 100_000, 5_000, 2)).await;
        assert_eq!(commission(&db, CASHBACK).await.0, CommissionStatus::Frozen);
        let (settled, _) = settle_one(
            &db.store,
            &meta(),
            CASHBACK,
            at("2026-03-09T00:00:00Z"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(settled, Settled::NotPending);
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            6_000
        );
    }
);

store_backends!(
    shopee_sparse_replay_with_amount_zero_keeps_the_amount,
    |db: TestDb| async move {
        reference_data(&db).await;
        ingest(&db, order("o-1", "PENDING", 100_000, 12_000, 1)).await;
        let sparse = ingest(&db, order("o-1", "COMPLETED", 0, 0, 4)).await;
        assert_eq!(sparse.result, "updated");
        let o = load::<AffiliateOrder>(&db.store, ORDER)
            .await
            .unwrap()
            .state
            .order
            .unwrap();
        assert_eq!(
            (o.gmv_minor, o.platform_commission_minor),
            (100_000, 12_000)
        );
        // Not a partial refund: the commission stays PENDING at its amount.
        assert_eq!(
            commission(&db, CASHBACK).await,
            (CommissionStatus::Pending, 6_000)
        );
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            6_000
        );
    }
);

store_backends!(
    two_workers_settling_one_commission_release_it_once,
    |db: TestDb| async move {
        reference_data(&db).await;
        ingest(&db, order("o-1", "COMPLETED", 100_000, 12_000, 1)).await;
        let m = meta();
        let due = at("2026-03-09T00:00:00Z");
        let (a, b) = tokio::join!(
            settle_one(&db.store, &m, CASHBACK, due, None),
            settle_one(&db.store, &m, CASHBACK, due, None)
        );
        let mut outcomes = vec![a.unwrap().0, b.unwrap().0];
        outcomes.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(outcomes, [Settled::NotPending, Settled::Released]);
        let w = wallet(&db, OWNER_WALLET).await;
        assert_eq!(
            (w.balances.pending_minor, w.balances.available_minor),
            (0, 6_000)
        );
        assert_eq!(
            events(&db, "wallet", OWNER_WALLET).await,
            ["WalletOpened", "PendingCredited", "PendingReleased"]
        );
        // Not due yet: nothing moves.
        let (early, _) = settle_one(&db.store, &m, INVITER, at("2026-03-07T00:00:00Z"), None)
            .await
            .unwrap();
        assert_eq!(early, Settled::NotDue);
    }
);

store_backends!(
    one_bad_order_is_rejected_alone_with_its_reason,
    |db: TestDb| async move {
        reference_data(&db).await;
        let mut early = order("o-2", "PENDING", 100_000, 12_000, 1);
        // Before any rule version is in force.
        early.ordered_at = at("2025-06-01T00:00:00Z");
        let results = ingestor(&db)
            .ingest_page(
                vec![
                    order("o-1", "PENDING", 100_000, 12_000, 1),
                    early,
                    order("o-3", "CANCELLED", 100_000, 12_000, 1),
                ],
                None,
            )
            .await
            .unwrap();
        let got: Vec<Value> = results
            .iter()
            .map(|r| json!([r.platform_order_id, r.result, r.code, r.field]))
            .collect();
        assert_eq!(
            got,
            [
                json!(["o-1", "created", null, null]),
                json!(["o-2", "rejected", "NO_RULE_VERSION_IN_FORCE", "ordered_at"]),
                json!(["o-3", "audit_only_invalid", null, null]),
            ]
        );
        assert!(results[0].position.is_some());
        // The audit-only order credits nothing.
        assert!(events(&db, "commission", "SHOPEE:o-3:CASHBACK")
            .await
            .is_empty());
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            6_000
        );
        // A page over the limit is refused whole.
        let too_many = vec![order("o-9", "PENDING", 1, 1, 1); 501];
        assert!(ingestor(&db).ingest_page(too_many, None).await.is_err());
    }
);

store_backends!(
    with_every_notification_sink_down_money_stays_right_and_the_outbox_drains_after,
    |db: TestDb| async move {
        reference_data(&db).await;
        let sink = std::sync::Arc::new(crate::common::sinks::Downstream::default());
        let config = factledger::infra::outbox::RelayConfig {
            backoff_ms_min: 10,
            backoff_ms_max: 50,
            ..Default::default()
        };
        let _relay =
            factledger::infra::outbox::spawn(store_db(&db).await, vec![sink.clone()], config);
        // Orders, commissions and wallets go through while nothing downstream answers.
        for (i, status) in ["PENDING", "COMPLETED", "REFUNDED"].iter().enumerate() {
            let r = ingest(&db, order("o-1", status, 100_000, 12_000, 1 + i as u32)).await;
            assert_ne!(r.result, "rejected", "{r:?}");
        }
        assert_eq!(
            ingest(&db, order("o-2", "PENDING", 100_000, 12_000, 1))
                .await
                .result,
            "created"
        );
        assert_eq!(commission(&db, CASHBACK).await.0, CommissionStatus::Invalid);
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            6_000
        );
        let total = outbox_rows(&db).await;
        // Back up: every outbox row arrives, in id order, none skipped.
        let got = sink.refuse_then_drain(3, total).await;
        let ids: Vec<i64> = got.iter().map(|(id, _, _)| *id).collect();
        assert_eq!(ids, (1..=total).collect::<Vec<_>>());
        for stream in [ORDER, CASHBACK, OWNER_WALLET] {
            assert!(
                got.iter().any(|(_, _, a)| a == stream),
                "nothing about {stream}"
            );
        }
    }
);

store_backends!(
    a_page_whose_group_append_fails_commits_every_other_order_alone,
    |db: TestDb| async move {
        reference_data(&db).await;
        campaign(&db, 10).await;
        // Another wallet already holds the ledger entry o-2's cashback credit would
        // write: the page's ONE transaction fails on it, and the page falls back to
        // one unit per order, so only o-2 fails.
        let m = meta();
        for command in [
            json!({"type": "Open", "user_id": "u-9", "currency": "IDR"}),
            json!({"type": "CreditPending", "ref_type": "COMMISSION",
                "ref_id": "SHOPEE:o-2:CASHBACK", "amount_minor": 1}),
        ] {
            run_command::<Wallet>(
                &db.store,
                &m,
                "u-9:IDR",
                serde_json::from_value(command).unwrap(),
            )
            .await
            .unwrap();
        }
        let results = ingestor(&db)
            .ingest_page(
                vec![
                    order("o-1", "PENDING", 100_000, 12_000, 1),
                    order("o-2", "PENDING", 100_000, 12_000, 1),
                    order("o-3", "PENDING", 100_000, 12_000, 1),
                ],
                None,
            )
            .await
            .unwrap();
        let got: Vec<Value> = results
            .iter()
            .map(|r| json!([r.platform_order_id, r.result, r.code]))
            .collect();
        assert_eq!(
            got,
            [
                json!(["o-1", "created", null]),
                json!(["o-2", "rejected", "DUPLICATE_LEDGER_REF"]),
                json!(["o-3", "created", null]),
            ]
        );
        assert!(results[0].position.is_some() && results[2].position.is_some());
        assert!(results[1].position.is_none());
        // Nothing of o-2; o-1 and o-3 each with all of their unit.
        assert!(events(&db, "affiliate_order", "SHOPEE:o-2")
            .await
            .is_empty());
        assert!(events(&db, "commission", "SHOPEE:o-2:INVITER_REWARD")
            .await
            .is_empty());
        assert_eq!(
            events(&db, "campaign", "SHOPEE:ID").await,
            ["CampaignOpened", "QuotaReserved", "QuotaReserved"]
        );
        assert_eq!(
            events(&db, "wallet", OWNER_WALLET).await,
            ["WalletOpened", "PendingCredited", "PendingCredited"]
        );
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            12_000
        );
        assert_eq!(
            wallet(&db, INVITER_WALLET).await.balances.pending_minor,
            2_000
        );
        // The same page again: o-1 and o-3 are known (nothing to write); the planted
        // entry stays, so o-2 fails again, alone.
        let again = ingestor(&db)
            .ingest_page(
                vec![
                    order("o-1", "PENDING", 100_000, 12_000, 1),
                    order("o-2", "PENDING", 100_000, 12_000, 1),
                    order("o-3", "PENDING", 100_000, 12_000, 1),
                ],
                None,
            )
            .await
            .unwrap();
        let got: Vec<&str> = again.iter().map(|r| r.result.as_str()).collect();
        assert_eq!(got, ["unchanged", "rejected", "unchanged"]);
    }
);

store_backends!(
    a_page_chains_shared_streams_from_order_to_order_in_one_transaction,
    |db: TestDb| async move {
        reference_data(&db).await;
        campaign(&db, 2).await;
        let head = db.store.head_position().await.unwrap();
        // Three orders of one owner in one page: the wallets and the campaign are
        // shared; the third finds the quota of 2 used by the first two.
        let results = ingestor(&db)
            .ingest_page(
                vec![
                    order("o-1", "PENDING", 100_000, 12_000, 1),
                    order("o-2", "PENDING", 100_000, 12_000, 1),
                    order("o-3", "PENDING", 100_000, 12_000, 1),
                    order("o-1", "COMPLETED", 100_000, 12_000, 2),
                ],
                None,
            )
            .await
            .unwrap();
        let got: Vec<&str> = results.iter().map(|r| r.result.as_str()).collect();
        assert_eq!(got, ["created", "created", "created", "updated"]);
        // Positions are contiguous and in page order: one append, unit after unit.
        let positions: Vec<i64> = results.iter().map(|r| r.position.unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        assert_eq!(
            events(&db, "campaign", "SHOPEE:ID").await,
            ["CampaignOpened", "QuotaReserved", "QuotaReserved"]
        );
        assert_eq!(
            events(&db, "wallet", OWNER_WALLET).await,
            [
                "WalletOpened",
                "PendingCredited",
                "PendingCredited",
                "PendingCredited"
            ]
        );
        assert_eq!(
            wallet(&db, OWNER_WALLET).await.balances.pending_minor,
            18_000
        );
        assert_eq!(
            events(&db, "affiliate_order", ORDER).await,
            ["OrderIngested", "OrderUpdated"]
        );
        assert_eq!(
            db.store.head_position().await.unwrap(),
            *positions.last().unwrap()
        );
        assert!(positions[0] > head);
    }
);
