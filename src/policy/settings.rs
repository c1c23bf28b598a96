//! The settings of the inbound policy resolved through their levels (policy.md, "Where the
//! settings live"), most specific first: group entry (`channels.<ch>.groups.<id>`, then
//! `"*"`), account, channel, `channels.defaults`, the built-in default. Resolved once per
//! config, when a plan is compiled; what stays for a message is picking a group entry and
//! reading fields.
//!
//! Discord adds two levels of its own (`guilds.<guildId>` and its `channels.<channelId>`,
//! adapters.md): a guild channel's entry (or its thread's parent's, else the guild's `"*"`)
//! comes before the conversation's `groups` entry, the guild's entry after it and before
//! `groups."*"`. A guild's `users` and `roles` are its `groupAllowFrom`: a sender on either
//! may speak.
//!
//! Every value carries its [`Rule`]: the setting that decided it, with its `file:line`, or the
//! built-in default it is. That is what a gated envelope's `gated.rule` names.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::mention::Mentions;
use crate::config::model::{
    AllowBots, DmPolicy, GroupPolicy, GroupSpec, GuildChannelSpec, GuildSpec, PolicySpec,
};
use crate::config::{Config, FileKind};
use crate::ids;

/// Where a setting's value came from, as people read it:
/// `channels.telegram.accounts.default.requireMention (channels.yaml:24)`, or
/// `requireMention (built-in default: true)`.
pub type Rule = Arc<str>;

/// A value and the rule that decided it.
#[derive(Debug, Clone)]
pub struct Sourced<T> {
    pub value: T,
    pub rule: Rule,
}

/// The prefix of an allowlist entry that names an access group (none can be declared yet:
/// validation refuses every such entry, and here it allows nobody).
pub const ACCESS_GROUP_PREFIX: &str = "accessGroup:";

/// A list of sender ids: `allowFrom`, `groupAllowFrom`. `"*"` allows anyone. A Discord guild's
/// `users` and `roles` are one such list: a member of one of its roles is on it too.
#[derive(Debug, Default)]
pub struct Senders {
    any: bool,
    ids: HashSet<Box<str>>,
    roles: HashSet<Box<str>>,
}

impl Senders {
    pub fn of(list: &[String]) -> Senders {
        let mut senders = Senders::default();
        for entry in list {
            let entry = entry.trim();
            if entry == "*" {
                senders.any = true;
            } else if !entry.is_empty() && !entry.starts_with(ACCESS_GROUP_PREFIX) {
                senders.ids.insert(entry.into());
            }
        }
        senders
    }

    /// A Discord guild's (or guild channel's) `users` and `roles`.
    pub fn of_members(users: &[String], roles: &[String]) -> Senders {
        let mut senders = Senders::of(users);
        senders.roles = roles
            .iter()
            .map(|r| r.trim())
            .filter(|r| !r.is_empty())
            .map(Into::into)
            .collect();
        senders
    }

    /// Whether `sender` is on the list (`"*"`: anyone, even a sender without an id).
    pub fn allows(&self, sender: Option<&str>) -> bool {
        self.any || sender.is_some_and(|id| self.ids.contains(id.trim()))
    }

    /// Whether `sender`, a member with `roles`, is on the list: by id, or by one of its roles.
    pub fn allows_member(&self, sender: Option<&str>, roles: &[String]) -> bool {
        self.allows(sender) || roles.iter().any(|r| self.roles.contains(r.trim()))
    }

    /// No entry at all: for `groupAllowFrom`, anyone in an allowed group may speak.
    pub fn is_empty(&self) -> bool {
        !self.any && self.ids.is_empty() && self.roles.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ids.len() + self.roles.len() + usize::from(self.any)
    }
}

/// `botLoopProtection`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BotLoopLimits {
    pub enabled: bool,
    pub max_events: u32,
    pub window: Duration,
    pub cooldown: Duration,
}

