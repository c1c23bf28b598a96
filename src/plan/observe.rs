//! What is on disk: the one part of planning that reads the world. Everything it finds is a
//! plain value, so the diff itself stays pure.

use std::path::{Path, PathBuf};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::desired::Desired;
use crate::state::{LiveState, StateDir};
use crate::{hash, workspace};

/// A directory as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirState {
    Missing,
    Empty,
    NonEmpty,
    /// Something that is not a directory.
    NotADir,
}

impl DirState {
    pub fn exists(self) -> bool {
        self != DirState::Missing
    }
}

/// The world as found: directories, file hashes, the published routing plan.
#[derive(Debug, Clone, Default)]
pub struct World {
    pub dirs: HashMap<PathBuf, DirState>,
    /// `None`: the file does not exist.
    pub files: HashMap<PathBuf, Option<String>>,
    /// The content hash inside `routing-plan.json`, `None` when it is missing or unreadable.
    pub routing_file: Option<String>,
    /// Whether each trash entry's directory still exists.
    pub trash_dirs: HashMap<PathBuf, bool>,
    /// Observed (false: assumed from a state snapshot, so no drift can be found).
    pub observed: bool,
}

impl World {
    pub fn dir(&self, path: &Path) -> DirState {
        self.dirs.get(path).copied().unwrap_or(DirState::Missing)
    }

    /// `Some(None)`: observed missing; `None`: not observed.
    pub fn file(&self, path: &Path) -> Option<Option<&str>> {
        self.files.get(path).map(|h| h.as_deref())
    }

    /// Looks at every path the desired and the live state mention.
    pub fn observe(desired: &Desired, live: &LiveState, state: &StateDir) -> World {
        let mut world = World {
            observed: true,
            ..World::default()
        };
        // Whether a workspace is empty matters only where one is about to be bootstrapped:
        // a new agent, or one whose workspace moved.
        let applied: HashMap<&str, &Path> = live
            .agents
            .iter()
            .map(|a| (a.id.as_str(), a.workspace.as_path()))
            .collect();
        let mut files = Vec::new();
        for a in &desired.agents {
            let fresh = applied.get(a.id.as_str()) != Some(&a.workspace.as_path());
            world.look_dir(&a.workspace, fresh);
            world.look_dir(&a.agent_dir, false);
            world.look_dir(&a.sessions_dir, false);
            files.extend(workspace::FILES.iter().map(|name| a.workspace.join(name)));
        }
        for a in &live.agents {
            world.look_dir(&a.workspace, false);
            world.look_dir(&a.agent_dir, false);
            world.look_dir(&a.sessions_dir, false);
        }
        files.extend(live.bootstrap.iter().map(|b| b.path.clone()));
        world.look_files(files);
        for t in &live.trash {
            world.trash_dirs.insert(t.dir.clone(), t.dir.is_dir());
        }
        world.routing_file = routing_hash(&state.routing_plan());
        world
    }

    /// A world that matches a state snapshot exactly (`plan --live`): no disk to look at.
    pub fn assumed(live: &LiveState) -> World {
        let mut world = World::default();
        for a in &live.agents {
            for dir in [&a.workspace, &a.agent_dir, &a.sessions_dir] {
                world.dirs.insert(dir.clone(), DirState::NonEmpty);
            }
        }
        for b in &live.bootstrap {
            world.files.insert(b.path.clone(), Some(b.hash.clone()));
        }
        for t in &live.trash {
            world.trash_dirs.insert(t.dir.clone(), true);
        }
        world.routing_file = live.routing.as_ref().map(|r| r.content_hash.clone());
        world
    }

    /// `emptiness`: tell an empty directory from one with entries (else any existing
    /// directory counts as non-empty, which costs one `stat` instead of a directory read).
    fn look_dir(&mut self, path: &Path, emptiness: bool) {
        if self
            .dirs
            .get(path)
            .is_some_and(|s| !emptiness || *s != DirState::NonEmpty)
        {
            return;
        }
        let state = match std::fs::symlink_metadata(path) {
            Err(_) => DirState::Missing,
            Ok(meta) if meta.is_dir() && !emptiness => DirState::NonEmpty,
            Ok(meta) if meta.is_dir() => match std::fs::read_dir(path).map(|mut e| e.next()) {
                Ok(None) => DirState::Empty,
                _ => DirState::NonEmpty,
            },
            Ok(_) => DirState::NotADir,
        };
        self.dirs.insert(path.to_path_buf(), state);
    }

    /// Hashes files on every core: a hub of a thousand agents has eight thousand of them.
    fn look_files(&mut self, paths: Vec<PathBuf>) {
        let mut seen = HashSet::default();
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .filter(|p| seen.insert(p.clone()))
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        let chunk = paths.len().div_ceil(threads).max(64);
        let hash_file = |path: &PathBuf| std::fs::read(path).ok().map(|bytes| hash::of(&bytes));
        let hashed: Vec<Vec<Option<String>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = paths
                .chunks(chunk)
                .map(|part| {
                    (
                        part,
                        scope.spawn(move || part.iter().map(hash_file).collect()),
                    )
                })
                .collect();
            workers
                .into_iter()
                // A worker that died is redone here, so every path keeps its own hash.
                .map(|(part, w)| {
                    w.join()
                        .unwrap_or_else(|_| part.iter().map(hash_file).collect())
                })
                .collect()
        });
        for (path, hash) in paths.into_iter().zip(hashed.into_iter().flatten()) {
            self.files.insert(path, hash);
        }
    }
}

/// The `content_hash` a published plan states (its integrity is checked by whoever loads it).
fn routing_hash(path: &Path) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        content_hash: String,
    }
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<Head>(&text)
        .ok()
        .map(|h| h.content_hash)
}
