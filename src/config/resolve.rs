//! From decoded files to the [`Config`] later stages consume: defaults applied, the implicit
//! `main` agent added, the default agent chosen, paths resolved.

use std::path::{Path, PathBuf};

use super::model::{
    AccountSpec, AgentDefaults, AgentSpec, AgentsFile, BindingSpec, CHANNEL_DEFAULTS, ChannelSpec,
    PolicySpec, SessionSection, ToolsSection,
};
use super::source::{FileKind, SourceFile, Sources};
use super::yaml::escape_pointer_token;
use super::{Completeness, LoadOptions, paths};
use crate::diagnostic::{Diagnostic, rules};
use crate::ids::{self, MAIN_AGENT};

/// The whole config: what later stages (routing, plan, apply, controller) consume.
#[derive(Debug, Clone)]
pub struct Config {
    /// The config directory as given.
    pub dir: PathBuf,
    /// The files as read, for turning pointers back into positions.
    pub sources: Sources,
    /// Which collections are complete (no item was dropped for a schema error).
    pub complete: Completeness,
    /// Every agent: those listed, in order, plus an implicit `main` last when none is listed.
    pub agents: Vec<Agent>,
    /// Id of the default agent (routing.md §5).
    pub default_agent: String,
    /// `agents.defaults` as written (already merged into every agent's effective spec).
    pub agent_defaults: AgentDefaults,
    pub tools: ToolsSection,
    pub session: SessionSection,
    pub channels: Vec<Channel>,
    /// `channels.defaults`: the inbound policy every channel inherits (policy.md).
    pub channel_defaults: PolicySpec,
    /// channels.yaml `a2a:`: the agents exposed over A2A and their peers (docs/a2a.md).
    pub a2a: Option<super::model::A2aSpec>,
    pub bindings: Vec<Binding>,
}

/// An agent with defaults applied and paths resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// Position in `agents.list`; `None` for the implicit `main`.
    pub index: Option<usize>,
    /// The effective spec: the agent's own fields, then `agents.defaults`.
    pub spec: AgentSpec,
    pub workspace: PathBuf,
    pub agent_dir: PathBuf,
    /// The session store, beside the agentDir (`<agentDir>/../sessions`).
    pub sessions_dir: PathBuf,
}

impl Agent {
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// JSON pointer of the agent's entry in agents.yaml.
    pub fn pointer(&self) -> String {
        self.index
            .map_or_else(String::new, |i| format!("/agents/list/{i}"))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    /// The channel id as written (a key of `channels`).
    pub id: String,
    pub spec: ChannelSpec,
}

impl Channel {
    pub fn pointer(&self) -> String {
        format!("/channels/{}", escape_pointer_token(&self.id))
    }

