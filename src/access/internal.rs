//! The door the Hub (hub.md) uses into sessions: a message from another session, from the
//! operator or from the Hub itself is handled in the target session's FIFO, exactly like an
//! inbound envelope (one turn at a time per session key), and recorded in its transcript with
//! its own provenance. Also what every runtime session is given at `session/new` and
//! `session/load`: the MCP servers the Hub's door names ([`McpDoor`]).
//!
//! The Access layer does not know the Hub: the controller hands it a [`McpDoor`], and the Hub
//! calls the methods here. Policy is the Hub's; this only delivers.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::task::Poll;
use std::time::Instant;

use agent_client_protocol::v1::schema::{CancelNotification, McpServer};
use serde_json::Value;

use super::route::SessionOptions;
use super::store::{LastRoute, Turn};
use super::{Access, AccessError, Beat};
use crate::runtime::acp::AcpHandle;
use crate::state::Provenance;

/// What gives a runtime session its MCP servers: the Hub, through the controller.
pub trait McpDoor: Send + Sync {
    /// The `mcpServers` (ACP's JSON shape) of a runtime session of agent `agent_id` that
    /// serves `session_key`, being opened now; `http`: the agent takes MCP over HTTP
    /// (`mcpCapabilities.http`). Each call may mint a new capability token for the session.
    fn servers(&self, agent_id: &str, session_key: &str, http: bool) -> Vec<Value>;

    /// The runtime session of `session_key` was closed (a `oneshot` session after its
    /// reply): what was given for it is withdrawn.
    fn closed(&self, session_key: &str);
}

/// A runtime's answer to one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The agent message chunks, put together.
    pub text: String,
    /// The `stopReason` the runtime gave (`end_turn`, `cancelled`, …), when it gave one.
    pub stop_reason: Option<String>,
    /// How long the runtime took: from opening (or finding) the session to the prompt's
    /// answer — the agent's time and ACP's, none of the queue's.
    pub runtime_time: std::time::Duration,
    /// The turn as its agent's budgets counted it (with the usage its runtime reported),
    /// recorded with the turn's transcript rows.
    pub counted: Option<super::store::CountedTurn>,
}

/// A message the Hub (or the operator) puts into a session.
#[derive(Debug, Clone)]
pub struct InternalMessage {
    /// How the transcript records it: `inter_session` or `operator`.
    pub provenance: Provenance,
    /// What the transcript keeps as the message's text.
    pub text: String,
    /// What the model is given (the text with its framing).
    pub prompt: String,
    /// The provenance record (source session, tool, run and correlation ids), kept in the
    /// transcript row's `route` column.
    pub meta: Value,
    pub options: SessionOptions,
    /// Waits for its turn however many messages wait before it (the queue limit is for
    /// callers who can send again later; an announce of a finished run cannot).
    pub unbounded: bool,
}

impl Access {
    /// Sets what gives runtime sessions their MCP servers; only the first call counts.
    pub fn set_mcp_door(&self, door: Arc<dyn McpDoor>) {
        let _ = self.door.set(door);
    }

    /// The MCP servers for a runtime session opened now for `session_key`.
    pub(super) fn mcp_servers(
        &self,
        handle: &AcpHandle,
        agent_id: &str,
        session_key: &str,
    ) -> Vec<McpServer> {
        let Some(door) = self.door.get() else {
            return Vec::new();
        };
        let http = handle.info["agentCapabilities"]["mcpCapabilities"]["http"] == true;
        door.servers(agent_id, session_key, http)
            .into_iter()
            .filter_map(|server| match serde_json::from_value(server) {
                Ok(server) => Some(server),
                Err(e) => {
                    tracing::warn!(error = %e, "an MCP server the Hub named is not ACP's shape; left out");
                    None
                }
            })
            .collect()
    }

