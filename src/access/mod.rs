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

pub(crate) mod a2a_door;
mod approval_door;
mod auth;
mod begun;
mod chat;
mod chat_status;
mod deliver;
mod delivered;
mod envelope;
mod error;
mod gate;
pub(crate) mod gated_line;
mod heartbeat;
pub(crate) mod http;
mod internal;
mod lifecycle;
pub(crate) mod metrics;
pub(crate) mod outbox;
pub(crate) mod placement;
pub(crate) mod plan;
pub(crate) mod prompt;
mod reply;
mod route;
pub(crate) mod sender;
pub(crate) mod serve;
mod session_reset;
pub(crate) mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use crate::ids;
use crate::ids::AccountKey;
use crate::routing::RouteInput;
pub(crate) use crate::runtime::log::Limit as LogLimit;
pub(crate) use crate::sessions::budget;
use crate::sessions::cap;
pub(crate) use crate::sessions::{CancelState, InternalMessage, McpDoor, SessionOptions, Sessions};
use crate::snapshot::Snapshot;
pub(crate) use approval_door::{
    ApprovalAsk, ApprovalAsks, ChatCommand, Command, NewTaskCommand, TaskCommand, TurnOrigin,
};
pub(crate) use auth::HandedInBy;
use auth::authenticate;
pub use auth::sign;
#[cfg(feature = "bench-tools")]
pub(crate) use begun::BegunTurn;
pub(crate) use delivered::{Delivered, Delivery};
pub(crate) use envelope::{Envelope, parse_envelope};
pub(crate) use error::{AccessError, Unauthenticated};
pub(crate) use heartbeat::Beat;
pub(crate) use plan::AccessPlan;
use store::{AccessStore, DeliveryKey};

/// How the Access layer behaves; `deepcli up` and `deepcli access serve` set it from flags.
#[derive(Debug, Clone)]
pub(crate) struct AccessSettings {
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
    /// How big a log grows and how many older files are kept (channel and runtime logs).
    pub log_limit: LogLimit,
}

impl Default for AccessSettings {
    fn default() -> AccessSettings {
        AccessSettings {
            body_limit: 1024 * 1024,
            prompt_timeout: Duration::from_secs(120),
            queue_limit: 32,
            context_turns: 20,
            idle_timeout: Duration::from_secs(30),
            log_limit: LogLimit::DEFAULT,
        }
    }
}

/// Call logs open at once, at most.
const MAX_OPEN_LOGS: usize = 64;

/// What a delivery produced.
type Outcome = Result<Delivered, AccessError>;

/// Whether `text` is a chat command the hub answers beside the session's turns, never behind
/// them: an approval command (the turn may be waiting for it), a task's verdict and `/status`. An adapter gives
/// these a lane of their own beside their chat's.
pub(crate) fn answered_beside_turns(text: &str) -> bool {
    Command::parse(text).is_some() || chat_status::is_status(text)
}

/// The Access layer's piece of a generation: the plan (none before the first is published),
/// and what the turn engine reads of it. Compiled once per plan ([`Served::new`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Served {
    pub plan: Option<Arc<AccessPlan>>,
    pub turns: Arc<crate::sessions::TurnPlan>,
}

impl Served {
    pub(crate) fn new(plan: AccessPlan) -> Served {
        Served {
            turns: Arc::new(crate::sessions::TurnPlan {
                runtimes: plan.runtimes.clone(),
                models: plan.models.clone(),
                budgets: plan.budgets.clone(),
                systems: plan.systems.clone(),
            }),
            plan: Some(Arc::new(plan)),
        }
    }
}

/// Where a process without a controller (`access serve`, a test) publishes its plans: a store
/// of its own, read through [`Publisher::served`].
pub(crate) struct Publisher(Arc<arc_swap::ArcSwap<Served>>);

impl Default for Publisher {
    fn default() -> Publisher {
        Publisher(Arc::new(arc_swap::ArcSwap::from_pointee(Served::default())))
    }
}

