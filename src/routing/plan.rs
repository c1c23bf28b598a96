//! The compiled routing plan: bindings indexed by channel, account and tier, so that resolving
//! a message costs a bounded number of hash lookups whatever the number of bindings
//! (routing.md §3–§5).

use rustc_hash::FxHashMap as HashMap;

use super::input::{RouteInput, RouteResult};
use super::normalize::{self, PeerClass, PeerKind};
use super::scope::{AccountPattern, Scope, Tier};
use super::session::{SessionSettings, session_keys};
use crate::config::Config;
use crate::config::model::{BindingType, DmScope, GroupScope};

/// Where a binding is written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindingRef {
    pub file: String,
    pub line: u32,
    pub index: usize,
}

/// One route binding as the router needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledBinding {
    pub agent_id: String,
    pub scope: Scope,
    pub dm_scope: Option<DmScope>,
    pub group_scope: Option<GroupScope>,
    pub source: BindingRef,
}

/// The bindings of one channel and one account pattern, by tier. Lists hold indices into
/// [`RoutingPlan::bindings`], in config order.
#[derive(Debug, Default, Clone)]
struct TierIndex {
    peer: HashMap<(PeerClass, String), Vec<usize>>,
    wildcard: HashMap<PeerClass, Vec<usize>>,
    guild_roles: HashMap<String, Vec<usize>>,
    guild: HashMap<String, Vec<usize>>,
    team: HashMap<String, Vec<usize>>,
    account: Vec<usize>,
    channel: Vec<usize>,
}

/// Which tier decided, as OpenClaw names it in `matchedBy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    Peer,
    Parent,
    Wildcard,
    GuildRoles,
    Guild,
    Team,
    Account,
    Channel,
    Default,
}

impl MatchedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            MatchedBy::Peer => "binding.peer",
            MatchedBy::Parent => "binding.peer.parent",
            MatchedBy::Wildcard => "binding.peer.wildcard",
            MatchedBy::GuildRoles => "binding.guild+roles",
            MatchedBy::Guild => "binding.guild",
            MatchedBy::Team => "binding.team",
            MatchedBy::Account => "binding.account",
            MatchedBy::Channel => "binding.channel",
            MatchedBy::Default => "default",
        }
    }
}

/// A compiled, immutable routing plan.
#[derive(Debug, Clone)]
pub struct RoutingPlan {
    pub bindings: Vec<CompiledBinding>,
    pub default_agent: String,
    pub session: SessionSettings,
    /// (channel, account pattern) → index.
    index: HashMap<(String, AccountPattern), TierIndex>,
}

impl RoutingPlan {
    /// Compiles the route bindings of `config` (ACP bindings take no part in the tiers).
    pub fn compile(config: &Config) -> RoutingPlan {
        let file = config
            .sources
            .get(crate::config::FileKind::Bindings)
            .map(|f| f.path.to_string_lossy().into_owned())
            .unwrap_or_else(|| "bindings.yaml".to_string());
        let root = config
            .sources
            .get(crate::config::FileKind::Bindings)
            .and_then(|f| f.root.as_ref());
        let bindings = config
            .bindings
            .iter()
            .filter(|b| b.spec.kind == BindingType::Route)
            .map(|b| CompiledBinding {
                agent_id: normalize::agent_id(&b.spec.agent_id).into_owned(),
                scope: Scope::from_spec(&b.spec.matcher),
                dm_scope: b.spec.session.as_ref().and_then(|s| s.dm_scope),
                group_scope: b.spec.session.as_ref().and_then(|s| s.group_scope),
                source: BindingRef {
                    file: file.clone(),
                    line: root
                        .and_then(|r| r.pointer(&b.pointer()))
                        .map_or(0, |n| n.span.start.line),
                    index: b.index,
                },
            })
            .collect();
        RoutingPlan::from_parts(
            bindings,
            config.default_agent.clone(),
            SessionSettings::from_config(&config.session),
        )
    }

