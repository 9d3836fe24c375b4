-- Rebuilds on demand (issue 3); see migrations/mysql/0003 and src/rebuild.rs.
ALTER TABLE projection_checkpoints ADD COLUMN hold TEXT NULL;
ALTER TABLE projection_checkpoints ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

CREATE TABLE wallet_generation (
    id INTEGER NOT NULL PRIMARY KEY,
    generation INTEGER NOT NULL,
    position INTEGER NOT NULL
);
INSERT INTO wallet_generation (id, generation, position) VALUES (1, 0, 0);

CREATE TABLE projection_leases (
    name TEXT NOT NULL PRIMARY KEY,
    rebuild_id TEXT NULL,
    heartbeat TEXT NULL
);

CREATE TABLE projection_rebuilds (
    id TEXT NOT NULL PRIMARY KEY,
    projection TEXT NOT NULL,
    scope TEXT NULL,
    requested_by TEXT NOT NULL,
    status TEXT NOT NULL,
    stage TEXT NOT NULL,
    target_position INTEGER NOT NULL,
    position INTEGER NOT NULL,
    events_applied INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    finished_at TEXT NULL,
    error TEXT NULL
);
CREATE INDEX ix_projection_rebuilds_started ON projection_rebuilds (projection, started_at);
