//! The trash: the filesystem side of deleting an agent (reconcile.md, apply, "Trash").
//!
//! Deleting an agent never loses data. The directories deepcli created for it (workspace,
//! agentDir, sessions) are moved into `<state>/trash/<id>-<utc-stamp>/`; from a directory that
//! existed before deepcli, only the files deepcli wrote into it are moved, and the directory
//! stays. A `manifest.json` beside them says where each came from, and `restore` puts them back.
//!
//! This module owns that layout: the entry names, the manifest, the moves (a `rename`, or
//! copy, sync, verify and only then remove when the paths are on different filesystems), and
//! the [`Guard`] that keeps `/`, home directories, system trees, mount points and deepcli's own
//! directories from ever being moved. It must not decide *what* to trash (the plan does: a
//! workspace shared with another agent arrives as [`Kept`], a directory deepcli did not create
//! as a [`TrashItem`] with `files`), touch the state database (the caller records entries
//! there), or print anything.
//!
//! Crash safety. Every step leaves the disk in a state from which calling the same function
//! again finishes the job, and no step deletes a byte that does not also exist somewhere else:
//!
//! * the entry directory and a manifest listing every item (`moved: false`) exist before
//!   anything moves, and the manifest is rewritten (atomically) after each item, or each file
//!   of an item that moves file by file, has moved;
//! * a copy is built under a staging name (`.<name>.deepcli-partial`, next to the destination)
//!   and renamed to its final name only once verified, so a leftover staging tree is always a
//!   disposable duplicate of an original that still exists;
//! * when an original and its stored copy both exist, the one that is a subset of the other is
//!   the leftover of an interrupted step and is removed; if neither is, both are kept and the
//!   call fails.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read, Write as _};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{failpoint, mounts};

/// The newest manifest format this build reads and writes. Version 2 added items that move
/// file by file ([`ManifestItem::files`]); an entry without one is still written as version 1,
/// so that an older deepcli can restore it.
pub const FORMAT_VERSION: u32 = 2;
/// The format of an entry whose items all moved whole.
const WHOLE_ITEMS_FORMAT: u32 = 1;
/// The manifest's name inside an entry directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Where a manifest is written before it is renamed over [`MANIFEST_FILE`].
const MANIFEST_TMP: &str = ".manifest.json.tmp";
/// Appended to a copy's staging name: `.<name>.deepcli-partial`.
const PARTIAL_SUFFIX: &str = ".deepcli-partial";

/// One path to move into the trash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrashItem {
    /// `workspace`, `agentDir` or `sessions`; also the item's name inside the entry directory.
    pub label: String,
    /// The absolute original path.
    pub path: PathBuf,
    /// `None`: the whole path moves. `Some(names)`: `path` is a directory deepcli did not
    /// create, which stays where it is; only these files in it (deepcli's own) move.
    pub files: Option<Vec<String>>,
}

impl TrashItem {
    /// A path that moves whole.
    pub fn whole(label: impl Into<String>, path: impl Into<PathBuf>) -> TrashItem {
        TrashItem {
            label: label.into(),
            path: path.into(),
            files: None,
        }
    }
}

/// A path deliberately left in place, recorded so the manifest tells the whole story.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub label: String,
    pub path: PathBuf,
    /// Why it stayed, e.g. `workspace shared with agent x`.
    pub reason: String,
}

/// `manifest.json`: what one trash entry holds and where it came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    pub agent_id: String,
    /// RFC 3339, UTC, whole seconds; set when the entry is first created and kept on resume.
    pub created_at: String,
    /// The serial of the plan that deleted the agent.
    pub serial: u64,
    pub items: Vec<ManifestItem>,
    #[serde(default)]
    pub kept: Vec<KeptItem>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ManifestItem {
    pub label: String,
    pub original: PathBuf,
    /// The item's name inside the entry directory.
    pub stored: String,
    /// True while the item sits in the trash: set once it has moved in, cleared once a restore
    /// has moved it back.
    pub moved: bool,
    /// Whether the original existed when the entry was made; a missing one is recorded, not
    /// an error.
    pub existed: bool,
    /// Present when `original` is a directory that stayed where it was (deepcli did not create
    /// it) and only these files of it moved; `stored` is then a directory holding them, and
    /// `moved` says that every one of them that existed is in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<ManifestFile>>,
}

/// One file of an item that moves file by file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ManifestFile {
    /// Its name, in the original directory and in the item's stored directory alike.
    pub name: String,
    pub moved: bool,
    pub existed: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KeptItem {
    pub label: String,
    pub path: PathBuf,
    pub reason: String,
}

impl Manifest {
    /// Whether every item that existed has reached the trash (an interrupted move has not).
    pub fn is_complete(&self) -> bool {
        self.items.iter().all(|item| item.moved || !item.existed)
    }
}

/// One entry in the trash directory.
#[derive(Clone, Debug, PartialEq)]
pub struct TrashEntry {
    /// The directory name, which is what `restore` takes.
    pub name: String,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// A directory in the trash whose manifest could not be read.
#[derive(Debug)]
pub struct Unreadable {
    pub name: String,
    pub dir: PathBuf,
    pub error: TrashError,
}

/// Everything in the trash directory: readable entries, sorted by `created_at` then name, and
/// the directories that are not (sorted by name).
#[derive(Debug, Default)]
pub struct Listing {
    pub entries: Vec<TrashEntry>,
    pub unreadable: Vec<Unreadable>,
}

/// How a path travels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transfer {
    /// `rename`, falling back to copy, verify, remove when the paths are on different
    /// filesystems.
    #[default]
    Auto,
    /// Always copy, verify, remove: the cross-filesystem path, forced so that tests can run it
    /// on one filesystem.
    ForceCopy,
}

