//! A remote A2A agent as a runtime (`runtime.kind: a2a`, docs/a2a.md). Supervision is reading
//! its Agent Card (`<url>/.well-known/agent-card.json`) now and every few seconds: a card that
//! names this URL with an A2A 1.0 interface — JSON-RPC, else HTTP+JSON — makes the runtime
//! `ready` (the status shows the card and the binding), anything else `failed` with the reason.
//! A ready remote is published in [`RemoteMap`] for the Access layer, which prompts it
//! ([`Remote::prompt`]: one `SendStreamingMessage` — `POST …/message:stream` over HTTP+JSON — in
//! the session's `contextId`, the reply streamed) and cancels it ([`Remote::cancel`]:
//! `CancelTask`, `POST …/tasks/<id>:cancel`), in the binding its card offers at that URL.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::process::Reporter;
use super::{Phase, RuntimeSpec, StopAck};

/// How often a remote's card is read again.
pub(crate) const CARD_EVERY: Duration = Duration::from_secs(5);

/// The ready remotes by agent id, for the Access layer to deliver to.
pub(crate) type RemoteMap = Arc<Mutex<BTreeMap<String, Arc<Remote>>>>;

/// One remote A2A agent that answered with a good card.
pub(crate) struct Remote {
    pub agent_id: String,
    pub url: String,
    token: Option<secrecy::SecretString>,
    http: reqwest::Client,
    /// The binding its card last offered at `url`.
    wire: Mutex<Wire>,
    /// The remote task each session's prompt is running as (for `CancelTask`).
    running: Mutex<HashMap<String, String>>,
    /// The remote task each session's last prompt left waiting for input (or authorization):
    /// the session's next message answers it, in that task (A2A: a message naming a task that
    /// waits for input continues it), not in a new one.
    waiting: Mutex<HashMap<String, String>>,
}

/// The A2A binding deepcli speaks to a remote: the one its card offers at `runtime.url`,
/// JSON-RPC when it offers both there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    JsonRpc,
    HttpJson,
}

impl Wire {
    fn of(binding: &str) -> Option<Wire> {
        if binding.eq_ignore_ascii_case("JSONRPC") {
            Some(Wire::JsonRpc)
        } else if binding.eq_ignore_ascii_case("HTTP+JSON") {
            Some(Wire::HttpJson)
        } else {
            None
        }
    }

    fn name(self) -> &'static str {
        match self {
            Wire::JsonRpc => "JSONRPC",
            Wire::HttpJson => "HTTP+JSON",
        }
    }
}

/// How a remote task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteAnswer {
    /// The artifacts' text (or, when the task asks back or fails, its status message).
    pub text: String,
    /// The final A2A task state (`TASK_STATE_…`).
    pub state: String,
    /// The file parts of its artifacts (a task's assignee hands them in: tasks.md).
    pub files: Vec<RemoteFile>,
}

/// A file part a remote sent: its bytes when they came inline, else its URL (never fetched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteFile {
    pub name: Option<String>,
    pub media_type: Option<String>,
    pub bytes: Option<Vec<u8>>,
    pub url: Option<String>,
}

/// The file parts of `parts` (1.0 `raw`/`url`, 0.3 `file.bytes`/`file.uri`).
fn files_in(parts: Option<&Value>) -> Vec<RemoteFile> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for part in parts.and_then(Value::as_array).into_iter().flatten() {
        let (holder, bytes, url, media, name) = match part.get("file") {
            Some(f) if f.is_object() => (f, "bytes", "uri", "mimeType", "name"),
            _ if part.get("raw").is_some() || part.get("url").is_some() => {
                (part, "raw", "url", "mediaType", "filename")
            }
            _ => continue,
        };
        let s = |k: &str| {
            holder
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let config = base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent);
        let engine = base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, config);
        out.push(RemoteFile {
            name: s(name),
            media_type: s(media),
            bytes: s(bytes).and_then(|b| engine.decode(b).ok()),
            url: s(url),
        });
    }
    out
}

/// The `contextId` a session's messages go in: fixed per (agent, session key).
pub(crate) fn context_id(agent_id: &str, session_key: &str) -> String {
    let hash = crate::hash::of(format!("{agent_id}\n{session_key}").as_bytes());
    format!("deepcli-{}", &hash.trim_start_matches("sha256:")[..32])
}

