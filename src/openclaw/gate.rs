//! OpenClaw's inbound gate (who may talk to an agent, and when it answers), read straight off
//! an `openclaw.json`: what the agreement check holds deepcli's gate (`crate::policy`) to on
//! the imported files.
//!
//! Written from OpenClaw's rules, not from deepcli's loader, so that a policy key the import
//! loses shows as a disagreement instead of agreeing with itself: an account's settings are the
//! channel's with the account's own on top (and `channels.defaults` below), an account's own
//! `groups` replace the channel's (OpenClaw's `resolveChannelGroups`), a group entry may switch
//! its group off (`enabled: false`), `groupAllowFrom` falls back to `allowFrom`, and
//! `requireMention` is the group entry's, else `"*"`'s, else the account's, else true.
//!
//! It models the keys every chat channel shares. What OpenClaw decides with a platform's own
//! keys (Discord `guilds`, Slack `channels`, the legacy `dm` block) it does not guess: such a
//! decision is [`Unmodelled`], and the check says which probes it did not compare and why.

use std::collections::HashMap;

use super::json5::Value;
use crate::ids;
use crate::policy::Reason;

/// What OpenClaw does with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Deliver,
    Gated(Reason),
}

/// As the gates say it: `deliver`, or the reason.
impl serde::Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Decision {
    /// `deliver`, or the reason as deepcli's gate names it (the same words: policy.md follows
    /// OpenClaw).
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Deliver => "deliver",
            Decision::Gated(reason) => reason.as_str(),
        }
    }
}

/// A message as the gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The group or channel id; `None`: a direct message.
    pub group: Option<&'a str>,
    pub sender: &'a str,
    /// The message mentions the account's bot natively (an @mention the platform reports).
    pub mentioned: bool,
}

/// A decision OpenClaw takes with keys this model does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmodelled {
    /// Where in `openclaw.json` (`channels.discord.guilds`).
    pub path: String,
}

/// The built-in `dmPolicy` and `groupPolicy`.
const DM_POLICY: &str = "pairing";
const GROUP_POLICY: &str = "allowlist";

/// Keys with which a platform decides its group messages itself.
const PLATFORM_GROUP_KEYS: &[&str] = &["guilds", "channels"];

/// One channel account as OpenClaw resolves it.
pub struct Account<'a> {
    /// The levels, most specific first: the account's entry (when it has one), the channel,
    /// `channels.defaults`; each with its path.
    levels: Vec<(&'a Value, String)>,
    /// How many of them are the account's and the channel's own (not `channels.defaults`,
    /// which holds no `groups` and no platform keys).
    own: usize,
    /// The `groups` in force, by trimmed id (`"*"` included): the account's own replace the
    /// channel's (not merged). The first of two ids that trim alike wins, as a lookup would.
    groups: HashMap<&'a str, &'a Value>,
    /// Their ids in file order, `"*"` left out.
    listed: Vec<&'a str>,
}

