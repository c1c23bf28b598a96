//! The outbox (conversations.md, "One outbound path"): what deepcli says into a conversation on
//! its own — a Hub announce, a heartbeat answer, an approval prompt and its outcome — is a row
//! written in the transaction of the event that caused it. A carrier (the account's platform
//! adapter, or its reply sink: `adapters::carry`) posts the rows of a conversation one after
//! the other and marks each posted only after the platform took it; one it cannot post becomes
//! a dead letter with the reason, and one no carrier can take waits, held, with the reason the
//! operator sees.

use crate::state::db::{DbResult, Optional, Query, Row, params};

/// Why deepcli says something into a conversation on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A Hub run's outcome, as the parent session answered it (`subagent_announce`).
    Announce,
    /// A heartbeat's answer that is not `HEARTBEAT_OK`.
    Heartbeat,
    /// A loop guard paused the messages between two sessions (hub.md, "Loops").
    LoopPause,
    /// An approval prompt.
    Approval,
    /// An approval's outcome: approved, denied, expired.
    ApprovalOutcome,
    /// The operator's notice (`deepcli sessions say`).
    Notice,
    /// A task's move, told to the room it is discussed in (tasks.md).
    Task,
    /// A task's check passed: a person decides, with Accept and Reject buttons where the
    /// platform has them (tasks.md).
    TaskVerdict,
    /// What a person decided: the verdict's message edited, its buttons gone.
    TaskVerdictOutcome,
}

impl Cause {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cause::Announce => "announce",
            Cause::Heartbeat => "heartbeat",
            Cause::LoopPause => "loop-pause",
            Cause::Approval => "approval",
            Cause::ApprovalOutcome => "approval-outcome",
            Cause::Notice => "notice",
            Cause::Task => "task",
            Cause::TaskVerdict => "task-verdict",
            Cause::TaskVerdictOutcome => "task-verdict-outcome",
        }
    }

    fn parse(s: &str) -> Option<Cause> {
        [
            Cause::Announce,
            Cause::Heartbeat,
            Cause::LoopPause,
            Cause::Approval,
            Cause::ApprovalOutcome,
            Cause::Notice,
            Cause::Task,
            Cause::TaskVerdict,
            Cause::TaskVerdictOutcome,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// A conversation of a channel account: where a message goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Conversation {
    pub channel: String,
    pub account_id: String,
    /// Normalized; empty when the conversation names no peer.
    pub peer_kind: String,
    pub peer_id: String,
    /// Empty when none.
    pub thread_id: String,
}

impl std::fmt::Display for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.channel, self.account_id)?;
        if !self.peer_id.is_empty() {
            write!(f, " {}:{}", self.peer_kind, self.peer_id)?;
        }
        if !self.thread_id.is_empty() {
            write!(f, " thread {}", self.thread_id)?;
        }
        Ok(())
    }
}

/// A message for the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub to: Conversation,
    /// The platform message it answers (the message whose turn asked an approval), if any.
    pub reply_to: Option<String>,
    pub session_key: String,
    pub cause: Cause,
    /// What caused it: the run, the approval, the beat's time.
    pub cause_id: String,
    pub text: String,
}

/// A row of the outbox not posted yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    pub seq: i64,
    pub said: Outgoing,
    /// Why it waits for a carrier, when it does.
    pub held: Option<String>,
    /// Pieces the platform took already: a retry posts the rest.
    pub pieces: usize,
}

/// Queues `said` in the transaction `tx` of the event that caused it.
pub(super) fn insert(tx: &impl Query, said: &Outgoing, now: &str) -> DbResult<i64> {
    tx.query_row(
        "INSERT INTO outbox (channel, account_id, peer_kind, peer_id, thread_id, reply_to, session_key, cause, cause_id, text, state, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'waiting', ?11) RETURNING seq",
        params![
        said.to.channel,
        said.to.account_id,
        said.to.peer_kind,
        said.to.peer_id,
        said.to.thread_id,
        said.reply_to,
        said.session_key,
        said.cause.as_str(),
        said.cause_id,
            said.text,
            now
        ],
        |r| r.get(0),
    )
}

