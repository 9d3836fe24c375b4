//! The shared vocabulary of seed 000's paid services (candy accounts, service orders,
//! subscriptions, bookings, refunds, IM membership), so those aggregates never import
//! each other: user ids, the candy unit and the payment methods.

use crate::money::{Currency, ParseError};
use serde::{Deserialize, Serialize};

/// The journal's currency code of candy: whole 1/100-candy units. `ZZC` lies in ISO
/// 4217's user-assigned range (`ZZA`–`ZZZ`), so it can never name a real currency;
/// requests never name it (it is not circulating), only the chart does.
pub const CANDY_CURRENCY_CODE: &str = "ZZC";

/// [`CANDY_CURRENCY_CODE`] as a currency of the chart.
pub fn candy_currency() -> Currency {
    // Three upper-case letters: always a stored-shape currency.
    Currency::from_stored(CANDY_CURRENCY_CODE).expect("ZZC has the shape of a currency code")
}

/// Largest candy amount of one movement (10^12 hundredths of a candy): far above any
/// price, far below overflow when thousands are summed.
pub const CANDY_AMOUNT_MAX: i64 = 1_000_000_000_000;

/// A user of the app (fan or artist): a positive integer, as in seed 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UserId(u64);

impl UserId {
    pub fn parse(value: i64) -> Result<UserId, ParseError> {
        if value <= 0 {
            return Err(ParseError::new("must be a positive integer"));
        }
        Ok(UserId(value as u64))
    }

    pub fn parse_str(s: &str) -> Result<UserId, ParseError> {
        let v: i64 = s
            .parse()
            .map_err(|_| ParseError::new("must be a positive integer"))?;
        UserId::parse(v)
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How an order is paid: candy from the payer's account, or cash through a gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentMethod {
    Candy,
    Wechat,
    Alipay,
    Apple,
}

impl PaymentMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentMethod::Candy => "CANDY",
            PaymentMethod::Wechat => "WECHAT",
            PaymentMethod::Alipay => "ALIPAY",
            PaymentMethod::Apple => "APPLE",
        }
    }

    pub fn parse(s: &str) -> Option<PaymentMethod> {
        Some(match s {
            "CANDY" => PaymentMethod::Candy,
            "WECHAT" => PaymentMethod::Wechat,
            "ALIPAY" => PaymentMethod::Alipay,
            "APPLE" => PaymentMethod::Apple,
            _ => return None,
        })
    }

    /// Whether the money comes through a cash gateway.
    pub fn is_cash(self) -> bool {
        self != PaymentMethod::Candy
    }
}

/// The `(artist, fan)` stream id of a subscription or an IM membership.
pub fn pair_id(artist: UserId, fan: UserId) -> String {
    format!("{artist}:{fan}")
}

/// The artist and fan of a pair id.
pub fn parse_pair_id(id: &str) -> Option<(UserId, UserId)> {
    let (a, f) = id.split_once(':')?;
    Some((UserId::parse_str(a).ok()?, UserId::parse_str(f).ok()?))
}
