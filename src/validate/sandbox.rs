//! Rules over `sandbox` (isolation.md) and what else a runtime is handed: an agent that runs
//! unsandboxed (`sandbox-off`), a channel account's secret in a runtime's environment
//! (`secret-shared-with-agent`), binds that would reach what the sandbox hides (`sandbox-bind`),
//! backends not built yet (`sandbox-backend-unbuilt`), `backend: landlock` where Landlock cannot
//! enforce the layout (`sandbox-landlock-unenforceable`), an allowlist that lets nothing through
//! (`network-allowlist-empty`), and the sandbox keys taken from OpenClaw that deepcli accepts but
//! does not act on (`not-enforced`).
//!
//! An agent's `sandbox` is merged with `agents.defaults.sandbox` key by key, so a finding about
//! an agent's effective value is reported where that value is written: in the agent, or once in
//! `agents.defaults`, naming the agents it holds for. The rules about what a sandbox does hold
//! for agents whose runtime runs sandboxed (`acp` or `process`, `mode` not `off`). Paths are
//! compared lexically, after the resolution the config's own paths get (`config::paths`): no
//! symlink is followed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::Context;
use crate::config::model::{
    BindMode, EnvValue, RuntimeKind, SandboxBackend, SandboxMode, SandboxNetwork, SandboxScope,
    Secret, SecretRef,
};
use crate::config::yaml::escape_pointer_token;
use crate::config::{Agent, FileKind, paths};
use crate::diagnostic::{Diagnostic, rules};

const FILE: FileKind = FileKind::Agents;
const DEFAULTS: &str = "/agents/defaults/sandbox";

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let running: Vec<&Agent> = cx.config.agents.iter().filter(|a| runs(a)).collect();
    sandbox_off(cx, &running, out);
    let sandboxed: Vec<&Agent> = running
        .iter()
        .copied()
        .filter(|a| mode(a) != SandboxMode::Off)
        .collect();
    backends(cx, &sandboxed, out);
    landlock(cx, &sandboxed, out);
    binds(cx, &sandboxed, out);
    network(cx, &sandboxed, out);
    per_session_keys(cx, &sandboxed, out);
    nothing_runs(cx, &running, out);
    shared_secrets(cx, out);
}

/// Whether deepcli starts a process for the agent (which the sandbox then holds).
fn runs(agent: &Agent) -> bool {
    agent.runtime_kind().starts_process()
}

fn mode(agent: &Agent) -> SandboxMode {
    agent
        .spec
        .sandbox
        .as_ref()
        .and_then(|s| s.mode)
        .unwrap_or_default()
}

/// Where the agent's effective `sandbox.<key>` is written: in its own `sandbox`, else in
/// `agents.defaults.sandbox`; `None` when it is written nowhere (the default holds).
fn written(cx: &Context<'_>, agent: &Agent, key: &str) -> Option<String> {
    if agent.index.is_some() {
        let own = format!("{}/sandbox/{key}", agent.pointer());
        if cx.exists(FILE, &own) {
            return Some(own);
        }
    }
    let defaults = format!("{DEFAULTS}/{key}");
    cx.exists(FILE, &defaults).then_some(defaults)
}

fn in_defaults(pointer: &str) -> bool {
    pointer.starts_with(DEFAULTS)
}

/// "agent `a`" or "agents `a`, `b`".
fn named(ids: &[&str]) -> String {
    let list: Vec<String> = ids.iter().map(|id| format!("`{id}`")).collect();
    match list.len() {
        1 => format!("agent {}", list[0]),
        _ => format!("agents {}", list.join(", ")),
    }
}

/// Findings about effective values, by where each value is written (and what is wrong with
/// it), with the agents it holds for: a value in `agents.defaults` is one finding, not one per
/// agent that inherits it.
struct Places<'a, K>(IndexMap<(String, K), Vec<&'a str>>);

