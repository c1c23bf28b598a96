//! One turn in a held place of the FIFO: budget admission, the runtime session opened (or
//! found), the model applied, the prompt with its person-aware timeout and cancel, the
//! oneshot close; and the operator's cancel and close of a session's turn.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::McpServer;
use tracing::Instrument;

use super::running::Running;
use super::{
    CancelState, CancelWhy, GivenSection, KnownSession, Place, SessionOptions, Sessions, Stage,
    StopReason, TurnCount, TurnError, TurnOutcome, budget, cap, model, system,
};
use crate::config::model::RuntimeKind;
use crate::runtime::{PromptFile, SessionRuntime};
use crate::state::Provenance;

/// The turn a prompt is: whose, in which session, for which run, cancelled why.
struct TurnRef<'a> {
    agent_id: &'a str,
    session_key: &'a str,
    run_id: Option<&'a str>,
    why: CancelWhy,
    /// The most of the reply kept, in bytes (`budgets.replyBytes`).
    reply_bytes: usize,
}

impl Sessions {
    /// Prompts the agent in the runtime session of `session_key`, in the FIFO place the caller
    /// holds: the answer with its stop reason, its budget row and notes on how the session was
    /// opened. A `oneshot` session is closed after the reply, however the prompt ended.
    pub(crate) async fn turn_in(
        &self,
        place: &Place,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &SessionOptions,
    ) -> Result<TurnOutcome, TurnError> {
        // The agent's turn in the caller's trace; the Hub tool calls it makes are its steps.
        let span = crate::traces::runtime_turn(agent_id, session_key);
        let _held = self.turn_spans.hold(session_key, &span);
        self.prompted(place, agent_id, session_key, text, options)
            .instrument(span)
            .await
    }

    async fn prompted(
        &self,
        _place: &Place,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &SessionOptions,
    ) -> Result<TurnOutcome, TurnError> {
        let remote = self.plan().runtime(agent_id) == RuntimeKind::A2a;
        let handle = if remote {
            None
        } else {
            Some(self.runtime(agent_id)?)
        };
        let limits = self.limits(agent_id);
        let began = budget::now_ms();
        let _permit = match self.budgets.admit_turn(agent_id, &limits, began) {
            Ok(permit) => permit,
            Err(refusal) => {
                self.refused(&refusal, Some(session_key), options.run_id.as_deref())
                    .await;
                return Err(TurnError::BudgetExceeded(refusal));
            }
        };
        if let Some(begun) = options.begun.clone() {
            self.blocking(move |_| (begun.0)(began)).await?;
        }
        let Some(handle) = handle else {
            // A remote A2A agent: its budgets count its turns; it reports no usage (unknown).
            let timeout = options.timeout.unwrap_or(self.settings.prompt_timeout);
            let turn_seconds = limits.turn_seconds.filter(|limit| *limit < timeout);
            let timeout = turn_seconds.unwrap_or(timeout);
            let answered = match self
                .prompt_remote(agent_id, session_key, (text, &options.files), timeout)
                .await
            {
                Err(TurnError::TimedOut {
                    why: _,
                    agent_id,
                    seconds,
                    stop_reason,
                    confirmed,
                }) if turn_seconds.is_some() => Err(TurnError::TimedOut {
                    agent_id,
                    seconds,
                    stop_reason,
                    confirmed,
                    why: CancelWhy::TurnSeconds,
                }),
                answered => answered,
            };
            let answered = answered.map(|mut answer| {
                let total = answer.text.len();
                answer.text = cap::cut(answer.text, total, limits.reply_bytes);
                answer
            });
            let counted = TurnCount {
                agent_id: agent_id.to_string(),
                at_ms: began,
                run_id: options.run_id.clone(),
                usage: budget::TurnUsage::default(),
            };
            return self.counted(session_key, answered, counted).await;
        };
        let opened = self
            .open_session(&*handle, agent_id, session_key, text, options)
            .await?;
        let (session_id, mut notes) = (opened.id, opened.notes);
        let prompt_text = self
            .told(
                agent_id,
                session_key,
                &session_id,
                opened.fresh,
                opened.prompt,
            )
            .await?;
        notes.extend(prompt_text.1);
        let prompt_text = prompt_text.0;
        notes.extend(self.apply_model(&*handle, agent_id, &session_id).await);
        let timeout = options.timeout.unwrap_or(self.settings.prompt_timeout);
        let (timeout, why) = match limits.turn_seconds {
            Some(limit) if limit < timeout => (limit, CancelWhy::TurnSeconds),
            _ => (timeout, CancelWhy::Timeout),
        };
        let turn = TurnRef {
            agent_id,
            session_key,
            run_id: options.run_id.as_deref(),
            why,
            reply_bytes: limits.reply_bytes,
        };
        let answered = self
            .prompt_in(
                &*handle,
                &turn,
                &session_id,
                (prompt_text, &options.files),
                timeout,
            )
            .await;
        if let Some(turns) = &self.turns {
            turns.ended(session_key);
        }
        // What the turn used, as its runtime reported it (unknown when it did not).
        let (totals, answered) = match answered {
            Ok((answer, totals)) => (totals, Ok(answer)),
            Err(e) => (budget::TurnUsage::default(), Err(e)),
        };
        let usage = self
            .budgets
            .turn_usage(&format!("{}/{session_id}", handle.instance()), totals);
        self.budgets.add_usage(agent_id, usage, budget::now_ms());
        let counted = TurnCount {
            agent_id: agent_id.to_string(),
            at_ms: began,
            run_id: options.run_id.clone(),
            usage,
        };
        let answered = self.counted(session_key, answered, counted).await;
        if options.oneshot {
            notes.push(self.close(&*handle, &session_id).await);
            if let Some(door) = self.mcp.as_ref() {
                door.closed(session_key);
            }
            self.forget_given(session_key);
        }
        answered.map(|mut answer| {
            answer.notes = notes;
            answer
        })
    }

