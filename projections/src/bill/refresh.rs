//! Refresh requests (SPEC R-BILL-8; seed 001 §2.2, §4.3, §4.4, §9.5, §9.6): an operator's
//! or a repair's on-demand recomputation of bills, by scope type, resolved to
//! station-months.
//!
//! Pure rules only — no I/O, no clock:
//! - [`RefreshRequest::parse`]: the request JSON (`task_data`) → a typed, normalised
//!   request, or a [`RefreshRequestError`] naming the field and the rule. The limits
//!   (bytes, JSON nodes, scopes) are checked here, at submission (**[dev]**: the seed
//!   claimed oversize tasks and then failed them with the retries exhausted).
//! - [`RefreshRequest::business_key`]: the task identity, `STATION_MONTH:100:202609|MODE=ALL`
//!   and so on; [`BusinessKey::task_code`] and [`BusinessKey::stored_key`].
//! - [`RefreshRequest::merge_resubmit`]: a fact-change resubmit merges trigger sources and
//!   locators instead of overwriting them (**[dev]**, seed §9.6).
//! - resolution of each scope type to station-months, written against plain data a
//!   resolver loads ([`resolve_partner_bill`], [`resolve_diff`], [`resolve_order_bill`],
//!   [`check_locator`], [`account_scope_page`]); errors are [`ScopeResolveError`].
//!
//! Readings of the seed chosen here (the seed gives four key examples only):
//! - several station-months: `STATION_MONTH:100:202609,100:202610|MODE=ALL`; partner
//!   bills: `PARTNER_BILL:30001,30002|MODE=ALL` (ids joined by `,` as `DIFF:`);
//! - an account scope with one side omits the other side's segment:
//!   `ACCOUNT_SCOPE:PARTNER=201|MONTH_END=202609|MODE=ALL`; several ids join by `,`;
//! - the key encodes neither trigger sources nor locators (seed §9.6: "站月业务键只编码站点、
//!   月份和模式"), so requests differing only there are one task, and a fact-change
//!   resubmit merges them;
//! - the MD5 is lowercase hex, as `jobs::md5_hex` and `jobs::is_code` of the job engine.
//! - a scope's station id is the station the partner account maps to as its
//!   `platform_station_id` (SPEC: PARTNER_BILL resolves through it; the locator check L5
//!   compares it with the scope's station).

use super::{PaymentStatus, StationMonth, YearMonth};
use factledger_aggregates::bill::TriggerSource;
use md5::{Digest, Md5};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::fmt;

/// A request's `task_data` is at most this many UTF-8 bytes (seed §4.3: bytes, not
/// characters). Bounds what one submission can make the worker parse and hold.
pub const REFRESH_TASK_DATA_BYTES_MAX: usize = 16_384;
/// At most this many JSON nodes (every object, array and scalar; keys are not nodes,
/// as the job engine's `json_nodes`). 16 KB of `[1,1,1,…]` is ~8,000 nodes: the byte
/// limit alone does not bound the parse.
pub const REFRESH_TASK_DATA_NODES_MAX: usize = 1_200;
/// At most this many scopes per request, counted per scope type (see
/// [`RefreshScope::count`]): one task must stay a bounded unit of work.
pub const REFRESH_SCOPES_MAX: usize = 200;
/// A business key longer than this many characters is stored as its digest.
pub const BUSINESS_KEY_STORED_CHARS_MAX: usize = 128;
/// An account scope is expanded at most this many station-months a page, with a saved
/// cursor (**[dev]**: the seed expanded it unbounded, §9.4 — 200 accounts × 120 months
/// is 24,000 station-months in one round).
pub const ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX: usize = 100;
/// Task codes are this prefix + the MD5 of the full business key.
pub const TASK_CODE_PREFIX: &str = "RIPSR:";
/// Over-long business keys are stored as this prefix + the MD5 of the full key.
pub const STORED_KEY_DIGEST_PREFIX: &str = "RIPSR_BK:";

/// Bill payment statuses a `MODE=UNFINISHED` refresh recomputes (seed §4.4): 20 unpaid,
/// 30 in review, 40 awaiting payment, 60 partially paid, 70 failed, 99 partner bill not
/// pushed — not 10 no payment needed, not 50 paid.
pub const UNFINISHED_STATUSES: [PaymentStatus; 6] = [
    PaymentStatus::Unpaid,
    PaymentStatus::InReview,
    PaymentStatus::AwaitingPayment,
    PaymentStatus::PartiallyPaid,
    PaymentStatus::PaymentFailed,
    PaymentStatus::PartnerBillNotPushed,
];

// ---------------------------------------------------------------------------------
// Scope type, mode.
// ---------------------------------------------------------------------------------

/// `scope_type`: the five ways a request names its bills (seed §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeType {
    StationMonth,
    PartnerBill,
    Diff,
    OrderBill,
    AccountScope,
}

impl ScopeType {
    pub const ALL: [ScopeType; 5] = [
        ScopeType::StationMonth,
        ScopeType::PartnerBill,
        ScopeType::Diff,
        ScopeType::OrderBill,
        ScopeType::AccountScope,
    ];

    pub fn code(self) -> i64 {
        match self {
            ScopeType::StationMonth => 10,
            ScopeType::PartnerBill => 20,
            ScopeType::Diff => 30,
            ScopeType::OrderBill => 40,
            ScopeType::AccountScope => 50,
        }
    }

