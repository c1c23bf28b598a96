//! The Hub (hub.md): agents working with agents. It resolves a tool call's target, checks
//! policy, writes provenance and correlation ids, and hands the message to the target
//! session's FIFO — the Access layer's, so one session never runs two turns at once. It runs no
//! model and keeps no queue of its own beyond the runs crash recovery needs.
//!
//! Beside Access, below the controller: the controller builds it, swaps its policy after every
//! apply and mounts its HTTP routes; the Access layer knows it only as the [`McpDoor`] that
//! gives every ACP session the `deepcli` MCP server. A caller's identity comes only from its
//! session capability token ([`token`]), never from tool arguments.
//!
//! The Hub is a composition of parts, each with its own state:
//!
//! * `policy.rs` — the decisions and their reason codes, pure.
//! * `checks.rs` — the checks on a message between sessions (visibility, agentToAgent, a
//!   child into an external conversation, loop trips, again at turn start), pure over a
//!   `HubView` snapshot.
//! * `tools.rs` — the tool definitions and their typed arguments.
//! * `calls.rs` — what each tool does: decode, check, a typed [`ToolResult`].
//! * `results.rs` — the typed tool results and their OpenClaw shapes.
//! * `runs.rs` — runs (`Runs`: the runs in flight, the acceptance order): delivery, states,
//!   the reply-back loop, announces, cancel, restart.
//! * `elsewhere.rs` — a run's turn into an agent another replica runs, handed to that
//!   replica (`/internal/hub-turn`), and the calls on its sessions (`/internal/hub-session`).
//! * `spawns.rs` — spawned-run slots (`Spawns`).
//! * `tokens.rs` — session tokens (`Tokens`): mint, resolve, revoke.
//! * `loops.rs` — loop pauses across runs (approvals.md): a send past a bound waits, `paused`,
//!   for the operator.
//! * `mcp.rs` — the MCP servers (rmcp): HTTP at `/mcp`, and `deepcli hub mcp` on stdio.
//! * `http.rs` — the HTTP routes: `/mcp`, the stdio forwarder's `/v1/hub/*`, and the
//!   operator's `/v1/sessions`, `/v1/runs`.
//! * `operator.rs` — the operator's service (`sessions/*`, `runs/*`).
//! * `approval.rs` — `awaiting_approval` runs and the `management_request` tool's door.

pub(crate) mod a2a;
mod approval;
mod calls;
mod checks;
mod elsewhere;
pub(crate) mod http;
pub(crate) mod idle;
mod loops;
pub(crate) mod mcp;
pub(crate) mod operator;
pub(crate) mod page;
pub(crate) mod policy;
mod reads;
mod results;
mod runs;
mod spawns;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod tasks;
pub(crate) mod token;
mod tokens;
pub(crate) mod tools;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    EnvVariable, HttpHeader, McpServer, McpServerHttp, McpServerStdio,
};

use crate::access::{Access, McpDoor};
use crate::snapshot::Snapshot;
use crate::state::{StateDir, StateError};
pub(crate) use approval::{ManagementAsk, ManagementAsks};
pub(crate) use policy::{HubPolicy, Reason};
pub(crate) use results::ToolResult;
pub(crate) use runs::CANCEL_GRACE;
use runs::Runs;
use spawns::Spawns;
use status::{AgentLoad, AgentToAgentView, LoopPause, PolicyView};
pub(crate) use status::{AuditTimeline, HubStatus, OverheadSummary};
use store::HubStore;
use tokens::Tokens;

/// The MCP server's name in every session's `mcpServers`.
pub(crate) const SERVER_NAME: &str = "deepcli";
/// The stdio server's environment: the controller's base URL and the session token.
pub(crate) const URL_ENV: &str = "DEEPCLI_HUB_URL";
pub(crate) const TOKEN_ENV: &str = "DEEPCLI_HUB_TOKEN";

/// The session a tool call comes from, as its token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubCaller {
    pub agent_id: String,
    pub session_key: String,
    /// 0 for a session the Hub did not spawn; a child's is its parent's plus one.
    pub depth: u32,
}

