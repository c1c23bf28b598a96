//! `deepcli up`: the controller (reconcile.md, "Controller"). One long-lived process that holds
//! the state lease, applies the config, watches the config directory and re-applies on every
//! save, keeps the last good config when an edit is invalid, supervises runtimes, resyncs
//! periodically, and serves its status over HTTP.
//!
//! Reconciles run one at a time on one loop: a change that arrives during one runs right after
//! it. The blocking parts (loading, planning, applying: SQLite and the disk) run on the blocking
//! pool with the state store behind a mutex only this loop takes.

pub(crate) mod client;
pub(crate) mod cluster;
mod doors;
pub(crate) mod heartbeat;
mod http;
mod operator_rpc;
pub(crate) mod status;
mod wiring;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::access::Access;
use crate::apply::{self, Source};
use crate::config::{FileKind, LoadOptions};
use crate::plan::observe::HashCache;
use crate::plan::{Action, Desired, Inputs, Options, Plan, PrepareError, Prepared, Sight, Stages};
use crate::runtime::{RuntimeMap, RuntimeSpec, RuntimeStatus, Supervisor};
use crate::state::{LeasePurpose, StateDir, StateError, StateStore};
use crate::threads;
use crate::trash::Guard;
pub(crate) use status::{ControllerStatus, Health, HealthStatus, Rejection};
pub(crate) use wiring::Timings;

#[derive(Debug, Clone)]
pub(crate) struct ControllerOptions {
    pub config_dir: PathBuf,
    pub load: LoadOptions,
    /// The state: `load.state_dir`, its database there or in PostgreSQL (`--state-url`).
    pub state: StateDir,
    pub listen: SocketAddr,
    /// Where others reach the listener, when not at `listen` (`--public-url`).
    pub public_url: Option<url::Url>,
    pub resync: Duration,
    pub debounce: Duration,
    pub access: crate::access::AccessSettings,
    /// What the operator allowed the plan of the controller's first apply: after it, every
    /// plan is guarded again (an allowance that outlived the plan it was meant for would let a
    /// later bad edit through).
    pub first_apply: FirstApply,
    /// Apply a config directory that holds none of the three files, on start and after.
    pub allow_empty: bool,
    /// The serving parts' timings, resolved once at start-up.
    pub timings: Timings,
    /// This controller as one replica of several on a PostgreSQL state (docs/scale-out.md);
    /// `None` on SQLite: one controller, which runs everything.
    pub cluster: Option<cluster::ClusterOptions>,
}

/// Guards lifted for one apply, as `deepcli up --allow-destroy --allow-mass-delete` asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FirstApply {
    pub allow_destroy: bool,
    pub allow_mass_delete: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ControllerError {
    /// The config directory cannot be watched or read: found before anything is created.
    #[error(transparent)]
    Config(#[from] crate::config::LoadError),
    /// The config directory holds none of the three files, and `--allow-empty` was not given.
    #[error(
        "config directory `{}` has none of agents.yaml, channels.yaml, bindings.yaml; nothing was started",
        .0.display()
    )]
    Empty(PathBuf),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot watch `{}`: {source}", path.display())]
    Watch {
        path: PathBuf,
        source: notify::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the runtime recorder thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot listen for SIGTERM: {0}")]
    Signal(std::io::Error),
    /// Another process runs as this replica (`--replica-id`).
    #[error("{0}")]
    Replica(String),
}

/// What the HTTP handlers and the reconcile loop share: the live parts, the approvals, the
/// management service.
struct Shared {
    live: Arc<Live>,
    /// What agents ask a person for (approvals.md).
    approvals: Arc<crate::approvals::Approvals>,
    /// What `POST /rpc` works on: the config directory this controller watches.
    manage: crate::manage::ManageContext,
    /// The sockets of sandboxes with a network of their own (hub door, egress proxy).
    doors: Mutex<doors::Doors>,
    token: String,
    /// File events on the config files: changes (each starts a reload), and reads (`Access`,
    /// ignored: the controller reads the files itself).
    file_events: Arc<FileEvents>,
}

/// The handlers read the live parts through [`Shared`] as their own.
impl std::ops::Deref for Shared {
    type Target = Live;

    fn deref(&self) -> &Live {
        &self.live
    }
}

/// What the controller's status is made of: its record and the parts it reads live. Built
/// before the approvals and the management service, which read the status through it.
struct Live {
    status: RwLock<ControllerStatus>,
    access: Arc<Access>,
    /// Agents working with agents (hub.md): the MCP door, tools, runs.
    hub: Arc<crate::hub::Hub>,
    /// The hub as an A2A server (a2a.md): cards, JSON-RPC, tasks as Hub runs.
    a2a: Arc<crate::a2a::A2a>,
    /// The supervisor's live runtime statuses, read on every status request.
    runtimes: RuntimeMap,
    /// What each agent's heartbeats did.
    heartbeats: heartbeat::HeartbeatReports,
    /// The platform adapters' live status, and what their HTTP endpoints share.
    adapters: Arc<crate::adapters::AdapterCx>,
    /// The webhooks remote A2A agents that cannot stream push their tasks' updates to.
    remote_push: crate::runtime::a2a::PushHooks,
}

#[derive(Default)]
struct FileEvents {
    changes: std::sync::atomic::AtomicU64,
    ignored: std::sync::atomic::AtomicU64,
}

