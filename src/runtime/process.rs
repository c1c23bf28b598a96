//! One runtime's life: spawn, watch, restart with backoff, stop with the ladder.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::log::{Log, pump};
use super::tree::{AGENT_ENV, Leader, ProcessId, Tree};
use super::{Events, Phase, RuntimeSpec, RuntimeStatus, SWEEP_EVERY, StopAck};
use crate::config::model::{EnvValue, RuntimeKind, Secret};

/// Why a runtime could not be started.
#[derive(Debug, thiserror::Error)]
pub(super) enum SpawnError {
    #[error("`runtime.command` is empty")]
    NoCommand,
    #[error("env `{name}`: {source}")]
    Secret {
        name: String,
        source: crate::config::model::SecretError,
    },
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Sandbox(#[from] crate::sandbox::Unavailable),
    #[error("cannot make the runtime's cgroup under `{path}`: {source}")]
    Cgroup {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot make the sandbox's socket directory `{path}`: {source}")]
    RunDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot open log `{path}`: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
}

/// The whole environment of a runtime (isolation.md, "Environment by allowlist"): of the
/// controller's own only what [`crate::sandbox::passes_through`] and `runtime.inheritEnv`
/// name, then its HOME, its `runtime.env` and [`AGENT_ENV`]. Nothing else reaches it.
pub(super) fn full_environment(spec: &RuntimeSpec) -> Result<Vec<(String, String)>, SpawnError> {
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| crate::sandbox::passes_through(k) || spec.inherit_env.contains(k))
        .collect();
    env.push(("HOME".into(), spec.home.display().to_string()));
    if let Some(layout) = &spec.sandbox
        && matches!(layout.network, crate::sandbox::Network::Allowlist { .. })
    {
        let proxy = format!("http://{}", crate::sandbox::PROXY_ADDR);
        for name in crate::sandbox::PROXY_ENV {
            env.push((name.into(), proxy.clone()));
        }
    }
    env.extend(environment(spec)?);
    // Last, so it is always this: tells this runtime's orphans.
    env.push((AGENT_ENV.into(), spec.agent_id.clone()));
    Ok(env)
}

/// Resolves secret references now, at spawn time; the values live only in the child's
/// environment and are never logged.
fn environment(spec: &RuntimeSpec) -> Result<Vec<(String, String)>, SpawnError> {
    spec.env
        .iter()
        .map(|(name, value)| {
            // `"${VAR}"` is the short form of `{source: env, id: VAR}`, as for secrets.
            let shorthand = match value {
                EnvValue::Text(text) => match Secret::from_text(text) {
                    Secret::Ref(r) => Some(EnvValue::Secret(r)),
                    Secret::Inline(_) => None,
                },
                EnvValue::Secret(_) => None,
            };
            let value = match shorthand.as_ref().unwrap_or(value) {
                EnvValue::Text(text) => text.clone(),
                // Exposed here, where it is sent: into the child's environment.
                EnvValue::Secret(r) => r
                    .resolve()
                    .map(|secret| secrecy::ExposeSecret::expose_secret(&secret).to_string())
                    .map_err(|source| SpawnError::Secret {
                        name: name.clone(),
                        source,
                    })?,
            };
            Ok((name.clone(), value))
        })
        .collect()
}

/// `deepcli` as a program name means this very executable (the shipped demo agent).
fn program(name: &str) -> std::path::PathBuf {
    if name == "deepcli"
        && let Ok(me) = std::env::current_exe()
    {
        return me;
    }
    std::path::PathBuf::from(name)
}

struct Spawned {
    child: Child,
    pid: u32,
    /// Keeps the leader known as tokio's to wait for (see [`Leader`]) until it is dropped.
    _leader: Leader,
    /// Everything the runtime started.
    tree: Tree,
    /// The ACP connection of an `acp` runtime (dropping it closes the agent's stdin).
    acp: Option<super::acp::AcpConnection>,
    /// A Landlock runtime's cgroup: killed whenever the runtime ends.
    cgroup: Option<crate::sandbox::cgroup::Cgroup>,
}

async fn spawn(spec: &RuntimeSpec) -> Result<Spawned, SpawnError> {
    let (first, args) = spec.command.split_first().ok_or(SpawnError::NoCommand)?;
    let env = full_environment(spec)?;
    let _ = tokio::fs::create_dir_all(&spec.home).await;
    let _ = tokio::fs::create_dir_all(&spec.cwd).await;
    // Fail closed: without the sandbox it asks for, the runtime does not start.
    let sandbox = match &spec.sandbox {
        Some(layout) => {
            // Probed once per controller, when the first runtime's status was made.
            let host = crate::sandbox::Host::get();
            let choice = crate::sandbox::choose(layout, host)?;
            if let Some(run_dir) = &spec.run_dir {
                crate::owner_only::create_dir_all(run_dir).map_err(|source| {
                    SpawnError::RunDir {
                        path: run_dir.display().to_string(),
                        source,
                    }
                })?;
            }
            Some((layout, choice, host))
        }
        None => None,
    };
    let log = Log::open(&spec.log, spec.log_limit)
        .await
        .map_err(|source| SpawnError::Log {
            path: spec.log.display().to_string(),
            source,
        })?;
    let log = Arc::new(tokio::sync::Mutex::new(log));
    let mut cgroup = None;
    let mut cmd = match &sandbox {
        Some((layout, choice, host)) => {
            // What `exec` inside the sandbox would find missing, said as an unsandboxed start
            // says it (the sandbox's PATH is the controller's, its system the host's).
            let wanted = program(first);
            let found = if wanted.components().count() > 1 {
                spec.cwd.join(&wanted).is_file()
            } else {
                crate::sandbox::on_path(first).is_some()
            };
            if !found {
                return Err(SpawnError::Spawn {
                    program: first.clone(),
                    source: std::io::ErrorKind::NotFound.into(),
                });
            }
            let mut cmd = match choice.backend {
                crate::sandbox::LANDLOCK => {
                    let base = host
                        .cgroup
                        .as_ref()
                        .map_err(|e| crate::sandbox::Unavailable { why: e.clone() })?;
                    let made = crate::sandbox::cgroup::Cgroup::create(base, &spec.agent_id)
                        .map_err(|source| SpawnError::Cgroup {
                            path: base.display().to_string(),
                            source,
                        })?;
                    // Its own temporary directory, empty at each start: /tmp is not private.
                    let tmp = spec.home.join(".tmp");
                    let _ = std::fs::remove_dir_all(&tmp);
                    let _ = std::fs::create_dir_all(&tmp);
                    let restriction = crate::sandbox::landlock::Spec::of(layout, &tmp, &made.path);
                    let mut cmd = Command::new(program("deepcli"));
                    cmd.args(["sandbox", "exec", "--spec"])
                        .arg(serde_json::to_string(&restriction).unwrap_or_default())
                        .arg("--");
                    cgroup = Some(made);
                    cmd
                }
                _ => {
                    let bwrap = host
                        .bwrap
                        .as_ref()
                        .map_err(|e| crate::sandbox::Unavailable { why: e.clone() })?;
                    let mut cmd = Command::new(bwrap);
                    cmd.args(crate::sandbox::bwrap::args(
                        layout,
                        &crate::sandbox::real(&spec.cwd),
                        spec.run_dir.as_deref(),
                    ));
                    if matches!(layout.network, crate::sandbox::Network::Allowlist { .. }) {
                        // The proxy's forwarder on the sandbox's own loopback, the command its
                        // child.
                        cmd.arg(program("deepcli")).args([
                            "sandbox",
                            "forward",
                            "--listen",
                            crate::sandbox::PROXY_ADDR,
                            "--to",
                            crate::sandbox::EGRESS_SOCKET,
                            "--",
                        ]);
                    }
                    cmd
                }
            };
            cmd.arg(program(first)).args(args);
            cmd
        }
        None => {
            let mut cmd = Command::new(program(first));
            cmd.args(args);
            cmd
        }
    };
    cmd.current_dir(&spec.cwd)
        .env_clear()
        .envs(env)
        // A Landlock runtime's temporary directory (see above).
        .envs(cgroup.as_ref().map(|_| ("TMPDIR", spec.home.join(".tmp"))))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a stop reaches every process it started.
        .process_group(0)
        .kill_on_drop(false);
    let (mut child, leader) = match Leader::spawn(&mut cmd) {
        Ok(spawned) => spawned,
        Err(source) => {
            if let Some(cgroup) = &cgroup {
                cgroup.kill().await;
            }
            return Err(SpawnError::Spawn {
                program: first.clone(),
                source,
            });
        }
    };
    let pid = child.id().unwrap_or(0);
    // Not reaped yet, so readable even if it exited already.
    let id = ProcessId::of(pid).unwrap_or(ProcessId {
        pid,
        start: String::new(),
    });
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(pump(stderr, log.clone()));
    }
    // For `acp` stdout carries the protocol; for `process` it is output like stderr.
    if spec.kind == RuntimeKind::Process
        && let Some(stdout) = child.stdout.take()
    {
        tokio::spawn(pump(stdout, log));
    }
    Ok(Spawned {
        child,
        pid,
        _leader: leader,
        tree: Tree::new(id, Some(spec.agent_id.clone()), []),
        acp: None,
        cgroup,
    })
}

