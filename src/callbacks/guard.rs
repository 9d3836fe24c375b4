//! What stands between an unauthenticated URL and the inbox table: a per-provider rate
//! limit, a cap on the unprocessed backlog, and a bounded forensic sample of refused
//! deliveries.
//!
//! `POST /v1/callbacks/{provider}` takes no API key: anyone can post to it. So a
//! delivery is **verified before anything is stored**; one that fails verification
//! leaves a counter (`factledger_callbacks_rejected_total{provider,reason}`) and, at
//! most [`REJECTED_SAMPLES_PER_MINUTE`] times a minute per provider, a sample row whose
//! body is cut to [`REJECTED_SAMPLE_BODY_BYTES`]; at most [`REJECTED_SAMPLES_KEPT`]
//! samples per provider are kept (older ones are deleted). Whatever a forger sends,
//! the table grows by at most a few hundred kilobytes.
//!
//! Before verification a token bucket per provider ([`CallbackLimits::rate_per_s`],
//! [`CallbackLimits::burst`]) refuses floods with 429 and `Retry-After`: providers
//! retry. A verified delivery is refused with 503 and `Retry-After` while the provider
//! already has [`CallbackLimits::backlog_max`] callbacks stored and not yet handled
//! (pending or failed); that raises a `callback.backlog` alert (at most one a minute per
//! provider), so the backlog is noticed instead of growing without bound.

use super::inbox;
use super::CallbackError;
use crate::infra::db::Db;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Deliveries per second one provider may make, on average (providers send a few a
/// second at peak; a flood beyond this is refused with 429 and retried by them).
pub const RATE_PER_S_DEFAULT: u32 = 100;
/// Deliveries one provider may make at once before the rate applies.
pub const BURST_DEFAULT: u32 = 200;
/// Callbacks of one provider stored and not yet handled (pending or failed) past which
/// new deliveries are refused with 503: handling is broken and needs a person.
pub const BACKLOG_MAX_DEFAULT: i64 = 10_000;
/// Refused deliveries sampled per provider and minute, for forensics.
pub const REJECTED_SAMPLES_PER_MINUTE: u32 = 10;
/// Refused samples kept per provider; older ones are deleted.
pub const REJECTED_SAMPLES_KEPT: i64 = 100;
/// A refused sample keeps this much of its body.
pub const REJECTED_SAMPLE_BODY_BYTES: usize = 1_024;
/// Seconds a refused provider is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 5;
/// At most one backlog alert per provider in this many milliseconds.
const BACKLOG_ALERT_EVERY_MS: u128 = 60_000;

/// The inbox's limits (per provider, per process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackLimits {
    pub rate_per_s: u32,
    pub burst: u32,
    pub backlog_max: i64,
}

impl Default for CallbackLimits {
    fn default() -> Self {
        CallbackLimits {
            rate_per_s: RATE_PER_S_DEFAULT,
            burst: BURST_DEFAULT,
            backlog_max: BACKLOG_MAX_DEFAULT,
        }
    }
}

/// One provider's bucket, sample budget and alert clock.
#[derive(Debug)]
struct ProviderState {
    /// Thousandths of a delivery (integer arithmetic: a token per 1/rate s).
    tokens_milli: u64,
    refilled: Instant,
    samples_minute: Instant,
    samples_taken: u32,
    backlog_alerted: Option<Instant>,
}

/// The guard's state, shared by every clone of the registry.
#[derive(Debug, Default)]
pub struct Guard {
    limits: CallbackLimits,
    state: Mutex<HashMap<String, ProviderState>>,
}

impl Guard {
    pub fn new(limits: CallbackLimits) -> Arc<Guard> {
        Arc::new(Guard {
            limits,
            state: Mutex::new(HashMap::new()),
        })
    }

    pub fn limits(&self) -> CallbackLimits {
        self.limits
    }

    fn with<T>(&self, provider: &str, f: impl FnOnce(&mut ProviderState) -> T) -> T {
        // A poisoned lock only means another request panicked mid-update of counters.
        let mut map = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let s = map
            .entry(provider.to_owned())
            .or_insert_with(|| ProviderState {
                tokens_milli: u64::from(self.limits.burst) * 1_000,
                refilled: now,
                samples_minute: now,
                samples_taken: 0,
                backlog_alerted: None,
            });
        f(s)
    }

