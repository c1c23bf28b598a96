//! The router against routing.md: worked examples, tier consequences, and agreement with a
//! linear reference resolver written straight from the spec on random configs.

use std::path::{Path, PathBuf};

use deepcli::config::model::{DmScope, GroupScope};
use deepcli::config::{self, FileKind, LoadOptions};
use deepcli::routing::{Peer, RouteInput, RoutingPlan, document};
use proptest::prelude::*;

fn plan(agents: &str, bindings: &str) -> RoutingPlan {
    let texts = vec![
        (
            FileKind::Agents,
            PathBuf::from("agents.yaml"),
            agents.to_string(),
        ),
        (
            FileKind::Bindings,
            PathBuf::from("bindings.yaml"),
            bindings.to_string(),
        ),
    ];
    let options = LoadOptions {
        state_dir: PathBuf::from("/s"),
        home: None,
    };
    let loaded = config::load_texts(Path::new("."), texts, &options);
    RoutingPlan::compile(&loaded.config).expect("a test config fits the routing index")
}

fn input(channel: &str) -> RouteInput {
    RouteInput {
        channel: channel.into(),
        ..RouteInput::default()
    }
}

fn peer(kind: &str, id: &str) -> Option<Peer> {
    Some(Peer {
        kind: kind.into(),
        id: id.into(),
    })
}

const AGENTS: &str =
    "agents:\n  list:\n    - id: main\n    - id: a\n    - id: b\n    - id: x\n    - id: y\n";

#[test]
fn worked_example_no_bindings() {
    let p = plan(AGENTS, "");
    let r = p.resolve(&RouteInput {
        peer: peer("direct", "+1555"),
        ..input("telegram")
    });
    assert_eq!(
        (
            r.agent_id.as_str(),
            r.session_key.as_str(),
            r.matched_by.as_str()
        ),
        ("main", "agent:main:main", "default")
    );
}

#[test]
fn worked_example_peer_beats_guild() {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: a, match: {channel: discord, guildId: g1}}\n  - {agentId: b, match: {channel: discord, peer: {kind: channel, id: c1}}}\n",
    );
    let r = p.resolve(&RouteInput {
        guild_id: Some("g1".into()),
        peer: peer("channel", "c1"),
        ..input("discord")
    });
    assert_eq!(
        (r.agent_id.as_str(), r.matched_by.as_str()),
        ("b", "binding.peer")
    );
}

#[test]
fn worked_example_roles_miss_is_no_guild_fallback() {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: x, match: {channel: discord, guildId: g1, roles: [r1]}}\n",
    );
    let r = p.resolve(&RouteInput {
        guild_id: Some("g1".into()),
        member_role_ids: vec!["r2".into()],
        ..input("discord")
    });
    assert_eq!(
        (r.agent_id.as_str(), r.matched_by.as_str()),
        ("main", "default")
    );
}

#[test]
fn worked_example_omitted_account_is_default_only() {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: x, match: {channel: telegram}}\n",
    );
    let r = p.resolve(&RouteInput {
        account_id: Some("biz".into()),
        ..input("telegram")
    });
    assert_eq!(
        (r.agent_id.as_str(), r.matched_by.as_str()),
        ("main", "default")
    );
    let r = p.resolve(&input("telegram"));
    assert_eq!(
        (r.agent_id.as_str(), r.matched_by.as_str()),
        ("x", "binding.account")
    );
}

#[test]
fn worked_example_account_beats_star_by_tier() {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: x, match: {channel: telegram, accountId: \"*\"}}\n  - {agentId: y, match: {channel: telegram, accountId: biz}}\n",
    );
    let r = p.resolve(&RouteInput {
        account_id: Some("biz".into()),
        ..input("telegram")
    });
    assert_eq!(
        (r.agent_id.as_str(), r.matched_by.as_str()),
        ("y", "binding.account")
    );
}

#[test]
fn worked_example_per_channel_peer() {
    let p = plan("session:\n  dmScope: per-channel-peer\n", "");
    let r = p.resolve(&RouteInput {
        peer: peer("direct", "+1555"),
        ..input("whatsapp")
    });
    assert_eq!(r.session_key, "agent:main:whatsapp:direct:+1555");
    assert_eq!(r.last_route_policy, "session");
}

