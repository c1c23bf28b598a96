//! Which task of a remote A2A agent each session's last message left waiting for input
//! (`remote_waits`, migration 31): the session's next message answers it in that task, also
//! after the controller restarted. On the backend seam: SQLite or PostgreSQL.

use crate::state::db::{Optional, Query, params};
use crate::state::{LayerConnection, StateDir, StateError};

pub(crate) struct RemoteWaits {
    db: LayerConnection,
}

impl RemoteWaits {
    pub(crate) fn open(dir: &StateDir) -> Result<RemoteWaits, StateError> {
        Ok(RemoteWaits {
            db: LayerConnection::open(dir, "remote waits")?,
        })
    }

    /// Session `session_key` of `agent` waits on the remote's task `task_id`.
    pub(crate) fn wait(
        &self,
        agent: &str,
        session_key: &str,
        task_id: &str,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "INSERT INTO remote_waits (agent_id, session_key, task_id, at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (agent_id, session_key) DO UPDATE SET task_id = excluded.task_id, at = excluded.at",
                params![agent, session_key, task_id, now],
            )
            .map(drop)
        })
    }

    /// The task the session waits on, if any, forgotten: the message being sent answers it.
    pub(crate) fn take(
        &self,
        agent: &str,
        session_key: &str,
    ) -> Result<Option<String>, StateError> {
        self.db.write(|c| {
            c.query_row(
                "DELETE FROM remote_waits WHERE agent_id = ?1 AND session_key = ?2 RETURNING task_id",
                params![agent, session_key],
                |r| r.get(0),
            )
            .optional()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait is kept until taken, once, per session, on both backends.
    #[test]
    fn a_wait_is_taken_once() {
        let tmp = tempfile::tempdir().unwrap();
        let sqlite = StateDir::new(tmp.path());
        let schema = crate::state::db::testing::PgSchema::new();
        let postgres = sqlite.clone().with_postgres(schema.url().clone());
        for dir in [sqlite, postgres] {
            let waits = RemoteWaits::open(&dir).unwrap();
            assert_eq!(waits.take("r", "agent:r:main").unwrap(), None);
            waits.wait("r", "agent:r:main", "t-1").unwrap();
            waits.wait("r", "agent:r:main", "t-2").unwrap();
            waits.wait("r", "agent:r:other", "t-3").unwrap();
            // Another store over the same state sees it: a restarted controller.
            let again = RemoteWaits::open(&dir).unwrap();
            assert_eq!(
                again.take("r", "agent:r:main").unwrap().as_deref(),
                Some("t-2")
            );
            assert_eq!(again.take("r", "agent:r:main").unwrap(), None);
            assert_eq!(
                waits.take("r", "agent:r:other").unwrap().as_deref(),
                Some("t-3")
            );
        }
    }
}
