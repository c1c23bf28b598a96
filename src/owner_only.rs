//! Files and directories only their owner may read or write: what deepcli keeps in the state
//! directory for itself (the database with its WAL and shared memory, the routing plan, the
//! operator token, logs, the trash). Transcripts, reply URLs and tokens are in there.
//!
//! Workspaces and agent directories are the operator's and keep their modes; nothing here
//! touches them.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// The mode of a file created private.
pub(crate) const FILE_MODE: u32 = 0o600;
/// The mode of a directory created private.
pub(crate) const DIR_MODE: u32 = 0o700;
/// The group and other permission bits.
const SHARED: u32 = 0o077;

/// Creates `dir` and its missing parents, each 0700, and takes group and other permissions off
/// `dir` when it already existed.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    restrict(dir)
}

/// Takes group and other permissions off `path` (a symlink's target), leaving the owner's as
/// they are. A missing path is fine.
pub(crate) fn restrict(path: &Path) -> io::Result<()> {
    let mode = match std::fs::metadata(path) {
        Ok(meta) => meta.permissions().mode(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if mode & SHARED == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !SHARED))
}
