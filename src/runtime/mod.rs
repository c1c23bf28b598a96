//! Runtime supervision (reconcile.md, "Runtimes"): one task per agent whose `runtime.kind` is
//! `process` or `acp` spawns its command in its own process group, pumps its output into a
//! size-capped log, restarts it after a crash with exponential backoff, and stops it with the
//! ladder: close stdin, SIGTERM the tree, SIGKILL the tree. No process a runtime started
//! outlives it, in its group or not (`tree.rs`).
//!
//! This module runs processes and reports what they do; it does not decide which should run
//! (the controller hands it the desired set) and it does not touch the state database (status
//! changes go out on a channel).

pub(crate) mod a2a;
pub(crate) mod acp;
pub(crate) mod budget_report;
pub(crate) mod log;
mod process;
pub(crate) mod remote_waits;
mod tree;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::config::Agent;
use crate::config::model::{EnvValue, Runtime, RuntimeKind, Secret};

pub(crate) use process::stop_leftover;
pub(crate) use tree::{ProcessId, adopt_orphans, reap_adopted};

/// Backoff after a crash: 1 s doubling to 5 min, back to 1 s after 10 min of health.
pub(crate) const BACKOFF_START: Duration = Duration::from_secs(1);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(300);
pub(crate) const HEALTHY_AFTER: Duration = Duration::from_secs(600);
/// How long a runtime may take to exit after SIGTERM before it gets SIGKILL.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a runtime may take to exit after its stdin closes.
pub(crate) const STDIN_GRACE: Duration = Duration::from_secs(2);
/// How often a running runtime's processes outside its group are looked for and recorded.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The supervision timings. The defaults are the constants above; a test of the backoff or the
/// stop ladder shortens them to moments (`deepcli up` with the `failpoints` feature reads
/// `DEEPCLI_FAILPOINT_RUNTIME_MS` once at start-up, see [`Timings::overridden`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timings {
    pub backoff_start: Duration,
    pub backoff_max: Duration,
    pub healthy_after: Duration,
    pub stdin_grace: Duration,
    pub stop_timeout: Duration,
    /// How often a remote A2A agent's card is checked.
    pub a2a_card_every: Duration,
}

impl Default for Timings {
    fn default() -> Timings {
        Timings {
            backoff_start: BACKOFF_START,
            backoff_max: BACKOFF_MAX,
            healthy_after: HEALTHY_AFTER,
            stdin_grace: STDIN_GRACE,
            stop_timeout: STOP_TIMEOUT,
            a2a_card_every: a2a::CARD_EVERY,
        }
    }
}

impl Timings {
    /// These timings with the ones `list` names (`backoff_start=50,stop_timeout=300`:
    /// milliseconds for `backoff_start`, `backoff_max`, `healthy_after`, `stdin_grace`,
    /// `stop_timeout`, `a2a_card_every`); a name it does not know, or a value that is no
    /// number, is ignored.
    #[cfg(feature = "failpoints")]
    pub(crate) fn overridden(mut self, list: &str) -> Timings {
        for pair in list.split(',') {
            let Some((key, ms)) = pair.split_once('=') else {
                continue;
            };
            let Ok(ms) = ms.trim().parse() else {
                continue;
            };
            let slot = match key.trim() {
                "backoff_start" => &mut self.backoff_start,
                "backoff_max" => &mut self.backoff_max,
                "healthy_after" => &mut self.healthy_after,
                "stdin_grace" => &mut self.stdin_grace,
                "stop_timeout" => &mut self.stop_timeout,
                "a2a_card_every" => &mut self.a2a_card_every,
                _ => continue,
            };
            *slot = Duration::from_millis(ms);
        }
        self
    }
}

/// Why a runtime ended a prompt (ACP `stopReason`; an A2A remote's final task state mapped
/// to the same words). Recorded and shown by its word ([`StopReason::as_str`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
    /// An A2A remote's task asks back (`TASK_STATE_INPUT_REQUIRED`).
    InputRequired,
    /// A word this build does not know, as the runtime said it.
    Other(String),
}

