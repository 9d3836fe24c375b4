//! The tables of the paid-services projection.

use crate::table::{ColType, Column, TableDef};

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

use ColType::{Int, OptInt, OptText, Text};

pub const SERVICE_ORDERS: TableDef = TableDef {
    name: "service_orders",
    key: &["order_no"],
    columns: &[
        col("order_no", Text),
        col("user_id", Int),
        col("business_type", Text),
        col("artist_id", OptInt),
        col("booking_no", OptText),
        col("candy", OptInt),
        col("days", OptInt),
        col("method", Text),
        col("amount", Int),
        col("currency", OptText),
        col("status", Int),
        col("status_name", Text),
        col("transaction_no", OptText),
        col("created_at", Text),
        col("timeout_at", Text),
        col("paid_at", OptText),
        col("delivered_at", OptText),
        col("closed_at", OptText),
        col("refund_no", OptText),
        col("updated_at", Text),
        col("last_position", Int),
    ],
};

/// The seed's `tieup_user_recharge`: a recharge order's candy, closed with its order.
pub const CANDY_RECHARGES: TableDef = TableDef {
    name: "candy_recharges",
    key: &["order_no"],
    columns: &[
        col("order_no", Text),
        col("user_id", Int),
        col("candy", Int),
        col("status", Text),
        col("updated_at", Text),
    ],
};

/// The seed's `tieup_payment_transaction`: every gateway payment of an order.
pub const PAYMENT_TRANSACTIONS: TableDef = TableDef {
    name: "payment_transactions",
    key: &["order_no", "transaction_no"],
    columns: &[
        col("order_no", Text),
        col("transaction_no", Text),
        col("method", Text),
        col("account_id", Text),
        col("amount_minor", Int),
        col("currency", Text),
        col("status", Text),
        col("refund_no", OptText),
        col("paid_at", Text),
        col("updated_at", Text),
    ],
};

pub const CANDY_ACCOUNTS: TableDef = TableDef {
    name: "candy_accounts",
    key: &["user_id"],
    columns: &[
        col("user_id", Int),
        col("balance", Int),
        col("held", Int),
        col("updated_at", Text),
        col("last_position", Int),
    ],
};

pub const SUBSCRIPTIONS: TableDef = TableDef {
    name: "subscriptions",
    key: &["artist_id", "fan_user_id"],
    columns: &[
        col("artist_id", Int),
        col("fan_user_id", Int),
        col("status", Int),
        col("expires_at", Text),
        col("last_order_no", Text),
        col("updated_at", Text),
        col("last_position", Int),
    ],
};

/// One row per grant (order), with whether its subscription message was queued.
pub const SUBSCRIPTION_GRANTS: TableDef = TableDef {
    name: "subscription_grants",
    key: &["order_no"],
    columns: &[
        col("order_no", Text),
        col("artist_id", Int),
        col("fan_user_id", Int),
        col("period_start", Text),
        col("expires_at", Text),
        col("renewal", Int),
        col("granted_at", Text),
        col("message_queued", Int),
    ],
};

pub const BOOKINGS: TableDef = TableDef {
    name: "bookings",
    key: &["booking_no"],
    columns: &[
        col("booking_no", Text),
        col("order_no", Text),
        col("fan_user_id", Int),
        col("artist_id", Int),
        col("status", Int),
        col("status_name", Text),
        col("start_at", Text),
        col("minutes", Int),
        col("price_candy", Int),
        col("fan_joined_at", OptText),
        col("artist_joined_at", OptText),
        col("started_at", OptText),
        col("ended_at", OptText),
        col("duration_s", OptInt),
        col("abnormal", Int),
        col("moderation_reason", OptText),
        col("no_show_checked_at", OptText),
        col("hold_state", Text),
        col("refund_no", OptText),
        col("updated_at", Text),
        col("last_position", Int),
    ],
};

pub const REFUNDS: TableDef = TableDef {
    name: "refunds",
    key: &["refund_no"],
    columns: &[
        col("refund_no", Text),
        col("order_no", Text),
        col("booking_no", OptText),
        col("business", Text),
        col("method", Text),
        col("transaction_no", Text),
        col("account_id", Text),
        col("amount", Int),
        col("currency", Text),
        col("status", Int),
        col("status_name", Text),
        col("gateway_response", OptText),
        col("gateway_refund_id", OptText),
        col("failure_reason", OptText),
        col("created_at", Text),
        col("updated_at", Text),
        col("last_position", Int),
    ],
};

pub const IM_GROUP_MEMBERS: TableDef = TableDef {
    name: "im_group_members",
    key: &["artist_id", "fan_user_id"],
    columns: &[
        col("artist_id", Int),
        col("fan_user_id", Int),
        col("member_status", Int),
        col("updated_at", Text),
        col("last_position", Int),
    ],
};

pub const TABLES: [TableDef; 9] = [
    SERVICE_ORDERS,
    CANDY_RECHARGES,
    PAYMENT_TRANSACTIONS,
    CANDY_ACCOUNTS,
    SUBSCRIPTIONS,
    SUBSCRIPTION_GRANTS,
    BOOKINGS,
    REFUNDS,
    IM_GROUP_MEMBERS,
];
