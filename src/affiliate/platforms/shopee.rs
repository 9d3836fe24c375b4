//! Shopee: the Shopee Affiliate Open API's GraphQL `conversionReport` — the affiliate
//! order source Shopee documents for affiliates (the Open Platform v2 API with its
//! `partner_id + path + timestamp + access_token + shop_id` sign is the *sellers'*
//! API: it lists a shop's own orders, not the conversions an affiliate earns on).
//! Each market is its own affiliate account and host (`open-api.affiliate.shopee.co.id`
//! …), so credentials and the base URL are per country.
//!
//! **Request.** `POST {base}/graphql`, `content-type: application/json`, body
//! `{"query": "{conversionReport(purchaseTimeStart: S, purchaseTimeEnd: E, limit: N,
//! scrollId: \"…\") {nodes {…} pageInfo {limit hasNextPage scrollId}}}"}` with Unix
//! seconds, both ends inclusive (so the half-open millisecond window `[from, to)` is
//! `[⌈from⌉, ⌈to⌉ − 1]` in seconds), `limit` at most 500, and the previous page's
//! `scrollId` from the second page on. Header `Authorization: SHA256 Credential=<AppId>,
//! Timestamp=<Unix s>, Signature=<lower-hex SHA-256 of AppId + Timestamp + body +
//! Secret>`; Shopee refuses a timestamp more than 10 minutes off.
//!
//! **Answer.** HTTP 200 with `{"data": {"conversionReport": {"nodes": [...],
//! "pageInfo": {"hasNextPage": b, "scrollId": "…"}}}}`, or with `{"errors": [{"message",
//! "path", "extensions": {"code", "message"}}]}`: 10000 (system error) and 10030 (rate
//! limit) are retried; 10010 (query syntax), 10020 (bad signature, expired or invalid
//! timestamp or credential), 11000–11002 (business and parameter errors) and 10031–10035
//! (access denied, account frozen) are not. A `scrollId` is valid for 30 seconds, so a
//! page checkpoint older than that is refused by Shopee; the round then fails and
//! the retry starts again from it — see the report of issue 33 for what is left.
//!
//! **Conversion → orders → [`NormalisedOrder`].** A conversion node holds one or more
//! orders; each is normalised on its own. `orders[].orderId` → order id; `orderStatus`
//! → [`status`]; node `purchaseTime` → `ordered_at`; `platform_updated_at` = the
//! latest of `purchaseTime` and the items' `completeTime`; GMV = Σ `itemPrice` × `qty`;
//! platform commission = Σ `itemTotalCommission`; amounts are decimal strings in the
//! market currency (the answer names none: [`market_currency`]); node `utmContent`
//! (the sub ids we put on the link) → `TRACKING_ID` attribution. A zero amount is a
//! sparse replay (R-ORD-6), kept as 0 for the ingest unit to judge.

use super::decimal;
use super::http::{check_base_url, PlatformHttp};
use super::tiktok::SecondsClock;
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
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The GraphQL endpoint under the market's base URL.
pub const GRAPHQL_PATH: &str = "/graphql";
/// Largest `limit` Shopee accepts.
pub const LIMIT_MAX: u32 = 500;
/// Error codes Shopee documents as transient (system error, rate limit).
pub const RETRYABLE_CODES: [i64; 2] = [10_000, 10_030];

/// The `Authorization` header value for a body signed at `timestamp`.
pub fn authorization(app_id: &str, secret: &str, timestamp: i64, payload: &str) -> String {
    let mut h = Sha256::new();
    h.update(app_id.as_bytes());
    h.update(timestamp.to_string().as_bytes());
    h.update(payload.as_bytes());
    h.update(secret.as_bytes());
    let signature = hex::encode(h.finalize());
    format!("SHA256 Credential={app_id}, Timestamp={timestamp}, Signature={signature}")
}

/// Shopee's conversion order status in our matrix; `None` for an undocumented value.
pub fn status(s: &str) -> Option<OrderStatus> {
    Some(match s {
        "UNPAID" | "PENDING" => OrderStatus::Pending,
        "COMPLETED" => OrderStatus::Completed,
        "CANCELLED" => OrderStatus::Cancelled,
        _ => return None,
    })
}

/// The currency of a Shopee market's amounts.
pub fn market_currency(country: &str) -> Option<&'static str> {
    Some(match country {
        "ID" => "IDR",
        "MY" => "MYR",
        "TH" => "THB",
        "VN" => "VND",
        "PH" => "PHP",
        "SG" => "SGD",
        "TW" => "TWD",
        "BR" => "BRL",
        "MX" => "MXN",
        "CO" => "COP",
        "CL" => "CLP",
        _ => return None,
    })
}

/// One market's affiliate account.
#[derive(Debug, Clone)]
pub struct ShopeeAccount {
    /// `https://open-api.affiliate.shopee.co.id` (or the simulator's
    /// `http://127.0.0.1:9100/shopee/id`).
    pub base_url: String,
    pub app_id: String,
    pub secret: PlatformSecret,
}

