//! The outbox relay (SPEC R-OUT-1, R-INV-7, R-INV-8): wallet commands through the bus
//! write outbox rows; relays deliver them, at least once and in id order, to a real NATS
//! JetStream server (`FACTLEDGER_TEST_NATS_URL`, default `nats://127.0.0.1:4222`;
//! `tools/test.sh` starts `nats-server -js`), to a webhook served by the test on
//! loopback, and to the log. Sinks that are down never block commands, and drain
//! their backlog in order when they come back. Both backends.

use crate::common;

use common::{exec, meta, scalar, TestDb};
use factledger::infra::db::Db;
use factledger::infra::outbox::nats::{NatsConfig, NatsSink};
use factledger::infra::outbox::webhook::{WebhookConfig, WebhookSink};
use factledger::infra::outbox::{
    self, checkpoint, OutboxMessage, RelayConfig, RelayError, Sink, SinkError, Step,
};
use factledger::runtime::bus::{CommandBus, CommandEnvelope};
use factledger_aggregates::wallet::{Wallet, WalletCommand};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest any test waits for deliveries to arrive (loopback; generous for a busy CI).
pub(crate) const WAIT_MS_MAX: u64 = 30_000;
/// Longest one wallet command may take while every external sink is down: commands
/// must not wait for relays at all, this only bounds a slow machine.
const COMMAND_MS_MAX: u128 = 5_000;
pub(crate) const SECRET: &[u8] = b"test-webhook-secret-0123456789";

