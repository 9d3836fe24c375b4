//! `/v1/withdrawals…`: request (Tx1, R-PAY-1), operator review, and reads.
//!
//! A request needs an `Idempotency-Key`; the withdrawal id is derived from the
//! caller and the key (`wd-` + 32 hex of SHA-256), so a retried request lands on
//! the same stream and the aggregate writes nothing the second time: one freeze,
//! whatever the client's retries do (acceptance 10).

use super::password::{self, PasswordError};
use super::policy::PolicyError;
use super::reads::{self, WithdrawalDetail, WithdrawalsPage, WithdrawalsQuery};
use super::units::{self, DailyLimits, PayoutRefusal, PayoutUnitError};
use super::Payouts;
use crate::infra::store::{IdempotencyRow, StoreError};
use crate::runtime::bus::load;
use crate::runtime::http::body::JsonBody;
use crate::runtime::http::problem::unit_problem;
use crate::runtime::http::query::QueryParams;
use crate::runtime::http::{parse_id, AppState, Caller, Problem, ProblemBody};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use factledger_aggregates::withdrawal::profile::{KycStatus, PayoutProfile};
use factledger_aggregates::withdrawal::{
    Decision, PayoutDestination, RequestWithdrawal, WITHDRAWAL_AGGREGATE_TYPE,
};
use factledger_aggregates::{AmountMinor, Currency};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The body of `POST /v1/withdrawals`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WithdrawalRequestBody {
    pub user_id: String,
    pub wallet_id: String,
    /// Positive, minor units of `currency`.
    pub amount_minor: i64,
    /// Must be the wallet's currency.
    pub currency: String,
    /// A verified payout account of the user.
    pub payout_account_id: String,
    /// Checked against the user's argon2id hash; never stored or logged.
    pub payment_password: String,
}

/// The body of `:approve` and `:reject`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    pub reason: String,
}

/// The withdrawal id of a request: the caller's scope and key, hashed.
pub fn withdrawal_id_for(scope: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{scope}\n{key}").as_bytes());
    format!("wd-{}", &hex::encode(digest)[..32])
}

pub fn refusal_problem(e: PayoutRefusal) -> Problem {
    match e {
        PayoutRefusal::Withdrawal(r) => Problem::refusal(&r),
        PayoutRefusal::Wallet(w) => w.into(),
        PayoutRefusal::Limit(l) => Problem::refusal(&l),
        PayoutRefusal::Profile(p) => Problem::refusal(&p),
    }
}

pub fn unit_error(e: PayoutUnitError) -> Problem {
    unit_problem(e, refusal_problem)
}

fn password_problem(e: PasswordError) -> Problem {
    match e {
        PasswordError::NotSet => {
            Problem::new(StatusCode::CONFLICT, e.code(), e.to_string()).field("payment_password")
        }
        PasswordError::Wrong { .. } => {
            Problem::invalid(e.code(), "payment_password", e.to_string())
        }
        PasswordError::Locked { .. } => {
            Problem::new(StatusCode::LOCKED, e.code(), e.to_string()).field("payment_password")
        }
        PasswordError::Invalid => Problem::invalid(e.code(), "payment_password", e.to_string()),
        PasswordError::Busy => password::busy_problem(&e),
        PasswordError::Hash(_) | PasswordError::Db(_) => Problem::internal(e.to_string()),
    }
}

fn policy_problem(e: PolicyError) -> Problem {
    Problem::invalid(e.code(), "amount_minor", e.to_string())
}

fn conflict(code: &'static str, field: &str, detail: String) -> Problem {
    Problem::new(StatusCode::CONFLICT, code, detail).field(field)
}

