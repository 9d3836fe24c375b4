//! Affiliate writes: the ingest page (`POST /v1/orders:ingest`, R-ORD-2), the audited
//! manual actions (commission recovery resolution, attribution correction) and the
//! reference data orders are priced and attributed with (rule versions, affiliate
//! links, inviters, campaigns) — all recorded as events, so replays never call out.
//!
//! Every body is parsed into the aggregate's own command (its validation, its
//! `deny_unknown_fields`); what the server owns — the stream id from the path, the
//! actor from the API key, the time — is filled in here and refused in the body.

use crate::affiliate::ingest::Ingestor;
use crate::affiliate::recovery::{resolve_recovery, CommissionOrWallet};
use crate::affiliate::{IngestResult, INGEST_PAGE_ORDERS_MAX};
use crate::runtime::http::body::field_at_fault;
use crate::runtime::http::body::{typed, JsonBody};
use crate::runtime::http::problem::unit_problem;
use crate::runtime::http::WriteResponse;
use crate::runtime::http::{AppState, Caller, Problem};
use crate::runtime::unit::run_command;
use axum::extract::{Path, State};
use axum::Json;
use factledger_aggregates::affiliate::{order_stream_id, Platform, PlatformOrderId};
use factledger_aggregates::affiliate_link::{link_stream_id, AffiliateLink, LinkCommand, Register};
use factledger_aggregates::affiliate_order::{AffiliateOrder, NormalisedOrder, OrderCommand};
use factledger_aggregates::campaign::{Campaign, CampaignCommand};
use factledger_aggregates::commission::CommissionCommand;
use factledger_aggregates::commission_rules::{CommissionRuleSet, RuleSetCommand};
use factledger_aggregates::invite::{InviteCommand, InviteRelation};
use factledger_aggregates::Refusal;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Largest ingest page body: 500 orders of about 500 bytes each, with room. The rest
/// of the API keeps [`crate::runtime::http::BODY_BYTES_MAX`].
pub const INGEST_BODY_BYTES_MAX: usize = 1024 * 1024;

/// The JSON object of a body; server-owned keys are refused naming the key.
fn object(body: &JsonBody, server_owned: &[&str]) -> Result<Map<String, Value>, Problem> {
    let map = body.object()?;
    if let Some(k) = server_owned.iter().find(|k| map.contains_key(**k)) {
        return Err(Problem::invalid(
            "SERVER_OWNED_FIELD",
            k,
            format!("{k} is set by the server (from the path, the API key or the clock)"),
        ));
    }
    Ok(map)
}

/// Parse a command from JSON, naming the field at fault.
fn command<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, Problem> {
    typed(value)
}

fn now_text() -> Value {
    Value::from(crate::infra::store::time_text(&chrono::Utc::now()))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    /// Normalised orders (1 to 500): platform, country, platform_order_id, status,
    /// currency, gmv_minor, platform_commission_minor, ordered_at,
    /// platform_updated_at, attribution {kind: TRACKING_ID|CLICK_ID|REFERRAL_CODE,
    /// value}.
    #[schema(value_type = Vec<Object>)]
    pub orders: Vec<Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IngestResponse {
    /// One result per order, in the order of the request.
    pub results: Vec<IngestResult>,
}

/// Ingest a page of normalised orders, each order in its own unit (R-ORD-2): one bad
/// order is `rejected` with its reason and never affects the others.
#[utoipa::path(
    post,
    path = "/v1/orders:ingest",
    request_body = IngestRequest,
    responses((status = 200, body = IngestResponse), (status = 403, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor(), request_id = %caller.request_id, orders))]
