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

pub mod a2a_door;
mod approval_door;
mod auth;
mod begun;
pub mod budget;
mod cap;
mod envelope;
mod error;
mod gate;
mod heartbeat;
pub mod http;
mod internal;
pub mod metrics;
mod model;
pub mod plan;
mod reply;
mod route;
pub mod serve;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::{
    CancelNotification, CloseSessionRequest, ContentBlock, LoadSessionRequest, NewSessionRequest,
    PromptRequest, SessionUpdate,
};
use arc_swap::ArcSwapOption;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::config::model::RuntimeKind;
use crate::ids;
use crate::routing::RouteInput;
use crate::runtime::acp::AcpHandle;
use crate::runtime::{AcpMap, RuntimeMap};
use crate::state::Provenance;
pub use approval_door::{ApprovalDoor, ChatCommand, TurnOrigin};
use auth::authenticate;
pub use auth::{Caller, sign};
pub use envelope::{Envelope, parse_envelope};
pub use error::{AccessError, Unauthenticated};
pub use heartbeat::{Beat, HEARTBEAT_OK};
pub use internal::{Answer, InternalMessage, McpDoor};
pub use plan::AccessPlan;
pub use route::SessionOptions;
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
    /// How long a connection may stay idle, or take to send a request's headers or the next
    /// part of its body, before it is closed.
    pub idle_timeout: Duration,
}

