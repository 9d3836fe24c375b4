//! Verification of the log (R-ES-8, issue 14): every way someone with root on the
//! database can change history is found and named by the first bad position and its
//! kind.
//!
//! One pass over the log in global order, streaming in pages, with each stream's last
//! hash and next sequence in memory (a few dozen bytes a stream: about 20 MB for a
//! hundred thousand streams), so the log is read once, sequentially, however its
//! streams interleave:
//! - **per stream**: each event's hash is recomputed under the key its row names
//!   (HMAC-SHA-256; plain SHA-256 for legacy rows) from its content and its stream
//!   predecessor's hash; sequences start at 1 and never skip. A mismatch is `edited`
//!   (a skipped sequence is a `gap`). The hash covers the stream's type, id and the
//!   sequence, so a row moved to another stream, re-typed or re-sequenced is `edited`
//!   where it landed, and the stream it left shows a `gap` (or, when it was the last
//!   event there, nothing — the moved row itself is the finding).
//! - **global**: positions run 1, 2, … without a hole up to the `event_sequence` row
//!   (`gap`; a missing tail is `truncated`); legacy (unkeyed) rows only before the first
//!   keyed row and no row sealed with a key the keyring does not hold; and the running
//!   digest equals every signed anchor's at its position (`re_chained` when it does
//!   not: history was rewritten and re-hashed), with no anchor beyond the log's end
//!   (`truncated`). A signed anchor also names the log's keyed floor (the first keyed
//!   position); a log whose floor is not the one signed was re-sealed as "legacy"
//!   rows (`re_chained`).
//!
//! Verifying one stream reads that stream alone, in sequence order.

use super::anchor::{digest_step, Anchor, DIGEST_GENESIS};
use super::keys::Keyring;
use crate::infra::store::hash::LEGACY_KEY_ID;
use crate::infra::store::{
    BrokenLink, EventStore, StoreError, StoredEvent, VerifyReport, GENESIS_HASH, READ_LIMIT_MAX,
};
use serde::Serialize;
use std::collections::HashMap;

/// Findings listed at most (the count is exact).
pub const FINDINGS_MAX: usize = 100;

/// What was done to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TamperKind {
    /// Positions (or a stream's sequences) skip: events in the middle were deleted.
    Gap,
    /// An event's stored hash does not match its content under its key.
    Edited,
    /// The log ends before the sequence row or a signed anchor says it does.
    Truncated,
    /// Every hash matches its content, but not what was signed or what came before:
    /// history was rewritten and re-hashed (with another key, or none).
    ReChained,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct IntegrityFinding {
    pub kind: TamperKind,
    /// The first position the finding is about.
    pub global_position: i64,
    /// `TYPE/ID` when the finding is about one stream's event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<i64>,
    pub detail: String,
}

/// Collects findings: all counted, the first [`FINDINGS_MAX`] kept.
#[derive(Default)]
pub(crate) struct Findings {
    pub list: Vec<IntegrityFinding>,
    pub count: u64,
}

impl Findings {
    fn push(&mut self, f: IntegrityFinding) {
        self.count += 1;
        if self.list.len() < FINDINGS_MAX {
            self.list.push(f);
        }
    }

    fn at(&mut self, kind: TamperKind, global_position: i64, detail: String) {
        self.push(IntegrityFinding {
            kind,
            global_position,
            stream: None,
            sequence: None,
            detail,
        });
    }
}

/// Verify one stream's chain, or every stream's chain and the whole log against
/// `anchors` (the anchor file's and the database's, already read).
pub async fn verify_with(
    store: &dyn EventStore,
    stream: Option<(&str, &str)>,
    anchors: &[Anchor],
) -> Result<VerifyReport, StoreError> {
    let keyring = store.keyring().clone();
    let mut report = VerifyReport::default();
    let mut findings = Findings::default();
    if let Some((t, id)) = stream {
        report.first_broken = verify_stream(
            store,
            &keyring,
            t,
            id,
            &mut report.events_checked,
            &mut findings,
        )
        .await?;
        report.streams_checked = 1;
    } else {
        check_log(store, &keyring, anchors, &mut report, &mut findings).await?;
    }
    findings.list.sort_by_key(|f| (f.global_position, f.kind));
    report.first = findings.list.first().cloned();
    report.findings_count = findings.count;
    report.findings = findings.list;
    report.ok = report.findings_count == 0;
    Ok(report)
}

/// Rows with positions in `[first, last]`, one page. When `first` is not among them,
/// read once more after a moment: on MariaDB a reader can see a commit before the one
/// just ahead of it, and a race must never be reported (or anchored) as a hole.
pub(crate) async fn dense_page(
    store: &dyn EventStore,
    first: i64,
    last: i64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let page = store.read_positions(first, last).await?;
    if page.first().map(|e| e.global_position) == Some(first) {
        return Ok(page);
    }
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    store.read_positions(first, last).await
}

/// A stream's state in the global pass.
struct StreamState {
    next_sequence: i64,
    last_hash: String,
}

impl StreamState {
    fn new() -> StreamState {
        StreamState {
            next_sequence: 1,
            last_hash: GENESIS_HASH.to_owned(),
        }
    }
}

