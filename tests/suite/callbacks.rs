//! The callback inbox (issue 4 item 7; SPEC R-PAY-4, R-CB-1; seed 000 "回调重放"):
//! admit, verify first, persist, normalise, dedupe, handle; replay only verified,
//! normalised, failed callbacks, from the stored normalised payload; a redelivery of an
//! unfinished handling takes it over. Over HTTP, both backends.

use crate::common;

use async_trait::async_trait;
use common::{exec, scalar, TestDb};
use factledger::callbacks::inbox::{self, CallbackRow};
use factledger::callbacks::verify::hmac_sha256_hex;
use factledger::callbacks::{
    replay_failed, CallbackFailure, CallbackHandler, CallbackProvider, HandleStatus, JsonPointers,
    NormalizedCallback, Registry, ReplayFailedOptions, Secret, Verifier, VerifyStatus,
    CALLBACK_REPLAY,
};
use factledger::infra::auth::Role;
use factledger::infra::db::{now_ms, Db};
use factledger::infra::jobs::{ops, JobStatus, JobSubmit, Selector};
use factledger::infra::store::{Fence, UnitOfWork};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SECRET: &str = "acme-test-secret";
const TOKEN: &str = "xendit-test-token";

/// A handler that records what it is given and fails as often as it is told to.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(NormalizedCallback, Option<Fence>)>>,
    fail_next: AtomicUsize,
}

impl Recorder {
    fn calls(&self) -> Vec<(NormalizedCallback, Option<Fence>)> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl CallbackHandler for Recorder {
    async fn handle(
        &self,
        cb: &NormalizedCallback,
        fence: Option<Fence>,
    ) -> Result<(), CallbackFailure> {
        self.calls.lock().unwrap().push((cb.clone(), fence));
        let failing = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(CallbackFailure::new("the ledger is unavailable"));
        }
        Ok(())
    }
}

/// `acme` signs with HMAC in `x-signature`, `xendit` sends a token in
/// `x-callback-token`, `nosecret` has no secret configured.
fn registry(handler: &Arc<Recorder>) -> Registry {
    let h = || handler.clone() as Arc<dyn CallbackHandler>;
    let acme = Arc::new(JsonPointers::new("/id", "/type").with_data("/data"));
    let xendit = Arc::new(JsonPointers::new("/id", "/status"));
    Registry::new(vec![
        CallbackProvider::new(
            "acme",
            Verifier::hmac(Some(Secret::new(SECRET)), "X-Signature"),
            acme.clone(),
            h(),
        ),
        CallbackProvider::new(
            "xendit",
            Verifier::token(Some(Secret::new(TOKEN)), "x-callback-token"),
            xendit,
            h(),
        ),
        CallbackProvider::new(
            "nosecret",
            Verifier::hmac_from("nosecret", "x-signature", |_| None),
            acme,
            h(),
        ),
    ])
    .expect("valid providers")
}

/// The running service (`common::app`) and the handler its providers call.
struct App {
    app: common::app::App,
    handler: Arc<Recorder>,
}

impl std::ops::Deref for App {
    type Target = common::app::App;

    fn deref(&self) -> &common::app::App {
        &self.app
    }
}

async fn spawn(db: &TestDb) -> App {
    let handler = Arc::new(Recorder::default());
    let app = common::spawn_app(db)
        .configure(|o| {
            o.callbacks = registry(&handler);
            // The background loop stays out of the way: the tests drive the engine.
            o.job_scan_interval_ms = Some(3_600_000);
        })
        .await;
    // The built-in cron (the failed-callback replay scan every 2 min) stays out of the
    // way too: its firing submits and kicks every failed callback's replay job, which
    // would race the rounds these tests drive. Another deployment holds the lease.
    exec(
        app.state.jobs.db(),
        "UPDATE cron_leases SET owner = 'tests: held elsewhere', epoch = epoch + 1, \
         lease_until_ms = 9000000000000000",
    )
    .await;
    App { app, handler }
}

/// A response: status, content type, JSON body.
struct Resp {
    status: StatusCode,
    content_type: String,
    body: Value,
}

impl Resp {
    #[track_caller]
    fn problem(&self, status: u16, code: &str, field: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        assert_eq!(
            self.content_type, "application/problem+json",
            "{}",
            self.body
        );
        assert_eq!(self.body["code"], code, "{}", self.body);
        if field.is_empty() {
            assert!(self.body.get("field").is_none(), "{}", self.body);
        } else {
            assert_eq!(self.body["field"], field, "{}", self.body);
        }
    }

