//! What every subcommand shares: the global flags, opening the database, and
//! recording the CLI's admin actions.

use factledger::infra::store;
use factledger_aggregates::admin_action::AdminAction;

/// The global flags, for the subcommands: one partition's database and files.
#[derive(Clone)]
pub(super) struct Global {
    pub(super) database_url: String,
    pub(super) integrity_keys: std::path::PathBuf,
    pub(super) anchor_file: std::path::PathBuf,
    /// The partition's code (`None`: an unpartitioned deployment, `--database-url`).
    pub(super) partition: Option<String>,
}

/// The partitions the global flags name (issue 21): one unnamed when there is no
/// `--partitions`, and which of them `--partition` selects.
pub(super) struct Layout {
    pub(super) partitions: Vec<Global>,
    selected: Option<usize>,
}

impl Layout {
    pub(super) fn resolve(
        database_url: String,
        integrity_keys: std::path::PathBuf,
        anchor_file: std::path::PathBuf,
        partitions: Option<String>,
        partition: Option<String>,
    ) -> anyhow::Result<Layout> {
        use factledger::server::partitions::{parse_partitions, partition_file};
        let Some(spec) = partitions.filter(|s| !s.trim().is_empty()) else {
            if let Some(p) = partition {
                anyhow::bail!(
                    "--partition {p}: no --partitions (FACTLEDGER_PARTITIONS) are configured"
                );
            }
            return Ok(Layout {
                partitions: vec![Global {
                    database_url,
                    integrity_keys,
                    anchor_file,
                    partition: None,
                }],
                selected: Some(0),
            });
        };
        if database_url != factledger::server::DATABASE_URL_DEFAULT {
            anyhow::bail!(
                "--partitions names every partition's database: drop --database-url \
                 (DATABASE_URL), or put it in the list as CODE=URL"
            );
        }
        let partitions: Vec<Global> = parse_partitions(&spec)?
            .into_iter()
            .map(|p| Global {
                integrity_keys: partition_file(&integrity_keys, &p.code),
                anchor_file: partition_file(&anchor_file, &p.code),
                database_url: p.database_url,
                partition: Some(p.code),
            })
            .collect();
        let selected = match partition {
            None if partitions.len() == 1 => Some(0),
            None => None,
            Some(raw) => {
                let code = factledger::runtime::http::partition::parse_partition_code(&raw)
                    .map_err(|e| anyhow::anyhow!("--partition: {e}"))?;
                let at = partitions
                    .iter()
                    .position(|g| g.partition.as_deref() == Some(code.as_str()));
                match at {
                    Some(i) => Some(i),
                    None => anyhow::bail!(
                        "--partition {code}: not among --partitions ({})",
                        codes(&partitions)
                    ),
                }
            }
        };
        Ok(Layout {
            partitions,
            selected,
        })
    }

    /// The one partition a command acts on: the selected one, or the only one.
    pub(super) fn one(&self) -> anyhow::Result<Global> {
        match self.selected.and_then(|i| self.partitions.get(i)) {
            Some(g) => Ok(g.clone()),
            None => anyhow::bail!(
                "several partitions are configured ({}): choose one with --partition <CODE>",
                codes(&self.partitions)
            ),
        }
    }

    /// What `serve` starts: the selected partition, or every partition.
    pub(super) fn served(&self) -> Vec<Global> {
        match self.selected.and_then(|i| self.partitions.get(i)) {
            Some(g) => vec![g.clone()],
            None => self.partitions.clone(),
        }
    }
}

fn codes(partitions: &[Global]) -> String {
    partitions
        .iter()
        .filter_map(|g| g.partition.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Open the database with the integrity key file of this deployment.
pub(super) async fn open_db(
    database_url: &str,
    keys: &std::path::Path,
) -> anyhow::Result<store::Database> {
    store::open_with(database_url, store::load_keyring(keys)?).await
}

/// Record an admin action taken by the CLI (actor `cli:<user>`).
pub(super) async fn audit(
    db: &store::Database,
    action: AdminAction,
    target: &str,
    reason: Option<&str>,
    detail: Option<String>,
) -> anyhow::Result<()> {
    let metadata = factledger::runtime::admin_log::local_metadata(
        &factledger::runtime::admin_log::cli_actor(),
    );
    factledger::runtime::admin_log::record(&db.store, &metadata, action, target, reason, detail)
        .await?;
    Ok(())
}
