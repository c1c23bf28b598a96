//! Approvals (approvals.md): what an agent asks a person for. A runtime's ACP
//! `session/request_permission` and an agent's `management_request` become a pending approval in
//! the state database; a mode or an `allow_always` rule may answer it at once; otherwise the
//! operator (`deepcli approvals`, `GET /v1/approvals`, JSON-RPC `approvals/*`) or, where the
//! agent's `route` allows, an approver in the originating chat decides, before it expires.
//!
//! Below the controller, above Access, the Hub and the runtimes, which know it only as the
//! other end of channels the composition root makes before any of them ([`Asks`]): the
//! runtimes' permission requests, the turn engine's ended turns and closing sessions, the
//! Access layer's chat commands and the Hub's management requests. It writes no config itself:
//! an approved management request runs through the [`ManagementExecutor`] it is built with,
//! the operator's management service.
//!
//! * `policy.rs` — `permissions` with defaults, modes, rules, options, the content hash. Pure.
//! * `service.rs` — asking, waiting, deciding, voiding, expiring.
//! * `preview.rs` — what a management request would change (its dry run's diff) and touches.
//! * `operator.rs` — the operator's methods (`approvals/list|show|approve|deny|rules|revoke`).

mod operator;
pub(crate) mod policy;
pub(crate) mod preview;
mod service;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::access::Access;
use crate::hub::Hub;
use crate::runtime::AcpMap;
use crate::snapshot::Snapshot;
use crate::state::approvals::ApprovalStore;
use crate::state::{StateDir, StateError};
pub(crate) use operator::{
    ApprovalAnswer, ApprovalRequest, DecideParams, IdParams, ListParams, RevokeParams, RulesParams,
};
pub(crate) use policy::Policy;

/// How long `management_request` waits for a decision before it answers `pending` (the
/// agent's MCP client gives up on a call after a minute or so); the approval itself stays
/// pending until `timeoutSeconds`.
pub(crate) const MANAGEMENT_WAIT: std::time::Duration = std::time::Duration::from_secs(45);

/// Runs an approved management request exactly as the operator's JSON-RPC would (validated,
/// atomic, lossless): the controller's management service. Blocking.
pub(crate) trait ManagementExecutor: Send + Sync {
    /// `method` without its prefix (`agents/create`); the result, or the JSON-RPC error object.
    fn execute(&self, method: &str, params: Value) -> Result<Value, Value>;
}

/// What went wrong with an operator's (or an approver's) call. The HTTP status and the
/// JSON-RPC code are chosen where the call came in.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ApprovalError {
    #[error("no approval `{0}`; `deepcli approvals list --all` shows them")]
    NotFound(String),
    #[error("approval `{id}` is {state} already{by}", by = by.as_ref().map_or(String::new(), |b| format!(" (by {b})")))]
    NotPending {
        id: String,
        state: crate::state::ApprovalState,
        by: Option<String>,
    },
    #[error("approval `{id}` is void: {why}")]
    Voided { id: String, why: String },
    #[error("{0}")]
    Refused(String),
    #[error("no live rule `{0}`; `deepcli approvals rules` lists them")]
    NoRule(String),
    #[error("{0}")]
    Params(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StateError> for ApprovalError {
    fn from(e: StateError) -> ApprovalError {
        ApprovalError::Internal(e.to_string())
    }
}

/// What a waiting request is told.
#[derive(Debug, Clone, PartialEq)]
struct Verdict {
    allow: bool,
    always: bool,
    /// The management request's result (approved and run).
    result: Option<Value>,
    /// The turn was cancelled: ACP's `cancelled` outcome rather than a reject option.
    cancelled: bool,
}

/// A request waiting in this process for its decision.
struct Waiter {
    tx: oneshot::Sender<Verdict>,
    session_key: Option<String>,
    source: crate::state::ApprovalSource,
    /// When it began waiting: a turn that ended after withdraws it, not one that ended before.
    since: std::time::Instant,
}

/// Each agent's `permissions`, by agent id: the approvals' piece of the generation in force.
pub(crate) type Policies = HashMap<String, Policy>;

/// The receiving ends of what the other layers ask of the approvals, made by the composition
/// root before any of them; the approvals serve them from [`Approvals::new`] on.
pub(crate) struct Asks {
    /// The runtimes' `session/request_permission`s.
    pub permissions: mpsc::UnboundedReceiver<crate::runtime::acp::PermissionAsk>,
    /// The turn engine's ended turns and closing sessions.
    pub turns: mpsc::UnboundedReceiver<crate::sessions::TurnEvent>,
    /// The Access layer's chat commands (`/approve`, `/deny`).
    pub commands: mpsc::UnboundedReceiver<crate::access::ApprovalAsk>,
    /// The Hub's `management_request`s.
    pub management: mpsc::UnboundedReceiver<crate::hub::ManagementAsk>,
}

pub(crate) struct Approvals {
    store: Arc<ApprovalStore>,
    access: Arc<Access>,
    hub: Arc<Hub>,
    acp: AcpMap,
    policies: Snapshot<Arc<Policies>>,
    waiting: Mutex<HashMap<String, Waiter>>,
    executor: Arc<dyn ManagementExecutor>,
}

impl Approvals {
    /// The approvals of a controller on `state`. What the last controller left pending is void
    /// (the requests died with its runtimes and tool calls). From now on it serves `asks` (on
    /// tasks of their own, as long as it lives); approved management requests run through
    /// `executor`; `policies` are the agents' `permissions` in force.
    pub(crate) fn new(
        state: &StateDir,
        (access, hub, acp): (Arc<Access>, Arc<Hub>, AcpMap),
        policies: Snapshot<Arc<Policies>>,
        executor: Arc<dyn ManagementExecutor>,
        asks: Asks,
    ) -> Result<Arc<Approvals>, StateError> {
        let store = ApprovalStore::open(state)?;
        for left in store.pending()? {
            store.decide(
                &left.id,
                crate::state::ApprovalState::Void,
                "deepcli",
                None,
                "the controller restarted: the request died with the runtime or tool call that made it",
            )?;
        }
        let approvals = Arc::new(Approvals {
            store: Arc::new(store),
            access,
            hub,
            acp,
            policies,
            waiting: Mutex::default(),
            executor,
        });
        service::serve(&approvals, asks);
        Ok(approvals)
    }

    fn policy(&self, agent_id: &str) -> Policy {
        self.policies
            .load()
            .get(agent_id)
            .cloned()
            .unwrap_or_else(|| Policy::of(None))
    }

    /// `id` is waited on in this process.
    fn waiter(&self, id: &str) -> Option<Waiter> {
        self.waiting.lock().ok()?.remove(id)
    }

    fn has_waiter(&self, id: &str) -> bool {
        self.waiting.lock().is_ok_and(|w| w.contains_key(id))
    }

    async fn db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ApprovalStore) -> Result<T, StateError> + Send + 'static,
    ) -> Result<T, ApprovalError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| ApprovalError::Internal(e.to_string()))?
            .map_err(ApprovalError::from)
    }
}
