//! Paid services as a property (issue 18): a seeded generator (xorshift: a failing
//! seed replays exactly, `FACTLEDGER_SERVICES_SEED` picks another) drives fans 1–6
//! and artists 101–103 through the service in random order: recharges paid by the
//! gateway simulator's signed callbacks (plain, duplicated, delivered by the
//! compensation job, or left paid-undelivered for the delivery scan), bookings
//! (some priced above the balance: refused, nothing written), joins by either
//! party, starts, finishes (two at once, or racing a moderation), moderation, the
//! no-show scan at a future instant, the refund scan, the delivery scan, the
//! moderation repair scan, and a pay callback after the timeout close. Crashes:
//! a services unit run on a store whose next append fails after writing some of
//! the unit's streams (the store's `fail_after_streams` hook: the unit is torn
//! mid-write and rolled back), and lost follow-ups (injected delivery and enqueue
//! failures) that only a scan repairs.
//!
//! After EVERY step, once the due jobs ran: the candy identities of the
//! reconciliation check hold (and equal the totals a model of the successful
//! operations expects), no job failed, every fan's balance and held candy are ≥ 0
//! and equal the model on the projection (and on the stream, for the fans whose
//! candy moved; every fan at the end), and each booking touched reads the status and
//! hold the model expects. At the end, after the scans took up every
//! stuck item: every refund succeeded, and the journal's trial balance is zero in
//! ZZC and CNY. Bounded: `STEPS` steps and `WALL_MAX` per backend.

use crate::common::hooked_store::{AppendHook, HookedStore};
use crate::common::{meta, scalar, Rng, TestDb};
use crate::services_env::ServicesEnv;
use async_trait::async_trait;
use chrono::{Duration, Utc};
use factledger::infra::store::{CommittedUnit, DynStore, StoreError, UnitOfWork};
use factledger::runtime::bus::load;
use factledger::runtime::unit::UnitError;
use factledger::services::scans::{Scan, ScanReport};
use factledger::services::{flow, units, Ctx};
use factledger_aggregates::booking::{BookCall, Booking, HoldState};
use factledger_aggregates::candy::CandyAccount;
use factledger_aggregates::services::UserId;
use payout_sim::gateway::GatewayFault;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const STEPS: u64 = 150;
/// Wall-clock cap of the random steps of one backend (the end checks follow).
const WALL_MAX: std::time::Duration = std::time::Duration::from_secs(180);
/// Longest wait for the due jobs to run after a step.
const DRAIN_MAX: std::time::Duration = std::time::Duration::from_secs(30);
const SEED_DEFAULT: u64 = 0x5EED_001A;
const SEED_ENV: &str = "FACTLEDGER_SERVICES_SEED";
const FANS: [i64; 6] = [1, 2, 3, 4, 5, 6];
const ARTISTS: [i64; 3] = [101, 102, 103];

fn seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(s) => {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            }
            .unwrap_or_else(|e| panic!("{SEED_ENV}={s}: {e}"))
        }
        Err(_) => SEED_DEFAULT,
    }
}

// -----------------------------------------------------------------------------------
// The crash: a store whose next append is torn after some of the unit's streams.

/// The store of the crash steps: armed, its next append (after `skip` others) goes
/// to the real store with `fail_after_streams` set, so the store writes that many of
/// the unit's streams and fails before the commit — a process dying mid-unit.
struct CrashingStore {
    skip: AtomicUsize,
    /// Streams written before the failure; 0: not armed.
    after: AtomicUsize,
    fired: AtomicUsize,
}

impl CrashingStore {
    fn arm(&self, skip: usize, after: usize) {
        self.fired.store(0, Ordering::SeqCst);
        self.skip.store(skip, Ordering::SeqCst);
        self.after.store(after.max(1), Ordering::SeqCst);
    }

    /// Disarm; whether the crash happened.
    fn disarm(&self) -> bool {
        self.after.store(0, Ordering::SeqCst);
        self.fired.swap(0, Ordering::SeqCst) > 0
    }
}

#[async_trait]
impl AppendHook for CrashingStore {
    async fn append(
        &self,
        inner: &DynStore,
        units: &[UnitOfWork],
    ) -> Result<Vec<CommittedUnit>, StoreError> {
        let after = self.after.load(Ordering::SeqCst);
        if after == 0 || units.is_empty() {
            return inner.append(units).await;
        }
        if self
            .skip
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return inner.append(units).await;
        }
        self.after.store(0, Ordering::SeqCst);
        let mut torn = units.to_vec();
        let streams = torn[0].streams.len();
        torn[0].fail_after_streams = Some(after.min(streams));
        let out = inner.append(&torn).await;
        assert!(
            matches!(out, Err(StoreError::Injected(_))),
            "the torn unit was not refused by the store: {out:?}"
        );
        self.fired.fetch_add(1, Ordering::SeqCst);
        out
    }
}

