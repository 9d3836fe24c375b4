//! The resident-income bill decision (SPEC §7, seed 001 §5): from every fact of one
//! station-month to the payment projection its three bill rows carry — payment status
//! (R-BILL-2), amounts (R-BILL-3), the pre-rent check (R-BILL-4), the partner query
//! status and unqualified fields (R-BILL-5), the lock projection (R-BILL-6).
//!
//! [`decide`] is a pure function: no I/O, no clock, no database. The bill projector
//! assembles a [`BillFacts`] from events and writes the [`Decision`]; the same facts
//! always give the same decision, and the decision names the rule that fired.
//!
//! **Architecture invariant:** nothing here reads a remote service or defaults a
//! missing fact to a pass: "not configured" must be a recorded fact, and a cycle that
//! cannot be computed is an error ([`BillError`]), never a silent null (seed §9.3).

pub mod decision;
pub mod facts;
pub mod fold;
pub mod inspect;
pub mod order_status;
pub mod refresh;
pub mod snapshot;
pub mod tables;
#[cfg(test)]
mod tests;

pub use decision::*;
pub use facts::*;

use chrono::{DateTime, Utc};

/// Why a station-month has no decision, or an input did not parse. A decision error
/// stops the station-month and becomes an error finding (R-BILL-11).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BillError {
    #[error("`{0}` is not a station-month: expected <station_id>:<yyyymm>")]
    BadStationMonth(String),
    #[error("`{0}` is not a bill month: expected yyyymm")]
    BadMonth(String),
    #[error("{station_month}: partner org {partner_org_id} has no partner profile recorded")]
    PartnerProfileUnrecorded {
        station_month: StationMonth,
        partner_org_id: i64,
    },
    #[error("{station_month}: payment cycle {cycle} cannot be computed: {why}")]
    CycleUncomputable {
        station_month: StationMonth,
        cycle: String,
        why: String,
    },
    #[error(
        "{station_month}: cycle {cycle} needs the cutoff month of account {account_id}, which is empty"
    )]
    CutoffMonthMissing {
        station_month: StationMonth,
        cycle: String,
        account_id: i64,
    },
    #[error(
        "{station_month}: {count} opening paid balances for platform station {platform_station_id} and partner org {partner_org_id}"
    )]
    DuplicateOpeningPaidBalance {
        station_month: StationMonth,
        platform_station_id: i64,
        partner_org_id: i64,
        count: usize,
    },
    #[error("{station_month}: {what} overflows i64 minor units")]
    AmountOverflow {
        station_month: StationMonth,
        what: &'static str,
    },
}

/// The payment projection of one station-month.
pub fn decide(facts: &BillFacts) -> Result<Decision, BillError> {
    let view = View::of(facts);
    let amounts = Amounts::of(&view)?;
    let decided_by = status_rule(&view, &amounts);
    let payment_status = decided_by.status();
    let pre_rent_check = pre_rent_check(&view, &amounts)?;
    let unqualified = Unqualified::of(&view);
    let (partner_query_status, partner_query_decided_by) =
        partner_query(&view, &amounts, &unqualified, payment_status);
    let lock = view.valid_lock;
    Ok(Decision {
        station_month: facts.station_month,
        partner_bill_id: facts.partner_bill.as_ref().map(|b| b.id),
        diff_id: facts.diff.map(|d| d.id),
        payment_status,
        decided_by,
        paid_amount_minor: amounts.paid,
        current_payment_amount_minor: amounts.current,
        cumulative_paid_amount_minor: amounts.cumulative,
        pre_rent_check,
        partner_query_status,
        partner_query_decided_by,
        unqualified_flag: unqualified.flag(),
        unqualified_reason: unqualified.reason(),
        last_unqualified: unqualified.last(facts),
        locked_payment_order_id: lock.map(|l| l.lock.order_id),
        locked_order_bill_id: lock.map(|l| l.lock.line_id),
    })
}

/// A valid lock with the current master and line it is joined to.
#[derive(Debug, Clone, Copy)]
struct ValidLock<'a> {
    lock: &'a BillLock,
    order: &'a PaymentOrder,
    line: &'a BillLine,
}

/// A line of a current publish identity with its master.
#[derive(Debug, Clone, Copy)]
struct CurrentLine<'a> {
    line: &'a BillLine,
    order: &'a PaymentOrder,
}

