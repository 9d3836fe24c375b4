//! `GET /v1/accounts/trial-balance` and `GET /v1/accounts/{account}`: the journal
//! projection read back. A trial balance sums every account per currency — Σ debits
//! must equal Σ credits, at the head or as of any position the journal has applied —
//! and an account statement pages its journal lines by position.

use crate::infra::db::{Db, Get};
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::Json;
use factledger_aggregates::ledger::{AccountKind, Side};
use factledger_projections::ledger::{NAME, VERSION};
use factledger_projections::table::{Cell, ColType, Column};
use serde::{Deserialize, Serialize};

/// The only partition until the log is partitioned (issue 21).
pub const PARTITION_DEFAULT: &str = "default";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialBalanceQuery {
    pub as_of_position: Option<i64>,
    pub min_position: Option<i64>,
}

/// Σ debits and Σ credits of one currency.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CurrencyTotals {
    pub currency: String,
    pub debits_minor: i64,
    pub credits_minor: i64,
    /// Debits minus credits: 0 when the journal balances.
    pub difference_minor: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TrialBalance {
    pub partition: String,
    /// The position the totals are as of.
    pub as_of_position: i64,
    /// Every currency balances.
    pub balanced: bool,
    pub currencies: Vec<CurrencyTotals>,
}

const TOTALS: &[Column] = &[
    Column {
        name: "currency",
        ty: ColType::Text,
    },
    Column {
        name: "debits",
        ty: ColType::Int,
    },
    Column {
        name: "credits",
        ty: ColType::Int,
    },
];

/// The trial balance as of `as_of` (the head of the journal when `None`), given the
/// journal has applied `journal_position`. An `as_of` beyond it is refused by the
/// caller.
pub async fn trial_balance_at(
    db: &Db,
    as_of: Option<i64>,
    journal_position: i64,
) -> Result<TrialBalance, sqlx::Error> {
    let rows = match as_of {
        None => {
            let sql = "SELECT currency, CAST(COALESCE(SUM(debits_minor), 0) AS SIGNED) AS debits, \
                       CAST(COALESCE(SUM(credits_minor), 0) AS SIGNED) AS credits \
                       FROM account_balances GROUP BY currency ORDER BY currency";
            db.fetch(&signed(db, sql), &[], TOTALS).await?
        }
        Some(p) => {
            let sql = "SELECT currency, CAST(COALESCE(SUM(debit_minor), 0) AS SIGNED) AS debits, \
                       CAST(COALESCE(SUM(credit_minor), 0) AS SIGNED) AS credits \
                       FROM journal WHERE position <= ? GROUP BY currency ORDER BY currency";
            db.fetch(&signed(db, sql), &[Cell::Int(p)], TOTALS).await?
        }
    };
    let mut currencies = Vec::with_capacity(rows.len());
    for r in &rows {
        let (debits, credits) = (r.int("debits")?, r.int("credits")?);
        currencies.push(CurrencyTotals {
            currency: r.text("currency")?,
            debits_minor: debits,
            credits_minor: credits,
            difference_minor: debits - credits,
        });
    }
    Ok(TrialBalance {
        partition: PARTITION_DEFAULT.to_owned(),
        as_of_position: as_of.unwrap_or(journal_position),
        balanced: currencies.iter().all(|c| c.difference_minor == 0),
        currencies,
    })
}

/// MariaDB sums BIGINTs as DECIMAL: `CAST … AS SIGNED` brings them back to integers;
/// SQLite's sum is already one (and its `CAST` wants `INTEGER`).
fn signed(db: &Db, sql: &str) -> String {
    match db.dialect() {
        crate::infra::db::Dialect::Mysql => sql.to_owned(),
        crate::infra::db::Dialect::Sqlite => sql.replace("AS SIGNED", "AS INTEGER"),
    }
}

/// `GET /v1/accounts/trial-balance`: Σ debits and Σ credits per currency over every
/// account, at the journal's head or `as_of_position` (a position the journal has
/// not applied yet is 409 `JOURNAL_BEHIND`).
#[utoipa::path(
    get,
    path = "/v1/accounts/trial-balance",
    params(("as_of_position" = Option<i64>, Query, description = "totals as of this global position (default: the journal's head)"),
           ("min_position" = Option<i64>, Query, description = "wait until the journal has applied this position")),
    responses((status = 200, body = TrialBalance), (status = 409, body = ProblemBody),
              (status = 422, body = ProblemBody), (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor()))]
