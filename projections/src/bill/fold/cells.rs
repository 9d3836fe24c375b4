//! Event values → the cells the fact tables store: instants as RFC 3339 text, codes by
//! their serde names, months checked as `yyyymm`, booleans as 0/1; and the two shapes
//! of a write ([`put`], [`set`]).

use super::writes::FactOp;
use crate::bill::{parse_month, StationMonth};
use crate::table::{Cell, Cells, TableDef};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// An instant as every bill table stores it (RFC 3339 UTC, microseconds: the text
/// sorts in time order, like `store::time_text`).
pub fn time_cell(t: &DateTime<Utc>) -> Cell {
    Cell::Text(time_text(t))
}

pub(super) fn time_text(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(super) fn opt_time(t: &Option<DateTime<Utc>>) -> Cell {
    t.as_ref().map_or(Cell::Null, time_cell)
}

pub(super) fn opt_int(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Int)
}

pub(super) fn flag(b: bool) -> Cell {
    Cell::Int(i64::from(b))
}

/// The serde name of a code enum (`"WAIT_PAY"`): what the fact tables store.
pub(super) fn code<T: Serialize>(v: &T) -> Result<String, String> {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => Ok(s),
        other => Err(format!("not a code: {other:?}")),
    }
}

pub(super) fn code_cell<T: Serialize>(v: &T) -> Result<Cell, String> {
    code(v).map(Cell::Text)
}

pub(super) fn parse_code<T: DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|e| format!("code {s}: {e}"))
}

/// A `yyyymm` of an event, checked (a bad month stops the projector at the event).
pub(super) fn month_cell(s: &str) -> Result<Cell, String> {
    parse_month(s)
        .map(|m| Cell::Text(m.to_string()))
        .map_err(|e| e.to_string())
}

pub(super) fn opt_month_cell(s: &Option<String>) -> Result<Cell, String> {
    s.as_deref().map_or(Ok(Cell::Null), month_cell)
}

pub(super) fn station_month(station_id: i64, month: &str) -> Result<StationMonth, String> {
    Ok(StationMonth {
        station_id,
        month: parse_month(month).map_err(|e| e.to_string())?,
    })
}

pub(super) fn decode<T: DeserializeOwned>(payload: &Value) -> Result<T, String> {
    T::deserialize(payload).map_err(|e| format!("payload does not decode: {e}"))
}

pub(super) fn put(table: &'static TableDef, row: Cells) -> FactOp {
    FactOp::Put { table, row }
}

pub(super) fn set(table: &'static TableDef, key: Cells, set: Cells) -> FactOp {
    FactOp::Set { table, key, set }
}
