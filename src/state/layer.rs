//! The connection a layer that keeps state of its own (Access, the Hub, the platform adapters)
//! holds to the state database, beside the controller's [`StateStore`].

use std::path::PathBuf;
use std::sync::Mutex;

use rusqlite::Connection;

use super::{StateDir, StateError, StateStore};

/// One connection, used under a lock: opened after the database is migrated, with
/// `synchronous = NORMAL` (WAL keeps it durable across a process crash) and a 10 s busy
/// timeout, so the layers wait for each other's writes instead of failing.
pub struct LayerConnection {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The layer, for the error a poisoned lock gives.
    layer: &'static str,
}

impl LayerConnection {
    /// Opens the state database of `dir` (migrating it) for `layer`.
    pub fn open(dir: &StateDir, layer: &'static str) -> Result<LayerConnection, StateError> {
        drop(StateStore::open(dir)?);
        let path = dir.db();
        let sql = |source| StateError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = super::connect(&path).map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        // A turn's commit does not copy the WAL back into the database: the controller's
        // checkpointer does ([`super::Checkpointer`]); this is the backstop without one.
        conn.pragma_update(None, "wal_autocheckpoint", super::LAYER_AUTOCHECKPOINT)
            .map_err(sql)?;
        Ok(LayerConnection {
            conn: Mutex::new(conn),
            path,
            layer,
        })
    }

    /// Whether an agent with this id was deleted (its entry is in the trash): the storage
    /// layer's table, read for a layer that holds this connection.
    pub fn agent_in_trash(&self, agent_id: &str) -> Result<bool, StateError> {
        self.with(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM trash WHERE agent_id = ?1)",
                [agent_id],
                |r| r.get(0),
            )
        })
    }

    /// Runs `f` on the connection; an SQLite error names the database.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StateError> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| StateError::Corrupt(format!("{} store lock poisoned", self.layer)))?;
        f(&mut conn).map_err(|source| StateError::Sqlite {
            path: self.path.clone(),
            source,
        })
    }
}
