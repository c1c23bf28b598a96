//! The artifact store's files against the rows that name them (tasks.md, "Artifacts"; a2a.md,
//! "Files"). A task's files are at `artifacts/<task>/<sha256>`, those handed to an A2A peer in a
//! run at `artifacts/a2a-runs/<run>/<sha256>`; a file stays while a `task_artifacts` row of its
//! task, or a `run_artifacts` row of its run, names its hash.
//!
//! Rows go first (the prune's transaction, a hand-in replacing an earlier one), files after:
//! a crash in between leaves at worst a file no row names, which the next sweep removes; never
//! a row naming a missing file. The sweep reads a directory's rows and unlinks what they do
//! not name while it holds the write lock, and a hand-in checks, in the transaction that writes
//! its row, that its file is still there (`put_artifact`, `put_run_artifact`); so a sweep and a
//! hand-in of the same content never cross. A file younger than [`GRACE`] is left alone: a
//! hand-in stores its file a moment before it writes the row.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::db::{Behavior, Conn, Query, params};
use super::{StateDir, StateError};

/// How old a file no row names must be to go; a temporary file of a hand-in, too.
pub const GRACE: Duration = Duration::from_secs(10 * 60);

/// The directory of the files handed to A2A peers, under the artifact store.
pub const RUNS_DIR: &str = "a2a-runs";

/// The prefix of a hand-in's temporary file in a store directory.
const TEMPORARY: &str = ".deepcli-";

/// What a sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Swept {
    /// Files no row named (and hand-ins' temporary files left by a crash).
    pub files: u64,
    pub bytes: u64,
}

/// Which rows name the files of one store directory.
#[derive(Clone, Copy)]
enum Owner {
    Task,
    Run,
}

impl Owner {
    fn query(self) -> &'static str {
        match self {
            Owner::Task => "SELECT sha256 FROM task_artifacts WHERE task_id = ?1",
            Owner::Run => "SELECT sha256 FROM run_artifacts WHERE run_id = ?1",
        }
    }
}

fn io_error(path: &Path, source: std::io::Error) -> StateError {
    StateError::ArtifactStore {
        path: path.to_path_buf(),
        source,
    }
}

fn sql_error(path: &Path, source: rusqlite::Error) -> StateError {
    StateError::Sqlite {
        path: path.to_path_buf(),
        source,
    }
}

/// The directories under `root` with the rows that name their files: each task's, and each
/// run's under [`RUNS_DIR`].
fn directories(root: &Path) -> Result<Vec<(PathBuf, String, Owner)>, StateError> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_error(root, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_error(root, e))?;
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == RUNS_DIR {
            let runs = std::fs::read_dir(entry.path()).map_err(|e| io_error(&entry.path(), e))?;
            for run in runs {
                let run = run.map_err(|e| io_error(&entry.path(), e))?;
                if run.file_type().is_ok_and(|t| t.is_dir()) {
                    let id = run.file_name().to_string_lossy().into_owned();
                    out.push((run.path(), id, Owner::Run));
                }
            }
        } else {
            out.push((entry.path(), name, Owner::Task));
        }
    }
    Ok(out)
}

/// Whether `modified` is at least [`GRACE`] before `now` (a time in the future is young).
fn old(modified: std::io::Result<SystemTime>, now: SystemTime, grace: Duration) -> bool {
    modified
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|age| age >= grace)
}

/// Removes the files of the artifact store `root` that no row names and that are older than
/// `grace`, and the directories left empty (those already empty and as old); `dir`: the
/// state, for errors.
pub(crate) fn sweep(
    conn: &mut Conn<'_>,
    dir: &StateDir,
    root: &Path,
    grace: Duration,
) -> Result<Swept, StateError> {
    let db_error = |e| super::seam_error(dir, e);
    // deepcli's clock (a test moves it on), not the system's.
    let nanos = u64::try_from(crate::clock::timestamp().as_nanosecond()).unwrap_or(0);
    let now = SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos);
    let mut swept = Swept::default();
    for (store, id, owner) in directories(root)? {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&store).map_err(|e| io_error(&store, e))? {
            let entry = entry.map_err(|e| io_error(&store, e))?;
            let meta = entry.metadata().map_err(|e| io_error(&entry.path(), e))?;
            if meta.is_file() {
                files.push((entry.file_name().to_string_lossy().into_owned(), meta));
            }
        }
        if files.is_empty() {
            // Empty and as old as the grace: no hand-in is about to write into it.
            if old(
                std::fs::metadata(&store).and_then(|m| m.modified()),
                now,
                grace,
            ) {
                let _ = std::fs::remove_dir(&store);
            }
            continue;
        }
        // The write lock held from reading the rows to the last unlink: no hand-in records a
        // file of this directory meanwhile (it checks its file in the transaction of its row).
        let tx = conn.transaction(Behavior::Write).map_err(db_error)?;
        let named: HashSet<String> = tx
            .query_map(owner.query(), params![id], |r| r.get(0))
            .map_err(db_error)?
            .into_iter()
            .collect();
        for (name, meta) in files {
            if named.contains(&name) || !old(meta.modified(), now, grace) {
                continue;
            }
            if !name.starts_with(TEMPORARY) && !is_hash(&name) {
                continue;
            }
            let path = store.join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    swept.files += 1;
                    swept.bytes += meta.len();
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path, e)),
            }
        }
        tx.commit().map_err(db_error)?;
    }
    Ok(swept)
}

