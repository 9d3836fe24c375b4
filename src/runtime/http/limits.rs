//! HTTP limits: what one client, one connection or one request may cost the service.
//!
//! Each limit answers a finding of issue 14 (F8: slow or idle connections held memory
//! for good; a command waited 11.8 s on a locked database):
//!
//! - **Header-read timeout** ([`HttpLimits::header_read_timeout_ms`]): hyper's own
//!   HTTP/1 timer. It runs from the moment a connection waits for a request head (the
//!   first one, and each next one on a keep-alive connection) until the head is
//!   complete; a client that trickles its head (slowloris) is disconnected when it
//!   runs out. No response is sent.
//! - **Idle timeout** ([`HttpLimits::idle_timeout_ms`]): our own watchdog in
//!   [`super::conn`]. A connection with no request in flight that moved no byte for
//!   this long is closed. It is what closes a silent keep-alive connection early;
//!   since hyper's header timer also runs while a connection waits, the longest a
//!   silent connection lives is the smaller of the two.
//! - **Request timeout** ([`HttpLimits::request_timeout_ms`]): [`request_timeout`], a
//!   middleware around every handler, answers `503` problem+json `REQUEST_TIMEOUT`
//!   when the handler has not answered in time (a command stuck behind a database
//!   lock, a pool with no free connection). tower-http's `TimeoutLayer` answers with
//!   an empty body a later layer could not tell from a handler's own 503; this
//!   middleware is the same `tokio::time::timeout` with our problem body. A command
//!   cut off this way may still commit: the body says to retry with the same
//!   `Idempotency-Key`, which resolves it to exactly one outcome.
//! - **Connection cap** ([`HttpLimits::connections_max`]): a semaphore in the accept
//!   loop. A connection over the cap is answered `503` problem+json
//!   `TOO_MANY_CONNECTIONS` with `Retry-After` and closed; it is not served, only its
//!   request head is read first (at most 1 s, 16 KiB). At most
//!   [`REJECTIONS_IN_FLIGHT_MAX`] such answers are in progress at once; beyond that a
//!   connection is closed unanswered.
//! - **Per-key rate limit** ([`HttpLimits::rate_limit_per_key_rps`] and `_burst`): a
//!   token bucket per API key id ([`RateLimiter`]), checked once the key is
//!   authenticated; over it the request is answered `429` problem+json `RATE_LIMITED`
//!   with `Retry-After`. Unauthenticated routes (`/health`, `/openapi.json`, provider
//!   callbacks) are not rate limited here: they do no work per caller worth a bucket
//!   keyed by something the caller chooses, and the connection cap bounds them.
//!   The map of buckets holds at most [`RATE_BUCKETS_MAX`] keys; when full, buckets
//!   that have refilled (idle keys) are dropped first, then the least recently used.
//!   A console sign-in takes a token of its key's bucket too.
//! - **Failed authentication per client address** ([`AuthFailures`], issue 32 item 5):
//!   every refused key (API `401`, console sign-in) takes a token of a bucket per
//!   client IP ([`HttpLimits::auth_failures_per_ip_burst`], refilled at
//!   [`HttpLimits::auth_failures_per_ip_per_min`]); while an address's bucket is
//!   empty its requests are answered `429` `AUTH_THROTTLED` with `Retry-After`
//!   before any key is looked up. Every failure is counted in
//!   `factledger_auth_failures_total{surface}`; past
//!   [`HttpLimits::auth_failures_alert_per_min`] failures in a minute (all
//!   addresses) an `auth.failures` alert is raised, once per minute.

