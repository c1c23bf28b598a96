//! The inbound policy's records (migration 6): pairing requests, approved senders, and group
//! messages kept as context. Both the Access layer (its own connection) and the management
//! service (`deepcli pairing …`, while `deepcli up` runs too) use these functions on the one
//! database, so an approval takes effect with the next message: nothing caches it.
//!
//! The numbers (how long a code lives, how many may wait) are the caller's
//! (`policy::pairing`); this module only keeps the records. Codes are stored, for `pairing
//! list`, and never put into an error message.

use super::db::{Behavior, Conn, DbResult, Optional, Query, Row, params};
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
    fn from_row(r: &Row<'_>) -> DbResult<PairedSender> {
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
pub(crate) fn request(
    conn: &mut Conn<'_>,
    who: &Sender<'_>,
    fresh_code: &str,
    now: i64,
    limits: &Limits,
) -> DbResult<Requested> {
    let tx = conn.transaction(Behavior::Write)?;
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
                waiting + 1 - limits.max_pending
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
pub(crate) fn is_paired(
    conn: &impl Query,
    channel: &str,
    account_id: &str,
    sender_id: &str,
) -> DbResult<bool> {
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
pub(crate) fn pending(
    conn: &impl Query,
    channel: Option<&str>,
    account_id: Option<&str>,
    now: i64,
) -> DbResult<Vec<PendingRequest>> {
    conn.query_map(
        "SELECT channel, account_id, sender_id, sender_name, code, created_at, expires_at
         FROM pairing_requests
         WHERE expires_at > ?1 AND (CAST(?2 AS TEXT) IS NULL OR channel = ?2) AND (CAST(?3 AS TEXT) IS NULL OR account_id = ?3)
         ORDER BY channel, account_id, expires_at, rowid",
        params![now, channel, account_id],
        |r| {
            Ok(PendingRequest {
                channel: r.get(0)?,
                account_id: r.get(1)?,
                sender_id: r.get(2)?,
                sender_name: r.get(3)?,
                code: r.get(4)?,
                created_at: r.get(5)?,
                expires_at: r.get(6)?,
            })
        },
    )
}

/// The approved senders, of one channel and account if given.
pub(crate) fn paired(
    conn: &impl Query,
    channel: Option<&str>,
    account_id: Option<&str>,
) -> DbResult<Vec<PairedSender>> {
    conn.query_map(
        "SELECT channel, account_id, sender_id, sender_name, approved_at FROM paired_senders
         WHERE (CAST(?1 AS TEXT) IS NULL OR channel = ?1) AND (CAST(?2 AS TEXT) IS NULL OR account_id = ?2)
         ORDER BY channel, account_id, approved_at, sender_id",
        params![channel, account_id],
        PairedSender::from_row,
    )
}

/// Approves the pending request of `channel` (and `account_id`, if given) whose code is
/// `code`: its sender is paired and the request is gone. The code is compared with `same`
/// (constant time) against every pending code, so how long this takes does not tell which
/// letters were right. A wrong code counts against the channel's window.
pub(crate) fn approve(
    conn: &mut Conn<'_>,
    channel: &str,
    account_id: Option<&str>,
    code: &str,
    now: i64,
    same: fn(&str, &str) -> bool,
    guesses: &Guesses,
) -> DbResult<Approval> {
    let tx = conn.transaction(Behavior::Write)?;
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
    let candidates = tx.query_map(
        "SELECT account_id, sender_id, sender_name, code FROM pairing_requests
         WHERE channel = ?1 AND expires_at > ?2 AND (CAST(?3 AS TEXT) IS NULL OR account_id = ?3)",
        params![channel, now, account_id],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<Option<String>>(2)?,
                r.get::<String>(3)?,
            ))
        },
    )?;
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
pub(crate) fn revoke(
    conn: &mut Conn<'_>,
    channel: &str,
    account_id: Option<&str>,
    sender_id: &str,
) -> DbResult<Vec<PairedSender>> {
    let tx = conn.transaction(Behavior::Write)?;
    let removed = tx.query_map(
        "DELETE FROM paired_senders WHERE channel = ?1 AND sender_id = ?2 AND (CAST(?3 AS TEXT) IS NULL OR account_id = ?3)
         RETURNING channel, account_id, sender_id, sender_name, approved_at",
        params![channel, sender_id, account_id],
        PairedSender::from_row,
    )?;
    tx.execute(
        "DELETE FROM pairing_requests WHERE channel = ?1 AND sender_id = ?2 AND (CAST(?3 AS TEXT) IS NULL OR account_id = ?3)",
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
pub(crate) fn keep(
    conn: &mut Conn<'_>,
    session_key: &str,
    message_id: &str,
    sender: Option<&str>,
    text: &str,
    limit: u32,
) -> DbResult<()> {
    let tx = conn.transaction(Behavior::Write)?;
    if limit > 0 {
        tx.execute(
            "INSERT INTO kept_context (session_key, message_id, sender, text, at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![session_key, message_id, sender, text, crate::clock::now()],
        )?;
    }
    tx.execute(
        "DELETE FROM kept_context WHERE session_key = ?1 AND id NOT IN (
             SELECT id FROM kept_context WHERE session_key = ?1 ORDER BY id DESC LIMIT ?2)",
        params![session_key, limit],
    )?;
    tx.commit()
}

/// The messages kept for `session_key`, oldest first.
pub(crate) fn kept(conn: &impl Query, session_key: &str) -> DbResult<Vec<KeptMessage>> {
    conn.query_map(
        "SELECT id, message_id, sender, text, at FROM kept_context WHERE session_key = ?1 ORDER BY id",
        params![session_key],
        |r| {
            Ok(KeptMessage {
                id: r.get(0)?,
                message_id: r.get(1)?,
                sender: r.get(2)?,
                text: r.get(3)?,
                at: r.get(4)?,
            })
        },
    )
}

/// The sessions that have kept messages.
pub(crate) fn sessions_with_kept(conn: &impl Query) -> DbResult<Vec<String>> {
    conn.query_map(
        "SELECT DISTINCT session_key FROM kept_context",
        params![],
        |r| r.get(0),
    )
}

/// Forgets the kept messages of `session_key` up to `last_id` (those given to the agent).
pub(crate) fn forget_kept(conn: &impl Query, session_key: &str, last_id: i64) -> DbResult<()> {
    conn.execute(
        "DELETE FROM kept_context WHERE session_key = ?1 AND id <= ?2",
        params![session_key, last_id],
    )
    .map(drop)
}

/// Whether the agent answered in the session `session_key` (a thread's): its transcript has a
/// reply.
pub(crate) fn answered_in(conn: &impl Query, session_key: &str) -> DbResult<bool> {
    conn.query_row(
        "SELECT 1 FROM transcript WHERE session_key = ?1 AND provenance = 'agent' LIMIT 1",
        params![session_key],
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
        let pending = pending(&self.db, channel, account_id, now).map_err(|e| self.db(e))?;
        let paired = paired(&self.db, channel, account_id).map_err(|e| self.db(e))?;
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
        approve(
            &mut self.db.conn(),
            channel,
            account_id,
            code,
            now,
            same,
            guesses,
        )
        .map_err(|e| self.db(e))
    }

    pub fn pairing_revoke(
        &mut self,
        channel: &str,
        account_id: Option<&str>,
        sender_id: &str,
    ) -> Result<Vec<PairedSender>, StateError> {
        revoke(&mut self.db.conn(), channel, account_id, sender_id).map_err(|e| self.db(e))
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

    /// Runs `test` on a new state on each backend.
    fn each(test: impl Fn(&mut Conn<'_>)) {
        for db in crate::state::db::testing::TestDb::states() {
            let mut conn = db.connect();
            test(&mut conn.conn());
        }
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
        each(|c| {
            let t = 1_000_000;
            let first = request(c, &who("u1"), "AAAAAAAA", t, &LIMITS).unwrap();
            assert_eq!(
                first,
                Requested::Created {
                    code: "AAAAAAAA".into(),
                    expires_at: t + 3600
                }
            );
            let again = request(c, &who("u1"), "BBBBBBBB", t + 10, &LIMITS).unwrap();
            assert_eq!(
                again,
                Requested::Pending {
                    expires_at: t + 3600
                }
            );
            // Expired: a new code.
            let later = request(c, &who("u1"), "CCCCCCCC", t + 3600, &LIMITS).unwrap();
            assert!(matches!(later, Requested::Created { ref code, .. } if code == "CCCCCCCC"));
            assert_eq!(pending(&*c, None, None, t + 3600).unwrap().len(), 1);
        });
    }

    #[test]
    fn at_most_three_wait_per_account_and_the_oldest_goes() {
        each(|c| {
            let t = 1_000_000;
            for (i, sender) in ["u1", "u2", "u3", "u4"].iter().enumerate() {
                request(
                    c,
                    &who(sender),
                    &format!("CODE000{i}"),
                    t + i as i64,
                    &LIMITS,
                )
                .unwrap();
            }
            let waiting: Vec<String> = pending(&*c, Some("telegram"), Some("default"), t + 5)
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
            request(c, &other, "WORK0000", t, &LIMITS).unwrap();
            assert_eq!(pending(&*c, None, None, t + 5).unwrap().len(), 4);
        });
    }

    #[test]
    fn one_sender_gets_at_most_three_codes_an_hour() {
        each(|c| {
            let t = 1_000_000;
            let crowd = ["x1", "x2", "x3"];
            for round in 0..3 {
                let made = request(
                    c,
                    &who("u1"),
                    &format!("U1CODE0{round}"),
                    t + round,
                    &LIMITS,
                )
                .unwrap();
                assert!(matches!(made, Requested::Created { .. }), "{made:?}");
                // Three others push u1's request out.
                for (i, x) in crowd.iter().enumerate() {
                    request(c, &who(x), &format!("X{round}{i}CODE0"), t + round, &LIMITS).unwrap();
                    c.execute(
                        "DELETE FROM pairing_requests WHERE sender_id = ?1",
                        params![x],
                    )
                    .unwrap();
                }
                c.execute(
                    "DELETE FROM pairing_requests WHERE sender_id = 'u1'",
                    params![],
                )
                .unwrap();
            }
            let limited = request(c, &who("u1"), "U1CODE03", t + 10, &LIMITS).unwrap();
            assert_eq!(limited, Requested::RateLimited { retry_at: t + 3600 });
            let after = request(c, &who("u1"), "U1CODE04", t + 3601, &LIMITS).unwrap();
            assert!(matches!(after, Requested::Created { .. }));
        });
    }

    #[test]
    fn approving_pairs_the_sender_and_wrong_codes_lock_the_channel_for_a_while() {
        each(|c| {
            let t = 1_000_000;
            request(c, &who("u1"), "GOODCODE", t, &LIMITS).unwrap();
            assert!(!is_paired(&*c, "telegram", "default", "u1").unwrap());
            for left in [2, 1, 0] {
                let wrong = approve(c, "telegram", None, "BADCODE0", t, eq, &GUESSES).unwrap();
                assert_eq!(wrong, Approval::Wrong { left });
            }
            // Locked: even the right code is not tried.
            let locked = approve(c, "telegram", None, "GOODCODE", t + 1, eq, &GUESSES).unwrap();
            assert_eq!(locked, Approval::Locked { until: t + 600 });
            let ok = approve(c, "telegram", None, "GOODCODE", t + 600, eq, &GUESSES).unwrap();
            let Approval::Approved(paired) = ok else {
                panic!("{ok:?}")
            };
            assert_eq!(
                (paired.account_id.as_str(), paired.sender_id.as_str()),
                ("default", "u1")
            );
            assert!(is_paired(&*c, "telegram", "default", "u1").unwrap());
            assert!(pending(&*c, None, None, t + 600).unwrap().is_empty());
            // An expired code cannot be approved.
            request(c, &who("u2"), "LATECODE", t, &LIMITS).unwrap();
            let late = approve(c, "telegram", None, "LATECODE", t + 3600, eq, &GUESSES).unwrap();
            assert!(matches!(late, Approval::Wrong { .. }));
            let gone = revoke(c, "telegram", None, "u1").unwrap();
            assert_eq!(gone.len(), 1);
            assert!(!is_paired(&*c, "telegram", "default", "u1").unwrap());
        });
    }

    #[test]
    fn kept_context_is_bounded_per_session_and_forgotten_once_given() {
        each(|c| {
            for i in 0..5 {
                keep(c, "k", &format!("m{i}"), None, &format!("t{i}"), 3).unwrap();
            }
            keep(c, "other", "m", None, "x", 3).unwrap();
            let rows = kept(&*c, "k").unwrap();
            let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
            assert_eq!(texts, ["t2", "t3", "t4"]);
            forget_kept(&*c, "k", rows[1].id).unwrap();
            assert_eq!(kept(&*c, "k").unwrap().len(), 1);
            assert_eq!(kept(&*c, "other").unwrap().len(), 1);
            // historyLimit 0 keeps nothing.
            keep(c, "none", "m", None, "x", 0).unwrap();
            assert!(kept(&*c, "none").unwrap().is_empty());
        });
    }
}
