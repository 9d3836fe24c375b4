//! Withdrawals as a property (issue 17): a seeded generator (xorshift: a failing seed
//! replays exactly) drives requests, approvals and rejections, worker calls against
//! a model provider (accepted, paid at once, timed out after or before accepting,
//! refused for its balance), worker crashes between a call and its record, the
//! restart's recovery of open attempts, queries, the provider settling payouts
//! (paid, failed, failed for its balance) and webhooks (current, stale, repeated),
//! in random order, through the same units the service runs. After every step:
//!
//! - available + frozen + Σ paid = credited (nothing created or lost);
//! - frozen = Σ amounts of the withdrawals still holding a freeze;
//! - no withdrawal has two completed payouts at the provider, and none is PAID
//!   without one;
//!
//! and at the end, once the provider settled everything and the worker caught up,
//! every withdrawal the provider paid is PAID. Bounded: `STEPS` per backend.

use crate::common::{meta, Rng, TestDb};
use factledger::payouts::provider::{ProviderPayout, ProviderStatus};
use factledger::payouts::units::{self, DailyLimits};
use factledger::payouts::webhook::apply_report;
use factledger::runtime::bus::load;
use factledger::runtime::unit::run_command;
use factledger_aggregates::wallet::{Wallet, WalletCommand};
use factledger_aggregates::withdrawal::{
    Decision, OutcomeSource, PayoutDestination, ProviderReport, RecordOutcome, RequestWithdrawal,
    Review, StartAttempt, Withdrawal, WithdrawalState, WithdrawalStatus,
};
use factledger_aggregates::{AmountMinor, BoundedId, Currency};
use std::collections::BTreeMap;

const STEPS: u64 = 240;
const CREDITED: i64 = 1_000_000;
const WALLET: &str = "w-1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    Pending,
    Completed,
    Failed { recoverable: bool },
}

/// The provider: one payout per reference at most (its idempotency), and the
/// statuses each payout had, for stale webhooks.
#[derive(Default)]
struct Provider {
    payouts: BTreeMap<String, (i64, Truth)>,
}

impl Provider {
    fn payout(&self, reference: &str) -> Option<ProviderPayout> {
        self.payouts
            .get(reference)
            .map(|(amount, t)| ProviderPayout {
                provider_id: format!("disb-{reference}"),
                reference: reference.to_owned(),
                amount_minor: *amount,
                currency: "IDR".into(),
                status: status(*t),
            })
    }
}

fn status(t: Truth) -> ProviderStatus {
    match t {
        Truth::Pending => ProviderStatus::Accepted,
        Truth::Completed => ProviderStatus::Succeeded,
        Truth::Failed { recoverable } => ProviderStatus::Failed {
            code: if recoverable {
                "INSUFFICIENT_BALANCE"
            } else {
                "INVALID_DESTINATION"
            }
            .into(),
            recoverable,
        },
    }
}

fn report(t: Truth) -> ProviderReport {
    factledger::payouts::worker::status_report(&status(t))
}

struct World {
    store: factledger::infra::store::DynStore,
    rng: Rng,
    provider: Provider,
    ids: Vec<String>,
    mix: BTreeMap<&'static str, u64>,
}

impl World {
    async fn state(&self, id: &str) -> WithdrawalState {
        load::<Withdrawal>(&self.store, id)
            .await
            .unwrap()
            .state
            .record
            .unwrap()
    }

    fn pick(
        &mut self,
        states: &[(String, WithdrawalState)],
        want: impl Fn(&WithdrawalState) -> bool,
    ) -> Option<(String, WithdrawalState)> {
        let fit: Vec<_> = states.iter().filter(|(_, s)| want(s)).cloned().collect();
        if fit.is_empty() {
            return None;
        }
        Some(fit[self.rng.below(fit.len() as u64) as usize].clone())
    }

    async fn record(
        &mut self,
        id: &str,
        s: &WithdrawalState,
        report: ProviderReport,
        source: OutcomeSource,
        attempt: Option<u32>,
    ) {
        let outcome = RecordOutcome {
            report,
            source,
            attempt,
            idempotency_key: s.idempotency_key(),
            provider_payout_id: None,
            call: None,
            actor: "test:worker".into(),
            now: chrono::Utc::now(),
        };
        units::record_outcome(&self.store, &meta(), id, outcome, None)
            .await
            .unwrap();
    }

