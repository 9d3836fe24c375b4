//! Job operations over HTTP and from the CLI (issue 4 item 9): list, show with the
//! levels of success (R-JOB-10), retry, kick, pause and resume. Both backends.

use crate::common;

use async_trait::async_trait;
use common::{exec, TestDb};
use factledger::infra::auth::Role;
use factledger::infra::jobs::{
    ClaimedJob, JobFailure, JobHandler, JobKind, JobSubmit, RoundReport,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

static OPS: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    ..JobKind::new("test_ops", "TOPS")
};

/// Succeeds unless the payload says `"fail": true`; reports what it did.
struct Echo;

#[async_trait]
impl JobHandler for Echo {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let p = job.payload_json()?;
        if p["fail"] == true {
            return Err(JobFailure::new("told to fail"));
        }
        Ok(RoundReport::done(
            json!({"resolved_scopes": 0, "changed_rows": 0}),
        ))
    }
}

/// The running service (`common::app`), with this file's request helpers.
struct App(common::app::App);

impl std::ops::Deref for App {
    type Target = common::app::App;

    fn deref(&self) -> &common::app::App {
        &self.0
    }
}

async fn spawn(db: &TestDb) -> App {
    App(common::spawn_app(db)
        .configure(|o| {
            o.extra_job_kinds = vec![(&OPS, Arc::new(Echo) as Arc<dyn JobHandler>)];
            // The background loop stays out of the way: the tests drive the engine.
            o.job_scan_interval_ms = Some(3_600_000);
        })
        .await)
}

impl App {
    /// A job once the scheduler run that took it is recorded as finished (right
    /// after its rounds complete).
    async fn settled(&self, code: &str) -> Value {
        let mut view = Value::Null;
        for _ in 0..500 {
            let (s, v) = self.get(&format!("/v1/jobs/{code}"), &self.admin).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            view = v;
            if !view["levels"]["scheduler"]["ok"].is_null() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        view
    }

    async fn get(&self, path: &str, key: &str) -> (StatusCode, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap())
    }

    async fn post(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap())
    }
}

