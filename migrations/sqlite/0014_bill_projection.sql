-- SQLite twin of migrations/mysql/0014.
-- Resident-income bill projection (issue 6 items 3 and 8; SPEC R-BILL-1..R-BILL-7,
-- seed 001 section 4.5 and 6.1). Written only by the bill projector (src/bill_projection.rs):
--   bill_fact_*   the current state of every bill fact, folded from the events (latest wins);
--   fi_customer_bill, fi_customer_bill_partner, fi_monthly_income_difference: the three
--                 bill tables, identity columns from the facts plus the payment projection
--                 of the station-month's decision (seed column names; money columns are
--                 i64 minor units; months are yyyymm; times RFC 3339 UTC text);
--   bill_decisions / bill_decision_findings: the decision of each station-month with the
--                 rules that fired and the facts it read, or why it has none.
-- Checkpoint: the row `bill` of projection_checkpoints.


-- The small bill of each station-month (StationMonthEvent::SmallBillRecorded, latest wins).
CREATE TABLE bill_fact_small_bills (
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    bill_id INTEGER NOT NULL,
    account_id INTEGER NOT NULL,
    rent INTEGER NOT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (station_id, bill_yearmonth)
);

-- The difference-ledger row of each station-month, with or without a partner bill.
CREATE TABLE bill_fact_diffs (
    station_id INTEGER NOT NULL,
    share_month TEXT NOT NULL,
    diff_id INTEGER NOT NULL,
    partner_bill_id INTEGER NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (station_id, share_month)
);

-- Partner bills as last pushed (PartnerBillRecorded).
CREATE TABLE bill_fact_partner_bills (
    partner_bill_id INTEGER NOT NULL,
    partner_account_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    pre_rent INTEGER NULL,
    deduction INTEGER NOT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (partner_bill_id)
);

-- The last re-push of a partner bill (PartnerBillRepushed).
CREATE TABLE bill_fact_partner_repushes (
    partner_bill_id INTEGER NOT NULL,
    repushed_at TEXT NOT NULL,
    PRIMARY KEY (partner_bill_id)
);

-- Customer (small) accounts.
CREATE TABLE bill_fact_customer_accounts (
    account_id INTEGER NOT NULL,
    income_start_month TEXT NOT NULL,
    current_payable_cutoff_month TEXT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (account_id)
);

-- Partner accounts with their partner org and platform-station mapping.
CREATE TABLE bill_fact_partner_accounts (
    partner_account_id INTEGER NOT NULL,
    partner_org_id INTEGER NOT NULL,
    platform_station_id INTEGER NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (partner_account_id)
);

-- Partner profiles: configured (cycle, version) or recorded as not configured. No row: unrecorded.
CREATE TABLE bill_fact_partner_profiles (
    partner_org_id INTEGER NOT NULL,
    configured INTEGER NOT NULL,
    payment_cycle TEXT NULL,
    config_version INTEGER NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (partner_org_id)
);

-- Station facts composite cycles read.
CREATE TABLE bill_fact_stations (
    station_id INTEGER NOT NULL,
    record_way TEXT NULL,
    has_share_rule INTEGER NOT NULL,
    rent_pay_method TEXT NULL,
    change_type TEXT NULL,
    latest_generated_bill_month TEXT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (station_id)
);

-- Recorded settings (`account_route`).
CREATE TABLE bill_fact_settings (
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (name)
);

-- Opening paid balances.
CREATE TABLE bill_fact_opening_paid (
    opening_id INTEGER NOT NULL,
    small_station_id INTEGER NOT NULL,
    platform_station_id INTEGER NULL,
    partner_org_id INTEGER NOT NULL,
    opening_paid INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (opening_id)
);

-- Opening deductions (effective = status 1).
CREATE TABLE bill_fact_opening_deductions (
    opening_id INTEGER NOT NULL,
    partner_account_id INTEGER NOT NULL,
    effective INTEGER NOT NULL,
    amount INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (opening_id)
);