    /// The name, also the business key's first segment.
    pub fn name(self) -> &'static str {
        match self {
            ScopeType::StationMonth => "STATION_MONTH",
            ScopeType::PartnerBill => "PARTNER_BILL",
            ScopeType::Diff => "DIFF",
            ScopeType::OrderBill => "ORDER_BILL",
            ScopeType::AccountScope => "ACCOUNT_SCOPE",
        }
    }

    /// The request field that carries this type's list of ids (the account scope has
    /// two: see [`AccountScope`]).
    fn list_field(self) -> &'static str {
        match self {
            ScopeType::StationMonth => "station_months",
            ScopeType::PartnerBill => "partner_bill_ids",
            ScopeType::Diff => "diff_ids",
            ScopeType::OrderBill => "order_bill_ids",
            ScopeType::AccountScope => "small_account_ids",
        }
    }

    /// `scope_type` as a code (`10`) or a name (`"STATION_MONTH"`).
    fn parse(v: &Value) -> Result<ScopeType, RefreshRequestError> {
        let found = ScopeType::ALL.into_iter().find(|t| match v {
            Value::Number(n) => n.as_i64() == Some(t.code()),
            Value::String(s) => s == t.name(),
            _ => false,
        });
        found.ok_or_else(|| RefreshRequestError::InvalidField {
            field: "scope_type".into(),
            value: v.to_string(),
            rule: "must be one of 10 STATION_MONTH, 20 PARTNER_BILL, 30 DIFF, 40 ORDER_BILL, 50 ACCOUNT_SCOPE",
        })
    }
}

impl fmt::Display for ScopeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.code())
    }
}

/// `mode`: which of the resolved bills a round recomputes. Fact-driven recomputation is
/// always [`RefreshMode::All`], because a paid bill can become unpaid again (R-BILL-8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefreshMode {
    /// Every resolved bill (the default, as the seed's `onlyRefreshUnfinished=false`).
    #[default]
    All,
    /// Only bills whose current status is in [`UNFINISHED_STATUSES`], evaluated at
    /// execution time, for every scope type (**[dev]**: the seed filtered the account
    /// scope only, §4.4).
    Unfinished,
}

impl RefreshMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshMode::All => "ALL",
            RefreshMode::Unfinished => "UNFINISHED",
        }
    }

    /// Whether a bill whose projected status is `status` is recomputed in this mode.
    /// A station-month never projected (`None`) is not finished, so UNFINISHED takes it.
    pub fn admits(self, status: Option<PaymentStatus>) -> bool {
        match (self, status) {
            (RefreshMode::All, _) | (RefreshMode::Unfinished, None) => true,
            (RefreshMode::Unfinished, Some(s)) => UNFINISHED_STATUSES.contains(&s),
        }
    }

    fn parse(s: &str) -> Result<RefreshMode, RefreshRequestError> {
        match s {
            "ALL" => Ok(RefreshMode::All),
            "UNFINISHED" => Ok(RefreshMode::Unfinished),
            _ => Err(RefreshRequestError::InvalidField {
                field: "mode".into(),
                value: s.into(),
                rule: "must be ALL or UNFINISHED",
            }),
        }
    }
}

// ---------------------------------------------------------------------------------
// Scopes: valid by construction.
// ---------------------------------------------------------------------------------

/// Exact-locating ids of a station-month scope (seed §4.5 "locator"): which diff,
/// partner bill and partner account the station-month is about. Every id present is
/// positive. Ordered field by field, so scopes sort and dedupe on all four ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locator {
    partner_org_id: Option<i64>,
    partner_bill_id: Option<i64>,
    partner_account_id: Option<i64>,
    diff_id: Option<i64>,
}

impl Locator {
    /// No locator: the station-month is found by station and month alone.
    pub const NONE: Locator = Locator {
        partner_org_id: None,
        partner_bill_id: None,
        partner_account_id: None,
        diff_id: None,
    };

    /// Every id present must be positive; `field` prefixes the error's field name.
    pub fn new(
        field: &str,
        partner_org_id: Option<i64>,
        partner_bill_id: Option<i64>,
        partner_account_id: Option<i64>,
        diff_id: Option<i64>,
    ) -> Result<Locator, RefreshRequestError> {
        let ids = [
            ("partner_org_id", partner_org_id),
            ("partner_bill_id", partner_bill_id),
            ("partner_account_id", partner_account_id),
            ("diff_id", diff_id),
        ];
        for (name, id) in ids {
            if let Some(id) = id {
                positive(&format!("{field}.{name}"), id)?;
            }
        }
        Ok(Locator {
            partner_org_id,
            partner_bill_id,
            partner_account_id,
            diff_id,
        })
    }

    pub fn partner_org_id(&self) -> Option<i64> {
        self.partner_org_id
    }

    pub fn partner_bill_id(&self) -> Option<i64> {
        self.partner_bill_id
    }

    pub fn partner_account_id(&self) -> Option<i64> {
        self.partner_account_id
    }

    pub fn diff_id(&self) -> Option<i64> {
        self.diff_id
    }

    /// Seed §4.5: any of diff, partner bill, partner account present enters the exact
    /// (locator) branch; the partner org alone does not.
    pub fn is_exact(&self) -> bool {
        self.diff_id.is_some()
            || self.partner_bill_id.is_some()
            || self.partner_account_id.is_some()
    }
}

/// One station-month to refresh, with its optional locator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StationMonthScope {
    pub station_month: StationMonth,
    pub locator: Locator,
}

/// A non-empty, sorted, deduplicated list of positive ids of one scope type, at most
/// [`REFRESH_SCOPES_MAX`] of them (counted after dedupe, seed §4.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdList(Vec<i64>);

impl IdList {
    pub fn new(
        field: &'static str,
        ids: impl IntoIterator<Item = i64>,
    ) -> Result<IdList, RefreshRequestError> {
        let mut list = Vec::new();
        for (i, id) in ids.into_iter().enumerate() {
            positive(&format!("{field}[{i}]"), id)?;
            list.push(id);
        }
        list.sort_unstable();
        list.dedup();
        if list.is_empty() {
            return Err(RefreshRequestError::EmptyScope { field });
        }
        too_many(field, list.len(), "distinct ids")?;
        Ok(IdList(list))
    }

    pub fn as_slice(&self) -> &[i64] {
        &self.0
    }
}

