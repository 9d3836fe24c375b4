-- Cron (issue 4 item 5; SPEC R-JOB-9): schedules fire as singletons on one server,
-- and each firing is recorded once. Times are UTC epoch milliseconds (`*_ms`).

-- The scheduler's lease: one row per deployment ('scheduler'). Only the holder fires.
-- Taken by compare-and-set once `lease_until_ms` has passed, renewed by its holder
-- (and by every firing transaction, which also checks it: a holder that lost the
-- lease records nothing). `epoch` is bumped by every take: the holder's fencing token.
CREATE TABLE cron_leases (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    owner VARCHAR(128) NULL,
    epoch BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL,
    acquired_at_ms BIGINT NULL,
    renewed_at_ms BIGINT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO cron_leases (name, owner, epoch, lease_until_ms) VALUES ('scheduler', NULL, 0, 0);

-- Every schedule the scheduler has seen, with its cursor: the last fire time it has
-- handled (fired or skipped). Created at the first sight with the cursor at that time
-- (nothing fires retroactively); advanced in the firing's own transaction, so a new
-- holder resumes exactly where the last one committed.
CREATE TABLE cron_schedules (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    expression VARCHAR(255) NOT NULL,
    job_kind VARCHAR(64) NOT NULL,
    cursor_ms BIGINT NOT NULL,
    -- Missed firings beyond the catch-up bound that were not fired (counted, logged).
    skipped_firings BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per firing: the primary key (schedule, fire time) makes a second record of
-- the same firing impossible, whoever tries. Written in one transaction with the job it
-- submits (`job_code`, business key `cron:<schedule>:<fire_at_ms>`).
CREATE TABLE cron_firings (
    schedule VARCHAR(64) NOT NULL,
    fire_at_ms BIGINT NOT NULL,
    job_code VARCHAR(80) NOT NULL,
    owner VARCHAR(128) NOT NULL,
    lease_epoch BIGINT NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (schedule, fire_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
