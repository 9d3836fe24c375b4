//! The role matrix (issue 14 item 6, F7, F11): every (method, path) of `/openapi.json`
//! × every role (admin, service, operator, auditor, no key) → the expected answer
//! class, from a table kept here. A route missing from the table, or a table row
//! missing from the document, fails; so does a route the router serves that the
//! document does not list.

use crate::common;

use common::app::{spawn_roles, RoleApp};
use common::TestDb;
use factledger::infra::auth::Role;
use reqwest::Method;
use std::collections::BTreeSet;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// No key needed (health, the document, provider callbacks).
    Public,
    /// Monitoring: admin, operator and auditor, not the service role (/metrics).
    Monitor,
    /// Any valid key, auditors included.
    Read,
    /// Business commands: admin, service, operator.
    Write,
    /// Operator actions: admin and operator only.
    Operate,
}

use Access::{Monitor, Operate, Public, Read, Write};

/// The expected table: (method, path as in /openapi.json, access).
const TABLE: &[(&str, &str, Access)] = &[
    ("get", "/health", Public),
    ("get", "/metrics", Monitor),
    ("get", "/openapi.json", Public),
    ("get", "/v1/projections", Read),
    ("get", "/v1/wallets/{wallet_id}", Read),
    ("get", "/v1/wallets/{wallet_id}/ledger", Read),
    ("get", "/v1/accounts/trial-balance", Read),
    ("get", "/v1/accounts/{account}", Read),
    ("post", "/v1/wallets/{wallet_id}/commands", Write),
    ("post", "/v1/commands:batch", Write),
    (
        "get",
        "/v1/streams/{aggregate_type}/{aggregate_id}/events",
        Read,
    ),
    (
        "get",
        "/v1/streams/{aggregate_type}/{aggregate_id}/state",
        Read,
    ),
    ("get", "/v1/orders/{platform}/{platform_order_id}", Read),
    (
        "post",
        "/v1/orders/{platform}/{platform_order_id}:correct-attribution",
        Operate,
    ),
    ("post", "/v1/orders:ingest", Write),
    ("get", "/v1/commissions", Read),
    ("post", "/v1/commissions/{commission_id}:resolve", Operate),
    ("post", "/v1/commission-rules/{rule_set_id}/versions", Write),
    ("post", "/v1/affiliate-links", Write),
    ("post", "/v1/users/{user_id}/inviter", Write),
    ("post", "/v1/campaigns/{campaign_id}", Write),
    ("get", "/v1/bills/{station_id}/{yyyymm}", Read),
    // Mode UNFINISHED is an operator refresh (403 for service, tests/suite/scope.rs); the
    // route itself takes fact-driven refreshes from the service.
    ("post", "/v1/bills:refresh", Write),
    ("get", "/v1/bills/inspections", Read),
    ("get", "/v1/bills/order-status-conflicts", Read),
    ("post", "/v1/bills/small-bills", Write),
    ("post", "/v1/bills/diffs", Write),
    ("post", "/v1/bills/partner-bills", Write),
    (
        "post",
        "/v1/bills/partner-bills/{partner_bill_id}:repush",
        Write,
    ),
    ("post", "/v1/bills/reference/{kind}", Write),
    ("post", "/v1/bills/locks", Write),
    (
        "post",
        "/v1/bills/locks/{station_id}/{month}/{lock_id}:{action}",
        Write,
    ),
    ("post", "/v1/bills/payment-results", Write),
    ("post", "/v1/bills/payment-results/{result_id}:void", Write),
    ("post", "/v1/payment-orders", Write),
    ("post", "/v1/payment-orders/{order_id}:{action}", Write),
    ("post", "/v1/payment-orders/{order_id}/lines", Write),
    (
        "post",
        "/v1/payment-orders/{order_id}/lines/{line_id}:{action}",
        Write,
    ),
    ("post", "/v1/projections/{name}/rebuild", Operate),
    ("get", "/v1/projections/rebuilds/{id}", Read),
    // Without `repair` a reconciliation only compares; `{"repair":true}` is an
    // operator action (403 for service, tests/suite/scope.rs).
    ("post", "/v1/reconciliations", Write),
    ("get", "/v1/reconciliations/{id}", Read),
    ("get", "/v1/reconciliations/{id}/report.html", Read),
    ("get", "/v1/jobs", Read),
    ("post", "/v1/jobs:retry", Operate),
    ("post", "/v1/jobs:pause", Operate),
    ("post", "/v1/jobs:resume", Operate),
    ("get", "/v1/jobs/{code}", Read),
    ("post", "/v1/jobs/{code}:kick", Operate),
    ("get", "/v1/cron", Read),
    ("get", "/v1/outbox/sinks", Read),
    ("get", "/v1/outbox/dead-letters", Operate),
    ("post", "/v1/outbox/dead-letters/{id}:replay", Operate),
    ("get", "/v1/callbacks", Read),
    ("get", "/v1/callbacks/{id}", Read),
    // Providers authenticate by signature or token, never by an API key.
    ("post", "/v1/callbacks/{provider}", Public),
    ("get", "/v1/audit/events", Read),
    ("get", "/v1/audit/events/{position}", Read),
    ("post", "/v1/audit/verify", Read),
    ("get", "/v1/audit/anchors", Read),
    ("post", "/v1/audit/anchors", Operate),
    ("get", "/v1/withdrawals", Read),
    ("post", "/v1/withdrawals", Write),
    ("get", "/v1/withdrawals/{withdrawal_id}", Read),
    ("post", "/v1/withdrawals/{withdrawal_id}:approve", Operate),
    ("put", "/v1/users/{user_id}/payment-password", Write),
    ("post", "/v1/users/{user_id}/kyc", Operate),
    ("post", "/v1/users/{user_id}/payout-accounts", Write),
    (
        "post",
        "/v1/users/{user_id}/payout-accounts/{account_id}:verify",
        Operate,
    ),
    ("get", "/v1/users/{user_id}/payout-profile", Read),
    ("post", "/v1/service-orders", Write),
    ("get", "/v1/service-orders/{order_no}", Read),
    ("post", "/v1/service-orders/{order_action}", Write),
    ("post", "/v1/bookings", Write),
    ("get", "/v1/bookings/{booking_no}", Read),
    ("post", "/v1/bookings/{booking_action}", Write),
    ("get", "/v1/refunds/{refund_no}", Read),
    ("get", "/v1/candy-accounts/{user_id}", Read),
    ("get", "/v1/subscriptions", Read),
];

