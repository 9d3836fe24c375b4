//! TikTok Shop: *Search Creator Affiliate Orders* (Partner Center API reference,
//! `POST /affiliate_creator/202410/orders/search`), the affiliate orders of the
//! creator account whose access token we hold — our affiliate account in one market.
//!
//! **Request.** Query `app_key`, `timestamp` (Unix seconds; TikTok accepts 5 minutes
//! behind to 30 seconds ahead), `page_size` (1–100), `page_token` (the previous
//! page's `next_page_token`) and `sign`; header `x-tts-access-token` (the creator's
//! token, one per market: `FACTLEDGER_PLATFORM_TIKTOK_ACCESS_TOKEN_<COUNTRY>`);
//! `content-type: application/json`; body `{"create_time_ge": s, "create_time_lt": s}`.
//! The window is a creation-time window in seconds (see the module docs of
//! `platforms` for what that means for late status changes).
//!
//! **Signature** (*Sign your API request*): the query parameters except `sign` and
//! `access_token`, sorted by name, concatenated as `{key}{value}`; the request path
//! in front; the body (not multipart) behind; the app secret on both ends; then
//! lower-case hex HMAC-SHA256 keyed with the app secret.
//!
//! **Answer.** `{"code": 0, "message": "Success", "request_id": "…", "data":
//! {"orders": [...], "next_page_token": "…", "total_count": n}}`; an empty or missing
//! `next_page_token` ends the window. `code != 0` is an error: 36009002 (rate limit),
//! 36009003 (internal error) and 36009007 (timeout) are retried; every other code —
//! 106001 bad `sign`, 105002 expired token, 36009004 bad credentials or timestamp,
//! 105005 scope missing — needs an operator and exhausts the job until the next firing.
//!
//! **Order → [`NormalisedOrder`].** `id` → order id; `status` → [`status`] (all six
//! documented values); `create_time` → `ordered_at`; `platform_updated_at` = the
//! later of `create_time` and `delivery_time`; GMV = Σ `actual_commission_base` (else
//! Σ `estimated_commission_base`) over `skus`; platform commission = Σ
//! `actual_commission` (else Σ `estimated_commission`); every amount object is
//! `{"amount": "<decimal major units>", "currency": "<ISO 4217>"}` and all of one
//! order's must share one currency; the first SKU `tag` (user-defined tracking
//! metadata) → `TRACKING_ID` attribution. Orders carry no region: the market is the
//! token's, so `country` is the pull's.
//!
//! The creator API's published response sample shows localized display amounts
//! (`"Rp9.900"`), while the seller and partner order searches' samples show plain
//! decimals (`"1000"`). A localized amount is ambiguous (`.` is IDR's thousands
//! separator but a decimal point elsewhere), so it is refused as a malformed order
//! naming the field, never guessed.

use super::decimal;
use super::http::{check_base_url, PlatformHttp};
use super::{invalid, seconds_ceil, unix_seconds as seconds, PlatformSecret};
use crate::affiliate::platform::{
    FetchError, FetchedPage, MalformedOrder, NormaliseError, PageRequest, PlatformAdapter,
    PAGE_TOKEN_CHARS_MAX,
};
use async_trait::async_trait;
use chrono::Utc;
use factledger_aggregates::affiliate::{CountryCode, Platform, PlatformOrderId, ReportedMinor};
use factledger_aggregates::affiliate_order::{Attribution, NormalisedOrder, OrderStatus};
use factledger_aggregates::money::{BoundedId, Currency};
use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The creator affiliate order search.
pub const ORDERS_PATH: &str = "/affiliate_creator/202410/orders/search";
/// The access token header.
pub const TOKEN_HEADER: &str = "x-tts-access-token";
/// Largest `page_size` TikTok accepts.
pub const PAGE_SIZE_MAX: u32 = 100;
/// Error codes TikTok documents as transient (rate limit, internal error, timeout).
pub const RETRYABLE_CODES: [i64; 3] = [36_009_002, 36_009_003, 36_009_007];

