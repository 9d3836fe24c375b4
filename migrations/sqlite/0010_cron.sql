-- Cron (issue 4 item 5); see migrations/mysql/0010 for the meaning of each column.
CREATE TABLE cron_leases (
    name TEXT NOT NULL PRIMARY KEY,
    owner TEXT NULL,
    epoch INTEGER NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    acquired_at_ms INTEGER NULL,
    renewed_at_ms INTEGER NULL
);
INSERT INTO cron_leases (name, owner, epoch, lease_until_ms) VALUES ('scheduler', NULL, 0, 0);

CREATE TABLE cron_schedules (
    name TEXT NOT NULL PRIMARY KEY,
    expression TEXT NOT NULL,
    job_kind TEXT NOT NULL,
    cursor_ms INTEGER NOT NULL,
    skipped_firings INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE cron_firings (
    schedule TEXT NOT NULL,
    fire_at_ms INTEGER NOT NULL,
    job_code TEXT NOT NULL,
    owner TEXT NOT NULL,
    lease_epoch INTEGER NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (schedule, fire_at_ms)
);
