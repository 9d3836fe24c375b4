//! A page of orders in ONE transaction, pipelined (issue 5 item 8, issue 19 item 4).
//!
//! A page's orders are decided in order on the page's working set (each order its
//! own unit; streams shared by several orders — the campaign, a wallet — chained from
//! one unit to the next), and all their units are appended together. Pages of one
//! [`Ingestor`] take turns to *decide* (`Ingestor::turn`), not to commit: page N+1 is
//! decided on the states page N leaves (the campaigns and wallets of
//! [`CACHED_TYPES`], kept in the ingestor's cache as soon as N is decided) while N's
//! append is on its way, and N+1 is appended only once N has landed. What keeps this
//! correct:
//!
//! - appends of the pipeline are serial: each page waits for the previous page's
//!   outcome ([`Landing`]) before its own append, so it never races the page it
//!   decided on;
//! - if N fails, every page decided after it is decided again (it answers
//!   [`Group::Conflict`] without appending) and the cache is emptied, so nothing
//!   decided on N's states survives; a page that reached the store anyway would be
//!   refused by the stream guards (the exact head number and hash it expects do not
//!   exist);
//! - a refusal decided on a state of N is only trusted after N has landed and the
//!   stream is seen not to have moved since (as [`moved_since`] does for any unit);
//! - nothing of N+1 is answered before N's outcome is known.
//!
//! A page whose group cannot be settled (an order refused on a stale read, a failed
//! append that is not a conflict) runs its orders one by one, each in its own
//! transaction, so one bad order fails alone.

use super::ingest::{
    page_result, wallet_id, Ingestor, Landing, CACHED_TYPES, INGEST_CACHE_STREAMS_MAX,
};
use super::ingest_refusal::campaign_id;
use super::{IngestError, IngestResult, OrderIngestor, INGEST_PAGE_ORDERS_MAX};
use crate::infra::store::{DynStore, Fence, StoreError};
use crate::runtime::bus::load_many;
use crate::runtime::unit::{
    moved_since, StreamCache, UnitBuilder, UnitError, UnitOutcome, WorkingSet,
    UNIT_CONFLICT_BACKOFF_MS_MAX, UNIT_CONFLICT_RETRIES_MAX,
};
use async_trait::async_trait;
use cqrs_es::Aggregate as _;
use factledger_aggregates::affiliate_link::{link_stream_id, AffiliateLink};
use factledger_aggregates::affiliate_order::{AffiliateOrder, NormalisedOrder};
use factledger_aggregates::campaign::Campaign;
use factledger_aggregates::commission::{commission_id, BeneficiaryRole, Commission};
use factledger_aggregates::commission_rules::CommissionRuleSet;
use factledger_aggregates::invite::InviteRelation;
use factledger_aggregates::wallet::Wallet;
use tokio::sync::watch;

/// Whether the page this landing belongs to committed (waits for it).
async fn landed(mut prev: Landing) -> bool {
    match prev.wait_for(Option::is_some).await {
        Ok(v) => *v == Some(true),
        Err(_) => false,
    }
}

/// How a page's group commit ended.
enum Group {
    /// Every order decided and its unit committed (or refused alone).
    Done(Vec<IngestResult>),
    /// Another writer moved a stream of the page, or the page decided before this
    /// one failed: decide the page again.
    Conflict,
    /// Run the page's orders one by one, each in its own transaction (so one bad
    /// order fails alone): the batch append failed, or a refusal or error could not
    /// be settled inside the group.
    OneByOne,
}

/// A page decided, waiting to be appended.
struct Decided {
    results: Vec<IngestResult>,
    units: Vec<crate::infra::store::UnitOfWork>,
    /// Index in `results` of the order each unit belongs to.
    slots: Vec<usize>,
}

impl Ingestor {
    fn cache_lock(&self) -> std::sync::MutexGuard<'_, StreamCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forget every cached state (a page failed: states decided on it are void).
    fn drop_cache(&self) {
        *self.cache_lock() = StreamCache::default();
    }

