//! Rules over bindings.yaml: references, canonical ids, conflicts, unreachable bindings, ACP
//! bindings, and accounts no binding covers.
//!
//! Conflicts and duplicates are found by hashing each binding's match key; unreachable bindings
//! by grouping bindings by tier key (routing.md §4) and comparing a binding only with the first
//! few earlier bindings of its own group. Both are linear in the number of bindings.

use hashbrown::hash_table::{self, HashTable};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::Context;
use crate::config::model::BindingType;
use crate::config::{Binding, FileKind};
use crate::diagnostic::{Diagnostic, rules};
use crate::ids::{self, DEFAULT_ACCOUNT, PeerClass, PeerKind};
use crate::routing::scope::{AccountPattern, MatchKeyRef, Scope, TierKey};

const FILE: FileKind = FileKind::Bindings;
/// The channel of A2A peers (a2a.md).
const A2A: &str = crate::ids::A2A_CHANNEL;

/// How many earlier bindings of the same tier key a binding is compared with. Real configs have
/// one or two per key; the bound keeps a pathological file linear.
const COVER_WINDOW: usize = 32;

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let bindings = &cx.config.bindings;
    let mut scopes = Vec::with_capacity(bindings.len());
    if bindings.len() < PARALLEL_BINDINGS {
        one_by_one(cx, bindings, &mut scopes, out);
    } else {
        // The first run fills `scopes` and `out` here; the others' are appended in order.
        let ((), runs) = crate::threads::map_runs(
            bindings,
            |run| one_by_one(cx, run, &mut scopes, out),
            |_, run| {
                let (mut scopes, mut out) = (Vec::with_capacity(run.len()), Vec::new());
                one_by_one(cx, run, &mut scopes, &mut out);
                (scopes, out)
            },
        );
        for (more, found) in runs {
            scopes.extend(more);
            out.extend(found);
        }
    }
    route_overlaps(cx, &scopes, out);
    acp(cx, &scopes, out);
    uncovered_accounts(cx, &scopes, out);
}

/// Below this many bindings, the rules that look at one binding at a time run on one thread.
const PARALLEL_BINDINGS: usize = 4096;

/// The rules that look at one binding at a time, over `run`, each binding's scope kept.
fn one_by_one<'a>(
    cx: &Context<'_>,
    run: &'a [Binding],
    scopes: &mut Vec<(&'a Binding, Scope)>,
    out: &mut Vec<Diagnostic>,
) {
    for binding in run {
        let scope = Scope::from_spec(&binding.spec.matcher);
        references(cx, binding, &scope, out);
        spelling(cx, binding, out);
        scopes.push((binding, scope));
    }
}

