//! The affiliate projections (issue 5 item 6): `affiliate_orders` (a row per order),
//! `commission_records` (a row per commission) and `campaign_usage` with
//! `campaign_reservations` (a row per campaign, a row per reservation).
//!
//! Each is its own projector with its own checkpoint, so one failing never holds
//! the others back. Every event carries what its row needs (the commission's status
//! and amount after it, the campaign's `reserved_after`), so each event projects on
//! its own: a row is inserted by the stream's first event and updated by the later
//! ones, keyed by the stream id.

use crate::table::{Cell, ColType, Column, Projector, RowChange, TableDef};
use crate::{ProjectedEvent, ProjectionError};
use chrono::{DateTime, SecondsFormat, Utc};
use factledger_aggregates::affiliate_order::{OrderEvent, ORDER_AGGREGATE_TYPE};
use factledger_aggregates::campaign::{
    CampaignEvent, QuotaUnit, ReleaseReason, CAMPAIGN_AGGREGATE_TYPE,
};
use factledger_aggregates::commission::{CommissionEvent, COMMISSION_AGGREGATE_TYPE};
use serde::Deserialize;

/// Instants as stored: RFC 3339 UTC with microseconds (sorts in time order).
fn at(t: &DateTime<Utc>) -> Cell {
    Cell::Text(t.to_rfc3339_opts(SecondsFormat::Micros, true))
}

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

/// The columns every projected row carries: where its stream and the log were when
/// it was last written.
fn stamp(e: &ProjectedEvent) -> [(&'static str, Cell); 2] {
    [
        ("version", Cell::Int(e.sequence)),
        ("last_position", Cell::Int(e.global_position)),
    ]
}

fn decode<'de, T: Deserialize<'de>>(
    projection: &'static str,
    e: &'de ProjectedEvent,
) -> Result<T, ProjectionError> {
    T::deserialize(e.payload).map_err(|err| e.fail(projection, format!("does not decode: {err}")))
}

// ---------------------------------------------------------------------------------
// affiliate_orders

pub const ORDERS: &str = "affiliate_orders";

pub const ORDERS_TABLES: [TableDef; 1] = [TableDef {
    name: "affiliate_orders",
    key: &["order_id"],
    columns: &[
        col("order_id", ColType::Text),
        col("platform", ColType::Text),
        col("platform_order_id", ColType::Text),
        col("country", ColType::Text),
        col("status", ColType::Text),
        col("currency", ColType::Text),
        col("gmv_minor", ColType::Int),
        col("platform_commission_minor", ColType::Int),
        col("base_minor", ColType::Int),
        col("cashback_minor", ColType::Int),
        col("inviter_reward_minor", ColType::Int),
        col("ordered_at", ColType::Text),
        col("platform_updated_at", ColType::Text),
        col("owner_user_id", ColType::OptText),
        col("inviter_user_id", ColType::OptText),
        col("rule_set_id", ColType::Text),
        col("rule_version", ColType::Int),
        col("audit_only", ColType::Int),
        col("revision", ColType::Int),
        col("version", ColType::Int),
        col("last_position", ColType::Int),
    ],
}];

/// `affiliate_orders`: the order as its stream says now.
#[derive(Debug, Clone, Copy, Default)]
pub struct OrdersProjector;

impl Projector for OrdersProjector {
    fn name(&self) -> &'static str {
        ORDERS
    }
    fn version(&self) -> i32 {
        1
    }
    fn aggregate_types(&self) -> &'static [&'static str] {
        &[ORDER_AGGREGATE_TYPE]
    }
    fn tables(&self) -> &'static [TableDef] {
        &ORDERS_TABLES
    }

    fn project(&self, e: &ProjectedEvent) -> Result<Vec<RowChange>, ProjectionError> {
        if e.aggregate_type != ORDER_AGGREGATE_TYPE {
            return Ok(Vec::new());
        }
        let key = vec![("order_id", Cell::text(e.aggregate_id))];
        let mut set: Vec<(&'static str, Cell)> = match decode::<OrderEvent>(ORDERS, e)? {
            OrderEvent::OrderIngested(o) => {
                let mut row = key;
                row.extend([
                    ("platform", Cell::text(o.platform.as_str())),
                    (
                        "platform_order_id",
                        Cell::text(o.platform_order_id.as_str()),
                    ),
                    ("country", Cell::text(o.country.as_str())),
                    ("status", Cell::text(o.status.as_str())),
                    ("currency", Cell::text(o.currency.as_str())),
                    ("gmv_minor", Cell::Int(o.gmv_minor)),
                    (
                        "platform_commission_minor",
                        Cell::Int(o.platform_commission_minor),
                    ),
                    ("base_minor", Cell::Int(o.amounts.base_minor)),
                    ("cashback_minor", Cell::Int(o.amounts.cashback_minor)),
                    (
                        "inviter_reward_minor",
                        Cell::Int(o.amounts.inviter_reward_minor),
                    ),
                    ("ordered_at", at(&o.ordered_at)),
                    ("platform_updated_at", at(&o.platform_updated_at)),
                    ("owner_user_id", Cell::opt_text(o.owner_user_id)),
                    ("inviter_user_id", Cell::opt_text(o.inviter_user_id)),
                    ("rule_set_id", Cell::text(o.rules.rule_set_id)),
                    ("rule_version", Cell::Int(i64::from(o.rules.version))),
                    ("audit_only", Cell::Int(i64::from(o.audit_only))),
                    ("revision", Cell::Int(i64::from(o.revision))),
                ]);
                row.extend(stamp(e));
                return Ok(vec![RowChange::Insert { table: ORDERS, row }]);
            }
            OrderEvent::OrderUpdated(o) => vec![
                ("status", Cell::text(o.status.as_str())),
                ("gmv_minor", Cell::Int(o.gmv_minor)),
                (
                    "platform_commission_minor",
                    Cell::Int(o.platform_commission_minor),
                ),
                ("base_minor", Cell::Int(o.amounts.base_minor)),
                ("cashback_minor", Cell::Int(o.amounts.cashback_minor)),
                (
                    "inviter_reward_minor",
                    Cell::Int(o.amounts.inviter_reward_minor),
                ),
                ("platform_updated_at", at(&o.platform_updated_at)),
                ("revision", Cell::Int(i64::from(o.revision))),
            ],
            OrderEvent::AttributionCorrected(c) => vec![
                ("owner_user_id", Cell::opt_text(c.new_owner_user_id)),
                ("inviter_user_id", Cell::opt_text(c.new_inviter_user_id)),
                ("revision", Cell::Int(i64::from(c.revision))),
            ],
        };
        set.extend(stamp(e));
        Ok(vec![RowChange::Update {
            table: ORDERS,
            key,
            set,
        }])
    }
}