/// What went wrong with a call itself (not a refusal, which is a result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    #[error("unknown tool `{0}`; the tools are {tools}", tools = tools::ALL.join(", "))]
    UnknownTool(String),
    /// Arguments that do not fit the tool's schema: the message says how.
    #[error("{0}")]
    BadArguments(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StateError> for CallError {
    fn from(e: StateError) -> CallError {
        CallError::Internal(e.to_string())
    }
}

/// Counters for `/metrics` and `/v1/status`.
#[derive(Default)]
pub(crate) struct HubMetrics {
    pub calls: AtomicU64,
    pub sends: AtomicU64,
    pub spawns: AtomicU64,
    pub denials: Mutex<BTreeMap<&'static str, u64>>,
    /// `tools/list` answered, by agent: whether an agent's runtime took the Hub's MCP server.
    pub tool_lists: Mutex<BTreeMap<String, u64>>,
    /// Finished runs: how many, and their durations in milliseconds, summed.
    pub runs_finished: AtomicU64,
    pub run_millis: AtomicU64,
    /// Token checks that failed (unknown, revoked or malformed tokens).
    pub bad_tokens: AtomicU64,
    /// Kept children closed because they sat idle (`subagents.keptIdleSeconds`).
    pub idle_closed: AtomicU64,
    /// The Hub's own time in the last waited-for sends: the call's time at the Hub minus the
    /// target runtime's.
    pub send_overhead: OverheadSamples,
}

/// How many send overheads `/v1/status` summarizes.
pub(crate) const OVERHEAD_SAMPLES: usize = 4096;

/// The last [`OVERHEAD_SAMPLES`] overheads of a kind of call, in µs, newest last: a call's time
/// in the controller minus its target runtime's.
#[derive(Default)]
pub(crate) struct OverheadSamples(Mutex<std::collections::VecDeque<u64>>);

impl OverheadSamples {
    pub(crate) fn add(&self, micros: u64) {
        if let Ok(mut samples) = self.0.lock() {
            if samples.len() >= OVERHEAD_SAMPLES {
                samples.pop_front();
            }
            samples.push_back(micros);
        }
    }

    /// The overheads kept, summarized.
    pub(crate) fn summary(&self) -> OverheadSummary {
        let mut samples: Vec<u64> = self
            .0
            .lock()
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        samples.sort_unstable();
        let at = |p: f64| {
            samples
                .get(((samples.len().saturating_sub(1)) as f64 * p).round() as usize)
                .copied()
        };
        OverheadSummary {
            samples: samples.len(),
            p50_us: at(0.5),
            p99_us: at(0.99),
            max_us: samples.last().copied(),
        }
    }
}

pub(crate) struct Hub {
    store: Arc<HubStore>,
    access: Arc<Access>,
    /// The Hub's piece of the generation in force.
    policy: Snapshot<Arc<HubPolicy>>,
    /// The controller's base URL on loopback (`http://127.0.0.1:<port>`).
    endpoint: String,
    /// The runs this controller carries out, and the order runs into a session are accepted.
    runs: Runs,
    /// Spawned-run slots (`subagents.maxConcurrent`).
    spawns: Spawns,
    /// Session tokens: what the MCP servers carry and a tool call is resolved by.
    tokens: Arc<Tokens>,
    /// How long a cancelled turn has to confirm before its run is `uncertain`.
    cancel_grace: std::time::Duration,
    pub metrics: HubMetrics,
    /// Where `management_request` goes (the approvals serve the other end).
    management: ManagementAsks,
    /// The operator token in force: masked in what agents read whatever its shape.
    operator_token: Option<String>,
    /// Tasks (tasks.md): what the task tools read and move.
    tasks: Arc<crate::tasks::store::TaskStore>,
    /// The tasks' artifact store: `<state>/artifacts/<task>/<sha256>`.
    artifacts: PathBuf,
}

/// What the Hub is made of before the turn engine exists: its store, the session tokens, where
/// the controller listens, and its policy. The engine needs the MCP servers ([`HubCore::mcp`])
/// before the Access layer the Hub delivers through can be made; the Hub is made from this
/// afterwards ([`Hub::new`]).
pub(crate) struct HubCore {
    store: Arc<HubStore>,
    tasks: Arc<crate::tasks::store::TaskStore>,
    tokens: Arc<Tokens>,
    endpoint: String,
    exe: PathBuf,
    policy: Snapshot<Arc<HubPolicy>>,
}

impl HubCore {
    /// The Hub's store on `state`, for a controller listening on `listen`. With `alone`, every
    /// token of an earlier controller is revoked (its runtimes, which held them, are gone);
    /// a replica among others revokes only the tokens of the agents it takes over
    /// ([`Hub::taken_over`]): the others' runtimes hold theirs.
    pub(crate) fn open(
        state: &StateDir,
        listen: std::net::SocketAddr,
        policy: Snapshot<Arc<HubPolicy>>,
        alone: bool,
    ) -> Result<HubCore, StateError> {
        let store = Arc::new(HubStore::open(state)?);
        let tokens = Arc::new(Tokens::new(store.clone()));
        if alone {
            let revoked = tokens.revoke_all("the controller restarted")?;
            if revoked > 0 {
                tracing::info!(revoked, "hub: tokens of the last controller revoked");
            }
        }
        Ok(HubCore {
            store,
            tasks: Arc::new(crate::tasks::store::TaskStore::open(state)?),
            tokens,
            endpoint: loopback_url(listen),
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("deepcli")),
            policy,
        })
    }

    /// What gives the agents' runtime sessions the Hub's MCP server: a session token minted
    /// for each, revoked when the session closes.
    pub(crate) fn mcp(&self) -> Arc<dyn McpDoor> {
        Arc::new(McpServers {
            tokens: self.tokens.clone(),
            endpoint: self.endpoint.clone(),
            exe: self.exe.clone(),
            policy: self.policy.clone(),
        })
    }
}