/// The Shopee adapter: one affiliate account per market.
#[derive(Clone)]
pub struct ShopeeAdapter {
    http: PlatformHttp,
    accounts: BTreeMap<CountryCode, ShopeeAccount>,
    clock: SecondsClock,
}

impl std::fmt::Debug for ShopeeAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShopeeAdapter")
            .field("markets", &self.accounts.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The GraphQL document of one page.
pub fn query(window_ms: (i64, i64), limit: u32, scroll_id: Option<&str>) -> String {
    let start = seconds_ceil(window_ms.0);
    let end = seconds_ceil(window_ms.1) - 1;
    let scroll = scroll_id
        .map(|s| format!(", scrollId: {}", Value::String(s.to_owned())))
        .unwrap_or_default();
    format!(
        "{{conversionReport(purchaseTimeStart: {start}, purchaseTimeEnd: {end}, limit: {}{scroll}) \
         {{nodes {{purchaseTime clickTime conversionId totalCommission utmContent \
         orders {{orderId orderStatus items {{itemId itemPrice qty itemTotalCommission completeTime}}}}}} \
         pageInfo {{limit hasNextPage scrollId}}}}}}",
        limit.clamp(1, LIMIT_MAX)
    )
}

impl ShopeeAdapter {
    pub fn new(
        accounts: BTreeMap<CountryCode, ShopeeAccount>,
        timeout_ms: u64,
    ) -> Result<Self, FetchError> {
        let accounts = accounts
            .into_iter()
            .map(|(c, mut a)| {
                a.base_url = check_base_url(Platform::Shopee, &a.base_url)?;
                if market_currency(c.as_str()).is_none() {
                    return Err(FetchError::Config {
                        platform: Platform::Shopee,
                        reason: format!("{c} is not a Shopee affiliate market"),
                    });
                }
                Ok((c, a))
            })
            .collect::<Result<_, _>>()?;
        Ok(ShopeeAdapter {
            http: PlatformHttp::new(Platform::Shopee, timeout_ms)?,
            accounts,
            clock: Arc::new(|| Utc::now().timestamp()),
        })
    }

    pub fn with_clock(mut self, clock: SecondsClock) -> Self {
        self.clock = clock;
        self
    }
}

fn errors_envelope(v: &Value) -> Option<FetchError> {
    let first = v.get("errors")?.as_array()?.first()?;
    let code = first.pointer("/extensions/code").and_then(Value::as_i64);
    let message = first
        .pointer("/extensions/message")
        .or_else(|| first.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    Some(FetchError::Platform {
        platform: Platform::Shopee,
        code: code.map_or_else(|| "?".into(), |c| c.to_string()),
        message: message.chars().take(200).collect(),
        request_id: None,
        retryable: code.is_some_and(|c| RETRYABLE_CODES.contains(&c)),
    })
}

/// Read a whole answer body into a page of `country`'s orders.
pub fn read_page(
    country: CountryCode,
    body: &[u8],
) -> Result<FetchedPage, Result<FetchError, String>> {
    let v: Value = serde_json::from_slice(body).map_err(|e| Err(e.to_string()))?;
    if let Some(e) = errors_envelope(&v) {
        return Err(Ok(e));
    }
    let report = v
        .pointer("/data/conversionReport")
        .and_then(Value::as_object)
        .ok_or(Err("data.conversionReport: missing".to_owned()))?;
    let nodes = match report.get("nodes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(Err("nodes: not an array".into())),
    };
    let more = report
        .get("pageInfo")
        .and_then(|p| p.get("hasNextPage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let scroll = report
        .get("pageInfo")
        .and_then(|p| p.get("scrollId"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let next_page_token = match (more, scroll) {
        (false, _) => None,
        (true, Some(s)) if s.chars().count() <= PAGE_TOKEN_CHARS_MAX => Some(s.to_owned()),
        (true, Some(_)) => {
            return Err(Err(format!(
                "scrollId longer than {PAGE_TOKEN_CHARS_MAX} characters"
            )))
        }
        (true, None) => return Err(Err("hasNextPage without a scrollId".into())),
    };
    let mut page = FetchedPage {
        next_page_token,
        ..FetchedPage::default()
    };
    for node in &nodes {
        let orders = node.get("orders").and_then(Value::as_array);
        let Some(orders) = orders.filter(|o| !o.is_empty()) else {
            page.malformed.push(MalformedOrder {
                platform_order_id: None,
                error: NormaliseError::Missing { field: "orders" },
            });
            continue;
        };
        for order in orders {
            match normalise(country, node, order) {
                Ok(o) => page.orders.push(o),
                Err(error) => page.malformed.push(MalformedOrder {
                    platform_order_id: order
                        .get("orderId")
                        .and_then(Value::as_str)
                        .map(|s| s.chars().take(64).collect()),
                    error,
                }),
            }
        }
    }
    if page.orders.len() + page.malformed.len() > crate::affiliate::INGEST_PAGE_ORDERS_MAX {
        return Err(Err("more orders on one page than one ingest takes".into()));
    }
    Ok(page)
}

#[async_trait]
impl PlatformAdapter for ShopeeAdapter {
    fn platform(&self) -> Platform {
        Platform::Shopee
    }

    #[tracing::instrument(skip_all, fields(platform = "SHOPEE", country = %request.country))]
    async fn fetch_page(&self, request: &PageRequest) -> Result<FetchedPage, FetchError> {
        let account = self
            .accounts
            .get(&request.country)
            .ok_or_else(|| FetchError::Config {
                platform: Platform::Shopee,
                reason: format!("no affiliate account for {}", request.country),
            })?;
        let window = (
            request.window.from.timestamp_millis(),
            request.window.to.timestamp_millis(),
        );
        let payload = json!({
            "query": query(window, request.page_size, request.page_token.as_deref())
        })
        .to_string();
        let auth = authorization(
            &account.app_id,
            account.secret.expose(),
            (self.clock)(),
            &payload,
        );
        let answer = self
            .http
            .send(
                self.http
                    .client
                    .post(format!("{}{GRAPHQL_PATH}", account.base_url))
                    .header(reqwest::header::AUTHORIZATION, auth)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(payload),
            )
            .await?;
        read_page(request.country, &answer.body).map_err(|e| match e {
            Ok(platform_error) => platform_error,
            Err(_) if !(200..300).contains(&answer.status) => self.http.status_error(&answer),
            Err(reason) => self.http.body_error(reason),
        })
    }
}

fn amount(
    o: &Map<String, Value>,
    name: &'static str,
    exponent: u32,
) -> Result<i64, NormaliseError> {
    let text = match o.get(name) {
        None | Some(Value::Null) => return Err(NormaliseError::Missing { field: name }),
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(invalid(name, "must be a decimal string")),
    };
    decimal::to_minor(text, exponent).map_err(|e| invalid(name, e))
}

/// Normalise one order of a conversion node, for `country`'s account.
pub fn normalise(
    country: CountryCode,
    node: &Value,
    order: &Value,
) -> Result<NormalisedOrder, NormaliseError> {
    let n = node.as_object().ok_or(NormaliseError::NotAnObject)?;
    let o = order.as_object().ok_or(NormaliseError::NotAnObject)?;
    let code = market_currency(country.as_str())
        .ok_or_else(|| invalid("currency", format!("{country} is not a Shopee market")))?;
    let exponent = decimal::exponent(code);
    let id = o
        .get("orderId")
        .and_then(Value::as_str)
        .ok_or(NormaliseError::Missing { field: "orderId" })?;
    let platform_order_id = PlatformOrderId::parse(id).map_err(|e| invalid("orderId", e.rule))?;
    let raw_status =
        o.get("orderStatus")
            .and_then(Value::as_str)
            .ok_or(NormaliseError::Missing {
                field: "orderStatus",
            })?;
    let status =
        status(raw_status).ok_or_else(|| NormaliseError::UnknownStatus(raw_status.into()))?;
    let ordered_at = seconds(n, "purchaseTime")?.ok_or(NormaliseError::Missing {
        field: "purchaseTime",
    })?;
    let items = o
        .get("items")
        .and_then(Value::as_array)
        .filter(|i| !i.is_empty())
        .ok_or(NormaliseError::Missing { field: "items" })?;
    let (mut gmv, mut commission, mut updated) = (0i64, 0i64, ordered_at);
    for item in items {
        let i = item
            .as_object()
            .ok_or_else(|| invalid("items", "must be objects"))?;
        let qty = i
            .get("qty")
            .and_then(Value::as_i64)
            .filter(|q| *q >= 0)
            .ok_or_else(|| invalid("qty", "must be a non-negative integer"))?;
        let line = amount(i, "itemPrice", exponent)?
            .checked_mul(qty)
            .ok_or_else(|| invalid("itemPrice", "overflows"))?;
        gmv = gmv
            .checked_add(line)
            .ok_or_else(|| invalid("itemPrice", "overflows"))?;
        commission = commission
            .checked_add(amount(i, "itemTotalCommission", exponent)?)
            .ok_or_else(|| invalid("itemTotalCommission", "overflows"))?;
        if let Some(done) = seconds(i, "completeTime")? {
            updated = updated.max(done);
        }
    }
    let attribution = n
        .get("utmContent")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| {
            BoundedId::parse(s)
                .map(Attribution::TrackingId)
                .map_err(|e| invalid("utmContent", e.rule))
        })
        .transpose()?;
    Ok(NormalisedOrder {
        platform: Platform::Shopee,
        country,
        platform_order_id,
        status,
        currency: Currency::parse(code).map_err(|e| invalid("currency", e.rule))?,
        gmv_minor: ReportedMinor::parse(gmv).map_err(|e| invalid("itemPrice", e.rule))?,
        platform_commission_minor: ReportedMinor::parse(commission)
            .map_err(|e| invalid("itemTotalCommission", e.rule))?,
        ordered_at,
        platform_updated_at: updated,
        attribution,
    })
}
