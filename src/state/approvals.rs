//! The approvals' rows (migration 10): each request with what happened to it, its events in
//! order, and the `allow_always` rules. Only the rows: who may decide, and what a decision
//! does, is the `approvals` module's.

use serde::Serialize;
use serde_json::Value;

use super::db::{Behavior, DbResult, Optional, Query, Row, params};
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

fn json_col(r: &Row<'_>, i: usize) -> DbResult<Value> {
    let text: String = r.get(i)?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn row(r: &Row<'_>) -> DbResult<ApprovalRecord> {
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
            .get::<Option<String>>(20)?
            .and_then(|p| serde_json::from_str(&p).ok()),
    })
}

fn rule_row(r: &Row<'_>) -> DbResult<ApprovalRule> {
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
    c: &impl Query,
    id: &str,
    at: &str,
    what: &str,
    actor: Option<&str>,
    note: &str,
) -> DbResult<()> {
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
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
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
        self.db.query(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"),
                params![id],
                row,
            )
            .optional()
        })
    }

    /// Newest first.
    pub fn list(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StateError> {
        self.db.query(|c| {
            // No limit is the greatest (SQLite's -1 is an error in PostgreSQL).
            let limit = filter.limit.map_or(i64::MAX, |l| l as i64);
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM approvals WHERE (CAST(?1 AS TEXT) IS NULL OR state = ?1) AND (CAST(?2 AS TEXT) IS NULL OR agent_id = ?2) ORDER BY created_at DESC, rowid DESC LIMIT ?3"
                ),
                params![filter.state, filter.agent_id, limit],
                row,
            )
        })
    }

    pub fn events(&self, id: &str) -> Result<Vec<ApprovalEvent>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT at, event, actor, note FROM approval_events WHERE approval_id = ?1 ORDER BY id",
                params![id],
                |r| {
                    Ok(ApprovalEvent {
                        at: r.get(0)?,
                        event: r.get(1)?,
                        actor: r.get(2)?,
                        note: r.get(3)?,
                    })
                },
            )
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
        self.db.write(|c| event(&*c, id, &now, what, actor, note))
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
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let current = tx
                .query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), params![id], row)
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
            let after = tx.query_row(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"), params![id], row)?;
            tx.commit()?;
            Ok(Decided::Done(after))
        })
    }

    /// Appends to a decided approval's note (a management request's result).
    pub fn set_note(&self, id: &str, note: &str) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE approvals SET note = ?2 WHERE id = ?1",
                params![id, note],
            )?;
            Ok(())
        })
    }

    /// The pending approvals, oldest first.
    pub fn pending(&self) -> Result<Vec<ApprovalRecord>, StateError> {
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {COLUMNS} FROM approvals WHERE state = 'pending' ORDER BY created_at, rowid"
                ),
                params![],
                row,
            )
        })
    }

    /// Records an `allow_always` rule.
    pub fn add_rule(&self, rule: &ApprovalRule) -> Result<(), StateError> {
        self.db.write(|c| {
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
        self.db.query(|c| {
            c.query_map(
                &format!(
                    "SELECT {RULE_COLUMNS} FROM approval_rules WHERE (CAST(?1 AS TEXT) IS NULL OR agent_id = ?1) AND (?2 OR revoked_at IS NULL) ORDER BY created_at, rowid"
                ),
                params![agent, revoked],
                rule_row,
            )
        })
    }

    /// Revokes a live rule; `None` when there is no live rule of that id.
    pub fn revoke_rule(&self, id: &str, by: &str) -> Result<Option<ApprovalRule>, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let n = tx.execute(
                "UPDATE approval_rules SET revoked_at = ?2, revoked_by = ?3 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, now, by],
            )?;
            let rule = if n == 1 {
                tx.query_row(&format!("SELECT {RULE_COLUMNS} FROM approval_rules WHERE id = ?1"), params![id], rule_row)
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

    fn asked(id: &str, agent: &str, at: &str) -> ApprovalRecord {
        ApprovalRecord {
            id: id.into(),
            source: ApprovalSource::Permission,
            agent_id: agent.into(),
            session_key: Some(format!("agent:{agent}:main")),
            runtime_session_id: None,
            run_id: None,
            requester: serde_json::json!({"agent": agent}),
            action: serde_json::json!({"kind": "execute", "title": "rm -rf build"}),
            content_hash: "h".into(),
            options: serde_json::json!([{"kind": "allow_once"}]),
            policy_hash: "p".into(),
            route: "operator".into(),
            origin: None,
            state: ApprovalState::Pending,
            created_at: at.into(),
            expires_at: "2026-12-06T02:00:00Z".into(),
            decided_at: None,
            decided_by: None,
            decision: None,
            note: String::new(),
            preview: Some(ManagementPreview {
                files: vec!["agents.yaml".into()],
                ..ManagementPreview::default()
            }),
        }
    }

    /// The store on both backends, twice: two replicas' stores on one state.
    fn stores() -> Vec<([ApprovalStore; 2], Box<dyn std::any::Any>)> {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path());
        let sqlite = [(); 2].map(|()| ApprovalStore::open(&state).unwrap());
        let schema = crate::state::db::testing::PgSchema::new();
        let on_postgres = state.clone().with_postgres(schema.url().clone());
        let postgres = [(); 2].map(|()| ApprovalStore::open(&on_postgres).unwrap());
        vec![(sqlite, Box::new(dir)), (postgres, Box::new(schema))]
    }

    #[test]
    fn approvals_list_in_order_and_are_decided_once_on_both_backends() {
        for ([a, b], _keep) in stores() {
            // Three asked in the same second: in the order asked.
            for id in ["aaaaaaaaa3", "aaaaaaaaa1", "aaaaaaaaa2"] {
                a.insert(&asked(id, "coder", "2026-12-06T01:00:00Z"))
                    .unwrap();
            }
            a.insert(&asked("bbbbbbbbb1", "echo", "2026-12-06T01:00:01Z"))
                .unwrap();
            let ids = |list: Vec<ApprovalRecord>| -> Vec<String> {
                list.into_iter().map(|r| r.id).collect()
            };
            assert_eq!(
                ids(b.pending().unwrap()),
                ["aaaaaaaaa3", "aaaaaaaaa1", "aaaaaaaaa2", "bbbbbbbbb1"]
            );
            let coder = ApprovalFilter {
                agent_id: Some("coder".into()),
                limit: Some(2),
                ..ApprovalFilter::default()
            };
            assert_eq!(ids(b.list(&coder).unwrap()), ["aaaaaaaaa2", "aaaaaaaaa1"]);
            assert_eq!(b.list(&ApprovalFilter::default()).unwrap().len(), 4);
            let got = b.get("aaaaaaaaa1").unwrap().unwrap();
            assert_eq!(got, asked("aaaaaaaaa1", "coder", "2026-12-06T01:00:00Z"));

            // Two replicas decide the same approval at once: one decides it.
            let decided: Vec<Decided> = std::thread::scope(|s| {
                let handles: Vec<_> = [&a, &b, &a, &b]
                    .into_iter()
                    .enumerate()
                    .map(|(i, store)| {
                        s.spawn(move || {
                            store
                                .decide(
                                    "aaaaaaaaa1",
                                    ApprovalState::Approved,
                                    &format!("telegram:{i}"),
                                    Some("allow_once"),
                                    "",
                                )
                                .unwrap()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let done = decided
                .iter()
                .filter(|d| matches!(d, Decided::Done(_)))
                .count();
            assert_eq!(done, 1, "{decided:?}");
            let events: Vec<String> = a
                .events("aaaaaaaaa1")
                .unwrap()
                .into_iter()
                .map(|e| e.event)
                .collect();
            assert_eq!(events, ["asked", "decided"]);
            let approved = ApprovalFilter {
                state: Some(ApprovalState::Approved),
                ..ApprovalFilter::default()
            };
            assert_eq!(ids(a.list(&approved).unwrap()), ["aaaaaaaaa1"]);

            let rule = ApprovalRule {
                id: "rrrrrrrrr1".into(),
                agent_id: "coder".into(),
                tool_kind: "execute".into(),
                title_pattern: "rm -rf build".into(),
                title_match: crate::state::TitleMatch::Exact,
                input_shape: None,
                created_at: "2026-12-06T01:00:00Z".into(),
                created_by: "operator".into(),
                approval_id: "aaaaaaaaa1".into(),
                revoked_at: None,
                revoked_by: None,
            };
            a.add_rule(&rule).unwrap();
            assert_eq!(b.rules(Some("coder"), false).unwrap(), [rule.clone()]);
            let revoked = b.revoke_rule("rrrrrrrrr1", "operator").unwrap().unwrap();
            assert_eq!(revoked.revoked_by.as_deref(), Some("operator"));
            assert!(a.revoke_rule("rrrrrrrrr1", "operator").unwrap().is_none());
            assert!(a.rules(Some("coder"), false).unwrap().is_empty());
            assert_eq!(a.rules(None, true).unwrap().len(), 1);
        }
    }

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
