//! `serve`'s provider flags (issue 33 item 6): which payout provider pays withdrawals
//! and which cash gateway takes payments and refunds, per partition where countries
//! differ, with every secret read through [`Secrets`] (environment or file, never the
//! command line; a missing or malformed one refuses the start, naming it).

use super::secrets::{env_lookup, Choice, Secrets};
use factledger::server::gateways::GatewayCallbacks;
use factledger::services::gateway::PaymentGateway;
use std::sync::Arc;

/// `--payout-provider xendit`.
const XENDIT: &str = "xendit";
/// The payout providers `--payout-provider` names.
const PAYOUT_PROVIDERS: &[&str] = &[XENDIT];
/// `--gateway paysim`: `tools/payout-sim`'s own gateway protocol (tests, demos).
const PAYSIM: &str = "paysim";
/// `--gateway wechatpay`: WeChat Pay APIv3.
const WECHATPAY: &str = "wechatpay";
/// `--gateway alipay`: Alipay's open API.
const ALIPAY: &str = "alipay";
/// The gateways `--gateway` names.
const GATEWAYS: &[&str] = &[PAYSIM, WECHATPAY, ALIPAY];

/// How `serve` pays withdrawals. The provider's API secret and callback token come
/// from the environment or files only (`FACTLEDGER_PAYOUT_SECRET`,
/// `FACTLEDGER_PAYOUT_CALLBACK_TOKEN`, per partition `…_<CODE>`; see [`Secrets`]),
/// never from the command line.
#[derive(clap::Args, Clone)]
pub(super) struct PayoutArgs {
    /// The payout provider: `xendit`, or `-` for none (approved withdrawals wait in
    /// PAYOUT_PENDING); per partition `ID=xendit;PH=xendit;CN=-`.
    #[arg(long, env = "FACTLEDGER_PAYOUT_PROVIDER", hide_env_values = true)]
    pub(super) payout_provider: Option<String>,
    /// The provider's API base URL (default: the provider's production URL, e.g.
    /// `https://api.xendit.co`; `tools/payout-sim` in tests and demos). Setting it alone
    /// chooses `xendit`.
    #[arg(long, env = "FACTLEDGER_PAYOUT_URL", hide_env_values = true)]
    pub(super) payout_url: Option<String>,
    /// Withdrawal limits and risk rule as JSON (`{"default": {...}, "currencies":
    /// {"IDR": {...}}}`, fields of `payouts::policy::Limits`). Default: built in.
    #[arg(long, env = "FACTLEDGER_WITHDRAWAL_POLICY", hide_env_values = true)]
    pub(super) withdrawal_policy: Option<std::path::PathBuf>,
    /// argon2id cost of payment passwords: memory KiB, iterations, lanes (default
    /// OWASP's minimum; lower only for benchmarks).
    #[arg(
        long,
        env = "FACTLEDGER_PASSWORD_COST",
        default_value = "19456,2,1",
        hide_env_values = true
    )]
    pub(super) payment_password_cost: String,
    /// How long a payout claim lasts without renewal (ms): a dead worker's payouts
    /// are taken over after it (the claim is renewed while a round runs).
    #[arg(long, env = "FACTLEDGER_PAYOUT_LEASE_MS", default_value_t = factledger::payouts::job::PAYOUT.lease_ms, hide_env_values = true)]
    pub(super) payout_lease_ms: i64,
}