    /// Delivers `message` into `session_key` of agent `agent_id` in the session's turn (its
    /// FIFO, shared with inbound envelopes) and returns the agent's answer. `queued` is
    /// dropped once the message holds its place in the FIFO (or was refused). `started` is
    /// called when the turn begins (the message stopped waiting); when it refuses, the message
    /// is withdrawn, unprompted and unrecorded. The message and the answer go into the
    /// session's transcript, the answer with the same provenance record.
    pub async fn deliver_internal(
        self: &Arc<Self>,
        agent_id: &str,
        session_key: &str,
        message: InternalMessage,
        queued: Option<tokio::sync::oneshot::Sender<()>>,
        started: impl FnOnce() -> Result<(), String>,
    ) -> Result<Answer, AccessError> {
        let plan = self.current()?;
        if !plan.runtime(agent_id).takes_prompts() || self.runtimes.is_none() {
            return Err(AccessError::Internal(format!(
                "agent `{agent_id}` has no ACP or A2A runtime here: it takes no prompts"
            )));
        }
        let begun = Instant::now();
        let queue = self.queue(session_key);
        // `queued` is let go (dropped) once this message has its place in the FIFO: the
        // caller may then accept the session's next message, which lines up behind it.
        let mut queued = queued;
        let _turn = match queue.turn.try_lock() {
            Ok(turn) => {
                drop(queued.take());
                turn
            }
            Err(_) => {
                let waiting = queue.waiting.fetch_add(1, SeqCst);
                self.metrics.waiting.fetch_add(1, SeqCst);
                let turn = if message.unbounded || waiting < self.settings.queue_limit {
                    // The first poll puts this waiter in the lock's (first-come) queue.
                    let mut lock = std::pin::pin!(queue.turn.lock());
                    let first =
                        std::future::poll_fn(|cx| Poll::Ready(lock.as_mut().poll(cx))).await;
                    drop(queued.take());
                    Some(match first {
                        Poll::Ready(turn) => turn,
                        Poll::Pending => lock.await,
                    })
                } else {
                    None
                };
                queue.waiting.fetch_sub(1, SeqCst);
                self.metrics.waiting.fetch_sub(1, SeqCst);
                turn.ok_or_else(|| AccessError::QueueFull {
                    session_key: session_key.to_string(),
                    limit: self.settings.queue_limit,
                })?
            }
        };
        started().map_err(AccessError::Withdrawn)?;
        let prompted = Instant::now();
        let answered = self
            .prompt_answer(agent_id, session_key, &message.prompt, &message.options)
            .await
            .map(|(mut answer, notes)| {
                answer.runtime_time = prompted.elapsed();
                (answer, notes)
            });
        let (answer, notes) = match answered {
            Ok((answer, notes)) => (Ok(answer), notes),
            Err(e) => (Err(e), Vec::new()),
        };
        let mut turns: Vec<Turn> = notes.into_iter().map(Turn::note).collect();
        turns.push(Turn {
            provenance: message.provenance,
            message_id: None,
            sender: None,
            text: message.text,
            route: Some(message.meta.clone()),
        });
        match &answer {
            Ok(answer) => turns.push(Turn {
                provenance: Provenance::Agent,
                message_id: None,
                sender: None,
                text: answer.text.clone(),
                route: Some(message.meta),
            }),
            Err(e) => turns.push(Turn::note(format!("the message got no answer: {e}"))),
        }
        let key = session_key.to_string();
        let counted = answer.as_ref().ok().and_then(|a| a.counted.clone());
        self.blocking(move |store| store.record_turn(&key, &turns, None, counted.as_ref()))
            .await?;
        self.metrics.delivered(begun.elapsed());
        answer
    }

    /// Asks the runtime to cancel the turn running in `session_key` (ACP `session/cancel`).
    /// Whether a cancel was sent: false when the session is not open in the agent's runtime.
    pub async fn cancel_turn(&self, agent_id: &str, session_key: &str) -> bool {
        if let Some(remote) = self.remote(agent_id) {
            return remote.cancel(session_key).await;
        }
        let Ok(handle) = self.runtime(agent_id) else {
            return false;
        };
        let key = session_key.to_string();
        let Ok(Some(known)) = self.blocking(move |s| s.runtime_session(&key)).await else {
            return false;
        };
        if known.instance.as_deref() != Some(handle.instance.as_str())
            || handle.holder(&known.id).as_deref() != Some(session_key)
        {
            return false;
        }
        let sent = handle
            .cx
            .send_notification(CancelNotification::new(known.id))
            .is_ok();
        // ACP: a client that cancels answers the turn's pending permission requests
        // `cancelled`; their approvals are void.
        if let Some(door) = self.approval_door() {
            door.turn_ended(session_key);
        }
        sent
    }

