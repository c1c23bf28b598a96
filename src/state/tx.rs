//! [`Tx`]: the writes of one transaction (an apply step's records land together or not at
//! all), including the move of a deleted agent's Access rows into its trash entry and back.

use super::db::{self, Query, params};
use super::records::AGENT_COLUMNS;
use super::{
    AccountRecord, AgentRecord, BindingRecord, BootstrapRecord, HistoryRecord, Outcome, PlanRecord,
    Result, RuntimeObservation, StateDir, TrashRecord, Wanted, now,
};

/// The Access tables whose rows of an agent go to its trash entry (`trash_<table>` holds them).
const TRASHED_ACCESS_TABLES: [&str; 5] = [
    "sessions",
    "transcript",
    "deliveries",
    "acp_bindings",
    "agent_routes",
];
const SESSION_COLUMNS: &str =
    "session_key, agent_id, runtime_session_id, runtime_instance, created_at, updated_at";
const TRANSCRIPT_COLUMNS: &str = "id, session_key, provenance, message_id, sender, text, route, at";
const DELIVERY_COLUMNS: &str = "channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at, line_id, sender, text";
const ACP_BINDING_COLUMNS: &str = "binding_key, session_key, created_at";
const ROUTE_COLUMNS: &str =
    "agent_id, session_key, channel, account_id, peer_kind, peer_id, thread_id, at";

/// One transaction's writes.
pub struct Tx<'a> {
    pub(super) tx: &'a db::Tx<'a>,
    pub(super) dir: &'a StateDir,
}

