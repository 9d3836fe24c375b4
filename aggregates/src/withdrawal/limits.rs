//! Daily withdrawal limits per user and currency (R-PAY-1), counted from events: one
//! stream per user × currency × UTC day ([`day_stream_id`]), appended in the same
//! unit of work as the withdrawal it counts. Two concurrent requests both append to
//! the day's stream, so optimistic concurrency makes one of them decide again on the
//! other's count: the limit holds under any concurrency, with no lock and no table
//! outside the event log.
//!
//! A request counts when it is made; a later rejection or failure does not give the
//! day's quota back (the limit bounds what a user may *ask* for in a day, which is
//! what fraud and mistakes exploit).

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::{AmountMinor, BoundedId};
use chrono::NaiveDate;
use cqrs_es::event_sink::EventSink;
use cqrs_es::{Aggregate, DomainEvent};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The stream type of the daily counters.
pub const WITHDRAWAL_DAY_AGGREGATE_TYPE: &str = "withdrawal_day";

/// `{user_id}:{CUR}:{yyyymmdd}`.
pub fn day_stream_id(user_id: &str, currency: &str, day: NaiveDate) -> String {
    format!("{user_id}:{currency}:{}", day.format("%Y%m%d"))
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WithdrawalDay {
    pub count: u32,
    pub amount_minor: i64,
    pub withdrawals: BTreeSet<String>,
}

/// Count one withdrawal against the day's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountWithdrawal {
    pub withdrawal_id: BoundedId,
    pub amount_minor: AmountMinor,
    pub count_limit: u32,
    pub amount_limit_minor: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum WithdrawalDayEvent {
    WithdrawalCounted {
        withdrawal_id: String,
        amount_minor: i64,
        count_after: u32,
        amount_after_minor: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("{count} withdrawals requested today; the daily limit is {limit}")]
    DailyCountExceeded { count: u32, limit: u32 },
    #[error(
        "{amount_minor} requested today plus this one exceeds the daily limit of {limit_minor}"
    )]
    DailyAmountExceeded { amount_minor: i64, limit_minor: i64 },
}

impl LimitError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::DailyCountExceeded { .. } => "DAILY_COUNT_LIMIT",
            Self::DailyAmountExceeded { .. } => "DAILY_AMOUNT_LIMIT",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::DailyCountExceeded { .. } => None,
            Self::DailyAmountExceeded { .. } => Some("amount_minor"),
        }
    }
}

impl Decide for WithdrawalDay {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, cmd: CountWithdrawal) -> Result<Vec<WithdrawalDayEvent>, LimitError> {
        if self.withdrawals.contains(cmd.withdrawal_id.as_str()) {
            return Ok(vec![]);
        }
        if self.count >= cmd.count_limit {
            return Err(LimitError::DailyCountExceeded {
                count: self.count,
                limit: cmd.count_limit,
            });
        }
        let amount_after = self.amount_minor.saturating_add(cmd.amount_minor.get());
        if amount_after > cmd.amount_limit_minor {
            return Err(LimitError::DailyAmountExceeded {
                amount_minor: self.amount_minor,
                limit_minor: cmd.amount_limit_minor,
            });
        }
        Ok(vec![WithdrawalDayEvent::WithdrawalCounted {
            withdrawal_id: cmd.withdrawal_id.as_str().to_owned(),
            amount_minor: cmd.amount_minor.get(),
            count_after: self.count + 1,
            amount_after_minor: amount_after,
        }])
    }

    fn check(&self, event: &WithdrawalDayEvent) -> Result<(), InvariantViolation> {
        let WithdrawalDayEvent::WithdrawalCounted {
            amount_minor,
            count_after,
            amount_after_minor,
            ..
        } = event;
        if *amount_minor <= 0
            || *count_after != self.count + 1
            || self.amount_minor.checked_add(*amount_minor) != Some(*amount_after_minor)
        {
            return Err(InvariantViolation(format!(
                "WithdrawalCounted does not follow count {} amount {}",
                self.count, self.amount_minor
            )));
        }
        Ok(())
    }

    fn ledger_ref(_event: &WithdrawalDayEvent) -> Option<LedgerRef> {
        None
    }
}

impl DomainEvent for WithdrawalDayEvent {
    fn event_type(&self) -> String {
        "WithdrawalCounted".to_owned()
    }

    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

impl Aggregate for WithdrawalDay {
    const TYPE: &'static str = WITHDRAWAL_DAY_AGGREGATE_TYPE;
    type Command = CountWithdrawal;
    type Event = WithdrawalDayEvent;
    type Error = LimitError;
    type Services = ();

    async fn handle(
        &mut self,
        command: CountWithdrawal,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), LimitError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: WithdrawalDayEvent) {
        let WithdrawalDayEvent::WithdrawalCounted {
            withdrawal_id,
            count_after,
            amount_after_minor,
            ..
        } = event;
        self.count = count_after;
        self.amount_minor = amount_after_minor;
        self.withdrawals.insert(withdrawal_id);
    }
}