/// (candidates, acted, failed) of a scan.
fn counts(r: &ScanReport) -> (usize, usize, u32) {
    (r.candidates as usize, r.acted as usize, r.failed)
}

// -----------------------------------------------------------------------------------
// The model.

/// Where the model expects a booking's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Open,
    Settled,
    Forfeited,
    RefundDue,
    Refunded,
}

impl Hold {
    fn name(self) -> &'static str {
        match self {
            Hold::Open => "OPEN",
            Hold::Settled => "SETTLED",
            Hold::Forfeited => "FORFEITED",
            Hold::RefundDue => "REFUND_DUE",
            Hold::Refunded => "REFUNDED",
        }
    }
}

#[derive(Debug, Clone)]
struct Bk {
    no: String,
    fan: i64,
    price: i64,
    /// The booking status code (0 pending … 7 both no-show).
    status: i64,
    fan_joined: bool,
    artist_joined: bool,
    flagged: bool,
    hold: Hold,
}

/// A paid order the model expects the delivery scan to deliver.
#[derive(Debug, Clone)]
enum Undelivered {
    Recharge {
        order_no: String,
        fan: i64,
        candy: i64,
    },
    Booking {
        order_no: String,
        idx: usize,
    },
}

impl Undelivered {
    fn order_no(&self) -> &str {
        match self {
            Undelivered::Recharge { order_no, .. } | Undelivered::Booking { order_no, .. } => {
                order_no
            }
        }
    }
}

struct World {
    env: ServicesEnv,
    crash: Arc<HookedStore<CrashingStore>>,
    rng: Rng,
    /// (balance, held) per fan.
    candy: BTreeMap<i64, (i64, i64)>,
    /// Σ candy of delivered recharges.
    issued: i64,
    bookings: Vec<Bk>,
    undelivered: Vec<Undelivered>,
    /// Cash refunds of late payments (R-REF-1): sent by their job, the gateway
    /// answers PROCESSING (REFUNDING here) until the refund scan's query finds it
    /// SUCCEEDED; a refund whose job was lost stays PENDING until the refund scan
    /// sends it.
    refunds_pending: Vec<String>,
    refunds_refunding: Vec<String>,
    refunds_done: Vec<String>,
    /// `refunds_done` read SUCCEEDED already.
    refunds_checked: usize,
    touched: Vec<usize>,
    /// Fans whose candy moved since the last check (their streams are read).
    moved: BTreeSet<i64>,
    n: u64,
    mix: BTreeMap<&'static str, u64>,
}

impl World {
    fn count(&mut self, kind: &'static str) {
        *self.mix.entry(kind).or_default() += 1;
    }

    fn next(&mut self, prefix: &str) -> String {
        self.n += 1;
        format!("{prefix}{}", self.n)
    }

    fn fan(&mut self) -> i64 {
        FANS[self.rng.below(FANS.len() as u64) as usize]
    }

    fn artist(&mut self) -> i64 {
        ARTISTS[self.rng.below(ARTISTS.len() as u64) as usize]
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.rng.below(one_in) == 0
    }

    /// Streams a torn unit writes before failing: 1 to `max`.
    fn torn_after(&mut self, max: u64) -> usize {
        1 + self.rng.below(max) as usize
    }

    fn pick(&mut self, want: impl Fn(&Bk) -> bool) -> Option<usize> {
        let fit: Vec<usize> = (0..self.bookings.len())
            .filter(|&i| want(&self.bookings[i]))
            .collect();
        if fit.is_empty() {
            return None;
        }
        Some(fit[self.rng.below(fit.len() as u64) as usize])
    }

    /// A booking fit for `want`; one time in six any booking (the refusals).
    fn pick_mostly(&mut self, want: impl Fn(&Bk) -> bool) -> Option<usize> {
        if self.chance(6) {
            return self.pick(|_| true);
        }
        self.pick(want)
    }

    fn faults(&self, delivery: u32, enqueue: u32) {
        let f = &self.env.services.faults;
        f.delivery.store(delivery, Ordering::SeqCst);
        f.enqueue.store(enqueue, Ordering::SeqCst);
    }

