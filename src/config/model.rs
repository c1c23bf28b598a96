//! Typed shapes of the three files, exactly as written (camelCase, unknown keys rejected).
//!
//! These are decoded only after the JSON Schema accepted the file, so a decoding error here
//! means the schema and these types disagree: a bug, reported as such. Defaults and path
//! resolution happen in `resolve`, not here.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentsFile {
    #[serde(default)]
    pub agents: AgentsSection,
    #[serde(default)]
    pub tools: ToolsSection,
    #[serde(default)]
    pub session: SessionSection,
    #[serde(default)]
    pub state: StateSection,
}

/// agents.yaml `state`: the state database's own settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StateSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

/// `state.retention`: how long each kind of record is kept; a kind left out is kept forever.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Retention {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcripts: Option<TranscriptRetention>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Days>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Days>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<Days>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<Days>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<Days>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_tasks: Option<Days>,
}

impl Retention {
    /// Each kind kept by age, as `state.retention` names it, with its days, in a fixed order.
    pub fn by_age(&self) -> Vec<(&'static str, u32)> {
        [
            ("transcripts", self.transcripts.and_then(|t| t.days)),
            ("deliveries", self.deliveries.map(|d| d.days)),
            ("runs", self.runs.map(|d| d.days)),
            ("approvals", self.approvals.map(|d| d.days)),
            ("audit", self.audit.map(|d| d.days)),
            ("deadLetters", self.dead_letters.map(|d| d.days)),
            ("a2aTasks", self.a2a_tasks.map(|d| d.days)),
        ]
        .into_iter()
        .filter_map(|(kind, days)| Some((kind, days?)))
        .collect()
    }

    /// `transcripts.keepPerSession`.
    pub fn keep_per_session(&self) -> Option<u32> {
        self.transcripts.and_then(|t| t.keep_per_session)
    }
}

/// `{days: N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Days {
    pub days: u32,
}

/// `state.retention.transcripts`: by age, and at most so many rows per session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TranscriptRetention {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_per_session: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentsSection {
    #[serde(default)]
    pub defaults: AgentDefaults,
    #[serde(default)]
    pub list: Vec<AgentSpec>,
}

/// Fields every agent inherits unless it sets its own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentDefaults {
    pub model: Option<Model>,
    pub skip_bootstrap: Option<bool>,
    pub runtime: Option<Runtime>,
    pub tools: Option<AgentTools>,
    pub sandbox: Option<Sandbox>,
    pub heartbeat: Option<Heartbeat>,
    pub group_chat: Option<GroupChat>,
    pub subagents: Option<Subagents>,
    pub budgets: Option<Budgets>,
    pub identity: Option<Identity>,
    pub permissions: Option<Permissions>,
    pub bootstrap_max_chars: Option<u64>,
    pub artifact_max_bytes: Option<u64>,
    pub artifact_quota_bytes: Option<u64>,
}

