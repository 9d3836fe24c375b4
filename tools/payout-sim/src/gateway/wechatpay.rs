//! The gateway's **WeChat Pay APIv3 mode**: the same payments, refunds and scripted
//! faults as paysim, spoken in WeChat Pay's documented wire format, so factledger's
//! `services::wechatpay` adapter runs against it exactly as against WeChat.
//!
//! Turned on with [`GatewaySim::enable_wechatpay`] (or `POST
//! /control/gateway/wechatpay` with the same fields): the merchant's `mchid`,
//! `appid`, APIv3 key (32 bytes), merchant certificate serial and merchant public key
//! (SPKI PEM). The simulator mints its own platform RSA-2048 key and serial
//! ([`WechatPayPlatform`]: give its public key to factledger as a platform key).
//! From then on:
//!
//! - **pay notifications** go to the callback URL as WeChat sends them: `POST` of
//!   `{"id", "create_time", "resource_type": "encrypt-resource", "event_type":
//!   "TRANSACTION.SUCCESS", "summary", "resource": {"original_type": "transaction",
//!   "algorithm": "AEAD_AES_256_GCM", "ciphertext", "associated_data", "nonce"}}`, the
//!   resource the transaction `{mchid, appid, out_trade_no, transaction_id,
//!   trade_type, trade_state: SUCCESS, trade_state_desc, bank_type, success_time,
//!   payer: {openid}, amount: {total, payer_total, currency, payer_currency}}` sealed
//!   with the APIv3 key, and the headers `Wechatpay-Timestamp`, `Wechatpay-Nonce`,
//!   `Wechatpay-Serial`, `Wechatpay-Signature` (base64 SHA256withRSA over
//!   `timestamp\nnonce\nbody\n` with the platform key), signed afresh at each attempt.
//!   `bad_signature_callback` sends a signature over another message; duplicates,
//!   late and held notifications work as in paysim (a duplicate repeats the `id`).
//! - **`POST /v3/refund/domestic/refunds`** and **`GET
//!   /v3/refund/domestic/refunds/{out_refund_no}`** (see `wechatpay_http.rs`) check
//!   `Authorization: WECHATPAY2-SHA256-RSA2048 mchid=…,nonce_str=…,signature=…,
//!   timestamp=…,serial_no=…` against the merchant public key (401 `SIGN_ERROR`
//!   otherwise) and answer signed like notifications.
//! - **refund notifications** (`REFUND.SUCCESS`/`ABNORMAL`/`CLOSED`, `original_type`
//!   `refund`) are sent on demand for a settled refund
//!   ([`GatewaySim::wechatpay_notify_refund`], `POST
//!   /control/gateway/wechatpay/refund-notify {"refund_no", "copies"}`) to the
//!   create's `notify_url`, else the callback URL.
//!
//! Statuses: paysim's PROCESSING, SUCCEEDED, FAILED, CLOSED are WeChat's PROCESSING,
//! SUCCESS, ABNORMAL, CLOSED.

use super::{now_ms, CallbackReport, GatewaySim, Payment, Refund, RefundStatus};
use crate::plumbing::Plan;
use crate::plumbing::{ControlError, HeaderSigner, Signing};
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use rsa::pkcs1v15::{Signature, SigningKey, VerifyingKey};
use rsa::pkcs8::{DecodePublicKey, EncodePublicKey, LineEnding};
use rsa::signature::{SignatureEncoding, Signer, Verifier};
use rsa::{RsaPrivateKey, RsaPublicKey};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The signature scheme of requests and the signature type of answers.
pub const SCHEME: &str = "WECHATPAY2-SHA256-RSA2048";
/// A request's timestamp further than this from the clock is refused.
pub const TIMESTAMP_SKEW_S_MAX: i64 = 300;
/// The platform key's size (the scheme says RSA2048).
pub const PLATFORM_KEY_BITS: usize = 2048;

/// How the merchant set the mode up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WechatPaySetup {
    pub mchid: String,
    pub appid: String,
    /// 32 bytes of text, used as the AES-256-GCM key as they are.
    pub apiv3_key: String,
    /// The merchant certificate's serial our `Authorization` names.
    pub merchant_serial: String,
    /// The merchant's public key (SPKI PEM) the `Authorization` is checked with.
    pub merchant_public_key_pem: String,
}

/// The simulator's platform key, for the merchant to trust.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WechatPayPlatform {
    pub serial: String,
    pub public_key_pem: String,
}