use super::Problem;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default: a request head must arrive within 10 s of the connection waiting for it.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// Default: a connection silent this long with no request in flight is closed
/// (Apache's `KeepAliveTimeout` is 5 s too: enough to reuse a connection for the next
/// call of a burst, short enough that idle sockets do not pile up).
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Default: a handler has 30 s to answer. The SQLite busy timeout and the pool
/// acquire timeout are shorter, so a locked database normally surfaces as the
/// store's own error first; this bounds everything else (a MariaDB row lock waits
/// 50 s by default) and a full-log `POST /v1/audit/verify` of a large ledger, which is
/// what the CLI's `verify` is for.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default: open connections at once. ~60 KiB each when idle (issue 14 measured 190
/// MB for 3,000), and well under the usual 1,024 file descriptors with the database
/// pool beside them.
pub const CONNECTIONS_MAX_DEFAULT: usize = 512;
/// Default: sustained requests per second per API key. Far above what one client of
/// a ledger needs, and above what the test suite's tightest polling loops send
/// (two requests every 10 ms).
pub const RATE_LIMIT_PER_KEY_RPS_DEFAULT: u32 = 1_000;
/// Default: requests a key may send at once after being quiet.
pub const RATE_LIMIT_PER_KEY_BURST_DEFAULT: u32 = 2_000;
/// Buckets kept at most (one per API key seen recently); bounds the limiter's memory.
pub const RATE_BUCKETS_MAX: usize = 10_000;
/// Default: failed authentications a client address may make at once before it is
/// throttled. A person mistyping a key a few times never meets it; a script guessing
/// keys does at once.
pub const AUTH_FAILURES_PER_IP_BURST_DEFAULT: u32 = 20;
/// Default: failed authentications per minute an address earns back.
pub const AUTH_FAILURES_PER_IP_PER_MIN_DEFAULT: u32 = 10;
/// Default: failed authentications in a minute (all addresses) that raise an alert:
/// far above mistakes, well below a guessing run's rate.
pub const AUTH_FAILURES_ALERT_PER_MIN_DEFAULT: u32 = 100;
/// Addresses tracked at most by the failure throttle (bounds its memory).
pub const AUTH_FAILURE_ADDRESSES_MAX: usize = 10_000;
/// Over-cap connections answered at once; beyond this they are closed unanswered,
/// so a flood cannot turn the rejection path itself into unbounded tasks.
pub const REJECTIONS_IN_FLIGHT_MAX: usize = 64;

/// Every HTTP limit of a listener, with its `serve` flag and environment variable.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct HttpLimits {
    /// Close a connection whose request head has not fully arrived this long (ms)
    /// after it started waiting for one.
    #[arg(long, env = "FACTLEDGER_HEADER_READ_TIMEOUT_MS", hide_env_values = true,
          default_value_t = HEADER_READ_TIMEOUT_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_ms: u64,
    /// Close a connection that moved no byte this long (ms) with no request in flight.
    #[arg(long, env = "FACTLEDGER_IDLE_TIMEOUT_MS", hide_env_values = true,
          default_value_t = IDLE_TIMEOUT_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Answer 503 REQUEST_TIMEOUT when a handler takes longer than this (ms).
    #[arg(long, env = "FACTLEDGER_REQUEST_TIMEOUT_MS", hide_env_values = true,
          default_value_t = REQUEST_TIMEOUT_MS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_ms: u64,
    /// Open connections at most; more are answered 503 TOO_MANY_CONNECTIONS and closed.
    #[arg(long, env = "FACTLEDGER_CONNECTIONS_MAX", hide_env_values = true,
          default_value_t = CONNECTIONS_MAX_DEFAULT,
          value_parser = connections_max)]
    pub connections_max: usize,
    /// Sustained requests per second per API key; more are answered 429 RATE_LIMITED.
    #[arg(long, env = "FACTLEDGER_RATE_LIMIT_PER_KEY_RPS", hide_env_values = true,
          default_value_t = RATE_LIMIT_PER_KEY_RPS_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit_per_key_rps: u32,
    /// Requests per API key allowed at once after a quiet spell (the bucket size).
    #[arg(long, env = "FACTLEDGER_RATE_LIMIT_PER_KEY_BURST", hide_env_values = true,
          default_value_t = RATE_LIMIT_PER_KEY_BURST_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit_per_key_burst: u32,
    /// Failed authentications a client address may make at once before its requests
    /// are answered 429 AUTH_THROTTLED.
    #[arg(long, env = "FACTLEDGER_AUTH_FAILURES_PER_IP_BURST", hide_env_values = true,
          default_value_t = AUTH_FAILURES_PER_IP_BURST_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub auth_failures_per_ip_burst: u32,
    /// Failed authentications per minute a throttled address earns back.
    #[arg(long, env = "FACTLEDGER_AUTH_FAILURES_PER_IP_PER_MIN", hide_env_values = true,
          default_value_t = AUTH_FAILURES_PER_IP_PER_MIN_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub auth_failures_per_ip_per_min: u32,
    /// Failed authentications in a minute (all addresses) that raise an alert.
    #[arg(long, env = "FACTLEDGER_AUTH_FAILURES_ALERT_PER_MIN", hide_env_values = true,
          default_value_t = AUTH_FAILURES_ALERT_PER_MIN_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub auth_failures_alert_per_min: u32,
}

