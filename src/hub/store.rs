//! The Hub's rows in the state database (migration 9): capability tokens (hashed), spawned
//! child sessions, runs and their events. What it reads and writes of the Access layer's rows
//! (sessions, transcripts, their trash) goes through the Access layer's own statements
//! ([`AccessStore`]'s functions over a connection), and of the agents' trash through the
//! storage layer's: no SQL here names a table another module owns.
//!
//! A connection of its own, so that no tool call waits for an apply or a delivery's record;
//! every call is short and runs on the blocking pool.

use serde::{Deserialize, Serialize};

use crate::access::store::{AccessStore, ActivityMark};
pub(crate) use crate::access::store::{FoundRow, HistoryRow};
use crate::state::db::{Backend, Behavior, Conn, DbError, DbResult, Optional, Query, Row, params};
use crate::state::{
    ChildKind, Cleanup, Provenance, RunKind, RunState, SpawnMode, StateDir, StateError,
};

pub(crate) struct HubStore {
    pub(super) db: crate::state::LayerConnection,
}

/// Who holds a live token: the one identity the Hub acts for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TokenOwner {
    pub agent_id: String,
    pub session_key: String,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunRecord {
    pub run_id: String,
    pub kind: RunKind,
    pub source_tool: String,
    pub state: RunState,
    pub requester_agent_id: Option<String>,
    pub requester_session_key: Option<String>,
    pub target_agent_id: String,
    pub target_session_key: String,
    pub correlation_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<SpawnMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<Cleanup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    pub message: String,
    pub reply: Option<String>,
    pub error: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub updated_at: String,
    /// The files its message carried, in the target agent's workspace (an A2A peer's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<RunFile>,
}

/// A file a run's message carried: written into the target agent's workspace when the message
/// came, given to the agent with the prompt ([`crate::sessions::PromptFile`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunFile {
    /// Where it is, relative to the agent's workspace.
    pub path: String,
    pub name: String,
    pub media_type: Option<String>,
    pub size: u64,
    pub sha256: String,
}

impl RunRecord {
    /// A new run of `kind`, `accepted`, with fresh run and correlation ids: `requester`
    /// (agent, session; `None` for the operator) asks `agent`'s session `key` with `message`.
    pub(crate) fn new(
        kind: RunKind,
        tool: &str,
        requester: (Option<String>, Option<String>),
        agent: &str,
        key: &str,
        message: String,
    ) -> RunRecord {
        let now = crate::clock::now();
        RunRecord {
            run_id: uuid::Uuid::new_v4().to_string(),
            kind,
            source_tool: tool.to_string(),
            state: RunState::Accepted,
            requester_agent_id: requester.0,
            requester_session_key: requester.1,
            target_agent_id: agent.to_string(),
            target_session_key: key.to_string(),
            correlation_id: uuid::Uuid::new_v4().to_string(),
            mode: None,
            cleanup: None,
            timeout_seconds: None,
            message,
            reply: None,
            error: None,
            created_at: now.clone(),
            started_at: None,
            finished_at: None,
            updated_at: now,
            files: Vec::new(),
        }
    }
}

const RUN_COLUMNS: &str = "run_id, kind, source_tool, state, requester_agent_id, requester_session_key, target_agent_id, target_session_key, correlation_id, mode, cleanup, timeout_seconds, message, reply, error, created_at, started_at, finished_at, updated_at, files";

fn run_row(r: &Row<'_>) -> DbResult<RunRecord> {
    Ok(RunRecord {
        run_id: r.get(0)?,
        kind: r.get(1)?,
        source_tool: r.get(2)?,
        state: r.get(3)?,
        requester_agent_id: r.get(4)?,
        requester_session_key: r.get(5)?,
        target_agent_id: r.get(6)?,
        target_session_key: r.get(7)?,
        correlation_id: r.get(8)?,
        mode: r.get(9)?,
        cleanup: r.get(10)?,
        timeout_seconds: r.get(11)?,
        message: r.get(12)?,
        reply: r.get(13)?,
        error: r.get(14)?,
        created_at: r.get(15)?,
        started_at: r.get(16)?,
        finished_at: r.get(17)?,
        updated_at: r.get(18)?,
        files: match r.get::<Option<String>>(19)? {
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| DbError::Value(format!("column 19 (files): {e}")))?,
            None => Vec::new(),
        },
    })
}

