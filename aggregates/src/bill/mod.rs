//! Resident-income bill facts (SPEC §7, seed 001): events of every fact the bill
//! decision reads. See [`events`] for the streams.

pub mod events;

pub use events::*;