    /// A turn's answer with its budget row, which rides in the transcript's transaction; a
    /// failed turn gets no transcript row, so its budget row is recorded on its own.
    async fn counted(
        &self,
        session_key: &str,
        answered: Result<TurnOutcome, TurnError>,
        counted: TurnCount,
    ) -> Result<TurnOutcome, TurnError> {
        match answered {
            Ok(mut answer) => {
                answer.counted = Some(counted);
                Ok(answer)
            }
            Err(e) => {
                let key = session_key.to_string();
                let _ = self.blocking(move |s| s.record_count(&key, &counted)).await;
                Err(e)
            }
        }
    }

    /// The MCP servers for a runtime session opened now for `session_key`.
    fn mcp_servers(
        &self,
        handle: &dyn SessionRuntime,
        agent_id: &str,
        session_key: &str,
    ) -> Vec<McpServer> {
        // Absent only where no runtimes are run (the engine's tests): a process that runs them
        // is built with the Hub's (`Runtimes::mcp`).
        let Some(door) = self.mcp.as_ref() else {
            return Vec::new();
        };
        door.servers(agent_id, session_key, handle.takes_mcp_http())
    }

    /// The runtime session `session_key` speaks in, opened in this runtime instance if it is
    /// not yet: resumed with `session/load` when the agent can and nothing else here holds that
    /// id, else a new session whose first prompt carries this conversation's recent turns.
    /// Returns the session id, the text to prompt with, and notes for the transcript.
    ///
    /// A stored id counts as open only for the runtime instance that issued it: a restarted
    /// runtime may hand the same ids to other conversations. A `oneshot` session is always
    /// new, carries no earlier turns and is not kept in the session map.
    async fn open_session(
        &self,
        handle: &dyn SessionRuntime,
        agent_id: &str,
        session_key: &str,
        text: &str,
        options: &SessionOptions,
    ) -> Result<Opened, TurnError> {
        let open = |id: String| Opened {
            id,
            prompt: text.to_string(),
            notes: Vec::new(),
            fresh: false,
        };
        // The session this runtime instance already serves the key with (the common case: a
        // conversation's next turn) needs no read of the state database.
        if !options.oneshot
            && let Some(id) = handle.serving(session_key)
        {
            return Ok(open(id));
        }
        let known = if options.oneshot {
            None
        } else {
            let key = session_key.to_string();
            self.blocking(move |s| s.runtime_session(&key)).await?
        };
        if let Some(known) = &known
            && known.instance.as_deref() == Some(handle.instance())
            && handle.holder(&known.id).as_deref() == Some(session_key)
        {
            return Ok(open(known.id.clone()));
        }
        let gone = |message: String| TurnError::RuntimeFailed {
            agent_id: agent_id.to_string(),
            stage: Stage::OpenSession,
            message,
        };
        let cwd = options
            .cwd
            .clone()
            .unwrap_or_else(|| handle.cwd().to_path_buf());
        if options.cwd.is_some() {
            // As a runtime's own `cwd`, a session's is made when missing.
            let _ = tokio::fs::create_dir_all(&cwd).await;
        }
        let label = options
            .label
            .as_ref()
            .map_or(String::new(), |l| format!(" `{l}`"));
        let mut notes = Vec::new();
        let mut opened = None;
        if let Some(known) = &known
            && handle.loads_sessions()
            && handle.claim(&known.id, session_key)
        {
            let mcp = self.mcp_servers(handle, agent_id, session_key);
            if let Ok(loaded) = handle.load_session(&known.id, cwd.clone(), mcp).await {
                handle.set_session_model(&known.id, loaded.model);
                notes.push(format!(
                    "runtime session{label} {} resumed with session/load (pid {})",
                    known.id,
                    handle.pid()
                ));
                opened = Some((known.id.clone(), text.to_string()));
            } else {
                handle.release(&known.id);
            }
        }
        let fresh = opened.is_none();
        let (id, prompt_text) = match opened {
            Some(opened) => opened,
            None => {
                let mcp = self.mcp_servers(handle, agent_id, session_key);
                let created = handle.new_session(cwd, mcp).await.map_err(gone)?;
                let id = created.id;
                if !handle.claim(&id, session_key) {
                    return Err(TurnError::SessionReused {
                        agent_id: agent_id.to_string(),
                        session_id: id,
                    });
                }
                handle.set_session_model(&id, created.model);
                if options.oneshot {
                    notes.push(format!(
                        "new runtime session{label} {id} for this message only (acp.mode: oneshot)"
                    ));
                    (id, text.to_string())
                } else if known.is_some() {
                    let key = session_key.to_string();
                    let limit = self.settings.context_turns;
                    let history = self.blocking(move |s| s.recent_turns(&key, limit)).await?;
                    let turns: Vec<&(Provenance, String)> = history
                        .iter()
                        .filter(|(p, _)| matches!(p, Provenance::Inbound | Provenance::Agent))
                        .collect();
                    let budget = self.limits(agent_id).context_bytes;
                    let sizes: Vec<usize> = turns.iter().map(|(_, t)| t.len()).collect();
                    let turns = &turns[cap::newest_within(&sizes, budget)..];
                    notes.push(format!(
                        "new runtime session{label} {id} (the runtime cannot resume the old one): the last {} given as context",
                        crate::plural::plural(turns.len(), "turn was", "turns were")
                    ));
                    (id, context_prompt(turns, text))
                } else {
                    notes.push(format!("new runtime session{label} {id}"));
                    (id, text.to_string())
                }
            }
        };
        if !options.oneshot {
            let session = KnownSession {
                id: id.clone(),
                instance: Some(handle.instance().to_string()),
            };
            let (key, agent) = (session_key.to_string(), agent_id.to_string());
            self.blocking(move |s| s.set_runtime_session(&key, &agent, &session))
                .await?;
        }
        Ok(Opened {
            id,
            prompt: prompt_text,
            notes,
            fresh,
        })
    }

