//! Payouts to affiliates' bank accounts through a payout provider. For now the
//! provider boundary only: [`provider`] (the trait every provider implements and its
//! created / refused / unknown outcomes) and [`xendit`] (the Xendit adapter, tested
//! against `tools/payout-sim`).

pub mod provider;
pub mod xendit;