    fn id(&self) -> i64 {
        let detail = self.body["detail"].as_str().unwrap_or_default();
        self.body["id"].as_i64().unwrap_or_else(|| {
            // Problems name the stored callback in their detail.
            let tail = detail.split("stored as callback ").nth(1).expect("an id");
            tail.split(';').next().unwrap().parse().unwrap()
        })
    }
}

impl App {
    fn db(&self) -> &Db {
        self.state.jobs.db()
    }

    async fn deliver(&self, provider: &str, body: &str, headers: &[(&str, &str)]) -> Resp {
        let mut req = self
            .client
            .post(format!("{}/v1/callbacks/{provider}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let content_type = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = r.bytes().await.unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Resp {
            status,
            content_type,
            body,
        }
    }

    /// Deliver to `acme`, signed with its secret.
    async fn signed(&self, body: &str) -> Resp {
        let sig = hmac_sha256_hex(SECRET.as_bytes(), body.as_bytes());
        self.deliver("acme", body, &[("x-signature", &sig)]).await
    }

    async fn get(&self, path: &str, key: Option<&str>) -> (StatusCode, Value) {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.unwrap();
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    /// The refused samples of a provider (verify failed), oldest first.
    async fn samples(&self, provider: &str) -> Vec<CallbackRow> {
        let mut rows = Vec::new();
        for s in inbox::list(self.db(), Some(provider), None, 0, 1_000)
            .await
            .unwrap()
        {
            if s.verify_status == VerifyStatus::Failed {
                rows.push(self.row(s.id).await);
            }
        }
        rows
    }

    async fn row(&self, id: i64) -> CallbackRow {
        inbox::load(self.db(), id).await.unwrap().expect("stored")
    }

    /// Replay jobs of a callback (by business key).
    async fn replay_jobs(&self, id: i64) -> i64 {
        scalar(
            self.db(),
            &format!("SELECT COUNT(*) FROM jobs WHERE business_key = 'callback:{id}'"),
        )
        .await
    }

    fn replay_code(id: i64) -> String {
        CALLBACK_REPLAY.code(&format!("callback:{id}"))
    }

    /// Write a `callback_replay` job by hand (as an operator could; not kicked, so
    /// nothing races the test) and run it at once through a manual retry; returns the
    /// round's summary.
    async fn replay_by_hand(&self, id: i64) -> Value {
        let job = JobSubmit::plain(
            &CALLBACK_REPLAY,
            format!("callback:{id}"),
            json!({"callback_id": id}),
        );
        let row = job.row(now_ms()).unwrap();
        let code = row.code.clone();
        self.state
            .jobs
            .store()
            .append(&[UnitOfWork {
                jobs: vec![row],
                ..Default::default()
            }])
            .await
            .unwrap();
        let run = self
            .state
            .jobs
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await
            .unwrap();
        assert_eq!(run.claimed, 1, "{run:?}");
        let view = ops::show(self.db(), &code).await.unwrap().unwrap();
        assert_eq!(view.job.status, JobStatus::Success, "{view:?}");
        assert!(!view.levels.business.done, "{view:?}");
        view.levels.round.expect("a round").summary
    }
}

fn payload(row: &CallbackRow) -> Value {
    serde_json::from_str(row.normalized_payload.as_deref().expect("normalised")).unwrap()
}

both_backends!(
    a_correctly_signed_callback_is_stored_raw_and_normalised_handled_once_and_a_second_delivery_is_a_duplicate,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let body = r#"{"id":"evt-1","type":"payment.paid","data":{"order":"o-1","amount_minor":1500}}"#;
        let r = app.signed(body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["status"], "HANDLED");
        let id = r.id();

        let row = app.row(id).await;
        assert_eq!(row.raw_body, body.as_bytes(), "the body exactly as received");
        let headers: Value = serde_json::from_str(&row.headers).unwrap();
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            headers["x-signature"],
            hmac_sha256_hex(SECRET.as_bytes(), body.as_bytes())
        );
        let s = &row.summary;
        assert_eq!(s.verify_status, VerifyStatus::Verified);
        assert_eq!(s.provider_event_id.as_deref(), Some("evt-1"));
        assert_eq!(s.event_type.as_deref(), Some("payment.paid"));
        assert_eq!(
            payload(&row),
            json!({"event_id": "evt-1", "event_type": "payment.paid",
                   "data": {"order": "o-1", "amount_minor": 1500}})
        );
        assert_eq!((s.handle_status, s.handle_attempts), (HandleStatus::Handled, 1));
        assert!(s.handled_at_ms.is_some() && s.handle_error.is_none());
        let calls = app.handler.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0.event_id, "evt-1");
        assert_eq!(calls[0].0.callback_id, id);
        assert_eq!(calls[0].1, None, "the delivery itself runs unfenced");

