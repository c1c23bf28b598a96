//! From decoded files to the [`Config`] later stages consume: defaults applied, the implicit
//! `main` agent added, the default agent chosen, paths resolved.

use std::path::{Path, PathBuf};

use super::model::{
    AccountSpec, AgentDefaults, AgentSpec, AgentsFile, BindingSpec, CHANNEL_DEFAULTS, ChannelSpec,
    PolicySpec, SessionSection, ToolsSection,
};
use super::source::{FileKind, SourceFile, Sources};
use super::yaml::de::{self, DeError, Hidden};
use super::yaml::{self, Entry, Node, escape_pointer_token};
use super::{Completeness, LoadOptions, paths};
use crate::diagnostic::{Diagnostic, rules};
use crate::ids::{self, MAIN_AGENT};

/// The whole config: what later stages (routing, plan, apply, controller) consume.
#[derive(Debug, Clone)]
pub struct Config {
    /// The config directory as given.
    pub dir: PathBuf,
    /// The state directory the paths were resolved against ([`LoadOptions::state_dir`]).
    pub state_dir: PathBuf,
    /// What `~` meant in paths ([`LoadOptions::home`]).
    pub home: Option<PathBuf>,
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
    /// agents.yaml `state`: the retention of the state database's records.
    pub state: super::model::StateSection,
    pub channels: Vec<Channel>,
    /// `channels.defaults`: the inbound policy every channel inherits (policy.md).
    pub channel_defaults: PolicySpec,
    /// channels.yaml `a2a:`: the agents exposed over A2A and their peers (docs/a2a.md).
    pub a2a: Option<super::model::A2aSpec>,
    pub bindings: Vec<Binding>,
}

impl Config {
    /// The files that hold the config's secrets (`{source: file, path}`): an agent's
    /// `runtime.env` and `runtime.token`, a channel account's, an A2A peer's token. As written:
    /// a relative path is read from the controller's working directory.
    pub fn secret_files(&self) -> Vec<&str> {
        use super::model::{EnvValue, Secret, SecretRef};
        fn file(secret: &SecretRef) -> Option<&str> {
            match secret {
                SecretRef::File { path } => Some(path),
                SecretRef::Env { .. } => None,
            }
        }
        fn of(secret: &Secret) -> Option<&str> {
            match secret {
                Secret::Ref(reference) => file(reference),
                Secret::Inline(_) => None,
            }
        }
        let runtimes = self.agents.iter().filter_map(|a| a.spec.runtime.as_ref());
        let env = runtimes.clone().flat_map(|r| {
            r.env.values().filter_map(|v| match v {
                EnvValue::Secret(reference) => file(reference),
                EnvValue::Text(_) => None,
            })
        });
        let tokens = runtimes.filter_map(|r| r.token.as_ref().and_then(of));
        let accounts = self
            .channels
            .iter()
            .flat_map(|c| c.spec.accounts.values())
            .flat_map(|a| a.secrets.values().filter_map(of));
        let peers = self
            .a2a
            .iter()
            .flat_map(|a| a.peers.values())
            .filter_map(|p| of(&p.token));
        let mut out: Vec<&str> = env.chain(tokens).chain(accounts).chain(peers).collect();
        out.sort_unstable();
        out.dedup();
        out
    }
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

    /// Its `runtime.kind` (`none` when it has no runtime).
    pub fn runtime_kind(&self) -> super::model::RuntimeKind {
        self.spec
            .runtime
            .as_ref()
            .map(|r| r.kind)
            .unwrap_or_default()
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
    /// The agents with defaults applied and paths resolved, and the default agent's id, made
    /// on the thread that loaded agents.yaml ([`Decoded::resolve_agents`]).
    resolved: Option<(Vec<Agent>, String)>,
}

impl Decoded {
    /// Resolves the agents of a decoded agents.yaml: they need nothing of the other files.
    pub(super) fn resolve_agents(&mut self, options: &LoadOptions) {
        let list = std::mem::take(&mut self.agent_list);
        self.resolved = Some(agents(list, &self.agents.agents.defaults, options));
    }

    /// Takes what `other` decoded of a file of `kind` (decoded on its own, beside the others).
    pub(super) fn take(&mut self, other: Decoded, kind: FileKind) {
        match kind {
            FileKind::Agents => {
                self.agents = other.agents;
                self.agent_list = other.agent_list;
                self.resolved = other.resolved;
            }
            FileKind::Channels => {
                self.channels = other.channels;
                self.channel_defaults = other.channel_defaults;
                self.a2a = other.a2a;
            }
            FileKind::Bindings => self.bindings = other.bindings,
        }
    }

    /// A bindings.yaml's bindings, decoded as they were parsed (`super::load_lean`).
    pub(super) fn of_bindings(bindings: Vec<Binding>) -> Decoded {
        Decoded {
            bindings,
            ..Decoded::default()
        }
    }

