-- The event store (SPEC §2). Positions are assigned by the appender from
-- event_sequence under a row lock held to commit (see ARCHITECTURE.md, "Global order"),
-- never by AUTO_INCREMENT.
CREATE TABLE events (
    global_position BIGINT NOT NULL PRIMARY KEY,
    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id VARCHAR(128) NOT NULL,
    sequence BIGINT NOT NULL,
    event_type VARCHAR(128) NOT NULL,
    event_version INT NOT NULL,
    event_id CHAR(36) NOT NULL,
    payload LONGTEXT NOT NULL,
    metadata LONGTEXT NOT NULL,
    correlation_id VARCHAR(128) NOT NULL,
    actor VARCHAR(128) NOT NULL,
    hash CHAR(64) NOT NULL,
    recorded_at DATETIME(6) NOT NULL,
    -- The business key of a ledger entry (NULL for other events). Unique: one business
    -- action takes effect once (R-INV-1), the last line of defence.
    ledger_ref_type VARCHAR(128) NULL,
    ledger_ref_id VARCHAR(128) NULL,
    ledger_entry_type VARCHAR(64) NULL,
    UNIQUE KEY uq_events_stream (aggregate_type, aggregate_id, sequence),
    UNIQUE KEY uq_events_ledger_ref (ledger_ref_type, ledger_ref_id, ledger_entry_type),
    KEY ix_events_correlation (correlation_id, global_position),
    KEY ix_events_actor (actor, global_position),
    KEY ix_events_type_time (event_type, recorded_at, global_position)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Append-only, enforced by the database itself (SPEC R-INV-9).
CREATE TRIGGER events_refuse_update BEFORE UPDATE ON events FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'events are append-only: UPDATE refused';

CREATE TRIGGER events_refuse_delete BEFORE DELETE ON events FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'events are append-only: DELETE refused';

-- The single row whose lock orders all appends (R-ES-4).
CREATE TABLE event_sequence (
    id TINYINT NOT NULL PRIMARY KEY,
    last_position BIGINT NOT NULL
) ENGINE = InnoDB;

INSERT INTO event_sequence (id, last_position) VALUES (1, 0);

CREATE TABLE snapshots (
    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id VARCHAR(128) NOT NULL,
    snapshot_version INT NOT NULL,
    stream_version BIGINT NOT NULL,
    last_hash CHAR(64) NOT NULL,
    state LONGTEXT NOT NULL,
    taken_at DATETIME(6) NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Idempotency keys (R-ES-9), written in the append transaction.
CREATE TABLE command_log (
    idempotency_key VARCHAR(128) NOT NULL PRIMARY KEY,
    request_hash CHAR(64) NOT NULL,
    first_position BIGINT NOT NULL,
    last_position BIGINT NOT NULL,
    created_at DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- API keys: only a SHA-256 of each key is stored.
CREATE TABLE api_keys (
    key_id VARCHAR(64) NOT NULL PRIMARY KEY,
    key_hash CHAR(64) NOT NULL,
    role VARCHAR(16) NOT NULL,
    created_at DATETIME(6) NOT NULL,
    revoked_at DATETIME(6) NULL,
    UNIQUE KEY uq_api_keys_hash (key_hash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
