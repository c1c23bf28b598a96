//! The compiled routing plan: bindings indexed by channel, account and tier, so that resolving
//! a message costs a bounded number of hash lookups whatever the number of bindings
//! (routing.md §3–§5).
//!
//! One walk over the tiers ([`RoutingPlan::walk`]) serves both [`RoutingPlan::resolve`] and
//! [`RoutingPlan::explain`]: the explanation is a trace of the very code that decides, so it can
//! never tell a different story than the router.

use std::borrow::Cow;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::input::{RouteInput, RouteResult};
use super::normalize::{self, PeerClass, PeerKind};
use super::scope::{AccountPattern, Scope, Tier};
use super::session::{SessionSettings, session_keys};
use crate::config::Config;
use crate::config::model::{BindingType, DmScope, GroupScope, RuntimeKind};

/// Where a binding is written: the file, the line of its list entry and its index in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindingRef {
    pub file: Arc<str>,
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

/// Positions in [`RoutingPlan::bindings`], in config order.
type List = Vec<u32>;

/// The bindings of one channel and one account pattern, by tier.
#[derive(Debug, Default, Clone)]
struct TierIndex {
    /// By peer class (`direct`, `group`), then peer id.
    peer: [HashMap<String, List>; 2],
    /// By peer class.
    wildcard: [List; 2],
    guild_roles: HashMap<String, List>,
    guild: HashMap<String, List>,
    team: HashMap<String, List>,
    account: List,
    channel: List,
}

/// The bindings of one channel: exact-account indexes and the `accountId: "*"` index.
#[derive(Debug, Default, Clone)]
struct ChannelIndex {
    exact: HashMap<String, TierIndex>,
    any: TierIndex,
}

/// Which tier decided, as OpenClaw names it in `matchedBy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The tiers in resolution order (`Default` is what is left when none matches).
    pub const TIERS: [MatchedBy; 8] = [
        MatchedBy::Peer,
        MatchedBy::Parent,
        MatchedBy::Wildcard,
        MatchedBy::GuildRoles,
        MatchedBy::Guild,
        MatchedBy::Team,
        MatchedBy::Account,
        MatchedBy::Channel,
    ];

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

    pub fn parse(text: &str) -> Option<MatchedBy> {
        MatchedBy::TIERS
            .into_iter()
            .chain([MatchedBy::Default])
            .find(|m| m.as_str() == text)
    }
}

/// Why a candidate binding did not match (the account pattern and the tier key already hold,
/// by where the binding is indexed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// The binding names a peer and the input has none.
    NoPeer,
    /// The binding's peer kind is not compatible with the input's.
    PeerKind,
    /// The binding's peer id differs from the input's.
    PeerId,
    Guild,
    Team,
    /// None of the binding's roles is among the input's `memberRoleIds`.
    Roles,
}

/// Why a tier was not tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    NoPeer,
    /// The peer's kind is none of `direct`, `group`, `channel`: it matches no peer binding.
    UnknownPeerKind,
    NoParentPeer,
    NoGuild,
    NoRoles,
    NoTeam,
}

/// What the tier walk reports; [`RoutingPlan::resolve`] listens to nothing, `explain` to all.
trait Observer {
    fn skipped(&mut self, _tier: MatchedBy, _why: Skip) {}
    fn tried(&mut self, _tier: MatchedBy, _key: Option<&str>, _class: Option<PeerClass>) {}
    fn candidate(&mut self, _binding: usize, _verdict: Result<(), Miss>) {}
}

struct Quiet;
impl Observer for Quiet {}

/// A route input after normalization (routing.md §2), borrowing from the input where it can.
struct Query<'a> {
    channel: Cow<'a, str>,
    account: Cow<'a, str>,
    peer: Option<(PeerKind, &'a str)>,
    parent: Option<(PeerKind, &'a str)>,
    guild: Option<&'a str>,
    team: Option<&'a str>,
    roles: &'a [String],
}

impl<'a> Query<'a> {
    fn new(input: &'a RouteInput) -> Query<'a> {
        let peer = |p: &'a Option<super::Peer>| {
            p.as_ref().map(|p| (PeerKind::parse(&p.kind), p.id.trim()))
        };
        let text = |t: &'a Option<String>| t.as_deref().map(str::trim).filter(|t| !t.is_empty());
        Query {
            channel: normalize::channel(&input.channel),
            account: normalize::account_id(input.account_id.as_deref().unwrap_or("")),
            peer: peer(&input.peer),
            parent: peer(&input.parent_peer).filter(|(_, id)| !id.is_empty()),
            guild: text(&input.guild_id),
            team: text(&input.team_id),
            roles: &input.member_role_ids,
        }
    }

    fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.trim() == role)
    }
}

