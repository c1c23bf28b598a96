//! What a store's call costs on each backend, for `benches/state_backends.rs`: the adapters'
//! store (an event taken into the inbox with the next offset, then done; a Slack thread's round
//! reserved) on SQLite and on PostgreSQL, from one replica and from two at once.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::adapters::store::{AdapterStore, ThreadKey};
use crate::state::db::PgUrl;
use crate::state::{StateDir, StateError};

/// Two stores (two replicas) on one state.
pub struct StoreBench {
    replicas: [AdapterStore; 2],
}

impl StoreBench {
    /// On SQLite, in `dir`.
    pub fn sqlite(dir: &Path) -> Result<StoreBench, StateError> {
        let state = StateDir::new(dir);
        Ok(StoreBench {
            replicas: [AdapterStore::open(&state)?, AdapterStore::open(&state)?],
        })
    }

    /// On PostgreSQL at `url` (its tables made if missing), files in `dir`.
    pub fn postgres(dir: &Path, url: &str) -> Result<StoreBench, String> {
        let url = PgUrl::parse(url)?;
        let state = StateDir::new(dir).with_postgres(url);
        let open = || AdapterStore::open(&state).map_err(|e| e.to_string());
        Ok(StoreBench {
            replicas: [open()?, open()?],
        })
    }

    /// One event taken (with the next offset) and done, by replica `r`: its time.
    pub fn event(&self, r: usize, n: u64) -> Result<Duration, StateError> {
        let store = &self.replicas[r % 2];
        let account = format!("bench-{r}");
        let id = n.to_string();
        let started = Instant::now();
        store.take(
            "telegram",
            &account,
            &[(id.clone(), "{\"update_id\":1}".to_owned())],
            Some(n as i64 + 1),
        )?;
        store.done("telegram", &account, &id)?;
        Ok(started.elapsed())
    }

    /// One round reserved in a thread of its own, by replica `r`: its time.
    pub fn round(&self, r: usize, n: u64) -> Result<Duration, StateError> {
        let key = ThreadKey {
            channel: "slack".into(),
            team_id: "T1".into(),
            conversation: format!("C{r}"),
            thread_id: n.to_string(),
        };
        let started = Instant::now();
        self.replicas[r % 2].reserve_round(&key, 1_000, false)?;
        Ok(started.elapsed())
    }
}
