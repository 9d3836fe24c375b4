//! Issue 32 item 7 over HTTP, both backends: small leaks and headers. `/health` says
//! only the status to a caller without a key; the console never shows a raw database
//! error; every answer is `nosniff`, and the API's HTML reconciliation report carries
//! the console's page headers; a CR/LF in the sign-in `next` is a 422 page; a declared
//! `Content-Length` over the route's limit is 413 at once.

use crate::common;

use common::console::{cookie_in, csrf_in};
use common::{Server, TestDb};
use reqwest::header::COOKIE;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

both_backends!(
    issue32_7_health_without_a_key_says_only_the_status,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let r = app
            .client
            .get(format!("{}/health", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
        // A key sees the backend and the head; a wrong key is refused, not served.
        let (status, body) = app.get("/health").await;
        assert_eq!(status, 200, "{body}");
        assert!(body["head_position"].is_i64(), "{body}");
        assert!(body["database"].is_string(), "{body}");
        let r = app
            .client
            .get(format!("{}/health", app.base))
            .bearer_auth("flk_nope")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
    }
);

/// Sign in to the console with `next` and `key`: the answer's status and text.
async fn sign_in(app: &Server, key: &str, next: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = client
        .get(format!("{}/console/sign-in", app.base))
        .send()
        .await
        .unwrap();
    let set_cookies: Vec<String> = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let pre = cookie_in(&set_cookies, "fl_console_pre").expect("pre-session cookie");
    let token = csrf_in(&form.text().await.unwrap()).expect("sign-in csrf");
    let r = client
        .post(format!("{}/console/sign-in", app.base))
        .header(COOKIE, pre)
        .form(&[("csrf", token.as_str()), ("key", key), ("next", next)])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

both_backends!(
    issue32_7_a_cr_lf_in_the_sign_in_next_is_a_422_page,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        for next in ["/console\r\nSet-Cookie: planted=1", "/console/jobs\n"] {
            let (status, page) = sign_in(&app, &app.admin, next).await;
            assert_eq!(status, 422, "{page}");
            assert!(
                page.contains("INVALID_FIELD") && page.contains("next:"),
                "{page}"
            );
        }
        // The sign-in page refuses it too, and a plain `next` still signs in.
        let r = app
            .client
            .get(format!(
                "{}/console/sign-in?next=%2Fconsole%0D%0AX%3A%201",
                app.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 422);
        let (status, page) = sign_in(&app, &app.admin, "/console/jobs").await;
        assert_eq!(status, 303, "{page}");
    }
);

both_backends!(
    issue32_7_the_console_never_shows_a_raw_database_error,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        // The key table gone: a key not in the cache cannot be checked.
        db.store
            .execute_raw("ALTER TABLE api_keys RENAME TO api_keys_gone")
            .await
            .unwrap();
        let (status, page) = sign_in(&app, "flk_not_cached", "/console").await;
        db.store
            .execute_raw("ALTER TABLE api_keys_gone RENAME TO api_keys")
            .await
            .unwrap();
        assert_eq!(status, 503, "{page}");
        assert!(page.contains("DATABASE_UNAVAILABLE"), "{page}");
        assert!(page.contains("error_id"), "{page}");
        for raw in [
            "api_keys",
            "no such table",
            "doesn't exist",
            "sqlx",
            "SELECT",
        ] {
            assert!(!page.contains(raw), "{raw} leaked: {page}");
        }
    }
);

/// Start a reconciliation as the admin and wait (bounded) until it is finished.
async fn reconciled(app: &Server) -> String {
    let run = app.reconciled(json!({})).await;
    run["id"].as_str().unwrap().to_owned()
}

both_backends!(
    issue32_7_every_answer_is_nosniff_and_the_report_page_has_the_console_headers,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        let get = |path: &str, key: Option<&str>| {
            let mut req = app.client.get(format!("{}{path}", app.base));
            if let Some(k) = key {
                req = req.bearer_auth(k);
            }
            req.send()
        };
        let admin = Some(app.admin.as_str());
        for (path, key, status) in [
            ("/health", None, 200),
            ("/openapi.json", None, 200),
            ("/v1/wallets/w-1", None, 401),
            ("/v1/wallets/w-1", admin, 404),
            ("/no/such/route", None, 404),
            ("/console/sign-in", None, 200),
            ("/console/assets/console.css", None, 200),
        ] {
            let r = get(path, key).await.unwrap();
            assert_eq!(r.status().as_u16(), status, "{path}");
            assert_eq!(
                r.headers()
                    .get("x-content-type-options")
                    .map(|v| v.to_str().unwrap()),
                Some("nosniff"),
                "{path}: {:?}",
                r.headers()
            );
        }
        // The report page: the console's CSP (no inline style, which it would block)
        // and frame headers.
        let console = get("/console/sign-in", None).await.unwrap();
        let id = reconciled(&app).await;
        let r = get(&format!("/v1/reconciliations/{id}/report.html"), admin)
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        for h in [
            "content-security-policy",
            "x-frame-options",
            "referrer-policy",
            "cache-control",
            "x-content-type-options",
        ] {
            assert!(
                r.headers().get(h).is_some(),
                "{h} missing: {:?}",
                r.headers()
            );
            assert_eq!(r.headers().get(h), console.headers().get(h), "{h}");
        }
        let page = r.text().await.unwrap();
        assert!(!page.contains("<style"), "{page}");
        assert!(page.contains("/console/assets/console.css"), "{page}");
    }
);

/// Send `head` (and `body`) on a raw connection and read the answer's head, for at
/// most `within`: `None` when no head arrived in time.
async fn raw_answer(app: &Server, head: String, body: &[u8], within: Duration) -> Option<String> {
    let mut conn = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            Ok(_) => break,
            Err(_) => return None,
        }
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

fn post_head(app: &Server, path: &str, content_type: &str, length: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n",
        app.addr, app.admin
    )
}

both_backends!(
    issue32_7_a_declared_content_length_over_the_limit_is_413_at_once,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        // Far under the 30 s request timeout the body would otherwise be awaited for.
        let at_once = Duration::from_secs(5);
        let too_long = factledger::runtime::http::BODY_BYTES_MAX + 1;
        for (path, content_type) in [
            ("/v1/wallets/w-1/commands", "application/json"),
            ("/v1/callbacks/simulator", "application/json"),
            ("/console/sign-in", "application/x-www-form-urlencoded"),
        ] {
            let head = post_head(&app, path, content_type, too_long);
            let answer = raw_answer(&app, head, b"{", at_once)
                .await
                .unwrap_or_else(|| panic!("{path}: no answer within {at_once:?}"));
            assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer}");
        }
        // A route with a larger limit of its own takes that length (the body is read
        // and judged: not JSON here).
        let body = vec![b'x'; too_long];
        let head = post_head(&app, "/v1/commands:batch", "application/json", too_long);
        let answer = raw_answer(&app, head, &body, Duration::from_secs(20))
            .await
            .expect("batch answer");
        assert!(answer.starts_with("HTTP/1.1 422"), "{answer}");
    }
);
