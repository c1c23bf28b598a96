//! The layout of the state directory (reconcile.md, "State directory").

use std::path::{Path, PathBuf};

use super::StateError;
use crate::owner_only;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
    /// The state's database in PostgreSQL instead of `state.db` (issue 43): the stores on the
    /// backend seam ([`super::db`]) open it there; the directory keeps the files (logs, the
    /// trash, artifacts, the operator token).
    postgres: Option<super::db::PgUrl>,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir {
            root: root.into(),
            postgres: None,
        }
    }

    /// The same directory, its database in PostgreSQL at `url`.
    pub(crate) fn with_postgres(mut self, url: super::db::PgUrl) -> StateDir {
        self.postgres = Some(url);
        self
    }

    /// The state directory `root`, its database in PostgreSQL at `url` when one is given
    /// (`--state-url`), else its `state.db`.
    pub(crate) fn located(root: &Path, url: Option<&super::db::PgUrl>) -> StateDir {
        let dir = StateDir::new(root);
        match url {
            Some(url) => dir.with_postgres(url.clone()),
            None => dir,
        }
    }

    pub(crate) fn postgres(&self) -> Option<&super::db::PgUrl> {
        self.postgres.as_ref()
    }

    /// Whether the state's database may be there to read: a `state.db` in the directory, or
    /// one in PostgreSQL (opening it says whether it is).
    pub fn has_database(&self) -> bool {
        self.postgres.is_some() || self.db().exists()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn db(&self) -> PathBuf {
        self.root.join("state.db")
    }

    pub fn trash(&self) -> PathBuf {
        self.root.join("trash")
    }

    /// What tasks' assignees handed in (tasks.md, "Artifacts"): `artifacts/<task>/<sha256>`.
    pub fn artifacts(&self) -> PathBuf {
        self.root.join("artifacts")
    }

    pub fn routing_plan(&self) -> PathBuf {
        self.root.join("routing-plan.json")
    }

    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn operator_token(&self) -> PathBuf {
        self.root.join("operator-token")
    }

    /// The database's write-ahead log, which SQLite keeps next to it.
    pub fn db_wal(&self) -> PathBuf {
        self.root.join("state.db-wal")
    }

    /// The database's shared memory index, next to it too.
    pub fn db_shm(&self) -> PathBuf {
        self.root.join("state.db-shm")
    }

    /// The transcript's search index, a database of its own (`state::search_index`).
    pub fn search_db(&self) -> PathBuf {
        self.root.join("search.db")
    }

    /// The search index with its write-ahead log and shared memory index.
    pub fn search_db_files(&self) -> [PathBuf; 3] {
        ["search.db", "search.db-wal", "search.db-shm"].map(|f| self.root.join(f))
    }

    /// Takes group and other permissions off what deepcli keeps here for itself: the database
    /// with its WAL and shared memory (SQLite creates those with the database's mode, so the
    /// database goes first), the routing plan, the operator token, the trash and artifacts directories, and the
    /// logs directory with every log in it. The directory itself keeps its mode when it already
    /// existed: it may be anyone's (`--state-dir /srv`); what deepcli keeps in it is private
    /// anyway.
    pub fn make_private(&self) -> Result<(), StateError> {
        let restrict = |path: &Path| {
            owner_only::restrict(path).map_err(|source| StateError::Private {
                path: path.to_path_buf(),
                source,
            })
        };
        for path in [
            self.db(),
            self.db_wal(),
            self.db_shm(),
            self.routing_plan(),
            self.operator_token(),
            self.trash(),
            self.artifacts(),
        ]
        .into_iter()
        .chain(self.search_db_files())
        {
            restrict(&path)?;
        }
        // Symlinks inside logs/ are not followed: what they point at is not deepcli's.
        let mut dirs = vec![self.logs()];
        while let Some(dir) = dirs.pop() {
            restrict(&dir)?;
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                match entry.file_type() {
                    Ok(kind) if kind.is_dir() => dirs.push(entry.path()),
                    Ok(kind) if kind.is_file() => restrict(&entry.path())?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Creates the directory (and missing parents) 0700: it holds transcripts and tokens. An
    /// existing one is left as it is.
    pub fn create(&self) -> Result<(), StateError> {
        use std::os::unix::fs::DirBuilderExt;
        let err = |source| StateError::CreateDir {
            path: self.root.clone(),
            source,
        };
        if !self.root.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)
                .map_err(err)?;
        }
        Ok(())
    }
}
