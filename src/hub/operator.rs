//! The operator's side of the Hub (hub.md, "Operator surface"): one service behind JSON-RPC
//! `sessions/*` and `runs/*`, `GET /v1/sessions`, `GET /v1/runs` and `deepcli sessions|runs`.
//! The operator sees every session and run (no tool policy applies to it); what it says into a
//! session is recorded with provenance `operator`.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::calls::kind_of;
use super::runs::run_json;
use super::store::RunFilter;
use super::{CallError, Hub};
use crate::state::RunState;

/// Why an operator call failed, with a JSON-RPC code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    #[error("method not found: `{0}`")]
    NoMethod(String),
    #[error("invalid params: {0}")]
    Params(String),
    #[error("{0}")]
    NotFound(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl OperatorError {
    pub fn rpc_code(&self) -> i64 {
        match self {
            OperatorError::NoMethod(_) => -32601,
            OperatorError::Params(_) => -32602,
            OperatorError::NotFound(_) => -32004,
            OperatorError::Internal(_) => -32603,
        }
    }

    /// The HTTP status for the same failure.
    pub fn http_status(&self) -> u16 {
        match self {
            OperatorError::NoMethod(_) => 404,
            OperatorError::Params(_) => 400,
            OperatorError::NotFound(_) => 404,
            OperatorError::Internal(_) => 500,
        }
    }
}

impl From<CallError> for OperatorError {
    fn from(e: CallError) -> OperatorError {
        match e {
            CallError::BadArguments(m) => OperatorError::Params(m),
            other => OperatorError::Internal(other.to_string()),
        }
    }
}

/// The methods (after the `_mustang.agent/` prefix).
pub const METHODS: &[&str] = &[
    "sessions/list",
    "sessions/show",
    "sessions/history",
    "sessions/send",
    "sessions/cancel",
    "sessions/close",
    "runs/list",
    "runs/show",
];

fn params<T: serde::de::DeserializeOwned>(p: Value) -> Result<T, OperatorError> {
    let p = if p.is_null() { json!({}) } else { p };
    serde_json::from_value(p).map_err(|e| OperatorError::Params(e.to_string()))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionsParams {
    pub agent_id: Option<String>,
    pub kind: Option<String>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KeyParams {
    session_key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HistoryParams {
    session_key: String,
    limit: Option<usize>,
    cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SendParams {
    session_key: String,
    message: String,
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CloseParams {
    session_key: String,
    #[serde(default)]
    trash: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunsParams {
    pub state: Option<RunState>,
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
    #[serde(default)]
    pub active: bool,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RunParams {
    run_id: String,
}

impl Hub {
    /// One operator method (`sessions/list`, …, without the `_mustang.agent/` prefix).
    pub async fn operator(
        self: &Arc<Self>,
        method: &str,
        p: Value,
    ) -> Result<Value, OperatorError> {
        match method {
            "sessions/list" => self.operator_sessions(params(p)?).await,
            "sessions/show" => {
                let p: KeyParams = params(p)?;
                self.operator_session(&p.session_key).await
            }
            "sessions/history" => {
                let p: HistoryParams = params(p)?;
                let page = paged(p.limit, p.cursor.as_deref())?;
                let key = p.session_key.clone();
                let rows = self
                    .db(move |s| s.history(&key, page.limit, page.offset))
                    .await?;
                let next = (rows.len() == page.limit).then(|| page.after(rows.len()));
                let messages: Vec<Value> = rows
                    .into_iter()
                    .map(|r| json!({"id": r.id, "provenance": r.provenance, "at": r.at, "text": r.text}))
                    .collect();
                let mut out = json!({"sessionKey": p.session_key, "messages": messages});
                super::page::mark(&mut out, next);
                Ok(out)
            }
            "sessions/send" => {
                let p: SendParams = params(p)?;
                let wait = Duration::from_secs(p.timeout_seconds.unwrap_or(30).min(3600));
                Ok(self.operator_send(&p.session_key, p.message, wait).await?)
            }
            "sessions/cancel" => {
                let p: KeyParams = params(p)?;
                self.operator_cancel(&p.session_key).await
            }
            "sessions/close" => {
                let p: CloseParams = params(p)?;
                let Some(agent) = super::store::agent_of(&p.session_key).map(str::to_string) else {
                    return Err(OperatorError::Params(format!(
                        "`{}` is not a session key",
                        p.session_key
                    )));
                };
                Ok(self.close_session(&agent, &p.session_key, p.trash).await)
            }
            "runs/list" => self.operator_runs(params(p)?).await,
            "runs/resume" | "runs/stop" => {
                let p: RunParams = params(p)?;
                let decided = if method == "runs/resume" {
                    self.resume_run(&p.run_id).await
                } else {
                    self.stop_run(&p.run_id).await
                };
                match decided {
                    Ok(Some(run)) => Ok(run_json(&run)),
                    Ok(None) => Err(OperatorError::NotFound(format!("no run `{}`", p.run_id))),
                    Err(CallError::BadArguments(why)) => Err(OperatorError::Params(why)),
                    Err(e) => Err(e.into()),
                }
            }
            "runs/cancel" => {
                let p: RunParams = params(p)?;
                let id = p.run_id.clone();
                if self.db(move |s| s.run(&id)).await?.is_none() {
                    return Err(OperatorError::NotFound(format!("no run `{}`", p.run_id)));
                }
                let run = self.cancel_run(&p.run_id).await?;
                Ok(
                    json!({"runId": run.run_id, "state": run.state, "cancel": cancel_word(run.state)}),
                )
            }
            "runs/show" => {
                let p: RunParams = params(p)?;
                self.run_detail(&p.run_id)
                    .await?
                    .ok_or_else(|| OperatorError::NotFound(format!("no run `{}`", p.run_id)))
            }
            other => Err(OperatorError::NoMethod(other.to_string())),
        }
    }

    pub async fn operator_sessions(&self, p: SessionsParams) -> Result<Value, OperatorError> {
        let mut all = self.db(|s| s.known_sessions()).await?;
        all.sort_by(|a, b| b.last_at.cmp(&a.last_at));
        let page = paged(p.limit, p.cursor.as_deref())?;
        let (all, next) = page.of(all
            .into_iter()
            .filter(|s| p.agent_id.as_ref().is_none_or(|a| *a == s.agent_id))
            .filter(|s| p.kind.as_ref().is_none_or(|k| k == kind_of(&s.session_key))));
        let mut children = std::collections::HashMap::new();
        for s in &all {
            let key = s.session_key.clone();
            if let Some(child) = self.db(move |st| st.child(&key)).await? {
                children.insert(s.session_key.clone(), child);
            }
        }
        let sessions: Vec<Value> = all
            .into_iter()
            .map(|s| {
                let child = children.get(&s.session_key);
                json!({
                    "sessionKey": s.session_key,
                    "agentId": s.agent_id,
                    "kind": kind_of(&s.session_key),
                    "label": child.and_then(|c| c.label.clone()),
                    "parentSessionKey": child.map(|c| c.parent_session_key.clone()),
                    "lastActivity": s.last_at,
                    "queueDepth": self.access.queue_depth(&s.session_key),
                })
            })
            .collect();
        let mut out = json!({"count": sessions.len(), "sessions": sessions});
        super::page::mark(&mut out, next);
        Ok(out)
    }

    async fn operator_session(&self, key: &str) -> Result<Value, OperatorError> {
        let k = key.to_string();
        let (exists, child, runs, children) = self
            .db(move |s| {
                Ok((
                    s.session_exists(&k)?,
                    s.child(&k)?,
                    s.runs(&RunFilter {
                        target_session_key: Some(k.clone()),
                        limit: 20,
                        ..RunFilter::default()
                    })?,
                    s.children_of(&k)?,
                ))
            })
            .await?;
        if !exists && child.is_none() {
            return Err(OperatorError::NotFound(format!("no session `{key}`")));
        }
        Ok(json!({
            "sessionKey": key,
            "agentId": super::store::agent_of(key),
            "kind": kind_of(key),
            "queueDepth": self.access.queue_depth(key),
            "child": child.map(|c| json!({
                "parentSessionKey": c.parent_session_key, "depth": c.depth, "label": c.label,
                "mode": c.mode, "cleanup": c.cleanup, "runId": c.run_id, "closedAt": c.closed_at,
            })),
            "children": children.iter().map(|c| json!({"sessionKey": c.session_key, "runId": c.run_id, "closedAt": c.closed_at})).collect::<Vec<_>>(),
            "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
        }))
    }

    /// Cancels the unfinished runs into `key`; when there are none, the turn running there.
    async fn operator_cancel(self: &Arc<Self>, key: &str) -> Result<Value, OperatorError> {
        let k = key.to_string();
        let runs = self
            .db(move |s| {
                s.runs(&RunFilter {
                    target_session_key: Some(k),
                    active: true,
                    limit: 1000,
                    ..RunFilter::default()
                })
            })
            .await?;
        let mut done = Vec::new();
        for run in &runs {
            let record = self.cancel_run(&run.run_id).await?;
            done.push(json!({"runId": record.run_id, "state": record.state, "cancel": cancel_word(record.state)}));
        }
        let mut out = json!({"sessionKey": key, "runs": done});
        if runs.is_empty()
            && let Some(agent) = super::store::agent_of(key)
        {
            let state = self
                .access
                .cancel_running_turn(agent, key, self.cancel_grace)
                .await;
            out["turnCancel"] = json!(state);
        }
        Ok(out)
    }

    pub async fn operator_runs(&self, p: RunsParams) -> Result<Value, OperatorError> {
        let filter = RunFilter {
            state: p.state,
            target_session_key: p.session_key,
            agent_id: p.agent_id,
            active: p.active,
            ..RunFilter::default()
        };
        let page = paged(p.limit, p.cursor.as_deref())?;
        // One more than the page: whether there is a next.
        let filter = RunFilter {
            limit: page.limit + 1,
            offset: page.offset,
            ..filter
        };
        let mut runs = self.db(move |s| s.runs(&filter)).await?;
        let more = runs.len() > page.limit;
        runs.truncate(page.limit);
        let mut out =
            json!({"count": runs.len(), "runs": runs.iter().map(run_json).collect::<Vec<_>>()});
        super::page::mark(&mut out, more.then(|| page.after(runs.len())));
        Ok(out)
    }
}

/// The page an operator list asks for (hub.md, "Paging").
fn paged(limit: Option<usize>, cursor: Option<&str>) -> Result<super::page::Page, OperatorError> {
    super::page::Page::new(limit, cursor, super::page::DEFAULT_LIMIT)
        .map_err(|bad| OperatorError::Params(bad.to_string()))
}

/// A run's state after a cancel, in the cancel's own words (approvals.md, "Cancel states").
fn cancel_word(state: RunState) -> &'static str {
    match state {
        RunState::CancelRequested => "requested",
        RunState::Cancelled => "confirmed",
        RunState::Uncertain => "uncertain",
        _ => "not_running",
    }
}