/// A non-empty, sorted list of station-month scopes, deduplicated on station, month
/// *and* the four locator ids (seed §4.4: the same station-month with another locator
/// is another scope). At most [`REFRESH_SCOPES_MAX`], counted as the input list length
/// before dedupe (seed §4.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StationMonthList(Vec<StationMonthScope>);

impl StationMonthList {
    pub fn new(scopes: Vec<StationMonthScope>) -> Result<StationMonthList, RefreshRequestError> {
        const FIELD: &str = "station_months";
        too_many(FIELD, scopes.len(), "list length")?;
        let mut scopes = scopes;
        scopes.sort_unstable();
        scopes.dedup();
        if scopes.is_empty() {
            return Err(RefreshRequestError::EmptyScope { field: FIELD });
        }
        Ok(StationMonthList(scopes))
    }

    pub fn as_slice(&self) -> &[StationMonthScope] {
        &self.0
    }

    /// The distinct station-months, in order (what the business key encodes).
    pub fn station_months(&self) -> Vec<StationMonth> {
        let mut sms: Vec<_> = self.0.iter().map(|s| s.station_month).collect();
        sms.dedup(); // sorted by station-month first: equal ones are adjacent
        sms
    }
}

/// `ACCOUNT_SCOPE(50)`: the bills of these accounts with `bill_yearmonth ≤ month_end`.
/// At least one side; at most [`REFRESH_SCOPES_MAX`] account ids on both sides together
/// (seed §4.3: accounts, not the station-months they expand to — hence the pages).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccountScope {
    small_account_ids: Vec<i64>,
    partner_account_ids: Vec<i64>,
    month_end: YearMonth,
}

impl AccountScope {
    pub fn new(
        small_account_ids: impl IntoIterator<Item = i64>,
        partner_account_ids: impl IntoIterator<Item = i64>,
        month_end: YearMonth,
    ) -> Result<AccountScope, RefreshRequestError> {
        let side = |field: &str, ids: &mut dyn Iterator<Item = i64>| {
            let mut list = Vec::new();
            for (i, id) in ids.enumerate() {
                positive(&format!("{field}[{i}]"), id)?;
                list.push(id);
            }
            list.sort_unstable();
            list.dedup();
            Ok::<_, RefreshRequestError>(list)
        };
        let small = side("small_account_ids", &mut small_account_ids.into_iter())?;
        let partner = side("partner_account_ids", &mut partner_account_ids.into_iter())?;
        if small.is_empty() && partner.is_empty() {
            return Err(RefreshRequestError::NoAccountSide);
        }
        too_many(
            "small_account_ids + partner_account_ids",
            small.len() + partner.len(),
            "small + partner account ids",
        )?;
        Ok(AccountScope {
            small_account_ids: small,
            partner_account_ids: partner,
            month_end,
        })
    }

    pub fn small_account_ids(&self) -> &[i64] {
        &self.small_account_ids
    }

    pub fn partner_account_ids(&self) -> &[i64] {
        &self.partner_account_ids
    }

    pub fn month_end(&self) -> YearMonth {
        self.month_end
    }
}

/// What a request refreshes, one variant per scope type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RefreshScope {
    StationMonths(StationMonthList),
    PartnerBills(IdList),
    Diffs(IdList),
    OrderBills(IdList),
    Accounts(AccountScope),
}

impl RefreshScope {
    pub fn scope_type(&self) -> ScopeType {
        match self {
            RefreshScope::StationMonths(_) => ScopeType::StationMonth,
            RefreshScope::PartnerBills(_) => ScopeType::PartnerBill,
            RefreshScope::Diffs(_) => ScopeType::Diff,
            RefreshScope::OrderBills(_) => ScopeType::OrderBill,
            RefreshScope::Accounts(_) => ScopeType::AccountScope,
        }
    }

    /// The normalised scope count: distinct scopes, distinct ids, or small + partner
    /// account ids. (The limit on station-months is checked on the input list length.)
    pub fn count(&self) -> usize {
        match self {
            RefreshScope::StationMonths(l) => l.0.len(),
            RefreshScope::PartnerBills(l)
            | RefreshScope::Diffs(l)
            | RefreshScope::OrderBills(l) => l.0.len(),
            RefreshScope::Accounts(a) => a.small_account_ids.len() + a.partner_account_ids.len(),
        }
    }

    /// The key's body, between `<TYPE>:` and `|MODE=`.
    fn key_body(&self) -> String {
        let ids = |l: &IdList| join(l.0.iter());
        match self {
            RefreshScope::StationMonths(l) => join(l.station_months().iter()),
            RefreshScope::PartnerBills(l)
            | RefreshScope::Diffs(l)
            | RefreshScope::OrderBills(l) => ids(l),
            RefreshScope::Accounts(a) => {
                let mut parts = Vec::new();
                if !a.small_account_ids.is_empty() {
                    parts.push(format!("SMALL={}", join(a.small_account_ids.iter())));
                }
                if !a.partner_account_ids.is_empty() {
                    parts.push(format!("PARTNER={}", join(a.partner_account_ids.iter())));
                }
                parts.push(format!("MONTH_END={}", a.month_end));
                parts.join("|")
            }
        }
    }
}

fn join<T: fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

fn positive(field: &str, id: i64) -> Result<(), RefreshRequestError> {
    if id > 0 {
        return Ok(());
    }
    Err(RefreshRequestError::InvalidField {
        field: field.to_owned(),
        value: id.to_string(),
        rule: "must be a positive id",
    })
}

fn too_many(
    field: &'static str,
    count: usize,
    counted_as: &'static str,
) -> Result<(), RefreshRequestError> {
    if count <= REFRESH_SCOPES_MAX {
        return Ok(());
    }
    Err(RefreshRequestError::TooManyScopes {
        field,
        count,
        counted_as,
        max: REFRESH_SCOPES_MAX,
    })
}

// ---------------------------------------------------------------------------------
// The request.
// ---------------------------------------------------------------------------------