    /// The faults not taken, then none armed.
    fn faults_left(&self) -> (u32, u32) {
        let f = &self.env.services.faults;
        (
            f.delivery.swap(0, Ordering::SeqCst),
            f.enqueue.swap(0, Ordering::SeqCst),
        )
    }

    /// The services' context on the crashing store.
    fn crash_ctx(&self) -> Ctx {
        let state = &self.env.app.state;
        Ctx::with_engine(
            self.crash.clone(),
            state.db.clone(),
            &state.jobs,
            self.env.services.clone(),
            &state.config.country_code,
        )
    }

    fn balance(&self, fan: i64) -> (i64, i64) {
        self.candy.get(&fan).copied().unwrap_or((0, 0))
    }

    fn moves(&mut self, fan: i64, d_balance: i64, d_held: i64) {
        let e = self.candy.entry(fan).or_insert((0, 0));
        e.0 += d_balance;
        e.1 += d_held;
        self.moved.insert(fan);
    }

    fn credit(&mut self, fan: i64, candy: i64) {
        self.moves(fan, candy, 0);
        self.issued += candy;
    }

    /// A booking's hold closes: settled or forfeited (out of held), or refunded
    /// (back to the balance).
    fn close_hold(&mut self, idx: usize, to: Hold) {
        let (fan, price) = (self.bookings[idx].fan, self.bookings[idx].price);
        match to {
            Hold::Settled | Hold::Forfeited => self.moves(fan, 0, -price),
            Hold::Refunded => self.moves(fan, price, -price),
            Hold::Open | Hold::RefundDue => {}
        }
        self.bookings[idx].hold = to;
        self.touched.push(idx);
    }

    async fn act(&self, idx: usize, action: &str, body: Value) -> (u16, Value) {
        self.env.action(&self.bookings[idx].no, action, body).await
    }

    fn refused(status: u16, body: &Value, what: &str) {
        assert_eq!(status, 409, "{what}: {body}");
        assert_eq!(body["code"], "BOOKING_STATUS_CONFLICT", "{what}: {body}");
    }

    // -- the steps ----------------------------------------------------------------

    async fn fund(&mut self) {
        let fan = self.fan();
        let candy = 100 * (20 + self.rng.below(101) as i64);
        let order_no = self.next("R");
        self.env.recharge_order(&order_no, fan, candy).await;
        let variant = self.rng.below(6);
        match variant {
            1 => self
                .env
                .sim
                .gateway()
                .add_fault(&order_no, GatewayFault::DuplicateCallback)
                .unwrap(),
            // The inline delivery fails: its job delivers.
            2 => self.faults(1, 0),
            // The delivery fails and its job is lost: paid, not delivered.
            3 => self.faults(1, 1),
            _ => {}
        }
        let paid = self.env.pay(&order_no, candy, "CNY").await;
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        assert_eq!(self.faults_left(), (0, 0), "every fault was taken");
        match variant {
            1 => self.count("fund_duplicate_callback"),
            2 => self.count("fund_delivered_by_job"),
            3 => {
                self.undelivered.push(Undelivered::Recharge {
                    order_no,
                    fan,
                    candy,
                });
                self.count("fund_left_undelivered");
                return;
            }
            _ => self.count("fund"),
        }
        self.credit(fan, candy);
        if variant == 4 {
            // Paid a second time: that payment is owed back in cash.
            let again = self.env.pay(&order_no, candy, "CNY").await;
            let txn = again["payment"]["transaction_no"].as_str().unwrap();
            self.refunds_refunding
                .push(units::orders::late_refund_no(txn));
            self.count("fund_paid_twice");
        }
    }