impl Default for AccessSettings {
    fn default() -> AccessSettings {
        AccessSettings {
            body_limit: 1024 * 1024,
            prompt_timeout: Duration::from_secs(120),
            queue_limit: 32,
            context_turns: 20,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Call logs open at once, at most.
const MAX_OPEN_LOGS: usize = 64;

/// What a delivery produced: the response body and its status.
type Outcome = Result<Value, AccessError>;

/// An agent's `model` as last applied to one of its sessions, in one runtime instance.
struct AppliedModel {
    instance: String,
    wanted: Vec<String>,
    report: crate::runtime::acp::ModelReport,
}

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
    /// What became of each agent's `model` in its runtime, by agent id.
    models: Mutex<HashMap<String, AppliedModel>>,
    /// The inbound policy's state in memory: bot-loop counts, sessions with kept context.
    policy: gate::PolicyState,
    /// The open logs of inbound calls, by path ([`Access::log_call`]).
    call_logs: tokio::sync::Mutex<HashMap<std::path::PathBuf, crate::runtime::log::Log>>,
    logs_dir: std::path::PathBuf,
    /// Each account's bot user id as its platform adapter learnt it (`getMe`, `auth.test`),
    /// by (channel, account): the policy's `botUserId` where channels.yaml sets none.
    live_bots: Mutex<HashMap<(String, String), Arc<str>>>,
    /// What gives every runtime session its MCP servers (the Hub), once the controller set it.
    door: std::sync::OnceLock<Arc<dyn McpDoor>>,
    /// Every agent's budget counters (approvals.md), loaded from the state database.
    budgets: budget::Budgets,
    /// The turns running now, by session key: each ends with the stop reason its runtime gave.
    running: RunningTurns,
    /// What decides approvals (approvals.md), once the controller set it.
    approvals: std::sync::OnceLock<Arc<dyn ApprovalDoor>>,
    /// The conversation each running turn answers, by session key.
    origins: Mutex<HashMap<String, TurnOrigin>>,
    /// The ready A2A remotes (`runtime.kind: a2a`): set once by the controller.
    remotes: std::sync::OnceLock<crate::runtime::a2a::RemoteMap>,
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
        let policy = gate::PolicyState::load(&store);
        let now_ms = budget::now_ms();
        let budgets = match store.budget_rows(now_ms) {
            Ok(rows) => budget::Budgets::load(&rows, now_ms),
            Err(e) => {
                // Counting from zero would let a restart reset the budgets: said loudly.
                tracing::error!(error = %e, "cannot read the budget counters; budgets count from now");
                budget::Budgets::default()
            }
        };
        Access {
            budgets,
            running: RunningTurns::default(),
            plan: ArcSwapOption::empty(),
            reply: reply::ReplySink::new(store.clone(), metrics.reply_failures.clone()),
            store,
            runtimes,
            queues: Mutex::default(),
            inflight: Mutex::default(),
            models: Mutex::default(),
            metrics,
            settings,
            policy,
            call_logs: tokio::sync::Mutex::default(),
            logs_dir: state.logs(),
            live_bots: Mutex::default(),
            door: std::sync::OnceLock::new(),
            approvals: std::sync::OnceLock::new(),
            origins: Mutex::default(),
            remotes: std::sync::OnceLock::new(),
        }
    }

    /// Records (or forgets, with `None`) the bot user id an adapter learnt for an account
    /// (normalized ids): self-loop, mentions and replies to the bot count by it when
    /// channels.yaml sets no `botUserId`.
    pub fn set_live_bot(&self, channel: &str, account: &str, bot_user_id: Option<&str>) {
        let mut bots = match self.live_bots.lock() {
            Ok(bots) => bots,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = (channel.to_string(), account.to_string());
        match bot_user_id {
            Some(id) => {
                bots.insert(key, Arc::from(id));
            }
            None => {
                bots.remove(&key);
            }
        }
    }

    fn live_bot(&self, channel: &str, account: &str) -> Option<Arc<str>> {
        let bots = match self.live_bots.lock() {
            Ok(bots) => bots,
            Err(poisoned) => poisoned.into_inner(),
        };
        bots.get(&(channel.to_string(), account.to_string()))
            .cloned()
    }

    /// Appends one line about an inbound call to the log of the channel it names
    /// (`<state>/logs/channels/<channel>.log`, which `deepcli channels logs` shows) when the
    /// plan in force declares that channel; to `<state>/logs/access.log` otherwise (no channel,
    /// or one nobody declared: callers choose those names, so they get no file of their own).
    /// Every field is escaped: one call, one line. Logs are size-capped and rotated.
    pub async fn log_call(&self, channel: Option<&str>, line: &str) {
        let declared = channel.map(ids::channel).filter(|c| {
            c.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && self.plan().is_some_and(|p| p.declares_channel(c))
        });
        let now = crate::clock::now();
        let line = crate::log_line::escape(line);
        let (path, text) = match declared {
            Some(channel) => (
                self.logs_dir
                    .join("channels")
                    .join(format!("{channel}.log")),
                format!("{now} {line}\n"),
            ),
            None => (
                self.logs_dir.join("access.log"),
                format!(
                    "{now} channel={} {line}\n",
                    crate::log_line::escape(channel.unwrap_or("-"))
                ),
            ),
        };
        let mut logs = self.call_logs.lock().await;
        if !logs.contains_key(&path) {
            // Bounded however many channels plans have declared over time.
            if logs.len() >= MAX_OPEN_LOGS {
                logs.clear();
            }
            match crate::runtime::log::Log::open(&path, crate::runtime::log::MAX_BYTES).await {
                Ok(log) => {
                    logs.insert(path.clone(), log);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot open a channel log");
                    return;
                }
            }
        }
        if let Some(log) = logs.get_mut(&path) {
            let _ = log.write(text.as_bytes()).await;
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

    /// Records a budget's refusal (approvals.md: every refusal is recorded) and counts it.
    pub async fn refused(
        &self,
        refusal: &budget::Refusal,
        session_key: Option<&str>,
        run_id: Option<&str>,
    ) {
        self.metrics
            .budget_refusals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row = store::RefusalRow {
            agent_id: refusal.agent_id.clone(),
            session_key: session_key.map(str::to_string),
            run_id: run_id.map(str::to_string),
            refusal: refusal.clone(),
        };
        if let Err(e) = self.blocking(move |s| s.record_refusal(&row)).await {
            tracing::warn!(error = %e, "cannot record a budget refusal");
        }
    }

    /// Agent `agent_id`'s budgets as the plan in force sets them (none: no limits).
    pub fn limits(&self, agent_id: &str) -> budget::BudgetLimits {
        self.plan()
            .and_then(|p| p.budgets.get(agent_id).cloned())
            .unwrap_or_default()
    }

    /// Whether agent `agent_id`'s budgets let a turn begin now (nothing is taken): what the
    /// Hub asks before it accepts a run.
    pub fn budget_allows_turn(&self, agent_id: &str) -> Result<(), budget::Refusal> {
        self.budgets
            .check_turn(agent_id, &self.limits(agent_id), budget::now_ms())
    }

    /// Takes a spawn by session `session_key` of agent `agent_id` if the agent's
    /// `spawnsPerHour` allows, and records it.
    pub async fn budget_spawn(
        &self,
        agent_id: &str,
        session_key: &str,
    ) -> Result<(), budget::Refusal> {
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
    pub fn budget_report(&self, agent_id: &str) -> Value {
        self.budgets
            .report(agent_id, &self.limits(agent_id), budget::now_ms())
    }

    fn current(&self) -> Result<Arc<AccessPlan>, AccessError> {
        self.plan().ok_or(AccessError::NoPlan)
    }

    /// Handles one envelope: authenticate, route, deliver, record.
    pub async fn inbound(
        self: &Arc<Self>,
        body: &[u8],
        caller: Caller<'_>,
    ) -> (Option<u64>, Outcome) {
        let plan = match self.current() {
            Ok(plan) => plan,
            Err(e) => return (None, Err(e)),
        };
        let generation = Some(plan.generation);
        (generation, self.inbound_with(&plan, body, caller).await)
    }

    async fn inbound_with(
        self: &Arc<Self>,
        plan: &Arc<AccessPlan>,
        body: &[u8],
        caller: Caller<'_>,
    ) -> Outcome {
        let envelope = parse_envelope(body)?;
        let result = plan.routing.resolve(&envelope.route);
        // The account decides who may speak for it. The route is pure and only names the
        // account (normalized as the router does); nothing is counted, recorded or delivered
        // before the account has authenticated the call.
        authenticate(plan, &envelope.route, &result, body, caller)?;
        let route = self.route(plan, &envelope.route, result).await?;
        self.metrics.route(route.matched_by());
        let key = DeliveryKey::of(&envelope, &route.result);
        self.deliver_once(plan, envelope, route, key).await
    }

    /// Where an authenticated envelope goes: an `acp` binding of its exact conversation first
    /// (its persistent session made on first use), then the tiers' `result`.
    async fn route(
        &self,
        plan: &AccessPlan,
        input: &RouteInput,
        result: crate::routing::RouteResult,
    ) -> Result<route::Route, AccessError> {
        let acp = match plan.routing.acp_binding(input) {
            None => None,
            Some(acp) => {
                let binding_key = format!(
                    "{}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
                    acp.agent_id,
                    acp.channel,
                    acp.account,
                    acp.peer_kind.as_str(),
                    acp.peer_id
                );
                let session_key = self
                    .blocking({
                        let agent = acp.agent_id.clone();
                        move |store| store.acp_session_key(&binding_key, &agent)
                    })
                    .await?;
                Some(route::AcpRoute {
                    agent_id: acp.agent_id.clone(),
                    session_key,
                    binding: acp.source.clone(),
                    oneshot: acp.mode.as_deref() == Some("oneshot"),
                    label: acp.label.clone(),
                    cwd: plan.acp_cwds.get(&acp.source.index).cloned(),
                })
            }
        };
        Ok(route::Route { result, acp })
    }

    /// Delivers an envelope once: a redelivery of one delivered before gets the response first
    /// sent; one racing a delivery in flight waits for that delivery's outcome.
    async fn deliver_once(
        self: &Arc<Self>,
        plan: &Arc<AccessPlan>,
        envelope: Envelope,
        route: route::Route,
        key: DeliveryKey,
    ) -> Outcome {
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
                return outcome.map(|mut v| {
                    self.metrics
                        .duplicates
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    v["duplicate"] = true.into();
                    v
                });
            }
        };
        // The delivery runs as a task of its own: a caller that hangs up does not cancel a
        // prompt half-way, and the key is always let go, with the outcome for whoever waits.
        let this = self.clone();
        let plan = plan.clone();
        let delivery = tokio::spawn(async move {
            let _let_go = LetGo(&this.inflight, &key);
            // Checked again now that this request owns the key: a delivery that finished
            // between the first check and taking the key recorded itself before it let it go.
            let recorded = {
                let key = key.clone();
                this.blocking(move |store| store.delivered(&key)).await
            };
            let outcome = match recorded {
                Ok(Some(response)) => Ok(as_duplicate(&response)),
                // An approval command never reaches an agent, and never waits behind the turn
                // that asked (approvals.md).
                Ok(None)
                    if this.approval_door().is_some()
                        && ChatCommand::parse(&envelope.text).is_some() =>
                {
                    this.approval_command(&plan, &envelope, &key, &route).await
                }
                // The inbound policy decides whether the agent gets it (policy.md).
                Ok(None) => match this.gate(&plan, &envelope, &route, &key).await {
                    Ok(Some(gated)) => Ok(gated),
                    Ok(None) => this.deliver(&plan, &envelope, &key, route).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            let _ = sender.send(Some(outcome.clone()));
            outcome
        });
        delivery
            .await
            .unwrap_or_else(|e| Err(internal(&format!("the delivery failed: {e}"))))
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
        route: route::Route,
    ) -> Outcome {
        let agent_id = route.agent_id().to_string();
        let agent_id = agent_id.as_str();
        let session_key = gate::session_key(&route, key);
        let session_key = session_key.as_str();
        let started = Instant::now();
        use std::sync::atomic::Ordering::SeqCst;
        let queue = self.queue(session_key);
        let _turn = match queue.turn.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                // Busy: this message waits, if fewer than the limit already do.
                let waiting = queue.waiting.fetch_add(1, SeqCst);
                self.metrics.waiting.fetch_add(1, SeqCst);
                let turn = if waiting < self.settings.queue_limit {
                    Some(queue.turn.lock().await)
                } else {
                    None
                };
                queue.waiting.fetch_sub(1, SeqCst);
                self.metrics.waiting.fetch_sub(1, SeqCst);
                turn.ok_or_else(|| AccessError::QueueFull {
                    session_key: session_key.to_string(),
                    limit: self.settings.queue_limit,
                })?
            }
        };

        let kind = plan.runtime(agent_id);
        let managed = self.runtimes.is_some();
        let mut counted = None;
        let reply = if kind == RuntimeKind::Acp && managed {
            let mut options = route.session_options();
            options.begun = Some(begun::BegunTurn {
                key: key.clone(),
                session_key: session_key.to_string(),
                agent_id: agent_id.to_string(),
                route: serde_json::to_value(&route).unwrap_or_default(),
                sender: envelope.sender.clone(),
                text: envelope.text.clone(),
            });
            // Group messages kept while the agent was not mentioned come first.
            let context = self
                .take_context(session_key, self.limits(agent_id).context_bytes)
                .await?;
            let text = match &context.text {
                Some(kept) => format!("{kept}{}", envelope.text),
                None => envelope.text.clone(),
            };
            self.set_turn_origin(
                session_key,
                Some(TurnOrigin {
                    channel: key.channel.clone(),
                    account_id: key.account_id.clone(),
                    message_id: envelope.message_id.clone(),
                    peer: serde_json::to_value(&envelope.route.peer).unwrap_or_default(),
                    thread_id: envelope.thread_id.clone(),
                    sender_id: envelope.facts.sender_id.clone(),
                    key: key.clone(),
                }),
            );
            let answered = self
                .prompt_answer(agent_id, session_key, &text, &options)
                .await;
            self.set_turn_origin(session_key, None);
            let answered = match answered {
                Ok((answer, notes)) => {
                    counted = answer.counted;
                    (answer.text, notes)
                }
                Err(e @ AccessError::TimedOut { .. }) => {
                    return Err(self.timed_out(envelope, key, session_key, &route, e).await);
                }
                Err(e) => {
                    // No outcome to keep: the message may be handed in again and prompted.
                    let key = key.clone();
                    let _ = self.blocking(move |store| store.forget_turn(&key)).await;
                    return Err(e);
                }
            };
            Some((answered, context.last_id))
        } else {
            None
        };
        let (reply, given) = match reply {
            Some((answered, given)) => (Some(answered), given),
            None => (None, None),
        };
        let mut response = json!({
            "route": route,
            "sessionKey": session_key,
            "reply": reply.as_ref().map(|(text, _)| json!({"text": text})),
            "duplicate": false,
        });
        if reply.is_none() {
            response["delivered"] = false.into();
            response["note"] = match (managed, kind) {
                // A standalone server knows the routes, not what runs the agents.
                (false, _) => "this server runs no runtimes (standalone `deepcli access serve`): the route is the answer".into(),
                (true, RuntimeKind::Process) => format!("agent `{agent_id}` runs a process runtime, which takes no prompts: nothing here to deliver to; the route is the answer").into(),
                (true, _) => format!("agent `{agent_id}` has no runtime (runtime kind none): the route is the answer").into(),
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
            provenance: Provenance::Inbound,
            message_id: Some(envelope.message_id.clone()),
            sender: envelope.sender.clone(),
            text: envelope.text.clone(),
            route: Some(response["route"].clone()),
        });
        if let Some(text) = &reply_text {
            turns.push(Turn {
                provenance: Provenance::Agent,
                message_id: None,
                sender: None,
                text: text.clone(),
                route: None,
            });
        }
        {
            let (session_key, key) = (session_key.to_string(), key.clone());
            self.blocking(move |store| {
                store.record_turn(&session_key, &turns, Some((&key, &sent)), counted.as_ref())
            })
            .await?;
        }
        if let Some(last_id) = given {
            self.forget_context(session_key, last_id).await?;
        }
        self.metrics.delivered(started.elapsed());
        if let Some(reply_text) = reply_text {
            self.send_reply(plan, key, envelope, session_key, &reply_text);
        }
        Ok(response)
    }

    /// An inbound message whose turn passed its time and was cancelled: recorded as
    /// delivered with the state `uncertain` (the agent may have acted before it stopped), so
    /// that a redelivery (the same message id) is answered with that state and never prompts
    /// the agent again. The caller gets `e` (504).
    async fn timed_out(
        &self,
        envelope: &Envelope,
        key: &DeliveryKey,
        session_key: &str,
        route: &route::Route,
        e: AccessError,
    ) -> AccessError {
        let AccessError::TimedOut { confirmed, why, .. } = &e else {
            return e;
        };
        let cancel = if *confirmed { "confirmed" } else { "uncertain" };
        let response = json!({
            "route": route,
            "sessionKey": session_key,
            "reply": null,
            "duplicate": false,
            "delivered": true,
            "state": "uncertain",
            "cancel": cancel,
            "error": e.to_string(),
            "note": format!(
                "the agent's turn passed its time ({}) and was cancelled (cancel {cancel}); whatever it did is not known, so this message is not prompted again",
                why.as_str()
            ),
        })
        .to_string();
        let turns = vec![
            Turn {
                provenance: Provenance::Inbound,
                message_id: Some(envelope.message_id.clone()),
                sender: envelope.sender.clone(),
                text: envelope.text.clone(),
                route: Some(serde_json::to_value(route).unwrap_or_default()),
            },
            Turn::note(format!(
                "the turn was cancelled after its time ({}): cancel {cancel}",
                why.as_str()
            )),
        ];
        let (k, dk) = (session_key.to_string(), key.clone());
        if let Err(failed) = self
            .blocking(move |s| s.record(&k, &turns, Some((&dk, &response))))
            .await
        {
            tracing::warn!(error = %failed, "cannot record a timed-out delivery");
        }
        e
    }

    /// Hands `text`, the answer to `envelope`, to the reply sink when its account has a
    /// `replyUrl` (and a webhook secret to sign with).
    fn send_reply(
        &self,
        plan: &AccessPlan,
        key: &DeliveryKey,
        envelope: &Envelope,
        session_key: &str,
        text: &str,
    ) {
        if let Some(account) = plan
            .accounts
            .get(&(key.channel.clone(), key.account_id.clone()))
            && let (Some(url), Ok(secret)) = (&account.reply_url, &account.webhook_secret)
        {
            self.reply.send(
                url.clone(),
                secret.clone(),
                key.clone(),
                json!({
                    "channel": key.channel, "accountId": key.account_id, "messageId": key.message_id,
                    "sessionKey": session_key, "peer": envelope.route.peer, "threadId": envelope.thread_id,
                    "reply": {"text": text},
                }),
            );
        }
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
            return Err(AccessError::Internal("no runtimes are managed here".into()));
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
        Err(AccessError::RuntimeDown {
            agent_id: agent_id.to_string(),
            status: phase.map_or("stopped", |s| s.status.as_str()),
            why,
        })
    }

    /// A turn's answer with its budget row, which rides in the transcript's transaction; a
    /// failed turn gets no transcript row, so its budget row is recorded on its own.
    async fn counted(
        &self,
        session_key: &str,
        answered: Result<Answer, AccessError>,
        counted: store::CountedTurn,
    ) -> Result<Answer, AccessError> {
        match answered {
            Ok(mut answer) => {
                answer.counted = Some(counted);
                Ok(answer)
            }
            Err(e) => {
                let key = session_key.to_string();
                let _ = self
                    .blocking(move |s| s.record_turn(&key, &[], None, Some(&counted)))
                    .await;
                Err(e)
            }
        }
    }

    /// The runtime session `session_key` speaks in, opened in this runtime instance if it is
    /// not yet: resumed with `session/load` when the agent can and nothing else here holds that
    /// id, else a new session whose first prompt carries this conversation's recent turns.
    /// Returns the session id, the text to prompt with, and notes for the transcript.
    ///
    /// A stored id counts as open only for the runtime instance that issued it: a restarted
    /// runtime may hand the same ids to other conversations.
    ///
    /// A `oneshot` session is always new, carries no earlier turns and is not kept in the
    /// session map: [`Access::prompt`] closes it after the reply.
    async fn open_session(
        &self,
        handle: &AcpHandle,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &route::SessionOptions,
    ) -> Result<(String, String, Vec<String>), AccessError> {
        // The session this runtime instance already serves the key with (the common case: a
        // conversation's next turn) needs no read of the state database.
        if !options.oneshot
            && let Some(id) = handle.serving(session_key)
        {
            return Ok((id, text.to_string(), Vec::new()));
        }
        let known = if options.oneshot {
            None
        } else {
            let key = session_key.to_string();
            self.blocking(move |s| s.runtime_session(&key)).await?
        };
        if let Some(known) = &known
            && known.instance.as_deref() == Some(handle.instance.as_str())
            && handle.holder(&known.id).as_deref() == Some(session_key)
        {
            return Ok((known.id.clone(), text.to_string(), Vec::new()));
        }
        let gone = |e: agent_client_protocol::Error| AccessError::RuntimeFailed {
            agent_id: agent_id.to_string(),
            what: "to open a session",
            message: e.to_string(),
        };
        let cwd = options.cwd.clone().unwrap_or_else(|| handle.cwd.clone());
        if options.cwd.is_some() {
            // As a runtime's own `cwd`, a session's is made when missing.
            let _ = tokio::fs::create_dir_all(&cwd).await;
        }
        let label = options
            .label
            .as_ref()
            .map_or(String::new(), |l| format!(" `{l}`"));
        let mut notes = Vec::new();
        let mut opened = None;
        if let Some(known) = &known
            && handle.loads_sessions()
            && handle.claim(&known.id, session_key)
        {
            let request = LoadSessionRequest::new(known.id.clone(), cwd.clone())
                .mcp_servers(self.mcp_servers(handle, agent_id, session_key));
            if let Ok(loaded) = handle.cx.send_request(request).block_task().await {
                handle.set_session_model(
                    &known.id,
                    model::selection(loaded.config_options.as_deref()),
                );
                notes.push(format!(
                    "runtime session{label} {} resumed with session/load (pid {})",
                    known.id, handle.pid
                ));
                opened = Some((known.id.clone(), text.to_string()));
            } else {
                handle.release(&known.id);
            }
        }
        let (id, prompt_text) = match opened {
            Some(opened) => opened,
            None => {
                let created = handle
                    .cx
                    .send_request(NewSessionRequest::new(cwd).mcp_servers(self.mcp_servers(
                        handle,
                        agent_id,
                        session_key,
                    )))
                    .block_task()
                    .await
                    .map_err(gone)?;
                let id = created.session_id.0.to_string();
                if !handle.claim(&id, session_key) {
                    return Err(AccessError::SessionReused {
                        agent_id: agent_id.to_string(),
                        session_id: id,
                    });
                }
                handle.set_session_model(&id, model::selection(created.config_options.as_deref()));
                if options.oneshot {
                    notes.push(format!(
                        "new runtime session{label} {id} for this message only (acp.mode: oneshot)"
                    ));
                    (id, text.to_string())
                } else if known.is_some() {
                    let key = session_key.to_string();
                    let limit = self.settings.context_turns;
                    let history = self.blocking(move |s| s.transcript(&key, limit)).await?;
                    let turns: Vec<&store::TranscriptRow> = history
                        .iter()
                        .filter(|r| matches!(r.provenance, Provenance::Inbound | Provenance::Agent))
                        .collect();
                    let budget = self.limits(agent_id).context_bytes;
                    let sizes: Vec<usize> = turns.iter().map(|t| t.text.len()).collect();
                    let turns = &turns[cap::newest_within(&sizes, budget)..];
                    notes.push(format!(
                        "new runtime session{label} {id} (the runtime cannot resume the old one): the last {} given as context",
                        crate::plural::plural(turns.len(), "turn was", "turns were")
                    ));
                    (id, context_prompt(turns, text))
                } else {
                    notes.push(format!("new runtime session{label} {id}"));
                    (id, text.to_string())
                }
            }
        };
        if !options.oneshot {
            let session = store::RuntimeSession {
                id: id.clone(),
                instance: Some(handle.instance.clone()),
            };
            let (key, agent) = (session_key.to_string(), agent_id.to_string());
            self.blocking(move |s| s.set_runtime_session(&key, &agent, &session))
                .await?;
        }
        Ok((id, prompt_text, notes))
    }

    /// Prompts the agent in the runtime session of `session_key`; returns the reply and notes
    /// about how the session was opened (for the transcript). A `oneshot` session is closed
    /// after the reply, however the prompt ended.
    async fn prompt(
        &self,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &route::SessionOptions,
    ) -> Result<(String, Vec<String>), AccessError> {
        let (answer, notes) = self
            .prompt_answer(agent_id, session_key, text, options)
            .await?;
        // A heartbeat's turn: its budget row on its own (its transcript rows come later).
        if let Some(counted) = answer.counted {
            let key = session_key.to_string();
            self.blocking(move |s| s.record_turn(&key, &[], None, Some(&counted)))
                .await?;
        }
        Ok((answer.text, notes))
    }

    /// [`Access::prompt`], with the stop reason the runtime gave.
    async fn prompt_answer(
        &self,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &route::SessionOptions,
    ) -> Result<(Answer, Vec<String>), AccessError> {
        let remote = self.plan().map(|p| p.runtime(agent_id)) == Some(RuntimeKind::A2a);
        let handle = if remote {
            None
        } else {
            Some(self.runtime(agent_id)?)
        };
        let limits = self
            .plan()
            .and_then(|p| p.budgets.get(agent_id).cloned())
            .unwrap_or_default();
        let began = budget::now_ms();
        let _permit = match self.budgets.admit_turn(agent_id, &limits, began) {
            Ok(permit) => permit,
            Err(refusal) => {
                self.refused(&refusal, Some(session_key), options.run_id.as_deref())
                    .await;
                return Err(AccessError::BudgetExceeded(refusal));
            }
        };
        if let Some(turn) = options.begun.clone() {
            self.blocking(move |store| store.begin_turn(&turn, began))
                .await?;
        }
        let Some(handle) = handle else {
            // A remote A2A agent: its budgets count its turns; it reports no usage (unknown).
            let mut options = options.clone();
            let timeout = options.timeout.unwrap_or(self.settings.prompt_timeout);
            let turn_seconds = limits.turn_seconds.filter(|limit| *limit < timeout);
            options.timeout = Some(turn_seconds.unwrap_or(timeout));
            let answered = match self
                .prompt_remote(agent_id, session_key, text, &options)
                .await
            {
                Err(AccessError::TimedOut {
                    why: _,
                    agent_id,
                    seconds,
                    stop_reason,
                    confirmed,
                }) if turn_seconds.is_some() => Err(AccessError::TimedOut {
                    agent_id,
                    seconds,
                    stop_reason,
                    confirmed,
                    why: CancelWhy::TurnSeconds,
                }),
                answered => answered,
            };
            let answered = answered.map(|mut answer| {
                let total = answer.text.len();
                answer.text = cap::cut(answer.text, total, limits.reply_bytes);
                answer
            });
            let counted = store::CountedTurn {
                agent_id: agent_id.to_string(),
                at_ms: began,
                run_id: options.run_id.clone(),
                usage: budget::TurnUsage::default(),
            };
            return self
                .counted(session_key, answered, counted)
                .await
                .map(|answer| (answer, Vec::new()));
        };
        let (session_id, prompt_text, mut notes) = self
            .open_session(&handle, agent_id, session_key, text, options)
            .await?;
        notes.extend(self.apply_model(&handle, agent_id, &session_id).await);
        let timeout = options.timeout.unwrap_or(self.settings.prompt_timeout);
        let (timeout, why) = match limits.turn_seconds {
            Some(limit) if limit < timeout => (limit, CancelWhy::TurnSeconds),
            _ => (timeout, CancelWhy::Timeout),
        };
        let turn = TurnRef {
            agent_id,
            session_key,
            run_id: options.run_id.as_deref(),
            why,
            reply_bytes: limits.reply_bytes,
        };
        let answered = self
            .prompt_in(&handle, &turn, &session_id, prompt_text, timeout)
            .await;
        if let Some(door) = self.approval_door() {
            door.turn_ended(session_key);
        }
        // What the turn used, as its runtime reported it (unknown when it did not).
        let (totals, answered) = match answered {
            Ok((answer, totals)) => (totals, Ok(answer)),
            Err(e) => (budget::TurnUsage::default(), Err(e)),
        };
        let usage = self
            .budgets
            .turn_usage(&format!("{}/{session_id}", handle.instance), totals);
        self.budgets.add_usage(agent_id, usage, budget::now_ms());
        let counted = store::CountedTurn {
            agent_id: agent_id.to_string(),
            at_ms: began,
            run_id: options.run_id.clone(),
            usage,
        };
        let answered = self.counted(session_key, answered, counted).await;
        if options.oneshot {
            notes.push(close_session(&handle, &session_id).await);
            if let Some(door) = self.door.get() {
                door.closed(session_key);
            }
        }
        answered.map(|reply| (reply, notes))
    }

    /// Applies the agent's `model` (as the plan in force says now) to an open runtime
    /// session, unless it was applied there already: on a new session, and again after the
    /// config's model changed (no restart: the agent switches). Returns a note for the
    /// transcript when it applied something or could not.
    async fn apply_model(
        &self,
        handle: &AcpHandle,
        agent_id: &str,
        session_id: &str,
    ) -> Option<String> {
        let wanted = self
            .plan()
            .and_then(|p| p.models.get(agent_id).map(model::candidates))
            .unwrap_or_default();
        let session = handle.session_model(session_id).unwrap_or_default();
        if wanted.is_empty() || session.wanted == wanted {
            return None;
        }
        let offers = session.option.is_some();
        let (session, report) = model::apply(handle, session_id, session, &wanted).await;
        handle.set_session_model(session_id, session);
        // An agent that offers no model selection is said once, in the status, not in every
        // session's transcript.
        let note = match (&report.applied, &report.why) {
            (Some(applied), None) => Some(format!("model `{applied}` applied")),
            (Some(applied), Some(why)) => Some(format!("model `{applied}` applied, {why}")),
            (None, why) => {
                offers.then(|| format!("model not applied: {}", why.as_deref().unwrap_or("")))
            }
        };
        if let Ok(mut models) = self.models.lock() {
            models.insert(
                agent_id.to_string(),
                AppliedModel {
                    instance: handle.instance.clone(),
                    wanted,
                    report,
                },
            );
        }
        note
    }

    /// What became of agent `agent_id`'s `model`, for `deepcli status`: `None` when it sets
    /// none. Not applied, with why, when its runtime cannot take one; pending until its
    /// runtime's first session opens (or its next message, after the model changed).
    pub fn model_report(&self, agent_id: &str) -> Option<crate::runtime::acp::ModelReport> {
        let plan = self.plan()?;
        let wanted = model::candidates(plan.models.get(agent_id)?);
        let not_applied = |why: &str| crate::runtime::acp::ModelReport {
            wanted: wanted.first().cloned().unwrap_or_default(),
            applied: None,
            why: Some(why.to_string()),
        };
        if let Err(why) = plan.runtime(agent_id).applies_model() {
            return Some(not_applied(why));
        }
        let instance = self
            .runtimes
            .as_ref()
            .and_then(|(acp, _)| Some(acp.lock().ok()?.get(agent_id)?.instance.clone()));
        let applied = self.models.lock().ok().and_then(|models| {
            let m = models.get(agent_id)?;
            (Some(&m.instance) == instance.as_ref() && m.wanted == wanted).then(|| m.report.clone())
        });
        Some(applied.unwrap_or_else(|| {
            not_applied("pending: deepcli applies it in the agent's next session (a message or a heartbeat opens one)")
        }))
    }

    /// One `session/prompt` in an open runtime session: the reply assembled from its agent
    /// message chunks, cancelled after the prompt timeout.
    async fn prompt_in(
        &self,
        handle: &AcpHandle,
        turn: &TurnRef<'_>,
        session_id: &str,
        prompt_text: String,
        timeout: Duration,
    ) -> Result<(Answer, budget::TurnUsage), AccessError> {
        let (agent_id, session_key) = (turn.agent_id, turn.session_key);
        let gone = |e: agent_client_protocol::Error| AccessError::RuntimeFailed {
            agent_id: agent_id.to_string(),
            what: "the prompt",
            message: e.to_string(),
        };
        let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
        if let Ok(mut subs) = handle.subscribers.lock() {
            subs.insert(session_id.to_string(), tx);
        }
        struct Unsubscribe<'a>(&'a AcpHandle, &'a str);
        impl Drop for Unsubscribe<'_> {
            fn drop(&mut self) {
                if let Ok(mut subs) = self.0.subscribers.lock() {
                    subs.remove(self.1);
                }
            }
        }
        let _unsubscribe = Unsubscribe(handle, session_id);

        let request = PromptRequest::new(session_id.to_string(), vec![prompt_text.into()]);
        let answer = handle.cx.send_request(request).block_task();
        tokio::pin!(answer);
        struct Forget<'a>(&'a AcpHandle, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.waits.forget(self.1);
            }
        }
        let _forget = Forget(handle, session_id);
        // The turn, for an operator's cancel (`deepcli sessions cancel`) to wait on its end.
        let ended = Running::start(&self.running, session_key);
        let response = tokio::select! {
            r = &mut answer => {
                let r = r.map_err(gone)?;
                ended.end(serde_json::to_value(r.stop_reason).ok().and_then(|v| v.as_str().map(str::to_string)));
                r
            }
            () = person_aware_timeout(handle, session_id, timeout) => {
                let cancel = {
                    let (agent, key, run, why) = (
                        agent_id.to_string(),
                        session_key.to_string(),
                        turn.run_id.map(str::to_string),
                        turn.why.as_str(),
                    );
                    self.blocking(move |s| s.cancel_requested(&agent, &key, run.as_deref(), why))
                        .await
                        .ok()
                };
                let _ = handle.cx.send_notification(CancelNotification::new(session_id.to_string()));
                // The agent answers a cancelled prompt with stopReason `cancelled`.
                let stop = tokio::time::timeout(CANCEL_CONFIRM, &mut answer)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|r| serde_json::to_value(r.stop_reason).unwrap_or_default());
                let confirmed = stop.as_ref().is_some_and(|s| s == "cancelled");
                if let Some(id) = cancel {
                    let (state, note) = if confirmed {
                        ("confirmed", format!("the turn passed {} s ({}): the runtime stopped it (stopReason cancelled)", timeout.as_secs_f64(), turn.why.as_str()))
                    } else {
                        ("uncertain", format!("the turn passed {} s ({}): the runtime did not confirm the cancel within {} s (stopReason: {})", timeout.as_secs_f64(), turn.why.as_str(), CANCEL_CONFIRM.as_secs(), stop.as_ref().map_or("none".to_string(), Value::to_string)))
                    };
                    let _ = self.blocking(move |s| s.cancel_decided(id, state, &note)).await;
                }
                return Err(AccessError::TimedOut {
                    agent_id: agent_id.to_string(),
                    seconds: timeout.as_secs_f64(),
                    stop_reason: stop,
                    confirmed,
                    why: turn.why,
                });
            }
        };
        let mut totals = budget::TurnUsage::default();
        let mut reply = cap::Reply::new(turn.reply_bytes);
        while let Ok(update) = updates.try_recv() {
            match update.update {
                SessionUpdate::AgentMessageChunk(chunk) => {
                    if let ContentBlock::Text(t) = chunk.content {
                        reply.push(&t.text);
                    }
                }
                // The session's running cost (ACP usage_update); only USD counts against
                // costPerDayUsd, another unit stays unknown.
                SessionUpdate::UsageUpdate(usage) => {
                    if let Some(cost) = usage
                        .cost
                        .filter(|c| c.currency.eq_ignore_ascii_case("USD"))
                    {
                        totals.cost_micros =
                            Some((cost.amount.max(0.0) * budget::MICROS_PER_USD).round() as u64);
                    }
                }
                _ => {}
            }
        }
        // The session's running token total, where the runtime reports one with its answer.
        if let Some(usage) = &response.usage {
            totals.tokens = Some(usage.total_tokens);
        }
        tracing::debug!(agent = agent_id, session = session_key, stop = ?response.stop_reason, "prompt answered");
        let stop_reason = serde_json::to_value(response.stop_reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string));
        Ok((
            Answer {
                text: reply.finish(),
                stop_reason,
                runtime_time: Duration::ZERO,
                counted: None,
            },
            totals,
        ))
    }
}

