//! Artifacts (tasks.md): files handed in from one agent's workspace, copied into the task's
//! store under their SHA-256, and placed read-only (0444, a copy, never a link) in another
//! agent's workspace at `.deepcli/tasks/<task>/<name>`. The files an A2A peer sends are
//! written the same way, at `.deepcli/a2a/<task>/<name>` (a2a.md, "Files").
//!
//! Both workspaces are their agents' to write, and deepcli reads and writes there with its
//! own rights, which reach its secrets. So no path is followed through a symbolic link: each
//! directory is opened with `O_NOFOLLOW` beneath the one before, from the workspace down, and
//! the file last. A link planted where a name is read or written is refused, never followed;
//! only a regular file is read, and no more than the limit.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, fchmod, mkdirat};
use sha2::{Digest, Sha256};

/// The largest file handed in by default (tasks.md): 50 MiB.
pub(crate) const DEFAULT_MAX_BYTES: u64 = 50 * 1024 * 1024;

/// The most bytes a task's (or a run's) artifacts total by default (tasks.md): 500 MiB.
pub(crate) const DEFAULT_QUOTA_BYTES: u64 = 500 * 1024 * 1024;

/// The longest artifact name, in bytes, and the most parts it has.
const MAX_NAME_BYTES: usize = 512;
const MAX_NAME_PARTS: usize = 16;

/// Where a workspace keeps what deepcli places in it: `.deepcli/tasks/<task>/`.
const PLACED: [&str; 2] = [".deepcli", "tasks"];

/// An artifact's name: a relative path of plain parts (no `.`, `..`, empty part or control
/// character), the same in the store's rows and in the workspace it is placed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArtifactName(String);

impl ArtifactName {
    /// `text` as a name: relative to `workspace`, or absolute and inside it.
    pub(crate) fn parse(text: &str, workspace: &Path) -> Result<ArtifactName, String> {
        let path = Path::new(text);
        let relative = if path.is_absolute() {
            path.strip_prefix(workspace).map_err(|_| {
                format!(
                    "`{text}` is not in your workspace `{}`: hand in a file of your workspace, by a path relative to it",
                    workspace.display()
                )
            })?
        } else {
            path
        };
        let mut parts = Vec::new();
        for part in relative.components() {
            match part {
                Component::Normal(p) if !p.as_bytes().iter().any(u8::is_ascii_control) => {
                    parts.push(p.to_string_lossy().into_owned());
                }
                Component::CurDir => {}
                _ => {
                    return Err(format!(
                        "`{text}` is not a plain path inside your workspace (no `..`, no control characters)"
                    ));
                }
            }
        }
        let name = parts.join("/");
        if parts.is_empty() || parts.len() > MAX_NAME_PARTS || name.len() > MAX_NAME_BYTES {
            return Err(format!(
                "`{text}` is not a file path of 1 to {MAX_NAME_PARTS} parts and at most {MAX_NAME_BYTES} bytes"
            ));
        }
        if parts[0] == PLACED[0] {
            return Err(format!(
                "`{text}` is under `.deepcli/`, where deepcli places what others hand you: hand in your own files"
            ));
        }
        Ok(ArtifactName(name))
    }

