//! An envelope the inbound policy let through, delivered: its turn in the engine (the FIFO
//! place held until its outcome is recorded), the response recorded with the delivery, the
//! reply sent to the account's sink; a turn that passed its time recorded `uncertain`.

use crate::ids::AccountKey;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::reply::{About, ReplyPost};
use super::store::{self, DeliveryKey, Turn};
use super::{
    Access, AccessError, AccessPlan, Delivered, Envelope, Outcome, TurnOrigin, begun, gate, route,
};
use crate::config::model::RuntimeKind;
use crate::sessions::TurnError;
use crate::state::Provenance;

impl Access {
    pub(super) async fn deliver(
        self: &Arc<Self>,
        plan: &Arc<AccessPlan>,
        envelope: &Envelope,
        key: &DeliveryKey,
        route: route::Route,
    ) -> Outcome {
        let agent_id = route.agent_id().to_string();
        let agent_id = agent_id.as_str();
        let session_key = gate::session_key(&route, key);
        let session_key = session_key.as_str();
        let started = Instant::now();
        let place = self.sessions.enter(session_key, false, None).await?;
        let kind = plan.runtime(agent_id);
        let managed = self.sessions.manages_runtimes();
        if let Some(policy) = plan.lifecycle.reset
            && kind == RuntimeKind::Acp
            && managed
        {
            // In the session's place: nothing else of it runs while it starts over.
            self.reset_if_stale(policy, agent_id, session_key).await;
        }
        let mut counted = None;
        let reply = if kind.takes_prompts() && managed {
            let mut options = route.session_options();
            let begun = begun::BegunTurn {
                key: key.clone(),
                session_key: session_key.to_string(),
                agent_id: agent_id.to_string(),
                route: serde_json::to_value(&route).unwrap_or_default(),
                sender: envelope.sender.clone(),
                text: envelope.text.clone(),
            };
            let store = self.store.clone();
            // Several replicas: written only while this one holds the agent's claim.
            let fence = self.placement.as_ref().map(|p| p.fence(agent_id));
            options.begun = Some(crate::sessions::BeginHook(Arc::new(move |at_ms| {
                store.begin_turn(&begun, at_ms, fence.as_ref())
            })));
            // Group messages kept while the agent was not mentioned come first.
            let context = self
                .take_context(session_key, self.limits(agent_id).context_bytes)
                .await?;
            // Who speaks and where, then the group messages kept while the agent was not
            // addressed, then the message (conversations.md).
            let header = super::prompt::header(envelope, &key.channel);
            let text = match &context.text {
                Some(kept) => format!("{header}\n{kept}{}", envelope.text),
                None => format!("{header}\n{}", envelope.text),
            };
            self.set_turn_origin(
                session_key,
                Some(TurnOrigin {
                    channel: key.channel.clone(),
                    account_id: key.account_id.clone(),
                    message_id: envelope.message_id.clone(),
                    peer: envelope.route.peer.clone(),
                    thread_id: envelope.thread_id.clone(),
                    sender_id: envelope.facts.sender_id.clone(),
                    key: key.clone(),
                }),
            );
            let answered = self
                .sessions
                .turn_in(&place, agent_id, session_key, &text, &options)
                .await
                .map_err(AccessError::from);
            self.set_turn_origin(session_key, None);
            let answered = match answered {
                Ok(answer) => {
                    counted = answer.counted.map(store::CountedTurn::from);
                    (answer.text, answer.notes)
                }
                Err(e @ AccessError::Turn(TurnError::TimedOut { .. })) => {
                    return Err(self.timed_out(envelope, key, session_key, &route, e).await);
                }
                Err(e) => {
                    // No outcome to keep: the message may be handed in again and prompted.
                    let key = key.clone();
                    let _ = self.blocking(move |store| store.forget_turn(&key)).await;
                    return Err(e);
                }
            };
            Some((answered, context.last_id))
        } else {
            None
        };
        let (reply, given) = match reply {
            Some((answered, given)) => (Some(answered), given),
            None => (None, None),
        };
        let mut response = json!({
            "route": route,
            "sessionKey": session_key,
            "reply": reply.as_ref().map(|(text, _)| json!({"text": text})),
            "duplicate": false,
        });
        if reply.is_none() {
            response["delivered"] = false.into();
            response["note"] = match (managed, kind) {
                // A standalone server knows the routes, not what runs the agents.
                (false, _) => "this server runs no runtimes (standalone `deepcli access serve`): the route is the answer".into(),
                (true, RuntimeKind::Process) => format!("agent `{agent_id}` runs a process runtime, which takes no prompts: nothing here to deliver to; the route is the answer").into(),
                (true, _) => format!("agent `{agent_id}` has no runtime (runtime kind none): the route is the answer").into(),
            };
        }
        let sent = response.to_string();
        let (reply_text, notes) = reply.unzip();
        let mut turns: Vec<Turn> = notes
            .unwrap_or_default()
            .into_iter()
            .map(Turn::note)
            .collect();
        turns.push(Turn {
            provenance: Provenance::Inbound,
            message_id: Some(envelope.message_id.clone()),
            sender: envelope.sender.clone(),
            text: envelope.text.clone(),
            route: Some(response["route"].clone()),
        });
        if let Some(text) = &reply_text {
            turns.push(Turn {
                provenance: Provenance::Agent,
                message_id: None,
                sender: None,
                text: text.clone(),
                route: None,
            });
        }
        {
            let (session_key, key) = (session_key.to_string(), key.clone());
            let sent = sent.clone();
            self.blocking(move |store| {
                store.record_turn(&session_key, &turns, Some((&key, &sent)), counted.as_ref())
            })
            .await?;
        }
        if let Some(last_id) = given {
            self.forget_context(session_key, last_id).await?;
        }
        self.metrics.delivered(started.elapsed());
        if let Some(reply_text) = reply_text {
            self.send_reply(plan, key, envelope, session_key, &reply_text);
        }
        Ok(Delivered::recorded(sent))
    }

