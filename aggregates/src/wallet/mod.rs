//! The wallet aggregate (SPEC §5): four balance buckets per user and currency, every
//! change a ledger entry with before/after, withdrawals blockable by references.

mod commands;
mod events;
mod transitions;

pub use commands::{
    BlockRef, CommandParseError, MoveFunds, OpenWallet, WalletCommand, REASON_LEN_MAX,
};
pub use events::{Movement, WalletEvent, MOVEMENT_EVENT_VERSION};
pub use transitions::{Bucket, Buckets, EntryType};

use crate::decide::{Decide, InvariantViolation, LedgerRef};
use crate::money::Currency;
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The stream type of wallets in the event store.
pub const WALLET_AGGREGATE_TYPE: &str = "wallet";

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Wallet {
    pub opened: bool,
    pub user_id: String,
    pub currency: Currency,
    pub balances: Buckets,
    /// Active withdrawal blocks keyed by `ref_type/ref_id`.
    pub withdrawal_blocks: BTreeMap<String, WithdrawalBlock>,
    /// Money frozen and not yet given back or paid out, per freeze reference
    /// (`ref_type/ref_id`, e.g. `WITHDRAWAL/wd-1`): frozen money leaves only through
    /// the reference that froze it, for exactly this amount, once.
    #[serde(default)]
    pub open_freezes: BTreeMap<String, i64>,
}

/// A wallet command another aggregate's event requires, and the wallet it goes to:
/// the unit of work that appends the event appends this command's events too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletEffect {
    pub wallet_id: crate::money::BoundedId,
    pub command: WalletCommand,
}

/// A reference that currently blocks withdrawals (e.g. a recovery-risk record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithdrawalBlock {
    pub ref_type: String,
    pub ref_id: String,
    pub reason: Option<String>,
}

/// Why a wallet command was refused. Nothing is written when a command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalletError {
    #[error("wallet does not exist; open it first")]
    NotFound,
    #[error("wallet is already open")]
    AlreadyOpen,
    #[error("currency {given} does not match the wallet's currency {wallet}")]
    CurrencyMismatch { given: Currency, wallet: Currency },
    /// The posting would debit the bucket's account past its credits: its
    /// `debits_must_not_exceed_credits` flag (`crate::accounts`).
    #[error("{bucket} balance {balance_minor} is less than {amount_minor}: a wallet bucket account's debits must not exceed its credits")]
    InsufficientBalance {
        bucket: &'static str,
        balance_minor: i64,
        amount_minor: i64,
    },
    #[error("the {bucket} balance would overflow a signed 64-bit integer")]
    BalanceOverflow { bucket: &'static str },
    #[error("withdrawals are blocked by {blocks:?}")]
    WithdrawalsBlocked { blocks: Vec<String> },
    #[error("withdrawals are already blocked by {block}")]
    AlreadyBlocked { block: String },
    #[error("no withdrawal block {block} to lift")]
    BlockNotFound { block: String },
    #[error("reason is longer than {max} bytes")]
    ReasonTooLong { max: usize },
    #[error("{freeze} is already frozen ({frozen_minor}); it is unfrozen or paid out before it is frozen again")]
    FreezeAlreadyOpen { freeze: String, frozen_minor: i64 },
    #[error("no open freeze {freeze} on this wallet: frozen money leaves only through the reference that froze it (never frozen, or already unfrozen or paid out)")]
    FreezeNotOpen { freeze: String },
    #[error("{freeze} froze {frozen_minor}; it is unfrozen or paid out for exactly that amount, not {amount_minor}")]
    FreezeAmountMismatch {
        freeze: String,
        frozen_minor: i64,
        amount_minor: i64,
    },
}