impl Live {
    /// The status as served: the controller's record plus the runtimes as they are now, and
    /// what a health check makes of both.
    fn snapshot(&self) -> ControllerStatus {
        let mut status = self.status.read().map(|s| s.clone()).unwrap_or_default();
        status.runtimes = self
            .runtimes
            .lock()
            .map(|r| r.values().cloned().collect())
            .unwrap_or_default();
        for runtime in &mut status.runtimes {
            runtime.model = self.access.model_report(&runtime.agent_id);
            let budgeted = self
                .access
                .plan()
                .is_some_and(|p| p.budgets.contains_key(&runtime.agent_id));
            runtime.budgets = budgeted.then(|| self.access.budget_report(&runtime.agent_id));
        }
        status.heartbeats = self
            .heartbeats
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default();
        if let Some(plan) = self.access.plan() {
            for (key, access) in &plan.accounts {
                let (inbound, reason) = match (&access.webhook_secret, access.enabled) {
                    (_, false) => ("disabled", None),
                    (Ok(_), true) => ("open", None),
                    (Err(why), true) => ("closed", Some(why.clone())),
                };
                status
                    .channels
                    .entry(key.channel.clone())
                    .or_default()
                    .accounts
                    .insert(
                        key.account.clone(),
                        status::AccountLive {
                            inbound: inbound.to_string(),
                            reason,
                            adapter: None,
                        },
                    );
            }
        }
        for (key, live) in crate::adapters::snapshot(&self.adapters.live) {
            if let Some(entry) = status
                .channels
                .get_mut(&key.channel)
                .and_then(|c| c.accounts.get_mut(&key.account))
            {
                // `inbound` is the signed `POST /v1/inbound`; this account's messages come
                // through its adapter whatever it says.
                if entry.inbound == "closed"
                    && let Some(why) = &mut entry.reason
                {
                    why.push_str(" (only signed POST /v1/inbound is closed: the platform adapter delivers this account's messages)");
                }
                entry.adapter = Some(live);
            }
        }
        status.hub = Some(self.hub.status());
        status.a2a = Some(self.a2a.status());
        status.health = status.health();
        status
    }
}

/// How long a shutdown waits for requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

fn is_config_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| FileKind::ALL.iter().any(|k| k.file_name() == n))
}