    async fn book(&mut self) {
        let fan = self.fan();
        let artist = self.artist();
        let (balance, _) = self.balance(fan);
        let price = if self.chance(4) {
            balance + 100 * (1 + self.rng.below(20) as i64)
        } else {
            100 * (5 + self.rng.below(26) as i64)
        };
        let enough = price <= balance;
        let no = self.next("B");
        let start_at = Utc::now() + Duration::minutes(5);
        if self.chance(5) {
            // Torn mid-unit (order, booking, candy): nothing of it may remain, so the
            // same booking number books afresh below.
            let call = BookCall {
                booking_no: no.clone(),
                order_no: format!("BKO-{no}"),
                fan_user_id: UserId::parse(fan).unwrap(),
                artist_id: UserId::parse(artist).unwrap(),
                start_at,
                minutes: 30,
                price_candy: price,
                at: Utc::now(),
            };
            let after = self.torn_after(3);
            self.crash.arm(0, after);
            let store: DynStore = self.crash.clone();
            let out = units::bookings::book(
                &store,
                &meta(),
                call,
                Utc::now() + Duration::minutes(15),
                None,
            )
            .await;
            let fired = self.crash.disarm();
            if enough {
                assert!(fired, "the booking unit was not torn");
                assert!(matches!(out, Err(UnitError::Store(_))), "{out:?}");
                self.count("crash_book");
            } else {
                assert!(
                    !fired && matches!(out, Err(UnitError::Refused(_))),
                    "{out:?}"
                );
            }
        }
        // Sometimes the activation is lost (delivery failed, its job not queued).
        let lost = enough && self.chance(8);
        if lost {
            self.faults(1, 1);
        }
        let head = self.env.app.state.store.head_position().await.unwrap();
        let (status, body) = self
            .env
            .app
            .post(
                "/v1/bookings",
                json!({"booking_no": no, "fan_user_id": fan, "artist_id": artist,
                       "start_at": start_at.to_rfc3339(), "minutes": 30, "price_candy": price}),
            )
            .await;
        if !enough {
            assert!(matches!(status, 409 | 422), "{status} {body}");
            assert_eq!(body["code"], "INSUFFICIENT_CANDY", "{body}");
            assert_eq!(
                self.env.app.state.store.head_position().await.unwrap(),
                head,
                "a refused booking wrote nothing"
            );
            let (status, _) = self.env.app.get(&format!("/v1/bookings/{no}")).await;
            assert_eq!(status, 404, "a refused booking does not exist");
            self.count("book_refused");
            return;
        }
        assert_eq!(status, 201, "{body}");
        assert_eq!(self.faults_left(), (0, 0));
        self.moves(fan, -price, price);
        self.bookings.push(Bk {
            no: no.clone(),
            fan,
            price,
            status: if lost { 0 } else { 1 },
            fan_joined: false,
            artist_joined: false,
            flagged: false,
            hold: Hold::Open,
        });
        let idx = self.bookings.len() - 1;
        self.touched.push(idx);
        if lost {
            self.undelivered.push(Undelivered::Booking {
                order_no: format!("BKO-{no}"),
                idx,
            });
            self.count("book_activation_lost");
        } else {
            self.count("book");
        }
    }

    async fn join(&mut self) {
        let Some(idx) =
            self.pick_mostly(|b| matches!(b.status, 1 | 2) && !(b.fan_joined && b.artist_joined))
        else {
            return self.fund().await;
        };
        let b = self.bookings[idx].clone();
        self.touched.push(idx);
        let joinable = matches!(b.status, 1..=3);
        if joinable && !b.fan_joined && !b.artist_joined && self.chance(3) {
            // Both parties enter the room at once.
            let (f, a) = tokio::join!(
                self.act(idx, "join", json!({"party": "FAN"})),
                self.act(idx, "join", json!({"party": "ARTIST"}))
            );
            assert_eq!((f.0, a.0), (200, 200), "{} {}", f.1, a.1);
            let m = &mut self.bookings[idx];
            (m.fan_joined, m.artist_joined, m.status) = (true, true, 2);
            self.count("join_both_at_once");
            return;
        }
        // Mostly a party not in the room yet.
        let fan = match (b.fan_joined, b.artist_joined) {
            (false, true) => !self.chance(5),
            (true, false) => self.chance(5),
            _ => self.chance(2),
        };
        let party = if fan { "FAN" } else { "ARTIST" };
        let (status, body) = self.act(idx, "join", json!({ "party": party })).await;
        if joinable {
            assert_eq!(status, 200, "join {party} in {}: {body}", b.status);
            let m = &mut self.bookings[idx];
            if fan {
                m.fan_joined = true;
            } else {
                m.artist_joined = true;
            }
            if m.status == 1 {
                m.status = 2;
            }
            self.count("join");
        } else {
            Self::refused(status, &body, "join");
            self.count("join_refused");
        }
    }

    async fn start(&mut self) {
        let Some(idx) = self.pick_mostly(|b| b.status == 2 && b.fan_joined && b.artist_joined)
        else {
            return self.join().await;
        };
        let b = self.bookings[idx].clone();
        let (status, body) = self.act(idx, "start", json!({})).await;
        self.touched.push(idx);
        let startable = b.status == 2 && b.fan_joined && b.artist_joined;
        if startable || b.status == 3 {
            assert_eq!(status, 200, "start in {}: {body}", b.status);
            self.bookings[idx].status = 3;
            self.count("start");
        } else {
            Self::refused(status, &body, "start");
            self.count("start_refused");
        }
    }

