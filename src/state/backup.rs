//! `deepcli state backup | restore | check`: a consistent copy of a state database that may
//! be in use (SQLite's `VACUUM INTO`, one read transaction: what a running controller commits
//! meanwhile is either wholly in the copy or not at all), carrying the trash manifests; a
//! restore into an empty state directory, verified before it is put in place; and the
//! database's own checks.
//!
//! A backup is one SQLite file, private to its owner: the state's tables as they were, plus
//! `backup_meta` (when, by which deepcli, from where) and `backup_trash` (each trash entry's
//! `manifest.json`). A restore removes those two tables again.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;

use super::migrate::SCHEMA_VERSION;
use super::{StateDir, StateError, StateStore, damage, now, sql_error};

/// What a backup holds, as `backup` made it or `restore` found it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupInfo {
    pub file: PathBuf,
    pub bytes: u64,
    pub lineage: String,
    pub serial: u64,
    /// The schema version of the state in it.
    pub schema_version: i64,
    /// When it was made, and by which deepcli.
    pub created_at: String,
    pub created_by: String,
    /// The trash entries whose manifests it carries.
    pub trash_entries: Vec<String>,
    pub elapsed_ms: u64,
}

/// Why a backup or restore was refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("`{}` exists: a backup never overwrites a file; name another, or remove it", .0.display())]
    Exists(PathBuf),
    #[error(
        "state directory `{}` already holds a state (lineage {lineage}): a restore goes only into an empty state directory; name another with --state-dir",
        dir.display()
    )]
    NotEmpty { dir: PathBuf, lineage: String },
    #[error("there is no state in `{}` to back up", .0.display())]
    NoState(PathBuf),
    #[error("`{}` is not a usable backup: {why}", file.display())]
    Bad { file: PathBuf, why: String },
    #[error("cannot write `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] StateError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a file is written before it is renamed over `path`.
fn partial(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// Copies the state of `dir` to `to`, with `trash` (entry name, `manifest.json` text) in it.
/// Reads only: a running controller goes on meanwhile.
pub fn backup(
    dir: &StateDir,
    to: &Path,
    trash: &[(String, String)],
) -> Result<BackupInfo, BackupError> {
    let started = Instant::now();
    if to.exists() {
        return Err(BackupError::Exists(to.to_path_buf()));
    }
    if !damage::inspect(dir)? {
        return Err(BackupError::NoState(dir.root().to_path_buf()));
    }
    let db = dir.db();
    let source = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| sql_error(db.clone(), e))?;
    source
        .busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| sql_error(db.clone(), e))?;
    damage::check(&source, &db)?;
    // SQLite makes the copy with the process's umask: it is made inside a directory only the
    // owner may enter, so no one else can open it before it is private itself.
    // A directory of its own (mode 0700, removed when dropped), beside FILE: the rename out of
    // it stays on one filesystem.
    let parent = crate::durable::dir_of(to);
    let nest = tempfile::Builder::new()
        .prefix(".deepcli-backup-")
        .tempdir_in(parent)
        .map_err(io(parent))?;
    let tmp = nest.path().join("state.db");
    source
        .execute("VACUUM INTO ?1", [tmp.to_string_lossy()])
        .map_err(|e| sql_error(db, e))?;
    let finished = (|| {
        crate::owner_only::restrict(&tmp).map_err(io(&tmp))?;
        let copy = Connection::open(&tmp).map_err(|e| sql_error(tmp.clone(), e))?;
        let sql = |e| sql_error(tmp.clone(), e);
        copy.execute_batch(
            "CREATE TABLE backup_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE backup_trash (entry TEXT PRIMARY KEY, manifest TEXT NOT NULL);",
        )
        .map_err(sql)?;
        copy.execute(
            "INSERT INTO backup_meta (key, value) VALUES ('created_at', ?1), ('created_by', ?2), ('source', ?3)",
            params![
                now(),
                concat!("deepcli ", env!("CARGO_PKG_VERSION")),
                dir.root().display().to_string()
            ],
        )
        .map_err(sql)?;
        for (entry, manifest) in trash {
            copy.execute(
                "INSERT INTO backup_trash (entry, manifest) VALUES (?1, ?2)",
                params![entry, manifest],
            )
            .map_err(sql)?;
        }
        drop(copy);
        let info = read_info(&tmp, started)?;
        crate::durable::sync_fs(&tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, to).map_err(io(to))?;
        crate::durable::sync_dir(crate::durable::dir_of(to)).map_err(io(to))?;
        Ok(BackupInfo {
            file: to.to_path_buf(),
            ..info
        })
    })();
    drop(nest);
    finished
}

fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map(drop)
}