pub async fn trial_balance(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<TrialBalanceQuery>,
) -> Result<Json<TrialBalance>, Problem> {
    let position =
        crate::runtime::http::reflected_on(&state.read_db, NAME, VERSION, q.min_position).await?;
    if let Some(p) = q.as_of_position {
        if p < 0 {
            return Err(Problem::invalid(
                "INVALID_FIELD",
                "as_of_position",
                "must not be negative",
            ));
        }
        if p > position {
            return Err(Problem::new(
                axum::http::StatusCode::CONFLICT,
                "JOURNAL_BEHIND",
                format!("the journal is at position {position}, not yet at {p}; retry"),
            )
            .field("as_of_position"));
        }
    }
    let tb = trial_balance_at(&state.read_db, q.as_of_position, position)
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    Ok(Json(tb))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountQuery {
    /// Entries after this position.
    pub after: Option<i64>,
    pub limit: Option<i64>,
    pub min_position: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JournalEntry {
    pub position: i64,
    pub debit_minor: i64,
    pub credit_minor: i64,
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: String,
    /// The stream whose event made the posting.
    pub stream_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AccountStatement {
    pub account: String,
    pub kind: String,
    pub currency: String,
    pub normal_side: String,
    pub debits_minor: i64,
    pub credits_minor: i64,
    /// On the normal side: credits − debits for a credit-normal account, else the reverse.
    pub balance_minor: i64,
    pub entries: Vec<JournalEntry>,
    /// `after` for the next page, or null at the end.
    pub next_after: Option<i64>,
    /// Global position the journal reflects.
    pub position: i64,
}

const BALANCE: &[Column] = &[
    Column {
        name: "kind",
        ty: ColType::Text,
    },
    Column {
        name: "currency",
        ty: ColType::Text,
    },
    Column {
        name: "normal_side",
        ty: ColType::Text,
    },
    Column {
        name: "debits_minor",
        ty: ColType::Int,
    },
    Column {
        name: "credits_minor",
        ty: ColType::Int,
    },
];

const ENTRY: &[Column] = &[
    Column {
        name: "position",
        ty: ColType::Int,
    },
    Column {
        name: "debit_minor",
        ty: ColType::Int,
    },
    Column {
        name: "credit_minor",
        ty: ColType::Int,
    },
    Column {
        name: "ref_type",
        ty: ColType::Text,
    },
    Column {
        name: "ref_id",
        ty: ColType::Text,
    },
    Column {
        name: "entry_type",
        ty: ColType::Text,
    },
    Column {
        name: "stream_id",
        ty: ColType::Text,
    },
];

/// `GET /v1/accounts/{account}`: an account's totals and its journal lines, paged by
/// position. An account name outside the chart is 422; one the journal has never
/// touched is 404 `ACCOUNT_NOT_FOUND`.
#[utoipa::path(
    get,
    path = "/v1/accounts/{account}",
    params(("account" = String, Path, description = "An account of the chart, e.g. wallet:u1:IDR:available or commission_expense:SHOPEE:IDR"),
           ("after" = Option<i64>, Query, description = "entries after this position"),
           ("limit" = Option<i64>, Query, description = "1..=1000, default 100"),
           ("min_position" = Option<i64>, Query, description = "wait until the journal has applied this position")),
    responses((status = 200, body = AccountStatement), (status = 404, body = ProblemBody),
              (status = 422, body = ProblemBody), (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(account = %account, actor = %caller.principal.actor()))]
pub async fn account(
    State(state): State<AppState>,
    caller: Caller,
    Path(account): Path<String>,
    QueryParams(q): QueryParams<AccountQuery>,
) -> Result<Json<AccountStatement>, Problem> {
    let Some(kind) = AccountKind::of(&account).filter(|_| account.len() <= 300) else {
        let prefixes: Vec<&str> = AccountKind::ALL.iter().map(|k| k.prefix()).collect();
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "account",
            format!(
                "must be an account of the chart: <kind>:…, kind one of {}",
                prefixes.join(", ")
            ),
        ));
    };
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "after",
            "must not be negative",
        ));
    }
    let limit = crate::runtime::http::page_limit(q.limit)?;
    let position =
        crate::runtime::http::reflected_on(&state.read_db, NAME, VERSION, q.min_position).await?;
    let internal = |e: sqlx::Error| Problem::internal(e.to_string());
    let sql = "SELECT kind, currency, normal_side, debits_minor, credits_minor \
               FROM account_balances WHERE account = ?";
    let Some(b) = state
        .db
        .fetch_optional(sql, &[Cell::text(&account)], BALANCE)
        .await
        .map_err(internal)?
    else {
        return Err(Problem::new(
            axum::http::StatusCode::NOT_FOUND,
            "ACCOUNT_NOT_FOUND",
            format!("no posting has touched account {account}"),
        )
        .field("account"));
    };
    let sql = "SELECT position, debit_minor, credit_minor, ref_type, ref_id, entry_type, \
               stream_id FROM journal WHERE account = ? AND position > ? \
               ORDER BY position, leg LIMIT ?";
    let args = [Cell::text(&account), Cell::Int(after), Cell::Int(limit)];
    let rows = state
        .read_db
        .fetch(sql, &args, ENTRY)
        .await
        .map_err(internal)?;
    let entries = rows
        .iter()
        .map(|r| {
            Ok(JournalEntry {
                position: r.int("position")?,
                debit_minor: r.int("debit_minor")?,
                credit_minor: r.int("credit_minor")?,
                ref_type: r.text("ref_type")?,
                ref_id: r.text("ref_id")?,
                entry_type: r.text("entry_type")?,
                stream_id: r.text("stream_id")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(internal)?;
    let next_after = (entries.len() as i64 == limit)
        .then(|| entries.last().map(|e| e.position))
        .flatten();
    let (debits, credits) = (
        b.int("debits_minor").map_err(internal)?,
        b.int("credits_minor").map_err(internal)?,
    );
    let balance = match kind.normal_side() {
        Side::Credit => credits - debits,
        Side::Debit => debits - credits,
    };
    Ok(Json(AccountStatement {
        account,
        kind: b.text("kind").map_err(internal)?,
        currency: b.text("currency").map_err(internal)?,
        normal_side: b.text("normal_side").map_err(internal)?,
        debits_minor: debits,
        credits_minor: credits,
        balance_minor: balance,
        entries,
        next_after,
        position,
    }))
}