#[test]
fn a_peer_binding_with_a_guild_is_not_a_guild_fallback() {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: a, match: {channel: discord, guildId: g1, peer: {kind: channel, id: c1}}}\n",
    );
    let other = p.resolve(&RouteInput {
        guild_id: Some("g1".into()),
        peer: peer("channel", "c2"),
        ..input("discord")
    });
    assert_eq!(other.agent_id, "main");
    let wrong_guild = p.resolve(&RouteInput {
        guild_id: Some("g2".into()),
        peer: peer("channel", "c1"),
        ..input("discord")
    });
    assert_eq!(wrong_guild.agent_id, "main");
    let both = p.resolve(&RouteInput {
        guild_id: Some("g1".into()),
        peer: peer("group", "c1"),
        ..input("discord")
    });
    assert_eq!(
        (both.agent_id.as_str(), both.matched_by.as_str()),
        ("a", "binding.peer")
    );
}

#[test]
fn parent_peer_and_wildcard_tiers() {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: a, match: {channel: discord, peer: {kind: channel, id: parent}}}\n  - {agentId: b, match: {channel: discord, peer: {kind: channel, id: \"*\"}}}\n",
    );
    let thread = p.resolve(&RouteInput {
        peer: peer("channel", "t1"),
        parent_peer: peer("channel", "parent"),
        ..input("discord")
    });
    assert_eq!(
        (thread.agent_id.as_str(), thread.matched_by.as_str()),
        ("a", "binding.peer.parent")
    );
    let other = p.resolve(&RouteInput {
        peer: peer("group", "zzz"),
        ..input("discord")
    });
    assert_eq!(
        (other.agent_id.as_str(), other.matched_by.as_str()),
        ("b", "binding.peer.wildcard")
    );
    let dm = p.resolve(&RouteInput {
        peer: peer("dm", "u"),
        ..input("discord")
    });
    assert_eq!(
        dm.agent_id, "main",
        "direct does not match a channel wildcard"
    );
}

#[test]
fn binding_session_overrides_input_and_config() {
    let p = plan(
        "session: {dmScope: per-peer}\n",
        "bindings:\n  - {agentId: main, match: {channel: telegram}, session: {dmScope: per-account-channel-peer}}\n",
    );
    let r = p.resolve(&RouteInput {
        peer: peer("direct", "U1"),
        dm_scope: Some(deepcli::config::model::DmScope::Main),
        ..input("Telegram")
    });
    assert_eq!(r.session_key, "agent:main:telegram:default:direct:u1");
}

#[test]
fn identity_links_and_case_preserving_groups() {
    let p = plan(
        "session:\n  dmScope: per-peer\n  identityLinks: {alice: [\"telegram:111\", \"discord:222\"]}\n",
        "",
    );
    let r = p.resolve(&RouteInput {
        peer: peer("direct", "222"),
        ..input("discord")
    });
    assert_eq!(r.session_key, "agent:main:direct:alice");
    let r = p.resolve(&RouteInput {
        peer: peer("group", "AbC"),
        ..input("signal")
    });
    assert_eq!(r.session_key, "agent:main:signal:group:AbC");
    let r = p.resolve(&RouteInput {
        peer: peer("group", "AbC"),
        ..input("telegram")
    });
    assert_eq!(r.session_key, "agent:main:telegram:group:abc");
}

#[test]
fn main_key_and_primary_alias() {
    let p = plan(
        "agents:\n  list: [{id: main}]\nsession: {mainKey: \" Home \"}\n",
        "bindings:\n  - {agentId: primary, match: {channel: cli}}\n",
    );
    let r = p.resolve(&input("cli"));
    assert_eq!(
        (
            r.agent_id.as_str(),
            r.session_key.as_str(),
            r.last_route_policy
        ),
        ("main", "agent:main:home", "main")
    );
}

// ---- agreement with a linear reference resolver ----
//
// The reference below is written from routing.md (docs/routing.md and the spec it follows)
// and shares no code with the router: it reads the bindings as the generator wrote them, not
// as the library compiled them, and normalizes ids, peer kinds and tiers itself. A tier or
// normalization bug in the library is then wrong on one side only.

/// A route binding as written in bindings.yaml (one flow mapping per line).
#[derive(Debug, Clone)]
struct RefBinding {
    agent: &'static str,
    channel: &'static str,
    account: Option<&'static str>,
    /// Kind and id, as written.
    peer: Option<(&'static str, &'static str)>,
    guild: Option<&'static str>,
    team: Option<&'static str>,
    roles: Option<Vec<&'static str>>,
    dm_scope: Option<&'static str>,
    group_scope: Option<&'static str>,
}

impl RefBinding {
    /// The binding's line: a flow mapping with every string double-quoted.
    fn yaml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap();
        let mut m = format!("channel: {}", q(self.channel));
        if let Some(a) = self.account {
            m += &format!(", accountId: {}", q(a));
        }
        if let Some((kind, id)) = self.peer {
            m += &format!(", peer: {{kind: {}, id: {}}}", q(kind), q(id));
        }
        if let Some(g) = self.guild {
            m += &format!(", guildId: {}", q(g));
        }
        if let Some(t) = self.team {
            m += &format!(", teamId: {}", q(t));
        }
        if let Some(roles) = &self.roles {
            let roles: Vec<String> = roles.iter().map(|r| q(r)).collect();
            m += &format!(", roles: [{}]", roles.join(", "));
        }
        let mut session = Vec::new();
        if let Some(dm) = self.dm_scope {
            session.push(format!("dmScope: {dm}"));
        }
        if let Some(group) = self.group_scope {
            session.push(format!("groupScope: {group}"));
        }
        let session = if session.is_empty() {
            String::new()
        } else {
            format!(", session: {{{}}}", session.join(", "))
        };
        format!(
            "  - {{agentId: {}, match: {{{m}}}{session}}}\n",
            q(self.agent)
        )
    }
}

