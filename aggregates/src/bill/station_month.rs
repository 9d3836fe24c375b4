//! The station-month aggregate (stream `<station_id>:<yyyymm>`): its small bill and its
//! difference-ledger row. One small bill and one diff per station-month (R-BILL-7
//! [dev]: the seed updated every row of a station-month, §9.6); the same bill id may
//! change its content, a different one is refused.

use super::commands::{RecordDiff, RecordSmallBill, StationMonthCommand};
use super::error::BillError;
use super::events::{StationMonthEvent, STATION_MONTH_AGGREGATE_TYPE};
use super::month::YearMonth;
use super::values::BillId;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmallBill {
    pub bill_id: i64,
    pub account_id: i64,
    pub rent_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    pub diff_id: i64,
    pub partner_bill_id: Option<i64>,
}

/// The state of one station-month's stream: the small bill and the diff recorded for it
/// (the station-month itself, the value, is a [`super::month::StationMonth`]). Its
/// serde shape is the snapshot's: the fields stay plain.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StationMonthBills {
    /// 0 until the first event.
    pub station_id: i64,
    /// Empty until the first event.
    pub month: String,
    pub small_bill: Option<SmallBill>,
    pub diff: Option<Diff>,
}

impl StationMonthBills {
    /// A command names the station-month of this stream (once one is known).
    fn same_station_month(&self, station_id: BillId, month: YearMonth) -> Result<(), BillError> {
        if self.month.is_empty() {
            return Ok(());
        }
        let stream = format!("{}:{}", self.station_id, self.month);
        if self.station_id != station_id.get() {
            return Err(BillError::StreamMismatch {
                field: "station_id",
                given: station_id.to_string(),
                stream,
            });
        }
        if self.month != month.to_string() {
            return Err(BillError::StreamMismatch {
                field: "month",
                given: month.to_string(),
                stream,
            });
        }
        Ok(())
    }

    fn record_small_bill(&self, cmd: RecordSmallBill) -> Result<Vec<StationMonthEvent>, BillError> {
        self.same_station_month(cmd.station_id, cmd.month)?;
        let bill = SmallBill {
            bill_id: cmd.bill_id.get(),
            account_id: cmd.account_id.get(),
            rent_minor: cmd.rent_minor.get(),
        };
        match &self.small_bill {
            Some(have) if *have == bill => return Ok(vec![]),
            Some(have) if have.bill_id != bill.bill_id => {
                return Err(BillError::SmallBillAlreadyRecorded {
                    existing: have.bill_id,
                })
            }
            _ => {}
        }
        Ok(vec![StationMonthEvent::SmallBillRecorded {
            station_id: cmd.station_id.get(),
            month: cmd.month.to_string(),
            bill_id: bill.bill_id,
            account_id: bill.account_id,
            rent_minor: bill.rent_minor,
            recorded_at: cmd.recorded_at,
        }])
    }

    fn record_diff(&self, cmd: RecordDiff) -> Result<Vec<StationMonthEvent>, BillError> {
        self.same_station_month(cmd.station_id, cmd.month)?;
        let diff = Diff {
            diff_id: cmd.diff_id.get(),
            partner_bill_id: cmd.partner_bill_id.map(BillId::get),
        };
        match &self.diff {
            Some(have) if *have == diff => return Ok(vec![]),
            Some(have) if have.diff_id != diff.diff_id => {
                return Err(BillError::DiffAlreadyRecorded {
                    existing: have.diff_id,
                })
            }
            _ => {}
        }
        Ok(vec![StationMonthEvent::DiffRecorded {
            station_id: cmd.station_id.get(),
            month: cmd.month.to_string(),
            diff_id: diff.diff_id,
            partner_bill_id: diff.partner_bill_id,
            recorded_at: cmd.recorded_at,
        }])
    }
}

impl Decide for StationMonthBills {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: StationMonthCommand) -> Result<Vec<StationMonthEvent>, BillError> {
        match command {
            StationMonthCommand::RecordSmallBill(cmd) => self.record_small_bill(cmd),
            StationMonthCommand::RecordDiff(cmd) => self.record_diff(cmd),
        }
    }

    fn check(&self, event: &StationMonthEvent) -> Result<(), InvariantViolation> {
        let (station_id, month, ok) = match event {
            StationMonthEvent::SmallBillRecorded {
                station_id,
                month,
                bill_id,
                ..
            } => (
                station_id,
                month,
                self.small_bill
                    .as_ref()
                    .is_none_or(|b| b.bill_id == *bill_id),
            ),
            StationMonthEvent::DiffRecorded {
                station_id,
                month,
                diff_id,
                ..
            } => (
                station_id,
                month,
                self.diff.as_ref().is_none_or(|d| d.diff_id == *diff_id),
            ),
        };
        let same =
            self.month.is_empty() || (self.station_id == *station_id && self.month == *month);
        if !ok || !same {
            return Err(InvariantViolation(format!(
                "{} for {station_id}:{month} does not follow from station-month {}:{} ({:?}, {:?})",
                event.name(),
                self.station_id,
                self.month,
                self.small_bill,
                self.diff
            )));
        }
        Ok(())
    }

    /// Bills record facts; they move no ledger money.
    fn ledger_ref(_event: &StationMonthEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for StationMonthBills {
    const TYPE: &'static str = STATION_MONTH_AGGREGATE_TYPE;
    type Command = StationMonthCommand;
    type Event = StationMonthEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: StationMonthCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: StationMonthEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            StationMonthEvent::SmallBillRecorded {
                station_id,
                month,
                bill_id,
                account_id,
                rent_minor,
                ..
            } => {
                self.station_id = station_id;
                self.month = month;
                self.small_bill = Some(SmallBill {
                    bill_id,
                    account_id,
                    rent_minor,
                });
            }
            StationMonthEvent::DiffRecorded {
                station_id,
                month,
                diff_id,
                partner_bill_id,
                ..
            } => {
                self.station_id = station_id;
                self.month = month;
                self.diff = Some(Diff {
                    diff_id,
                    partner_bill_id,
                });
            }
        }
    }
}
