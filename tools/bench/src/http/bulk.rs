//! Bulk: `POST /v1/commands:batch` of `--bulk-size` wallet credits per request (not
//! atomic, each item with its own idempotency key), `--bulk-clients` in a closed loop.

use super::{problem_code, usage_header, Answer, Api, Args, Ctx, Tally, REQUESTS_PER_SEC_BOUND};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

const PATH: &str = "/v1/commands:batch";
/// Open commands per batch request while opening the wallets.
const OPEN_BATCH: usize = 1_000;

#[derive(serde::Deserialize)]
struct BatchAnswer {
    applied: u64,
    #[serde(default)]
    replayed: u64,
    #[serde(default)]
    refused: u64,
    #[serde(default)]
    results: Vec<ItemAnswer>,
}

#[derive(serde::Deserialize)]
struct ItemAnswer {
    status: u16,
    #[serde(default)]
    problem: Option<ItemProblem>,
}

#[derive(serde::Deserialize)]
struct ItemProblem {
    #[serde(default)]
    code: String,
}

/// One client's (then every client's) figures.
struct Client {
    tally: Tally,
    applied: u64,
    replayed: u64,
    refused: u64,
    /// Refused items by "status CODE".
    items: BTreeMap<String, u64>,
    /// The first answer that was not a 200 batch answer, for the error.
    first_failure: Option<String>,
}

impl Client {
    fn new() -> Self {
        Self {
            tally: Tally::new(),
            applied: 0,
            replayed: 0,
            refused: 0,
            items: BTreeMap::new(),
            first_failure: None,
        }
    }
}

/// One wallet command as a batch item.
fn item(s: &mut String, wallet: usize, key: &str, command: &str) {
    let _ = write!(
        s,
        r#"{{"aggregate_type":"wallet","aggregate_id":"bw-{wallet}","idempotency_key":"{key}","command":{command}}}"#
    );
}

