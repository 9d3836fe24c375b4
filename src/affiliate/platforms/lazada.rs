//! Lazada Open Platform's documented request signing (*Signature algorithm*): every
//! request parameter except `sign` (and byte-array parameters), sorted by name in
//! ASCII order, concatenated as `{key}{value}`, the API path in front (and a body,
//! when one is sent, behind), HMAC-SHA256 keyed with the app secret, upper-case hex.
//! Common parameters: `app_key`, `timestamp` (epoch milliseconds, within 7200 s of
//! UTC), `access_token`, `sign_method=sha256`, `sign`. Errors come as
//! `{"code": "IllegalAccessToken", "type": "ISV", "message": "…", "request_id": "…"}`
//! (`code` `"0"` is success).
//!
//! Lazada's affiliate conversion report is not part of the Open Platform's public API
//! reference, so Lazada orders are pulled with the generic adapter
//! (`HttpPlatformAdapter`) today; this module is what a Lazada adapter signs with once
//! the endpoint is documented to us.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Codes of Lazada's error envelope worth a retry (throttling, service hiccups).
pub const RETRYABLE_CODES: [&str; 3] = ["ApiCallLimit", "ServiceTimeout", "ISP.ServiceUnavailable"];

/// The documented signature: upper-case hex HMAC-SHA256 over the path and the sorted
/// parameters (empty values skipped, as the reference Java sample does).
pub fn sign(
    app_secret: &str,
    api_path: &str,
    params: &[(&str, &str)],
    body: Option<&str>,
) -> String {
    let mut sorted: Vec<&(&str, &str)> = params
        .iter()
        .filter(|(k, v)| *k != "sign" && !k.is_empty() && !v.is_empty())
        .collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut input = String::from(api_path);
    for (k, v) in sorted {
        input.push_str(k);
        input.push_str(v);
    }
    if let Some(b) = body {
        input.push_str(b);
    }
    // Infallible: HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()).expect("any key length");
    mac.update(input.as_bytes());
    hex::encode_upper(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documentation's worked example (`/test/api`, `foo=1, bar=2, foo_bar=3,
    /// foobar=4` → `/test/apibar2foo1foo_bar3foobar4`); it publishes no key or digest,
    /// so the digest was computed independently (Python's `hmac`, key `helloworld`).
    #[test]
    fn the_signature_is_over_the_path_and_the_sorted_parameters() {
        let params = [
            ("foo", "1"),
            ("bar", "2"),
            ("foo_bar", "3"),
            ("foobar", "4"),
            ("sign", "x"),
        ];
        assert_eq!(
            sign("helloworld", "/test/api", &params, None),
            "BD011266EC150C787B2201495AA2D6F326BB6910DE77E84EA28F5215DCD7FA5E"
        );
    }
}
