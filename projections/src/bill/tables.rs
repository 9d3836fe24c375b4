//! The tables of the bill projection (migrations/*/0014): the fact tables folded from
//! the events, the three bill tables and the decision explanation. Column lists are in
//! storage order and must match the migrations (the projection tests read every column).

use crate::table::{ColType, Column, TableDef};

const fn int(name: &'static str) -> Column {
    Column {
        name,
        ty: ColType::Int,
    }
}
const fn opt_int(name: &'static str) -> Column {
    Column {
        name,
        ty: ColType::OptInt,
    }
}
const fn text(name: &'static str) -> Column {
    Column {
        name,
        ty: ColType::Text,
    }
}
const fn opt_text(name: &'static str) -> Column {
    Column {
        name,
        ty: ColType::OptText,
    }
}

/// The small bill of each station-month (StationMonthEvent::SmallBillRecorded, latest wins).
pub const SMALL_BILLS: TableDef = TableDef {
    name: "bill_fact_small_bills",
    key: &["station_id", "bill_yearmonth"],
    columns: &[
        int("station_id"),
        text("bill_yearmonth"),
        int("bill_id"),
        int("account_id"),
        int("rent"),
        text("fact_at"),
    ],
};

/// The difference-ledger row of each station-month, with or without a partner bill.
pub const DIFFS: TableDef = TableDef {
    name: "bill_fact_diffs",
    key: &["station_id", "share_month"],
    columns: &[
        int("station_id"),
        text("share_month"),
        int("diff_id"),
        opt_int("partner_bill_id"),
        text("fact_at"),
    ],
};

/// Partner bills as last pushed (PartnerBillRecorded).
pub const PARTNER_BILLS: TableDef = TableDef {
    name: "bill_fact_partner_bills",
    key: &["partner_bill_id"],
    columns: &[
        int("partner_bill_id"),
        int("partner_account_id"),
        text("bill_yearmonth"),
        opt_int("pre_rent"),
        int("deduction"),
        text("fact_at"),
    ],
};

/// The last re-push of a partner bill (PartnerBillRepushed).
pub const PARTNER_REPUSHES: TableDef = TableDef {
    name: "bill_fact_partner_repushes",
    key: &["partner_bill_id"],
    columns: &[int("partner_bill_id"), text("repushed_at")],
};

/// Customer (small) accounts.
pub const CUSTOMER_ACCOUNTS: TableDef = TableDef {
    name: "bill_fact_customer_accounts",
    key: &["account_id"],
    columns: &[
        int("account_id"),
        text("income_start_month"),
        opt_text("current_payable_cutoff_month"),
        text("fact_at"),
    ],
};

/// Partner accounts with their partner org and platform-station mapping.
pub const PARTNER_ACCOUNTS: TableDef = TableDef {
    name: "bill_fact_partner_accounts",
    key: &["partner_account_id"],
    columns: &[
        int("partner_account_id"),
        int("partner_org_id"),
        opt_int("platform_station_id"),
        text("fact_at"),
    ],
};

/// Partner profiles: configured (cycle, version) or recorded as not configured. No row: unrecorded.
pub const PARTNER_PROFILES: TableDef = TableDef {
    name: "bill_fact_partner_profiles",
    key: &["partner_org_id"],
    columns: &[
        int("partner_org_id"),
        int("configured"),
        opt_text("payment_cycle"),
        opt_int("config_version"),
        text("fact_at"),
    ],
};

/// Station facts composite cycles read.
pub const STATIONS: TableDef = TableDef {
    name: "bill_fact_stations",
    key: &["station_id"],
    columns: &[
        int("station_id"),
        opt_text("record_way"),
        int("has_share_rule"),
        opt_text("rent_pay_method"),
        opt_text("change_type"),
        opt_text("latest_generated_bill_month"),
        text("fact_at"),
    ],
};

/// Recorded settings (`account_route`).
pub const SETTINGS: TableDef = TableDef {
    name: "bill_fact_settings",
    key: &["name"],
    columns: &[text("name"), text("value"), text("fact_at")],
};

/// Opening paid balances.
pub const OPENING_PAID: TableDef = TableDef {
    name: "bill_fact_opening_paid",
    key: &["opening_id"],
    columns: &[
        int("opening_id"),
        int("small_station_id"),
        opt_int("platform_station_id"),
        int("partner_org_id"),
        int("opening_paid"),
        text("updated_at"),
    ],
};

/// Opening deductions (effective = status 1).
pub const OPENING_DEDUCTIONS: TableDef = TableDef {
    name: "bill_fact_opening_deductions",
    key: &["opening_id"],
    columns: &[
        int("opening_id"),
        int("partner_account_id"),
        int("effective"),
        int("amount"),
        text("updated_at"),
    ],
};

/// Payment order masters: status and current publish identity.
pub const ORDERS: TableDef = TableDef {
    name: "bill_fact_orders",
    key: &["order_id"],
    columns: &[
        int("order_id"),
        text("status"),
        int("published"),
        int("publish_version"),
        int("submit_round"),
        int("treasury"),
        text("fact_at"),
    ],
};

/// Payment order lines (bills) with their publish identity, latest result and unqualified conclusion.
pub const LINES: TableDef = TableDef {
    name: "bill_fact_lines",
    key: &["line_id"],
    columns: &[
        int("line_id"),
        int("order_id"),
        int("station_id"),
        text("bill_yearmonth"),
        text("kind"),
        text("status"),
        opt_int("latest_result_id"),
        int("planned_amount"),
        opt_int("manual_adjustment"),
        opt_int("publish_version"),
        opt_int("submit_round"),
        int("deleted"),
        opt_int("conclusion_visible"),
        opt_text("conclusion_reason"),
        opt_text("conclusion_at"),
        text("line_at"),
    ],
};

