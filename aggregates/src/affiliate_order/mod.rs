//! The affiliate order aggregate (SPEC §3): one stream per `(platform,
//! platform_order_id)` (stream id [`order_stream_id`]), created and updated by
//! platform pulls, protected against out-of-order messages by `platform_updated_at`
//! and the status matrix, keeping known amounts through sparse replays, and holding
//! the rule snapshot and owner it was created with.
//!
//! [`AffiliateOrder::plan_ingest`] is the pure decision with its outcome (`created`,
//! `updated`, `unchanged`, `ignored_stale`, `ignored_illegal_transition`,
//! `audit_only_invalid`) so the ingest unit can report it; `decide` returns its
//! events.

mod commands;
mod events;

pub use crate::affiliate::order_stream_id;
pub use crate::affiliate_values::{OrderSignal, OrderStatus};
pub use commands::{Attribution, CorrectAttribution, IngestOrder, NormalisedOrder, OrderCommand};
pub use events::{
    AttributionCorrected, OrderEvent, OrderIngested, OrderUpdated, ORDER_EVENT_VERSION,
};

use crate::affiliate::{CountryCode, Platform, PlatformOrderId};
use crate::affiliate_values::{commission_amounts, AmountError, CommissionAmounts};
use crate::commission_rules::RuleSnapshot;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::{BoundedId, Currency};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

/// The stream type of affiliate orders in the event store.
pub const ORDER_AGGREGATE_TYPE: &str = "affiliate_order";

/// The state of an order stream; `order` is `None` until the first ingest.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AffiliateOrder {
    pub order: Option<KnownOrder>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownOrder {
    pub revision: u32,
    pub platform: Platform,
    pub country: CountryCode,
    pub platform_order_id: PlatformOrderId,
    pub status: OrderStatus,
    pub currency: Currency,
    /// The last known (non-zero) GMV; 0 only while the platform never sent one.
    pub gmv_minor: i64,
    /// The last known (non-zero) platform commission.
    pub platform_commission_minor: i64,
    pub ordered_at: DateTime<Utc>,
    /// The newest platform version applied; older messages are ignored.
    pub platform_updated_at: DateTime<Utc>,
    pub attribution: Option<Attribution>,
    pub owner_user_id: Option<String>,
    pub inviter_user_id: Option<String>,
    pub rules: RuleSnapshot,
    pub amounts: CommissionAmounts,
    pub audit_only: bool,
}

/// What an ingest did, for the ingest unit's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IngestOutcome {
    /// First sight of a valid order.
    Created,
    /// A newer message changed it.
    Updated,
    /// The message says nothing new (same version, same content).
    Unchanged,
    /// `platform_updated_at` is older than the order's (R-ORD-3). A message with an
    /// *equal* `platform_updated_at` is not stale: platforms stamp seconds, so two
    /// real changes may share one; it goes through the status matrix instead, which
    /// never moves backwards, and is `unchanged` when it says nothing new.
    IgnoredStale,
    /// The status edge is not in the matrix (e.g. COMPLETED → PENDING): the message
    /// contradicts a later one and is ignored entirely, amounts included.
    IgnoredIllegalTransition,
    /// First seen already REFUNDED or CANCELLED: recorded for audit only, credits
    /// nothing (R-ORD-5).
    AuditOnlyInvalid,
}

impl IngestOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            IngestOutcome::Created => "created",
            IngestOutcome::Updated => "updated",
            IngestOutcome::Unchanged => "unchanged",
            IngestOutcome::IgnoredStale => "ignored_stale",
            IngestOutcome::IgnoredIllegalTransition => "ignored_illegal_transition",
            IngestOutcome::AuditOnlyInvalid => "audit_only_invalid",
        }
    }
}

/// The decision of an ingest: its outcome and the events to append (none for
/// `unchanged`, `ignored_stale` and `ignored_illegal_transition`: replays write
/// nothing, R-INV-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestDecision {
    pub outcome: IngestOutcome,
    pub events: Vec<OrderEvent>,
}

