//! A runtime's output in `<state>/logs/<id>.log`, size-capped: when the file passes the cap it
//! becomes `<id>.log.1` (replacing the previous one) and a new file starts.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The cap of one log file.
pub const MAX_BYTES: u64 = 8 * 1024 * 1024;

pub struct Log {
    path: PathBuf,
    file: Option<tokio::fs::File>,
    written: u64,
    cap: u64,
}

impl Log {
    pub async fn open(path: &Path, cap: u64) -> std::io::Result<Log> {
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await?;
        let written = file.metadata().await.map_or(0, |m| m.len());
        Ok(Log {
            path: path.to_path_buf(),
            file: Some(file),
            written,
            cap,
        })
    }

    pub async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.written + bytes.len() as u64 > self.cap && self.written > 0 {
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
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        tokio::fs::rename(&self.path, &old).await?;
        self.file = Some(
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .await?,
        );
        self.written = 0;
        Ok(())
    }
}

/// Copies `from` into the log until it closes.
pub async fn pump(mut from: impl AsyncRead + Unpin, log: std::sync::Arc<tokio::sync::Mutex<Log>>) {
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
            let mut log = Log::open(&path, 10).await.unwrap();
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
            let mut log = Log::open(&path, 20).await.unwrap();
            log.write(b"six\n").await.unwrap();
        });
        assert_eq!(read("a.log").unwrap(), "six\n");
        assert_eq!(read("a.log.1").unwrap(), "a-very-long-line\n");
    }
}
