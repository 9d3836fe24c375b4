//! The journal: every posting of the chart of accounts (`factledger_aggregates::ledger`)
//! as two journal lines, and the balance of every account they touch (issue 16).
//!
//! A money event's posting needs the currency of its stream, which a wallet names
//! once, when it opens (a commission, when it is recorded). So the projection reads
//! events in global order and remembers each stream's currency
//! ([`STREAM_CURRENCIES`]); [`classify`] says what an event means to the journal and
//! [`Ledger`] is the whole projection in memory (for replays and tests; the service's
//! runner writes the same lines and balances to the tables below).
//!
//! **Invariant:** every posting writes a debit line and a credit line of the same
//! amount, so at every position the sum of debits equals the sum of credits in each
//! currency — the trial balance is zero.

use crate::table::{ColType, Column, TableDef};
use factledger_aggregates::campaign::{CampaignEvent, CAMPAIGN_AGGREGATE_TYPE};
use factledger_aggregates::candy::{CandyEvent, CANDY_AGGREGATE_TYPE};
use factledger_aggregates::commission::{CommissionEvent, COMMISSION_AGGREGATE_TYPE};
use factledger_aggregates::ledger::{
    campaign_currency, campaign_posting, candy_account, candy_posting, commission_posting,
    order_posting, wallet_account, wallet_posting, AccountKind, Posting, CHART_VERSION,
};
use factledger_aggregates::money::Currency;
use factledger_aggregates::service_order::{OrderEvent, ORDER_AGGREGATE_TYPE};
use factledger_aggregates::services::candy_currency;
use factledger_aggregates::wallet::{Bucket, WalletEvent, WALLET_AGGREGATE_TYPE};
use serde_json::Value;
use std::collections::BTreeMap;

/// Checkpoint name and `factledger rebuild journal`.
pub const NAME: &str = "journal";
/// The chart's version: a changed mapping rebuilds the journal.
pub const VERSION: i32 = CHART_VERSION;
/// The streams whose events the journal reads.
pub const AGGREGATE_TYPES: &[&str] = &[
    WALLET_AGGREGATE_TYPE,
    COMMISSION_AGGREGATE_TYPE,
    CAMPAIGN_AGGREGATE_TYPE,
    CANDY_AGGREGATE_TYPE,
    ORDER_AGGREGATE_TYPE,
];

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

/// Two lines per posting: `leg` 0 is the debit, 1 the credit. (`stream_type` came in
/// migration 0021, hence last.)
pub const JOURNAL: TableDef = TableDef {
    name: "journal",
    key: &["position", "leg"],
    columns: &[
        col("position", ColType::Int),
        col("leg", ColType::Int),
        col("account", ColType::Text),
        col("debit_minor", ColType::Int),
        col("credit_minor", ColType::Int),
        col("currency", ColType::Text),
        col("ref_type", ColType::Text),
        col("ref_id", ColType::Text),
        col("entry_type", ColType::Text),
        col("stream_id", ColType::Text),
        col("stream_type", ColType::Text),
    ],
};

/// Each account's totals: what a trial balance and `GET /v1/accounts/{account}` read.
pub const ACCOUNT_BALANCES: TableDef = TableDef {
    name: "account_balances",
    key: &["account"],
    columns: &[
        col("account", ColType::Text),
        col("kind", ColType::Text),
        col("currency", ColType::Text),
        col("normal_side", ColType::Text),
        col("debits_minor", ColType::Int),
        col("credits_minor", ColType::Int),
        col("last_position", ColType::Int),
    ],
};

/// The currency of every stream the journal has seen open.
pub const STREAM_CURRENCIES: TableDef = TableDef {
    name: "journal_stream_currencies",
    key: &["stream_type", "stream_id"],
    columns: &[
        col("stream_type", ColType::Text),
        col("stream_id", ColType::Text),
        col("currency", ColType::Text),
    ],
};

/// Every table the journal owns.
pub const TABLES: &[TableDef] = &[JOURNAL, ACCOUNT_BALANCES, STREAM_CURRENCIES];

/// A money event, decoded.
#[derive(Debug, Clone)]
pub enum MoneyEvent {
    Wallet(WalletEvent),
    Commission(CommissionEvent),
    Campaign(CampaignEvent),
    Candy(CandyEvent),
    Order(OrderEvent),
}

/// What one event means to the journal.
#[derive(Debug, Clone)]
pub enum Journaled {
    /// A stream names its currency; a wallet also opens its four bucket accounts.
    Opens {
        stream_type: &'static str,
        currency: Currency,
        accounts: Vec<String>,
    },
    /// An event that may move money; its posting depends on the stream's currency.
    Moves(MoneyEvent),
}