/// One entry of `agents.list`, as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentSpec {
    pub id: String,
    pub default: Option<bool>,
    pub name: Option<String>,
    pub workspace: Option<String>,
    pub agent_dir: Option<String>,
    pub model: Option<Model>,
    pub identity: Option<Identity>,
    pub runtime: Option<Runtime>,
    pub tools: Option<AgentTools>,
    pub subagents: Option<Subagents>,
    pub budgets: Option<Budgets>,
    pub sandbox: Option<Sandbox>,
    pub heartbeat: Option<Heartbeat>,
    pub group_chat: Option<GroupChat>,
    pub protect: Option<bool>,
    pub skip_bootstrap: Option<bool>,
    pub permissions: Option<Permissions>,
    /// The most characters of one bootstrap file the system section gives the agent
    /// (conversations.md); OpenClaw's key and default.
    pub bootstrap_max_chars: Option<u64>,
    /// The largest file the agent may hand in to a task (tasks.md, "Artifacts").
    pub artifact_max_bytes: Option<u64>,
    /// The most bytes a task's (or an A2A run's) artifacts may total once the agent's
    /// hand-in is stored (tasks.md, "Artifacts").
    pub artifact_quota_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Model {
    Id(String),
    WithFallbacks {
        primary: String,
        #[serde(default)]
        fallbacks: Vec<String>,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Identity {
    pub name: Option<String>,
    pub emoji: Option<String>,
    pub theme: Option<String>,
    pub avatar: Option<String>,
    /// What the agent is for: the Hub's `agents_list` shows it.
    pub description: Option<String>,
    /// When another agent should turn to this one: the Hub's `agents_list` shows it.
    pub when_to_use: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Acp,
    Process,
    /// A remote agent reached over A2A (docs/a2a.md): `url` is its JSON-RPC endpoint.
    A2a,
    #[default]
    None,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Acp => "acp",
            RuntimeKind::Process => "process",
            RuntimeKind::A2a => "a2a",
            RuntimeKind::None => "none",
        }
    }

    /// Whether deepcli starts a process for an agent of this kind (which its sandbox holds).
    pub fn starts_process(self) -> bool {
        matches!(self, RuntimeKind::Acp | RuntimeKind::Process)
    }

    /// Whether deepcli can prompt an agent of this kind (an ACP session, or an A2A remote).
    pub fn takes_prompts(self) -> bool {
        matches!(self, RuntimeKind::Acp | RuntimeKind::A2a)
    }

    /// Whether deepcli can apply an agent's `model` to a runtime of this kind (through ACP),
    /// and why not.
    pub fn applies_model(self) -> Result<(), &'static str> {
        match self {
            RuntimeKind::Acp => Ok(()),
            RuntimeKind::Process => Err(
                "a `process` runtime takes no model from deepcli: deepcli applies `model` through ACP (`runtime.kind: acp`)",
            ),
            RuntimeKind::A2a => Err(
                "an `a2a` runtime is a remote agent: A2A gives deepcli no way to choose its model",
            ),
            RuntimeKind::None => Err(
                "`runtime.kind: none`: deepcli runs nothing to apply it to; whatever runs the agent must read it",
            ),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Runtime {
    #[serde(default)]
    pub kind: RuntimeKind,
    pub command: Option<Vec<String>>,
    #[serde(default)]
    pub env: IndexMap<String, EnvValue>,
    /// Names of the controller's environment passed on as they are (isolation.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
    pub cwd: Option<String>,
    /// `kind: a2a`: the remote agent's JSON-RPC endpoint, as its Agent Card names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `kind: a2a`: the bearer token deepcli sends to the remote agent (a secret reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// `kind: a2a`: the public key (a JWK) the remote's Agent Card must be signed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_key: Option<Secret>,
}

/// An environment value: plain text, or a secret reference resolved at spawn time.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EnvValue {
    Text(String),
    Secret(SecretRef),
}

/// A reference to a secret; never the secret itself.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(tag = "source", rename_all = "lowercase", deny_unknown_fields)]
pub enum SecretRef {
    Env { id: String },
    File { path: String },
}

impl std::fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretRef::Env { id } => write!(f, "env:{id}"),
            SecretRef::File { path } => write!(f, "file:{path}"),
        }
    }
}

/// Why a [`SecretRef`] did not resolve.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("environment variable `{id}` is not set")]
    Unset { id: String },
    #[error("cannot read secret file `{path}`: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
}

impl SecretRef {
    /// The secret now: the variable's value, or the file's text without its final line break.
    /// Held as a [`SecretString`](secrecy::SecretString) (redacted in `Debug`, wiped when
    /// dropped) and exposed only where it is sent: a header, a signature, a child's
    /// environment. The one resolver of secret references; what counts as usable (empty,
    /// whitespace, too short) is each caller's rule.
    pub fn resolve(&self) -> Result<secrecy::SecretString, SecretError> {
        match self {
            SecretRef::Env { id } => std::env::var(id)
                .map(Into::into)
                .map_err(|_| SecretError::Unset { id: id.clone() }),
            SecretRef::File { path } => std::fs::read_to_string(path)
                .map(|mut text| {
                    // Cut in place: no copy of the secret is left behind unwiped.
                    text.truncate(text.trim_end_matches(['\n', '\r']).len());
                    text.into()
                })
                .map_err(|source| SecretError::File {
                    path: path.clone(),
                    source,
                }),
        }
    }
}

