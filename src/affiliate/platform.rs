//! Platform adapters (SPEC R-ORD-1, seed 003 §6.1): fetch one page of a platform's
//! orders for an update-time window, outside any transaction, and normalise each order
//! into a [`NormalisedOrder`]. The order sync (`sync.rs`) drives them page by page.
//!
//! Normalisation is per order: a malformed order (a missing field, an unknown status,
//! a negative amount, another country's order) is reported as a [`MalformedOrder`] and
//! skipped; it never stops its page and never reaches the ingest unit. A page that is
//! unreadable as a whole (not JSON, too large, an HTTP error, a timeout) is a
//! [`FetchError`]: the sync round fails and the job retries that page.
//!
//! `platforms::generic::HttpPlatformAdapter` is the generic adapter: `GET {base_url}/orders?country=
//! &updated_from=&updated_to=&page_token=&page_size=`, times in epoch milliseconds, the
//! window half-open, the order shape [`normalise`] reads. The platforms with a
//! documented affiliate API have their own adapters in `platforms/` (TikTok Shop,
//! Shopee), each with its signing, paging, encodings and status vocabulary.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use factledger_aggregates::affiliate::{CountryCode, Platform, PlatformOrderId, ReportedMinor};
use factledger_aggregates::affiliate_order::{Attribution, NormalisedOrder, OrderStatus};
use factledger_aggregates::money::{BoundedId, Currency};
use serde_json::Value;

/// Orders asked for per page (seed 003 §10.1: platform pages are at most 100 orders).
pub const PAGE_SIZE_DEFAULT: u32 = 100;
/// A whole page request, body included: long enough for a slow platform page, short
/// enough that a hung connection fails the round well inside the job's lease.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 20_000;
/// Connecting: a platform that does not accept a connection in this long is down.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Largest page body read: 100 orders are tens of kilobytes; anything near this is not
/// an order page, and reading it unbounded would let a broken upstream exhaust memory.
pub const RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Longest page token kept: it is stored in the sync checkpoint (`VARCHAR(1024)`).
pub const PAGE_TOKEN_CHARS_MAX: usize = 1_024;

/// A half-open update-time window `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    pub fn is_empty(&self) -> bool {
        self.to <= self.from
    }
}

/// One page to fetch.
#[derive(Debug, Clone)]
pub struct PageRequest {
    pub country: CountryCode,
    pub window: Window,
    /// `None` for the window's first page, else the token the previous page returned.
    pub page_token: Option<String>,
    pub page_size: u32,
}

/// One page, normalised.
#[derive(Debug, Clone, Default)]
pub struct FetchedPage {
    /// The well-formed orders, in the platform's order.
    pub orders: Vec<NormalisedOrder>,
    /// The orders that could not be normalised (reported, skipped).
    pub malformed: Vec<MalformedOrder>,
    /// `None` on the window's last page.
    pub next_page_token: Option<String>,
    /// The platform's id of the request, for support tickets and logs.
    pub request_id: Option<String>,
}

/// An order the adapter refused, with what it could read of its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedOrder {
    pub platform_order_id: Option<String>,
    pub error: NormaliseError,
}

/// Why one platform order could not be normalised; names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormaliseError {
    #[error("the order is not a JSON object")]
    NotAnObject,
    #[error("{field}: missing")]
    Missing { field: &'static str },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("order_status: unknown platform status {0:?}")]
    UnknownStatus(String),
    #[error("region: the order belongs to {got}, this pull is for {expected}")]
    WrongCountry { expected: String, got: String },
}

/// A page could not be fetched or read at all; the round fails and retries it.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("platform {platform}: no complete answer within {timeout_ms} ms")]
    Timeout { platform: Platform, timeout_ms: u64 },
    #[error("platform {platform}: HTTP {status}: {body}")]
    Status {
        platform: Platform,
        status: u16,
        body: String,
    },
    #[error("platform {platform}: {message}")]
    Transport { platform: Platform, message: String },
    #[error("platform {platform}: unreadable page: {reason}")]
    Body { platform: Platform, reason: String },
    #[error("platform {platform}: adapter configuration: {reason}")]
    Config { platform: Platform, reason: String },
    /// The platform answered with its own documented error envelope (TikTok's
    /// `{code, message, request_id}` with `code != 0`, Shopee's GraphQL `errors`).
    #[error("platform {platform}: error {code}: {message} (request {request_id:?})")]
    Platform {
        platform: Platform,
        code: String,
        message: String,
        request_id: Option<String>,
        /// The platform documents the code as transient (rate limit, internal error).
        retryable: bool,
    },
}