impl MoneyEvent {
    /// The posting of this event of stream `stream_id` in `currency` (`None`: it
    /// moves no money).
    pub fn posting(&self, stream_id: &str, currency: Currency) -> Option<Posting> {
        match self {
            MoneyEvent::Wallet(e) => wallet_posting(stream_id, currency, e),
            MoneyEvent::Commission(e) => commission_posting(stream_id, currency, e),
            MoneyEvent::Campaign(e) => Some(campaign_posting(stream_id, currency, e)),
            MoneyEvent::Candy(e) => candy_posting(stream_id, e),
            MoneyEvent::Order(e) => order_posting(currency, e),
        }
    }

    pub fn stream_type(&self) -> &'static str {
        match self {
            MoneyEvent::Wallet(_) => WALLET_AGGREGATE_TYPE,
            MoneyEvent::Commission(_) => COMMISSION_AGGREGATE_TYPE,
            MoneyEvent::Campaign(_) => CAMPAIGN_AGGREGATE_TYPE,
            MoneyEvent::Candy(_) => CANDY_AGGREGATE_TYPE,
            MoneyEvent::Order(_) => ORDER_AGGREGATE_TYPE,
        }
    }

    /// Whether a stream of this event always names its currency before it moves
    /// money: a wallet and a commission do, so a movement without one is a broken
    /// history; a campaign names one only for a fund in minor units, and a quota
    /// counted in orders posts nothing; a candy account's currency is candy; a service
    /// order names a currency only when it is paid in cash.
    pub fn needs_currency(&self) -> bool {
        matches!(
            self,
            MoneyEvent::Wallet(_) | MoneyEvent::Commission(_) | MoneyEvent::Candy(_)
        )
    }
}

/// The four bucket accounts of a wallet.
pub fn bucket_accounts(wallet_id: &str) -> Vec<String> {
    [
        Bucket::Pending,
        Bucket::Available,
        Bucket::Frozen,
        Bucket::RiskHold,
    ]
    .into_iter()
    .map(|b| wallet_account(wallet_id, b))
    .collect()
}

fn decode<T: serde::de::DeserializeOwned>(payload: &Value) -> Result<T, String> {
    serde_json::from_value(payload.clone()).map_err(|e| format!("payload: {e}"))
}

/// What an event of `aggregate_type` (payload upcast to its current shape) means to
/// the journal, in order: nothing for a stream the journal does not read, the
/// stream's currency when it names one, the event's movement.
pub fn classify(
    aggregate_type: &str,
    aggregate_id: &str,
    payload: &Value,
) -> Result<Vec<Journaled>, String> {
    let opens = |stream_type, currency, accounts| Journaled::Opens {
        stream_type,
        currency,
        accounts,
    };
    Ok(match aggregate_type {
        WALLET_AGGREGATE_TYPE => match decode(payload)? {
            WalletEvent::WalletOpened { currency, .. } => vec![opens(
                WALLET_AGGREGATE_TYPE,
                currency,
                bucket_accounts(aggregate_id),
            )],
            e => vec![Journaled::Moves(MoneyEvent::Wallet(e))],
        },
        COMMISSION_AGGREGATE_TYPE => match decode(payload)? {
            CommissionEvent::CommissionRecorded(r) => {
                vec![opens(COMMISSION_AGGREGATE_TYPE, r.currency, Vec::new())]
            }
            e => vec![Journaled::Moves(MoneyEvent::Commission(e))],
        },
        CAMPAIGN_AGGREGATE_TYPE => match decode(payload)? {
            CampaignEvent::CampaignOpened(o) => match campaign_currency(&o) {
                // Opening a fund names its currency, then funds its budget.
                Some(currency) => vec![
                    opens(CAMPAIGN_AGGREGATE_TYPE, currency, Vec::new()),
                    Journaled::Moves(MoneyEvent::Campaign(CampaignEvent::CampaignOpened(o))),
                ],
                None => Vec::new(),
            },
            e => vec![Journaled::Moves(MoneyEvent::Campaign(e))],
        },
        CANDY_AGGREGATE_TYPE => match decode(payload)? {
            CandyEvent::CandyAccountOpened { .. } => vec![opens(
                CANDY_AGGREGATE_TYPE,
                candy_currency(),
                vec![
                    candy_account(aggregate_id, "balance"),
                    candy_account(aggregate_id, "held"),
                ],
            )],
            e => vec![Journaled::Moves(MoneyEvent::Candy(e))],
        },
        ORDER_AGGREGATE_TYPE => match decode(payload)? {
            // A cash order names its currency; a candy order posts on its hold.
            OrderEvent::OrderCreated(o) => match o.currency {
                Some(currency) => vec![opens(ORDER_AGGREGATE_TYPE, currency, Vec::new())],
                None => Vec::new(),
            },
            e => vec![Journaled::Moves(MoneyEvent::Order(e))],
        },
        _ => Vec::new(),
    })
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub position: i64,
    pub leg: i64,
    pub account: String,
    pub debit_minor: i64,
    pub credit_minor: i64,
    pub currency: Currency,
    pub ref_type: String,
    pub ref_id: String,
    pub entry_type: String,
    pub stream_id: String,
    /// The type of the stream whose event made the line (ids of different types may
    /// be equal).
    pub stream_type: &'static str,
}