/// What the backup at `file` holds, after SQLite's integrity check and deepcli's: a state
/// (with a lineage) no newer than this build, and the backup's own tables.
fn read_info(file: &Path, started: Instant) -> Result<BackupInfo, BackupError> {
    let bad = |why: String| BackupError::Bad {
        file: file.to_path_buf(),
        why,
    };
    let conn = Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| bad(e.to_string()))?;
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(|e| bad(e.to_string()))?;
    if integrity != "ok" {
        return Err(bad(format!("SQLite's integrity check failed: {integrity}")));
    }
    damage::check(&conn, file).map_err(|e| bad(e.to_string()))?;
    let schema_version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| bad(e.to_string()))?;
    if schema_version > SCHEMA_VERSION {
        return Err(bad(format!(
            "it was made by a newer deepcli (schema {schema_version}, this build knows up to {SCHEMA_VERSION}); restore it with that deepcli"
        )));
    }
    let meta = |table: &str, key: &str| -> Result<Option<String>, BackupError> {
        conn.query_row(
            &format!("SELECT value FROM {table} WHERE key = ?1"),
            [key],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| {
            bad(format!(
                "{e} (a state database, not a backup made by `deepcli state backup`?)"
            ))
        })
    };
    let lineage = meta("meta", "lineage")?.unwrap_or_default();
    let serial = meta("meta", "serial")?
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    let created_at = meta("backup_meta", "created_at")?.unwrap_or_default();
    let created_by = meta("backup_meta", "created_by")?.unwrap_or_default();
    let trash_entries = conn
        .prepare("SELECT entry FROM backup_trash ORDER BY entry")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(|e| bad(e.to_string()))?;
    let bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    Ok(BackupInfo {
        file: file.to_path_buf(),
        bytes,
        lineage,
        serial,
        schema_version,
        created_at,
        created_by,
        trash_entries,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// A restored state: what the backup held, and the trash manifests it carried, for the trash
/// to write back.
#[derive(Debug)]
pub struct Restored {
    pub info: BackupInfo,
    pub trash: Vec<(String, String)>,
}

/// Puts the backup at `from` in place as the state of `dir`, which must hold none. Verified
/// first (integrity, lineage, schema); migrated to this build's schema once in place.
pub fn restore(from: &Path, dir: &StateDir) -> Result<Restored, BackupError> {
    let started = Instant::now();
    if damage::inspect(dir)? {
        let lineage = StateStore::open_existing(dir)?
            .map(|s| s.lineage())
            .transpose()?
            .unwrap_or_default();
        return Err(BackupError::NotEmpty {
            dir: dir.root().to_path_buf(),
            lineage,
        });
    }
    let info = read_info(from, started)?;
    dir.create()?;
    let db = dir.db();
    let tmp = partial(&db);
    let _ = std::fs::remove_file(&tmp);
    let placed = (|| {
        create_private(&tmp).map_err(io(&tmp))?;
        std::fs::copy(from, &tmp).map_err(io(&tmp))?;
        crate::owner_only::restrict(&tmp).map_err(io(&tmp))?;
        let copy = Connection::open(&tmp).map_err(|e| sql_error(tmp.clone(), e))?;
        let sql = |e| sql_error(tmp.clone(), e);
        let trash = copy
            .prepare("SELECT entry, manifest FROM backup_trash ORDER BY entry")
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
            .map_err(sql)?;
        copy.execute_batch("DROP TABLE backup_meta; DROP TABLE backup_trash;")
            .map_err(sql)?;
        drop(copy);
        crate::durable::sync_fs(&tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &db).map_err(io(&db))?;
        crate::durable::sync_dir(dir.root()).map_err(io(&db))?;
        Ok::<_, BackupError>(trash)
    })();
    let trash = match placed {
        Ok(trash) => trash,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    // Opened as every command opens it: checked, made private, migrated.
    StateStore::open(dir)?;
    Ok(Restored {
        info: BackupInfo {
            file: from.to_path_buf(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ..info
        },
        trash,
    })
}

/// One finding of [`check`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// `integrity`, `foreign-key` or `orphan`.
    pub kind: &'static str,
    pub what: String,
}

/// Rows that name a session, checked against `sessions`: (table, column).
const SESSION_ROWS: &[(&str, &str)] = &[("transcript", "session_key")];

/// SQLite's integrity and foreign key checks of the state of `dir`, and rows whose session is
/// gone. Reads only.
pub fn check(dir: &StateDir) -> Result<Vec<Finding>, BackupError> {
    if !damage::inspect(dir)? {
        return Err(BackupError::NoState(dir.root().to_path_buf()));
    }
    let db = dir.db();
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| sql_error(db.clone(), e))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(|e| sql_error(db.clone(), e))?;
    damage::check(&conn, &db)?;
    let sql = |e| sql_error(db.clone(), e);
    let mut findings = Vec::new();
    let integrity: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(sql)?;
    findings.extend(
        integrity
            .into_iter()
            .filter(|line| line != "ok")
            .map(|what| Finding {
                kind: "integrity",
                what,
            }),
    );
    let foreign: Vec<(String, i64, String)> = conn
        .prepare("PRAGMA foreign_key_check")
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get::<_, Option<i64>>(1)?.unwrap_or(-1),
                    r.get(2)?,
                ))
            })?
            .collect()
        })
        .map_err(sql)?;
    findings.extend(foreign.into_iter().map(|(table, rowid, parent)| Finding {
        kind: "foreign-key",
        what: format!("{table} row {rowid} names a missing {parent} row"),
    }));
    for (table, column) in SESSION_ROWS {
        let orphans: i64 = conn
            .query_row(
                &format!(
                    "SELECT count(*) FROM {table} WHERE {column} NOT IN (SELECT session_key FROM sessions)"
                ),
                [],
                |r| r.get(0),
            )
            .map_err(sql)?;
        if orphans > 0 {
            findings.push(Finding {
                kind: "orphan",
                what: format!("{orphans} {table} rows name a session `sessions` does not have"),
            });
        }
    }
    Ok(findings)
}