    /// `prompt` with agent `agent_id`'s system section before it when session `session_key`
    /// (runtime session `session_id`) was not given the section composed now: a `fresh`
    /// session always, an open one when the section changed since (conversations.md, "What
    /// the agent is told"). Returns the prompt and a note for the transcript.
    async fn told(
        &self,
        agent_id: &str,
        session_key: &str,
        session_id: &str,
        fresh: bool,
        prompt: String,
    ) -> Result<(String, Option<String>), TurnError> {
        let Some(spec) = self.plan().systems.get(agent_id).cloned() else {
            return Ok((prompt, None));
        };
        let known = if fresh {
            None
        } else {
            self.given
                .lock()
                .ok()
                .and_then(|given| given.get(session_key).cloned())
                .filter(|(id, _)| id == session_id)
                .map(|(_, hash)| hash)
        };
        // The common case, an open session's next turn with its files as they were: a stat of
        // each file, no read.
        if let Some(hash) = &known
            && let Some(stamp) = system::stamp(&spec)
            && self.composed.lock().ok().is_some_and(|composed| {
                composed.get(agent_id).is_some_and(|c| {
                    Arc::ptr_eq(&c.spec, &spec) && c.stamp == stamp && c.hash == *hash
                })
            })
        {
            return Ok((prompt, None));
        }
        let (key, agent, id) = (
            session_key.to_string(),
            agent_id.to_string(),
            session_id.to_string(),
        );
        let composing = spec.clone();
        let composed = self
            .blocking(move |store| {
                let spec = composing;
                let given = match known {
                    Some(hash) => Some(hash),
                    None if fresh => None,
                    None => store
                        .given_section(&key)?
                        .filter(|g| g.runtime_session_id == id)
                        .map(|g| g.hash),
                };
                let first_run = fresh && !store.agent_was_told(&agent)?;
                let now = crate::clock::timestamp().to_zoned_datetime(jiff::tz::TimeZone::system());
                let stamp = system::stamp(&spec);
                let section = system::compose(&spec, first_run, &now);
                if given.as_deref() == Some(section.hash.as_str()) {
                    return Ok((None, section.hash, stamp));
                }
                let given = GivenSection {
                    runtime_session_id: id,
                    hash: section.hash.clone(),
                    text: section.text.clone(),
                    at: crate::clock::now(),
                };
                store.record_section(&key, &agent, &given)?;
                // A new session always gets the section (conversations.md): only a section
                // given again is worth a line.
                let note = (!fresh).then(|| {
                    format!(
                        "system section given again: it changed since the session was given it (`deepcli sessions show {key} --prompt` prints it)"
                    )
                });
                Ok((Some((section.text, note)), section.hash, stamp))
            })
            .await?;
        let (section, hash, stamp) = composed;
        if let (Some(stamp), Ok(mut composed)) = (stamp, self.composed.lock()) {
            let hash = hash.clone();
            composed.insert(agent_id.to_string(), system::Composed { spec, stamp, hash });
        }
        if let Ok(mut given) = self.given.lock() {
            given.insert(session_key.to_string(), (session_id.to_string(), hash));
        }
        Ok(match section {
            Some((text, note)) => (format!("{text}\n{prompt}"), note),
            None => (prompt, None),
        })
    }

