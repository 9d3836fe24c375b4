//! The payment result aggregate (stream = result id): a result is recorded once (the
//! same content again writes nothing, other content is refused — a result is a fact,
//! corrected by voiding it, never by overwriting) and voided at most once.

use super::commands::{PaymentResultCommand, RecordPaymentResult, VoidPaymentResult};
use super::error::BillError;
use super::events::{
    PaymentResultEvent, ResultSourceCode, ResultStatusCode, ResultTypeCode, TriggerSource,
    PAYMENT_RESULT_AGGREGATE_TYPE,
};
use super::values::BillId;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PaymentResult {
    /// 0 until recorded.
    pub result_id: i64,
    /// The recorded fact (with its original `recorded_at`).
    pub recorded: Option<PaymentResultEvent>,
    pub voided: bool,
}

/// The result as a fact: without its recording time (a replay carries a new one) and
/// without the trigger source (provenance: the same result re-sent by another source,
/// e.g. an async status refresh after the treasury write-back, is the same fact).
fn content(event: &PaymentResultEvent) -> PaymentResultEvent {
    let mut e = event.clone();
    match &mut e {
        PaymentResultEvent::PaymentResultRecorded {
            recorded_at,
            trigger_source,
            ..
        } => {
            *recorded_at = DateTime::<Utc>::UNIX_EPOCH;
            *trigger_source = TriggerSource::Manual;
        }
        PaymentResultEvent::PaymentResultVoided {
            voided_at,
            trigger_source,
            ..
        } => {
            *voided_at = DateTime::<Utc>::UNIX_EPOCH;
            *trigger_source = TriggerSource::Manual;
        }
    }
    e
}

/// Whether a recorded result is written back to its payable line in the same unit:
/// a NORMAL_PAYMENT result of the treasury or of the fail fallback naming a line (the
/// treasury write-back and fail fallback of seed §7.3; offline imports reach lines
/// through reconciliation on PAYMENT_IMPORT_EFFECTIVE, R-BILL-9).
pub fn writes_back_to_line(event: &PaymentResultEvent) -> bool {
    matches!(
        event,
        PaymentResultEvent::PaymentResultRecorded {
            order_id: Some(_),
            line_id: Some(_),
            kind: ResultTypeCode::NormalPayment,
            source: ResultSourceCode::Treasury | ResultSourceCode::FailFallback,
            ..
        }
    )
}

impl PaymentResult {
    fn same_result(&self, result_id: i64) -> Result<(), BillError> {
        if self.result_id != 0 && self.result_id != result_id {
            return Err(BillError::StreamMismatch {
                field: "result_id",
                given: result_id.to_string(),
                stream: self.result_id.to_string(),
            });
        }
        Ok(())
    }

    fn record(&self, cmd: RecordPaymentResult) -> Result<Vec<PaymentResultEvent>, BillError> {
        let result_id = cmd.result_id.get();
        self.same_result(result_id)?;
        if cmd.line_id.is_some() && cmd.order_id.is_none() {
            return Err(BillError::OrderIdRequired);
        }
        if cmd.status == ResultStatusCode::PaySuccess && cmd.paid_at.is_none() {
            return Err(BillError::PaidAtRequired);
        }
        let event = PaymentResultEvent::PaymentResultRecorded {
            result_id,
            order_id: cmd.order_id.map(BillId::get),
            line_id: cmd.line_id.map(BillId::get),
            small_station_id: cmd.small_station_id.get(),
            platform_station_id: cmd.platform_station_id.map(BillId::get),
            partner_org_id: cmd.partner_org_id.map(BillId::get),
            month: cmd.month.to_string(),
            status: cmd.status,
            kind: cmd.kind,
            source: cmd.source,
            amount_minor: cmd.amount_minor.get(),
            paid_at: cmd.paid_at,
            fail_reason: cmd.fail_reason.map(|r| r.as_str().to_owned()),
            trigger_source: cmd.trigger_source,
            recorded_at: cmd.recorded_at,
        };
        match &self.recorded {
            Some(have) if content(have) == content(&event) => Ok(vec![]),
            Some(_) => Err(BillError::ResultAlreadyRecorded(result_id)),
            None => Ok(vec![event]),
        }
    }

    fn void(&self, cmd: VoidPaymentResult) -> Result<Vec<PaymentResultEvent>, BillError> {
        let result_id = cmd.result_id.get();
        self.same_result(result_id)?;
        if self.recorded.is_none() {
            return Err(BillError::ResultNotFound(result_id));
        }
        if self.voided {
            return Ok(vec![]);
        }
        Ok(vec![PaymentResultEvent::PaymentResultVoided {
            result_id,
            trigger_source: cmd.trigger_source,
            voided_at: cmd.voided_at,
        }])
    }
}

impl Decide for PaymentResult {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: PaymentResultCommand) -> Result<Vec<PaymentResultEvent>, BillError> {
        match command {
            PaymentResultCommand::RecordPaymentResult(cmd) => self.record(cmd),
            PaymentResultCommand::VoidPaymentResult(cmd) => self.void(cmd),
        }
    }

    fn check(&self, event: &PaymentResultEvent) -> Result<(), InvariantViolation> {
        let ok = match event {
            PaymentResultEvent::PaymentResultRecorded { .. } => self.recorded.is_none(),
            PaymentResultEvent::PaymentResultVoided { result_id, .. } => {
                self.recorded.is_some() && !self.voided && self.result_id == *result_id
            }
        };
        if !ok {
            return Err(InvariantViolation(format!(
                "{} does not follow from result {} (recorded: {}, voided: {})",
                event.name(),
                self.result_id,
                self.recorded.is_some(),
                self.voided
            )));
        }
        Ok(())
    }

    fn ledger_ref(_event: &PaymentResultEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for PaymentResult {
    const TYPE: &'static str = PAYMENT_RESULT_AGGREGATE_TYPE;
    type Command = PaymentResultCommand;
    type Event = PaymentResultEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: PaymentResultCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: PaymentResultEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            PaymentResultEvent::PaymentResultRecorded { result_id, .. } => {
                self.result_id = result_id;
                self.recorded = Some(event);
            }
            PaymentResultEvent::PaymentResultVoided { .. } => self.voided = true,
        }
    }
}
