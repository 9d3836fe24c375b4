-- The transactional outbox (issue 4; SPEC R-OUT-1): rows written inside the money
-- transaction that mean "tell the outside world", Debezium-style columns. Ids are
-- dense and taken from `event_sequence.last_outbox_id` under the same row lock that
-- orders appends, so they commit in id order and a relay reading `id > checkpoint`
-- never skips a row that commits late (the R-ES-4 argument, for the outbox).
ALTER TABLE event_sequence ADD COLUMN last_outbox_id BIGINT NOT NULL DEFAULT 0;

CREATE TABLE outbox (
    id BIGINT NOT NULL PRIMARY KEY,
    aggregatetype VARCHAR(64) NOT NULL,
    aggregateid VARCHAR(128) NOT NULL,
    type VARCHAR(128) NOT NULL,
    payload LONGTEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    KEY ix_outbox_aggregate (aggregatetype, aggregateid, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Append-only like the events: a relay moves its checkpoint, it never edits a row.
CREATE TRIGGER outbox_refuse_update BEFORE UPDATE ON outbox FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'outbox is append-only: UPDATE refused';

-- One checkpoint per sink: the last outbox id it delivered, and why it stopped if it
-- is stuck (it retries with backoff; the backlog drains in id order on recovery).
CREATE TABLE outbox_sinks (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    delivered_id BIGINT NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    last_error VARCHAR(1000) NULL,
    failing_since_ms BIGINT NULL,
    updated_at_ms BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
