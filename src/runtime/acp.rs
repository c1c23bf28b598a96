//! The client side of an ACP runtime: a connection over the pipes of a child deepcli spawned
//! itself (the crate's own launcher can set neither a working directory nor a process group),
//! and the `initialize` handshake that makes the runtime ready.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AudioContent, AuthenticateRequest, BlobResourceContents, CancelNotification,
    ClientCapabilities, CloseSessionRequest, ContentBlock, EmbeddedResource,
    EmbeddedResourceResource, ImageContent, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, McpServer, NewSessionRequest, PermissionOptionKind, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, ResourceLink,
    SelectedPermissionOutcome, SessionConfigKind, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOptions, SessionNotification, SessionUpdate, SetSessionConfigOptionRequest,
    TextResourceContents,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client, UntypedMessage};
use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// How long an agent may take to answer `initialize` (reconcile.md: start timeout).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A runtime's `session/request_permission`, on its way to whoever answers it (the
/// `approvals` module, which serves the other end of [`PermissionAsks`]): the agent, the
/// request, and where the answer goes. The runtime only carries the question.
pub(crate) struct PermissionAsk {
    pub agent_id: String,
    pub request: RequestPermissionRequest,
    pub reply: oneshot::Sender<RequestPermissionResponse>,
}

/// Where the runtimes send their permission requests: a channel the composition root makes
/// before the runtimes and the approvals, whose receiver the approvals serve. A receiver gone,
/// or an answer never sent: the request is rejected.
#[derive(Clone)]
pub(crate) struct PermissionAsks(mpsc::UnboundedSender<PermissionAsk>);

impl PermissionAsks {
    /// The sending end, and the receiving end the answerer serves.
    pub(crate) fn channel() -> (PermissionAsks, mpsc::UnboundedReceiver<PermissionAsk>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (PermissionAsks(tx), rx)
    }

    /// Whether anybody still answers (else every request is rejected at once).
    pub(crate) fn answers(&self) -> bool {
        !self.0.is_closed()
    }

    /// Asks, and waits for the answer (a reject when nobody answers).
    pub(crate) async fn ask(
        &self,
        agent_id: String,
        request: RequestPermissionRequest,
    ) -> RequestPermissionResponse {
        let fallback = reject(&request);
        let (reply, answer) = oneshot::channel();
        if self
            .0
            .send(PermissionAsk {
                agent_id,
                request,
                reply,
            })
            .is_err()
        {
            return fallback;
        }
        answer.await.unwrap_or(fallback)
    }
}

/// The time each ACP session of a runtime spent waiting for a person (a permission request
/// out for an answer): the Access layer does not count it against the prompt timeout.
#[derive(Default)]
pub(crate) struct PersonWaits {
    open: Mutex<HashMap<String, Wait>>,
    changed: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Wait {
    open: usize,
    since: Option<std::time::Instant>,
    total: Duration,
}

impl PersonWaits {
    fn begin(&self, session_id: &str) {
        if let Ok(mut map) = self.open.lock() {
            let w = map.entry(session_id.to_string()).or_default();
            if w.open == 0 {
                w.since = Some(std::time::Instant::now());
            }
            w.open += 1;
        }
        self.changed.send_modify(|n| *n += 1);
    }

