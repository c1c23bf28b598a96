//! The approvals' rows (migration 10): each request with what happened to it, its events in
//! order, and the `allow_always` rules. Only the rows: who may decide, and what a decision
//! does, is the `approvals` module's.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use super::{ApprovalSource, ApprovalState, LayerConnection, StateDir, StateError};

/// An approval as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    pub id: String,
    pub source: ApprovalSource,
    pub agent_id: String,
    pub session_key: Option<String>,
    pub runtime_session_id: Option<String>,
    pub run_id: Option<String>,
    pub requester: Value,
    pub action: Value,
    pub content_hash: String,
    pub options: Value,
    pub policy_hash: String,
    pub route: String,
    pub origin: Option<Value>,
    pub state: ApprovalState,
    pub created_at: String,
    pub expires_at: String,
    pub decided_at: Option<String>,
    pub decided_by: Option<String>,
    pub decision: Option<String>,
    pub note: String,
    /// A management request: what approving it would write, as the person deciding is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<ManagementPreview>,
}

/// What a management request would change, worked out when it is asked (the management
/// service's own `dryRun`), shown wherever a person decides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagementPreview {
    /// The files it would change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Their unified diff (empty: nothing would change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Why there is no diff: the dry run failed (approving it would write nothing), or the
    /// method writes no config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What it touches beyond the requesting agent: another agent's runtime, secrets or
    /// channels, channel accounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// One thing that happened to an approval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalEvent {
    pub at: String,
    pub event: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// An `allow_always` rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRule {
    pub id: String,
    pub agent_id: String,
    pub tool_kind: String,
    /// The title (`titleMatch: exact`) or the operator's pattern (`pattern`).
    pub title_pattern: String,
    pub title_match: super::TitleMatch,
    /// The shape of the raw input of the request it answered (JSON: keys and value types), or
    /// `None` when that request had no raw input: only requests of the same shape match.
    pub input_shape: Option<String>,
    pub created_at: String,
    pub created_by: String,
    pub approval_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<String>,
}

/// What a decision found.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// It was pending and is now decided (the record after).
    Done(ApprovalRecord),
    /// It was decided, expired or voided before (the record as it is).
    AlreadyFinal(ApprovalRecord),
    Missing,
}

const COLUMNS: &str = "id, source, agent_id, session_key, runtime_session_id, run_id, requester, action, content_hash, options, policy_hash, route, origin, state, created_at, expires_at, decided_at, decided_by, decision, note, preview";
const RULE_COLUMNS: &str = "id, agent_id, tool_kind, title_pattern, created_at, created_by, approval_id, revoked_at, revoked_by, title_match, input_shape";

fn json_col(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Value> {
    let text: String = r.get(i)?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    let origin: Option<String> = r.get(12)?;
    Ok(ApprovalRecord {
        id: r.get(0)?,
        source: r.get(1)?,
        agent_id: r.get(2)?,
        session_key: r.get(3)?,
        runtime_session_id: r.get(4)?,
        run_id: r.get(5)?,
        requester: json_col(r, 6)?,
        action: json_col(r, 7)?,
        content_hash: r.get(8)?,
        options: json_col(r, 9)?,
        policy_hash: r.get(10)?,
        route: r.get(11)?,
        origin: origin.and_then(|o| serde_json::from_str(&o).ok()),
        state: r.get(13)?,
        created_at: r.get(14)?,
        expires_at: r.get(15)?,
        decided_at: r.get(16)?,
        decided_by: r.get(17)?,
        decision: r.get(18)?,
        note: r.get(19)?,
        preview: r
            .get::<_, Option<String>>(20)?
            .and_then(|p| serde_json::from_str(&p).ok()),
    })
}

fn rule_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApprovalRule> {
    Ok(ApprovalRule {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        tool_kind: r.get(2)?,
        title_pattern: r.get(3)?,
        created_at: r.get(4)?,
        created_by: r.get(5)?,
        approval_id: r.get(6)?,
        revoked_at: r.get(7)?,
        revoked_by: r.get(8)?,
        title_match: r.get(9)?,
        input_shape: r.get(10)?,
    })
}

/// A short, unguessable id: 10 characters of a 32-letter alphabet without look-alikes
/// (50 random bits), easy to type in a chat reply.
pub fn new_id() -> Result<String, StateError> {
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    let mut bytes = [0u8; 10];
    getrandom::fill(&mut bytes)
        .map_err(|e| StateError::Corrupt(format!("no random source for an approval id: {e}")))?;
    Ok(bytes
        .iter()
        .map(|b| ALPHABET[usize::from(b & 31)] as char)
        .collect())
}

fn event(
    c: &Connection,
    id: &str,
    at: &str,
    what: &str,
    actor: Option<&str>,
    note: &str,
) -> rusqlite::Result<()> {
    c.execute(
        "INSERT INTO approval_events (approval_id, at, event, actor, note) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, at, what, actor, note],
    )?;
    Ok(())
}

pub struct ApprovalStore {
    db: LayerConnection,
}

/// Which approvals a listing shows.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    pub state: Option<ApprovalState>,
    pub agent_id: Option<String>,
    pub limit: Option<usize>,
}

