//! What is on disk: the one part of planning that reads the world. Everything it finds is a
//! plain value, so the diff itself stays pure.

use std::path::{Path, PathBuf};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::desired::DesiredAgent;
use crate::state::{LiveState, StateDir};
use crate::{hash, workspace};

/// A directory as found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirState {
    Missing,
    Empty,
    NonEmpty,
    /// Something that is not a directory.
    NotADir,
}

impl DirState {
    pub(crate) fn exists(self) -> bool {
        self != DirState::Missing
    }
}

/// The world as found: directories, file hashes, the published routing plan.
#[derive(Debug, Clone, Default)]
pub(crate) struct World {
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
    pub(crate) fn dir(&self, path: &Path) -> DirState {
        self.dirs.get(path).copied().unwrap_or(DirState::Missing)
    }

    /// `Some(None)`: observed missing; `None`: not observed.
    pub(crate) fn file(&self, path: &Path) -> Option<Option<&str>> {
        self.files.get(path).map(|h| h.as_deref())
    }

    /// Looks at every path the desired agents and the live state mention.
    pub(crate) fn observe(desired: &[DesiredAgent], live: &LiveState, state: &StateDir) -> World {
        World::observe_with(desired, live, state, &mut HashCache::default())
    }

    /// [`World::observe`], reading again only the files `cache` cannot vouch for.
    pub(crate) fn observe_with(
        desired: &[DesiredAgent],
        live: &LiveState,
        state: &StateDir,
        cache: &mut HashCache,
    ) -> World {
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
        for a in desired {
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
        world.look_files(files, cache);
        for t in &live.trash {
            world.trash_dirs.insert(t.dir.clone(), t.dir.is_dir());
        }
        world.routing_file = routing_hash(&state.routing_plan());
        world
    }

    /// A world that matches a state snapshot exactly (`plan --live`): no disk to look at.
    pub(crate) fn assumed(live: &LiveState) -> World {
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
    fn look_files(&mut self, paths: Vec<PathBuf>, cache: &mut HashCache) {
        let mut seen = HashSet::default();
        let paths: Vec<PathBuf> = paths
            .into_iter()
            .filter(|p| seen.insert(p.clone()))
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        let chunk = paths.len().div_ceil(threads).max(64);
        let known = &*cache;
        let look = |path: &PathBuf| known.look(path);
        let looked: Vec<Vec<Looked>> = std::thread::scope(|scope| {
            let workers: Vec<_> = paths
                .chunks(chunk)
                .map(|part| (part, scope.spawn(move || part.iter().map(look).collect())))
                .collect();
            workers
                .into_iter()
                // A worker that died is redone here, so every path keeps its own hash.
                .map(|(part, w)| w.join().unwrap_or_else(|_| part.iter().map(look).collect()))
                .collect()
        });
        let mut entries = HashMap::default();
        for (path, looked) in paths.into_iter().zip(looked.into_iter().flatten()) {
            let hash = looked.map(|(stamp, hash)| {
                if let Some(stamp) = stamp {
                    entries.insert(path.clone(), (stamp, hash.clone()));
                }
                hash
            });
            self.files.insert(path, hash);
        }
        // What was not looked at this time is forgotten.
        cache.entries = entries;
    }
}

/// What [`HashCache::look`] found: `None` for a missing or unreadable file, else the stamp to
/// remember the hash by (`None`: too fresh to remember) and the hash.
type Looked = Option<(Option<Stamp>, String)>;

/// File hashes remembered by what `stat` says of each file, for a long-running controller: a
/// file whose device, inode, size, mtime and ctime are unchanged is not read again. A hash is
/// remembered only for a file last changed two seconds before it was read, so a write in the
/// same clock tick as the read cannot go unseen (git's "racy" index entries).
#[derive(Debug)]
pub(crate) struct HashCache {
    entries: HashMap<PathBuf, (Stamp, String)>,
    settled: std::time::Duration,
}

impl Default for HashCache {
    fn default() -> HashCache {
        HashCache {
            entries: HashMap::default(),
            settled: std::time::Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl HashCache {
    fn look(&self, path: &PathBuf) -> Looked {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        let stamp = Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        };
        if let Some((known, hash)) = self.entries.get(path)
            && *known == stamp
        {
            return Some((Some(stamp), hash.clone()));
        }
        let hash = hash::of(&std::fs::read(path).ok()?);
        let changed = std::time::UNIX_EPOCH
            + std::time::Duration::new(
                u64::try_from(stamp.ctime.0).unwrap_or(0),
                u32::try_from(stamp.ctime.1).unwrap_or(0),
            );
        let settled = changed + self.settled <= std::time::SystemTime::now();
        Some((settled.then_some(stamp), hash))
    }
}

/// The content hash a published plan states (its integrity is checked by whoever loads it),
/// in either format's spelling.
fn routing_hash(path: &Path) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "contentHash", alias = "content_hash")]
        content_hash: String,
    }
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<Head>(&text)
        .ok()
        .map(|h| h.content_hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look_all(cache: &mut HashCache, paths: &[PathBuf]) -> Vec<Option<String>> {
        let mut world = World::default();
        world.look_files(paths.to_vec(), cache);
        paths.iter().map(|p| world.files[p].clone()).collect()
    }

    #[test]
    fn a_remembered_hash_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.md"), dir.path().join("missing.md"));
        std::fs::write(&a, "one").unwrap();
        let mut cache = HashCache {
            settled: std::time::Duration::ZERO,
            ..HashCache::default()
        };
        let paths = [a.clone(), b];
        assert_eq!(look_all(&mut cache, &paths), [Some(hash::of(b"one")), None]);
        assert!(
            cache.entries.contains_key(&a),
            "a settled file is remembered"
        );
        // Same size, new content, a clock tick later: the stamp differs, the file is read.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&a, "two").unwrap();
        assert_eq!(look_all(&mut cache, &paths)[0], Some(hash::of(b"two")));
        std::fs::remove_file(&a).unwrap();
        assert_eq!(look_all(&mut cache, &paths)[0], None);
        assert!(cache.entries.is_empty(), "a missing file is forgotten");
    }

    #[test]
    fn a_file_changed_just_now_is_not_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.md");
        std::fs::write(&a, "fresh").unwrap();
        let mut cache = HashCache::default();
        assert_eq!(look_all(&mut cache, &[a]), [Some(hash::of(b"fresh"))]);
        assert!(cache.entries.is_empty());
    }

    /// A plan published in format 1 (snake_case keys) is the same plan: no republish after an
    /// upgrade.
    #[test]
    fn a_published_plan_states_its_hash_in_either_format() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("1.json"), dir.path().join("2.json"));
        std::fs::write(
            &old,
            r#"{"format_version": "1.0", "content_hash": "sha256:a"}"#,
        )
        .unwrap();
        std::fs::write(
            &new,
            r#"{"formatVersion": "2.0", "contentHash": "sha256:a"}"#,
        )
        .unwrap();
        assert_eq!(routing_hash(&old).as_deref(), Some("sha256:a"));
        assert_eq!(routing_hash(&new).as_deref(), Some("sha256:a"));
    }
}
