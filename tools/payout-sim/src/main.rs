//! `payout-sim`: serve a simulated payout provider (Xendit's Payouts API v2) and
//! a simulated cash payment gateway for demos and benchmarks
//! (`cargo run -p payout-sim -- --listen 127.0.0.1:9200`). See the library docs for
//! the APIs, the callbacks and the control endpoints.
#![forbid(unsafe_code)]

use clap::Parser;
use payout_sim::{spawn, SimConfig};
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "payout-sim",
    about = "Simulated payout provider (Xendit Payouts API v2) and payment gateway (loopback only)"
)]
struct Cli {
    /// Address to listen on; loopback only (127.0.0.1:0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:9200")]
    listen: SocketAddr,
    /// Secret API key callers send as `Authorization: Basic base64("<secret>:")`.
    #[arg(
        long,
        env = "PAYOUT_SIM_SECRET",
        default_value = "xnd_development_payout_sim"
    )]
    secret: String,
    /// Where callbacks are POSTed; none without it.
    #[arg(long)]
    callback_url: Option<String>,
    /// Sent as `x-callback-token` with every callback.
    #[arg(
        long,
        env = "PAYOUT_SIM_CALLBACK_TOKEN",
        default_value = "payout-sim-callback-token"
    )]
    callback_token: String,
    /// A disbursement settles this long after its create answer.
    #[arg(long, default_value_t = 0)]
    complete_after_ms: u64,
    /// Where the payment gateway's pay callbacks are POSTed; none without it.
    #[arg(long)]
    gateway_callback_url: Option<String>,
    /// Pay callbacks carry HMAC-SHA256(this, body) as `x-gateway-signature`.
    #[arg(
        long,
        env = "PAYOUT_SIM_GATEWAY_CALLBACK_SECRET",
        default_value = payout_sim::gateway::CALLBACK_SECRET_DEFAULT
    )]
    gateway_callback_secret: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = SimConfig {
        listen: cli.listen,
        secret: cli.secret,
        callback_url: cli.callback_url,
        callback_token: cli.callback_token,
        complete_after_ms: cli.complete_after_ms,
        gateway_callback_url: cli.gateway_callback_url,
        gateway_callback_secret: cli.gateway_callback_secret,
    };
    let running = match spawn(config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("payout-sim listening on {}", running.base_url());
    // Serve until interrupted.
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}
