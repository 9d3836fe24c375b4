//! The one in-process service the tests start. [`spawn_app`] is a builder, awaited
//! directly or after its options: it opens the database, bootstraps the first admin
//! key into a fresh key directory, makes the role keys asked for, and serves HTTP on
//! an ephemeral loopback port until the returned [`App`] is dropped.
//!
//! What differs between tests is an option of the builder: the `ServeOptions`
//! (settlement cron, HTTP limits, extra job kinds, callbacks, stall alerts, ...), the
//! role keys, the database URL and the HTTP client. [`RoleApp`] is a view of an
//! [`App`] with one key per role, for tests that drive the HTTP API as different
//! callers (parsing, scope, role matrix).

use super::TestDb;
use factledger::infra::auth::{KeyStore, Role};
use factledger::server::{ServeOptions, SettlementCron};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;

/// A running service on an ephemeral loopback port; the server stops when it is
/// dropped (and with it the service's background: jobs, cron, projectors, relays).
pub struct App {
    pub base: String,
    pub addr: SocketAddr,
    /// The first admin key: its secret and id.
    pub admin: String,
    pub admin_key_id: String,
    /// Secrets of the keys asked for with [`AppBuilder::role_keys`]; empty otherwise.
    pub service: String,
    pub operator: String,
    pub auditor: String,
    pub keys: KeyStore,
    pub store: factledger::infra::store::DynStore,
    /// A clone of the state being served (jobs engine, projections, buses, ...).
    pub state: factledger::runtime::http::AppState,
    pub client: reqwest::Client,
    pub key_dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for App {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How to start an [`App`]: see [`spawn_app`].
#[must_use = "await the builder to start the service"]
pub struct AppBuilder {
    url: String,
    options: ServeOptions,
    roles: Vec<Role>,
    client: Option<reqwest::Client>,
}

/// Start the service on `db` with `ServeOptions::default()` (what
/// `factledger::server::start` uses); `.await` it directly or after its options.
pub fn spawn_app(db: &TestDb) -> AppBuilder {
    spawn_app_at(&db.url)
}

/// [`spawn_app`] on a database given by URL (a database server the test runs itself,
/// e.g. [`super::mariadb::PrivateMariadb`], or a user with fewer rights).
pub fn spawn_app_at(url: &str) -> AppBuilder {
    AppBuilder {
        url: url.to_owned(),
        options: ServeOptions::default(),
        roles: Vec::new(),
        client: None,
    }
}

impl AppBuilder {
    /// Serve with these options instead of the default ones.
    pub fn options(mut self, options: ServeOptions) -> Self {
        self.options = options;
        self
    }

    /// Change the options in place.
    pub fn configure(mut self, change: impl FnOnce(&mut ServeOptions)) -> Self {
        change(&mut self.options);
        self
    }

    /// No settlement cron: a firing on a 5-minute boundary would release commissions
    /// a test expects to release itself.
    pub fn settlement_off(self) -> Self {
        self.configure(|o| o.settlement_cron = SettlementCron::Off)
    }

    /// The HTTP listener's timeouts, connection cap and rate limit.
    pub fn http_limits(self, limits: factledger::runtime::http::limits::HttpLimits) -> Self {
        self.configure(|o| o.http_limits = limits)
    }

    /// Make one key per role, in this order, before serving (their secrets are
    /// [`App::service`], [`App::operator`] and [`App::auditor`]; the admin's is the
    /// first key's). Every key made is an event in the log.
    pub fn role_keys(mut self, roles: &[Role]) -> Self {
        self.roles.extend_from_slice(roles);
        self
    }

    /// The client the tests send with (default: `reqwest::Client::new()`).
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Start the service and serve it.
    pub async fn spawn(self) -> App {
        let key_dir = tempfile::tempdir().expect("key dir");
        let started = factledger::server::start_with(&self.url, "ID", key_dir.path(), self.options)
            .await
            .expect("server starts");
        let state = started.state;
        // A test that wrote events before the first start has a database with history:
        // `serve` mints no admin key there (issue 32 item 5), so the test makes it the
        // way an operator would, with `keys bootstrap`.
        let admin = match started.admin_key {
            Some(key) => key,
            None => state
                .keys
                .bootstrap()
                .await
                .expect("keys bootstrap")
                .expect("first start: no admin key exists yet"),
        };
        let mut secrets = [String::new(), String::new(), String::new()];
        for role in self.roles {
            let slot = match role {
                Role::Service => 0,
                Role::Operator => 1,
                Role::Auditor => 2,
                Role::Admin => panic!("the start makes the first admin key"),
            };
            secrets[slot] = state.keys.create(role).await.expect("create key").secret;
        }
        let [service, operator, auditor] = secrets;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let served = state.clone();
        let task = tokio::spawn(async move {
            factledger::server::serve(served, listener, std::future::pending())
                .await
                .expect("serve");
        });
        App {
            base: format!("http://{addr}"),
            addr,
            admin: admin.secret,
            admin_key_id: admin.key_id,
            service,
            operator,
            auditor,
            keys: state.keys.clone(),
            store: state.store.clone(),
            state,
            client: self.client.unwrap_or_default(),
            key_dir,
            task,
        }
    }
}

impl IntoFuture for AppBuilder {
    type Output = App;
    type IntoFuture = Pin<Box<dyn Future<Output = App> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.spawn())
    }
}