/// A concrete request path for a documented one: every `{param}` filled with a value
/// its handler accepts, so an allowed caller gets past parsing of the path.
fn concrete(path: &str) -> String {
    let action = if path.contains("/lines/") {
        "adjust"
    } else if path.starts_with("/v1/bills/locks/") {
        "release"
    } else {
        "submit"
    };
    let values = [
        ("{wallet_id}", "w-1"),
        ("{aggregate_type}", "wallet"),
        ("{aggregate_id}", "w-1"),
        ("{platform}", "SHOPEE"),
        ("{platform_order_id}", "o-1"),
        ("{commission_id}", "SHOPEE:o-1:CASHBACK"),
        ("{rule_set_id}", "SHOPEE:ID"),
        ("{user_id}", "u-1"),
        ("{campaign_id}", "SHOPEE:ID"),
        ("{station_id}", "100"),
        ("{yyyymm}", "202601"),
        ("{month}", "202601"),
        ("{partner_bill_id}", "1"),
        ("{kind}", "station-facts"),
        ("{lock_id}", "1"),
        ("{result_id}", "1"),
        ("{order_id}", "1"),
        ("{line_id}", "1"),
        ("{action}", action),
        ("{name}", "wallet"),
        ("{id}", "1"),
        ("{code}", "X:1"),
        ("{provider}", "no-such-provider"),
        ("{account}", "wallet:w-1:available"),
        ("{withdrawal_id}", "wd-1"),
        ("{account_id}", "pa-1"),
        ("{order_no}", "ORD-1"),
        ("{order_action}", "ORD-1:pay"),
        ("{booking_no}", "BK-1"),
        ("{booking_action}", "BK-1:start"),
        ("{refund_no}", "RF-1"),
        ("{position}", "1"),
    ];
    let mut out = path.to_owned();
    for (k, v) in values {
        out = out.replace(k, v);
    }
    assert!(!out.contains('{'), "no value for a parameter of {path}");
    out
}

/// The (method, path) pairs of the OpenAPI document.
async fn documented(app: &RoleApp) -> BTreeSet<(String, String)> {
    let r = app
        .send(Method::GET, "/openapi.json", None, None, &[])
        .await;
    assert_eq!(r.status.as_u16(), 200);
    let mut out = BTreeSet::new();
    for (path, item) in r.body["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                out.insert((method.clone(), path.clone()));
            }
        }
    }
    out
}

