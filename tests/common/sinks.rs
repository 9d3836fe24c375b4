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