const QUEUED: &str = "SELECT seq, channel, account_id, peer_kind, peer_id, thread_id, reply_to, session_key, cause, cause_id, text, state, reason, pieces FROM outbox";

fn queued(r: &Row<'_>) -> DbResult<Queued> {
    let cause: String = r.get(8)?;
    let state: String = r.get(11)?;
    Ok(Queued {
        seq: r.get(0)?,
        said: Outgoing {
            to: Conversation {
                channel: r.get(1)?,
                account_id: r.get(2)?,
                peer_kind: r.get(3)?,
                peer_id: r.get(4)?,
                thread_id: r.get(5)?,
            },
            reply_to: r.get(6)?,
            session_key: r.get(7)?,
            // Written by this build only; an unknown cause reads as the generic announce.
            cause: Cause::parse(&cause).unwrap_or(Cause::Announce),
            cause_id: r.get(9)?,
            text: r.get(10)?,
        },
        held: (state == "held")
            .then(|| r.get::<Option<String>>(12))
            .transpose()?
            .flatten(),
        pieces: r.get::<i64>(13)?.max(0) as usize,
    })
}

/// What the outbox holds now: rows waiting for their carrier, and rows held for want of one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OutboxCounts {
    pub waiting: u64,
    pub held: u64,
}

/// What was said for `cause` `cause_id` (the first such row), posted or not.
pub(super) fn said_for(c: &impl Query, cause: Cause, cause_id: &str) -> DbResult<Option<Outgoing>> {
    c.query_row(
        &format!("{QUEUED} WHERE cause = ?1 AND cause_id = ?2 ORDER BY seq LIMIT 1"),
        params![cause.as_str(), cause_id],
        queued,
    )
    .optional()
    .map(|q| q.map(|q| q.said))
}

/// The newest verdict message of task `task_id` (its cause id is `<task>@<uuid>`).
pub(super) fn task_verdict(c: &impl Query, task_id: &str) -> DbResult<Option<Outgoing>> {
    c.query_row(
        &format!(
            "{QUEUED} WHERE cause = 'task-verdict' AND substr(cause_id, 1, length(?1) + 1) = ?1 || '@'
             ORDER BY seq DESC LIMIT 1"
        ),
        params![task_id],
        queued,
    )
    .optional()
    .map(|q| q.map(|q| q.said))
}

/// The oldest row of each conversation that is not posted yet, oldest first.
pub(super) fn heads(c: &impl Query) -> DbResult<Vec<Queued>> {
    c.query_map(
        &format!(
            "{QUEUED} WHERE seq IN (SELECT min(seq) FROM outbox WHERE state IN ('waiting', 'held')
                GROUP BY channel, account_id, peer_kind, peer_id, thread_id)
             ORDER BY seq"
        ),
        params![],
        queued,
    )
}

/// The oldest row of conversation `to` that is not posted yet.
pub(super) fn head(c: &impl Query, to: &Conversation) -> DbResult<Option<Queued>> {
    c.query_row(
        &format!(
            "{QUEUED} WHERE state IN ('waiting', 'held') AND channel = ?1 AND account_id = ?2
                AND peer_kind = ?3 AND peer_id = ?4 AND thread_id = ?5
             ORDER BY seq LIMIT 1"
        ),
        params![
            to.channel,
            to.account_id,
            to.peer_kind,
            to.peer_id,
            to.thread_id
        ],
        queued,
    )
    .optional()
}

