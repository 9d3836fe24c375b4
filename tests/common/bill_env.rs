//! Bill facts recorded through the aggregates, for the bill process tests
//! (`tests/suite/bill_order_status.rs`, `tests/suite/bill_snapshots.rs`).
#![allow(dead_code)]

use crate::common::{meta, TestDb};
use factledger::bill::order_status::OrderStatusManager;
use factledger::infra::db::Db;
use factledger::infra::store::DynStore;
use factledger::runtime::bus::load;
use factledger::runtime::unit::run_command;
use factledger_aggregates::bill::{
    LineStatusCode, OrderStatusCode, PaymentOrder, PaymentOrderCommand, PaymentResult,
    PaymentResultCommand,
};
use serde_json::{json, Value};

pub const AT: &str = "2026-10-01T00:00:00Z";

pub struct Env {
    pub db: TestDb,
    pub proj: Db,
}

impl Env {
    pub async fn new(db: TestDb) -> Env {
        let proj = db.database().await.db;
        Env { db, proj }
    }

    pub fn store(&self) -> &DynStore {
        &self.db.store
    }

    pub fn manager(&self) -> OrderStatusManager {
        OrderStatusManager::new(self.store().clone(), self.proj.clone(), meta())
    }

    /// The bill projector, then the manager, then the projector again (it folds what
    /// the manager wrote).
    pub async fn settle(&self) {
        factledger::bill::projection::catch_up(self.store(), &self.proj)
            .await
            .expect("bill projector");
        self.manager()
            .catch_up()
            .await
            .expect("order status manager");
        factledger::bill::projection::catch_up(self.store(), &self.proj)
            .await
            .expect("bill projector");
    }

    pub async fn order_cmd(&self, order_id: i64, cmd: Value) {
        let cmd: PaymentOrderCommand = serde_json::from_value(cmd).expect("order command");
        run_command::<PaymentOrder>(self.store(), &meta(), &order_id.to_string(), cmd)
            .await
            .expect("order command succeeds");
    }

    /// An order with payable lines `(line_id, station_id, planned)` of 202609,
    /// submitted; approved (WAIT_PAY) when `approve`.
    pub async fn order(
        &self,
        order_id: i64,
        treasury: bool,
        lines: &[(i64, i64, i64)],
        approve: bool,
    ) {
        self.order_cmd(
            order_id,
            json!({"type": "CreatePaymentOrder", "order_id": order_id, "treasury": treasury,
                   "actor": "tester", "created_at": AT}),
        )
        .await;
        for (line_id, station_id, planned) in lines {
            self.order_cmd(
                order_id,
                json!({"type": "AddLine", "order_id": order_id, "line_id": line_id,
                       "station_id": station_id, "month": "202609", "kind": "PAYABLE",
                       "planned_amount_minor": planned, "at": AT}),
            )
            .await;
        }
        self.order_cmd(
            order_id,
            json!({"type": "SubmitPaymentOrder", "order_id": order_id, "actor": "tester", "at": AT}),
        )
        .await;
        if approve {
            self.order_cmd(
                order_id,
                json!({"type": "ApprovePaymentOrder", "order_id": order_id, "actor": "tester", "at": AT}),
            )
            .await;
        }
    }

    pub async fn order_action(&self, order_id: i64, action: &str) {
        self.order_cmd(
            order_id,
            json!({"type": action, "order_id": order_id, "actor": "tester", "reason": "test",
                   "at": AT}),
        )
        .await;
    }

    /// Record a result; a TREASURY / FAIL_FALLBACK one is also written back to its
    /// line, as `POST /v1/bills/payment-results` does.
    #[allow(clippy::too_many_arguments)]
    pub async fn result(
        &self,
        result_id: i64,
        (order_id, line_id, station_id): (i64, i64, i64),
        source: &str,
        status: &str,
        amount: i64,
        trigger: &str,
    ) {
        let cmd: PaymentResultCommand = serde_json::from_value(json!({
            "type": "RecordPaymentResult", "result_id": result_id, "order_id": order_id,
            "line_id": line_id, "small_station_id": station_id, "month": "202609",
            "status": status, "kind": "NORMAL_PAYMENT", "source": source,
            "amount_minor": amount, "paid_at": AT, "trigger_source": trigger,
            "recorded_at": AT}))
        .expect("result command");
        run_command::<PaymentResult>(self.store(), &meta(), &result_id.to_string(), cmd)
            .await
            .expect("result recorded");
        if matches!(source, "TREASURY" | "FAIL_FALLBACK") {
            self.order_cmd(
                order_id,
                json!({"type": "WriteLineResult", "order_id": order_id, "line_id": line_id,
                       "result_id": result_id, "station_id": station_id, "month": "202609",
                       "status": status, "amount_minor": amount, "paid_at": AT,
                       "trigger_source": trigger, "at": AT}),
            )
            .await;
        }
    }

    pub async fn void(&self, result_id: i64, trigger: &str) {
        let cmd: PaymentResultCommand = serde_json::from_value(json!({
            "type": "VoidPaymentResult", "result_id": result_id, "trigger_source": trigger,
            "voided_at": AT}))
        .expect("void command");
        run_command::<PaymentResult>(self.store(), &meta(), &result_id.to_string(), cmd)
            .await
            .expect("result voided");
    }

    pub async fn loaded(&self, order_id: i64) -> factledger::runtime::bus::Loaded<PaymentOrder> {
        load::<PaymentOrder>(self.store(), &order_id.to_string())
            .await
            .expect("load order")
    }

    pub async fn status(&self, order_id: i64) -> OrderStatusCode {
        self.loaded(order_id).await.state.status.expect("created")
    }

    pub async fn line_status(&self, order_id: i64, line_id: i64) -> Option<LineStatusCode> {
        self.loaded(order_id).await.state.lines[&line_id]
            .latest_result
            .as_ref()
            .map(|r| r.line_status)
    }
}
