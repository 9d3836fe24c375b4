//! The open API's requests and answers: building a signed request (common
//! parameters, `biz_content`, `sign`), reading the signed answer envelope, and the
//! mapping of `alipay.trade.refund` and `alipay.trade.fastpay.refund.query` answers
//! to [`RefundAnswer`] (the tables are in the parent module's docs).
//!
//! An answer is `{"<method with _ for .>_response": {...}, "sign": "..."}`; `sign`
//! is RSA2 over the **exact raw text** of the response node as it appears in the
//! body (Alipay's SDKs cut it out of the text; re-serialising would change it). So the
//! node's text is located by scanning the validated body, never rebuilt.

use super::sign::{signing_string, AlipayPublicKey, AppPrivateKey, REQUEST_UNSIGNED};
use super::wire::{format_yuan, parse_yuan};
use crate::infra::json::parse_unique;
use crate::services::gateway::{truncate, RefundAnswer, RefundRequest, GATEWAY_RESPONSE_BYTES_MAX};
use crate::services::gateway_http::NOT_FOUND_PREFIX;
use serde_json::{json, Value};

/// `alipay.trade.refund`.
pub const METHOD_REFUND: &str = "alipay.trade.refund";
/// `alipay.trade.fastpay.refund.query`.
pub const METHOD_REFUND_QUERY: &str = "alipay.trade.fastpay.refund.query";
/// The API version of every method (fixed by Alipay).
pub const VERSION: &str = "1.0";
/// `code` of a call that succeeded (接口调用成功).
pub const CODE_SUCCESS: &str = "10000";
/// `code` of a service not available now (服务不可用): nothing is known.
pub const CODE_UNAVAILABLE: &str = "20000";
/// `code` of a business refusal (业务处理失败); `sub_code` says which.
pub const CODE_BUSINESS_FAILED: &str = "40004";
/// The query's `refund_status` of a refund paid back.
pub const REFUND_SUCCESS: &str = "REFUND_SUCCESS";
/// Alipay's sub-code for an unknown trade.
pub const TRADE_NOT_EXIST: &str = "ACQ.TRADE_NOT_EXIST";
/// Most bytes of an answer quoted in an `Unknown` error.
const QUOTED_BYTES_MAX: usize = 512;

/// The `sub_code`s of `alipay.trade.refund` that Alipay documents as refusing the
/// request outright (nothing was refunded; the same request would be refused again):
/// a `Failed`. Every other sub-code is `Unknown` — notably `ACQ.SYSTEM_ERROR` (retry
/// with the same parameters) and `ACQ.DISCORDANT_REPEAT_REQUEST` (the refund number
/// was used with another amount: a refund under it may exist).
pub const REFUSALS: &[&str] = &[
    "ACQ.INVALID_PARAMETER",
    "ACQ.TRADE_NOT_EXIST",
    "ACQ.TRADE_HAS_FINISHED",
    "ACQ.TRADE_STATUS_ERROR",
    "ACQ.TRADE_NOT_ALLOWED",
    "ACQ.SELLER_BALANCE_NOT_ENOUGH",
    "ACQ.REASON_TRADE_BEEN_FREEZEN",
    "ACQ.REASON_TRADE_REFUND_FEE_ERR",
    "ACQ.REASON_TRADE_STATUS_INVALID",
    "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL",
    "ACQ.REFUND_FEE_ERROR",
    "ACQ.REFUND_CHARGE_ERROR",
    "ACQ.BUYER_ERROR",
    "ACQ.ONLINE_TRADE_VOUCHER_NOT_ALLOW_REFUND",
];

/// The answer node's name of `method`: `alipay.trade.refund` →
/// `alipay_trade_refund_response`.
pub fn response_key(method: &str) -> String {
    format!("{}_response", method.replace('.', "_"))
}

/// The form parameters of one signed request, in sending order (`sign` last).
pub fn signed_params(
    app_id: &str,
    method: &str,
    timestamp: &str,
    biz_content: &str,
    key: &AppPrivateKey,
) -> Vec<(&'static str, String)> {
    let mut params: Vec<(&'static str, String)> = vec![
        ("app_id", app_id.to_owned()),
        ("method", method.to_owned()),
        ("format", "JSON".to_owned()),
        ("charset", "utf-8".to_owned()),
        ("sign_type", super::sign::SIGN_TYPE_RSA2.to_owned()),
        ("timestamp", timestamp.to_owned()),
        ("version", VERSION.to_owned()),
        ("biz_content", biz_content.to_owned()),
    ];
    let content = signing_string(
        params.iter().map(|(k, v)| (*k, v.as_str())),
        REQUEST_UNSIGNED,
    );
    params.push(("sign", key.sign(&content)));
    params
}

