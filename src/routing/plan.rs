//! The compiled routing plan: bindings indexed by channel, account and tier ([`TierIndex`]), so
//! that resolving a message costs a bounded number of hash lookups whatever the number of
//! bindings (routing.md §3–§5).
//!
//! One walk over the tiers ([`RoutingPlan::walk`]) serves both [`RoutingPlan::resolve`] and
//! [`RoutingPlan::explain`]: the explanation is a trace of the very code that decides, so it can
//! never tell a different story than the router.

use std::borrow::Cow;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::index::{IndexError, Located, Slot, Symbols, TierIndex, Unkeyed};
use super::input::{RouteInput, RouteResult};
use super::scope::{AccountPattern, Scope};
use super::session::{SessionSettings, write_session_key};
use super::shared_str::SharedStr;
use crate::config::Config;
use crate::config::model::{BindingType, DmScope, GroupScope, RuntimeKind};
use crate::ids::{self, PeerClass, PeerKind};

pub use super::binding::{BindingRef, CompiledBinding, MatchedBy, Miss};

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
    /// Whether to walk whole tiers. Resolving skips the wildcard bindings of other guilds and
    /// teams, which cannot match; an explanation lists them with their reason.
    const WHOLE_TIERS: bool;
    fn skipped(&mut self, _tier: MatchedBy, _why: Skip) {}
    fn tried(&mut self, _tier: MatchedBy, _key: Option<&str>, _class: Option<PeerClass>) {}
    fn candidate(&mut self, _binding: usize, _verdict: Result<(), Miss>) {}
}

struct Quiet;
impl Observer for Quiet {
    const WHOLE_TIERS: bool = false;
}

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

/// A query as the index sees it: where its channel and account sit, its ids as symbols.
struct Lookup<'i, 'a> {
    at: Located<'i>,
    syms: Symbols<'i, 'a>,
}

impl<'a> Query<'a> {
    fn new(input: &'a RouteInput) -> Query<'a> {
        let peer = |p: &'a Option<super::Peer>| {
            p.as_ref()
                .map(|p| (PeerKind::parse(&p.kind), ids::trim(&p.id)))
        };
        let text = |t: &'a Option<String>| t.as_deref().map(ids::trim).filter(|t| !t.is_empty());
        Query {
            channel: ids::channel(&input.channel),
            account: ids::account_id(input.account_id.as_deref().unwrap_or("")),
            peer: peer(&input.peer),
            parent: peer(&input.parent_peer).filter(|(_, id)| !id.is_empty()),
            guild: text(&input.guild_id),
            team: text(&input.team_id),
            roles: &input.member_role_ids,
        }
    }

