//! The journal (double entry, issue 16) in the run's snapshot:
//!
//! - **the trial balance is zero**: per currency, Σ debits = Σ credits over the
//!   journal's lines and over `account_balances`;
//! - **each account's totals are its lines**: `account_balances` against the sums of
//!   `journal` per account;
//! - **each wallet bucket account is the wallet projection's bucket**: at the cut both
//!   have applied (the lower of the journal's checkpoint and the wallet rows'
//!   position), the credit balance of `wallet:{id}:{bucket}` equals that bucket after
//!   the wallet's last ledger entry up to the cut.
//!
//! Every difference is a `JournalImbalance` finding of class `event`: an integrity
//! finding, never repaired automatically (a rebuild of the journal, by people, after
//! finding out why).

use super::pages::*;
use super::pass::*;
use super::report::*;
use std::collections::BTreeMap;

fn finding(table: &str, key: String, detail: String) -> Finding {
    let mut f = Finding::new(FindingKind::JournalImbalance, "", table, key, detail);
    f.projection = Some(factledger_projections::ledger::NAME.to_owned());
    f
}

/// The journal's checkpoint in the snapshot (0 when it never ran).
async fn journal_position(snap: &mut Snapshot) -> Result<i64, sqlx::Error> {
    let sql = "SELECT position FROM projection_checkpoints WHERE name = ?";
    let args = [Arg::Text(factledger_projections::ledger::NAME.to_owned())];
    let rows = snap.fetch(sql, &args, |r| r.int(0)).await?;
    Ok(rows.into_iter().next().unwrap_or(0))
}

/// Σ debits and Σ credits per currency of `sql` (currency, debits, credits).
async fn totals(
    snap: &mut Snapshot,
    sql: &str,
) -> Result<BTreeMap<String, (i64, i64)>, sqlx::Error> {
    let rows = snap
        .fetch(sql, &[], |r| Ok((r.text(0)?, r.int(1)?, r.int(2)?)))
        .await?;
    Ok(rows.into_iter().map(|(c, d, k)| (c, (d, k))).collect())
}

/// Run the journal checks; the journal position they read and the accounts checked.
pub(super) async fn check_journal(
    snap: &mut Snapshot,
    pass: &mut Pass,
    wallet_cut: i64,
) -> Result<(i64, u64), ReconcileError> {
    let position = journal_position(snap).await?;
    let signed = snap.signed();
    let lines = totals(
        snap,
        &format!(
            "SELECT currency, CAST(SUM(debit_minor) AS {signed}), \
             CAST(SUM(credit_minor) AS {signed}) FROM journal GROUP BY currency"
        ),
    )
    .await?;
    let accounts = totals(
        snap,
        &format!(
            "SELECT currency, CAST(SUM(debits_minor) AS {signed}), \
             CAST(SUM(credits_minor) AS {signed}) FROM account_balances GROUP BY currency"
        ),
    )
    .await?;
    for (table, sums) in [("journal", &lines), ("account_balances", &accounts)] {
        for (currency, (debits, credits)) in sums {
            if debits != credits {
                pass.push(finding(
                    table,
                    format!("currency={currency}"),
                    format!("trial balance not zero: debits {debits} ≠ credits {credits}"),
                ));
            }
        }
    }
    let accounts = check_account_totals(snap, pass, signed).await?;
    check_wallet_buckets(snap, pass, position.min(wallet_cut), signed).await?;
    Ok((position, accounts))
}

/// `account_balances` against the sums of the journal's lines, account by account.
async fn check_account_totals(
    snap: &mut Snapshot,
    pass: &mut Pass,
    signed: &str,
) -> Result<u64, ReconcileError> {
    let sql = format!(
        "SELECT b.account, b.debits_minor, b.credits_minor, \
         CAST(COALESCE(SUM(j.debit_minor), 0) AS {signed}), \
         CAST(COALESCE(SUM(j.credit_minor), 0) AS {signed}) \
         FROM account_balances b LEFT JOIN journal j ON j.account = b.account \
         GROUP BY b.account, b.debits_minor, b.credits_minor"
    );
    let rows = snap
        .fetch(&sql, &[], |r| {
            Ok((r.text(0)?, r.int(1)?, r.int(2)?, r.int(3)?, r.int(4)?))
        })
        .await?;
    let checked = rows.len() as u64;
    for (account, debits, credits, line_debits, line_credits) in rows {
        if (debits, credits) != (line_debits, line_credits) {
            pass.push(finding(
                "account_balances",
                format!("account={account}"),
                format!(
                    "totals debits {debits} / credits {credits}, but its journal lines sum \
                     to {line_debits} / {line_credits}"
                ),
            ));
        }
    }
    Ok(checked)
}

/// Each wallet bucket account against the wallet projection, at `cut`.
async fn check_wallet_buckets(
    snap: &mut Snapshot,
    pass: &mut Pass,
    cut: i64,
    signed: &str,
) -> Result<(), ReconcileError> {
    let sql = format!(
        "SELECT account, CAST(SUM(credit_minor) - SUM(debit_minor) AS {signed}) FROM journal \
         WHERE account LIKE 'wallet:%' AND position <= ? GROUP BY account"
    );
    let journal: BTreeMap<String, i64> = snap
        .fetch(&sql, &[Arg::Int(cut)], |r| Ok((r.text(0)?, r.int(1)?)))
        .await?
        .into_iter()
        .collect();
    let sql = "SELECT l.wallet_id, l.after_pending_minor, l.after_available_minor, \
               l.after_frozen_minor, l.after_risk_hold_minor FROM wallet_ledger l \
               JOIN (SELECT wallet_id, MAX(sequence) AS last FROM wallet_ledger \
                     WHERE global_position <= ? GROUP BY wallet_id) m \
               ON l.wallet_id = m.wallet_id AND l.sequence = m.last";
    let wallets = snap
        .fetch(sql, &[Arg::Int(cut)], |r| {
            Ok((r.text(0)?, [r.int(1)?, r.int(2)?, r.int(3)?, r.int(4)?]))
        })
        .await?;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for (wallet, buckets) in wallets {
        for (bucket, value) in ["pending", "available", "frozen", "risk_hold"]
            .iter()
            .zip(buckets)
        {
            expected.insert(format!("wallet:{wallet}:{bucket}"), value);
        }
    }
    let accounts: std::collections::BTreeSet<&String> =
        expected.keys().chain(journal.keys()).collect();
    for account in accounts {
        let (want, got) = (
            expected.get(account).copied().unwrap_or(0),
            journal.get(account).copied().unwrap_or(0),
        );
        if want != got {
            pass.push(finding(
                "journal",
                format!("account={account}"),
                format!(
                    "bucket account holds {got} at position {cut}, the wallet projection's \
                     bucket {want}"
                ),
            ));
        }
    }
    Ok(())
}
