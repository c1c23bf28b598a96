//! The A2A server's rows (migration `a2a.sql`): tasks and the runs that carry their messages.
//! A connection of its own; every call is short and runs on the blocking pool.

use rusqlite::{OptionalExtension, params};

use crate::state::{LayerConnection, StateDir, StateError};

pub struct A2aStore {
    db: LayerConnection,
}

/// A task as stored; its state now is read off its last run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    pub task_id: String,
    pub peer: String,
    pub agent_id: String,
    pub context_id: String,
    pub session_key: String,
    /// The last A2A state seen (`TASK_STATE_…`).
    pub state: String,
    pub created_at: String,
    pub updated_us: i64,
    /// The task's runs in order, with the peer's message id of each.
    pub runs: Vec<(String, String)>,
}

/// ListTasks' filter: one peer's tasks, newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub peer: String,
    pub agent: String,
    pub context_id: Option<String>,
    pub state: Option<String>,
    /// Tasks strictly older than this `(updated_us, task_id)` (the page token).
    pub before: Option<(i64, String)>,
    pub limit: usize,
}

const TASK_COLUMNS: &str =
    "task_id, peer, agent_id, context_id, session_key, state, created_at, updated_us";

fn task_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRecord> {
    Ok(TaskRecord {
        task_id: row.get(0)?,
        peer: row.get(1)?,
        agent_id: row.get(2)?,
        context_id: row.get(3)?,
        session_key: row.get(4)?,
        state: row.get(5)?,
        created_at: row.get(6)?,
        updated_us: row.get(7)?,
        runs: Vec::new(),
    })
}

fn now_us() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

fn runs_of(c: &rusqlite::Connection, task_id: &str) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = c.prepare_cached(
        "SELECT run_id, message_id FROM a2a_task_runs WHERE task_id = ?1 ORDER BY seq",
    )?;
    stmt.query_map([task_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}

impl A2aStore {
    pub fn open(dir: &StateDir) -> Result<A2aStore, StateError> {
        Ok(A2aStore {
            db: LayerConnection::open(dir, "a2a")?,
        })
    }

    /// Records a new task with its first run.
    pub fn insert(&self, task: &TaskRecord) -> Result<(), StateError> {
        self.db.with(|c| {
            let tx = c.transaction()?;
            let now = now_us();
            tx.execute(
                &format!("INSERT INTO a2a_tasks ({TASK_COLUMNS}, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?7)"),
                params![
                    task.task_id,
                    task.peer,
                    task.agent_id,
                    task.context_id,
                    task.session_key,
                    task.state,
                    task.created_at,
                    now
                ],
            )?;
            for (seq, (run_id, message_id)) in task.runs.iter().enumerate() {
                tx.execute(
                    "INSERT INTO a2a_task_runs (task_id, seq, run_id, message_id) VALUES (?1, ?2, ?3, ?4)",
                    params![task.task_id, seq as i64, run_id, message_id],
                )?;
            }
            tx.commit()
        })
    }

    /// Adds a run (a further message) to a task.
    pub fn add_run(
        &self,
        task_id: &str,
        run_id: &str,
        message_id: &str,
        state: &str,
    ) -> Result<(), StateError> {
        self.db.with(|c| {
            let tx = c.transaction()?;
            tx.execute(
                "INSERT INTO a2a_task_runs (task_id, seq, run_id, message_id) \
                 SELECT ?1, COALESCE(MAX(seq) + 1, 0), ?2, ?3 FROM a2a_task_runs WHERE task_id = ?1",
                params![task_id, run_id, message_id],
            )?;
            tx.execute(
                "UPDATE a2a_tasks SET state = ?2, updated_at = ?3, updated_us = ?4 WHERE task_id = ?1",
                params![task_id, state, crate::clock::now(), now_us()],
            )?;
            tx.commit()
        })
    }

    /// Records the state a task was seen in, when it changed.
    pub fn set_state(&self, task_id: &str, state: &str) -> Result<(), StateError> {
        self.db.with(|c| {
            c.execute(
                "UPDATE a2a_tasks SET state = ?2, updated_at = ?3, updated_us = ?4 \
                 WHERE task_id = ?1 AND state <> ?2",
                params![task_id, state, crate::clock::now(), now_us()],
            )
            .map(drop)
        })
    }

    /// Task `task_id` of `peer` (another peer's is not found).
    pub fn task(&self, peer: &str, task_id: &str) -> Result<Option<TaskRecord>, StateError> {
        self.db.with(|c| {
            let task = c
                .query_row(
                    &format!(
                        "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE task_id = ?1 AND peer = ?2"
                    ),
                    [task_id, peer],
                    task_row,
                )
                .optional()?;
            let Some(mut task) = task else {
                return Ok(None);
            };
            task.runs = runs_of(c, task_id)?;
            Ok(Some(task))
        })
    }

    /// A page of `filter.peer`'s tasks, newest first, and how many match in all.
    pub fn list(&self, filter: &TaskFilter) -> Result<(Vec<TaskRecord>, usize), StateError> {
        self.db.with(|c| {
            let mut cond = String::from("peer = ?1 AND agent_id = ?2");
            let mut args: Vec<rusqlite::types::Value> =
                vec![filter.peer.clone().into(), filter.agent.clone().into()];
            if let Some(context) = &filter.context_id {
                args.push(context.clone().into());
                cond.push_str(&format!(" AND context_id = ?{}", args.len()));
            }
            if let Some(state) = &filter.state {
                args.push(state.clone().into());
                cond.push_str(&format!(" AND state = ?{}", args.len()));
            }
            let total: i64 = c.query_row(
                &format!("SELECT COUNT(*) FROM a2a_tasks WHERE {cond}"),
                rusqlite::params_from_iter(args.iter()),
                |r| r.get(0),
            )?;
            if let Some((us, id)) = &filter.before {
                args.push((*us).into());
                args.push(id.clone().into());
                cond.push_str(&format!(
                    " AND (updated_us < ?{a} OR (updated_us = ?{a} AND task_id < ?{b}))",
                    a = args.len() - 1,
                    b = args.len()
                ));
            }
            args.push((filter.limit as i64).into());
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE {cond} \
                 ORDER BY updated_us DESC, task_id DESC LIMIT ?{}",
                args.len()
            );
            let mut stmt = c.prepare(&sql)?;
            let mut tasks = stmt
                .query_map(rusqlite::params_from_iter(args.iter()), task_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for task in &mut tasks {
                task.runs = runs_of(c, &task.task_id)?;
            }
            Ok((tasks, total.max(0) as usize))
        })
    }
}