/// The runs not yet in a final state, oldest first: through the partial index
/// `hub_runs_unfinished` (migration 30), whose condition this is word for word; on SQLite
/// read `INDEXED BY` it, so a statement that stops matching the index fails in every test.
fn unfinished_query(backend: Backend) -> String {
    let index = match backend {
        Backend::Sqlite => " INDEXED BY hub_runs_unfinished",
        Backend::Postgres => "",
    };
    format!(
        "SELECT {RUN_COLUMNS} FROM hub_runs{index}
         WHERE state NOT IN ('completed', 'failed', 'timed_out', 'cancelled', 'uncertain', 'paused')
         ORDER BY created_at, rowid"
    )
}

/// One thing that happened to a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunEvent {
    pub at: String,
    /// The state the run entered; `None` for a note (a late event, ignored).
    pub state: Option<RunState>,
    pub note: String,
}

/// What a transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    /// The run went from this state to the one asked.
    From(RunState),
    /// The run is in this state, which may not become the one asked: nothing changed but a
    /// note (a late event cannot revive a finished run).
    Refused(RunState),
    /// No such run.
    Missing,
}

/// What a transition writes besides the state.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunOutcome {
    pub reply: Option<String>,
    pub error: Option<String>,
    pub note: String,
}

/// A session `sessions_spawn` made.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildSession {
    pub session_key: String,
    pub agent_id: String,
    pub kind: ChildKind,
    pub parent_session_key: String,
    pub parent_agent_id: String,
    pub depth: u32,
    pub label: Option<String>,
    pub cwd: Option<String>,
    pub mode: SpawnMode,
    pub cleanup: Cleanup,
    pub run_id: String,
    pub created_at: String,
    pub closed_at: Option<String>,
}

const CHILD_COLUMNS: &str = "session_key, agent_id, kind, parent_session_key, parent_agent_id, depth, label, cwd, mode, cleanup, run_id, created_at, closed_at";

fn child_row(r: &Row<'_>) -> DbResult<ChildSession> {
    Ok(ChildSession {
        session_key: r.get(0)?,
        agent_id: r.get(1)?,
        kind: r.get(2)?,
        parent_session_key: r.get(3)?,
        parent_agent_id: r.get(4)?,
        depth: r.get(5)?,
        label: r.get(6)?,
        cwd: r.get(7)?,
        mode: r.get(8)?,
        cleanup: r.get(9)?,
        run_id: r.get(10)?,
        created_at: r.get(11)?,
        closed_at: r.get(12)?,
    })
}

/// A session as the listings see it: every session key with a runtime session, a transcript or
/// a spawn behind it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KnownSession {
    pub session_key: String,
    /// The agent the key names (`agent:<id>:…`), else the one recorded.
    pub agent_id: String,
    /// When it last had a message, was opened or was spawned.
    pub last_at: String,
}

/// Which runs a listing wants.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunFilter {
    pub state: Option<RunState>,
    pub requester_session_key: Option<String>,
    pub target_session_key: Option<String>,
    pub agent_id: Option<String>,
    /// Only runs not yet final.
    pub active: bool,
    pub limit: usize,
    /// Runs skipped before the first one given (paging).
    pub offset: usize,
}

/// Why `key` is refused as a session key; a bare agent id is pointed to its main session.
pub(crate) fn not_a_session_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        format!(
            "`{key}` is not a session key: agent `{key}`'s main session is `agent:{key}:main` (`deepcli sessions list` shows the others)"
        )
    } else {
        format!("`{key}` is not a session key (they look like agent:<id>:main)")
    }
}

/// The agent a session key names: `agent:<id>:…`.
pub(crate) fn agent_of(session_key: &str) -> Option<&str> {
    let rest = session_key.strip_prefix("agent:")?;
    let (agent, rest) = rest.split_once(':')?;
    (!agent.is_empty() && !rest.is_empty()).then_some(agent)
}

impl HubStore {
    /// Opens the state database (migrating it) with a connection for the Hub.
    pub(crate) fn open(dir: &StateDir) -> Result<HubStore, StateError> {
        Ok(HubStore {
            db: crate::state::LayerConnection::open(dir, "hub")?,
        })
    }

    /// The audit timeline (approvals.md) `filter` asks for, read on a connection that only
    /// reads.
    pub(super) fn audit(
        &self,
        filter: &crate::state::audit::AuditFilter,
    ) -> Result<Vec<crate::state::audit::AuditEvent>, StateError> {
        self.db.query(|c| crate::state::audit::timeline(c, filter))
    }

    // ---- tokens ----

