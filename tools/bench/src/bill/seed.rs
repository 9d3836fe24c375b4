//! Seeding the log: reference data, then month by month every station's small bill,
//! diff and partner bill with its chunk's payment order, the live month, and the
//! scoped-refresh account.

use super::orders::{order_streams, result, LineOf};
use super::plan::{
    at, mix, month_start, order_kind, profile_event, station, station_facts, yyyymm, Ids,
    OrderKind, Station, ACCOUNT_CUSTOMER, ACCOUNT_FIRST_MONTH, ACCOUNT_ORG, ACCOUNT_PARTNER,
    ACCOUNT_PLATFORM, ACCOUNT_STATION, CHUNK_STATIONS, FIRST_MONTH, ORG_STATIONS,
};
use super::seeder::{Seeder, Stream};
use super::Options;
use chrono::{DateTime, NaiveDate, Utc};
use factledger_aggregates::bill::{
    AccountRouteCode, PartnerBillEvent, ReferenceEvent, ResultSourceCode, ResultStatusCode,
    StationMonthEvent, PARTNER_BILL_AGGREGATE_TYPE, PAYMENT_RESULT_AGGREGATE_TYPE,
    REFERENCE_AGGREGATE_TYPE, STATION_MONTH_AGGREGATE_TYPE,
};
use std::time::Instant;

/// Seed reference data, the main set month by month, then the refresh account;
/// returns the station-months seeded.
pub(super) async fn seed(
    seeder: &mut Seeder,
    o: &Options,
    deadline: Instant,
) -> anyhow::Result<(u64, Ids)> {
    seed_reference(seeder, o).await?;
    let mut ids = Ids::default();
    let mut station_months = 0u64;
    for m in 0..o.months {
        anyhow::ensure!(
            Instant::now() < deadline,
            "--max-secs reached while seeding month {m}"
        );
        for chunk_start in (0..o.stations).step_by(CHUNK_STATIONS as usize) {
            station_months += seed_chunk(seeder, &mut ids, m, chunk_start, o.stations).await?;
        }
    }
    station_months += seed_account(seeder, &mut ids, o.account_months).await?;
    seeder.flush().await?;
    Ok((station_months, ids))
}

/// A new reference-data stream.
fn reference(id: String) -> Stream {
    Stream::new(REFERENCE_AGGREGATE_TYPE, id)
}

/// The main set's reference data: the account route first (it touches every
/// station-month), each org's payment cycle, then per station its accounts, facts and
/// openings, one unit each.
async fn seed_reference(seeder: &mut Seeder, o: &Options) -> anyhow::Result<()> {
    let first = month_start(FIRST_MONTH, 0);
    let last = yyyymm(month_start(FIRST_MONTH, o.months - 1));
    let t0 = at(first, -30, 0);
    let mut s = reference("account_route".into());
    seeder.push(
        &mut s,
        ReferenceEvent::AccountRouteSet {
            route: AccountRouteCode::Platform,
            recorded_at: t0,
        },
    )?;
    seeder.unit(vec![s]).await?;
    for org in 1..=o.stations.div_ceil(ORG_STATIONS) as i64 {
        let mut s = reference(format!("partner_profile:{org}"));
        seeder.push(&mut s, profile_event(org, t0))?;
        seeder.unit(vec![s]).await?;
    }
    for k in 0..o.stations {
        let st = station(k);
        let mut streams = station_reference(seeder, &st, k, yyyymm(first), &last, t0)?;
        streams.extend(openings(seeder, &st, k, t0)?);
        seeder.unit(streams).await?;
    }
    Ok(())
}

/// A station's customer account (income from `income_start`, payable up to `cutoff`),
/// its partner account and its facts (spread by `k`).
fn station_reference(
    seeder: &mut Seeder,
    st: &Station,
    k: u64,
    income_start: String,
    cutoff: &str,
    t0: DateTime<Utc>,
) -> anyhow::Result<Vec<Stream>> {
    let mut customer = reference(format!("customer_account:{}", st.customer_account));
    seeder.push(
        &mut customer,
        ReferenceEvent::CustomerAccountRecorded {
            account_id: st.customer_account,
            income_start_month: income_start,
            current_payable_cutoff_month: Some(cutoff.to_owned()),
            recorded_at: t0,
        },
    )?;
    let mut partner = reference(format!("partner_account:{}", st.partner_account));
    seeder.push(
        &mut partner,
        ReferenceEvent::PartnerAccountRecorded {
            partner_account_id: st.partner_account,
            partner_org_id: st.org,
            platform_station_id: st.platform,
            recorded_at: t0,
        },
    )?;
    let mut facts = reference(format!("station:{}", st.id));
    seeder.push(&mut facts, station_facts(st.id, k, t0))?;
    Ok(vec![customer, partner, facts])
}

