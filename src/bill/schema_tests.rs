//! The column lists the projections declare (`factledger_projections::bill::tables`,
//! the affiliate projectors' tables, the order-status conflicts) against the tables
//! the migrations create, column by column in storage order, on SQLite always and on
//! MariaDB when `FACTLEDGER_TEST_MYSQL_URL` names a server. The fold is held to the
//! same lists by the projections crate's own test (`every_put_row_has_the_table_columns`
//! style checks in `bill/fold/tests.rs`), so fold, tables and migrations cannot
//! disagree silently.

use factledger_projections::table::TableDef;
use sqlx::Row;

fn declared() -> Vec<TableDef> {
    let bill = factledger_projections::bill::tables::FACT_TABLES
        .iter()
        .chain(factledger_projections::bill::tables::DECISION_TABLES);
    let affiliate: Vec<TableDef> = factledger_projections::affiliate::all()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect();
    bill.copied()
        .chain(affiliate)
        .chain([crate::bill::order_status::CONFLICTS])
        .chain(factledger_projections::ledger::TABLES.iter().copied())
        .chain(
            factledger_projections::withdrawals::WITHDRAWALS_TABLES
                .iter()
                .copied(),
        )
        .chain(factledger_projections::services::TABLES.iter().copied())
        .collect()
}

fn names(t: &TableDef) -> Vec<String> {
    t.columns.iter().map(|c| c.name.to_owned()).collect()
}

#[tokio::test]
async fn every_declared_table_matches_the_sqlite_migrations_column_by_column() {
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    sqlx::migrate!("./migrations/sqlite")
        .run(&pool)
        .await
        .unwrap();
    let tables = declared();
    assert!(
        tables.len() > 20,
        "too few tables declared: {}",
        tables.len()
    );
    for t in &tables {
        let rows = sqlx::query(&format!("PRAGMA table_info({})", t.name))
            .fetch_all(&pool)
            .await
            .unwrap();
        let found: Vec<String> = rows.iter().map(|r| r.get::<String, _>("name")).collect();
        assert_eq!(found, names(t), "sqlite table {}", t.name);
    }
}

#[tokio::test]
async fn every_declared_table_matches_the_mysql_migrations_column_by_column() {
    let Ok(url) = std::env::var("FACTLEDGER_TEST_MYSQL_URL") else {
        eprintln!("FACTLEDGER_TEST_MYSQL_URL unset: the MariaDB half is skipped");
        return;
    };
    let server = sqlx::MySqlPool::connect(&url).await.unwrap();
    let db = format!("fl_test_schema_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(&format!("CREATE DATABASE {db}"))
        .execute(&server)
        .await
        .unwrap();
    let checked = async {
        let pool = sqlx::MySqlPool::connect(&format!("{}/{db}", url.trim_end_matches('/')))
            .await
            .unwrap();
        sqlx::migrate!("./migrations/mysql")
            .run(&pool)
            .await
            .unwrap();
        for t in &declared() {
            let rows = sqlx::query(
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
            )
            .bind(&db)
            .bind(t.name)
            .fetch_all(&pool)
            .await
            .unwrap();
            let found: Vec<String> = rows.iter().map(|r| r.get::<String, _>(0)).collect();
            assert_eq!(found, names(t), "mysql table {}", t.name);
        }
        pool.close().await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(checked)).await;
    sqlx::raw_sql(&format!("DROP DATABASE {db}"))
        .execute(&server)
        .await
        .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
