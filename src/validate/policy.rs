//! Rules over the inbound policy (policy.md): the DM policy an account ends up with through
//! the levels (account > channel > `channels.defaults`), mention patterns the regex engine
//! cannot run, access groups nobody declared, and accounts where two bots can loop.
//!
//! The DM rules look at each account's effective settings and report at the node that set
//! them, once per node: a channel-level `dmPolicy: allowlist` that three accounts inherit is one
//! finding.

use std::collections::HashSet;

use super::Context;
use crate::config::FileKind;
use crate::config::model::{AllowBots, DmPolicy, PolicySpec};
use crate::config::yaml::escape_pointer_token;
use crate::diagnostic::{Diagnostic, rules};
use crate::policy::mention::{Mentions, PatternError};
use crate::policy::settings::ACCESS_GROUP_PREFIX;

const FILE: FileKind = FileKind::Channels;

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let config = cx.config;
    let defaults = (
        &config.channel_defaults,
        format!("/channels/{}", crate::config::model::CHANNEL_DEFAULTS),
    );
    let mut reported = HashSet::new();
    let mut places: Vec<(&PolicySpec, String)> = vec![defaults.clone()];
    for channel in &config.channels {
        let channel_level = (&channel.spec.policy, channel.pointer());
        places.push(channel_level.clone());
        for account in channel.accounts() {
            let mut levels = vec![
                (&account.spec.policy, account.pointer()),
                channel_level.clone(),
            ];
            // The `cli` channel takes only what it sets itself (policy::settings).
            if crate::ids::channel(&channel.id) != "cli" {
                levels.push(defaults.clone());
            }
            dm_policy(cx, &levels, &mut reported, out);
            bot_loop(cx, channel, &levels, &mut reported, out);
            places.push((&account.spec.policy, account.pointer()));
        }
        for (id, group) in &channel.spec.groups {
            let base = format!("{}/groups/{}", channel.pointer(), escape_pointer_token(id));
            if let Some(patterns) = &group.mention_patterns {
                mention_patterns(cx, FILE, &format!("{base}/mentionPatterns"), patterns, out);
            }
            if let Some(list) = &group.group_allow_from {
                access_groups(cx, &format!("{base}/groupAllowFrom"), list, out);
            }
        }
    }
    for (spec, base) in places {
        if let Some(patterns) = &spec.mention_patterns {
            mention_patterns(cx, FILE, &format!("{base}/mentionPatterns"), patterns, out);
        }
        for (key, list) in [
            ("allowFrom", &spec.allow_from),
            ("groupAllowFrom", &spec.group_allow_from),
        ] {
            if let Some(list) = list {
                access_groups(cx, &format!("{base}/{key}"), list, out);
            }
        }
    }
    if let Some(g) = &config.agent_defaults.group_chat {
        let pointer = "/agents/defaults/groupChat/mentionPatterns";
        mention_patterns(cx, FileKind::Agents, pointer, &g.mention_patterns, out);
    }
    for agent in config.agents.iter().filter(|a| a.index.is_some()) {
        let pointer = format!("{}/groupChat/mentionPatterns", agent.pointer());
        // The effective spec may hold agents.defaults' patterns: those are checked above.
        if let Some(g) = &agent.spec.group_chat
            && cx.exists(FileKind::Agents, &pointer)
        {
            mention_patterns(cx, FileKind::Agents, &pointer, &g.mention_patterns, out);
        }
    }
}

/// The first level (most specific first) that sets a key: its value and the key's pointer.
fn effective<'a, T>(
    levels: &'a [(&'a PolicySpec, String)],
    key: &str,
    get: impl Fn(&'a PolicySpec) -> Option<T>,
) -> Option<(T, String)> {
    level_of(levels, key, get).map(|(v, at, _)| (v, at))
}

/// [`effective`], with the level's position (0: the most specific).
fn level_of<'a, T>(
    levels: &'a [(&'a PolicySpec, String)],
    key: &str,
    get: impl Fn(&'a PolicySpec) -> Option<T>,
) -> Option<(T, String, usize)> {
    levels
        .iter()
        .enumerate()
        .find_map(|(i, (spec, base))| get(spec).map(|v| (v, format!("{base}/{key}"), i)))
}

