//! The bill projector (issue 6 items 3 and 8): bill facts appended straight through the
//! store, folded into the fact tables, each affected station-month recomputed into
//! `fi_customer_bill`, `fi_customer_bill_partner`, `fi_monthly_income_difference` and
//! the decision explanation; full and scoped rebuilds reproduce the live tables; the
//! read endpoint explains a station-month. Both backends.

use crate::common;

use common::{meta, TestDb};
use factledger::bill::projection::{self as bill_projection, Account, CatchUp};
use factledger::infra::db::Db;
use factledger::infra::store::{SealedEvent, StreamAppend, UnitOfWork};
use factledger::runtime::projector::select_rows;
use factledger_aggregates::bill::{
    BILL_LOCK_AGGREGATE_TYPE, PARTNER_BILL_AGGREGATE_TYPE, PAYMENT_ORDER_AGGREGATE_TYPE,
    PAYMENT_RESULT_AGGREGATE_TYPE, REFERENCE_AGGREGATE_TYPE, STATION_MONTH_AGGREGATE_TYPE,
};
use factledger_projections::bill::tables::{
    CUSTOMER_BILL, CUSTOMER_BILL_PARTNER, DECISIONS, DECISION_FINDINGS, MONTHLY_INCOME_DIFFERENCE,
};
use factledger_projections::bill::{StationMonth, YearMonth};
use factledger_projections::table::{Cell, MemRow, TableDef};
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};

/// Appends bill facts as events, each a minute later than the one before.
struct Facts<'a> {
    db: &'a TestDb,
    minutes: AtomicI64,
}

