//! What the A2A server (`crate::a2a`, a2a.md) asks of Access: where a peer's request is routed,
//! and the inbound policy's verdict on the peer (policy.md). An A2A peer is a sender on channel
//! `a2a`, account `default`, in a direct conversation `{kind: direct, id: <peer name>}`: the
//! bindings of bindings.yaml route it, and `channels.a2a`'s `dmPolicy` and `allowFrom` decide
//! whether it may speak, with pairing as on any channel.

use crate::ids::DEFAULT_ACCOUNT;
use crate::policy::{self, AgentPatterns, Conversation, Message, Reason, Unless, Verdict};
use crate::routing::{RouteInput, RouteResult, input::Peer};

use super::{Access, AccessError};
use crate::state::pairing::{self as records, Requested};

/// The channel A2A peers speak on.
pub(crate) const CHANNEL: &str = "a2a";

/// A peer the inbound policy refused: why, the setting that decided (with its `file:line`),
/// and, for `pairing-required`, the code the hub's operator approves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct A2aGated {
    pub reason: &'static str,
    pub rule: String,
    pub hint: &'static str,
    /// A new pairing code (`None`: one is already pending, or the peer asked too often).
    pub pairing_code: Option<String>,
}

/// The route input of peer `peer`'s requests.
pub(crate) fn route_input(peer: &str) -> RouteInput {
    RouteInput {
        channel: CHANNEL.to_string(),
        account_id: Some(DEFAULT_ACCOUNT.to_string()),
        peer: Some(Peer {
            kind: "direct".to_string(),
            id: peer.to_string(),
        }),
        parent_peer: None,
        guild_id: None,
        team_id: None,
        member_role_ids: Vec::new(),
        dm_scope: None,
        group_scope: None,
    }
}

impl Access {
    /// The agent bindings.yaml routes peer `peer` to (channel `a2a`), as `deepcli route` would
    /// answer; `None` before the first plan is in force.
    pub(crate) fn a2a_route(&self, peer: &str) -> Option<RouteResult> {
        let plan = self.plan()?;
        Some(plan.routing.resolve(&route_input(peer)))
    }

    /// The inbound policy's verdict on peer `peer`: `None` lets it through. A refusal is
    /// counted (`deepcli_inbound_gated_total{channel="a2a"}`) and written to the channel log;
    /// `dmPolicy: pairing` makes a pairing request for an unknown peer.
    pub(crate) async fn a2a_gate(&self, peer: &str) -> Result<Option<A2aGated>, AccessError> {
        let Some(plan) = self.plan() else {
            return Ok(None);
        };
        let Some(account) = plan.policy.account(CHANNEL, DEFAULT_ACCOUNT) else {
            return Ok(None);
        };
        let message = Message {
            conversation: Conversation::Direct,
            sender_id: Some(peer),
            is_bot: false,
            mentions: &[],
            reply_to_sender_id: None,
            in_thread: false,
            text: "",
            guild_id: None,
            roles: &[],
        };
        let verdict = policy::decide(
            &account.view(None, None),
            AgentPatterns::default(),
            &message,
            false,
        );
        let gate = match verdict {
            Verdict::Deliver => return Ok(None),
            Verdict::Gated {
                gate,
                unless: Some(Unless::SenderPaired),
            } => {
                let sender = peer.to_string();
                let paired = self
                    .blocking(move |store| {
                        store
                            .db
                            .write(|c| records::is_paired(&*c, CHANNEL, DEFAULT_ACCOUNT, &sender))
                    })
                    .await?;
                if paired {
                    return Ok(None);
                }
                gate
            }
            Verdict::Gated { gate, .. } => gate,
        };
        let mut pairing_code = None;
        if gate.reason == Reason::PairingRequired
            && let Requested::Created { code, .. } = self
                .pairing_request(CHANNEL, DEFAULT_ACCOUNT, peer, None)
                .await?
        {
            pairing_code = Some(code);
        }
        self.metrics
            .gated(CHANNEL, DEFAULT_ACCOUNT, gate.reason.as_str());
        self.log_call(
            Some(CHANNEL),
            &format!(
                "gated peer={peer} reason={} rule={}",
                gate.reason.as_str(),
                gate.rule
            ),
        )
        .await;
        Ok(Some(A2aGated {
            reason: gate.reason.as_str(),
            rule: gate.rule.to_string(),
            hint: gate.reason.hint(),
            pairing_code,
        }))
    }
}