/// Why an order command was refused. Nothing is written when a command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("order does not exist; ingest it first")]
    NotFound,
    #[error("order {given} does not belong to this stream ({stream})")]
    IdentityMismatch { given: String, stream: String },
    #[error("country {given} does not match the order's country {order}")]
    CountryMismatch {
        given: CountryCode,
        order: CountryCode,
    },
    #[error("currency {given} does not match the order's currency {order}")]
    CurrencyMismatch { given: Currency, order: Currency },
    #[error("a new order needs the rule version in force at ordered_at")]
    RulesMissing,
    #[error(
        "rule version {version} is effective from {effective_from}, after ordered_at {ordered_at}"
    )]
    RulesNotInForce {
        version: u32,
        effective_from: DateTime<Utc>,
        ordered_at: DateTime<Utc>,
    },
    #[error("the inviter is the owner; nobody is their own inviter")]
    InviterIsOwner,
    #[error("an inviter without an owner; the inviter is the owner's")]
    InviterWithoutOwner,
    #[error("the order already has this owner and inviter")]
    AttributionUnchanged,
    #[error("{0}")]
    Amount(AmountError),
}

impl OrderError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            OrderError::NotFound => "ORDER_NOT_FOUND",
            OrderError::IdentityMismatch { .. } => "ORDER_IDENTITY_MISMATCH",
            OrderError::CountryMismatch { .. } => "COUNTRY_MISMATCH",
            OrderError::CurrencyMismatch { .. } => "CURRENCY_MISMATCH",
            OrderError::RulesMissing => "RULES_MISSING",
            OrderError::RulesNotInForce { .. } => "RULES_NOT_IN_FORCE",
            OrderError::InviterIsOwner => "INVITER_IS_OWNER",
            OrderError::InviterWithoutOwner => "INVITER_WITHOUT_OWNER",
            OrderError::AttributionUnchanged => "ATTRIBUTION_UNCHANGED",
            OrderError::Amount(e) => e.code(),
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            OrderError::NotFound => None,
            OrderError::IdentityMismatch { .. } => Some("platform_order_id"),
            OrderError::CountryMismatch { .. } => Some("country"),
            OrderError::CurrencyMismatch { .. } => Some("currency"),
            OrderError::RulesMissing | OrderError::RulesNotInForce { .. } => Some("rules"),
            OrderError::InviterIsOwner | OrderError::InviterWithoutOwner => Some("inviter_user_id"),
            OrderError::AttributionUnchanged => Some("new_owner_user_id"),
            OrderError::Amount(e) => Some(e.field()),
        }
    }
}

fn ids(id: &Option<BoundedId>) -> Option<String> {
    id.as_ref().map(|i| i.as_str().to_owned())
}

/// Owner and inviter must make sense together: no inviter without an owner, and
/// nobody invites themselves.
fn check_owner_and_inviter(
    owner: &Option<BoundedId>,
    inviter: &Option<BoundedId>,
) -> Result<(), OrderError> {
    match (owner, inviter) {
        (None, Some(_)) => Err(OrderError::InviterWithoutOwner),
        (Some(o), Some(i)) if o == i => Err(OrderError::InviterIsOwner),
        _ => Ok(()),
    }
}

impl AffiliateOrder {
    /// Decide an ingest and say what it did. Pure: `decide` calls this and returns
    /// the events; the ingest unit may call it to report the outcome.
    pub fn plan_ingest(&self, cmd: &IngestOrder) -> Result<IngestDecision, OrderError> {
        match &self.order {
            None => Self::plan_create(cmd),
            Some(known) => known.plan_update(&cmd.order),
        }
    }