/// A secret field as written: a reference, the `"${VAR}"` shorthand, or (an error the validator
/// reports) an inline value. The inline text is kept only so the validator can say so; it is
/// never printed, serialized or stored.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    Ref(SecretRef),
    Inline(String),
}

impl Secret {
    /// Parses a string secret: `${VAR}` is an env reference, anything else is inline.
    pub fn from_text(text: &str) -> Secret {
        let var = text
            .strip_prefix("${")
            .and_then(|rest| rest.strip_suffix('}'))
            .filter(|v| is_env_name(v));
        match var {
            Some(id) => Secret::Ref(SecretRef::Env { id: id.to_string() }),
            None => Secret::Inline(text.to_string()),
        }
    }
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Secret::Ref(r) => r.fmt(f),
            Secret::Inline(_) => f.write_str("<inline secret, redacted>"),
        }
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Ref(SecretRef),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Text(text) => Secret::from_text(&text),
            Raw::Ref(r) => Secret::Ref(r),
        })
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Secret::Ref(r) => r.serialize(s),
            Secret::Inline(_) => s.serialize_str("<redacted>"),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentTools {
    pub profile: Option<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    pub elevated: Option<Elevated>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Elevated {
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Subagents {
    #[serde(default)]
    pub allow_agents: Vec<String>,
    pub max_spawn_depth: Option<u32>,
    pub max_children_per_agent: Option<usize>,
    pub max_concurrent: Option<usize>,
    pub run_timeout_seconds: Option<u64>,
    /// How long a kept child may sit idle before the Hub closes it (hub.md); 0: never.
    pub kept_idle_seconds: Option<u64>,
    pub tools: Option<SubagentTools>,
}

/// `subagents.tools` (OpenClaw's `tools.subagents.tools`): which of the Hub's tools the
/// agent's spawned sessions keep, over the defaults a sub-agent gets (hub.md, "Sub-agent
/// tools").
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SubagentTools {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// `budgets` (approvals.md): limits checked before each turn; unset keys limit nothing, but
/// `spawnsPerHour` (60 when unset) and the byte caps, which have defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Budgets {
    pub turns_per_hour: Option<u32>,
    pub concurrent_turns: Option<u32>,
    pub turn_seconds: Option<u64>,
    pub spawns_per_hour: Option<u32>,
    pub tokens_per_day: Option<u64>,
    pub cost_per_day_usd: Option<f64>,
    pub loop_turns: Option<u32>,
    pub loop_window_seconds: Option<u64>,
    pub tree_turns: Option<u32>,
    pub reply_bytes: Option<u64>,
    pub context_bytes: Option<u64>,
}

/// `sandbox` (isolation.md): what contains the agent's runtime and everything it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Sandbox {
    pub mode: Option<SandboxMode>,
    pub scope: Option<SandboxScope>,
    pub backend: Option<SandboxBackend>,
    pub workspace_access: Option<WorkspaceAccess>,
    pub network: Option<SandboxNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binds: Option<Vec<SandboxBind>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_tools_visibility: Option<SessionToolsVisibility>,
}

impl Sandbox {
    /// An agent's own `sandbox` over `agents.defaults.sandbox`, key by key: an agent that
    /// writes only `network` keeps the defaults' `binds`.
    pub fn merged(own: Option<Sandbox>, defaults: Option<&Sandbox>) -> Option<Sandbox> {
        let Some(defaults) = defaults else {
            return own;
        };
        let Some(own) = own else {
            return Some(defaults.clone());
        };
        let defaults = defaults.clone();
        Some(Sandbox {
            mode: own.mode.or(defaults.mode),
            scope: own.scope.or(defaults.scope),
            backend: own.backend.or(defaults.backend),
            workspace_access: own.workspace_access.or(defaults.workspace_access),
            network: own.network.or(defaults.network),
            allowed_domains: own.allowed_domains.or(defaults.allowed_domains),
            binds: own.binds.or(defaults.binds),
            session_tools_visibility: own
                .session_tools_visibility
                .or(defaults.session_tools_visibility),
        })
    }
}

/// `sandbox.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    Off,
    /// OpenClaw's: every session but the main one. deepcli sandboxes a runtime, so it acts
    /// as `all` (validate warns).
    NonMain,
    #[default]
    All,
}

