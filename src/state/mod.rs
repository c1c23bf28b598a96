//! The live state: what deepcli applied, in SQLite under the state directory (reconcile.md,
//! "State directory").
//!
//! This module owns the database: its migrations, its records, the single-writer lease and the
//! JSON snapshot (`deepcli state export`). It does not decide anything (that is `plan`) and does
//! not touch the world beyond the state directory (that is `apply`).
//!
//! The files: `migrate` (the migrations, in order, and a new database made whole), `records`
//! (the row types and the snapshot), `queries` (reads, and the journal's own writes), `tx`
//! (the writes of one transaction); `approvals` and `pairing` hold their tables' functions,
//! `layer` the connection the Access layer, the Hub and the adapters hold. This file opens the
//! store and holds its errors.

pub mod approvals;
pub mod artifact_files;
pub mod audit;
pub mod backup;
pub(crate) mod cluster;
mod damage;
pub mod db;
mod layer;
pub mod lease;
mod migrate;
pub mod pairing;
mod paths;
mod queries;
mod records;
pub mod retention;
pub(crate) mod search_index;
mod stored;
mod token;
mod tx;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

pub use damage::Damage;
pub use layer::LayerConnection;
pub use lease::LeaseHolder;
pub use migrate::SCHEMA_VERSION;
pub use paths::StateDir;
pub use records::{
    AccountRecord, AgentRecord, BindingRecord, BootstrapRecord, DirOrigin, HistoryRecord, JsonText,
    LiveState, PlanRecord, RuntimeObservation, RuntimeProcesses, RuntimeRecord, SNAPSHOT_FORMAT,
    SNAPSHOT_FORMATS, TrashRecord,
};
pub use stored::{
    ApprovalSource, ApprovalState, ChildKind, Cleanup, LeasePurpose, Outcome, Provenance, RunKind,
    RunState, RuntimePhase, SpawnMode, TitleMatch, Wanted,
};
pub use token::{operator_token, read_operator_token};
pub use tx::Tx;

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
    #[error("cannot start the WAL checkpointer of `{}`: {source}", path.display())]
    Checkpointer {
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
    /// An error of the backend seam ([`db`]): a PostgreSQL state's, or a value a store could
    /// not take. `at` is where the state is (a path, or a URL without its password).
    #[error("state `{at}`: {source}")]
    Db { at: String, source: db::DbError },
    #[error("state record is corrupt: {0}")]
    Corrupt(String),
    #[error("artifact store `{}`: {source}", path.display())]
    ArtifactStore {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the operator token `{}`: {source}", path.display())]
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl StateError {
    pub(crate) fn db(at: String, source: db::DbError) -> StateError {
        StateError::Db { at, source }
    }

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
    db: db::Owned,
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

/// Now, as stored: RFC 3339 UTC with second precision.
pub use crate::clock::now;

impl StateStore {
    /// Opens the state database under `dir` and migrates it; creates it only when there is no
    /// file at all. An existing file that is not a deepcli state is refused, untouched
    /// ([`Damage`]). A state in PostgreSQL ([`StateDir::postgres`]) is made or migrated in
    /// its schema.
    pub fn open(dir: &StateDir) -> Result<StateStore> {
        if let Some(url) = dir.postgres() {
            // The directory still holds the state's files (logs, the trash, the token).
            dir.create()?;
            dir.make_private()?;
            let at = |source| StateError::db(url.to_string(), source);
            let mut conn = db::PgConn::connect(url).map_err(at)?;
            db::migrate_postgres(&mut conn).map_err(at)?;
            return Ok(StateStore {
                dir: dir.clone(),
                db: db::Owned::Postgres(conn),
                holds_lease: false,
            });
        }
        dir.create()?;
        let path = dir.db();
        if !damage::inspect(dir)? {
            migrate::create(dir)?;
        }
        let sql = |source| StateError::Sqlite {
            path: path.clone(),
            source,
        };
        let mut conn = connect(&path).map_err(sql)?;
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
        migrate::migrate(&mut conn, dir)?;
        Ok(StateStore {
            dir: dir.clone(),
            db: db::Owned::Sqlite(conn),
            holds_lease: false,
        })
    }

    /// [`StateStore::open`] for commands that only read: `None` when there is no database, and
    /// none is created.
    pub fn open_existing(dir: &StateDir) -> Result<Option<StateStore>> {
        let exists = match dir.postgres() {
            // Asked before anything is made: a reading command on an empty database leaves
            // it empty, as one on a directory without `state.db` makes none.
            Some(url) => {
                let at = |source| StateError::db(url.to_string(), source);
                let conn = db::Owned::Postgres(db::PgConn::connect(url).map_err(at)?);
                db::Query::query_row(
                    &conn,
                    "SELECT to_regclass('deepcli_schema') IS NOT NULL",
                    db::params![],
                    |r| r.get(0),
                )
                .map_err(at)?
            }
            None => damage::inspect(dir)?,
        };
        if !exists {
            return Ok(None);
        }
        StateStore::open(dir).map(Some)
    }

    pub fn dir(&self) -> &StateDir {
        &self.dir
    }

    /// An error of a statement on the seam ([`db`]), naming the database.
    fn db(&self, source: db::DbError) -> StateError {
        seam_error(&self.dir, source)
    }

    /// The SQLite connection of a test's store.
    #[cfg(test)]
    pub(crate) fn sqlite_for_tests(&self) -> &Connection {
        match &self.db {
            db::Owned::Sqlite(c) => c,
            db::Owned::Postgres(_) => panic!("a SQLite state"),
        }
    }

    #[cfg(test)]
    pub(crate) fn sqlite_mut_for_tests(&mut self) -> &mut Connection {
        match &mut self.db {
            db::Owned::Sqlite(c) => c,
            db::Owned::Postgres(_) => panic!("a SQLite state"),
        }
    }

    /// Every row `sql` selects, each made by `row`.
    fn rows<T>(
        &self,
        sql: &str,
        params: &[&dyn db::ToValue],
        row: impl FnMut(&db::Row<'_>) -> db::DbResult<T>,
    ) -> Result<Vec<T>> {
        use db::Query;
        self.db.query_map(sql, params, row).map_err(|e| self.db(e))
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        use db::{Optional, Query};
        self.db
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                db::params![key],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.db(e))
    }

    pub fn meta_value(&self, key: &str) -> Result<Option<String>> {
        self.meta(key)
    }

    /// Runs `f` on this store's connection: the cluster's calls ([`cluster`]), which take
    /// their own transactions.
    pub(crate) fn on_seam<T>(
        &mut self,
        f: impl FnOnce(&mut db::Conn<'_>) -> db::DbResult<T>,
    ) -> Result<T> {
        let mut conn = self.db.conn();
        f(&mut conn).map_err(|e| seam_error(&self.dir, e))
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
        let dir = &self.dir;
        let mut conn = self.db.conn();
        let tx = conn
            .transaction(db::Behavior::Write)
            .map_err(|e| seam_error(dir, e))?;
        let out = f(&Tx { tx: &tx, dir })?;
        tx.commit().map_err(|e| seam_error(dir, e))?;
        Ok(out)
    }
}

/// Drops `file`'s clean pages from the kernel's cache: the next read of them goes to the disk
/// (a test's state is on a disk, not tmpfs).
#[cfg(test)]
pub(crate) fn drop_from_the_page_cache(file: &std::fs::File) {
    nix::fcntl::posix_fadvise(
        file,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .unwrap();
}

/// A new state in the directory `root`, every migration run (the seam's tests).
#[cfg(test)]
pub(crate) fn create_for_tests(root: &Path) {
    drop(StateStore::open(&StateDir::new(root)).expect("a new state"));
}

/// A state in a fresh PostgreSQL schema (the tests' stores on both backends), with what keeps
/// it: the directory its files would be in, and the schema (dropped with it).
#[cfg(test)]
pub(crate) fn postgres_state() -> (tempfile::TempDir, db::testing::PgSchema, StateDir) {
    postgres_state_as(None)
}

/// [`postgres_state`], its sessions saying `application` as their application name (so a test
/// can find them) when given.
#[cfg(test)]
pub(crate) fn postgres_state_as(
    application: Option<&str>,
) -> (tempfile::TempDir, db::testing::PgSchema, StateDir) {
    let tmp = tempfile::tempdir().unwrap();
    let schema = db::testing::PgSchema::new();
    let url = match application {
        Some(name) => schema.url().with_application_name(name),
        None => schema.url().clone(),
    };
    let dir = StateDir::new(tmp.path()).with_postgres(url);
    (tmp, schema, dir)
}

/// A connection to the existing database at `path`. Never creates one: a file that went away
/// is an error, not a new state.
pub(crate) fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_handler(Some(wait_for_the_lock))?;
    // No commit cuts the WAL file back (SQLite's `journal_size_limit` would have the commit
    // that starts it over do so, under the write lock: cutting hundreds of megabytes took
    // that commit 100–300 ms, every few seconds of a prune). The [`Checkpointer`] cuts it
    // when the hub is quiet.
    Ok(conn)
}

/// The WAL pages after which a serving layer's commit checkpoints on its own (SQLite's default
/// is 1,000; 1 GiB of 4 KiB pages): a backstop, never reached while a [`Checkpointer`] keeps
/// up. SQLite counts every frame in the WAL file, copied back or not, and the file starts over
/// only once all of it is copied back with no reader in it: under a prune's writes it is not,
/// for minutes, and a lower threshold (10,000 pages) had every turn's commit copy the WAL back
/// with two fsyncs (60 ms) while the layer's other operations queued behind it.
pub(crate) const LAYER_AUTOCHECKPOINT: i64 = 262_144;

/// Copies the WAL back into the database on a thread of its own, every [`Checkpointer::EVERY`]
/// (`PRAGMA wal_checkpoint(PASSIVE)`: it waits for no reader and blocks no writer). Without it,
/// the connection whose commit finds the WAL past its threshold does that work before the
/// commit returns — under a prune's writes, a turn's, again and again. After a second with no
/// commit and all of the WAL copied back, it cuts a WAL file past [`WAL_KEPT`] back to nothing
/// (`TRUNCATE`, given up at once if a reader is in it). Before each checkpoint it brings the
/// transcript's search index up to date ([`search_index`], migration 26), and after it reads
/// the WAL file ahead of the next commits ([`WalAhead`]). It runs behind the threads that
/// serve ([`crate::threads::UPKEEP_NICE`]). Stops when dropped.
pub struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// How often it checkpoints.
    pub const EVERY: std::time::Duration = std::time::Duration::from_millis(250);

    /// Starts one on its own connection to `dir`'s database.
    pub fn start(dir: &StateDir) -> Result<Checkpointer> {
        if let Some(url) = dir.postgres() {
            return Checkpointer::start_postgres(url);
        }
        let path = dir.db();
        let mut upkeep = Upkeep::open(dir).map_err(|e| sql_error(path.clone(), e))?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("wal-checkpointer".into())
            .spawn(move || {
                crate::threads::lower_to_upkeep();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Self::EVERY)
                {
                    upkeep.once();
                }
            })
            .map_err(|source| StateError::Checkpointer {
                path: path.clone(),
                source,
            })?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// What the [`Checkpointer`] does every [`Checkpointer::EVERY`], on its own connection.
struct Upkeep {
    conn: Connection,
    dir: StateDir,
    indexer: Option<search_index::SearchIndexer>,
    drops: search_index::QueueDrops,
    quiet: Quiet,
    wal: PathBuf,
    ahead: WalAhead,
}

impl Upkeep {
    /// The frames read ahead of the WAL's end ([`WalAhead`]): 1 MiB of 4 KiB pages, more than
    /// a quarter of a second of turns commit.
    const AHEAD: i64 = 256;

    /// On the thread that starts the checkpointer: the search queue's deletes run at its
    /// priority ([`search_index::QueueDrops`]). The upkeep's own connection then writes no row
    /// (`query_only`): at nice 10, it would hold the write lock while it waited for a core.
    /// Without that thread, the deletes are made here after all.
    fn open(dir: &StateDir) -> rusqlite::Result<Upkeep> {
        let conn = connect(&dir.db())?;
        // Made before the first search can ask for it (making it writes none of the state).
        let indexer = open_index(dir, &conn);
        let drops = search_index::QueueDrops::start(dir);
        if matches!(drops, search_index::QueueDrops::Away { .. }) {
            conn.pragma_update(None, "query_only", true)?;
        }
        Ok(Upkeep {
            indexer,
            drops,
            ahead: WalAhead::of(&conn),
            wal: wal_path(&dir.db()),
            dir: dir.clone(),
            quiet: Quiet::default(),
            conn,
        })
    }

    /// Brings the search index up to date, copies the WAL back, and reads the WAL file ahead
    /// of the next commits; once the hub is quiet, cuts a long WAL file back.
    fn once(&mut self) {
        if self.indexer.is_none() {
            self.indexer = open_index(&self.dir, &self.conn);
        }
        let drops = &mut self.drops;
        if let Some(Err(e)) = self.indexer.as_mut().map(|i| i.run(&self.conn, drops)) {
            tracing::warn!(error = %e, "state: indexing the transcript failed");
        }
        match checkpoint(&self.conn, "PASSIVE") {
            Ok(frames) => {
                if let Some((log, done)) = frames {
                    self.ahead
                        .read_for_the_next_commit(log, log == done && log > 0, Self::AHEAD);
                }
                let long = || std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > WAL_KEPT);
                if self.quiet.saw(frames) && long() {
                    cut_back(&mut self.conn);
                }
            }
            Err(e) => tracing::warn!(error = %e, "state: WAL checkpoint failed"),
        }
    }
}

impl Checkpointer {
    /// On PostgreSQL there is no WAL of deepcli's to copy back: the upkeep takes the search
    /// queue into `transcript_words` ([`search_index::pg_step`]), every [`Checkpointer::EVERY`]
    /// for at most [`search_index::RUN`], on a connection of its own, made again when
    /// PostgreSQL closed it.
    fn start_postgres(url: &db::PgUrl) -> Result<Checkpointer> {
        let at = |source| StateError::db(url.to_string(), source);
        let mut conn = db::PgConn::connect(url).map_err(at)?;
        let again = url.clone();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("search-upkeep".into())
            .spawn(move || {
                crate::threads::lower_to_upkeep();
                let mut said = false;
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Self::EVERY)
                {
                    match conn.reopen_if_closed(&again) {
                        Ok(true) => said = false,
                        Ok(false) => {}
                        Err(e) => {
                            // Once an outage, not every 250 ms.
                            if !std::mem::replace(&mut said, true) {
                                tracing::warn!(error = %e, "state: the search upkeep cannot reach PostgreSQL");
                            }
                            continue;
                        }
                    }
                    let began = std::time::Instant::now();
                    let mut c = db::Conn::Postgres(&mut conn);
                    loop {
                        match search_index::pg_step(&mut c) {
                            Ok(0) => break,
                            Ok(_) if began.elapsed() >= search_index::RUN => break,
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "state: indexing the transcript failed");
                                break;
                            }
                        }
                    }
                }
            })
            .map_err(|source| StateError::Checkpointer {
                path: PathBuf::from(url.to_string()),
                source,
            })?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// The search index of `dir`'s state, opened for the upkeep (`None`, said in the log, when it
/// cannot be: it is tried again at the next checkpoint).
fn open_index(dir: &StateDir, state: &Connection) -> Option<search_index::SearchIndexer> {
    search_index::SearchIndexer::open(dir, state)
        .inspect_err(|e| tracing::warn!(error = %e, "state: the search index cannot be opened"))
        .ok()
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The bytes of WAL file past which the [`Checkpointer`] cuts it back, once the hub is quiet.
const WAL_KEPT: u64 = 64 << 20;

/// The WAL file of the database at `db`.
fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// `PRAGMA wal_checkpoint(mode)`: the WAL's frames and how many of them are copied back
/// (`None` when another checkpoint was under way).
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<Option<(i64, i64)>> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        let busy: i64 = r.get(0)?;
        Ok((busy == 0).then(|| (r.get(1), r.get(2))))
    })
    .and_then(|frames| frames.map(|(log, done)| Ok((log?, done?))).transpose())
}

