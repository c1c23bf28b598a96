//! The Access layer (access.md): the only door for messages from chat platforms. An envelope
//! comes in signed by its channel account; the routing plan in force picks the agent and the
//! session; the agent's ACP runtime answers in that session; the reply goes back in the
//! response and to the account's reply sink.
//!
//! * The plan is an [`ArcSwapOption`]: a request takes one snapshot and is routed entirely by
//!   it; the controller swaps in the next one after every apply.
//! * A session key maps to one runtime session (SQLite), opened in a restarted runtime with
//!   `session/load` when the agent can, else with a new session that gets the recent transcript.
//! * One prompt at a time per session key (a bounded FIFO), concurrent across sessions.
//! * A delivered envelope is recorded with its response; a redelivery, also a concurrent one,
//!   gets that response with `duplicate: true` and never reaches the agent again.

pub mod http;
pub mod metrics;
pub mod plan;
mod reply;
pub mod serve;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, LoadSessionRequest, NewSessionRequest, PromptRequest,
    SessionUpdate,
};
use arc_swap::ArcSwapOption;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::config::model::RuntimeKind;
use crate::routing::{RouteInput, normalize};
use crate::runtime::acp::AcpHandle;
use crate::runtime::{AcpMap, RuntimeMap};
pub use plan::AccessPlan;
use store::{AccessStore, DeliveryKey, Turn};

/// How the Access layer behaves; `deepcli up` and `deepcli access serve` set it from flags.
#[derive(Debug, Clone)]
pub struct AccessSettings {
    /// Largest request body accepted (413 above).
    pub body_limit: usize,
    /// How long a prompt may take before it is cancelled.
    pub prompt_timeout: Duration,
    /// Messages that may wait behind the one being handled, per session (429 above).
    pub queue_limit: usize,
    /// How many transcript turns a new runtime session gets as context.
    pub context_turns: usize,
}

impl Default for AccessSettings {
    fn default() -> AccessSettings {
        AccessSettings {
            body_limit: 1024 * 1024,
            prompt_timeout: Duration::from_secs(120),
            queue_limit: 32,
            context_turns: 20,
        }
    }
}

/// A refusal or a failure, as the HTTP response says it.
#[derive(Debug, Clone)]
pub struct AccessError {
    pub status: StatusCode,
    pub body: Value,
}

impl AccessError {
    fn new(status: StatusCode, message: impl Into<String>) -> AccessError {
        AccessError {
            status,
            body: json!({"error": message.into()}),
        }
    }

    fn with(mut self, key: &str, value: impl Into<Value>) -> AccessError {
        self.body[key] = value.into();
        self
    }
}

/// `POST /v1/inbound`'s body (access.md, "Envelope"): the route input's fields (as
/// `deepcli route --batch` reads them) plus the message's own.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub route: RouteInput,
    pub thread_id: Option<String>,
    pub message_id: String,
    pub sender: Option<Value>,
    pub text: String,
}

/// The fields an envelope has beyond the route input.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageFields {
    #[serde(default)]
    thread_id: Option<String>,
    message_id: String,
    #[serde(default)]
    sender: Option<Value>,
    text: String,
}

const MESSAGE_FIELDS: [&str; 4] = ["threadId", "messageId", "sender", "text"];

/// What a delivery produced: the response body and its status.
type Outcome = Result<Value, AccessError>;

/// One session key's FIFO: a lock held while its message is handled, and how many wait.
#[derive(Default)]
struct SessionQueue {
    turn: tokio::sync::Mutex<()>,
    waiting: std::sync::atomic::AtomicUsize,
}

pub struct Access {
    plan: ArcSwapOption<AccessPlan>,
    store: Arc<AccessStore>,
    /// Ready ACP runtimes; `None` when this process manages none (`access serve`).
    runtimes: Option<(AcpMap, RuntimeMap)>,
    queues: Mutex<HashMap<String, Arc<SessionQueue>>>,
    inflight: Mutex<HashMap<DeliveryKey, watch::Receiver<Option<Outcome>>>>,
    pub metrics: metrics::Metrics,
    pub settings: AccessSettings,
    reply: reply::ReplySink,
    /// `<state>/logs/channels/<channel>.log`: one line per inbound call (`deepcli channels logs`).
    channel_logs: tokio::sync::Mutex<HashMap<String, crate::runtime::log::Log>>,
    logs_dir: std::path::PathBuf,
}

