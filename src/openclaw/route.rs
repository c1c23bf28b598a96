//! OpenClaw's inbound routing (its `resolveAgentRoute`, 2026.9), read straight off an
//! `openclaw.json`: the reference import's agreement check compares deepcli's router with.
//!
//! Written from OpenClaw's code, not from deepcli's router, and checked against real OpenClaw
//! answers (`tests/fixtures/openclaw/routes.json`, made by `scripts/openclaw-routes.mjs`). It
//! shares only the session-key writer with deepcli (`routing::session`), whose keys are held to
//! OpenClaw's by the same table. Where OpenClaw refuses to route (no single default agent, a
//! binding naming an agent that is not configured) the answer is a [`Refusal`], not a guess.

use std::collections::HashMap;

use super::json5::Value;
use crate::config::model::{DmScope, GroupScope};
use crate::ids::{self, PeerKind};
use crate::routing::RouteInput;
use crate::routing::session::{SessionSettings, session_keys};

/// OpenClaw's agent id normalization (deepcli's, without the `primary` alias).
pub fn agent_id(raw: &str) -> String {
    let id = ids::agent_id(raw);
    if id == ids::MAIN_AGENT && ids::account_id(raw) == ids::PRIMARY_ALIAS {
        ids::PRIMARY_ALIAS.to_string()
    } else {
        id.into_owned()
    }
}

/// The agents of `agents.entries` (keyed, 2026.9) or `agents.list` (legacy), in order, as
/// (raw id, entry, OpenClaw path). `None` when the config owns no roster at all.
pub fn roster(root: &Value) -> Option<Vec<(String, &Value, String)>> {
    let agents = root.get("agents")?;
    if let Some(entries) = agents.get("entries").filter(|v| **v != Value::Null) {
        return Some(
            entries
                .entries()
                .iter()
                .filter(|(_, v)| matches!(v, Value::Object(_)))
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v,
                        format!("agents.entries.{}", super::key_path(k)),
                    )
                })
                .collect(),
        );
    }
    let list = agents.get("list").filter(|v| **v != Value::Null)?;
    Some(
        list.items()
            .iter()
            .enumerate()
            .filter(|(_, v)| matches!(v, Value::Object(_)))
            .map(|(i, v)| {
                let id = v.get("id").and_then(Value::as_id).unwrap_or_default();
                (id, v, format!("agents.list[{i}]"))
            })
            .collect(),
    )
}

/// Why OpenClaw does not route a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Several agents and no single owner for unmatched messages (`AGENT_SELECTION_REQUIRED`).
    NoDefaultAgent,
    /// A binding names an agent the roster does not have.
    UnknownAgent(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoDefaultAgent => f.write_str(
                "OpenClaw refuses it (AGENT_SELECTION_REQUIRED: several agents, none is the default)",
            ),
            Refusal::UnknownAgent(id) => write!(
                f,
                "OpenClaw refuses it (AGENT_SELECTION_REQUIRED: the binding names agent `{id}`, which is not configured)"
            ),
        }
    }
}

/// Where OpenClaw sends a message: agent and session key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub agent_id: String,
    pub session_key: String,
}

#[derive(Debug, Clone)]
struct Match {
    /// Trimmed `accountId`; empty when omitted.
    account: String,
    peer: PeerMatch,
    guild: Option<String>,
    team: Option<String>,
    roles: Vec<String>,
}

#[derive(Debug, Clone)]
enum PeerMatch {
    None,
    Exact(PeerKind, String),
    Wildcard(PeerKind),
}

#[derive(Debug, Clone)]
struct Binding {
    agent_id: String,
    m: Match,
    dm_scope: Option<DmScope>,
    group_scope: Option<GroupScope>,
}

