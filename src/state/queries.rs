//! The store's reads (the snapshot, and records one by one) and the writes that happen outside
//! a step's transaction: the journal's start and finish, a runtime's processes forgotten.

use std::path::PathBuf;

use rusqlite::{OptionalExtension, params};

use super::records::{AGENT_COLUMNS, Json, agent_row};
use super::{
    AccountRecord, AgentRecord, BindingRecord, BootstrapRecord, HistoryRecord, JsonText, LiveState,
    PlanRecord, Result, RuntimeProcesses, RuntimeRecord, SNAPSHOT_FORMAT, StateStore, TrashRecord,
    now,
};

impl StateStore {
    /// The whole live state.
    pub fn snapshot(&self) -> Result<LiveState> {
        let agents = self.rows(
            &format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY id"),
            [],
            agent_row,
        )?;
        let bootstrap = self.rows(
            "SELECT agent_id, name, path, hash FROM bootstrap_files ORDER BY agent_id, name",
            [],
            |r| {
                Ok(BootstrapRecord {
                    agent_id: r.get(0)?,
                    name: r.get(1)?,
                    path: PathBuf::from(r.get::<_, String>(2)?),
                    hash: r.get(3)?,
                })
            },
        )?;
        let channel_accounts = self.rows(
            "SELECT channel, account, spec, hash FROM channel_accounts ORDER BY channel, account",
            [],
            |r| {
                Ok(AccountRecord {
                    channel: r.get(0)?,
                    account: r.get(1)?,
                    spec: r.get::<_, Json<_>>(2)?.0,
                    hash: r.get(3)?,
                })
            },
        )?;
        let bindings = self.rows(
            "SELECT key, agent_id, spec, position FROM bindings ORDER BY position, key",
            [],
            |r| {
                Ok(BindingRecord {
                    key: r.get(0)?,
                    agent_id: r.get(1)?,
                    spec: JsonText::from_text(r.get(2)?),
                    position: r.get(3)?,
                })
            },
        )?;
        let runtimes = self.runtimes()?;
        let routing = self
            .conn
            .query_row(
                "SELECT generation, content_hash, config_hash, bindings, published_at FROM routing_plans ORDER BY generation DESC LIMIT 1",
                [],
                |r| {
                    Ok(PlanRecord {
                        generation: r.get(0)?,
                        content_hash: r.get(1)?,
                        config_hash: r.get(2)?,
                        bindings: r.get(3)?,
                        published_at: r.get(4)?,
                    })
                },
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        let trash = self.trash_records()?;
        Ok(LiveState {
            format_version: SNAPSHOT_FORMAT.to_string(),
            lineage: self.lineage()?,
            serial: self.serial()?,
            agents,
            bootstrap,
            channel_accounts,
            bindings,
            runtimes,
            routing,
            trash,
        })
    }

    /// One agent as last applied.
    pub fn agent(&self, id: &str) -> Result<Option<AgentRecord>> {
        self.conn
            .query_row(
                &format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?1"),
                [id],
                agent_row,
            )
            .optional()
            .map_err(|e| self.sql(e))
    }

    pub fn runtimes(&self) -> Result<Vec<RuntimeRecord>> {
        self.rows(
            "SELECT agent_id, kind, spec_hash, desired, status, pid, process_start, started_at, restarts, last_exit, last_error, info, updated_at FROM runtimes ORDER BY agent_id",
            [],
            |r| {
                Ok(RuntimeRecord {
                    agent_id: r.get(0)?,
                    kind: r.get(1)?,
                    spec_hash: r.get(2)?,
                    desired: r.get(3)?,
                    status: r.get(4)?,
                    pid: r.get(5)?,
                    process_start: r.get(6)?,
                    started_at: r.get(7)?,
                    restarts: r.get(8)?,
                    last_exit: r.get(9)?,
                    last_error: r.get(10)?,
                    info: r.get::<_, Option<Json<_>>>(11)?.map(|j| j.0),
                    updated_at: r.get(12)?,
                })
            },
        )
    }

    /// The processes each runtime had on record (a killed controller's are left to the next).
    pub fn runtime_processes(&self) -> Result<Vec<RuntimeProcesses>> {
        self.rows(
            "SELECT agent_id, pid, process_start, escaped FROM runtimes WHERE pid IS NOT NULL OR escaped IS NOT NULL ORDER BY agent_id",
            [],
            |r| {
                Ok(RuntimeProcesses {
                    agent_id: r.get(0)?,
                    pid: r.get(1)?,
                    process_start: r.get(2)?,
                    escaped: r
                        .get::<_, Option<Json<_>>>(3)?
                        .map(|j| j.0)
                        .unwrap_or_default(),
                })
            },
        )
    }

    /// Forgets a runtime's processes once they are gone; `stopped` when this process stopped
    /// them.
    pub fn forget_runtime_processes(&self, agent_id: &str, stopped: bool) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runtimes SET pid = NULL, process_start = NULL, escaped = NULL,
                 status = CASE WHEN ?2 THEN 'stopped' ELSE status END, updated_at = ?3
                 WHERE agent_id = ?1",
                params![agent_id, stopped, now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// The session keys (and `acp` bindings) of trash entry `entry` that the live tables hold
    /// again — a new agent with the same id talked in the same conversations since — so that a
    /// restore cannot put the entry's rows back without mixing two agents' conversations.
    pub fn access_restore_conflicts(&self, entry: &str) -> Result<Vec<String>> {
        self.rows(
            "SELECT session_key FROM trash_sessions t WHERE entry = ?1
                 AND EXISTS (SELECT 1 FROM sessions l WHERE l.session_key = t.session_key)
             UNION SELECT session_key FROM trash_transcript t WHERE entry = ?1
                 AND EXISTS (SELECT 1 FROM transcript l WHERE l.session_key = t.session_key)
             UNION SELECT session_key FROM trash_deliveries t WHERE entry = ?1
                 AND EXISTS (SELECT 1 FROM deliveries l WHERE l.channel = t.channel
                     AND l.account_id = t.account_id AND l.peer_kind = t.peer_kind
                     AND l.peer_id = t.peer_id AND l.thread_id = t.thread_id
                     AND l.message_id = t.message_id)
             UNION SELECT session_key FROM trash_acp_bindings t WHERE entry = ?1
                 AND EXISTS (SELECT 1 FROM acp_bindings l WHERE l.binding_key = t.binding_key)
             ORDER BY 1",
            [entry],
            |r| r.get(0),
        )
    }

    /// How many conversations (session keys with a transcript or a session) trash entry
    /// `entry` holds.
    pub fn trashed_conversations(&self, entry: &str) -> Result<u64> {
        self.conn
            .query_row(
                "SELECT count(*) FROM (SELECT session_key FROM trash_sessions WHERE entry = ?1
                 UNION SELECT session_key FROM trash_transcript WHERE entry = ?1)",
                [entry],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))
    }

