//! The Hub's policy (hub.md, "Policy"): who may message whom, who may see which session, who may
//! spawn what, and the limits. Built from the config on every apply and swapped whole; the
//! decisions are pure functions of it and of the facts the caller hands in, each denial with
//! its reason code.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::Config;
use crate::config::model::RuntimeKind;
use crate::state::RunState;

/// `session.maxPingPongTurns` when unset.
pub(crate) const DEFAULT_PING_PONG: u32 = 5;
/// The most reply-back turns, whatever the config says (hub.md: max 10).
pub(crate) const MAX_PING_PONG: u32 = 10;
/// `subagents.maxSpawnDepth` when unset.
pub(crate) const DEFAULT_SPAWN_DEPTH: u32 = 3;
/// `subagents.maxChildrenPerAgent` when unset: active children per requester session.
pub(crate) const DEFAULT_CHILDREN: usize = 5;
/// `subagents.keptIdleSeconds` when unset: a kept child idle this long is closed.
pub(crate) const DEFAULT_KEPT_IDLE: Duration = Duration::from_secs(3600);
/// `subagents.maxConcurrent` when unset: active spawned runs in the whole hub.
pub(crate) const DEFAULT_CONCURRENT: usize = 8;

/// Why the Hub refused a call (the `reason` of a `forbidden` result).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reason {
    AgentToAgentDisabled,
    AgentToAgentNotAllowed,
    VisibilityRestricted,
    SpawnNotAllowed,
    DepthExceeded,
    TooManyChildren,
    TargetDeleted,
    BudgetExceeded,
    /// A tool a spawned session does not have (`subagents.tools`, hub.md "Sub-agent tools").
    ToolDenied,
}

impl Reason {
    pub(crate) const ALL: [Reason; 9] = [
        Reason::AgentToAgentDisabled,
        Reason::AgentToAgentNotAllowed,
        Reason::VisibilityRestricted,
        Reason::SpawnNotAllowed,
        Reason::DepthExceeded,
        Reason::TooManyChildren,
        Reason::TargetDeleted,
        Reason::BudgetExceeded,
        Reason::ToolDenied,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::AgentToAgentDisabled => "agent_to_agent_disabled",
            Reason::AgentToAgentNotAllowed => "agent_to_agent_not_allowed",
            Reason::VisibilityRestricted => "visibility_restricted",
            Reason::SpawnNotAllowed => "spawn_not_allowed",
            Reason::DepthExceeded => "depth_exceeded",
            Reason::TooManyChildren => "too_many_children",
            Reason::TargetDeleted => "target_deleted",
            Reason::BudgetExceeded => "budget_exceeded",
            Reason::ToolDenied => "tool_denied",
        }
    }
}

/// A refusal: the reason code and a sentence for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denial {
    pub reason: Reason,
    pub error: String,
}

impl Denial {
    pub(crate) fn new(reason: Reason, error: impl Into<String>) -> Denial {
        Denial {
            reason,
            error: error.into(),
        }
    }
}

/// `tools.sessions.visibility`: which sessions a caller may see and address, narrowest first.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Visibility {
    /// Only its own session.
    #[serde(rename = "self")]
    SelfOnly,
    /// Its own session and the ones it spawned (and theirs).
    Tree,
    /// Every session of its own agent.
    Agent,
    /// Every session (other agents' still need agentToAgent).
    #[default]
    All,
}

impl Visibility {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Visibility::SelfOnly => "self",
            Visibility::Tree => "tree",
            Visibility::Agent => "agent",
            Visibility::All => "all",
        }
    }
}

/// The Hub tools every spawned session lacks (OpenClaw 2026.9's `SUBAGENT_TOOL_DENY_ALWAYS`,
/// of the tools the Hub has): a sub-agent reports back through its final answer, it does not
/// survey or drive other sessions.
pub(crate) const SUBAGENT_DENY: [&str; 11] = [
    super::tools::AGENTS_LIST,
    super::tools::SESSION_STATUS,
    super::tools::SESSIONS_SEND,
    // deepcli's: a sub-agent takes no part in tasks (tasks.md). A task is given, asked about,
    // submitted and reviewed by the sessions of its parties, never by a child of one.
    super::tools::TASKS_CREATE,
    super::tools::TASKS_GET,
    super::tools::TASKS_LIST,
    super::tools::TASKS_UPDATE,
    super::tools::TASKS_REVIEW,
    super::tools::ARTIFACTS_PUT,
    super::tools::ARTIFACTS_GET,
    super::tools::PLAN_UPDATE,
];

