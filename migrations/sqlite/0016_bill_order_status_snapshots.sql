-- Payment-order status conflicts and bill-dimension snapshots (issue 6 items 5, 6); see
-- migrations/mysql/0016 for the meaning of each column.
CREATE TABLE bill_order_status_conflicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id INTEGER NOT NULL,
    global_position INTEGER NOT NULL,
    trigger_source TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    message TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE INDEX ix_bill_order_status_conflicts_order ON bill_order_status_conflicts (order_id);

CREATE TABLE bill_dimension_snapshot (
    bill_key TEXT NOT NULL PRIMARY KEY,
    diff_id INTEGER NULL,
    station_id INTEGER NULL,
    bill_yearmonth TEXT NULL,
    order_id INTEGER NOT NULL,
    planned_amount INTEGER NOT NULL,
    paid_amount INTEGER NOT NULL,
    paid_count INTEGER NOT NULL,
    failed_amount INTEGER NOT NULL,
    failed_count INTEGER NOT NULL,
    status TEXT NOT NULL,
    latest_paid_at TEXT NULL,
    source TEXT NULL,
    refresh_version INTEGER NOT NULL,
    payment_diff INTEGER NOT NULL,
    approved_at TEXT NOT NULL
);
CREATE INDEX ix_bill_dimension_snapshot_station_month ON bill_dimension_snapshot (station_id, bill_yearmonth);

-- The snapshot refresh job's saved cursor (src/bill_snapshots.rs): the generation it
-- belongs to, where the next round starts, and the last round's counts.
CREATE TABLE bill_snapshot_progress (
    job_code TEXT NOT NULL,
    generation INTEGER NOT NULL,
    cursor_key TEXT NULL,
    updated_total INTEGER NOT NULL,
    skipped_total INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (job_code)
);