/// The facts with the joins every rule shares: the valid lock and the selected
/// payable line.
struct View<'a> {
    facts: &'a BillFacts,
    valid_lock: Option<ValidLock<'a>>,
    /// The representative PAYABLE line (seed §4.5): the seed's "selected" and "latest"
    /// payable line are this one, and its master is the "latest payable master".
    selected: Option<CurrentLine<'a>>,
}

impl<'a> View<'a> {
    fn of(facts: &'a BillFacts) -> View<'a> {
        let mut view = View {
            facts,
            valid_lock: None,
            selected: None,
        };
        view.valid_lock = view.find_valid_lock();
        view.selected = view
            .current_lines()
            .filter(|c| c.line.kind == LineKind::Payable)
            .max_by_key(|c| (view.source_priority(c.line), c.line.line_at, c.line.id));
        view
    }

    /// The master, if it is published with exactly this publish identity.
    fn current_order(&self, order_id: i64, version: i64, round: i64) -> Option<&'a PaymentOrder> {
        self.facts.orders.iter().find(|o| {
            o.id == order_id
                && o.published
                && o.publish_version == version
                && o.submit_round == round
        })
    }

    /// Lines of their master's current publish identity, not deleted.
    fn current_lines(&self) -> impl Iterator<Item = CurrentLine<'a>> + '_ {
        self.facts
            .lines
            .iter()
            .filter(|l| !l.deleted)
            .filter_map(|line| {
                let order =
                    self.current_order(line.order_id, line.publish_version, line.submit_round)?;
                Some(CurrentLine { line, order })
            })
    }

    /// RESERVED or ACTIVE, joined to the current published master and line (same
    /// order, publish version, submit round). Should several be valid, the latest.
    fn find_valid_lock(&self) -> Option<ValidLock<'a>> {
        let f = self.facts;
        f.locks
            .iter()
            .filter(|l| matches!(l.status, LockStatus::Reserved | LockStatus::Active))
            .filter_map(|lock| {
                let order =
                    self.current_order(lock.order_id, lock.publish_version, lock.submit_round)?;
                let line = f.lines.iter().find(|l| {
                    l.id == lock.line_id
                        && l.order_id == lock.order_id
                        && l.publish_version == lock.publish_version
                        && l.submit_round == lock.submit_round
                        && !l.deleted
                })?;
                Some(ValidLock { lock, order, line })
            })
            .max_by_key(|v| (v.lock.locked_at, v.lock.id))
    }

    fn result(&self, id: i64) -> Option<&'a PaymentResult> {
        self.facts.results.iter().find(|r| r.id == id)
    }

    /// The line's latest result as an outcome: a voided result is no outcome.
    fn outcome(&self, line: &BillLine) -> Option<ResultStatus> {
        let r = self.result(line.latest_result_id?)?;
        (!r.voided).then_some(r.status)
    }

    /// Non-voided treasury or offline result 2, fail fallback 1, else 0 (seed §4.5).
    fn source_priority(&self, line: &BillLine) -> u8 {
        match line.latest_result_id.and_then(|id| self.result(id)) {
            Some(r)
                if !r.voided
                    && matches!(
                        r.source,
                        ResultSource::Treasury | ResultSource::OfflineImport
                    ) =>
            {
                2
            }
            Some(r) if r.source == ResultSource::FailFallback => 1,
            _ => 0,
        }
    }

    /// The partner bill's own partner account.
    fn partner_account(&self) -> Option<&'a PartnerAccount> {
        let bill = self.facts.partner_bill.as_ref()?;
        self.facts
            .partner_accounts
            .iter()
            .find(|a| a.id == bill.partner_account_id)
    }

    fn small_bill_only(&self) -> bool {
        self.facts.small_bill.is_some() && self.facts.partner_bill.is_none()
    }
}

/// The business account key (seed §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AccountKey {
    Small {
        station_id: i64,
        partner_org_id: i64,
    },
    Platform {
        station_id: i64,
        partner_org_id: i64,
    },
}

impl AccountKey {
    /// `None`: the business account is unknown (no partner account, or no platform
    /// station on the platform route).
    fn of(view: &View) -> Option<AccountKey> {
        let account = view.partner_account()?;
        let partner_org_id = account.partner_org_id;
        Some(match view.facts.account_route {
            AccountRoute::Default => AccountKey::Small {
                station_id: view.facts.station_month.station_id,
                partner_org_id,
            },
            AccountRoute::Platform => AccountKey::Platform {
                station_id: account.platform_station_id?,
                partner_org_id,
            },
        })
    }