fn bindings_yaml(bindings: &[RefBinding]) -> String {
    let lines: String = bindings.iter().map(RefBinding::yaml).collect();
    format!("bindings:\n{lines}")
}

/// routing.md §2: trimmed; empty → the fallback; `^[a-z0-9][a-z0-9_-]{0,63}$` in any case is
/// lowercased; anything else is lowercased, each run of characters outside `[a-z0-9_-]` becomes
/// one `-`, `-` at either end goes, and it is cut to 64 characters (empty → the fallback).
fn spec_id(raw: &str, fallback: &str) -> String {
    let id = raw.trim();
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    let lower = id.to_lowercase();
    let first_ok = lower
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let shaped = first_ok && lower.len() <= 64 && lower.chars().all(allowed) && id.is_ascii();
    let out = if shaped {
        lower
    } else {
        let mut out = String::new();
        let mut in_run = false;
        for c in lower.chars() {
            if allowed(c) {
                out.push(c);
            } else if !in_run {
                out.push('-');
            }
            in_run = !allowed(c);
        }
        out.trim_matches('-').chars().take(64).collect()
    };
    if out.is_empty() {
        fallback.to_string()
    } else {
        out
    }
}

fn spec_account(raw: Option<&str>) -> String {
    spec_id(raw.unwrap_or(""), "default")
}

fn spec_agent(raw: &str) -> String {
    match spec_id(raw, "main").as_str() {
        "primary" => "main".to_string(),
        id => id.to_string(),
    }
}

fn spec_channel(raw: &str) -> String {
    raw.trim().to_lowercase()
}

/// Which peer kinds match each other (§2): `direct` (`dm`) alone, `group` and `channel`
/// together; any other kind matches nothing.
fn kind_class(raw: &str) -> Option<&'static str> {
    match raw.trim().to_lowercase().as_str() {
        "direct" | "dm" => Some("direct"),
        "group" | "channel" => Some("group"),
        _ => None,
    }
}

/// routing.md §4's tiers, in resolution order.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RefTier {
    Peer,
    Wildcard,
    GuildRoles,
    Guild,
    Team,
    Account,
    Channel,
}

