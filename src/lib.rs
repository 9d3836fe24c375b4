//! factledger: an event-sourced money ledger. See ARCHITECTURE.md for the map.
//!
//! Three layers, each importing only downward: [`infra`] (event store, the database
//! handle, jobs, outbox, auth, telemetry) → [`runtime`] (command bus, unit of work,
//! projection runner, rebuild, reconciliation, the HTTP plumbing) → one folder per
//! capability ([`wallet`], [`affiliate`], [`bill`], [`callbacks`], [`payouts`], [`audit`],
//! [`ops`]), and the operator [`console`], which calls the API and no capability.
//! Only the composition root ([`server`], `main.rs`) knows every capability.
#![forbid(unsafe_code)]

pub mod infra;
pub mod runtime;

pub mod affiliate;
pub mod audit;
pub mod bill;
pub mod callbacks;
pub mod console;
pub mod ledger;
pub mod ops;
pub mod payouts;
pub mod services;
pub mod wallet;

pub mod server;