    async fn finish(&mut self) {
        let Some(idx) = self.pick_mostly(|b| b.status == 3) else {
            return self.start().await;
        };
        let b = self.bookings[idx].clone();
        let live = b.status == 3 && !b.flagged;
        if live && self.chance(3) {
            // Torn mid-unit (booking, candy): the call is still on.
            let after = self.torn_after(2);
            self.crash.arm(0, after);
            let out = flow::finish_call(&self.crash_ctx(), &b.no, Utc::now(), None).await;
            assert!(self.crash.disarm(), "the finish was not torn");
            assert!(out.is_err(), "{out:?}");
            self.count("crash_finish");
        }
        self.touched.push(idx);
        if live && self.chance(6) {
            // A finish racing a moderation: whichever lands first closes the hold.
            let (f, m) = tokio::join!(
                self.act(idx, "finish", json!({})),
                self.act(idx, "moderate", json!({"reason": "race"}))
            );
            assert_eq!(f.0, 200, "{}", f.1);
            let read = load::<Booking>(&self.env.app.state.store, &b.no)
                .await
                .unwrap()
                .state;
            let hold = match &read.hold {
                HoldState::Settled => {
                    Self::refused(m.0, &m.1, "moderate after the finish");
                    Hold::Settled
                }
                HoldState::Forfeited => {
                    assert_eq!(m.0, 200, "{}", m.1);
                    self.bookings[idx].flagged = true;
                    Hold::Forfeited
                }
                other => panic!("finish vs moderate left the hold {other:?}: {read:?}"),
            };
            self.bookings[idx].status = 4;
            self.close_hold(idx, hold);
            self.count("finish_races_moderation");
            return;
        }
        let twice = self.chance(3);
        let answers = if twice {
            let (a, b) = tokio::join!(
                self.act(idx, "finish", json!({})),
                self.act(idx, "finish", json!({}))
            );
            vec![a, b]
        } else {
            vec![self.act(idx, "finish", json!({})).await]
        };
        if b.status == 3 || b.status == 4 {
            for (status, body) in &answers {
                assert_eq!(*status, 200, "finish in {}: {body}", b.status);
            }
            if live {
                self.bookings[idx].status = 4;
                self.close_hold(idx, Hold::Settled);
            }
            self.count(if twice { "finish_twice" } else { "finish" });
        } else {
            for (status, body) in &answers {
                Self::refused(*status, body, "finish");
            }
            self.count("finish_refused");
        }
    }

    async fn moderate(&mut self) {
        let Some(idx) = self.pick_mostly(|b| b.status == 3) else {
            return self.start().await;
        };
        let b = self.bookings[idx].clone();
        self.touched.push(idx);
        if b.status == 3 && self.chance(2) {
            // The flag lands; the abort (booking, candy) is torn: a flagged call
            // still in 3, for the moderation repair scan.
            let after = self.torn_after(2);
            self.crash.arm(usize::from(!b.flagged), after);
            let out = flow::moderate(&self.crash_ctx(), &b.no, "crash", Utc::now()).await;
            assert!(self.crash.disarm(), "the abort was not torn");
            assert!(out.is_ok(), "a failed abort is the repair scan's: {out:?}");
            self.bookings[idx].flagged = true;
            self.count("crash_moderation_abort");
            return;
        }
        let (status, body) = self
            .act(idx, "moderate", json!({"reason": "violation"}))
            .await;
        if b.status == 3 || (b.status == 4 && b.flagged) {
            assert_eq!(status, 200, "moderate in {}: {body}", b.status);
            if b.status == 3 {
                self.bookings[idx].status = 4;
                self.bookings[idx].flagged = true;
                self.close_hold(idx, Hold::Forfeited);
            }
            self.count("moderate");
        } else {
            Self::refused(status, &body, "moderate");
            self.count("moderate_refused");
        }
    }

