//! A runtime's output in `<state>/logs/<id>.log` (and a channel's in
//! `<state>/logs/channels/<channel>.log`), size-capped: when the file passes the cap
//! ([`Limit::bytes`], `--log-max-size`) it becomes `<id>.log.1`, the older ones move up one
//! (`.1` → `.2`, …), the one past [`Limit::keep`] (`--log-keep`) is deleted, and a new file
//! starts. Private to its owner: the files are 0600 and their directory 0700, and the older
//! logs are made so when opened.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::owner_only;

/// How big a log grows and how many older files of it are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    /// The cap of one file.
    pub bytes: u64,
    /// The older files kept beside it (`.1` the newest), at least 1.
    pub keep: u32,
}

impl Limit {
    /// 8 MiB, one older file.
    pub(crate) const DEFAULT: Limit = Limit {
        bytes: 8 * 1024 * 1024,
        keep: 1,
    };
}

pub(crate) struct Log {
    path: PathBuf,
    file: Option<tokio::fs::File>,
    written: u64,
    limit: Limit,
}

/// The `n`th older file of a log (`.1` the newest).
fn older(path: &Path, n: u32) -> PathBuf {
    let mut old = path.as_os_str().to_owned();
    old.push(format!(".{n}"));
    old.into()
}

/// The log's directory, created private, and the log and its older files made private, before
/// the log is opened for writing; older files past `keep` (a lower `--log-keep` than before)
/// are deleted.
fn make_private(path: &Path, keep: u32) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        owner_only::create_dir_all(dir)?;
    }
    owner_only::restrict(path)?;
    for n in 1..=keep {
        owner_only::restrict(&older(path, n))?;
    }
    let mut n = keep + 1;
    while std::fs::remove_file(older(path, n)).is_ok() {
        n += 1;
    }
    Ok(())
}

async fn create(path: &Path) -> std::io::Result<tokio::fs::File> {
    tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(owner_only::FILE_MODE)
        .open(path)
        .await
}

impl Log {
    pub(crate) async fn open(path: &Path, limit: Limit) -> std::io::Result<Log> {
        let limit = Limit {
            keep: limit.keep.max(1),
            ..limit
        };
        let owned = path.to_path_buf();
        tokio::task::spawn_blocking(move || make_private(&owned, limit.keep))
            .await
            .map_err(std::io::Error::other)??;
        let file = create(path).await?;
        let written = file.metadata().await.map_or(0, |m| m.len());
        Ok(Log {
            path: path.to_path_buf(),
            file: Some(file),
            written,
            limit,
        })
    }

    pub(crate) async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.written + bytes.len() as u64 > self.limit.bytes && self.written > 0 {
            self.rotate().await?;
        }
        if let Some(file) = &mut self.file {
            file.write_all(bytes).await?;
            // tokio's File writes in the background: flush so the log is on disk now, for
            // whoever tails it, and not lost when the runtime ends.
            file.flush().await?;
            self.written += bytes.len() as u64;
        }
        Ok(())
    }

    async fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush().await?;
        }
        // Oldest first, so no rename replaces a file still to move; the one past `keep` is
        // replaced by the one before it.
        for n in (1..self.limit.keep).rev() {
            match tokio::fs::rename(older(&self.path, n), older(&self.path, n + 1)).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        tokio::fs::rename(&self.path, older(&self.path, 1)).await?;
        self.file = Some(create(&self.path).await?);
        self.written = 0;
        Ok(())
    }
}

