//! The hub as an A2A (Agent2Agent) server (docs/a2a.md): Agent Cards for the agents
//! channels.yaml's `a2a.expose` lists, and the JSON-RPC binding at `/a2a/<agentId>/` and at
//! `/a2a/`, where bindings.yaml routes each peer (`http.rs`). A peer is known by its bearer
//! token; then it is a sender on channel `a2a` under the inbound policy (Access's `a2a_*`
//! methods). Its `contextId` is one persistent session (`agent:<id>:a2a:<peer>:<contextId>`);
//! each of its messages is a Hub run into that session, so the Hub's FIFO, run states, cancel
//! and records are the task's. A task's state is read off its runs (`wire.rs`); the task rows
//! are `store.rs`'s. A peer's webhooks get its tasks' updates (`push.rs`); a peer with a token
//! gets the extended card of what it may reach.
//!
//! Knows the Hub and Access only through their `a2a_*` methods; never opens a runtime session
//! itself.

pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod push;
mod rate;
mod rest;
pub(crate) mod store;
pub(crate) mod streams;
pub(crate) mod wire;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::access::Access;
use crate::access::a2a_door::A2aGated;
use crate::config::Config;
use crate::config::model::{A2aSpec, Secret, SecretRef};
use crate::hub::Hub;
use crate::hub::a2a::PeerTaskState;
use crate::hub::store::{RunFile, RunRecord};
use crate::state::RunState;
use store::{A2aStore, PushAdded, PushRecord, Recorded, TaskFilter, TaskRecord};
use streams::{StreamCap, StreamSlot, StreamSlots};
use wire::{Wire, state};

/// A peer's requests per minute when channels.yaml sets none.
pub(crate) const DEFAULT_PER_MINUTE: u32 = 600;
/// The longest a blocking `SendMessage` waits for its task to stop working; then it answers
/// with the task as it is (the peer polls with `GetTask` or subscribes).
pub(crate) const BLOCKING_WAIT: Duration = Duration::from_secs(120);
/// The most text one message may carry (the Hub's message limit).
pub(crate) const MAX_TEXT_BYTES: usize = crate::hub::tools::MAX_MESSAGE_BYTES;
/// The longest `contextId` taken (it is part of a session key).
pub(crate) const MAX_CONTEXT_ID: usize = 128;
/// A peer token shorter than this is refused (the peer takes no requests).
pub(crate) const MIN_TOKEN_CHARS: usize = 16;
/// Push notification configs a peer may hold on its unfinished tasks when channels.yaml sets
/// no `maxPushConfigs`.
pub(crate) const DEFAULT_MAX_PUSH_CONFIGS: usize = 16;

/// An exposed agent: what its card says.
#[derive(Debug, Clone)]
pub(crate) struct Exposed {
    pub id: String,
    pub name: String,
    pub description: String,
    pub when_to_use: Option<String>,
}

/// A peer: its token's hash (or why it has none), the agents it may reach, its rate.
#[derive(Clone)]
pub(crate) struct Peer {
    pub name: String,
    token: Result<[u8; 32], String>,
    /// `None`: every exposed agent.
    pub allow: Option<HashSet<String>>,
    pub per_minute: u32,
    /// Streams it may hold open at once.
    pub max_streams: usize,
    /// Push notification configs it may hold on its tasks that are not finished.
    pub max_push_configs: usize,
}

/// The A2A configuration in force, swapped whole after every apply.
#[derive(Clone)]
pub(crate) struct A2aPlan {
    pub exposed: Vec<Exposed>,
    pub peers: Vec<Peer>,
    /// Streams open at once, all peers together.
    pub max_streams: usize,
    /// Push notifications may go to non-public addresses and over plain http
    /// (`a2a.push.allowPrivateTargets`).
    pub allow_private_targets: bool,
}

impl Default for A2aPlan {
    fn default() -> A2aPlan {
        A2aPlan {
            exposed: Vec::new(),
            peers: Vec::new(),
            max_streams: streams::DEFAULT_TOTAL,
            allow_private_targets: false,
        }
    }
}

fn resolve_token(token: &Secret) -> Result<[u8; 32], String> {
    let r: &SecretRef = match token {
        Secret::Ref(r) => r,
        Secret::Inline(_) => return Err("the token is written inline (validate refuses it)".into()),
    };
    let value = r.resolve().map_err(|e| e.to_string())?;
    let value = secrecy::ExposeSecret::expose_secret(&value);
    if value.trim().chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "the token is shorter than {MIN_TOKEN_CHARS} characters"
        ));
    }
    Ok(Sha256::digest(value.as_bytes()).into())
}

impl A2aPlan {
    /// The plan of `config`'s `a2a:` (secrets resolved now, kept only as hashes).
    pub(crate) fn from_config(config: &Config) -> A2aPlan {
        let Some(A2aSpec {
            expose,
            peers,
            max_streams,
            push,
        }) = &config.a2a
        else {
            return A2aPlan::default();
        };
        let exposed = expose
            .iter()
            .filter_map(|id| config.agents.iter().find(|a| a.id() == id))
            .map(|agent| {
                let identity = agent.spec.identity.clone().unwrap_or_default();
                Exposed {
                    id: agent.id().to_string(),
                    name: identity.name.unwrap_or_else(|| agent.id().to_string()),
                    description: identity
                        .description
                        .unwrap_or_else(|| format!("The deepcli agent `{}`.", agent.id())),
                    when_to_use: identity.when_to_use,
                }
            })
            .collect();
        let peers = peers
            .iter()
            .map(|(name, spec)| Peer {
                name: name.clone(),
                token: resolve_token(&spec.token),
                allow: spec
                    .allow_agents
                    .as_ref()
                    .map(|a| a.iter().cloned().collect()),
                per_minute: spec.requests_per_minute.unwrap_or(DEFAULT_PER_MINUTE),
                max_streams: spec
                    .max_streams
                    .map_or(streams::DEFAULT_PER_PEER, |n| n as usize),
                max_push_configs: spec
                    .max_push_configs
                    .map_or(DEFAULT_MAX_PUSH_CONFIGS, |n| n as usize),
            })
            .collect();
        A2aPlan {
            exposed,
            peers,
            max_streams: max_streams.map_or(streams::DEFAULT_TOTAL, |n| n as usize),
            allow_private_targets: push
                .as_ref()
                .and_then(|p| p.allow_private_targets)
                .unwrap_or(false),
        }
    }

