//! Tamper evidence that holds against a database administrator (issue 14 item 1):
//! keyed hash chains ([`keys`]), signed chain anchors published outside the database
//! ([`anchor`]) and the verification that compares the log with both ([`verify`]).
//!
//! **Architecture invariant:** the keys never enter the database; the database holds
//! only key ids, hashes, anchors and signatures.

pub mod anchor;
pub mod keys;
pub mod verify;

pub use anchor::{Anchor, AnchorError, AnchorSinks};
pub use keys::{KeyFileError, Keyring};
pub(crate) use verify::dense_page;
pub use verify::{verify_with, IntegrityFinding, TamperKind};

use crate::infra::db::Db;
use crate::infra::store::{DynStore, StoreError, VerifyReport};
use std::path::Path;

/// Every anchor verify can read: the anchor file's (the evidence kept outside the
/// database, when there is one) and the database's.
pub async fn known_anchors(db: &Db, file: Option<&Path>) -> Result<Vec<Anchor>, AnchorError> {
    let mut anchors = match file {
        Some(path) if path.exists() => anchor::read_file(path)?,
        _ => Vec::new(),
    };
    anchors.extend(anchor::stored(db).await?);
    Ok(anchors)
}

/// Verify the whole log against every anchor known (see [`verify`]).
pub async fn verify_log(
    store: &DynStore,
    db: &Db,
    anchor_file: Option<&Path>,
) -> Result<VerifyReport, VerifyLogError> {
    let anchors = known_anchors(db, anchor_file).await?;
    let mut report = verify_with(store.as_ref(), None, &anchors).await?;
    report.anchor_file = anchor_file
        .filter(|p| p.exists())
        .map(|p| p.display().to_string());
    Ok(report)
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyLogError {
    #[error(transparent)]
    Anchor(#[from] AnchorError),
    #[error(transparent)]
    Store(#[from] StoreError),
}
