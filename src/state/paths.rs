//! The layout of the state directory (reconcile.md, "State directory").

use std::path::{Path, PathBuf};

use super::StateError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
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

    pub fn routing_plan(&self) -> PathBuf {
        self.root.join("routing-plan.json")
    }

    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// Creates the directory, private to its owner: it holds transcripts and tokens.
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