impl<'a, K: std::hash::Hash + Eq> Places<'a, K> {
    fn new() -> Self {
        Places(IndexMap::new())
    }

    fn add(&mut self, pointer: String, what: K, agent: &'a Agent) {
        self.0.entry((pointer, what)).or_default().push(agent.id());
    }
}

/// `sandbox-off`: an unsandboxed runtime, and everything it starts, has the controller's access
/// to files, processes and the network (isolation.md).
fn sandbox_off(cx: &Context<'_>, running: &[&Agent], out: &mut Vec<Diagnostic>) {
    let mut places = Places::new();
    for agent in running.iter().filter(|a| mode(a) == SandboxMode::Off) {
        if let Some(pointer) = written(cx, agent, "mode") {
            places.add(pointer, (), agent);
        }
    }
    for ((pointer, ()), ids) in places.0 {
        let message = if in_defaults(&pointer) {
            let each = if ids.len() == 1 {
                "this agent"
            } else {
                "each of them"
            };
            format!(
                "`agents.defaults.sandbox.mode: off` leaves {} unsandboxed: {each} can read deepcli's state and operator token",
                named(&ids)
            )
        } else {
            format!(
                "{} runs unsandboxed (`sandbox.mode: off`): this agent can read deepcli's state and operator token",
                named(&ids)
            )
        };
        out.push(
            Diagnostic::new(rules::SANDBOX_OFF, message)
                .hint("remove `mode: off` (the sandbox is on by default): unsandboxed, the runtime and everything it starts can read state.db, the operator token and other agents' workspaces (docs/isolation.md)")
                .at(cx.at(FILE, &pointer)),
        );
    }
}

/// `sandbox-backend-unbuilt`: the runtime would refuse to start.
fn backends(cx: &Context<'_>, sandboxed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let mut places = Places::new();
    for agent in sandboxed {
        let backend = agent
            .spec
            .sandbox
            .as_ref()
            .and_then(|s| s.backend)
            .unwrap_or_default();
        if matches!(
            backend,
            SandboxBackend::Docker | SandboxBackend::Podman | SandboxBackend::Kubernetes
        ) && let Some(pointer) = written(cx, agent, "backend")
        {
            places.add(pointer, backend, agent);
        }
    }
    for ((pointer, backend), ids) in places.0 {
        out.push(
            Diagnostic::new(
                rules::SANDBOX_BACKEND_UNBUILT,
                format!(
                    "sandbox backend `{}` is refused until built: {} would not start",
                    backend.as_str(),
                    named(&ids)
                ),
            )
            .hint("use `auto` (the default: the strongest backend this host has), `bwrap` or `landlock`")
            .at(cx.at(FILE, &pointer)),
        );
    }
}

/// `sandbox-landlock-unenforceable`: `backend: landlock` on a layout only bubblewrap can
/// enforce (a hidden path inside a readable one, `workspaceAccess: none`, `network:
/// allowlist`): the runtime would not start. The layout is the one the runtime would get
/// ([`crate::sandbox::Layout::for_agent`]: its command looked up on disk), the reason the one
/// `status` would show.
fn landlock(cx: &Context<'_>, sandboxed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let home = cx.config.home.as_deref();
    let around = crate::sandbox::Surroundings::of(cx.config, &cx.config.state_dir, home);
    let mut places = Places::new();
    for agent in sandboxed {
        let backend = agent.spec.sandbox.as_ref().and_then(|s| s.backend);
        if backend != Some(SandboxBackend::Landlock) {
            continue;
        }
        let Some(why) = crate::sandbox::Layout::for_agent(agent, &around, home)
            .and_then(|layout| layout.beyond_landlock())
        else {
            continue;
        };
        if let Some(pointer) = written(cx, agent, "backend") {
            places.add(pointer, why, agent);
        }
    }
    for ((pointer, why), ids) in places.0 {
        out.push(
            Diagnostic::new(
                rules::SANDBOX_LANDLOCK_UNENFORCEABLE,
                format!(
                    "`backend: landlock` cannot enforce the sandbox of {}: {why}; it would not start",
                    named(&ids)
                ),
            )
            .hint("use `backend: auto` (the default) or `bwrap`, with bubblewrap installed; or change the layout (docs/isolation.md, \"Backends\")")
            .at(cx.at(FILE, &pointer)),
        );
    }
}