impl PayoutArgs {
    /// The capability settings and the provider these flags and the environment name
    /// for `partition` (`None`: an unpartitioned service).
    pub(super) fn wiring(
        self,
        partition: Option<&str>,
    ) -> anyhow::Result<(
        factledger::payouts::Payouts,
        Option<factledger::server::payouts::PayoutProviderConfig>,
        i64,
    )> {
        use anyhow::Context;
        let policy = match &self.withdrawal_policy {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("--withdrawal-policy {}", path.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("--withdrawal-policy {}", path.display()))?
            }
            None => factledger::payouts::policy::PayoutPolicy::default(),
        };
        let cost: Vec<u32> = self
            .payment_password_cost
            .split(',')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .context("--payment-password-cost: three integers: memory KiB, iterations, lanes")?;
        let [memory_kib, iterations, lanes] = cost[..] else {
            anyhow::bail!("--payment-password-cost: three integers: memory KiB, iterations, lanes");
        };
        let payouts = factledger::payouts::Payouts {
            policy: std::sync::Arc::new(policy),
            password_cost: factledger::payouts::password::Cost {
                memory_kib,
                iterations,
                lanes,
            },
            ..Default::default()
        };
        let url = self.payout_url.filter(|u| !u.trim().is_empty());
        let choice = match (&self.payout_provider, &url) {
            (Some(text), _) => Choice::parse("--payout-provider", text, PAYOUT_PROVIDERS)?,
            (None, Some(_)) => Choice::All(Some(XENDIT.to_owned())),
            (None, None) => Choice::All(None),
        };
        let lookup = env_lookup;
        let secrets = Secrets::new(partition, &lookup);
        let provider = match choice.of("--payout-provider", partition)?.as_deref() {
            None => None,
            Some(XENDIT) => {
                let needed_by = "--payout-provider xendit";
                Some(factledger::server::payouts::PayoutProviderConfig {
                    base_url: url
                        .unwrap_or_else(|| factledger::payouts::xendit::PRODUCTION_URL.to_owned()),
                    secret_key: secrets
                        .required("FACTLEDGER_PAYOUT_SECRET", needed_by)?
                        .expose()
                        .to_owned(),
                    callback_token: secrets
                        .required("FACTLEDGER_PAYOUT_CALLBACK_TOKEN", needed_by)?
                        .expose()
                        .to_owned(),
                    timeout: None,
                })
            }
            Some(other) => anyhow::bail!("--payout-provider: {other} is not wired"),
        };
        Ok((payouts, provider, self.payout_lease_ms))
    }
}

/// What [`ServicesArgs::wiring`] gives `serve`.
pub(super) struct ServicesWiring {
    pub(super) services: factledger::services::Services,
    pub(super) cron: factledger::server::services::ServicesCron,
    /// How the gateway's callbacks are verified and read.
    pub(super) callbacks: GatewayCallbacks,
    /// App Store Server Notifications V2, when `FACTLEDGER_APPSTORE_BUNDLE_ID` is set.
    pub(super) appstore: Option<factledger::services::appstore::AppStoreConfig>,
}

/// Paid services' wiring. The gateway's keys and secrets come from the environment or
/// files only (per gateway below; per partition `…_<CODE>`; see [`Secrets`]).
#[derive(clap::Args, Clone)]
pub(super) struct ServicesArgs {
    /// The cash gateway refunds go through and whose pay notifications arrive at
    /// `POST /v1/callbacks/<gateway-name>`: `wechatpay` (WeChat Pay APIv3,
    /// `FACTLEDGER_WECHATPAY_*`), `alipay` (`FACTLEDGER_ALIPAY_*`), `paysim`
    /// (`tools/payout-sim`'s own protocol), or `-` for none (cash refunds wait, pay callbacks are not served); per partition
    /// `CN=wechatpay;ID=paysim`.
    #[arg(long, env = "FACTLEDGER_GATEWAY", hide_env_values = true)]
    pub(super) gateway: Option<String>,
    /// The gateway's API base URL (default: the gateway's production URL; paysim has
    /// none). Setting it alone chooses `paysim`.
    #[arg(long, env = "FACTLEDGER_GATEWAY_URL", hide_env_values = true)]
    pub(super) gateway_url: Option<String>,
    /// The gateway's callback provider name (default: the gateway's, e.g. `paysim`).
    #[arg(long, env = "FACTLEDGER_GATEWAY_NAME", hide_env_values = true)]
    pub(super) gateway_name: Option<String>,
    /// How long an unpaid order stays open (ms) before the timeout scan closes it.
    #[arg(long, env = "FACTLEDGER_ORDER_TIMEOUT_MS", default_value_t = factledger::services::ctx::ORDER_TIMEOUT_MS_DEFAULT, hide_env_values = true)]
    pub(super) order_timeout_ms: i64,
    /// When the paid-services scans fire: `default` (seed 000's table), `off`, or one
    /// cron expression for all of them.
    #[arg(
        long,
        env = "FACTLEDGER_SERVICES_CRON",
        default_value = "default",
        hide_env_values = true
    )]
    pub(super) services_cron: String,
}

