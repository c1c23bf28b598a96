//! One heartbeat (controller.md, "Heartbeats"): the agent's `HEARTBEAT.md` as a prompt in its
//! main session, unless that session is busy. An answer of exactly `HEARTBEAT_OK` is swallowed;
//! any other goes to the agent's last external route — the conversation of the last message
//! delivered to it — through that account's reply sink, and into that conversation's
//! transcript. The controller keeps the cadence; this says what one beat did.

use std::sync::Arc;

use serde_json::json;

use super::outbox::{Cause, Conversation, Outgoing};
use super::store::{LastRoute, Turn};
use super::{Access, SessionOptions};
use crate::config::model::RuntimeKind;
use crate::sessions::TurnError;
use crate::state::Provenance;

/// The answer that says "nothing to report": swallowed (surrounding whitespace aside).
pub(crate) const HEARTBEAT_OK: &str = "HEARTBEAT_OK";

/// What one heartbeat did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Beat {
    /// The agent answered `HEARTBEAT_OK`: nothing was sent anywhere.
    Ok,
    /// The answer is on its way to the agent's last external route (`channel/account peer`):
    /// in the outbox, which its account's carrier posts from.
    Delivered(String),
    /// The answer is only in the transcripts: there is no route to send it on (why).
    Kept(String),
    /// Not prompted (why): the main session is busy, the runtime is not ready, no
    /// `HEARTBEAT.md`.
    Skipped(String),
    /// The prompt failed (why).
    Failed(String),
}

impl std::fmt::Display for Beat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Beat::Ok => write!(f, "{HEARTBEAT_OK}: nothing was sent"),
            Beat::Delivered(to) => write!(f, "queued in the outbox for {to}"),
            Beat::Kept(why) => write!(f, "kept: {why}"),
            Beat::Skipped(why) => write!(f, "skipped: {why}"),
            Beat::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// The prompt of a heartbeat: what the agent is asked, and its `HEARTBEAT.md`.
fn prompt(heartbeat_md: &str) -> String {
    format!(
        "[deepcli heartbeat: this is a periodic wake-up, not a message from anyone. Do what your HEARTBEAT.md below asks. If nothing needs saying, reply exactly {HEARTBEAT_OK}; anything else you reply is sent to the conversation you last had.]\n{heartbeat_md}"
    )
}

impl Access {
    /// Prompts agent `agent_id`'s main session with `heartbeat_md`, unless the session is busy
    /// (a message is being answered in it, or waits for it), and sends the answer on.
    pub(crate) async fn heartbeat(self: &Arc<Self>, agent_id: &str, heartbeat_md: &str) -> Beat {
        let Some(plan) = self.plan() else {
            return Beat::Skipped("no config in force yet".into());
        };
        if plan.runtime(agent_id) != RuntimeKind::Acp || !self.sessions.manages_runtimes() {
            return Beat::Skipped("the agent has no ACP runtime here".into());
        }
        let main = plan.routing.session.main_key(agent_id);
        let Some(place) = self.sessions.try_enter(&main) else {
            return Beat::Skipped(format!("the main session {main} is busy"));
        };
        let text = prompt(heartbeat_md);
        let answer = self
            .sessions
            .turn_in(&place, agent_id, &main, &text, &SessionOptions::default())
            .await;
        let (reply, notes) = match answer {
            Ok(answer) => {
                // A heartbeat's turn: its budget row on its own (its transcript rows come later).
                if let Some(counted) = answer.counted
                    && let Err(e) = self.sessions.record_count(&main, counted).await
                {
                    return Beat::Failed(e.to_string());
                }
                (answer.text, answer.notes)
            }
            Err(e @ TurnError::RuntimeDown { .. }) => return Beat::Skipped(e.to_string()),
            Err(e) => return Beat::Failed(e.to_string()),
        };
        let mut turns: Vec<Turn> = notes.into_iter().map(Turn::note).collect();
        // Which of the two said it: the transcript's sender (`access::sender`).
        for (said, who) in [
            (text, super::sender::HEARTBEAT_PROMPT),
            (reply.clone(), super::sender::HEARTBEAT_ANSWER),
        ] {
            turns.push(Turn {
                provenance: Provenance::Heartbeat,
                message_id: None,
                sender: None,
                text: said,
                route: Some(json!({"heartbeat": who})),
            });
        }
        if let Err(e) = self
            .blocking({
                let main = main.clone();
                move |s| s.record(&main, &turns, None)
            })
            .await
        {
            return Beat::Failed(e.to_string());
        }
        if reply.trim() == HEARTBEAT_OK {
            return Beat::Ok;
        }
        let route = {
            let agent = agent_id.to_string();
            self.blocking(move |s| s.last_route(&agent)).await
        };
        match route {
            Err(e) => Beat::Failed(e.to_string()),
            Ok(None) => Beat::Kept(format!(
                "no external route yet (no message was delivered to the agent): the answer is in the transcript of {main}"
            )),
            Ok(Some(route)) => self.send_on(&route, reply, Cause::Heartbeat, None).await,
        }
    }

    /// Sends a heartbeat's (or an announce's) answer to `route`: into its conversation's
    /// transcript and the outbox, one transaction; the account's carrier posts it.
    /// `why` marks the transcript row and the outbox row; `cause_id` names what caused it (a
    /// run; none: the time).
    pub(super) async fn send_on(
        &self,
        route: &LastRoute,
        reply: String,
        why: Cause,
        cause_id: Option<&str>,
    ) -> Beat {
        let at = crate::clock::now();
        let turn = Turn {
            // The operator's notice is theirs; everything else here is the agent's answer.
            provenance: if why == Cause::Notice {
                Provenance::Operator
            } else {
                Provenance::Agent
            },
            message_id: None,
            sender: None,
            text: reply.clone(),
            route: Some(json!({why.as_str(): true, "at": at})),
        };
        let said = Outgoing {
            to: Conversation {
                channel: route.channel.clone(),
                account_id: route.account_id.clone(),
                peer_kind: route.peer_kind.clone(),
                peer_id: route.peer_id.clone(),
                thread_id: route.thread_id.clone(),
            },
            reply_to: None,
            session_key: route.session_key.clone(),
            cause: why,
            cause_id: cause_id.map_or(at, str::to_string),
            text: reply,
        };
        let place = said.to.to_string();
        let recorded = {
            let key = route.session_key.clone();
            self.blocking(move |s| s.record_saying(&key, &[turn], &said))
                .await
        };
        if let Err(e) = recorded {
            return Beat::Failed(e.to_string());
        }
        self.outbox_rang();
        Beat::Delivered(place)
    }
}
