//! Assembling the facts of many station-months with one read per fact table: the
//! set-based form of the reads R-BILL-1 names for one station-month (seed §4.5), and
//! what every recomputation runs, a chunk of station-months at a time.
//!
//! Each read selects, for the whole chunk, a superset of what the per-station-month
//! read selects, with the same `ORDER BY`; each station-month then keeps exactly the
//! rows its own read would match, in that order, and sees only their fact times (its
//! `payment_status_update_time`). So a chunk of one is the per-station-month read, and
//! the facts of a station-month do not depend on the chunk it is assembled in (the
//! tests rebuild the same log in chunks of different sizes and compare the tables).

use super::{bad, in_list, Assembled, Step};
use crate::infra::db::Tx;
use factledger_projections::bill::fold;
use factledger_projections::bill::tables::{
    CUSTOMER_ACCOUNTS, DIFFS, LINES, LOCKS, OPENING_DEDUCTIONS, OPENING_PAID, ORDERS,
    PARTNER_ACCOUNTS, PARTNER_BILLS, PARTNER_PROFILES, PARTNER_REPUSHES, RESULTS, SETTINGS,
    SMALL_BILLS, STATIONS,
};
use factledger_projections::bill::{
    AccountRoute, BillLock, CustomerAccount, Diff, OpeningDeduction, OpeningPaidBalance,
    PartnerAccount, PartnerBillDeduction, PaymentOrder, PaymentResult, SmallBill, SmallBillRent,
    StationMonth, YearMonth,
};
use factledger_projections::table::{Cell, MemRow, TableDef};
use std::collections::{BTreeMap, BTreeSet};

/// A fact row with its typed form.
pub(super) type Typed<T> = (MemRow, T);

fn ints(ids: impl IntoIterator<Item = i64>) -> Vec<Cell> {
    ids.into_iter().map(Cell::Int).collect()
}

fn typed<T>(
    rows: Vec<MemRow>,
    f: impl Fn(&MemRow) -> Result<T, String>,
) -> Result<Vec<Typed<T>>, Step> {
    rows.into_iter()
        .map(|r| {
            let t = f(&r).map_err(bad(0))?;
            Ok((r, t))
        })
        .collect()
}

fn station_month_of(row: &MemRow, month: &str) -> Result<StationMonth, Step> {
    Ok(StationMonth {
        station_id: fold::int_of(row, "station_id").map_err(bad(0))?,
        month: fold::month_of(row, month).map_err(bad(0))?,
    })
}

/// Rows of `def` matching `condition` with `args`, or none without a query when
/// `ids` (the values of its `IN` list) is empty.
async fn rows_in(
    tx: &mut Tx,
    def: &TableDef,
    ids: &[Cell],
    condition: impl Fn(&str) -> String,
    extra: &[Cell],
) -> Result<Vec<MemRow>, Step> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = ids.to_vec();
    args.extend_from_slice(extra);
    Ok(tx.rows(def, &condition(&in_list(ids.len())), &args).await?)
}

/// Rows of `def` whose `column` is one of `ids`, in `order` (none for no `ids`).
async fn rows_of(
    tx: &mut Tx,
    def: &TableDef,
    column: &str,
    ids: &[Cell],
    order: &str,
) -> Result<Vec<MemRow>, Step> {
    rows_in(
        tx,
        def,
        ids,
        |l| format!("WHERE {column} IN ({l}) {order}"),
        &[],
    )
    .await
}

/// Rows indexed by a key, in read order within each key.
fn index<T, K: Ord>(
    rows: Vec<Typed<T>>,
    key: impl Fn(&Typed<T>) -> Result<K, Step>,
) -> Result<BTreeMap<K, Vec<Typed<T>>>, Step> {
    let mut out: BTreeMap<K, Vec<Typed<T>>> = BTreeMap::new();
    for r in rows {
        out.entry(key(&r)?).or_default().push(r);
    }
    Ok(out)
}

