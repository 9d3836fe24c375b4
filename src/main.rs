//! The `factledger` binary: the service and its operator commands.
//!
//! Every argument read from the environment hides its value in `--help`
//! (`hide_env_values`): `DATABASE_URL` may carry a password (issue 14, F11); a test
//! in `cli::args` walks the whole command tree to keep it so.
#![forbid(unsafe_code)]

mod cli;

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    factledger::infra::telemetry::init();
    let cli = cli::Cli::parse();
    match cli::run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
