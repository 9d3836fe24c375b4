//! Subscription units: expiry (the scan's re-check on the stream), the subscription
//! message handed to the outbox, and IM membership re-sync.

use super::{ServiceRefusal, ServiceUnitError};
use crate::infra::store::{DynStore, Fence, Metadata};
use crate::runtime::bus::load;
use crate::runtime::unit::{run_command, run_unit, UnitError, UnitOutcome};
use chrono::{DateTime, Utc};
use factledger_aggregates::im_member::{ImMember, ImMemberCommand, ImMemberEvent};
use factledger_aggregates::services::{pair_id, UserId};
use factledger_aggregates::subscription::{Subscription, SubscriptionCommand, SubscriptionEvent};

/// Expire one subscription if it is still active and past its end.
pub async fn expire(
    store: &DynStore,
    metadata: &Metadata,
    artist_id: UserId,
    fan_user_id: UserId,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<UnitOutcome<Vec<SubscriptionEvent>>, ServiceUnitError> {
    let id = pair_id(artist_id, fan_user_id);
    run_unit(store, metadata, |mut unit| {
        let id = id.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let mut s = unit.load::<Subscription, ServiceRefusal>(&id).await?;
            let events = unit.decide::<Subscription, ServiceRefusal>(
                &mut s,
                &id,
                SubscriptionCommand::Expire { at: now },
            )?;
            Ok((events, unit))
        }
    })
    .await
}

/// Queue the subscription message of grant `order_no` (its outbox message).
pub async fn queue_message(
    store: &DynStore,
    metadata: &Metadata,
    artist_id: UserId,
    fan_user_id: UserId,
    order_no: &str,
    now: DateTime<Utc>,
) -> Result<UnitOutcome<Vec<SubscriptionEvent>>, ServiceUnitError> {
    run_command::<Subscription>(
        store,
        metadata,
        &pair_id(artist_id, fan_user_id),
        SubscriptionCommand::QueueMessage {
            order_no: order_no.to_owned(),
            at: now,
        },
    )
    .await
    .map_err(|e| map_refusal(e, ServiceRefusal::Subscription))
}

fn map_refusal<E: std::error::Error>(
    e: UnitError<E>,
    into: impl FnOnce(E) -> ServiceRefusal,
) -> ServiceUnitError {
    match e {
        UnitError::Refused(r) => UnitError::Refused(into(r)),
        UnitError::Conflict(n) => UnitError::Conflict(n),
        UnitError::DuplicateLedgerRef(r) => UnitError::DuplicateLedgerRef(r),
        UnitError::TooManyStreams => UnitError::TooManyStreams,
        UnitError::Invariant(v) => UnitError::Invariant(v),
        UnitError::Store(s) => UnitError::Store(s),
    }
}

/// What a membership sync did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSync {
    /// Whether the fan is a member after the sync.
    pub member: bool,
    pub added: u32,
    pub removed: u32,
}

async fn entitled(
    store: &DynStore,
    artist_id: UserId,
    fan_user_id: UserId,
    now: DateTime<Utc>,
) -> Result<bool, ServiceUnitError> {
    let s = load::<Subscription>(store, &pair_id(artist_id, fan_user_id))
        .await
        .map_err(UnitError::from_bus)?;
    Ok(s.state.is_active_at(now))
}

async fn set_member(
    store: &DynStore,
    metadata: &Metadata,
    artist_id: UserId,
    fan_user_id: UserId,
    member: bool,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<Vec<ImMemberEvent>, ServiceUnitError> {
    let id = pair_id(artist_id, fan_user_id);
    let out = run_unit(store, metadata, |mut unit| {
        let id = id.clone();
        async move {
            if let Some(f) = fence {
                unit.fence(f);
            }
            let mut m = unit.load::<ImMember, ServiceRefusal>(&id).await?;
            let events = unit.decide::<ImMember, ServiceRefusal>(
                &mut m,
                &id,
                ImMemberCommand::Sync {
                    artist_id,
                    fan_user_id,
                    member,
                    at: now,
                },
            )?;
            Ok((events, unit))
        }
    })
    .await?;
    Ok(out.value)
}

/// Targeted membership re-sync of one fan with one artist (seed 000 `im-members`):
/// the fan's subscription to the artist decides; a removal is checked again right
/// after, and a renewal that landed meanwhile adds the fan back at once.
pub async fn sync_member(
    store: &DynStore,
    metadata: &Metadata,
    artist_id: UserId,
    fan_user_id: UserId,
    now: DateTime<Utc>,
    fence: Option<Fence>,
) -> Result<MemberSync, ServiceUnitError> {
    let mut report = MemberSync::default();
    let want = entitled(store, artist_id, fan_user_id, now).await?;
    let events = set_member(store, metadata, artist_id, fan_user_id, want, now, fence).await?;
    for e in &events {
        match e {
            ImMemberEvent::MemberAdded { .. } => report.added += 1,
            ImMemberEvent::MemberRemoved { .. } => report.removed += 1,
        }
    }
    report.member = want;
    if !want && report.removed > 0 && entitled(store, artist_id, fan_user_id, now).await? {
        // A renewal landed between the check and the removal: add the fan back.
        let again = set_member(store, metadata, artist_id, fan_user_id, true, now, fence).await?;
        report.added += u32::try_from(again.len()).unwrap_or(0);
        report.member = true;
    }
    Ok(report)
}