impl Publisher {
    /// What the Access layer is built to read.
    pub(crate) fn served(&self) -> Snapshot<Served> {
        Snapshot::of(&self.0, Served::clone)
    }

    /// Puts `plan` in force: requests that arrive from now on are routed by it, turns that
    /// begin from now on run by its agents' runtimes, models and budgets.
    pub(crate) fn publish(&self, plan: AccessPlan) {
        tracing::info!(
            generation = plan.generation,
            "access: routing plan in force"
        );
        self.0.store(Arc::new(Served::new(plan)));
    }
}

/// What the Access layer of a process that runs the agents' runtimes (the controller) is
/// wired to: the runtimes, through the turn engine, and the approvals its chats' approval
/// commands go to.
pub(crate) struct Hosted {
    pub runtimes: crate::sessions::Runtimes,
    pub approvals: ApprovalAsks,
    /// Where each agent runs, when several controllers share the state (`None`: every agent
    /// runs here).
    pub placement: Option<Arc<placement::Placement>>,
}

pub(crate) struct Access {
    /// The plan in force: this layer's piece of the generation.
    served: Snapshot<Served>,
    store: Arc<AccessStore>,
    /// The turn engine: FIFOs, runtime sessions, budgets, prompts and cancels.
    sessions: Arc<Sessions>,
    inflight: Mutex<HashMap<DeliveryKey, watch::Receiver<Option<Outcome>>>>,
    pub metrics: Arc<metrics::Metrics>,
    pub settings: AccessSettings,
    reply: reply::ReplySink,
    /// The inbound policy's state in memory: bot-loop counts, sessions with kept context.
    policy: gate::PolicyState,
    /// The open logs of inbound calls, by path ([`Access::log_call`]).
    call_logs: tokio::sync::Mutex<HashMap<std::path::PathBuf, crate::runtime::log::Log>>,
    logs_dir: std::path::PathBuf,
    /// Each account's bot user id as its platform adapter learnt it (`getMe`, `auth.test`),
    /// by (channel, account): the policy's `botUserId` where channels.yaml sets none.
    live_bots: Mutex<HashMap<AccountKey, Arc<str>>>,
    /// Where approval commands from chats go (approvals.md); `None` where no approvals run.
    approvals: Option<ApprovalAsks>,
    /// The conversation each running turn answers, by session key.
    origins: Mutex<HashMap<String, TurnOrigin>>,
    /// Rung when a row is queued in the outbox: its carriers look at once.
    outbox_queued: Arc<tokio::sync::Notify>,
    /// Where each agent runs, when several controllers share the state.
    placement: Option<Arc<placement::Placement>>,
}

impl Access {
    /// `served`: the plan in force, as the controller's generation or a [`Publisher`] has it;
    /// `hosted`: `None` in a process that runs no runtimes (`access serve`).
    pub(crate) fn new(
        store: AccessStore,
        state: &crate::state::StateDir,
        served: Snapshot<Served>,
        hosted: Option<Hosted>,
        settings: AccessSettings,
    ) -> Access {
        let store = Arc::new(store);
        let metrics = Arc::new(metrics::Metrics::default());
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
        let (runtimes, approvals, placement) = match hosted {
            Some(h) => (Some(h.runtimes), Some(h.approvals), h.placement),
            None => (None, None, None),
        };
        let sessions = Sessions::new(
            store.clone(),
            runtimes,
            served.map(|s| s.turns.clone()),
            budgets,
            crate::sessions::SessionSettings {
                prompt_timeout: settings.prompt_timeout,
                queue_limit: settings.queue_limit,
                context_turns: settings.context_turns,
                ..crate::sessions::SessionSettings::default()
            },
            metrics.clone(),
        );
        Access {
            sessions: Arc::new(sessions),
            served,
            reply: reply::ReplySink::new(store.clone(), metrics.reply_failures.clone()),
            store,
            inflight: Mutex::default(),
            metrics,
            settings,
            policy,
            call_logs: tokio::sync::Mutex::default(),
            logs_dir: state.logs(),
            live_bots: Mutex::default(),
            approvals,
            origins: Mutex::default(),
            outbox_queued: Arc::default(),
            placement,
        }
    }

