//! The multi-row fact writer (`write`) keeps the one-statement-per-op order: a later
//! put of a key wins (within one statement and across statements), a `Set` sees the
//! puts before it, a read between events sees every earlier put, and an event's error
//! still names its position. On SQLite always, on MariaDB when
//! `FACTLEDGER_TEST_MYSQL_URL` names a server.

use super::write::{rows_max, FactWriter, ROWS_MAX};
use super::{apply_in, Step};
use crate::infra::db::{Db, Tx};
use factledger_projections::bill::fold::{FactOp, Folded, Touch};
use factledger_projections::bill::tables::{
    CUSTOMER_BILL_PARTNER, LINES, LOCKS, PARTNER_BILLS, SMALL_BILLS,
};
use factledger_projections::table::{Cell, Cells, ColType, MemRow, TableDef};

/// A whole row of `def`: `set` columns as given, the others a placeholder value.
fn row(def: &'static TableDef, set: &[(&str, Cell)]) -> Cells {
    def.columns
        .iter()
        .map(|c| {
            let given = set
                .iter()
                .find(|(n, _)| *n == c.name)
                .map(|(_, v)| v.clone());
            let value = given.unwrap_or(match c.ty {
                ColType::Int => Cell::Int(1),
                ColType::Text => Cell::text("202401"),
                ColType::OptInt | ColType::OptText => Cell::Null,
            });
            (c.name, value)
        })
        .collect()
}

fn put(def: &'static TableDef, set: &[(&str, Cell)]) -> FactOp {
    FactOp::Put {
        table: def,
        row: row(def, set),
    }
}

fn set(def: &'static TableDef, key: (&'static str, i64), column: &'static str, v: &str) -> FactOp {
    FactOp::Set {
        table: def,
        key: vec![(key.0, Cell::Int(key.1))],
        set: vec![(column, Cell::text(v))],
    }
}

async fn get(tx: &mut Tx, def: &TableDef, key: &str, id: i64) -> MemRow {
    tx.row(def, &format!("WHERE {key} = ?"), &[Cell::Int(id)])
        .await
        .expect("read")
        .unwrap_or_else(|| panic!("{} {key} = {id}: no row", def.name))
}

async fn count(tx: &mut Tx, def: &TableDef) -> usize {
    tx.rows(def, "", &[]).await.expect("read").len()
}

