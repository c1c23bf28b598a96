//! The live state: what deepcli applied, in SQLite under the state directory (reconcile.md,
//! "State directory").
//!
//! This module owns the database: its migrations, its records, the single-writer lease and the
//! JSON snapshot (`deepcli state export`). It does not decide anything (that is `plan`) and does
//! not touch the world beyond the state directory (that is `apply`).

pub mod approvals;
pub mod audit;
mod damage;
mod layer;
pub mod lease;
pub mod pairing;
mod paths;
mod stored;
mod token;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::{Deserialize, Serialize};

pub use damage::Damage;
pub use layer::LayerConnection;
pub use lease::LeaseHolder;
pub use paths::StateDir;
pub use stored::{
    ApprovalSource, ApprovalState, ChildKind, Cleanup, LeasePurpose, Outcome, Provenance, RunKind,
    RunState, RuntimePhase, SpawnMode, TitleMatch, Wanted,
};
pub use token::{operator_token, read_operator_token};

/// The newest schema this build knows. A database with a higher `user_version` was written by
/// a newer deepcli and is refused.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
const MIGRATIONS: [&str; 15] = [
    include_str!("schema.sql"),
    include_str!("access.sql"),
    include_str!("conversations.sql"),
    include_str!("runtime_processes.sql"),
    include_str!("origins.sql"),
    include_str!("agent_access.sql"),
    include_str!("policy.sql"),
    include_str!("adapters.sql"),
    include_str!("hub.sql"),
    include_str!("approvals.sql"),
    include_str!("budgets.sql"),
    include_str!("a2a.sql"),
    include_str!("turns.sql"),
    include_str!("a2a_dedupe.sql"),
    include_str!("approval_review.sql"),
];
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
const DELIVERY_COLUMNS: &str =
    "channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at";
const ACP_BINDING_COLUMNS: &str = "binding_key, session_key, created_at";
const ROUTE_COLUMNS: &str =
    "agent_id, session_key, channel, account_id, peer_kind, peer_id, thread_id, at";
/// The migration that records who created each directory ([`DirOrigin`]).
const ORIGINS_MIGRATION: usize = 4;

/// `formatVersion` of `deepcli state export`. Version 2 replaced the agents' `owns*` flags with
/// `*Origin`; a version 1 snapshot is still read, its directories' origins `unknown`. Version 3
/// prints the trash entries' manifests in camelCase, like every other key (`manifest.json` and
/// the database keep the file's own spelling).
pub const SNAPSHOT_FORMAT: &str = "3";
/// The snapshot formats `plan --live` reads.
pub const SNAPSHOT_FORMATS: [&str; 3] = ["1", "2", "3"];

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot create state directory `{}`: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the state database `{}`: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An existing file that cannot be the state; it is left as it is.
    #[error("state database `{}` {damage}; nothing was changed", path.display())]
    Damaged { path: PathBuf, damage: Damage },
    #[error("cannot make `{}` private to its owner: {source}", path.display())]
    Private {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state database `{}`: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "state directory `{}` was written by a newer deepcli (schema {found}, this build knows up to {SCHEMA_VERSION}); upgrade deepcli, or point --state-dir elsewhere",
        path.display()
    )]
    Newer { path: PathBuf, found: i64 },
    #[error(
        "the state is locked by pid {} on {} ({}) since {}; wait for it to finish, or stop it",
        .0.pid, .0.host, .0.purpose, .0.acquired_at
    )]
    Locked(LeaseHolder),
    #[error("state record is corrupt: {0}")]
    Corrupt(String),
    #[error("cannot create the operator token `{}`: {source}", path.display())]
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl StateError {
    /// The state cannot be used at all, so the command could not run (exit 2): refused when
    /// opened, or damage SQLite found further in while reading.
    pub fn is_unusable(&self) -> bool {
        match self {
            StateError::Damaged { .. } | StateError::Private { .. } => true,
            StateError::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
            ),
            _ => false,
        }
    }

    /// What the operator can do about it.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StateError::Private { .. } => Some(
                "deepcli takes group and other permissions off its own files in the state directory, so it must own them: see docs/state.md#file-modes",
            ),
            _ if self.is_unusable() => Some(
                "restore state.db from a backup, or move it aside to start a new state (or point --state-dir elsewhere): see docs/state.md#an-empty-or-damaged-statedb",
            ),
            _ => None,
        }
    }
}

