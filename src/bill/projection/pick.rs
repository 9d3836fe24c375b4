//! Picking one station-month's facts out of what a chunk read ([`Chunk`]): exactly
//! the rows its own per-station-month reads would match, in their order, and the
//! newest fact time among them (see `assemble` for why a chunk of one is the
//! per-station-month read).

use super::assemble::{merged, Chunk};
use super::{bad, Assembled, Newest, Step};
use factledger_projections::bill::fold::{self, Finding};
use factledger_projections::bill::tables::{
    CUSTOMER_ACCOUNTS, DIFFS, LINES, LOCKS, OPENING_DEDUCTIONS, OPENING_PAID, ORDERS,
    PARTNER_ACCOUNTS, PARTNER_BILLS, PARTNER_PROFILES, PARTNER_REPUSHES, RESULTS, SETTINGS,
    SMALL_BILLS, STATIONS,
};
use factledger_projections::bill::{
    BillFacts, BillLine, BillLock, CustomerAccount, Diff, OpeningDeduction, PartnerAccount,
    PartnerBill, PartnerBillDeduction, PartnerProfile, PaymentOrder, PaymentResult, SmallBill,
    SmallBillRent, StationMonth, UnqualifiedConclusion,
};
use std::collections::BTreeSet;

/// The partner-bill side of one station-month: its bill, why it is inconsistent, the
/// deduction group's accounts, bills and openings, and the own account.
struct PartnerSide {
    partner_bill: Option<PartnerBill>,
    inconsistent: Option<Finding>,
    partner_accounts: Vec<PartnerAccount>,
    account_partner_bills: Vec<PartnerBillDeduction>,
    opening_deductions: Vec<OpeningDeduction>,
    own_account: Option<PartnerAccount>,
}

/// The station-month's lines, unqualified conclusions, locks and orders.
struct OrdersSide {
    lines: Vec<BillLine>,
    conclusions: Vec<UnqualifiedConclusion>,
    locks: Vec<BillLock>,
    orders: Vec<PaymentOrder>,
}

impl Chunk {
    /// One station-month's facts: exactly the rows its own reads would match, in their
    /// order, and the newest fact time among them.
    pub(super) fn assemble(&self, sm: StationMonth) -> Result<Option<Assembled>, Step> {
        let mut seen = Newest::default();
        let (small, diff) = (self.small_of(&sm), self.diff_of(&sm));
        if small.is_none() && diff.is_none() {
            return Ok(None);
        }
        let small_bill = small.map(|(r, b)| {
            seen.see_row(&SMALL_BILLS, r);
            b.clone()
        });
        let diff = diff.map(|(r, d)| {
            seen.see_row(&DIFFS, r);
            *d
        });
        let (small_account, account_small_bills) =
            self.small_side(sm, small_bill.as_ref(), &mut seen);
        let partner = self.partner_side(sm, diff.as_ref(), &mut seen)?;
        let partner_profile = self.profile(partner.own_account, &mut seen)?;
        let station_row = self
            .station_rows
            .get(&sm.station_id)
            .and_then(|v| v.first())
            .map(|(r, _)| r);
        if let Some(r) = station_row {
            seen.see_row(&STATIONS, r);
        }
        let station = fold::station_of(station_row).map_err(bad(0))?;
        if let Some(r) = &self.setting {
            seen.see_row(&SETTINGS, r);
        }
        let platform = partner.own_account.and_then(|a| a.platform_station_id);
        let mut opening_paid_balances = Vec::new();
        for (r, o) in &self.opening_paid {
            if o.small_station_id == sm.station_id
                || (platform.is_some() && o.platform_station_id == platform)
            {
                seen.see_row(&OPENING_PAID, r);
                opening_paid_balances.push(*o);
            }
        }
        let OrdersSide {
            lines,
            conclusions: unqualified_conclusions,
            locks,
            orders,
        } = self.orders_side(sm, &mut seen)?;
        let results = self.results_of(sm, platform, &lines, &mut seen);
        Ok(Some(Assembled {
            facts: BillFacts {
                station_month: sm,
                small_bill,
                small_account,
                account_small_bills,
                partner_bill: partner.partner_bill,
                diff,
                partner_accounts: partner.partner_accounts,
                account_partner_bills: partner.account_partner_bills,
                partner_profile,
                station,
                account_route: self.account_route,
                opening_paid_balances,
                opening_deductions: partner.opening_deductions,
                orders,
                lines,
                locks,
                results,
                unqualified_conclusions,
            },
            inconsistent: partner.inconsistent,
            fact_at: seen.0,
        }))
    }

