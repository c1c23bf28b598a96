//! The tasks' rows (`tasks.sql`): a task, and each event that moved it, written in one
//! transaction that read the state it moves from, so that two doors deciding at once cannot
//! both win — on one host or on several replicas of one state (the transaction holds the
//! state's write lock, [`Behavior::Write`]). A connection of its own (as the Access layer and
//! the Hub have); every call is short, and callers run it on the blocking pool. On the state's
//! backend seam ([`crate::state::db`]): the same statements on SQLite and PostgreSQL.

use serde_json::{Value, json};

use super::artifacts::Stored;
use super::state::{Actor, Decision, Event, Parties, TaskState, decide};
use crate::state::db::{Behavior, DbResult, Optional, Query, Row, Tx, params};
use crate::state::{StateDir, StateError};

pub(crate) struct TaskStore {
    db: crate::state::LayerConnection,
}

/// Who asked for a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requester {
    /// A person, by platform id (`slack:U…`).
    Person(String),
    /// An agent's session, by key.
    Session(String),
    Operator,
    /// An A2A peer whose message started an A2A task, as `a2a:<peer>` (a2a.md, "Tasks").
    Peer(String),
}

impl Requester {
    fn parts(&self) -> (&str, &'static str) {
        match self {
            Requester::Person(id) => (id, "person"),
            Requester::Session(key) => (key, "session"),
            Requester::Operator => ("operator", "operator"),
            Requester::Peer(peer) => (peer, "peer"),
        }
    }
}

/// A task to create.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub title: String,
    pub acceptance: String,
    pub requester: Requester,
    pub owner: String,
    pub assignee: String,
    /// The session key of the conversation it is discussed in.
    pub room: Option<String>,
    pub parent: Option<String>,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Task {
    pub id: String,
    pub title: String,
    pub acceptance: String,
    pub requester: Requester,
    pub owner: String,
    pub assignee: String,
    /// `agent:<assignee>:task:<id>`.
    pub session_key: String,
    pub room: Option<String>,
    pub parent: Option<String>,
    pub state: TaskState,
    pub runtime_state: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One event of a task's history (as the operator's doors show it, too).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskEvent {
    #[serde(skip)]
    pub seq: i64,
    pub kind: String,
    pub actor: String,
    pub door: String,
    pub from: String,
    /// `None`: late, it changed nothing.
    pub to: Option<String>,
    pub detail: Value,
    pub at: String,
}

/// What an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    Moved {
        from: TaskState,
        to: TaskState,
    },
    /// The task was final: recorded as late, nothing changed.
    Late {
        state: TaskState,
    },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    #[error("no task `{0}`")]
    NotFound(String),
    #[error("{0}")]
    Refused(String),
    /// The stored copy of a file went (a sweep of the store) before its row was written.
    #[error("the stored copy of the file went before it was recorded; hand it in again")]
    Gone,
    #[error(transparent)]
    State(#[from] StateError),
}

/// A file handed in, to record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandedIn<'a> {
    pub name: &'a str,
    pub stored: &'a Stored,
    /// Its stored copy: checked to be there in the transaction that records it.
    pub path: &'a std::path::Path,
    /// The agent that handed it in.
    pub by: &'a str,
    /// Its `artifactQuotaBytes`: the most bytes the task's (or run's) artifacts may total with
    /// this one.
    pub quota: u64,
}

/// Refused when the artifacts of `owner` (a task or a run; `what` says which), but for the one
/// named `name` that this one replaces, and this one would total more than `file.quota`:
/// counted by `sum`, in the transaction that writes the row.
fn over_quota(
    tx: &impl Query,
    sum: &str,
    owner: &str,
    what: &str,
    file: &HandedIn<'_>,
) -> DbResult<Option<TaskError>> {
    let used: i64 = tx.query_row(sum, params![owner, file.name], |r| r.get(0))?;
    let used = used.max(0) as u64;
    let asked = file.stored.size;
    Ok((used.saturating_add(asked) > file.quota).then(|| {
        TaskError::Refused(format!(
            "`{}` is not handed in: {what}'s artifacts would take {} bytes, over the limit of {} bytes (artifactQuotaBytes): {used} bytes used, {asked} asked; hand in less, or raise artifactQuotaBytes",
            file.name,
            used.saturating_add(asked),
            file.quota
        ))
    }))
}

const COLUMNS: &str = "id, title, acceptance, requester, requester_kind, owner_agent, assignee_agent, session_key, room, parent_id, state, runtime_state, created_at, updated_at";

/// The order of a list of tasks: newest first, and of two created in one second the later
/// first (`tasks` has no integer key: SQLite's implicit `rowid`, a column of its own in
/// PostgreSQL's table, numbered as rows are inserted).
const NEWEST_FIRST: &str = "created_at DESC, rowid DESC";

/// A sum of artifact sizes (SQLite's `sum` of integers is an integer; PostgreSQL's is a
/// `numeric`, cast back).
const TASK_ARTIFACTS_SUM: &str = "SELECT CAST(coalesce(sum(size), 0) AS BIGINT) FROM task_artifacts WHERE task_id = ?1 AND name <> ?2";
const RUN_ARTIFACTS_SUM: &str = "SELECT CAST(coalesce(sum(size), 0) AS BIGINT) FROM run_artifacts WHERE run_id = ?1 AND name <> ?2";

