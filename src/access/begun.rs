//! Inbound turns that have begun (state table `turns_started`, migration 13).
//!
//! An inbound message's turn is written down before its agent is prompted, and taken out in
//! the transaction that records what came of it. A row left at start belongs to a turn the
//! last controller did not see end (it was killed mid-turn): the agent may have acted on it,
//! so the message is recorded as delivered with the state `uncertain` and is never prompted
//! again, however often its platform or the adapter's inbox hands it in. The turn counts
//! against the agent's budgets like any other.

use serde_json::{Value, json};

use super::placement::Fence;
use super::store::{AccessStore, DeliveryKey, Turn};
use crate::state::db::{Behavior, Query, params};
use crate::state::{Provenance, StateError};

/// An inbound turn about to be prompted.
#[derive(Debug, Clone)]
pub(crate) struct BegunTurn {
    pub key: DeliveryKey,
    pub session_key: String,
    pub agent_id: String,
    /// The route, as the delivery's response gives it.
    pub route: Value,
    pub sender: Option<Value>,
    pub text: String,
}

/// What a delivery whose turn began and never ended answers, now and on every redelivery.
fn uncertain_response(route: &Value, session_key: &str) -> Value {
    json!({
        "route": route,
        "sessionKey": session_key,
        "reply": null,
        "duplicate": false,
        "delivered": true,
        "state": "uncertain",
        "note": "the controller stopped during this message's turn; whatever the agent did is not known, so this message is not prompted again",
    })
}

/// The transcript line that says so.
const STOPPED_NOTE: &str =
    "the controller stopped during this turn: its outcome is not known (not prompted again)";

impl AccessStore {
    /// Writes `turn` down as begun, at `at_ms` (when its budget admitted it). With a `fence`
    /// (several replicas), only while its holder still holds the agent's claim: a replica
    /// whose claim another took while it was frozen prompts nothing.
    pub(crate) fn begin_turn(
        &self,
        turn: &BegunTurn,
        at_ms: i64,
        fence: Option<&Fence>,
    ) -> Result<(), StateError> {
        let k = &turn.key;
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            if let Some(fence) = fence {
                crate::state::cluster::check_fence(
                    &tx,
                    crate::state::cluster::ClaimKind::Agent,
                    &turn.agent_id,
                    &fence.holder,
                    fence.token,
                )?;
            }
            tx.execute(
                "INSERT INTO turns_started (channel, account_id, peer_kind, peer_id, thread_id, message_id,
                     session_key, agent_id, at_ms, route, sender, text, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                 ON CONFLICT (channel, account_id, peer_kind, peer_id, thread_id, message_id) DO UPDATE SET
                     session_key = excluded.session_key, agent_id = excluded.agent_id, at_ms = excluded.at_ms,
                     route = excluded.route, sender = excluded.sender, text = excluded.text, at = excluded.at",
                params![
                    k.channel,
                    k.account_id,
                    k.peer_kind,
                    k.peer_id,
                    k.thread_id,
                    k.message_id,
                    turn.session_key,
                    turn.agent_id,
                    at_ms,
                    turn.route.to_string(),
                    turn.sender.as_ref().map(Value::to_string),
                    turn.text,
                    crate::clock::now()
                ],
            )?;
            tx.commit()
        })
    }

    /// Takes a begun turn out without a delivery: its prompt never reached the agent, or
    /// failed in a way the caller retries.
    pub(crate) fn forget_turn(&self, key: &DeliveryKey) -> Result<(), StateError> {
        self.db
            .write(|c| super::store::forget_begun(&*c, key).map(drop))
    }

    /// Settles every turn the last controller began and did not see end (of `agent` only,
    /// when given: the agent a replica takes over from one that died): each becomes an
    /// `uncertain` delivery with its transcript rows and its budget turn, in one transaction
    /// per turn. Returns how many there were. Runs before anything is served.
    pub(crate) fn settle_begun_turns(&self, agent: Option<&str>) -> Result<usize, StateError> {
        let begun = self.db.write(|c| {
            c.query_map(
                "SELECT channel, account_id, peer_kind, peer_id, thread_id, message_id,
                     session_key, agent_id, at_ms, route, sender, text
                 FROM turns_started WHERE ?1 = '' OR agent_id = ?1 ORDER BY at_ms",
                params![agent.unwrap_or("")],
                |r| {
                    Ok((
                        BegunTurn {
                            key: DeliveryKey {
                                channel: r.get(0)?,
                                account_id: r.get(1)?,
                                peer_kind: r.get(2)?,
                                peer_id: r.get(3)?,
                                thread_id: r.get(4)?,
                                message_id: r.get(5)?,
                            },
                            session_key: r.get(6)?,
                            agent_id: r.get(7)?,
                            route: parse(r.get::<String>(9)?),
                            sender: r.get::<Option<String>>(10)?.map(parse),
                            text: r.get(11)?,
                        },
                        r.get::<i64>(8)?,
                    ))
                },
            )
        })?;
        for (turn, at_ms) in &begun {
            let response = uncertain_response(&turn.route, &turn.session_key).to_string();
            let turns = [
                Turn {
                    provenance: Provenance::Inbound,
                    message_id: Some(turn.key.message_id.clone()),
                    sender: turn.sender.clone(),
                    text: turn.text.clone(),
                    route: Some(turn.route.clone()),
                },
                Turn::note(STOPPED_NOTE.to_string()),
            ];
            // Its usage is unknown: it counts as a turn, not in tokens or cost.
            let counted = super::store::CountedTurn {
                agent_id: turn.agent_id.clone(),
                at_ms: *at_ms,
                run_id: None,
                usage: super::budget::TurnUsage::default(),
            };
            self.record_turn(
                &turn.session_key,
                &turns,
                Some((&turn.key, &response)),
                Some(&counted),
            )?;
        }
        Ok(begun.len())
    }
}

