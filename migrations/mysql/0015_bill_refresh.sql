-- Bill refresh requests (issue 6 items 4 and 7; SPEC R-BILL-8, R-BILL-11).
-- bill_refresh_progress: one row per refresh job (code `RIPSR:<md5>`), the last
-- station-month a round of request generation `generation` committed; written only by
-- the round holding the job's claim (fenced). A retry of the same generation resumes
-- after it; another generation starts from the first station-month.
CREATE TABLE bill_refresh_progress (
    job_code VARCHAR(64) NOT NULL,
    generation BIGINT NOT NULL,
    last_station_id BIGINT NOT NULL,
    last_month CHAR(6) NOT NULL,
    updated_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (job_code)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- bill_inspection_findings: what the R-BILL-11 inspection after each refresh run found,
-- per job code and station-month (rule ids I1_… to I9_…; INSPECTION_ERROR when the
-- inspection itself could not run). found_at is the job's clock (RFC 3339 UTC).
CREATE TABLE bill_inspection_findings (
    id BIGINT NOT NULL AUTO_INCREMENT,
    job_code VARCHAR(64) NOT NULL,
    generation BIGINT NOT NULL,
    station_id BIGINT NOT NULL,
    bill_yearmonth CHAR(6) NOT NULL,
    rule_id VARCHAR(64) NOT NULL,
    severity VARCHAR(16) NOT NULL,
    row_table VARCHAR(64) NULL,
    row_id BIGINT NULL,
    message TEXT NOT NULL,
    found_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (id),
    KEY ix_bill_inspection_findings_station_month (station_id, bill_yearmonth),
    KEY ix_bill_inspection_findings_job (job_code)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