/// `sandbox.scope` (OpenClaw's; deepcli's sandbox is always per agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxScope {
    Session,
    Agent,
    Shared,
}

/// `sandbox.backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxBackend {
    #[default]
    Auto,
    Bwrap,
    Landlock,
    Docker,
    Podman,
    Kubernetes,
}

impl SandboxBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxBackend::Auto => "auto",
            SandboxBackend::Bwrap => "bwrap",
            SandboxBackend::Landlock => "landlock",
            SandboxBackend::Docker => "docker",
            SandboxBackend::Podman => "podman",
            SandboxBackend::Kubernetes => "kubernetes",
        }
    }
}

/// `sandbox.workspaceAccess`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceAccess {
    None,
    Ro,
    #[default]
    Rw,
}

/// `sandbox.network`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxNetwork {
    #[default]
    Host,
    None,
    Allowlist,
}

/// One of `sandbox.binds`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SandboxBind {
    pub path: String,
    #[serde(default)]
    pub mode: BindMode,
}

/// `sandbox.binds[].mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BindMode {
    #[default]
    Ro,
    Rw,
}

/// `sandbox.sessionToolsVisibility`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionToolsVisibility {
    All,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Heartbeat {
    pub every: Option<String>,
    pub target: Option<String>,
}

/// `permissions` (approvals.md): what deepcli answers when the agent's runtime asks for
/// permission, and who may answer for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Permissions {
    pub mode: Option<PermissionMode>,
    pub timeout_seconds: Option<u64>,
    pub approvers: Option<Vec<String>>,
    pub route: Option<ApprovalRoute>,
}

/// `permissions.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Every request waits for a person.
    #[default]
    Ask,
    /// Read-kind tool calls (`read`, `search`) are allowed; the rest wait for a person.
    ApproveReads,
    /// Every request is allowed.
    ApproveAll,
    /// Every request is rejected.
    DenyAll,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Ask => "ask",
            PermissionMode::ApproveReads => "approve-reads",
            PermissionMode::ApproveAll => "approve-all",
            PermissionMode::DenyAll => "deny-all",
        }
    }
}

/// `permissions.route`: where a pending approval is announced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalRoute {
    /// The conversation whose message caused the turn (and the operator's CLI and API).
    Origin,
    /// The operator's CLI and API only.
    #[default]
    Operator,
    /// Both.
    Both,
}

impl ApprovalRoute {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalRoute::Origin => "origin",
            ApprovalRoute::Operator => "operator",
            ApprovalRoute::Both => "both",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupChat {
    #[serde(default)]
    pub mention_patterns: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolsSection {
    pub agent_to_agent: Option<AgentToAgent>,
    pub sessions: Option<SessionsTools>,
}

/// `tools.sessions`: what the Hub's session tools may see.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionsTools {
    pub visibility: Option<SessionVisibility>,
}

/// `tools.sessions.visibility`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionVisibility {
    #[serde(rename = "self")]
    SelfOnly,
    Tree,
    Agent,
    All,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentToAgent {
    pub enabled: Option<bool>,
    #[serde(default)]
    pub allow: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    Main,
    PerPeer,
    PerChannelPeer,
    PerAccountChannelPeer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupScope {
    Main,
    PerGroup,
}

impl DmScope {
    /// As written in YAML and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            DmScope::Main => "main",
            DmScope::PerPeer => "per-peer",
            DmScope::PerChannelPeer => "per-channel-peer",
            DmScope::PerAccountChannelPeer => "per-account-channel-peer",
        }
    }
}

