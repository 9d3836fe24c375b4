//! A simulator of the affiliate platforms' order APIs (TikTok, Shopee, Lazada,
//! Traveloka; SPEC R-ORD-1, R-ORD-8), for tests and demos: an HTTP server on loopback
//! that serves a deterministic, seeded set of orders per platform × country, paged by
//! an opaque token and ordered by update time, and a control API that scripts data and
//! faults: late-arriving updates, duplicates across pages, zero-amount sparse replays,
//! out-of-order statuses, malformed orders, transient 5xx and timeouts on the Nth
//! request. The order sync talks to it over a real socket, exactly as to a platform.
//!
//! # The order API (the platform's shape, not factledger's)
//!
//! `GET /{platform}/orders?country=ID&updated_from=MS&updated_to=MS&page_token=T&page_size=N`
//! (`platform` lower case: `tiktok`, `shopee`, `lazada`, `traveloka`; times are UTC epoch
//! milliseconds, the window is half-open `[updated_from, updated_to)`; `page_size` 1 to
//! [`PAGE_SIZE_MAX`], default [`PAGE_SIZE_DEFAULT`]) answers
//!
//! ```json
//! {"request_id": "sim-7",
//!  "orders": [{"order_id": "TTID42x000001", "region": "ID", "order_status": "COMPLETED",
//!              "currency": "IDR", "gmv_minor": 125000, "commission_minor": 6250,
//!              "create_time_ms": 1767225600000, "update_time_ms": 1767229200000,
//!              "sub_id": {"type": "TRACKING_ID", "value": "u-42"}}],
//!  "next_page_token": "7631…" }
//! ```
//!
//! `order_status` is one of `PENDING COMPLETED REFUND_PROCESSING PARTIAL_REFUND REFUNDED
//! CANCELLED`; `sub_id.type` one of `TRACKING_ID CLICK_ID REFERRAL_CODE` (optional);
//! amounts are integer minor units, 0 meaning "not sent" (a sparse replay);
//! `next_page_token` is `null` on the last page. A listing holds every order's current
//! version whose `update_time_ms` is in the window, plus scripted replays, ordered by
//! `(update_time_ms, order_id)`. Errors are `{"error": "..."}` with 400 (bad query),
//! 404 (unknown platform) or a scripted status.
//!
//! # The control API (tests and demos only)
//!
//! - `POST /control/orders` `{"platform", "orders": [order…]}`: set each order's current
//!   version (a new order, or an update — a *late-arriving* one when its
//!   `update_time_ms` lies in a window already pulled).
//! - `POST /control/replays` `{"platform", "orders": [order…]}`: serve these versions
//!   in addition to the current ones (duplicates, zero-amount sparse replays, an older
//!   PENDING after COMPLETED).
//! - `POST /control/raw` `{"platform", "country", "update_time_ms", "order": any}`: serve
//!   any JSON as an order (malformed platform data).
//! - `POST /control/seed` `{"platform", "country", "seed", "count", "from_ms", "to_ms"}`:
//!   add `count` deterministic orders updated in `[from_ms, to_ms)`.
//! - `POST /control/faults` `{"faults": [{"nth": 1, "kind": "status", "status": 503},
//!   {"nth": 2, "kind": "delay", "delay_ms": 5000}, {"nth": 3, "kind": "garbage"}]}`:
//!   the Nth order request from now (1 = the next) fails that way.
//! - `POST /control/settings` `{"duplicate_page_boundary": true}`: every page after the
//!   first repeats the previous page's last order (offset drift, as real APIs do).
//! - `GET /control/requests`: the order requests served so far; `POST /control/reset`.
#![forbid(unsafe_code)]