impl RefBinding {
    /// The first rule of §4 that applies.
    fn tier(&self) -> RefTier {
        let roles = self.roles.as_ref().is_some_and(|r| !r.is_empty());
        match self.peer {
            Some((_, id)) if id.trim() == "*" => RefTier::Wildcard,
            Some(_) => RefTier::Peer,
            None if self.guild.is_some() && roles => RefTier::GuildRoles,
            None if self.guild.is_some() => RefTier::Guild,
            None if self.team.is_some() => RefTier::Team,
            None if self.account.map(str::trim) != Some("*") => RefTier::Account,
            None => RefTier::Channel,
        }
    }

    /// §3: the binding covers the input's channel and account.
    fn is_candidate(&self, input: &RouteInput) -> bool {
        let account_ok = match self.account.map(str::trim) {
            Some("*") => true,
            written => spec_account(written) == spec_account(input.account_id.as_deref()),
        };
        spec_channel(self.channel) == spec_channel(&input.channel) && account_ok
    }

    /// §3: every field the binding sets holds, with `peer` as the scope peer.
    fn holds(&self, input: &RouteInput, peer: Option<&Peer>) -> bool {
        let peer_ok = match (self.peer, peer) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some((kind, id)), Some(p)) => {
                kind_class(kind).is_some()
                    && kind_class(kind) == kind_class(&p.kind)
                    && (id.trim() == "*" || id.trim() == p.id.trim())
            }
        };
        let same = |mine: Option<&str>, theirs: &Option<String>| {
            mine.is_none_or(|m| Some(m.trim()) == theirs.as_deref().map(str::trim))
        };
        let roles_ok = match &self.roles {
            Some(roles) if !roles.is_empty() => roles
                .iter()
                .any(|r| input.member_role_ids.iter().any(|m| m == r)),
            _ => true,
        };
        peer_ok && same(self.guild, &input.guild_id) && same(self.team, &input.team_id) && roles_ok
    }
}

/// routing.md §4 read literally: try the tiers in order; in each, scan every binding in config
/// order. The decision: `matchedBy` and the index of the binding.
fn reference(bindings: &[RefBinding], input: &RouteInput) -> (&'static str, Option<usize>) {
    let non_empty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.trim().is_empty());
    let peer = input.peer.as_ref();
    let parent = input
        .parent_peer
        .as_ref()
        .filter(|p| !p.id.trim().is_empty());
    let guild = non_empty(&input.guild_id);
    let tiers: [(bool, RefTier, &'static str, Option<&Peer>); 8] = [
        (peer.is_some(), RefTier::Peer, "binding.peer", peer),
        (
            parent.is_some(),
            RefTier::Peer,
            "binding.peer.parent",
            parent,
        ),
        (
            peer.is_some(),
            RefTier::Wildcard,
            "binding.peer.wildcard",
            peer,
        ),
        (
            guild && !input.member_role_ids.is_empty(),
            RefTier::GuildRoles,
            "binding.guild+roles",
            peer,
        ),
        (guild, RefTier::Guild, "binding.guild", peer),
        (
            non_empty(&input.team_id),
            RefTier::Team,
            "binding.team",
            peer,
        ),
        (true, RefTier::Account, "binding.account", peer),
        (true, RefTier::Channel, "binding.channel", peer),
    ];
    for (enabled, tier, name, scope_peer) in tiers {
        if !enabled {
            continue;
        }
        let found = bindings
            .iter()
            .position(|b| b.tier() == tier && b.is_candidate(input) && b.holds(input, scope_peer));
        if let Some(i) = found {
            return (name, Some(i));
        }
    }
    ("default", None)
}