/// A refresh request that passed every submission rule: within the limits, scopes
/// normalised, ids positive, months legal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshRequest {
    scope: RefreshScope,
    mode: RefreshMode,
    trigger_sources: BTreeSet<TriggerSource>,
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

    /// The request as `task_data` JSON: [`RefreshRequest::parse`] reads it back equal.
    pub fn to_task_data(&self) -> String {
        let mut body = Map::new();
        body.insert("scope_type".into(), json!(self.scope.scope_type().name()));
        match &self.scope {
            RefreshScope::StationMonths(l) => {
                let list: Vec<Value> = l.0.iter().map(station_month_json).collect();
                body.insert("station_months".into(), Value::Array(list));
            }
            RefreshScope::PartnerBills(l) => {
                body.insert("partner_bill_ids".into(), json!(l.0));
            }
            RefreshScope::Diffs(l) => {
                body.insert("diff_ids".into(), json!(l.0));
            }
            RefreshScope::OrderBills(l) => {
                body.insert("order_bill_ids".into(), json!(l.0));
            }
            RefreshScope::Accounts(a) => {
                body.insert("small_account_ids".into(), json!(a.small_account_ids));
                body.insert("partner_account_ids".into(), json!(a.partner_account_ids));
                body.insert("month_end".into(), json!(a.month_end.to_string()));
            }
        }
        body.insert("mode".into(), json!(self.mode.as_str()));
        let sources: Vec<Value> = self
            .trigger_sources
            .iter()
            // A unit enum with serde names always serialises; `Null` is unreachable (and
            // would be refused by the re-parse of a merge, never stored silently).
            .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
            .collect();
        body.insert("trigger_sources".into(), Value::Array(sources));
        Value::Object(body).to_string()
    }

    /// Parse a request's `task_data`, in the seed's order (§4.3): size in UTF-8 bytes,
    /// JSON, node count, then the scope fields, then the scope count.
    pub fn parse(task_data: &str) -> Result<RefreshRequest, RefreshRequestError> {
        if task_data.len() > REFRESH_TASK_DATA_BYTES_MAX {
            return Err(RefreshRequestError::TooManyBytes {
                bytes: task_data.len(),
                max: REFRESH_TASK_DATA_BYTES_MAX,
            });
        }
        let value: Value = serde_json::from_str(task_data).map_err(|e| json_error(&e))?;
        let nodes = json_nodes(&value);
        if nodes > REFRESH_TASK_DATA_NODES_MAX {
            return Err(RefreshRequestError::TooManyNodes {
                nodes,
                max: REFRESH_TASK_DATA_NODES_MAX,
            });
        }
        let dto: RequestDto = serde_json::from_value(value).map_err(|e| json_error(&e))?;
        dto.into_request()
    }
}

fn station_month_json(s: &StationMonthScope) -> Value {
    let mut o = Map::new();
    o.insert("station_id".into(), json!(s.station_month.station_id));
    o.insert(
        "bill_month".into(),
        json!(s.station_month.month.to_string()),
    );
    let l = s.locator;
    let ids = [
        ("partner_org_id", l.partner_org_id),
        ("partner_bill_id", l.partner_bill_id),
        ("partner_account_id", l.partner_account_id),
        ("diff_id", l.diff_id),
    ];
    for (name, id) in ids {
        if let Some(id) = id {
            o.insert(name.into(), json!(id));
        }
    }
    Value::Object(o)
}

/// Every object, array and scalar counts one (as `jobs::json_nodes`).
fn json_nodes(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(json_nodes).sum::<usize>(),
        Value::Object(o) => 1 + o.values().map(json_nodes).sum::<usize>(),
        _ => 1,
    }
}

fn json_error(e: &serde_json::Error) -> RefreshRequestError {
    RefreshRequestError::Json {
        message: e.to_string(),
    }
}

/// The request JSON as submitted. Unknown fields are refused, so a typo is an error,
/// not a silently ignored scope.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestDto {
    scope_type: Value,
    station_months: Option<Vec<StationMonthDto>>,
    partner_bill_ids: Option<Vec<i64>>,
    diff_ids: Option<Vec<i64>>,
    order_bill_ids: Option<Vec<i64>>,
    small_account_ids: Option<Vec<i64>>,
    partner_account_ids: Option<Vec<i64>>,
    /// `yyyymm`, account scope only.
    month_end: Option<String>,
    /// `ALL` (default) or `UNFINISHED`.
    mode: Option<String>,
    trigger_sources: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StationMonthDto {
    station_id: Option<i64>,
    /// `yyyymm`.
    bill_month: Option<String>,
    partner_org_id: Option<i64>,
    partner_bill_id: Option<i64>,
    partner_account_id: Option<i64>,
    diff_id: Option<i64>,
}