    /// The small bill's account and its rents up to the station-month's cutoff.
    fn small_side(
        &self,
        sm: StationMonth,
        small_bill: Option<&SmallBill>,
        seen: &mut Newest,
    ) -> (Option<CustomerAccount>, Vec<SmallBillRent>) {
        let (mut small_account, mut rents) = (None, Vec::new());
        let Some(b) = small_bill else {
            return (small_account, rents);
        };
        if let Some(rows) = self.customer_accounts.get(&b.account_id) {
            for (r, _) in rows {
                seen.see_row(&CUSTOMER_ACCOUNTS, r);
            }
            small_account = rows.first().map(|(_, a)| *a);
        }
        let until = sm.month.last_rent_month_read();
        for (r, rent) in self.rents.get(&b.account_id).into_iter().flatten() {
            if rent.month <= until {
                seen.see_row(&SMALL_BILLS, r);
                rents.push(*rent);
            }
        }
        (small_account, rents)
    }

    /// The partner bill a diff links (and why it is inconsistent: linked by another
    /// station-month too, or not recorded), and its deduction group.
    fn partner_side(
        &self,
        sm: StationMonth,
        diff: Option<&Diff>,
        seen: &mut Newest,
    ) -> Result<PartnerSide, Step> {
        let (mut inconsistent, mut partner_bill) = (None, None);
        if let Some(id) = diff.and_then(|d| d.partner_bill_id) {
            let others: Vec<StationMonth> = self
                .linking
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|o| **o != sm)
                .copied()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let bill = self.partner_bills.get(&id).and_then(|v| v.first());
            let repush = self.repushes.get(&id).and_then(|v| v.first());
            if let Some((r, _)) = bill {
                seen.see_row(&PARTNER_BILLS, r);
            }
            if let Some((r, _)) = repush {
                seen.see_row(&PARTNER_REPUSHES, r);
            }
            partner_bill = match bill {
                Some((b, _)) => {
                    Some(fold::partner_bill_of(b, repush.map(|(r, _)| r)).map_err(bad(0))?)
                }
                None => None,
            };
            if !others.is_empty() {
                inconsistent = Some(Finding::PartnerBillLinkedTwice {
                    station_month: sm,
                    partner_bill_id: id,
                    others,
                });
            } else if partner_bill.is_none() {
                inconsistent = Some(Finding::PartnerBillUnrecorded {
                    station_month: sm,
                    partner_bill_id: id,
                });
            }
        }
        let mut side = self.deduction_group(partner_bill.as_ref(), seen);
        side.partner_bill = partner_bill;
        side.inconsistent = inconsistent;
        Ok(side)
    }

    /// The accounts, bills and opening deductions a partner bill's deduction sums read.
    fn deduction_group(
        &self,
        partner_bill: Option<&PartnerBill>,
        seen: &mut Newest,
    ) -> PartnerSide {
        let mut partner_accounts = Vec::new();
        if let Some(b) = partner_bill {
            let own = self.own_account_rows(b.partner_account_id);
            for (r, _) in own {
                seen.see_row(&PARTNER_ACCOUNTS, r);
            }
            if own
                .first()
                .is_some_and(|(_, a)| a.platform_station_id.is_some())
            {
                for (r, _) in self.group_of(b.partner_account_id) {
                    seen.see_row(&PARTNER_ACCOUNTS, r);
                }
            }
            partner_accounts = self
                .group_of(b.partner_account_id)
                .into_iter()
                .map(|(_, a)| *a)
                .collect();
        }
        let own_account = partner_bill
            .and_then(|b| {
                partner_accounts
                    .iter()
                    .find(|a| a.id == b.partner_account_id)
            })
            .copied();
        let group: BTreeSet<i64> = partner_accounts.iter().map(|a| a.id).collect();
        let mut account_partner_bills = Vec::new();
        for i in merged(&self.bills_of_account, &group) {
            let (r, b) = &self.group_bills[i];
            seen.see_row(&PARTNER_BILLS, r);
            account_partner_bills.push(*b);
        }
        let mut opening_deductions = Vec::new();
        for i in merged(&self.openings_of_account, &group) {
            let (r, o) = &self.group_openings[i];
            seen.see_row(&OPENING_DEDUCTIONS, r);
            opening_deductions.push(*o);
        }
        PartnerSide {
            partner_bill: None,
            inconsistent: None,
            partner_accounts,
            account_partner_bills,
            opening_deductions,
            own_account,
        }
    }

    /// The own account's org profile, as recorded (or not).
    fn profile(
        &self,
        own_account: Option<PartnerAccount>,
        seen: &mut Newest,
    ) -> Result<PartnerProfile, Step> {
        let Some(a) = own_account else {
            return Ok(PartnerProfile::Unrecorded);
        };
        let row = self
            .profiles
            .get(&a.partner_org_id)
            .and_then(|v| v.first())
            .map(|(r, _)| r);
        if let Some(r) = row {
            seen.see_row(&PARTNER_PROFILES, r);
        }
        fold::partner_profile_of(row).map_err(bad(0))
    }

    /// The station-month's lines (and unqualified conclusions), locks, and the orders
    /// they belong to.
    fn orders_side(&self, sm: StationMonth, seen: &mut Newest) -> Result<OrdersSide, Step> {
        let (mut lines, mut conclusions, mut order_set) = (Vec::new(), Vec::new(), BTreeSet::new());
        for (r, _) in self.lines.get(&sm).into_iter().flatten() {
            seen.see_row(&LINES, r);
            lines.extend(fold::line_of(r).map_err(bad(0))?);
            conclusions.extend(fold::conclusion_of(r).map_err(bad(0))?);
            order_set.insert(fold::int_of(r, "order_id").map_err(bad(0))?);
        }
        let mut locks = Vec::new();
        for (r, l) in self.locks.get(&sm).into_iter().flatten() {
            seen.see_row(&LOCKS, r);
            locks.push(*l);
            order_set.insert(l.order_id);
        }
        let mut orders = Vec::new();
        for id in &order_set {
            for (r, o) in self.orders.get(id).into_iter().flatten() {
                seen.see_row(&ORDERS, r);
                orders.push(*o);
            }
        }
        Ok(OrdersSide {
            lines,
            conclusions,
            locks,
            orders,
        })
    }

    /// The results the station-month reads: its station's and its platform station's
    /// up to its month, and its lines' latest results.
    fn results_of(
        &self,
        sm: StationMonth,
        platform: Option<i64>,
        lines: &[BillLine],
        seen: &mut Newest,
    ) -> Vec<PaymentResult> {
        let own_latest: BTreeSet<i64> = lines.iter().filter_map(|l| l.latest_result_id).collect();
        let mut results = Vec::new();
        for (r, res) in &self.results {
            let reads = (res.small_station_id == sm.station_id && res.month <= sm.month)
                || (platform.is_some()
                    && res.platform_station_id == platform
                    && res.month <= sm.month)
                || own_latest.contains(&res.id);
            if reads {
                seen.see_row(&RESULTS, r);
                results.push(*res);
            }
        }
        results
    }
}
