//! Console sessions: sign-in with an API key, kept server-side; the browser holds a
//! random 256-bit session id in the `fl_console` cookie (Secure, HttpOnly,
//! SameSite=Strict, Path=/console, Max-Age the session's life), never the key itself.
//!
//! - The cookies are `Secure`: a browser sends them over HTTPS only. For development
//!   over plain HTTP on loopback, `FACTLEDGER_CONSOLE_INSECURE_COOKIE=1` leaves the
//!   flag off (a browser drops a `Secure` cookie an `http://` page sets, except on
//!   `localhost`, so the console could not be signed in to at all).
//! - Sessions are capped per key ([`SESSIONS_PER_KEY_MAX`]): a sign-in beyond the
//!   cap ends the oldest session *of that key*, never another user's; and a sign-in
//!   takes a token of the key's rate limit like an API request (issue 32 item 5: one
//!   auditor key signing in 10,050 times used to sign everyone else out).
//!   [`SESSIONS_MAX`] still bounds all sessions, for many keys at their cap.
//! - A session ends at its expiry ([`SESSION_SECS_DEFAULT`], or
//!   `FACTLEDGER_CONSOLE_SESSION_SECS`), at sign-out, or when its key is revoked: the
//!   key is authenticated again on every request (the key cache's 1 s), and the API
//!   the pages call authenticates it once more.
//! - Every POST carries the session's CSRF token (a hidden `csrf` field, compared in
//!   constant time); the sign-in form carries a pre-session token, double-submitted in
//!   the `fl_console_pre` cookie. SameSite=Strict already keeps the cookie off
//!   cross-site requests; the token also refuses a same-site forgery.
//! - Service keys are for machines: the console refuses them at sign-in.
//! - Sessions live in this process: a restart signs everyone out.

use super::Console;
use crate::infra::auth::{Principal, Role};
use crate::infra::db::now_ms;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use rand::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use subtle::ConstantTimeEq;

pub const COOKIE: &str = "fl_console";
pub const PRE_COOKIE: &str = "fl_console_pre";
/// Eight hours: a working day; then the key is asked for again.
pub const SESSION_SECS_DEFAULT: i64 = 8 * 3600;
/// Sessions held at once; beyond, the oldest to expire is dropped.
pub const SESSIONS_MAX: usize = 10_000;
/// Sessions of one key at once: a person's browsers and devices, with room to spare;
/// beyond, the key's oldest session ends.
pub const SESSIONS_PER_KEY_MAX: usize = 16;
/// The environment variable that leaves the cookies' `Secure` flag off (plain-HTTP
/// development on loopback; see the module doc).
pub const INSECURE_COOKIE_ENV: &str = "FACTLEDGER_CONSOLE_INSECURE_COOKIE";

/// One signed-in browser.
#[derive(Clone)]
pub struct SessionData {
    pub secret: String,
    pub principal: Principal,
    pub csrf: String,
    pub expires_at_ms: i64,
}

pub struct Sessions {
    life_secs: i64,
    /// Whether the cookies carry `Secure` (see [`INSECURE_COOKIE_ENV`]).
    secure: bool,
    by_id: Mutex<HashMap<String, SessionData>>,
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

impl Sessions {
    pub fn from_env() -> Self {
        let life_secs = std::env::var("FACTLEDGER_CONSOLE_SESSION_SECS")
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|s| *s > 0)
            .unwrap_or(SESSION_SECS_DEFAULT);
        let insecure = std::env::var(INSECURE_COOKIE_ENV)
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        if insecure {
            tracing::warn!(
                "{INSECURE_COOKIE_ENV} is set: console cookies are not Secure (plain-HTTP \
                 development only)"
            );
        }
        Sessions {
            life_secs,
            secure: !insecure,
            by_id: Mutex::new(HashMap::new()),
        }
    }

    /// `Set-Cookie` for one of the console's cookies: [`session_cookie`] with this
    /// service's `Secure` setting.
    pub fn cookie(&self, name: &str, value: &str, max_age_secs: i64) -> HeaderValue {
        session_cookie(name, value, max_age_secs, self.secure)
    }

    /// Sessions held now of `key_id` (tests).
    pub fn count_of(&self, key_id: &str) -> usize {
        self.map()
            .values()
            .filter(|s| s.principal.key_id == key_id)
            .count()
    }