/// `alipay.trade.refund`'s `biz_content`: the trade both ways, the amount in yuan,
/// our refund number as `out_request_no` (Alipay's idempotency key per trade).
pub fn refund_biz_content(request: &RefundRequest) -> String {
    json!({
        "out_trade_no": request.order_no,
        "trade_no": request.transaction_no,
        "refund_amount": format_yuan(request.amount_minor),
        "out_request_no": request.refund_no,
        "refund_reason": "refund",
    })
    .to_string()
}

/// `alipay.trade.fastpay.refund.query`'s `biz_content`.
pub fn query_biz_content(request: &RefundRequest) -> String {
    json!({
        "out_trade_no": request.order_no,
        "trade_no": request.transaction_no,
        "out_request_no": request.refund_no,
    })
    .to_string()
}

fn unknown(error: String) -> RefundAnswer {
    RefundAnswer::Unknown { error }
}

fn quoted(raw: &str) -> String {
    truncate(raw, QUOTED_BYTES_MAX)
}

/// The end (exclusive) of the string starting at `i` (a `"`).
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The end (exclusive) of the JSON value starting at `i`, in text known to be JSON.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => Some(
            (i..b.len())
                .find(|&j| matches!(b[j], b',' | b'}' | b']') || b[j].is_ascii_whitespace())
                .unwrap_or(b.len()),
        ),
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The exact text of top-level member `key`'s value in `raw`, a JSON object that
/// [`parse_unique`] accepted.
fn member_text<'a>(raw: &'a str, key: &str) -> Option<&'a str> {
    let b = raw.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        match b.get(i)? {
            b'}' => return None,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(b, i)?;
        let name: String = serde_json::from_str(&raw[i..key_end]).ok()?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let end = value_end(b, i)?;
        if name == key {
            return Some(&raw[i..end]);
        }
        i = end;
    }
}

/// A verified answer node: its fields, and the whole body as stored.
#[derive(Debug)]
pub struct Node {
    pub fields: serde_json::Map<String, Value>,
    pub response: String,
}

