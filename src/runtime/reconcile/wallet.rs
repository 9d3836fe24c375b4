//! One wallet's replay: its events folded in sequence order into the rows the
//! projection should hold, every event checked on the way, then compared with its rows.

use super::diff::*;
use super::report::*;
use super::rows::*;
use crate::infra::store::{time_text, StoredEvent, GENESIS_HASH};
use factledger_aggregates::wallet::{Buckets, Movement, WalletEvent};
use factledger_projections::wallet::{self, WalletRow};
use factledger_projections::ProjectedEvent;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// One wallet's replay: its events folded in sequence order into the rows the
/// projection should hold, every event checked on the way. Findings are counted
/// exactly and kept up to `room`.
pub(super) struct WalletReplay {
    pub(super) wallet_id: String,
    /// The keys the hash chain is checked with.
    pub(super) keyring: std::sync::Arc<crate::infra::store::Keyring>,
    pub(super) next_sequence: i64,
    pub(super) prev_hash: String,
    pub(super) opened: bool,
    /// `after` of the last movement; `None` after an event that could not be read
    /// (the next `before` is then not checked against it).
    pub(super) balances: Option<Buckets>,
    pub(super) expected_balance: Option<BalanceRecord>,
    pub(super) expected_blocks: BTreeMap<(String, String), Option<String>>,
    pub(super) last_event: Option<EventRef>,
    pub(super) counts: Counts,
    pub(super) kept: Vec<Finding>,
    pub(super) room: usize,
    pub(super) events_checked: u64,
}

impl WalletReplay {
    pub(super) fn new(
        wallet_id: String,
        room: usize,
        keyring: std::sync::Arc<crate::infra::store::Keyring>,
    ) -> Self {
        WalletReplay {
            wallet_id,
            keyring,
            next_sequence: 1,
            prev_hash: GENESIS_HASH.to_owned(),
            opened: false,
            balances: Some(Buckets::default()),
            expected_balance: None,
            expected_blocks: BTreeMap::new(),
            last_event: None,
            counts: Counts::default(),
            kept: Vec::new(),
            room,
            events_checked: 0,
        }
    }

    pub(super) fn found(&mut self, f: Finding) {
        self.counts.add(f.class, 1);
        if self.kept.len() < self.room {
            self.kept.push(f);
        }
    }

    pub(super) fn event_finding(
        &mut self,
        kind: FindingKind,
        at: &EventRef,
        detail: String,
    ) -> Finding {
        Finding::new(
            kind,
            &self.wallet_id,
            "events",
            format!("sequence={}", at.sequence),
            detail,
        )
        .event(Some(at))
    }

    /// Check one event and fold it into the expected rows; returns the ledger row the
    /// projection should hold for it.
    pub(super) fn event(&mut self, row: &EventRow) -> ExpectedLedger {
        use FindingKind::*;
        let e = &row.event;
        let at = event_ref(e);
        self.events_checked += 1;
        self.last_event = Some(at.clone());
        if e.sequence != self.next_sequence {
            let f = self.event_finding(
                SequenceGap,
                &at,
                format!(
                    "sequence {} follows {}: events are missing",
                    e.sequence,
                    self.next_sequence - 1
                ),
            );
            self.found(f.values(Some(self.next_sequence.into()), Some(e.sequence.into())));
        }
        self.next_sequence = e.sequence + 1;
        let expected_hash = e.recompute_hash(&self.keyring, &self.prev_hash);
        if expected_hash.as_deref() != Some(e.hash.as_str()) {
            let detail = match &expected_hash {
                Some(_) => {
                    "stored hash does not match the event's content and its predecessor".to_owned()
                }
                None => format!(
                    "sealed with chain key {:?}, which the integrity key file does not hold",
                    e.hash_key
                ),
            };
            let f = self.event_finding(HashChainBroken, &at, detail);
            self.found(f.values(expected_hash.map(Into::into), Some(e.hash.clone().into())));
        }
        // Go on from the stored hash: a tampered event breaks its own link only.
        self.prev_hash = e.hash.clone();
        let decoded =
            e.current_payload()
                .map_err(|err| err.to_string())
                .and_then(|(_, payload)| {
                    WalletEvent::deserialize(&payload)
                        .map(|event| (payload, event))
                        .map_err(|err| format!("{} does not decode: {err}", e.event_type))
                });
        let (payload, event) = match decoded {
            Ok(d) => d,
            Err(reason) => {
                let f = self.event_finding(PayloadUndecodable, &at, reason);
                self.found(f.values(None, Some(e.payload.clone().into())));
                self.balances = None;
                return ExpectedLedger::Unknown;
            }
        };
        if event.name() != e.event_type {
            let f = self.event_finding(
                EventTypeMismatch,
                &at,
                "the payload's type is not the row's event_type".into(),
            );
            self.found(f.values(Some(event.name().into()), Some(e.event_type.clone().into())));
        }
        self.check_ledger_ref(&at, &event, &row.ledger_ref);
        self.check_lifecycle(&at, &event);
        if let Some(m) = event.as_movement() {
            self.check_movement(&at, &event, m);
            self.balances = Some(m.after);
        }
        self.expect(e, &payload, &at)
    }

