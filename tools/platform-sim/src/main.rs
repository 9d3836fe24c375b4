//! `platform-sim`: serve simulated platform order APIs for demos
//! (`cargo run -p platform-sim -- --listen 127.0.0.1:9100`). See the library docs for
//! the API and the control endpoints.
#![forbid(unsafe_code)]

use clap::Parser;
use platform_sim::{spawn, Sim, PLATFORMS};
use std::net::SocketAddr;
use std::process::ExitCode;

/// One day in milliseconds.
const DAY_MS: i64 = 86_400_000;

#[derive(Parser)]
#[command(
    name = "platform-sim",
    about = "Simulated affiliate platform order APIs (loopback only)"
)]
struct Cli {
    /// Address to listen on; loopback only (127.0.0.1:0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:9100")]
    listen: SocketAddr,
    /// Seed of the generated orders (same seed, same orders).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Orders generated per platform × country at start.
    #[arg(long, default_value_t = 200)]
    orders: usize,
    /// Countries to generate orders for, comma separated.
    #[arg(long, default_value = "ID", value_delimiter = ',')]
    countries: Vec<String>,
    /// Generated orders were updated within this many days before start.
    #[arg(long, default_value_t = 3)]
    days: i64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let sim = Sim::new();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    for (i, platform) in PLATFORMS.iter().enumerate() {
        for country in &cli.countries {
            let seed = cli.seed.wrapping_add(i as u64);
            let from = now_ms - cli.days.max(1) * DAY_MS;
            if let Err(e) = sim.seed(platform, country, seed, cli.orders, from, now_ms) {
                eprintln!("error: seeding {platform} {country}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let running = match spawn(cli.listen, sim).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("platform-sim listening on http://{}", running.addr);
    for p in PLATFORMS {
        println!("  {}: {}", p, running.base_url(p));
    }
    // Public test credentials, never real ones (see `platform_sim::auth`).
    println!(
        "  tiktok app_key {} app_secret {} access token per market sim-token-<COUNTRY>",
        platform_sim::auth::TEST_TIKTOK_APP_KEY,
        platform_sim::auth::TEST_TIKTOK_APP_SECRET
    );
    for c in &cli.countries {
        println!(
            "  shopee {c}: AppId {} secret {}",
            platform_sim::auth::test_shopee_app_id(c),
            platform_sim::auth::test_shopee_secret(c)
        );
    }
    // Serve until interrupted; dropping `running` stops the server.
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
