-- Affiliate projections (issue 5 item 6); see migrations/mysql/0012.
-- One projector each, with its own checkpoint
-- row in projection_checkpoints. Rows are written by the generic runner
-- (src/projector.rs) from the pure folds in projections/src/affiliate.rs.
CREATE TABLE affiliate_orders (
    order_id TEXT NOT NULL PRIMARY KEY,
    platform TEXT NOT NULL,
    platform_order_id TEXT NOT NULL,
    country TEXT NOT NULL,
    status TEXT NOT NULL,
    currency TEXT NOT NULL,
    gmv_minor INTEGER NOT NULL,
    platform_commission_minor INTEGER NOT NULL,
    base_minor INTEGER NOT NULL,
    cashback_minor INTEGER NOT NULL,
    inviter_reward_minor INTEGER NOT NULL,
    ordered_at TEXT NOT NULL,
    platform_updated_at TEXT NOT NULL,
    owner_user_id TEXT NULL,
    inviter_user_id TEXT NULL,
    rule_set_id TEXT NOT NULL,
    rule_version INTEGER NOT NULL,
    audit_only INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    version INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);

CREATE TABLE commission_records (
    commission_id TEXT NOT NULL PRIMARY KEY,
    order_id TEXT NOT NULL,
    role TEXT NOT NULL,
    beneficiary_user_id TEXT NOT NULL,
    wallet_id TEXT NOT NULL,
    status TEXT NOT NULL,
    amount_minor INTEGER NOT NULL,
    recorded_amount_minor INTEGER NOT NULL,
    currency TEXT NOT NULL,
    release_at TEXT NOT NULL,
    released_at TEXT NULL,
    rule_set_id TEXT NOT NULL,
    rule_version INTEGER NOT NULL,
    cashback_bps INTEGER NOT NULL,
    inviter_bps INTEGER NOT NULL,
    max_commission_base_bps INTEGER NOT NULL,
    order_revision INTEGER NOT NULL,
    version INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);

CREATE TABLE campaign_usage (
    campaign_id TEXT NOT NULL PRIMARY KEY,
    quota_unit TEXT NOT NULL,
    quota_limit INTEGER NOT NULL,
    currency TEXT NULL,
    starts_at TEXT NOT NULL,
    ends_at TEXT NULL,
    reserved INTEGER NOT NULL,
    version INTEGER NOT NULL,
    last_position INTEGER NOT NULL
);

CREATE TABLE campaign_reservations (
    campaign_id TEXT NOT NULL,
    order_id TEXT NOT NULL,
    units INTEGER NOT NULL,
    ordered_at TEXT NOT NULL,
    status TEXT NOT NULL,
    release_reason TEXT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, order_id)
);

CREATE UNIQUE INDEX ux_affiliate_orders_platform ON affiliate_orders (platform, platform_order_id);
CREATE INDEX ix_commission_records_user ON commission_records (beneficiary_user_id, status, commission_id);
CREATE INDEX ix_commission_records_due ON commission_records (status, release_at, commission_id);
CREATE INDEX ix_commission_records_order ON commission_records (order_id);
