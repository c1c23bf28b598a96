//! The router against routing.md: worked examples, tier consequences, and agreement with a
//! linear reference resolver written straight from the spec on random configs.

use std::path::{Path, PathBuf};

use deepcli::config::model::{DmScope, GroupScope};
use deepcli::config::{self, FileKind, LoadOptions};
use deepcli::ids;
use deepcli::routing::scope::{Scope, Tier};
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

/// routing.md §3–§4 read literally: scan every binding per tier, in config order.
fn reference<'p>(
    p: &'p RoutingPlan,
    input: &RouteInput,
) -> (
    &'static str,
    Option<&'p deepcli::routing::plan::CompiledBinding>,
) {
    let channel = ids::channel(&input.channel).into_owned();
    let account = ids::account_id(input.account_id.as_deref().unwrap_or("")).into_owned();
    let candidates: Vec<&deepcli::routing::plan::CompiledBinding> = p
        .bindings
        .iter()
        .filter(|b| b.scope.channel == channel && b.scope.account.matches(&account))
        .collect();
    let kind_of = |p: &Option<Peer>| {
        p.as_ref()
            .map(|p| (ids::PeerKind::parse(&p.kind), p.id.trim().to_string()))
    };
    let peer = kind_of(&input.peer);
    let parent = kind_of(&input.parent_peer).filter(|(_, id)| !id.is_empty());
    let guild = input
        .guild_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let team = input
        .team_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let roles: Vec<String> = input
        .member_role_ids
        .iter()
        .map(|r| r.trim().to_string())
        .collect();
    let holds = |s: &Scope, sp: &Option<(ids::PeerKind, String)>| {
        let peer_ok = match (&s.peer, sp) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(want), Some((kind, id))) => {
                want.kind.class().is_some()
                    && want.kind.class() == kind.class()
                    && want.id.as_ref().is_none_or(|w| !w.is_empty() && w == id)
            }
        };
        peer_ok
            && s.guild.as_deref().is_none_or(|g| Some(g) == guild)
            && s.team.as_deref().is_none_or(|t| Some(t) == team)
            && (s.roles.is_empty() || s.roles.iter().any(|r| roles.contains(r)))
    };
    type ScopePeer = Option<(ids::PeerKind, String)>;
    let tiers: [(bool, Tier, &'static str, &ScopePeer); 8] = [
        (peer.is_some(), Tier::Peer, "binding.peer", &peer),
        (parent.is_some(), Tier::Peer, "binding.peer.parent", &parent),
        (
            peer.is_some(),
            Tier::Wildcard,
            "binding.peer.wildcard",
            &peer,
        ),
        (
            guild.is_some() && !roles.is_empty(),
            Tier::GuildRoles,
            "binding.guild+roles",
            &peer,
        ),
        (guild.is_some(), Tier::Guild, "binding.guild", &peer),
        (team.is_some(), Tier::Team, "binding.team", &peer),
        (true, Tier::Account, "binding.account", &peer),
        (true, Tier::Channel, "binding.channel", &peer),
    ];
    for (enabled, tier, name, sp) in tiers {
        if !enabled {
            continue;
        }
        for b in &candidates {
            let in_tier = b.scope.tier() == tier;
            let keyed = match tier {
                Tier::GuildRoles | Tier::Guild => b.scope.guild.as_deref() == guild,
                Tier::Team => b.scope.team.as_deref() == team,
                _ => true,
            };
            if in_tier && keyed && holds(&b.scope, sp) {
                return (name, Some(*b));
            }
        }
    }
    ("default", None)
}