fn batch(items: impl Iterator<Item = (usize, String, String)>) -> String {
    let mut s = String::from(r#"{"atomic":false,"commands":["#);
    for (i, (wallet, key, command)) in items.enumerate() {
        if i > 0 {
            s.push(',');
        }
        item(&mut s, wallet, &key, &command);
    }
    s.push_str("]}");
    s
}

/// Send a batch: its status (and problem code, or `NOT_A_BATCH_ANSWER` for a 200
/// that is not one), and its answer when 200 (else the body's start).
async fn send(api: &Api, url: &str, body: String, commands: u64) -> reqwest::Result<Sent> {
    let response = api.post_raw(url, body, commands).await?;
    let status = response.status().as_u16();
    let body = response.bytes().await?;
    let start = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    Ok(if status == 200 {
        match serde_json::from_slice(&body) {
            Ok(a) => (Answer { status, code: None }, Ok(a)),
            Err(e) => (
                Answer {
                    status,
                    code: Some("NOT_A_BATCH_ANSWER".into()),
                },
                Err(format!("200 but not a batch answer ({e}): {}", start())),
            ),
        }
    } else {
        let code = problem_code(&body);
        (
            Answer { status, code },
            Err(format!("{status}: {}", start())),
        )
    })
}

type Sent = (Answer, Result<BatchAnswer, String>);

pub(super) async fn run(ctx: &Ctx, args: &Args) -> anyhow::Result<String> {
    println!();
    println!(
        "Bulk: {} clients, {} commands per POST {PATH} (atomic: false), over {} wallets, {} s.",
        args.bulk_clients, args.bulk_size, args.bulk_wallets, args.secs
    );
    let url = ctx.api.url(PATH);
    // One Open first: is the endpoint there at all?
    let probe = r#"{"atomic":false,"commands":[{"aggregate_type":"wallet","aggregate_id":"bulk-probe","idempotency_key":"probe-open","command":{"type":"Open","user_id":"u-probe","currency":"IDR"}}]}"#;
    match send(&ctx.api, &url, probe.to_owned(), 1).await? {
        (Answer { status: 404, .. }, Err(body)) => anyhow::bail!(
            "POST {PATH} answered {body:?}: this factledger has no batch endpoint (yet); build one that has it"
        ),
        (_, Err(e)) => anyhow::bail!("POST {PATH} (one Open) answered {e}"),
        (_, Ok(a)) if a.applied + a.replayed != 1 => anyhow::bail!(
            "POST {PATH} (one Open) applied {} replayed {} refused {}: {:?}",
            a.applied,
            a.replayed,
            a.refused,
            a.results.first().map(|r| (r.status, r.problem.as_ref().map(|p| &p.code)))
        ),
        (_, Ok(_)) => {}
    }
    let opening = Instant::now();
    let wallets: Vec<usize> = (0..args.bulk_wallets).collect();
    for chunk in wallets.chunks(OPEN_BATCH) {
        let body = batch(chunk.iter().map(|&w| {
            let open = format!(r#"{{"type":"Open","user_id":"u-bw-{w}","currency":"IDR"}}"#);
            (w, format!("open-bw-{w}"), open)
        }));
        match send(&ctx.api, &url, body, chunk.len() as u64).await? {
            (_, Ok(a)) if a.applied + a.replayed == chunk.len() as u64 => {}
            (_, Ok(a)) => anyhow::bail!(
                "opening wallets: {} of {} applied, first refusal {:?}",
                a.applied,
                chunk.len(),
                a.results
                    .iter()
                    .find(|r| r.status != 200)
                    .map(|r| (r.status, r.problem.as_ref().map(|p| &p.code)))
            ),
            (_, Err(e)) => anyhow::bail!("opening wallets: {e}"),
        }
    }
    println!(
        "(opened {} wallets through {PATH} in {:.2} s)",
        args.bulk_wallets,
        opening.elapsed().as_secs_f64()
    );
    println!(
        "| clients × items | requests | seconds | requests/s | commands/s applied | replayed | refused items | p50 ms | p99 ms | max ms | request outcomes | refused items by code | {} |",
        usage_header("command")
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    ctx.settle().await?;
    let mark = ctx.mark().await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.secs);
    let most = args.secs * REQUESTS_PER_SEC_BOUND;
    let mut clients = Vec::new();
    for c in 0..args.bulk_clients {
        let (url, size, nwallets) = (url.clone(), args.bulk_size, args.bulk_wallets);
        let api = ctx.api.clone();
        clients.push(tokio::spawn(async move {
            let mut me = Client::new();
            for r in 0..most {
                if Instant::now() >= deadline {
                    break;
                }
                let body = batch((0..size).map(|i| {
                    let wallet = (c * 7_919 + r as usize * size + i) % nwallets;
                    let credit = super::credit_body(&format!("b{c}-{r}-{i}"));
                    (wallet, format!("c{c}-r{r}-i{i}"), credit)
                }));
                let t = Instant::now();
                let sent = send(&api, &url, body, size as u64).await;
                me.tally.record(t.elapsed(), sent.as_ref().map(|(a, _)| a));
                match sent {
                    Ok((_, Ok(a))) => {
                        me.applied += a.applied;
                        me.replayed += a.replayed;
                        me.refused += a.refused;
                        for item in a.results.iter().filter(|i| !(200..300).contains(&i.status)) {
                            let code = item.problem.as_ref().map_or("", |p| p.code.as_str());
                            *me.items
                                .entry(format!("{} {code}", item.status))
                                .or_default() += 1;
                        }
                    }
                    Ok((_, Err(e))) => {
                        me.first_failure.get_or_insert(e);
                    }
                    Err(e) => {
                        me.first_failure.get_or_insert(e.to_string());
                    }
                }
            }
            me
        }));
    }
    let mut all = Client::new();
    for c in clients {
        let c = c.await?;
        all.tally.merge(&c.tally);
        all.applied += c.applied;
        all.replayed += c.replayed;
        all.refused += c.refused;
        for (k, n) in c.items {
            *all.items.entry(k).or_default() += n;
        }
        if all.first_failure.is_none() {
            all.first_failure = c.first_failure;
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let usage = ctx.finish(&mark).await?;
    let t = &all.tally;
    let items: Vec<String> = all.items.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!(
        "| {} × {} | {} | {:.1} | {:.1} | {:.0} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
        args.bulk_clients,
        args.bulk_size,
        t.count(),
        elapsed_s,
        t.count() as f64 / elapsed_s,
        all.applied as f64 / elapsed_s,
        all.replayed,
        all.refused,
        t.ms(0.50),
        t.ms(0.99),
        t.max_ms(),
        t.outcomes(),
        if items.is_empty() {
            "-".to_owned()
        } else {
            items.join(", ")
        },
        usage.columns(Some(all.applied + all.refused)),
    );
    if t.ok == 0 {
        anyhow::bail!(
            "no batch request succeeded: {}",
            all.first_failure
                .unwrap_or_else(|| "no request sent".into())
        );
    }
    if let Some(f) = &all.first_failure {
        println!("(first failed batch request: {f})");
    }
    Ok(format!(
        "bulk: {:.0} commands/s applied ({:.1} requests/s of {} items, p50 {:.0} ms, p99 {:.0} ms; {} refused items)",
        all.applied as f64 / elapsed_s,
        t.count() as f64 / elapsed_s,
        args.bulk_size,
        t.ms(0.50),
        t.ms(0.99),
        all.refused
    ))
}