/// What the request checks before its unit: profile (KYC, a verified account), the
/// wallet's owner and currency, the amount range and the risk rule.
async fn admit(
    state: &AppState,
    payouts: &Payouts,
    id: &str,
    body: &WithdrawalRequestBody,
    actor: String,
) -> Result<RequestWithdrawal, Problem> {
    let user_id = parse_id("user_id", &body.user_id)?;
    let wallet_id = parse_id("wallet_id", &body.wallet_id)?;
    let account_id = parse_id("payout_account_id", &body.payout_account_id)?;
    let amount = AmountMinor::parse(body.amount_minor)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "amount_minor", e.rule))?;
    let currency = Currency::parse(&body.currency)
        .map_err(|e| Problem::invalid("INVALID_FIELD", "currency", e.rule))?;
    let gate = &payouts.password_gate;
    password::verify(&state.db, gate, user_id.as_str(), &body.payment_password)
        .await
        .map_err(password_problem)?;
    let profile = load::<PayoutProfile>(&state.store, user_id.as_str())
        .await
        .map_err(|e| Problem::internal(e.to_string()))?
        .state;
    if profile.kyc != KycStatus::Verified {
        return Err(conflict(
            "KYC_NOT_VERIFIED",
            "user_id",
            format!(
                "the user's KYC status is {}; withdrawals need VERIFIED",
                profile.kyc.as_str()
            ),
        ));
    }
    let account = profile
        .verified_account(account_id.as_str())
        .ok_or_else(|| {
            conflict(
                "PAYOUT_ACCOUNT_NOT_VERIFIED",
                "payout_account_id",
                format!(
                    "{} is not a verified payout account of this user",
                    account_id.as_str()
                ),
            )
        })?;
    let wallet = state
        .wallets
        .state(wallet_id.as_str())
        .await
        .map_err(Problem::from)?
        .state;
    if !wallet.opened {
        return Err(Problem::from(
            factledger_aggregates::wallet::WalletError::NotFound,
        ));
    }
    if wallet.user_id != user_id.as_str() {
        return Err(Problem::invalid(
            "WALLET_NOT_OWNED",
            "wallet_id",
            format!(
                "wallet {} is not the wallet of user {}",
                wallet_id.as_str(),
                user_id.as_str()
            ),
        ));
    }
    if wallet.currency != currency {
        return Err(Problem::invalid(
            "CURRENCY_MISMATCH",
            "currency",
            format!("the wallet holds {}, not {currency}", wallet.currency),
        ));
    }
    let now = chrono::Utc::now();
    let review = payouts
        .policy
        .admit(currency.as_str(), amount.get(), account, now)
        .map_err(policy_problem)?;
    Ok(RequestWithdrawal {
        withdrawal_id: parse_id("withdrawal_id", id)?,
        user_id,
        wallet_id,
        currency,
        amount_minor: amount,
        provider: parse_id("provider", &payouts.provider_name)?,
        destination: PayoutDestination {
            account_id: account.account_id.clone(),
            channel_code: account.channel_code.clone(),
            account_number: account.account_number.clone(),
            account_holder: account.account_holder.clone(),
        },
        review,
        actor,
        now,
    })
}

/// Request a withdrawal: freeze the amount and create the withdrawal and its payout
/// task in one unit. Requires `Idempotency-Key`; a retry returns the same
/// withdrawal (`idempotent-replayed: true`) and never freezes twice.
#[utoipa::path(
    post,
    path = "/v1/withdrawals",
    params(("Idempotency-Key" = String, Header, description = "Required: the same key and body returns the same withdrawal")),
    request_body = WithdrawalRequestBody,
    responses((status = 201, body = WithdrawalDetail), (status = 200, body = WithdrawalDetail, description = "a replay of the same key"),
              (status = 409, body = ProblemBody), (status = 422, body = ProblemBody), (status = 423, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(actor = %caller.principal.actor(), withdrawal_id))]
pub async fn request(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    body: JsonBody,
) -> Result<Response, Problem> {
    caller.require_write()?;
    let payouts = state.part::<Payouts>()?.clone();
    let key = crate::runtime::http::idempotency_key(&headers)?.ok_or_else(|| {
        Problem::invalid(
            "MISSING_FIELD",
            "Idempotency-Key",
            "a withdrawal request needs an Idempotency-Key header",
        )
    })?;
    let value = body.value()?;
    let parsed: WithdrawalRequestBody = crate::runtime::http::body::typed(value.clone())?;
    // The hash covers the request without the password (it is checked, not kept).
    let mut hashed = value;
    if let Some(o) = hashed.as_object_mut() {
        o.remove("payment_password");
    }
    let scope = caller.principal.actor();
    let id = withdrawal_id_for(&scope, &key);
    tracing::Span::current().record("withdrawal_id", id.as_str());
    let idempotency = IdempotencyRow {
        scope: scope.clone(),
        request_hash: hex::encode(Sha256::digest(
            format!("POST /v1/withdrawals\n{hashed}").as_bytes(),
        )),
        key: key.clone(),
    };
    if let Some(answer) = seen_before(&state, &idempotency, &id).await? {
        return Ok(answer);
    }
    let cmd = admit(&state, &payouts, &id, &parsed, scope).await?;
    let limits = payouts.policy.limits(cmd.currency.as_str());
    let daily = DailyLimits {
        count: limits.daily_count,
        amount_minor: limits.daily_amount_minor,
    };
    let metadata = caller.metadata(&state.config.country_code, Some(key));
    let done = match units::request(
        &state.store,
        &metadata,
        cmd,
        daily,
        Some(idempotency.clone()),
    )
    .await
    {
        Ok(done) => done,
        // The same key committed by a concurrent retry a moment ago.
        Err(PayoutUnitError::Store(StoreError::DuplicateIdempotencyKey(_))) => {
            return match seen_before(&state, &idempotency, &id).await? {
                Some(answer) => Ok(answer),
                None => Err(Problem::internal(
                    "an idempotency key collided but has no record",
                )),
            };
        }
        Err(e) => return Err(unit_error(e)),
    };
    if done.events.is_empty() {
        return replayed(&state, &id).await;
    }
    state
        .jobs
        .kick_soon(vec![super::job::PAYOUT.code(&super::job::business_key(&id))]);
    // A new stream: the unit's withdrawal events are all of it.
    let stream = done
        .events
        .into_iter()
        .filter(|e| e.aggregate_type == WITHDRAWAL_AGGREGATE_TYPE && e.aggregate_id == id)
        .collect();
    let detail = reads::fold_detail(stream)?;
    Ok((StatusCode::CREATED, Json(detail)).into_response())
}

