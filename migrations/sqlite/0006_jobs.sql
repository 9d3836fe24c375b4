-- Durable jobs (issue 4); see migrations/mysql/0006 for the meaning of each column.
CREATE TABLE jobs (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    code TEXT NOT NULL,
    business_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    status INTEGER NOT NULL,
    retry_count INTEGER NOT NULL,
    max_retry_count INTEGER NOT NULL,
    next_execute_at_ms INTEGER NOT NULL,
    request_generation INTEGER NOT NULL,
    running_generation INTEGER NOT NULL,
    running_attempt INTEGER NOT NULL,
    lease_owner TEXT NULL,
    lease_until_ms INTEGER NULL,
    heartbeat_at_ms INTEGER NULL,
    last_error TEXT NULL,
    first_failed_at_ms INTEGER NULL,
    request_id TEXT NULL,
    trace_id TEXT NULL,
    last_round TEXT NULL,
    last_run_id INTEGER NULL,
    fenced_writes INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    auto_eligible INTEGER GENERATED ALWAYS AS
        (CASE WHEN status IN (0, 3) AND retry_count < max_retry_count THEN 1 ELSE 0 END) VIRTUAL,
    UNIQUE (code)
);
CREATE INDEX ix_jobs_scan ON jobs (kind, auto_eligible, next_execute_at_ms, retry_count, id);
CREATE INDEX ix_jobs_kind_status ON jobs (kind, status, id, lease_until_ms);
CREATE INDEX ix_jobs_business_key ON jobs (business_key);

CREATE TABLE job_quota_locks (
    name TEXT NOT NULL PRIMARY KEY
);
INSERT INTO job_quota_locks (name) VALUES ('*');

CREATE TABLE job_control (
    id INTEGER NOT NULL PRIMARY KEY,
    paused INTEGER NOT NULL,
    reason TEXT NULL,
    changed_by TEXT NULL,
    changed_at_ms INTEGER NULL
);
INSERT INTO job_control (id, paused) VALUES (1, 0);

CREATE TABLE job_runs (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    entry TEXT NOT NULL,
    kind TEXT NULL,
    owner TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER NULL,
    ok INTEGER NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    recovered INTEGER NOT NULL DEFAULT 0,
    candidates INTEGER NOT NULL DEFAULT 0,
    claimed INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    succeeded INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    requeued INTEGER NOT NULL DEFAULT 0,
    fenced INTEGER NOT NULL DEFAULT 0,
    error TEXT NULL
);

CREATE TRIGGER jobs_refuse_delete_running BEFORE DELETE ON jobs WHEN OLD.status = 1
BEGIN
    SELECT RAISE(ABORT, 'a RUNNING job may not be deleted');
END;