    pub(crate) fn exposed(&self, agent: &str) -> Option<&Exposed> {
        self.exposed.iter().find(|e| e.id == agent)
    }

    pub(crate) fn peer(&self, name: &str) -> Option<&Peer> {
        self.peers.iter().find(|p| p.name == name)
    }

    /// The peer whose token this is (every peer's hash is compared, in constant time each).
    fn peer_of(&self, token: &str) -> Option<&Peer> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for peer in &self.peers {
            if let Ok(hash) = &peer.token
                && bool::from(hash.ct_eq(&presented))
            {
                found = Some(peer);
            }
        }
        found
    }
}

/// Why a request was refused before any method ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum A2aRefusal {
    /// No token, or one no peer holds.
    Unauthenticated,
    /// The peer may not reach this agent (or it is not exposed).
    Forbidden,
    /// The peer went over its requests per minute; seconds until the next is taken.
    RateLimited(u64),
    /// No exposed agent by that id.
    NotExposed,
    /// At `/a2a/`: bindings.yaml routes the peer to an agent that is not exposed.
    RoutedNotExposed { agent: String, matched_by: String },
    /// The inbound policy (`channels.a2a`) refused the peer.
    Gated(A2aGated),
    /// A stream over the peer's or the hub's cap of open streams.
    TooManyStreams(StreamCap),
}

/// The A2A server's HTTP routes, merged into the controller's server: the cards and the
/// JSON-RPC binding (`http.rs`), the HTTP+JSON binding (`rest.rs`).
pub(crate) fn router(a2a: Arc<A2a>) -> axum::Router {
    http::routes()
        .merge(rest::routes())
        .with_state(a2a.clone())
        .merge(grpc::router(a2a))
}

/// A JSON-RPC error (A2A's codes, a2a.md).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
    /// A `google.rpc.ErrorInfo` of deepcli's own (domain `deepcli`) on an error that has no
    /// A2A reason: which limit a `-32602` is about, and its figures.
    pub info: Option<ErrorInfo>,
}

/// An `ErrorInfo`'s reason and metadata (string values, as `google.rpc.ErrorInfo` has them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ErrorInfo {
    pub reason: &'static str,
    pub metadata: Vec<(&'static str, String)>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            info: None,
        }
    }
    /// This error with an `ErrorInfo` of deepcli's (`reason`, `metadata`).
    pub(crate) fn with_info(
        mut self,
        reason: &'static str,
        metadata: &[(&'static str, String)],
    ) -> RpcError {
        self.info = Some(ErrorInfo {
            reason,
            metadata: metadata.to_vec(),
        });
        self
    }

    /// The `google.rpc.ErrorInfo` details of this error: A2A's reason (domain
    /// `a2a-protocol.org`), else deepcli's own when it has one, else none.
    fn details(&self) -> serde_json::Value {
        let (reason, domain, metadata) = match (self.reason(), &self.info) {
            (Some(reason), _) => (reason, "a2a-protocol.org", serde_json::Map::new()),
            (None, Some(info)) => (
                info.reason,
                "deepcli",
                info.metadata
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.as_str().into()))
                    .collect(),
            ),
            (None, None) => return serde_json::json!([]),
        };
        serde_json::json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": domain,
            "metadata": metadata,
        }])
    }
    pub(crate) fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(-32602, message)
    }
    pub(crate) fn task_not_found(id: &str) -> RpcError {
        RpcError::new(-32001, format!("no task `{id}` (for this peer)"))
    }
    pub(crate) fn internal(message: impl std::fmt::Display) -> RpcError {
        RpcError::new(-32603, format!("internal error: {message}"))
    }

    /// The HTTP status and `google.rpc.Code` name of this error in the HTTP+JSON binding: A2A's
    /// table ("Error Code Mappings") for its own codes, JSON-RPC's by what they mean.
    pub(crate) fn http_status(&self) -> (axum::http::StatusCode, &'static str) {
        use axum::http::StatusCode as S;
        match self.code {
            -32001 => (S::NOT_FOUND, "NOT_FOUND"),
            -32002 | -32003 | -32004 | -32007 | -32008 | -32009 => {
                (S::BAD_REQUEST, "FAILED_PRECONDITION")
            }
            -32005 | -32600 | -32602 | -32700 => (S::BAD_REQUEST, "INVALID_ARGUMENT"),
            -32601 => (S::NOT_FOUND, "NOT_FOUND"),
            _ => (S::INTERNAL_SERVER_ERROR, "INTERNAL"),
        }
    }

    /// The `ErrorInfo` reason of an A2A error (A2A 1.0, "Error handling": its name in
    /// UPPER_SNAKE_CASE without `Error`); `None` for JSON-RPC's own codes.
    pub(crate) fn reason(&self) -> Option<&'static str> {
        Some(match self.code {
            -32001 => "TASK_NOT_FOUND",
            -32002 => "TASK_NOT_CANCELABLE",
            -32003 => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            -32004 => "UNSUPPORTED_OPERATION",
            -32005 => "CONTENT_TYPE_NOT_SUPPORTED",
            -32006 => "INVALID_AGENT_RESPONSE",
            -32007 => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            -32008 => "EXTENSION_SUPPORT_REQUIRED",
            -32009 => "VERSION_NOT_SUPPORTED",
            _ => return None,
        })
    }
}

/// Requests and refusals, for `/v1/status` and `/metrics`.
#[derive(Default)]
pub(crate) struct A2aMetrics {
    pub requests: AtomicU64,
    pub unauthenticated: AtomicU64,
    pub forbidden: AtomicU64,
    pub rate_limited: AtomicU64,
    /// Refused by the inbound policy (`channels.a2a`).
    pub gated: AtomicU64,
    /// Streams refused over a cap (`maxStreams`).
    pub too_many_streams: AtomicU64,
    pub tasks: AtomicU64,
    /// The hub's own time in blocking sends that completed: the request's time in the
    /// controller minus the agent runtime's turn.
    pub send_overhead: crate::hub::OverheadSamples,
}

/// The A2A server: the plan in force, the task store, the Hub it delivers through, the Access
/// layer that routes and gates its peers.
pub(crate) struct A2a {
    hub: Arc<Hub>,
    access: Arc<Access>,
    store: Arc<A2aStore>,
    /// The A2A server's piece of the generation in force.
    plan: crate::snapshot::Snapshot<Arc<A2aPlan>>,
    rates: rate::Rates,
    streams: Arc<StreamSlots>,
    /// The webhooks' deliveries.
    pusher: Arc<push::Pusher>,
    pub metrics: A2aMetrics,
}