    /// A name read back from the state (written through [`ArtifactName::parse`]).
    pub(crate) fn stored(name: String) -> ArtifactName {
        ArtifactName(name)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    fn parts(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

/// A file in the store: its content hash (lower-case hex) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub sha256: String,
    pub size: u64,
}

/// Why a file was not handed in or placed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArtifactError {
    /// The agent's doing, said so that it can fix it.
    #[error("{0}")]
    Refused(String),
    /// deepcli's side (the store, a disk error).
    #[error("{0}")]
    Io(String),
}

fn io(what: &str, e: impl std::fmt::Display) -> ArtifactError {
    ArtifactError::Io(format!("{what}: {e}"))
}

/// Opens directory `root` (the operator's configured path: followed as given).
fn open_root(root: &Path) -> Result<OwnedFd, ArtifactError> {
    openat(
        nix::fcntl::AT_FDCWD,
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(&format!("cannot open `{}`", root.display()), e))
}

/// Opens directory `part` beneath `dir` without following a link; made first when `create`.
fn open_beneath(dir: &OwnedFd, part: &str, create: bool) -> Result<OwnedFd, Errno> {
    if create {
        match mkdirat(dir, part, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e),
        }
    }
    openat(
        dir,
        part,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Says why `name` could not be opened where `errno` came back.
fn refused(name: &str, errno: Errno) -> ArtifactError {
    ArtifactError::Refused(match errno {
        Errno::ENOENT => format!("no file `{name}` in your workspace"),
        Errno::ELOOP | Errno::ENOTDIR => format!(
            "`{name}` passes through a symbolic link or a non-directory: deepcli follows no link in a workspace; hand in the file itself"
        ),
        other => format!("cannot open `{name}`: {}", other.desc()),
    })
}

/// Hashes file `name` of `workspace` into `store` (a directory of deepcli's own), named by
/// its SHA-256, mode 0444. Refused when it is not a regular file reached without a link, or
/// larger than `limit`. A file already stored with the same content is kept as it is.
pub(crate) fn hand_in(
    workspace: &Path,
    name: &ArtifactName,
    store: &Path,
    limit: u64,
) -> Result<Stored, ArtifactError> {
    let mut dir = open_root(workspace)?;
    let parts: Vec<&str> = name.parts().collect();
    let (leaf, dirs) = parts.split_last().expect("a name has a part");
    for part in dirs {
        dir = open_beneath(&dir, part, false).map_err(|e| refused(name.as_str(), e))?;
    }
    let fd = openat(
        &dir,
        *leaf,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| refused(name.as_str(), e))?;
    let mut file = File::from(fd);
    let meta = file.metadata().map_err(|e| io("cannot read it", e))?;
    if !meta.is_file() {
        return Err(ArtifactError::Refused(format!(
            "`{name}` is not a regular file",
            name = name.as_str()
        )));
    }
    if meta.len() > limit {
        return Err(too_large(name, meta.len(), limit));
    }
    store_from(&mut file, name, store, limit)
}

/// Stores `bytes` (a file a remote A2A agent sent, named `name`) into `store` as
/// [`hand_in`] does: by its SHA-256, mode 0444, at most `limit` bytes.
pub(crate) fn store_bytes(
    bytes: &[u8],
    name: &ArtifactName,
    store: &Path,
    limit: u64,
) -> Result<Stored, ArtifactError> {
    if bytes.len() as u64 > limit {
        return Err(too_large(name, bytes.len() as u64, limit));
    }
    store_from(&mut std::io::Cursor::new(bytes), name, store, limit)
}

/// Copies `source` into `store` under its SHA-256 (through a temporary file, mode 0444, made
/// durable), held to `limit` bytes.
fn store_from(
    file: &mut impl Read,
    name: &ArtifactName,
    store: &Path,
    limit: u64,
) -> Result<Stored, ArtifactError> {
    crate::owner_only::create_dir_all(store).map_err(|e| io("cannot make the task's store", e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".deepcli-")
        .tempfile_in(store)
        .map_err(|e| io("cannot write to the task's store", e))?;
    // A file that grows while it is read is held to the same limit.
    let (sha256, size) = match copy_hashed(file, &mut tmp, limit) {
        Ok(Copied::Whole { sha256, size }) => (sha256, size),
        Ok(Copied::Over(size)) => return Err(too_large(name, size, limit)),
        Err(CopyError::Read(e)) => return Err(io(&format!("cannot read `{}`", name.as_str()), e)),
        Err(CopyError::Write(e)) => return Err(io("cannot write to the task's store", e)),
    };
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))
        .map_err(|e| io("cannot write to the task's store", e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| io("cannot write to the task's store", e))?;
    match tmp.persist_noclobber(store.join(&sha256)) {
        Ok(_) => {}
        // The same content, handed in before: one copy serves both. Made young again, so that
        // a sweep of the store leaves it while its new row is written (state::artifact_files).
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = File::open(store.join(&sha256))
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        }
        Err(e) => return Err(io("cannot write to the task's store", e.error)),
    }
    crate::durable::sync_dir(store).map_err(|e| io("cannot write to the task's store", e))?;
    Ok(Stored { sha256, size })
}

/// What [`copy_hashed`] copied.
pub(crate) enum Copied {
    /// All of it: its SHA-256 (lower-case hex) and size.
    Whole { sha256: String, size: u64 },
    /// More than the limit came (this many bytes so far): stopped there.
    Over(u64),
}

/// Which side of a copy failed.
pub(crate) enum CopyError {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Copies `from` to `to`, hashing what passes, and stops once more than `limit` bytes came.
pub(crate) fn copy_hashed(
    from: &mut impl Read,
    to: &mut impl Write,
    limit: u64,
) -> Result<Copied, CopyError> {
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        size += n as u64;
        if size > limit {
            return Ok(Copied::Over(size));
        }
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(CopyError::Write)?;
    }
    Ok(Copied::Whole {
        sha256: hex::encode(hasher.finalize()),
        size,
    })
}

fn too_large(name: &ArtifactName, size: u64, limit: u64) -> ArtifactError {
    ArtifactError::Refused(format!(
        "`{}` has {size} bytes or more; the limit is {limit} bytes (artifactMaxBytes)",
        name.as_str()
    ))
}

/// Where [`place`] puts artifact `name` of task `task` in a workspace.
pub(crate) fn placed_path(workspace: &Path, task: &str, name: &ArtifactName) -> PathBuf {
    let mut path = workspace.to_path_buf();
    path.extend(PLACED);
    path.push(task);
    path.push(name.as_str());
    path
}

/// Copies stored file `stored` of `store` into `workspace` as `.deepcli/tasks/<task>/<name>`,
/// mode 0444, replacing what was there (a link there is replaced, not followed). Returns the
/// path it is at.
pub(crate) fn place(
    store: &Path,
    stored: &Stored,
    workspace: &Path,
    task: &str,
    name: &ArtifactName,
) -> Result<PathBuf, ArtifactError> {
    let mut source =
        File::open(store.join(&stored.sha256)).map_err(|e| io("the stored artifact is gone", e))?;
    let placed = placed_path(workspace, task, name);
    let dirs: Vec<&str> = PLACED.iter().copied().chain([task]).collect();
    write_beneath(workspace, &dirs, name, &mut source, &placed)?;
    Ok(placed)
}

/// Where a workspace keeps the files A2A peers sent: `.deepcli/a2a/<task>/`.
const RECEIVED: [&str; 2] = [".deepcli", "a2a"];

/// A file name a peer gave, made safe to write: its last path part only (`../../x` and
/// `C:\\x` give `x`), no control characters, `.` or `..`, at most 128 bytes; `fallback` when
/// nothing is left.
pub(crate) fn received_name(given: Option<&str>, fallback: &str) -> ArtifactName {
    let last = given.unwrap_or("").rsplit(['/', '\\']).next().unwrap_or("");
    let mut clean: String = last.chars().filter(|c| !c.is_control()).collect();
    while clean.len() > 128 {
        clean.pop();
    }
    let clean = clean.trim().trim_start_matches('.').to_string();
    ArtifactName(if clean.is_empty() {
        fallback.to_string()
    } else {
        clean
    })
}

/// The task and name of a file [`receive`] wrote, from its path relative to the workspace:
/// `None` for any other path.
pub(crate) fn received_at(relative: &str) -> Option<(&str, ArtifactName)> {
    let parts: Vec<&str> = relative.split('/').collect();
    let [a, b, task, name] = parts[..] else {
        return None;
    };
    let plain = |p: &str| !p.is_empty() && p != "." && p != "..";
    ([a, b] == RECEIVED && plain(task) && plain(name))
        .then(|| (task, received_name(Some(name), "file")))
}

/// Writes `bytes` a peer sent into `workspace` as `.deepcli/a2a/<task>/<name>`, mode 0444
/// (a file there before is replaced, a link there is replaced, not followed; no directory on
/// the way is followed through a link). Returns the path it is at, relative to the workspace.
pub(crate) fn receive(
    workspace: &Path,
    task: &str,
    name: &ArtifactName,
    bytes: &[u8],
) -> Result<PathBuf, ArtifactError> {
    let mut relative = PathBuf::new();
    relative.extend(RECEIVED);
    relative.push(task);
    relative.push(name.as_str());
    let dirs: Vec<&str> = RECEIVED.iter().copied().chain([task]).collect();
    write_beneath(
        workspace,
        &dirs,
        name,
        &mut std::io::Cursor::new(bytes),
        &workspace.join(&relative),
    )?;
    Ok(relative)
}

/// The bytes of a file [`receive`] wrote, `relative` to `workspace` — if they are still what
/// was written: reached without a link, a regular file of at most `limit` bytes whose SHA-256
/// is `sha256`. `None` otherwise (the agent may change its workspace: what it put there is not
/// the peer's file, and a link it planted is never followed by deepcli).
pub(crate) fn read_received(
    workspace: &Path,
    relative: &str,
    sha256: &str,
    limit: u64,
) -> Option<Vec<u8>> {
    let parts: Vec<&str> = relative.split('/').collect();
    let (leaf, dirs) = parts.split_last()?;
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return None;
    }
    let mut dir = open_root(workspace).ok()?;
    for part in dirs {
        dir = open_beneath(&dir, part, false).ok()?;
    }
    let fd = openat(
        &dir,
        *leaf,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = File::from(fd);
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > limit {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).ok()?;
    (hex::encode(Sha256::digest(&bytes)) == sha256).then_some(bytes)
}

/// Writes `source` to `<workspace>/<dirs…>/<name>`, mode 0444, each directory opened beneath
/// the one before without following a link (made when missing), through a temporary file
/// renamed over the name. `shown`: the path as errors name it.
fn write_beneath(
    workspace: &Path,
    dirs: &[&str],
    name: &ArtifactName,
    source: &mut impl Read,
    shown: &Path,
) -> Result<(), ArtifactError> {
    let mut dir = open_root(workspace)?;
    let parts: Vec<&str> = name.parts().collect();
    let (leaf, name_dirs) = parts.split_last().expect("a name has a part");
    let shown = shown.display().to_string();
    for part in dirs.iter().chain(name_dirs.iter()) {
        dir = open_beneath(&dir, part, true).map_err(|e| {
            ArtifactError::Refused(format!(
                "cannot place `{shown}`: `{part}` on its way is a symbolic link or not a directory ({}); remove it",
                e.desc()
            ))
        })?;
    }
    let tmp = format!(".deepcli-{}", uuid::Uuid::new_v4().simple());
    let fd = openat(
        &dir,
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| io(&format!("cannot write `{shown}`"), e))?;
    let written = (|| {
        let mut out = File::from(fd);
        std::io::copy(source, &mut out).map_err(|e| io(&format!("cannot write `{shown}`"), e))?;
        fchmod(&out, Mode::from_bits_truncate(0o444))
            .map_err(|e| io(&format!("cannot write `{shown}`"), e))?;
        renameat(&dir, tmp.as_str(), &dir, OsStr::new(leaf))
            .map_err(|e| io(&format!("cannot write `{shown}`"), e))
    })();
    if written.is_err() {
        let _ = nix::unistd::unlinkat(&dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// The media type of artifact `name` as an A2A peer is told it: by its extension for the
/// common kinds, else `text/plain` when its content is UTF-8, else
/// `application/octet-stream`.
pub(crate) fn media_type_of(name: &ArtifactName, store: &Path, stored: &Stored) -> &'static str {
    let ext = name
        .as_str()
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let known = match ext.as_str() {
        "txt" | "log" | "text" => Some("text/plain"),
        "md" | "markdown" => Some("text/markdown"),
        "json" => Some("application/json"),
        "csv" => Some("text/csv"),
        "html" | "htm" => Some("text/html"),
        "diff" | "patch" => Some("text/x-diff"),
        "pdf" => Some("application/pdf"),
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "svg" => Some("image/svg+xml"),
        "zip" => Some("application/zip"),
        "gz" | "tgz" => Some("application/gzip"),
        "tar" => Some("application/x-tar"),
        _ => None,
    };
    if let Some(known) = known {
        return known;
    }
    // Sniffed from the first 8 KiB: UTF-8 there (a character cut at the end aside) is text.
    let mut head = vec![0u8; 8192];
    let n = File::open(store.join(&stored.sha256))
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head.truncate(n);
    let text = match std::str::from_utf8(&head) {
        Ok(_) => true,
        // Only the end cut a character short: the 8 KiB read stopped inside it.
        Err(e) => e.error_len().is_none(),
    };
    if text && !head.contains(&0) {
        "text/plain"
    } else {
        "application/octet-stream"
    }
}

/// The bytes of stored file `stored` when it has at most `limit` of them.
pub(crate) fn bytes_of(store: &Path, stored: &Stored, limit: u64) -> Option<Vec<u8>> {
    if stored.size > limit {
        return None;
    }
    std::fs::read(store.join(&stored.sha256)).ok()
}

/// The text of stored file `stored` when it is UTF-8 of at most `limit` bytes (for an agent
/// that reads no files, `artifacts_get` gives it inline).
pub(crate) fn text_of(store: &Path, stored: &Stored, limit: u64) -> Option<String> {
    if stored.size > limit {
        return None;
    }
    let bytes = std::fs::read(store.join(&stored.sha256)).ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_received_files_task_and_name_come_from_its_path_and_nothing_else_does() {
        let (task, name) = received_at(".deepcli/a2a/t-1/data.bin").unwrap();
        assert_eq!((task, name.as_str()), ("t-1", "data.bin"));
        for other in [
            ".deepcli/a2a/t-1",
            ".deepcli/a2a/../data.bin",
            ".deepcli/a2a/t-1/..",
            ".deepcli/other/t-1/data.bin",
            "AGENTS.md",
            ".deepcli/a2a/t-1/x/data.bin",
        ] {
            assert!(received_at(other).is_none(), "{other}");
        }
    }

    fn name(text: &str) -> ArtifactName {
        ArtifactName::parse(text, Path::new("/ws")).unwrap()
    }

    #[test]
    fn a_name_is_a_plain_path_inside_the_workspace() {
        assert_eq!(name("out/test.log").as_str(), "out/test.log");
        assert_eq!(name("./a.txt").as_str(), "a.txt");
        assert_eq!(name("/ws/a/b.txt").as_str(), "a/b.txt");
        for bad in [
            "",
            "../x",
            "a/../../x",
            "/etc/passwd",
            "/wsx/a",
            "a\nb",
            ".deepcli/tasks/t/x",
        ] {
            assert!(
                ArtifactName::parse(bad, Path::new("/ws")).is_err(),
                "{bad:?} was taken"
            );
        }
    }

    #[test]
    fn a_file_is_handed_in_by_its_hash_and_placed_read_only() {
        let b = tempfile::tempdir().unwrap();
        let a = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        std::fs::create_dir(b.path().join("out")).unwrap();
        std::fs::write(b.path().join("out/test.log"), "2 passed").unwrap();

        let n = name("out/test.log");
        let stored = hand_in(b.path(), &n, store.path(), 100).unwrap();
        assert_eq!(stored.size, 8);
        assert_eq!(stored.sha256, hex::encode(Sha256::digest(b"2 passed")));
        let kept = store.path().join(&stored.sha256);
        assert_eq!(std::fs::read(&kept).unwrap(), b"2 passed");
        assert_eq!(kept.metadata().unwrap().permissions().mode() & 0o777, 0o444);

        let at = place(store.path(), &stored, a.path(), "task-1", &n).unwrap();
        assert_eq!(at, a.path().join(".deepcli/tasks/task-1/out/test.log"));
        assert_eq!(std::fs::read(&at).unwrap(), b"2 passed");
        assert_eq!(at.metadata().unwrap().permissions().mode() & 0o777, 0o444);
        // A copy, not a link: the assignee's file changing changes nothing placed.
        std::fs::write(b.path().join("out/test.log"), "1 failed").unwrap();
        assert_eq!(std::fs::read(&at).unwrap(), b"2 passed");
        // Placed again (a second hand-in), the read-only file is replaced.
        place(store.path(), &stored, a.path(), "task-1", &n).unwrap();
    }

    #[test]
    fn no_link_is_followed_and_the_limit_holds() {
        let b = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("token"), "hunter2").unwrap();
        std::os::unix::fs::symlink(secret.path().join("token"), b.path().join("leak")).unwrap();
        std::os::unix::fs::symlink(secret.path(), b.path().join("dir")).unwrap();
        for leak in ["leak", "dir/token"] {
            let e = hand_in(b.path(), &name(leak), store.path(), 100).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{leak}: {e}");
        }
        std::fs::create_dir(b.path().join("sub")).unwrap();
        let e = hand_in(b.path(), &name("sub"), store.path(), 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::write(b.path().join("big"), vec![b'x'; 101]).unwrap();
        let e = hand_in(b.path(), &name("big"), store.path(), 100).unwrap_err();
        assert!(e.to_string().contains("the limit is 100 bytes"), "{e}");
        let e = hand_in(b.path(), &name("nope"), store.path(), 100).unwrap_err();
        assert!(e.to_string().contains("no file `nope`"), "{e}");
        // Nothing reached the store.
        let kept: Vec<_> = std::fs::read_dir(store.path()).unwrap().collect();
        assert!(kept.is_empty(), "{kept:?}");
    }

    #[test]
    fn a_peers_file_name_is_its_last_part_and_lands_inside_the_workspace() {
        for (given, want) in [
            (Some("report.pdf"), "report.pdf"),
            (Some("../../etc/passwd"), "passwd"),
            (Some("..\\..\\boot.ini"), "boot.ini"),
            (Some("/abs/x.txt"), "x.txt"),
            (Some(".."), "file-0"),
            (Some("a/.."), "file-0"),
            (Some("..hidden"), "hidden"),
            (Some("a\nb"), "ab"),
            (Some(""), "file-0"),
            (None, "file-0"),
        ] {
            assert_eq!(received_name(given, "file-0").as_str(), want, "{given:?}");
        }
        let ws = tempfile::tempdir().unwrap();
        let name = received_name(Some("../../escape.txt"), "file-0");
        let at = receive(ws.path(), "t-1", &name, b"hi").unwrap();
        assert_eq!(at, Path::new(".deepcli/a2a/t-1/escape.txt"));
        assert_eq!(std::fs::read(ws.path().join(&at)).unwrap(), b"hi");
        let mode = ws.path().join(&at).metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o444);
        // A link the agent planted on the way is not followed.
        let ws = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), ws.path().join(".deepcli")).unwrap();
        let e = receive(ws.path(), "t-1", &name, b"hi").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }

