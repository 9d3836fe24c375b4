//! The affiliate projections (issue 5 item 6): rows from order, commission and
//! campaign events written through multi-stream units; the reads over HTTP; each
//! projector in its own task, so one stopped at an event never holds the others
//! (issue 3 item 1); a full rebuild reproduces the rows. Both backends.

use crate::common;

use common::{meta, run, TestDb};
use factledger::infra::db::Db;
use factledger::infra::store;
use factledger::runtime::bus::CommandBus;
use factledger::runtime::projector::{self, DynProjector};
use factledger::runtime::unit::run_unit;
use factledger_aggregates::affiliate_order::{AffiliateOrder, OrderCommand, OrderEvent};
use factledger_aggregates::campaign::{Campaign, CampaignCommand};
use factledger_aggregates::commission::{
    commission_id, BeneficiaryRole, Commission, CommissionCommand,
};
use factledger_aggregates::wallet::Wallet;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Any refusal of any aggregate in a test unit.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

macro_rules! refused_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Refused {
            fn from(e: $t) -> Self {
                Refused(e.to_string())
            }
        }
    )*};
}
refused_from!(
    factledger_aggregates::affiliate_order::OrderError,
    factledger_aggregates::commission::CommissionError,
    factledger_aggregates::campaign::CampaignError,
    factledger_aggregates::wallet::WalletError,
    factledger_aggregates::InvariantViolation
);

fn rules() -> Value {
    json!({"rule_set_id": "SHOPEE:ID", "version": 2, "effective_from": "2026-01-01T00:00:00Z",
           "cashback_bps": 6000, "inviter_bps": 1000, "max_commission_base_bps": 800,
           "release_delay_days": 14})
}

/// Wallet of a user (IDR).
fn wallet_of(user: &str) -> String {
    format!("w-{user}")
}

/// Open the wallets of `users`.
async fn open_wallets(db: &TestDb, users: &[&str]) {
    let bus = CommandBus::<Wallet>::start(db.store.clone());
    for u in users {
        run(
            &bus,
            &wallet_of(u),
            json!({"type": "Open", "user_id": u, "currency": "IDR"}),
        )
        .await;
    }
}

/// Apply a commission event's wallet effect inside the unit.
macro_rules! wallet_effect {
    ($unit:ident, $commission:expr, $events:expr) => {
        for ev in &$events {
            if let Some(effect) = $commission.state.wallet_effect(ev).map_err(|e| {
                factledger::runtime::unit::UnitError::Refused(Refused(e.to_string()))
            })? {
                let w = effect.wallet_id.as_str().to_owned();
                let mut wallet = $unit.load::<Wallet, Refused>(&w).await?;
                $unit.decide(&mut wallet, &w, effect.command)?;
            }
        }
    };
}

/// Ingest SHOPEE order `no` (GMV 250,000, platform commission 30,000 → cashback 12,000
/// to `owner`, 2,000 to `inviter`) in one unit: order, commissions, wallet credits.
async fn ingest(db: &TestDb, no: &str, owner: &str, inviter: &str) -> i64 {
    ingest_with(db, no, owner, inviter, true).await
}