/// The caller of a request that passed the door.
#[derive(Debug, Clone)]
pub(crate) struct A2aCaller {
    pub peer: String,
    /// The agent the request is for: the endpoint's, or the one the peer is routed to.
    pub agent: String,
    /// At `/a2a/`: the agent came from the route, so the peer's tasks with any agent are its.
    pub routed: bool,
    /// The base URL the peer called (`http.rs`'s `base_url`): a file too large to go inline
    /// is a URL under it.
    pub base: String,
}

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Endpoint<'a> {
    /// `/a2a/<agentId>/`: the agent is named.
    Agent(&'a str),
    /// `/a2a/`: bindings.yaml routes the peer (channel `a2a`).
    Routed,
}

/// What [`A2a::send`] did with a message: the task, the run that carries the message, and
/// whether it was a retry (a `messageId` the peer sent before: nothing new was started).
#[derive(Debug)]
pub(crate) struct Sent {
    pub task: TaskRecord,
    pub run: String,
    pub retry: bool,
}

/// What ListTasks asks for (`wire::list_query` reads it off the request).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListQuery {
    /// 1 to 100.
    pub page_size: usize,
    /// Only tasks in this state (1.0 spelling).
    pub state: Option<&'static str>,
    pub context_id: Option<String>,
    /// Only tasks before this `pageToken`'s (`updated_us`, task id).
    pub before: Option<(i64, String)>,
    /// How many of each task's latest messages to show (`None`: none).
    pub history: Option<usize>,
    pub artifacts: bool,
}

/// A page of ListTasks: each task with its runs' records.
#[derive(Debug)]
pub(crate) struct TaskPage {
    pub tasks: Vec<(TaskRecord, Vec<RunRecord>)>,
    /// Empty on the last page.
    pub next_page_token: String,
    pub page_size: usize,
    pub total_size: usize,
}

/// What `/v1/status` shows of the A2A server (`ControllerStatus.a2a`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct A2aStatus {
    /// The exposed agents' ids.
    pub exposed: Vec<String>,
    pub peers: Vec<PeerStatus>,
    pub requests: u64,
    pub tasks: u64,
    /// Streams open now.
    pub streams: usize,
    /// `{samples, p50Us, p99Us, maxUs}` of the hub's own time in blocking sends.
    pub send_overhead: crate::hub::OverheadSummary,
    pub refused: RefusedCounts,
}

/// A peer as `/v1/status` shows it: its token `ok`, or why it has none.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PeerStatus {
    pub name: String,
    pub token: String,
}

/// Requests refused at the door, by why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RefusedCounts {
    pub unauthenticated: u64,
    pub forbidden: u64,
    pub rate_limited: u64,
    pub gated: u64,
    pub too_many_streams: u64,
}

/// A message a peer sent, read from its parts.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub message_id: String,
    pub text: String,
    pub context_id: Option<String>,
    pub task_id: Option<String>,
    /// Its file parts (bytes within [`wire::MAX_FILE_BYTES`], or URLs not fetched).
    pub files: Vec<wire::FilePart>,
    /// `configuration.acceptedOutputModes` (`None`: not given).
    pub accepted_output_modes: Option<Vec<String>>,
    pub return_immediately: bool,
    /// `configuration.taskPushNotificationConfig`: a webhook for the task.
    pub push: Option<wire::PushConfigInput>,
}

impl A2a {
    pub(crate) fn open(
        state: &crate::state::StateDir,
        hub: Arc<Hub>,
        access: Arc<Access>,
        plan: crate::snapshot::Snapshot<Arc<A2aPlan>>,
    ) -> Result<Arc<A2a>, crate::state::StateError> {
        let store = Arc::new(A2aStore::open(state)?);
        Ok(Arc::new(A2a {
            hub,
            access,
            pusher: Arc::new(push::Pusher::new(store.clone(), plan.clone())),
            store,
            plan,
            rates: rate::Rates::default(),
            streams: Arc::new(StreamSlots::default()),
            metrics: A2aMetrics::default(),
        }))
    }

    /// Registers the A2A server's metrics (push deliveries) in a scrape's `registry`.
    pub(crate) fn register_metrics(&self, registry: &mut crate::metrics::Registry) {
        self.pusher.register_metrics(registry);
    }

    pub(crate) fn plan(&self) -> Arc<A2aPlan> {
        self.plan.load()
    }

    /// What `/v1/status` shows of the A2A server.
    pub(crate) fn status(&self) -> A2aStatus {
        let plan = self.plan();
        let count = |n: &AtomicU64| n.load(Relaxed);
        A2aStatus {
            exposed: plan.exposed.iter().map(|e| e.id.clone()).collect(),
            peers: plan
                .peers
                .iter()
                .map(|p| PeerStatus {
                    name: p.name.clone(),
                    token: match &p.token {
                        Ok(_) => "ok".to_string(),
                        Err(e) => e.clone(),
                    },
                })
                .collect(),
            requests: count(&self.metrics.requests),
            tasks: count(&self.metrics.tasks),
            streams: self.streams.open(),
            send_overhead: self.metrics.send_overhead.summary(),
            refused: RefusedCounts {
                unauthenticated: count(&self.metrics.unauthenticated),
                forbidden: count(&self.metrics.forbidden),
                rate_limited: count(&self.metrics.rate_limited),
                gated: count(&self.metrics.gated),
                too_many_streams: count(&self.metrics.too_many_streams),
            },
        }
    }

