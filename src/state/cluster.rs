//! The replicas of a hub on one state, and the claims each holds (migration 28, `cluster.sql`;
//! docs/scale-out.md): the leadership, an agent's runtime, a platform account's connection,
//! each held by one replica at a time for a while, renewed while it lives, taken over by
//! another when it is not.
//!
//! Every function runs on the backend seam ([`db`]), so on SQLite and PostgreSQL alike. Times
//! are the state's clock ([`now_ms`]): replicas on hosts whose clocks differ still agree on
//! when a claim expires.
//!
//! A claim carries a **fencing token**, from one counter that only grows: a replica that takes
//! a claim gets a new one, a replica that renews its own keeps it. A write made on behalf of a
//! claim calls [`check_fence`] in its own transaction (which holds the state's write lock):
//! a replica that was frozen past its claim's time, and whose claim another took meanwhile,
//! is refused, whatever it believes.

use super::db::{self, Backend, Behavior, Conn, DbResult, Optional, Query, Tx, params};

/// What a claim is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClaimKind {
    /// The replica that applies the configuration and publishes each generation (name `""`).
    Leader,
    /// An agent's runtime (name: the agent's id).
    Agent,
    /// A platform account's connection (name: `<channel>/<accountId>`).
    Account,
}

impl ClaimKind {
    fn as_str(self) -> &'static str {
        match self {
            ClaimKind::Leader => "leader",
            ClaimKind::Agent => "agent",
            ClaimKind::Account => "account",
        }
    }

    fn parse(text: &str) -> Option<ClaimKind> {
        [ClaimKind::Leader, ClaimKind::Agent, ClaimKind::Account]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// A claim held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub holder: String,
    pub token: i64,
    pub expires_ms: i64,
}

/// A replica as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replica {
    pub id: String,
    pub url: String,
    pub started_ms: i64,
    pub seen_ms: i64,
}

/// The state's clock: milliseconds since 1970, as the database's host reads them.
pub(crate) fn now_ms(db: &impl Query) -> DbResult<i64> {
    let sql = match db.backend() {
        Backend::Sqlite => "SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        Backend::Postgres => "SELECT CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)",
    };
    db.query_row(sql, params![], |r| r.get(0))
}

/// Records that replica `id` runs and is reached at `url`: a new row, or its row renewed.
/// `joined`: it has just started (its start time is now).
pub(crate) fn heartbeat(conn: &mut Conn<'_>, id: &str, url: &str, joined: bool) -> DbResult<()> {
    let tx = conn.transaction(Behavior::Write)?;
    let now = now_ms(&tx)?;
    tx.execute(
        "INSERT INTO replicas (id, url, started_ms, seen_ms) VALUES (?1, ?2, ?3, ?3)
         ON CONFLICT (id) DO UPDATE SET url = excluded.url, seen_ms = excluded.seen_ms,
             started_ms = CASE WHEN ?4 THEN excluded.started_ms ELSE replicas.started_ms END",
        params![id, url, now, joined],
    )?;
    tx.commit()
}

/// The replicas seen within `within_ms`, by id.
pub(crate) fn replicas(db: &impl Query, within_ms: i64) -> DbResult<Vec<Replica>> {
    let now = now_ms(db)?;
    db.query_map(
        "SELECT id, url, started_ms, seen_ms FROM replicas WHERE seen_ms >= ?1 ORDER BY id",
        params![now - within_ms],
        |r| {
            Ok(Replica {
                id: r.get(0)?,
                url: r.get(1)?,
                started_ms: r.get(2)?,
                seen_ms: r.get(3)?,
            })
        },
    )
}

/// A replica that stops: its row and every claim it holds go, so the others take them at once
/// rather than after they expire.
pub(crate) fn leave(conn: &mut Conn<'_>, id: &str) -> DbResult<()> {
    let tx = conn.transaction(Behavior::Write)?;
    tx.execute("DELETE FROM claims WHERE holder = ?1", params![id])?;
    tx.execute("DELETE FROM replicas WHERE id = ?1", params![id])?;
    tx.commit()
}

/// Takes the claim `(kind, name)` for `holder` for `ttl_ms`, or renews it if `holder` has it:
/// `Some` with the claim now held (a new token when it changed hands, the same when renewed);
/// `None` when another holds it unexpired (it is left alone).
pub(crate) fn claim(
    conn: &mut Conn<'_>,
    kind: ClaimKind,
    name: &str,
    holder: &str,
    ttl_ms: i64,
) -> DbResult<Option<Claim>> {
    let tx = conn.transaction(Behavior::Write)?;
    let now = now_ms(&tx)?;
    let current = held(&tx, kind, name)?;
    let token = match current {
        Some(c) if c.holder != holder && c.expires_ms > now => return Ok(None),
        // Renewed by a holder whose claim had not expired: the same token. One that had
        // expired may have been taken and given back meanwhile: a new one, so a write that
        // believed the old claim is refused.
        Some(c) if c.holder == holder && c.expires_ms > now => c.token,
        _ => next_token(&tx)?,
    };
    let expires_ms = now + ttl_ms;
    tx.execute(
        "INSERT INTO claims (kind, name, holder, token, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (kind, name) DO UPDATE SET holder = excluded.holder, token = excluded.token,
             expires_ms = excluded.expires_ms",
        params![kind.as_str(), name, holder, token, expires_ms],
    )?;
    tx.commit()?;
    Ok(Some(Claim {
        holder: holder.to_owned(),
        token,
        expires_ms,
    }))
}