/// The whole result routing.md §6–§7 asks for, from the reference's decision. [`AGENTS`] has
/// no `default: true` and no `session` block: the default agent is the first listed, `main`,
/// and the scopes default to `main` and `per-group`.
fn reference_result(bindings: &[RefBinding], input: &RouteInput) -> serde_json::Value {
    let (matched_by, index) = reference(bindings, input);
    let binding = index.map(|i| &bindings[i]);
    let agent = binding.map_or("main".to_string(), |b| spec_agent(b.agent));
    let channel = spec_channel(&input.channel);
    let account = spec_account(input.account_id.as_deref());
    let wire = |v: serde_json::Value| v.as_str().map(str::to_string);
    let dm = binding
        .and_then(|b| b.dm_scope.map(str::to_string))
        .or_else(|| {
            input
                .dm_scope
                .and_then(|s| wire(serde_json::to_value(s).unwrap()))
        })
        .unwrap_or_else(|| "main".to_string());
    let group = binding
        .and_then(|b| b.group_scope.map(str::to_string))
        .or_else(|| {
            input
                .group_scope
                .and_then(|s| wire(serde_json::to_value(s).unwrap()))
        })
        .unwrap_or_else(|| "per-group".to_string());
    let main = format!("agent:{agent}:main");
    let session = match &input.peer {
        None => main.clone(),
        Some(peer) => {
            let kind = peer.kind.trim().to_lowercase();
            let mut id = peer.id.trim().to_lowercase();
            if id.is_empty() {
                id = "unknown".into();
            }
            if kind_class(&kind) == Some("direct") {
                match dm.as_str() {
                    "main" => main.clone(),
                    "per-peer" => format!("agent:{agent}:direct:{id}"),
                    "per-channel-peer" => format!("agent:{agent}:{channel}:direct:{id}"),
                    _ => format!("agent:{agent}:{channel}:{account}:direct:{id}"),
                }
            } else if group == "main" {
                main.clone()
            } else {
                format!("agent:{agent}:{channel}:{kind}:{id}")
            }
        }
    };
    serde_json::json!({
        "agentId": agent,
        "channel": channel,
        "accountId": account,
        "sessionKey": session,
        "mainSessionKey": main,
        "lastRoutePolicy": if session == main { "main" } else { "session" },
        "matchedBy": matched_by,
        "dmScope": dm,
        "groupScope": group,
        // One binding per line, after the `bindings:` line.
        "binding": index.map(|i| serde_json::json!({
            "file": "bindings.yaml",
            "line": i + 2,
            "index": i,
        })),
    })
}

/// The reference's own reading of routing.md §2–§4 on cases it states outright, so that the
/// property below compares the router with something known to read the spec right.
#[test]
fn the_reference_reads_the_spec() {
    assert_eq!(spec_account(Some(" biz ")), "biz");
    assert_eq!(spec_account(Some("Bot Main")), "bot-main");
    assert_eq!(spec_account(Some("a..b//c")), "a-b-c");
    assert_eq!(
        spec_account(Some("a-!b")),
        "a--b",
        "an allowed `-` is not part of a run"
    );
    assert_eq!(spec_account(Some("!!!")), "default");
    assert_eq!(spec_account(None), "default");
    assert_eq!(spec_account(Some(&"X".repeat(80))), "x".repeat(64));
    assert_eq!(spec_agent("Primary"), "main");
    assert_eq!(spec_channel(" Discord "), "discord");
    assert_eq!(kind_class(" DM "), Some("direct"));
    assert_eq!(kind_class("channel"), kind_class("group"));
    assert_eq!(kind_class("thread"), None);
    let b = |peer, guild, team, roles: Option<Vec<&'static str>>, account| RefBinding {
        agent: "a",
        channel: "discord",
        account,
        peer,
        guild,
        team,
        roles,
        dm_scope: None,
        group_scope: None,
    };
    let tiers = [
        b(
            Some(("channel", "c1")),
            Some("g1"),
            None,
            Some(vec!["r"]),
            Some("*"),
        ),
        b(Some(("direct", "*")), Some("g1"), None, None, None),
        b(None, Some("g1"), Some("t1"), Some(vec!["r"]), None),
        b(None, Some("g1"), None, Some(vec![]), None),
        b(None, None, Some("t1"), None, Some("*")),
        b(None, None, None, None, None),
        b(None, None, None, None, Some("biz")),
        b(None, None, None, None, Some("*")),
    ]
    .map(|b| b.tier());
    use RefTier::*;
    assert_eq!(
        tiers,
        [
            Peer, Wildcard, GuildRoles, Guild, Team, Account, Account, Channel
        ]
    );
}

