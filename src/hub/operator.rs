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

pub(crate) use super::reads::{
    FoundLine, RunsParams, SearchParams, SessionsParams, TranscriptSearch,
};
pub(crate) use super::reads::{
    History, HistoryMessage, HistoryParams, RunList, SessionDetail, SessionList,
};
use super::results::SendOutcome;
pub(crate) use super::runs::RunView;
use super::runs::{RunDetail, SessionClosed};
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

impl From<super::reads::ReadError> for OperatorError {
    fn from(e: super::reads::ReadError) -> OperatorError {
        use super::reads::ReadError as E;
        match e {
            E::Params(m) => OperatorError::Params(m),
            E::NotFound(m) => OperatorError::NotFound(m),
            E::State(e) => OperatorError::Internal(e.to_string()),
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
    "sessions/search",
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
    SessionsSearch(SearchParams),
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
            "sessions/search" => HubRequest::SessionsSearch(params(p)?),
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
    /// `sessions/search`.
    Search(TranscriptSearch),
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
            HubRequest::SessionsShow(p) => {
                let (key, prompt) = (p.session_key.clone(), p.prompt);
                let mut detail = self
                    .db(move |s| Ok(super::reads::session(s, &key, prompt)))
                    .await??;
                detail.queue_depth = self.access.queue_depth(&detail.session_key);
                Ok(HubAnswer::Session(detail))
            }
            HubRequest::SessionsHistory(p) => Ok(HubAnswer::History(
                self.db(move |s| Ok(super::reads::history(s, &p))).await??,
            )),
            HubRequest::SessionsSearch(p) => Ok(HubAnswer::Search(
                self.db(move |s| Ok(super::reads::search(s, &p))).await??,
            )),
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
                    return Err(OperatorError::Params(super::store::not_a_session_key(
                        &p.session_key,
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
            HubRequest::RunsShow(p) => Ok(HubAnswer::RunDetail(
                self.db(move |s| Ok(super::reads::run(s, &p.run_id)))
                    .await??,
            )),
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
        let mut list = self
            .db(move |s| Ok(super::reads::sessions(s, &p)))
            .await??;
        for s in &mut list.sessions {
            s.queue_depth = self.access.queue_depth(&s.session_key);
        }
        Ok(list)
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
            turn_cancel = Some(self.stop_turn(agent, key, self.cancel_grace).await);
        }
        Ok(SessionCancel {
            session_key: key.to_string(),
            runs: done,
            turn_cancel,
        })
    }

    pub(crate) async fn operator_runs(&self, p: RunsParams) -> Result<RunList, OperatorError> {
        Ok(self.db(move |s| Ok(super::reads::runs(s, &p))).await??)
    }
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

/// `method` (without the `_mustang.agent/` prefix) answered from the state database in `dir`,
/// when it is one of the reads it answers alone; `None` for the others, which need a
/// controller.
pub(crate) fn offline(
    dir: &crate::state::StateDir,
    method: &str,
    params: Value,
) -> Option<Result<Value, OperatorError>> {
    let request = match HubRequest::parse(method, params) {
        Ok(request) => request,
        Err(e) => return Some(Err(e)),
    };
    let store = || super::store::HubStore::open(dir).map_err(super::reads::ReadError::from);
    let answer = match request {
        HubRequest::SessionsList(p) => store()
            .and_then(|s| super::reads::sessions(&s, &p))
            .map(HubAnswer::Sessions),
        HubRequest::SessionsShow(p) => store()
            .and_then(|s| super::reads::session(&s, &p.session_key, p.prompt))
            .map(HubAnswer::Session),
        HubRequest::SessionsHistory(p) => store()
            .and_then(|s| super::reads::history(&s, &p))
            .map(HubAnswer::History),
        HubRequest::SessionsSearch(p) => store()
            .and_then(|s| super::reads::search(&s, &p))
            .map(HubAnswer::Search),
        HubRequest::RunsList(p) => store()
            .and_then(|s| super::reads::runs(&s, &p))
            .map(HubAnswer::Runs),
        HubRequest::RunsShow(p) => store()
            .and_then(|s| super::reads::run(&s, &p.run_id))
            .map(HubAnswer::RunDetail),
        _ => return None,
    };
    Some(
        answer.map_err(OperatorError::from).and_then(|a| {
            serde_json::to_value(a).map_err(|e| OperatorError::Internal(e.to_string()))
        }),
    )
}