impl GroupScope {
    /// As written in YAML and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupScope::Main => "main",
            GroupScope::PerGroup => "per-group",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionSection {
    pub dm_scope: Option<DmScope>,
    pub group_scope: Option<GroupScope>,
    pub main_key: Option<String>,
    #[serde(default)]
    pub identity_links: IndexMap<String, Vec<String>>,
    pub max_ping_pong_turns: Option<u32>,
    /// The chat commands that start a new session (default `/new`, `/reset`).
    pub reset_triggers: Option<Vec<String>>,
    /// When a conversation's session starts over on its own (OpenClaw's `session.reset`).
    pub reset: Option<SessionReset>,
}

/// `session.reset`: a session found stale when its next message arrives starts over first
/// (conversations.md, "Session lifecycle").
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionReset {
    /// Absent with `atHour` or `idleMinutes` set: `daily` (OpenClaw's reading).
    pub mode: Option<ResetMode>,
    /// The hour (0-23, the host's local time) a `daily` session starts over after; default 4.
    pub at_hour: Option<u8>,
    /// Minutes without a message after which the session starts over (`idle`; with `daily`,
    /// whichever comes first).
    pub idle_minutes: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetMode {
    Daily,
    Idle,
    /// No reset on its own (OpenClaw's `none`; `off` reads the same).
    #[serde(alias = "off")]
    None,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChannelsFile {
    #[serde(default)]
    pub channels: IndexMap<String, ChannelSpec>,
    /// The hub as an A2A server (docs/a2a.md): which agents it exposes, to which peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<A2aSpec>,
}

/// channels.yaml `a2a:` — the hub as an Agent2Agent server (docs/a2a.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct A2aSpec {
    /// The agents that get an Agent Card and a JSON-RPC endpoint (`/a2a/<id>/`); the first is
    /// also the card at `/.well-known/agent-card.json`.
    #[serde(default)]
    pub expose: Vec<String>,
    /// Who may call, by peer name: each with its bearer token.
    #[serde(default)]
    pub peers: IndexMap<String, A2aPeer>,
    /// Streams (SendStreamingMessage, SubscribeToTask) open at once, all peers together
    /// (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// Push notifications to peers' webhooks (docs/a2a.md, "Push notifications").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<A2aPush>,
}

/// channels.yaml `a2a.push:` — where push notifications may go.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct A2aPush {
    /// Webhooks on loopback, private, link-local and other non-public addresses, and over
    /// plain `http`, are taken (default false: refused, against SSRF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_private_targets: Option<bool>,
}

/// One A2A peer: its bearer token, the exposed agents it may reach, its rate limit.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct A2aPeer {
    pub token: Secret,
    /// Exposed agents this peer may reach; unset: every exposed agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_agents: Option<Vec<String>>,
    /// JSON-RPC requests this peer may make per minute (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Streams this peer may hold open at once (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// Push notification configs this peer may hold on its tasks not yet finished (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_push_configs: Option<u32>,
}

/// The key of `channels` that holds the inbound policy every channel inherits (policy.md):
/// not a channel.
pub const CHANNEL_DEFAULTS: &str = "defaults";

// No `deny_unknown_fields`: serde cannot combine it with `flatten`. The schema has already
// rejected unknown keys.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelSpec {
    pub enabled: Option<bool>,
    pub default_account: Option<String>,
    #[serde(default)]
    pub accounts: IndexMap<String, AccountSpec>,
    /// Per-conversation overrides by group or channel id; `"*"` for every group.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub groups: IndexMap<String, GroupSpec>,
    /// Discord: per-guild settings by guild id (`"*"` for every guild), each with its channels.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub guilds: IndexMap<String, GuildSpec>,
    /// The channel level of the inbound policy.
    #[serde(flatten)]
    pub policy: PolicySpec,
}

