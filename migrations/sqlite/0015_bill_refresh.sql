-- Bill refresh requests (issue 6 items 4 and 7); see migrations/mysql/0015 for the
-- meaning of each column.
CREATE TABLE bill_refresh_progress (
    job_code TEXT NOT NULL,
    generation INTEGER NOT NULL,
    last_station_id INTEGER NOT NULL,
    last_month TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (job_code)
);

CREATE TABLE bill_inspection_findings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_code TEXT NOT NULL,
    generation INTEGER NOT NULL,
    station_id INTEGER NOT NULL,
    bill_yearmonth TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    severity TEXT NOT NULL,
    row_table TEXT NULL,
    row_id INTEGER NULL,
    message TEXT NOT NULL,
    found_at TEXT NOT NULL
);
CREATE INDEX ix_bill_inspection_findings_station_month
    ON bill_inspection_findings (station_id, bill_yearmonth);
CREATE INDEX ix_bill_inspection_findings_job ON bill_inspection_findings (job_code);