/// What a leaf (a spawned session at `maxSpawnDepth`) lacks besides (OpenClaw's
/// `SUBAGENT_TOOL_DENY_LEAF`): the tools that manage children.
pub(crate) const LEAF_DENY: [&str; 4] = [
    super::tools::SUBAGENTS,
    super::tools::SESSIONS_LIST,
    super::tools::SESSIONS_HISTORY,
    super::tools::SESSIONS_SPAWN,
];

/// `subagents.tools`: an agent's changes to what its spawned sessions keep.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct SubagentTools {
    /// Only these (names or `prefix*`); `None`: every tool not denied.
    pub allow: Option<Vec<String>>,
    /// Given back despite the default denials.
    pub also_allow: Vec<String>,
    /// Taken away besides the default denials.
    pub deny: Vec<String>,
}

/// An agent's spawn limits (`subagents.*`, its own or `agents.defaults`').
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    /// `maxSpawnDepth`: a session at this depth is a leaf.
    pub max_spawn_depth: u32,
    /// `maxChildrenPerAgent`: active children of one session.
    pub max_children: usize,
    /// `maxConcurrent` on the agent: active spawned runs of its sessions together.
    pub max_concurrent: Option<usize>,
    /// `runTimeoutSeconds`: a child's run limit when the spawn names none.
    pub run_timeout: Option<Duration>,
    /// `keptIdleSeconds`: how long a kept child (its run over, its session open) may sit idle
    /// before the Hub closes it; `None` (0): never.
    pub kept_idle: Option<Duration>,
    /// `tools`: what its spawned sessions keep of the Hub's tools.
    pub tools: SubagentTools,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_spawn_depth: DEFAULT_SPAWN_DEPTH,
            max_children: DEFAULT_CHILDREN,
            max_concurrent: None,
            run_timeout: None,
            kept_idle: Some(DEFAULT_KEPT_IDLE),
            tools: SubagentTools::default(),
        }
    }
}

/// What one session's children hold of its `subagents.maxChildrenPerAgent` (hub.md,
/// "Policy"): a child whose run is not over is running; one whose run is over but whose
/// session is still open (`cleanup: keep`, `mode: session`) is kept, with its runtime session
/// and its token. Both count until the child is closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HeldChildren {
    pub running: usize,
    pub kept: usize,
}

impl HeldChildren {
    /// Counted over each child's (closed, its run's state; `None`: no run on record).
    pub(crate) fn count(
        children: impl IntoIterator<Item = (bool, Option<RunState>)>,
    ) -> HeldChildren {
        let mut held = HeldChildren::default();
        for (closed, state) in children {
            match state {
                Some(s) if !s.is_final() => held.running += 1,
                _ if !closed => held.kept += 1,
                _ => {}
            }
        }
        held
    }
}

impl Limits {
    /// Whether a session of `agent_id` whose children hold `held` may spawn one more.
    pub(crate) fn may_add_child(&self, agent_id: &str, held: HeldChildren) -> Result<(), Denial> {
        if held.running + held.kept < self.max_children {
            return Ok(());
        }
        let idle = match self.kept_idle {
            Some(idle) => format!(
                "a kept child is closed once idle for subagents.keptIdleSeconds ({} s)",
                idle.as_secs()
            ),
            None => "subagents.keptIdleSeconds is 0, so kept children stay open until closed"
                .to_string(),
        };
        Err(Denial::new(
            Reason::TooManyChildren,
            format!(
                "this session already has {} running and {} kept children; subagents.maxChildrenPerAgent of `{agent_id}` is {}: wait for a running one (subagents wait) or cancel it, spawn with `cleanup: delete`; {idle}",
                held.running, held.kept, self.max_children
            ),
        ))
    }
}

