//! The adapters' rows in the state database (`adapters.sql`): Telegram's next `getUpdates`
//! offset, the inbox of events taken from a platform and not yet handled to the end, and seed
//! 001's discussion state per Slack thread. The account rows (identity, logout) are
//! [`crate::platform::accounts`]'; the store holds that one too, for the running adapters.
//!
//! A connection of its own (as the Access layer has): an event is taken while an apply runs.
//! Every call is short; callers run it on the blocking pool.

use crate::platform::accounts::AccountStore;
use crate::state::db::{Backend, Behavior, Conn, DbResult, Optional, Query, params};
use crate::state::{StateDir, StateError};

pub(crate) struct AdapterStore {
    db: crate::state::LayerConnection,
    accounts: AccountStore,
}

/// One event in the inbox.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub event_id: String,
    pub body: String,
    /// How many pieces of its reply were posted before.
    pub posted: usize,
}

/// A Slack thread's discussion (docs/channels.md, "Several bots in one workspace").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThreadState {
    Open,
    /// `maxRounds` bot replies (or a stall): bot messages are no longer delivered.
    Limit,
    /// The close marker was posted.
    Closed,
}

impl ThreadState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ThreadState::Open => "open",
            ThreadState::Limit => "limit",
            ThreadState::Closed => "closed",
        }
    }

    fn parse(text: &str) -> ThreadState {
        match text {
            "limit" => ThreadState::Limit,
            "closed" => ThreadState::Closed,
            _ => ThreadState::Open,
        }
    }
}

/// Where a discussion happens: (channel, team, conversation, thread).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ThreadKey {
    pub channel: String,
    pub team_id: String,
    pub conversation: String,
    pub thread_id: String,
}

/// A discussion as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thread {
    pub rounds: u32,
    pub state: ThreadState,
    pub notice_sent: bool,
}

impl AdapterStore {
    pub(crate) fn open(dir: &StateDir) -> Result<AdapterStore, StateError> {
        Ok(AdapterStore {
            db: crate::state::LayerConnection::open(dir, "adapter")?,
            accounts: AccountStore::open(dir)?,
        })
    }

    /// The account rows: identity recorded, logged out.
    pub(crate) fn accounts(&self) -> &AccountStore {
        &self.accounts
    }