/// The mode's keys and what refunds asked to be notified at.
pub(crate) struct WechatPayMode {
    pub setup: WechatPaySetup,
    merchant_key: VerifyingKey<Sha256>,
    platform_key: SigningKey<Sha256>,
    pub platform: WechatPayPlatform,
    cipher: Aes256Gcm,
    /// `notify_url` per refund number, from its create.
    pub notify_urls: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for WechatPayMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WechatPayMode")
            .field("mchid", &self.setup.mchid)
            .field("platform_serial", &self.platform.serial)
            .finish()
    }
}

/// `n` random characters of `[A-Za-z0-9]`.
pub(crate) fn random_text(n: usize) -> String {
    use rsa::rand_core::RngCore;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; n];
    rsa::rand_core::OsRng.fill_bytes(&mut bytes);
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// RFC 3339 in Beijing time, as WeChat writes times.
pub(crate) fn beijing(ms: i64) -> String {
    let Some(offset) = chrono::FixedOffset::east_opt(8 * 3600) else {
        return String::new();
    };
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .with_timezone(&offset)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

impl WechatPayMode {
    pub(crate) fn new(setup: WechatPaySetup) -> Result<WechatPayMode, ControlError> {
        let bad = |m: String| ControlError::BadRequest(m);
        let key: [u8; 32] = setup
            .apiv3_key
            .as_bytes()
            .try_into()
            .map_err(|_| bad("apiv3_key: must be exactly 32 bytes".into()))?;
        let merchant = RsaPublicKey::from_public_key_pem(setup.merchant_public_key_pem.trim())
            .map_err(|e| bad(format!("merchant_public_key_pem: {e}")))?;
        for (name, v) in [
            ("mchid", &setup.mchid),
            ("appid", &setup.appid),
            ("merchant_serial", &setup.merchant_serial),
        ] {
            if v.trim().is_empty() {
                return Err(bad(format!("{name}: must not be blank")));
            }
        }
        let private = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, PLATFORM_KEY_BITS)
            .map_err(|e| bad(format!("platform key: {e}")))?;
        let public_key_pem = private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .map_err(|e| bad(format!("platform key: {e}")))?;
        let serial = hex::encode_upper(random_text(20).as_bytes())[..40].to_owned();
        Ok(WechatPayMode {
            setup,
            merchant_key: VerifyingKey::<Sha256>::new(merchant),
            platform_key: SigningKey::<Sha256>::new(private),
            platform: WechatPayPlatform {
                serial,
                public_key_pem,
            },
            cipher: Aes256Gcm::new(&key.into()),
            notify_urls: Mutex::new(HashMap::new()),
        })
    }

    fn sign(&self, message: &[u8]) -> String {
        let s: Signature = self.platform_key.sign(message);
        base64::engine::general_purpose::STANDARD.encode(s.to_bytes())
    }

    /// The `Wechatpay-*` headers of `body` now; `forged` signs another message.
    pub(crate) fn signed_headers(&self, body: &[u8], forged: bool) -> Vec<(String, String)> {
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let nonce = random_text(32);
        let mut message = format!("{timestamp}\n{nonce}\n").into_bytes();
        message.extend_from_slice(body);
        message.push(b'\n');
        if forged {
            message.extend_from_slice(b"forged");
        }
        vec![
            ("Wechatpay-Timestamp".into(), timestamp),
            ("Wechatpay-Nonce".into(), nonce),
            ("Wechatpay-Serial".into(), self.platform.serial.clone()),
            ("Wechatpay-Signature".into(), self.sign(&message)),
            ("Wechatpay-Signature-Type".into(), SCHEME.into()),
        ]
    }

    /// Seals `plain` as a notification resource of `original_type`.
    fn resource(&self, original_type: &str, plain: &Value) -> Value {
        let nonce = random_text(12);
        let aad = original_type;
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(nonce.as_bytes()),
                Payload {
                    msg: plain.to_string().as_bytes(),
                    aad: aad.as_bytes(),
                },
            )
            .unwrap_or_default();
        json!({
            "original_type": original_type,
            "algorithm": "AEAD_AES_256_GCM",
            "ciphertext": base64::engine::general_purpose::STANDARD.encode(sealed),
            "associated_data": aad,
            "nonce": nonce,
        })
    }

    /// A notification's body.
    fn notification(&self, id: &str, event_type: &str, summary: &str, resource: Value) -> String {
        json!({
            "id": id,
            "create_time": beijing(now_ms()),
            "resource_type": "encrypt-resource",
            "event_type": event_type,
            "summary": summary,
            "resource": resource,
        })
        .to_string()
    }

    /// The decrypted transaction of `payment`.
    pub(crate) fn transaction(&self, p: &Payment) -> Value {
        json!({
            "mchid": self.setup.mchid,
            "appid": self.setup.appid,
            "out_trade_no": p.order_no,
            "transaction_id": p.transaction_no,
            "trade_type": "JSAPI",
            "trade_state": "SUCCESS",
            "trade_state_desc": "支付成功",
            "bank_type": "OTHERS",
            "attach": "",
            "success_time": beijing(p.paid_at_ms),
            "payer": {"openid": format!("o-sim-{}", p.order_no)},
            "amount": {"total": p.amount_minor, "payer_total": p.amount_minor,
                       "currency": p.currency, "payer_currency": p.currency},
        })
    }

    /// The pay notification of `payment` and how to sign it.
    pub(crate) fn pay_notification(
        self: &Arc<Self>,
        p: &Payment,
        signed: bool,
    ) -> (String, Signing) {
        let resource = self.resource("transaction", &self.transaction(p));
        let body = self.notification(&p.event_id, "TRANSACTION.SUCCESS", "支付成功", resource);
        (body, self.signing(!signed))
    }

    pub(crate) fn signing(self: &Arc<Self>, forged: bool) -> Signing {
        let me = self.clone();
        Signing::Headers(HeaderSigner(Arc::new(move |body: &str| {
            me.signed_headers(body.as_bytes(), forged)
        })))
    }

    /// A refund as WeChat answers it (create, query) and as a notification's
    /// resource carries it (`refund_status` instead of `status`, and `mchid`).
    pub(crate) fn refund_object(&self, r: &Refund, paid_minor: i64, notification: bool) -> Value {
        let status = wechat_status(r.status);
        let mut v = json!({
            "refund_id": r.gateway_refund_id,
            "out_refund_no": r.refund_no,
            "transaction_id": r.transaction_no,
            "out_trade_no": r.order_no,
            "channel": "ORIGINAL",
            "user_received_account": "支付用户零钱",
            "create_time": beijing(r.created_at_ms),
            "funds_account": "AVAILABLE",
            "amount": {"total": paid_minor, "refund": r.amount_minor,
                       "payer_total": paid_minor, "payer_refund": r.amount_minor,
                       "settlement_total": paid_minor, "settlement_refund": r.amount_minor,
                       "discount_refund": 0, "refund_fee": 0, "currency": r.currency},
        });
        if r.status == RefundStatus::Succeeded {
            v["success_time"] = json!(beijing(r.updated_at_ms));
        }
        if notification {
            v["mchid"] = json!(self.setup.mchid);
            v["refund_status"] = json!(status);
        } else {
            v["status"] = json!(status);
        }
        v
    }

    /// Checks a request's `Authorization` (see the module docs); why not, if not.
    pub(crate) fn check_authorization(
        &self,
        header: Option<&str>,
        method: &str,
        url: &str,
        body: &[u8],
    ) -> Result<(), String> {
        let header = header.ok_or("Authorization is missing")?;
        let fields = header
            .strip_prefix(SCHEME)
            .filter(|rest| rest.starts_with(' '))
            .ok_or_else(|| format!("Authorization's scheme is not {SCHEME}"))?;
        let mut got: HashMap<&str, &str> = HashMap::new();
        for part in fields.trim().split(',') {
            let (k, v) = part
                .trim()
                .split_once('=')
                .ok_or_else(|| format!("Authorization: {part:?} is not key=\"value\""))?;
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(|| format!("Authorization: {k} is not quoted"))?;
            if got.insert(k, v).is_some() {
                return Err(format!("Authorization: {k} given twice"));
            }
        }
        let need = |k: &str| {
            got.get(k)
                .copied()
                .ok_or_else(|| format!("Authorization: no {k}"))
        };
        let (mchid, nonce, signature, timestamp, serial) = (
            need("mchid")?,
            need("nonce_str")?,
            need("signature")?,
            need("timestamp")?,
            need("serial_no")?,
        );
        if mchid != self.setup.mchid {
            return Err(format!("mchid {mchid:?} is not the merchant's"));
        }
        if serial != self.setup.merchant_serial {
            return Err(format!(
                "serial_no {serial:?} is not the merchant certificate's"
            ));
        }
        let at: i64 = timestamp.parse().map_err(|_| "timestamp: not a number")?;
        if (chrono::Utc::now().timestamp() - at).abs() > TIMESTAMP_SKEW_S_MAX {
            return Err("timestamp: too far from the clock".into());
        }
        let mut message = format!("{method}\n{url}\n{timestamp}\n{nonce}\n").into_bytes();
        message.extend_from_slice(body);
        message.push(b'\n');
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .map_err(|_| "signature: not base64")?;
        let signature =
            Signature::try_from(bytes.as_slice()).map_err(|_| "signature: malformed")?;
        self.merchant_key
            .verify(&message, &signature)
            .map_err(|_| "signature: does not match the request".to_owned())
    }
}