/// The text of a remote's parts: text as it is; a data part as its JSON on a line of its own;
/// a file part as a line saying what arrived (its name, media type, size or URL, SHA-256 of
/// inline bytes) — its bytes are not kept (a2a.md), but never dropped without a word.
fn text_of(parts: Option<&Value>) -> String {
    let mut out = String::new();
    for part in parts.and_then(Value::as_array).into_iter().flatten() {
        let line = if let Some(t) = part.get("text").and_then(Value::as_str) {
            out.push_str(t);
            continue;
        } else if let Some(data) = part.get("data") {
            data.to_string()
        } else if let Some(file) = file_of(part) {
            file
        } else {
            continue;
        };
        // On a line of its own.
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&line);
        out.push('\n');
    }
    if out.ends_with('\n')
        && parts
            .and_then(Value::as_array)
            .and_then(|p| p.last())
            .is_some_and(|p| p.get("text").is_none())
    {
        out.pop();
    }
    out
}

/// What a file part holds, said in one line; `None` when it is not one.
fn file_of(part: &Value) -> Option<String> {
    use base64::Engine as _;
    let (holder, bytes, url, media, name) = match part.get("file") {
        Some(f) if f.is_object() => (f, "bytes", "uri", "mimeType", "name"),
        _ if part.get("raw").is_some() || part.get("url").is_some() => {
            (part, "raw", "url", "mediaType", "filename")
        }
        _ => return None,
    };
    let s = |k: &str| {
        holder
            .get(k)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let mut said = format!(
        "[file from the remote: `{}`, {}",
        s(name).unwrap_or("(no name)"),
        s(media).unwrap_or("no media type")
    );
    if let Some(b64) = s(bytes) {
        let config = base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent);
        match base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, config).decode(b64) {
            Ok(content) => said.push_str(&format!(
                ", {} bytes, sha256 {} — not kept by deepcli]",
                content.len(),
                crate::hash::of(&content).trim_start_matches("sha256:")
            )),
            Err(_) => said.push_str(", bytes that are not base64 — not kept by deepcli]"),
        }
    } else if let Some(url) = s(url) {
        said.push_str(&format!(", at {url} — not fetched by deepcli]"));
    } else {
        said.push_str(", empty]");
    }
    Some(said)
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Checks a remote's card: it must offer JSON-RPC or HTTP+JSON with protocol 1.0 at `url`.
/// The binding to speak, and what the status shows of the card.
fn check_card(card: &Value, url: &str) -> Result<(Wire, Value), String> {
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let spoken: Vec<(Wire, &Value)> = interfaces
        .iter()
        .filter_map(|i| Some((Wire::of(i["protocolBinding"].as_str()?)?, i)))
        .collect();
    if spoken.is_empty() {
        return Err("the agent card offers neither a JSON-RPC nor an HTTP+JSON interface (A2A 1.0 `supportedInterfaces` with `protocolBinding: JSONRPC` or `HTTP+JSON`)".into());
    }
    let here: Vec<&(Wire, &Value)> = spoken
        .iter()
        .filter(|(_, i)| i["url"].as_str().is_some_and(|u| same_url(u, url)))
        .collect();
    if here.is_empty() {
        let named: Vec<String> = spoken
            .iter()
            .filter_map(|(w, i)| Some(format!("`{}` ({})", i["url"].as_str()?, w.name())))
            .collect();
        return Err(format!(
            "the agent card's urls are {} — not `runtime.url` {url}: fix runtime.url, or the remote's card",
            named.join(", ")
        ));
    }
    let current = |(_, i): &&&(Wire, &Value)| {
        i["protocolVersion"]
            .as_str()
            .is_some_and(|v| v == "1.0" || v.starts_with("1.0."))
    };
    let Some(wire) = here
        .iter()
        .filter(current)
        .map(|(w, _)| *w)
        .min_by_key(|w| *w != Wire::JsonRpc)
    else {
        return Err(
            "the agent card offers this url only in another protocol version than A2A 1.0".into(),
        );
    };
    Ok((
        wire,
        json!({
            "card": {
                "name": card["name"],
                "description": card["description"],
                "version": card["version"],
                "url": url,
                "protocolVersion": "1.0",
                "protocolBinding": wire.name(),
                "streaming": card["capabilities"]["streaming"],
                "skills": card["skills"].as_array().map(|s| s.iter().filter_map(|k| k["id"].as_str()).collect::<Vec<_>>()),
            }
        }),
    ))
}