/// [`ingest`]; without `credit` the commissions are recorded but no wallet is
/// credited (a planted event-level difference).
async fn ingest_with(db: &TestDb, no: &str, owner: &str, inviter: &str, credit: bool) -> i64 {
    let order_id = format!("SHOPEE:{no}");
    let ingest: OrderCommand = serde_json::from_value(json!({"type": "Ingest",
        "order": {"platform": "SHOPEE", "country": "ID", "platform_order_id": no,
                  "status": "PENDING", "currency": "IDR", "gmv_minor": 250000,
                  "platform_commission_minor": 30000,
                  "ordered_at": "2026-01-02T10:00:00Z", "platform_updated_at": "2026-01-02T11:00:00Z"},
        "owner_user_id": owner, "inviter_user_id": inviter, "rules": rules()}))
    .unwrap();
    let (owner, inviter) = (owner.to_owned(), inviter.to_owned());
    run_unit(&db.store, &meta(), |mut unit| {
        let (order_id, ingest, owner, inviter) = (
            order_id.clone(),
            ingest.clone(),
            owner.clone(),
            inviter.clone(),
        );
        async move {
            let mut order = unit.load::<AffiliateOrder, Refused>(&order_id).await?;
            let events = unit.decide(&mut order, &order_id, ingest)?;
            let Some(OrderEvent::OrderIngested(o)) = events.first() else {
                return Ok(((), unit));
            };
            for (role, user) in [
                (BeneficiaryRole::Cashback, &owner),
                (BeneficiaryRole::InviterReward, &inviter),
            ] {
                let id = commission_id(&order_id, role);
                let record: CommissionCommand = serde_json::from_value(json!({"type": "Record",
                    "commission_id": id, "order_id": order_id, "role": role,
                    "beneficiary_user_id": user, "wallet_id": wallet_of(user),
                    "currency": "IDR", "gmv_minor": o.gmv_minor,
                    "platform_commission_minor": o.platform_commission_minor,
                    "ordered_at": o.ordered_at, "order_updated_at": o.platform_updated_at,
                    "order_status": o.status, "order_revision": o.revision, "rules": o.rules}))
                .map_err(|e| {
                    factledger::runtime::unit::UnitError::Refused(Refused(e.to_string()))
                })?;
                let mut c = unit.load::<Commission, Refused>(&id).await?;
                let recorded = unit.decide(&mut c, &id, record)?;
                if credit {
                    wallet_effect!(unit, c, recorded);
                }
            }
            Ok(((), unit))
        }
    })
    .await
    .unwrap()
    .position
}

/// Send one command to a commission, with its wallet effect, in one unit.
async fn commission(db: &TestDb, id: &str, command: Value) -> i64 {
    commission_with(db, id, command, true).await
}

async fn commission_with(db: &TestDb, id: &str, command: Value, effect: bool) -> i64 {
    let command: CommissionCommand = serde_json::from_value(command).unwrap();
    let id = id.to_owned();
    run_unit(&db.store, &meta(), |mut unit| {
        let (id, command) = (id.clone(), command.clone());
        async move {
            let mut c = unit.load::<Commission, Refused>(&id).await?;
            let events = unit.decide(&mut c, &id, command)?;
            if effect {
                wallet_effect!(unit, c, events);
            }
            Ok(((), unit))
        }
    })
    .await
    .unwrap()
    .position
}

async fn campaign(db: &TestDb, id: &str, command: Value) -> i64 {
    let command: CampaignCommand = serde_json::from_value(command).unwrap();
    let id = id.to_owned();
    run_unit(&db.store, &meta(), |mut unit| {
        let (id, command) = (id.clone(), command.clone());
        async move {
            let mut c = unit.load::<Campaign, Refused>(&id).await?;
            unit.decide(&mut c, &id, command)?;
            Ok(((), unit))
        }
    })
    .await
    .unwrap()
    .position
}

/// Three orders: SHOPEE:1 and SHOPEE:2 for u-1 (inviter u-0), SHOPEE:3 for u-2
/// (inviter u-0). SHOPEE:1's cashback is released, SHOPEE:2's frozen (refund
/// started); a campaign of 2 orders has SHOPEE:1 and SHOPEE:3 reserved.
async fn history(db: &TestDb) {
    open_wallets(db, &["u-0", "u-1", "u-2"]).await;
    for (no, owner) in [("1", "u-1"), ("2", "u-1"), ("3", "u-2")] {
        ingest(db, no, owner, "u-0").await;
    }
    commission(
        db,
        "SHOPEE:1:CASHBACK",
        json!({"type": "Release", "now": "2026-01-20T00:00:00Z"}),
    )
    .await;
    commission(
        db,
        "SHOPEE:2:CASHBACK",
        json!({"type": "ReactToOrder", "order_revision": 2, "signal": "REFUND_STARTED",
               "order_status": "REFUNDING", "amount_minor": 12000,
               "order_updated_at": "2026-01-03T00:00:00Z"}),
    )
    .await;
    campaign(
        db,
        "fund-1",
        json!({"type": "Open", "campaign_id": "fund-1", "quota_unit": "ORDERS",
               "quota_limit": 2, "starts_at": "2026-01-01T00:00:00Z"}),
    )
    .await;
    for no in ["1", "3"] {
        campaign(
            db,
            "fund-1",
            json!({"type": "Reserve", "order_id": format!("SHOPEE:{no}"),
                   "ordered_at": "2026-01-02T10:00:00Z"}),
        )
        .await;
    }
}