/// Why the [`Guard`] refused a path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it is a relative path, and deepcli only moves absolute paths")]
    Relative,
    /// `dir` is the path itself, lexically or resolved, so the message does not repeat it.
    #[error("it is {what}")]
    Is { what: &'static str, dir: PathBuf },
    #[error("it contains {what} `{}`", dir.display())]
    Contains { what: &'static str, dir: PathBuf },
    #[error("it lies inside deepcli's trash `{}`", dir.display())]
    InTrash { dir: PathBuf },
    /// A tree the system owns whole (`/etc`, `/usr`, …): nothing in it is an agent's.
    #[error("it lies inside the system directory `{}`", tree.display())]
    InSystemTree { tree: PathBuf },
    #[error("it is a mount point (a filesystem is mounted on it)")]
    MountPoint,
    #[error("it contains the mount point `{}`", dir.display())]
    ContainsMountPoint { dir: PathBuf },
}

impl Refusal {
    /// Whether a mount is what stands in the way: unmounting it lifts the refusal.
    pub fn is_mount(&self) -> bool {
        matches!(
            self,
            Refusal::MountPoint | Refusal::ContainsMountPoint { .. }
        )
    }
}

/// A path the [`Guard`] refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{}`{} cannot be moved: {reason}", path.display(), self.note())]
pub struct RefusedPath {
    pub path: PathBuf,
    /// The path with symlinks resolved, when that is what the guard refused.
    pub resolved: Option<PathBuf>,
    pub reason: Refusal,
}

impl RefusedPath {
    /// The path in backticks, with what it resolves to when that is what was refused.
    pub fn subject(&self) -> String {
        format!("`{}`{}", self.path.display(), self.note())
    }

    fn note(&self) -> String {
        match &self.resolved {
            Some(real) => format!(" (which resolves to `{}`)", real.display()),
            None => String::new(),
        }
    }
}

/// Everything that can go wrong in the trash. Each message names the path involved, and the
/// ones a user can act on end with a `hint:` line. Refusals are boxed to keep `Result`s small.
#[derive(Debug, thiserror::Error)]
pub enum TrashError {
    #[error("{0}")]
    Refused(RefusedPath),
    #[error(
        "refusing to trash agent `{agent_id}`: its {label} {refused}; nothing was moved\nhint: fix the agent's `workspace`/`agentDir` in agents.yaml so that it points at a directory of its own, then apply again"
    )]
    ItemRefused {
        agent_id: String,
        label: String,
        refused: Box<RefusedPath>,
    },
    #[error(
        "refusing to restore trash entry `{entry}`: its {label} would go back to `{}`{}, which {}; nothing was moved\nhint: `{}` names this path; check that it was not edited by hand",
        .refused.path.display(),
        .refused.note(),
        .refused.reason,
        manifest.display()
    )]
    RestoreRefused {
        entry: String,
        label: String,
        refused: Box<RefusedPath>,
        manifest: PathBuf,
    },
    #[error("`{name}` is not a valid trash entry name: {problem}")]
    BadEntryName { name: String, problem: &'static str },
    #[error("trash item label `{label}` {problem}")]
    BadLabel {
        label: String,
        problem: &'static str,
    },
    #[error(
        "agent `{agent_id}`: its {inner_label} `{}` lies inside its {outer_label} `{}`, so it cannot be trashed on its own\nhint: give the agent separate directories in agents.yaml, or trash only `{}`",
        inner.display(),
        outer.display(),
        outer.display()
    )]
    Overlap {
        agent_id: String,
        outer_label: String,
        outer: PathBuf,
        inner_label: String,
        inner: PathBuf,
    },
    #[error(
        "trash entry `{}` already holds {detail}, which is not what this call moves\nhint: choose a fresh entry name (`unique_entry_name` appends -2, -3, …)",
        dir.display()
    )]
    ManifestMismatch { dir: PathBuf, detail: String },
    #[error(
        "`{}` exists but is not a trash entry: it has no {MANIFEST_FILE} and holds `{}`\nhint: move it out of the trash directory, or choose another entry name",
        dir.display(),
        found.display()
    )]
    ForeignEntry { dir: PathBuf, found: PathBuf },
    #[error(
        "no trash entry named `{name}` in `{}`\nhint: run `deepcli trash list` to see the entries",
        trash_root.display()
    )]
    NoSuchEntry { name: String, trash_root: PathBuf },
    #[error(
        "cannot restore trash entry `{entry}`: {} already exist{}; nothing was moved\nhint: move {} aside (or delete {}), then restore again",
        path_list(.paths),
        if .paths.len() == 1 { "s" } else { "" },
        if .paths.len() == 1 { "it" } else { "them" },
        if .paths.len() == 1 { "it" } else { "them" }
    )]
    Conflicts { entry: String, paths: Vec<PathBuf> },
    #[error(
        "cannot restore trash entry `{entry}`: its {label} should be stored at `{}` (moved from `{}`), but it is missing; nothing was moved\nhint: look inside the entry directory; if the data is gone, set `moved` to false for this item in {MANIFEST_FILE}",
        stored.display(),
        original.display()
    )]
    StoredMissing {
        entry: String,
        label: String,
        stored: PathBuf,
        original: PathBuf,
    },
    #[error(
        "the {label} `{}` and its copy in the trash `{}` both exist and differ; deepcli deletes neither\nhint: compare them, keep what you need in one place and delete the other, then try again",
        original.display(),
        stored.display()
    )]
    BothExist {
        label: String,
        original: PathBuf,
        stored: PathBuf,
    },
    #[error(
        "cannot move `{}` to `{}`: the destination already exists",
        from.display(),
        to.display()
    )]
    DestinationExists { from: PathBuf, to: PathBuf },
    #[error("cannot move `{}` to `{}`: {source}", from.display(), to.display())]
    Move {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
    #[error("cannot {action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "cannot copy `{}` to another filesystem: it is a {kind}, which deepcli does not copy\nhint: remove it (a {kind} holds no data a copy could keep), then try again",
        path.display()
    )]
    Unsupported { path: PathBuf, kind: &'static str },
    #[error(
        "the copy of `{}` at `{}` does not match the original: {detail}\nhint: the original was kept; check free space and errors on the destination filesystem, then try again",
        original.display(),
        copy.display()
    )]
    VerifyFailed {
        original: PathBuf,
        copy: PathBuf,
        detail: String,
    },
    #[error(
        "trash manifest `{}` is unreadable: {source}\nhint: `deepcli trash list` skips this entry; repair or move the file",
        path.display()
    )]
    ManifestUnreadable {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Serializing strings, numbers and paths fails only for a path that is not UTF-8.
    #[error(
        "cannot write trash manifest `{}`: {source}\nhint: deepcli records only UTF-8 paths; rename the directory or point the agent elsewhere",
        path.display()
    )]
    ManifestWrite {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "trash manifest `{}` has format_version {found}, but this deepcli reads versions 1 to {FORMAT_VERSION}\nhint: upgrade deepcli",
        path.display()
    )]
    ManifestVersion { path: PathBuf, found: u32 },
    #[error("trash item `{label}`: `{name}` is not a valid file name: {problem}")]
    BadFileName {
        label: String,
        name: String,
        problem: &'static str,
    },
    #[error(
        "restored every item of `{}`, but it still holds {}; the directory was left in place\nhint: look at what is left, then delete the directory by hand",
        dir.display(),
        path_list(.leftover)
    )]
    EntryNotEmpty {
        dir: PathBuf,
        leftover: Vec<PathBuf>,
    },
}

fn path_list(paths: &[PathBuf]) -> String {
    let mut out = String::new();
    for (i, path) in paths.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "`{}`", path.display());
    }
    out
}

