//! The Access layer's Prometheus metrics: requests by status, route decisions by `matchedBy`,
//! delivery latency, envelopes the inbound policy gated (by channel, account and reason) and
//! bot-loop trips. Labelled counters and the latency histogram are `prometheus-client`
//! families; the plain counters are atomics other parts count into, read at scrape time. The
//! channel and account labels are those of declared accounts only (a gated envelope was
//! authenticated).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{Registry, Unit};

/// Upper bounds of the delivery latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    matched_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GatedLabels {
    channel: String,
    account: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutboundLabels {
    cause: &'static str,
    carrier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AccountLabels {
    channel: String,
    account: String,
}

pub(crate) struct Metrics {
    requests: Family<RequestLabels, Counter>,
    routes: Family<RouteLabels, Counter>,
    gated: Family<GatedLabels, Counter>,
    bot_loop_trips: Family<AccountLabels, Counter>,
    latency: Histogram,
    pub duplicates: AtomicU64,
    /// Turns and spawns a budget refused (approvals.md).
    pub budget_refusals: AtomicU64,
    /// Messages waiting behind another of their session, now.
    pub waiting: AtomicU64,
    /// Replies that became dead letters.
    pub reply_failures: std::sync::Arc<AtomicU64>,
    /// Outbox rows posted, by cause and carrier.
    posted: Family<OutboundLabels, Counter>,
    /// Outbox rows dead-lettered, by cause and carrier.
    dead: Family<OutboundLabels, Counter>,
    /// Outbox rows waiting for their carrier, as its last pass saw them.
    pub outbox_waiting: AtomicU64,
    /// Outbox rows held for want of a carrier, as its last pass saw them.
    pub outbox_held: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: Family::default(),
            routes: Family::default(),
            gated: Family::default(),
            bot_loop_trips: Family::default(),
            latency: Histogram::new(BUCKETS),
            duplicates: AtomicU64::default(),
            budget_refusals: AtomicU64::default(),
            waiting: AtomicU64::default(),
            reply_failures: Default::default(),
            posted: Family::default(),
            dead: Family::default(),
            outbox_waiting: AtomicU64::default(),
            outbox_held: AtomicU64::default(),
        }
    }
}

impl Metrics {
    pub(crate) fn request(&self, endpoint: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels { endpoint, status })
            .inc();
    }

    pub(crate) fn route(&self, matched_by: &'static str) {
        self.routes.get_or_create(&RouteLabels { matched_by }).inc();
    }

    /// An envelope the inbound policy did not deliver.
    pub(crate) fn gated(&self, channel: &str, account: &str, reason: &'static str) {
        self.gated
            .get_or_create(&GatedLabels {
                channel: channel.to_string(),
                account: account.to_string(),
                reason,
            })
            .inc();
    }

    pub(crate) fn bot_loop_tripped(&self, channel: &str, account: &str) {
        self.bot_loop_trips
            .get_or_create(&AccountLabels {
                channel: channel.to_string(),
                account: account.to_string(),
            })
            .inc();
    }

    /// An outbox row its carrier posted (`dead`: dead-lettered).
    pub(crate) fn outbound(&self, cause: &'static str, carrier: &'static str, dead: bool) {
        let family = if dead { &self.dead } else { &self.posted };
        family
            .get_or_create(&OutboundLabels { cause, carrier })
            .inc();
    }

    pub(crate) fn delivered(&self, took: Duration) {
        self.latency.observe(took.as_secs_f64());
    }

    /// Registers these metrics in a scrape's `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let now = |n: &AtomicU64| n.load(Ordering::Relaxed);
        registry.register(
            "deepcli_access_requests",
            "Requests by endpoint and HTTP status",
            self.requests.clone(),
        );
        registry.register(
            "deepcli_route_decisions",
            "Routed messages by matchedBy",
            self.routes.clone(),
        );
        registry.register(
            "deepcli_inbound_gated",
            "Envelopes the inbound policy did not deliver, by reason",
            self.gated.clone(),
        );
        registry.register(
            "deepcli_bot_loop_trips",
            "Bot pairs muted by bot-loop protection",
            self.bot_loop_trips.clone(),
        );
        registry.register_with_unit(
            "deepcli_delivery",
            "Time from a message's turn in its session to its recorded reply",
            Unit::Seconds,
            self.latency.clone(),
        );
        registry.register(
            "deepcli_duplicate_deliveries",
            "Racing duplicates answered by the first delivery",
            ConstCounter::new(now(&self.duplicates)),
        );
        registry.register(
            "deepcli_reply_sink_failures",
            "Replies kept as dead letters",
            ConstCounter::new(now(&self.reply_failures)),
        );
        registry.register(
            "deepcli_outbox_posted",
            "Messages deepcli said on its own that their carrier posted, by cause and carrier",
            self.posted.clone(),
        );
        registry.register(
            "deepcli_outbox_dead_letters",
            "Messages deepcli said on its own that could not be posted, by cause and carrier",
            self.dead.clone(),
        );
        registry.register(
            "deepcli_outbox_waiting",
            "Messages in the outbox waiting for their carrier",
            ConstGauge::new(now(&self.outbox_waiting)),
        );
        registry.register(
            "deepcli_outbox_held",
            "Messages in the outbox held: their account has no carrier (channels logs says why)",
            ConstGauge::new(now(&self.outbox_held)),
        );
        registry.register(
            "deepcli_access_waiting_messages",
            "Messages waiting now behind another message of their session",
            ConstGauge::new(now(&self.waiting)),
        );
        registry.register(
            "deepcli_budget_refusals",
            "Turns and spawns a budget refused",
            ConstCounter::new(now(&self.budget_refusals)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name and label the hand-written renderer printed, kept (tests/it and docs/ grep
    /// them).
    #[test]
    fn the_metric_names_and_labels_are_the_ones_docs_list() {
        let metrics = Metrics::default();
        metrics.request("inbound", 200);
        metrics.route("binding.peer");
        metrics.gated("slack", "de\"fault", "dm-disabled");
        metrics.bot_loop_tripped("slack", "bots");
        metrics.delivered(Duration::from_millis(30));
        metrics.duplicates.fetch_add(1, Ordering::Relaxed);
        metrics.reply_failures.fetch_add(2, Ordering::Relaxed);
        metrics.waiting.fetch_add(3, Ordering::Relaxed);
        metrics.budget_refusals.fetch_add(4, Ordering::Relaxed);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let (_, text) = crate::metrics::encode(&registry, None);
        for line in [
            "deepcli_access_requests_total{endpoint=\"inbound\",status=\"200\"} 1",
            "deepcli_route_decisions_total{matched_by=\"binding.peer\"} 1",
            "deepcli_inbound_gated_total{channel=\"slack\",account=\"de\\\"fault\",reason=\"dm-disabled\"} 1",
            "deepcli_bot_loop_trips_total{channel=\"slack\",account=\"bots\"} 1",
            "# TYPE deepcli_delivery_seconds histogram",
            "deepcli_delivery_seconds_bucket{le=\"0.025\"} 0",
            "deepcli_delivery_seconds_bucket{le=\"0.05\"} 1",
            "deepcli_delivery_seconds_bucket{le=\"1\"} 1",
            "deepcli_delivery_seconds_bucket{le=\"+Inf\"} 1",
            "deepcli_delivery_seconds_count 1",
            "deepcli_duplicate_deliveries_total 1",
            "deepcli_reply_sink_failures_total 2",
            "# TYPE deepcli_access_waiting_messages gauge",
            "deepcli_access_waiting_messages 3",
            "deepcli_budget_refusals_total 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
    }
}
