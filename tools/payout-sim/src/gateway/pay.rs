//! Payments and their pay callbacks: recording a payment, planning its callback per
//! the order's next fault, delivering it (now, later, or at release) through the
//! simulator's shared callback POST, and the callback log.

use super::{
    next, now_ms, GatewayFault, GatewaySim, Payment, PaymentRequest, SIGNATURE_HEADER, WRONG_SECRET,
};
use crate::gateway_state::GatewayCallbackAttempt;
use crate::plumbing::Plan;
use crate::plumbing::{ControlError, Delivery, Signing};
use crate::CALLBACK_LOG_MAX;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// What became of a payment's callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CallbackState {
    /// Every copy was answered 2xx.
    Delivered,
    /// Some copy was not, after every attempt.
    Undelivered,
    /// `late_callback`: it goes out later, in the background.
    Delayed,
    /// `hold_callback`: it goes out at `POST /control/gateway/release`.
    Held,
    /// No callback URL is configured.
    Off,
}

/// A payment's callback as the payment (or release) answer reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackReport {
    pub event_id: String,
    pub state: CallbackState,
    /// The last attempt's status (of the last copy), if it got one.
    pub http_status: Option<u16>,
}

/// The answer to a payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentOutcome {
    pub payment: Payment,
    pub callback: CallbackReport,
}

impl GatewaySim {
    /// The payer pays: records the payment and delivers its callback as its order's
    /// next fault says (before returning, unless delayed or held).
    pub async fn pay(&self, request: PaymentRequest) -> PaymentOutcome {
        let generation = self.sim.generation();
        let (payment, plan, fault) = {
            let mut guard = self.lock();
            let s = &mut *guard;
            s.counts.payment += 1;
            let fault = s
                .callback_faults
                .get_mut(&request.order_no)
                .and_then(VecDeque::pop_front);
            let shared = self.shared();
            let payment = Payment {
                transaction_no: next(&shared.next_transaction, "txn"),
                order_no: request.order_no,
                method: request.method,
                account_id: request.account_id,
                amount_minor: request.amount_minor,
                currency: request.currency,
                paid_at_ms: request.paid_at_ms.unwrap_or_else(now_ms),
                event_id: next(&shared.next_event, "gevt"),
            };
            s.by_transaction
                .insert(payment.transaction_no.clone(), s.payments.len());
            s.payments.push(payment.clone());
            let wechatpay = self.wechatpay();
            let copies = if fault == Some(GatewayFault::DuplicateCallback) {
                2
            } else {
                1
            };
            let alipay = shared.alipay.clone();
            let plan = s.settings.callback_url.clone().map(|url| {
                let signed = fault != Some(GatewayFault::BadSignatureCallback);
                if let Some(mode) = &alipay {
                    // Alipay mode: the notification form carries its own RSA2 sign.
                    let body = super::alipay::notification(
                        mode,
                        &payment,
                        &payment.event_id,
                        "TRADE_SUCCESS",
                        !signed,
                    );
                    return super::alipay::plan(
                        url,
                        body,
                        copies,
                        signed,
                        &payment,
                        &payment.event_id,
                    );
                }
                let secret = if signed {
                    s.settings.callback_secret.clone()
                } else {
                    WRONG_SECRET.to_owned()
                };
                let (body, signing) = match &wechatpay {
                    Some(mode) => mode.pay_notification(&payment, signed),
                    None => (
                        payment.callback_body().to_string(),
                        Signing::Hmac {
                            header: SIGNATURE_HEADER,
                            secret,
                        },
                    ),
                };
                Plan {
                    url,
                    signing,
                    signed,
                    body,
                    copies,
                    event_id: payment.event_id.clone(),
                    order_no: payment.order_no.clone(),
                    transaction_no: payment.transaction_no.clone(),
                }
            });
            if let (Some(plan), Some(GatewayFault::HoldCallback)) = (&plan, &fault) {
                s.held
                    .entry(plan.order_no.clone())
                    .or_default()
                    .push(plan.clone());
            }
            (payment, plan, fault)
        };
        let report = |state, http_status| CallbackReport {
            event_id: payment.event_id.clone(),
            state,
            http_status,
        };
        let callback = match (plan, fault) {
            (None, _) => report(CallbackState::Off, None),
            (Some(_), Some(GatewayFault::HoldCallback)) => report(CallbackState::Held, None),
            (Some(plan), Some(GatewayFault::LateCallback { delay_ms })) => {
                let me = self.clone();
                tokio::spawn(async move {
                    if me.sim.sleep(generation, delay_ms).await {
                        me.deliver(generation, &plan).await;
                    }
                });
                report(CallbackState::Delayed, None)
            }
            (Some(plan), _) => self.deliver(generation, &plan).await,
        };
        PaymentOutcome { payment, callback }
    }

    /// Delivers `plan` (every copy, one after the other).
    pub(super) async fn deliver(&self, generation: u64, plan: &Plan) -> CallbackReport {
        let mut state = CallbackState::Delivered;
        let mut http_status = None;
        for copy in 1..=plan.copies {
            let last = self
                .sim
                .plumbing()
                .post_callback(generation, &plan.url, &plan.signing, &plan.body, |d| {
                    self.log(generation, plan, copy, d)
                })
                .await;
            http_status = last.as_ref().and_then(|d| d.http_status);
            if !last.is_some_and(|d| d.delivered) {
                state = CallbackState::Undelivered;
            }
        }
        CallbackReport {
            event_id: plan.event_id.clone(),
            state,
            http_status,
        }
    }

    fn log(&self, generation: u64, plan: &Plan, copy: u32, d: &Delivery) {
        let mut s = self.lock();
        // An attempt of before a reset is not this run's.
        if self.sim.generation() != generation {
            return;
        }
        if s.callbacks.len() >= CALLBACK_LOG_MAX {
            s.callbacks.pop_front();
        }
        s.callbacks.push_back(GatewayCallbackAttempt {
            event_id: plan.event_id.clone(),
            order_no: plan.order_no.clone(),
            transaction_no: plan.transaction_no.clone(),
            copy,
            attempt: d.attempt,
            http_status: d.http_status,
            error: d.error.clone(),
            delivered: d.delivered,
            signed: plan.signed,
            at_ms: now_ms(),
        });
    }

    /// Delivers the held callbacks of `order_no` now (404 when none are held).
    pub async fn release(&self, order_no: &str) -> Result<Vec<CallbackReport>, ControlError> {
        let generation = self.sim.generation();
        let plans = self.lock().held.remove(order_no).ok_or_else(|| {
            ControlError::NotFound(format!("no callback of order_no {order_no:?} is held"))
        })?;
        let mut reports = Vec::new();
        for plan in &plans {
            reports.push(self.deliver(generation, plan).await);
        }
        Ok(reports)
    }
}