/// Why a prompt to a remote got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RemoteFailure {
    /// The remote did not take the message (unreachable, refused): nothing began.
    NotTaken(String),
    /// The stream broke after the remote took the message: it may have acted on it.
    Broken(String),
}

impl Remote {
    /// [`Remote::prompt`] with its failure typed.
    pub(crate) async fn ask(
        &self,
        session_key: &str,
        text: &str,
    ) -> Result<RemoteAnswer, RemoteFailure> {
        self.prompt(session_key, text)
            .await
            .map_err(|(delivered, why)| match delivered {
                true => RemoteFailure::Broken(why),
                false => RemoteFailure::NotTaken(why),
            })
    }
}

impl Remote {
    async fn card(&self) -> Result<Value, String> {
        let card_url = format!(
            "{}/.well-known/agent-card.json",
            self.url.trim_end_matches('/')
        );
        let response = self
            .http
            .get(&card_url)
            .header("A2A-Version", "1.0")
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot read the agent card at {card_url}: {}",
                    error_chain(&e)
                )
            })?;
        if !response.status().is_success() {
            return Err(format!(
                "the agent card at {card_url} answered {}",
                response.status()
            ));
        }
        let card: Value = response
            .json()
            .await
            .map_err(|e| format!("the agent card at {card_url} is not JSON: {e}"))?;
        let (wire, info) = check_card(&card, &self.url)?;
        if let Ok(mut w) = self.wire.lock() {
            *w = wire;
        }
        Ok(info)
    }

    fn wire(&self) -> Wire {
        self.wire.lock().map_or(Wire::JsonRpc, |w| *w)
    }

    /// A request to `url`, or to `path` under it over HTTP+JSON.
    fn post(&self, path: &str, body: &Value, stream: bool) -> reqwest::RequestBuilder {
        let url = match self.wire() {
            Wire::JsonRpc => self.url.clone(),
            Wire::HttpJson => format!("{}/{path}", self.url.trim_end_matches('/')),
        };
        let mut req = self
            .http
            .post(url)
            .header("A2A-Version", "1.0")
            .header(
                "Accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .json(body);
        if let Some(token) = &self.token {
            req = req.bearer_auth(secrecy::ExposeSecret::expose_secret(token));
        }
        req
    }

    /// Sends `text` as a message in session `session_key`'s context and streams the task to
    /// its end (or until it asks back). Errors: `Err((delivered, why))`, `delivered` when the
    /// remote may have started on it.
    pub(crate) async fn prompt(
        &self,
        session_key: &str,
        text: &str,
    ) -> Result<RemoteAnswer, (bool, String)> {
        let context = context_id(&self.agent_id, session_key);
        let wire = self.wire();
        let mut message = json!({
            "messageId": uuid::Uuid::new_v4().to_string(),
            "role": "ROLE_USER",
            "contextId": context,
            "parts": [{"text": text}],
        });
        let answers = self
            .waiting
            .lock()
            .ok()
            .and_then(|mut w| w.remove(session_key));
        if let Some(task) = &answers {
            message["taskId"] = json!(task);
        }
        let params = json!({ "message": message });
        let body = match wire {
            Wire::JsonRpc => json!({
                "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params,
            }),
            Wire::HttpJson => params,
        };
        let response = self
            .post("message:stream", &body, true)
            .send()
            .await
            .map_err(|e| {
                (
                    false,
                    format!("cannot reach {}: {}", self.url, error_chain(&e)),
                )
            })?;
        let status = response.status();
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !status.is_success() || !is_sse {
            let text = response.text().await.unwrap_or_default();
            let why = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| text.chars().take(300).collect());
            return Err((false, format!("the remote answered {status}: {why}")));
        }
        use eventsource_stream::{EventStreamError, Eventsource};
        use futures_util::StreamExt;
        let mut events = response.bytes_stream().eventsource();
        let mut reply = String::new();
        let mut files = Vec::new();
        let mut task_id: Option<String> = None;
        let result = loop {
            let data = match events.next().await {
                Some(Ok(event)) => event.data,
                None => {
                    break Err((
                        true,
                        "the remote closed the stream before the task ended".to_string(),
                    ));
                }
                Some(Err(EventStreamError::Transport(e))) => {
                    break Err((true, format!("the stream broke: {}", error_chain(&e))));
                }
                Some(Err(e)) => break Err((true, format!("the stream broke: {e}"))),
            };
            let Ok(doc) = serde_json::from_str::<Value>(&data) else {
                break Err((
                    true,
                    format!(
                        "the remote sent an event that is not JSON: {}",
                        data.chars().take(200).collect::<String>()
                    ),
                ));
            };
            if let Some(e) = doc.get("error") {
                break Err((
                    true,
                    format!("the remote: {}", e["message"].as_str().unwrap_or("error")),
                ));
            }
            // JSON-RPC wraps each StreamResponse in `result`; HTTP+JSON sends it bare.
            let r = match wire {
                Wire::JsonRpc => &doc["result"],
                Wire::HttpJson => &doc,
            };
            let (task, status) = if let Some(t) = r.get("task") {
                (t["id"].as_str(), Some(&t["status"]))
            } else if let Some(u) = r.get("statusUpdate") {
                (u["taskId"].as_str(), Some(&u["status"]))
            } else if let Some(a) = r.get("artifactUpdate") {
                if !a["append"].as_bool().unwrap_or(false) && !reply.is_empty() {
                    reply.push('\n');
                }
                reply.push_str(&text_of(a["artifact"].get("parts")));
                files.extend(files_in(a["artifact"].get("parts")));
                (a["taskId"].as_str(), None)
            } else if let Some(m) = r.get("message") {
                // A reply without a task: it is the whole answer.
                break Ok(RemoteAnswer {
                    text: text_of(m.get("parts")),
                    state: "TASK_STATE_COMPLETED".into(),
                    files: files_in(m.get("parts")),
                });
            } else {
                (None, None)
            };
            if let Some(id) = task
                && task_id.as_deref() != Some(id)
            {
                task_id = Some(id.to_string());
                if let Ok(mut running) = self.running.lock() {
                    running.insert(session_key.to_string(), id.to_string());
                }
            }
            // The task as it stands opens the stream: one that waited for this answer still
            // says so there, and is not asking again.
            let standing =
                r.get("task").is_some() && answers.is_some() && task == answers.as_deref();
            if let Some(status) = status {
                let state = status["state"].as_str().unwrap_or_default().to_string();
                let asked_before = standing
                    && matches!(
                        state.as_str(),
                        "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED"
                    );
                if !asked_before
                    && matches!(
                        state.as_str(),
                        "TASK_STATE_COMPLETED"
                            | "TASK_STATE_FAILED"
                            | "TASK_STATE_CANCELED"
                            | "TASK_STATE_REJECTED"
                            | "TASK_STATE_INPUT_REQUIRED"
                            | "TASK_STATE_AUTH_REQUIRED"
                    )
                {
                    let said = text_of(status["message"].get("parts"));
                    let text = if state == "TASK_STATE_COMPLETED" || said.is_empty() {
                        std::mem::take(&mut reply)
                    } else {
                        said
                    };
                    let files = std::mem::take(&mut files);
                    break Ok(RemoteAnswer { text, state, files });
                }
            }
        };
        if let Ok(mut running) = self.running.lock() {
            running.remove(session_key);
        }
        if let (Ok(answer), Some(task)) = (&result, task_id)
            && matches!(
                answer.state.as_str(),
                "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED"
            )
            && let Ok(mut waiting) = self.waiting.lock()
        {
            waiting.insert(session_key.to_string(), task);
        }
        result
    }

    /// Asks the remote to cancel the task session `session_key`'s prompt runs as
    /// (`CancelTask`); whether the remote took the request.
    pub(crate) async fn cancel(&self, session_key: &str) -> bool {
        let task = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(session_key).cloned());
        let Some(task) = task else {
            return false;
        };
        let (path, body) = match self.wire() {
            Wire::JsonRpc => (
                String::new(),
                json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task}}),
            ),
            Wire::HttpJson => (format!("tasks/{task}:cancel"), json!({})),
        };
        match self
            .post(&path, &body, false)
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

