//! The campaign aggregate (SPEC R-ORD-7, seed §6.2 step 5): a quota (orders, or
//! minor units of a cashback fund) reserved by orders in the sequence they reach
//! the stream, and given back when an order is refunded or cancelled.
//!
//! "Of two concurrent orders only the first reserves" is the store's optimistic
//! concurrency: both decide on the same version, one append wins, the other is
//! re-decided on the new state and is refused with `QUOTA_EXHAUSTED`. Reserve and
//! release are idempotent per order: a replay writes nothing (R-INV-1).

mod commands;
mod events;

pub use commands::{
    CampaignCommand, OpenCampaign, QuotaUnit, ReleaseQuota, ReleaseReason, ReserveQuota,
};
pub use events::{
    CampaignEvent, CampaignOpened, QuotaReleased, QuotaReserved, CAMPAIGN_EVENT_VERSION,
};

use crate::accounts::AccountKind;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::Currency;
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The stream type of campaigns in the event store.
pub const CAMPAIGN_AGGREGATE_TYPE: &str = "campaign";

/// Most orders one campaign stream tracks (active and released). Every order is
/// remembered so a replay cannot reserve twice; the bound keeps the state and its
/// snapshot small (a larger campaign is split into several streams).
pub const CAMPAIGN_RESERVATIONS_MAX: usize = 50_000;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Campaign {
    /// `None` until opened.
    pub terms: Option<CampaignOpened>,
    /// Sum of the units of active reservations; never above `quota_limit`.
    pub reserved: i64,
    /// Every order that ever reserved, by order id.
    pub reservations: BTreeMap<String, Reservation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub units: i64,
    pub ordered_at: DateTime<Utc>,
    /// Given back: the quota is free again, and this order never reserves again.
    pub released: bool,
}

/// Why a campaign command was refused. Nothing is written when a command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CampaignError {
    #[error("campaign does not exist; open it first")]
    NotFound,
    #[error("campaign is already open")]
    AlreadyOpen,
    #[error("a campaign must end after it starts")]
    InvalidWindow,
    #[error("a quota in minor units needs a currency")]
    CurrencyRequired,
    #[error("currency {given:?} does not match the campaign's currency {campaign}")]
    CurrencyMismatch {
        given: Option<Currency>,
        campaign: Currency,
    },
    #[error("a quota in minor units needs the order's amount")]
    AmountRequired,
    #[error("the order was placed at {ordered_at}, outside the campaign")]
    OrderOutsideCampaign { ordered_at: DateTime<Utc> },
    #[error("quota exhausted: {remaining} left, {requested} requested")]
    QuotaExhausted { remaining: i64, requested: i64 },
    #[error("the campaign already tracks the maximum of {max} orders")]
    TooManyReservations { max: usize },
}

impl CampaignError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "CAMPAIGN_NOT_FOUND",
            Self::AlreadyOpen => "CAMPAIGN_ALREADY_OPEN",
            Self::InvalidWindow => "INVALID_CAMPAIGN_WINDOW",
            Self::CurrencyRequired => "CURRENCY_REQUIRED",
            Self::CurrencyMismatch { .. } => "CURRENCY_MISMATCH",
            Self::AmountRequired => "AMOUNT_REQUIRED",
            Self::OrderOutsideCampaign { .. } => "ORDER_OUTSIDE_CAMPAIGN",
            Self::QuotaExhausted { .. } => "QUOTA_EXHAUSTED",
            Self::TooManyReservations { .. } => "CAMPAIGN_RESERVATIONS_LIMIT",
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::NotFound | Self::AlreadyOpen | Self::TooManyReservations { .. } => None,
            Self::InvalidWindow => Some("ends_at"),
            Self::CurrencyRequired | Self::CurrencyMismatch { .. } => Some("currency"),
            Self::AmountRequired | Self::QuotaExhausted { .. } => Some("amount_minor"),
            Self::OrderOutsideCampaign { .. } => Some("ordered_at"),
        }
    }
}

fn open(cmd: OpenCampaign) -> Result<Vec<CampaignEvent>, CampaignError> {
    if cmd.ends_at.is_some_and(|end| end <= cmd.starts_at) {
        return Err(CampaignError::InvalidWindow);
    }
    if cmd.quota_unit == QuotaUnit::MinorUnits && cmd.currency.is_none() {
        return Err(CampaignError::CurrencyRequired);
    }
    Ok(vec![CampaignEvent::CampaignOpened(CampaignOpened {
        campaign_id: cmd.campaign_id.as_str().to_owned(),
        quota_unit: cmd.quota_unit,
        quota_limit: cmd.quota_limit.get(),
        currency: cmd.currency,
        starts_at: cmd.starts_at,
        ends_at: cmd.ends_at,
    })])
}