        // The provider delivers the same event again: stored for audit, a duplicate,
        // not handled again.
        let again = app.signed(body).await;
        assert_eq!(again.status, StatusCode::OK, "{}", again.body);
        assert_eq!(again.body["status"], "DUPLICATE");
        assert_eq!(again.body["duplicate_of"], id);
        let dup = app.row(again.id()).await;
        assert_eq!(dup.summary.handle_status, HandleStatus::Duplicate);
        assert_eq!(dup.summary.duplicate_of, Some(id));
        assert_eq!(dup.summary.provider_event_id, None);
        assert_eq!(dup.summary.handle_attempts, 0);
        // …and again with another body under the same event id: still a duplicate,
        // and the row says the payload differs.
        let changed = body.replace("1500", "9999");
        let third = app.signed(&changed).await;
        assert_eq!(third.body["status"], "DUPLICATE", "{}", third.body);
        let third = app.row(third.id()).await;
        assert!(third.summary.handle_error.unwrap().contains("differs"));
        assert_eq!(app.handler.calls().len(), 1, "handled once");
        assert_eq!(app.replay_jobs(id).await, 0);
        let report = replay_failed(&app.state.jobs, ReplayFailedOptions::default())
            .await
            .unwrap();
        assert_eq!(report.submitted, 0);

        // Reads: any role; the single read has the raw body.
        let auditor = app.state.keys.create(Role::Auditor).await.unwrap().secret;
        let (status, _) = app.get("/v1/callbacks", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, page) = app
            .get("/v1/callbacks?provider=acme&handle_status=DUPLICATE", Some(&auditor))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let listed: Vec<i64> = page["callbacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_i64().unwrap())
            .collect();
        assert_eq!(listed, vec![again.id(), third.summary.id]);
        let (_, page) = app.get("/v1/callbacks?limit=1", Some(&auditor)).await;
        assert_eq!(page["callbacks"][0]["id"], id);
        let after = page["next_after"].as_i64().unwrap();
        let (_, page) = app
            .get(&format!("/v1/callbacks?after={after}&limit=5"), Some(&auditor))
            .await;
        assert_eq!(page["callbacks"].as_array().unwrap().len(), 2);
        assert!(page["next_after"].is_null());
        let (status, page) = app
            .get("/v1/callbacks?handle_status=DONE", Some(&auditor))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{page}");
        assert_eq!(page["field"], "handle_status");
        let (status, one) = app.get(&format!("/v1/callbacks/{id}"), Some(&auditor)).await;
        assert_eq!(status, StatusCode::OK, "{one}");
        assert_eq!(one["raw_body"], body);
        assert_eq!(one["verify_status"], "VERIFIED");
        assert_eq!(one["handle_status"], "HANDLED");
        assert_eq!(one["normalized_payload"]["event_id"], "evt-1");
        assert_eq!(one["replay_job"], App::replay_code(id));
        let (status, _) = app.get("/v1/callbacks/999999", Some(&auditor)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (_, doc) = app.get("/openapi.json", None).await;
        assert!(doc["paths"]["/v1/callbacks/{provider}"]["post"].is_object());
        assert!(doc["paths"]["/v1/callbacks/{id}"]["get"].is_object());
        assert!(doc["paths"]["/v1/callbacks"]["get"].is_object());
    }
);

both_backends!(
    a_wrong_or_missing_signature_is_401_stores_only_a_bounded_sample_and_is_never_handled_or_replayed,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let body = r#"{"id":"evt-9","type":"payment.paid","data":{"amount_minor":1}}"#;
        let forged = hmac_sha256_hex(b"a guess", body.as_bytes());
        let wrong = app.deliver("acme", body, &[("x-signature", &forged)]).await;
        wrong.problem(401, "CALLBACK_UNVERIFIED", "x-signature");
        let missing = app.deliver("acme", body, &[]).await;
        missing.problem(401, "CALLBACK_UNVERIFIED", "x-signature");
        // A provider without a configured secret refuses everything, even a body
        // "signed" with an empty key.
        let empty_key = hmac_sha256_hex(b"", body.as_bytes());
        let no_secret = app
            .deliver("nosecret", body, &[("x-signature", &empty_key)])
            .await;
        no_secret.problem(401, "CALLBACK_UNVERIFIED", "x-signature");
        assert!(no_secret.body["detail"]
            .as_str()
            .unwrap()
            .contains("FACTLEDGER_CALLBACK_NOSECRET_SECRET"));

        // Nothing but a forensic sample each (the minute's budget is not spent).
        let mut refused = app.samples("acme").await;
        refused.extend(app.samples("nosecret").await);
        assert_eq!(refused.len(), 3);
        for row in &refused {
            assert_eq!(row.raw_body, body.as_bytes(), "a short body is sampled whole");
            let s = &row.summary;
            assert_eq!(s.verify_status, VerifyStatus::Failed);
            assert!(s.verify_error.is_some());
            assert_eq!(s.handle_status, HandleStatus::Skipped);
            assert_eq!(
                (s.handle_attempts, row.normalized_payload.as_deref()),
                (0, None)
            );
            assert_eq!(
                s.provider_event_id, None,
                "a forgery never takes the event id"
            );
            assert_eq!(app.replay_jobs(s.id).await, 0, "no replay job");
        }
        assert!(app.handler.calls().is_empty(), "never handled");

        // The genuine delivery of the same event is not mistaken for a duplicate.
        let genuine = app.signed(body).await;
        assert_eq!(genuine.body["status"], "HANDLED", "{}", genuine.body);
        assert_eq!(app.handler.calls().len(), 1);

        // Even marked failed by hand, an unverified sample is never replayed:
        // replay_failed does not select it, and a replay job submitted by hand ends
        // without handling it.
        let sample = refused[0].summary.id;
        exec(
            app.db(),
            &format!("UPDATE callback_inbox SET handle_status = 2 WHERE id = {sample}"),
        )
        .await;
        let report = replay_failed(&app.state.jobs, ReplayFailedOptions { revive: true, ..Default::default() })
            .await
            .unwrap();
        assert_eq!(report.submitted, 0, "{report:?}");
        assert_eq!(app.replay_jobs(sample).await, 0);
        let summary = app.replay_by_hand(sample).await;
        assert_eq!(summary["handled"], false, "{summary}");
        assert!(summary["reason"].as_str().unwrap().contains("not verified"));
        assert_eq!(
            app.handler.calls().len(),
            1,
            "only the genuine delivery was handled"
        );
        assert_eq!(app.row(sample).await.summary.handle_attempts, 0);
    }
);