fn io_err(action: &'static str, path: &Path, source: io::Error) -> TrashError {
    TrashError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

// ---------------------------------------------------------------------------------------------
// Guard

/// The paths deepcli must never move: `/`, home directories, system trees, mount points, its
/// config, state and trash directories, and anything containing one of them.
#[derive(Clone, Debug)]
pub struct Guard {
    protected: Vec<Protected>,
    trash: Vec<PathBuf>,
    /// The mount table, read when a directory is first checked.
    mounts: std::sync::OnceLock<Vec<PathBuf>>,
}

/// What is about to move: a directory (whole) or one file deepcli wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moving {
    Dir,
    /// A file deepcli wrote into a directory that stays. Only the rules about what the path
    /// *is* apply: taking deepcli's own file out of `/etc` moves nothing of the system's.
    File,
}

#[derive(Clone, Debug)]
struct Protected {
    what: &'static str,
    /// The lexical form, and the canonical one when it differs: a symlinked state directory
    /// is protected under both names.
    forms: Vec<PathBuf>,
}

impl Guard {
    /// `home` is the user's home directory; `/root` and every `/home/<name>` are protected
    /// whatever it is. The trash root is `<state_dir>/trash`.
    pub fn new(config_dir: &Path, state_dir: &Path, home: Option<&Path>) -> Guard {
        let trash_root = state_dir.join("trash");
        let mut protected = Vec::new();
        if let Some(home) = home {
            protected.push(Protected {
                what: "a home directory",
                forms: forms(home),
            });
        }
        protected.push(Protected {
            what: "a home directory",
            forms: forms(Path::new("/root")),
        });
        protected.push(Protected {
            what: "deepcli's config directory",
            forms: forms(config_dir),
        });
        protected.push(Protected {
            what: "deepcli's state directory",
            forms: forms(state_dir),
        });
        let trash = forms(&trash_root);
        protected.push(Protected {
            what: "deepcli's trash directory",
            forms: trash.clone(),
        });
        Guard {
            protected,
            trash,
            mounts: std::sync::OnceLock::new(),
        }
    }

    /// Refuses, as a directory to move whole or to bootstrap: `/`, a home directory (the given
    /// home, `/root` and any direct child of `/home`), a system tree or anything inside one
    /// ([`system_tree`]), a mount point or a directory with one inside it, the config dir, the
    /// state dir, the trash root, anything inside the trash root, or an ancestor of any of
    /// them; also refuses relative paths. Both the lexically normalized path and the path with
    /// symlinks resolved are checked.
    pub fn check(&self, path: &Path) -> Result<(), TrashError> {
        match self.refusal(path, Moving::Dir) {
            None => Ok(()),
            Some(refused) => Err(TrashError::Refused(refused)),
        }
    }

    /// Refuses, as one file deepcli wrote and now moves out of a directory that stays: a
    /// relative path, a path inside the trash, or one that *is* a protected directory. Where
    /// the file lies does not matter: it is deepcli's.
    pub fn check_file(&self, path: &Path) -> Result<(), TrashError> {
        match self.refusal(path, Moving::File) {
            None => Ok(()),
            Some(refused) => Err(TrashError::Refused(refused)),
        }
    }

    fn refusal(&self, path: &Path, moving: Moving) -> Option<RefusedPath> {
        let refused = |resolved, reason| RefusedPath {
            path: path.to_path_buf(),
            resolved,
            reason,
        };
        if !path.is_absolute() {
            return Some(refused(None, Refusal::Relative));
        }
        let lexical = lexical(path);
        if let Some(reason) = self.refuse(&lexical, moving) {
            return Some(refused(None, reason));
        }
        // The kernel resolves `link/..` through the link, so canonicalize the path as given;
        // a path that does not exist yet resolves through its deepest existing ancestor.
        let real = fs::canonicalize(path).ok().or_else(|| resolve(&lexical));
        let resolved = real.clone().filter(|real| *real != lexical);
        if let Some(real) = &resolved
            && let Some(reason) = self.refuse(real, moving)
        {
            return Some(refused(resolved.clone(), reason));
        }
        if moving == Moving::File {
            return None;
        }
        // The mount table names mount points with symlinks resolved.
        let real = real.unwrap_or(lexical);
        let table = self.mounts.get_or_init(mounts::mount_points);
        let reason = if mounts::is_mount_point(&real, table) {
            Refusal::MountPoint
        } else {
            Refusal::ContainsMountPoint {
                dir: mounts::mount_inside(&real, table)?.to_path_buf(),
            }
        };
        Some(refused(resolved, reason))
    }

    fn refuse(&self, candidate: &Path, moving: Moving) -> Option<Refusal> {
        let homes = Path::new("/home");
        if candidate.parent().is_none() {
            return Some(Refusal::Is {
                what: "the filesystem root",
                dir: candidate.to_path_buf(),
            });
        }
        if candidate == homes {
            return Some(Refusal::Contains {
                what: "the home directories",
                dir: homes.to_path_buf(),
            });
        }
        if candidate.parent() == Some(homes) {
            return Some(Refusal::Is {
                what: "a home directory",
                dir: candidate.to_path_buf(),
            });
        }
        if moving == Moving::Dir
            && let Some(reason) = system_tree(candidate)
        {
            return Some(reason);
        }
        for protected in &self.protected {
            for form in &protected.forms {
                if candidate == form {
                    return Some(Refusal::Is {
                        what: protected.what,
                        dir: form.clone(),
                    });
                }
                if form.starts_with(candidate) {
                    return Some(Refusal::Contains {
                        what: protected.what,
                        dir: form.clone(),
                    });
                }
            }
        }
        // Nothing deepcli resolves for an agent lives in the trash; a path there is a
        // mistake that would move one entry into another.
        self.trash
            .iter()
            .find(|trash| candidate.starts_with(trash))
            .map(|trash| Refusal::InTrash { dir: trash.clone() })
    }
}

/// Whether an absolute, lexically normal path is a system tree: refused as a workspace or
/// agentDir, and never moved.
///
/// * `/etc`, `/usr`, `/bin`, `/sbin`, `/lib`, `/lib32`, `/lib64`, `/libx32`, `/libexec`,
///   `/boot`, `/proc`, `/sys`, `/dev` and `/run` belong to the system (its packages, its kernel,
///   its boot, its runtime state) with everything inside them: no agent's directory lies there.
/// * `/var`, `/opt`, `/srv`, `/tmp`, `/mnt` and `/media` are refused themselves, and so are the
///   directories directly in `/var` (`/var/lib`, `/var/log`, `/var/tmp`, …), which the system
///   shares out; below those, an operator's own places are fine: `/srv/agents/x`,
///   `/opt/hub/agents/x`, `/var/lib/deepcli/x`, a temporary directory in `/tmp`.
pub fn system_tree(path: &Path) -> Option<Refusal> {
    let mut parts = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)));
    let top = parts.next()?.as_os_str().to_str()?;
    let depth = 1 + parts.count();
    let tree = Path::new("/").join(top);
    let lib = top.strip_prefix("lib").is_some_and(|rest| {
        matches!(rest, "" | "x32" | "exec") || rest.bytes().all(|b| b.is_ascii_digit())
    });
    let owned = lib
        || matches!(
            top,
            "etc" | "usr" | "bin" | "sbin" | "boot" | "proc" | "sys" | "dev" | "run"
        );
    let shared = matches!(top, "var" | "opt" | "srv" | "tmp" | "mnt" | "media");
    if depth == 1 && (owned || shared) || depth == 2 && top == "var" {
        Some(Refusal::Is {
            what: "a system directory",
            dir: path.to_path_buf(),
        })
    } else if owned {
        Some(Refusal::InSystemTree { tree })
    } else {
        None
    }
}