    fn holds(self, r: &PaymentResult) -> bool {
        match self {
            AccountKey::Small {
                station_id,
                partner_org_id,
            } => r.small_station_id == station_id && r.partner_org_id == Some(partner_org_id),
            AccountKey::Platform {
                station_id,
                partner_org_id,
            } => {
                r.platform_station_id == Some(station_id)
                    && r.partner_org_id == Some(partner_org_id)
            }
        }
    }
}

/// A successful result from the treasury or an offline import, not voided: what
/// every paid sum counts (the current one also asks for NORMAL_PAYMENT).
fn counts_as_paid(r: &PaymentResult) -> bool {
    r.status == ResultStatus::Success
        && !r.voided
        && matches!(
            r.source,
            ResultSource::Treasury | ResultSource::OfflineImport
        )
}

fn checked_sum(
    view: &View,
    what: &'static str,
    amounts: impl IntoIterator<Item = i64>,
) -> Result<i64, BillError> {
    amounts
        .into_iter()
        .try_fold(0i64, |sum, a| sum.checked_add(a))
        .ok_or(BillError::AmountOverflow {
            station_month: view.facts.station_month,
            what,
        })
}

/// R-BILL-3.
struct Amounts {
    pre_rent: Option<i64>,
    /// This station-month's successful normal treasury/offline results.
    paid: i64,
    /// The offline-import part of `paid`: R-BILL-2 rule 3 reads it.
    offline_paid: i64,
    current: Option<i64>,
    cumulative: i64,
}

impl Amounts {
    fn of(view: &View) -> Result<Amounts, BillError> {
        let f = view.facts;
        let sm = f.station_month;
        let this_month = || {
            f.results.iter().filter(move |r| {
                r.small_station_id == sm.station_id
                    && r.month == sm.month
                    && counts_as_paid(r)
                    && r.kind == ResultType::NormalPayment
            })
        };
        let paid = checked_sum(view, "paid amount", this_month().map(|r| r.amount_minor))?;
        let offline_paid = checked_sum(
            view,
            "offline paid amount",
            this_month()
                .filter(|r| r.source == ResultSource::OfflineImport)
                .map(|r| r.amount_minor),
        )?;
        let pre_rent = f.partner_bill.as_ref().and_then(|b| b.pre_rent_minor);
        let overflow = || BillError::AmountOverflow {
            station_month: sm,
            what: "current payment amount",
        };
        let current = pre_rent
            .map(|p| p.checked_sub(paid).ok_or_else(overflow))
            .transpose()?;
        let cumulative = match (pre_rent, AccountKey::of(view)) {
            // No partner bill or no pre_rent: the cumulative counts as 0 (seed §5.3).
            (None, _) => 0,
            // The business account is unknown: fall back to this month's paid.
            (Some(_), None) => paid,
            (Some(_), Some(key)) => cumulative_paid(view, key)?,
        };
        Ok(Amounts {
            pre_rent,
            paid,
            offline_paid,
            current,
            cumulative,
        })
    }
}

/// Opening paid balance + successful results of the business account up to the
/// target month. No result-type filter: the seed's cumulative SQL has none (§4.5).
fn cumulative_paid(view: &View, key: AccountKey) -> Result<i64, BillError> {
    let f = view.facts;
    let results = f
        .results
        .iter()
        .filter(|r| key.holds(r) && r.month <= f.station_month.month && counts_as_paid(r))
        .map(|r| r.amount_minor);
    let opening = opening_paid(view, key)?;
    checked_sum(view, "cumulative paid amount", results.chain([opening]))
}

/// The platform key must find at most one opening; the small key takes the latest by
/// update time, then id (seed §4.5).
fn opening_paid(view: &View, key: AccountKey) -> Result<i64, BillError> {
    let openings = &view.facts.opening_paid_balances;
    match key {
        AccountKey::Small {
            station_id,
            partner_org_id,
        } => Ok(openings
            .iter()
            .filter(|o| o.small_station_id == station_id && o.partner_org_id == partner_org_id)
            .max_by_key(|o| (o.updated_at, o.id))
            .map_or(0, |o| o.opening_paid_minor)),
        AccountKey::Platform {
            station_id,
            partner_org_id,
        } => {
            let found: Vec<_> = openings
                .iter()
                .filter(|o| {
                    o.platform_station_id == Some(station_id) && o.partner_org_id == partner_org_id
                })
                .collect();
            match found.as_slice() {
                [] => Ok(0),
                [one] => Ok(one.opening_paid_minor),
                _ => Err(BillError::DuplicateOpeningPaidBalance {
                    station_month: view.facts.station_month,
                    platform_station_id: station_id,
                    partner_org_id,
                    count: found.len(),
                }),
            }
        }
    }
}

