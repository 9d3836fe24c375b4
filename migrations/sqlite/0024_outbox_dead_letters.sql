-- Outbox dead letters (issue 18 item 7); see migrations/mysql/0024.
CREATE TABLE outbox_dead_letters (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    sink TEXT NOT NULL,
    outbox_id INTEGER NOT NULL,
    type TEXT NOT NULL,
    aggregatetype TEXT NOT NULL,
    aggregateid TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT NOT NULL,
    dead_at_ms INTEGER NOT NULL,
    replayed_at_ms INTEGER NULL,
    replayed_by TEXT NULL,
    replay_error TEXT NULL,
    UNIQUE (sink, outbox_id)
);
CREATE INDEX ix_outbox_dead_letters_open ON outbox_dead_letters (replayed_at_ms, id);

ALTER TABLE outbox_sinks ADD COLUMN refusals INTEGER NOT NULL DEFAULT 0;