    /// The door: the bearer token names the peer; the inbound policy must let the peer speak;
    /// the endpoint (or the peer's route) names the agent, which must be exposed and in the
    /// peer's `allowAgents`; and the peer must be within its rate. A refused request takes
    /// nothing from the rate.
    pub(crate) async fn admit(
        &self,
        endpoint: Endpoint<'_>,
        bearer: Option<&str>,
    ) -> Result<A2aCaller, A2aRefusal> {
        self.metrics.requests.fetch_add(1, Relaxed);
        let plan = self.plan();
        let Some(peer) = bearer.and_then(|t| plan.peer_of(t)) else {
            self.metrics.unauthenticated.fetch_add(1, Relaxed);
            return Err(A2aRefusal::Unauthenticated);
        };
        // The policy first: a peer it shuts out learns nothing of agents or routes.
        match self.access.a2a_gate(&peer.name).await {
            Ok(None) => {}
            Ok(Some(gated)) => {
                self.metrics.gated.fetch_add(1, Relaxed);
                return Err(A2aRefusal::Gated(gated));
            }
            Err(e) => {
                tracing::warn!(error = %e, peer = %peer.name, "a2a: cannot read the inbound policy's state; the request is refused");
                return Err(A2aRefusal::Gated(A2aGated {
                    reason: "policy-unavailable",
                    rule: "the state database".into(),
                    hint: "try again; the controller's log says what failed",
                    pairing_code: None,
                }));
            }
        }
        let (agent, routed) = match endpoint {
            Endpoint::Agent(agent) => {
                if plan.exposed(agent).is_none() {
                    return Err(A2aRefusal::NotExposed);
                }
                (agent.to_string(), false)
            }
            Endpoint::Routed => {
                let Some(route) = self.access.a2a_route(&peer.name) else {
                    return Err(A2aRefusal::NotExposed);
                };
                if plan.exposed(&route.agent_id).is_none() {
                    self.metrics.forbidden.fetch_add(1, Relaxed);
                    return Err(A2aRefusal::RoutedNotExposed {
                        agent: route.agent_id.to_string(),
                        matched_by: route.matched_by.as_str().to_string(),
                    });
                }
                (route.agent_id.to_string(), true)
            }
        };
        if peer.allow.as_ref().is_some_and(|a| !a.contains(&agent)) {
            self.metrics.forbidden.fetch_add(1, Relaxed);
            return Err(A2aRefusal::Forbidden);
        }
        self.take(peer)?;
        Ok(A2aCaller {
            peer: peer.name.clone(),
            agent,
            routed,
            base: String::new(),
        })
    }

    /// A slot for one more stream of the caller's, within its peer's and the hub's caps.
    pub(crate) fn stream_slot(&self, caller: &A2aCaller) -> Result<StreamSlot, A2aRefusal> {
        let plan = self.plan();
        let per_peer = plan
            .peers
            .iter()
            .find(|p| p.name == caller.peer)
            .map_or(streams::DEFAULT_PER_PEER, |p| p.max_streams);
        self.streams
            .take(&caller.peer, per_peer, plan.max_streams)
            .map_err(|cap| {
                self.metrics.too_many_streams.fetch_add(1, Relaxed);
                A2aRefusal::TooManyStreams(cap)
            })
    }

