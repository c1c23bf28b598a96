//! The A2A server's rows (migrations `a2a.sql`, `a2a_push.sql`): tasks and the runs that carry
//! their messages, the peers' push notification configs and every delivery attempt. A
//! connection of its own; every call is short and runs on the blocking pool. On the state's
//! backend seam ([`crate::state::db`]): the same statements on SQLite and PostgreSQL, and
//! what reads before it writes (a retried message id, the next run's number, a peer's limit
//! of push configs) holds the state's write lock, so replicas of one state decide it once.

use crate::state::db::{Behavior, DbResult, Optional, Query, Row, ToValue, params};
use crate::state::{LayerConnection, StateDir, StateError};

pub(crate) struct A2aStore {
    db: LayerConnection,
}

/// A task as stored; its state now is read off its last run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskRecord {
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
    /// The media types the peer takes in answers (`acceptedOutputModes` of its last message
    /// that said; `None`: anything).
    pub output_modes: Option<Vec<String>>,
    /// The files its agent handed to the peer (not a column: the Hub's, read with the runs;
    /// `A2a::fill_files`).
    pub files: Vec<OutFile>,
}

/// A file the agent handed to the peer, and the URL the peer may GET it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutFile {
    pub file: crate::hub::a2a::RunFile,
    pub url: String,
}

/// ListTasks' filter: one peer's tasks, newest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskFilter {
    pub peer: String,
    /// `None`: the peer's tasks with every agent (the routed endpoint).
    pub agent: Option<String>,
    pub context_id: Option<String>,
    pub state: Option<String>,
    /// Tasks strictly older than this `(updated_us, task_id)` (the page token).
    pub before: Option<(i64, String)>,
    pub limit: usize,
}

const TASK_COLUMNS: &str =
    "task_id, peer, agent_id, context_id, session_key, state, created_at, updated_us, output_modes";

fn task_row(row: &Row<'_>) -> DbResult<TaskRecord> {
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
        output_modes: row
            .get::<Option<String>>(8)?
            .and_then(|m| serde_json::from_str(&m).ok()),
        files: Vec::new(),
    })
}

/// What recording a message did: the peer's `messageId` was new, or it was taken before (a
/// retry), by the task and run named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recorded {
    New,
    Taken {
        task_id: String,
        run_id: String,
    },
    /// The push config given with the message is over the peer's limit (`maxPushConfigs`):
    /// nothing was written.
    PushFull(usize),
}

/// A push notification config as stored: a peer's webhook for one of its tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PushRecord {
    pub task_id: String,
    pub config_id: String,
    pub peer: String,
    pub url: String,
    /// Sent as `X-A2A-Notification-Token`.
    pub token: Option<String>,
    /// `authentication`: the scheme and the credentials, sent as `Authorization`.
    pub auth: Option<(String, String)>,
    pub created_at: String,
}

/// What adding a push config did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PushAdded {
    Added,
    /// A config of that id on that task was there: it is replaced (the count is unchanged).
    Replaced,
    /// The peer holds its limit of configs on unfinished tasks already (the limit).
    Full(usize),
}

/// One delivery attempt of a push notification, for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PushAttempt {
    pub task_id: String,
    pub config_id: String,
    pub peer: String,
    pub host: String,
    pub event: String,
    pub attempt: u32,
    pub status: Option<u16>,
    pub error: Option<String>,
}

const PUSH_COLUMNS: &str =
    "task_id, config_id, peer, url, token, auth_scheme, auth_credentials, created_at";

fn push_row(row: &Row<'_>) -> DbResult<PushRecord> {
    let scheme: Option<String> = row.get(5)?;
    let credentials: Option<String> = row.get(6)?;
    Ok(PushRecord {
        task_id: row.get(0)?,
        config_id: row.get(1)?,
        peer: row.get(2)?,
        url: row.get(3)?,
        token: row.get(4)?,
        auth: scheme.map(|s| (s, credentials.unwrap_or_default())),
        created_at: row.get(7)?,
    })
}