pub async fn ingest(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Json<IngestResponse>, Problem> {
    caller.require_write()?;
    let request: IngestRequest = body.parse()?;
    let n = request.orders.len();
    tracing::Span::current().record("orders", n);
    if n == 0 || n > INGEST_PAGE_ORDERS_MAX {
        return Err(Problem::invalid(
            "INVALID_FIELD",
            "orders",
            format!("a page holds 1 to {INGEST_PAGE_ORDERS_MAX} orders, not {n}"),
        ));
    }
    // A page goes to one partition: every order that states a country must state
    // this one (a malformed order is still rejected on its own, below).
    state
        .config
        .own_countries(request.orders.iter().enumerate().filter_map(|(i, o)| {
            let country = o.get("country").and_then(Value::as_str)?;
            Some((format!("orders[{i}].country"), country))
        }))?;
    let ingestor = Ingestor::new(
        state.store.clone(),
        caller.metadata(&state.config.country_code, None),
    );
    let mut results = Vec::with_capacity(n);
    for (i, raw) in request.orders.into_iter().enumerate() {
        let text = |k: &str| raw.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let (platform, platform_order_id) = (text("platform"), text("platform_order_id"));
        match serde_path_to_error::deserialize::<_, NormalisedOrder>(raw) {
            Ok(order) => results.push(
                ingestor
                    .ingest_one(order, None)
                    .await
                    .map_err(|e| Problem::internal(e.to_string()))?,
            ),
            Err(e) => {
                let (path, message) = (e.path().to_string(), e.into_inner().to_string());
                let field = field_at_fault(&path, &message);
                results.push(IngestResult {
                    platform,
                    platform_order_id,
                    result: "rejected".into(),
                    code: Some("INVALID_ORDER".into()),
                    field: Some(
                        format!("orders[{i}].{field}")
                            .trim_end_matches('.')
                            .to_owned(),
                    ),
                    reason: Some(message),
                    position: None,
                })
            }
        }
    }
    Ok(Json(IngestResponse { results }))
}

fn commission_problem(e: CommissionOrWallet) -> Problem {
    match e {
        CommissionOrWallet::Commission(c) => Problem::refusal(&c),
        CommissionOrWallet::Wallet(w) => w.into(),
    }
}

/// The body's schema for the OpenAPI document; the handler parses the body into the
/// aggregate's `ResolveRecovery` command itself.
#[allow(dead_code)]
#[derive(Debug, utoipa::ToSchema)]
pub struct ResolveRequest {
    /// Why finance closed the recovery review (audited; not blank, ≤ 500 bytes).
    pub reason: String,
}

/// `POST /v1/commissions/{commission_id}:resolve`: close a recovery review by hand
/// (RECOVERY_REVIEW → MANUAL_RESOLVED, audited with the caller and the reason) and lift
/// its withdrawal block, in one unit.
#[utoipa::path(
    post,
    path = "/v1/commissions/{commission_id}:resolve",
    params(("commission_id" = String, Path, description = "e.g. SHOPEE:o-1:CASHBACK")),
    request_body = ResolveRequest,
    responses((status = 200, body = WriteResponse), (status = 404, body = crate::runtime::http::ProblemBody),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_commission(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    let (id, _) =
        crate::runtime::http::path_action(&tail, &["resolve"], "/v1/commissions", "commission_id")?;
    caller.require_operator("resolving a recovery review")?;
    let id = crate::runtime::http::parse_id("commission_id", id)?;
    let mut map = object(&body, &["actor", "resolved_at", "type"])?;
    map.insert("actor".into(), caller.principal.actor().into());
    map.insert("resolved_at".into(), now_text());
    let resolve = CommissionCommand::ResolveRecovery(command(Value::Object(map))?);
    let metadata = caller.metadata(&state.config.country_code, None);
    let done = resolve_recovery(&state.store, &metadata, id.as_str(), resolve)
        .await
        .map_err(|e| unit_problem(e, commission_problem))?;
    Ok(Json(WriteResponse {
        events: done.events,
        position: done.position,
    }))
}

/// `POST /v1/orders/{platform}/{platform_order_id}:correct-attribution`: move an
/// order to another owner (or to none), audited with the caller and the reason
/// (R-ORD-4). The new owner's inviter is read from their invite relation.
/// Commissions already recorded keep their beneficiary (see ARCHITECTURE.md).
#[utoipa::path(
    post,
    path = "/v1/orders/{platform}/{platform_order_id}:correct-attribution",
    params(("platform" = String, Path, description = "TIKTOK, SHOPEE, LAZADA or TRAVELOKA"),
           ("platform_order_id" = String, Path, description = "The platform's order id")),
    request_body(content = Object, description = "{new_owner_user_id: string | null, reason: string}"),
    responses((status = 200, body = WriteResponse), (status = 404, body = crate::runtime::http::ProblemBody),
              (status = 409, body = crate::runtime::http::ProblemBody), (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(platform = %platform, tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_order(
    State(state): State<AppState>,
    caller: Caller,
    Path((platform, tail)): Path<(String, String)>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    let (order, _) = crate::runtime::http::path_action(
        &tail,
        &["correct-attribution"],
        "/v1/orders/{platform}",
        "platform_order_id",
    )?;
    caller.require_operator("an attribution correction")?;
    let platform = Platform::parse(&platform)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "platform", e.rule))?;
    let order = PlatformOrderId::parse(order)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "platform_order_id", e.rule))?;
    let stream = order_stream_id(platform, &order);
    let mut map = object(
        &body,
        &["actor", "corrected_at", "type", "new_inviter_user_id"],
    )?;
    let owner = map
        .get("new_owner_user_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let inviter = match &owner {
        Some(user) => crate::runtime::bus::load::<InviteRelation>(&state.store, user)
            .await
            .map_err(|e| Problem::internal(e.to_string()))?
            .state
            .inviter()
            .map(str::to_owned),
        None => None,
    };
    map.insert("actor".into(), caller.principal.actor().into());
    map.insert("corrected_at".into(), now_text());
    if let Some(i) = inviter {
        map.insert("new_inviter_user_id".into(), i.into());
    }
    let correct = OrderCommand::CorrectAttribution(command(Value::Object(map))?);
    let done = run_command::<AffiliateOrder>(
        &state.store,
        &caller.metadata(&state.config.country_code, None),
        &stream,
        correct,
    )
    .await
    .map_err(|e| unit_problem(e, |d| Problem::refusal(&d)))?;
    Ok(Json(WriteResponse {
        events: done.events,
        position: done.position,
    }))
}

/// `POST /v1/commission-rules/{rule_set_id}/versions`: add a rule version (R-INV-5:
/// effective from now or later, never back-dated; earlier versions never change).
#[utoipa::path(
    post,
    path = "/v1/commission-rules/{rule_set_id}/versions",
    params(("rule_set_id" = String, Path, description = "<PLATFORM>:<COUNTRY>, e.g. SHOPEE:ID")),
    request_body(content = Object, description = "{version, effective_from, cashback_bps, inviter_bps, max_commission_base_bps, release_delay_days}"),
    responses((status = 200, body = WriteResponse), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
pub async fn add_rule_version(
    State(state): State<AppState>,
    caller: Caller,
    Path(rule_set_id): Path<String>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    caller.require_write()?;
    let id = crate::runtime::http::parse_id("rule_set_id", &rule_set_id)?;
    own_pair_country(&state, "rule_set_id", id.as_str())?;
    let mut map = object(&body, &["type", "rule_set_id", "requested_at"])?;
    map.insert("rule_set_id".into(), id.as_str().into());
    map.insert("requested_at".into(), now_text());
    let cmd = RuleSetCommand::AddVersion(command(Value::Object(map))?);
    write::<CommissionRuleSet>(&state, &caller, id.as_str(), cmd).await
}

/// `POST /v1/affiliate-links`: record who owns an attribution value (a tracking id,
/// click id or referral code), so orders carrying it are attributed to them.
#[utoipa::path(
    post,
    path = "/v1/affiliate-links",
    request_body(content = Object, description = "{attribution: {kind: TRACKING_ID|CLICK_ID|REFERRAL_CODE, value}, user_id}"),
    responses((status = 200, body = WriteResponse), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
pub async fn register_link(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    caller.require_write()?;
    let mut map = object(&body, &["type", "actor", "registered_at"])?;
    map.insert("actor".into(), caller.principal.actor().into());
    map.insert("registered_at".into(), now_text());
    let register: Register = command(Value::Object(map))?;
    let stream = link_stream_id(&register.attribution);
    write::<AffiliateLink>(&state, &caller, &stream, LinkCommand::Register(register)).await
}

/// `POST /v1/users/{user_id}/inviter`: record a user's direct inviter (once).
#[utoipa::path(
    post,
    path = "/v1/users/{user_id}/inviter",
    params(("user_id" = String, Path, description = "The invited user")),
    request_body(content = Object, description = "{inviter_user_id}"),
    responses((status = 200, body = WriteResponse), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
pub async fn set_inviter(
    State(state): State<AppState>,
    caller: Caller,
    Path(user_id): Path<String>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    caller.require_write()?;
    let user = crate::runtime::http::parse_id("user_id", &user_id)?;
    let mut map = object(&body, &["type", "user_id", "actor", "set_at"])?;
    map.insert("user_id".into(), user.as_str().into());
    map.insert("actor".into(), caller.principal.actor().into());
    map.insert("set_at".into(), now_text());
    let cmd = InviteCommand::SetInviter(command(Value::Object(map))?);
    write::<InviteRelation>(&state, &caller, user.as_str(), cmd).await
}

/// `POST /v1/campaigns/{campaign_id}`: open a campaign (its id is the `<PLATFORM>:<COUNTRY>`
/// whose orders reserve quota in it).
#[utoipa::path(
    post,
    path = "/v1/campaigns/{campaign_id}",
    params(("campaign_id" = String, Path, description = "<PLATFORM>:<COUNTRY>, e.g. SHOPEE:ID")),
    request_body(content = Object, description = "{quota_unit: ORDERS|MINOR_UNITS, quota_limit, currency?, starts_at, ends_at?}"),
    responses((status = 200, body = WriteResponse), (status = 409, body = crate::runtime::http::ProblemBody),
              (status = 422, body = crate::runtime::http::ProblemBody)),
    security(("bearer" = []))
)]
pub async fn open_campaign(
    State(state): State<AppState>,
    caller: Caller,
    Path(campaign_id): Path<String>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    caller.require_write()?;
    let id = crate::runtime::http::parse_id("campaign_id", &campaign_id)?;
    own_pair_country(&state, "campaign_id", id.as_str())?;
    let mut map = object(&body, &["type", "campaign_id"])?;
    map.insert("campaign_id".into(), id.as_str().into());
    let cmd = CampaignCommand::Open(command(Value::Object(map))?);
    write::<Campaign>(&state, &caller, id.as_str(), cmd).await
}

/// A `<PLATFORM>:<COUNTRY>` id (rule set, campaign) must name this partition's
/// country in a partitioned deployment.
fn own_pair_country(state: &AppState, field: &str, id: &str) -> Result<(), Problem> {
    let stated = crate::runtime::http::partition::country_of_pair_id(id);
    state
        .config
        .own_countries(stated.map(|country| (field.to_owned(), country)))
}

/// One reference-data command as its own unit.
async fn write<A>(
    state: &AppState,
    caller: &Caller,
    stream: &str,
    cmd: A::Command,
) -> Result<Json<WriteResponse>, Problem>
where
    A: factledger_aggregates::Decide + Clone + 'static,
    A::Command: Clone,
    A::Error: Refusal,
{
    let done = run_command::<A>(
        &state.store,
        &caller.metadata(&state.config.country_code, None),
        stream,
        cmd,
    )
    .await
    .map_err(|e| unit_problem(e, |d: A::Error| Problem::refusal(&d)))?;
    Ok(Json(WriteResponse {
        events: done.events,
        position: done.position,
    }))
}