/// Keeps one remote's card checked until told to stop; publishes it while its card is good.
pub(super) async fn supervise(
    spec: RuntimeSpec,
    mut stop: oneshot::Receiver<StopAck>,
    mut report: Reporter,
    remotes: RemoteMap,
    every: Duration,
) {
    let Some(url) = spec.url.clone() else {
        report.publish(|s| {
            s.status = Phase::Failed;
            s.last_error = Some("runtime.kind a2a without `url`".into());
        });
        let _ = stop.await.map(|ack| ack.send(()));
        return;
    };
    let token = match &spec.token {
        None => Ok(None),
        Some(r) => crate::runtime::resolve_token(r).map(Some),
    };
    let http = crate::http_client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default();
    let remote = Arc::new(Remote {
        agent_id: spec.agent_id.clone(),
        url,
        token: token.clone().ok().flatten(),
        http,
        wire: Mutex::new(Wire::JsonRpc),
        running: Mutex::new(HashMap::new()),
        waiting: Mutex::new(HashMap::new()),
    });
    report.publish(|s| s.started_at = Some(crate::clock::now()));
    loop {
        let checked = match &token {
            Err(e) => Err(format!("runtime.token: {e}")),
            Ok(_) => remote.card().await,
        };
        match checked {
            Ok(info) => {
                if let Ok(mut map) = remotes.lock() {
                    map.insert(spec.agent_id.clone(), remote.clone());
                }
                report.publish(|s| {
                    s.status = Phase::Ready;
                    s.info = Some(info);
                    s.last_error = None;
                });
            }
            Err(why) => {
                if let Ok(mut map) = remotes.lock() {
                    map.remove(&spec.agent_id);
                }
                if report.current.last_error.as_deref() != Some(why.as_str()) {
                    tracing::warn!(agent = %spec.agent_id, error = %why, "A2A remote not usable");
                }
                report.publish(|s| {
                    s.status = Phase::Failed;
                    s.last_error = Some(why);
                });
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            ack = &mut stop => {
                if let Ok(mut map) = remotes.lock() {
                    map.remove(&spec.agent_id);
                }
                report.publish(|s| s.status = Phase::Stopped);
                if let Ok(ack) = ack {
                    let _ = ack.send(());
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(url: &str, version: &str) -> Value {
        json!({"name": "R", "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": version},
        ]})
    }

    #[test]
    fn a_card_must_name_this_url_with_a2a_1_0() {
        assert_eq!(
            check_card(&card("http://h/a2a/", "1.0"), "http://h/a2a")
                .unwrap()
                .0,
            Wire::JsonRpc
        );
        let wrong = check_card(&card("http://other/a2a", "1.0"), "http://h/a2a").unwrap_err();
        assert!(
            wrong.contains("`http://other/a2a` (JSONRPC) — not `runtime.url` http://h/a2a"),
            "{wrong}"
        );
        assert!(check_card(&card("http://h/a2a", "0.3"), "http://h/a2a").is_err());
        assert!(check_card(&json!({"name": "R"}), "http://h/a2a").is_err());
    }

    #[test]
    fn json_rpc_is_spoken_where_the_card_offers_it_else_http_json() {
        let both = |rest_first: bool| {
            let rpc = json!({"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"});
            let rest = json!({"url": "http://h/a2a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"});
            let list = if rest_first { [rest, rpc] } else { [rpc, rest] };
            json!({"supportedInterfaces": list})
        };
        for order in [true, false] {
            assert_eq!(
                check_card(&both(order), "http://h/a2a").unwrap().0,
                Wire::JsonRpc
            );
        }
        let rest = json!({"supportedInterfaces": [
            {"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://h/a2a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://h/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        let (wire, info) = check_card(&rest, "http://h/a2a").unwrap();
        assert_eq!(wire, Wire::HttpJson);
        assert_eq!(info["card"]["protocolBinding"], "HTTP+JSON");
        let grpc = json!({"supportedInterfaces": [
            {"url": "http://h/a2a", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
        ]});
        assert!(
            check_card(&grpc, "http://h/a2a")
                .unwrap_err()
                .contains("neither")
        );
    }

    #[test]
    fn a_session_keeps_one_context() {
        let a = context_id("remote", "agent:remote:main");
        assert_eq!(a, context_id("remote", "agent:remote:main"));
        assert_ne!(a, context_id("remote", "agent:remote:other"));
        assert!(a.starts_with("deepcli-") && a.len() == 40, "{a}");
    }
}