/// `channels.discord[.accounts.<id>].guilds.<guildId>`: what one Discord guild (or `"*"`:
/// every guild) sets of the inbound policy, and its channels (adapters.md, "Discord").
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GuildSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_mention: Option<bool>,
    /// Who may trigger the agent in the guild: user ids (`"*"`: anyone), or a member of one of
    /// `roles`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<String>>,
    /// Role ids whose members may trigger the agent in the guild (or one of `users`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_bots: Option<AllowBots>,
    /// The guild's channels by channel id (`"*"` for every other one): once listed, a channel
    /// not listed is not served under `groupPolicy: allowlist`. A thread takes its parent's.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub channels: IndexMap<String, GuildChannelSpec>,
}

/// `guilds.<guildId>.channels.<channelId>`: one channel's overrides of its guild's settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GuildChannelSpec {
    /// `false`: the channel is not served (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_mention: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_bots: Option<AllowBots>,
}

/// The inbound policy keys (policy.md) as written at one level: `channels.defaults`, a
/// channel, or an account. Every key is optional: a level that does not set one inherits it.
// No `deny_unknown_fields`: it is flattened into the channel and the account.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dm_policy: Option<DmPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_from: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_policy: Option<GroupPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_allow_from: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_mention: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mention_patterns: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implicit_mentions: Option<ImplicitMentions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_explicit_mention: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_bots: Option<AllowBots>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot_loop_protection: Option<BotLoopProtection>,
}

/// `channels.<ch>.groups.<id>`: what one group (or `"*"`: every group) overrides.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_mention: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_allow_from: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mention_patterns: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implicit_mentions: Option<ImplicitMentions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_explicit_mention: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_bots: Option<AllowBots>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_limit: Option<u32>,
    /// The bot discussions in this Slack channel (over the account's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discussion: Option<Discussion>,
}

/// Which messages count as a mention without naming the bot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImplicitMentions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to_bot: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_participation: Option<bool>,
}

/// Two bots answering each other: how many of one bot's messages an account takes in a window
/// before the pair is muted, and for how long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BotLoopProtection {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_events_per_window: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cooldown_seconds: Option<u32>,
}

/// The secret fields an account may carry, in the order the schema lists them.
pub const SECRET_FIELDS: &[&str] = &[
    "botToken",
    "appToken",
    "userToken",
    "signingSecret",
    "webhookSecret",
    "token",
    "password",
    "apiKey",
    "clientSecret",
];

// No `deny_unknown_fields`: serde cannot combine it with `flatten`. The schema has already
// rejected unknown keys, so the flattened map holds exactly the secret fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountSpec {
    pub name: Option<String>,
    pub enabled: Option<bool>,
    /// Where the Access layer also POSTs each reply (signed like inbound calls).
    pub reply_url: Option<String>,
    /// The platform's id of this account's bot: the self-loop filter and native mentions.
    pub bot_user_id: Option<String>,
    /// How the platform adapter talks to the platform: Slack `socket` (default) or `http`,
    /// Telegram `polling` (default) or `webhook`, Discord `gateway` (default, the only one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<AdapterMode>,
    /// The platform API's base URL (proxies, tests); default the platform's public API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_base: Option<String>,
    /// Telegram webhook mode: the public URL Telegram POSTs updates to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// Slack: where replies go: `off` (in the message's thread if it has one, default),
    /// `first` (the first reply starts a thread), `all` (every reply in a thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to_mode: Option<ReplyToMode>,
    /// The most platform messages one reply is posted as (default 10); the rest is cut with a
    /// note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_reply_messages: Option<u32>,
    /// Discussions between bots in one Slack or Discord thread (adapters.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discussion: Option<Discussion>,
    /// Discord: the application whose interactions (button clicks) the bot answers; unset, the
    /// one the Gateway's READY names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<String>,
    /// Discord: this account's own per-guild settings (they replace the channel's `guilds`).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub guilds: IndexMap<String, GuildSpec>,
    /// The account level of the inbound policy. Before `secrets`: a flattened struct takes its
    /// keys out of what the flattened map after it sees.
    #[serde(flatten)]
    pub policy: PolicySpec,
    /// Secret fields by their YAML name (`botToken`, …), in file order.
    #[serde(flatten)]
    pub secrets: IndexMap<String, Secret>,
}

