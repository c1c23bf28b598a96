//! Writing files so that a crash leaves either the old content or the new, never a torn file,
//! and making what was written durable. A leaf: it knows files and modes, nothing of deepcli.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same directory, then renamed
/// (replacing) or hard-linked (never replacing: an existing file wins). A reader never sees a
/// torn file. Durability is the caller's: [`sync_fs`] once after a batch of files costs one
/// flush instead of one per file. The file gets the mode [`shared_mode`] gives.
pub(crate) fn write_file(path: &Path, bytes: &[u8], replace: bool) -> std::io::Result<()> {
    let tmp = temp_beside(path, bytes, shared_mode(path))?;
    if replace {
        tmp.persist(path).map_err(|e| e.error)?;
    } else {
        match tmp.persist_noclobber(path) {
            Ok(_) => {}
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.error),
        }
    }
    Ok(())
}

/// A temporary file in `path`'s directory holding `bytes`, with `mode` set before anything
/// can see it under its final name.
fn temp_beside(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<tempfile::NamedTempFile> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".deepcli-")
        .tempfile_in(dir_of(path))
        .map_err(without_temp_name)?;
    tmp.write_all(bytes)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(tmp)
}

/// Replaces `path` atomically and durably: the content is synced before the rename, and the
/// rename after it. The file keeps the mode it had; a new one gets the mode a plain create
/// would (0666 less the umask), as an operator's config file or a plan saved with `--out`
/// should.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, bytes, shared_mode(path))
}

/// [`write_atomic`] for a file only its owner may read (0600), from its first byte on.
pub(crate) fn write_atomic_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, bytes, crate::owner_only::FILE_MODE)
}

fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = temp_beside(path, bytes, mode)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir_of(path))
}

/// The directory `path` is in: its parent, or `.` for a bare file name (whose parent is the
/// empty path, which no system call takes).
pub(crate) fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// tempfile's error without the ` at path "<dir>/.deepcli-…"` it appends: the caller names the
/// file it was writing, and the temporary name means nothing to a reader. (tempfile keeps the
/// original error private, so its text is all there is to go by.)
fn without_temp_name(e: std::io::Error) -> std::io::Error {
    let text = e.to_string();
    match text.rsplit_once(" at path ") {
        Some((message, _)) => std::io::Error::new(e.kind(), message),
        None => e,
    }
}

/// The mode of a file written for the operator: the mode `path` has now, or, for a new file,
/// 0666 less the process's umask. (Temporary files are created 0600, which would make every
/// rewritten config file private.)
fn shared_mode(path: &Path) -> u32 {
    match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(_) => 0o666 & !umask(),
    }
}

/// The umask, read without changing it (`umask(2)` can only be read by setting it, which would
/// race with other threads creating files).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
        })
        .unwrap_or(0o022)
}

/// Flushes the filesystem that holds `path`: everything written so far is durable before the
/// state records it.
pub(crate) fn sync_fs(path: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    nix::unistd::syncfs(&file).map_err(std::io::Error::from)
}

/// Makes `dir`'s entries durable (a rename into it, a file created in it). The empty path, a
/// bare file name's parent, is the current directory.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_file_name_is_in_the_current_directory() {
        assert_eq!(dir_of(Path::new("plan.json")), Path::new("."));
        assert_eq!(dir_of(Path::new("./plan.json")), Path::new("."));
        assert_eq!(dir_of(Path::new("out/plan.json")), Path::new("out"));
        assert_eq!(dir_of(Path::new("/plan.json")), Path::new("/"));
        assert!(sync_dir(Path::new("")).is_ok());
    }

    #[test]
    fn a_failed_write_names_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let e = write_atomic(&tmp.path().join("missing/plan.json"), b"{}").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(!e.to_string().contains(".deepcli-"), "{e}");
    }
}