/// The database, open.
pub struct StateStore {
    dir: StateDir,
    conn: Connection,
    holds_lease: bool,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("dir", &self.dir.root())
            .finish()
    }
}

pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// A managed agent as last applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    pub id: String,
    pub spec_hash: String,
    pub spec: serde_json::Value,
    pub workspace: PathBuf,
    pub agent_dir: PathBuf,
    pub sessions_dir: PathBuf,
    pub protect: bool,
    /// Who made each directory: only one deepcli created goes to trash whole.
    #[serde(default)]
    pub workspace_origin: DirOrigin,
    #[serde(default)]
    pub agent_dir_origin: DirOrigin,
    #[serde(default)]
    pub sessions_origin: DirOrigin,
    pub applied_serial: u64,
}

/// Who made one of an agent's directories.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirOrigin {
    /// deepcli made it, for this agent: deleting the agent moves it to trash whole.
    Created,
    /// It existed before deepcli's first apply for the agent: it is never moved; only the
    /// files deepcli wrote into it go to trash.
    Adopted,
    /// Applied by a deepcli that did not record it; treated as adopted.
    #[default]
    Unknown,
}

impl DirOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            DirOrigin::Created => "created",
            DirOrigin::Adopted => "adopted",
            DirOrigin::Unknown => "unknown",
        }
    }

    /// The stored text; anything else (which the schema's CHECK rules out) reads as `unknown`,
    /// the cautious answer.
    fn parse(text: &str) -> DirOrigin {
        match text {
            "created" => DirOrigin::Created,
            "adopted" => DirOrigin::Adopted,
            _ => DirOrigin::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapRecord {
    pub agent_id: String,
    pub name: String,
    pub path: PathBuf,
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountRecord {
    pub channel: String,
    pub account: String,
    /// The account's fields with secret references only.
    pub spec: serde_json::Value,
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingRecord {
    /// The binding's identity: its type and normalized match.
    pub key: String,
    pub agent_id: String,
    pub spec: JsonText,
    pub position: u64,
}

/// A JSON document kept as the compact text it is stored as: read, compared and written back
/// without being parsed (a config has tens of thousands of binding specs, and a reconcile
/// compares them all). It is exported as the JSON it holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonText(Box<serde_json::value::RawValue>);

impl JsonText {
    /// `value` as compact JSON: what [`StateStore`] stores.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> JsonText {
        serde_json::value::to_raw_value(value)
            .map(JsonText)
            .unwrap_or_else(|_| JsonText::null())
    }

    /// Stored text; text that is not JSON (a damaged row) reads as `null`, as a parsed value
    /// would.
    pub fn from_text(text: String) -> JsonText {
        serde_json::value::RawValue::from_string(text)
            .map(JsonText)
            .unwrap_or_else(|_| JsonText::null())
    }

    fn null() -> JsonText {
        JsonText(serde_json::value::RawValue::NULL.to_owned())
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The document parsed, for field-by-field comparisons.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(self.as_str()).unwrap_or(serde_json::Value::Null)
    }

    /// The same document, whatever the spacing or key order of its text.
    pub fn same(&self, other: &JsonText) -> bool {
        self == other || self.value() == other.value()
    }
}

/// The same text.
impl PartialEq for JsonText {
    fn eq(&self, other: &JsonText) -> bool {
        self.as_str() == other.as_str()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRecord {
    pub agent_id: String,
    pub kind: String,
    pub spec_hash: String,
    /// What apply asked for.
    pub desired: Wanted,
    pub status: RuntimePhase,
    pub pid: Option<i64>,
    pub process_start: Option<String>,
    pub started_at: Option<String>,
    pub restarts: u64,
    pub last_exit: Option<String>,
    pub last_error: Option<String>,
    pub info: Option<serde_json::Value>,
    pub updated_at: String,
}

impl RuntimeRecord {
    /// The record as a reader without a controller sees it now: a runtime recorded `starting`
    /// or `ready` whose process is not running any more (no such pid, a zombie, or the pid
    /// reused by another process, told by its start time) is [`RuntimePhase::Gone`]. Only for
    /// a state no live controller holds: the controller's own word is the status, and a
    /// controller on another host has pids this host cannot see.
    pub fn seen_now(mut self) -> RuntimeRecord {
        let running = matches!(self.status, RuntimePhase::Starting | RuntimePhase::Ready);
        if running && !self.process_runs() {
            self.status = RuntimePhase::Gone;
        }
        self
    }

    /// Whether the recorded process still runs on this host (no pid: it does not).
    fn process_runs(&self) -> bool {
        let Some(pid) = self.pid.and_then(|p| u32::try_from(p).ok()) else {
            return false;
        };
        match crate::os::ProcStat::read(pid) {
            None => false,
            Some(p) if p.zombie => false,
            Some(p) => self.process_start.as_deref().is_none_or(|s| s == p.start),
        }
    }
}

/// A runtime as the controller saw it, to record (`runtime::RuntimeStatus::observation`).
#[derive(Debug, Clone, Copy)]
pub struct RuntimeObservation<'a> {
    pub agent_id: &'a str,
    pub kind: &'a str,
    pub spec_hash: &'a str,
    pub status: RuntimePhase,
    pub pid: Option<u32>,
    pub process_start: Option<&'a str>,
    pub escaped: &'a [crate::os::ProcessId],
    pub started_at: Option<&'a str>,
    pub restarts: u64,
    pub last_exit: Option<&'a str>,
    pub last_error: Option<&'a str>,
    pub info: Option<&'a serde_json::Value>,
}

/// A runtime's processes as the state recorded them: the leader, and what left its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeProcesses {
    pub agent_id: String,
    pub pid: Option<u32>,
    pub process_start: Option<String>,
    pub escaped: Vec<crate::os::ProcessId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRecord {
    pub generation: u64,
    pub content_hash: String,
    pub config_hash: String,
    pub bindings: u64,
    pub published_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrashRecord {
    pub entry: String,
    pub agent_id: String,
    pub dir: PathBuf,
    pub serial: u64,
    pub created_at: String,
    /// The entry's `manifest.json` as it was recorded; shown with camelCase keys.
    #[serde(serialize_with = "camel_case_keys")]
    pub manifest: serde_json::Value,
    pub restored_at: Option<String>,
}

/// `value` with every object key in camelCase (`agent_id` → `agentId`): a record kept in
/// another document's spelling, shown in the one every JSON deepcli prints uses.
fn camel_case_keys<S: serde::Serializer>(
    value: &serde_json::Value,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    fn camel(value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, v)| {
                        let mut words = key.split('_');
                        let mut out = words.next().unwrap_or_default().to_string();
                        for word in words {
                            let mut chars = word.chars();
                            out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
                            out.push_str(chars.as_str());
                        }
                        (out, camel(v))
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(camel).collect()),
            other => other.clone(),
        }
    }
    serde::Serialize::serialize(&camel(value), serializer)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    pub id: i64,
    pub serial: u64,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub user: String,
    pub host: String,
    pub source: String,
    pub config_hash: String,
    pub git_commit: Option<String>,
    pub added: u64,
    pub changed: u64,
    pub removed: u64,
    pub outcome: Outcome,
    pub error: Option<String>,
}

/// Everything `plan` compares the config with: the live state as one value. Also the
/// `deepcli state export` document, so a CI job can plan against production state without its
/// database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveState {
    pub format_version: String,
    pub lineage: String,
    pub serial: u64,
    pub agents: Vec<AgentRecord>,
    pub bootstrap: Vec<BootstrapRecord>,
    pub channel_accounts: Vec<AccountRecord>,
    pub bindings: Vec<BindingRecord>,
    pub runtimes: Vec<RuntimeRecord>,
    pub routing: Option<PlanRecord>,
    pub trash: Vec<TrashRecord>,
}

impl LiveState {
    /// The state of a directory nothing was applied to yet.
    pub fn empty() -> LiveState {
        LiveState {
            format_version: SNAPSHOT_FORMAT.to_string(),
            lineage: String::new(),
            serial: 0,
            agents: Vec::new(),
            bootstrap: Vec::new(),
            channel_accounts: Vec::new(),
            bindings: Vec::new(),
            runtimes: Vec::new(),
            routing: None,
            trash: Vec::new(),
        }
    }
}

/// Now, as stored: RFC 3339 UTC with second precision.
pub use crate::clock::now;

fn bool_of(v: i64) -> bool {
    v != 0
}

const AGENT_COLUMNS: &str = "id, spec_hash, spec, workspace, agent_dir, sessions_dir, protect, workspace_origin, agent_dir_origin, sessions_origin, applied_serial";

fn agent_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AgentRecord> {
    Ok(AgentRecord {
        id: r.get(0)?,
        spec_hash: r.get(1)?,
        spec: serde_json::from_str(&r.get::<_, String>(2)?).unwrap_or(serde_json::Value::Null),
        workspace: PathBuf::from(r.get::<_, String>(3)?),
        agent_dir: PathBuf::from(r.get::<_, String>(4)?),
        sessions_dir: PathBuf::from(r.get::<_, String>(5)?),
        protect: bool_of(r.get(6)?),
        workspace_origin: DirOrigin::parse(&r.get::<_, String>(7)?),
        agent_dir_origin: DirOrigin::parse(&r.get::<_, String>(8)?),
        sessions_origin: DirOrigin::parse(&r.get::<_, String>(9)?),
        applied_serial: r.get(10)?,
    })
}

/// Migration 3: an agent's directories at deepcli's default layout under the state directory
/// were made by deepcli (nobody else puts a directory there), so an upgrade keeps moving them to
/// trash whole. Every other directory stays `unknown`: it may be a user's folder.
fn mark_default_layout_created(
    tx: &rusqlite::Transaction<'_>,
    root: &Path,
) -> rusqlite::Result<()> {
    let mut roots = vec![std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf())];
    if let Ok(real) = std::fs::canonicalize(root)
        && !roots.contains(&real)
    {
        roots.push(real);
    }
    let agents: Vec<(String, String, String, String)> = tx
        .prepare("SELECT id, workspace, agent_dir, sessions_dir FROM agents")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, workspace, agent_dir, sessions) in agents {
        for (column, path, default) in [
            (
                "workspace_origin",
                workspace,
                ["workspaces", id.as_str()].as_slice(),
            ),
            (
                "agent_dir_origin",
                agent_dir,
                ["agents", id.as_str(), "agent"].as_slice(),
            ),
            (
                "sessions_origin",
                sessions,
                ["agents", id.as_str(), "sessions"].as_slice(),
            ),
        ] {
            let at_default = roots.iter().any(|root| {
                Path::new(&path) == default.iter().fold(root.clone(), |p, c| p.join(c))
            });
            if at_default {
                tx.execute(
                    &format!("UPDATE agents SET {column} = 'created' WHERE id = ?1"),
                    [&id],
                )?;
            }
        }
    }
    Ok(())
}

