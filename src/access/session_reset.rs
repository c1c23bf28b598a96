//! `/new` and `/reset` from a chat (conversations.md, "Session lifecycle"), and `session.reset`'s
//! daily and idle resets found when a message arrives: a new session under the same key. Routing still answers the same key (as OpenClaw keeps the key and
//! rotates the session under it); the runtime session is closed and forgotten, so the next
//! message opens a new one with no context from before; the transcript begins a new segment,
//! and the earlier ones stay readable (`deepcli sessions history KEY --all`). The command never
//! reaches the agent; a sender the inbound policy does not admit gets the policy's answer.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::lifecycle::{Lifecycle, ResetPolicy, TRIGGERS};
use super::route::Route;
use super::store::DeliveryKey;
use super::{Access, AccessError, AccessPlan, Delivered, Envelope};

/// The trigger `text` is under `lifecycle`, if it is one: the word alone, or with the bot's
/// name as Telegram writes commands in groups (`/new@deepcli_bot`).
pub(super) fn trigger<'a>(lifecycle: &'a Lifecycle, text: &str) -> Option<&'a str> {
    let command = super::chat::lone_command(text)?.to_lowercase();
    lifecycle
        .triggers
        .iter()
        .find(|t| **t == command)
        .map(String::as_str)
}

impl Access {
    /// Starts session `session_key` over when `policy` finds it stale (`session.reset`): its
    /// runtime session closed and forgotten, a `reset` line saying why. Called in the
    /// session's FIFO place, before the message that found it stale is prompted.
    pub(super) async fn reset_if_stale(
        &self,
        policy: ResetPolicy,
        agent_id: &str,
        session_key: &str,
    ) {
        let key = session_key.to_string();
        let Ok(Some((began, last))) = self.blocking(move |s| s.session_times(&key)).await else {
            return;
        };
        let (Ok(began), Ok(last)) = (began.parse::<Timestamp>(), last.parse::<Timestamp>()) else {
            return;
        };
        let now = crate::clock::timestamp();
        let Some(stale) = policy.stale(began, last, now, &TimeZone::system()) else {
            return;
        };
        let closed = self.close_runtime_session(agent_id, session_key).await;
        let line = match closed {
            Some(note) => format!("new session: {stale} (session.reset; {note})"),
            None => format!("new session: {stale} (session.reset)"),
        };
        tracing::info!(session = %session_key, why = %stale, "a stale session starts over");
        let key = session_key.to_string();
        if let Err(e) = self
            .blocking(move |s| s.restart_session(&key, &line, None))
            .await
        {
            tracing::warn!(session = %session_key, error = %e, "cannot start a stale session over; it goes on");
        }
    }

    /// Answers `/new` or `/reset`: recorded as this envelope's response, sent to the reply
    /// sink and given back to the adapter that posts it, like any reply.
    pub(super) async fn reset_command(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        key: &DeliveryKey,
        route: &Route,
    ) -> Result<Delivered, AccessError> {
        let trigger = trigger(&plan.lifecycle, &envelope.text)
            .unwrap_or(TRIGGERS[0])
            .to_string();
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
            move |s, sent| s.restart_session(&k, &line, Some((&d, sent))),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triggers_are_the_word_alone_or_addressed_to_the_bot() {
        let lifecycle = Lifecycle::default();
        let trigger = |t| trigger(&lifecycle, t);
        assert_eq!(trigger("/new"), Some("/new"));
        assert_eq!(trigger(" /reset\n"), Some("/reset"));
        assert_eq!(trigger("/NEW"), Some("/new"));
        assert_eq!(trigger("/new@deepcli_bot"), Some("/new"));
        for no in ["/new please", "new", "/newer", "start /new", "", "/status"] {
            assert_eq!(trigger(no), None, "{no:?}");
        }
        let session = |json: &str| -> crate::config::model::SessionSection {
            serde_json::from_str(json).unwrap()
        };
        let own = Lifecycle::from_config(&session(r#"{"resetTriggers": ["/Fresh"]}"#));
        assert_eq!(super::trigger(&own, "/fresh"), Some("/fresh"));
        assert_eq!(
            super::trigger(&own, "/new"),
            None,
            "the list replaces the default"
        );
        let none = Lifecycle::from_config(&session(r#"{"resetTriggers": []}"#));
        assert_eq!(super::trigger(&none, "/new"), None);
    }
}