/// What a bind reaches that the sandbox must keep hidden (or, `rw`, read-only).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Reach {
    /// Neither absolute nor under `~`.
    Relative,
    /// deepcli's state directory: `how` the bind relates to it.
    State { how: &'static str, path: PathBuf },
    /// Another agent's workspace or agentDir.
    Agent {
        how: &'static str,
        what: &'static str,
        agent: String,
        path: PathBuf,
    },
    /// The config directory, bound `rw`.
    Config { how: &'static str, path: PathBuf },
}

impl Reach {
    fn message(&self, raw: &str) -> String {
        match self {
            Reach::Relative => format!(
                "bind `{raw}` is a relative path: a bind names a host path, absolute or under `~/`"
            ),
            Reach::State { how, path } => format!(
                "bind `{raw}` {how} deepcli's state directory {}",
                path.display()
            ),
            Reach::Agent {
                how,
                what,
                agent,
                path,
            } => format!(
                "bind `{raw}` {how} the {what} of agent `{agent}` ({})",
                path.display()
            ),
            Reach::Config { how, path } => format!(
                "`rw` bind `{raw}` {how} the config directory {}: an agent that could edit it would apply its own changes",
                path.display()
            ),
        }
    }
}

/// How `bind` relates to `protected`, if it reaches it: it is it, contains it, or lies inside
/// it. A bind inside one of the agent's own directories (`own`) grants nothing its sandbox does
/// not already, so lying inside `protected` is not counted there, unless that own directory is
/// itself `protected` or holds it.
fn reaches(bind: &Path, protected: &Path, own: &[&Path]) -> Option<&'static str> {
    if bind == protected {
        Some("is")
    } else if protected.starts_with(bind) {
        Some("contains")
    } else if bind.starts_with(protected)
        && !own
            .iter()
            .any(|o| bind.starts_with(o) && !protected.starts_with(o))
    {
        Some("lies inside")
    } else {
        None
    }
}

/// `sandbox-bind`: binds must name host paths, and never uncover what the sandbox hides:
/// deepcli's state directory, other agents' workspaces and agentDirs, and (for `rw`) the
/// config directory.
fn binds(cx: &Context<'_>, sandboxed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let home = cx.config.home.as_deref();
    let state = paths::normalize(&cx.config.state_dir);
    // The config directory as given may be relative to where deepcli runs.
    let config_dir = std::path::absolute(&cx.config.dir)
        .ok()
        .map(|d| paths::normalize(&d));
    let mut places: Places<'_, (String, Reach)> = Places::new();
    for agent in sandboxed {
        let Some(binds) = agent.spec.sandbox.as_ref().and_then(|s| s.binds.as_ref()) else {
            continue;
        };
        let Some(base) = written(cx, agent, "binds") else {
            continue;
        };
        let own = [agent.workspace.as_path(), agent.agent_dir.as_path()];
        for (i, bind) in binds.iter().enumerate() {
            let pointer = format!("{base}/{i}/path");
            let reach = if is_relative(&bind.path) {
                Some(Reach::Relative)
            } else if let Some(path) = paths::absolute(&bind.path, home) {
                first_reach(
                    cx,
                    agent,
                    &path,
                    bind.mode,
                    &own,
                    &state,
                    config_dir.as_deref(),
                )
            } else {
                // `~/…` with no home to expand it to: nothing to compare.
                None
            };
            if let Some(reach) = reach {
                places.add(pointer, (bind.path.clone(), reach), agent);
            }
        }
    }
    for ((pointer, (raw, reach)), ids) in places.0 {
        let mut message = reach.message(&raw);
        if in_defaults(&pointer) && reach != Reach::Relative {
            message = format!("{message} (for {})", named(&ids));
        }
        let hint = match reach {
            Reach::Relative => format!(
                "write it as an absolute path, or under your home: `~/{}`",
                raw.trim_start_matches("./")
            ),
            _ => "bind only paths that hold none of deepcli's state, no other agent's workspace or agentDir and, `rw`, not the config directory: the sandbox keeps those hidden whatever the binds say (docs/isolation.md)".to_string(),
        };
        out.push(
            Diagnostic::new(rules::SANDBOX_BIND, message)
                .hint(hint)
                .at(cx.at(FILE, &pointer)),
        );
    }
}

