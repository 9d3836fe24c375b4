//! Reconciliation of the affiliate facts (issue 5 item 6), in the run's snapshot:
//!
//! - **Commissions against wallets** (R-REC-1), both sides replayed from events up to
//!   the run's `commissions_up_to_position` (the head as the run's snapshot sees it:
//!   see `check_commissions`), never read from projection tables: per wallet that
//!   some commission pays into, Σ of the amounts of its PENDING and FROZEN
//!   commissions (a frozen commission's credit stays in pending: `CommissionFrozen`
//!   has no wallet effect) must equal the pending its commission ledger entries hold
//!   (Σ `delta.pending` of its movements with `ref_type` COMMISSION or
//!   COMMISSION_ADJUSTMENT), and Σ of its commissions' `CommissionReleased` amounts
//!   must equal Σ of its `RELEASE_PENDING` movements with `ref_type` COMMISSION. A
//!   difference is an `event` finding: the money facts disagree, and only people
//!   correct events. (Wallets no commission names are not compared: money moved by
//!   hand with `ref_type COMMISSION` through the wallet API has no commission to
//!   compare with; their ledger is still checked by the wallet pass.)
//! - **Each affiliate projection against its own events**: the pure projector folds
//!   the events of its aggregate types up to the projection's own checkpoint (read in
//!   the same snapshot, so rows and checkpoint agree) into rows in memory, which are
//!   compared with the stored ones. A difference is `projection_drift`, repaired by a
//!   full rebuild of that projection.
//!
//! Memory: the commission check keeps two sums per wallet that commissions pay into;
//! the projection check keeps a projection's expected and stored rows. Both grow with
//! the number of commissions, not with the log; paging them like the wallet pass is
//! the next step when that matters.

use super::diff::*;
use super::pages::*;
use super::pass::*;
use super::report::*;
use super::rows::*;
use crate::infra::db::Db;
use crate::infra::db::{mysql_cells, sqlite_cells};
use crate::infra::store::{DynStore, StoredEvent};
use crate::runtime::projector::select_sql;
use factledger_aggregates::commission::{
    Commission, CommissionEvent, CommissionStatus, COMMISSION_ADJUSTMENT_REF_TYPE,
    COMMISSION_AGGREGATE_TYPE, COMMISSION_REF_TYPE,
};
use factledger_aggregates::wallet::EntryType;
use factledger_aggregates::Decide;
use factledger_projections::table::{Cell, MemRow, MemTables, Projector, TableDef};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What the commissions (`expected`) and the wallet's ledger (`actual`) say.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    pending_expected: i64,
    pending_actual: i64,
    released_expected: i64,
    released_actual: i64,
    commissions: u64,
}

impl Pass {
    pub(super) fn push(&mut self, f: Finding) {
        self.counts.add(f.class, 1);
        self.note_contradiction(&f);
        if self.findings.len() < FINDINGS_STORED_MAX {
            self.findings.push(f);
        } else {
            self.truncated = true;
        }
    }
}

/// Read every event of `aggregate_type` up to `up_to`, stream by stream, in pages.
pub(super) async fn stream_pages(
    snap: &mut Snapshot,
    aggregate_type: &str,
    up_to: i64,
    page_rows: i64,
    mut each: impl FnMut(StoredEvent),
) -> Result<(), ReconcileError> {
    let page_rows = page_rows.clamp(1, PAGE_ROWS_MAX);
    let mut after: Option<(String, i64)> = None;
    loop {
        let mut conditions = vec![
            "aggregate_type = ?".to_owned(),
            "global_position <= ?".into(),
        ];
        let mut args = vec![Arg::Text(aggregate_type.to_owned()), Arg::Int(up_to)];
        if let Some((id, sequence)) = &after {
            let key = vec![Arg::Text(id.clone()), Arg::Int(*sequence)];
            let (cond, key) = snap.after(&["aggregate_id", "sequence"], key);
            conditions.push(cond);
            args.extend(key);
        }
        let select = format!("SELECT {EVENT_COLUMNS} FROM {}", snap.events_table());
        let sql = page_sql(
            &select,
            &conditions,
            "aggregate_type, aggregate_id, sequence",
            page_rows,
        );
        let rows =
            snap.fetch(&sql, &args, event_row)
                .await
                .map_err(|source| ReconcileError::Row {
                    table: "events",
                    after: format!("{after:?}"),
                    source,
                })?;
        let full = rows.len() as i64 == page_rows;
        for mut row in rows {
            row.event.aggregate_type = aggregate_type.to_owned();
            after = Some((row.event.aggregate_id.clone(), row.event.sequence));
            each(row.event);
        }
        if !full {
            return Ok(());
        }
    }
}