impl StateStore {
    /// Opens the state database under `dir` and migrates it; creates it only when there is no
    /// file at all. An existing file that is not a deepcli state is refused, untouched
    /// ([`Damage`]).
    pub fn open(dir: &StateDir) -> Result<StateStore> {
        dir.create()?;
        let path = dir.db();
        if !damage::inspect(dir)? {
            create(dir)?;
        }
        let sql = |source| StateError::Sqlite {
            path: path.clone(),
            source,
        };
        let mut conn = connect(&path).map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql)?;
        // Before anything writes to it (the journal mode is written into the file).
        damage::check(&conn, &path)?;
        // Before SQLite creates a WAL and shared memory file: they get the database's mode.
        dir.make_private()?;
        // WAL with synchronous=NORMAL: a crash of deepcli never loses a committed step; a power
        // loss may lose the last steps but never corrupts, and the next apply redoes them.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        migrate(&mut conn, dir)?;
        Ok(StateStore {
            dir: dir.clone(),
            conn,
            holds_lease: false,
        })
    }

    /// [`StateStore::open`] for commands that only read: `None` when there is no database, and
    /// none is created.
    pub fn open_existing(dir: &StateDir) -> Result<Option<StateStore>> {
        if !damage::inspect(dir)? {
            return Ok(None);
        }
        StateStore::open(dir).map(Some)
    }

    pub fn dir(&self) -> &StateDir {
        &self.dir
    }

    fn sql(&self, source: rusqlite::Error) -> StateError {
        sql_error(self.dir.db(), source)
    }

    /// Every row `sql` selects, each made by `row`.
    fn rows<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_map(params, row)?.collect())
            .map_err(|e| self.sql(e))
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))
    }

    pub fn meta_value(&self, key: &str) -> Result<Option<String>> {
        self.meta(key)
    }

    pub fn lineage(&self) -> Result<String> {
        self.meta("lineage")?
            .ok_or_else(|| StateError::Corrupt("the lineage is missing".into()))
    }

    pub fn serial(&self) -> Result<u64> {
        self.meta("serial")?
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StateError::Corrupt("the serial is missing".into()))
    }

    /// Runs `f` in one transaction: every record of an apply step lands together or not at all.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        let path = self.dir.db();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|source| StateError::Sqlite {
                path: path.clone(),
                source,
            })?;
        let out = f(&Tx {
            tx: &tx,
            path: &path,
        })?;
        tx.commit()
            .map_err(|source| StateError::Sqlite { path, source })?;
        Ok(out)
    }

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

