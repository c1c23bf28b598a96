//! The turn engine: one turn of an agent in a session, whoever asks for it (an inbound
//! envelope, the Hub, the operator, a heartbeat). It owns the per-session FIFO (one turn at a
//! time per session key, a bounded queue behind it), the runtime sessions (opened with
//! `session/load` or `session/new` in the agent's runtime instance, a `oneshot` one closed
//! after its reply), the agent's `model` applied to them, budget admission as a permit, the
//! prompt with its person-aware timeout and its confirmed or uncertain cancel, and the turns
//! running now for an operator's cancel. ACP and remote A2A runtimes are prompted side by side
//! ([`crate::runtime::Runtime`]).
//!
//! It does not know the door a message came through: parsing, authentication, routing,
//! dedup, the inbound policy and the reply are the Access layer's; run states are the Hub's.
//! Its records go through [`SessionStore`].

pub mod budget;
pub(crate) mod cap;
pub(crate) mod model;
mod queue;
mod running;
pub(crate) mod store;
pub(crate) mod system;
#[cfg(test)]
mod tests;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::schema::McpServer;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::config::model::{Model, RuntimeKind};
use crate::runtime::acp::ModelReport;
use crate::runtime::{AcpMap, RuntimeMap, SessionRuntime};
use crate::snapshot::Snapshot;
use crate::state::{Provenance, StateError};

pub(crate) use crate::runtime::a2a::RemoteFile;
pub(crate) use crate::runtime::{PromptFile, StopReason};
pub(crate) use queue::Place;
pub(crate) use running::{CancelState, CancelWhy};
pub(crate) use store::{GivenSection, KnownSession, SessionStore, TurnCount, TurnRecord};

/// The engine's timings and limits; `deepcli up` and `deepcli access serve` set them from
/// flags, tests to moments.
#[derive(Debug, Clone)]
pub(crate) struct SessionSettings {
    /// How long a prompt may take before it is cancelled.
    pub prompt_timeout: Duration,
    /// Messages that may wait behind the one being handled, per session.
    pub queue_limit: usize,
    /// How many transcript turns a new runtime session gets as context.
    pub context_turns: usize,
    /// How long a cancelled turn has to confirm (stopReason `cancelled`) before the cancel is
    /// `uncertain`.
    pub cancel_confirm: Duration,
    /// How long `session/close` may take.
    pub close_timeout: Duration,
}

impl Default for SessionSettings {
    fn default() -> SessionSettings {
        SessionSettings {
            prompt_timeout: Duration::from_secs(120),
            queue_limit: 32,
            context_turns: 20,
            cancel_confirm: Duration::from_secs(5),
            close_timeout: Duration::from_secs(5),
        }
    }
}

/// What the engine needs of the config in force, by agent id.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnPlan {
    pub runtimes: HashMap<String, RuntimeKind>,
    pub models: HashMap<String, Model>,
    pub budgets: HashMap<String, budget::BudgetLimits>,
    /// What each agent's system section is made of (absent: it gets none).
    pub systems: HashMap<String, Arc<system::SystemSpec>>,
}

impl TurnPlan {
    pub(crate) fn runtime(&self, agent_id: &str) -> RuntimeKind {
        self.runtimes
            .get(agent_id)
            .copied()
            .unwrap_or(RuntimeKind::None)
    }
}

/// What gives a runtime session its MCP servers: the Hub's, handed in by the composition root.
pub(crate) trait McpDoor: Send + Sync {
    /// The `mcpServers` of a runtime session of agent `agent_id` that
    /// serves `session_key`, being opened now; `http`: the agent takes MCP over HTTP
    /// (`mcpCapabilities.http`). Each call may mint a new capability token for the session.
    fn servers(&self, agent_id: &str, session_key: &str, http: bool) -> Vec<McpServer>;

    /// The runtime session of `session_key` was closed (a `oneshot` session after its
    /// reply): what was given for it is withdrawn.
    fn closed(&self, session_key: &str);
}

/// What the engine tells whoever serves the other end of [`TurnEvents`] (the approvals: a
/// permission request pending in the turn is withdrawn, those of a closed session are void).
#[derive(Debug)]
pub(crate) enum TurnEvent {
    /// A turn of `session_key` ended (answered, cancelled, timed out or failed) or is being
    /// cancelled, at `at`: what it asked before then is withdrawn; a request made after `at`
    /// is a later turn's.
    Ended {
        session_key: String,
        at: std::time::Instant,
    },
    /// Session `session_key` is being closed; `done` once what waited in it is void.
    Closing {
        session_key: String,
        done: oneshot::Sender<()>,
    },
}