/// What is wrong with `e` as the next event of a stream whose last hash is `prev` and
/// whose next sequence is `next_sequence`, if anything; with the hash it should carry.
fn broken_link(
    keyring: &Keyring,
    e: &StoredEvent,
    prev: &str,
    next_sequence: i64,
) -> (Option<(TamperKind, String)>, Option<String>) {
    let expected = e.recompute_hash(keyring, prev);
    let broken = if e.sequence != next_sequence {
        Some((
            TamperKind::Gap,
            format!("sequence {} follows {}", e.sequence, next_sequence - 1),
        ))
    } else {
        match &expected {
            None => Some((
                TamperKind::Edited,
                format!(
                    "sealed with chain key {:?}, which the integrity key file does not hold",
                    e.hash_key
                ),
            )),
            Some(h) if *h != e.hash => Some((
                TamperKind::Edited,
                "stored hash does not match the event's content, stream, sequence and its \
                 predecessor: edited, moved, re-typed or re-sequenced"
                    .to_owned(),
            )),
            Some(_) => None,
        }
    };
    (broken, expected)
}

fn push_broken(
    e: &StoredEvent,
    kind: TamperKind,
    reason: String,
    expected: Option<String>,
    findings: &mut Findings,
    first_broken: &mut Option<BrokenLink>,
) {
    findings.push(IntegrityFinding {
        kind,
        global_position: e.global_position,
        stream: Some(format!("{}/{}", e.aggregate_type, e.aggregate_id)),
        sequence: Some(e.sequence),
        detail: reason.clone(),
    });
    if first_broken.is_none() {
        *first_broken = Some(BrokenLink {
            aggregate_type: e.aggregate_type.clone(),
            aggregate_id: e.aggregate_id.clone(),
            sequence: e.sequence,
            global_position: e.global_position,
            expected_hash: expected.unwrap_or_default(),
            stored_hash: e.hash.clone(),
            reason,
        });
    }
}

async fn verify_stream(
    store: &dyn EventStore,
    keyring: &Keyring,
    aggregate_type: &str,
    aggregate_id: &str,
    events_checked: &mut u64,
    findings: &mut Findings,
) -> Result<Option<BrokenLink>, StoreError> {
    let mut prev = GENESIS_HASH.to_owned();
    let mut next_sequence = 1;
    let mut first_broken = None;
    loop {
        let page = store
            .read_stream(aggregate_type, aggregate_id, next_sequence, READ_LIMIT_MAX)
            .await?;
        let Some(last) = page.last() else {
            return Ok(first_broken);
        };
        let after_page = last.sequence + 1;
        for e in &page {
            *events_checked += 1;
            let (broken, expected) = broken_link(keyring, e, &prev, next_sequence);
            if let Some((kind, reason)) = broken {
                push_broken(e, kind, reason, expected, findings, &mut first_broken);
            }
            // Go on from the stored hash: a tampered event breaks its own link only,
            // and every other one is still checked.
            prev = e.hash.clone();
            next_sequence = e.sequence + 1;
        }
        next_sequence = next_sequence.max(after_page);
    }
}