/// Bill locks of every state.
pub const LOCKS: TableDef = TableDef {
    name: "bill_fact_locks",
    key: &["lock_id"],
    columns: &[
        int("lock_id"),
        int("station_id"),
        text("bill_yearmonth"),
        int("order_id"),
        int("line_id"),
        int("publish_version"),
        int("submit_round"),
        text("status"),
        text("locked_at"),
        text("fact_at"),
    ],
};

/// Payment results (voided ones kept, flagged).
pub const RESULTS: TableDef = TableDef {
    name: "bill_fact_results",
    key: &["result_id"],
    columns: &[
        int("result_id"),
        opt_int("order_id"),
        opt_int("line_id"),
        int("small_station_id"),
        opt_int("platform_station_id"),
        opt_int("partner_org_id"),
        text("bill_yearmonth"),
        text("status"),
        text("kind"),
        text("source"),
        int("amount"),
        opt_text("paid_at"),
        int("voided"),
        text("fact_at"),
    ],
};

/// The small bill (seed 6.1): identity from its fact, payment projection from the station-month's decision (NULL while the decision failed: see bill_decision_findings).
pub const CUSTOMER_BILL: TableDef = TableDef {
    name: "fi_customer_bill",
    key: &["id"],
    columns: &[
        int("id"),
        int("station_id"),
        text("bill_yearmonth"),
        int("account_id"),
        int("rent"),
        opt_int("payment_status"),
        opt_int("paid_amount"),
        opt_int("cumulative_paid_amount"),
        opt_int("locked_payment_order_id"),
        opt_int("locked_order_bill_id"),
        opt_text("payment_status_update_time"),
    ],
};

/// The partner bill (seed 6.1): identity from its fact; the payment projection of the station-month whose diff links it (decided_station_month), NULL while none does.
pub const CUSTOMER_BILL_PARTNER: TableDef = TableDef {
    name: "fi_customer_bill_partner",
    key: &["id"],
    columns: &[
        int("id"),
        int("partner_account_id"),
        opt_int("station_id"),
        text("bill_yearmonth"),
        opt_int("pre_rent"),
        int("deduction"),
        opt_text("decided_station_month"),
        opt_int("payment_status"),
        opt_int("paid_amount"),
        opt_int("cumulative_paid_amount"),
        opt_int("locked_payment_order_id"),
        opt_int("locked_order_bill_id"),
        opt_text("payment_status_update_time"),
        opt_int("partner_query_status"),
        opt_int("pre_rent_check_result"),
        opt_text("pre_rent_check_reason"),
        opt_int("current_payment_amount"),
        opt_int("unqualified_flag"),
        opt_text("unqualified_reason"),
        opt_int("last_unqualified_order_id"),
        opt_text("last_unqualified_time"),
    ],
};

/// The difference-ledger row (seed 6.1) with the station-month's payment projection.
pub const MONTHLY_INCOME_DIFFERENCE: TableDef = TableDef {
    name: "fi_monthly_income_difference",
    key: &["id"],
    columns: &[
        int("id"),
        int("station_id"),
        text("share_month"),
        opt_int("partner_bill_id"),
        opt_int("partner_account_id"),
        opt_int("small_account_id"),
        opt_int("rent"),
        opt_int("pre_rent"),
        opt_int("payment_status"),
        opt_int("paid_amount"),
        opt_int("cumulative_paid_amount"),
        opt_int("locked_payment_order_id"),
        opt_int("locked_order_bill_id"),
        opt_text("payment_status_update_time"),
        opt_int("partner_query_status"),
        opt_int("pre_rent_check_result"),
        opt_text("pre_rent_check_reason"),
        opt_int("current_payment_amount"),
        opt_int("unqualified_flag"),
        opt_text("unqualified_reason"),
    ],
};

/// Why each station-month has its payment projection: the rules that fired and the facts they read.
pub const DECISIONS: TableDef = TableDef {
    name: "bill_decisions",
    key: &["station_id", "bill_yearmonth"],
    columns: &[
        int("station_id"),
        text("bill_yearmonth"),
        int("payment_status"),
        text("decided_by"),
        int("partner_query_status"),
        text("partner_query_rule"),
        opt_int("pre_rent_check_result"),
        opt_int("pre_rent_available"),
        text("facts_json"),
        opt_text("decided_at"),
    ],
};

/// Station-months whose decision failed (BillError or inconsistent facts): an error finding, never a silent null.
pub const DECISION_FINDINGS: TableDef = TableDef {
    name: "bill_decision_findings",
    key: &["station_id", "bill_yearmonth"],
    columns: &[
        int("station_id"),
        text("bill_yearmonth"),
        text("code"),
        text("message"),
        text("facts_json"),
        opt_text("found_at"),
    ],
};

/// The fact tables, folded from the events.
pub const FACT_TABLES: &[TableDef] = &[
    SMALL_BILLS,
    DIFFS,
    PARTNER_BILLS,
    PARTNER_REPUSHES,
    CUSTOMER_ACCOUNTS,
    PARTNER_ACCOUNTS,
    PARTNER_PROFILES,
    STATIONS,
    SETTINGS,
    OPENING_PAID,
    OPENING_DEDUCTIONS,
    ORDERS,
    LINES,
    LOCKS,
    RESULTS,
];

/// The tables a decision writes (the three bill tables and the explanation).
pub const DECISION_TABLES: &[TableDef] = &[
    CUSTOMER_BILL,
    CUSTOMER_BILL_PARTNER,
    MONTHLY_INCOME_DIFFERENCE,
    DECISIONS,
    DECISION_FINDINGS,
];