    /// The operator cancels the turn running in `session_key` (`deepcli sessions cancel`):
    /// ACP `session/cancel`, then `confirmed` when the turn ends with stopReason `cancelled`
    /// within `grace`, `uncertain` when it ends otherwise or not at all (then it stays
    /// recorded as `requested` until it ends). Recorded in `turn_cancels`.
    pub async fn cancel_running_turn(
        &self,
        agent_id: &str,
        session_key: &str,
        grace: std::time::Duration,
    ) -> super::CancelState {
        use super::CancelState;
        let rx = self
            .running
            .lock()
            .ok()
            .and_then(|m| m.get(session_key).map(|tx| tx.subscribe()));
        let Some(mut rx) = rx else {
            return CancelState::NotRunning;
        };
        let id = {
            let (agent, key) = (agent_id.to_string(), session_key.to_string());
            self.blocking(move |s| s.cancel_requested(&agent, &key, None, "operator"))
                .await
                .ok()
        };
        if !self.cancel_turn(agent_id, session_key).await {
            return CancelState::NotRunning;
        }
        let ended = tokio::time::timeout(grace, rx.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|stop| stop.clone());
        let (state, note) = match ended {
            Some(Some(stop)) if stop == "cancelled" => (
                CancelState::Confirmed,
                "the runtime stopped the turn (stopReason cancelled)".to_string(),
            ),
            Some(stop) => (
                CancelState::Uncertain,
                format!(
                    "the turn ended with stopReason {} instead of cancelled",
                    stop.as_deref().unwrap_or("none")
                ),
            ),
            None => (
                CancelState::Uncertain,
                format!(
                    "the runtime did not end the turn within {} ms",
                    grace.as_millis()
                ),
            ),
        };
        if let Some(id) = id {
            let word = if state == CancelState::Confirmed {
                "confirmed"
            } else {
                "uncertain"
            };
            let _ = self
                .blocking(move |s| s.cancel_decided(id, word, &note))
                .await;
        }
        state
    }

    /// Ends `session_key`'s runtime session (`session/close` where the agent offers it) and
    /// forgets it; a note on what happened, `None` when it was not open.
    pub async fn close_runtime_session(&self, agent_id: &str, session_key: &str) -> Option<String> {
        if let Some(door) = self.approval_door() {
            door.session_closed(session_key).await;
        }
        let handle = self.runtime(agent_id).ok()?;
        let key = session_key.to_string();
        let known = self
            .blocking(move |s| s.runtime_session(&key))
            .await
            .ok()
            .flatten()?;
        if known.instance.as_deref() != Some(handle.instance.as_str())
            || handle.holder(&known.id).as_deref() != Some(session_key)
        {
            return None;
        }
        let note = super::close_session(&handle, &known.id).await;
        if let Some(door) = self.door.get() {
            door.closed(session_key);
        }
        Some(note)
    }

    /// What agent `agent_id`'s runtime is doing: `ready`, or its phase (`starting`, …).
    pub fn runtime_phase(&self, agent_id: &str) -> String {
        match self.runtime(agent_id) {
            Ok(_) => "ready".to_string(),
            Err(AccessError::RuntimeDown { status, .. }) => status.to_string(),
            Err(_) => "none".to_string(),
        }
    }

    /// Per agent (of the session key), messages waiting in its sessions' FIFOs plus those
    /// being handled.
    pub fn queue_depths(&self) -> std::collections::HashMap<String, usize> {
        let queues = match self.queues.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        let mut out = std::collections::HashMap::new();
        for (key, q) in queues.iter() {
            let Some(agent) = super::store::agent_of_key(key) else {
                continue;
            };
            let depth = q.waiting.load(SeqCst) + usize::from(q.turn.try_lock().is_err());
            if depth > 0 {
                *out.entry(agent.to_string()).or_default() += depth;
            }
        }
        out
    }