    /// Records a new token (its hash) for `owner`, revoking the session's earlier ones: the
    /// session was opened again, and only its newest runtime session holds a token. Returns
    /// how many were revoked.
    pub(crate) fn add_token(&self, hash: &str, owner: &TokenOwner) -> Result<usize, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let revoked = tx.execute(
                "UPDATE hub_tokens SET revoked_at = ?2, revoked_why = 'superseded: the session was opened again'
                 WHERE session_key = ?1 AND revoked_at IS NULL",
                params![owner.session_key, now],
            )?;
            tx.execute(
                "INSERT INTO hub_tokens (token_hash, agent_id, session_key, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![hash, owner.agent_id, owner.session_key, now],
            )?;
            tx.commit()?;
            Ok(revoked)
        })
    }

    /// Who holds the live token with this hash.
    pub(crate) fn token_owner(&self, hash: &str) -> Result<Option<TokenOwner>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT agent_id, session_key FROM hub_tokens WHERE token_hash = ?1 AND revoked_at IS NULL",
                params![hash],
                |r| {
                    Ok(TokenOwner {
                        agent_id: r.get(0)?,
                        session_key: r.get(1)?,
                    })
                },
            )
            .optional()
        })
    }

    /// Revokes the live tokens of one session; how many.
    pub(crate) fn revoke_session_tokens(
        &self,
        session_key: &str,
        why: &str,
    ) -> Result<usize, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "UPDATE hub_tokens SET revoked_at = ?2, revoked_why = ?3 WHERE session_key = ?1 AND revoked_at IS NULL",
                params![session_key, now, why],
            )
        })
    }

    /// Revokes the live tokens of every session of an agent; how many.
    pub(crate) fn revoke_agent_tokens(
        &self,
        agent_id: &str,
        why: &str,
    ) -> Result<usize, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "UPDATE hub_tokens SET revoked_at = ?2, revoked_why = ?3 WHERE agent_id = ?1 AND revoked_at IS NULL",
                params![agent_id, now, why],
            )
        })
    }

    /// Revokes every live token; how many.
    pub(crate) fn revoke_all_tokens(&self, why: &str) -> Result<usize, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "UPDATE hub_tokens SET revoked_at = ?1, revoked_why = ?2 WHERE revoked_at IS NULL",
                params![now, why],
            )
        })
    }

    /// How many tokens are live.
    pub(crate) fn live_tokens(&self) -> Result<u64, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT count(*) FROM hub_tokens WHERE revoked_at IS NULL",
                params![],
                |r| r.get(0),
            )
        })
    }

    // ---- runs ----

    /// Notes the trace run `run_id` is carried out in (traces on): the audit shows it.
    pub(crate) fn note_run_trace(&self, run_id: &str, trace_id: &str) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE hub_runs SET trace_id = ?2 WHERE run_id = ?1",
                params![run_id, trace_id],
            )
            .map(drop)
        })
    }

    /// Records a new run, `accepted`.
    pub(crate) fn insert_run(&self, run: &RunRecord) -> Result<(), StateError> {
        let files = (!run.files.is_empty())
            .then(|| serde_json::to_string(&run.files))
            .transpose()
            .map_err(|e| StateError::Corrupt(format!("run {}: its files: {e}", run.run_id)))?;
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            tx.execute(
                &format!(
                    "INSERT INTO hub_runs ({RUN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
                ),
                params![
                    run.run_id,
                    run.kind,
                    run.source_tool,
                    run.state,
                    run.requester_agent_id,
                    run.requester_session_key,
                    run.target_agent_id,
                    run.target_session_key,
                    run.correlation_id,
                    run.mode,
                    run.cleanup,
                    run.timeout_seconds,
                    run.message,
                    run.reply,
                    run.error,
                    run.created_at,
                    run.started_at,
                    run.finished_at,
                    run.updated_at,
                    files
                ],
            )?;
            tx.execute(
                "INSERT INTO hub_run_events (run_id, at, state, note) VALUES (?1, ?2, ?3, ?4)",
                params![run.run_id, run.created_at, run.state, "accepted by the Hub"],
            )?;
            tx.commit()
        })
    }

    /// Moves a run to `next` if its graph allows it from where it is (one transaction); else
    /// records the attempt as a note and leaves it.
    pub(crate) fn transition(
        &self,
        run_id: &str,
        next: RunState,
        outcome: &RunOutcome,
    ) -> Result<Moved, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let current: Option<RunState> = tx
                .query_row(
                    "SELECT state FROM hub_runs WHERE run_id = ?1",
                    params![run_id],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(current) = current else {
                return Ok(Moved::Missing);
            };
            if !current.may_become(next) {
                let note = format!(
                    "ignored: {next} after {current}{}{}",
                    if outcome.note.is_empty() { "" } else { ": " },
                    outcome.note
                );
                tx.execute(
                    "INSERT INTO hub_run_events (run_id, at, state, note) VALUES (?1, ?2, NULL, ?3)",
                    params![run_id, now, note],
                )?;
                tx.commit()?;
                return Ok(Moved::Refused(current));
            }
            let started = next == RunState::Running;
            tx.execute(
                "UPDATE hub_runs SET state = ?2, updated_at = ?3,
                     reply = coalesce(?4, reply), error = coalesce(?5, error),
                     started_at = CASE WHEN ?6 AND started_at IS NULL THEN ?3 ELSE started_at END,
                     finished_at = CASE WHEN ?7 THEN ?3 ELSE finished_at END
                 WHERE run_id = ?1",
                params![
                    run_id,
                    next,
                    now,
                    outcome.reply,
                    outcome.error,
                    started,
                    next.is_final()
                ],
            )?;
            tx.execute(
                "INSERT INTO hub_run_events (run_id, at, state, note) VALUES (?1, ?2, ?3, ?4)",
                params![run_id, now, next, outcome.note],
            )?;
            tx.commit()?;
            Ok(Moved::From(current))
        })
    }

    /// Adds a note to a run's events.
    pub(crate) fn note(&self, run_id: &str, note: &str) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "INSERT INTO hub_run_events (run_id, at, state, note) VALUES (?1, ?2, NULL, ?3)",
                params![run_id, now, note],
            )
            .map(drop)
        })
    }

    pub(crate) fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StateError> {
        self.db.query(|c| {
            c.query_row(
                &format!("SELECT {RUN_COLUMNS} FROM hub_runs WHERE run_id = ?1"),
                params![run_id],
                run_row,
            )
            .optional()
        })
    }

    /// Runs, newest first.
    pub(crate) fn runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StateError> {
        let limit = if filter.limit == 0 { 100 } else { filter.limit };
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM hub_runs
                     WHERE (CAST(?1 AS TEXT) IS NULL OR state = ?1)
                       AND (CAST(?2 AS TEXT) IS NULL OR requester_session_key = ?2)
                       AND (CAST(?3 AS TEXT) IS NULL OR target_session_key = ?3)
                       AND (CAST(?4 AS TEXT) IS NULL OR target_agent_id = ?4 OR requester_agent_id = ?4)
                       AND (NOT ?5 OR state NOT IN ('completed', 'failed', 'timed_out', 'cancelled', 'uncertain'))
                     ORDER BY created_at DESC, rowid DESC LIMIT ?6 OFFSET ?7"
                ),
                params![
                    filter.state,
                    filter.requester_session_key,
                    filter.target_session_key,
                    filter.agent_id,
                    filter.active,
                    limit as i64,
                    filter.offset as i64
                ],
                run_row,
            )
        })
    }

    /// The newest run delivering to `session_key` that is in `state`.
    pub(crate) fn run_in(
        &self,
        session_key: &str,
        state: RunState,
    ) -> Result<Option<String>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT run_id FROM hub_runs WHERE target_session_key = ?1 AND state = ?2 ORDER BY created_at DESC, rowid DESC LIMIT 1",
                params![session_key, state],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// Every run not yet in a final state, oldest first (what a restart reconciles).
    pub(crate) fn unfinished_runs(&self) -> Result<Vec<RunRecord>, StateError> {
        self.db
            .query(|c| c.query_map(&unfinished_query(c.backend()), params![], run_row))
    }

    pub(crate) fn run_events(&self, run_id: &str) -> Result<Vec<RunEvent>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT at, state, note FROM hub_run_events WHERE run_id = ?1 ORDER BY id",
                params![run_id],
                |r| {
                    Ok(RunEvent {
                        at: r.get(0)?,
                        state: r.get(1)?,
                        note: r.get(2)?,
                    })
                },
            )
        })
    }

    // ---- child sessions ----

    pub(crate) fn insert_child(&self, child: &ChildSession) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                &format!(
                    "INSERT INTO hub_sessions ({CHILD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                ),
                params![
                    child.session_key,
                    child.agent_id,
                    child.kind,
                    child.parent_session_key,
                    child.parent_agent_id,
                    child.depth,
                    child.label,
                    child.cwd,
                    child.mode,
                    child.cleanup,
                    child.run_id,
                    child.created_at,
                    child.closed_at
                ],
            )
            .map(drop)
        })
    }

    /// Whether session `key` was spawned, at any depth, from session `ancestor`.
    pub(crate) fn descends_from(&self, key: &str, ancestor: &str) -> Result<bool, StateError> {
        let mut at = key.to_string();
        // Bounded: a tree is never deeper than the spawn depth limit (at most a few).
        for _ in 0..64 {
            match self.child(&at)? {
                Some(child) if child.parent_session_key == ancestor => return Ok(true),
                Some(child) => at = child.parent_session_key,
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    pub(crate) fn child(&self, session_key: &str) -> Result<Option<ChildSession>, StateError> {
        self.db.query(|c| {
            c.query_row(
                &format!("SELECT {CHILD_COLUMNS} FROM hub_sessions WHERE session_key = ?1"),
                params![session_key],
                child_row,
            )
            .optional()
        })
    }

    /// The children of one session (open or closed), oldest first.
    pub(crate) fn children_of(&self, parent: &str) -> Result<Vec<ChildSession>, StateError> {
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {CHILD_COLUMNS} FROM hub_sessions WHERE parent_session_key = ?1 ORDER BY created_at, rowid"
                ),
                params![parent],
                child_row,
            )
        })
    }

    /// The children of one session (open or closed), oldest first, each with its run's state
    /// (`None`: no run on record): one query.
    pub(crate) fn children_with_state(
        &self,
        parent: &str,
    ) -> Result<Vec<(ChildSession, Option<RunState>)>, StateError> {
        let cols = CHILD_COLUMNS
            .split(", ")
            .map(|c| format!("s.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {cols}, r.state FROM hub_sessions s LEFT JOIN hub_runs r ON r.run_id = s.run_id
                     WHERE s.parent_session_key = ?1 ORDER BY s.created_at, s.rowid"
                ),
                params![parent],
                |r| Ok((child_row(r)?, r.get(13)?)),
            )
        })
    }

    /// The open child session labelled `label` of agent `agent_id`, the newest when several.
    pub(crate) fn child_by_label(
        &self,
        agent_id: Option<&str>,
        label: &str,
    ) -> Result<Vec<ChildSession>, StateError> {
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {CHILD_COLUMNS} FROM hub_sessions WHERE label = ?1 AND closed_at IS NULL
                     AND (CAST(?2 AS TEXT) IS NULL OR agent_id = ?2) ORDER BY created_at DESC, rowid DESC"
                ),
                params![label, agent_id],
                child_row,
            )
        })
    }

    /// Marks a child closed; whether it was open.
    pub(crate) fn close_child(&self, session_key: &str) -> Result<bool, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "UPDATE hub_sessions SET closed_at = ?2 WHERE session_key = ?1 AND closed_at IS NULL",
                params![session_key, now],
            )
            .map(|n| n > 0)
        })
    }

    /// Marks every open child session of agent `agent_id` closed (the agent was deleted).
    pub(crate) fn close_agent_children(&self, agent_id: &str) -> Result<usize, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "UPDATE hub_sessions SET closed_at = ?2 WHERE agent_id = ?1 AND closed_at IS NULL",
                params![agent_id, now],
            )
        })
    }

    /// Moves a session's transcript and session row into the trash tables, under entry
    /// `session:<key>` (`cleanup: delete`): the session is gone from every listing, its words
    /// kept for the operator.
    pub(crate) fn trash_session(&self, session_key: &str) -> Result<(), StateError> {
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            AccessStore::trash_session_in(&tx, session_key)?;
            tx.commit()
        })
    }

    // ---- sessions, through the Access layer's statements ----

    /// The sessions that exist (a runtime session, a transcript, or an open spawn) by last
    /// activity, newest first, of agent `agent` alone if named: of the next `chunk` sessions
    /// past `after`, those, and where the next chunk begins (`None`: no more).
    pub(crate) fn sessions_by_activity(
        &self,
        agent: Option<&str>,
        contains: Option<&str>,
        after: Option<&ActivityMark>,
        chunk: usize,
    ) -> Result<(Vec<KnownSession>, Option<ActivityMark>), StateError> {
        self.db.query(|c| {
            let read = AccessStore::sessions_by_activity(&*c, agent, contains, after, chunk)?;
            let next = (read.len() == chunk)
                .then(|| {
                    read.last()
                        .map(|a| (a.last_at.clone(), a.session_key.clone()))
                })
                .flatten();
            let mut out = Vec::with_capacity(read.len());
            for a in read {
                let Some(agent_id) = a.agent_id.filter(|id| !id.is_empty()) else {
                    continue;
                };
                if a.on_record || spawned(&*c, &a.session_key)? {
                    out.push(KnownSession {
                        session_key: a.session_key,
                        agent_id,
                        last_at: a.last_at,
                    });
                }
            }
            Ok((out, next))
        })
    }

    /// Session `session_key`'s newest transcript row: its provenance and text.
    pub(crate) fn last_message(
        &self,
        session_key: &str,
    ) -> Result<Option<(Provenance, String)>, StateError> {
        self.db.query(|c| {
            Ok(AccessStore::last_message(&*c, session_key)?.map(|m| (m.provenance, m.text)))
        })
    }

    /// The system section `session_key` was last given (`sessions show --prompt`).
    pub(crate) fn given_section(
        &self,
        session_key: &str,
    ) -> Result<Option<crate::sessions::GivenSection>, StateError> {
        self.db
            .query(|c| AccessStore::section_given(&*c, session_key))
    }

    /// Whether a session key has a runtime session, a transcript or an open spawn.
    pub(crate) fn session_exists(&self, session_key: &str) -> Result<bool, StateError> {
        self.db.query(|c| {
            Ok(AccessStore::session_on_record(&*c, session_key)? || spawned(&*c, session_key)?)
        })
    }

    /// A page of a session's transcript, newest last: the `limit` rows before the newest
    /// `offset`, of its current segment unless `all`. From the trash tables when the session
    /// was trashed (`cleanup: delete`). With `gated`, the session's gated inbound messages
    /// among its lines: for the operator's history only, never an agent's
    /// (`sessions_history`), since the agent was never given them.
    pub(crate) fn history(
        &self,
        session_key: &str,
        limit: usize,
        offset: usize,
        all: bool,
        gated: bool,
    ) -> Result<Vec<HistoryRow>, StateError> {
        self.db
            .query(|c| AccessStore::history_page(&*c, session_key, limit, offset, all, gated))
    }

    /// The transcript lines of every session with every word of `words`, newest first
    /// (`sessions/search`): through `search.db` on SQLite, `transcript_words` on PostgreSQL.
    pub(crate) fn search_transcript(
        &self,
        words: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<FoundRow>, StateError> {
        self.db.query(|c| match &*c {
            Conn::Sqlite(conn) => AccessStore::search_transcript(conn, words, before, limit),
            Conn::Postgres(_) => AccessStore::search_postgres(&*c, words, before, limit),
        })
    }

    /// Whether an agent with this id was deleted (its entry is in the trash).
    pub(crate) fn agent_in_trash(&self, agent_id: &str) -> Result<bool, StateError> {
        self.db.agent_in_trash(agent_id)
    }
}