/// A bind path that is neither absolute nor `~` / `~/…`.
fn is_relative(raw: &str) -> bool {
    !(raw.starts_with('/') || raw == "~" || raw.starts_with("~/"))
}

/// The first protected path `path` reaches for `agent`: the state directory, another agent's
/// workspace or agentDir, the config directory (`rw` only).
fn first_reach(
    cx: &Context<'_>,
    agent: &Agent,
    path: &Path,
    mode: BindMode,
    own: &[&Path],
    state: &Path,
    config_dir: Option<&Path>,
) -> Option<Reach> {
    if let Some(how) = reaches(path, state, own) {
        return Some(Reach::State {
            how,
            path: state.to_path_buf(),
        });
    }
    for other in &cx.config.agents {
        if std::ptr::eq(other, agent) {
            continue;
        }
        for (what, dir) in [
            ("workspace", &other.workspace),
            ("agentDir", &other.agent_dir),
        ] {
            // A directory two agents share is this agent's own too (the sandbox grants it).
            if own.contains(&dir.as_path()) {
                continue;
            }
            if let Some(how) = reaches(path, dir, own) {
                return Some(Reach::Agent {
                    how,
                    what,
                    agent: other.id().to_string(),
                    path: dir.clone(),
                });
            }
        }
    }
    if mode == BindMode::Rw
        && let Some(config_dir) = config_dir
        && let Some(how) = reaches(path, config_dir, &[])
    {
        return Some(Reach::Config {
            how,
            path: config_dir.to_path_buf(),
        });
    }
    None
}

/// `network: allowlist` needs hosts (`network-allowlist-empty`), and `allowedDomains` needs
/// `network: allowlist` (`not-enforced`).
fn network(cx: &Context<'_>, sandboxed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let mut empty = Places::new();
    let mut unread = Places::new();
    for agent in sandboxed {
        let Some(sandbox) = &agent.spec.sandbox else {
            continue;
        };
        let network = sandbox.network.unwrap_or_default();
        let domains = sandbox.allowed_domains.as_deref();
        if network == SandboxNetwork::Allowlist
            && domains.is_none_or(<[String]>::is_empty)
            && let Some(pointer) = written(cx, agent, "network")
        {
            empty.add(pointer, (), agent);
        }
        if network != SandboxNetwork::Allowlist
            && domains.is_some()
            && let Some(pointer) = written(cx, agent, "allowedDomains")
        {
            unread.add(pointer, network, agent);
        }
    }
    for ((pointer, ()), ids) in empty.0 {
        out.push(
            Diagnostic::new(
                rules::NETWORK_ALLOWLIST_EMPTY,
                format!(
                    "`network: allowlist` with no `allowedDomains`: {} can reach no host (the egress proxy refuses every name)",
                    named(&ids)
                ),
            )
            .hint("list the hosts the agent needs in `allowedDomains` (e.g. `[api.openai.com, \"*.anthropic.com\"]`), or say `network: none`")
            .at(cx.at(FILE, &pointer)),
        );
    }
    for ((pointer, network), ids) in unread.0 {
        let network = match network {
            SandboxNetwork::Host => "`host` (unrestricted)",
            SandboxNetwork::None => "`none`",
            SandboxNetwork::Allowlist => "`allowlist`",
        };
        out.push(
            Diagnostic::new(
                rules::NOT_ENFORCED,
                format!(
                    "`sandbox.allowedDomains` is not enforced for {}: it is read with `network: allowlist` only, and the network is {network}",
                    named(&ids)
                ),
            )
            .hint("add `network: allowlist` to restrict the runtime to these hosts, or remove `allowedDomains`")
            .at(cx.at_key(FILE, &pointer)),
        );
    }
}