    pub(super) fn check_ledger_ref(
        &mut self,
        at: &EventRef,
        event: &WalletEvent,
        stored: &Option<(String, String, String)>,
    ) {
        let expected = event.as_movement().map(|m| {
            (
                m.ref_type.clone(),
                m.ref_id.clone(),
                m.entry_type.as_str().to_owned(),
            )
        });
        if &expected != stored {
            let show = |r: &Option<(String, String, String)>| {
                r.as_ref().map(
                    |(t, id, e)| serde_json::json!({"ref_type": t, "ref_id": id, "entry_type": e}),
                )
            };
            let f = self.event_finding(
                FindingKind::LedgerRefMismatch,
                at,
                "the payload's ledger reference is not the one the row is indexed under".into(),
            );
            self.found(f.values(show(&expected), show(stored)));
        }
    }

    pub(super) fn check_lifecycle(&mut self, at: &EventRef, event: &WalletEvent) {
        let problem = match event {
            WalletEvent::WalletOpened { .. } if self.opened => Some("the wallet is opened twice"),
            WalletEvent::WalletOpened { .. } => None,
            _ if !self.opened => Some("an event before the wallet was opened"),
            WalletEvent::WithdrawalsBlocked {
                ref_type, ref_id, ..
            } if self
                .expected_blocks
                .contains_key(&(ref_type.clone(), ref_id.clone())) =>
            {
                Some("a withdrawal block placed twice")
            }
            WalletEvent::WithdrawalsUnblocked { ref_type, ref_id }
                if !self
                    .expected_blocks
                    .contains_key(&(ref_type.clone(), ref_id.clone())) =>
            {
                Some("a withdrawal block lifted that was never placed")
            }
            _ => None,
        };
        if let Some(p) = problem {
            let f = self.event_finding(
                FindingKind::LifecycleBroken,
                at,
                format!("{}: {p}", event.name()),
            );
            self.found(f);
        }
        if matches!(event, WalletEvent::WalletOpened { .. }) {
            self.opened = true;
        }
    }

