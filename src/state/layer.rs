//! The connections a layer that keeps state of its own (Access, the Hub, the platform adapters)
//! holds to the state database, beside the controller's [`StateStore`]: one that writes, and a
//! few that only read, so that a read never queues behind a write waiting for the lock.

use std::panic::Location;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::db::{self, Conn, DbError, DbResult, PgConn, PgUrl, Query};
use super::{StateDir, StateError, StateStore};

/// A layer's connections, each used under a lock: opened after the database is migrated, with
/// `synchronous = NORMAL` (WAL keeps it durable across a process crash) and the busy handler
/// of [`super::connect`], so the layers wait for each other's writes instead of failing.
///
/// Under WAL a reader waits for no writer: [`LayerConnection::query`] takes one of
/// [`READERS`] connections opened `query_only`, while [`LayerConnection::write`] (writes, and
/// reads that must see the same snapshot as a write) takes the one that writes. Without them,
/// every read of a layer queued behind its write that waited for another connection's lock —
/// under a prune, a turn's reads waited hundreds of milliseconds for others' writes.
pub struct LayerConnection {
    backend: Backend,
    /// The reader waited for when none is free: each in turn.
    next_reader: AtomicUsize,
    /// The layer, for the error a poisoned lock gives.
    layer: &'static str,
}

/// A layer's connections to its backend: the one that writes, and [`READERS`] that read.
enum Backend {
    Sqlite {
        conn: Mutex<Connection>,
        readers: Vec<Mutex<Connection>>,
        path: PathBuf,
    },
    /// The state in PostgreSQL ([`db`]): each connection is a session of its own, so a read
    /// never waits for a write there either.
    Postgres {
        conn: Mutex<PgConn>,
        readers: Vec<Mutex<PgConn>>,
        url: Box<PgUrl>,
    },
}

/// The connections of a layer that only read.
const READERS: usize = 2;

impl LayerConnection {
    /// Opens the state database of `dir` (migrating it) for `layer`.
    pub fn open(dir: &StateDir, layer: &'static str) -> Result<LayerConnection, StateError> {
        if let Some(url) = dir.postgres() {
            return LayerConnection::open_postgres(url, layer);
        }
        drop(StateStore::open(dir)?);
        let path = dir.db();
        let sql = |source| StateError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = super::connect(&path).map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        // A turn's commit does not copy the WAL back into the database: the serving
        // process's checkpointer does ([`super::Checkpointer`]); this is a backstop.
        conn.pragma_update(None, "wal_autocheckpoint", super::LAYER_AUTOCHECKPOINT)
            .map_err(sql)?;
        let readers = (0..READERS)
            .map(|_| {
                let reader = super::connect(&path)?;
                reader.pragma_update(None, "query_only", true)?;
                Ok(Mutex::new(reader))
            })
            .collect::<rusqlite::Result<_>>()
            .map_err(sql)?;
        Ok(LayerConnection {
            backend: Backend::Sqlite {
                conn: Mutex::new(conn),
                readers,
                path,
            },
            next_reader: AtomicUsize::new(0),
            layer,
        })
    }

    /// Opens the state in PostgreSQL at `url` (migrating it) for `layer`.
    fn open_postgres(url: &PgUrl, layer: &'static str) -> Result<LayerConnection, StateError> {
        let at = |source| StateError::db(url.to_string(), source);
        let mut conn = PgConn::connect(url).map_err(at)?;
        db::migrate_postgres(&mut conn).map_err(at)?;
        let readers = (0..READERS)
            .map(|_| PgConn::connect(url).map(Mutex::new))
            .collect::<Result<_, _>>()
            .map_err(at)?;
        Ok(LayerConnection {
            backend: Backend::Postgres {
                conn: Mutex::new(conn),
                readers,
                url: Box::new(url.clone()),
            },
            next_reader: AtomicUsize::new(0),
            layer,
        })
    }

