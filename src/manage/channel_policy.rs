//! `channels set`: one inbound policy key (policy.md) written at one level of channels.yaml —
//! `channels.defaults`, a channel, one of its accounts, or one of its groups — or removed
//! from it, losslessly. The whole config is validated before anything is written, so a value
//! the schema or a rule refuses (`dmPolicy: open` without `allowFrom: ["*"]`) writes nothing.

use serde::{Deserialize, Serialize};

use super::edit::{EditError, Step, Yaml, key, render_flow};
use super::files::Change;
use super::{ManageContext, ManageError, Result, Written, did_you_mean};
use crate::config::model::CHANNEL_DEFAULTS;
use crate::config::{Config, FileKind};
use crate::ids;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetRequest {
    /// The channel, or `defaults` for what every channel inherits.
    pub channel: String,
    /// One account of the channel.
    #[serde(default)]
    pub account: Option<String>,
    /// One group (or `*`) of the channel.
    #[serde(default)]
    pub group: Option<String>,
    /// The key, as channels.yaml spells it (`dmPolicy`).
    pub key: String,
    /// The value: one word for a scalar key, the items of a list key. Empty with `unset`.
    #[serde(default)]
    pub values: Vec<String>,
    /// Remove the key from the level (it inherits again).
    #[serde(default)]
    pub unset: bool,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetResult {
    /// Where the key is: `channels.telegram.accounts.work.dmPolicy`.
    pub path: String,
    /// The value as written in YAML; `None`: the key was removed.
    pub value: Option<String>,
    pub written: Written,
}

/// What a key's value is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    OneOf(&'static [&'static str]),
    Bool,
    Count,
    /// A list of sender or group ids (`"*"`: anyone).
    Ids,
    /// A list of regular expressions.
    Patterns,
}

/// The keys `channels set` writes: the inbound policy's scalars and lists. Whether a group
/// entry takes it is the last field.
const KEYS: &[(&str, Kind, bool)] = &[
    (
        "dmPolicy",
        Kind::OneOf(&["pairing", "allowlist", "open", "disabled"]),
        false,
    ),
    ("allowFrom", Kind::Ids, false),
    (
        "groupPolicy",
        Kind::OneOf(&["allowlist", "open", "disabled"]),
        false,
    ),
    ("groupAllowFrom", Kind::Ids, true),
    ("requireMention", Kind::Bool, true),
    ("requireExplicitMention", Kind::Bool, true),
    ("mentionPatterns", Kind::Patterns, true),
    ("historyLimit", Kind::Count, true),
];

/// Keys of the policy that are mappings: written in the file, not by `channels set`.
const MAPPINGS: &[&str] = &["implicitMentions", "allowBots", "botLoopProtection"];

pub fn set(ctx: &ManageContext, request: &SetRequest) -> Result<SetResult> {
    let Some(&(name, kind, in_groups)) = KEYS.iter().find(|(k, _, _)| *k == request.key) else {
        return Err(unknown_key(&request.key));
    };
    if request.group.is_some() && !in_groups {
        return Err(ManageError::usage(
            format!("a group entry does not take `{name}`"),
            "set it on the channel or an account (drop --group)",
        ));
    }
    let value = match (request.unset, request.values.as_slice()) {
        (true, []) => None,
        (true, _) => {
            return Err(ManageError::usage(
                "--unset takes no value",
                "drop the value, or --unset",
            ));
        }
        (false, values) => Some(value(name, kind, values)?),
    };
    let mut change = Change::read(ctx)?;
    let path = level(&change.current(ctx), request)?;
    let mut steps: Vec<Step> = path.iter().map(|p| key(p)).collect();
    steps.push(key(name));
    let shown = format!("{}.{name}", path.join("."));
    match &value {
        Some(v) => change.edit(FileKind::Channels, |doc| doc.set(&steps, v))?,
        None => change.edit(FileKind::Channels, |doc| match doc.remove(&steps) {
            // Already absent: nothing to remove, nothing written.
            Err(EditError::Missing(_)) => Ok(()),
            other => other,
        })?,
    }
    let written = change.commit(ctx, request.dry_run)?;
    Ok(SetResult {
        path: shown,
        value: value.as_ref().map(render_flow),
        written,
    })
}

fn unknown_key(key: &str) -> ManageError {
    let names = KEYS.iter().map(|(k, _, _)| *k);
    if MAPPINGS.contains(&key) {
        return ManageError::usage(
            format!("`{key}` is a mapping: `channels set` writes one value"),
            "edit it in channels.yaml (docs/config.md shows its keys)",
        );
    }
    let near = did_you_mean(key, names.clone()).map_or_else(String::new, |d| format!(" ({d})"));
    ManageError::usage(
        format!("`{key}` is not an inbound policy key `channels set` writes{near}"),
        format!("the keys are {}", names.collect::<Vec<_>>().join(", ")),
    )
}

