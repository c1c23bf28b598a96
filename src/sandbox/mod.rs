//! The sandbox an agent's runtime runs in (isolation.md): what it may read and write, which
//! processes it sees, which network it reaches — worked out from the config in force
//! ([`Layout::of`], pure but for looking up the runtime's own command on disk), then enforced by
//! a backend: [`bwrap`] (namespaces), or [`landlock`] (grants only) where nothing must be
//! hidden inside a grant and bubblewrap is not there or not asked for ([`choose`]).
//!
//! The layout is an allowlist: the system directories, the agent's own HOME, workspace and
//! agentDir, its `binds`, the config directory (read-only) and the files its command runs from
//! (read-only). deepcli's state directory and the other agents' directories are hidden even
//! where they lie inside one of those grants (the quickstart keeps its state inside the
//! checkout that also holds the agent's command).

pub(crate) mod bwrap;
pub(crate) mod cgroup;
pub(crate) mod egress;
pub(crate) mod explain;
mod host;
pub(crate) mod landlock;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::model::{
    BindMode, Sandbox as SandboxConfig, SandboxBackend, SandboxMode, SandboxNetwork,
    WorkspaceAccess,
};

pub(crate) use host::Host;

/// Where the sandbox's own sockets are, inside it.
pub(crate) const RUN_DIR: &str = "/run/deepcli";
/// The hub's MCP door inside a sandbox whose network is not the host's.
pub(crate) const HUB_SOCKET: &str = "/run/deepcli/hub.sock";
/// The egress proxy's socket inside an `allowlist` sandbox.
pub(crate) const EGRESS_SOCKET: &str = "/run/deepcli/egress.sock";
/// Where the in-sandbox forwarder listens for the runtime's proxied connections.
pub(crate) const PROXY_ADDR: &str = "127.0.0.1:3128";

/// The variables that point an `allowlist` runtime at [`PROXY_ADDR`].
pub(crate) const PROXY_ENV: [&str; 5] = [
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
    "ALL_PROXY",
];

/// The system directories every sandbox reads.
pub(crate) const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
];

/// The environment a runtime keeps of the controller's, whatever its config: everything else
/// is given by name (`runtime.env`, `runtime.inheritEnv`).
pub(crate) fn passes_through(name: &str) -> bool {
    matches!(name, "PATH" | "LANG" | "TZ" | "TERM") || name.starts_with("LC_")
}

/// An agent's network, as its sandbox gives it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub(crate) enum Network {
    /// Unrestricted: the controller's own.
    Host,
    /// None at all, loopback included.
    None,
    /// Only these host names (or `*.suffix` patterns), through the controller's egress proxy.
    Allowlist { domains: Vec<String> },
}

impl Network {
    pub(crate) fn describe(&self) -> String {
        match self {
            Network::Host => "network host".into(),
            Network::None => "network none".into(),
            Network::Allowlist { domains } => format!(
                "network allowlist: {}",
                crate::plural::plural(domains.len(), "domain", "domains")
            ),
        }
    }

    /// The runtime's network namespace is its own (no host address reachable).
    pub(crate) fn is_private(&self) -> bool {
        !matches!(self, Network::Host)
    }
}

/// One path granted inside the sandbox, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Grant {
    pub path: PathBuf,
    pub writable: bool,
    pub why: &'static str,
}

/// What one agent's sandbox gives it: the settings in force and every path, worked out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Layout {
    pub agent_id: String,
    pub backend: SandboxBackend,
    /// Readable and writable paths besides the system, in the order they are mounted.
    pub grants: Vec<Grant>,
    /// Paths that stay hidden even inside a grant: the state directory, other agents'.
    pub hidden: Vec<PathBuf>,
    /// `workspaceAccess: none`: the workspace path is an empty private directory.
    pub scratch: Option<PathBuf>,
    pub network: Network,
    /// The HOME the runtime is given.
    pub home: PathBuf,
}