/// paysim's refund status in WeChat's words.
pub fn wechat_status(s: RefundStatus) -> &'static str {
    match s {
        RefundStatus::Processing => "PROCESSING",
        RefundStatus::Succeeded => "SUCCESS",
        RefundStatus::Failed => "ABNORMAL",
        RefundStatus::Closed => "CLOSED",
    }
}

impl GatewaySim {
    /// Turns the WeChat Pay mode on (see the module docs); the platform key to trust.
    pub fn enable_wechatpay(
        &self,
        setup: WechatPaySetup,
    ) -> Result<WechatPayPlatform, ControlError> {
        let mode = Arc::new(WechatPayMode::new(setup)?);
        let platform = mode.platform.clone();
        *self.shared().wechatpay_slot() = Some(mode);
        Ok(platform)
    }

    /// The mode, when on.
    pub(crate) fn wechatpay(&self) -> Option<Arc<WechatPayMode>> {
        self.shared().wechatpay_slot().clone()
    }

    /// The platform key, when the mode is on.
    pub fn wechatpay_platform(&self) -> Option<WechatPayPlatform> {
        self.wechatpay().map(|m| m.platform.clone())
    }

    /// What payment `transaction_no` paid (a refund's `amount.total`).
    pub(crate) fn paid_minor(&self, transaction_no: &str) -> Option<i64> {
        let s = self.lock();
        s.by_transaction
            .get(transaction_no)
            .map(|&i| s.payments[i].amount_minor)
    }

