-- The callback inbox (issue 4 item 7); see migrations/mysql/0009 for the meaning of
-- each column.
CREATE TABLE callback_inbox (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    provider TEXT NOT NULL,
    provider_event_id TEXT NULL,
    event_type TEXT NULL,
    received_at_ms INTEGER NOT NULL,
    headers TEXT NOT NULL,
    raw_body BLOB NOT NULL,
    verify_status INTEGER NOT NULL,
    verify_error TEXT NULL,
    normalized_payload TEXT NULL,
    normalize_error TEXT NULL,
    handle_status INTEGER NOT NULL,
    handle_attempts INTEGER NOT NULL DEFAULT 0,
    handle_error TEXT NULL,
    handled_at_ms INTEGER NULL,
    duplicate_of INTEGER NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (provider, provider_event_id)
);
CREATE INDEX ix_callback_inbox_handle ON callback_inbox (handle_status, id);
CREATE INDEX ix_callback_inbox_provider ON callback_inbox (provider, id);