/// The main set's openings: one opening paid balance per platform station at most
/// (the platform key must find one), on every fifth group; an opening deduction on
/// every 25th station.
fn openings(
    seeder: &mut Seeder,
    st: &Station,
    k: u64,
    t0: DateTime<Utc>,
) -> anyhow::Result<Vec<Stream>> {
    let mut streams = Vec::new();
    if k.is_multiple_of(20) {
        let mut s = reference(format!("opening_paid:{}", st.id));
        seeder.push(
            &mut s,
            ReferenceEvent::OpeningPaidBalanceRecorded {
                opening_id: st.id,
                small_station_id: st.id,
                platform_station_id: st.platform,
                partner_org_id: st.org,
                opening_paid_minor: 50_000,
                updated_at: t0,
            },
        )?;
        streams.push(s);
    }
    if k.is_multiple_of(25) {
        let mut s = reference(format!("opening_deduction:{}", st.id));
        seeder.push(
            &mut s,
            ReferenceEvent::OpeningDeductionRecorded {
                opening_id: st.id,
                partner_account_id: st.partner_account,
                effective: true,
                amount_minor: 10_000,
                updated_at: t0,
            },
        )?;
        streams.push(s);
    }
    Ok(streams)
}

/// The unit of the main set's stations `chunk_start..` (one chunk, cut at `end`) in
/// month `m`, with the chunk's order; returns its station-months.
async fn seed_chunk(
    seeder: &mut Seeder,
    ids: &mut Ids,
    m: u64,
    chunk_start: u64,
    end: u64,
) -> anyhow::Result<u64> {
    let month = month_start(FIRST_MONTH, m);
    let stations: Vec<u64> = (chunk_start..(chunk_start + CHUNK_STATIONS).min(end)).collect();
    let org = chunk_start / ORG_STATIONS;
    let kind = order_kind(m, org, chunk_start % ORG_STATIONS / CHUNK_STATIONS);
    let streams = station_month_unit(seeder, ids, &stations, m, month, kind)?;
    seeder.unit(streams).await?;
    Ok(stations.len() as u64)
}

/// One more month (the month after the main set) for the first `stations` stations:
/// what the live projector meets at the head. Returns the events seeded.
pub(super) async fn seed_live_month(
    seeder: &mut Seeder,
    ids: &mut Ids,
    o: &Options,
    stations: u64,
) -> anyhow::Result<u64> {
    let before = seeder.total;
    for chunk_start in (0..stations.min(o.stations)).step_by(CHUNK_STATIONS as usize) {
        seed_chunk(seeder, ids, o.months, chunk_start, stations).await?;
    }
    seeder.flush().await?;
    Ok(seeder.total - before)
}
/// The bill facts of one station-month: its small bill, diff and partner bill.
struct BillOf {
    /// One id for its bill, diff, partner bill (and line).
    sm_id: i64,
    rent: i64,
    /// Whether the diff links the partner bill.
    linked: bool,
    pre_rent: Option<i64>,
    pushed: DateTime<Utc>,
}

/// The station-month stream (small bill, diff) and the partner bill stream of `b`.
fn bill_streams(
    seeder: &mut Seeder,
    st: &Station,
    ym: &str,
    b: &BillOf,
) -> anyhow::Result<[Stream; 2]> {
    let mut s = Stream::new(STATION_MONTH_AGGREGATE_TYPE, format!("{}:{ym}", st.id));
    seeder.push(
        &mut s,
        StationMonthEvent::SmallBillRecorded {
            station_id: st.id,
            month: ym.to_owned(),
            bill_id: b.sm_id,
            account_id: st.customer_account,
            rent_minor: b.rent,
            recorded_at: b.pushed,
        },
    )?;
    seeder.push(
        &mut s,
        StationMonthEvent::DiffRecorded {
            station_id: st.id,
            month: ym.to_owned(),
            diff_id: b.sm_id,
            partner_bill_id: b.linked.then_some(b.sm_id),
            recorded_at: b.pushed,
        },
    )?;
    let mut p = Stream::new(PARTNER_BILL_AGGREGATE_TYPE, b.sm_id.to_string());
    seeder.push(
        &mut p,
        PartnerBillEvent::PartnerBillRecorded {
            partner_bill_id: b.sm_id,
            partner_account_id: st.partner_account,
            month: ym.to_owned(),
            pre_rent_minor: b.pre_rent,
            deduction_minor: 500,
            recorded_at: b.pushed,
        },
    )?;
    Ok([s, p])
}

