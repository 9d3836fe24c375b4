//! `/v1/service-orders`, `/v1/bookings`: the commands of paid services over HTTP.
//! Payments arrive as gateway callbacks (`POST /v1/callbacks/{gateway}`), not here.
//!
//! Numbers (`order_no`, `booking_no`) are the client's business numbers, or minted
//! when absent; a booking with a number already booked writes nothing and answers
//! the booking as it is (a retried request never holds twice).

use super::ctx::{Ctx, Services};
use super::flow;
use super::reads::{self, Row};
use super::units::{self, ServiceRefusal, ServiceUnitError};
use crate::runtime::http::body::{typed, JsonBody};
use crate::runtime::http::problem::unit_problem;
use crate::runtime::http::{path_action, AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use factledger_aggregates::booking::{BookCall, Party};
use factledger_aggregates::service_order::{CreateOrder, OrderBusiness};
use factledger_aggregates::services::{PaymentMethod, UserId};
use factledger_aggregates::Currency;
use serde::Deserialize;

pub fn unit_error(e: ServiceUnitError) -> Problem {
    unit_problem(e, |r: ServiceRefusal| Problem::refusal(&r))
}

fn ctx(state: &AppState) -> Result<Ctx, Problem> {
    let services = state.part::<Services>()?.clone();
    Ok(Ctx::with_engine(
        state.store.clone(),
        state.db.clone(),
        &state.jobs,
        services,
        &state.config.country_code,
    ))
}

fn user(field: &'static str, v: i64) -> Result<UserId, Problem> {
    UserId::parse(v).map_err(|e| Problem::invalid("INVALID_FIELD", field, e.rule))
}

/// The answer to a write whose row the projection has not caught up with within the
/// read's wait: the write committed, so it is answered with what is known (and the
/// client reads the row later with `min_position`), never with a 503.
fn written(read: Result<Row, Problem>, known: impl FnOnce() -> Row) -> Result<Row, Problem> {
    match read {
        Err(p) if p.code == "PROJECTION_BEHIND" => Ok(known()),
        other => other,
    }
}

/// The log's head: what a read after a flow of several units waits for.
async fn head(state: &AppState) -> Result<i64, Problem> {
    state.store.head_position().await.map_err(Problem::from)
}

fn mint(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// What an order buys, as a request names it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum BusinessBody {
    /// Candy for the payer, in 1/100-candy units.
    Recharge { candy: i64 },
    /// Days of an entitlement to an artist.
    Subscription { artist_id: i64, days: i64 },
}

/// The body of `POST /v1/service-orders`: a cash order, paid through its gateway.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OrderBody {
    /// Your order number (1–64 of `A-Z a-z 0-9 _ -`); minted when absent.
    pub order_no: Option<String>,
    pub user_id: i64,
    pub business: BusinessBody,
    /// `WECHAT`, `ALIPAY` or `APPLE`.
    pub method: String,
    /// Cash, positive minor units of `currency`.
    pub amount_minor: i64,
    pub currency: String,
}

/// Create a cash order (status 0): a recharge or a subscription. It is paid by the
/// gateway's callback and closes unpaid after its timeout.
#[utoipa::path(
    post,
    path = "/v1/service-orders",
    request_body = OrderBody,
    responses((status = 201, body = Object, description = "the order row"),
              (status = 409, body = ProblemBody), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn create_order(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, Problem> {
    caller.require_write()?;
    let b: OrderBody = typed(body.value()?)?;
    let ctx = ctx(&state)?;
    let method = PaymentMethod::parse(&b.method)
        .filter(|m| m.is_cash())
        .ok_or_else(|| {
            Problem::invalid("INVALID_FIELD", "method", "one of WECHAT, ALIPAY, APPLE")
        })?;
    let currency = Currency::parse(&b.currency)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "currency", e.rule))?;
    let business = match b.business {
        BusinessBody::Recharge { candy } => OrderBusiness::Recharge { candy },
        BusinessBody::Subscription { artist_id, days } => OrderBusiness::Subscription {
            artist_id: user("business.artist_id", artist_id)?,
            days,
        },
    };
    let now = Utc::now();
    let order_no = b.order_no.unwrap_or_else(|| mint("ORD"));
    let cmd = CreateOrder {
        order_no: order_no.clone(),
        user_id: user("user_id", b.user_id)?,
        business,
        method,
        amount: b.amount_minor,
        currency: Some(currency),
        created_at: now,
        timeout_at: now + Duration::milliseconds(ctx.services.order_timeout_ms),
    };
    let meta = caller.metadata(&state.config.country_code, None);
    let done = units::orders::create(&state.store, &meta, cmd, None)
        .await
        .map_err(unit_error)?;
    let row = written(
        reads::order(&state, &order_no, Some(done.position)).await,
        || serde_json::json!({"order_no": order_no, "status": 0, "status_name": "CREATED"}),
    )?;
    Ok((StatusCode::CREATED, Json(row)).into_response())
}

