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

/// What `serve` checks before it starts (issue 32 item 2): the log still reaches the
/// newest signed anchor it can read (file or database), and is still keyed from the
/// position that anchor signed. Cheap: an index count and the legacy prefix, never a
/// walk of the log (that is `verify`). A log that fails refuses the start.
pub async fn check_before_serving(
    store: &DynStore,
    db: &Db,
    anchor_file: Option<&Path>,
) -> Result<(), VerifyLogError> {
    let anchors = known_anchors(db, anchor_file).await?;
    let keyring = store.keyring();
    let Some(newest) = anchors
        .iter()
        .filter(|a| a.signed_by(keyring))
        .max_by_key(|a| (a.head_position, a.anchor_seq))
    else {
        return Ok(());
    };
    let head = store.head_position().await?;
    let (_, last_row) = store
        .count_positions(head.max(newest.head_position))
        .await?;
    if last_row < newest.head_position {
        return Err(VerifyLogError::Refused(format!(
            "the log ends at position {last_row} but signed anchor {} vouches for position \
             {}: events were deleted; restore the database and run `factledger verify`",
            newest.anchor_seq, newest.head_position
        )));
    }
    if let Some(floor) = newest.keyed_floor {
        let now = anchor::first_keyed_position(db, newest.head_position)
            .await
            .map_err(|e| StoreError::Database(e.to_string()))?;
        if now != floor {
            return Err(VerifyLogError::Refused(format!(
                "signed anchor {} says the log is keyed from position {floor} (0: not up to \
                 {}), but it is now keyed from {now}: rows were re-sealed without the chain \
                 key; restore the database and run `factledger verify`",
                newest.anchor_seq, newest.head_position
            )));
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyLogError {
    #[error("the log fails its check before serving: {0}")]
    Refused(String),
    #[error(transparent)]
    Anchor(#[from] AnchorError),
    #[error(transparent)]
    Store(#[from] StoreError),
}