fn task_row(r: &Row<'_>) -> DbResult<Task> {
    let requester: String = r.get(3)?;
    let kind: String = r.get(4)?;
    let state: String = r.get(10)?;
    Ok(Task {
        id: r.get(0)?,
        title: r.get(1)?,
        acceptance: r.get(2)?,
        requester: match kind.as_str() {
            "person" => Requester::Person(requester),
            "session" => Requester::Session(requester),
            "peer" => Requester::Peer(requester),
            _ => Requester::Operator,
        },
        owner: r.get(5)?,
        assignee: r.get(6)?,
        session_key: r.get(7)?,
        room: r.get(8)?,
        parent: r.get(9)?,
        // A state this build does not know is a newer deepcli's: final, so nothing moves it.
        state: TaskState::parse(&state).unwrap_or(TaskState::Failed),
        runtime_state: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
    })
}

fn actor_text(actor: &Actor) -> String {
    match actor {
        Actor::Agent { agent_id } => format!("agent:{agent_id}"),
        Actor::Person { id } => id.clone(),
        Actor::Operator => "operator".into(),
        Actor::Hub => "hub".into(),
    }
}

/// What the history keeps of an event besides its kind.
fn detail(event: &Event) -> Value {
    match event {
        Event::Asked { question } => json!({"question": question}),
        Event::Answered { answer } => json!({"answer": answer}),
        Event::Submitted { summary } => json!({"summary": summary}),
        Event::Reviewed { passed, notes } => json!({"passed": passed, "notes": notes}),
        Event::Rejected { reason, reopen } => json!({"reason": reason, "reopen": reopen}),
        Event::CancelSettled { confirmed } => json!({"confirmed": confirmed}),
        Event::Failed { why } => json!({"why": why}),
        _ => json!({}),
    }
}

impl TaskStore {
    pub(crate) fn open(dir: &StateDir) -> Result<TaskStore, StateError> {
        Ok(TaskStore {
            db: crate::state::LayerConnection::open(dir, "tasks")?,
        })
    }

    /// Creates a task, `open`, with its `created` event from `door`.
    pub(crate) fn create(&self, new: &NewTask, door: &str) -> Result<Task, StateError> {
        let id = format!("task-{}", uuid::Uuid::new_v4());
        let session_key = format!("agent:{}:task:{id}", new.assignee);
        self.create_as(&id, &session_key, new, door)
    }

