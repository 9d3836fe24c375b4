//! The gateway's **Alipay mode**: the same payments, refunds, courses and scripted
//! faults as paysim (`crate::gateway`), spoken in Alipay's open-API wire format
//! (public-key mode), written from Alipay's documentation independently of
//! factledger's adapter, so the two check each other:
//!
//! - **Keys.** The mode holds "Alipay's" RSA key pair (2048-bit, generated at start
//!   unless given: [`AlipayMode::alipay_public_key_pem`] is what the receiver
//!   configures as the Alipay public key) and the **app public key** it was given:
//!   every request must be signed with the app's private half.
//! - **Pay notifications.** Each payment (`POST /gateway/payments`, as in paysim)
//!   is notified as Alipay's async notification: `POST` of an
//!   `application/x-www-form-urlencoded` form (`notify_id` = the payment's event id,
//!   `notify_type=trade_status_sync`, `trade_status=TRADE_SUCCESS`, `trade_no` = the
//!   transaction number, `out_trade_no` = the order number, `seller_id` = the
//!   payment's account id, `total_amount` in yuan, `gmt_payment` in Beijing time,
//!   `app_id`, `charset=utf-8`, `version=1.0`, `sign_type=RSA2`, `sign`). `sign` is
//!   RSA2 over every other field but `sign_type`, sorted, `k=v` joined with `&`.
//!   `bad_signature_callback` sends a `sign` made over other content;
//!   `duplicate_callback` sends the same notification (same `notify_id`) twice.
//!   [`GatewaySim::alipay_notify`] (`POST /control/gateway/alipay/notify`) sends
//!   another notification of a recorded trade with another status and a new
//!   `notify_id` (TRADE_FINISHED after TRADE_SUCCESS, TRADE_CLOSED …).
//! - **The open API** (`POST /gateway.do`, `alipay_http.rs`): common parameters in
//!   the form body or the query string (a name given twice is refused), `sign`
//!   checked with the app public key over every parameter but `sign`, sorted;
//!   `alipay.trade.refund` and `alipay.trade.fastpay.refund.query` with their
//!   `biz_content`. Answers are `{"<method>_response": {...}, "sign": "..."}`, `sign`
//!   RSA2 with Alipay's key over the node's exact text.

use super::{GatewaySim, Payment};
use crate::plumbing::Plan;
use crate::plumbing::Signing;
use base64::Engine as _;
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::{DecodePublicKey, EncodePublicKey, LineEnding};
use rsa::signature::{SignatureEncoding, Signer, Verifier};
use rsa::RsaPrivateKey;
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The RSA modulus of the key pair the mode generates.
pub const ALIPAY_KEY_BITS: usize = 2048;
/// The trade statuses a notification may carry.
pub const TRADE_STATUSES: [&str; 4] = [
    "WAIT_BUYER_PAY",
    "TRADE_CLOSED",
    "TRADE_SUCCESS",
    "TRADE_FINISHED",
];

/// The Alipay mode's keys and identity; cheap to clone. `Debug` shows no key.
#[derive(Clone)]
pub struct AlipayMode(Arc<Keys>);

struct Keys {
    app_id: String,
    app_public: VerifyingKey<Sha256>,
    alipay_key: SigningKey<Sha256>,
    alipay_public_pem: String,
}

impl std::fmt::Debug for AlipayMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlipayMode({})", self.0.app_id)
    }
}

/// A public key from PEM (SPKI or PKCS#1) or bare base64 SPKI DER.
fn public_key(text: &str) -> Result<rsa::RsaPublicKey, String> {
    let text = text.trim();
    if let Ok(k) = rsa::RsaPublicKey::from_public_key_pem(text) {
        return Ok(k);
    }
    if let Ok(k) = rsa::RsaPublicKey::from_pkcs1_pem(text) {
        return Ok(k);
    }
    let der = base64::engine::general_purpose::STANDARD
        .decode(text.split_whitespace().collect::<String>())
        .map_err(|_| "the app public key is neither PEM nor base64 DER".to_owned())?;
    rsa::RsaPublicKey::from_public_key_der(&der)
        .map_err(|e| format!("the app public key is not an RSA public key: {e}"))
}

impl AlipayMode {
    /// For app `app_id` whose requests verify with `app_public_key`; "Alipay's" key
    /// pair is generated now (2048-bit).
    pub fn new(app_id: &str, app_public_key: &str) -> Result<AlipayMode, String> {
        let key = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, ALIPAY_KEY_BITS)
            .map_err(|e| format!("generating the Alipay key: {e}"))?;
        AlipayMode::with_key(app_id, app_public_key, key)
    }

    /// As [`AlipayMode::new`], with "Alipay's" private key given.
    pub fn with_key(
        app_id: &str,
        app_public_key: &str,
        alipay_key: RsaPrivateKey,
    ) -> Result<AlipayMode, String> {
        if app_id.trim().is_empty() {
            return Err("the app id is blank".into());
        }
        let app_public = VerifyingKey::new(public_key(app_public_key)?);
        let alipay_public_pem = alipay_key
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| e.to_string())?;
        Ok(AlipayMode(Arc::new(Keys {
            app_id: app_id.to_owned(),
            app_public,
            alipay_key: SigningKey::new(alipay_key),
            alipay_public_pem,
        })))
    }

    pub fn app_id(&self) -> &str {
        &self.0.app_id
    }

    /// "Alipay's" public key (SPKI PEM): what the receiver verifies with.
    pub fn alipay_public_key_pem(&self) -> &str {
        &self.0.alipay_public_pem
    }

    /// `base64(SHA256withRSA(content))` with Alipay's key.
    pub fn sign(&self, content: &str) -> String {
        let s: Signature = self.0.alipay_key.sign(content.as_bytes());
        base64::engine::general_purpose::STANDARD.encode(s.to_bytes())
    }

    /// Whether `sign` is the app's signature over `content`.
    pub fn app_signed(&self, content: &str, sign: &str) -> bool {
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(sign.trim()) else {
            return false;
        };
        let Ok(sig) = Signature::try_from(bytes.as_slice()) else {
            return false;
        };
        self.0.app_public.verify(content.as_bytes(), &sig).is_ok()
    }

    /// A signed answer: `{"<key>": <node>, "sign": "<sign over node's text>"}`.
    pub fn answer(&self, response_key: &str, node: &serde_json::Value) -> String {
        let text = node.to_string();
        let sign = self.sign(&text);
        format!("{{\"{response_key}\":{text},\"sign\":\"{sign}\"}}")
    }
}

