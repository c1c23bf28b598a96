//! What a store's call costs on each backend, for `benches/state_backends.rs`: the adapters'
//! store (an event taken into the inbox with the next offset, then done; a Slack thread's round
//! reserved) and the Access store (an inbound turn's records), on SQLite and on PostgreSQL,
//! from one replica and from two at once.

use std::path::Path;
use std::time::{Duration, Instant};

use super::store::{AdapterStore, ThreadKey};
use crate::access::BegunTurn;
use crate::access::store::{AccessStore, CountedTurn, DeliveryKey, Turn};
use crate::state::db::PgUrl;
use crate::state::{Provenance, StateDir, StateError};

/// Two stores (two replicas) on one state.
pub struct StoreBench {
    replicas: [AdapterStore; 2],
    access: [AccessStore; 2],
}

impl StoreBench {
    /// On SQLite, in `dir`.
    pub fn sqlite(dir: &Path) -> Result<StoreBench, StateError> {
        let state = StateDir::new(dir);
        Ok(StoreBench {
            replicas: [AdapterStore::open(&state)?, AdapterStore::open(&state)?],
            access: [AccessStore::open(&state)?, AccessStore::open(&state)?],
        })
    }

    /// On PostgreSQL at `url` (its tables made if missing), files in `dir`.
    pub fn postgres(dir: &Path, url: &str) -> Result<StoreBench, String> {
        let url = PgUrl::parse(url)?;
        let state = StateDir::new(dir).with_postgres(url);
        let open = || AdapterStore::open(&state).map_err(|e| e.to_string());
        let access = || AccessStore::open(&state).map_err(|e| e.to_string());
        Ok(StoreBench {
            replicas: [open()?, open()?],
            access: [access()?, access()?],
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

    /// One inbound turn's records, by replica `r`, as the Access layer writes them: the turn
    /// begun, then its message, the agent's answer, the delivery and the budget's turn in one
    /// transaction. Its time.
    pub fn turn(&self, r: usize, n: u64) -> Result<Duration, StateError> {
        let store = &self.access[r % 2];
        let peer = (n % 100).to_string();
        let key = DeliveryKey {
            channel: "telegram".into(),
            account_id: format!("bench-{r}"),
            peer_kind: "direct".into(),
            peer_id: peer.clone(),
            thread_id: String::new(),
            message_id: n.to_string(),
        };
        let session = format!("agent:a:telegram:direct:{peer}");
        let route = serde_json::json!({"agentId": "a", "sessionKey": session});
        let begun = BegunTurn {
            key: key.clone(),
            session_key: session.clone(),
            agent_id: "a".into(),
            route: route.clone(),
            sender: None,
            text: "hello".into(),
        };
        let turns = [
            Turn {
                provenance: Provenance::Inbound,
                message_id: Some(key.message_id.clone()),
                sender: None,
                text: "hello".into(),
                route: Some(route),
            },
            Turn {
                provenance: Provenance::Agent,
                message_id: None,
                sender: None,
                text: "hello to you".into(),
                route: None,
            },
        ];
        let counted = CountedTurn {
            agent_id: "a".into(),
            at_ms: n as i64,
            run_id: None,
            usage: crate::access::budget::TurnUsage::default(),
        };
        let started = Instant::now();
        store.begin_turn(&begun, n as i64, None)?;
        store.record_turn(&session, &turns, Some((&key, "{}")), Some(&counted))?;
        Ok(started.elapsed())
    }
}