    /// The no-show scan 20 minutes ahead: every booking in 1/2 is decided.
    async fn no_show_scan(&mut self) {
        let at = Utc::now() + Duration::minutes(20);
        let due: Vec<usize> = (0..self.bookings.len())
            .filter(|&i| matches!(self.bookings[i].status, 1 | 2))
            .collect();
        if !due.is_empty() && self.chance(2) {
            let i = due[self.rng.below(due.len() as u64) as usize];
            let after = self.torn_after(2);
            self.crash.arm(0, after);
            let out = flow::no_show(&self.crash_ctx(), &self.bookings[i].no, at, None).await;
            assert!(self.crash.disarm(), "the no-show decision was not torn");
            assert!(out.is_err(), "{out:?}");
            self.count("crash_no_show");
        }
        // Sometimes every refund job of the scan is lost: the refund scan's.
        let lost = self.chance(2);
        if lost {
            self.faults(0, u32::MAX);
        }
        let report = self.env.scan(Scan::NoShow, None, at).await;
        self.faults_left();
        assert_eq!(counts(&report), (due.len(), due.len(), 0), "{report:?}");
        for i in due {
            let b = &self.bookings[i];
            let (status, hold) = match (b.fan_joined, b.artist_joined) {
                (true, false) => (5, Hold::RefundDue),
                (false, true) => (6, Hold::Settled),
                _ => (7, Hold::RefundDue),
            };
            self.bookings[i].status = status;
            let hold = if hold == Hold::RefundDue && !lost {
                Hold::Refunded
            } else {
                hold
            };
            self.close_hold(i, hold);
        }
        self.count(if lost {
            "no_show_scan_refunds_lost"
        } else {
            "no_show_scan"
        });
    }

    /// The refund scan an hour ahead: every refund left PENDING settles.
    async fn refund_scan(&mut self) {
        let at = Utc::now() + Duration::minutes(60);
        let due: Vec<usize> = (0..self.bookings.len())
            .filter(|&i| self.bookings[i].hold == Hold::RefundDue)
            .collect();
        if !due.is_empty() && self.chance(2) {
            let i = due[self.rng.below(due.len() as u64) as usize];
            let refund_no = units::bookings::no_show_refund_no(&self.bookings[i].no);
            let after = self.torn_after(3);
            self.crash.arm(0, after);
            let out = flow::run_refund(&self.crash_ctx(), &refund_no, at, None).await;
            assert!(self.crash.disarm(), "the candy refund was not torn");
            assert!(out.is_err(), "{out:?}");
            self.count("crash_refund");
        }
        let report = self.env.scan(Scan::Refund, None, at).await;
        // Candy refunds settle; REFUNDING cash ones are queried (SUCCEEDED); PENDING
        // cash ones are sent (REFUNDING: the gateway answers PROCESSING).
        let (candy, pending, refunding) = (
            due.len(),
            self.refunds_pending.len(),
            self.refunds_refunding.len(),
        );
        assert_eq!(
            counts(&report),
            (candy + pending + refunding, candy + refunding, 0),
            "{report:?}"
        );
        for i in due {
            self.close_hold(i, Hold::Refunded);
        }
        let done = std::mem::take(&mut self.refunds_refunding);
        self.refunds_done.extend(done);
        self.refunds_refunding = std::mem::take(&mut self.refunds_pending);
        self.count("refund_scan");
    }

    /// The delivery scan two minutes ahead: every paid order not delivered is.
    async fn delivery_scan(&mut self) {
        let at = Utc::now() + Duration::minutes(2);
        if !self.undelivered.is_empty() && self.chance(2) {
            let i = self.rng.below(self.undelivered.len() as u64) as usize;
            let order_no = self.undelivered[i].order_no().to_owned();
            let after = self.torn_after(2);
            self.crash.arm(0, after);
            let out = flow::deliver(&self.crash_ctx(), &order_no, at, None, false).await;
            assert!(self.crash.disarm(), "the delivery was not torn");
            assert!(out.is_err(), "{out:?}");
            self.count("crash_delivery");
        }
        let report = self.env.scan(Scan::PaymentDelivery, None, at).await;
        let n = self.undelivered.len();
        assert_eq!(counts(&report), (n, n, 0), "{report:?}");
        for u in std::mem::take(&mut self.undelivered) {
            match u {
                Undelivered::Recharge { fan, candy, .. } => self.credit(fan, candy),
                Undelivered::Booking { idx, .. } => {
                    self.bookings[idx].status = 1;
                    self.touched.push(idx);
                }
            }
        }
        self.count("delivery_scan");
    }