    pub fn trash_records(&self) -> Result<Vec<TrashRecord>> {
        self.rows(
            "SELECT entry, agent_id, dir, serial, created_at, manifest, restored_at FROM trash ORDER BY created_at, entry",
            [],
            |r| {
                Ok(TrashRecord {
                    entry: r.get(0)?,
                    agent_id: r.get(1)?,
                    dir: PathBuf::from(r.get::<_, String>(2)?),
                    serial: r.get(3)?,
                    created_at: r.get(4)?,
                    manifest: r.get::<_, Json<_>>(5)?.0,
                    restored_at: r.get(6)?,
                })
            },
        )
    }

    pub fn history(&self) -> Result<Vec<HistoryRecord>> {
        self.rows(
            "SELECT id, serial, started_at, finished_at, user, host, source, config_hash, git_commit, added, changed, removed, outcome, error FROM history ORDER BY id",
            [],
            |r| {
                Ok(HistoryRecord {
                    id: r.get(0)?,
                    serial: r.get(1)?,
                    started_at: r.get(2)?,
                    finished_at: r.get(3)?,
                    user: r.get(4)?,
                    host: r.get(5)?,
                    source: r.get(6)?,
                    config_hash: r.get(7)?,
                    git_commit: r.get(8)?,
                    added: r.get(9)?,
                    changed: r.get(10)?,
                    removed: r.get(11)?,
                    outcome: r.get(12)?,
                    error: r.get(13)?,
                })
            },
        )
    }

    /// Journal steps that were started and never finished (a crash), oldest first.
    pub fn unfinished_steps(&self) -> Result<Vec<(i64, String, Option<String>)>> {
        self.rows(
            "SELECT id, step, detail FROM journal WHERE status = 'started' ORDER BY id",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// Records that a step starts; returns its journal id.
    pub fn journal_start(&mut self, serial: u64, step: &str, detail: Option<&str>) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO journal (serial, step, detail, status, started_at) VALUES (?1, ?2, ?3, 'started', ?4)",
                params![serial, step, detail, now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Marks every started step with this name as done (a resumed step finishes the crashed
    /// attempt's record too).
    pub fn journal_finish(&mut self, step: &str, status: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE journal SET status = ?1, finished_at = ?2 WHERE step = ?3 AND status = 'started'",
                params![status, now(), step],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }
}