impl RequestDto {
    fn into_request(self) -> Result<RefreshRequest, RefreshRequestError> {
        let scope_type = ScopeType::parse(&self.scope_type)?;
        self.refuse_other_fields(scope_type)?;
        let mode = self
            .mode
            .as_deref()
            .map_or(Ok(RefreshMode::All), RefreshMode::parse)?;
        let trigger_sources = parse_trigger_sources(self.trigger_sources.unwrap_or_default())?;
        let missing = |field: &str| RefreshRequestError::MissingField {
            field: field.to_owned(),
            scope_type,
        };
        let ids = |list: Option<Vec<i64>>| list.ok_or_else(|| missing(scope_type.list_field()));
        let scope = match scope_type {
            ScopeType::StationMonth => {
                let list = self
                    .station_months
                    .ok_or_else(|| missing("station_months"))?;
                // The limit counts the input list length: check it before parsing items.
                too_many("station_months", list.len(), "list length")?;
                let scopes = list
                    .into_iter()
                    .enumerate()
                    .map(|(i, dto)| dto.into_scope(i))
                    .collect::<Result<Vec<_>, _>>()?;
                RefreshScope::StationMonths(StationMonthList::new(scopes)?)
            }
            ScopeType::PartnerBill => RefreshScope::PartnerBills(IdList::new(
                "partner_bill_ids",
                ids(self.partner_bill_ids)?,
            )?),
            ScopeType::Diff => RefreshScope::Diffs(IdList::new("diff_ids", ids(self.diff_ids)?)?),
            ScopeType::OrderBill => {
                RefreshScope::OrderBills(IdList::new("order_bill_ids", ids(self.order_bill_ids)?)?)
            }
            ScopeType::AccountScope => {
                let month_end = self.month_end.ok_or_else(|| missing("month_end"))?;
                let month_end = YearMonth::parse(&month_end).map_err(|_| {
                    RefreshRequestError::InvalidField {
                        field: "month_end".into(),
                        value: month_end.clone(),
                        rule: "must be a legal yyyymm month",
                    }
                })?;
                RefreshScope::Accounts(AccountScope::new(
                    self.small_account_ids.unwrap_or_default(),
                    self.partner_account_ids.unwrap_or_default(),
                    month_end,
                )?)
            }
        };
        Ok(RefreshRequest {
            scope,
            mode,
            trigger_sources,
        })
    }

    /// A field of another scope type is an error, not ignored: the request means
    /// something else than its sender thinks.
    fn refuse_other_fields(&self, scope_type: ScopeType) -> Result<(), RefreshRequestError> {
        let present = [
            (
                "station_months",
                ScopeType::StationMonth,
                self.station_months.is_some(),
            ),
            (
                "partner_bill_ids",
                ScopeType::PartnerBill,
                self.partner_bill_ids.is_some(),
            ),
            ("diff_ids", ScopeType::Diff, self.diff_ids.is_some()),
            (
                "order_bill_ids",
                ScopeType::OrderBill,
                self.order_bill_ids.is_some(),
            ),
            (
                "small_account_ids",
                ScopeType::AccountScope,
                self.small_account_ids.is_some(),
            ),
            (
                "partner_account_ids",
                ScopeType::AccountScope,
                self.partner_account_ids.is_some(),
            ),
            (
                "month_end",
                ScopeType::AccountScope,
                self.month_end.is_some(),
            ),
        ];
        match present
            .into_iter()
            .find(|(_, owner, set)| *set && *owner != scope_type)
        {
            Some((field, _, _)) => Err(RefreshRequestError::FieldNotAllowed { field, scope_type }),
            None => Ok(()),
        }
    }
}

impl StationMonthDto {
    fn into_scope(self, i: usize) -> Result<StationMonthScope, RefreshRequestError> {
        let field = format!("station_months[{i}]");
        let station_id = self
            .station_id
            .ok_or_else(|| RefreshRequestError::MissingField {
                field: format!("{field}.station_id"),
                scope_type: ScopeType::StationMonth,
            })?;
        positive(&format!("{field}.station_id"), station_id)?;
        let bill_month = self
            .bill_month
            .ok_or_else(|| RefreshRequestError::MissingField {
                field: format!("{field}.bill_month"),
                scope_type: ScopeType::StationMonth,
            })?;
        let month =
            YearMonth::parse(&bill_month).map_err(|_| RefreshRequestError::InvalidField {
                field: format!("{field}.bill_month"),
                value: bill_month.clone(),
                rule: "must be a legal yyyymm month",
            })?;
        let locator = Locator::new(
            &field,
            self.partner_org_id,
            self.partner_bill_id,
            self.partner_account_id,
            self.diff_id,
        )?;
        Ok(StationMonthScope {
            station_month: StationMonth { station_id, month },
            locator,
        })
    }
}

fn parse_trigger_sources(
    names: Vec<String>,
) -> Result<BTreeSet<TriggerSource>, RefreshRequestError> {
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            serde_json::from_value(Value::String(name.clone())).map_err(|_| {
                RefreshRequestError::InvalidField {
                    field: format!("trigger_sources[{i}]"),
                    value: name,
                    rule: "must be a trigger source of the event contract (e.g. PAYMENT_IMPORT_EFFECTIVE, MANUAL)",
                }
            })
        })
        .collect()
}

/// Why a refresh request was refused at submission (or, for a stored task, why its
/// `task_data` no longer passes). Each names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefreshRequestError {
    #[error("task_data: {bytes} UTF-8 bytes, over the limit of {max} (R-BILL-8)")]
    TooManyBytes { bytes: usize, max: usize },
    #[error("task_data: {nodes} JSON nodes, over the limit of {max} (R-BILL-8)")]
    TooManyNodes { nodes: usize, max: usize },
    #[error("{field}: {count} scopes counted as {counted_as}, over the limit of {max} (R-BILL-8)")]
    TooManyScopes {
        field: &'static str,
        count: usize,
        counted_as: &'static str,
        max: usize,
    },
    #[error("task_data: not a refresh request: {message}")]
    Json { message: String },
    #[error("{field}: required with scope_type {scope_type}")]
    MissingField {
        field: String,
        scope_type: ScopeType,
    },
    #[error("{field}: not allowed with scope_type {scope_type}")]
    FieldNotAllowed {
        field: &'static str,
        scope_type: ScopeType,
    },
    #[error("{field}: empty; a refresh request needs at least one scope")]
    EmptyScope { field: &'static str },
    #[error("{field}: `{value}` {rule}")]
    InvalidField {
        field: String,
        value: String,
        rule: &'static str,
    },
    #[error(
        "small_account_ids, partner_account_ids: ACCOUNT_SCOPE needs at least one account on one side"
    )]
    NoAccountSide,
    #[error("{field}: stored `{stored}` differs from `{recomputed}` recomputed from task_data")]
    IdentityMismatch {
        field: &'static str,
        stored: String,
        recomputed: String,
    },
    #[error("business_key: a resubmit of `{resubmitted}` cannot merge into `{existing}`")]
    KeyMismatch {
        existing: String,
        resubmitted: String,
    },
}

