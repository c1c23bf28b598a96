//! The agreement check, in two parts.
//!
//! * Routes: every binding's match of the original `openclaw.json`, and each channel's direct
//!   message on its default account, routed by OpenClaw's rules ([`super::route::Router`]) on
//!   the original and by deepcli's router on the imported files. Equal agent ids and session
//!   keys (ACP bindings: equal agents) or it is a disagreement naming the binding.
//! * The inbound policy: direct and group messages on every account, from senders the lists
//!   name and from strangers, with and without a mention, decided by OpenClaw's gate
//!   ([`super::gate`]) on the original and by deepcli's (`crate::policy`) on the imported files.
//!   Equal decisions (deliver, or the same refusal) or it is a disagreement naming the message.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::gate;
use super::json5::Value;
use super::route::{self, Refusal, Router};
use crate::config::Config;
use crate::ids::{self, PeerKind};
use crate::policy::{AgentPatterns, Conversation, Message, PolicyPlan, Verdict, decide};
use crate::routing::{Peer, RouteInput, RoutingPlan};

/// The peer id probes use where a binding names none (or a wildcard).
pub const PROBE_ID: &str = "openclaw-import-probe";

/// One input the check routes, and what it stands for.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `bindings[3]` or `a telegram direct message (default account)`.
    pub label: String,
    pub input: RouteInput,
    /// An ACP binding's conversation: only the agent is compared.
    pub acp: bool,
}

/// The inputs for one `openclaw.json`: each binding's match, then a direct message on each
/// channel's default account (where no binding matches, the default agent's).
pub fn probes(root: &Value) -> Vec<Probe> {
    let mut out = Vec::new();
    let mut channels: Vec<String> = Vec::new();
    for (i, b) in root
        .get("bindings")
        .map(Value::items)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let Some(m) = b.get("match") else { continue };
        let Some(channel) = m
            .get("channel")
            .and_then(Value::as_str)
            .map(|c| c.trim().to_lowercase())
            .filter(|c| !c.is_empty())
        else {
            continue;
        };
        let peer = match m.get("peer") {
            None | Some(Value::Null) => None,
            Some(p) => {
                let Some(kind) = p
                    .get("kind")
                    .and_then(Value::as_str)
                    .and_then(route::chat_type)
                else {
                    continue;
                };
                let Some(id) = p
                    .get("id")
                    .and_then(Value::as_id)
                    .map(|s| s.trim().to_string())
                else {
                    continue;
                };
                if id.is_empty() {
                    continue;
                }
                Some(Peer {
                    kind: kind.as_str().to_string(),
                    id: if id == "*" { PROBE_ID.to_string() } else { id },
                })
            }
        };
        let account = m.get("accountId").and_then(Value::as_str).map(str::trim);
        let id = |k: &str| {
            m.get(k)
                .and_then(Value::as_id)
                .filter(|s| !s.trim().is_empty())
        };
        let acp = route::is_acp(b);
        if acp && peer.as_ref().is_none_or(|p| p.id == PROBE_ID) {
            continue;
        }
        if !channels.contains(&channel) {
            channels.push(channel.clone());
        }
        let base = Probe {
            label: format!("bindings[{i}]"),
            input: RouteInput {
                channel,
                account_id: match account {
                    Some("*") => Some(PROBE_ID.to_string()),
                    Some("") | None => None,
                    Some(a) => Some(a.to_string()),
                },
                peer,
                guild_id: id("guildId"),
                team_id: id("teamId"),
                member_role_ids: m
                    .get("roles")
                    .map(|r| r.items().iter().filter_map(Value::as_id).collect())
                    .unwrap_or_default(),
                ..RouteInput::default()
            },
            acp,
        };
        // A binding without a peer also claims the direct and group messages of its scope:
        // route one of each, so session scopes are compared too.
        if base.input.peer.is_none() && !acp {
            for (kind, what) in [("direct", "direct message"), ("group", "group message")] {
                let mut p = base.clone();
                p.label = format!("bindings[{i}] ({what})");
                p.input.peer = Some(Peer {
                    kind: kind.into(),
                    id: PROBE_ID.into(),
                });
                out.push(p);
            }
        }
        out.push(base);
    }
    for (name, _) in root.get("channels").map(Value::entries).unwrap_or_default() {
        let c = ids::channel(name).into_owned();
        if name != "defaults" && name != "modelByChannel" && !channels.contains(&c) {
            channels.push(c);
        }
    }
    for channel in channels {
        out.push(Probe {
            label: format!("a {channel} direct message (default account)"),
            input: RouteInput {
                channel,
                peer: Some(Peer {
                    kind: "direct".into(),
                    id: PROBE_ID.into(),
                }),
                ..RouteInput::default()
            },
            acp: false,
        });
    }
    out
}

