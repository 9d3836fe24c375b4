//! A running service on an ephemeral port with one API key per role, for tests that
//! drive the HTTP API as different callers (parsing, scope, role matrix).

use super::TestDb;
use factledger::infra::auth::{KeyStore, Role};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct RoleApp {
    pub base: String,
    pub admin: String,
    pub service: String,
    pub operator: String,
    pub auditor: String,
    pub keys: KeyStore,
    pub store: factledger::infra::store::DynStore,
    pub client: reqwest::Client,
    pub key_dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RoleApp {
    fn drop(&mut self) {
        self.task.abort();
    }
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

pub async fn spawn_roles(db: &TestDb) -> RoleApp {
    let key_dir = tempfile::tempdir().expect("key dir");
    let started = factledger::server::start(&db.url, "ID", key_dir.path())
        .await
        .expect("server starts");
    let admin = started.admin_key.expect("first start creates an admin key");
    let keys = started.state.keys.clone();
    let store = started.state.store.clone();
    let secret = |role| {
        let keys = keys.clone();
        async move { keys.create(role).await.expect("create key").secret }
    };
    let service = secret(Role::Service).await;
    let operator = secret(Role::Operator).await;
    let auditor = secret(Role::Auditor).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let state = started.state;
    let task = tokio::spawn(async move {
        factledger::server::serve(state, listener, std::future::pending())
            .await
            .expect("serve");
    });
    RoleApp {
        base: format!("http://{addr}"),
        admin: admin.secret,
        service,
        operator,
        auditor,
        keys,
        store,
        client: reqwest::Client::new(),
        key_dir,
        task,
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