/// `GET /v1/service-orders/{order_no}`.
#[utoipa::path(
    get,
    path = "/v1/service-orders/{order_no}",
    params(("order_no" = String, Path), ("min_position" = Option<i64>, Query)),
    responses((status = 200, body = Object, description = "the order, its recharge and payment transactions"),
              (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn show_order(
    State(state): State<AppState>,
    _caller: Caller,
    Path(order_no): Path<String>,
    q: crate::runtime::http::query::QueryParams<reads::At>,
) -> Result<Json<Row>, Problem> {
    Ok(Json(
        reads::order(&state, &order_no, q.0.min_position).await?,
    ))
}

/// `POST /v1/service-orders/{order_no}:pay`: the payer went to the gateway; an unpaid
/// cash order moves from 0 to 1 (PAYING). It still closes on its timeout unless the
/// gateway's callback pays it.
#[utoipa::path(
    post,
    path = "/v1/service-orders/{order_action}",
    params(("order_action" = String, Path, description = "`<order_no>:pay`")),
    responses((status = 200, body = Object, description = "the order"),
              (status = 404, body = ProblemBody), (status = 409, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn order_action(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
) -> Result<Json<Row>, Problem> {
    caller.require_write()?;
    let (order_no, _) = path_action(&tail, &["pay"], "/v1/service-orders", "order_no")?;
    let meta = caller.metadata(&state.config.country_code, None);
    let done = units::orders::start_payment(&state.store, &meta, order_no, Utc::now())
        .await
        .map_err(unit_error)?;
    let at = match done.position {
        0 => head(&state).await?,
        p => p,
    };
    let row = written(
        reads::order(&state, order_no, Some(at)).await,
        || serde_json::json!({"order_no": order_no, "status": 1, "status_name": "PAYING"}),
    )?;
    Ok(Json(row))
}

/// The body of `POST /v1/bookings`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BookingBody {
    /// Your booking number; minted when absent. Booking the same number again writes
    /// nothing.
    pub booking_no: Option<String>,
    pub fan_user_id: i64,
    pub artist_id: i64,
    /// RFC 3339; in the future.
    pub start_at: String,
    /// 1 to 240.
    pub minutes: i64,
    /// 1/100-candy units held from the fan's balance until the call settles.
    pub price_candy: i64,
}

/// Book a video call: the fan's candy is held (R-HOLD-1) and the booking activated,
/// with its no-show check queued for 10 minutes after the start.
#[utoipa::path(
    post,
    path = "/v1/bookings",
    request_body = BookingBody,
    responses((status = 201, body = Object, description = "the booking with its hold"),
              (status = 200, body = Object, description = "booked before under this number"),
              (status = 409, body = ProblemBody), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn book(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, Problem> {
    caller.require_write()?;
    let b: BookingBody = typed(body.value()?)?;
    let ctx = ctx(&state)?;
    let start_at = DateTime::parse_from_rfc3339(&b.start_at)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "start_at", format!("RFC 3339: {e}")))?
        .with_timezone(&Utc);
    let now = Utc::now();
    let booking_no = b.booking_no.unwrap_or_else(|| mint("BK"));
    let call = BookCall {
        order_no: format!("BKO-{booking_no}"),
        booking_no: booking_no.clone(),
        fan_user_id: user("fan_user_id", b.fan_user_id)?,
        artist_id: user("artist_id", b.artist_id)?,
        start_at,
        minutes: b.minutes,
        price_candy: b.price_candy,
        at: now,
    };
    let meta = caller.metadata(&state.config.country_code, None);
    let timeout = now + Duration::milliseconds(ctx.services.order_timeout_ms);
    let done = units::bookings::book(&state.store, &meta, call.clone(), timeout, None)
        .await
        .map_err(unit_error)?;
    let created = !done.events.is_empty();
    // Delivery of the candy order activates the booking (its compensation is queued
    // if it fails) and queues the no-show check. A booking made again under its
    // number is delivered too: the first request may have died between its unit and
    // this step (a crash), and its order would wait for the delivery scan's grace
    // (30 s) with the booking inactive. An order delivered already decides nothing.
    flow::deliver(&ctx, &call.order_no, now, None, true)
        .await
        .map_err(|e| Problem::internal(e.message))?;
    // The booking from its stream: current, with no wait for the projection.
    let row = reads::booking_now(&state, &booking_no).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(row)).into_response())
}

/// The body of `:join` and `:moderate`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BookingActionBody {
    /// `:join`: `FAN` or `ARTIST`.
    pub party: Option<String>,
    /// `:moderate`: what moderation found.
    pub reason: Option<String>,
}

