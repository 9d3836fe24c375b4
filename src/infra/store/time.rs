//! Event time as the log stores and hashes it: RFC 3339 UTC with microseconds, a
//! fixed-width text that compares in time order.

use chrono::{DateTime, Utc};

/// Event time as stored and hashed: RFC 3339 UTC with microseconds.
pub fn time_text(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// [`time_text`] of the moment `ms` milliseconds ago (lease and heartbeat cut-offs:
/// the fixed-width text compares in time order).
pub fn time_text_ago(ms: i64) -> String {
    time_text(&(Utc::now() - chrono::Duration::milliseconds(ms)))
}
