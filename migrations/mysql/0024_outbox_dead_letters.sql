-- Outbox dead letters (issue 18 item 7). A message a sink refused past its retry
-- schedule is written here in the transaction that moves the sink's checkpoint past
-- it, so one poisoned message cannot hold the sink's later messages back. The outbox
-- row itself stays (append-only); operators list and replay dead letters
-- (`GET /v1/outbox/dead-letters`, `POST /v1/outbox/dead-letters/{id}:replay`).
-- Times are UTC epoch milliseconds (`*_ms`).
CREATE TABLE outbox_dead_letters (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    sink VARCHAR(64) NOT NULL,
    outbox_id BIGINT NOT NULL,
    type VARCHAR(128) NOT NULL,
    aggregatetype VARCHAR(64) NOT NULL,
    aggregateid VARCHAR(128) NOT NULL,
    -- Deliveries the sink refused: the retry schedule's steps + 1.
    attempts BIGINT NOT NULL,
    last_error VARCHAR(1000) NOT NULL,
    dead_at_ms BIGINT NOT NULL,
    replayed_at_ms BIGINT NULL,
    replayed_by VARCHAR(128) NULL,
    replay_error VARCHAR(1000) NULL,
    UNIQUE KEY ux_outbox_dead_letters_sink (sink, outbox_id),
    -- The open ones (`replayed_at_ms IS NULL`) in id order, and each sink's count.
    KEY ix_outbox_dead_letters_open (replayed_at_ms, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Refusals of the message at the head of a sink (the one after `delivered_id`),
-- counted against its retry schedule; back to 0 whenever the checkpoint moves. Kept
-- apart from `attempts` (every failure of the streak, the sink being down included),
-- which must never make a message a dead letter.
ALTER TABLE outbox_sinks ADD COLUMN refusals BIGINT NOT NULL DEFAULT 0;