impl StopReason {
    /// The reason as the runtime's word (`end_turn`, `cancelled`, …).
    pub(crate) fn parse(word: &str) -> StopReason {
        match word {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" => StopReason::MaxTokens,
            "max_turn_requests" => StopReason::MaxTurnRequests,
            "refusal" => StopReason::Refusal,
            "cancelled" => StopReason::Cancelled,
            "input_required" => StopReason::InputRequired,
            other => StopReason::Other(other.to_string()),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Refusal => "refusal",
            StopReason::Cancelled => "cancelled",
            StopReason::InputRequired => "input_required",
            StopReason::Other(word) => word,
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a runtime says about a prompt while it runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PromptUpdate {
    /// A piece of the agent's reply.
    Text(String),
    /// The session's running cost in USD (another currency is not reported).
    CostUsd(f64),
}

/// How a prompt ended, when the runtime answered it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PromptEnd {
    /// `None`: a word the runtime's protocol could not say (never for ACP).
    pub stop_reason: Option<StopReason>,
    /// The session's running token total, when the runtime reports one with its answer.
    pub tokens: Option<u64>,
}

/// A prompt sent and not yet answered: its answer, and its updates in the order they came
/// (`updates` gives the next one that has arrived, `None` when none waits). Dropping it stops
/// listening to the session's updates.
pub(crate) struct PendingPrompt {
    pub answer: futures_util::future::BoxFuture<'static, Result<PromptEnd, String>>,
    pub updates: Box<dyn FnMut() -> Option<PromptUpdate> + Send>,
    /// Held while the prompt is listened to; what it undoes runs on drop.
    pub listening: Box<dyn Send + Sync>,
}

/// A runtime session opened (`session/new`, `session/load`): its id and model selection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpenedSession {
    pub id: String,
    pub model: acp::SessionModel,
}

/// A file given to an agent with a prompt (an A2A peer's, already in its workspace): after the
/// text, an ACP content block of the kind the agent's `promptCapabilities` take — `image` or
/// `audio` with its bytes, else an embedded `resource` (`embeddedContext`), else a
/// `resource_link` to where it is, which every ACP agent takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PromptFile {
    pub name: String,
    /// `file://` and its path in the workspace, as the agent sees it.
    pub uri: String,
    pub media_type: Option<String>,
    pub size: u64,
    /// Its bytes as they were written, or `None` when they are no longer there as written
    /// (the agent changed or removed the file): then only the link is given.
    pub bytes: Option<Vec<u8>>,
}

