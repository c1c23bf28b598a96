//! What the chat commands share (`/approve` and `/deny`, `/status`, `/new` and `/reset`):
//! the command word as people type it, and the answer, which is recorded as the envelope's
//! response and goes back the way a reply goes.

use serde_json::{Value, json};

use super::route::Route;
use super::store::{AccessStore, DeliveryKey};
use super::{Access, AccessError, AccessPlan, Delivered, Envelope};
use crate::state::StateError;

/// The command a message is when it is one word alone: `/status`, or `/status@deepcli_bot` as
/// Telegram writes commands in groups (the bot's name dropped).
pub(super) fn lone_command(text: &str) -> Option<&str> {
    let mut words = text.split_whitespace();
    let (Some(word), None) = (words.next(), words.next()) else {
        return None;
    };
    Some(word.split_once('@').map_or(word, |(command, _)| command))
}

/// The response to a chat command: what an answered envelope's response holds, the answer as
/// its reply, and `command` (`approvalCommand`, …) set, with `more` fields.
pub(super) fn response(
    route: &Route,
    session_key: &str,
    answer: &str,
    command: &str,
    more: &[(&str, Value)],
) -> Value {
    let mut response = json!({
        "route": route,
        "sessionKey": session_key,
        "reply": {"text": answer},
        "duplicate": false,
        command: true,
    });
    for (name, value) in more {
        response[*name] = value.clone();
    }
    response
}

impl Access {
    /// Answers a chat command that changes nothing: [`Access::answer_command`] with only its
    /// response recorded.
    pub(super) async fn answer_only(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        key: &DeliveryKey,
        route: &Route,
        answer: &str,
        command: &str,
    ) -> Result<Delivered, AccessError> {
        let session_key = super::gate::session_key(route, key);
        let response = response(route, &session_key, answer, command, &[]);
        let (k, d) = (session_key.clone(), key.clone());
        self.answer_command(
            plan,
            envelope,
            key,
            &session_key,
            (answer, response),
            move |s, sent| s.record_answer_only(&k, &d, sent),
        )
        .await
    }

    /// Answers a chat command: `record` stores the response (so a redelivery gets it again)
    /// with whatever the command changes, in one transaction; then the answer goes to the reply
    /// sink, and back to the adapter that posts it.
    pub(super) async fn answer_command(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        key: &DeliveryKey,
        session_key: &str,
        (answer, response): (&str, Value),
        record: impl FnOnce(&AccessStore, &str) -> Result<(), StateError> + Send + 'static,
    ) -> Result<Delivered, AccessError> {
        let sent = response.to_string();
        {
            let sent = sent.clone();
            self.blocking(move |store| record(store, &sent)).await?;
        }
        self.send_reply(plan, key, envelope, session_key, answer);
        Ok(Delivered::recorded(sent))
    }
}