    /// Creates task `id` worked on in session `session_key` (an A2A peer's task: its id and
    /// session are the A2A task's), `open`; nothing when it exists already (a retried message,
    /// taken by this replica or another at the same time: one writes it and its `created`
    /// event, the others read it).
    pub(crate) fn create_as(
        &self,
        id: &str,
        session_key: &str,
        new: &NewTask,
        door: &str,
    ) -> Result<Task, StateError> {
        if let Some(task) = self.get(id)? {
            return Ok(task);
        }
        let now = crate::clock::now();
        let (requester, kind) = new.requester.parts();
        let actor = match &new.requester {
            Requester::Session(key) => key.clone(),
            _ => requester.to_string(),
        };
        let id = id.to_string();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let written = tx.execute(
                &format!("INSERT INTO tasks ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL, ?12, ?12) ON CONFLICT (id) DO NOTHING"),
                params![
                    id,
                    new.title,
                    new.acceptance,
                    requester,
                    kind,
                    new.owner,
                    new.assignee,
                    session_key,
                    new.room,
                    new.parent,
                    TaskState::Open.as_str(),
                    now
                ],
            )?;
            if written == 0 {
                // Another door (or replica) wrote it since the read above: it is that one.
                return Ok(());
            }
            let detail = json!({"title": new.title, "acceptance": new.acceptance, "owner": new.owner, "assignee": new.assignee});
            insert_event(&tx, &id, "created", &actor, door, "", Some(TaskState::Open), &detail, &now)?;
            tx.commit()
        })?;
        self.get(&id)?
            .ok_or_else(|| StateError::Corrupt(format!("task `{id}` was written but is not there")))
    }

    /// Moves task `id` to `to` as the runtime of its assignee reported it (`runtime_state`,
    /// kept beside: an A2A task's state), with `event` (its kind and detail) by `actor` (the
    /// assignee when `None`) from `door`, whatever state it is in (the runtime's word is the fact); nothing when it is in
    /// `to` with that runtime state already; recorded as late when the task is final.
    pub(crate) fn follow_runtime(
        &self,
        id: &str,
        to: TaskState,
        runtime_state: &str,
        event: &Event,
        (actor, door): (Option<&str>, &str),
    ) -> Result<Option<Applied>, TaskError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let Some(task) = read_task(&tx, id)? else {
                return Ok(Err(TaskError::NotFound(id.to_string())));
            };
            if task.state == to && task.runtime_state.as_deref() == Some(runtime_state) {
                return Ok(Ok(None));
            }
            let applied = if task.state.is_final() {
                Applied::Late { state: task.state }
            } else {
                Applied::Moved {
                    from: task.state,
                    to,
                }
            };
            let moved = matches!(applied, Applied::Moved { .. });
            let mut detail = detail(event);
            detail["runtimeState"] = json!(runtime_state);
            let kind = event.kind();
            let actor = actor.map_or_else(|| format!("agent:{}", task.assignee), str::to_string);
            insert_event(&tx, id, kind, &actor, door, task.state.as_str(), moved.then_some(to), &detail, &now)?;
            if moved {
                tx.execute(
                    "UPDATE tasks SET state = ?2, runtime_state = ?3, updated_at = ?4 WHERE id = ?1",
                    params![id, to.as_str(), runtime_state, now],
                )?;
            }
            tx.commit()?;
            Ok(Ok(Some(applied)))
        })?
    }

    /// Records run `run_id` (an A2A peer's message) as step `step` of task `id`, so that what
    /// the agent hands the peer in it is the task's, too ([`TaskStore::task_of_run`]).
    pub(crate) fn link_run(
        &self,
        id: &str,
        step: &str,
        title: &str,
        session_key: &str,
        run_id: &str,
    ) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "INSERT INTO task_steps (task_id, step_id, title, target_agent, session_key, runtime, run_id, acceptance, status, notes, updated_at)
                 SELECT ?1, ?2, ?3, assignee_agent, ?4, 'a2a', ?5, NULL, 'done', NULL, ?6 FROM tasks WHERE id = ?1
                 ON CONFLICT (task_id, step_id) DO NOTHING",
                params![id, step, title, session_key, run_id, crate::clock::now()],
            )
            .map(drop)
        })
    }

    /// The task whose step run `run_id` is ([`TaskStore::link_run`]).
    pub(crate) fn task_of_run(&self, run_id: &str) -> Result<Option<String>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT task_id FROM task_steps WHERE run_id = ?1 LIMIT 1",
                params![run_id],
                |r| r.get(0),
            )
            .optional()
        })
    }

    pub(crate) fn get(&self, id: &str) -> Result<Option<Task>, StateError> {
        self.db.query(|c| read_task(&*c, id))
    }

    /// The tasks of room `room` (all when `None`), newest first, at most `limit`.
    pub(crate) fn list(&self, room: Option<&str>, limit: usize) -> Result<Vec<Task>, StateError> {
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM tasks WHERE CAST(?1 AS TEXT) IS NULL OR room = ?1 ORDER BY {NEWEST_FIRST} LIMIT ?2"
                ),
                params![room, limit as i64],
                task_row,
            )
        })
    }

    /// The tasks agent `agent` owns or works on, newest first, at most `limit`.
    pub(crate) fn of_agent(&self, agent: &str, limit: usize) -> Result<Vec<Task>, StateError> {
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM tasks WHERE owner_agent = ?1 OR assignee_agent = ?1 ORDER BY {NEWEST_FIRST} LIMIT ?2"
                ),
                params![agent, limit as i64],
                task_row,
            )
        })
    }

    /// Task `id`'s events, oldest first.
    pub(crate) fn events(&self, id: &str) -> Result<Vec<TaskEvent>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT seq, kind, actor, door, from_state, to_state, detail, at FROM task_events WHERE task_id = ?1 ORDER BY seq",
                params![id],
                |r| {
                let detail: String = r.get(6)?;
                Ok(TaskEvent {
                    seq: r.get(0)?,
                    kind: r.get(1)?,
                    actor: r.get(2)?,
                    door: r.get(3)?,
                    from: r.get(4)?,
                    to: r.get(5)?,
                    detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
                    at: r.get(7)?,
                })
            })
        })
    }

    /// Applies `event` by `actor` from `door` to task `id`, as the state machine decides with
    /// the owner's `approvers`: moved and recorded, recorded as late, or refused (nothing
    /// written). `runtime_state`: the raw state the runtime reported with it, kept beside.
    pub(crate) fn apply(
        &self,
        id: &str,
        event: &Event,
        actor: &Actor,
        door: &str,
        approvers: &[String],
        runtime_state: Option<&str>,
    ) -> Result<Applied, TaskError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let Some(task) = read_task(&tx, id)? else {
                return Ok(Err(TaskError::NotFound(id.to_string())));
            };
            let requester_person = match &task.requester {
                Requester::Person(p) => Some(p.as_str()),
                _ => None,
            };
            let parties = Parties {
                owner: &task.owner,
                assignee: &task.assignee,
                requester_person,
                requester_peer: matches!(task.requester, Requester::Peer(_)),
                approvers,
            };
            let applied = match decide(task.state, event, actor, &parties) {
                Decision::Refused(why) => return Ok(Err(TaskError::Refused(why))),
                Decision::Late => Applied::Late { state: task.state },
                Decision::Move(to) => Applied::Moved {
                    from: task.state,
                    to,
                },
            };
            let to = match applied {
                Applied::Moved { to, .. } => Some(to),
                Applied::Late { .. } => None,
            };
            insert_event(
                &tx,
                id,
                event.kind(),
                &actor_text(actor),
                door,
                task.state.as_str(),
                to,
                &detail(event),
                &now,
            )?;
            if let Some(to) = to {
                tx.execute(
                    "UPDATE tasks SET state = ?2, runtime_state = coalesce(?3, runtime_state), updated_at = ?4 WHERE id = ?1",
                    params![id, to.as_str(), runtime_state, now],
                )?;
            }
            tx.commit()?;
            Ok(Ok(applied))
        })?
    }
}

