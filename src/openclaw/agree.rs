//! The agreement check: every binding's match of the original `openclaw.json`, and each
//! channel's direct message on its default account, routed by OpenClaw's rules ([`super::route::Router`]) on the
//! original and by deepcli's router on the imported files. Equal agent ids and session keys
//! (ACP bindings: equal agents) or it is a disagreement naming the binding.

use serde::Serialize;

use super::json5::Value;
use super::route::{self, Refusal, Router};
use crate::ids::{self, PeerKind};
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
