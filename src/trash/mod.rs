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
//!
//! The files: `guard` (the path-safety policy, also used by `plan`, `apply` and `manage`),
//! `manifest` (the entry's `manifest.json`), `move_in` and `restore` (an entry filled and
//! emptied), `transfer` (one path moved: a rename, or copy, verify and remove). This file
//! holds the types callers pass in and get back, the errors, the entry names and the listing.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use jiff::Timestamp;

mod guard;
mod manifest;
mod move_in;
mod restore;
mod transfer;

pub use guard::{Guard, PathRefusal, RefusedPath, system_tree};
pub use manifest::{
    FORMAT_VERSION, KeptItem, MANIFEST_FILE, Manifest, ManifestFile, ManifestItem,
    put_back_manifest, read_manifest,
};
pub use move_in::{move_to_trash, move_to_trash_with};
pub use restore::{restore, restore_with};
pub use transfer::{Transfer, move_path, verify_copy};

use transfer::{exists, read_dir_sorted};

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

pub(super) fn io_err(action: &'static str, path: &Path, source: io::Error) -> TrashError {
    TrashError::Io {
        action,
        path: path.to_path_buf(),
        source,
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

pub(super) fn check_entry_name(name: &str) -> Result<(), TrashError> {
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
pub(super) fn check_label(label: &str) -> Result<(), TrashError> {
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
pub(super) fn check_file_name(label: &str, name: &str) -> Result<(), TrashError> {
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