    /// R-INV-2 for one movement, the same rules `Wallet::check` enforces on load, each
    /// reported on its own.
    pub(super) fn check_movement(&mut self, at: &EventRef, event: &WalletEvent, m: &Movement) {
        use FindingKind::*;
        let name = event.name();
        if let Some(previous) = self.balances {
            if m.before != previous {
                let f = self.event_finding(
                    BalanceChainBroken,
                    at,
                    format!("{name}: before is not the previous movement's after"),
                );
                self.found(f.values(Some(value(&previous)), Some(value(&m.before))));
            }
        }
        // Amount first: the delta of a non-positive amount may overflow (i64::MIN).
        let expected_delta = (m.amount_minor > 0).then(|| m.entry_type.delta(m.amount_minor));
        if expected_delta != Some(m.delta) {
            let f = self.event_finding(
                DeltaMismatch,
                at,
                format!(
                    "{name}: delta is not what {} of {} moves",
                    m.entry_type.as_str(),
                    m.amount_minor
                ),
            );
            self.found(f.values(expected_delta.as_ref().map(value), Some(value(&m.delta))));
        }
        let sum = m.before.checked_add(&m.delta);
        if sum != Some(m.after) {
            let f = self.event_finding(
                ConservationBroken,
                at,
                match sum {
                    Some(_) => format!("{name}: after is not before + delta"),
                    None => format!("{name}: before + delta overflows i64"),
                },
            );
            self.found(f.values(sum.as_ref().map(value), Some(value(&m.after))));
        }
        if let Some((bucket, _)) = m.after.first_broken_flag() {
            let f = self.event_finding(
                NegativeBucket,
                at,
                format!("{name}: {} would be {}", bucket.name(), m.after.get(bucket)),
            );
            self.found(f.values(None, Some(value(&m.after))));
        }
    }

    /// Fold the rows the pure projector makes of this event into the expected state,
    /// exactly as the runner writes them (an update of a missing balance row changes
    /// nothing).
    pub(super) fn expect(
        &mut self,
        e: &StoredEvent,
        payload: &Value,
        at: &EventRef,
    ) -> ExpectedLedger {
        let recorded_at = time_text(&e.recorded_at);
        let rows = match wallet::project(&ProjectedEvent {
            global_position: e.global_position,
            aggregate_type: &e.aggregate_type,
            aggregate_id: &e.aggregate_id,
            sequence: e.sequence,
            event_type: &e.event_type,
            payload,
            recorded_at: &recorded_at,
        }) {
            Ok(rows) => rows,
            Err(err) => {
                let f = self.event_finding(FindingKind::PayloadUndecodable, at, err.to_string());
                self.found(f);
                return ExpectedLedger::Unknown;
            }
        };
        let mut ledger = ExpectedLedger::Nothing;
        for row in rows {
            match row {
                WalletRow::Opened {
                    wallet_id,
                    user_id,
                    currency,
                    version,
                    last_position,
                } => {
                    self.expected_balance = Some(BalanceRecord {
                        wallet_id,
                        user_id,
                        currency,
                        balances: Buckets::default(),
                        version,
                        last_position,
                    });
                }
                WalletRow::Balances {
                    balances,
                    version,
                    last_position,
                    ..
                } => {
                    if let Some(b) = &mut self.expected_balance {
                        b.balances = balances;
                        b.version = version;
                        b.last_position = last_position;
                    }
                }
                WalletRow::Version {
                    version,
                    last_position,
                    ..
                } => {
                    if let Some(b) = &mut self.expected_balance {
                        b.version = version;
                        b.last_position = last_position;
                    }
                }
                WalletRow::Ledger(l) => ledger = ExpectedLedger::Row(Box::new(l.into())),
                WalletRow::Blocked {
                    ref_type,
                    ref_id,
                    reason,
                    ..
                } => {
                    self.expected_blocks.insert((ref_type, ref_id), reason);
                }
                WalletRow::Unblocked {
                    ref_type, ref_id, ..
                } => {
                    self.expected_blocks.remove(&(ref_type, ref_id));
                }
            }
        }
        ledger
    }