/// The YAML of `values` for key `name`.
fn value(name: &str, kind: Kind, values: &[String]) -> Result<Yaml> {
    let one = || match values {
        [one] => Ok(one.trim()),
        _ => Err(ManageError::usage(
            format!("`{name}` takes one value, not {}", values.len()),
            format!("pass one, e.g. `channels set … {name} {}`", example(kind)),
        )),
    };
    match kind {
        Kind::OneOf(words) => {
            let word = one()?;
            if words.contains(&word) {
                Ok(Yaml::str(word))
            } else {
                let near = did_you_mean(word, words.iter().copied())
                    .map_or_else(String::new, |d| format!(" ({d})"));
                Err(ManageError::usage(
                    format!("`{word}` is not a value of `{name}`{near}"),
                    format!("one of {}", words.join(", ")),
                ))
            }
        }
        Kind::Bool => match one()? {
            "true" => Ok(Yaml::Bool(true)),
            "false" => Ok(Yaml::Bool(false)),
            other => Err(ManageError::usage(
                format!("`{other}` is not a value of `{name}`"),
                "true or false",
            )),
        },
        Kind::Count => {
            let word = one()?;
            word.parse::<u32>()
                .map(|n| Yaml::Int(i64::from(n)))
                .map_err(|_| {
                    ManageError::usage(
                        format!("`{word}` is not a value of `{name}`"),
                        "a whole number, 0 or more",
                    )
                })
        }
        Kind::Ids | Kind::Patterns => Ok(Yaml::Seq(
            values.iter().map(|v| Yaml::str(v.trim())).collect(),
        )),
    }
}

fn example(kind: Kind) -> &'static str {
    match kind {
        Kind::OneOf(words) => words.first().copied().unwrap_or_default(),
        Kind::Bool => "true",
        Kind::Count => "20",
        Kind::Ids => "111111111",
        Kind::Patterns => "'@?research'",
    }
}

/// The keys of the level the request names, from `channels` down; refused when the channel or
/// account is not in channels.yaml (a typo would make a new one).
fn level(config: &Config, request: &SetRequest) -> Result<Vec<String>> {
    let wanted = ids::channel(request.channel.trim());
    if wanted == CHANNEL_DEFAULTS {
        if request.account.is_some() || request.group.is_some() {
            return Err(ManageError::usage(
                "`channels.defaults` has no accounts or groups",
                "drop --account and --group, or name a channel",
            ));
        }
        return Ok(vec!["channels".into(), CHANNEL_DEFAULTS.into()]);
    }
    let Some(channel) = config
        .channels
        .iter()
        .find(|c| ids::channel(&c.id) == wanted)
    else {
        let near = did_you_mean(
            &request.channel,
            config.channels.iter().map(|c| c.id.as_str()),
        )
        .map_or_else(String::new, |d| format!(" ({d})"));
        return Err(ManageError::not_found(
            format!("channels.yaml has no channel `{}`{near}", request.channel),
            Some(format!(
                "add an account first (`deepcli channels add --channel {}`), or name `defaults` for every channel",
                request.channel
            )),
        ));
    };
    let mut path = vec!["channels".to_string(), channel.id.clone()];
    match (&request.account, &request.group) {
        (Some(_), Some(_)) => Err(ManageError::usage(
            "--account and --group name two levels",
            "groups are the channel's: pass one of them",
        )),
        (Some(account), None) => {
            let wanted = ids::account_id(account);
            let Some(found) = channel
                .spec
                .accounts
                .keys()
                .find(|a| ids::account_id(a) == wanted)
            else {
                return Err(ManageError::not_found(
                    format!("channel `{}` has no account `{account}`", channel.id),
                    Some("`deepcli channels list` shows its accounts".into()),
                ));
            };
            path.extend(["accounts".to_string(), found.clone()]);
            Ok(path)
        }
        (None, Some(group)) => {
            path.extend(["groups".to_string(), group.trim().to_string()]);
            Ok(path)
        }
        (None, None) => Ok(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed_by_their_key() {
        let v = |name: &str, values: &[&str]| {
            let (_, kind, _) = KEYS.iter().find(|(k, _, _)| *k == name).unwrap();
            let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
            value(name, *kind, &values)
        };
        assert_eq!(v("dmPolicy", &["open"]).unwrap(), Yaml::str("open"));
        assert_eq!(v("requireMention", &["false"]).unwrap(), Yaml::Bool(false));
        assert_eq!(v("historyLimit", &["20"]).unwrap(), Yaml::Int(20));
        assert_eq!(
            v("allowFrom", &["111", "*"]).unwrap(),
            Yaml::Seq(vec![Yaml::str("111"), Yaml::str("*")])
        );
        assert_eq!(v("allowFrom", &[]).unwrap(), Yaml::Seq(vec![]));
        let e = v("dmPolicy", &["opne"]).unwrap_err().to_string();
        assert!(e.contains("(did you mean `open`?)"), "{e}");
        assert!(v("requireMention", &["yes"]).is_err());
        assert!(v("historyLimit", &["-1"]).is_err());
        assert!(v("dmPolicy", &["open", "pairing"]).is_err());
    }

    #[test]
    fn unknown_and_mapping_keys_are_named() {
        let e = unknown_key("dmPolcy").to_string();
        assert!(e.contains("did you mean `dmPolicy`?"), "{e}");
        let e = unknown_key("allowBots").to_string();
        assert!(e.contains("is a mapping"), "{e}");
    }
}
