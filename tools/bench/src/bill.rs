//! Bill projector throughput (issue 6 item 9): seed station-months of bill facts
//! straight through the store in large units, then time
//! 1. a catch-up of the `bill` projection from position 0 as the running projector
//!    does it (events/s, wall time, peak RSS): far behind the head it folds in bulk,
//!    then sweeps every station-month once;
//! 2. a full rebuild of the same log in one transaction;
//! 3. one more month for `--live-stations` stations applied by the live path (each
//!    batch recomputes what it affects, a partner group's earlier months included);
//! 4. a scoped refresh of one customer account with 120 months (`rebuild_account`,
//!    p50/p99).
//!
//! The seed writes the event contract of `factledger_aggregates::bill` exactly (its
//! aggregate types, stream ids and payloads), in the order a live system would:
//! reference data first, then month by month every station's small bill, diff and
//! partner bill, and the payment orders of the month (one order per partner org and
//! chunk of [`CHUNK_STATIONS`] stations) with their lines, locks and results. The
//! order kinds and per-line outcomes are spread so that every R-BILL-2 rule fires
//! somewhere; the distribution of `payment_status` is printed afterwards.
//!
//! Every loop is bounded by its count and by `--max-secs`: a catch-up cut off by the
//! deadline reports the events it committed and their rate.

use chrono::{DateTime, Datelike, Duration as Days, NaiveDate, Utc};
use cqrs_es::DomainEvent;
use factledger::bill::projection::{self as bill_projection, Account};
use factledger::infra::store::{
    DynStore, Metadata, SealedEvent, StreamAppend, UnitOfWork, GENESIS_HASH,
};
use factledger_aggregates::bill::{
    AccountRouteCode, BillLockEvent, LineKindCode, LineStatusCode, OrderStatusCode,
    PartnerBillEvent, PaymentOrderEvent, PaymentResultEvent, PlannedAmount, RecordWayCode,
    ReferenceEvent, ResultSourceCode, ResultStatusCode, ResultTypeCode, ShareRuleFact,
    StationMonthEvent, TriggerSource, BILL_LOCK_AGGREGATE_TYPE, PARTNER_BILL_AGGREGATE_TYPE,
    PAYMENT_ORDER_AGGREGATE_TYPE, PAYMENT_RESULT_AGGREGATE_TYPE, REFERENCE_AGGREGATE_TYPE,
    STATION_MONTH_AGGREGATE_TYPE,
};
use sqlx::Row;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Events per store append (one transaction), as the other seeders.
const EVENTS_PER_APPEND: usize = 5_000;
/// Stations of one platform station (their partner accounts share it: deduction and
/// cumulative paid sums read the group).
const GROUP_STATIONS: u64 = 4;
/// Stations of one partner org (a multiple of the group and of the chunk).
const ORG_STATIONS: u64 = 48;
/// Stations paid by one payment order per month.
const CHUNK_STATIONS: u64 = 16;
/// First month of the main set.
const FIRST_MONTH: (i32, u32) = (2023, 1);
/// First month of the scoped-refresh account (120 months by default).
const ACCOUNT_FIRST_MONTH: (i32, u32) = (2015, 1);
/// Ids of the scoped-refresh account's entities (far from the main set's).
const ACCOUNT_STATION: i64 = 9_000_001;
const ACCOUNT_CUSTOMER: i64 = 9_100_001;
const ACCOUNT_PARTNER: i64 = 9_200_001;
const ACCOUNT_PLATFORM: i64 = 9_300_001;
const ACCOUNT_ORG: i64 = 9_400_001;
/// Id bases of the main set's entities.
const PLATFORM_BASE: i64 = 1_000_000;
const PARTNER_ACCOUNT_BASE: i64 = 2_000_000;
const CUSTOMER_ACCOUNT_BASE: i64 = 3_000_000;
/// Seconds between two samples of the catch-up's progress.
const SAMPLE_SECS: u64 = 30;

pub struct Options {
    pub stations: u64,
    /// Stations given one more month after the catch-up, applied live.
    pub live_stations: u64,
    /// Also time `rebuild_full` of the whole log.
    pub full_rebuild: bool,
    pub months: u64,
    pub account_months: u64,
    pub refresh_runs: usize,
    pub max_secs: u64,
}

