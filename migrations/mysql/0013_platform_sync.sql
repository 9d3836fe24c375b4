-- Platform order sync state (issue 5 item 5; SPEC R-ORD-8, R-COM-4; seed 003 §10.1).
-- One row per platform × country × task (`incremental` or `lookback`), written only by
-- the round that holds the task's job claim (fenced: the write commits only while the
-- job is RUNNING with that attempt). Times are UTC epoch milliseconds (`*_ms`).
CREATE TABLE platform_sync_state (
    platform VARCHAR(16) NOT NULL,
    country CHAR(2) NOT NULL,
    task VARCHAR(16) NOT NULL,
    -- incremental: the watermark, end of the last window pulled to its last page (the
    -- next pull starts at it minus the overlap); lookback: the sweep cursor, lower end
    -- of the last slice swept (the next slice ends there; it wraps back to "now" after
    -- the oldest slice, so it never only moves forward). NULL before the first window.
    mark_ms BIGINT NULL,
    -- The window in progress, `[window_from_ms, window_to_ms)`; NULL when none.
    window_from_ms BIGINT NULL,
    window_to_ms BIGINT NULL,
    -- The page checkpoint: the token of the next page of the window in progress, saved
    -- after each page is ingested (a crash replays at most that one page).
    page_token VARCHAR(1024) NULL,
    -- Pages of the window in progress already ingested.
    pages_done INT NOT NULL DEFAULT 0,
    -- Windows pulled to their last page, ever (monitoring).
    windows_done BIGINT NOT NULL DEFAULT 0,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (platform, country, task)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
