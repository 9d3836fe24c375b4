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

use super::{IngestError, IngestResult, OrderIngestor, INGEST_PAGE_ORDERS_MAX};
use crate::infra::store::{DynStore, Fence, Metadata, StoreError};
use crate::runtime::bus::{load_many, Loaded};
use crate::runtime::unit::{
    moved_since, run_unit, StreamCache, UnitBuilder, UnitError, UnitOutcome, WorkingSet,
    UNIT_CONFLICT_BACKOFF_MS_MAX, UNIT_CONFLICT_RETRIES_MAX,
};
use async_trait::async_trait;
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
    store: DynStore,
    metadata: Metadata,
    fail_after_streams: Option<usize>,
    /// Campaigns and wallets as the last committed page left them (see
    /// [`StreamCache`]): every page writes its campaigns, and re-reading a campaign's
    /// snapshot (all its reservations) per page would dominate.
    cache: std::sync::Arc<std::sync::Mutex<StreamCache>>,
    /// One page's group at a time per ingestor (and its clones): pages of one
    /// platform × country all write its campaign, so two groups at once would only
    /// conflict on it and retry; queued, each decides on the state the previous one
    /// committed (as the bus's single writer per aggregate type does).
    group_turn: std::sync::Arc<tokio::sync::Mutex<()>>,
}

/// The aggregate types a page's working set keeps for the next page: streams every
/// page writes (so a stale one fails the append as a conflict). Never reference data
/// (read once per page, never across pages), nor orders and commissions (rarely
/// seen again, and an order decided `unchanged` writes nothing to guard it).
const CACHED_TYPES: [&str; 2] = [Campaign::TYPE, Wallet::TYPE];
/// Streams kept across pages at most; the cache is dropped when it grows past it.
pub const INGEST_CACHE_STREAMS_MAX: usize = 100_000;