fn forms(path: &Path) -> Vec<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        // Relative config and state directories come from the command line; the guard must
        // compare them as the kernel will see them.
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let lexical = lexical(&absolute);
    let mut out = vec![lexical.clone()];
    if let Some(real) = fs::canonicalize(&absolute)
        .ok()
        .or_else(|| resolve(&lexical))
        && real != lexical
    {
        out.push(real);
    }
    out
}

/// Folds `.` and `..` without touching the filesystem; `..` at the root stays at the root.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The canonical form of the deepest existing ancestor of a lexical path, with the rest
/// appended.
fn resolve(path: &Path) -> Option<PathBuf> {
    let mut rest = Vec::new();
    let mut current = path;
    loop {
        if let Ok(real) = fs::canonicalize(current) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Some(out);
        }
        rest.push(current.file_name()?.to_os_string());
        current = current.parent()?;
    }
}

// ---------------------------------------------------------------------------------------------
// Entry names

/// `<id>-20261130T053600Z`: the agent id and the UTC time, to the second.
pub fn entry_name(agent_id: &str, at: Timestamp) -> String {
    format!("{agent_id}-{}", at.strftime("%Y%m%dT%H%M%SZ"))
}

/// [`entry_name`], with `-2`, `-3`, … appended while a directory of that name exists (two
/// deletes of one agent id within a second). A name that cannot be inspected counts as free:
/// counting it as taken would loop forever on an unreadable trash root, and `move_to_trash`
/// then reports the real error.
pub fn unique_entry_name(trash_root: &Path, agent_id: &str, at: Timestamp) -> String {
    let base = entry_name(agent_id, at);
    let taken = |name: &str| matches!(exists(&trash_root.join(name)), Ok(true));
    if !taken(&base) {
        return base;
    }
    let mut n: u64 = 2;
    loop {
        let candidate = format!("{base}-{n}");
        if !taken(&candidate) {
            return candidate;
        }
        n += 1;
    }
}

fn check_entry_name(name: &str) -> Result<(), TrashError> {
    match plain_name_problem(name) {
        Some(problem) => Err(TrashError::BadEntryName {
            name: name.to_string(),
            problem,
        }),
        None => Ok(()),
    }
}

/// What keeps `name` from being one plain entry of a directory: empty, a path, or a name
/// starting with `.` (reserved for deepcli's staging and temporary files).
fn plain_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.contains('/') || name.contains('\0') {
        Some("it must be a single name, not a path")
    } else if name.starts_with('.') {
        Some("names starting with `.` are reserved for deepcli's temporary files")
    } else {
        None
    }
}

/// Labels double as names inside the entry directory, so they must be plain names that cannot
/// collide with the manifest or a staging file.
fn check_label(label: &str) -> Result<(), TrashError> {
    let problem = if label.is_empty() {
        Some("is empty")
    } else if !label
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Some("may only hold ASCII letters, digits, `-` and `_`")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(TrashError::BadLabel {
            label: label.to_string(),
            problem,
        }),
        None => Ok(()),
    }
}

/// A file of an item that moves file by file: one plain name in the item's directory, which
/// cannot collide with a staging name.
fn check_file_name(label: &str, name: &str) -> Result<(), TrashError> {
    match plain_name_problem(name) {
        Some(problem) => Err(TrashError::BadFileName {
            label: label.to_string(),
            name: name.to_string(),
            problem,
        }),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Moving into the trash

/// Moves an agent's items into `<trash_root>/<entry>/` and returns the finished manifest.
///
/// Every item is checked with `guard` before anything moves, and one refusal refuses the
/// whole call. An item whose original does not exist is recorded (`existed: false`) and
/// skipped; so is a file of an item that moves file by file. Calling again with the same
/// `entry` after a crash finishes the job (see the module documentation); the existing
/// manifest, with its `created_at` and `serial`, is reused.
pub fn move_to_trash(
    trash_root: &Path,
    entry: &str,
    agent_id: &str,
    serial: u64,
    items: &[TrashItem],
    kept: &[Kept],
    guard: &Guard,
) -> Result<Manifest, TrashError> {
    move_to_trash_with(
        trash_root,
        entry,
        agent_id,
        serial,
        items,
        kept,
        guard,
        Transfer::Auto,
    )
}

/// [`move_to_trash`] with an explicit [`Transfer`].
#[expect(
    clippy::too_many_arguments,
    reason = "move_to_trash's arguments plus the transfer mode"
)]
pub fn move_to_trash_with(
    trash_root: &Path,
    entry: &str,
    agent_id: &str,
    serial: u64,
    items: &[TrashItem],
    kept: &[Kept],
    guard: &Guard,
    transfer: Transfer,
) -> Result<Manifest, TrashError> {
    check_entry_name(entry)?;
    for (i, item) in items.iter().enumerate() {
        check_label(&item.label)?;
        if items[..i].iter().any(|other| other.label == item.label) {
            return Err(TrashError::BadLabel {
                label: item.label.clone(),
                problem: "is given twice",
            });
        }
        for (j, name) in item.files.iter().flatten().enumerate() {
            check_file_name(&item.label, name)?;
            if item
                .files
                .iter()
                .flatten()
                .take(j)
                .any(|other| other == name)
            {
                return Err(TrashError::BadFileName {
                    label: item.label.clone(),
                    name: name.clone(),
                    problem: "is given twice",
                });
            }
        }
    }
    for item in items {
        let refused = match &item.files {
            None => guard.refusal(&item.path, Moving::Dir),
            Some(files) => files
                .iter()
                .find_map(|name| guard.refusal(&item.path.join(name), Moving::File)),
        };
        if let Some(refused) = refused {
            return Err(TrashError::ItemRefused {
                agent_id: agent_id.to_string(),
                label: item.label.clone(),
                refused: Box::new(refused),
            });
        }
    }
    check_overlap(agent_id, items)?;

    let dir = trash_root.join(entry);
    let mut manifest = open_entry(trash_root, &dir, agent_id, serial, items, kept)?;

    for index in 0..manifest.items.len() {
        let item = &manifest.items[index];
        if item.moved {
            continue;
        }
        if item.files.is_some() {
            move_files(&dir, &mut manifest, index, transfer)?;
            continue;
        }
        let label = item.label.clone();
        let original = item.original.clone();
        let stored = dir.join(&item.stored);
        if !move_one(&label, &original, &stored, transfer)? {
            continue;
        }
        failpoint::hit(&format!("trash.moved:{label}"));
        let item = &mut manifest.items[index];
        item.existed = true;
        item.moved = true;
        write_manifest(&dir, &manifest)?;
    }
    Ok(manifest)
}