pub mod auth;
pub mod shopee;
pub mod tiktok;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Orders per page unless the caller asks otherwise.
pub const PAGE_SIZE_DEFAULT: usize = 50;
/// Largest page served (seed 003 §10.1: platform pages are at most 100 orders).
pub const PAGE_SIZE_MAX: usize = 100;
/// Orders one `seed` call generates at most (a demo data set, not a load test).
pub const SEED_COUNT_MAX: usize = 100_000;
/// Order requests remembered for `GET /control/requests` (older ones are dropped).
pub const REQUEST_LOG_MAX: usize = 10_000;
/// Longest scripted delay: long enough to outlast any client timeout, short enough
/// that a forgotten fault cannot hang a test run.
pub const DELAY_MS_MAX: u64 = 120_000;

/// The platforms served (lower case in paths and control bodies).
pub const PLATFORMS: [&str; 4] = ["tiktok", "shopee", "lazada", "traveloka"];

/// One order as the platform serves it (see the crate docs for the shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimOrder {
    pub order_id: String,
    /// The country (platform "region") the order belongs to.
    pub region: String,
    pub order_status: String,
    pub currency: String,
    pub gmv_minor: i64,
    pub commission_minor: i64,
    pub create_time_ms: i64,
    pub update_time_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_id: Option<SubId>,
}

/// Attribution data the platform carries (`TRACKING_ID`, `CLICK_ID`, `REFERRAL_CODE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubId {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
}

/// A scripted failure of one order request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Answer with this HTTP status (500, 502, 503, 429 …) and an error body.
    Status { status: u16 },
    /// Answer correctly, but only after this long (a client timeout).
    Delay { delay_ms: u64 },
    /// Answer 200 with a body that is not JSON.
    Garbage,
}

/// One order request as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLog {
    /// 1-based number of the order request (all platforms).
    pub n: u64,
    pub platform: String,
    pub country: Option<String>,
    pub updated_from: Option<i64>,
    pub updated_to: Option<i64>,
    pub page_token: Option<String>,
    pub page_size: Option<usize>,
    pub status: u16,
    /// Orders returned (0 on an error).
    pub returned: usize,
    pub fault: Option<Fault>,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("the simulator binds to loopback only, not {0}")]
    NotLoopback(SocketAddr),
    #[error("unknown platform {0:?} (one of tiktok, shopee, lazada, traveloka)")]
    UnknownPlatform(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A served version: its sort key and its JSON body.
#[derive(Debug, Clone)]
struct Record {
    update_ms: i64,
    /// Creation time: the window basis of TikTok's and Shopee's order searches.
    create_ms: i64,
    order_id: String,
    /// Breaks ties between versions of one order at one time (replays).
    seq: u64,
    country: String,
    body: Value,
}

impl Record {
    fn time(&self, by_create_time: bool) -> i64 {
        if by_create_time {
            self.create_ms
        } else {
            self.update_ms
        }
    }

    fn key(&self, by_create_time: bool) -> (i64, &str, u64) {
        (self.time(by_create_time), self.order_id.as_str(), self.seq)
    }
}

#[derive(Debug, Default)]
struct PlatformData {
    /// Current version of each order, by `(country, order_id)`.
    current: BTreeMap<(String, String), Record>,
    /// Replays and raw records, served besides the current versions.
    extras: Vec<Record>,
}

#[derive(Debug, Default)]
struct SimState {
    platforms: BTreeMap<String, PlatformData>,
    requests: Vec<RequestLog>,
    /// Faults by absolute order-request number.
    faults: BTreeMap<u64, Fault>,
    request_count: u64,
    duplicate_page_boundary: bool,
    next_seq: u64,
    /// The platforms' credentials the documented front ends check.
    credentials: auth::Credentials,
    /// Requests refused for their credentials or signature (reason per request).
    refusals: Vec<String>,
}

/// The simulator's data and faults; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Sim {
    state: Arc<Mutex<SimState>>,
}

fn platform_key(p: &str) -> Result<String, SimError> {
    let k = p.to_ascii_lowercase();
    if PLATFORMS.contains(&k.as_str()) {
        Ok(k)
    } else {
        Err(SimError::UnknownPlatform(p.to_owned()))
    }
}