    /// The accounts with their normalized ids, in file order.
    pub fn accounts(&self) -> impl Iterator<Item = Account<'_>> {
        self.spec.accounts.iter().map(|(id, spec)| Account {
            channel: &self.id,
            id,
            normalized: ids::account_id(id).into_owned(),
            spec,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Account<'a> {
    pub channel: &'a str,
    /// The id as written.
    pub id: &'a str,
    /// The id the router uses.
    pub normalized: String,
    pub spec: &'a AccountSpec,
}

impl Account<'_> {
    pub fn pointer(&self) -> String {
        format!(
            "/channels/{}/accounts/{}",
            escape_pointer_token(self.channel),
            escape_pointer_token(self.id)
        )
    }
}

/// A binding with its position in bindings.yaml.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub index: usize,
    pub spec: BindingSpec,
}

impl Binding {
    pub fn pointer(&self) -> String {
        format!("/bindings/{}", self.index)
    }
}

/// The three files decoded into their typed shapes.
#[derive(Debug, Default)]
pub(super) struct Decoded {
    agents: AgentsFile,
    /// `agents.list` entries with their positions in the file.
    agent_list: Vec<(usize, AgentSpec)>,
    channels: Vec<Channel>,
    channel_defaults: PolicySpec,
    a2a: Option<super::model::A2aSpec>,
    bindings: Vec<Binding>,
}

impl Decoded {
    /// Decodes one schema-checked file. Nulls in item lists stand for items dropped for schema
    /// errors and are skipped, keeping the others' indices.
    pub(super) fn decode(
        &mut self,
        file: &SourceFile,
        mut json: serde_json::Value,
    ) -> Result<(), Box<Diagnostic>> {
        if json.is_null() {
            return Ok(());
        }
        let internal = |e: serde_json::Error| {
            Box::new(
                Diagnostic::new(
                    rules::SCHEMA,
                    format!("the file passed its schema but could not be decoded: {e}"),
                )
                .hint("this is a deepcli bug; please report it with the file")
                .at(file.locate("")),
            )
        };
        match file.kind {
            FileKind::Agents => {
                let list = json
                    .get_mut("agents")
                    .and_then(serde_json::Value::as_object_mut)
                    .and_then(|agents| agents.shift_remove("list"));
                self.agents = serde_json::from_value(json).map_err(internal)?;
                if let Some(serde_json::Value::Array(items)) = list {
                    self.agent_list.reserve(items.len());
                    for (index, item) in items.into_iter().enumerate() {
                        if !item.is_null() {
                            let spec = serde_json::from_value(item).map_err(internal)?;
                            self.agent_list.push((index, spec));
                        }
                    }
                }
            }
            FileKind::Channels => {
                let file: super::model::ChannelsFile =
                    serde_json::from_value(json).map_err(internal)?;
                self.channels = Vec::with_capacity(file.channels.len());
                self.a2a = file.a2a;
                for (id, spec) in file.channels {
                    // The schema lets `defaults` hold only policy keys.
                    if id == CHANNEL_DEFAULTS {
                        self.channel_defaults = spec.policy;
                    } else {
                        self.channels.push(Channel { id, spec });
                    }
                }
            }
            FileKind::Bindings => {
                let items = match json.get_mut("bindings").map(serde_json::Value::take) {
                    Some(serde_json::Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                self.bindings.reserve(items.len());
                for (index, item) in items.into_iter().enumerate() {
                    if item.is_null() {
                        continue;
                    }
                    let spec = serde_json::from_value(item).map_err(internal)?;
                    self.bindings.push(Binding { index, spec });
                }
            }
        }
        Ok(())
    }
}

pub(super) fn resolve(
    dir: &Path,
    sources: Sources,
    decoded: Decoded,
    complete: Completeness,
    options: &LoadOptions,
) -> Config {
    let Decoded {
        agents: file,
        agent_list,
        channels,
        channel_defaults,
        a2a,
        bindings,
    } = decoded;
    let defaults = &file.agents.defaults;
    let mut agents: Vec<Agent> = agent_list
        .iter()
        .map(|(index, spec)| agent(Some(*index), spec, defaults, options))
        .collect();
    if !agents.iter().any(|a| a.id() == MAIN_AGENT) {
        let spec = AgentSpec {
            id: MAIN_AGENT.to_string(),
            ..AgentSpec::default()
        };
        agents.push(agent(None, &spec, defaults, options));
    }
    let default_agent = agents
        .iter()
        .find(|a| a.spec.default == Some(true) && a.index.is_some())
        .or_else(|| agents.iter().find(|a| a.index.is_some()))
        .map_or_else(|| MAIN_AGENT.to_string(), |a| a.id().to_string());
    Config {
        dir: dir.to_path_buf(),
        sources,
        complete,
        agents,
        default_agent,
        agent_defaults: file.agents.defaults.clone(),
        tools: file.tools,
        session: file.session,
        channels,
        channel_defaults,
        a2a,
        bindings,
    }
}

fn agent(
    index: Option<usize>,
    own: &AgentSpec,
    defaults: &super::model::AgentDefaults,
    options: &LoadOptions,
) -> Agent {
    let spec = AgentSpec {
        model: own.model.clone().or_else(|| defaults.model.clone()),
        skip_bootstrap: own.skip_bootstrap.or(defaults.skip_bootstrap),
        runtime: own.runtime.clone().or_else(|| defaults.runtime.clone()),
        tools: own.tools.clone().or_else(|| defaults.tools.clone()),
        sandbox: own.sandbox.clone().or_else(|| defaults.sandbox.clone()),
        heartbeat: own.heartbeat.clone().or_else(|| defaults.heartbeat.clone()),
        group_chat: own
            .group_chat
            .clone()
            .or_else(|| defaults.group_chat.clone()),
        subagents: own.subagents.clone().or_else(|| defaults.subagents.clone()),
        budgets: own.budgets.clone().or_else(|| defaults.budgets.clone()),
        identity: own.identity.clone().or_else(|| defaults.identity.clone()),
        permissions: own
            .permissions
            .clone()
            .or_else(|| defaults.permissions.clone()),
        ..own.clone()
    };
    let state = &options.state_dir;
    let home = options.home.as_deref();
    let id = &spec.id;
    let workspace = match &spec.workspace {
        Some(raw) => paths::resolve(raw, state, home),
        None => state.join("workspaces").join(id),
    };
    let agent_dir = match &spec.agent_dir {
        Some(raw) => paths::resolve(raw, state, home),
        None => state.join("agents").join(id).join("agent"),
    };
    let sessions_dir = agent_dir
        .parent()
        .map_or_else(|| agent_dir.join("sessions"), |p| p.join("sessions"));
    Agent {
        index,
        spec,
        workspace,
        agent_dir,
        sessions_dir,
    }
}