/// A ready runtime that holds sessions and is prompted in them (ACP), as the turn engine
/// (`crate::sessions`) sees it: the ACP mechanics live beside the ACP client (`acp.rs`), an
/// in-memory fake stands in for it in the engine's tests.
pub(crate) trait SessionRuntime: Send + Sync {
    /// This start of the runtime: a session id means something only to the instance that
    /// issued it.
    fn instance(&self) -> &str;
    fn pid(&self) -> u32;
    /// The runtime's working directory (a session's, unless the binding sets one).
    fn cwd(&self) -> &std::path::Path;
    /// Whether the agent can resume a session (`session/load`).
    fn loads_sessions(&self) -> bool;
    /// Whether the agent can close a session (`session/close`).
    fn closes_sessions(&self) -> bool;
    /// Whether the agent takes MCP over HTTP (`mcpCapabilities.http`).
    fn takes_mcp_http(&self) -> bool;
    /// The session key runtime session `id` serves in this instance, if it is open here.
    fn holder(&self, id: &str) -> Option<String>;
    /// The runtime session that serves `session_key` in this instance, when exactly one does.
    fn serving(&self, session_key: &str) -> Option<String>;
    /// Marks session `id` as serving `session_key`; false when it serves another key.
    fn claim(&self, id: &str, session_key: &str) -> bool;
    /// Forgets a claim whose session could not be opened, or a session closed.
    fn release(&self, id: &str);
    fn session_model(&self, id: &str) -> Option<acp::SessionModel>;
    fn set_session_model(&self, id: &str, model: acp::SessionModel);
    fn load_session(
        &self,
        id: &str,
        cwd: PathBuf,
        mcp: Vec<agent_client_protocol::v1::schema::McpServer>,
    ) -> futures_util::future::BoxFuture<'static, Result<OpenedSession, String>>;
    fn new_session(
        &self,
        cwd: PathBuf,
        mcp: Vec<agent_client_protocol::v1::schema::McpServer>,
    ) -> futures_util::future::BoxFuture<'static, Result<OpenedSession, String>>;
    /// Sets a session config option (the model's); the agent's refusal as its message.
    fn set_config_option(
        &self,
        session_id: &str,
        config_id: &str,
        value: &str,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
    /// Sends `text` as a prompt in session `session_id`, with `files` after it as the content
    /// blocks the agent takes.
    fn prompt(&self, session_id: &str, text: String, files: &[PromptFile]) -> PendingPrompt;
    /// Asks the runtime to cancel the turn running in session `session_id`; whether it was sent.
    fn cancel(&self, session_id: &str) -> bool;
    /// `session/close`.
    fn close_session(
        &self,
        id: &str,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
    /// How long session `session_id` has waited for a person so far, and whether it waits now.
    fn person_waited(&self, session_id: &str) -> (Duration, bool);
    /// Wakes on every change of a person wait.
    fn person_changes(&self) -> tokio::sync::watch::Receiver<u64>;
    /// Forgets a session's person waits (its prompt ended).
    fn forget_person_waits(&self, session_id: &str);
}

/// Everything needed to start one agent's runtime. Its hash decides restarts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RuntimeSpec {
    pub agent_id: String,
    pub kind: RuntimeKind,
    pub command: Vec<String>,
    pub env: Vec<(String, EnvValue)>,
    pub cwd: PathBuf,
    /// An isolated `HOME` under the agent's agentDir.
    pub home: PathBuf,
    pub log: PathBuf,
    /// How big its log grows and how many older files are kept (`--log-max-size`, `--log-keep`).
    pub log_limit: log::Limit,
    pub spec_hash: String,
    /// `kind: a2a`: the remote agent's endpoint and the token deepcli sends it.
    pub url: Option<String>,
    pub token: Option<Secret>,
    /// `kind: a2a`: where the key the remote's card must be signed with is.
    pub card_key: Option<Secret>,
    /// Names of the controller's environment passed on as they are (`runtime.inheritEnv`).
    pub inherit_env: Vec<String>,
    /// The sandbox it runs in; `None`: `sandbox.mode: off`.
    pub sandbox: Option<crate::sandbox::Layout>,
    /// The host directory with its sandbox's sockets (the hub's door, the egress proxy).
    pub run_dir: Option<PathBuf>,
}

/// Resolves a remote's token now (`kind: a2a`); the value lives only in memory, exposed only
/// in the `Authorization` header.
pub(crate) fn resolve_token(token: &Secret) -> Result<secrecy::SecretString, String> {
    let value = match token {
        Secret::Inline(_) => return Err("written inline (validate refuses it)".into()),
        Secret::Ref(r) => r.resolve().map_err(|e| e.to_string())?,
    };
    if secrecy::ExposeSecret::expose_secret(&value)
        .trim()
        .is_empty()
    {
        return Err("empty".into());
    }
    Ok(value)
}

/// The hash of what a runtime is started from: a change restarts it.
pub(crate) fn spec_hash(runtime: &Runtime, workspace: &Path) -> String {
    let text = serde_json::to_string(runtime).unwrap_or_default();
    crate::hash::Hasher::default()
        .part(text.as_bytes())
        .part(workspace.as_os_str().as_encoded_bytes())
        .finish()
}

impl RuntimeSpec {
    /// The runtime of `agent`, unless it has none to run.
    /// `home` expands a `~/` cwd, as it does the config's other paths.
    pub(crate) fn from_agent(
        agent: &Agent,
        logs: &Path,
        log_limit: log::Limit,
        home: Option<&Path>,
        around: &crate::sandbox::Surroundings,
    ) -> Option<RuntimeSpec> {
        let runtime = agent.spec.runtime.as_ref()?;
        if runtime.kind == RuntimeKind::None {
            return None;
        }
        let cwd = crate::sandbox::runtime_cwd(agent, home);
        let command = runtime.command.clone().unwrap_or_default();
        let agent_home = agent.agent_dir.join("home");
        let sandbox = crate::sandbox::Layout::for_agent(agent, around, home);
        let run_dir = sandbox
            .as_ref()
            .filter(|s| s.network.is_private())
            .map(|_| around.state_dir.join("run").join(agent.id()));
        Some(RuntimeSpec {
            agent_id: agent.id().to_string(),
            kind: runtime.kind,
            command,
            env: runtime
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cwd,
            home: agent_home,
            log: logs.join(format!("{}.log", agent.id())),
            log_limit,
            spec_hash: spec_hash(runtime, &agent.workspace),
            url: runtime.url.clone(),
            token: runtime.token.clone(),
            card_key: runtime.card_key.clone(),
            inherit_env: runtime.inherit_env.clone(),
            sandbox,
            run_dir,
        })
    }
}

impl RuntimeSpec {
    /// Where its sandbox finds the hub's socket when that is not
    /// [`crate::sandbox::HUB_SOCKET`]: with the Landlock backend, which mounts nothing, the
    /// socket's host path.
    pub(crate) fn hub_socket(&self) -> Option<PathBuf> {
        let (layout, run_dir) = (self.sandbox.as_ref()?, self.run_dir.as_ref()?);
        let choice = crate::sandbox::choose(layout, crate::sandbox::Host::get()).ok()?;
        (choice.backend == crate::sandbox::LANDLOCK).then(|| run_dir.join("hub.sock"))
    }
}

pub(crate) use crate::state::RuntimePhase as Phase;

/// One runtime's status, as `deepcli status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeStatus {
    pub agent_id: String,
    pub kind: String,
    pub status: Phase,
    pub pid: Option<u32>,
    /// The start time of `pid`: with it, names the process even after the pid is reused.
    #[serde(skip)]
    pub process_start: Option<String>,
    /// Its processes outside its process group (`setsid`, `setpgid`) as last looked for, and
    /// any a stop could not kill: on record so that the controller after a killed one stops
    /// them too.
    #[serde(skip)]
    pub escaped: Vec<ProcessId>,
    pub started_at: Option<String>,
    pub restarts: u64,
    pub last_exit: Option<String>,
    pub last_error: Option<String>,
    /// What an ACP agent reported at `initialize`: name, version, capabilities.
    pub info: Option<serde_json::Value>,
    pub spec_hash: String,
    /// Its sandbox in one line (`all (bwrap, network host)`, `off`); absent for a runtime
    /// that starts no process here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// When a crash-looping runtime starts again.
    pub next_start: Option<String>,
    /// What became of the agent's `model` in this runtime (set by the controller from what
    /// the Access layer applied; absent when the agent sets no model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<acp::ModelReport>,
    /// The agent's budget counters against its `budgets` (set by the controller from the
    /// Access layer; absent when the agent sets none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<budget_report::BudgetReport>,
}

