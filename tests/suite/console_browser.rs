//! The console in a real browser (issue 20, "Tests (in a real browser)"): chromium,
//! headless, driven through chromedriver with `fantoccini`, against the in-process
//! service on a real loopback port, on SQLite and on MariaDB.
//!
//! chromedriver is `FACTLEDGER_CHROMEDRIVER` (tools/test.sh installs Debian's
//! `chromium` and `chromium-driver` and exports it) or `chromedriver` on PATH; without
//! one the test FAILS, saying how to get it (never a silent skip). A screenshot of
//! every page visited goes to `$FACTLEDGER_CONSOLE_SHOTS/<backend>/<nn>-<page>.png`
//! (default `target/console-shots`, not committed). Every wait is bounded by
//! [`WAIT`] and fails naming what it waited for.

use crate::common::app::App;
use crate::common::{Backend, TestDb};
use crate::payout_env::{test_limits, PayoutEnv};
use async_trait::async_trait;
use factledger::infra::auth::Role;
use factledger::infra::jobs::{
    ClaimedJob, JobFailure, JobHandler, JobKind, JobSubmit, RoundReport,
};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The bound of every wait: a page, an element, a state reached (generous: the suite
/// shares 2 cores with this browser).
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);

// --- chromedriver and the browser ---------------------------------------------------

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chromedriver_path() -> PathBuf {
    if let Some(p) = std::env::var_os("FACTLEDGER_CHROMEDRIVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("chromedriver"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "the console browser tests need chromedriver: FACTLEDGER_CHROMEDRIVER is unset \
                 and no `chromedriver` is on PATH. Run tools/test.sh (it installs Debian's \
                 chromium and chromium-driver), or `apt-get install chromium chromium-driver`"
            )
        })
}

/// A deadline for one thing awaited; `tick` sleeps a little, or fails the test naming
/// what did not happen and what was last seen.
struct Deadline {
    what: String,
    until: Instant,
}

impl Deadline {
    fn new(what: impl Into<String>) -> Deadline {
        Deadline {
            what: what.into(),
            until: Instant::now() + WAIT,
        }
    }

    async fn tick(&self, last_seen: &str) {
        assert!(
            Instant::now() < self.until,
            "waited {} s for: {}; last seen: {last_seen}",
            WAIT.as_secs(),
            self.what
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn start_driver() -> Driver {
    let bin = chromedriver_path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let child = Command::new(&bin)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {} failed: {e}", bin.display()));
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let ready = Deadline::new(format!("{} to answer /status as ready", bin.display()));
    loop {
        let status = match reqwest::get(format!("{}/status", driver.url)).await {
            Ok(r) => r.json::<Value>().await.unwrap_or(Value::Null),
            Err(e) => Value::String(e.to_string()),
        };
        if status["value"]["ready"] == true {
            return driver;
        }
        ready.tick(&status.to_string()).await;
    }
}

/// `%XX` escapes decoded (paths the console percent-encodes, e.g. a job code's `:`).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One browser session on the console at `base`, writing screenshots under `shots`.
struct Browser {
    c: Client,
    base: String,
    shots: PathBuf,
    taken: u32,
}

fn shots_dir(backend: Backend) -> PathBuf {
    let root = std::env::var_os("FACTLEDGER_CONSOLE_SHOTS")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
                .join("console-shots")
        });
    let dir = root.join(match backend {
        Backend::Sqlite => "sqlite",
        Backend::Mysql => "mysql",
    });
    // Only this run's pictures: an earlier run's extra pages would mislead.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("creating the screenshot directory {}: {e}", dir.display()));
    dir
}

impl Browser {
    async fn open(driver: &Driver, base: &str, shots: PathBuf) -> Browser {
        let mut options = json!({
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1400,1000",
            ],
        });
        if Path::new("/usr/bin/chromium").exists() {
            options["binary"] = json!("/usr/bin/chromium");
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        let connect = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&driver.url)
            .await;
        let c = connect.unwrap_or_else(|e| {
            panic!(
                "no chromium session from chromedriver at {}: {e}",
                driver.url
            )
        });
        Browser {
            c,
            base: base.to_owned(),
            shots,
            taken: 0,
        }
    }