/// Where the engine's [`TurnEvent`]s go: a channel made before the engine and its listener.
#[derive(Clone)]
pub(crate) struct TurnEvents(mpsc::UnboundedSender<TurnEvent>);

impl TurnEvents {
    /// The sending end, and the receiving end the listener serves.
    pub(crate) fn channel() -> (TurnEvents, mpsc::UnboundedReceiver<TurnEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (TurnEvents(tx), rx)
    }

    fn ended(&self, session_key: &str) {
        let _ = self.0.send(TurnEvent::Ended {
            session_key: session_key.to_string(),
            at: std::time::Instant::now(),
        });
    }

    /// Waits until the listener has heard of it (at once when there is none any more).
    async fn closing(&self, session_key: &str) {
        let (done, heard) = oneshot::channel();
        let sent = self.0.send(TurnEvent::Closing {
            session_key: session_key.to_string(),
            done,
        });
        if sent.is_ok() {
            let _ = heard.await;
        }
    }
}

/// What a process that runs the agents' runtimes hands the engine: the supervisor's maps and
/// what the runtime sessions opened in them need. Every part is required: a process that
/// runs runtimes cannot forget one.
pub(crate) struct Runtimes {
    /// The ready ACP runtimes.
    pub acp: AcpMap,
    /// Every runtime's phase.
    pub status: RuntimeMap,
    /// The ready A2A remotes (`runtime.kind: a2a`).
    pub remotes: crate::runtime::a2a::RemoteMap,
    /// What gives runtime sessions their MCP servers (the Hub's).
    pub mcp: Arc<dyn McpDoor>,
    /// Who hears of ended turns and closing sessions (the approvals).
    pub turns: TurnEvents,
}

/// What the engine counts in its owner's metrics.
pub(crate) trait TurnMetrics: Send + Sync {
    /// A message began (`1`) or stopped (`-1`) waiting behind another of its session.
    fn waiting(&self, delta: i64);
    /// A budget refused a turn or a spawn.
    fn refused(&self);
    /// A message was delivered, after `took` from its turn's request to its record.
    fn delivered(&self, took: Duration);
}

/// Counts nothing.
impl TurnMetrics for () {
    fn waiting(&self, _delta: i64) {}
    fn refused(&self) {}
    fn delivered(&self, _took: Duration) {}
}

/// Writes an inbound message's turn down as begun, at the given ms (when its budget admitted
/// it): what the door wants recorded before the runtime is prompted.
#[derive(Clone)]
pub(crate) struct BeginHook(pub Arc<dyn Fn(i64) -> Result<(), StateError> + Send + Sync>);

impl std::fmt::Debug for BeginHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeginHook")
    }
}

/// How the runtime session of a turn is held.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionOptions {
    /// A fresh runtime session for this message, closed after the reply.
    pub oneshot: bool,
    pub label: Option<String>,
    /// The session's working directory, when not the runtime's.
    pub cwd: Option<std::path::PathBuf>,
    /// How long the prompt may take, when not the engine's prompt timeout (a spawn's
    /// `runTimeoutSeconds`).
    pub timeout: Option<Duration>,
    /// The Hub run that carries this turn, for the budget and cancel records.
    pub run_id: Option<String>,
    /// An inbound message's turn, written down as begun once its budget admits it.
    pub begun: Option<BeginHook>,
    /// Files given with the prompt, after its text (an A2A peer's).
    pub files: Vec<PromptFile>,
}

/// The outcome of [`Sessions::turn`]: the runtime's answer to one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnOutcome {
    /// The agent message chunks, put together (cut at `budgets.replyBytes`).
    pub text: String,
    /// The stop reason the runtime gave, when it gave one.
    pub stop_reason: Option<StopReason>,
    /// How long the runtime took: from opening (or finding) the session to the prompt's
    /// answer — the agent's time and ACP's, none of the queue's.
    pub runtime_time: Duration,
    /// The turn as its agent's budgets counted it, recorded with the turn's transcript rows.
    pub counted: Option<TurnCount>,
    /// How the session was opened, and closed (for the transcript).
    pub notes: Vec<String>,
    /// The file parts a remote A2A agent answered with (none from an ACP runtime).
    pub files: Vec<RemoteFile>,
}

