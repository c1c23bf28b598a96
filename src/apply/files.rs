//! Writing files so that a crash leaves either the old content or the new, never a torn file.

use std::io::Write;
use std::path::Path;

pub fn create_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)
}

/// Writes `bytes` to `path` through a temporary file in the same directory, then renamed
/// (replacing) or hard-linked (never replacing: an existing file wins). A reader never sees a
/// torn file. Durability is the caller's: [`sync_fs`] once after a batch of files costs one
/// flush instead of one per file.
pub fn write_file(path: &Path, bytes: &[u8], replace: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".deepcli-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
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

/// Replaces `path` atomically and durably: the content is synced before the rename, and the
/// rename after it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".deepcli-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Flushes the filesystem that holds `path`: everything written so far is durable before the
/// state records it.
pub fn sync_fs(path: &Path) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    nix::unistd::syncfs(&file).map_err(std::io::Error::from)
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
