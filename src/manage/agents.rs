//! `agents list | add | set-identity | bindings | bind | unbind | delete` (and the JSON-RPC
//! `update`): the service functions and their result shapes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::edit::{Step, Yaml, index, key};
use super::files::Change;
use super::identity::{self, IdentityFields};
use super::live::ModelStatus;
use super::{ManageContext, ManageError, Result, Written, did_you_mean};
use crate::config::model::{BindingSpec, BindingType, MatchSpec, Model};
use crate::config::{Config, FileKind};
use crate::ids::{self, MAIN_AGENT};
use crate::routing::scope::{MatchKey, Scope};
use crate::state::RuntimePhase;

// ---- --bind CHANNEL[:ACCOUNT] ---------------------------------------------------------------

/// One `--bind CHANNEL[:ACCOUNT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindTarget {
    pub channel: String,
    pub account: Option<String>,
}

impl BindTarget {
    /// Parses `telegram` or `telegram:work`.
    pub fn parse(raw: &str) -> Result<BindTarget> {
        let hint = "write --bind CHANNEL or --bind CHANNEL:ACCOUNT, e.g. --bind telegram:work";
        let text = raw.trim();
        let (channel, account) = match text.split_once(':') {
            Some((c, a)) => (c.trim(), Some(a.trim())),
            None => (text, None),
        };
        if channel.is_empty() {
            return Err(ManageError::usage(
                format!("`--bind {raw}` names no channel"),
                hint,
            ));
        }
        if account.is_some_and(|a| a.is_empty() || a.contains(':')) {
            return Err(ManageError::usage(
                format!("`--bind {raw}`: the account after `:` is empty or has another `:`"),
                hint,
            ));
        }
        if channel.contains(char::is_whitespace) {
            return Err(ManageError::usage(
                format!("`--bind {raw}`: a channel id has no spaces"),
                hint,
            ));
        }
        Ok(BindTarget {
            channel: channel.to_string(),
            account: account.map(str::to_string),
        })
    }

    fn matcher(&self) -> MatchSpec {
        MatchSpec {
            channel: self.channel.clone(),
            account_id: self.account.clone(),
            ..MatchSpec::default()
        }
    }

    fn label(&self) -> String {
        match &self.account {
            Some(a) => format!("{}:{a}", self.channel),
            None => self.channel.clone(),
        }
    }

    fn yaml(&self, agent: &str) -> Yaml {
        let mut m = vec![("channel".to_string(), Yaml::str(&self.channel))];
        if let Some(a) = &self.account {
            m.push(("accountId".to_string(), Yaml::str(a)));
        }
        Yaml::Map(vec![
            ("agentId".to_string(), Yaml::str(agent)),
            ("match".to_string(), Yaml::FlowMap(m)),
        ])
    }
}

/// Parses every `--bind`; errors name the first bad one.
pub fn parse_binds<S: AsRef<str>>(raw: &[S]) -> Result<Vec<BindTarget>> {
    raw.iter().map(|r| BindTarget::parse(r.as_ref())).collect()
}

// ---- results ---------------------------------------------------------------------------------

/// A binding as `agents bindings` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    pub agent_id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `telegram:work`, `discord guild 123 roles [456]`.
    pub description: String,
    #[serde(rename = "match")]
    pub matcher: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// `bindings.yaml:12`.
    pub location: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingsResult {
    pub bindings: Vec<BindingView>,
}