    async fn goto(&self, path: &str) {
        let url = format!("{}{path}", self.base);
        self.c
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// The path and query of the page shown.
    async fn here(&self) -> String {
        let url = self.c.current_url().await.expect("current url");
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    async fn source(&self) -> String {
        self.c.source().await.expect("page source")
    }

    /// Wait until the page shown is at `path` (its path, percent-decoded; query aside).
    async fn wait_path(&self, path: &str) {
        let d = Deadline::new(format!("the browser to be on {path}"));
        loop {
            let here = self.here().await;
            if here.split('?').next().map(percent_decoded).as_deref() == Some(path) {
                return;
            }
            d.tick(&here).await;
        }
    }

    /// Wait until an element matches `css`; its text.
    async fn text(&self, css: &str) -> String {
        let d = Deadline::new(format!("an element `{css}` on the page"));
        loop {
            if let Ok(e) = self.c.find(Locator::Css(css)).await {
                return e.text().await.expect("element text");
            }
            d.tick(&self.here().await).await;
        }
    }

    async fn attr(&self, css: &str, name: &str) -> Option<String> {
        self.text(css).await;
        let e = self.c.find(Locator::Css(css)).await.expect("element");
        e.attr(name).await.expect("attribute")
    }

    async fn click(&self, css: &str) {
        self.text(css).await;
        self.c
            .find(Locator::Css(css))
            .await
            .expect("element")
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking `{css}`: {e}"));
    }

    async fn fill(&self, css: &str, value: &str) {
        self.text(css).await;
        let e = self.c.find(Locator::Css(css)).await.expect("element");
        e.clear()
            .await
            .unwrap_or_else(|err| panic!("clearing `{css}`: {err}"));
        e.send_keys(value)
            .await
            .unwrap_or_else(|err| panic!("typing into `{css}`: {err}"));
    }

    async fn count(&self, css: &str) -> usize {
        self.c
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// A screenshot of the page shown, as `<nn>-<name>.png`.
    async fn shot(&mut self, name: &str) {
        self.taken += 1;
        let png = self.c.screenshot().await.expect("screenshot");
        let file = self.shots.join(format!("{:02}-{name}.png", self.taken));
        std::fs::write(&file, png).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
    }

    /// POST a form from the page's own origin with `fetch` (the session cookie goes
    /// along, as it would with a forged form): the answer's status.
    async fn fetch_post(&self, path: &str, fields: &[(&str, &str)]) -> u16 {
        let fields: serde_json::Map<String, Value> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let status = self
            .c
            .execute(
                "const [path, fields] = arguments;
                 return fetch(path, {method: 'POST', credentials: 'same-origin', redirect: 'manual',
                                     body: new URLSearchParams(fields)}).then(r => r.status);",
                vec![json!(path), Value::Object(fields)],
            )
            .await
            .unwrap_or_else(|e| panic!("fetch POST {path}: {e}"));
        status.as_u64().expect("a status") as u16
    }

    /// The CSRF token in the page shown (every page's sign-out form carries it).
    async fn csrf(&self) -> String {
        self.attr("input[name=csrf]", "value")
            .await
            .expect("a csrf token on the page")
    }

    async fn sign_in(&self, key: &str) {
        self.goto("/console/sign-in").await;
        self.fill("#key", key).await;
        self.click("#sign-in-button").await;
        self.wait_path("/console").await;
        self.text("#who").await;
    }

    async fn sign_out(&self) {
        self.click("#sign-out").await;
        self.wait_path("/console/sign-in").await;
    }
}

// --- what the pages show --------------------------------------------------------------

static FLAKY: JobKind = JobKind {
    cap: None,
    lease_ms: 60_000,
    ..JobKind::new("console_flaky", "TCFL")
};

/// Fails its first round, succeeds on every retry: a failed job the jobs page retries.
struct FailsOnce;

#[async_trait]
impl JobHandler for FailsOnce {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        if job.retry_count == 0 {
            return Err(JobFailure::new("fails its first round"));
        }
        Ok(RoundReport::done(
            json!({"resolved_scopes": 0, "changed_rows": 0}),
        ))
    }
}

async fn api_ok(app: &App, path: &str, body: Value) -> Value {
    let (status, answer) = app.post(path, body.clone()).await;
    assert_eq!(status, 200, "POST {path} {body} -> {answer}");
    answer
}

/// A job code as the jobs page makes it an id (letters, digits, `-`, `_` kept).
fn id_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A job of [`FLAKY`] that failed its first round (the submit kicks it at once).
async fn failed_job(app: &App, business_key: &str) -> String {
    let code = app
        .state
        .jobs
        .submit(&JobSubmit::plain(&FLAKY, business_key, json!({})))
        .await
        .expect("submit a job");
    let d = Deadline::new(format!("job {code} to fail its first round"));
    loop {
        let (_, job) = app.get(&format!("/v1/jobs/{code}")).await;
        if job["status"] == "FAILED" {
            return code;
        }
        d.tick(&job.to_string()).await;
    }
}

/// The wallet's figure in a bucket card, in minor units.
async fn bucket(b: &Browser, name: &str) -> i64 {
    let v = b
        .attr(&format!("#bucket-{name} .value"), "data-minor")
        .await
        .unwrap_or_else(|| panic!("bucket {name} has no data-minor"));
    v.parse().unwrap_or_else(|_| panic!("bucket {name}: {v:?}"))
}

/// No action is drawn: no action form, no button that names an action.
async fn assert_no_actions(b: &Browser, page: &str) {
    let forms = b.count("form.action").await;
    let buttons = b.count("button[data-action]").await;
    assert_eq!(
        (forms, buttons),
        (0, 0),
        "an auditor sees action forms/buttons on {page}: {}",
        b.source().await
    );
}

/// A list page as the operator: chrome, a title, no refusal.
async fn visit(b: &mut Browser, path: &str, name: &str) {
    b.goto(path).await;
    b.wait_path(path).await;
    b.text("main h1").await;
    assert_eq!(
        b.count(".problem").await,
        0,
        "{path} shows a problem: {}",
        b.source().await
    );
    b.shot(name).await;
}

both_backends!(
    the_console_in_chromium_signs_in_searches_explains_acts_and_refuses_an_auditor,
    |db: TestDb| async move {
        let started = Instant::now();
        let backend = db.backend;
        // The service with the payout simulator (a withdrawal awaiting approval).
        let env = PayoutEnv::start_configured(&db, test_limits(), |o| {
            o.extra_job_kinds = vec![(&FLAKY, Arc::new(FailsOnce) as Arc<dyn JobHandler>)];
            // The engine's own loop stays out of the way: only the page retries.
            o.job_scan_interval_ms = Some(3_600_000);
        })
        .await;
        let app = &env.app;
        let operator = app
            .keys
            .create(Role::Operator)
            .await
            .expect("operator key")
            .secret;
        let auditor = app
            .keys
            .create(Role::Auditor)
            .await
            .expect("auditor key")
            .secret;
        // A wallet credited twice (as-of shows the first credit alone), a failed job.
        let wallet = "w-browser";
        let commands = format!("/v1/wallets/{wallet}/commands");
        api_ok(
            app,
            &commands,
            json!({"type": "Open", "user_id": "u-browser", "currency": "IDR"}),
        )
        .await;
        for (ref_id, amount) in [("c-1", 10_000), ("c-2", 2_500)] {
            api_ok(
                app,
                &commands,
                json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": ref_id, "amount_minor": amount}),
            )
            .await;
        }
        // One station-month's bill facts (the bill page shows its decided rows).
        for (path, body) in [
            (
                "/v1/bills/reference/customer-accounts",
                json!({"account_id": 101, "income_start_month": "202601", "current_payable_cutoff_month": "202612"}),
            ),
            (
                "/v1/bills/small-bills",
                json!({"station_id": 100, "month": "202609", "bill_id": 7, "account_id": 101, "rent_minor": 123_456}),
            ),
            (
                "/v1/bills/partner-bills",
                json!({"partner_bill_id": 9, "partner_account_id": 3, "month": "202609", "pre_rent_minor": 500, "deduction_minor": 0}),
            ),
            (
                "/v1/bills/diffs",
                json!({"station_id": 100, "month": "202609", "diff_id": 5, "partner_bill_id": 9}),
            ),
        ] {
            let (status, answer) = app.post(path, body.clone()).await;
            assert!(
                (200..300).contains(&status),
                "POST {path} {body} -> {status} {answer}"
            );
        }
        // Two failed jobs: the operator retries one; the other stays for the auditor.
        let job = failed_job(app, "browser:1").await;
        let job_id = id_part(&job);
        let left = failed_job(app, "browser:2").await;
        let left_id = id_part(&left);
        // At or above 500,000 the risk rule holds a withdrawal for an operator's review.
        env.user("77", 2_000_000).await;
        let withdrawal = env.request("77", 600_000, "browser-big").await;
        assert_eq!(env.withdrawal(&withdrawal).await["status"], "REQUESTED");

        let driver = start_driver().await;
        let mut b = Browser::open(&driver, &app.base, shots_dir(backend)).await;

        // A signed-out browser asking for a page lands on sign-in, the page kept.
        b.goto("/console/jobs").await;
        b.wait_path("/console/sign-in").await;
        assert!(
            b.here().await.contains("next=%2Fconsole%2Fjobs"),
            "{}",
            b.here().await
        );
        b.shot("sign-in").await;

        // The operator signs in (and is sent on to the page asked for).
        b.fill("#key", &operator).await;
        b.click("#sign-in-button").await;
        b.wait_path("/console/jobs").await;
        assert_eq!(
            b.attr("#who", "data-role").await.as_deref(),
            Some("operator")
        );

        // Search a wallet from the home page and land on its page.
        b.goto("/console").await;
        b.wait_path("/console").await;
        b.shot("home").await;
        b.c.execute(
            "document.getElementById('search-kind').value = 'wallet';",
            vec![],
        )
        .await
        .expect("choosing the search kind");
        b.fill("#search-q", wallet).await;
        b.click("#search-button").await;
        b.wait_path(&format!("/console/wallets/{wallet}")).await;
        assert_eq!(bucket(&b, "pending").await, 12_500);
        assert_eq!(bucket(&b, "available").await, 0);
        b.shot("wallet").await;

        // "why" from the pending balance: the event that last moved it.
        let why_position = b
            .attr("#why-pending", "data-position")
            .await
            .expect("why position");
        b.click("#why-pending").await;
        b.wait_path(&format!("/console/streams/wallet/{wallet}/events/3"))
            .await;
        assert_eq!(
            b.attr("#event", "data-position").await,
            Some(why_position.clone())
        );
        let event_type = b.attr("#event", "data-type").await.unwrap_or_default();
        assert!(b.text("#event-type").await.contains(&event_type) && !event_type.is_empty());
        assert_eq!(
            b.attr("#diff-pending", "data-minor").await.as_deref(),
            Some("2500")
        );
        assert!(b.text("#recorded-at").await.len() > 4);
        b.shot("event").await;

        // The event's stream: its timeline, and the hash chain verified.
        b.click("#stream-link").await;
        b.wait_path(&format!("/console/streams/wallet/{wallet}"))
            .await;
        assert_eq!(
            b.attr("#chain-status", "data-ok").await.as_deref(),
            Some("true"),
            "{}",
            b.text("#chain-status").await
        );
        b.shot("stream").await;

        // As of the first credit: the older balance.
        b.goto(&format!("/console/wallets/{wallet}")).await;
        let first_credit = b
            .attr("#ledger tr[data-sequence=\"2\"]", "data-position")
            .await
            .expect("the first credit's position");
        b.c.execute(
            "const [p] = arguments; const r = document.getElementById('as-of-position');
             r.value = p; r.dispatchEvent(new Event('input'));",
            vec![json!(first_credit)],
        )
        .await
        .expect("moving the as-of slider");
        assert_eq!(b.text("#as-of-position-value").await, first_credit);
        b.click("#as-of-position-form button[type=submit]").await;
        let d = Deadline::new("the wallet page as of the first credit");
        loop {
            let here = b.here().await;
            if here.contains(&format!("as_of_position={first_credit}")) {
                break;
            }
            d.tick(&here).await;
        }
        assert_eq!(
            b.attr("#as-of", "data-position").await,
            Some(first_credit.clone())
        );
        assert_eq!(bucket(&b, "pending").await, 10_000);
        b.shot("wallet-as-of").await;

        // A full rebuild of the wallet projection, followed live to its end.
        b.goto("/console/projections").await;
        b.text("#proj-wallet").await;
        b.shot("projections").await;
        b.click("#rebuild-wallet").await;
        b.text("#rebuild-live").await;
        let d = Deadline::new("the rebuild to reach a final state (data-final)");
        let status = loop {
            if b.count("#rebuild-status[data-final]").await > 0 {
                break b
                    .attr("#rebuild-status", "data-status")
                    .await
                    .unwrap_or_default();
            }
            d.tick(&b.text("#rebuild-live").await).await;
        };
        assert_eq!(status, "succeeded", "{}", b.text("#rebuild-live").await);
        b.shot("rebuild").await;

        // Retry the failed job from the jobs page; it succeeds this time.
        b.goto("/console/jobs").await;
        let row = format!("#job-{job_id}");
        assert_eq!(b.attr(&row, "data-status").await.as_deref(), Some("FAILED"));
        assert_eq!(b.count(&format!("#retry-{left_id}")).await, 1);
        b.shot("jobs").await;
        b.click(&format!("#retry-{job_id}")).await;
        b.wait_path(&format!("/console/jobs/{job}")).await;
        assert_eq!(
            b.attr("#job-status", "data-status").await.as_deref(),
            Some("SUCCESS")
        );
        assert!(b.text(".notice").await.contains("retried"));
        b.shot("job").await;

        // A reconciliation, started and followed live to its end: nothing to find.
        visit(&mut b, "/console/reconciliations", "reconciliations").await;
        b.click("#start-reconciliation").await;
        b.text("#reconciliation-live").await;
        let d = Deadline::new("the reconciliation to reach a final state (data-final)");
        let status = loop {
            if b.count("#reconciliation-status[data-final]").await > 0 {
                break b
                    .attr("#reconciliation-status", "data-status")
                    .await
                    .unwrap_or_default();
            }
            d.tick(&b.text("#reconciliation-live").await).await;
        };
        assert_eq!(
            status,
            "succeeded",
            "{}",
            b.text("#reconciliation-live").await
        );
        b.shot("reconciliation").await;

        // A station-month's bill, once the bill projector has decided it.
        let d = Deadline::new("the bill of station 100, month 202609, on its page");
        loop {
            b.goto("/console/bills/100/202609").await;
            if b.count("#bill-summary").await == 1 {
                break;
            }
            d.tick(&b.here().await).await;
        }
        b.shot("bill").await;
        // The withdrawal's own page: its amount, attempts and events.
        visit(
            &mut b,
            &format!("/console/withdrawals/{withdrawal}"),
            "withdrawal",
        )
        .await;
        assert_eq!(b.count("#withdrawal-amount").await, 1);

        // The other pages render for the operator.
        for (path, name) in [
            ("/console/bills", "bills"),
            ("/console/bookings", "bookings"),
            ("/console/metrics", "metrics"),
        ] {
            visit(&mut b, path, name).await;
        }

        // The withdrawal waits in the approval queue, with its approve button.
        let approve = format!("#approve-{withdrawal}");
        let d = Deadline::new(format!("withdrawal {withdrawal} in the approval queue"));
        loop {
            b.goto("/console/withdrawals").await;
            if b.count(&approve).await == 1 {
                break;
            }
            d.tick(&b.here().await).await;
        }
        b.shot("withdrawals").await;

        // A POST without the CSRF token is refused (403): jobs stay running.
        b.goto("/console/jobs").await;
        assert_eq!(
            b.fetch_post("/console/jobs/pause", &[("reason", "no token")])
                .await,
            403
        );
        assert_eq!(
            b.fetch_post("/console/jobs/pause", &[("csrf", "00")]).await,
            403
        );
        assert_eq!(app.get("/v1/jobs").await.1["paused"], false);

        // Sign out: a page asked for afterwards redirects to sign-in.
        b.sign_out().await;
        b.goto(&format!("/console/wallets/{wallet}")).await;
        b.wait_path("/console/sign-in").await;
        b.shot("signed-out").await;

        // The auditor sees, never acts: no action on jobs, projections, withdrawals.
        b.sign_in(&auditor).await;
        assert_eq!(
            b.attr("#who", "data-role").await.as_deref(),
            Some("auditor")
        );
        for (path, name) in [
            ("/console/jobs", "auditor-jobs"),
            ("/console/projections", "auditor-projections"),
            ("/console/withdrawals", "auditor-withdrawals"),
        ] {
            b.goto(path).await;
            b.wait_path(path).await;
            b.text("main h1").await;
            assert_no_actions(&b, path).await;
            b.shot(name).await;
        }
        // What the operator acted on is there for the auditor to see, without actions.
        b.goto("/console/jobs").await;
        assert_eq!(
            b.attr(&format!("#job-{left_id}"), "data-status")
                .await
                .as_deref(),
            Some("FAILED")
        );
        b.goto("/console/withdrawals").await;
        assert!(
            b.source().await.contains(&withdrawal),
            "the auditor sees the queue"
        );
        // A forged action from the auditor's session, its own CSRF token included: 403,
        // and nothing happened.
        let token = b.csrf().await;
        assert_eq!(
            b.fetch_post("/console/jobs/pause", &[("csrf", &token)])
                .await,
            403
        );
        assert_eq!(
            b.fetch_post(&format!("/console/jobs/{job}/retry"), &[("csrf", &token)])
                .await,
            403
        );
        assert_eq!(
            b.fetch_post("/console/projections/wallet/rebuild", &[("csrf", &token)])
                .await,
            403
        );
        let forged = [
            ("csrf", token.as_str()),
            ("reason", "forged"),
            ("form_key", "forged-1"),
        ];
        let approve_path = format!("/console/withdrawals/{withdrawal}/approve");
        assert_eq!(b.fetch_post(&approve_path, &forged).await, 403);
        assert_eq!(b.fetch_post("/console/jobs/pause", &[]).await, 403);
        assert_eq!(app.get("/v1/jobs").await.1["paused"], false);
        assert_eq!(env.withdrawal(&withdrawal).await["status"], "REQUESTED");

        b.c.clone().close().await.expect("closing the browser");
        drop(driver);
        eprintln!(
            "console_browser {backend:?}: {:.1} s, {} screenshots in {}",
            started.elapsed().as_secs_f64(),
            b.taken,
            b.shots.display()
        );
    }
);
