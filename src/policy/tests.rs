//! The decision order and the levels, on configs written as YAML.

use std::path::PathBuf;

use super::*;
use crate::config::{self, FileKind, LoadOptions};

fn plan(channels: &str, agents: &str) -> PolicyPlan {
    let options = LoadOptions {
        state_dir: PathBuf::from("/srv/state"),
        home: None,
    };
    let loaded = config::load_texts(
        std::path::Path::new("/cfg"),
        vec![
            (
                FileKind::Channels,
                PathBuf::from("/cfg/channels.yaml"),
                channels.to_string(),
            ),
            (
                FileKind::Agents,
                PathBuf::from("/cfg/agents.yaml"),
                agents.to_string(),
            ),
        ],
        &options,
    );
    assert!(
        !loaded.diagnostics.iter().any(|d| d.is_error()),
        "{:#?}",
        loaded.diagnostics
    );
    PolicyPlan::compile(&loaded.config)
}

const AGENTS: &str = "agents:\n  list:\n    - id: main\n      identity: {name: Ada}\n";

fn dm<'a>(sender: &'a str) -> Message<'a> {
    Message {
        conversation: Conversation::Direct,
        sender_id: Some(sender),
        is_bot: false,
        mentions: &[],
        reply_to_sender_id: None,
        in_thread: false,
        text: "hello",
        guild_id: None,
        roles: &[],
    }
}

fn in_group<'a>(sender: &'a str, text: &'a str) -> Message<'a> {
    Message {
        conversation: Conversation::Group,
        text,
        ..dm(sender)
    }
}

/// The verdict for `message` on `account` of telegram, in `group` (if any), routed to `main`.
fn verdict(
    plan: &PolicyPlan,
    account: &str,
    group: Option<&str>,
    message: &Message<'_>,
) -> Verdict {
    verdict_muted(plan, account, group, message, false)
}

fn verdict_muted(
    plan: &PolicyPlan,
    account: &str,
    group: Option<&str>,
    message: &Message<'_>,
    muted: bool,
) -> Verdict {
    let policy = plan.account("telegram", account).expect("declared account");
    let view = policy.view(group, None);
    let agent = AgentPatterns {
        mentions: plan.agent("main").and_then(|a| a.mentions.as_ref()),
    };
    decide(&view, agent, message, muted)
}

/// The reason and the rule of a gated verdict; `("deliver", "")` otherwise.
fn said(v: &Verdict) -> (&'static str, String) {
    match v {
        Verdict::Deliver => ("deliver", String::new()),
        Verdict::Gated { gate, .. } => (gate.reason.as_str(), gate.rule.to_string()),
    }
}

#[test]
fn built_in_defaults_pair_direct_messages_and_close_unlisted_groups() {
    let p = plan(
        "channels:\n  telegram:\n    accounts:\n      default: {}\n",
        AGENTS,
    );
    let v = verdict(&p, "default", None, &dm("u1"));
    assert_eq!(
        v,
        Verdict::Gated {
            gate: Gate {
                reason: Reason::PairingRequired,
                rule: "dmPolicy (built-in default: pairing)".into()
            },
            unless: Some(Unless::SenderPaired),
        }
    );
    assert_eq!(
        said(&verdict(
            &p,
            "default",
            Some("g1"),
            &in_group("u1", "@ada hi")
        )),
        (
            "group-not-allowed",
            "groupPolicy (built-in default: allowlist)".into()
        )
    );
}

/// A case: account, group, message, bot muted, reason, rule.
type Case<'a> = (
    &'a str,
    Option<&'a str>,
    Message<'a>,
    bool,
    &'a str,
    &'a str,
);

