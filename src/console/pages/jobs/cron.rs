//! The cron part of the jobs page (`GET /v1/cron`): the scheduler lease (who fires,
//! until when) and each schedule with its next fire time, skipped firings and newest
//! firings with their jobs.
//!
//! Test hooks: `#cron-lease[data-owner][data-live]`, rows `#cron-<name>` with
//! `data-next-fire-ms`.

use super::super::super::api::Problem;
use super::super::super::layout::{self, group};
use super::{id_part, job_href, text};
use maud::{html, Markup};
use serde_json::Value;

fn ms(v: &Value) -> String {
    v.as_i64()
        .map(layout::time_ms)
        .unwrap_or_else(|| "—".to_owned())
}

/// The section, or the API's refusal in its place.
pub(super) fn section(cron: Result<Value, Problem>) -> Markup {
    let cron = match cron {
        Ok(c) => c,
        Err(p) => return layout::problem_box(&p),
    };
    let lease = &cron["lease"];
    let live = lease["live"] == true;
    let schedules = cron["schedules"].as_array().cloned().unwrap_or_default();
    html! {
        div.cards {
            div.card #cron-lease data-owner=(text(lease, "owner")) data-live=(live) {
                div.label { "Scheduler lease holder" }
                div.value { (lease["owner"].as_str().unwrap_or("nobody")) }
                div.label {
                    @if live { span.ok { "live" } } @else { span.bad { "expired" } }
                    " · until " (ms(&lease["lease_until_ms"])) " · epoch " (lease["epoch"].as_i64().unwrap_or(0))
                }
                div.label { "acquired " (ms(&lease["acquired_at_ms"])) " · renewed " (ms(&lease["renewed_at_ms"])) }
            }
        }
        @if schedules.is_empty() { p.muted #no-schedules { "No cron schedules." } } @else {
            table #cron-schedules {
                thead { tr {
                    th { "Schedule" } th { "Expression" } th { "Job kind" } th { "Next fire" }
                    th { "Last handled" } th.num { "Skipped" } th { "Newest firings" }
                } }
                tbody {
                    @for s in &schedules {
                        @let name = text(s, "name");
                        tr id=(format!("cron-{}", id_part(name))) data-name=(name)
                            data-next-fire-ms=(s["next_fire_at_ms"].as_i64().map(|v| v.to_string()).unwrap_or_default()) {
                            td { strong { (name) } @if s["registered_here"] != true { " " small.muted { "(not registered here)" } } }
                            td { code { (text(s, "expression")) } }
                            td { a href=(format!("/console/jobs?kind={}", super::super::super::api::enc(text(s, "job_kind")))) { (text(s, "job_kind")) } }
                            td.next-fire { (ms(&s["next_fire_at_ms"])) }
                            td { (ms(&s["cursor_ms"])) }
                            td.num { (group(s["skipped_firings"].as_i64().unwrap_or(0))) }
                            td {
                                @for f in s["last_firings"].as_array().into_iter().flatten() {
                                    div {
                                        (ms(&f["fire_at_ms"])) " → "
                                        a href=(job_href(text(f, "job_code"))) { code { (text(f, "job_code")) } }
                                        " " (f["job_status"].as_str().unwrap_or("purged"))
                                        " " small.muted { "by " (text(f, "owner")) " (epoch " (f["lease_epoch"].as_i64().unwrap_or(0)) ")" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
