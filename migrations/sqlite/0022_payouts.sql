-- Withdrawals and payouts (issue 17): the withdrawal list projection and the
-- payment-password credentials (never events: a hash in the log could not be erased).

CREATE TABLE withdrawal_records (
    withdrawal_id TEXT NOT NULL PRIMARY KEY,
    user_id TEXT NOT NULL,
    wallet_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    amount_minor INTEGER NOT NULL,
    status TEXT NOT NULL,
    provider TEXT NOT NULL,
    review TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    provider_payout_id TEXT NULL,
    requested_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    version INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);
CREATE INDEX ix_withdrawal_records_user ON withdrawal_records (user_id, status, withdrawal_id);
CREATE INDEX ix_withdrawal_records_status ON withdrawal_records (status, withdrawal_id);
CREATE INDEX ix_withdrawal_records_wallet ON withdrawal_records (wallet_id, status);

CREATE TABLE payment_passwords (
    user_id TEXT NOT NULL PRIMARY KEY,
    password_hash TEXT NOT NULL,
    failed_attempts INTEGER NOT NULL,
    locked_until_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
