//! The request's JSON form, `task_data`: [`RefreshRequest::parse`] checks the
//! submission limits (bytes, JSON nodes, scopes) and every field, refusing unknown and
//! foreign fields; [`RefreshRequest::to_task_data`] writes it back so that it parses
//! equal.

use super::error::RefreshRequestError;
use super::kind::{RefreshMode, ScopeType};
use super::limits::{REFRESH_TASK_DATA_BYTES_MAX, REFRESH_TASK_DATA_NODES_MAX};
use super::request::RefreshRequest;
use super::scope::{
    positive, too_many, AccountScope, IdList, Locator, RefreshScope, StationMonthList,
    StationMonthScope,
};
use crate::bill::{StationMonth, YearMonth};
use factledger_aggregates::bill::TriggerSource;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

impl RefreshRequest {
    /// The request as `task_data` JSON: [`RefreshRequest::parse`] reads it back equal.
    pub fn to_task_data(&self) -> String {
        let mut body = Map::new();
        body.insert("scope_type".into(), json!(self.scope.scope_type().name()));
        match &self.scope {
            RefreshScope::StationMonths(l) => {
                let list: Vec<Value> = l.0.iter().map(station_month_json).collect();
                body.insert("station_months".into(), Value::Array(list));
            }
            RefreshScope::PartnerBills(l) => {
                body.insert("partner_bill_ids".into(), json!(l.0));
            }
            RefreshScope::Diffs(l) => {
                body.insert("diff_ids".into(), json!(l.0));
            }
            RefreshScope::OrderBills(l) => {
                body.insert("order_bill_ids".into(), json!(l.0));
            }
            RefreshScope::Accounts(a) => {
                body.insert("small_account_ids".into(), json!(a.small_account_ids));
                body.insert("partner_account_ids".into(), json!(a.partner_account_ids));
                body.insert("month_end".into(), json!(a.month_end.to_string()));
            }
        }
        body.insert("mode".into(), json!(self.mode.as_str()));
        let sources: Vec<Value> = self
            .trigger_sources
            .iter()
            // A unit enum with serde names always serialises; `Null` is unreachable (and
            // would be refused by the re-parse of a merge, never stored silently).
            .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
            .collect();
        body.insert("trigger_sources".into(), Value::Array(sources));
        Value::Object(body).to_string()
    }

    /// Parse a request's `task_data`, in the seed's order (§4.3): size in UTF-8 bytes,
    /// JSON, node count, then the scope fields, then the scope count.
    pub fn parse(task_data: &str) -> Result<RefreshRequest, RefreshRequestError> {
        if task_data.len() > REFRESH_TASK_DATA_BYTES_MAX {
            return Err(RefreshRequestError::TooManyBytes {
                bytes: task_data.len(),
                max: REFRESH_TASK_DATA_BYTES_MAX,
            });
        }
        let value: Value = serde_json::from_str(task_data).map_err(|e| json_error(&e))?;
        let nodes = json_nodes(&value);
        if nodes > REFRESH_TASK_DATA_NODES_MAX {
            return Err(RefreshRequestError::TooManyNodes {
                nodes,
                max: REFRESH_TASK_DATA_NODES_MAX,
            });
        }
        let dto: RequestDto = serde_json::from_value(value).map_err(|e| json_error(&e))?;
        dto.into_request()
    }
}

fn station_month_json(s: &StationMonthScope) -> Value {
    let mut o = Map::new();
    o.insert("station_id".into(), json!(s.station_month.station_id));
    o.insert(
        "bill_month".into(),
        json!(s.station_month.month.to_string()),
    );
    let l = s.locator;
    let ids = [
        ("partner_org_id", l.partner_org_id),
        ("partner_bill_id", l.partner_bill_id),
        ("partner_account_id", l.partner_account_id),
        ("diff_id", l.diff_id),
    ];
    for (name, id) in ids {
        if let Some(id) = id {
            o.insert(name.into(), json!(id));
        }
    }
    Value::Object(o)
}

