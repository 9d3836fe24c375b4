//! An outbox sink for acceptance 13: down until told otherwise (every delivery
//! refused and counted), then remembering what it was given.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

/// What a delivered message was: outbox id, aggregate type and id.
pub type Got = (i64, String, String);

#[derive(Default)]
pub struct Downstream {
    pub up: AtomicBool,
    pub refused: AtomicU64,
    pub got: Mutex<Vec<Got>>,
}

impl Downstream {
    pub fn set_up(&self) {
        self.up.store(true, SeqCst);
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(SeqCst)
    }

    pub fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Acceptance 13's middle: wait (at most 15 s) until the relay has tried `tries`
    /// times while down, check it got nothing, bring it up and wait until it holds
    /// `total` messages; what it got.
    pub async fn refuse_then_drain(&self, tries: u64, total: i64) -> Vec<Got> {
        let wait = std::time::Duration::from_secs(15);
        let deadline = std::time::Instant::now() + wait;
        while self.refused() < tries {
            assert!(
                std::time::Instant::now() < deadline,
                "the relay never tried"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(self.got().is_empty(), "a sink that is down got something");
        self.set_up();
        let deadline = std::time::Instant::now() + wait;
        while (self.got().len() as i64) < total {
            assert!(
                std::time::Instant::now() < deadline,
                "the backlog did not drain"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.got()
    }
}

#[async_trait::async_trait]
impl factledger::infra::outbox::Sink for Downstream {
    fn name(&self) -> &str {
        "downstream"
    }

    async fn deliver(
        &self,
        m: &factledger::infra::outbox::OutboxMessage,
    ) -> Result<(), factledger::infra::outbox::SinkError> {
        if !self.up.load(SeqCst) {
            self.refused.fetch_add(1, SeqCst);
            return Err(factledger::infra::outbox::SinkError::Connect("down".into()));
        }
        self.got.lock().unwrap_or_else(|p| p.into_inner()).push((
            m.id,
            m.aggregatetype.clone(),
            m.aggregateid.clone(),
        ));
        Ok(())
    }
}
