//! The ingest unit (SPEC R-ORD-2, seed 003 §6.2): one short unit of work per order.
//!
//! In lock order (R-WAL-3): the order (business root) → its commissions → the
//! campaign → the wallets sorted by id, then outbox rows (written by the aggregates
//! whose events are money facts). Reference data is read, never written, in the
//! unit: the attribution link (who owns the order), the owner's invite relation (the
//! direct inviter) and the commission rule set of the order's platform × country
//! (the version in force at `ordered_at`, R-INV-5). They are read only when the order
//! is created: later updates keep the order's own owner and rule snapshot.
//!
//! What each step does:
//! 1. order: `AffiliateOrder::plan_ingest` — created / updated / unchanged /
//!    ignored_stale / ignored_illegal_transition / audit_only_invalid (R-ORD-3, -5, -6);
//! 2. commissions (`commission_id(order, role)`): recorded for the owner (CASHBACK)
//!    and the owner's inviter (INVITER_REWARD) when the order is valid and the role
//!    earns more than 0; every later order update is a `ReactToOrder` signal
//!    (freeze, unfreeze, invalidate, recovery review — R-COM-1, R-COM-3); a role
//!    that earned 0 so far is recorded once an update brings its amount;
//! 3. campaign `<PLATFORM>:<COUNTRY>` (if one was opened): the order reserves quota
//!    in order sequence (R-ORD-7) — for a quota in minor units its cashback amount —
//!    and gives it back when it is refunded or cancelled for good; an order that
//!    found the quota exhausted tries again on its next ingest, so after a refund
//!    the quota passes to the next order. The reservation counts against the
//!    campaign only; it moves no money;
//! 4. wallets `<user>:<CURRENCY>` (opened in the unit on first use): the wallet
//!    command each commission event requires (`Commission::wallet_effect`) —
//!    credit, release, reverse pending, block withdrawals — each a ledger entry
//!    whose unique key makes it take effect once (R-INV-1).
//!
//! A refusal of any step refuses the whole order (`rejected`, with the code and the
//! field), and nothing of it is written; the other orders of the page go on.

use super::{IngestError, IngestResult, OrderIngestor, INGEST_PAGE_ORDERS_MAX};
use crate::store::{DynStore, Fence, Metadata, StoreError};
use crate::unit::{run_unit, UnitBuilder, UnitError};
use async_trait::async_trait;
use factledger_aggregates::affiliate::{CountryCode, Platform, ReportedMinor};
use factledger_aggregates::affiliate_link::{link_stream_id, AffiliateLink, LinkError};
use factledger_aggregates::affiliate_order::{
    AffiliateOrder, IngestOrder, IngestOutcome, NormalisedOrder, OrderError, OrderEvent,
    OrderStatus,
};
use factledger_aggregates::campaign::{
    Campaign, CampaignCommand, CampaignError, QuotaUnit, ReleaseQuota, ReleaseReason, ReserveQuota,
};
use factledger_aggregates::commission::{
    commission_id, BeneficiaryRole, Commission, CommissionCommand, CommissionError,
    CommissionEvent, ReactToOrder, RecordCommission,
};
use factledger_aggregates::commission_rules::{CommissionRuleSet, RuleSetError};
use factledger_aggregates::invite::{InviteError, InviteRelation};
use factledger_aggregates::money::{AmountMinor, BoundedId, Currency};
use factledger_aggregates::wallet::{OpenWallet, Wallet, WalletCommand, WalletError};
use std::collections::BTreeMap;

