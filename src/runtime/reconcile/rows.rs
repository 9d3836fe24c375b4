//! The stored rows a reconciliation reads (events, balances, ledger, blocks), decoded
//! the same way from either backend.

use crate::infra::store::StoredEvent;
use chrono::{DateTime, NaiveDateTime, Utc};
use factledger_aggregates::wallet::{Buckets, WALLET_AGGREGATE_TYPE};
use factledger_projections::wallet::LedgerRow;
use serde::Serialize;
use sqlx::mysql::MySqlRow;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

// ---------------------------------------------------------------------------------
// Rows as read, on both backends.

/// Columns of a row, read the same way on both backends (MariaDB `_bin` text columns
/// arrive as bytes; SQLite stores times as text).
pub(super) trait Cols {
    fn text(&self, i: usize) -> Result<String, sqlx::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, i: usize) -> Result<i64, sqlx::Error>;
    fn time(&self, i: usize) -> Result<DateTime<Utc>, sqlx::Error>;
}

impl Cols for MySqlRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        crate::infra::store::mysql::text(self, i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        crate::infra::store::mysql::opt_text(self, i)
    }
    fn int(&self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }
    fn time(&self, i: usize) -> Result<DateTime<Utc>, sqlx::Error> {
        Ok(self.try_get::<NaiveDateTime, _>(i)?.and_utc())
    }
}

impl Cols for SqliteRow {
    fn text(&self, i: usize) -> Result<String, sqlx::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<i64, sqlx::Error> {
        self.try_get(i)
    }
    fn time(&self, i: usize) -> Result<DateTime<Utc>, sqlx::Error> {
        let s: String = self.try_get(i)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| sqlx::Error::ColumnDecode {
                index: i.to_string(),
                source: Box::new(e),
            })
    }
}

pub(super) fn buckets(r: &dyn Cols, first: usize) -> Result<Buckets, sqlx::Error> {
    Ok(Buckets {
        pending_minor: r.int(first)?,
        available_minor: r.int(first + 1)?,
        frozen_minor: r.int(first + 2)?,
        risk_hold_minor: r.int(first + 3)?,
    })
}

/// A wallet event row with the ledger key stored beside it.
pub(super) struct EventRow {
    pub(super) event: StoredEvent,
    /// `(ledger_ref_type, ledger_ref_id, ledger_entry_type)` when the row has one.
    pub(super) ledger_ref: Option<(String, String, String)>,
}

pub(super) const EVENT_COLUMNS: &str = "global_position, aggregate_id, sequence, event_type, \
     event_version, event_id, payload, metadata, correlation_id, actor, hash, recorded_at, \
     ledger_ref_type, ledger_ref_id, ledger_entry_type, hash_key";

pub(super) fn event_row(r: &dyn Cols) -> Result<EventRow, sqlx::Error> {
    let event_version = i32::try_from(r.int(4)?).map_err(|e| sqlx::Error::ColumnDecode {
        index: "event_version".into(),
        source: Box::new(e),
    })?;
    let ledger_ref = match (r.opt_text(12)?, r.opt_text(13)?, r.opt_text(14)?) {
        (None, None, None) => None,
        (t, id, e) => Some((
            t.unwrap_or_default(),
            id.unwrap_or_default(),
            e.unwrap_or_default(),
        )),
    };
    Ok(EventRow {
        event: StoredEvent {
            global_position: r.int(0)?,
            aggregate_type: WALLET_AGGREGATE_TYPE.to_owned(),
            aggregate_id: r.text(1)?,
            sequence: r.int(2)?,
            event_type: r.text(3)?,
            event_version,
            event_id: r.text(5)?,
            payload: r.text(6)?,
            metadata: r.text(7)?,
            correlation_id: r.text(8)?,
            actor: r.text(9)?,
            hash: r.text(10)?,
            hash_key: r.text(15)?,
            recorded_at: r.time(11)?,
        },
        ledger_ref,
    })
}

/// A `wallet_balances` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct BalanceRecord {
    pub(super) wallet_id: String,
    pub(super) user_id: String,
    pub(super) currency: String,
    #[serde(flatten)]
    pub(super) balances: Buckets,
    pub(super) version: i64,
    pub(super) last_position: i64,
}

pub(super) const BALANCE_SELECT: &str = "SELECT wallet_id, user_id, currency, pending_minor, \
     available_minor, frozen_minor, risk_hold_minor, version, last_position FROM wallet_balances";

pub(super) fn balance_row(r: &dyn Cols) -> Result<BalanceRecord, sqlx::Error> {
    Ok(BalanceRecord {
        wallet_id: r.text(0)?,
        user_id: r.text(1)?,
        currency: r.text(2)?,
        balances: buckets(r, 3)?,
        version: r.int(7)?,
        last_position: r.int(8)?,
    })
}

/// A `wallet_ledger` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct LedgerRecord {
    pub(super) wallet_id: String,
    pub(super) sequence: i64,
    pub(super) global_position: i64,
    pub(super) ref_type: String,
    pub(super) ref_id: String,
    pub(super) entry_type: String,
    pub(super) amount_minor: i64,
    pub(super) delta: Buckets,
    pub(super) before: Buckets,
    pub(super) after: Buckets,
    pub(super) recorded_at: String,
}

impl From<LedgerRow> for LedgerRecord {
    fn from(l: LedgerRow) -> Self {
        LedgerRecord {
            wallet_id: l.wallet_id,
            sequence: l.sequence,
            global_position: l.global_position,
            ref_type: l.ref_type,
            ref_id: l.ref_id,
            entry_type: l.entry_type.to_owned(),
            amount_minor: l.amount_minor,
            delta: l.delta,
            before: l.before,
            after: l.after,
            recorded_at: l.recorded_at,
        }
    }
}

pub(super) const LEDGER_SELECT: &str =
    "SELECT wallet_id, sequence, global_position, ref_type, ref_id, \
     entry_type, amount_minor, delta_pending_minor, delta_available_minor, delta_frozen_minor, \
     delta_risk_hold_minor, before_pending_minor, before_available_minor, before_frozen_minor, \
     before_risk_hold_minor, after_pending_minor, after_available_minor, after_frozen_minor, \
     after_risk_hold_minor, recorded_at FROM wallet_ledger";

pub(super) fn ledger_row(r: &dyn Cols) -> Result<LedgerRecord, sqlx::Error> {
    Ok(LedgerRecord {
        wallet_id: r.text(0)?,
        sequence: r.int(1)?,
        global_position: r.int(2)?,
        ref_type: r.text(3)?,
        ref_id: r.text(4)?,
        entry_type: r.text(5)?,
        amount_minor: r.int(6)?,
        delta: buckets(r, 7)?,
        before: buckets(r, 11)?,
        after: buckets(r, 15)?,
        recorded_at: r.text(19)?,
    })
}

/// A `wallet_blocks` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct BlockRecord {
    pub(super) wallet_id: String,
    pub(super) ref_type: String,
    pub(super) ref_id: String,
    pub(super) reason: Option<String>,
}

pub(super) const BLOCK_SELECT: &str =
    "SELECT wallet_id, ref_type, ref_id, reason FROM wallet_blocks";

pub(super) fn block_row(r: &dyn Cols) -> Result<BlockRecord, sqlx::Error> {
    Ok(BlockRecord {
        wallet_id: r.text(0)?,
        ref_type: r.text(1)?,
        ref_id: r.text(2)?,
        reason: r.opt_text(3)?,
    })
}