    /// Looks the query up in `index`; nothing more when no binding names its channel.
    fn lookup<'i>(&self, index: &'i TierIndex) -> Lookup<'i, 'a> {
        let at = index.locate(&self.channel, &self.account);
        if at.is_empty() {
            return Lookup {
                at,
                syms: Symbols::default(),
            };
        }
        let peer_id = |p: &Option<(PeerKind, &str)>| match p {
            Some((kind, id)) if kind.class().is_some() => index.id(id),
            _ => None,
        };
        let syms = Symbols::new(
            peer_id(&self.peer),
            peer_id(&self.parent),
            self.guild.and_then(|g| index.id(g)),
            self.team.and_then(|t| index.id(t)),
            self.roles,
        );
        Lookup { at, syms }
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

/// A compiled, immutable routing plan (the default one has no bindings and no agents).
#[derive(Debug, Clone, Default)]
pub struct RoutingPlan {
    pub bindings: Vec<CompiledBinding>,
    pub agents: Vec<PlanAgent>,
    pub default_agent: String,
    pub session: SessionSettings,
    pub acp: Vec<AcpBinding>,
    index: TierIndex,
    /// (channel, account, peer class, peer id) → position in `acp`.
    acp_index: HashMap<(String, String, PeerClass, String), usize>,
}

impl RoutingPlan {
    /// Compiles the bindings of `config`: route bindings into the tier index, ACP bindings into
    /// their own exact-conversation table. Refused only for a config that outgrows the index.
    pub fn compile(config: &Config) -> Result<RoutingPlan, IndexError> {
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
            let agent_id = ids::agent_id(&b.spec.agent_id).into_owned();
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
    pub fn from_parts(
        bindings: Vec<CompiledBinding>,
        parts: PlanParts,
    ) -> Result<RoutingPlan, IndexError> {
        let index = TierIndex::build(&bindings, &parts.default_agent, &parts.session.main_key)?;
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
        Ok(RoutingPlan {
            bindings,
            agents: parts.agents,
            default_agent: parts.default_agent,
            session: parts.session,
            acp: parts.acp,
            index,
            acp_index,
        })
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
        let lookup = query.lookup(&self.index);
        let decided = self.walk(&query, &lookup, &mut Quiet);
        self.result(input, &query, &lookup, decided)
    }

    /// Resolves `input` and records, tier by tier, what was tried and why each candidate
    /// binding did or did not match.
    pub fn explain(&self, input: &RouteInput) -> Explanation {
        let query = Query::new(input);
        let mut trace = Trace::default();
        let lookup = query.lookup(&self.index);
        let decided = self.walk(&query, &lookup, &mut trace);
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
            result: self.result(input, &query, &lookup, decided),
            tiers: trace.tiers,
            channel_bindings,
            other_accounts: elsewhere,
        }
    }

    /// The tiers of routing.md §4 in order; inside a tier, the first binding in config order
    /// (exact-account and `*` candidates merged) whose whole scope matches.
    fn walk<O: Observer>(
        &self,
        q: &Query<'_>,
        Lookup { at, syms }: &Lookup<'_, '_>,
        obs: &mut O,
    ) -> Option<(usize, MatchedBy)> {
        let (at, syms) = (*at, syms);
        let index = &self.index;
        let peer_class = q.peer.as_ref().and_then(|(kind, _)| kind.class());
        let parent_class = q.parent.as_ref().and_then(|(kind, _)| kind.class());
        let both = |slot: Slot, sym| {
            [
                index.keyed(at.exact, slot, sym),
                index.keyed(at.any, slot, sym),
            ]
        };
        let unkeyed = |list: Unkeyed| [index.unkeyed(at.exact, list), index.unkeyed(at.any, list)];

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
            let found = match tier {
                MatchedBy::Peer | MatchedBy::Parent => {
                    let (peer, sym, class) = if tier == MatchedBy::Peer {
                        (&q.peer, syms.peer, peer_class)
                    } else {
                        (&q.parent, syms.parent, parent_class)
                    };
                    let Some(class) = class else { continue };
                    obs.tried(tier, peer.as_ref().map(|(_, id)| *id), Some(class));
                    self.first_match(both(Slot::Peer(class), sym), syms, obs)
                }
                MatchedBy::Wildcard => {
                    let Some(class) = peer_class else { continue };
                    obs.tried(tier, q.peer.as_ref().map(|(_, id)| *id), Some(class));
                    if O::WHOLE_TIERS {
                        self.first_match(unkeyed(Unkeyed::Wildcard(class)), syms, obs)
                    } else {
                        let [a, b] = unkeyed(Unkeyed::WildcardOpen(class));
                        let [c, d] = both(Slot::WildcardGuild(class), syms.guild);
                        let [e, f] = both(Slot::WildcardTeam(class), syms.team);
                        self.first_match([a, b, c, d, e, f], syms, obs)
                    }
                }
                MatchedBy::GuildRoles | MatchedBy::Guild | MatchedBy::Team => {
                    let (slot, key, sym) = match tier {
                        MatchedBy::GuildRoles => (Slot::GuildRoles, q.guild, syms.guild),
                        MatchedBy::Guild => (Slot::Guild, q.guild, syms.guild),
                        _ => (Slot::Team, q.team, syms.team),
                    };
                    obs.tried(tier, key, None);
                    self.first_match(both(slot, sym), syms, obs)
                }
                MatchedBy::Account | MatchedBy::Channel => {
                    obs.tried(tier, None, None);
                    let list = if tier == MatchedBy::Account {
                        Unkeyed::Account
                    } else {
                        Unkeyed::Channel
                    };
                    self.first_match(unkeyed(list), syms, obs)
                }
                MatchedBy::Default => None,
            };
            if let Some(i) = found {
                return Some((i, tier));
            }
        }
        None
    }

    /// The first binding of config-ordered lists, merged in config order, that matches.
    fn first_match<const N: usize>(
        &self,
        mut lists: [&[u32]; N],
        syms: &Symbols<'_, '_>,
        obs: &mut impl Observer,
    ) -> Option<usize> {
        loop {
            let mut head: Option<(usize, u32)> = None;
            for (k, list) in lists.iter().enumerate() {
                if let Some(&first) = list.first()
                    && head.is_none_or(|(_, best)| first < best)
                {
                    head = Some((k, first));
                }
            }
            let (k, next) = head?;
            lists[k] = &lists[k][1..];
            let next = next as usize;
            let verdict = self.index.check(next, syms);
            obs.candidate(next, verdict);
            if verdict.is_ok() {
                return Some(next);
            }
        }
    }

    fn result(
        &self,
        input: &RouteInput,
        q: &Query<'_>,
        lookup: &Lookup<'_, '_>,
        decided: Option<(usize, MatchedBy)>,
    ) -> RouteResult {
        let entry = decided.map(|(i, _)| self.index.entry(i));
        let matched_by = decided.map_or(MatchedBy::Default, |(_, m)| m);
        let agent = entry.map_or_else(|| self.index.default_agent(), |e| self.index.agent(e.agent));
        let dm_scope = entry
            .and_then(|e| e.dm_scope)
            .or(input.dm_scope)
            .or(self.session.dm_scope)
            .unwrap_or(DmScope::Main);
        let group_scope = entry
            .and_then(|e| e.group_scope)
            .or(input.group_scope)
            .or(self.session.group_scope)
            .unwrap_or(GroupScope::PerGroup);
        let session_key = SESSION_KEY.with_borrow_mut(|key| {
            let is_peer_key = write_session_key(
                &self.session,
                &agent.id,
                &q.channel,
                &q.account,
                q.peer.as_ref().map(|(kind, id)| (kind, *id)),
                dm_scope,
                group_scope,
                key,
            );
            (is_peer_key && key.as_str() != agent.main_key.as_str())
                .then(|| SharedStr::from(key.as_str()))
        });
        let last_route_policy = if session_key.is_some() {
            "session"
        } else {
            "main"
        };
        let (channel, account_id) = self.index.names(&lookup.at, &q.channel, &q.account);
        RouteResult {
            agent_id: agent.id.clone(),
            channel,
            account_id,
            session_key: session_key.unwrap_or_else(|| agent.main_key.clone()),
            main_session_key: agent.main_key.clone(),
            last_route_policy,
            matched_by,
            dm_scope,
            group_scope,
            binding: decided.map(|(i, _)| self.index.source(i)),
        }
    }
}

thread_local! {
    /// Where session keys are built before they are shared: one buffer per thread, reused.
    static SESSION_KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
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
    const WHOLE_TIERS: bool = true;

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
