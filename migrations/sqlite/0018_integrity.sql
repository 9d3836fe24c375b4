-- Tamper evidence (see migrations/mysql/0018 for the reasoning).
ALTER TABLE events ADD COLUMN hash_key TEXT NOT NULL DEFAULT '';

-- INSERT OR REPLACE resolves a conflict by deleting the old row, and SQLite fires no
-- DELETE trigger for it (unless the connection turned recursive_triggers on): an
-- event could be rewritten past the append-only triggers (F4). BEFORE INSERT triggers
-- run before conflict resolution, so refusing any insert that would collide closes
-- that path whatever the connection's settings. A plain colliding INSERT fails anyway.
-- One trigger per unique key, each with its own message: the store maps the ledger
-- reference's message to DuplicateLedgerRef as it maps the unique index's.
CREATE TRIGGER events_refuse_replace_position BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE global_position = NEW.global_position)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: position taken');
END;

CREATE TRIGGER events_refuse_replace_sequence BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE aggregate_type = NEW.aggregate_type
             AND aggregate_id = NEW.aggregate_id AND sequence = NEW.sequence)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: stream sequence taken');
END;

CREATE TRIGGER events_refuse_replace_ledger_ref BEFORE INSERT ON events
WHEN NEW.ledger_ref_type IS NOT NULL AND EXISTS (SELECT 1 FROM events
             WHERE ledger_ref_type = NEW.ledger_ref_type AND ledger_ref_id = NEW.ledger_ref_id
             AND ledger_entry_type = NEW.ledger_entry_type)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: ledger reference taken');
END;

CREATE TABLE chain_anchors (
    anchor_seq INTEGER NOT NULL PRIMARY KEY,
    head_position INTEGER NOT NULL,
    head_hash TEXT NOT NULL,
    chain_digest TEXT NOT NULL,
    signing_key_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL
);