/// Moves `original` to `stored` unless that already happened; `false` when neither exists
/// (never existed, or vanished since the manifest was written: nothing to move).
fn move_one(
    label: &str,
    original: &Path,
    stored: &Path,
    transfer: Transfer,
) -> Result<bool, TrashError> {
    match (exists(original)?, exists(stored)?) {
        (false, false) => return Ok(false),
        // Moved before a crash stopped the manifest from saying so.
        (false, true) => {}
        (true, false) => move_path(original, stored, transfer)?,
        (true, true) => settle_both(label, original, stored, transfer)?,
    }
    Ok(true)
}

/// Moves the files of an item that moves file by file into its stored directory, one by one,
/// rewriting the manifest after each.
fn move_files(
    dir: &Path,
    manifest: &mut Manifest,
    index: usize,
    transfer: Transfer,
) -> Result<(), TrashError> {
    let item = &manifest.items[index];
    let label = item.label.clone();
    let original = item.original.clone();
    let stored = dir.join(&item.stored);
    let count = item.files.as_ref().map_or(0, Vec::len);
    for file in 0..count {
        let Some(entry) = manifest.items[index]
            .files
            .as_ref()
            .and_then(|files| files.get(file))
        else {
            break;
        };
        if entry.moved {
            continue;
        }
        let name = entry.name.clone();
        let from = original.join(&name);
        let to = stored.join(&name);
        if is_dir(&from)? {
            // A directory where deepcli wrote a file is the user's now, like the rest of the
            // directory around it: it stays (the plan saw no file there either).
            continue;
        }
        if exists(&from)? && !exists(&stored)? {
            fs::create_dir(&stored).map_err(|e| io_err("create", &stored, e))?;
            sync_dir(dir)?;
            failpoint::hit(&format!("trash.stored:{label}"));
        }
        if !move_one(&label, &from, &to, transfer)? {
            continue;
        }
        failpoint::hit(&format!("trash.moved:{label}/{name}"));
        if let Some(entry) = manifest.items[index]
            .files
            .as_mut()
            .and_then(|files| files.get_mut(file))
        {
            entry.existed = true;
            entry.moved = true;
        }
        write_manifest(dir, manifest)?;
    }
    manifest.items[index].moved = true;
    write_manifest(dir, manifest)
}

/// Refuses items nested in one another: moving the outer one would take the inner one along,
/// and the manifest could not say where it went. A file of an item that moves file by file
/// counts as a path of its own; the directory around it does not move.
fn check_overlap(agent_id: &str, items: &[TrashItem]) -> Result<(), TrashError> {
    let moving: Vec<(&TrashItem, PathBuf)> = items
        .iter()
        .flat_map(|item| {
            let paths: Vec<PathBuf> = match &item.files {
                None => vec![lexical(&item.path)],
                Some(files) => files.iter().map(|f| lexical(&item.path.join(f))).collect(),
            };
            paths.into_iter().map(move |p| (item, p))
        })
        .collect();
    for (i, (a, pa)) in moving.iter().enumerate() {
        for (b, pb) in &moving[i + 1..] {
            if std::ptr::eq(*a, *b) {
                continue;
            }
            let pair = if pb.starts_with(pa) {
                Some(((a, pa), (b, pb)))
            } else if pa.starts_with(pb) {
                Some(((b, pb), (a, pa)))
            } else {
                None
            };
            if let Some(((outer, outer_path), (inner, inner_path))) = pair {
                return Err(TrashError::Overlap {
                    agent_id: agent_id.to_string(),
                    outer_label: outer.label.clone(),
                    outer: outer_path.clone(),
                    inner_label: inner.label.clone(),
                    inner: inner_path.clone(),
                });
            }
        }
    }
    Ok(())
}

/// The entry's manifest: the one on disk when resuming (it must describe the same items), or
/// a new one written to a new entry directory.
fn open_entry(
    trash_root: &Path,
    dir: &Path,
    agent_id: &str,
    serial: u64,
    items: &[TrashItem],
    kept: &[Kept],
) -> Result<Manifest, TrashError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    if exists(&manifest_path)? {
        let manifest = read_manifest(dir)?;
        type Described<'a> = (&'a str, &'a Path, Option<Vec<&'a str>>);
        let mut on_disk: Vec<Described<'_>> = manifest
            .items
            .iter()
            .map(|i| {
                let files = i
                    .files
                    .as_ref()
                    .map(|f| f.iter().map(|f| f.name.as_str()).collect());
                (i.label.as_str(), i.original.as_path(), files)
            })
            .collect();
        let mut asked: Vec<Described<'_>> = items
            .iter()
            .map(|i| {
                let files = i
                    .files
                    .as_ref()
                    .map(|f| f.iter().map(String::as_str).collect());
                (i.label.as_str(), i.path.as_path(), files)
            })
            .collect();
        on_disk.sort();
        asked.sort();
        if manifest.agent_id != agent_id || on_disk != asked {
            return Err(TrashError::ManifestMismatch {
                dir: dir.to_path_buf(),
                detail: format!(
                    "agent `{}` with {} item(s)",
                    manifest.agent_id,
                    manifest.items.len()
                ),
            });
        }
        for item in &manifest.items {
            check_label(&item.stored)?;
            for file in item.files.iter().flatten() {
                check_file_name(&item.label, &file.name)?;
            }
        }
        return Ok(manifest);
    }

    if exists(dir)? {
        // A crash between creating the directory and renaming the manifest into it leaves at
        // most the temporary manifest; anything else is not ours to write over.
        for found in read_dir_sorted(dir)? {
            if found.file_name().is_some_and(|n| n != MANIFEST_TMP) {
                return Err(TrashError::ForeignEntry {
                    dir: dir.to_path_buf(),
                    found,
                });
            }
        }
    } else {
        // Private: the entries hold transcripts and workspaces of deleted agents.
        crate::owner_only::create_dir_all(trash_root)
            .map_err(|e| io_err("create", trash_root, e))?;
        fs::create_dir(dir).map_err(|e| io_err("create", dir, e))?;
        sync_dir(trash_root)?;
        failpoint::hit(&format!("trash.entry:{agent_id}"));
    }

    let by_file = items.iter().any(|i| i.files.is_some());
    let mut manifest = Manifest {
        format_version: if by_file {
            FORMAT_VERSION
        } else {
            WHOLE_ITEMS_FORMAT
        },
        agent_id: agent_id.to_string(),
        created_at: Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        serial,
        items: Vec::with_capacity(items.len()),
        kept: kept
            .iter()
            .map(|k| KeptItem {
                label: k.label.clone(),
                path: k.path.clone(),
                reason: k.reason.clone(),
            })
            .collect(),
    };
    for item in items {
        let files = match &item.files {
            None => None,
            Some(names) => {
                let mut files = Vec::with_capacity(names.len());
                for name in names {
                    let path = item.path.join(name);
                    files.push(ManifestFile {
                        name: name.clone(),
                        moved: false,
                        existed: exists(&path)? && !is_dir(&path)?,
                    });
                }
                Some(files)
            }
        };
        manifest.items.push(ManifestItem {
            label: item.label.clone(),
            original: item.path.clone(),
            stored: item.label.clone(),
            moved: false,
            existed: exists(&item.path)?,
            files,
        });
    }
    write_manifest(dir, &manifest)?;
    Ok(manifest)
}