impl WalletError {
    /// Stable machine-readable code for clients.
    pub fn code(&self) -> &'static str {
        match self {
            WalletError::NotFound => "WALLET_NOT_FOUND",
            WalletError::AlreadyOpen => "WALLET_ALREADY_OPEN",
            WalletError::CurrencyMismatch { .. } => "CURRENCY_MISMATCH",
            WalletError::InsufficientBalance { .. } => "INSUFFICIENT_BALANCE",
            WalletError::BalanceOverflow { .. } => "BALANCE_OVERFLOW",
            WalletError::WithdrawalsBlocked { .. } => "WITHDRAWALS_BLOCKED",
            WalletError::AlreadyBlocked { .. } => "WITHDRAWALS_ALREADY_BLOCKED",
            WalletError::BlockNotFound { .. } => "WITHDRAWAL_BLOCK_NOT_FOUND",
            WalletError::ReasonTooLong { .. } => "REASON_TOO_LONG",
            WalletError::FreezeAlreadyOpen { .. } => "FREEZE_ALREADY_OPEN",
            WalletError::FreezeNotOpen { .. } => "FREEZE_NOT_OPEN",
            WalletError::FreezeAmountMismatch { .. } => "FREEZE_AMOUNT_MISMATCH",
        }
    }

    /// The request field the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            WalletError::NotFound | WalletError::AlreadyOpen => None,
            WalletError::CurrencyMismatch { .. } => Some("currency"),
            WalletError::InsufficientBalance { .. } | WalletError::BalanceOverflow { .. } => {
                Some("amount_minor")
            }
            WalletError::WithdrawalsBlocked { .. } => None,
            WalletError::AlreadyBlocked { .. } | WalletError::BlockNotFound { .. } => {
                Some("ref_id")
            }
            WalletError::ReasonTooLong { .. } => Some("reason"),
            WalletError::FreezeAlreadyOpen { .. } | WalletError::FreezeNotOpen { .. } => {
                Some("ref_id")
            }
            WalletError::FreezeAmountMismatch { .. } => Some("amount_minor"),
        }
    }
}

/// Map key of a block. `/` cannot occur in a `BoundedId`, so distinct references
/// never share a key (`:` can occur, hence not `:`).
fn block_key(ref_type: &str, ref_id: &str) -> String {
    format!("{ref_type}/{ref_id}")
}

impl Wallet {
    fn move_funds(
        &self,
        entry_type: EntryType,
        cmd: MoveFunds,
    ) -> Result<Vec<WalletEvent>, WalletError> {
        if let Some(given) = cmd.currency {
            if given != self.currency {
                return Err(WalletError::CurrencyMismatch {
                    given,
                    wallet: self.currency,
                });
            }
        }
        if entry_type == EntryType::WithdrawFreeze && !self.withdrawal_blocks.is_empty() {
            return Err(WalletError::WithdrawalsBlocked {
                blocks: self.withdrawal_blocks.keys().cloned().collect(),
            });
        }
        let amount_minor = cmd.amount_minor.get();
        self.check_pairing(entry_type, &cmd, amount_minor)?;
        let delta = entry_type.delta(amount_minor);
        let before = self.balances;
        let (from, to) = entry_type.moves();
        let after = before
            .checked_add(&delta)
            .ok_or(WalletError::BalanceOverflow {
                bucket: to.map_or("unknown", Bucket::name),
            })?;
        if let Some((bucket, _flag)) = after.first_broken_flag() {
            debug_assert_eq!(Some(bucket), from);
            return Err(WalletError::InsufficientBalance {
                bucket: bucket.name(),
                balance_minor: before.get(bucket),
                amount_minor,
            });
        }
        Ok(vec![WalletEvent::movement(Movement {
            ref_type: cmd.ref_type.as_str().to_owned(),
            ref_id: cmd.ref_id.as_str().to_owned(),
            entry_type,
            amount_minor,
            delta,
            before,
            after,
            counterparty: cmd.counterparty.map(|c| c.as_str().to_owned()),
        })])
    }