    fn with<T>(&self, f: impl FnOnce(&mut Conn<'_>) -> DbResult<T>) -> Result<T, StateError> {
        self.db.write(f)
    }

    /// The next `getUpdates` offset recorded for an account.
    pub(crate) fn offset(&self, channel: &str, account: &str) -> Result<Option<i64>, StateError> {
        self.with(|c| {
            c.query_row(
                "SELECT next FROM adapter_offsets WHERE channel = ?1 AND account_id = ?2",
                params![channel, account],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// Takes events into the inbox (an event already there is not taken twice) and, in the
    /// same transaction, records the next offset: once this returns, the platform may forget
    /// them. Returns which of `events` were new.
    pub(crate) fn take(
        &self,
        channel: &str,
        account: &str,
        events: &[(String, String)],
        next_offset: Option<i64>,
    ) -> Result<Vec<bool>, StateError> {
        let now = crate::clock::now();
        self.with(|c| {
            // One that writes: a read that turns into a write in WAL mode could fail at once
            // with SQLITE_BUSY if another connection wrote meanwhile; this waits its turn.
            let tx = c.transaction(Behavior::Write)?;
            let mut fresh = Vec::with_capacity(events.len());
            let mut seq: i64 = tx.query_row(
                "SELECT coalesce(max(seq), 0) FROM adapter_inbox",
                params![],
                |r| r.get(0),
            )?;
            for (id, body) in events {
                seq += 1;
                fresh.push(
                    tx.execute(
                        "INSERT INTO adapter_inbox (channel, account_id, event_id, seq, body, at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                        params![channel, account, id, seq, body, now],
                    )? == 1,
                );
            }
            if let Some(next) = next_offset {
                // The offset only moves forward (SQLite's two-argument max is PostgreSQL's
                // greatest).
                let sql = match tx.backend() {
                    Backend::Sqlite => {
                        "INSERT INTO adapter_offsets (channel, account_id, next, at) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (channel, account_id) DO UPDATE SET next = max(adapter_offsets.next, excluded.next), at = excluded.at"
                    }
                    Backend::Postgres => {
                        "INSERT INTO adapter_offsets (channel, account_id, next, at) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (channel, account_id) DO UPDATE SET next = greatest(adapter_offsets.next, excluded.next), at = excluded.at"
                    }
                };
                tx.execute(sql, params![channel, account, next, now])?;
            }
            tx.commit()?;
            Ok(fresh)
        })
    }

    /// An event handled to the end: out of the inbox.
    pub(crate) fn done(
        &self,
        channel: &str,
        account: &str,
        event_id: &str,
    ) -> Result<(), StateError> {
        self.with(|c| {
            c.execute(
                "DELETE FROM adapter_inbox WHERE channel = ?1 AND account_id = ?2 AND event_id = ?3",
                params![channel, account, event_id],
            )
            .map(drop)
        })
    }

    /// The events an earlier run took and did not finish, oldest first.
    pub(crate) fn pending(&self, channel: &str, account: &str) -> Result<Vec<Pending>, StateError> {
        self.with(|c| {
            c.query_map(
                "SELECT event_id, body, posted FROM adapter_inbox WHERE channel = ?1 AND account_id = ?2 ORDER BY seq",
                params![channel, account],
                |r| {
                    Ok(Pending {
                        event_id: r.get(0)?,
                        body: r.get(1)?,
                        posted: usize::try_from(r.get::<i64>(2)?).unwrap_or(0),
                    })
                },
            )
        })
    }

    /// The first `pieces` pieces of an event's reply were taken by the platform.
    pub(crate) fn set_posted(
        &self,
        channel: &str,
        account: &str,
        event_id: &str,
        pieces: usize,
    ) -> Result<(), StateError> {
        self.with(|c| {
            c.execute(
                "UPDATE adapter_inbox SET posted = ?4 WHERE channel = ?1 AND account_id = ?2 AND event_id = ?3",
                params![channel, account, event_id, pieces],
            )
            .map(drop)
        })
    }

    pub(crate) fn thread(&self, key: &ThreadKey) -> Result<Option<Thread>, StateError> {
        self.with(|c| {
            c.query_row(
                "SELECT rounds, state, notice_sent FROM discussions
                 WHERE channel = ?1 AND team_id = ?2 AND conversation = ?3 AND thread_id = ?4",
                params![key.channel, key.team_id, key.conversation, key.thread_id],
                |r| {
                    Ok(Thread {
                        rounds: r.get(0)?,
                        state: ThreadState::parse(&r.get::<String>(1)?),
                        notice_sent: r.get::<i64>(2)? != 0,
                    })
                },
            )
            .optional()
        })
    }

    /// Writes a thread's discussion state whole.
    pub(crate) fn set_thread(&self, key: &ThreadKey, thread: &Thread) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.with(|c| {
            c.execute(
                "INSERT INTO discussions (channel, team_id, conversation, thread_id, rounds, state, notice_sent, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (channel, team_id, conversation, thread_id) DO UPDATE SET
                   rounds = excluded.rounds, state = excluded.state, notice_sent = excluded.notice_sent,
                   updated_at = excluded.updated_at",
                params![
                    key.channel,
                    key.team_id,
                    key.conversation,
                    key.thread_id,
                    thread.rounds,
                    thread.state.as_str(),
                    i64::from(thread.notice_sent),
                    now
                ],
            )
            .map(drop)
        })
    }

    /// Reserves one bot reply in a thread, atomically (two bot accounts post in one thread):
    /// refused (`None`) when the thread is not open; else the thread after it, and whether
    /// this reply is the one that reached `max_rounds`. A reply that holds the close marker
    /// (`closes`) closes the thread in the same step, so no other bot's reply follows it.
    pub(crate) fn reserve_round(
        &self,
        key: &ThreadKey,
        max_rounds: u32,
        closes: bool,
    ) -> Result<Option<(Thread, bool)>, StateError> {
        let now = crate::clock::now();
        self.with(|c| {
            // One that writes: two bot accounts' replies in one thread reserve one at a time.
            let tx = c.transaction(Behavior::Write)?;
            let before: Option<(u32, String, i64)> = tx
                .query_row(
                    "SELECT rounds, state, notice_sent FROM discussions
                     WHERE channel = ?1 AND team_id = ?2 AND conversation = ?3 AND thread_id = ?4",
                    params![key.channel, key.team_id, key.conversation, key.thread_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let (rounds, state, notice) = before.unwrap_or((0, "open".into(), 0));
            if ThreadState::parse(&state) != ThreadState::Open {
                return Ok(None);
            }
            let rounds = rounds.saturating_add(1);
            let reached = !closes && rounds >= max_rounds;
            let state = if closes {
                ThreadState::Closed
            } else if reached {
                ThreadState::Limit
            } else {
                ThreadState::Open
            };
            tx.execute(
                "INSERT INTO discussions (channel, team_id, conversation, thread_id, rounds, state, notice_sent, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (channel, team_id, conversation, thread_id) DO UPDATE SET
                   rounds = excluded.rounds, state = excluded.state, updated_at = excluded.updated_at",
                params![key.channel, key.team_id, key.conversation, key.thread_id, rounds, state.as_str(), notice, now],
            )?;
            tx.commit()?;
            Ok(Some((
                Thread {
                    rounds,
                    state,
                    notice_sent: notice != 0,
                },
                reached,
            )))
        })
    }

    /// Claims the one notice of a thread: true for the first caller only.
    pub(crate) fn claim_notice(&self, key: &ThreadKey) -> Result<bool, StateError> {
        self.with(|c| {
            c.execute(
                "UPDATE discussions SET notice_sent = 1
                 WHERE channel = ?1 AND team_id = ?2 AND conversation = ?3 AND thread_id = ?4 AND notice_sent = 0",
                params![key.channel, key.team_id, key.conversation, key.thread_id],
            )
            .map(|n| n == 1)
        })
    }

    /// Every discussion of a conversation's threads, for `sessions show`: thread id → state.
    /// The conversation is matched without regard to case: session keys are lower case.
    pub(crate) fn threads_of(
        &self,
        channel: &str,
        conversation: &str,
    ) -> Result<Vec<(String, Thread)>, StateError> {
        self.with(|c| {
            // Without regard to case, as SQLite's NOCASE compared (conversation ids are ASCII:
            // SQLite's lower() folds only ASCII letters, PostgreSQL's every letter).
            c.query_map(
                "SELECT thread_id, rounds, state, notice_sent FROM discussions
                 WHERE channel = ?1 AND lower(conversation) = lower(?2) ORDER BY thread_id",
                params![channel, conversation],
                |r| {
                    Ok((
                        r.get(0)?,
                        Thread {
                            rounds: r.get(1)?,
                            state: ThreadState::parse(&r.get::<String>(2)?),
                            notice_sent: r.get::<i64>(3)? != 0,
                        },
                    ))
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store on both backends (a new SQLite state, a schema of its own in PostgreSQL),
    /// twice: two replicas' stores on one state.
    fn stores() -> Vec<([AdapterStore; 2], Box<dyn std::any::Any>)> {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let sqlite = [(); 2].map(|()| AdapterStore::open(&state).unwrap());
        let schema = crate::state::db::testing::PgSchema::new();
        let on_postgres = state.clone().with_postgres(schema.url().clone());
        let postgres = [(); 2].map(|()| AdapterStore::open(&on_postgres).unwrap());
        vec![(sqlite, Box::new(dir)), (postgres, Box::new(schema))]
    }

    #[test]
    fn the_inbox_takes_an_event_once_and_the_offset_only_moves_forward() {
        for ([store, _], _keep) in stores() {
            let events = |ids: &[&str]| -> Vec<(String, String)> {
                ids.iter()
                    .map(|i| (i.to_string(), format!("{{\"update_id\":{i}}}")))
                    .collect()
            };
            assert_eq!(store.offset("telegram", "default").unwrap(), None);
            let fresh = store
                .take("telegram", "default", &events(&["7", "8"]), Some(9))
                .unwrap();
            assert_eq!(fresh, [true, true]);
            // A redelivery (the platform did not see the offset) and one new event; an older
            // offset does not move it back.
            let fresh = store
                .take("telegram", "default", &events(&["8", "10"]), Some(5))
                .unwrap();
            assert_eq!(fresh, [false, true]);
            assert_eq!(store.offset("telegram", "default").unwrap(), Some(9));
            store.set_posted("telegram", "default", "8", 2).unwrap();
            store.done("telegram", "default", "7").unwrap();
            let pending: Vec<_> = store
                .pending("telegram", "default")
                .unwrap()
                .into_iter()
                .map(|p| (p.event_id, p.posted))
                .collect();
            assert_eq!(pending, [("8".to_owned(), 2), ("10".to_owned(), 0)]);
            assert!(store.pending("telegram", "other").unwrap().is_empty());
        }
    }

    /// Bot accounts replying in one thread at once, from two replicas: each reply reserves
    /// one round, and the thread reaches its limit once.
    #[test]
    fn replies_racing_in_a_thread_reserve_one_round_each() {
        for (replicas, _keep) in stores() {
            let store = &replicas[0];
            let key = ThreadKey {
                channel: "slack".into(),
                team_id: "T1".into(),
                conversation: "C0ABC".into(),
                thread_id: "1700000000.000100".into(),
            };
            let reached: Vec<Option<bool>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|i| {
                        let (replica, key) = (&replicas[i % 2], &key);
                        s.spawn(move || {
                            replica
                                .reserve_round(key, 5, false)
                                .unwrap()
                                .map(|(_, r)| r)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                reached.iter().filter(|r| r.is_some()).count(),
                5,
                "{reached:?}"
            );
            assert_eq!(
                reached.iter().filter(|r| **r == Some(true)).count(),
                1,
                "{reached:?}"
            );
            let thread = store.thread(&key).unwrap().unwrap();
            assert_eq!((thread.rounds, thread.state), (5, ThreadState::Limit));
            assert!(store.claim_notice(&key).unwrap());
            assert!(
                !store.claim_notice(&key).unwrap(),
                "the notice goes out once"
            );
            let threads = store.threads_of("slack", "c0abc").unwrap();
            assert_eq!(threads.len(), 1, "found without regard to case");
        }
    }
}