pub(super) fn counts(c: &impl Query) -> DbResult<OutboxCounts> {
    c.query_row(
        "SELECT count(*) FILTER (WHERE state = 'waiting'), count(*) FILTER (WHERE state = 'held')
         FROM outbox WHERE state IN ('waiting', 'held')",
        params![],
        |r| {
            Ok(OutboxCounts {
                waiting: r.get::<i64>(0)?.max(0) as u64,
                held: r.get::<i64>(1)?.max(0) as u64,
            })
        },
    )
}

/// The platform took the first `pieces` pieces of row `seq`.
pub(super) fn progress(c: &impl Query, seq: i64, pieces: usize) -> DbResult<()> {
    c.execute(
        "UPDATE outbox SET pieces = ?2 WHERE seq = ?1",
        params![seq, pieces],
    )
    .map(drop)
}

/// Row `seq` is posted, all of it, by `carrier`; `posted_id` is the platform's id of the last
/// piece (Slack's `ts`, Telegram's `message_id`), which an approval's outcome edits.
pub(super) fn posted(
    c: &impl Query,
    seq: i64,
    carrier: &str,
    posted_id: Option<&str>,
    now: &str,
) -> DbResult<()> {
    c.execute(
        "UPDATE outbox SET state = 'posted', carrier = ?2, posted_id = ?3, reason = NULL,
             attempts = attempts + 1, done_at = ?4
         WHERE seq = ?1",
        params![seq, carrier, posted_id, now],
    )
    .map(drop)
}

/// Row `seq` waits: no carrier can take it (`why`). Whether it was not held before.
pub(super) fn hold(c: &impl Query, seq: i64, why: &str) -> DbResult<bool> {
    c.execute(
        "UPDATE outbox SET state = 'held', reason = ?2 WHERE seq = ?1 AND state = 'waiting'",
        params![seq, why],
    )
    .map(|n| n > 0)
}

/// Row `seq` could not be posted by `carrier`: dead, and a dead letter filed under its
/// conversation with `<cause>:<cause id>` as the message id, in `tx`.
pub(super) fn dead(
    tx: &impl Query,
    seq: i64,
    carrier: &str,
    failed: &Failed,
    now: &str,
) -> DbResult<()> {
    let Some(row) = tx
        .query_row(&format!("{QUEUED} WHERE seq = ?1"), params![seq], queued)
        .optional()?
    else {
        return Ok(());
    };
    tx.execute(
        "UPDATE outbox SET state = 'dead', carrier = ?2, reason = ?3, attempts = attempts + ?4, done_at = ?5
         WHERE seq = ?1",
        params![seq, carrier, failed.error, failed.attempts, now],
    )?;
    let to = &row.said.to;
    tx.execute(
        "INSERT INTO dead_letters (channel, account_id, peer_kind, peer_id, thread_id, message_id, url, body, attempts, last_error, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            to.channel,
            to.account_id,
            to.peer_kind,
            to.peer_id,
            to.thread_id,
            format!("{}:{}", row.said.cause.as_str(), row.said.cause_id),
            failed.target,
            failed.body,
            failed.attempts,
            failed.error,
            now
        ],
    )?;
    Ok(())
}

/// The posted prompt of approval `approval_id`: its carrier, platform id and text.
pub(super) fn prompt(c: &impl Query, approval_id: &str) -> DbResult<Option<PostedPrompt>> {
    c.query_row(
        "SELECT carrier, posted_id, text FROM outbox
         WHERE cause IN ('approval', 'task-verdict') AND cause_id = ?1 AND state = 'posted' AND posted_id IS NOT NULL
         ORDER BY seq LIMIT 1",
        params![approval_id],
        |r| {
            Ok(PostedPrompt {
                carrier: r.get(0)?,
                posted_id: r.get(1)?,
                text: r.get(2)?,
            })
        },
    )
    .optional()
}

/// An approval's prompt as it was posted: what its outcome edits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PostedPrompt {
    pub carrier: String,
    pub posted_id: String,
    pub text: String,
}

