//! The operator's side of the Hub (hub.md, "Operator surface"): one service behind JSON-RPC
//! `sessions/*` and `runs/*`, `GET /v1/sessions`, `GET /v1/runs` and `deepcli sessions|runs`,
//! taking a typed [`HubRequest`] and giving a typed [`HubAnswer`]. The operator sees every
//! session and run (no tool policy applies to it); what it says into a session is recorded
//! with provenance `operator`. Which HTTP status or JSON-RPC code an [`OperatorError`] gets is
//! the transport's to say.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::tasks::Verdict;
use crate::tasks::state::Actor;
use serde_json::Value;

use super::calls::kind_of;
use super::results::SendOutcome;
use super::runs::{RunDetail, RunView, SessionClosed};
use super::store::RunFilter;
use super::{CallError, Hub};
use crate::access::Beat;
use crate::access::outbox::Cause;
use crate::state::RunState;

/// Why an operator call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OperatorError {
    #[error("method not found: `{0}`")]
    NoMethod(String),
    #[error("invalid params: {0}")]
    Params(String),
    #[error("{0}")]
    NotFound(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<super::tasks::TaskDoorError> for OperatorError {
    fn from(e: super::tasks::TaskDoorError) -> OperatorError {
        use super::tasks::TaskDoorError as E;
        match e {
            E::NotFound(m) => OperatorError::NotFound(m),
            E::Refused(m) => OperatorError::Params(m),
            E::Internal(m) => OperatorError::Internal(m),
            E::Call(e) => e.into(),
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
pub(crate) const METHODS: &[&str] = &[
    "sessions/list",
    "sessions/show",
    "sessions/history",
    "sessions/send",
    "sessions/say",
    "sessions/cancel",
    "sessions/close",
    "runs/list",
    "runs/show",
    "runs/resume",
    "runs/stop",
    "runs/cancel",
    "tasks/list",
    "tasks/show",
    "tasks/create",
    "tasks/accept",
    "tasks/reject",
    "tasks/cancel",
];

/// One operator call, typed: the method and its params.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HubRequest {
    SessionsList(SessionsParams),
    SessionsShow(ShowParams),
    SessionsHistory(HistoryParams),
    SessionsSend(SendParams),
    SessionsSay(SayParams),
    SessionsCancel(KeyParams),
    SessionsClose(CloseParams),
    RunsList(RunsParams),
    RunsShow(RunParams),
    RunsResume(RunParams),
    RunsStop(RunParams),
    RunsCancel(RunParams),
    TasksList(TasksParams),
    TasksShow(TaskParams),
    TasksCreate(CreateParams),
    TasksAccept(TaskParams),
    TasksReject(RejectParams),
    TasksCancel(TaskParams),
}

impl HubRequest {
    /// The request `method` (`sessions/list`, …, without the `_mustang.agent/` prefix) with
    /// `params` names.
    pub(crate) fn parse(method: &str, p: Value) -> Result<HubRequest, OperatorError> {
        fn params<T: serde::de::DeserializeOwned>(p: Value) -> Result<T, OperatorError> {
            let p = if p.is_null() {
                Value::Object(Default::default())
            } else {
                p
            };
            serde_json::from_value(p).map_err(|e| OperatorError::Params(e.to_string()))
        }
        Ok(match method {
            "sessions/list" => HubRequest::SessionsList(params(p)?),
            "sessions/show" => HubRequest::SessionsShow(params(p)?),
            "sessions/history" => HubRequest::SessionsHistory(params(p)?),
            "sessions/send" => HubRequest::SessionsSend(params(p)?),
            "sessions/say" => HubRequest::SessionsSay(params(p)?),
            "sessions/cancel" => HubRequest::SessionsCancel(params(p)?),
            "sessions/close" => HubRequest::SessionsClose(params(p)?),
            "runs/list" => HubRequest::RunsList(params(p)?),
            "runs/show" => HubRequest::RunsShow(params(p)?),
            "runs/resume" => HubRequest::RunsResume(params(p)?),
            "runs/stop" => HubRequest::RunsStop(params(p)?),
            "runs/cancel" => HubRequest::RunsCancel(params(p)?),
            "tasks/list" => HubRequest::TasksList(params(p)?),
            "tasks/show" => HubRequest::TasksShow(params(p)?),
            "tasks/create" => HubRequest::TasksCreate(params(p)?),
            "tasks/accept" => HubRequest::TasksAccept(params(p)?),
            "tasks/reject" => HubRequest::TasksReject(params(p)?),
            "tasks/cancel" => HubRequest::TasksCancel(params(p)?),
            other => return Err(OperatorError::NoMethod(other.to_string())),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TasksParams {
    /// Only the tasks discussed in this session (a room).
    pub room: Option<String>,
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskParams {
    pub task_id: String,
}

/// `tasks/create`: the operator gives `assignee` a task that `owner` checks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CreateParams {
    pub owner: String,
    pub assignee: String,
    pub title: String,
    pub acceptance: String,
    /// The session key of the conversation it is discussed in (told of every move).
    pub room: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RejectParams {
    pub task_id: String,
    pub reason: String,
    /// Close the task instead of sending it back to the assignee.
    #[serde(default)]
    pub close: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SessionsParams {
    pub agent_id: Option<String>,
    pub kind: Option<String>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct KeyParams {
    pub session_key: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ShowParams {
    pub session_key: String,
    /// With the system section the session was last given.
    #[serde(default)]
    pub prompt: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HistoryParams {
    pub session_key: String,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    /// Every segment of the transcript, not only the one since the last `/new`.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SendParams {
    pub session_key: String,
    pub message: String,
    pub timeout_seconds: Option<u64>,
}

/// `sessions/say`: a notice from the operator into the session's external conversation,
/// through the outbox; no turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SayParams {
    pub session_key: String,
    pub text: String,
}

/// What `sessions/say` did: the notice is in the transcript and queued for `to`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Said {
    pub session_key: String,
    pub queued: bool,
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct CloseParams {
    pub session_key: String,
    #[serde(default)]
    pub trash: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunsParams {
    pub state: Option<RunState>,
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
    #[serde(default)]
    pub active: bool,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunParams {
    pub run_id: String,
}

/// What an operator call gives back, each shape as the operator surface documents it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum HubAnswer {
    Sessions(SessionList),
    Session(SessionDetail),
    History(History),
    Cancelled(SessionCancel),
    Runs(RunList),
    RunCancelled(RunCancel),
    /// A run with its events (`runs/show`).
    RunDetail(RunDetail),
    /// A run's record after a decision (`runs/resume|stop`).
    Run(RunView),
    /// The operator's send, as it stood when it ended or the wait ran out (`sessions/send`).
    Sent(SendOutcome),
    /// What closing a session did (`sessions/close`).
    Closed(SessionClosed),
    /// The operator's notice, queued (`sessions/say`).
    Said(Said),
    /// `tasks/list`.
    Tasks(super::tasks::TaskList),
    /// `tasks/show`, and a task after a decision.
    Task(super::tasks::TaskView),
}

/// `sessions/list`: one page of the sessions, newest activity first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionList {
    pub count: usize,
    pub sessions: Vec<SessionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionSummary {
    pub session_key: String,
    pub agent_id: String,
    pub kind: &'static str,
    pub label: Option<String>,
    pub parent_session_key: Option<String>,
    pub last_activity: Option<String>,
    pub queue_depth: usize,
}

/// `sessions/show`: a session, its spawn (if it is a child), its children and recent runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionDetail {
    pub session_key: String,
    pub agent_id: Option<String>,
    pub kind: &'static str,
    pub queue_depth: usize,
    pub child: Option<ChildView>,
    pub children: Vec<ChildLink>,
    pub runs: Vec<RunView>,
    /// Asked for (`prompt`): the system section the session was last given, or null when it
    /// was given none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_section: Option<Option<SectionView>>,
}

/// The system section a session was last given (conversations.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SectionView {
    /// The runtime session it went to.
    pub runtime_session_id: String,
    /// Of everything but its date and time.
    pub hash: String,
    pub at: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildView {
    pub parent_session_key: String,
    pub depth: u32,
    pub label: Option<String>,
    pub mode: crate::state::SpawnMode,
    pub cleanup: crate::state::Cleanup,
    pub run_id: String,
    pub closed_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildLink {
    pub session_key: String,
    pub run_id: String,
    pub closed_at: Option<String>,
}

/// `sessions/history`: one page of a session's transcript, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct History {
    pub session_key: String,
    pub messages: Vec<HistoryMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HistoryMessage {
    pub id: i64,
    pub provenance: crate::state::Provenance,
    pub at: String,
    pub text: String,
}

/// `sessions/cancel`: the runs cancelled, or (none running) what came of the turn's cancel.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionCancel {
    pub session_key: String,
    pub runs: Vec<RunCancel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_cancel: Option<crate::access::CancelState>,
}

/// A run after a cancel.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunCancel {
    pub run_id: String,
    pub state: RunState,
    /// The cancel in its own words (approvals.md, "Cancel states").
    pub cancel: &'static str,
}

/// `runs/list`: one page of the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunList {
    pub count: usize,
    pub runs: Vec<RunView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl Hub {
    /// One operator call.
    pub(crate) async fn operator(
        self: &Arc<Self>,
        request: HubRequest,
    ) -> Result<HubAnswer, OperatorError> {
        match request {
            HubRequest::SessionsList(p) => {
                Ok(HubAnswer::Sessions(self.operator_sessions(p).await?))
            }
            HubRequest::SessionsShow(p) => Ok(HubAnswer::Session(
                self.operator_session(&p.session_key, p.prompt).await?,
            )),
            HubRequest::SessionsHistory(p) => {
                let page = paged(p.limit, p.cursor.as_deref())?;
                let (key, all) = (p.session_key.clone(), p.all);
                let rows = self
                    .db(move |s| s.history(&key, page.limit, page.offset, all))
                    .await?;
                let next_cursor = (rows.len() == page.limit).then(|| page.after(rows.len()));
                let messages = rows
                    .into_iter()
                    .map(|r| HistoryMessage {
                        id: r.id,
                        provenance: r.provenance,
                        at: r.at,
                        text: r.text,
                    })
                    .collect();
                Ok(HubAnswer::History(History {
                    session_key: p.session_key,
                    messages,
                    next_cursor,
                }))
            }
            HubRequest::SessionsSend(p) => {
                let wait = Duration::from_secs(p.timeout_seconds.unwrap_or(30).min(3600));
                Ok(HubAnswer::Sent(
                    self.operator_send(&p.session_key, p.message, wait).await?,
                ))
            }
            HubRequest::SessionsSay(p) => {
                if p.text.trim().is_empty() {
                    return Err(OperatorError::Params(
                        "`text` is empty: nothing to say".into(),
                    ));
                }
                let cause_id = crate::clock::now();
                match self
                    .access
                    .post_to_session_route(&p.session_key, p.text, Cause::Notice, &cause_id)
                    .await
                {
                    Beat::Delivered(to) => Ok(HubAnswer::Said(Said {
                        session_key: p.session_key,
                        queued: true,
                        to,
                    })),
                    Beat::Failed(why) => Err(OperatorError::Internal(why)),
                    Beat::Kept(why) | Beat::Skipped(why) => Err(OperatorError::Params(why)),
                    Beat::Ok => Err(OperatorError::Internal("nothing was said".into())),
                }
            }
            HubRequest::SessionsCancel(p) => Ok(HubAnswer::Cancelled(
                self.operator_cancel(&p.session_key).await?,
            )),
            HubRequest::SessionsClose(p) => {
                let Some(agent) = super::store::agent_of(&p.session_key).map(str::to_string) else {
                    return Err(OperatorError::Params(format!(
                        "`{}` is not a session key",
                        p.session_key
                    )));
                };
                Ok(HubAnswer::Closed(
                    self.close_session(&agent, &p.session_key, p.trash).await,
                ))
            }
            HubRequest::RunsList(p) => Ok(HubAnswer::Runs(self.operator_runs(p).await?)),
            HubRequest::RunsResume(p) => self.decided(self.resume_run(&p.run_id).await, &p),
            HubRequest::RunsStop(p) => self.decided(self.stop_run(&p.run_id).await, &p),
            HubRequest::RunsCancel(p) => {
                let id = p.run_id.clone();
                if self.db(move |s| s.run(&id)).await?.is_none() {
                    return Err(OperatorError::NotFound(format!("no run `{}`", p.run_id)));
                }
                let run = self.cancel_run(&p.run_id).await?;
                Ok(HubAnswer::RunCancelled(RunCancel {
                    run_id: run.run_id,
                    state: run.state,
                    cancel: cancel_word(run.state),
                }))
            }
            HubRequest::RunsShow(p) => self
                .run_detail(&p.run_id)
                .await?
                .map(HubAnswer::RunDetail)
                .ok_or_else(|| OperatorError::NotFound(format!("no run `{}`", p.run_id))),
            HubRequest::TasksList(p) => {
                let limit = p.limit.unwrap_or(50).clamp(1, super::page::MAX_LIMIT);
                Ok(HubAnswer::Tasks(self.operator_tasks(p.room, limit).await?))
            }
            HubRequest::TasksShow(p) => Ok(HubAnswer::Task(self.operator_task(&p.task_id).await?)),
            HubRequest::TasksCreate(p) => {
                let known = |id: &str| self.policy().agents.contains_key(id);
                if !known(&p.owner) {
                    return Err(OperatorError::Params(format!(
                        "no agent `{}` to own the task",
                        p.owner
                    )));
                }
                let asked = super::tasks::Asked {
                    requester: crate::tasks::store::Requester::Operator,
                    owner: p.owner,
                    assignee: crate::ids::agent_id(&p.assignee).into_owned(),
                    title: p.title,
                    acceptance: p.acceptance,
                    room: p.room,
                };
                match self.create_task(None, asked, "operator").await? {
                    Ok((task, _run)) => Ok(HubAnswer::Task(self.operator_task(&task.id).await?)),
                    Err(super::tasks::Refusal::Said(why)) => Err(OperatorError::Params(why)),
                    Err(super::tasks::Refusal::Result(r)) => Err(OperatorError::Params(
                        r.to_json()["error"]
                            .as_str()
                            .unwrap_or("refused")
                            .to_string(),
                    )),
                }
            }
            HubRequest::TasksAccept(p) => self.operator_verdict(&p.task_id, Verdict::Accept).await,
            HubRequest::TasksReject(p) => {
                let verdict = Verdict::Reject {
                    reason: p.reason,
                    reopen: !p.close,
                };
                self.operator_verdict(&p.task_id, verdict).await
            }
            HubRequest::TasksCancel(p) => self.operator_verdict(&p.task_id, Verdict::Cancel).await,
        }
    }

    /// The operator's verdict on a task (the operator token always may decide).
    async fn operator_verdict(
        self: &Arc<Self>,
        id: &str,
        verdict: Verdict,
    ) -> Result<HubAnswer, OperatorError> {
        let task = self
            .decide_task(id, verdict, Actor::Operator, "operator", Vec::new())
            .await?;
        Ok(HubAnswer::Task(task))
    }

    /// A run resumed or stopped: its record, or why not.
    fn decided(
        &self,
        decided: Result<Option<super::store::RunRecord>, CallError>,
        p: &RunParams,
    ) -> Result<HubAnswer, OperatorError> {
        match decided {
            Ok(Some(run)) => Ok(HubAnswer::Run(RunView::of(&run))),
            Ok(None) => Err(OperatorError::NotFound(format!("no run `{}`", p.run_id))),
            Err(CallError::BadArguments(why)) => Err(OperatorError::Params(why)),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) async fn operator_sessions(
        &self,
        p: SessionsParams,
    ) -> Result<SessionList, OperatorError> {
        let mut all = self.db(|s| s.known_sessions()).await?;
        all.sort_by(|a, b| b.last_at.cmp(&a.last_at));
        let page = paged(p.limit, p.cursor.as_deref())?;
        let (all, next_cursor) = page.of(all
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
        let sessions: Vec<SessionSummary> = all
            .into_iter()
            .map(|s| {
                let child = children.get(&s.session_key);
                SessionSummary {
                    kind: kind_of(&s.session_key),
                    label: child.and_then(|c| c.label.clone()),
                    parent_session_key: child.map(|c| c.parent_session_key.clone()),
                    last_activity: s.last_at,
                    queue_depth: self.access.queue_depth(&s.session_key),
                    agent_id: s.agent_id,
                    session_key: s.session_key,
                }
            })
            .collect();
        Ok(SessionList {
            count: sessions.len(),
            sessions,
            next_cursor,
        })
    }

    async fn operator_session(
        &self,
        key: &str,
        prompt: bool,
    ) -> Result<SessionDetail, OperatorError> {
        let k = key.to_string();
        let (exists, child, runs, children, section) = self
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
                    if prompt { s.given_section(&k)? } else { None },
                ))
            })
            .await?;
        if !exists && child.is_none() {
            return Err(OperatorError::NotFound(format!("no session `{key}`")));
        }
        Ok(SessionDetail {
            session_key: key.to_string(),
            agent_id: super::store::agent_of(key).map(str::to_string),
            kind: kind_of(key),
            queue_depth: self.access.queue_depth(key),
            child: child.map(|c| ChildView {
                parent_session_key: c.parent_session_key,
                depth: c.depth,
                label: c.label,
                mode: c.mode,
                cleanup: c.cleanup,
                run_id: c.run_id,
                closed_at: c.closed_at,
            }),
            children: children
                .into_iter()
                .map(|c| ChildLink {
                    session_key: c.session_key,
                    run_id: c.run_id,
                    closed_at: c.closed_at,
                })
                .collect(),
            runs: runs.iter().map(RunView::of).collect(),
            system_section: prompt.then(|| {
                section.map(|g| SectionView {
                    runtime_session_id: g.runtime_session_id,
                    hash: g.hash,
                    at: g.at,
                    text: g.text,
                })
            }),
        })
    }

    /// Cancels the unfinished runs into `key`; when there are none, the turn running there.
    pub(super) async fn operator_cancel(
        self: &Arc<Self>,
        key: &str,
    ) -> Result<SessionCancel, OperatorError> {
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
            done.push(RunCancel {
                run_id: record.run_id,
                state: record.state,
                cancel: cancel_word(record.state),
            });
        }
        let mut turn_cancel = None;
        if runs.is_empty()
            && let Some(agent) = super::store::agent_of(key)
        {
            turn_cancel = Some(
                self.access
                    .cancel_running_turn(agent, key, self.cancel_grace)
                    .await,
            );
        }
        Ok(SessionCancel {
            session_key: key.to_string(),
            runs: done,
            turn_cancel,
        })
    }

    pub(crate) async fn operator_runs(&self, p: RunsParams) -> Result<RunList, OperatorError> {
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
        Ok(RunList {
            count: runs.len(),
            runs: runs.iter().map(RunView::of).collect(),
            next_cursor: more.then(|| page.after(runs.len())),
        })
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
