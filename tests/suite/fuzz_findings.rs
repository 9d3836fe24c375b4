//! What the API fuzzer found (issue 14 item 10, `tools/fuzz-api.sh`), each pinned on a
//! real server, both backends: errors that were plain text instead of problem+json
//! naming the field. The document-side findings (problem bodies under
//! `application/problem+json`, the standard statuses, the reconciliation run's schema)
//! are unit tests in `src/api/contract.rs`.

use crate::common;

use common::{Server, TestDb};
use serde_json::Value;

/// A whole answer: status, Content-Type and the body as JSON (Null when it is not).
async fn answer(response: reqwest::Response) -> (u16, String, Value) {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response.text().await.expect("body");
    (
        status,
        content_type,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[track_caller]
fn assert_problem(got: &(u16, String, Value), status: u16, code: &str, field: Option<&str>) {
    assert_eq!(got.0, status, "{got:?}");
    assert_eq!(got.1, "application/problem+json", "{got:?}");
    assert_eq!(got.2["code"], code, "{got:?}");
    assert_eq!(got.2["field"].as_str(), field, "{got:?}");
}

async fn get(app: &Server, path: &str) -> (u16, String, Value) {
    let response = app
        .client
        .get(format!("{}{path}", app.base))
        .bearer_auth(&app.admin)
        .send()
        .await
        .expect("request");
    answer(response).await
}

both_backends!(
    fuzz_query_parameters_that_do_not_parse_are_422_problems_naming_the_parameter,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        // Were axum's plain-text 400 `Failed to deserialize query string`.
        for (path, field) in [
            ("/v1/jobs?limit=false", "limit"),
            ("/v1/jobs?after=x", "after"),
            ("/v1/callbacks?limit=%5B%5D", "limit"),
            ("/v1/callbacks?after=1&after=2", "after"),
            ("/v1/bills/inspections?after_id=z", "after_id"),
            ("/v1/bills/order-status-conflicts?order_id=1.5", "order_id"),
            ("/v1/wallets/w-1?min_position=ten", "min_position"),
        ] {
            let got = get(&app, path).await;
            assert_problem(&got, 422, "INVALID_QUERY", Some(field));
            let detail = got.2["detail"].as_str().expect("detail");
            assert!(detail.contains(field), "{path}: {detail}");
        }
        // The same lists still answer when the query is right.
        for path in ["/v1/jobs?limit=5", "/v1/callbacks?limit=5&after=0"] {
            assert_eq!(get(&app, path).await.0, 200, "{path}");
        }
    }
);

both_backends!(
    fuzz_a_refresh_body_that_is_not_utf8_is_a_422_problem,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        // Was a plain-text 400 `Request body didn't contain valid UTF-8` (the handler
        // read a `String`).
        let response = app
            .client
            .post(format!("{}/v1/bills:refresh", app.base))
            .bearer_auth(&app.admin)
            .header("Content-Type", "application/json")
            .body(vec![0xff, 0xfe, 0x7b])
            .send()
            .await
            .expect("request");
        assert_problem(&answer(response).await, 422, "MALFORMED_JSON", None);
        // Sent without the JSON type, it is refused like every other JSON route.
        let response = app
            .client
            .post(format!("{}/v1/bills:refresh", app.base))
            .bearer_auth(&app.admin)
            .body(r#"{"scope_type":"DIFF","diff_ids":[1]}"#)
            .send()
            .await
            .expect("request");
        assert_problem(
            &answer(response).await,
            422,
            "INVALID_BODY",
            Some("Content-Type"),
        );
    }
);

both_backends!(
    fuzz_an_oversized_callback_body_is_a_413_problem,
    |db: TestDb| async move {
        let app = Server::start(&db).await;
        // Was axum's plain-text 413 (the handler read `Bytes`).
        let body = vec![b'x'; factledger::runtime::http::BODY_BYTES_MAX + 1];
        let response = app
            .client
            .post(format!("{}/v1/callbacks/any-provider", app.base))
            .body(body)
            .send()
            .await
            .expect("request");
        assert_problem(&answer(response).await, 413, "BODY_TOO_LARGE", None);
    }
);
