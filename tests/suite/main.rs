//! The integration suite in one test binary (linking the whole service once instead
//! of once per file): one module per former `tests/<name>.rs`, so a test is named
//! `<module>::<test>` (a `both_backends!` test: `<module>::<test>::sqlite` and
//! `::mysql`). Shared support lives in `tests/common`; the one in-process service
//! is `common::app::spawn_app`.
//!
//! Kept out of this process, each in a binary of its own kind:
//! - `tests/process_wide`: tests that read or install process-wide state (the
//!   Prometheus recorder's series, a global tracing subscriber) and must not see
//!   this suite's traffic in it;
//! - `tests/faults_db_restart.rs`, `tests/faults_two_serves.rs`: fault tests that
//!   kill and restart databases and `serve` processes under load.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
/// Bill facts for the bill process tests (`bill_order_status`, `bill_snapshots`).
#[path = "../common/bill_env.rs"]
mod bill_env;
/// A service paying through the payout simulator (`withdrawals`).
#[path = "../common/payout_env.rs"]
mod payout_env;
/// A service with paid services on the gateway simulator (`services_*`).
#[path = "../common/services_env.rs"]
mod services_env;

mod affiliate_api;
mod affiliate_projections;
mod api;
mod api_key_seals;
mod auth_throttle;
mod batch;
mod bill_invariants;
mod bill_locks;
mod bill_order_status;
mod bill_projection;
mod bill_refresh;
mod bill_snapshots;
mod bills_api;
mod bus;
mod bus_failures;
mod callbacks;
mod cli;
mod console;
mod console_browser;
mod console_business;
mod console_ops;
mod console_wallet;
mod cron;
mod fencing;
mod fuzz_findings;
mod http_hygiene;
mod ingest;
mod ingest_pipeline;
mod integrity;
mod jobs;
mod jobs_api;
mod journal;
mod journal_property;
mod least_privilege;
mod parsing;
mod partitions;
mod payment_password_load;
mod platform_protocols;
mod platform_protocols_random;
mod platform_sync;
mod projection;
mod projector_property;
mod providers_cli;
mod rebuild;
mod reconcile;
mod role_matrix;
mod scope;
mod services_alipay;
mod services_appstore;
mod services_bookings;
mod services_cron;
mod services_orders;
mod services_property;
mod services_smoke;
mod services_subscriptions;
mod services_wechatpay;
mod settlement;
mod store;
mod tls;
mod unit;
mod wallet_read;
mod withdrawal_crash;
mod withdrawal_pairing;
mod withdrawal_property;
mod withdrawal_reconcile;
mod withdrawal_xendit;
mod withdrawals;