/// The built-in `botLoopProtection`: `{true, 20, 60, 60}`.
pub const BOT_LOOP_DEFAULT: BotLoopLimits = BotLoopLimits {
    enabled: true,
    max_events: 20,
    window: Duration::from_secs(60),
    cooldown: Duration::from_secs(60),
};

/// The built-in `historyLimit`.
pub const HISTORY_LIMIT_DEFAULT: u32 = 50;

/// An account's settings, resolved through account > channel > defaults > built-in.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub dm_policy: Sourced<DmPolicy>,
    pub allow_from: Sourced<Arc<Senders>>,
    pub group_policy: Sourced<GroupPolicy>,
    /// `None` when no level sets it: `allowFrom` stands in.
    pub group_allow_from: Option<Sourced<Arc<Senders>>>,
    pub require_mention: Sourced<bool>,
    /// `None` when no level sets them: the agent's patterns count.
    pub mention_patterns: Option<Sourced<Arc<Mentions>>>,
    pub reply_to_bot: Sourced<bool>,
    pub thread_participation: Sourced<bool>,
    pub require_explicit_mention: Sourced<bool>,
    pub allow_bots: Sourced<AllowBots>,
    pub history_limit: Sourced<u32>,
    pub bot_loop: Sourced<BotLoopLimits>,
}

/// What a group entry overrides (`None`: the account's value).
#[derive(Debug, Default)]
pub struct GroupOverrides {
    pub require_mention: Option<Sourced<bool>>,
    pub group_allow_from: Option<Sourced<Arc<Senders>>>,
    pub mention_patterns: Option<Sourced<Arc<Mentions>>>,
    pub reply_to_bot: Option<Sourced<bool>>,
    pub thread_participation: Option<Sourced<bool>>,
    pub require_explicit_mention: Option<Sourced<bool>>,
    pub allow_bots: Option<Sourced<AllowBots>>,
    pub history_limit: Option<Sourced<u32>>,
}

/// A channel's `groups`: by group id as written, and `"*"`.
#[derive(Debug, Default)]
pub struct ChannelGroups {
    by_id: HashMap<Box<str>, GroupOverrides>,
    star: Option<GroupOverrides>,
    /// Where the channel's `groups` are (or would be) declared, for messages.
    pub path: Rule,
}

/// A Discord guild channel's entry (`guilds.<g>.channels.<c>`).
#[derive(Debug, Default)]
pub struct GuildChannel {
    /// `enabled: false`: the channel is not served.
    pub enabled: Option<Sourced<bool>>,
    pub settings: GroupOverrides,
}

/// A Discord guild's entry (`guilds.<g>`): its settings, and its channels when it lists any.
#[derive(Debug, Default)]
pub struct Guild {
    pub settings: GroupOverrides,
    /// By channel id as written.
    channels: HashMap<Box<str>, GuildChannel>,
    /// The `"*"` channel entry.
    star_channel: Option<GuildChannel>,
}

impl Guild {
    /// Whether the guild lists channels: then one not listed is not served under allowlist.
    pub fn lists_channels(&self) -> bool {
        !self.channels.is_empty() || self.star_channel.is_some()
    }

    /// The entry of channel `id`, else of `parent` (a thread's channel), else `"*"`'s.
    pub fn channel(&self, id: Option<&str>, parent: Option<&str>) -> Option<&GuildChannel> {
        let find = |id: Option<&str>| id.and_then(|id| self.channels.get(id.trim()));
        find(id)
            .or_else(|| find(parent))
            .or(self.star_channel.as_ref())
    }
}

/// An account's Discord `guilds` (its own, else its channel's): by guild id, and `"*"`.
#[derive(Debug, Default)]
pub struct Guilds {
    by_id: HashMap<Box<str>, Guild>,
    star: Option<Guild>,
}