/// An agent as the Access layer needs it: where it works and what runs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanAgent {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub workspace: String,
    pub runtime: RuntimeKind,
}

/// A `type: acp` binding: one exact conversation bound to a persistent ACP session of its
/// agent. The tiers never see these; the Access layer consults them first.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpBinding {
    pub agent_id: String,
    pub channel: String,
    /// Normalized; ACP bindings name one account (`default` when omitted).
    pub account: String,
    pub peer_kind: PeerKind,
    pub peer_id: String,
    pub mode: Option<String>,
    pub label: Option<String>,
    pub source: BindingRef,
}

/// The parts of a plan besides its route bindings.
#[derive(Debug, Clone, Default)]
pub struct PlanParts {
    pub agents: Vec<PlanAgent>,
    pub default_agent: String,
    pub session: SessionSettings,
    pub acp: Vec<AcpBinding>,
}

/// A compiled, immutable routing plan.
#[derive(Debug, Clone)]
pub struct RoutingPlan {
    pub bindings: Vec<CompiledBinding>,
    pub agents: Vec<PlanAgent>,
    pub default_agent: String,
    pub session: SessionSettings,
    pub acp: Vec<AcpBinding>,
    index: HashMap<String, ChannelIndex>,
    /// (channel, account, peer class, peer id) → position in `acp`.
    acp_index: HashMap<(String, String, PeerClass, String), usize>,
}

impl RoutingPlan {
    /// Compiles the bindings of `config`: route bindings into the tier index, ACP bindings into
    /// their own exact-conversation table.
    pub fn compile(config: &Config) -> RoutingPlan {
        let source = config.sources.get(crate::config::FileKind::Bindings);
        let file: Arc<str> = source.map_or_else(
            || "bindings.yaml".into(),
            |f| f.path.to_string_lossy().into(),
        );
        let root = source.and_then(|f| f.root.as_ref());
        let source_of = |b: &crate::config::resolve::Binding| BindingRef {
            file: file.clone(),
            line: root
                .and_then(|r| r.pointer(&b.pointer()))
                .map_or(0, |n| n.span.start.line),
            index: b.index,
        };
        let mut bindings = Vec::with_capacity(config.bindings.len());
        let mut acp = Vec::new();
        for b in &config.bindings {
            let agent_id = normalize::agent_id(&b.spec.agent_id).into_owned();
            let scope = Scope::from_spec(&b.spec.matcher);
            match b.spec.kind {
                BindingType::Route => bindings.push(CompiledBinding {
                    agent_id,
                    scope,
                    dm_scope: b.spec.session.as_ref().and_then(|s| s.dm_scope),
                    group_scope: b.spec.session.as_ref().and_then(|s| s.group_scope),
                    source: source_of(b),
                }),
                BindingType::Acp => {
                    // The validator requires one concrete conversation; anything else never
                    // matches and is left out.
                    let (AccountPattern::Exact(account), Some(peer)) = (scope.account, scope.peer)
                    else {
                        continue;
                    };
                    let Some(peer_id) = peer.id.filter(|id| !id.is_empty()) else {
                        continue;
                    };
                    acp.push(AcpBinding {
                        agent_id,
                        channel: scope.channel,
                        account,
                        peer_kind: peer.kind,
                        peer_id,
                        mode: b.spec.acp.as_ref().and_then(|a| a.mode.clone()),
                        label: b.spec.acp.as_ref().and_then(|a| a.label.clone()),
                        source: source_of(b),
                    });
                }
            }
        }
        let agents = config
            .agents
            .iter()
            .map(|a| PlanAgent {
                id: a.id().to_string(),
                name: a.spec.name.clone(),
                workspace: a.workspace.to_string_lossy().into_owned(),
                runtime: a
                    .spec
                    .runtime
                    .as_ref()
                    .map_or_else(RuntimeKind::default, |r| r.kind),
            })
            .collect();
        RoutingPlan::from_parts(
            bindings,
            PlanParts {
                agents,
                default_agent: config.default_agent.clone(),
                session: SessionSettings::from_config(&config.session),
                acp,
            },
        )
    }