    async fn request(&mut self, n: usize) {
        let id = format!("wd-{n}");
        let review = if self.rng.below(3) == 0 {
            Review::Manual {
                reasons: vec!["random".into()],
            }
        } else {
            Review::Auto
        };
        let cmd = RequestWithdrawal {
            withdrawal_id: BoundedId::parse(&id).unwrap(),
            user_id: BoundedId::parse("u-1").unwrap(),
            wallet_id: BoundedId::parse(WALLET).unwrap(),
            currency: Currency::parse("IDR").unwrap(),
            amount_minor: AmountMinor::parse(1_000 + self.rng.below(60_000) as i64).unwrap(),
            provider: BoundedId::parse("xendit").unwrap(),
            destination: PayoutDestination {
                account_id: "pa-1".into(),
                channel_code: "ID_BCA".into(),
                account_number: "1".into(),
                account_holder: "B".into(),
            },
            review,
            actor: "test".into(),
            now: chrono::Utc::now(),
        };
        let daily = DailyLimits {
            count: 10_000,
            amount_minor: i64::MAX / 4,
        };
        match units::request(&self.store, &meta(), cmd, daily, None).await {
            Ok(_) => {
                self.ids.push(id);
                *self.mix.entry("requested").or_default() += 1;
            }
            // The wallet ran dry: refused whole.
            Err(e) => {
                assert!(e.to_string().contains("balance"), "{e}");
                *self.mix.entry("refused").or_default() += 1;
            }
        }
    }

    /// The worker's call on a payable withdrawal, sometimes crashing before the record.
    async fn call(&mut self, id: &str, s: &WithdrawalState) {
        let start = StartAttempt {
            actor: "test:worker".into(),
            now: chrono::Utc::now(),
        };
        units::start_attempt(&self.store, &meta(), id, start, None)
            .await
            .unwrap();
        let attempt = s.attempts + 1;
        let reference = s.idempotency_key();
        let existing = self.provider.payouts.get(&reference).copied();
        let answer = match (existing, self.rng.below(6)) {
            // The provider's idempotency: the same payout again.
            (Some((_, t)), _) => report(t),
            (None, 0) => {
                self.provider
                    .payouts
                    .insert(reference.clone(), (s.amount_minor, Truth::Pending));
                ProviderReport::Unknown {
                    reason: "timeout after accepting".into(),
                }
            }
            (None, 1) => ProviderReport::Unknown {
                reason: "503 before accepting".into(),
            },
            (None, 2) => ProviderReport::Refused {
                code: "INSUFFICIENT_BALANCE".into(),
                recoverable: true,
            },
            (None, 3) => {
                self.provider
                    .payouts
                    .insert(reference.clone(), (s.amount_minor, Truth::Completed));
                ProviderReport::Succeeded
            }
            (None, _) => {
                self.provider
                    .payouts
                    .insert(reference.clone(), (s.amount_minor, Truth::Pending));
                ProviderReport::Accepted
            }
        };
        if self.rng.below(5) == 0 {
            *self.mix.entry("crashed").or_default() += 1;
            return;
        }
        let s = self.state(id).await;
        self.record(id, &s, answer, OutcomeSource::Call, Some(attempt))
            .await;
        *self.mix.entry("called").or_default() += 1;
    }

    async fn step(&mut self) {
        let mut states = Vec::new();
        for id in self.ids.clone() {
            states.push((id.clone(), self.state(&id).await));
        }
        use WithdrawalStatus as S;
        match self.rng.below(8) {
            0 => self.request(self.ids.len() + 1).await,
            1 => {
                if let Some((id, _)) = self.pick(&states, |s| s.status == S::Requested) {
                    let approve = self.rng.below(3) != 0;
                    let d = Decision {
                        actor: "op".into(),
                        reason: "checked".into(),
                        now: chrono::Utc::now(),
                    };
                    units::review(&self.store, &meta(), &id, approve, d)
                        .await
                        .unwrap();
                    *self
                        .mix
                        .entry(if approve { "approved" } else { "rejected" })
                        .or_default() += 1;
                }
            }
            2 => {
                let payable = |s: &WithdrawalState| {
                    matches!(s.status, S::PayoutPending | S::FundsHeld) && s.open_attempt.is_none()
                };
                if let Some((id, s)) = self.pick(&states, payable) {
                    self.call(&id, &s).await;
                }
            }
            3 => {
                // The restarted worker: an open attempt counts as unknown.
                if let Some((id, s)) = self.pick(&states, |s| s.open_attempt.is_some()) {
                    let reason = ProviderReport::Unknown {
                        reason: "interrupted".into(),
                    };
                    self.record(&id, &s, reason, OutcomeSource::Call, s.open_attempt)
                        .await;
                    *self.mix.entry("recovered").or_default() += 1;
                }
            }
            4 => {
                let queryable =
                    |s: &WithdrawalState| matches!(s.status, S::ProviderUnknown | S::Processing);
                if let Some((id, s)) = self.pick(&states, queryable) {
                    let found = match self.provider.payouts.get(&s.idempotency_key()) {
                        Some((_, t)) => report(*t),
                        None => ProviderReport::Absent,
                    };
                    self.record(&id, &s, found, OutcomeSource::Query, None)
                        .await;
                    *self.mix.entry("queried").or_default() += 1;
                }
            }
            5 => {
                let pending: Vec<String> = self
                    .provider
                    .payouts
                    .iter()
                    .filter(|(_, (_, t))| *t == Truth::Pending)
                    .map(|(r, _)| r.clone())
                    .collect();
                if !pending.is_empty() {
                    let r = &pending[self.rng.below(pending.len() as u64) as usize];
                    let t = match self.rng.below(10) {
                        0 => Truth::Failed { recoverable: false },
                        1 => Truth::Failed { recoverable: true },
                        _ => Truth::Completed,
                    };
                    self.provider.payouts.get_mut(r).unwrap().1 = t;
                    *self.mix.entry("settled").or_default() += 1;
                }
            }
            _ => {
                // A webhook about any payout: its status now, or a stale PENDING.
                let refs: Vec<String> = self.provider.payouts.keys().cloned().collect();
                if !refs.is_empty() {
                    let r = &refs[self.rng.below(refs.len() as u64) as usize];
                    let mut p = self.provider.payout(r).unwrap();
                    if self.rng.below(4) == 0 {
                        p.status = ProviderStatus::Accepted;
                    }
                    apply_report(&self.store, &meta(), "xendit", &p, None)
                        .await
                        .unwrap();
                    *self.mix.entry("webhooks").or_default() += 1;
                }
            }
        }
    }

