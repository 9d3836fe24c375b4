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
//!    campaign's budget only (a posting between its budget accounts in the
//!    journal); the cashback itself is credited from commission expense;
//! 4. wallets `<user>:<CURRENCY>` (opened in the unit on first use): the wallet
//!    command each commission event requires (`Commission::wallet_effect`) —
//!    credit, release, reverse pending, block withdrawals — each a ledger entry
//!    whose unique key makes it take effect once (R-INV-1).
//!
//! A refusal of any step refuses the whole order (`rejected`, with the code and the
//! field), and nothing of it is written; the other orders of the page go on.

use super::{IngestError, IngestResult};
use crate::infra::store::{DynStore, Fence, Metadata, StoreError};
use crate::runtime::bus::Loaded;
use crate::runtime::unit::{run_unit, StreamCache, UnitBuilder, UnitError, UnitOutcome};
use cqrs_es::Aggregate;
use factledger_aggregates::affiliate::ReportedMinor;
use factledger_aggregates::affiliate_link::{link_stream_id, AffiliateLink};
use factledger_aggregates::affiliate_order::{
    AffiliateOrder, IngestOrder, IngestOutcome, NormalisedOrder, OrderEvent, OrderStatus,
};
use factledger_aggregates::campaign::{
    Campaign, CampaignCommand, CampaignError, QuotaUnit, ReleaseQuota, ReleaseReason, ReserveQuota,
};
use factledger_aggregates::commission::{
    commission_id, BeneficiaryRole, Commission, CommissionCommand, CommissionEvent, ReactToOrder,
    RecordCommission,
};
use factledger_aggregates::commission_rules::CommissionRuleSet;
use factledger_aggregates::invite::InviteRelation;
use factledger_aggregates::money::{AmountMinor, BoundedId, Currency};
use factledger_aggregates::wallet::{OpenWallet, Wallet, WalletCommand};
use factledger_aggregates::Refusal as _;
use std::collections::BTreeMap;

pub use super::ingest_refusal::{campaign_id, rule_set_id, wallet_id, OrderRefusal};

/// Ingests orders into the store, each in its own unit, with one set of metadata
/// (the request's, or the job's).
#[derive(Clone)]
pub struct Ingestor {
    pub(super) store: DynStore,
    pub(super) metadata: Metadata,
    pub(super) fail_after_streams: Option<usize>,
    /// Campaigns and wallets as the last decided page left them (see
    /// `ingest_page`): every page writes its campaigns, and re-reading a campaign's
    /// snapshot (all its reservations) per page would dominate.
    pub(super) cache: std::sync::Arc<std::sync::Mutex<StreamCache>>,
    /// One page decided at a time per ingestor (and its clones): pages of one
    /// platform × country all write its campaign, so two at once would only conflict
    /// on it and retry; queued, each decides on the state the previous one left. It
    /// holds the landing of the last page sent to the store (see `ingest_page`).
    pub(super) turn: std::sync::Arc<tokio::sync::Mutex<Option<Landing>>>,
}

/// The outcome of a page's append as the next page waits for it: `None` while in
/// flight, `Some(true)` committed, `Some(false)` failed. A page whose task was dropped
/// mid-way closes the channel: treated as failed (its outcome is unknown).
pub(super) type Landing = tokio::sync::watch::Receiver<Option<bool>>;

/// The aggregate types a page's working set keeps for the next page: streams every
/// page writes (so a stale one fails the append as a conflict). Never reference data
/// (read once per page, never across pages), nor orders and commissions (rarely
/// seen again, and an order decided `unchanged` writes nothing to guard it).
pub(super) const CACHED_TYPES: [&str; 2] = [Campaign::TYPE, Wallet::TYPE];
/// Streams kept across pages at most; the cache is dropped when it grows past it.
pub const INGEST_CACHE_STREAMS_MAX: usize = 100_000;