/// A page token: the sort key of the last order served, hex-encoded so callers treat
/// it as opaque.
fn encode_token(update_ms: i64, order_id: &str, seq: u64) -> String {
    hex::encode(format!("v1|{update_ms}|{seq}|{order_id}"))
}

fn decode_token(t: &str) -> Result<(i64, String, u64), SimError> {
    let bad = || SimError::BadRequest(format!("page_token {t:?} is not a token we issued"));
    let text = String::from_utf8(hex::decode(t).map_err(|_| bad())?).map_err(|_| bad())?;
    let mut parts = text.splitn(4, '|');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("v1"), Some(ms), Some(seq), Some(id)) => Ok((
            ms.parse().map_err(|_| bad())?,
            id.to_owned(),
            seq.parse().map_err(|_| bad())?,
        )),
        _ => Err(bad()),
    }
}

/// A small deterministic generator (SplitMix64): the same seed gives the same orders
/// on every machine, without depending on a crate's algorithm staying the same.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is irrelevant for test data.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Minor-unit digits (the platforms send major units): ISO 4217's, except IDR in
/// whole rupiah as the platforms write it (and as factledger counts it).
pub fn exponent(currency: &str) -> u32 {
    match currency {
        "IDR" => 0,
        "BIF" | "CLP" | "DJF" | "GNF" | "ISK" | "JPY" | "KMF" | "KRW" | "PYG" | "RWF" | "UGX"
        | "VND" | "VUV" | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "IQD" | "JOD" | "KWD" | "LYD" | "OMR" | "TND" => 3,
        _ => 2,
    }
}

/// Minor units as the platforms' decimal string in major units: `125050` MYR → `"1250.50"`.
pub fn major(minor: i64, currency: &str) -> String {
    let places = exponent(currency) as usize;
    let digits = format!("{:0>width$}", minor.unsigned_abs(), width = places + 1);
    let sign = if minor < 0 { "-" } else { "" };
    if places == 0 {
        return format!("{sign}{digits}");
    }
    let (whole, fraction) = digits.split_at(digits.len() - places);
    format!("{sign}{whole}.{fraction}")
}

/// The currency a country's orders are in.
pub fn currency_of(country: &str) -> &'static str {
    match country {
        "ID" => "IDR",
        "MY" => "MYR",
        "TH" => "THB",
        "VN" => "VND",
        "PH" => "PHP",
        "SG" => "SGD",
        _ => "USD",
    }
}

fn abbreviation(platform: &str) -> &'static str {
    match platform {
        "tiktok" => "TT",
        "shopee" => "SP",
        "lazada" => "LZ",
        _ => "TV",
    }
}

/// `count` deterministic orders of one platform × country, updated in `[from_ms,
/// to_ms)`, ids `<TT|SP|LZ|TV><COUNTRY><seed>x<n>`.
pub fn generate(
    platform: &str,
    country: &str,
    seed: u64,
    count: usize,
    from_ms: i64,
    to_ms: i64,
) -> Vec<SimOrder> {
    let mut rng = SplitMix(seed ^ 0x5EED);
    let span = u64::try_from(to_ms.saturating_sub(from_ms))
        .unwrap_or(0)
        .max(1);
    // Mostly pending or completed, like a live feed; the odd refund and cancellation.
    const STATUSES: [&str; 8] = [
        "PENDING",
        "PENDING",
        "PENDING",
        "COMPLETED",
        "COMPLETED",
        "REFUND_PROCESSING",
        "REFUNDED",
        "CANCELLED",
    ];
    (0..count)
        .map(|i| {
            let update = from_ms + i64::try_from(rng.below(span)).unwrap_or(0);
            // Placed up to three days before its last update.
            let created = update - i64::try_from(rng.below(3 * 86_400_000)).unwrap_or(0);
            let gmv = 10_000 + i64::try_from(rng.below(5_000_000)).unwrap_or(0);
            let status = STATUSES[usize::try_from(rng.below(8)).unwrap_or(0)];
            SimOrder {
                order_id: format!("{}{country}{seed}x{i:06}", abbreviation(platform)),
                region: country.to_owned(),
                order_status: status.to_owned(),
                currency: currency_of(country).to_owned(),
                gmv_minor: gmv,
                // 2 % to 10 % commission, integer arithmetic only.
                commission_minor: gmv * (2 + i64::try_from(rng.below(9)).unwrap_or(0)) / 100,
                create_time_ms: created,
                update_time_ms: update,
                sub_id: (rng.below(4) != 0).then(|| SubId {
                    kind: "TRACKING_ID".into(),
                    value: format!("u-{}", rng.below(1_000)),
                }),
            }
        })
        .collect()
}