/// A route binding's match as OpenClaw reads it; `None` when OpenClaw skips the binding.
fn read_match(m: &Value) -> Option<(String, Match)> {
    let channel = m.get("channel")?.as_str()?.trim().to_lowercase();
    if channel.is_empty() {
        return None;
    }
    let peer = match m.get("peer") {
        None | Some(Value::Null) => PeerMatch::None,
        Some(p) => {
            let kind = p.get("kind").and_then(Value::as_str).map(chat_type)?;
            let kind = kind?;
            let id = p.get("id").and_then(Value::as_id)?.trim().to_string();
            if id.is_empty() {
                return None;
            }
            if id == "*" {
                PeerMatch::Wildcard(kind)
            } else {
                PeerMatch::Exact(kind, id)
            }
        }
    };
    let id = |key: &str| {
        m.get(key)
            .and_then(Value::as_id)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let roles = m
        .get("roles")
        .map(|r| r.items().iter().filter_map(Value::as_id).collect())
        .unwrap_or_default();
    Some((
        channel,
        Match {
            account: m
                .get("accountId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim()
                .to_string(),
            peer,
            guild: id("guildId"),
            team: id("teamId"),
            roles,
        },
    ))
}

/// OpenClaw's `normalizeChatType`: `direct`/`dm`, `group`, `channel`; anything else is not a
/// chat type.
pub fn chat_type(raw: &str) -> Option<PeerKind> {
    match raw.trim().to_lowercase().as_str() {
        "direct" | "dm" => Some(PeerKind::Direct),
        "group" => Some(PeerKind::Group),
        "channel" => Some(PeerKind::Channel),
        _ => None,
    }
}

fn scope(v: &Value) -> (Option<DmScope>, Option<GroupScope>) {
    let text = |k: &str| {
        v.get("session")
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
    };
    let dm = text("dmScope").and_then(|s| serde_json::from_value(s.into()).ok());
    let group = text("groupScope").and_then(|s| serde_json::from_value(s.into()).ok());
    (dm, group)
}

/// Bindings of one channel and account, split into OpenClaw's tiers (in config order).
#[derive(Default)]
struct Tiers {
    peer: HashMap<String, Vec<usize>>,
    wildcard: Vec<usize>,
    guild_roles: HashMap<String, Vec<usize>>,
    guild: HashMap<String, Vec<usize>>,
    team: HashMap<String, Vec<usize>>,
    account: Vec<usize>,
    channel: Vec<usize>,
}

fn peer_key(kind: &PeerKind, id: &str) -> String {
    let kind = if *kind == PeerKind::Channel {
        "group"
    } else {
        kind.as_str()
    };
    format!("{kind}:{id}")
}

/// One channel's route bindings: by normalized account, and those for any account (`*`).
type ChannelBindings = (HashMap<String, Vec<usize>>, Vec<usize>);

/// OpenClaw's router over one `openclaw.json`.
pub struct Router {
    bindings: Vec<Binding>,
    /// channel → (normalized account → binding positions, `*` binding positions).
    by_channel: HashMap<String, ChannelBindings>,
    tiers: std::cell::RefCell<HashMap<(String, String), std::rc::Rc<Tiers>>>,
    /// Normalized id → the id OpenClaw answers with; empty when the config lists no agents.
    agents: HashMap<String, String>,
    default_agent: Option<String>,
    session: SessionSettings,
    session_dm: DmScope,
    session_group: GroupScope,
}

impl Router {
    pub fn new(root: &Value) -> Router {
        let roster = roster(root);
        let mut agents = HashMap::new();
        for (raw, _, _) in roster.iter().flatten() {
            let raw = raw.trim();
            if !raw.is_empty() {
                agents.insert(agent_id(raw), agent_id(raw));
            }
        }
        let default_agent = default_agent(root, roster.as_deref());
        let mut bindings = Vec::new();
        let mut by_channel: HashMap<String, ChannelBindings> = HashMap::new();
        for b in root.get("bindings").map(Value::items).unwrap_or_default() {
            if !matches!(b, Value::Object(_)) || is_acp(b) {
                continue;
            }
            let Some((channel, m)) = b.get("match").and_then(read_match) else {
                continue;
            };
            let (dm_scope, group_scope) = scope(b);
            let i = bindings.len();
            let slot = by_channel.entry(channel).or_default();
            if m.account == "*" {
                slot.1.push(i);
            } else {
                slot.0
                    .entry(ids::account_id(&m.account).into_owned())
                    .or_default()
                    .push(i);
            }
            bindings.push(Binding {
                agent_id: b.get("agentId").and_then(Value::as_id).unwrap_or_default(),
                m,
                dm_scope,
                group_scope,
            });
        }
        let session = root.get("session");
        let text = |k: &str| session.and_then(|s| s.get(k)).and_then(Value::as_str);
        // OpenClaw 2026.9 ignores `session.mainKey`: the main session is always `main`.
        let mut section = crate::config::model::SessionSection::default();
        for (name, list) in session
            .and_then(|s| s.get("identityLinks"))
            .map(Value::entries)
            .unwrap_or_default()
        {
            if name.trim().is_empty() {
                continue;
            }
            section.identity_links.insert(
                name.trim().to_string(),
                list.items().iter().filter_map(Value::as_id).collect(),
            );
        }
        Router {
            bindings,
            by_channel,
            tiers: Default::default(),
            agents,
            default_agent,
            session: SessionSettings::from_config(&section),
            session_dm: text("dmScope")
                .and_then(|s| serde_json::from_value(s.into()).ok())
                .unwrap_or(DmScope::Main),
            session_group: text("groupScope")
                .and_then(|s| serde_json::from_value(s.into()).ok())
                .unwrap_or(GroupScope::PerGroup),
        }
    }

    /// The agent OpenClaw gives messages no binding matches, if there is one.
    pub fn default_agent(&self) -> Option<&str> {
        self.default_agent.as_deref()
    }

    fn tiers(&self, channel: &str, account: &str) -> std::rc::Rc<Tiers> {
        let key = (channel.to_string(), account.to_string());
        if let Some(t) = self.tiers.borrow().get(&key) {
            return t.clone();
        }
        let mut positions: Vec<usize> = Vec::new();
        if let Some((by_account, any)) = self.by_channel.get(channel) {
            positions.extend(by_account.get(account).into_iter().flatten());
            positions.extend(any);
        }
        positions.sort_unstable();
        let mut t = Tiers::default();
        for i in positions {
            let m = &self.bindings[i].m;
            match &m.peer {
                PeerMatch::Exact(kind, id) => t.peer.entry(peer_key(kind, id)).or_default().push(i),
                PeerMatch::Wildcard(_) => t.wildcard.push(i),
                PeerMatch::None => match (&m.guild, &m.team) {
                    (Some(g), _) if !m.roles.is_empty() => {
                        t.guild_roles.entry(g.clone()).or_default().push(i)
                    }
                    (Some(g), _) => t.guild.entry(g.clone()).or_default().push(i),
                    (None, Some(team)) => t.team.entry(team.clone()).or_default().push(i),
                    (None, None) if m.account != "*" => t.account.push(i),
                    (None, None) => t.channel.push(i),
                },
            }
        }
        let t = std::rc::Rc::new(t);
        self.tiers.borrow_mut().insert(key, t.clone());
        t
    }

    fn matches(&self, m: &Match, peer: Option<(&PeerKind, &str)>, q: &Query) -> bool {
        match &m.peer {
            PeerMatch::Exact(kind, id) => {
                let Some((pk, pid)) = peer else { return false };
                if !kind_matches(kind, pk) || pid != id {
                    return false;
                }
            }
            PeerMatch::Wildcard(kind) => {
                let Some((pk, _)) = peer else { return false };
                if !kind_matches(kind, pk) {
                    return false;
                }
            }
            PeerMatch::None => {}
        }
        if m.guild.as_ref().is_some_and(|g| *g != q.guild) {
            return false;
        }
        if m.team.as_ref().is_some_and(|t| *t != q.team) {
            return false;
        }
        m.roles.is_empty() || m.roles.iter().any(|r| q.roles.contains(r))
    }

    /// Routes one message as OpenClaw does.
    pub fn resolve(&self, input: &RouteInput) -> Result<Answer, Refusal> {
        let channel = input.channel.trim().to_lowercase();
        let account = ids::account_id(input.account_id.as_deref().unwrap_or("")).into_owned();
        let peer = input.peer.as_ref().map(|p| {
            (
                chat_type(&p.kind).unwrap_or_else(|| PeerKind::parse(&p.kind)),
                p.id.trim().to_string(),
            )
        });
        let parent = input.parent_peer.as_ref().map(|p| {
            (
                chat_type(&p.kind).unwrap_or_else(|| PeerKind::parse(&p.kind)),
                p.id.trim().to_string(),
            )
        });
        let q = Query {
            guild: input.guild_id.as_deref().unwrap_or("").trim().to_string(),
            team: input.team_id.as_deref().unwrap_or("").trim().to_string(),
            roles: input.member_role_ids.clone(),
        };
        let tiers = self.tiers(&channel, &account);
        let scope_peer = peer.as_ref().map(|(k, id)| (k, id.as_str()));
        let first = |list: Option<&Vec<usize>>, peer: Option<(&PeerKind, &str)>| {
            list.into_iter()
                .flatten()
                .copied()
                .find(|&i| self.matches(&self.bindings[i].m, peer, &q))
        };
        let parent_peer = parent
            .as_ref()
            .filter(|(_, id)| !id.is_empty())
            .map(|(k, id)| (k, id.as_str()));
        let hit = scope_peer
            .and_then(|(k, id)| first(tiers.peer.get(&peer_key(k, id)), scope_peer))
            .or_else(|| {
                parent_peer.and_then(|(k, id)| first(tiers.peer.get(&peer_key(k, id)), parent_peer))
            })
            .or_else(|| scope_peer.and_then(|_| first(Some(&tiers.wildcard), scope_peer)))
            .or_else(|| {
                (!q.guild.is_empty() && !q.roles.is_empty())
                    .then(|| first(tiers.guild_roles.get(&q.guild), scope_peer))
                    .flatten()
            })
            .or_else(|| {
                (!q.guild.is_empty())
                    .then(|| first(tiers.guild.get(&q.guild), scope_peer))
                    .flatten()
            })
            .or_else(|| {
                (!q.team.is_empty())
                    .then(|| first(tiers.team.get(&q.team), scope_peer))
                    .flatten()
            })
            .or_else(|| first(Some(&tiers.account), scope_peer))
            .or_else(|| first(Some(&tiers.channel), scope_peer));
        let (agent, dm, group) = match hit {
            Some(i) => {
                let b = &self.bindings[i];
                (self.existing_agent(&b.agent_id)?, b.dm_scope, b.group_scope)
            }
            None => (
                self.default_agent.clone().ok_or(Refusal::NoDefaultAgent)?,
                None,
                None,
            ),
        };
        let dm = dm.or(input.dm_scope).unwrap_or(self.session_dm);
        let group = group.or(input.group_scope).unwrap_or(self.session_group);
        let keys = session_keys(
            &self.session,
            &agent,
            &channel,
            &account,
            scope_peer,
            dm,
            group,
        );
        Ok(Answer {
            agent_id: agent,
            session_key: keys.session,
        })
    }

    /// OpenClaw's `pickFirstExistingAgentId` for a binding's agent.
    fn existing_agent(&self, raw: &str) -> Result<String, Refusal> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return self.default_agent.clone().ok_or(Refusal::NoDefaultAgent);
        }
        let id = agent_id(trimmed);
        if let Some(found) = self.agents.get(&id) {
            return Ok(found.clone());
        }
        if id == ids::MAIN_AGENT || self.agents.is_empty() {
            return Ok(id);
        }
        Err(Refusal::UnknownAgent(id))
    }
}