impl TaskStore {
    /// Records artifact `file.name` handed in to task `id` from `door`, with an `artifact`
    /// event; a second hand-in under the same name replaces the row, the history keeps both.
    /// Refused when the task is final; [`TaskError::Gone`] when its stored copy went before
    /// this transaction (a sweep of the store: hand it in again).
    pub(crate) fn put_artifact(
        &self,
        id: &str,
        file: &HandedIn<'_>,
        door: &str,
    ) -> Result<(), TaskError> {
        let HandedIn {
            name, stored, by, ..
        } = *file;
        self.on_open_task(id, "nothing is handed in to it", |tx, task, now| {
            if !file.path.is_file() {
                return Ok(Err(TaskError::Gone));
            }
            if let Some(refused) =
                over_quota(tx, TASK_ARTIFACTS_SUM, id, &format!("task `{id}`"), file)?
            {
                return Ok(Err(refused));
            }
            tx.execute(
                "INSERT INTO task_artifacts (task_id, name, sha256, size, handed_in_by, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (task_id, name) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, handed_in_by = excluded.handed_in_by, at = excluded.at",
                params![id, name, stored.sha256, stored.size as i64, by, now],
            )?;
            let detail = json!({"name": name, "sha256": stored.sha256, "size": stored.size});
            insert_event(tx, id, "artifact", &format!("agent:{by}"), door, task.state.as_str(), Some(task.state), &detail, now)?;
            Ok(Ok(()))
        })
    }

    /// Task `id`'s artifacts, by name.
    pub(crate) fn artifacts(&self, id: &str) -> Result<Vec<ArtifactRow>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT name, sha256, size, handed_in_by, at FROM task_artifacts WHERE task_id = ?1 ORDER BY name",
                params![id],
                |r| {
                    Ok(ArtifactRow {
                        name: r.get(0)?,
                        sha256: r.get(1)?,
                        size: r.get::<i64>(2)? as u64,
                        handed_in_by: r.get(3)?,
                        at: r.get(4)?,
                    })
                },
            )
        })
    }

    /// Records file `file.name` that an agent handed to the A2A peer of run `run_id`
    /// (migration `a2a_files.sql`); a second hand-in under the same name replaces the row.
    /// [`TaskError::Gone`] when its stored copy went before this transaction.
    pub(crate) fn put_run_artifact(
        &self,
        run_id: &str,
        file: &HandedIn<'_>,
        media_type: &str,
    ) -> Result<(), TaskError> {
        let HandedIn {
            name, stored, by, ..
        } = *file;
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            // Checked with the write lock held: a sweep of the store holds it too.
            if !file.path.is_file() {
                return Ok(Err(TaskError::Gone));
            }
            if let Some(refused) =
                over_quota(&tx, RUN_ARTIFACTS_SUM, run_id, &format!("run `{run_id}`"), file)?
            {
                return Ok(Err(refused));
            }
            tx.execute(
                "INSERT INTO run_artifacts (run_id, name, sha256, size, media_type, handed_in_by, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (run_id, name) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, media_type = excluded.media_type, handed_in_by = excluded.handed_in_by, at = excluded.at",
                params![run_id, name, stored.sha256, stored.size as i64, media_type, by, crate::clock::now()],
            )?;
            tx.commit()?;
            Ok(Ok(()))
        })?
    }

    /// The files handed to A2A peers in run `run_id`, by name, with their media types.
    pub(crate) fn run_artifacts(
        &self,
        run_id: &str,
    ) -> Result<Vec<(ArtifactRow, String)>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT name, sha256, size, handed_in_by, at, media_type FROM run_artifacts WHERE run_id = ?1 ORDER BY name",
                params![run_id],
                |r| {
                    Ok((
                        ArtifactRow {
                            name: r.get(0)?,
                            sha256: r.get(1)?,
                            size: r.get::<i64>(2)? as u64,
                            handed_in_by: r.get(3)?,
                            at: r.get(4)?,
                        },
                        r.get(5)?,
                    ))
                },
            )
        })
    }

    /// Writes the steps of task `id`'s plan (each replacing the one of its id), with one
    /// `plan` event by `actor`. Refused when the task is final.
    pub(crate) fn put_steps(
        &self,
        id: &str,
        steps: &[Step],
        actor: &Actor,
        door: &str,
    ) -> Result<(), TaskError> {
        self.on_open_task(id, "its plan is kept as it was", |tx, task, now| {
            for step in steps {
                tx.execute(
                    "INSERT INTO task_steps (task_id, step_id, title, target_agent, session_key, runtime, run_id, acceptance, status, notes, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                     ON CONFLICT (task_id, step_id) DO UPDATE SET title = excluded.title, target_agent = excluded.target_agent,
                       session_key = excluded.session_key, runtime = excluded.runtime, run_id = excluded.run_id,
                       acceptance = excluded.acceptance, status = excluded.status, notes = excluded.notes, updated_at = excluded.updated_at",
                    params![id, step.id, step.title, step.target_agent_id, step.session, step.runtime, step.run_id, step.acceptance, step.status.as_str(), step.notes, now],
                )?;
            }
            let detail = serde_json::to_value(steps).unwrap_or(Value::Null);
            insert_event(tx, id, "plan", &actor_text(actor), door, task.state.as_str(), Some(task.state), &json!({"steps": detail}), now)?;
            Ok(Ok(()))
        })
    }

    /// Runs `write` (with the task and the time) in a transaction that writes on task `id`
    /// while it is not final; when it is, refused, saying what is `kept`.
    fn on_open_task(
        &self,
        id: &str,
        kept: &str,
        write: impl FnOnce(&Tx<'_>, &Task, &str) -> DbResult<Result<(), TaskError>>,
    ) -> Result<(), TaskError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let Some(task) = read_task(&tx, id)? else {
                return Ok(Err(TaskError::NotFound(id.to_string())));
            };
            if task.state.is_final() {
                return Ok(Err(TaskError::Refused(format!(
                    "task `{id}` is {} already: {kept}",
                    task.state
                ))));
            }
            // Refused by `write`: rolled back.
            if let Err(e) = write(&tx, &task, &now)? {
                return Ok(Err(e));
            }
            tx.commit()?;
            Ok(Ok(()))
        })?
    }

    /// Task `id`'s plan, in step id order.
    pub(crate) fn steps(&self, id: &str) -> Result<Vec<Step>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT step_id, title, target_agent, session_key, runtime, run_id, acceptance, status, notes, updated_at FROM task_steps WHERE task_id = ?1 ORDER BY step_id",
                params![id],
                |r| {
                let status: String = r.get(7)?;
                Ok(Step {
                    id: r.get(0)?,
                    title: r.get(1)?,
                    target_agent_id: r.get(2)?,
                    session: r.get(3)?,
                    runtime: r.get(4)?,
                    run_id: r.get(5)?,
                    acceptance: r.get(6)?,
                    status: StepStatus::parse(&status).unwrap_or(StepStatus::Failed),
                    notes: r.get(8)?,
                    updated_at: Some(r.get(9)?),
                })
            })
        })
    }
}