impl Access {
    pub fn new(
        store: AccessStore,
        state: &crate::state::StateDir,
        runtimes: Option<(AcpMap, RuntimeMap)>,
        settings: AccessSettings,
    ) -> Access {
        let store = Arc::new(store);
        let metrics = metrics::Metrics::default();
        Access {
            plan: ArcSwapOption::empty(),
            reply: reply::ReplySink::new(store.clone(), metrics.reply_failures.clone()),
            store,
            runtimes,
            queues: Mutex::default(),
            inflight: Mutex::default(),
            metrics,
            settings,
            channel_logs: tokio::sync::Mutex::default(),
            logs_dir: state.logs().join("channels"),
        }
    }

    /// Appends one line about an inbound call to its channel's log (size-capped, rotated).
    pub async fn log_channel(&self, channel: &str, line: &str) {
        let channel = normalize::channel(channel);
        // A channel name becomes a file name: keep it to safe characters.
        if channel.is_empty()
            || !channel
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return;
        }
        let mut logs = self.channel_logs.lock().await;
        if !logs.contains_key(channel.as_ref()) {
            let path = self.logs_dir.join(format!("{channel}.log"));
            match crate::runtime::log::Log::open(&path, crate::runtime::log::MAX_BYTES).await {
                Ok(log) => {
                    logs.insert(channel.to_string(), log);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot open a channel log");
                    return;
                }
            }
        }
        if let Some(log) = logs.get_mut(channel.as_ref()) {
            let _ = log
                .write(format!("{} {line}\n", crate::state::now()).as_bytes())
                .await;
        }
    }

    /// Puts `plan` in force: requests that arrive from now on are routed by it.
    pub fn swap(&self, plan: AccessPlan) {
        tracing::info!(
            generation = plan.generation,
            "access: routing plan in force"
        );
        self.plan.store(Some(Arc::new(plan)));
    }

    pub fn plan(&self) -> Option<Arc<AccessPlan>> {
        self.plan.load_full()
    }

    pub fn store(&self) -> &AccessStore {
        &self.store
    }

    fn current(&self) -> Result<Arc<AccessPlan>, AccessError> {
        self.plan().ok_or_else(|| {
            AccessError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no routing plan is in force yet: the first apply has not finished",
            )
        })
    }

    /// Handles one envelope: authenticate, route, deliver, record. `signature` is the
    /// `X-Deepcli-Signature` header.
    pub async fn inbound(
        self: &Arc<Self>,
        body: &[u8],
        signature: Option<&str>,
    ) -> (Option<u64>, Outcome) {
        let plan = match self.current() {
            Ok(plan) => plan,
            Err(e) => return (None, Err(e)),
        };
        let generation = Some(plan.generation);
        (generation, self.inbound_with(&plan, body, signature).await)
    }

    async fn inbound_with(
        self: &Arc<Self>,
        plan: &Arc<AccessPlan>,
        body: &[u8],
        signature: Option<&str>,
    ) -> Outcome {
        let envelope = parse_envelope(body)?;
        let input = &envelope.route;
        let result = plan.routing.resolve(input);
        let channel = normalize::channel(&input.channel).into_owned();
        let account_id = result.account_id.to_string();

        // The account decides who may speak for it. The route above is pure and only names the
        // account (normalized as the router does); nothing is counted, recorded or delivered
        // before the account has authenticated the call.
        let Some(account) = plan.accounts.get(&(channel.clone(), account_id.clone())) else {
            return Err(AccessError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "unknown channel account `{channel}/{account_id}`: declare it in channels.yaml (channels.{channel}.accounts.{account_id})"
                ),
            ));
        };
        verify_signature(account, body, signature)?;
        if !account.enabled {
            return Err(AccessError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "channel account `{channel}/{account_id}` is disabled (enabled: false in channels.yaml)"
                ),
            ));
        }

        // The route: an `acp` binding of this exact conversation first, then the tiers.
        let mut route = serde_json::to_value(&result).unwrap_or_default();
        let (agent_id, mut session_key) = match plan.routing.acp_binding(input) {
            Some(acp) => {
                let binding_key = format!(
                    "{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
                    acp.agent_id,
                    acp.channel,
                    acp.account,
                    acp.peer_kind.as_str(),
                    acp.peer_id
                );
                let key = self
                    .blocking({
                        let agent = acp.agent_id.clone();
                        move |store| store.acp_session_key(&binding_key, &agent)
                    })
                    .await?;
                route["agentId"] = acp.agent_id.clone().into();
                route["sessionKey"] = key.clone().into();
                route["matchedBy"] = "binding.acp".into();
                route["lastRoutePolicy"] = "session".into();
                route["binding"] = serde_json::to_value(&acp.source).unwrap_or_default();
                (acp.agent_id.clone(), key)
            }
            None => (result.agent_id.to_string(), result.session_key.to_string()),
        };
        if let Some(thread) = envelope.thread_id.as_deref().map(str::trim)
            && !thread.is_empty()
        {
            session_key.push_str(":thread:");
            session_key.push_str(&thread.to_lowercase());
        }
        self.metrics.route(match route["matchedBy"].as_str() {
            Some("binding.acp") => "binding.acp",
            _ => result.matched_by.as_str(),
        });

        // Idempotency: delivered before, or being delivered right now.
        let key: DeliveryKey = (channel, account_id, envelope.message_id.clone());
        let done = {
            let key = key.clone();
            self.blocking(move |store| store.delivered(&key)).await?
        };
        if let Some(response) = done {
            return Ok(as_duplicate(&response));
        }
        let sender = {
            let mut inflight = self.inflight.lock().map_err(|_| internal("inflight map"))?;
            match inflight.get(&key) {
                Some(rx) => Err(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    inflight.insert(key.clone(), rx);
                    Ok(tx)
                }
            }
        };
        let sender = match sender {
            Ok(tx) => tx,
            Err(mut rx) => {
                // The same envelope is being delivered: its outcome is this one's.
                let outcome = rx
                    .wait_for(Option::is_some)
                    .await
                    .map(|o| o.clone())
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| Err(internal("the first delivery vanished")));
                return outcome.map(|v| {
                    self.metrics
                        .duplicates
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut v = v;
                    v["duplicate"] = true.into();
                    v
                });
            }
        };
        // Checked again now that this request owns the key: a delivery that finished between
        // the first check and taking the key recorded itself before it let the key go.
        let recorded = {
            let key = key.clone();
            self.blocking(move |store| store.delivered(&key)).await
        };
        let outcome = match recorded {
            Ok(Some(response)) => Ok(as_duplicate(&response)),
            Ok(None) => {
                self.deliver(plan, &envelope, &key, &agent_id, &session_key, route)
                    .await
            }
            Err(e) => Err(e),
        };
        let _ = sender.send(Some(outcome.clone()));
        if let Ok(mut inflight) = self.inflight.lock() {
            inflight.remove(&key);
        }
        outcome
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&AccessStore) -> Result<T, crate::state::StateError> + Send + 'static,
    ) -> Result<T, AccessError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| internal(&e.to_string()))?
            .map_err(|e| internal(&e.to_string()))
    }

    async fn deliver(
        self: &Arc<Self>,
        plan: &Arc<AccessPlan>,
        envelope: &Envelope,
        key: &DeliveryKey,
        agent_id: &str,
        session_key: &str,
        route: Value,
    ) -> Outcome {
        let started = Instant::now();
        let queue = self.queue(session_key);
        let waiting = queue
            .waiting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let turn = if waiting > self.settings.queue_limit {
            None
        } else {
            Some(queue.turn.lock().await)
        };
        queue
            .waiting
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        let Some(_turn) = turn else {
            return Err(AccessError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "session `{session_key}` has {} messages waiting: send this one again later",
                    self.settings.queue_limit
                ),
            )
            .with("sessionKey", session_key));
        };

        let kind = plan.runtime(agent_id);
        let managed = self.runtimes.is_some();
        let reply = if kind == RuntimeKind::Acp && managed {
            Some(self.prompt(agent_id, session_key, &envelope.text).await?)
        } else {
            None
        };
        let mut response = json!({
            "route": route,
            "sessionKey": session_key,
            "reply": reply.as_ref().map(|(text, _)| json!({"text": text})),
            "duplicate": false,
        });
        if reply.is_none() {
            response["delivered"] = false.into();
            response["note"] = match (kind, managed) {
                (RuntimeKind::Acp, false) => "no runtime managed here: this process serves a routing plan only".into(),
                (RuntimeKind::Process, _) => format!("agent `{agent_id}` runs a process runtime, which takes no prompts: no runtime managed here to deliver to").into(),
                _ => format!("agent `{agent_id}` has runtime kind none: no runtime managed here; the route is the answer").into(),
            };
        }
        let sent = response.to_string();
        let (reply_text, notes) = reply.unzip();
        let mut turns: Vec<Turn> = notes
            .unwrap_or_default()
            .into_iter()
            .map(Turn::note)
            .collect();
        turns.push(Turn {
            provenance: "inbound",
            message_id: Some(envelope.message_id.clone()),
            sender: envelope.sender.clone(),
            text: envelope.text.clone(),
            route: Some(response["route"].clone()),
        });
        if let Some(text) = &reply_text {
            turns.push(Turn {
                provenance: "agent",
                message_id: None,
                sender: None,
                text: text.clone(),
                route: None,
            });
        }
        {
            let (session_key, key) = (session_key.to_string(), key.clone());
            self.blocking(move |store| store.record(&session_key, &turns, Some((&key, &sent))))
                .await?;
        }
        self.metrics.delivered(started.elapsed());
        if let Some(reply_text) = reply_text
            && let Some(account) = plan.accounts.get(&(key.0.clone(), key.1.clone()))
            && let (Some(url), Ok(secret)) = (&account.reply_url, &account.webhook_secret)
        {
            self.reply.send(
                url.clone(),
                secret.clone(),
                key.clone(),
                json!({
                    "channel": key.0, "accountId": key.1, "messageId": key.2,
                    "sessionKey": session_key, "peer": envelope.route.peer, "threadId": envelope.thread_id,
                    "reply": {"text": reply_text},
                }),
            );
        }
        Ok(response)
    }

    fn queue(&self, session_key: &str) -> Arc<SessionQueue> {
        let mut queues = match self.queues.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        // Forget the queues nobody holds (bounded memory across many sessions).
        if queues.len() > 4096 {
            queues.retain(|_, q| Arc::strong_count(q) > 1);
        }
        queues.entry(session_key.to_string()).or_default().clone()
    }

    fn runtime(&self, agent_id: &str) -> Result<AcpHandle, AccessError> {
        let Some((acp, status)) = &self.runtimes else {
            return Err(internal("no runtimes are managed here"));
        };
        if let Some(handle) = acp.lock().ok().and_then(|m| m.get(agent_id).cloned()) {
            return Ok(handle);
        }
        let phase = status.lock().ok().and_then(|m| m.get(agent_id).cloned());
        let why = match &phase {
            Some(s) => {
                let mut why = format!("its runtime is {}", s.status.as_str());
                if let Some(next) = &s.next_start {
                    why.push_str(&format!(" (next start at {next})"));
                }
                if let Some(e) = s.last_error.as_ref().or(s.last_exit.as_ref()) {
                    why.push_str(&format!("; last: {e}"));
                }
                why
            }
            None => "its runtime is not running".to_string(),
        };
        Err(AccessError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("agent `{agent_id}` cannot take messages now: {why}; send it again later"),
        )
        .with("agentId", agent_id)
        .with(
            "runtimeStatus",
            phase.map_or("stopped", |s| s.status.as_str()),
        ))
    }

    /// Prompts the agent in the runtime session of `session_key`; returns the reply and notes
    /// about how the session was opened (for the transcript).
    async fn prompt(
        &self,
        agent_id: &str,
        session_key: &str,
        text: &str,
    ) -> Result<(String, Vec<String>), AccessError> {
        let handle = self.runtime(agent_id)?;
        let gone = |e: agent_client_protocol::Error| {
            AccessError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("agent `{agent_id}`'s runtime failed the prompt: {e}; send it again later"),
            )
        };
        let mut notes = Vec::new();
        let known = {
            let key = session_key.to_string();
            self.blocking(move |s| s.runtime_session(&key)).await?
        };
        let is_open = |id: &str| handle.open.lock().is_ok_and(|o| o.contains(id));
        let mut prompt_text = text.to_string();
        let session_id = match known {
            Some(id) if is_open(&id) => id,
            known => {
                let mut loaded = None;
                if let Some(id) = &known
                    && handle.loads_sessions()
                {
                    let request = LoadSessionRequest::new(id.clone(), handle.cwd.clone());
                    if handle.cx.send_request(request).block_task().await.is_ok() {
                        notes.push(format!(
                            "runtime session {id} resumed with session/load (pid {})",
                            handle.pid
                        ));
                        loaded = Some(id.clone());
                    }
                }
                match loaded {
                    Some(id) => id,
                    None => {
                        let created = handle
                            .cx
                            .send_request(NewSessionRequest::new(handle.cwd.clone()))
                            .block_task()
                            .await
                            .map_err(gone)?;
                        let id = created.session_id.0.to_string();
                        if known.is_some() {
                            let key = session_key.to_string();
                            let limit = self.settings.context_turns;
                            let history = self.blocking(move |s| s.transcript(&key, limit)).await?;
                            let turns: Vec<&store::TranscriptRow> = history
                                .iter()
                                .filter(|r| r.provenance == "inbound" || r.provenance == "agent")
                                .collect();
                            notes.push(format!(
                                "new runtime session {id} (the agent cannot load the old one): the last {} turns were given as context",
                                turns.len()
                            ));
                            prompt_text = context_prompt(&turns, text);
                        } else {
                            notes.push(format!("new runtime session {id}"));
                        }
                        let (key, agent, sid) =
                            (session_key.to_string(), agent_id.to_string(), id.clone());
                        self.blocking(move |s| s.set_runtime_session(&key, &agent, &sid))
                            .await?;
                        id
                    }
                }
            }
        };
        if let Ok(mut open) = handle.open.lock() {
            open.insert(session_id.clone());
        }

        let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
        if let Ok(mut subs) = handle.subscribers.lock() {
            subs.insert(session_id.clone(), tx);
        }
        struct Unsubscribe<'a>(&'a AcpHandle, &'a str);
        impl Drop for Unsubscribe<'_> {
            fn drop(&mut self) {
                if let Ok(mut subs) = self.0.subscribers.lock() {
                    subs.remove(self.1);
                }
            }
        }
        let _unsubscribe = Unsubscribe(&handle, &session_id);

        let request = PromptRequest::new(session_id.clone(), vec![prompt_text.into()]);
        let answer = handle.cx.send_request(request).block_task();
        tokio::pin!(answer);
        let timeout = self.settings.prompt_timeout;
        let response = tokio::select! {
            r = &mut answer => r.map_err(gone)?,
            () = tokio::time::sleep(timeout) => {
                let _ = handle.cx.send_notification(CancelNotification::new(session_id.clone()));
                // The agent answers a cancelled prompt with stopReason `cancelled`.
                let stop = tokio::time::timeout(Duration::from_secs(5), &mut answer)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|r| serde_json::to_value(r.stop_reason).unwrap_or_default());
                return Err(AccessError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "agent `{agent_id}` did not answer within {} s: the prompt was cancelled (session/cancel); send it again later",
                        timeout.as_secs_f64()
                    ),
                )
                .with("cancelled", true)
                .with("stopReason", stop.unwrap_or(Value::Null)));
            }
        };
        let mut reply = String::new();
        while let Ok(update) = updates.try_recv() {
            if let SessionUpdate::AgentMessageChunk(chunk) = update.update
                && let ContentBlock::Text(t) = chunk.content
            {
                reply.push_str(&t.text);
            }
        }
        tracing::debug!(agent = agent_id, session = session_key, stop = ?response.stop_reason, "prompt answered");
        Ok((reply, notes))
    }
}

