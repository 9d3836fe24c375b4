//! `bench bookings` (issue 18): video-call bookings end to end on a real `serve` stack
//! in this process, over HTTP — fans funded by recharges the gateway simulator pays
//! through signed callbacks, then per booking: book (candy order + hold + activation)
//! → both join → start → finish (the hold settled to the artist); one in ten is a
//! no-show instead (only the fan joins; the no-show scan at start + 12 min decides
//! it and its candy refund runs). Reports bookings/s end to end and hold
//! settlements/s, checks candy conservation across streams at the end, and that
//! every hold closed exactly once.

use crate::payouts::{drive, Http};
use anyhow::Context;
use chrono::{Duration as Span, Utc};
use factledger::services::gateway_http::{HttpGateway, HttpGatewayConfig};
use factledger::services::scans::{self, Scan, ScanOptions};
use factledger::services::{Ctx, Services};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Options {
    pub bookings: u64,
    pub fans: u64,
    pub concurrency: usize,
    pub max_secs: u64,
}

const SECRET: &str = "bench-secret";
const CALLBACK_SECRET: &str = "bench-callback-secret";
const PRICE: i64 = 1_000;

/// `POST` through the payouts bench's client (2xx or an error naming the path).
async fn post(http: &Http, path: &str, body: Value) -> anyhow::Result<Value> {
    http.ok(reqwest::Method::POST, path, None, body).await
}

