//! What the turn engine reads and writes of a session's records, and nothing else: which
//! runtime session a key maps to, its recent turns (context for a new session), a turn's
//! budget row, cancels, refusals and spawns. The Access layer implements it over its tables;
//! the engine's tests over memory. Blocking calls: the engine runs them off the async threads.

use serde_json::Value;

use super::budget::{BudgetRefusal, TurnUsage};
use crate::state::{Provenance, StateError};

/// The runtime session a session key maps to, and the runtime instance that issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KnownSession {
    pub id: String,
    /// `None` for a mapping recorded before instances were (state migration 3).
    pub instance: Option<String>,
}

/// A turn as its agent's budgets counted it (with the usage its runtime reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnCount {
    pub agent_id: String,
    /// When the turn began, ms since the epoch.
    pub at_ms: i64,
    pub run_id: Option<String>,
    pub usage: TurnUsage,
}

/// What the transcript keeps of a message put into a session by the Hub or the operator.
#[derive(Debug, Clone)]
pub(crate) struct TurnRecord {
    /// `inter_session`, `operator`, `a2a`.
    pub provenance: Provenance,
    /// The message's text as kept (the prompt adds framing).
    pub text: String,
    /// The provenance record (source session, tool, run and correlation ids).
    pub meta: Value,
}

/// The system section a session was last given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GivenSection {
    pub runtime_session_id: String,
    pub hash: String,
    pub text: String,
    pub at: String,
}

pub(crate) trait SessionStore: Send + Sync + 'static {
    /// The system section `session_key` was last given.
    fn given_section(&self, session_key: &str) -> Result<Option<GivenSection>, StateError>;
    /// Records the system section `session_key` (of `agent_id`) was given now.
    fn record_section(
        &self,
        session_key: &str,
        agent_id: &str,
        given: &GivenSection,
    ) -> Result<(), StateError>;
    /// Whether a session of `agent_id` was ever given a system section: if not, its next one is
    /// its first run.
    fn agent_was_told(&self, agent_id: &str) -> Result<bool, StateError>;
    fn runtime_session(&self, session_key: &str) -> Result<Option<KnownSession>, StateError>;
    fn set_runtime_session(
        &self,
        session_key: &str,
        agent_id: &str,
        session: &KnownSession,
    ) -> Result<(), StateError>;
    /// The last `limit` transcript rows of `session_key`, oldest first: who said it, and what.
    fn recent_turns(
        &self,
        session_key: &str,
        limit: usize,
    ) -> Result<Vec<(Provenance, String)>, StateError>;
    /// A turn's budget row, on its own (a failed turn, a heartbeat's).
    fn record_count(&self, session_key: &str, count: &TurnCount) -> Result<(), StateError>;
    /// A message the engine delivered, in one transaction: the notes on how its session was
    /// opened, the message, the answer (or why it got none), and the turn's budget row.
    fn record_exchange(
        &self,
        session_key: &str,
        notes: &[String],
        record: &TurnRecord,
        answer: Result<&str, String>,
        count: Option<&TurnCount>,
    ) -> Result<(), StateError>;
    fn record_refusal(
        &self,
        refusal: &BudgetRefusal,
        session_key: Option<&str>,
        run_id: Option<&str>,
    ) -> Result<(), StateError>;
    fn record_spawn(&self, agent_id: &str, at_ms: i64, session_key: &str)
    -> Result<(), StateError>;
    /// A cancel asked for (`why`: `timeout`, `turnSeconds`, `operator`); its id.
    fn cancel_requested(
        &self,
        agent_id: &str,
        session_key: &str,
        run_id: Option<&str>,
        why: &str,
    ) -> Result<i64, StateError>;
    /// What came of cancel `id`: `confirmed` or `uncertain`, and why.
    fn cancel_decided(&self, id: i64, state: &str, note: &str) -> Result<(), StateError>;
}