/// Whether the hub has been quiet for [`Quiet::CHECKS`] checkpoints in a row: nothing
/// committed since the one before, and all of the WAL copied back.
#[derive(Debug, Default)]
struct Quiet {
    last: Option<(i64, i64)>,
    checks: u32,
}

impl Quiet {
    /// A second without a commit.
    const CHECKS: u32 = 4;

    fn saw(&mut self, frames: Option<(i64, i64)>) -> bool {
        let still = frames.is_some_and(|(log, done)| log == done) && frames == self.last;
        self.checks = if still { self.checks + 1 } else { 0 };
        self.last = frames;
        self.checks >= Self::CHECKS
    }
}

/// Cuts the WAL file to nothing (`wal_checkpoint(TRUNCATE)`), but only if no reader is in it
/// now: it holds the write lock meanwhile, so it must not wait for one.
fn cut_back(conn: &mut Connection) {
    let unwaiting = conn.busy_handler(None::<fn(i32) -> bool>);
    if let Err(e) = unwaiting.and_then(|()| checkpoint(conn, "TRUNCATE")) {
        tracing::debug!(error = %e, "state: the WAL was not cut back");
    }
    let _ = conn.busy_handler(Some(wait_for_the_lock));
}

/// The WAL frames (4 KiB pages) a prune lets the WAL file hold: past them it waits for the WAL
/// to be copied back ([`keep_the_wal_short`]). A full-size prune that did not wait grew the WAL
/// past 1 GiB, to [`LAYER_AUTOCHECKPOINT`], where every turn's commit copied the prune's pages
/// back before it returned: turns stalled up to 700 ms.
pub(crate) const WAL_CAP: i64 = 16_384;