/// Runs the controller until SIGINT or SIGTERM.
///
/// What can fail without a state is tried before the state is opened (the config directory,
/// the listener, the watch), so a controller that cannot start creates no state directory,
/// `state.db` or operator token.
pub(crate) async fn run(options: ControllerOptions) -> Result<(), ControllerError> {
    // Its memory (every secret the runtimes' env resolves from) is not readable through
    // /proc by a process of its user without ptrace rights; a sandbox hides it besides.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot make the controller non-dumpable");
    }
    if !crate::config::check_dir(&options.config_dir)? && !options.allow_empty {
        return Err(ControllerError::Empty(options.config_dir.clone()));
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| ControllerError::Listen {
            addr: options.listen,
            source,
        })?;
    // Watch the directory, not the files: an editor's rename-over save replaces the inode.
    // Events that arrive before the loop runs wait in the channel.
    let file_events = Arc::new(FileEvents::default());
    let (events_tx, mut events) = mpsc::unbounded_channel::<()>();
    let counted = file_events.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        use std::sync::atomic::Ordering::Relaxed;
        let Ok(event) = event else { return };
        if !event.paths.iter().any(|p| is_config_file(p)) {
            return;
        }
        // Only changes count: inotify also reports opens and reads (`Access`), and the
        // controller reads the files itself on every reconcile.
        if matches!(event.kind, notify::EventKind::Access(_)) {
            counted.ignored.fetch_add(1, Relaxed);
        } else {
            counted.changes.fetch_add(1, Relaxed);
            let _ = events_tx.send(());
        }
    })
    .map_err(|source| ControllerError::Watch {
        path: options.config_dir.clone(),
        source,
    })?;
    watcher
        .watch(&options.config_dir, RecursiveMode::NonRecursive)
        .map_err(|source| ControllerError::Watch {
            path: options.config_dir.clone(),
            source,
        })?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(ControllerError::Signal)?;

    let state = options.state.clone();
    let mut store = StateStore::open(&state)?;
    // One of several replicas takes the lease when it leads (`cluster_round`).
    if options.cluster.is_none() {
        store.acquire_lease(LeasePurpose::Controller, Duration::from_millis(500))?;
    }
    let token = crate::state::operator_token(&state)?;

    // Orphans of runtimes are re-parented here rather than to init, so none is lost.
    if !crate::runtime::adopt_orphans() {
        tracing::debug!("cannot become the child subreaper; orphans of runtimes go to init");
    }
    // (A replica stops what a dead one left of an agent when it takes the agent over.)
    if options.cluster.is_none() {
        stop_leftovers(&store, None).await?;
    }
    // What a controller killed with `kill -9` left of its Landlock runtimes' trees.
    if let Ok(base) = &crate::sandbox::Host::get().cgroup {
        let base = base.clone();
        let swept = tokio::task::spawn_blocking(move || crate::sandbox::cgroup::sweep(&base))
            .await
            .unwrap_or(0);
        if swept > 0 {
            tracing::warn!(
                cgroups = swept,
                "killed what runtimes of a dead controller left"
            );
        }
    }

    let (runtime_tx, runtime_events) = mpsc::unbounded_channel::<RuntimeStatus>();
    let recorder = record_runtimes(&state, runtime_events)?;
    // Dropped when `run` returns: its thread ends with it.
    let _checkpointer = crate::state::Checkpointer::start(&state)?;
    let serial = store.serial()?;
    let addr = listener.local_addr().unwrap_or(options.listen);
    // Advertised at the port the listener got, when it was asked for any (`--listen …:0`).
    let mut options = options;
    if let Some(c) = &mut options.cluster
        && c.advertise.port() == Some(0)
    {
        let _ = c.advertise.set_port(Some(addr.port()));
    }
    let mut placed = match &options.cluster {
        Some(c) => Some(Placed {
            member: Arc::new(Mutex::new(cluster::Member::open(&state, c.clone())?)),
            placement: Arc::new(crate::access::placement::Placement::new(
                &c.id,
                c.token.clone(),
                options.access.prompt_timeout,
            )),
            agents: Default::default(),
            accounts: Default::default(),
            leader: false,
            leased: false,
            lease_waiting: false,
            seen: Vec::new(),
            ttl: c.ttl,
            renewed: std::time::Instant::now(),
            published: None,
        }),
        None => None,
    };
    let wiring::Wired {
        shared,
        mut supervisor,
        mut heartbeats,
        mut adapters,
        generations,
    } = wiring::build(wiring::Start {
        options: &options,
        state: &state,
        addr,
        runtime_events: runtime_tx,
        status: ControllerStatus {
            pid: std::process::id(),
            started_at: crate::clock::now(),
            // Absolute: a management edit made elsewhere compares it with its own directory.
            config_dir: std::path::absolute(&options.config_dir)
                .unwrap_or_else(|_| options.config_dir.clone())
                .display()
                .to_string(),
            state_dir: state.root().display().to_string(),
            serial,
            replica: options.cluster.as_ref().map(|c| c.id.clone()),
            ..ControllerStatus::default()
        },
        token,
        file_events,
        placement: placed.as_ref().map(|p| p.placement.clone()),
    })?;
    let store = Arc::new(Mutex::new(store));
    // The specs of the generation in force, of which a replica runs its share.
    let mut specs = Specs::default();
    record_address(&store, addr);
    tracing::info!(%addr, config = %options.config_dir.display(), "deepcli up");
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(http::serve(listener, shared.clone(), shutdown_rx.clone()));
    // Kept children idle past subagents.keptIdleSeconds are closed (hub.md).
    tokio::spawn(shared.hub.clone().sweep_idle_children(shutdown_rx.clone()));

    let mut resync = tokio::time::interval(options.resync);
    resync.tick().await;
    let mut heartbeat = tokio::time::interval(Duration::from_secs(10));
    // A replica's rounds: three to a claim's time, so one late round loses nothing.
    let mut rounds = tokio::time::interval(
        options
            .cluster
            .as_ref()
            .map_or(Duration::from_secs(3600), |c| c.ttl / 3),
    );
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if let Some(p) = placed.as_mut() {
        let member = p.member.clone();
        tokio::task::spawn_blocking(move || match member.lock() {
            Ok(mut m) => m.wait_for_id(),
            Err(_) => Err("cluster member poisoned".into()),
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
        .map_err(ControllerError::Replica)?;
        // Claims renewed between rounds too: the loop that runs the rounds also applies,
        // and an apply may take longer than a claim's time.
        tokio::spawn(renew_between_rounds(
            p.member.clone(),
            options
                .cluster
                .as_ref()
                .map_or(Duration::from_secs(1), |c| c.ttl / 3),
            shutdown_rx.clone(),
        ));
        // Who leads and what runs here are known before the first reconcile.
        rounds.tick().await;
        cluster_round(
            p,
            (&store, &shared),
            (&mut supervisor, &mut heartbeats, &mut adapters),
            &specs,
        )
        .await;
    }
    // `state.retention`, first a minute after start (or sooner, as the tests ask).
    let prune_every = options.timings.prune_every;
    let mut prune = tokio::time::interval_at(
        tokio::time::Instant::now() + prune_every.min(Duration::from_secs(60)),
        prune_every,
    );
    let mut pending = true;
    // Bootstrap file hashes, kept between reconciles: an unchanged file is not read again.
    let hashes = Arc::new(Mutex::new(HashCache::default()));
    // The reconcile's blocking part, started during the debounce (see `debounce`).
    let mut ahead = None;
    // The guards `--allow-*` lift, until the first apply.
    let mut first_apply = options.first_apply;
    // The runs the last controller left unfinished are reconciled once the first config is
    // in force (their parents are told through the runtimes it starts). A replica reconciles
    // the runs of each agent it takes over, when it takes it.
    let mut runs_reconciled = placed.is_some();
    loop {
        if pending {
            pending = false;
            let applied = reconcile(
                &options,
                (&store, &hashes),
                (&shared, &generations),
                (&mut supervisor, &mut heartbeats, &mut adapters),
                (ahead.take(), first_apply),
                (&mut specs, placed.as_ref()),
            )
            .await;
            if !runs_reconciled && shared.access.plan().is_some() {
                runs_reconciled = true;
                let n = shared.hub.reconcile_unfinished(None).await;
                if n > 0 {
                    tracing::warn!(
                        runs = n,
                        "hub: runs left unfinished by the last controller are uncertain"
                    );
                }
            }
            if applied && first_apply != FirstApply::default() {
                tracing::info!("the first apply is done: every plan is guarded again");
                first_apply = FirstApply::default();
            }
            // A generation whose agents or accounts changed: placed now, not a round later.
            if applied && let Some(p) = placed.as_mut() {
                let names: Vec<String> = specs
                    .agents
                    .iter()
                    .chain(&specs.accounts)
                    .cloned()
                    .collect();
                if p.seen != names {
                    p.seen = names;
                    pending |= cluster_round(
                        p,
                        (&store, &shared),
                        (&mut supervisor, &mut heartbeats, &mut adapters),
                        &specs,
                    )
                    .await;
                }
            }
        }
        tokio::select! {
            Some(()) = events.recv() => {
                ahead = debounce(&mut events, &options, (&store, &hashes), first_apply).await;
                pending = true;
            }
            _ = resync.tick() => pending = true,
            _ = rounds.tick(), if placed.is_some() => {
                if let Some(p) = placed.as_mut() {
                    pending |= cluster_round(
                        p,
                        (&store, &shared),
                        (&mut supervisor, &mut heartbeats, &mut adapters),
                        &specs,
                    )
                    .await;
                }
            }
            _ = prune.tick() => {
                let rules = generations.load().retention.clone();
                // With several replicas, the leader prunes.
                if !rules.is_empty() && placed.as_ref().is_none_or(|p| p.leader) {
                    tokio::spawn(prune_state(options.state.clone(), rules, shared.clone()));
                }
            }
            _ = heartbeat.tick() => {
                let store = store.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Ok(mut s) = store.lock() {
                        let _ = s.renew_lease();
                    }
                    // Orphans of runtimes that died since: not left as zombies.
                    crate::runtime::reap_adopted();
                }).await;
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
        }
    }
    // In-flight requests finish first (their runtimes are still there), new ones are refused;
    // none waits for a person any more.
    let _ = shutdown_tx.send(true);
    shared.approvals.stop().await;
    if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
        tracing::warn!(
            "requests still in flight after {} s; stopping anyway",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    tracing::info!("stopping runtimes");
    adapters.stop_all();
    heartbeats.stop_all();
    supervisor.stop_all().await;
    // Its claims go once what they ran has stopped: the others take them at once.
    if let Some(p) = &placed {
        let member = p.member.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut m) = member.lock() {
                m.leave();
            }
        })
        .await;
    }
    // The last sender goes with the supervisor: the recorder writes what is left and ends.
    drop(supervisor);
    let _ = tokio::task::spawn_blocking(move || recorder.join()).await;
    drop(watcher);
    if let Ok(mut s) = store.lock() {
        let _ = s.release_lease();
    }
    tracing::info!("deepcli up: stopped");
    Ok(())
}