fn parse(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::store::on_both_backends;

    fn key(message_id: &str) -> DeliveryKey {
        DeliveryKey {
            channel: "telegram".into(),
            account_id: "default".into(),
            peer_kind: "direct".into(),
            peer_id: "7".into(),
            thread_id: String::new(),
            message_id: message_id.into(),
        }
    }

    fn begun(message_id: &str) -> BegunTurn {
        BegunTurn {
            key: key(message_id),
            session_key: "agent:a:main".into(),
            agent_id: "a".into(),
            route: json!({"agentId": "a"}),
            sender: Some(json!({"id": "7"})),
            text: format!("do {message_id}"),
        }
    }

    /// A turn left begun is settled once: an `uncertain` delivery, its message and a note in
    /// the transcript, a budget turn at its admission time; a turn whose outcome was recorded
    /// leaves nothing to settle.
    #[test]
    fn a_turn_left_begun_is_settled_uncertain_and_counted() {
        on_both_backends(|store| {
            store.begin_turn(&begun("m1"), 1_000, None).unwrap();
            store.begin_turn(&begun("m2"), 2_000, None).unwrap();
            // Begun again (a retry): one row, as it is now.
            store.begin_turn(&begun("m2"), 2_500, None).unwrap();
            // A turn still running is where its session last took a message from.
            let route = store.session_route("agent:a:main").unwrap().unwrap();
            assert_eq!(route.peer_id, "7");
            // m2 ended: its outcome recorded with its delivery.
            store
                .record_turn("agent:a:main", &[], Some((&key("m2"), "{}")), None)
                .unwrap();
            assert_eq!(store.settle_begun_turns(None).unwrap(), 1);
            assert_eq!(store.settle_begun_turns(None).unwrap(), 0, "settled once");

            let response: Value =
                serde_json::from_str(&store.delivered(&key("m1")).unwrap().unwrap()).unwrap();
            assert_eq!(response["state"], "uncertain");
            assert_eq!(response["route"], json!({"agentId": "a"}));
            let said = store.transcript("agent:a:main", 10).unwrap();
            let texts: Vec<&str> = said.iter().map(|t| t.text.as_str()).collect();
            assert_eq!(texts, ["do m1", STOPPED_NOTE]);
            let rows = store.budget_rows(3_000).unwrap();
            assert_eq!(rows.len(), 1);
            assert_eq!((rows[0].agent_id.as_str(), rows[0].at_ms), ("a", 1_000));
        });
    }

    /// With several replicas a turn is begun only under its agent's claim, and the replica
    /// that takes an agent over settles that agent's turns alone.
    #[test]
    fn a_turn_begins_under_its_agents_claim_and_is_settled_by_agent() {
        on_both_backends(|store| {
            use crate::state::cluster::{self, ClaimKind};
            let claim = store
                .db
                .write(|c| cluster::claim(c, ClaimKind::Agent, "a", "r1", 60_000))
                .unwrap()
                .unwrap();
            let fence = |holder: &str, token| Fence {
                holder: holder.into(),
                token,
            };
            store
                .begin_turn(&begun("m1"), 1_000, Some(&fence("r1", claim.token)))
                .unwrap();
            // Another replica, or this one with a token it no longer holds: nothing written.
            for stale in [fence("r2", claim.token), fence("r1", claim.token - 1)] {
                let e = store
                    .begin_turn(&begun("m2"), 2_000, Some(&stale))
                    .unwrap_err();
                assert!(e.to_string().contains("fenced"), "{e}");
            }
            let mut other = begun("m3");
            other.agent_id = "b".into();
            store.begin_turn(&other, 3_000, None).unwrap();
            assert_eq!(store.settle_begun_turns(Some("a")).unwrap(), 1, "m1 only");
            assert_eq!(store.delivered(&key("m2")).unwrap(), None);
            assert_eq!(
                store.delivered(&key("m3")).unwrap(),
                None,
                "b's turn runs on"
            );
            assert_eq!(store.settle_begun_turns(None).unwrap(), 1);
        });
    }

    /// A turn forgotten (its prompt never reached the agent) is not settled.
    #[test]
    fn a_forgotten_turn_is_not_settled() {
        on_both_backends(|store| {
            store.begin_turn(&begun("m1"), 1_000, None).unwrap();
            store.forget_turn(&key("m1")).unwrap();
            assert_eq!(store.settle_begun_turns(None).unwrap(), 0);
            assert_eq!(store.delivered(&key("m1")).unwrap(), None);
        });
    }
}
