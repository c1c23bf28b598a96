//! `/new` and `/reset` from a chat (conversations.md, "Session lifecycle"): a new session
//! under the same key. Routing still answers the same key (as OpenClaw keeps the key and
//! rotates the session under it); the runtime session is closed and forgotten, so the next
//! message opens a new one with no context from before; the transcript begins a new segment,
//! and the earlier ones stay readable (`deepcli sessions history KEY --all`). The command never
//! reaches the agent; a sender the inbound policy does not admit gets the policy's answer.

use serde_json::json;

use super::route::Route;
use super::store::DeliveryKey;
use super::{Access, AccessError, AccessPlan, Delivered, Envelope};

/// The words that start a new session: OpenClaw's `session.resetTriggers` default.
const TRIGGERS: [&str; 2] = ["/new", "/reset"];

/// The trigger `text` is, if it is one: the word alone, or with the bot's name as Telegram
/// writes commands in groups (`/new@deepcli_bot`).
pub(super) fn trigger(text: &str) -> Option<&'static str> {
    let mut words = text.split_whitespace();
    let (Some(word), None) = (words.next(), words.next()) else {
        return None;
    };
    let command = word.split_once('@').map_or(word, |(command, _)| command);
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
        let answer = if busy > 0 {
            format!(
                "This session is still answering ({} waiting or running); nothing was reset. \
                 Send {trigger} again once it has answered.",
                crate::plural::plural(busy, "message", "messages")
            )
        } else {
            format!(
                "New session: the agent starts over, without the conversation so far (it is kept: \
                 deepcli sessions history {session_key} --all)."
            )
        };
        let response = json!({
            "route": route,
            "sessionKey": session_key,
            "reply": {"text": answer},
            "duplicate": false,
            "resetCommand": true,
            "reset": busy == 0,
        });
        let sent = response.to_string();
        if busy > 0 {
            let (session_key, key, sent) = (session_key.clone(), key.clone(), sent.clone());
            self.blocking(move |store| store.record_answer_only(&session_key, &key, &sent))
                .await?;
        } else {
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
            let (session_key, key, sent) = (session_key.clone(), key.clone(), sent.clone());
            self.blocking(move |store| store.reset_session(&session_key, &line, &key, &sent))
                .await?;
        }
        self.send_reply(plan, key, envelope, &session_key, &answer);
        Ok(Delivered::recorded(sent))
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