#[test]
fn every_reason_in_the_decision_order_with_the_rule_that_decided() {
    let channels = r#"channels:
  telegram:
    groups:
      "g-open": {}
      "g-quiet": {requireMention: false}
      "g-few": {groupAllowFrom: ["u1"]}
    accounts:
      default:
        botUserId: "B0"
        dmPolicy: allowlist
        allowFrom: ["u1"]
      closed:
        dmPolicy: disabled
        groupPolicy: disabled
      bots:
        botUserId: "B0"
        allowBots: mentions
        dmPolicy: open
        allowFrom: ["*"]
        groupPolicy: open
        requireMention: false
      nobots:
        dmPolicy: open
        allowFrom: ["*"]
"#;
    let p = plan(channels, AGENTS);
    let bot = |sender: &'static str, text: &'static str| Message {
        is_bot: true,
        ..in_group(sender, text)
    };
    let cases: Vec<Case<'_>> = vec![
        // 1. self
        (
            "default",
            None,
            dm("B0"),
            false,
            "self",
            "channels.telegram.accounts.default.botUserId (channels.yaml:9)",
        ),
        // 2. bots
        (
            "nobots",
            None,
            Message {
                is_bot: true,
                ..dm("B9")
            },
            false,
            "bot",
            "allowBots (built-in default: false)",
        ),
        (
            "bots",
            Some("g"),
            bot("B9", "hello"),
            false,
            "bot-not-mentioned",
            "channels.telegram.accounts.bots.allowBots (channels.yaml:17)",
        ),
        (
            "bots",
            Some("g"),
            bot("B9", "hi @ada"),
            true,
            "bot-loop",
            "botLoopProtection (built-in default: {enabled: true, maxEventsPerWindow: 20, windowSeconds: 60, cooldownSeconds: 60})",
        ),
        (
            "bots",
            Some("g"),
            bot("B9", "hi @ada"),
            false,
            "deliver",
            "",
        ),
        // 3. direct
        (
            "closed",
            None,
            dm("u1"),
            false,
            "dm-disabled",
            "channels.telegram.accounts.closed.dmPolicy (channels.yaml:13)",
        ),
        (
            "default",
            None,
            dm("u2"),
            false,
            "dm-not-allowed",
            "channels.telegram.accounts.default.allowFrom (channels.yaml:11)",
        ),
        ("default", None, dm("u1"), false, "deliver", ""),
        // 4. groups
        (
            "closed",
            Some("g-open"),
            in_group("u1", "@ada"),
            false,
            "group-disabled",
            "channels.telegram.accounts.closed.groupPolicy (channels.yaml:14)",
        ),
        (
            "default",
            Some("g-unlisted"),
            in_group("u1", "@ada"),
            false,
            "group-not-allowed",
            "groupPolicy (built-in default: allowlist)",
        ),
        // groupAllowFrom falls back to allowFrom.
        (
            "default",
            Some("g-open"),
            in_group("u2", "@ada"),
            false,
            "sender-not-allowed",
            "channels.telegram.accounts.default.allowFrom (channels.yaml:11)",
        ),
        (
            "default",
            Some("g-few"),
            in_group("u2", "@ada"),
            false,
            "sender-not-allowed",
            "channels.telegram.groups.g-few.groupAllowFrom (channels.yaml:6)",
        ),
        (
            "default",
            Some("g-open"),
            in_group("u1", "hello"),
            false,
            "not-mentioned",
            "requireMention (built-in default: true)",
        ),
        (
            "default",
            Some("g-quiet"),
            in_group("u1", "hello"),
            false,
            "deliver",
            "",
        ),
        (
            "default",
            Some("g-open"),
            in_group("u1", "hi @Ada!"),
            false,
            "deliver",
            "",
        ),
    ];
    for (account, group, message, muted, reason, rule) in cases {
        let v = verdict_muted(&p, account, group, &message, muted);
        assert_eq!(
            said(&v),
            (reason, rule.to_string()),
            "{account} {group:?} {message:?}"
        );
    }
}

#[test]
fn a_native_mention_a_reply_to_the_bot_and_thread_participation_count() {
    let channels = r#"channels:
  telegram:
    groups: {"*": {}}
    accounts:
      default:
        botUserId: "B0"
        groupAllowFrom: []
      explicit:
        botUserId: "B0"
        groupAllowFrom: []
        requireExplicitMention: true
      noimplicit:
        botUserId: "B0"
        implicitMentions: {replyToBot: false, threadParticipation: false}
"#;
    let p = plan(channels, AGENTS);
    let mentions = ["B0".to_string()];
    let named = Message {
        mentions: &mentions,
        ..in_group("u", "hello")
    };
    assert_eq!(verdict(&p, "default", Some("g"), &named), Verdict::Deliver);
    let reply = Message {
        reply_to_sender_id: Some("B0"),
        ..in_group("u", "hello")
    };
    assert_eq!(verdict(&p, "default", Some("g"), &reply), Verdict::Deliver);
    assert_eq!(
        said(&verdict(&p, "noimplicit", Some("g"), &reply)).0,
        "not-mentioned"
    );
    let threaded = Message {
        in_thread: true,
        ..in_group("u", "hello")
    };
    match verdict(&p, "default", Some("g"), &threaded) {
        Verdict::Gated { gate, unless } => {
            assert_eq!(gate.reason, Reason::NotMentioned);
            assert_eq!(unless, Some(Unless::ThreadAnswered));
        }
        v => panic!("{v:?}"),
    }
    // Inside a thread, requireExplicitMention turns both implicit mentions off…
    let reply_in_thread = Message {
        in_thread: true,
        ..reply
    };
    assert_eq!(
        verdict(&p, "explicit", Some("g"), &reply_in_thread),
        Verdict::Gated {
            gate: Gate {
                reason: Reason::NotMentioned,
                rule: "requireMention (built-in default: true)".into()
            },
            unless: None
        }
    );
    // …but an explicit one still counts, and outside threads a reply does.
    let named_in_thread = Message {
        in_thread: true,
        ..named
    };
    assert_eq!(
        verdict(&p, "explicit", Some("g"), &named_in_thread),
        Verdict::Deliver
    );
    assert_eq!(verdict(&p, "explicit", Some("g"), &reply), Verdict::Deliver);
}