pub(crate) fn nats_url() -> String {
    std::env::var("FACTLEDGER_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// Relays that retry fast, so tests see failures and recoveries quickly.
pub(crate) fn quick() -> RelayConfig {
    RelayConfig {
        poll_idle_ms: 20,
        backoff_ms_min: 20,
        backoff_ms_max: 200,
        delivery_timeout_ms: 3_000,
        hole_wait_ms: 200,
        ..RelayConfig::default()
    }
}

/// Poll `check` until it returns `Some`, at most [`WAIT_MS_MAX`].
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn cmd(v: Value) -> WalletCommand {
    serde_json::from_value(v).expect("valid command")
}

/// Run one wallet command through the bus; it must succeed within [`COMMAND_MS_MAX`].
pub(crate) async fn command(bus: &CommandBus<Wallet>, wallet: &str, v: Value) {
    let started = Instant::now();
    bus.execute(CommandEnvelope {
        aggregate_id: wallet.to_owned(),
        command: cmd(v),
        metadata: meta(),
        idempotency: None,
        jobs: Vec::new(),
        fence: None,
    })
    .await
    .expect("command succeeds");
    let took = started.elapsed().as_millis();
    assert!(took < COMMAND_MS_MAX, "a command took {took} ms");
}

/// Interleaved traffic on several wallets: open each, then `credits` credits each,
/// round robin, so every aggregate's rows are spread among the others'.
pub(crate) async fn traffic(bus: &CommandBus<Wallet>, wallets: &[&str], credits: usize, tag: &str) {
    for w in wallets {
        command(
            bus,
            w,
            json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
        )
        .await;
    }
    more_credits(bus, wallets, credits, tag).await;
}

async fn more_credits(bus: &CommandBus<Wallet>, wallets: &[&str], credits: usize, tag: &str) {
    for i in 0..credits {
        for w in wallets {
            command(
                bus,
                w,
                json!({"type": "CreditPending", "ref_type": "COMMISSION",
                       "ref_id": format!("{tag}-{w}-{i}"), "amount_minor": 100 + i as i64}),
            )
            .await;
        }
    }
}

/// Every outbox row, in id order, as the relay reads them.
pub(crate) async fn all_rows(db: &Db) -> Vec<OutboxMessage> {
    let mut out: Vec<OutboxMessage> = Vec::new();
    loop {
        let after = out.last().map_or(0, |m| m.id);
        let page = checkpoint::read_after(db, after, 100)
            .await
            .expect("read outbox");
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// The sink's row in the status, if it has one.
pub(crate) async fn sink_status(db: &Db, name: &str) -> Option<outbox::SinkStatus> {
    outbox::status(db)
        .await
        .expect("status")
        .sinks
        .into_iter()
        .find(|s| s.name == name)
}

pub(crate) async fn wait_delivered(db: &Db, name: &str, to: i64) -> outbox::SinkStatus {
    eventually(&format!("{name} to deliver up to {to}"), || async {
        sink_status(db, name)
            .await
            .filter(|s| s.delivered_id == to && s.attempts == 0)
    })
    .await
}

/// Each aggregate's event sequences in the order a sink received them must be 1, 2, 3…
#[track_caller]
fn assert_in_order_per_aggregate(received: &[Value]) {
    let mut per: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for m in received {
        let seq = m["payload"]["sequence"]
            .as_i64()
            .expect("wallet rows carry the sequence");
        per.entry(m["aggregateid"].as_str().expect("aggregateid").to_owned())
            .or_default()
            .push(seq);
    }
    assert!(!per.is_empty());
    for (aggregate, seqs) in per {
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, expected, "order of {aggregate}'s messages");
    }
}

/// The message's fields as the relay sends them, compared with the stored row.
#[track_caller]
fn assert_is_row(body: &Value, row: &OutboxMessage) {
    assert_eq!(body["id"], json!(row.id));
    assert_eq!(body["aggregatetype"], json!(row.aggregatetype));
    assert_eq!(body["aggregateid"], json!(row.aggregateid));
    assert_eq!(body["type"], json!(row.r#type));
    assert_eq!(body["payload"], row.payload);
    assert_eq!(body["created_at"], json!(row.created_at));
}

// ---------------------------------------------------------------- NATS JetStream

/// A stream and subject prefix of this test only, deleted when dropped.
struct TestStream {
    prefix: String,
    name: String,
}

impl TestStream {
    fn new() -> Self {
        let u = uuid::Uuid::new_v4().simple().to_string();
        TestStream {
            prefix: format!("fltest_{}", &u[..12]),
            name: format!("FLTEST_{}", &u[..12].to_ascii_uppercase()),
        }
    }

    fn config(&self, url: String) -> NatsConfig {
        NatsConfig {
            url,
            subject_prefix: self.prefix.clone(),
            stream: Some(self.name.clone()),
        }
    }

    async fn jetstream() -> async_nats::jetstream::Context {
        let client = async_nats::connect(nats_url())
            .await
            .expect("NATS must be running with JetStream: start it with tools/test.sh");
        async_nats::jetstream::new(client)
    }

    /// Every message of the stream in stream order: (subject, Nats-Msg-Id, body).
    async fn messages(&self) -> Vec<(String, String, Value)> {
        let js = Self::jetstream().await;
        let mut stream = js.get_stream(&self.name).await.expect("stream exists");
        let count = stream.info().await.expect("stream info").state.messages;
        let mut out = Vec::new();
        for seq in 1..=count {
            let m = stream.get_raw_message(seq).await.expect("stored message");
            let id = m
                .headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .map(|v| v.as_str().to_owned())
                .expect("every message has Nats-Msg-Id");
            let body: Value = serde_json::from_slice(&m.payload).expect("JSON body");
            out.push((m.subject.to_string(), id, body));
        }
        out
    }

    async fn delete(&self) {
        let js = Self::jetstream().await;
        let _ = js.delete_stream(&self.name).await;
    }
}

/// Relay over the whole service (`common::app`), as `serve` runs it.
async fn start_service(db: &TestDb, sinks: Vec<Arc<dyn Sink>>) -> common::app::App {
    common::spawn_app(db)
        .configure(|o| {
            o.outbox_sinks = sinks;
            o.outbox_relay = quick();
        })
        .await
}

both_backends!(
    wallet_events_arrive_on_jetstream_in_order_with_the_outbox_id_as_msg_id,
    |db: TestDb| async move {
        let stream = TestStream::new();
        let sink = Arc::new(NatsSink::new(stream.config(nats_url())));
        let started = start_service(&db, vec![sink]).await;
        let dbp = started.state.jobs.db().clone();
        traffic(&started.state.wallets, &["w-a", "w-b", "w-c"], 4, "c").await;

        let rows = all_rows(&dbp).await;
        assert_eq!(rows.len(), 15, "one outbox row per wallet event");
        let max = rows.last().map(|r| r.id).unwrap_or(0);
        wait_delivered(&dbp, "nats", max).await;

        // Exactly the rows, in id order, each with its id as Nats-Msg-Id, on
        // <prefix>.<type>.
        let got = stream.messages().await;
        assert_eq!(got.len(), rows.len());
        for ((subject, msg_id, body), row) in got.iter().zip(&rows) {
            assert_eq!(msg_id, &row.id.to_string());
            assert_eq!(subject, &format!("{}.{}", stream.prefix, row.r#type));
            assert_is_row(body, row);
        }
        let bodies: Vec<Value> = got.into_iter().map(|(_, _, b)| b).collect();
        assert_in_order_per_aggregate(&bodies);

        // At least once, stored once: re-sending everything (a relay that crashed
        // before its checkpoint) is deduplicated by JetStream through Nats-Msg-Id.
        exec(
            &dbp,
            "UPDATE outbox_sinks SET delivered_id = 0 WHERE name = 'nats'",
        )
        .await;
        wait_delivered(&dbp, "nats", max).await;
        assert_eq!(stream.messages().await.len(), rows.len());
        stream.delete().await;
    }
);

// ---------------------------------------------------------------- webhooks

/// What a test webhook receiver saw: accepted deliveries in arrival order, and how
/// many it refused.
#[derive(Default)]
struct Received {
    accepted: Vec<Value>,
    refused: usize,
    bad_signatures: usize,
    /// Deliveries whose id header or content type did not match the body (asserting
    /// inside the handler would only drop the connection and make the relay retry).
    bad_headers: usize,
}

/// A webhook receiver on loopback: verifies the signature with the secret (its own
/// HMAC, not the service's code), answers 503 (down, never a refusal of the message,
/// so never a dead letter) while `down` is set.
struct Receiver {
    url: String,
    received: Arc<Mutex<Received>>,
    down: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hmac_hex(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl Receiver {
    async fn start(listener: tokio::net::TcpListener, down: bool) -> Receiver {
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Received::default()));
        let down = Arc::new(AtomicBool::new(down));
        let (r, d) = (received.clone(), down.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (r, d) = (r.clone(), d.clone());
                    async move {
                        let h = |n: &str| {
                            headers
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned()
                        };
                        let mut seen = r.lock().expect("lock");
                        if d.load(Ordering::SeqCst) {
                            seen.refused += 1;
                            return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                        }
                        let ts = h("x-factledger-timestamp");
                        let fresh = ts
                            .parse::<i64>()
                            .is_ok_and(|t| (chrono::Utc::now().timestamp() - t).abs() < 300);
                        if !fresh || h("x-factledger-signature") != hmac_hex(SECRET, &ts, &body) {
                            seen.bad_signatures += 1;
                            return axum::http::StatusCode::UNAUTHORIZED;
                        }
                        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                        if h("x-factledger-outbox-id").parse::<i64>().ok() != v["id"].as_i64()
                            || h("content-type") != "application/json"
                        {
                            seen.bad_headers += 1;
                        }
                        seen.accepted.push(v);
                        axum::http::StatusCode::NO_CONTENT
                    }
                },
            ),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            received,
            down,
            task,
        }
    }

    fn accepted(&self) -> Vec<Value> {
        self.received.lock().expect("lock").accepted.clone()
    }
}

pub(crate) fn webhook(name: &str, url: String, secret: &[u8]) -> Arc<dyn Sink> {
    let config = WebhookConfig::new(name, url, secret.to_vec()).expect("valid webhook");
    Arc::new(WebhookSink::new(config).expect("client"))
}

pub(crate) async fn loopback() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback")
}

both_backends!(
    a_webhook_receives_every_message_in_order_signed_over_timestamp_and_body,
    |db: TestDb| async move {
        let receiver = Receiver::start(loopback().await, false).await;
        // A second webhook with the wrong secret: every delivery is refused by the
        // receiver (401), so the signature really is checked.
        let forged = webhook("forged", receiver.url.clone(), b"not-the-secret-0123456789");
        let sinks = vec![webhook("bi", receiver.url.clone(), SECRET), forged];
        let started = start_service(&db, sinks).await;
        let dbp = started.state.jobs.db().clone();
        traffic(&started.state.wallets, &["w-1", "w-2"], 3, "c").await;

        let rows = all_rows(&dbp).await;
        let max = rows.last().map(|r| r.id).expect("rows");
        wait_delivered(&dbp, "webhook:bi", max).await;
        let accepted = receiver.accepted();
        assert_eq!(accepted.len(), rows.len(), "each row once, none lost");
        for (body, row) in accepted.iter().zip(&rows) {
            assert_is_row(body, row);
        }
        assert_in_order_per_aggregate(&accepted);
        assert_eq!(receiver.received.lock().expect("lock").bad_headers, 0);

        let forged = eventually("the forged webhook to fail", || async {
            sink_status(&dbp, "webhook:forged")
                .await
                .filter(|s| s.attempts >= 2)
        })
        .await;
        assert_eq!(forged.delivered_id, 0);
        assert!(
            forged.last_error.as_deref().unwrap_or("").contains("401"),
            "{forged:?}"
        );
        assert!(receiver.received.lock().expect("lock").bad_signatures >= 2);
    }
);

// ---------------------------------------------------------------- outages

/// A TCP forwarder from `listener` to `target` (a NATS server "coming back" on a port
/// that was closed).
fn forward(listener: tokio::net::TcpListener, target: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

/// A port nothing listens on (bound, then released).
pub(crate) async fn closed_port() -> u16 {
    let l = loopback().await;
    l.local_addr().expect("addr").port()
}

both_backends!(
    sinks_that_are_down_never_block_commands_and_drain_in_order_when_they_recover,
    |db: TestDb| async move {
        let stream = TestStream::new();
        let nats_port = closed_port().await;
        let hook_port = closed_port().await;
        let nats = Arc::new(NatsSink::new(
            stream.config(format!("nats://127.0.0.1:{nats_port}")),
        ));
        // One webhook refused (nothing listens), one answering 503.
        let refused = webhook(
            "refused",
            format!("http://127.0.0.1:{hook_port}/hook"),
            SECRET,
        );
        let failing = Receiver::start(loopback().await, true).await;
        let sinks: Vec<Arc<dyn Sink>> = vec![
            nats,
            refused,
            webhook("failing", failing.url.clone(), SECRET),
            Arc::new(outbox::log::LogSink),
        ];
        let started = start_service(&db, sinks).await;
        let dbp = started.state.jobs.db().clone();
        let bus = started.state.wallets.clone();
        let wallets = ["w-x", "w-y", "w-z"];

        // Every command succeeds promptly although three sinks are down (R-INV-8).
        traffic(&bus, &wallets, 4, "down").await;
        let max = all_rows(&dbp).await.last().map(|r| r.id).expect("rows");
        assert_eq!(max, 15);

        // Each failing sink records its error and attempts and stays at 0; the log
        // sink is not held back by them.
        for (name, error) in [
            ("nats", "connect"),
            ("webhook:refused", "connect"),
            ("webhook:failing", "503"),
        ] {
            let s = eventually(&format!("{name} to record failures"), || async {
                sink_status(&dbp, name).await.filter(|s| s.attempts >= 2)
            })
            .await;
            assert_eq!(s.delivered_id, 0, "{s:?}");
            assert_eq!(s.backlog, max, "{s:?}");
            assert!(s.failing_since.is_some(), "{s:?}");
            let e = s.last_error.clone().unwrap_or_default();
            assert!(e.contains(error), "{name}: {e}");
        }
        wait_delivered(&dbp, "log", max).await;

        // More traffic while down, then everything comes back.
        more_credits(&bus, &wallets, 2, "later").await;
        let rows = all_rows(&dbp).await;
        let max = rows.last().map(|r| r.id).expect("rows");
        let _nats_back = forward(
            tokio::net::TcpListener::bind(("127.0.0.1", nats_port))
                .await
                .expect("rebind the NATS port"),
            nats_url().trim_start_matches("nats://").to_owned(),
        );
        let refused_back = Receiver::start(
            tokio::net::TcpListener::bind(("127.0.0.1", hook_port))
                .await
                .expect("rebind the webhook port"),
            false,
        )
        .await;
        failing.down.store(false, Ordering::SeqCst);

        for name in ["nats", "webhook:refused", "webhook:failing", "log"] {
            let s = wait_delivered(&dbp, name, max).await;
            // Down is not a refusal: nothing was given up.
            assert_eq!(s.dead_letters, 0, "{s:?}");
            assert_eq!((s.backlog, s.last_error, s.failing_since), (0, None, None));
        }
        assert_eq!(
            scalar(&dbp, "SELECT COUNT(*) FROM outbox_dead_letters").await,
            0
        );
        // The backlog drained exactly once, in id order, so in order per aggregate.
        for receiver in [&failing, &refused_back] {
            let got = receiver.accepted();
            let ids: Vec<i64> = got.iter().map(|m| m["id"].as_i64().expect("id")).collect();
            assert_eq!(ids, (1..=max).collect::<Vec<_>>());
            assert_in_order_per_aggregate(&got);
        }
        let on_stream = stream.messages().await;
        let ids: Vec<String> = on_stream.iter().map(|(_, id, _)| id.clone()).collect();
        assert_eq!(ids, (1..=max).map(|i| i.to_string()).collect::<Vec<_>>());
        let bodies: Vec<Value> = on_stream.into_iter().map(|(_, _, b)| b).collect();
        assert_in_order_per_aggregate(&bodies);
        stream.delete().await;
    }
);

// ---------------------------------------------------------------- checkpoints

/// A sink that records what it got; the first message of every batch waits at a
/// barrier, so two relays are sure to hold the same batch at the same time.
struct BarrierSink {
    barrier: tokio::sync::Barrier,
    first_id: i64,
    got: Mutex<Vec<i64>>,
}

#[async_trait::async_trait]
impl Sink for BarrierSink {
    fn name(&self) -> &str {
        "shared"
    }

    async fn deliver(&self, m: &OutboxMessage) -> Result<(), SinkError> {
        self.got.lock().expect("lock").push(m.id);
        if m.id == self.first_id {
            self.barrier.wait().await;
        }
        Ok(())
    }
}

both_backends!(
    two_relays_of_one_sink_never_both_advance_its_checkpoint,
    |db: TestDb| async move {
        let d = db.database().await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        traffic(&bus, &["w-1"], 4, "c").await;
        let max = all_rows(&d.db).await.last().map(|r| r.id).expect("rows");
        let sink = BarrierSink {
            barrier: tokio::sync::Barrier::new(2),
            first_id: 1,
            got: Mutex::new(Vec::new()),
        };
        // Two relays (think: two processes) read checkpoint 0 and deliver 1..=max.
        let config = quick();
        let (a, b) = tokio::join!(
            outbox::relay_once(&d.db, &sink, &config),
            outbox::relay_once(&d.db, &sink, &config)
        );
        let outcomes = [a, b];
        let advanced = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(Step::Delivered { from: 0, to }) if *to == max))
            .count();
        let refused = outcomes
            .iter()
            .filter(|o| matches!(o, Err(RelayError::CheckpointMoved(_))))
            .count();
        assert_eq!((advanced, refused), (1, 1), "{outcomes:?}");
        // Both delivered (at least once), the checkpoint moved once.
        assert_eq!(sink.got.lock().expect("lock").len() as i64, 2 * max);
        let s = sink_status(&d.db, "shared").await.expect("checkpoint");
        assert_eq!(s.delivered_id, max);

        // The compare-and-set itself: a move from a stale value writes nothing.
        assert!(!checkpoint::advance(&d.db, "shared", 0, max + 7, true)
            .await
            .expect("cas"));
        assert!(checkpoint::advance(&d.db, "shared", max, max, true)
            .await
            .expect("cas"));
        assert_eq!(
            scalar(
                &d.db,
                "SELECT delivered_id FROM outbox_sinks WHERE name = 'shared'"
            )
            .await,
            max
        );
    }
);

both_backends!(
    a_missing_outbox_id_stops_a_relay_before_it_and_is_never_skipped,
    |db: TestDb| async move {
        let d = db.database().await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        traffic(&bus, &["w-1"], 2, "c").await; // ids 1..=3
        let insert = |id: i64| {
            format!(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, \
                 created_at_ms) VALUES ({id}, 'test', 't-1', 'test.Planted', '{{}}', 0)"
            )
        };
        exec(&d.db, &insert(5)).await; // 4 is missing
        let sink = BarrierSink {
            barrier: tokio::sync::Barrier::new(1),
            first_id: 0,
            got: Mutex::new(Vec::new()),
        };
        let config = quick();
        assert_eq!(
            outbox::relay_once(&d.db, &sink, &config)
                .await
                .expect("delivers"),
            Step::Delivered { from: 0, to: 3 }
        );
        for _ in 0..3 {
            match outbox::relay_once(&d.db, &sink, &config).await {
                Err(RelayError::Hole { missing_id: 4 }) => {}
                other => panic!("expected the hole at 4, got {other:?}"),
            }
        }
        exec(&d.db, &insert(4)).await;
        assert_eq!(
            outbox::relay_once(&d.db, &sink, &config)
                .await
                .expect("delivers"),
            Step::Delivered { from: 3, to: 5 }
        );
        assert_eq!(*sink.got.lock().expect("lock"), vec![1, 2, 3, 4, 5]);
    }
);

// ---------------------------------------------------------------- log, reads, CLI

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// This test binary's log, captured by a global subscriber installed once. (A
/// thread-scoped `set_default` loses lines here: tracing caches each call site's
/// interest process-wide, and tests running in parallel rebuild it under each other.)
fn captured_log() -> &'static Captured {
    static LOG: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        captured
    })
}