    /// Take one delivery from the provider's bucket; false when it is empty.
    pub fn admit(&self, provider: &str) -> bool {
        let (rate, burst_milli) = (
            u64::from(self.limits.rate_per_s),
            u64::from(self.limits.burst) * 1_000,
        );
        self.with(provider, |s| {
            let now = Instant::now();
            // rate tokens a second = rate thousandths a millisecond.
            let elapsed_ms =
                u64::try_from(now.duration_since(s.refilled).as_millis()).unwrap_or(u64::MAX);
            s.tokens_milli = s
                .tokens_milli
                .saturating_add(elapsed_ms.saturating_mul(rate))
                .min(burst_milli);
            s.refilled = now;
            if s.tokens_milli >= 1_000 {
                s.tokens_milli -= 1_000;
                true
            } else {
                false
            }
        })
    }

    /// Whether this refused delivery may be sampled (the minute's budget).
    fn may_sample(&self, provider: &str) -> bool {
        self.with(provider, |s| {
            if s.samples_minute.elapsed().as_secs() >= 60 {
                s.samples_minute = Instant::now();
                s.samples_taken = 0;
            }
            if s.samples_taken < REJECTED_SAMPLES_PER_MINUTE {
                s.samples_taken += 1;
                true
            } else {
                false
            }
        })
    }

    /// Whether a backlog alert is due for the provider (one a minute at most).
    pub fn backlog_alert_due(&self, provider: &str) -> bool {
        self.with(provider, |s| {
            let due = s
                .backlog_alerted
                .is_none_or(|t| t.elapsed().as_millis() >= BACKLOG_ALERT_EVERY_MS);
            if due {
                s.backlog_alerted = Some(Instant::now());
            }
            due
        })
    }

    /// Count a refused delivery and keep a bounded sample of it. Returns the sample's
    /// id when one was stored.
    pub async fn refused(
        &self,
        db: &Db,
        provider: &str,
        reason: &'static str,
        headers_json: &str,
        body: &[u8],
        error: &str,
    ) -> Result<Option<i64>, CallbackError> {
        metrics::counter!(
            "factledger_callbacks_rejected_total",
            "provider" => provider.to_owned(),
            "reason" => reason,
        )
        .increment(1);
        if !self.may_sample(provider) {
            return Ok(None);
        }
        let cut = body.len().min(REJECTED_SAMPLE_BODY_BYTES);
        let note = if cut < body.len() {
            format!(
                "{error} (sample: body cut to {cut} of {} bytes)",
                body.len()
            )
        } else {
            error.to_owned()
        };
        let id =
            inbox::insert_refused_sample(db, provider, headers_json, &body[..cut], &note).await?;
        inbox::prune_refused_samples(db, provider, REJECTED_SAMPLES_KEPT).await?;
        Ok(Some(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_admits_its_burst_then_refuses_until_it_refills() {
        let g = Guard::new(CallbackLimits {
            rate_per_s: 1,
            burst: 3,
            backlog_max: 1,
        });
        assert!((0..3).all(|_| g.admit("p")));
        assert!(!g.admit("p"));
        // Another provider has its own bucket.
        assert!(g.admit("q"));
    }

    #[test]
    fn refused_deliveries_are_sampled_a_few_times_a_minute_only() {
        let g = Guard::new(CallbackLimits::default());
        let taken = (0..100).filter(|_| g.may_sample("p")).count();
        assert_eq!(taken, REJECTED_SAMPLES_PER_MINUTE as usize);
        assert!(g.may_sample("q"));
    }

    #[test]
    fn a_backlog_alert_is_raised_once_a_minute_per_provider() {
        let g = Guard::new(CallbackLimits::default());
        assert!(g.backlog_alert_due("p"));
        assert!(!g.backlog_alert_due("p"));
        assert!(g.backlog_alert_due("q"));
    }
}