    fn plan_create(cmd: &IngestOrder) -> Result<IngestDecision, OrderError> {
        let o = &cmd.order;
        let rules = cmd.rules.as_ref().ok_or(OrderError::RulesMissing)?;
        if rules.effective_from > o.ordered_at {
            return Err(OrderError::RulesNotInForce {
                version: rules.version,
                effective_from: rules.effective_from,
                ordered_at: o.ordered_at,
            });
        }
        check_owner_and_inviter(&cmd.owner_user_id, &cmd.inviter_user_id)?;
        let amounts =
            commission_amounts(o.gmv_minor.get(), o.platform_commission_minor.get(), rules)
                .map_err(OrderError::Amount)?;
        let audit_only = o.status.is_void();
        Ok(IngestDecision {
            outcome: if audit_only {
                IngestOutcome::AuditOnlyInvalid
            } else {
                IngestOutcome::Created
            },
            events: vec![OrderEvent::OrderIngested(OrderIngested {
                revision: 1,
                platform: o.platform,
                country: o.country,
                platform_order_id: o.platform_order_id.clone(),
                status: o.status,
                currency: o.currency,
                gmv_minor: o.gmv_minor.get(),
                platform_commission_minor: o.platform_commission_minor.get(),
                ordered_at: o.ordered_at,
                platform_updated_at: o.platform_updated_at,
                attribution: o.attribution.clone(),
                owner_user_id: ids(&cmd.owner_user_id),
                inviter_user_id: ids(&cmd.inviter_user_id),
                rules: rules.clone(),
                amounts,
                audit_only,
            })],
        })
    }

    fn correct_attribution(&self, cmd: CorrectAttribution) -> Result<Vec<OrderEvent>, OrderError> {
        let known = self.order.as_ref().ok_or(OrderError::NotFound)?;
        check_owner_and_inviter(&cmd.new_owner_user_id, &cmd.new_inviter_user_id)?;
        let new_owner = ids(&cmd.new_owner_user_id);
        let new_inviter = ids(&cmd.new_inviter_user_id);
        if new_owner == known.owner_user_id && new_inviter == known.inviter_user_id {
            return Err(OrderError::AttributionUnchanged);
        }
        Ok(vec![OrderEvent::AttributionCorrected(
            AttributionCorrected {
                revision: known.next_revision(),
                old_owner_user_id: known.owner_user_id.clone(),
                new_owner_user_id: new_owner,
                old_inviter_user_id: known.inviter_user_id.clone(),
                new_inviter_user_id: new_inviter,
                actor: cmd.actor.as_str().to_owned(),
                reason: cmd.reason.as_str().to_owned(),
                corrected_at: cmd.corrected_at,
            },
        )])
    }
}

impl KnownOrder {
    fn next_revision(&self) -> u32 {
        self.revision.saturating_add(1)
    }

    fn plan_update(&self, o: &NormalisedOrder) -> Result<IngestDecision, OrderError> {
        if o.platform != self.platform || o.platform_order_id != self.platform_order_id {
            return Err(OrderError::IdentityMismatch {
                given: order_stream_id(o.platform, &o.platform_order_id),
                stream: order_stream_id(self.platform, &self.platform_order_id),
            });
        }
        if o.country != self.country {
            return Err(OrderError::CountryMismatch {
                given: o.country,
                order: self.country,
            });
        }
        if o.currency != self.currency {
            return Err(OrderError::CurrencyMismatch {
                given: o.currency,
                order: self.currency,
            });
        }
        let ignored = |outcome| {
            Ok(IngestDecision {
                outcome,
                events: vec![],
            })
        };
        if o.platform_updated_at < self.platform_updated_at {
            return ignored(IngestOutcome::IgnoredStale);
        }
        if !self.status.can_move_to(o.status) {
            return ignored(IngestOutcome::IgnoredIllegalTransition);
        }
        // R-ORD-6: a 0 means "not sent"; keep what we know.
        let known = |reported: i64, previous: i64| if reported == 0 { previous } else { reported };
        let gmv_minor = known(o.gmv_minor.get(), self.gmv_minor);
        let platform_commission_minor = known(
            o.platform_commission_minor.get(),
            self.platform_commission_minor,
        );
        if o.status == self.status
            && gmv_minor == self.gmv_minor
            && platform_commission_minor == self.platform_commission_minor
            && o.platform_updated_at == self.platform_updated_at
        {
            return ignored(IngestOutcome::Unchanged);
        }
        // The order's own snapshot, never the rules in force today (R-INV-5).
        let amounts = commission_amounts(gmv_minor, platform_commission_minor, &self.rules)
            .map_err(OrderError::Amount)?;
        let signal = OrderSignal::of_update(
            self.status,
            o.status,
            self.amounts.base_minor,
            amounts.base_minor,
        );
        Ok(IngestDecision {
            outcome: IngestOutcome::Updated,
            events: vec![OrderEvent::OrderUpdated(OrderUpdated {
                revision: self.next_revision(),
                from_status: self.status,
                status: o.status,
                reported_gmv_minor: o.gmv_minor.get(),
                reported_platform_commission_minor: o.platform_commission_minor.get(),
                gmv_minor,
                platform_commission_minor,
                platform_updated_at: o.platform_updated_at,
                amounts,
                signal,
            })],
        })
    }
}