/// A message a carrier could not post: where it went, what was left of it, how often it was
/// tried and the platform's last error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failed {
    pub target: String,
    pub body: String,
    pub attempts: u32,
    pub error: String,
}

impl super::Access {
    /// Queues `said` in a transaction of its own (an approval's prompt or outcome: the
    /// approval is on record already) and rings the carriers.
    pub(crate) async fn say(&self, said: Outgoing) -> Result<(), super::AccessError> {
        self.blocking(move |s| s.say(&said)).await?;
        self.outbox_rang();
        Ok(())
    }

    /// Rings the carriers: a row was queued.
    pub(super) fn outbox_rang(&self) {
        self.outbox_queued.notify_one();
    }

    /// What the carriers wait on between their passes.
    pub(crate) fn outbox_queued(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.outbox_queued.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::store::AccessStore;

    fn said(peer: &str, text: &str) -> Outgoing {
        Outgoing {
            to: Conversation {
                channel: "telegram".into(),
                account_id: "default".into(),
                peer_kind: "direct".into(),
                peer_id: peer.into(),
                thread_id: String::new(),
            },
            reply_to: None,
            session_key: format!("agent:main:telegram:direct:{peer}"),
            cause: Cause::Announce,
            cause_id: "run-1".into(),
            text: text.into(),
        }
    }

    fn store(dir: &std::path::Path) -> AccessStore {
        AccessStore::open(&crate::state::StateDir::new(dir)).unwrap()
    }

    #[test]
    fn a_task_verdict_is_found_by_its_task_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let verdict = |cause_id: &str, text: &str| Outgoing {
            cause: Cause::TaskVerdict,
            cause_id: cause_id.into(),
            ..said("1", text)
        };
        store
            .say(&verdict("task-1@2026-12-05T06:00:00Z", "first"))
            .unwrap();
        store
            .say(&verdict("task-1@2026-12-05T06:01:00Z", "second"))
            .unwrap();
        store
            .say(&verdict("task-10@2026-12-05T06:02:00Z", "another task"))
            .unwrap();
        let found = store.outbox_task_verdict("task-1").unwrap().unwrap();
        assert_eq!(
            (found.text.as_str(), found.cause),
            ("second", Cause::TaskVerdict)
        );
        assert!(store.outbox_task_verdict("task-2").unwrap().is_none());
    }