/// An artifact of a task, as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArtifactRow {
    pub name: String,
    pub sha256: String,
    pub size: u64,
    /// The agent that handed it in.
    pub handed_in_by: String,
    pub at: String,
}

impl ArtifactRow {
    pub(crate) fn stored(&self) -> Stored {
        Stored {
            sha256: self.sha256.clone(),
            size: self.size,
        }
    }
}

/// A step of a task's plan (seed 000 §2.7).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Step {
    pub id: String,
    pub title: String,
    pub target_agent_id: Option<String>,
    pub session: Option<String>,
    /// The target's runtime kind (`acp`, `a2a`), as the hub saw it when the step was written.
    pub runtime: Option<String>,
    pub run_id: Option<String>,
    pub acceptance: Option<String>,
    pub status: StepStatus,
    pub notes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepStatus {
    Pending,
    Running,
    Done,
    Failed,
    Skipped,
}

impl StepStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Done => "done",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }

    fn parse(text: &str) -> Option<StepStatus> {
        [
            StepStatus::Pending,
            StepStatus::Running,
            StepStatus::Done,
            StepStatus::Failed,
            StepStatus::Skipped,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// Task `id`, read on a connection or in a transaction.
fn read_task(c: &impl Query, id: &str) -> DbResult<Option<Task>> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"),
        params![id],
        task_row,
    )
    .optional()
}

