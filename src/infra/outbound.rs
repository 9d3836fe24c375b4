//! Calls to providers over HTTP (payout providers, payment gateways): what their
//! adapters share to read an answer within a bound and to say why none came.

/// Why a request got no answer, with the error's source chain (connection refused …).
pub fn describe(e: &reqwest::Error, timeout: std::time::Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {} ms", timeout.as_millis());
    }
    std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

/// The body, at most `max` bytes.
pub async fn read_body(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(format!("an answer larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
