-- Platform order sync state (issue 5 item 5); see migrations/mysql/0013 for the meaning
-- of each column.
CREATE TABLE platform_sync_state (
    platform TEXT NOT NULL,
    country TEXT NOT NULL,
    task TEXT NOT NULL,
    mark_ms INTEGER NULL,
    window_from_ms INTEGER NULL,
    window_to_ms INTEGER NULL,
    page_token TEXT NULL,
    pages_done INTEGER NOT NULL DEFAULT 0,
    windows_done INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (platform, country, task)
);