impl FetchError {
    /// Whether retrying the same page can help. Refused credentials, a bad signature
    /// or a misconfigured adapter need an operator: the sync job is exhausted and the
    /// next cron firing revives it.
    pub fn is_retryable(&self) -> bool {
        match self {
            FetchError::Timeout { .. } | FetchError::Transport { .. } | FetchError::Body { .. } => {
                true
            }
            FetchError::Status { status, .. } => *status == 429 || *status >= 500,
            FetchError::Config { .. } => false,
            FetchError::Platform { retryable, .. } => *retryable,
        }
    }
}

/// Fetches pages of one platform's orders.
#[async_trait]
pub trait PlatformAdapter: Send + Sync + 'static {
    fn platform(&self) -> Platform;
    /// One page of the orders of `request.country` updated in `request.window`.
    async fn fetch_page(&self, request: &PageRequest) -> Result<FetchedPage, FetchError>;
}

/// A platform's status in our matrix (R-ORD-3).
fn status(s: &str) -> Option<OrderStatus> {
    Some(match s {
        "PENDING" => OrderStatus::Pending,
        "COMPLETED" => OrderStatus::Completed,
        "REFUND_PROCESSING" => OrderStatus::Refunding,
        "PARTIAL_REFUND" => OrderStatus::PartiallyRefunded,
        "REFUNDED" => OrderStatus::Refunded,
        "CANCELLED" => OrderStatus::Cancelled,
        _ => return None,
    })
}

fn field<'a>(
    o: &'a serde_json::Map<String, Value>,
    name: &'static str,
) -> Result<&'a Value, NormaliseError> {
    match o.get(name) {
        None | Some(Value::Null) => Err(NormaliseError::Missing { field: name }),
        Some(v) => Ok(v),
    }
}

fn text<'a>(
    o: &'a serde_json::Map<String, Value>,
    name: &'static str,
) -> Result<&'a str, NormaliseError> {
    field(o, name)?.as_str().ok_or(NormaliseError::Invalid {
        field: name,
        reason: "must be a string".into(),
    })
}

/// An integer field; a float or a numeric string is refused (no floats on money paths,
/// R-INV-4: `12.5` minor units is a platform bug, not something to round).
fn integer(o: &serde_json::Map<String, Value>, name: &'static str) -> Result<i64, NormaliseError> {
    field(o, name)?.as_i64().ok_or(NormaliseError::Invalid {
        field: name,
        reason: "must be an integer".into(),
    })
}

fn time(
    o: &serde_json::Map<String, Value>,
    name: &'static str,
) -> Result<DateTime<Utc>, NormaliseError> {
    let ms = integer(o, name)?;
    DateTime::from_timestamp_millis(ms)
        .filter(|t| t.timestamp() > 0)
        .ok_or(NormaliseError::Invalid {
            field: name,
            reason: format!("{ms} is not a plausible epoch-millisecond time"),
        })
}

fn invalid(
    name: &'static str,
) -> impl Fn(factledger_aggregates::money::ParseError) -> NormaliseError {
    move |e| NormaliseError::Invalid {
        field: name,
        reason: e.rule,
    }
}

fn attribution(v: Option<&Value>) -> Result<Option<Attribution>, NormaliseError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let o = v.as_object().ok_or(NormaliseError::Invalid {
        field: "sub_id",
        reason: "must be an object".into(),
    })?;
    let value = BoundedId::parse(text(o, "value")?).map_err(invalid("sub_id.value"))?;
    Ok(Some(match text(o, "type")? {
        "TRACKING_ID" => Attribution::TrackingId(value),
        "CLICK_ID" => Attribution::ClickId(value),
        "REFERRAL_CODE" => Attribution::ReferralCode(value),
        other => {
            return Err(NormaliseError::Invalid {
                field: "sub_id.type",
                reason: format!("unknown attribution type {other:?}"),
            })
        }
    }))
}

/// Normalise one platform order of a pull for `country`. Amounts of 0 are kept as 0:
/// "not sent" in a sparse replay (R-ORD-6), decided by the ingest unit, not here.
pub fn normalise(
    platform: Platform,
    country: CountryCode,
    raw: &Value,
) -> Result<NormalisedOrder, NormaliseError> {
    let o = raw.as_object().ok_or(NormaliseError::NotAnObject)?;
    let platform_order_id =
        PlatformOrderId::parse(text(o, "order_id")?).map_err(invalid("order_id"))?;
    let region = CountryCode::parse(text(o, "region")?).map_err(invalid("region"))?;
    if region != country {
        return Err(NormaliseError::WrongCountry {
            expected: country.to_string(),
            got: region.to_string(),
        });
    }
    let raw_status = text(o, "order_status")?;
    let status =
        status(raw_status).ok_or_else(|| NormaliseError::UnknownStatus(raw_status.into()))?;
    Ok(NormalisedOrder {
        platform,
        country,
        platform_order_id,
        status,
        currency: Currency::parse(text(o, "currency")?).map_err(invalid("currency"))?,
        gmv_minor: ReportedMinor::parse(integer(o, "gmv_minor")?).map_err(invalid("gmv_minor"))?,
        platform_commission_minor: ReportedMinor::parse(integer(o, "commission_minor")?)
            .map_err(invalid("commission_minor"))?,
        ordered_at: time(o, "create_time_ms")?,
        platform_updated_at: time(o, "update_time_ms")?,
        attribution: attribution(o.get("sub_id"))?,
    })
}