impl Decide for AffiliateOrder {
    const SNAPSHOT_VERSION: i32 = 1;
    /// Order changes are told to the outside world (seed §6.2 step 8).
    const OUTBOX: bool = true;

    fn decide(&self, command: OrderCommand) -> Result<Vec<OrderEvent>, OrderError> {
        match command {
            OrderCommand::Ingest(cmd) => Ok(self.plan_ingest(&cmd)?.events),
            OrderCommand::CorrectAttribution(cmd) => self.correct_attribution(cmd),
        }
    }

    fn check(&self, event: &OrderEvent) -> Result<(), InvariantViolation> {
        let fail = |why: String| Err(InvariantViolation(format!("{}: {why}", event.name())));
        let known = match (&self.order, event) {
            (None, OrderEvent::OrderIngested(e)) => {
                if e.revision != 1 {
                    return fail(format!("first revision is {}", e.revision));
                }
                return Ok(());
            }
            (Some(_), OrderEvent::OrderIngested(_)) => return fail("order already exists".into()),
            (None, _) => return fail("order does not exist".into()),
            (Some(known), _) => known,
        };
        if event.revision() != known.next_revision() {
            return fail(format!(
                "revision {} where {} is next",
                event.revision(),
                known.next_revision()
            ));
        }
        if let OrderEvent::OrderUpdated(e) = event {
            if e.from_status != known.status || !known.status.can_move_to(e.status) {
                return fail(format!(
                    "{} → {} on an order in {}",
                    e.from_status.as_str(),
                    e.status.as_str(),
                    known.status.as_str()
                ));
            }
            if e.platform_updated_at < known.platform_updated_at {
                return fail("an older platform version than the order's".into());
            }
        }
        Ok(())
    }

    /// Order events move no money; commissions and wallets do.
    fn ledger_ref(_event: &OrderEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for AffiliateOrder {
    const TYPE: &'static str = ORDER_AGGREGATE_TYPE;
    type Command = OrderCommand;
    type Event = OrderEvent;
    type Error = OrderError;
    type Services = ();

    async fn handle(
        &mut self,
        command: OrderCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), OrderError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: OrderEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            OrderEvent::OrderIngested(e) => {
                self.order = Some(KnownOrder {
                    revision: e.revision,
                    platform: e.platform,
                    country: e.country,
                    platform_order_id: e.platform_order_id,
                    status: e.status,
                    currency: e.currency,
                    gmv_minor: e.gmv_minor,
                    platform_commission_minor: e.platform_commission_minor,
                    ordered_at: e.ordered_at,
                    platform_updated_at: e.platform_updated_at,
                    attribution: e.attribution,
                    owner_user_id: e.owner_user_id,
                    inviter_user_id: e.inviter_user_id,
                    rules: e.rules,
                    amounts: e.amounts,
                    audit_only: e.audit_only,
                });
            }
            OrderEvent::OrderUpdated(e) => {
                if let Some(o) = &mut self.order {
                    o.revision = e.revision;
                    o.status = e.status;
                    o.gmv_minor = e.gmv_minor;
                    o.platform_commission_minor = e.platform_commission_minor;
                    o.platform_updated_at = e.platform_updated_at;
                    o.amounts = e.amounts;
                }
            }
            OrderEvent::AttributionCorrected(e) => {
                if let Some(o) = &mut self.order {
                    o.revision = e.revision;
                    o.owner_user_id = e.new_owner_user_id;
                    o.inviter_user_id = e.new_inviter_user_id;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