    /// The landing to wait for before appending, of the page last sent to the store:
    /// none once it has landed. One that failed emptied the cache itself; one whose
    /// task was dropped before it knew its outcome did not, so the cache is emptied
    /// here (its states may never have reached the store).
    fn pending(&self, last: Option<Landing>) -> Option<Landing> {
        let last = last?;
        let outcome = *last.borrow();
        match outcome {
            Some(_) => None,
            None if last.has_changed().is_err() => {
                self.drop_cache();
                None
            }
            None => Some(last),
        }
    }

    /// Decide the page in its turn, then append it once the page before has landed.
    async fn ingest_group(&self, orders: &[NormalisedOrder], fence: Option<Fence>) -> Group {
        let (decided, prev, landing) = {
            let mut turn = self.turn.lock().await;
            let mut prev = self.pending(turn.take());
            let decided = self.decide_group(orders, fence, &mut prev).await;
            let decided = match decided {
                Ok(d) => d,
                Err(group) => {
                    // Nothing of this page goes to the store: the next page waits for
                    // the one before, as this one would have.
                    *turn = prev;
                    return group;
                }
            };
            if decided.units.is_empty() {
                *turn = prev.clone();
                (decided, prev, None)
            } else {
                let (tx, rx) = watch::channel(None);
                *turn = Some(rx);
                (decided, prev, Some(tx))
            }
        };
        let Decided {
            mut results,
            units,
            slots,
        } = decided;
        let settle = |ok: bool| {
            if let Some(tx) = &landing {
                let _ = tx.send(Some(ok));
            }
        };
        if let Some(prev) = prev {
            if !landed(prev).await {
                self.drop_cache();
                settle(false);
                return Group::Conflict;
            }
        }
        if units.is_empty() {
            return Group::Done(results);
        }
        match self.store.append(&units).await {
            Ok(committed) => {
                settle(true);
                for (slot, c) in slots.into_iter().zip(committed) {
                    if let (Some(r), Some(p)) = (results.get_mut(slot), c.positions.last()) {
                        r.position = Some(*p);
                    }
                }
                metrics::counter!("factledger_ingest_group_commits_total").increment(1);
                Group::Done(results)
            }
            Err(e) => {
                self.drop_cache();
                settle(false);
                match e {
                    StoreError::Conflict { .. } => Group::Conflict,
                    _ => Group::OneByOne,
                }
            }
        }
    }

    /// Decide the page's orders on the cache (the states the last decided page left)
    /// and what `prefetch` reads, and leave the page's states in the cache for the
    /// next page. `prev`: the landing of the page decided before, if it may be in
    /// flight (waited for, and cleared, when a refusal must be checked).
    async fn decide_group(
        &self,
        orders: &[NormalisedOrder],
        fence: Option<Fence>,
        prev: &mut Option<Landing>,
    ) -> Result<Decided, Group> {
        let cached = std::mem::take(&mut *self.cache_lock());
        let Ok(mut set) = prefetch(&self.store, orders, WorkingSet::from_cache(cached)).await
        else {
            return Err(Group::OneByOne);
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
            let outcome = super::ingest::ingest_unit(&mut unit, order.clone()).await;
            let Some(next) = unit.leave_group(outcome.is_ok()) else {
                return Err(Group::OneByOne);
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
                // was read is a stale read; the one-by-one path decides it again. A
                // state the page before left is only known once that page landed.
                Err(UnitError::Refused(refusal)) => {
                    if let Some(p) = prev.take() {
                        if !landed(p).await {
                            self.drop_cache();
                            return Err(Group::Conflict);
                        }
                    }
                    match moved_since(&self.store, &unit.seen()).await {
                        Ok(false) => Err(UnitError::Refused(refusal)),
                        _ => return Err(Group::OneByOne),
                    }
                }
                Err(_) => return Err(Group::OneByOne),
            };
            match page_result(order, done) {
                Ok(r) => results.push(r),
                Err(_) => return Err(Group::OneByOne),
            }
        }
        let keep = set.into_cache(&CACHED_TYPES);
        let mut cache = self.cache_lock();
        if cache.len() + keep.len() > INGEST_CACHE_STREAMS_MAX {
            *cache = StreamCache::default();
        }
        cache.merge(keep);
        Ok(Decided {
            results,
            units,
            slots,
        })
    }
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
                let group = self.ingest_group(&orders, fence).await;
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