impl Ingestor {
    pub fn new(store: DynStore, metadata: Metadata) -> Ingestor {
        Ingestor {
            store,
            metadata,
            fail_after_streams: None,
            cache: Default::default(),
            group_turn: Default::default(),
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

    /// Decide the page's orders in order on the page's working set (each order its
    /// own unit; streams shared by several orders — the campaign, a wallet — chained
    /// from one unit to the next) and append all their units in ONE transaction.
    async fn ingest_group(&self, orders: &[NormalisedOrder], fence: Option<Fence>) -> Group {
        let cached = std::mem::take(&mut *self.cache.lock().unwrap_or_else(|p| p.into_inner()));
        let Ok(mut set) = prefetch(&self.store, orders, WorkingSet::from_cache(cached)).await
        else {
            return Group::OneByOne;
        };
        let mut results = Vec::with_capacity(orders.len());
        let mut units = Vec::new();
        let mut slots = Vec::new();
        for order in orders {
            let mut unit = UnitBuilder::in_group(self.store.clone(), self.metadata.clone(), set);
            if let Some(f) = fence {
                unit.fence(f);
            }
            if let Some(n) = self.fail_after_streams {
                unit.fail_after_streams(n);
            }
            let outcome = ingest_unit(&mut unit, order.clone()).await;
            let Some(next) = unit.leave_group(outcome.is_ok()) else {
                return Group::OneByOne;
            };
            set = next;
            let done = match outcome {
                Ok(value) => {
                    if !unit.is_empty() {
                        slots.push(results.len());
                        units.push(unit.finish().0);
                    }
                    Ok(UnitOutcome {
                        value,
                        events: Vec::new(),
                        position: 0,
                        attempts: 1,
                    })
                }
                // As in `run_unit`: a refusal decided on a stream that moved since it
                // was read is a stale read; the one-by-one path decides it again.
                Err(UnitError::Refused(refusal)) => {
                    match moved_since(&self.store, &unit.seen()).await {
                        Ok(false) => Err(UnitError::Refused(refusal)),
                        _ => return Group::OneByOne,
                    }
                }
                Err(_) => return Group::OneByOne,
            };
            match page_result(order, done) {
                Ok(r) => results.push(r),
                Err(_) => return Group::OneByOne,
            }
        }
        if units.is_empty() {
            return Group::Done(results);
        }
        match self.store.append(&units).await {
            Ok(committed) => {
                let keep = set.into_cache(&CACHED_TYPES);
                {
                    let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                    if cache.len() + keep.len() > INGEST_CACHE_STREAMS_MAX {
                        *cache = StreamCache::default();
                    }
                    cache.merge(keep);
                }
                for (slot, c) in slots.into_iter().zip(committed) {
                    if let (Some(r), Some(p)) = (results.get_mut(slot), c.positions.last()) {
                        r.position = Some(*p);
                    }
                }
                metrics::counter!("factledger_ingest_group_commits_total").increment(1);
                Group::Done(results)
            }
            Err(StoreError::Conflict { .. }) => Group::Conflict,
            Err(_) => Group::OneByOne,
        }
    }
}

/// How a page's group commit ended.
enum Group {
    /// Every order decided and its unit committed (or refused alone).
    Done(Vec<IngestResult>),
    /// Another writer moved a stream of the page: decide the page again.
    Conflict,
    /// Run the page's orders one by one, each in its own transaction (so one bad
    /// order fails alone): the batch append failed, or a refusal or error could not
    /// be settled inside the group.
    OneByOne,
}

fn distinct(v: impl IntoIterator<Item = String>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = v.into_iter().collect();
    set.into_iter().collect()
}

/// The ids the working set does not hold yet.
fn missing(set: &WorkingSet, aggregate_type: &str, ids: &[String]) -> Vec<String> {
    ids.iter()
        .filter(|i| !set.contains(aggregate_type, i))
        .cloned()
        .collect()
}

fn bus_store_error<E: std::error::Error>(e: crate::runtime::bus::BusError<E>) -> StoreError {
    match e {
        crate::runtime::bus::BusError::Store(s) => s,
        other => StoreError::Invalid(other.to_string()),
    }
}

/// Read every stream the page's orders will touch, two round trips per aggregate type
/// instead of several per order: the orders, their commissions, campaigns and rule
/// sets, the attribution links; then the owners' invite relations; then the wallets
/// of owners and inviters. A stream missed here is read when a unit needs it.
async fn prefetch(
    store: &DynStore,
    orders: &[NormalisedOrder],
    mut set: WorkingSet,
) -> Result<WorkingSet, StoreError> {
    let order_id = |o: &NormalisedOrder| {
        factledger_aggregates::affiliate::order_stream_id(o.platform, &o.platform_order_id)
    };
    let order_ids = distinct(orders.iter().map(order_id));
    let known = load_many::<AffiliateOrder>(store, &order_ids)
        .await
        .map_err(bus_store_error)?;
    let commission_ids = distinct(order_ids.iter().flat_map(|o| {
        [BeneficiaryRole::Cashback, BeneficiaryRole::InviterReward].map(|r| commission_id(o, r))
    }));
    for (id, l) in load_many::<Commission>(store, &commission_ids)
        .await
        .map_err(bus_store_error)?
    {
        set.insert(&id, l);
    }
    let places = distinct(orders.iter().map(|o| campaign_id(o.platform, o.country)));
    for (id, l) in load_many::<Campaign>(store, &missing(&set, Campaign::TYPE, &places))
        .await
        .map_err(bus_store_error)?
    {
        set.insert(&id, l);
    }
    for (id, l) in load_many::<CommissionRuleSet>(store, &places)
        .await
        .map_err(bus_store_error)?
    {
        set.insert(&id, l);
    }
    let link_ids = distinct(
        orders
            .iter()
            .filter_map(|o| o.attribution.as_ref().map(link_stream_id)),
    );
    let links = load_many::<AffiliateLink>(store, &link_ids)
        .await
        .map_err(bus_store_error)?;
    // Who each order credits: recorded on a known order, else its link's owner and
    // that user's inviter.
    let mut owners = Vec::new();
    let mut wallets = Vec::new();
    for o in orders {
        match known.get(&order_id(o)).and_then(|l| l.state.order.as_ref()) {
            Some(k) => {
                for u in [&k.owner_user_id, &k.inviter_user_id].into_iter().flatten() {
                    wallets.push(wallet_id(u.as_str(), k.currency));
                }
            }
            None => {
                if let Some(owner) = o
                    .attribution
                    .as_ref()
                    .and_then(|a| links.get(&link_stream_id(a)))
                    .and_then(|l| l.state.owner())
                {
                    owners.push((owner.to_owned(), o.currency));
                }
            }
        }
    }
    let invites =
        load_many::<InviteRelation>(store, &distinct(owners.iter().map(|(u, _)| u.clone())))
            .await
            .map_err(bus_store_error)?;
    for (user, currency) in &owners {
        wallets.push(wallet_id(user, *currency));
        if let Some(inviter) = invites.get(user).and_then(|i| i.state.inviter()) {
            wallets.push(wallet_id(inviter, *currency));
        }
    }
    for (id, l) in load_many::<Wallet>(store, &missing(&set, Wallet::TYPE, &distinct(wallets)))
        .await
        .map_err(bus_store_error)?
    {
        set.insert(&id, l);
    }
    for (id, l) in invites {
        set.insert(&id, l);
    }
    for (id, l) in links {
        set.insert(&id, l);
    }
    for (id, l) in known {
        set.insert(&id, l);
    }
    Ok(set)
}

/// What happened to one order, as the page reports it.
fn page_result(
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
        if orders.len() > 1 {
            let mut attempts = 0u32;
            loop {
                attempts += 1;
                let group = {
                    let _turn = self.group_turn.lock().await;
                    self.ingest_group(&orders, fence).await
                };
                match group {
                    Group::Done(results) => return Ok(results),
                    Group::Conflict if attempts < UNIT_CONFLICT_RETRIES_MAX => {
                        let ceiling_ms =
                            (1u64 << attempts.min(6)).min(UNIT_CONFLICT_BACKOFF_MS_MAX);
                        let pause_us =
                            rand::RngExt::random_range(&mut rand::rng(), 0..=ceiling_ms * 1000);
                        tokio::time::sleep(std::time::Duration::from_micros(pause_us)).await;
                        metrics::counter!("factledger_ingest_group_conflicts_total").increment(1);
                    }
                    Group::Conflict | Group::OneByOne => break,
                }
            }
            metrics::counter!("factledger_ingest_group_fallbacks_total").increment(1);
        }
        // One by one, each order in its own transaction (`run_unit`, with its
        // conflict handling): a page of one, or the fallback of a group.
        let mut results = Vec::with_capacity(orders.len());
        for order in orders {
            results.push(self.ingest_one(order, fence).await?);
        }
        Ok(results)
    }
}

type Step<T> = Result<T, UnitError<OrderRefusal>>;

/// The whole unit of one order; returns its outcome.
async fn ingest_unit(unit: &mut UnitBuilder, order: NormalisedOrder) -> Step<IngestOutcome> {
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