/// The global pass (see the module docs).
async fn check_log(
    store: &dyn EventStore,
    keyring: &Keyring,
    anchors: &[Anchor],
    report: &mut VerifyReport,
    findings: &mut Findings,
) -> Result<(), StoreError> {
    let anchors = usable_anchors(keyring, anchors, findings);
    report.anchors_checked = anchors.len() as u64;
    report.latest_anchor = anchors.last().cloned();
    let sequence_head = store.head_position().await?;
    report.head_position = sequence_head;
    let mut next_anchor = anchors.iter().peekable();
    let mut digest = DIGEST_GENESIS.to_owned();
    let mut expected = 1i64;
    let mut keyed_since: Option<i64> = None;
    let mut last_row = 0i64;
    // Each stream's state, by type then id (looked up by &str: no allocation per event).
    let mut streams: HashMap<String, HashMap<String, StreamState>> = HashMap::new();
    loop {
        let page = dense_page(store, expected, sequence_head).await?;
        let Some(tail) = page.last().map(|e| e.global_position) else {
            break;
        };
        for e in &page {
            report.events_checked += 1;
            let of_type = match streams.get_mut(e.aggregate_type.as_str()) {
                Some(m) => m,
                None => streams.entry(e.aggregate_type.clone()).or_default(),
            };
            let state = match of_type.get_mut(e.aggregate_id.as_str()) {
                Some(st) => st,
                None => {
                    report.streams_checked += 1;
                    of_type
                        .entry(e.aggregate_id.clone())
                        .or_insert_with(StreamState::new)
                }
            };
            let (broken, expected_hash) =
                broken_link(keyring, e, &state.last_hash, state.next_sequence);
            if let Some((kind, reason)) = broken {
                push_broken(
                    e,
                    kind,
                    reason,
                    expected_hash,
                    findings,
                    &mut report.first_broken,
                );
            }
            // Go on from the stored hash: a tampered event breaks its own link only.
            state.last_hash.clone_from(&e.hash);
            state.next_sequence = e.sequence + 1;
            if e.global_position > expected {
                findings.at(
                    TamperKind::Gap,
                    expected,
                    format!(
                        "positions {expected}..={} are missing: positions are dense, so \
                         events were deleted",
                        e.global_position - 1
                    ),
                );
            }
            if e.hash_key == LEGACY_KEY_ID {
                if let Some(first_keyed) = keyed_since {
                    findings.at(
                        TamperKind::ReChained,
                        e.global_position,
                        format!(
                            "sealed without a chain key after keyed rows (from position \
                             {first_keyed}): re-hashed by someone without the key"
                        ),
                    );
                }
                report.legacy_events += 1;
            } else {
                keyed_since.get_or_insert(e.global_position);
            }
            digest = digest_step(&digest, e.global_position, &e.hash_key, &e.hash);
            while let Some(a) = next_anchor.next_if(|a| a.head_position <= e.global_position) {
                if a.head_position == e.global_position
                    && (a.chain_digest != digest || a.head_hash != e.hash)
                {
                    findings.at(
                        TamperKind::ReChained,
                        a.head_position,
                        format!(
                            "the log up to position {} does not match signed anchor {} \
                             (digest {} signed, {} now)",
                            a.head_position, a.anchor_seq, a.chain_digest, digest
                        ),
                    );
                }
            }
            expected = e.global_position + 1;
        }
        last_row = tail;
    }
    report.highest_position = last_row;
    check_keyed_floor(&anchors, keyed_since, findings);
    let anchored_head = anchors.last().map_or(0, |a| a.head_position);
    let claimed = sequence_head.max(anchored_head);
    if claimed > last_row {
        let by = if anchored_head > last_row {
            format!("signed anchor {} says {anchored_head}", anchors.len())
        } else {
            format!("the sequence row says {sequence_head}")
        };
        findings.at(
            TamperKind::Truncated,
            last_row + 1,
            format!("the log ends at position {last_row} but {by}: its tail was deleted"),
        );
    } else {
        check_rows_beyond(store, sequence_head, findings).await?;
    }
    Ok(())
}

/// Every signed anchor that names a keyed floor still finds the log keyed from there.
fn check_keyed_floor(anchors: &[Anchor], keyed_since: Option<i64>, findings: &mut Findings) {
    for a in anchors {
        let Some(floor) = a.keyed_floor else {
            continue;
        };
        let holds = if floor > 0 {
            keyed_since == Some(floor)
        } else {
            keyed_since.is_none_or(|k| k > a.head_position)
        };
        if !holds {
            let now = keyed_since.map_or("no keyed row".to_owned(), |k| format!("position {k}"));
            findings.at(
                TamperKind::ReChained,
                floor.max(1),
                format!(
                    "signed anchor {} says the log is keyed from position {floor} (0: not up \
                     to {}), but now it is keyed from {now}: rows were re-sealed without \
                     the chain key",
                    a.anchor_seq, a.head_position
                ),
            );
        }
    }
}

/// Rows above the sequence row mean it was set back (the next appends would collide).
/// Appends go on during a verify: the sequence is read again after the rows, and a
/// committed row's position is never above a sequence read after it.
async fn check_rows_beyond(
    store: &dyn EventStore,
    walked_to: i64,
    findings: &mut Findings,
) -> Result<(), StoreError> {
    let Some(highest) = store
        .read_positions(walked_to + 1, i64::MAX)
        .await?
        .last()
        .map(|e| e.global_position)
    else {
        return Ok(());
    };
    let sequence_head = store.head_position().await?;
    if highest > sequence_head {
        findings.at(
            TamperKind::Truncated,
            sequence_head + 1,
            format!(
                "rows reach position {highest} but the sequence row was set back to \
                 {sequence_head}"
            ),
        );
    }
    Ok(())
}

/// Anchors with a valid signature, deduplicated by number, in position order; a forged
/// anchor or two different anchors of one number are findings.
fn usable_anchors(keyring: &Keyring, anchors: &[Anchor], findings: &mut Findings) -> Vec<Anchor> {
    let mut by_seq: std::collections::BTreeMap<i64, Anchor> = Default::default();
    for a in anchors {
        if !a.signed_by(keyring) {
            findings.at(
                TamperKind::ReChained,
                a.head_position,
                format!(
                    "anchor {} does not carry a valid signature of key {:?}: forged or altered",
                    a.anchor_seq,
                    keyring.signing_key_id()
                ),
            );
            continue;
        }
        match by_seq.get(&a.anchor_seq) {
            Some(seen) if seen != a => findings.at(
                TamperKind::ReChained,
                a.head_position.min(seen.head_position),
                format!(
                    "two different signed anchors carry number {}: the anchor table was \
                     rewritten",
                    a.anchor_seq
                ),
            ),
            Some(_) => {}
            None => {
                by_seq.insert(a.anchor_seq, a.clone());
            }
        }
    }
    let mut list: Vec<Anchor> = by_seq.into_values().collect();
    list.sort_by_key(|a| (a.head_position, a.anchor_seq));
    list
}