    fn take(&self, peer: &Peer) -> Result<(), A2aRefusal> {
        self.rates
            .take(&peer.name, peer.per_minute)
            .map_err(|seconds| {
                self.metrics.rate_limited.fetch_add(1, Relaxed);
                A2aRefusal::RateLimited(seconds)
            })
    }

    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&A2aStore) -> Result<T, crate::state::StateError> + Send + 'static,
    ) -> Result<T, RpcError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(RpcError::internal)?
            .map_err(RpcError::internal)
    }

    pub(crate) async fn runs(&self, task: &TaskRecord) -> Result<Vec<RunRecord>, RpcError> {
        let ids: Vec<String> = task.runs.iter().map(|(r, _)| r.clone()).collect();
        let hub = self.hub.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(run) = hub.store().run(&id)? {
                    out.push(run);
                }
            }
            Ok::<_, crate::state::StateError>(out)
        })
        .await
        .map_err(RpcError::internal)?
        .map_err(RpcError::internal)
    }

    /// A task of the caller's, with its runs.
    pub(crate) async fn load(
        &self,
        caller: &A2aCaller,
        task_id: &str,
    ) -> Result<(TaskRecord, Vec<RunRecord>), RpcError> {
        let (peer, id) = (caller.peer.clone(), task_id.to_string());
        let task = self
            .db(move |s| s.task(&peer, &id))
            .await?
            .filter(|t| caller.routed || t.agent_id == caller.agent)
            .ok_or_else(|| RpcError::task_not_found(task_id))?;
        let mut task = task;
        self.fill_files(caller, &mut task).await?;
        let runs = self.runs(&task).await?;
        Ok((task, runs))
    }

    /// Reads the files task `task`'s agent handed to the peer into `task.files`: the bytes of
    /// those within [`wire::MAX_FILE_BYTES`], the URL the peer GETs the others at.
    pub(crate) async fn fill_files(
        &self,
        caller: &A2aCaller,
        task: &mut TaskRecord,
    ) -> Result<(), RpcError> {
        self.fill_files_within(caller, task, wire::MAX_FILE_BYTES as u64)
            .await
    }

    /// [`A2a::fill_files`] with the bytes of files of at most `inline` bytes only.
    async fn fill_files_within(
        &self,
        caller: &A2aCaller,
        task: &mut TaskRecord,
        inline: u64,
    ) -> Result<(), RpcError> {
        let ids = task.runs.iter().map(|(r, _)| r.clone()).collect();
        let files = self
            .hub
            .a2a_files(ids, inline)
            .await
            .map_err(RpcError::internal)?;
        let prefix = if caller.routed {
            format!("{}/a2a-rest", caller.base)
        } else {
            format!("{}/a2a-rest/agents/{}", caller.base, task.agent_id)
        };
        task.files = files
            .into_iter()
            .map(|file| store::OutFile {
                url: format!(
                    "{prefix}/tasks/{}/artifacts/{}/{}",
                    task.task_id,
                    file.run_id,
                    wire::path_escape(&file.name)
                ),
                file,
            })
            .collect();
        Ok(())
    }

    /// Records the state a task is seen in now (ListTasks filters and orders on it).
    pub(crate) async fn note_state(&self, task: &TaskRecord, runs: &[RunRecord]) -> &'static str {
        let (now, _) = wire::task_state(&task.state, runs.last());
        if now != task.state {
            let id = task.task_id.clone();
            let _ = self.db(move |s| s.set_state(&id, now)).await;
            follow(&self.hub, &task.peer, &task.task_id, now, runs.last()).await;
        }
        now
    }

    /// The task a message id of the caller's peer made before: a retry is answered with it
    /// and reaches no agent again.
    async fn retried(
        &self,
        caller: &A2aCaller,
        found: (String, String),
        message_id: &str,
    ) -> Result<Sent, RpcError> {
        let (task_id, run) = found;
        let (peer, id) = (caller.peer.clone(), task_id.clone());
        let task = self
            .db(move |s| s.task(&peer, &id))
            .await?
            .ok_or_else(|| RpcError::task_not_found(&task_id))?;
        if !caller.routed && task.agent_id != caller.agent {
            return Err(RpcError::invalid_params(format!(
                "`messageId` `{message_id}` was sent before, to agent `{}` (task `{task_id}`): a new message needs a new messageId",
                task.agent_id
            )));
        }
        Ok(Sent {
            task,
            run,
            retry: true,
        })
    }

    /// SendMessage: a new task, or the next message of one waiting for input. Returns the
    /// task and its run's id once the message is in the session's queue; the caller keeps
    /// the task's stored state true ([`A2a::watch`], or [`A2a::note_state`] once the run
    /// ended). A `messageId` the peer sent before is a retry: it gets the task that message
    /// made, and reaches no agent again (`Sent::retry`).
    pub(crate) async fn send(
        self: &Arc<Self>,
        caller: &A2aCaller,
        incoming: Incoming,
    ) -> Result<Sent, RpcError> {
        if incoming.text.len() > MAX_TEXT_BYTES {
            return Err(RpcError::invalid_params(format!(
                "the message's text is {} bytes; the limit is {MAX_TEXT_BYTES} bytes",
                incoming.text.len()
            )));
        }
        let (peer, message_id) = (caller.peer.clone(), incoming.message_id.clone());
        if let Some(found) = self.db(move |s| s.message(&peer, &message_id)).await? {
            return self.retried(caller, found, &incoming.message_id).await;
        }
        // A webhook given with the message is checked before the message goes anywhere.
        let push = match &incoming.push {
            Some(input) => Some(self.checked_push(caller, input).await?),
            None => None,
        };
        let limit = self.push_limit(&caller.peer);
        if let Some(task_id) = &incoming.task_id {
            let (task, runs) = self.load(caller, task_id).await?;
            let (now, _) = wire::task_state(&task.state, runs.last());
            if now != state::INPUT_REQUIRED {
                return Err(RpcError::new(
                    -32004,
                    format!(
                        "task `{task_id}` is {now}: only a task waiting for input (TASK_STATE_INPUT_REQUIRED) takes another message"
                    ),
                ));
            }
            if incoming
                .context_id
                .as_ref()
                .is_some_and(|c| *c != task.context_id)
            {
                return Err(RpcError::invalid_params(format!(
                    "task `{task_id}` belongs to contextId `{}`, not the one given",
                    task.context_id
                )));
            }
            if let Some(push) = push {
                self.add_push(push.for_task(&task.task_id), limit).await?;
            }
            if let Some(modes) = incoming.accepted_output_modes.clone() {
                let id = task.task_id.clone();
                self.db(move |s| s.set_output_modes(&id, &modes)).await?;
            }
            let (text, files) = self
                .with_files(&task.agent_id, &task.task_id, incoming.text, incoming.files)
                .await?;
            let run = self
                .hub
                .a2a_run(&caller.peer, &task.agent_id, &task.session_key, text, files)
                .map_err(RpcError::internal)?;
            let (peer, id, r, m) = (
                caller.peer.clone(),
                task.task_id.clone(),
                run.run_id.clone(),
                incoming.message_id.clone(),
            );
            match self
                .db(move |s| s.add_run(&peer, &id, &r, &m, state::SUBMITTED))
                .await?
            {
                Recorded::New | Recorded::PushFull(_) => {}
                Recorded::Taken { task_id, run_id } => {
                    return self
                        .retried(caller, (task_id, run_id), &incoming.message_id)
                        .await;
                }
            }
            let seq = task.runs.len() + 1;
            if let Err(e) = self
                .hub
                .a2a_task_message(
                    &caller.peer,
                    &task.task_id,
                    &task.session_key,
                    seq,
                    &run.run_id,
                )
                .await
            {
                tracing::warn!(task = %task.task_id, error = %e, "a2a: the deepcli task was not told of the message");
            }
            let answer = PeerTaskState::Answered(run.message.clone());
            follow_to(
                &self.hub,
                &task.peer,
                &task.task_id,
                state::SUBMITTED,
                answer,
            )
            .await;
            let run = self.launch(&task, run).await?;
            let id = task.task_id.clone();
            if self.db(move |s| s.has_push(&id)).await? {
                self.follow_push(caller, &task, &run, RunState::Accepted);
            }
            let (task, _) = self.load(caller, task_id).await?;
            return Ok(Sent {
                task,
                run,
                retry: false,
            });
        }
        let context_id = match incoming.context_id {
            Some(c) => {
                check_context_id(&c)?;
                c
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let session_key = format!("agent:{}:a2a:{}:{}", caller.agent, caller.peer, context_id);
        let task_id = uuid::Uuid::new_v4().to_string();
        // Its deepcli task's title comes from the message's first words.
        let opening: String = incoming.text.chars().take(512).collect();
        let (text, files) = self
            .with_files(&caller.agent, &task_id, incoming.text, incoming.files)
            .await?;
        let run = self
            .hub
            .a2a_run(&caller.peer, &caller.agent, &session_key, text, files)
            .map_err(RpcError::internal)?;
        let task = TaskRecord {
            task_id,
            peer: caller.peer.clone(),
            agent_id: caller.agent.clone(),
            context_id,
            session_key,
            state: state::SUBMITTED.to_string(),
            created_at: crate::clock::now(),
            updated_us: 0,
            runs: vec![(run.run_id.clone(), incoming.message_id.clone())],
            output_modes: incoming.accepted_output_modes.clone(),
            files: Vec::new(),
        };
        let push = push.map(|p| p.for_task(&task.task_id));
        {
            let (task, push) = (task.clone(), push.clone());
            match self
                .db(move |s| s.insert_with_push(&task, push.as_ref().map(|p| (p, limit))))
                .await?
            {
                Recorded::New => {}
                Recorded::Taken { task_id, run_id } => {
                    return self
                        .retried(caller, (task_id, run_id), &incoming.message_id)
                        .await;
                }
                Recorded::PushFull(limit) => return Err(push_full(limit)),
            }
        }
        // The deepcli task of it (tasks.md): made before the message runs, so that all the
        // agent does in it is the task's.
        if let Err(e) = self
            .hub
            .a2a_task_opened(
                &caller.peer,
                &caller.agent,
                &task.task_id,
                &task.session_key,
                &opening,
                &run.run_id,
            )
            .await
        {
            tracing::warn!(task = %task.task_id, error = %e, "a2a: no deepcli task was made for it");
        }
        let run = self.launch(&task, run).await?;
        if push.is_some() {
            self.follow_push(caller, &task, &run, RunState::Accepted);
        }
        self.metrics.tasks.fetch_add(1, Relaxed);
        Ok(Sent {
            task,
            run,
            retry: false,
        })
    }

    /// The message's text with a line for each file the peer sent: its bytes written into the
    /// agent's workspace first (`.deepcli/a2a/<task>/<name>`, read-only), a URL named as a
    /// reference the hub did not fetch; and the files written, for the prompt's content blocks.
    async fn with_files(
        &self,
        agent: &str,
        task_id: &str,
        mut text: String,
        files: Vec<wire::FilePart>,
    ) -> Result<(String, Vec<RunFile>), RpcError> {
        if files.is_empty() {
            return Ok((text, Vec::new()));
        }
        let mut lines = Vec::with_capacity(files.len());
        let mut sent = Vec::new();
        for file in files {
            match file.content {
                wire::FileContent::Bytes(bytes) => {
                    sent.push((file.name, bytes));
                    lines.push(Err(file.media_type));
                }
                wire::FileContent::Url(url) => lines.push(Ok(format!(
                    "[file reference from the peer, not fetched by deepcli] {url} ({}{})",
                    file.name.map(|n| format!("`{n}`, ")).unwrap_or_default(),
                    file.media_type.as_deref().unwrap_or("no media type")
                ))),
            }
        }
        let mut received = self
            .hub
            .a2a_receive(agent, task_id, sent)
            .await
            .map_err(RpcError::internal)?
            .into_iter();
        let mut written = Vec::new();
        for line in lines {
            let line = match line {
                Ok(line) => line,
                Err(media_type) => {
                    let Some(r) = received.next() else { break };
                    let line = format!(
                        "[file from the peer] {} ({}, {} bytes, sha256 {})",
                        r.path.display(),
                        media_type.as_deref().unwrap_or("no media type"),
                        r.size,
                        r.sha256
                    );
                    written.push(RunFile {
                        name: r
                            .path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        path: r.path.to_string_lossy().into_owned(),
                        media_type,
                        size: r.size,
                        sha256: r.sha256,
                    });
                    line
                }
            };
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&line);
        }
        Ok((text, written))
    }

    /// Starts the run a task's row already names. A run the Hub did not take leaves the task
    /// failed, with the reason: the task is on record, its message reached nobody.
    async fn launch(&self, task: &TaskRecord, run: RunRecord) -> Result<String, RpcError> {
        match self.hub.a2a_launch(run).await {
            Ok(run) => Ok(run),
            Err(e) => {
                let id = task.task_id.clone();
                let _ = self.db(move |s| s.set_state(&id, state::FAILED)).await;
                let why = PeerTaskState::Failed(e.to_string());
                follow_to(&self.hub, &task.peer, &task.task_id, state::FAILED, why).await;
                Err(RpcError::internal(e))
            }
        }
    }

    /// Keeps the task's stored state true when its run ends, whoever is listening. (A blocking
    /// send whose run ended while it waited records the state itself.)
    pub(crate) fn watch(&self, task: &TaskRecord, run_id: String) {
        let hub = self.hub.clone();
        let store = self.store.clone();
        let (task_id, peer) = (task.task_id.clone(), task.peer.clone());
        tokio::spawn(async move {
            loop {
                let Ok(run) = hub.a2a_wait(&run_id, Duration::from_secs(3600)).await else {
                    return;
                };
                if run.state.is_final() {
                    let (now, _) = wire::run_state(&run);
                    let id = task_id.clone();
                    let _ = tokio::task::spawn_blocking(move || store.set_state(&id, now)).await;
                    follow(&hub, &peer, &task_id, now, Some(&run)).await;
                    return;
                }
            }
        });
    }

    /// Waits until run `run_id` leaves `seen` (or ends), at most `timeout`; its record then.
    pub(crate) async fn next_state(
        &self,
        run_id: &str,
        seen: crate::state::RunState,
        timeout: Duration,
    ) -> Result<RunRecord, RpcError> {
        let until = Instant::now() + timeout;
        let mut steps = poll_steps();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let step = steps.next().unwrap_or(POLL_STEP_MAX);
            let run = self
                .hub
                .a2a_wait(run_id, step.min(left))
                .await
                .map_err(RpcError::internal)?;
            if run.state != seen || run.state.is_final() || left.is_zero() {
                return Ok(run);
            }
        }
    }

    /// GetTask: the task and its runs' records (its state noted).
    pub(crate) async fn get(
        &self,
        caller: &A2aCaller,
        task_id: &str,
    ) -> Result<(TaskRecord, Vec<RunRecord>), RpcError> {
        let (task, runs) = self.load(caller, task_id).await?;
        self.note_state(&task, &runs).await;
        Ok((task, runs))
    }

    /// ListTasks: the caller's tasks with its agent (at `/a2a/`: with every agent), newest
    /// first, a page of them with their runs' records.
    pub(crate) async fn list(
        &self,
        caller: &A2aCaller,
        query: &ListQuery,
    ) -> Result<TaskPage, RpcError> {
        let page_size = query.page_size;
        let filter = TaskFilter {
            peer: caller.peer.clone(),
            agent: (!caller.routed).then(|| caller.agent.clone()),
            context_id: query.context_id.clone(),
            state: query.state.map(str::to_string),
            before: query.before.clone(),
            limit: page_size + 1,
        };
        let (mut tasks, total) = self.db(move |s| s.list(&filter)).await?;
        let more = tasks.len() > page_size;
        tasks.truncate(page_size);
        let next_page_token = if more {
            tasks
                .last()
                .map(|t| format!("{}.{}", t.updated_us, t.task_id))
                .unwrap_or_default()
        } else {
            String::new()
        };
        let mut out = Vec::with_capacity(tasks.len());
        for mut task in tasks {
            // A page holds up to 100 tasks: their files are URLs, never bytes inline.
            if query.artifacts {
                self.fill_files_within(caller, &mut task, 0).await?;
            }
            let runs = self.runs(&task).await?;
            out.push((task, runs));
        }
        Ok(TaskPage {
            tasks: out,
            next_page_token,
            page_size,
            total_size: total,
        })
    }

    /// CancelTask: a task waiting for input is canceled here; a working one's run is cancelled
    /// in its runtime (`canceled` only when the runtime confirmed it).
    pub(crate) async fn cancel(
        &self,
        caller: &A2aCaller,
        task_id: &str,
    ) -> Result<(TaskRecord, Vec<RunRecord>), RpcError> {
        let (task, runs) = self.load(caller, task_id).await?;
        let (now, _) = wire::task_state(&task.state, runs.last());
        if state::is_terminal(now) {
            return Err(RpcError::new(
                -32002,
                format!("task `{task_id}` is {now}: it cannot be canceled"),
            ));
        }
        if now == state::INPUT_REQUIRED {
            let id = task.task_id.clone();
            self.db(move |s| s.set_state(&id, state::CANCELED)).await?;
            follow(&self.hub, &task.peer, &task.task_id, state::CANCELED, None).await;
            // No run changes state: the webhooks are told here.
            let id = task.task_id.clone();
            if self.db(move |s| s.has_push(&id)).await? {
                let status = Wire::V1.status(
                    &task.task_id,
                    &task.context_id,
                    state::CANCELED,
                    false,
                    None,
                );
                let event = Wire::V1.status_event(&task.task_id, &task.context_id, status, true);
                self.pusher.enqueue(
                    &task.task_id,
                    push::Notice {
                        body: event.to_string(),
                        what: format!("statusUpdate {}", state::CANCELED),
                    },
                );
            }
        } else if let Some(run) = runs.last() {
            self.hub
                .a2a_cancel(&run.run_id)
                .await
                .map_err(RpcError::internal)?;
        }
        let (task, runs) = self.load(caller, task_id).await?;
        self.note_state(&task, &runs).await;
        Ok((task, runs))
    }
}

