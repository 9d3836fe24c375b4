//! Open loop: requests scheduled at a fixed rate whatever the server does, latency
//! from the scheduled time; then a bisection for the highest rate under the p99 bound.

use super::{credit_body, open_wallets, usage_header, Args, Ctx, Tally, Usage};
use crate::lock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How long the requests still in flight after the last send may take to finish.
const DRAIN_MAX: Duration = Duration::from_secs(90);

/// One rate's run.
struct Point {
    label: &'static str,
    rate: u64,
    tally: Tally,
    scheduled: u64,
    /// Requests never sent: the run's time bound came first.
    unsent: u64,
    /// From t0 to the last answer.
    elapsed_s: f64,
    peak_in_flight: u64,
    /// Sends delayed because `--max-in-flight` requests were already out.
    waited: u64,
    usage: Usage,
}

impl Point {
    fn passes(&self, p99_ms: f64) -> bool {
        self.unsent == 0
            && self.tally.errors == 0
            && self.tally.non2xx == 0
            && self.tally.ms(0.99) < p99_ms
    }

    fn print(&self, p99_ms: f64) {
        let t = &self.tally;
        println!(
            "| {}{} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} |",
            self.rate,
            self.label,
            self.scheduled,
            t.count(),
            t.count() as f64 / self.elapsed_s.max(1e-9),
            t.ms(0.50),
            t.ms(0.99),
            t.ms(0.999),
            t.max_ms(),
            t.outcomes(),
            self.peak_in_flight,
            self.waited + self.unsent,
            self.usage.columns(None),
            if self.passes(p99_ms) { "pass" } else { "FAIL" },
        );
    }
}

pub(super) async fn run(ctx: &Ctx, args: &Args) -> anyhow::Result<String> {
    println!();
    println!(
        "Open loop: {} s per rate over {} wallets, at most {} in flight; latency from the scheduled send time.",
        args.secs, args.wallets, args.max_in_flight
    );
    println!(
        "| target req/s | scheduled | answered | achieved req/s | p50 ms | p99 ms | p99.9 ms | max ms | outcomes | peak in flight | late sends | {} | p99 < {} ms |",
        usage_header("req"),
        args.p99_ms
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rates = args.rates.clone();
    rates.sort_unstable();
    rates.dedup();
    let mut points = Vec::new();
    for rate in rates {
        let p = point(ctx, args, points.len(), rate, "").await?;
        p.print(args.p99_ms);
        points.push(p);
    }
    let passing = |p: &&Point| p.passes(args.p99_ms);
    let mut lo = points
        .iter()
        .filter(passing)
        .map(|p| p.rate)
        .max()
        .unwrap_or(0);
    let Some(mut hi) = points
        .iter()
        .filter(|p| !p.passes(args.p99_ms) && p.rate > lo)
        .map(|p| p.rate)
        .min()
    else {
        return Ok(format!(
            "open loop: p99 < {} ms at every listed rate, up to {lo} req/s (list higher rates to find the limit)",
            args.p99_ms
        ));
    };
    let mut steps = 0;
    while steps < args.search_steps {
        // Stop once the bracket is within 5 % (or 10 req/s).
        if hi - lo <= (hi / 20).max(10) {
            break;
        }
        let mid = ((lo + hi) / 2 / 10 * 10).max(lo + 1);
        let p = point(ctx, args, points.len(), mid, " (search)").await?;
        p.print(args.p99_ms);
        if p.passes(args.p99_ms) {
            lo = mid;
        } else {
            hi = mid;
        }
        points.push(p);
        steps += 1;
    }
    Ok(if lo == 0 {
        format!(
            "open loop: p99 < {} ms at no rate tried (lowest tried failing: {hi} req/s; {steps} search steps)",
            args.p99_ms
        )
    } else {
        format!(
            "open loop: highest rate with p99 < {} ms: {lo} req/s (lowest failing: {hi} req/s; {steps} search steps)",
            args.p99_ms
        )
    })
}

/// Send `rate` × `--secs` credits at `rate`, spread over fresh wallets.
async fn point(
    ctx: &Ctx,
    args: &Args,
    run: usize,
    rate: u64,
    label: &'static str,
) -> anyhow::Result<Point> {
    let wallets: Vec<String> = (0..args.wallets).map(|w| format!("o{run}-w{w}")).collect();
    open_wallets(&ctx.api, &wallets).await?;
    let urls: Arc<Vec<String>> = Arc::new(wallets.iter().map(|w| ctx.api.wallet_url(w)).collect());
    ctx.settle().await?;
    let mark = ctx.mark().await;
    let scheduled = rate * args.secs;
    let period_ns = 1e9 / rate as f64;
    let permits = Arc::new(Semaphore::new(args.max_in_flight));
    let tally = Arc::new(Mutex::new(Tally::new()));
    let in_flight = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let last_done_ns = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now() + Duration::from_millis(5);
    // Sends stop here even if the server holds every permit for the whole run.
    let send_deadline = t0 + Duration::from_secs(args.secs * 2 + 10);
    let mut sent = 0u64;
    let mut waited = 0u64;
    let mut cut_off = None;
    for i in 0..scheduled {
        let due = t0 + Duration::from_nanos((i as f64 * period_ns) as u64);
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                waited += 1;
                let wait = permits.clone().acquire_owned();
                match tokio::time::timeout_at(send_deadline.into(), wait).await {
                    Ok(p) => p?,
                    Err(_) => {
                        cut_off = Some(Instant::now());
                        break;
                    }
                }
            }
        };
        let (api, urls, tally) = (ctx.api.clone(), urls.clone(), tally.clone());
        let (in_flight, peak, last_done_ns) =
            (in_flight.clone(), peak.clone(), last_done_ns.clone());
        let body = credit_body(&format!("o{run}-{i}"));
        tokio::spawn(async move {
            let now = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            peak.fetch_max(now, Ordering::Relaxed);
            let answer = api.post(&urls[i as usize % urls.len()], body).await;
            let done = Instant::now();
            in_flight.fetch_sub(1, Ordering::Relaxed);
            last_done_ns.fetch_max(done.duration_since(t0).as_nanos() as u64, Ordering::Relaxed);
            lock(&tally).record(done.saturating_duration_since(due), answer.as_ref());
            drop(permit);
        });
        sent += 1;
    }
    // Every permit back: every request answered (or timed out by the client).
    let all = u32::try_from(args.max_in_flight)?;
    match tokio::time::timeout(DRAIN_MAX, permits.acquire_many(all)).await {
        Ok(p) => drop(p?),
        Err(_) => anyhow::bail!(
            "{rate} req/s: requests still in flight {DRAIN_MAX:?} after the last send"
        ),
    }
    let usage = ctx.finish(&mark).await?;
    let mut tally = std::mem::replace(&mut *lock(&tally), Tally::new());
    if let Some(cut_off) = cut_off {
        // Never sent: each would have waited at least until the cut-off.
        for i in sent..scheduled {
            let due = t0 + Duration::from_nanos((i as f64 * period_ns) as u64);
            let waited_us = cut_off.saturating_duration_since(due).as_micros() as u64;
            tally.hist.saturating_record(waited_us);
        }
        tally
            .outcomes
            .insert("unsent (latency ≥ cut-off)".into(), scheduled - sent);
    }
    Ok(Point {
        label,
        rate,
        tally,
        scheduled,
        unsent: scheduled - sent,
        elapsed_s: last_done_ns.load(Ordering::Relaxed) as f64 / 1e9,
        peak_in_flight: peak.load(Ordering::Relaxed),
        waited,
        usage,
    })
}
