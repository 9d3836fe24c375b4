//! `factledger commands apply FILE`: the batch API's items from a file of JSON lines,
//! applied through the wallet command bus on the database directly (actor and
//! idempotency scope `cli:<user>`), with a progress bar on a terminal.

use super::common::{open_db, Global};
use anyhow::Context;
use factledger::runtime::admin_log::{cli_actor, local_metadata};
use factledger::runtime::bus::{CommandBus, BATCH_ITEMS_MAX};
use factledger::wallet::batch::{envelopes, respond, BatchItem};
use factledger_aggregates::wallet::Wallet;
use std::io::BufRead;
use std::process::ExitCode;

/// One line of the file: its number (from 1) and the item on it.
fn read_items(file: &std::path::Path) -> anyhow::Result<Vec<(usize, BatchItem)>> {
    let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?,
        ))
    };
    let mut items = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("read line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let value = factledger::infra::json::parse_unique(line.as_bytes())
            .map_err(|e| anyhow::anyhow!("line {}: {e}", n + 1))?;
        let item: BatchItem = factledger::runtime::http::body::typed(value).map_err(|p| {
            anyhow::anyhow!(
                "line {}: {} {}: {}",
                n + 1,
                p.code,
                p.field.unwrap_or_default(),
                p.detail
            )
        })?;
        items.push((n + 1, item));
    }
    Ok(items)
}

pub(super) async fn apply(
    g: &Global,
    file: &std::path::Path,
    atomic: bool,
    chunk: usize,
) -> anyhow::Result<ExitCode> {
    if !(1..=BATCH_ITEMS_MAX).contains(&chunk) {
        anyhow::bail!("--chunk: must be 1 to {BATCH_ITEMS_MAX}, got {chunk}");
    }
    let lines = read_items(file)?;
    if atomic && lines.len() > BATCH_ITEMS_MAX {
        anyhow::bail!(
            "--atomic: the file holds {} items; an atomic batch holds at most {BATCH_ITEMS_MAX}",
            lines.len()
        );
    }
    let actor = cli_actor();
    let (numbers, items): (Vec<usize>, Vec<BatchItem>) = lines.into_iter().unzip();
    // Every line checked before anything is applied (keys unique across the file).
    let envs = envelopes(&actor, items, |key| {
        let mut m = local_metadata(&actor);
        m.command_id = Some(key);
        m
    })
    .map_err(|p| {
        // `commands[i].field` → the line it came from.
        let field = p.field.clone().unwrap_or_default();
        let line = field
            .strip_prefix("commands[")
            .and_then(|rest| rest.split_once(']'))
            .and_then(|(i, _)| i.parse::<usize>().ok())
            .and_then(|i| numbers.get(i));
        match line {
            Some(n) => anyhow::anyhow!("line {n}: {} {field}: {}", p.code, p.detail),
            None => anyhow::anyhow!("{} {field}: {}", p.code, p.detail),
        }
    })?;
    let db = open_db(&g.database_url, &g.integrity_keys).await?;
    let bus = CommandBus::<Wallet>::start(db.store.clone());
    let bar = indicatif::ProgressBar::new(envs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} items  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let size = if atomic { BATCH_ITEMS_MAX } else { chunk };
    let (mut applied, mut replayed, mut refused, mut index) = (0, 0, 0, 0usize);
    let mut envs = envs.into_iter().peekable();
    while envs.peek().is_some() {
        let part: Vec<_> = envs.by_ref().take(size).collect();
        let n = part.len();
        let answer = respond(atomic, bus.execute_batch(part, atomic).await);
        applied += answer.applied;
        replayed += answer.replayed;
        refused += answer.refused;
        for mut r in answer.results {
            r.index += index;
            let mut line = serde_json::to_value(&r)?;
            line["line"] = serde_json::json!(numbers.get(r.index));
            bar.suspend(|| println!("{line}"));
        }
        index += n;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    eprintln!(
        "{}",
        serde_json::json!({"items": index, "applied": applied, "replayed": replayed, "refused": refused, "atomic": atomic})
    );
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
