//! `/metrics`: one `prometheus-client` [`Registry`] per scrape, which each serving part (the
//! Access layer, the Hub, the adapters, the controller) fills with its families — live ones it
//! counts into, and values read at scrape time ([`Rows`], [`SumCount`]) — and one encoding of
//! it. Owns the exposition format and its content negotiation; must not know any part's
//! metrics.
//!
//! The format: OpenMetrics 1.0 text to a scraper that asks for it (Prometheus does, in its
//! `Accept`), Prometheus text 0.0.4 to everyone else (curl, older scrapers). Both come from the
//! same registry, so names and labels are the same: a counter registered as `x` is the sample
//! `x_total` in both (its `# TYPE` line names `x` in OpenMetrics, `x_total` in 0.0.4).

use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
pub(crate) use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of an OpenMetrics text exposition.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exposition of `registry` in the format `accept` asks for: its content type and text.
pub(crate) fn encode(registry: &Registry, accept: Option<&str>) -> (&'static str, String) {
    let mut text = String::new();
    // Writing into a String fails only if an encoder does; ours do not.
    if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        let _ = prometheus_client::encoding::text::encode(&mut text, registry);
        (OPENMETRICS, text)
    } else {
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, registry);
        (
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            text,
        )
    }
}

/// `GET /metrics`'s answer: [`encode`] for the request's `Accept`.
pub(crate) fn respond(registry: &Registry, headers: &HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let (content_type, text) = encode(registry, accept);
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// A family of values read at scrape time (from a map, a snapshot), in the order given: one
/// `M` (a `ConstCounter`, a `ConstGauge`) per label set.
#[derive(Debug)]
pub(crate) struct Rows<L, M>(pub Vec<(L, M)>);

impl<L, M> EncodeMetric for Rows<L, M>
where
    L: EncodeLabelSet,
    M: EncodeMetric + TypedMetric,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, metric) in &self.0 {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    /// No rows, no family: as a live `Family` with no label set yet.
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A distribution known only by its sum and count, read at scrape time: a histogram with the
/// `+Inf` bucket alone (what a summary without quantiles says, in a type both formats have).
#[derive(Debug)]
pub(crate) struct SumCount {
    pub sum: f64,
    pub count: u64,
}

impl EncodeMetric for SumCount {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(
            self.sum,
            self.count,
            &[(f64::INFINITY, self.count)],
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::{ConstCounter, Counter};
    use prometheus_client::metrics::gauge::ConstGauge;

    use super::*;

    fn registry() -> Registry {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        counter.inc_by(3);
        registry.register("deepcli_things", "Things", counter);
        registry.register(
            "deepcli_by_label",
            "By label",
            Rows(vec![
                ([("who", "a\"b\\c\nd".to_string())], ConstCounter::new(1u64)),
                ([("who", "plain".to_string())], ConstCounter::new(2u64)),
            ]),
        );
        registry.register("deepcli_level", "Level", ConstGauge::new(7i64));
        registry.register_with_unit(
            "deepcli_took",
            "Took",
            Unit::Seconds,
            SumCount { sum: 1.5, count: 2 },
        );
        registry
    }

    #[test]
    fn without_an_accept_header_it_is_prometheus_text() {
        let (content_type, text) = encode(&registry(), None);
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        for line in [
            "# TYPE deepcli_things_total counter",
            "deepcli_things_total 3",
            "deepcli_by_label_total{who=\"plain\"} 2",
            "# TYPE deepcli_level gauge",
            "deepcli_level 7",
            "# TYPE deepcli_took_seconds histogram",
            "deepcli_took_seconds_bucket{le=\"+Inf\"} 2",
            "deepcli_took_seconds_sum 1.5",
            "deepcli_took_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn a_label_value_is_escaped() {
        let (_, text) = encode(&registry(), None);
        assert!(
            text.contains("deepcli_by_label_total{who=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn a_scraper_that_asks_for_openmetrics_gets_it() {
        // What Prometheus sends.
        let accept = "application/openmetrics-text;version=1.0.0;q=0.5,\
                      application/openmetrics-text;version=0.0.1;q=0.4,\
                      text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        let (content_type, text) = encode(&registry(), Some(accept));
        assert_eq!(content_type, OPENMETRICS);
        for line in [
            "# TYPE deepcli_things counter",
            "deepcli_things_total 3",
            "# UNIT deepcli_took_seconds seconds",
            "deepcli_took_seconds_bucket{le=\"+Inf\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