/// `POST /v1/bookings/{booking_no}:join|start|finish|moderate`: a party entered the
/// room; the call started (its finish is queued for the booked end); the call ended
/// (status 3 only: duration recorded, the hold settled to the artist once);
/// moderation aborted it (completed abnormally, no income).
#[utoipa::path(
    post,
    path = "/v1/bookings/{booking_action}",
    params(("booking_action" = String, Path, description = "`<booking_no>:join`, `:start`, `:finish` or `:moderate`")),
    request_body = BookingActionBody,
    responses((status = 200, body = Object, description = "the booking after the action"),
              (status = 404, body = ProblemBody), (status = 409, body = ProblemBody), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn booking_action(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
    body: JsonBody,
) -> Result<Json<Row>, Problem> {
    caller.require_write()?;
    let (booking_no, action) = path_action(
        &tail,
        &["join", "start", "finish", "moderate"],
        "/v1/bookings",
        "booking_no",
    )?;
    let b: BookingActionBody = match body.optional()? {
        None => BookingActionBody::default(),
        Some(v) => typed(v)?,
    };
    let ctx = ctx(&state)?;
    let now = Utc::now();
    let meta = caller.metadata(&state.config.country_code, None);
    use factledger_aggregates::booking::BookingCommand;
    let step = |command| units::booking_step(&state.store, &meta, booking_no, command, None);
    match action {
        "join" => {
            let party = match b.party.as_deref() {
                Some("FAN") => Party::Fan,
                Some("ARTIST") => Party::Artist,
                None => {
                    return Err(Problem::invalid(
                        "MISSING_FIELD",
                        "party",
                        "who joined: FAN or ARTIST",
                    ))
                }
                Some(_) => return Err(Problem::invalid("INVALID_FIELD", "party", "FAN or ARTIST")),
            };
            step(BookingCommand::Join { party, at: now })
                .await
                .map_err(unit_error)?;
        }
        "start" => {
            flow::start_call(&ctx, booking_no, now)
                .await
                .map_err(unit_error)?;
        }
        "finish" => {
            step(BookingCommand::Finish { at: now })
                .await
                .map_err(unit_error)?;
        }
        _ => {
            let reason = b.reason.ok_or_else(|| {
                Problem::invalid("MISSING_FIELD", "reason", "what moderation found")
            })?;
            flow::moderate(&ctx, booking_no, &reason, now)
                .await
                .map_err(unit_error)?;
        }
    }
    // The booking from its stream: current, whether or not this step decided anything.
    Ok(Json(reads::booking_now(&state, booking_no).await?))
}