#[test]
fn the_most_specific_level_wins() {
    let channels = r#"channels:
  defaults:
    requireMention: false
    dmPolicy: open
    allowFrom: ["*"]
    groupPolicy: open
    historyLimit: 7
  telegram:
    requireMention: true
    groups:
      "*": {historyLimit: 3}
      "g-loud": {requireMention: false}
    accounts:
      default: {}
      own: {requireMention: false, dmPolicy: disabled}
"#;
    let p = plan(channels, AGENTS);
    let quiet = in_group("u", "hello");
    // channel > defaults
    assert_eq!(
        said(&verdict(&p, "default", Some("g"), &quiet)),
        (
            "not-mentioned",
            "channels.telegram.requireMention (channels.yaml:9)".into()
        )
    );
    // account > channel
    assert_eq!(verdict(&p, "own", Some("g"), &quiet), Verdict::Deliver);
    assert_eq!(said(&verdict(&p, "own", None, &dm("u"))).0, "dm-disabled");
    // group > account
    assert_eq!(
        verdict(&p, "default", Some("g-loud"), &quiet),
        Verdict::Deliver
    );
    // defaults
    assert_eq!(
        verdict(&p, "default", None, &dm("anyone")),
        Verdict::Deliver
    );
    // "*" > account > … > defaults
    let account = p.account("telegram", "default").unwrap();
    assert_eq!(account.view(Some("g"), None).history_limit().value, 3);
    assert_eq!(account.base.history_limit.value, 7);
    assert_eq!(
        account.base.history_limit.rule.as_ref(),
        "channels.defaults.historyLimit (channels.yaml:7)"
    );
}

#[test]
fn a_thread_takes_its_parent_groups_entry() {
    let channels = "channels:\n  telegram:\n    groups: {\"g1\": {requireMention: false, groupAllowFrom: []}}\n    accounts:\n      default: {}\n";
    let p = plan(channels, AGENTS);
    let account = p.account("telegram", "default").unwrap();
    let view = account.view(Some("thread-9"), Some("g1"));
    assert!(view.listed());
    assert!(!view.require_mention().value);
}

#[test]
fn channel_mention_patterns_win_over_the_agents_and_the_derived_one() {
    let agents = "agents:\n  list:\n    - id: main\n      identity: {name: Ada}\n      groupChat: {mentionPatterns: [\"(?i)hey main\"]}\n";
    let channels = "channels:\n  telegram:\n    groups: {\"*\": {groupAllowFrom: []}}\n    accounts:\n      default: {}\n      own: {mentionPatterns: [\"^!bot\"]}\n";
    let p = plan(channels, agents);
    let group = |text| in_group("u", text);
    assert_eq!(
        verdict(&p, "default", Some("g"), &group("HEY MAIN look")),
        Verdict::Deliver
    );
    // The agent's own patterns replace the derived one.
    assert_eq!(
        said(&verdict(&p, "default", Some("g"), &group("@ada look"))).0,
        "not-mentioned"
    );
    assert_eq!(
        verdict(&p, "own", Some("g"), &group("!bot look")),
        Verdict::Deliver
    );
    assert_eq!(
        said(&verdict(&p, "own", Some("g"), &group("hey main"))).0,
        "not-mentioned"
    );
    let agent = p.agent("main").unwrap();
    assert_eq!(
        agent.rule.as_ref(),
        "agents.list.0.groupChat.mentionPatterns (agents.yaml:5)"
    );
}