-- Payment order masters: status and current publish identity.
CREATE TABLE bill_fact_orders (
    order_id INTEGER NOT NULL,
    status TEXT NOT NULL,
    published INTEGER NOT NULL,
    publish_version INTEGER NOT NULL,
    submit_round INTEGER NOT NULL,
    treasury INTEGER NOT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (order_id)
);

-- Payment order lines (bills) with their publish identity, latest result and unqualified conclusion.
CREATE TABLE bill_fact_lines (
    line_id INTEGER NOT NULL,
    order_id INTEGER NOT NULL,
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    latest_result_id INTEGER NULL,
    planned_amount INTEGER NOT NULL,
    manual_adjustment INTEGER NULL,
    publish_version INTEGER NULL,
    submit_round INTEGER NULL,
    deleted INTEGER NOT NULL,
    conclusion_visible INTEGER NULL,
    conclusion_reason TEXT NULL,
    conclusion_at TEXT NULL,
    line_at TEXT NOT NULL,
    PRIMARY KEY (line_id)
);

-- Bill locks of every state.
CREATE TABLE bill_fact_locks (
    lock_id INTEGER NOT NULL,
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    order_id INTEGER NOT NULL,
    line_id INTEGER NOT NULL,
    publish_version INTEGER NOT NULL,
    submit_round INTEGER NOT NULL,
    status TEXT NOT NULL,
    locked_at TEXT NOT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (lock_id)
);

-- Payment results (voided ones kept, flagged).
CREATE TABLE bill_fact_results (
    result_id INTEGER NOT NULL,
    order_id INTEGER NULL,
    line_id INTEGER NULL,
    small_station_id INTEGER NOT NULL,
    platform_station_id INTEGER NULL,
    partner_org_id INTEGER NULL,
    bill_yearmonth TEXT NOT NULL,
    status TEXT NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    amount INTEGER NOT NULL,
    paid_at TEXT NULL,
    voided INTEGER NOT NULL,
    fact_at TEXT NOT NULL,
    PRIMARY KEY (result_id)
);

-- The small bill (seed 6.1): identity from its fact, payment projection from the station-month's decision (NULL while the decision failed: see bill_decision_findings).
CREATE TABLE fi_customer_bill (
    id INTEGER NOT NULL,
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    account_id INTEGER NOT NULL,
    rent INTEGER NOT NULL,
    payment_status INTEGER NULL,
    paid_amount INTEGER NULL,
    cumulative_paid_amount INTEGER NULL,
    locked_payment_order_id INTEGER NULL,
    locked_order_bill_id INTEGER NULL,
    payment_status_update_time TEXT NULL,
    PRIMARY KEY (id)
);

-- The partner bill (seed 6.1): identity from its fact; the payment projection of the station-month whose diff links it (decided_station_month), NULL while none does.
CREATE TABLE fi_customer_bill_partner (
    id INTEGER NOT NULL,
    partner_account_id INTEGER NOT NULL,
    station_id INTEGER NULL,
    bill_yearmonth TEXT NOT NULL,
    pre_rent INTEGER NULL,
    deduction INTEGER NOT NULL,
    decided_station_month TEXT NULL,
    payment_status INTEGER NULL,
    paid_amount INTEGER NULL,
    cumulative_paid_amount INTEGER NULL,
    locked_payment_order_id INTEGER NULL,
    locked_order_bill_id INTEGER NULL,
    payment_status_update_time TEXT NULL,
    partner_query_status INTEGER NULL,
    pre_rent_check_result INTEGER NULL,
    pre_rent_check_reason TEXT NULL,
    current_payment_amount INTEGER NULL,
    unqualified_flag INTEGER NULL,
    unqualified_reason TEXT NULL,
    last_unqualified_order_id INTEGER NULL,
    last_unqualified_time TEXT NULL,
    PRIMARY KEY (id)
);