    /// Builds the index over already compiled bindings (also used when loading a saved plan).
    pub fn from_parts(
        bindings: Vec<CompiledBinding>,
        default_agent: String,
        session: SessionSettings,
    ) -> RoutingPlan {
        let mut index: HashMap<(String, AccountPattern), TierIndex> = HashMap::default();
        for (i, b) in bindings.iter().enumerate() {
            let scope = &b.scope;
            let tiers = index
                .entry((scope.channel.clone(), scope.account.clone()))
                .or_default();
            match scope.tier() {
                Tier::Peer | Tier::Wildcard => {
                    let Some(peer) = &scope.peer else { continue };
                    // A peer of an unknown kind never matches (routing.md §3).
                    let Some(class) = peer.kind.class() else {
                        continue;
                    };
                    match &peer.id {
                        Some(id) if !id.is_empty() => {
                            tiers.peer.entry((class, id.clone())).or_default().push(i);
                        }
                        Some(_) => {}
                        None => tiers.wildcard.entry(class).or_default().push(i),
                    }
                }
                Tier::GuildRoles => push(&mut tiers.guild_roles, scope.guild.as_ref(), i),
                Tier::Guild => push(&mut tiers.guild, scope.guild.as_ref(), i),
                Tier::Team => push(&mut tiers.team, scope.team.as_ref(), i),
                Tier::Account => tiers.account.push(i),
                Tier::Channel => tiers.channel.push(i),
            }
        }
        RoutingPlan {
            bindings,
            default_agent,
            session,
            index,
        }
    }

