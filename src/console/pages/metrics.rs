//! Metrics (issue 20 item 9): the last hour of the service's own metrics, as the
//! console samples them ([`crate::console::history`]): command rate (units appended
//! per second), mean append latency, HTTP request rate, and projection lag (the
//! largest across projectors, and each projector's) as charts; the newest numbers in
//! cards.
//!
//! Test hooks: cards `#rate-appends`, `#latency-append`, `#rate-http`, `#lag-max`,
//! `#samples` (each with `data-value`); charts `figure.chart[data-title=…]` titled
//! "command rate", "append latency", "HTTP request rate", "projection lag (max)",
//! "projection lag per projector".

use super::super::layout::{self, chart, group, Series};
use super::super::session::Session;
use super::super::Console;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use maud::html;
use std::collections::BTreeMap;

const ACTIVE: &str = "/console/metrics";

pub(super) fn routes() -> Router<Console> {
    Router::new().route("/console/metrics", get(page))
}

/// A rate or latency for a card: two decimals.
fn fixed(v: f64) -> String {
    format!("{v:.2}")
}

async fn page(State(console): State<Console>, session: Session) -> Response {
    let samples = console.history.samples();
    let rates = console.history.rates();
    let last = rates.last().copied();
    let (appends, latency, http) = last
        .map(|(_, a, l, h)| (a, l, h))
        .unwrap_or((0.0, 0.0, 0.0));
    let lag_now = samples
        .last()
        .map(|s| {
            s.projections
                .values()
                .map(|l| l.lag_events)
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let lag_max: Vec<(i64, f64)> = samples
        .iter()
        .map(|s| {
            let m = s
                .projections
                .values()
                .map(|l| l.lag_events)
                .max()
                .unwrap_or(0);
            (s.at_ms, m as f64)
        })
        .collect();
    let mut per: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
    for s in &samples {
        for (name, l) in &s.projections {
            per.entry(name.as_str())
                .or_default()
                .push((s.at_ms, l.lag_events as f64));
        }
    }
    let per_series: Vec<Series> = per
        .into_iter()
        .map(|(label, points)| Series { label, points })
        .collect();
    let window = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => format!(
            "{} to {}",
            layout::time_ms(a.at_ms),
            layout::time_ms(b.at_ms)
        ),
        _ => "no samples yet".to_owned(),
    };
    let body = html! {
        p.muted #window { "Sampled by the console from the service's own metrics: " (window) ". Rates are differences between consecutive samples." }
        div.cards {
            div.card { div.label { "Command rate (units appended/s)" } div.value #rate-appends data-value=(fixed(appends)) { (fixed(appends)) } }
            div.card { div.label { "Append latency (mean ms)" } div.value #latency-append data-value=(fixed(latency)) { (fixed(latency)) } }
            div.card { div.label { "HTTP requests/s" } div.value #rate-http data-value=(fixed(http)) { (fixed(http)) } }
            div.card { div.label { "Projection lag now (max events)" } div.value #lag-max data-value=(lag_now) class=[(lag_now > 0).then_some("bad")] { (group(lag_now)) } }
            div.card { div.label { "Samples kept" } div.value #samples data-value=(samples.len()) { (samples.len()) } }
        }
        @if let Some(s) = samples.last() {
            table #counters {
                thead { tr { th { "Counter (cumulative, at " (layout::time_ms(s.at_ms)) ")" } th.num { "Value" } } }
                tbody {
                    tr { td { "units appended" } td.num #total-appends { (group(s.counters.appends as i64)) } }
                    tr { td { "appends timed" } td.num { (group(s.counters.append_seconds_count as i64)) } }
                    tr { td { "HTTP requests" } td.num #total-http { (group(s.counters.http_requests as i64)) } }
                }
            }
        }
        (chart("command rate", "units appended/s", &[Series { label: "appends/s", points: rates.iter().map(|r| (r.0, r.1)).collect() }]))
        (chart("append latency", "mean ms", &[Series { label: "mean append ms", points: rates.iter().map(|r| (r.0, r.2)).collect() }]))
        (chart("HTTP request rate", "requests/s", &[Series { label: "requests/s", points: rates.iter().map(|r| (r.0, r.3)).collect() }]))
        (chart("projection lag (max)", "events", &[Series { label: "max lag", points: lag_max }]))
        (chart("projection lag per projector", "events", &per_series))
        p { a href="/console/projections" { "Each projector's position, error and rebuild" } }
    };
    layout::ok(layout::page(&session, "Metrics", ACTIVE, body))
}