    /// Whether an agent with this id was deleted (its entry is in the trash): the storage
    /// layer's table, read for a layer that holds this connection.
    pub fn agent_in_trash(&self, agent_id: &str) -> Result<bool, StateError> {
        self.query(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM trash WHERE agent_id = ?1)",
                db::params![agent_id],
                |r| r.get(0),
            )
        })
    }

    /// Runs `f` on SQLite's connection that writes (tests that look at SQLite itself: a store
    /// calls [`LayerConnection::write`]).
    #[cfg(test)]
    #[track_caller]
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StateError> {
        let caller = Location::caller();
        let asked = Instant::now();
        let Backend::Sqlite { conn, .. } = &self.backend else {
            return Err(self.not_on_postgres(caller));
        };
        let mut conn = conn.lock().map_err(|_| self.poisoned())?;
        self.timed(caller, asked, || f(&mut conn).map_err(DbError::from))
    }

    /// Runs `f`, which only reads, on SQLite's connection that only reads (tests that look at
    /// SQLite itself: a store calls [`LayerConnection::query`]).
    #[cfg(test)]
    #[track_caller]
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StateError> {
        let caller = Location::caller();
        let asked = Instant::now();
        let Backend::Sqlite { readers, .. } = &self.backend else {
            return Err(self.not_on_postgres(caller));
        };
        let conn = self.free(readers)?;
        self.timed(caller, asked, || f(&conn).map_err(DbError::from))
    }

    /// Runs `f` on the connection that writes, whichever the backend.
    #[track_caller]
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&mut Conn<'_>) -> DbResult<T>,
    ) -> Result<T, StateError> {
        let caller = Location::caller();
        let asked = Instant::now();
        match &self.backend {
            Backend::Sqlite { conn, .. } => {
                let mut conn = conn.lock().map_err(|_| self.poisoned())?;
                self.timed(caller, asked, || f(&mut Conn::Sqlite(&mut conn)))
            }
            Backend::Postgres { conn, url, .. } => {
                let mut conn = conn.lock().map_err(|_| self.poisoned())?;
                self.reopen_if_closed(&mut conn, url)?;
                self.timed(caller, asked, || f(&mut Conn::Postgres(&mut conn)))
            }
        }
    }

    /// Runs `f`, which only reads, on a connection that only reads, whichever the backend
    /// (as [`LayerConnection::read`]).
    #[track_caller]
    pub(crate) fn query<T>(
        &self,
        f: impl FnOnce(&mut Conn<'_>) -> DbResult<T>,
    ) -> Result<T, StateError> {
        let caller = Location::caller();
        let asked = Instant::now();
        match &self.backend {
            Backend::Sqlite { readers, .. } => {
                let mut conn = self.free(readers)?;
                self.timed(caller, asked, || f(&mut Conn::Sqlite(&mut conn)))
            }
            Backend::Postgres { readers, url, .. } => {
                let mut conn = self.free(readers)?;
                self.reopen_if_closed(&mut conn, url)?;
                self.timed(caller, asked, || f(&mut Conn::Postgres(&mut conn)))
            }
        }
    }

    fn free<'a, C>(&self, readers: &'a [Mutex<C>]) -> Result<MutexGuard<'a, C>, StateError> {
        for reader in readers {
            match reader.try_lock() {
                Ok(conn) => return Ok(conn),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Poisoned(_)) => return Err(self.poisoned()),
            }
        }
        let turn = self.next_reader.fetch_add(1, Ordering::Relaxed) % readers.len();
        readers[turn].lock().map_err(|_| self.poisoned())
    }

    /// A PostgreSQL session that PostgreSQL closed is made again before the call that would
    /// use it ([`PgConn::reopen_if_closed`]).
    fn reopen_if_closed(&self, conn: &mut PgConn, url: &PgUrl) -> Result<(), StateError> {
        if conn
            .reopen_if_closed(url)
            .map_err(|e| StateError::db(url.to_string(), e))?
        {
            tracing::info!(
                layer = self.layer,
                "state: a closed PostgreSQL session was opened again"
            );
        }
        Ok(())
    }

    fn poisoned(&self) -> StateError {
        StateError::Corrupt(format!("{} store lock poisoned", self.layer))
    }

    #[cfg(test)]
    fn not_on_postgres(&self, caller: &Location<'_>) -> StateError {
        StateError::db(
            self.at(),
            DbError::Value(format!(
                "the {} store's call at {caller} is not on PostgreSQL yet (docs/scale-out.md)",
                self.layer
            )),
        )
    }

    /// Where the state is, for an error.
    fn at(&self) -> String {
        match &self.backend {
            Backend::Sqlite { path, .. } => path.display().to_string(),
            Backend::Postgres { url, .. } => url.to_string(),
        }
    }

    /// Runs `f` (asked for at `asked`, its connection held from now) and logs it if it was
    /// slow, with what it waited for.
    fn timed<T>(
        &self,
        caller: &Location<'_>,
        asked: Instant,
        f: impl FnOnce() -> DbResult<T>,
    ) -> Result<T, StateError> {
        let got = Instant::now();
        super::lock_waits();
        let before = super::ThreadUsage::now();
        let done = f();
        let tries = super::lock_waits();
        let took = asked.elapsed();
        if took >= SLOW {
            let spent = super::ThreadUsage::now().since(before);
            tracing::warn!(
                layer = self.layer,
                at = %caller,
                took_ms = took.as_millis(),
                queued_ms = got.duration_since(asked).as_millis(),
                lock_waits = tries,
                read_kb = spent.read_kb,
                blocked = spent.blocked,
                "state: a slow operation (queued: for the layer's connection; \
                 lock_waits: milliseconds waiting for another connection's write; \
                 read_kb: read from the disk; blocked: times it slept, lock waits included)"
            );
        } else if took >= NOTED {
            // What a slow one queued behind: `RUST_LOG=deepcli::state::layer=debug`.
            tracing::debug!(
                layer = self.layer,
                at = %caller,
                took_ms = took.as_millis(),
                queued_ms = got.duration_since(asked).as_millis(),
                lock_waits = tries,
                "state: an operation"
            );
        }
        done.map_err(|source| match (source, &self.backend) {
            (DbError::Sqlite(source), Backend::Sqlite { path, .. }) => StateError::Sqlite {
                path: path.clone(),
                source,
            },
            (source, _) => StateError::db(self.at(), source),
        })
    }
}

