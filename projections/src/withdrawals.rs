//! `withdrawal_records`: a row per withdrawal with its status as its stream says now
//! (`GET /v1/withdrawals?user_id=&status=`, the reconciliation of frozen money).
//! Every withdrawal event carries the status it moves to, so each projects alone.

use crate::table::{Cell, ColType, Column, Projector, RowChange, TableDef};
use crate::{ProjectedEvent, ProjectionError};
use chrono::SecondsFormat;
use factledger_aggregates::withdrawal::{Review, WithdrawalEvent, WITHDRAWAL_AGGREGATE_TYPE};

pub const WITHDRAWALS: &str = "withdrawal_records";

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

pub const WITHDRAWALS_TABLES: [TableDef; 1] = [TableDef {
    name: "withdrawal_records",
    key: &["withdrawal_id"],
    columns: &[
        col("withdrawal_id", ColType::Text),
        col("user_id", ColType::Text),
        col("wallet_id", ColType::Text),
        col("currency", ColType::Text),
        col("amount_minor", ColType::Int),
        col("status", ColType::Text),
        col("provider", ColType::Text),
        col("review", ColType::Text),
        col("attempts", ColType::Int),
        col("provider_payout_id", ColType::OptText),
        col("requested_at", ColType::Text),
        col("updated_at", ColType::Text),
        col("version", ColType::Int),
        col("last_position", ColType::Int),
    ],
}];

#[derive(Debug, Clone, Copy, Default)]
pub struct WithdrawalsProjector;

impl Projector for WithdrawalsProjector {
    fn name(&self) -> &'static str {
        WITHDRAWALS
    }
    fn version(&self) -> i32 {
        1
    }
    fn aggregate_types(&self) -> &'static [&'static str] {
        &[WITHDRAWAL_AGGREGATE_TYPE]
    }
    fn tables(&self) -> &'static [TableDef] {
        &WITHDRAWALS_TABLES
    }

    fn project(&self, e: &ProjectedEvent) -> Result<Vec<RowChange>, ProjectionError> {
        if e.aggregate_type != WITHDRAWAL_AGGREGATE_TYPE {
            return Ok(Vec::new());
        }
        let event: WithdrawalEvent = serde::Deserialize::deserialize(e.payload)
            .map_err(|err| e.fail(WITHDRAWALS, format!("does not decode: {err}")))?;
        let key = vec![("withdrawal_id", Cell::text(e.aggregate_id))];
        let stamp = [
            ("updated_at", Cell::text(e.recorded_at)),
            ("version", Cell::Int(e.sequence)),
            ("last_position", Cell::Int(e.global_position)),
        ];
        if let WithdrawalEvent::WithdrawalRequested(r) = &event {
            if r.withdrawal_id != e.aggregate_id {
                return Err(e.fail(
                    WITHDRAWALS,
                    format!("requests {} on stream {}", r.withdrawal_id, e.aggregate_id),
                ));
            }
            let mut row = key;
            row.extend([
                ("user_id", Cell::text(r.user_id.as_str())),
                ("wallet_id", Cell::text(r.wallet_id.as_str())),
                ("currency", Cell::text(r.currency.as_str())),
                ("amount_minor", Cell::Int(r.amount_minor)),
                ("status", Cell::text("REQUESTED")),
                ("provider", Cell::text(r.provider.as_str())),
                (
                    "review",
                    Cell::text(match r.review {
                        Review::Auto => "AUTO",
                        Review::Manual { .. } => "MANUAL",
                    }),
                ),
                ("attempts", Cell::Int(0)),
                ("provider_payout_id", Cell::Null),
                (
                    "requested_at",
                    Cell::text(r.requested_at.to_rfc3339_opts(SecondsFormat::Micros, true)),
                ),
            ]);
            row.extend(stamp);
            return Ok(vec![RowChange::Insert {
                table: WITHDRAWALS,
                row,
            }]);
        }
        let mut set: Vec<(&'static str, Cell)> = stamp.into();
        if let Some(to) = event.status_after() {
            set.push(("status", Cell::text(to.as_str())));
        }
        if let WithdrawalEvent::PayoutAttemptStarted(a) = &event {
            set.push(("attempts", Cell::Int(i64::from(a.attempt))));
        }
        if let (Some(o), false) = (
            event.outcome(),
            matches!(event, WithdrawalEvent::ProviderContradicted(_)),
        ) {
            if let Some(id) = &o.provider_payout_id {
                set.push(("provider_payout_id", Cell::text(id.as_str())));
            }
        }
        Ok(vec![RowChange::Update {
            table: WITHDRAWALS,
            key,
            set,
        }])
    }
}

/// Every generic projector of withdrawals.
pub fn all() -> Vec<std::sync::Arc<dyn Projector>> {
    vec![std::sync::Arc::new(WithdrawalsProjector)]
}
