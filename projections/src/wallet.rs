//! The wallet projections: `wallet_balances` (a row per wallet) and `wallet_ledger`
//! (a row per money movement). Every wallet event carries the state the rows need
//! (`after` balances, the stream sequence), so each event projects on its own: no
//! read of earlier rows, which keeps rebuilds streaming and scoped rebuilds exact.

use crate::{ProjectedEvent, ProjectionError};
use factledger_aggregates::wallet::{Buckets, WalletEvent, WALLET_AGGREGATE_TYPE};
use serde::Deserialize;

/// Projector name (and checkpoint key).
pub const NAME: &str = "wallet";
/// Bump when the rows' shape or meaning changes: the runner then rebuilds.
pub const VERSION: i32 = 1;

/// One ledger row: a money movement as the wallet saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    pub wallet_id: String,
    pub sequence: i64,
    pub global_position: i64,
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: &'static str,
    pub amount_minor: i64,
    pub delta: Buckets,
    pub before: Buckets,
    pub after: Buckets,
    pub recorded_at: String,
}

/// A change to the wallet projections' rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalletRow {
    /// Insert a wallet's balance row, all buckets zero.
    Opened {
        wallet_id: String,
        user_id: String,
        currency: String,
        version: i64,
        last_position: i64,
    },
    /// Set a wallet's balances (a movement happened).
    Balances {
        wallet_id: String,
        balances: Buckets,
        version: i64,
        last_position: i64,
    },
    /// Only the wallet's version moved (withdrawal blocks).
    Version {
        wallet_id: String,
        version: i64,
        last_position: i64,
    },
    /// Append a ledger row.
    Ledger(LedgerRow),
    /// A withdrawal block was placed (the version moves too: see `Version`).
    Blocked {
        wallet_id: String,
        ref_type: String,
        ref_id: String,
        reason: Option<String>,
    },
    /// A withdrawal block was lifted.
    Unblocked {
        wallet_id: String,
        ref_type: String,
        ref_id: String,
    },
}