/// Normalise a page's orders, keeping the good ones and reporting the rest.
pub fn normalise_page(
    platform: Platform,
    country: CountryCode,
    raw: &[Value],
) -> (Vec<NormalisedOrder>, Vec<MalformedOrder>) {
    let mut orders = Vec::with_capacity(raw.len());
    let mut malformed = Vec::new();
    for r in raw {
        match normalise(platform, country, r) {
            Ok(o) => orders.push(o),
            Err(error) => malformed.push(MalformedOrder {
                platform_order_id: r
                    .get("order_id")
                    .and_then(Value::as_str)
                    .map(|s| s.chars().take(64).collect()),
                error,
            }),
        }
    }
    (orders, malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id() -> CountryCode {
        CountryCode::parse("ID").unwrap()
    }

    fn good() -> Value {
        json!({"order_id": "TT-1", "region": "ID", "order_status": "COMPLETED",
               "currency": "IDR", "gmv_minor": 100000, "commission_minor": 5000,
               "create_time_ms": 1767225600000i64, "update_time_ms": 1767229200000i64,
               "sub_id": {"type": "CLICK_ID", "value": "c-9"}})
    }

    fn with(key: &str, v: Value) -> Value {
        let mut o = good();
        o[key] = v;
        o
    }

    #[test]
    fn a_platform_order_becomes_a_normalised_order() {
        let o = normalise(Platform::TikTok, id(), &good()).unwrap();
        assert_eq!(o.platform_order_id.as_str(), "TT-1");
        assert_eq!(o.status, OrderStatus::Completed);
        assert_eq!(o.gmv_minor.get(), 100_000);
        assert_eq!(o.platform_commission_minor.get(), 5_000);
        assert_eq!(o.platform_updated_at.timestamp_millis(), 1_767_229_200_000);
        assert_eq!(
            o.attribution,
            Some(Attribution::ClickId(BoundedId::parse("c-9").unwrap()))
        );
    }

    #[test]
    fn a_sparse_replay_keeps_its_zero_amounts_for_the_ingest_unit_to_judge() {
        let o = normalise(
            Platform::Shopee,
            id(),
            &with("gmv_minor", json!(0)).tap(|v| v["commission_minor"] = json!(0)),
        )
        .unwrap();
        assert!(o.gmv_minor.is_sparse() && o.platform_commission_minor.is_sparse());
    }

    #[test]
    fn malformed_orders_name_the_field_at_fault_and_are_skipped() {
        let cases = [
            (json!("nope"), "the order is not a JSON object"),
            (with("order_id", json!("a:b")), "order_id: may contain"),
            (
                with("region", json!("MY")),
                "region: the order belongs to MY",
            ),
            (
                with("order_status", json!("SHIPPED")),
                "unknown platform status",
            ),
            (
                with("gmv_minor", json!(-1)),
                "gmv_minor: must be a non-negative",
            ),
            (
                with("gmv_minor", json!(12.5)),
                "gmv_minor: must be an integer",
            ),
            (
                with("commission_minor", Value::Null),
                "commission_minor: missing",
            ),
            (
                with("update_time_ms", json!("yesterday")),
                "update_time_ms: must be",
            ),
            (
                with("sub_id", json!({"type": "COOKIE", "value": "x"})),
                "sub_id.type",
            ),
            (with("currency", json!("rp")), "currency: must be"),
        ];
        for (raw, expected) in &cases {
            let e = normalise(Platform::TikTok, id(), raw)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{raw}: {e}");
        }
        let mut page: Vec<Value> = cases.iter().map(|(r, _)| r.clone()).collect();
        page.insert(3, good());
        let (orders, malformed) = normalise_page(Platform::TikTok, id(), &page);
        assert_eq!(orders.len(), 1);
        assert_eq!(malformed.len(), cases.len());
        assert_eq!(malformed[1].platform_order_id.as_deref(), Some("a:b"));
    }

    trait Tap: Sized {
        fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
    }
    impl Tap for Value {
        fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
            f(&mut self);
            self
        }
    }
}