    fn end(&self, session_id: &str) {
        if let Ok(mut map) = self.open.lock()
            && let Some(w) = map.get_mut(session_id)
        {
            w.open = w.open.saturating_sub(1);
            if w.open == 0
                && let Some(since) = w.since.take()
            {
                w.total += since.elapsed();
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// How long session `session_id` has waited for a person so far, and whether it waits now.
    pub(crate) fn waited(&self, session_id: &str) -> (Duration, bool) {
        let Ok(map) = self.open.lock() else {
            return (Duration::ZERO, false);
        };
        match map.get(session_id) {
            None => (Duration::ZERO, false),
            Some(w) => (
                w.total + w.since.map_or(Duration::ZERO, |s| s.elapsed()),
                w.open > 0,
            ),
        }
    }

    /// Forgets a session's count (its prompt ended).
    pub(crate) fn forget(&self, session_id: &str) {
        if let Ok(mut map) = self.open.lock()
            && map.get(session_id).is_some_and(|w| w.open == 0)
        {
            map.remove(session_id);
        }
    }

    /// Wakes on every begin and end.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// Who listens to which session's `session/update` notifications (by ACP session id).
pub(crate) type Subscribers =
    Arc<Mutex<HashMap<String, mpsc::UnboundedSender<SessionNotification>>>>;

/// What the Access layer needs to talk to a ready ACP runtime. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AcpHandle {
    pub cx: ConnectionTo<Agent>,
    /// Where a session's updates go while someone prompts it.
    pub subscribers: Subscribers,
    /// What the agent said about itself: `agentInfo`, `agentCapabilities`, `protocolVersion`.
    pub info: serde_json::Value,
    /// The ACP sessions opened (new or loaded) in this process, each with the session key it
    /// serves: a restarted runtime has none.
    pub open: Arc<Mutex<HashMap<String, String>>>,
    /// The runtime's working directory (`cwd` of `session/new`).
    pub cwd: std::path::PathBuf,
    /// Which process this is: changes with every start.
    pub pid: u32,
    /// This start of the runtime, unique across restarts and controllers: a runtime session id
    /// means something only to the instance that issued it.
    pub instance: String,
    /// The model option of each session open here, and what deepcli applied through it.
    pub models: Arc<Mutex<HashMap<String, SessionModel>>>,
    /// Time each session spent waiting for a person.
    pub waits: Arc<PersonWaits>,
}

/// A runtime session's model selection (ACP session config option of category `model`), and
/// the config model deepcli last applied through it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SessionModel {
    /// The config's `model` it was applied for (its candidates, in order): a changed config
    /// is applied again.
    pub wanted: Vec<String>,
    /// The option's `configId` and the values it offers; `None` when the session offers no
    /// model selection.
    pub option: Option<(String, Vec<String>)>,
    /// The option's current value, as the agent last said.
    pub current: Option<String>,
}

/// What became of an agent's `model` (`deepcli status`, `agents list`): the model in use, a
/// fallback and why, or why none could be applied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ModelReport {
    /// The model the config asks for (`model`, or `model.primary`).
    pub wanted: String,
    /// The model deepcli applied (the primary or a fallback); `None`: not applied.
    pub applied: Option<String>,
    /// Why `applied` is not `wanted`, or why nothing is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl AcpHandle {
    /// The handle of a freshly connected runtime: a new instance with no session open.
    pub(crate) fn new(connection: &AcpConnection, cwd: std::path::PathBuf, pid: u32) -> AcpHandle {
        AcpHandle {
            cx: connection.cx.clone(),
            subscribers: connection.subscribers.clone(),
            info: connection.info.clone(),
            open: Arc::default(),
            cwd,
            pid,
            instance: uuid::Uuid::new_v4().to_string(),
            models: Arc::default(),
            waits: connection.waits.clone(),
        }
    }

    /// The session key runtime session `id` serves in this instance, if it is open here.
    pub(crate) fn holder(&self, id: &str) -> Option<String> {
        self.open.lock().ok()?.get(id).cloned()
    }

    /// The runtime session that serves `session_key` in this instance, when exactly one does:
    /// what the state database would say, without asking it.
    pub(crate) fn serving(&self, session_key: &str) -> Option<String> {
        let open = self.open.lock().ok()?;
        let mut ids = open
            .iter()
            .filter(|(_, key)| *key == session_key)
            .map(|(id, _)| id);
        let id = ids.next()?.clone();
        ids.next().is_none().then_some(id)
    }

    /// Marks runtime session `id` as serving `session_key` in this instance; false when it
    /// already serves another session key (a runtime session is never shared).
    pub(crate) fn claim(&self, id: &str, session_key: &str) -> bool {
        let Ok(mut open) = self.open.lock() else {
            return false;
        };
        match open.get(id) {
            Some(holder) => holder == session_key,
            None => {
                open.insert(id.to_string(), session_key.to_string());
                true
            }
        }
    }

    /// Forgets a claim whose session could not be opened, or a session closed.
    pub(crate) fn release(&self, id: &str) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(id);
        }
        if let Ok(mut models) = self.models.lock() {
            models.remove(id);
        }
    }

    /// The model selection of session `id`, as last seen.
    pub(crate) fn session_model(&self, id: &str) -> Option<SessionModel> {
        self.models.lock().ok()?.get(id).cloned()
    }

    pub(crate) fn set_session_model(&self, id: &str, model: SessionModel) {
        if let Ok(mut models) = self.models.lock() {
            models.insert(id.to_string(), model);
        }
    }