/// Where a router sent a probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Routed {
    pub agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
}

/// A probe the two routers answer differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disagreement {
    pub probe: String,
    pub input: serde_json::Value,
    pub openclaw: Routed,
    pub deepcli: Routed,
}

/// A probe OpenClaw refuses to route (compared with nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refused {
    pub probe: String,
    pub why: String,
    /// Where deepcli sends it instead.
    pub deepcli: Routed,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Agreement {
    /// Probes both routers answered.
    pub total: usize,
    pub agreed: usize,
    pub disagreements: Vec<Disagreement>,
    pub refused: Vec<Refused>,
}

/// OpenClaw's ACP binding for one exact conversation: the first in config order.
fn openclaw_acp(root: &Value, input: &RouteInput) -> Option<String> {
    let peer = input.peer.as_ref()?;
    let kind = route::chat_type(&peer.kind)?;
    let account = ids::account_id(input.account_id.as_deref().unwrap_or(""));
    root.get("bindings")?.items().iter().find_map(|b| {
        if !route::is_acp(b) {
            return None;
        }
        let m = b.get("match")?;
        let channel = m.get("channel")?.as_str()?.trim().to_lowercase();
        let bk = m
            .get("peer")?
            .get("kind")?
            .as_str()
            .and_then(route::chat_type)?;
        let bid = m.get("peer")?.get("id")?.as_id()?;
        let ba = ids::account_id(m.get("accountId").and_then(Value::as_str).unwrap_or(""));
        let class = |k: &PeerKind| k.class();
        let agent = b.get("agentId")?.as_id()?;
        (channel == input.channel
            && ba == account
            && class(&bk) == class(&kind)
            && bid.trim() == peer.id.trim())
        .then(|| route::agent_id(&agent))
    })
}

/// Routes every probe both ways.
pub fn check(root: &Value, router: &Router, plan: &RoutingPlan, probes: &[Probe]) -> Agreement {
    let mut a = Agreement::default();
    for p in probes {
        let (openclaw, deepcli) = if p.acp {
            let Some(agent) = openclaw_acp(root, &p.input) else {
                continue;
            };
            let ours = plan.acp_binding(&p.input).map(|b| b.agent_id.clone());
            (
                Ok(Routed {
                    agent_id: agent,
                    session_key: None,
                }),
                Routed {
                    agent_id: ours.unwrap_or_else(|| "(no acp binding)".into()),
                    session_key: None,
                },
            )
        } else {
            let r = plan.resolve(&p.input);
            (
                router.resolve(&p.input).map(|x| Routed {
                    agent_id: x.agent_id,
                    session_key: Some(x.session_key),
                }),
                Routed {
                    agent_id: r.agent_id.to_string(),
                    session_key: Some(r.session_key.to_string()),
                },
            )
        };
        match openclaw {
            Err(why) => a.refused.push(Refused {
                probe: p.label.clone(),
                why: refusal_text(&why),
                deepcli,
            }),
            Ok(expected) => {
                a.total += 1;
                if expected == deepcli {
                    a.agreed += 1;
                } else {
                    a.disagreements.push(Disagreement {
                        probe: p.label.clone(),
                        input: serde_json::to_value(&p.input).unwrap_or_default(),
                        openclaw: expected,
                        deepcli,
                    });
                }
            }
        }
    }
    a
}

fn refusal_text(r: &Refusal) -> String {
    r.to_string()
}

