//! The last hour of the service's own metrics, for the console's charts: one sample
//! every [`SAMPLE_EVERY_MS_DEFAULT`] ms (`FACTLEDGER_CONSOLE_SAMPLE_MS` to change),
//! [`SAMPLES_MAX`] kept. A sample reads what `/metrics` exports — the Prometheus
//! handle's text: appends (units = commands written, with their latency histogram)
//! and HTTP requests — and every projector's status (position, lag in events and in
//! ms). Rates and mean latencies are differences between consecutive samples.
//!
//! The sampler task holds the history weakly: it stops when the console is dropped.

use crate::runtime::http::AppState;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

pub const SAMPLE_EVERY_MS_DEFAULT: u64 = 10_000;
/// An hour of samples at the default interval.
pub const SAMPLES_MAX: usize = 360;

/// Counters as read at one moment (cumulative).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Units appended (`factledger_store_appends_total`).
    pub appends: f64,
    /// `factledger_store_append_seconds` sum and count.
    pub append_seconds_sum: f64,
    pub append_seconds_count: f64,
    /// HTTP requests answered (`factledger_http_requests_total`).
    pub http_requests: f64,
}

/// One projector at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Lag {
    pub position: i64,
    pub lag_events: i64,
    pub lag_ms: i64,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub at_ms: i64,
    pub counters: Counters,
    pub projections: BTreeMap<String, Lag>,
}

pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// A history sampled by a task of its own from now on (one sample at once). The
    /// task holds only the metrics handle and the projectors' statuses, and the
    /// history weakly: a dropped console keeps nothing else alive.
    pub fn start(app: &AppState) -> Arc<History> {
        let source = Source {
            metrics: app.metrics.clone(),
            projections: app.projection_statuses.clone(),
        };
        let every = std::env::var("FACTLEDGER_CONSOLE_SAMPLE_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v >= 100)
            .unwrap_or(SAMPLE_EVERY_MS_DEFAULT);
        let history = Arc::new(History {
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES_MAX)),
        });
        history.push(source.sample());
        let weak: Weak<History> = Arc::downgrade(&history);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(every));
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(h) = weak.upgrade() else { return };
                h.push(source.sample());
            }
        });
        history
    }

    fn push(&self, s: Sample) {
        let mut q = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == SAMPLES_MAX {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// Every sample kept, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Per interval between consecutive samples: (end ms, units appended per second,
    /// mean append latency in ms (0 when none), HTTP requests per second).
    pub fn rates(&self) -> Vec<(i64, f64, f64, f64)> {
        let s = self.samples();
        s.windows(2)
            .map(|w| {
                let (a, b) = (&w[0], &w[1]);
                let secs = ((b.at_ms - a.at_ms).max(1)) as f64 / 1000.0;
                let n = b.counters.append_seconds_count - a.counters.append_seconds_count;
                let latency = if n > 0.0 {
                    (b.counters.append_seconds_sum - a.counters.append_seconds_sum) / n * 1000.0
                } else {
                    0.0
                };
                (
                    b.at_ms,
                    (b.counters.appends - a.counters.appends).max(0.0) / secs,
                    latency.max(0.0),
                    (b.counters.http_requests - a.counters.http_requests).max(0.0) / secs,
                )
            })
            .collect()
    }
}

/// What a sample reads.
struct Source {
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    projections: Arc<Vec<crate::runtime::projection::SharedStatus>>,
}

impl Source {
    fn sample(&self) -> Sample {
        let projections = self
            .projections
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|p| p.into_inner());
                (
                    s.name.clone(),
                    Lag {
                        position: s.position,
                        lag_events: s.lag_events,
                        lag_ms: s.lag_ms,
                    },
                )
            })
            .collect();
        Sample {
            at_ms: crate::infra::db::now_ms(),
            counters: parse(&self.metrics.render()),
            projections,
        }
    }
}

/// The counters from Prometheus text exposition (every label set summed).
pub fn parse(text: &str) -> Counters {
    let mut c = Counters::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap_or("");
        match name {
            "factledger_store_appends_total" => c.appends += v,
            "factledger_store_append_seconds_sum" => c.append_seconds_sum += v,
            "factledger_store_append_seconds_count" => c.append_seconds_count += v,
            "factledger_http_requests_total" => c.http_requests += v,
            _ => {}
        }
    }
    c
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_sum_every_label_set_and_skip_comments() {
        let text = "# TYPE factledger_store_appends_total counter\n\
                    factledger_store_appends_total{backend=\"sqlite\"} 7\n\
                    factledger_store_append_seconds_sum 0.5\n\
                    factledger_store_append_seconds_count 5\n\
                    factledger_http_requests_total{method=\"GET\",route=\"/health\",status=\"200\"} 3\n\
                    factledger_http_requests_total{method=\"POST\",route=\"/x\",status=\"201\"} 4\n\
                    factledger_other_total 99\n";
        let c = super::parse(text);
        assert_eq!(
            c,
            super::Counters {
                appends: 7.0,
                append_seconds_sum: 0.5,
                append_seconds_count: 5.0,
                http_requests: 7.0,
            }
        );
    }
}