    pub fn life_secs(&self) -> i64 {
        self.life_secs
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionData>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open a session for `principal`; its id (the cookie's value).
    pub fn open(&self, secret: String, principal: Principal) -> String {
        let now = now_ms();
        let id = random_hex();
        let mut map = self.map();
        map.retain(|_, s| s.expires_at_ms > now);
        let key_id = &principal.key_id;
        let of_key = map
            .values()
            .filter(|s| &s.principal.key_id == key_id)
            .count();
        if of_key >= SESSIONS_PER_KEY_MAX {
            if let Some(oldest) = map
                .iter()
                .filter(|(_, s)| &s.principal.key_id == key_id)
                .min_by_key(|(_, s)| s.expires_at_ms)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        if map.len() >= SESSIONS_MAX {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires_at_ms)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            SessionData {
                secret,
                principal,
                csrf: random_hex(),
                expires_at_ms: now + self.life_secs * 1000,
            },
        );
        id
    }

    pub fn get(&self, id: &str) -> Option<SessionData> {
        let now = now_ms();
        let mut map = self.map();
        match map.get(id) {
            Some(s) if s.expires_at_ms > now => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn close(&self, id: &str) {
        self.map().remove(id);
    }
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// `Set-Cookie` for a console cookie: HttpOnly, SameSite=Strict, scoped to
/// `/console`, and `Secure` unless `secure` is false (see the module doc).
pub fn session_cookie(name: &str, value: &str, max_age_secs: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    ))
    .expect("cookie values are hex")
}

/// Equal in constant time (a token compared with what the form sent).
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A new pre-session token (the sign-in form's CSRF token).
pub fn pre_token() -> String {
    random_hex()
}

/// The signed-in caller of a console page: extracting it redirects a browser
/// without a live session to the sign-in page, with `next` the page it asked for.
#[derive(Clone)]
pub struct Session {
    pub id: String,
    pub data: SessionData,
}

impl Session {
    pub fn role(&self) -> Role {
        self.data.principal.role
    }

    /// Operators and admins act; auditors see.
    pub fn can_act(&self) -> bool {
        self.role().can_operate()
    }

    pub fn actor(&self) -> String {
        self.data.principal.actor()
    }

    pub fn csrf(&self) -> &str {
        &self.data.csrf
    }

    /// The API client for this page view.
    pub fn api<'a>(&'a self, console: &'a Console) -> super::api::Api<'a> {
        super::api::Api::new(&console.api, &self.data.secret)
    }

    /// Refuse an action unless the form's token is this session's (403) and the role
    /// may act (403, naming the role).
    // The refusal is the page answered at once, never carried further: no need to box.
    #[allow(clippy::result_large_err)]
    pub fn check_action(&self, form: &HashMap<String, String>) -> Result<(), Response> {
        let sent = form.get("csrf").map(String::as_str).unwrap_or("");
        if !same_token(sent, &self.data.csrf) {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "CSRF_TOKEN_INVALID",
                "the form's csrf token is missing or not this session's: reload the page and try again",
            ));
        }
        if !self.can_act() {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                &format!(
                    "this is an operator action: it needs role operator or admin, and this \
                     key's role is {}",
                    self.role()
                ),
            ));
        }
        Ok(())
    }
}

/// A refusal page (plain, no chrome: it answers a POST that was not allowed).
pub fn refused(status: StatusCode, code: &str, detail: &str) -> Response {
    let body = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "Refused: " (code) } link rel="stylesheet" href="/console/assets/console.css"; }
            body { main {
                h1 { "Refused" }
                p.problem { strong { (code) } ": " (detail) }
                p { a href="/console" { "Back to the console" } }
            } }
        }
    };
    (status, body).into_response()
}

impl FromRequestParts<Console> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        let next = OriginalUri::from_request_parts(parts, console)
            .await
            .map(|u| u.0.to_string())
            .unwrap_or_else(|_| "/console".to_owned());
        let to_sign_in = || {
            let next = if parts.method == axum::http::Method::GET {
                next.clone()
            } else {
                "/console".to_owned()
            };
            Redirect::to(&format!("/console/sign-in?next={}", super::api::enc(&next)))
                .into_response()
        };
        let Some(id) = cookie(&parts.headers, COOKIE) else {
            return Err(to_sign_in());
        };
        let Some(data) = console.sessions.get(&id) else {
            return Err(to_sign_in());
        };
        // Revoked since sign-in: the session ends with its key.
        match console.app.keys.authenticate(&data.secret).await {
            Ok(Some(p)) if p == data.principal => Ok(Session { id, data }),
            Ok(_) => {
                console.sessions.close(&id);
                Err(to_sign_in())
            }
            Err(e) => Err(key_check_failed(&e)),
        }
    }
}

/// The answer when an API key could not be checked (the database did not answer):
/// the error goes to the service log under a fresh error id, never to the page
/// (issue 32 item 7: a raw database error names tables and hosts).
pub fn key_check_failed(e: &anyhow::Error) -> Response {
    let error_id = uuid::Uuid::new_v4().simple().to_string();
    tracing::error!(%error_id, error = %format!("{e:#}"), "console: an API key could not be checked");
    refused(
        StatusCode::SERVICE_UNAVAILABLE,
        "DATABASE_UNAVAILABLE",
        &format!(
            "the key could not be checked right now; retry shortly (error_id {error_id} \
             identifies it in the service log)"
        ),
    )
}