/// `channels.<ch>.accounts.<id>.mode`: the transport a platform adapter uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterMode {
    /// Slack Socket Mode (the default for Slack).
    Socket,
    /// Slack's HTTP Events API.
    Http,
    /// Telegram `getUpdates` long polling (the default for Telegram).
    Polling,
    /// Telegram webhooks.
    Webhook,
    /// Discord's Gateway WebSocket (the only Discord transport).
    Gateway,
    /// No built-in adapter: an external bridge signs envelopes to `/v1/inbound`.
    Bridge,
}

impl AdapterMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterMode::Socket => "socket",
            AdapterMode::Http => "http",
            AdapterMode::Polling => "polling",
            AdapterMode::Webhook => "webhook",
            AdapterMode::Gateway => "gateway",
            AdapterMode::Bridge => "bridge",
        }
    }
}

/// `replyToMode`: whether a reply starts a thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyToMode {
    #[default]
    Off,
    First,
    All,
}

/// `discussion`: how long bots may talk among themselves in one thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Discussion {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_marker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_rounds: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    Pairing,
    Allowlist,
    Open,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    Open,
    Allowlist,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum AllowBots {
    Bool(bool),
    Mentions(MentionsOnly),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MentionsOnly {
    Mentions,
}

impl DmPolicy {
    /// As written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            DmPolicy::Pairing => "pairing",
            DmPolicy::Allowlist => "allowlist",
            DmPolicy::Open => "open",
            DmPolicy::Disabled => "disabled",
        }
    }
}

impl GroupPolicy {
    /// As written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupPolicy::Open => "open",
            GroupPolicy::Allowlist => "allowlist",
            GroupPolicy::Disabled => "disabled",
        }
    }
}

impl AllowBots {
    /// `"mentions"`: a bot's message counts only when it mentions this account's bot.
    pub fn only_mentions(self) -> bool {
        matches!(self, AllowBots::Mentions(MentionsOnly::Mentions))
    }