/// Applies `state.retention` on a connection of its own, in batches that leave room to turns
/// (a pause between them); counts what went in the status (and so `/metrics`).
async fn prune_state(dir: StateDir, rules: crate::state::retention::Rules, shared: Arc<Shared>) {
    let done = tokio::task::spawn_blocking(move || {
        let mut store = StateStore::open(&dir)?;
        store.prune(
            &rules,
            crate::clock::timestamp(),
            false,
            PRUNE_PAUSE,
            "controller",
        )
    })
    .await;
    match done {
        Ok(Ok(report)) => {
            if let Ok(mut s) = shared.status.write() {
                for p in &report.pruned {
                    *s.pruned.entry(p.kind.to_string()).or_default() += p.rows;
                }
            }
            let rows: u64 = report.pruned.iter().map(|p| p.rows).sum();
            if rows > 0 {
                tracing::info!(
                    rows,
                    elapsed_ms = report.elapsed_ms,
                    longest_batch_ms = report.longest_batch_ms,
                    wal_wait_ms = report.wal_wait_ms,
                    wal_restarts = report.wal_restarts,
                    longest_restart_ms = report.longest_restart_ms,
                    wal_read_ahead_kb = report.wal_read_ahead_kb,
                    "state.retention: pruned"
                );
            }
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "state.retention: the prune failed"),
        Err(e) => tracing::warn!(error = %e, "state.retention: the prune stopped"),
    }
}

/// The pause between two batches of a prune: a turn waiting to write gets the lock there.
const PRUNE_PAUSE: Duration = Duration::from_millis(10);

/// Stops what a killed controller left running: each runtime it recorded (by pid and start
/// time) with every process it started, side by side; then forgets them.
async fn stop_leftovers(store: &StateStore, agent: Option<&str>) -> Result<(), ControllerError> {
    let stops: Vec<_> = store
        .runtime_processes()?
        .into_iter()
        .filter(|record| agent.is_none_or(|a| a == record.agent_id))
        .map(|record| {
            tokio::spawn(async move {
                let leader = record.pid.map(|pid| crate::runtime::ProcessId {
                    pid,
                    start: record.process_start.clone().unwrap_or_default(),
                });
                let left = crate::runtime::stop_leftover(
                    leader,
                    record.escaped.clone(),
                    crate::runtime::STOP_TIMEOUT,
                )
                .await;
                (record, left)
            })
        })
        .collect();
    for stop in stops {
        let Ok((record, left)) = stop.await else {
            continue;
        };
        match left {
            None => {}
            Some(0) => match record.pid {
                Some(pid) => {
                    tracing::info!(agent = %record.agent_id, pid, "stopped a runtime left by an earlier controller")
                }
                None => {
                    tracing::info!(agent = %record.agent_id, "stopped a runtime left by an earlier controller")
                }
            },
            Some(n) => {
                tracing::warn!(agent = %record.agent_id, processes = n, "a runtime left by an earlier controller outlived SIGKILL; kept on record");
                continue;
            }
        }
        store.forget_runtime_processes(&record.agent_id, left.is_some())?;
    }
    Ok(())
}

fn record_address(store: &Arc<Mutex<StateStore>>, addr: SocketAddr) {
    if let Ok(mut s) = store.lock() {
        // Which controller listens there, so that a client (or a test) that reads the address
        // after a restart can tell it from the last one's.
        let _ = s.transaction(|tx| {
            tx.set_meta(client::ADDR_KEY, &addr.to_string())?;
            tx.set_meta(client::PID_KEY, &std::process::id().to_string())
        });
    }
}

/// Records runtime status changes in the state database as they happen, on a thread with its
/// own connection: a pid must be on record before anything else can go wrong (a controller
/// killed mid-apply leaves its runtimes to the next one, which finds them by pid and start
/// time), so it may not wait for an apply that holds the controller's connection.
fn record_runtimes(
    state: &StateDir,
    mut events: mpsc::UnboundedReceiver<RuntimeStatus>,
) -> Result<std::thread::JoinHandle<()>, ControllerError> {
    let mut store = StateStore::open(state)?;
    let thread = std::thread::Builder::new()
        .name("runtime-recorder".into())
        .spawn(move || {
            while let Some(first) = events.blocking_recv() {
                let mut batch = vec![first];
                while let Ok(next) = events.try_recv() {
                    batch.push(next);
                }
                let written = store.transaction(|tx| {
                    batch
                        .iter()
                        .try_for_each(|status| tx.observe_runtime(&status.observation()))
                });
                if let Err(e) = written {
                    tracing::error!(error = %e, "cannot record runtime status");
                }
            }
        })
        .map_err(ControllerError::Thread)?;
    Ok(thread)
}

/// What one reconcile found, from the blocking part.
enum Found {
    Rejected(Rejection),
    Planned(Box<Planned>),
    Failed(String),
}

/// A plan to apply, and what applying it needs.
struct Planned {
    desired: Desired,
    plan: Plan,
    runtimes: Vec<RuntimeSpec>,
    heartbeats: Vec<heartbeat::HeartbeatSpec>,
    agents: Vec<String>,
    /// The config, for the Access plan once it is applied.
    config: crate::config::Config,
    /// The routing generation published before this reconcile.
    generation: Option<u64>,
    /// The commit of the config directory, for the history.
    git_commit: Option<String>,
}

/// How long file events must pause before [`debounce`] looks ahead.
const LOOK_AHEAD_AFTER: Duration = Duration::from_millis(10);

/// Most look-aheads in one debounce: a file written again and again costs no more.
const LOOK_AHEADS: usize = 2;