    /// Frozen money is paired with the reference that froze it (issue 17 item 2): a
    /// freeze opens its reference, and an unfreeze or a payout closes exactly that
    /// open freeze, for exactly its amount — each at most once, never both.
    fn check_pairing(
        &self,
        entry_type: EntryType,
        cmd: &MoveFunds,
        amount_minor: i64,
    ) -> Result<(), WalletError> {
        let freeze = block_key(cmd.ref_type.as_str(), cmd.ref_id.as_str());
        let open = self.open_freezes.get(&freeze).copied();
        match (entry_type, open) {
            (EntryType::WithdrawFreeze, Some(frozen_minor)) => {
                Err(WalletError::FreezeAlreadyOpen {
                    freeze,
                    frozen_minor,
                })
            }
            (EntryType::WithdrawUnfreeze | EntryType::WithdrawPayout, None) => {
                Err(WalletError::FreezeNotOpen { freeze })
            }
            (EntryType::WithdrawUnfreeze | EntryType::WithdrawPayout, Some(frozen_minor))
                if frozen_minor != amount_minor =>
            {
                Err(WalletError::FreezeAmountMismatch {
                    freeze,
                    frozen_minor,
                    amount_minor,
                })
            }
            _ => Ok(()),
        }
    }

    /// Open or close the freeze a movement names. A close of a reference with no
    /// open freeze, or for another amount, can only come from history written before
    /// pairing was enforced: it takes what it names, down to nothing.
    fn track_freeze(&mut self, m: &Movement) {
        let key = block_key(&m.ref_type, &m.ref_id);
        match m.entry_type {
            EntryType::WithdrawFreeze => {
                *self.open_freezes.entry(key).or_insert(0) += m.amount_minor;
            }
            EntryType::WithdrawUnfreeze | EntryType::WithdrawPayout => {
                if let Some(open) = self.open_freezes.get_mut(&key) {
                    *open -= m.amount_minor;
                    if *open <= 0 {
                        self.open_freezes.remove(&key);
                    }
                }
            }
            _ => {}
        }
    }
}

impl Decide for Wallet {
    /// 2: `open_freezes` (a version-1 snapshot lacks them and is ignored).
    const SNAPSHOT_VERSION: i32 = 2;
    /// Every wallet movement is a money fact users and finance are told about.
    const OUTBOX: bool = true;

    fn decide(&self, command: WalletCommand) -> Result<Vec<WalletEvent>, WalletError> {
        use WalletCommand as C;
        match command {
            C::Open(OpenWallet { user_id, currency }) => {
                if self.opened {
                    return Err(WalletError::AlreadyOpen);
                }
                Ok(vec![WalletEvent::WalletOpened {
                    user_id: user_id.as_str().to_owned(),
                    currency,
                }])
            }
            _ if !self.opened => Err(WalletError::NotFound),
            C::CreditPending(m) => self.move_funds(EntryType::CreditPending, m),
            C::ReleasePending(m) => self.move_funds(EntryType::ReleasePending, m),
            C::ReversePending(m) => self.move_funds(EntryType::ReversePending, m),
            C::FreezeForWithdrawal(m) => self.move_funds(EntryType::WithdrawFreeze, m),
            C::Unfreeze(m) => self.move_funds(EntryType::WithdrawUnfreeze, m),
            C::PayOutFrozen(m) => self.move_funds(EntryType::WithdrawPayout, m),
            C::PlaceRiskHold(m) => self.move_funds(EntryType::RiskHold, m),
            C::ReleaseRiskHold(m) => self.move_funds(EntryType::RiskHoldRelease, m),
            C::BlockWithdrawals(b) => {
                let key = block_key(b.ref_type.as_str(), b.ref_id.as_str());
                if self.withdrawal_blocks.contains_key(&key) {
                    return Err(WalletError::AlreadyBlocked { block: key });
                }
                if b.reason.as_ref().is_some_and(|r| r.len() > REASON_LEN_MAX) {
                    return Err(WalletError::ReasonTooLong {
                        max: REASON_LEN_MAX,
                    });
                }
                Ok(vec![WalletEvent::WithdrawalsBlocked {
                    ref_type: b.ref_type.as_str().to_owned(),
                    ref_id: b.ref_id.as_str().to_owned(),
                    reason: b.reason,
                }])
            }
            C::UnblockWithdrawals(b) => {
                let key = block_key(b.ref_type.as_str(), b.ref_id.as_str());
                if !self.withdrawal_blocks.contains_key(&key) {
                    return Err(WalletError::BlockNotFound { block: key });
                }
                Ok(vec![WalletEvent::WithdrawalsUnblocked {
                    ref_type: b.ref_type.as_str().to_owned(),
                    ref_id: b.ref_id.as_str().to_owned(),
                }])
            }
        }
    }