/// One commission stream folded so far.
struct CommissionReplay {
    id: String,
    state: Commission,
    released_minor: i64,
    broken: bool,
}

impl CommissionReplay {
    fn new(id: &str) -> Self {
        CommissionReplay {
            id: id.to_owned(),
            state: Commission::default(),
            released_minor: 0,
            broken: false,
        }
    }

    /// Fold one event; a finding when it cannot be.
    fn event(&mut self, e: &StoredEvent) -> Option<Finding> {
        if self.broken {
            return None;
        }
        let decoded = e
            .current_payload()
            .map_err(|err| err.to_string())
            .and_then(|(_, p)| CommissionEvent::deserialize(&p).map_err(|err| err.to_string()))
            .and_then(|ev| {
                self.state
                    .check(&ev)
                    .map(|()| ev)
                    .map_err(|v| v.to_string())
            });
        match decoded {
            Ok(ev) => {
                if let CommissionEvent::CommissionReleased(r) = &ev {
                    self.released_minor += r.amount_minor;
                }
                cqrs_es::Aggregate::apply(&mut self.state, ev);
                None
            }
            Err(why) => {
                // The rest of the stream cannot be judged without this event.
                self.broken = true;
                let wallet = self
                    .state
                    .record
                    .as_ref()
                    .map(|r| r.wallet_id.clone())
                    .unwrap_or_default();
                Some(
                    Finding::new(
                        FindingKind::CommissionEventInvalid,
                        &wallet,
                        "events",
                        format!("commission={}", self.id),
                        format!("{} cannot be replayed: {why}", e.event_type),
                    )
                    .event(Some(&event_ref(e))),
                )
            }
        }
    }

    /// Add the finished stream to its wallet's sums.
    fn finish(self, sums: &mut BTreeMap<String, Sums>) {
        let Some(r) = self.state.record else {
            return;
        };
        let s = sums.entry(r.wallet_id).or_default();
        s.commissions += 1;
        if matches!(
            r.status,
            CommissionStatus::Pending | CommissionStatus::Frozen
        ) {
            s.pending_expected += r.amount_minor;
        }
        s.released_expected += self.released_minor;
    }
}