impl App {
    /// The service as most tests want it: default options, no settlement cron.
    pub async fn start(db: &TestDb) -> App {
        spawn_app(db).settlement_off().await
    }

    /// [`spawn_app`] with these options.
    pub async fn start_with(db: &TestDb, options: ServeOptions) -> App {
        spawn_app(db).options(options).await
    }

    /// [`App::start_with`] on a database given by URL.
    pub async fn start_at(url: &str, options: ServeOptions) -> App {
        spawn_app_at(url).options(options).await
    }

    /// POST a JSON body as the admin: status and JSON body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.admin)
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// GET as the admin: status and JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.admin)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Start a reconciliation as the admin (`POST /v1/reconciliations` with `body`) and
    /// wait up to 60 s for its run to end; the finished run, which must have succeeded.
    #[allow(dead_code)]
    pub async fn reconciled(&self, body: Value) -> Value {
        let (status, started) = self.post("/v1/reconciliations", body).await;
        assert_eq!(status, 202, "{started}");
        let path = format!("/v1/reconciliations/{}", started["id"].as_str().unwrap());
        let run = std::sync::Mutex::new(Value::Null);
        super::eventually(std::time::Duration::from_secs(60), || async {
            let (_, r) = self.get(&path).await;
            let done = r["status"] != "running";
            *run.lock().unwrap() = r;
            done
        })
        .await
        .expect("the reconciliation finishes within 60 s");
        let run = run.into_inner().unwrap();
        assert_eq!(run["status"], "succeeded", "{run}");
        run
    }
}

/// An [`App`] with one key per role (service, operator, auditor besides the admin),
/// driven as different callers.
pub struct RoleApp(App);

impl std::ops::Deref for RoleApp {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

pub async fn spawn_roles(db: &TestDb) -> RoleApp {
    RoleApp(
        spawn_app(db)
            .role_keys(&[Role::Service, Role::Operator, Role::Auditor])
            .await,
    )
}

/// A response read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub content_type: Option<String>,
    pub body: Value,
}

impl Reply {
    /// Assert a problem+json answer with this status, code and field.
    #[track_caller]
    pub fn problem(&self, status: u16, code: &str, field: Option<&str>) {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        assert_eq!(
            self.content_type.as_deref(),
            Some("application/problem+json"),
            "{}",
            self.body
        );
        assert_eq!(self.body["code"], code, "{}", self.body);
        assert_eq!(self.body["field"].as_str(), field, "{}", self.body);
    }
}

impl RoleApp {
    /// The secret of a role's key (`None`: no key).
    pub fn key(&self, role: Option<Role>) -> Option<&str> {
        role.map(|r| match r {
            Role::Admin => self.admin.as_str(),
            Role::Service => self.service.as_str(),
            Role::Operator => self.operator.as_str(),
            Role::Auditor => self.auditor.as_str(),
        })
    }

    /// Send a request; `body` is sent as `application/json` text as given (so tests
    /// can send what `serde_json::Value` cannot hold, like repeated keys).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let headers = resp.headers().clone();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = resp.bytes().await.expect("body");
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Reply {
            status,
            headers,
            content_type,
            body,
        }
    }

    pub async fn post(&self, path: &str, key: &str, body: &str) -> Reply {
        self.send(Method::POST, path, Some(key), Some(body), &[])
            .await
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        self.send(Method::GET, path, Some(key), None, &[]).await
    }
}