/// `INSERT` of a whole row into `table`, replacing the row of the same `key` (SQLite's
/// `INSERT OR REPLACE`, in the words both backends take).
fn replace(table: &str, columns: &str, key: &str) -> String {
    let names: Vec<&str> = columns.split(',').map(str::trim).collect();
    let keys: Vec<&str> = key.split(',').map(str::trim).collect();
    let values = (1..=names.len())
        .map(|n| format!("?{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let set = names
        .iter()
        .filter(|name| !keys.contains(name))
        .map(|name| format!("{name} = excluded.{name}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({key}) DO UPDATE SET {set}"
    )
}

impl Tx<'_> {
    fn run(&self, sql: &str, params: &[&dyn db::ToValue]) -> Result<()> {
        self.tx
            .execute(sql, params)
            .map(drop)
            .map_err(|e| super::seam_error(self.dir, e))
    }

    pub fn put_agent(&self, a: &AgentRecord) -> Result<()> {
        self.run(
            &replace("agents", AGENT_COLUMNS, "id"),
            params![
                a.id,
                a.spec_hash,
                a.spec.to_string(),
                a.workspace.to_string_lossy(),
                a.agent_dir.to_string_lossy(),
                a.sessions_dir.to_string_lossy(),
                a.protect,
                a.workspace_origin.as_str(),
                a.agent_dir_origin.as_str(),
                a.sessions_origin.as_str(),
                a.applied_serial
            ],
        )
    }

    pub fn delete_agent(&self, id: &str) -> Result<()> {
        self.run("DELETE FROM agents WHERE id = ?1", params![id])?;
        self.run(
            "DELETE FROM bootstrap_files WHERE agent_id = ?1",
            params![id],
        )
    }

    pub fn put_bootstrap(&self, b: &BootstrapRecord) -> Result<()> {
        self.run(
            &replace(
                "bootstrap_files",
                "agent_id, name, path, hash",
                "agent_id, name",
            ),
            params![b.agent_id, b.name, b.path.to_string_lossy(), b.hash],
        )
    }

    pub fn delete_bootstrap(&self, agent_id: &str, name: &str) -> Result<()> {
        self.run(
            "DELETE FROM bootstrap_files WHERE agent_id = ?1 AND name = ?2",
            params![agent_id, name],
        )
    }

    pub fn put_account(&self, a: &AccountRecord) -> Result<()> {
        self.run(
            &replace(
                "channel_accounts",
                "channel, account, spec, hash",
                "channel, account",
            ),
            params![a.channel, a.account, a.spec.to_string(), a.hash],
        )
    }

    pub fn delete_account(&self, channel: &str, account: &str) -> Result<()> {
        self.run(
            "DELETE FROM channel_accounts WHERE channel = ?1 AND account = ?2",
            params![channel, account],
        )
    }

    pub fn put_binding(&self, b: &BindingRecord) -> Result<()> {
        self.run(
            &replace("bindings", "key, agent_id, spec, position", "key"),
            params![b.key, b.agent_id, b.spec.as_str(), b.position],
        )
    }

    pub fn delete_binding(&self, key: &str) -> Result<()> {
        self.run("DELETE FROM bindings WHERE key = ?1", params![key])
    }

    /// Records what apply wants for an agent's runtime, keeping what the controller observed.
    pub fn want_runtime(
        &self,
        agent_id: &str,
        kind: &str,
        spec_hash: &str,
        desired: Wanted,
    ) -> Result<()> {
        self.run(
            "INSERT INTO runtimes (agent_id, kind, spec_hash, desired, status, updated_at) VALUES (?1, ?2, ?3, ?4, 'stopped', ?5)
             ON CONFLICT (agent_id) DO UPDATE SET kind = ?2, spec_hash = ?3, desired = ?4, updated_at = ?5",
            params![agent_id, kind, spec_hash, desired, now()],
        )
    }

    pub fn delete_runtime(&self, agent_id: &str) -> Result<()> {
        self.run(
            "DELETE FROM runtimes WHERE agent_id = ?1",
            params![agent_id],
        )
    }

    pub fn put_plan(&self, p: &PlanRecord) -> Result<()> {
        self.run(
            &replace(
                "routing_plans",
                "generation, content_hash, config_hash, bindings, published_at",
                "generation",
            ),
            params![
                p.generation,
                p.content_hash,
                p.config_hash,
                p.bindings,
                p.published_at
            ],
        )
    }

    pub fn put_trash(&self, t: &TrashRecord) -> Result<()> {
        self.run(
            &replace(
                "trash",
                "entry, agent_id, dir, serial, created_at, manifest, restored_at",
                "entry",
            ),
            params![
                t.entry,
                t.agent_id,
                t.dir.to_string_lossy(),
                t.serial,
                t.created_at,
                t.manifest.to_string(),
                t.restored_at
            ],
        )
    }

    /// Forgets a trash entry, with the conversations it held.
    pub fn delete_trash(&self, entry: &str) -> Result<()> {
        for table in TRASHED_ACCESS_TABLES {
            self.run(
                &format!("DELETE FROM trash_{table} WHERE entry = ?1"),
                params![entry],
            )?;
        }
        self.run("DELETE FROM trash WHERE entry = ?1", params![entry])
    }

    pub fn mark_restored(&self, entry: &str) -> Result<()> {
        self.run(
            "UPDATE trash SET restored_at = ?2 WHERE entry = ?1",
            params![entry, now()],
        )
    }

    /// Moves agent `agent_id`'s Access rows — its session map, transcripts, delivery records,
    /// `acp` binding sessions and last route — into trash entry `entry`: a new agent with the
    /// same id finds none of its conversations. Idempotent (a resumed delete moves nothing
    /// twice: what moved is gone from the live tables).
    pub fn trash_access(&self, agent_id: &str, entry: &str) -> Result<()> {
        let prefix = format!("agent:{agent_id}:");
        // `substr`, not LIKE: ids may hold `_`, which LIKE reads as a wildcard.
        let mine = "substr(session_key, 1, length(?2)) = ?2";
        self.run(
            &format!(
                "INSERT INTO trash_sessions (entry, {SESSION_COLUMNS}) SELECT ?1, {SESSION_COLUMNS} FROM sessions WHERE agent_id = ?3 OR {mine}"
            ),
            params![entry, prefix, agent_id],
        )?;
        self.run(
            &format!("DELETE FROM sessions WHERE agent_id = ?1 OR {mine}"),
            params![agent_id, prefix],
        )?;
        // What its sessions were told is composed again for a restored one.
        self.run(
            &format!("DELETE FROM system_sections WHERE agent_id = ?1 OR {mine}"),
            params![agent_id, prefix],
        )?;
        for (table, columns) in [
            ("transcript", TRANSCRIPT_COLUMNS),
            ("deliveries", DELIVERY_COLUMNS),
            ("acp_bindings", ACP_BINDING_COLUMNS),
        ] {
            self.run(
                &format!(
                    "INSERT INTO trash_{table} (entry, {columns}) SELECT ?1, {columns} FROM {table} WHERE {mine}"
                ),
                params![entry, prefix],
            )?;
            self.run(
                &format!("DELETE FROM {table} WHERE substr(session_key, 1, length(?1)) = ?1"),
                params![prefix],
            )?;
        }
        self.run(
            &format!(
                "INSERT INTO trash_agent_routes (entry, {ROUTE_COLUMNS}) SELECT ?1, {ROUTE_COLUMNS} FROM agent_routes WHERE agent_id = ?2"
            ),
            params![entry, agent_id],
        )?;
        self.run(
            "DELETE FROM agent_routes WHERE agent_id = ?1",
            params![agent_id],
        )
    }

    /// Moves the Access rows trash entry `entry` holds back into the live tables (a restore).
    /// An agent's last route that a newer one replaced meanwhile stays replaced. The caller
    /// checked [`StateStore::access_restore_conflicts`] first.
    pub fn restore_access(&self, entry: &str) -> Result<()> {
        for (table, columns) in [
            ("sessions", SESSION_COLUMNS),
            ("transcript", TRANSCRIPT_COLUMNS),
            ("deliveries", DELIVERY_COLUMNS),
            ("acp_bindings", ACP_BINDING_COLUMNS),
        ] {
            self.run(
                &format!(
                    "INSERT INTO {table} ({columns}) SELECT {columns} FROM trash_{table} WHERE entry = ?1"
                ),
                params![entry],
            )?;
        }
        self.run(
            &format!(
                "INSERT INTO agent_routes ({ROUTE_COLUMNS}) SELECT {ROUTE_COLUMNS} FROM trash_agent_routes WHERE entry = ?1 ON CONFLICT DO NOTHING"
            ),
            params![entry],
        )?;
        for table in TRASHED_ACCESS_TABLES {
            self.run(
                &format!("DELETE FROM trash_{table} WHERE entry = ?1"),
                params![entry],
            )?;
        }
        Ok(())
    }

    /// Marks a journal step done (with the attempts a crash left started).
    /// Journals a step done in this very transaction (it needs no `started` mark: its effects
    /// commit with it).
    pub fn journal_done(&self, serial: u64, step: &str) -> Result<()> {
        let now = now();
        self.run(
            "INSERT INTO journal (serial, step, status, started_at, finished_at) VALUES (?1, ?2, 'done', ?3, ?3)",
            params![serial, step, now],
        )?;
        // A crashed attempt's record of the same step is finished too.
        self.finish_step(step)
    }

    pub fn finish_step(&self, step: &str) -> Result<()> {
        self.run(
            "UPDATE journal SET status = 'done', finished_at = ?1 WHERE step = ?2 AND status = 'started'",
            params![now(), step],
        )
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.run(&replace("meta", "key, value", "key"), params![key, value])
    }

    /// Records what the supervisor observed of a runtime (keeps what apply asked for).
    /// Records what the controller saw a runtime do.
    pub fn observe_runtime(&self, r: &RuntimeObservation<'_>) -> Result<()> {
        let process_start = r
            .process_start
            .map(str::to_string)
            .or_else(|| r.pid.and_then(crate::os::process_start));
        let escaped = (!r.escaped.is_empty())
            .then(|| serde_json::to_string(&r.escaped).ok())
            .flatten();
        self.run(
            "INSERT INTO runtimes (agent_id, kind, spec_hash, desired, status, pid, process_start, started_at, restarts, last_exit, last_error, info, updated_at, escaped)
             VALUES (?1, ?2, ?3, 'run', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT (agent_id) DO UPDATE SET status = ?4, pid = ?5, process_start = ?6, started_at = ?7, restarts = ?8, last_exit = ?9, last_error = ?10, info = ?11, updated_at = ?12, escaped = ?13",
            params![
                r.agent_id,
                r.kind,
                r.spec_hash,
                r.status,
                r.pid,
                process_start,
                r.started_at,
                r.restarts,
                r.last_exit,
                r.last_error,
                r.info.map(|i| i.to_string()),
                now(),
                escaped
            ],
        )
    }

    pub fn set_serial(&self, serial: u64) -> Result<()> {
        self.run(
            "UPDATE meta SET value = ?1 WHERE key = 'serial'",
            params![serial.to_string()],
        )
    }

    pub fn start_history(&self, h: &HistoryRecord) -> Result<i64> {
        self.tx
            .query_row(
                r#"INSERT INTO history (serial, started_at, "user", host, source, config_hash, git_commit, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running') RETURNING id"#,
                params![h.serial, h.started_at, h.user, h.host, h.source, h.config_hash, h.git_commit],
                |r| r.get(0),
            )
            .map_err(|e| super::seam_error(self.dir, e))
    }

    pub fn interrupt_history(&self) -> Result<()> {
        self.run(
            "UPDATE history SET outcome = 'interrupted', finished_at = ?1 WHERE outcome = 'running'",
            params![now()],
        )
    }

    pub fn finish_history(
        &self,
        id: i64,
        counts: (u64, u64, u64),
        outcome: Outcome,
        error: Option<&str>,
    ) -> Result<()> {
        self.run(
            "UPDATE history SET finished_at = ?2, added = ?3, changed = ?4, removed = ?5, outcome = ?6, error = ?7 WHERE id = ?1",
            params![id, now(), counts.0, counts.1, counts.2, outcome, error],
        )
    }
}