/// Why an order was refused: the step's own error, with its stable code and field.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Order(#[from] OrderError),
    #[error(transparent)]
    Commission(#[from] CommissionError),
    #[error(transparent)]
    Campaign(#[from] CampaignError),
    #[error(transparent)]
    Wallet(#[from] WalletError),
    #[error(transparent)]
    Rules(#[from] RuleSetError),
    #[error(transparent)]
    Invite(#[from] InviteError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("{0}")]
    Invalid(String),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Order(e) => e.code(),
            Refusal::Commission(e) => e.code(),
            Refusal::Campaign(e) => e.code(),
            Refusal::Wallet(e) => e.code(),
            Refusal::Rules(e) => e.code(),
            Refusal::Invite(e) => e.code(),
            Refusal::Link(e) => e.code(),
            Refusal::Invalid(_) => "INVALID_ORDER",
        }
    }

    pub fn field(&self) -> Option<&'static str> {
        match self {
            Refusal::Order(e) => e.field(),
            Refusal::Commission(e) => e.field(),
            Refusal::Campaign(e) => e.field(),
            Refusal::Wallet(_) => None,
            Refusal::Rules(RuleSetError::NoVersionInForce { .. }) => Some("ordered_at"),
            Refusal::Rules(e) => e.field(),
            Refusal::Invite(e) => e.field(),
            Refusal::Link(e) => e.field(),
            Refusal::Invalid(_) => None,
        }
    }
}

/// The rule set of a platform × country: `<PLATFORM>:<COUNTRY>`.
pub fn rule_set_id(platform: Platform, country: CountryCode) -> String {
    format!("{}:{}", platform.as_str(), country.as_str())
}

/// The campaign orders of a platform × country reserve quota in, if it was opened.
pub fn campaign_id(platform: Platform, country: CountryCode) -> String {
    rule_set_id(platform, country)
}

/// A user's wallet in one currency (R-WAL-1: buckets per user per currency).
pub fn wallet_id(user_id: &str, currency: Currency) -> String {
    format!("{user_id}:{currency}")
}

/// Ingests orders into the store, each in its own unit, with one set of metadata
/// (the request's, or the job's).
#[derive(Clone)]
pub struct Ingestor {
    store: DynStore,
    metadata: Metadata,
    fail_after_streams: Option<usize>,
}

impl Ingestor {
    pub fn new(store: DynStore, metadata: Metadata) -> Ingestor {
        Ingestor {
            store,
            metadata,
            fail_after_streams: None,
        }
    }

    /// Test hook (acceptance case 3): every unit fails after writing this many
    /// streams, before it commits.
    #[doc(hidden)]
    pub fn failing_after_streams(mut self, streams: usize) -> Ingestor {
        self.fail_after_streams = Some(streams);
        self
    }

    /// Ingest one order in its own unit and say what happened to it.
    pub async fn ingest_one(
        &self,
        order: NormalisedOrder,
        fence: Option<Fence>,
    ) -> Result<IngestResult, IngestError> {
        let platform = order.platform.as_str().to_owned();
        let platform_order_id = order.platform_order_id.as_str().to_owned();
        let result = |result: &str| IngestResult {
            platform: platform.clone(),
            platform_order_id: platform_order_id.clone(),
            result: result.to_owned(),
            code: None,
            reason: None,
            field: None,
            position: None,
        };
        let fail_after = self.fail_after_streams;
        let outcome = run_unit(&self.store, &self.metadata, |mut unit| {
            let order = order.clone();
            async move {
                if let Some(f) = fence {
                    unit.fence(f);
                }
                if let Some(n) = fail_after {
                    unit.fail_after_streams(n);
                }
                let outcome = ingest_unit(&mut unit, order).await?;
                Ok((outcome, unit))
            }
        })
        .await;
        match outcome {
            Ok(done) => Ok(IngestResult {
                position: (done.position > 0).then_some(done.position),
                ..result(done.value.as_str())
            }),
            Err(UnitError::Refused(refusal)) => Ok(IngestResult {
                code: Some(refusal.code().to_owned()),
                reason: Some(refusal.to_string()),
                field: refusal.field().map(str::to_owned),
                ..result("rejected")
            }),
            Err(UnitError::Store(StoreError::Fenced { .. })) => Err(IngestError::Fenced(format!(
                "order {platform}:{platform_order_id}"
            ))),
            Err(UnitError::Store(e)) => Err(IngestError::Store(e)),
            // A ledger key taken by another unit, events that contradict their
            // aggregate, a stream that kept changing: this order is refused with
            // the reason; nothing of it was written.
            Err(other) => Ok(IngestResult {
                code: Some(unit_error_code(&other).to_owned()),
                reason: Some(other.to_string()),
                ..result("rejected")
            }),
        }
    }
}

fn unit_error_code(e: &UnitError<Refusal>) -> &'static str {
    match e {
        UnitError::Refused(r) => r.code(),
        UnitError::Conflict(_) => "CONCURRENCY_CONFLICT",
        UnitError::DuplicateLedgerRef(_) => "DUPLICATE_LEDGER_REF",
        UnitError::TooManyStreams => "UNIT_TOO_LARGE",
        UnitError::Invariant(_) => "INVARIANT_VIOLATION",
        UnitError::Store(_) => "STORE_ERROR",
    }
}

#[async_trait]
impl OrderIngestor for Ingestor {
    async fn ingest_page(
        &self,
        orders: Vec<NormalisedOrder>,
        fence: Option<Fence>,
    ) -> Result<Vec<IngestResult>, IngestError> {
        if orders.len() > INGEST_PAGE_ORDERS_MAX {
            return Err(IngestError::PageTooLarge(orders.len()));
        }
        let mut results = Vec::with_capacity(orders.len());
        for order in orders {
            results.push(self.ingest_one(order, fence).await?);
        }
        Ok(results)
    }
}

type Step<T> = Result<T, UnitError<Refusal>>;