impl ServicesArgs {
    /// The capability settings, the scans' schedule and the gateway's callback
    /// protocol, for `partition` (`None`: an unpartitioned service).
    pub(super) fn wiring(&self, partition: Option<&str>) -> anyhow::Result<ServicesWiring> {
        use anyhow::Context;
        if self.order_timeout_ms < 1_000 {
            anyhow::bail!("--order-timeout-ms: at least 1000");
        }
        let url = self.gateway_url.clone().filter(|u| !u.trim().is_empty());
        let choice = match (&self.gateway, &url) {
            (Some(text), _) => Choice::parse("--gateway", text, GATEWAYS)?,
            (None, Some(_)) => Choice::All(Some(PAYSIM.to_owned())),
            (None, None) => Choice::All(None),
        };
        let lookup = env_lookup;
        let secrets = Secrets::new(partition, &lookup);
        let (gateway, callbacks) = match choice.of("--gateway", partition)?.as_deref() {
            None => (None, GatewayCallbacks::Unconfigured),
            Some(PAYSIM) => {
                use factledger::services::gateway_http::{HttpGateway, HttpGatewayConfig};
                let needed_by = "--gateway paysim";
                let url = url.context("--gateway paysim needs --gateway-url (the simulator's)")?;
                let key = secrets.required("FACTLEDGER_GATEWAY_API_KEY", needed_by)?;
                let mut config = HttpGatewayConfig::new(&url, key.expose());
                config.name = self
                    .gateway_name
                    .clone()
                    .unwrap_or_else(|| PAYSIM.to_owned());
                let gateway: Arc<dyn PaymentGateway> = Arc::new(HttpGateway::new(config)?);
                let secret = secrets.required("FACTLEDGER_GATEWAY_CALLBACK_SECRET", needed_by)?;
                (
                    Some(gateway),
                    GatewayCallbacks::Paysim {
                        secret: secret.expose().to_owned(),
                    },
                )
            }
            Some(WECHATPAY) => {
                use factledger::server::gateway_wechatpay::WechatPayCallbacks;
                use factledger::services::wechatpay::{WechatPayConfig, WechatPayGateway};
                let mut config = WechatPayConfig::from_lookup(|k| secrets.lookup(k))
                    .context("--gateway wechatpay")?;
                if let Some(url) = url {
                    config.base_url = url;
                }
                if let Some(name) = &self.gateway_name {
                    config.name = name.clone();
                }
                let callbacks = GatewayCallbacks::WechatPay(WechatPayCallbacks::of(&config));
                let gateway: Arc<dyn PaymentGateway> =
                    Arc::new(WechatPayGateway::new(config).context("--gateway wechatpay")?);
                (Some(gateway), callbacks)
            }
            Some(ALIPAY) => {
                use factledger::services::alipay::{AlipayConfig, AlipayGateway};
                let mut config =
                    AlipayConfig::from_lookup(|k| secrets.lookup(k)).context("--gateway alipay")?;
                if let Some(url) = url {
                    config.gateway_url = url;
                }
                if let Some(name) = &self.gateway_name {
                    config.name = name.clone();
                }
                let callbacks = GatewayCallbacks::Alipay(config.verifier());
                let gateway: Arc<dyn PaymentGateway> =
                    Arc::new(AlipayGateway::new(config).context("--gateway alipay")?);
                (Some(gateway), callbacks)
            }
            Some(other) => anyhow::bail!("--gateway: {other} is not wired"),
        };
        let services = factledger::services::Services {
            gateway,
            order_timeout_ms: self.order_timeout_ms,
            ..Default::default()
        };
        let cron = factledger::server::services::ServicesCron::parse(&self.services_cron);
        // App Store Server Notifications V2: on when the bundle id is set (nothing in
        // it is secret; the partition's own variables first, like every setting here).
        let appstore = factledger::services::appstore::AppStoreConfig::from_lookup(
            |k| secrets.lookup(k),
            |path| std::fs::read(path).map_err(|e| format!("{path}: {e}")),
        )
        .context("App Store notifications")?;
        Ok(ServicesWiring {
            services,
            cron,
            callbacks,
            appstore,
        })
    }
}
