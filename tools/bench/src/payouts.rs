//! `bench payouts` (issue 17): withdrawals end to end against the payout simulator on
//! a real `serve` stack in this process — request (`POST /v1/withdrawals`, password,
//! limits, freeze) → operator approval (`:approve`) → the payout worker → the
//! provider → its webhook → PAID — with requests/s, approvals/s and payouts/s, and
//! the count check that nothing was paid twice.

use anyhow::Context;
use factledger::payouts::password::Cost;
use factledger::payouts::policy::{Limits, PayoutPolicy};
use factledger::server::payouts::PayoutProviderConfig;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Options {
    pub withdrawals: u64,
    pub users: u64,
    pub concurrency: usize,
    pub password_cost: Cost,
    pub max_secs: u64,
    pub amount_minor: i64,
}

/// `memory KiB,iterations,lanes`, as `--password-cost` takes it.
pub fn parse_cost(text: &str) -> anyhow::Result<Cost> {
    let parts: Vec<u32> = text
        .split(',')
        .map(|p| p.trim().parse())
        .collect::<Result<_, _>>()
        .context("--password-cost: three integers: memory KiB, iterations, lanes")?;
    let [memory_kib, iterations, lanes] = parts[..] else {
        anyhow::bail!("--password-cost: three integers: memory KiB, iterations, lanes");
    };
    Ok(Cost {
        memory_kib,
        iterations,
        lanes,
    })
}

const SECRET: &str = "xnd_development_bench_secret";
const TOKEN: &str = "bench-token";
const PASSWORD: &str = "bench-password";

pub(crate) struct Http {
    pub(crate) client: reqwest::Client,
    pub(crate) base: String,
    pub(crate) key: String,
}

impl Http {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<String>,
        body: Value,
    ) -> anyhow::Result<(u16, Value)> {
        let mut r = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(&body);
        if let Some(k) = key {
            r = r.header("Idempotency-Key", k);
        }
        let r = r.send().await?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }

    pub(crate) async fn ok(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<String>,
        body: Value,
    ) -> anyhow::Result<Value> {
        let (status, answer) = self.send(method, path, key, body).await?;
        anyhow::ensure!((200..300).contains(&status), "{path}: {status} {answer}");
        Ok(answer)
    }
}

/// Run `f` over `items` with `concurrency` in flight; the time it took.
pub(crate) async fn drive<T, F, Fut>(
    items: Vec<T>,
    concurrency: usize,
    f: F,
) -> anyhow::Result<Duration>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    let mut results = futures::stream::iter(items.into_iter().map(f)).buffer_unordered(concurrency);
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(started.elapsed())
}

async fn setup_user(http: &Http, user: String, funds: i64) -> anyhow::Result<()> {
    use reqwest::Method;
    let wallet = format!("/v1/wallets/w-{user}/commands");
    for body in [
        json!({"type": "Open", "user_id": user, "currency": "IDR"}),
        json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": format!("c-{user}"), "amount_minor": funds}),
        json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": format!("c-{user}"), "amount_minor": funds}),
    ] {
        http.ok(Method::POST, &wallet, None, body).await?;
    }
    http.ok(
        Method::PUT,
        &format!("/v1/users/{user}/payment-password"),
        None,
        json!({"password": PASSWORD}),
    )
    .await?;
    http.ok(
        Method::POST,
        &format!("/v1/users/{user}/kyc"),
        None,
        json!({"status": "VERIFIED", "reason": "bench"}),
    )
    .await?;
    http.ok(
        Method::POST,
        &format!("/v1/users/{user}/payout-accounts"),
        None,
        json!({"account_id": "pa-1", "channel_code": "ID_BCA", "account_number": "1234567890", "account_holder": "Bench User"}),
    )
    .await?;
    http.ok(
        Method::POST,
        &format!("/v1/users/{user}/payout-accounts/pa-1:verify"),
        None,
        json!({}),
    )
    .await?;
    Ok(())
}

async fn count_paid(db: &factledger::infra::db::Db) -> anyhow::Result<i64> {
    Ok(db
        .fetch_i64(
            "SELECT COUNT(*) FROM withdrawal_records WHERE status = 'PAID'",
            &[],
        )
        .await?)
}

