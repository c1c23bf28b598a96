//! What is on disk: the one part of planning that reads the world. Everything it finds is a
//! plain value, so the diff itself stays pure.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
        for a in &desired.agents {
            world.look_dir(&a.workspace);
            world.look_dir(&a.agent_dir);
            world.look_dir(&a.sessions_dir);
            for name in workspace::FILES {
                world.look_file(&a.workspace.join(name));
            }
        }
        for a in &live.agents {
            world.look_dir(&a.workspace);
            world.look_dir(&a.agent_dir);
            world.look_dir(&a.sessions_dir);
        }
        for b in &live.bootstrap {
            world.look_file(&b.path);
        }
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

    fn look_dir(&mut self, path: &Path) {
        if self.dirs.contains_key(path) {
            return;
        }
        let state = match std::fs::symlink_metadata(path) {
            Err(_) => DirState::Missing,
            Ok(meta) if meta.is_dir() => match std::fs::read_dir(path).map(|mut e| e.next()) {
                Ok(None) => DirState::Empty,
                _ => DirState::NonEmpty,
            },
            Ok(_) => DirState::NotADir,
        };
        self.dirs.insert(path.to_path_buf(), state);
    }

    fn look_file(&mut self, path: &Path) {
        if self.files.contains_key(path) {
            return;
        }
        let hash = std::fs::read(path).ok().map(|bytes| hash::of(&bytes));
        self.files.insert(path.to_path_buf(), hash);
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