    /// An order closed by its timeout (the close scan 16 minutes ahead), then paid:
    /// the late payment is owed back in cash and credits nothing.
    async fn late_callback(&mut self) {
        let fan = self.fan();
        let candy = 100 * (10 + self.rng.below(41) as i64);
        let order_no = self.next("L");
        self.env.recharge_order(&order_no, fan, candy).await;
        let at = Utc::now() + Duration::minutes(16);
        let report = self.env.scan(Scan::OrderTimeoutClose, None, at).await;
        assert_eq!(
            (report.candidates, report.acted, report.failed),
            (1, 1, 0),
            "{report:?}"
        );
        if self.chance(3) {
            self.env
                .sim
                .gateway()
                .add_fault(&order_no, GatewayFault::DuplicateCallback)
                .unwrap();
        }
        let lost = self.chance(3);
        if lost {
            self.faults(0, u32::MAX);
        }
        let paid = self.env.pay(&order_no, candy, "CNY").await;
        self.faults_left();
        assert_eq!(paid["callback"]["http_status"], 200, "{paid}");
        let txn = paid["payment"]["transaction_no"].as_str().unwrap();
        let refund_no = units::orders::late_refund_no(txn);
        if lost {
            self.refunds_pending.push(refund_no);
            self.count("late_callback_refund_lost");
        } else {
            self.refunds_refunding.push(refund_no);
            self.count("late_callback");
        }
    }

    /// The moderation repair scan: flagged calls still in 3 are aborted.
    async fn moderation_repair(&mut self) {
        let due: Vec<usize> = (0..self.bookings.len())
            .filter(|&i| self.bookings[i].status == 3 && self.bookings[i].flagged)
            .collect();
        let report = self
            .env
            .scan(Scan::ModerationRepair, None, Utc::now())
            .await;
        assert_eq!(counts(&report), (due.len(), due.len(), 0), "{report:?}");
        for i in due {
            self.bookings[i].status = 4;
            self.close_hold(i, Hold::Forfeited);
        }
        self.count("moderation_repair_scan");
    }

    async fn step(&mut self) {
        match self.rng.below(19) {
            0..=2 => self.fund().await,
            3..=5 => self.book().await,
            6..=8 => self.join().await,
            9 | 10 => self.start().await,
            11 | 12 => self.finish().await,
            13 => self.moderate().await,
            14 => self.no_show_scan().await,
            15 => self.refund_scan().await,
            16 => self.delivery_scan().await,
            17 => self.late_callback().await,
            _ => self.moderation_repair().await,
        }
    }

    // -- the checks ---------------------------------------------------------------