impl Guilds {
    /// The entry of guild `id`, else `"*"`'s.
    pub fn get(&self, id: &str) -> Option<&Guild> {
        self.by_id.get(id.trim()).or(self.star.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty() && self.star.is_none()
    }
}

/// One channel account's policy.
#[derive(Debug)]
pub struct AccountPolicy {
    pub base: Resolved,
    pub bot_user_id: Option<Sourced<Box<str>>>,
    pub groups: Arc<ChannelGroups>,
    /// Discord: the guilds' entries.
    pub guilds: Arc<Guilds>,
}

/// The patterns that count as mentioning an agent, when channels.yaml sets none.
#[derive(Debug, Clone)]
pub struct AgentMentions {
    pub mentions: Option<Arc<Mentions>>,
    pub rule: Rule,
}

/// Every channel account's policy and every agent's mention patterns: what the Access layer
/// gates with, and `deepcli route --explain` explains with.
#[derive(Debug, Default)]
pub struct PolicyPlan {
    /// By normalized channel, then account: looked up by `&str`, nothing allocated.
    accounts: HashMap<String, HashMap<String, AccountPolicy>>,
    agents: HashMap<String, AgentMentions>,
}

/// The settings that apply to one conversation: the account's, with the group entry's on top
/// (and a Discord guild's and guild channel's).
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub account: &'a AccountPolicy,
    /// The conversation's own entry (its peer's, else its parent peer's).
    pub group: Option<&'a GroupOverrides>,
    /// The `"*"` entry.
    pub star: Option<&'a GroupOverrides>,
    /// Discord: the guild's entry (its own, else `"*"`'s).
    pub guild: Option<&'a Guild>,
    /// Discord: the channel's entry in its guild (its own, its thread's parent's, else `"*"`'s).
    pub guild_channel: Option<&'a GuildChannel>,
}

impl<'a> View<'a> {
    /// The entries over the account's, most specific first.
    fn layers(&self) -> [Option<&'a GroupOverrides>; 4] {
        [
            self.guild_channel.map(|c| &c.settings),
            self.group,
            self.guild.map(|g| &g.settings),
            self.star,
        ]
    }
}

macro_rules! layered {
    ($($name:ident: $ty:ty),* $(,)?) => {
        impl View<'_> {
            $(
                pub fn $name(&self) -> &Sourced<$ty> {
                    self.layers()
                        .into_iter()
                        .flatten()
                        .find_map(|g| g.$name.as_ref())
                        .unwrap_or(&self.account.base.$name)
                }
            )*
        }
    };
}

layered! {
    require_mention: bool,
    reply_to_bot: bool,
    thread_participation: bool,
    require_explicit_mention: bool,
    allow_bots: AllowBots,
    history_limit: u32,
}

impl View<'_> {
    /// Whether the conversation is listed: a `groups` entry, its own or `"*"`, or (Discord) a
    /// guild entry, and the guild's entry of the channel when the guild lists channels.
    pub fn listed(&self) -> bool {
        let in_guild = self
            .guild
            .is_some_and(|g| !g.lists_channels() || self.guild_channel.is_some());
        self.group.is_some() || self.star.is_some() || in_guild
    }

    /// Discord: the guild channel's `enabled: false`, when it switches the channel off.
    pub fn switched_off(&self) -> Option<&Rule> {
        self.guild_channel
            .and_then(|c| c.enabled.as_ref())
            .filter(|e| !e.value)
            .map(|e| &e.rule)
    }

    /// `groupAllowFrom` (a Discord guild's `users` and `roles`), falling back to `allowFrom`.
    pub fn group_allow_from(&self) -> &Sourced<Arc<Senders>> {
        self.layers()
            .into_iter()
            .flatten()
            .find_map(|g| g.group_allow_from.as_ref())
            .or(self.account.base.group_allow_from.as_ref())
            .unwrap_or(&self.account.base.allow_from)
    }

    /// The mention patterns channels.yaml sets for this conversation, if any level does.
    pub fn mention_patterns(&self) -> Option<&Sourced<Arc<Mentions>>> {
        self.layers()
            .into_iter()
            .flatten()
            .find_map(|g| g.mention_patterns.as_ref())
            .or(self.account.base.mention_patterns.as_ref())
    }
}