    /// Applies the agent's `model` (as the config in force says now) to an open runtime
    /// session, unless it was applied there already: on a new session, and again after the
    /// config's model changed (no restart: the agent switches). Returns a note for the
    /// transcript when it applied something or could not.
    async fn apply_model(
        &self,
        handle: &dyn SessionRuntime,
        agent_id: &str,
        session_id: &str,
    ) -> Option<String> {
        let wanted = self
            .plan()
            .models
            .get(agent_id)
            .map(model::candidates)
            .unwrap_or_default();
        let session = handle.session_model(session_id).unwrap_or_default();
        if wanted.is_empty() || session.wanted == wanted {
            return None;
        }
        let offers = session.option.is_some();
        let (session, report) = model::apply(handle, session_id, session, &wanted).await;
        handle.set_session_model(session_id, session);
        // An agent that offers no model selection is said once, in the status, not in every
        // session's transcript.
        let note = match (&report.applied, &report.why) {
            (Some(applied), None) => Some(format!("model `{applied}` applied")),
            (Some(applied), Some(why)) => Some(format!("model `{applied}` applied, {why}")),
            (None, why) => {
                offers.then(|| format!("model not applied: {}", why.as_deref().unwrap_or("")))
            }
        };
        if let Ok(mut models) = self.models.lock() {
            models.insert(
                agent_id.to_string(),
                super::AppliedModel {
                    instance: handle.instance().to_string(),
                    wanted,
                    report,
                },
            );
        }
        note
    }