fn describe_exit(status: std::io::Result<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            _ => "exited".to_string(),
        },
        Err(e) => format!("wait failed: {e}"),
    }
}

/// The stop ladder: close stdin, give it [`STDIN_GRACE`], SIGTERM the tree, give it
/// [`STOP_TIMEOUT`], SIGKILL the tree. However the leader went, the rest of its tree goes with it.
/// Returns how the leader exited, and what of the tree could not be killed (normally nothing).
async fn stop_child(mut spawned: Spawned, timings: &super::Timings) -> (String, Vec<ProcessId>) {
    drop(spawned.acp.take());
    drop(spawned.child.stdin.take());
    let grace = timings.stdin_grace;
    let status = match tokio::time::timeout(grace, spawned.child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            spawned.tree.signal(Signal::SIGTERM);
            let timeout = timings.stop_timeout;
            match tokio::time::timeout(timeout, spawned.child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    spawned.tree.kill().await;
                    spawned.child.wait().await
                }
            }
        }
    };
    kill_tree(&mut spawned.tree).await;
    if let Some(cgroup) = &spawned.cgroup {
        cgroup.kill().await;
    }
    (describe_exit(status), spawned.tree.escaped())
}

/// SIGKILL to whatever is left of a runtime whose leader is gone.
async fn kill_tree(tree: &mut Tree) {
    let left = tree.kill().await;
    if left > 0 {
        tracing::warn!(
            processes = left,
            "processes of a runtime still alive after SIGKILL; kept on record"
        );
    }
}

