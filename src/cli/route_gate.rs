//! `deepcli route --explain --sender … --bot --mention … --text …`: the gate the inbound policy
//! would apply to the message (policy.md), so an operator can see why the bot did not answer
//! without sending anything. What only a running hub knows is named, not guessed: a pairing
//! approval, the agent having answered in a thread, a bot pair in its cooldown.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use serde_json::{Value, json};

use crate::policy::{Conversation, Message, PolicyPlan, Unless, Verdict};
use crate::routing::{RouteInput, RouteResult};

const LABEL: Style = Style::new().bold();
const PASS: Style = AnsiColor::Green.on_default().bold();
const GATED: Style = AnsiColor::Yellow.on_default().bold();
const DIM: Style = Style::new().dimmed();

/// What the message says, from the flags.
pub(super) struct Sent<'a> {
    pub sender: Option<&'a str>,
    pub bot: bool,
    pub mentions: &'a [String],
    pub text: &'a str,
}

pub(super) enum GateView {
    /// Routed with a published plan: the policy is the config's.
    NoPolicy,
    /// An account channels.yaml does not declare.
    NotGated { channel: String, account: String },
    /// An A2A peer routed to an agent `a2a.expose` does not list: the hub's endpoint refuses
    /// it before any gate.
    NotExposed { agent: String },
    /// The verdict, and whether the sender is a bot.
    Verdict(Verdict, bool),
}

pub(super) fn explain(
    policy: Option<&PolicyPlan>,
    a2a_exposed: Option<&[String]>,
    input: &RouteInput,
    result: &RouteResult,
    sent: &Sent<'_>,
) -> GateView {
    let Some(policy) = policy else {
        return GateView::NoPolicy;
    };
    if &*result.channel == crate::ids::A2A_CHANNEL
        && a2a_exposed.is_some_and(|exposed| !exposed.iter().any(|a| *a == *result.agent_id))
    {
        return GateView::NotExposed {
            agent: result.agent_id.to_string(),
        };
    }
    // The route names the channel and account as the router normalized them.
    let channel = result.channel.to_string();
    let account = result.account_id.to_string();
    let message = Message {
        conversation: Conversation::of_peer_kind(input.peer.as_ref().map(|p| p.kind.as_str())),
        sender_id: sent.sender,
        is_bot: sent.bot,
        mentions: sent.mentions,
        reply_to_sender_id: None,
        in_thread: false,
        text: sent.text,
        guild_id: input.guild_id.as_deref(),
        roles: &input.member_role_ids,
    };
    match policy.verdict(
        &channel,
        &account,
        &result.agent_id,
        input.peer.as_ref().map(|p| p.id.as_str()),
        input.parent_peer.as_ref().map(|p| p.id.as_str()),
        &message,
        false,
    ) {
        Some(verdict) => GateView::Verdict(verdict, sent.bot),
        None => GateView::NotGated { channel, account },
    }
}

fn unless_text(unless: Unless) -> &'static str {
    match unless {
        Unless::SenderPaired => {
            "unless the operator approved the sender by pairing (`deepcli pairing list`)"
        }
        Unless::ThreadAnswered => "unless the agent already answered in the thread",
    }
}

impl GateView {
    pub(super) fn json(&self) -> Value {
        match self {
            GateView::NoPolicy => json!({"verdict": "unknown", "note": NO_POLICY}),
            GateView::NotGated { .. } => json!({"verdict": "deliver", "note": self.not_gated()}),
            GateView::NotExposed { .. } => {
                json!({"verdict": "refused", "reason": "not-exposed", "note": self.not_gated()})
            }
            GateView::Verdict(Verdict::Deliver, false) => json!({"verdict": "deliver"}),
            GateView::Verdict(Verdict::Deliver, true) => {
                json!({"verdict": "deliver", "note": BOT_LOOP})
            }
            GateView::Verdict(Verdict::Gated { gate, unless }, _) => {
                let mut v = json!({
                    "verdict": "gated",
                    "reason": gate.reason.as_str(),
                    "rule": &*gate.rule,
                    "hint": gate.reason.hint(),
                });
                if let Some(unless) = unless {
                    v["unless"] = match unless {
                        Unless::SenderPaired => "sender-paired",
                        Unless::ThreadAnswered => "thread-answered",
                    }
                    .into();
                    v["note"] = unless_text(*unless).into();
                }
                v
            }
        }
    }

    fn not_gated(&self) -> String {
        match self {
            GateView::NotGated { channel, account } => format!(
                "channels.yaml declares no account `{channel}/{account}`: the Access API refuses the message before any gate (401)"
            ),
            GateView::NotExposed { agent } => format!(
                "agent `{agent}` is not in channels.yaml `a2a.expose`: the hub's endpoint /a2a/ refuses the peer before any gate (403 PERMISSION_DENIED); bind the peer to an exposed agent, or expose `{agent}`"
            ),
            _ => String::new(),
        }
    }

    pub(super) fn human(&self, out: &mut String) {
        let _ = writeln!(out, "\n{LABEL}gate{LABEL:#}");
        match self {
            GateView::NoPolicy => {
                let _ = writeln!(out, "  {DIM}{NO_POLICY}{DIM:#}");
            }
            GateView::NotGated { .. } => {
                let _ = writeln!(out, "  {PASS}deliver{PASS:#}  {}", self.not_gated());
            }
            GateView::NotExposed { .. } => {
                let _ = writeln!(out, "  {GATED}not-exposed{GATED:#}  {}", self.not_gated());
            }
            GateView::Verdict(Verdict::Deliver, bot) => {
                let _ = writeln!(out, "  {PASS}deliver{PASS:#}");
                if *bot {
                    let _ = writeln!(out, "  {DIM}{BOT_LOOP}{DIM:#}");
                }
            }
            GateView::Verdict(Verdict::Gated { gate, unless }, _) => {
                let _ = writeln!(
                    out,
                    "  {GATED}{}{GATED:#}  decided by {}",
                    gate.reason.as_str(),
                    gate.rule
                );
                if let Some(unless) = unless {
                    let _ = writeln!(out, "  {}", unless_text(*unless));
                }
                let _ = writeln!(out, "  hint: {}", gate.reason.hint());
            }
        }
    }
}

const NO_POLICY: &str =
    "the inbound policy is the config's: route with --config, not --plan, to see the gate";
const BOT_LOOP: &str = "(a bot sender may still be muted by bot-loop protection: the counts live in the running controller)";
