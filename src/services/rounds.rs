//! One round of a single-item job of paid services (the kinds of `jobs.rs`): the
//! payload read, the step run through `flow` with the round's fence.

use super::ctx::Ctx;
use super::flow;
use super::jobs::{
    IM_MEMBERS, IM_SUBSCRIPTION_MESSAGE, PAYMENT_DELIVERY, SERVICE_REFUND, VIDEO_CALL_FINISH,
    VIDEO_NO_SHOW,
};
use crate::infra::jobs::{ClaimedJob, JobFailure, JobHandler, RoundReport};
use async_trait::async_trait;
use factledger_aggregates::services::UserId;
use serde_json::Value;

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
