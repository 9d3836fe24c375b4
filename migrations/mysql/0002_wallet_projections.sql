-- Projection checkpoints (issue 3): each projector's position in the global log,
-- advanced with compare-and-set in the same transaction as its rows.
CREATE TABLE projection_checkpoints (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    version INT NOT NULL,
    position BIGINT NOT NULL,
    -- RFC 3339 UTC text, written by the same code on both backends.
    updated_at VARCHAR(32) NOT NULL,
    last_error TEXT NULL,
    error_position BIGINT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE wallet_balances (
    wallet_id VARCHAR(128) NOT NULL PRIMARY KEY,
    user_id VARCHAR(128) NOT NULL,
    currency CHAR(3) NOT NULL,
    pending_minor BIGINT NOT NULL,
    available_minor BIGINT NOT NULL,
    frozen_minor BIGINT NOT NULL,
    risk_hold_minor BIGINT NOT NULL,
    version BIGINT NOT NULL,
    last_position BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE wallet_ledger (
    wallet_id VARCHAR(128) NOT NULL,
    sequence BIGINT NOT NULL,
    global_position BIGINT NOT NULL,
    ref_type VARCHAR(128) NOT NULL,
    ref_id VARCHAR(128) NOT NULL,
    entry_type VARCHAR(64) NOT NULL,
    amount_minor BIGINT NOT NULL,
    delta_pending_minor BIGINT NOT NULL,
    delta_available_minor BIGINT NOT NULL,
    delta_frozen_minor BIGINT NOT NULL,
    delta_risk_hold_minor BIGINT NOT NULL,
    before_pending_minor BIGINT NOT NULL,
    before_available_minor BIGINT NOT NULL,
    before_frozen_minor BIGINT NOT NULL,
    before_risk_hold_minor BIGINT NOT NULL,
    after_pending_minor BIGINT NOT NULL,
    after_available_minor BIGINT NOT NULL,
    after_frozen_minor BIGINT NOT NULL,
    after_risk_hold_minor BIGINT NOT NULL,
    recorded_at VARCHAR(32) NOT NULL,
    PRIMARY KEY (wallet_id, sequence)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE wallet_blocks (
    wallet_id VARCHAR(128) NOT NULL,
    ref_type VARCHAR(128) NOT NULL,
    ref_id VARCHAR(128) NOT NULL,
    reason TEXT NULL,
    PRIMARY KEY (wallet_id, ref_type, ref_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