/// The turns running now, by session key: each one's end (its stop reason, `None` for a turn
/// that ended without one) for whoever waits on it.
type RunningTurns = Mutex<HashMap<String, watch::Sender<Option<Option<String>>>>>;

/// A running turn's entry in [`RunningTurns`], taken out however the turn ends.
struct Running<'a> {
    turns: &'a RunningTurns,
    session_key: &'a str,
    tx: watch::Sender<Option<Option<String>>>,
}

impl<'a> Running<'a> {
    fn start(turns: &'a RunningTurns, session_key: &'a str) -> Running<'a> {
        let (tx, _) = watch::channel(None);
        if let Ok(mut map) = turns.lock() {
            map.insert(session_key.to_string(), tx.clone());
        }
        Running {
            turns,
            session_key,
            tx,
        }
    }

    fn end(&self, stop_reason: Option<String>) {
        self.tx.send_replace(Some(stop_reason));
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.tx.borrow().is_none() {
            self.tx.send_replace(Some(None));
        }
        let mut map = match self.turns.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map
            .get(self.session_key)
            .is_some_and(|tx| tx.same_channel(&self.tx))
        {
            map.remove(self.session_key);
        }
    }
}

/// Sleeps until `timeout` of the prompt's own time has passed: time the session spends
/// waiting for a person (a permission request out for approval) does not count
/// (`permissions.timeoutSeconds` bounds that wait instead).
async fn person_aware_timeout(handle: &AcpHandle, session_id: &str, timeout: Duration) {
    let started = Instant::now();
    let mut changes = handle.waits.subscribe();
    loop {
        let (waited, waiting) = handle.waits.waited(session_id);
        if waiting {
            // Nothing runs out while a person is asked: wake when that ends.
            let _ = changes.changed().await;
            continue;
        }
        let deadline = started + timeout + waited;
        if Instant::now() >= deadline {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline.into()) => {}
            _ = changes.changed() => {}
        }
    }
}