impl AccountPolicy {
    /// This policy with `bot_user_id` as the bot's id (a platform adapter learnt it), `why`
    /// naming where it came from in gate answers.
    pub fn with_bot_user_id(&self, bot_user_id: &str, why: &str) -> AccountPolicy {
        AccountPolicy {
            base: self.base.clone(),
            bot_user_id: Some(Sourced {
                value: bot_user_id.into(),
                rule: why.into(),
            }),
            groups: self.groups.clone(),
            guilds: self.guilds.clone(),
        }
    }

    /// The settings for a conversation in group `group_id` (or its parent, a thread's group).
    pub fn view(&self, group_id: Option<&str>, parent_id: Option<&str>) -> View<'_> {
        self.view_in(group_id, parent_id, None)
    }

    /// [`AccountPolicy::view`] for a conversation in Discord guild `guild_id`.
    pub fn view_in(
        &self,
        group_id: Option<&str>,
        parent_id: Option<&str>,
        guild_id: Option<&str>,
    ) -> View<'_> {
        let groups = &*self.groups;
        let find = |id: Option<&str>| id.and_then(|id| groups.by_id.get(id.trim()));
        let guild = guild_id.and_then(|g| self.guilds.get(g));
        View {
            account: self,
            group: find(group_id).or_else(|| find(parent_id)),
            star: groups.star.as_ref(),
            guild,
            guild_channel: guild.and_then(|g| g.channel(group_id, parent_id)),
        }
    }
}

impl PolicyPlan {
    /// The policy of a channel account (normalized ids); `None` for accounts the config does
    /// not declare.
    pub fn account(&self, channel: &str, account: &str) -> Option<&AccountPolicy> {
        self.accounts.get(channel)?.get(account)
    }

    /// The patterns that count as mentioning `agent_id` when channels.yaml sets none.
    pub fn agent(&self, agent_id: &str) -> Option<&AgentMentions> {
        self.agents.get(agent_id)
    }

    /// The policy of every declared account of `config`. Pure; a mention pattern that does not
    /// compile (validation refuses it first) matches nothing.
    pub fn compile(config: &Config) -> PolicyPlan {
        let cx = Cx { config };
        let defaults = Level {
            spec: &config.channel_defaults,
            pointer: format!("/channels/{}", crate::config::model::CHANNEL_DEFAULTS),
        };
        let mut accounts: HashMap<String, HashMap<String, AccountPolicy>> = HashMap::new();
        for channel in &config.channels {
            let channel_id = ids::channel(&channel.id).into_owned();
            if channel_id == A2A {
                // The A2A server is one account, compiled below from the channel level.
                continue;
            }
            let builtin = Builtin::of(&channel_id);
            let channel_level = Level {
                spec: &channel.spec.policy,
                pointer: channel.pointer(),
            };
            let groups = Arc::new(cx.groups(channel));
            let channel_guilds = Arc::new(cx.guilds(&channel.spec.guilds, &channel.pointer()));
            for account in channel.accounts() {
                let pointer = account.pointer();
                let mut levels = vec![
                    Level {
                        spec: &account.spec.policy,
                        pointer: pointer.clone(),
                    },
                    channel_level.clone(),
                ];
                // The `cli` channel is the operator's own: only what it sets itself applies.
                if builtin.inherits_defaults {
                    levels.push(defaults.clone());
                }
                let bot_user_id = account
                    .spec
                    .bot_user_id
                    .as_deref()
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(|id| Sourced {
                        value: id.into(),
                        rule: cx.rule(&format!("{pointer}/botUserId")),
                    });
                // An account's own `guilds` replace the channel's.
                let guilds = if account.spec.guilds.is_empty() {
                    channel_guilds.clone()
                } else {
                    Arc::new(cx.guilds(&account.spec.guilds, &pointer))
                };
                accounts.entry(channel_id.clone()).or_default().insert(
                    account.normalized.clone(),
                    AccountPolicy {
                        base: cx.resolve(&levels, &builtin),
                        bot_user_id,
                        groups: groups.clone(),
                        guilds,
                    },
                );
            }
        }
        // A2A peers are senders on channel `a2a`, account `default`, when the hub serves A2A:
        // `channels.a2a` is their only level (a peer's token is its admission otherwise).
        if config.a2a.is_some() {
            let channel = config.channels.iter().find(|c| ids::channel(&c.id) == A2A);
            let levels: Vec<Level<'_>> = channel
                .map(|c| Level {
                    spec: &c.spec.policy,
                    pointer: c.pointer(),
                })
                .into_iter()
                .collect();
            accounts.entry(A2A.to_string()).or_default().insert(
                ids::DEFAULT_ACCOUNT.to_string(),
                AccountPolicy {
                    base: cx.resolve(&levels, &Builtin::of(A2A)),
                    bot_user_id: None,
                    groups: Arc::new(ChannelGroups::default()),
                    guilds: Arc::new(Guilds::default()),
                },
            );
        }
        let agents = config
            .agents
            .iter()
            .map(|agent| (agent.id().to_string(), cx.agent_mentions(agent)))
            .collect();
        PolicyPlan { accounts, agents }
    }
}

