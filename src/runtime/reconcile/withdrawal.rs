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
//! Then the withdrawal streams (issue 17): each withdrawal's status must be what its
//! ledger entries say — frozen once for its amount, then paid out (PAID), unfrozen
//! (REJECTED, FAILED) or still frozen (in flight) — and each wallet's frozen bucket
//! must be the sum of its withdrawals in flight (plus what references without a
//! withdrawal stream, frozen by direct wallet commands, still hold). Both are
//! `WithdrawalLedgerMismatch` event findings.
//!
//! Memory: one withdrawal at a time while the ledger is read, then the ledger sums of
//! each `WITHDRAWAL` reference (a few dozen bytes each) while the streams are folded,
//! plus one set of sums per wallet with withdrawals.

use super::diff::*;
use super::pages::*;
use super::pass::*;
use super::report::*;
use factledger_aggregates::ledger::WITHDRAWAL_REF_TYPE;
use factledger_aggregates::wallet::EntryType;
use factledger_aggregates::withdrawal::{
    Withdrawal as WithdrawalStream, WithdrawalEvent, WithdrawalStatus, WITHDRAWAL_AGGREGATE_TYPE,
};
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

/// What the ledger says of one `WITHDRAWAL` reference: its wallet and sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LedgerSums {
    frozen: i64,
    unfrozen: i64,
    paid_out: i64,
}

/// Per withdrawal id: the wallet its entries are on and their sums.
type ByReference = BTreeMap<String, (String, LedgerSums)>;

/// Add a finished withdrawal to its wallet's sums; its finding, if any.
fn finish(
    w: Withdrawal,
    wallets: &mut BTreeMap<String, FrozenSums>,
    refs: &mut ByReference,
    findings: &mut Vec<Finding>,
) {
    wallets.entry(w.wallet_id.clone()).or_default().held += w.held();
    findings.extend(w.finding());
    if w.ref_type == WITHDRAWAL_REF_TYPE {
        refs.insert(
            w.ref_id.clone(),
            (
                w.wallet_id.clone(),
                LedgerSums {
                    frozen: w.frozen,
                    unfrozen: w.unfrozen,
                    paid_out: w.paid_out,
                },
            ),
        );
    }
}

/// Every withdrawal of every wallet up to `up_to`, read in ledger-key order.
pub(super) async fn check_withdrawals(
    snap: &mut Snapshot,
    pass: &mut Pass,
    up_to: i64,
    page_rows: i64,
) -> Result<(), ReconcileError> {
    let mut wallets: BTreeMap<String, FrozenSums> = BTreeMap::new();
    let mut refs = ByReference::new();
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
                finish(done, &mut wallets, &mut refs, &mut findings);
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
        finish(done, &mut wallets, &mut refs, &mut findings);
    }
    pass.withdrawals_checked += checked;
    for f in findings {
        pass.push(f);
    }
    check_streams(snap, pass, up_to, page_rows, &mut refs, &mut wallets).await?;
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

/// One withdrawal stream folded so far.
struct StreamReplay {
    id: String,
    state: WithdrawalStream,
    last: Option<EventRef>,
    broken: Option<String>,
}

/// What the ledger must hold for a withdrawal in `status`.
fn expected(status: WithdrawalStatus, amount: i64) -> LedgerSums {
    let released = |paid: bool| LedgerSums {
        frozen: amount,
        unfrozen: if paid { 0 } else { amount },
        paid_out: if paid { amount } else { 0 },
    };
    match status {
        WithdrawalStatus::Paid => released(true),
        WithdrawalStatus::Rejected | WithdrawalStatus::Failed => released(false),
        _ => LedgerSums {
            frozen: amount,
            ..LedgerSums::default()
        },
    }
}

impl StreamReplay {
    fn event(&mut self, e: &crate::infra::store::StoredEvent) {
        if self.broken.is_some() {
            return;
        }
        let decoded = e
            .current_payload()
            .map_err(|err| err.to_string())
            .and_then(|(_, p)| {
                serde_json::from_value::<WithdrawalEvent>(p).map_err(|err| err.to_string())
            })
            .and_then(|ev| {
                use factledger_aggregates::Decide;
                self.state
                    .check(&ev)
                    .map(|()| ev)
                    .map_err(|v| v.to_string())
            });
        match decoded {
            Ok(ev) => cqrs_es::Aggregate::apply(&mut self.state, ev),
            Err(why) => self.broken = Some(format!("{} cannot be replayed: {why}", e.event_type)),
        }
        self.last = Some(event_ref(e));
    }