#[allow(clippy::too_many_arguments)]
fn insert_event(
    c: &impl Query,
    id: &str,
    kind: &str,
    actor: &str,
    door: &str,
    from: &str,
    to: Option<TaskState>,
    detail: &Value,
    at: &str,
) -> DbResult<()> {
    c.execute(
        "INSERT INTO task_events (task_id, kind, actor, door, from_state, to_state, detail, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![id, kind, actor, door, from, to.map(TaskState::as_str), detail.to_string(), at],
    )
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store on one backend, twice: two replicas' stores on one state.
    struct On {
        replicas: [TaskStore; 2],
        /// A stored copy that is there (a hand-in checks for it).
        there: std::path::PathBuf,
        backend: &'static str,
        _schema: Option<crate::state::db::testing::PgSchema>,
        _tmp: tempfile::TempDir,
    }

    /// Both backends: a new SQLite state, and a schema of its own in PostgreSQL.
    fn stores() -> Vec<On> {
        let on = |tmp: tempfile::TempDir, schema: Option<crate::state::db::testing::PgSchema>| {
            let mut state = StateDir::new(tmp.path().join("state"));
            if let Some(schema) = &schema {
                state = state.with_postgres(schema.url().clone());
            }
            let there = tmp.path().join("stored");
            std::fs::write(&there, "stored").unwrap();
            On {
                replicas: [(); 2].map(|()| TaskStore::open(&state).unwrap()),
                there,
                backend: if schema.is_some() {
                    "postgres"
                } else {
                    "sqlite"
                },
                _schema: schema,
                _tmp: tmp,
            }
        };
        vec![
            on(tempfile::tempdir().unwrap(), None),
            on(
                tempfile::tempdir().unwrap(),
                Some(crate::state::db::testing::PgSchema::new()),
            ),
        ]
    }

    fn new_task() -> NewTask {
        NewTask {
            title: "rename the flag".into(),
            acceptance: "cargo test passes".into(),
            requester: Requester::Person("slack:U0ASKER".into()),
            owner: "alpha".into(),
            assignee: "beta".into(),
            room: Some("agent:alpha:slack:channel:c0main:thread:1".into()),
            parent: None,
        }
    }

    fn agent(id: &str) -> Actor {
        Actor::Agent {
            agent_id: id.into(),
        }
    }

    #[test]
    fn a_task_is_created_open_with_a_session_of_its_own() {
        for on in stores() {
            let store = &on.replicas[0];
            let one = store.create(&new_task(), "cli").unwrap();
            let two = store.create(&new_task(), "cli").unwrap();
            assert_eq!(one.state, TaskState::Open);
            assert_eq!(one.session_key, format!("agent:beta:task:{}", one.id));
            assert_ne!(
                one.session_key, two.session_key,
                "parallel tasks share no session"
            );
            assert_eq!(store.get(&one.id).unwrap(), Some(one.clone()));
            let room = one.room.as_deref();
            assert_eq!(store.list(room, 10).unwrap().len(), 2);
            assert_eq!(store.list(Some("elsewhere"), 10).unwrap().len(), 0);
            let events = store.events(&one.id).unwrap();
            assert_eq!(events.len(), 1);
            assert_eq!(
                (events[0].kind.as_str(), events[0].actor.as_str()),
                ("created", "slack:U0ASKER")
            );
        }
    }

    /// Tasks created within one second (the resolution of `created_at`) are listed newest
    /// first all the same: by the order they were written in, not by their random ids.
    #[test]
    fn tasks_are_listed_newest_first_within_one_second_too() {
        for on in stores() {
            let store = &on.replicas[0];
            let ids: Vec<String> = (0..6)
                .map(|_| store.create(&new_task(), "cli").unwrap().id)
                .collect();
            let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
            let listed = |tasks: Vec<Task>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
            assert_eq!(
                listed(store.list(None, 10).unwrap()),
                newest_first,
                "{}",
                on.backend
            );
            assert_eq!(
                listed(store.of_agent("beta", 10).unwrap()),
                newest_first,
                "{}",
                on.backend
            );
            assert_eq!(
                listed(store.list(None, 2).unwrap()),
                newest_first[..2],
                "{}",
                on.backend
            );
        }
    }

    #[test]
    fn events_move_it_are_recorded_and_a_refusal_writes_nothing() {
        for on in stores() {
            let store = &on.replicas[0];
            let task = store.create(&new_task(), "cli").unwrap();
            let approvers = vec!["slack:U0BOSS".to_string()];
            let apply = |event: Event, actor: Actor| {
                store.apply(
                    &task.id,
                    &event,
                    &actor,
                    "mcp",
                    &approvers,
                    Some("end_turn"),
                )
            };
            apply(Event::Started, Actor::Hub).unwrap();
            let submit = Event::Submitted {
                summary: "done".into(),
            };
            let refused = apply(submit.clone(), agent("alpha")).unwrap_err();
            assert!(
                refused.to_string().contains("only the assignee"),
                "{refused}"
            );
            assert_eq!(
                store.events(&task.id).unwrap().len(),
                2,
                "the refusal wrote nothing"
            );
            assert_eq!(
                apply(submit, agent("beta")).unwrap(),
                Applied::Moved {
                    from: TaskState::Working,
                    to: TaskState::Submitted
                }
            );
            apply(Event::CancelRequested, Actor::Operator).unwrap();
            apply(Event::CancelSettled { confirmed: false }, Actor::Hub).unwrap();
            let late = apply(
                Event::Submitted {
                    summary: "late".into(),
                },
                agent("beta"),
            )
            .unwrap();
            assert_eq!(
                late,
                Applied::Late {
                    state: TaskState::Uncertain
                }
            );
            let stored = store.get(&task.id).unwrap().unwrap();
            assert_eq!(stored.state, TaskState::Uncertain);
            assert_eq!(stored.runtime_state.as_deref(), Some("end_turn"));
            let events = store.events(&task.id).unwrap();
            let last = events.last().unwrap();
            assert_eq!(
                (last.kind.as_str(), last.to.as_deref()),
                ("submitted", None)
            );
            assert_eq!(last.detail["summary"], "late");
            assert!(matches!(
                store.apply("task-none", &Event::Started, &Actor::Hub, "cli", &[], None),
                Err(TaskError::NotFound(_))
            ));
        }
    }

    /// The runtime's word on an A2A task: a move, the same word again (nothing), then a word
    /// on a final task (late).
    #[test]
    fn the_runtimes_word_moves_a_task_once_and_is_late_on_a_final_one() {
        for on in stores() {
            let store = &on.replicas[0];
            let task = store
                .create_as(
                    "task-a2a",
                    "agent:beta:a2a:partner:c1",
                    &NewTask {
                        requester: Requester::Peer("a2a:partner".into()),
                        ..new_task()
                    },
                    "a2a",
                )
                .unwrap();
            let working = |state| {
                store.follow_runtime(
                    &task.id,
                    state,
                    "TASK_STATE_WORKING",
                    &Event::Started,
                    (None, "a2a"),
                )
            };
            assert_eq!(
                working(TaskState::Working).unwrap(),
                Some(Applied::Moved {
                    from: TaskState::Open,
                    to: TaskState::Working
                })
            );
            assert_eq!(working(TaskState::Working).unwrap(), None, "{}", on.backend);
            store
                .apply(
                    &task.id,
                    &Event::Failed { why: "gone".into() },
                    &Actor::Hub,
                    "hub",
                    &[],
                    None,
                )
                .unwrap();
            assert_eq!(
                working(TaskState::Working).unwrap(),
                Some(Applied::Late {
                    state: TaskState::Failed
                })
            );
            let stored = store.get(&task.id).unwrap().unwrap();
            assert_eq!(
                (stored.state, stored.runtime_state.as_deref()),
                (TaskState::Failed, Some("TASK_STATE_WORKING"))
            );
            store
                .link_run(
                    &task.id,
                    "m1",
                    "the first message",
                    &task.session_key,
                    "run-1",
                )
                .unwrap();
            store
                .link_run(&task.id, "m1", "again", &task.session_key, "run-1")
                .unwrap();
            assert_eq!(
                store.task_of_run("run-1").unwrap().as_deref(),
                Some("task-a2a")
            );
            assert_eq!(store.task_of_run("run-2").unwrap(), None);
            let steps = store.steps(&task.id).unwrap();
            assert_eq!(
                (
                    steps.len(),
                    steps[0].title.as_str(),
                    steps[0].target_agent_id.as_deref()
                ),
                (1, "the first message", Some("beta"))
            );
        }
    }

    #[test]
    fn a_runs_files_stay_within_the_quota_to_the_byte() {
        for on in stores() {
            let store = &on.replicas[0];
            let (big, small) = (
                Stored {
                    sha256: "aa".into(),
                    size: 999,
                },
                Stored {
                    sha256: "bb".into(),
                    size: 1,
                },
            );
            let file = |name, stored| HandedIn {
                name,
                stored,
                path: &on.there,
                by: "beta",
                quota: 1000,
            };
            store
                .put_run_artifact("run-1", &file("a", &big), "text/plain")
                .unwrap();
            store
                .put_run_artifact("run-1", &file("b", &small), "text/plain")
                .unwrap();
            let refused = store
                .put_run_artifact("run-1", &file("c", &small), "text/plain")
                .unwrap_err();
            assert!(
                refused.to_string().contains(
                    "run `run-1`'s artifacts would take 1001 bytes, over the limit of 1000 bytes (artifactQuotaBytes): 1000 bytes used, 1 asked"
                ),
                "{}: {refused}",
                on.backend
            );
            // Another run has a quota of its own.
            store
                .put_run_artifact("run-2", &file("c", &small), "text/plain")
                .unwrap();
            assert_eq!(store.run_artifacts("run-1").unwrap().len(), 2);
        }
    }

    #[test]
    fn artifacts_and_steps_are_kept_until_the_task_is_final() {
        for on in stores() {
            let store = &on.replicas[0];
            let file = |name: &'static str, stored: &'static Stored| HandedIn {
                name,
                stored,
                path: Box::leak(Box::new(on.there.clone())),
                by: "beta",
                quota: 1000,
            };
            let task = store.create(&new_task(), "cli").unwrap();
            let one: &'static Stored = Box::leak(Box::new(Stored {
                sha256: "aa".into(),
                size: 2,
            }));
            let two: &'static Stored = Box::leak(Box::new(Stored {
                sha256: "bb".into(),
                size: 3,
            }));
            store
                .put_artifact(&task.id, &file("test.log", one), "mcp")
                .unwrap();
            // A stored copy a sweep took before the row: nothing is written, the caller
            // stores it again.
            let gone = on.there.with_file_name("gone");
            let missing = HandedIn {
                path: &gone,
                ..file("test.log", two)
            };
            assert!(matches!(
                store.put_artifact(&task.id, &missing, "mcp"),
                Err(TaskError::Gone)
            ));
            assert_eq!(store.artifacts(&task.id).unwrap()[0].stored(), *one);
            store
                .put_artifact(&task.id, &file("test.log", two), "mcp")
                .unwrap();
            let rows = store.artifacts(&task.id).unwrap();
            assert_eq!(rows.len(), 1, "a second hand-in replaces the row");
            assert_eq!(rows[0].stored(), *two);
            let step = Step {
                id: "1".into(),
                title: "ask beta".into(),
                target_agent_id: Some("beta".into()),
                session: None,
                runtime: Some("acp".into()),
                run_id: Some("run-1".into()),
                acceptance: None,
                status: StepStatus::Running,
                notes: None,
                updated_at: None,
            };
            store
                .put_steps(
                    &task.id,
                    std::slice::from_ref(&step),
                    &agent("alpha"),
                    "mcp",
                )
                .unwrap();
            let done = Step {
                status: StepStatus::Done,
                ..step
            };
            store
                .put_steps(&task.id, &[done], &agent("alpha"), "mcp")
                .unwrap();
            let steps = store.steps(&task.id).unwrap();
            assert_eq!((steps.len(), steps[0].status), (1, StepStatus::Done));
            // The history keeps both hand-ins and both plans.
            let kinds: Vec<String> = store
                .events(&task.id)
                .unwrap()
                .into_iter()
                .map(|e| e.kind)
                .collect();
            assert_eq!(kinds, ["created", "artifact", "artifact", "plan", "plan"]);

            store
                .apply(
                    &task.id,
                    &Event::CancelRequested,
                    &Actor::Operator,
                    "cli",
                    &[],
                    None,
                )
                .unwrap();
            store
                .apply(
                    &task.id,
                    &Event::CancelSettled { confirmed: true },
                    &Actor::Hub,
                    "cli",
                    &[],
                    None,
                )
                .unwrap();
            let refused = store
                .put_artifact(&task.id, &file("late.log", one), "mcp")
                .unwrap_err();
            assert!(
                refused.to_string().contains("cancelled already"),
                "{refused}"
            );
            assert!(
                store
                    .put_steps(&task.id, &[], &agent("alpha"), "mcp")
                    .is_err()
            );
            assert_eq!(store.artifacts(&task.id).unwrap().len(), 1);
        }
    }

    /// Two replicas on one state, eight doors at once on each read-then-write: a retried A2A
    /// message creates its task once; events racing to end a task move it once (the others
    /// are late); hand-ins racing for one quota never pass it together.
    #[test]
    fn replicas_racing_on_a_task_decide_it_once() {
        for on in stores() {
            let backend = on.backend;
            let replicas = &on.replicas;
            let race = |f: &(dyn Fn(usize) + Sync)| {
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..8).map(|i| s.spawn(move || f(i))).collect();
                    for h in handles {
                        h.join().unwrap();
                    }
                });
            };

            let created = std::sync::Mutex::new(Vec::new());
            race(&|i| {
                let task = replicas[i % 2]
                    .create_as(
                        "task-retried",
                        "agent:beta:a2a:partner:c1",
                        &new_task(),
                        "a2a",
                    )
                    .unwrap_or_else(|e| panic!("{backend}: {e}"));
                created.lock().unwrap().push(task);
            });
            let created = created.into_inner().unwrap();
            assert!(created.iter().all(|t| *t == created[0]), "{backend}");
            let events = replicas[0].events("task-retried").unwrap();
            assert_eq!(events.len(), 1, "{backend}: created once: {events:?}");

            let applied = std::sync::Mutex::new(Vec::new());
            race(&|i| {
                let why = format!("door {i}");
                let a = replicas[i % 2]
                    .apply(
                        "task-retried",
                        &Event::Failed { why },
                        &Actor::Hub,
                        "hub",
                        &[],
                        None,
                    )
                    .unwrap_or_else(|e| panic!("{backend}: {e}"));
                applied.lock().unwrap().push(a);
            });
            let applied = applied.into_inner().unwrap();
            let moved = applied
                .iter()
                .filter(|a| matches!(a, Applied::Moved { .. }))
                .count();
            assert_eq!(moved, 1, "{backend}: {applied:?}");
            let events = replicas[1].events("task-retried").unwrap();
            assert_eq!(
                events.iter().filter(|e| e.to.is_some()).count(),
                2,
                "{backend}: created, and one move: {events:?}"
            );
            assert_eq!(events.len(), 9, "{backend}: the late ones are recorded");

            let task = replicas[0].create(&new_task(), "cli").unwrap();
            let stored = Stored {
                sha256: "cc".into(),
                size: 300,
            };
            let names: Vec<String> = (0..8).map(|i| format!("part-{i}.log")).collect();
            let refused = std::sync::atomic::AtomicUsize::new(0);
            race(&|i| {
                let file = HandedIn {
                    name: &names[i],
                    stored: &stored,
                    path: &on.there,
                    by: "beta",
                    quota: 1000,
                };
                match replicas[i % 2].put_artifact(&task.id, &file, "mcp") {
                    Ok(()) => {}
                    Err(TaskError::Refused(_)) => {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => panic!("{backend}: {e}"),
                }
            });
            assert_eq!(refused.into_inner(), 5, "{backend}");
            let total: u64 = replicas[1]
                .artifacts(&task.id)
                .unwrap()
                .iter()
                .map(|a| a.size)
                .sum();
            assert_eq!(total, 900, "{backend}: three of 300 bytes within 1000");
        }
    }
}
