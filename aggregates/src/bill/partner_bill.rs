//! The partner bill aggregate (stream = partner bill id): the partner org's proposed
//! amount (`pre_rent`) and deduction of a month, changed by later pushes, and re-pushes
//! of a recorded bill (which supersede earlier unqualified conclusions, R-BILL-5).
//! A bill's partner account and month are its identity: a push naming other ones is
//! another bill and is refused.

use super::commands::{PartnerBillCommand, RecordPartnerBill, RepushPartnerBill};
use super::error::BillError;
use super::events::{PartnerBillEvent, PARTNER_BILL_AGGREGATE_TYPE};
use super::month::YearMonth;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartnerBillFacts {
    pub partner_account_id: i64,
    pub month: String,
    pub pre_rent_minor: Option<i64>,
    pub deduction_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartnerBill {
    /// 0 until the first event.
    pub partner_bill_id: i64,
    pub facts: Option<PartnerBillFacts>,
    pub last_repushed_at: Option<DateTime<Utc>>,
}

impl PartnerBill {
    /// Whether a diff of `month` may link this partner bill (issue 14 F13): it is
    /// recorded, and of the diff's month — seed §4.5 reads a station-month's partner
    /// bill by station and month, and R-BILL-8's locator rule L3 asks the same. Its
    /// month never changes once recorded, so the check holds without a write here.
    pub fn linkable_by(&self, partner_bill_id: i64, month: YearMonth) -> Result<(), BillError> {
        let facts = self
            .facts
            .as_ref()
            .ok_or(BillError::PartnerBillUnrecorded(partner_bill_id))?;
        if facts.month != month.to_string() {
            return Err(BillError::PartnerBillMonthMismatch {
                partner_bill_id,
                partner_month: facts.month.clone(),
                diff_month: month.to_string(),
            });
        }
        Ok(())
    }

    fn same_bill(&self, partner_bill_id: i64) -> Result<(), BillError> {
        if self.partner_bill_id != 0 && self.partner_bill_id != partner_bill_id {
            return Err(BillError::StreamMismatch {
                field: "partner_bill_id",
                given: partner_bill_id.to_string(),
                stream: self.partner_bill_id.to_string(),
            });
        }
        Ok(())
    }

    fn record(&self, cmd: RecordPartnerBill) -> Result<Vec<PartnerBillEvent>, BillError> {
        self.same_bill(cmd.partner_bill_id.get())?;
        let facts = PartnerBillFacts {
            partner_account_id: cmd.partner_account_id.get(),
            month: cmd.month.to_string(),
            pre_rent_minor: cmd.pre_rent_minor.map(|m| m.get()),
            deduction_minor: cmd.deduction_minor.get(),
        };
        if let Some(have) = &self.facts {
            if *have == facts {
                return Ok(vec![]);
            }
            if have.partner_account_id != facts.partner_account_id {
                return Err(BillError::PartnerBillIdentityChanged {
                    field: "partner_account_id",
                    existing: have.partner_account_id.to_string(),
                });
            }
            if have.month != facts.month {
                return Err(BillError::PartnerBillIdentityChanged {
                    field: "month",
                    existing: have.month.clone(),
                });
            }
        }
        Ok(vec![PartnerBillEvent::PartnerBillRecorded {
            partner_bill_id: cmd.partner_bill_id.get(),
            partner_account_id: facts.partner_account_id,
            month: facts.month,
            pre_rent_minor: facts.pre_rent_minor,
            deduction_minor: facts.deduction_minor,
            recorded_at: cmd.recorded_at,
        }])
    }

    fn repush(&self, cmd: RepushPartnerBill) -> Result<Vec<PartnerBillEvent>, BillError> {
        let id = cmd.partner_bill_id.get();
        self.same_bill(id)?;
        if self.facts.is_none() {
            return Err(BillError::PartnerBillNotFound(id));
        }
        match self.last_repushed_at {
            Some(last) if last == cmd.repushed_at => Ok(vec![]),
            Some(last) if last > cmd.repushed_at => Err(BillError::RepushOutOfOrder {
                given: cmd.repushed_at.to_rfc3339(),
                last: last.to_rfc3339(),
            }),
            _ => Ok(vec![PartnerBillEvent::PartnerBillRepushed {
                partner_bill_id: id,
                repushed_at: cmd.repushed_at,
            }]),
        }
    }
}

impl Decide for PartnerBill {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: PartnerBillCommand) -> Result<Vec<PartnerBillEvent>, BillError> {
        match command {
            PartnerBillCommand::RecordPartnerBill(cmd) => self.record(cmd),
            PartnerBillCommand::RepushPartnerBill(cmd) => self.repush(cmd),
        }
    }

    fn check(&self, event: &PartnerBillEvent) -> Result<(), InvariantViolation> {
        let ok = match event {
            PartnerBillEvent::PartnerBillRecorded {
                partner_bill_id,
                partner_account_id,
                month,
                ..
            } => {
                (self.partner_bill_id == 0 || self.partner_bill_id == *partner_bill_id)
                    && self.facts.as_ref().is_none_or(|f| {
                        f.partner_account_id == *partner_account_id && f.month == *month
                    })
            }
            PartnerBillEvent::PartnerBillRepushed {
                partner_bill_id,
                repushed_at,
            } => {
                self.partner_bill_id == *partner_bill_id
                    && self.facts.is_some()
                    && self.last_repushed_at.is_none_or(|l| l < *repushed_at)
            }
        };
        if !ok {
            return Err(InvariantViolation(format!(
                "{} does not follow from partner bill {} ({:?})",
                event.name(),
                self.partner_bill_id,
                self.facts
            )));
        }
        Ok(())
    }

    fn ledger_ref(_event: &PartnerBillEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for PartnerBill {
    const TYPE: &'static str = PARTNER_BILL_AGGREGATE_TYPE;
    type Command = PartnerBillCommand;
    type Event = PartnerBillEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: PartnerBillCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: PartnerBillEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            PartnerBillEvent::PartnerBillRecorded {
                partner_bill_id,
                partner_account_id,
                month,
                pre_rent_minor,
                deduction_minor,
                ..
            } => {
                self.partner_bill_id = partner_bill_id;
                self.facts = Some(PartnerBillFacts {
                    partner_account_id,
                    month,
                    pre_rent_minor,
                    deduction_minor,
                });
            }
            PartnerBillEvent::PartnerBillRepushed { repushed_at, .. } => {
                self.last_repushed_at = Some(repushed_at);
            }
        }
    }
}
