-- Paid services on in-app credit (issue 18, seed 000): the `services` projection's
-- tables (orders with their recharges and payment transactions, candy accounts,
-- subscriptions and grants, bookings, refunds, IM group membership), with the indexes
-- the cron scans walk in small batches. Chart version 3: candy accounts and cash
-- service orders post, so the journal is emptied and replayed (as 0021 did).

CREATE TABLE service_orders (
    order_no VARCHAR(128) NOT NULL,
    user_id BIGINT NOT NULL,
    business_type VARCHAR(128) NOT NULL,
    artist_id BIGINT NULL,
    booking_no VARCHAR(128) NULL,
    candy BIGINT NULL,
    days BIGINT NULL,
    method VARCHAR(128) NOT NULL,
    amount BIGINT NOT NULL,
    currency VARCHAR(128) NULL,
    status BIGINT NOT NULL,
    status_name VARCHAR(128) NOT NULL,
    transaction_no VARCHAR(128) NULL,
    created_at VARCHAR(128) NOT NULL,
    timeout_at VARCHAR(128) NOT NULL,
    paid_at VARCHAR(128) NULL,
    delivered_at VARCHAR(128) NULL,
    closed_at VARCHAR(128) NULL,
    refund_no VARCHAR(128) NULL,
    updated_at VARCHAR(128) NOT NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (order_no),
    KEY ix_service_orders_status_timeout (status, timeout_at),
    KEY ix_service_orders_status_paid (status, paid_at),
    KEY ix_service_orders_user (user_id, order_no)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE candy_recharges (
    order_no VARCHAR(128) NOT NULL,
    user_id BIGINT NOT NULL,
    candy BIGINT NOT NULL,
    status VARCHAR(128) NOT NULL,
    updated_at VARCHAR(128) NOT NULL,
    PRIMARY KEY (order_no),
    KEY ix_candy_recharges_user (user_id, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE payment_transactions (
    order_no VARCHAR(128) NOT NULL,
    transaction_no VARCHAR(128) NOT NULL,
    method VARCHAR(128) NOT NULL,
    account_id VARCHAR(128) NOT NULL,
    amount_minor BIGINT NOT NULL,
    currency VARCHAR(128) NOT NULL,
    status VARCHAR(128) NOT NULL,
    refund_no VARCHAR(128) NULL,
    paid_at VARCHAR(128) NOT NULL,
    updated_at VARCHAR(128) NOT NULL,
    PRIMARY KEY (order_no, transaction_no)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE candy_accounts (
    user_id BIGINT NOT NULL,
    balance BIGINT NOT NULL,
    held BIGINT NOT NULL,
    updated_at VARCHAR(128) NOT NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE subscriptions (
    artist_id BIGINT NOT NULL,
    fan_user_id BIGINT NOT NULL,
    status BIGINT NOT NULL,
    expires_at VARCHAR(128) NOT NULL,
    last_order_no VARCHAR(128) NOT NULL,
    updated_at VARCHAR(128) NOT NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (artist_id, fan_user_id),
    KEY ix_subscriptions_status_expires (status, expires_at),
    KEY ix_subscriptions_fan (fan_user_id, artist_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE subscription_grants (
    order_no VARCHAR(128) NOT NULL,
    artist_id BIGINT NOT NULL,
    fan_user_id BIGINT NOT NULL,
    period_start VARCHAR(128) NOT NULL,
    expires_at VARCHAR(128) NOT NULL,
    renewal BIGINT NOT NULL,
    granted_at VARCHAR(128) NOT NULL,
    message_queued BIGINT NOT NULL,
    PRIMARY KEY (order_no),
    KEY ix_subscription_grants_queued (message_queued, granted_at),
    KEY ix_subscription_grants_pair (artist_id, fan_user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE bookings (
    booking_no VARCHAR(128) NOT NULL,
    order_no VARCHAR(128) NOT NULL,
    fan_user_id BIGINT NOT NULL,
    artist_id BIGINT NOT NULL,
    status BIGINT NOT NULL,
    status_name VARCHAR(128) NOT NULL,
    start_at VARCHAR(128) NOT NULL,
    minutes BIGINT NOT NULL,
    price_candy BIGINT NOT NULL,
    fan_joined_at VARCHAR(128) NULL,
    artist_joined_at VARCHAR(128) NULL,
    started_at VARCHAR(128) NULL,
    ended_at VARCHAR(128) NULL,
    duration_s BIGINT NULL,
    abnormal BIGINT NOT NULL,
    moderation_reason TEXT NULL,
    no_show_checked_at VARCHAR(128) NULL,
    hold_state VARCHAR(128) NOT NULL,
    refund_no VARCHAR(128) NULL,
    updated_at VARCHAR(128) NOT NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (booking_no),
    KEY ix_bookings_status_start (status, start_at),
    KEY ix_bookings_status_started (status, started_at),
    KEY ix_bookings_fan (fan_user_id, booking_no),
    KEY ix_bookings_artist (artist_id, booking_no)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE refunds (
    refund_no VARCHAR(128) NOT NULL,
    order_no VARCHAR(128) NOT NULL,
    booking_no VARCHAR(128) NULL,
    business VARCHAR(128) NOT NULL,
    method VARCHAR(128) NOT NULL,
    transaction_no VARCHAR(128) NOT NULL,
    account_id VARCHAR(128) NOT NULL,
    amount BIGINT NOT NULL,
    currency VARCHAR(128) NOT NULL,
    status BIGINT NOT NULL,
    status_name VARCHAR(128) NOT NULL,
    gateway_response TEXT NULL,
    gateway_refund_id VARCHAR(128) NULL,
    failure_reason TEXT NULL,
    created_at VARCHAR(128) NOT NULL,
    updated_at VARCHAR(128) NOT NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (refund_no),
    KEY ix_refunds_status (status, updated_at),
    KEY ix_refunds_order (order_no)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE im_group_members (
    artist_id BIGINT NOT NULL,
    fan_user_id BIGINT NOT NULL,
    member_status BIGINT NOT NULL,
    updated_at VARCHAR(128) NOT NULL,
    last_position BIGINT NOT NULL,
    PRIMARY KEY (artist_id, fan_user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

DELETE FROM journal;
DELETE FROM account_balances;
DELETE FROM journal_stream_currencies;
UPDATE projection_checkpoints
   SET position = 0, version = 3, last_error = NULL, error_position = NULL
 WHERE name = 'journal';
