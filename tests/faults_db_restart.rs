//! Fault test (issue 14 item 9): the database itself is SIGKILLed and restarted while
//! clients send wallet commands, each with its own Idempotency-Key.
//!
//! The shared MariaDB on 3306 runs the rest of the suite, so this test runs its own
//! throw-away server ([`common::mariadb::PrivateMariadb`]); it is skipped, with a
//! message, where `mariadbd` is not installed. A command in flight when the database
//! dies cannot know whether its transaction committed: the service answers 503
//! `OUTCOME_UNKNOWN` (or the client gets no answer), and the client retries the same
//! key and body once the database is back. The test proves that every such retry
//! resolves to exactly one outcome: each command is in the log once, its replay names
//! the same event, and every balance is the sum of the acknowledged credits.

mod common;

use common::load::{self, Attempt, CommandRun, Load, Progress, Targets};
use common::mariadb::{a_statement_waits, hold_appends, PrivateMariadb};
use sqlx::Connection;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Kills of the database while the load runs, until a command's outcome is unknown
/// to the service itself (see [`kill_until_an_outcome_is_unknown`]).
const KILLS_MAX: usize = 5;
/// How long the database stays down.
const DOWN_FOR: Duration = Duration::from_millis(800);
/// How long a statement may take to reach a held lock (a re-run first waits for
/// the pool to reconnect, with a backoff of up to 2 s).
const STATEMENT_WAIT_MAX: Duration = Duration::from_secs(10);