/// Everything read for a chunk of station-months: one read per fact table, each row
/// indexed the way the pick phase ([`Chunk::assemble`]) looks it up.
pub(super) struct Chunk {
    pub(super) small: BTreeMap<StationMonth, Vec<Typed<SmallBill>>>,
    pub(super) diffs: BTreeMap<StationMonth, Vec<Typed<Diff>>>,
    pub(super) customer_accounts: BTreeMap<i64, Vec<Typed<CustomerAccount>>>,
    pub(super) rents: BTreeMap<i64, Vec<Typed<SmallBillRent>>>,
    pub(super) linking: BTreeMap<i64, Vec<StationMonth>>,
    pub(super) partner_bills: BTreeMap<i64, Vec<Typed<i64>>>,
    pub(super) repushes: BTreeMap<i64, Vec<Typed<i64>>>,
    pub(super) own_accounts: BTreeMap<i64, Vec<Typed<PartnerAccount>>>,
    pub(super) platform_accounts: BTreeMap<Option<i64>, Vec<Typed<PartnerAccount>>>,
    pub(super) group_bills: Vec<Typed<PartnerBillDeduction>>,
    pub(super) group_openings: Vec<Typed<OpeningDeduction>>,
    pub(super) bills_of_account: BTreeMap<i64, Vec<usize>>,
    pub(super) openings_of_account: BTreeMap<i64, Vec<usize>>,
    pub(super) profiles: BTreeMap<i64, Vec<Typed<i64>>>,
    pub(super) station_rows: BTreeMap<i64, Vec<Typed<i64>>>,
    pub(super) setting: Option<MemRow>,
    pub(super) account_route: AccountRoute,
    pub(super) opening_paid: Vec<Typed<OpeningPaidBalance>>,
    pub(super) lines: BTreeMap<StationMonth, Vec<Typed<()>>>,
    pub(super) locks: BTreeMap<StationMonth, Vec<Typed<BillLock>>>,
    pub(super) orders: BTreeMap<i64, Vec<Typed<PaymentOrder>>>,
    pub(super) results: Vec<Typed<PaymentResult>>,
}

/// The station ids of a chunk, its month span, and the `WHERE` of a per-station,
/// per-month read.
struct Span {
    stations: Vec<Cell>,
    bounds: [Cell; 2],
    hi: YearMonth,
}

impl Span {
    fn at_stations(month: &'static str, order: &'static str) -> impl Fn(&str) -> String {
        move |list: &str| {
            format!("WHERE station_id IN ({list}) AND {month} BETWEEN ? AND ? {order}")
        }
    }
}

/// Each station-month's facts (`None` when it has neither a small bill nor a diff), in
/// the order of `sms`.
pub(super) async fn assemble_many(
    tx: &mut Tx,
    sms: &[StationMonth],
) -> Result<Vec<Option<Assembled>>, Step> {
    let (Some(lo), Some(hi)) = (
        sms.iter().map(|s| s.month).min(),
        sms.iter().map(|s| s.month).max(),
    ) else {
        return Ok(Vec::new());
    };
    let span = Span {
        stations: ints(sms.iter().map(|s| s.station_id).collect::<BTreeSet<_>>()),
        bounds: [Cell::Text(lo.to_string()), Cell::Text(hi.to_string())],
        hi,
    };
    let chunk = Chunk::read(tx, sms, &span).await?;
    sms.iter().map(|&sm| chunk.assemble(sm)).collect()
}

impl Chunk {
    /// The reads, in the order the per-station-month read makes them.
    async fn read(tx: &mut Tx, sms: &[StationMonth], span: &Span) -> Result<Chunk, Step> {
        let mut c = Chunk::read_own(tx, span).await?;
        c.read_customer_accounts(tx, sms).await?;
        let platforms = c.read_partner_bills(tx, sms).await?;
        c.read_reference(tx, span, &platforms).await?;
        c.read_lines_and_orders(tx, span).await?;
        c.read_results(tx, span, &platforms).await?;
        Ok(c)
    }

