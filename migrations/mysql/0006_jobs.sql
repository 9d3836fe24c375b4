-- Durable jobs (issue 4; SPEC R-JOB-1 … R-JOB-10). One table for every background task:
-- settlement, payouts, order sync, refund queries, bill refresh, snapshot refresh, cron
-- firings. Jobs live beside the events so "append the fact and enqueue the follow-up"
-- is one transaction. Times are UTC epoch milliseconds (`*_ms`).
CREATE TABLE jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind VARCHAR(64) NOT NULL,
    -- `<PREFIX>:` + MD5 of the full business key (always of the full key).
    code VARCHAR(80) NOT NULL,
    -- The full business key when it is at most 128 characters, else
    -- `<PREFIX>_BK:` + MD5 of it.
    business_key VARCHAR(160) NOT NULL,
    payload LONGTEXT NOT NULL,
    -- 0 PENDING, 1 RUNNING, 2 SUCCESS, 3 FAILED, 4 CANCELLED
    status TINYINT NOT NULL,
    retry_count INT NOT NULL,
    max_retry_count INT NOT NULL,
    next_execute_at_ms BIGINT NOT NULL,
    -- Bumped by every fact-change submit; a round that read an older one goes back to
    -- PENDING when it ends instead of SUCCESS or FAILED.
    request_generation BIGINT NOT NULL,
    -- The generation the current (or last) round read when it claimed the job.
    running_generation BIGINT NOT NULL,
    -- Bumped by every claim: the fencing token of the round.
    running_attempt BIGINT NOT NULL,
    lease_owner VARCHAR(128) NULL,
    lease_until_ms BIGINT NULL,
    heartbeat_at_ms BIGINT NULL,
    -- Truncated to 1,000 characters.
    last_error VARCHAR(1000) NULL,
    first_failed_at_ms BIGINT NULL,
    -- Who asked for the job, for alerts and the audit trail (R-MON-1).
    request_id VARCHAR(128) NULL,
    trace_id VARCHAR(128) NULL,
    -- JSON: what the last round reported (levels of success, counts).
    last_round LONGTEXT NULL,
    -- The scheduler run (job_runs.id) that last took the job.
    last_run_id BIGINT NULL,
    -- Fenced business writes that committed under a claim of this job (each fenced
    -- unit bumps it, which also locks the job row until the unit commits).
    fenced_writes BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    -- What the automatic scan may take (R-JOB-4: PENDING or FAILED with retries left),
    -- kept by the database so the scan walks one index range in its order (due time,
    -- retries, id) and stops at its LIMIT: no sort, and exhausted jobs are not walked.
    auto_eligible TINYINT AS (IF(status IN (0, 3) AND retry_count < max_retry_count, 1, 0))
        PERSISTENT,
    UNIQUE KEY uq_jobs_code (code),
    KEY ix_jobs_scan (kind, auto_eligible, next_execute_at_ms, retry_count, id),
    -- Operator lists by kind and status in id order, and the live leases of a kind
    -- (quotas, the recovery before every scan) read from the index alone. No index
    -- leads with `status`: a claim's compare-and-set must find its rows by id, not
    -- walk every pending job of a status range.
    KEY ix_jobs_kind_status (kind, status, id, lease_until_ms),
    KEY ix_jobs_business_key (business_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Rows locked by claims of capped kinds, so quotas counted over live leases are exact
-- under concurrency ('*' is the total of all capped kinds; a row per capped kind is
-- created on first use).
CREATE TABLE job_quota_locks (
    name VARCHAR(64) NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO job_quota_locks (name) VALUES ('*');

-- The maintenance pause (R-JOB-8): while paused, no entry point (scan, manual, kick)
-- claims anything; submissions are still accepted.
CREATE TABLE job_control (
    id TINYINT NOT NULL PRIMARY KEY,
    paused BOOLEAN NOT NULL,
    reason VARCHAR(1000) NULL,
    changed_by VARCHAR(128) NULL,
    changed_at_ms BIGINT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
INSERT INTO job_control (id, paused) VALUES (1, FALSE);

-- Scheduler runs (R-JOB-10, level 1): every scan, manual retry and kick, with what it
-- found and did. Pruned to the newest rows by the engine.
CREATE TABLE job_runs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    -- scan | manual | kick
    entry VARCHAR(16) NOT NULL,
    kind VARCHAR(64) NULL,
    owner VARCHAR(128) NOT NULL,
    started_at_ms BIGINT NOT NULL,
    finished_at_ms BIGINT NULL,
    ok BOOLEAN NULL,
    paused BOOLEAN NOT NULL DEFAULT FALSE,
    recovered INT NOT NULL DEFAULT 0,
    candidates INT NOT NULL DEFAULT 0,
    claimed INT NOT NULL DEFAULT 0,
    skipped INT NOT NULL DEFAULT 0,
    succeeded INT NOT NULL DEFAULT 0,
    failed INT NOT NULL DEFAULT 0,
    requeued INT NOT NULL DEFAULT 0,
    fenced INT NOT NULL DEFAULT 0,
    error VARCHAR(1000) NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A running job's row is its claim: fenced units check it, so it may not vanish under
-- them (finished jobs may be purged).
CREATE TRIGGER jobs_refuse_delete_running BEFORE DELETE ON jobs FOR EACH ROW
BEGIN
    IF OLD.status = 1 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'a RUNNING job may not be deleted';
    END IF;
END;