/// Renews, in one statement, every claim `holder` has that has not expired: the claims it
/// still holds, by kind and name, with their tokens (unchanged). What expired is not renewed:
/// [`claim`] takes it again, with a new token.
pub(crate) fn renew_all(
    conn: &mut Conn<'_>,
    holder: &str,
    ttl_ms: i64,
) -> DbResult<std::collections::HashMap<(ClaimKind, String), i64>> {
    let tx = conn.transaction(Behavior::Write)?;
    let now = now_ms(&tx)?;
    let renewed = tx.query_map(
        "UPDATE claims SET expires_ms = ?3 WHERE holder = ?1 AND expires_ms > ?2
         RETURNING kind, name, token",
        params![holder, now, now + ttl_ms],
        |r| Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<i64>(2)?)),
    )?;
    tx.commit()?;
    Ok(renewed
        .into_iter()
        .filter_map(|(kind, name, token)| Some(((ClaimKind::parse(&kind)?, name), token)))
        .collect())
}

fn next_token(tx: &Tx<'_>) -> DbResult<i64> {
    tx.query_row(
        "UPDATE fencing SET last = last + 1 WHERE id = 1 RETURNING last",
        params![],
        |r| r.get(0),
    )
}

/// Gives a claim back, if `holder` still holds it with `token`.
pub(crate) fn release(
    conn: &mut Conn<'_>,
    kind: ClaimKind,
    name: &str,
    holder: &str,
    token: i64,
) -> DbResult<bool> {
    let tx = conn.transaction(Behavior::Write)?;
    let gone = tx.execute(
        "DELETE FROM claims WHERE kind = ?1 AND name = ?2 AND holder = ?3 AND token = ?4",
        params![kind.as_str(), name, holder, token],
    )?;
    tx.commit()?;
    Ok(gone == 1)
}

/// Who holds `(kind, name)` now, expired or not.
pub(crate) fn held(db: &impl Query, kind: ClaimKind, name: &str) -> DbResult<Option<Claim>> {
    db.query_row(
        "SELECT holder, token, expires_ms FROM claims WHERE kind = ?1 AND name = ?2",
        params![kind.as_str(), name],
        |r| {
            Ok(Claim {
                holder: r.get(0)?,
                token: r.get(1)?,
                expires_ms: r.get(2)?,
            })
        },
    )
    .optional()
}

/// Every claim of a kind, by name: who runs which agent, who holds which account.
pub(crate) fn claims(db: &impl Query, kind: ClaimKind) -> DbResult<Vec<(String, Claim)>> {
    db.query_map(
        "SELECT name, holder, token, expires_ms FROM claims WHERE kind = ?1 ORDER BY name",
        params![kind.as_str()],
        |r| {
            Ok((
                r.get(0)?,
                Claim {
                    holder: r.get(1)?,
                    token: r.get(2)?,
                    expires_ms: r.get(3)?,
                },
            ))
        },
    )
}

/// The fence of a write made for a claim, in the write's own transaction: `Err(Fenced)` unless
/// `holder` still holds `(kind, name)` with `token`, unexpired. The transaction must be one
/// that writes ([`Behavior::Write`]): no other replica can take the claim before it commits.
pub(crate) fn check_fence(
    tx: &Tx<'_>,
    kind: ClaimKind,
    name: &str,
    holder: &str,
    token: i64,
) -> DbResult<()> {
    let now = now_ms(tx)?;
    match held(tx, kind, name)? {
        Some(c) if c.holder == holder && c.token == token && c.expires_ms > now => Ok(()),
        found => Err(db::DbError::Fenced(fenced(
            kind, name, holder, token, found,
        ))),
    }
}

/// The leader's record of what it published (`meta` key `key`), written only while `holder`
/// holds the lead with `token`.
pub(crate) fn publish(
    conn: &mut Conn<'_>,
    holder: &str,
    token: i64,
    key: &str,
    value: &str,
) -> DbResult<()> {
    let tx = conn.transaction(Behavior::Write)?;
    check_fence(&tx, ClaimKind::Leader, "", holder, token)?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    tx.commit()
}

/// What the leader last published under `key`.
pub(crate) fn published(db: &impl Query, key: &str) -> DbResult<Option<String>> {
    db.query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
        r.get(0)
    })
    .optional()
}

/// Who holds `(kind, name)` now, unexpired, and the URL that replica advertises.
pub(crate) fn holder_at(
    db: &impl Query,
    kind: ClaimKind,
    name: &str,
) -> DbResult<Option<(Claim, String)>> {
    let now = now_ms(db)?;
    db.query_row(
        "SELECT c.holder, c.token, c.expires_ms, r.url FROM claims c JOIN replicas r ON r.id = c.holder
         WHERE c.kind = ?1 AND c.name = ?2 AND c.expires_ms > ?3",
        params![kind.as_str(), name, now],
        |r| {
            Ok((
                Claim {
                    holder: r.get(0)?,
                    token: r.get(1)?,
                    expires_ms: r.get(2)?,
                },
                r.get(3)?,
            ))
        },
    )
    .optional()
}

fn fenced(kind: ClaimKind, name: &str, holder: &str, token: i64, found: Option<Claim>) -> String {
    let now = match found {
        Some(c) if c.holder == holder && c.token == token => "it expired".to_owned(),
        Some(c) => format!("{} holds it now (token {})", c.holder, c.token),
        None => "nobody holds it now".to_owned(),
    };
    format!(
        "fenced: replica {holder} wrote for the {} claim `{name}` with token {token}, but {now}",
        kind.as_str()
    )
}

#[cfg(test)]
mod tests;