impl Ingestor {
    pub fn new(store: DynStore, metadata: Metadata) -> Ingestor {
        Ingestor {
            store,
            metadata,
            fail_after_streams: None,
            cache: Default::default(),
            turn: Default::default(),
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
        page_result(&order, outcome)
    }
}

/// What happened to one order, as the page reports it.
pub(super) fn page_result(
    order: &NormalisedOrder,
    outcome: Result<UnitOutcome<IngestOutcome>, UnitError<OrderRefusal>>,
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

fn unit_error_code(e: &UnitError<OrderRefusal>) -> &'static str {
    match e {
        UnitError::Refused(r) => r.code(),
        UnitError::Conflict(_) => "CONCURRENCY_CONFLICT",
        UnitError::DuplicateLedgerRef(_) => "DUPLICATE_LEDGER_REF",
        UnitError::TooManyStreams => "UNIT_TOO_LARGE",
        UnitError::Invariant(_) => "INVARIANT_VIOLATION",
        UnitError::Store(_) => "STORE_ERROR",
    }
}

type Step<T> = Result<T, UnitError<OrderRefusal>>;

/// The whole unit of one order; returns its outcome.
pub(super) async fn ingest_unit(
    unit: &mut UnitBuilder,
    order: NormalisedOrder,
) -> Step<IngestOutcome> {
    let order_id =
        factledger_aggregates::affiliate::order_stream_id(order.platform, &order.platform_order_id);
    let mut stream = unit.take::<AffiliateOrder, OrderRefusal>(&order_id).await?;
    let decided = decide_order(unit, &order_id, &mut stream, &order).await;
    let known = stream.state.order.clone();
    unit.put_back(&order_id, stream);
    let decision = decided?;
    let Some(known) = known else {
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

/// The order stream's decision, sealed into the unit.
async fn decide_order(
    unit: &mut UnitBuilder,
    order_id: &str,
    stream: &mut Loaded<AffiliateOrder>,
    order: &NormalisedOrder,
) -> Step<factledger_aggregates::affiliate_order::IngestDecision> {
    let command = match &stream.state.order {
        Some(_) => IngestOrder {
            order: order.clone(),
            owner_user_id: None,
            inviter_user_id: None,
            rules: None,
        },
        None => first_sight(unit, order).await?,
    };
    let decision = stream
        .state
        .plan_ingest(&command)
        .map_err(|e| UnitError::Refused(e.into()))?;
    unit.append::<AffiliateOrder, OrderRefusal>(stream, order_id, &decision.events)?;
    Ok(decision)
}

/// Resolve what only the first ingest decides: owner, inviter and rule version.
async fn first_sight(unit: &UnitBuilder, order: &NormalisedOrder) -> Step<IngestOrder> {
    let owner = match &order.attribution {
        Some(a) => unit
            .load::<AffiliateLink, OrderRefusal>(&link_stream_id(a))
            .await?
            .state
            .owner()
            .map(str::to_owned),
        None => None,
    };
    let inviter = match &owner {
        Some(user) => unit
            .load::<InviteRelation, OrderRefusal>(user)
            .await?
            .state
            .inviter()
            .map(str::to_owned),
        None => None,
    };
    let rules = unit
        .load::<CommissionRuleSet, OrderRefusal>(&rule_set_id(order.platform, order.country))
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
    BoundedId::parse(s)
        .map_err(|e| UnitError::Refused(OrderRefusal::Invalid(format!("id {s}: {e}"))))
}

fn reported(amount_minor: i64) -> Step<ReportedMinor> {
    ReportedMinor::parse(amount_minor).map_err(|e| {
        UnitError::Refused(OrderRefusal::Invalid(format!("amount {amount_minor}: {e}")))
    })
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
    let facts = OrderFacts {
        revision,
        amounts,
        status,
        updated_at,
        signal,
    };
    for (role, user) in roles(known) {
        let cid = commission_id(order_id, role);
        let mut stream = unit.take::<Commission, OrderRefusal>(&cid).await?;
        let decided = commission_step(
            unit,
            order_id,
            known,
            (&cid, &mut stream),
            (role, user),
            &facts,
            effects,
        );
        unit.put_back(&cid, stream);
        decided?;
    }
    Ok(())
}

/// What an order event says that its commissions react to.
struct OrderFacts {
    revision: u32,
    amounts: factledger_aggregates::commission::CommissionAmounts,
    status: OrderStatus,
    updated_at: chrono::DateTime<chrono::Utc>,
    signal: Option<factledger_aggregates::affiliate_order::OrderSignal>,
}

/// One role's commission decision for one order event, with its wallet effects.
fn commission_step(
    unit: &mut UnitBuilder,
    order_id: &str,
    known: &factledger_aggregates::affiliate_order::KnownOrder,
    (cid, stream): (&str, &mut Loaded<Commission>),
    (role, user): (BeneficiaryRole, &str),
    facts: &OrderFacts,
    effects: &mut Vec<Effect>,
) -> Step<()> {
    let OrderFacts {
        revision,
        amounts,
        status,
        updated_at,
        signal,
    } = *facts;
    {
        let amount_minor = amounts.for_role(role);
        let command = match (&stream.state.record, signal) {
            (Some(_), Some(signal)) => CommissionCommand::ReactToOrder(ReactToOrder {
                order_revision: revision,
                signal,
                order_status: status,
                amount_minor: reported(amount_minor)?,
                order_updated_at: updated_at,
            }),
            (Some(_), None) => return Ok(()),
            (None, _) if amount_minor <= 0 || !(status.is_valid() || status.is_refund_open()) => {
                return Ok(())
            }
            (None, _) => CommissionCommand::Record(RecordCommission {
                commission_id: id(cid)?,
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
        let events = unit.decide::<Commission, OrderRefusal>(stream, cid, command)?;
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
    let mut stream = unit.take::<Campaign, OrderRefusal>(&cid).await?;
    let decided = campaign_step(unit, order_id, known, &cid, &mut stream);
    unit.put_back(&cid, stream);
    decided
}

fn campaign_step(
    unit: &mut UnitBuilder,
    order_id: &str,
    known: &factledger_aggregates::affiliate_order::KnownOrder,
    cid: &str,
    stream: &mut Loaded<Campaign>,
) -> Step<()> {
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
    match unit.decide::<Campaign, OrderRefusal>(stream, cid, command) {
        Ok(_) => Ok(()),
        // No quota left or not part of the campaign: the order goes on without a
        // reservation (and tries again on its next ingest).
        Err(UnitError::Refused(OrderRefusal::Campaign(
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
        let mut stream = unit.take::<Wallet, OrderRefusal>(&wid).await?;
        let decided = wallet_step(unit, &wid, &mut stream, effects);
        unit.put_back(&wid, stream);
        decided?;
    }
    Ok(())
}

fn wallet_step(
    unit: &mut UnitBuilder,
    wid: &str,
    stream: &mut Loaded<Wallet>,
    effects: Vec<Effect>,
) -> Step<()> {
    for effect in effects {
        if !stream.state.opened {
            let open = WalletCommand::Open(OpenWallet {
                user_id: id(&effect.user_id)?,
                currency: effect.currency,
            });
            unit.decide::<Wallet, OrderRefusal>(stream, wid, open)?;
        }
        unit.decide::<Wallet, OrderRefusal>(stream, wid, effect.command)?;
    }
    Ok(())
}
