//! The gate: policy.md's decision order as one pure function. It reads the resolved settings
//! and what the envelope says; what only the state knows (an approved pairing, whether the bot
//! already answered in a thread) it does not look up: the verdict says which fact would let
//! the message through, and the caller looks it up only then. Both facts can only turn the
//! last step of their kind of conversation into a delivery, so asking afterwards gives the
//! answer asking first would.

use std::sync::Arc;

use super::mention::Mentions;
use super::settings::{PolicyPlan, Rule, View};
use crate::config::model::{AllowBots, DmPolicy, GroupPolicy};

/// Why an envelope was not delivered (`gated.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    SelfLoop,
    Bot,
    BotNotMentioned,
    BotLoop,
    DmDisabled,
    DmNotAllowed,
    PairingRequired,
    GroupDisabled,
    GroupNotAllowed,
    SenderNotAllowed,
    NotMentioned,
}

impl Reason {
    pub const ALL: [Reason; 11] = [
        Reason::SelfLoop,
        Reason::Bot,
        Reason::BotNotMentioned,
        Reason::BotLoop,
        Reason::DmDisabled,
        Reason::DmNotAllowed,
        Reason::PairingRequired,
        Reason::GroupDisabled,
        Reason::GroupNotAllowed,
        Reason::SenderNotAllowed,
        Reason::NotMentioned,
    ];

    /// As the response, the metrics and the logs say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SelfLoop => "self",
            Reason::Bot => "bot",
            Reason::BotNotMentioned => "bot-not-mentioned",
            Reason::BotLoop => "bot-loop",
            Reason::DmDisabled => "dm-disabled",
            Reason::DmNotAllowed => "dm-not-allowed",
            Reason::PairingRequired => "pairing-required",
            Reason::GroupDisabled => "group-disabled",
            Reason::GroupNotAllowed => "group-not-allowed",
            Reason::SenderNotAllowed => "sender-not-allowed",
            Reason::NotMentioned => "not-mentioned",
        }
    }

    /// What an operator can do about it.
    pub fn hint(self) -> &'static str {
        match self {
            Reason::SelfLoop => "the account's own bot sent it (`botUserId`): nothing to do",
            Reason::Bot => {
                "set `allowBots: true` (or `\"mentions\"`) to take messages from other bots"
            }
            Reason::BotNotMentioned => {
                "the bot's message must mention this account's bot (`botUserId`, `mentionPatterns`)"
            }
            Reason::BotLoop => {
                "the two bots answered each other too often: the pair is muted for `botLoopProtection.cooldownSeconds`"
            }
            Reason::DmDisabled => {
                "set `dmPolicy` to `pairing`, `allowlist` or `open` to take direct messages"
            }
            Reason::DmNotAllowed => {
                "add the sender id to `allowFrom`, or approve it with `deepcli pairing approve`"
            }
            Reason::PairingRequired => {
                "the sender got a pairing code: approve it with `deepcli pairing approve <channel> <code>`"
            }
            Reason::GroupDisabled => {
                "set `groupPolicy` to `allowlist` or `open` to take group messages"
            }
            Reason::GroupNotAllowed => {
                "list the group under `channels.<channel>.groups` (or `\"*\"`; Discord: its guild under `guilds`, and the channel under the guild's `channels` when it lists any), or set `groupPolicy: open`"
            }
            Reason::SenderNotAllowed => {
                "add the sender id to `groupAllowFrom` (or `allowFrom`, which it falls back to; Discord: the guild's or channel's `users`, or one of the sender's roles to its `roles`)"
            }
            Reason::NotMentioned => {
                "mention the bot (`botUserId`, `mentionPatterns`), or set `requireMention: false`"
            }
        }
    }
}

/// Direct message or group conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversation {
    /// `peer.kind: direct`, or no peer (a message to the account itself).
    Direct,
    /// `group`, `channel`, or any other kind (a conversation with others in it).
    Group,
}

impl Conversation {
    /// The conversation of a peer kind as an envelope gives it (`None`: no peer).
    pub fn of_peer_kind(kind: Option<&str>) -> Conversation {
        use crate::ids::{PeerClass, PeerKind};
        match kind.map(|k| PeerKind::parse(k).class()) {
            None | Some(Some(PeerClass::Direct)) => Conversation::Direct,
            Some(_) => Conversation::Group,
        }
    }
}

/// What an envelope says that the decision needs.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub conversation: Conversation,
    pub sender_id: Option<&'a str>,
    pub is_bot: bool,
    /// Platform user ids mentioned natively.
    pub mentions: &'a [String],
    pub reply_to_sender_id: Option<&'a str>,
    pub in_thread: bool,
    pub text: &'a str,
    /// Discord: the guild the message was said in, and the sender's roles there.
    pub guild_id: Option<&'a str>,
    pub roles: &'a [String],
}

/// A fact only the state knows that would let a gated message through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unless {
    /// The sender was approved by pairing (`deepcli pairing approve`).
    SenderPaired,
    /// The bot already answered in this thread (`implicitMentions.threadParticipation`).
    ThreadAnswered,
}

/// A gated envelope: why, and the setting that decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub reason: Reason,
    pub rule: Rule,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Deliver,
    Gated { gate: Gate, unless: Option<Unless> },
}

impl Verdict {
    fn gated(reason: Reason, rule: &Rule) -> Verdict {
        Verdict::Gated {
            gate: Gate {
                reason,
                rule: rule.clone(),
            },
            unless: None,
        }
    }

    fn gated_unless(reason: Reason, rule: &Rule, unless: Unless) -> Verdict {
        Verdict::Gated {
            gate: Gate {
                reason,
                rule: rule.clone(),
            },
            unless: Some(unless),
        }
    }
}

