//! Closed loop: `--connections` workers, each sending its next credit when the last
//! one is answered; fresh references, then references already in the ledger.
//! [`worker`] is the loop itself, which `bench scale` runs too.

use super::{
    credit_body, open_wallets, usage_header, Api, Args, Ctx, Tally, Usage, REQUESTS_PER_SEC_BOUND,
};
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// References credited once per wallet before the duplicate run, then re-sent.
const DUPLICATE_REFS_PER_WALLET: u64 = 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fresh,
    Duplicate,
}

struct Row {
    tally: Tally,
    elapsed_s: f64,
    usage: Usage,
}

impl Row {
    fn rate(&self) -> f64 {
        self.tally.count() as f64 / self.elapsed_s.max(1e-9)
    }
}

pub(super) async fn run(ctx: &Ctx, args: &Args) -> anyhow::Result<String> {
    println!();
    println!(
        "Closed loop: {} workers, {} s per run, over {} wallets; no Idempotency-Key.",
        args.connections, args.secs, args.wallets
    );
    println!(
        "| run | answered | seconds | req/s | p50 ms | p99 ms | p99.9 ms | max ms | outcomes | {} |",
        usage_header("req")
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let fresh = closed(ctx, args, Kind::Fresh).await?;
    print("fresh credits", &fresh);
    let dup = closed(ctx, args, Kind::Duplicate).await?;
    print("duplicate ledger refs", &dup);
    let refused = dup
        .tally
        .outcomes
        .iter()
        .filter(|(k, _)| k.contains("DUPLICATE_LEDGER_REF"))
        .map(|(_, n)| n)
        .sum::<u64>();
    Ok(format!(
        "closed loop: fresh {:.0} req/s (p99 {:.2} ms), duplicates {:.0} req/s (p99 {:.2} ms; {refused} of {} answered 409 DUPLICATE_LEDGER_REF, {} 2xx); duplicate ÷ fresh = {:.2}",
        fresh.rate(),
        fresh.tally.ms(0.99),
        dup.rate(),
        dup.tally.ms(0.99),
        dup.tally.count(),
        dup.tally.ok,
        dup.rate() / fresh.rate().max(1e-9)
    ))
}

fn print(name: &str, r: &Row) {
    let t = &r.tally;
    println!(
        "| {name} | {} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
        t.count(),
        r.elapsed_s,
        r.rate(),
        t.ms(0.50),
        t.ms(0.99),
        t.ms(0.999),
        t.max_ms(),
        t.outcomes(),
        r.usage.columns(None),
    );
}

async fn closed(ctx: &Ctx, args: &Args, kind: Kind) -> anyhow::Result<Row> {
    let prefix = match kind {
        Kind::Fresh => "cf",
        Kind::Duplicate => "cd",
    };
    let wallets: Vec<String> = (0..args.wallets)
        .map(|w| format!("{prefix}-w{w}"))
        .collect();
    open_wallets(&ctx.api, &wallets).await?;
    let urls: Vec<String> = wallets.iter().map(|w| ctx.api.wallet_url(w)).collect();
    if kind == Kind::Duplicate {
        // Each reference once, so that every request of the run repeats one.
        let credits = (0..args.wallets as u64)
            .flat_map(|w| (0..DUPLICATE_REFS_PER_WALLET).map(move |k| (w, k)));
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(credits.map(|(w, k)| {
            let url = &urls[w as usize];
            async move {
                ctx.api
                    .post(url, credit_body(&format!("d-w{w}-{k}")))
                    .await?
                    .ensure_2xx(&format!("credit d-w{w}-{k}"))
            }
        }))
        .buffer_unordered(16)
        .collect()
        .await;
        results.into_iter().collect::<anyhow::Result<()>>()?;
    }
    ctx.settle().await?;
    let mark = ctx.mark().await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.secs);
    let most = args.secs * REQUESTS_PER_SEC_BOUND;
    let mut workers = Vec::new();
    for c in 0..args.connections {
        let w = c % urls.len();
        let url = urls[w].clone();
        workers.push(worker(ctx.api.clone(), deadline, most, move |n| Request {
            url: url.clone(),
            body: match kind {
                Kind::Fresh => credit_body(&format!("cf-{c}-{n}")),
                Kind::Duplicate => {
                    credit_body(&format!("d-w{w}-{}", n % DUPLICATE_REFS_PER_WALLET))
                }
            },
            idempotency_key: None,
        }));
    }
    let mut tally = Tally::new();
    for w in workers {
        tally.merge(&w.await?);
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let usage = ctx.finish(&mark).await?;
    Ok(Row {
        tally,
        elapsed_s,
        usage,
    })
}

/// What a closed-loop worker sends as one request.
pub(crate) struct Request {
    pub(crate) url: String,
    pub(crate) body: String,
    pub(crate) idempotency_key: Option<String>,
}

/// One closed-loop worker: request `next(n)` for n = 0, 1, … each sent when the last
/// one is answered, until `deadline` or `most` requests; their latencies and outcomes.
pub(crate) fn worker(
    api: Arc<Api>,
    deadline: Instant,
    most: u64,
    next: impl Fn(u64) -> Request + Send + 'static,
) -> tokio::task::JoinHandle<Tally> {
    tokio::spawn(async move {
        let mut tally = Tally::new();
        for n in 0..most {
            if Instant::now() >= deadline {
                break;
            }
            let r = next(n);
            let t = Instant::now();
            let answer = match &r.idempotency_key {
                Some(key) => api.post_keyed(&r.url, r.body, key).await,
                None => api.post(&r.url, r.body).await,
            };
            tally.record(t.elapsed(), answer.as_ref());
        }
        tally
    })
}
