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
