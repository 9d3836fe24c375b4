//! The limits and fixed codes of refresh requests: what one submission may hold
//! (bytes, JSON nodes, scopes), how business keys and task codes are spelled, how far
//! an account scope expands per page, and which statuses `MODE=UNFINISHED` takes.

use crate::bill::PaymentStatus;

/// A request's `task_data` is at most this many UTF-8 bytes (seed §4.3: bytes, not
/// characters). Bounds what one submission can make the worker parse and hold.
pub const REFRESH_TASK_DATA_BYTES_MAX: usize = 16_384;
/// At most this many JSON nodes (every object, array and scalar; keys are not nodes,
/// as the job engine's `json_nodes`). 16 KB of `[1,1,1,…]` is ~8,000 nodes: the byte
/// limit alone does not bound the parse.
pub const REFRESH_TASK_DATA_NODES_MAX: usize = 1_200;
/// At most this many scopes per request, counted per scope type (see
/// `RefreshScope::count`): one task must stay a bounded unit of work.
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
