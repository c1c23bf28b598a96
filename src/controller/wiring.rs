//! The composition root of `deepcli up`: every serving part is built here, once, in dependency
//! order, and given what it needs in its constructor — stores → the Hub's tokens → the turn
//! engine (inside the Access layer: the runtime maps, the Hub's MCP servers, the remote map) →
//! Access → Hub → A2A → adapters → the live status → approvals. No constructor changes another
//! object, and nothing is set after construction.
//!
//! Where two parts really need each other (a runtime's permission request and the approvals,
//! the turn engine's ended turns, a chat's `/approve`, the Hub's `management_request`), the
//! lower part gets the sending end of a channel made first and the approvals serve the
//! receiving end: messages, not doors set later, so a missing wire is a compile error.
//!
//! What each part reads of the applied config is one [`Generation`], compiled once per apply
//! and published with one store; each part reads only its piece (a [`Snapshot`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;

use super::{ControllerError, ControllerOptions, ControllerStatus, FileEvents, Live, Shared};
use crate::a2a::{A2a, A2aPlan};
use crate::access::store::AccessStore;
use crate::access::{Access, AccessPlan, ApprovalAsks, Hosted, Served};
use crate::adapters::Adapters;
use crate::approvals::{Approvals, Asks, Policies};
use crate::hub::{Hub, HubCore, HubPolicy, ManagementAsks};
use crate::runtime::acp::PermissionAsks;
use crate::runtime::{RuntimeSpec, RuntimeStatus, Supervisor};
use crate::sessions::system::SystemSpec;
use crate::sessions::{Runtimes, TurnEvents};
use crate::snapshot::Snapshot;
use crate::state::StateDir;

/// The timings of the serving parts: the defaults in production; the tests shorten them
/// through the environment, which [`Timings::from_env`] reads, once, at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timings {
    /// Supervision: backoff, stop ladder, a remote's card check.
    pub runtime: crate::runtime::Timings,
    /// How long a cancelled turn has to confirm before its Hub run is `uncertain`.
    pub hub_cancel_grace: Duration,
    /// The platform adapters' reconnect backoff and long poll.
    pub adapters: crate::adapters::Timings,
    /// How often `state.retention` is applied (the first time a minute after start).
    pub prune_every: Duration,
}

impl Default for Timings {
    fn default() -> Timings {
        Timings {
            runtime: crate::runtime::Timings::default(),
            hub_cancel_grace: crate::hub::CANCEL_GRACE,
            adapters: crate::adapters::Timings::default(),
            prune_every: PRUNE_EVERY,
        }
    }
}

/// How often the controller applies `state.retention`.
pub(crate) const PRUNE_EVERY: Duration = Duration::from_secs(3600);

impl Timings {
    /// The timings the environment sets: `DEEPCLI_HUB_CANCEL_GRACE_MS` (milliseconds) and,
    /// built with the `failpoints` feature, `DEEPCLI_FAILPOINT_RUNTIME_MS` and
    /// `DEEPCLI_FAILPOINT_ADAPTER` (lists of `name=value`).
    pub(crate) fn from_env() -> Timings {
        Timings::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Timings {
        let mut timings = Timings::default();
        if let Some(ms) = var("DEEPCLI_HUB_CANCEL_GRACE_MS").and_then(|ms| ms.parse().ok()) {
            timings.hub_cancel_grace = Duration::from_millis(ms);
        }
        #[cfg(feature = "failpoints")]
        {
            if let Some(list) = var("DEEPCLI_FAILPOINT_RUNTIME_MS") {
                timings.runtime = timings.runtime.overridden(&list);
            }
            if let Some(list) = var("DEEPCLI_FAILPOINT_ADAPTER") {
                timings.adapters = timings.adapters.overridden(&list);
            }
            if let Some(ms) = var("DEEPCLI_FAILPOINT_PRUNE_MS").and_then(|ms| ms.parse().ok()) {
                timings.prune_every = Duration::from_millis(ms);
            }
        }
        timings
    }
}

/// What the serving parts read of one applied config, compiled once and published whole: a
/// request or a turn never sees one part's piece of a generation beside another's of the next.
#[derive(Default)]
pub(super) struct Generation {
    /// The routing plan (none before the first is in force) and the turn engine's view.
    pub(super) access: Served,
    pub(super) hub: Arc<HubPolicy>,
    pub(super) approvals: Arc<Policies>,
    pub(super) a2a: Arc<A2aPlan>,
    /// `state.retention`, as the state applies it.
    pub(super) retention: crate::state::retention::Rules,
}

/// What an apply hands [`Generation::compile`].
pub(super) struct Applied<'a> {
    pub(super) config: &'a crate::config::Config,
    pub(super) desired: &'a mut crate::plan::Desired,
    pub(super) runtimes: &'a [RuntimeSpec],
    /// The platform adapters the config asks for (`adapters::specs`).
    pub(super) adapters: &'a [crate::adapters::AdapterSpec],
    /// The routing generation in force, if any.
    pub(super) generation: Option<u64>,
}