fn connections_max(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            rate_limit_per_key_rps: RATE_LIMIT_PER_KEY_RPS_DEFAULT,
            rate_limit_per_key_burst: RATE_LIMIT_PER_KEY_BURST_DEFAULT,
            auth_failures_per_ip_burst: AUTH_FAILURES_PER_IP_BURST_DEFAULT,
            auth_failures_per_ip_per_min: AUTH_FAILURES_PER_IP_PER_MIN_DEFAULT,
            auth_failures_alert_per_min: AUTH_FAILURES_ALERT_PER_MIN_DEFAULT,
        }
    }
}

impl HttpLimits {
    /// Refuse zero limits (the flags do; this covers limits built in code).
    pub fn check(&self) -> anyhow::Result<()> {
        let zero = [
            ("header_read_timeout_ms", self.header_read_timeout_ms == 0),
            ("idle_timeout_ms", self.idle_timeout_ms == 0),
            ("request_timeout_ms", self.request_timeout_ms == 0),
            ("connections_max", self.connections_max == 0),
            ("rate_limit_per_key_rps", self.rate_limit_per_key_rps == 0),
            (
                "rate_limit_per_key_burst",
                self.rate_limit_per_key_burst == 0,
            ),
            (
                "auth_failures_per_ip_burst",
                self.auth_failures_per_ip_burst == 0,
            ),
            (
                "auth_failures_per_ip_per_min",
                self.auth_failures_per_ip_per_min == 0,
            ),
            (
                "auth_failures_alert_per_min",
                self.auth_failures_alert_per_min == 0,
            ),
        ];
        match zero.iter().find(|(_, z)| *z) {
            Some((name, _)) => anyhow::bail!("HTTP limit {name} must be at least 1"),
            None => Ok(()),
        }
    }
}

/// The limits of a running service and the state they keep (in `AppState`).
pub struct Limits {
    pub http: HttpLimits,
    pub rate: RateLimiter,
    pub auth_failures: AuthFailures,
}

impl Limits {
    pub fn new(http: HttpLimits) -> Self {
        let rate = RateLimiter::new(
            http.rate_limit_per_key_rps,
            http.rate_limit_per_key_burst,
            RATE_BUCKETS_MAX,
        );
        let auth_failures = AuthFailures::new(&http);
        Self {
            http,
            rate,
            auth_failures,
        }
    }
}

/// The client address of a request (the connection's peer), when it came over a
/// connection; `None` for a request made in-process (the console calling the API).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

/// Failed authentications: a bucket per client address, and the minute's count for
/// the alert (see the module doc).
pub struct AuthFailures {
    per_ip: RateLimiter,
    alert_per_min: u32,
    /// Start of the current minute, failures in it, whether it alerted.
    minute: Mutex<(Instant, u32, bool)>,
}

/// What [`AuthFailures::failed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureCount {
    /// Failures in the current minute, all addresses.
    pub this_minute: u32,
    /// Whether this failure crossed the alert threshold (once a minute).
    pub alert: bool,
}

impl AuthFailures {
    pub fn new(http: &HttpLimits) -> Self {
        Self {
            per_ip: RateLimiter::per_minute(
                http.auth_failures_per_ip_per_min,
                http.auth_failures_per_ip_burst,
                AUTH_FAILURE_ADDRESSES_MAX,
            ),
            alert_per_min: http.auth_failures_alert_per_min,
            minute: Mutex::new((Instant::now(), 0, false)),
        }
    }

    /// `Err(seconds)` while `addr` is throttled (nothing is taken).
    pub fn throttled(&self, addr: Option<std::net::IpAddr>) -> Result<(), u64> {
        match addr {
            Some(ip) => self.per_ip.peek(&ip.to_string()),
            None => Ok(()),
        }
    }

    /// Count one failed authentication from `addr` on `surface` (`api`, `console`).
    pub fn failed(&self, addr: Option<std::net::IpAddr>, surface: &'static str) -> FailureCount {
        metrics::counter!("factledger_auth_failures_total", "surface" => surface).increment(1);
        if let Some(ip) = addr {
            let _ = self.per_ip.check(&ip.to_string());
        }
        let mut minute = self.minute.lock().unwrap_or_else(|p| p.into_inner());
        if minute.0.elapsed() >= Duration::from_secs(60) {
            *minute = (Instant::now(), 0, false);
        }
        minute.1 = minute.1.saturating_add(1);
        let alert = !minute.2 && minute.1 >= self.alert_per_min;
        minute.2 |= alert;
        FailureCount {
            this_minute: minute.1,
            alert,
        }
    }
}

