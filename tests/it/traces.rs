//! Traces (`deepcli up --otlp-endpoint`): a real controller with two SDK agents sends its spans
//! over OTLP/HTTP to a collector on loopback, which reads them with OpenTelemetry's own message
//! types. One trace per inbound message (gate, queue wait, the agent's turn, each Hub tool call
//! and the reply's post inside it) and per Hub run (linked to the tool call that started it);
//! the trace ids in the audit and in the channel's log.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::{Value, json};

use crate::common::{Up, open};
use crate::hub::{BINDINGS, SECRET, agents, say, tool};

/// One span as the collector got it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, String>,
    /// The span ids it links to.
    links: Vec<String>,
}

/// A collector on loopback: takes OTLP/HTTP protobuf export requests at `/v1/traces` and keeps
/// their spans.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Collector { url, spans }
    }

    /// Waits until `check` holds of the spans received.
    fn wait_for(&self, what: &str, check: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if check(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the collector never got {what}: {:#?}",
                spans
                    .iter()
                    .map(|s| (&s.name, &s.trace, &s.attributes))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One connection's requests (the exporter keeps its connection alive).
fn serve(stream: std::net::TcpStream, kept: &Mutex<Vec<Span>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some(n) = line.to_lowercase().strip_prefix("content-length:") {
                length = n.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        assert!(
            request_line.starts_with("POST /v1/traces "),
            "{request_line}"
        );
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        let mut spans = kept.lock().unwrap();
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Span {
                        name: span.name,
                        trace: hex(&span.trace_id),
                        id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        attributes: span
                            .attributes
                            .into_iter()
                            .map(|kv| (kv.key, text_of(kv.value)))
                            .collect(),
                        links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
                    });
                }
            }
        }
        drop(spans);
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text_of(value: Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    match value.and_then(|v| v.value) {
        Some(V::StringValue(s)) => s,
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The span named `name` in `trace` whose attribute `key` is `value`.
fn find<'a>(spans: &'a [Span], name: &str, key: &str, value: &str) -> Option<&'a Span> {
    spans
        .iter()
        .find(|s| s.name == name && s.attributes.get(key).is_some_and(|v| v == value))
}

/// Whether `span` descends from `ancestor` (same trace, through its parents).
fn descends(spans: &[Span], span: &Span, ancestor: &Span) -> bool {
    let mut at = span;
    while at.id != ancestor.id {
        match spans.iter().find(|s| s.id == at.parent) {
            Some(parent) if parent.trace == at.trace => at = parent,
            _ => return false,
        }
    }
    true
}

const BETA: &str = "agent:beta:slack:group:gb";
const ALPHA: &str = "agent:alpha:slack:group:ga";

#[test]
fn a_message_and_a_hub_run_are_each_one_trace_of_their_steps() {
    let collector = Collector::start();
    let (reply_url, replies) = crate::hub::sink();
    let channels = open(&format!(
        "channels:\n  slack:\n    accounts:\n      default: {{webhookSecret: {{source: env, id: HOOK}}, replyUrl: \"{reply_url}\"}}\n"
    ));
    let up = Up::start_config(&agents("", "", ""), &channels, BINDINGS, |cmd| {
        cmd.env("HOOK", SECRET)
            // Batches sent every 100 ms, not every 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .args(["--otlp-endpoint", &collector.url]);
    });
    for id in ["alpha", "beta"] {
        up.wait_for(&format!("{id} ready"), |s| {
            Up::runtime(s, id).is_some_and(|r| r["status"] == "ready")
        });
    }

    // A message to beta: one trace, its root the message, every step inside it.
    assert!(say(&up, "gb", "hello").starts_with("echo: "));
    let reply = replies.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(reply["sessionKey"], BETA, "{reply}");
    // The message's span ends last, after the reply is posted: it may come in a later batch.
    let spans = collector.wait_for("beta's message, its turn and its reply's post", |spans| {
        find(spans, "runtime.turn", "deepcli.session_key", BETA).is_some_and(|turn| {
            let in_turn = |name: &str| {
                spans
                    .iter()
                    .any(|s| s.name == name && s.trace == turn.trace)
            };
            in_turn("outbound.post") && in_turn("inbound")
        })
    });
    let turn = find(&spans, "runtime.turn", "deepcli.session_key", BETA).unwrap();
    let root = spans
        .iter()
        .find(|s| s.name == "inbound" && s.trace == turn.trace)
        .expect("the turn is in an inbound trace");
    assert_eq!(root.parent, "", "the message's span is the root");
    assert_eq!(root.attributes["deepcli.channel"], "slack");
    assert_eq!(turn.attributes["deepcli.agent"], "beta");
    for name in ["gate", "queue.wait", "runtime.turn", "outbound.post"] {
        let step = spans
            .iter()
            .find(|s| s.name == name && s.trace == root.trace)
            .unwrap_or_else(|| panic!("no {name} span in the message's trace"));
        assert!(descends(&spans, step, root), "{name} is not under the root");
    }
    let post = spans
        .iter()
        .find(|s| s.name == "outbound.post" && s.trace == root.trace)
        .unwrap();
    assert_eq!(post.attributes["deepcli.method"], "reply-sink");

    // Alpha sends to beta: the tool call is a step of alpha's turn, and the run a trace of
    // its own, linked to the call, with beta's turn inside it.
    let sent = tool(
        &up,
        "sessions_send",
        json!({"sessionKey": BETA, "message": "ping"}),
    );
    let run_id = sent["runId"].as_str().unwrap().to_string();
    let spans = collector.wait_for("the run's trace", |spans| {
        find(spans, "hub.run", "deepcli.run_id", &run_id).is_some_and(|run| {
            spans
                .iter()
                .any(|s| s.name == "runtime.turn" && s.trace == run.trace)
        }) && find(spans, "runtime.turn", "deepcli.session_key", ALPHA).is_some()
    });
    let call = find(&spans, "hub.tool", "deepcli.tool", "sessions_send").unwrap();
    let alpha_turn = find(&spans, "runtime.turn", "deepcli.session_key", ALPHA).unwrap();
    assert_eq!(
        call.parent, alpha_turn.id,
        "the call is a step of alpha's turn"
    );
    let run = find(&spans, "hub.run", "deepcli.run_id", &run_id).unwrap();
    assert_eq!(run.parent, "", "a run is a trace of its own");
    assert_ne!(run.trace, call.trace);
    assert_eq!(run.links, vec![call.id.clone()], "linked to the call");
    let beta_turn = spans
        .iter()
        .find(|s| s.name == "runtime.turn" && s.trace == run.trace)
        .unwrap();
    assert_eq!(beta_turn.attributes["deepcli.session_key"], BETA);
    assert!(descends(&spans, beta_turn, run));

    // The audit names each message's and each run's trace.
    let audit = up.deepcli(&["audit", "--json"]);
    assert!(audit.status.success(), "{audit:?}");
    let audit: Value = serde_json::from_slice(&audit.stdout).unwrap();
    let events = audit["events"].as_array().unwrap();
    let traces_of = |kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .filter_map(|e| e["traceId"].as_str().map(str::to_string))
            .collect()
    };
    assert!(
        traces_of("inbound").contains(&root.trace),
        "{:#}",
        audit["events"]
    );
    assert!(
        traces_of("send").contains(&run.trace),
        "{:#}",
        audit["events"]
    );
    // So does the channel's log line of each message.
    let log = std::fs::read_to_string(up.state.join("logs/channels/slack.log")).unwrap();
    assert!(log.contains(&format!("trace={}", root.trace)), "{log}");

    // A redelivery is a trace of its own, answered from the record: the delivery keeps the
    // trace it was handled in.
    let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": "gb"},
        "messageId": "m-twice", "sender": {"id": "u1"}, "text": "once"});
    for _ in 0..2 {
        let (status, _) = crate::common::signed_inbound(up.addr, SECRET.as_bytes(), &envelope);
        assert_eq!(status, 200);
    }
    let spans = collector.wait_for("both deliveries' traces", |spans| {
        spans
            .iter()
            .filter(|s| {
                s.name == "inbound"
                    && s.attributes
                        .get("deepcli.message_id")
                        .is_some_and(|m| m == "m-twice")
            })
            .count()
            == 2
    });
    let first = spans
        .iter()
        .find(|s| {
            s.name == "runtime.turn"
                && spans.iter().any(|r| {
                    r.name == "inbound"
                        && r.trace == s.trace
                        && r.attributes
                            .get("deepcli.message_id")
                            .is_some_and(|m| m == "m-twice")
                })
        })
        .expect("the first delivery's turn");
    let audit = up.deepcli(&["audit", "--json"]);
    let audit: Value = serde_json::from_slice(&audit.stdout).unwrap();
    let twice: Vec<&Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "inbound" && e["summary"].as_str().unwrap().contains("m-twice"))
        .collect();
    assert_eq!(twice.len(), 1, "{twice:#?}");
    assert_eq!(twice[0]["traceId"], first.trace.as_str(), "{twice:#?}");
}

#[test]
fn without_an_endpoint_nothing_is_traced_and_a_bad_one_is_refused() {
    let up = Up::start_config(
        &agents("", "", ""),
        &open(
            "channels:\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: HOOK}}\n",
        ),
        BINDINGS,
        |cmd| {
            cmd.env("HOOK", SECRET);
        },
    );
    up.wait_for("beta ready", |s| {
        Up::runtime(s, "beta").is_some_and(|r| r["status"] == "ready")
    });
    assert!(say(&up, "gb", "hello").starts_with("echo: "));
    let audit = up.deepcli(&["audit", "--json"]);
    let audit: Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert!(
        audit["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.get("traceId").is_none()),
        "{audit:#}"
    );
    let log = std::fs::read_to_string(up.state.join("logs/channels/slack.log")).unwrap();
    assert!(!log.contains("trace="), "{log}");

    let bad = std::process::Command::new(crate::common::bin())
        .args(["up", "--otlp-endpoint", "127.0.0.1:4318"])
        .env("DEEPCLI_CONFIG", &up.config)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("is not an http(s) URL of a collector")
            && stderr.contains("e.g. http://127.0.0.1:4318"),
        "{stderr}"
    );
}