-- The difference-ledger row (seed 6.1) with the station-month's payment projection.
CREATE TABLE fi_monthly_income_difference (
    id INTEGER NOT NULL,
    station_id INTEGER NOT NULL,
    share_month TEXT NOT NULL,
    partner_bill_id INTEGER NULL,
    partner_account_id INTEGER NULL,
    small_account_id INTEGER NULL,
    rent INTEGER NULL,
    pre_rent INTEGER NULL,
    payment_status INTEGER NULL,
    paid_amount INTEGER NULL,
    cumulative_paid_amount INTEGER NULL,
    locked_payment_order_id INTEGER NULL,
    locked_order_bill_id INTEGER NULL,
    payment_status_update_time TEXT NULL,
    partner_query_status INTEGER NULL,
    pre_rent_check_result INTEGER NULL,
    pre_rent_check_reason TEXT NULL,
    current_payment_amount INTEGER NULL,
    unqualified_flag INTEGER NULL,
    unqualified_reason TEXT NULL,
    PRIMARY KEY (id)
);

-- Why each station-month has its payment projection: the rules that fired and the facts they read.
CREATE TABLE bill_decisions (
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    payment_status INTEGER NOT NULL,
    decided_by TEXT NOT NULL,
    partner_query_status INTEGER NOT NULL,
    partner_query_rule TEXT NOT NULL,
    pre_rent_check_result INTEGER NULL,
    pre_rent_available INTEGER NULL,
    facts_json TEXT NOT NULL,
    decided_at TEXT NULL,
    PRIMARY KEY (station_id, bill_yearmonth)
);

-- Station-months whose decision failed (BillError or inconsistent facts): an error finding, never a silent null.
CREATE TABLE bill_decision_findings (
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    code TEXT NOT NULL,
    message TEXT NOT NULL,
    facts_json TEXT NOT NULL,
    found_at TEXT NULL,
    PRIMARY KEY (station_id, bill_yearmonth)
);

CREATE INDEX ix_bill_fact_small_bills_account ON bill_fact_small_bills (account_id, bill_yearmonth);
CREATE INDEX ix_bill_fact_diffs_partner_bill ON bill_fact_diffs (partner_bill_id);
CREATE INDEX ix_bill_fact_partner_bills_account ON bill_fact_partner_bills (partner_account_id);
CREATE INDEX ix_bill_fact_partner_accounts_platform ON bill_fact_partner_accounts (platform_station_id);
CREATE INDEX ix_bill_fact_partner_accounts_org ON bill_fact_partner_accounts (partner_org_id);
CREATE INDEX ix_bill_fact_opening_paid_small ON bill_fact_opening_paid (small_station_id);
CREATE INDEX ix_bill_fact_opening_paid_platform ON bill_fact_opening_paid (platform_station_id);
CREATE INDEX ix_bill_fact_opening_deductions_account ON bill_fact_opening_deductions (partner_account_id);
CREATE INDEX ix_bill_fact_lines_station_month ON bill_fact_lines (station_id, bill_yearmonth);
CREATE INDEX ix_bill_fact_lines_order ON bill_fact_lines (order_id);
CREATE INDEX ix_bill_fact_lines_result ON bill_fact_lines (latest_result_id);
CREATE INDEX ix_bill_fact_locks_station_month ON bill_fact_locks (station_id, bill_yearmonth);
CREATE INDEX ix_bill_fact_locks_order ON bill_fact_locks (order_id);
CREATE INDEX ix_bill_fact_results_small ON bill_fact_results (small_station_id, bill_yearmonth);
CREATE INDEX ix_bill_fact_results_platform ON bill_fact_results (platform_station_id, bill_yearmonth);
CREATE UNIQUE INDEX ux_fi_customer_bill_station_month ON fi_customer_bill (station_id, bill_yearmonth);
CREATE INDEX ix_fi_customer_bill_partner_decided ON fi_customer_bill_partner (decided_station_month);
CREATE UNIQUE INDEX ux_fi_monthly_income_difference_station_month ON fi_monthly_income_difference (station_id, share_month);
