//! The turns running now, by session key, for an operator's cancel to wait on their end, and
//! the words of a cancel's outcome.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::runtime::StopReason;

/// A turn's end: its stop reason, `None` for a turn that ended without one.
pub(super) type Ended = Option<Option<StopReason>>;

/// The turns running now, by session key.
#[derive(Default)]
pub(super) struct RunningTurns(Mutex<HashMap<String, watch::Sender<Ended>>>);

impl RunningTurns {
    /// Waits on the end of the turn running in `session_key`, if one is.
    pub(super) fn watch(&self, session_key: &str) -> Option<watch::Receiver<Ended>> {
        self.0
            .lock()
            .ok()
            .and_then(|m| m.get(session_key).map(|tx| tx.subscribe()))
    }
}

/// A running turn's entry in [`RunningTurns`], taken out however the turn ends.
pub(super) struct Running<'a> {
    turns: &'a RunningTurns,
    session_key: &'a str,
    tx: watch::Sender<Ended>,
}

impl<'a> Running<'a> {
    pub(super) fn start(turns: &'a RunningTurns, session_key: &'a str) -> Running<'a> {
        let (tx, _) = watch::channel(None);
        if let Ok(mut map) = turns.0.lock() {
            map.insert(session_key.to_string(), tx.clone());
        }
        Running {
            turns,
            session_key,
            tx,
        }
    }

    pub(super) fn end(&self, stop_reason: Option<StopReason>) {
        self.tx.send_replace(Some(stop_reason));
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.tx.borrow().is_none() {
            self.tx.send_replace(Some(None));
        }
        let mut map = match self.turns.0.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map
            .get(self.session_key)
            .is_some_and(|tx| tx.same_channel(&self.tx))
        {
            map.remove(self.session_key);
        }
    }
}

/// The traced turns running now, by session key: the span a Hub tool call made during the turn
/// is a child of (`crate::traces`). Empty while traces are off.
#[derive(Default)]
pub(super) struct TurnSpans(Mutex<HashMap<String, tracing::Span>>);

impl TurnSpans {
    pub(super) fn get(&self, session_key: &str) -> Option<tracing::Span> {
        self.0.lock().ok()?.get(session_key).cloned()
    }

    /// Holds `span` as `session_key`'s turn until the guard is dropped; a disabled span (traces
    /// off) is not held.
    pub(super) fn hold(&self, session_key: &str, span: &tracing::Span) -> Option<HeldSpan<'_>> {
        if span.is_disabled() {
            return None;
        }
        let mut map = self.0.lock().ok()?;
        map.insert(session_key.to_string(), span.clone());
        Some(HeldSpan {
            spans: self,
            session_key: session_key.to_string(),
            id: span.id(),
        })
    }
}

/// A turn's span in [`TurnSpans`], taken out when the turn ends.
pub(super) struct HeldSpan<'a> {
    spans: &'a TurnSpans,
    session_key: String,
    id: Option<tracing::Id>,
}

impl Drop for HeldSpan<'_> {
    fn drop(&mut self) {
        let mut map = match self.spans.0.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map
            .get(&self.session_key)
            .is_some_and(|s| s.id() == self.id)
        {
            map.remove(&self.session_key);
        }
    }
}

/// What came of an operator's cancel of the turn running in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CancelState {
    /// No turn was running there: nothing to cancel.
    NotRunning,
    /// The runtime ended the turn with stopReason `cancelled`.
    Confirmed,
    /// The turn ended otherwise (or not within the grace): what it did is not known.
    Uncertain,
}

/// Why a turn was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelWhy {
    /// The agent's `budgets.turnSeconds`.
    TurnSeconds,
    /// The prompt timeout (the Access layer's, or a spawn's run timeout).
    Timeout,
}

impl CancelWhy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CancelWhy::TurnSeconds => "turnSeconds",
            CancelWhy::Timeout => "timeout",
        }
    }
}