#[test]
fn a2a_senders_are_admitted_by_their_token_and_cli_only_by_what_it_sets() {
    let channels = "channels:\n  defaults: {dmPolicy: disabled, groupPolicy: disabled}\n  cli:\n    accounts:\n      default: {}\n      strict: {dmPolicy: allowlist, allowFrom: [\"me\"]}\na2a:\n  expose: []\n";
    let p = plan(channels, AGENTS);
    let verdict = |p: &PolicyPlan, channel: &str, account: &str, message: &Message<'_>| {
        let policy = p.account(channel, account).unwrap();
        decide(
            &policy.view(Some("g"), None),
            AgentPatterns::default(),
            message,
            false,
        )
    };
    // A2A peers: the token is the admission; channels.defaults does not reach them.
    assert_eq!(
        verdict(&p, "a2a", "default", &dm("peer")),
        Verdict::Deliver,
        "a2a's built-in default is open"
    );
    // channels.defaults does not reach the operator's own channel…
    assert_eq!(
        verdict(&p, "cli", "default", &dm("anyone")),
        Verdict::Deliver
    );
    assert_eq!(
        verdict(&p, "cli", "default", &in_group("anyone", "hi")),
        Verdict::Deliver
    );
    // …what the cli channel sets itself does.
    assert_eq!(
        said(&verdict(&p, "cli", "strict", &dm("anyone"))).0,
        "dm-not-allowed"
    );
    // `channels.a2a` is the A2A peers' level: its dmPolicy and allowFrom decide.
    let a2a = "channels:\n  a2a:\n    dmPolicy: allowlist\n    allowFrom: [partner]\na2a:\n  expose: []\n";
    let p = plan(a2a, AGENTS);
    assert_eq!(
        verdict(&p, "a2a", "default", &dm("partner")),
        Verdict::Deliver
    );
    assert_eq!(
        said(&verdict(&p, "a2a", "default", &dm("stranger"))),
        (
            "dm-not-allowed",
            "channels.a2a.allowFrom (channels.yaml:4)".to_string()
        )
    );
    // Without an `a2a:` block nothing serves A2A, and nothing is compiled for it.
    let p = plan("channels:\n  a2a:\n    dmPolicy: disabled\n", AGENTS);
    assert!(p.account("a2a", "default").is_none());
}

#[test]
fn a_bot_loop_protection_set_in_part_keeps_the_other_fields() {
    let channels = "channels:\n  defaults:\n    botLoopProtection: {maxEventsPerWindow: 4}\n  telegram:\n    accounts:\n      default:\n        botLoopProtection: {cooldownSeconds: 5}\n      off:\n        botLoopProtection: {enabled: false}\n";
    let p = plan(channels, AGENTS);
    let limits = &p.account("telegram", "default").unwrap().base.bot_loop;
    assert_eq!(limits.value.max_events, 4);
    assert_eq!(limits.value.cooldown.as_secs(), 5);
    assert_eq!(limits.value.window.as_secs(), 60);
    assert_eq!(
        limits.rule.as_ref(),
        "channels.defaults.botLoopProtection.maxEventsPerWindow (channels.yaml:3)"
    );
    let off = &p.account("telegram", "off").unwrap().base.bot_loop;
    assert!(!off.value.enabled);
    // Off: a muted pair is not gated.
    let view = p.account("telegram", "off").unwrap().view(None, None);
    let bot = Message {
        is_bot: true,
        ..dm("B")
    };
    let v = decide(&view, AgentPatterns::default(), &bot, true);
    assert_eq!(said(&v).0, "bot", "allowBots still decides first");
}

#[test]
fn a_huge_allow_from_is_a_set() {
    let ids: Vec<String> = (0..20_000).map(|i| format!("\"u{i}\"")).collect();
    let channels = format!(
        "channels:\n  telegram:\n    accounts:\n      default:\n        dmPolicy: allowlist\n        allowFrom: [{}]\n",
        ids.join(", ")
    );
    let p = plan(&channels, AGENTS);
    assert_eq!(
        verdict(&p, "default", None, &dm("u19999")),
        Verdict::Deliver
    );
    assert_eq!(
        said(&verdict(&p, "default", None, &dm("u20000"))).0,
        "dm-not-allowed"
    );
    assert_eq!(
        p.account("telegram", "default")
            .unwrap()
            .base
            .allow_from
            .value
            .len(),
        20_000
    );
}

