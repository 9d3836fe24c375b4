-- Payment-order status reconciliation (issue 6 item 5, R-BILL-9) and bill-dimension
-- snapshots (issue 6 item 6, R-BILL-10).
--   bill_order_status_conflicts: one row per master the process manager
--     (src/bill_order_status.rs) could not reconcile because its stream moved under
--     each of the two compare-and-set attempts (R-BILL-9 conflict), with the event that
--     triggered it. Its checkpoint is the row `bill_order_status` of
--     projection_checkpoints.
--   bill_dimension_snapshot: one row per bill (a diff, or a station-month), inserted
--     when its payment order is approved (planned amount frozen then), refreshed only
--     by the snapshot refresh job (src/bill_snapshots.rs, EXISTING_ONLY). Money in i64
--     minor units; times RFC 3339 UTC text.
CREATE TABLE bill_order_status_conflicts (
    id BIGINT NOT NULL AUTO_INCREMENT,
    order_id BIGINT NOT NULL,
    global_position BIGINT NOT NULL,
    trigger_source VARCHAR(64) NOT NULL,
    attempts BIGINT NOT NULL,
    message TEXT NOT NULL,
    recorded_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (id),
    KEY ix_bill_order_status_conflicts_order (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE bill_dimension_snapshot (
    bill_key VARCHAR(64) NOT NULL,
    diff_id BIGINT NULL,
    station_id BIGINT NULL,
    bill_yearmonth CHAR(6) NULL,
    order_id BIGINT NOT NULL,
    planned_amount BIGINT NOT NULL,
    paid_amount BIGINT NOT NULL,
    paid_count BIGINT NOT NULL,
    failed_amount BIGINT NOT NULL,
    failed_count BIGINT NOT NULL,
    status VARCHAR(32) NOT NULL,
    latest_paid_at VARCHAR(32) NULL,
    source VARCHAR(32) NULL,
    refresh_version BIGINT NOT NULL,
    payment_diff BIGINT NOT NULL,
    approved_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (bill_key),
    KEY ix_bill_dimension_snapshot_station_month (station_id, bill_yearmonth)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The snapshot refresh job's saved cursor (src/bill_snapshots.rs): the generation it
-- belongs to, where the next round starts, and the last round's counts.
CREATE TABLE bill_snapshot_progress (
    job_code VARCHAR(160) NOT NULL,
    generation BIGINT NOT NULL,
    cursor_key VARCHAR(64) NULL,
    updated_total BIGINT NOT NULL,
    skipped_total BIGINT NOT NULL,
    updated_at VARCHAR(64) NOT NULL,
    PRIMARY KEY (job_code)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