/// Lets the events of a save settle: `options.debounce` from the first one, as the
/// reconcile must not read a file an editor is still writing.
///
/// Nothing is applied meanwhile, but the reconcile's blocking part ([`find`], which only reads)
/// starts early: once the events pause for [`LOOK_AHEAD_AFTER`], on the files as they are then.
/// An event after it started means the files may have changed under it, so it is dropped (it
/// runs out on its own) and looked for again, or left to the reconcile. What comes back is a
/// look-ahead that no event followed: the reconcile uses it, so a large config's load and
/// plan take place inside the debounce rather than after it.
async fn debounce(
    events: &mut mpsc::UnboundedReceiver<()>,
    options: &ControllerOptions,
    (store, hashes): (&Arc<Mutex<StateStore>>, &Arc<Mutex<HashCache>>),
    first_apply: FirstApply,
) -> Option<tokio::task::JoinHandle<Found>> {
    use tokio::time::Instant;
    let deadline = Instant::now() + options.debounce;
    let mut ahead = None;
    let mut started = 0;
    loop {
        let wake = match ahead {
            None if started < LOOK_AHEADS => deadline.min(Instant::now() + LOOK_AHEAD_AFTER),
            _ => deadline,
        };
        match tokio::time::timeout_at(wake, events.recv()).await {
            Ok(Some(())) => {
                if ahead.take().is_some() {
                    tracing::debug!("file event during a look-ahead: dropped");
                }
            }
            // The watcher is gone (shutting down): nothing more can arrive.
            Ok(None) => return ahead,
            Err(_) if Instant::now() >= deadline => return ahead,
            Err(_) => {
                started += 1;
                ahead = Some(start_find(options, store, hashes, first_apply));
            }
        }
    }
}

/// Runs [`find`] on the blocking pool, as upkeep ([`threads::as_upkeep`]): a resync of a large
/// config plans on every core, and turns come first.
fn start_find(
    options: &ControllerOptions,
    store: &Arc<Mutex<StateStore>>,
    hashes: &Arc<Mutex<HashCache>>,
    first_apply: FirstApply,
) -> tokio::task::JoinHandle<Found> {
    let options = options.clone();
    let store = store.clone();
    let hashes = hashes.clone();
    tokio::task::spawn_blocking(move || {
        threads::as_upkeep("deepcli-plan", || {
            find(&options, &store, &hashes, first_apply)
        })
    })
}

/// One reconcile: find what to do (or take the look-ahead of the debounce), apply it, serve
/// the new routing plan and converge the runtimes. Whether a plan was applied.
async fn reconcile(
    options: &ControllerOptions,
    (store, hashes): (&Arc<Mutex<StateStore>>, &Arc<Mutex<HashCache>>),
    (shared, generations): (&Arc<Shared>, &Generations),
    (supervisor, heartbeats, adapters): (
        &mut Supervisor,
        &mut heartbeat::Heartbeats,
        &mut crate::adapters::Adapters,
    ),
    (ahead, first_apply): (Option<tokio::task::JoinHandle<Found>>, FirstApply),
    (specs, placed): (&mut Specs, Option<&Placed>),
) -> bool {
    let role = match placed {
        None => Role::Alone,
        Some(p) if p.leader && p.leased => Role::Leader(p.member.clone()),
        Some(p) => match &p.published {
            Some(published) => Role::Follower(published.clone()),
            None => {
                record_error(
                    shared,
                    "waiting for the leader's first apply: a replica that does not lead applies nothing".into(),
                );
                return false;
            }
        },
    };
    let found = ahead
        .unwrap_or_else(|| start_find(options, store, hashes, first_apply))
        .await
        .unwrap_or_else(|e| Found::Failed(format!("reconcile panicked: {e}")));
    match found {
        Found::Failed(error) => record_error(shared, error),
        Found::Rejected(rejection) => record_rejection(shared, rejection),
        // A follower applies nothing, so no plan of its own waits for an operator.
        Found::Planned(planned)
            if !planned.plan.blocked.is_empty() && !matches!(role, Role::Follower(_)) =>
        {
            record_blocked(shared, &planned.plan)
        }
        Found::Planned(planned) => {
            return apply_planned(
                options,
                store,
                (shared, generations),
                (supervisor, heartbeats, adapters),
                *planned,
                (role, specs, placed),
            )
            .await;
        }
    }
    false
}

/// What a reconcile does with its plan.
enum Role {
    /// The only controller: it applies.
    Alone,
    /// The leader of several replicas: it applies and publishes what it applied.
    Leader(Arc<Mutex<cluster::Member>>),
    /// A replica that does not lead: it puts in force the generation the leader published,
    /// when its own files are the ones the leader applied.
    Follower(cluster::Published),
}

/// A replica's part: what it runs and whether it leads.
struct Placed {
    member: Arc<Mutex<cluster::Member>>,
    placement: Arc<crate::access::placement::Placement>,
    agents: std::collections::BTreeSet<String>,
    accounts: std::collections::BTreeSet<String>,
    leader: bool,
    /// It holds the state's lease (a leader applies only with it).
    leased: bool,
    /// It leads, and the lease was held by another at its last try.
    lease_waiting: bool,
    /// The agents and accounts of the generation it last placed.
    seen: Vec<String>,
    /// The claims' time, and when its last round renewed them.
    ttl: Duration,
    renewed: std::time::Instant,
    published: Option<cluster::Published>,
}

/// What the generation in force asks to run, of which a replica runs its share.
#[derive(Default)]
struct Specs {
    /// Every agent and platform account (`<channel>/<account>`) of the generation.
    agents: Vec<String>,
    accounts: Vec<String>,
    runtimes: Vec<RuntimeSpec>,
    heartbeats: Vec<heartbeat::HeartbeatSpec>,
    adapters: Vec<crate::adapters::AdapterSpec>,
}

/// Runs what `specs` asks, of it what this replica holds when there are several.
async fn converge(
    shared: &Shared,
    (supervisor, heartbeats, adapters): (
        &mut Supervisor,
        &mut heartbeat::Heartbeats,
        &mut crate::adapters::Adapters,
    ),
    specs: &Specs,
    placed: Option<&Placed>,
) {
    let runs = |agent: &str| placed.is_none_or(|p| p.agents.contains(agent));
    let runtimes: Vec<RuntimeSpec> = specs
        .runtimes
        .iter()
        .filter(|r| runs(&r.agent_id))
        .cloned()
        .collect();
    if let Ok(mut doors) = shared.doors.lock() {
        doors.converge(&runtimes, &shared.hub);
    }
    supervisor.converge(&runtimes).await;
    let beats = specs
        .heartbeats
        .iter()
        .filter(|b| runs(&b.agent_id))
        .cloned()
        .collect();
    heartbeats.converge(beats, &shared.access);
    // The platform connections start after the routing they deliver by is in force.
    let accounts = specs
        .adapters
        .iter()
        .filter(|a| {
            placed.is_none_or(|p| p.accounts.contains(&format!("{}/{}", a.channel, a.account)))
        })
        .cloned()
        .collect();
    adapters.converge(accounts);
}

