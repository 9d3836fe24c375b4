//! [`AlipayGateway`]: a [`PaymentGateway`] speaking Alipay's open API (开放平台,
//! public-key mode) as Alipay documents it, and what `tools/payout-sim`'s Alipay
//! mode simulates:
//! - **pay notifications** arrive through the callback inbox as Alipay's async
//!   notification form, verified with RSA2 and normalised ([`notify`]); the
//!   composition root's `server::gateway_alipay` registers them;
//! - **refunds** are `alipay.trade.refund`, **refund queries**
//!   `alipay.trade.fastpay.refund.query`: a `POST` to the gateway URL
//!   (`https://openapi.alipay.com/gateway.do`) of a form with the common parameters
//!   `app_id, method, format=JSON, charset=utf-8, sign_type=RSA2, timestamp`
//!   (`yyyy-MM-dd HH:mm:ss`, Beijing time), `version=1.0`, `biz_content` (JSON) and
//!   `sign`: RSA2 with our app private key over the sorted parameters ([`sign`]). The
//!   answer's `sign` covers the raw text of its response node and is checked with the
//!   Alipay public key ([`answer`]); an unsigned or forged answer is `Unknown`.
//!
//! Money: `refund_amount`, `total_amount`, `refund_fee` are yuan strings with two
//! decimals, converted exactly to and from i64 fen ([`wire`]); this API's currency is
//! CNY, and a refund in another currency is refused before sending.
//!
//! # How refund answers map
//!
//! Same rule as every gateway: `Failed` only when Alipay says no refund was or will
//! be made under this `out_request_no`; anything that leaves the money possibly moved
//! is `Unknown` and the refund stays REFUNDING, queried again, never re-numbered.
//! Alipay deduplicates a trade's refunds by `out_request_no` (a failed or unanswered
//! refund is retried with the same number, as its docs require).
//!
//! | `alipay.trade.refund` answer (signed)                          | [`RefundAnswer`] |
//! |-----------------------------------------------------------------|------------------|
//! | `code` 10000, `fund_change` `Y` (and `refund_fee`, the trade's refunded total, at least ours) | `Succeeded` (`gateway_refund_id` `<trade_no>:<out_request_no>`) |
//! | `code` 10000, `fund_change` `N` or absent (a repeat of a number already refunded, or not settled yet: Alipay says to query) | `Processing` |
//! | `code` 40004 with a sub-code of [`answer::REFUSALS`] (`ACQ.TRADE_NOT_EXIST`, `ACQ.REFUND_AMT_NOT_EQUAL_TOTAL`, `ACQ.TRADE_STATUS_ERROR`, `ACQ.TRADE_HAS_FINISHED`, `ACQ.SELLER_BALANCE_NOT_ENOUGH`, …) | `Failed`, reason `"<sub_code>: <sub_msg>"` |
//! | 40004 `ACQ.SYSTEM_ERROR`, `ACQ.DISCORDANT_REPEAT_REQUEST` (the number was used with another amount) or any other sub-code; `code` 20000; 40001/40002/40006 (our request or key); anything else | `Unknown` |
//! | not HTTP 200, timeout, connection error, not JSON, no response node, no `sign` or a `sign` that fails, an answer about another trade | `Unknown` |
//!
//! | `alipay.trade.fastpay.refund.query` answer (signed)              | [`RefundAnswer`] |
//! |-------------------------------------------------------------------|------------------|
//! | `code` 10000, `refund_status` `REFUND_SUCCESS` (and `refund_amount` ours) | `Succeeded` |
//! | `code` 10000 without `refund_status` (Alipay: "not received, or the refund failed; retry the refund with the same out_request_no") | `Unknown` starting with [`NOT_FOUND_PREFIX`]: the service re-sends the refund under the same number, which Alipay deduplicates |
//! | 40004 `ACQ.TRADE_NOT_EXIST`                                        | `Unknown` with [`NOT_FOUND_PREFIX`] (the re-send then gets a definite refusal) |
//! | another `refund_status`, any other code, and every transport or signature problem as above | `Unknown` |
//!
//! A query needs the trade (Alipay's query names `trade_no` or `out_trade_no`), so
//! this gateway answers [`PaymentGateway::query_refund_of`]; the bare
//! [`PaymentGateway::query_refund`] (a refund number alone) is `Unknown`.
//!
//! Local refusals (nothing sent): a refund number blank or over 64 characters
//! (Alipay's `out_request_no` limit), an amount not positive, a currency not CNY:
//! `Failed` for a refund, `Unknown` for a query.

pub mod answer;
pub mod config;
pub mod notify;
pub mod sign;
pub mod wire;

pub use config::{AlipayConfig, AlipayConfigError};
pub use notify::{NotifyRefusal, NotifyVerifier};
pub use sign::{AlipayPublicKey, AppPrivateKey};

use super::gateway::{PaymentGateway, PaymentNotice, RefundAnswer, RefundRequest};
use super::gateway_http::{CONNECT_TIMEOUT_MAX, NOT_FOUND_PREFIX, RESPONSE_BYTES_MAX};
use crate::infra::outbound::{describe, read_body};
use serde_json::Value;

