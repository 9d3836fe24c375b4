//! The paid-services projection (seed 000, issue 18): orders with their recharges and
//! payment transactions, candy accounts, subscriptions and their grants, bookings with
//! their holds, refunds and IM group membership — the rows the HTTP reads, the cron
//! scans (order timeout close, delivery, expiry, no-show, call finish, refunds) and
//! the reconciliation read. Every event projects alone: it carries what it sets (a
//! candy movement its balances after, a status change its status), and a stream's
//! first event inserts its row.

pub mod tables;

pub use tables::*;

use crate::table::{Cell, Cells, Projector, RowChange, TableDef};
use crate::{ProjectedEvent, ProjectionError};
use chrono::{DateTime, SecondsFormat, Utc};
use factledger_aggregates::booking::{
    BookingEvent, BookingStatus, HoldState, NoShow, Party, BOOKING_AGGREGATE_TYPE,
};
use factledger_aggregates::candy::{CandyEvent, CANDY_AGGREGATE_TYPE};
use factledger_aggregates::im_member::{ImMemberEvent, IM_MEMBER_AGGREGATE_TYPE};
use factledger_aggregates::refund::{RefundEvent, RefundStatus, REFUND_AGGREGATE_TYPE};
use factledger_aggregates::service_order::{
    LateReason, OrderBusiness, OrderEvent, OrderStatus, ORDER_AGGREGATE_TYPE,
};
use factledger_aggregates::services::parse_pair_id;
use factledger_aggregates::subscription::{
    SubscriptionEvent, SubscriptionStatus, SUBSCRIPTION_AGGREGATE_TYPE,
};
use serde::de::DeserializeOwned;

/// The business type of a recharge order (only it has a recharge row).
const RECHARGE: &str = "RECHARGE";

/// Checkpoint name and `factledger rebuild services`.
pub const NAME: &str = "services";

/// An instant as every projection stores it: RFC 3339 UTC with microseconds.
pub fn ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn t(at: DateTime<Utc>) -> Cell {
    Cell::text(ts(at))
}

fn int(v: u64) -> Cell {
    Cell::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ServicesProjector;

impl Projector for ServicesProjector {
    fn name(&self) -> &'static str {
        NAME
    }
    fn version(&self) -> i32 {
        1
    }
    fn aggregate_types(&self) -> &'static [&'static str] {
        &[
            ORDER_AGGREGATE_TYPE,
            CANDY_AGGREGATE_TYPE,
            SUBSCRIPTION_AGGREGATE_TYPE,
            BOOKING_AGGREGATE_TYPE,
            REFUND_AGGREGATE_TYPE,
            IM_MEMBER_AGGREGATE_TYPE,
        ]
    }
    fn tables(&self) -> &'static [TableDef] {
        &TABLES
    }

    fn project(&self, e: &ProjectedEvent) -> Result<Vec<RowChange>, ProjectionError> {
        match e.aggregate_type {
            ORDER_AGGREGATE_TYPE => Ok(order(e, &decode(e)?)),
            CANDY_AGGREGATE_TYPE => candy(e, &decode(e)?),
            SUBSCRIPTION_AGGREGATE_TYPE => subscription(e, &decode(e)?),
            BOOKING_AGGREGATE_TYPE => Ok(booking(e, &decode(e)?)),
            REFUND_AGGREGATE_TYPE => Ok(refund(e, &decode(e)?)),
            IM_MEMBER_AGGREGATE_TYPE => im_member(e, &decode(e)?),
            _ => Ok(Vec::new()),
        }
    }
}

fn decode<T: DeserializeOwned>(e: &ProjectedEvent) -> Result<T, ProjectionError> {
    serde::Deserialize::deserialize(e.payload)
        .map_err(|err| e.fail(NAME, format!("does not decode: {err}")))
}