fn arb_binding() -> impl Strategy<Value = RefBinding> {
    let agent = prop::sample::select(vec!["a", "b", "x", "y", "main", "primary", " B "]);
    let channel = prop::sample::select(vec!["discord", "telegram", "Discord", " telegram "]);
    let account = prop::option::of(prop::sample::select(vec![
        "*", "default", "biz", "Biz", " biz ", "Bot Main",
    ]));
    let peer = prop::option::of((
        prop::sample::select(vec!["direct", "group", "channel", "dm"]),
        prop::sample::select(vec!["p1", "p2", "*", "P1", " p2 "]),
    ));
    let guild = prop::option::of(prop::sample::select(vec!["g1", "g2", " g1 "]));
    let team = prop::option::of(prop::sample::select(vec!["t1"]));
    let roles = prop::option::of(prop::collection::vec(
        prop::sample::select(vec!["r1", "r2"]),
        0..3,
    ));
    let session = prop::sample::select(vec![
        (None, None),
        (Some("per-peer"), None),
        (None, Some("main")),
        (Some("per-account-channel-peer"), Some("per-group")),
        (Some("per-channel-peer"), None),
    ]);
    (agent, channel, account, peer, guild, team, roles, session).prop_map(
        |(agent, channel, account, peer, guild, team, roles, (dm_scope, group_scope))| RefBinding {
            agent,
            channel,
            account,
            peer,
            guild,
            team,
            roles,
            dm_scope,
            group_scope,
        },
    )
}