/// An original and its stored copy both exist: one of them is the leftover of an interrupted
/// move, and only a leftover whose every file also exists in the other is removed.
fn settle_both(
    label: &str,
    original: &Path,
    stored: &Path,
    transfer: Transfer,
) -> Result<(), TrashError> {
    let original_tree = walk(original)?;
    let stored_tree = walk(stored)?;
    if is_subset(&original_tree, &stored_tree) {
        // The copy was verified and renamed into place; removing the original was cut short.
        remove_tree(original)?;
        sync_parent(original)
    } else if is_subset(&stored_tree, &original_tree) {
        // A partial copy under the final name: a duplicate of part of the original.
        remove_tree(stored)?;
        sync_parent(stored)?;
        move_path(original, stored, transfer)
    } else {
        Err(TrashError::BothExist {
            label: label.to_string(),
            original: original.to_path_buf(),
            stored: stored.to_path_buf(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Manifest files

/// Reads and checks `<entry_dir>/manifest.json`.
pub fn read_manifest(entry_dir: &Path) -> Result<Manifest, TrashError> {
    let path = entry_dir.join(MANIFEST_FILE);
    let text = fs::read_to_string(&path).map_err(|e| io_err("read", &path, e))?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|source| TrashError::ManifestUnreadable {
            path: path.clone(),
            source,
        })?;
    if !(WHOLE_ITEMS_FORMAT..=FORMAT_VERSION).contains(&manifest.format_version) {
        return Err(TrashError::ManifestVersion {
            path,
            found: manifest.format_version,
        });
    }
    Ok(manifest)
}

/// Temp file in the same directory, fsync, rename, fsync the directory: a reader sees the old
/// manifest or the new one, never half of one.
fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), TrashError> {
    let tmp = dir.join(MANIFEST_TMP);
    let path = dir.join(MANIFEST_FILE);
    let mut text =
        serde_json::to_vec_pretty(manifest).map_err(|source| TrashError::ManifestWrite {
            path: path.clone(),
            source,
        })?;
    text.push(b'\n');
    let mut file = File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
    file.write_all(&text)
        .map_err(|e| io_err("write", &tmp, e))?;
    file.sync_all().map_err(|e| io_err("sync", &tmp, e))?;
    drop(file);
    // A crash point before an entry's first manifest is in place (the temporary one is).
    #[cfg(feature = "failpoints")]
    if !path.exists() {
        failpoint::hit(&format!("trash.manifest:{}", manifest.agent_id));
    }
    fs::rename(&tmp, &path).map_err(|source| TrashError::Move {
        from: tmp.clone(),
        to: path.clone(),
        source,
    })?;
    sync_dir(dir)
}

// ---------------------------------------------------------------------------------------------
// Listing

/// The readable entries, sorted by `created_at` then name. Directories without a readable
/// manifest are skipped; [`scan`] reports them. A missing trash root is an empty trash.
pub fn list(trash_root: &Path) -> Result<Vec<TrashEntry>, TrashError> {
    Ok(scan(trash_root)?.entries)
}

/// Every directory in the trash root: readable entries and unreadable ones. Names starting
/// with `.` and plain files are not entries and are ignored.
pub fn scan(trash_root: &Path) -> Result<Listing, TrashError> {
    let mut listing = Listing::default();
    if !exists(trash_root)? {
        return Ok(listing);
    }
    for dir in read_dir_sorted(trash_root)? {
        let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let is_dir = fs::symlink_metadata(&dir)
            .map(|m| m.is_dir())
            .map_err(|e| io_err("inspect", &dir, e))?;
        if !is_dir {
            continue;
        }
        match read_manifest(&dir) {
            Ok(manifest) => listing.entries.push(TrashEntry {
                name,
                dir,
                manifest,
            }),
            Err(error) => listing.unreadable.push(Unreadable { name, dir, error }),
        }
    }
    // RFC 3339 strings with different precision do not sort as text; compare the instants,
    // and put an unparseable time first so it is noticed.
    listing.entries.sort_by_cached_key(|e| {
        (
            e.manifest.created_at.parse::<Timestamp>().ok(),
            e.name.clone(),
        )
    });
    Ok(listing)
}

// ---------------------------------------------------------------------------------------------
// Restoring

/// Moves every stored item of `entry` back to its original path (creating parent
/// directories), then removes the entry directory. Refuses, moving nothing, when any original
/// path exists again. Returns the manifest as it was before the restore.
pub fn restore(trash_root: &Path, entry: &str, guard: &Guard) -> Result<Manifest, TrashError> {
    restore_with(trash_root, entry, guard, Transfer::Auto)
}

/// [`restore`] with an explicit [`Transfer`].
pub fn restore_with(
    trash_root: &Path,
    entry: &str,
    guard: &Guard,
    transfer: Transfer,
) -> Result<Manifest, TrashError> {
    let no_such = || TrashError::NoSuchEntry {
        name: entry.to_string(),
        trash_root: trash_root.to_path_buf(),
    };
    if check_entry_name(entry).is_err() {
        return Err(no_such());
    }
    let dir = trash_root.join(entry);
    let is_dir = match fs::symlink_metadata(&dir) {
        Ok(meta) => meta.is_dir(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(io_err("inspect", &dir, e)),
    };
    if !is_dir {
        return Err(no_such());
    }
    let before = read_manifest(&dir)?;
    let mut manifest = before.clone();

    // Decide everything before moving anything, so a refusal leaves the entry untouched. A
    // unit is an item that moved whole, or one file of an item that moved file by file.
    let mut to_restore = Vec::new();
    let mut conflicts = Vec::new();
    for (index, item) in manifest.items.iter().enumerate() {
        check_label(&item.stored)?;
        let units: Vec<(Option<usize>, bool, PathBuf, PathBuf)> = match &item.files {
            None => vec![(
                None,
                item.moved,
                dir.join(&item.stored),
                item.original.clone(),
            )],
            Some(files) => {
                let mut units = Vec::with_capacity(files.len());
                for (f, file) in files.iter().enumerate() {
                    check_file_name(&item.label, &file.name)?;
                    units.push((
                        Some(f),
                        file.moved,
                        dir.join(&item.stored).join(&file.name),
                        item.original.join(&file.name),
                    ));
                }
                units
            }
        };
        let moving = if item.files.is_some() {
            Moving::File
        } else {
            Moving::Dir
        };
        for (file, moved, stored, original) in units {
            let in_trash = exists(&stored)?;
            let in_place = exists(&original)?;
            if !in_trash {
                if moved && !in_place {
                    return Err(TrashError::StoredMissing {
                        entry: entry.to_string(),
                        label: item.label.clone(),
                        stored,
                        original,
                    });
                }
                // Never moved, or moved back before a crash stopped the manifest from saying so.
                continue;
            }
            if let Some(refused) = guard.refusal(&original, moving) {
                return Err(TrashError::RestoreRefused {
                    entry: entry.to_string(),
                    label: item.label.clone(),
                    refused: Box::new(refused),
                    manifest: dir.join(MANIFEST_FILE),
                });
            }
            if in_place {
                conflicts.push(original);
            } else {
                to_restore.push((index, file, stored, original));
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(TrashError::Conflicts {
            entry: entry.to_string(),
            paths: conflicts,
        });
    }

    for (index, file, stored, original) in to_restore {
        if let Some(parent) = original.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("create", parent, e))?;
        }
        move_path(&stored, &original, transfer)?;
        let item = &mut manifest.items[index];
        match file.and_then(|f| item.files.as_mut()?.get_mut(f)) {
            Some(file) => file.moved = false,
            None => item.moved = false,
        }
        if item
            .files
            .as_ref()
            .is_some_and(|files| files.iter().all(|f| !f.moved))
        {
            item.moved = false;
        }
        write_manifest(&dir, &manifest)?;
    }

    remove_entry_dir(trash_root, &dir, &manifest)?;
    Ok(before)
}

/// Removes a restored entry: staging leftovers, the emptied directories of items that moved
/// file by file, and the manifest, then the (now empty) directory. Anything else found there
/// is left alone and reported.
fn remove_entry_dir(trash_root: &Path, dir: &Path, manifest: &Manifest) -> Result<(), TrashError> {
    for item in &manifest.items {
        let stored = dir.join(&item.stored);
        let mut leftovers = vec![staging_path(&stored)];
        for file in item.files.iter().flatten() {
            leftovers.push(staging_path(&stored.join(&file.name)));
        }
        for staging in leftovers.into_iter().flatten() {
            if exists(&staging)? {
                remove_tree(&staging)?;
            }
        }
        if item.files.is_some() {
            match fs::remove_dir(&stored) {
                Ok(()) => {}
                // What is still in it is reported below.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
                    ) => {}
                Err(e) => return Err(io_err("remove", &stored, e)),
            }
        }
    }
    let leftover: Vec<PathBuf> = read_dir_sorted(dir)?
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n != MANIFEST_FILE && n != MANIFEST_TMP)
        })
        .collect();
    if !leftover.is_empty() {
        return Err(TrashError::EntryNotEmpty {
            dir: dir.to_path_buf(),
            leftover,
        });
    }
    let tmp = dir.join(MANIFEST_TMP);
    if exists(&tmp)? {
        fs::remove_file(&tmp).map_err(|e| io_err("remove", &tmp, e))?;
    }
    let manifest_path = dir.join(MANIFEST_FILE);
    fs::remove_file(&manifest_path).map_err(|e| io_err("remove", &manifest_path, e))?;
    fs::remove_dir(dir).map_err(|e| io_err("remove", dir, e))?;
    sync_dir(trash_root)
}

