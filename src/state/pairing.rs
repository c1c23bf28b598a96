//! The inbound policy's records (migration 6): pairing requests, approved senders, and group
//! messages kept as context. Both the Access layer (its own connection) and the management
//! service (`deepcli pairing …`, while `deepcli up` runs too) use these functions on the one
//! database, so an approval takes effect with the next message: nothing caches it.
//!
//! The numbers (how long a code lives, how many may wait) are the caller's
//! (`policy::pairing`); this module only keeps the records. Codes are stored, for `pairing
//! list`, and never put into an error message.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use super::{StateError, StateStore};

/// The limits a request is made under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub ttl_secs: i64,
    pub max_pending: usize,
    pub codes_per_sender_per_hour: u32,
}

/// Who asks to pair: a sender of a channel account (normalized channel and account ids).
#[derive(Debug, Clone, Copy)]
pub struct Sender<'a> {
    pub channel: &'a str,
    pub account_id: &'a str,
    pub sender_id: &'a str,
    pub sender_name: Option<&'a str>,
}

/// What asking did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// A new request with `code`, the sender's to hand to the operator.
    Created { code: String, expires_at: i64 },
    /// The sender's request is pending already: its code was given when it was made.
    Pending { expires_at: i64 },
    /// The sender was given as many codes as an hour allows.
    RateLimited { retry_at: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRequest {
    pub channel: String,
    pub account_id: String,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub code: String,
    pub created_at: String,
    /// Unix seconds.
    #[serde(skip)]
    pub expires_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PairedSender {
    pub channel: String,
    pub account_id: String,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub approved_at: String,
}

impl PairedSender {
    /// A row of `channel, account_id, sender_id, sender_name, approved_at`.
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PairedSender> {
        Ok(PairedSender {
            channel: r.get(0)?,
            account_id: r.get(1)?,
            sender_id: r.get(2)?,
            sender_name: r.get(3)?,
            approved_at: r.get(4)?,
        })
    }
}

/// How many wrong codes `approve` takes in a window.
#[derive(Debug, Clone, Copy)]
pub struct Guesses {
    pub max: u32,
    pub window_secs: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    Approved(PairedSender),
    /// No pending request has this code; `left` wrong codes remain in the window.
    Wrong {
        left: u32,
    },
    /// Too many wrong codes: no code is tried before `until` (unix seconds).
    Locked {
        until: i64,
    },
}

/// Asks to pair `who`: the pending request's state, or a new one with `fresh_code` (the
/// oldest pending request of the account dropped past `max_pending`).
pub fn request(
    conn: &mut Connection,
    who: &Sender<'_>,
    fresh_code: &str,
    now: i64,
    limits: &Limits,
) -> rusqlite::Result<Requested> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "DELETE FROM pairing_requests WHERE channel = ?1 AND account_id = ?2 AND expires_at <= ?3",
        params![who.channel, who.account_id, now],
    )?;
    let pending: Option<i64> = tx
        .query_row(
            "SELECT expires_at FROM pairing_requests WHERE channel = ?1 AND account_id = ?2 AND sender_id = ?3",
            params![who.channel, who.account_id, who.sender_id],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(expires_at) = pending {
        return Ok(Requested::Pending { expires_at });
    }
    let hour_ago = now - 3600;
    tx.execute(
        "DELETE FROM pairing_issued WHERE at <= ?1",
        params![hour_ago],
    )?;
    let (issued, first): (u32, Option<i64>) = tx.query_row(
        "SELECT count(*), min(at) FROM pairing_issued WHERE channel = ?1 AND account_id = ?2 AND sender_id = ?3",
        params![who.channel, who.account_id, who.sender_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if issued >= limits.codes_per_sender_per_hour {
        return Ok(Requested::RateLimited {
            retry_at: first.unwrap_or(now) + 3600,
        });
    }
    let waiting: usize = tx.query_row(
        "SELECT count(*) FROM pairing_requests WHERE channel = ?1 AND account_id = ?2",
        params![who.channel, who.account_id],
        |r| r.get(0),
    )?;
    if waiting >= limits.max_pending {
        tx.execute(
            "DELETE FROM pairing_requests WHERE rowid IN (
                 SELECT rowid FROM pairing_requests WHERE channel = ?1 AND account_id = ?2
                 ORDER BY expires_at, rowid LIMIT ?3)",
            params![
                who.channel,
                who.account_id,
                (waiting + 1 - limits.max_pending) as i64
            ],
        )?;
    }
    let expires_at = now + limits.ttl_secs;
    tx.execute(
        "INSERT INTO pairing_requests (channel, account_id, sender_id, sender_name, code, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            who.channel,
            who.account_id,
            who.sender_id,
            who.sender_name,
            fresh_code,
            unix_to_text(now),
            expires_at
        ],
    )?;
    tx.execute(
        "INSERT INTO pairing_issued (channel, account_id, sender_id, at) VALUES (?1, ?2, ?3, ?4)",
        params![who.channel, who.account_id, who.sender_id, now],
    )?;
    tx.commit()?;
    Ok(Requested::Created {
        code: fresh_code.to_string(),
        expires_at,
    })
}

/// Whether the operator approved this sender of this account.
pub fn is_paired(
    conn: &Connection,
    channel: &str,
    account_id: &str,
    sender_id: &str,
) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM paired_senders WHERE channel = ?1 AND account_id = ?2 AND sender_id = ?3",
        params![channel, account_id, sender_id],
        |_| Ok(()),
    )
    .optional()
    .map(|found| found.is_some())
}