/// A message the Hub (or the operator) puts into a session.
#[derive(Debug, Clone)]
pub(crate) struct InternalMessage {
    /// How the transcript records it: `inter_session`, `operator`, `a2a`.
    pub provenance: Provenance,
    /// What the transcript keeps as the message's text.
    pub text: String,
    /// What the model is given (the text with its framing).
    pub prompt: String,
    /// The provenance record, kept in the transcript row's `route` column.
    pub meta: Value,
    pub options: SessionOptions,
    /// Waits for its turn however many messages wait before it (the queue limit is for
    /// callers who can send again later; an announce of a finished run cannot).
    pub unbounded: bool,
}

/// Called when the turn begins (the message stopped waiting); a refusal withdraws the message,
/// unprompted and unrecorded.
pub(crate) type OnStart = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// One turn asked of the engine: the whole of it, FIFO to transcript.
pub(crate) struct TurnRequest {
    pub agent_id: String,
    pub session_key: String,
    pub prompt: String,
    pub options: SessionOptions,
    /// What the transcript keeps of the message and its answer.
    pub record: TurnRecord,
    pub unbounded: bool,
    /// Dropped once the message holds its place in the FIFO (or was refused).
    pub queued: Option<tokio::sync::oneshot::Sender<()>>,
    pub on_start: Option<OnStart>,
}

impl TurnRequest {
    /// The turn of a message the Hub or the operator puts into `session_key` of `agent_id`.
    pub(crate) fn internal(
        agent_id: &str,
        session_key: &str,
        message: InternalMessage,
    ) -> TurnRequest {
        TurnRequest {
            agent_id: agent_id.to_string(),
            session_key: session_key.to_string(),
            prompt: message.prompt,
            options: message.options,
            record: TurnRecord {
                provenance: message.provenance,
                text: message.text,
                meta: message.meta,
            },
            unbounded: message.unbounded,
            queued: None,
            on_start: None,
        }
    }

    pub(crate) fn queued(
        mut self,
        queued: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> TurnRequest {
        self.queued = queued;
        self
    }

    pub(crate) fn on_start(
        mut self,
        started: impl FnOnce() -> Result<(), String> + Send + 'static,
    ) -> TurnRequest {
        self.on_start = Some(Box::new(started));
        self
    }
}

/// Where in a turn a runtime failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Opening the runtime session: nothing was prompted.
    OpenSession,
    /// During the prompt: whatever the agent did is unknown.
    Prompt,
    /// A remote did not take the message: nothing began.
    TakeMessage,
    /// A remote's task ended failed, rejected or asking for auth.
    Task,
}

