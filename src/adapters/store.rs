//! The adapters' rows in the state database (`adapters.sql`): Telegram's next `getUpdates`
//! offset, the inbox of events taken from a platform and not yet handled to the end, and seed
//! 001's discussion state per Slack thread. The account rows (identity, logout) are
//! [`crate::platform::accounts`]'; the store holds that one too, for the running adapters.
//!
//! A connection of its own (as the Access layer has): an event is taken while an apply runs.
//! Every call is short; callers run it on the blocking pool.

use rusqlite::{Connection, OptionalExtension, params};

use crate::platform::accounts::AccountStore;
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

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StateError> {
        self.db.with(f)
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
            // Immediate: a read that turns into a write in WAL mode could fail at once with
            // SQLITE_BUSY if another connection wrote meanwhile; this waits its turn instead.
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let mut fresh = Vec::with_capacity(events.len());
            {
                let mut seq: i64 = tx.query_row(
                    "SELECT coalesce(max(seq), 0) FROM adapter_inbox",
                    [],
                    |r| r.get(0),
                )?;
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO adapter_inbox (channel, account_id, event_id, seq, body, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for (id, body) in events {
                    seq += 1;
                    fresh.push(insert.execute(params![channel, account, id, seq, body, now])? == 1);
                }
            }
            if let Some(next) = next_offset {
                tx.execute(
                    "INSERT INTO adapter_offsets (channel, account_id, next, at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (channel, account_id) DO UPDATE SET next = max(next, excluded.next), at = excluded.at",
                    params![channel, account, next, now],
                )?;
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
            let mut q = c.prepare(
                "SELECT event_id, body, posted FROM adapter_inbox WHERE channel = ?1 AND account_id = ?2 ORDER BY seq",
            )?;
            q.query_map(params![channel, account], |r| {
                Ok(Pending {
                    event_id: r.get(0)?,
                    body: r.get(1)?,
                    posted: usize::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                })
            })?
            .collect()
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
            c.prepare_cached(
                "UPDATE adapter_inbox SET posted = ?4 WHERE channel = ?1 AND account_id = ?2 AND event_id = ?3",
            )?
            .execute(params![channel, account, event_id, pieces as i64])
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
                        state: ThreadState::parse(&r.get::<_, String>(1)?),
                        notice_sent: r.get::<_, i64>(2)? != 0,
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
            // Immediate: a read that turns into a write in WAL mode could fail at once with
            // SQLITE_BUSY if another connection wrote meanwhile; this waits its turn instead.
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
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
            let mut q = c.prepare(
                "SELECT thread_id, rounds, state, notice_sent FROM discussions
                 WHERE channel = ?1 AND conversation = ?2 COLLATE NOCASE ORDER BY thread_id",
            )?;
            q.query_map(params![channel, conversation], |r| {
                Ok((
                    r.get(0)?,
                    Thread {
                        rounds: r.get(1)?,
                        state: ThreadState::parse(&r.get::<_, String>(2)?),
                        notice_sent: r.get::<_, i64>(3)? != 0,
                    },
                ))
            })?
            .collect()
        })
    }
}