fn arb_input() -> impl Strategy<Value = RouteInput> {
    let opt_peer = || {
        prop::option::of((
            prop::sample::select(vec![
                "direct",
                "group",
                "channel",
                "dm",
                "thread",
                "DM",
                " channel ",
            ]),
            prop::sample::select(vec!["p1", "p2", "p3", "", "P1", " p1 "]),
        ))
        .prop_map(|p| {
            p.map(|(k, id)| Peer {
                kind: k.into(),
                id: id.into(),
            })
        })
    };
    (
        prop::sample::select(vec!["discord", "telegram", "Discord", " telegram"]),
        prop::option::of(prop::sample::select(vec![
            "default", "biz", "Biz", "other", "", " biz ", "bot main", "BOT-MAIN",
        ])),
        opt_peer(),
        opt_peer(),
        prop::option::of(prop::sample::select(vec!["g1", "g2", "", " g1"])),
        prop::option::of(prop::sample::select(vec!["t1", "t2"])),
        prop::collection::vec(
            prop::sample::select(vec!["r1".to_string(), "r2".to_string(), "r3".to_string()]),
            0..3,
        ),
        prop::option::of(prop::sample::select(vec![
            DmScope::PerPeer,
            DmScope::Main,
            DmScope::PerChannelPeer,
        ])),
        prop::option::of(prop::sample::select(vec![
            GroupScope::Main,
            GroupScope::PerGroup,
        ])),
    )
        .prop_map(
            |(channel, account, peer, parent, guild, team, roles, dm_scope, group_scope)| {
                RouteInput {
                    channel: channel.into(),
                    account_id: account.map(Into::into),
                    peer,
                    parent_peer: parent,
                    guild_id: guild.map(Into::into),
                    team_id: team.map(Into::into),
                    member_role_ids: roles,
                    dm_scope,
                    group_scope,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn indexed_resolver_agrees_with_the_reference(
        bindings in prop::collection::vec(arb_binding(), 0..12),
        inputs in prop::collection::vec(arb_input(), 1..8),
    ) {
        let p = plan(AGENTS, &bindings_yaml(&bindings));
        prop_assert_eq!(p.bindings.len(), bindings.len(), "every binding compiles");
        for input in &inputs {
            let resolved = p.resolve(input);
            // --explain runs the same walk: it must never tell another story.
            prop_assert_eq!(&p.explain(input).result, &resolved);
            let got = serde_json::to_value(resolved).unwrap();
            let want = reference_result(&bindings, input);
            prop_assert_eq!(got, want, "input {:?}", input);
        }
    }
}

// ---- routing-plan.json ----

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// A saved plan routes every input exactly as the plan that wrote it.
    #[test]
    fn a_saved_plan_routes_like_the_compiled_one(
        bindings in prop::collection::vec(arb_binding(), 0..12),
        inputs in prop::collection::vec(arb_input(), 1..8),
    ) {
        let p = plan(AGENTS, &bindings_yaml(&bindings));
        let text = p.to_document(3, "sha256:config").to_json();
        let (meta, loaded) = document::load(&text).unwrap();
        prop_assert_eq!(meta.generation, 3);
        prop_assert_eq!(&loaded.bindings, &p.bindings);
        for input in &inputs {
            prop_assert_eq!(loaded.resolve(input), p.resolve(input));
        }
    }
}

fn sample_document() -> serde_json::Value {
    let p = plan(
        AGENTS,
        "bindings:\n  - {agentId: a, match: {channel: discord, guildId: g1}}\n  - {type: acp, agentId: b, match: {channel: discord, peer: {kind: channel, id: c1}}}\n",
    );
    serde_json::from_str(&p.to_document(1, "sha256:x").to_json()).unwrap()
}

fn refused(doc: &serde_json::Value) -> String {
    match document::load(&doc.to_string()) {
        Ok(_) => panic!("loaded a bad plan: {doc:#}"),
        Err(e) => e.to_string(),
    }
}

/// Re-hashes a hand-edited document so that the check under test is not the hash check.
fn rehash(doc: &mut serde_json::Value) {
    let body: document::PlanBody = serde_json::from_value(doc["plan"].clone()).unwrap();
    doc["contentHash"] = body.hash().into();
}

#[test]
fn saved_plans_carry_what_access_needs() {
    let doc = sample_document();
    assert_eq!(doc["formatVersion"], "2.0");
    assert_eq!(doc["generation"], 1);
    assert_eq!(doc["configHash"], "sha256:x");
    assert!(doc["contentHash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(doc["plan"]["bindings"][0]["tier"], "guild");
    assert_eq!(doc["plan"]["bindings"][0]["agent"], 1, "agents by index");
    assert_eq!(doc["plan"]["acp"][0]["peer"]["id"], "c1");
    let (_, plan) = document::load(&doc.to_string()).unwrap();
    let input = RouteInput {
        peer: peer("channel", "c1"),
        ..input("discord")
    };
    assert_eq!(
        plan.acp_binding(&input).map(|a| a.agent_id.as_str()),
        Some("b")
    );
}

#[test]
fn saved_plans_are_checked_on_load() {
    let mut newer = sample_document();
    newer["formatVersion"] = "3.1".into();
    assert!(refused(&newer).contains("newer than this deepcli understands"));

    let mut minor = sample_document();
    minor["formatVersion"] = "2.7".into();
    assert!(document::load(&minor.to_string()).is_ok(), "any 2.x loads");

    // Format 1 spelled the keys around `plan` in snake_case; its plans still load.
    let mut first = sample_document();
    let doc = first.as_object_mut().unwrap();
    for (old, new) in [
        ("formatVersion", "format_version"),
        ("contentHash", "content_hash"),
        ("configHash", "config_hash"),
    ] {
        let value = doc.remove(old).unwrap();
        doc.insert(new.into(), value);
    }
    doc["format_version"] = "1.7".into();
    let (meta, _) = document::load(&first.to_string()).expect("a 1.x plan loads");
    assert_eq!(meta.format_version, "1.7");

    let mut tampered = sample_document();
    tampered["plan"]["bindings"][0]["guildId"] = "g2".into();
    assert!(refused(&tampered).contains("content hash mismatch"));

    let mut dangling = sample_document();
    dangling["plan"]["bindings"][0]["agent"] = 99.into();
    rehash(&mut dangling);
    assert!(refused(&dangling).contains("agent 99 does not exist"));

    let mut wrong_tier = sample_document();
    wrong_tier["plan"]["bindings"][0]["tier"] = "team".into();
    rehash(&mut wrong_tier);
    assert!(refused(&wrong_tier).contains("but its match puts it in `guild`"));

    // Positions are 32-bit in the index: a larger one is refused, never a panic.
    let mut far = sample_document();
    far["plan"]["bindings"][0]["index"] = 5_000_000_000u64.into();
    rehash(&mut far);
    assert!(refused(&far).contains("index 5000000000 is out of range"));

    let mut no_default = sample_document();
    no_default["plan"]["defaultAgent"] = "ghost".into();
    rehash(&mut no_default);
    assert!(refused(&no_default).contains("default agent `ghost`"));

    let mut unknown_field = sample_document();
    unknown_field["plan"]["surprise"] = true.into();
    assert!(refused(&unknown_field).contains("unknown field `surprise`"));
}