    /// Decodes one schema-checked file straight from its tree, leaving out the top-level keys
    /// in `skip` (misplaced) and what `poisoned` takes out. An item left out for a schema error
    /// keeps its collection's other items at their indices. Returns whether a collection lost
    /// items.
    pub(super) fn decode(
        &mut self,
        file: &SourceFile,
        skip: &[String],
        poisoned: &Poisoned,
    ) -> Result<bool, Box<Diagnostic>> {
        let root = match (&file.root, poisoned) {
            (_, Poisoned::Whole) => return Ok(true),
            (None, _) => return Ok(false),
            (Some(root), _) => root,
        };
        let internal = |e: DeError| undecodable(file, &e);
        let items = match poisoned {
            Poisoned::Items(items) => items.as_slice(),
            _ => &[],
        };
        let out = Outcome::of(file.kind, root, items);
        let mut hidden = Hidden {
            skip: out.removed.clone(),
            empty: out.emptied.clone(),
        };
        if let yaml::Value::Map(entries) = &root.value {
            hidden
                .skip
                .extend(entries.iter().filter(|e| skip.iter().any(|k| *k == e.key)));
        }
        match file.kind {
            FileKind::Agents => {
                let list = root.pointer("/agents/list");
                hidden.empty.extend(list);
                self.agents = de::from_node_hiding(root, &hidden).map_err(internal)?;
                if let Some(list) = list {
                    let id_only = |id: &str| {
                        Some(AgentSpec {
                            id: id.to_string(),
                            ..AgentSpec::default()
                        })
                    };
                    self.agent_list =
                        decode_items(list, &out, id_only, |i, spec| (i, spec)).map_err(internal)?;
                }
            }
            FileKind::Channels => {
                let file: super::model::ChannelsFile =
                    de::from_node_hiding(root, &hidden).map_err(internal)?;
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
                if let Some(list) = root.child("bindings") {
                    // Only agents keep their ids (`Outcome::of`).
                    let id_only = |_: &str| None;
                    self.bindings =
                        decode_items(list, &out, id_only, |index, spec| Binding { index, spec })
                            .map_err(internal)?;
                }
            }
        }
        Ok(out.incomplete)
    }
}

/// The diagnostic of a file that passed its schema but could not be decoded: a deepcli bug.
pub(super) fn undecodable(file: &SourceFile, e: &DeError) -> Box<Diagnostic> {
    let at = match e.span {
        Some(span) => file.location("", span),
        None => file.locate(""),
    };
    Box::new(
        Diagnostic::new(
            rules::SCHEMA,
            format!("the file passed its schema but could not be decoded: {e}"),
        )
        .hint("this is a deepcli bug; please report it with the file")
        .at(at),
    )
}

/// What schema errors take out of a file before it is decoded.
#[derive(Debug, Default)]
pub(super) enum Poisoned {
    #[default]
    Nothing,
    /// An error above item level: nothing of the file is decoded.
    Whole,
    /// The pointers of the items errors fall in (one agent, binding, channel or account),
    /// sorted.
    Items(Vec<String>),
}

/// The items [`Poisoned::Items`] names, found in the tree.
#[derive(Default)]
struct Outcome<'a> {
    /// Sequence items left out; their neighbours keep their indices.
    dropped: rustc_hash::FxHashSet<usize>,
    /// Agents that keep only their id (valid and canonical), so references to them resolve.
    id_only: rustc_hash::FxHashMap<usize, &'a str>,
    /// Mapping entries left out (a channel).
    removed: Vec<&'a Entry>,
    /// Accounts decoded as empty: the key stays, so references to it resolve.
    emptied: Vec<&'a Node>,
    incomplete: bool,
}

