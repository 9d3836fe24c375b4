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
    /// Where the simulated App Store POSTs its notifications; none without it.
    #[arg(long)]
    appstore_callback_url: Option<String>,
    /// The bundle id the App Store's notifications name.
    #[arg(long, default_value = "com.example.factledger")]
    appstore_bundle_id: String,
    /// Speak Alipay's open-API format for this app id (with
    /// --alipay-app-public-key-file); "Alipay's" key pair is generated and its public
    /// key printed at start.
    #[arg(long, requires = "alipay_app_public_key_file")]
    alipay_app_id: Option<String>,
    /// The app public key (PEM or base64 DER) requests must verify with.
    #[arg(long, requires = "alipay_app_id")]
    alipay_app_public_key_file: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let alipay = match (&cli.alipay_app_id, &cli.alipay_app_public_key_file) {
        (Some(app_id), Some(path)) => {
            let made = std::fs::read_to_string(path)
                .map_err(|e| format!("{}: {e}", path.display()))
                .and_then(|key| payout_sim::gateway::alipay::AlipayMode::new(app_id, &key));
            match made {
                Ok(mode) => Some(mode),
                Err(e) => {
                    eprintln!("error: alipay mode: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    if let Some(mode) = &alipay {
        println!("alipay public key:\n{}", mode.alipay_public_key_pem());
    }
    let config = SimConfig {
        listen: cli.listen,
        secret: cli.secret,
        callback_url: cli.callback_url,
        callback_token: cli.callback_token,
        complete_after_ms: cli.complete_after_ms,
        gateway_callback_url: cli.gateway_callback_url,
        gateway_callback_secret: cli.gateway_callback_secret,
        alipay,
    };
    let running = match spawn(config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    running
        .appstore
        .configure(payout_sim::appstore::AppStoreSettings {
            callback_url: cli.appstore_callback_url,
            bundle_id: cli.appstore_bundle_id,
            ..payout_sim::appstore::AppStoreSettings::default()
        });
    println!("payout-sim listening on {}", running.base_url());
    // Serve until interrupted.
    let _ = tokio::signal::ctrl_c().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}
