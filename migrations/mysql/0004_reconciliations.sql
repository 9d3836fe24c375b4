-- Reconciliation runs (issue 3, item 5; SPEC R-REC-1): one row per run, from the CLI
-- or the API, kept so a report can be read back after the process that made it is
-- gone. `up_to_position` is the global position the run replayed to (the wallet
-- projection's checkpoint in its snapshot), so the run can be repeated exactly.
CREATE TABLE reconciliations (
    id CHAR(36) NOT NULL PRIMARY KEY,
    -- running | succeeded | failed (read back as `abandoned` when a running run's
    -- heartbeat is older than the run's heartbeat timeout: its process died)
    status VARCHAR(16) NOT NULL,
    repair BOOLEAN NOT NULL,
    requested_by VARCHAR(128) NOT NULL,
    up_to_position BIGINT NULL,
    -- RFC 3339 UTC text, written by the same code on both backends.
    started_at VARCHAR(32) NOT NULL,
    finished_at VARCHAR(32) NULL,
    -- Renewed every second while the run works.
    heartbeat_at VARCHAR(32) NOT NULL,
    -- The JSON report of a finished run.
    report LONGTEXT NULL,
    error TEXT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
