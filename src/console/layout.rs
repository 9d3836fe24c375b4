//! The console's page chrome and the pieces every page uses: money and time
//! formatting, links to the pages that explain a figure, action forms (drawn only
//! for sessions that may act, each with the session's CSRF token), problem boxes and
//! SVG line charts (no script, no third-party asset).

use super::api::{enc, Problem};
use super::session::Session;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

/// The navigation: (path, label).
pub const NAV: &[(&str, &str)] = &[
    ("/console", "Search"),
    ("/console/projections", "Projections"),
    ("/console/reconciliations", "Reconciliation"),
    ("/console/jobs", "Jobs & cron"),
    ("/console/bills", "Bills"),
    ("/console/withdrawals", "Withdrawals"),
    ("/console/bookings", "Bookings"),
    ("/console/metrics", "Metrics"),
];

/// A whole page: head, navigation (with `active` marked), who is signed in, the
/// sign-out form, and `body`.
pub fn page(session: &Session, title: &str, active: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · factledger console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/console" { "factledger" }
                    nav {
                        @for (href, label) in NAV {
                            a href=(href) class=[(*href == active).then_some("active")] { (label) }
                        }
                    }
                    div.who {
                        span #who data-role=(session.role().as_str()) {
                            (session.actor()) " · " (session.role().as_str())
                        }
                        form method="post" action="/console/sign-out" {
                            input type="hidden" name="csrf" value=(session.csrf());
                            button #sign-out type="submit" { "Sign out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// A page answer (200).
pub fn ok(markup: Markup) -> Response {
    markup.into_response()
}

/// The page of a read the API refused (its status, code, field and detail).
pub fn problem_page(session: &Session, title: &str, active: &str, p: &Problem) -> Response {
    let status = if p.status.is_client_error() || p.status.is_server_error() {
        p.status
    } else {
        StatusCode::BAD_GATEWAY
    };
    (status, page(session, title, active, problem_box(p))).into_response()
}

/// A problem, inline.
pub fn problem_box(p: &Problem) -> Markup {
    html! {
        div.problem role="alert" {
            strong { (p.status.as_u16()) " " (p.code) }
            @if let Some(f) = &p.field { " · field " code { (f) } }
            ": " (p.detail)
        }
    }
}

/// A notice after an action (e.g. "job retried"), from the `done` query value.
pub fn notice(text: Option<&str>) -> Markup {
    html! { @if let Some(t) = text { div.notice role="status" { (t) } } }
}

/// A POST form for one action, drawn only when the session may act: hidden fields,
/// the CSRF token and one button. `id` names the button for tests and links.
pub fn action(
    session: &Session,
    path: &str,
    id: &str,
    label: &str,
    fields: &[(&str, &str)],
) -> Markup {
    html! {
        @if session.can_act() {
            form.action method="post" action=(path) {
                input type="hidden" name="csrf" value=(session.csrf());
                @for (k, v) in fields { input type="hidden" name=(k) value=(v); }
                button type="submit" id=(id) data-action=(label) { (label) }
            }
        }
    }
}

/// A whole amount of minor units with thousands separators and its currency.
pub fn money(minor: i64, currency: &str) -> Markup {
    html! { span.money { (group(minor)) " " small { (currency) } } }
}

/// `1234567` as `1,234,567` (minor units: no decimal point is invented).
pub fn group(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if v < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Epoch milliseconds as UTC `YYYY-MM-DD HH:MM:SS`.
pub fn time_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// The stream page of one aggregate, at `sequence` when given.
pub fn stream_href(aggregate_type: &str, aggregate_id: &str, sequence: Option<i64>) -> String {
    let mut h = format!(
        "/console/streams/{}/{}",
        enc(aggregate_type),
        enc(aggregate_id)
    );
    if let Some(s) = sequence {
        h.push_str(&format!("?from={s}#seq-{s}"));
    }
    h
}

/// The page explaining the event at a global position ("why").
pub fn event_href(position: i64) -> String {
    format!("/console/events/{position}")
}

/// A JSON value, pretty-printed in a `<pre>`.
pub fn json_block(v: &serde_json::Value) -> Markup {
    html! { pre.json { (serde_json::to_string_pretty(v).unwrap_or_default()) } }
}

/// One series of a chart: a label and its points (epoch ms, value).
pub struct Series<'a> {
    pub label: &'a str,
    pub points: Vec<(i64, f64)>,
}

/// A line chart of `series` over time, as inline SVG (axis labels: the window's start
/// and end, the largest value). Empty series draw "no samples yet".
pub fn chart(title: &str, unit: &str, series: &[Series]) -> Markup {
    const W: f64 = 640.0;
    const H: f64 = 160.0;
    const PAD: f64 = 36.0;
    let all = series.iter().flat_map(|s| s.points.iter());
    let (t0, t1) = all.clone().fold((i64::MAX, i64::MIN), |(a, b), (t, _)| {
        (a.min(*t), b.max(*t))
    });
    let vmax = all.fold(0.0f64, |m, (_, v)| m.max(*v));
    let vmax = if vmax <= 0.0 { 1.0 } else { vmax };
    let span = t1.saturating_sub(t0).max(1) as f64;
    let x = |t: i64| PAD + (t - t0) as f64 / span * (W - 2.0 * PAD);
    let y = |v: f64| H - PAD / 2.0 - v / vmax * (H - PAD);
    let colors = [
        "#1f6feb", "#d29922", "#2da44e", "#cf222e", "#8250df", "#57606a",
    ];
    html! {
        figure.chart data-title=(title) {
            figcaption { (title) " (" (unit) ")" }
            @if t0 > t1 {
                p.muted { "no samples yet" }
            } @else {
                svg viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(title) {
                    line x1=(PAD) y1=(H - PAD / 2.0) x2=(W - PAD) y2=(H - PAD / 2.0) stroke="#999" {}
                    line x1=(PAD) y1=(PAD / 2.0) x2=(PAD) y2=(H - PAD / 2.0) stroke="#999" {}
                    text x="2" y=(PAD / 2.0 + 4.0) font-size="10" { (short(vmax)) }
                    text x="2" y=(H - PAD / 2.0) font-size="10" { "0" }
                    text x=(PAD) y=(H - 4.0) font-size="10" { (clock(t0)) }
                    text x=(W - PAD - 40.0) y=(H - 4.0) font-size="10" { (clock(t1)) }
                    @for (i, s) in series.iter().enumerate() {
                        polyline fill="none" stroke=(colors[i % colors.len()]) stroke-width="1.5"
                            points=(s.points.iter().map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v))).collect::<Vec<_>>().join(" ")) {}
                    }
                }
                ul.legend {
                    @for (i, s) in series.iter().enumerate() {
                        li { svg.swatch width="10" height="10" { rect width="10" height="10" fill=(colors[i % colors.len()]) {} } " " (s.label)
                            @if let Some((_, v)) = s.points.last() { " · now " (short(*v)) } }
                    }
                }
            }
        }
    }
}

fn short(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%S").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_minor_units_by_thousands() {
        assert_eq!(super::group(0), "0");
        assert_eq!(super::group(999), "999");
        assert_eq!(super::group(1_000), "1,000");
        assert_eq!(super::group(-1_234_567), "-1,234,567");
        assert_eq!(super::group(i64::MIN), "-9,223,372,036,854,775,808");
    }
}