/// R-BILL-2: the first rule that matches, in table order. Readings of the seed's
/// wording (§5.2), chosen here and tested:
/// - "selected payable line has no success/fail final fact" (rule 2) also holds when
///   no payable line is selected: there is no final fact either way;
/// - "no active lock" (rule 6) is "no valid lock", the same notion as rules 1 and 2;
/// - the "latest payable line" and "latest payable master" (rules 6, 9) are the
///   selected line and its master;
/// - a voided result is no outcome of its line.
fn status_rule(view: &View, a: &Amounts) -> StatusRule {
    let lock_master = view.valid_lock.map(|l| l.order.status);
    let selected_outcome = view.selected.and_then(|s| view.outcome(s.line));
    let selected_final = matches!(
        selected_outcome,
        Some(ResultStatus::Success | ResultStatus::Fail)
    );
    let current_positive = a.current.is_some_and(|c| c > 0);

    if matches!(
        lock_master,
        Some(OrderStatus::InReview | OrderStatus::ReviewRejected)
    ) {
        return StatusRule::R1InReview;
    }
    if matches!(lock_master, Some(OrderStatus::WaitPay | OrderStatus::Paid)) && !selected_final {
        return StatusRule::R2AwaitingPaymentUnderLock;
    }
    if view.small_bill_only() && a.offline_paid > 0 {
        return StatusRule::R3SmallBillOfflinePaid;
    }
    if view.small_bill_only() {
        return StatusRule::R4PartnerBillNotPushed;
    }
    if a.pre_rent == Some(0) {
        return StatusRule::R5NoPaymentNeeded;
    }
    let latest_master_waits = view
        .selected
        .is_some_and(|s| s.order.status == OrderStatus::WaitPay);
    let awaiting = matches!(selected_outcome, None | Some(ResultStatus::Paying));
    if view.valid_lock.is_none()
        && latest_master_waits
        && awaiting
        && a.paid == 0
        && current_positive
    {
        return StatusRule::R6AwaitingPaymentWithoutLock;
    }
    if let Some(pre_rent) = a.pre_rent {
        if pre_rent > 0 && a.paid > 0 && a.paid >= pre_rent {
            return StatusRule::R7Paid;
        }
        if a.paid > 0 && pre_rent > a.paid {
            return StatusRule::R8PartialPayment;
        }
    }
    let failed = view.selected.is_some_and(|s| {
        selected_outcome == Some(ResultStatus::Fail) || s.line.status == LineStatus::Failed
    });
    if failed && current_positive {
        return StatusRule::R9PaymentFailed;
    }
    StatusRule::R10Unpaid
}

fn missing(result: PreRentCheckResult, reason: PreRentCheckReason) -> Option<PreRentCheck> {
    Some(PreRentCheck {
        result,
        reason: Some(reason),
        available_minor: None,
    })
}

/// R-BILL-4: `None` when there is no formula result (never a pass by default).
fn pre_rent_check(view: &View, a: &Amounts) -> Result<Option<PreRentCheck>, BillError> {
    use PreRentCheckReason as Why;
    use PreRentCheckResult::{PartnerSideMissing, SmallSideMissing};
    let f = view.facts;
    let Some(small_bill) = &f.small_bill else {
        return Ok(missing(SmallSideMissing, Why::SmallBillMissing));
    };
    let Some(account) = f
        .small_account
        .filter(|acc| acc.id == small_bill.account_id)
    else {
        return Ok(missing(SmallSideMissing, Why::SmallAccountMissing));
    };
    let Some(partner_bill) = &f.partner_bill else {
        return Ok(missing(PartnerSideMissing, Why::PartnerBillMissing));
    };
    let Some(partner_account) = view.partner_account() else {
        return Ok(missing(PartnerSideMissing, Why::PartnerAccountMissing));
    };
    let Some(pre_rent) = partner_bill.pre_rent_minor else {
        return Ok(missing(PartnerSideMissing, Why::PreRentMissing));
    };
    let Some(cutoff) = cutoff_month(view, &account, partner_account.partner_org_id)? else {
        return Ok(None);
    };
    let rent = checked_sum(
        view,
        "payable rent",
        f.account_small_bills
            .iter()
            .filter(|b| {
                b.account_id == account.id
                    && b.month >= account.income_start_month
                    && b.month <= cutoff
            })
            .map(|b| b.rent_minor),
    )?;
    let deduction = cumulative_deduction(view)?;
    let available = checked_sum(view, "available payable", [rent, -a.cumulative, -deduction])?;
    // The comparison is with this month's pre_rent, not the current payment amount.
    let (result, reason) = if available >= pre_rent {
        (PreRentCheckResult::Passed, None)
    } else {
        (
            PreRentCheckResult::AvailableNotEnough,
            Some(Why::AvailablePayableNotEnough),
        )
    };
    Ok(Some(PreRentCheck {
        result,
        reason,
        available_minor: Some(available),
    }))
}