fn load() -> Load {
    Load {
        run: format!("dbr{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
        clients: 8,
        commands_per_client: 40,
        wallets: 4,
        pace: Duration::from_millis(15),
    }
}

/// A command sent while the API key table is locked, so that its key lookup is cut
/// off by the kill: the `Open` of a wallet of its own (no money), with a key of its
/// own that was never used (an accepted key is served from the service's cache, see
/// `infra::auth`, and would not read the table).
/// Returns the connection holding the lock (to be dropped after the kill) and the
/// probe's task.
async fn probe_key_lookup(
    url: &str,
    targets: &Targets,
    load: &Load,
) -> (sqlx::MySqlConnection, tokio::task::JoinHandle<CommandRun>) {
    let keys = factledger::infra::store::open(url)
        .await
        .expect("open the database for a probe key")
        .keys;
    let key = keys
        .create(factledger::infra::auth::Role::Service)
        .await
        .expect("create the probe's key");
    let targets = targets.with_key(&key.secret);
    let mut lock = sqlx::MySqlConnection::connect(url)
        .await
        .expect("connect to lock api_keys");
    sqlx::Executor::execute(&mut lock, "LOCK TABLES api_keys WRITE")
        .await
        .expect("lock api_keys");
    let mut probe = CommandRun {
        key: format!("{}-probe", load.run),
        wallet: format!("{}-probe", load.run),
        amount_minor: 0,
        body: serde_json::json!({"type": "Open", "user_id": "u-probe", "currency": "IDR"}),
        attempts: Vec::new(),
        positions: Vec::new(),
        event_ids: Vec::new(),
    };
    let task = tokio::spawn(async move {
        load::resolve(&targets, &Progress::default(), &mut probe, 0).await;
        probe
    });
    assert!(
        a_statement_waits(
            url,
            "SELECT key_id, key_hash, role, mac FROM api_keys",
            STATEMENT_WAIT_MAX
        )
        .await,
        "the probe's key lookup never waited for the lock"
    );
    (lock, task)
}

/// Kill and restart the database under the load until a command is answered 503
/// `OUTCOME_UNKNOWN`; returns the number of kills.
///
/// Each kill cuts off an append waiting in its transaction. One kill is not
/// enough: the bus re-runs the commands of a failed append once, each alone on fresh
/// state (safe: the idempotency record and the ledger ref of a command that did
/// commit refuse a second write), and the re-run waits for the database to come
/// back. So the lock is taken again once the database is up, a re-run waits in its
/// transaction too, and the next kill cuts it off a second time: that is the answer
/// a client must resolve by retrying with its key.
///
/// The first kill also cuts off the key lookup of a probe command (see
/// [`probe_key_lookup`]), whose task is returned with the number of kills.
async fn kill_until_an_outcome_is_unknown(
    mariadb: &mut PrivateMariadb,
    url: &str,
    targets: &Targets,
    progress: &Progress,
    load: &Load,
) -> (usize, tokio::task::JoinHandle<CommandRun>) {
    let acked_min = load.total() * 15 / 100;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Progress::get(&progress.acknowledged) < acked_min && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut probe = None;
    for kill in 1..=KILLS_MAX {
        let held = hold_appends(url).await;
        let waiting = a_statement_waits(url, "UPDATE event_sequence", STATEMENT_WAIT_MAX).await;
        let locked = match probe {
            None => {
                let (lock, task) = probe_key_lookup(url, targets, load).await;
                probe = Some(task);
                Some(lock)
            }
            Some(_) => None,
        };
        mariadb.kill();
        drop((held, locked));
        tokio::time::sleep(DOWN_FOR).await;
        mariadb.restart().await;
        // The cut-off re-runs have answered by now, when the database was quick to
        // come back (else the next kill cuts them off again).
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !waiting || Progress::get(&progress.outcome_unknown) > 0 {
            return (kill, probe.expect("the probe was sent"));
        }
    }
    (KILLS_MAX, probe.expect("the probe was sent"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_restart_under_load_resolves_every_retried_command_to_one_outcome() {
    let started = Instant::now();
    let Some(mut mariadb) = PrivateMariadb::start().await else {
        return;
    };
    let url = mariadb.create_database("fl_faults").await;
    let options = factledger::server::ServeOptions {
        settlement_cron: factledger::server::SettlementCron::Off,
        ..Default::default()
    };
    let server = common::Server::start_at(&url, options).await;
    let targets = Targets::new(vec![server.base.clone()], &server.admin);
    let load = load();
    load.open_wallets(&targets).await;

    let progress = Arc::new(Progress::default());
    let driving = {
        let (load, targets, progress) = (load.clone(), targets.clone(), progress.clone());
        tokio::spawn(async move { load.drive(targets, progress).await })
    };
    let (kills, probe) =
        kill_until_an_outcome_is_unknown(&mut mariadb, &url, &targets, &progress, &load).await;
    let runs = driving.await.expect("load");
    let probe = probe.await.expect("probe");
    let failures = load::failure_summary(&runs);
    println!(
        "{} commands, {kills} database kill(s), failed attempts: {failures:?}",
        runs.len()
    );

    // The fault path was exercised: some command was cut off by the kill.
    assert!(
        !failures.is_empty(),
        "no append was waiting at any of {kills} kills"
    );
    // A command cut off mid-transaction is told its outcome is unknown, and one
    // whose read lost the database is told to retry: every 5xx is a 503, never a
    // 500 (before the fix, a key lookup or store read on a reset connection was a
    // 500 INTERNAL or STORE_ERROR).
    assert!(
        failures.contains_key("503 OUTCOME_UNKNOWN"),
        "no append was cut off: {failures:?}"
    );
    assert!(
        failures
            .keys()
            .all(|k| k == "no answer" || k.starts_with("503 ")),
        "{failures:?}"
    );

    // A command whose key lookup lost the database is told to retry, and does.
    assert_eq!(
        probe.attempts.first(),
        Some(&Attempt::ServerError {
            status: 503,
            code: "DATABASE_UNAVAILABLE".into()
        }),
        "{:?}",
        probe.attempts
    );
    assert!(probe.acknowledged(), "{:?}", probe.attempts);

    // Every command resolved, and to one outcome.
    load::assert_every_command_acknowledged(&load, &runs);
    let retried = runs
        .iter()
        .filter(|r| r.attempts.iter().any(|a| a.failed()))
        .count();
    assert!(retried > 0);
    load::assert_replays_match(&targets, &runs).await;
    let pool = sqlx::MySqlPool::connect(&url).await.expect("connect");
    load::assert_one_event_per_command(&pool, &load, &runs).await;
    let head = runs.iter().flat_map(|r| r.positions.clone()).max().unwrap();
    load::assert_balances(&targets, &load, &runs, head).await;
    pool.close().await;
    drop(server);
    println!("took {:?}", started.elapsed());
}