    /// The station-months' own small bills and diffs.
    async fn read_own(tx: &mut Tx, span: &Span) -> Result<Chunk, Step> {
        let (stations, bounds) = (&span.stations, &span.bounds);
        let at = Span::at_stations("bill_yearmonth", "");
        let rows = rows_in(tx, &SMALL_BILLS, stations, at, bounds).await?;
        let small = index(typed(rows, fold::small_bill_of)?, |(r, _)| {
            station_month_of(r, "bill_yearmonth")
        })?;
        let at = Span::at_stations("share_month", "");
        let rows = rows_in(tx, &DIFFS, stations, at, bounds).await?;
        let diffs = index(typed(rows, fold::diff_of)?, |(r, _)| {
            station_month_of(r, "share_month")
        })?;
        Ok(Chunk {
            small,
            diffs,
            customer_accounts: BTreeMap::new(),
            rents: BTreeMap::new(),
            linking: BTreeMap::new(),
            partner_bills: BTreeMap::new(),
            repushes: BTreeMap::new(),
            own_accounts: BTreeMap::new(),
            platform_accounts: BTreeMap::new(),
            group_bills: Vec::new(),
            group_openings: Vec::new(),
            bills_of_account: BTreeMap::new(),
            openings_of_account: BTreeMap::new(),
            profiles: BTreeMap::new(),
            station_rows: BTreeMap::new(),
            setting: None,
            account_route: AccountRoute::default(),
            opening_paid: Vec::new(),
            lines: BTreeMap::new(),
            locks: BTreeMap::new(),
            orders: BTreeMap::new(),
            results: Vec::new(),
        })
    }

    pub(super) fn small_of(&self, sm: &StationMonth) -> Option<&Typed<SmallBill>> {
        self.small.get(sm).and_then(|v| v.first())
    }

    pub(super) fn diff_of(&self, sm: &StationMonth) -> Option<&Typed<Diff>> {
        self.diffs.get(sm).and_then(|v| v.first())
    }

    /// The small bill's account and its rents up to the last month any cutoff reaches.
    async fn read_customer_accounts(
        &mut self,
        tx: &mut Tx,
        sms: &[StationMonth],
    ) -> Result<(), Step> {
        let accounts: BTreeSet<i64> = sms
            .iter()
            .filter_map(|sm| self.small_of(sm).map(|(_, b)| b.account_id))
            .collect();
        let account_ids = ints(accounts);
        let rows = rows_of(tx, &CUSTOMER_ACCOUNTS, "account_id", &account_ids, "").await?;
        self.customer_accounts = index(typed(rows, fold::customer_account_of)?, |(_, a)| Ok(a.id))?;
        let last_read = sms
            .iter()
            .filter(|sm| self.small_of(sm).is_some())
            .map(|sm| sm.month.last_rent_month_read())
            .max();
        if let Some(until) = last_read {
            let tail = |l: &str| {
                format!(
                    "WHERE account_id IN ({l}) AND bill_yearmonth <= ? \
                     ORDER BY station_id, bill_yearmonth"
                )
            };
            let until = [Cell::Text(until.to_string())];
            let rows = rows_in(tx, &SMALL_BILLS, &account_ids, tail, &until).await?;
            self.rents = index(typed(rows, fold::small_bill_rent_of)?, |(_, r)| {
                Ok(r.account_id)
            })?;
        }
        Ok(())
    }

    /// The partner bills the diffs link, every diff linking them, their re-pushes, the
    /// partner bill's own account and the accounts of its platform station, and the
    /// deduction group's bills and openings. Returns the platform stations read.
    async fn read_partner_bills(
        &mut self,
        tx: &mut Tx,
        sms: &[StationMonth],
    ) -> Result<Vec<Cell>, Step> {
        let linked: BTreeSet<i64> = sms
            .iter()
            .filter_map(|sm| self.diff_of(sm).and_then(|(_, d)| d.partner_bill_id))
            .collect();
        let linked = ints(linked);
        let rows = rows_of(tx, &DIFFS, "partner_bill_id", &linked, "").await?;
        for r in &rows {
            let id = fold::int_of(r, "partner_bill_id").map_err(bad(0))?;
            self.linking
                .entry(id)
                .or_default()
                .push(station_month_of(r, "share_month")?);
        }
        let by_bill = |l: &str| format!("WHERE partner_bill_id IN ({l})");
        let rows = rows_in(tx, &PARTNER_BILLS, &linked, by_bill, &[]).await?;
        self.partner_bills = index(
            typed(rows, |r| fold::int_of(r, "partner_account_id"))?,
            |(r, _)| fold::int_of(r, "partner_bill_id").map_err(bad(0)),
        )?;
        let rows = rows_in(tx, &PARTNER_REPUSHES, &linked, by_bill, &[]).await?;
        self.repushes = index(
            typed(rows, |r| fold::int_of(r, "partner_bill_id"))?,
            |(_, id)| Ok(*id),
        )?;
        let platforms = self.read_partner_accounts(tx).await?;
        self.read_deduction_group(tx).await?;
        Ok(platforms)
    }