/// One round of a replica (`cluster::Member::round`): its placement put in force, what it
/// took over settled and started, what it gives back stopped first. Whether a reconcile is
/// due (it now leads, or the leader published a generation it does not run).
async fn cluster_round(
    placed: &mut Placed,
    (store, shared): (&Arc<Mutex<StateStore>>, &Arc<Shared>),
    parts: (
        &mut Supervisor,
        &mut heartbeat::Heartbeats,
        &mut crate::adapters::Adapters,
    ),
    specs: &Specs,
) -> bool {
    let member = placed.member.clone();
    let (agents, accounts) = (specs.agents.clone(), specs.accounts.clone());
    let round = tokio::task::spawn_blocking(move || {
        let mut member = member
            .lock()
            .map_err(|_| StateError::Corrupt("cluster member poisoned".into()))?;
        member.round(&agents, &accounts)
    })
    .await;
    let round = match round {
        Ok(Ok(round)) => round,
        failed => {
            let error = match failed {
                Ok(Err(e)) => e.to_string(),
                Err(e) => e.to_string(),
                Ok(Ok(_)) => unreachable!(),
            };
            // Past its claims' time without a round, it may no longer hold them: what they
            // ran stops, so that nothing runs on two replicas.
            if placed.renewed.elapsed() >= placed.ttl
                && !(placed.agents.is_empty() && placed.accounts.is_empty())
            {
                tracing::error!(%error, "cluster: no round for a claim's time; stopping what this replica ran");
                placed.agents.clear();
                placed.accounts.clear();
                placed
                    .placement
                    .publish(Default::default(), Default::default());
                converge(shared, parts, specs, Some(placed)).await;
            } else {
                tracing::warn!(%error, "cluster: the round failed; claims not renewed expire");
            }
            return false;
        }
    };
    placed.renewed = std::time::Instant::now();
    placed.placement.publish(
        round.holders.clone(),
        round.accounts.iter().cloned().collect(),
    );
    let mut reconcile = false;
    if round.leader != placed.leader {
        placed.leader = round.leader;
        if round.leader {
            tracing::info!("cluster: this replica leads: it applies the config");
        } else {
            tracing::warn!("cluster: this replica no longer leads: it follows the leader");
            placed.lease_waiting = false;
            if placed.leased {
                placed.leased = false;
                lease(store, false, false).await;
            }
        }
    }
    if placed.leader && !placed.leased {
        placed.leased = lease(store, true, placed.lease_waiting).await;
        placed.lease_waiting = !placed.leased;
        reconcile |= placed.leased;
    }
    if !placed.leader && round.published.is_some() && round.published != placed.published {
        reconcile = true;
    }
    placed.published = round.published.clone();
    // What the last holder of an agent taken over left: its processes on this host, its turns
    // begun and not ended (uncertain), its Hub runs (uncertain).
    for agent in round.taken.iter().filter(|a| !placed.agents.contains(*a)) {
        {
            let store = store.clone();
            let agent = agent.clone();
            let _ = tokio::task::spawn_blocking(move || -> Result<(), ControllerError> {
                let store = store
                    .lock()
                    .map_err(|_| StateError::Corrupt("state store poisoned".into()))?;
                tokio::runtime::Handle::current().block_on(stop_leftovers(&store, Some(&agent)))
            })
            .await;
        }
        let access = shared.access.clone();
        let of = agent.clone();
        let settled =
            tokio::task::spawn_blocking(move || access.store().settle_begun_turns(Some(&of))).await;
        if let Ok(Ok(n)) = settled
            && n > 0
        {
            tracing::warn!(agent = %agent, messages = n, "cluster: inbound turns its last replica began and did not end are uncertain (not prompted again)");
        }
        if let Err(e) = shared.access.recount_budgets(agent).await {
            tracing::error!(agent = %agent, error = %e, "cluster: cannot count the budgets of an agent taken over; they count from its last count here");
        }
        let runs = shared.hub.taken_over(agent).await;
        if runs > 0 {
            tracing::warn!(agent = %agent, runs, "cluster: hub runs its last replica left unfinished are uncertain");
        }
    }
    if round.agents != placed.agents || round.accounts != placed.accounts {
        tracing::info!(
            agents = round.agents.len(),
            accounts = round.accounts.len(),
            "cluster: this replica's share changed"
        );
        placed.agents = round.agents;
        placed.accounts = round.accounts;
        converge(shared, parts, specs, Some(placed)).await;
    }
    // Given back only now that what they ran has stopped.
    if !round.giving.is_empty() {
        let member = placed.member.clone();
        let giving = round.giving;
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut m) = member.lock() {
                for (kind, name, token) in &giving {
                    m.give_back(*kind, name, *token);
                }
            }
        })
        .await;
    }
    if let Ok(mut s) = shared.status.write() {
        s.replicas = round.replicas;
    }
    reconcile
}

/// Renews a replica's claims every `every` until the controller stops
/// (`cluster::Member::renew`).
async fn renew_between_rounds(
    member: Arc<Mutex<cluster::Member>>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => return,
        }
        let member = member.clone();
        let renewed = tokio::task::spawn_blocking(move || match member.lock() {
            Ok(mut m) => m.renew().map_err(|e| e.to_string()),
            Err(_) => Err("cluster member poisoned".into()),
        })
        .await;
        if let Ok(Err(e)) = renewed {
            tracing::warn!(error = %e, "cluster: cannot renew the claims between rounds");
        }
    }
}

/// Takes (or lets go of) the state's lease for the leader: whether it holds it. `waiting`: an
/// earlier round found it held already, and said so.
async fn lease(store: &Arc<Mutex<StateStore>>, take: bool, waiting: bool) -> bool {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        let Ok(mut s) = store.lock() else {
            return false;
        };
        if !take {
            let _ = s.release_lease();
            return false;
        }
        match s.acquire_lease(LeasePurpose::Controller, Duration::ZERO) {
            Ok(()) => true,
            Err(e) => {
                // Once a wait: a frozen leader may hold it for long.
                if !waiting {
                    tracing::warn!(error = %e, "cluster: the leader waits for the state's lease");
                }
                false
            }
        }
    })
    .await
    .unwrap_or(false)
}

