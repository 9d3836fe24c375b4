//! The operator console (issue 20): server-rendered HTML at `/console`, served by
//! `factledger serve` itself, its CSS and JS embedded in the binary.
//!
//! **Every page is a rendering of the JSON API, called in-process with the signed-in
//! key** ([`api::Api`]): the API's role checks, validation, idempotency and audit
//! records are the console's own. The console holds no second path to the data, so a
//! page can never show what the API would not, and an action an auditor forges meets
//! the same 403 an API call would (the console refuses it first, and the API again).
//!
//! - [`session`]: sign-in with an API key, the HttpOnly SameSite=Strict expiring
//!   session cookie, the per-session CSRF token every POST carries.
//! - [`layout`]: the page chrome, formatting, action forms (drawn for operators and
//!   admins only), SVG charts.
//! - [`history`]: one sample of the service's own metrics every
//!   [`history::SAMPLE_EVERY_MS_DEFAULT`] ms, an hour kept, for the charts.
//! - `pages/`: one module per page family, each with its own `routes()`.

pub mod api;
pub mod history;
pub mod layout;
mod pages;
pub mod session;

use crate::runtime::http::AppState;
use axum::Router;
use std::sync::Arc;

/// What every console handler shares: the service's state, the API router it calls
/// in-process, the sessions and the metrics history.
#[derive(Clone)]
pub struct Console {
    pub(crate) app: AppState,
    pub(crate) api: Router,
    pub(crate) sessions: Arc<session::Sessions>,
    pub(crate) history: Arc<history::History>,
}

/// The console's routes, under `/console`. `api` is the service's API router with
/// its state (the composition root builds it): the console calls it, never a
/// capability directly.
pub fn routes(app: AppState, api: Router) -> Router {
    let history = history::History::start(&app);
    let console = Console {
        app,
        api,
        sessions: Arc::new(session::Sessions::from_env()),
        history,
    };
    let pages = pages::routes()
        .with_state(console)
        .layer(axum::middleware::from_fn(
            crate::runtime::http::body::refuse_declared_over_limit,
        ));
    crate::runtime::http::headers::html_pages(pages)
}