/// The base URL the stdio servers forward to, on loopback when the controller listens on
/// every address.
fn loopback_url(addr: std::net::SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    format!("http://{ip}:{}", addr.port())
}

impl Hub {
    /// The Hub of a controller, delivering through `access`; its `management_request`s go to
    /// `management`; a cancelled turn has `cancel_grace` to confirm.
    pub(crate) fn new(
        core: HubCore,
        state: &StateDir,
        access: Arc<Access>,
        management: ManagementAsks,
        cancel_grace: std::time::Duration,
    ) -> Arc<Hub> {
        let HubCore {
            store,
            tasks,
            tokens,
            endpoint,
            exe: _,
            policy,
        } = core;
        Arc::new(Hub {
            store,
            access,
            policy,
            endpoint,
            runs: Runs::default(),
            spawns: Spawns::default(),
            tokens,
            cancel_grace,
            metrics: HubMetrics::default(),
            management,
            operator_token: crate::state::read_operator_token(state),
            tasks,
            artifacts: state.artifacts(),
        })
    }

    /// The audit timeline (approvals.md) `filter` asks for.
    pub(crate) async fn audit(
        &self,
        filter: crate::state::audit::AuditFilter,
    ) -> Result<AuditTimeline, CallError> {
        let events = self.db(move |s| s.audit(&filter)).await?;
        Ok(AuditTimeline {
            count: events.len(),
            events,
        })
    }

    /// The controller's base URL agents are given.
    pub(crate) fn endpoint(&self) -> Option<&str> {
        Some(&self.endpoint)
    }

    pub(crate) fn policy(&self) -> Arc<HubPolicy> {
        self.policy.load()
    }

    pub(crate) fn store(&self) -> &HubStore {
        &self.store
    }