/// The documented signature over a request.
pub fn sign(app_secret: &str, path: &str, query: &[(&str, String)], body: &str) -> String {
    let mut params: Vec<&(&str, String)> = query
        .iter()
        .filter(|(k, _)| *k != "sign" && *k != "access_token")
        .collect();
    params.sort_by(|a, b| a.0.cmp(b.0));
    let mut input = String::with_capacity(256 + body.len());
    input.push_str(app_secret);
    input.push_str(path);
    for (k, v) in params {
        input.push_str(k);
        input.push_str(v);
    }
    input.push_str(body);
    input.push_str(app_secret);
    // Infallible: HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()).expect("any key length");
    mac.update(input.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// TikTok's affiliate order status in our matrix (R-ORD-3); `None` for a value the
/// documentation does not list.
pub fn status(s: &str) -> Option<OrderStatus> {
    Some(match s {
        // "The status of the order is undefined. It might be updated later."
        "UNSPECIFIED" | "ORDERED" => OrderStatus::Pending,
        "SETTLED" => OrderStatus::Completed,
        // Suspected fraud: the commission is held and may be released again.
        "FROZEN" => OrderStatus::Refunding,
        // Returned, refunded or cancelled by the buyer; or clawed back after settling.
        "REFUNDED" | "DEDUCTED" => OrderStatus::Refunded,
        _ => return None,
    })
}

/// The app's credentials: one app, one creator token per market.
#[derive(Debug, Clone)]
pub struct TikTokCredentials {
    pub app_key: String,
    pub app_secret: PlatformSecret,
    pub access_tokens: BTreeMap<CountryCode, PlatformSecret>,
}

/// Seconds since the epoch, for the `timestamp` parameter (tests pin it).
pub type SecondsClock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The TikTok Shop adapter.
#[derive(Clone)]
pub struct TikTokAdapter {
    http: PlatformHttp,
    url: String,
    credentials: TikTokCredentials,
    clock: SecondsClock,
}

impl std::fmt::Debug for TikTokAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TikTokAdapter")
            .field("url", &self.url)
            .field("app_key", &self.credentials.app_key)
            .finish_non_exhaustive()
    }
}

impl TikTokAdapter {
    /// `base_url`: `https://open-api.tiktokglobalshop.com` (or the simulator's
    /// `http://127.0.0.1:9100/tiktok`).
    pub fn new(
        base_url: &str,
        credentials: TikTokCredentials,
        timeout_ms: u64,
    ) -> Result<Self, FetchError> {
        let base = check_base_url(Platform::TikTok, base_url)?;
        Ok(TikTokAdapter {
            http: PlatformHttp::new(Platform::TikTok, timeout_ms)?,
            url: format!("{base}{ORDERS_PATH}"),
            credentials,
            clock: Arc::new(|| Utc::now().timestamp()),
        })
    }

    pub fn with_clock(mut self, clock: SecondsClock) -> Self {
        self.clock = clock;
        self
    }

