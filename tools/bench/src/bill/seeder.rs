//! Sealing seed events into units as the bus would (hash-chained per stream, stamped
//! with one `now`), appended in large store appends of [`EVENTS_PER_APPEND`] events.

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use factledger::infra::store::{
    DynStore, Metadata, SealedEvent, StreamAppend, UnitOfWork, GENESIS_HASH,
};
use std::collections::BTreeMap;

/// Events per store append (one transaction), as the other seeders.
const EVENTS_PER_APPEND: usize = 5_000;

pub(super) struct Stream {
    aggregate_type: &'static str,
    id: String,
    prev: String,
    events: Vec<SealedEvent>,
}

impl Stream {
    pub(super) fn new(aggregate_type: &'static str, id: impl Into<String>) -> Stream {
        Stream {
            aggregate_type,
            id: id.into(),
            prev: GENESIS_HASH.to_owned(),
            events: Vec::new(),
        }
    }
}

pub(super) struct Seeder {
    store: DynStore,
    meta: Metadata,
    now: DateTime<Utc>,
    units: Vec<UnitOfWork>,
    pending: usize,
    pub(super) total: u64,
    pub(super) counts: BTreeMap<String, u64>,
}

impl Seeder {
    pub(super) fn new(store: DynStore) -> Seeder {
        Seeder {
            store,
            meta: crate::metadata(),
            now: chrono::SubsecRound::trunc_subsecs(Utc::now(), 6),
            units: Vec::new(),
            pending: 0,
            total: 0,
            counts: BTreeMap::new(),
        }
    }

    /// Seal `e` onto `s`, hash-chained as the bus seals.
    pub(super) fn push<E: DomainEvent + serde::Serialize>(
        &mut self,
        s: &mut Stream,
        e: E,
    ) -> anyhow::Result<()> {
        let event = SealedEvent::seal(
            self.store.keyring().active(),
            &s.prev,
            s.aggregate_type,
            &s.id,
            s.events.len() as i64 + 1,
            e.event_type(),
            e.event_version().parse().unwrap_or(1),
            serde_json::to_string(&e)?,
            &self.meta,
            uuid::Uuid::new_v4(),
            self.now,
        );
        s.prev = event.hash.clone();
        s.events.push(event);
        *self.counts.entry(e.event_type()).or_default() += 1;
        Ok(())
    }

    /// One unit of these streams; appended with the others once enough are pending.
    pub(super) async fn unit(&mut self, streams: Vec<Stream>) -> anyhow::Result<()> {
        let n: usize = streams.iter().map(|s| s.events.len()).sum();
        self.units.push(UnitOfWork {
            streams: streams
                .into_iter()
                .filter(|s| !s.events.is_empty())
                .map(|s| StreamAppend {
                    aggregate_type: s.aggregate_type.to_owned(),
                    aggregate_id: s.id,
                    expected_version: 0,
                    expected_hash: GENESIS_HASH.to_owned(),
                    events: s.events,
                })
                .collect(),
            ..Default::default()
        });
        self.pending += n;
        self.total += n as u64;
        if self.pending >= EVENTS_PER_APPEND {
            self.flush().await?;
        }
        Ok(())
    }

    pub(super) async fn flush(&mut self) -> anyhow::Result<()> {
        if !self.units.is_empty() {
            self.store.append(&std::mem::take(&mut self.units)).await?;
        }
        self.pending = 0;
        Ok(())
    }
}