    /// Runs `f` on the store, on the blocking pool.
    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&HubStore) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, CallError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?
            .map_err(CallError::from)
    }

    /// Who holds `token`: `None` for anything but a live token.
    pub(crate) async fn caller(&self, token: &str) -> Option<HubCaller> {
        let found = match token::hash(token) {
            Some(_) => {
                let (tokens, token) = (self.tokens.clone(), token.to_string());
                tokio::task::spawn_blocking(move || tokens.caller(&token))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .flatten()
            }
            None => None,
        };
        if found.is_none() {
            self.metrics.bad_tokens.fetch_add(1, Relaxed);
        }
        found
    }

    /// The names of the tools `caller` gets, in [`tools::ALL`]'s order: a leaf gets no
    /// `sessions_spawn`, a spawned session none that [`HubPolicy::tool_denied`] takes from it.
    /// The tools `caller` lists (MCP `tools/list`, counted by agent).
    pub(super) fn list_tools(&self, caller: &HubCaller) -> Vec<serde_json::Value> {
        if let Ok(mut lists) = self.metrics.tool_lists.lock() {
            *lists.entry(caller.agent_id.clone()).or_default() += 1;
        }
        tools::definitions_of(&self.tools_for(caller))
    }

    pub(crate) fn tools_for(&self, caller: &HubCaller) -> Vec<&'static str> {
        let p = self.policy();
        let leaf = caller.depth >= p.limits(&caller.agent_id).max_spawn_depth;
        tools::ALL
            .into_iter()
            .filter(|name| !(leaf && *name == tools::SESSIONS_SPAWN))
            .filter(|name| {
                p.tool_denied(&caller.agent_id, caller.depth, name)
                    .is_none()
            })
            .collect()
    }

    /// Counts a refusal: where it is made, once.
    fn denied(&self, reason: Reason) {
        if let Ok(mut d) = self.metrics.denials.lock() {
            *d.entry(reason.as_str()).or_default() += 1;
        }
    }

    /// A refusal as a tool result, counted.
    fn forbid(&self, denial: policy::Denial) -> ToolResult {
        self.denied(denial.reason);
        ToolResult::Forbidden(denial)
    }

    /// The Hub's figures for `/v1/status`.
    pub(crate) fn status(&self) -> HubStatus {
        let denials = self
            .metrics
            .denials
            .lock()
            .map(|d| d.iter().map(|(k, v)| (k.to_string(), *v)).collect())
            .unwrap_or_default();
        let p = self.policy();
        let depths = self.access.queue_depths();
        let active = self.runs.by_agent();
        let agents = p
            .agents
            .keys()
            .map(|id| {
                (
                    id.clone(),
                    AgentLoad {
                        queue_depth: depths.get(id).copied().unwrap_or(0),
                        active_runs: active.get(id).copied().unwrap_or(0),
                    },
                )
            })
            .collect();
        HubStatus {
            agents,
            calls: self.metrics.calls.load(Relaxed),
            sends: self.metrics.sends.load(Relaxed),
            spawns: self.metrics.spawns.load(Relaxed),
            active_runs: self.runs.count(),
            active_spawns: self.spawns.active(),
            live_tokens: self.tokens.live(),
            idle_children_closed: self.metrics.idle_closed.load(Relaxed),
            loop_pauses: self
                .store
                .open_pauses()
                .unwrap_or_default()
                .into_iter()
                .map(|(run_id, why)| LoopPause { run_id, why })
                .collect(),
            denials,
            send_overhead: self.metrics.send_overhead.summary(),
            policy: PolicyView {
                agent_to_agent: AgentToAgentView {
                    enabled: p.a2a_enabled,
                    allow: p.a2a_allow.clone(),
                },
                visibility: p.visibility,
                max_ping_pong_turns: p.max_ping_pong,
                max_concurrent: p.max_concurrent,
            },
        }
    }

    /// Registers the Hub's metrics in a scrape's `registry`.
    pub(crate) fn register_metrics(&self, registry: &mut crate::metrics::Registry) {
        use crate::metrics::{Rows, SumCount, Unit};
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let m = &self.metrics;
        let counter = |n: &AtomicU64| ConstCounter::new(n.load(Relaxed));
        registry.register("deepcli_hub_calls", "Hub tool calls", counter(&m.calls));
        registry.register("deepcli_hub_sends", "Hub sends", counter(&m.sends));
        registry.register("deepcli_hub_spawns", "Hub spawns", counter(&m.spawns));
        registry.register(
            "deepcli_hub_bad_tokens",
            "Token checks that failed (unknown, revoked or malformed tokens)",
            counter(&m.bad_tokens),
        );
        registry.register(
            "deepcli_hub_active_runs",
            "Hub runs not finished",
            ConstGauge::new(self.runs.count() as i64),
        );
        registry.register_with_unit(
            "deepcli_hub_run_duration",
            "Finished Hub runs and their durations, summed",
            Unit::Seconds,
            SumCount {
                sum: m.run_millis.load(Relaxed) as f64 / 1000.0,
                count: m.runs_finished.load(Relaxed),
            },
        );
        let lists = m.tool_lists.lock().map(|d| d.clone()).unwrap_or_default();
        registry.register(
            "deepcli_hub_tool_lists",
            "The Hub's tools/list answered, by agent (its runtime took the Hub's MCP server)",
            Rows(
                lists
                    .into_iter()
                    .map(|(agent, n)| ([("agent_id", agent)], ConstCounter::new(n)))
                    .collect(),
            ),
        );
        let denials = m.denials.lock().map(|d| d.clone()).unwrap_or_default();
        registry.register(
            "deepcli_hub_denials",
            "Hub refusals by reason",
            Rows(
                Reason::ALL
                    .iter()
                    .map(|reason| {
                        let n = denials.get(reason.as_str()).copied().unwrap_or(0);
                        ([("reason", reason.as_str())], ConstCounter::new(n))
                    })
                    .collect(),
            ),
        );
    }

    /// This replica took over agent `agent_id` (docs/scale-out.md): the tokens of its last
    /// replica's runtime sessions are revoked (that runtime is stopped), and the runs it left
    /// unfinished are settled ([`Hub::reconcile_unfinished`]). How many runs.
    pub(crate) async fn taken_over(self: &Arc<Self>, agent_id: &str) -> usize {
        let (agent, tokens) = (agent_id.to_string(), self.tokens.clone());
        let revoked = self
            .db(move |_| tokens.revoke_agent(&agent, "its replica stopped running it"))
            .await;
        if let Ok(n @ 1..) = revoked {
            tracing::info!(
                agent = agent_id,
                tokens = n,
                "hub: the last replica's session tokens revoked"
            );
        }
        self.reconcile_unfinished(Some(agent_id)).await
    }

    /// Agent `agent_id` was deleted: its sessions' tokens are revoked, its children closed,
    /// its unfinished runs ended (`failed`: the target is gone), and the unfinished tasks it
    /// owns or works on failed.
    pub(crate) async fn agent_deleted(self: &Arc<Self>, agent_id: &str) {
        let (agent, tokens) = (agent_id.to_string(), self.tokens.clone());
        let done = self
            .db(move |s| {
                let tokens = tokens.revoke_agent(&agent, "the agent was deleted")?;
                let children = s.close_agent_children(&agent)?;
                Ok((tokens, children))
            })
            .await;
        if let Ok((tokens, children)) = done {
            tracing::info!(
                agent = agent_id,
                tokens,
                children,
                "hub: a deleted agent's tokens revoked and children closed"
            );
        }
        self.fail_tasks_of(agent_id).await;
    }
}

