//! Verifying a notification body `{"signedPayload": "<JWS>"}` end to end, as Apple's
//! `SignedDataVerifier.verify_and_decode_notification` does offline: the outer JWS
//! (alg, chain to the pinned root at its `signedDate`, ES256 signature), the app it
//! names (`bundleId`, `environment`, and `appAppleId` in Production), then each nested
//! JWS the same way (`signedTransactionInfo`: bundle id and environment;
//! `signedRenewalInfo`: environment). Pure: no clock, no network, so the normaliser
//! can run it again on the same bytes and get the same answer.

use super::config::AppStoreConfig;
use super::payload::{Environment, Notification};
use super::{chain, jws, Failure, Refusal};
use serde_json::Value;

/// The body field that carries the notification.
pub const SIGNED_PAYLOAD: &str = "signedPayload";

/// A notification that passed every check: typed, and as the JSON the inbox stores.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub notification: Notification,
    /// The decoded payload, `data.signedTransactionInfo` / `data.signedRenewalInfo`
    /// replaced by their verified decodings `data.transactionInfo` /
    /// `data.renewalInfo`.
    pub decoded: Value,
}

/// Checks notifications against one configuration.
#[derive(Debug, Clone)]
pub struct AppStoreVerifier {
    config: AppStoreConfig,
}

fn at(place: &'static str) -> impl Fn(Failure) -> Refusal {
    move |failure| Refusal { at: place, failure }
}

impl AppStoreVerifier {
    pub fn new(config: AppStoreConfig) -> AppStoreVerifier {
        AppStoreVerifier { config }
    }

    pub fn config(&self) -> &AppStoreConfig {
        &self.config
    }

    /// One compact JWS verified: its decoded payload.
    pub fn decode_signed(&self, compact: &str) -> Result<Value, Failure> {
        let jws = jws::parse(compact)?;
        if jws.alg != jws::ALG_ES256 {
            return Err(Failure::Algorithm(jws.alg.clone()));
        }
        if jws.x5c.is_empty() {
            return Err(Failure::Chain("the header has no x5c chain".into()));
        }
        let signed_date = jws
            .payload
            .get("signedDate")
            .and_then(Value::as_i64)
            .ok_or_else(|| Failure::Malformed("the payload has no signedDate".into()))?;
        let key = chain::verify(&jws.x5c, &self.config.root_der, signed_date)?;
        jws.verify_es256(&key)?;
        Ok(jws.payload)
    }

    fn check_environment(&self, got: Option<&str>) -> Result<(), Failure> {
        let want = self.config.environment;
        match got.and_then(Environment::parse) {
            Some(e) if e == want && got == Some(want.as_str()) => Ok(()),
            _ => Err(Failure::Environment {
                got: got.unwrap_or("(none)").to_owned(),
                want: want.as_str(),
            }),
        }
    }

    fn check_bundle(&self, got: Option<&str>) -> Result<(), Failure> {
        if got == Some(self.config.bundle_id.as_str()) {
            return Ok(());
        }
        Err(Failure::BundleId {
            got: got.unwrap_or("(none)").to_owned(),
            want: self.config.bundle_id.clone(),
        })
    }

    /// The app block of a notification (`data`, `summary`, `appData` or
    /// `externalPurchaseToken`, whichever it carries) names this app.
    fn check_app(&self, payload: &Value) -> Result<(), Failure> {
        let block = ["data", "summary", "appData", "externalPurchaseToken"]
            .iter()
            .find_map(|k| payload.get(*k).filter(|v| v.is_object()).map(|v| (*k, v)));
        let Some((kind, block)) = block else {
            return self.check_bundle(None);
        };
        let s = |k: &str| block.get(k).and_then(Value::as_str);
        self.check_bundle(s("bundleId"))?;
        if self.config.environment == Environment::Production {
            let got = block.get("appAppleId").and_then(Value::as_i64);
            if got != self.config.app_apple_id {
                return Err(Failure::AppAppleId {
                    got,
                    want: self.config.app_apple_id,
                });
            }
        }
        if kind == "externalPurchaseToken" {
            // Apple's rule: a sandbox token's id starts with SANDBOX.
            let sandbox = s("externalPurchaseId").is_some_and(|id| id.starts_with("SANDBOX"));
            let env = if sandbox { "Sandbox" } else { "Production" };
            return self.check_environment(Some(env));
        }
        self.check_environment(s("environment"))
    }

    /// A raw notification body verified and decoded (see the module doc).
    pub fn verify_body(&self, body: &[u8]) -> Result<Verified, Refusal> {
        let outer = crate::infra::json::parse_unique(body)
            .map_err(|e| Failure::Malformed(format!("the body: {e}")))
            .map_err(at("body"))?;
        let compact = outer
            .get(SIGNED_PAYLOAD)
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::Malformed("the body has no signedPayload string".into()))
            .map_err(at(SIGNED_PAYLOAD))?;
        let mut payload = self.decode_signed(compact).map_err(at(SIGNED_PAYLOAD))?;
        self.check_app(&payload).map_err(at(SIGNED_PAYLOAD))?;
        if let Some(data) = payload.get_mut("data").and_then(Value::as_object_mut) {
            if let Some(signed) = data.remove("signedTransactionInfo") {
                let place = "data.signedTransactionInfo";
                let compact = signed
                    .as_str()
                    .ok_or_else(|| Failure::Malformed("not a string".into()))
                    .map_err(at(place))?;
                let t = self.decode_signed(compact).map_err(at(place))?;
                self.check_bundle(t.get("bundleId").and_then(Value::as_str))
                    .map_err(at(place))?;
                self.check_environment(t.get("environment").and_then(Value::as_str))
                    .map_err(at(place))?;
                data.insert("transactionInfo".into(), t);
            }
            if let Some(signed) = data.remove("signedRenewalInfo") {
                let place = "data.signedRenewalInfo";
                let compact = signed
                    .as_str()
                    .ok_or_else(|| Failure::Malformed("not a string".into()))
                    .map_err(at(place))?;
                let r = self.decode_signed(compact).map_err(at(place))?;
                self.check_environment(r.get("environment").and_then(Value::as_str))
                    .map_err(at(place))?;
                data.insert("renewalInfo".into(), r);
            }
        }
        let notification: Notification = serde_json::from_value(payload.clone())
            .map_err(|e| Failure::Malformed(format!("not a V2 notification: {e}")))
            .map_err(at(SIGNED_PAYLOAD))?;
        Ok(Verified {
            notification,
            decoded: payload,
        })
    }
}