/// Every object, array and scalar counts one (as `jobs::json_nodes`).
fn json_nodes(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(json_nodes).sum::<usize>(),
        Value::Object(o) => 1 + o.values().map(json_nodes).sum::<usize>(),
        _ => 1,
    }
}

fn json_error(e: &serde_json::Error) -> RefreshRequestError {
    RefreshRequestError::Json {
        message: e.to_string(),
    }
}

/// The request JSON as submitted. Unknown fields are refused, so a typo is an error,
/// not a silently ignored scope.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestDto {
    scope_type: Value,
    station_months: Option<Vec<StationMonthDto>>,
    partner_bill_ids: Option<Vec<i64>>,
    diff_ids: Option<Vec<i64>>,
    order_bill_ids: Option<Vec<i64>>,
    small_account_ids: Option<Vec<i64>>,
    partner_account_ids: Option<Vec<i64>>,
    /// `yyyymm`, account scope only.
    month_end: Option<String>,
    /// `ALL` (default) or `UNFINISHED`.
    mode: Option<String>,
    trigger_sources: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StationMonthDto {
    station_id: Option<i64>,
    /// `yyyymm`.
    bill_month: Option<String>,
    partner_org_id: Option<i64>,
    partner_bill_id: Option<i64>,
    partner_account_id: Option<i64>,
    diff_id: Option<i64>,
}

impl RequestDto {
    fn into_request(self) -> Result<RefreshRequest, RefreshRequestError> {
        let scope_type = parse_scope_type(&self.scope_type)?;
        self.refuse_other_fields(scope_type)?;
        let mode = self
            .mode
            .as_deref()
            .map_or(Ok(RefreshMode::All), parse_mode)?;
        let trigger_sources = parse_trigger_sources(self.trigger_sources.unwrap_or_default())?;
        let missing = |field: &str| RefreshRequestError::MissingField {
            field: field.to_owned(),
            scope_type,
        };
        let ids = |list: Option<Vec<i64>>| list.ok_or_else(|| missing(scope_type.list_field()));
        let scope = match scope_type {
            ScopeType::StationMonth => {
                let list = self
                    .station_months
                    .ok_or_else(|| missing("station_months"))?;
                // The limit counts the input list length: check it before parsing items.
                too_many("station_months", list.len(), "list length")?;
                let scopes = list
                    .into_iter()
                    .enumerate()
                    .map(|(i, dto)| dto.into_scope(i))
                    .collect::<Result<Vec<_>, _>>()?;
                RefreshScope::StationMonths(StationMonthList::new(scopes)?)
            }
            ScopeType::PartnerBill => RefreshScope::PartnerBills(IdList::new(
                "partner_bill_ids",
                ids(self.partner_bill_ids)?,
            )?),
            ScopeType::Diff => RefreshScope::Diffs(IdList::new("diff_ids", ids(self.diff_ids)?)?),
            ScopeType::OrderBill => {
                RefreshScope::OrderBills(IdList::new("order_bill_ids", ids(self.order_bill_ids)?)?)
            }
            ScopeType::AccountScope => {
                let month_end = self.month_end.ok_or_else(|| missing("month_end"))?;
                let month_end = YearMonth::parse(&month_end).map_err(|_| {
                    RefreshRequestError::InvalidField {
                        field: "month_end".into(),
                        value: month_end.clone(),
                        rule: "must be a legal yyyymm month",
                    }
                })?;
                RefreshScope::Accounts(AccountScope::new(
                    self.small_account_ids.unwrap_or_default(),
                    self.partner_account_ids.unwrap_or_default(),
                    month_end,
                )?)
            }
        };
        Ok(RefreshRequest {
            scope,
            mode,
            trigger_sources,
        })
    }

