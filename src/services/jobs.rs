//! The single-item job kinds of paid services (seed 000's async-queue jobs), each
//! queued right after the action that needs it (`Ctx::enqueue`) with its cron scan as
//! the backstop, and run by [`ServiceJobs`]:
//!
//! | kind                      | key                  | queued by                         |
//! |---------------------------|----------------------|-----------------------------------|
//! | `payment_delivery`        | `order:{no}`         | a failed delivery after payment   |
//! | `video_no_show`           | `booking:{no}`       | activation, due 10 min after start |
//! | `video_call_finish`       | `booking:{no}`       | call start, due at its end        |
//! | `service_refund`          | `refund:{no}`        | a refund record (no-show, late)   |
//! | `im_members`              | `im:{artist}[:{fan}]`| a grant, an expiry                |
//! | `im_subscription_message` | `submsg:{order}`     | a grant                           |
//!
//! `im_members` retries after 10, 30, 60 and 300 s (seed 000); the others on the
//! same seconds schedule a few times, then their scan takes over. `rounds.rs` runs
//! them.

use crate::infra::jobs::{Backoff, JobKind, JobSubmit, BACKOFF_SECONDS_DEFAULT};
use factledger_aggregates::services::UserId;
use serde_json::json;

const fn single(name: &'static str, prefix: &'static str) -> JobKind {
    JobKind {
        lease_ms: 2 * 60 * 1_000,
        backoff: Backoff::Seconds(BACKOFF_SECONDS_DEFAULT),
        max_retry_count: 5,
        cap: Some(20),
        parallelism: 20,
        ..JobKind::new(name, prefix)
    }
}

pub static PAYMENT_DELIVERY: JobKind = single("payment_delivery", "PDLV");
pub static VIDEO_NO_SHOW: JobKind = single("video_no_show", "VNSH");
pub static VIDEO_CALL_FINISH: JobKind = single("video_call_finish", "VFIN");
pub static SERVICE_REFUND: JobKind = single("service_refund", "SRFD");
pub static IM_MEMBERS: JobKind = single("im_members", "IMEM");
pub static IM_SUBSCRIPTION_MESSAGE: JobKind = single("im_subscription_message", "IMSG");

/// Every single-item kind, for registration.
pub fn kinds() -> [&'static JobKind; 6] {
    [
        &PAYMENT_DELIVERY,
        &VIDEO_NO_SHOW,
        &VIDEO_CALL_FINISH,
        &SERVICE_REFUND,
        &IM_MEMBERS,
        &IM_SUBSCRIPTION_MESSAGE,
    ]
}

pub fn delivery_job(order_no: &str) -> JobSubmit {
    JobSubmit::plain(
        &PAYMENT_DELIVERY,
        format!("order:{order_no}"),
        json!({ "order_no": order_no }),
    )
}

pub fn no_show_job(booking_no: &str, due_at_ms: i64) -> JobSubmit {
    JobSubmit::plain(
        &VIDEO_NO_SHOW,
        format!("booking:{booking_no}"),
        json!({ "booking_no": booking_no }),
    )
    .due_at_ms(due_at_ms)
}

pub fn call_finish_job(booking_no: &str, due_at_ms: i64) -> JobSubmit {
    JobSubmit::plain(
        &VIDEO_CALL_FINISH,
        format!("booking:{booking_no}"),
        json!({ "booking_no": booking_no }),
    )
    .due_at_ms(due_at_ms)
}

pub fn refund_job(refund_no: &str) -> JobSubmit {
    JobSubmit::plain(
        &SERVICE_REFUND,
        format!("refund:{refund_no}"),
        json!({ "refund_no": refund_no }),
    )
}

/// Targeted (`fan` given) or full (every fan of the artist) membership sync.
pub fn im_members_job(artist: UserId, fan: Option<UserId>) -> JobSubmit {
    let key = match fan {
        Some(f) => format!("im:{artist}:{f}"),
        None => format!("im:{artist}"),
    };
    JobSubmit::fact_change(
        &IM_MEMBERS,
        key,
        json!({ "artist_id": artist.get(), "fan_user_id": fan.map(UserId::get) }),
    )
}

pub fn subscription_message_job(artist: UserId, fan: UserId, order_no: &str) -> JobSubmit {
    JobSubmit::plain(
        &IM_SUBSCRIPTION_MESSAGE,
        format!("submsg:{order_no}"),
        json!({ "artist_id": artist.get(), "fan_user_id": fan.get(), "order_no": order_no }),
    )
}