    /// Picks the agent and session for one inbound message.
    pub fn resolve(&self, input: &RouteInput) -> RouteResult {
        let channel = normalize::channel(&input.channel);
        let account = normalize::account_id(input.account_id.as_deref().unwrap_or(""));
        let exact = self.index.get(&(
            channel.to_string(),
            AccountPattern::Exact(account.to_string()),
        ));
        let any = self.index.get(&(channel.to_string(), AccountPattern::Any));
        let peer = input
            .peer
            .as_ref()
            .map(|p| (PeerKind::parse(&p.kind), p.id.trim()));
        let parent = input
            .parent_peer
            .as_ref()
            .map(|p| (PeerKind::parse(&p.kind), p.id.trim()))
            .filter(|(_, id)| !id.is_empty());
        let guild = input
            .guild_id
            .as_deref()
            .map(str::trim)
            .filter(|g| !g.is_empty());
        let team = input
            .team_id
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let roles: Vec<&str> = input.member_role_ids.iter().map(|r| r.trim()).collect();
        let facts = Facts {
            guild,
            team,
            roles: &roles,
        };

        // Within a tier, the first binding in config order wins: the lower index of the first
        // match among the exact-account and the `*` candidates.
        let first = |select: &dyn Fn(&TierIndex) -> Option<&Vec<usize>>,
                     scope_peer: Option<(&PeerKind, &str)>|
         -> Option<usize> {
            let pick = |tiers: Option<&TierIndex>| {
                tiers.and_then(select).and_then(|list| {
                    list.iter()
                        .copied()
                        .find(|&i| self.bindings[i].matches(scope_peer, &facts))
                })
            };
            match (pick(exact), pick(any)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };

        // A peer's tier key: its kind class (`channel` folded into `group`) and id. A kind
        // outside the three has no class and matches no peer binding.
        let keyed = |p: &Option<(PeerKind, &'_ str)>| {
            p.as_ref().and_then(|(kind, id)| {
                Some((
                    (kind.class()?, id.to_string()),
                    kind.clone(),
                    id.to_string(),
                ))
            })
        };
        let peer_key = keyed(&peer);
        let parent_key = keyed(&parent);
        let scope_peer = peer.as_ref().map(|(k, id)| (k, *id));
        let tier = |m: MatchedBy| move |i: usize| (i, m);
        let decided = peer_key
            .as_ref()
            .and_then(|(key, kind, id)| first(&|t| t.peer.get(key), Some((kind, id))))
            .map(tier(MatchedBy::Peer))
            .or_else(|| {
                parent_key
                    .as_ref()
                    .and_then(|(key, kind, id)| first(&|t| t.peer.get(key), Some((kind, id))))
                    .map(tier(MatchedBy::Parent))
            })
            .or_else(|| {
                peer_key
                    .as_ref()
                    .and_then(|((class, _), _, _)| first(&|t| t.wildcard.get(class), scope_peer))
                    .map(tier(MatchedBy::Wildcard))
            })
            .or_else(|| {
                guild
                    .filter(|_| !roles.is_empty())
                    .and_then(|g| first(&|t| t.guild_roles.get(g), scope_peer))
                    .map(tier(MatchedBy::GuildRoles))
            })
            .or_else(|| {
                guild
                    .and_then(|g| first(&|t| t.guild.get(g), scope_peer))
                    .map(tier(MatchedBy::Guild))
            })
            .or_else(|| {
                team.and_then(|x| first(&|t| t.team.get(x), scope_peer))
                    .map(tier(MatchedBy::Team))
            })
            .or_else(|| first(&|t| Some(&t.account), scope_peer).map(tier(MatchedBy::Account)))
            .or_else(|| first(&|t| Some(&t.channel), scope_peer).map(tier(MatchedBy::Channel)));

        let binding = decided.map(|(i, _)| &self.bindings[i]);
        let matched_by = decided.map_or(MatchedBy::Default, |(_, m)| m);
        let agent_id = binding.map_or(self.default_agent.as_str(), |b| b.agent_id.as_str());
        let dm_scope = binding
            .and_then(|b| b.dm_scope)
            .or(input.dm_scope)
            .or(self.session.dm_scope)
            .unwrap_or(DmScope::Main);
        let group_scope = binding
            .and_then(|b| b.group_scope)
            .or(input.group_scope)
            .or(self.session.group_scope)
            .unwrap_or(GroupScope::PerGroup);
        let keys = session_keys(
            &self.session,
            agent_id,
            &channel,
            &account,
            peer.as_ref().map(|(k, id)| (k, *id)),
            dm_scope,
            group_scope,
        );
        RouteResult {
            agent_id: agent_id.to_string(),
            channel: channel.into_owned(),
            account_id: account.into_owned(),
            last_route_policy: if keys.session == keys.main {
                "main"
            } else {
                "session"
            },
            session_key: keys.session,
            main_session_key: keys.main,
            matched_by,
            dm_scope,
            group_scope,
            binding: binding.map(|b| b.source.clone()),
        }
    }
}

fn push(map: &mut HashMap<String, Vec<usize>>, key: Option<&String>, i: usize) {
    if let Some(key) = key {
        map.entry(key.clone()).or_default().push(i);
    }
}

/// The parts of an input every binding's scope is checked against.
pub(crate) struct Facts<'a> {
    pub guild: Option<&'a str>,
    pub team: Option<&'a str>,
    pub roles: &'a [&'a str],
}

impl CompiledBinding {
    /// Whether every field this binding's `match` sets holds for the input (routing.md §3),
    /// with `scope_peer` as the conversation (the peer, or the parent peer for tier 2). The
    /// account pattern is already satisfied by where the binding is indexed.
    pub(crate) fn matches(&self, scope_peer: Option<(&PeerKind, &str)>, facts: &Facts<'_>) -> bool {
        let s = &self.scope;
        if let Some(pattern) = &s.peer {
            let Some((kind, id)) = scope_peer else {
                return false;
            };
            let compatible = pattern.kind.class().is_some() && pattern.kind.class() == kind.class();
            let id_ok = match &pattern.id {
                None => true,
                Some(want) => !want.is_empty() && want == id,
            };
            if !compatible || !id_ok {
                return false;
            }
        }
        if s.guild.as_deref().is_some_and(|g| Some(g) != facts.guild) {
            return false;
        }
        if s.team.as_deref().is_some_and(|t| Some(t) != facts.team) {
            return false;
        }
        s.roles.is_empty() || s.roles.iter().any(|r| facts.roles.contains(&r.as_str()))
    }
}