async fn projections(db: &TestDb) -> Db {
    store::open(&db.url).await.unwrap().db
}

fn by_name(name: &str) -> DynProjector {
    projector::find(name).unwrap_or_else(|| panic!("no projector {name}"))
}

async fn catch_up_all(db: &TestDb, p: &Db) {
    for projector in projector::all() {
        projector::catch_up(&db.store, p, projector.as_ref())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", projector.name()));
    }
}

both_backends!(
    the_affiliate_projections_hold_orders_commissions_and_campaign_usage,
    |db: TestDb| async move {
        history(&db).await;
        let p = projections(&db).await;
        catch_up_all(&db, &p).await;
        let head = db.store.head_position().await.unwrap();
        for projector in projector::all() {
            assert_eq!(
                p.checkpoint(projector.name(), projector.version())
                    .await
                    .unwrap(),
                head,
                "{}",
                projector.name()
            );
        }
        let dump = projector::dump(&p, by_name("commission_records").as_ref())
            .await
            .unwrap();
        let rows: Vec<(String, String, i64)> = dump[0]
            .1
            .iter()
            .map(|r| {
                let text = |c: &str| match &r[c] {
                    factledger_projections::table::Cell::Text(s) => s.clone(),
                    other => panic!("{c}: {other:?}"),
                };
                let factledger_projections::table::Cell::Int(amount) = r["amount_minor"] else {
                    panic!("amount")
                };
                (text("commission_id"), text("status"), amount)
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("SHOPEE:1:CASHBACK".into(), "AVAILABLE".into(), 12_000),
                ("SHOPEE:1:INVITER_REWARD".into(), "PENDING".into(), 2_000),
                ("SHOPEE:2:CASHBACK".into(), "FROZEN".into(), 12_000),
                ("SHOPEE:2:INVITER_REWARD".into(), "PENDING".into(), 2_000),
                ("SHOPEE:3:CASHBACK".into(), "PENDING".into(), 12_000),
                ("SHOPEE:3:INVITER_REWARD".into(), "PENDING".into(), 2_000),
            ]
        );
        let campaigns = projector::dump(&p, by_name("campaign_usage").as_ref())
            .await
            .unwrap();
        assert_eq!(campaigns[0].1.len(), 1);
        assert_eq!(
            campaigns[0].1[0]["reserved"],
            factledger_projections::table::Cell::Int(2)
        );
        assert_eq!(campaigns[1].1.len(), 2, "{campaigns:?}");
        // A second catch-up has nothing to apply.
        for projector in projector::all() {
            let again = projector::catch_up(&db.store, &p, projector.as_ref())
                .await
                .unwrap();
            assert_eq!(again, 0);
        }
    }
);

/// The running service (`common::app`), its admin key as `key`, and this file's
/// request helper.
struct App {
    app: common::app::App,
    key: String,
}

impl std::ops::Deref for App {
    type Target = common::app::App;

    fn deref(&self) -> &common::app::App {
        &self.app
    }
}