    /// Whether the agent said it can resume a session (`session/load`).
    pub(crate) fn loads_sessions(&self) -> bool {
        self.info["agentCapabilities"]["loadSession"] == true
    }

    /// Whether the agent said it can close a session (`session/close`,
    /// `sessionCapabilities.close`).
    pub(crate) fn closes_sessions(&self) -> bool {
        self.info["agentCapabilities"]["sessionCapabilities"]["close"].is_object()
    }
}

/// The session's model selection, from the config options a `session/new` or `session/load`
/// answer carried: the select option of category `model` (or, without categories, the one
/// with id `model`), its id, current value and offered values.
pub(crate) fn selection(options: Option<&[SessionConfigOption]>) -> SessionModel {
    let options = options.unwrap_or_default();
    let is_model = |o: &&SessionConfigOption| {
        o.category == Some(SessionConfigOptionCategory::Model)
            || (o.category.is_none() && &*o.id.0 == "model")
    };
    let select = options.iter().filter(is_model).find_map(|o| match &o.kind {
        SessionConfigKind::Select(select) => Some((o, select)),
        _ => None,
    });
    let Some((option, select)) = select else {
        return SessionModel::default();
    };
    let values = match &select.options {
        SessionConfigSelectOptions::Ungrouped(options) => {
            options.iter().map(|o| o.value.0.to_string()).collect()
        }
        SessionConfigSelectOptions::Grouped(groups) => groups
            .iter()
            .flat_map(|g| &g.options)
            .map(|o| o.value.0.to_string())
            .collect(),
        _ => Vec::new(),
    };
    SessionModel {
        wanted: Vec::new(),
        option: Some((option.id.0.to_string(), values)),
        current: Some(select.current_value.0.to_string()),
    }
}

/// The ACP mechanics of a turn: open (new or load), prompt (subscribe, collect the updates),
/// cancel, close, over this runtime's connection.
impl super::SessionRuntime for AcpHandle {
    fn instance(&self) -> &str {
        &self.instance
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn cwd(&self) -> &std::path::Path {
        &self.cwd
    }

    fn loads_sessions(&self) -> bool {
        AcpHandle::loads_sessions(self)
    }

    fn closes_sessions(&self) -> bool {
        AcpHandle::closes_sessions(self)
    }

    fn takes_mcp_http(&self) -> bool {
        self.info["agentCapabilities"]["mcpCapabilities"]["http"] == true
    }

    fn holder(&self, id: &str) -> Option<String> {
        AcpHandle::holder(self, id)
    }

    fn serving(&self, session_key: &str) -> Option<String> {
        AcpHandle::serving(self, session_key)
    }

    fn claim(&self, id: &str, session_key: &str) -> bool {
        AcpHandle::claim(self, id, session_key)
    }

    fn release(&self, id: &str) {
        AcpHandle::release(self, id);
    }

    fn session_model(&self, id: &str) -> Option<SessionModel> {
        AcpHandle::session_model(self, id)
    }

    fn set_session_model(&self, id: &str, model: SessionModel) {
        AcpHandle::set_session_model(self, id, model);
    }

    fn load_session(
        &self,
        id: &str,
        cwd: std::path::PathBuf,
        mcp: Vec<McpServer>,
    ) -> BoxFuture<'static, Result<super::OpenedSession, String>> {
        let (cx, id) = (self.cx.clone(), id.to_string());
        Box::pin(async move {
            let request = LoadSessionRequest::new(id.clone(), cwd).mcp_servers(mcp);
            let loaded = cx
                .send_request(request)
                .block_task()
                .await
                .map_err(|e| e.to_string())?;
            Ok(super::OpenedSession {
                id,
                model: selection(loaded.config_options.as_deref()),
            })
        })
    }