/// The answer to a request whose key was used before: the same withdrawal, or 422
/// when the key came with another body.
async fn seen_before(
    state: &AppState,
    idempotency: &IdempotencyRow,
    id: &str,
) -> Result<Option<Response>, Problem> {
    let Some(found) = state
        .store
        .find_idempotency(&idempotency.scope, &idempotency.key)
        .await
        .map_err(Problem::from)?
    else {
        return Ok(None);
    };
    if found.request_hash != idempotency.request_hash {
        return Err(Problem::invalid(
            "IDEMPOTENCY_KEY_REUSED",
            "Idempotency-Key",
            "this Idempotency-Key was already used with a different request",
        ));
    }
    replayed(state, id).await.map(Some)
}

async fn replayed(state: &AppState, id: &str) -> Result<Response, Problem> {
    let detail = reads::detail(&state.store, id).await?;
    let mut response = Json(detail).into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(response)
}

/// `POST /v1/withdrawals/{id}:approve` and `:reject` (operators; a reason is
/// required). Approval hands the withdrawal to the payout worker; rejection gives
/// the frozen amount back.
#[utoipa::path(
    post,
    path = "/v1/withdrawals/{withdrawal_id}:approve",
    params(("withdrawal_id" = String, Path, description = "The withdrawal id; the path ends in :approve or :reject")),
    request_body = ReviewBody,
    responses((status = 200, body = WithdrawalDetail), (status = 404, body = ProblemBody),
              (status = 409, body = ProblemBody), (status = 422, body = ProblemBody)),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(tail = %tail, actor = %caller.principal.actor()))]
pub async fn post_on_withdrawal(
    State(state): State<AppState>,
    caller: Caller,
    Path(tail): Path<String>,
    body: JsonBody,
) -> Result<Json<WithdrawalDetail>, Problem> {
    let (id, action) = crate::runtime::http::path_action(
        &tail,
        &["approve", "reject"],
        "/v1/withdrawals",
        "withdrawal_id",
    )?;
    let approve = action == "approve";
    caller.require_operator(if approve {
        "approving a withdrawal"
    } else {
        "rejecting a withdrawal"
    })?;
    let id = parse_id("withdrawal_id", id)?;
    let review: ReviewBody = body.parse()?;
    let decision = Decision {
        actor: caller.principal.actor(),
        reason: review.reason,
        now: chrono::Utc::now(),
    };
    let metadata = caller.metadata(&state.config.country_code, None);
    units::review(&state.store, &metadata, id.as_str(), approve, decision)
        .await
        .map_err(unit_error)?;
    if approve {
        state.jobs.kick_soon(vec![
            super::job::PAYOUT.code(&super::job::business_key(id.as_str()))
        ]);
    }
    Ok(Json(reads::detail(&state.store, id.as_str()).await?))
}

/// A withdrawal from its stream: status, amounts, destination, every attempt with
/// request, response and timing, and every event.
#[utoipa::path(
    get,
    path = "/v1/withdrawals/{withdrawal_id}",
    params(("withdrawal_id" = String, Path, description = "The withdrawal id")),
    responses((status = 200, body = WithdrawalDetail), (status = 404, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn get_withdrawal(
    State(state): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<WithdrawalDetail>, Problem> {
    let id = parse_id("withdrawal_id", &id)?;
    Ok(Json(reads::detail(&state.store, id.as_str()).await?))
}

/// Withdrawals from the `withdrawal_records` projection, by user and/or status,
/// paged by id.
#[utoipa::path(
    get,
    path = "/v1/withdrawals",
    params(WithdrawalsQuery),
    responses((status = 200, body = WithdrawalsPage), (status = 422, body = ProblemBody),
              (status = 503, body = ProblemBody)),
    security(("bearer" = []))
)]
pub async fn list_withdrawals(
    State(state): State<AppState>,
    _caller: Caller,
    QueryParams(q): QueryParams<WithdrawalsQuery>,
) -> Result<Json<WithdrawalsPage>, Problem> {
    Ok(Json(reads::list(&state, q).await?))
}