    /// A field of another scope type is an error, not ignored: the request means
    /// something else than its sender thinks.
    fn refuse_other_fields(&self, scope_type: ScopeType) -> Result<(), RefreshRequestError> {
        let present = [
            (
                "station_months",
                ScopeType::StationMonth,
                self.station_months.is_some(),
            ),
            (
                "partner_bill_ids",
                ScopeType::PartnerBill,
                self.partner_bill_ids.is_some(),
            ),
            ("diff_ids", ScopeType::Diff, self.diff_ids.is_some()),
            (
                "order_bill_ids",
                ScopeType::OrderBill,
                self.order_bill_ids.is_some(),
            ),
            (
                "small_account_ids",
                ScopeType::AccountScope,
                self.small_account_ids.is_some(),
            ),
            (
                "partner_account_ids",
                ScopeType::AccountScope,
                self.partner_account_ids.is_some(),
            ),
            (
                "month_end",
                ScopeType::AccountScope,
                self.month_end.is_some(),
            ),
        ];
        match present
            .into_iter()
            .find(|(_, owner, set)| *set && *owner != scope_type)
        {
            Some((field, _, _)) => Err(RefreshRequestError::FieldNotAllowed { field, scope_type }),
            None => Ok(()),
        }
    }
}

impl StationMonthDto {
    fn into_scope(self, i: usize) -> Result<StationMonthScope, RefreshRequestError> {
        let field = format!("station_months[{i}]");
        let station_id = self
            .station_id
            .ok_or_else(|| RefreshRequestError::MissingField {
                field: format!("{field}.station_id"),
                scope_type: ScopeType::StationMonth,
            })?;
        positive(&format!("{field}.station_id"), station_id)?;
        let bill_month = self
            .bill_month
            .ok_or_else(|| RefreshRequestError::MissingField {
                field: format!("{field}.bill_month"),
                scope_type: ScopeType::StationMonth,
            })?;
        let month =
            YearMonth::parse(&bill_month).map_err(|_| RefreshRequestError::InvalidField {
                field: format!("{field}.bill_month"),
                value: bill_month.clone(),
                rule: "must be a legal yyyymm month",
            })?;
        let locator = Locator::new(
            &field,
            self.partner_org_id,
            self.partner_bill_id,
            self.partner_account_id,
            self.diff_id,
        )?;
        Ok(StationMonthScope {
            station_month: StationMonth { station_id, month },
            locator,
        })
    }
}

/// `scope_type` as a code (`10`) or a name (`"STATION_MONTH"`).
fn parse_scope_type(v: &Value) -> Result<ScopeType, RefreshRequestError> {
    let found = ScopeType::ALL.into_iter().find(|t| match v {
        Value::Number(n) => n.as_i64() == Some(t.code()),
        Value::String(s) => s == t.name(),
        _ => false,
    });
    found.ok_or_else(|| RefreshRequestError::InvalidField {
        field: "scope_type".into(),
        value: v.to_string(),
        rule: "must be one of 10 STATION_MONTH, 20 PARTNER_BILL, 30 DIFF, 40 ORDER_BILL, 50 ACCOUNT_SCOPE",
    })
}

/// `mode`: `ALL` or `UNFINISHED`.
fn parse_mode(s: &str) -> Result<RefreshMode, RefreshRequestError> {
    match s {
        "ALL" => Ok(RefreshMode::All),
        "UNFINISHED" => Ok(RefreshMode::Unfinished),
        _ => Err(RefreshRequestError::InvalidField {
            field: "mode".into(),
            value: s.into(),
            rule: "must be ALL or UNFINISHED",
        }),
    }
}

fn parse_trigger_sources(
    names: Vec<String>,
) -> Result<BTreeSet<TriggerSource>, RefreshRequestError> {
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            serde_json::from_value(Value::String(name.clone())).map_err(|_| {
                RefreshRequestError::InvalidField {
                    field: format!("trigger_sources[{i}]"),
                    value: name,
                    rule: "must be a trigger source of the event contract (e.g. PAYMENT_IMPORT_EFFECTIVE, MANUAL)",
                }
            })
        })
        .collect()
}