/// OpenClaw's per-session sandbox settings: deepcli sandboxes a runtime, one per agent.
fn per_session_keys(cx: &Context<'_>, sandboxed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let mut places = Places::new();
    for agent in sandboxed {
        let Some(sandbox) = &agent.spec.sandbox else {
            continue;
        };
        if sandbox.mode == Some(SandboxMode::NonMain)
            && let Some(pointer) = written(cx, agent, "mode")
        {
            places.add(pointer, "mode: non-main", agent);
        }
        let scope = match sandbox.scope {
            Some(SandboxScope::Session) => "scope: session",
            Some(SandboxScope::Shared) => "scope: shared",
            _ => continue,
        };
        if let Some(pointer) = written(cx, agent, "scope") {
            places.add(pointer, scope, agent);
        }
    }
    for ((pointer, key), ids) in places.0 {
        let (why, hint) = if key == "mode: non-main" {
            (
                "deepcli sandboxes a runtime, not a session: acts as `all`",
                "write `mode: all` (what happens), or `mode: off` to run unsandboxed",
            )
        } else {
            (
                "each agent's runtime has one sandbox",
                "remove `scope` (or write `scope: agent`, what happens)",
            )
        };
        out.push(
            Diagnostic::new(
                rules::NOT_ENFORCED,
                format!("`sandbox.{key}` is not enforced for {}: {why}", named(&ids)),
            )
            .hint(hint)
            .at(cx.at_key(FILE, &pointer)),
        );
    }
}

/// `sandbox` where nothing runs: on an agent whose runtime is `none` or `a2a`, and in
/// `agents.defaults` when no agent runs a runtime at all.
fn nothing_runs(cx: &Context<'_>, running: &[&Agent], out: &mut Vec<Diagnostic>) {
    let hint = "give the agent an `acp` or `process` runtime, or remove `sandbox`";
    for agent in cx.config.agents.iter().filter(|a| a.index.is_some()) {
        let pointer = format!("{}/sandbox", agent.pointer());
        let why = match agent.runtime_kind() {
            RuntimeKind::None => "`runtime.kind: none` runs no process",
            RuntimeKind::A2a => {
                "an `a2a` runtime is a remote agent: deepcli runs no process for it"
            }
            RuntimeKind::Acp | RuntimeKind::Process => continue,
        };
        if cx.exists(FILE, &pointer) {
            out.push(
                Diagnostic::new(
                    rules::NOT_ENFORCED,
                    format!("`sandbox` of agent `{}` is not enforced: {why}", agent.id()),
                )
                .hint(hint)
                .at(cx.at_key(FILE, &pointer)),
            );
        }
    }
    if running.is_empty() && cx.exists(FILE, DEFAULTS) {
        out.push(
            Diagnostic::new(
                rules::NOT_ENFORCED,
                "`agents.defaults.sandbox` is not enforced: no agent has an `acp` or `process` runtime, so nothing runs in a sandbox",
            )
            .hint(hint)
            .at(cx.at_key(FILE, DEFAULTS)),
        );
    }
}

/// A secret reference, compared as the runtime and the adapters resolve it: an environment
/// variable by name, a file by its path (lexically normalized; read as written).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SecretKey {
    Env(String),
    File(PathBuf),
}