both_backends!(
    jobs_are_listed_shown_with_their_levels_retried_kicked_paused_and_resumed_over_http,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let jobs = &app.state.jobs;
        let ok = jobs
            .submit(&JobSubmit::plain(&OPS, "ok:1", json!({"fail": false})))
            .await
            .unwrap();
        let bad = jobs
            .submit(&JobSubmit::plain(&OPS, "bad:1", json!({"fail": true})))
            .await
            .unwrap();
        let a = &app.admin;
        // Submitting kicks the jobs after commit: they run at once. Wait (bounded:
        // 30 s on a loaded machine) until neither is pending or running any more.
        for _ in 0..3_000 {
            let mut busy = false;
            for status in ["PENDING", "RUNNING"] {
                let path = format!("/v1/jobs?kind=test_ops&status={status}");
                let (_, page) = app.get(&path, a).await;
                busy |= !page["jobs"].as_array().unwrap().is_empty();
            }
            if !busy {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }

        // List, filtered by kind and status, paged by id.
        let (s, page) = app.get("/v1/jobs?kind=test_ops&status=SUCCESS", a).await;
        assert_eq!(s, StatusCode::OK, "{page}");
        assert_eq!(page["paused"], false);
        assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
        assert_eq!(page["jobs"][0]["code"], ok.as_str());
        let (_, page) = app.get("/v1/jobs?kind=test_ops&limit=1", a).await;
        assert_eq!(page["jobs"][0]["code"], ok.as_str());
        let after = page["next_after"].as_i64().unwrap();
        let (_, page) = app
            .get(&format!("/v1/jobs?kind=test_ops&after={after}"), a)
            .await;
        assert_eq!(page["jobs"][0]["code"], bad.as_str());
        assert!(page["next_after"].is_null());
        let (s, p) = app.get("/v1/jobs?status=LOST", a).await;
        assert_eq!(
            (s, p["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("status"))
        );
        let (s, p) = app.get("/v1/jobs?kind=nope", a).await;
        assert_eq!(
            (s, p["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("kind"))
        );

        // Show reports the three levels; kicking a finished job takes nothing.
        let view = app.settled(&ok).await;
        assert_eq!(view["status"], "SUCCESS");
        // Taken by the kick after the submit, or by the loop's first scan.
        let entry = view["levels"]["scheduler"]["entry"].as_str().unwrap();
        assert!(["kick", "scan"].contains(&entry), "{view}");
        assert_eq!(view["levels"]["scheduler"]["ok"], true);
        assert_eq!(view["levels"]["round"]["ok"], true);
        assert_eq!(view["levels"]["round"]["summary"]["changed_rows"], 0);
        assert_eq!(view["levels"]["business"]["done"], true);
        let (s, run) = app.post(&format!("/v1/jobs/{ok}:kick"), a, json!({})).await;
        assert_eq!(s, StatusCode::OK, "{run}");
        assert_eq!(
            (run["entry"].as_str(), run["claimed"].as_i64()),
            (Some("kick"), Some(0))
        );

        // A failed round: level 1 ok, level 2 not, retry counted.
        let view = app.settled(&bad).await;
        assert_eq!(view["status"], "FAILED");
        assert_eq!(view["retry_count"], 1);
        assert_eq!(view["last_error"], "told to fail");
        assert_eq!(view["levels"]["scheduler"]["ok"], true);
        assert_eq!(view["levels"]["round"]["ok"], false);
        assert_eq!(view["levels"]["business"]["done"], false);

        // Manual retry by business key ignores the backoff; the selector is checked.
        let (s, run) = app
            .post("/v1/jobs:retry", a, json!({"business_keys": ["bad:1"]}))
            .await;
        assert_eq!(s, StatusCode::OK, "{run}");
        assert_eq!(
            (run["claimed"].as_i64(), run["failed"].as_i64()),
            (Some(1), Some(1))
        );
        let (s, p) = app.post("/v1/jobs:retry", a, json!({})).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
        assert_eq!(p["field"], "codes");
        let (s, p) = app
            .post("/v1/jobs:retry", a, json!({"codes": ["not-a-code"]}))
            .await;
        assert_eq!(
            (s, p["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("codes"))
        );

        // Pause: submissions accepted, retry refused with 409, kick claims nothing.
        let (s, p) = app
            .post("/v1/jobs:pause", a, json!({"reason": "upgrade"}))
            .await;
        assert_eq!((s, p["paused"].as_bool()), (StatusCode::OK, Some(true)));
        let later = jobs
            .submit(&JobSubmit::plain(&OPS, "during-pause", json!({})))
            .await
            .unwrap();
        let (s, p) = app
            .post("/v1/jobs:retry", a, json!({"codes": [later]}))
            .await;
        assert_eq!(
            (s, p["code"].as_str()),
            (StatusCode::CONFLICT, Some("JOBS_PAUSED"))
        );
        let (_, run) = app
            .post(&format!("/v1/jobs/{later}:kick"), a, json!({}))
            .await;
        assert_eq!(
            (run["paused"].as_bool(), run["claimed"].as_i64()),
            (Some(true), Some(0))
        );
        let (_, page) = app.get("/v1/jobs", a).await;
        assert_eq!(page["paused"], true);
        let (s, _) = app.post("/v1/jobs:resume", a, json!({})).await;
        assert_eq!(s, StatusCode::OK);
        let (_, run) = app
            .post(&format!("/v1/jobs/{later}:kick"), a, json!({}))
            .await;
        assert_eq!(run["succeeded"], 1);

        // Unknown codes and actions.
        let missing = OPS.code("missing");
        let (s, p) = app.get(&format!("/v1/jobs/{missing}"), a).await;
        assert_eq!(
            (s, p["field"].as_str()),
            (StatusCode::NOT_FOUND, Some("code"))
        );
        let (s, _) = app
            .post(&format!("/v1/jobs/{missing}:kick"), a, json!({}))
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
);

both_backends!(
    only_operators_and_admins_operate_jobs_while_every_role_reads_them,
    |db: TestDb| async move {
        let app = spawn(&db).await;
        let code = app
            .state
            .jobs
            .submit(&JobSubmit::plain(&OPS, "k", json!({})))
            .await
            .unwrap();
        for role in [Role::Auditor, Role::Service] {
            let key = app.state.keys.create(role).await.unwrap().secret;
            let (s, _) = app.get(&format!("/v1/jobs/{code}"), &key).await;
            assert_eq!(s, StatusCode::OK, "{role} reads");
            for path in ["/v1/jobs:pause", "/v1/jobs:resume"] {
                let (s, p) = app.post(path, &key, json!({})).await;
                assert_eq!(s, StatusCode::FORBIDDEN, "{role} {path}: {p}");
            }
            let (s, _) = app
                .post("/v1/jobs:retry", &key, json!({"codes": [code]}))
                .await;
            assert_eq!(s, StatusCode::FORBIDDEN);
            let (s, _) = app
                .post(&format!("/v1/jobs/{code}:kick"), &key, json!({}))
                .await;
            assert_eq!(s, StatusCode::FORBIDDEN);
        }
        let operator = app.state.keys.create(Role::Operator).await.unwrap().secret;
        let (s, _) = app.post("/v1/jobs:pause", &operator, json!({})).await;
        assert_eq!(s, StatusCode::OK);
        assert!(app.state.jobs.paused().await.unwrap());
    }
);

both_backends!(
    the_jobs_cli_lists_shows_pauses_resumes_and_refuses_a_malformed_selector,
    |db: TestDb| async move {
        let d = db.database().await;
        // A job of a kind this binary does not run still shows and lists.
        exec(
            &d.db,
            &format!(
                "INSERT INTO jobs (kind, code, business_key, payload, status, retry_count, \
                 max_retry_count, next_execute_at_ms, request_generation, running_generation, \
                 running_attempt, created_at_ms, updated_at_ms) VALUES ('elsewhere', '{}', \
                 'k', '{{}}', 3, 1, 3, 0, 0, 0, 1, 0, 0)",
                OPS.code("k")
            ),
        )
        .await;
        let cli = |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_factledger"))
                .args(["--database-url", &db.url])
                .args(args)
                .output()
                .unwrap()
        };
        let out = cli(&["jobs", "list", "--status", "FAILED"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed[0]["code"], OPS.code("k").as_str());
        let out = cli(&["jobs", "show", &OPS.code("k")]);
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (shown["kind"].as_str(), shown["retry_count"].as_i64()),
            (Some("elsewhere"), Some(1))
        );
        assert!(cli(&["jobs", "pause", "--reason", "db upgrade"])
            .status
            .success());
        let out = cli(&["jobs", "retry", "--code", &OPS.code("k")]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("paused"));
        assert!(cli(&["jobs", "resume"]).status.success());
        let out = cli(&["jobs", "retry"]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("codes"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = cli(&["jobs", "show", &OPS.code("nope")]);
        assert!(!out.status.success());
    }
);