/// The cutoff month of the target month (seed §5.3), `None` when no legal cycle is
/// configured (no formula). An unrecorded profile, an uncomputable cycle or an empty
/// cutoff month it needs are errors, never "unconfigured".
fn cutoff_month(
    view: &View,
    account: &CustomerAccount,
    partner_org_id: i64,
) -> Result<Option<YearMonth>, BillError> {
    let f = view.facts;
    let station_month = f.station_month;
    let target = station_month.month;
    let cycle = match &f.partner_profile {
        PartnerProfile::Unrecorded => {
            return Err(BillError::PartnerProfileUnrecorded {
                station_month,
                partner_org_id,
            })
        }
        PartnerProfile::NotConfigured => return Ok(None),
        PartnerProfile::Configured { payment_cycle, .. } => payment_cycle,
    };
    let uncomputable = |why: String| BillError::CycleUncomputable {
        station_month,
        cycle: cycle.as_str().to_owned(),
        why,
    };
    let months_per_period = match cycle {
        // The target month itself: no month is subtracted, and the account's
        // cutoff does not cap it.
        PaymentCycle::MonthPayPreviousMonth => return Ok(Some(target)),
        PaymentCycle::Illegal(_) => return Ok(None),
        PaymentCycle::Monthly => 1,
        PaymentCycle::Quarterly => 3,
        PaymentCycle::HalfYearly => 6,
        PaymentCycle::RecordWayComposite => match f.station.record_way {
            Some(RecordWay::NaturalPerson) => 3,
            Some(RecordWay::NonNaturalPerson) => 6,
            None => return Err(uncomputable("the station has no record_way".into())),
        },
        PaymentCycle::ShareRuleComposite => match &f.station.share_rule {
            None => return Err(uncomputable("the station has no share rule".into())),
            Some(rule) => match &rule.rent_pay_method {
                RentPayMethod::Monthly => 1,
                RentPayMethod::Quarterly => 3,
                RentPayMethod::HalfYearly => 6,
                RentPayMethod::Other(method) => {
                    return Err(uncomputable(format!(
                        "rent_pay_method {method} has no cycle"
                    )))
                }
            },
        },
    };
    let derived = target.end_of_period(months_per_period);
    let account_cutoff =
        account
            .current_payable_cutoff_month
            .ok_or_else(|| BillError::CutoffMonthMissing {
                station_month,
                cycle: cycle.as_str().to_owned(),
                account_id: account.id,
            })?;
    Ok(Some(derived.min(account_cutoff)))
}

/// Every partner bill's deduction of the platform station's partner accounts (no
/// month cap) + each account's latest effective opening deduction.
fn cumulative_deduction(view: &View) -> Result<i64, BillError> {
    let f = view.facts;
    let accounts = || f.partner_accounts.iter().map(|a| a.id);
    let bills = f
        .account_partner_bills
        .iter()
        .filter(|b| accounts().any(|id| id == b.partner_account_id))
        .map(|b| b.deduction_minor);
    let openings = accounts().filter_map(|account_id| {
        f.opening_deductions
            .iter()
            .filter(|o| o.partner_account_id == account_id && o.effective)
            .max_by_key(|o| (o.updated_at, o.id))
            .map(|o| o.amount_minor)
    });
    checked_sum(view, "cumulative deduction", bills.chain(openings))
}