    fn new_session(
        &self,
        cwd: std::path::PathBuf,
        mcp: Vec<McpServer>,
    ) -> BoxFuture<'static, Result<super::OpenedSession, String>> {
        let cx = self.cx.clone();
        Box::pin(async move {
            let created = cx
                .send_request(NewSessionRequest::new(cwd).mcp_servers(mcp))
                .block_task()
                .await
                .map_err(|e| e.to_string())?;
            Ok(super::OpenedSession {
                id: created.session_id.0.to_string(),
                model: selection(created.config_options.as_deref()),
            })
        })
    }

    fn set_config_option(
        &self,
        session_id: &str,
        config_id: &str,
        value: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        let cx = self.cx.clone();
        let request = SetSessionConfigOptionRequest::new(
            session_id.to_string(),
            config_id.to_string(),
            value,
        );
        Box::pin(async move {
            cx.send_request(request)
                .block_task()
                .await
                .map(drop)
                .map_err(|e| e.message.to_string())
        })
    }

    fn prompt(
        &self,
        session_id: &str,
        text: String,
        files: &[super::PromptFile],
    ) -> super::PendingPrompt {
        let (tx, mut notifications) = mpsc::unbounded_channel::<SessionNotification>();
        if let Ok(mut subs) = self.subscribers.lock() {
            subs.insert(session_id.to_string(), tx);
        }
        struct Unsubscribe(Subscribers, String);
        impl Drop for Unsubscribe {
            fn drop(&mut self) {
                if let Ok(mut subs) = self.0.lock() {
                    subs.remove(&self.1);
                }
            }
        }
        let listening = Unsubscribe(self.subscribers.clone(), session_id.to_string());
        // The updates, in the engine's words, read when asked for (all that came before the
        // answer are in the channel by then); a session's other updates are left out.
        let next = move || {
            while let Ok(n) = notifications.try_recv() {
                match n.update {
                    SessionUpdate::AgentMessageChunk(chunk) => {
                        if let ContentBlock::Text(t) = chunk.content {
                            return Some(super::PromptUpdate::Text(t.text));
                        }
                    }
                    // The session's running cost (ACP usage_update); only USD is reported.
                    SessionUpdate::UsageUpdate(usage) => {
                        if let Some(cost) = usage
                            .cost
                            .filter(|c| c.currency.eq_ignore_ascii_case("USD"))
                        {
                            return Some(super::PromptUpdate::CostUsd(cost.amount));
                        }
                    }
                    _ => {}
                }
            }
            None
        };
        let cx = self.cx.clone();
        let blocks = prompt_blocks(
            text,
            files,
            &self.info["agentCapabilities"]["promptCapabilities"],
        );
        let request = PromptRequest::new(session_id.to_string(), blocks);
        let answer = Box::pin(async move {
            let r = cx
                .send_request(request)
                .block_task()
                .await
                .map_err(|e| e.to_string())?;
            let word = serde_json::to_value(r.stop_reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string));
            Ok(super::PromptEnd {
                stop_reason: word.as_deref().map(super::StopReason::parse),
                tokens: r.usage.as_ref().map(|u| u.total_tokens),
            })
        });
        super::PendingPrompt {
            answer,
            updates: Box::new(next),
            listening: Box::new(listening),
        }
    }

    fn cancel(&self, session_id: &str) -> bool {
        self.cx
            .send_notification(CancelNotification::new(session_id.to_string()))
            .is_ok()
    }

    fn close_session(&self, id: &str) -> BoxFuture<'static, Result<(), String>> {
        let cx = self.cx.clone();
        let request = CloseSessionRequest::new(id.to_string());
        Box::pin(async move {
            cx.send_request(request)
                .block_task()
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
    }

    fn person_waited(&self, session_id: &str) -> (Duration, bool) {
        self.waits.waited(session_id)
    }

    fn person_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.waits.subscribe()
    }

    fn forget_person_waits(&self, session_id: &str) {
        self.waits.forget(session_id);
    }
}

/// A live connection to an ACP agent.
pub(crate) struct AcpConnection {
    pub cx: ConnectionTo<Agent>,
    pub subscribers: Subscribers,
    pub info: serde_json::Value,
    pub waits: Arc<PersonWaits>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for AcpConnection {
    fn drop(&mut self) {
        // Ends the connection: the agent's stdin closes.
        self.driver.abort();
    }
}

/// Never allows: picks a one-shot reject option, else answers `cancelled` (fail closed). The
/// answer when nobody answers permission requests.
pub(crate) fn reject(req: &RequestPermissionRequest) -> RequestPermissionResponse {
    let reject = [
        PermissionOptionKind::RejectOnce,
        PermissionOptionKind::RejectAlways,
    ]
    .iter()
    .find_map(|kind| req.options.iter().find(|o| o.kind == *kind));
    RequestPermissionResponse::new(match reject {
        Some(o) => {
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone()))
        }
        None => RequestPermissionOutcome::Cancelled,
    })
}