fn references(cx: &Context<'_>, binding: &Binding, scope: &Scope, out: &mut Vec<Diagnostic>) {
    let at = |key: &str| cx.at(FILE, &format!("{}/{key}", binding.pointer()));
    let config = cx.config;
    let agent = ids::agent_id(&binding.spec.agent_id);
    if config.complete.agents && !cx.has_agent(&agent) {
        let ids = config.agents.iter().map(|a| a.id());
        let d = Diagnostic::new(
            rules::UNKNOWN_AGENT,
            format!(
                "binding routes to agent `{}`, which is not declared",
                binding.spec.agent_id
            ),
        )
        .at(at("agentId"));
        out.push(match crate::suggest::closest(&agent, ids) {
            Some(near) => d.hint(format!("did you mean `{near}`?")),
            None => d.hint("declare the agent in agents.yaml (`agents.list`), or fix the id"),
        });
    }
    if !config.complete.channels {
        return;
    }
    if scope.channel == A2A {
        a2a_binding(cx, binding, scope, out);
        return;
    }
    let Some(channel) = config.channels.iter().find(|c| c.id == scope.channel) else {
        if scope.channel != "cli" {
            let ids = config.channels.iter().map(|c| c.id.as_str());
            let d = Diagnostic::new(
                rules::UNKNOWN_CHANNEL,
                format!(
                    "channel `{}` is not declared in channels.yaml",
                    binding.spec.matcher.channel
                ),
            )
            .at(at("match/channel"));
            out.push(match crate::suggest::closest(&scope.channel, ids) {
                Some(near) => d.hint(format!("did you mean `{near}`?")),
                None => d.hint(format!(
                    "add `{}:` under `channels` in channels.yaml",
                    scope.channel
                )),
            });
        }
        return;
    };
    if channel.spec.accounts.is_empty() {
        // A channel without accounts has only its implicit default account.
        return;
    }
    let AccountPattern::Exact(account) = &scope.account else {
        return;
    };
    if cx.has_account(&channel.id, account) {
        return;
    }
    let declared: Vec<&str> = channel.spec.accounts.keys().map(String::as_str).collect();
    match &binding.spec.matcher.account_id {
        Some(raw) => {
            let d = Diagnostic::new(
                rules::UNKNOWN_ACCOUNT,
                format!("channel `{}` has no account `{raw}`", channel.id),
            )
            .at(at("match/accountId"));
            out.push(
                match crate::suggest::closest(raw, declared.iter().copied()) {
                    Some(near) => d.hint(format!("did you mean `{near}`?")),
                    None => d.hint(format!("declared accounts: {}", declared.join(", "))),
                },
            );
        }
        None => {
            let suggestion = channel
                .spec
                .default_account
                .clone()
                .or_else(|| declared.first().map(|s| s.to_string()))
                .unwrap_or_default();
            out.push(
                Diagnostic::new(
                    rules::UNKNOWN_ACCOUNT,
                    format!(
                        "this binding has no `accountId`, so it matches only the `{DEFAULT_ACCOUNT}` account, which channel `{}` does not have",
                        channel.id
                    ),
                )
                .hint(format!(
                    "add `accountId: {suggestion}` (or `accountId: \"*\"` for every account)"
                ))
                .at(at("match")),
            );
        }
    }
}

/// A binding on channel `a2a` (a2a.md): the hub's A2A server is its one account, `default`;
/// its conversations are its peers, `{kind: direct, id: <name in a2a.peers>}`; it answers with
/// exposed agents only.
fn a2a_binding(cx: &Context<'_>, binding: &Binding, scope: &Scope, out: &mut Vec<Diagnostic>) {
    let base = binding.pointer();
    let matcher = &binding.spec.matcher;
    let Some(a2a) = &cx.config.a2a else {
        out.push(
            Diagnostic::new(
                rules::UNKNOWN_CHANNEL,
                "channel `a2a` is the hub's A2A server, which channels.yaml does not configure",
            )
            .hint("add an `a2a:` block (`expose`, `peers`) to channels.yaml: see docs/a2a.md")
            .at(cx.at(FILE, &format!("{base}/match/channel"))),
        );
        return;
    };
    let never = |what: String, hint: String, pointer: &str| {
        Diagnostic::new(
            rules::A2A_BINDING,
            format!("{what}: this binding never matches an A2A request"),
        )
        .hint(hint)
        .at(cx.at(FILE, &format!("{base}/match/{pointer}")))
    };
    if let (AccountPattern::Exact(account), Some(raw)) = (&scope.account, &matcher.account_id)
        && account != DEFAULT_ACCOUNT
    {
        out.push(never(
            format!("channel `a2a` has one account, `{DEFAULT_ACCOUNT}` (the hub's A2A server), not `{raw}`"),
            "leave out `accountId`".into(),
            "accountId",
        ));
    }
    if let (Some(peer), Some(raw)) = (&scope.peer, &matcher.peer) {
        if peer.kind.class() != Some(PeerClass::Direct) {
            out.push(never(
                format!("an A2A peer is a direct conversation, not `{}`", raw.kind),
                "write `peer: {kind: direct, id: <a peer of a2a.peers>}`".into(),
                "peer/kind",
            ));
        } else if let Some(id) = &peer.id
            && !a2a.peers.contains_key(id)
        {
            let d = format!("`a2a.peers` declares no peer `{}`", raw.id);
            out.push(
                match crate::suggest::closest(id, a2a.peers.keys().map(String::as_str)) {
                    Some(near) => never(d, format!("did you mean `{near}`?"), "peer/id"),
                    None => never(
                        d,
                        "name a peer of `a2a.peers` in channels.yaml (the id is the peer's name there)".into(),
                        "peer/id",
                    ),
                },
            );
        }
    }
    for (key, set) in [
        ("guildId", matcher.guild_id.is_some()),
        ("teamId", matcher.team_id.is_some()),
        ("roles", matcher.roles.is_some()),
    ] {
        if set {
            out.push(never(
                format!("an A2A request has no `{key}`"),
                format!("remove `{key}`"),
                key,
            ));
        }
    }
    if binding.spec.kind == BindingType::Acp {
        out.push(
            Diagnostic::new(
                rules::NOT_ENFORCED,
                "an `acp` binding on channel `a2a` is not enforced: each A2A (peer, contextId) is a session of its own",
            )
            .hint("write a route binding (leave out `type`) to choose the agent of a peer")
            .at(cx.at_key(FILE, &format!("{base}/type"))),
        );
    } else if !a2a
        .expose
        .iter()
        .any(|e| ids::agent_id(e) == ids::agent_id(&binding.spec.agent_id))
    {
        out.push(
            Diagnostic::new(
                rules::A2A_NOT_EXPOSED,
                format!(
                    "this binding routes A2A peers to agent `{}`, which `a2a.expose` does not list: their requests are refused",
                    binding.spec.agent_id
                ),
            )
            .hint(format!(
                "add `{}` to `a2a.expose` in channels.yaml, or route the peers to an exposed agent",
                binding.spec.agent_id
            ))
            .at(cx.at(FILE, &format!("{base}/agentId"))),
        );
    }
}