/// A new runtime session's first prompt: the recent transcript, then the message.
fn context_prompt(turns: &[&store::TranscriptRow], text: &str) -> String {
    let mut out = String::from(
        "[deepcli: this conversation continues an earlier session the agent no longer has. The recent transcript, oldest first:]\n",
    );
    for t in turns {
        let who = if t.provenance == "agent" {
            "agent"
        } else {
            "user"
        };
        out.push_str(&format!("{who}: {}\n", t.text));
    }
    out.push_str("[deepcli: the new message:]\n");
    out.push_str(text);
    out
}

fn internal(what: &str) -> AccessError {
    AccessError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("internal error: {what}"),
    )
}

fn as_duplicate(stored: &str) -> Value {
    let mut v: Value = serde_json::from_str(stored).unwrap_or_default();
    v["duplicate"] = true.into();
    v
}

/// Parses an envelope; a 400 names the field that is wrong. The route fields are read by
/// [`RouteInput`] itself, so an unknown field is refused as it is by `route --batch`.
pub fn parse_envelope(body: &[u8]) -> Result<Envelope, AccessError> {
    let refuse = |e: serde_json::Error| {
        let message = e.to_string();
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m)
            .to_string();
        let field = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field"))
            .map(str::to_string);
        let error = AccessError::new(
            StatusCode::BAD_REQUEST,
            format!("not an envelope: {message}"),
        );
        match field {
            Some(f) => error.with("field", f),
            None => error,
        }
    };
    let mut fields: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(refuse)?;
    let own: serde_json::Map<String, Value> = MESSAGE_FIELDS
        .iter()
        .filter_map(|k| Some((k.to_string(), fields.remove(*k)?)))
        .collect();
    let message = MessageFields::deserialize(Value::Object(own)).map_err(refuse)?;
    let route = RouteInput::deserialize(Value::Object(fields)).map_err(refuse)?;
    for (field, value) in [
        ("channel", &route.channel),
        ("messageId", &message.message_id),
    ] {
        if value.trim().is_empty() {
            return Err(
                AccessError::new(StatusCode::BAD_REQUEST, format!("`{field}` is empty"))
                    .with("field", field),
            );
        }
    }
    Ok(Envelope {
        route,
        thread_id: message.thread_id,
        message_id: message.message_id,
        sender: message.sender,
        text: message.text,
    })
}