    /// Messages waiting in a session's FIFO, plus the one being handled.
    pub fn queue_depth(&self, session_key: &str) -> usize {
        let queues = match self.queues.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        queues.get(session_key).map_or(0, |q| {
            q.waiting.load(SeqCst) + usize::from(q.turn.try_lock().is_err())
        })
    }

    /// Sends `text` to the external conversation `session_key` last took an envelope from,
    /// through that account's reply sink, and into that conversation's transcript (`why`
    /// names the sender in both: `announce`, …).
    pub async fn post_to_session_route(
        &self,
        session_key: &str,
        text: String,
        why: &'static str,
    ) -> Beat {
        let Some(plan) = self.plan() else {
            return Beat::Skipped("no config in force yet".into());
        };
        let key = session_key.to_string();
        match self.blocking(move |s| s.session_route(&key)).await {
            Err(e) => Beat::Failed(e.to_string()),
            Ok(None) => Beat::Kept(format!(
                "{session_key} has no external conversation: nothing was posted"
            )),
            Ok(Some(route)) => self.send_on(&plan, &route, text, why).await,
        }
    }
}

impl Access {
    /// Sets the ready A2A remotes the controller's supervisor keeps; only the first call counts.
    pub fn set_remotes(&self, remotes: crate::runtime::a2a::RemoteMap) {
        let _ = self.remotes.set(remotes);
    }

    fn remote(&self, agent_id: &str) -> Option<Arc<crate::runtime::a2a::Remote>> {
        self.remotes.get()?.lock().ok()?.get(agent_id).cloned()
    }

    /// A prompt to a remote A2A agent (`runtime.kind: a2a`): one streamed task in the
    /// session's `contextId`. A task that failed is an error; one the remote may have begun
    /// when the stream broke is the runtime failing during the prompt (its outcome unknown).
    pub(super) async fn prompt_remote(
        &self,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &SessionOptions,
    ) -> Result<Answer, AccessError> {
        let Some(remote) = self.remote(agent_id) else {
            // Not ready: the status says why.
            return Err(match self.runtime(agent_id) {
                Err(e) => e,
                Ok(_) => AccessError::Internal(format!("agent `{agent_id}` has no A2A remote")),
            });
        };
        let begun = Instant::now();
        let timeout = options.timeout.unwrap_or(self.settings.prompt_timeout);
        let answered = tokio::time::timeout(timeout, remote.prompt(session_key, text)).await;
        let failed = |what, message| AccessError::RuntimeFailed {
            agent_id: agent_id.to_string(),
            what,
            message,
        };
        match answered {
            Err(_) => {
                // The stream is gone with the timeout: whether the remote stopped is not known.
                remote.cancel(session_key).await;
                Err(AccessError::TimedOut {
                    agent_id: agent_id.to_string(),
                    seconds: timeout.as_secs_f64(),
                    stop_reason: None,
                    confirmed: false,
                    why: super::CancelWhy::Timeout,
                })
            }
            Ok(Err((true, why))) => Err(failed("the prompt", why)),
            Ok(Err((false, why))) => Err(failed("to take the message", why)),
            Ok(Ok(answer)) => {
                let stop_reason = match answer.state.as_str() {
                    "TASK_STATE_COMPLETED" => "end_turn",
                    "TASK_STATE_INPUT_REQUIRED" => "input_required",
                    "TASK_STATE_CANCELED" => "cancelled",
                    other => {
                        return Err(failed(
                            "the task",
                            format!("the remote task ended {other}: {}", answer.text),
                        ));
                    }
                };
                Ok(Answer {
                    text: answer.text,
                    stop_reason: Some(stop_reason.to_string()),
                    runtime_time: begun.elapsed(),
                    counted: None,
                })
            }
        }
    }
}

impl LastRoute {
    /// The route as `channel/account peer-kind:peer-id`.
    pub fn place(&self) -> String {
        format!(
            "{}/{} {}:{}",
            self.channel, self.account_id, self.peer_kind, self.peer_id
        )
    }
}