/// The time of the `n`th fact.
fn minute(n: i64) -> String {
    let t = chrono::DateTime::parse_from_rfc3339("2026-10-01T00:00:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc)
        + chrono::Duration::minutes(n);
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl<'a> Facts<'a> {
    fn new(db: &'a TestDb) -> Facts<'a> {
        Facts {
            db,
            minutes: AtomicI64::new(0),
        }
    }

    /// The time the next fact carries.
    fn now(&self) -> String {
        minute(self.minutes.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// The time of the last fact recorded.
    fn last(&self) -> String {
        minute(self.minutes.load(Ordering::SeqCst))
    }

    async fn record(&self, aggregate_type: &str, stream: &str, payload: Value) {
        let store = &self.db.store;
        let (version, hash) = store
            .stream_head(aggregate_type, stream)
            .await
            .expect("stream head");
        let event_type = payload["type"].as_str().expect("tagged payload").to_owned();
        let sealed = SealedEvent::seal(
            store.keyring().active(),
            &hash,
            aggregate_type,
            stream,
            version + 1,
            event_type,
            1,
            payload.to_string(),
            &meta(),
            uuid::Uuid::new_v4(),
            chrono::DateTime::parse_from_rfc3339(&self.last())
                .expect("time")
                .with_timezone(&chrono::Utc),
        );
        store
            .append(&[UnitOfWork {
                streams: vec![StreamAppend {
                    aggregate_type: aggregate_type.to_owned(),
                    aggregate_id: stream.to_owned(),
                    expected_version: version,
                    expected_hash: hash,
                    events: vec![sealed],
                }],
                ..Default::default()
            }])
            .await
            .expect("append");
    }

    async fn small_bill(&self, station: i64, month: &str, bill_id: i64, account: i64, rent: i64) {
        let p = json!({"type": "SmallBillRecorded", "station_id": station, "month": month,
            "bill_id": bill_id, "account_id": account, "rent_minor": rent, "recorded_at": self.now()});
        self.record(
            STATION_MONTH_AGGREGATE_TYPE,
            &format!("{station}:{month}"),
            p,
        )
        .await;
    }

    async fn diff(&self, station: i64, month: &str, diff_id: i64, partner_bill: Option<i64>) {
        let p = json!({"type": "DiffRecorded", "station_id": station, "month": month,
            "diff_id": diff_id, "partner_bill_id": partner_bill, "recorded_at": self.now()});
        self.record(
            STATION_MONTH_AGGREGATE_TYPE,
            &format!("{station}:{month}"),
            p,
        )
        .await;
    }

    async fn partner_bill(
        &self,
        id: i64,
        account: i64,
        month: &str,
        pre_rent: Option<i64>,
        deduction: i64,
    ) {
        let p = json!({"type": "PartnerBillRecorded", "partner_bill_id": id,
            "partner_account_id": account, "month": month, "pre_rent_minor": pre_rent,
            "deduction_minor": deduction, "recorded_at": self.now()});
        self.record(PARTNER_BILL_AGGREGATE_TYPE, &id.to_string(), p)
            .await;
    }

    async fn repush(&self, id: i64) {
        let p = json!({"type": "PartnerBillRepushed", "partner_bill_id": id, "repushed_at": self.now()});
        self.record(PARTNER_BILL_AGGREGATE_TYPE, &id.to_string(), p)
            .await;
    }

    async fn reference(&self, stream: &str, p: Value) {
        self.record(REFERENCE_AGGREGATE_TYPE, stream, p).await;
    }

    async fn customer_account(&self, id: i64, start: &str, cutoff: Option<&str>) {
        let p = json!({"type": "CustomerAccountRecorded", "account_id": id,
            "income_start_month": start, "current_payable_cutoff_month": cutoff,
            "recorded_at": self.now()});
        self.reference(&format!("customer_account:{id}"), p).await;
    }

    async fn partner_account(&self, id: i64, org: i64, platform_station: Option<i64>) {
        let p = json!({"type": "PartnerAccountRecorded", "partner_account_id": id,
            "partner_org_id": org, "platform_station_id": platform_station,
            "recorded_at": self.now()});
        self.reference(&format!("partner_account:{id}"), p).await;
    }

    async fn profile(&self, org: i64, cycle: &str) {
        let p = json!({"type": "PartnerProfileConfigured", "partner_org_id": org,
            "payment_cycle": cycle, "config_version": 1, "recorded_at": self.now()});
        self.reference(&format!("partner_profile:{org}"), p).await;
    }

    async fn route(&self, route: &str) {
        let p = json!({"type": "AccountRouteSet", "route": route, "recorded_at": self.now()});
        self.reference("account_route", p).await;
    }

    async fn opening_paid(&self, id: i64, station: i64, org: i64, amount: i64) {
        let p = json!({"type": "OpeningPaidBalanceRecorded", "opening_id": id,
            "small_station_id": station, "platform_station_id": null, "partner_org_id": org,
            "opening_paid_minor": amount, "updated_at": self.now()});
        self.reference(&format!("opening_paid:{id}"), p).await;
    }

    async fn opening_deduction(&self, id: i64, account: i64, amount: i64) {
        let p = json!({"type": "OpeningDeductionRecorded", "opening_id": id,
            "partner_account_id": account, "effective": true, "amount_minor": amount,
            "updated_at": self.now()});
        self.reference(&format!("opening_deduction:{id}"), p).await;
    }

    async fn order(&self, order: i64, p: Value) {
        self.record(PAYMENT_ORDER_AGGREGATE_TYPE, &order.to_string(), p)
            .await;
    }

    /// An order with one PAYABLE line for the station-month, published (version 1,
    /// round 1) and submitted for review.
    async fn order_in_review(&self, order: i64, line: i64, station: i64, month: &str) {
        self.order(
            order,
            json!({"type": "PaymentOrderCreated", "order_id": order,
            "treasury": true, "actor": "ops", "created_at": self.now()}),
        )
        .await;
        self.order(
            order,
            json!({"type": "LineAdded", "order_id": order, "line_id": line,
            "station_id": station, "month": month, "kind": "PAYABLE",
            "planned_amount_minor": 600, "at": self.now()}),
        )
        .await;
        self.order(
            order,
            json!({"type": "PaymentOrderSubmitted", "order_id": order,
            "submit_round": 1, "actor": "ops", "at": self.now()}),
        )
        .await;
        self.order(
            order,
            json!({"type": "PaymentOrderPublished", "order_id": order,
            "publish_version": 1, "submit_round": 1, "line_ids": [line], "at": self.now()}),
        )
        .await;
    }

    async fn approve(&self, order: i64, line: i64) {
        self.order(
            order,
            json!({"type": "PaymentOrderApproved", "order_id": order,
            "planned": [{"line_id": line, "planned_amount_minor": 600}], "actor": "boss",
            "at": self.now()}),
        )
        .await;
    }

    async fn lock(&self, lock: i64, station: i64, month: &str, order: i64, line: i64) {
        let p = json!({"type": "BillLockReserved", "lock_id": lock, "station_id": station,
            "month": month, "order_id": order, "line_id": line, "publish_version": 1,
            "submit_round": 1, "at": self.now()});
        self.record(BILL_LOCK_AGGREGATE_TYPE, &format!("{station}:{month}"), p)
            .await;
    }

    async fn release(&self, lock: i64, station: i64, month: &str) {
        let p = json!({"type": "BillLockReleased", "lock_id": lock, "at": self.now()});
        self.record(BILL_LOCK_AGGREGATE_TYPE, &format!("{station}:{month}"), p)
            .await;
    }

    /// A result of the station-month for partner org `org`.
    async fn result(
        &self,
        id: i64,
        station: i64,
        month: &str,
        org: i64,
        status: &str,
        amount: i64,
    ) {
        let p = json!({"type": "PaymentResultRecorded", "result_id": id, "order_id": null,
            "line_id": null, "small_station_id": station, "platform_station_id": null,
            "partner_org_id": org, "month": month, "status": status, "kind": "NORMAL_PAYMENT",
            "source": "TREASURY", "amount_minor": amount, "paid_at": self.now(),
            "fail_reason": null, "trigger_source": "TREASURY_RESULT_WRITEBACK",
            "recorded_at": self.last()});
        self.record(PAYMENT_RESULT_AGGREGATE_TYPE, &id.to_string(), p)
            .await;
    }

    async fn void(&self, id: i64) {
        let p = json!({"type": "PaymentResultVoided", "result_id": id,
            "trigger_source": "PAYMENT_IMPORT_DELETE", "voided_at": self.now()});
        self.record(PAYMENT_RESULT_AGGREGATE_TYPE, &id.to_string(), p)
            .await;
    }
}

/// Station 100, September 2026: account 101 (income from 202601, cutoff 202612) with
/// rent 1,000 in each of 202607, 202608 and 202609; partner account 201 of org 301 on
/// platform station 100 (monthly cycle); partner bill 401 of 202609 proposing 600 with
/// a deduction of 100; diff 501 linking it.
async fn fixture(f: &Facts<'_>) {
    f.customer_account(101, "202601", Some("202612")).await;
    for (month, bill) in [("202607", 1007), ("202608", 1008), ("202609", 1009)] {
        f.small_bill(100, month, bill, 101, 1000).await;
    }
    f.partner_account(201, 301, Some(100)).await;
    f.profile(301, "MONTHLY").await;
    f.partner_bill(401, 201, "202609", Some(600), 100).await;
    f.diff(100, "202609", 501, Some(401)).await;
}

async fn projections(db: &TestDb) -> Db {
    db.database().await.db
}

async fn catch_up(db: &TestDb, p: &Db) {
    bill_projection::catch_up(&db.store, p)
        .await
        .expect("the bill projector applies every fact");
}

async fn rows(p: &Db, def: &TableDef, tail: &str, args: &[Cell]) -> Vec<MemRow> {
    select_rows(p, def, tail, args).await.expect("rows")
}

/// The row of a station-month in a table keyed `(station_id, <month column>)`.
async fn row_of(p: &Db, def: &TableDef, station: i64, month: &str) -> Option<MemRow> {
    let month_column = if def.name == MONTHLY_INCOME_DIFFERENCE.name {
        "share_month"
    } else {
        "bill_yearmonth"
    };
    rows(
        p,
        def,
        &format!("WHERE station_id = ? AND {month_column} = ?"),
        &[Cell::Int(station), Cell::text(month)],
    )
    .await
    .pop()
}

async fn partner_row(p: &Db, id: i64) -> MemRow {
    rows(p, &CUSTOMER_BILL_PARTNER, "WHERE id = ?", &[Cell::Int(id)])
        .await
        .pop()
        .expect("partner bill row")
}

async fn decision(p: &Db, station: i64, month: &str) -> MemRow {
    row_of(p, &DECISIONS, station, month)
        .await
        .unwrap_or_else(|| panic!("a decision for {station}:{month}"))
}

fn int(v: i64) -> Cell {
    Cell::Int(v)
}

fn text(s: &str) -> Cell {
    Cell::text(s)
}

/// The row with `facts_json` left out (checked on its own).
fn without_facts(mut row: MemRow) -> MemRow {
    row.remove("facts_json");
    row
}

fn expect(pairs: &[(&'static str, Cell)]) -> MemRow {
    pairs.iter().cloned().collect()
}

// ---------------------------------------------------------------------------------

both_backends!(
    a_representative_station_month_has_exactly_these_columns,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        let p = projections(&db).await;
        catch_up(&db, &p).await;
        // The newest fact the decision of 100:202609 read is the diff, recorded last.
        let t = text(&f.last());
        let small = row_of(&p, &CUSTOMER_BILL, 100, "202609")
            .await
            .expect("small");
        assert_eq!(
            small,
            expect(&[
                ("id", int(1009)),
                ("station_id", int(100)),
                ("bill_yearmonth", text("202609")),
                ("account_id", int(101)),
                ("rent", int(1000)),
                ("payment_status", int(20)),
                ("paid_amount", int(0)),
                ("cumulative_paid_amount", int(0)),
                ("locked_payment_order_id", Cell::Null),
                ("locked_order_bill_id", Cell::Null),
                ("payment_status_update_time", t.clone()),
            ])
        );
        // Available = 3 × 1,000 rent − 0 paid − 100 deduction = 2,900 ≥ 600: passed.
        let partner_side = [
            ("payment_status", int(20)),
            ("paid_amount", int(0)),
            ("cumulative_paid_amount", int(0)),
            ("locked_payment_order_id", Cell::Null),
            ("locked_order_bill_id", Cell::Null),
            ("payment_status_update_time", t.clone()),
            ("partner_query_status", int(10)),
            ("pre_rent_check_result", int(10)),
            ("pre_rent_check_reason", Cell::Null),
            ("current_payment_amount", int(600)),
            ("unqualified_flag", int(0)),
            ("unqualified_reason", Cell::Null),
        ];
        let mut partner = expect(&[
            ("id", int(401)),
            ("partner_account_id", int(201)),
            ("station_id", int(100)),
            ("bill_yearmonth", text("202609")),
            ("pre_rent", int(600)),
            ("deduction", int(100)),
            ("decided_station_month", text("100:202609")),
            ("last_unqualified_order_id", Cell::Null),
            ("last_unqualified_time", Cell::Null),
        ]);
        partner.extend(partner_side.iter().cloned());
        assert_eq!(partner_row(&p, 401).await, partner);
        let mut diff = expect(&[
            ("id", int(501)),
            ("station_id", int(100)),
            ("share_month", text("202609")),
            ("partner_bill_id", int(401)),
            ("partner_account_id", int(201)),
            ("small_account_id", int(101)),
            ("rent", int(1000)),
            ("pre_rent", int(600)),
        ]);
        diff.extend(partner_side.iter().cloned());
        assert_eq!(
            row_of(&p, &MONTHLY_INCOME_DIFFERENCE, 100, "202609").await,
            Some(diff)
        );
        let d = decision(&p, 100, "202609").await;
        assert_eq!(
            without_facts(d.clone()),
            expect(&[
                ("station_id", int(100)),
                ("bill_yearmonth", text("202609")),
                ("payment_status", int(20)),
                ("decided_by", text("R10 unpaid")),
                ("partner_query_status", int(10)),
                ("partner_query_rule", text("Q6 otherwise unchecked")),
                ("pre_rent_check_result", int(10)),
                ("pre_rent_available", int(2900)),
                ("decided_at", t),
            ])
        );
        let Some(Cell::Text(facts)) = d.get("facts_json") else {
            panic!("facts json")
        };
        let facts: Value = serde_json::from_str(facts).expect("facts are JSON");
        assert_eq!(facts["station_month"], "100:202609");
        assert_eq!(facts["partner_bill"]["pre_rent_minor"], 600);
        assert_eq!(
            facts["account_small_bills"].as_array().map(Vec::len),
            Some(3)
        );
        // A small bill without a partner bill: partner bill not pushed.
        assert_eq!(
            decision(&p, 100, "202608").await.get("decided_by"),
            Some(&text("R4 partner bill not pushed"))
        );
        assert!(
            row_of(&p, &MONTHLY_INCOME_DIFFERENCE, 100, "202608")
                .await
                .is_none(),
            "no diff, no diff row"
        );
    }
);

both_backends!(
    a_later_fact_moves_paid_back_to_partially_paid_and_unpaid,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        let p = projections(&db).await;
        f.result(9001, 100, "202609", 301, "PAY_SUCCESS", 600).await;
        catch_up(&db, &p).await;
        let d = decision(&p, 100, "202609").await;
        assert_eq!(d.get("decided_by"), Some(&text("R7 paid")));
        let small = row_of(&p, &CUSTOMER_BILL, 100, "202609")
            .await
            .expect("small");
        assert_eq!(small.get("payment_status"), Some(&int(50)));
        assert_eq!(small.get("paid_amount"), Some(&int(600)));
        assert_eq!(small.get("cumulative_paid_amount"), Some(&int(600)));

        // The partner re-states its bill at 1,000: 600 paid of 1,000 is partial.
        f.partner_bill(401, 201, "202609", Some(1000), 100).await;
        catch_up(&db, &p).await;
        let d = decision(&p, 100, "202609").await;
        assert_eq!(d.get("decided_by"), Some(&text("R8 partial payment")));
        assert_eq!(d.get("payment_status"), Some(&int(60)));
        let partner = partner_row(&p, 401).await;
        assert_eq!(partner.get("payment_status"), Some(&int(60)));
        assert_eq!(partner.get("current_payment_amount"), Some(&int(400)));
        assert_eq!(partner.get("pre_rent"), Some(&int(1000)));
        assert_eq!(
            partner.get("payment_status_update_time"),
            Some(&text(&f.last()))
        );

        // The result is voided: nothing paid any more.
        f.void(9001).await;
        catch_up(&db, &p).await;
        let small = row_of(&p, &CUSTOMER_BILL, 100, "202609")
            .await
            .expect("small");
        assert_eq!(small.get("payment_status"), Some(&int(20)));
        assert_eq!(small.get("paid_amount"), Some(&int(0)));
        assert_eq!(
            small.get("payment_status_update_time"),
            Some(&text(&f.last()))
        );
        assert_eq!(
            decision(&p, 100, "202609").await.get("decided_by"),
            Some(&text("R10 unpaid"))
        );
    }
);

both_backends!(
    an_unrecorded_partner_profile_is_an_error_finding_until_it_is_recorded,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        f.customer_account(102, "202601", Some("202612")).await;
        f.small_bill(110, "202609", 1109, 102, 1000).await;
        f.partner_account(202, 302, Some(110)).await;
        f.partner_bill(402, 202, "202609", Some(500), 0).await;
        f.diff(110, "202609", 502, Some(402)).await;
        let p = projections(&db).await;
        catch_up(&db, &p).await;
        let finding = row_of(&p, &DECISION_FINDINGS, 110, "202609")
            .await
            .expect("an error finding, not a silent null");
        assert_eq!(
            finding.get("code"),
            Some(&text("PARTNER_PROFILE_UNRECORDED"))
        );
        let Some(Cell::Text(message)) = finding.get("message") else {
            panic!("message")
        };
        assert!(message.contains("partner org 302"), "{message}");
        assert!(row_of(&p, &DECISIONS, 110, "202609").await.is_none());
        let small = row_of(&p, &CUSTOMER_BILL, 110, "202609")
            .await
            .expect("small");
        assert_eq!(small.get("payment_status"), Some(&Cell::Null));
        assert_eq!(
            partner_row(&p, 402).await.get("decided_station_month"),
            Some(&Cell::Null)
        );

        f.profile(302, "MONTHLY").await;
        catch_up(&db, &p).await;
        assert!(row_of(&p, &DECISION_FINDINGS, 110, "202609")
            .await
            .is_none());
        assert_eq!(
            decision(&p, 110, "202609").await.get("payment_status"),
            Some(&int(20))
        );
        assert_eq!(
            partner_row(&p, 402).await.get("pre_rent_check_result"),
            Some(&int(10))
        );
    }
);

both_backends!(
    each_fact_changes_the_rows_it_should,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        // Another station entirely: only the account route (below) reaches it.
        f.customer_account(102, "202601", Some("202612")).await;
        f.small_bill(110, "202609", 1109, 102, 700).await;
        let p = projections(&db).await;
        catch_up(&db, &p).await;
        let untouched = decision(&p, 110, "202609").await;
        let available = |d: MemRow| d.get("pre_rent_available").cloned();

        // Customer account: the cutoff moves to 202607 → only its rent counts (1,000 − 100).
        f.customer_account(101, "202601", Some("202607")).await;
        catch_up(&db, &p).await;
        assert_eq!(available(decision(&p, 100, "202609").await), Some(int(900)));
        // Opening deduction of the partner account: 50 more deducted.
        f.opening_deduction(601, 201, 50).await;
        catch_up(&db, &p).await;
        assert_eq!(available(decision(&p, 100, "202609").await), Some(int(850)));
        // Another partner bill of the account (no diff, another month): its deduction counts.
        f.partner_bill(403, 201, "202608", Some(0), 30).await;
        catch_up(&db, &p).await;
        assert_eq!(available(decision(&p, 100, "202609").await), Some(int(820)));
        // Opening paid balance of station 100 × org 301: cumulative 200.
        f.opening_paid(701, 100, 301, 200).await;
        catch_up(&db, &p).await;
        let d = decision(&p, 100, "202609").await;
        assert_eq!(available(d), Some(int(620)));
        let small = row_of(&p, &CUSTOMER_BILL, 100, "202609")
            .await
            .expect("small");
        assert_eq!(small.get("cumulative_paid_amount"), Some(&int(200)));
        // A success of an earlier month: cumulative 300, this month still unpaid; the
        // check now fails (520 < 600).
        f.result(9002, 100, "202608", 301, "PAY_SUCCESS", 100).await;
        catch_up(&db, &p).await;
        let d = decision(&p, 100, "202609").await;
        assert_eq!(available(d.clone()), Some(int(520)));
        assert_eq!(d.get("pre_rent_check_result"), Some(&int(20)));
        let partner = partner_row(&p, 401).await;
        assert_eq!(partner.get("cumulative_paid_amount"), Some(&int(300)));
        assert_eq!(partner.get("paid_amount"), Some(&int(0)));
        assert_eq!(
            partner.get("pre_rent_check_reason"),
            Some(&text("AVAILABLE_PAYABLE_NOT_ENOUGH"))
        );
        // 202608 has no partner bill: the result is its own paid, rule R4 still.
        assert_eq!(
            row_of(&p, &CUSTOMER_BILL, 100, "202608")
                .await
                .and_then(|r| r.get("paid_amount").cloned()),
            Some(int(100))
        );

        // Payment order in review under a valid lock → 30, lock projected.
        f.order_in_review(801, 811, 100, "202609").await;
        f.lock(901, 100, "202609", 801, 811).await;
        catch_up(&db, &p).await;
        let d = decision(&p, 100, "202609").await;
        assert_eq!(
            d.get("decided_by"),
            Some(&text("R1 in review under a valid lock"))
        );
        let diff = row_of(&p, &MONTHLY_INCOME_DIFFERENCE, 100, "202609")
            .await
            .expect("diff");
        assert_eq!(diff.get("payment_status"), Some(&int(30)));
        assert_eq!(diff.get("locked_payment_order_id"), Some(&int(801)));
        assert_eq!(diff.get("locked_order_bill_id"), Some(&int(811)));
        // Approved → awaiting payment under the lock.
        f.approve(801, 811).await;
        catch_up(&db, &p).await;
        assert_eq!(
            decision(&p, 100, "202609").await.get("payment_status"),
            Some(&int(40))
        );
        // Released: no valid lock; the approved master still waits (R6).
        f.release(901, 100, "202609").await;
        catch_up(&db, &p).await;
        let small = row_of(&p, &CUSTOMER_BILL, 100, "202609")
            .await
            .expect("small");
        assert_eq!(small.get("locked_payment_order_id"), Some(&Cell::Null));
        assert_eq!(
            decision(&p, 100, "202609").await.get("decided_by"),
            Some(&text("R6 awaiting payment without a lock"))
        );

        // A re-push marks the partner bill waiting for re-verification.
        f.repush(401).await;
        catch_up(&db, &p).await;
        let partner = partner_row(&p, 401).await;
        assert_eq!(partner.get("last_unqualified_order_id"), Some(&int(0)));
        assert_eq!(
            decision(&p, 100, "202609").await.get("partner_query_rule"),
            Some(&text("Q3 re-push pending re-verification"))
        );
        // Partner profile: an illegal cycle means no formula: the check is null.
        f.profile(301, "EVERY_FULL_MOON").await;
        catch_up(&db, &p).await;
        assert_eq!(
            partner_row(&p, 401).await.get("pre_rent_check_result"),
            Some(&Cell::Null)
        );
        // The platform route: no result or opening carries platform station 100, so the
        // cumulative paid falls to 0.
        f.route("PLATFORM").await;
        catch_up(&db, &p).await;
        assert_eq!(
            partner_row(&p, 401).await.get("cumulative_paid_amount"),
            Some(&int(0))
        );
        // The diff is re-recorded without a partner bill: the partner row is no longer
        // this station-month's.
        f.diff(100, "202609", 501, None).await;
        catch_up(&db, &p).await;
        let partner = partner_row(&p, 401).await;
        assert_eq!(partner.get("decided_station_month"), Some(&Cell::Null));
        assert_eq!(partner.get("payment_status"), Some(&Cell::Null));
        assert_eq!(
            decision(&p, 100, "202609").await.get("decided_by"),
            Some(&text("R4 partner bill not pushed"))
        );

        // The account route reached station 110 too: its decision read the newer route.
        let after = decision(&p, 110, "202609").await;
        assert_ne!(after.get("decided_at"), untouched.get("decided_at"));
        assert_eq!(
            without_facts(after.clone()).get("payment_status"),
            Some(&int(99))
        );
    }
);

both_backends!(
    full_and_scoped_rebuilds_reproduce_the_live_tables,
    |db: TestDb| async move { rebuilds_reproduce(db, 0x5eed, 7).await }
);

both_backends!(
    rebuilds_reproduce_a_projector_that_ran_event_by_event,
    |db: TestDb| async move { rebuilds_reproduce(db, 42, 1).await }
);

/// A random sequence projected live every `every` events; then a full rebuild, a
/// scoped rebuild of every station-month and of each account give the same tables.
async fn rebuilds_reproduce(db: TestDb, seed: u64, every: usize) {
    {
        let f = Facts::new(&db);
        let p = projections(&db).await;
        random_facts(&f, &db, &p, seed, every).await;
        catch_up(&db, &p).await;
        let live = bill_projection::dump(&p).await.expect("dump");
        let decided: usize = live
            .iter()
            .filter(|(t, _)| *t == DECISIONS.name || *t == DECISION_FINDINGS.name)
            .map(|(_, rows)| rows.len())
            .sum();
        assert!(decided >= 6, "the sequence decides several station-months");

        let outcome = bill_projection::rebuild_full(&db.store, &p)
            .await
            .expect("full rebuild");
        assert!(outcome.events_read > 100);
        same_tables(&p, &live, "full rebuild").await;

        // Scoped: spoil every decided row, then recompute every station-month.
        let all: Vec<StationMonth> = station_months(&live);
        spoil(&db).await;
        let n = bill_projection::recompute_station_months(&p, &all)
            .await
            .expect("scoped rebuild");
        assert_eq!(n, all.len());
        same_tables(&p, &live, "station-months").await;

        // Scoped by account: spoil, then recompute what each account's facts reach.
        for account in [
            Account::Small(101),
            Account::Small(102),
            Account::Partner(201),
            Account::Partner(202),
        ] {
            let reached = bill_projection::station_months_of_account(&p, account)
                .await
                .expect("resolve");
            assert!(!reached.is_empty(), "{account:?} reaches station-months");
            spoil(&db).await;
            bill_projection::recompute_station_months(&p, &all)
                .await
                .expect("restore");
            bill_projection::rebuild_account(&p, account)
                .await
                .expect("account rebuild");
            same_tables(&p, &live, &format!("{account:?}")).await;
        }
    }
}

both_backends!(
    a_bulk_catch_up_folds_the_backlog_then_sweeps_to_the_live_tables,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        let p = projections(&db).await;
        random_facts(&f, &db, &p, 7, 1).await;
        catch_up(&db, &p).await;
        let live = bill_projection::dump(&p).await.expect("dump");
        let all = station_months(&live);
        assert!(all.len() >= 8, "{} station-months", all.len());

        // The same log behind an empty projection, caught up in bulk: every full batch
        // is folded without recomputing, and the sweep is left pending.
        forget(&db).await;
        let bulk = CatchUp {
            batch: 7,
            bulk_lag: 0,
            sweep_chunk: 3,
            sweep: false,
        };
        bill_projection::catch_up_with(&db.store, &p, bulk)
            .await
            .expect("bulk catch-up");
        assert_eq!(
            p.checkpoint("bill", 1).await.expect("checkpoint"),
            db.store.head_position().await.expect("head")
        );
        for sm in &all {
            assert!(pending(&p, *sm).await, "{sm} waits for the sweep");
        }
        // One chunk of the sweep: the first three station-months, in key order.
        assert!(bill_projection::sweep_chunk(&p, 3).await.expect("sweep"));
        for (i, sm) in all.iter().enumerate() {
            assert_eq!(pending(&p, *sm).await, i >= 3, "{sm}");
        }
        // The projector at the head finishes the sweep: the live tables exactly.
        catch_up(&db, &p).await;
        for sm in &all {
            assert!(!pending(&p, *sm).await, "{sm} swept");
        }
        assert!(!bill_projection::sweep_chunk(&p, 3).await.expect("none"));
        same_tables(&p, &live, "bulk catch-up and sweep").await;

        // A full rebuild over a pending sweep leaves none.
        forget(&db).await;
        bill_projection::catch_up_with(&db.store, &p, bulk)
            .await
            .expect("bulk catch-up");
        bill_projection::rebuild_full(&db.store, &p)
            .await
            .expect("full rebuild");
        assert!(!pending(&p, all[0]).await);
        same_tables(&p, &live, "full rebuild after a bulk catch-up").await;

        // The default catch-up sweeps before it returns.
        forget(&db).await;
        let sweeping = CatchUp {
            sweep: true,
            ..bulk
        };
        bill_projection::catch_up_with(&db.store, &p, sweeping)
            .await
            .expect("bulk catch-up");
        same_tables(&p, &live, "bulk catch-up with its sweep").await;
    }
);

async fn pending(p: &Db, sm: StationMonth) -> bool {
    bill_projection::sweep_pending(p, sm).await.expect("sweep")
}

/// Empty every table of the bill projection and move its checkpoint back to 0.
async fn forget(db: &TestDb) {
    let d = db.database().await.db;
    for def in bill_projection::tables() {
        common::exec(&d, &format!("DELETE FROM {}", def.name)).await;
    }
    common::exec(
        &d,
        "UPDATE projection_checkpoints SET position = 0 WHERE name = 'bill'",
    )
    .await;
}

both_backends!(
    a_fact_that_moves_recomputes_its_old_readers_too,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        f.customer_account(102, "202601", Some("202612")).await;
        // 202608's diff links partner bill 401 as well: both station-months are findings.
        f.diff(100, "202608", 508, Some(401)).await;
        let p = projections(&db).await;
        catch_up(&db, &p).await;
        for month in ["202608", "202609"] {
            let finding = row_of(&p, &DECISION_FINDINGS, 100, month).await;
            assert_eq!(
                finding.and_then(|r| r.get("code").cloned()),
                Some(text("PARTNER_BILL_LINKED_TWICE")),
                "{month}"
            );
        }
        // 202609's diff lets go of 401: 202608, which it no longer reads, is decided.
        f.diff(100, "202609", 501, None).await;
        // The small bill of 202607 moves to account 102: account 101's other months
        // read one rent less.
        f.small_bill(100, "202607", 1007, 102, 1000).await;
        catch_up(&db, &p).await;
        assert!(row_of(&p, &DECISION_FINDINGS, 100, "202608")
            .await
            .is_none());
        assert_eq!(
            partner_row(&p, 401).await.get("decided_station_month"),
            Some(&text("100:202608"))
        );
        let Some(Cell::Text(facts)) = decision(&p, 100, "202609").await.get("facts_json").cloned()
        else {
            panic!("facts")
        };
        let facts: Value = serde_json::from_str(&facts).expect("json");
        assert_eq!(
            facts["account_small_bills"].as_array().map(Vec::len),
            Some(2)
        );
        // And nothing the live projector left behind differs from a recomputation.
        let live = bill_projection::dump(&p).await.expect("dump");
        let all = station_months(&live);
        spoil(&db).await;
        bill_projection::recompute_station_months(&p, &all)
            .await
            .expect("recompute");
        same_tables(&p, &live, "recomputed").await;
    }
);

both_backends!(
    a_bill_event_that_cannot_apply_stops_the_projector_right_before_it,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        // A conclusion withdrawn on a line never recorded: no fact row to update.
        f.order(
            999,
            json!({"type": "UnqualifiedWithdrawn", "order_id": 999, "line_id": 9999,
                   "actor": "ops", "reason": "typo", "at": f.now()}),
        )
        .await;
        let bad = db.store.head_position().await.expect("head");
        f.small_bill(120, "202609", 1209, 101, 10).await;
        let p = projections(&db).await;
        let err = bill_projection::catch_up(&db.store, &p)
            .await
            .expect_err("stops at the bad event");
        let factledger::runtime::projection::RunnerError::Projection(e) = err else {
            panic!("a projection error: {err}")
        };
        assert_eq!(e.global_position, bad);
        assert_eq!(
            p.checkpoint("bill", 1).await.expect("checkpoint"),
            bad - 1,
            "everything before it is applied"
        );
        assert!(row_of(&p, &DECISIONS, 100, "202609").await.is_some());
        assert!(row_of(&p, &CUSTOMER_BILL, 120, "202609").await.is_none());
    }
);

