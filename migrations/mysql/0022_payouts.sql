-- Withdrawals and payouts (issue 17): the withdrawal list projection and the
-- payment-password credentials (never events: a hash in the log could not be erased).

CREATE TABLE withdrawal_records (
    withdrawal_id VARCHAR(128) NOT NULL PRIMARY KEY,
    user_id VARCHAR(128) NOT NULL,
    wallet_id VARCHAR(128) NOT NULL,
    currency CHAR(3) NOT NULL,
    amount_minor BIGINT NOT NULL,
    status VARCHAR(32) NOT NULL,
    provider VARCHAR(128) NOT NULL,
    review VARCHAR(16) NOT NULL,
    attempts BIGINT NOT NULL,
    provider_payout_id VARCHAR(128) NULL,
    requested_at VARCHAR(32) NOT NULL,
    updated_at VARCHAR(40) NOT NULL,
    version BIGINT NOT NULL,
    last_position BIGINT NOT NULL,
    -- GET /v1/withdrawals?user_id=&status=, paged by withdrawal_id.
    KEY ix_withdrawal_records_user (user_id, status, withdrawal_id),
    KEY ix_withdrawal_records_status (status, withdrawal_id),
    KEY ix_withdrawal_records_wallet (wallet_id, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE payment_passwords (
    user_id VARCHAR(128) NOT NULL PRIMARY KEY,
    -- argon2id PHC string; read only by the verifier, never returned or logged.
    password_hash VARCHAR(255) NOT NULL,
    failed_attempts INT NOT NULL,
    locked_until_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