/// Ids that the router normalizes: say what they mean.
fn spelling(cx: &Context<'_>, binding: &Binding, out: &mut Vec<Diagnostic>) {
    let at = |key: &str| cx.at(FILE, &format!("{}/{key}", binding.pointer()));
    let spec = &binding.spec;
    let mut warn = |key: &str, what: &str, raw: &str, canonical: &str| {
        out.push(
            Diagnostic::new(
                rules::NON_CANONICAL_ID,
                format!("{what} `{raw}` is not canonical; it is read as `{canonical}`"),
            )
            .hint(format!("write `{canonical}`"))
            .at(at(key)),
        );
    };
    let agent = ids::agent_id(&spec.agent_id);
    let written = spec.agent_id.as_str();
    // `primary` is an alias, not a misspelling.
    if agent != written && written != ids::PRIMARY_ALIAS {
        warn("agentId", "agent id", written, &agent);
    }
    let channel = ids::channel(&spec.matcher.channel);
    if channel != spec.matcher.channel {
        warn("match/channel", "channel", &spec.matcher.channel, &channel);
    }
    if let Some(raw) = &spec.matcher.account_id
        && raw.trim() != "*"
    {
        let account = ids::account_id(raw);
        if account != raw.as_str() {
            warn("match/accountId", "account id", raw, &account);
        }
    }
    if let Some(peer) = &spec.matcher.peer
        && PeerKind::parse(&peer.kind) == PeerKind::Direct
        && peer.kind.trim().eq_ignore_ascii_case("dm")
    {
        out.push(
            Diagnostic::new(
                rules::LEGACY_PEER_KIND,
                "`kind: dm` is the legacy spelling of `direct`",
            )
            .hint("write `kind: direct`")
            .at(at("match/peer/kind")),
        );
    }
}