/// The whole unit of one order; returns its outcome.
async fn ingest_unit(unit: &mut UnitBuilder, order: NormalisedOrder) -> Step<IngestOutcome> {
    let order_id =
        factledger_aggregates::affiliate::order_stream_id(order.platform, &order.platform_order_id);
    let mut stream = unit.load::<AffiliateOrder, Refusal>(&order_id).await?;
    let command = match &stream.state.order {
        Some(_) => IngestOrder {
            order: order.clone(),
            owner_user_id: None,
            inviter_user_id: None,
            rules: None,
        },
        None => first_sight(unit, &order).await?,
    };
    let decision = stream
        .state
        .plan_ingest(&command)
        .map_err(|e| UnitError::Refused(e.into()))?;
    unit.append::<AffiliateOrder, Refusal>(&mut stream, &order_id, &decision.events)?;
    let Some(known) = stream.state.order.clone() else {
        return Ok(decision.outcome);
    };
    let mut effects: Vec<Effect> = Vec::new();
    for event in &decision.events {
        commissions_for(unit, &order_id, &known, event, &mut effects).await?;
    }
    campaign_for(unit, &order_id, &known).await?;
    wallets_for(unit, effects).await?;
    Ok(decision.outcome)
}

/// Resolve what only the first ingest decides: owner, inviter and rule version.
async fn first_sight(unit: &UnitBuilder, order: &NormalisedOrder) -> Step<IngestOrder> {
    let owner = match &order.attribution {
        Some(a) => unit
            .load::<AffiliateLink, Refusal>(&link_stream_id(a))
            .await?
            .state
            .owner()
            .map(str::to_owned),
        None => None,
    };
    let inviter = match &owner {
        Some(user) => unit
            .load::<InviteRelation, Refusal>(user)
            .await?
            .state
            .inviter()
            .map(str::to_owned),
        None => None,
    };
    let rules = unit
        .load::<CommissionRuleSet, Refusal>(&rule_set_id(order.platform, order.country))
        .await?
        .state
        .version_at(order.ordered_at)
        .map_err(|e| UnitError::Refused(e.into()))?
        .clone();
    Ok(IngestOrder {
        order: order.clone(),
        owner_user_id: owner.map(|u| id(&u)).transpose()?,
        inviter_user_id: inviter.map(|u| id(&u)).transpose()?,
        rules: Some(rules),
    })
}

fn id(s: &str) -> Step<BoundedId> {
    BoundedId::parse(s).map_err(|e| UnitError::Refused(Refusal::Invalid(format!("id {s}: {e}"))))
}

fn reported(amount_minor: i64) -> Step<ReportedMinor> {
    ReportedMinor::parse(amount_minor)
        .map_err(|e| UnitError::Refused(Refusal::Invalid(format!("amount {amount_minor}: {e}"))))
}

/// A wallet command a commission event requires, with what opening the wallet
/// needs if it does not exist yet.
struct Effect {
    wallet_id: String,
    user_id: String,
    currency: Currency,
    command: WalletCommand,
}

/// The beneficiary of each role, and what the order yields for it now.
fn roles(
    known: &factledger_aggregates::affiliate_order::KnownOrder,
) -> Vec<(BeneficiaryRole, &str)> {
    let mut out = Vec::new();
    if let Some(owner) = &known.owner_user_id {
        out.push((BeneficiaryRole::Cashback, owner.as_str()));
        if let Some(inviter) = &known.inviter_user_id {
            out.push((BeneficiaryRole::InviterReward, inviter.as_str()));
        }
    }
    out
}

/// Record or move the order's commissions for one order event.
async fn commissions_for(
    unit: &mut UnitBuilder,
    order_id: &str,
    known: &factledger_aggregates::affiliate_order::KnownOrder,
    event: &OrderEvent,
    effects: &mut Vec<Effect>,
) -> Step<()> {
    let (revision, amounts, status, updated_at, signal) = match event {
        OrderEvent::OrderIngested(e) if e.audit_only => return Ok(()),
        OrderEvent::OrderIngested(e) => {
            (e.revision, e.amounts, e.status, e.platform_updated_at, None)
        }
        OrderEvent::OrderUpdated(e) => (
            e.revision,
            e.amounts,
            e.status,
            e.platform_updated_at,
            Some(e.signal),
        ),
        // Corrections do not move commissions already recorded (see ARCHITECTURE).
        OrderEvent::AttributionCorrected(_) => return Ok(()),
    };
    for (role, user) in roles(known) {
        let cid = commission_id(order_id, role);
        let mut stream = unit.load::<Commission, Refusal>(&cid).await?;
        let amount_minor = amounts.for_role(role);
        let command = match (&stream.state.record, signal) {
            (Some(_), Some(signal)) => CommissionCommand::ReactToOrder(ReactToOrder {
                order_revision: revision,
                signal,
                order_status: status,
                amount_minor: reported(amount_minor)?,
                order_updated_at: updated_at,
            }),
            (Some(_), None) => continue,
            (None, _) if amount_minor <= 0 || !(status.is_valid() || status.is_refund_open()) => {
                continue
            }
            (None, _) => CommissionCommand::Record(RecordCommission {
                commission_id: id(&cid)?,
                order_id: id(order_id)?,
                role,
                beneficiary_user_id: id(user)?,
                wallet_id: id(&wallet_id(user, known.currency))?,
                currency: known.currency,
                gmv_minor: reported(known.gmv_minor)?,
                platform_commission_minor: reported(known.platform_commission_minor)?,
                ordered_at: known.ordered_at,
                order_updated_at: updated_at,
                order_status: status,
                order_revision: revision,
                rules: known.rules.clone(),
            }),
        };
        let events = unit.decide::<Commission, Refusal>(&mut stream, &cid, command)?;
        for e in &events {
            push_effect(&stream.state, e, user, known.currency, effects)?;
        }
    }
    Ok(())
}