    /// The signed query and the body of one page request.
    pub fn signed_request(
        &self,
        request: &PageRequest,
        now_s: i64,
    ) -> (Vec<(&'static str, String)>, String) {
        let body = json!({
            "create_time_ge": seconds_ceil(request.window.from.timestamp_millis()),
            "create_time_lt": seconds_ceil(request.window.to.timestamp_millis()),
        })
        .to_string();
        let mut query = vec![
            ("app_key", self.credentials.app_key.clone()),
            (
                "page_size",
                request.page_size.clamp(1, PAGE_SIZE_MAX).to_string(),
            ),
            ("timestamp", now_s.to_string()),
        ];
        if let Some(t) = &request.page_token {
            query.push(("page_token", t.clone()));
        }
        let sign = sign(
            self.credentials.app_secret.expose(),
            ORDERS_PATH,
            &query,
            &body,
        );
        query.push(("sign", sign));
        (query, body)
    }
}

fn envelope_error(v: &Value) -> Option<FetchError> {
    let code = v.get("code")?.as_i64()?;
    if code == 0 {
        return None;
    }
    Some(FetchError::Platform {
        platform: Platform::TikTok,
        code: code.to_string(),
        message: v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(200)
            .collect(),
        request_id: v
            .get("request_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        retryable: RETRYABLE_CODES.contains(&code),
    })
}

/// Read a whole answer body into a page (`country`: the token's market).
pub fn read_page(
    country: CountryCode,
    status_code: u16,
    body: &[u8],
) -> Result<FetchedPage, Result<FetchError, String>> {
    let v: Value = serde_json::from_slice(body).map_err(|e| Err(e.to_string()))?;
    if let Some(e) = envelope_error(&v) {
        return Err(Ok(e));
    }
    if !(200..300).contains(&status_code) {
        return Err(Err(format!("HTTP {status_code} with code 0")));
    }
    let data = v
        .get("data")
        .and_then(Value::as_object)
        .ok_or(Err("data: missing".to_owned()))?;
    let raw = match data.get("orders") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(Err("data.orders: not an array".into())),
    };
    if raw.len() > crate::affiliate::INGEST_PAGE_ORDERS_MAX {
        return Err(Err(format!("{} orders on one page", raw.len())));
    }
    let next = data
        .get("next_page_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    if next
        .as_ref()
        .is_some_and(|t| t.chars().count() > PAGE_TOKEN_CHARS_MAX)
    {
        return Err(Err(format!(
            "page token longer than {PAGE_TOKEN_CHARS_MAX} characters"
        )));
    }
    let mut page = FetchedPage {
        next_page_token: next,
        request_id: v
            .get("request_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        ..FetchedPage::default()
    };
    for r in &raw {
        match normalise(country, r) {
            Ok(o) => page.orders.push(o),
            Err(error) => page.malformed.push(MalformedOrder {
                platform_order_id: r
                    .get("id")
                    .and_then(Value::as_str)
                    .map(|s| s.chars().take(64).collect()),
                error,
            }),
        }
    }
    Ok(page)
}

#[async_trait]
impl PlatformAdapter for TikTokAdapter {
    fn platform(&self) -> Platform {
        Platform::TikTok
    }

    #[tracing::instrument(skip_all, fields(platform = "TIKTOK", country = %request.country))]
    async fn fetch_page(&self, request: &PageRequest) -> Result<FetchedPage, FetchError> {
        let token = self
            .credentials
            .access_tokens
            .get(&request.country)
            .ok_or_else(|| FetchError::Config {
                platform: Platform::TikTok,
                reason: format!(
                    "no access token for {} ({})",
                    request.country,
                    tiktok_token_var(request.country)
                ),
            })?;
        let (query, body) = self.signed_request(request, (self.clock)());
        let answer = self
            .http
            .send(
                self.http
                    .client
                    .post(&self.url)
                    .query(&query)
                    .header(TOKEN_HEADER, token.expose())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body),
            )
            .await?;
        read_page(request.country, answer.status, &answer.body).map_err(|e| match e {
            Ok(platform_error) => platform_error,
            Err(_) if !(200..300).contains(&answer.status) => self.http.status_error(&answer),
            Err(reason) => self.http.body_error(reason),
        })
    }
}

fn field<'a>(o: &'a Map<String, Value>, name: &'static str) -> Result<&'a Value, NormaliseError> {
    match o.get(name) {
        None | Some(Value::Null) => Err(NormaliseError::Missing { field: name }),
        Some(v) => Ok(v),
    }
}

/// Σ of one amount object over the SKUs, `(minor, currency)`; `None` when no SKU has it.
fn sum_amount(
    skus: &[Value],
    name: &'static str,
    currency: &mut Option<String>,
) -> Result<Option<i64>, NormaliseError> {
    let mut total: Option<i64> = None;
    for sku in skus {
        let Some(a) = sku.get(name).filter(|v| !v.is_null()) else {
            continue;
        };
        let text = a
            .get("amount")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(name, "amount must be a string"))?;
        let code = a
            .get("currency")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(name, "currency missing"))?;
        if currency.get_or_insert_with(|| code.to_owned()) != code {
            return Err(invalid(
                name,
                format!(
                    "currency {code} differs from the order's {}",
                    currency.as_deref().unwrap_or("?")
                ),
            ));
        }
        let minor =
            decimal::to_minor(text, decimal::exponent(code)).map_err(|e| invalid(name, e))?;
        total = Some(
            total
                .unwrap_or(0)
                .checked_add(minor)
                .ok_or_else(|| invalid(name, "sum overflows"))?,
        );
    }
    Ok(total)
}

