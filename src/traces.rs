//! Traces (`deepcli up --otlp-endpoint URL`): one OpenTelemetry trace per inbound message and
//! per Hub run, sent to a collector over OTLP/HTTP (protobuf). Off by default.
//!
//! The spans are `tracing` spans at `debug` level, made here and nowhere else, so a trace reads
//! the same whoever starts it:
//!
//! * a root: [`inbound`] (a message a door or an adapter hands in) or [`run`] (a Hub run, linked
//!   to the tool call that started it);
//! * inside it: [`gate`] (the inbound policy), [`queue_wait`] (the session's FIFO),
//!   [`runtime_turn`] (the agent's turn), [`hub_tool`] (each Hub tool call the agent makes during
//!   that turn, a child of the turn), [`outbound_post`] (each post to a platform or a reply sink).
//!
//! Off, nothing listens to them: a disabled span costs one cached check. On, the OpenTelemetry
//! layer takes the spans (never the log events) and the log lines show the spans they are in,
//! the root's with its `trace_id`; the same id is stored with the inbound delivery and the run,
//! so `deepcli audit` shows it ([`id`]).

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The exporter in force: its spans are flushed and its thread stopped when it is dropped, which
/// must happen outside the async runtime (its HTTP client blocks).
pub(crate) struct Exporter {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces not all sent at exit");
        }
    }
}