impl Campaign {
    fn reserve(
        &self,
        terms: &CampaignOpened,
        cmd: ReserveQuota,
    ) -> Result<Vec<CampaignEvent>, CampaignError> {
        if self.reservations.contains_key(cmd.order_id.as_str()) {
            // Reserved before (maybe released since): a replay writes nothing.
            return Ok(vec![]);
        }
        let in_window = cmd.ordered_at >= terms.starts_at
            && !matches!(terms.ends_at, Some(end) if cmd.ordered_at >= end);
        if !in_window {
            return Err(CampaignError::OrderOutsideCampaign {
                ordered_at: cmd.ordered_at,
            });
        }
        let units = match (terms.quota_unit, terms.currency) {
            (QuotaUnit::Orders, _) => 1,
            (QuotaUnit::MinorUnits, Some(campaign)) => {
                if cmd.currency != Some(campaign) {
                    return Err(CampaignError::CurrencyMismatch {
                        given: cmd.currency,
                        campaign,
                    });
                }
                cmd.amount_minor.ok_or(CampaignError::AmountRequired)?.get()
            }
            // Refused at open; a stream without it is read as "no currency fits".
            (QuotaUnit::MinorUnits, None) => return Err(CampaignError::CurrencyRequired),
        };
        if self.reservations.len() >= CAMPAIGN_RESERVATIONS_MAX {
            return Err(CampaignError::TooManyReservations {
                max: CAMPAIGN_RESERVATIONS_MAX,
            });
        }
        // The quota is the budget account of the chart (`campaign_budget`, whose
        // credit balance is what is left): a reservation debits it, and its
        // `debits_must_not_exceed_credits` flag refuses one past the budget.
        let remaining = terms.quota_limit - self.reserved;
        if AccountKind::CampaignBudget
            .flags()
            .check(remaining - units)
            .is_err()
        {
            return Err(CampaignError::QuotaExhausted {
                remaining,
                requested: units,
            });
        }
        Ok(vec![CampaignEvent::QuotaReserved(QuotaReserved {
            order_id: cmd.order_id.as_str().to_owned(),
            units,
            ordered_at: cmd.ordered_at,
            reserved_after: self.reserved + units,
        })])
    }

    fn release(&self, cmd: ReleaseQuota) -> Vec<CampaignEvent> {
        match self.reservations.get(cmd.order_id.as_str()) {
            // Never reserved, or already given back: nothing to do (idempotent).
            None => vec![],
            Some(r) if r.released => vec![],
            Some(r) => vec![CampaignEvent::QuotaReleased(QuotaReleased {
                order_id: cmd.order_id.as_str().to_owned(),
                units: r.units,
                reason: cmd.reason,
                reserved_after: self.reserved - r.units,
            })],
        }
    }
}

impl Decide for Campaign {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: CampaignCommand) -> Result<Vec<CampaignEvent>, CampaignError> {
        match (command, &self.terms) {
            (CampaignCommand::Open(cmd), None) => open(cmd),
            (CampaignCommand::Open(_), Some(_)) => Err(CampaignError::AlreadyOpen),
            (_, None) => Err(CampaignError::NotFound),
            (CampaignCommand::Reserve(cmd), Some(terms)) => self.reserve(terms, cmd),
            (CampaignCommand::Release(cmd), Some(_)) => Ok(self.release(cmd)),
        }
    }

    fn check(&self, event: &CampaignEvent) -> Result<(), InvariantViolation> {
        let fail = |why: String| Err(InvariantViolation(format!("{}: {why}", event.name())));
        let terms = match (&self.terms, event) {
            (None, CampaignEvent::CampaignOpened(_)) => return Ok(()),
            (Some(_), CampaignEvent::CampaignOpened(_)) => return fail("already open".into()),
            (None, _) => return fail("campaign is not open".into()),
            (Some(terms), _) => terms,
        };
        match event {
            CampaignEvent::QuotaReserved(e) => {
                if self.reservations.contains_key(&e.order_id) {
                    return fail(format!("order {} reserved twice", e.order_id));
                }
                let budget_left = terms.quota_limit - e.reserved_after;
                if e.units <= 0
                    || self.reserved.checked_add(e.units) != Some(e.reserved_after)
                    || AccountKind::CampaignBudget
                        .flags()
                        .check(budget_left)
                        .is_err()
                {
                    return fail(format!(
                        "{} units after {} do not fit the quota {}",
                        e.units, self.reserved, terms.quota_limit
                    ));
                }
            }
            CampaignEvent::QuotaReleased(e) => {
                let active = self
                    .reservations
                    .get(&e.order_id)
                    .filter(|r| !r.released && r.units == e.units);
                if active.is_none() || self.reserved - e.units != e.reserved_after {
                    return fail(format!(
                        "no active reservation of {} to release",
                        e.order_id
                    ));
                }
            }
            CampaignEvent::CampaignOpened(_) => {}
        }
        Ok(())
    }

    /// A reservation of a fund posts between budget accounts (`crate::ledger`), but
    /// takes effect once by the aggregate itself (one reservation per order), so it
    /// needs no unique ledger key.
    fn ledger_ref(_event: &CampaignEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Campaign {
    const TYPE: &'static str = CAMPAIGN_AGGREGATE_TYPE;
    type Command = CampaignCommand;
    type Event = CampaignEvent;
    type Error = CampaignError;
    type Services = ();

    async fn handle(
        &mut self,
        command: CampaignCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), CampaignError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: CampaignEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            CampaignEvent::CampaignOpened(e) => self.terms = Some(e),
            CampaignEvent::QuotaReserved(e) => {
                self.reserved = e.reserved_after;
                self.reservations.insert(
                    e.order_id,
                    Reservation {
                        units: e.units,
                        ordered_at: e.ordered_at,
                        released: false,
                    },
                );
            }
            CampaignEvent::QuotaReleased(e) => {
                self.reserved = e.reserved_after;
                if let Some(r) = self.reservations.get_mut(&e.order_id) {
                    r.released = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