/// A connection to the existing database at `path`. Never creates one: a file that went away
/// is an error, not a new state.
pub(crate) fn connect(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// Makes a new state database: migrated in a file of its own, then linked into place whole.
/// `state.db` is never there half made (a crash leaves a stray `state.db.new-*` at most), so
/// an existing one that is empty was damaged by something else. A process that lost the race
/// to create it uses the winner's.
fn create(dir: &StateDir) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.db();
    let io = |source| StateError::Create {
        path: path.clone(),
        source,
    };
    let sql = |source| StateError::Sqlite {
        path: path.clone(),
        source,
    };
    // The name goes when `fresh` is dropped, linked or not. Created 0600 (tempfile's mode,
    // said here too), so its journal is, and so will its WAL and shared memory be.
    let fresh = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(
            crate::owner_only::FILE_MODE,
        ))
        .prefix("state.db.new-")
        .tempfile_in(dir.root())
        .map_err(io)?
        .into_temp_path();
    let mut conn = Connection::open(&fresh).map_err(sql)?;
    migrate(&mut conn, dir)?;
    // Closing commits nothing more: every migration committed (and synced) already.
    conn.close().map_err(|(_, e)| sql(e))?;
    match std::fs::hard_link(&fresh, &path) {
        Ok(()) => crate::durable::sync_dir(dir.root()).map_err(io),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Brings the database up to [`SCHEMA_VERSION`]; refuses one written by a newer deepcli.
fn migrate(conn: &mut Connection, dir: &StateDir) -> Result<()> {
    let path = dir.db();
    let sql = |source| StateError::Sqlite {
        path: path.clone(),
        source,
    };
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql)?;
    if version > SCHEMA_VERSION {
        return Err(StateError::Newer {
            path: dir.root().to_path_buf(),
            found: version,
        });
    }
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .map_err(sql)?;
    // Another process may have migrated while this one waited for the lock.
    let version: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql)?;
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(migration).map_err(sql)?;
        if i == ORIGINS_MIGRATION {
            mark_default_layout_created(&tx, dir.root()).map_err(sql)?;
        }
        if i == 0 {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('lineage', ?1), ('serial', '0'), ('created_at', ?2), ('created_by', ?3)",
                params![uuid::Uuid::new_v4().to_string(), now(), concat!("deepcli ", env!("CARGO_PKG_VERSION"))],
            )
            .map_err(sql)?;
        }
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .map_err(sql)?;
    }
    tx.commit().map_err(sql)
}

