//! `/v1/users/{user_id}/…`: what a withdrawal needs from its user — the payment
//! password (set by the user's service; stored as an argon2id hash outside the
//! log), KYC status (operators), payout accounts (registered by the user's
//! service, verified by operators) — and the profile read.

use super::password;
use super::Payouts;
use crate::runtime::http::body::JsonBody;
use crate::runtime::http::problem::unit_problem;
use crate::runtime::http::{parse_id, AppState, Caller, Problem, ProblemBody, WriteResponse};
use crate::runtime::unit::run_command;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use factledger_aggregates::withdrawal::profile::{KycStatus, PayoutProfile, ProfileCommand};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordBody {
    pub password: String,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KycBody {
    /// NONE, PENDING, VERIFIED or REJECTED.
    #[schema(value_type = String)]
    pub status: KycStatus,
    pub reason: String,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountBody {
    pub account_id: String,
    /// The provider's channel, e.g. `ID_BCA` (bank) or `ID_OVO` (e-wallet).
    pub channel_code: String,
    pub account_number: String,
    pub account_holder: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProfileView {
    pub user_id: String,
    pub kyc: String,
    pub payment_password_set: bool,
    pub accounts: Vec<AccountView>,
}

/// A payout account; `verified_at` is null until an operator verified it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AccountView {
    pub account_id: String,
    pub channel_code: String,
    pub account_number: String,
    pub account_holder: String,
    pub registered_at: String,
    pub verified_at: Option<String>,
    pub verified_by: Option<String>,
}

async fn profile_command(
    state: &AppState,
    caller: &Caller,
    user_id: &str,
    command: ProfileCommand,
) -> Result<Json<WriteResponse>, Problem> {
    let metadata = caller.metadata(&state.config.country_code, None);
    let done = run_command::<PayoutProfile>(&state.store, &metadata, user_id, command)
        .await
        .map_err(|e| unit_problem(e, |d| Problem::refusal(&d)))?;
    Ok(Json(WriteResponse {
        events: done.events,
        position: done.position,
    }))
}

/// Set or replace the user's payment password (clears a lock).
#[utoipa::path(put, path = "/v1/users/{user_id}/payment-password", request_body = PasswordBody,
    params(("user_id" = String, Path, description = "The user")),
    responses((status = 204), (status = 422, body = ProblemBody), (status = 503, body = ProblemBody)), security(("bearer" = [])))]
pub async fn set_password(
    State(state): State<AppState>,
    caller: Caller,
    Path(user_id): Path<String>,
    body: JsonBody,
) -> Result<StatusCode, Problem> {
    caller.require_write()?;
    let user_id = parse_id("user_id", &user_id)?;
    let body: PasswordBody = body.parse()?;
    let payouts = state.part::<Payouts>()?;
    let (gate, cost) = (&payouts.password_gate, payouts.password_cost);
    password::set(&state.db, gate, user_id.as_str(), &body.password, cost)
        .await
        .map_err(|e| match e {
            password::PasswordError::Invalid => {
                Problem::invalid(e.code(), "password", e.to_string())
            }
            password::PasswordError::Busy => password::busy_problem(&e),
            other => Problem::internal(other.to_string()),
        })?;
    tracing::info!(user_id = user_id.as_str(), "payment password set");
    Ok(StatusCode::NO_CONTENT)
}

/// Record the user's KYC status (operators).
#[utoipa::path(post, path = "/v1/users/{user_id}/kyc", request_body = KycBody,
    params(("user_id" = String, Path, description = "The user")),
    responses((status = 200, body = WriteResponse), (status = 422, body = ProblemBody)), security(("bearer" = [])))]
pub async fn set_kyc(
    State(state): State<AppState>,
    caller: Caller,
    Path(user_id): Path<String>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    caller.require_operator("recording a KYC status")?;
    let user_id = parse_id("user_id", &user_id)?;
    let body: KycBody = body.parse()?;
    let command = ProfileCommand::SetKyc {
        status: body.status,
        actor: caller.principal.actor(),
        reason: body.reason,
        now: chrono::Utc::now(),
    };
    profile_command(&state, &caller, user_id.as_str(), command).await
}

