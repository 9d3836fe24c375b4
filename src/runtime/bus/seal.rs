//! Sealing a decision: its events checked (on a scratch copy when there are several),
//! their ledger references taken, chained onto the stream's hash chain with their
//! metadata and outbox messages, and a snapshot when one is due. Units of one
//! command ([`super::CommandBus`]) and of several streams (`runtime::unit`) both seal
//! through [`seal_decided`].

use super::{BusError, Loaded, SNAPSHOT_EVERY_EVENTS};
use crate::infra::store::{
    full_metadata, EventView, Metadata, OutboxRow, SealedEvent, SnapshotRow, StoreError,
    StreamAppend,
};
use chrono::Utc;
use factledger_aggregates::decide::LedgerRef;
use factledger_aggregates::Decide;
use std::collections::HashSet;

/// The outbox message of one event (SPEC R-OUT-1): `type` is `<aggregate>.<event>`,
/// the payload the event with the ids a consumer needs to deduplicate and to find it
/// in the audit history.
fn outbox_row(
    aggregate_type: &str,
    aggregate_id: &str,
    e: &SealedEvent,
    payload: &serde_json::Value,
) -> OutboxRow {
    OutboxRow {
        aggregatetype: aggregate_type.to_owned(),
        aggregateid: aggregate_id.to_owned(),
        r#type: format!("{aggregate_type}.{}", e.event_type),
        payload: serde_json::json!({
            "event_id": e.event_id.to_string(),
            "sequence": e.sequence,
            "event_type": e.event_type,
            "correlation_id": e.correlation_id,
            "actor": e.actor,
            "recorded_at": crate::infra::store::time_text(&e.recorded_at),
            "payload": payload,
        })
        .to_string(),
    }
}

/// The events one decision appends to one stream, sealed, with what goes beside them
/// in the unit.
pub(crate) struct SealedDecision {
    pub stream: StreamAppend,
    /// Ledger references by the index of their event within `stream`.
    pub ledger_refs: Vec<(usize, factledger_aggregates::decide::LedgerRef)>,
    pub snapshot: Option<SnapshotRow>,
    pub outbox: Vec<OutboxRow>,
    pub views: Vec<EventView>,
}

/// Check decided events on a scratch copy of the state (a refused decision leaves no
/// trace), seal them onto the stream's hash chain, and only then move the working
/// state on. `refs` holds the ledger references already taken by the batch or unit
/// being built: a second one is refused here, before the database would.
pub(crate) fn seal_decided<A>(
    key: &crate::infra::store::ChainKey,
    loaded: &mut Loaded<A>,
    aggregate_id: &str,
    events: &[A::Event],
    metadata: &Metadata,
    refs: &mut HashSet<factledger_aggregates::decide::LedgerRef>,
) -> Result<SealedDecision, BusError<A::Error>>
where
    A: Decide + Clone,
{
    let (scratch, unit_refs) = check_events(loaded, events, refs)?;
    let expected_version = loaded.version;
    let Sealed {
        events: sealed,
        views,
        outbox,
        last_hash: prev,
        payload_bytes,
    } = seal_events::<A>(key, loaded, aggregate_id, events, metadata)?;
    let new_version = expected_version + events.len() as i64;
    for (_, r) in &unit_refs {
        refs.insert(r.clone());
    }
    let stream = StreamAppend {
        aggregate_type: A::TYPE.to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        expected_version,
        expected_hash: loaded.last_hash.clone(),
        events: sealed,
    };
    match scratch {
        Some(scratch) => loaded.state = scratch,
        None => {
            for e in events {
                loaded.state.apply(e.clone());
            }
        }
    }
    let appended = events.len() as i64;
    let snapshot = snapshot_due(
        loaded,
        aggregate_id,
        appended,
        payload_bytes,
        new_version,
        &prev,
    );
    loaded.version = new_version;
    loaded.last_hash = prev;
    Ok(SealedDecision {
        stream,
        ledger_refs: unit_refs,
        snapshot,
        outbox,
        views,
    })
}

/// The state a decision's events were checked on (`None`: the state itself, for one
/// event) and their ledger references by event index.
type Checked<A> = (Option<A>, Vec<(usize, LedgerRef)>);

/// Check each event on the state (several: on a scratch copy) and take its ledger
/// reference, refusing one the batch or unit already took.
fn check_events<A>(
    loaded: &Loaded<A>,
    events: &[A::Event],
    refs: &HashSet<LedgerRef>,
) -> Result<Checked<A>, BusError<A::Error>>
where
    A: Decide + Clone,
{
    // One event (the usual case) is checked on the state itself and applied only
    // once everything else succeeded: no copy of a large state (a campaign's
    // reservations) per decision. Several events are checked on a scratch copy.
    let mut scratch = (events.len() > 1).then(|| loaded.state.clone());
    let mut unit_refs = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match &mut scratch {
            Some(scratch) => scratch.check(e)?,
            None => loaded.state.check(e)?,
        }
        if let Some(r) = A::ledger_ref(e) {
            if refs.contains(&r) || unit_refs.iter().any(|(_, x)| x == &r) {
                return Err(BusError::DuplicateLedgerRef(format!(
                    "{}/{}/{}",
                    r.ref_type, r.ref_id, r.entry_type
                )));
            }
            unit_refs.push((i, r));
        }
        if let Some(scratch) = &mut scratch {
            scratch.apply(e.clone());
        }
    }
    Ok((scratch, unit_refs))
}

