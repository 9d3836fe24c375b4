//! Several ledger partitions in one process (issue 21, R-SCALE-1): the
//! `--partitions` list, each partition's own files, and the HTTP dispatch.
//!
//! Each partition is started as a whole service of its own (`start_with`: its
//! database, projectors, jobs, cron, outbox relays, anchors, API keys); this module
//! only routes a request to one of them, by the rule documented in
//! `runtime::http::partition`: the `/partitions/<CODE>/` prefix, else the
//! `Ledger-Partition` header, else (console pages only, whose links are absolute)
//! the `fl_partition` cookie set when a console page was opened under a prefix,
//! else the only partition. Nothing here reads or writes a database: there is no
//! cross-partition unit to route.

use crate::runtime::http::partition::{
    parse_partition_code, PARTITION_FIELD, PARTITION_HEADER, PARTITION_PATH_PREFIX,
};
use crate::runtime::http::{AppState, Problem};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tower::ServiceExt;

/// One partition of `--partitions`: its code and database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSpec {
    pub code: String,
    pub database_url: String,
}

/// Most partitions one process serves: each runs its own pool, projectors and jobs.
pub const PARTITIONS_MAX: usize = 16;
/// The console's partition cookie (its pages link to `/console/…` without a prefix).
const CONSOLE_PARTITION_COOKIE: &str = "fl_partition";

/// Parse `CODE=URL;CODE=URL` (`;`: a failover URL lists hosts with commas). The
/// errors name the entry and the rule; a code may appear once.
pub fn parse_partitions(spec: &str) -> anyhow::Result<Vec<PartitionSpec>> {
    let mut out: Vec<PartitionSpec> = Vec::new();
    for (i, entry) in spec.split(';').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let Some((code, url)) = entry.split_once('=') else {
            anyhow::bail!("--partitions entry {}: expected CODE=DATABASE_URL", i + 1);
        };
        let code = parse_partition_code(code)
            .map_err(|e| anyhow::anyhow!("--partitions entry {}: {e}", i + 1))?;
        let url = url.trim();
        if url.is_empty() {
            anyhow::bail!(
                "--partitions entry {} ({code}): the database URL is empty",
                i + 1
            );
        }
        if out.iter().any(|p| p.code == code) {
            anyhow::bail!("--partitions: partition {code} is listed twice");
        }
        out.push(PartitionSpec {
            code,
            database_url: url.to_owned(),
        });
    }
    if out.is_empty() {
        anyhow::bail!("--partitions: no partition listed (expected CODE=DATABASE_URL;…)");
    }
    if out.len() > PARTITIONS_MAX {
        anyhow::bail!(
            "--partitions: {} partitions, at most {PARTITIONS_MAX} per process",
            out.len()
        );
    }
    Ok(out)
}

/// A partition's own copy of a per-deployment file: `keys.json` → `keys.TH.json`,
/// `anchors` → `anchors.TH` (integrity keys, anchors: each partition has its own
/// chain, so its own keys and anchors).
pub fn partition_file(path: &Path, code: &str) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let named = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{code}.{ext}"),
        _ => format!("{name}.{code}"),
    };
    path.with_file_name(named)
}

#[derive(Clone)]
struct Partitions {
    routers: Arc<BTreeMap<String, Router>>,
}

/// The router of a process serving `partitions` (code, started state).
pub fn dispatcher(partitions: Vec<(String, AppState)>) -> Router {
    let routers = partitions
        .into_iter()
        .map(|(code, state)| (code, super::router::router(state)))
        .collect();
    Router::new().fallback(dispatch).with_state(Partitions {
        routers: Arc::new(routers),
    })
}

/// Where a request goes: the partition's code and router, and whether the path
/// named it.
enum Route {
    To {
        code: String,
        router: Router,
        prefixed: bool,
    },
    Refused(Problem),
    /// No partition named and several served: `/health` answers for all of them.
    AllHealth,
}

