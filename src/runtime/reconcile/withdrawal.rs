//! Withdrawals against the frozen bucket (SPEC §11 case 15, R-REC-1), in the run's
//! snapshot and cut (`commissions_up_to_position`: whole units only).
//!
//! Every withdrawal reference (`ref_type`, `ref_id`) of a wallet freezes once
//! (`WITHDRAW_FREEZE`) and then leaves the frozen bucket by an unfreeze
//! (`WITHDRAW_UNFREEZE`, rejected or failed) or a payout (`WITHDRAW_PAYOUT`, paid),
//! never both, never more than it froze, never without a freeze. The ledger key
//! (`ref_type, ref_id, entry_type`) is unique, so one entry type cannot repeat; but
//! the wallet aggregate only checks the bucket, so a release of one withdrawal's money
//! twice (an unfreeze after its payout: seed §18 case 12, a duplicate webhook) is
//! possible whenever another withdrawal keeps enough frozen. That is what this check
//! finds, and per wallet that Σ over its withdrawals of (frozen − released) equals its
//! frozen bucket after the last movement. Either difference is an `event` finding:
//! money facts disagree, automatic repair is refused and people correct events.
//!
//! A withdrawal reference is one wallet's: should two wallets use the same one, their
//! entries interleave in ledger-key order and each side is reported (a release
//! without a freeze), which is what such a reference deserves.
//!
//! Memory: one withdrawal at a time (entries are read in ledger-key order) plus one
//! pair of sums per wallet with withdrawals.

use super::diff::*;
use super::pages::*;
use super::pass::*;
use super::report::*;
use factledger_aggregates::wallet::EntryType;
use serde_json::Value;
use std::collections::BTreeMap;

/// Entry types that move the frozen bucket, in ledger-key order.
const FROZEN_ENTRY_TYPES: [EntryType; 3] = [
    EntryType::WithdrawFreeze,
    EntryType::WithdrawPayout,
    EntryType::WithdrawUnfreeze,
];

/// One withdrawal reference of one wallet, as its ledger entries say.
#[derive(Debug, Default)]
struct Withdrawal {
    wallet_id: String,
    ref_type: String,
    ref_id: String,
    frozen: i64,
    unfrozen: i64,
    paid_out: i64,
    /// The entries, for the finding.
    events: Vec<EventRef>,
}

impl Withdrawal {
    /// What is still frozen for it.
    fn held(&self) -> i64 {
        self.frozen - self.unfrozen - self.paid_out
    }

    fn finding(&self) -> Option<Finding> {
        let released = self.unfrozen + self.paid_out;
        let why = if self.frozen == 0 {
            format!("released {released} from frozen without ever freezing")
        } else if self.unfrozen > 0 && self.paid_out > 0 {
            format!(
                "froze {} and then was both unfrozen ({}) and paid out ({}): its money left \
                 frozen twice",
                self.frozen, self.unfrozen, self.paid_out
            )
        } else if released > self.frozen {
            format!("froze {} but released {released}", self.frozen)
        } else {
            return None;
        };
        let mut f = Finding::new(
            FindingKind::WithdrawalFrozenMismatch,
            &self.wallet_id,
            "events",
            format!(
                "wallet_id={}, ref_type={}, ref_id={}",
                self.wallet_id, self.ref_type, self.ref_id
            ),
            format!("withdrawal {}/{} {why}", self.ref_type, self.ref_id),
        )
        .values(Some(Value::from(self.frozen)), Some(Value::from(released)));
        for e in &self.events {
            f = f.event(Some(e));
        }
        Some(f)
    }
}

/// Per wallet: Σ held by its withdrawals, and its frozen bucket after its last
/// frozen movement (with that movement's position, to keep the latest).
#[derive(Debug, Default, Clone, Copy)]
struct FrozenSums {
    held: i64,
    bucket: i64,
    last_position: i64,
}

/// Add a finished withdrawal to its wallet's sums; its finding, if any.
fn finish(w: Withdrawal, wallets: &mut BTreeMap<String, FrozenSums>, findings: &mut Vec<Finding>) {
    wallets.entry(w.wallet_id.clone()).or_default().held += w.held();
    findings.extend(w.finding());
}

/// Every withdrawal of every wallet up to `up_to`, read in ledger-key order.
pub(super) async fn check_withdrawals(
    snap: &mut Snapshot,
    pass: &mut Pass,
    up_to: i64,
    page_rows: i64,
) -> Result<(), ReconcileError> {
    let mut wallets: BTreeMap<String, FrozenSums> = BTreeMap::new();
    let mut current: Option<Withdrawal> = None;
    let mut findings = Vec::new();
    let mut checked = 0u64;
    let types = FROZEN_ENTRY_TYPES
        .map(|t| format!("'{}'", t.as_str()))
        .join(", ");
    let filter = format!("ledger_entry_type IN ({types})");
    ledger_movements(snap, &filter, &[], up_to, page_rows, |e, m| {
        let wallet_id = &e.aggregate_id;
        let same = current.as_ref().is_some_and(|w| {
            &w.wallet_id == wallet_id && w.ref_type == m.ref_type && w.ref_id == m.ref_id
        });
        if !same {
            if let Some(done) = current.take() {
                finish(done, &mut wallets, &mut findings);
            }
            checked += 1;
            current = Some(Withdrawal {
                wallet_id: wallet_id.clone(),
                ref_type: m.ref_type.clone(),
                ref_id: m.ref_id.clone(),
                ..Withdrawal::default()
            });
        }
        let w = current.as_mut().expect("set above");
        match m.entry_type {
            EntryType::WithdrawFreeze => w.frozen += m.amount_minor,
            EntryType::WithdrawUnfreeze => w.unfrozen += m.amount_minor,
            EntryType::WithdrawPayout => w.paid_out += m.amount_minor,
            _ => {}
        }
        w.events.push(event_ref(e));
        let sums = wallets.entry(wallet_id.clone()).or_default();
        if e.global_position > sums.last_position {
            sums.last_position = e.global_position;
            sums.bucket = m.after.frozen_minor;
        }
    })
    .await?;
    if let Some(done) = current.take() {
        finish(done, &mut wallets, &mut findings);
    }
    pass.withdrawals_checked += checked;
    for f in findings {
        pass.push(f);
    }
    for (wallet_id, s) in wallets {
        if s.held != s.bucket {
            pass.push(
                Finding::new(
                    FindingKind::WithdrawalFrozenMismatch,
                    &wallet_id,
                    "events",
                    format!("wallet_id={wallet_id}"),
                    format!(
                        "the wallet's withdrawals hold {} frozen, its frozen bucket after \
                         the last withdrawal movement is {}",
                        s.held, s.bucket
                    ),
                )
                .values(Some(Value::from(s.held)), Some(Value::from(s.bucket))),
            );
        }
    }
    Ok(())
}