// ---- the inbound policy -------------------------------------------------------------------

/// The sender id policy probes use for someone on no list.
pub const PROBE_SENDER: &str = "openclaw-import-probe-sender";
/// The group id policy probes use for a group no `groups` entry names.
pub const PROBE_GROUP: &str = "openclaw-import-probe-group";
/// The bot id a mentioning probe mentions when the account declares no `botUserId` (a
/// platform adapter learns the real one when it connects).
const PROBE_BOT: &str = "openclaw-import-probe-bot";

/// A message both gates decide: OpenClaw's on the original, deepcli's on the imported files.
#[derive(Debug, Clone)]
pub struct PolicyProbe {
    /// `telegram/default: a group message in -100123 from 111, not mentioning the bot`.
    pub label: String,
    /// Normalized channel and account.
    pub channel: String,
    pub account: String,
    /// The group or channel; `None`: a direct message.
    pub peer: Option<Peer>,
    pub sender: String,
    pub mentioned: bool,
    /// What OpenClaw does with it.
    pub openclaw: gate::Decision,
}

/// Messages the check could not compare, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotCompared {
    /// `discord/default: group messages`.
    pub probes: String,
    pub why: String,
}

/// A message the two gates decide differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDisagreement {
    pub probe: String,
    /// `deliver` or the reason OpenClaw refuses it (`not-mentioned`, …).
    pub openclaw: gate::Decision,
    /// The same for deepcli's gate on the imported files; `None` (null): deepcli has no such
    /// account, and the Access API refuses its messages before any gate.
    pub deepcli: Option<gate::Decision>,
    /// The setting that decided deepcli's answer, with its `file:line`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAgreement {
    /// Messages both gates decided.
    pub total: usize,
    pub agreed: usize,
    pub disagreements: Vec<PolicyDisagreement>,
    pub not_compared: Vec<NotCompared>,
}

/// The group conversations bindings name, by (normalized channel, normalized account or `None`
/// for every account).
type BoundGroups = HashMap<(String, Option<String>), Vec<Peer>>;

fn bound_groups(root: &Value) -> BoundGroups {
    let mut out = BoundGroups::new();
    for b in root.get("bindings").map(Value::items).unwrap_or_default() {
        let Some(m) = b.get("match") else { continue };
        let Some(channel) = m.get("channel").and_then(Value::as_str) else {
            continue;
        };
        let Some(p) = m.get("peer") else { continue };
        let kind = p
            .get("kind")
            .and_then(Value::as_str)
            .and_then(route::chat_type);
        let id = p
            .get("id")
            .and_then(Value::as_id)
            .map(|s| s.trim().to_string());
        let (Some(kind), Some(id)) = (kind, id) else {
            continue;
        };
        if kind == PeerKind::Direct || id.is_empty() || id == "*" {
            continue;
        }
        let account = match m.get("accountId").and_then(Value::as_str).map(str::trim) {
            Some("*") => None,
            a => Some(ids::account_id(a.unwrap_or("")).into_owned()),
        };
        out.entry((ids::channel(channel.trim()).into_owned(), account))
            .or_default()
            .push(Peer {
                kind: kind.as_str().to_string(),
                id,
            });
    }
    out
}

fn who(sender: &str) -> &str {
    if sender == PROBE_SENDER {
        "a sender on no list"
    } else {
        sender
    }
}

/// What deepcli's `config` names on a channel account that a probe should ask about: the
/// first sender its `allowFrom` names, and the groups its channel lists. Asked on both sides,
/// so a list that only one side still has is compared too (an export that lost a channel's
/// `groups` is probed in those groups).
fn deepcli_names(config: &Config, channel: &str, account: &str) -> (Option<String>, Vec<String>) {
    let Some(c) = config
        .channels
        .iter()
        .find(|c| ids::channel(&c.id) == channel)
    else {
        return (None, Vec::new());
    };
    let own = c.accounts().find(|a| a.normalized == account);
    let allow_from = own
        .and_then(|a| a.spec.policy.allow_from.as_ref())
        .or(c.spec.policy.allow_from.as_ref())
        .or(config.channel_defaults.allow_from.as_ref());
    let sender = allow_from
        .into_iter()
        .flatten()
        .map(|s| s.trim())
        .find(|s| !s.is_empty() && *s != "*")
        .map(str::to_string);
    let groups = c
        .spec
        .groups
        .keys()
        .map(|g| g.trim().to_string())
        .filter(|g| !g.is_empty() && g != "*")
        .collect();
    (sender, groups)
}