fn route(p: &Partitions, req: &mut Request) -> Route {
    let path = req.uri().path().to_owned();
    let header = req
        .headers()
        .get(&PARTITION_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
    let mut named: Option<(String, &'static str)> = None;
    if let Some(tail) = path.strip_prefix(PARTITION_PATH_PREFIX) {
        let (code, rest) = tail.split_once('/').unwrap_or((tail, ""));
        match parse_partition_code(code) {
            Ok(code) => named = Some((code, "path")),
            Err(e) => return Route::Refused(unknown(e, "path")),
        }
        let query = req
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        match format!("/{rest}{query}").parse::<Uri>() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(e) => return Route::Refused(unknown(e.to_string(), "path")),
        }
    }
    if let Some(raw) = header {
        let code = match parse_partition_code(&raw) {
            Ok(code) => code,
            Err(e) => return Route::Refused(unknown(e, PARTITION_FIELD)),
        };
        match &named {
            Some((by_path, _)) if *by_path != code => {
                return Route::Refused(
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "PARTITION_CONFLICT",
                        format!(
                            "the path names partition {by_path}, the Ledger-Partition header {code}"
                        ),
                    )
                    .field(PARTITION_FIELD),
                )
            }
            Some(_) => {}
            None => named = Some((code, "header")),
        }
    }
    if named.is_none() && req.uri().path().starts_with("/console") {
        named = console_cookie(req).map(|code| (code, "cookie"));
    }
    let prefixed = named.as_ref().is_some_and(|(_, how)| *how == "path");
    let code = match named {
        Some((code, _)) => code,
        None if p.routers.len() == 1 => p.routers.keys().next().cloned().unwrap_or_default(),
        None if req.uri().path() == "/health" => return Route::AllHealth,
        None => {
            return Route::Refused(
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "PARTITION_REQUIRED",
                    format!(
                        "this service serves the partitions {}: name one with the \
                         Ledger-Partition header or the /partitions/<CODE>/ prefix (the \
                         country of the wallet, order, withdrawal or station)",
                        codes(p)
                    ),
                )
                .field(PARTITION_FIELD),
            )
        }
    };
    match p.routers.get(&code) {
        Some(router) => Route::To {
            router: router.clone(),
            code,
            prefixed,
        },
        None => Route::Refused(
            Problem::new(
                StatusCode::NOT_FOUND,
                "UNKNOWN_PARTITION",
                format!("partition {code} is not served here (served: {})", codes(p)),
            )
            .field(PARTITION_FIELD),
        ),
    }
}

fn unknown(e: impl std::fmt::Display, field: &str) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "INVALID_PARTITION", e.to_string()).field(field)
}

fn codes(p: &Partitions) -> String {
    p.routers.keys().cloned().collect::<Vec<_>>().join(", ")
}

fn console_cookie(req: &Request) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == CONSOLE_PARTITION_COOKIE)
        .and_then(|(_, v)| parse_partition_code(v).ok())
}

async fn dispatch(State(p): State<Partitions>, mut req: Request) -> Response {
    match route(&p, &mut req) {
        Route::Refused(problem) => problem.into_response(),
        Route::AllHealth => all_health(&p).await,
        Route::To {
            code,
            router,
            prefixed,
        } => {
            let console = req.uri().path().starts_with("/console");
            let mut response = match router.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            if prefixed && console {
                let cookie = format!(
                    "{CONSOLE_PARTITION_COOKIE}={code}; Path=/console; HttpOnly; SameSite=Strict"
                );
                if let Ok(v) = HeaderValue::from_str(&cookie) {
                    response.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            response
        }
    }
}

/// `/health` of every partition: 200 when all are healthy, else 503; each
/// partition's own answer under its code.
async fn all_health(p: &Partitions) -> Response {
    let mut all_ok = true;
    let mut body = serde_json::Map::new();
    for (code, router) in p.routers.iter() {
        let req = Request::builder()
            .uri("/health")
            .body(axum::body::Body::empty())
            .unwrap_or_default();
        let response = match router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        all_ok &= response.status().is_success();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        body.insert(code.clone(), value);
    }
    let status = if all_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let answer = serde_json::json!({
        "status": if all_ok { "ok" } else { "degraded" },
        "partitions": body,
    });
    (status, axum::Json(answer)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_parse_with_rules_named() {
        let p =
            parse_partitions(" id=sqlite://a.db ; TH=mysql://root@h1:3311,h2:3312/fl_th;").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].code, "ID");
        assert_eq!(p[1].database_url, "mysql://root@h1:3311,h2:3312/fl_th");
        for (bad, says) in [
            ("ID", "CODE=DATABASE_URL"),
            ("IDN=sqlite://x", "two letters"),
            ("ID=", "empty"),
            ("ID=a;id=b", "twice"),
            (";", "no partition"),
        ] {
            let e = parse_partitions(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn each_partition_has_its_own_files() {
        assert_eq!(
            partition_file(Path::new("/k/factledger-keys.json"), "TH"),
            PathBuf::from("/k/factledger-keys.TH.json")
        );
        assert_eq!(
            partition_file(Path::new("anchors"), "VN"),
            PathBuf::from("anchors.VN")
        );
    }
}
