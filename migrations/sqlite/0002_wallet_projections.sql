-- Projection checkpoints (issue 3): each projector's position in the global log,
-- advanced with compare-and-set in the same transaction as its rows.
CREATE TABLE projection_checkpoints (
    name TEXT NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL,
    position INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    last_error TEXT NULL,
    error_position INTEGER NULL
);

CREATE TABLE wallet_balances (
    wallet_id TEXT NOT NULL PRIMARY KEY,
    user_id TEXT NOT NULL,
    currency TEXT NOT NULL,
    pending_minor INTEGER NOT NULL,
    available_minor INTEGER NOT NULL,
    frozen_minor INTEGER NOT NULL,
    risk_hold_minor INTEGER NOT NULL,
    version INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);

CREATE TABLE wallet_ledger (
    wallet_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    global_position INTEGER NOT NULL,
    ref_type TEXT NOT NULL,
    ref_id TEXT NOT NULL,
    entry_type TEXT NOT NULL,
    amount_minor INTEGER NOT NULL,
    delta_pending_minor INTEGER NOT NULL,
    delta_available_minor INTEGER NOT NULL,
    delta_frozen_minor INTEGER NOT NULL,
    delta_risk_hold_minor INTEGER NOT NULL,
    before_pending_minor INTEGER NOT NULL,
    before_available_minor INTEGER NOT NULL,
    before_frozen_minor INTEGER NOT NULL,
    before_risk_hold_minor INTEGER NOT NULL,
    after_pending_minor INTEGER NOT NULL,
    after_available_minor INTEGER NOT NULL,
    after_frozen_minor INTEGER NOT NULL,
    after_risk_hold_minor INTEGER NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (wallet_id, sequence)
);

CREATE TABLE wallet_blocks (
    wallet_id TEXT NOT NULL,
    ref_type TEXT NOT NULL,
    ref_id TEXT NOT NULL,
    reason TEXT NULL,
    PRIMARY KEY (wallet_id, ref_type, ref_id)
);
