//! Each runtime `deepcli up` would start: its program found (`deepcli` is this very binary), and
//! a sandbox backend of this host that can enforce its sandbox — the same [`Layout`] and
//! [`choose`] the runtime is started with.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{Area, Check, Status};
use crate::config::Config;
use crate::sandbox::{self, Host, Layout, Surroundings, choose};

/// The agents whose runtime is a process deepcli starts.
fn started(config: &Config) -> impl Iterator<Item = &crate::config::Agent> {
    config
        .agents
        .iter()
        .filter(|a| a.runtime_kind().starts_process())
}

pub(super) fn commands(config: &Config, home: Option<&Path>) -> Vec<Check> {
    let mut out = Vec::new();
    for agent in started(config) {
        let command = agent
            .spec
            .runtime
            .as_ref()
            .and_then(|r| r.command.clone())
            .unwrap_or_default();
        let id = agent.id();
        let Some(program) = command.first() else {
            out.push(
                Check::new(
                    Area::Runtime,
                    id,
                    Status::Fail,
                    "its runtime has no `command`",
                )
                .fix("set `runtime.command` in agents.yaml (`deepcli validate` points at it)"),
            );
            continue;
        };
        let shown = command.join(" ");
        if program == "deepcli" {
            out.push(Check::ok(
                Area::Runtime,
                id,
                format!("`{shown}`: deepcli itself"),
            ));
            continue;
        }
        let found = if program.contains('/') {
            let path = sandbox::runtime_cwd(agent, home).join(program);
            executable(&path)
                .map(|()| path.clone())
                .map_err(|why| format!("`{}` {why}", path.display()))
        } else {
            on_path(program).ok_or_else(|| format!("`{program}` is not found on PATH"))
        };
        out.push(match found {
            Ok(path) => Check::ok(
                Area::Runtime,
                id,
                format!("`{shown}`: {}", path.display()),
            ),
            Err(why) => Check::new(Area::Runtime, id, Status::Fail, why).fix(format!(
                "install `{program}`, or write its full path as the first word of agents.{id}.runtime.command; `deepcli up` runs with this PATH"
            )),
        });
    }
    if out.is_empty() {
        out.push(Check::ok(
            Area::Runtime,
            "-",
            "no agent has a runtime deepcli starts (`kind: acp` or `process`)",
        ));
    }
    out
}

/// Each agent messages are routed to that cannot answer them: no runtime (`kind: none`, or
/// none written), while a binding names it or it is the default agent of a hub with channel
/// accounts. Such messages are kept in its transcript and never answered.
pub(super) fn answerless(config: &Config) -> Vec<Check> {
    let has_accounts = config
        .channels
        .iter()
        .any(|c| c.accounts().next().is_some());
    config
        .agents
        .iter()
        .filter(|a| !a.runtime_kind().takes_prompts())
        .filter_map(|agent| {
            let id = agent.id();
            let bound = config.bindings.iter().any(|b| b.spec.agent_id == id);
            let default = has_accounts && config.default_agent == id;
            let why = match (bound, default) {
                (true, _) => "a binding routes messages to it",
                (false, true) => "it is the default agent: messages no binding matches go to it",
                (false, false) => return None,
            };
            Some(
                Check::new(
                    Area::Runtime,
                    id,
                    Status::Warn,
                    format!("{why}, and it has no runtime: they are never answered"),
                )
                .fix(format!(
                    "give agents.{id} a runtime (`runtime: {{kind: acp, command: [deepcli, demo-agent]}}` to try one), or route its messages elsewhere"
                )),
            )
        })
        .collect()
}

/// Whether `path` is a file this user may run.
fn executable(path: &Path) -> Result<(), &'static str> {
    let meta = std::fs::metadata(path).map_err(|_| "does not exist")?;
    if !meta.is_file() {
        return Err("is not a file");
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err("is not executable");
    }
    Ok(())
}

/// `program` as `PATH` finds it: the first executable file of that name.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p).is_ok())
}

pub(super) fn sandboxes(config: &Config, state_dir: &Path, home: Option<&Path>) -> Vec<Check> {
    let host = Host::get();
    let around = Surroundings::of(config, state_dir, home);
    let mut out = Vec::new();
    for agent in started(config) {
        let id = agent.id();
        let Some(layout) = Layout::for_agent(agent, &around, home) else {
            out.push(Check::ok(
                Area::Sandbox,
                id,
                "off (`sandbox.mode: off`): its runtime runs unsandboxed",
            ));
            continue;
        };
        out.push(match choose(&layout, host) {
            Ok(_) => Check::ok(
                Area::Sandbox,
                id,
                format!("sandboxed: {}", sandbox::summary(&layout, host)),
            ),
            Err(unavailable) => Check::new(
                Area::Sandbox,
                id,
                Status::Fail,
                "no backend of this host can enforce its sandbox: the runtime would not start",
            )
            .fix(format!(
                "{} (`deepcli sandbox explain {id}` says more)",
                unavailable.why
            )),
        });
    }
    if out.is_empty() {
        out.push(host_only(host));
    }
    out
}

/// With no runtime to sandbox: what this host could sandbox with.
fn host_only(host: &Host) -> Check {
    let subject = "-";
    match (&host.bwrap, sandbox::landlock_on(host)) {
        (Ok(path), _) => Check::ok(
            Area::Sandbox,
            subject,
            format!("no runtime to sandbox; bubblewrap is usable ({})", path.display()),
        ),
        (Err(bwrap), Ok(abi)) => Check::ok(
            Area::Sandbox,
            subject,
            format!("no runtime to sandbox; Landlock ABI {abi} is usable (bubblewrap is not: {bwrap})"),
        ),
        (Err(bwrap), Err(landlock)) => Check::new(
            Area::Sandbox,
            subject,
            Status::Warn,
            format!("no runtime to sandbox, and no backend is usable here: bubblewrap: {bwrap}; {landlock}"),
        )
        .fix("install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`) before giving an agent a runtime"),
    }
}
