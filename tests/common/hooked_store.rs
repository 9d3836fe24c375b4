//! A test event store: a real one whose appends go through a hook (a crash torn
//! mid-unit, a failure injected before or after the commit — [`Flaky`] —, a count),
//! everything else delegated as it is.

use super::Rng;
use async_trait::async_trait;
use factledger::infra::store::{
    CommittedUnit, DynStore, EventFilter, EventStore, IdempotencyRecord, Keyring, StoreError,
    StoredEvent, StoredSnapshot, StreamTail, UnitOfWork,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What an append does in a [`HookedStore`]; `inner` is the real store.
#[async_trait]
pub trait AppendHook: Send + Sync + 'static {
    async fn append(
        &self,
        inner: &DynStore,
        units: &[UnitOfWork],
    ) -> Result<Vec<CommittedUnit>, StoreError>;
}

/// A real store with an [`AppendHook`]; derefs to the hook (arm it, read its counts).
pub struct HookedStore<H> {
    pub inner: DynStore,
    pub hook: H,
}

impl<H> std::ops::Deref for HookedStore<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hook
    }
}

#[async_trait]
impl<H: AppendHook> EventStore for HookedStore<H> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn keyring(&self) -> &Arc<Keyring> {
        self.inner.keyring()
    }

    fn db(&self) -> factledger::infra::db::Db {
        self.inner.db()
    }

    fn head_watch(&self) -> Option<tokio::sync::watch::Receiver<i64>> {
        self.inner.head_watch()
    }

    async fn read_stream(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        from_sequence: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner
            .read_stream(aggregate_type, aggregate_id, from_sequence, limit)
            .await
    }

    async fn read_all(
        &self,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.read_all(after_position, limit).await
    }

    async fn read_positions(&self, first: i64, last: i64) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.read_positions(first, last).await
    }

    async fn find_events(
        &self,
        filter: &EventFilter,
        after_position: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.find_events(filter, after_position, limit).await
    }

    async fn stream_head(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<(i64, String), StoreError> {
        self.inner.stream_head(aggregate_type, aggregate_id).await
    }

    async fn load_snapshot(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<Option<StoredSnapshot>, StoreError> {
        self.inner.load_snapshot(aggregate_type, aggregate_id).await
    }

    async fn load_streams(
        &self,
        aggregate_type: &str,
        aggregate_ids: &[String],
    ) -> Result<Vec<StreamTail>, StoreError> {
        self.inner.load_streams(aggregate_type, aggregate_ids).await
    }

    async fn delete_snapshots(&self) -> Result<u64, StoreError> {
        self.inner.delete_snapshots().await
    }

    async fn find_idempotency(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.find_idempotency(scope, key).await
    }

    async fn list_streams(
        &self,
        after: Option<(String, String)>,
        limit: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.inner.list_streams(after, limit).await
    }

    async fn head_position(&self) -> Result<i64, StoreError> {
        self.inner.head_position().await
    }

    async fn count_positions(&self, up_to: i64) -> Result<(i64, i64), StoreError> {
        self.inner.count_positions(up_to).await
    }

    async fn execute_raw(&self, sql: &str) -> Result<u64, StoreError> {
        self.inner.execute_raw(sql).await
    }

    async fn append(&self, units: &[UnitOfWork]) -> Result<Vec<CommittedUnit>, StoreError> {
        self.hook.append(&self.inner, units).await
    }
}

/// Counts of what a [`Flaky`] hook did.
#[derive(Default)]
pub struct FlakyCounts {
    pub appends: AtomicU64,
    pub failed_before: AtomicU64,
    pub failed_after: AtomicU64,
    /// Appends of more than one unit that committed.
    pub groups_committed: AtomicU64,
}

/// Fails appends at random: 15 % before writing, 10 % AFTER the commit (the
/// connection lost on the way back: the caller cannot know the outcome). With a
/// latency, each append first waits up to that long (a round trip: the window in
/// which a pipeline decides its next batch on this one's states).
pub struct Flaky {
    rng: Mutex<Rng>,
    latency_us_max: u64,
    pub counts: Arc<FlakyCounts>,
}

impl Flaky {
    pub fn new(rng: Rng, latency_us_max: u64) -> Flaky {
        Flaky {
            rng: Mutex::new(rng),
            latency_us_max,
            counts: Arc::default(),
        }
    }
}

#[async_trait]
impl AppendHook for Flaky {
    async fn append(
        &self,
        inner: &DynStore,
        units: &[UnitOfWork],
    ) -> Result<Vec<CommittedUnit>, StoreError> {
        self.counts.appends.fetch_add(1, Ordering::Relaxed);
        let (roll, latency_us) = {
            let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            let roll = rng.below(100);
            let latency = (self.latency_us_max > 0).then(|| rng.below(self.latency_us_max));
            (roll, latency)
        };
        if let Some(us) = latency_us {
            tokio::time::sleep(std::time::Duration::from_micros(us)).await;
        }
        if roll < 15 {
            self.counts.failed_before.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Database(
                "injected: failed before writing".into(),
            ));
        }
        let out = inner.append(units).await;
        if out.is_ok() && units.len() > 1 {
            self.counts.groups_committed.fetch_add(1, Ordering::Relaxed);
        }
        if roll < 25 && out.is_ok() {
            self.counts.failed_after.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::OutcomeUnknown(
                "injected: committed, answer lost".into(),
            ));
        }
        out
    }
}