// ---------------------------------------------------------------------------------
// commission_records

pub const COMMISSIONS: &str = "commission_records";

pub const COMMISSIONS_TABLES: [TableDef; 1] = [TableDef {
    name: "commission_records",
    key: &["commission_id"],
    columns: &[
        col("commission_id", ColType::Text),
        col("order_id", ColType::Text),
        col("role", ColType::Text),
        col("beneficiary_user_id", ColType::Text),
        col("wallet_id", ColType::Text),
        col("status", ColType::Text),
        col("amount_minor", ColType::Int),
        col("recorded_amount_minor", ColType::Int),
        col("currency", ColType::Text),
        col("release_at", ColType::Text),
        col("released_at", ColType::OptText),
        col("rule_set_id", ColType::Text),
        col("rule_version", ColType::Int),
        col("cashback_bps", ColType::Int),
        col("inviter_bps", ColType::Int),
        col("max_commission_base_bps", ColType::Int),
        col("order_revision", ColType::Int),
        col("version", ColType::Int),
        col("last_position", ColType::Int),
    ],
}];

/// `commission_records`: a commission's status and amount as its stream says now.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommissionsProjector;

impl Projector for CommissionsProjector {
    fn name(&self) -> &'static str {
        COMMISSIONS
    }
    fn version(&self) -> i32 {
        1
    }
    fn aggregate_types(&self) -> &'static [&'static str] {
        &[COMMISSION_AGGREGATE_TYPE]
    }
    fn tables(&self) -> &'static [TableDef] {
        &COMMISSIONS_TABLES
    }

    fn project(&self, e: &ProjectedEvent) -> Result<Vec<RowChange>, ProjectionError> {
        if e.aggregate_type != COMMISSION_AGGREGATE_TYPE {
            return Ok(Vec::new());
        }
        let event = decode::<CommissionEvent>(COMMISSIONS, e)?;
        let key = vec![("commission_id", Cell::text(e.aggregate_id))];
        let status = ("status", Cell::text(event.target_status().as_str()));
        let mut set = match event {
            CommissionEvent::CommissionRecorded(c) => {
                if c.commission_id != e.aggregate_id {
                    return Err(e.fail(
                        COMMISSIONS,
                        format!("records {} on stream {}", c.commission_id, e.aggregate_id),
                    ));
                }
                let mut row = key;
                row.extend([
                    ("order_id", Cell::text(c.order_id)),
                    ("role", Cell::text(c.role.as_str())),
                    ("beneficiary_user_id", Cell::text(c.beneficiary_user_id)),
                    ("wallet_id", Cell::text(c.wallet_id)),
                    status,
                    ("amount_minor", Cell::Int(c.amount_minor)),
                    ("recorded_amount_minor", Cell::Int(c.amount_minor)),
                    ("currency", Cell::text(c.currency.as_str())),
                    ("release_at", at(&c.release_at)),
                    ("released_at", Cell::Null),
                    ("rule_set_id", Cell::text(c.rules.rule_set_id)),
                    ("rule_version", Cell::Int(i64::from(c.rules.version))),
                    ("cashback_bps", Cell::Int(c.rules.cashback_bps.get())),
                    ("inviter_bps", Cell::Int(c.rules.inviter_bps.get())),
                    (
                        "max_commission_base_bps",
                        Cell::Int(c.rules.max_commission_base_bps.get()),
                    ),
                    ("order_revision", Cell::Int(i64::from(c.order_revision))),
                ]);
                row.extend(stamp(e));
                return Ok(vec![RowChange::Insert {
                    table: COMMISSIONS,
                    row,
                }]);
            }
            // Frozen, invalidated and recovery keep the amount: it is what the wallet
            // still holds (or reversed, or has at risk) for the commission.
            CommissionEvent::CommissionFrozen(r)
            | CommissionEvent::CommissionInvalidated(r)
            | CommissionEvent::RecoveryReviewOpened(r) => vec![
                status,
                ("amount_minor", Cell::Int(r.amount_minor)),
                ("order_revision", Cell::Int(i64::from(r.order_revision))),
            ],
            CommissionEvent::CommissionUnfrozen(u) => vec![
                status,
                ("amount_minor", Cell::Int(u.amount_minor)),
                ("order_revision", Cell::Int(i64::from(u.order_revision))),
            ],
            CommissionEvent::CommissionReleased(r) => vec![
                status,
                ("amount_minor", Cell::Int(r.amount_minor)),
                ("released_at", at(&r.released_at)),
            ],
            CommissionEvent::RecoveryManuallyResolved(r) => {
                vec![status, ("amount_minor", Cell::Int(r.amount_minor))]
            }
        };
        set.extend(stamp(e));
        Ok(vec![RowChange::Update {
            table: COMMISSIONS,
            key,
            set,
        }])
    }
}