// ---------------------------------------------------------------------------------------------
// Moving one path

/// Moves `from` to `to`, which must not exist (its parent must). With [`Transfer::Auto`] this
/// is a `rename`, unless the two are on different filesystems; then, as always with
/// [`Transfer::ForceCopy`], the tree is copied to a staging name beside `to` (files with their
/// permissions, directories, symlinks as symlinks, never followed), synced, verified against
/// the original, renamed to `to`, and only then is the original removed.
pub fn move_path(from: &Path, to: &Path, transfer: Transfer) -> Result<(), TrashError> {
    if exists(to)? {
        return Err(TrashError::DestinationExists {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
    }
    if transfer == Transfer::Auto && !failpoint::other_filesystem(from) {
        match fs::rename(from, to) {
            Ok(()) => {
                sync_parent(to)?;
                return sync_parent(from);
            }
            Err(e) if e.kind() == io::ErrorKind::CrossesDevices => {}
            Err(source) => {
                return Err(TrashError::Move {
                    from: from.to_path_buf(),
                    to: to.to_path_buf(),
                    source,
                });
            }
        }
    }
    copy_then_remove(from, to)
}

fn copy_then_remove(from: &Path, to: &Path) -> Result<(), TrashError> {
    let staging = staging_path(to).ok_or_else(|| TrashError::Move {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            "the destination has no file name",
        ),
    })?;
    // A staging tree is only ever a duplicate of an original that still exists.
    if exists(&staging)? {
        remove_tree(&staging)?;
    }
    // Crash points (failpoints) inside the copy: after the first file of a directory, with the
    // copy verified under its staging name, after it is renamed into place, and after the
    // first child of a directory's original is removed.
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let whole_dir = is_dir(from)?;
    let mut first = whole_dir;
    let mut partial = || {
        if std::mem::take(&mut first) {
            failpoint::hit(&format!("trash.copy.partial:{name}"));
        }
    };
    let copied = copy_tree(from, &staging, &mut partial)
        .and_then(|()| sync_parent(&staging))
        .and_then(|()| verify_copy(from, &staging));
    if let Err(e) = copied {
        // Best effort: the original is intact, and a later call removes the staging tree
        // anyway, so a failure here must not hide the real error.
        let _ = remove_tree(&staging);
        return Err(e);
    }
    failpoint::hit(&format!("trash.copy.staged:{name}"));
    fs::rename(&staging, to).map_err(|source| TrashError::Move {
        from: staging.clone(),
        to: to.to_path_buf(),
        source,
    })?;
    sync_parent(to)?;
    failpoint::hit(&format!("trash.copy.renamed:{name}"));
    let mut first = whole_dir;
    remove_tree_then(from, &mut || {
        if std::mem::take(&mut first) {
            failpoint::hit(&format!("trash.copy.removing:{name}"));
        }
    })?;
    sync_parent(from)
}

/// `.<name>.deepcli-partial` beside `path`.
fn staging_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let mut staged = std::ffi::OsString::from(".");
    staged.push(name);
    staged.push(PARTIAL_SUFFIX);
    Some(path.with_file_name(staged))
}