pub async fn bench(url: &str, o: Options) -> anyhow::Result<()> {
    crate::fresh_store(url).await?;
    let sim = payout_sim::spawn(payout_sim::SimConfig {
        secret: SECRET.into(),
        gateway_callback_secret: CALLBACK_SECRET.into(),
        ..payout_sim::SimConfig::default()
    })
    .await?;
    let services = Services {
        gateway: Some(Arc::new(HttpGateway::new(HttpGatewayConfig::new(
            sim.base_url(),
            SECRET,
        ))?)),
        ..Services::default()
    };
    let options = factledger::server::ServeOptions {
        job_scan_interval_ms: Some(50),
        settlement_cron: factledger::server::SettlementCron::Off,
        services: services.clone(),
        services_callbacks: factledger::server::gateways::GatewayCallbacks::Paysim {
            secret: CALLBACK_SECRET.into(),
        },
        ..Default::default()
    };
    let dir =
        std::env::temp_dir().join(format!("factledger-bench-bookings-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let started = factledger::server::start_with(url, "ID", &dir, options).await?;
    let admin = started
        .admin_key
        .context("first start makes an admin key")?;
    let state = started.state;
    let ctx = Ctx::with_engine(
        state.store.clone(),
        state.db.clone(),
        &state.jobs,
        services,
        "ID",
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(factledger::server::serve(
        state.clone(),
        listener,
        std::future::pending(),
    ));
    sim.gateway()
        .set_settings(
            Some(format!("{base}/v1/callbacks/paysim")),
            Some(CALLBACK_SECRET.into()),
        )
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let http = Arc::new(Http {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(o.concurrency)
            .build()?,
        base,
        key: admin.secret,
    });

    // Fund every fan through a recharge the gateway pays (its callback delivers it).
    let per_fan = o.bookings.div_ceil(o.fans) as i64;
    let fans: Vec<u64> = (1..=o.fans).collect();
    let gateway = sim.gateway();
    let setup = drive(fans.clone(), o.concurrency, |fan| {
        let (http, gateway) = (http.clone(), gateway.clone());
        async move {
            let order_no = format!("FUND-{fan}");
            let candy = per_fan * PRICE;
            post(
                &http,
                "/v1/service-orders",
                json!({"order_no": order_no, "user_id": fan,
                "business": {"kind": "RECHARGE", "candy": candy}, "method": "WECHAT",
                "amount_minor": candy, "currency": "CNY"}),
            )
            .await?;
            let out = gateway
                .pay(payout_sim::gateway::model::PaymentRequest {
                    order_no,
                    amount_minor: candy,
                    currency: "CNY".into(),
                    method: payout_sim::gateway::Method::Wechat,
                    account_id: "mch-1".into(),
                    paid_at_ms: None,
                })
                .await;
            anyhow::ensure!(
                out.callback.http_status == Some(200),
                "pay callback: {:?}",
                out.callback
            );
            Ok(())
        }
    })
    .await?;
    println!(
        "setup: {} fans funded by paid recharges in {:.1} s",
        o.fans,
        setup.as_secs_f64()
    );

    // Bookings: nine in ten are called and finished, one in ten is a no-show.
    let deadline = Instant::now() + Duration::from_secs(o.max_secs);
    let start_at = (Utc::now() + Span::minutes(60)).to_rfc3339();
    let items: Vec<u64> = (0..o.bookings).collect();
    let began = Instant::now();
    let t_calls = drive(items, o.concurrency, |i| {
        let http = http.clone();
        let start_at = start_at.clone();
        async move {
            let fan = 1 + i % o.fans;
            let no = format!("BB-{i}");
            post(
                &http,
                "/v1/bookings",
                json!({"booking_no": no, "fan_user_id": fan,
                "artist_id": 1_000_000 + i % 50, "start_at": start_at, "minutes": 30,
                "price_candy": PRICE}),
            )
            .await?;
            post(
                &http,
                &format!("/v1/bookings/{no}:join"),
                json!({"party": "FAN"}),
            )
            .await?;
            if i % 10 == 9 {
                return Ok(());
            }
            post(
                &http,
                &format!("/v1/bookings/{no}:join"),
                json!({"party": "ARTIST"}),
            )
            .await?;
            post(&http, &format!("/v1/bookings/{no}:start"), json!({})).await?;
            post(&http, &format!("/v1/bookings/{no}:finish"), json!({})).await?;
            Ok(())
        }
    })
    .await?;
    // The no-shows: the scan at start + 12 min decides them and queues their refunds.
    let no_show_at = Instant::now();
    let later = Utc::now() + Span::minutes(60 + 12);
    let mut decided = 0;
    loop {
        let r = scans::run(
            &ctx,
            Scan::NoShow,
            &ScanOptions {
                business_id: None,
                limit: 10_000,
                now: later,
            },
        )
        .await?;
        decided += r.acted;
        if r.candidates == 0 || Instant::now() > deadline {
            break;
        }
    }
    // Every refund settled (the refund jobs run on the engine).
    let expected_refunds = (o.bookings / 10) as i64;
    loop {
        let done = state
            .db
            .fetch_i64("SELECT COUNT(*) FROM refunds WHERE status = 3", &[])
            .await?;
        if done >= expected_refunds || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = began.elapsed();
    let t_no_shows = no_show_at.elapsed();
    // Wait for the projection, then check conservation and the holds.
    let head = state.store.head_position().await?;
    factledger::runtime::projector::wait_for_checkpoint(&state.db, "services", 1, head).await?;
    let totals = factledger::services::reconcile::totals(&state.db).await?;
    let settled = state
        .db
        .fetch_i64(
            "SELECT COUNT(*) FROM bookings WHERE hold_state IN ('SETTLED', 'REFUNDED')",
            &[],
        )
        .await?;
    let n = o.bookings as f64;
    println!("| bookings | calls (book→finish) s | bookings/s end to end | no-show scan + refunds s | no-shows decided | holds settled | hold settlements/s | Σ balance | Σ held | conservation findings |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {:.1} | {:.0} | {:.1} | {} | {} | {:.0} | {} | {} | {} |",
        o.bookings,
        t_calls.as_secs_f64(),
        n / total.as_secs_f64(),
        t_no_shows.as_secs_f64(),
        decided,
        settled,
        settled as f64 / total.as_secs_f64(),
        totals.balance,
        totals.held,
        totals.findings().len()
    );
    anyhow::ensure!(
        totals.findings().is_empty(),
        "candy does not add up: {totals:?}"
    );
    anyhow::ensure!(totals.held == 0, "{} candy still held", totals.held);
    anyhow::ensure!(
        settled == o.bookings as i64,
        "{settled} of {} holds closed",
        o.bookings
    );
    Ok(())
}