    async fn check(&self, step: u64) {
        let wallet = load::<Wallet>(&self.store, WALLET).await.unwrap().state;
        let (mut frozen, mut paid) = (0, 0);
        for id in &self.ids {
            let s = self.state(id).await;
            if s.status.holds_freeze() {
                frozen += s.amount_minor;
            }
            let completed: Vec<_> = self
                .provider
                .payouts
                .iter()
                .filter(|(r, (_, t))| {
                    factledger_aggregates::withdrawal::withdrawal_of_reference(r) == id
                        && *t == Truth::Completed
                })
                .collect();
            assert!(
                completed.len() <= 1,
                "step {step}: {id} paid twice at the provider: {completed:?}"
            );
            if s.status == WithdrawalStatus::Paid {
                paid += s.amount_minor;
                assert_eq!(
                    completed.len(),
                    1,
                    "step {step}: {id} PAID without a completed payout"
                );
            }
        }
        let b = &wallet.balances;
        assert_eq!(
            b.frozen_minor, frozen,
            "step {step}: frozen = Σ open withdrawals"
        );
        assert_eq!(
            b.available_minor + b.frozen_minor + paid,
            CREDITED,
            "step {step}: available + frozen + paid = credited"
        );
    }
}

both_backends!(
    random_requests_outcomes_crashes_and_webhooks_keep_the_money_right,
    |db: TestDb| async move {
        for command in [
            serde_json::json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
            serde_json::json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": CREDITED}),
            serde_json::json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": "c-1", "amount_minor": CREDITED}),
        ] {
            let c: WalletCommand = serde_json::from_value(command).unwrap();
            run_command::<Wallet>(&db.store, &meta(), WALLET, c)
                .await
                .unwrap();
        }
        let mut w = World {
            store: db.store.clone(),
            rng: Rng(0x5EED_1717),
            provider: Provider::default(),
            ids: Vec::new(),
            mix: BTreeMap::new(),
        };
        for step in 0..STEPS {
            w.step().await;
            w.check(step).await;
        }
        // Drain: the provider settles everything; the worker recovers and queries
        // until nothing is in flight at the provider.
        for (_, (_, t)) in w.provider.payouts.iter_mut() {
            if *t == Truth::Pending {
                *t = Truth::Completed;
            }
        }
        for _ in 0..4 {
            for id in w.ids.clone() {
                let s = w.state(&id).await;
                if let Some(n) = s.open_attempt {
                    let r = ProviderReport::Unknown {
                        reason: "interrupted".into(),
                    };
                    w.record(&id, &s, r, OutcomeSource::Call, Some(n)).await;
                }
                let s = w.state(&id).await;
                if matches!(
                    s.status,
                    WithdrawalStatus::ProviderUnknown | WithdrawalStatus::Processing
                ) {
                    let found = match w.provider.payouts.get(&s.idempotency_key()) {
                        Some((_, t)) => report(*t),
                        None => ProviderReport::Absent,
                    };
                    w.record(&id, &s, found, OutcomeSource::Query, None).await;
                }
            }
        }
        w.check(STEPS).await;
        for (r, (_, t)) in &w.provider.payouts {
            if *t == Truth::Completed {
                let id = factledger_aggregates::withdrawal::withdrawal_of_reference(r);
                assert_eq!(
                    w.state(id).await.status,
                    WithdrawalStatus::Paid,
                    "{id} was paid by the provider"
                );
            }
        }
        for kind in [
            "requested",
            "approved",
            "called",
            "crashed",
            "recovered",
            "queried",
            "settled",
            "webhooks",
        ] {
            assert!(
                w.mix.get(kind).copied().unwrap_or(0) > 0,
                "no {kind} in {:?}",
                w.mix
            );
        }
    }
);