/// The tables now are exactly `expected`; a difference names the table and the row.
async fn same_tables(p: &Db, expected: &[(&'static str, Vec<MemRow>)], what: &str) {
    let now = bill_projection::dump(p).await.expect("dump");
    for ((table, rows), (_, want)) in now.iter().zip(expected) {
        assert_eq!(rows.len(), want.len(), "{what}: {table} row count");
        for (row, want) in rows.iter().zip(want) {
            assert_eq!(row, want, "{what}: a row of {table}");
        }
    }
}

/// Every station-month with a small bill or a diff in a dump.
fn station_months(dump: &[(&'static str, Vec<MemRow>)]) -> Vec<StationMonth> {
    let mut out = std::collections::BTreeSet::new();
    for (table, rows) in dump {
        let month_column = match *table {
            "bill_fact_small_bills" => "bill_yearmonth",
            "bill_fact_diffs" => "share_month",
            _ => continue,
        };
        for row in rows {
            let (Some(Cell::Int(station_id)), Some(Cell::Text(month))) =
                (row.get("station_id"), row.get(month_column))
            else {
                panic!("station-month columns")
            };
            out.insert(StationMonth {
                station_id: *station_id,
                month: YearMonth::parse(month).expect("month"),
            });
        }
    }
    out.into_iter().collect()
}

/// Damage the decided rows the way a bug would.
async fn spoil(db: &TestDb) {
    let d = db.database().await.db;
    common::exec(
        &d,
        "UPDATE fi_customer_bill SET payment_status = 1, paid_amount = -1",
    )
    .await;
    common::exec(
        &d,
        "UPDATE fi_customer_bill_partner SET payment_status = 1 \
         WHERE decided_station_month IS NOT NULL",
    )
    .await;
    common::exec(&d, "DELETE FROM fi_monthly_income_difference").await;
    common::exec(&d, "DELETE FROM bill_decisions").await;
    common::exec(&d, "UPDATE bill_decision_findings SET message = 'stale'").await;
}

/// A partner bill of the station's partner account: 400 and 401 are account 201's,
/// 402 and 403 account 202's (diffs link any of them).
fn own_bill(station: i64, rng: &mut rand::rngs::StdRng) -> i64 {
    (if station == 100 { 400 } else { 402 }) + rng.random_range(0..2)
}

/// A seeded random sequence of bill facts over two stations and three months,
/// projected live in small batches as it goes.
async fn random_facts(f: &Facts<'_>, db: &TestDb, p: &Db, seed: u64, every: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let months = ["202604", "202605", "202606", "202607", "202608", "202609"];
    let stations = [100i64, 110];
    f.customer_account(101, "202601", Some("202612")).await;
    f.customer_account(102, "202601", None).await;
    f.partner_account(201, 301, Some(100)).await;
    f.partner_account(202, 302, Some(110)).await;
    f.profile(301, "MONTHLY").await;
    f.profile(302, "QUARTERLY").await;
    f.route("PLATFORM").await;
    let mut results = Vec::new();
    let mut orders = 0i64;
    for step in 0..150usize {
        let station = stations[rng.random_range(0..2)];
        let month = months[rng.random_range(0..months.len())];
        let account = if station == 100 { 101 } else { 102 };
        let partner_account = if station == 100 { 201 } else { 202 };
        let org = if station == 100 { 301 } else { 302 };
        let m: i64 = month.parse().expect("month");
        match rng.random_range(0..12) {
            0 | 1 => {
                // Now and then a bill moves to the other station's account.
                let account = if rng.random_bool(0.15) {
                    203 - account
                } else {
                    account
                };
                f.small_bill(
                    station,
                    month,
                    station * 1_000_000 + m,
                    account,
                    rng.random_range(1..20) * 100,
                )
                .await
            }
            2 => {
                let bill = 400 + rng.random_range(0..4);
                let linked = rng.random_bool(0.8).then_some(bill);
                f.diff(station, month, station * 1_000_000 + m + 5, linked)
                    .await
            }
            3 | 4 => {
                let pre_rent = rng.random_bool(0.9).then(|| rng.random_range(0..12) * 100);
                f.partner_bill(
                    own_bill(station, &mut rng),
                    partner_account,
                    month,
                    pre_rent,
                    rng.random_range(0..3) * 10,
                )
                .await
            }
            5 => {
                let id = 9000 + step as i64;
                let status = ["PAY_SUCCESS", "PAY_FAIL", "PAYING"][rng.random_range(0..3)];
                f.result(
                    id,
                    station,
                    month,
                    org,
                    status,
                    rng.random_range(1..8) * 100,
                )
                .await;
                results.push(id);
            }
            6 if !results.is_empty() => {
                let id = results[rng.random_range(0..results.len())];
                f.void(id).await;
            }
            7 => {
                let cutoff = months[rng.random_range(0..months.len())];
                f.customer_account(account, "202601", Some(cutoff)).await
            }
            8 => {
                f.opening_deduction(
                    600 + rng.random_range(0..3),
                    partner_account,
                    rng.random_range(0..5) * 10,
                )
                .await
            }
            9 => {
                f.opening_paid(
                    700 + rng.random_range(0..3),
                    station,
                    org,
                    rng.random_range(0..5) * 100,
                )
                .await
            }
            10 => {
                orders += 1;
                let (order, line) = (800 + orders, 8000 + orders);
                f.order_in_review(order, line, station, month).await;
                f.lock(900 + orders, station, month, order, line).await;
                if rng.random_bool(0.5) {
                    f.approve(order, line).await;
                }
                if rng.random_bool(0.5) {
                    f.release(900 + orders, station, month).await;
                }
            }
            11 if rng.random_bool(0.3) => {
                let platform = rng.random_bool(0.7).then_some(station);
                f.partner_account(partner_account, org, platform).await
            }
            _ => f.repush(own_bill(station, &mut rng)).await,
        }
        if step % every == 0 {
            catch_up(db, p).await;
        }
    }
    // No fact at the end that recomputes everything (the account route): it would
    // hide a station-month the live projector missed.
    f.repush(401).await;
}

both_backends!(
    the_read_endpoint_explains_a_station_month,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        f.result(9001, 100, "202609", 301, "PAY_SUCCESS", 250).await;
        let server = common::Server::start(&db).await;
        // `serve` runs the bill projector: wait until it shows the payment.
        let mut body = Value::Null;
        for _ in 0..400 {
            let (status, b) = server.get("/v1/bills/100/202609").await;
            body = b;
            if status == 200 && body["decision"]["decided_by"] == "R8 partial payment" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        assert_eq!(body["station_month"], "100:202609", "{body}");
        assert!(body["position"].as_i64().unwrap_or(0) > 0, "{body}");
        assert_eq!(body["decision"]["payment_status"], 60);
        assert_eq!(
            body["decision"]["partner_query_rule"],
            "Q6 otherwise unchecked"
        );
        assert_eq!(body["decision"]["facts"]["results"][0]["amount_minor"], 250);
        assert_eq!(body["fi_customer_bill"]["paid_amount"], 250);
        assert_eq!(
            body["fi_customer_bill_partner"]["current_payment_amount"],
            350
        );
        assert_eq!(body["fi_monthly_income_difference"]["id"], 501);
        assert_eq!(body["finding"], Value::Null);

        let (status, body) = server.get("/v1/bills/100/202610").await;
        assert_eq!(status, 404, "{body}");
        assert!(
            body["detail"].as_str().unwrap_or("").contains("100:202610"),
            "{body}"
        );
        let (status, body) = server.get("/v1/bills/100/202613").await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["field"], "yyyymm");
        let (status, body) = server.get("/v1/bills/x1/202609").await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["field"], "station_id");

        let (_, projections) = server.get("/v1/projections").await;
        assert!(
            projections.to_string().contains("\"bill\""),
            "the bill projector is listed: {projections}"
        );
    }
);

/// `factledger rebuild bill [--scope …]`, as an operator runs it.
async fn rebuild_cli(db: &TestDb, scope: Option<&str>) -> std::process::Output {
    let url = db.url.clone();
    let scope = scope.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut args = vec![
            "--database-url".to_owned(),
            url,
            "rebuild".into(),
            "bill".into(),
        ];
        if let Some(scope) = scope {
            args.extend(["--scope".to_owned(), scope]);
        }
        std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .args(&args)
            .output()
            .expect("run factledger")
    })
    .await
    .unwrap()
}