    /// The partner bills' own accounts and every account of their platform stations.
    async fn read_partner_accounts(&mut self, tx: &mut Tx) -> Result<Vec<Cell>, Step> {
        let own_ids: BTreeSet<i64> = self
            .partner_bills
            .values()
            .flatten()
            .map(|(_, account)| *account)
            .collect();
        let own_ids = ints(own_ids);
        let rows = rows_of(tx, &PARTNER_ACCOUNTS, "partner_account_id", &own_ids, "").await?;
        self.own_accounts = index(typed(rows, fold::partner_account_of)?, |(_, a)| Ok(a.id))?;
        let platforms: BTreeSet<i64> = self
            .own_accounts
            .values()
            .flatten()
            .filter_map(|(_, a)| a.platform_station_id)
            .collect();
        let platforms = ints(platforms);
        let order = "ORDER BY partner_account_id";
        let rows = rows_of(
            tx,
            &PARTNER_ACCOUNTS,
            "platform_station_id",
            &platforms,
            order,
        )
        .await?;
        self.platform_accounts = index(typed(rows, fold::partner_account_of)?, |(_, a)| {
            Ok(a.platform_station_id)
        })?;
        Ok(platforms)
    }

    /// The bills and opening deductions of every account a deduction sum reads.
    async fn read_deduction_group(&mut self, tx: &mut Tx) -> Result<(), Step> {
        let group_ids: BTreeSet<i64> = self
            .partner_bills
            .values()
            .flatten()
            .flat_map(|(_, account)| self.group_of(*account).into_iter().map(|(_, a)| a.id))
            .collect();
        let group_ids = ints(group_ids);
        let order = "ORDER BY partner_bill_id";
        let rows = rows_of(tx, &PARTNER_BILLS, "partner_account_id", &group_ids, order).await?;
        self.group_bills = typed(rows, fold::partner_bill_deduction_of)?;
        let order = "ORDER BY opening_id";
        let rows = rows_of(
            tx,
            &OPENING_DEDUCTIONS,
            "partner_account_id",
            &group_ids,
            order,
        )
        .await?;
        self.group_openings = typed(rows, fold::opening_deduction_of)?;
        self.bills_of_account = positions(&self.group_bills, |b: &PartnerBillDeduction| {
            b.partner_account_id
        });
        self.openings_of_account = positions(&self.group_openings, |o| o.partner_account_id);
        Ok(())
    }

    pub(super) fn own_account_rows(&self, account: i64) -> &[Typed<PartnerAccount>] {
        self.own_accounts.get(&account).map_or(&[], Vec::as_slice)
    }

    /// The accounts a station-month's deduction sums read (its partner bill's group).
    pub(super) fn group_of(&self, account: i64) -> Vec<&Typed<PartnerAccount>> {
        match self.own_account_rows(account).first() {
            Some((_, own)) => match own.platform_station_id {
                Some(ps) => self
                    .platform_accounts
                    .get(&Some(ps))
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
                None => vec![&self.own_account_rows(account)[0]],
            },
            None => Vec::new(),
        }
    }

    /// Profiles of the own accounts' orgs, the stations, the account route, and the
    /// opening paid balances of the stations or the platform stations.
    async fn read_reference(
        &mut self,
        tx: &mut Tx,
        span: &Span,
        platforms: &[Cell],
    ) -> Result<(), Step> {
        let orgs: BTreeSet<i64> = self
            .own_accounts
            .values()
            .flatten()
            .map(|(_, a)| a.partner_org_id)
            .collect();
        let rows = rows_of(tx, &PARTNER_PROFILES, "partner_org_id", &ints(orgs), "").await?;
        self.profiles = index(
            typed(rows, |r| fold::int_of(r, "partner_org_id"))?,
            |(_, o)| Ok(*o),
        )?;
        let rows = rows_of(tx, &STATIONS, "station_id", &span.stations, "").await?;
        self.station_rows = index(typed(rows, |r| fold::int_of(r, "station_id"))?, |(_, s)| {
            Ok(*s)
        })?;
        let name = [Cell::text(fold::SETTING_ACCOUNT_ROUTE)];
        self.setting = tx.row(&SETTINGS, "WHERE name = ?", &name).await?;
        self.account_route = fold::account_route_of(self.setting.as_ref()).map_err(bad(0))?;
        let mut ids = span.stations.clone();
        let mut condition = format!("small_station_id IN ({})", in_list(span.stations.len()));
        if !platforms.is_empty() {
            condition.push_str(&format!(
                " OR platform_station_id IN ({})",
                in_list(platforms.len())
            ));
            ids.extend_from_slice(platforms);
        }
        let sql = format!("WHERE {condition} ORDER BY opening_id");
        self.opening_paid = typed(
            tx.rows(&OPENING_PAID, &sql, &ids).await?,
            fold::opening_paid_of,
        )?;
        Ok(())
    }