    #[test]
    fn each_conversation_is_posted_in_order_and_a_posted_row_is_not_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let a1 = store.say(&said("1", "a1")).unwrap();
        let b1 = store.say(&said("2", "b1")).unwrap();
        let a2 = store.say(&said("1", "a2")).unwrap();
        let heads: Vec<i64> = store
            .outbox_heads()
            .unwrap()
            .iter()
            .map(|q| q.seq)
            .collect();
        assert_eq!(heads, [a1, b1], "one head per conversation, oldest first");
        store.outbox_progress(a1, 1).unwrap();
        assert_eq!(
            store
                .outbox_head(&said("1", "").to)
                .unwrap()
                .unwrap()
                .pieces,
            1
        );
        store.outbox_posted(a1, "telegram", Some("77")).unwrap();
        let head = store.outbox_head(&said("1", "").to).unwrap().unwrap();
        assert_eq!((head.seq, head.said.text.as_str()), (a2, "a2"));
        assert_eq!(
            store.outbox_counts().unwrap(),
            OutboxCounts {
                waiting: 2,
                held: 0
            }
        );
    }

    /// The outbox's statements on both backends, run as the Access store runs them.
    #[test]
    fn the_outbox_keeps_order_holds_and_dead_letters_on_both_backends() {
        use crate::state::db::testing::TestDb;
        use crate::state::db::{Behavior, Query, params};
        for db in TestDb::states() {
            let name = db.name();
            let mut c = db.connect();
            let mut conn = c.conn();
            let now = "2026-12-06T01:00:00Z";
            let tx = conn.transaction(Behavior::Write).unwrap();
            let a1 = insert(&tx, &said("1", "a1"), now).unwrap();
            let b1 = insert(&tx, &said("2", "b1"), now).unwrap();
            let a2 = insert(&tx, &said("1", "a2"), now).unwrap();
            tx.commit().unwrap();
            assert!(a1 < b1 && b1 < a2, "{name}: in the order said");
            let heads: Vec<i64> = heads(&conn).unwrap().iter().map(|q| q.seq).collect();
            assert_eq!(heads, [a1, b1], "{name}");
            progress(&conn, a1, 2).unwrap();
            assert_eq!(head(&conn, &said("1", "").to).unwrap().unwrap().pieces, 2);
            posted(&conn, a1, "telegram", Some("77"), now).unwrap();
            assert_eq!(head(&conn, &said("1", "").to).unwrap().unwrap().seq, a2);
            assert!(hold(&conn, b1, "no carrier").unwrap());
            assert!(!hold(&conn, b1, "no carrier").unwrap(), "{name}: held once");
            assert_eq!(
                counts(&conn).unwrap(),
                OutboxCounts {
                    waiting: 1,
                    held: 1
                },
                "{name}"
            );
            let failed = Failed {
                target: "telegram:sendMessage".into(),
                body: "{}".into(),
                attempts: 5,
                error: "HTTP 500".into(),
            };
            let tx = conn.transaction(Behavior::Write).unwrap();
            dead(&tx, b1, "telegram", &failed, now).unwrap();
            tx.commit().unwrap();
            let letters: Vec<(String, String, i64)> = conn
                .query_map(
                    "SELECT message_id, last_error, attempts FROM dead_letters",
                    params![],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            assert_eq!(
                letters,
                [("announce:run-1".into(), "HTTP 500".into(), 5)],
                "{name}"
            );
            assert_eq!(
                said_for(&conn, Cause::Announce, "run-1")
                    .unwrap()
                    .unwrap()
                    .text,
                "a1",
                "{name}: the first said"
            );
            let verdict = Outgoing {
                cause: Cause::TaskVerdict,
                cause_id: "task-1@2026-12-06T01:00:00Z".into(),
                ..said("3", "verdict")
            };
            let seq = insert(&conn, &verdict, now).unwrap();
            assert_eq!(
                task_verdict(&conn, "task-1").unwrap().unwrap().text,
                "verdict"
            );
            assert_eq!(task_verdict(&conn, "task-").unwrap(), None, "{name}");
            posted(&conn, seq, "slack", Some("1700.1"), now).unwrap();
            assert_eq!(
                prompt(&conn, "task-1@2026-12-06T01:00:00Z")
                    .unwrap()
                    .map(|p| p.posted_id),
                Some("1700.1".to_owned()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_held_row_says_why_and_a_dead_one_leaves_a_dead_letter() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let seq = store.say(&said("1", "hello")).unwrap();
        assert!(store.outbox_hold(seq, "no carrier").unwrap());
        assert!(!store.outbox_hold(seq, "no carrier").unwrap(), "said once");
        let head = store.outbox_head(&said("1", "").to).unwrap().unwrap();
        assert_eq!(head.held.as_deref(), Some("no carrier"));
        assert_eq!(store.outbox_counts().unwrap().held, 1);
        let failed = Failed {
            target: "telegram:sendMessage".into(),
            body: "{}".into(),
            attempts: 5,
            error: "HTTP 500".into(),
        };
        store.outbox_dead(seq, "telegram", &failed).unwrap();
        assert_eq!(store.outbox_head(&said("1", "").to).unwrap(), None);
        let letters: Vec<(String, String)> = store
            .db
            .query(|c| {
                c.query_map(
                    "SELECT message_id, last_error FROM dead_letters",
                    params![],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
            })
            .unwrap();
        assert_eq!(letters, [("announce:run-1".into(), "HTTP 500".into())]);
    }
}