fn push_effect(
    commission: &Commission,
    event: &CommissionEvent,
    user: &str,
    currency: Currency,
    effects: &mut Vec<Effect>,
) -> Step<()> {
    let effect = commission
        .wallet_effect(event)
        .map_err(|v| UnitError::Invariant(v.0))?;
    if let Some(effect) = effect {
        effects.push(Effect {
            wallet_id: effect.wallet_id.as_str().to_owned(),
            user_id: user.to_owned(),
            currency,
            command: effect.command,
        });
    }
    Ok(())
}

/// Reserve campaign quota for a valid order, give it back for a void one.
async fn campaign_for(
    unit: &mut UnitBuilder,
    order_id: &str,
    known: &factledger_aggregates::affiliate_order::KnownOrder,
) -> Step<()> {
    let cid = campaign_id(known.platform, known.country);
    let mut stream = unit.load::<Campaign, Refusal>(&cid).await?;
    let Some(terms) = stream.state.terms.clone() else {
        return Ok(());
    };
    let reservation = stream.state.reservations.get(order_id).cloned();
    let command = if known.status.is_void() {
        match reservation {
            Some(r) if !r.released => CampaignCommand::Release(ReleaseQuota {
                order_id: id(order_id)?,
                reason: if known.status == OrderStatus::Refunded {
                    ReleaseReason::OrderRefunded
                } else {
                    ReleaseReason::OrderCancelled
                },
            }),
            _ => return Ok(()),
        }
    } else if reservation.is_none() && known.owner_user_id.is_some() {
        let amount_minor = match terms.quota_unit {
            QuotaUnit::Orders => None,
            QuotaUnit::MinorUnits => match AmountMinor::parse(known.amounts.cashback_minor) {
                Ok(a) => Some(a),
                // Nothing to take from a fund yet (amounts unknown or 0).
                Err(_) => return Ok(()),
            },
        };
        CampaignCommand::Reserve(ReserveQuota {
            order_id: id(order_id)?,
            ordered_at: known.ordered_at,
            amount_minor,
            currency: Some(known.currency),
        })
    } else {
        return Ok(());
    };
    match unit.decide::<Campaign, Refusal>(&mut stream, &cid, command) {
        Ok(_) => Ok(()),
        // No quota left or not part of the campaign: the order goes on without a
        // reservation (and tries again on its next ingest).
        Err(UnitError::Refused(Refusal::Campaign(
            CampaignError::QuotaExhausted { .. }
            | CampaignError::OrderOutsideCampaign { .. }
            | CampaignError::CurrencyMismatch { .. },
        ))) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Apply the wallet effects, wallets in id order (R-WAL-3), each wallet's effects in
/// the order they were decided; a wallet used for the first time is opened.
async fn wallets_for(unit: &mut UnitBuilder, effects: Vec<Effect>) -> Step<()> {
    let mut by_wallet: BTreeMap<String, Vec<Effect>> = BTreeMap::new();
    for e in effects {
        by_wallet.entry(e.wallet_id.clone()).or_default().push(e);
    }
    for (wid, effects) in by_wallet {
        let mut stream = unit.load::<Wallet, Refusal>(&wid).await?;
        for effect in effects {
            if !stream.state.opened {
                let open = WalletCommand::Open(OpenWallet {
                    user_id: id(&effect.user_id)?,
                    currency: effect.currency,
                });
                unit.decide::<Wallet, Refusal>(&mut stream, &wid, open)?;
            }
            unit.decide::<Wallet, Refusal>(&mut stream, &wid, effect.command)?;
        }
    }
    Ok(())
}
