//! One pass over the wallets in scope at one cut, wallet by wallet, and what it found.

use super::pages::*;
use super::report::*;
use super::wallet::*;

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