both_backends!(
    a_flood_of_wrong_tokens_adds_a_bounded_sample_and_a_counter_never_its_bodies,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        // 300 posts of 62 KiB with a wrong token, from one client.
        let body = format!(
            r#"{{"id":"inv-x","status":"PAID","pad":"{}"}}"#,
            "x".repeat(62 * 1_024)
        );
        // The provider's bucket (burst 200) refuses the rest with 429 before any check.
        let mut unverified = 0;
        for _ in 0..300 {
            let r = app
                .deliver("xendit", &body, &[("x-callback-token", "a guess")])
                .await;
            if r.status == StatusCode::TOO_MANY_REQUESTS {
                r.problem(429, "RATE_LIMITED", "");
            } else {
                r.problem(401, "CALLBACK_UNVERIFIED", "x-callback-token");
                unverified += 1;
            }
        }
        assert!(
            unverified >= factledger::callbacks::guard::BURST_DEFAULT,
            "{unverified}"
        );
        let samples = app.samples("xendit").await;
        assert_eq!(
            samples.len(),
            factledger::callbacks::guard::REJECTED_SAMPLES_PER_MINUTE as usize,
            "a few samples a minute, not 300 rows"
        );
        let bytes: usize = samples.iter().map(|r| r.raw_body.len()).sum();
        assert!(
            bytes <= samples.len() * factledger::callbacks::guard::REJECTED_SAMPLE_BODY_BYTES,
            "each sample's body is cut short: {bytes} bytes"
        );
        for r in &samples {
            assert!(
                !r.headers.contains("a guess"),
                "the token sent is never kept: {}",
                r.headers
            );
            assert!(r
                .summary
                .verify_error
                .as_deref()
                .unwrap()
                .contains("cut to 1024"));
        }
        assert_eq!(
            scalar(app.db(), "SELECT COUNT(*) FROM callback_inbox").await,
            samples.len() as i64
        );
        // The counter has every one of them.
        let metrics = app
            .client
            .get(format!("{}/metrics", app.base))
            .bearer_auth(&app.admin)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let counted: f64 = metrics
            .lines()
            .filter(|l| {
                l.starts_with("factledger_callbacks_rejected_total")
                    && l.contains(r#"provider="xendit""#)
                    && l.contains(r#"reason="bad_token""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(
            counted >= f64::from(unverified),
            "counted {counted}:\n{metrics}"
        );
        assert!(app.handler.calls().is_empty());
    }
);

both_backends!(
    a_provider_over_its_rate_is_429_and_over_its_backlog_503_with_one_alert,
    |db: TestDb| async move {
        let handler = Arc::new(Recorder::default());
        let limits = factledger::callbacks::CallbackLimits {
            rate_per_s: 1,
            burst: 4,
            backlog_max: 2,
        };
        let app = common::spawn_app(&db)
            .configure({
                let handler = handler.clone();
                move |o| {
                    o.callbacks = registry(&handler).with_limits(limits).unwrap();
                    o.job_scan_interval_ms = Some(3_600_000);
                }
            })
            .await;
        let app = App { app, handler };
        // Handling fails: each verified delivery stays unhandled (FAILED).
        app.handler.fail_next.store(100, Ordering::SeqCst);
        for n in 0..2 {
            let r = app
                .signed(&format!(r#"{{"id":"evt-{n}","type":"t","data":{{}}}}"#))
                .await;
            assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
        }
        // The backlog is at its cap: refused before anything is stored, with one alert.
        for n in 2..4 {
            let r = app
                .signed(&format!(r#"{{"id":"evt-{n}","type":"t","data":{{}}}}"#))
                .await;
            r.problem(503, "CALLBACK_BACKLOG_FULL", "");
        }
        assert_eq!(
            scalar(app.db(), "SELECT COUNT(*) FROM callback_inbox").await,
            2
        );
        assert_eq!(
            scalar(
                app.db(),
                "SELECT COUNT(*) FROM outbox WHERE type = 'alert.callback.backlog'"
            )
            .await,
            1,
            "a backlog that keeps refusing raises one alert, not one per delivery"
        );
        // The bucket (burst 4, 1/s) is empty now: the next delivery is 429, with
        // Retry-After, and nothing is checked or stored.
        let r = app
            .client
            .post(format!("{}/v1/callbacks/acme", app.base))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(r.headers().get("retry-after").is_some());
        assert_eq!(
            scalar(app.db(), "SELECT COUNT(*) FROM callback_inbox").await,
            2
        );
    }
);

both_backends!(
    a_redelivery_of_an_event_whose_handling_never_finished_is_handled_not_dropped_as_a_duplicate,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        // Failed at first handling (waiting for its replay): the provider's retry
        // handles it now.
        app.handler.fail_next.store(1, Ordering::SeqCst);
        let body = r#"{"id":"evt-f","type":"t","data":{"n":1}}"#;
        let first = app.signed(body).await;
        assert_eq!(first.body["status"], "FAILED", "{}", first.body);
        let owner = first.id();
        let again = app.signed(body).await;
        assert_eq!(again.status, StatusCode::OK, "{}", again.body);
        assert_eq!(again.body["status"], "HANDLED", "{}", again.body);
        let s = app.row(owner).await.summary;
        assert_eq!(
            (s.handle_status, s.handle_attempts),
            (HandleStatus::Handled, 2)
        );
        assert_eq!(app.handler.calls().len(), 2);

        // Pending (the process died mid-handling, nothing recorded): the retry
        // handles it too.
        let body = r#"{"id":"evt-p","type":"t","data":{"n":2}}"#;
        let first = app.signed(body).await;
        let owner = first.id();
        exec(
            app.db(),
            &format!("UPDATE callback_inbox SET handle_status = 0, handle_attempts = 0 WHERE id = {owner}"),
        )
        .await;
        let again = app.signed(body).await;
        assert_eq!(again.body["status"], "HANDLED", "{}", again.body);
        assert_eq!(
            app.row(owner).await.summary.handle_status,
            HandleStatus::Handled
        );
        assert_eq!(app.handler.calls().len(), 4);

        // Finished: a redelivery is a duplicate and is not handled again.
        let third = app.signed(body).await;
        assert_eq!(third.body["status"], "DUPLICATE", "{}", third.body);
        assert_eq!(third.body["duplicate_of"], owner);
        assert_eq!(app.handler.calls().len(), 4);
    }
);

both_backends!(
    a_verified_body_that_cannot_be_normalised_is_stored_and_never_handled_or_replayed,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let not_json = app.signed("order=o-1&status=paid").await;
        not_json.problem(422, "CALLBACK_NOT_NORMALISABLE", "body");
        let no_id = app.signed(r#"{"type":"payment.paid","data":{}}"#).await;
        no_id.problem(422, "CALLBACK_NOT_NORMALISABLE", "body");
        assert!(no_id.body["detail"].as_str().unwrap().contains("event id"));

        for r in [&not_json, &no_id] {
            let row = app.row(r.id()).await;
            let s = &row.summary;
            assert_eq!(s.verify_status, VerifyStatus::Verified);
            assert_eq!(row.normalized_payload, None);
            assert!(s.normalize_error.is_some());
            assert_eq!(
                (s.handle_status, s.handle_attempts),
                (HandleStatus::Skipped, 0)
            );
            assert_eq!(app.replay_jobs(r.id()).await, 0);
        }
        let raw = app.row(not_json.id()).await.raw_body;
        assert_eq!(raw, b"order=o-1&status=paid");

        // Marked failed by hand, still never replayed: it has no normalised payload.
        exec(app.db(), "UPDATE callback_inbox SET handle_status = 2").await;
        let report = replay_failed(
            &app.state.jobs,
            ReplayFailedOptions {
                revive: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(report.submitted, 0, "{report:?}");
        let summary = app.replay_by_hand(not_json.id()).await;
        assert!(
            summary["reason"]
                .as_str()
                .unwrap()
                .contains("no normalised payload"),
            "{summary}"
        );
        assert!(app.handler.calls().is_empty());
    }
);

both_backends!(
    a_handler_that_fails_twice_is_replayed_from_the_stored_normalised_payload_and_ends_handled_after_three_attempts,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        app.handler.fail_next.store(2, Ordering::SeqCst);
        let body = r#"{"id":"evt-2","type":"payout.paid","data":{"payout":"p-1"}}"#;
        let r = app.signed(body).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
        assert_eq!(r.body["status"], "FAILED");
        let id = r.id();
        let code = App::replay_code(id);
        assert_eq!(r.body["replay_job"], code.as_str());
        let row = app.row(id).await;
        assert_eq!((row.summary.handle_status, row.summary.handle_attempts), (HandleStatus::Failed, 1));
        assert_eq!(row.summary.handle_error.as_deref(), Some("the ledger is unavailable"));
        // The first replay waits one step of the seconds backoff.
        let due = scalar(
            app.db(),
            &format!("SELECT next_execute_at_ms FROM jobs WHERE code = '{code}'"),
        )
        .await
            - now_ms();
        assert!((5_000..=10_000).contains(&due), "due in {due} ms");

        // The raw body is not what a replay reads: garble it.
        exec(
            app.db(),
            &format!("UPDATE callback_inbox SET raw_body = 'garbled, not JSON' WHERE id = {id}"),
        )
        .await;

        // Replay round 1 fails again (attempt 2).
        // A manual retry runs the round now without making the job due: a kick of it
        // still in flight (kicks obey due time) can never claim it first.
        let run = app
            .state
            .jobs
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await
            .unwrap();
        assert_eq!((run.claimed, run.failed), (1, 1), "{run:?}");
        let row = app.row(id).await;
        assert_eq!((row.summary.handle_status, row.summary.handle_attempts), (HandleStatus::Failed, 2));
        let job = ops::show(app.db(), &code).await.unwrap().unwrap();
        assert_eq!((job.job.status, job.job.retry_count), (JobStatus::Failed, 1));
        let due = scalar(
            app.db(),
            &format!("SELECT next_execute_at_ms FROM jobs WHERE code = '{code}'"),
        )
        .await
            - now_ms();
        assert!((25_000..=30_000).contains(&due), "next round due in {due} ms");

        // Replay round 2 succeeds (attempt 3).
        // A manual retry runs the round now without making the job due: a kick of it
        // still in flight (kicks obey due time) can never claim it first.
        let run = app
            .state
            .jobs
            .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
            .await
            .unwrap();
        assert_eq!((run.claimed, run.succeeded), (1, 1), "{run:?}");
        let row = app.row(id).await;
        let s = &row.summary;
        assert_eq!((s.handle_status, s.handle_attempts), (HandleStatus::Handled, 3));
        assert!(s.handle_error.is_none() && s.handled_at_ms.is_some());
        let job = ops::show(app.db(), &code).await.unwrap().unwrap();
        assert_eq!(job.job.status, JobStatus::Success);
        assert!(job.levels.business.done, "{job:?}");

        // Every attempt saw the stored normalised payload, the replays fenced.
        let calls = app.handler.calls();
        assert_eq!(calls.len(), 3);
        for (cb, _) in &calls {
            assert_eq!(cb.callback_id, id);
            assert_eq!(cb.event_id, "evt-2");
            assert_eq!(cb.event_type, "payout.paid");
            assert_eq!(cb.data, json!({"payout": "p-1"}));
        }
        assert_eq!(calls[0].1, None);
        assert!(calls[1].1.is_some() && calls[2].1.is_some());
        assert_ne!(calls[1].1, calls[2].1, "each round has its own claim");

        // Handled now: nothing left to replay.
        let report = replay_failed(&app.state.jobs, ReplayFailedOptions::default())
            .await
            .unwrap();
        assert_eq!(report.submitted, 0);
        assert_eq!(app.handler.calls().len(), 3);
    }
);

both_backends!(
    the_token_verifier_accepts_the_right_token_and_refuses_a_wrong_one,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let body = r#"{"id":"inv-1","status":"PAID","amount":5000}"#;
        let ok = app
            .deliver("xendit", body, &[("x-callback-token", TOKEN)])
            .await;
        assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
        assert_eq!(ok.body["status"], "HANDLED");
        let row = app.row(ok.id()).await;
        assert_eq!(row.summary.event_type.as_deref(), Some("PAID"));
        assert!(
            !row.headers.contains(TOKEN),
            "the token is never stored: {}",
            row.headers
        );

        let other = r#"{"id":"inv-2","status":"PAID","amount":5000}"#;
        let close = format!("{TOKEN}x");
        for token in ["wrong", close.as_str(), &TOKEN[..TOKEN.len() - 1]] {
            let r = app
                .deliver("xendit", other, &[("x-callback-token", token)])
                .await;
            r.problem(401, "CALLBACK_UNVERIFIED", "x-callback-token");
        }
        for sample in app.samples("xendit").await {
            assert_eq!(sample.summary.verify_status, VerifyStatus::Failed);
            assert!(!sample.headers.contains(TOKEN), "{}", sample.headers);
        }
        let missing = app.deliver("xendit", other, &[]).await;
        missing.problem(401, "CALLBACK_UNVERIFIED", "x-callback-token");
        assert_eq!(app.handler.calls().len(), 1);
    }
);

both_backends!(
    a_handling_interrupted_by_a_crash_is_replayed_soon_after_the_restart_not_after_ten_minutes,
    |db: TestDb| async move {
        let first = spawn(&db).await;
        let r = first
            .signed(r#"{"id":"evt-crash","type":"t","data":{}}"#)
            .await;
        let id = r.id();
        // As a process killed mid-handling leaves it: pending, nothing recorded.
        exec(
            first.db(),
            &format!(
                "UPDATE callback_inbox SET handle_status = 0, handle_attempts = 0, \
                 handled_at_ms = NULL, received_at_ms = {} WHERE id = {id}",
                now_ms() - 2_000
            ),
        )
        .await;
        drop(first);
        // The restarted service sweeps once its interrupted threshold has passed.
        let handler = Arc::new(Recorder::default());
        let key_dir = tempfile::tempdir().unwrap();
        let restarted = factledger::server::start_with(
            &db.url,
            "ID",
            key_dir.path(),
            factledger::server::ServeOptions {
                callbacks: registry(&handler),
                job_scan_interval_ms: Some(100),
                callback_interrupted_after_ms: Some(1_000),
                ..Default::default()
            },
        )
        .await
        .expect("the service restarts");
        let db_handle = restarted.state.jobs.db().clone();
        common::eventually(std::time::Duration::from_secs(30), || {
            let db_handle = db_handle.clone();
            async move {
                inbox::load(&db_handle, id)
                    .await
                    .unwrap()
                    .unwrap()
                    .summary
                    .handle_status
                    == HandleStatus::Handled
            }
        })
        .await
        .expect("the interrupted handling is replayed after the restart");
        assert_eq!(handler.calls().len(), 1);
    }
);

both_backends!(
    a_callback_while_the_database_is_unreachable_is_503_database_unavailable_not_500,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        // The connection drops: every statement of this pool now fails to connect.
        match app.db().clone() {
            Db::Mysql(p) => p.close().await,
            Db::Sqlite(p) => p.close().await,
        }
        let r = app
            .deliver(
                "xendit",
                r#"{"id":"inv-9","status":"PAID"}"#,
                &[("x-callback-token", TOKEN)],
            )
            .await;
        r.problem(503, "DATABASE_UNAVAILABLE", "");
    }
);

both_backends!(
    an_unknown_provider_is_404_a_body_over_the_router_s_limit_is_413_and_neither_is_stored,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let r = app.deliver("nobody", r#"{"id":"x"}"#, &[]).await;
        r.problem(404, "UNKNOWN_CALLBACK_PROVIDER", "provider");
        let big = format!(
            r#"{{"id":"big","type":"t","data":"{}"}}"#,
            "x".repeat(factledger::runtime::http::BODY_BYTES_MAX)
        );
        let r = app.signed(&big).await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            scalar(app.db(), "SELECT COUNT(*) FROM callback_inbox").await,
            0
        );
    }
);

both_backends!(
    replay_failed_resubmits_lost_replay_jobs_and_interrupted_handlings_from_the_cli_but_never_unverified_ones,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        // A failed callback whose replay job was lost.
        app.handler.fail_next.store(1, Ordering::SeqCst);
        let failed = app
            .signed(r#"{"id":"evt-a","type":"t","data":{}}"#)
            .await
            .id();
        exec(app.db(), "DELETE FROM jobs").await;
        // A handled one whose handling, as far as the row knows, was interrupted long
        // ago (the process died before recording the outcome).
        let interrupted = app
            .signed(r#"{"id":"evt-b","type":"t","data":{}}"#)
            .await
            .id();
        exec(
            app.db(),
            &format!(
                "UPDATE callback_inbox SET handle_status = 0, received_at_ms = 0 \
                 WHERE id = {interrupted}"
            ),
        )
        .await;
        // An unverified one marked failed by hand.
        app.deliver("acme", r#"{"id":"evt-c"}"#, &[]).await;
        let forged = app.samples("acme").await[0].summary.id;
        exec(
            app.db(),
            &format!("UPDATE callback_inbox SET handle_status = 2 WHERE id = {forged}"),
        )
        .await;

        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
            .current_dir(dir.path())
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .args(["--database-url", &db.url, "callbacks", "replay-failed"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["interrupted"], 1, "{report}");
        assert_eq!(report["submitted"], 2, "{report}");
        assert_eq!(
            report["codes"],
            json!([App::replay_code(failed), App::replay_code(interrupted)])
        );
        assert_eq!(app.replay_jobs(forged).await, 0);

        // The service's engine runs them (due now).
        let run = app.state.jobs.scan(CALLBACK_REPLAY.name, None).await.unwrap();
        assert_eq!(run.succeeded, 2, "{run:?}");
        for id in [failed, interrupted] {
            assert_eq!(app.row(id).await.summary.handle_status, HandleStatus::Handled);
        }
        assert_eq!(app.row(forged).await.summary.handle_attempts, 0);
    }
);

both_backends!(
    every_provider_a_serve_registers_is_replayable_in_that_serve,
    |db: TestDb| async move {
        use factledger::services::gateway_http::{HttpGateway, HttpGatewayConfig};
        // A serve with a payout provider (xendit) and a payment gateway (paysim): every
        // provider it registers, and any added later, must be found by its replays.
        let env = crate::payout_env::PayoutEnv::start_configured(
            &db,
            crate::payout_env::test_limits(),
            |o| {
                let gateway = HttpGateway::new(HttpGatewayConfig::new("http://127.0.0.1:9", "k"))
                    .expect("gateway");
                o.services.gateway = Some(Arc::new(gateway));
                o.services_callbacks = factledger::server::gateways::GatewayCallbacks::Paysim {
                    secret: "gateway-secret".into(),
                };
            },
        )
        .await;
        let state = &env.app.state;
        let registry = state.part::<Registry>().expect("callbacks wired");
        let names: Vec<String> = registry.names().map(str::to_owned).collect();
        assert!(
            names.contains(&"xendit".to_owned()) && names.contains(&"paysim".to_owned()),
            "{names:?}"
        );
        let db_handle = state.jobs.db().clone();
        for (n, provider) in names.iter().enumerate() {
            // A verified, normalised callback whose first handling failed.
            let id = inbox::insert_raw(&db_handle, provider, "{}", b"{}")
                .await
                .unwrap();
            let normalized = factledger::callbacks::Normalized {
                event_id: format!("replayable-{n}"),
                event_type: "t".into(),
                data: json!({}),
            };
            inbox::claim_event(&db_handle, id, provider, &normalized)
                .await
                .unwrap();
            assert!(
                inbox::record_inline_outcome(&db_handle, id, Err("first handling failed"))
                    .await
                    .unwrap()
            );
            let job = JobSubmit::plain(
                &CALLBACK_REPLAY,
                format!("callback:{id}"),
                factledger::callbacks::replay::payload(id, provider),
            );
            let row = job.row(now_ms()).unwrap();
            let code = row.code.clone();
            state
                .jobs
                .store()
                .append(&[UnitOfWork {
                    jobs: vec![row],
                    ..Default::default()
                }])
                .await
                .unwrap();
            state
                .jobs
                .retry(&Selector::parse(vec![code.clone()], vec![]).unwrap())
                .await
                .unwrap();
            // The round reached the provider's own handler (this empty payload may
            // well fail there): it never failed for want of the provider. The round
            // runs on the engine: wait for its handling attempt to be recorded.
            let handled = common::eventually(std::time::Duration::from_secs(30), || async {
                app_row_attempts(&db_handle, id).await == 2
            })
            .await;
            let view = ops::show(&db_handle, &code).await.unwrap().unwrap();
            let error = view.job.last_error.unwrap_or_default();
            assert!(
                !error.contains("is not configured in this process"),
                "{provider}: {error}"
            );
            assert!(
                handled.is_ok(),
                "{provider}: the replay round never handled the callback: {error}"
            );
        }
    }
);

/// The handling attempts of a stored callback.
async fn app_row_attempts(db: &Db, id: i64) -> i32 {
    inbox::load(db, id)
        .await
        .unwrap()
        .unwrap()
        .summary
        .handle_attempts
}