/// What a prune does after each batch, on its own connection: copies the WAL back
/// (`PASSIVE`, blocking no one), and while the WAL holds more than `cap` frames ([`WAL_CAP`])
/// and a reader keeps part of it from being copied back, tries again every 5 ms for up to
/// `patience`. So the prune writes no faster than its pages are copied back, and the WAL stays
/// short. It never asks for a `RESTART`, which copies and syncs the WAL and the database with
/// the write lock held (76 ms at a year's size): once all of the WAL is copied back, the prune
/// starts it over itself ([`start_the_wal_over`]).
pub(crate) fn keep_the_wal_short(
    conn: &mut Connection,
    cap: i64,
    patience: std::time::Duration,
) -> WalKept {
    const TRY: std::time::Duration = std::time::Duration::from_millis(5);
    let began = std::time::Instant::now();
    let mut copied_back = false;
    let mut frames = 0;
    loop {
        let looked = checkpoint(conn, "PASSIVE");
        if let Ok(Some((log, _))) = looked {
            frames = log;
        }
        match looked {
            Ok(Some((log, done))) if log > 0 && done == log => {
                copied_back = true;
                break;
            }
            Ok(Some((log, _))) if log <= cap => break,
            // A reader still in the WAL kept part of it from being copied back.
            Ok(Some(_)) => {}
            // Another checkpoint is under way: it is copying back; look again.
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "state: the WAL was not copied back");
                break;
            }
        }
        if began.elapsed() >= patience {
            break;
        }
        std::thread::sleep(TRY);
    }
    WalKept {
        waited: began.elapsed(),
        copied_back,
        frames,
    }
}

