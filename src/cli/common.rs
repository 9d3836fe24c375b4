//! What every subcommand shares: the global flags, opening the database, and
//! recording the CLI's admin actions.

use factledger::infra::store;
use factledger_aggregates::admin_action::AdminAction;

/// The global flags, for the subcommands.
pub(super) struct Global {
    pub(super) database_url: String,
    pub(super) integrity_keys: std::path::PathBuf,
    pub(super) anchor_file: std::path::PathBuf,
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