impl<'a> Outcome<'a> {
    fn of(kind: FileKind, root: &'a Node, items: &[String]) -> Outcome<'a> {
        let mut out = Outcome::default();
        for item in items {
            let (parent, last) = item.rsplit_once('/').unwrap_or(("", item));
            let last = yaml::pointer_tokens(&format!("/{last}"))
                .next()
                .map(|t| t.into_owned())
                .unwrap_or_default();
            let account_level = kind == FileKind::Channels && parent.ends_with("/accounts");
            match root.pointer(parent).map(|p| &p.value) {
                Some(yaml::Value::Seq(list)) => {
                    let Some(slot) = last.parse::<usize>().ok().and_then(|i| list.get(i)) else {
                        continue;
                    };
                    let id = slot
                        .child("id")
                        .and_then(|id| match &id.value {
                            yaml::Value::String(id) => Some(id.as_str()),
                            _ => None,
                        })
                        .filter(|id| kind == FileKind::Agents && ids::is_canonical_id(id));
                    match id {
                        Some(id) => {
                            out.id_only.insert(address(slot), id);
                        }
                        None => {
                            out.dropped.insert(address(slot));
                            out.incomplete = true;
                        }
                    }
                }
                Some(yaml::Value::Map(entries)) => {
                    let Some(entry) = entries.iter().find(|e| e.key == last) else {
                        continue;
                    };
                    if account_level && !last.is_empty() {
                        out.emptied.push(&entry.value);
                    } else {
                        out.removed.push(entry);
                        out.incomplete = true;
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// A node's identity within its tree.
fn address(node: &Node) -> usize {
    std::ptr::from_ref(node) as usize
}

/// Items of a sequence below this many are decoded on the calling thread.
const PARALLEL_ITEMS: usize = 2048;

/// Decodes the items of the sequence `list` (`agents.list`, `bindings`), on every core when
/// there are many, skipping those `out` drops and nulls, each kept with its index.
/// `id_only` makes the stand-in of an item that keeps only its id.
fn decode_items<'a, S, T>(
    list: &'a Node,
    out: &Outcome<'a>,
    id_only: impl Fn(&str) -> Option<S> + Sync,
    make: impl Fn(usize, S) -> T + Sync,
) -> Result<Vec<T>, DeError>
where
    S: serde::Deserialize<'a>,
    T: Send,
{
    let yaml::Value::Seq(items) = &list.value else {
        return Ok(Vec::new());
    };
    // Into `decoded`: the first run goes straight into the list's own vector, sized for all.
    let decode_into = |decoded: &mut Vec<T>, start: usize, chunk: &'a [Node]| {
        for (i, item) in chunk.iter().enumerate() {
            let at = address(item);
            if matches!(item.value, yaml::Value::Null) || out.dropped.contains(&at) {
                continue;
            }
            let spec = match out.id_only.get(&at) {
                Some(id) => match id_only(id) {
                    Some(spec) => spec,
                    None => continue,
                },
                None => de::from_node(item)?,
            };
            decoded.push(make(start + i, spec));
        }
        Ok(())
    };
    let mut decoded = Vec::with_capacity(items.len());
    if items.len() < PARALLEL_ITEMS {
        decode_into(&mut decoded, 0, items)?;
        return Ok(decoded);
    }
    // The first run goes into `decoded` here while the others decode on threads of their own
    // into vectors appended after it: a copy of a part of the list, not of all of it.
    let (here, runs) = crate::threads::map_runs(
        items,
        |first| decode_into(&mut decoded, 0, first),
        |start, run| {
            let mut decoded = Vec::with_capacity(run.len());
            decode_into(&mut decoded, start, run).map(|()| decoded)
        },
    );
    here?;
    for run in runs {
        decoded.extend(run?);
    }
    Ok(decoded)
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
        resolved,
    } = decoded;
    let (agents, default_agent) =
        resolved.unwrap_or_else(|| self::agents(agent_list, &file.agents.defaults, options));
    Config {
        dir: dir.to_path_buf(),
        state_dir: options.state_dir.clone(),
        home: options.home.clone(),
        sources,
        complete,
        agents,
        default_agent,
        agent_defaults: file.agents.defaults.clone(),
        tools: file.tools,
        session: file.session,
        state: file.state,
        channels,
        channel_defaults,
        a2a,
        bindings,
    }
}

/// Every agent (those listed, in order, then an implicit `main` when none is listed), with
/// defaults applied and paths resolved; and the default agent's id.
fn agents(
    list: Vec<(usize, AgentSpec)>,
    defaults: &super::model::AgentDefaults,
    options: &LoadOptions,
) -> (Vec<Agent>, String) {
    let mut agents: Vec<Agent> = list
        .into_iter()
        .map(|(index, spec)| agent(Some(index), spec, defaults, options))
        .collect();
    if !agents.iter().any(|a| a.id() == MAIN_AGENT) {
        let spec = AgentSpec {
            id: MAIN_AGENT.to_string(),
            ..AgentSpec::default()
        };
        agents.push(agent(None, spec, defaults, options));
    }
    let default_agent = agents
        .iter()
        .find(|a| a.spec.default == Some(true) && a.index.is_some())
        .or_else(|| agents.iter().find(|a| a.index.is_some()))
        .map_or_else(|| MAIN_AGENT.to_string(), |a| a.id().to_string());
    (agents, default_agent)
}

fn agent(
    index: Option<usize>,
    own: AgentSpec,
    defaults: &super::model::AgentDefaults,
    options: &LoadOptions,
) -> Agent {
    let spec = AgentSpec {
        model: own.model.or_else(|| defaults.model.clone()),
        skip_bootstrap: own.skip_bootstrap.or(defaults.skip_bootstrap),
        runtime: own.runtime.or_else(|| defaults.runtime.clone()),
        tools: own.tools.or_else(|| defaults.tools.clone()),
        sandbox: super::model::Sandbox::merged(own.sandbox, defaults.sandbox.as_ref()),
        heartbeat: own.heartbeat.or_else(|| defaults.heartbeat.clone()),
        group_chat: own.group_chat.or_else(|| defaults.group_chat.clone()),
        subagents: own.subagents.or_else(|| defaults.subagents.clone()),
        budgets: own.budgets.or_else(|| defaults.budgets.clone()),
        identity: own.identity.or_else(|| defaults.identity.clone()),
        permissions: own.permissions.or_else(|| defaults.permissions.clone()),
        bootstrap_max_chars: own.bootstrap_max_chars.or(defaults.bootstrap_max_chars),
        artifact_max_bytes: own.artifact_max_bytes.or(defaults.artifact_max_bytes),
        artifact_quota_bytes: own.artifact_quota_bytes.or(defaults.artifact_quota_bytes),
        ..own
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
