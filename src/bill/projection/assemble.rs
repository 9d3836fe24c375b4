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

use super::{bad, in_list, Assembled, Newest, Step};
use crate::infra::db::Tx;
use factledger_projections::bill::fold::{self, Finding};
use factledger_projections::bill::tables::{
    CUSTOMER_ACCOUNTS, DIFFS, LINES, LOCKS, OPENING_DEDUCTIONS, OPENING_PAID, ORDERS,
    PARTNER_ACCOUNTS, PARTNER_BILLS, PARTNER_PROFILES, PARTNER_REPUSHES, RESULTS, SETTINGS,
    SMALL_BILLS, STATIONS,
};
use factledger_projections::bill::{
    AccountRoute, BillFacts, PartnerAccount, PartnerBillDeduction, StationMonth,
};
use factledger_projections::table::{Cell, MemRow, TableDef};
use std::collections::{BTreeMap, BTreeSet};

/// A fact row with its typed form.
type Typed<T> = (MemRow, T);

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
    let stations = ints(sms.iter().map(|s| s.station_id).collect::<BTreeSet<_>>());
    let span = [Cell::Text(lo.to_string()), Cell::Text(hi.to_string())];
    let at_stations = |month: &'static str, order: &'static str| {
        move |list: &str| {
            format!("WHERE station_id IN ({list}) AND {month} BETWEEN ? AND ? {order}")
        }
    };

    // The station-month's own small bill and diff.
    let rows = rows_in(
        tx,
        &SMALL_BILLS,
        &stations,
        at_stations("bill_yearmonth", ""),
        &span,
    )
    .await?;
    let small = index(typed(rows, fold::small_bill_of)?, |(r, _)| {
        station_month_of(r, "bill_yearmonth")
    })?;
    let rows = rows_in(tx, &DIFFS, &stations, at_stations("share_month", ""), &span).await?;
    let diffs = index(typed(rows, fold::diff_of)?, |(r, _)| {
        station_month_of(r, "share_month")
    })?;
    let small_of = |sm: &StationMonth| small.get(sm).and_then(|v| v.first());
    let diff_of = |sm: &StationMonth| diffs.get(sm).and_then(|v| v.first());

    // The small bill's account and its rents up to the last month any cutoff reaches.
    let accounts: BTreeSet<i64> = sms
        .iter()
        .filter_map(|sm| small_of(sm).map(|(_, b)| b.account_id))
        .collect();
    let account_ids = ints(accounts);
    let rows = rows_of(tx, &CUSTOMER_ACCOUNTS, "account_id", &account_ids, "").await?;
    let customer_accounts = index(typed(rows, fold::customer_account_of)?, |(_, a)| Ok(a.id))?;
    let last_read = sms
        .iter()
        .filter(|sm| small_of(sm).is_some())
        .map(|sm| sm.month.last_rent_month_read())
        .max();
    let rents = match last_read {
        Some(until) => {
            let tail = |l: &str| {
                format!(
                    "WHERE account_id IN ({l}) AND bill_yearmonth <= ? \
                     ORDER BY station_id, bill_yearmonth"
                )
            };
            let until = [Cell::Text(until.to_string())];
            let rows = rows_in(tx, &SMALL_BILLS, &account_ids, tail, &until).await?;
            index(typed(rows, fold::small_bill_rent_of)?, |(_, r)| {
                Ok(r.account_id)
            })?
        }
        None => BTreeMap::new(),
    };

    // The partner bills the diffs link, every diff linking them, their re-pushes.
    let linked: BTreeSet<i64> = sms
        .iter()
        .filter_map(|sm| diff_of(sm).and_then(|(_, d)| d.partner_bill_id))
        .collect();
    let linked = ints(linked);
    let rows = rows_of(tx, &DIFFS, "partner_bill_id", &linked, "").await?;
    let mut linking: BTreeMap<i64, Vec<StationMonth>> = BTreeMap::new();
    for r in &rows {
        let id = fold::int_of(r, "partner_bill_id").map_err(bad(0))?;
        linking
            .entry(id)
            .or_default()
            .push(station_month_of(r, "share_month")?);
    }
    let by_bill = |l: &str| format!("WHERE partner_bill_id IN ({l})");
    let rows = rows_in(tx, &PARTNER_BILLS, &linked, by_bill, &[]).await?;
    let partner_bills = index(
        typed(rows, |r| fold::int_of(r, "partner_account_id"))?,
        |(r, _)| fold::int_of(r, "partner_bill_id").map_err(bad(0)),
    )?;
    let rows = rows_in(tx, &PARTNER_REPUSHES, &linked, by_bill, &[]).await?;
    let repushes = index(
        typed(rows, |r| fold::int_of(r, "partner_bill_id"))?,
        |(_, id)| Ok(*id),
    )?;

    // The partner bill's own account and the accounts of its platform station.
    let own_ids: BTreeSet<i64> = partner_bills
        .values()
        .flatten()
        .map(|(_, account)| *account)
        .collect();
    let rows = rows_of(
        tx,
        &PARTNER_ACCOUNTS,
        "partner_account_id",
        &ints(own_ids),
        "",
    )
    .await?;
    let own_accounts = index(typed(rows, fold::partner_account_of)?, |(_, a)| Ok(a.id))?;
    let platforms: BTreeSet<i64> = own_accounts
        .values()
        .flatten()
        .filter_map(|(_, a)| a.platform_station_id)
        .collect();
    let platforms = ints(platforms);
    let rows = rows_of(
        tx,
        &PARTNER_ACCOUNTS,
        "platform_station_id",
        &platforms,
        "ORDER BY partner_account_id",
    )
    .await?;
    let platform_accounts = index(typed(rows, fold::partner_account_of)?, |(_, a)| {
        Ok(a.platform_station_id)
    })?;
    let own_account_rows = |account: i64| -> &[Typed<PartnerAccount>] {
        own_accounts.get(&account).map_or(&[], Vec::as_slice)
    };
    // The accounts a station-month's deduction sums read (its partner bill's group).
    let group_of = |account: i64| -> Vec<&Typed<PartnerAccount>> {
        match own_account_rows(account).first() {
            Some((_, own)) => match own.platform_station_id {
                Some(ps) => platform_accounts
                    .get(&Some(ps))
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
                None => vec![&own_account_rows(account)[0]],
            },
            None => Vec::new(),
        }
    };
    let group_ids: BTreeSet<i64> = partner_bills
        .values()
        .flatten()
        .flat_map(|(_, account)| group_of(*account).into_iter().map(|(_, a)| a.id))
        .collect();
    let group_ids = ints(group_ids);
    let rows = rows_of(
        tx,
        &PARTNER_BILLS,
        "partner_account_id",
        &group_ids,
        "ORDER BY partner_bill_id",
    )
    .await?;
    let group_bills = typed(rows, fold::partner_bill_deduction_of)?;
    let rows = rows_of(
        tx,
        &OPENING_DEDUCTIONS,
        "partner_account_id",
        &group_ids,
        "ORDER BY opening_id",
    )
    .await?;
    let group_openings = typed(rows, fold::opening_deduction_of)?;
    let bills_of_account = positions(&group_bills, |b: &PartnerBillDeduction| {
        b.partner_account_id
    });
    let openings_of_account = positions(&group_openings, |o| o.partner_account_id);

    // Profiles of the own accounts' orgs, the stations, the account route.
    let orgs: BTreeSet<i64> = own_accounts
        .values()
        .flatten()
        .map(|(_, a)| a.partner_org_id)
        .collect();
    let rows = rows_of(tx, &PARTNER_PROFILES, "partner_org_id", &ints(orgs), "").await?;
    let profiles = index(
        typed(rows, |r| fold::int_of(r, "partner_org_id"))?,
        |(_, o)| Ok(*o),
    )?;
    let rows = rows_of(tx, &STATIONS, "station_id", &stations, "").await?;
    let station_rows = index(typed(rows, |r| fold::int_of(r, "station_id"))?, |(_, s)| {
        Ok(*s)
    })?;
    let setting = tx
        .row(
            &SETTINGS,
            "WHERE name = ?",
            &[Cell::text(fold::SETTING_ACCOUNT_ROUTE)],
        )
        .await?;
    let account_route: AccountRoute = fold::account_route_of(setting.as_ref()).map_err(bad(0))?;

    // Opening paid balances of the stations or the platform stations.
    let opening_paid = {
        let mut ids = stations.clone();
        let mut condition = format!("small_station_id IN ({})", in_list(stations.len()));
        if !platforms.is_empty() {
            condition.push_str(&format!(
                " OR platform_station_id IN ({})",
                in_list(platforms.len())
            ));
            ids.extend_from_slice(&platforms);
        }
        let sql = format!("WHERE {condition} ORDER BY opening_id");
        typed(
            tx.rows(&OPENING_PAID, &sql, &ids).await?,
            fold::opening_paid_of,
        )?
    };

    // Lines and locks of the station-months, the orders they belong to.
    let rows = rows_in(
        tx,
        &LINES,
        &stations,
        at_stations("bill_yearmonth", "ORDER BY line_id"),
        &span,
    )
    .await?;
    let lines = index(typed(rows, |_| Ok(()))?, |(r, _)| {
        station_month_of(r, "bill_yearmonth")
    })?;
    let rows = rows_in(
        tx,
        &LOCKS,
        &stations,
        at_stations("bill_yearmonth", "ORDER BY lock_id"),
        &span,
    )
    .await?;
    let locks = index(typed(rows, fold::lock_of)?, |(r, _)| {
        station_month_of(r, "bill_yearmonth")
    })?;
    let mut order_ids = BTreeSet::new();
    for (row, _) in lines.values().flatten() {
        order_ids.insert(fold::int_of(row, "order_id").map_err(bad(0))?);
    }
    for (_, lock) in locks.values().flatten() {
        order_ids.insert(lock.order_id);
    }
    let rows = rows_of(
        tx,
        &ORDERS,
        "order_id",
        &ints(order_ids),
        "ORDER BY order_id",
    )
    .await?;
    let orders = index(typed(rows, fold::order_of)?, |(_, o)| Ok(o.id))?;

    // Results of the stations and platform stations up to the last month, and the
    // lines' latest results.
    let mut latest = BTreeSet::new();
    for (row, _) in lines.values().flatten() {
        if let Some(line) = fold::line_of(row).map_err(bad(0))? {
            latest.extend(line.latest_result_id);
        }
    }
    let results = {
        let until = Cell::Text(hi.to_string());
        let mut args = stations.clone();
        args.push(until.clone());
        let mut condition = format!(
            "(small_station_id IN ({}) AND bill_yearmonth <= ?)",
            in_list(stations.len())
        );
        if !platforms.is_empty() {
            condition.push_str(&format!(
                " OR (platform_station_id IN ({}) AND bill_yearmonth <= ?)",
                in_list(platforms.len())
            ));
            args.extend_from_slice(&platforms);
            args.push(until);
        }
        if !latest.is_empty() {
            condition.push_str(&format!(" OR result_id IN ({})", in_list(latest.len())));
            args.extend(latest.iter().copied().map(Cell::Int));
        }
        let sql = format!("WHERE {condition} ORDER BY result_id");
        typed(tx.rows(&RESULTS, &sql, &args).await?, fold::result_of)?
    };

    // Each station-month keeps what its own reads match.
    let mut out = Vec::with_capacity(sms.len());
    for &sm in sms {
        let mut seen = Newest::default();
        let small = small_of(&sm);
        let diff = diff_of(&sm);
        if small.is_none() && diff.is_none() {
            out.push(None);
            continue;
        }
        let small_bill = small.map(|(r, b)| {
            seen.see_row(&SMALL_BILLS, r);
            b.clone()
        });
        let diff = diff.map(|(r, d)| {
            seen.see_row(&DIFFS, r);
            *d
        });

        let (mut small_account, mut account_small_bills) = (None, Vec::new());
        if let Some(b) = &small_bill {
            if let Some(rows) = customer_accounts.get(&b.account_id) {
                for (r, _) in rows {
                    seen.see_row(&CUSTOMER_ACCOUNTS, r);
                }
                small_account = rows.first().map(|(_, a)| *a);
            }
            let until = sm.month.last_rent_month_read();
            for (r, rent) in rents.get(&b.account_id).into_iter().flatten() {
                if rent.month <= until {
                    seen.see_row(&SMALL_BILLS, r);
                    account_small_bills.push(*rent);
                }
            }
        }

        let mut inconsistent = None;
        let mut partner_bill = None;
        if let Some(id) = diff.and_then(|d| d.partner_bill_id) {
            let others: Vec<StationMonth> = linking
                .get(&id)
                .into_iter()
                .flatten()
                .filter(|o| **o != sm)
                .copied()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let bill = partner_bills.get(&id).and_then(|v| v.first());
            let repush = repushes.get(&id).and_then(|v| v.first());
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

        let mut partner_accounts = Vec::new();
        if let Some(b) = &partner_bill {
            let own = own_account_rows(b.partner_account_id);
            for (r, _) in own {
                seen.see_row(&PARTNER_ACCOUNTS, r);
            }
            if own
                .first()
                .is_some_and(|(_, a)| a.platform_station_id.is_some())
            {
                for (r, _) in group_of(b.partner_account_id) {
                    seen.see_row(&PARTNER_ACCOUNTS, r);
                }
            }
            partner_accounts = group_of(b.partner_account_id)
                .into_iter()
                .map(|(_, a)| *a)
                .collect();
        }
        let own_account = partner_bill
            .as_ref()
            .and_then(|b| {
                partner_accounts
                    .iter()
                    .find(|a| a.id == b.partner_account_id)
            })
            .copied();
        let group: BTreeSet<i64> = partner_accounts.iter().map(|a| a.id).collect();
        let mut account_partner_bills = Vec::new();
        for i in merged(&bills_of_account, &group) {
            let (r, b) = &group_bills[i];
            seen.see_row(&PARTNER_BILLS, r);
            account_partner_bills.push(*b);
        }
        let mut opening_deductions = Vec::new();
        for i in merged(&openings_of_account, &group) {
            let (r, o) = &group_openings[i];
            seen.see_row(&OPENING_DEDUCTIONS, r);
            opening_deductions.push(*o);
        }
        let partner_profile = match own_account {
            Some(a) => {
                let row = profiles
                    .get(&a.partner_org_id)
                    .and_then(|v| v.first())
                    .map(|(r, _)| r);
                if let Some(r) = row {
                    seen.see_row(&PARTNER_PROFILES, r);
                }
                fold::partner_profile_of(row).map_err(bad(0))?
            }
            None => factledger_projections::bill::PartnerProfile::Unrecorded,
        };
        let station_row = station_rows
            .get(&sm.station_id)
            .and_then(|v| v.first())
            .map(|(r, _)| r);
        if let Some(r) = station_row {
            seen.see_row(&STATIONS, r);
        }
        let station = fold::station_of(station_row).map_err(bad(0))?;
        if let Some(r) = &setting {
            seen.see_row(&SETTINGS, r);
        }
        let platform = own_account.and_then(|a| a.platform_station_id);
        let mut opening_paid_balances = Vec::new();
        for (r, o) in &opening_paid {
            if o.small_station_id == sm.station_id
                || (platform.is_some() && o.platform_station_id == platform)
            {
                seen.see_row(&OPENING_PAID, r);
                opening_paid_balances.push(*o);
            }
        }

        let mut line_list = Vec::new();
        let mut unqualified_conclusions = Vec::new();
        let mut order_set = BTreeSet::new();
        for (r, _) in lines.get(&sm).into_iter().flatten() {
            seen.see_row(&LINES, r);
            line_list.extend(fold::line_of(r).map_err(bad(0))?);
            unqualified_conclusions.extend(fold::conclusion_of(r).map_err(bad(0))?);
            order_set.insert(fold::int_of(r, "order_id").map_err(bad(0))?);
        }
        let mut lock_list = Vec::new();
        for (r, l) in locks.get(&sm).into_iter().flatten() {
            seen.see_row(&LOCKS, r);
            lock_list.push(*l);
            order_set.insert(l.order_id);
        }
        let mut order_list = Vec::new();
        for id in &order_set {
            for (r, o) in orders.get(id).into_iter().flatten() {
                seen.see_row(&ORDERS, r);
                order_list.push(*o);
            }
        }
        let own_latest: BTreeSet<i64> = line_list
            .iter()
            .filter_map(|l| l.latest_result_id)
            .collect();
        let mut result_list = Vec::new();
        for (r, res) in &results {
            let reads = (res.small_station_id == sm.station_id && res.month <= sm.month)
                || (platform.is_some()
                    && res.platform_station_id == platform
                    && res.month <= sm.month)
                || own_latest.contains(&res.id);
            if reads {
                seen.see_row(&RESULTS, r);
                result_list.push(*res);
            }
        }

        out.push(Some(Assembled {
            facts: BillFacts {
                station_month: sm,
                small_bill,
                small_account,
                account_small_bills,
                partner_bill,
                diff,
                partner_accounts,
                account_partner_bills,
                partner_profile,
                station,
                account_route,
                opening_paid_balances,
                opening_deductions,
                orders: order_list,
                lines: line_list,
                locks: lock_list,
                results: result_list,
                unqualified_conclusions,
            },
            inconsistent,
            fact_at: seen.0,
        }));
    }
    Ok(out)
}

/// Positions of `rows` per account, ascending.
fn positions<T>(rows: &[Typed<T>], account: impl Fn(&T) -> i64) -> BTreeMap<i64, Vec<usize>> {
    let mut out: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, (_, t)) in rows.iter().enumerate() {
        out.entry(account(t)).or_default().push(i);
    }
    out
}

/// The positions of the rows of `accounts`, in read order.
fn merged(of_account: &BTreeMap<i64, Vec<usize>>, accounts: &BTreeSet<i64>) -> Vec<usize> {
    let mut out: Vec<usize> = accounts
        .iter()
        .filter_map(|a| of_account.get(a))
        .flatten()
        .copied()
        .collect();
    out.sort_unstable();
    out
}