/// The whole result routing.md §6–§7 asks for, from the reference's decision: scope
/// precedence and session keys written out again, independently of `routing::session`.
fn reference_result(p: &RoutingPlan, input: &RouteInput) -> serde_json::Value {
    let (matched_by, binding) = reference(p, input);
    let agent = binding.map_or(p.default_agent.as_str(), |b| b.agent_id.as_str());
    let channel = input.channel.trim().to_lowercase();
    let account = ids::account_id(input.account_id.as_deref().unwrap_or("")).into_owned();
    let dm = binding
        .and_then(|b| b.dm_scope)
        .or(input.dm_scope)
        .or(p.session.dm_scope)
        .unwrap_or(DmScope::Main);
    let group = binding
        .and_then(|b| b.group_scope)
        .or(input.group_scope)
        .or(p.session.group_scope)
        .unwrap_or(GroupScope::PerGroup);
    let main = format!("agent:{agent}:main");
    let session = match &input.peer {
        None => main.clone(),
        Some(peer) => {
            let kind = peer.kind.trim().to_lowercase();
            let mut id = peer.id.trim().to_lowercase();
            if id.is_empty() {
                id = "unknown".into();
            }
            if kind == "direct" || kind == "dm" {
                match dm {
                    DmScope::Main => main.clone(),
                    DmScope::PerPeer => format!("agent:{agent}:direct:{id}"),
                    DmScope::PerChannelPeer => format!("agent:{agent}:{channel}:direct:{id}"),
                    DmScope::PerAccountChannelPeer => {
                        format!("agent:{agent}:{channel}:{account}:direct:{id}")
                    }
                }
            } else if group == GroupScope::Main {
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
        "binding": binding.map(|b| serde_json::json!({
            "file": "bindings.yaml",
            "line": b.source.line,
            "index": b.source.index,
        })),
    })
}

fn arb_binding() -> impl Strategy<Value = String> {
    let agent = prop::sample::select(vec!["a", "b", "x", "y", "main"]);
    let channel = prop::sample::select(vec!["discord", "telegram"]);
    let account = prop::option::of(prop::sample::select(vec!["\"*\"", "default", "biz"]));
    let peer = prop::option::of((
        prop::sample::select(vec!["direct", "group", "channel", "dm"]),
        prop::sample::select(vec!["p1", "p2", "\"*\""]),
    ));
    let guild = prop::option::of(prop::sample::select(vec!["g1", "g2"]));
    let team = prop::option::of(prop::sample::select(vec!["t1"]));
    let roles = prop::option::of(prop::collection::vec(
        prop::sample::select(vec!["r1", "r2"]),
        0..3,
    ));
    let session = prop::option::of(prop::sample::select(vec![
        "{dmScope: per-peer}",
        "{groupScope: main}",
        "{dmScope: per-account-channel-peer, groupScope: per-group}",
    ]));
    (agent, channel, account, peer, guild, team, roles, session).prop_map(
        |(agent, channel, account, peer, guild, team, roles, session)| {
            let mut m = format!("channel: {channel}");
            if let Some(a) = account {
                m += &format!(", accountId: {a}");
            }
            if let Some((k, id)) = peer {
                m += &format!(", peer: {{kind: {k}, id: {id}}}");
            }
            if let Some(g) = guild {
                m += &format!(", guildId: {g}");
            }
            if let Some(t) = team {
                m += &format!(", teamId: {t}");
            }
            if let Some(r) = roles {
                m += &format!(", roles: [{}]", r.join(", "));
            }
            let session = session.map_or(String::new(), |s| format!(", session: {s}"));
            format!("  - {{agentId: {agent}, match: {{{m}}}{session}}}\n")
        },
    )
}

fn arb_input() -> impl Strategy<Value = RouteInput> {
    let opt_peer = || {
        prop::option::of((
            prop::sample::select(vec!["direct", "group", "channel", "dm", "thread"]),
            prop::sample::select(vec!["p1", "p2", "p3", ""]),
        ))
        .prop_map(|p| {
            p.map(|(k, id)| Peer {
                kind: k.into(),
                id: id.into(),
            })
        })
    };
    (
        prop::sample::select(vec!["discord", "telegram", "Discord"]),
        prop::option::of(prop::sample::select(vec![
            "default", "biz", "Biz", "other", "",
        ])),
        opt_peer(),
        opt_peer(),
        prop::option::of(prop::sample::select(vec!["g1", "g2", ""])),
        prop::option::of(prop::sample::select(vec!["t1", "t2"])),
        prop::collection::vec(
            prop::sample::select(vec!["r1".to_string(), "r2".to_string(), "r3".to_string()]),
            0..3,
        ),
        prop::option::of(prop::sample::select(vec![DmScope::PerPeer, DmScope::Main])),
    )
        .prop_map(
            |(channel, account, peer, parent, guild, team, roles, dm_scope)| RouteInput {
                channel: channel.into(),
                account_id: account.map(Into::into),
                peer,
                parent_peer: parent,
                guild_id: guild.map(Into::into),
                team_id: team.map(Into::into),
                member_role_ids: roles,
                dm_scope,
                ..RouteInput::default()
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
        let p = plan(AGENTS, &format!("bindings:\n{}", bindings.concat()));
        for input in &inputs {
            let resolved = p.resolve(input);
            // --explain runs the same walk: it must never tell another story.
            prop_assert_eq!(&p.explain(input).result, &resolved);
            let got = serde_json::to_value(resolved).unwrap();
            let want = reference_result(&p, input);
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
        let p = plan(AGENTS, &format!("bindings:\n{}", bindings.concat()));
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
    doc["content_hash"] = body.hash().into();
}

#[test]
fn saved_plans_carry_what_access_needs() {
    let doc = sample_document();
    assert_eq!(doc["format_version"], "1.0");
    assert_eq!(doc["generation"], 1);
    assert_eq!(doc["config_hash"], "sha256:x");
    assert!(doc["content_hash"].as_str().unwrap().starts_with("sha256:"));
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
    newer["format_version"] = "2.1".into();
    assert!(refused(&newer).contains("newer than this deepcli understands"));

    let mut minor = sample_document();
    minor["format_version"] = "1.7".into();
    assert!(document::load(&minor.to_string()).is_ok(), "any 1.x loads");

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