/// Everything around an agent a layout needs: the directories that must stay hidden.
#[derive(Debug, Clone, Default)]
pub(crate) struct Surroundings {
    pub state_dir: PathBuf,
    pub config_dir: PathBuf,
    /// Every agent's id, workspace and agentDir.
    pub agents: Vec<(String, PathBuf, PathBuf)>,
    /// What `~/` means in `binds`.
    pub user_home: Option<PathBuf>,
    /// The files that hold deepcli's secrets: the config's (`{source: file}`), the cluster
    /// token's. Hidden wherever an agent could otherwise read them (`/etc`, the config
    /// directory, a bind).
    pub secret_files: Vec<PathBuf>,
}

impl Surroundings {
    /// The surroundings of every agent of `config`, whose state directory is `state_dir`.
    pub(crate) fn of(
        config: &crate::config::Config,
        state_dir: &Path,
        user_home: Option<&Path>,
    ) -> Surroundings {
        Surroundings {
            state_dir: real(state_dir),
            config_dir: real(&config.dir),
            agents: config
                .agents
                .iter()
                .map(|a| (a.id().to_string(), real(&a.workspace), real(&a.agent_dir)))
                .collect(),
            user_home: user_home.map(Path::to_path_buf),
            secret_files: config
                .secret_files()
                .into_iter()
                .map(|path| real(Path::new(path)))
                .collect(),
        }
    }
}

/// `path` made absolute, links resolved where it exists: mounts need the real path.
pub(crate) fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// The agent-side inputs of a layout.
pub(crate) struct Subject<'a> {
    pub agent_id: &'a str,
    pub workspace: &'a Path,
    pub agent_dir: &'a Path,
    pub home: &'a Path,
    /// `runtime.command`, program first.
    pub command: &'a [String],
    pub cwd: &'a Path,
    pub config: Option<&'a SandboxConfig>,
}

impl Layout {
    /// The sandbox of `agent`'s runtime (`None`: `sandbox.mode: off`, or a runtime kind that
    /// starts no process here); `home` expands `~/`.
    pub(crate) fn for_agent(
        agent: &crate::config::Agent,
        around: &Surroundings,
        home: Option<&Path>,
    ) -> Option<Layout> {
        let runtime = agent.spec.runtime.as_ref()?;
        if !runtime.kind.starts_process() {
            return None;
        }
        let command = runtime.command.clone().unwrap_or_default();
        Layout::of(
            &Subject {
                agent_id: agent.id(),
                workspace: &agent.workspace,
                agent_dir: &agent.agent_dir,
                home: &agent.agent_dir.join("home"),
                command: &command,
                cwd: &runtime_cwd(agent, home),
                config: agent.spec.sandbox.as_ref(),
            },
            around,
        )
    }

