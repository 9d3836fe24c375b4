//! Ids the bill projection keys rows by, claimed across streams (issue 14 item 4: F2,
//! F12). A bill stream owns what its id names — a station-month its small bill and its
//! diff, an order its lines, a station-month's lock stream its locks — but the
//! projection tables key some of those rows by an id alone:
//!
//! | id             | projection key                                   | claim stream            | released |
//! |----------------|--------------------------------------------------|-------------------------|----------|
//! | small bill id  | `fi_customer_bill.id`                            | `SMALL_BILL:<bill_id>`  | never    |
//! | diff id        | `fi_monthly_income_difference.id`                | `DIFF:<diff_id>`        | never    |
//! | line id        | `bill_fact_lines.line_id`                        | `LINE:<line_id>`        | never    |
//! | lock id        | `bill_fact_locks.lock_id`                        | `LOCK:<lock_id>`        | never    |
//! | partner bill   | `fi_customer_bill_partner.decided_station_month` | `PARTNER_BILL_LINK:<id>`| when the diff links another |
//!
//! Two streams that each took the same id were both accepted before this, and the
//! projector then failed on the primary key for good (F2) or one overwrote the
//! other's row (a line of another order). So the unit that records such an id also
//! **claims** it on a stream of its own ([`BillIdClaim`], aggregate type
//! `bill_id_claim`), in the same transaction: the first claim of an id writes
//! `IdClaimed`; the same holder again writes nothing; another holder is refused
//! ([`BillError::IdTaken`], 409 with the kind's code, e.g. `BILL_ID_TAKEN`).
//!
//! **Why not check-then-act:** two racing units both see the claim stream empty, and
//! both append its first event at version 1 — the events table's unique
//! `(aggregate_type, aggregate_id, sequence)` lets one commit; the other gets a
//! concurrency conflict, is decided again on fresh state and is refused. Permanent
//! claims also carry a ledger reference (`BILL_ID_CLAIM`, `<KIND>:<id>`, `CLAIMED`), so
//! the unique ledger-ref index that reserves R-INV-1's business keys refuses a second
//! claim even if it came on another stream. The claim streams are not a bill
//! aggregate type: the bill projector never reads them.
//!
//! Ids recorded before claims existed hold none; the first later write of their
//! stream claims them.

use super::error::BillError;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};

/// Aggregate type of the claim streams (not one the bill projector reads).
pub const BILL_CLAIM_AGGREGATE_TYPE: &str = "bill_id_claim";

/// `ledger_ref_type` of a permanent claim's ledger reference.
pub const CLAIM_LEDGER_REF_TYPE: &str = "BILL_ID_CLAIM";
/// `ledger_entry_type` of a permanent claim's ledger reference.
pub const CLAIM_LEDGER_ENTRY_TYPE: &str = "CLAIMED";

pub use super::values::ClaimKind;

/// Claim commands. `holder` names the stream that records the id (a station-month
/// `<station_id>:<yyyymm>` or a payment order id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ClaimCommand {
    Claim {
        kind: ClaimKind,
        id: i64,
        holder: String,
        at: DateTime<Utc>,
    },
    /// Give a releasable claim back (nothing happens unless `holder` holds it).
    Release {
        kind: ClaimKind,
        id: i64,
        holder: String,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ClaimEvent {
    IdClaimed {
        kind: ClaimKind,
        id: i64,
        holder: String,
        at: DateTime<Utc>,
    },
    IdReleased {
        kind: ClaimKind,
        id: i64,
        holder: String,
        at: DateTime<Utc>,
    },
}

impl ClaimEvent {
    pub fn name(&self) -> &'static str {
        match self {
            Self::IdClaimed { .. } => "IdClaimed",
            Self::IdReleased { .. } => "IdReleased",
        }
    }
}