/// The Hub's MCP server as the turn engine's [`McpDoor`]: the tokens, where to reach the
/// Hub, and its policy (whether the agent's sandbox has a network of its own).
struct McpServers {
    tokens: Arc<Tokens>,
    endpoint: String,
    exe: PathBuf,
    policy: Snapshot<Arc<HubPolicy>>,
}

impl McpDoor for McpServers {
    fn closed(&self, session_key: &str) {
        if let Err(e) = self
            .tokens
            .revoke_session(session_key, "its runtime session was closed")
        {
            tracing::error!(error = %e, "hub: cannot revoke a closed session's token");
        }
    }

    fn servers(&self, agent_id: &str, session_key: &str, http: bool) -> Vec<McpServer> {
        let Some(token) = self.tokens.mint(agent_id, session_key) else {
            return Vec::new();
        };
        // A sandbox with a network of its own reaches the hub only through its socket.
        let policy = self.policy.load();
        let agent = policy.agents.get(agent_id);
        let private = agent.is_some_and(|a| a.private_network);
        let endpoint = if private {
            let socket = agent
                .and_then(|a| a.hub_socket.clone())
                .unwrap_or_else(|| crate::sandbox::HUB_SOCKET.into());
            format!("unix:{}", socket.display())
        } else {
            self.endpoint.clone()
        };
        // One server, `deepcli`: over HTTP where the agent takes it (no process per session),
        // else the stdio forwarder.
        if http && !private {
            vec![McpServer::Http(
                McpServerHttp::new(SERVER_NAME, format!("{endpoint}/mcp")).headers(vec![
                    HttpHeader::new("Authorization", format!("Bearer {token}")),
                ]),
            )]
        } else {
            vec![McpServer::Stdio(
                McpServerStdio::new(SERVER_NAME, &self.exe)
                    .args(vec!["hub".into(), "mcp".into()])
                    .env(vec![
                        EnvVariable::new(URL_ENV, endpoint),
                        EnvVariable::new(TOKEN_ENV, token),
                    ]),
            )]
        }
    }
}