/// Checks `X-Deepcli-Signature: sha256=<hex HMAC-SHA256 of the body>` against the account's
/// webhook secret, in constant time.
fn verify_signature(
    account: &plan::AccountAccess,
    body: &[u8],
    signature: Option<&str>,
) -> Result<(), AccessError> {
    use hmac::Mac;
    let unauthorized = |m: String| AccessError::new(StatusCode::UNAUTHORIZED, m);
    let secret = account
        .webhook_secret
        .as_ref()
        // Why is the operator's to read (the log, `closedAccounts` in the status): it names
        // the variable or file the secret lives in.
        .map_err(|_| {
            unauthorized("this account takes no messages: it has no usable webhookSecret".into())
        })?;
    let Some(given) = signature else {
        return Err(unauthorized(
            "missing `X-Deepcli-Signature: sha256=<hex HMAC-SHA256 of the body with the account's webhookSecret>`".into(),
        ));
    };
    let bytes = given
        .trim()
        .strip_prefix("sha256=")
        .and_then(hex_decode)
        .ok_or_else(|| unauthorized("`X-Deepcli-Signature` is not `sha256=<hex>`".into()))?;
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).map_err(|_| internal("HMAC key"))?;
    mac.update(body);
    mac.verify_slice(&bytes).map_err(|_| {
        unauthorized("wrong `X-Deepcli-Signature`: it does not match the body and the account's webhookSecret".into())
    })
}

/// `sha256=<hex>` of `body` with `secret`: what a caller sends (and the reply sink signs with).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = match hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
