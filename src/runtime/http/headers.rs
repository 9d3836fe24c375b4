//! Response headers the service sets itself (issue 32 item 7).
//!
//! - **Every answer** carries `X-Content-Type-Options: nosniff` ([`every_answer`],
//!   laid around the whole router by [`super::conn::serve`], so the partition
//!   dispatcher's and the metrics listener's answers carry it too, and the raw
//!   over-cap answer writes it itself): a browser never guesses an HTML page out of a
//!   JSON body or a stored text.
//! - **Every HTML page** — the console's and the API's reconciliation report — carries
//!   one policy, [`HTML_PAGE_HEADERS`]: a CSP that allows only this origin's scripts,
//!   styles and forms (no inline script or style), no framing, same-origin referrers
//!   and no caching.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderName, HeaderValue};
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;

/// The content security policy of every HTML page.
pub const HTML_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; \
     connect-src 'self'";

/// The headers of every HTML page, each set over whatever the handler set.
pub const HTML_PAGE_HEADERS: [(HeaderName, &str); 4] = [
    (CONTENT_SECURITY_POLICY, HTML_CSP),
    (X_FRAME_OPTIONS, "DENY"),
    (REFERRER_POLICY, "same-origin"),
    (CACHE_CONTROL, "no-store"),
];

/// `nosniff`, the value of `X-Content-Type-Options` on every answer.
pub const NOSNIFF: &str = "nosniff";

/// `router` with [`HTML_PAGE_HEADERS`] on every answer (the console's pages).
pub fn html_pages<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    HTML_PAGE_HEADERS
        .into_iter()
        .fold(router, |r, (name, value)| {
            r.layer(SetResponseHeaderLayer::overriding(
                name,
                HeaderValue::from_static(value),
            ))
        })
}

/// `router` with `X-Content-Type-Options: nosniff` on every answer.
pub fn every_answer(router: Router) -> Router {
    router.layer(SetResponseHeaderLayer::overriding(
        X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static(NOSNIFF),
    ))
}
