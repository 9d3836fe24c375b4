-- Reconciliation runs (issue 3, item 5); see migrations/mysql/0004 for the reasoning.
CREATE TABLE reconciliations (
    id TEXT NOT NULL PRIMARY KEY,
    status TEXT NOT NULL,
    repair INTEGER NOT NULL,
    requested_by TEXT NOT NULL,
    up_to_position INTEGER NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT NULL,
    heartbeat_at TEXT NOT NULL,
    report TEXT NULL,
    error TEXT NULL
);
