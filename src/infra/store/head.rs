//! What a store tells this process after each commit: the head signal, and the
//! append metrics.

use super::{CommittedUnit, UnitOfWork};

/// What a store tells this process after each commit: the highest position written.
/// A projector waits for it to move instead of asking the database every few
/// milliseconds; appends from other processes are still seen by its slower poll.
#[derive(Debug)]
pub struct HeadSignal(tokio::sync::watch::Sender<i64>);

impl Default for HeadSignal {
    fn default() -> Self {
        Self(tokio::sync::watch::Sender::new(0))
    }
}

impl HeadSignal {
    /// Publish the last position of `committed`, if it moves the head.
    pub fn committed(&self, committed: &[CommittedUnit]) {
        let Some(last) = committed.iter().filter_map(|c| c.positions.last()).max() else {
            return;
        };
        self.0.send_if_modified(|head| {
            let moved = *last > *head;
            if moved {
                *head = *last;
            }
            moved
        });
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<i64> {
        self.0.subscribe()
    }
}

/// Record one committed append in the service's metrics: units written
/// (`factledger_store_appends_total`), events (`factledger_store_append_events_total`)
/// and the append's latency (`factledger_store_append_seconds`). The console's
/// metrics view charts them.
pub(crate) fn observe_append(
    backend: &'static str,
    units: &[UnitOfWork],
    started: std::time::Instant,
) {
    let events: usize = units.iter().map(UnitOfWork::event_count).sum();
    metrics::counter!("factledger_store_appends_total", "backend" => backend)
        .increment(units.len() as u64);
    metrics::counter!("factledger_store_append_events_total", "backend" => backend)
        .increment(events as u64);
    metrics::histogram!("factledger_store_append_seconds", "backend" => backend)
        .record(started.elapsed().as_secs_f64());
}