/// Copies `from` to `to`, calling `copied` after each regular file.
fn copy_tree(from: &Path, to: &Path, copied: &mut dyn FnMut()) -> Result<(), TrashError> {
    let meta = fs::symlink_metadata(from).map_err(|e| io_err("inspect", from, e))?;
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = fs::read_link(from).map_err(|e| io_err("read the link", from, e))?;
        symlink(&target, to).map_err(|e| io_err("create the link", to, e))?;
    } else if kind.is_dir() {
        fs::create_dir(to).map_err(|e| io_err("create", to, e))?;
        for child in read_dir_sorted(from)? {
            if let Some(name) = child.file_name() {
                copy_tree(&child, &to.join(name), copied)?;
            }
        }
        // Permissions last: a read-only directory must still take its children first.
        fs::set_permissions(to, meta.permissions())
            .map_err(|e| io_err("set permissions on", to, e))?;
        sync_dir(to)?;
    } else if kind.is_file() {
        // `fs::copy` carries the permission bits over.
        fs::copy(from, to).map_err(|source| TrashError::Move {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            source,
        })?;
        File::open(to)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err("sync", to, e))?;
        copied();
    } else {
        return Err(TrashError::Unsupported {
            path: from.to_path_buf(),
            kind: special_kind(&kind),
        });
    }
    Ok(())
}

fn special_kind(kind: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "named pipe"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// Removes a file, a symlink (never what it points to) or a directory tree. Directories are
/// made writable first, since a copied tree keeps read-only directories read-only.
fn remove_tree(path: &Path) -> Result<(), TrashError> {
    remove_tree_then(path, &mut || {})
}

/// [`remove_tree`], calling `removed` after each child of a directory `path` is gone.
fn remove_tree_then(path: &Path, removed: &mut dyn FnMut()) -> Result<(), TrashError> {
    let meta = fs::symlink_metadata(path).map_err(|e| io_err("inspect", path, e))?;
    if !meta.is_dir() {
        return fs::remove_file(path).map_err(|e| io_err("remove", path, e));
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o700))
            .map_err(|e| io_err("set permissions on", path, e))?;
    }
    for child in read_dir_sorted(path)? {
        remove_tree(&child)?;
        removed();
    }
    fs::remove_dir(path).map_err(|e| io_err("remove", path, e))
}

// ---------------------------------------------------------------------------------------------
// Verifying

/// One node of a tree, as far as a copy must preserve it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File { size: u64, hash: String },
    Symlink { target: PathBuf },
    Special,
}

type Tree = BTreeMap<PathBuf, Node>;

/// Checks that `copy` holds the same tree as `original`: the same relative paths, kinds,
/// sizes, content hashes and symlink targets.
pub fn verify_copy(original: &Path, copy: &Path) -> Result<(), TrashError> {
    let a = walk(original)?;
    let b = walk(copy)?;
    match first_difference(&a, &b) {
        None => Ok(()),
        Some(detail) => Err(TrashError::VerifyFailed {
            original: original.to_path_buf(),
            copy: copy.to_path_buf(),
            detail,
        }),
    }
}

fn first_difference(original: &Tree, copy: &Tree) -> Option<String> {
    let show = |rel: &Path| {
        if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.display().to_string()
        }
    };
    for (rel, node) in original {
        match copy.get(rel) {
            None => return Some(format!("`{}` is missing from the copy", show(rel))),
            Some(other) if other != node => {
                return Some(format!(
                    "`{}` differs ({})",
                    show(rel),
                    describe(node, other)
                ));
            }
            Some(_) => {}
        }
    }
    copy.keys()
        .find(|rel| !original.contains_key(*rel))
        .map(|rel| format!("`{}` is in the copy only", show(rel)))
}

fn describe(a: &Node, b: &Node) -> &'static str {
    match (a, b) {
        (Node::File { size: x, .. }, Node::File { size: y, .. }) if x != y => "size",
        (Node::File { .. }, Node::File { .. }) => "content",
        (Node::Symlink { .. }, Node::Symlink { .. }) => "link target",
        _ => "kind",
    }
}

/// Whether every node of `small` is in `big`, identical.
fn is_subset(small: &Tree, big: &Tree) -> bool {
    small.iter().all(|(rel, node)| big.get(rel) == Some(node))
}

fn walk(root: &Path) -> Result<Tree, TrashError> {
    let mut tree = Tree::new();
    walk_into(root, PathBuf::new(), &mut tree)?;
    Ok(tree)
}

fn walk_into(path: &Path, rel: PathBuf, tree: &mut Tree) -> Result<(), TrashError> {
    let meta = fs::symlink_metadata(path).map_err(|e| io_err("inspect", path, e))?;
    let kind = meta.file_type();
    let node = if kind.is_symlink() {
        Node::Symlink {
            target: fs::read_link(path).map_err(|e| io_err("read the link", path, e))?,
        }
    } else if kind.is_dir() {
        for child in read_dir_sorted(path)? {
            if let Some(name) = child.file_name() {
                walk_into(&child, rel.join(name), tree)?;
            }
        }
        Node::Dir
    } else if kind.is_file() {
        Node::File {
            size: meta.len(),
            hash: hash_file(path)?,
        }
    } else {
        Node::Special
    };
    tree.insert(rel, node);
    Ok(())
}

/// Streams a file through [`crate::hash::Hasher`] in fixed-size chunks, so equal contents
/// give equal hashes however the reads return.
fn hash_file(path: &Path) -> Result<String, TrashError> {
    let mut file = File::open(path).map_err(|e| io_err("read", path, e))?;
    let mut hasher = crate::hash::Hasher::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            match file.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("read", path, e)),
            }
        }
        if filled == 0 {
            break;
        }
        hasher.part(&buf[..filled]);
        if filled < buf.len() {
            break;
        }
    }
    Ok(hasher.finish())
}

// ---------------------------------------------------------------------------------------------
// Small filesystem helpers

/// Whether anything (a symlink included, dangling or not) is at `path`. A parent that is not a
/// directory means nothing is there; any other error is reported rather than guessed at.
fn exists(path: &Path) -> Result<bool, TrashError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(io_err("inspect", path, e)),
    }
}

/// Whether `path` is a directory itself (a symlink to one is not).
fn is_dir(path: &Path) -> Result<bool, TrashError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(meta.is_dir()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(io_err("inspect", path, e)),
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, TrashError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err("list", dir, e))? {
        out.push(entry.map_err(|e| io_err("list", dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

/// Makes a directory's entries (a rename into or out of it) durable.
fn sync_dir(dir: &Path) -> Result<(), TrashError> {
    crate::durable::sync_dir(dir).map_err(|e| io_err("sync", dir, e))
}

fn sync_parent(path: &Path) -> Result<(), TrashError> {
    match path.parent() {
        Some(_) => sync_dir(crate::durable::dir_of(path)),
        None => Ok(()),
    }
}