both_backends!(
    the_cli_rebuilds_the_bill_projection_in_full_and_by_scope,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        fixture(&f).await;
        let p = projections(&db).await;
        f.result(9001, 100, "202609", 301, "PAY_SUCCESS", 600).await;
        catch_up(&db, &p).await;
        let live = bill_projection::dump(&p).await.expect("dump");

        for scope in [
            Some("station-month:100:202609"),
            Some("account:small:101"),
            Some("account:partner:201"),
            None,
        ] {
            spoil(&db).await;
            let out = rebuild_cli(&db, scope).await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{scope:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
            assert_eq!(report["projection"], "bill", "{report}");
            // A station-month, or a partner account (its partner bill's station-month
            // only: the account reaches no month without a partner bill).
            if matches!(
                scope,
                Some("station-month:100:202609" | "account:partner:201")
            ) {
                assert_eq!(report["station_months_recomputed"], 1, "{report}");
                // Only that station-month is restored; the others of the account stay spoiled.
                let other = row_of(&p, &CUSTOMER_BILL, 100, "202608").await.unwrap();
                assert_eq!(other.get("paid_amount"), Some(&int(-1)));
                let mine = row_of(&p, &CUSTOMER_BILL, 100, "202609").await.unwrap();
                assert_eq!(mine.get("paid_amount"), Some(&int(600)));
                continue;
            }
            same_tables(&p, &live, &format!("cli {scope:?}")).await;
        }

        // A scope that names nothing the bill projection knows is refused, naming it.
        let out = rebuild_cli(&db, Some("account:other:1")).await;
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--scope account:other:1"), "{stderr}");
    }
);

