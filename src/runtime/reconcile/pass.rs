//! One pass over the wallets in scope at one cut, wallet by wallet, and what it found.

use super::pages::*;
use super::report::*;
use super::wallet::*;
use std::collections::BTreeSet;

/// What one pass (a snapshot over every wallet, or over a few) found.
pub(super) struct Pass {
    /// The keys hash chains are checked with.
    pub(super) keyring: std::sync::Arc<crate::infra::store::Keyring>,
    pub(super) up_to_position: i64,
    pub(super) events_checked: u64,
    pub(super) wallets_checked: u64,
    pub(super) counts: Counts,
    pub(super) findings: Vec<Finding>,
    pub(super) truncated: bool,
    /// Wallets with drift and no event finding (what a repair rebuilds), with their
    /// number of drift findings.
    pub(super) drifted: Vec<(String, u64)>,
    pub(super) commissions_checked: u64,
    pub(super) commissions_up_to_position: i64,
    pub(super) withdrawals_checked: u64,
    pub(super) projections_checked: Vec<ProjectionChecked>,
    /// Affiliate projections with drift (what a repair rebuilds in full).
    pub(super) drifted_projections: Vec<&'static str>,
    /// Wallets an event-class finding of a check across streams names (withdrawals,
    /// commissions): their drift is never repaired (see [`Pass::block_contradicted`]).
    pub(super) contradicted_wallets: BTreeSet<String>,
    /// Tables an event-class finding across streams names without a wallet (candy
    /// conservation): the projections holding them are never rebuilt by a repair.
    pub(super) contradicted_tables: BTreeSet<String>,
}

impl Pass {
    pub(super) fn new(
        keyring: std::sync::Arc<crate::infra::store::Keyring>,
        up_to_position: i64,
    ) -> Pass {
        Pass {
            keyring,
            up_to_position,
            events_checked: 0,
            wallets_checked: 0,
            counts: Counts::default(),
            findings: Vec::new(),
            truncated: false,
            drifted: Vec::new(),
            commissions_checked: 0,
            commissions_up_to_position: 0,
            withdrawals_checked: 0,
            projections_checked: Vec::new(),
            drifted_projections: Vec::new(),
            contradicted_wallets: BTreeSet::new(),
            contradicted_tables: BTreeSet::new(),
        }
    }

    /// Remember what an event-class finding of a check across streams contradicts.
    pub(super) fn note_contradiction(&mut self, f: &Finding) {
        if f.class != FindingClass::Event {
            return;
        }
        if f.wallet_id.is_empty() {
            self.contradicted_tables.insert(f.table.clone());
        } else {
            self.contradicted_wallets.insert(f.wallet_id.clone());
        }
    }

    /// Cross-stream contradictions block repair of the streams involved (issue 32
    /// item 1): a wallet whose frozen bucket disagrees with its withdrawals (or whose
    /// pending disagrees with its commissions) is drift to the wallet pass, and a scoped
    /// rebuild would "repair" it by dropping the money movement the other streams
    /// still hold. Such a wallet, and a projection holding a table a wallet-less
    /// contradiction names (candy against its holds), is left for an operator. Runs
    /// after every check has pushed its findings.
    pub(super) fn block_contradicted(&mut self) {
        let wallets = &self.contradicted_wallets;
        self.drifted.retain(|(w, _)| !wallets.contains(w));
        let blocked_projections: Vec<&'static str> = crate::runtime::projector::all()
            .iter()
            .filter(|p| {
                p.tables()
                    .iter()
                    .any(|t| self.contradicted_tables.contains(t.name))
            })
            .map(|p| p.name())
            .collect();
        self.drifted_projections
            .retain(|p| !blocked_projections.contains(p));
        for f in &mut self.findings {
            if f.class != FindingClass::ProjectionDrift {
                continue;
            }
            let blocked = (!f.wallet_id.is_empty() && wallets.contains(&f.wallet_id))
                || f.projection
                    .as_deref()
                    .is_some_and(|p| blocked_projections.contains(&p));
            if blocked {
                f.repair = REFUSED_CONTRADICTED.to_owned();
            }
        }
    }

    /// Take a finished wallet's findings: decide what a repair may do with them.
    pub(super) fn take(&mut self, w: WalletReplay) {
        self.events_checked += w.events_checked;
        self.wallets_checked += 1;
        let refused = if w.counts.event > 0 {
            Some(REFUSED_WALLET)
        } else if w.counts.projection_drift > 0 && self.drifted.len() >= REPAIR_WALLETS_MAX {
            Some(REFUSED_TOO_WIDE)
        } else {
            None
        };
        if w.counts.projection_drift > 0 && refused.is_none() {
            self.drifted
                .push((w.wallet_id.clone(), w.counts.projection_drift));
        }
        self.counts
            .add(FindingClass::ProjectionDrift, w.counts.projection_drift);
        self.counts.add(FindingClass::Event, w.counts.event);
        if (w.kept.len() as u64) < w.counts.total() {
            self.truncated = true;
        }
        for mut f in w.kept {
            if let (FindingClass::ProjectionDrift, Some(r)) = (f.class, refused) {
                f.repair = r.to_owned();
            }
            self.findings.push(f);
        }
    }
}

/// Check every wallet in scope, in wallet order, within one snapshot.
pub(super) async fn check_wallets(
    pages: &mut Pages<'_>,
    pass: &mut Pass,
) -> Result<(), ReconcileError> {
    loop {
        pages.fill().await?;
        let Some(wallet_id) = pages.next_wallet() else {
            return Ok(());
        };
        let room = FINDINGS_STORED_MAX.saturating_sub(pass.findings.len());
        let mut w = WalletReplay::new(wallet_id.clone(), room, pass.keyring.clone());
        // Events and ledger rows, merged by sequence: each event's row is compared
        // when the event is replayed, rows no event accounts for are extra.
        loop {
            pages.fill().await?;
            let Some(e) = pages.events.pop_for(&wallet_id) else {
                break;
            };
            let expected = w.event(&e);
            let mut matched = false;
            loop {
                pages.fill().await?;
                match pages.ledger.rows.front() {
                    Some(r) if r.wallet_id == wallet_id && r.sequence <= e.event.sequence => {}
                    _ => break,
                }
                let Some(actual) = pages.ledger.pop_for(&wallet_id) else {
                    break;
                };
                if actual.sequence == e.event.sequence {
                    matched = true;
                    w.ledger(Some(&expected), Some(&actual));
                } else {
                    w.ledger(None, Some(&actual));
                }
            }
            if !matched {
                w.ledger(Some(&expected), None);
            }
        }
        loop {
            pages.fill().await?;
            let Some(actual) = pages.ledger.pop_for(&wallet_id) else {
                break;
            };
            w.ledger(None, Some(&actual));
        }
        pages.fill().await?;
        let balance = pages.balances.pop_for(&wallet_id);
        w.balance(balance);
        let mut blocks = Vec::new();
        loop {
            pages.fill().await?;
            let Some(b) = pages.blocks.pop_for(&wallet_id) else {
                break;
            };
            blocks.push(b);
        }
        w.blocks(blocks);
        pass.take(w);
    }
}