/// Longest `out_request_no` (Alipay: String(64)).
pub const OUT_REQUEST_NO_CHARS_MAX: usize = 64;

/// Why the gateway could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("alipay gateway: {0}")]
pub struct AlipayGatewayError(pub String);

/// The adapter; cheap to share (one connection pool).
#[derive(Debug, Clone)]
pub struct AlipayGateway {
    config: AlipayConfig,
    url: reqwest::Url,
    client: reqwest::Client,
}

impl AlipayGateway {
    pub fn new(config: AlipayConfig) -> Result<AlipayGateway, AlipayGatewayError> {
        let url = reqwest::Url::parse(&config.gateway_url)
            .map_err(|e| AlipayGatewayError(format!("gateway URL: {e}")))?;
        if config.timeout.is_zero() {
            return Err(AlipayGatewayError("timeout must be positive".into()));
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(CONNECT_TIMEOUT_MAX.min(config.timeout))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| AlipayGatewayError(e.to_string()))?;
        Ok(AlipayGateway {
            config,
            url,
            client,
        })
    }

    pub fn config(&self) -> &AlipayConfig {
        &self.config
    }

    /// POSTs one signed call of `method`: the HTTP status and body, or why none came.
    async fn call(&self, method: &str, biz_content: &str) -> Result<(u16, Vec<u8>), String> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let timestamp = wire::format_beijing_time(now_ms);
        let params = answer::signed_params(
            &self.config.app_id,
            method,
            &timestamp,
            biz_content,
            &self.config.app_private_key,
        );
        let body = wire::encode_form(params.iter().map(|(k, v)| (*k, v.as_str())));
        let response = self
            .client
            .post(self.url.clone())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded;charset=utf-8",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| describe(&e, self.config.timeout))?;
        let status = response.status().as_u16();
        let bytes = read_body(response, RESPONSE_BYTES_MAX)
            .await
            .map_err(|e| format!("HTTP {status}, then the body failed: {e}"))?;
        Ok((status, bytes))
    }
}

/// Why `request` cannot be sent, if it cannot.
fn not_sendable(request: &RefundRequest) -> Option<String> {
    let no = &request.refund_no;
    if no.trim().is_empty() || no.chars().count() > OUT_REQUEST_NO_CHARS_MAX {
        return Some(format!(
            "refund_no: must be 1 to {OUT_REQUEST_NO_CHARS_MAX} characters (out_request_no)"
        ));
    }
    if request.amount_minor <= 0 {
        return Some(format!(
            "amount_minor: must be positive, got {}",
            request.amount_minor
        ));
    }
    if request.currency != wire::CURRENCY {
        return Some(format!(
            "currency: {:?}; Alipay's open API refunds {} only",
            request.currency,
            wire::CURRENCY
        ));
    }
    None
}

#[async_trait::async_trait]
impl PaymentGateway for AlipayGateway {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn parse_payment(&self, data: &Value) -> Result<PaymentNotice, String> {
        notify::parse_payment(data)
    }

    #[tracing::instrument(skip_all, fields(gateway = %self.config.name, refund_no = %request.refund_no))]
    async fn refund(&self, request: &RefundRequest) -> RefundAnswer {
        if let Some(reason) = not_sendable(request) {
            return RefundAnswer::Failed {
                reason: format!("not sent: {reason}"),
                response: String::new(),
            };
        }
        let biz = answer::refund_biz_content(request);
        let answer = match self.call(answer::METHOD_REFUND, &biz).await {
            Ok((status, body)) => {
                answer::map_refund(request, status, &body, &self.config.alipay_public_key)
            }
            Err(error) => RefundAnswer::Unknown { error },
        };
        if let RefundAnswer::Unknown { error } = &answer {
            tracing::warn!(%error, "alipay refund outcome unknown");
        }
        answer
    }

    async fn query_refund(&self, refund_no: &str) -> RefundAnswer {
        RefundAnswer::Unknown {
            error: format!(
                "not sent: Alipay's refund query names the trade; refund {refund_no:?} is \
                 queried with its request (query_refund_of)"
            ),
        }
    }

    #[tracing::instrument(skip_all, fields(gateway = %self.config.name, refund_no = %request.refund_no))]
    async fn query_refund_of(&self, request: &RefundRequest) -> RefundAnswer {
        if let Some(reason) = not_sendable(request) {
            return RefundAnswer::Unknown {
                error: format!("not sent: {reason}"),
            };
        }
        let biz = answer::query_biz_content(request);
        let answer = match self.call(answer::METHOD_REFUND_QUERY, &biz).await {
            Ok((status, body)) => {
                answer::map_query(request, status, &body, &self.config.alipay_public_key)
            }
            Err(error) => RefundAnswer::Unknown { error },
        };
        if let RefundAnswer::Unknown { error } = &answer {
            if !error.starts_with(NOT_FOUND_PREFIX) {
                tracing::warn!(%error, "alipay refund query unanswered");
            }
        }
        answer
    }
}

#[cfg(test)]
mod tests;