impl Node {
    pub fn text(&self, name: &str) -> Option<&str> {
        self.fields
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// The answer node of `method`, its signature checked with `key`; `Err` is the
/// `Unknown` error (an unreadable body, a missing node, an unsigned or forged one).
pub fn verified_node(
    method: &str,
    status: u16,
    body: &[u8],
    key: &AlipayPublicKey,
) -> Result<Node, String> {
    if status != 200 {
        let text = String::from_utf8_lossy(body);
        return Err(format!("HTTP {status}: {}", quoted(&text)));
    }
    let raw = std::str::from_utf8(body).map_err(|_| "HTTP 200 with a body not UTF-8".to_owned())?;
    let doc = parse_unique(body).map_err(|e| format!("HTTP 200, unreadable answer: {e}"))?;
    let node_key = response_key(method);
    let node_text = member_text(raw, &node_key)
        .ok_or_else(|| format!("HTTP 200 without {node_key}: {}", quoted(raw)))?;
    let Some(sign) = doc.get("sign").and_then(Value::as_str) else {
        return Err(format!(
            "HTTP 200, an unsigned answer (not trusted): {}",
            quoted(raw)
        ));
    };
    key.verify(node_text, sign).map_err(|e| {
        format!(
            "HTTP 200, the answer's sign fails ({e}; not trusted): {}",
            quoted(raw)
        )
    })?;
    let fields = match doc.get(&node_key) {
        Some(Value::Object(m)) => m.clone(),
        _ => return Err(format!("HTTP 200, {node_key} is not an object")),
    };
    Ok(Node {
        fields,
        response: truncate(raw, GATEWAY_RESPONSE_BYTES_MAX),
    })
}

/// Whether the answer is about `request`'s trade (a field absent says nothing).
fn about_trade(node: &Node, request: &RefundRequest) -> Result<(), String> {
    for (field, ours) in [
        ("out_trade_no", &request.order_no),
        ("trade_no", &request.transaction_no),
    ] {
        if let Some(theirs) = node.text(field) {
            if theirs != ours {
                return Err(format!(
                    "the answer is about {field} {theirs:?}, not {ours:?}"
                ));
            }
        }
    }
    Ok(())
}

fn code_and_sub(node: &Node) -> (String, String, String) {
    let get = |n: &str| node.text(n).unwrap_or("").to_owned();
    (get("code"), get("sub_code"), get("sub_msg"))
}

/// Our id of an Alipay refund: Alipay has none of its own; a refund is the trade and
/// our `out_request_no`.
pub fn gateway_refund_id(request: &RefundRequest) -> String {
    format!("{}:{}", request.transaction_no, request.refund_no)
}

/// An `alipay.trade.refund` answer (see the parent module's first table).
pub fn map_refund(
    request: &RefundRequest,
    status: u16,
    body: &[u8],
    key: &AlipayPublicKey,
) -> RefundAnswer {
    let node = match verified_node(METHOD_REFUND, status, body, key) {
        Ok(n) => n,
        Err(e) => return unknown(e),
    };
    let (code, sub_code, sub_msg) = code_and_sub(&node);
    match code.as_str() {
        CODE_SUCCESS => {
            if let Err(e) = about_trade(&node, request) {
                return unknown(e);
            }
            match node.text("fund_change") {
                Some("Y") => {
                    // refund_fee is the trade's refunded total so far: at least ours.
                    match node.text("refund_fee").map(parse_yuan) {
                        Some(Ok(t)) if t < request.amount_minor => {
                            return unknown(format!(
                                "fund_change Y with refund_fee {t} fen, under the {} refunded",
                                request.amount_minor
                            ))
                        }
                        Some(Err(e)) => return unknown(format!("refund_fee: {e}")),
                        _ => {}
                    }
                    RefundAnswer::Succeeded {
                        gateway_refund_id: gateway_refund_id(request),
                        response: node.response,
                    }
                }
                // N (or absent): this call moved no money now; it may have before
                // (a repeated out_request_no) — the query says.
                _ => RefundAnswer::Processing {
                    response: node.response,
                },
            }
        }
        CODE_BUSINESS_FAILED if REFUSALS.contains(&sub_code.as_str()) => RefundAnswer::Failed {
            reason: format!("{sub_code}: {sub_msg}"),
            response: node.response,
        },
        _ => unknown(format!(
            "code {code:?} sub_code {sub_code:?} ({sub_msg}): no definite answer: {}",
            quoted(&node.response)
        )),
    }
}

/// An `alipay.trade.fastpay.refund.query` answer (see the parent module's second
/// table).
pub fn map_query(
    request: &RefundRequest,
    status: u16,
    body: &[u8],
    key: &AlipayPublicKey,
) -> RefundAnswer {
    let node = match verified_node(METHOD_REFUND_QUERY, status, body, key) {
        Ok(n) => n,
        Err(e) => return unknown(e),
    };
    let (code, sub_code, sub_msg) = code_and_sub(&node);
    match code.as_str() {
        CODE_SUCCESS => {
            if let Err(e) = about_trade(&node, request) {
                return unknown(e);
            }
            if let Some(theirs) = node.text("out_request_no") {
                if theirs != request.refund_no {
                    return unknown(format!(
                        "the answer is about out_request_no {theirs:?}, not {:?}",
                        request.refund_no
                    ));
                }
            }
            match node.text("refund_status") {
                Some(REFUND_SUCCESS) => {
                    let amount = node.text("refund_amount").map(parse_yuan);
                    match amount {
                        Some(Ok(a)) if a != request.amount_minor => unknown(format!(
                            "REFUND_SUCCESS of {a} fen for a refund of {}",
                            request.amount_minor
                        )),
                        Some(Err(e)) => unknown(format!("refund_amount: {e}")),
                        _ => RefundAnswer::Succeeded {
                            gateway_refund_id: gateway_refund_id(request),
                            response: node.response,
                        },
                    }
                }
                None => unknown(format!(
                    "{NOT_FOUND_PREFIX}: no refund_status for out_request_no {:?} (Alipay: \
                     not received, or not refunded); it may be re-sent under the same number",
                    request.refund_no
                )),
                Some(other) => unknown(format!("unknown refund_status {other:?}")),
            }
        }
        CODE_BUSINESS_FAILED if sub_code == TRADE_NOT_EXIST => unknown(format!(
            "{NOT_FOUND_PREFIX}: {TRADE_NOT_EXIST} ({sub_msg}) for trade {:?}",
            request.transaction_no
        )),
        _ => unknown(format!(
            "code {code:?} sub_code {sub_code:?} ({sub_msg}): no definite answer: {}",
            quoted(&node.response)
        )),
    }
}