    /// An inbound message whose turn passed its time and was cancelled: recorded as
    /// delivered with the state `uncertain` (the agent may have acted before it stopped), so
    /// that a redelivery (the same message id) is answered with that state and never prompts
    /// the agent again. The caller gets `e` (504).
    async fn timed_out(
        &self,
        envelope: &Envelope,
        key: &DeliveryKey,
        session_key: &str,
        route: &route::Route,
        e: AccessError,
    ) -> AccessError {
        let AccessError::Turn(TurnError::TimedOut { confirmed, why, .. }) = &e else {
            return e;
        };
        let cancel = if *confirmed { "confirmed" } else { "uncertain" };
        let response = json!({
            "route": route,
            "sessionKey": session_key,
            "reply": null,
            "duplicate": false,
            "delivered": true,
            "state": "uncertain",
            "cancel": cancel,
            "error": e.to_string(),
            "note": format!(
                "the agent's turn passed its time ({}) and was cancelled (cancel {cancel}); whatever it did is not known, so this message is not prompted again",
                why.as_str()
            ),
        })
        .to_string();
        let turns = vec![
            Turn {
                provenance: Provenance::Inbound,
                message_id: Some(envelope.message_id.clone()),
                sender: envelope.sender.clone(),
                text: envelope.text.clone(),
                route: Some(serde_json::to_value(route).unwrap_or_default()),
            },
            Turn::note(format!(
                "the turn was cancelled after its time ({}): cancel {cancel}",
                why.as_str()
            )),
        ];
        let (k, dk) = (session_key.to_string(), key.clone());
        if let Err(failed) = self
            .blocking(move |s| s.record(&k, &turns, Some((&dk, &response))))
            .await
        {
            tracing::warn!(error = %failed, "cannot record a timed-out delivery");
        }
        e
    }

    /// Hands `text`, the answer to `envelope`, to the reply sink when its account has a
    /// `replyUrl` (and a webhook secret to sign with).
    pub(super) fn send_reply(
        &self,
        plan: &AccessPlan,
        key: &DeliveryKey,
        envelope: &Envelope,
        session_key: &str,
        text: &str,
    ) {
        if let Some(account) = plan
            .accounts
            .get(&AccountKey::new(&key.channel, &key.account_id))
            && let (Some(url), Ok(secret)) = (&account.reply_url, &account.webhook_secret)
        {
            self.reply.send(
                url.clone(),
                secret.clone(),
                key.clone(),
                ReplyPost {
                    channel: key.channel.clone(),
                    account_id: key.account_id.clone(),
                    message_id: Some(key.message_id.clone()),
                    session_key: session_key.to_string(),
                    peer: envelope.route.peer.clone(),
                    thread_id: envelope.thread_id.clone(),
                    text: text.to_string(),
                    about: About::Answer,
                },
            );
        }
    }
}