/// A push config over the peer's limit.
fn push_full(limit: usize) -> RpcError {
    RpcError::invalid_params(format!(
        "this peer holds {limit} push notification configs on its unfinished tasks, its limit (channels.yaml `a2a.peers.<name>.maxPushConfigs`): delete one (DeleteTaskPushNotificationConfig) first"
    ))
}

/// A webhook that passed the checks, for a task to be named.
#[derive(Debug, Clone)]
struct CheckedPush {
    input: wire::PushConfigInput,
    peer: String,
}

impl CheckedPush {
    fn for_task(self, task_id: &str) -> PushRecord {
        PushRecord {
            task_id: task_id.to_string(),
            config_id: self
                .input
                .id
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            peer: self.peer,
            url: self.input.url,
            token: self.input.token,
            auth: self.input.auth,
            created_at: crate::clock::now(),
        }
    }
}

impl A2a {
    fn push_limit(&self, peer: &str) -> usize {
        self.plan()
            .peer(peer)
            .map_or(DEFAULT_MAX_PUSH_CONFIGS, |p| p.max_push_configs)
    }

    /// `input`'s webhook checked against the SSRF rules (`-32602` saying why, and the key that
    /// allows it).
    async fn checked_push(
        &self,
        caller: &A2aCaller,
        input: &wire::PushConfigInput,
    ) -> Result<CheckedPush, RpcError> {
        let allow = self.plan().allow_private_targets;
        push::check(&input.url, allow)
            .await
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        Ok(CheckedPush {
            input: input.clone(),
            peer: caller.peer.clone(),
        })
    }