impl RefreshRequestError {
    /// Oversize (bytes, nodes, scopes): retrying cannot help (seed §4.3 stopped its
    /// retries; factledger refuses them at submission).
    pub fn is_oversize(&self) -> bool {
        matches!(
            self,
            RefreshRequestError::TooManyBytes { .. }
                | RefreshRequestError::TooManyNodes { .. }
                | RefreshRequestError::TooManyScopes { .. }
        )
    }
}

// ---------------------------------------------------------------------------------
// Resolution to station-months, against plain data a resolver loads.
// ---------------------------------------------------------------------------------

/// A partner bill as resolution reads it (`fi_customer_bill_partner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartnerBillRef {
    pub id: i64,
    pub partner_account_id: i64,
    pub month: YearMonth,
}

/// A partner account (reference data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartnerAccountRef {
    pub id: i64,
    pub partner_org_id: i64,
    /// `None`: recorded as unmapped — resolution through it is an error.
    pub platform_station_id: Option<i64>,
}

/// A difference-ledger row (`fi_monthly_income_difference`): its station id and share
/// month are the station-month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffRef {
    pub id: i64,
    pub station_month: StationMonth,
    /// `None`: recorded without a partner bill (legal).
    pub partner_bill_id: Option<i64>,
}

/// A payment order line (`order_bill`) with the publish identity it was listed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderBillRef {
    pub id: i64,
    pub order_id: i64,
    pub station_month: StationMonth,
    pub publish_version: i64,
    pub submit_round: i64,
    pub deleted: bool,
}

/// A payment order master with its current publish identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderRef {
    pub id: i64,
    /// `build_status = PUBLISHED`.
    pub published: bool,
    pub publish_version: i64,
    pub submit_round: i64,
    pub deleted: bool,
}

/// `PARTNER_BILL(20)`: partner bill → its partner account → `platform_station_id`
/// (unmapped → error) → exactly one diff of the partner bill (none or several → error).
/// The station-month is the platform station and the partner bill's month; the diff
/// must be of that station-month. `diffs` are the diffs whose partner bill is this one.
pub fn resolve_partner_bill(
    partner_bill_id: i64,
    bill: Option<&PartnerBillRef>,
    account: Option<&PartnerAccountRef>,
    diffs: &[DiffRef],
) -> Result<StationMonthScope, ScopeResolveError> {
    let bill = bill
        .filter(|b| b.id == partner_bill_id)
        .ok_or(ScopeResolveError::PartnerBillNotFound { partner_bill_id })?;
    let account = partner_account_of(bill, account)?;
    let station_id =
        account
            .platform_station_id
            .ok_or(ScopeResolveError::PlatformStationMissing {
                partner_account_id: account.id,
            })?;
    let station_month = StationMonth {
        station_id,
        month: bill.month,
    };
    let diff = unique_diff(partner_bill_id, diffs)?;
    if diff.station_month != station_month {
        return Err(ScopeResolveError::LocatorInconsistent {
            fields: "partner_bill_id, diff_id",
            detail: format!(
                "partner bill {partner_bill_id} resolves to {station_month}, its diff {} is of {}",
                diff.id, diff.station_month
            ),
        });
    }
    Ok(StationMonthScope {
        station_month,
        locator: full_locator(Some(account), Some(bill.id), Some(diff.id)),
    })
}

/// `DIFF(30)`: the diff's recorded station id and share month, with its real locator
/// fields — the partner bill and account when it has a partner bill (`partner`, loaded
/// through `diff.partner_bill_id`), the diff alone when it has none (legal).
pub fn resolve_diff(
    diff_id: i64,
    diff: Option<&DiffRef>,
    partner: Option<(&PartnerBillRef, &PartnerAccountRef)>,
) -> Result<StationMonthScope, ScopeResolveError> {
    let diff = diff
        .filter(|d| d.id == diff_id)
        .ok_or(ScopeResolveError::DiffNotFound { diff_id })?;
    let Some(partner_bill_id) = diff.partner_bill_id else {
        return Ok(StationMonthScope {
            station_month: diff.station_month,
            locator: full_locator(None, None, Some(diff.id)),
        });
    };
    let (bill, account) = partner
        .filter(|(b, _)| b.id == partner_bill_id)
        .ok_or(ScopeResolveError::PartnerBillNotFound { partner_bill_id })?;
    let account = partner_account_of(bill, Some(account))?;
    Ok(StationMonthScope {
        station_month: diff.station_month,
        locator: full_locator(Some(account), Some(bill.id), Some(diff.id)),
    })
}

/// `ORDER_BILL(40)`: the line must belong to a PUBLISHED master, carry the master's
/// current publish version and submit round, and neither may be deleted.
pub fn resolve_order_bill(
    order_bill_id: i64,
    line: Option<&OrderBillRef>,
    order: Option<&OrderRef>,
) -> Result<StationMonth, ScopeResolveError> {
    use ScopeResolveError as E;
    let line = line
        .filter(|l| l.id == order_bill_id)
        .ok_or(E::OrderBillNotFound { order_bill_id })?;
    if line.deleted {
        return Err(E::OrderBillDeleted { order_bill_id });
    }
    let order_id = line.order_id;
    let order = order.filter(|o| o.id == order_id).ok_or(E::OrderNotFound {
        order_bill_id,
        order_id,
    })?;
    if order.deleted {
        return Err(E::OrderDeleted {
            order_bill_id,
            order_id,
        });
    }
    if !order.published {
        return Err(E::OrderNotPublished {
            order_bill_id,
            order_id,
        });
    }
    if (line.publish_version, line.submit_round) != (order.publish_version, order.submit_round) {
        return Err(E::NotCurrentPublication {
            order_bill_id,
            order_id,
            line_identity: (line.publish_version, line.submit_round),
            current_identity: (order.publish_version, order.submit_round),
        });
    }
    Ok(line.station_month)
}

