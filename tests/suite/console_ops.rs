//! The console's operations pages over HTTP (issue 20 items 5, 6, 7, 9): projections
//! with their positions and a rebuild followed to its end, reconciliation started,
//! followed, its findings and its report, jobs listed and a failed one retried, pause
//! and resume, the metrics charts; auditors see no action and their forged POSTs are
//! refused with 403 and change nothing, as is a POST without the token.

use crate::common::app::{spawn_app, App};
use crate::common::console::{ConsoleClient, Page};
use crate::common::TestDb;
use async_trait::async_trait;
use factledger::infra::auth::Role;
use factledger::infra::jobs::{
    ClaimedJob, JobFailure, JobHandler, JobKind, JobSubmit, RoundReport,
};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

static FLAKY: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    ..JobKind::new("test_console_ops", "TCOP")
};

/// Fails while its flag is set (each test app has its own flag).
struct Flaky(Arc<AtomicBool>);

#[async_trait]
impl JobHandler for Flaky {
    async fn run(&self, _job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        if self.0.load(Ordering::SeqCst) {
            return Err(JobFailure::new("the downstream said no"));
        }
        Ok(RoundReport::done(json!({"changed_rows": 1})))
    }
}

/// The value of attribute `name` on the element whose id is `id`.
fn attr(html: &str, id: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let start = html[..at].rfind('<')?;
    let end = at + html[at..].find('>')?;
    let tag = &html[start..end];
    let key = format!(" {name}=\"");
    let v = tag.find(&key)? + key.len();
    Some(tag[v..].split('"').next()?.to_owned())
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

async fn open_wallet(app: &App, wallet: &str) {
    let (s, b) = app
        .post(
            &format!("/v1/wallets/{wallet}/commands"),
            json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = app
        .post(
            &format!("/v1/wallets/{wallet}/commands"),
            json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": 500}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let head = app.store.head_position().await.unwrap();
    app.state.db.wait_for(head).await.unwrap();
}

/// Follow a live fragment until it carries `data-final`; the final fragment.
async fn until_final(c: &ConsoleClient, path: &str) -> Page {
    let end = deadline();
    loop {
        let p = c.get(path).await;
        assert_eq!(p.status, 200, "{}", p.html);
        if p.html.contains("data-final") {
            return p;
        }
        assert!(Instant::now() < end, "{path} never ended: {}", p.html);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_backends!(
    the_projections_page_shows_every_projector_as_the_api_does_and_a_rebuild_is_followed_to_its_end,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor])
            .settlement_off()
            .spawn()
            .await;
        open_wallet(&app, "w-1").await;
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;

        // Every projector, with the API's position and head (read twice around the
        // page so a moving projector cannot make the comparison flaky).
        let end = deadline();
        loop {
            let (_, before) = app.get("/v1/projections").await;
            let page = op.get("/console/projections").await;
            let (_, after) = app.get("/v1/projections").await;
            assert_eq!(page.status, 200, "{}", page.html);
            if before != after {
                assert!(Instant::now() < end, "projections never settled");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let list = after.as_array().unwrap();
            assert!(!list.is_empty());
            assert_eq!(
                attr(&page.html, "projector-count", "data-count"),
                Some(list.len().to_string())
            );
            for p in list {
                let name = p["name"].as_str().unwrap();
                let id = format!("proj-{name}");
                assert_eq!(
                    attr(&page.html, &id, "data-position"),
                    Some(p["position"].to_string()),
                    "{name}"
                );
                assert_eq!(
                    attr(&page.html, &id, "data-head"),
                    Some(p["head"].to_string()),
                    "{name}"
                );
                assert_eq!(
                    attr(&page.html, &id, "data-lag-events"),
                    Some(p["lag_events"].to_string()),
                    "{name}"
                );
                assert!(
                    page.html.contains(&format!("data-title=\"lag of {name}\"")),
                    "{name}"
                );
                // A rebuild button where the API can rebuild, none elsewhere.
                assert_eq!(
                    page.html.contains(&format!("id=\"rebuild-{name}\"")),
                    p["rebuildable"] == true,
                    "{name}"
                );
            }
            break;
        }

        // An auditor sees no rebuild button; a forged rebuild (own token) and a POST
        // without the token are refused.
        let au = ConsoleClient::sign_in(&app.base, &app.auditor).await;
        let page = au.get("/console/projections").await;
        assert_eq!(page.status, 200);
        assert!(
            !page.html.contains("id=\"rebuild-wallet\""),
            "{}",
            page.html
        );
        assert!(page.html.contains("id=\"no-actions\""));
        let p = au.post("/console/projections/wallet/rebuild", &[]).await;
        assert_eq!(p.status, 403, "{}", p.html);
        let p = op
            .post_raw("/console/projections/wallet/rebuild", &[])
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        assert!(p.html.contains("CSRF_TOKEN_INVALID"));

        // A bad scope is the API's refusal, naming the field.
        let p = op
            .post(
                "/console/projections/wallet/rebuild",
                &[("wallet_id", &"x".repeat(200))],
            )
            .await;
        assert_eq!(p.status, 422, "{}", p.html);
        assert!(p.html.contains("scope"), "{}", p.html);

        // The operator starts a full rebuild and follows it to the end.
        let p = op
            .post("/console/projections/wallet/rebuild", &[("wallet_id", "")])
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        let at = p.location.unwrap();
        assert!(at.starts_with("/console/projections/rebuilds/rb_"), "{at}");
        let id = at.rsplit('/').next().unwrap().to_owned();
        let page = op.get(&at).await;
        assert_eq!(page.status, 200, "{}", page.html);
        let refresh = format!("/console/projections/rebuilds/{id}/progress");
        assert_eq!(
            attr(&page.html, "rebuild-live", "data-refresh").as_deref(),
            Some(refresh.as_str())
        );
        assert!(page.html.contains("<progress"), "{}", page.html);
        let fragment = until_final(&op, &refresh).await;
        assert_eq!(
            attr(&fragment.html, "rebuild-status", "data-status").as_deref(),
            Some("succeeded"),
            "{}",
            fragment.html
        );
        let (_, api) = app.get(&format!("/v1/projections/rebuilds/{id}")).await;
        assert_eq!(api["status"], "succeeded");
        assert_eq!(
            attr(&fragment.html, "rebuild-status", "data-events-applied"),
            Some(api["events_applied"].to_string())
        );
        // The page itself, once done, is final too (no refresh left to do).
        assert!(op.get(&at).await.html.contains("data-final"));

        // A scoped rebuild of one wallet.
        let p = op
            .post(
                "/console/projections/wallet/rebuild",
                &[("wallet_id", "w-1")],
            )
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        let at = p.location.unwrap();
        let page = until_final(&op, &format!("{at}/progress")).await;
        assert_eq!(
            attr(&page.html, "rebuild-status", "data-status").as_deref(),
            Some("succeeded"),
            "{}",
            page.html
        );
        assert!(op.get(&at).await.html.contains("wallet:w-1"));
    }
);

both_backends!(
    a_reconciliation_is_started_followed_shows_its_findings_proxies_its_report_and_repairs,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor])
            .settlement_off()
            .spawn()
            .await;
        open_wallet(&app, "w-1").await;
        db.store
            .execute_raw("UPDATE wallet_balances SET pending_minor = 7 WHERE wallet_id = 'w-1'")
            .await
            .unwrap();
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;
        let au = ConsoleClient::sign_in(&app.base, &app.auditor).await;

        // The auditor reads the page but has no start button; a forged start is 403.
        let page = au.get("/console/reconciliations").await;
        assert_eq!(page.status, 200);
        assert!(!page.html.contains("id=\"start-reconciliation\""));
        let p = au.post("/console/reconciliations", &[]).await;
        assert_eq!(p.status, 403, "{}", p.html);
        let p = op.post_raw("/console/reconciliations", &[]).await;
        assert_eq!(p.status, 403, "{}", p.html);
        // A bad id to open names the field.
        let p = op.get("/console/reconciliations?id=a%2Fb").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("field"), "{}", p.html);

        let page = op.get("/console/reconciliations").await;
        assert!(page.html.contains("id=\"start-reconciliation\""));
        let p = op.post("/console/reconciliations", &[]).await;
        assert_eq!(p.status, 303, "{}", p.html);
        let at = p.location.unwrap();
        let id = at.rsplit('/').next().unwrap().to_owned();
        let page = op.get(&at).await;
        assert_eq!(page.status, 200, "{}", page.html);
        assert!(page.html.contains(&format!(
            "data-refresh=\"/console/reconciliations/{id}/progress\""
        )));
        let fragment = until_final(&op, &format!("{at}/progress")).await;
        assert_eq!(
            attr(&fragment.html, "reconciliation-status", "data-status").as_deref(),
            Some("succeeded"),
            "{}",
            fragment.html
        );

        // Counts per class and findings as the API reports them.
        let (_, run) = app.get(&format!("/v1/reconciliations/{id}")).await;
        assert!(
            run["counts"]["projection_drift"].as_i64().unwrap() >= 1,
            "{run}"
        );
        for class in ["projection_drift", "event"] {
            assert_eq!(
                attr(&fragment.html, &format!("count-{class}"), "data-count"),
                Some(run["counts"][class].to_string()),
                "{class}"
            );
        }
        let rows = fragment.html.matches("class=\"finding\"").count();
        assert_eq!(rows, run["findings"].as_array().unwrap().len());
        assert!(
            fragment
                .html
                .contains("data-kind=\"balance_differs\" data-wallet=\"w-1\""),
            "{}",
            fragment.html
        );

        // The report, through the console with the session's key.
        let page = op.get(&at).await;
        assert_eq!(
            attr(&page.html, "report-link", "href"),
            Some(format!("/console/reconciliations/{id}/report"))
        );
        let r = op
            .client
            .get(format!("{}/console/reconciliations/{id}/report", app.base))
            .header("cookie", &op.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        let report = r.text().await.unwrap();
        assert!(
            report.contains(&format!("<h1>Reconciliation {id}</h1>")),
            "{report}"
        );
        assert!(
            report.contains(&format!(
                "<td>projection_drift</td><td>{}</td>",
                run["counts"]["projection_drift"]
            )),
            "{report}"
        );
        assert_eq!(
            au.get(&format!("/console/reconciliations/{id}/report"))
                .await
                .status,
            200
        );
        assert_eq!(
            op.get("/console/reconciliations/nope/report").await.status,
            404
        );

        // The auditor sees the findings but no repair; the operator repairs.
        let page = au.get(&at).await;
        assert!(!page.html.contains("id=\"repair-run\""));
        assert!(fragment.html.contains("id=\"repair-run\""));
        let p = op
            .post("/console/reconciliations", &[("repair", "true")])
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        let at = p.location.unwrap();
        let fragment = until_final(&op, &format!("{at}/progress")).await;
        assert_eq!(
            attr(&fragment.html, "reconciliation-status", "data-status").as_deref(),
            Some("succeeded"),
            "{}",
            fragment.html
        );
        assert_eq!(
            attr(&fragment.html, "count-projection_drift", "data-remaining").as_deref(),
            Some("0"),
            "{}",
            fragment.html
        );
        assert!(fragment.html.contains("id=\"repair-outcome\""));
    }
);

