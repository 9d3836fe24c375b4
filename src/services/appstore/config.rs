//! What the App Store provider is configured with, parsed at start (a malformed value
//! refuses the start, naming its variable): the app's bundle id, the environment the
//! notifications must come from, the app's Apple id (required in Production, as in
//! Apple's libraries), and optionally another root to pin instead of Apple Root CA -
//! G3 (tests pin the simulator's). Nothing here is secret: the chain is public and the
//! proof is Apple's signature, not a shared key.

use super::payload::Environment;
use std::sync::Arc;

/// The app's bundle id; setting it turns the provider on.
pub const ENV_BUNDLE_ID: &str = "FACTLEDGER_APPSTORE_BUNDLE_ID";
/// `Production` or `Sandbox`.
pub const ENV_ENVIRONMENT: &str = "FACTLEDGER_APPSTORE_ENVIRONMENT";
/// The app's Apple id (`appAppleId`); required in Production.
pub const ENV_APP_APPLE_ID: &str = "FACTLEDGER_APPSTORE_APP_APPLE_ID";
/// A file holding the root to pin instead of Apple Root CA - G3 (DER or PEM).
pub const ENV_ROOT_CERT_FILE: &str = "FACTLEDGER_APPSTORE_ROOT_CERT_FILE";
/// Longest bundle id (App Store Connect allows 155 characters).
pub const BUNDLE_ID_CHARS_MAX: usize = 155;

/// The App Store provider's settings.
#[derive(Clone, PartialEq, Eq)]
pub struct AppStoreConfig {
    pub bundle_id: String,
    pub environment: Environment,
    pub app_apple_id: Option<i64>,
    /// The pinned root's DER.
    pub root_der: Arc<[u8]>,
}

impl std::fmt::Debug for AppStoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppStoreConfig")
            .field("bundle_id", &self.bundle_id)
            .field("environment", &self.environment)
            .field("app_apple_id", &self.app_apple_id)
            .field("root_sha256", &super::chain::fingerprint(&self.root_der))
            .finish()
    }
}

/// A setting that is missing or malformed; names the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {rule}")]
pub struct ConfigError {
    pub var: &'static str,
    pub rule: String,
}

fn err(var: &'static str, rule: impl Into<String>) -> ConfigError {
    ConfigError {
        var,
        rule: rule.into(),
    }
}

impl AppStoreConfig {
    /// Settings pinning Apple Root CA - G3.
    pub fn new(
        bundle_id: &str,
        environment: Environment,
        app_apple_id: Option<i64>,
    ) -> Result<AppStoreConfig, ConfigError> {
        if bundle_id.is_empty()
            || bundle_id.len() > BUNDLE_ID_CHARS_MAX
            || !bundle_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(err(
                ENV_BUNDLE_ID,
                format!("1 to {BUNDLE_ID_CHARS_MAX} of A-Z a-z 0-9 . -, e.g. com.example.app"),
            ));
        }
        if app_apple_id.is_some_and(|id| id <= 0) {
            return Err(err(ENV_APP_APPLE_ID, "a positive integer"));
        }
        if environment == Environment::Production && app_apple_id.is_none() {
            return Err(err(
                ENV_APP_APPLE_ID,
                "required in Production (the app's Apple id, checked on every notification)",
            ));
        }
        Ok(AppStoreConfig {
            bundle_id: bundle_id.to_owned(),
            environment,
            app_apple_id,
            root_der: Arc::from(super::root::apple_root_ca_g3()),
        })
    }

    /// These settings pinning another root (DER or PEM bytes).
    pub fn pinning(mut self, root: &[u8]) -> Result<AppStoreConfig, ConfigError> {
        let der = super::chain::root_from_bytes(root).map_err(|e| err(ENV_ROOT_CERT_FILE, e))?;
        self.root_der = Arc::from(der);
        Ok(self)
    }

    /// From variables (`lookup`) and files (`read`): `None` when
    /// [`ENV_BUNDLE_ID`] is unset (the provider is off).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        read: impl Fn(&str) -> Result<Vec<u8>, String>,
    ) -> Result<Option<AppStoreConfig>, ConfigError> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let Some(bundle_id) = get(ENV_BUNDLE_ID) else {
            return Ok(None);
        };
        let environment = get(ENV_ENVIRONMENT)
            .ok_or_else(|| err(ENV_ENVIRONMENT, "required: Production or Sandbox"))
            .and_then(|e| {
                Environment::parse(e.trim())
                    .ok_or_else(|| err(ENV_ENVIRONMENT, "Production or Sandbox"))
            })?;
        let app_apple_id = get(ENV_APP_APPLE_ID)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| err(ENV_APP_APPLE_ID, "a positive integer"))
            })
            .transpose()?;
        let config = AppStoreConfig::new(bundle_id.trim(), environment, app_apple_id)?;
        match get(ENV_ROOT_CERT_FILE) {
            None => Ok(Some(config)),
            Some(path) => {
                let bytes = read(&path).map_err(|e| err(ENV_ROOT_CERT_FILE, e))?;
                config.pinning(&bytes).map(Some)
            }
        }
    }
}
