//! The schema: the migrations in order, each run once in one exclusive transaction, and a new
//! database made in a file of its own and linked into place whole.

use std::path::Path;

use rusqlite::{Connection, params};

use super::{Result, StateDir, StateError, now};

/// The newest schema this build knows. A database with a higher `user_version` was written by
/// a newer deepcli and is refused.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
const MIGRATIONS: [&str; 32] = [
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
    include_str!("outbox.sql"),
    include_str!("system_sections.sql"),
    include_str!("tasks.sql"),
    include_str!("prunes.sql"),
    include_str!("traces.sql"),
    include_str!("year_indexes.sql"),
    include_str!("activity.sql"),
    include_str!("a2a_push.sql"),
    include_str!("search.sql"),
    include_str!("a2a_files.sql"),
    include_str!("search_queue.sql"),
    include_str!("gated_lines.sql"),
    include_str!("cluster.sql"),
    include_str!("run_files.sql"),
    include_str!("unfinished_runs.sql"),
    include_str!("remote_waits.sql"),
    include_str!("audit_indexes.sql"),
];
/// The migration that records who created each directory ([`DirOrigin`]).
const ORIGINS_MIGRATION: usize = 4;

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

/// Makes a new state database: migrated in a file of its own, then linked into place whole.
/// `state.db` is never there half made (a crash leaves a stray `state.db.new-*` at most), so
/// an existing one that is empty was damaged by something else. A process that lost the race
/// to create it uses the winner's.
pub(super) fn create(dir: &StateDir) -> Result<()> {
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
pub(super) fn migrate(conn: &mut Connection, dir: &StateDir) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;
    use crate::state::{StateDir, StateStore};

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
}
