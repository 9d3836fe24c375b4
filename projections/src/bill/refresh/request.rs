//! The typed refresh request: its scope, mode and trigger sources; its business key
//! (the task identity, [`BusinessKey::task_code`], [`BusinessKey::stored_key`]) and the
//! identity check of a claimed task; and the fact-change resubmit merge.

use super::error::RefreshRequestError;
use super::kind::RefreshMode;
use super::limits::{BUSINESS_KEY_STORED_CHARS_MAX, STORED_KEY_DIGEST_PREFIX, TASK_CODE_PREFIX};
use super::scope::{RefreshScope, StationMonthList};
use factledger_aggregates::bill::TriggerSource;
use md5::{Digest, Md5};
use std::collections::BTreeSet;
use std::fmt;

/// A refresh request that passed every submission rule: within the limits, scopes
/// normalised, ids positive, months legal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshRequest {
    pub(super) scope: RefreshScope,
    pub(super) mode: RefreshMode,
    pub(super) trigger_sources: BTreeSet<TriggerSource>,
}

/// The full business key, e.g. `STATION_MONTH:100:202609|MODE=ALL` (seed §2.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BusinessKey(String);

impl BusinessKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `RIPSR:` + lowercase hex MD5 of the full key — always of the full key, even
    /// when the stored key is a digest.
    pub fn task_code(&self) -> String {
        format!("{TASK_CODE_PREFIX}{}", md5_hex(&self.0))
    }

    /// The key as stored: itself when at most [`BUSINESS_KEY_STORED_CHARS_MAX`]
    /// characters, else `RIPSR_BK:` + MD5 of the full key.
    pub fn stored_key(&self) -> String {
        if self.0.chars().count() <= BUSINESS_KEY_STORED_CHARS_MAX {
            self.0.clone()
        } else {
            format!("{STORED_KEY_DIGEST_PREFIX}{}", md5_hex(&self.0))
        }
    }
}

impl fmt::Display for BusinessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn md5_hex(s: &str) -> String {
    Md5::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl RefreshRequest {
    /// A request built in code (the fact-change producers): always `MODE=ALL`, because a
    /// paid bill can become unpaid again.
    pub fn fact_change(
        scope: RefreshScope,
        trigger_sources: impl IntoIterator<Item = TriggerSource>,
    ) -> RefreshRequest {
        RefreshRequest {
            scope,
            mode: RefreshMode::All,
            trigger_sources: trigger_sources.into_iter().collect(),
        }
    }

    /// An operator's request with an explicit mode.
    pub fn operator(
        scope: RefreshScope,
        mode: RefreshMode,
        trigger_sources: impl IntoIterator<Item = TriggerSource>,
    ) -> RefreshRequest {
        RefreshRequest {
            scope,
            mode,
            trigger_sources: trigger_sources.into_iter().collect(),
        }
    }

    pub fn scope(&self) -> &RefreshScope {
        &self.scope
    }

    pub fn mode(&self) -> RefreshMode {
        self.mode
    }

    pub fn trigger_sources(&self) -> &BTreeSet<TriggerSource> {
        &self.trigger_sources
    }

    /// R-BILL-9: reconcile payment-order statuses iff any (merged) source is on the
    /// whitelist.
    pub fn reconciles_order_status(&self) -> bool {
        self.trigger_sources
            .iter()
            .any(|s| s.reconciles_order_status())
    }

    /// R-BILL-9: the line write-back runs for imports that took effect.
    pub fn writes_back_import(&self) -> bool {
        self.trigger_sources
            .contains(&TriggerSource::PaymentImportEffective)
    }

    /// `<TYPE>:<body>|MODE=<mode>`; neither trigger sources nor locators are part of it.
    pub fn business_key(&self) -> BusinessKey {
        BusinessKey(format!(
            "{}:{}|MODE={}",
            self.scope.scope_type().name(),
            self.scope.key_body(),
            self.mode.as_str()
        ))
    }

    /// Seed §4.3 step 5: a claimed task's stored key and code must equal those
    /// recomputed from its `task_data`, both of them.
    pub fn check_identity(
        &self,
        stored_key: &str,
        task_code: &str,
    ) -> Result<(), RefreshRequestError> {
        let key = self.business_key();
        let mismatch = |field, stored: &str, recomputed: String| {
            Err(RefreshRequestError::IdentityMismatch {
                field,
                stored: stored.to_owned(),
                recomputed,
            })
        };
        if key.stored_key() != stored_key {
            return mismatch("business_key", stored_key, key.stored_key());
        }
        if key.task_code() != task_code {
            return mismatch("task_code", task_code, key.task_code());
        }
        Ok(())
    }

    /// A fact-change resubmit of the same business key: trigger sources and station-month
    /// locators are the union of both, not the newer request's (**[dev]**, seed §9.6
    /// overwrote `task_data`). The merged request must still pass every submission
    /// limit (it is stored as the task's `task_data`).
    pub fn merge_resubmit(
        &self,
        resubmitted: &RefreshRequest,
    ) -> Result<RefreshRequest, RefreshRequestError> {
        let (existing_key, new_key) = (self.business_key(), resubmitted.business_key());
        if existing_key != new_key {
            return Err(RefreshRequestError::KeyMismatch {
                existing: existing_key.0,
                resubmitted: new_key.0,
            });
        }
        let scope = match (&self.scope, &resubmitted.scope) {
            (RefreshScope::StationMonths(a), RefreshScope::StationMonths(b)) => {
                let mut all = a.0.clone();
                all.extend(b.0.iter().copied());
                all.sort_unstable();
                all.dedup();
                RefreshScope::StationMonths(StationMonthList::new(all)?)
            }
            // Same key, same ids: nothing else to merge.
            _ => self.scope.clone(),
        };
        let merged = RefreshRequest {
            scope,
            mode: self.mode,
            trigger_sources: self
                .trigger_sources
                .union(&resubmitted.trigger_sources)
                .copied()
                .collect(),
        };
        RefreshRequest::parse(&merged.to_task_data())
    }
}