impl RuntimeStatus {
    /// This status as the state records it.
    pub(crate) fn observation(&self) -> crate::state::RuntimeObservation<'_> {
        crate::state::RuntimeObservation {
            agent_id: &self.agent_id,
            kind: &self.kind,
            spec_hash: &self.spec_hash,
            status: self.status,
            pid: self.pid,
            process_start: self.process_start.as_deref(),
            escaped: &self.escaped,
            started_at: self.started_at.as_deref(),
            restarts: self.restarts,
            last_exit: self.last_exit.as_deref(),
            last_error: self.last_error.as_deref(),
            info: self.info.as_ref(),
        }
    }
}

/// Every runtime's status by agent id, kept current by the supervising tasks.
pub(crate) type RuntimeMap = Arc<Mutex<BTreeMap<String, RuntimeStatus>>>;

/// The ready ACP runtimes by agent id, for the Access layer to deliver to.
pub(crate) type AcpMap = Arc<Mutex<BTreeMap<String, acp::AcpHandle>>>;

/// Status changes, for whoever records them.
pub(crate) type Events = mpsc::UnboundedSender<RuntimeStatus>;

type StopAck = oneshot::Sender<()>;

struct Running {
    spec: RuntimeSpec,
    stop: oneshot::Sender<StopAck>,
    task: tokio::task::JoinHandle<()>,
}