    /// Sends the refund notification of settled refund `refund_no` (`copies` times,
    /// the same `id`) to its `notify_url`, else the callback URL.
    pub async fn wechatpay_notify_refund(
        &self,
        refund_no: &str,
        copies: u32,
    ) -> Result<CallbackReport, ControlError> {
        let mode = self
            .wechatpay()
            .ok_or_else(|| ControlError::BadRequest("the WeChat Pay mode is off".into()))?;
        let refund = self
            .peek(refund_no)
            .ok_or_else(|| ControlError::NotFound(format!("no refund has {refund_no:?}")))?;
        let (event_type, summary) = match refund.status {
            RefundStatus::Succeeded => ("REFUND.SUCCESS", "退款成功"),
            RefundStatus::Failed => ("REFUND.ABNORMAL", "退款异常"),
            RefundStatus::Closed => ("REFUND.CLOSED", "退款关闭"),
            RefundStatus::Processing => {
                return Err(ControlError::BadRequest(format!(
                    "refund {refund_no:?} is PROCESSING: WeChat notifies settled refunds only"
                )))
            }
        };
        let url = mode
            .notify_urls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(refund_no)
            .cloned()
            .or_else(|| self.settings().callback_url)
            .ok_or_else(|| ControlError::BadRequest("no notify_url nor callback URL".into()))?;
        let paid = self
            .paid_minor(&refund.transaction_no)
            .unwrap_or(refund.amount_minor);
        let resource = mode.resource("refund", &mode.refund_object(&refund, paid, true));
        let id = format!(
            "EV-REFUND-{}-{}",
            refund.gateway_refund_id,
            wechat_status(refund.status)
        );
        let plan = Plan {
            url,
            signing: mode.signing(false),
            signed: true,
            body: mode.notification(&id, event_type, summary, resource),
            copies: copies.clamp(1, 5),
            event_id: id,
            order_no: refund.order_no.clone(),
            transaction_no: refund.transaction_no.clone(),
        };
        Ok(self.deliver(self.sim.generation(), &plan).await)
    }
}