impl ApprovalStore {
    pub fn open(dir: &StateDir) -> Result<ApprovalStore, StateError> {
        Ok(ApprovalStore {
            db: LayerConnection::open(dir, "approvals")?,
        })
    }

    /// Records a request: pending (event `asked`), or already decided by a mode or a rule
    /// (event `auto`, with who decided in `decided_by`).
    pub fn insert(&self, a: &ApprovalRecord) -> Result<(), StateError> {
        self.db.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute(
                &format!("INSERT INTO approvals ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"),
                params![
                    a.id, a.source, a.agent_id, a.session_key, a.runtime_session_id, a.run_id,
                    a.requester.to_string(), a.action.to_string(), a.content_hash,
                    a.options.to_string(), a.policy_hash, a.route,
                    a.origin.as_ref().map(Value::to_string), a.state, a.created_at, a.expires_at,
                    a.decided_at, a.decided_by, a.decision, a.note,
                    a.preview.as_ref().and_then(|p| serde_json::to_string(p).ok())
                ],
            )?;
            if a.state == ApprovalState::Pending {
                event(&tx, &a.id, &a.created_at, "asked", Some(&format!("agent:{}", a.agent_id)), "")?;
            } else {
                event(&tx, &a.id, &a.created_at, "auto", a.decided_by.as_deref(), &format!("{}: {}", a.state, a.note))?;
            }
            tx.commit()
        })
    }

    pub fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, StateError> {
        self.db.with(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                [id],
                row,
            )
            .optional()
        })
    }

    /// Newest first.
    pub fn list(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StateError> {
        self.db.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {COLUMNS} FROM approvals WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR agent_id = ?2) ORDER BY created_at DESC, rowid DESC LIMIT ?3"
            ))?;
            let limit = filter.limit.map_or(-1, |l| l as i64);
            stmt.query_map(params![filter.state, filter.agent_id, limit], row)?
                .collect()
        })
    }

    pub fn events(&self, id: &str) -> Result<Vec<ApprovalEvent>, StateError> {
        self.db.with(|c| {
            let mut stmt = c.prepare(
                "SELECT at, event, actor, note FROM approval_events WHERE approval_id = ?1 ORDER BY id",
            )?;
            stmt.query_map([id], |r| {
                Ok(ApprovalEvent {
                    at: r.get(0)?,
                    event: r.get(1)?,
                    actor: r.get(2)?,
                    note: r.get(3)?,
                })
            })?
            .collect()
        })
    }

    /// Records an event that decides nothing (notified, refused, executed).
    pub fn note(
        &self,
        id: &str,
        what: &str,
        actor: Option<&str>,
        note: &str,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.with(|c| event(c, id, &now, what, actor, note))
    }

    /// Moves a pending approval to `state` (approved, denied, expired, void) in one
    /// transaction with its event; anything already final stays as it is.
    pub fn decide(
        &self,
        id: &str,
        state: ApprovalState,
        by: &str,
        decision: Option<&str>,
        note: &str,
    ) -> Result<Decided, StateError> {
        let now = crate::clock::now();
        self.db.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let current = tx
                .query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), [id], row)
                .optional()?;
            let Some(current) = current else {
                return Ok(Decided::Missing);
            };
            if current.state != ApprovalState::Pending {
                return Ok(Decided::AlreadyFinal(current));
            }
            tx.execute(
                "UPDATE approvals SET state = ?2, decided_at = ?3, decided_by = ?4, decision = ?5, note = ?6 WHERE id = ?1",
                params![id, state, now, by, decision, note],
            )?;
            let what = match state {
                ApprovalState::Approved | ApprovalState::Denied => "decided",
                ApprovalState::Expired => "expired",
                ApprovalState::Void => "voided",
                ApprovalState::Pending => "asked",
            };
            let detail = match decision {
                Some(d) if note.is_empty() => d.to_string(),
                Some(d) => format!("{d}: {note}"),
                None => note.to_string(),
            };
            event(&tx, id, &now, what, Some(by), &detail)?;
            let after = tx.query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), [id], row)?;
            tx.commit()?;
            Ok(Decided::Done(after))
        })
    }

    /// Appends to a decided approval's note (a management request's result).
    pub fn set_note(&self, id: &str, note: &str) -> Result<(), StateError> {
        self.db.with(|c| {
            c.execute(
                "UPDATE approvals SET note = ?2 WHERE id = ?1",
                params![id, note],
            )?;
            Ok(())
        })
    }

    /// The pending approvals, oldest first.
    pub fn pending(&self) -> Result<Vec<ApprovalRecord>, StateError> {
        self.db.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {COLUMNS} FROM approvals WHERE state = 'pending' ORDER BY created_at, rowid"
            ))?;
            stmt.query_map([], row)?.collect()
        })
    }

    /// Records an `allow_always` rule.
    pub fn add_rule(&self, rule: &ApprovalRule) -> Result<(), StateError> {
        self.db.with(|c| {
            c.execute(
                &format!("INSERT INTO approval_rules ({RULE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, ?8, ?9)"),
                params![rule.id, rule.agent_id, rule.tool_kind, rule.title_pattern, rule.created_at, rule.created_by, rule.approval_id, rule.title_match, rule.input_shape],
            )?;
            Ok(())
        })
    }

    /// Rules, oldest first: an agent's live ones, or (`agent` `None`) every one, revoked too
    /// when `revoked`.
    pub fn rules(
        &self,
        agent: Option<&str>,
        revoked: bool,
    ) -> Result<Vec<ApprovalRule>, StateError> {
        self.db.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {RULE_COLUMNS} FROM approval_rules WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 OR revoked_at IS NULL) ORDER BY created_at, rowid"
            ))?;
            stmt.query_map(params![agent, revoked], rule_row)?.collect()
        })
    }

    /// Revokes a live rule; `None` when there is no live rule of that id.
    pub fn revoke_rule(&self, id: &str, by: &str) -> Result<Option<ApprovalRule>, StateError> {
        let now = crate::clock::now();
        self.db.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "UPDATE approval_rules SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, now, by],
            )?;
            let rule = if n == 1 {
                tx.query_row(&format!("SELECT {RULE_COLUMNS} FROM approval_rules WHERE id = ?1"), [id], rule_row)
                    .optional()?
            } else {
                None
            };
            tx.commit()?;
            Ok(rule)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_ten_characters_of_the_alphabet_and_differ() {
        let a = new_id().unwrap();
        let b = new_id().unwrap();
        assert_eq!(a.len(), 10);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert!(!a.contains(['l', 'o', '0', '1']));
        assert_ne!(a, b);
    }
}