/// The two lines of a posting made by the event at `position` of `stream_id`.
pub fn lines(position: i64, stream_type: &'static str, stream_id: &str, p: &Posting) -> [Line; 2] {
    let line = |leg: i64, account: &str, debit: i64, credit: i64| Line {
        position,
        leg,
        account: account.to_owned(),
        debit_minor: debit,
        credit_minor: credit,
        currency: p.currency,
        ref_type: p.ref_type.clone(),
        ref_id: p.ref_id.clone(),
        entry_type: p.entry_type.clone(),
        stream_id: stream_id.to_owned(),
        stream_type,
    };
    [
        line(0, &p.debit, p.amount_minor, 0),
        line(1, &p.credit, 0, p.amount_minor),
    ]
}

/// An account's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    pub currency: Currency,
    pub debits_minor: i64,
    pub credits_minor: i64,
}

impl Balance {
    /// Credits minus debits: what a credit-normal account holds.
    pub fn credit_balance(&self) -> i64 {
        self.credits_minor - self.debits_minor
    }
}

/// The kind label stored with an account.
pub fn kind_label(account: &str) -> &'static str {
    AccountKind::of(account).map_or("UNKNOWN", AccountKind::prefix)
}

/// The journal in memory: the same lines and balances the runner writes.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub currencies: BTreeMap<(String, String), Currency>,
    pub balances: BTreeMap<String, Balance>,
    pub lines: Vec<Line>,
}

impl Ledger {
    /// Apply one event (payload upcast): its posting's lines and balances.
    pub fn apply(
        &mut self,
        position: i64,
        aggregate_type: &str,
        aggregate_id: &str,
        payload: &Value,
    ) -> Result<(), String> {
        for j in classify(aggregate_type, aggregate_id, payload)? {
            self.apply_one(position, aggregate_id, j)?;
        }
        Ok(())
    }

    fn apply_one(&mut self, position: i64, aggregate_id: &str, j: Journaled) -> Result<(), String> {
        match j {
            Journaled::Opens {
                stream_type,
                currency,
                accounts,
            } => {
                self.currencies
                    .insert((stream_type.to_owned(), aggregate_id.to_owned()), currency);
                for a in accounts {
                    self.balances.entry(a).or_insert(Balance {
                        currency,
                        debits_minor: 0,
                        credits_minor: 0,
                    });
                }
                Ok(())
            }
            Journaled::Moves(e) => {
                let key = (e.stream_type().to_owned(), aggregate_id.to_owned());
                let Some(posting) = (match self.currencies.get(&key) {
                    Some(c) => e.posting(aggregate_id, *c),
                    // A money event before its stream named a currency cannot be.
                    None if e.needs_currency() => {
                        return Err(format!("{} {aggregate_id}: no currency", key.0))
                    }
                    None => None,
                }) else {
                    return Ok(());
                };
                for l in lines(position, e.stream_type(), aggregate_id, &posting) {
                    let b = self.balances.entry(l.account.clone()).or_insert(Balance {
                        currency: l.currency,
                        debits_minor: 0,
                        credits_minor: 0,
                    });
                    b.debits_minor += l.debit_minor;
                    b.credits_minor += l.credit_minor;
                    self.lines.push(l);
                }
                Ok(())
            }
        }
    }