/// A database error at `path`; a column that does not hold what its record needs (a JSON column
/// that does not parse, a word no variant has) is a corrupt record.
fn sql_error(path: PathBuf, source: rusqlite::Error) -> StateError {
    match source {
        rusqlite::Error::FromSqlConversionFailure(column, _, e) => StateError::Corrupt(format!(
            "`{}`: column {column} of a record: {e}",
            path.display()
        )),
        source => StateError::Sqlite { path, source },
    }
}

/// A JSON column read as `T`: text that does not parse is a conversion failure (a corrupt
/// record), never a silent `null`.
struct Json<T>(T);

impl<T: serde::de::DeserializeOwned> rusqlite::types::FromSql for Json<T> {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        serde_json::from_str(text)
            .map(Json)
            .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
    }
}

/// One transaction's writes.
pub struct Tx<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    path: &'a Path,
}

impl Tx<'_> {
    fn run(&self, sql: &str, params: impl rusqlite::Params) -> Result<()> {
        self.tx
            .execute(sql, params)
            .map(drop)
            .map_err(|source| StateError::Sqlite {
                path: self.path.to_path_buf(),
                source,
            })
    }

    pub fn put_agent(&self, a: &AgentRecord) -> Result<()> {
        self.run(
            &format!("INSERT OR REPLACE INTO agents ({AGENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
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
        self.run("DELETE FROM agents WHERE id = ?1", [id])?;
        self.run("DELETE FROM bootstrap_files WHERE agent_id = ?1", [id])
    }

    pub fn put_bootstrap(&self, b: &BootstrapRecord) -> Result<()> {
        self.run(
            "INSERT OR REPLACE INTO bootstrap_files (agent_id, name, path, hash) VALUES (?1, ?2, ?3, ?4)",
            params![b.agent_id, b.name, b.path.to_string_lossy(), b.hash],
        )
    }

    pub fn delete_bootstrap(&self, agent_id: &str, name: &str) -> Result<()> {
        self.run(
            "DELETE FROM bootstrap_files WHERE agent_id = ?1 AND name = ?2",
            [agent_id, name],
        )
    }

    pub fn put_account(&self, a: &AccountRecord) -> Result<()> {
        self.run(
            "INSERT OR REPLACE INTO channel_accounts (channel, account, spec, hash) VALUES (?1, ?2, ?3, ?4)",
            params![a.channel, a.account, a.spec.to_string(), a.hash],
        )
    }

    pub fn delete_account(&self, channel: &str, account: &str) -> Result<()> {
        self.run(
            "DELETE FROM channel_accounts WHERE channel = ?1 AND account = ?2",
            [channel, account],
        )
    }

    pub fn put_binding(&self, b: &BindingRecord) -> Result<()> {
        self.run(
            "INSERT OR REPLACE INTO bindings (key, agent_id, spec, position) VALUES (?1, ?2, ?3, ?4)",
            params![b.key, b.agent_id, b.spec.as_str(), b.position],
        )
    }

    pub fn delete_binding(&self, key: &str) -> Result<()> {
        self.run("DELETE FROM bindings WHERE key = ?1", [key])
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
        self.run("DELETE FROM runtimes WHERE agent_id = ?1", [agent_id])
    }

    pub fn put_plan(&self, p: &PlanRecord) -> Result<()> {
        self.run(
            "INSERT OR REPLACE INTO routing_plans (generation, content_hash, config_hash, bindings, published_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![p.generation, p.content_hash, p.config_hash, p.bindings, p.published_at],
        )
    }

    pub fn put_trash(&self, t: &TrashRecord) -> Result<()> {
        self.run(
            "INSERT OR REPLACE INTO trash (entry, agent_id, dir, serial, created_at, manifest, restored_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
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
                [entry],
            )?;
        }
        self.run("DELETE FROM trash WHERE entry = ?1", [entry])
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
                [&prefix],
            )?;
        }
        self.run(
            &format!(
                "INSERT INTO trash_agent_routes (entry, {ROUTE_COLUMNS}) SELECT ?1, {ROUTE_COLUMNS} FROM agent_routes WHERE agent_id = ?2"
            ),
            params![entry, agent_id],
        )?;
        self.run("DELETE FROM agent_routes WHERE agent_id = ?1", [agent_id])
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
                [entry],
            )?;
        }
        self.run(
            &format!(
                "INSERT OR IGNORE INTO agent_routes ({ROUTE_COLUMNS}) SELECT {ROUTE_COLUMNS} FROM trash_agent_routes WHERE entry = ?1"
            ),
            [entry],
        )?;
        for table in TRASHED_ACCESS_TABLES {
            self.run(
                &format!("DELETE FROM trash_{table} WHERE entry = ?1"),
                [entry],
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
        self.run(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
            [key, value],
        )
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
            [serial.to_string()],
        )
    }

    pub fn start_history(&self, h: &HistoryRecord) -> Result<i64> {
        self.run(
            "INSERT INTO history (serial, started_at, user, host, source, config_hash, git_commit, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running')",
            params![h.serial, h.started_at, h.user, h.host, h.source, h.config_hash, h.git_commit],
        )?;
        Ok(self.tx.last_insert_rowid())
    }

    pub fn interrupt_history(&self) -> Result<()> {
        self.run(
            "UPDATE history SET outcome = 'interrupted', finished_at = ?1 WHERE outcome = 'running'",
            [now()],
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

impl Drop for StateStore {
    fn drop(&mut self) {
        if self.holds_lease {
            let _ = self.release_lease();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{JsonText, MIGRATIONS, StateDir, StateStore};

    /// A JSON column that does not parse is a corrupt record, not a `null` passed on.
    #[test]
    fn a_corrupt_json_row_is_corrupt_not_null() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        store
            .conn
            .execute(
                "INSERT INTO runtimes (agent_id, kind, spec_hash, desired, status, info, updated_at)
                 VALUES ('a', 'acp', 'h', 'run', 'ready', '{oops', 't')",
                [],
            )
            .unwrap();
        let err = store.snapshot().unwrap_err();
        assert!(
            matches!(&err, super::StateError::Corrupt(m) if m.contains("column 11")),
            "{err}"
        );
        let other = store
            .conn
            .execute("UPDATE runtimes SET info = NULL, status = 'dancing'", [])
            .map(drop);
        assert!(other.is_ok());
        assert!(matches!(
            store.snapshot(),
            Err(super::StateError::Corrupt(_))
        ));
    }

    /// A database of migration 2 (before runtime instances and conversation-keyed deliveries)
    /// opens migrated, its deliveries and sessions kept.
    #[test]
    fn a_migration_2_database_keeps_its_deliveries_and_sessions() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        std::fs::create_dir_all(tmp.path()).unwrap();
        {
            let conn = rusqlite::Connection::open(dir.db()).unwrap();
            for m in &MIGRATIONS[..2] {
                conn.execute_batch(m).unwrap();
            }
            conn.execute_batch(
                "INSERT INTO meta VALUES ('lineage', 'l'), ('serial', '0');
                 INSERT INTO deliveries VALUES ('telegram', 'default', '42', 'k', '{}', 't');
                 INSERT INTO sessions VALUES ('k', 'main', 'echo-1', 't', 't');
                 PRAGMA user_version = 2;",
            )
            .unwrap();
        }
        drop(StateStore::open(&dir).unwrap());
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        let delivery: (String, String, String) = conn
            .query_row(
                "SELECT peer_kind || '|' || peer_id || '|' || thread_id, message_id, session_key FROM deliveries",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(delivery, ("||".into(), "42".into(), "k".into()));
        let session: (String, Option<String>) = conn
            .query_row(
                "SELECT runtime_session_id, runtime_instance FROM sessions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            session,
            ("echo-1".into(), None),
            "no instance: never taken as open"
        );
    }

    #[test]
    fn json_text_is_compared_as_text_then_as_json() {
        let stored = JsonText::from_text(r#"{"b": 2, "a": [1]}"#.to_string());
        let fresh = JsonText::of(&serde_json::json!({"a": [1], "b": 2}));
        assert_ne!(stored, fresh, "the texts differ");
        assert!(stored.same(&fresh), "the documents do not");
        assert!(!stored.same(&JsonText::of(&serde_json::json!({"a": [2], "b": 2}))));
        assert_eq!(JsonText::from_text("{oops".into()).as_str(), "null");
        assert_eq!(
            serde_json::to_string(&fresh).unwrap(),
            r#"{"a":[1],"b":2}"#,
            "exported as the JSON it holds"
        );
    }
}