    /// Builds the index over already compiled bindings (also used when loading a saved plan).
    pub fn from_parts(bindings: Vec<CompiledBinding>, parts: PlanParts) -> RoutingPlan {
        let mut index: HashMap<String, ChannelIndex> = HashMap::default();
        for (i, b) in bindings.iter().enumerate() {
            let i = u32::try_from(i).expect("more than 4 billion bindings");
            let scope = &b.scope;
            let channel = match index.get_mut(scope.channel.as_str()) {
                Some(channel) => channel,
                None => index.entry(scope.channel.clone()).or_default(),
            };
            let tiers = match &scope.account {
                AccountPattern::Any => &mut channel.any,
                AccountPattern::Exact(account) => match channel.exact.get_mut(account.as_str()) {
                    Some(tiers) => tiers,
                    None => channel.exact.entry(account.clone()).or_default(),
                },
            };
            match scope.tier() {
                Tier::Peer | Tier::Wildcard => {
                    let Some(peer) = &scope.peer else { continue };
                    // A peer of an unknown kind or with an empty id never matches (§3).
                    let Some(class) = peer.kind.class() else {
                        continue;
                    };
                    match &peer.id {
                        Some(id) if !id.is_empty() => push(&mut tiers.peer[class as usize], id, i),
                        Some(_) => {}
                        None => tiers.wildcard[class as usize].push(i),
                    }
                }
                Tier::GuildRoles => push_opt(&mut tiers.guild_roles, scope.guild.as_ref(), i),
                Tier::Guild => push_opt(&mut tiers.guild, scope.guild.as_ref(), i),
                Tier::Team => push_opt(&mut tiers.team, scope.team.as_ref(), i),
                Tier::Account => tiers.account.push(i),
                Tier::Channel => tiers.channel.push(i),
            }
        }
        let mut acp_index = HashMap::default();
        for (i, a) in parts.acp.iter().enumerate() {
            if let Some(class) = a.peer_kind.class() {
                let key = (
                    a.channel.clone(),
                    a.account.clone(),
                    class,
                    a.peer_id.clone(),
                );
                // The first binding of a conversation wins, as in the tiers.
                acp_index.entry(key).or_insert(i);
            }
        }
        RoutingPlan {
            bindings,
            agents: parts.agents,
            default_agent: parts.default_agent,
            session: parts.session,
            acp: parts.acp,
            index,
            acp_index,
        }
    }

    /// The ACP binding of one exact conversation, if any (`matchedBy: binding.acp`).
    pub fn acp_binding(&self, input: &RouteInput) -> Option<&AcpBinding> {
        if self.acp_index.is_empty() {
            return None;
        }
        let q = Query::new(input);
        let (kind, id) = q.peer?;
        let key = (
            q.channel.into_owned(),
            q.account.into_owned(),
            kind.class()?,
            id.to_string(),
        );
        self.acp_index.get(&key).map(|&i| &self.acp[i])
    }

    /// Picks the agent and session for one inbound message.
    pub fn resolve(&self, input: &RouteInput) -> RouteResult {
        let query = Query::new(input);
        let decided = self.walk(&query, &mut Quiet);
        self.result(input, query, decided)
    }

    /// Resolves `input` and records, tier by tier, what was tried and why each candidate
    /// binding did or did not match.
    pub fn explain(&self, input: &RouteInput) -> Explanation {
        let query = Query::new(input);
        let mut trace = Trace::default();
        let decided = self.walk(&query, &mut trace);
        // Bindings of this channel that the input's account never saw: the classic surprise
        // is a binding without `accountId`, which covers only the `default` account.
        let mut elsewhere: Vec<(String, usize)> = Vec::new();
        let mut channel_bindings = 0;
        for b in self
            .bindings
            .iter()
            .filter(|b| b.scope.channel == query.channel)
        {
            channel_bindings += 1;
            if let AccountPattern::Exact(account) = &b.scope.account
                && *account != query.account
            {
                match elsewhere.iter_mut().find(|(a, _)| a == account) {
                    Some((_, n)) => *n += 1,
                    None => elsewhere.push((account.clone(), 1)),
                }
            }
        }
        Explanation {
            result: self.result(input, query, decided),
            tiers: trace.tiers,
            channel_bindings,
            other_accounts: elsewhere,
        }
    }