fn dm_policy(
    cx: &Context<'_>,
    levels: &[(&PolicySpec, String)],
    reported: &mut HashSet<String>,
    out: &mut Vec<Diagnostic>,
) {
    let Some((policy, policy_at, policy_level)) = level_of(levels, "dmPolicy", |s| s.dm_policy)
    else {
        return;
    };
    let allow = level_of(levels, "allowFrom", |s| s.allow_from.as_ref());
    let list = allow.as_ref().map_or(&[][..], |(l, _, _)| l.as_slice());
    // Where the combination was made: the more specific of the two settings.
    let at = match &allow {
        Some((_, allow_at, level)) if *level < policy_level => allow_at.clone(),
        _ => policy_at,
    };
    let finding = match policy {
        DmPolicy::Allowlist if list.iter().all(|e| e.trim().is_empty()) => Diagnostic::new(
            rules::DM_ALLOWLIST_EMPTY,
            "`dmPolicy: allowlist` with no `allowFrom` entries: nobody can send direct messages",
        )
        .hint("list the allowed sender ids in `allowFrom`, or use `dmPolicy: disabled` to say so"),
        DmPolicy::Open if !list.iter().any(|e| e.trim() == "*") => Diagnostic::new(
            rules::DM_OPEN_WITHOUT_WILDCARD,
            "`dmPolicy: open` lets anyone message this account, but `allowFrom` does not say `\"*\"`",
        )
        .hint("add `allowFrom: [\"*\"]` to confirm that anyone may write, or use `dmPolicy: allowlist`"),
        _ => return,
    };
    if reported.insert(format!("{}{at}", finding.rule.id)) {
        out.push(finding.at(cx.at(FILE, &at)));
    }
}

/// `requireMention: false` and `allowBots: true` where bot-loop protection is off: two such
/// bots in one room answer each other without end.
fn bot_loop(
    cx: &Context<'_>,
    channel: &crate::config::Channel,
    levels: &[(&PolicySpec, String)],
    reported: &mut HashSet<String>,
    out: &mut Vec<Diagnostic>,
) {
    let Some((false, off)) = effective(levels, "botLoopProtection/enabled", |s| {
        s.bot_loop_protection.as_ref().and_then(|b| b.enabled)
    }) else {
        return;
    };
    let base_require = effective(levels, "requireMention", |s| s.require_mention).map(|(v, _)| v);
    let base_bots = effective(levels, "allowBots", |s| s.allow_bots).map(|(v, _)| v);
    // The account's own settings, then each group entry on top of them.
    let mut views = vec![(base_require, base_bots)];
    for group in channel.spec.groups.values() {
        views.push((
            group.require_mention.or(base_require),
            group.allow_bots.or(base_bots),
        ));
    }
    let loops = views
        .iter()
        .any(|(require, bots)| *require == Some(false) && *bots == Some(AllowBots::Bool(true)));
    if loops && reported.insert(format!("bot-loop-risk{off}")) {
        out.push(
            Diagnostic::new(
                rules::BOT_LOOP_RISK,
                "`requireMention: false` and `allowBots: true` with bot-loop protection turned off: two such bots in one room can answer each other without end",
            )
            .hint("remove `botLoopProtection: {enabled: false}`, or set `requireMention: true` or `allowBots: mentions`")
            .at(cx.at(FILE, &off)),
        );
    }
}

fn mention_patterns(
    cx: &Context<'_>,
    kind: FileKind,
    pointer: &str,
    patterns: &[String],
    out: &mut Vec<Diagnostic>,
) {
    let Err(e) = Mentions::compile(patterns) else {
        return;
    };
    let at = match e.index() {
        Some(i) => format!("{pointer}/{i}"),
        None => pointer.to_string(),
    };
    let hint = match e {
        PatternError::TooMany { .. } => "merge patterns with `|`, or drop some",
        PatternError::TooLong { .. } | PatternError::Invalid { .. } => {
            "mention patterns use the `regex` crate's syntax, which has no look-around or back-references; keep them short and simple, e.g. `(?i)@?mybot\\b`"
        }
        PatternError::Empty { .. } => "remove it, or write the text that should count as a mention",
    };
    out.push(
        Diagnostic::new(
            rules::INVALID_MENTION_PATTERN,
            format!("mention pattern refused: {e}"),
        )
        .hint(hint)
        .at(cx.at(kind, &at)),
    );
}

fn access_groups(cx: &Context<'_>, pointer: &str, list: &[String], out: &mut Vec<Diagnostic>) {
    for (i, entry) in list.iter().enumerate() {
        let Some(name) = entry.trim().strip_prefix(ACCESS_GROUP_PREFIX) else {
            continue;
        };
        out.push(
            Diagnostic::new(
                rules::UNKNOWN_ACCESS_GROUP,
                format!("`{}` names access group `{name}`, which is not declared: deepcli has no access groups yet", entry.trim()),
            )
            .hint("list the sender ids themselves")
            .at(cx.at(FILE, &format!("{pointer}/{i}"))),
        );
    }
}