    /// The sandbox of `subject`, or `None` when its `sandbox.mode` is `off`.
    pub(crate) fn of(subject: &Subject<'_>, around: &Surroundings) -> Option<Layout> {
        let config = subject.config.cloned().unwrap_or_default();
        if config.mode.unwrap_or_default() == SandboxMode::Off {
            return None;
        }
        let (workspace, agent_dir, home) = (
            real(subject.workspace),
            real(subject.agent_dir),
            real(subject.home),
        );
        let access = config.workspace_access.unwrap_or_default();
        let mut grants = Vec::new();
        let mut grant = |path: PathBuf, writable: bool, why: &'static str| {
            if let Some(known) = grants.iter_mut().find(|g: &&mut Grant| g.path == path) {
                known.writable |= writable;
                return;
            }
            grants.push(Grant {
                path,
                writable,
                why,
            });
        };
        grant(around.config_dir.clone(), false, "the config directory");
        for path in command_paths(subject.command, &real(subject.cwd)) {
            grant(path, false, "the runtime's command");
        }
        if let Ok(me) = std::env::current_exe() {
            grant(me, false, "deepcli (the hub's MCP bridge)");
        }
        let scratch = match access {
            WorkspaceAccess::Rw => {
                grant(workspace.clone(), true, "its workspace");
                grant(agent_dir.clone(), true, "its agentDir");
                None
            }
            WorkspaceAccess::Ro => {
                grant(workspace.clone(), false, "its workspace");
                grant(agent_dir.clone(), false, "its agentDir");
                None
            }
            WorkspaceAccess::None => Some(workspace.clone()),
        };
        grant(home.clone(), true, "its HOME");
        for bind in config.binds.iter().flatten() {
            let path = crate::config::paths::resolve(
                &bind.path,
                &around.config_dir,
                around.user_home.as_deref(),
            );
            grant(real(&path), bind.mode == BindMode::Rw, "sandbox.binds");
        }
        let own = [&workspace, &agent_dir, &home];
        // The view is built from the grants alone: another agent's directory needs hiding only
        // where it lies inside one (listing the rest would restart every runtime whenever an
        // agent is added or removed).
        let mut hidden = vec![around.state_dir.clone()];
        for (id, workspace, agent_dir) in &around.agents {
            for dir in [workspace, agent_dir] {
                if id != subject.agent_id
                    && !dir.starts_with(&around.state_dir)
                    && grants.iter().any(|g| dir.starts_with(&g.path))
                {
                    hidden.push(dir.clone());
                }
            }
        }
        // isolation.md: the system is readable "minus deepcli's own files", and so is every
        // grant: a secret kept under `/etc` or beside the config is not the agent's.
        for file in &around.secret_files {
            if is_system(file) || grants.iter().any(|g| file.starts_with(&g.path)) {
                hidden.push(file.clone());
            }
        }
        // A hidden path that holds one of the agent's own stays: its own is mounted over it.
        hidden.retain(|h| !own.contains(&h));
        hidden.sort();
        hidden.dedup();
        let network = match config.network.unwrap_or_default() {
            SandboxNetwork::Host => Network::Host,
            SandboxNetwork::None => Network::None,
            SandboxNetwork::Allowlist => Network::Allowlist {
                domains: config.allowed_domains.clone().unwrap_or_default(),
            },
        };
        Some(Layout {
            agent_id: subject.agent_id.to_string(),
            backend: config.backend.unwrap_or_default(),
            grants,
            hidden,
            scratch,
            network,
            home,
        })
    }

    /// The hidden paths that lie inside a grant or the system, each with the readable path it
    /// lies in: what a backend that only grants (Landlock) cannot hide.
    pub(crate) fn hidden_inside(&self) -> Vec<(&Path, &Path)> {
        let readable = self
            .grants
            .iter()
            .map(|g| g.path.as_path())
            .chain(SYSTEM.iter().map(Path::new));
        let readable: Vec<&Path> = readable.collect();
        self.hidden
            .iter()
            .filter_map(|h| {
                let inside = readable.iter().find(|r| h.starts_with(r))?;
                Some((h.as_path(), *inside))
            })
            .collect()
    }

    /// Why Landlock cannot enforce this layout, whatever the host: a hidden path inside a
    /// readable one, `workspaceAccess: none`, or `network: allowlist`; `None`: it can.
    pub(crate) fn beyond_landlock(&self) -> Option<String> {
        if let Some((hidden, inside)) = self.hidden_inside().first() {
            return Some(format!(
                "{} must stay hidden but lies inside {}, which the agent may read, and Landlock only grants access: it cannot hide a path inside a granted one",
                hidden.display(),
                inside.display()
            ));
        }
        if self.scratch.is_some() {
            return Some("`workspaceAccess: none` puts an empty directory over the workspace, and Landlock cannot mount one".into());
        }
        if matches!(self.network, Network::Allowlist { .. }) {
            return Some("`network: allowlist` needs bubblewrap: Landlock's TCP rules name ports, not addresses, so the egress proxy's port would be open to every host".into());
        }
        None
    }
}