    /// Σ debits and Σ credits per currency.
    pub fn trial_balance(&self) -> BTreeMap<Currency, (i64, i64)> {
        let mut out: BTreeMap<Currency, (i64, i64)> = BTreeMap::new();
        for b in self.balances.values() {
            let t = out.entry(b.currency).or_default();
            t.0 += b.debits_minor;
            t.1 += b.credits_minor;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn open(ledger: &mut Ledger, position: i64, wallet: &str) {
        let p = json!({"type": "WalletOpened", "user_id": "u", "currency": "IDR"});
        ledger.apply(position, "wallet", wallet, &p).unwrap();
    }

    fn moved(entry: &str, ty: &str, amount: i64, before: [i64; 4], after: [i64; 4]) -> Value {
        let b = |v: [i64; 4]| {
            json!({"pending_minor": v[0], "available_minor": v[1], "frozen_minor": v[2],
                   "risk_hold_minor": v[3]})
        };
        let delta = [0, 1, 2, 3].map(|i| after[i] - before[i]);
        json!({"type": ty, "ref_type": "COMMISSION", "ref_id": "LAZADA:1:CASHBACK",
               "entry_type": entry, "amount_minor": amount, "delta": b(delta),
               "before": b(before), "after": b(after)})
    }

    #[test]
    fn a_credited_then_released_commission_balances_and_the_buckets_hold_it() {
        let mut l = Ledger::default();
        open(&mut l, 1, "w1");
        let credit = moved(
            "CREDIT_PENDING",
            "PendingCredited",
            900,
            [0; 4],
            [900, 0, 0, 0],
        );
        l.apply(2, "wallet", "w1", &credit).unwrap();
        let release = moved(
            "RELEASE_PENDING",
            "PendingReleased",
            900,
            [900, 0, 0, 0],
            [0, 900, 0, 0],
        );
        l.apply(3, "wallet", "w1", &release).unwrap();
        let idr = Currency::parse("IDR").unwrap();
        assert_eq!(l.trial_balance()[&idr], (1800, 1800));
        assert_eq!(l.balances["wallet:w1:available"].credit_balance(), 900);
        assert_eq!(l.balances["wallet:w1:pending"].credit_balance(), 0);
        assert_eq!(
            l.balances["commission_expense:LAZADA:IDR"].debits_minor,
            900
        );
        assert_eq!(l.lines.len(), 4);
        assert_eq!(
            kind_label("commission_expense:LAZADA:IDR"),
            "commission_expense"
        );
    }

    fn campaign(unit: &str) -> Value {
        json!({"type": "CampaignOpened", "campaign_id": "SHOPEE:ID", "quota_unit": unit,
               "quota_limit": 5_000, "currency": "IDR", "starts_at": "2026-01-01T00:00:00Z",
               "ends_at": null})
    }

    fn reserved(order: &str, units: i64, after: i64) -> Value {
        json!({"type": "QuotaReserved", "order_id": order, "units": units,
               "ordered_at": "2026-03-01T00:00:00Z", "reserved_after": after})
    }

    #[test]
    fn a_campaign_fund_is_a_budget_its_reservations_draw_on() {
        let mut l = Ledger::default();
        l.apply(1, "campaign", "SHOPEE:ID", &campaign("MINOR_UNITS"))
            .unwrap();
        l.apply(2, "campaign", "SHOPEE:ID", &reserved("o1", 600, 600))
            .unwrap();
        let released = json!({"type": "QuotaReleased", "order_id": "o1", "units": 600,
                              "reason": "ORDER_CANCELLED", "reserved_after": 0});
        l.apply(3, "campaign", "SHOPEE:ID", &reserved("o2", 900, 1_500))
            .unwrap();
        l.apply(4, "campaign", "SHOPEE:ID", &released).unwrap();
        let idr = Currency::parse("IDR").unwrap();
        assert_eq!(l.trial_balance()[&idr], (7_100, 7_100));
        assert_eq!(
            l.balances["campaign_budget:SHOPEE:ID:IDR"].credit_balance(),
            4_100
        );
        assert_eq!(
            l.balances["campaign_reserved:SHOPEE:ID:IDR"].credit_balance(),
            900
        );
        assert!(l.lines.iter().all(|line| line.stream_type == "campaign"));
    }

    #[test]
    fn a_quota_counted_in_orders_posts_nothing() {
        let mut l = Ledger::default();
        l.apply(1, "campaign", "LAZADA:MY", &campaign("ORDERS"))
            .unwrap();
        l.apply(2, "campaign", "LAZADA:MY", &reserved("o1", 1, 1))
            .unwrap();
        assert!(l.lines.is_empty() && l.balances.is_empty());
    }

    #[test]
    fn a_movement_of_a_wallet_never_opened_stops_the_journal() {
        let mut l = Ledger::default();
        let credit = moved("CREDIT_PENDING", "PendingCredited", 1, [0; 4], [1, 0, 0, 0]);
        assert!(l.apply(1, "wallet", "ghost", &credit).is_err());
        assert!(
            l.apply(2, "order", "x", &json!({})).is_ok(),
            "other streams are not read"
        );
    }
}