/// A bind that another agent already owns.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    pub bind: String,
    /// The agent that owns it.
    pub agent_id: String,
    pub location: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindResult {
    pub agent_id: String,
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub skipped: Vec<String>,
    pub conflicts: Vec<Conflict>,
    pub written: Written,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnbindResult {
    pub agent_id: String,
    pub removed: Vec<String>,
    pub missing: Vec<String>,
    pub conflicts: Vec<Conflict>,
    pub written: Written,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddResult {
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The workspace and agentDir the agent gets (resolved).
    pub workspace: PathBuf,
    pub agent_dir: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `main` was implicit and got listed first, so that the new agent does not become the
    /// default agent by being the first one listed.
    pub listed_main: bool,
    pub bindings: BindResult,
    pub written: Written,
    /// Who creates the agent's directories next: the controller running on the state
    /// directory (its pid), or, without one, `deepcli apply` there.
    pub applied_by: AppliedBy,
}

/// Who applies a management edit.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", tag = "by")]
pub enum AppliedBy {
    /// `deepcli up` runs on the state directory: it applies the edit as soon as it sees it.
    Controller { pid: u32 },
    /// `deepcli up` runs on the state directory but watches another config directory: it
    /// never sees the edit, and `deepcli apply` is refused while it runs.
    Elsewhere { pid: u32, config_dir: PathBuf },
    /// No controller runs on the state directory: `deepcli apply` there does.
    Apply { state_dir: PathBuf },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetIdentityResult {
    pub agent_id: String,
    /// The identity written.
    pub identity: IdentityFields,
    /// Per field: `flag` or `IDENTITY.md`.
    pub sources: indexmap::IndexMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<PathBuf>,
    pub written: Written,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteResult {
    pub agent_id: String,
    pub removed_bindings: usize,
    pub removed_allow: usize,
    pub removed_allow_agents: usize,
    /// The paths the next apply moves to trash.
    pub trash: Vec<PathBuf>,
    /// Paths of the agent that stay where they are, and why.
    pub kept: Vec<KeptPath>,
    pub written: Written,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptPath {
    pub path: PathBuf,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub id: String,
    pub name: Option<String>,
    pub default: bool,
    pub identity: IdentityFields,
    /// `config`, `IDENTITY.md`, `config+IDENTITY.md`, or null.
    pub identity_source: Option<&'static str>,
    pub workspace: PathBuf,
    pub agent_dir: PathBuf,
    pub model: Option<String>,
    /// What became of `model`: `{wanted, applied, why}` (`applied` null: not applied, `why`
    /// says why); absent when the agent sets no model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_status: Option<ModelStatus>,
    pub runtime: RuntimeView,
    /// One line per route: `telegram:work`, `default (messages no binding matches)`.
    pub routes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bindings: Option<Vec<BindingView>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeView {
    pub kind: &'static str,
    /// The live status (`ready`, `crash-loop`, …); null when unknown.
    pub status: Option<RuntimePhase>,
    pub pid: Option<i64>,
    /// Messages waiting in the agent's sessions, plus those being answered (from a running
    /// controller only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u64>,
    /// Hub runs into the agent's sessions not yet final (from a running controller only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_runs: Option<u64>,
    /// Its sandbox in one line, as the running controller applies it (`all (bwrap, network
    /// host)`), else as the config asks (`all (auto, network host)`, `off`); absent for a
    /// runtime that starts no process here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResult {
    pub agents: Vec<AgentView>,
    pub default_agent: String,
    /// Where runtime status came from: `controller`, `state`, or null.
    pub status_source: Option<&'static str>,
}

// ---- requests --------------------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddRequest {
    pub name: String,
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub agent_dir: Option<String>,
    #[serde(default)]
    pub bind: Vec<String>,
    /// The runtime's kind: `acp`, `process` or `none` [default: agents.defaults, else none].
    #[serde(default)]
    pub runtime: Option<String>,
    /// The runtime's command and its arguments (with `acp` or `process`).
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetIdentityRequest {
    pub agent_id: String,
    #[serde(default)]
    pub from_identity: bool,
    #[serde(default)]
    pub identity_file: Option<PathBuf>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub emoji: Option<String>,
    #[serde(default)]
    pub theme: Option<String>,
    #[serde(default)]
    pub avatar: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

// ---- helpers ---------------------------------------------------------------------------------

fn find_agent<'c>(config: &'c Config, id: &str) -> Result<&'c crate::config::Agent> {
    let wanted = ids::agent_id(id);
    config
        .agents
        .iter()
        .find(|a| ids::agent_id(a.id()) == wanted)
        .ok_or_else(|| {
            ManageError::not_found(
                format!("there is no agent `{id}`"),
                did_you_mean(id, config.agents.iter().map(|a| a.id()))
                    .or_else(|| Some("list the agents with `deepcli agents list`".to_string())),
            )
        })
}

fn location(config: &Config, b: &crate::config::Binding) -> String {
    let line = config
        .sources
        .locate(FileKind::Bindings, &b.pointer())
        .map_or(0, |l| l.span.start.line);
    format!("bindings.yaml:{line}")
}

fn is_route(b: &BindingSpec) -> bool {
    b.kind == BindingType::Route
}

fn match_key(m: &MatchSpec) -> MatchKey {
    Scope::from_spec(m).match_key()
}

fn same_agent(a: &str, b: &str) -> bool {
    ids::agent_id(a) == ids::agent_id(b)
}

/// `{channel: telegram}` and nothing else.
fn channel_only(m: &MatchSpec) -> bool {
    m.account_id.is_none()
        && m.peer.is_none()
        && m.guild_id.is_none()
        && m.team_id.is_none()
        && m.roles.as_ref().is_none_or(Vec::is_empty)
}

fn view(config: &Config, b: &crate::config::Binding) -> BindingView {
    let mut matcher = serde_json::to_value(&b.spec.matcher).unwrap_or_default();
    crate::plan::desired::strip_nulls(&mut matcher);
    BindingView {
        agent_id: b.spec.agent_id.clone(),
        kind: match b.spec.kind {
            BindingType::Route => "route",
            BindingType::Acp => "acp",
        },
        description: crate::plan::desired::describe_binding(&b.spec),
        matcher,
        comment: b.spec.comment.clone(),
        location: location(config, b),
    }
}

fn model_text(model: &Option<Model>) -> Option<String> {
    model.as_ref().map(|m| match m {
        Model::Id(id) => id.clone(),
        Model::WithFallbacks { primary, .. } => primary.clone(),
    })
}

fn config_identity(spec: &crate::config::model::AgentSpec) -> IdentityFields {
    let i = spec.identity.clone().unwrap_or_default();
    IdentityFields {
        name: i.name,
        emoji: i.emoji,
        theme: i.theme,
        avatar: i.avatar,
    }
}

fn identity_file_fields(path: &std::path::Path) -> IdentityFields {
    std::fs::read_to_string(path)
        .map(|t| identity::parse(&t))
        .unwrap_or_default()
}

// ---- list and bindings -----------------------------------------------------------------------

pub fn list(ctx: &ManageContext, with_bindings: bool) -> Result<ListResult> {
    let change = Change::read(ctx)?;
    let config = change.current(ctx);
    let live = super::live::read(ctx);
    let agents = config
        .agents
        .iter()
        .map(|agent| {
            let from_config = config_identity(&agent.spec);
            let from_file = identity_file_fields(&agent.workspace.join("IDENTITY.md"));
            let identity_source = match (from_config.is_empty(), from_file.is_empty()) {
                (false, true) => Some("config"),
                (true, false) => Some("IDENTITY.md"),
                (false, false) if from_config.clone().or(from_file.clone()) != from_config => {
                    Some("config+IDENTITY.md")
                }
                (false, false) => Some("config"),
                (true, true) => None,
            };
            let mine: Vec<&crate::config::Binding> = config
                .bindings
                .iter()
                .filter(|b| same_agent(&b.spec.agent_id, agent.id()))
                .collect();
            let is_default = config.default_agent == agent.id();
            let mut routes: Vec<String> = mine
                .iter()
                .map(|b| crate::plan::desired::describe_binding(&b.spec))
                .collect();
            if is_default {
                routes.push("default (messages no binding matches)".into());
            }
            let kind = agent
                .spec
                .runtime
                .as_ref()
                .map_or("none", |r| r.kind.as_str());
            let runtime_live = live.runtime(agent.id());
            let model_status = agent.spec.model.as_ref().map(|model| {
                let wanted = match model {
                    Model::Id(id) => id.clone(),
                    Model::WithFallbacks { primary, .. } => primary.clone(),
                };
                let kind = agent.spec.runtime.as_ref().map(|r| r.kind).unwrap_or_default();
                let live = runtime_live.and_then(|r| r.model.clone());
                let not_applied = |why: &str| ModelStatus {
                    wanted: wanted.clone(),
                    applied: None,
                    why: Some(why.to_string()),
                };
                match (kind.applies_model(), live) {
                    (Err(why), _) => not_applied(why),
                    (Ok(()), Some(live)) => live,
                    (Ok(()), None) => not_applied(
                        "unknown here: `deepcli up` applies it to the agent's ACP sessions and reports it while it runs",
                    ),
                }
            });
            AgentView {
                id: agent.id().to_string(),
                name: agent.spec.name.clone(),
                default: is_default,
                identity: from_config.or(from_file),
                identity_source,
                workspace: agent.workspace.clone(),
                agent_dir: agent.agent_dir.clone(),
                model: model_text(&agent.spec.model),
                model_status,
                runtime: RuntimeView {
                    kind,
                    status: runtime_live.and_then(|r| r.status),
                    pid: runtime_live.and_then(|r| r.pid),
                    queue_depth: runtime_live.and_then(|r| r.queue_depth),
                    active_runs: runtime_live.and_then(|r| r.active_runs),
                    sandbox: runtime_live
                        .and_then(|r| r.sandbox.clone())
                        .or_else(|| configured_sandbox(agent)),
                },
                routes,
                bindings: with_bindings.then(|| mine.iter().map(|b| view(&config, b)).collect()),
            }
        })
        .collect();
    Ok(ListResult {
        agents,
        default_agent: config.default_agent.clone(),
        status_source: live.source,
    })
}

pub fn bindings(ctx: &ManageContext, agent: Option<&str>) -> Result<BindingsResult> {
    let change = Change::read(ctx)?;
    let config = change.current(ctx);
    let wanted = match agent {
        Some(id) => Some(find_agent(&config, id)?.id().to_string()),
        None => None,
    };
    Ok(BindingsResult {
        bindings: config
            .bindings
            .iter()
            .filter(|b| {
                wanted
                    .as_deref()
                    .is_none_or(|w| same_agent(&b.spec.agent_id, w))
            })
            .map(|b| view(&config, b))
            .collect(),
    })
}

// ---- bind / unbind ---------------------------------------------------------------------------

/// Plans the binds onto `change` (no write). Returns the result with an empty `written`.
fn plan_bind(
    change: &mut Change,
    config: &Config,
    agent: &str,
    targets: &[BindTarget],
) -> Result<BindResult> {
    let mut result = BindResult {
        agent_id: agent.to_string(),
        added: Vec::new(),
        updated: Vec::new(),
        skipped: Vec::new(),
        conflicts: Vec::new(),
        written: Written::default(),
    };
    let mut seen: HashSet<MatchKey> = HashSet::new();
    let mut upgraded: HashSet<usize> = HashSet::new();
    let mut to_add: Vec<&BindTarget> = Vec::new();
    let mut to_upgrade: Vec<(usize, &BindTarget)> = Vec::new();
    for target in targets {
        let key = match_key(&target.matcher());
        if !seen.insert(key.clone()) {
            result.skipped.push(target.label());
            continue;
        }
        let owner = config
            .bindings
            .iter()
            .filter(|b| is_route(&b.spec) && !upgraded.contains(&b.index))
            .find(|b| match_key(&b.spec.matcher) == key);
        if let Some(owner) = owner {
            if same_agent(&owner.spec.agent_id, agent) {
                result.skipped.push(target.label());
            } else {
                result.conflicts.push(Conflict {
                    bind: target.label(),
                    agent_id: owner.spec.agent_id.clone(),
                    location: location(config, owner),
                });
            }
            continue;
        }
        let upgrade = target.account.as_ref().and_then(|_| {
            config.bindings.iter().find(|b| {
                is_route(&b.spec)
                    && same_agent(&b.spec.agent_id, agent)
                    && channel_only(&b.spec.matcher)
                    && ids::channel(&b.spec.matcher.channel) == ids::channel(&target.channel)
                    && !upgraded.contains(&b.index)
            })
        });
        match upgrade {
            Some(b) => {
                upgraded.insert(b.index);
                to_upgrade.push((b.index, target));
                result.updated.push(target.label());
            }
            None => {
                to_add.push(target);
                result.added.push(target.label());
            }
        }
    }
    if !result.conflicts.is_empty() {
        return Ok(result);
    }
    for (i, target) in to_upgrade {
        let account = target.account.clone().unwrap_or_default();
        change.edit(FileKind::Bindings, |doc| {
            doc.set(
                &[key("bindings"), index(i), key("match"), key("accountId")],
                &Yaml::Str(account),
            )
        })?;
    }
    for target in to_add {
        change.edit(FileKind::Bindings, |doc| {
            doc.append(&[key("bindings")], &target.yaml(agent))
        })?;
    }
    Ok(result)
}

pub fn bind(
    ctx: &ManageContext,
    agent: &str,
    targets: &[BindTarget],
    dry_run: bool,
) -> Result<BindResult> {
    if targets.is_empty() {
        return Err(ManageError::usage(
            "nothing to bind",
            "pass --bind CHANNEL[:ACCOUNT] at least once",
        ));
    }
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let agent = find_agent(&config, agent)?.id().to_string();
    let mut result = plan_bind(&mut change, &config, &agent, targets)?;
    if result.conflicts.is_empty() {
        result.written = change.commit(ctx, dry_run)?;
    } else {
        result.written.dry_run = dry_run;
    }
    Ok(result)
}

pub fn unbind(
    ctx: &ManageContext,
    agent: &str,
    targets: &[BindTarget],
    all: bool,
    dry_run: bool,
) -> Result<UnbindResult> {
    if targets.is_empty() && !all {
        return Err(ManageError::usage(
            "nothing to unbind",
            "pass --bind CHANNEL[:ACCOUNT] at least once, or --all",
        ));
    }
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let agent = find_agent(&config, agent)?.id().to_string();
    let mut result = UnbindResult {
        agent_id: agent.clone(),
        removed: Vec::new(),
        missing: Vec::new(),
        conflicts: Vec::new(),
        written: Written {
            dry_run,
            ..Written::default()
        },
    };
    let mut remove: Vec<usize> = Vec::new();
    if all {
        for b in &config.bindings {
            if is_route(&b.spec) && same_agent(&b.spec.agent_id, &agent) {
                remove.push(b.index);
                result
                    .removed
                    .push(crate::plan::desired::describe_binding(&b.spec));
            }
        }
    }
    for target in targets {
        let key = match_key(&target.matcher());
        let found: Vec<&crate::config::Binding> = config
            .bindings
            .iter()
            .filter(|b| is_route(&b.spec) && match_key(&b.spec.matcher) == key)
            .collect();
        let mine: Vec<usize> = found
            .iter()
            .filter(|b| same_agent(&b.spec.agent_id, &agent))
            .map(|b| b.index)
            .collect();
        if !mine.is_empty() {
            for i in mine {
                if !remove.contains(&i) {
                    remove.push(i);
                    result.removed.push(target.label());
                }
            }
        } else if let Some(other) = found.first() {
            result.conflicts.push(Conflict {
                bind: target.label(),
                agent_id: other.spec.agent_id.clone(),
                location: location(&config, other),
            });
        } else if !all {
            result.missing.push(target.label());
        }
    }
    if !result.conflicts.is_empty() {
        return Ok(result);
    }
    remove.sort_unstable();
    for i in remove.into_iter().rev() {
        change.edit(FileKind::Bindings, |doc| {
            doc.remove(&[key("bindings"), index(i)])
        })?;
    }
    result.written = change.commit(ctx, dry_run)?;
    Ok(result)
}

// ---- add -------------------------------------------------------------------------------------

/// The `runtime:` an added agent gets: `{kind, command}` from `--runtime KIND -- COMMAND…`.
fn runtime_of(request: &AddRequest) -> Result<Option<Yaml>> {
    let kind = match request.runtime.as_deref() {
        None if request.command.is_empty() => return Ok(None),
        None => "acp",
        Some(kind) => kind,
    };
    match (kind, request.command.is_empty()) {
        ("acp" | "process", false) => Ok(Some(Yaml::FlowMap(vec![
            ("kind".into(), Yaml::str(kind)),
            (
                "command".into(),
                Yaml::Seq(request.command.iter().map(Yaml::str).collect()),
            ),
        ]))),
        ("acp" | "process", true) => Err(ManageError::usage(
            format!("a `{kind}` runtime needs the command that starts it"),
            "put it after `--`: deepcli agents add coder --runtime acp -- codex-acp",
        )),
        ("none", true) => Ok(Some(Yaml::FlowMap(vec![(
            "kind".into(),
            Yaml::str("none"),
        )]))),
        ("none", false) => Err(ManageError::usage(
            "a `none` runtime runs no command",
            "drop the command, or pass --runtime acp or process",
        )),
        (other, _) => Err(ManageError::usage(
            format!("`{other}` is not a runtime kind deepcli starts"),
            "--runtime is acp, process or none (an A2A remote is written in agents.yaml: docs/a2a.md)",
        )),
    }
}

pub fn add(ctx: &ManageContext, request: &AddRequest) -> Result<AddResult> {
    let name = request.name.trim();
    let id = ids::agent_id(name).into_owned();
    if !ids::is_canonical_id(&id) {
        return Err(ManageError::usage(
            format!("`{name}` cannot be an agent id"),
            "an agent id is lowercase letters, digits, `_` and `-`, starting with a letter or digit (at most 64)",
        ));
    }
    let targets = parse_binds(&request.bind)?;
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    if config.agents.iter().any(|a| same_agent(a.id(), &id)) {
        return Err(ManageError::refused(
            format!("an agent `{id}` already exists"),
            "pick another name, or change it with `deepcli agents set-identity` / `bind`",
        ));
    }
    let listed_main = !config.agents.iter().any(|a| a.index.is_some());
    let list_path = [key("agents"), key("list")];
    if listed_main {
        change.edit(FileKind::Agents, |doc| {
            doc.append(
                &list_path,
                &Yaml::Map(vec![("id".into(), Yaml::str(MAIN_AGENT))]),
            )
        })?;
    }
    let mut item = vec![("id".to_string(), Yaml::str(&id))];
    if name != id {
        item.push(("name".into(), Yaml::str(name)));
    }
    if let Some(w) = &request.workspace {
        item.push(("workspace".into(), Yaml::str(w)));
    }
    if let Some(d) = &request.agent_dir {
        item.push(("agentDir".into(), Yaml::str(d)));
    }
    if let Some(m) = &request.model {
        item.push(("model".into(), Yaml::str(m)));
    }
    if let Some(runtime) = runtime_of(request)? {
        item.push(("runtime".into(), runtime));
    }
    change.edit(FileKind::Agents, |doc| {
        doc.append(&list_path, &Yaml::Map(item))
    })?;
    let bindings = plan_bind(&mut change, &config, &id, &targets)?;
    // The would-be config says where the agent lives.
    let would_be = change.validate(ctx).config;
    let placed = would_be.agents.iter().find(|a| a.id() == id);
    let mut result = AddResult {
        agent_id: id.clone(),
        name: (name != id).then(|| name.to_string()),
        workspace: placed.map(|a| a.workspace.clone()).unwrap_or_default(),
        agent_dir: placed.map(|a| a.agent_dir.clone()).unwrap_or_default(),
        model: placed.and_then(|a| model_text(&a.spec.model)),
        listed_main,
        bindings,
        written: Written {
            dry_run: request.dry_run,
            ..Written::default()
        },
        applied_by: applied_by(ctx),
    };
    if result.bindings.conflicts.is_empty() {
        result.written = change.commit(ctx, request.dry_run)?;
        result.bindings.written = result.written.clone();
    }
    Ok(result)
}

// ---- set-identity ----------------------------------------------------------------------------

/// The agent's entry in `agents.list`, listing an implicit `main` first when needed.
fn list_index(change: &mut Change, config: &Config, agent: &str) -> Result<usize> {
    let found = find_agent(config, agent)?;
    if let Some(i) = found.index {
        return Ok(i);
    }
    let items = change
        .doc(FileKind::Agents)
        .get(&[key("agents"), key("list")])
        .ok()
        .flatten()
        .and_then(|node| match node.value {
            crate::config::yaml::Value::Seq(items) => Some(items.len()),
            _ => None,
        })
        .unwrap_or(0);
    change.edit(FileKind::Agents, |doc| {
        doc.append(
            &[key("agents"), key("list")],
            &Yaml::Map(vec![("id".into(), Yaml::str(MAIN_AGENT))]),
        )
    })?;
    Ok(items)
}

pub fn set_identity(
    ctx: &ManageContext,
    request: &SetIdentityRequest,
) -> Result<SetIdentityResult> {
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let agent = find_agent(&config, &request.agent_id)?.clone();
    let flags = IdentityFields {
        name: request.name.clone(),
        emoji: request.emoji.clone(),
        theme: request.theme.clone(),
        avatar: request.avatar.clone(),
    };
    let mut identity_file = None;
    let mut from_file = IdentityFields::default();
    if request.from_identity || request.identity_file.is_some() {
        let path = request
            .identity_file
            .clone()
            .unwrap_or_else(|| agent.workspace.join("IDENTITY.md"));
        let text = std::fs::read_to_string(&path).map_err(|e| {
            ManageError::not_found(
                format!("cannot read `{}`: {e}", path.display()),
                Some("pass the file with --identity-file PATH, or set the fields with --name/--emoji/--theme/--avatar".into()),
            )
        })?;
        from_file = identity::parse(&text);
        identity_file = Some(path);
    }
    let merged = flags.clone().or(from_file);
    if merged.is_empty() {
        return Err(ManageError::usage(
            format!("nothing to set for agent `{}`", agent.id()),
            "pass --name, --emoji, --theme or --avatar, or --from-identity to read IDENTITY.md",
        ));
    }
    let mut sources = indexmap::IndexMap::new();
    let i = list_index(&mut change, &config, agent.id())?;
    for (field, value, flag) in [
        ("name", &merged.name, &flags.name),
        ("emoji", &merged.emoji, &flags.emoji),
        ("theme", &merged.theme, &flags.theme),
        ("avatar", &merged.avatar, &flags.avatar),
    ] {
        let Some(value) = value else { continue };
        sources.insert(
            field.to_string(),
            if flag.is_some() {
                "flag"
            } else {
                "IDENTITY.md"
            }
            .to_string(),
        );
        let path = [
            key("agents"),
            key("list"),
            index(i),
            key("identity"),
            key(field),
        ];
        change.edit(FileKind::Agents, |doc| doc.set(&path, &Yaml::str(value)))?;
    }
    let written = change.commit(ctx, request.dry_run)?;
    Ok(SetIdentityResult {
        agent_id: agent.id().to_string(),
        identity: merged,
        sources,
        identity_file,
        written,
    })
}

// ---- delete ----------------------------------------------------------------------------------

pub fn delete(ctx: &ManageContext, agent: &str, dry_run: bool) -> Result<DeleteResult> {
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let found = find_agent(&config, agent)?.clone();
    let id = found.id().to_string();
    if id == MAIN_AGENT {
        return Err(ManageError::refused(
            "`main` cannot be deleted: it always exists",
            "delete another agent, or change main's settings instead",
        ));
    }
    let Some(list_i) = found.index else {
        return Err(ManageError::not_found(
            format!("agent `{id}` is not listed"),
            None,
        ));
    };
    // References first (bindings, allow lists), the agent last: the files are written in this
    // order, and a config whose references are gone is valid at every step.
    let mut removed_bindings = 0;
    let mut doomed: Vec<usize> = config
        .bindings
        .iter()
        .filter(|b| same_agent(&b.spec.agent_id, &id))
        .map(|b| b.index)
        .collect();
    doomed.sort_unstable();
    for i in doomed.into_iter().rev() {
        change.edit(FileKind::Bindings, |doc| {
            doc.remove(&[key("bindings"), index(i)])
        })?;
        removed_bindings += 1;
    }
    let agents_doc = change.doc(FileKind::Agents).clone();
    let prune = |path: Vec<Step>, change: &mut Change| -> Result<usize> {
        let entries = agents_doc
            .get(&path)
            .ok()
            .flatten()
            .and_then(|node| match node.value {
                crate::config::yaml::Value::Seq(items) => Some(items),
                _ => None,
            })
            .unwrap_or_default();
        let mut n = 0;
        for (i, entry) in entries.iter().enumerate().rev() {
            if let crate::config::yaml::Value::String(e) = &entry.value
                && same_agent(e, &id)
            {
                let mut item = path.clone();
                item.push(index(i));
                change.edit(FileKind::Agents, |doc| doc.remove(&item))?;
                n += 1;
            }
        }
        Ok(n)
    };
    let removed_allow = prune(
        vec![key("tools"), key("agentToAgent"), key("allow")],
        &mut change,
    )?;
    let mut removed_allow_agents = prune(
        vec![
            key("agents"),
            key("defaults"),
            key("subagents"),
            key("allowAgents"),
        ],
        &mut change,
    )?;
    for other in config.agents.iter().filter(|a| a.id() != id) {
        if let Some(i) = other.index {
            removed_allow_agents += prune(
                vec![
                    key("agents"),
                    key("list"),
                    index(i),
                    key("subagents"),
                    key("allowAgents"),
                ],
                &mut change,
            )?;
        }
    }
    change.edit(FileKind::Agents, |doc| {
        doc.remove(&[key("agents"), key("list"), index(list_i)])
    })?;
    let (trash, kept) = trash_preview(ctx, &change, &id)?;
    let written = change.commit(ctx, dry_run)?;
    Ok(DeleteResult {
        agent_id: id,
        removed_bindings,
        removed_allow,
        removed_allow_agents,
        trash,
        kept,
        written,
    })
}

/// What the next apply of the would-be config does with the agent's directories: the plan's
/// own trash moves (so this cannot disagree with `deepcli plan`).
fn trash_preview(
    ctx: &ManageContext,
    change: &Change,
    id: &str,
) -> Result<(Vec<PathBuf>, Vec<KeptPath>)> {
    let state = ctx.state_dir();
    let Some(store) = crate::state::StateStore::open_existing(&state)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let guard = crate::plan::guard(&ctx.config_dir, &ctx.load);
    let prepared = crate::plan::prepare(crate::plan::Inputs {
        config: crate::plan::Source::Checked(Box::new(change.validate(ctx))),
        live: move || store.snapshot().map(Some),
        state: &state,
        sight: crate::plan::Sight::Observe(None),
        options: crate::plan::Options {
            allow_destroy: true,
            allow_mass_delete: true,
            allow_empty: true,
            guard: &guard,
        },
        render_routing: false,
    });
    // The change was validated before this preview: a refusal here says nothing new.
    let Ok(crate::plan::Prepared { plan, .. }) = prepared else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut trash = Vec::new();
    let mut kept = Vec::new();
    for action in plan.actions {
        if let crate::plan::Action::DeleteAgent { id: a, moves, .. } = action
            && a == id
        {
            for m in moves {
                // From a directory deepcli did not create, only its own files go.
                trash.extend(
                    m.files
                        .into_iter()
                        .filter(|f| f.state != crate::plan::FileState::Missing)
                        .map(|f| f.path),
                );
                match m.kept {
                    None => trash.push(m.path),
                    Some(reason) => kept.push(KeptPath {
                        path: m.path,
                        reason,
                    }),
                }
            }
        }
    }
    Ok((trash, kept))
}

// ---- update (JSON-RPC only) ------------------------------------------------------------------

/// `_mustang.agent/agents/update`: a patch of identity, name, workspace, agentDir, model,
/// runtime and bindings (`{add: [...], remove: [...]}` of `CHANNEL[:ACCOUNT]`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateRequest {
    pub agent_id: String,
    #[serde(default)]
    pub patch: UpdatePatch,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdatePatch {
    pub name: Option<String>,
    pub identity: Option<std::collections::BTreeMap<String, String>>,
    pub workspace: Option<String>,
    pub agent_dir: Option<String>,
    pub model: Option<String>,
    pub runtime: Option<Value>,
    pub policy: Option<Value>,
    pub bindings: Option<BindingsPatch>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingsPatch {
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateResult {
    pub agent_id: String,
    /// The fields the patch set.
    pub changed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bindings: Option<BindResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unbound: Option<Vec<String>>,
    pub written: Written,
}

/// JSON → the YAML value to write (flow style below the first level).
fn yaml_of(value: &Value) -> Yaml {
    match value {
        Value::Null => Yaml::Str(String::new()),
        Value::Bool(b) => Yaml::Bool(*b),
        Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Yaml::Str(n.to_string()), Yaml::Int),
        Value::String(s) => Yaml::Str(s.clone()),
        Value::Array(items) => Yaml::Seq(items.iter().map(yaml_of).collect()),
        Value::Object(map) => {
            Yaml::FlowMap(map.iter().map(|(k, v)| (k.clone(), yaml_of(v))).collect())
        }
    }
}

pub fn update(ctx: &ManageContext, request: &UpdateRequest) -> Result<UpdateResult> {
    let patch = &request.patch;
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let id = find_agent(&config, &request.agent_id)?.id().to_string();
    let i = list_index(&mut change, &config, &id)?;
    let base = [key("agents"), key("list"), index(i)];
    let mut changed = Vec::new();
    let mut set = |change: &mut Change, field: &str, value: Yaml| -> Result<()> {
        let mut path = base.to_vec();
        path.extend(field.split('.').map(key));
        change.edit(FileKind::Agents, |doc| doc.set(&path, &value))?;
        changed.push(field.to_string());
        Ok(())
    };
    if let Some(v) = &patch.name {
        set(&mut change, "name", Yaml::str(v))?;
    }
    for (field, v) in patch.identity.iter().flatten() {
        if !["name", "emoji", "theme", "avatar"].contains(&field.as_str()) {
            return Err(ManageError::usage(
                format!("unknown identity field `{field}`"),
                "identity fields are name, emoji, theme and avatar",
            ));
        }
        set(&mut change, &format!("identity.{field}"), Yaml::str(v))?;
    }
    if let Some(v) = &patch.workspace {
        set(&mut change, "workspace", Yaml::str(v))?;
    }
    if let Some(v) = &patch.agent_dir {
        set(&mut change, "agentDir", Yaml::str(v))?;
    }
    if let Some(v) = &patch.model {
        set(&mut change, "model", Yaml::str(v))?;
    }
    if let Some(v) = &patch.runtime {
        set(&mut change, "runtime", yaml_of(v))?;
    }
    if let Some(Value::Object(policy)) = &patch.policy {
        // Policy: the agent's tools, sandbox and subagents settings.
        for (field, v) in policy {
            if !["tools", "sandbox", "subagents", "protect"].contains(&field.as_str()) {
                return Err(ManageError::usage(
                    format!("unknown policy field `{field}`"),
                    "policy fields are tools, sandbox, subagents and protect",
                ));
            }
            set(&mut change, field, yaml_of(v))?;
        }
    }
    let mut bindings = None;
    let mut unbound = None;
    if let Some(bp) = &patch.bindings {
        let add = parse_binds(&bp.add)?;
        let remove = parse_binds(&bp.remove)?;
        let result = plan_bind(&mut change, &config, &id, &add)?;
        if !result.conflicts.is_empty() {
            return Ok(UpdateResult {
                agent_id: id,
                changed: Vec::new(),
                bindings: Some(result),
                unbound: None,
                written: Written {
                    dry_run: request.dry_run,
                    ..Written::default()
                },
            });
        }
        let mut doomed: Vec<(usize, String)> = Vec::new();
        for target in &remove {
            let key_ = match_key(&target.matcher());
            for b in &config.bindings {
                if is_route(&b.spec)
                    && same_agent(&b.spec.agent_id, &id)
                    && match_key(&b.spec.matcher) == key_
                {
                    doomed.push((b.index, target.label()));
                }
            }
        }
        doomed.sort();
        for (i, _) in doomed.iter().rev() {
            change.edit(FileKind::Bindings, |doc| {
                doc.remove(&[key("bindings"), index(*i)])
            })?;
        }
        unbound = Some(doomed.into_iter().map(|(_, l)| l).collect());
        bindings = Some(result);
    }
    let written = change.commit(ctx, request.dry_run)?;
    if let Some(b) = bindings.as_mut() {
        b.written = written.clone();
    }
    Ok(UpdateResult {
        agent_id: id,
        changed,
        bindings,
        unbound,
        written,
    })
}

/// Who applies an edit made now: the controller that runs on the state directory, if one does.
fn applied_by(ctx: &ManageContext) -> AppliedBy {
    let live = super::live::read(ctx);
    let same = |watched: &Path| {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        canonical(watched) == canonical(&ctx.config_dir)
    };
    match (live.controller_pid, live.controller_config) {
        (Some(pid), Some(config_dir)) if !same(&config_dir) => {
            AppliedBy::Elsewhere { pid, config_dir }
        }
        (Some(pid), _) => AppliedBy::Controller { pid },
        (None, _) => AppliedBy::Apply {
            state_dir: ctx.state_dir().root().to_path_buf(),
        },
    }
}

/// What `agent`'s config asks of its sandbox, in one line; `None` when it starts no process.
fn configured_sandbox(agent: &crate::config::Agent) -> Option<String> {
    use crate::config::model::{SandboxMode, SandboxNetwork};
    if !agent.runtime_kind().starts_process() {
        return None;
    }
    let sandbox = agent.spec.sandbox.clone().unwrap_or_default();
    if sandbox.mode == Some(SandboxMode::Off) {
        return Some("off".into());
    }
    let network = match sandbox.network.unwrap_or_default() {
        SandboxNetwork::Host => "network host".to_string(),
        SandboxNetwork::None => "network none".to_string(),
        SandboxNetwork::Allowlist => format!(
            "network allowlist: {}",
            crate::plural::plural(
                sandbox.allowed_domains.as_ref().map_or(0, Vec::len),
                "domain",
                "domains"
            )
        ),
    };
    Some(format!(
        "all ({}, {network})",
        sandbox.backend.unwrap_or_default().as_str()
    ))
}