/// Stops what a killed controller left of a runtime: its leader (by pid and start time, when
/// on record) and every process of its tree, found or recorded. SIGTERM, up to `timeout` for
/// them to go, SIGKILL. `None` when nothing of it was left; else how many processes outlived
/// SIGKILL (normally 0).
pub(crate) async fn stop_leftover(
    leader: Option<ProcessId>,
    escaped: Vec<ProcessId>,
    timeout: Duration,
) -> Option<usize> {
    // Pid 0 stands for "no leader on record": the tree is then what escaped it.
    let leader = leader.unwrap_or(ProcessId {
        pid: 0,
        start: String::new(),
    });
    // Its orphans were re-parented to init, not to this controller: no adoptee to look for.
    let mut tree = Tree::new(leader, None, escaped);
    if !tree.alive() {
        return None;
    }
    tree.signal(Signal::SIGTERM);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && tree.alive() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some(tree.kill().await)
}

pub(super) struct Reporter {
    status: Arc<Mutex<BTreeMap<String, RuntimeStatus>>>,
    events: Events,
    pub(super) current: RuntimeStatus,
}

impl Reporter {
    pub(super) fn new(
        spec: &RuntimeSpec,
        status: Arc<Mutex<BTreeMap<String, RuntimeStatus>>>,
        events: Events,
    ) -> Reporter {
        Reporter {
            status,
            events,
            current: RuntimeStatus {
                agent_id: spec.agent_id.clone(),
                kind: spec.kind.as_str().to_string(),
                status: Phase::Starting,
                pid: None,
                process_start: None,
                escaped: Vec::new(),
                started_at: None,
                restarts: 0,
                last_exit: None,
                last_error: None,
                info: None,
                spec_hash: spec.spec_hash.clone(),
                sandbox: Some(match &spec.sandbox {
                    None => "off".to_string(),
                    Some(layout) => crate::sandbox::summary(layout, crate::sandbox::Host::get()),
                }),
                next_start: None,
                model: None,
                budgets: None,
            },
        }
    }