/// Register a payout account of the user (unverified until an operator verifies it).
#[utoipa::path(post, path = "/v1/users/{user_id}/payout-accounts", request_body = AccountBody,
    params(("user_id" = String, Path, description = "The user")),
    responses((status = 200, body = WriteResponse), (status = 409, body = ProblemBody), (status = 422, body = ProblemBody)),
    security(("bearer" = [])))]
pub async fn register_account(
    State(state): State<AppState>,
    caller: Caller,
    Path(user_id): Path<String>,
    body: JsonBody,
) -> Result<Json<WriteResponse>, Problem> {
    caller.require_write()?;
    let user_id = parse_id("user_id", &user_id)?;
    let body: AccountBody = body.parse()?;
    let command = ProfileCommand::RegisterAccount {
        account_id: parse_id("account_id", &body.account_id)?,
        channel_code: body.channel_code,
        account_number: body.account_number,
        account_holder: body.account_holder,
        actor: caller.principal.actor(),
        now: chrono::Utc::now(),
    };
    profile_command(&state, &caller, user_id.as_str(), command).await
}

/// `POST /v1/users/{user_id}/payout-accounts/{account_id}:verify` (operators).
#[utoipa::path(post, path = "/v1/users/{user_id}/payout-accounts/{account_id}:verify",
    params(("user_id" = String, Path, description = "The user"), ("account_id" = String, Path, description = "The account; the path ends in :verify")),
    responses((status = 200, body = WriteResponse), (status = 404, body = ProblemBody)), security(("bearer" = [])))]
pub async fn verify_account(
    State(state): State<AppState>,
    caller: Caller,
    Path((user_id, tail)): Path<(String, String)>,
) -> Result<Json<WriteResponse>, Problem> {
    let (account_id, _) = crate::runtime::http::path_action(
        &tail,
        &["verify"],
        "/v1/users/{user_id}/payout-accounts",
        "account_id",
    )?;
    caller.require_operator("verifying a payout account")?;
    let user_id = parse_id("user_id", &user_id)?;
    let command = ProfileCommand::VerifyAccount {
        account_id: parse_id("account_id", account_id)?,
        actor: caller.principal.actor(),
        now: chrono::Utc::now(),
    };
    profile_command(&state, &caller, user_id.as_str(), command).await
}

/// The user's KYC status, payout accounts and whether a payment password is set
/// (never the hash).
#[utoipa::path(get, path = "/v1/users/{user_id}/payout-profile",
    params(("user_id" = String, Path, description = "The user")),
    responses((status = 200, body = ProfileView)), security(("bearer" = [])))]
pub async fn get_profile(
    State(state): State<AppState>,
    _caller: Caller,
    Path(user_id): Path<String>,
) -> Result<Json<ProfileView>, Problem> {
    let user_id = parse_id("user_id", &user_id)?;
    let profile = crate::runtime::bus::load::<PayoutProfile>(&state.store, user_id.as_str())
        .await
        .map_err(|e| Problem::internal(e.to_string()))?
        .state;
    let set = password::is_set(&state.db, user_id.as_str())
        .await
        .map_err(|e| Problem::internal(e.to_string()))?;
    Ok(Json(ProfileView {
        user_id: user_id.as_str().to_owned(),
        kyc: profile.kyc.as_str().to_owned(),
        payment_password_set: set,
        accounts: profile
            .accounts
            .into_values()
            .map(|a| AccountView {
                account_id: a.account_id,
                channel_code: a.channel_code,
                account_number: a.account_number,
                account_holder: a.account_holder,
                registered_at: a.registered_at.to_rfc3339(),
                verified_at: a.verified_at.map(|t| t.to_rfc3339()),
                verified_by: a.verified_by,
            })
            .collect(),
    }))
}