/// The answer to an address throttled for failed authentications.
pub fn auth_throttled(retry_after_s: u64) -> Problem {
    Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "AUTH_THROTTLED",
        format!("too many failed authentications from this address; retry in {retry_after_s} s"),
    )
    .retry_after(retry_after_s)
}

/// One key's bucket, in thousandths of a token so refill needs no floats.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens_milli: u64,
    refilled_at: Instant,
}

/// A token bucket per key: `rps` tokens a second up to `burst`, one per request.
pub struct RateLimiter {
    /// Thousandths of a token added per millisecond (= tokens per second).
    rps: u64,
    burst_milli: u64,
    buckets_max: usize,
    buckets: Mutex<HashMap<String, Bucket>>,
    /// What one request costs in the bucket's units: 1,000 (per-second rates) or
    /// 60,000 (per-minute rates: [`RateLimiter::per_minute`]).
    token_milli: u64,
}

impl RateLimiter {
    pub fn new(rps: u32, burst: u32, buckets_max: usize) -> Self {
        Self {
            rps: u64::from(rps.max(1)),
            burst_milli: u64::from(burst.max(1)) * 1_000,
            buckets_max: buckets_max.max(1),
            buckets: Mutex::new(HashMap::new()),
            token_milli: 1_000,
        }
    }

    /// `per_min` tokens a minute up to `burst`: a token is 60,000 units instead of
    /// 1,000, so the same refill of `per_min` units a millisecond is `per_min` tokens
    /// a minute, with no fractions.
    pub fn per_minute(per_min: u32, burst: u32, buckets_max: usize) -> Self {
        Self {
            rps: u64::from(per_min.max(1)),
            burst_milli: u64::from(burst.max(1)) * 60_000,
            buckets_max: buckets_max.max(1),
            buckets: Mutex::new(HashMap::new()),
            token_milli: 60_000,
        }
    }