/// One agent as the Hub sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HubAgent {
    pub id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub when_to_use: Option<String>,
    pub runtime: RuntimeKind,
    /// `subagents.allowAgents`; `None`: unset (only its own agent).
    pub allow_agents: Option<Vec<String>>,
    pub limits: Limits,
    /// Its workspace: a spawned child's `cwd` must lie inside it.
    pub workspace: std::path::PathBuf,
    /// Its runtime runs sandboxed and its sandbox does not say `sessionToolsVisibility: all`:
    /// it sees at most its own tree (isolation.md, "Policy defaults").
    pub clamped: bool,
    /// Its sandbox has a network of its own (`none`, `allowlist`): the hub's door reaches it
    /// over a Unix socket in the sandbox, never the controller's HTTP port.
    pub private_network: bool,
    /// Where its sandbox finds the hub's socket, when not at [`crate::sandbox::HUB_SOCKET`]:
    /// the Landlock backend mounts nothing, so its runtime is given the host path.
    pub hub_socket: Option<std::path::PathBuf>,
    /// `artifactMaxBytes`: the largest file it hands in to a task.
    pub artifact_max_bytes: u64,
    /// `artifactQuotaBytes`: the most bytes a task's (or a run's) artifacts may total once a
    /// hand-in of its is stored.
    pub artifact_quota_bytes: u64,
}

/// Everything the Hub decides by, from one config.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HubPolicy {
    pub agents: BTreeMap<String, HubAgent>,
    pub a2a_enabled: bool,
    /// Empty: every agent.
    pub a2a_allow: Vec<String>,
    pub visibility: Visibility,
    pub max_ping_pong: u32,
    /// Spawned runs active in the whole hub (`agents.defaults.subagents.maxConcurrent`).
    pub max_concurrent: usize,
    /// Each agent's main session key.
    pub main_keys: BTreeMap<String, String>,
}

impl Default for HubPolicy {
    fn default() -> HubPolicy {
        HubPolicy {
            agents: BTreeMap::new(),
            a2a_enabled: true,
            a2a_allow: Vec::new(),
            visibility: Visibility::All,
            max_ping_pong: DEFAULT_PING_PONG,
            max_concurrent: DEFAULT_CONCURRENT,
            main_keys: BTreeMap::new(),
        }
    }
}

/// Whether `id` is named by `patterns` (`*` matches all; `prefix*` a prefix).
fn listed(patterns: &[String], id: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => p == id,
    })
}

impl HubPolicy {
    /// The visibility `agent_id`'s sessions have: `tools.sessions.visibility`, at most `tree`
    /// for a sandboxed agent (unless its sandbox says `sessionToolsVisibility: all`).
    pub(crate) fn visibility_of(&self, agent_id: &str) -> Visibility {
        match self.agents.get(agent_id) {
            Some(agent) if agent.clamped => self.visibility.min(Visibility::Tree),
            _ => self.visibility,
        }
    }