impl Generation {
    /// The generation `applied` puts in force after `prev`. The routing plan is compiled anew
    /// only when its generation or config changed (it is taken out of `desired` then); the
    /// Hub's policy follows the routing plan in force (none yet: the last one stays).
    pub(super) fn compile(prev: &Generation, applied: Applied<'_>) -> Generation {
        let Applied {
            config,
            desired,
            runtimes,
            adapters,
            generation,
        } = applied;
        let access =
            match generation {
                Some(g)
                    if !prev.access.plan.as_ref().is_some_and(|p| {
                        p.generation == g && p.config_hash == desired.config_hash
                    }) =>
                {
                    let mut plan = AccessPlan::from_config(
                        config,
                        std::mem::take(&mut desired.routing),
                        crate::access::plan::Published {
                            generation: g,
                            content_hash: &desired.routing_hash,
                            config_hash: &desired.config_hash,
                            accounts: &desired.routing_body.accounts,
                        },
                    );
                    plan.adapters = adapters
                        .iter()
                        .filter(|spec| spec.enabled && spec.missing().is_none())
                        .map(crate::adapters::AdapterSpec::key)
                        .collect();
                    let session = &plan.routing.session;
                    let told = HubPolicy::from_config(config, |id| session.main_key(id));
                    plan.systems = config
                        .agents
                        .iter()
                        .filter(|a| a.runtime_kind() == crate::config::model::RuntimeKind::Acp)
                        .map(|a| {
                            let spec = SystemSpec::of(a, told.told(a.id()));
                            (a.id().to_string(), Arc::new(spec))
                        })
                        .collect();
                    Served::new(plan)
                }
                _ => prev.access.clone(),
            };
        let hub = match &access.plan {
            Some(plan) => {
                let session = &plan.routing.session;
                let mut policy = HubPolicy::from_config(config, |id| session.main_key(id));
                for spec in runtimes {
                    if let (Some(socket), Some(agent)) =
                        (spec.hub_socket(), policy.agents.get_mut(&spec.agent_id))
                    {
                        agent.hub_socket = Some(socket);
                    }
                }
                Arc::new(policy)
            }
            None => prev.hub.clone(),
        };
        Generation {
            access,
            hub,
            approvals: Arc::new(crate::approvals::policy::policies(config)),
            a2a: Arc::new(A2aPlan::from_config(config)),
            retention: config
                .state
                .retention
                .map(|r| crate::state::retention::Rules {
                    by_age: r.by_age(),
                    keep_per_session: r.keep_per_session(),
                })
                .unwrap_or_default(),
        }
    }
}

/// Everything `deepcli up` runs, wired.
pub(super) struct Wired {
    pub(super) shared: Arc<Shared>,
    pub(super) supervisor: Supervisor,
    pub(super) heartbeats: super::heartbeat::Heartbeats,
    pub(super) adapters: Adapters,
    /// Where each apply's [`Generation`] is published.
    pub(super) generations: Arc<ArcSwap<Generation>>,
}

/// What [`build`] starts from: the controller's own pieces, made before the state was wired.
pub(super) struct Start<'a> {
    pub(super) options: &'a ControllerOptions,
    pub(super) state: &'a StateDir,
    /// Where the controller listens (the Hub's stdio servers forward there).
    pub(super) addr: SocketAddr,
    /// Where the runtimes' status changes go (the recorder).
    pub(super) runtime_events: mpsc::UnboundedSender<RuntimeStatus>,
    pub(super) status: ControllerStatus,
    pub(super) token: String,
    pub(super) file_events: Arc<FileEvents>,
    /// Where each agent runs, when this controller is one of several replicas.
    pub(super) placement: Option<Arc<crate::access::placement::Placement>>,
}

