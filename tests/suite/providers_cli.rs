//! `serve`'s provider selection (issue 33 item 6): each provider is chosen by a flag
//! (per partition where countries differ), every secret comes from the environment or a
//! file, and a missing or malformed one refuses the start naming the variable — before
//! anything listens or touches the database.

use std::path::Path;
use std::process::{Command, Output};

/// `factledger serve` in `dir` with no ambient provider configuration, and `env`.
fn serve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_factledger"));
    cmd.current_dir(dir).env("RUST_LOG", "warn");
    for (k, _) in std::env::vars() {
        if k.starts_with("FACTLEDGER_") || k == "DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    if !args.contains(&"--partitions") {
        cmd.args(["--database-url", "sqlite://ledger.db"]);
    }
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run factledger")
}

/// The start was refused, and stderr says all of `says`.
#[track_caller]
fn refused(o: &Output, says: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "started: {err}");
    for s in says {
        assert!(err.contains(s), "stderr lacks {s:?}:\n{err}");
    }
}

#[test]
fn a_provider_without_its_secrets_refuses_to_start_and_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        &serve(d, &["--payout-provider", "xendit"], &[]),
        &["--payout-provider xendit needs FACTLEDGER_PAYOUT_SECRET (or FACTLEDGER_PAYOUT_SECRET_FILE)"],
    );
    refused(
        &serve(
            d,
            &["--payout-provider", "xendit"],
            &[("FACTLEDGER_PAYOUT_SECRET", "xnd_development_k")],
        ),
        &["FACTLEDGER_PAYOUT_CALLBACK_TOKEN"],
    );
    refused(
        &serve(
            d,
            &["--gateway", "paysim", "--gateway-url", "http://127.0.0.1:9"],
            &[],
        ),
        &["--gateway paysim needs FACTLEDGER_GATEWAY_API_KEY"],
    );
    refused(
        &serve(
            d,
            &["--gateway", "paysim"],
            &[("FACTLEDGER_GATEWAY_API_KEY", "k")],
        ),
        &["--gateway paysim needs --gateway-url"],
    );
    // Empty, and both a value and a file: named, never guessed at.
    refused(
        &serve(
            d,
            &["--gateway", "paysim", "--gateway-url", "http://127.0.0.1:9"],
            &[("FACTLEDGER_GATEWAY_API_KEY", " ")],
        ),
        &["FACTLEDGER_GATEWAY_API_KEY is set but empty"],
    );
    refused(
        &serve(
            d,
            &["--gateway", "paysim", "--gateway-url", "http://127.0.0.1:9"],
            &[
                ("FACTLEDGER_GATEWAY_API_KEY", "k"),
                ("FACTLEDGER_GATEWAY_API_KEY_FILE", "/etc/hostname"),
            ],
        ),
        &["FACTLEDGER_GATEWAY_API_KEY and FACTLEDGER_GATEWAY_API_KEY_FILE are both set"],
    );
    refused(
        &serve(d, &["--gateway", "stripe"], &[]),
        &["--gateway: unknown provider \"stripe\""],
    );
    refused(
        &serve(d, &["--gateway", "CN=paysim"], &[]),
        &["--gateway: a per-partition choice (CODE=PROVIDER) needs --partitions"],
    );
    assert!(
        !d.join("ledger.db").exists(),
        "a refused start must not create the database"
    );
}

#[test]
fn per_partition_secrets_are_looked_up_under_the_partition_s_code_first() {
    let dir = tempfile::tempdir().unwrap();
    // ID pays through xendit, PH through nobody: only ID's secrets are asked for, and
    // under ID's names first.
    let o = serve(
        dir.path(),
        &[
            "--partitions",
            "ID=sqlite://id.db;PH=sqlite://ph.db",
            "--payout-provider",
            "ID=xendit;PH=-",
        ],
        &[("FACTLEDGER_PAYOUT_SECRET_ID", "xnd_development_id")],
    );
    refused(
        &o,
        &["FACTLEDGER_PAYOUT_CALLBACK_TOKEN_ID (or FACTLEDGER_PAYOUT_CALLBACK_TOKEN_ID_FILE) or FACTLEDGER_PAYOUT_CALLBACK_TOKEN"],
    );
}

#[test]
fn the_new_gateways_and_the_app_store_refuse_a_missing_or_malformed_setting_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        &serve(d, &["--gateway", "wechatpay"], &[]),
        &["--gateway wechatpay", "FACTLEDGER_WECHATPAY_MCHID"],
    );
    refused(
        &serve(d, &["--gateway", "alipay"], &[]),
        &["--gateway alipay", "FACTLEDGER_ALIPAY_APP_ID"],
    );
    refused(
        &serve(
            d,
            &[],
            &[
                ("FACTLEDGER_APPSTORE_BUNDLE_ID", "com.example.app"),
                ("FACTLEDGER_APPSTORE_ENVIRONMENT", "Staging"),
            ],
        ),
        &["FACTLEDGER_APPSTORE_ENVIRONMENT"],
    );
}