/// Discord's guilds (adapters.md, "Discord"): a guild listed serves its channels, a guild that
/// lists channels serves only those, a channel switched off serves nobody; `users` or `roles`
/// admit a sender; the channel's entry beats the guild's, a thread takes its parent's; an
/// account's own `guilds` replace the channel's.
#[test]
fn discord_guilds_and_their_channels_list_and_admit_by_user_or_role() {
    let channels = "channels:\n  discord:\n    guilds:\n      \"100\":\n        requireMention: false\n        users: [\"7\"]\n        roles: [\"50\"]\n        channels:\n          \"200\": {requireMention: true}\n          \"201\": {enabled: false}\n          \"202\": {users: [\"*\"]}\n      \"300\": {}\n    accounts:\n      default: {botUserId: \"B1\"}\n      own:\n        botUserId: \"B1\"\n        guilds: {\"400\": {}}\n";
    let p = plan(channels, AGENTS);
    let mentioned = vec!["B1".to_string()];
    let decide_in = |account: &str,
                     guild: &str,
                     peer: &str,
                     parent: Option<&str>,
                     sender: &str,
                     roles: &[String],
                     mentions: &[String]| {
        let message = Message {
            conversation: Conversation::Group,
            sender_id: Some(sender),
            mentions,
            guild_id: Some(guild),
            roles,
            in_thread: parent.is_some(),
            ..dm(sender)
        };
        let policy = p.account("discord", account).unwrap();
        said(&decide(
            &policy.view_in(Some(peer), parent, Some(guild)),
            AgentPatterns::default(),
            &message,
            false,
        ))
    };
    let none: &[String] = &[];
    let role = vec!["50".to_string()];
    // The channel's requireMention beats the guild's.
    assert_eq!(
        decide_in("default", "100", "200", None, "7", none, none).0,
        "not-mentioned"
    );
    assert_eq!(
        decide_in("default", "100", "200", None, "7", none, &mentioned).0,
        "deliver"
    );
    // A channel the guild does not list: not served under allowlist.
    let (reason, rule) = decide_in("default", "100", "203", None, "7", none, &mentioned);
    assert_eq!(reason, "group-not-allowed");
    assert!(rule.starts_with("groupPolicy (built-in default"), "{rule}");
    // Switched off.
    assert_eq!(
        decide_in("default", "100", "201", None, "7", none, &mentioned),
        (
            "group-not-allowed",
            "channels.discord.guilds.100.channels.201.enabled (channels.yaml:10)".to_string()
        )
    );
    // Anyone in 202, without a mention (the guild's requireMention: false).
    assert_eq!(
        decide_in("default", "100", "202", None, "9", none, none).0,
        "deliver"
    );
    // In 200 a sender on neither list is refused; a member of role 50 is let in, in a thread
    // of 200 too.
    assert_eq!(
        decide_in("default", "100", "200", None, "8", none, &mentioned),
        (
            "sender-not-allowed",
            "channels.discord.guilds.100.users (channels.yaml:6)".to_string()
        )
    );
    assert_eq!(
        decide_in("default", "100", "t-1", Some("200"), "8", &role, none).0,
        "not-mentioned",
        "the thread takes 200's requireMention"
    );
    assert_eq!(
        decide_in("default", "100", "t-1", Some("200"), "8", &role, &mentioned).0,
        "deliver"
    );
    // Guild 300 lists no channels: every one served, the account's requireMention.
    assert_eq!(
        decide_in("default", "300", "1", None, "8", none, none).0,
        "not-mentioned"
    );
    assert_eq!(
        decide_in("default", "300", "1", None, "8", none, &mentioned).0,
        "deliver"
    );
    assert_eq!(
        decide_in("default", "999", "1", None, "8", none, &mentioned).0,
        "group-not-allowed"
    );
    // An account's own guilds replace the channel's.
    assert_eq!(
        decide_in("own", "100", "202", None, "9", none, &mentioned).0,
        "group-not-allowed"
    );
    assert_eq!(
        decide_in("own", "400", "1", None, "9", none, &mentioned).0,
        "deliver"
    );
    // Without a guild the guilds play no part.
    let policy = p.account("discord", "default").unwrap();
    assert!(!policy.view(Some("200"), None).listed());
}