/// Binding conflicts (same match key, different agents) and unreachable bindings (an earlier
/// binding in the same tier matches all they match).
fn route_overlaps(cx: &Context<'_>, scopes: &[(&Binding, Scope)], out: &mut Vec<Diagnostic>) {
    // The first route binding of each match key, by its index: the key is its scope's, so the
    // table holds no copy of it.
    let match_key = |j: &usize| scopes[*j].1.match_key_ref();
    let mut first_by_key: HashTable<usize> = HashTable::with_capacity(scopes.len());
    let mut by_tier = Groups::new(scopes);
    for (i, (binding, scope)) in scopes.iter().enumerate() {
        if binding.spec.kind != BindingType::Route {
            continue;
        }
        let here = || cx.at(FILE, &format!("{}/match", binding.pointer()));
        let agent = ids::agent_id(&binding.spec.agent_id);
        let key = scope.match_key_ref();
        let first =
            first_by_key.entry(hash(&key), |j| match_key(j) == key, |j| hash(&match_key(j)));
        match first {
            hash_table::Entry::Occupied(entry) => {
                let (first, _) = scopes[*entry.get()];
                let there = cx.at(FILE, &format!("{}/match", first.pointer()));
                let first_agent = ids::agent_id(&first.spec.agent_id);
                out.push(if first_agent != agent {
                    Diagnostic::new(
                        rules::BINDING_CONFLICT,
                        format!(
                            "this conversation is claimed by `{agent}` here and by `{first_agent}` at line {}",
                            there.span.start.line
                        ),
                    )
                    .hint("one conversation can have one agent: remove one binding or narrow its match")
                    .at(here())
                    .related(there, format!("claimed by `{first_agent}` here"))
                } else {
                    Diagnostic::new(
                        rules::UNREACHABLE_BINDING,
                        format!("duplicate of the binding at line {}: it can never win", there.span.start.line),
                    )
                    .hint("remove this binding")
                    .at(here())
                    .related(there, "the binding that always wins")
                });
                continue;
            }
            hash_table::Entry::Vacant(entry) => {
                entry.insert(i);
            }
        }
        let shadow = by_tier.first(i).find(|&j| scopes[j].1.covers(scope));
        if let Some(j) = shadow {
            let first = scopes[j].0;
            let there = cx.at(FILE, &format!("{}/match", first.pointer()));
            out.push(
                Diagnostic::new(
                    rules::UNREACHABLE_BINDING,
                    format!(
                        "this binding can never win: the binding at line {} comes first in the {} tier and matches every message it would",
                        there.span.start.line,
                        scope.tier().as_str()
                    ),
                )
                .hint("remove it, move it above the wider binding, or narrow the earlier one")
                .at(here())
                .related(there, "the wider binding that wins"),
            );
        }
        by_tier.push(i);
    }
}

fn hash(key: &impl std::hash::Hash) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// The bindings of each tier key, in config order: the first [`COVER_WINDOW`] of them, all
/// that are ever compared. A group is one chain through a shared map, found by the tier key of
/// its first binding: nothing here copies a key.
struct Groups<'s, 'b> {
    scopes: &'s [(&'b Binding, Scope)],
    /// Each group: its first and last binding, and how many the chain holds.
    ends: HashTable<(usize, usize, usize)>,
    /// The binding after each one in its group's chain.
    next: HashMap<usize, usize>,
}

impl<'s, 'b> Groups<'s, 'b> {
    fn new(scopes: &'s [(&'b Binding, Scope)]) -> Groups<'s, 'b> {
        Groups {
            scopes,
            ends: HashTable::with_capacity(scopes.len()),
            next: HashMap::default(),
        }
    }

    fn tier_key(&self, i: usize) -> TierKey<'s> {
        self.scopes[i].1.tier_key()
    }

    /// The bindings kept in the group of binding `i`'s tier key, first first.
    fn first(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let key = self.tier_key(i);
        let (first, _, len) = self
            .ends
            .find(hash(&key), |&(j, _, _)| self.tier_key(j) == key)
            .copied()
            .unwrap_or((0, 0, 0));
        std::iter::successors(Some(first), |i| self.next.get(i).copied()).take(len)
    }

    /// Adds binding `i` to its group.
    fn push(&mut self, i: usize) {
        let key = self.tier_key(i);
        let scopes = self.scopes;
        let group = self.ends.entry(
            hash(&key),
            |&(j, _, _)| scopes[j].1.tier_key() == key,
            |&(j, _, _)| hash(&scopes[j].1.tier_key()),
        );
        match group {
            hash_table::Entry::Occupied(mut entry) => {
                let (_, last, len) = entry.get_mut();
                if *len < COVER_WINDOW {
                    self.next.insert(*last, i);
                    *last = i;
                    *len += 1;
                }
            }
            hash_table::Entry::Vacant(entry) => {
                entry.insert((i, i, 1));
            }
        }
    }
}