/// The pending requests (not expired at `now`), oldest first, of one channel and account if
/// given.
pub fn pending(
    conn: &Connection,
    channel: Option<&str>,
    account_id: Option<&str>,
    now: i64,
) -> rusqlite::Result<Vec<PendingRequest>> {
    let mut stmt = conn.prepare(
        "SELECT channel, account_id, sender_id, sender_name, code, created_at, expires_at
         FROM pairing_requests
         WHERE expires_at > ?1 AND (?2 IS NULL OR channel = ?2) AND (?3 IS NULL OR account_id = ?3)
         ORDER BY channel, account_id, expires_at, rowid",
    )?;
    stmt.query_map(params![now, channel, account_id], |r| {
        Ok(PendingRequest {
            channel: r.get(0)?,
            account_id: r.get(1)?,
            sender_id: r.get(2)?,
            sender_name: r.get(3)?,
            code: r.get(4)?,
            created_at: r.get(5)?,
            expires_at: r.get(6)?,
        })
    })?
    .collect()
}

/// The approved senders, of one channel and account if given.
pub fn paired(
    conn: &Connection,
    channel: Option<&str>,
    account_id: Option<&str>,
) -> rusqlite::Result<Vec<PairedSender>> {
    let mut stmt = conn.prepare(
        "SELECT channel, account_id, sender_id, sender_name, approved_at FROM paired_senders
         WHERE (?1 IS NULL OR channel = ?1) AND (?2 IS NULL OR account_id = ?2)
         ORDER BY channel, account_id, approved_at, sender_id",
    )?;
    stmt.query_map(params![channel, account_id], PairedSender::from_row)?
        .collect()
}

