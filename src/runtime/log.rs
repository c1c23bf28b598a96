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