/// ACP bindings: one concrete conversation each, one agent per conversation.
fn acp(cx: &Context<'_>, scopes: &[(&Binding, Scope)], out: &mut Vec<Diagnostic>) {
    let mut seen: HashMap<MatchKeyRef<'_>, &Binding> = HashMap::default();
    for (binding, scope) in scopes {
        if binding.spec.kind != BindingType::Acp {
            continue;
        }
        let base = binding.pointer();
        let concrete = scope.peer.as_ref().is_some_and(|p| p.id.is_some());
        if !concrete {
            let pointer = if scope.peer.is_some() {
                format!("{base}/match/peer/id")
            } else {
                format!("{base}/match")
            };
            out.push(
                Diagnostic::new(
                    rules::ACP_BINDING_PEER,
                    "an ACP binding binds one exact conversation, so it needs a concrete `peer.id`",
                )
                .hint("add `peer: {kind: channel, id: \"<conversation id>\"}`, or use a route binding")
                .at(cx.at(FILE, &pointer)),
            );
            continue;
        }
        let key = scope.match_key_ref();
        match seen.get(&key) {
            Some(first)
                if ids::agent_id(&first.spec.agent_id) != ids::agent_id(&binding.spec.agent_id) =>
            {
                let there = cx.at(FILE, &format!("{}/match", first.pointer()));
                out.push(
                    Diagnostic::new(
                        rules::ACP_BINDING_CONFLICT,
                        format!(
                            "this conversation is bound to ACP agent `{}` here and to `{}` at line {}",
                            binding.spec.agent_id,
                            first.spec.agent_id,
                            there.span.start.line
                        ),
                    )
                    .hint("a conversation has one persistent ACP session: keep one of the two bindings")
                    .at(cx.at(FILE, &format!("{base}/match")))
                    .related(there, "bound here first"),
                );
            }
            Some(_) => {}
            None => {
                seen.insert(key, binding);
            }
        }
    }
}

/// A non-default account that no account-scoped or `*` binding covers sends everything to the
/// default agent: probably not what a second account was added for.
fn uncovered_accounts(cx: &Context<'_>, scopes: &[(&Binding, Scope)], out: &mut Vec<Diagnostic>) {
    if !cx.config.complete.bindings {
        return;
    }
    let mut covered: HashSet<(&str, &AccountPattern)> = HashSet::default();
    for (binding, scope) in scopes {
        if binding.spec.kind == BindingType::Route {
            covered.insert((scope.channel.as_str(), &scope.account));
        }
    }
    for channel in &cx.config.channels {
        if covered.contains(&(channel.id.as_str(), &AccountPattern::Any)) {
            continue;
        }
        for account in channel.accounts() {
            if account.normalized == DEFAULT_ACCOUNT
                || covered.contains(&(
                    channel.id.as_str(),
                    &AccountPattern::Exact(account.normalized.clone()),
                ))
            {
                continue;
            }
            out.push(
                Diagnostic::new(
                    rules::UNCOVERED_ACCOUNT,
                    format!(
                        "no binding covers account `{}` of `{}`: its messages go to the default agent `{}`",
                        account.id, channel.id, cx.config.default_agent
                    ),
                )
                .hint(format!(
                    "bind it: `{{agentId: <agent>, match: {{channel: {}, accountId: {}}}}}`",
                    channel.id, account.normalized
                ))
                .at(cx.at_key(FileKind::Channels, &account.pointer())),
            );
        }
    }
}