/// Approves the pending request of `channel` (and `account_id`, if given) whose code is
/// `code`: its sender is paired and the request is gone. The code is compared with `same`
/// (constant time) against every pending code, so how long this takes does not tell which
/// letters were right. A wrong code counts against the channel's window.
pub fn approve(
    conn: &mut Connection,
    channel: &str,
    account_id: Option<&str>,
    code: &str,
    now: i64,
    same: fn(&str, &str) -> bool,
    guesses: &Guesses,
) -> rusqlite::Result<Approval> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "DELETE FROM pairing_failures WHERE at <= ?1",
        params![now - guesses.window_secs],
    )?;
    let (failures, first): (u32, Option<i64>) = tx.query_row(
        "SELECT count(*), min(at) FROM pairing_failures WHERE channel = ?1",
        params![channel],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if failures >= guesses.max {
        tx.commit()?;
        return Ok(Approval::Locked {
            until: first.unwrap_or(now) + guesses.window_secs,
        });
    }
    let candidates = {
        let mut stmt = tx.prepare(
            "SELECT account_id, sender_id, sender_name, code FROM pairing_requests
             WHERE channel = ?1 AND expires_at > ?2 AND (?3 IS NULL OR account_id = ?3)",
        )?;
        stmt.query_map(params![channel, now, account_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?
    };
    // Every candidate is compared: no early exit.
    let mut found = None;
    for (account, sender, name, stored) in candidates {
        let hit = same(&stored, code);
        if hit && found.is_none() {
            found = Some((account, sender, name));
        }
    }
    let Some((account, sender, name)) = found else {
        tx.execute(
            "INSERT INTO pairing_failures (channel, at) VALUES (?1, ?2)",
            params![channel, now],
        )?;
        tx.commit()?;
        return Ok(Approval::Wrong {
            left: guesses.max.saturating_sub(failures + 1),
        });
    };
    let approved_at = unix_to_text(now);
    tx.execute(
        "INSERT INTO paired_senders (channel, account_id, sender_id, sender_name, approved_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (channel, account_id, sender_id) DO UPDATE SET sender_name = ?4, approved_at = ?5",
        params![channel, account, sender, name, approved_at],
    )?;
    tx.execute(
        "DELETE FROM pairing_requests WHERE channel = ?1 AND account_id = ?2 AND sender_id = ?3",
        params![channel, account, sender],
    )?;
    tx.commit()?;
    Ok(Approval::Approved(PairedSender {
        channel: channel.to_string(),
        account_id: account,
        sender_id: sender,
        sender_name: name,
        approved_at,
    }))
}

/// Takes back a sender's approval and drops its pending request; returns the approvals
/// removed (one per account).
pub fn revoke(
    conn: &mut Connection,
    channel: &str,
    account_id: Option<&str>,
    sender_id: &str,
) -> rusqlite::Result<Vec<PairedSender>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let removed = {
        let mut stmt = tx.prepare(
            "DELETE FROM paired_senders WHERE channel = ?1 AND sender_id = ?2 AND (?3 IS NULL OR account_id = ?3)
             RETURNING channel, account_id, sender_id, sender_name, approved_at",
        )?;
        stmt.query_map(
            params![channel, sender_id, account_id],
            PairedSender::from_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?
    };
    tx.execute(
        "DELETE FROM pairing_requests WHERE channel = ?1 AND sender_id = ?2 AND (?3 IS NULL OR account_id = ?3)",
        params![channel, sender_id, account_id],
    )?;
    tx.commit()?;
    Ok(removed)
}

/// A group message kept as context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptMessage {
    pub id: i64,
    pub message_id: String,
    /// The envelope's `sender` as JSON.
    pub sender: Option<String>,
    pub text: String,
    pub at: String,
}

/// Keeps a gated message for `session_key`, and at most `limit` of them (the oldest go).
pub fn keep(
    conn: &mut Connection,
    session_key: &str,
    message_id: &str,
    sender: Option<&str>,
    text: &str,
    limit: u32,
) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if limit > 0 {
        tx.execute(
            "INSERT INTO kept_context (session_key, message_id, sender, text, at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![session_key, message_id, sender, text, crate::clock::now()],
        )?;
    }
    tx.execute(
        "DELETE FROM kept_context WHERE session_key = ?1 AND id NOT IN (
             SELECT id FROM kept_context WHERE session_key = ?1 ORDER BY id DESC LIMIT ?2)",
        params![session_key, i64::from(limit)],
    )?;
    tx.commit()
}

/// The messages kept for `session_key`, oldest first.
pub fn kept(conn: &Connection, session_key: &str) -> rusqlite::Result<Vec<KeptMessage>> {
    let mut stmt = conn.prepare(
        "SELECT id, message_id, sender, text, at FROM kept_context WHERE session_key = ?1 ORDER BY id",
    )?;
    stmt.query_map([session_key], |r| {
        Ok(KeptMessage {
            id: r.get(0)?,
            message_id: r.get(1)?,
            sender: r.get(2)?,
            text: r.get(3)?,
            at: r.get(4)?,
        })
    })?
    .collect()
}

/// The sessions that have kept messages.
pub fn sessions_with_kept(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT DISTINCT session_key FROM kept_context")?;
    stmt.query_map([], |r| r.get(0))?.collect()
}

/// Forgets the kept messages of `session_key` up to `last_id` (those given to the agent).
pub fn forget_kept(conn: &Connection, session_key: &str, last_id: i64) -> rusqlite::Result<()> {
    conn.execute(
        "DELETE FROM kept_context WHERE session_key = ?1 AND id <= ?2",
        params![session_key, last_id],
    )
    .map(drop)
}