/// A store file's name: 64 lower-case hex digits.
fn is_hash(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The rows whose stored file is missing, each said as `task <id>'s artifact `<name>``.
pub(crate) fn missing(
    conn: &impl Query,
    dir: &StateDir,
    root: &Path,
) -> Result<Vec<String>, StateError> {
    let mut out = Vec::new();
    for (query, kind, under) in [
        (
            "SELECT task_id, name, sha256 FROM task_artifacts ORDER BY task_id, name",
            "task",
            None,
        ),
        (
            "SELECT run_id, name, sha256 FROM run_artifacts ORDER BY run_id, name",
            "A2A run",
            Some(RUNS_DIR),
        ),
    ] {
        let rows: Vec<(String, String, String)> = conn
            .query_map(query, params![], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| super::seam_error(dir, e))?;
        for (owner, name, sha256) in rows {
            let mut path = root.to_path_buf();
            path.extend(under);
            path.push(&owner);
            path.push(&sha256);
            if !path.is_file() {
                out.push(format!(
                    "{kind} {owner}'s artifact `{name}` has no stored file `{}`",
                    path.display()
                ));
            }
        }
    }
    Ok(out)
}

/// `deepcli state check`'s part: removes the files no row names (as a prune does) and names the
/// rows whose file is missing.
pub fn check(dir: &StateDir) -> Result<(Swept, Vec<String>), StateError> {
    let db = dir.db();
    let mut conn = super::connect(&db).map_err(|e| sql_error(&db, e))?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| sql_error(&db, e))?;
    let swept = sweep(&mut Conn::Sqlite(&mut conn), dir, &dir.artifacts(), GRACE)?;
    let missing = missing(&conn, dir, &dir.artifacts())?;
    Ok((swept, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backdate(path: &Path) {
        let then = SystemTime::now() - GRACE - Duration::from_secs(60);
        std::fs::File::open(path)
            .unwrap()
            .set_modified(then)
            .unwrap();
    }

    #[test]
    fn a_file_goes_once_no_row_names_it_and_it_is_older_than_the_grace() {
        let tmp = tempfile::tempdir().unwrap();
        sweeps(&StateDir::new(tmp.path()));
        let (_tmp, _schema, postgres) = crate::state::postgres_state();
        sweeps(&postgres);
    }

    fn sweeps(dir: &StateDir) {
        let mut store = crate::state::StateStore::open(dir).unwrap();
        let conn = &mut store.db.conn();
        let root = dir.artifacts();
        let (kept, gone, young) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        let task = root.join("task-1");
        let run = root.join(RUNS_DIR).join("run-1");
        for d in [&task, &run] {
            std::fs::create_dir_all(d).unwrap();
            for f in [&kept, &gone, &young] {
                std::fs::write(d.join(f), "x").unwrap();
            }
            backdate(&d.join(&kept));
            backdate(&d.join(&gone));
            std::fs::write(d.join(".deepcli-crashed"), "half").unwrap();
            backdate(&d.join(".deepcli-crashed"));
        }
        conn.execute(
            "INSERT INTO task_artifacts (task_id, name, sha256, size, handed_in_by, at) VALUES ('task-1', 'r.txt', ?1, 1, 'b', 'now')",
            params![kept],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO run_artifacts (run_id, name, sha256, size, media_type, handed_in_by, at) VALUES ('run-1', 'r.txt', ?1, 1, 'text/plain', 'b', 'now')",
            params![kept],
        )
        .unwrap();
        let swept = sweep(conn, dir, &root, GRACE).unwrap();
        assert_eq!(
            swept,
            Swept {
                files: 4,
                bytes: 10
            }
        );
        for d in [&task, &run] {
            assert!(d.join(&kept).is_file(), "a named file went");
            assert!(!d.join(&gone).exists(), "an unnamed old file stayed");
            assert!(d.join(&young).is_file(), "a young file went");
            assert!(!d.join(".deepcli-crashed").exists());
        }
        assert!(missing(&*conn, dir, &root).unwrap().is_empty());

        // The rows go (a prune): their files go at the next sweep, and the empty directories
        // at the one after.
        conn.batch("DELETE FROM task_artifacts; DELETE FROM run_artifacts")
            .unwrap();
        for d in [&task, &run] {
            backdate(&d.join(&young));
        }
        let swept = sweep(conn, dir, &root, GRACE).unwrap();
        assert_eq!(swept.files, 4);
        let swept = sweep(conn, dir, &root, Duration::ZERO).unwrap();
        assert_eq!(swept.files, 0);
        assert!(!task.exists() && !run.exists());

        // A row whose file is missing is named.
        conn.execute(
            "INSERT INTO task_artifacts (task_id, name, sha256, size, handed_in_by, at) VALUES ('task-2', 'r.txt', ?1, 1, 'b', 'now')",
            params![kept],
        )
        .unwrap();
        let named = missing(&*conn, dir, &root).unwrap();
        assert_eq!(named.len(), 1, "{named:?}");
        assert!(
            named[0].contains("task task-2's artifact `r.txt`"),
            "{named:?}"
        );
    }
}