/// Adds (or replaces) `push` within a transaction, unless `peer` holds `limit` configs on its
/// tasks that are not finished already.
fn add_push_in(tx: &impl Query, push: &PushRecord, limit: usize) -> DbResult<PushAdded> {
    let exists: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM a2a_push_configs WHERE task_id = ?1 AND config_id = ?2)",
        params![push.task_id, push.config_id],
        |r| r.get(0),
    )?;
    if !exists {
        let held: i64 = tx.query_row(
            "SELECT COUNT(*) FROM a2a_push_configs c JOIN a2a_tasks t ON t.task_id = c.task_id \
             WHERE c.peer = ?1 AND t.state NOT IN \
             ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED')",
            params![push.peer],
            |r| r.get(0),
        )?;
        if held.max(0) as usize >= limit {
            return Ok(PushAdded::Full(limit));
        }
    }
    let (scheme, credentials) = match &push.auth {
        Some((s, c)) => (Some(s.as_str()), Some(c.as_str())),
        None => (None, None),
    };
    // Replaced whole, as SQLite's `INSERT OR REPLACE` did.
    tx.execute(
        &format!(
            "INSERT INTO a2a_push_configs ({PUSH_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
             ON CONFLICT (task_id, config_id) DO UPDATE SET peer = excluded.peer, url = excluded.url, \
             token = excluded.token, auth_scheme = excluded.auth_scheme, \
             auth_credentials = excluded.auth_credentials, created_at = excluded.created_at"
        ),
        params![
        push.task_id,
        push.config_id,
        push.peer,
        push.url,
        push.token,
        scheme,
            credentials,
            push.created_at
        ],
    )?;
    Ok(if exists {
        PushAdded::Replaced
    } else {
        PushAdded::Added
    })
}