both_backends!(
    jobs_are_listed_by_kind_and_status_a_failed_one_is_retried_and_auditors_change_nothing,
    |db: TestDb| async move {
        let failing = Arc::new(AtomicBool::new(true));
        let handler = Arc::new(Flaky(failing.clone())) as Arc<dyn JobHandler>;
        let app = spawn_app(&db)
            .role_keys(&[Role::Operator, Role::Auditor])
            .settlement_off()
            .configure(|o| {
                o.extra_job_kinds = vec![(&FLAKY, handler)];
                o.job_scan_interval_ms = Some(3_600_000);
            })
            .spawn()
            .await;
        let code = app
            .state
            .jobs
            .submit(&JobSubmit::plain(
                &FLAKY,
                "flaky:1",
                json!({"order": "o-1"}),
            ))
            .await
            .unwrap();
        // The submit kicks it: wait until it failed (run it by hand if the kick has
        // not taken it yet: a loaded machine).
        let end = deadline();
        let view = loop {
            let (_, v) = app.get(&format!("/v1/jobs/{code}")).await;
            if v["status"] == "FAILED" && !v["levels"]["scheduler"]["ok"].is_null() {
                break v;
            }
            if v["status"] == "PENDING" && v["levels"]["scheduler"].is_null() {
                let _ = app.post("/v1/jobs:retry", json!({"codes": [code]})).await;
            }
            assert!(Instant::now() < end, "{v}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let idp: String = code
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();

        // The queue: the job in the list and the counts, filtered by kind and status.
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;
        let page = op
            .get("/console/jobs?kind=test_console_ops&status=FAILED")
            .await;
        assert_eq!(page.status, 200, "{}", page.html);
        let row = format!("job-{idp}");
        assert_eq!(attr(&page.html, &row, "data-code"), Some(code.clone()));
        assert_eq!(
            attr(&page.html, &row, "data-status").as_deref(),
            Some("FAILED")
        );
        assert_eq!(
            attr(&page.html, "count-test_console_ops-FAILED", "data-count").as_deref(),
            Some("1")
        );
        assert_eq!(
            attr(&page.html, &format!("retry-{idp}"), "data-code"),
            Some(code.clone())
        );
        assert!(page.html.contains(&format!("id=\"kick-{idp}\"")));
        assert!(page.html.contains("id=\"pause\"") && page.html.contains("id=\"cron-lease\""));
        let none = op
            .get("/console/jobs?kind=test_console_ops&status=SUCCESS")
            .await;
        assert!(!none.html.contains(&row));
        // Bad filters name their field.
        let p = op.get("/console/jobs?status=LOST").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("status"), "{}", p.html);
        let p = op.get("/console/jobs?after=x").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("after"), "{}", p.html);

        // The job's page: levels, attempts, last error, payload.
        let page = op.get(&format!("/console/jobs/{code}")).await;
        assert_eq!(page.status, 200, "{}", page.html);
        assert_eq!(
            attr(&page.html, "job-status", "data-status").as_deref(),
            Some("FAILED")
        );
        assert_eq!(
            attr(&page.html, "job-retry-count", "data-count"),
            Some(view["retry_count"].to_string())
        );
        assert!(page.html.contains("the downstream said no"));
        assert_eq!(
            attr(&page.html, "level-round", "data-ok").as_deref(),
            Some("false")
        );
        assert_eq!(
            attr(&page.html, "level-business", "data-ok").as_deref(),
            Some("false")
        );
        assert!(page.html.contains("o-1"));

        // An auditor sees the job but no action; forged retry and pause are 403 and
        // change nothing; a POST without the token is 403 too.
        let au = ConsoleClient::sign_in(&app.base, &app.auditor).await;
        let page = au.get("/console/jobs").await;
        assert_eq!(page.status, 200);
        assert!(page.html.contains(&row));
        for id in [
            format!("retry-{idp}"),
            format!("kick-{idp}"),
            "pause".into(),
            "resume".into(),
        ] {
            assert!(!page.html.contains(&format!("id=\"{id}\"")), "{id}");
        }
        failing.store(false, Ordering::SeqCst);
        let p = au.post(&format!("/console/jobs/{code}/retry"), &[]).await;
        assert_eq!(p.status, 403, "{}", p.html);
        let p = au.post("/console/jobs/pause", &[]).await;
        assert_eq!(p.status, 403, "{}", p.html);
        let p = op
            .post_raw(&format!("/console/jobs/{code}/retry"), &[])
            .await;
        assert_eq!(p.status, 403, "{}", p.html);
        let (_, after) = app.get(&format!("/v1/jobs/{code}")).await;
        assert_eq!(
            (after["status"].as_str(), &after["retry_count"]),
            (Some("FAILED"), &view["retry_count"])
        );
        assert_eq!(app.get("/v1/jobs").await.1["paused"], false);

        // The operator retries it: now it succeeds.
        let p = op.post(&format!("/console/jobs/{code}/retry"), &[]).await;
        assert_eq!(p.status, 303, "{}", p.html);
        let to = p.location.unwrap();
        assert!(to.starts_with("/console/jobs/"), "{to}");
        let page = op.get(&to).await;
        assert!(page.html.contains("succeeded 1"), "{}", page.html);
        assert_eq!(
            attr(&page.html, "job-status", "data-status").as_deref(),
            Some("SUCCESS")
        );
        assert_eq!(
            app.get(&format!("/v1/jobs/{code}")).await.1["status"],
            "SUCCESS"
        );

        // A kick goes through the API too (a finished job: nothing to take).
        let p = op.post(&format!("/console/jobs/{code}/kick"), &[]).await;
        assert_eq!(p.status, 303, "{}", p.html);
        let page = op.get(&p.location.unwrap()).await;
        assert!(page.html.contains("claimed 0"), "{}", page.html);

        // Pause and resume, with a reason.
        let p = op
            .post("/console/jobs/pause", &[("reason", "maintenance")])
            .await;
        assert_eq!(p.status, 303, "{}", p.html);
        assert_eq!(app.get("/v1/jobs").await.1["paused"], true);
        let page = op.get("/console/jobs").await;
        assert_eq!(
            attr(&page.html, "jobs-paused", "data-paused").as_deref(),
            Some("true")
        );
        assert!(page.html.contains("id=\"resume\""));
        let p = op.post("/console/jobs/resume", &[]).await;
        assert_eq!(p.status, 303, "{}", p.html);
        assert_eq!(app.get("/v1/jobs").await.1["paused"], false);
    }
);

both_backends!(
    the_metrics_page_draws_the_last_hours_charts_and_the_current_numbers,
    |db: TestDb| async move {
        let app = spawn_app(&db)
            .role_keys(&[Role::Auditor])
            .settlement_off()
            .spawn()
            .await;
        open_wallet(&app, "w-1").await;
        let au = ConsoleClient::sign_in(&app.base, &app.auditor).await;
        let page = au.get("/console/metrics").await;
        assert_eq!(page.status, 200, "{}", page.html);
        for title in [
            "command rate",
            "append latency",
            "HTTP request rate",
            "projection lag (max)",
            "projection lag per projector",
        ] {
            assert!(
                page.html
                    .contains(&format!("<figure class=\"chart\" data-title=\"{title}\"")),
                "{title}"
            );
        }
        for card in [
            "rate-appends",
            "latency-append",
            "rate-http",
            "lag-max",
            "samples",
        ] {
            assert!(attr(&page.html, card, "data-value").is_some(), "{card}");
        }
        // The console sampled at least once (at start): the lag charts have a point.
        assert_ne!(
            attr(&page.html, "samples", "data-value").as_deref(),
            Some("0")
        );
        assert!(page.html.contains("<polyline"), "{}", page.html);
    }
);
