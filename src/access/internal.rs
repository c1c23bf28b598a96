//! What the Hub and the controller ask of the Access layer about sessions, now the turn
//! engine's (`crate::sessions`): a turn cancelled, a session closed, queue depths; a message
//! posted to a session's last external route. And the engine's records, kept in the Access
//! layer's tables ([`SessionStore`] over [`AccessStore`]).
//!
//! The Access layer does not know the Hub: the composition root hands the engine the Hub's
//! [`crate::sessions::McpDoor`], and the Hub calls the methods here or the engine itself.
//! Policy is the Hub's; this only delivers.

use super::store::{AccessStore, CountedTurn, RefusalRow, RuntimeSession, Turn};
use super::{Access, Beat};
use crate::sessions::budget::BudgetRefusal;
use crate::sessions::{
    GivenSection, KnownSession, SessionStore, TurnCount, TurnMetrics, TurnRecord,
};
use crate::state::{Provenance, StateError};

impl Access {
    /// Asks the runtime to cancel the turn running in `session_key` (ACP `session/cancel`).
    /// Whether a cancel was sent: false when the session is not open in the agent's runtime.
    pub(crate) async fn cancel_turn(&self, agent_id: &str, session_key: &str) -> bool {
        self.sessions.cancel_turn(agent_id, session_key).await
    }

    /// The operator cancels the turn running in `session_key` (`deepcli sessions cancel`):
    /// see [`crate::sessions::Sessions::cancel_running_turn`].
    pub(crate) async fn cancel_running_turn(
        &self,
        agent_id: &str,
        session_key: &str,
        grace: std::time::Duration,
    ) -> super::CancelState {
        self.sessions
            .cancel_running_turn(agent_id, session_key, grace)
            .await
    }

    /// Ends `session_key`'s runtime session (`session/close` where the agent offers it) and
    /// forgets it; a note on what happened, `None` when it was not open.
    pub(crate) async fn close_runtime_session(
        &self,
        agent_id: &str,
        session_key: &str,
    ) -> Option<String> {
        self.sessions
            .close_runtime_session(agent_id, session_key)
            .await
    }

    /// What agent `agent_id`'s runtime is doing: `ready`, or its phase (`starting`, …).
    pub(crate) fn runtime_phase(&self, agent_id: &str) -> String {
        self.sessions.runtime_phase(agent_id)
    }

    /// Per agent (of the session key), messages waiting in its sessions' FIFOs plus those
    /// being handled.
    pub(crate) fn queue_depths(&self) -> std::collections::HashMap<String, usize> {
        self.sessions.queue_depths(super::store::agent_of_key)
    }

    /// Messages waiting in a session's FIFO, plus the one being handled.
    pub(crate) fn queue_depth(&self, session_key: &str) -> usize {
        self.sessions.queue_depth(session_key)
    }

    /// Says `text` into the external conversation `session_key` last took an envelope from:
    /// into that conversation's transcript and the outbox, which the account's carrier posts
    /// from (`why` and `cause_id`, the run, mark both).
    pub(crate) async fn post_to_session_route(
        &self,
        session_key: &str,
        text: String,
        why: super::outbox::Cause,
        cause_id: &str,
    ) -> Beat {
        let key = session_key.to_string();
        match self.blocking(move |s| s.session_route(&key)).await {
            Err(e) => Beat::Failed(e.to_string()),
            Ok(None) => Beat::Kept(format!(
                "{session_key} has no external conversation: nothing was posted"
            )),
            Ok(Some(route)) => self.send_on(&route, text, why, Some(cause_id)).await,
        }
    }
}

/// The turn engine's counts, in the Access layer's metrics.
impl TurnMetrics for super::metrics::Metrics {
    fn waiting(&self, delta: i64) {
        use std::sync::atomic::Ordering::SeqCst;
        if delta >= 0 {
            self.waiting.fetch_add(delta.unsigned_abs(), SeqCst);
        } else {
            self.waiting.fetch_sub(delta.unsigned_abs(), SeqCst);
        }
    }