/// The task and run that carried `peer`'s message `message_id`, if one did.
fn message_of(c: &impl Query, peer: &str, message_id: &str) -> DbResult<Option<(String, String)>> {
    c.query_row(
        "SELECT r.task_id, r.run_id FROM a2a_task_runs r JOIN a2a_tasks t ON t.task_id = r.task_id \
         WHERE r.message_id = ?1 AND t.peer = ?2 ORDER BY t.created_at, r.seq LIMIT 1",
        params![message_id, peer],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
}

fn taken(found: Option<(String, String)>) -> Option<Recorded> {
    found.map(|(task_id, run_id)| Recorded::Taken { task_id, run_id })
}

fn modes_column(modes: Option<&[String]>) -> Option<String> {
    modes.and_then(|m| serde_json::to_string(m).ok())
}

fn now_us() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

fn runs_of(c: &impl Query, task_id: &str) -> DbResult<Vec<(String, String)>> {
    c.query_map(
        "SELECT run_id, message_id FROM a2a_task_runs WHERE task_id = ?1 ORDER BY seq",
        params![task_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

impl A2aStore {
    pub(crate) fn open(dir: &StateDir) -> Result<A2aStore, StateError> {
        Ok(A2aStore {
            db: LayerConnection::open(dir, "a2a")?,
        })
    }

    /// The task and run that carried `peer`'s message `message_id`, if one did (a retry).
    pub(crate) fn message(
        &self,
        peer: &str,
        message_id: &str,
    ) -> Result<Option<(String, String)>, StateError> {
        self.db.query(|c| message_of(&*c, peer, message_id))
    }

    /// Records a new task with its first run, unless the peer's message id of that run was
    /// taken before (then nothing is written).
    #[cfg(test)]
    pub(crate) fn insert(&self, task: &TaskRecord) -> Result<Recorded, StateError> {
        self.insert_with_push(task, None)
    }

    /// [`A2aStore::insert`], with the push config the message came with (and the peer's
    /// limit), in the same transaction: over the limit, nothing is written.
    pub(crate) fn insert_with_push(
        &self,
        task: &TaskRecord,
        push: Option<(&PushRecord, usize)>,
    ) -> Result<Recorded, StateError> {
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            for (_, message_id) in &task.runs {
                if let Some(taken) = taken(message_of(&tx, &task.peer, message_id)?) {
                    return Ok(taken);
                }
            }
            let now = now_us();
            tx.execute(
                &format!(
                    "INSERT INTO a2a_tasks ({TASK_COLUMNS}, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?7)"
                ),
                params![
                    task.task_id,
                    task.peer,
                    task.agent_id,
                    task.context_id,
                    task.session_key,
                    task.state,
                    task.created_at,
                    now,
                    modes_column(task.output_modes.as_deref()),
                ],
            )?;
            for (seq, (run_id, message_id)) in task.runs.iter().enumerate() {
                tx.execute(
                    "INSERT INTO a2a_task_runs (task_id, seq, run_id, message_id) VALUES (?1, ?2, ?3, ?4)",
                    params![task.task_id, seq as i64, run_id, message_id],
                )?;
            }
            if let Some((push, limit)) = push
                && let PushAdded::Full(limit) = add_push_in(&tx, push, limit)?
            {
                return Ok(Recorded::PushFull(limit));
            }
            tx.commit()?;
            Ok(Recorded::New)
        })
    }

    /// Adds a push config to a task (or replaces the one of its id), within `peer`'s limit.
    pub(crate) fn add_push(
        &self,
        push: &PushRecord,
        limit: usize,
    ) -> Result<PushAdded, StateError> {
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let added = add_push_in(&tx, push, limit)?;
            tx.commit()?;
            Ok(added)
        })
    }

    /// Push config `config_id` of `peer`'s task `task_id` (another peer's is not found).
    pub(crate) fn push_config(
        &self,
        peer: &str,
        task_id: &str,
        config_id: &str,
    ) -> Result<Option<PushRecord>, StateError> {
        self.db.query(|c| {
            c.query_row(
                &format!(
                    "SELECT {PUSH_COLUMNS} FROM a2a_push_configs WHERE task_id = ?1 AND config_id = ?2 AND peer = ?3"
                ),
                params![task_id, config_id, peer],
                push_row,
            )
            .optional()
        })
    }

    /// The push configs of task `task_id`, oldest first; only `peer`'s when one is named
    /// (`None`: every one, for delivery).
    pub(crate) fn push_configs(
        &self,
        peer: Option<&str>,
        task_id: &str,
    ) -> Result<Vec<PushRecord>, StateError> {
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {PUSH_COLUMNS} FROM a2a_push_configs \
                     WHERE task_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR peer = ?2) ORDER BY created_at, config_id"
                ),
                params![task_id, peer],
                push_row,
            )
        })
    }

    /// Deletes push config `config_id` of `peer`'s task `task_id`; whether there was one.
    pub(crate) fn delete_push(
        &self,
        peer: &str,
        task_id: &str,
        config_id: &str,
    ) -> Result<bool, StateError> {
        self.db.write(|c| {
            c.execute(
                "DELETE FROM a2a_push_configs WHERE task_id = ?1 AND config_id = ?2 AND peer = ?3",
                params![task_id, config_id, peer],
            )
            .map(|n| n > 0)
        })
    }

    /// Whether task `task_id` has a push config.
    pub(crate) fn has_push(&self, task_id: &str) -> Result<bool, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM a2a_push_configs WHERE task_id = ?1)",
                params![task_id],
                |r| r.get(0),
            )
        })
    }

    /// Records one delivery attempt (the audit's `push` line).
    pub(crate) fn record_attempt(&self, a: &PushAttempt) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "INSERT INTO a2a_push_attempts (at, task_id, config_id, peer, host, event, attempt, status, error) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    crate::clock::now(),
                    a.task_id,
                    a.config_id,
                    a.peer,
                    a.host,
                    a.event,
                    a.attempt,
                    a.status,
                    a.error
                ],
            )
            .map(drop)
        })
    }

    /// Adds a run (a further message) to a task of `peer`'s, unless the message id was taken
    /// before (then nothing is written).
    pub(crate) fn add_run(
        &self,
        peer: &str,
        task_id: &str,
        run_id: &str,
        message_id: &str,
        state: &str,
    ) -> Result<Recorded, StateError> {
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            if let Some(taken) = taken(message_of(&tx, peer, message_id)?) {
                return Ok(taken);
            }
            tx.execute(
                "INSERT INTO a2a_task_runs (task_id, seq, run_id, message_id) \
                 SELECT ?1, COALESCE(MAX(seq) + 1, 0), ?2, ?3 FROM a2a_task_runs WHERE task_id = ?1",
                params![task_id, run_id, message_id],
            )?;
            tx.execute(
                "UPDATE a2a_tasks SET state = ?2, updated_at = ?3, updated_us = ?4 WHERE task_id = ?1",
                params![task_id, state, crate::clock::now(), now_us()],
            )?;
            tx.commit()?;
            Ok(Recorded::New)
        })
    }

    /// Records the media types the peer takes in task `task_id`'s answers from now on.
    pub(crate) fn set_output_modes(
        &self,
        task_id: &str,
        modes: &[String],
    ) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE a2a_tasks SET output_modes = ?2 WHERE task_id = ?1",
                params![task_id, modes_column(Some(modes))],
            )
            .map(drop)
        })
    }

    /// Records the state a task was seen in, when it changed.
    pub(crate) fn set_state(&self, task_id: &str, state: &str) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE a2a_tasks SET state = ?2, updated_at = ?3, updated_us = ?4 \
                 WHERE task_id = ?1 AND state <> ?2",
                params![task_id, state, crate::clock::now(), now_us()],
            )
            .map(drop)
        })
    }

    /// Task `task_id` of `peer` (another peer's is not found).
    pub(crate) fn task(&self, peer: &str, task_id: &str) -> Result<Option<TaskRecord>, StateError> {
        self.db.query(|c| {
            // The task, then its runs: two statements, as before the seam (a snapshot of
            // both waits for the seam's transaction that only reads).
            let tx = &*c;
            let task = tx
                .query_row(
                    &format!(
                        "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE task_id = ?1 AND peer = ?2"
                    ),
                    params![task_id, peer],
                    task_row,
                )
                .optional()?;
            let Some(mut task) = task else {
                return Ok(None);
            };
            task.runs = runs_of(tx, task_id)?;
            Ok(Some(task))
        })
    }

    /// A page of `filter.peer`'s tasks, newest first, and how many match in all.
    pub(crate) fn list(&self, filter: &TaskFilter) -> Result<(Vec<TaskRecord>, usize), StateError> {
        let limit = filter.limit as i64;
        self.db.query(|c| {
            // The count, the page, then its tasks' runs: statements of their own, as before
            // the seam.
            let tx = &*c;
            let mut cond = String::from("peer = ?1");
            let mut args: Vec<&dyn ToValue> = vec![&filter.peer];
            if let Some(agent) = &filter.agent {
                args.push(agent);
                cond.push_str(&format!(" AND agent_id = ?{}", args.len()));
            }
            if let Some(context) = &filter.context_id {
                args.push(context);
                cond.push_str(&format!(" AND context_id = ?{}", args.len()));
            }
            if let Some(state) = &filter.state {
                args.push(state);
                cond.push_str(&format!(" AND state = ?{}", args.len()));
            }
            let total: i64 = tx.query_row(
                &format!("SELECT COUNT(*) FROM a2a_tasks WHERE {cond}"),
                &args,
                |r| r.get(0),
            )?;
            if let Some((us, id)) = &filter.before {
                args.push(us);
                args.push(id);
                cond.push_str(&format!(
                    " AND (updated_us < ?{a} OR (updated_us = ?{a} AND task_id < ?{b}))",
                    a = args.len() - 1,
                    b = args.len()
                ));
            }
            args.push(&limit);
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE {cond} \
                 ORDER BY updated_us DESC, task_id DESC LIMIT ?{}",
                args.len()
            );
            let mut tasks = tx.query_map(&sql, &args, task_row)?;
            for task in &mut tasks {
                task.runs = runs_of(tx, &task.task_id)?;
            }
            Ok((tasks, total.max(0) as usize))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, peer: &str, run: &str, message: &str) -> TaskRecord {
        TaskRecord {
            task_id: id.into(),
            peer: peer.into(),
            agent_id: "research".into(),
            context_id: "c1".into(),
            session_key: format!("agent:research:a2a:{peer}:c1"),
            state: "TASK_STATE_SUBMITTED".into(),
            created_at: crate::clock::now(),
            updated_us: 0,
            runs: vec![(run.into(), message.into())],
            output_modes: None,
            files: Vec::new(),
        }
    }

    /// A state on each backend (a new SQLite state directory; a schema of its own in
    /// PostgreSQL), its backend's name, and what keeps it until the test ends.
    fn states() -> Vec<(StateDir, &'static str, Box<dyn std::any::Any>)> {
        let tmp = tempfile::tempdir().unwrap();
        let sqlite = StateDir::new(tmp.path());
        let (files, schema) = (
            tempfile::tempdir().unwrap(),
            crate::state::db::testing::PgSchema::new(),
        );
        let postgres = StateDir::new(files.path()).with_postgres(schema.url().clone());
        vec![
            (sqlite, "sqlite", Box::new(tmp) as Box<dyn std::any::Any>),
            (postgres, "postgres", Box::new((schema, files))),
        ]
    }

    /// Two layers write the one database at once, each reading before it writes (the
    /// message-id check): a transaction that began as a reader could not become a writer once
    /// the other had committed (`database is locked` at once, no busy wait), which 100
    /// concurrent A2A streams hit.
    #[test]
    fn two_connections_recording_at_once_wait_for_each_other_instead_of_failing() {
        for (dir, backend, _keep) in states() {
            drop(A2aStore::open(&dir).unwrap());
            std::thread::scope(|s| {
                for w in 0..2 {
                    let dir = &dir;
                    s.spawn(move || {
                        let store = A2aStore::open(dir).unwrap();
                        for i in 0..200 {
                            let id = format!("t{w}-{i}");
                            store
                                .insert(&task(&id, "partner", &format!("r{id}"), &format!("m{id}")))
                                .unwrap_or_else(|e| panic!("{backend}: {e}"));
                            store
                                .add_run(
                                    "partner",
                                    &id,
                                    &format!("s{id}"),
                                    &format!("n{id}"),
                                    "TASK_STATE_WORKING",
                                )
                                .unwrap_or_else(|e| panic!("{backend}: {e}"));
                        }
                    });
                }
            });
        }
    }

    /// Two replicas of one state take a peer's message at once, eight times over each of the
    /// store's reads that decide a write: one message id makes one task (the others get it
    /// back as a retry), runs added at once get a number each, and configs added at once stay
    /// within the peer's limit.
    #[test]
    fn replicas_racing_on_a_peers_messages_record_each_once() {
        for (dir, backend, _keep) in states() {
            let replicas = [(); 2].map(|()| A2aStore::open(&dir).unwrap());
            let race = |f: &(dyn Fn(usize) -> String + Sync)| -> Vec<String> {
                std::thread::scope(|s| {
                    let handles: Vec<_> = (0..8).map(|i| s.spawn(move || f(i))).collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                })
            };
            let recorded = race(&|i| {
                let id = format!("t{i}");
                match replicas[i % 2].insert(&task(&id, "partner", &format!("r{i}"), "m-retried")) {
                    Ok(Recorded::New) => format!("new {id}"),
                    Ok(Recorded::Taken { task_id, .. }) => format!("taken {task_id}"),
                    other => panic!("{backend}: {other:?}"),
                }
            });
            let new: Vec<&String> = recorded.iter().filter(|r| r.starts_with("new")).collect();
            assert_eq!(new.len(), 1, "{backend}: {recorded:?}");
            let first = new[0].trim_start_matches("new ").to_owned();
            assert!(
                recorded.iter().all(|r| r.ends_with(&format!(" {first}"))),
                "{backend}: every retry gets the one task back: {recorded:?}"
            );

            race(&|i| {
                let added = replicas[i % 2]
                    .add_run(
                        "partner",
                        &first,
                        &format!("s{i}"),
                        &format!("n{i}"),
                        "TASK_STATE_WORKING",
                    )
                    .unwrap_or_else(|e| panic!("{backend}: {e}"));
                assert_eq!(added, Recorded::New, "{backend}");
                String::new()
            });
            let runs = replicas[0].task("partner", &first).unwrap().unwrap().runs;
            assert_eq!(runs.len(), 9, "{backend}: {runs:?}");
            let mut messages: Vec<&str> = runs.iter().map(|(_, m)| m.as_str()).collect();
            messages.sort_unstable();
            messages.dedup();
            assert_eq!(messages.len(), 9, "{backend}: {runs:?}");

            let added = race(&|i| match replicas[i % 2]
                .add_push(&push(&first, "partner", &format!("c{i}")), 3)
            {
                Ok(PushAdded::Added) => "added".into(),
                Ok(PushAdded::Full(3)) => "full".into(),
                other => panic!("{backend}: {other:?}"),
            });
            assert_eq!(
                added.iter().filter(|a| *a == "added").count(),
                3,
                "{backend}: {added:?}"
            );
            assert_eq!(
                replicas[1].push_configs(None, &first).unwrap().len(),
                3,
                "{backend}"
            );
        }
    }

    /// ListTasks: a peer's tasks, newest first, a page at a time, filtered; the count is of
    /// every match.
    #[test]
    fn a_peers_tasks_are_listed_newest_first_a_page_at_a_time() {
        for (dir, backend, _keep) in states() {
            let store = A2aStore::open(&dir).unwrap();
            for (id, peer) in [
                ("t1", "partner"),
                ("t2", "partner"),
                ("t3", "partner"),
                ("t4", "vendor"),
            ] {
                store
                    .insert(&task(id, peer, &format!("r-{id}"), &format!("m-{id}")))
                    .unwrap();
            }
            // t1 moves last: the newest.
            store.set_state("t1", "TASK_STATE_WORKING").unwrap();
            store
                .set_output_modes("t1", &["text/plain".to_owned()])
                .unwrap();
            let ids =
                |tasks: &[TaskRecord]| tasks.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>();
            let filter = TaskFilter {
                peer: "partner".into(),
                limit: 2,
                ..TaskFilter::default()
            };
            let (page, total) = store.list(&filter).unwrap();
            assert_eq!(total, 3, "{backend}");
            assert_eq!(page.len(), 2, "{backend}");
            assert_eq!(page[0].task_id, "t1", "{backend}");
            assert_eq!(
                page[0].output_modes.as_deref(),
                Some(&["text/plain".to_owned()][..])
            );
            assert_eq!(
                page[0].runs,
                [("r-t1".to_owned(), "m-t1".to_owned())],
                "{backend}"
            );
            let last = page.last().unwrap();
            let (rest, total) = store
                .list(&TaskFilter {
                    before: Some((last.updated_us, last.task_id.clone())),
                    ..filter.clone()
                })
                .unwrap();
            assert_eq!(total, 3, "{backend}: the count is of every match");
            let mut seen = ids(&page);
            seen.extend(ids(&rest));
            seen.sort();
            assert_eq!(
                seen,
                ["t1", "t2", "t3"],
                "{backend}: each once, over two pages"
            );
            let (working, total) = store
                .list(&TaskFilter {
                    state: Some("TASK_STATE_WORKING".into()),
                    agent: Some("research".into()),
                    context_id: Some("c1".into()),
                    ..filter.clone()
                })
                .unwrap();
            assert_eq!(
                (ids(&working), total),
                (vec!["t1".to_owned()], 1),
                "{backend}"
            );
            assert_eq!(
                store
                    .list(&TaskFilter {
                        peer: "nobody".into(),
                        limit: 5,
                        ..TaskFilter::default()
                    })
                    .unwrap()
                    .1,
                0
            );
        }
    }

    fn push(task: &str, peer: &str, id: &str) -> PushRecord {
        PushRecord {
            task_id: task.into(),
            config_id: id.into(),
            peer: peer.into(),
            url: "https://hooks.example/a2a".into(),
            token: Some("t".into()),
            auth: Some(("Bearer".into(), "secret".into())),
            created_at: crate::clock::now(),
        }
    }

    #[test]
    fn push_configs_are_the_peers_own_within_its_limit_on_unfinished_tasks() {
        for (dir, _, _keep) in states() {
            push_configs_within_the_limit(&A2aStore::open(&dir).unwrap());
        }
    }

    fn push_configs_within_the_limit(store: &A2aStore) {
        for (id, run) in [("t1", "r1"), ("t2", "r2"), ("t3", "r3")] {
            store
                .insert(&task(id, "partner", run, &format!("m-{id}")))
                .unwrap();
        }
        assert_eq!(
            store.add_push(&push("t1", "partner", "a"), 2).unwrap(),
            PushAdded::Added
        );
        assert_eq!(
            store.add_push(&push("t2", "partner", "b"), 2).unwrap(),
            PushAdded::Added
        );
        assert_eq!(
            store.add_push(&push("t3", "partner", "c"), 2).unwrap(),
            PushAdded::Full(2)
        );
        // The same id again replaces it: no more held.
        assert_eq!(
            store.add_push(&push("t1", "partner", "a"), 2).unwrap(),
            PushAdded::Replaced
        );
        // A finished task's configs do not count.
        store.set_state("t1", "TASK_STATE_COMPLETED").unwrap();
        assert_eq!(
            store.add_push(&push("t3", "partner", "c"), 2).unwrap(),
            PushAdded::Added
        );
        // Over the limit with the message: the task is not written either.
        let over = store
            .insert_with_push(
                &task("t4", "partner", "r4", "m-t4"),
                Some((&push("t4", "partner", "d"), 2)),
            )
            .unwrap();
        assert_eq!(over, Recorded::PushFull(2));
        assert_eq!(store.task("partner", "t4").unwrap(), None);
        // Another peer sees none of them.
        assert_eq!(store.push_config("vendor", "t1", "a").unwrap(), None);
        assert!(!store.delete_push("vendor", "t1", "a").unwrap());
        assert_eq!(store.push_configs(Some("vendor"), "t1").unwrap(), []);
        assert_eq!(store.push_configs(Some("partner"), "t1").unwrap().len(), 1);
        assert!(store.delete_push("partner", "t1", "a").unwrap());
        assert!(!store.delete_push("partner", "t1", "a").unwrap());
    }

    /// `state.retention.a2aTasks` deletes a finished task's push configs and delivery attempts
    /// with it (they name it: left behind, they would be orphans of a task gone). SQLite only:
    /// the prune is the storage layer's, not on the backend seam yet.
    #[test]
    fn retention_deletes_a_tasks_push_configs_and_attempts_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = A2aStore::open(&dir).unwrap();
        store.insert(&task("t1", "partner", "r1", "m1")).unwrap();
        store.add_push(&push("t1", "partner", "a"), 16).unwrap();
        store
            .record_attempt(&PushAttempt {
                task_id: "t1".into(),
                config_id: "a".into(),
                peer: "partner".into(),
                host: "hooks.example".into(),
                event: "statusUpdate TASK_STATE_COMPLETED".into(),
                attempt: 1,
                status: Some(200),
                error: None,
            })
            .unwrap();
        store.set_state("t1", "TASK_STATE_COMPLETED").unwrap();
        drop(store);
        let mut conn = rusqlite::Connection::open(dir.db()).unwrap();
        conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        let rules = crate::state::retention::Rules {
            by_age: vec![("a2aTasks", 1)],
            keep_per_session: None,
        };
        let later = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_hours(72))
            .unwrap();
        crate::state::retention::prune(
            &mut conn,
            &rules,
            later,
            false,
            std::time::Duration::ZERO,
            "test",
        )
        .unwrap();
        for table in ["a2a_tasks", "a2a_push_configs", "a2a_push_attempts"] {
            let n: i64 = conn
                .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
                .unwrap();
            assert_eq!(n, 0, "{table}");
        }
    }

    #[test]
    fn a_retried_message_id_gets_the_first_task_back_even_after_a_restart() {
        for (dir, _, _keep) in states() {
            a_retry_after_a_restart(&dir);
        }
    }

    fn a_retry_after_a_restart(dir: &StateDir) {
        let store = A2aStore::open(dir).unwrap();
        assert_eq!(
            store.insert(&task("t1", "partner", "r1", "m1")).unwrap(),
            Recorded::New
        );
        assert_eq!(
            store
                .add_run("partner", "t1", "r2", "m2", "TASK_STATE_SUBMITTED")
                .unwrap(),
            Recorded::New
        );
        drop(store);
        // The controller restarted: the retry is still known.
        let store = A2aStore::open(dir).unwrap();
        let taken = |task_id: &str, run_id: &str| Recorded::Taken {
            task_id: task_id.into(),
            run_id: run_id.into(),
        };
        assert_eq!(
            store.insert(&task("t2", "partner", "r3", "m1")).unwrap(),
            taken("t1", "r1")
        );
        assert_eq!(
            store
                .add_run("partner", "t1", "r4", "m2", "TASK_STATE_SUBMITTED")
                .unwrap(),
            taken("t1", "r2")
        );
        assert_eq!(store.task("partner", "t2").unwrap(), None);
        assert_eq!(store.task("partner", "t1").unwrap().unwrap().runs.len(), 2);
        assert_eq!(
            store.message("partner", "m2").unwrap(),
            Some(("t1".into(), "r2".into()))
        );
        // Another peer's message ids are its own.
        assert_eq!(
            store.insert(&task("t3", "vendor", "r5", "m1")).unwrap(),
            Recorded::New
        );
        assert_eq!(store.message("nobody", "m1").unwrap(), None);
    }
}
