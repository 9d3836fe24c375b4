-- The transactional outbox (issue 4); see migrations/mysql/0007.
ALTER TABLE event_sequence ADD COLUMN last_outbox_id INTEGER NOT NULL DEFAULT 0;

CREATE TABLE outbox (
    id INTEGER NOT NULL PRIMARY KEY,
    aggregatetype TEXT NOT NULL,
    aggregateid TEXT NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX ix_outbox_aggregate ON outbox (aggregatetype, aggregateid, id);

CREATE TRIGGER outbox_refuse_update BEFORE UPDATE ON outbox
BEGIN
    SELECT RAISE(ABORT, 'outbox is append-only: UPDATE refused');
END;

CREATE TABLE outbox_sinks (
    name TEXT NOT NULL PRIMARY KEY,
    delivered_id INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NULL,
    failing_since_ms INTEGER NULL,
    updated_at_ms INTEGER NOT NULL
);