    /// The policy of `config`; `main_key` names an agent's main session.
    pub(crate) fn from_config(config: &Config, main_key: impl Fn(&str) -> String) -> HubPolicy {
        let mut policy = HubPolicy::default();
        for agent in &config.agents {
            let spec = &agent.spec;
            let id = agent.id().to_string();
            policy.main_keys.insert(id.clone(), main_key(&id));
            let sub = spec.subagents.as_ref();
            let identity = spec.identity.as_ref();
            let limits = Limits {
                max_spawn_depth: sub
                    .and_then(|s| s.max_spawn_depth)
                    .unwrap_or(DEFAULT_SPAWN_DEPTH),
                max_children: sub
                    .and_then(|s| s.max_children_per_agent)
                    .unwrap_or(DEFAULT_CHILDREN),
                // The defaults' maxConcurrent is the hub's; an agent's own caps that agent
                // (inherited from the defaults, it caps nothing the hub's does not).
                max_concurrent: sub.and_then(|s| s.max_concurrent),
                run_timeout: sub
                    .and_then(|s| s.run_timeout_seconds)
                    .filter(|s| *s > 0)
                    .map(Duration::from_secs),
                kept_idle: match sub.and_then(|s| s.kept_idle_seconds) {
                    None => Some(DEFAULT_KEPT_IDLE),
                    Some(0) => None,
                    Some(s) => Some(Duration::from_secs(s)),
                },
                tools: sub
                    .and_then(|s| s.tools.as_ref())
                    .map(|t| SubagentTools {
                        allow: t.allow.clone(),
                        also_allow: t.also_allow.clone(),
                        deny: t.deny.clone(),
                    })
                    .unwrap_or_default(),
            };
            policy.agents.insert(
                id.clone(),
                HubAgent {
                    id,
                    name: spec
                        .name
                        .clone()
                        .or_else(|| identity.and_then(|i| i.name.clone())),
                    description: identity.and_then(|i| i.description.clone()),
                    when_to_use: identity.and_then(|i| i.when_to_use.clone()),
                    runtime: spec.runtime.as_ref().map_or(RuntimeKind::None, |r| r.kind),
                    allow_agents: sub.map(|s| s.allow_agents.clone()),
                    limits,
                    workspace: agent.workspace.clone(),
                    clamped: spec.sandbox.as_ref().is_none_or(|s| {
                        s.mode != Some(crate::config::model::SandboxMode::Off)
                            && s.session_tools_visibility.is_none()
                    }),
                    private_network: spec.sandbox.as_ref().is_some_and(|s| {
                        s.mode != Some(crate::config::model::SandboxMode::Off)
                            && s.network
                                .is_some_and(|n| n != crate::config::model::SandboxNetwork::Host)
                    }),
                    hub_socket: None,
                    artifact_max_bytes: spec
                        .artifact_max_bytes
                        .unwrap_or(crate::tasks::artifacts::DEFAULT_MAX_BYTES),
                    artifact_quota_bytes: spec
                        .artifact_quota_bytes
                        .unwrap_or(crate::tasks::artifacts::DEFAULT_QUOTA_BYTES),
                },
            );
        }
        if let Some(max) = config
            .agent_defaults
            .subagents
            .as_ref()
            .and_then(|s| s.max_concurrent)
        {
            policy.max_concurrent = max;
        }
        if let Some(a2a) = &config.tools.agent_to_agent {
            policy.a2a_enabled = a2a.enabled.unwrap_or(true);
            policy.a2a_allow = a2a.allow.clone();
        }
        if let Some(visibility) = config.tools.sessions.as_ref().and_then(|s| s.visibility) {
            use crate::config::model::SessionVisibility as V;
            policy.visibility = match visibility {
                V::SelfOnly => Visibility::SelfOnly,
                V::Tree => Visibility::Tree,
                V::Agent => Visibility::Agent,
                V::All => Visibility::All,
            };
        }
        if let Some(turns) = config.session.max_ping_pong_turns {
            policy.max_ping_pong = turns.min(MAX_PING_PONG);
        }
        policy
    }

    /// What agent `agent_id`'s system section says of the Hub (conversations.md): its tools,
    /// and the policy that limits them, one line each, as this policy decides.
    pub(crate) fn told(&self, agent_id: &str) -> Vec<String> {
        let mut lines = vec![format!(
            "The hub's MCP server `deepcli` gives your sessions its tools: {}. agents_list tells who else is here; sessions_send messages another session and waits for its reply; sessions_spawn gives a task to a new session (of you or another agent) whose result comes back to you; management_request asks an operator to change the hub's configuration.",
            super::tools::ALL.join(", ")
        )];
        let others: Vec<&str> = self
            .agents
            .keys()
            .map(String::as_str)
            .filter(|id| *id != agent_id)
            .collect();
        let reachable: Vec<&str> = others
            .iter()
            .copied()
            .filter(|id| self.agent_to_agent(agent_id, id).is_ok())
            .collect();
        lines.push(if !self.a2a_enabled {
            "Messaging other agents is off in this hub (tools.agentToAgent.enabled: false): sessions_send reaches only your own sessions.".to_string()
        } else if reachable.is_empty() {
            "sessions_send reaches only your own sessions: no other agent is yours to message (tools.agentToAgent.allow).".to_string()
        } else {
            format!(
                "sessions_send may reach these other agents: {}.",
                reachable.join(", ")
            )
        });
        let spawnable: Vec<&str> = others
            .iter()
            .copied()
            .filter(|id| self.may_spawn_on(agent_id, id).is_ok())
            .collect();
        let limits = self.limits(agent_id);
        lines.push(format!(
            "sessions_spawn may start sessions of {}; spawned sessions nest at most {} deep, and one session holds at most {} children at once{}.",
            if spawnable.is_empty() {
                "yourself only (subagents.allowAgents names no other agent)".to_string()
            } else {
                format!("yourself and of {}", spawnable.join(", "))
            },
            limits.max_spawn_depth,
            limits.max_children,
            limits
                .max_concurrent
                .map_or(String::new(), |n| format!("; at most {n} of your spawned runs run at once")),
        ));
        lines.push(format!(
            "sessions_list and sessions_history show {} (tools.sessions.visibility).",
            match self.visibility_of(agent_id) {
                Visibility::SelfOnly => "your own session only",
                Visibility::Tree => "your session and the sessions it spawned",
                Visibility::Agent => "every session of your agent",
                Visibility::All => "every session you may reach",
            }
        ));
        lines.push(
            "A session the hub spawned has fewer tools: it reports back through its final answer (its first message says so, under `# Subagent Context`).".to_string(),
        );
        lines
    }