/// What [`keep_the_wal_short`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalKept {
    /// How long it took, waiting for the WAL to be copied back.
    pub waited: std::time::Duration,
    /// Whether its last copy back took all of the WAL back: the next commit starts it over.
    pub copied_back: bool,
    /// The WAL's frames at its last look (0 when it could not look).
    pub frames: i64,
}

/// Starts the WAL over now, once a copy back took all of it, with a write that changes nothing
/// (the database's `application_id` set to what it is). The commit that starts the WAL over
/// syncs the WAL's new header with the write lock held; just after the copy back's own syncs
/// the disk has little to write before it. Left to the next commit, a turn's or the prune's
/// next batch, that sync came whenever the disk was busy: such commits held the lock 80–226 ms
/// at a year's size. Takes the lock only if it is free (another writer's commit starts the WAL
/// over); returns when it took it. A reader that is still in the WAL keeps it from starting
/// over, as it keeps any commit: this one then adds a page to it.
pub(crate) fn start_the_wal_over(conn: &mut Connection) -> Option<std::time::Instant> {
    if conn.busy_handler(None::<fn(i32) -> bool>).is_err() {
        return None;
    }
    let taken = (|| {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let taken = std::time::Instant::now();
        let id: i64 = tx.pragma_query_value(None, "application_id", |r| r.get(0))?;
        tx.pragma_update(None, "application_id", id)?;
        tx.commit()?;
        Ok::<_, rusqlite::Error>(taken)
    })();
    let _ = conn.busy_handler(Some(wait_for_the_lock));
    taken
        .inspect_err(|e| tracing::debug!(error = %e, "state: the WAL was not started over"))
        .ok()
}