    /// Compare the ledger row stored at one sequence with what the events say.
    pub(super) fn ledger(
        &mut self,
        expected: Option<&ExpectedLedger>,
        actual: Option<&LedgerRecord>,
    ) {
        use FindingKind::*;
        let sequence = match (expected, actual) {
            (Some(ExpectedLedger::Row(e)), _) => e.sequence,
            (_, Some(a)) => a.sequence,
            _ => return,
        };
        let key = format!("sequence={sequence}");
        let at = self.last_event.clone();
        let f = match (expected, actual) {
            (Some(ExpectedLedger::Unknown), _) => return,
            (Some(ExpectedLedger::Row(e)), Some(a)) if **e == *a => return,
            (Some(ExpectedLedger::Row(e)), Some(a)) => {
                let (ev, av) = (value(e), value(a));
                Finding::new(
                    LedgerDiffers,
                    &self.wallet_id,
                    "wallet_ledger",
                    key,
                    differences(&ev, &av),
                )
                .values(Some(ev), Some(av))
                .event(at.as_ref())
            }
            (Some(ExpectedLedger::Row(e)), None) => Finding::new(
                LedgerMissing,
                &self.wallet_id,
                "wallet_ledger",
                key,
                "the event's ledger row is missing",
            )
            .values(Some(value(e)), None)
            .event(at.as_ref()),
            (_, Some(a)) => Finding::new(
                LedgerExtra,
                &self.wallet_id,
                "wallet_ledger",
                key,
                "a ledger row no event accounts for",
            )
            .values(None, Some(value(a))),
            (_, None) => return,
        };
        self.found(f);
    }

    pub(super) fn balance(&mut self, actual: Option<BalanceRecord>) {
        use FindingKind::*;
        let key = format!("wallet_id={}", self.wallet_id);
        let f = match (&self.expected_balance, &actual) {
            (Some(e), Some(a)) if e == a => return,
            (None, None) => return,
            (Some(e), Some(a)) => {
                let (ev, av) = (value(e), value(a));
                Finding::new(
                    BalanceDiffers,
                    &self.wallet_id,
                    "wallet_balances",
                    key,
                    differences(&ev, &av),
                )
                .values(Some(ev), Some(av))
            }
            (Some(e), None) => Finding::new(
                BalanceMissing,
                &self.wallet_id,
                "wallet_balances",
                key,
                "the wallet's balance row is missing",
            )
            .values(Some(value(e)), None),
            (None, Some(a)) => Finding::new(
                BalanceExtra,
                &self.wallet_id,
                "wallet_balances",
                key,
                "a balance row for a wallet no event opened",
            )
            .values(None, Some(value(a))),
        };
        let at = self.last_event.clone();
        self.found(f.event(at.as_ref()));
    }

    pub(super) fn blocks(&mut self, actual: Vec<BlockRecord>) {
        use FindingKind::*;
        let mut expected = std::mem::take(&mut self.expected_blocks);
        let block = |wallet_id: &str, ref_type: &str, ref_id: &str, reason: &Option<String>| {
            value(&BlockRecord {
                wallet_id: wallet_id.to_owned(),
                ref_type: ref_type.to_owned(),
                ref_id: ref_id.to_owned(),
                reason: reason.clone(),
            })
        };
        for a in actual {
            let key = format!("ref={}/{}", a.ref_type, a.ref_id);
            let f = match expected.remove(&(a.ref_type.clone(), a.ref_id.clone())) {
                Some(reason) if reason == a.reason => continue,
                Some(reason) => {
                    let ev = block(&a.wallet_id, &a.ref_type, &a.ref_id, &reason);
                    let av = value(&a);
                    Finding::new(
                        BlockDiffers,
                        &self.wallet_id,
                        "wallet_blocks",
                        key,
                        differences(&ev, &av),
                    )
                    .values(Some(ev), Some(av))
                }
                None => Finding::new(
                    BlockExtra,
                    &self.wallet_id,
                    "wallet_blocks",
                    key,
                    "a withdrawal block no event placed (or one that was lifted)",
                )
                .values(None, Some(value(&a))),
            };
            self.found(f);
        }
        for ((ref_type, ref_id), reason) in expected {
            let f = Finding::new(
                BlockMissing,
                &self.wallet_id,
                "wallet_blocks",
                format!("ref={ref_type}/{ref_id}"),
                "an active withdrawal block is missing",
            )
            .values(
                Some(block(&self.wallet_id, &ref_type, &ref_id, &reason)),
                None,
            );
            self.found(f);
        }
    }
}
