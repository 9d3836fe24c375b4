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
//!
//! One concept per file: `limits` (the submission limits and fixed codes), `kind`
//! (scope type and mode), `scope` (the scopes, valid by construction), `request` (the typed request, its business key and the resubmit
//! merge), `task_data` (the request's JSON form, parsed and written), `resolve` (scope
//! → station-months against loaded data, and the account scope's pages), `locator`
//! (the submission check of a station-month scope's locator) and `error` (why a
//! request is refused, why a scope does not resolve). Every public name is re-exported
//! here, so callers write `bill::refresh::…`.

mod error;
mod kind;
mod limits;
mod locator;
mod request;
mod resolve;
mod scope;
mod task_data;

pub use error::{RefreshRequestError, ScopeResolveError};
pub use kind::{RefreshMode, ScopeType};
pub use limits::{
    ACCOUNT_SCOPE_PAGE_STATION_MONTHS_MAX, BUSINESS_KEY_STORED_CHARS_MAX, REFRESH_SCOPES_MAX,
    REFRESH_TASK_DATA_BYTES_MAX, REFRESH_TASK_DATA_NODES_MAX, STORED_KEY_DIGEST_PREFIX,
    TASK_CODE_PREFIX, UNFINISHED_STATUSES,
};
pub use locator::{check_locator, LocatorFacts};
pub use request::{BusinessKey, RefreshRequest};
pub use resolve::{
    account_scope_page, resolve_diff, resolve_order_bill, resolve_partner_bill, AccountBillRef,
    AccountScopePage, DiffRef, OrderBillRef, OrderRef, PartnerAccountRef, PartnerBillRef,
};
pub use scope::{AccountScope, IdList, Locator, RefreshScope, StationMonthList, StationMonthScope};

#[cfg(test)]
mod tests;