/// A database's WAL file, read ahead of the next commits (a prune's batch, a turn's) by the
/// prune and the [`Checkpointer`]. A commit writes each page to the WAL as a frame: a 24-byte
/// header, then the page. So frames do not fall on the file's pages, and writing one over a
/// part of the WAL file the kernel no longer caches reads that part from the disk first, with
/// the write lock held. The WAL file is written over from its start each time the WAL starts
/// over, and its far parts only when a reader kept it from starting over: by then the kernel
/// may have dropped them (one that reclaims cold pages on its own, as DAMON's reclaim does,
/// drops file pages not read for a minute). At a year's size a batch's commit read 80 KiB so,
/// under a prune's copies back, and held the lock 63 ms. Read ahead, with no lock held, the
/// part the next writes go to is in the kernel's cache when they come.
pub(crate) struct WalAhead {
    /// `None` for a database in memory.
    path: Option<PathBuf>,
    /// Opened at the first read that finds the file.
    file: Option<std::fs::File>,
    /// The bytes of one frame.
    frame: u64,
    buf: Vec<u8>,
}

impl WalAhead {
    /// The bytes of the WAL file's header, before its first frame.
    const HEADER: u64 = 32;
    /// The bytes of a frame's header, before its page.
    const FRAME_HEADER: u64 = 24;

    /// The WAL file of `conn`'s database.
    pub(crate) fn of(conn: &Connection) -> WalAhead {
        let page: u64 = conn
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .unwrap_or(4096);
        WalAhead {
            path: conn
                .path()
                .filter(|p| !p.is_empty())
                .map(|db| wal_path(Path::new(db))),
            file: None,
            frame: page + Self::FRAME_HEADER,
            buf: vec![0; 256 * 1024],
        }
    }

    /// Reads the part of the WAL file the next commit's `frames` frames go to, the WAL holding
    /// `wal_frames`: after them, and from the file's start too when all of the WAL was
    /// `copied_back` (the next commit may start it over there).
    pub(crate) fn read_for_the_next_commit(
        &mut self,
        wal_frames: i64,
        copied_back: bool,
        frames: i64,
    ) {
        self.read(wal_frames, frames);
        if copied_back && wal_frames > 1 {
            self.read(0, frames);
        }
    }

    /// Reads the part of the WAL file the `frames` frames after the first `after` go to, as far
    /// as the file goes (past its end a write reads nothing). What the kernel caches is copied
    /// from its cache, and what it dropped is read from the disk.
    fn read(&mut self, after: i64, frames: i64) {
        use std::os::unix::fs::FileExt as _;
        if self.file.is_none() {
            self.file = self
                .path
                .as_ref()
                .and_then(|path| std::fs::File::open(path).ok());
        }
        let Some(file) = &self.file else { return };
        let from = Self::HEADER + after.max(0).unsigned_abs() * self.frame;
        let to = from + frames.max(0).unsigned_abs() * self.frame;
        let mut at = from;
        while at < to {
            let want = usize::try_from(to - at)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            match file.read_at(&mut self.buf[..want], at) {
                Ok(0) => break,
                Ok(read) => at += read as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "state: the WAL was not read ahead");
                    break;
                }
            }
        }
    }
}

/// How long a connection waits for another's write lock before it gives up (`SQLITE_BUSY`).
pub(crate) const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// SQLite's busy handler for every connection deepcli opens: another holds the write lock, so
/// try again in a millisecond, up to [`BUSY_WAIT`]. SQLite's own (`busy_timeout`) sleeps ever
/// longer, up to 100 ms a try: a turn behind a prune's 10 ms batch would find the lock free
/// only tens of milliseconds after it was.
fn wait_for_the_lock(tries: i32) -> bool {
    const TRY: std::time::Duration = std::time::Duration::from_millis(1);
    if u128::try_from(tries).unwrap_or(0) * TRY.as_millis() >= BUSY_WAIT.as_millis() {
        return false;
    }
    LOCK_WAITS.with(|waits| waits.set(waits.get().saturating_add(1)));
    std::thread::sleep(TRY);
    true
}

thread_local! {
    /// The tries [`wait_for_the_lock`] made on this thread since [`lock_waits`] last took them:
    /// about the milliseconds this thread's statements waited for another's write lock.
    static LOCK_WAITS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The tries this thread waited for the write lock since the last call (and none from now on).
pub(crate) fn lock_waits() -> u32 {
    LOCK_WAITS.with(|waits| waits.replace(0))
}

/// What the kernel counted of this thread (`getrusage(RUSAGE_THREAD)`): what it read from the
/// disk, how often it slept in the kernel (blocked: on I/O, a lock, a `fsync` — the commit
/// that starts the WAL over syncs its new header) and how often it was preempted. A slow
/// operation's or batch's log line says, of its time, what went where.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ThreadUsage {
    pub read_kb: i64,
    pub blocked: i64,
    pub preempted: i64,
}

