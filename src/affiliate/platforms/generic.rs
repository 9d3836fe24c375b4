//! The generic platform adapter: `GET {base_url}/orders?country=&updated_from=
//! &updated_to=&page_token=&page_size=`, times in epoch milliseconds, the window
//! half-open, the order shape `platform::normalise` reads; no request signing. It is
//! the adapter of the platforms whose affiliate order API is not publicly documented
//! (Lazada, Traveloka; see `platforms`), and what `tools/platform-sim` serves for them.

use super::http::{check_base_url, PlatformHttp};
use crate::affiliate::platform::{
    normalise_page, FetchError, FetchedPage, PageRequest, PlatformAdapter, PAGE_TOKEN_CHARS_MAX,
};
use async_trait::async_trait;
use factledger_aggregates::affiliate::Platform;
use serde_json::Value;

/// The page as the platform sends it; orders stay raw JSON so one bad order cannot
/// make the whole page unreadable.
#[derive(serde::Deserialize)]
struct RawPage {
    orders: Vec<Value>,
    #[serde(default)]
    next_page_token: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
}

/// The generic adapter: the JSON shape above over HTTP, no request signing. It is the
/// adapter of the platforms whose affiliate order API is not publicly documented
/// (Lazada, Traveloka; see `platforms`), and what `tools/platform-sim` serves for them.
#[derive(Debug, Clone)]
pub struct HttpPlatformAdapter {
    http: PlatformHttp,
    orders_url: String,
}

impl HttpPlatformAdapter {
    /// `base_url` e.g. `http://127.0.0.1:9100/traveloka` (pages are at `{base_url}/orders`).
    pub fn new(platform: Platform, base_url: &str, timeout_ms: u64) -> Result<Self, FetchError> {
        let base = check_base_url(platform, base_url)?;
        Ok(HttpPlatformAdapter {
            http: PlatformHttp::new(platform, timeout_ms)?,
            orders_url: format!("{base}/orders"),
        })
    }
}

#[async_trait]
impl PlatformAdapter for HttpPlatformAdapter {
    fn platform(&self) -> Platform {
        self.http.platform
    }

    #[tracing::instrument(skip_all, fields(platform = %self.http.platform, country = %request.country))]
    async fn fetch_page(&self, request: &PageRequest) -> Result<FetchedPage, FetchError> {
        let mut query = vec![
            ("country", request.country.to_string()),
            (
                "updated_from",
                request.window.from.timestamp_millis().to_string(),
            ),
            (
                "updated_to",
                request.window.to.timestamp_millis().to_string(),
            ),
            ("page_size", request.page_size.to_string()),
        ];
        if let Some(t) = &request.page_token {
            query.push(("page_token", t.clone()));
        }
        let answer = self
            .http
            .send(self.http.client.get(&self.orders_url).query(&query))
            .await?;
        if !(200..300).contains(&answer.status) {
            return Err(self.http.status_error(&answer));
        }
        let bad = |reason: String| self.http.body_error(reason);
        let page: RawPage = serde_json::from_slice(&answer.body).map_err(|e| bad(e.to_string()))?;
        if page.orders.len() > crate::affiliate::INGEST_PAGE_ORDERS_MAX {
            return Err(bad(format!(
                "{} orders on one page, more than the {} one ingest takes",
                page.orders.len(),
                crate::affiliate::INGEST_PAGE_ORDERS_MAX
            )));
        }
        // Some platforms end with "" rather than null.
        let next_page_token = page.next_page_token.filter(|t| !t.is_empty());
        if next_page_token
            .as_ref()
            .is_some_and(|t| t.chars().count() > PAGE_TOKEN_CHARS_MAX)
        {
            return Err(bad(format!(
                "page token longer than {PAGE_TOKEN_CHARS_MAX} characters"
            )));
        }
        let (orders, malformed) = normalise_page(self.http.platform, request.country, &page.orders);
        Ok(FetchedPage {
            orders,
            malformed,
            next_page_token,
            request_id: page.request_id,
        })
    }
}