/// The messages the policy check decides, with OpenClaw's decisions: on every account of every
/// channel of `root`, a direct message from a sender `allowFrom` names (when it names one, on
/// either side) and from one it does not; and in every group `groups` lists (on either side),
/// every group a binding names and one group nothing names, a message with and without a
/// mention of the bot, from a sender who may speak there (when a list names one) and from one
/// who may not. `config` is deepcli's side.
pub fn policy_probes(root: &Value, config: &Config) -> (Vec<PolicyProbe>, Vec<NotCompared>) {
    let mut probes = Vec::new();
    let mut skipped: Vec<NotCompared> = Vec::new();
    let bound = bound_groups(root);
    for (name, _) in root.get("channels").map(Value::entries).unwrap_or_default() {
        if name == "defaults" || name == "modelByChannel" {
            continue;
        }
        let channel = ids::channel(name).into_owned();
        if channel == ids::A2A_CHANNEL || channel == ids::CLI_CHANNEL {
            skipped.push(NotCompared {
                probes: format!("{channel}: every message"),
                why: format!(
                    "deepcli's `{channel}` channel is not a chat platform (its senders authenticate themselves) and has its own defaults"
                ),
            });
            continue;
        }
        for (account, gate) in gate::accounts(root, name) {
            let scope = format!("{channel}/{account}");
            let mut push = |peer: Option<Peer>, sender: String, mentioned: bool| {
                let message = gate::Inbound {
                    group: peer.as_ref().map(|p| p.id.as_str()),
                    sender: &sender,
                    mentioned,
                };
                let label = match &peer {
                    None => format!("{scope}: a direct message from {}", who(&sender)),
                    Some(p) => format!(
                        "{scope}: a group message in {} from {}, {} the bot",
                        if p.id == PROBE_GROUP {
                            "a group no entry names"
                        } else {
                            &p.id
                        },
                        who(&sender),
                        if mentioned {
                            "mentioning"
                        } else {
                            "not mentioning"
                        }
                    ),
                };
                match gate.decide(&message) {
                    Ok(openclaw) => probes.push(PolicyProbe {
                        label,
                        channel: channel.clone(),
                        account: account.clone(),
                        peer,
                        sender,
                        mentioned,
                        openclaw,
                    }),
                    Err(gate::Unmodelled { path }) => {
                        let what = if message.group.is_some() {
                            "group messages"
                        } else {
                            "direct messages"
                        };
                        let why = if channel == "discord" && path.ends_with(".guilds") {
                            format!(
                                "OpenClaw decides them with {path}, carried over as deepcli's `guilds`; this check does not model OpenClaw's guild gate: check them with `deepcli route --explain --guild G --role R`"
                            )
                        } else {
                            format!(
                                "OpenClaw decides them with {path}, which deepcli has no form for (see \"not carried over\"); check them with `deepcli route --explain`"
                            )
                        };
                        let n = NotCompared {
                            probes: format!("{scope}: {what}"),
                            why,
                        };
                        if !skipped.contains(&n) {
                            skipped.push(n);
                        }
                    }
                }
            };
            let (deepcli_sender, deepcli_groups) = deepcli_names(config, &channel, &account);
            let mut senders: Vec<String> = Vec::new();
            for sender in gate::first_id(gate.allow_from())
                .into_iter()
                .chain(deepcli_sender)
                .chain([PROBE_SENDER.to_string()])
            {
                if !senders.contains(&sender) {
                    senders.push(sender);
                }
            }
            for sender in senders {
                push(None, sender, false);
            }
            let mut groups: Vec<Peer> = Vec::new();
            let mut seen: HashSet<String> = HashSet::new();
            let listed = gate
                .listed_groups()
                .into_iter()
                .chain(deepcli_groups)
                .map(|id| Peer {
                    kind: "group".into(),
                    id,
                });
            let named = [Some(account.clone()), None].into_iter().flat_map(|a| {
                bound
                    .get(&(channel.clone(), a))
                    .into_iter()
                    .flatten()
                    .cloned()
            });
            for peer in listed.chain(named) {
                if seen.insert(peer.id.clone()) {
                    groups.push(peer);
                }
            }
            groups.push(Peer {
                kind: "group".into(),
                id: PROBE_GROUP.into(),
            });
            for peer in groups {
                let senders = gate::first_id(gate.group_senders(&peer.id))
                    .into_iter()
                    .chain([PROBE_SENDER.to_string()]);
                for sender in senders {
                    for mentioned in [false, true] {
                        push(Some(peer.clone()), sender.clone(), mentioned);
                    }
                }
            }
        }
    }
    (probes, skipped)
}