    /// As written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            AllowBots::Bool(true) => "true",
            AllowBots::Bool(false) => "false",
            AllowBots::Mentions(_) => "mentions",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BindingsFile {
    #[serde(default)]
    pub bindings: Vec<BindingSpec>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BindingType {
    #[default]
    Route,
    Acp,
}

/// One entry of `bindings`, as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BindingSpec {
    #[serde(default, rename = "type")]
    pub kind: BindingType,
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(rename = "match")]
    pub matcher: MatchSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionOverride>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acp: Option<Box<AcpSpec>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MatchSpec {
    pub channel: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSpec {
    pub kind: String,
    pub id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dm_scope: Option<DmScope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_scope: Option<GroupScope>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AcpSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = "sk-proj-DO-NOT-PRINT-0123456789";

    #[test]
    fn a_resolved_secret_keeps_all_but_its_final_line_break_and_debug_never_shows_it() {
        use secrecy::ExposeSecret;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        std::fs::write(&path, format!(" {VALUE} \r\n")).unwrap();
        let secret = SecretRef::File {
            path: path.display().to_string(),
        }
        .resolve()
        .unwrap();
        assert_eq!(secret.expose_secret(), format!(" {VALUE} "));
        let shown = format!("{secret:?}");
        assert!(!shown.contains(VALUE), "{shown}");
    }

    #[test]
    fn an_unresolved_secret_says_which_variable_or_file() {
        let unset = SecretRef::Env {
            id: "DEEPCLI_SURELY_UNSET_SECRET".into(),
        };
        assert_eq!(
            unset.resolve().unwrap_err().to_string(),
            "environment variable `DEEPCLI_SURELY_UNSET_SECRET` is not set"
        );
        let missing = SecretRef::File {
            path: "/nonexistent/deepcli-secret".into(),
        };
        let error = missing.resolve().unwrap_err().to_string();
        assert!(
            error.starts_with("cannot read secret file `/nonexistent/deepcli-secret`: "),
            "{error}"
        );
    }

    #[test]
    fn an_inline_secret_is_never_shown_by_debug_or_serialize() {
        let secret = Secret::from_text(VALUE);
        assert!(matches!(secret, Secret::Inline(_)));
        for shown in [
            format!("{secret:?}"),
            format!("{secret:#?}"),
            serde_json::to_string(&secret).unwrap(),
        ] {
            assert!(!shown.contains("DO-NOT-PRINT"), "{shown}");
            assert!(shown.contains("redacted"), "{shown}");
        }
    }

    #[test]
    fn an_account_holding_an_inline_secret_never_shows_it() {
        // Decoded the way the loader decodes channels.yaml, then shown every way it can be.
        let account: AccountSpec = serde_json::from_value(serde_json::json!({
            "botToken": VALUE,
            "webhookSecret": {"source": "env", "id": "WEBHOOK"},
        }))
        .unwrap();
        let file = ChannelsFile {
            channels: [(
                "telegram".to_string(),
                ChannelSpec {
                    accounts: [("default".to_string(), account)].into_iter().collect(),
                    ..ChannelSpec::default()
                },
            )]
            .into_iter()
            .collect(),
            a2a: None,
        };
        for shown in [
            format!("{file:?}"),
            format!("{file:#?}"),
            serde_json::to_string(&file).unwrap(),
            serde_json::to_string_pretty(&file).unwrap(),
        ] {
            assert!(!shown.contains("DO-NOT-PRINT"), "{shown}");
            // References are shown as references.
            assert!(shown.contains("WEBHOOK"), "{shown}");
        }
    }

    #[test]
    fn an_account_sorts_its_keys_into_policy_and_secrets() {
        let account: AccountSpec = serde_json::from_value(serde_json::json!({
            "botToken": {"source": "env", "id": "T"},
            "dmPolicy": "pairing",
            "allowFrom": ["1"],
            "botUserId": "B1",
            "implicitMentions": {"replyToBot": false},
            "botLoopProtection": {"cooldownSeconds": 5},
        }))
        .unwrap();
        assert_eq!(account.secrets.keys().collect::<Vec<_>>(), ["botToken"]);
        assert_eq!(account.policy.dm_policy, Some(DmPolicy::Pairing));
        assert_eq!(
            account.policy.allow_from.as_deref(),
            Some(&["1".to_string()][..])
        );
        assert_eq!(account.bot_user_id.as_deref(), Some("B1"));
        assert_eq!(
            account
                .policy
                .implicit_mentions
                .and_then(|i| i.reply_to_bot),
            Some(false)
        );
        assert_eq!(
            account
                .policy
                .bot_loop_protection
                .and_then(|b| b.cooldown_seconds),
            Some(5)
        );
    }

    #[test]
    fn a_reference_is_shown_as_a_reference() {
        let env = Secret::from_text("${OPENAI_API_KEY}");
        assert_eq!(format!("{env:?}"), "env:OPENAI_API_KEY");
        assert_eq!(
            serde_json::to_string(&env).unwrap(),
            r#"{"source":"env","id":"OPENAI_API_KEY"}"#
        );
        let file = Secret::Ref(SecretRef::File {
            path: "/run/secrets/x".into(),
        });
        assert_eq!(format!("{file:?}"), "file:/run/secrets/x");
        assert_eq!(
            serde_json::to_string(&file).unwrap(),
            r#"{"source":"file","path":"/run/secrets/x"}"#
        );
    }
}
