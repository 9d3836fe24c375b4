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
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    bill_id BIGINT NOT NULL,
    account_id BIGINT NOT NULL,
    rent BIGINT NOT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (station_id, bill_yearmonth),
    KEY ix_bill_fact_small_bills_account (account_id, bill_yearmonth)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The difference-ledger row of each station-month, with or without a partner bill.
CREATE TABLE bill_fact_diffs (
    station_id BIGINT NOT NULL,
    share_month CHAR(6) NOT NULL,
    diff_id BIGINT NOT NULL,
    partner_bill_id BIGINT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (station_id, share_month),
    KEY ix_bill_fact_diffs_partner_bill (partner_bill_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Partner bills as last pushed (PartnerBillRecorded).
CREATE TABLE bill_fact_partner_bills (
    partner_bill_id BIGINT NOT NULL,
    partner_account_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    pre_rent BIGINT NULL,
    deduction BIGINT NOT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (partner_bill_id),
    KEY ix_bill_fact_partner_bills_account (partner_account_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The last re-push of a partner bill (PartnerBillRepushed).
CREATE TABLE bill_fact_partner_repushes (
    partner_bill_id BIGINT NOT NULL,
    repushed_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (partner_bill_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Customer (small) accounts.
CREATE TABLE bill_fact_customer_accounts (
    account_id BIGINT NOT NULL,
    income_start_month CHAR(6) NOT NULL,
    current_payable_cutoff_month CHAR(6) NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (account_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Partner accounts with their partner org and platform-station mapping.
CREATE TABLE bill_fact_partner_accounts (
    partner_account_id BIGINT NOT NULL,
    partner_org_id BIGINT NOT NULL,
    platform_station_id BIGINT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (partner_account_id),
    KEY ix_bill_fact_partner_accounts_platform (platform_station_id),
    KEY ix_bill_fact_partner_accounts_org (partner_org_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Partner profiles: configured (cycle, version) or recorded as not configured. No row: unrecorded.
CREATE TABLE bill_fact_partner_profiles (
    partner_org_id BIGINT NOT NULL,
    configured BIGINT NOT NULL,
    payment_cycle VARCHAR(64) NULL,
    config_version BIGINT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (partner_org_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Station facts composite cycles read.
CREATE TABLE bill_fact_stations (
    station_id BIGINT NOT NULL,
    record_way VARCHAR(64) NULL,
    has_share_rule BIGINT NOT NULL,
    rent_pay_method VARCHAR(64) NULL,
    change_type VARCHAR(64) NULL,
    latest_generated_bill_month CHAR(6) NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (station_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Recorded settings (`account_route`).
CREATE TABLE bill_fact_settings (
    name VARCHAR(64) NOT NULL,
    value VARCHAR(64) NOT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Opening paid balances.
CREATE TABLE bill_fact_opening_paid (
    opening_id BIGINT NOT NULL,
    small_station_id BIGINT NOT NULL,
    platform_station_id BIGINT NULL,
    partner_org_id BIGINT NOT NULL,
    opening_paid BIGINT NOT NULL,
    updated_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (opening_id),
    KEY ix_bill_fact_opening_paid_small (small_station_id),
    KEY ix_bill_fact_opening_paid_platform (platform_station_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Opening deductions (effective = status 1).
CREATE TABLE bill_fact_opening_deductions (
    opening_id BIGINT NOT NULL,
    partner_account_id BIGINT NOT NULL,
    effective BIGINT NOT NULL,
    amount BIGINT NOT NULL,
    updated_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (opening_id),
    KEY ix_bill_fact_opening_deductions_account (partner_account_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Payment order masters: status and current publish identity.
CREATE TABLE bill_fact_orders (
    order_id BIGINT NOT NULL,
    status VARCHAR(64) NOT NULL,
    published BIGINT NOT NULL,
    publish_version BIGINT NOT NULL,
    submit_round BIGINT NOT NULL,
    treasury BIGINT NOT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Payment order lines (bills) with their publish identity, latest result and unqualified conclusion.
CREATE TABLE bill_fact_lines (
    line_id BIGINT NOT NULL,
    order_id BIGINT NOT NULL,
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    kind VARCHAR(64) NOT NULL,
    status VARCHAR(64) NOT NULL,
    latest_result_id BIGINT NULL,
    planned_amount BIGINT NOT NULL,
    manual_adjustment BIGINT NULL,
    publish_version BIGINT NULL,
    submit_round BIGINT NULL,
    deleted BIGINT NOT NULL,
    conclusion_visible BIGINT NULL,
    conclusion_reason TEXT NULL,
    conclusion_at VARCHAR(32) NULL,
    line_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (line_id),
    KEY ix_bill_fact_lines_station_month (station_id, bill_yearmonth),
    KEY ix_bill_fact_lines_order (order_id),
    KEY ix_bill_fact_lines_result (latest_result_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Bill locks of every state.
CREATE TABLE bill_fact_locks (
    lock_id BIGINT NOT NULL,
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    order_id BIGINT NOT NULL,
    line_id BIGINT NOT NULL,
    publish_version BIGINT NOT NULL,
    submit_round BIGINT NOT NULL,
    status VARCHAR(64) NOT NULL,
    locked_at VARCHAR(32) NOT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (lock_id),
    KEY ix_bill_fact_locks_station_month (station_id, bill_yearmonth),
    KEY ix_bill_fact_locks_order (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Payment results (voided ones kept, flagged).
CREATE TABLE bill_fact_results (
    result_id BIGINT NOT NULL,
    order_id BIGINT NULL,
    line_id BIGINT NULL,
    small_station_id BIGINT NOT NULL,
    platform_station_id BIGINT NULL,
    partner_org_id BIGINT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    status VARCHAR(64) NOT NULL,
    kind VARCHAR(64) NOT NULL,
    source VARCHAR(64) NOT NULL,
    amount BIGINT NOT NULL,
    paid_at VARCHAR(32) NULL,
    voided BIGINT NOT NULL,
    fact_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (result_id),
    KEY ix_bill_fact_results_small (small_station_id, bill_yearmonth),
    KEY ix_bill_fact_results_platform (platform_station_id, bill_yearmonth)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The small bill (seed 6.1): identity from its fact, payment projection from the station-month's decision (NULL while the decision failed: see bill_decision_findings).
CREATE TABLE fi_customer_bill (
    id BIGINT NOT NULL,
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    account_id BIGINT NOT NULL,
    rent BIGINT NOT NULL,
    payment_status BIGINT NULL,
    paid_amount BIGINT NULL,
    cumulative_paid_amount BIGINT NULL,
    locked_payment_order_id BIGINT NULL,
    locked_order_bill_id BIGINT NULL,
    payment_status_update_time VARCHAR(32) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY ux_fi_customer_bill_station_month (station_id, bill_yearmonth)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The partner bill (seed 6.1): identity from its fact; the payment projection of the station-month whose diff links it (decided_station_month), NULL while none does.
CREATE TABLE fi_customer_bill_partner (
    id BIGINT NOT NULL,
    partner_account_id BIGINT NOT NULL,
    station_id BIGINT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    pre_rent BIGINT NULL,
    deduction BIGINT NOT NULL,
    decided_station_month VARCHAR(64) NULL,
    payment_status BIGINT NULL,
    paid_amount BIGINT NULL,
    cumulative_paid_amount BIGINT NULL,
    locked_payment_order_id BIGINT NULL,
    locked_order_bill_id BIGINT NULL,
    payment_status_update_time VARCHAR(32) NULL,
    partner_query_status BIGINT NULL,
    pre_rent_check_result BIGINT NULL,
    pre_rent_check_reason VARCHAR(64) NULL,
    current_payment_amount BIGINT NULL,
    unqualified_flag BIGINT NULL,
    unqualified_reason TEXT NULL,
    last_unqualified_order_id BIGINT NULL,
    last_unqualified_time VARCHAR(32) NULL,
    PRIMARY KEY (id),
    KEY ix_fi_customer_bill_partner_decided (decided_station_month)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The difference-ledger row (seed 6.1) with the station-month's payment projection.
CREATE TABLE fi_monthly_income_difference (
    id BIGINT NOT NULL,
    station_id BIGINT NOT NULL,
    share_month CHAR(6) NOT NULL,
    partner_bill_id BIGINT NULL,
    partner_account_id BIGINT NULL,
    small_account_id BIGINT NULL,
    rent BIGINT NULL,
    pre_rent BIGINT NULL,
    payment_status BIGINT NULL,
    paid_amount BIGINT NULL,
    cumulative_paid_amount BIGINT NULL,
    locked_payment_order_id BIGINT NULL,
    locked_order_bill_id BIGINT NULL,
    payment_status_update_time VARCHAR(32) NULL,
    partner_query_status BIGINT NULL,
    pre_rent_check_result BIGINT NULL,
    pre_rent_check_reason VARCHAR(64) NULL,
    current_payment_amount BIGINT NULL,
    unqualified_flag BIGINT NULL,
    unqualified_reason TEXT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY ux_fi_monthly_income_difference_station_month (station_id, share_month)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Why each station-month has its payment projection: the rules that fired and the facts they read.
CREATE TABLE bill_decisions (
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    payment_status BIGINT NOT NULL,
    decided_by VARCHAR(64) NOT NULL,
    partner_query_status BIGINT NOT NULL,
    partner_query_rule VARCHAR(64) NOT NULL,
    pre_rent_check_result BIGINT NULL,
    pre_rent_available BIGINT NULL,
    facts_json LONGTEXT NOT NULL,
    decided_at VARCHAR(32) NULL,
    PRIMARY KEY (station_id, bill_yearmonth)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Station-months whose decision failed (BillError or inconsistent facts): an error finding, never a silent null.
CREATE TABLE bill_decision_findings (
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    code VARCHAR(64) NOT NULL,
    message TEXT NOT NULL,
    facts_json LONGTEXT NOT NULL,
    found_at VARCHAR(32) NULL,
    PRIMARY KEY (station_id, bill_yearmonth)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
