-- Paid services (issue 18); see migrations/mysql/0023.

CREATE TABLE service_orders (
    order_no TEXT NOT NULL,
    user_id INTEGER NOT NULL,
    business_type TEXT NOT NULL,
    artist_id INTEGER NULL,
    booking_no TEXT NULL,
    candy INTEGER NULL,
    days INTEGER NULL,
    method TEXT NOT NULL,
    amount INTEGER NOT NULL,
    currency TEXT NULL,
    status INTEGER NOT NULL,
    status_name TEXT NOT NULL,
    transaction_no TEXT NULL,
    created_at TEXT NOT NULL,
    timeout_at TEXT NOT NULL,
    paid_at TEXT NULL,
    delivered_at TEXT NULL,
    closed_at TEXT NULL,
    refund_no TEXT NULL,
    updated_at TEXT NOT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (order_no)
);
CREATE INDEX ix_service_orders_status_timeout ON service_orders (status, timeout_at);
CREATE INDEX ix_service_orders_status_paid ON service_orders (status, paid_at);
CREATE INDEX ix_service_orders_user ON service_orders (user_id, order_no);

CREATE TABLE candy_recharges (
    order_no TEXT NOT NULL,
    user_id INTEGER NOT NULL,
    candy INTEGER NOT NULL,
    status TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (order_no)
);
CREATE INDEX ix_candy_recharges_user ON candy_recharges (user_id, status);

CREATE TABLE payment_transactions (
    order_no TEXT NOT NULL,
    transaction_no TEXT NOT NULL,
    method TEXT NOT NULL,
    account_id TEXT NOT NULL,
    amount_minor INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status TEXT NOT NULL,
    refund_no TEXT NULL,
    paid_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (order_no, transaction_no)
);

CREATE TABLE candy_accounts (
    user_id INTEGER NOT NULL,
    balance INTEGER NOT NULL,
    held INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (user_id)
);

CREATE TABLE subscriptions (
    artist_id INTEGER NOT NULL,
    fan_user_id INTEGER NOT NULL,
    status INTEGER NOT NULL,
    expires_at TEXT NOT NULL,
    last_order_no TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (artist_id, fan_user_id)
);
CREATE INDEX ix_subscriptions_status_expires ON subscriptions (status, expires_at);
CREATE INDEX ix_subscriptions_fan ON subscriptions (fan_user_id, artist_id);

CREATE TABLE subscription_grants (
    order_no TEXT NOT NULL,
    artist_id INTEGER NOT NULL,
    fan_user_id INTEGER NOT NULL,
    period_start TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    renewal INTEGER NOT NULL,
    granted_at TEXT NOT NULL,
    message_queued INTEGER NOT NULL,
    PRIMARY KEY (order_no)
);
CREATE INDEX ix_subscription_grants_queued ON subscription_grants (message_queued, granted_at);
CREATE INDEX ix_subscription_grants_pair ON subscription_grants (artist_id, fan_user_id);

CREATE TABLE bookings (
    booking_no TEXT NOT NULL,
    order_no TEXT NOT NULL,
    fan_user_id INTEGER NOT NULL,
    artist_id INTEGER NOT NULL,
    status INTEGER NOT NULL,
    status_name TEXT NOT NULL,
    start_at TEXT NOT NULL,
    minutes INTEGER NOT NULL,
    price_candy INTEGER NOT NULL,
    fan_joined_at TEXT NULL,
    artist_joined_at TEXT NULL,
    started_at TEXT NULL,
    ended_at TEXT NULL,
    duration_s INTEGER NULL,
    abnormal INTEGER NOT NULL,
    moderation_reason TEXT NULL,
    no_show_checked_at TEXT NULL,
    hold_state TEXT NOT NULL,
    refund_no TEXT NULL,
    updated_at TEXT NOT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (booking_no)
);
CREATE INDEX ix_bookings_status_start ON bookings (status, start_at);
CREATE INDEX ix_bookings_status_started ON bookings (status, started_at);
CREATE INDEX ix_bookings_fan ON bookings (fan_user_id, booking_no);
CREATE INDEX ix_bookings_artist ON bookings (artist_id, booking_no);

CREATE TABLE refunds (
    refund_no TEXT NOT NULL,
    order_no TEXT NOT NULL,
    booking_no TEXT NULL,
    business TEXT NOT NULL,
    method TEXT NOT NULL,
    transaction_no TEXT NOT NULL,
    account_id TEXT NOT NULL,
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    status INTEGER NOT NULL,
    status_name TEXT NOT NULL,
    gateway_response TEXT NULL,
    gateway_refund_id TEXT NULL,
    failure_reason TEXT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (refund_no)
);
CREATE INDEX ix_refunds_status ON refunds (status, updated_at);
CREATE INDEX ix_refunds_order ON refunds (order_no);

CREATE TABLE im_group_members (
    artist_id INTEGER NOT NULL,
    fan_user_id INTEGER NOT NULL,
    member_status INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    last_position INTEGER NOT NULL,
    PRIMARY KEY (artist_id, fan_user_id)
);

DELETE FROM journal;
DELETE FROM account_balances;
DELETE FROM journal_stream_currencies;
UPDATE projection_checkpoints
   SET position = 0, version = 3, last_error = NULL, error_position = NULL
 WHERE name = 'journal';
