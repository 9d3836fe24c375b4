//! The values of Alipay's wire, converted exactly at the boundary:
//! - **amounts** are decimal strings of yuan (`"88.88"`, `"20"`, `"0.01"`): CNY,
//!   whose ISO 4217 exponent is 2, so they become i64 fen (minor units). At most two
//!   decimals, digits only: a sign, an exponent, a third decimal, a bare `.` or an
//!   empty string is refused, never rounded. No floats anywhere.
//! - **times** are `yyyy-MM-dd HH:mm:ss` in Beijing time (Asia/Shanghai, UTC+8 all
//!   year: China has no daylight saving time since 1991), both ways.
//! - **forms** (a notification's body, a request's parameters) are
//!   `application/x-www-form-urlencoded` in UTF-8. A name sent twice is refused: the
//!   signature covers one value per name, and two readers must not see two values
//!   (the JSON path refuses repeated keys for the same reason).

use chrono::{FixedOffset, NaiveDateTime, TimeZone};
use std::collections::BTreeMap;

/// The currency of every amount on the domestic open API.
pub const CURRENCY: &str = "CNY";
/// Beijing time's offset from UTC, in seconds (no DST).
const BEIJING_OFFSET_S: i32 = 8 * 3600;
/// The time format of `timestamp`, `gmt_payment`, `notify_time` …
const TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";
/// Most digits before the decimal point (Alipay's limit is 100,000,000 yuan; this
/// keeps any fen value far inside i64).
const YUAN_DIGITS_MAX: usize = 12;
/// Most fields a form may carry (a notification has about 30).
pub const FORM_FIELDS_MAX: usize = 128;

/// `"88.88"` → 8888 fen; every refusal says why.
pub fn parse_yuan(text: &str) -> Result<i64, String> {
    let (whole, fraction) = match text.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || whole.len() > YUAN_DIGITS_MAX {
        return Err(format!(
            "{text:?} is not a yuan amount (digits, at most two decimals)"
        ));
    }
    let fen_part = match fraction {
        None => 0,
        Some(f) if digits(f) && f.len() <= 2 => {
            let n: i64 = f.parse().map_err(|_| format!("{text:?}: bad decimals"))?;
            if f.len() == 1 {
                n * 10
            } else {
                n
            }
        }
        Some(_) => {
            return Err(format!(
                "{text:?} is not a yuan amount (at most two decimals, digits only)"
            ))
        }
    };
    let yuan: i64 = whole.parse().map_err(|_| format!("{text:?}: too large"))?;
    yuan.checked_mul(100)
        .and_then(|f| f.checked_add(fen_part))
        .ok_or_else(|| format!("{text:?}: too large"))
}

/// 8888 fen → `"88.88"` (always two decimals). Only non-negative amounts exist on
/// this wire; a negative is a caller's bug, formatted with its sign so Alipay refuses
/// it rather than a different amount being sent.
pub fn format_yuan(fen: i64) -> String {
    let sign = if fen < 0 { "-" } else { "" };
    let abs = fen.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// `"2016-07-19 14:10:47"` (Beijing time) → epoch milliseconds.
pub fn parse_beijing_time(text: &str) -> Result<i64, String> {
    if text.len() != 19 {
        return Err(format!("{text:?} is not yyyy-MM-dd HH:mm:ss"));
    }
    let naive = NaiveDateTime::parse_from_str(text, TIME_FORMAT)
        .map_err(|e| format!("{text:?} is not yyyy-MM-dd HH:mm:ss: {e}"))?;
    let offset = FixedOffset::east_opt(BEIJING_OFFSET_S).ok_or("bad offset")?;
    offset
        .from_local_datetime(&naive)
        .single()
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| format!("{text:?} is not an instant"))
}

/// Epoch milliseconds → `yyyy-MM-dd HH:mm:ss` in Beijing time.
pub fn format_beijing_time(ms: i64) -> String {
    let offset = FixedOffset::east_opt(BEIJING_OFFSET_S).expect("8 h is a valid offset");
    match offset.timestamp_millis_opt(ms).single() {
        Some(t) => t.format(TIME_FORMAT).to_string(),
        None => String::new(),
    }
}

/// A form body as name → value (URL-decoded). Refused: not UTF-8 after decoding, a
/// name sent twice, an empty name, more than [`FORM_FIELDS_MAX`] fields, a `charset`
/// other than UTF-8.
pub fn parse_form(body: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (name, value) in form_urlencoded::parse(body) {
        // form_urlencoded decodes lossily; a replacement character means the bytes
        // were not UTF-8, and the signed text is then not what we would read.
        if name.contains('\u{FFFD}') || value.contains('\u{FFFD}') {
            return Err(format!("field {name:?} is not UTF-8"));
        }
        if name.is_empty() {
            return Err("a field has an empty name".into());
        }
        if out.len() >= FORM_FIELDS_MAX {
            return Err(format!("more than {FORM_FIELDS_MAX} fields"));
        }
        if out.insert(name.to_string(), value.into_owned()).is_some() {
            return Err(format!("field {name:?} is sent more than once"));
        }
    }
    if let Some(charset) = out.get("charset") {
        if !charset.eq_ignore_ascii_case("utf-8") && !charset.eq_ignore_ascii_case("utf8") {
            return Err(format!(
                "charset {charset:?}: only utf-8 is read (our requests ask for utf-8)"
            ));
        }
    }
    Ok(out)
}

/// `params` as an `application/x-www-form-urlencoded` body.
pub fn encode_form<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        s.append_pair(k, v);
    }
    s.finish()
}