    /// The tiers of routing.md §4 in order; inside a tier, the first binding in config order
    /// (exact-account and `*` candidates merged) whose whole scope matches.
    fn walk(&self, q: &Query<'_>, obs: &mut impl Observer) -> Option<(usize, MatchedBy)> {
        let channel = self.index.get(q.channel.as_ref());
        let exact = channel.and_then(|c| c.exact.get(q.account.as_ref()));
        let any = channel.map(|c| &c.any);
        let peer_class = q.peer.as_ref().and_then(|(kind, _)| kind.class());
        let parent_class = q.parent.as_ref().and_then(|(kind, _)| kind.class());
        let scope_peer = q.peer.as_ref().map(|(kind, id)| (kind, *id));

        for tier in MatchedBy::TIERS {
            let skip = match tier {
                MatchedBy::Peer | MatchedBy::Wildcard => match (&q.peer, peer_class) {
                    (None, _) => Some(Skip::NoPeer),
                    (Some(_), None) => Some(Skip::UnknownPeerKind),
                    _ => None,
                },
                MatchedBy::Parent => match (&q.parent, parent_class) {
                    (None, _) => Some(Skip::NoParentPeer),
                    (Some(_), None) => Some(Skip::UnknownPeerKind),
                    _ => None,
                },
                MatchedBy::GuildRoles if q.guild.is_none() => Some(Skip::NoGuild),
                MatchedBy::GuildRoles if q.roles.is_empty() => Some(Skip::NoRoles),
                MatchedBy::Guild if q.guild.is_none() => Some(Skip::NoGuild),
                MatchedBy::Team if q.team.is_none() => Some(Skip::NoTeam),
                _ => None,
            };
            if let Some(why) = skip {
                obs.skipped(tier, why);
                continue;
            }
            let (key, class, sp) = match tier {
                MatchedBy::Peer | MatchedBy::Wildcard => {
                    (q.peer.as_ref().map(|(_, id)| *id), peer_class, scope_peer)
                }
                MatchedBy::Parent => (
                    q.parent.as_ref().map(|(_, id)| *id),
                    parent_class,
                    q.parent.as_ref().map(|(kind, id)| (kind, *id)),
                ),
                MatchedBy::GuildRoles | MatchedBy::Guild => (q.guild, None, scope_peer),
                MatchedBy::Team => (q.team, None, scope_peer),
                _ => (None, None, scope_peer),
            };
            obs.tried(tier, key, class);
            let a = exact.map_or(&[][..], |t| t.list(tier, key, class));
            let b = any.map_or(&[][..], |t| t.list(tier, key, class));
            if let Some(i) = self.first_match(a, b, sp, q, obs) {
                return Some((i, tier));
            }
        }
        None
    }

    /// The first binding of two config-ordered lists, merged in config order, that matches.
    fn first_match(
        &self,
        mut a: &[u32],
        mut b: &[u32],
        scope_peer: Option<(&PeerKind, &str)>,
        q: &Query<'_>,
        obs: &mut impl Observer,
    ) -> Option<usize> {
        loop {
            let next = match (a.first(), b.first()) {
                (Some(&x), Some(&y)) if x < y => {
                    a = &a[1..];
                    x
                }
                (_, Some(&y)) => {
                    b = &b[1..];
                    y
                }
                (Some(&x), None) => {
                    a = &a[1..];
                    x
                }
                (None, None) => return None,
            } as usize;
            let verdict = self.bindings[next].check(scope_peer, q);
            obs.candidate(next, verdict);
            if verdict.is_ok() {
                return Some(next);
            }
        }
    }

    fn result(
        &self,
        input: &RouteInput,
        q: Query<'_>,
        decided: Option<(usize, MatchedBy)>,
    ) -> RouteResult {
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
            &q.channel,
            &q.account,
            q.peer.as_ref().map(|(kind, id)| (kind, *id)),
            dm_scope,
            group_scope,
        );
        RouteResult {
            agent_id: agent_id.to_string(),
            channel: q.channel.into_owned(),
            account_id: q.account.into_owned(),
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

impl TierIndex {
    /// The candidates of `tier` at `key` (`class` is the peer class for the peer tiers).
    fn list(&self, tier: MatchedBy, key: Option<&str>, class: Option<PeerClass>) -> &[u32] {
        fn keyed<'t>(map: &'t HashMap<String, List>, key: Option<&str>) -> Option<&'t List> {
            map.get(key?)
        }
        let found = match tier {
            MatchedBy::Peer | MatchedBy::Parent => {
                class.and_then(|c| keyed(&self.peer[c as usize], key))
            }
            MatchedBy::Wildcard => class.map(|c| &self.wildcard[c as usize]),
            MatchedBy::GuildRoles => keyed(&self.guild_roles, key),
            MatchedBy::Guild => keyed(&self.guild, key),
            MatchedBy::Team => keyed(&self.team, key),
            MatchedBy::Account => Some(&self.account),
            MatchedBy::Channel => Some(&self.channel),
            MatchedBy::Default => None,
        };
        found.map_or(&[], Vec::as_slice)
    }
}