    fn check(&self, event: &WalletEvent) -> Result<(), InvariantViolation> {
        let opened_ok = matches!(event, WalletEvent::WalletOpened { .. }) != self.opened;
        if !opened_ok {
            return Err(InvariantViolation(format!(
                "{} on a wallet whose opened state is {}",
                event.name(),
                self.opened
            )));
        }
        match event {
            WalletEvent::WithdrawalsBlocked {
                ref_type, ref_id, ..
            } if self
                .withdrawal_blocks
                .contains_key(&block_key(ref_type, ref_id)) =>
            {
                return Err(InvariantViolation(format!(
                    "withdrawals already blocked by {ref_type}/{ref_id}"
                )));
            }
            WalletEvent::WithdrawalsUnblocked { ref_type, ref_id }
                if !self
                    .withdrawal_blocks
                    .contains_key(&block_key(ref_type, ref_id)) =>
            {
                return Err(InvariantViolation(format!(
                    "no withdrawal block {ref_type}/{ref_id} to lift"
                )));
            }
            _ => {}
        }
        let Some(m) = event.as_movement() else {
            return Ok(());
        };
        if m.before != self.balances {
            return Err(InvariantViolation(format!(
                "{} {}:{}: before {:?} is not the current balance {:?}",
                event.name(),
                m.ref_type,
                m.ref_id,
                m.before,
                self.balances
            )));
        }
        // Amount first: `delta` of a non-positive amount may overflow (i64::MIN).
        if m.amount_minor <= 0 || m.delta != m.entry_type.delta(m.amount_minor) {
            return Err(InvariantViolation(format!(
                "{} {}:{}: delta {:?} does not match {} of {}",
                event.name(),
                m.ref_type,
                m.ref_id,
                m.delta,
                m.entry_type.as_str(),
                m.amount_minor
            )));
        }
        if m.before.checked_add(&m.delta) != Some(m.after) {
            return Err(InvariantViolation(format!(
                "{} {}:{}: after {:?} != before + delta",
                event.name(),
                m.ref_type,
                m.ref_id,
                m.after
            )));
        }
        if let Some((b, flag)) = m.after.first_broken_flag() {
            return Err(InvariantViolation(format!(
                "{} {}:{}: {} would be negative, breaking its account's {}",
                event.name(),
                m.ref_type,
                m.ref_id,
                b.name(),
                flag.as_str()
            )));
        }
        Ok(())
    }

    fn ledger_ref(event: &WalletEvent) -> Option<LedgerRef> {
        event.as_movement().map(|m| LedgerRef {
            ref_type: m.ref_type.clone(),
            ref_id: m.ref_id.clone(),
            entry_type: m.entry_type.as_str().to_owned(),
        })
    }
}

impl Aggregate for Wallet {
    const TYPE: &'static str = WALLET_AGGREGATE_TYPE;
    type Command = WalletCommand;
    type Event = WalletEvent;
    type Error = WalletError;
    type Services = ();

    async fn handle(
        &mut self,
        command: WalletCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), WalletError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: WalletEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        match event {
            WalletEvent::WalletOpened { user_id, currency } => {
                self.opened = true;
                self.user_id = user_id;
                self.currency = currency;
            }
            WalletEvent::WithdrawalsBlocked {
                ref_type,
                ref_id,
                reason,
            } => {
                self.withdrawal_blocks.insert(
                    block_key(&ref_type, &ref_id),
                    WithdrawalBlock {
                        ref_type,
                        ref_id,
                        reason,
                    },
                );
            }
            WalletEvent::WithdrawalsUnblocked { ref_type, ref_id } => {
                self.withdrawal_blocks
                    .remove(&block_key(&ref_type, &ref_id));
            }
            other => {
                if let Some(m) = other.as_movement() {
                    self.balances = m.after;
                    self.track_freeze(m);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