/// The runtimes of one controller.
pub(crate) struct Supervisor {
    running: BTreeMap<String, Running>,
    status: RuntimeMap,
    acp: AcpMap,
    asks: acp::PermissionAsks,
    remotes: a2a::RemoteMap,
    hooks: a2a::PushHooks,
    waits: Arc<remote_waits::RemoteWaits>,
    events: Events,
    timings: Timings,
}

impl Supervisor {
    /// The runtimes' status changes go out on `events`; their permission requests to `asks`;
    /// remote A2A agents that cannot stream push to webhooks on the listener at `listener`
    /// (its address, and the URL others reach it at when that is not its address).
    pub(crate) fn new(
        events: Events,
        asks: acp::PermissionAsks,
        timings: Timings,
        listener: (std::net::SocketAddr, Option<url::Url>),
        waits: remote_waits::RemoteWaits,
    ) -> Supervisor {
        Supervisor {
            running: BTreeMap::new(),
            status: Arc::default(),
            acp: Arc::default(),
            asks,
            remotes: Arc::default(),
            hooks: a2a::PushHooks::listening_on(listener.0, listener.1),
            waits: Arc::new(waits),
            events,
            timings,
        }
    }

    pub(crate) fn status_handle(&self) -> RuntimeMap {
        self.status.clone()
    }

    pub(crate) fn acp_handle(&self) -> AcpMap {
        self.acp.clone()
    }

    /// The ready A2A remotes (`runtime.kind: a2a`), for the Access layer.
    pub(crate) fn remote_handle(&self) -> a2a::RemoteMap {
        self.remotes.clone()
    }

    /// Where remote A2A agents that cannot stream push their tasks' updates, for the
    /// controller's listener to take them.
    pub(crate) fn push_hooks(&self) -> a2a::PushHooks {
        self.hooks.clone()
    }

    /// Brings the running set to `desired`: stops what is gone or changed, starts what is new
    /// or changed.
    pub(crate) async fn converge(&mut self, desired: &[RuntimeSpec]) {
        let wanted: BTreeMap<&str, &RuntimeSpec> =
            desired.iter().map(|s| (s.agent_id.as_str(), s)).collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(id, r)| wanted.get(id.as_str()).is_none_or(|s| **s != r.spec))
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            self.stop(&id).await;
        }
        for spec in desired {
            if !self.running.contains_key(&spec.agent_id) {
                self.start(spec.clone());
            }
        }
    }

    fn start(&mut self, spec: RuntimeSpec) {
        let (stop, stop_rx) = oneshot::channel();
        let report = process::Reporter::new(&spec, self.status.clone(), self.events.clone());
        let task = if spec.kind == RuntimeKind::A2a {
            tokio::spawn(a2a::supervise(
                spec.clone(),
                stop_rx,
                report,
                self.remotes.clone(),
                (self.hooks.clone(), self.waits.clone()),
                self.timings.a2a_card_every,
            ))
        } else {
            tokio::spawn(process::supervise(
                spec.clone(),
                stop_rx,
                report,
                process::Wires {
                    acp: self.acp.clone(),
                    asks: self.asks.clone(),
                    timings: self.timings.clone(),
                },
            ))
        };
        self.running
            .insert(spec.agent_id.clone(), Running { spec, stop, task });
    }

    /// Stops one runtime and waits until its process group is gone.
    pub(crate) async fn stop(&mut self, agent_id: &str) {
        let Some(running) = self.running.remove(agent_id) else {
            return;
        };
        let (ack, done) = oneshot::channel();
        if running.stop.send(ack).is_ok() {
            let _ = done.await;
        }
        let _ = running.task.await;
        if let Ok(mut status) = self.status.lock() {
            status.remove(agent_id);
        }
    }

    /// Stops everything (shutdown).
    pub(crate) async fn stop_all(&mut self) {
        let ids: Vec<String> = self.running.keys().cloned().collect();
        let stops = ids.iter().map(|id| {
            let running = self.running.remove(id);
            async move {
                let Some(running) = running else { return };
                let (ack, done) = oneshot::channel();
                if running.stop.send(ack).is_ok() {
                    let _ = done.await;
                }
                let _ = running.task.await;
            }
        });
        futures_join_all(stops).await;
    }
}

/// Runs futures concurrently (a stop ladder takes seconds; a hub has many runtimes).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    for h in handles {
        let _ = h.await;
    }
}