// ---------------------------------------------------------------------------------
// campaign_usage + campaign_reservations

pub const CAMPAIGNS: &str = "campaign_usage";

pub const CAMPAIGNS_TABLES: [TableDef; 2] = [
    TableDef {
        name: "campaign_usage",
        key: &["campaign_id"],
        columns: &[
            col("campaign_id", ColType::Text),
            col("quota_unit", ColType::Text),
            col("quota_limit", ColType::Int),
            col("currency", ColType::OptText),
            col("starts_at", ColType::Text),
            col("ends_at", ColType::OptText),
            col("reserved", ColType::Int),
            col("version", ColType::Int),
            col("last_position", ColType::Int),
        ],
    },
    TableDef {
        name: "campaign_reservations",
        key: &["campaign_id", "order_id"],
        columns: &[
            col("campaign_id", ColType::Text),
            col("order_id", ColType::Text),
            col("units", ColType::Int),
            col("ordered_at", ColType::Text),
            col("status", ColType::Text),
            col("release_reason", ColType::OptText),
            col("last_position", ColType::Int),
        ],
    },
];

/// A reservation that holds quota.
pub const RESERVATION_ACTIVE: &str = "RESERVED";
/// A reservation given back (refund, cancel).
pub const RESERVATION_RELEASED: &str = "RELEASED";