impl DomainEvent for ClaimEvent {
    fn event_type(&self) -> String {
        self.name().to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

/// One claim stream: who holds the id now.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BillIdClaim {
    /// `None` until the first event.
    pub kind: Option<ClaimKind>,
    pub id: i64,
    pub holder: Option<String>,
}

impl BillIdClaim {
    /// A command names the id of this stream (once one is known).
    fn same_id(&self, kind: ClaimKind, id: i64) -> Result<(), BillError> {
        match self.kind {
            Some(k) if k != kind || self.id != id => Err(BillError::StreamMismatch {
                field: kind.field(),
                given: kind.stream_id(id),
                stream: k.stream_id(self.id),
            }),
            _ => Ok(()),
        }
    }

    fn claim(
        &self,
        kind: ClaimKind,
        id: i64,
        holder: String,
        at: DateTime<Utc>,
    ) -> Result<Vec<ClaimEvent>, BillError> {
        self.same_id(kind, id)?;
        match &self.holder {
            Some(have) if *have == holder => Ok(vec![]),
            Some(have) => Err(BillError::IdTaken {
                kind,
                id,
                holder: have.clone(),
            }),
            None => Ok(vec![ClaimEvent::IdClaimed {
                kind,
                id,
                holder,
                at,
            }]),
        }
    }

    fn release(
        &self,
        kind: ClaimKind,
        id: i64,
        holder: String,
        at: DateTime<Utc>,
    ) -> Result<Vec<ClaimEvent>, BillError> {
        self.same_id(kind, id)?;
        if kind.permanent() {
            return Err(BillError::ClaimPermanent { kind, id });
        }
        if self.holder.as_ref() != Some(&holder) {
            return Ok(vec![]);
        }
        Ok(vec![ClaimEvent::IdReleased {
            kind,
            id,
            holder,
            at,
        }])
    }
}

impl Decide for BillIdClaim {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: ClaimCommand) -> Result<Vec<ClaimEvent>, BillError> {
        match command {
            ClaimCommand::Claim {
                kind,
                id,
                holder,
                at,
            } => self.claim(kind, id, holder, at),
            ClaimCommand::Release {
                kind,
                id,
                holder,
                at,
            } => self.release(kind, id, holder, at),
        }
    }

    fn check(&self, event: &ClaimEvent) -> Result<(), InvariantViolation> {
        let (kind, id, ok) = match event {
            ClaimEvent::IdClaimed { kind, id, .. } => (kind, id, self.holder.is_none()),
            ClaimEvent::IdReleased {
                kind, id, holder, ..
            } => (
                kind,
                id,
                !kind.permanent() && self.holder.as_ref() == Some(holder),
            ),
        };
        let same = self.kind.is_none_or(|k| k == *kind && self.id == *id);
        if !ok || !same {
            return Err(InvariantViolation(format!(
                "{} of {} does not follow from claim {:?}:{} held by {:?}",
                event.name(),
                kind.stream_id(*id),
                self.kind,
                self.id,
                self.holder
            )));
        }
        Ok(())
    }

    /// A permanent claim is a business key taken once: the unique ledger-ref index
    /// refuses a second one whatever stream it came on.
    fn ledger_ref(event: &ClaimEvent) -> Option<LedgerRef> {
        match event {
            ClaimEvent::IdClaimed { kind, id, .. } if kind.permanent() => Some(LedgerRef {
                ref_type: CLAIM_LEDGER_REF_TYPE.to_owned(),
                ref_id: kind.stream_id(*id),
                entry_type: CLAIM_LEDGER_ENTRY_TYPE.to_owned(),
            }),
            _ => None,
        }
    }
}

impl Aggregate for BillIdClaim {
    const TYPE: &'static str = BILL_CLAIM_AGGREGATE_TYPE;
    type Command = ClaimCommand;
    type Event = ClaimEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: ClaimCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: ClaimEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            ClaimEvent::IdClaimed {
                kind, id, holder, ..
            } => {
                self.kind = Some(kind);
                self.id = id;
                self.holder = Some(holder);
            }
            ClaimEvent::IdReleased { kind, id, .. } => {
                self.kind = Some(kind);
                self.id = id;
                self.holder = None;
            }
        }
    }
}