/// A parsed order query.
#[derive(Debug, Clone, Deserialize)]
pub struct OrdersQuery {
    pub country: Option<String>,
    pub updated_from: Option<i64>,
    pub updated_to: Option<i64>,
    pub page_token: Option<String>,
    pub page_size: Option<usize>,
    /// Window on creation time instead of update time (TikTok's and Shopee's
    /// documented searches); set by their front ends, never by the generic route.
    #[serde(skip)]
    pub by_create_time: bool,
}

/// One page answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrdersPage {
    pub request_id: String,
    pub orders: Vec<Value>,
    pub next_page_token: Option<String>,
}

impl Sim {
    pub fn new() -> Sim {
        Sim::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves plain data behind: keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(state: &mut SimState, order: &SimOrder) -> Result<Record, SimError> {
        let body = serde_json::to_value(order).map_err(|e| SimError::BadRequest(e.to_string()))?;
        state.next_seq += 1;
        Ok(Record {
            update_ms: order.update_time_ms,
            create_ms: order.create_time_ms,
            order_id: order.order_id.clone(),
            seq: state.next_seq,
            country: order.region.clone(),
            body,
        })
    }

    /// Set each order's current version (new orders and updates, late or not).
    pub fn upsert(&self, platform: &str, orders: &[SimOrder]) -> Result<(), SimError> {
        let key = platform_key(platform)?;
        let mut s = self.lock();
        for o in orders {
            let r = Self::record(&mut s, o)?;
            s.platforms
                .entry(key.clone())
                .or_default()
                .current
                .insert((o.region.clone(), o.order_id.clone()), r);
        }
        Ok(())
    }

    /// Serve these versions besides the current ones (duplicates, sparse replays,
    /// stale statuses).
    pub fn replay(&self, platform: &str, orders: &[SimOrder]) -> Result<(), SimError> {
        let key = platform_key(platform)?;
        let mut s = self.lock();
        for o in orders {
            let r = Self::record(&mut s, o)?;
            s.platforms.entry(key.clone()).or_default().extras.push(r);
        }
        Ok(())
    }

    /// Serve any JSON as an order of `country`, listed at `update_time_ms`.
    pub fn raw(
        &self,
        platform: &str,
        country: &str,
        update_time_ms: i64,
        order: Value,
    ) -> Result<(), SimError> {
        let key = platform_key(platform)?;
        let mut s = self.lock();
        s.next_seq += 1;
        let r = Record {
            update_ms: update_time_ms,
            create_ms: update_time_ms,
            order_id: order
                .get("order_id")
                .map(|v| v.to_string())
                .unwrap_or_default(),
            seq: s.next_seq,
            country: country.to_owned(),
            body: order,
        };
        s.platforms.entry(key).or_default().extras.push(r);
        Ok(())
    }

    /// Add `count` deterministic orders (see [`generate`]); returns them.
    pub fn seed(
        &self,
        platform: &str,
        country: &str,
        seed: u64,
        count: usize,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<SimOrder>, SimError> {
        if count > SEED_COUNT_MAX || to_ms <= from_ms {
            return Err(SimError::BadRequest(format!(
                "seed: count at most {SEED_COUNT_MAX} and from_ms < to_ms"
            )));
        }
        let key = platform_key(platform)?;
        let orders = generate(&key, country, seed, count, from_ms, to_ms);
        self.upsert(&key, &orders)?;
        Ok(orders)
    }

    /// Fail the Nth order request from now (1 = the next) with `fault`.
    pub fn fault(&self, nth: u64, fault: Fault) {
        let mut s = self.lock();
        let at = s.request_count + nth.max(1);
        s.faults.insert(at, fault);
    }

    pub fn set_duplicate_page_boundary(&self, on: bool) {
        self.lock().duplicate_page_boundary = on;
    }

    /// The current version of one order, if any.
    pub fn current(&self, platform: &str, country: &str, order_id: &str) -> Option<SimOrder> {
        let key = platform_key(platform).ok()?;
        let s = self.lock();
        let r = s
            .platforms
            .get(&key)?
            .current
            .get(&(country.to_owned(), order_id.to_owned()))?;
        serde_json::from_value(r.body.clone()).ok()
    }

    /// The order requests served so far (the last [`REQUEST_LOG_MAX`]).
    pub fn requests(&self) -> Vec<RequestLog> {
        self.lock().requests.clone()
    }

    /// Forget all data, faults, settings and the request log (credentials stay).
    pub fn reset(&self) {
        let mut s = self.lock();
        let credentials = std::mem::take(&mut s.credentials);
        *s = SimState {
            credentials,
            ..SimState::default()
        };
    }

    /// The credentials the documented front ends check (default: [`auth::Credentials::test`]).
    pub fn credentials(&self) -> auth::Credentials {
        self.lock().credentials.clone()
    }

    pub fn set_credentials(&self, credentials: auth::Credentials) {
        self.lock().credentials = credentials;
    }

    /// Why each refused request was refused (bad signature, unknown token, …).
    pub fn refusals(&self) -> Vec<String> {
        self.lock().refusals.clone()
    }

    fn refuse(&self, reason: String) {
        let mut s = self.lock();
        if s.refusals.len() >= REQUEST_LOG_MAX {
            s.refusals.remove(0);
        }
        s.refusals.push(reason);
    }

    /// Answer one order request: the fault scripted for it (if any) and the page, or
    /// the error to answer with. Logs the request.
    pub fn orders(
        &self,
        platform: &str,
        q: &OrdersQuery,
    ) -> (Option<Fault>, Result<OrdersPage, (u16, String)>) {
        let mut s = self.lock();
        s.request_count += 1;
        let n = s.request_count;
        let fault = s.faults.remove(&n);
        let outcome = match &fault {
            Some(Fault::Status { status }) => {
                Err((*status, format!("scripted failure of request {n}")))
            }
            _ => Self::page(&s, platform, q, n).map_err(|e| match e {
                SimError::UnknownPlatform(_) => (404, e.to_string()),
                other => (400, other.to_string()),
            }),
        };
        if s.requests.len() >= REQUEST_LOG_MAX {
            s.requests.remove(0);
        }
        s.requests.push(RequestLog {
            n,
            platform: platform.to_owned(),
            country: q.country.clone(),
            updated_from: q.updated_from,
            updated_to: q.updated_to,
            page_token: q.page_token.clone(),
            page_size: q.page_size,
            status: match &outcome {
                Ok(_) => 200,
                Err((status, _)) => *status,
            },
            returned: outcome.as_ref().map(|p| p.orders.len()).unwrap_or(0),
            fault: fault.clone(),
        });
        (fault, outcome)
    }

    fn page(s: &SimState, platform: &str, q: &OrdersQuery, n: u64) -> Result<OrdersPage, SimError> {
        let key = platform_key(platform)?;
        let missing = |f: &str| SimError::BadRequest(format!("{f} is required"));
        let country = q.country.as_deref().ok_or_else(|| missing("country"))?;
        let from = q.updated_from.ok_or_else(|| missing("updated_from"))?;
        let to = q.updated_to.ok_or_else(|| missing("updated_to"))?;
        let size = q.page_size.unwrap_or(PAGE_SIZE_DEFAULT);
        if !(1..=PAGE_SIZE_MAX).contains(&size) {
            return Err(SimError::BadRequest(format!(
                "page_size must be 1 to {PAGE_SIZE_MAX}"
            )));
        }
        let after = q.page_token.as_deref().map(decode_token).transpose()?;
        let empty = PlatformData::default();
        let data = s.platforms.get(&key).unwrap_or(&empty);
        let mut listed: Vec<&Record> = data
            .current
            .values()
            .chain(data.extras.iter())
            .filter(|r| {
                let t = r.time(q.by_create_time);
                r.country == country && t >= from && t < to
            })
            .filter(|r| match &after {
                Some((ms, id, seq)) => r.key(q.by_create_time) > (*ms, id.as_str(), *seq),
                None => true,
            })
            .collect();
        listed.sort_by(|a, b| a.key(q.by_create_time).cmp(&b.key(q.by_create_time)));
        let page: Vec<&Record> = listed.iter().take(size).copied().collect();
        let more = listed.len() > page.len();
        let next = if more {
            // Offset drift: the next page starts with this page's last order again.
            let anchor = if s.duplicate_page_boundary && page.len() >= 2 {
                page[page.len() - 2]
            } else {
                page[page.len() - 1]
            };
            Some(encode_token(
                anchor.time(q.by_create_time),
                &anchor.order_id,
                anchor.seq,
            ))
        } else {
            None
        };
        Ok(OrdersPage {
            request_id: format!("sim-{n}"),
            orders: page.iter().map(|r| r.body.clone()).collect(),
            next_page_token: next,
        })
    }
}

/// The documented order API of a platform that has one (its path under
/// `/{platform}`), `None` for the generic ones.
pub fn documented_api(platform: &str) -> Option<&'static str> {
    match platform.to_ascii_lowercase().as_str() {
        "tiktok" => Some(tiktok::ORDERS_PATH),
        "shopee" => Some(shopee::GRAPHQL_PATH),
        _ => None,
    }
}

/// Sleep out a scripted delay (bounded by [`DELAY_MS_MAX`]).
async fn delay(fault: &Option<Fault>) {
    if let Some(Fault::Delay { delay_ms }) = fault {
        tokio::time::sleep(std::time::Duration::from_millis(
            (*delay_ms).min(DELAY_MS_MAX),
        ))
        .await;
    }
}

fn error(status: u16, message: String) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(json!({ "error": message }))).into_response()
}