/// What came of an operator's cancel of the turn running in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelState {
    /// No turn was running there: nothing to cancel.
    NotRunning,
    /// `session/cancel` was sent; the turn has not ended yet.
    Requested,
    /// The runtime ended the turn with stopReason `cancelled`.
    Confirmed,
    /// The turn ended otherwise (or not within the grace): what it did is not known.
    Uncertain,
}

/// How long a cancelled turn has to confirm (stopReason `cancelled`) before the cancel is
/// `uncertain`.
const CANCEL_CONFIRM: Duration = Duration::from_secs(5);

/// Why a turn was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelWhy {
    /// The agent's `budgets.turnSeconds`.
    TurnSeconds,
    /// The prompt timeout (the Access layer's, or a spawn's run timeout).
    Timeout,
}

impl CancelWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelWhy::TurnSeconds => "turnSeconds",
            CancelWhy::Timeout => "timeout",
        }
    }
}

/// The turn a prompt is: whose, in which session, for which run, cancelled why.
struct TurnRef<'a> {
    agent_id: &'a str,
    session_key: &'a str,
    run_id: Option<&'a str>,
    why: CancelWhy,
    /// The most of the reply kept, in bytes (`budgets.replyBytes`).
    reply_bytes: usize,
}

/// Ends a oneshot runtime session: `session/close` when the agent offers it
/// (`sessionCapabilities.close`), else only forgotten here; says which for the transcript.
async fn close_session(handle: &AcpHandle, session_id: &str) -> String {
    handle.release(session_id);
    if !handle.closes_sessions() {
        return format!(
            "runtime session {session_id} forgotten after the reply (the agent offers no session/close)"
        );
    }
    let request = CloseSessionRequest::new(session_id.to_string());
    match tokio::time::timeout(
        Duration::from_secs(5),
        handle.cx.send_request(request).block_task(),
    )
    .await
    {
        Ok(Ok(_)) => format!("runtime session {session_id} closed after the reply"),
        Ok(Err(e)) => format!("runtime session {session_id}: session/close failed: {e}"),
        Err(_) => format!("runtime session {session_id}: no answer to session/close within 5 s"),
    }
}

/// Lets an in-flight delivery key go when the delivery ends, however it ends (a panic too):
/// a key left behind would answer every redelivery "the first delivery vanished".
struct LetGo<'a>(
    &'a Mutex<HashMap<DeliveryKey, watch::Receiver<Option<Outcome>>>>,
    &'a DeliveryKey,
);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        let mut inflight = match self.0.lock() {
            Ok(inflight) => inflight,
            Err(poisoned) => poisoned.into_inner(),
        };
        inflight.remove(self.1);
    }
}

/// A new runtime session's first prompt: the recent transcript, then the message.
fn context_prompt(turns: &[&store::TranscriptRow], text: &str) -> String {
    let mut out = String::from(
        "[deepcli: this conversation continues an earlier session the agent no longer has. The recent transcript, oldest first:]\n",
    );
    for t in turns {
        let who = if t.provenance == Provenance::Agent {
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
    AccessError::Internal(what.to_string())
}

fn as_duplicate(stored: &str) -> Value {
    let mut v: Value = serde_json::from_str(stored).unwrap_or_default();
    v["duplicate"] = true.into();
    v
}
