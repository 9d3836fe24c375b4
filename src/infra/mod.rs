//! Infrastructure: the event store, the one database handle, the jobs engine and cron,
//! the outbox, API keys, alerts and telemetry. **Architecture invariant:** nothing here
//! imports `runtime` or a capability (checked by `tools/check-layers.sh`).

pub mod alerts;
pub mod auth;
pub mod db;
pub mod jobs;
pub mod json;
pub mod outbound;
pub mod outbox;
pub mod secret_file;
pub mod store;
pub mod telemetry;

/// Default listen address (loopback: expose deliberately, behind TLS).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