fn push(map: &mut HashMap<String, List>, key: &str, i: u32) {
    match map.get_mut(key) {
        Some(list) => list.push(i),
        None => {
            map.insert(key.to_string(), vec![i]);
        }
    }
}

fn push_opt(map: &mut HashMap<String, List>, key: Option<&String>, i: u32) {
    if let Some(key) = key {
        push(map, key, i);
    }
}

impl CompiledBinding {
    /// Whether every field this binding's `match` sets holds for the input (routing.md §3),
    /// with `scope_peer` as the conversation (the peer, or the parent peer for tier 2). The
    /// account pattern already holds by where the binding is indexed.
    fn check(&self, scope_peer: Option<(&PeerKind, &str)>, q: &Query<'_>) -> Result<(), Miss> {
        let s = &self.scope;
        if let Some(pattern) = &s.peer {
            let Some((kind, id)) = scope_peer else {
                return Err(Miss::NoPeer);
            };
            if pattern.kind.class().is_none() || pattern.kind.class() != kind.class() {
                return Err(Miss::PeerKind);
            }
            if let Some(want) = &pattern.id
                && (want.is_empty() || want != id)
            {
                return Err(Miss::PeerId);
            }
        }
        if s.guild.as_deref().is_some_and(|g| Some(g) != q.guild) {
            return Err(Miss::Guild);
        }
        if s.team.as_deref().is_some_and(|t| Some(t) != q.team) {
            return Err(Miss::Team);
        }
        if !s.roles.is_empty() && !s.roles.iter().any(|r| q.has_role(r)) {
            return Err(Miss::Roles);
        }
        Ok(())
    }
}

/// [`RoutingPlan::explain`]'s answer: the result and the trace of every tier.
#[derive(Debug, Clone)]
pub struct Explanation {
    pub result: RouteResult,
    /// The tiers walked, in order, up to the one that decided.
    pub tiers: Vec<TierTrace>,
    /// How many route bindings name the input's channel at all.
    pub channel_bindings: usize,
    /// Other accounts of the input's channel that have bindings of their own, with how many,
    /// in config order: they were never candidates.
    pub other_accounts: Vec<(String, usize)>,
}

/// One tier of the walk.
#[derive(Debug, Clone)]
pub struct TierTrace {
    pub tier: MatchedBy,
    pub outcome: TierOutcome,
}

#[derive(Debug, Clone)]
pub enum TierOutcome {
    Skipped(Skip),
    /// Looked up at `key` (the peer id, guild or team; none for the other tiers); the
    /// candidates in the order they were checked.
    Tried {
        key: Option<String>,
        candidates: Vec<(usize, Result<(), Miss>)>,
    },
}

#[derive(Default)]
struct Trace {
    tiers: Vec<TierTrace>,
}

impl Observer for Trace {
    fn skipped(&mut self, tier: MatchedBy, why: Skip) {
        self.tiers.push(TierTrace {
            tier,
            outcome: TierOutcome::Skipped(why),
        });
    }

    fn tried(&mut self, tier: MatchedBy, key: Option<&str>, class: Option<PeerClass>) {
        // Peer tiers are keyed by `class:id` (`channel` folded into `group`), the wildcard by
        // `class:*`.
        let key = match (tier, class) {
            (MatchedBy::Wildcard, Some(class)) => Some(format!("{}:*", class.as_str())),
            (_, Some(class)) => key.map(|k| format!("{}:{k}", class.as_str())),
            _ => key.map(str::to_string),
        };
        self.tiers.push(TierTrace {
            tier,
            outcome: TierOutcome::Tried {
                key,
                candidates: Vec::new(),
            },
        });
    }

    fn candidate(&mut self, binding: usize, verdict: Result<(), Miss>) {
        if let Some(TierTrace {
            outcome: TierOutcome::Tried { candidates, .. },
            ..
        }) = self.tiers.last_mut()
        {
            candidates.push((binding, verdict));
        }
    }
}