fn stamp(e: &ProjectedEvent) -> [(&'static str, Cell); 2] {
    [
        ("updated_at", Cell::text(e.recorded_at)),
        ("last_position", Cell::Int(e.global_position)),
    ]
}

fn update(table: &'static str, key: Cells, set: Cells) -> RowChange {
    RowChange::Update { table, key, set }
}

fn order(e: &ProjectedEvent, event: &OrderEvent) -> Vec<RowChange> {
    let key = || vec![("order_no", Cell::text(e.aggregate_id))];
    let status = |s: OrderStatus| {
        vec![
            ("status", Cell::Int(s.code())),
            ("status_name", Cell::text(s.as_str())),
        ]
    };
    let mut set: Cells = stamp(e).into();
    let mut out = Vec::new();
    let recharge = |status: &str| {
        update(
            CANDY_RECHARGES.name,
            key(),
            vec![
                ("status", Cell::text(status)),
                ("updated_at", Cell::text(e.recorded_at)),
            ],
        )
    };
    match event {
        OrderEvent::OrderCreated(o) => {
            let (artist, booking, candy, days) = match &o.business {
                OrderBusiness::Recharge { candy } => (None, None, Some(*candy), None),
                OrderBusiness::Subscription { artist_id, days } => {
                    (Some(artist_id.get()), None, None, Some(*days))
                }
                OrderBusiness::Booking {
                    booking_no,
                    artist_id,
                } => (Some(artist_id.get()), Some(booking_no.clone()), None, None),
            };
            let mut row = key();
            row.extend([
                ("user_id", int(o.user_id.get())),
                ("business_type", Cell::text(o.business.type_name())),
                ("artist_id", artist.map_or(Cell::Null, int)),
                ("booking_no", Cell::opt_text(booking)),
                ("candy", candy.map_or(Cell::Null, Cell::Int)),
                ("days", days.map_or(Cell::Null, Cell::Int)),
                ("method", Cell::text(o.method.as_str())),
                ("amount", Cell::Int(o.amount)),
                (
                    "currency",
                    Cell::opt_text(o.currency.map(|c| c.as_str().to_owned())),
                ),
                ("transaction_no", Cell::Null),
                ("created_at", t(o.created_at)),
                ("timeout_at", t(o.timeout_at)),
                ("paid_at", Cell::Null),
                ("delivered_at", Cell::Null),
                ("closed_at", Cell::Null),
                ("refund_no", Cell::Null),
            ]);
            row.extend(status(OrderStatus::Created));
            row.extend(stamp(e));
            out.push(RowChange::Insert {
                table: SERVICE_ORDERS.name,
                row,
            });
            if let OrderBusiness::Recharge { candy } = &o.business {
                out.push(RowChange::Insert {
                    table: CANDY_RECHARGES.name,
                    row: vec![
                        ("order_no", Cell::text(e.aggregate_id)),
                        ("user_id", int(o.user_id.get())),
                        ("candy", Cell::Int(*candy)),
                        ("status", Cell::text("PENDING")),
                        ("updated_at", Cell::text(e.recorded_at)),
                    ],
                });
            }
            return out;
        }
        OrderEvent::PaymentStarted { .. } => set.extend(status(OrderStatus::Paying)),
        OrderEvent::OrderPaid { payment, .. } => {
            set.extend(status(OrderStatus::Paid));
            set.push(("transaction_no", Cell::text(&payment.transaction_no)));
            set.push(("paid_at", t(payment.paid_at)));
            if payment.method.is_cash() {
                out.push(transaction(e, payment, "PAID"));
            }
        }
        OrderEvent::LatePaymentReceived { payment, reason } => {
            out.push(transaction(
                e,
                payment,
                match reason {
                    LateReason::Closed => "LATE_AFTER_CLOSE",
                    LateReason::AlreadyPaid => "DUPLICATE",
                },
            ));
        }
        OrderEvent::OrderDelivered { business, at } => {
            set.extend(status(OrderStatus::Delivered));
            set.push(("delivered_at", t(*at)));
            if business == RECHARGE {
                out.push(recharge("CREDITED"));
            }
        }
        OrderEvent::OrderClosed { business, at } => {
            set.extend(status(OrderStatus::Closed));
            set.push(("closed_at", t(*at)));
            if business == RECHARGE {
                out.push(recharge("CLOSED"));
            }
        }
        OrderEvent::OrderRefunded {
            refund_no,
            transaction_no,
            order_refunded,
            ..
        } => {
            set.push(("refund_no", Cell::text(refund_no)));
            if *order_refunded {
                set.extend(status(OrderStatus::Refunded));
            }
            out.push(update(
                PAYMENT_TRANSACTIONS.name,
                vec![
                    ("order_no", Cell::text(e.aggregate_id)),
                    ("transaction_no", Cell::text(transaction_no)),
                ],
                vec![
                    ("status", Cell::text("REFUNDED")),
                    ("refund_no", Cell::text(refund_no)),
                    ("updated_at", Cell::text(e.recorded_at)),
                ],
            ));
            // The stream says whether the order itself ends refunded (a closed one).
            out.push(RowChange::Update {
                table: SERVICE_ORDERS.name,
                key: key(),
                set: set.clone(),
            });
            return out;
        }
    }
    out.insert(0, update(SERVICE_ORDERS.name, key(), set));
    out
}

fn transaction(
    e: &ProjectedEvent,
    p: &factledger_aggregates::service_order::Payment,
    status: &str,
) -> RowChange {
    RowChange::Insert {
        table: PAYMENT_TRANSACTIONS.name,
        row: vec![
            ("order_no", Cell::text(e.aggregate_id)),
            ("transaction_no", Cell::text(&p.transaction_no)),
            ("method", Cell::text(p.method.as_str())),
            ("account_id", Cell::text(&p.account_id)),
            ("amount_minor", Cell::Int(p.amount_minor)),
            ("currency", Cell::text(&p.currency)),
            ("status", Cell::text(status)),
            ("refund_no", Cell::Null),
            ("paid_at", t(p.paid_at)),
            ("updated_at", Cell::text(e.recorded_at)),
        ],
    }
}

fn candy(e: &ProjectedEvent, event: &CandyEvent) -> Result<Vec<RowChange>, ProjectionError> {
    let user: i64 = e.aggregate_id.parse().map_err(|_| {
        e.fail(
            NAME,
            format!("candy account {} is not a user id", e.aggregate_id),
        )
    })?;
    let key = vec![("user_id", Cell::Int(user))];
    Ok(vec![match event {
        CandyEvent::CandyAccountOpened { .. } => {
            let mut row = key;
            row.extend([("balance", Cell::Int(0)), ("held", Cell::Int(0))]);
            row.extend(stamp(e));
            RowChange::Insert {
                table: CANDY_ACCOUNTS.name,
                row,
            }
        }
        moved => {
            let Some((_, after)) = moved.movement() else {
                return Ok(Vec::new());
            };
            let mut set: Cells = vec![
                ("balance", Cell::Int(after.balance)),
                ("held", Cell::Int(after.held)),
            ];
            set.extend(stamp(e));
            update(CANDY_ACCOUNTS.name, key, set)
        }
    }])
}

fn pair_key(e: &ProjectedEvent) -> Result<Cells, ProjectionError> {
    let (artist, fan) = parse_pair_id(e.aggregate_id)
        .ok_or_else(|| e.fail(NAME, format!("{} is not artist:fan", e.aggregate_id)))?;
    Ok(vec![
        ("artist_id", int(artist.get())),
        ("fan_user_id", int(fan.get())),
    ])
}

fn subscription(
    e: &ProjectedEvent,
    event: &SubscriptionEvent,
) -> Result<Vec<RowChange>, ProjectionError> {
    let key = pair_key(e)?;
    Ok(match event {
        SubscriptionEvent::SubscriptionGranted {
            artist_id,
            fan_user_id,
            order_no,
            period_start,
            expires_at,
            renewal,
            at,
            ..
        } => {
            let mut set: Cells = vec![
                ("status", Cell::Int(SubscriptionStatus::Active.code())),
                ("expires_at", t(*expires_at)),
                ("last_order_no", Cell::text(order_no)),
            ];
            set.extend(stamp(e));
            let grant = RowChange::Insert {
                table: SUBSCRIPTION_GRANTS.name,
                row: vec![
                    ("order_no", Cell::text(order_no)),
                    ("artist_id", int(artist_id.get())),
                    ("fan_user_id", int(fan_user_id.get())),
                    ("period_start", t(*period_start)),
                    ("expires_at", t(*expires_at)),
                    ("renewal", Cell::Int(i64::from(*renewal))),
                    ("granted_at", t(*at)),
                    ("message_queued", Cell::Int(0)),
                ],
            };
            let row = if e.sequence == 1 {
                let mut row = key;
                row.extend(set);
                RowChange::Insert {
                    table: SUBSCRIPTIONS.name,
                    row,
                }
            } else {
                update(SUBSCRIPTIONS.name, key, set)
            };
            vec![row, grant]
        }
        SubscriptionEvent::SubscriptionExpired { .. } => {
            let mut set: Cells = vec![("status", Cell::Int(SubscriptionStatus::Expired.code()))];
            set.extend(stamp(e));
            vec![update(SUBSCRIPTIONS.name, key, set)]
        }
        SubscriptionEvent::SubscriptionMessageQueued { order_no, .. } => vec![update(
            SUBSCRIPTION_GRANTS.name,
            vec![("order_no", Cell::text(order_no))],
            vec![("message_queued", Cell::Int(1))],
        )],
    })
}

fn booking_status(s: BookingStatus) -> [(&'static str, Cell); 2] {
    [
        ("status", Cell::Int(s.code())),
        ("status_name", Cell::text(s.as_str())),
    ]
}

fn hold(h: &HoldState) -> (&'static str, Cell) {
    ("hold_state", Cell::text(h.as_str()))
}

fn booking(e: &ProjectedEvent, event: &BookingEvent) -> Vec<RowChange> {
    let key = vec![("booking_no", Cell::text(e.aggregate_id))];
    let mut set: Cells = stamp(e).into();
    match event {
        BookingEvent::BookingRequested(c) => {
            let mut row = key;
            row.extend([
                ("order_no", Cell::text(&c.order_no)),
                ("fan_user_id", int(c.fan_user_id.get())),
                ("artist_id", int(c.artist_id.get())),
                ("start_at", t(c.start_at)),
                ("minutes", Cell::Int(c.minutes)),
                ("price_candy", Cell::Int(c.price_candy)),
                ("fan_joined_at", Cell::Null),
                ("artist_joined_at", Cell::Null),
                ("started_at", Cell::Null),
                ("ended_at", Cell::Null),
                ("duration_s", Cell::Null),
                ("abnormal", Cell::Int(0)),
                ("moderation_reason", Cell::Null),
                ("no_show_checked_at", Cell::Null),
                hold(&HoldState::Open),
                ("refund_no", Cell::Null),
            ]);
            row.extend(booking_status(BookingStatus::Pending));
            row.extend(set);
            return vec![RowChange::Insert {
                table: BOOKINGS.name,
                row,
            }];
        }
        BookingEvent::BookingActivated { .. } => set.extend(booking_status(BookingStatus::Booked)),
        BookingEvent::ParticipantJoined { party, first, at } => {
            let column = match party {
                Party::Fan => "fan_joined_at",
                Party::Artist => "artist_joined_at",
            };
            set.push((column, t(*at)));
            if *first {
                set.extend(booking_status(BookingStatus::Waiting));
            }
        }
        BookingEvent::CallStarted { at } => {
            set.extend(booking_status(BookingStatus::InCall));
            set.push(("started_at", t(*at)));
        }
        BookingEvent::CallFinished {
            ended_at,
            duration_s,
            ..
        } => {
            set.extend(booking_status(BookingStatus::Completed));
            set.push(("ended_at", t(*ended_at)));
            set.push(("duration_s", Cell::Int(*duration_s)));
            set.push(hold(&HoldState::Settled));
        }
        BookingEvent::ModerationFlagged { reason, .. } => {
            set.push(("moderation_reason", Cell::text(reason)));
        }
        BookingEvent::CallAborted {
            ended_at,
            duration_s,
            ..
        } => {
            set.extend(booking_status(BookingStatus::Completed));
            set.push(("ended_at", t(*ended_at)));
            set.push(("duration_s", Cell::Int(*duration_s)));
            set.push(("abnormal", Cell::Int(1)));
            set.push(hold(&HoldState::Forfeited));
        }
        BookingEvent::NoShowCheckDeferred { at } => set.push(("no_show_checked_at", t(*at))),
        BookingEvent::NoShowDecided { kind, refund, at } => {
            let status = match kind {
                NoShow::Artist => BookingStatus::ArtistNoShow,
                NoShow::Fan => BookingStatus::FanNoShow,
                NoShow::Both => BookingStatus::BothNoShow,
            };
            set.extend(booking_status(status));
            set.push(("no_show_checked_at", t(*at)));
            match refund {
                Some(r) => {
                    set.push(hold(&HoldState::RefundDue {
                        refund_no: r.refund_no.clone(),
                    }));
                    set.push(("refund_no", Cell::text(&r.refund_no)));
                }
                None => set.push(hold(&HoldState::Settled)),
            }
        }
        BookingEvent::BookingHoldRefunded { .. } => set.push(hold(&HoldState::Refunded)),
    }
    vec![update(BOOKINGS.name, key, set)]
}

fn refund(e: &ProjectedEvent, event: &RefundEvent) -> Vec<RowChange> {
    let key = vec![("refund_no", Cell::text(e.aggregate_id))];
    let status = |s: RefundStatus| {
        [
            ("status", Cell::Int(s.code())),
            ("status_name", Cell::text(s.as_str())),
        ]
    };
    let mut set: Cells = stamp(e).into();
    match event {
        RefundEvent::RefundRequested(r) => {
            let mut row = key;
            row.extend([
                ("order_no", Cell::text(&r.order_no)),
                ("booking_no", Cell::opt_text(r.booking_no.clone())),
                ("business", Cell::text(r.business.as_str())),
                ("method", Cell::text(r.method.as_str())),
                ("transaction_no", Cell::text(&r.transaction_no)),
                ("account_id", Cell::text(&r.account_id)),
                ("amount", Cell::Int(r.amount)),
                ("currency", Cell::text(&r.currency)),
                ("gateway_response", Cell::Null),
                ("gateway_refund_id", Cell::Null),
                ("failure_reason", Cell::Null),
                ("created_at", t(r.at)),
            ]);
            row.extend(status(RefundStatus::Pending));
            row.extend(set);
            return vec![RowChange::Insert {
                table: REFUNDS.name,
                row,
            }];
        }
        RefundEvent::RefundSubmitted { .. } => set.extend(status(RefundStatus::Refunding)),
        RefundEvent::RefundResponseRecorded { response, .. } => {
            set.push(("gateway_response", Cell::text(response)));
        }
        RefundEvent::RefundSucceeded {
            gateway_refund_id,
            response,
            ..
        } => {
            set.extend(status(RefundStatus::Succeeded));
            set.push(("gateway_response", Cell::text(response)));
            set.push((
                "gateway_refund_id",
                Cell::opt_text(gateway_refund_id.clone()),
            ));
        }
        RefundEvent::RefundFailed {
            reason, response, ..
        } => {
            set.extend(status(RefundStatus::Failed));
            set.push(("gateway_response", Cell::text(response)));
            set.push(("failure_reason", Cell::text(reason)));
        }
        RefundEvent::RefundClosed { response, .. } => {
            set.extend(status(RefundStatus::Closed));
            set.push(("gateway_response", Cell::text(response)));
        }
    }
    vec![update(REFUNDS.name, key, set)]
}

fn im_member(e: &ProjectedEvent, event: &ImMemberEvent) -> Result<Vec<RowChange>, ProjectionError> {
    let key = pair_key(e)?;
    let member_status = match event {
        ImMemberEvent::MemberAdded { .. } => 1,
        ImMemberEvent::MemberRemoved { .. } => 2,
    };
    let mut set: Cells = vec![("member_status", Cell::Int(member_status))];
    set.extend(stamp(e));
    Ok(vec![if e.sequence == 1 {
        let mut row = key;
        row.extend(set);
        RowChange::Insert {
            table: IM_GROUP_MEMBERS.name,
            row,
        }
    } else {
        update(IM_GROUP_MEMBERS.name, key, set)
    }])
}

/// Every generic projector of paid services.
pub fn all() -> Vec<std::sync::Arc<dyn Projector>> {
    vec![std::sync::Arc::new(ServicesProjector)]
}