/// What a resolver loads to check a station-month scope's locator: the diff named by
/// `diff_id`; the partner bill named by `partner_bill_id`, else the diff's; the partner
/// account named by `partner_account_id`, else the bill's; and every diff of that
/// partner bill (for a partner bill given without its diff).
#[derive(Debug, Clone, Copy, Default)]
pub struct LocatorFacts<'a> {
    pub diff: Option<&'a DiffRef>,
    pub partner_bill: Option<&'a PartnerBillRef>,
    pub partner_account: Option<&'a PartnerAccountRef>,
    pub diffs_of_partner_bill: &'a [DiffRef],
}

/// Check a station-month scope's locator at submission (R-BILL-8 **[dev]**, seed §9.5)
/// and complete it with the ids it implies. A scope without exact ids passes as it is.
/// Rules, first failure wins:
/// - L1 a given diff exists and is of the scope's station-month;
/// - L2 a given partner bill is the given diff's partner bill;
/// - L3 the partner bill (given or the diff's) exists, is of the scope's month, and —
///   given without a diff — has exactly one diff, of the scope's station-month;
/// - L4 a given partner account is the partner bill's account;
/// - L5 the partner account (given or the bill's) exists and maps to the scope's
///   station as its platform station (unmapped → error);
/// - L6 a given partner org is the partner account's org.
///
/// A diff recorded without a partner bill is legal: the locator then holds the diff
/// (and any account given, checked by L5).
pub fn check_locator(
    scope: &StationMonthScope,
    facts: &LocatorFacts,
) -> Result<StationMonthScope, ScopeResolveError> {
    use ScopeResolveError as E;
    let sm = scope.station_month;
    let given = scope.locator;
    if !given.is_exact() {
        return Ok(*scope);
    }
    let inconsistent =
        |fields: &'static str, detail: String| E::LocatorInconsistent { fields, detail };
    // L1
    let mut diff = match given.diff_id {
        None => None,
        Some(diff_id) => {
            let d = facts
                .diff
                .filter(|d| d.id == diff_id)
                .ok_or(E::DiffNotFound { diff_id })?;
            if d.station_month != sm {
                return Err(inconsistent(
                    "diff_id, station_id, bill_month",
                    format!("diff {diff_id} is of {}, not {sm}", d.station_month),
                ));
            }
            Some(d)
        }
    };
    // L2
    if let (Some(d), Some(pb)) = (diff, given.partner_bill_id) {
        if d.partner_bill_id != Some(pb) {
            return Err(inconsistent(
                "diff_id, partner_bill_id",
                format!(
                    "diff {} belongs to partner bill {:?}, not {pb}",
                    d.id, d.partner_bill_id
                ),
            ));
        }
    }
    // L3
    let partner_bill_id = given
        .partner_bill_id
        .or(diff.and_then(|d| d.partner_bill_id));
    let bill = match partner_bill_id {
        None => None,
        Some(partner_bill_id) => {
            let b = facts
                .partner_bill
                .filter(|b| b.id == partner_bill_id)
                .ok_or(E::PartnerBillNotFound { partner_bill_id })?;
            if b.month != sm.month {
                return Err(inconsistent(
                    "partner_bill_id, bill_month",
                    format!(
                        "partner bill {partner_bill_id} is of {}, not {}",
                        b.month, sm.month
                    ),
                ));
            }
            if diff.is_none() {
                let d = unique_diff(partner_bill_id, facts.diffs_of_partner_bill)?;
                if d.station_month != sm {
                    return Err(inconsistent(
                        "partner_bill_id, station_id, bill_month",
                        format!(
                            "partner bill {partner_bill_id}'s diff {} is of {}, not {sm}",
                            d.id, d.station_month
                        ),
                    ));
                }
                diff = Some(d);
            }
            Some(b)
        }
    };
    // L4
    if let (Some(b), Some(pa)) = (bill, given.partner_account_id) {
        if b.partner_account_id != pa {
            return Err(inconsistent(
                "partner_bill_id, partner_account_id",
                format!(
                    "partner bill {} belongs to partner account {}, not {pa}",
                    b.id, b.partner_account_id
                ),
            ));
        }
    }
    // L5
    let account_id = given
        .partner_account_id
        .or(bill.map(|b| b.partner_account_id));
    let account = match account_id {
        None => None,
        Some(partner_account_id) => {
            let a = facts
                .partner_account
                .filter(|a| a.id == partner_account_id)
                .ok_or(E::PartnerAccountNotFound { partner_account_id })?;
            let platform = a
                .platform_station_id
                .ok_or(E::PlatformStationMissing { partner_account_id })?;
            if platform != sm.station_id {
                return Err(inconsistent(
                    "partner_account_id, station_id",
                    format!(
                        "partner account {partner_account_id} maps to platform station {platform}, not {}",
                        sm.station_id
                    ),
                ));
            }
            Some(a)
        }
    };
    // L6
    if let (Some(a), Some(org)) = (account, given.partner_org_id) {
        if a.partner_org_id != org {
            return Err(inconsistent(
                "partner_account_id, partner_org_id",
                format!(
                    "partner account {} belongs to partner org {}, not {org}",
                    a.id, a.partner_org_id
                ),
            ));
        }
    }
    let mut locator = full_locator(account, bill.map(|b| b.id), diff.map(|d| d.id));
    locator.partner_org_id = locator.partner_org_id.or(given.partner_org_id);
    Ok(StationMonthScope {
        station_month: sm,
        locator,
    })
}

fn partner_account_of<'a>(
    bill: &PartnerBillRef,
    account: Option<&'a PartnerAccountRef>,
) -> Result<&'a PartnerAccountRef, ScopeResolveError> {
    account.filter(|a| a.id == bill.partner_account_id).ok_or(
        ScopeResolveError::PartnerAccountNotFound {
            partner_account_id: bill.partner_account_id,
        },
    )
}