fn untyped(method: &str, params: &impl serde::Serialize) -> Result<UntypedMessage, String> {
    UntypedMessage::new(method, params).map_err(|e| format!("cannot encode `{method}`: {e}"))
}

/// A prompt's content: the text, then each file as the block the agent's
/// `promptCapabilities` (`caps`) take ([`super::PromptFile`]).
fn prompt_blocks(
    text: String,
    files: &[super::PromptFile],
    caps: &serde_json::Value,
) -> Vec<ContentBlock> {
    use base64::Engine as _;
    let takes = |what: &str| caps[what].as_bool().unwrap_or(false);
    let mut blocks = vec![ContentBlock::from(text)];
    for file in files {
        let media = file.media_type.as_deref().unwrap_or("");
        let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let block = match &file.bytes {
            Some(bytes) if media.starts_with("image/") && takes("image") => {
                ContentBlock::Image(ImageContent::new(base64(bytes), media).uri(file.uri.clone()))
            }
            Some(bytes) if media.starts_with("audio/") && takes("audio") => {
                ContentBlock::Audio(AudioContent::new(base64(bytes), media))
            }
            Some(bytes) if takes("embeddedContext") => {
                let mime = file.media_type.clone();
                let resource = match std::str::from_utf8(bytes) {
                    Ok(text) if is_text(media) => EmbeddedResourceResource::TextResourceContents(
                        TextResourceContents::new(text, file.uri.clone()).mime_type(mime),
                    ),
                    _ => EmbeddedResourceResource::BlobResourceContents(
                        BlobResourceContents::new(base64(bytes), file.uri.clone()).mime_type(mime),
                    ),
                };
                ContentBlock::Resource(EmbeddedResource::new(resource))
            }
            _ => ContentBlock::ResourceLink(
                ResourceLink::new(file.name.clone(), file.uri.clone())
                    .mime_type(file.media_type.clone())
                    .size(i64::try_from(file.size).ok()),
            ),
        };
        blocks.push(block);
    }
    blocks
}

/// Whether content of media type `media` is text to an agent (`text/*`, JSON, XML, YAML).
fn is_text(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || ["json", "xml", "yaml"]
            .iter()
            .any(|t| essence.ends_with(&format!("/{t}")) || essence.ends_with(&format!("+{t}")))
}

/// The first `env_var` auth method of an `initialize` answer whose variables are all set.
fn env_auth_method(
    initialize: &serde_json::Value,
    has_env: &impl Fn(&str) -> bool,
) -> Option<String> {
    initialize
        .get("authMethods")?
        .as_array()?
        .iter()
        .filter(|m| m.get("type").and_then(|t| t.as_str()) == Some("env_var"))
        .find(|m| {
            m.get("vars")
                .and_then(|v| v.as_array())
                .is_some_and(|vars| {
                    !vars.is_empty()
                        && vars
                            .iter()
                            .all(|v| v.get("name").and_then(|n| n.as_str()).is_some_and(&has_env))
                })
        })?
        .get("id")?
        .as_str()
        .map(str::to_string)
}

