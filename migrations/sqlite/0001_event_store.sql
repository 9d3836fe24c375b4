-- The event store (SPEC §2); see migrations/mysql/0001 for the reasoning.
CREATE TABLE events (
    global_position INTEGER NOT NULL PRIMARY KEY,
    aggregate_type TEXT NOT NULL,
    aggregate_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    event_version INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    metadata TEXT NOT NULL,
    correlation_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    hash TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    ledger_ref_type TEXT NULL,
    ledger_ref_id TEXT NULL,
    ledger_entry_type TEXT NULL,
    UNIQUE (aggregate_type, aggregate_id, sequence)
);
-- One business action takes effect once (R-INV-1). NULLs (non-ledger events) never collide.
CREATE UNIQUE INDEX uq_events_ledger_ref ON events (ledger_ref_type, ledger_ref_id, ledger_entry_type);
CREATE INDEX ix_events_correlation ON events (correlation_id, global_position);
CREATE INDEX ix_events_actor ON events (actor, global_position);
CREATE INDEX ix_events_type_time ON events (event_type, recorded_at, global_position);

-- Append-only, enforced by the database itself (SPEC R-INV-9).
CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE refused');
END;

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE refused');
END;

CREATE TABLE event_sequence (
    id INTEGER NOT NULL PRIMARY KEY,
    last_position INTEGER NOT NULL
);
INSERT INTO event_sequence (id, last_position) VALUES (1, 0);

CREATE TABLE snapshots (
    aggregate_type TEXT NOT NULL,
    aggregate_id TEXT NOT NULL,
    snapshot_version INTEGER NOT NULL,
    stream_version INTEGER NOT NULL,
    last_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    taken_at TEXT NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);

CREATE TABLE command_log (
    idempotency_key TEXT NOT NULL PRIMARY KEY,
    request_hash TEXT NOT NULL,
    first_position INTEGER NOT NULL,
    last_position INTEGER NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE api_keys (
    key_id TEXT NOT NULL PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT NULL
);
