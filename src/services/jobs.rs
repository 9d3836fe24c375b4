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
//! same seconds schedule a few times, then their scan takes over.

use super::ctx::Ctx;
use super::flow;
use crate::infra::jobs::{
    Backoff, ClaimedJob, JobFailure, JobHandler, JobKind, JobSubmit, RoundReport,
    BACKOFF_SECONDS_DEFAULT,
};
use async_trait::async_trait;
use factledger_aggregates::services::UserId;
use serde_json::{json, Value};

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
    JobSubmit::plain(
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

fn text(payload: &Value, field: &str) -> Result<String, JobFailure> {
    payload
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| JobFailure {
            exhaust: true,
            ..JobFailure::new(format!("payload: {field} must be a string"))
        })
}

/// Read a user id from a job payload (`field` required unless `optional`).
fn user(payload: &Value, field: &str) -> Result<Option<UserId>, JobFailure> {
    match payload.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .and_then(|n| UserId::parse(n).ok())
            .map(Some)
            .ok_or_else(|| JobFailure {
                exhaust: true,
                ..JobFailure::new(format!("payload: {field} must be a positive integer"))
            }),
    }
}

/// The handler of every single-item kind.
pub struct ServiceJobs {
    ctx: Ctx,
}

impl ServiceJobs {
    pub fn new(ctx: Ctx) -> ServiceJobs {
        ServiceJobs { ctx }
    }
}

#[async_trait]
impl JobHandler for ServiceJobs {
    async fn run(&self, job: &ClaimedJob) -> Result<RoundReport, JobFailure> {
        let payload = job.payload_json()?;
        let fence = Some(job.fence());
        let now = chrono::Utc::now();
        let ctx = &self.ctx;
        let summary = match job.kind {
            k if k == PAYMENT_DELIVERY.name => {
                let order_no = text(&payload, "order_no")?;
                flow::deliver(ctx, &order_no, now, fence, false).await?
            }
            k if k == VIDEO_NO_SHOW.name => {
                let booking_no = text(&payload, "booking_no")?;
                flow::no_show(ctx, &booking_no, now, fence).await?
            }
            k if k == VIDEO_CALL_FINISH.name => {
                let booking_no = text(&payload, "booking_no")?;
                flow::finish_call(ctx, &booking_no, now, fence).await?
            }
            k if k == SERVICE_REFUND.name => {
                let refund_no = text(&payload, "refund_no")?;
                flow::run_refund(ctx, &refund_no, now, fence).await?
            }
            k if k == IM_MEMBERS.name => {
                let artist = user(&payload, "artist_id")?.ok_or_else(|| JobFailure {
                    exhaust: true,
                    ..JobFailure::new("payload: artist_id must be a positive integer")
                })?;
                let fan = user(&payload, "fan_user_id")?;
                flow::sync_members(ctx, artist, fan, now, fence).await?
            }
            k if k == IM_SUBSCRIPTION_MESSAGE.name => {
                let (Some(artist), Some(fan)) =
                    (user(&payload, "artist_id")?, user(&payload, "fan_user_id")?)
                else {
                    return Err(JobFailure {
                        exhaust: true,
                        ..JobFailure::new("payload: artist_id and fan_user_id are required")
                    });
                };
                let order_no = text(&payload, "order_no")?;
                flow::queue_message(ctx, artist, fan, &order_no, now).await?
            }
            other => {
                return Err(JobFailure::new(format!(
                    "not a paid-services kind: {other}"
                )))
            }
        };
        Ok(RoundReport::done(summary))
    }
}