    async fn add_push(&self, push: PushRecord, limit: usize) -> Result<PushRecord, RpcError> {
        let stored = push.clone();
        match self.db(move |s| s.add_push(&push, limit)).await? {
            PushAdded::Added | PushAdded::Replaced => Ok(stored),
            PushAdded::Full(limit) => Err(push_full(limit)),
        }
    }

    /// Follows run `run_id` of `task` from state `seen` on, queueing each update for the
    /// task's webhooks: each state it enters, and when it ends the artifact and the task's
    /// final status. One follower per run; off the request's path.
    fn follow_push(
        self: &Arc<Self>,
        caller: &A2aCaller,
        task: &TaskRecord,
        run_id: &str,
        mut seen: crate::state::RunState,
    ) {
        if !self.pusher.follow(run_id) {
            return;
        }
        let (a2a, peer, caller) = (self.clone(), caller.peer.clone(), caller.clone());
        let (task_id, context_id, run_id) = (
            task.task_id.clone(),
            task.context_id.clone(),
            run_id.to_string(),
        );
        tokio::spawn(async move {
            let notice = |event: serde_json::Value, what: String| push::Notice {
                body: event.to_string(),
                what,
            };
            loop {
                let Ok(run) = a2a
                    .next_state(&run_id, seen, Duration::from_secs(3600))
                    .await
                else {
                    break;
                };
                if run.state == seen && !run.state.is_final() {
                    continue;
                }
                seen = run.state;
                let (now, unknown) = wire::run_state(&run);
                if !run.state.is_final() {
                    if now != state::SUBMITTED {
                        let status =
                            Wire::V1.status(&task_id, &context_id, now, unknown, Some(&run));
                        let event = Wire::V1.status_event(&task_id, &context_id, status, false);
                        a2a.pusher
                            .enqueue(&task_id, notice(event, format!("statusUpdate {now}")));
                    }
                    continue;
                }
                // Final: the artifact, then the task's status (from the task, which knows a
                // cancel).
                let (p, id) = (peer.clone(), task_id.clone());
                let Ok(Some(mut task)) = a2a.db(move |s| s.task(&p, &id)).await else {
                    break;
                };
                if a2a.fill_files(&caller, &mut task).await.is_err() {
                    break;
                }
                let Ok(runs) = a2a.runs(&task).await else {
                    break;
                };
                let final_state = a2a.note_state(&task, &runs).await;
                if final_state == state::COMPLETED
                    && let Some(reply) = &run.reply
                {
                    let artifact = Wire::V1.artifact(&format!("{task_id}-reply"), reply);
                    let event = Wire::V1.artifact_event(&task_id, &context_id, artifact);
                    a2a.pusher
                        .enqueue(&task_id, notice(event, "artifactUpdate".to_string()));
                }
                for artifact in Wire::V1.file_artifacts(&task, Some(&run.run_id)) {
                    let event = Wire::V1.artifact_event(&task_id, &context_id, artifact);
                    a2a.pusher
                        .enqueue(&task_id, notice(event, "artifactUpdate".to_string()));
                }
                let (st, unknown) = wire::task_state(&task.state, runs.last());
                let status = Wire::V1.status(&task_id, &context_id, st, unknown, runs.last());
                let event = Wire::V1.status_event(&task_id, &context_id, status, true);
                a2a.pusher
                    .enqueue(&task_id, notice(event, format!("statusUpdate {st}")));
                break;
            }
            a2a.pusher.unfollow(&run_id);
        });
    }

