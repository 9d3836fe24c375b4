//! The event log and its integrity: `migrate`, `events`, `verify`, `anchor`,
//! `integrity`, and API `keys`.

use super::args::*;
use super::common::{audit, open_db, Global};
use anyhow::Context;
use factledger::infra::store;
use factledger_aggregates::admin_action::AdminAction;
use std::process::ExitCode;

/// `migrate`.
pub(super) async fn migrate(g: &Global) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    println!(
        "migrated {} database; head position {}",
        db.store.backend(),
        db.store.head_position().await?
    );
    Ok(ExitCode::SUCCESS)
}

/// `events`: one stream as JSON lines.
pub(super) async fn events(
    g: &Global,
    aggregate_type: String,
    aggregate_id: String,
) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let mut from = 1;
    loop {
        let page = db
            .store
            .read_stream(&aggregate_type, &aggregate_id, from, store::READ_LIMIT_MAX)
            .await?;
        let Some(last) = page.last() else { break };
        from = last.sequence + 1;
        for e in &page {
            println!("{}", serde_json::to_string(&e.view()?)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `verify`'s exit code when there was nothing signed to compare the log with.
const VERIFY_UNPROVEN: u8 = 3;

/// `verify`: the hash chains and signed anchors.
pub(super) async fn verify(
    g: &Global,
    stream: Option<String>,
    json: bool,
    allow_no_anchors: bool,
) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let report = match &stream {
        Some(s) => {
            let target = s
                .split_once('/')
                .context("--stream must be TYPE/ID, e.g. wallet/w-1")?;
            store::verify(&*db.store, Some(target)).await?
        }
        None => store::integrity::verify_log(&db.store, &db.db, Some(&g.anchor_file)).await?,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    let whole_log = stream.is_none();
    if report.ok && whole_log && report.anchors_checked == 0 && report.highest_position > 0 {
        if !allow_no_anchors {
            println!(
                "integrity unproven: no signed anchors at {} nor in the database to compare \
                 {} events with (a log rewritten end to end verifies against itself); \
                 point --anchor-file (FACTLEDGER_ANCHOR_FILE) at the anchor file, or pass \
                 --allow-no-anchors to accept the log's own chains",
                g.anchor_file.display(),
                report.events_checked
            );
            return Ok(ExitCode::from(VERIFY_UNPROVEN));
        }
        println!(
            "ok (no anchors, allowed): {} events in {} streams verified against their own \
             chains only",
            report.events_checked, report.streams_checked
        );
        return Ok(ExitCode::SUCCESS);
    }
    if report.ok {
        println!(
            "ok: {} events in {} streams verified, {} signed anchors matched",
            report.events_checked, report.streams_checked, report.anchors_checked
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(f) = &report.first {
        let kind = serde_json::to_value(f.kind)?;
        println!(
            "BROKEN at position {} ({}): {} [{} finding(s)]",
            f.global_position,
            kind.as_str().unwrap_or_default(),
            f.detail,
            report.findings_count
        );
    }
    if let Some(b) = &report.first_broken {
        println!(
            "BROKEN: {}/{} sequence {} (global position {}): {}",
            b.aggregate_type, b.aggregate_id, b.sequence, b.global_position, b.reason
        );
    }
    Ok(ExitCode::from(2))
}

/// `anchor`: sign and write a chain anchor now.
pub(super) async fn anchor(g: &Global) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let sinks = store::integrity::AnchorSinks {
        file: Some(g.anchor_file.clone()),
    };
    let anchor = store::integrity::anchor::create(&db.store, &db.db, &sinks, "cli", false).await?;
    println!("{}", serde_json::to_string_pretty(&anchor)?);
    Ok(ExitCode::SUCCESS)
}

/// `integrity`: the key file.
pub(super) fn integrity(g: &Global, action: IntegrityAction) -> anyhow::Result<ExitCode> {
    match action {
        IntegrityAction::RotateKey => {
            let ring = store::Keyring::rotate(&g.integrity_keys)?;
            println!(
                "{}: new events are sealed with {} (keys: {:?}); restart serve to use it",
                g.integrity_keys.display(),
                ring.active().id,
                ring.chain_key_ids()
            );
            Ok(ExitCode::SUCCESS)
        }
        IntegrityAction::PublicKey => {
            let ring = store::Keyring::load(&g.integrity_keys)?;
            println!("{} {}", ring.signing_key_id(), ring.public_key_hex());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `keys`: API keys.
pub(super) async fn keys(g: &Global, action: KeysAction) -> anyhow::Result<ExitCode> {
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    match action {
        KeysAction::Create { role } => {
            let key = db.keys.create(role).await?;
            println!("created {} key {} (shown once):", key.role, key.key_id);
            println!("{}", key.secret);
            let target = format!("key:{}", key.key_id);
            let detail = Some(format!("role={role}"));
            audit(&db, AdminAction::KeyCreated, &target, None, detail).await?;
        }
        KeysAction::Revoke { key_id } => {
            if !db.keys.revoke(&key_id).await? {
                anyhow::bail!("no active key with id {key_id}");
            }
            println!("revoked key {key_id}");
            let target = format!("key:{key_id}");
            audit(&db, AdminAction::KeyRevoked, &target, None, None).await?;
        }
        KeysAction::Bootstrap => {
            let Some(key) = db.keys.bootstrap().await? else {
                anyhow::bail!(
                    "an unrevoked admin key exists: create keys with it, or revoke it first"
                );
            };
            println!("created admin key {} (shown once):", key.key_id);
            println!("{}", key.secret);
            let target = format!("key:{}", key.key_id);
            let detail = Some("role=admin, keys bootstrap: no unrevoked admin key".into());
            audit(&db, AdminAction::KeyBootstrapped, &target, None, detail).await?;
        }
        KeysAction::List => {
            for k in db.keys.list().await? {
                println!("{}", serde_json::to_string(&k)?);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