impl Stage {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stage::OpenSession => "to open a session",
            Stage::Prompt => "the prompt",
            Stage::TakeMessage => "to take the message",
            Stage::Task => "the task",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a turn got no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum TurnError {
    #[error("agent `{agent_id}` has no ACP or A2A runtime here: it takes no prompts")]
    TakesNoPrompts { agent_id: String },
    #[error("session `{session_key}` has {limit} messages waiting: send this one again later")]
    QueueFull { session_key: String, limit: usize },
    /// The agent's runtime is not ready: `status` is its phase, `why` the whole story.
    #[error("agent `{agent_id}` cannot take messages now: {why}; send it again later")]
    RuntimeDown {
        agent_id: String,
        status: &'static str,
        why: String,
    },
    #[error("agent `{agent_id}`'s runtime failed {stage}: {message}; send it again later")]
    RuntimeFailed {
        agent_id: String,
        stage: Stage,
        message: String,
    },
    #[error(
        "agent `{agent_id}` opened runtime session `{session_id}`, which it already gave another conversation: it reuses session ids within one process, so this message was not delivered"
    )]
    SessionReused {
        agent_id: String,
        session_id: String,
    },
    /// The prompt took too long and was cancelled; `stop_reason` is what the agent answered
    /// the cancel with, if it did.
    #[error(
        "agent `{agent_id}` did not answer within {seconds} s: the prompt was cancelled (session/cancel); what it did is uncertain, so this message is not prompted again: send a new one to ask again"
    )]
    TimedOut {
        agent_id: String,
        seconds: f64,
        stop_reason: Option<Value>,
        /// The runtime confirmed the cancel (stopReason `cancelled`); else it is uncertain.
        confirmed: bool,
        why: CancelWhy,
    },
    /// A budget of the agent refused the turn; nothing reached the runtime.
    #[error("{0}")]
    BudgetExceeded(budget::BudgetRefusal),
    /// A message withdrawn when its turn came (a cancel, or policy that changed while it
    /// waited): it never reached the runtime.
    #[error("the message was withdrawn before it reached the agent: {0}")]
    Withdrawn(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StateError> for TurnError {
    fn from(e: StateError) -> TurnError {
        TurnError::Internal(e.to_string())
    }
}

/// Where the engine finds an agent's ready ACP runtime.
enum Found {
    /// The supervisor's maps: the ready runtimes, and every runtime's phase.
    Maps(AcpMap, RuntimeMap),
    #[cfg(test)]
    Fakes(std::collections::BTreeMap<String, Arc<dyn SessionRuntime>>),
}

/// An agent's `model` as last applied to one of its sessions, in one runtime instance.
struct AppliedModel {
    instance: String,
    wanted: Vec<String>,
    report: ModelReport,
}

pub(crate) struct Sessions {
    store: Arc<dyn SessionStore>,
    /// `None` when this process manages no runtimes (`access serve`).
    runtimes: Option<Found>,
    /// The ready A2A remotes (`runtime.kind: a2a`).
    remotes: Option<crate::runtime::a2a::RemoteMap>,
    /// The engine's piece of the generation in force.
    plan: Snapshot<Arc<TurnPlan>>,
    settings: SessionSettings,
    queues: queue::Queues,
    running: running::RunningTurns,
    /// The traced turns running now (`crate::traces`).
    turn_spans: running::TurnSpans,
    budgets: budget::Budgets,
    /// What became of each agent's `model` in its runtime, by agent id.
    models: Mutex<HashMap<String, AppliedModel>>,
    /// The hash of the system section each session key was last given, with the runtime
    /// session it went to: an open session's next turn compares without a read of the state.
    given: Mutex<HashMap<String, (String, String)>>,
    /// The hash of each agent's section as last composed, with its spec and the stamp of its
    /// workspace files then: a turn whose stamp is the same reads no file.
    composed: Mutex<HashMap<String, system::Composed>>,
    mcp: Option<Arc<dyn McpDoor>>,
    turns: Option<TurnEvents>,
    metrics: Arc<dyn TurnMetrics>,
}

impl Sessions {
    /// `runtimes`: `None` in a process that runs none (`access serve`); `plan`: the config's
    /// view in force, read as each turn begins.
    pub(crate) fn new(
        store: Arc<dyn SessionStore>,
        runtimes: Option<Runtimes>,
        plan: Snapshot<Arc<TurnPlan>>,
        budgets: budget::Budgets,
        settings: SessionSettings,
        metrics: Arc<dyn TurnMetrics>,
    ) -> Sessions {
        let (found, remotes, mcp, turns) = match runtimes {
            Some(r) => (
                Some(Found::Maps(r.acp, r.status)),
                Some(r.remotes),
                Some(r.mcp),
                Some(r.turns),
            ),
            None => (None, None, None, None),
        };
        Sessions {
            store,
            runtimes: found,
            remotes,
            plan,
            settings,
            queues: queue::Queues::default(),
            running: running::RunningTurns::default(),
            turn_spans: running::TurnSpans::default(),
            budgets,
            models: Mutex::default(),
            given: Mutex::default(),
            composed: Mutex::default(),
            mcp,
            turns,
            metrics,
        }
    }

    pub(crate) fn plan(&self) -> Arc<TurnPlan> {
        self.plan.load()
    }

    /// Whether this process runs the agents' runtimes.
    pub(crate) fn manages_runtimes(&self) -> bool {
        self.runtimes.is_some()
    }

    fn remote(&self, agent_id: &str) -> Option<Arc<crate::runtime::a2a::Remote>> {
        self.remotes.as_ref()?.lock().ok()?.get(agent_id).cloned()
    }

    /// Agent `agent_id`'s budgets as the config in force sets them (none: no limits).
    pub(crate) fn limits(&self, agent_id: &str) -> budget::BudgetLimits {
        self.plan()
            .budgets
            .get(agent_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Agent `agent_id`'s ready ACP runtime, or why there is none.
    fn runtime(&self, agent_id: &str) -> Result<Arc<dyn SessionRuntime>, TurnError> {
        let (acp, status) = match &self.runtimes {
            None => return Err(TurnError::Internal("no runtimes are managed here".into())),
            #[cfg(test)]
            Some(Found::Fakes(fakes)) => {
                return fakes.get(agent_id).cloned().ok_or(TurnError::RuntimeDown {
                    agent_id: agent_id.to_string(),
                    status: "stopped",
                    why: "its runtime is not running".to_string(),
                });
            }
            Some(Found::Maps(acp, status)) => (acp, status),
        };
        if let Some(handle) = acp.lock().ok().and_then(|m| m.get(agent_id).cloned()) {
            return Ok(Arc::new(handle));
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
        Err(TurnError::RuntimeDown {
            agent_id: agent_id.to_string(),
            status: phase.map_or("stopped", |s| s.status.as_str()),
            why,
        })
    }

    /// The instance of agent `agent_id`'s ready ACP runtime.
    fn instance(&self, agent_id: &str) -> Option<String> {
        self.runtimes.as_ref()?;
        self.runtime(agent_id)
            .ok()
            .map(|r| r.instance().to_string())
    }

    /// What agent `agent_id`'s runtime is doing: `ready`, or its phase (`starting`, …).
    pub(crate) fn runtime_phase(&self, agent_id: &str) -> String {
        match self.runtime(agent_id) {
            Ok(_) => "ready".to_string(),
            Err(TurnError::RuntimeDown { status, .. }) => status.to_string(),
            Err(_) => "none".to_string(),
        }
    }

    /// Waits for `session_key`'s turn in its FIFO (refused when the queue limit already wait,
    /// unless `unbounded`).
    pub(crate) async fn enter(
        &self,
        session_key: &str,
        unbounded: bool,
        queued: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> Result<Place, TurnError> {
        let span = crate::traces::queue_wait(session_key);
        self.queues
            .enter(
                session_key,
                self.settings.queue_limit,
                unbounded,
                queued,
                &*self.metrics,
            )
            .instrument(span)
            .await
            .map_err(|full| TurnError::QueueFull {
                session_key: session_key.to_string(),
                limit: full.limit,
            })
    }

    /// The span of the traced turn running in `session_key`, if one is: a Hub tool call the
    /// agent makes now belongs to it.
    pub(crate) fn turn_span(&self, session_key: &str) -> Option<tracing::Span> {
        self.turn_spans.get(session_key)
    }

    /// `session_key`'s turn when the session is idle (nothing handled, nothing waiting).
    pub(crate) fn try_enter(&self, session_key: &str) -> Option<Place> {
        self.queues.try_enter(session_key)
    }

    /// Messages waiting in a session's FIFO, plus the one being handled.
    pub(crate) fn queue_depth(&self, session_key: &str) -> usize {
        self.queues.depth(session_key)
    }

    /// Per agent (`agent_of` a session key), messages waiting in its sessions' FIFOs plus
    /// those being handled.
    pub(crate) fn queue_depths(
        &self,
        agent_of: impl Fn(&str) -> Option<&str>,
    ) -> HashMap<String, usize> {
        self.queues.depths(agent_of)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn SessionStore) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, TurnError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&*store))
            .await
            .map_err(|e| TurnError::Internal(e.to_string()))?
            .map_err(|e| TurnError::Internal(e.to_string()))
    }

    /// A whole turn: the message waits for its turn in the session's FIFO, `on_start` may
    /// withdraw it, the agent is prompted, and the message and its answer go into the
    /// session's transcript.
    pub(crate) async fn turn(&self, request: TurnRequest) -> Result<TurnOutcome, TurnError> {
        let TurnRequest {
            agent_id,
            session_key,
            prompt,
            options,
            record,
            unbounded,
            queued,
            on_start,
        } = request;
        if !self.plan().runtime(&agent_id).takes_prompts() || !self.manages_runtimes() {
            return Err(TurnError::TakesNoPrompts { agent_id });
        }
        let begun = std::time::Instant::now();
        let _place = self.enter(&session_key, unbounded, queued).await?;
        if let Some(started) = on_start {
            started().map_err(TurnError::Withdrawn)?;
        }
        let prompted = std::time::Instant::now();
        let answer = self
            .turn_in(&_place, &agent_id, &session_key, &prompt, &options)
            .await
            .map(|mut answer| {
                answer.runtime_time = prompted.elapsed();
                answer
            });
        let notes = answer.as_ref().map(|a| a.notes.clone()).unwrap_or_default();
        let said = match &answer {
            Ok(a) => Ok(a.text.clone()),
            Err(e) => Err(e.to_string()),
        };
        let counted = answer.as_ref().ok().and_then(|a| a.counted.clone());
        self.blocking(move |s| {
            s.record_exchange(
                &session_key,
                &notes,
                &record,
                said.as_deref().map_err(Clone::clone),
                counted.as_ref(),
            )
        })
        .await?;
        self.metrics.delivered(begun.elapsed());
        answer
    }

    /// Records a budget's refusal and counts it.
    pub(crate) async fn refused(
        &self,
        refusal: &budget::BudgetRefusal,
        session_key: Option<&str>,
        run_id: Option<&str>,
    ) {
        self.metrics.refused();
        let (refusal, key, run) = (
            refusal.clone(),
            session_key.map(str::to_string),
            run_id.map(str::to_string),
        );
        if let Err(e) = self
            .blocking(move |s| s.record_refusal(&refusal, key.as_deref(), run.as_deref()))
            .await
        {
            tracing::warn!(error = %e, "cannot record a budget refusal");
        }
    }

    /// Agent `agent_id` counted again from `rows`, its budget events as recorded at `now_ms`
    /// ([`budget::Budgets::recount`]).
    pub(crate) fn recount_budget(&self, agent_id: &str, rows: &[budget::BudgetRow], now_ms: i64) {
        self.budgets.recount(agent_id, rows, now_ms);
    }

    /// Whether agent `agent_id`'s budgets let a turn begin now (nothing is taken).
    pub(crate) fn budget_allows_turn(&self, agent_id: &str) -> Result<(), budget::BudgetRefusal> {
        self.budgets
            .check_turn(agent_id, &self.limits(agent_id), budget::now_ms())
    }

    /// Takes a spawn by session `session_key` of agent `agent_id` if the agent's
    /// `spawnsPerHour` allows, and records it.
    pub(crate) async fn budget_spawn(
        &self,
        agent_id: &str,
        session_key: &str,
    ) -> Result<(), budget::BudgetRefusal> {
        let now = budget::now_ms();
        self.budgets
            .admit_spawn(agent_id, &self.limits(agent_id), now)?;
        let (agent, key) = (agent_id.to_string(), session_key.to_string());
        if let Err(e) = self
            .blocking(move |s| s.record_spawn(&agent, now, &key))
            .await
        {
            tracing::warn!(error = %e, "cannot record a spawn against its budget");
        }
        Ok(())
    }

    /// Agent `agent_id`'s budget counters against its limits (`deepcli status`).
    pub(crate) fn budget_report(&self, agent_id: &str) -> budget::BudgetReport {
        self.budgets
            .report(agent_id, &self.limits(agent_id), budget::now_ms())
    }

    /// What became of agent `agent_id`'s `model`, for `deepcli status`: `None` when it sets
    /// none. Not applied, with why, when its runtime cannot take one; pending until its
    /// runtime's first session opens (or its next message, after the model changed).
    pub(crate) fn model_report(&self, agent_id: &str) -> Option<ModelReport> {
        let plan = self.plan();
        let wanted = model::candidates(plan.models.get(agent_id)?);
        let not_applied = |why: &str| ModelReport {
            wanted: wanted.first().cloned().unwrap_or_default(),
            applied: None,
            why: Some(why.to_string()),
        };
        if let Err(why) = plan.runtime(agent_id).applies_model() {
            return Some(not_applied(why));
        }
        let instance = self.instance(agent_id);
        let applied = self.models.lock().ok().and_then(|models| {
            let m = models.get(agent_id)?;
            (Some(&m.instance) == instance.as_ref() && m.wanted == wanted).then(|| m.report.clone())
        });
        Some(applied.unwrap_or_else(|| {
            not_applied("pending: deepcli applies it in the agent's next session (a message or a heartbeat opens one)")
        }))
    }

    /// A turn's budget row on its own (a heartbeat's: its transcript rows come later).
    pub(crate) async fn record_count(
        &self,
        session_key: &str,
        count: TurnCount,
    ) -> Result<(), TurnError> {
        let key = session_key.to_string();
        self.blocking(move |s| s.record_count(&key, &count)).await
    }
}