async fn orders(
    State(sim): State<Sim>,
    Path(platform): Path<String>,
    Query(q): Query<OrdersQuery>,
) -> Response {
    if let Some(path) = documented_api(&platform) {
        return error(
            404,
            format!("{platform} speaks its documented API at /{platform}{path}, not /orders"),
        );
    }
    let (fault, outcome) = sim.orders(&platform, &q);
    if let Some(Fault::Delay { delay_ms }) = fault {
        tokio::time::sleep(std::time::Duration::from_millis(delay_ms.min(DELAY_MS_MAX))).await;
    }
    match (fault, outcome) {
        (Some(Fault::Garbage), Ok(_)) => {
            (StatusCode::OK, "<html>upstream gateway says hello</html>").into_response()
        }
        (_, Ok(page)) => Json(page).into_response(),
        (_, Err((status, message))) => error(status, message),
    }
}

#[derive(Deserialize)]
struct OrdersBody {
    platform: String,
    orders: Vec<SimOrder>,
}

#[derive(Deserialize)]
struct RawBody {
    platform: String,
    country: String,
    update_time_ms: i64,
    order: Value,
}

#[derive(Deserialize)]
struct SeedBody {
    platform: String,
    country: String,
    seed: u64,
    count: usize,
    from_ms: i64,
    to_ms: i64,
}