/// Decides every probe with deepcli's gate on `config` (routed by `plan`, for the agent's
/// mention patterns) and compares it with OpenClaw's decision.
pub fn check_policy(
    config: &Config,
    plan: &RoutingPlan,
    probes: &[PolicyProbe],
    not_compared: Vec<NotCompared>,
) -> PolicyAgreement {
    let policy = PolicyPlan::compile(config);
    let mut a = PolicyAgreement {
        not_compared,
        ..PolicyAgreement::default()
    };
    for p in probes {
        let (deepcli, rule) = deepcli_decision(&policy, plan, p);
        a.total += 1;
        if deepcli == Some(p.openclaw) {
            a.agreed += 1;
        } else {
            a.disagreements.push(PolicyDisagreement {
                probe: p.label.clone(),
                openclaw: p.openclaw,
                deepcli,
                rule,
            });
        }
    }
    a
}

/// deepcli's answer to a probe (`None`: no such account), and the rule that decided.
fn deepcli_decision(
    policy: &PolicyPlan,
    plan: &RoutingPlan,
    p: &PolicyProbe,
) -> (Option<gate::Decision>, Option<String>) {
    let Some(account) = policy.account(&p.channel, &p.account) else {
        return (
            None,
            Some(format!(
                "channels.yaml declares no account `{}/{}`: the Access API refuses its messages (401)",
                p.channel, p.account
            )),
        );
    };
    // A mention is the platform's: by the bot's id, as an adapter that learnt it reports it.
    let learnt;
    let (account, bot) = match &account.bot_user_id {
        Some(bot) => (account, bot.value.to_string()),
        None => {
            learnt = account.with_bot_user_id(PROBE_BOT, "the platform");
            (&learnt, PROBE_BOT.to_string())
        }
    };
    let routed = plan.resolve(&RouteInput {
        channel: p.channel.clone(),
        account_id: Some(p.account.clone()),
        peer: Some(p.peer.clone().unwrap_or(Peer {
            kind: "direct".into(),
            id: p.sender.clone(),
        })),
        ..RouteInput::default()
    });
    let mentions = if p.mentioned { vec![bot] } else { Vec::new() };
    let message = Message {
        conversation: if p.peer.is_some() {
            Conversation::Group
        } else {
            Conversation::Direct
        },
        sender_id: Some(&p.sender),
        is_bot: false,
        mentions: &mentions,
        reply_to_sender_id: None,
        in_thread: false,
        text: "",
        guild_id: None,
        roles: &[],
    };
    let view = account.view(p.peer.as_ref().map(|g| g.id.as_str()), None);
    let agent = AgentPatterns {
        mentions: policy
            .agent(&routed.agent_id)
            .and_then(|a| a.mentions.as_ref()),
    };
    match decide(&view, agent, &message, false) {
        Verdict::Deliver => (Some(gate::Decision::Deliver), None),
        Verdict::Gated { gate, .. } => (
            Some(gate::Decision::Gated(gate.reason)),
            Some(gate.rule.to_string()),
        ),
    }
}