/// Where `agent`'s runtime starts: `runtime.cwd`, its workspace by default.
pub(crate) fn runtime_cwd(agent: &crate::config::Agent, home: Option<&Path>) -> PathBuf {
    match agent.spec.runtime.as_ref().and_then(|r| r.cwd.as_deref()) {
        None | Some("workspace") => agent.workspace.clone(),
        Some(path) => crate::config::paths::resolve(path, &agent.workspace, home),
    }
}

/// The environment's names (never values) a runtime of `agent` is given: what
/// [`passes_through`] of the controller's (where set), HOME, the proxy's for `allowlist`,
/// `runtime.env`, `runtime.inheritEnv` and `DEEPCLI_AGENT_ID`.
pub(crate) fn environment_names(
    agent: &crate::config::Agent,
    layout: Option<&Layout>,
) -> Vec<String> {
    let mut names: Vec<String> = ["PATH", "LANG", "TZ", "TERM"]
        .iter()
        .filter(|n| std::env::var_os(n).is_some())
        .map(|n| n.to_string())
        .collect();
    let mut lc: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("LC_"))
        .collect();
    lc.sort();
    names.extend(lc);
    names.push("HOME".into());
    if layout.is_some_and(|l| matches!(l.network, Network::Allowlist { .. })) {
        names.extend(PROXY_ENV.map(String::from));
    }
    if let Some(runtime) = &agent.spec.runtime {
        names.extend(runtime.env.keys().cloned());
        names.extend(runtime.inherit_env.iter().cloned());
    }
    names.push("DEEPCLI_AGENT_ID".into());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// A sandbox in one line, as `status` and `sandbox explain` show it: `all (bwrap, network
/// host)`, `all (landlock, network none; not contained: …)`, or `all (not applied, …)` when
/// no backend can enforce it here.
pub(crate) fn summary(layout: &Layout, host: &Host) -> String {
    match choose(layout, host) {
        Ok(choice) if choice.backend == LANDLOCK => format!(
            "all ({LANDLOCK}, {}; not contained: {})",
            layout.network.describe(),
            landlock_gaps(layout).join(", ")
        ),
        Ok(choice) => format!("all ({}, {})", choice.backend, layout.network.describe()),
        Err(_) => format!("all (not applied, {})", layout.network.describe()),
    }
}

/// What the Landlock backend leaves uncontained for `layout`, in short (docs/isolation.md).
pub(crate) fn landlock_gaps(layout: &Layout) -> Vec<&'static str> {
    let mut gaps = Vec::new();
    if layout.network == Network::None {
        gaps.push("UDP and Unix sockets");
    }
    gaps.push("the process list");
    gaps
}

/// The bubblewrap backend's name, as [`Choice::backend`] says it.
pub(crate) const BWRAP: &str = "bwrap";
/// The Landlock backend's name.
pub(crate) const LANDLOCK: &str = "landlock";

/// Which backend enforces a layout on this host, and why; or why none can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Choice {
    pub backend: &'static str,
    pub why: String,
}

/// Why a sandbox cannot be applied: the runtime is not started (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub(crate) struct Unavailable {
    pub why: String,
}

/// Why this host cannot run the Landlock backend at all (no Landlock, an ABI without signal
/// scoping, no cgroup to keep the runtime's processes in); `Ok`: its ABI.
pub(crate) fn landlock_on(host: &Host) -> Result<u8, String> {
    let abi = host
        .landlock
        .as_ref()
        .map_err(|e| format!("Landlock is not usable here ({e})"))?;
    if *abi < landlock::ABI_NEEDED {
        return Err(format!(
            "this kernel's Landlock ABI is {abi}, and deepcli needs ABI {} (Linux 6.12) to keep the runtime from signalling processes outside its sandbox",
            landlock::ABI_NEEDED
        ));
    }
    host.cgroup.as_ref().map_err(|e| {
        format!("no cgroup v2 group can be made to keep the runtime's processes together ({e})")
    })?;
    Ok(*abi)
}