impl ThreadUsage {
    pub(crate) fn now() -> ThreadUsage {
        use nix::sys::resource::{UsageWho, getrusage};
        getrusage(UsageWho::RUSAGE_THREAD)
            .map(|u| ThreadUsage {
                // 512-byte blocks on Linux.
                read_kb: u.block_reads() / 2,
                blocked: u.voluntary_context_switches(),
                preempted: u.involuntary_context_switches(),
            })
            .unwrap_or_default()
    }

    pub(crate) fn since(self, before: ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            read_kb: self.read_kb - before.read_kb,
            blocked: self.blocked - before.blocked,
            preempted: self.preempted - before.preempted,
        }
    }
}

/// Where the state of `dir` is, for an error: its file, or its URL without the password.
fn state_at(dir: &StateDir) -> String {
    match dir.postgres() {
        Some(url) => url.to_string(),
        None => dir.db().display().to_string(),
    }
}

/// An error of a statement on the seam ([`db`]) in the state of `dir`, naming it (as
/// [`sql_error`]).
fn seam_error(dir: &StateDir, source: db::DbError) -> StateError {
    match source {
        db::DbError::Sqlite(e) => sql_error(dir.db(), e),
        db::DbError::Value(what) => {
            StateError::Corrupt(format!("`{}`: a record's {what}", state_at(dir)))
        }
        other => StateError::db(state_at(dir), other),
    }
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

impl Drop for StateStore {
    fn drop(&mut self) {
        if self.holds_lease {
            let _ = self.release_lease();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Checkpointer, Quiet, StateDir, StateStore};

    /// A reading command (`status`, `sessions list`) on a state that was never made finds
    /// none, and makes nothing there: no `state.db`, no table in PostgreSQL.
    #[test]
    fn opening_an_existing_state_where_there_is_none_makes_none() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path().join("state"));
        assert!(StateStore::open_existing(&dir).unwrap().is_none());
        assert!(!dir.db().exists());

        let (_tmp, schema, dir) = super::postgres_state();
        assert!(StateStore::open_existing(&dir).unwrap().is_none());
        let tables: i64 = super::db::Query::query_row(
            &super::db::Owned::Postgres(schema.connect()),
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
            super::db::params![],
            |r| r.get(0),
        )
        .unwrap();
        assert_eq!(tables, 0, "a read made the state's tables");
        // Once made, it is found.
        drop(StateStore::open(&dir).unwrap());
        assert!(StateStore::open_existing(&dir).unwrap().is_some());
    }

    /// The controller's own session (its applies, a replica's rounds) is opened again once
    /// PostgreSQL ended it: a replica cut off from PostgreSQL rejoins when it is back.
    #[test]
    fn the_stores_postgresql_session_is_opened_again_after_postgresql_ended_it() {
        use super::db::{Query, params, testing};
        let name = testing::unique_name("store");
        let (_tmp, _schema, dir) = super::postgres_state_as(Some(&name));
        let mut store = StateStore::open(&dir).unwrap();
        assert_eq!(testing::end_sessions(&name), 1);
        let one = store.on_seam(|c| c.query_row("SELECT 1", params![], |r| r.get::<i64>(0)));
        assert_eq!(one.unwrap(), 1);
        assert!(store.serial().is_ok());
        // A session stopped inside a transaction is ended by PostgreSQL, its locks with it.
        let idle = store.on_seam(|c| {
            c.query_row(
                "SELECT setting FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'",
                params![],
                |r| r.get::<String>(0),
            )
        });
        assert_eq!(idle.unwrap(), "10000");
    }

    #[test]
    fn the_hub_is_quiet_after_a_second_without_a_commit_and_all_copied_back() {
        let mut quiet = Quiet::default();
        // Commits: the frames move.
        for frames in [(10, 10), (20, 15), (30, 30)] {
            assert!(!quiet.saw(Some(frames)));
        }
        // Not all copied back: never quiet.
        let mut behind = Quiet::default();
        for _ in 0..10 {
            assert!(!behind.saw(Some((40, 35))));
        }
        // Another checkpoint under way: not known, so not quiet.
        assert!(!quiet.saw(None));
        // The first sight is the baseline; then a second of the same.
        let calls = (1..=10).find(|_| quiet.saw(Some((30, 30))));
        assert_eq!(calls, Some(Quiet::CHECKS + 1));
        // A commit starts the count over.
        assert!(!quiet.saw(Some((2, 0))));
        assert!(!quiet.saw(Some((2, 2))));
    }

    /// What a connection that leaves the checkpoints to others commits stays in the WAL until
    /// the checkpointer copies it into the database file.
    #[test]
    fn the_checkpointer_copies_the_wal_into_the_database() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        store
            .sqlite_for_tests()
            .pragma_update(None, "wal_autocheckpoint", 0)
            .unwrap();
        let size = || std::fs::metadata(dir.db()).unwrap().len();
        let before = size();
        for n in 0..200 {
            store
                .sqlite_for_tests()
                .execute(
                    "INSERT INTO meta (key, value) VALUES (?1, ?2)",
                    rusqlite::params![format!("k{n}"), "x".repeat(2000)],
                )
                .unwrap();
        }
        assert_eq!(size(), before, "nothing checkpointed yet");
        let checkpointer = Checkpointer::start(&dir).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while size() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Checkpointer::EVERY / 5);
        }
        assert!(size() > before, "the WAL was not checkpointed");
        drop(checkpointer);
    }

    /// A WAL file a burst left long is cut back once the hub is quiet, by the checkpointer,
    /// not by a commit.
    #[test]
    fn the_checkpointer_cuts_a_long_wal_back_when_the_hub_is_quiet() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        store
            .sqlite_for_tests()
            .pragma_update(None, "wal_autocheckpoint", 0)
            .unwrap();
        store
            .sqlite_for_tests()
            .execute_batch(
                "CREATE TABLE ballast (b BLOB);
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
                 INSERT INTO ballast SELECT zeroblob(3500) FROM n;",
            )
            .unwrap();
        let wal = || std::fs::metadata(super::wal_path(&dir.db())).unwrap().len();
        assert!(wal() > super::WAL_KEPT, "the burst made a long WAL");
        // A commit after it is copied back starts the WAL over, but never cuts it.
        super::checkpoint(store.sqlite_for_tests(), "PASSIVE").unwrap();
        store
            .sqlite_for_tests()
            .execute("INSERT INTO meta (key, value) VALUES ('k', 'v')", [])
            .unwrap();
        assert!(wal() > super::WAL_KEPT, "a commit cut the WAL");
        let checkpointer = Checkpointer::start(&dir).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while wal() > super::WAL_KEPT && std::time::Instant::now() < deadline {
            std::thread::sleep(Checkpointer::EVERY);
        }
        assert!(wal() <= super::WAL_KEPT, "the WAL was not cut back");
        drop(checkpointer);
    }

    /// The upkeep takes the search queue and deletes what it took on a thread at the priority
    /// of the one that started it, not at its own nice 10: a delete holds the state's write
    /// lock, which a turn would wait for while a niced holder waited for a core. Its own
    /// connection writes no row.
    #[test]
    fn the_upkeep_drops_the_search_queue_at_the_priority_of_the_serving_threads() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        let mut upkeep = super::Upkeep::open(&dir).unwrap();
        store
            .sqlite_for_tests()
            .execute_batch(
                "INSERT INTO transcript (session_key, provenance, text, at)
                 VALUES ('agent:a:main', 'inbound', 'hello there', '2026-01-01T00:00:00Z'),
                        ('agent:a:main', 'agent', 'general kenobi', '2026-01-01T00:00:01Z');",
            )
            .unwrap();
        let queued = || -> i64 {
            store
                .sqlite_for_tests()
                .query_row("SELECT count(*) FROM search_queue", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(queued(), 2);
        let here = rustix::process::getpriority_process(None).unwrap();
        // As in the checkpointer: its thread at nice 10.
        crate::threads::as_upkeep("test-upkeep", || upkeep.once());
        assert_eq!(queued(), 0, "the queue was not taken");
        let found: i64 = rusqlite::Connection::open(dir.search_db())
            .unwrap()
            .query_row(
                "SELECT count(*) FROM words WHERE words MATCH 'kenobi'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(found, 1, "the row was not indexed");

        let nices: Vec<i32> = std::fs::read_dir("/proc/thread-self/..")
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?.path();
                let comm = std::fs::read_to_string(task.join("comm")).ok()?;
                let stat = std::fs::read_to_string(task.join("stat")).ok()?;
                // The fields after the command's closing parenthesis; nice is the 19th of stat.
                let after = &stat[stat.rfind(')')? + 2..];
                (comm.trim() == "search-queue").then(|| after.split(' ').nth(16)?.parse().ok())?
            })
            .collect();
        assert!(!nices.is_empty(), "no thread drops the search queue");
        assert!(nices.iter().all(|&n| n == here), "{nices:?}, not {here}");
        assert!(
            upkeep.conn.execute("DELETE FROM search_queue", []).is_err(),
            "the upkeep's connection writes rows"
        );
    }

    /// The checkpointer reads the WAL file ahead of the next commits, so a turn's commit does
    /// not read, from the disk, a part of the file the kernel dropped (it did, before).
    #[test]
    fn the_checkpointer_reads_the_wal_ahead_of_the_next_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        let conn = store.sqlite_for_tests();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE scratch (x BLOB)").unwrap();
        let write = |bytes: i64| {
            conn.execute("INSERT INTO scratch VALUES (zeroblob(?1))", [bytes])
                .unwrap();
        };
        // A WAL file 1,000 frames long; each next write about 100 pages.
        write(4 << 20);
        let wal = std::fs::File::open(super::wal_path(&dir.db())).unwrap();
        let copy_back_and_drop = || {
            super::checkpoint(conn, "PASSIVE").unwrap();
            super::drop_from_the_page_cache(&wal);
        };
        let read_by = |bytes| {
            let before = super::ThreadUsage::now();
            write(bytes);
            super::ThreadUsage::now().since(before).read_kb
        };
        copy_back_and_drop();
        let unread = read_by(400_000);
        assert!(unread >= 100, "the commit read {unread} KiB");

        let mut upkeep = super::Upkeep::open(&dir).unwrap();
        copy_back_and_drop();
        upkeep.once();
        let read = read_by(400_000);
        assert_eq!(read, 0, "the commit after the upkeep read {read} KiB");

        // Where a reader keeps the WAL from starting over, the next commit goes on after it.
        let reader = super::connect(&dir.db()).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        reader
            .query_row("SELECT count(*) FROM scratch", [], |_| Ok(()))
            .unwrap();
        write(400_000);
        copy_back_and_drop();
        // The last write's frames are not copied back, so not synced: synced here, then dropped.
        wal.sync_data().unwrap();
        super::drop_from_the_page_cache(&wal);
        upkeep.once();
        let read = read_by(400_000);
        assert_eq!(read, 0, "the commit after the upkeep read {read} KiB");
        reader.execute_batch("COMMIT").unwrap();
    }

    /// After a prune's batch the WAL is copied back and the prune starts it over, so the WAL
    /// is written from its start; a reader in the WAL holds the prune back, up to its patience.
    #[test]
    fn a_prune_waits_for_a_long_wal_to_start_over() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let mut store = StateStore::open(&dir).unwrap();
        store
            .sqlite_for_tests()
            .pragma_update(None, "wal_autocheckpoint", 0)
            .unwrap();
        let frames = |conn: &rusqlite::Connection| super::checkpoint(conn, "PASSIVE").unwrap();
        let write = |conn: &rusqlite::Connection, n: i64| {
            conn.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS ballast (b BLOB);
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n})
                 INSERT INTO ballast SELECT zeroblob(3500) FROM n;"
            ))
            .unwrap();
        };
        write(store.sqlite_for_tests(), 200);
        // A reader in the WAL (it began before the WAL was copied back): it cannot start
        // over; the prune waits its patience, no more.
        let reader = super::connect(&dir.db()).unwrap();
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM ballast;")
            .unwrap();
        let (long, _) = frames(store.sqlite_for_tests()).unwrap();
        assert!(long > 100, "{long} frames");
        write(store.sqlite_for_tests(), 10);
        let patience = std::time::Duration::from_millis(60);
        let kept = super::keep_the_wal_short(store.sqlite_mut_for_tests(), 10, patience);
        assert!(kept.waited >= patience, "{kept:?}");
        assert!(!kept.copied_back, "{kept:?}");
        write(store.sqlite_for_tests(), 1);
        assert!(
            frames(store.sqlite_for_tests()).unwrap().0 > long,
            "it started over under a reader"
        );

        // The reader gone: it is all copied back at once, and the prune starts the WAL over
        // itself, before any other commit.
        reader.execute_batch("COMMIT").unwrap();
        let kept = super::keep_the_wal_short(store.sqlite_mut_for_tests(), 10, patience);
        assert!(kept.waited < patience && kept.copied_back, "{kept:?}");
        assert!(super::start_the_wal_over(store.sqlite_mut_for_tests()).is_some());
        assert_eq!(
            frames(&reader).unwrap().0,
            1,
            "the WAL did not start over with the one page written"
        );
        let id: i64 = reader
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .unwrap();
        assert_eq!(id, 0, "starting over changed the database");

        // All of a long WAL copied back while another connection holds the write lock: the
        // prune goes on at once, for it never waits for the lock to start the WAL over.
        write(store.sqlite_for_tests(), 200);
        let writer = super::connect(&dir.db()).unwrap();
        writer
            .execute_batch("BEGIN IMMEDIATE; INSERT INTO ballast VALUES (zeroblob(10));")
            .unwrap();
        let began = std::time::Instant::now();
        let kept = super::keep_the_wal_short(store.sqlite_mut_for_tests(), 10, patience);
        assert!(kept.copied_back, "{kept:?}");
        assert_eq!(
            super::start_the_wal_over(store.sqlite_mut_for_tests()),
            None
        );
        assert!(
            began.elapsed() < patience,
            "it waited for the write lock: {:?}",
            began.elapsed()
        );
        // The prune's connection waits for the lock again, as every connection does.
        writer.execute_batch("COMMIT").unwrap();
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        let waiter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            writer.execute_batch("COMMIT").unwrap();
        });
        write(store.sqlite_for_tests(), 1);
        waiter.join().unwrap();
        // A short WAL is left as it is.
        let kept = super::keep_the_wal_short(store.sqlite_mut_for_tests(), 10, patience);
        assert!(kept.waited < patience, "{kept:?}");
    }

    /// A slow operation's line tells a read from the disk from a sleep in the kernel.
    #[test]
    fn the_threads_reads_from_the_disk_and_sleeps_are_counted() {
        use std::io::{Read as _, Write as _};
        let before = super::ThreadUsage::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::ThreadUsage::now().since(before).blocked >= 1);

        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("cold");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&[7u8; 256 * 1024]).unwrap();
        file.sync_all().unwrap();
        // Out of the kernel's cache: the read below goes to the disk (not on tmpfs).
        super::drop_from_the_page_cache(&file);
        let before = super::ThreadUsage::now();
        let mut read = Vec::new();
        std::fs::File::open(&path)
            .unwrap()
            .read_to_end(&mut read)
            .unwrap();
        let spent = super::ThreadUsage::now().since(before);
        assert!(spent.read_kb >= 4, "{spent:?}");
    }

    /// A JSON column that does not parse is a corrupt record, not a `null` passed on.
    #[test]
    fn a_corrupt_json_row_is_corrupt_not_null() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        store.sqlite_for_tests()
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
            .sqlite_for_tests()
            .execute("UPDATE runtimes SET info = NULL, status = 'dancing'", [])
            .map(drop);
        assert!(other.is_ok());
        assert!(matches!(
            store.snapshot(),
            Err(super::StateError::Corrupt(_))
        ));
    }
}