    pub(super) fn publish(&mut self, change: impl FnOnce(&mut RuntimeStatus)) {
        change(&mut self.current);
        if let Ok(mut map) = self.status.lock() {
            map.insert(self.current.agent_id.clone(), self.current.clone());
        }
        let _ = self.events.send(self.current.clone());
    }
}

/// What a runtime's task is given besides its spec: where it lists itself when ready, where
/// its permission requests go, its timings.
pub(super) struct Wires {
    pub(super) acp: super::AcpMap,
    pub(super) asks: super::acp::PermissionAsks,
    pub(super) timings: super::Timings,
}

/// Runs one runtime until told to stop.
pub(super) async fn supervise(
    spec: RuntimeSpec,
    mut stop: oneshot::Receiver<StopAck>,
    mut report: Reporter,
    wires: Wires,
) {
    let acp = &wires.acp;
    // Whatever way this task ends, its runtime is no longer there to deliver to.
    struct Unlist<'a>(&'a super::AcpMap, &'a str);
    impl Drop for Unlist<'_> {
        fn drop(&mut self) {
            if let Ok(mut map) = self.0.lock() {
                map.remove(self.1);
            }
        }
    }
    let _unlist = Unlist(acp, &spec.agent_id);
    let (backoff_start, backoff_max, healthy_after) = (
        wires.timings.backoff_start,
        wires.timings.backoff_max,
        wires.timings.healthy_after,
    );
    let mut backoff = restart_waits(backoff_start, backoff_max);
    loop {
        let started = Instant::now();
        // Why this attempt ended: it could not start at all (`failed`), or it ran and stopped.
        let phase = match spawn(&spec).await {
            Err(e) => {
                tracing::warn!(agent = %spec.agent_id, error = %e, "runtime failed to start");
                report.publish(|s| {
                    s.pid = None;
                    s.process_start = None;
                    s.last_error = Some(e.to_string());
                });
                Phase::Failed
            }
            Ok(spawned) => match attempt(&spec, spawned, &mut stop, &mut report, &wires).await {
                Attempt::Ended => Phase::CrashLoop,
                Attempt::Stopped(ack) => {
                    if let Some(ack) = ack {
                        let _ = ack.send(());
                    }
                    return;
                }
            },
        };
        if started.elapsed() >= healthy_after {
            backoff = restart_waits(backoff_start, backoff_max);
        }
        let wait = backoff.next().unwrap_or(backoff_max);
        let next = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::try_from(wait).unwrap_or_default())
            .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
            .ok();
        report.publish(|s| {
            s.status = phase;
            s.restarts += 1;
            s.next_start = next;
        });
        tracing::debug!(
            agent = %spec.agent_id,
            restarts = report.current.restarts,
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "runtime starts again after its backoff"
        );
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            ack = &mut stop => {
                report.publish(|s| {
                    s.status = Phase::Stopped;
                    s.next_start = None;
                });
                if let Ok(ack) = ack {
                    let _ = ack.send(());
                }
                return;
            }
        }
    }
}