/// The service (in this process, on `url`, fresh) paying through an in-process
/// simulator, served on loopback; the simulator, a client and the database handle.
async fn stack(
    url: &str,
    o: &Options,
) -> anyhow::Result<(payout_sim::SimHandle, Arc<Http>, factledger::infra::db::Db)> {
    crate::fresh_store(url).await?;
    let sim = payout_sim::spawn(payout_sim::SimConfig {
        secret: SECRET.into(),
        callback_token: TOKEN.into(),
        ..payout_sim::SimConfig::default()
    })
    .await?;
    let per_user = o.withdrawals.div_ceil(o.users);
    let limits = Limits {
        min_minor: 1,
        max_minor: i64::MAX / 4,
        daily_count: u32::try_from(per_user).unwrap_or(u32::MAX),
        daily_amount_minor: i64::MAX / 4,
        // Every request waits for an operator: the bench approves each one.
        review_at_or_above_minor: 1,
        review_account_younger_than_hours: 0,
    };
    let options = factledger::server::ServeOptions {
        job_scan_interval_ms: Some(50),
        settlement_cron: factledger::server::SettlementCron::Off,
        payout_provider_config: Some(PayoutProviderConfig {
            base_url: sim.base_url(),
            secret_key: SECRET.into(),
            callback_token: TOKEN.into(),
            timeout: None,
        }),
        payouts: factledger::payouts::Payouts {
            policy: Arc::new(PayoutPolicy {
                default: limits,
                currencies: Default::default(),
            }),
            password_cost: o.password_cost,
            ..Default::default()
        },
        ..Default::default()
    };
    let dir = tempfile_dir()?;
    let started = factledger::server::start_with(url, "ID", &dir, options).await?;
    let admin = started
        .admin_key
        .context("first start makes an admin key")?;
    let state = started.state;
    let db = state.db.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(factledger::server::serve(
        state,
        listener,
        std::future::pending(),
    ));
    sim.sim
        .set_settings(None, Some(format!("{base}/v1/callbacks/xendit")), None)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let http = Arc::new(Http {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(o.concurrency)
            .build()?,
        base,
        key: admin.secret,
    });
    Ok((sim, http, db))
}

pub async fn bench(url: &str, o: Options) -> anyhow::Result<()> {
    let (sim, http, db) = stack(url, &o).await?;
    let per_user = o.withdrawals.div_ceil(o.users);
    let funds = o.amount_minor * i64::try_from(per_user)?;
    let users: Vec<String> = (0..o.users).map(|u| format!("bu-{u}")).collect();
    let setup = drive(users.clone(), o.concurrency, |u| {
        let http = http.clone();
        async move { setup_user(&http, u, funds).await }
    })
    .await?;
    println!("setup: {} users in {:.1} s", o.users, setup.as_secs_f64());
    let deadline = Instant::now() + Duration::from_secs(o.max_secs);
    // 1. Requests.
    let requests: Vec<u64> = (0..o.withdrawals).collect();
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let amount = o.amount_minor;
    let users = Arc::new(users);
    let t_requests = drive(requests, o.concurrency, |i| {
        let (http, ids, users) = (http.clone(), ids.clone(), users.clone());
        async move {
            let user = &users[(i % users.len() as u64) as usize];
            let body = json!({"user_id": user, "wallet_id": format!("w-{user}"), "amount_minor": amount,
                              "currency": "IDR", "payout_account_id": "pa-1", "payment_password": PASSWORD});
            let answer = http.ok(reqwest::Method::POST, "/v1/withdrawals", Some(format!("bench-{i}")), body).await?;
            let id = answer["withdrawal_id"].as_str().context("withdrawal_id")?.to_owned();
            ids.lock().unwrap_or_else(|p| p.into_inner()).push(id);
            Ok(())
        }
    })
    .await?;
    // 2. Approvals, while the worker pays those already approved.
    let ids: Vec<String> = std::mem::take(&mut *ids.lock().unwrap_or_else(|p| p.into_inner()));
    let approving = Instant::now();
    let t_approvals = drive(ids.clone(), o.concurrency, |id| {
        let http = http.clone();
        async move {
            http.ok(
                reqwest::Method::POST,
                &format!("/v1/withdrawals/{id}:approve"),
                None,
                json!({"reason": "bench"}),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    // 3. Every withdrawal PAID (projection count), or the deadline.
    let mut paid = 0;
    while Instant::now() < deadline {
        paid = count_paid(&db).await?;
        if paid >= o.withdrawals as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t_paid = approving.elapsed();
    let payouts = sim.sim.payouts();
    let twice = payouts
        .creates_per_external_id
        .values()
        .filter(|n| **n > 1)
        .count();
    let n = o.withdrawals as f64;
    println!("| withdrawals | requests s | requests/s | approvals s | approvals/s | approve→all PAID s | payouts/s | PAID | provider payouts | references created twice |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} | {} | {} | {} |",
        o.withdrawals,
        t_requests.as_secs_f64(),
        n / t_requests.as_secs_f64(),
        t_approvals.as_secs_f64(),
        n / t_approvals.as_secs_f64(),
        t_paid.as_secs_f64(),
        paid as f64 / t_paid.as_secs_f64(),
        paid,
        payouts.disbursements.len(),
        twice
    );
    anyhow::ensure!(
        twice == 0,
        "{twice} references were created twice at the provider"
    );
    anyhow::ensure!(
        payouts.disbursements.len() as u64 == o.withdrawals && paid == o.withdrawals as i64,
        "not every withdrawal was paid exactly once"
    );
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("factledger-bench-payouts-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