/// A path with every parameter (and a `{param}:action` segment) as `{}`: the shape
/// the router and the document share.
fn shape(path: &str) -> String {
    path.split('/')
        .map(|seg| if seg.starts_with('{') { "{}" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

/// (method, shape) of every route the service registers, read from the sources of
/// `server::router` and of each capability's `routes()`.
fn routed() -> BTreeSet<(String, String)> {
    let sources = [
        ("pub fn router(", include_str!("../../src/server/router.rs")),
        ("pub fn routes(", include_str!("../../src/wallet/mod.rs")),
        ("pub fn routes(", include_str!("../../src/affiliate/mod.rs")),
        ("pub fn routes(", include_str!("../../src/bill/mod.rs")),
        ("pub fn routes(", include_str!("../../src/ledger/mod.rs")),
        ("pub fn routes(", include_str!("../../src/callbacks/mod.rs")),
        ("pub fn routes(", include_str!("../../src/audit/mod.rs")),
        ("pub fn routes(", include_str!("../../src/ops/mod.rs")),
        ("pub fn routes(", include_str!("../../src/payouts/mod.rs")),
        ("pub fn routes(", include_str!("../../src/services/mod.rs")),
    ];
    let body = sources
        .iter()
        .map(|(start, source)| {
            source
                .split(start)
                .nth(1)
                .and_then(|s| s.split("\n}\n").next())
                .expect("router function")
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    for chunk in body.split(".route(").skip(1) {
        let path = chunk.split('"').nth(1).expect("route path literal");
        let handlers = chunk.split(".layer(").next().unwrap_or(chunk);
        for method in ["get", "post", "put", "patch", "delete"] {
            if handlers.contains(&format!("{method}(")) {
                out.insert((method.to_owned(), shape(path)));
            }
        }
    }
    assert!(out.len() > 40, "parsed too few routes: {out:?}");
    out
}

const ROLES: [Option<Role>; 5] = [
    None,
    Some(Role::Admin),
    Some(Role::Service),
    Some(Role::Operator),
    Some(Role::Auditor),
];

fn allowed(access: Access, role: Option<Role>) -> bool {
    match (access, role) {
        (Public, _) => true,
        (_, None) => false,
        (Read, Some(_)) => true,
        (Monitor, Some(r)) => r != Role::Service,
        (Write, Some(r)) => r != Role::Auditor,
        (Operate, Some(r)) => matches!(r, Role::Admin | Role::Operator),
    }
}

#[test]
fn role_matrix_has_a_row_for_every_routed_path() {
    // Cheap half of the check (no server): the table covers every route of the router.
    let table: BTreeSet<_> = TABLE
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), shape(p)))
        .collect();
    let missing: Vec<_> = routed().difference(&table).cloned().collect();
    assert!(
        missing.is_empty(),
        "routes with no row in TABLE: {missing:?}"
    );
}

both_backends!(
    role_matrix_from_openapi_every_route_times_every_role,
    |db: TestDb| async move {
        let app = spawn_roles(&db).await;
        let doc = documented(&app).await;
        let table: BTreeSet<(String, String)> = TABLE
            .iter()
            .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
            .collect();
        let undocumented: Vec<_> = table.difference(&doc).collect();
        let untabled: Vec<_> = doc.difference(&table).collect();
        assert!(
            undocumented.is_empty(),
            "TABLE rows missing from /openapi.json: {undocumented:?}"
        );
        assert!(
            untabled.is_empty(),
            "/openapi.json routes missing from TABLE: {untabled:?}"
        );
        // F11: every route the router serves is documented.
        let doc_shapes: BTreeSet<_> = doc.iter().map(|(m, p)| (m.clone(), shape(p))).collect();
        let missing: Vec<_> = routed().difference(&doc_shapes).cloned().collect();
        assert!(
            missing.is_empty(),
            "routes missing from /openapi.json: {missing:?}"
        );

        let mut wrong = Vec::new();
        for (method, path, access) in TABLE {
            let url = concrete(path);
            for role in ROLES {
                let (m, body) = match *method {
                    "post" => (Method::POST, Some("{}")),
                    "put" => (Method::PUT, Some("{}")),
                    _ => (Method::GET, None),
                };
                let r = app.send(m, &url, app.key(role), body, &[]).await;
                let status = r.status.as_u16();
                let ok = match (allowed(*access, role), role) {
                    (true, _) => status != 401 && status != 403,
                    (false, None) => status == 401,
                    (false, Some(_)) => {
                        status == 403
                            && r.body["code"] == "FORBIDDEN"
                            && r.content_type.as_deref() == Some("application/problem+json")
                    }
                };
                if !ok {
                    wrong.push(format!(
                        "{method} {url} as {role:?} ({access:?}): {status} {}",
                        r.body
                    ));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} wrong answers:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }
);
