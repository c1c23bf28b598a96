//! Words for an [`Explanation`]: why a tier was skipped, why a candidate missed. Shared by the
//! human and JSON forms of `deepcli route --explain`.

use serde_json::{Value, json};

use super::binding::{MatchedBy, Miss};
use super::input::RouteInput;
use super::plan::{Explanation, RoutingPlan, Skip, TierOutcome};
use crate::ids::PeerKind;

impl Skip {
    pub fn reason(self, input: &RouteInput) -> String {
        match self {
            Skip::NoPeer => "the input has no peer".into(),
            Skip::UnknownPeerKind => {
                let kind = |p: &Option<super::Peer>| p.as_ref().map(|p| p.kind.trim().to_string());
                let kind = kind(&input.peer)
                    .or(kind(&input.parent_peer))
                    .unwrap_or_default();
                format!(
                    "peer kind `{kind}` is none of direct, group, channel: no binding matches it"
                )
            }
            Skip::NoParentPeer => "the input has no parent peer".into(),
            Skip::NoGuild => "the input has no guildId".into(),
            Skip::NoRoles => "the input has no memberRoleIds".into(),
            Skip::NoTeam => "the input has no teamId".into(),
        }
    }
}

fn or_none(value: Option<&str>) -> String {
    value.map_or_else(|| "none".to_string(), |v| format!("`{v}`"))
}

impl Miss {
    /// Why binding `b` of `plan` missed `input` in `tier`.
    pub fn reason(
        self,
        plan: &RoutingPlan,
        b: usize,
        tier: MatchedBy,
        input: &RouteInput,
    ) -> String {
        let scope = &plan.bindings[b].scope;
        let conversation = if tier == MatchedBy::Parent {
            &input.parent_peer
        } else {
            &input.peer
        };
        match self {
            Miss::NoPeer => "it names a peer and the input has none".into(),
            Miss::PeerKind => format!(
                "its peer kind `{}` does not match the input's `{}`",
                scope.peer.as_ref().map_or("", |p| p.kind.as_str()),
                conversation
                    .as_ref()
                    .map_or_else(String::new, |p| PeerKind::parse(&p.kind)
                        .as_str()
                        .to_string()),
            ),
            Miss::PeerId => "its peer id differs from the input's".into(),
            Miss::Guild => format!(
                "it wants guildId `{}`, the input has {}",
                scope.guild.as_deref().unwrap_or_default(),
                or_none(
                    input
                        .guild_id
                        .as_deref()
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                )
            ),
            Miss::Team => format!(
                "it wants teamId `{}`, the input has {}",
                scope.team.as_deref().unwrap_or_default(),
                or_none(
                    input
                        .team_id
                        .as_deref()
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                )
            ),
            Miss::Roles => format!(
                "none of its roles [{}] is among the input's memberRoleIds [{}]",
                scope.roles.join(", "),
                input
                    .member_role_ids
                    .iter()
                    .map(|r| r.trim())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

impl Explanation {
    /// The tier trace as JSON: one object per tier, in order.
    pub fn tiers_json(&self, plan: &RoutingPlan, input: &RouteInput) -> Value {
        let tiers = self
            .tiers
            .iter()
            .map(|t| match &t.outcome {
                TierOutcome::Skipped(why) => json!({
                    "tier": t.tier.as_str(),
                    "skipped": why.reason(input),
                }),
                TierOutcome::Tried { key, candidates } => json!({
                    "tier": t.tier.as_str(),
                    "key": key,
                    "candidates": candidates.iter().map(|&(b, verdict)| {
                        let binding = &plan.bindings[b];
                        json!({
                            "binding": binding.source,
                            "agentId": binding.agent_id,
                            "matched": verdict.is_ok(),
                            "reason": verdict.err().map(|m| m.reason(plan, b, t.tier, input)),
                        })
                    }).collect::<Vec<_>>(),
                }),
            })
            .collect();
        Value::Array(tiers)
    }
}