/// Copies `from` into the log until it closes.
pub(crate) async fn pump(
    mut from: impl AsyncRead + Unpin,
    log: std::sync::Arc<tokio::sync::Mutex<Log>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let _ = log.lock().await.write(&buf[..n]).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_past_its_cap_rotates_into_one_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/a.log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut log = Log::open(&path, Limit { bytes: 10, keep: 1 })
                .await
                .unwrap();
            log.write(b"one-\n").await.unwrap();
            log.write(b"two-\n").await.unwrap();
            // 16 bytes would pass the cap: `one-two-` moves to a.log.1.
            log.write(b"three\n").await.unwrap();
            // Again: `three` replaces it in a.log.1; there is never a third file.
            log.write(b"four\n").await.unwrap();
            // Exactly at the cap: no rotation.
            log.write(b"five\n").await.unwrap();
            // A line longer than the cap still goes in, alone.
            log.write(b"a-very-long-line\n").await.unwrap();
        });
        let read = |name: &str| std::fs::read_to_string(dir.path().join("logs").join(name));
        assert_eq!(read("a.log").unwrap(), "a-very-long-line\n");
        assert_eq!(read("a.log.1").unwrap(), "four\nfive\n");
        assert!(read("a.log.2").is_err());

        // Reopened, it counts what is already there.
        rt.block_on(async {
            let mut log = Log::open(&path, Limit { bytes: 20, keep: 1 })
                .await
                .unwrap();
            log.write(b"six\n").await.unwrap();
        });
        assert_eq!(read("a.log").unwrap(), "six\n");
        assert_eq!(read("a.log.1").unwrap(), "a-very-long-line\n");
    }

    #[test]
    fn a_log_keeps_as_many_older_files_as_it_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).ok();
        rt.block_on(async {
            let mut log = Log::open(&path, Limit { bytes: 4, keep: 3 }).await.unwrap();
            for line in [
                "1\n", "2\n", "3\n", "4\n", "5\n", "6\n", "7\n", "8\n", "9\n",
            ] {
                log.write(line.as_bytes()).await.unwrap();
            }
        });
        // Two lines a file; the newest older file is `.1`, and there are three.
        assert_eq!(read("a.log").as_deref(), Some("9\n"));
        assert_eq!(read("a.log.1").as_deref(), Some("7\n8\n"));
        assert_eq!(read("a.log.2").as_deref(), Some("5\n6\n"));
        assert_eq!(read("a.log.3").as_deref(), Some("3\n4\n"));
        assert_eq!(read("a.log.4"), None);

        // Opened again told to keep one: the files past it go.
        rt.block_on(async {
            Log::open(&path, Limit { bytes: 4, keep: 1 }).await.unwrap();
        });
        assert_eq!(read("a.log.1").as_deref(), Some("7\n8\n"));
        assert_eq!(read("a.log.2"), None);
        assert_eq!(read("a.log.3"), None);
    }

    /// Regression: logs (which hold whatever runtimes and channels print) were created 0644 in
    /// a 0755 directory; they are private to their owner, and an older log is made so.
    #[test]
    fn a_log_is_private_to_its_owner() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Under the usual umask, which would let everyone read a file created without a mode.
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
        let new = dir.path().join("logs/channels/slack.log");
        rt.block_on(async {
            let mut log = Log::open(&new, Limit::DEFAULT).await.unwrap();
            log.write(b"hello\n").await.unwrap();
        });
        assert_eq!(mode(&new), 0o600);
        assert_eq!(mode(&dir.path().join("logs/channels")), 0o700);
        assert_eq!(mode(&dir.path().join("logs")), 0o700);

        let old = dir.path().join("old/worker.log");
        std::fs::create_dir_all(old.parent().unwrap()).unwrap();
        std::fs::write(&old, "out\n").unwrap();
        std::fs::write(dir.path().join("old/worker.log.1"), "older\n").unwrap();
        let loose = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(&old, loose.clone()).unwrap();
        std::fs::set_permissions(dir.path().join("old/worker.log.1"), loose).unwrap();
        std::fs::set_permissions(
            old.parent().unwrap(),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        rt.block_on(async {
            Log::open(&old, Limit::DEFAULT).await.unwrap();
        });
        assert_eq!(mode(&old), 0o600);
        assert_eq!(mode(&dir.path().join("old/worker.log.1")), 0o600);
        assert_eq!(mode(old.parent().unwrap()), 0o700);
    }
}
