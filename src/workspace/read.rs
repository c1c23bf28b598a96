//! Reading a file of an agent's workspace on the controller's side. The workspace is the
//! agent's to write, so a name there may be a symlink to a file the agent cannot read itself
//! (the controller's secrets), a FIFO that never ends, or a file of gigabytes: the last part
//! is never followed, only a regular file is read, and no more than a bound.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most bytes of one workspace file deepcli reads (OpenClaw's bound for a bootstrap file).
pub(crate) const MAX_BYTES: u64 = 2 * 1024 * 1024;

/// What a workspace file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WorkspaceFile {
    /// Its text (lossy UTF-8), whole.
    Text(String),
    /// Not there.
    Missing,
    /// There, but not read, and why (a symlink, not a regular file, larger than the bound,
    /// unreadable).
    Refused(String),
}

/// Reads `path`, a file of a workspace, when it is a regular file (not a symlink) of at most
/// `limit` bytes.
pub(crate) fn read(path: &Path, limit: u64) -> WorkspaceFile {
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return WorkspaceFile::Missing,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return WorkspaceFile::Refused(
                "it is a symbolic link, and deepcli reads no link in a workspace".into(),
            );
        }
        Err(e) => return WorkspaceFile::Refused(format!("cannot open it: {e}")),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return WorkspaceFile::Refused(format!("cannot read it: {e}")),
    };
    if !meta.is_file() {
        return WorkspaceFile::Refused("it is not a regular file".into());
    }
    if meta.len() > limit {
        return WorkspaceFile::Refused(format!(
            "it has {} bytes, more than the {limit} deepcli reads",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grew since: only the bound is read.
    if let Err(e) = file.take(limit).read_to_end(&mut bytes) {
        return WorkspaceFile::Refused(format!("cannot read it: {e}"));
    }
    WorkspaceFile::Text(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("AGENTS.md");
        std::fs::write(&file, "be brief").unwrap();
        assert_eq!(read(&file, 100), WorkspaceFile::Text("be brief".into()));
        assert_eq!(
            read(&dir.path().join("nope.md"), 100),
            WorkspaceFile::Missing
        );

        let secret = dir.path().join("secret");
        std::fs::write(&secret, "hunter2").unwrap();
        let link = dir.path().join("MEMORY.md");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let WorkspaceFile::Refused(why) = read(&link, 100) else {
            panic!("a symlink was followed");
        };
        assert!(why.contains("symbolic link"), "{why}");

        let fifo = dir.path().join("TOOLS.md");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let WorkspaceFile::Refused(why) = read(&fifo, 100) else {
            panic!("a FIFO was read");
        };
        assert!(why.contains("not a regular file"), "{why}");

        let WorkspaceFile::Refused(why) = read(&file, 3) else {
            panic!("the bound was not kept");
        };
        assert!(why.contains("8 bytes"), "{why}");
    }
}
