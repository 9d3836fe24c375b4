//! Which adapter each platform gets, and its credentials, from the environment (or
//! files named by it), read once at start (`serve`): a missing or malformed one is
//! refused there, naming the variable, never later in a sync round. Values are
//! never logged; secrets are [`PlatformSecret`]s.
//!
//! | platform | variables (`<C>`: a synced country, e.g. `ID`) |
//! | --- | --- |
//! | TikTok Shop | `FACTLEDGER_PLATFORM_TIKTOK_APP_KEY`, `…_APP_SECRET`, `…_ACCESS_TOKEN_<C>` |
//! | Shopee | `FACTLEDGER_PLATFORM_SHOPEE_APP_ID_<C>`, `…_APP_SECRET_<C>`, optional `…_URL_<C>` (else `…_URL`) |
//! | Lazada, Traveloka | none (generic adapter) |
//!
//! Every secret may instead be given as a file: `<VARIABLE>_FILE=/path` (its content,
//! without the trailing newline), so it need not sit in the process environment.

use super::shopee::{market_currency, ShopeeAccount};
use super::tiktok::{tiktok_token_var, TikTokCredentials};
use super::PlatformSecret;
use factledger_aggregates::affiliate::{CountryCode, Platform};
use std::collections::BTreeMap;

/// Longest credential accepted (app keys, secrets and tokens are far shorter).
pub const CREDENTIAL_CHARS_MAX: usize = 1_024;

/// A platform's adapter and what it needs.
#[derive(Debug, Clone)]
pub enum Protocol {
    TikTok(TikTokCredentials),
    Shopee(BTreeMap<CountryCode, ShopeeAccount>),
    /// The generic adapter (no documented affiliate API to speak).
    Generic,
}

/// The environment and a file reader (tests pass their own).
pub struct Source<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub read_file: &'a dyn Fn(&str) -> Result<String, String>,
}

impl Source<'_> {
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.trim().is_empty())
    }

    /// A credential from `name` or the file `name_FILE` names; refused when missing,
    /// empty, too long or holding whitespace or control characters.
    fn credential(&self, name: &str) -> Result<String, String> {
        let file_var = format!("{name}_FILE");
        let value = match (self.var(name), self.var(&file_var)) {
            (Some(_), Some(_)) => {
                return Err(format!("{name} and {file_var} are both set; set one"))
            }
            (Some(v), None) => v,
            (None, Some(path)) => (self.read_file)(path.trim())
                .map_err(|e| format!("{file_var}: {e}"))?
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
            (None, None) => return Err(format!("{name} (or {file_var}) is not set")),
        };
        if value.is_empty()
            || value.chars().count() > CREDENTIAL_CHARS_MAX
            || value.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "{name} is malformed: 1 to {CREDENTIAL_CHARS_MAX} characters, no spaces or control characters"
            ));
        }
        Ok(value)
    }
}

fn prefix(platform: Platform) -> String {
    format!("FACTLEDGER_PLATFORM_{}", platform.as_str())
}