    /// CreateTaskPushNotificationConfig: a webhook for the caller's task `task_id`, checked
    /// against the SSRF rules and the peer's limit; the task's updates from now on go to it.
    pub(crate) async fn create_push(
        self: &Arc<Self>,
        caller: &A2aCaller,
        task_id: &str,
        input: wire::PushConfigInput,
    ) -> Result<PushRecord, RpcError> {
        let (task, runs) = self.load(caller, task_id).await?;
        let checked = self.checked_push(caller, &input).await?;
        let stored = self
            .add_push(
                checked.for_task(&task.task_id),
                self.push_limit(&caller.peer),
            )
            .await?;
        // A run under way: its next updates go to the webhook.
        if let Some(run) = runs.last()
            && !run.state.is_final()
        {
            self.follow_push(caller, &task, &run.run_id, run.state);
        }
        Ok(stored)
    }

    /// GetTaskPushNotificationConfig: a config of the caller's task (another peer's, or one
    /// of another task, is not found).
    pub(crate) async fn get_push(
        &self,
        caller: &A2aCaller,
        task_id: &str,
        config_id: &str,
    ) -> Result<PushRecord, RpcError> {
        let (task, _) = self.load(caller, task_id).await?;
        let (peer, id, config) = (caller.peer.clone(), task.task_id, config_id.to_string());
        self.db(move |s| s.push_config(&peer, &id, &config))
            .await?
            .ok_or_else(|| {
                RpcError::new(
                    -32001,
                    format!("task `{task_id}` has no push notification config `{config_id}`"),
                )
            })
    }

    /// ListTaskPushNotificationConfigs: the caller's task's configs.
    pub(crate) async fn list_push(
        &self,
        caller: &A2aCaller,
        task_id: &str,
    ) -> Result<Vec<PushRecord>, RpcError> {
        let (task, _) = self.load(caller, task_id).await?;
        let peer = caller.peer.clone();
        self.db(move |s| s.push_configs(Some(&peer), &task.task_id))
            .await
    }

    /// DeleteTaskPushNotificationConfig: idempotent, as the spec asks (a config already gone
    /// is no error); the task must be the caller's.
    pub(crate) async fn delete_push(
        &self,
        caller: &A2aCaller,
        task_id: &str,
        config_id: &str,
    ) -> Result<(), RpcError> {
        let (task, _) = self.load(caller, task_id).await?;
        let (peer, id, config) = (caller.peer.clone(), task.task_id, config_id.to_string());
        self.db(move |s| s.delete_push(&peer, &id, &config))
            .await
            .map(drop)
    }

    /// GetExtendedAgentCard: the caller's endpoint's card with what its peer may reach and its
    /// limits.
    fn extended_card(&self, caller: &A2aCaller, base: &str) -> Result<serde_json::Value, RpcError> {
        let plan = self.plan();
        let peer = plan
            .peer(&caller.peer)
            .ok_or_else(|| RpcError::new(-32007, "this peer has no extended card"))?;
        let agent = if caller.routed {
            None
        } else {
            plan.exposed(&caller.agent)
        };
        Ok(wire::extended_card(
            agent,
            &plan.exposed,
            peer,
            peer.max_push_configs,
            base,
        ))
    }
}

/// The longest single wait while a request watches a run for its next state.
const POLL_STEP_MAX: Duration = Duration::from_millis(250);

/// The waits while a request watches a run: 10 ms, doubling up to [`POLL_STEP_MAX`].
/// Moves the deepcli task of A2A task `task_id` of `peer` to what A2A state `now` maps to,
/// with what the last run `run` said (tasks.md, "Surfaces").
async fn follow(hub: &Hub, peer: &str, task_id: &str, now: &'static str, run: Option<&RunRecord>) {
    let reply = run.and_then(|r| r.reply.as_deref()).unwrap_or("");
    let state = match now {
        state::WORKING => PeerTaskState::Working,
        state::INPUT_REQUIRED => PeerTaskState::InputRequired(wire::asks_back(reply).0),
        state::COMPLETED => PeerTaskState::Completed(reply.to_string()),
        state::FAILED => PeerTaskState::Failed(
            run.and_then(|r| r.error.clone())
                .unwrap_or_else(|| "the agent's turn failed".to_string()),
        ),
        state::CANCELED => PeerTaskState::Canceled,
        state::REJECTED => PeerTaskState::Rejected,
        _ => PeerTaskState::Submitted,
    };
    follow_to(hub, peer, task_id, now, state).await;
}

async fn follow_to(hub: &Hub, peer: &str, task_id: &str, raw: &str, state: PeerTaskState) {
    if let Err(e) = hub.a2a_task_state(peer, task_id, raw, state).await {
        tracing::warn!(task = %task_id, error = %e, "a2a: the deepcli task was not moved");
    }
}

fn poll_steps() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(10))
        .with_factor(2.0)
        .with_max_delay(POLL_STEP_MAX)
        .without_max_times()
        .build()
}

/// A `contextId` this server takes: it becomes part of a session key.
fn check_context_id(c: &str) -> Result<(), RpcError> {
    let ok = !c.is_empty()
        && c.len() <= MAX_CONTEXT_ID
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "`contextId` must be 1 to {MAX_CONTEXT_ID} characters of letters, digits, `-`, `_` and `.`; leave it out and the server makes one"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within float rounding (backon multiplies in `f32`): a nanosecond is nothing to a timer.
    fn ms(d: Duration) -> u128 {
        (d + Duration::from_micros(1)).as_millis()
    }

    #[test]
    fn a_watched_run_is_polled_at_10ms_doubling_to_250ms() {
        let steps: Vec<u128> = poll_steps().take(8).map(ms).collect();
        assert_eq!(steps, [10, 20, 40, 80, 160, 250, 250, 250]);
    }

    #[test]
    fn each_a2a_error_code_has_its_own_reason_and_json_rpcs_have_none() {
        let reasons: Vec<&str> = (-32009..=-32001)
            .map(|code| RpcError::new(code, "x").reason().expect("an A2A code"))
            .collect();
        let mut distinct = reasons.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 9, "{reasons:?}");
        assert!(
            reasons
                .iter()
                .all(|r| r.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        );
        for code in [-32700, -32600, -32601, -32602, -32603, -32000, -32010] {
            assert_eq!(RpcError::new(code, "x").reason(), None, "{code}");
        }
    }
}
