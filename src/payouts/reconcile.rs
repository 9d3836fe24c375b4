//! Our payouts against the provider's daily reports (R-REC-1): a reconciliation
//! check (`runtime::reconcile::ExternalCheck`) the composition root registers when a
//! provider is configured. For the last [`REPORT_DAYS`] UTC days it reads the
//! provider's report and `withdrawal_records`, and reports as `event` findings —
//! for a person, never repaired:
//!
//! - a payout the provider made under a reference that is no withdrawal of ours;
//! - two completed payouts for one withdrawal (a double payment);
//! - a completed payout whose withdrawal is settled otherwise here (REJECTED,
//!   FAILED), or whose amount differs;
//! - a withdrawal PAID here with no completed payout in the reports;
//! - a withdrawal PAID here whose payout the provider reversed (the destination bank
//!   returned the money to the provider balance; the wallet was debited).
//!
//! A payout the provider completed while ours is still in flight (PROCESSING,
//! PROVIDER_UNKNOWN) is not a finding: its webhook or the worker's query settles it.

use super::provider::{PayoutProvider, ProviderStatus};
use crate::infra::db::{Db, Get};
use crate::runtime::reconcile::{ExternalCheck, Finding, FindingKind};
use async_trait::async_trait;
use chrono::{Duration, Utc};
use factledger_aggregates::withdrawal::{withdrawal_of_reference, WithdrawalStatus};
use factledger_projections::table::Cell;
use factledger_projections::withdrawals::WITHDRAWALS_TABLES;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// UTC days of reports compared: today and yesterday.
pub const REPORT_DAYS: i64 = 2;

pub struct ProviderReportCheck {
    db: Db,
    provider: Arc<dyn PayoutProvider>,
}

impl ProviderReportCheck {
    pub fn new(db: Db, provider: Arc<dyn PayoutProvider>) -> Self {
        ProviderReportCheck { db, provider }
    }
}

/// A withdrawal as the projection has it.
struct Ours {
    wallet_id: String,
    amount: i64,
    status: String,
}

fn mismatch(wallet: &str, id: &str, why: String, expected: Value, actual: Value) -> Finding {
    Finding::new(
        FindingKind::ProviderReportMismatch,
        wallet,
        "provider_report",
        format!("withdrawal={id}"),
        why,
    )
    .values(Some(expected), Some(actual))
}

async fn ours(db: &Db, tail: &str, args: &[Cell]) -> Result<BTreeMap<String, Ours>, String> {
    let rows = db
        .rows(&WITHDRAWALS_TABLES[0], tail, args)
        .await
        .map_err(|e| e.to_string())?;
    rows.iter()
        .map(|r| {
            Ok((
                r.text("withdrawal_id")?,
                Ours {
                    wallet_id: r.text("wallet_id")?,
                    amount: r.int("amount_minor")?,
                    status: r.text("status")?,
                },
            ))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(|e| e.to_string())
}

#[async_trait]
impl ExternalCheck for ProviderReportCheck {
    fn name(&self) -> &'static str {
        "provider_report"
    }

    async fn findings(&self) -> Result<Vec<Finding>, String> {
        let today = Utc::now().date_naive();
        let mut theirs = Vec::new();
        for back in 0..REPORT_DAYS {
            let day = today - Duration::days(back);
            theirs.extend(self.provider.report(day).await.map_err(|e| e.to_string())?);
        }
        let since = (today - Duration::days(REPORT_DAYS - 1)).to_string();
        let mut ours = ours(
            &self.db,
            "WHERE requested_at >= ? ORDER BY withdrawal_id",
            &[Cell::text(since)],
        )
        .await?;
        // Withdrawals requested earlier but paid in the window.
        for p in &theirs {
            let id = withdrawal_of_reference(&p.reference);
            if !ours.contains_key(id) {
                ours.extend(
                    self::ours(&self.db, "WHERE withdrawal_id = ?", &[Cell::text(id)]).await?,
                );
            }
        }
        let mut findings = Vec::new();
        let mut completed: BTreeMap<&str, u32> = BTreeMap::new();
        let mut reversed: BTreeMap<&str, &str> = BTreeMap::new();
        for p in &theirs {
            let id = withdrawal_of_reference(&p.reference);
            let status = format!("{:?}", p.status);
            let Some(o) = ours.get(id) else {
                findings.push(mismatch(
                    "",
                    id,
                    format!(
                        "the provider's payout {} ({}) is no withdrawal of ours",
                        p.provider_id, p.reference
                    ),
                    Value::Null,
                    json!({"reference": p.reference, "amount": p.amount_minor, "status": status}),
                ));
                continue;
            };
            if p.amount_minor != o.amount {
                findings.push(mismatch(
                    &o.wallet_id,
                    id,
                    format!(
                        "the provider paid {} under {}, the withdrawal is for {}",
                        p.amount_minor, p.reference, o.amount
                    ),
                    json!({"amount": o.amount}),
                    json!({"amount": p.amount_minor}),
                ));
            }
            if p.status == ProviderStatus::Reversed && o.status == WithdrawalStatus::Paid.as_str() {
                reversed.insert(id, &p.provider_id);
                findings.push(mismatch(
                    &o.wallet_id,
                    id,
                    format!(
                        "the provider reversed payout {} of PAID withdrawal {id}: the money \
                         is back in the provider balance and the wallet was debited",
                        p.provider_id
                    ),
                    json!({"status": o.status}),
                    json!({"status": status, "reference": p.reference}),
                ));
            }
            if p.status == ProviderStatus::Succeeded {
                *completed.entry(id).or_default() += 1;
                let settled_otherwise = [WithdrawalStatus::Rejected, WithdrawalStatus::Failed]
                    .iter()
                    .any(|s| s.as_str() == o.status);
                if settled_otherwise {
                    findings.push(mismatch(
                        &o.wallet_id,
                        id,
                        format!(
                            "the provider completed {} but the withdrawal is {}",
                            p.reference, o.status
                        ),
                        json!({"status": o.status}),
                        json!({"status": status, "reference": p.reference}),
                    ));
                }
            }
        }
        for (id, o) in &ours {
            let paid_there = completed.get(id.as_str()).copied().unwrap_or(0);
            if paid_there > 1 {
                findings.push(mismatch(
                    &o.wallet_id,
                    id,
                    format!("the provider completed {paid_there} payouts for withdrawal {id}"),
                    json!({"completed": 1}),
                    json!({"completed": paid_there}),
                ));
            }
            let reversal_reported = reversed.contains_key(id.as_str());
            if o.status == WithdrawalStatus::Paid.as_str() && paid_there == 0 && !reversal_reported
            {
                findings.push(mismatch(
                    &o.wallet_id,
                    id,
                    format!("withdrawal {id} is PAID here; the provider's reports show no completed payout"),
                    json!({"completed": 1}),
                    json!({"completed": 0}),
                ));
            }
        }
        Ok(findings)
    }
}