#[derive(Deserialize)]
struct NthFault {
    nth: u64,
    #[serde(flatten)]
    fault: Fault,
}

#[derive(Deserialize)]
struct FaultsBody {
    faults: Vec<NthFault>,
}

#[derive(Deserialize)]
struct SettingsBody {
    duplicate_page_boundary: Option<bool>,
}

fn done(r: Result<(), SimError>) -> Response {
    match r {
        Ok(()) => Json(json!({"ok": true})).into_response(),
        Err(e @ SimError::UnknownPlatform(_)) => error(404, e.to_string()),
        Err(e) => error(400, e.to_string()),
    }
}

/// The simulator's routes (order API and control API).
pub fn router(sim: Sim) -> Router {
    Router::new()
        .route("/{platform}/orders", get(orders))
        .route(
            &format!("/tiktok{}", tiktok::ORDERS_PATH),
            post(tiktok::orders_search),
        )
        .route(
            &format!("/shopee{}", shopee::GRAPHQL_PATH),
            post(shopee::graphql),
        )
        .route(
            "/control/orders",
            post(
                |State(sim): State<Sim>, Json(b): Json<OrdersBody>| async move {
                    done(sim.upsert(&b.platform, &b.orders))
                },
            ),
        )
        .route(
            "/control/replays",
            post(
                |State(sim): State<Sim>, Json(b): Json<OrdersBody>| async move {
                    done(sim.replay(&b.platform, &b.orders))
                },
            ),
        )
        .route(
            "/control/raw",
            post(
                |State(sim): State<Sim>, Json(b): Json<RawBody>| async move {
                    done(sim.raw(&b.platform, &b.country, b.update_time_ms, b.order))
                },
            ),
        )
        .route(
            "/control/seed",
            post(
                |State(sim): State<Sim>, Json(b): Json<SeedBody>| async move {
                    done(
                        sim.seed(&b.platform, &b.country, b.seed, b.count, b.from_ms, b.to_ms)
                            .map(|_| ()),
                    )
                },
            ),
        )
        .route(
            "/control/faults",
            post(
                |State(sim): State<Sim>, Json(b): Json<FaultsBody>| async move {
                    for f in b.faults {
                        sim.fault(f.nth, f.fault);
                    }
                    done(Ok(()))
                },
            ),
        )
        .route(
            "/control/settings",
            post(
                |State(sim): State<Sim>, Json(b): Json<SettingsBody>| async move {
                    if let Some(on) = b.duplicate_page_boundary {
                        sim.set_duplicate_page_boundary(on);
                    }
                    done(Ok(()))
                },
            ),
        )
        .route(
            "/control/requests",
            get(|State(sim): State<Sim>| async move { Json(sim.requests()) }),
        )
        .route(
            "/control/reset",
            post(|State(sim): State<Sim>| async move {
                sim.reset();
                done(Ok(()))
            }),
        )
        .with_state(sim)
}

/// A running simulator; dropping it stops the server.
pub struct Running {
    pub addr: SocketAddr,
    pub sim: Sim,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The base URL of one platform's API, e.g. `http://127.0.0.1:9100/tiktok`.
    pub fn base_url(&self, platform: &str) -> String {
        format!("http://{}/{}", self.addr, platform.to_ascii_lowercase())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bind `addr` (loopback only; port 0 picks a free port) and serve `sim` in the
/// background.
pub async fn spawn(addr: SocketAddr, sim: Sim) -> Result<Running, SimError> {
    if !addr.ip().is_loopback() {
        return Err(SimError::NotLoopback(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let app = router(sim.clone());
    let task = tokio::spawn(async move {
        // An accept error ends the server; tests then see connection errors.
        let _ = axum::serve(listener, app).await;
    });
    Ok(Running { addr, sim, task })
}

#[cfg(test)]
mod tests;