/// Alipay's signing string: non-empty values, names in `unsigned` left out, sorted
/// by name, `k=v` joined with `&`.
pub fn signing_string(params: &BTreeMap<String, String>, unsigned: &[&str]) -> String {
    params
        .iter()
        .filter(|(k, v)| !v.is_empty() && !unsigned.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Fen → `"88.88"`.
pub fn yuan(fen: i64) -> String {
    let sign = if fen < 0 { "-" } else { "" };
    let abs = fen.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// `"88.88"` (at most two decimals, digits only) → fen.
pub fn parse_yuan(text: &str) -> Option<i64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 12 || !digits(whole) || !digits(frac) || frac.len() > 2 {
        return None;
    }
    if text.contains('.') && frac.is_empty() {
        return None;
    }
    let f: i64 = format!("{frac:0<2}").parse().ok()?;
    whole.parse::<i64>().ok()?.checked_mul(100)?.checked_add(f)
}

/// Epoch ms → `yyyy-MM-dd HH:mm:ss`, Beijing time (UTC+8).
pub fn beijing(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms + 8 * 3_600_000)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// The notification form of `payment` in `trade_status`, signed (or, `forged`,
/// with a `sign` over other content), as an encoded body.
pub fn notification(
    mode: &AlipayMode,
    payment: &Payment,
    notify_id: &str,
    trade_status: &str,
    forged: bool,
) -> String {
    let amount = yuan(payment.amount_minor);
    let mut form: BTreeMap<String, String> = [
        ("notify_time", beijing(super::now_ms())),
        ("notify_type", "trade_status_sync".to_owned()),
        ("notify_id", notify_id.to_owned()),
        ("app_id", mode.app_id().to_owned()),
        ("charset", "utf-8".to_owned()),
        ("version", "1.0".to_owned()),
        ("sign_type", "RSA2".to_owned()),
        ("trade_no", payment.transaction_no.clone()),
        ("out_trade_no", payment.order_no.clone()),
        ("buyer_id", "2088102177846880".to_owned()),
        ("seller_id", payment.account_id.clone()),
        ("trade_status", trade_status.to_owned()),
        ("total_amount", amount.clone()),
        ("receipt_amount", amount.clone()),
        ("buyer_pay_amount", amount),
        ("subject", "payout-sim order".to_owned()),
        ("gmt_create", beijing(payment.paid_at_ms - 3_000)),
        ("gmt_payment", beijing(payment.paid_at_ms)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let content = signing_string(&form, &["sign", "sign_type"]);
    let sign = if forged {
        mode.sign(&format!("{content}&forged=1"))
    } else {
        mode.sign(&content)
    };
    form.insert("sign".into(), sign);
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &form {
        s.append_pair(k, v);
    }
    s.finish()
}

/// The callback plan of one notification (the body carries its own signature).
pub(crate) fn plan(
    url: String,
    body: String,
    copies: u32,
    signed: bool,
    p: &Payment,
    notify_id: &str,
) -> Plan {
    Plan {
        url,
        signing: Signing::Form,
        signed,
        body,
        copies,
        event_id: notify_id.to_owned(),
        order_no: p.order_no.clone(),
        transaction_no: p.transaction_no.clone(),
    }
}

impl GatewaySim {
    /// The Alipay mode, when the simulator speaks Alipay.
    pub fn alipay(&self) -> Option<AlipayMode> {
        self.shared().alipay.clone()
    }

    /// Sends another notification of recorded trade `transaction_no` in
    /// `trade_status`, with a new `notify_id` (404 when the trade is unknown, 400 for
    /// another status or outside the Alipay mode).
    pub async fn alipay_notify(
        &self,
        transaction_no: &str,
        trade_status: &str,
    ) -> Result<super::CallbackReport, crate::plumbing::ControlError> {
        use crate::plumbing::ControlError;
        let mode = self.alipay().ok_or_else(|| {
            ControlError::BadRequest("the simulator is not in Alipay mode".into())
        })?;
        if !TRADE_STATUSES.contains(&trade_status) {
            return Err(ControlError::BadRequest(format!(
                "trade_status {trade_status:?} is none of {TRADE_STATUSES:?}"
            )));
        }
        let (payment, url) = {
            let s = self.lock();
            let p = s
                .by_transaction
                .get(transaction_no)
                .map(|&i| s.payments[i].clone())
                .ok_or_else(|| ControlError::NotFound(format!("no trade {transaction_no:?}")))?;
            (p, s.settings.callback_url.clone())
        };
        let url = url.ok_or_else(|| ControlError::BadRequest("no callback URL is set".into()))?;
        let notify_id = super::next(&self.shared().next_event, "gevt");
        let body = notification(&mode, &payment, &notify_id, trade_status, false);
        let plan = plan(url, body, 1, true, &payment, &notify_id);
        Ok(self.deliver(self.sim.generation(), &plan).await)
    }
}