    /// Take a token for `key`; `Err(seconds)` says when the next one is there.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        self.take_at(key, Instant::now(), true)
    }

    /// Whether `key` has a token now, without taking it.
    pub fn peek(&self, key: &str) -> Result<(), u64> {
        self.take_at(key, Instant::now(), false)
    }

    #[cfg(test)]
    fn check_at(&self, key: &str, now: Instant) -> Result<(), u64> {
        self.take_at(key, now, true)
    }

    fn take_at(&self, key: &str, now: Instant, take: bool) -> Result<(), u64> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !take && !buckets.contains_key(key) {
            return Ok(());
        }
        if !buckets.contains_key(key) && buckets.len() >= self.buckets_max {
            self.evict(&mut buckets, now);
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens_milli: self.burst_milli,
            refilled_at: now,
        });
        self.refill(bucket, now);
        let token = self.token_milli;
        if bucket.tokens_milli >= token {
            if take {
                bucket.tokens_milli -= token;
            }
            return Ok(());
        }
        // rps units arrive each millisecond.
        let missing_ms = (token - bucket.tokens_milli).div_ceil(self.rps);
        Err(missing_ms.div_ceil(1_000).max(1))
    }

    fn refill(&self, bucket: &mut Bucket, now: Instant) {
        let elapsed_ms = now
            .saturating_duration_since(bucket.refilled_at)
            .as_millis();
        let elapsed_ms = u64::try_from(elapsed_ms).unwrap_or(u64::MAX);
        if elapsed_ms == 0 {
            return;
        }
        let added = elapsed_ms.saturating_mul(self.rps);
        bucket.tokens_milli = bucket
            .tokens_milli
            .saturating_add(added)
            .min(self.burst_milli);
        bucket.refilled_at = now;
    }

    /// Make room for one bucket: drop every bucket that would be full by now (its
    /// key has been quiet long enough that forgetting it changes nothing), and if
    /// none would, the one refilled longest ago.
    fn evict(&self, buckets: &mut HashMap<String, Bucket>, now: Instant) {
        buckets.retain(|_, b| {
            let mut b = *b;
            self.refill(&mut b, now);
            b.tokens_milli < self.burst_milli
        });
        if buckets.len() < self.buckets_max {
            return;
        }
        let oldest = buckets
            .iter()
            .min_by_key(|(_, b)| b.refilled_at)
            .map(|(k, _)| k.clone());
        if let Some(k) = oldest {
            buckets.remove(&k);
        }
    }

    /// Buckets held now (tests, metrics).
    pub fn len(&self) -> usize {
        self.buckets.lock().map(|b| b.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The answer to a key over its rate.
pub fn rate_limited(retry_after_s: u64) -> Problem {
    Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "RATE_LIMITED",
        format!("this API key sent more requests than its rate allows; retry in {retry_after_s} s"),
    )
    .retry_after(retry_after_s)
}

/// Middleware: answer 503 `REQUEST_TIMEOUT` when the handler takes too long.
pub async fn request_timeout(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(limit_ms = limit.as_millis() as u64, "request timed out");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "REQUEST_TIMEOUT",
                format!(
                    "the request did not finish within {} ms; a command may still take \
                     effect: retry with the same Idempotency-Key to learn its outcome",
                    limit.as_millis()
                ),
            )
            .retry_after(1)
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_refuses_until_it_refills() {
        let limiter = RateLimiter::new(2, 3, 10);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check_at("k", t0), Ok(()));
        }
        assert_eq!(limiter.check_at("k", t0), Err(1));
        // Half a second at 2 rps is one token.
        assert_eq!(
            limiter.check_at("k", t0 + Duration::from_millis(500)),
            Ok(())
        );
        assert!(limiter
            .check_at("k", t0 + Duration::from_millis(500))
            .is_err());
        // Another key has its own bucket.
        assert_eq!(limiter.check_at("other", t0), Ok(()));
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let limiter = RateLimiter::new(1, 1, 10);
        let t0 = Instant::now();
        assert_eq!(limiter.check_at("k", t0), Ok(()));
        assert_eq!(limiter.check_at("k", t0), Err(1));
        let slow = RateLimiter::new(1, 1, 10);
        assert_eq!(slow.check_at("k", t0), Ok(()));
        assert_eq!(slow.check_at("k", t0 + Duration::from_millis(1)), Err(1));
    }

    #[test]
    fn the_bucket_map_never_holds_more_than_its_cap() {
        let limiter = RateLimiter::new(1, 5, 3);
        let t0 = Instant::now();
        for i in 0..1_000 {
            // Every key spends a token, so none is full and eviction must fall back
            // to the least recently refilled one.
            let _ = limiter.check_at(&format!("k{i}"), t0 + Duration::from_micros(i));
            assert!(limiter.len() <= 3, "{} buckets after {i}", limiter.len());
        }
    }

    #[test]
    fn full_buckets_are_evicted_before_busy_ones() {
        let limiter = RateLimiter::new(1_000, 2, 2);
        let t0 = Instant::now();
        let _ = limiter.check_at("quiet", t0);
        let _ = limiter.check_at("busy", t0 + Duration::from_secs(5));
        let _ = limiter.check_at("busy", t0 + Duration::from_secs(5));
        let _ = limiter.check_at("busy", t0 + Duration::from_secs(5));
        // "quiet" has long refilled; "busy" is empty and must survive.
        let _ = limiter.check_at("new", t0 + Duration::from_secs(5));
        assert_eq!(
            limiter.check_at("busy", t0 + Duration::from_secs(5)),
            Err(1)
        );
    }

    #[test]
    fn a_per_minute_bucket_refills_a_token_a_minute_over_its_rate() {
        let limiter = RateLimiter::per_minute(2, 3, 10);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take_at("ip", t0, true), Ok(()));
        }
        // Empty: a peek says so and takes nothing; the next token is 30 s away.
        assert_eq!(limiter.take_at("ip", t0, false), Err(30));
        assert_eq!(
            limiter.take_at("ip", t0 + Duration::from_secs(29), false),
            Err(1)
        );
        assert_eq!(
            limiter.take_at("ip", t0 + Duration::from_secs(30), false),
            Ok(())
        );
        // A peek at an address never seen holds no bucket.
        assert_eq!(limiter.take_at("new", t0, false), Ok(()));
        assert_eq!(limiter.len(), 1);
    }

    #[test]
    fn zero_limits_are_refused_naming_the_limit() {
        let limits = HttpLimits {
            idle_timeout_ms: 0,
            ..HttpLimits::default()
        };
        let err = limits.check().unwrap_err().to_string();
        assert!(err.contains("idle_timeout_ms"), "{err}");
        assert!(HttpLimits::default().check().is_ok());
    }
}