    /// The spawn limits of agent `agent_id` (the defaults for an agent not in the config).
    pub(crate) fn limits(&self, agent_id: &str) -> Limits {
        self.agents
            .get(agent_id)
            .map(|a| a.limits.clone())
            .unwrap_or_default()
    }

    /// Whether a session of `agent_id` at spawn depth `depth` lacks `tool` (hub.md, "Sub-agent
    /// tools"): a session the Hub did not spawn has every tool; a spawned one lacks
    /// [`SUBAGENT_DENY`], a leaf [`LEAF_DENY`] too, as the agent's `subagents.tools` changes
    /// them (OpenClaw's `resolveSubagentToolPolicy`).
    pub(crate) fn tool_denied(&self, agent_id: &str, depth: u32, tool: &str) -> Option<Denial> {
        if depth == 0 {
            return None;
        }
        let limits = self.limits(agent_id);
        let t = &limits.tools;
        let given_back = |tool: &str| {
            listed(&t.also_allow, tool) || t.allow.as_ref().is_some_and(|a| listed(a, tool))
        };
        let leaf = depth >= limits.max_spawn_depth;
        let denial = |why: String| {
            Some(Denial::new(
                Reason::ToolDenied,
                format!("`{tool}` is not available to this session: {why}"),
            ))
        };
        if SUBAGENT_DENY.contains(&tool) && !given_back(tool) {
            return denial(format!(
                "a spawned session (depth {depth}) reports back through its final answer and does not survey or message other sessions; `subagents.tools.alsoAllow` of agent `{agent_id}` can give it back"
            ));
        }
        if leaf && LEAF_DENY.contains(&tool) && !given_back(tool) {
            return denial(format!(
                "a leaf session (depth {depth}, subagents.maxSpawnDepth {}) manages no children; `subagents.tools.alsoAllow` of agent `{agent_id}` can give it back",
                limits.max_spawn_depth
            ));
        }
        if listed(&t.deny, tool) {
            return denial(format!(
                "agent `{agent_id}`'s subagents.tools.deny takes it from its spawned sessions"
            ));
        }
        if let Some(allow) = &t.allow
            && !listed(allow, tool)
            && !listed(&t.also_allow, tool)
        {
            return denial(format!(
                "it is not in agent `{agent_id}`'s subagents.tools.allow"
            ));
        }
        None
    }

