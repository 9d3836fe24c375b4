//! factledger: an event-sourced money ledger. See ARCHITECTURE.md for the map.
#![forbid(unsafe_code)]

pub mod admin_log;
pub mod affiliate;
pub mod alerts;
pub mod api;
pub mod auth;
pub mod bill_commands;
pub mod bill_order_status;
pub mod bill_projection;
pub mod bill_refresh;
pub mod bill_snapshots;
pub mod bus;
pub mod callbacks;
pub mod db;
pub mod jobs;
pub mod json;
pub mod outbox;
pub mod projection;
pub mod projector;
pub mod rebuild;
pub mod reconcile;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod unit;