/// Whether a fact at `at` came after the partner's re-push (any fact does without one).
fn after_repush(at: DateTime<Utc>, repushed_at: Option<DateTime<Utc>>) -> bool {
    match repushed_at {
        Some(repushed_at) => at > repushed_at,
        None => true,
    }
}

/// The unqualified conclusions still in force: on an `UNQUALIFIED_EFFECTIVE` line of a
/// current publish identity, and not superseded by a later partner re-push or a later
/// effective payable conclusion (a current payable line of an approved master).
struct Unqualified<'a> {
    live: Vec<&'a UnqualifiedConclusion>,
}

impl<'a> Unqualified<'a> {
    fn of(view: &View<'a>) -> Unqualified<'a> {
        let f = view.facts;
        let repushed_at = f.partner_bill.as_ref().and_then(|b| b.repushed_at);
        let effective_payable_at: Vec<_> = view
            .current_lines()
            .filter(|c| {
                c.line.kind == LineKind::Payable
                    && matches!(c.order.status, OrderStatus::WaitPay | OrderStatus::Paid)
            })
            .map(|c| c.line.line_at)
            .collect();
        let live = f
            .unqualified_conclusions
            .iter()
            .filter(|c| {
                view.current_lines().any(|l| {
                    l.line.id == c.line_id
                        && l.line.order_id == c.order_id
                        && l.line.kind == LineKind::Unqualified
                        && l.line.status == LineStatus::UnqualifiedEffective
                })
            })
            .filter(|c| after_repush(c.at, repushed_at))
            .filter(|c| effective_payable_at.iter().all(|at| *at <= c.at))
            .collect();
        Unqualified { live }
    }

    fn latest_visible(&self) -> Option<&'a UnqualifiedConclusion> {
        self.live
            .iter()
            .copied()
            .filter(|c| c.partner_visible)
            .max_by_key(|c| (c.at, c.line_id))
    }

    fn flag(&self) -> bool {
        self.latest_visible().is_some()
    }

    fn reason(&self) -> Option<String> {
        self.latest_visible().map(|c| c.reason.clone())
    }

    /// The latest partner-visible conclusion in force, else what the partner bill
    /// holds (`0` after a re-push until a new conclusion).
    fn last(&self, f: &BillFacts) -> Option<LastUnqualified> {
        if let Some(c) = self.latest_visible() {
            return Some(LastUnqualified {
                order_id: c.order_id,
                at: Some(c.at),
            });
        }
        let bill = f.partner_bill.as_ref()?;
        bill.last_unqualified_order_id
            .map(|order_id| LastUnqualified {
                order_id,
                at: bill.last_unqualified_at,
            })
    }
}

/// R-BILL-5: the first rule that matches. A failed pre-rent check alone never fails
/// the partner query.
fn partner_query(
    view: &View,
    a: &Amounts,
    unqualified: &Unqualified,
    status: PaymentStatus,
) -> (PartnerQueryStatus, PartnerQueryRule) {
    use PartnerQueryRule as Q;
    use PartnerQueryStatus::{Failed, Passed, Unchecked};
    if unqualified.flag() {
        return (Failed, Q::Q1PartnerVisibleUnqualified);
    }
    if !unqualified.live.is_empty() {
        return (Unchecked, Q::Q2InternalUnqualifiedOnly);
    }
    let bill = view.facts.partner_bill.as_ref();
    if let Some(bill) = bill.filter(|b| b.last_unqualified_order_id == Some(0)) {
        // A valid lock on a payable line of an approved master, taken after the re-push.
        let held = view.valid_lock.is_some_and(|l| {
            l.line.kind == LineKind::Payable
                && matches!(l.order.status, OrderStatus::WaitPay | OrderStatus::Paid)
                && after_repush(l.lock.locked_at, bill.repushed_at)
        });
        return (if held { Passed } else { Unchecked }, Q::Q3RepushPending);
    }
    if a.pre_rent.is_some_and(|p| p < a.paid) {
        return (Failed, Q::Q4PreRentBelowPaid);
    }
    if view.small_bill_only() && a.offline_paid > 0 {
        return (Unchecked, Q::Q5SmallBillOfflinePaid);
    }
    match status {
        PaymentStatus::NoPaymentNeeded
        | PaymentStatus::AwaitingPayment
        | PaymentStatus::Paid
        | PaymentStatus::PaymentFailed => (Passed, Q::Q6PaymentStatusChecked),
        _ => (Unchecked, Q::Q6Otherwise),
    }
}
