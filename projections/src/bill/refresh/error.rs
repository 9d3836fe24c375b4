//! The refusals: why a refresh request was refused at submission
//! ([`RefreshRequestError`]) and why a scope did not resolve to station-months
//! ([`ScopeResolveError`]). Each names the field and the rule.

use super::kind::ScopeType;

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
