//! The command and projection runtime: the command bus and unit of work, the
//! projection runner, rebuild, the reconciliation framework and the HTTP plumbing every
//! capability's handlers share. **Architecture invariant:** imports `infra` only, never
//! a capability (checked by `tools/check-layers.sh`).

pub mod admin_log;
pub mod bus;
pub mod http;
pub mod projection;
pub mod projector;
pub mod rebuild;
pub mod reconcile;
pub mod unit;