pub async fn bench(url: &str, o: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(o.stations >= 1 && o.months >= 1, "--stations, --months ≥ 1");
    anyhow::ensure!(
        (1..=1200).contains(&o.months) && (1..=1200).contains(&o.account_months),
        "--months, --account-months: 1..=1200"
    );
    let deadline = Instant::now() + Duration::from_secs(o.max_secs);
    let store = super::fresh_store(url).await?;
    let db = factledger::infra::store::open(url).await?;

    // 1. Seed.
    let t = Instant::now();
    let mut seeder = Seeder::new(store.clone());
    let (seeded_sm, mut ids) = seed(&mut seeder, o, deadline).await?;
    let seed_s = t.elapsed().as_secs_f64();
    let seeded = seeder.total;
    println!(
        "seeded {seeded} events ({seeded_sm} station-months: {} × {} + 1 × {}) in {seed_s:.1} s",
        o.stations, o.months, o.account_months
    );
    println!("| event type | events |");
    println!("|---|---|");
    for (t, n) in &seeder.counts {
        println!("| {t} | {n} |");
    }

    // 2. Full catch-up from position 0, bounded by the deadline.
    let status_before = server_status(&db.db).await;
    let sampler = tokio::spawn(sample_progress(db.db.clone(), seeded));
    super::reset_peak_rss();
    let rss_before_mb = super::rss_kb("VmRSS:") as f64 / 1024.0;
    let t = Instant::now();
    let left = deadline.saturating_duration_since(Instant::now());
    let outcome = tokio::time::timeout(left, bill_projection::catch_up(&store, &db.db)).await;
    let secs = t.elapsed().as_secs_f64();
    let peak_mb = super::rss_kb("VmHWM:") as f64 / 1024.0;
    sampler.abort();
    let status_after = server_status(&db.db).await;
    let complete = match outcome {
        Ok(r) => {
            let read = r.map_err(|e| anyhow::anyhow!("catch-up: {e}"))?;
            anyhow::ensure!(read == seeded, "catch-up read {read} of {seeded} events");
            true
        }
        Err(_) => false,
    };
    let applied = checkpoint(&db.db).await? as u64;
    println!(
        "| catch-up | events applied | of seeded | seconds | events/s | station-months/s | RSS MiB before | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {applied} | {seeded} | {secs:.1} | {:.0} | {:.0} | {rss_before_mb:.0} | {peak_mb:.0} |",
        if complete { "complete" } else { "cut off by --max-secs" },
        applied as f64 / secs,
        applied as f64 / secs * seeded_sm as f64 / seeded.max(1) as f64,
    );
    print_status_delta(&status_before, &status_after, applied, seeded_sm);

    // The result: one row per station-month in each bill table, and the statuses.
    let rows = table_counts(&db.db).await?;
    println!("| table | rows | station-months seeded |");
    println!("|---|---|---|");
    for (t, n) in &rows {
        println!("| {t} | {n} | {seeded_sm} |");
    }
    if complete {
        for (t, n) in &rows {
            if t.starts_with("fi_") {
                anyhow::ensure!(*n == seeded_sm, "{t}: {n} rows, want {seeded_sm}");
            }
        }
    }
    print_distribution(&db.db).await?;
    if !complete {
        println!("full rebuild, live month and scoped refresh skipped: the catch-up did not reach the head");
        return Ok(());
    }

    // 3. The same log rebuilt in one transaction (opt-in: at full size it takes longer
    // than the catch-up, and a rebuild cut off rolls back for minutes).
    if o.full_rebuild && !full_rebuild(&store, &db.db, &rows, seeded_sm, deadline).await? {
        println!("live month and scoped refresh skipped: the rebuild's rollback holds its locks");
        return Ok(());
    }

    // 4. Live: one more month for some stations, applied at the head batch by batch
    // (each batch recomputes what it affects, a group's earlier months included).
    if o.live_stations > 0 && Instant::now() < deadline {
        let events = seed_live_month(&mut seeder, &mut ids, o, o.live_stations).await?;
        let live = bill_projection::CatchUp {
            bulk_lag: i64::MAX,
            ..Default::default()
        };
        let from = checkpoint(&db.db).await?;
        let t = Instant::now();
        let left = deadline.saturating_duration_since(Instant::now());
        let done = tokio::time::timeout(left, bill_projection::catch_up_with(&store, &db.db, live))
            .await
            .is_ok();
        let secs = t.elapsed().as_secs_f64();
        let applied = checkpoint(&db.db).await? - from;
        println!("| live month | stations | events seeded | events applied | seconds | events/s |");
        println!("|---|---|---|---|---|---|");
        println!(
            "| {} | {} | {events} | {applied} | {secs:.1} | {:.0} |",
            if done {
                "complete"
            } else {
                "cut off by --max-secs"
            },
            o.live_stations.min(o.stations),
            applied as f64 / secs
        );
    }

    // 5. Scoped refresh of the 120-month account.
    if Instant::now() < deadline {
        refresh_latency(&db.db, o, deadline).await?;
    }
    Ok(())
}