/// Whether session `session_key` is an open spawn.
fn spawned(c: &impl Query, session_key: &str) -> DbResult<bool> {
    c.query_row(
        "SELECT EXISTS (SELECT 1 FROM hub_sessions WHERE session_key = ?1 AND closed_at IS NULL)",
        params![session_key],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_agent_id_is_pointed_to_its_main_session() {
        assert_eq!(
            not_a_session_key("research"),
            "`research` is not a session key: agent `research`'s main session is `agent:research:main` (`deepcli sessions list` shows the others)"
        );
        assert!(not_a_session_key("agent:x").ends_with("(they look like agent:<id>:main)"));
        assert_eq!(agent_of("agent:research:main"), Some("research"));
        assert_eq!(agent_of("research"), None);
    }

    /// Runs `test` on a fresh store on each backend: SQLite in a temporary directory, then
    /// PostgreSQL in a schema of its own.
    fn on_both_backends(test: impl Fn(&HubStore)) {
        let tmp = tempfile::tempdir().unwrap();
        test(&HubStore::open(&StateDir::new(tmp.path())).unwrap());
        let (_tmp, _schema, postgres) = crate::state::postgres_state();
        test(&HubStore::open(&postgres).unwrap());
    }

    fn run(id: &str) -> RunRecord {
        let now = crate::clock::now();
        RunRecord {
            run_id: id.into(),
            kind: RunKind::Send,
            source_tool: "sessions_send".into(),
            state: RunState::Accepted,
            requester_agent_id: Some("a".into()),
            requester_session_key: Some("agent:a:main".into()),
            target_agent_id: "b".into(),
            target_session_key: "agent:b:main".into(),
            correlation_id: "c".into(),
            mode: None,
            cleanup: None,
            timeout_seconds: None,
            message: "hi".into(),
            reply: None,
            error: None,
            created_at: now.clone(),
            started_at: None,
            finished_at: None,
            updated_at: now,
            files: Vec::new(),
        }
    }

    #[test]
    fn a_token_is_found_by_its_hash_until_revoked_or_superseded() {
        on_both_backends(|store| {
            let owner = TokenOwner {
                agent_id: "a".into(),
                session_key: "agent:a:main".into(),
            };
            assert_eq!(store.add_token("sha256:1", &owner).unwrap(), 0);
            assert_eq!(store.token_owner("sha256:1").unwrap(), Some(owner.clone()));
            // Opened again: the new token replaces the old one.
            assert_eq!(store.add_token("sha256:2", &owner).unwrap(), 1);
            assert_eq!(store.token_owner("sha256:1").unwrap(), None);
            assert_eq!(
                store
                    .revoke_session_tokens("agent:a:main", "closed")
                    .unwrap(),
                1
            );
            assert_eq!(store.token_owner("sha256:2").unwrap(), None);
            assert_eq!(store.live_tokens().unwrap(), 0);
        });
    }

    /// The files a run's message carried are read back with it, and a run without any has
    /// none; an unfinished run is found through its index.
    #[test]
    fn a_runs_files_are_kept_with_it() {
        on_both_backends(|store| {
            let file = RunFile {
                path: ".deepcli/a2a/t/r.txt".into(),
                name: "r.txt".into(),
                media_type: Some("text/plain".into()),
                size: 5,
                sha256: "ab".repeat(32),
            };
            store
                .insert_run(&RunRecord {
                    files: vec![file.clone()],
                    ..run("with")
                })
                .unwrap();
            store.insert_run(&run("without")).unwrap();
            assert_eq!(store.run("with").unwrap().unwrap().files, [file]);
            assert!(store.run("without").unwrap().unwrap().files.is_empty());
            let unfinished: Vec<String> = store
                .unfinished_runs()
                .unwrap()
                .into_iter()
                .map(|r| r.run_id)
                .collect();
            assert_eq!(unfinished.len(), 2);
        });
    }

    #[test]
    fn a_final_run_is_never_revived_and_the_attempt_is_noted() {
        on_both_backends(|store| {
            store.insert_run(&run("r1")).unwrap();
            let o = RunOutcome::default();
            assert_eq!(
                store.transition("r1", RunState::Running, &o).unwrap(),
                Moved::From(RunState::Accepted)
            );
            assert_eq!(
                store
                    .transition("r1", RunState::CancelRequested, &o)
                    .unwrap(),
                Moved::From(RunState::Running)
            );
            assert_eq!(
                store.transition("r1", RunState::Cancelled, &o).unwrap(),
                Moved::From(RunState::CancelRequested)
            );
            let late = RunOutcome {
                reply: Some("late words".into()),
                note: "the runtime answered end_turn".into(),
                ..RunOutcome::default()
            };
            assert_eq!(
                store.transition("r1", RunState::Completed, &late).unwrap(),
                Moved::Refused(RunState::Cancelled)
            );
            let record = store.run("r1").unwrap().unwrap();
            assert_eq!(record.state, RunState::Cancelled);
            assert_eq!(record.reply, None);
            assert!(record.finished_at.is_some());
            let events = store.run_events("r1").unwrap();
            assert_eq!(events.len(), 5, "{events:?}");
            assert_eq!(events[4].state, None);
            assert!(
                events[4]
                    .note
                    .contains("ignored: completed after cancelled")
            );
            assert_eq!(
                store.transition("nope", RunState::Running, &o).unwrap(),
                Moved::Missing
            );
            assert!(store.unfinished_runs().unwrap().is_empty());
        });
    }

    #[test]
    fn session_keys_name_their_agent() {
        assert_eq!(agent_of("agent:main:main"), Some("main"));
        assert_eq!(agent_of("agent:a:subagent:x"), Some("a"));
        assert_eq!(agent_of("agent::main"), None);
        assert_eq!(agent_of("agent:a"), None);
        assert_eq!(agent_of("nope"), None);
    }

    fn transcript_row(store: &HubStore, key: &str, at: &str) {
        store
            .db
            .write(|c| AccessStore::put_row_at(&*c, key, at))
            .unwrap();
    }

    #[test]
    fn the_state_names_a_sessions_agent_as_agent_of_does() {
        on_both_backends(|store| {
            let keys = [
                "agent:a:main",
                "agent:research:telegram:direct:42",
                "agent::main",
                "agent:a:",
                "agent:a",
                "agent:",
                "agent:é-ü:x",
                "agentx:a:main",
                "Agent:a:main",
                "a:agent:b:main",
                "",
            ];
            for key in keys {
                transcript_row(store, key, "2026-01-01T00:00:00Z");
            }
            let named = store
                .db
                .query(|c| AccessStore::sessions_by_activity(&*c, None, None, None, 100))
                .unwrap();
            assert_eq!(named.len(), keys.len());
            for a in named {
                assert_eq!(
                    a.agent_id.as_deref(),
                    agent_of(&a.session_key),
                    "{:?}",
                    a.session_key
                );
            }
        });
    }

    #[test]
    fn sessions_are_walked_by_last_activity_whatever_the_chunk() {
        on_both_backends(|store| {
            // Transcripts, some at the same second (then by key).
            transcript_row(store, "agent:a:one", "2026-01-01T00:00:01Z");
            transcript_row(store, "agent:a:one", "2026-01-01T00:00:05Z");
            transcript_row(store, "agent:b:two", "2026-01-01T00:00:05Z");
            transcript_row(store, "agent:a:three", "2026-01-01T00:00:03Z");
            transcript_row(store, "agent:b:gone", "2026-01-01T00:00:09Z");
            store
                .db.write(|c| {
                    let c = &*c;
                    // A runtime session used later than its transcript's last row.
                    AccessStore::put_session_at(c, "agent:a:three", "a", "2026-01-01T00:00:02Z")?;
                    AccessStore::put_session_at(c, "agent:a:three", "a", "2026-01-01T00:00:07Z")?;
                    // A session whose key names no agent: its record does.
                    AccessStore::put_session_at(c, "legacy", "c", "2026-01-01T00:00:04Z")?;
                    // An open spawn without a word yet, and a closed one.
                    for (key, closed) in [
                        ("agent:b:subagent:x", None),
                        ("agent:b:subagent:y", Some("2026-01-01T00:00:08Z")),
                    ] {
                        c.execute(
                            "INSERT INTO hub_sessions (session_key, agent_id, kind, parent_session_key, parent_agent_id,
                                 depth, mode, cleanup, run_id, created_at, closed_at)
                             VALUES (?1, 'b', 'subagent', 'agent:a:main', 'a', 1, 'run', 'keep', 'r', '2026-01-01T00:00:06Z', ?2)",
                            params![key, closed],
                        )?;
                    }
                    Ok(())
                })
                .unwrap();
            // A session whose transcript went (to the trash).
            store.trash_session("agent:b:gone").unwrap();
            let expected = [
                ("agent:a:three", "2026-01-01T00:00:07Z"),
                ("agent:b:subagent:x", "2026-01-01T00:00:06Z"),
                ("agent:a:one", "2026-01-01T00:00:05Z"),
                ("agent:b:two", "2026-01-01T00:00:05Z"),
                ("legacy", "2026-01-01T00:00:04Z"),
            ];
            for chunk in [1, 2, 3, 100] {
                let (mut seen, mut after) = (Vec::new(), None);
                loop {
                    let (got, next) = store
                        .sessions_by_activity(None, None, after.as_ref(), chunk)
                        .unwrap();
                    seen.extend(got.into_iter().map(|s| (s.session_key, s.last_at)));
                    match next {
                        // Each chunk goes on past the last: never the same again.
                        Some(mark) if Some(&mark) != after.as_ref() => after = Some(mark),
                        Some(mark) => panic!("chunk {chunk}: {mark:?} twice"),
                        None => break,
                    }
                }
                let seen: Vec<(&str, &str)> =
                    seen.iter().map(|(k, a)| (k.as_str(), a.as_str())).collect();
                assert_eq!(seen, expected, "chunk {chunk}");
            }
            let (b, _) = store
                .sessions_by_activity(Some("b"), None, None, 100)
                .unwrap();
            let b: Vec<&str> = b.iter().map(|s| s.session_key.as_str()).collect();
            assert_eq!(b, ["agent:b:subagent:x", "agent:b:two"]);
            let (c, _) = store
                .sessions_by_activity(Some("c"), None, None, 100)
                .unwrap();
            assert_eq!(c[0].agent_id, "c");
            // A key that contains the words, in any case: a real query, not a narrowed page.
            let (two, _) = store
                .sessions_by_activity(None, Some("TWO"), None, 1)
                .unwrap();
            let two: Vec<&str> = two.iter().map(|s| s.session_key.as_str()).collect();
            assert_eq!(two, ["agent:b:two"]);
        });
    }
}