/// A decision's events sealed onto the stream's chain.
struct Sealed {
    events: Vec<SealedEvent>,
    views: Vec<EventView>,
    outbox: Vec<OutboxRow>,
    /// The hash of the last sealed event.
    last_hash: String,
    payload_bytes: i64,
}

/// Seal each event after the stream's head (hash chain, metadata, the view the
/// caller gets back and, for an outbox aggregate, its message).
fn seal_events<A>(
    key: &crate::infra::store::ChainKey,
    loaded: &Loaded<A>,
    aggregate_id: &str,
    events: &[A::Event],
    metadata: &Metadata,
) -> Result<Sealed, BusError<A::Error>>
where
    A: Decide + Clone,
{
    let expected_version = loaded.version;
    // Stored with microsecond precision: truncate now so a replayed response (read
    // back from the store) is identical to the original one.
    let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
    let mut sealed = Vec::with_capacity(events.len());
    let mut views = Vec::with_capacity(events.len());
    let mut outbox = Vec::new();
    let mut prev = loaded.last_hash.clone();
    let mut payload_bytes = 0i64;
    for (i, e) in events.iter().enumerate() {
        let payload_value = serde_json::to_value(e)
            .map_err(|err| BusError::Store(StoreError::Corrupt(err.to_string())))?;
        let payload_text = payload_value.to_string();
        payload_bytes += payload_text.len() as i64;
        let event = SealedEvent::seal(
            key,
            &prev,
            A::TYPE,
            aggregate_id,
            expected_version + 1 + i as i64,
            cqrs_es::DomainEvent::event_type(e),
            cqrs_es::DomainEvent::event_version(e).parse().unwrap_or(1),
            payload_text.clone(),
            metadata,
            uuid::Uuid::new_v4(),
            now,
        );
        let id = event.event_id.to_string();
        let full = full_metadata(
            &event.metadata,
            &id,
            &event.correlation_id,
            &event.actor,
            &now,
        )
        .map_err(|err| BusError::Store(StoreError::Corrupt(err.to_string())))?;
        prev = event.hash.clone();
        if A::OUTBOX {
            outbox.push(outbox_row(A::TYPE, aggregate_id, &event, &payload_value));
        }
        views.push(EventView {
            global_position: 0,
            aggregate_type: A::TYPE.to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            sequence: event.sequence,
            event_id: id,
            event_type: event.event_type.clone(),
            event_version: event.event_version,
            stored_version: event.event_version,
            payload: payload_value,
            metadata: full,
            hash: event.hash.clone(),
            recorded_at: now,
        });
        sealed.push(event);
    }
    Ok(Sealed {
        events: sealed,
        views,
        outbox,
        last_hash: prev,
        payload_bytes,
    })
}

/// The snapshot due after `appended` more events of `payload_bytes`, if any, and the
/// counters moved on.
fn snapshot_due<A>(
    loaded: &mut Loaded<A>,
    aggregate_id: &str,
    appended: i64,
    payload_bytes: i64,
    new_version: i64,
    last_hash: &str,
) -> Option<SnapshotRow>
where
    A: Decide + Clone,
{
    let mut since = loaded.events_since_snapshot + appended;
    let mut bytes = loaded.bytes_since_snapshot + payload_bytes;
    let mut snapshot = None;
    // A snapshot is due every SNAPSHOT_EVERY_EVENTS events, but not before the
    // events since the last one are as large as it: a state that grows with its
    // stream (a campaign's reservations) is then written about as often as its
    // size doubles, not every 100 events (megabytes per 100 small events). A state
    // that does not serialize is left without a snapshot (they are optional).
    if since >= SNAPSHOT_EVERY_EVENTS && bytes >= loaded.snapshot_bytes {
        if let Ok(state) = serde_json::to_string(&loaded.state) {
            loaded.snapshot_bytes = state.len() as i64;
            snapshot = Some(SnapshotRow {
                aggregate_type: A::TYPE.to_owned(),
                aggregate_id: aggregate_id.to_owned(),
                snapshot_version: A::SNAPSHOT_VERSION,
                stream_version: new_version,
                last_hash: last_hash.to_owned(),
                state,
            });
            since = 0;
            bytes = 0;
        }
    }
    loaded.bytes_since_snapshot = bytes;
    loaded.events_since_snapshot = since;
    snapshot
}
