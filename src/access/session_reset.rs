//! `/new` and `/reset` from a chat (conversations.md, "Session lifecycle"): a new session
//! under the same key. Routing still answers the same key (as OpenClaw keeps the key and
//! rotates the session under it); the runtime session is closed and forgotten, so the next
//! message opens a new one with no context from before; the transcript begins a new segment,
//! and the earlier ones stay readable (`deepcli sessions history KEY --all`). The command never
//! reaches the agent; a sender the inbound policy does not admit gets the policy's answer.

use super::route::Route;
use super::store::DeliveryKey;
use super::{Access, AccessError, AccessPlan, Delivered, Envelope};

/// The words that start a new session: OpenClaw's `session.resetTriggers` default.
const TRIGGERS: [&str; 2] = ["/new", "/reset"];

/// The trigger `text` is, if it is one: the word alone, or with the bot's name as Telegram
/// writes commands in groups (`/new@deepcli_bot`).
pub(super) fn trigger(text: &str) -> Option<&'static str> {
    let command = super::chat::lone_command(text)?;
    TRIGGERS
        .into_iter()
        .find(|t| command.eq_ignore_ascii_case(t))
}

impl Access {
    /// Answers `/new` or `/reset`: recorded as this envelope's response, sent to the reply
    /// sink and given back to the adapter that posts it, like any reply.
    pub(super) async fn reset_command(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        key: &DeliveryKey,
        route: &Route,
    ) -> Result<Delivered, AccessError> {
        let trigger = trigger(&envelope.text).unwrap_or(TRIGGERS[0]);
        if let Some(gated) = self.gate(plan, envelope, route, key).await? {
            return Ok(gated);
        }
        let session_key = super::gate::session_key(route, key);
        let busy = self.queue_depth(&session_key);
        if busy > 0 {
            let answer = format!(
                "This session is still answering ({} waiting or running); nothing was reset. \
                 Send {trigger} again once it has answered.",
                crate::plural::plural(busy, "message", "messages")
            );
            return self
                .answer_only(plan, envelope, key, route, &answer, "resetCommand")
                .await;
        }
        let answer = format!(
            "New session: the agent starts over, without the conversation so far (it is kept: \
             deepcli sessions history {session_key} --all)."
        );
        let response = super::chat::response(
            route,
            &session_key,
            &answer,
            "resetCommand",
            &[("reset", true.into())],
        );
        let closed = self
            .close_runtime_session(route.agent_id(), &session_key)
            .await;
        let sender = envelope.facts.sender_id.as_deref().map_or_else(
            || "an unnamed sender".to_string(),
            |id| format!("{}:{}", key.channel, id.trim()),
        );
        let line = match closed {
            Some(note) => format!("new session: {trigger} from {sender} ({note})"),
            None => format!("new session: {trigger} from {sender}"),
        };
        let (k, d) = (session_key.clone(), key.clone());
        self.answer_command(
            plan,
            envelope,
            key,
            &session_key,
            (&answer, response),
            move |s, sent| s.reset_session(&k, &line, &d, sent),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triggers_are_the_word_alone_or_addressed_to_the_bot() {
        assert_eq!(trigger("/new"), Some("/new"));
        assert_eq!(trigger(" /reset\n"), Some("/reset"));
        assert_eq!(trigger("/NEW"), Some("/new"));
        assert_eq!(trigger("/new@deepcli_bot"), Some("/new"));
        for no in ["/new please", "new", "/newer", "start /new", "", "/status"] {
            assert_eq!(trigger(no), None, "{no:?}");
        }
    }
}
