//! Structured logs: `tracing` with an env filter (`RUST_LOG`, default `info`), on
//! standard error, in the format `FACTLEDGER_LOG_FORMAT` names:
//!
//! - `auto` (default): coloured text on a terminal; one JSON object per line
//!   otherwise (a file, a pipe, a log shipper) — never ANSI codes in a file;
//! - `json`: one JSON object per line, always;
//! - `text`: one plain line per event, coloured only on a terminal.
//!
//! What is logged at `info` stays well under 5 % of a request's cost: a request that
//! succeeds, or is refused for a business reason, logs at `debug` (its outcome is in
//! the response, the metrics count it); `info` carries what an operator acts on —
//! start-up, batches, jobs, outbox and provider outcomes — and `error` every 500
//! under its `error_id`.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// The log formats of `FACTLEDGER_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// The format for `setting` (the variable's value, if set) when standard error is
/// (`terminal`) or is not a terminal. An unknown value falls back to `auto`.
pub fn log_format(setting: Option<&str>, terminal: bool) -> LogFormat {
    match setting.map(str::trim) {
        Some("json") => LogFormat::Json,
        Some("text") => LogFormat::Text,
        _ if terminal => LogFormat::Text,
        _ => LogFormat::Json,
    }
}

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let terminal = std::io::stderr().is_terminal();
    let setting = std::env::var("FACTLEDGER_LOG_FORMAT").ok();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal)
        .with_writer(std::io::stderr);
    let _ = match log_format(setting.as_deref(), terminal) {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_or_pipe_gets_json_and_a_terminal_text_unless_told() {
        assert_eq!(log_format(None, false), LogFormat::Json);
        assert_eq!(log_format(None, true), LogFormat::Text);
        assert_eq!(log_format(Some("auto"), false), LogFormat::Json);
        assert_eq!(log_format(Some("text"), false), LogFormat::Text);
        assert_eq!(log_format(Some("json"), true), LogFormat::Json);
    }
}