/// The row changes one event makes. Events of other aggregates make none.
pub fn project(e: &ProjectedEvent) -> Result<Vec<WalletRow>, ProjectionError> {
    if e.aggregate_type != WALLET_AGGREGATE_TYPE {
        return Ok(Vec::new());
    }
    let event = WalletEvent::deserialize(e.payload).map_err(|err| ProjectionError {
        projection: NAME,
        global_position: e.global_position,
        reason: format!("{} does not decode: {err}", e.event_type),
    })?;
    let wallet_id = e.aggregate_id.to_owned();
    let (version, last_position) = (e.sequence, e.global_position);
    if let Some(m) = event.as_movement() {
        return Ok(vec![
            WalletRow::Balances {
                wallet_id: wallet_id.clone(),
                balances: m.after,
                version,
                last_position,
            },
            WalletRow::Ledger(LedgerRow {
                wallet_id,
                sequence: e.sequence,
                global_position: e.global_position,
                ref_type: m.ref_type.clone(),
                ref_id: m.ref_id.clone(),
                entry_type: m.entry_type.as_str(),
                amount_minor: m.amount_minor,
                delta: m.delta,
                before: m.before,
                after: m.after,
                recorded_at: e.recorded_at.to_owned(),
            }),
        ]);
    }
    let touched = WalletRow::Version {
        wallet_id: wallet_id.clone(),
        version,
        last_position,
    };
    Ok(match event {
        WalletEvent::WalletOpened { user_id, currency } => vec![WalletRow::Opened {
            wallet_id,
            user_id,
            currency: currency.to_string(),
            version,
            last_position,
        }],
        WalletEvent::WithdrawalsBlocked {
            ref_type,
            ref_id,
            reason,
        } => vec![
            touched,
            WalletRow::Blocked {
                wallet_id,
                ref_type,
                ref_id,
                reason,
            },
        ],
        WalletEvent::WithdrawalsUnblocked { ref_type, ref_id } => vec![
            touched,
            WalletRow::Unblocked {
                wallet_id,
                ref_type,
                ref_id,
            },
        ],
        _ => vec![touched],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn event<'a>(
        aggregate_type: &'a str,
        sequence: i64,
        event_type: &'a str,
        payload: &'a Value,
    ) -> ProjectedEvent<'a> {
        ProjectedEvent {
            global_position: 100 + sequence,
            aggregate_type,
            aggregate_id: "w-1",
            sequence,
            event_type,
            payload,
            recorded_at: "2026-12-02T12:00:00.000001Z",
        }
    }

    fn buckets(pending: i64, available: i64) -> Buckets {
        Buckets {
            pending_minor: pending,
            available_minor: available,
            frozen_minor: 0,
            risk_hold_minor: 0,
        }
    }

    #[test]
    fn an_opened_wallet_gets_a_zero_balance_row() {
        let p = json!({"type": "WalletOpened", "user_id": "u-1", "currency": "IDR"});
        let rows = project(&event("wallet", 1, "WalletOpened", &p)).unwrap();
        assert_eq!(
            rows,
            vec![WalletRow::Opened {
                wallet_id: "w-1".into(),
                user_id: "u-1".into(),
                currency: "IDR".into(),
                version: 1,
                last_position: 101,
            }]
        );
    }

    #[test]
    fn a_release_sets_the_balances_and_appends_one_ledger_row() {
        let p = json!({
            "type": "PendingReleased", "ref_type": "COMMISSION", "ref_id": "c-1",
            "entry_type": "RELEASE_PENDING", "amount_minor": 1500,
            "delta": {"pending_minor": -1500, "available_minor": 1500, "frozen_minor": 0, "risk_hold_minor": 0},
            "before": {"pending_minor": 1500, "available_minor": 0, "frozen_minor": 0, "risk_hold_minor": 0},
            "after": {"pending_minor": 0, "available_minor": 1500, "frozen_minor": 0, "risk_hold_minor": 0}
        });
        let rows = project(&event("wallet", 3, "PendingReleased", &p)).unwrap();
        assert_eq!(
            rows,
            vec![
                WalletRow::Balances {
                    wallet_id: "w-1".into(),
                    balances: buckets(0, 1500),
                    version: 3,
                    last_position: 103,
                },
                WalletRow::Ledger(LedgerRow {
                    wallet_id: "w-1".into(),
                    sequence: 3,
                    global_position: 103,
                    ref_type: "COMMISSION".into(),
                    ref_id: "c-1".into(),
                    entry_type: "RELEASE_PENDING",
                    amount_minor: 1500,
                    delta: Buckets {
                        pending_minor: -1500,
                        available_minor: 1500,
                        frozen_minor: 0,
                        risk_hold_minor: 0,
                    },
                    before: buckets(1500, 0),
                    after: buckets(0, 1500),
                    recorded_at: "2026-12-02T12:00:00.000001Z".into(),
                }),
            ]
        );
    }

    #[test]
    fn a_withdrawal_block_moves_the_version_and_records_the_block() {
        let p = json!({"type": "WithdrawalsBlocked", "ref_type": "RISK", "ref_id": "r-1"});
        let rows = project(&event("wallet", 4, "WithdrawalsBlocked", &p)).unwrap();
        assert_eq!(
            rows,
            vec![
                WalletRow::Version {
                    wallet_id: "w-1".into(),
                    version: 4,
                    last_position: 104,
                },
                WalletRow::Blocked {
                    wallet_id: "w-1".into(),
                    ref_type: "RISK".into(),
                    ref_id: "r-1".into(),
                    reason: None,
                }
            ]
        );
        let p = json!({"type": "WithdrawalsUnblocked", "ref_type": "RISK", "ref_id": "r-1"});
        let rows = project(&event("wallet", 5, "WithdrawalsUnblocked", &p)).unwrap();
        assert_eq!(
            rows[1],
            WalletRow::Unblocked {
                wallet_id: "w-1".into(),
                ref_type: "RISK".into(),
                ref_id: "r-1".into(),
            }
        );
    }

    #[test]
    fn events_of_other_aggregates_make_no_rows() {
        let p = json!({"type": "Whatever"});
        assert_eq!(project(&event("order", 1, "Whatever", &p)).unwrap(), vec![]);
    }

    #[test]
    fn an_undecodable_wallet_event_stops_the_projection_naming_it() {
        let p = json!({"type": "PendingCredited", "amount_minor": "lots"});
        let err = project(&event("wallet", 2, "PendingCredited", &p)).unwrap_err();
        assert_eq!(err.projection, NAME);
        assert_eq!(err.global_position, 102);
        assert!(err.reason.contains("PendingCredited"), "{}", err.reason);
    }
}