    /// One prompt in an open runtime session: the reply assembled from its agent message
    /// chunks, cancelled after the prompt timeout.
    async fn prompt_in(
        &self,
        handle: &dyn SessionRuntime,
        turn: &TurnRef<'_>,
        session_id: &str,
        (prompt_text, files): (String, &[PromptFile]),
        timeout: Duration,
    ) -> Result<(TurnOutcome, budget::TurnUsage), TurnError> {
        let (agent_id, session_key) = (turn.agent_id, turn.session_key);
        let gone = |message: String| TurnError::RuntimeFailed {
            agent_id: agent_id.to_string(),
            stage: Stage::Prompt,
            message,
        };
        let pending = handle.prompt(session_id, prompt_text, files);
        let crate::runtime::PendingPrompt {
            answer,
            mut updates,
            listening: _listening,
        } = pending;
        let mut answer = answer;
        struct Forget<'a>(&'a dyn SessionRuntime, &'a str);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.forget_person_waits(self.1);
            }
        }
        let _forget = Forget(handle, session_id);
        // The turn, for an operator's cancel (`deepcli sessions cancel`) to wait on its end.
        let ended = Running::start(&self.running, session_key);
        let response = tokio::select! {
            r = &mut answer => {
                let r = r.map_err(gone)?;
                ended.end(r.stop_reason.clone());
                r
            }
            () = person_aware_timeout(handle, session_id, timeout) => {
                let cancel = {
                    let (agent, key, run, why) = (
                        agent_id.to_string(),
                        session_key.to_string(),
                        turn.run_id.map(str::to_string),
                        turn.why.as_str(),
                    );
                    self.blocking(move |s| s.cancel_requested(&agent, &key, run.as_deref(), why))
                        .await
                        .ok()
                };
                let _ = handle.cancel(session_id);
                // The agent answers a cancelled prompt with stopReason `cancelled`.
                let grace = self.settings.cancel_confirm;
                let stop = tokio::time::timeout(grace, &mut answer)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|r| r.stop_reason.map_or(serde_json::Value::Null, |s| s.as_str().into()));
                let confirmed = stop.as_ref().is_some_and(|s| s == "cancelled");
                if let Some(id) = cancel {
                    let (state, note) = if confirmed {
                        ("confirmed", format!("the turn passed {} s ({}): the runtime stopped it (stopReason cancelled)", timeout.as_secs_f64(), turn.why.as_str()))
                    } else {
                        ("uncertain", format!("the turn passed {} s ({}): the runtime did not confirm the cancel within {} s (stopReason: {})", timeout.as_secs_f64(), turn.why.as_str(), grace.as_secs(), stop.as_ref().map_or("none".to_string(), serde_json::Value::to_string)))
                    };
                    let _ = self.blocking(move |s| s.cancel_decided(id, state, &note)).await;
                }
                return Err(TurnError::TimedOut {
                    agent_id: agent_id.to_string(),
                    seconds: timeout.as_secs_f64(),
                    stop_reason: stop,
                    confirmed,
                    why: turn.why,
                });
            }
        };
        let mut totals = budget::TurnUsage::default();
        let mut reply = cap::Reply::new(turn.reply_bytes);
        while let Some(update) = updates() {
            match update {
                crate::runtime::PromptUpdate::Text(text) => reply.push(&text),
                // Only USD counts against costPerDayUsd.
                crate::runtime::PromptUpdate::CostUsd(amount) => {
                    totals.cost_micros =
                        Some((amount.max(0.0) * budget::MICROS_PER_USD).round() as u64);
                }
            }
        }
        totals.tokens = response.tokens.or(totals.tokens);
        tracing::debug!(agent = agent_id, session = session_key, stop = ?response.stop_reason, "prompt answered");
        Ok((
            TurnOutcome {
                text: reply.finish(),
                stop_reason: response.stop_reason,
                runtime_time: Duration::ZERO,
                counted: None,
                notes: Vec::new(),
                files: Vec::new(),
            },
            totals,
        ))
    }

    /// A prompt to a remote A2A agent (`runtime.kind: a2a`): one streamed task in the
    /// session's `contextId`. A task that failed is an error; one the remote may have begun
    /// when the stream broke is the runtime failing during the prompt (its outcome unknown).
    async fn prompt_remote(
        &self,
        agent_id: &str,
        session_key: &str,
        (text, files): (&str, &[PromptFile]),
        timeout: Duration,
    ) -> Result<TurnOutcome, TurnError> {
        let Some(remote) = self.remote(agent_id) else {
            // Not ready: the status says why.
            return Err(match self.runtime(agent_id) {
                Err(e) => e,
                Ok(_) => TurnError::Internal(format!("agent `{agent_id}` has no A2A remote")),
            });
        };
        let begun = Instant::now();
        let answered = tokio::time::timeout(timeout, remote.ask(session_key, text, files)).await;
        let failed = |stage, message| TurnError::RuntimeFailed {
            agent_id: agent_id.to_string(),
            stage,
            message,
        };
        use crate::runtime::a2a::RemoteFailure;
        match answered {
            Err(_) => {
                // The stream is gone with the timeout: whether the remote stopped is not known.
                remote.cancel(session_key).await;
                Err(TurnError::TimedOut {
                    agent_id: agent_id.to_string(),
                    seconds: timeout.as_secs_f64(),
                    stop_reason: None,
                    confirmed: false,
                    why: CancelWhy::Timeout,
                })
            }
            Ok(Err(RemoteFailure::Broken(why))) => Err(failed(Stage::Prompt, why)),
            Ok(Err(RemoteFailure::NotTaken(why))) => Err(failed(Stage::TakeMessage, why)),
            Ok(Ok(answer)) => {
                let stop_reason = match answer.state.as_str() {
                    "TASK_STATE_COMPLETED" => StopReason::EndTurn,
                    "TASK_STATE_INPUT_REQUIRED" => StopReason::InputRequired,
                    "TASK_STATE_CANCELED" => StopReason::Cancelled,
                    other => {
                        return Err(failed(
                            Stage::Task,
                            format!("the remote task ended {other}: {}", answer.text),
                        ));
                    }
                };
                Ok(TurnOutcome {
                    text: answer.text,
                    stop_reason: Some(stop_reason),
                    runtime_time: begun.elapsed(),
                    counted: None,
                    notes: Vec::new(),
                    files: answer.files,
                })
            }
        }
    }

    /// Forgets which system section closed session `session_key` was given (the state keeps
    /// it for `sessions show --prompt`; its next runtime session is new and gets one anyway).
    fn forget_given(&self, session_key: &str) {
        if let Ok(mut given) = self.given.lock() {
            given.remove(session_key);
        }
    }

    /// Ends a oneshot runtime session: `session/close` when the agent offers it
    /// (`sessionCapabilities.close`), else only forgotten here; says which for the transcript.
    async fn close(&self, handle: &dyn SessionRuntime, session_id: &str) -> String {
        handle.release(session_id);
        if !handle.closes_sessions() {
            return format!(
                "runtime session {session_id} forgotten after the reply (the agent offers no session/close)"
            );
        }
        let limit = self.settings.close_timeout;
        match tokio::time::timeout(limit, handle.close_session(session_id)).await {
            Ok(Ok(())) => format!("runtime session {session_id} closed after the reply"),
            Ok(Err(e)) => format!("runtime session {session_id}: session/close failed: {e}"),
            Err(_) => format!(
                "runtime session {session_id}: no answer to session/close within {} s",
                limit.as_secs()
            ),
        }
    }

    /// The runtime session `session_key` is open in, in agent `agent_id`'s runtime instance.
    async fn open_in(
        &self,
        agent_id: &str,
        session_key: &str,
    ) -> Option<(Arc<dyn SessionRuntime>, String)> {
        let handle = self.runtime(agent_id).ok()?;
        let key = session_key.to_string();
        let known = self
            .blocking(move |s| s.runtime_session(&key))
            .await
            .ok()
            .flatten()?;
        if known.instance.as_deref() != Some(handle.instance())
            || handle.holder(&known.id).as_deref() != Some(session_key)
        {
            return None;
        }
        Some((handle, known.id))
    }

    /// Asks the runtime to cancel the turn running in `session_key` (ACP `session/cancel`).
    /// Whether a cancel was sent: false when the session is not open in the agent's runtime.
    pub(crate) async fn cancel_turn(&self, agent_id: &str, session_key: &str) -> bool {
        if let Some(remote) = self.remote(agent_id) {
            return remote.cancel(session_key).await;
        }
        let Some((handle, id)) = self.open_in(agent_id, session_key).await else {
            return false;
        };
        let sent = handle.cancel(&id);
        // ACP: a client that cancels answers the turn's pending permission requests
        // `cancelled`; their approvals are void.
        if let Some(turns) = &self.turns {
            turns.ended(session_key);
        }
        sent
    }

    /// The operator cancels the turn running in `session_key` (`deepcli sessions cancel`):
    /// `session/cancel`, then `confirmed` when the turn ends with stopReason `cancelled`
    /// within `grace`, `uncertain` when it ends otherwise or not at all (then it stays
    /// recorded as `requested` until it ends). Recorded in `turn_cancels`.
    pub(crate) async fn cancel_running_turn(
        &self,
        agent_id: &str,
        session_key: &str,
        grace: Duration,
    ) -> CancelState {
        let Some(mut rx) = self.running.watch(session_key) else {
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
            Some(Some(StopReason::Cancelled)) => (
                CancelState::Confirmed,
                "the runtime stopped the turn (stopReason cancelled)".to_string(),
            ),
            Some(stop) => (
                CancelState::Uncertain,
                format!(
                    "the turn ended with stopReason {} instead of cancelled",
                    stop.as_ref().map_or("none", StopReason::as_str)
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
    pub(crate) async fn close_runtime_session(
        &self,
        agent_id: &str,
        session_key: &str,
    ) -> Option<String> {
        if let Some(turns) = &self.turns {
            turns.closing(session_key).await;
        }
        let (handle, id) = self.open_in(agent_id, session_key).await?;
        let note = self.close(&*handle, &id).await;
        if let Some(door) = self.mcp.as_ref() {
            door.closed(session_key);
        }
        self.forget_given(session_key);
        Some(note)
    }
}

/// Sleeps until `timeout` of the prompt's own time has passed: time the session spends
/// waiting for a person (a permission request out for approval) does not count
/// (`permissions.timeoutSeconds` bounds that wait instead).
async fn person_aware_timeout(handle: &dyn SessionRuntime, session_id: &str, timeout: Duration) {
    let started = Instant::now();
    let mut changes = handle.person_changes();
    loop {
        let (waited, waiting) = handle.person_waited(session_id);
        if waiting {
            // Nothing runs out while a person is asked: wake when that ends.
            let _ = changes.changed().await;
            continue;
        }
        let deadline = started + timeout + waited;
        if Instant::now() >= deadline {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline.into()) => {}
            _ = changes.changed() => {}
        }
    }
}

/// What [`Sessions::open_session`] opened: the runtime session, the text to prompt with, notes
/// for the transcript, and whether the session is new.
struct Opened {
    id: String,
    prompt: String,
    notes: Vec<String>,
    fresh: bool,
}

/// A new runtime session's first prompt: the recent transcript, then the message.
fn context_prompt(turns: &[&(Provenance, String)], text: &str) -> String {
    let mut out = String::from(
        "[deepcli: this conversation continues an earlier session the agent no longer has. The recent transcript, oldest first:]\n",
    );
    for (provenance, said) in turns {
        let who = if *provenance == Provenance::Agent {
            "agent"
        } else {
            "user"
        };
        out.push_str(&format!("{who}: {said}\n"));
    }
    out.push_str("[deepcli: the new message:]\n");
    out.push_str(text);
    out
}