/// The waits before each start again: `start`, doubling up to `max`, for as long as it takes
/// (a run that stayed up [`HEALTHY_AFTER`] starts the series over).
fn restart_waits(start: Duration, max: Duration) -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(start)
        .with_factor(2.0)
        .with_max_delay(max)
        .without_max_times()
        .build()
}

/// How one run of a spawned runtime ended.
enum Attempt {
    /// It exited or was not ready in time: everything it started is gone; start it again.
    Ended,
    /// It was told to stop, and did (with whom to tell).
    Stopped(Option<StopAck>),
}

/// One spawned runtime from `starting` until it ends or is told to stop.
async fn attempt(
    spec: &RuntimeSpec,
    mut spawned: Spawned,
    stop: &mut oneshot::Receiver<StopAck>,
    report: &mut Reporter,
    wires: &Wires,
) -> Attempt {
    let (acp, timings) = (&wires.acp, &wires.timings);
    let pid = spawned.pid;
    // On record from the start: a controller killed now leaves it to the next one.
    let start = Some(spawned.tree.leader().start.clone()).filter(|s| !s.is_empty());
    report.publish(|s| {
        s.status = Phase::Starting;
        s.pid = Some(pid);
        s.process_start = start.clone();
        s.escaped.clear();
        s.next_start = None;
    });
    let info = match spec.kind {
        RuntimeKind::Acp => {
            // What the child's environment holds: the configured env, and what it keeps of ours.
            let has_env = |name: &str| {
                spec.env.iter().any(|(k, _)| k == name)
                    || ((crate::sandbox::passes_through(name)
                        || spec.inherit_env.iter().any(|k| k == name))
                        && std::env::var_os(name).is_some())
            };
            let connected = tokio::select! {
                connected = super::acp::connect(
                    &mut spawned.child,
                    super::acp::START_TIMEOUT,
                    has_env,
                    (&spec.agent_id, wires.asks.clone()),
                ) => connected,
                ack = &mut *stop => return stopped(spawned, report, (acp, timings), ack.ok()).await,
            };
            match connected {
                Ok(connection) => {
                    let info = connection.info.clone();
                    let handle = super::acp::AcpHandle::new(&connection, spec.cwd.clone(), pid);
                    if let Ok(mut map) = acp.lock() {
                        map.insert(spec.agent_id.clone(), handle);
                    }
                    spawned.acp = Some(connection);
                    Some(info)
                }
                Err(e) => {
                    tracing::warn!(agent = %spec.agent_id, error = %e, "runtime not ready");
                    report.publish(|s| s.last_error = Some(e));
                    let (exit, escaped) = stop_child(spawned, timings).await;
                    report.publish(|s| {
                        s.pid = None;
                        s.process_start = None;
                        s.escaped = escaped;
                        s.last_exit = Some(exit);
                    });
                    return Attempt::Ended;
                }
            }
        }
        _ => None,
    };
    // What it started on the way is on record with `ready`.
    spawned.tree.sweep(Duration::ZERO).await;
    tracing::info!(agent = %spec.agent_id, pid, "runtime ready");
    let escaped = spawned.tree.escaped();
    report.publish(|s| {
        s.status = Phase::Ready;
        s.started_at = Some(crate::clock::now());
        s.info = info;
        s.last_error = None;
        s.escaped = escaped;
    });
    let mut sweeps =
        tokio::time::interval_at(tokio::time::Instant::now() + SWEEP_EVERY, SWEEP_EVERY);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            exit = spawned.child.wait() => {
                if let Ok(mut map) = acp.lock() {
                    map.remove(&spec.agent_id);
                }
                // The leader died; take everything it started along.
                kill_tree(&mut spawned.tree).await;
                if let Some(cgroup) = &spawned.cgroup {
                    cgroup.kill().await;
                }
                let exit = describe_exit(exit);
                tracing::warn!(agent = %spec.agent_id, %exit, "runtime exited");
                let escaped = spawned.tree.escaped();
                report.publish(|s| {
                    // Not `ready` a moment longer than its process is there.
                    s.status = Phase::CrashLoop;
                    s.pid = None;
                    s.process_start = None;
                    s.escaped = escaped;
                    s.last_exit = Some(exit);
                });
                return Attempt::Ended;
            }
            ack = &mut *stop => return stopped(spawned, report, (acp, timings), ack.ok()).await,
            _ = sweeps.tick() => {
                // Shared with the other runtimes' sweeps: one look at /proc serves them all.
                if spawned.tree.sweep(SWEEP_EVERY / 2).await {
                    let escaped = spawned.tree.escaped();
                    report.publish(|s| s.escaped = escaped);
                }
            }
        }
    }
}