/// Normalise one TikTok affiliate order of a pull for `country` (the token's market).
pub fn normalise(country: CountryCode, raw: &Value) -> Result<NormalisedOrder, NormaliseError> {
    let o = raw.as_object().ok_or(NormaliseError::NotAnObject)?;
    let id = field(o, "id")?
        .as_str()
        .ok_or_else(|| invalid("id", "must be a string"))?;
    let platform_order_id = PlatformOrderId::parse(id).map_err(|e| invalid("id", e.rule))?;
    let raw_status = field(o, "status")?
        .as_str()
        .ok_or_else(|| invalid("status", "must be a string"))?;
    let mut status =
        status(raw_status).ok_or_else(|| NormaliseError::UnknownStatus(raw_status.into()))?;
    let ordered_at = seconds(o, "create_time")?.ok_or(NormaliseError::Missing {
        field: "create_time",
    })?;
    let delivered_at = seconds(o, "delivery_time")?;
    let skus = field(o, "skus")?
        .as_array()
        .ok_or_else(|| invalid("skus", "must be an array"))?;
    if skus.is_empty() {
        return Err(invalid("skus", "no SKU"));
    }
    let mut currency = None;
    let gmv = match sum_amount(skus, "actual_commission_base", &mut currency)? {
        Some(v) => v,
        None => sum_amount(skus, "estimated_commission_base", &mut currency)?.ok_or(
            NormaliseError::Missing {
                field: "estimated_commission_base",
            },
        )?,
    };
    let commission = match sum_amount(skus, "actual_commission", &mut currency)? {
        Some(v) => v,
        None => sum_amount(skus, "estimated_commission", &mut currency)?.ok_or(
            NormaliseError::Missing {
                field: "estimated_commission",
            },
        )?,
    };
    let currency = Currency::parse(currency.as_deref().unwrap_or(""))
        .map_err(|e| invalid("currency", e.rule))?;
    // A settled order with some (not all) of its SKUs returned or refunded.
    let count = |name: &str| {
        skus.iter()
            .filter_map(|s| s.get(name).and_then(Value::as_i64))
            .sum::<i64>()
    };
    let back = count("returned_quantity") + count("refunded_quantity");
    if status == OrderStatus::Completed && back > 0 && back < count("quantity") {
        status = OrderStatus::PartiallyRefunded;
    }
    let tag = skus
        .iter()
        .filter_map(|s| s.get("tag").and_then(Value::as_str))
        .find(|t| !t.is_empty());
    let attribution = tag
        .map(|t| {
            BoundedId::parse(t)
                .map(Attribution::TrackingId)
                .map_err(|e| invalid("skus.tag", e.rule))
        })
        .transpose()?;
    Ok(NormalisedOrder {
        platform: Platform::TikTok,
        country,
        platform_order_id,
        status,
        currency,
        gmv_minor: ReportedMinor::parse(gmv)
            .map_err(|e| invalid("actual_commission_base", e.rule))?,
        platform_commission_minor: ReportedMinor::parse(commission)
            .map_err(|e| invalid("actual_commission", e.rule))?,
        ordered_at,
        platform_updated_at: delivered_at.map_or(ordered_at, |d| d.max(ordered_at)),
        attribution,
    })
}

/// `FACTLEDGER_PLATFORM_TIKTOK_ACCESS_TOKEN_<COUNTRY>`: each market is its own
/// creator account with its own token.
pub fn tiktok_token_var(country: CountryCode) -> String {
    format!(
        "FACTLEDGER_PLATFORM_{}_ACCESS_TOKEN_{country}",
        Platform::TikTok.as_str()
    )
}
