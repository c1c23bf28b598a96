//! One path moved: a `rename`, or, across filesystems, a copy under a staging name, synced,
//! verified against the original (tree, sizes, content hashes, link targets), renamed into
//! place, and only then the original removed. Also the small filesystem helpers the rest of
//! the trash shares, each turning an `io::Error` into a [`TrashError`] naming the path.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::{TrashError, io_err};
use crate::failpoint;

/// Appended to a copy's staging name: `.<name>.deepcli-partial`.
const PARTIAL_SUFFIX: &str = ".deepcli-partial";

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

/// An original and its stored copy both exist: one of them is the leftover of an interrupted
/// move, and only a leftover whose every file also exists in the other is removed.
pub(super) fn settle_both(
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

/// `.<name>.deepcli-partial` beside `path`.
pub(super) fn staging_path(path: &Path) -> Option<PathBuf> {
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
pub(super) fn remove_tree(path: &Path) -> Result<(), TrashError> {
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
pub(super) fn exists(path: &Path) -> Result<bool, TrashError> {
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
pub(super) fn is_dir(path: &Path) -> Result<bool, TrashError> {
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

pub(super) fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, TrashError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err("list", dir, e))? {
        out.push(entry.map_err(|e| io_err("list", dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

/// Makes a directory's entries (a rename into or out of it) durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), TrashError> {
    crate::durable::sync_dir(dir).map_err(|e| io_err("sync", dir, e))
}

pub(super) fn sync_parent(path: &Path) -> Result<(), TrashError> {
    match path.parent() {
        Some(_) => sync_dir(crate::durable::dir_of(path)),
        None => Ok(()),
    }
}