/// Builds the serving parts in dependency order.
pub(super) fn build(start: Start<'_>) -> Result<Wired, ControllerError> {
    let Start {
        options,
        state,
        addr,
        runtime_events,
        status,
        token,
        file_events,
        placement,
    } = start;
    // The channels of the real cycles, made first; the approvals serve their receivers.
    let (permissions, permission_asks) = PermissionAsks::channel();
    let (turns, turn_events) = TurnEvents::channel();
    let (commands, approval_commands) = ApprovalAsks::channel();
    let (management, management_asks) = ManagementAsks::channel();
    // The one store of what is in force; each part reads its piece.
    let generations = Arc::new(ArcSwap::from_pointee(Generation::default()));

    let supervisor = Supervisor::new(
        runtime_events,
        permissions,
        options.timings.runtime.clone(),
        (addr, options.public_url.clone()),
        crate::runtime::remote_waits::RemoteWaits::open(state)?,
    );
    let heartbeats = super::heartbeat::Heartbeats::new();
    let access_store = AccessStore::open(state)?;
    // Before budgets are counted and before any adapter replays its inbox: a message whose
    // turn the last controller began and never saw end is never prompted again.
    // (With several replicas, each settles the agents it takes over, when it takes them.)
    let settled = match placement {
        None => access_store.settle_begun_turns(None)?,
        Some(_) => 0,
    };
    if settled > 0 {
        tracing::warn!(
            messages = settled,
            "inbound turns the last controller began and did not see end are uncertain (not prompted again)"
        );
    }
    // Session tokens likewise: a replica revokes those of the agents it takes over.
    let hub_core = HubCore::open(
        state,
        addr,
        Snapshot::of(&generations, |g| g.hub.clone()),
        placement.is_none(),
    )?;
    let access = Arc::new(Access::new(
        access_store,
        state,
        Snapshot::of(&generations, |g| g.access.clone()),
        Some(Hosted {
            runtimes: Runtimes {
                acp: supervisor.acp_handle(),
                status: supervisor.status_handle(),
                remotes: supervisor.remote_handle(),
                mcp: hub_core.mcp(),
                turns,
            },
            approvals: commands,
            placement,
        }),
        options.access.clone(),
    ));
    let hub = Hub::new(
        hub_core,
        state,
        access.clone(),
        management,
        options.timings.hub_cancel_grace,
    );
    let a2a = A2a::open(
        state,
        hub.clone(),
        access.clone(),
        Snapshot::of(&generations, |g| g.a2a.clone()),
    )?;
    let adapters = Adapters::new(
        access.clone(),
        crate::adapters::store::AdapterStore::open(state)?,
        options.timings.adapters.clone(),
    );
    let live = Arc::new(Live {
        status: RwLock::new(status),
        access: access.clone(),
        hub: hub.clone(),
        a2a,
        runtimes: supervisor.status_handle(),
        heartbeats: heartbeats.reports(),
        adapters: adapters.cx(),
        remote_push: supervisor.push_hooks(),
    });
    let mut manage = crate::manage::ManageContext::new(&options.config_dir, options.load.clone());
    // Management calls see the live status from here, not over HTTP.
    let seen = live.clone();
    manage.live = Some(Arc::new(move || serde_json::to_value(seen.snapshot()).ok()));
    let approvals = Approvals::new(
        state,
        (access, hub, supervisor.acp_handle()),
        Snapshot::of(&generations, |g| g.approvals.clone()),
        Arc::new(super::Executor(manage.clone())),
        Asks {
            permissions: permission_asks,
            turns: turn_events,
            commands: approval_commands,
            management: management_asks,
        },
    )?;
    let shared = Arc::new(Shared {
        live,
        approvals,
        manage,
        doors: Mutex::default(),
        token,
        file_events,
    });
    Ok(Wired {
        shared,
        supervisor,
        heartbeats,
        adapters,
        generations,
    })
}

/// What changed between two generations that a part acts on besides reading its piece.
pub(super) async fn published(shared: &Shared, prev: &Generation, next: &Generation) {
    if let Some(plan) = &next.access.plan
        && !prev
            .access
            .plan
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, plan))
    {
        tracing::info!(
            generation = plan.generation,
            "access: routing plan in force"
        );
    }
    shared.approvals.policies_changed(&prev.approvals).await;
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn no_environment_is_the_defaults() {
        assert_eq!(Timings::from_vars(vars(&[])), Timings::default());
        assert_eq!(
            Timings::default().runtime.stop_timeout,
            crate::runtime::STOP_TIMEOUT
        );
        assert_eq!(Timings::default().adapters.telegram_poll_seconds, 25);
    }

    #[test]
    fn the_hub_grace_is_read_in_milliseconds() {
        let t = Timings::from_vars(vars(&[("DEEPCLI_HUB_CANCEL_GRACE_MS", "250")]));
        assert_eq!(t.hub_cancel_grace, Duration::from_millis(250));
        let bad = Timings::from_vars(vars(&[("DEEPCLI_HUB_CANCEL_GRACE_MS", "soon")]));
        assert_eq!(bad.hub_cancel_grace, crate::hub::CANCEL_GRACE);
    }

    #[cfg(feature = "failpoints")]
    #[test]
    fn the_failpoint_lists_shorten_only_what_they_name() {
        let t = Timings::from_vars(vars(&[
            (
                "DEEPCLI_FAILPOINT_RUNTIME_MS",
                "backoff_start=50, stop_timeout=300,unknown=1,healthy_after=x",
            ),
            (
                "DEEPCLI_FAILPOINT_ADAPTER",
                "adapter_backoff_ms=20,telegram_poll_s=1",
            ),
        ]));
        let d = Timings::default();
        assert_eq!(t.runtime.backoff_start, Duration::from_millis(50));
        assert_eq!(t.runtime.stop_timeout, Duration::from_millis(300));
        assert_eq!(t.runtime.healthy_after, d.runtime.healthy_after);
        assert_eq!(t.runtime.backoff_max, d.runtime.backoff_max);
        assert_eq!(t.adapters.backoff_start, Duration::from_millis(20));
        assert_eq!(t.adapters.backoff_max, Duration::from_millis(80));
        assert_eq!(t.adapters.telegram_poll_seconds, 1);
    }
}