fn record_error(shared: &Shared, error: String) {
    tracing::error!(%error, "reconcile failed");
    if let Ok(mut s) = shared.status.write() {
        s.last_error = Some(error);
    }
}

/// An edit the rules refused: said once per change, not once per resync.
fn record_rejection(shared: &Shared, rejection: Rejection) {
    let Ok(mut s) = shared.status.write() else {
        return;
    };
    if s.rejected.as_ref().map(|r| &r.config_hash) != Some(&rejection.config_hash) {
        tracing::warn!(
            hash = %rejection.config_hash,
            errors = rejection.diagnostics.len(),
            first = rejection.diagnostics.first().map(String::as_str).unwrap_or(""),
            "config edit rejected; the last good config keeps running"
        );
        s.rejections += 1;
        s.rejected = Some(rejection);
    }
}

/// A plan that waits for an operator: nothing is applied, the runtimes keep running.
fn record_blocked(shared: &Shared, plan: &Plan) {
    let reasons: Vec<String> = plan.blocked.iter().map(|b| b.for_controller()).collect();
    let Ok(mut s) = shared.status.write() else {
        return;
    };
    if s.blocked != reasons {
        tracing::warn!(
            reasons = %reasons.join("; "),
            "plan blocked: waiting for an operator; nothing was applied"
        );
    }
    if s.rejected.take().is_some() {
        tracing::info!("the rejected edit is fixed (the plan it makes is blocked)");
    }
    s.blocked = reasons;
}

/// Applies a plan (its deleted agents' runtimes stopped first), puts its routing in force and
/// converges the runtimes. Whether the plan was applied.
async fn apply_planned(
    options: &ControllerOptions,
    store: &Arc<Mutex<StateStore>>,
    (shared, generations): (&Arc<Shared>, &Generations),
    (supervisor, heartbeats, adapters): (
        &mut Supervisor,
        &mut heartbeat::Heartbeats,
        &mut crate::adapters::Adapters,
    ),
    planned: Planned,
    (role, specs, placed): (Role, &mut Specs, Option<&Placed>),
) -> bool {
    let Planned {
        desired,
        plan,
        runtimes,
        heartbeats: beats,
        agents,
        config,
        generation,
        git_commit,
    } = planned;
    let followed = matches!(role, Role::Follower(_));
    if let Role::Follower(published) = &role
        && published.config_hash != desired.config_hash
    {
        let error = format!(
            "this replica's config files ({}) are not the ones the leader applied ({}): it serves what it ran before until they are (check out the same commit of the config repository)",
            desired.config_hash, published.config_hash
        );
        record_error(shared, error);
        return false;
    }
    // A deleted agent's runtime stops before its files go to trash.
    for action in &plan.actions {
        if let Action::DeleteAgent { id, .. } = action {
            supervisor.stop(id).await;
        }
    }
    let mut stages = Stages::start();
    let applied = {
        let store = store.clone();
        let guard = guard(options);
        let plan = plan.clone();
        let prev = generations.load_full();
        tokio::task::spawn_blocking(move || {
            let mut store = store
                .lock()
                .map_err(|_| "state store poisoned".to_string())?;
            let mut progress = |_: &str, _: usize, _: usize| {};
            let mut cx = apply::Context {
                git_commit,
                source: Source::Controller,
                guard: &guard,
                progress: &mut progress,
            };
            let applied = match &role {
                // What the leader applied is in the state already: nothing is written there;
                // the agents' directories are made on this host.
                Role::Follower(published) => {
                    apply::materialize(&desired).map_err(|e| {
                        format!("cannot make the agents' directories on this host: {e}")
                    })?;
                    apply::Applied {
                        serial: published.serial,
                        counts: (0, 0, 0),
                        generation: published.generation,
                        trashed: Vec::new(),
                    }
                }
                Role::Alone | Role::Leader(_) => {
                    apply::apply(&mut store, &plan, &desired, &mut cx).map_err(|e| e.to_string())?
                }
            };
            drop(store);
            if let Role::Leader(member) = &role {
                let published = cluster::Published {
                    config_hash: desired.config_hash.clone(),
                    generation: applied.generation.or(generation),
                    serial: applied.serial,
                };
                member
                    .lock()
                    .map_err(|_| "cluster member poisoned".to_string())?
                    .publish(&published)
                    .map_err(|e| e.to_string())?;
            }
            // The generation in force: the one just published, else the one the state had (a
            // restart on applied state publishes nothing and still serves it).
            let mut desired = desired;
            // Once per apply: the plan's carriers and the connections to converge.
            let adapter_specs = crate::adapters::specs(&config);
            let next = wiring::Generation::compile(
                &prev,
                wiring::Applied {
                    config: &config,
                    desired: &mut desired,
                    runtimes: &runtimes,
                    adapters: &adapter_specs,
                    generation: applied.generation.or(generation),
                },
            );
            Ok((
                applied,
                desired,
                (config, runtimes, adapter_specs),
                (prev, next),
            ))
        })
        .await
        .unwrap_or_else(|e| Err(format!("apply panicked: {e}")))
    };
    let (applied, desired, (config, runtimes, adapter_specs), (prev, next)): (
        _,
        _,
        (_, Vec<RuntimeSpec>, _),
        _,
    ) = match applied {
        Ok(applied) => applied,
        Err(error) => {
            tracing::error!(%error, "apply failed; the next reconcile retries");
            if let Ok(mut s) = shared.status.write() {
                s.last_error = Some(error);
            }
            return false;
        }
    };
    stages.done("apply");
    for (entry, root) in &applied.trashed {
        tracing::info!(
            path = %root.join(entry).display(),
            restore = %format!("deepcli trash restore {entry}"),
            "an agent's files moved to trash"
        );
    }
    let config_hash = desired.config_hash.clone();
    let in_force = applied.generation.or(generation);
    // One store: every part reads its piece of the new generation from now on.
    let next = Arc::new(next);
    generations.store(next.clone());
    if in_force.is_some() {
        stages.done("publish");
    }
    wiring::published(shared, &prev, &next).await;
    for action in &plan.actions {
        if let Action::DeleteAgent { id, .. } = action {
            shared.hub.agent_deleted(id).await;
        }
    }
    if followed {
        let changed = shared
            .status
            .read()
            .is_ok_and(|s| s.config_hash.as_deref() != Some(config_hash.as_str()));
        if changed {
            tracing::info!(
                serial = applied.serial,
                generation = in_force,
                "the leader's generation is in force"
            );
        }
    } else if !plan.is_empty() {
        match applied.generation {
            Some(g) => tracing::info!(
                serial = applied.serial,
                generation = g,
                actions = plan.actions.len(),
                "applied"
            ),
            None => tracing::info!(
                serial = applied.serial,
                actions = plan.actions.len(),
                "applied"
            ),
        }
    }
    if let Ok(mut s) = shared.status.write() {
        s.reconciles += 1;
        s.serial = applied.serial;
        s.routing_generation = in_force;
        if s.config_hash.as_deref() != Some(config_hash.as_str()) {
            s.applied_at = Some(crate::clock::now());
        }
        s.config_hash = Some(config_hash);
        if s.rejected.take().is_some() {
            tracing::info!("the rejected edit is fixed: the config on disk is applied");
        }
        if !s.blocked.is_empty() {
            s.blocked.clear();
            tracing::info!("the blocked plan is cleared: the config on disk is applied");
        }
        s.closed_accounts = shared
            .access
            .plan()
            .map(|p| p.closed.clone())
            .unwrap_or_default();
        s.last_error = None;
        s.agents = agents.clone();
    }
    *specs = Specs {
        agents,
        accounts: adapter_accounts(&shared.access),
        runtimes,
        heartbeats: beats,
        adapters: adapter_specs,
    };
    converge(shared, (supervisor, heartbeats, adapters), specs, placed).await;
    threads::drop_in_background((desired, config, plan, prev));
    true
}