/// One level of settings and where it sits in channels.yaml.
#[derive(Clone)]
struct Level<'a> {
    spec: &'a PolicySpec,
    pointer: String,
}

/// The channel of A2A peers (a2a.md).
const A2A: &str = crate::ids::A2A_CHANNEL;

/// The built-in defaults, which differ only on channels whose senders authenticate themselves.
struct Builtin {
    dm_policy: DmPolicy,
    allow_from: &'static [&'static str],
    group_policy: GroupPolicy,
    require_mention: bool,
    inherits_defaults: bool,
}

impl Builtin {
    /// Chat platforms and the generic envelope API.
    const CHAT: Builtin = Builtin {
        dm_policy: DmPolicy::Pairing,
        allow_from: &[],
        group_policy: GroupPolicy::Allowlist,
        require_mention: true,
        inherits_defaults: true,
    };

    fn of(channel: &str) -> Builtin {
        match channel {
            // A peer's token is its admission; `channels.defaults` is for chat platforms.
            A2A => Builtin {
                dm_policy: DmPolicy::Open,
                allow_from: &["*"],
                inherits_defaults: false,
                ..Builtin::CHAT
            },
            // The operator: nothing is gated unless the `cli` channel says so itself.
            crate::ids::CLI_CHANNEL => Builtin {
                dm_policy: DmPolicy::Open,
                allow_from: &["*"],
                group_policy: GroupPolicy::Open,
                require_mention: false,
                inherits_defaults: false,
            },
            _ => Builtin::CHAT,
        }
    }
}

struct Cx<'a> {
    config: &'a Config,
}