    /// Where each agent runs, when several controllers share the state.
    pub(crate) fn placement(&self) -> Option<&Arc<placement::Placement>> {
        self.placement.as_ref()
    }

    /// Who holds `agent`'s claim now, as the state says (this replica's view is a round old).
    pub(crate) async fn holder_now(&self, agent: &str) -> Option<placement::Holder> {
        let agent = agent.to_owned();
        self.blocking(move |store| store.agent_holder(&agent))
            .await
            .ok()
            .flatten()
    }

    /// Records (or forgets, with `None`) the bot user id an adapter learnt for an account
    /// (normalized ids): self-loop, mentions and replies to the bot count by it when
    /// channels.yaml sets no `botUserId`.
    pub(crate) fn set_live_bot(&self, channel: &str, account: &str, bot_user_id: Option<&str>) {
        let mut bots = match self.live_bots.lock() {
            Ok(bots) => bots,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key = AccountKey::new(channel, account);
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
        bots.get(&AccountKey::new(channel, account)).cloned()
    }

    /// Appends one line about an inbound call to the log of the channel it names
    /// (`<state>/logs/channels/<channel>.log`, which `deepcli channels logs` shows) when the
    /// plan in force declares that channel; to `<state>/logs/access.log` otherwise (no channel,
    /// or one nobody declared: callers choose those names, so they get no file of their own).
    /// Every field is escaped: one call, one line. Logs are size-capped and rotated.
    pub(crate) async fn log_call(&self, channel: Option<&str>, line: &str) {
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
            match crate::runtime::log::Log::open(&path, self.settings.log_limit).await {
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

    /// The turn engine (the Hub delivers through it).
    pub(crate) fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    pub(crate) fn plan(&self) -> Option<Arc<AccessPlan>> {
        self.served.load().plan
    }

    pub(crate) fn store(&self) -> &AccessStore {
        &self.store
    }

    /// Records a budget's refusal (approvals.md: every refusal is recorded) and counts it.
    pub(crate) async fn refused(
        &self,
        refusal: &budget::BudgetRefusal,
        session_key: Option<&str>,
        run_id: Option<&str>,
    ) {
        self.sessions.refused(refusal, session_key, run_id).await;
    }

    /// Agent `agent_id`'s budgets as the plan in force sets them (none: no limits).
    pub(crate) fn limits(&self, agent_id: &str) -> budget::BudgetLimits {
        self.plan()
            .and_then(|p| p.budgets.get(agent_id).cloned())
            .unwrap_or_default()
    }

    /// Counts agent `agent_id`'s budgets again from the state: a replica that takes the agent
    /// over counts the turns its last replica ran (docs/scale-out.md).
    pub(crate) async fn recount_budgets(&self, agent_id: &str) -> Result<(), AccessError> {
        let now_ms = budget::now_ms();
        let agent = agent_id.to_owned();
        let rows = self
            .blocking(move |store| store.budget_rows_of(Some(&agent), now_ms))
            .await?;
        self.sessions.recount_budget(agent_id, &rows, now_ms);
        Ok(())
    }

    /// Whether agent `agent_id`'s budgets let a turn begin now (nothing is taken): what the
    /// Hub asks before it accepts a run.
    ///
    /// With several replicas, only the replica that runs the agent counts its turns: for an
    /// agent another runs, that replica checks when the turn comes.
    pub(crate) fn budget_allows_turn(&self, agent_id: &str) -> Result<(), budget::BudgetRefusal> {
        if let Some(placement) = &self.placement
            && !matches!(placement.owner(agent_id), placement::Owner::Here(_))
        {
            return Ok(());
        }
        self.sessions.budget_allows_turn(agent_id)
    }

    /// Takes a spawn by session `session_key` of agent `agent_id` if the agent's
    /// `spawnsPerHour` allows, and records it.
    pub(crate) async fn budget_spawn(
        &self,
        agent_id: &str,
        session_key: &str,
    ) -> Result<(), budget::BudgetRefusal> {
        self.sessions.budget_spawn(agent_id, session_key).await
    }

    /// Agent `agent_id`'s budget counters against its limits (`deepcli status`).
    pub(crate) fn budget_report(&self, agent_id: &str) -> budget::BudgetReport {
        self.sessions.budget_report(agent_id)
    }

    /// What became of agent `agent_id`'s `model`, for `deepcli status` (`None`: it sets none).
    pub(crate) fn model_report(&self, agent_id: &str) -> Option<crate::runtime::acp::ModelReport> {
        self.sessions.model_report(agent_id)
    }

    fn current(&self) -> Result<Arc<AccessPlan>, AccessError> {
        self.plan().ok_or(AccessError::NoPlan)
    }

    /// Handles one envelope: authenticate, route, deliver, record. In the caller's trace
    /// ([`crate::traces::inbound`], begun where the message came in).
    pub(crate) async fn inbound(
        self: &Arc<Self>,
        body: &[u8],
        caller: HandedInBy<'_>,
    ) -> (Option<u64>, Outcome) {
        self.inbound_on_plan(body, caller, true).await
    }

    /// [`Access::inbound`] for a message another replica handed on (`POST /internal/turn`):
    /// answered here, never handed on again.
    pub(crate) async fn inbound_handed_on(
        self: &Arc<Self>,
        body: &[u8],
        caller: HandedInBy<'_>,
    ) -> (Option<u64>, Outcome) {
        self.inbound_on_plan(body, caller, false).await
    }

    async fn inbound_on_plan(
        self: &Arc<Self>,
        body: &[u8],
        caller: HandedInBy<'_>,
        may_hand_on: bool,
    ) -> (Option<u64>, Outcome) {
        let plan = match self.current() {
            Ok(plan) => plan,
            Err(e) => return (None, Err(e)),
        };
        let generation = Some(plan.generation);
        let outcome = self.inbound_with(&plan, body, caller, may_hand_on).await;
        (generation, outcome)
    }

    /// `may_hand_on`: a message for an agent another replica runs goes there.
    async fn inbound_with(
        self: &Arc<Self>,
        plan: &Arc<AccessPlan>,
        body: &[u8],
        caller: HandedInBy<'_>,
        may_hand_on: bool,
    ) -> Outcome {
        let envelope = parse_envelope(body)?;
        crate::traces::describe_inbound(
            &envelope.route.channel,
            envelope.route.account_id.as_deref().unwrap_or("default"),
            &envelope.message_id,
        );
        let result = plan.routing.resolve(&envelope.route);
        // The account decides who may speak for it. The route is pure and only names the
        // account (normalized as the router does); nothing is counted, recorded or delivered
        // before the account has authenticated the call.
        authenticate(plan, &envelope.route, &result, body, caller)?;
        let route = self.route(plan, &envelope.route, result).await?;
        self.metrics.route(route.matched_by());
        let key = DeliveryKey::of(&envelope, &route.result);
        if may_hand_on && let Some(placement) = &self.placement {
            let agent = route.agent_id();
            let owner = placement.owner(agent);
            if !matches!(owner, placement::Owner::Here(_)) {
                return self
                    .hand_on(placement, owner, agent, &key, body, caller)
                    .await;
            }
        }
        self.deliver_once(plan, envelope, route, key).await
    }

    /// A message for an agent this replica does not run: answered from its delivery record
    /// when it was answered before, else handed on to the replica that runs the agent. This
    /// replica's view is a round old (its holder died, or the claim just moved), so when the
    /// owner in it cannot be reached, or it names none, the state says who holds it now.
    async fn hand_on(
        &self,
        placement: &placement::Placement,
        owner: placement::Owner,
        agent: &str,
        key: &DeliveryKey,
        body: &[u8],
        caller: HandedInBy<'_>,
    ) -> Outcome {
        if let Some(first) = self.answered_before(key).await? {
            return Ok(first);
        }
        let tried = match owner {
            placement::Owner::There(holder) => Some(holder),
            _ => None,
        };
        let outcome = match &tried {
            Some(holder) => placement.forward(holder, agent, body, caller).await,
            None => Err(AccessError::Elsewhere(format!(
                "no replica runs agent `{agent}` now (its claim is moving to another replica); try again"
            ))),
        };
        let Err(AccessError::Elsewhere(_)) = outcome else {
            return outcome;
        };
        let fresh = {
            let agent = agent.to_owned();
            self.blocking(move |store| store.agent_holder(&agent))
                .await?
        };
        match fresh {
            Some(holder)
                if !placement.is_me(&holder.replica) && tried.as_ref() != Some(&holder) =>
            {
                placement.forward(&holder, agent, body, caller).await
            }
            _ => outcome,
        }
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
        if let Some(first) = self.answered_before(&key).await? {
            return Ok(first);
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
                return outcome.map(|first| {
                    self.metrics
                        .duplicates
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    first.as_duplicate()
                });
            }
        };
        // The delivery runs as a task of its own: a caller that hangs up does not cancel a
        // prompt half-way, and the key is always let go, with the outcome for whoever waits.
        let this = self.clone();
        let plan = plan.clone();
        let delivery = tokio::spawn(
            async move {
                let _let_go = LetGo(&this.inflight, &key);
                // Checked again now that this request owns the key: a delivery that finished
                // between the first check and taking the key recorded itself before it let it go.
                let recorded = {
                    let key = key.clone();
                    this.blocking(move |store| store.delivered(&key)).await
                };
                let outcome = match recorded {
                    Ok(Some(response)) => Ok(Delivered::recorded(response).as_duplicate()),
                    // An approval command never reaches an agent, and never waits behind the turn
                    // that asked (approvals.md).
                    Ok(None)
                        if this.approvals.is_some() && Command::parse(&envelope.text).is_some() =>
                    {
                        this.approval_command(&plan, &envelope, &key, &route).await
                    }
                    // `/status`, `/new` and `/reset` are the hub's to answer, without a turn
                    // (conversations.md).
                    Ok(None) if chat_status::is_status(&envelope.text) => {
                        this.status_command(&plan, &envelope, &key, &route).await
                    }
                    Ok(None)
                        if session_reset::trigger(&plan.lifecycle, &envelope.text).is_some() =>
                    {
                        this.reset_command(&plan, &envelope, &key, &route).await
                    }
                    // The inbound policy decides whether the agent gets it (policy.md).
                    Ok(None) => match this
                        .gate(&plan, &envelope, &route, &key)
                        .instrument(crate::traces::gate())
                        .await
                    {
                        Ok(Some(gated)) => Ok(gated),
                        Ok(None) => this.deliver(&plan, &envelope, &key, route).await,
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                let _ = sender.send(Some(outcome.clone()));
                // A redelivery answered from the record keeps the first delivery's trace.
                if outcome.as_ref().is_ok_and(|d| !d.duplicate)
                    && let Some(trace) = crate::traces::current_id()
                {
                    let key = key.clone();
                    if let Err(e) = this
                        .blocking(move |store| store.note_trace(&key, &trace))
                        .await
                    {
                        tracing::warn!(error = %e, "cannot note a delivery's trace");
                    }
                }
                outcome
            }
            .in_current_span(),
        );
        delivery
            .await
            .unwrap_or_else(|e| Err(internal(&format!("the delivery failed: {e}"))))
    }

    /// The recorded answer to a delivery answered before, as a duplicate's.
    async fn answered_before(&self, key: &DeliveryKey) -> Result<Option<Delivered>, AccessError> {
        let key = key.clone();
        let done = self.blocking(move |store| store.delivered(&key)).await?;
        Ok(done.map(|response| Delivered::recorded(response).as_duplicate()))
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

fn internal(what: &str) -> AccessError {
    AccessError::Internal(what.to_string())
}
