//! The store's reads (the snapshot, and records one by one) and the writes that happen outside
//! a step's transaction: the journal's start and finish, a runtime's processes forgotten.

use std::path::PathBuf;

use super::db::{Optional, Query, params};

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
            params![],
            agent_row,
        )?;
        let bootstrap = self.rows(
            "SELECT agent_id, name, path, hash FROM bootstrap_files ORDER BY agent_id, name",
            params![],
            |r| {
                Ok(BootstrapRecord {
                    agent_id: r.get(0)?,
                    name: r.get(1)?,
                    path: PathBuf::from(r.get::<String>(2)?),
                    hash: r.get(3)?,
                })
            },
        )?;
        let channel_accounts = self.rows(
            "SELECT channel, account, spec, hash FROM channel_accounts ORDER BY channel, account",
            params![],
            |r| {
                Ok(AccountRecord {
                    channel: r.get(0)?,
                    account: r.get(1)?,
                    spec: r.get::<Json<_>>(2)?.0,
                    hash: r.get(3)?,
                })
            },
        )?;
        let bindings = self.rows(
            "SELECT key, agent_id, spec, position FROM bindings ORDER BY position, key",
            params![],
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
            .db
            .query_row(
                "SELECT generation, content_hash, config_hash, bindings, published_at FROM routing_plans ORDER BY generation DESC LIMIT 1",
                params![],
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
            .map_err(|e| self.db(e))?;
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
        self.db
            .query_row(
                &format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?1"),
                params![id],
                agent_row,
            )
            .optional()
            .map_err(|e| self.db(e))
    }

    pub fn runtimes(&self) -> Result<Vec<RuntimeRecord>> {
        self.rows(
            "SELECT agent_id, kind, spec_hash, desired, status, pid, process_start, started_at, restarts, last_exit, last_error, info, updated_at FROM runtimes ORDER BY agent_id",
            params![],
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
                    info: r.get::<Option<Json<_>>>(11)?.map(|j| j.0),
                    updated_at: r.get(12)?,
                })
            },
        )
    }

    /// The processes each runtime had on record (a killed controller's are left to the next).
    pub fn runtime_processes(&self) -> Result<Vec<RuntimeProcesses>> {
        self.rows(
            "SELECT agent_id, pid, process_start, escaped FROM runtimes WHERE pid IS NOT NULL OR escaped IS NOT NULL ORDER BY agent_id",
            params![],
            |r| {
                Ok(RuntimeProcesses {
                    agent_id: r.get(0)?,
                    pid: r.get(1)?,
                    process_start: r.get(2)?,
                    escaped: r
                        .get::<Option<Json<_>>>(3)?
                        .map(|j| j.0)
                        .unwrap_or_default(),
                })
            },
        )
    }

    /// Forgets a runtime's processes once they are gone; `stopped` when this process stopped
    /// them.
    pub fn forget_runtime_processes(&self, agent_id: &str, stopped: bool) -> Result<()> {
        self.db
            .execute(
                "UPDATE runtimes SET pid = NULL, process_start = NULL, escaped = NULL,
                 status = CASE WHEN ?2 THEN 'stopped' ELSE status END, updated_at = ?3
                 WHERE agent_id = ?1",
                params![agent_id, stopped, now()],
            )
            .map_err(|e| self.db(e))?;
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
            params![entry],
            |r| r.get(0),
        )
    }

    /// How many conversations (session keys with a transcript or a session) trash entry
    /// `entry` holds.
    pub fn trashed_conversations(&self, entry: &str) -> Result<u64> {
        self.db
            .query_row(
                "SELECT count(*) FROM (SELECT session_key FROM trash_sessions WHERE entry = ?1
                 UNION SELECT session_key FROM trash_transcript WHERE entry = ?1) AS kept",
                params![entry],
                |r| r.get(0),
            )
            .map_err(|e| self.db(e))
    }

    pub fn trash_records(&self) -> Result<Vec<TrashRecord>> {
        self.rows(
            "SELECT entry, agent_id, dir, serial, created_at, manifest, restored_at FROM trash ORDER BY created_at, entry",
            params![],
            |r| {
                Ok(TrashRecord {
                    entry: r.get(0)?,
                    agent_id: r.get(1)?,
                    dir: PathBuf::from(r.get::<String>(2)?),
                    serial: r.get(3)?,
                    created_at: r.get(4)?,
                    manifest: r.get::<Json<_>>(5)?.0,
                    restored_at: r.get(6)?,
                })
            },
        )
    }

    pub fn history(&self) -> Result<Vec<HistoryRecord>> {
        self.rows(
            r#"SELECT id, serial, started_at, finished_at, "user", host, source, config_hash, git_commit, added, changed, removed, outcome, error FROM history ORDER BY id"#,
            params![],
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
            params![],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// Records that a step starts; returns its journal id.
    pub fn journal_start(&mut self, serial: u64, step: &str, detail: Option<&str>) -> Result<i64> {
        self.db
            .query_row(
                "INSERT INTO journal (serial, step, detail, status, started_at) VALUES (?1, ?2, ?3, 'started', ?4) RETURNING id",
                params![serial, step, detail, now()],
                |r| r.get(0),
            )
            .map_err(|e| self.db(e))
    }

    /// Marks every started step with this name as done (a resumed step finishes the crashed
    /// attempt's record too).
    pub fn journal_finish(&mut self, step: &str, status: &str) -> Result<()> {
        self.db
            .execute(
                "UPDATE journal SET status = ?1, finished_at = ?2 WHERE step = ?3 AND status = 'started'",
                params![status, now(), step],
            )
            .map_err(|e| self.db(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::db::{Query, params};
    use super::super::{LeasePurpose, Outcome, RuntimeObservation, RuntimePhase, StateDir, Wanted};
    use super::*;

    fn agent(id: &str, spec_hash: &str) -> AgentRecord {
        AgentRecord {
            id: id.into(),
            spec_hash: spec_hash.into(),
            spec: serde_json::json!({"id": id}),
            workspace: PathBuf::from(format!("/w/{id}")),
            agent_dir: PathBuf::from(format!("/a/{id}")),
            sessions_dir: PathBuf::from(format!("/s/{id}")),
            protect: true,
            workspace_origin: super::super::DirOrigin::Created,
            agent_dir_origin: super::super::DirOrigin::Adopted,
            sessions_origin: super::super::DirOrigin::Unknown,
            applied_serial: 1,
        }
    }

    fn count(store: &StateStore, table: &str) -> i64 {
        store
            .db
            .query_row(&format!("SELECT count(*) FROM {table}"), params![], |r| {
                r.get(0)
            })
            .unwrap()
    }

    /// Every statement of the controller's store, on `dir`'s backend: the lease, the journal,
    /// an apply step's records, a deleted agent's conversations moved to its trash entry and
    /// back, and the snapshot that reads them.
    fn every_statement(dir: &StateDir) {
        let mut store = StateStore::open(dir).unwrap();
        assert_eq!(store.serial().unwrap(), 0);
        assert!(!store.lineage().unwrap().is_empty());

        // The lease: taken, renewed, held by this process, let go.
        store
            .acquire_lease(LeasePurpose::Apply, Duration::ZERO)
            .unwrap();
        store.renew_lease().unwrap();
        let holder = store.lease_holder().unwrap().expect("held");
        assert_eq!(
            (holder.pid, holder.purpose),
            (std::process::id(), LeasePurpose::Apply)
        );
        // Taken again by its holder: the row is replaced, not doubled.
        store
            .acquire_lease(LeasePurpose::Controller, Duration::ZERO)
            .unwrap();
        assert_eq!(
            store.lease_holder().unwrap().unwrap().purpose,
            LeasePurpose::Controller
        );

        // A step started outside a transaction, then a step's records in one.
        let started = store.journal_start(1, "agent:a", Some("create")).unwrap();
        assert_eq!(
            store.unfinished_steps().unwrap(),
            vec![(started, "agent:a".to_string(), Some("create".to_string()))]
        );
        let history = store
            .transaction(|tx| {
                let id = tx.start_history(&HistoryRecord {
                    id: 0,
                    serial: 1,
                    started_at: now(),
                    finished_at: None,
                    user: "ops".into(),
                    host: "h".into(),
                    source: "apply".into(),
                    config_hash: "c1".into(),
                    git_commit: Some("abc".into()),
                    added: 0,
                    changed: 0,
                    removed: 0,
                    outcome: Outcome::Running,
                    error: None,
                })?;
                tx.put_agent(&agent("a", "old"))?;
                tx.put_agent(&agent("a", "new"))?;
                tx.put_agent(&agent("b", "b1"))?;
                for name in ["AGENTS.md", "SOUL.md"] {
                    tx.put_bootstrap(&BootstrapRecord {
                        agent_id: "a".into(),
                        name: name.into(),
                        path: PathBuf::from(format!("/w/a/{name}")),
                        hash: "h1".into(),
                    })?;
                }
                tx.put_account(&AccountRecord {
                    channel: "slack".into(),
                    account: "main".into(),
                    spec: serde_json::json!({"token": "${SLACK}"}),
                    hash: "ah".into(),
                })?;
                tx.put_binding(&BindingRecord {
                    key: "k1".into(),
                    agent_id: "a".into(),
                    spec: JsonText::of(&serde_json::json!({"channel": "slack"})),
                    position: 0,
                })?;
                tx.want_runtime("a", "acp", "rh", Wanted::Run)?;
                tx.want_runtime("b", "acp", "rb", Wanted::Stop)?;
                tx.observe_runtime(&RuntimeObservation {
                    agent_id: "a",
                    kind: "acp",
                    spec_hash: "rh",
                    status: RuntimePhase::Ready,
                    pid: Some(std::process::id()),
                    process_start: Some("123"),
                    escaped: &[],
                    started_at: Some("2026-01-01T00:00:00Z"),
                    restarts: 2,
                    last_exit: None,
                    last_error: Some("once"),
                    info: Some(&serde_json::json!({"agent": "x"})),
                })?;
                tx.put_plan(&PlanRecord {
                    generation: 1,
                    content_hash: "p1".into(),
                    config_hash: "c1".into(),
                    bindings: 1,
                    published_at: now(),
                })?;
                tx.journal_done(1, "agent:a")?;
                tx.set_meta("note", "one")?;
                tx.set_meta("note", "two")?;
                tx.set_serial(1)?;
                tx.finish_history(id, (2, 1, 0), Outcome::Applied, None)?;
                Ok(id)
            })
            .unwrap();
        assert!(store.unfinished_steps().unwrap().is_empty());
        assert_eq!(store.meta_value("note").unwrap().as_deref(), Some("two"));

        let live = store.snapshot().unwrap();
        assert_eq!(live.serial, 1);
        let ids: Vec<_> = live
            .agents
            .iter()
            .map(|a| (a.id.as_str(), a.spec_hash.as_str()))
            .collect();
        assert_eq!(ids, [("a", "new"), ("b", "b1")]);
        assert_eq!(live.agents[0], agent("a", "new"));
        assert_eq!(live.bootstrap.len(), 2);
        assert_eq!(live.channel_accounts[0].spec["token"], "${SLACK}");
        assert_eq!(live.bindings[0].key, "k1");
        assert_eq!(live.routing.as_ref().unwrap().generation, 1);
        let a = &live.runtimes[0];
        assert_eq!(
            (a.desired, a.status, a.restarts, a.last_error.as_deref()),
            (Wanted::Run, RuntimePhase::Ready, 2, Some("once"))
        );
        assert_eq!(live.runtimes[1].status, RuntimePhase::Stopped);
        assert_eq!(store.agent("b").unwrap().unwrap().spec_hash, "b1");
        assert_eq!(store.agent("c").unwrap(), None);
        let h = store.history().unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(
            (h[0].id, h[0].outcome, h[0].added, h[0].user.as_str()),
            (history, Outcome::Applied, 2, "ops")
        );

        // The runtime's processes, then forgotten.
        assert_eq!(store.runtime_processes().unwrap().len(), 1);
        store.forget_runtime_processes("a", true).unwrap();
        assert!(store.runtime_processes().unwrap().is_empty());
        assert_eq!(store.runtimes().unwrap()[0].status, RuntimePhase::Stopped);

        // Agent `a`'s conversations, then `a` deleted: they go to its trash entry.
        let key = "agent:a:main";
        let db = &store.db;
        let at = now();
        db.execute(
            "INSERT INTO sessions (session_key, agent_id, created_at, updated_at) VALUES (?1, 'a', ?2, ?2)",
            params![key, at],
        )
        .unwrap();
        db.execute(
            "INSERT INTO transcript (session_key, provenance, text, at) VALUES (?1, 'inbound', 'hi', ?2)",
            params![key, at],
        )
        .unwrap();
        db.execute(
            "INSERT INTO deliveries (channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at)
             VALUES ('slack', 'main', 'direct', 'u1', '', 'm1', ?1, '{}', ?2)",
            params![key, at],
        )
        .unwrap();
        db.execute(
            "INSERT INTO acp_bindings (binding_key, session_key, created_at) VALUES ('b1', ?1, ?2)",
            params![key, at],
        )
        .unwrap();
        db.execute(
            "INSERT INTO agent_routes (agent_id, session_key, channel, account_id, peer_kind, peer_id, thread_id, at)
             VALUES ('a', ?1, 'slack', 'main', 'direct', 'u1', '', ?2)",
            params![key, at],
        )
        .unwrap();
        let entry = "a-0001";
        store
            .transaction(|tx| {
                tx.put_trash(&TrashRecord {
                    entry: entry.into(),
                    agent_id: "a".into(),
                    dir: PathBuf::from("/trash/a-0001"),
                    serial: 2,
                    created_at: now(),
                    manifest: serde_json::json!({"agent_id": "a"}),
                    restored_at: None,
                })?;
                tx.trash_access("a", entry)?;
                tx.delete_agent("a")?;
                tx.delete_runtime("a")?;
                tx.delete_binding("k1")?;
                tx.delete_bootstrap("a", "SOUL.md")?;
                tx.delete_account("slack", "main")?;
                Ok(())
            })
            .unwrap();
        // The Access tables an agent's conversations are in, each with its trash twin.
        let moved = [
            "sessions",
            "transcript",
            "deliveries",
            "acp_bindings",
            "agent_routes",
        ];
        for table in moved {
            assert_eq!(count(&store, table), 0, "{table} left in the live tables");
            assert_eq!(count(&store, &format!("trash_{table}")), 1, "{table}");
        }
        assert_eq!(store.trashed_conversations(entry).unwrap(), 1);
        let trash = store.trash_records().unwrap();
        assert_eq!(trash[0].manifest["agent_id"], "a");
        let live = store.snapshot().unwrap();
        assert_eq!(live.agents.len(), 1);
        assert!(live.bindings.is_empty() && live.channel_accounts.is_empty());
        assert_eq!(live.bootstrap.len(), 0, "deleting an agent drops its files");

        // A new `a` talked in the same conversation: a restore would mix the two.
        store
            .db
            .execute(
                "INSERT INTO sessions (session_key, agent_id, created_at, updated_at) VALUES (?1, 'a', ?2, ?2)",
                params![key, now()],
            )
            .unwrap();
        assert_eq!(store.access_restore_conflicts(entry).unwrap(), [key]);
        store.db.execute("DELETE FROM sessions", params![]).unwrap();
        assert!(store.access_restore_conflicts(entry).unwrap().is_empty());
        store
            .transaction(|tx| {
                tx.restore_access(entry)?;
                tx.mark_restored(entry)
            })
            .unwrap();
        for table in moved {
            assert_eq!(count(&store, table), 1, "{table} not restored");
            assert_eq!(count(&store, &format!("trash_{table}")), 0, "{table}");
        }
        assert!(store.trash_records().unwrap()[0].restored_at.is_some());
        store.transaction(|tx| tx.delete_trash(entry)).unwrap();
        assert!(store.trash_records().unwrap().is_empty());

        // An apply that a crash cut short is recorded as interrupted.
        store
            .transaction(|tx| {
                tx.start_history(&HistoryRecord {
                    serial: 2,
                    outcome: Outcome::Running,
                    ..h[0].clone()
                })
                .map(drop)
            })
            .unwrap();
        store.transaction(|tx| tx.interrupt_history()).unwrap();
        let h = store.history().unwrap();
        assert_eq!(h[1].outcome, Outcome::Interrupted);
        assert!(h[1].id > h[0].id);

        // The pairing records read through the store (pairing.rs has their tests).
        let (pending, paired) = store.pairing(None, None, 0).unwrap();
        assert!(pending.is_empty() && paired.is_empty());

        store.release_lease().unwrap();
        assert_eq!(store.lease_holder().unwrap(), None);
    }

    #[test]
    fn every_statement_of_the_controllers_store_on_both_backends() {
        let tmp = tempfile::tempdir().unwrap();
        every_statement(&StateDir::new(tmp.path()));
        let (_tmp, _schema, postgres) = crate::state::postgres_state();
        every_statement(&postgres);
    }
}