struct Query {
    guild: String,
    team: String,
    roles: Vec<String>,
}

fn kind_matches(binding: &PeerKind, input: &PeerKind) -> bool {
    binding == input
        || matches!(
            (binding, input),
            (PeerKind::Group, PeerKind::Channel) | (PeerKind::Channel, PeerKind::Group)
        )
}

/// OpenClaw's `isAcpBinding`: `type` is exactly `"acp"`; any other type is a route binding.
pub fn is_acp(binding: &Value) -> bool {
    binding.get("type").and_then(Value::as_str) == Some("acp")
}

/// OpenClaw's owner of unmatched messages: with `agents.ownership: "explicit"` the
/// `agents.defaults.systemAgent.agentId` (when configured); otherwise the one agent marked
/// `default: true`, else the sole agent, else `main` when there is no roster at all. `None`:
/// OpenClaw refuses such messages.
pub fn default_agent(root: &Value, roster: Option<&[(String, &Value, String)]>) -> Option<String> {
    let ids: Vec<String> = roster
        .unwrap_or_default()
        .iter()
        .map(|(raw, _, _)| agent_id(raw))
        .collect();
    let agents = root.get("agents");
    let explicit = agents
        .and_then(|a| a.get("ownership"))
        .and_then(Value::as_str)
        == Some("explicit");
    let marked = || -> Option<String> {
        let marked: Vec<&String> = roster
            .unwrap_or_default()
            .iter()
            .filter(|(_, v, _)| v.get("default").and_then(Value::as_bool) == Some(true))
            .map(|(raw, _, _)| raw)
            .collect();
        (marked.len() == 1).then(|| agent_id(marked[0]))
    };
    let sole = || -> Option<String> {
        match roster {
            None => Some(ids::MAIN_AGENT.to_string()),
            Some([]) => None,
            Some([(raw, _, _)]) => Some(agent_id(raw)),
            Some(_) => None,
        }
    };
    if explicit {
        let recorded = agents
            .and_then(|a| a.get("defaults"))
            .and_then(|d| d.get("systemAgent"))
            .and_then(|s| s.get("agentId"))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(agent_id);
        // listAgentIds: with no roster at all, the implicit `main`.
        let listed = |id: &String| ids.contains(id) || (roster.is_none() && id == ids::MAIN_AGENT);
        return recorded.filter(listed).or_else(sole);
    }
    marked().or_else(sole)
}

/// The agent whose workspace is `agents.defaults.workspace` itself (OpenClaw's legacy data
/// owner: the one marked agent, else the sole one; with explicit ownership only the sole one).
/// Every other agent's is `<agents.defaults.workspace>/<id>`.
pub fn workspace_owner(
    root: &Value,
    roster: Option<&[(String, &Value, String)]>,
) -> Option<String> {
    let explicit = root
        .get("agents")
        .and_then(|a| a.get("ownership"))
        .and_then(Value::as_str)
        == Some("explicit");
    let sole = match roster {
        None => Some(ids::MAIN_AGENT.to_string()),
        Some([(raw, _, _)]) => Some(agent_id(raw)),
        Some(_) => None,
    };
    if explicit {
        return sole;
    }
    let marked: Vec<&String> = roster
        .unwrap_or_default()
        .iter()
        .filter(|(_, v, _)| v.get("default").and_then(Value::as_bool) == Some(true))
        .map(|(raw, _, _)| raw)
        .collect();
    if marked.len() == 1 {
        Some(agent_id(marked[0]))
    } else {
        sole
    }
}