// R-BILL-4 across months: a quarterly cycle's cutoff of 202607 is 202609, so the rent
// of a 202609 small bill recorded later changes 202607's available payable, and the
// projector recomputes 202607 on that event; a 202601 month (another half-year, whose
// cutoff cannot reach 202609) keeps its decision and is not recomputed.
both_backends!(
    a_later_small_bill_recomputes_the_earlier_months_whose_cutoff_reaches_it,
    |db: TestDb| async move {
        let f = Facts::new(&db);
        let p = projections(&db).await;
        f.customer_account(101, "202601", Some("202612")).await;
        f.partner_account(201, 301, Some(100)).await;
        f.profile(301, "QUARTERLY").await;
        for (month, bill, pb, diff) in [("202601", 1001, 401, 501), ("202607", 1007, 407, 507)] {
            f.small_bill(100, month, bill, 101, 1000).await;
            f.partner_bill(pb, 201, month, Some(500), 0).await;
            f.diff(100, month, diff, Some(pb)).await;
        }
        catch_up(&db, &p).await;
        let available = |d: MemRow| d.get("pre_rent_available").cloned();
        // 202607: rents 202601 and 202607 (cutoff 202609) = 2,000.
        assert_eq!(
            available(decision(&p, 100, "202607").await),
            Some(int(2000))
        );
        // 202601: cutoff 202603 reads 202601 only.
        let before_jan = decision(&p, 100, "202601").await;
        assert_eq!(available(before_jan.clone()), Some(int(1000)));

        f.small_bill(100, "202609", 1009, 101, 1000).await;
        catch_up(&db, &p).await;
        assert_eq!(
            available(decision(&p, 100, "202607").await),
            Some(int(3000)),
            "202607's cutoff 202609 reaches the new rent"
        );
        assert_eq!(
            decision(&p, 100, "202601").await,
            before_jan,
            "202601 is neither changed nor rewritten"
        );
    }
);