impl App {
    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

async fn spawn_app(db: &TestDb) -> App {
    let app = common::spawn_app(db)
        // Short, so the stall test sees its alert within a bounded poll.
        .configure(|o| o.projection_stall_alert_ms = Some(300))
        // These tests read commissions in the states they put them in: a settlement
        // firing on a 5-minute boundary mid-test must not release them.
        .settlement_off()
        .await;
    App {
        key: app.admin.clone(),
        app,
    }
}

fn problem(r: &(StatusCode, Value), status: u16, code: &str, field: &str) {
    assert_eq!(r.0.as_u16(), status, "{}", r.1);
    assert_eq!(r.1["code"], code, "{}", r.1);
    assert_eq!(r.1["field"], field, "{}", r.1);
}

both_backends!(
    orders_and_commissions_are_read_over_http_with_read_your_writes,
    |db: TestDb| async move {
        let app = spawn_app(&db).await;
        history(&db).await;
        let head = db.store.head_position().await.unwrap();
        // The platform in any case; min_position waits for the projection.
        let (status, order) = app
            .get(&format!("/v1/orders/shopee/1?min_position={head}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{order}");
        assert_eq!(order["order_id"], "SHOPEE:1");
        assert_eq!(order["owner_user_id"], "u-1");
        assert_eq!(order["inviter_user_id"], "u-0");
        assert_eq!(order["rule_version"], 2);
        assert_eq!(order["cashback_minor"], 12_000);
        assert_eq!(order["audit_only"], false);
        assert!(order["position"].as_i64().unwrap() >= head);
        problem(
            &app.get("/v1/orders/SHOPEE/404").await,
            404,
            "ORDER_NOT_FOUND",
            "platform_order_id",
        );
        problem(
            &app.get("/v1/orders/ebay/1").await,
            422,
            "INVALID_FIELD",
            "platform",
        );
        problem(
            &app.get(&format!(
                "/v1/orders/SHOPEE/1?min_position={}",
                head + 1_000
            ))
            .await,
            503,
            "PROJECTION_BEHIND",
            "min_position",
        );

        // u-1's commissions, paged by id, and by status.
        let (status, page) = app
            .get(&format!(
                "/v1/commissions?user_id=u-1&limit=1&min_position={head}"
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(page["commissions"][0]["commission_id"], "SHOPEE:1:CASHBACK");
        assert_eq!(page["next_cursor"], "SHOPEE:1:CASHBACK");
        let (_, page) = app
            .get("/v1/commissions?user_id=u-1&limit=1&cursor=SHOPEE:1:CASHBACK")
            .await;
        assert_eq!(page["commissions"][0]["commission_id"], "SHOPEE:2:CASHBACK");
        assert_eq!(page["commissions"][0]["status"], "FROZEN");
        let (_, page) = app
            .get("/v1/commissions?user_id=u-1&limit=1&cursor=SHOPEE:2:CASHBACK")
            .await;
        assert_eq!(page["commissions"], json!([]));
        assert_eq!(page["next_cursor"], Value::Null);
        let (_, pending) = app.get("/v1/commissions?user_id=u-0&status=pending").await;
        let ids: Vec<&str> = pending["commissions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["commission_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [
                "SHOPEE:1:INVITER_REWARD",
                "SHOPEE:2:INVITER_REWARD",
                "SHOPEE:3:INVITER_REWARD"
            ]
        );
        let c = &pending["commissions"][0];
        assert_eq!(c["amount_minor"], 2_000);
        assert_eq!(c["wallet_id"], "w-u-0");
        assert_eq!(c["release_at"], "2026-01-16T10:00:00.000000Z");
        assert_eq!(
            (c["rule_set_id"].clone(), c["rule_version"].clone()),
            (json!("SHOPEE:ID"), json!(2))
        );
        problem(
            &app.get("/v1/commissions?user_id=u-1&status=PAID").await,
            422,
            "INVALID_FIELD",
            "status",
        );
        problem(
            &app.get("/v1/commissions").await,
            422,
            "INVALID_FIELD",
            "user_id",
        );
        // Every projector is listed, the wallet's first.
        let (_, list) = app.get("/v1/projections").await;
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "wallet",
                "affiliate_orders",
                "commission_records",
                "campaign_usage",
                "withdrawal_records",
                "services",
                "journal",
                "bill",
                "bill_order_status"
            ]
        );
    }
);

async fn stall_alerts(db: &TestDb) -> Vec<Value> {
    let sql = "SELECT payload FROM outbox WHERE type = 'alert.projection.stalled' ORDER BY id";
    let texts: Vec<String> = match store::open(&db.url).await.unwrap().db {
        // utf8mb4_bin text reads back as bytes on MariaDB.
        factledger::infra::db::Db::Mysql(p) => sqlx::query_scalar::<_, Vec<u8>>(sql)
            .fetch_all(&p)
            .await
            .unwrap()
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect(),
        factledger::infra::db::Db::Sqlite(p) => {
            sqlx::query_scalar(sql).fetch_all(&p).await.unwrap()
        }
    };
    texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect()
}

/// Poll `GET /v1/projections` until `done` holds for it (at most 20 s).
async fn wait_projections(app: &App, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, list) = app.get("/v1/projections").await;
        let list = list.as_array().cloned().unwrap_or_default();
        if done(&list) {
            return list;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {list:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn named<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list:?}"))
}

/// Break the event at `position` as the database owner would (the trigger dropped).
async fn corrupt(db: &TestDb, position: i64, payload: &str) -> String {
    let original = db.store.read_positions(position, position).await.unwrap()[0]
        .payload
        .clone();
    db.store
        .execute_raw("DROP TRIGGER IF EXISTS events_refuse_update")
        .await
        .unwrap();
    db.store
        .execute_raw(&format!(
            "UPDATE events SET payload = '{payload}' WHERE global_position = {position}"
        ))
        .await
        .unwrap();
    original
}

async fn first_position_of(db: &TestDb, aggregate_type: &str, event_type: &str) -> i64 {
    let events = db.store.read_all(0, 1_000).await.unwrap();
    events
        .iter()
        .find(|e| e.aggregate_type == aggregate_type && e.event_type == event_type)
        .map(|e| e.global_position)
        .unwrap_or_else(|| panic!("no {aggregate_type} {event_type}"))
}

both_backends!(
    a_projector_stopped_at_an_event_never_holds_the_others_back,
    |db: TestDb| async move {
        history(&db).await;
        let head = db.store.head_position().await.unwrap();
        // A wallet credit the wallet projector cannot decode, and a commission event
        // the commission projector cannot decode, planted before the service starts.
        let credit = first_position_of(&db, "wallet", "PendingCredited").await;
        let frozen = first_position_of(&db, "commission", "CommissionFrozen").await;
        let credit_payload = corrupt(
            &db,
            credit,
            r#"{"type":"PendingCredited","amount_minor":"x"}"#,
        )
        .await;
        corrupt(
            &db,
            frozen,
            r#"{"type":"CommissionFrozen","amount_minor":[]}"#,
        )
        .await;
        let app = spawn_app(&db).await;
        // Each stops right before its own bad event; the orders and campaign
        // projectors reach the head.
        let list = wait_projections(&app, "two stopped, the others at the head", |l| {
            l.len() == 9
                && l.iter()
                    // A failed batch reports its error before the runner has applied
                    // the events ahead of the bad one: wait for both.
                    .any(|s| {
                        s["name"] == "wallet"
                            && s["error_position"] == credit
                            && s["position"] == credit - 1
                    })
                && l.iter().any(|s| {
                    s["name"] == "commission_records"
                        && s["error_position"] == frozen
                        && s["position"] == frozen - 1
                })
                // The journal reads both streams: it stops at the first bad event.
                && l.iter().any(|s| {
                    s["name"] == "journal"
                        && s["error_position"] == credit.min(frozen)
                        && s["position"] == credit.min(frozen) - 1
                })
                && [
                    "affiliate_orders",
                    "campaign_usage",
                    "bill",
                    "bill_order_status",
                ]
                .iter()
                .all(|n| l.iter().any(|s| s["name"] == *n && s["position"] == head))
        })
        .await;
        let wallet = named(&list, "wallet");
        assert_eq!(wallet["position"], credit - 1, "{wallet}");
        assert_eq!(wallet["lag_events"], head - credit + 1, "{wallet}");
        assert!(
            wallet["last_error"]
                .as_str()
                .unwrap()
                .contains(&format!("event {credit}")),
            "{wallet}"
        );
        for n in ["affiliate_orders", "campaign_usage"] {
            let s = named(&list, n);
            assert_eq!(s["lag_events"], 0, "{s}");
            assert_eq!(s["last_error"], Value::Null, "{s}");
        }
        // Mend the wallet event: the wallet projector catches up, while the
        // commission projector stays at its own bad event — and new wallet and order
        // events go through past it.
        db.store
            .execute_raw(&format!(
                "UPDATE events SET payload = '{credit_payload}' WHERE global_position = {credit}"
            ))
            .await
            .unwrap();
        let new_head = ingest(&db, "4", "u-2", "u-0").await;
        let list = wait_projections(
            &app,
            "commissions stopped, the others at the new head",
            |l| {
                l.iter()
                    .any(|s| s["name"] == "commission_records" && s["error_position"] == frozen)
                    && ["wallet", "affiliate_orders", "campaign_usage"]
                        .iter()
                        .all(|n| {
                            l.iter()
                                .any(|s| s["name"] == *n && s["position"] == new_head)
                        })
            },
        )
        .await;
        // The stalled commission projector raised its own alert, naming its stream.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let alerts = stall_alerts(&db).await;
            if alerts
                .iter()
                .any(|a| a["business_id"] == "commission/SHOPEE:2:CASHBACK")
            {
                assert!(
                    alerts.iter().any(|a| a["message"]
                        .as_str()
                        .unwrap_or("")
                        .contains("commission_records")),
                    "{alerts:?}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no stall alert: {alerts:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let c = named(&list, "commission_records");
        assert_eq!(c["position"], frozen - 1, "{c}");
        assert!(c["retries"].as_u64().unwrap() >= 1, "{c}");
        // The new order is readable while commissions are stuck.
        let (status, order) = app
            .get(&format!("/v1/orders/SHOPEE/4?min_position={new_head}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{order}");
        let (status, _) = app
            .get(&format!("/v1/wallets/w-u-2?min_position={new_head}"))
            .await;
        assert_eq!(status, StatusCode::OK);
        // /metrics carries the lag per projector.
        let metrics = app
            .client
            .get(format!("{}/metrics", app.base))
            .bearer_auth(&app.key)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("factledger_projection_lag_events{projection=\"commission_records\"}"),
            "{metrics}"
        );
    }
);

both_backends!(
    a_full_rebuild_from_position_zero_reproduces_the_rows_and_repairs_an_edited_one,
    |db: TestDb| async move {
        history(&db).await;
        let p = projections(&db).await;
        catch_up_all(&db, &p).await;
        let rows = store::open(&db.url).await.unwrap().db;
        // This history has no withdrawals and no paid services: every affiliate
        // projector has rows.
        for projector in projector::all()
            .into_iter()
            .filter(|p| !["withdrawal_records", "services"].contains(&p.name()))
        {
            let before = projector::dump(&p, projector.as_ref()).await.unwrap();
            assert!(before.iter().any(|(_, rows)| !rows.is_empty()));
            // Someone edits a row by hand; the rebuild puts it back as the events say.
            let table = projector.tables()[0].name;
            common::exec(
                &rows,
                &format!("UPDATE {table} SET last_position = last_position + 1000"),
            )
            .await;
            assert_ne!(
                projector::dump(&p, projector.as_ref()).await.unwrap(),
                before
            );
            let done = projector::rebuild_full(&db.store, &p, projector.as_ref())
                .await
                .unwrap();
            assert_eq!(done.position, db.store.head_position().await.unwrap());
            assert_eq!(
                projector::dump(&p, projector.as_ref()).await.unwrap(),
                before,
                "{}",
                projector.name()
            );
            // The runner carries on from the rebuilt checkpoint: nothing to apply.
            let again = projector::catch_up(&db.store, &p, projector.as_ref())
                .await
                .unwrap();
            assert_eq!(again, 0);
        }
        // `factledger rebuild commission_records` does the same from the command line.
        let commissions = by_name("commission_records");
        let before = projector::dump(&p, commissions.as_ref()).await.unwrap();
        common::exec(&rows, "DELETE FROM commission_records").await;
        let url = db.url.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
                .env_remove("DATABASE_URL")
                .env("RUST_LOG", "warn")
                .args(["--database-url", &url, "rebuild", "commission_records"])
                .output()
                .expect("run factledger")
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(printed["projection"], "commission_records");
        assert_eq!(printed["position"], db.store.head_position().await.unwrap());
        assert_eq!(
            projector::dump(&p, commissions.as_ref()).await.unwrap(),
            before
        );
        // `factledger rebuild commission_records` does the same from the command line.
        let commissions = by_name("commission_records");
        let before = projector::dump(&p, commissions.as_ref()).await.unwrap();
        common::exec(&rows, "DELETE FROM commission_records").await;
        let url = db.url.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
                .env_remove("DATABASE_URL")
                .env("RUST_LOG", "warn")
                .args(["--database-url", &url, "rebuild", "commission_records"])
                .output()
                .expect("run factledger")
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(printed["projection"], "commission_records");
        assert_eq!(printed["position"], db.store.head_position().await.unwrap());
        assert_eq!(
            projector::dump(&p, commissions.as_ref()).await.unwrap(),
            before
        );
    }
);

async fn reconcile_now(db: &TestDb, repair: bool) -> factledger::runtime::reconcile::Report {
    let p = projections(db).await;
    factledger::runtime::projection::catch_up_wallet(&db.store, &p)
        .await
        .unwrap();
    catch_up_all(db, &p).await;
    factledger::runtime::reconcile::reconcile(
        &db.store,
        &p,
        factledger::runtime::reconcile::ReconcileOptions {
            repair,
            // Tiny pages: every stream crosses page boundaries.
            page_rows: 2,
            anchor_file: None,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

fn kinds(report: &factledger::runtime::reconcile::Report) -> Vec<(String, String, String)> {
    report
        .findings
        .iter()
        .map(|f| {
            (
                serde_json::to_value(f.kind)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned(),
                f.table.clone(),
                f.key.clone(),
            )
        })
        .collect()
}

both_backends!(
    edited_affiliate_rows_are_drift_found_by_replay_and_repaired_by_a_full_rebuild,
    |db: TestDb| async move {
        history(&db).await;
        let clean = reconcile_now(&db, false).await;
        assert_eq!(clean.counts.total(), 0, "{:?}", clean.findings);
        assert_eq!(clean.commissions_checked, 6);
        let head = db.store.head_position().await.unwrap();
        assert_eq!(clean.commissions_up_to_position, head);
        let checked: Vec<(&str, i64)> = clean
            .projections_checked
            .iter()
            .filter(|c| c.name != "journal")
            .map(|c| (c.name.as_str(), c.up_to_position))
            .collect();
        assert!(clean
            .projections_checked
            .iter()
            .any(|c| c.name == "journal"));
        assert_eq!(
            checked,
            [
                ("affiliate_orders", head),
                ("commission_records", head),
                ("campaign_usage", head),
                ("withdrawal_records", head),
                ("services", head)
            ]
        );
        // Rows edited by hand: a commission's amount and status, a reservation gone.
        let rows = store::open(&db.url).await.unwrap().db;
        common::exec(
            &rows,
            "UPDATE commission_records SET amount_minor = 1, status = 'AVAILABLE' \
             WHERE commission_id = 'SHOPEE:3:CASHBACK'",
        )
        .await;
        common::exec(
            &rows,
            "DELETE FROM campaign_reservations WHERE order_id = 'SHOPEE:3'",
        )
        .await;
        let found = reconcile_now(&db, false).await;
        assert_eq!(
            kinds(&found),
            [
                (
                    "row_differs".to_owned(),
                    "commission_records".to_owned(),
                    "SHOPEE:3:CASHBACK".to_owned()
                ),
                (
                    "row_missing".to_owned(),
                    "campaign_reservations".to_owned(),
                    "fund-1/SHOPEE:3".to_owned()
                )
            ],
            "{:?}",
            found.findings
        );
        // The money checks replay events, not these rows: nothing event-level.
        assert_eq!(found.counts.event, 0);
        assert_eq!(found.counts.projection_drift, 2);
        let differs = &found.findings[0];
        assert_eq!(
            differs.class,
            factledger::runtime::reconcile::FindingClass::ProjectionDrift
        );
        assert_eq!(differs.projection.as_deref(), Some("commission_records"));
        assert!(
            differs.detail.contains("amount_minor"),
            "{}",
            differs.detail
        );
        assert_eq!(differs.expected.as_ref().unwrap()["amount_minor"], 12_000);
        assert_eq!(differs.actual.as_ref().unwrap()["amount_minor"], 1);
        // The repair rebuilds each drifted projection and checks it again.
        let repaired = reconcile_now(&db, true).await;
        assert_eq!(repaired.counts.projection_drift, 2);
        assert_eq!(repaired.remaining.total(), 0, "{:?}", repaired.findings);
        assert!(
            repaired.findings.iter().all(|f| f.repaired == Some(true)),
            "{:?}",
            repaired.findings
        );
        assert_eq!(reconcile_now(&db, false).await.counts.total(), 0);
    }
);

both_backends!(
    commission_money_without_its_wallet_movement_is_a_manual_finding,
    |db: TestDb| async move {
        history(&db).await;
        open_wallets(&db, &["u-3", "u-4", "u-5"]).await;
        // SHOPEE:5's commissions are recorded, but no wallet was credited.
        ingest_with(&db, "5", "u-3", "u-4", false).await;
        // SHOPEE:6's cashback is released, but the wallet never moved it.
        ingest(&db, "6", "u-5", "u-4").await;
        commission_with(
            &db,
            "SHOPEE:6:CASHBACK",
            json!({"type": "Release", "now": "2026-01-20T00:00:00Z"}),
            false,
        )
        .await;
        let report = reconcile_now(&db, true).await;
        let mut found: Vec<(String, String, Value, Value)> = report
            .findings
            .iter()
            .map(|f| {
                assert_eq!(
                    f.class,
                    factledger::runtime::reconcile::FindingClass::Event,
                    "{f:?}"
                );
                assert_eq!(f.repaired, Some(false), "{f:?}");
                assert!(f.repair.starts_with("refused"), "{f:?}");
                (
                    serde_json::to_value(f.kind)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    f.wallet_id.clone(),
                    f.expected.clone().unwrap(),
                    f.actual.clone().unwrap(),
                )
            })
            .collect();
        found.sort_by(|a, b| (&a.1, &a.0).cmp(&(&b.1, &b.0)));
        let f = |k: &str, w: &str, e: i64, a: i64| (k.to_owned(), w.to_owned(), json!(e), json!(a));
        assert_eq!(
            found,
            [
                // u-3's cashback (12,000) and u-4's inviter reward for SHOPEE:5 (2,000)
                // were never credited; u-4 has SHOPEE:6's 2,000 pending for real.
                f("commission_pending_mismatch", "w-u-3", 12_000, 0),
                f("commission_pending_mismatch", "w-u-4", 4_000, 2_000),
                // SHOPEE:6's cashback: released by the commission, still pending in
                // the wallet.
                f("commission_pending_mismatch", "w-u-5", 0, 12_000),
                f("commission_release_mismatch", "w-u-5", 12_000, 0),
            ]
        );
        assert_eq!(report.remaining.event, 4);
        assert_eq!(report.remaining.projection_drift, 0);
    }
);