/// The backend that enforces `layout` on `host`. `auto` takes bubblewrap where it is usable,
/// else Landlock where it can enforce this layout ([`Layout::beyond_landlock`],
/// [`landlock_on`]), else none: the runtime does not start.
pub(crate) fn choose(layout: &Layout, host: &Host) -> Result<Choice, Unavailable> {
    let install = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`), or set `sandbox.mode: off` on this agent explicitly";
    let landlock = || match layout.beyond_landlock() {
        Some(why) => Err(why),
        None => landlock_on(host),
    };
    match layout.backend {
        SandboxBackend::Auto => match &host.bwrap {
            Ok(path) => Ok(Choice {
                backend: BWRAP,
                why: format!(
                    "auto: bubblewrap ({}) enforces the whole contract: mount, PID and network namespaces",
                    path.display()
                ),
            }),
            Err(e) => match landlock() {
                Ok(abi) => Ok(Choice {
                    backend: LANDLOCK,
                    why: format!(
                        "auto: bubblewrap is not usable here ({e}); Landlock (ABI {abi}) can enforce this layout, as nothing hidden lies inside a path the agent may read (a cgroup holds its processes)"
                    ),
                }),
                Err(why_not) => Err(Unavailable {
                    why: format!(
                        "the sandbox cannot be applied: bubblewrap is not usable here ({e}), and Landlock cannot stand in for it: {why_not}; {install}"
                    ),
                }),
            },
        },
        SandboxBackend::Bwrap => match &host.bwrap {
            Ok(_) => Ok(Choice {
                backend: BWRAP,
                why: "sandbox.backend: bwrap".into(),
            }),
            Err(e) => Err(Unavailable {
                why: format!(
                    "the sandbox cannot be applied: bubblewrap is not usable here ({e}); {install}"
                ),
            }),
        },
        SandboxBackend::Landlock => match landlock() {
            Ok(abi) => Ok(Choice {
                backend: LANDLOCK,
                why: format!("sandbox.backend: landlock (ABI {abi}; a cgroup holds its processes)"),
            }),
            Err(why) => Err(Unavailable {
                why: format!(
                    "the sandbox cannot be applied: the landlock backend cannot enforce this agent's sandbox: {why}; use `backend: auto` (or `bwrap`) and {install}"
                ),
            }),
        },
        other => Err(Unavailable {
            why: format!(
                "the sandbox cannot be applied: backend `{}` is not built; use `auto`, `bwrap` or `landlock`",
                other.as_str()
            ),
        }),
    }
}

/// The files a runtime's command runs from, to be readable inside its sandbox: the program
/// (found on `PATH`, links followed) and every argument naming an existing file, each with the
/// package it belongs to — the nearest directory above holding `package.json` (and that
/// package's `node_modules`, wherever its link points), or for a file inside `node_modules`
/// the directory holding the outermost one. A file in none is granted alone. System paths are
/// readable anyway and left out.
pub(crate) fn command_paths(command: &[String], cwd: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let Some((program, args)) = command.split_first() else {
        return out;
    };
    let mut files = Vec::new();
    if program == "deepcli" {
        files.extend(std::env::current_exe().ok());
    } else if program.contains('/') {
        files.push(cwd.join(program));
    } else if let Some(found) = on_path(program) {
        files.push(found);
    }
    for arg in args {
        if arg.starts_with('-') || arg.contains('\n') {
            continue;
        }
        let path = cwd.join(arg);
        if path.is_file() {
            files.push(path);
        }
    }
    for file in files {
        let mut chain = vec![file.clone()];
        if let Ok(real) = std::fs::canonicalize(&file)
            && real != file
        {
            chain.push(real);
        }
        for file in chain {
            if is_system(&file) {
                continue;
            }
            for path in package_of(&file) {
                if !out.iter().any(|o| path.starts_with(o)) {
                    out.retain(|o| !o.starts_with(&path));
                    out.push(path);
                }
            }
        }
    }
    out
}

pub(crate) fn is_system(path: &Path) -> bool {
    SYSTEM.iter().any(|s| path.starts_with(s))
}

/// `program` found on the controller's `PATH`.
pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The package a file belongs to (see [`command_paths`]).
fn package_of(file: &Path) -> Vec<PathBuf> {
    let outermost_modules = file
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last();
    if let Some(modules) = outermost_modules
        && let Some(root) = modules.parent()
    {
        return vec![root.to_path_buf()];
    }
    let package = file
        .ancestors()
        .skip(1)
        .take_while(|a| a.parent().is_some())
        .find(|a| a.join("package.json").is_file());
    match package {
        Some(root) => {
            let mut paths = vec![root.to_path_buf()];
            if let Ok(real) = std::fs::canonicalize(root.join("node_modules"))
                && !real.starts_with(root)
            {
                // A linked node_modules (pnpm, a workspace, a folder kept elsewhere).
                paths.push(real);
            }
            paths
        }
        None => vec![file.to_path_buf()],
    }
}

#[cfg(test)]
mod tests;

/// One step of building the sandbox's file system view, in the order they are taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub(crate) enum Mount {
    /// A host path at the same path inside; `optional`: skipped when it does not exist.
    Bind {
        path: PathBuf,
        writable: bool,
        optional: bool,
    },
    /// An empty private directory over a path: what hides it.
    Empty { path: PathBuf },
    /// Nothing readable over a file (`/dev/null`, which the sandbox may not open): what
    /// hides a secret's file.
    Unreadable { path: PathBuf },
}

impl Layout {
    /// The mounts after the system's, shallowest first: a grant that holds a hidden path is
    /// mounted before the emptiness that hides it, and the agent's own directories (inside the
    /// state directory by default) after it. A grant inside a hidden path other than the
    /// agent's own is left out; a hidden path that does not exist, or that a shallower hidden
    /// path already covers, needs nothing.
    pub(crate) fn mounts(&self) -> Vec<Mount> {
        let own = |p: &Path| {
            self.grants.iter().any(|g| {
                g.path == p && matches!(g.why, "its workspace" | "its agentDir" | "its HOME")
            })
        };
        let mut steps: Vec<(usize, u8, Mount)> = Vec::new();
        for grant in &self.grants {
            let inside_hidden = self.hidden.iter().any(|h| grant.path.starts_with(h));
            if inside_hidden && !own(&grant.path) {
                continue;
            }
            steps.push((
                depth(&grant.path),
                1,
                Mount::Bind {
                    path: grant.path.clone(),
                    writable: grant.writable,
                    optional: !own(&grant.path),
                },
            ));
        }
        for hidden in &self.hidden {
            let covered = self.hidden.iter().any(|outer| {
                outer != hidden
                    && hidden.starts_with(outer)
                    && !self
                        .grants
                        .iter()
                        .any(|g| g.path.starts_with(outer) && hidden.starts_with(&g.path))
            });
            if covered || !hidden.exists() {
                continue;
            }
            let path = hidden.clone();
            let mount = if hidden.is_dir() {
                Mount::Empty { path }
            } else {
                Mount::Unreadable { path }
            };
            steps.push((depth(hidden), 0, mount));
        }
        if let Some(scratch) = &self.scratch {
            steps.push((
                depth(scratch),
                2,
                Mount::Empty {
                    path: scratch.clone(),
                },
            ));
        }
        steps.sort_by_key(|a| (a.0, a.1));
        steps.into_iter().map(|(_, _, m)| m).collect()
    }
}

fn depth(path: &Path) -> usize {
    path.components().count()
}