/// The adapter of `platform` for these countries, with its credentials.
pub fn protocol(
    platform: Platform,
    base_url: &str,
    countries: &[CountryCode],
    source: &Source<'_>,
) -> Result<Protocol, String> {
    let p = prefix(platform);
    match platform {
        Platform::TikTok => {
            let mut access_tokens = BTreeMap::new();
            for c in countries {
                let token = source.credential(&tiktok_token_var(*c))?;
                access_tokens.insert(*c, PlatformSecret::new(&token));
            }
            Ok(Protocol::TikTok(TikTokCredentials {
                app_key: source.credential(&format!("{p}_APP_KEY"))?,
                app_secret: PlatformSecret::new(&source.credential(&format!("{p}_APP_SECRET"))?),
                access_tokens,
            }))
        }
        Platform::Shopee => {
            let mut accounts = BTreeMap::new();
            for c in countries {
                if market_currency(c.as_str()).is_none() {
                    return Err(format!("SHOPEE:{c}: {c} is not a Shopee affiliate market"));
                }
                let id_var = format!("{p}_APP_ID_{c}");
                let app_id = source.credential(&id_var)?;
                if !app_id.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("{id_var} is malformed: Shopee AppIds are digits"));
                }
                accounts.insert(
                    *c,
                    ShopeeAccount {
                        base_url: source
                            .var(&format!("{p}_URL_{c}"))
                            .unwrap_or_else(|| base_url.to_owned())
                            .trim()
                            .to_owned(),
                        app_id,
                        secret: PlatformSecret::new(
                            &source.credential(&format!("{p}_APP_SECRET_{c}"))?,
                        ),
                    },
                );
            }
            Ok(Protocol::Shopee(accounts))
        }
        _ => Ok(Protocol::Generic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> CountryCode {
        CountryCode::parse("ID").unwrap()
    }

    fn run(vars: &[(&str, &str)], platform: Platform) -> Result<Protocol, String> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let env = move |k: &str| vars.get(k).cloned();
        let read_file = |p: &str| match p {
            "/run/secrets/tt" => Ok("file-secret\n".to_owned()),
            _ => Err("no such file".to_owned()),
        };
        protocol(
            platform,
            "http://x",
            &[id()],
            &Source {
                env: &env,
                read_file: &read_file,
            },
        )
    }

    #[test]
    fn missing_or_malformed_credentials_are_refused_naming_the_variable() {
        let ok = [
            ("FACTLEDGER_PLATFORM_TIKTOK_APP_KEY", "38abcd"),
            (
                "FACTLEDGER_PLATFORM_TIKTOK_APP_SECRET_FILE",
                "/run/secrets/tt",
            ),
            ("FACTLEDGER_PLATFORM_TIKTOK_ACCESS_TOKEN_ID", "tok"),
        ];
        let Ok(Protocol::TikTok(c)) = run(&ok, Platform::TikTok) else {
            panic!("TikTok credentials");
        };
        assert_eq!(c.app_secret.expose(), "file-secret");
        assert!(!format!("{c:?}").contains("file-secret"), "{c:?}");
        let e = run(&ok[..2], Platform::TikTok).unwrap_err();
        assert!(
            e.contains("FACTLEDGER_PLATFORM_TIKTOK_ACCESS_TOKEN_ID"),
            "{e}"
        );
        let e = run(
            &[
                ok[0],
                ("FACTLEDGER_PLATFORM_TIKTOK_APP_SECRET", "a b"),
                ok[2],
            ],
            Platform::TikTok,
        )
        .unwrap_err();
        assert!(
            e.contains("FACTLEDGER_PLATFORM_TIKTOK_APP_SECRET is malformed") && !e.contains("a b"),
            "{e}"
        );
        let e = run(
            &[
                ok[0],
                ("FACTLEDGER_PLATFORM_TIKTOK_APP_SECRET_FILE", "/nope"),
                ok[2],
            ],
            Platform::TikTok,
        )
        .unwrap_err();
        assert!(e.contains("APP_SECRET_FILE: no such file"), "{e}");
        let e = run(
            &[("FACTLEDGER_PLATFORM_SHOPEE_APP_ID_ID", "12ab")],
            Platform::Shopee,
        )
        .unwrap_err();
        assert!(
            e.contains("FACTLEDGER_PLATFORM_SHOPEE_APP_ID_ID is malformed"),
            "{e}"
        );
        let e = run(
            &[("FACTLEDGER_PLATFORM_SHOPEE_APP_ID_ID", "123")],
            Platform::Shopee,
        )
        .unwrap_err();
        assert!(
            e.contains("FACTLEDGER_PLATFORM_SHOPEE_APP_SECRET_ID"),
            "{e}"
        );
        assert!(matches!(
            run(&[], Platform::Traveloka),
            Ok(Protocol::Generic)
        ));
    }
}