    /// Compare with the ledger; count what is in flight on its wallet.
    fn finish(
        self,
        refs: &mut ByReference,
        in_flight: &mut BTreeMap<String, i64>,
        findings: &mut Vec<Finding>,
    ) {
        let ledger = refs.remove(&self.id);
        let Some(s) = self.state.record else {
            return;
        };
        let mut finding = |why: String, want: Option<Value>, got: Option<Value>| {
            let mut f = Finding::new(
                FindingKind::WithdrawalLedgerMismatch,
                &s.wallet_id,
                "events",
                format!("withdrawal={}", self.id),
                why,
            )
            .values(want, got);
            f = f.event(self.last.as_ref());
            findings.push(f);
        };
        if let Some(why) = self.broken {
            finding(why, None, None);
            return;
        }
        // Every wallet with a withdrawal is checked, with nothing in flight too.
        let flying = in_flight.entry(s.wallet_id.clone()).or_default();
        if s.status.holds_freeze() {
            *flying += s.amount_minor;
        }
        let want = expected(s.status, s.amount_minor);
        let sums = |l: LedgerSums| serde_json::json!({"frozen": l.frozen, "unfrozen": l.unfrozen, "paid_out": l.paid_out});
        match ledger {
            Some((wallet, got)) if wallet == s.wallet_id && got == want => {}
            Some((wallet, got)) => finding(
                format!(
                    "withdrawal {} is {} for {} on wallet {}; its ledger entries (wallet {wallet}) \
                     say otherwise",
                    self.id,
                    s.status.as_str(),
                    s.amount_minor,
                    s.wallet_id
                ),
                Some(sums(want)),
                Some(sums(got)),
            ),
            None => finding(
                format!(
                    "withdrawal {} is {} but no ledger entry names it",
                    self.id,
                    s.status.as_str()
                ),
                Some(sums(want)),
                None,
            ),
        }
    }
}

/// Fold every withdrawal stream up to `up_to` against the ledger sums of its
/// reference, then each wallet's frozen bucket against its withdrawals in flight.
async fn check_streams(
    snap: &mut Snapshot,
    pass: &mut Pass,
    up_to: i64,
    page_rows: i64,
    refs: &mut ByReference,
    wallets: &mut BTreeMap<String, FrozenSums>,
) -> Result<(), ReconcileError> {
    let mut in_flight: BTreeMap<String, i64> = BTreeMap::new();
    let mut findings = Vec::new();
    let mut current: Option<StreamReplay> = None;
    super::affiliate::stream_pages(snap, WITHDRAWAL_AGGREGATE_TYPE, up_to, page_rows, |e| {
        if current.as_ref().is_some_and(|c| c.id != e.aggregate_id) {
            if let Some(done) = current.take() {
                done.finish(refs, &mut in_flight, &mut findings);
            }
        }
        current
            .get_or_insert_with(|| StreamReplay {
                id: e.aggregate_id.clone(),
                state: WithdrawalStream::default(),
                last: None,
                broken: None,
            })
            .event(&e);
    })
    .await?;
    if let Some(done) = current.take() {
        done.finish(refs, &mut in_flight, &mut findings);
    }
    // What is left are references frozen by direct wallet commands: they count as
    // held on their wallets as the ledger says.
    let mut legacy: BTreeMap<String, i64> = BTreeMap::new();
    for (wallet, l) in refs.values() {
        *legacy.entry(wallet.clone()).or_default() += l.frozen - l.unfrozen - l.paid_out;
    }
    for (wallet, flying) in &in_flight {
        let bucket = wallets.get(wallet).map_or(0, |s| s.bucket);
        let held = flying + legacy.get(wallet).copied().unwrap_or(0);
        if held != bucket {
            findings.push(
                Finding::new(
                    FindingKind::WithdrawalLedgerMismatch,
                    wallet,
                    "events",
                    format!("wallet_id={wallet}"),
                    format!(
                        "the wallet's withdrawals in flight hold {flying} (and direct freezes \
                         {}), its frozen bucket is {bucket}",
                        held - flying
                    ),
                )
                .values(Some(Value::from(held)), Some(Value::from(bucket))),
            );
        }
    }
    for f in findings {
        pass.push(f);
    }
    Ok(())
}