impl SecretKey {
    fn of(reference: &SecretRef) -> SecretKey {
        match reference {
            SecretRef::Env { id } => SecretKey::Env(id.clone()),
            SecretRef::File { path } => SecretKey::File(paths::normalize(Path::new(path))),
        }
    }

    fn describe(&self) -> String {
        match self {
            SecretKey::Env(id) => format!("env `{id}`"),
            SecretKey::File(path) => format!("file `{}`", path.display()),
        }
    }
}

/// `secret-shared-with-agent`: a runtime given a channel account's credential can act as the
/// account on its platform, outside the inbound policy and approvals. Checked where each runtime
/// is written, as the other runtime rules are.
fn shared_secrets(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    const CHANNELS: FileKind = FileKind::Channels;
    // The first channel secret of each reference, with where it is and whose it is.
    let mut channel: HashMap<SecretKey, (String, String)> = HashMap::new();
    for ch in &cx.config.channels {
        for account in ch.accounts() {
            for (field, secret) in &account.spec.secrets {
                if let Secret::Ref(r) = secret {
                    channel.entry(SecretKey::of(r)).or_insert_with(|| {
                        (
                            format!("{}/{}", account.pointer(), escape_pointer_token(field)),
                            format!("`{field}` of {}:{}", ch.id, account.id),
                        )
                    });
                }
            }
        }
    }
    if let Some(a2a) = &cx.config.a2a {
        for (name, peer) in &a2a.peers {
            if let Secret::Ref(r) = &peer.token {
                channel.entry(SecretKey::of(r)).or_insert_with(|| {
                    (
                        format!("/a2a/peers/{}/token", escape_pointer_token(name)),
                        format!("the token of A2A peer `{name}`"),
                    )
                });
            }
        }
    }
    if channel.is_empty() {
        return;
    }
    let runtimes = std::iter::once((
        "/agents/defaults/runtime".to_string(),
        "`agents.defaults`".to_string(),
        cx.config.agent_defaults.runtime.as_ref(),
    ))
    .chain(
        cx.config
            .agents
            .iter()
            .filter(|a| a.index.is_some())
            .map(|a| {
                (
                    format!("{}/runtime", a.pointer()),
                    format!("agent `{}`", a.id()),
                    a.spec.runtime.as_ref(),
                )
            }),
    );
    for (base, whose, runtime) in runtimes {
        let Some(runtime) = runtime else { continue };
        if !matches!(runtime.kind, RuntimeKind::Acp | RuntimeKind::Process)
            || !cx.exists(FILE, &base)
        {
            continue;
        }
        let env = runtime.env.iter().filter_map(|(name, value)| {
            let reference = match value {
                EnvValue::Secret(r) => r.clone(),
                // `"${VAR}"` is the short form of `{source: env, id: VAR}` (runtime::process).
                EnvValue::Text(text) => match Secret::from_text(text) {
                    Secret::Ref(r) => r,
                    Secret::Inline(_) => return None,
                },
            };
            Some((
                format!("env `{name}`"),
                format!("{base}/env/{}", escape_pointer_token(name)),
                SecretKey::of(&reference),
            ))
        });
        let inherited = runtime.inherit_env.iter().enumerate().map(|(i, name)| {
            (
                format!("inheritEnv `{name}`"),
                format!("{base}/inheritEnv/{i}"),
                SecretKey::Env(name.clone()),
            )
        });
        for (what, pointer, key) in env.chain(inherited) {
            let Some((at, owner)) = channel.get(&key) else {
                continue;
            };
            out.push(
                Diagnostic::new(
                    rules::SECRET_SHARED_WITH_AGENT,
                    format!(
                        "{what} of {whose} hands the runtime the secret of {owner} ({})",
                        key.describe()
                    ),
                )
                .hint("give the agent a credential of its own: a runtime holding the account's secret can act as the account on its platform, outside deepcli's inbound policy and approvals")
                .at(cx.at(FILE, &pointer))
                .related(cx.at(CHANNELS, at), "the channel's secret"),
            );
        }
    }
}