/// Whether the agent answered in the session `session_key` (a thread's): its transcript has a
/// reply.
pub fn answered_in(conn: &Connection, session_key: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM transcript WHERE session_key = ?1 AND provenance = 'agent' LIMIT 1",
        [session_key],
        |_| Ok(()),
    )
    .optional()
    .map(|found| found.is_some())
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Unix seconds as deepcli writes times (RFC 3339 UTC, seconds).
pub fn unix_to_text(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl StateStore {
    /// The pending pairing requests and the approved senders.
    pub fn pairing(
        &self,
        channel: Option<&str>,
        account_id: Option<&str>,
        now: i64,
    ) -> Result<(Vec<PendingRequest>, Vec<PairedSender>), StateError> {
        let pending = pending(&self.conn, channel, account_id, now).map_err(|e| self.sql(e))?;
        let paired = paired(&self.conn, channel, account_id).map_err(|e| self.sql(e))?;
        Ok((pending, paired))
    }

    pub fn pairing_approve(
        &mut self,
        channel: &str,
        account_id: Option<&str>,
        code: &str,
        now: i64,
        same: fn(&str, &str) -> bool,
        guesses: &Guesses,
    ) -> Result<Approval, StateError> {
        let path = self.dir.db();
        approve(
            &mut self.conn,
            channel,
            account_id,
            code,
            now,
            same,
            guesses,
        )
        .map_err(|e| super::sql_error(path, e))
    }

    pub fn pairing_revoke(
        &mut self,
        channel: &str,
        account_id: Option<&str>,
        sender_id: &str,
    ) -> Result<Vec<PairedSender>, StateError> {
        let path = self.dir.db();
        revoke(&mut self.conn, channel, account_id, sender_id)
            .map_err(|e| super::sql_error(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        ttl_secs: 3600,
        max_pending: 3,
        codes_per_sender_per_hour: 3,
    };
    const GUESSES: Guesses = Guesses {
        max: 3,
        window_secs: 600,
    };

    fn store() -> (tempfile::TempDir, StateStore) {
        let tmp = tempfile::tempdir().unwrap();
        let store = StateStore::open(&super::super::StateDir::new(tmp.path())).unwrap();
        (tmp, store)
    }

    fn who(sender: &str) -> Sender<'_> {
        Sender {
            channel: "telegram",
            account_id: "default",
            sender_id: sender,
            sender_name: Some("Ada"),
        }
    }

    fn eq(a: &str, b: &str) -> bool {
        a == b
    }

    #[test]
    fn a_sender_keeps_its_code_until_it_expires() {
        let (_tmp, mut s) = store();
        let t = 1_000_000;
        let first = request(&mut s.conn, &who("u1"), "AAAAAAAA", t, &LIMITS).unwrap();
        assert_eq!(
            first,
            Requested::Created {
                code: "AAAAAAAA".into(),
                expires_at: t + 3600
            }
        );
        let again = request(&mut s.conn, &who("u1"), "BBBBBBBB", t + 10, &LIMITS).unwrap();
        assert_eq!(
            again,
            Requested::Pending {
                expires_at: t + 3600
            }
        );
        // Expired: a new code.
        let later = request(&mut s.conn, &who("u1"), "CCCCCCCC", t + 3600, &LIMITS).unwrap();
        assert!(matches!(later, Requested::Created { ref code, .. } if code == "CCCCCCCC"));
        assert_eq!(pending(&s.conn, None, None, t + 3600).unwrap().len(), 1);
    }

    #[test]
    fn at_most_three_wait_per_account_and_the_oldest_goes() {
        let (_tmp, mut s) = store();
        let t = 1_000_000;
        for (i, sender) in ["u1", "u2", "u3", "u4"].iter().enumerate() {
            request(
                &mut s.conn,
                &who(sender),
                &format!("CODE000{i}"),
                t + i as i64,
                &LIMITS,
            )
            .unwrap();
        }
        let waiting: Vec<String> = pending(&s.conn, Some("telegram"), Some("default"), t + 5)
            .unwrap()
            .into_iter()
            .map(|p| p.sender_id)
            .collect();
        assert_eq!(waiting, ["u2", "u3", "u4"]);
        // Another account has its own three.
        let other = Sender {
            account_id: "work",
            ..who("u1")
        };
        request(&mut s.conn, &other, "WORK0000", t, &LIMITS).unwrap();
        assert_eq!(pending(&s.conn, None, None, t + 5).unwrap().len(), 4);
    }

    #[test]
    fn one_sender_gets_at_most_three_codes_an_hour() {
        let (_tmp, mut s) = store();
        let t = 1_000_000;
        let crowd = ["x1", "x2", "x3"];
        for round in 0..3 {
            let made = request(
                &mut s.conn,
                &who("u1"),
                &format!("U1CODE0{round}"),
                t + round,
                &LIMITS,
            )
            .unwrap();
            assert!(matches!(made, Requested::Created { .. }), "{made:?}");
            // Three others push u1's request out.
            for (i, x) in crowd.iter().enumerate() {
                request(
                    &mut s.conn,
                    &who(x),
                    &format!("X{round}{i}CODE0"),
                    t + round,
                    &LIMITS,
                )
                .unwrap();
                s.conn
                    .execute("DELETE FROM pairing_requests WHERE sender_id = ?1", [x])
                    .unwrap();
            }
            s.conn
                .execute("DELETE FROM pairing_requests WHERE sender_id = 'u1'", [])
                .unwrap();
        }
        let limited = request(&mut s.conn, &who("u1"), "U1CODE03", t + 10, &LIMITS).unwrap();
        assert_eq!(limited, Requested::RateLimited { retry_at: t + 3600 });
        let after = request(&mut s.conn, &who("u1"), "U1CODE04", t + 3601, &LIMITS).unwrap();
        assert!(matches!(after, Requested::Created { .. }));
    }

    #[test]
    fn approving_pairs_the_sender_and_wrong_codes_lock_the_channel_for_a_while() {
        let (_tmp, mut s) = store();
        let t = 1_000_000;
        request(&mut s.conn, &who("u1"), "GOODCODE", t, &LIMITS).unwrap();
        assert!(!is_paired(&s.conn, "telegram", "default", "u1").unwrap());
        for left in [2, 1, 0] {
            let wrong =
                approve(&mut s.conn, "telegram", None, "BADCODE0", t, eq, &GUESSES).unwrap();
            assert_eq!(wrong, Approval::Wrong { left });
        }
        // Locked: even the right code is not tried.
        let locked = approve(
            &mut s.conn,
            "telegram",
            None,
            "GOODCODE",
            t + 1,
            eq,
            &GUESSES,
        )
        .unwrap();
        assert_eq!(locked, Approval::Locked { until: t + 600 });
        let ok = approve(
            &mut s.conn,
            "telegram",
            None,
            "GOODCODE",
            t + 600,
            eq,
            &GUESSES,
        )
        .unwrap();
        let Approval::Approved(paired) = ok else {
            panic!("{ok:?}")
        };
        assert_eq!(
            (paired.account_id.as_str(), paired.sender_id.as_str()),
            ("default", "u1")
        );
        assert!(is_paired(&s.conn, "telegram", "default", "u1").unwrap());
        assert!(pending(&s.conn, None, None, t + 600).unwrap().is_empty());
        // An expired code cannot be approved.
        request(&mut s.conn, &who("u2"), "LATECODE", t, &LIMITS).unwrap();
        let late = approve(
            &mut s.conn,
            "telegram",
            None,
            "LATECODE",
            t + 3600,
            eq,
            &GUESSES,
        )
        .unwrap();
        assert!(matches!(late, Approval::Wrong { .. }));
        let gone = revoke(&mut s.conn, "telegram", None, "u1").unwrap();
        assert_eq!(gone.len(), 1);
        assert!(!is_paired(&s.conn, "telegram", "default", "u1").unwrap());
    }

    #[test]
    fn kept_context_is_bounded_per_session_and_forgotten_once_given() {
        let (_tmp, mut s) = store();
        for i in 0..5 {
            keep(
                &mut s.conn,
                "k",
                &format!("m{i}"),
                None,
                &format!("t{i}"),
                3,
            )
            .unwrap();
        }
        keep(&mut s.conn, "other", "m", None, "x", 3).unwrap();
        let rows = kept(&s.conn, "k").unwrap();
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["t2", "t3", "t4"]);
        forget_kept(&s.conn, "k", rows[1].id).unwrap();
        assert_eq!(kept(&s.conn, "k").unwrap().len(), 1);
        assert_eq!(kept(&s.conn, "other").unwrap().len(), 1);
        // historyLimit 0 keeps nothing.
        keep(&mut s.conn, "none", "m", None, "x", 0).unwrap();
        assert!(kept(&s.conn, "none").unwrap().is_empty());
    }
}