/// `serve` with `args` and `env` in `dir`, until it prints where it listens.
struct Serving {
    child: std::process::Child,
    base: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Serving {
    use std::io::BufRead;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_factledger"));
    cmd.current_dir(dir).env("RUST_LOG", "warn");
    for (k, _) in std::env::vars() {
        if k.starts_with("FACTLEDGER_") || k == "DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args([
            "--database-url",
            "sqlite://ledger.db",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    let out = child.stdout.take();
    // Dropped (killed and waited for) on every path, a failed start included.
    let mut serving = Serving {
        child,
        base: String::new(),
    };
    let out = out.expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("serve never said where it listens");
        if let Some(base) = line.strip_prefix("factledger listening on ") {
            serving.base = base.trim().to_owned();
            return serving;
        }
    }
}

/// A 2048-bit key pair as (PKCS#8 private PEM, SPKI public PEM).
fn rsa_pems() -> (String, String) {
    use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("key");
    let private = key.to_pkcs8_pem(LineEnding::LF).expect("pem").to_string();
    let public = key
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    (private, public)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_each_configured_provider_in_its_own_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (merchant, _) = rsa_pems();
    let (_, platform) = rsa_pems();
    let (app, _) = rsa_pems();
    let (_, alipay) = rsa_pems();
    std::fs::write(d.join("merchant.pem"), &merchant).unwrap();
    std::fs::write(d.join("platform.pem"), &platform).unwrap();
    std::fs::write(d.join("apiv3"), "0123456789abcdefghijABCDEFGHIJ01\n").unwrap();
    let path = |f: &str| d.join(f).to_str().unwrap().to_owned();
    let env = vec![
        ("FACTLEDGER_WECHATPAY_MCHID", "1900000001".to_owned()),
        (
            "FACTLEDGER_WECHATPAY_APPID",
            "wx0000000000000001".to_owned(),
        ),
        (
            "FACTLEDGER_WECHATPAY_MERCHANT_SERIAL",
            "5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned(),
        ),
        (
            "FACTLEDGER_WECHATPAY_MERCHANT_KEY_FILE",
            path("merchant.pem"),
        ),
        ("FACTLEDGER_WECHATPAY_APIV3_KEY_FILE", path("apiv3")),
        (
            "FACTLEDGER_WECHATPAY_PLATFORM_KEYS",
            format!("PUB_KEY_ID_01={}", path("platform.pem")),
        ),
        (
            "FACTLEDGER_APPSTORE_BUNDLE_ID",
            "com.example.app".to_owned(),
        ),
        ("FACTLEDGER_APPSTORE_ENVIRONMENT", "Sandbox".to_owned()),
        (
            "FACTLEDGER_PAYOUT_SECRET",
            "xnd_development_cli_test".to_owned(),
        ),
        ("FACTLEDGER_PAYOUT_CALLBACK_TOKEN", "cli-token".to_owned()),
    ];
    let http = reqwest::Client::new();
    {
        let s = start(
            d,
            &[
                "--gateway",
                "wechatpay",
                "--payout-provider",
                "xendit",
                "--payout-url",
                "http://127.0.0.1:9",
            ],
            &env,
        );
        // WeChat Pay: an unsigned notification is refused in WeChat's own answer format.
        let r = http
            .post(format!("{}/v1/callbacks/wechatpay", s.base))
            .body(r#"{"id":"EV-1"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["code"], "FAIL", "{v}");
        assert!(v["message"].as_str().unwrap().contains("wechatpay-"), "{v}");
        // Xendit: the token header is checked.
        let r = http
            .post(format!("{}/v1/callbacks/xendit", s.base))
            .header("x-callback-token", "wrong")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        // App Store: a body that is not a signed payload is refused by name.
        let r = http
            .post(format!("{}/v1/callbacks/appstore", s.base))
            .body(r#"{"signedPayload":"e30.e30.AA"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["field"], "signedpayload", "{v}");
    }
    std::fs::write(d.join("app.pem"), &app).unwrap();
    std::fs::write(d.join("alipay.pem"), &alipay).unwrap();
    let env = vec![
        ("FACTLEDGER_ALIPAY_APP_ID", "2014072300007148".to_owned()),
        ("FACTLEDGER_ALIPAY_SELLER_ID", "2088101106499364".to_owned()),
        ("FACTLEDGER_ALIPAY_APP_PRIVATE_KEY_FILE", path("app.pem")),
        ("FACTLEDGER_ALIPAY_PUBLIC_KEY_FILE", path("alipay.pem")),
    ];
    let s = start(d, &["--gateway", "alipay"], &env);
    // Alipay: an unsigned notification is answered `fail` (Alipay re-sends).
    let r = http
        .post(format!("{}/v1/callbacks/alipay", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("notify_id=n-1&trade_status=TRADE_SUCCESS&app_id=2014072300007148")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.text().await.unwrap(), "fail");
}