/// The accounts OpenClaw runs for `channels.<name>`, as (normalized id, account): every object
/// under `accounts`, or `default` (the channel's own single-account shape) when it has none.
/// A channel or account with `enabled: false` runs no account.
pub fn accounts<'a>(root: &'a Value, name: &str) -> Vec<(String, Account<'a>)> {
    let Some(channel) = root.get("channels").and_then(|c| c.get(name)) else {
        return Vec::new();
    };
    if !matches!(channel, Value::Object(_)) || disabled(channel) {
        return Vec::new();
    }
    let path = format!("channels.{}", super::key_path(name));
    let defaults = root
        .get("channels")
        .and_then(|c| c.get("defaults"))
        .map(|d| (d, "channels.defaults".to_string()));
    let account = |entry: Option<(&'a Value, String)>| {
        let groups = entry
            .iter()
            .map(|(v, _)| *v)
            .chain([channel])
            .find_map(|level| {
                level
                    .get("groups")
                    .filter(|g| matches!(g, Value::Object(_)))
            });
        let mut index = HashMap::new();
        let mut listed = Vec::new();
        for (id, v) in groups.map(Value::entries).unwrap_or_default() {
            let id = id.trim();
            if id.is_empty() || index.contains_key(id) {
                continue;
            }
            index.insert(id, v);
            if id != "*" {
                listed.push(id);
            }
        }
        Account {
            own: 1 + usize::from(entry.is_some()),
            levels: entry
                .into_iter()
                .chain([(channel, path.clone())])
                .chain(defaults.clone())
                .collect(),
            groups: index,
            listed,
        }
    };
    let listed: Vec<(&String, &Value)> = channel
        .get("accounts")
        .map(Value::entries)
        .unwrap_or_default()
        .iter()
        .filter(|(_, v)| matches!(v, Value::Object(_)))
        .map(|(k, v)| (k, v))
        .collect();
    if listed.is_empty() {
        return vec![(ids::DEFAULT_ACCOUNT.to_string(), account(None))];
    }
    let mut out: Vec<(String, Account<'a>)> = Vec::new();
    for (key, entry) in listed {
        let id = ids::account_id(key).into_owned();
        if disabled(entry) || out.iter().any(|(known, _)| *known == id) {
            continue;
        }
        let at = format!("{path}.accounts.{}", super::key_path(key));
        out.push((id, account(Some((entry, at)))));
    }
    out
}

fn disabled(v: &Value) -> bool {
    v.get("enabled").and_then(Value::as_bool) == Some(false)
}

/// A sender list's ids as OpenClaw compares them: trimmed, numbers as JavaScript writes them.
fn ids_of(list: &Value) -> impl Iterator<Item = String> + '_ {
    list.items()
        .iter()
        .filter_map(Value::as_id)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Whether a sender list lets `sender` in (`"*"`: anyone).
fn allows(list: &Value, sender: &str) -> bool {
    ids_of(list).any(|id| id == "*" || id == sender.trim())
}

/// The first id a sender list names (not `"*"`).
pub fn first_id(list: Option<&Value>) -> Option<String> {
    list.and_then(|l| ids_of(l).find(|id| id != "*"))
}

impl<'a> Account<'a> {
    /// The first level that sets `key` (null is unset).
    fn setting(&self, key: &str) -> Option<&'a Value> {
        self.levels
            .iter()
            .find_map(|(level, _)| level.get(key).filter(|v| **v != Value::Null))
    }

    fn text(&self, key: &str, default: &'static str) -> String {
        self.setting(key)
            .and_then(Value::as_str)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| default.to_string())
    }

    /// `allowFrom`, through the levels.
    pub fn allow_from(&self) -> Option<&'a Value> {
        self.setting("allowFrom")
    }

    /// The group ids the `groups` in force list (not `"*"`), in file order.
    pub fn listed_groups(&self) -> Vec<String> {
        self.listed.iter().map(|id| id.to_string()).collect()
    }

    /// The group's entry and the `"*"` entry.
    fn entries(&self, group: &str) -> [Option<&'a Value>; 2] {
        let group = group.trim();
        [
            (group != "*")
                .then(|| self.groups.get(group).copied())
                .flatten(),
            self.groups.get("*").copied(),
        ]
    }

    /// Who may speak in `group`: the entry's `groupAllowFrom` (or its `allowFrom`), then
    /// `"*"`'s, then the account's `groupAllowFrom`, then its `allowFrom`.
    pub fn group_senders(&self, group: &str) -> Option<&'a Value> {
        self.entries(group)
            .into_iter()
            .flatten()
            .find_map(|entry| {
                entry
                    .get("groupAllowFrom")
                    .or_else(|| entry.get("allowFrom"))
                    .filter(|v| **v != Value::Null)
            })
            .or_else(|| self.setting("groupAllowFrom"))
            .or_else(|| self.allow_from())
    }

    /// A key of a platform's own that decides group messages here, if one is set.
    fn platform_groups(&self) -> Option<String> {
        self.levels.iter().take(self.own).find_map(|(level, path)| {
            PLATFORM_GROUP_KEYS
                .iter()
                .find(|k| level.get(k).is_some_and(|v| *v != Value::Null))
                .map(|k| super::import::child(path, k))
        })
    }

    /// The legacy `dm` block (`dm.policy`, `dm.allowFrom`), if one is set.
    fn legacy_dm(&self) -> Option<String> {
        self.levels.iter().take(self.own).find_map(|(level, path)| {
            level
                .get("dm")
                .filter(|v| matches!(v, Value::Object(_)))
                .map(|_| super::import::child(path, "dm"))
        })
    }

    /// OpenClaw's decision on `message`.
    pub fn decide(&self, message: &Inbound<'_>) -> Result<Decision, Unmodelled> {
        let Some(group) = message.group else {
            if let Some(path) = self.legacy_dm() {
                return Err(Unmodelled { path });
            }
            let allowed = self.allow_from().is_some_and(|l| allows(l, message.sender));
            return Ok(match self.text("dmPolicy", DM_POLICY).as_str() {
                "disabled" => Decision::Gated(Reason::DmDisabled),
                _ if allowed => Decision::Deliver,
                "open" | "allowlist" => Decision::Gated(Reason::DmNotAllowed),
                _ => Decision::Gated(Reason::PairingRequired),
            });
        };
        if let Some(path) = self.platform_groups() {
            return Err(Unmodelled { path });
        }
        let policy = self.text("groupPolicy", GROUP_POLICY);
        if policy == "disabled" {
            return Ok(Decision::Gated(Reason::GroupDisabled));
        }
        let [own, star] = self.entries(group);
        if own.or(star).is_some_and(disabled) {
            return Ok(Decision::Gated(Reason::GroupDisabled));
        }
        if policy != "open" && own.is_none() && star.is_none() {
            return Ok(Decision::Gated(Reason::GroupNotAllowed));
        }
        if let Some(senders) = self.group_senders(group)
            && ids_of(senders).next().is_some()
            && !allows(senders, message.sender)
        {
            return Ok(Decision::Gated(Reason::SenderNotAllowed));
        }
        let require = [own, star]
            .into_iter()
            .flatten()
            .find_map(|e| e.get("requireMention").and_then(Value::as_bool))
            .or_else(|| self.setting("requireMention").and_then(Value::as_bool))
            .unwrap_or(true);
        Ok(if require && !message.mentioned {
            Decision::Gated(Reason::NotMentioned)
        } else {
            Decision::Deliver
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::json5;
    use super::*;

    fn decide(text: &str, account: &str, message: Inbound<'_>) -> Result<Decision, Unmodelled> {
        let root = json5::parse(text).unwrap();
        let accounts = accounts(&root, "telegram");
        let (_, a) = accounts.iter().find(|(id, _)| id == account).unwrap();
        a.decide(&message)
    }

    fn group<'a>(id: &'a str, sender: &'a str, mentioned: bool) -> Inbound<'a> {
        Inbound {
            group: Some(id),
            sender,
            mentioned,
        }
    }

    fn dm(sender: &str) -> Inbound<'_> {
        Inbound {
            group: None,
            sender,
            mentioned: false,
        }
    }

    #[test]
    fn direct_messages_follow_dm_policy_and_allow_from() {
        let text = "{channels: {telegram: {allowFrom: [111], accounts: {default: {}, open: {dmPolicy: 'open', allowFrom: ['*']}, off: {dmPolicy: 'disabled'}, list: {dmPolicy: 'allowlist'}}}}}";
        assert_eq!(decide(text, "default", dm("111")), Ok(Decision::Deliver));
        assert_eq!(
            decide(text, "default", dm("222")),
            Ok(Decision::Gated(Reason::PairingRequired))
        );
        assert_eq!(decide(text, "open", dm("222")), Ok(Decision::Deliver));
        assert_eq!(
            decide(text, "off", dm("111")),
            Ok(Decision::Gated(Reason::DmDisabled))
        );
        assert_eq!(
            decide(text, "list", dm("222")),
            Ok(Decision::Gated(Reason::DmNotAllowed))
        );
    }

    #[test]
    fn an_accounts_own_groups_replace_the_channels() {
        let text = "{channels: {telegram: {groups: {'-1': {requireMention: false}}, accounts: {default: {}, work: {groups: {'-2': {}}}}}}}";
        assert_eq!(
            decide(text, "default", group("-1", "x", false)),
            Ok(Decision::Deliver)
        );
        assert_eq!(
            decide(text, "default", group("-2", "x", true)),
            Ok(Decision::Gated(Reason::GroupNotAllowed))
        );
        assert_eq!(
            decide(text, "work", group("-1", "x", true)),
            Ok(Decision::Gated(Reason::GroupNotAllowed))
        );
        assert_eq!(
            decide(text, "work", group("-2", "x", false)),
            Ok(Decision::Gated(Reason::NotMentioned))
        );
        assert_eq!(
            decide(text, "work", group("-2", "x", true)),
            Ok(Decision::Deliver)
        );
    }

    #[test]
    fn group_entries_decide_senders_mentions_and_whether_the_group_is_on() {
        let text = "{channels: {defaults: {groupPolicy: 'open'}, telegram: {allowFrom: [7], groups: {'*': {requireMention: false}, '-1': {allowFrom: [8]}, '-2': {enabled: false}}}}}";
        assert_eq!(
            decide(text, "default", group("-9", "7", false)),
            Ok(Decision::Deliver)
        );
        assert_eq!(
            decide(text, "default", group("-9", "8", false)),
            Ok(Decision::Gated(Reason::SenderNotAllowed))
        );
        assert_eq!(
            decide(text, "default", group("-1", "8", false)),
            Ok(Decision::Deliver)
        );
        assert_eq!(
            decide(text, "default", group("-2", "7", true)),
            Ok(Decision::Gated(Reason::GroupDisabled))
        );
    }

    #[test]
    fn a_platforms_own_group_keys_are_not_guessed() {
        let text = "{channels: {telegram: {guilds: {'1': {}}}}}";
        assert_eq!(
            decide(text, "default", group("-1", "x", true)),
            Err(Unmodelled {
                path: "channels.telegram.guilds".into()
            })
        );
        assert_eq!(
            decide(text, "default", dm("x")),
            Ok(Decision::Gated(Reason::PairingRequired))
        );
    }
}