/// Where spans go for a collector whose OTLP/HTTP base is `endpoint`: `http://host:4318` sends
/// to `http://host:4318/v1/traces`, as `OTEL_EXPORTER_OTLP_ENDPOINT` does; a URL that already
/// ends in `/v1/traces` is kept.
pub(crate) fn traces_url(endpoint: &str) -> Result<String, String> {
    let refused = |why: String| {
        format!(
            "--otlp-endpoint `{endpoint}` is not an http(s) URL of a collector{why}; write its OTLP/HTTP base, e.g. http://127.0.0.1:4318"
        )
    };
    let url = reqwest::Url::parse(endpoint).map_err(|e| refused(format!(" ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(refused(String::new()));
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    })
}

/// The exporter to `endpoint` and the tracer the OpenTelemetry layer writes with. Built before
/// the async runtime starts (its blocking HTTP client may not be made inside one). Headers
/// (`OTEL_EXPORTER_OTLP_HEADERS`), the timeout and the batch settings (`OTEL_BSP_*`) come from
/// OpenTelemetry's own environment variables.
pub(crate) fn exporter(
    endpoint: &str,
) -> Result<(Exporter, opentelemetry_sdk::trace::Tracer), String> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let url = traces_url(endpoint)?;
    // One process-wide TLS provider, as every other client of deepcli's (`http_client`).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        .user_agent(concat!("deepcli/", env!("CARGO_PKG_VERSION")))
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot make the OTLP client: {e}"))?;
    let spans = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .build()
        .map_err(|e| format!("cannot export traces to `{endpoint}`: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("deepcli")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("deepcli");
    Ok((Exporter { provider }, tracer))
}

/// Whether `meta` is one of this module's spans: what the OpenTelemetry layer takes, and what
/// the log lines show as their context while traces are on.
pub(crate) fn is_span(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && meta.target() == module_path!()
}

/// The trace id of `span` (32 hex digits), `None` when traces are off.
pub(crate) fn id(span: &Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    let trace = context.span().span_context().trace_id();
    (trace != opentelemetry::trace::TraceId::INVALID).then(|| trace.to_string())
}

/// The trace id of the span the caller is in, `None` when traces are off.
pub(crate) fn current_id() -> Option<String> {
    id(&Span::current())
}

/// A root span named `name`, its trace id recorded as its `trace_id` field for the log lines.
fn root(span: Span) -> Span {
    if let Some(trace) = id(&span) {
        span.record("trace_id", trace.as_str());
    }
    span
}

/// The root of an inbound message's trace; [`describe_inbound`] names the message once it is
/// read.
pub(crate) fn inbound() -> Span {
    root(tracing::debug_span!(
        parent: None,
        "inbound",
        trace_id = tracing::field::Empty
    ))
}

/// Names the message the current inbound trace is of: `channel`'s account `account`, message
/// `message_id`.
pub(crate) fn describe_inbound(channel: &str, account: &str, message_id: &str) {
    attributes(
        &Span::current(),
        &[
            ("deepcli.channel", channel),
            ("deepcli.account", account),
            ("deepcli.message_id", message_id),
        ],
    );
}

/// The root of Hub run `run_id`'s trace (a send or a spawn into `target`), linked to the span
/// that started it (the `sessions_send` call, or the operator's request) when it has one.
pub(crate) fn run(run_id: &str, kind: &str, target: &str) -> Span {
    let from = Span::current().context().span().span_context().clone();
    let span = root(tracing::debug_span!(
        parent: None,
        "hub.run",
        trace_id = tracing::field::Empty
    ));
    if from.is_valid() {
        span.add_link(from);
    }
    attributes(
        &span,
        &[
            ("deepcli.run_id", run_id),
            ("deepcli.run_kind", kind),
            ("deepcli.session_key", target),
        ],
    );
    span
}

/// The inbound policy's decision.
pub(crate) fn gate() -> Span {
    tracing::debug_span!("gate")
}

/// The wait for the session's FIFO.
pub(crate) fn queue_wait(session_key: &str) -> Span {
    let span = tracing::debug_span!("queue.wait");
    attributes(&span, &[("deepcli.session_key", session_key)]);
    span
}

/// Agent `agent_id`'s turn in `session_key`.
pub(crate) fn runtime_turn(agent_id: &str, session_key: &str) -> Span {
    let span = tracing::debug_span!("runtime.turn");
    attributes(
        &span,
        &[
            ("deepcli.agent", agent_id),
            ("deepcli.session_key", session_key),
        ],
    );
    span
}

/// A Hub tool call, a child of the turn it is made in (`turn`), or a root of its own when no
/// traced turn of the caller's session is running.
pub(crate) fn hub_tool(tool: &str, turn: Option<&Span>) -> Span {
    let span = match turn {
        Some(turn) => tracing::debug_span!(parent: turn, "hub.tool"),
        None => root(tracing::debug_span!(
            parent: None,
            "hub.tool",
            trace_id = tracing::field::Empty
        )),
    };
    attributes(&span, &[("deepcli.tool", tool)]);
    span
}

/// One post to a platform (`method`: its API method) or to an account's reply sink.
pub(crate) fn outbound_post(channel: &str, method: &str) -> Span {
    let span = tracing::debug_span!("outbound.post");
    attributes(
        &span,
        &[("deepcli.channel", channel), ("deepcli.method", method)],
    );
    span
}

/// Marks `span` failed with `error` (its status), when traces are on.
pub(crate) fn failed(span: &Span, error: &str) {
    if !span.is_disabled() {
        span.set_status(opentelemetry::trace::Status::error(error.to_string()));
    }
}

fn attributes(span: &Span, pairs: &[(&'static str, &str)]) {
    if span.is_disabled() {
        return;
    }
    for (key, value) in pairs {
        span.set_attribute(*key, value.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_collectors_base() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/prefix/").unwrap(),
            "https://otel.example/prefix/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
        let bad = traces_url("127.0.0.1:4318").unwrap_err();
        assert!(bad.contains("e.g. http://127.0.0.1:4318"), "{bad}");
        let bad = traces_url("not a url").unwrap_err();
        assert!(bad.contains("(relative URL without a base)"), "{bad}");
        assert!(traces_url("ftp://c:4318").is_err());
    }

    #[test]
    fn off_there_is_no_trace_id() {
        // No subscriber listens: the spans are disabled and carry no id.
        let span = inbound();
        assert!(span.is_disabled());
        assert_eq!(id(&span), None);
        let _in = span.enter();
        assert_eq!(current_id(), None);
    }
}
