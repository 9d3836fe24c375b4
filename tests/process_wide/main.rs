//! Integration tests that read or install process-wide state, kept out of the main
//! suite's process (`tests/suite`): `http_limits` counts the series of the
//! process-wide Prometheus recorder and must not see the suite's requests grow them;
//! `outbox` installs a global tracing subscriber that captures every log line of the
//! process. The two do not disturb each other (the outbox tests never touch `/health`
//! or an unmatched route, the series `http_limits` counts; nor do their dead-letter
//! tests, `outbox_dead_letters`, which share their helpers).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod http_limits;
mod outbox;
mod outbox_dead_letters;