/// The streams of one chunk of stations in month `m`: per station its station-month,
/// partner bill (and offline result), then the chunk's order with locks and results.
fn station_month_unit(
    seeder: &mut Seeder,
    ids: &mut Ids,
    stations: &[u64],
    m: u64,
    month: NaiveDate,
    kind: OrderKind,
) -> anyhow::Result<Vec<Stream>> {
    let ym = yyyymm(month);
    let mut streams = Vec::new();
    let mut lines = Vec::new();
    for &k in stations {
        let st = station(k);
        // Station-month k-th in the log: one id for its bill, diff, partner bill, line.
        let sm_id = (m * 100_000_000 + k + 1) as i64;
        let r = mix(k, m) % 100;
        let rent = 100_000 + (k % 50) as i64 * 1_000;
        let pushed = at(month, 32, k as i64);
        let pre_rent = match r {
            3..=4 => Some(0),
            5 => None,
            _ => Some(rent - 2_000),
        };
        // 3 %: the diff is not (yet) matched to the partner bill: small bill only.
        let bill = BillOf {
            sm_id,
            rent,
            linked: r >= 3,
            pre_rent,
            pushed,
        };
        streams.extend(bill_streams(seeder, &st, &ym, &bill)?);
        if r == 0 {
            // Small bill only, paid offline (R3).
            let result_id = ids.result();
            let mut s = Stream::new(PAYMENT_RESULT_AGGREGATE_TYPE, result_id.to_string());
            seeder.push(
                &mut s,
                result(
                    result_id,
                    None,
                    &st,
                    &ym,
                    ResultStatusCode::PaySuccess,
                    ResultSourceCode::OfflineImport,
                    rent,
                    at(month, 40, 0),
                ),
            )?;
            streams.push(s);
        }
        if r >= 6 && kind != OrderKind::None {
            lines.push(LineOf {
                line_id: sm_id,
                station: st,
                r,
                pre_rent: rent - 2_000,
            });
        }
    }
    if !lines.is_empty() {
        order_streams(seeder, ids, &mut streams, &lines, &ym, month, kind)?;
    }
    Ok(streams)
}

/// The scoped-refresh account: one station of its own customer account, partner
/// account, platform station and org, with `months` months of bills, each paid
/// through a one-line order under an active lock. Returns its station-months.
async fn seed_account(seeder: &mut Seeder, ids: &mut Ids, months: u64) -> anyhow::Result<u64> {
    let first = month_start(ACCOUNT_FIRST_MONTH, 0);
    let t0 = at(first, -30, 0);
    let st = Station {
        id: ACCOUNT_STATION,
        customer_account: ACCOUNT_CUSTOMER,
        partner_account: ACCOUNT_PARTNER,
        platform: Some(ACCOUNT_PLATFORM),
        org: ACCOUNT_ORG,
    };
    // The account's own org is MONTHLY: the account's cutoff caps the rent sum.
    let mut profile = reference(format!("partner_profile:{}", st.org));
    seeder.push(
        &mut profile,
        ReferenceEvent::PartnerProfileConfigured {
            partner_org_id: st.org,
            payment_cycle: "MONTHLY".into(),
            config_version: 1,
            recorded_at: t0,
        },
    )?;
    let cutoff = yyyymm(month_start(ACCOUNT_FIRST_MONTH, months - 1));
    let mut streams = vec![profile];
    streams.extend(station_reference(
        seeder,
        &st,
        0,
        yyyymm(first),
        &cutoff,
        t0,
    )?);
    seeder.unit(streams).await?;
    for m in 0..months {
        let month = month_start(ACCOUNT_FIRST_MONTH, m);
        let ym = yyyymm(month);
        let sm_id = 900_000_000_000 + m as i64 + 1;
        let rent = 150_000;
        let pushed = at(month, 32, 0);
        let mut streams = Vec::new();
        let bill = BillOf {
            sm_id,
            rent,
            linked: true,
            pre_rent: Some(rent - 2_000),
            pushed,
        };
        streams.extend(bill_streams(seeder, &st, &ym, &bill)?);
        // Paid in full, except every 10th month partially and the last one awaiting.
        let kind = if m + 1 == months {
            OrderKind::AwaitingUnderLock
        } else {
            OrderKind::Paid
        };
        let line = LineOf {
            line_id: sm_id,
            station: st,
            r: if m % 10 == 9 { 0 } else { 10 },
            pre_rent: rent - 2_000,
        };
        order_streams(seeder, ids, &mut streams, &[line], &ym, month, kind)?;
        seeder.unit(streams).await?;
    }
    Ok(months)
}