/// The patterns that count as mentioning the agent a message routes to.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentPatterns<'a> {
    pub mentions: Option<&'a Arc<Mentions>>,
}

impl PolicyPlan {
    /// The verdict on `message` to channel account (`channel`, `account`: normalized ids) in
    /// the conversation `group` (its parent peer `parent`), routed to `agent_id`: `None` for
    /// an account nothing gates (`cli`, or one this plan does not know).
    #[allow(clippy::too_many_arguments)]
    pub fn verdict(
        &self,
        channel: &str,
        account: &str,
        agent_id: &str,
        group: Option<&str>,
        parent: Option<&str>,
        message: &Message<'_>,
        bot_muted: bool,
    ) -> Option<Verdict> {
        let policy = self.account(channel, account)?;
        let (group, parent) = match message.conversation {
            Conversation::Direct => (None, None),
            Conversation::Group => (group, parent),
        };
        let view = policy.view_in(group, parent, message.guild_id);
        let agent = AgentPatterns {
            mentions: self.agent(agent_id).and_then(|a| a.mentions.as_ref()),
        };
        Some(decide(&view, agent, message, bot_muted))
    }
}

/// policy.md's decision order, first that applies wins. `bot_muted`: the sender is a bot
/// whose pair with this account is in its bot-loop cooldown.
pub fn decide(
    view: &View<'_>,
    agent: AgentPatterns<'_>,
    message: &Message<'_>,
    bot_muted: bool,
) -> Verdict {
    let bot_user_id = view.account.bot_user_id.as_ref();
    // 1. Self-loop.
    if let (Some(bot), Some(sender)) = (bot_user_id, message.sender_id)
        && *bot.value == *sender.trim()
    {
        return Verdict::gated(Reason::SelfLoop, &bot.rule);
    }
    // 2. Other bots.
    if message.is_bot {
        let allow = view.allow_bots();
        match allow.value {
            AllowBots::Bool(false) => return Verdict::gated(Reason::Bot, &allow.rule),
            a if a.only_mentions() && !explicitly_mentioned(view, agent, message) => {
                return Verdict::gated(Reason::BotNotMentioned, &allow.rule);
            }
            _ => {}
        }
        let limits = &view.account.base.bot_loop;
        if limits.value.enabled && bot_muted {
            return Verdict::gated(Reason::BotLoop, &limits.rule);
        }
    }
    match message.conversation {
        // 3. Direct messages.
        Conversation::Direct => {
            let base = &view.account.base;
            let policy = &base.dm_policy;
            let allowed = base.allow_from.value.allows(message.sender_id);
            match policy.value {
                DmPolicy::Disabled => Verdict::gated(Reason::DmDisabled, &policy.rule),
                _ if allowed => Verdict::Deliver,
                // `open` without "*" (validation refuses it) lets in only the listed senders;
                // pairing approvals do not widen it.
                DmPolicy::Open => Verdict::gated(Reason::DmNotAllowed, &base.allow_from.rule),
                DmPolicy::Allowlist => Verdict::gated_unless(
                    Reason::DmNotAllowed,
                    &base.allow_from.rule,
                    Unless::SenderPaired,
                ),
                DmPolicy::Pairing => Verdict::gated_unless(
                    Reason::PairingRequired,
                    &policy.rule,
                    Unless::SenderPaired,
                ),
            }
        }
        // 4. Groups and channels.
        Conversation::Group => {
            let policy = &view.account.base.group_policy;
            match policy.value {
                GroupPolicy::Disabled => {
                    return Verdict::gated(Reason::GroupDisabled, &policy.rule);
                }
                _ if view.switched_off().is_some() => {
                    let rule = view.switched_off().unwrap_or(&policy.rule);
                    return Verdict::gated(Reason::GroupNotAllowed, rule);
                }
                GroupPolicy::Allowlist if !view.listed() => {
                    return Verdict::gated(Reason::GroupNotAllowed, &policy.rule);
                }
                _ => {}
            }
            let senders = view.group_allow_from();
            if !senders.value.is_empty()
                && !senders
                    .value
                    .allows_member(message.sender_id, message.roles)
            {
                return Verdict::gated(Reason::SenderNotAllowed, &senders.rule);
            }
            let require = view.require_mention();
            if !require.value || explicitly_mentioned(view, agent, message) {
                return Verdict::Deliver;
            }
            // Inside a thread `requireExplicitMention` turns the implicit mentions off.
            let implicit = !(message.in_thread && view.require_explicit_mention().value);
            if implicit
                && view.reply_to_bot().value
                && let (Some(bot), Some(to)) = (bot_user_id, message.reply_to_sender_id)
                && *bot.value == *to.trim()
            {
                return Verdict::Deliver;
            }
            if implicit && message.in_thread && view.thread_participation().value {
                return Verdict::gated_unless(
                    Reason::NotMentioned,
                    &require.rule,
                    Unless::ThreadAnswered,
                );
            }
            Verdict::gated(Reason::NotMentioned, &require.rule)
        }
    }
}

/// Mentioned by id (`mentions` holds the account's `botUserId`) or by text (a mention pattern:
/// channels.yaml's for this conversation, else the agent's).
pub fn explicitly_mentioned(
    view: &View<'_>,
    agent: AgentPatterns<'_>,
    message: &Message<'_>,
) -> bool {
    if let Some(bot) = &view.account.bot_user_id
        && message.mentions.iter().any(|m| *m.trim() == *bot.value)
    {
        return true;
    }
    let patterns = view.mention_patterns().map(|p| &p.value).or(agent.mentions);
    patterns.is_some_and(|p| p.matches(message.text))
}