/// An operation on a layer's connection that takes this long, its wait for the connection
/// included, is logged with what it waited for: a turn waits on each of its operations.
const SLOW: Duration = Duration::from_millis(50);

/// An operation that takes this long is in the debug log, with the same fields.
const NOTED: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    impl LayerConnection {
        fn writer_is_free(&self) -> bool {
            match &self.backend {
                Backend::Sqlite { conn, .. } => conn.try_lock().is_ok(),
                Backend::Postgres { conn, .. } => conn.try_lock().is_ok(),
            }
        }
    }

    #[test]
    fn a_read_does_not_queue_behind_a_write_waiting_for_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let layer = LayerConnection::open(&dir, "test").unwrap();
        // Another connection (a prune's batch) holds the write lock.
        let other = super::super::connect(&dir.db()).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        std::thread::scope(|scope| {
            let write = scope.spawn(|| {
                layer.with(|c| c.execute("INSERT INTO meta (key, value) VALUES ('w', '1')", []))
            });
            // The write holds the layer's connection while it waits for the lock.
            while layer.writer_is_free() {
                std::thread::yield_now();
            }
            // A read answers meanwhile: behind the write, it would wait until the write gave
            // up on the lock (the busy handler's 10 s), and the write would fail.
            let read = layer
                .read(|c| c.query_row("SELECT count(*) FROM meta", [], |r| r.get::<_, i64>(0)));
            assert!(read.unwrap() > 0);
            other.execute_batch("COMMIT").unwrap();
            assert_eq!(write.join().unwrap().unwrap(), 1);
        });
    }

    #[test]
    fn a_layers_commit_leaves_a_long_wal_to_the_checkpointer() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let layer = LayerConnection::open(&dir, "test").unwrap();
        // A prune's worth of pages in the WAL, none copied back yet (12,000 frames: past
        // SQLite's default threshold and the 10,000 this backstop once was).
        let other = super::super::connect(&dir.db()).unwrap();
        other.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        other
            .execute_batch(
                "CREATE TABLE ballast (b BLOB);
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12000)
                 INSERT INTO ballast SELECT zeroblob(3000) FROM n;",
            )
            .unwrap();
        let db_bytes = || std::fs::metadata(dir.db()).unwrap().len();
        let before = db_bytes();
        layer
            .with(|c| c.execute("INSERT INTO meta (key, value) VALUES ('w', '1')", []))
            .unwrap();
        // Had the commit checkpointed, the ballast's pages would be in the database file now.
        assert_eq!(db_bytes(), before);
    }
}
