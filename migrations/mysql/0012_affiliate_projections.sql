-- Affiliate projections (issue 5 item 6): one projector each, with its own checkpoint
-- row in projection_checkpoints. Rows are written by the generic runner
-- (src/projector.rs) from the pure folds in projections/src/affiliate.rs.
CREATE TABLE affiliate_orders (
    order_id VARCHAR(128) NOT NULL PRIMARY KEY,
    platform VARCHAR(16) NOT NULL,
    platform_order_id VARCHAR(64) NOT NULL,
    country CHAR(2) NOT NULL,
    status VARCHAR(32) NOT NULL,
    currency CHAR(3) NOT NULL,
    gmv_minor BIGINT NOT NULL,
    platform_commission_minor BIGINT NOT NULL,
    base_minor BIGINT NOT NULL,
    cashback_minor BIGINT NOT NULL,
    inviter_reward_minor BIGINT NOT NULL,
    ordered_at VARCHAR(32) NOT NULL,
    platform_updated_at VARCHAR(32) NOT NULL,
    owner_user_id VARCHAR(128) NULL,
    inviter_user_id VARCHAR(128) NULL,
    rule_set_id VARCHAR(128) NOT NULL,
    rule_version BIGINT NOT NULL,
    audit_only INT NOT NULL,
    revision BIGINT NOT NULL,
    version BIGINT NOT NULL,
    last_position BIGINT NOT NULL,
    UNIQUE KEY ux_affiliate_orders_platform (platform, platform_order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE commission_records (
    commission_id VARCHAR(160) NOT NULL PRIMARY KEY,
    order_id VARCHAR(128) NOT NULL,
    role VARCHAR(32) NOT NULL,
    beneficiary_user_id VARCHAR(128) NOT NULL,
    wallet_id VARCHAR(128) NOT NULL,
    status VARCHAR(32) NOT NULL,
    amount_minor BIGINT NOT NULL,
    recorded_amount_minor BIGINT NOT NULL,
    currency CHAR(3) NOT NULL,
    release_at VARCHAR(32) NOT NULL,
    released_at VARCHAR(32) NULL,
    rule_set_id VARCHAR(128) NOT NULL,
    rule_version BIGINT NOT NULL,
    cashback_bps INT NOT NULL,
    inviter_bps INT NOT NULL,
    max_commission_base_bps INT NOT NULL,
    order_revision BIGINT NOT NULL,
    version BIGINT NOT NULL,
    last_position BIGINT NOT NULL,
    -- GET /v1/commissions?user_id=&status=, paged by commission_id.
    KEY ix_commission_records_user (beneficiary_user_id, status, commission_id),
    -- Settlement's scan (R-COM-2): PENDING with release_at <= now, by release_at, id.
    KEY ix_commission_records_due (status, release_at, commission_id),
    KEY ix_commission_records_order (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE campaign_usage (
    campaign_id VARCHAR(128) NOT NULL PRIMARY KEY,
    quota_unit VARCHAR(16) NOT NULL,
    quota_limit BIGINT NOT NULL,
    currency CHAR(3) NULL,
    starts_at VARCHAR(32) NOT NULL,
    ends_at VARCHAR(32) NULL,
    reserved BIGINT NOT NULL,
    version BIGINT NOT NULL,
    last_position BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE campaign_reservations (
    campaign_id VARCHAR(128) NOT NULL,
    order_id VARCHAR(128) NOT NULL,
    units BIGINT NOT NULL,
    ordered_at VARCHAR(32) NOT NULL,
    status VARCHAR(16) NOT NULL,
    release_reason VARCHAR(32) NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