impl Cx<'_> {
    /// The rule of the node at `pointer` in channels.yaml.
    fn rule(&self, pointer: &str) -> Rule {
        self.rule_in(FileKind::Channels, pointer)
    }

    fn rule_in(&self, kind: FileKind, pointer: &str) -> Rule {
        let path = dotted(pointer);
        match self.config.sources.locate(kind, pointer) {
            Some(at) => format!(
                "{path} ({}:{})",
                at.file
                    .file_name()
                    .map_or_else(|| kind.file_name().into(), |n| n.to_string_lossy()),
                at.span.start.line
            )
            .into(),
            None => path.into(),
        }
    }

    fn builtin(key: &str, value: &str) -> Rule {
        format!("{key} (built-in default: {value})").into()
    }

    /// The first level that sets a key, with its rule.
    fn first<T>(
        &self,
        levels: &[Level<'_>],
        key: &str,
        get: impl Fn(&PolicySpec) -> Option<T>,
    ) -> Option<Sourced<T>> {
        levels.iter().find_map(|level| {
            get(level.spec).map(|value| Sourced {
                value,
                rule: self.rule(&format!("{}/{key}", level.pointer)),
            })
        })
    }

    fn resolve(&self, levels: &[Level<'_>], builtin: &Builtin) -> Resolved {
        let senders = |list: &Vec<String>| Arc::new(Senders::of(list));
        let dm_policy = or(
            self.first(levels, "dmPolicy", |s| s.dm_policy),
            "dmPolicy",
            builtin.dm_policy,
            builtin.dm_policy.as_str(),
        );
        let allow_from = self
            .first(levels, "allowFrom", |s| s.allow_from.as_ref().map(senders))
            .unwrap_or_else(|| {
                let list: Vec<String> = builtin.allow_from.iter().map(|s| s.to_string()).collect();
                Sourced {
                    value: senders(&list),
                    rule: Cx::builtin("allowFrom", &format!("{list:?}")),
                }
            });
        let implicit =
            |key: &'static str,
             get: fn(&crate::config::model::ImplicitMentions) -> Option<bool>| {
                self.first(levels, &format!("implicitMentions/{key}"), |s| {
                    s.implicit_mentions.as_ref().and_then(get)
                })
                .unwrap_or_else(|| Sourced {
                    value: true,
                    rule: Cx::builtin(&format!("implicitMentions.{key}"), "true"),
                })
            };
        Resolved {
            dm_policy,
            allow_from,
            group_policy: or(
                self.first(levels, "groupPolicy", |s| s.group_policy),
                "groupPolicy",
                builtin.group_policy,
                builtin.group_policy.as_str(),
            ),
            group_allow_from: self.first(levels, "groupAllowFrom", |s| {
                s.group_allow_from.as_ref().map(senders)
            }),
            require_mention: or(
                self.first(levels, "requireMention", |s| s.require_mention),
                "requireMention",
                builtin.require_mention,
                if builtin.require_mention {
                    "true"
                } else {
                    "false"
                },
            ),
            mention_patterns: self.first(levels, "mentionPatterns", |s| {
                s.mention_patterns.as_deref().map(patterns)
            }),
            reply_to_bot: implicit("replyToBot", |i| i.reply_to_bot),
            thread_participation: implicit("threadParticipation", |i| i.thread_participation),
            require_explicit_mention: or(
                self.first(levels, "requireExplicitMention", |s| {
                    s.require_explicit_mention
                }),
                "requireExplicitMention",
                false,
                "false",
            ),
            allow_bots: or(
                self.first(levels, "allowBots", |s| s.allow_bots),
                "allowBots",
                AllowBots::Bool(false),
                "false",
            ),
            history_limit: or(
                self.first(levels, "historyLimit", |s| s.history_limit),
                "historyLimit",
                HISTORY_LIMIT_DEFAULT,
                "50",
            ),
            bot_loop: self.bot_loop(levels),
        }
    }

    /// `botLoopProtection`, field by field through the levels. Its rule is the setting that
    /// decides when it trips: `maxEventsPerWindow`, or `enabled` when that is what turned it
    /// off.
    fn bot_loop(&self, levels: &[Level<'_>]) -> Sourced<BotLoopLimits> {
        let field =
            |key: &str, get: fn(&crate::config::model::BotLoopProtection) -> Option<u32>| {
                self.first(levels, &format!("botLoopProtection/{key}"), |s| {
                    s.bot_loop_protection.as_ref().and_then(get)
                })
            };
        let enabled = self.first(levels, "botLoopProtection/enabled", |s| {
            s.bot_loop_protection.as_ref().and_then(|b| b.enabled)
        });
        let max = field("maxEventsPerWindow", |b| b.max_events_per_window);
        let seconds = |found: Option<Sourced<u32>>, default: Duration| {
            found.map_or(default, |s| Duration::from_secs(u64::from(s.value.max(1))))
        };
        let limits = BotLoopLimits {
            enabled: enabled.as_ref().is_none_or(|e| e.value),
            max_events: max
                .as_ref()
                .map_or(BOT_LOOP_DEFAULT.max_events, |m| m.value),
            window: seconds(
                field("windowSeconds", |b| b.window_seconds),
                BOT_LOOP_DEFAULT.window,
            ),
            cooldown: seconds(
                field("cooldownSeconds", |b| b.cooldown_seconds),
                BOT_LOOP_DEFAULT.cooldown,
            ),
        };
        let rule = match (&enabled, &max) {
            (Some(e), _) if !e.value => e.rule.clone(),
            (_, Some(m)) => m.rule.clone(),
            _ => Cx::builtin(
                "botLoopProtection",
                "{enabled: true, maxEventsPerWindow: 20, windowSeconds: 60, cooldownSeconds: 60}",
            ),
        };
        Sourced {
            value: limits,
            rule,
        }
    }

    fn groups(&self, channel: &crate::config::Channel) -> ChannelGroups {
        let base = format!("{}/groups", channel.pointer());
        let mut out = ChannelGroups {
            path: dotted(&base).into(),
            ..ChannelGroups::default()
        };
        for (id, spec) in &channel.spec.groups {
            let pointer = format!("{base}/{}", crate::config::yaml::escape_pointer_token(id));
            let overrides = self.group(spec, &pointer);
            if id.trim() == "*" {
                out.star = Some(overrides);
            } else {
                out.by_id.insert(id.trim().into(), overrides);
            }
        }
        out
    }

    fn group(&self, spec: &GroupSpec, pointer: &str) -> GroupOverrides {
        let at = |key: &str| self.rule(&format!("{pointer}/{key}"));
        let implicit = |get: fn(&crate::config::model::ImplicitMentions) -> Option<bool>,
                        key: &str| {
            spec.implicit_mentions
                .as_ref()
                .and_then(get)
                .map(|value| Sourced {
                    value,
                    rule: at(&format!("implicitMentions/{key}")),
                })
        };
        GroupOverrides {
            require_mention: spec.require_mention.map(|value| Sourced {
                value,
                rule: at("requireMention"),
            }),
            group_allow_from: spec.group_allow_from.as_ref().map(|l| Sourced {
                value: Arc::new(Senders::of(l)),
                rule: at("groupAllowFrom"),
            }),
            mention_patterns: spec.mention_patterns.as_deref().map(|p| Sourced {
                value: patterns(p),
                rule: at("mentionPatterns"),
            }),
            reply_to_bot: implicit(|i| i.reply_to_bot, "replyToBot"),
            thread_participation: implicit(|i| i.thread_participation, "threadParticipation"),
            require_explicit_mention: spec.require_explicit_mention.map(|value| Sourced {
                value,
                rule: at("requireExplicitMention"),
            }),
            allow_bots: spec.allow_bots.map(|value| Sourced {
                value,
                rule: at("allowBots"),
            }),
            history_limit: spec.history_limit.map(|value| Sourced {
                value,
                rule: at("historyLimit"),
            }),
        }
    }

    /// Discord `guilds` written at `base` (a channel's or an account's pointer).
    fn guilds(&self, specs: &indexmap::IndexMap<String, GuildSpec>, base: &str) -> Guilds {
        let mut out = Guilds::default();
        for (id, spec) in specs {
            let pointer = format!(
                "{base}/guilds/{}",
                crate::config::yaml::escape_pointer_token(id)
            );
            let mut guild = Guild {
                settings: self.member_settings(
                    &pointer,
                    spec.require_mention,
                    spec.allow_bots,
                    spec.users.as_deref(),
                    spec.roles.as_deref(),
                ),
                ..Guild::default()
            };
            for (channel_id, c) in &spec.channels {
                let at = format!(
                    "{pointer}/channels/{}",
                    crate::config::yaml::escape_pointer_token(channel_id)
                );
                let entry = self.guild_channel(c, &at);
                if channel_id.trim() == "*" {
                    guild.star_channel = Some(entry);
                } else {
                    guild.channels.insert(channel_id.trim().into(), entry);
                }
            }
            if id.trim() == "*" {
                out.star = Some(guild);
            } else {
                out.by_id.insert(id.trim().into(), guild);
            }
        }
        out
    }

    fn guild_channel(&self, spec: &GuildChannelSpec, pointer: &str) -> GuildChannel {
        GuildChannel {
            enabled: spec.enabled.map(|value| Sourced {
                value,
                rule: self.rule(&format!("{pointer}/enabled")),
            }),
            settings: self.member_settings(
                pointer,
                spec.require_mention,
                spec.allow_bots,
                spec.users.as_deref(),
                spec.roles.as_deref(),
            ),
        }
    }

    /// A guild's or guild channel's settings: `users` and `roles` as its `groupAllowFrom`.
    fn member_settings(
        &self,
        pointer: &str,
        require_mention: Option<bool>,
        allow_bots: Option<AllowBots>,
        users: Option<&[String]>,
        roles: Option<&[String]>,
    ) -> GroupOverrides {
        let at = |key: &str| self.rule(&format!("{pointer}/{key}"));
        let senders = (users.is_some() || roles.is_some()).then(|| Sourced {
            value: Arc::new(Senders::of_members(
                users.unwrap_or_default(),
                roles.unwrap_or_default(),
            )),
            rule: at(if users.is_some() { "users" } else { "roles" }),
        });
        GroupOverrides {
            require_mention: require_mention.map(|value| Sourced {
                value,
                rule: at("requireMention"),
            }),
            group_allow_from: senders,
            allow_bots: allow_bots.map(|value| Sourced {
                value,
                rule: at("allowBots"),
            }),
            ..GroupOverrides::default()
        }
    }

    /// An agent's `groupChat.mentionPatterns` (its own or `agents.defaults`'), else the
    /// pattern derived from its identity name.
    fn agent_mentions(&self, agent: &crate::config::Agent) -> AgentMentions {
        let own = agent
            .spec
            .group_chat
            .as_ref()
            .map(|g| &g.mention_patterns)
            .filter(|p| !p.is_empty());
        if let Some(list) = own {
            let pointer = [
                format!("{}/groupChat/mentionPatterns", agent.pointer()),
                "/agents/defaults/groupChat/mentionPatterns".to_string(),
            ]
            .into_iter()
            .find(|p| self.config.sources.locate(FileKind::Agents, p).is_some())
            .unwrap_or_default();
            return AgentMentions {
                mentions: Some(patterns(list)),
                rule: self.rule_in(FileKind::Agents, &pointer),
            };
        }
        let name = agent.spec.identity.as_ref().and_then(|i| i.name.as_deref());
        match name.and_then(Mentions::derived) {
            Some(mentions) => AgentMentions {
                mentions: Some(Arc::new(mentions)),
                rule: format!(
                    "mention pattern derived from agent `{}`'s identity name `{}`",
                    agent.id(),
                    name.unwrap_or_default().trim()
                )
                .into(),
            },
            None => AgentMentions {
                mentions: None,
                rule: format!(
                    "agent `{}` has no groupChat.mentionPatterns and no identity name",
                    agent.id()
                )
                .into(),
            },
        }
    }
}

/// `found`, else the built-in `value` (shown as `shown`).
fn or<T>(found: Option<Sourced<T>>, key: &str, value: T, shown: &str) -> Sourced<T> {
    found.unwrap_or_else(|| Sourced {
        value,
        rule: Cx::builtin(key, shown),
    })
}

/// Compiled patterns; patterns that do not compile (validation refuses them) match nothing.
fn patterns(list: &[String]) -> Arc<Mentions> {
    Arc::new(Mentions::compile(list).unwrap_or_else(|_| Mentions::nothing()))
}

/// `/channels/telegram/accounts/default/dmPolicy` → `channels.telegram.accounts.default.dmPolicy`.
fn dotted(pointer: &str) -> String {
    crate::config::yaml::pointer_tokens(pointer)
        .collect::<Vec<_>>()
        .join(".")
}