fn unique_diff(partner_bill_id: i64, diffs: &[DiffRef]) -> Result<&DiffRef, ScopeResolveError> {
    let found: Vec<&DiffRef> = diffs
        .iter()
        .filter(|d| d.partner_bill_id == Some(partner_bill_id))
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(ScopeResolveError::PartnerBillWithoutDiff { partner_bill_id }),
        _ => Err(ScopeResolveError::PartnerBillWithSeveralDiffs {
            partner_bill_id,
            diff_ids: found.iter().map(|d| d.id).collect(),
        }),
    }
}

fn full_locator(
    account: Option<&PartnerAccountRef>,
    partner_bill_id: Option<i64>,
    diff_id: Option<i64>,
) -> Locator {
    Locator {
        partner_org_id: account.map(|a| a.partner_org_id),
        partner_bill_id,
        partner_account_id: account.map(|a| a.id),
        diff_id,
    }
}

/// A bill an account scope can expand to: a small bill (by its customer account) or a
/// partner bill (by its partner account), with the station-month's projected status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountBillRef {
    pub station_month: StationMonth,
    pub small_account_id: Option<i64>,
    pub partner_account_id: Option<i64>,
    /// The projected `payment_status`, read at execution time (`None`: never projected).
    pub payment_status: Option<PaymentStatus>,
}

/// One page of an account scope's station-months.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountScopePage {
    /// Sorted, distinct, at most [`ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX`].
    pub station_months: Vec<StationMonth>,
    /// Where the next page starts (exclusive); `None` when this is the last page. Saved
    /// with the page's progress, so a retry resumes after it.
    pub next_cursor: Option<StationMonth>,
}

/// `ACCOUNT_SCOPE(50)` expansion, one page: the station-months of the scope's accounts'
/// bills with month ≤ `month_end`, admitted by `mode` (status evaluated now), after
/// `cursor`, in order, at most [`ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX`]. A DB resolver
/// does the same with `WHERE (station_id, month) > cursor ORDER BY … LIMIT 101`.
pub fn account_scope_page(
    scope: &AccountScope,
    mode: RefreshMode,
    bills: &[AccountBillRef],
    cursor: Option<StationMonth>,
) -> AccountScopePage {
    let in_scope = |b: &&AccountBillRef| {
        let small = b
            .small_account_id
            .is_some_and(|id| scope.small_account_ids.binary_search(&id).is_ok());
        let partner = b
            .partner_account_id
            .is_some_and(|id| scope.partner_account_ids.binary_search(&id).is_ok());
        (small || partner)
            && b.station_month.month <= scope.month_end
            && after_cursor(cursor, b.station_month)
            && mode.admits(b.payment_status)
    };
    let all: BTreeSet<StationMonth> = bills
        .iter()
        .filter(in_scope)
        .map(|b| b.station_month)
        .collect();
    let station_months: Vec<_> = all
        .iter()
        .copied()
        .take(ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX)
        .collect();
    let next_cursor = (all.len() > ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX)
        .then(|| station_months.last().copied())
        .flatten();
    AccountScopePage {
        station_months,
        next_cursor,
    }
}

/// Whether `station_month` comes after the page cursor (every one does without a
/// cursor). A `match`, not `Option::is_none_or`: that needs Rust 1.82, the workspace
/// declares 1.80.
fn after_cursor(cursor: Option<StationMonth>, station_month: StationMonth) -> bool {
    match cursor {
        None => true,
        Some(c) => station_month > c,
    }
}

/// Why a scope did not resolve to station-months. At submission (locators) the request
/// is refused; at execution the round fails on that scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeResolveError {
    #[error("partner_bill_id {partner_bill_id}: no such partner bill")]
    PartnerBillNotFound { partner_bill_id: i64 },
    #[error("partner_account_id {partner_account_id}: no such partner account")]
    PartnerAccountNotFound { partner_account_id: i64 },
    #[error(
        "partner_account_id {partner_account_id}: no platform_station_id mapped (R-BILL-8 PARTNER_BILL)"
    )]
    PlatformStationMissing { partner_account_id: i64 },
    #[error(
        "partner_bill_id {partner_bill_id}: no diff has this partner bill (exactly one needed)"
    )]
    PartnerBillWithoutDiff { partner_bill_id: i64 },
    #[error(
        "partner_bill_id {partner_bill_id}: diffs {diff_ids:?} have this partner bill (exactly one needed)"
    )]
    PartnerBillWithSeveralDiffs {
        partner_bill_id: i64,
        diff_ids: Vec<i64>,
    },
    #[error("diff_id {diff_id}: no such diff")]
    DiffNotFound { diff_id: i64 },
    #[error("order_bill_id {order_bill_id}: no such payment order line")]
    OrderBillNotFound { order_bill_id: i64 },
    #[error("order_bill_id {order_bill_id}: the line is deleted")]
    OrderBillDeleted { order_bill_id: i64 },
    #[error("order_bill_id {order_bill_id}: its payment order {order_id} does not exist")]
    OrderNotFound { order_bill_id: i64, order_id: i64 },
    #[error("order_bill_id {order_bill_id}: its payment order {order_id} is deleted")]
    OrderDeleted { order_bill_id: i64, order_id: i64 },
    #[error("order_bill_id {order_bill_id}: its payment order {order_id} is not PUBLISHED")]
    OrderNotPublished { order_bill_id: i64, order_id: i64 },
    #[error(
        "order_bill_id {order_bill_id}: listed under publish version/submit round {line_identity:?}, payment order {order_id} is at {current_identity:?}"
    )]
    NotCurrentPublication {
        order_bill_id: i64,
        order_id: i64,
        line_identity: (i64, i64),
        current_identity: (i64, i64),
    },
    #[error("locator {fields}: ids do not belong together: {detail}")]
    LocatorInconsistent {
        fields: &'static str,
        detail: String,
    },
}

#[cfg(test)]
mod tests;