/// `campaign_usage`: each campaign's quota and how much of it is reserved, and each
/// reservation.
#[derive(Debug, Clone, Copy, Default)]
pub struct CampaignsProjector;

impl Projector for CampaignsProjector {
    fn name(&self) -> &'static str {
        CAMPAIGNS
    }
    fn version(&self) -> i32 {
        1
    }
    fn aggregate_types(&self) -> &'static [&'static str] {
        &[CAMPAIGN_AGGREGATE_TYPE]
    }
    fn tables(&self) -> &'static [TableDef] {
        &CAMPAIGNS_TABLES
    }

    fn project(&self, e: &ProjectedEvent) -> Result<Vec<RowChange>, ProjectionError> {
        if e.aggregate_type != CAMPAIGN_AGGREGATE_TYPE {
            return Ok(Vec::new());
        }
        let campaign = || ("campaign_id", Cell::text(e.aggregate_id));
        let usage = |reserved_after: i64| {
            let mut set = vec![("reserved", Cell::Int(reserved_after))];
            set.extend(stamp(e));
            RowChange::Update {
                table: "campaign_usage",
                key: vec![campaign()],
                set,
            }
        };
        Ok(match decode::<CampaignEvent>(CAMPAIGNS, e)? {
            CampaignEvent::CampaignOpened(c) => {
                let mut row = vec![
                    campaign(),
                    ("quota_unit", Cell::text(quota_unit_text(c.quota_unit))),
                    ("quota_limit", Cell::Int(c.quota_limit)),
                    (
                        "currency",
                        Cell::opt_text(c.currency.map(|c| c.as_str().to_owned())),
                    ),
                    ("starts_at", at(&c.starts_at)),
                    ("ends_at", c.ends_at.as_ref().map_or(Cell::Null, at)),
                    ("reserved", Cell::Int(0)),
                ];
                row.extend(stamp(e));
                vec![RowChange::Insert {
                    table: "campaign_usage",
                    row,
                }]
            }
            CampaignEvent::QuotaReserved(r) => vec![
                usage(r.reserved_after),
                RowChange::Insert {
                    table: "campaign_reservations",
                    row: vec![
                        campaign(),
                        ("order_id", Cell::text(r.order_id)),
                        ("units", Cell::Int(r.units)),
                        ("ordered_at", at(&r.ordered_at)),
                        ("status", Cell::text(RESERVATION_ACTIVE)),
                        ("release_reason", Cell::Null),
                        ("last_position", Cell::Int(e.global_position)),
                    ],
                },
            ],
            CampaignEvent::QuotaReleased(r) => vec![
                usage(r.reserved_after),
                RowChange::Update {
                    table: "campaign_reservations",
                    key: vec![campaign(), ("order_id", Cell::text(r.order_id))],
                    set: vec![
                        ("status", Cell::text(RESERVATION_RELEASED)),
                        ("release_reason", Cell::text(release_reason_text(r.reason))),
                        ("last_position", Cell::Int(e.global_position)),
                    ],
                },
            ],
        })
    }
}

/// As stored in the payload (`SCREAMING_SNAKE_CASE`).
fn quota_unit_text(u: QuotaUnit) -> &'static str {
    match u {
        QuotaUnit::Orders => "ORDERS",
        QuotaUnit::MinorUnits => "MINOR_UNITS",
    }
}

fn release_reason_text(r: ReleaseReason) -> &'static str {
    match r {
        ReleaseReason::OrderRefunded => "ORDER_REFUNDED",
        ReleaseReason::OrderCancelled => "ORDER_CANCELLED",
    }
}

/// Every affiliate projector, in the order `serve` starts them.
pub fn all() -> Vec<std::sync::Arc<dyn Projector>> {
    vec![
        std::sync::Arc::new(OrdersProjector),
        std::sync::Arc::new(CommissionsProjector),
        std::sync::Arc::new(CampaignsProjector),
    ]
}

#[cfg(test)]
mod tests;