/// Stops a runtime that was told to.
async fn stopped(
    spawned: Spawned,
    report: &mut Reporter,
    (acp, timings): (&super::AcpMap, &super::Timings),
    ack: Option<StopAck>,
) -> Attempt {
    if let Ok(mut map) = acp.lock() {
        map.remove(&report.current.agent_id);
    }
    let (exit, escaped) = stop_child(spawned, timings).await;
    report.publish(|s| {
        s.status = Phase::Stopped;
        s.pid = None;
        s.process_start = None;
        s.escaped = escaped;
        s.last_exit = Some(exit);
    });
    Attempt::Stopped(ack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::SecretRef;

    #[test]
    fn restarts_wait_from_the_start_doubling_up_to_the_most() {
        // Within float rounding (backon multiplies in `f32`): a nanosecond is nothing to a timer.
        let secs = |d: Duration| (d + Duration::from_micros(1)).as_secs();
        let waits: Vec<u64> =
            restart_waits(crate::runtime::BACKOFF_START, crate::runtime::BACKOFF_MAX)
                .take(12)
                .map(secs)
                .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        // A start above the most is waited once, then the most.
        let waits: Vec<u64> = restart_waits(Duration::from_secs(9), Duration::from_secs(5))
            .take(3)
            .map(secs)
            .collect();
        assert_eq!(waits, [9, 5, 5]);
    }

    #[test]
    fn env_values_resolve_references_and_the_short_form_at_spawn() {
        let spec = RuntimeSpec {
            agent_id: "a".into(),
            kind: RuntimeKind::Process,
            command: vec!["true".into()],
            env: vec![
                ("SHORT".into(), EnvValue::Text("${PATH}".into())),
                (
                    "LONG".into(),
                    EnvValue::Secret(SecretRef::Env { id: "PATH".into() }),
                ),
                ("PLAIN".into(), EnvValue::Text("info".into())),
                ("NOT_A_NAME".into(), EnvValue::Text("${not a name}".into())),
            ],
            cwd: "/".into(),
            home: "/".into(),
            log: "/dev/null".into(),
            log_limit: crate::runtime::log::Limit::DEFAULT,
            spec_hash: String::new(),
            url: None,
            token: None,
            card_key: None,
            inherit_env: Vec::new(),
            sandbox: None,
            run_dir: None,
        };
        let path = std::env::var("PATH").unwrap();
        let env = environment(&spec).unwrap();
        assert_eq!(
            env,
            [
                ("SHORT".to_string(), path.clone()),
                ("LONG".to_string(), path),
                ("PLAIN".to_string(), "info".to_string()),
                ("NOT_A_NAME".to_string(), "${not a name}".to_string()),
            ]
        );

        let missing = RuntimeSpec {
            env: vec![(
                "KEY".into(),
                EnvValue::Text("${DEEPCLI_SURELY_UNSET_VAR}".into()),
            )],
            ..spec
        };
        let error = environment(&missing).unwrap_err().to_string();
        assert_eq!(
            error,
            "env `KEY`: environment variable `DEEPCLI_SURELY_UNSET_VAR` is not set"
        );
    }
}
