//! The Access layer's Prometheus metrics: requests by status, route decisions by `matchedBy`,
//! delivery latency, envelopes the inbound policy gated (by channel, account and reason) and
//! bot-loop trips. Counters are atomics or short-held maps; rendering is text. The channel and
//! account labels are those of declared accounts only (a gated envelope was authenticated).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the delivery latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    routes: Mutex<BTreeMap<&'static str, u64>>,
    gated: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    bot_loop_trips: Mutex<BTreeMap<(String, String), u64>>,
    latency: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    pub duplicates: AtomicU64,
    /// Turns and spawns a budget refused (approvals.md).
    pub budget_refusals: AtomicU64,
    /// Messages waiting behind another of their session, now.
    pub waiting: AtomicU64,
    /// Replies that became dead letters.
    pub reply_failures: std::sync::Arc<AtomicU64>,
}

impl Metrics {
    pub fn request(&self, endpoint: &'static str, status: u16) {
        if let Ok(mut map) = self.requests.lock() {
            *map.entry((endpoint, status)).or_default() += 1;
        }
    }

    pub fn route(&self, matched_by: &'static str) {
        if let Ok(mut map) = self.routes.lock() {
            *map.entry(matched_by).or_default() += 1;
        }
    }

    /// An envelope the inbound policy did not deliver.
    pub fn gated(&self, channel: &str, account: &str, reason: &'static str) {
        if let Ok(mut map) = self.gated.lock() {
            *map.entry((channel.to_string(), account.to_string(), reason))
                .or_default() += 1;
        }
    }

    pub fn bot_loop_tripped(&self, channel: &str, account: &str) {
        if let Ok(mut map) = self.bot_loop_trips.lock() {
            *map.entry((channel.to_string(), account.to_string()))
                .or_default() += 1;
        }
    }

    pub fn delivered(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(&self.latency) {
            if seconds <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Appends the Prometheus text of these metrics to `out`.
    pub fn render(&self, out: &mut String) {
        out.push_str("# TYPE deepcli_access_requests_total counter\n");
        if let Ok(map) = self.requests.lock() {
            for ((endpoint, status), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "deepcli_access_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# TYPE deepcli_route_decisions_total counter\n");
        if let Ok(map) = self.routes.lock() {
            for (matched_by, n) in map.iter() {
                let _ = writeln!(
                    out,
                    "deepcli_route_decisions_total{{matched_by=\"{matched_by}\"}} {n}"
                );
            }
        }
        out.push_str("# TYPE deepcli_inbound_gated_total counter\n");
        if let Ok(map) = self.gated.lock() {
            for ((channel, account, reason), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "deepcli_inbound_gated_total{{channel=\"{}\",account=\"{}\",reason=\"{reason}\"}} {n}",
                    label(channel),
                    label(account)
                );
            }
        }
        out.push_str("# TYPE deepcli_bot_loop_trips_total counter\n");
        if let Ok(map) = self.bot_loop_trips.lock() {
            for ((channel, account), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "deepcli_bot_loop_trips_total{{channel=\"{}\",account=\"{}\"}} {n}",
                    label(channel),
                    label(account)
                );
            }
        }
        out.push_str("# TYPE deepcli_delivery_seconds histogram\n");
        for (bound, count) in BUCKETS.iter().zip(&self.latency) {
            let _ = writeln!(
                out,
                "deepcli_delivery_seconds_bucket{{le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "deepcli_delivery_seconds_bucket{{le=\"+Inf\"}} {count}\n\
             deepcli_delivery_seconds_sum {}\n\
             deepcli_delivery_seconds_count {count}",
            self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "# TYPE deepcli_duplicate_deliveries_total counter\ndeepcli_duplicate_deliveries_total {}\n\
             # TYPE deepcli_reply_sink_failures_total counter\ndeepcli_reply_sink_failures_total {}\n\
             # TYPE deepcli_access_waiting_messages gauge\ndeepcli_access_waiting_messages {}\n\
             # TYPE deepcli_budget_refusals_total counter\ndeepcli_budget_refusals_total {}",
            self.duplicates.load(Ordering::Relaxed),
            self.reply_failures.load(Ordering::Relaxed),
            self.waiting.load(Ordering::Relaxed),
            self.budget_refusals.load(Ordering::Relaxed),
        );
    }
}

/// A label value in the text format: backslash, double quote and line feed escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