    /// A received file is read back only as it was written: not changed, not through a link.
    #[test]
    fn a_received_file_is_read_back_only_as_written() {
        let ws = tempfile::tempdir().unwrap();
        let at = receive(ws.path(), "t-1", &name("r.txt"), b"the peer's").unwrap();
        let at = at.to_str().unwrap();
        let sha = hex::encode(Sha256::digest(b"the peer's"));
        let read = |limit| read_received(ws.path(), at, &sha, limit);
        assert_eq!(read(100).as_deref(), Some(&b"the peer's"[..]));
        assert_eq!(read(3), None, "over the limit");
        assert_eq!(read_received(ws.path(), "../r.txt", &sha, 100), None);
        // The agent replaced it: not the peer's any more.
        let path = ws.path().join(at);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "the agent's").unwrap();
        assert_eq!(read(100), None);
        // A link to a file of deepcli's with the same bytes: never followed.
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("s"), "the peer's").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(secret.path().join("s"), &path).unwrap();
        assert_eq!(read(100), None);
    }

    #[test]
    fn a_link_planted_where_a_file_is_placed_is_not_followed() {
        let store = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(b.path().join("r.txt"), "result").unwrap();
        let n = name("r.txt");
        let stored = hand_in(b.path(), &n, store.path(), 100).unwrap();

        // The owner links `.deepcli` to a directory of deepcli's: refused, nothing written.
        let a = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), a.path().join(".deepcli")).unwrap();
        let e = place(store.path(), &stored, a.path(), "task-1", &n).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

        // A link at the file's own name is replaced, its target untouched.
        let a = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("config");
        std::fs::write(&target, "mine").unwrap();
        std::fs::create_dir_all(a.path().join(".deepcli/tasks/task-1")).unwrap();
        std::os::unix::fs::symlink(&target, a.path().join(".deepcli/tasks/task-1/r.txt")).unwrap();
        let at = place(store.path(), &stored, a.path(), "task-1", &n).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"mine");
        assert!(!at.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&at).unwrap(), b"result");
    }
}
