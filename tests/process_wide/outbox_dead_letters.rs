//! Outbox retry schedules, type filters and dead letters (issue 18 item 7): a message a
//! sink refuses is retried on the sink's schedule and then written to
//! `outbox_dead_letters` while the checkpoint moves past it, so later messages flow; a
//! sink that is down never dead-letters and drains on recovery; a sink with type
//! prefixes gets only those types; operators list and replay dead letters over HTTP
//! and the CLI. Both backends.

use crate::common;
use crate::outbox::{
    all_rows, closed_port, command, eventually, loopback, quick, sink_status, traffic,
    wait_delivered, webhook, SECRET,
};

use common::{exec, scalar, TestDb};
use factledger::infra::auth::Role;
use factledger::infra::db::Db;
use factledger::infra::outbox::webhook::{WebhookConfig, WebhookSink};
use factledger::infra::outbox::{
    self, OutboxMessage, RelayError, Sink, SinkError, SinkPolicy, Step,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which deliveries a [`Picky`] receiver refuses: those whose body `field` equals
/// `value`.
type Refusal = Option<(&'static str, String)>;

/// One delivery as the receiver saw it: outbox id, when, and the status it answered.
#[derive(Debug, Clone)]
struct Hit {
    id: i64,
    at: Instant,
    status: u16,
}

/// A webhook receiver on loopback that answers 500 to the deliveries `refuse` picks
/// and 204 to the others, and remembers every delivery.
struct Picky {
    url: String,
    refuse: Arc<Mutex<Refusal>>,
    hits: Arc<Mutex<Vec<Hit>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Picky {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Picky {
    async fn start(listener: tokio::net::TcpListener, refuse: Refusal) -> Picky {
        let addr = listener.local_addr().expect("addr");
        let refuse = Arc::new(Mutex::new(refuse));
        let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
        let (r, h) = (refuse.clone(), hits.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (r, h) = (r.clone(), h.clone());
                async move {
                    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let refused = r
                        .lock()
                        .expect("lock")
                        .as_ref()
                        .is_some_and(|(field, value)| v[*field].as_str() == Some(value.as_str()));
                    let status = if refused {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        axum::http::StatusCode::NO_CONTENT
                    };
                    h.lock().expect("lock").push(Hit {
                        id: v["id"].as_i64().unwrap_or(-1),
                        at: Instant::now(),
                        status: status.as_u16(),
                    });
                    status
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Picky {
            url: format!("http://{addr}/hook"),
            refuse,
            hits,
            task,
        }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().expect("lock").clone()
    }

    /// The ids it accepted, in order.
    fn accepted(&self) -> Vec<i64> {
        self.hits()
            .iter()
            .filter(|h| h.status == 204)
            .map(|h| h.id)
            .collect()
    }

    /// Every delivery of `id`.
    fn deliveries_of(&self, id: i64) -> Vec<Hit> {
        self.hits().into_iter().filter(|h| h.id == id).collect()
    }

    fn recover(&self) {
        *self.refuse.lock().expect("lock") = None;
    }
}

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().copied().map(Duration::from_millis).collect()
}

/// A webhook sink with this policy.
fn webhook_with(name: &str, url: String, policy: SinkPolicy) -> Arc<dyn Sink> {
    let config = WebhookConfig::new(name, url, SECRET.to_vec())
        .expect("valid webhook")
        .with_policy(policy);
    Arc::new(WebhookSink::new(config).expect("client"))
}

/// Outbox rows written by hand (a database no command writes to): ids `1..`, one per
/// type. (The append path's own rows are covered by the other outbox tests.)
async fn plant(db: &Db, types: &[&str]) {
    for (i, t) in types.iter().enumerate() {
        let id = i as i64 + 1;
        exec(
            db,
            &format!(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, \
                 created_at_ms) VALUES ({id}, 'test', 'agg-{id}', '{t}', '{{}}', 0)"
            ),
        )
        .await;
    }
}

async fn dead_letters(db: &Db, sink: &str) -> Vec<outbox::DeadLetter> {
    outbox::dead_letter::list(db, Some(sink), true, 0, 100)
        .await
        .expect("list dead letters")
}

both_backends!(
    a_refused_message_is_dead_lettered_after_its_schedule_and_later_ones_flow,
    |db: TestDb| async move {
        let d = db.database().await;
        plant(
            &d.db,
            &[
                "test.Good",
                "test.Bad",
                "test.Good",
                "test.Good",
                "test.Bad",
            ],
        )
        .await;
        let receiver = Picky::start(loopback().await, Some(("type", "test.Bad".into()))).await;
        let schedule = [40, 80, 120];
        let policy = SinkPolicy {
            types: Vec::new(),
            retry_schedule: Some(ms(&schedule)),
        };
        let sink = webhook_with("picky", receiver.url.clone(), policy);
        let _relay = outbox::spawn(d.db.clone(), vec![sink], quick());

        let s = eventually("the checkpoint to pass both bad messages", || async {
            sink_status(&d.db, "webhook:picky")
                .await
                .filter(|s| s.delivered_id == 5)
        })
        .await;
        // The streak ended with the dead letter; nothing is left to deliver.
        assert_eq!(s.dead_letters, 2, "{s:?}");
        assert_eq!((s.backlog, s.attempts, s.last_error), (0, 0, None));
        // Every good message went through, in order, once.
        assert_eq!(receiver.accepted(), vec![1, 3, 4]);

        // Each bad one was tried exactly schedule + 1 times, the pauses between the
        // tries at least the schedule's.
        for bad in [2, 5] {
            let tries = receiver.deliveries_of(bad);
            assert_eq!(tries.len(), schedule.len() + 1, "{tries:?}");
            assert!(tries.iter().all(|h| h.status == 500));
            for (pair, pause) in tries.windows(2).zip(schedule) {
                let gap = pair[1].at.duration_since(pair[0].at);
                assert!(
                    gap >= Duration::from_millis(pause - 5),
                    "{gap:?} < {pause} ms"
                );
            }
        }
        let dead = dead_letters(&d.db, "webhook:picky").await;
        let got: Vec<_> = dead
            .iter()
            .map(|x| {
                (
                    x.outbox_id,
                    x.r#type.as_str(),
                    x.aggregateid.as_str(),
                    x.attempts,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![(2, "test.Bad", "agg-2", 4), (5, "test.Bad", "agg-5", 4)]
        );
        for x in &dead {
            assert_eq!(x.sink, "webhook:picky");
            assert!(x.last_error.contains("HTTP 500"), "{x:?}");
            assert!(x.replayed_at.is_none() && x.replay_error.is_none());
        }
        // Nothing else is delivered afterwards (the relay is idle, not retrying).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(receiver.hits().len(), 3 + 2 * (schedule.len() + 1));
    }
);

/// A sink answering from a script, one entry per delivery (then accepting).
struct Scripted {
    script: Mutex<Vec<Result<(), SinkError>>>,
    schedule: Vec<Duration>,
}

#[async_trait::async_trait]
impl Sink for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn retry_schedule(&self) -> Option<&[Duration]> {
        Some(&self.schedule)
    }

    async fn deliver(&self, _m: &OutboxMessage) -> Result<(), SinkError> {
        let mut script = self.script.lock().expect("lock");
        if script.is_empty() {
            Ok(())
        } else {
            script.remove(0)
        }
    }
}

fn scripted(script: Vec<Result<(), SinkError>>) -> Scripted {
    Scripted {
        script: Mutex::new(script),
        schedule: ms(&[10, 20]),
    }
}

both_backends!(
    refusals_of_the_head_survive_a_restart_and_a_sink_being_down_never_counts,
    |db: TestDb| async move {
        let d = db.database().await;
        plant(&d.db, &["test.A", "test.B"]).await;
        let refused = || Err(SinkError::Refused("HTTP 422".into()));
        let down = || Err(SinkError::Connect("connection refused".into()));
        let config = quick();
        let refusals = || {
            scalar(
                &d.db,
                "SELECT refusals FROM outbox_sinks WHERE name = 'scripted'",
            )
        };

        // A refusal, then the sink is down twice: one refusal counted, three attempts.
        let sink = scripted(vec![refused(), down(), down()]);
        match outbox::relay_once(&d.db, &sink, &config).await {
            Err(RelayError::Sink {
                failed_id: 1,
                retry_in,
                ..
            }) => {
                assert_eq!(retry_in, Some(Duration::from_millis(10)))
            }
            other => panic!("expected a refusal on the schedule, got {other:?}"),
        }
        for _ in 0..2 {
            match outbox::relay_once(&d.db, &sink, &config).await {
                Err(RelayError::Sink {
                    retry_in: None,
                    error: SinkError::Connect(_),
                    ..
                }) => {}
                other => panic!("expected a sink that is down, got {other:?}"),
            }
        }
        assert_eq!(refusals().await, 1);
        let s = sink_status(&d.db, "scripted").await.expect("checkpoint");
        assert_eq!((s.delivered_id, s.attempts), (0, 3));

        // A restart: a new relay with no memory goes on counting from the table.
        let sink = scripted(vec![refused(), refused()]);
        match outbox::relay_once(&d.db, &sink, &config).await {
            Err(RelayError::Sink { retry_in, .. }) => {
                assert_eq!(retry_in, Some(Duration::from_millis(20)))
            }
            other => panic!("expected the second refusal, got {other:?}"),
        }
        assert_eq!(refusals().await, 2);
        assert_eq!(
            outbox::relay_once(&d.db, &sink, &config)
                .await
                .expect("dead-lettered"),
            Step::DeadLettered { from: 0, id: 1 }
        );
        let s = sink_status(&d.db, "scripted").await.expect("checkpoint");
        assert_eq!((s.delivered_id, s.attempts, s.dead_letters), (1, 0, 1));
        assert_eq!(refusals().await, 0);
        let dead = dead_letters(&d.db, "scripted").await;
        assert_eq!(dead.len(), 1);
        assert_eq!((dead[0].outbox_id, dead[0].attempts), (1, 3));
        assert!(dead[0].last_error.contains("HTTP 422"), "{:?}", dead[0]);

        // The next message flows, and a refusal of it starts from zero.
        assert_eq!(
            outbox::relay_once(&d.db, &scripted(vec![]), &config)
                .await
                .expect("delivers"),
            Step::Delivered { from: 1, to: 2 }
        );
        // A Config or Unavailable failure is not a refusal either.
        plant_more(&d.db, 3, "test.C").await;
        for e in [
            SinkError::Config("HTTP 401".into()),
            SinkError::Unavailable("HTTP 503".into()),
        ] {
            let sink = scripted(vec![Err(e)]);
            assert!(matches!(
                outbox::relay_once(&d.db, &sink, &config).await,
                Err(RelayError::Sink { retry_in: None, .. })
            ));
        }
        assert_eq!(refusals().await, 0);
    }
);

async fn plant_more(db: &Db, id: i64, t: &str) {
    exec(
        db,
        &format!(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, \
             created_at_ms) VALUES ({id}, 'test', 'agg-{id}', '{t}', '{{}}', 0)"
        ),
    )
    .await;
}

both_backends!(
    a_sink_that_cannot_be_reached_never_dead_letters_and_drains_when_it_comes_back,
    |db: TestDb| async move {
        let d = db.database().await;
        plant(&d.db, &["test.A", "test.B", "test.C"]).await;
        let port = closed_port().await;
        // The shortest schedule there is: one refusal more would dead-letter.
        let policy = SinkPolicy {
            types: Vec::new(),
            retry_schedule: Some(Vec::new()),
        };
        let sink = webhook_with("gone", format!("http://127.0.0.1:{port}/hook"), policy);
        let _relay = outbox::spawn(d.db.clone(), vec![sink], quick());
        let s = eventually("the unreachable webhook to fail a few times", || async {
            sink_status(&d.db, "webhook:gone")
                .await
                .filter(|s| s.attempts >= 4)
        })
        .await;
        assert_eq!((s.delivered_id, s.dead_letters), (0, 0), "{s:?}");
        assert!(s.last_error.unwrap_or_default().contains("connect"));

        let back = Picky::start(
            tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .expect("rebind the webhook port"),
            None,
        )
        .await;
        wait_delivered(&d.db, "webhook:gone", 3).await;
        assert_eq!(back.accepted(), vec![1, 2, 3]);
        assert!(dead_letters(&d.db, "webhook:gone").await.is_empty());
    }
);

both_backends!(
    a_sink_with_type_prefixes_gets_only_those_and_passes_the_others,
    |db: TestDb| async move {
        let d = db.database().await;
        plant(
            &d.db,
            &[
                "wallet.Opened",
                "im_member.Joined",
                "alert.projection.stalled",
                "im_member.Left",
                "im_memberX.Other",
                "wallet.Closed",
            ],
        )
        .await;
        let receiver = Picky::start(loopback().await, None).await;
        let everything = Picky::start(loopback().await, None).await;
        let im = webhook_with(
            "im",
            receiver.url.clone(),
            SinkPolicy {
                types: vec!["im_member.".into(), "alert.".into()],
                retry_schedule: None,
            },
        );
        let all = webhook("all", everything.url.clone(), SECRET);
        let config = quick();
        for sink in [&im, &all] {
            while outbox::relay_once(&d.db, sink.as_ref(), &config)
                .await
                .expect("relay")
                != Step::Idle
            {}
        }
        assert_eq!(receiver.accepted(), vec![2, 3, 4]);
        assert_eq!(receiver.hits().len(), 3, "nothing else was even sent");
        assert_eq!(everything.accepted(), vec![1, 2, 3, 4, 5, 6]);
        for name in ["webhook:im", "webhook:all"] {
            let s = sink_status(&d.db, name).await.expect("checkpoint");
            assert_eq!(
                (s.delivered_id, s.backlog, s.dead_letters),
                (6, 0, 0),
                "{s:?}"
            );
        }
        // A batch of nothing but other types still moves the checkpoint.
        plant_more(&d.db, 7, "wallet.Opened").await;
        assert_eq!(
            outbox::relay_once(&d.db, im.as_ref(), &config)
                .await
                .expect("passes"),
            Step::Delivered { from: 6, to: 7 }
        );
        assert_eq!(receiver.hits().len(), 3);
    }
);

/// An HTTP answer: status, content type and JSON body.
async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    key: &str,
) -> (u16, String, Value) {
    let r = client
        .request(method, url)
        .bearer_auth(key)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, content_type, r.json().await.unwrap_or(Value::Null))
}

both_backends!(
    operators_list_and_replay_dead_letters_over_http_and_the_cli,
    |db: TestDb| async move {
        let receiver = Picky::start(loopback().await, Some(("aggregateid", "w-bad".into()))).await;
        let policy = SinkPolicy {
            types: Vec::new(),
            retry_schedule: Some(ms(&[20, 20])),
        };
        let sink = webhook_with("ops", receiver.url.clone(), policy);
        let app = common::spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor])
            .configure(|o| {
                o.outbox_sinks = vec![sink];
                o.outbox_relay = quick();
            })
            .await;
        let dbp = app.state.jobs.db().clone();
        let bus = app.state.wallets.clone();
        traffic(&bus, &["w-ok"], 1, "c").await;
        command(
            &bus,
            "w-bad",
            json!({"type": "Open", "user_id": "u-bad", "currency": "IDR"}),
        )
        .await;
        command(
            &bus,
            "w-ok",
            json!({"type": "CreditPending", "ref_type": "COMMISSION",
                   "ref_id": "later", "amount_minor": 7}),
        )
        .await;
        let rows = all_rows(&dbp).await;
        let max = rows.last().map(|r| r.id).expect("rows");
        let bad = rows
            .iter()
            .find(|r| r.aggregateid == "w-bad")
            .expect("the bad wallet's row")
            .clone();
        eventually("the relay to pass the refused message", || async {
            sink_status(&dbp, "webhook:ops")
                .await
                .filter(|s| s.delivered_id == max && s.dead_letters == 1)
        })
        .await;
        let expected_ok: Vec<i64> = rows
            .iter()
            .map(|r| r.id)
            .filter(|id| *id != bad.id)
            .collect();
        assert_eq!(receiver.accepted(), expected_ok);

        let base = app.base.clone();
        let client = reqwest::Client::new();
        let list = format!("{base}/v1/outbox/dead-letters");
        let (status, _, page) =
            send(&client, reqwest::Method::GET, list.clone(), &app.operator).await;
        assert_eq!(status, 200, "{page}");
        let dead = page["dead_letters"]
            .as_array()
            .expect("dead letters")
            .clone();
        assert_eq!(dead.len(), 1, "{page}");
        let d = &dead[0];
        assert_eq!(
            (
                &d["sink"],
                &d["outbox_id"],
                &d["type"],
                &d["aggregateid"],
                &d["attempts"]
            ),
            (
                &json!("webhook:ops"),
                &json!(bad.id),
                &json!(bad.r#type),
                &json!("w-bad"),
                &json!(3)
            )
        );
        assert!(
            d["replayed_at"].is_null() && d["last_error"].as_str().unwrap_or("").contains("500")
        );
        let id = d["id"].as_i64().expect("id");

        // Operators only; the query is checked.
        let (status, _, _) = send(&client, reqwest::Method::GET, list.clone(), &app.auditor).await;
        assert_eq!(status, 403);
        let (status, _, p) = send(
            &client,
            reqwest::Method::GET,
            format!("{list}?limit=0"),
            &app.operator,
        )
        .await;
        assert_eq!((status, &p["field"]), (422, &json!("limit")));
        let (status, _, p) = send(
            &client,
            reqwest::Method::GET,
            format!("{list}?sink=webhook:other"),
            &app.operator,
        )
        .await;
        assert_eq!(
            (status, p["dead_letters"].as_array().map(Vec::len)),
            (200, Some(0))
        );

        // A replay while the receiver still refuses: 502, recorded on the dead letter.
        let replay = format!("{base}/v1/outbox/dead-letters/{id}:replay");
        let (status, content_type, p) = send(
            &client,
            reqwest::Method::POST,
            replay.clone(),
            &app.operator,
        )
        .await;
        assert_eq!(
            (status, content_type.as_str()),
            (502, "application/problem+json"),
            "{p}"
        );
        assert_eq!(p["code"], json!("REPLAY_FAILED"));
        let (_, _, page) = send(&client, reqwest::Method::GET, list.clone(), &app.operator).await;
        let d = &page["dead_letters"][0];
        assert!(d["replayed_at"].is_null(), "{d}");
        assert!(
            d["replay_error"].as_str().unwrap_or("").contains("500"),
            "{d}"
        );

        // The receiver is fixed: the replay delivers it and marks it replayed.
        receiver.recover();
        let (status, _, d) =
            send(&client, reqwest::Method::POST, replay.clone(), &app.auditor).await;
        assert_eq!(status, 403, "{d}");
        let (status, _, d) = send(
            &client,
            reqwest::Method::POST,
            replay.clone(),
            &app.operator,
        )
        .await;
        assert_eq!(status, 200, "{d}");
        assert!(d["replayed_at"].is_string(), "{d}");
        assert!(d["replay_error"].is_null(), "{d}");
        assert!(
            d["replayed_by"].as_str().unwrap_or("").starts_with("key:"),
            "{d}"
        );
        assert_eq!(receiver.accepted().last(), Some(&bad.id));
        let (_, _, page) = send(&client, reqwest::Method::GET, list.clone(), &app.operator).await;
        assert_eq!(page["dead_letters"], json!([]));
        let (_, _, page) = send(
            &client,
            reqwest::Method::GET,
            format!("{list}?include_replayed=true"),
            &app.operator,
        )
        .await;
        assert_eq!(page["dead_letters"][0]["id"], json!(id));
        assert_eq!(
            sink_status(&dbp, "webhook:ops")
                .await
                .map(|s| s.dead_letters),
            Some(0)
        );

        // Unknown ids and actions.
        let (status, content_type, p) = send(
            &client,
            reqwest::Method::POST,
            format!("{base}/v1/outbox/dead-letters/987654:replay"),
            &app.operator,
        )
        .await;
        assert_eq!(
            (status, content_type.as_str()),
            (404, "application/problem+json")
        );
        assert_eq!(
            (&p["code"], &p["field"]),
            (&json!("DEAD_LETTER_NOT_FOUND"), &json!("id"))
        );
        let (status, _, _) = send(
            &client,
            reqwest::Method::POST,
            format!("{base}/v1/outbox/dead-letters/{id}:bury"),
            &app.operator,
        )
        .await;
        assert_eq!(status, 404);

        // The CLI: the list (replayed ones with --all), and a replay through the
        // sinks `serve` would build from the same environment.
        let cli = |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
                .env_remove("DATABASE_URL")
                .env_remove("FACTLEDGER_NATS_URL")
                .env("RUST_LOG", "warn")
                .env("FACTLEDGER_WEBHOOK_OPS_URL", &receiver.url)
                .env(
                    "FACTLEDGER_WEBHOOK_OPS_SECRET",
                    String::from_utf8_lossy(SECRET).as_ref(),
                )
                .args(["--database-url", &db.url, "outbox"])
                .args(args)
                .output()
                .expect("run factledger")
        };
        let out = cli(&["dead-letters"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&out.stdout).expect("JSON"),
            json!([])
        );
        let out = cli(&["dead-letters", "--all", "--sink", "webhook:ops"]);
        let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(listed[0]["id"], json!(id));
        let before = receiver.deliveries_of(bad.id).len();
        let out = cli(&["replay", &id.to_string()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let replayed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert!(
            replayed["replayed_by"]
                .as_str()
                .unwrap_or("")
                .starts_with("cli:"),
            "{replayed}"
        );
        assert_eq!(receiver.deliveries_of(bad.id).len(), before + 1);
        let out = cli(&["replay", "987654"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("no dead letter 987654"));
    }
);
