//! The head signal: what a store tells this process after each commit.

use super::CommittedUnit;

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