    /// Lines and locks of the station-months, the orders they belong to.
    async fn read_lines_and_orders(&mut self, tx: &mut Tx, span: &Span) -> Result<(), Step> {
        let (stations, bounds) = (&span.stations, &span.bounds);
        let at = Span::at_stations("bill_yearmonth", "ORDER BY line_id");
        let rows = rows_in(tx, &LINES, stations, at, bounds).await?;
        self.lines = index(typed(rows, |_| Ok(()))?, |(r, _)| {
            station_month_of(r, "bill_yearmonth")
        })?;
        let at = Span::at_stations("bill_yearmonth", "ORDER BY lock_id");
        let rows = rows_in(tx, &LOCKS, stations, at, bounds).await?;
        self.locks = index(typed(rows, fold::lock_of)?, |(r, _)| {
            station_month_of(r, "bill_yearmonth")
        })?;
        let mut order_ids = BTreeSet::new();
        for (row, _) in self.lines.values().flatten() {
            order_ids.insert(fold::int_of(row, "order_id").map_err(bad(0))?);
        }
        for (_, lock) in self.locks.values().flatten() {
            order_ids.insert(lock.order_id);
        }
        let order = "ORDER BY order_id";
        let rows = rows_of(tx, &ORDERS, "order_id", &ints(order_ids), order).await?;
        self.orders = index(typed(rows, fold::order_of)?, |(_, o)| Ok(o.id))?;
        Ok(())
    }

    /// Results of the stations and platform stations up to the last month, and the
    /// lines' latest results.
    async fn read_results(
        &mut self,
        tx: &mut Tx,
        span: &Span,
        platforms: &[Cell],
    ) -> Result<(), Step> {
        let mut latest = BTreeSet::new();
        for (row, _) in self.lines.values().flatten() {
            if let Some(line) = fold::line_of(row).map_err(bad(0))? {
                latest.extend(line.latest_result_id);
            }
        }
        let until = Cell::Text(span.hi.to_string());
        let mut args = span.stations.clone();
        args.push(until.clone());
        let mut condition = format!(
            "(small_station_id IN ({}) AND bill_yearmonth <= ?)",
            in_list(span.stations.len())
        );
        if !platforms.is_empty() {
            condition.push_str(&format!(
                " OR (platform_station_id IN ({}) AND bill_yearmonth <= ?)",
                in_list(platforms.len())
            ));
            args.extend_from_slice(platforms);
            args.push(until);
        }
        if !latest.is_empty() {
            condition.push_str(&format!(" OR result_id IN ({})", in_list(latest.len())));
            args.extend(latest.iter().copied().map(Cell::Int));
        }
        let sql = format!("WHERE {condition} ORDER BY result_id");
        self.results = typed(tx.rows(&RESULTS, &sql, &args).await?, fold::result_of)?;
        Ok(())
    }
}

/// Positions of `rows` per account, ascending.
pub(super) fn positions<T>(
    rows: &[Typed<T>],
    account: impl Fn(&T) -> i64,
) -> BTreeMap<i64, Vec<usize>> {
    let mut out: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (_, t)) in rows.iter().enumerate() {
        out.entry(account(t)).or_default().push(i);
    }
    out
}

/// The positions of the rows of `accounts`, in read order.
pub(super) fn merged(
    of_account: &BTreeMap<i64, Vec<usize>>,
    accounts: &BTreeSet<i64>,
) -> Vec<usize> {
    let mut out: Vec<usize> = accounts
        .iter()
        .filter_map(|a| of_account.get(a))
        .flatten()
        .copied()
        .collect();
    out.sort_unstable();
    out
}
