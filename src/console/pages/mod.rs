//! The console's pages, one module per family, each with its own `routes()`; this
//! module serves the assets, sign-in and sign-out.

mod bills;
mod bookings;
mod fields;
mod jobs;
mod metrics;
mod projections;
mod reconciliations;
mod search;
mod stream;
mod wallet;
mod withdrawals;

use super::session::{self, cookie, Session, COOKIE, PRE_COOKIE};
use super::Console;
use crate::runtime::http::limits::ClientAddr;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::{html, DOCTYPE};
use std::collections::HashMap;

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/console/assets/console.css", get(css))
        .route("/console/assets/console.js", get(js))
        .route("/console/sign-in", get(sign_in_page).post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .merge(search::routes())
        .merge(wallet::routes())
        .merge(stream::routes())
        .merge(projections::routes())
        .merge(reconciliations::routes())
        .merge(jobs::routes())
        .merge(metrics::routes())
        .merge(bills::routes())
        .merge(withdrawals::routes())
        .merge(bookings::routes())
}

async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../assets/console.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../assets/console.js"),
    )
        .into_response()
}

/// Only a path inside the console may be the page after sign-in (no open redirect).
fn safe_next(next: Option<&String>) -> String {
    match next {
        Some(n)
            if n.starts_with("/console")
                && !n.starts_with("/console/sign-")
                && !n.contains("//")
                && !n.contains('\\') =>
        {
            n.clone()
        }
        _ => "/console".to_owned(),
    }
}

/// Whether `next` holds a control character (CR, LF, …): it becomes the `Location`
/// of the answer after sign-in, which cannot carry one (issue 32 item 7: it was a
/// panic answered as a text 500). Such a `next` is refused ([`next_refused`]).
fn next_unsafe(next: Option<&String>) -> bool {
    next.is_some_and(|n| n.chars().any(char::is_control))
}

/// The 422 page of a `next` with a control character.
fn next_refused() -> Response {
    session::refused(
        StatusCode::UNPROCESSABLE_ENTITY,
        "INVALID_FIELD",
        "next: the page after sign-in is a console path without control characters \
         (CR, LF, tab, …)",
    )
}

fn sign_in_form(console: &Console, next: &str, problem: Option<&str>) -> Response {
    let token = session::pre_token();
    let body = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Sign in · factledger console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body { main.signin {
                h1 { "factledger console" }
                p.muted { "Sign in with an API key (admin, operator or auditor). The key stays on the server; this browser gets a session cookie." }
                @if let Some(p) = problem { div.problem role="alert" { (p) } }
                form #sign-in method="post" action="/console/sign-in" {
                    input type="hidden" name="csrf" value=(token);
                    input type="hidden" name="next" value=(next);
                    label { "API key" input #key type="password" name="key" autocomplete="off" required; }
                    p { button #sign-in-button type="submit" { "Sign in" } }
                }
            } }
        }
    };
    let status = if problem.is_some() {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    (
        status,
        [(
            header::SET_COOKIE,
            console.sessions.cookie(PRE_COOKIE, &token, 600),
        )],
        body,
    )
        .into_response()
}

async fn sign_in_page(
    State(console): State<Console>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if next_unsafe(q.get("next")) {
        return next_refused();
    }
    sign_in_form(&console, &safe_next(q.get("next")), None)
}

async fn sign_in(
    State(console): State<Console>,
    ClientAddr(addr): ClientAddr,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if next_unsafe(form.get("next")) {
        return next_refused();
    }
    let next = safe_next(form.get("next"));
    let pre = cookie(&headers, PRE_COOKIE).unwrap_or_default();
    let sent = form.get("csrf").map(String::as_str).unwrap_or("");
    if pre.is_empty() || !session::same_token(&pre, sent) {
        return session::refused(
            StatusCode::FORBIDDEN,
            "CSRF_TOKEN_INVALID",
            "the sign-in form's csrf token is missing or does not match: open the sign-in page again",
        );
    }
    if let Err(retry_after_s) = console.app.limits.auth_failures.throttled(addr) {
        return too_many(
            "AUTH_THROTTLED",
            "too many failed sign-ins from this address",
            retry_after_s,
        );
    }
    let key = form.get("key").map(|k| k.trim()).unwrap_or("");
    if key.is_empty() || key.len() > 256 {
        return sign_in_form(
            &console,
            &next,
            Some("key: give the API key (1 to 256 characters)"),
        );
    }
    let principal = match console.app.keys.authenticate(key).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            crate::runtime::http::auth_failed(&console.app, addr, "console");
            return sign_in_form(&console, &next, Some("key: unknown or revoked API key"));
        }
        Err(e) => return super::session::key_check_failed(&e),
    };
    // A sign-in is a request of its key: it takes a token like an API call.
    if let Err(retry_after_s) = console.app.limits.rate.check(&principal.key_id) {
        return too_many(
            "RATE_LIMITED",
            "this API key signed in more often than its rate allows",
            retry_after_s,
        );
    }
    if principal.role == crate::infra::auth::Role::Service {
        return sign_in_form(
            &console,
            &next,
            Some("key: a service key is for machines; sign in with an admin, operator or auditor key"),
        );
    }
    let id = console.sessions.open(key.to_owned(), principal);
    let mut resp = Redirect::to(&next).into_response();
    let h = resp.headers_mut();
    h.append(
        header::SET_COOKIE,
        console
            .sessions
            .cookie(COOKIE, &id, console.sessions.life_secs()),
    );
    h.append(
        header::SET_COOKIE,
        console.sessions.cookie(PRE_COOKIE, "", 0),
    );
    resp
}

/// A sign-in refused for its rate: 429 with `Retry-After`.
fn too_many(code: &str, what: &str, retry_after_s: u64) -> Response {
    let mut resp = session::refused(
        StatusCode::TOO_MANY_REQUESTS,
        code,
        &format!("{what}; retry in {retry_after_s} s"),
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, retry_after_s.into());
    resp
}

async fn sign_out(
    State(console): State<Console>,
    session: Session,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let sent = form.get("csrf").map(String::as_str).unwrap_or("");
    if !session::same_token(sent, session.csrf()) {
        return session::refused(
            StatusCode::FORBIDDEN,
            "CSRF_TOKEN_INVALID",
            "the form's csrf token is missing or not this session's",
        );
    }
    console.sessions.close(&session.id);
    let mut resp = Redirect::to("/console/sign-in").into_response();
    resp.headers_mut()
        .append(header::SET_COOKIE, console.sessions.cookie(COOKIE, "", 0));
    resp
}