both_backends!(
    the_log_sink_writes_one_line_per_message,
    |db: TestDb| async move {
        let log = captured_log();
        let d = db.database().await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        // Wallet ids of this test only: the log holds every test's lines.
        let u = uuid::Uuid::new_v4().simple().to_string();
        let (w1, w2) = (format!("log1-{}", &u[..8]), format!("log2-{}", &u[..8]));
        traffic(&bus, &[&w1, &w2], 1, "c").await;
        let rows = all_rows(&d.db).await;

        let sink = outbox::log::LogSink;
        let config = quick();
        while outbox::relay_once(&d.db, &sink, &config)
            .await
            .expect("relay")
            != Step::Idle
        {}
        let text = String::from_utf8_lossy(&log.0.lock().expect("lock")).into_owned();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("outbox message"))
            .filter(|l| {
                l.contains(&format!("aggregateid={w1} "))
                    || l.contains(&format!("aggregateid={w2} "))
            })
            .collect();
        assert_eq!(lines.len(), rows.len(), "{text}");
        for (line, row) in lines.iter().zip(&rows) {
            assert!(line.contains(&format!("outbox_id={} ", row.id)), "{line}");
            assert!(
                line.contains(&format!("outbox_type={} ", row.r#type)),
                "{line}"
            );
            assert!(
                line.contains(&format!("aggregateid={} ", row.aggregateid)),
                "{line}"
            );
        }
        let s = sink_status(&d.db, "log").await.expect("checkpoint");
        assert_eq!((s.delivered_id, s.backlog), (rows.len() as i64, 0));
    }
);

both_backends!(
    every_role_reads_the_sinks_over_http_and_the_cli_prints_them,
    |db: TestDb| async move {
        let receiver = Receiver::start(loopback().await, true).await;
        let sinks = vec![webhook("ops", receiver.url.clone(), SECRET)];
        let started = start_service(&db, sinks).await;
        let dbp = started.state.jobs.db().clone();
        traffic(&started.state.wallets, &["w-1"], 2, "c").await;
        eventually("the webhook to fail twice", || async {
            sink_status(&dbp, "webhook:ops")
                .await
                .filter(|s| s.attempts >= 2)
        })
        .await;

        let auditor = started
            .state
            .keys
            .create(factledger::infra::auth::Role::Auditor)
            .await
            .expect("auditor key");
        let base = started.base.clone();
        let client = reqwest::Client::new();
        let unauthenticated = client
            .get(format!("{base}/v1/outbox/sinks"))
            .send()
            .await
            .expect("request");
        assert_eq!(unauthenticated.status(), 401);
        let body: Value = client
            .get(format!("{base}/v1/outbox/sinks"))
            .bearer_auth(&auditor.secret)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("JSON");
        assert_eq!(body["max_id"], json!(3));
        let s = &body["sinks"][0];
        assert_eq!(s["name"], json!("webhook:ops"));
        assert_eq!(
            (s["delivered_id"].clone(), s["backlog"].clone()),
            (json!(0), json!(3))
        );
        assert!(s["attempts"].as_i64().unwrap_or(0) >= 2, "{s}");
        assert!(
            s["last_error"].as_str().unwrap_or("").contains("503"),
            "{s}"
        );
        assert_eq!(s["dead_letters"], json!(0));
        assert!(s["failing_since"].is_string(), "{s}");
        let metrics = client
            .get(format!("{base}/metrics"))
            .bearer_auth(&auditor.secret)
            .send()
            .await
            .expect("request")
            .text()
            .await
            .expect("text");
        assert!(
            metrics.contains("factledger_outbox_backlog{sink=\"webhook:ops\"}"),
            "{metrics}"
        );

        let out = std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .args(["--database-url", &db.url, "outbox", "status"])
            .output()
            .expect("run factledger");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cli: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(cli["max_id"], json!(3));
        assert_eq!(cli["sinks"][0]["name"], json!("webhook:ops"));
        assert_eq!(cli["sinks"][0]["backlog"], json!(3));
    }
);

/// Run the binary's `serve` with `args` and `env`; it must exit (refusing its
/// configuration) within a bound, else it is killed and the test fails.
fn serve_refuses(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("f.db").display());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_factledger"));
    cmd.current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("FACTLEDGER_NATS_URL")
        .env("RUST_LOG", "warn")
        .args(["--database-url", &url, "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run factledger");
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve {args:?} started instead of refusing its configuration");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn serve_refuses_a_webhook_without_its_secret_and_credentials_on_the_command_line() {
    let e = serve_refuses(
        &[],
        &[("FACTLEDGER_WEBHOOK_BI_URL", "http://127.0.0.1:9/h")],
    );
    assert!(e.contains("FACTLEDGER_WEBHOOK_BI_SECRET"), "{e}");
    let e = serve_refuses(&["--nats-url", "nats://user:pw@127.0.0.1:4222"], &[]);
    assert!(e.contains("FACTLEDGER_NATS_URL"), "{e}");
}

/// A sink that records every id it was given, in order, under a shared name.
struct Recording {
    name: &'static str,
    got: Arc<Mutex<Vec<i64>>>,
}

#[async_trait::async_trait]
impl Sink for Recording {
    fn name(&self) -> &str {
        self.name
    }

    async fn deliver(&self, m: &OutboxMessage) -> Result<(), SinkError> {
        self.got.lock().expect("lock").push(m.id);
        Ok(())
    }
}

both_backends!(
    two_running_relays_of_one_sink_deliver_every_id_at_least_once_in_order,
    |db: TestDb| async move {
        let d = db.database().await;
        let bus = CommandBus::<Wallet>::start(db.store.clone());
        // One destination, fed by two processes' relays of the same sink, racing for
        // one checkpoint while commands keep writing rows.
        let destination: Arc<Mutex<Vec<i64>>> = Arc::default();
        let config = RelayConfig {
            batch_rows: 3,
            ..quick()
        };
        let relay = |config: RelayConfig| {
            let sink = Recording {
                name: "twin",
                got: Arc::clone(&destination),
            };
            outbox::spawn(d.db.clone(), vec![Arc::new(sink)], config)
        };
        let (_a, _b) = (relay(config.clone()), relay(config));
        traffic(&bus, &["w-1", "w-2", "w-3"], 5, "c").await;
        let max = all_rows(&d.db).await.last().map(|r| r.id).expect("rows");
        wait_delivered(&d.db, "twin", max).await;
        // What a consumer that dedupes by id keeps: every id, in id order (a relay
        // delivers an id only after every smaller one was delivered by someone).
        let got = destination.lock().expect("lock").clone();
        let mut first_seen = Vec::new();
        for id in &got {
            if !first_seen.contains(id) {
                first_seen.push(*id);
            }
        }
        assert_eq!(first_seen, (1..=max).collect::<Vec<_>>(), "{got:?}");
    }
);

/// A webhook that accepts the connection and never answers.
async fn silent_receiver() -> (String, tokio::task::JoinHandle<()>) {
    let listener = loopback().await;
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async {
            tokio::time::sleep(Duration::from_secs(600)).await;
            axum::http::StatusCode::NO_CONTENT
        }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

both_backends!(
    a_sink_that_never_answers_times_out_and_holds_back_nothing_else,
    |db: TestDb| async move {
        let (url, silent) = silent_receiver().await;
        let started = common::spawn_app(&db)
            .configure(|o| {
                o.outbox_sinks = vec![
                    webhook("silent", url, SECRET),
                    Arc::new(outbox::log::LogSink),
                ];
                o.outbox_relay = RelayConfig {
                    delivery_timeout_ms: 300,
                    ..quick()
                };
            })
            .await;
        let dbp = started.state.jobs.db().clone();
        traffic(&started.state.wallets, &["w-1", "w-2"], 2, "c").await;
        let max = all_rows(&dbp).await.last().map(|r| r.id).expect("rows");
        wait_delivered(&dbp, "log", max).await;
        let s = eventually("the silent webhook to time out twice", || async {
            sink_status(&dbp, "webhook:silent")
                .await
                .filter(|s| s.attempts >= 2)
        })
        .await;
        assert_eq!(s.delivered_id, 0);
        let e = s.last_error.unwrap_or_default();
        assert!(e.contains("no acknowledgement within 300 ms"), "{e}");
        silent.abort();
    }
);