    fn refused(&self) {
        self.budget_refusals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn delivered(&self, took: std::time::Duration) {
        super::metrics::Metrics::delivered(self, took);
    }
}

impl From<TurnCount> for CountedTurn {
    fn from(c: TurnCount) -> CountedTurn {
        CountedTurn {
            agent_id: c.agent_id,
            at_ms: c.at_ms,
            run_id: c.run_id,
            usage: c.usage,
        }
    }
}

/// The turn engine's records, in the Access layer's tables.
impl SessionStore for AccessStore {
    fn given_section(&self, session_key: &str) -> Result<Option<GivenSection>, StateError> {
        AccessStore::given_section(self, session_key)
    }

    fn record_section(
        &self,
        session_key: &str,
        agent_id: &str,
        given: &GivenSection,
    ) -> Result<(), StateError> {
        AccessStore::record_section(self, session_key, agent_id, given)
    }

    fn agent_was_told(&self, agent_id: &str) -> Result<bool, StateError> {
        AccessStore::agent_was_told(self, agent_id)
    }

    fn runtime_session(&self, session_key: &str) -> Result<Option<KnownSession>, StateError> {
        Ok(
            AccessStore::runtime_session(self, session_key)?.map(|s| KnownSession {
                id: s.id,
                instance: s.instance,
            }),
        )
    }

    fn set_runtime_session(
        &self,
        session_key: &str,
        agent_id: &str,
        session: &KnownSession,
    ) -> Result<(), StateError> {
        let session = RuntimeSession {
            id: session.id.clone(),
            instance: session.instance.clone(),
        };
        AccessStore::set_runtime_session(self, session_key, agent_id, &session)
    }

    fn recent_turns(
        &self,
        session_key: &str,
        limit: usize,
    ) -> Result<Vec<(Provenance, String)>, StateError> {
        Ok(self
            .transcript(session_key, limit)?
            .into_iter()
            .map(|r| (r.provenance, r.text))
            .collect())
    }

    fn record_count(&self, session_key: &str, count: &TurnCount) -> Result<(), StateError> {
        let counted = CountedTurn::from(count.clone());
        self.record_turn(session_key, &[], None, Some(&counted))
    }

    fn record_exchange(
        &self,
        session_key: &str,
        notes: &[String],
        record: &TurnRecord,
        answer: Result<&str, String>,
        count: Option<&TurnCount>,
    ) -> Result<(), StateError> {
        let mut turns: Vec<Turn> = notes.iter().cloned().map(Turn::note).collect();
        turns.push(Turn {
            provenance: record.provenance,
            message_id: None,
            sender: None,
            text: record.text.clone(),
            route: Some(record.meta.clone()),
        });
        match answer {
            Ok(text) => turns.push(Turn {
                provenance: Provenance::Agent,
                message_id: None,
                sender: None,
                text: text.to_string(),
                route: Some(record.meta.clone()),
            }),
            Err(e) => turns.push(Turn::note(format!("the message got no answer: {e}"))),
        }
        let counted = count.cloned().map(CountedTurn::from);
        self.record_turn(session_key, &turns, None, counted.as_ref())
    }

    fn record_refusal(
        &self,
        refusal: &BudgetRefusal,
        session_key: Option<&str>,
        run_id: Option<&str>,
    ) -> Result<(), StateError> {
        AccessStore::record_refusal(
            self,
            &RefusalRow {
                agent_id: refusal.agent_id.clone(),
                session_key: session_key.map(str::to_string),
                run_id: run_id.map(str::to_string),
                refusal: refusal.clone(),
            },
        )
    }

    fn record_spawn(
        &self,
        agent_id: &str,
        at_ms: i64,
        session_key: &str,
    ) -> Result<(), StateError> {
        AccessStore::record_spawn(self, agent_id, at_ms, session_key)
    }

    fn cancel_requested(
        &self,
        agent_id: &str,
        session_key: &str,
        run_id: Option<&str>,
        why: &str,
    ) -> Result<i64, StateError> {
        AccessStore::cancel_requested(self, agent_id, session_key, run_id, why)
    }

    fn cancel_decided(&self, id: i64, state: &str, note: &str) -> Result<(), StateError> {
        AccessStore::cancel_decided(self, id, state, note)
    }
}