/// Every platform account of the routing plan in force, as `<channel>/<account>`: each is
/// held by one replica, which runs its adapter and posts its outbox rows.
fn adapter_accounts(access: &Access) -> Vec<String> {
    let Some(plan) = access.plan() else {
        return Vec::new();
    };
    let mut names: Vec<String> = plan
        .accounts
        .keys()
        .map(|k| format!("{}/{}", k.channel, k.account))
        .collect();
    names.sort();
    names
}

fn guard(options: &ControllerOptions) -> Guard {
    crate::plan::guard(&options.config_dir, &options.load)
}

/// Where each apply's generation is published.
type Generations = Arc<arc_swap::ArcSwap<wiring::Generation>>;

/// Load, validate, plan: the blocking part of a reconcile.
fn find(
    options: &ControllerOptions,
    store: &Arc<Mutex<StateStore>>,
    hashes: &Mutex<HashCache>,
    first_apply: FirstApply,
) -> Found {
    let state = options.state.clone();
    let guard = guard(options);
    // git is asked for the commit while the plan is made.
    let (prepared, git_commit) = threads::join(
        || {
            crate::plan::prepare(Inputs {
                config: crate::plan::Source::Dir {
                    dir: &options.config_dir,
                    load: &options.load,
                },
                live: || {
                    let store = store.lock().map_err(|_| {
                        crate::state::StateError::Corrupt("state store poisoned".into())
                    })?;
                    store.snapshot().map(Some)
                },
                state: &state,
                sight: Sight::Observe(Some(hashes)),
                options: Options {
                    allow_destroy: first_apply.allow_destroy,
                    allow_mass_delete: first_apply.allow_mass_delete,
                    allow_empty: options.allow_empty,
                    guard: &guard,
                },
                render_routing: true,
            })
        },
        || apply::git_commit(&options.config_dir),
    );
    let Prepared {
        report,
        desired,
        live,
        world,
        plan,
    } = match prepared {
        Ok(prepared) => prepared,
        Err(PrepareError::Rejected(report)) => return rejected(*report),
        Err(PrepareError::Empty { dir, config_hash }) => {
            let e = PrepareError::Empty {
                dir,
                config_hash: config_hash.clone(),
            };
            return Found::Rejected(Rejection {
                config_hash,
                since: crate::clock::now(),
                diagnostics: vec![format!(
                    "{e}: an empty config directory is not applied; put the config files back, or restart the controller with `deepcli up --allow-empty` to run a hub of only the implicit agent `main`"
                )],
            });
        }
        Err(e) => return Found::Failed(e.to_string()),
    };
    let config = report.config;
    let mut around = crate::sandbox::Surroundings::of(
        &config,
        &options.load.state_dir,
        options.load.home.as_deref(),
    );
    let token_file = options.cluster.as_ref().and_then(|c| c.token_file.as_ref());
    around
        .secret_files
        .extend(token_file.map(|f| crate::sandbox::real(f)));
    let runtimes = config
        .agents
        .iter()
        .filter_map(|a| {
            RuntimeSpec::from_agent(
                a,
                &state.logs(),
                options.access.log_limit,
                options.load.home.as_deref(),
                &around,
            )
        })
        .collect();
    let heartbeats = heartbeat::specs(&config);
    let agents = config.agents.iter().map(|a| a.id().to_string()).collect();
    let generation = live.routing.as_ref().map(|r| r.generation);
    threads::drop_in_background((live, world));
    Found::Planned(Box::new(Planned {
        desired,
        plan,
        runtimes,
        heartbeats,
        agents,
        config,
        generation,
        git_commit,
    }))
}

/// A config that did not validate: the errors, one line each, and its hash.
fn rejected(report: crate::validate::Report) -> Found {
    let diagnostics = report
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(crate::report::one_line)
        .collect();
    Found::Rejected(Rejection {
        config_hash: report.config.sources.hash(),
        since: crate::clock::now(),
        diagnostics,
    })
}

/// An approved management request runs through the management service's typed request,
/// exactly as the operator's own call would (approvals.md, "Management requests").
struct Executor(crate::manage::ManageContext);

impl crate::approvals::ManagementExecutor for Executor {
    fn execute(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, serde_json::Value> {
        use crate::manage::rpc::{ManageRequest, rpc_error};
        let method = format!("{}{method}", crate::rpc::PREFIX);
        let request = ManageRequest::parse(&method, params).map_err(|e| e.to_object())?;
        let result = request
            .run(&self.0)
            .map_err(|e| rpc_error(&e).to_object())?;
        serde_json::to_value(result).map_err(|e| crate::rpc::Error::internal(e).to_object())
    }
}
