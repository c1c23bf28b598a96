//! One runtime's life: spawn, watch, restart with backoff, stop with the ladder.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use super::log::{Log, MAX_BYTES, pump};
use super::{
    BACKOFF_MAX, BACKOFF_START, Events, HEALTHY_AFTER, Phase, RuntimeSpec, RuntimeStatus,
    STDIN_GRACE, STOP_TIMEOUT, StopAck,
};
use crate::config::model::{EnvValue, RuntimeKind, Secret, SecretRef};

/// Why a runtime could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("`runtime.command` is empty")]
    NoCommand,
    #[error("env `{name}`: environment variable `{var}` is not set")]
    MissingEnv { name: String, var: String },
    #[error("env `{name}`: cannot read secret file `{path}`: {source}")]
    SecretFile {
        name: String,
        path: String,
        source: std::io::Error,
    },
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot open log `{path}`: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
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
                EnvValue::Secret(SecretRef::Env { id }) => {
                    std::env::var(id).map_err(|_| SpawnError::MissingEnv {
                        name: name.clone(),
                        var: id.clone(),
                    })?
                }
                EnvValue::Secret(SecretRef::File { path }) => std::fs::read_to_string(path)
                    .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                    .map_err(|source| SpawnError::SecretFile {
                        name: name.clone(),
                        path: path.clone(),
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
    /// The ACP connection of an `acp` runtime (dropping it closes the agent's stdin).
    acp: Option<super::acp::AcpConnection>,
}

async fn spawn(spec: &RuntimeSpec) -> Result<Spawned, SpawnError> {
    let (first, args) = spec.command.split_first().ok_or(SpawnError::NoCommand)?;
    let env = environment(spec)?;
    let _ = tokio::fs::create_dir_all(&spec.home).await;
    let _ = tokio::fs::create_dir_all(&spec.cwd).await;
    let log = Log::open(&spec.log, MAX_BYTES)
        .await
        .map_err(|source| SpawnError::Log {
            path: spec.log.display().to_string(),
            source,
        })?;
    let log = Arc::new(tokio::sync::Mutex::new(log));
    let mut cmd = Command::new(program(first));
    cmd.args(args)
        .current_dir(&spec.cwd)
        .env("HOME", &spec.home)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a stop reaches every process it started.
        .process_group(0)
        .kill_on_drop(false);
    let mut child = cmd.spawn().map_err(|source| SpawnError::Spawn {
        program: first.clone(),
        source,
    })?;
    let pid = child.id().unwrap_or(0);
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
        acp: None,
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

/// The stop ladder: close stdin, give it [`STDIN_GRACE`], SIGTERM the group, give it
/// [`STOP_TIMEOUT`], SIGKILL the group.
async fn stop_child(mut spawned: Spawned) -> String {
    drop(spawned.acp.take());
    drop(spawned.child.stdin.take());
    if let Ok(status) = tokio::time::timeout(STDIN_GRACE, spawned.child.wait()).await {
        signal_group(spawned.pid, Signal::SIGKILL);
        return describe_exit(status);
    }
    signal_group(spawned.pid, Signal::SIGTERM);
    if let Ok(status) = tokio::time::timeout(STOP_TIMEOUT, spawned.child.wait()).await {
        // The leader is gone; anything it left in its group goes too.
        signal_group(spawned.pid, Signal::SIGKILL);
        return describe_exit(status);
    }
    signal_group(spawned.pid, Signal::SIGKILL);
    describe_exit(spawned.child.wait().await)
}

fn signal_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid)
        && raw > 0
    {
        let _ = killpg(Pid::from_raw(raw), signal);
    }
}

/// Stops a process group left by an earlier controller (found by pid and start time):
/// SIGTERM, then SIGKILL after `timeout`.
pub async fn stop_group(pid: u32, timeout: Duration) {
    signal_group(pid, Signal::SIGTERM);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if crate::state::lease::process_start(pid).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal_group(pid, Signal::SIGKILL);
}

/// [`stop_group`] for a recorded runtime, only if the pid is still the process that was
/// started (a reused pid belongs to someone else).
pub async fn stop_pid(pid: u32, process_start: Option<&str>) -> bool {
    let now = crate::state::lease::process_start(pid);
    if now.is_none() || now.as_deref() != process_start {
        return false;
    }
    stop_group(pid, STOP_TIMEOUT).await;
    true
}

pub(super) struct Reporter {
    status: Arc<Mutex<BTreeMap<String, RuntimeStatus>>>,
    events: Events,
    current: RuntimeStatus,
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
                started_at: None,
                restarts: 0,
                last_exit: None,
                last_error: None,
                info: None,
                spec_hash: spec.spec_hash.clone(),
                next_start: None,
            },
        }
    }

    fn publish(&mut self, change: impl FnOnce(&mut RuntimeStatus)) {
        change(&mut self.current);
        if let Ok(mut map) = self.status.lock() {
            map.insert(self.current.agent_id.clone(), self.current.clone());
        }
        let _ = self.events.send(self.current.clone());
    }
}