/// Connects over the child's stdin/stdout and runs `initialize` (protocol version 1) within
/// `timeout`.
///
/// When the agent offers an `env_var` auth method whose variables are all in the runtime's
/// environment (`has_env`), it is authenticated with that method before it counts as ready:
/// an agent that wants an API key gets the one its config passes, and nothing is guessed.
pub(crate) async fn connect(
    child: &mut tokio::process::Child,
    timeout: Duration,
    has_env: impl Fn(&str) -> bool,
    (agent_id, asks): (&str, PermissionAsks),
) -> Result<AcpConnection, String> {
    let stdin = child.stdin.take().ok_or("the runtime has no stdin pipe")?;
    let stdout = child
        .stdout
        .take()
        .ok_or("the runtime has no stdout pipe")?;
    let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
    let subscribers = Subscribers::default();
    let listeners = subscribers.clone();
    let waits = Arc::new(PersonWaits::default());
    let asking = waits.clone();
    let agent_id = agent_id.to_string();
    let (cx_tx, cx_rx) = oneshot::channel::<ConnectionTo<Agent>>();
    let driver = tokio::spawn(async move {
        let result = Client
            .v1()
            .name("deepcli")
            .on_receive_notification(
                async move |n: SessionNotification, _cx| {
                    // Updates of a session nobody prompts (a `session/load` replay) are dropped.
                    if let Ok(map) = listeners.lock()
                        && let Some(to) = map.get(&*n.session_id.0)
                    {
                        let _ = to.send(n);
                    }
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |req: RequestPermissionRequest,
                            responder: Responder<RequestPermissionResponse>,
                            _cx| {
                    if !asks.answers() {
                        return responder.respond(reject(&req));
                    }
                    let asks = asks.clone();
                    // Answered from a task of its own: a person may take minutes, and the
                    // connection keeps reading meanwhile (the prompt's updates, its cancel).
                    let session = req.session_id.0.to_string();
                    let (asking, agent_id) = (asking.clone(), agent_id.clone());
                    tokio::spawn(async move {
                        asking.begin(&session);
                        let answer = asks.ask(agent_id, req).await;
                        asking.end(&session);
                        if let Err(e) = responder.respond(answer) {
                            tracing::debug!(error = %e, "cannot answer a permission request");
                        }
                    });
                    Ok(())
                },
                agent_client_protocol::on_receive_request!(),
            )
            // Other agent→client requests (fs/*, terminal/*) get "method not found".
            .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
                let _ = cx_tx.send(cx.clone());
                cx.incoming_closed().await;
                Ok(())
            })
            .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "ACP connection ended");
        }
    });
    let cx = cx_rx
        .await
        .map_err(|_| "the ACP connection closed before it opened".to_string())?;
    let request = InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(ClientCapabilities::default())
        .client_info(Implementation::new("deepcli", env!("CARGO_PKG_VERSION")));
    let ready = async {
        // Sent untyped so that deepcli sees the agent's auth methods as written: the typed v1
        // schema folds unknown method types (such as `env_var`) into plain methods.
        let raw = cx
            .send_request(untyped("initialize", &request)?)
            .block_task()
            .await
            .map_err(|e| format!("`initialize` failed: {e}"))?;
        let response: InitializeResponse = serde_json::from_value(raw.clone())
            .map_err(|e| format!("`initialize` answered something that is not ACP: {e}"))?;
        let mut info = serde_json::json!({
            "protocolVersion": response.protocol_version,
            "agentInfo": response.agent_info,
            "agentCapabilities": response.agent_capabilities,
            "authMethods": raw.get("authMethods").cloned().unwrap_or_default(),
        });
        if let Some(method) = env_auth_method(&raw, &has_env) {
            cx.send_request(AuthenticateRequest::new(method.clone()))
                .block_task()
                .await
                .map_err(|e| format!("`authenticate` with `{method}` failed: {e}"))?;
            info["authenticated"] = method.into();
        }
        Ok::<_, String>(info)
    };
    let info = match tokio::time::timeout(timeout, ready).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => {
            driver.abort();
            return Err(e);
        }
        Err(_) => {
            driver.abort();
            return Err(format!(
                "no answer to `initialize` within {} s",
                timeout.as_secs()
            ));
        }
    };
    Ok(AcpConnection {
        cx,
        subscribers,
        info,
        waits,
        driver,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file is the block the agent takes: bytes where its capabilities say so, a link to
    /// the workspace file otherwise, and a link when the bytes are gone.
    #[test]
    fn a_file_is_the_content_block_the_agent_takes() {
        let file = |name: &str, media: &str, bytes: Option<&[u8]>| super::super::PromptFile {
            name: name.to_string(),
            uri: format!("file:///w/.deepcli/a2a/t/{name}"),
            media_type: Some(media.to_string()),
            size: 3,
            bytes: bytes.map(<[u8]>::to_vec),
        };
        let files = [
            file("p.png", "image/png", Some(b"PNG")),
            file("a.ogg", "audio/ogg", Some(b"OGG")),
            file("r.txt", "text/plain; charset=utf-8", Some(b"abc")),
            file("d.bin", "application/octet-stream", Some(b"\xff\x00\x01")),
            file("gone.txt", "text/plain", None),
        ];
        let kinds = |caps: serde_json::Value| {
            let blocks = prompt_blocks("hi".into(), &files, &caps);
            serde_json::to_value(blocks).unwrap()
        };
        let all = kinds(serde_json::json!({"image": true, "audio": true, "embeddedContext": true}));
        assert_eq!(all[0], serde_json::json!({"type": "text", "text": "hi"}));
        assert_eq!(
            all[1],
            serde_json::json!({"type": "image", "data": "UE5H", "mimeType": "image/png", "uri": "file:///w/.deepcli/a2a/t/p.png"})
        );
        assert_eq!(
            all[2],
            serde_json::json!({"type": "audio", "data": "T0dH", "mimeType": "audio/ogg"})
        );
        assert_eq!(
            all[3]["resource"],
            serde_json::json!({"text": "abc", "uri": "file:///w/.deepcli/a2a/t/r.txt", "mimeType": "text/plain; charset=utf-8"})
        );
        assert_eq!(all[4]["resource"]["blob"], "/wAB");
        assert_eq!(
            all[5],
            serde_json::json!({"type": "resource_link", "name": "gone.txt", "uri": "file:///w/.deepcli/a2a/t/gone.txt", "mimeType": "text/plain", "size": 3})
        );
        // No capabilities: links only (ACP's baseline), never bytes.
        let none = kinds(serde_json::Value::Null);
        let types: Vec<&str> = none
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "text",
                "resource_link",
                "resource_link",
                "resource_link",
                "resource_link",
                "resource_link"
            ]
        );
        // Images only: the rest embedded is not taken, so linked.
        let images = kinds(serde_json::json!({"image": true}));
        assert_eq!(images[1]["type"], "image");
        assert_eq!(images[3]["type"], "resource_link");
    }

    #[test]
    fn the_model_option_is_found_by_category_or_id() {
        let option = |id: &str, category: Option<SessionConfigOptionCategory>| {
            SessionConfigOption::select(
                id.to_string(),
                "Model",
                "a",
                vec![
                    agent_client_protocol::v1::schema::SessionConfigSelectOption::new("a", "A"),
                    agent_client_protocol::v1::schema::SessionConfigSelectOption::new("b", "B"),
                ],
            )
            .category(category)
        };
        let found = selection(Some(&[
            option("mode", Some(SessionConfigOptionCategory::Mode)),
            option("llm", Some(SessionConfigOptionCategory::Model)),
        ]));
        assert_eq!(
            found.option,
            Some(("llm".to_string(), vec!["a".to_string(), "b".to_string()]))
        );
        assert_eq!(found.current.as_deref(), Some("a"));
        assert_eq!(
            selection(Some(&[option("model", None)]))
                .option
                .map(|o| o.0),
            Some("model".to_string())
        );
        assert_eq!(selection(None), SessionModel::default());
        assert_eq!(
            selection(Some(&[option(
                "mode",
                Some(SessionConfigOptionCategory::Mode)
            )]))
            .option,
            None
        );
    }

    #[tokio::test]
    async fn a_permission_request_is_answered_by_whoever_serves_the_channel_else_rejected() {
        let request: RequestPermissionRequest = serde_json::from_value(serde_json::json!({
            "sessionId": "s",
            "toolCall": {"toolCallId": "t"},
            "options": [
                {"optionId": "no", "name": "No", "kind": "reject_once"},
                {"optionId": "ok", "name": "Ok", "kind": "allow_once"},
            ],
        }))
        .unwrap();
        let chosen = |r: RequestPermissionResponse| {
            serde_json::to_value(r).unwrap()["outcome"]["optionId"].clone()
        };
        let (asks, mut rx) = PermissionAsks::channel();
        assert!(asks.answers());
        let answering = tokio::spawn(async move {
            let ask = rx.recv().await.unwrap();
            assert_eq!(ask.agent_id, "a");
            let ok = RequestPermissionResponse::new(RequestPermissionOutcome::Selected(
                SelectedPermissionOutcome::new("ok"),
            ));
            let _ = ask.reply.send(ok);
            rx
        });
        assert_eq!(chosen(asks.ask("a".into(), request.clone()).await), "ok");
        // An answerer that drops the question: rejected.
        let mut rx = answering.await.unwrap();
        let dropping = tokio::spawn(async move {
            drop(rx.recv().await);
            rx
        });
        assert_eq!(chosen(asks.ask("a".into(), request.clone()).await), "no");
        // Nobody serves the channel any more: rejected at once.
        drop(dropping.await.unwrap());
        assert!(!asks.answers());
        assert_eq!(chosen(asks.ask("a".into(), request).await), "no");
    }
}