/// Every case on one freshly migrated database.
async fn cases(db: &Db) {
    // Puts held back across events and tables, a Set between them, the same key put
    // again, and more rows than one statement holds.
    let mut tx = Tx::begin(db).await.expect("begin");
    let mut w = FactWriter::default();
    let small = |station: i64, rent: i64| {
        put(
            &SMALL_BILLS,
            &[
                ("station_id", Cell::Int(station)),
                ("rent", Cell::Int(rent)),
            ],
        )
    };
    let partner = |account: i64, deduction: i64| {
        put(
            &PARTNER_BILLS,
            &[
                ("partner_bill_id", Cell::Int(7)),
                ("partner_account_id", Cell::Int(account)),
                ("deduction", Cell::Int(deduction)),
            ],
        )
    };
    let line = |status: &str| {
        put(
            &LINES,
            &[("line_id", Cell::Int(5)), ("status", Cell::text(status))],
        )
    };
    let lock = |status: &str| {
        put(
            &LOCKS,
            &[("lock_id", Cell::Int(9)), ("status", Cell::text(status))],
        )
    };
    let many = ROWS_MAX as i64 * 2 + 500;
    let mut ops: Vec<(i64, FactOp)> = vec![
        (1, small(1, 100)),
        (1, partner(70, 1)),
        (2, small(1, 200)),
        (2, partner(71, 2)),
        (3, line("a")),
        (4, set(&LINES, ("line_id", 5), "status", "b")),
        (5, lock("p")),
        (6, set(&LOCKS, ("lock_id", 9), "status", "q")),
        (7, lock("r")),
    ];
    ops.extend((0..many).map(|k| (8 + k, small(1_000 + k, k))));
    ops.push((8 + many, small(1_000, -1)));
    for (position, op) in &ops {
        w.write(&mut tx, op, *position).await.expect("write");
    }
    w.flush(&mut tx).await.expect("flush");
    let rent = |r: &MemRow| r.get("rent").cloned();
    assert_eq!(
        rent(&get(&mut tx, &SMALL_BILLS, "station_id", 1).await),
        Some(Cell::Int(200))
    );
    let first = get(&mut tx, &SMALL_BILLS, "station_id", 1_000).await;
    assert_eq!(
        rent(&first),
        Some(Cell::Int(-1)),
        "a later chunk's row wins"
    );
    assert_eq!(count(&mut tx, &SMALL_BILLS).await, 1 + many as usize);
    let status = |r: &MemRow| r.get("status").cloned();
    assert_eq!(
        status(&get(&mut tx, &LINES, "line_id", 5).await),
        Some(Cell::text("b"))
    );
    assert_eq!(
        status(&get(&mut tx, &LOCKS, "lock_id", 9).await),
        Some(Cell::text("r"))
    );
    let fact = get(&mut tx, &PARTNER_BILLS, "partner_bill_id", 7).await;
    assert_eq!(fact.get("deduction"), Some(&Cell::Int(2)));
    let bill = get(&mut tx, &CUSTOMER_BILL_PARTNER, "id", 7).await;
    assert_eq!(bill.get("partner_account_id"), Some(&Cell::Int(71)));
    assert_eq!(bill.get("deduction"), Some(&Cell::Int(2)));
    assert_eq!(count(&mut tx, &CUSTOMER_BILL_PARTNER).await, 1);
    assert_eq!(w.ops, ops.len() as u64);
    let chunks = (many as usize + 2).div_ceil(rows_max(SMALL_BILLS.columns.len()));
    assert!(
        w.statements as usize <= chunks + 8,
        "{} statements for {} ops",
        w.statements,
        w.ops
    );

    // A partner bill seen again updates its identity and keeps its projection.
    tx.exec(
        "UPDATE fi_customer_bill_partner SET payment_status = 20 WHERE id = 7",
        &[],
    )
    .await
    .expect("update");
    w.write(&mut tx, &partner(72, 3), 50).await.expect("write");
    w.flush(&mut tx).await.expect("flush");
    let bill = get(&mut tx, &CUSTOMER_BILL_PARTNER, "id", 7).await;
    assert_eq!(bill.get("partner_account_id"), Some(&Cell::Int(72)));
    assert_eq!(bill.get("payment_status"), Some(&Cell::Int(20)));

    // A Set without its row names its own event; the puts before it are written.
    w.write(&mut tx, &small(2, 5), 60).await.expect("write");
    let missing = set(&LINES, ("line_id", 404), "status", "x");
    match w.write(&mut tx, &missing, 61).await {
        Err(Step::Event { position: 61, .. }) => {}
        other => panic!("want the error of position 61, got {other:?}"),
    }
    assert_eq!(
        rent(&get(&mut tx, &SMALL_BILLS, "station_id", 2).await),
        Some(Cell::Int(5))
    );
    tx.rollback().await.expect("rollback");

    // A live batch reads what earlier ops put: event 2's touch, resolved before its
    // own write moves the bill to account 34, finds event 1's bill of account 33.
    let mut tx = Tx::begin(db).await.expect("begin");
    let bill = |station: i64, account: i64| {
        put(
            &SMALL_BILLS,
            &[
                ("station_id", Cell::Int(station)),
                ("bill_id", Cell::Int(station)),
                ("account_id", Cell::Int(account)),
            ],
        )
    };
    let event = |op: FactOp, touches: Vec<Touch>| Folded {
        ops: vec![op],
        touches,
    };
    let batch = vec![
        (1, event(bill(3, 33), vec![])),
        (2, event(bill(3, 34), vec![Touch::CustomerAccount(33)])),
    ];
    let affected = apply_in(&mut tx, &batch).await.expect("apply");
    assert_eq!(
        affected, 1,
        "event 2's touch before its write sees event 1's put"
    );
    // And after its write, its own put.
    let batch = vec![(3, event(bill(5, 55), vec![Touch::CustomerAccount(55)]))];
    let affected = apply_in(&mut tx, &batch).await.expect("apply");
    assert_eq!(affected, 1, "event 3's touch after its write sees its put");
    tx.rollback().await.expect("rollback");
}

#[tokio::test]
async fn batched_fact_writes_keep_the_order_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.expect("connect");
    sqlx::migrate!("./migrations/sqlite")
        .run(&pool)
        .await
        .expect("migrate");
    cases(&Db::Sqlite(pool)).await;
}

#[tokio::test]
async fn batched_fact_writes_keep_the_order_on_mysql() {
    let Ok(url) = std::env::var("FACTLEDGER_TEST_MYSQL_URL") else {
        eprintln!("FACTLEDGER_TEST_MYSQL_URL unset: the MariaDB half is skipped");
        return;
    };
    let server = sqlx::MySqlPool::connect(&url).await.expect("connect");
    let name = format!("fl_test_bill_write_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&server)
        .await
        .expect("create");
    let checked = async {
        let url = format!("{}/{name}", url.trim_end_matches('/'));
        let pool = sqlx::MySqlPool::connect(&url).await.expect("connect");
        sqlx::migrate!("./migrations/mysql")
            .run(&pool)
            .await
            .expect("migrate");
        cases(&Db::Mysql(pool.clone())).await;
        pool.close().await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(checked)).await;
    sqlx::raw_sql(&format!("DROP DATABASE {name}"))
        .execute(&server)
        .await
        .expect("drop");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