/// Runs one runtime until told to stop.
pub(super) async fn supervise(
    spec: RuntimeSpec,
    mut stop: oneshot::Receiver<StopAck>,
    mut report: Reporter,
    acp: super::AcpMap,
) {
    // Whatever way this task ends, its runtime is no longer there to deliver to.
    struct Unlist<'a>(&'a super::AcpMap, &'a str);
    impl Drop for Unlist<'_> {
        fn drop(&mut self) {
            if let Ok(mut map) = self.0.lock() {
                map.remove(self.1);
            }
        }
    }
    let _unlist = Unlist(&acp, &spec.agent_id);
    let mut backoff = BACKOFF_START;
    loop {
        report.publish(|s| {
            s.status = Phase::Starting;
            s.next_start = None;
        });
        let started = Instant::now();
        // Why this attempt ended: it could not start at all (`failed`), or it ran and stopped.
        let outcome: Result<std::convert::Infallible, Phase> = match spawn(&spec).await {
            Err(e) => {
                tracing::warn!(agent = %spec.agent_id, error = %e, "runtime failed to start");
                report.publish(|s| {
                    s.pid = None;
                    s.last_error = Some(e.to_string());
                });
                Err(Phase::Failed)
            }
            Ok(mut spawned) => {
                let pid = spawned.pid;
                let ready = match spec.kind {
                    RuntimeKind::Acp => {
                        // What the child's environment holds: the configured env on top of ours.
                        let has_env = |name: &str| {
                            spec.env.iter().any(|(k, _)| k == name)
                                || std::env::var_os(name).is_some()
                        };
                        match super::acp::connect(
                            &mut spawned.child,
                            super::acp::START_TIMEOUT,
                            has_env,
                        )
                        .await
                        {
                            Ok(connection) => {
                                let info = connection.info.clone();
                                let handle =
                                    super::acp::AcpHandle::new(&connection, spec.cwd.clone(), pid);
                                if let Ok(mut map) = acp.lock() {
                                    map.insert(spec.agent_id.clone(), handle);
                                }
                                spawned.acp = Some(connection);
                                Ok(Some(info))
                            }
                            Err(e) => Err(e),
                        }
                    }
                    _ => Ok(None),
                };
                match ready {
                    Err(e) => {
                        tracing::warn!(agent = %spec.agent_id, error = %e, "runtime not ready");
                        report.publish(|s| s.last_error = Some(e));
                        let exit = stop_child(spawned).await;
                        report.publish(|s| {
                            s.pid = None;
                            s.last_exit = Some(exit);
                        });
                        Err(Phase::CrashLoop)
                    }
                    Ok(info) => {
                        tracing::info!(agent = %spec.agent_id, pid, "runtime ready");
                        report.publish(|s| {
                            s.status = Phase::Ready;
                            s.pid = Some(pid);
                            s.started_at = Some(crate::state::now());
                            s.info = info;
                            s.last_error = None;
                        });
                        tokio::select! {
                            exit = spawned.child.wait() => {
                                if let Ok(mut map) = acp.lock() {
                                    map.remove(&spec.agent_id);
                                }
                                // The leader died; take anything it left in its group along.
                                signal_group(pid, Signal::SIGKILL);
                                let exit = describe_exit(exit);
                                tracing::warn!(agent = %spec.agent_id, %exit, "runtime exited");
                                report.publish(|s| {
                                    s.pid = None;
                                    s.last_exit = Some(exit);
                                });
                                Err(Phase::CrashLoop)
                            }
                            ack = &mut stop => {
                                if let Ok(mut map) = acp.lock() {
                                    map.remove(&spec.agent_id);
                                }
                                let exit = stop_child(spawned).await;
                                report.publish(|s| {
                                    s.status = Phase::Stopped;
                                    s.pid = None;
                                    s.last_exit = Some(exit);
                                });
                                if let Ok(ack) = ack {
                                    let _ = ack.send(());
                                }
                                return;
                            }
                        }
                    }
                }
            }
        };
        let Err(phase) = outcome;
        if started.elapsed() >= HEALTHY_AFTER {
            backoff = BACKOFF_START;
        }
        let wait = backoff;
        backoff = (backoff * 2).min(BACKOFF_MAX);
        let next = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::try_from(wait).unwrap_or_default())
            .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
            .ok();
        report.publish(|s| {
            s.status = phase;
            s.restarts += 1;
            s.next_start = next;
        });
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

#[cfg(test)]
mod tests {
    use super::*;

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
            spec_hash: String::new(),
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