/// The wallet side: commission movements read by the ledger key index, folded into
/// the sums of the wallets commissions pay into.
async fn wallet_side(
    snap: &mut Snapshot,
    up_to: i64,
    page_rows: i64,
    sums: &mut BTreeMap<String, Sums>,
) -> Result<(), ReconcileError> {
    for ref_type in [COMMISSION_REF_TYPE, COMMISSION_ADJUSTMENT_REF_TYPE] {
        let filter = [Arg::Text(ref_type.to_owned())];
        ledger_movements(
            snap,
            "ledger_ref_type = ?",
            &filter,
            up_to,
            page_rows,
            |e, m| {
                let Some(s) = sums.get_mut(&e.aggregate_id) else {
                    return;
                };
                s.pending_actual += m.delta.pending_minor;
                if ref_type == COMMISSION_REF_TYPE && m.entry_type == EntryType::ReleasePending {
                    s.released_actual += m.amount_minor;
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Σ PENDING (and FROZEN) commissions = the wallet's commission pending, and Σ
/// released commissions = the wallet's commission releases, per wallet.
pub(super) async fn check_commissions(
    snap: &mut Snapshot,
    pass: &mut Pass,
    page_rows: i64,
) -> Result<(), ReconcileError> {
    // Not the wallet checkpoint: a unit (commission event + its wallet effect) is
    // atomic, but the wallet runner's batches end anywhere, so its checkpoint can fall
    // inside a unit and split a commission from its credit. Every event the snapshot
    // shows belongs to a whole unit, so the head as the snapshot sees it is a cut
    // both sides agree on; it is recorded in the report.
    let heads = snap
        .fetch(
            "SELECT COALESCE(MAX(global_position), 0) FROM events",
            &[],
            |r| r.int(0),
        )
        .await?;
    let up_to = heads.into_iter().next().unwrap_or(0);
    pass.commissions_up_to_position = up_to;
    let mut sums: BTreeMap<String, Sums> = BTreeMap::new();
    let mut current: Option<CommissionReplay> = None;
    let mut findings = Vec::new();
    let mut streams = 0u64;
    stream_pages(snap, COMMISSION_AGGREGATE_TYPE, up_to, page_rows, |e| {
        if current.as_ref().is_some_and(|c| c.id != e.aggregate_id) {
            if let Some(done) = current.take() {
                done.finish(&mut sums);
            }
        }
        let c = current.get_or_insert_with(|| {
            streams += 1;
            CommissionReplay::new(&e.aggregate_id)
        });
        findings.extend(c.event(&e));
    })
    .await?;
    if let Some(done) = current.take() {
        done.finish(&mut sums);
    }
    pass.commissions_checked += streams;
    for f in findings {
        pass.push(f);
    }
    wallet_side(snap, up_to, page_rows, &mut sums).await?;
    for (wallet, s) in sums {
        if s.pending_expected != s.pending_actual {
            pass.push(
                Finding::new(
                    FindingKind::CommissionPendingMismatch,
                    &wallet,
                    "events",
                    format!("wallet_id={wallet}"),
                    format!(
                        "the wallet's {} commissions PENDING or FROZEN amount to {}, its \
                         commission ledger entries hold {} in pending",
                        s.commissions, s.pending_expected, s.pending_actual
                    ),
                )
                .values(
                    Some(Value::from(s.pending_expected)),
                    Some(Value::from(s.pending_actual)),
                ),
            );
        }
        if s.released_expected != s.released_actual {
            pass.push(
                Finding::new(
                    FindingKind::CommissionReleaseMismatch,
                    &wallet,
                    "events",
                    format!("wallet_id={wallet}"),
                    format!(
                        "the wallet's commissions released {}, its RELEASE_PENDING entries \
                         of ref_type COMMISSION move {}",
                        s.released_expected, s.released_actual
                    ),
                )
                .values(
                    Some(Value::from(s.released_expected)),
                    Some(Value::from(s.released_actual)),
                ),
            );
        }
    }
    Ok(())
}

impl Snapshot {
    /// Every row of a projection table, in the snapshot.
    async fn rows(&mut self, def: &TableDef) -> Result<Vec<MemRow>, sqlx::Error> {
        let sql = select_sql(def, &format!("ORDER BY {}", def.key.join(", ")));
        match self {
            Snapshot::Mysql(tx) => sqlx::query(&sql)
                .fetch_all(&mut **tx)
                .await?
                .iter()
                .map(|r| mysql_cells(r, def.columns))
                .collect(),
            Snapshot::Sqlite(tx) => sqlx::query(&sql)
                .fetch_all(&mut **tx)
                .await?
                .iter()
                .map(|r| sqlite_cells(r, def.columns))
                .collect(),
        }
    }

    async fn position_of(&mut self, name: &str) -> Result<i64, ReconcileError> {
        let sql = "SELECT position FROM projection_checkpoints WHERE name = ?";
        let rows = self
            .fetch(sql, &[Arg::Text(name.to_owned())], |r| r.int(0))
            .await?;
        Ok(rows.into_iter().next().unwrap_or(0))
    }
}

fn key_text(key: &[Cell]) -> String {
    key.iter()
        .map(|c| match c {
            Cell::Text(s) => s.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Null => "null".into(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn row_value(row: &MemRow) -> Value {
    value(row)
}

/// Compare one affiliate projection with a replay of its events up to its own
/// checkpoint. Returns the number of drift findings.
pub(super) async fn check_projection(
    snap: &mut Snapshot,
    pass: &mut Pass,
    projector: &dyn Projector,
    page_rows: i64,
) -> Result<u64, ReconcileError> {
    let name = projector.name();
    let up_to = snap.position_of(name).await?;
    let mut expected = MemTables::default();
    let mut event_findings = Vec::new();
    for aggregate_type in projector.aggregate_types() {
        stream_pages(snap, aggregate_type, up_to, page_rows, |e| {
            let applied = crate::runtime::projector::project_event(projector, &e)
                .map_err(|err| err.reason)
                .and_then(|changes| {
                    changes
                        .iter()
                        .try_for_each(|c| expected.apply(projector.tables(), c))
                });
            if let Err(why) = applied {
                event_findings.push(
                    Finding::new(
                        FindingKind::PayloadUndecodable,
                        "",
                        "events",
                        format!("{}/{}", e.aggregate_type, e.aggregate_id),
                        format!("{name} cannot project {}: {why}", e.event_type),
                    )
                    .event(Some(&event_ref(&e))),
                );
            }
        })
        .await?;
    }
    let mut drift = 0u64;
    let mut rows_checked = 0u64;
    let mut findings = Vec::new();
    for def in projector.tables() {
        let stored = snap.rows(def).await.map_err(|source| ReconcileError::Row {
            table: "projection",
            after: def.name.to_owned(),
            source,
        })?;
        rows_checked += stored.len() as u64;
        let mut want = expected.tables.remove(def.name).unwrap_or_default();
        for row in stored {
            let cells: Vec<(&'static str, Cell)> =
                row.iter().map(|(k, v)| (*k, v.clone())).collect();
            let key = factledger_projections::table::key_of(def.key, &cells).unwrap_or_default();
            let finding = match want.remove(&key) {
                Some(w) if w == row => continue,
                Some(w) => {
                    let (e, a) = (row_value(&w), row_value(&row));
                    Finding::new(
                        FindingKind::RowDiffers,
                        "",
                        def.name,
                        key_text(&key),
                        differences(&e, &a),
                    )
                    .values(Some(e), Some(a))
                }
                None => Finding::new(
                    FindingKind::RowExtra,
                    "",
                    def.name,
                    key_text(&key),
                    "no event makes this row",
                )
                .values(None, Some(row_value(&row))),
            };
            findings.push(finding);
        }
        for (key, w) in want {
            findings.push(
                Finding::new(
                    FindingKind::RowMissing,
                    "",
                    def.name,
                    key_text(&key),
                    "the events make this row; it is not stored",
                )
                .values(Some(row_value(&w)), None),
            );
        }
    }
    let has_event_findings = !event_findings.is_empty();
    for mut f in findings {
        drift += 1;
        f.projection = Some(name.to_owned());
        if has_event_findings {
            f.repair = format!("refused: {name} has event-level findings");
        } else {
            f.repair = "auto: full rebuild of the projection".into();
        }
        pass.push(f);
    }
    for mut f in event_findings {
        f.projection = Some(name.to_owned());
        pass.push(f);
    }
    if drift > 0 && !has_event_findings {
        pass.drifted_projections.push(name);
    }
    pass.projections_checked.push(ProjectionChecked {
        name: name.to_owned(),
        up_to_position: up_to,
        rows_checked,
    });
    Ok(drift)
}

/// Rebuild each drifted affiliate projection in full, re-check it in a fresh
/// snapshot and mark its findings repaired or not.
pub(super) async fn repair(
    store: &DynStore,
    db: &Db,
    drifted: &[&'static str],
    page_rows: i64,
    report: &mut Report,
) -> Result<(), ReconcileError> {
    for name in drifted {
        let Some(projector) = crate::runtime::projector::find(name) else {
            continue;
        };
        let rebuilt = crate::runtime::projector::rebuild_full(store, db, projector.as_ref()).await;
        let mut snap = Snapshot::open(db).await?;
        let mut recheck = Pass::new(store.keyring().clone(), 0);
        check_projection(&mut snap, &mut recheck, projector.as_ref(), page_rows).await?;
        snap.close().await?;
        let still: BTreeSet<(String, String)> = recheck
            .findings
            .iter()
            .map(|f| (f.table.clone(), f.key.clone()))
            .collect();
        let mut repaired = 0u64;
        for f in &mut report.findings {
            if f.projection.as_deref() != Some(*name) || f.class != FindingClass::ProjectionDrift {
                continue;
            }
            if let Err(e) = &rebuilt {
                f.repair = format!("failed: {e}");
                f.repaired = Some(false);
                continue;
            }
            let ok = !still.contains(&(f.table.clone(), f.key.clone()));
            f.repaired = Some(ok);
            repaired += u64::from(ok);
        }
        report.remaining.projection_drift =
            report.remaining.projection_drift.saturating_sub(repaired);
        if let Err(e) = rebuilt {
            tracing::error!(projection = name, error = %e, "full rebuild for the repair failed");
        }
    }
    Ok(())
}