    /// `tools.agentToAgent` between two agents; the same agent always may.
    pub(crate) fn agent_to_agent(&self, requester: &str, target: &str) -> Result<(), Denial> {
        if requester == target {
            return Ok(());
        }
        if !self.a2a_enabled {
            return Err(Denial::new(
                Reason::AgentToAgentDisabled,
                format!(
                    "agent-to-agent messaging is off (tools.agentToAgent.enabled: false): `{requester}` may not reach `{target}`"
                ),
            ));
        }
        if !self.a2a_allow.is_empty() {
            for (who, id) in [("requester", requester), ("target", target)] {
                if !listed(&self.a2a_allow, id) {
                    return Err(Denial::new(
                        Reason::AgentToAgentNotAllowed,
                        format!(
                            "the {who} `{id}` is not in tools.agentToAgent.allow, so `{requester}` may not reach `{target}`"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `subagents.allowAgents` of `requester`: may it spawn on `target`?
    pub(crate) fn may_spawn_on(&self, requester: &str, target: &str) -> Result<(), Denial> {
        if requester == target {
            return Ok(());
        }
        let allowed = self
            .agents
            .get(requester)
            .and_then(|a| a.allow_agents.as_ref())
            .is_some_and(|allow| listed(allow, target));
        if allowed {
            Ok(())
        } else {
            Err(Denial::new(
                Reason::SpawnNotAllowed,
                format!(
                    "`{requester}` may not spawn on `{target}`: it is not in `{requester}`'s subagents.allowAgents"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HubPolicy {
        let mut p = HubPolicy::default();
        for id in ["a", "b", "c"] {
            p.agents.insert(
                id.into(),
                HubAgent {
                    id: id.into(),
                    name: None,
                    description: None,
                    when_to_use: None,
                    runtime: RuntimeKind::Acp,
                    allow_agents: None,
                    limits: Limits::default(),
                    workspace: format!("/ws/{id}").into(),
                    clamped: false,
                    private_network: false,
                    hub_socket: None,
                    artifact_max_bytes: crate::tasks::artifacts::DEFAULT_MAX_BYTES,
                    artifact_quota_bytes: crate::tasks::artifacts::DEFAULT_QUOTA_BYTES,
                },
            );
        }
        p
    }

    #[test]
    fn agent_to_agent_is_open_by_default_and_the_allow_list_binds_both_ends() {
        let mut p = policy();
        assert!(p.agent_to_agent("a", "b").is_ok());
        p.a2a_allow = vec!["a".into(), "b".into()];
        assert!(p.agent_to_agent("a", "b").is_ok());
        let denied = p.agent_to_agent("a", "c").unwrap_err();
        assert_eq!(denied.reason, Reason::AgentToAgentNotAllowed);
        assert!(denied.error.contains("target `c`"), "{}", denied.error);
        assert_eq!(
            p.agent_to_agent("c", "a").unwrap_err().reason,
            Reason::AgentToAgentNotAllowed
        );
        p.a2a_allow = vec!["*".into()];
        assert!(p.agent_to_agent("c", "a").is_ok());
        p.a2a_enabled = false;
        assert_eq!(
            p.agent_to_agent("a", "b").unwrap_err().reason,
            Reason::AgentToAgentDisabled
        );
        // The same agent skips it.
        assert!(p.agent_to_agent("a", "a").is_ok());
    }

    fn denied(p: &HubPolicy, depth: u32) -> Vec<&'static str> {
        super::super::tools::ALL
            .into_iter()
            .filter(|tool| p.tool_denied("a", depth, tool).is_some())
            .collect()
    }

    /// Review B: a spawned child kept `sessions_send`, `sessions_history` and the rest, so it
    /// drove and read other agents' sessions; OpenClaw 2026.9 takes them away.
    #[test]
    fn sub_agents_kept_the_session_tools_openclaw_denies_them() {
        use super::super::tools::*;
        let mut p = policy();
        // Not spawned: everything.
        assert!(denied(&p, 0).is_empty());
        // Spawned, depth 1 of 3: no survey, no status, no sends.
        let tasks = [
            TASKS_CREATE,
            TASKS_GET,
            TASKS_LIST,
            TASKS_UPDATE,
            TASKS_REVIEW,
            ARTIFACTS_PUT,
            ARTIFACTS_GET,
            PLAN_UPDATE,
        ];
        let with_tasks = |tools: &[&'static str]| -> Vec<&'static str> {
            tools.iter().copied().chain(tasks).collect()
        };
        assert_eq!(
            denied(&p, 1),
            with_tasks(&[AGENTS_LIST, SESSIONS_SEND, SESSION_STATUS])
        );
        assert_eq!(
            denied(&p, 2),
            with_tasks(&[AGENTS_LIST, SESSIONS_SEND, SESSION_STATUS])
        );
        // A leaf: no children to manage either.
        assert_eq!(
            denied(&p, 3),
            with_tasks(&[
                AGENTS_LIST,
                SESSIONS_LIST,
                SESSIONS_HISTORY,
                SESSIONS_SEND,
                SESSIONS_SPAWN,
                SUBAGENTS,
                SESSION_STATUS
            ])
        );
        let d = p.tool_denied("a", 1, SESSIONS_SEND).unwrap();
        assert_eq!(d.reason, Reason::ToolDenied);
        assert!(d.error.contains("alsoAllow"), "{}", d.error);
        let d = p.tool_denied("a", 3, SESSIONS_HISTORY).unwrap();
        assert!(d.error.contains("leaf"), "{}", d.error);

        // subagents.tools: alsoAllow gives back, deny takes, allow narrows.
        p.agents.get_mut("a").unwrap().limits.tools = SubagentTools {
            allow: None,
            also_allow: vec!["sessions_send".into(), "sessions_h*".into()],
            deny: vec!["management_request".into()],
        };
        assert_eq!(
            denied(&p, 1),
            with_tasks(&[AGENTS_LIST, SESSION_STATUS, MANAGEMENT_REQUEST])
        );
        assert_eq!(
            denied(&p, 3),
            with_tasks(&[
                AGENTS_LIST,
                SESSIONS_LIST,
                SESSIONS_SPAWN,
                SUBAGENTS,
                SESSION_STATUS,
                MANAGEMENT_REQUEST
            ])
        );
        p.agents.get_mut("a").unwrap().limits.tools = SubagentTools {
            allow: Some(vec!["sessions_send".into(), "subagents".into()]),
            also_allow: Vec::new(),
            deny: Vec::new(),
        };
        let kept: Vec<&str> = ALL
            .into_iter()
            .filter(|t| p.tool_denied("a", 1, t).is_none())
            .collect();
        assert_eq!(kept, [SESSIONS_SEND, SUBAGENTS]);
        // The agent's own sessions are untouched by it.
        assert!(denied(&p, 0).is_empty());
    }

    /// Review E5: only running children counted, so a session spawned thousands of
    /// `cleanup: keep` children, each with an open runtime session and a live token.
    #[test]
    fn kept_children_count_against_max_children_per_agent() {
        let limits = Limits {
            max_children: 2,
            ..Limits::default()
        };
        let running = (false, Some(RunState::Running));
        let kept = (false, Some(RunState::Completed));
        let closed = (true, Some(RunState::Completed));
        let held = |c: &[(bool, Option<RunState>)]| HeldChildren::count(c.iter().copied());
        assert_eq!(
            held(&[running, kept, closed, (false, None)]),
            HeldChildren {
                running: 1,
                kept: 2
            }
        );
        assert!(
            limits
                .may_add_child("a", held(&[running, closed, closed]))
                .is_ok()
        );
        for full in [[running, kept], [kept, kept], [running, running]] {
            let denied = limits.may_add_child("a", held(&full)).unwrap_err();
            assert_eq!(denied.reason, Reason::TooManyChildren, "{full:?}");
        }
        let denied = limits.may_add_child("a", held(&[kept, kept])).unwrap_err();
        assert!(
            denied.error.contains("0 running and 2 kept"),
            "{}",
            denied.error
        );
        assert!(denied.error.contains("keptIdleSeconds"), "{}", denied.error);
        // A closed child holds nothing, whatever its run.
        assert!(
            limits
                .may_add_child("a", held(&[closed, closed, closed]))
                .is_ok()
        );
    }

    #[test]
    fn spawning_on_another_agent_needs_allow_agents() {
        let mut p = policy();
        assert!(p.may_spawn_on("a", "a").is_ok());
        assert_eq!(
            p.may_spawn_on("a", "b").unwrap_err().reason,
            Reason::SpawnNotAllowed
        );
        p.agents.get_mut("a").unwrap().allow_agents = Some(vec!["b".into()]);
        assert!(p.may_spawn_on("a", "b").is_ok());
        assert!(p.may_spawn_on("a", "c").is_err());
        p.agents.get_mut("a").unwrap().allow_agents = Some(vec!["*".into()]);
        assert!(p.may_spawn_on("a", "c").is_ok());
    }
}