    /// Wait until no job is running and none is due (the follow-ups of the step ran);
    /// none may have failed.
    async fn drain(&self, step: u64) {
        let db = &self.env.app.state.db;
        let deadline = Instant::now() + DRAIN_MAX;
        loop {
            let now = factledger::infra::db::now_ms();
            let busy = scalar(
                db,
                &format!(
                    "SELECT COUNT(*) FROM jobs WHERE status = 1 OR (status IN (0, 3) \
                     AND retry_count < max_retry_count AND next_execute_at_ms <= {now})"
                ),
            )
            .await;
            if busy == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "step {step}: {busy} jobs still due after {DRAIN_MAX:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let failed = scalar(db, "SELECT COUNT(*) FROM jobs WHERE status = 3").await;
        assert_eq!(failed, 0, "step {step}: a job failed");
    }

    /// After a step: see the module doc. `all` reads every fan's stream too (else
    /// only those whose candy moved).
    async fn check(&mut self, step: u64, all: bool) {
        self.drain(step).await;
        let t = self.env.conserved().await;
        let holds: i64 = self.bookings.iter().map(|b| b.price).sum();
        let refunded: i64 = self
            .bookings
            .iter()
            .filter(|b| b.hold == Hold::Refunded)
            .map(|b| b.price)
            .sum();
        let open: i64 = self
            .bookings
            .iter()
            .filter(|b| matches!(b.hold, Hold::Open | Hold::RefundDue))
            .map(|b| b.price)
            .sum();
        assert_eq!(
            (t.issued, t.holds, t.refunded, t.open_holds),
            (self.issued, holds, refunded, open),
            "step {step}: totals (issued, holds, refunded, open holds) {t:?}"
        );
        for fan in FANS {
            let read = self.env.candy(fan).await;
            assert!(
                read.0 >= 0 && read.1 >= 0,
                "step {step}: fan {fan} below zero: {read:?}"
            );
            assert_eq!(
                read,
                self.balance(fan),
                "step {step}: fan {fan} (balance, held)"
            );
            if !all && !self.moved.contains(&fan) {
                continue;
            }
            let stream = load::<CandyAccount>(&self.env.app.state.store, &fan.to_string())
                .await
                .unwrap()
                .state;
            assert_eq!(
                (stream.balance, stream.held),
                read,
                "step {step}: fan {fan} stream vs projection"
            );
        }
        self.moved.clear();
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for i in touched {
            let b = &self.bookings[i];
            let read = self.env.booking(&b.no).await;
            assert_eq!(
                (read["status"].as_i64(), read["hold"]["state"].as_str()),
                (Some(b.status), Some(b.hold.name())),
                "step {step}: booking {b:?}: {read}"
            );
        }
        for u in &self.undelivered {
            let o = self.env.order(u.order_no()).await;
            assert_eq!(o["status"], 2, "step {step}: paid, not delivered: {o}");
        }
        let done = &self.refunds_done[self.refunds_checked..];
        for (refunds, status) in [
            (&self.refunds_pending[..], 1),
            (&self.refunds_refunding[..], 2),
            (done, 3),
        ] {
            for r in refunds {
                let read = self.env.refund(r).await;
                assert_eq!(read["status"], status, "step {step}: refund {r}: {read}");
            }
        }
        self.refunds_checked = self.refunds_done.len();
    }
}

both_backends!(
    random_bookings_calls_scans_and_crashes_keep_candy_conserved,
    |db: TestDb| async move {
        let seed = seed();
        println!(
            "services_property[{:?}]: seed {seed:#x} (replay: {SEED_ENV}={seed:#x})",
            db.backend
        );
        let started = Instant::now();
        let env = ServicesEnv::start(&db).await;
        let crash = Arc::new(HookedStore {
            inner: env.app.state.store.clone(),
            hook: CrashingStore {
                skip: AtomicUsize::new(0),
                after: AtomicUsize::new(0),
                fired: AtomicUsize::new(0),
            },
        });
        let mut w = World {
            env,
            crash,
            rng: Rng(seed),
            candy: BTreeMap::new(),
            issued: 0,
            bookings: Vec::new(),
            undelivered: Vec::new(),
            refunds_pending: Vec::new(),
            refunds_refunding: Vec::new(),
            refunds_done: Vec::new(),
            refunds_checked: 0,
            touched: Vec::new(),
            moved: BTreeSet::new(),
            n: 0,
            mix: BTreeMap::new(),
        };
        let mut steps = 0;
        while steps < STEPS {
            if started.elapsed() > WALL_MAX {
                println!("services_property: wall-clock cap reached after {steps} steps");
                break;
            }
            w.step().await;
            w.check(steps, false).await;
            steps += 1;
        }
        // The backstops take up whatever is still stuck.
        w.delivery_scan().await;
        w.check(steps, true).await;
        w.moderation_repair().await;
        w.check(steps, true).await;
        for _ in 0..2 {
            w.refund_scan().await;
            w.check(steps, true).await;
        }
        assert!(
            w.undelivered.is_empty()
                && w.refunds_pending.is_empty()
                && w.refunds_refunding.is_empty()
        );
        assert!(
            w.bookings
                .iter()
                .all(|b| b.hold != Hold::RefundDue && (b.status != 3 || !b.flagged)),
            "something stuck after the backstops"
        );
        // Every cash refund succeeded at the gateway, once.
        for r in &w.refunds_done {
            assert_eq!(w.env.sim.gateway().refunds_made(r), 1, "refund {r}");
        }
        // The journal balances in candy and in cash.
        let head = w.env.app.state.store.head_position().await.unwrap();
        let (status, tb) = w
            .env
            .app
            .get(&format!("/v1/accounts/trial-balance?min_position={head}"))
            .await;
        assert_eq!(status, 200, "{tb}");
        assert_eq!(tb["balanced"], true, "{tb}");
        for currency in ["ZZC", "CNY"] {
            let c = tb["currencies"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["currency"] == currency)
                .unwrap_or_else(|| panic!("no {currency} in the trial balance: {tb}"));
            assert_eq!(c["difference_minor"], 0, "{tb}");
            assert!(c["debits_minor"].as_i64().unwrap() > 0, "{tb}");
        }
        println!(
            "services_property[{:?}]: seed {seed:#x}, {steps} steps, {} bookings, {:?}; mix {:?}",
            db.backend,
            w.bookings.len(),
            started.elapsed(),
            w.mix
        );
        if steps == STEPS && seed == SEED_DEFAULT {
            for kind in [
                "fund",
                "fund_left_undelivered",
                "book",
                "book_refused",
                "join",
                "start",
                "finish",
                "no_show_scan",
                "refund_scan",
                "delivery_scan",
                "late_callback",
                "crash_book",
                "crash_delivery",
                "crash_finish",
                "crash_moderation_abort",
                "crash_no_show",
                "crash_refund",
            ] {
                assert!(
                    w.mix.get(kind).copied().unwrap_or(0) > 0,
                    "no {kind} in {:?}",
                    w.mix
                );
            }
        }
    }
);