/// Time `rebuild_full` of the whole log and check it left the same row counts; false
/// when the deadline cut it off.
async fn full_rebuild(
    store: &DynStore,
    db: &factledger::infra::db::Db,
    rows: &[(&'static str, u64)],
    seeded_sm: u64,
    deadline: Instant,
) -> anyhow::Result<bool> {
    let t = Instant::now();
    let left = deadline.saturating_duration_since(Instant::now());
    Ok(
        match tokio::time::timeout(left, bill_projection::rebuild_full(store, db)).await {
            Ok(r) => {
                let outcome = r.map_err(|e| anyhow::anyhow!("full rebuild: {e}"))?;
                let secs = t.elapsed().as_secs_f64();
                println!("| full rebuild | events | seconds | events/s | station-months/s |");
                println!("|---|---|---|---|---|");
                println!(
                    "| one transaction | {} | {secs:.1} | {:.0} | {:.0} |",
                    outcome.events_read,
                    outcome.events_read as f64 / secs,
                    seeded_sm as f64 / secs
                );
                let rebuilt = table_counts(db).await?;
                anyhow::ensure!(rebuilt == rows, "the full rebuild changed the row counts");
                true
            }
            Err(_) => {
                println!(
                    "full rebuild cut off by --max-secs after {:.1} s",
                    t.elapsed().as_secs_f64()
                );
                false
            }
        },
    )
}

// ---------------------------------------------------------------------------------
// Sealing events into units.

/// One stream being written in this unit (always a new stream: every stream of the
/// seed is complete within the unit that starts it).
struct Stream {
    aggregate_type: &'static str,
    id: String,
    prev: String,
    events: Vec<SealedEvent>,
}

impl Stream {
    fn new(aggregate_type: &'static str, id: impl Into<String>) -> Stream {
        Stream {
            aggregate_type,
            id: id.into(),
            prev: GENESIS_HASH.to_owned(),
            events: Vec::new(),
        }
    }
}

struct Seeder {
    store: DynStore,
    meta: Metadata,
    now: DateTime<Utc>,
    units: Vec<UnitOfWork>,
    pending: usize,
    total: u64,
    counts: BTreeMap<String, u64>,
}

impl Seeder {
    fn new(store: DynStore) -> Seeder {
        Seeder {
            store,
            meta: super::metadata(),
            now: chrono::SubsecRound::trunc_subsecs(Utc::now(), 6),
            units: Vec::new(),
            pending: 0,
            total: 0,
            counts: BTreeMap::new(),
        }
    }

    /// Seal `e` onto `s`, hash-chained as the bus seals.
    fn push<E: DomainEvent + serde::Serialize>(
        &mut self,
        s: &mut Stream,
        e: E,
    ) -> anyhow::Result<()> {
        let event = SealedEvent::seal(
            self.store.keyring().active(),
            &s.prev,
            s.aggregate_type,
            &s.id,
            s.events.len() as i64 + 1,
            e.event_type(),
            e.event_version().parse().unwrap_or(1),
            serde_json::to_string(&e)?,
            &self.meta,
            uuid::Uuid::new_v4(),
            self.now,
        );
        s.prev = event.hash.clone();
        s.events.push(event);
        *self.counts.entry(e.event_type()).or_default() += 1;
        Ok(())
    }

    /// One unit of these streams; appended with the others once enough are pending.
    async fn unit(&mut self, streams: Vec<Stream>) -> anyhow::Result<()> {
        let n: usize = streams.iter().map(|s| s.events.len()).sum();
        self.units.push(UnitOfWork {
            streams: streams
                .into_iter()
                .filter(|s| !s.events.is_empty())
                .map(|s| StreamAppend {
                    aggregate_type: s.aggregate_type.to_owned(),
                    aggregate_id: s.id,
                    expected_version: 0,
                    expected_hash: GENESIS_HASH.to_owned(),
                    events: s.events,
                })
                .collect(),
            ..Default::default()
        });
        self.pending += n;
        self.total += n as u64;
        if self.pending >= EVENTS_PER_APPEND {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> anyhow::Result<()> {
        if !self.units.is_empty() {
            self.store.append(&std::mem::take(&mut self.units)).await?;
        }
        self.pending = 0;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// What to seed.

/// A deterministic spread (splitmix64 of two numbers).
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(b)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The first day of month `first` + `idx`.
fn month_start(first: (i32, u32), idx: u64) -> NaiveDate {
    let m0 = first.0 as i64 * 12 + first.1 as i64 - 1 + idx as i64;
    NaiveDate::from_ymd_opt((m0 / 12) as i32, (m0 % 12) as u32 + 1, 1).expect("a valid month")
}

fn yyyymm(d: NaiveDate) -> String {
    format!("{:04}{:02}", d.year(), d.month())
}

/// Day `day` (0-based, may pass the month's end) of the month, plus `secs`.
fn at(month: NaiveDate, day: i64, secs: i64) -> DateTime<Utc> {
    let t = month.and_hms_opt(0, 0, 0).expect("midnight") + Days::days(day) + Days::seconds(secs);
    t.and_utc()
}

/// The payment order kind of one (month, org, chunk), and how often it occurs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OrderKind {
    /// No order this month: unpaid (R10) unless pre_rent says otherwise.
    None,
    /// Submitted and published under reserved locks (R1).
    InReview,
    /// Review rejected while the locks are still live (R1, seed §5 case).
    Rejected,
    /// Approved, locks active, no result yet (R2).
    AwaitingUnderLock,
    /// Approved without locks (R6).
    AwaitingWithoutLock,
    /// Approved and paid through the treasury, some lines partially, failed, voided or
    /// overpaid (R7, R8, R9, R10, Q4), master reconciled to PAID.
    Paid,
    /// Approved then voided (R10).
    Voided,
    /// UNQUALIFIED lines concluded, partner-visible or internal (Q1, Q2).
    Unqualified,
}

fn order_kind(m: u64, org: u64, chunk: u64) -> OrderKind {
    match mix(m, org * 97 + chunk) % 100 {
        0..=44 => OrderKind::None,
        45..=49 => OrderKind::InReview,
        50..=51 => OrderKind::Rejected,
        52..=59 => OrderKind::AwaitingUnderLock,
        60..=62 => OrderKind::AwaitingWithoutLock,
        63..=92 => OrderKind::Paid,
        93..=95 => OrderKind::Voided,
        _ => OrderKind::Unqualified,
    }
}

/// Ids of the main set's station `s` (0-based).
#[derive(Clone, Copy)]
struct Station {
    id: i64,
    customer_account: i64,
    partner_account: i64,
    /// `None` for an unmapped partner account (2 %).
    platform: Option<i64>,
    org: i64,
}

fn station(s: u64) -> Station {
    Station {
        id: s as i64 + 1,
        customer_account: CUSTOMER_ACCOUNT_BASE + s as i64,
        partner_account: PARTNER_ACCOUNT_BASE + s as i64,
        platform: (s % 50 != 49).then_some(PLATFORM_BASE + (s / GROUP_STATIONS) as i64),
        org: (s / ORG_STATIONS) as i64 + 1,
    }
}

/// The payment cycle of an org: every legal cycle, "not configured" and an illegal code.
fn profile_event(org: i64, at: DateTime<Utc>) -> ReferenceEvent {
    let cycle = match org % 10 {
        0 | 1 | 7 => "MONTHLY",
        2 => "MONTH_PAY_PREVIOUS_MONTH",
        3 => "QUARTERLY",
        4 => "HALF_YEARLY",
        5 => "RECORD_WAY_COMPOSITE",
        6 => "SHARE_RULE_COMPOSITE",
        8 => {
            return ReferenceEvent::PartnerProfileNotConfigured {
                partner_org_id: org,
                recorded_at: at,
            }
        }
        _ => "WEEKLY",
    };
    ReferenceEvent::PartnerProfileConfigured {
        partner_org_id: org,
        payment_cycle: cycle.to_owned(),
        config_version: 1,
        recorded_at: at,
    }
}

fn station_facts(station_id: i64, k: u64, at: DateTime<Utc>) -> ReferenceEvent {
    ReferenceEvent::StationFactsRecorded {
        station_id,
        record_way: Some(if k.is_multiple_of(2) {
            RecordWayCode::NaturalPerson
        } else {
            RecordWayCode::NonNaturalPerson
        }),
        share_rule: Some(ShareRuleFact {
            rent_pay_method: ["MONTHLY", "QUARTERLY", "HALF_YEARLY"][(k % 3) as usize].to_owned(),
            change_type: None,
            latest_generated_bill_month: None,
        }),
        recorded_at: at,
    }
}

/// Id counters of the seed.
#[derive(Default)]
struct Ids {
    order: i64,
    result: i64,
}

impl Ids {
    fn order(&mut self) -> i64 {
        self.order += 1;
        self.order
    }

    fn result(&mut self) -> i64 {
        self.result += 1;
        self.result
    }
}

/// Seed reference data, the main set month by month, then the refresh account;
/// returns the station-months seeded.
async fn seed(seeder: &mut Seeder, o: &Options, deadline: Instant) -> anyhow::Result<(u64, Ids)> {
    let first = month_start(FIRST_MONTH, 0);
    let last = yyyymm(month_start(FIRST_MONTH, o.months - 1));
    let t0 = at(first, -30, 0);
    let r = |id: String| Stream::new(REFERENCE_AGGREGATE_TYPE, id);

    // The account route first: it touches every station-month.
    let mut s = r("account_route".into());
    seeder.push(
        &mut s,
        ReferenceEvent::AccountRouteSet {
            route: AccountRouteCode::Platform,
            recorded_at: t0,
        },
    )?;
    seeder.unit(vec![s]).await?;
    for org in 1..=o.stations.div_ceil(ORG_STATIONS) as i64 {
        let mut s = r(format!("partner_profile:{org}"));
        seeder.push(&mut s, profile_event(org, t0))?;
        seeder.unit(vec![s]).await?;
    }
    for k in 0..o.stations {
        let st = station(k);
        let mut streams = Vec::new();
        let mut s = r(format!("customer_account:{}", st.customer_account));
        seeder.push(
            &mut s,
            ReferenceEvent::CustomerAccountRecorded {
                account_id: st.customer_account,
                income_start_month: yyyymm(first),
                current_payable_cutoff_month: Some(last.clone()),
                recorded_at: t0,
            },
        )?;
        streams.push(s);
        let mut s = r(format!("partner_account:{}", st.partner_account));
        seeder.push(
            &mut s,
            ReferenceEvent::PartnerAccountRecorded {
                partner_account_id: st.partner_account,
                partner_org_id: st.org,
                platform_station_id: st.platform,
                recorded_at: t0,
            },
        )?;
        streams.push(s);
        let mut s = r(format!("station:{}", st.id));
        seeder.push(&mut s, station_facts(st.id, k, t0))?;
        streams.push(s);
        // One opening paid balance per platform station at most (the platform key
        // must find one), on every fifth group.
        if k.is_multiple_of(20) {
            let mut s = r(format!("opening_paid:{}", st.id));
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
            let mut s = r(format!("opening_deduction:{}", st.id));
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
        seeder.unit(streams).await?;
    }

    let mut ids = Ids::default();
    let mut station_months = 0u64;
    for m in 0..o.months {
        anyhow::ensure!(
            Instant::now() < deadline,
            "--max-secs reached while seeding month {m}"
        );
        let month = month_start(FIRST_MONTH, m);
        for chunk_start in (0..o.stations).step_by(CHUNK_STATIONS as usize) {
            let stations: Vec<u64> =
                (chunk_start..(chunk_start + CHUNK_STATIONS).min(o.stations)).collect();
            let org = chunk_start / ORG_STATIONS;
            let kind = order_kind(m, org, chunk_start % ORG_STATIONS / CHUNK_STATIONS);
            let streams = station_month_unit(seeder, &mut ids, &stations, m, month, kind)?;
            station_months += stations.len() as u64;
            seeder.unit(streams).await?;
        }
    }
    station_months += seed_account(seeder, &mut ids, o.account_months).await?;
    seeder.flush().await?;
    Ok((station_months, ids))
}

/// One more month (the month after the main set) for the first `stations` stations:
/// what the live projector meets at the head. Returns the events seeded.
async fn seed_live_month(
    seeder: &mut Seeder,
    ids: &mut Ids,
    o: &Options,
    stations: u64,
) -> anyhow::Result<u64> {
    let before = seeder.total;
    let m = o.months;
    let month = month_start(FIRST_MONTH, m);
    for chunk_start in (0..stations.min(o.stations)).step_by(CHUNK_STATIONS as usize) {
        let chunk: Vec<u64> = (chunk_start..(chunk_start + CHUNK_STATIONS).min(stations)).collect();
        let org = chunk_start / ORG_STATIONS;
        let kind = order_kind(m, org, chunk_start % ORG_STATIONS / CHUNK_STATIONS);
        let streams = station_month_unit(seeder, ids, &chunk, m, month, kind)?;
        seeder.unit(streams).await?;
    }
    seeder.flush().await?;
    Ok(seeder.total - before)
}

/// One line of a payment order: the station-month it pays.
struct LineOf {
    line_id: i64,
    station: Station,
    /// Per-line spread (0..100).
    r: u64,
    pre_rent: i64,
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

#[allow(clippy::too_many_arguments)]
fn result(
    result_id: i64,
    line: Option<(i64, i64)>,
    st: &Station,
    ym: &str,
    status: ResultStatusCode,
    source: ResultSourceCode,
    amount: i64,
    t: DateTime<Utc>,
) -> PaymentResultEvent {
    let fail = status == ResultStatusCode::PayFail;
    PaymentResultEvent::PaymentResultRecorded {
        result_id,
        order_id: line.map(|l| l.0),
        line_id: line.map(|l| l.1),
        small_station_id: st.id,
        platform_station_id: st.platform,
        partner_org_id: Some(st.org),
        month: ym.to_owned(),
        status,
        kind: ResultTypeCode::NormalPayment,
        source,
        amount_minor: amount,
        paid_at: (!fail).then_some(t),
        fail_reason: fail.then(|| "bank rejected".to_owned()),
        trigger_source: if source == ResultSourceCode::OfflineImport {
            TriggerSource::PaymentImportEffective
        } else {
            TriggerSource::TreasuryResultWriteback
        },
        recorded_at: t,
    }
}

/// The order of one chunk-month and its locks and results, as the service records a
/// payment order's life: created, lines, submitted, published, reviewed, paid.
fn order_streams(
    seeder: &mut Seeder,
    ids: &mut Ids,
    streams: &mut Vec<Stream>,
    lines: &[LineOf],
    ym: &str,
    month: NaiveDate,
    kind: OrderKind,
) -> anyhow::Result<()> {
    use PaymentOrderEvent as E;
    let order_id = ids.order();
    let t = |day: i64, secs: i64| at(month, day, secs);
    let mut o = Stream::new(PAYMENT_ORDER_AGGREGATE_TYPE, order_id.to_string());
    let actor = || "bench".to_owned();
    seeder.push(
        &mut o,
        E::PaymentOrderCreated {
            order_id,
            treasury: true,
            actor: actor(),
            created_at: t(33, 0),
        },
    )?;
    let line_kind = if kind == OrderKind::Unqualified {
        LineKindCode::Unqualified
    } else {
        LineKindCode::Payable
    };
    for l in lines {
        seeder.push(
            &mut o,
            E::LineAdded {
                order_id,
                line_id: l.line_id,
                station_id: l.station.id,
                month: ym.to_owned(),
                kind: line_kind,
                planned_amount_minor: l.pre_rent,
                at: t(33, 1),
            },
        )?;
    }
    seeder.push(
        &mut o,
        E::PaymentOrderSubmitted {
            order_id,
            submit_round: 1,
            actor: actor(),
            at: t(33, 2),
        },
    )?;
    seeder.push(
        &mut o,
        E::PaymentOrderPublished {
            order_id,
            publish_version: 1,
            submit_round: 1,
            line_ids: lines.iter().map(|l| l.line_id).collect(),
            at: t(33, 3),
        },
    )?;
    let approved = !matches!(kind, OrderKind::InReview | OrderKind::Rejected);
    if kind == OrderKind::Rejected {
        seeder.push(
            &mut o,
            E::PaymentOrderRejected {
                order_id,
                actor: actor(),
                reason: "amounts disputed".into(),
                at: t(34, 0),
            },
        )?;
    }
    if approved {
        seeder.push(
            &mut o,
            E::PaymentOrderApproved {
                order_id,
                planned: if line_kind == LineKindCode::Payable {
                    lines
                        .iter()
                        .map(|l| PlannedAmount {
                            line_id: l.line_id,
                            planned_amount_minor: l.pre_rent,
                        })
                        .collect()
                } else {
                    Vec::new()
                },
                actor: actor(),
                at: t(34, 0),
            },
        )?;
    }
    let mut locks = Vec::new();
    if matches!(
        kind,
        OrderKind::InReview | OrderKind::Rejected | OrderKind::AwaitingUnderLock
    ) {
        for l in lines {
            let mut s = Stream::new(BILL_LOCK_AGGREGATE_TYPE, format!("{}:{ym}", l.station.id));
            seeder.push(
                &mut s,
                BillLockEvent::BillLockReserved {
                    lock_id: l.line_id,
                    station_id: l.station.id,
                    month: ym.to_owned(),
                    order_id,
                    line_id: l.line_id,
                    publish_version: 1,
                    submit_round: 1,
                    at: t(33, 3),
                },
            )?;
            if kind == OrderKind::AwaitingUnderLock {
                seeder.push(
                    &mut s,
                    BillLockEvent::BillLockActivated {
                        lock_id: l.line_id,
                        at: t(34, 0),
                    },
                )?;
            }
            locks.push(s);
        }
    }
    let mut results = Vec::new();
    match kind {
        OrderKind::Paid => {
            let mut any_paid = false;
            for l in lines {
                // Per line: 5 % partial, 5 % failed, 5 % paid then voided, 5 % partial
                // then failed, 5 % overpaid, the rest paid in full.
                use ResultStatusCode::{PayFail, PaySuccess};
                let outcomes: &[(ResultStatusCode, i64)] = match l.r % 20 {
                    0 => &[(PaySuccess, l.pre_rent / 2)],
                    1 => &[(PayFail, 0)],
                    2 => &[(PaySuccess, l.pre_rent)],
                    3 => &[(PaySuccess, l.pre_rent / 2), (PayFail, 0)],
                    4 => &[(PaySuccess, l.pre_rent + 1_000)],
                    _ => &[(PaySuccess, l.pre_rent)],
                };
                for (n, (status, amount)) in outcomes.iter().enumerate() {
                    let result_id = ids.result();
                    let paid_at = t(40, n as i64);
                    let mut s = Stream::new(PAYMENT_RESULT_AGGREGATE_TYPE, result_id.to_string());
                    seeder.push(
                        &mut s,
                        result(
                            result_id,
                            Some((order_id, l.line_id)),
                            &l.station,
                            ym,
                            *status,
                            ResultSourceCode::Treasury,
                            *amount,
                            paid_at,
                        ),
                    )?;
                    let line_status = match (status, l.r % 20, n) {
                        (PayFail, _, _) => LineStatusCode::Failed,
                        (_, 0, _) | (_, 3, _) => LineStatusCode::PartiallyPaid,
                        _ => LineStatusCode::Paid,
                    };
                    any_paid |= *status == PaySuccess;
                    seeder.push(
                        &mut o,
                        E::LineResultWritten {
                            order_id,
                            line_id: l.line_id,
                            result_id,
                            line_status,
                            paid_amount_minor: *amount,
                            paid_at: (*status == PaySuccess).then_some(paid_at),
                            fail_reason: (*status == PayFail).then(|| "bank rejected".into()),
                            trigger_source: TriggerSource::TreasuryResultWriteback,
                            at: paid_at,
                        },
                    )?;
                    if l.r % 20 == 2 {
                        seeder.push(
                            &mut s,
                            PaymentResultEvent::PaymentResultVoided {
                                result_id,
                                trigger_source: TriggerSource::PaymentImportDelete,
                                voided_at: t(41, 0),
                            },
                        )?;
                    }
                    results.push(s);
                }
            }
            if any_paid {
                seeder.push(
                    &mut o,
                    E::PaymentOrderStatusReconciled {
                        order_id,
                        from: OrderStatusCode::WaitPay,
                        to: OrderStatusCode::Paid,
                        publish_version: 1,
                        submit_round: 1,
                        trigger_source: TriggerSource::TreasuryResultWriteback,
                        at: t(42, 0),
                    },
                )?;
            }
        }
        OrderKind::Voided => {
            seeder.push(
                &mut o,
                E::PaymentOrderVoided {
                    order_id,
                    actor: actor(),
                    reason: "paid elsewhere".into(),
                    at: t(35, 0),
                },
            )?;
        }
        OrderKind::Unqualified => {
            for l in lines {
                seeder.push(
                    &mut o,
                    E::UnqualifiedConcluded {
                        order_id,
                        line_id: l.line_id,
                        partner_visible: l.r.is_multiple_of(2),
                        reason: "contract missing".into(),
                        actor: actor(),
                        at: t(35, 0),
                    },
                )?;
            }
        }
        _ => {}
    }
    streams.push(o);
    streams.extend(locks);
    streams.extend(results);
    Ok(())
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
    let r = |id: String| Stream::new(REFERENCE_AGGREGATE_TYPE, id);
    let mut streams = Vec::new();
    // The account's own org is MONTHLY: the account's cutoff caps the rent sum.
    let mut s = r(format!("partner_profile:{}", st.org));
    seeder.push(
        &mut s,
        ReferenceEvent::PartnerProfileConfigured {
            partner_org_id: st.org,
            payment_cycle: "MONTHLY".into(),
            config_version: 1,
            recorded_at: t0,
        },
    )?;
    streams.push(s);
    let mut s = r(format!("customer_account:{}", st.customer_account));
    seeder.push(
        &mut s,
        ReferenceEvent::CustomerAccountRecorded {
            account_id: st.customer_account,
            income_start_month: yyyymm(first),
            current_payable_cutoff_month: Some(yyyymm(month_start(
                ACCOUNT_FIRST_MONTH,
                months - 1,
            ))),
            recorded_at: t0,
        },
    )?;
    streams.push(s);
    let mut s = r(format!("partner_account:{}", st.partner_account));
    seeder.push(
        &mut s,
        ReferenceEvent::PartnerAccountRecorded {
            partner_account_id: st.partner_account,
            partner_org_id: st.org,
            platform_station_id: st.platform,
            recorded_at: t0,
        },
    )?;
    streams.push(s);
    let mut s = r(format!("station:{}", st.id));
    seeder.push(&mut s, station_facts(st.id, 0, t0))?;
    streams.push(s);
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

// ---------------------------------------------------------------------------------
// Measuring.

async fn checkpoint(db: &factledger::infra::db::Db) -> anyhow::Result<i64> {
    Ok(db.checkpoint("bill", 1).await?)
}

/// Print the catch-up's rate every [`SAMPLE_SECS`]: a rate that falls as the log
/// advances means later events cost more (work grows with history).
async fn sample_progress(db: factledger::infra::db::Db, total: u64) {
    let mut last = (Instant::now(), 0i64);
    loop {
        tokio::time::sleep(Duration::from_secs(SAMPLE_SECS)).await;
        let Ok(p) = checkpoint(&db).await else {
            continue;
        };
        let now = Instant::now();
        let rate = (p - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
        eprintln!(
            "catch-up: position {p} of {total} ({:.1} %), {rate:.0} events/s over the last {SAMPLE_SECS} s",
            p as f64 * 100.0 / total.max(1) as f64
        );
        last = (now, p);
    }
}

/// Server-wide statement and row counters (MariaDB; other clients of the server add
/// to them, so they are an upper bound).
async fn server_status(db: &factledger::infra::db::Db) -> BTreeMap<String, i64> {
    let factledger::infra::db::Db::Mysql(pool) = db else {
        return BTreeMap::new();
    };
    let sql = "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select', 'Com_delete', \
               'Com_update', 'Com_insert', 'Com_replace', 'Innodb_rows_read', \
               'Handler_read_rnd_next', 'Handler_read_next', 'Handler_read_key')";
    match sqlx::query(sql).fetch_all(pool).await {
        Ok(rows) => rows
            .iter()
            .filter_map(|r| {
                let name: String = r.try_get(0).ok()?;
                let value: String = r.try_get(1).ok()?;
                Some((name, value.parse().ok()?))
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

fn print_status_delta(
    before: &BTreeMap<String, i64>,
    after: &BTreeMap<String, i64>,
    events: u64,
    station_months: u64,
) {
    if after.is_empty() {
        return;
    }
    println!("| server counter (global, during the catch-up) | delta | per event |");
    println!("|---|---|---|");
    for (name, a) in after {
        let d = a - before.get(name).copied().unwrap_or(0);
        println!("| {name} | {d} | {:.1} |", d as f64 / events.max(1) as f64);
    }
    // Every recomputation of a station-month deletes from four tables.
    let deletes = after.get("Com_delete").copied().unwrap_or(0)
        - before.get("Com_delete").copied().unwrap_or(0);
    // Each recomputed chunk (≤ 256 station-months) deletes from 4 tables once.
    println!(
        "recomputed chunks ≈ Com_delete / 4 = {} for {station_months} station-months",
        deletes / 4
    );
}

async fn table_counts(db: &factledger::infra::db::Db) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let factledger::infra::db::Db::Mysql(pool) = db else {
        anyhow::bail!("the bill bench runs on MariaDB/MySQL");
    };
    let mut out = Vec::new();
    for t in [
        "fi_customer_bill",
        "fi_customer_bill_partner",
        "fi_monthly_income_difference",
        "bill_decisions",
        "bill_decision_findings",
    ] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {t}"))
            .fetch_one(pool)
            .await?;
        out.push((t, n as u64));
    }
    Ok(out)
}

async fn print_distribution(db: &factledger::infra::db::Db) -> anyhow::Result<()> {
    let factledger::infra::db::Db::Mysql(pool) = db else {
        return Ok(());
    };
    println!("| payment_status (fi_customer_bill) | rows |");
    println!("|---|---|");
    let rows = sqlx::query(
        "SELECT CAST(payment_status AS CHAR), COUNT(*) FROM fi_customer_bill \
         GROUP BY payment_status ORDER BY payment_status",
    )
    .fetch_all(pool)
    .await?;
    for r in rows {
        let status: Option<String> = r.try_get(0)?;
        let n: i64 = r.try_get(1)?;
        println!(
            "| {} | {n} |",
            status.as_deref().unwrap_or("NULL (finding)")
        );
    }
    println!("| partner_query_status (fi_customer_bill_partner) | rows |");
    println!("|---|---|");
    let rows = sqlx::query(
        "SELECT CAST(partner_query_status AS CHAR), COUNT(*) FROM fi_customer_bill_partner \
         GROUP BY partner_query_status ORDER BY partner_query_status",
    )
    .fetch_all(pool)
    .await?;
    for r in rows {
        let status: Option<String> = r.try_get(0)?;
        let n: i64 = r.try_get(1)?;
        println!(
            "| {} | {n} |",
            status.as_deref().unwrap_or("NULL (undecided)")
        );
    }
    Ok(())
}

/// `rebuild_account` of the 120-month account, `--refresh-runs` times (bounded by the
/// deadline); also its two halves, resolving and recomputing, once each.
async fn refresh_latency(
    db: &factledger::infra::db::Db,
    o: &Options,
    deadline: Instant,
) -> anyhow::Result<()> {
    let account = Account::Small(ACCOUNT_CUSTOMER);
    let t = Instant::now();
    let sms = bill_projection::station_months_of_account(db, account).await?;
    let resolve_ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(
        sms.len() as u64 == o.account_months,
        "the account resolves to {} station-months, want {}",
        sms.len(),
        o.account_months
    );
    let t = Instant::now();
    bill_projection::recompute_station_months(db, &sms).await?;
    let recompute_ms = t.elapsed().as_secs_f64() * 1000.0;
    let mut ms = Vec::new();
    for _ in 0..o.refresh_runs {
        if Instant::now() >= deadline {
            break;
        }
        let t = Instant::now();
        let n = bill_projection::rebuild_account(db, account).await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            n as u64 == o.account_months,
            "rebuild_account recomputed {n}"
        );
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        ms.get(((ms.len() as f64 * p) as usize).min(ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "| scoped refresh | station-months | runs | p50 ms | p99 ms | max ms | resolve ms (once) | recompute_station_months ms (once) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| rebuild_account(Small({ACCOUNT_CUSTOMER})) | {} | {} | {:.1} | {:.1} | {:.1} | {resolve_ms:.1} | {recompute_ms:.1} |",
        sms.len(),
        ms.len(),
        pct(0.50),
        pct(0.99),
        ms.last().copied().unwrap_or(0.0),
    );
    Ok(())
}
