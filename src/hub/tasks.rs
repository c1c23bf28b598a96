//! The task tools (tasks.md, "Surfaces"): an agent gives another a task, the assignee asks and
//! submits, the owner answers and reviews. Each call moves the task through
//! [`crate::tasks::state`]'s guards (the caller's identity is its token's, never an argument);
//! each message a move carries to the other party is a run into that party's session, framed
//! as inter-session data, with no reply-back loop.

use std::sync::Arc;

use serde_json::{Value, json};

use super::results::ToolResult;
use super::tools::{self, *};
use super::{CallError, Hub, HubCaller};
use crate::tasks::state::{Actor, Event, TaskState};
use crate::tasks::store::{Applied, NewTask, Requester, Task, TaskError, TaskStore};

/// Whether a run from tool `tool` carries a task's message (and gets no reply-back loop).
pub(super) fn carries(tool: &str) -> bool {
    matches!(
        tool,
        tools::TASKS_CREATE | tools::TASKS_UPDATE | tools::TASKS_REVIEW
    )
}

/// The door task events from an agent come through.
const DOOR: &str = "mcp";

fn error(message: impl Into<String>) -> ToolResult {
    ToolResult::Error(message.into())
}

/// A task as its tools show it: as the operator sees it.
fn shown(task: &Task, events: Option<Vec<crate::tasks::store::TaskEvent>>) -> Value {
    serde_json::to_value(TaskView::of(task, events)).unwrap_or(Value::Null)
}

impl Hub {
    /// Tells task `id`'s room (the conversation its owner's session last took a message
    /// from) of a move, through the outbox; a room with no external conversation hears
    /// nothing, which is said in the log.
    async fn tell_room(&self, id: &str, room: Option<&str>, text: String) {
        let Some(room) = room else {
            return;
        };
        let cause_id = format!("{id}@{}", crate::clock::now());
        let text = format!("[task {id}] {text}");
        match self
            .access
            .post_to_session_route(room, text, crate::access::outbox::Cause::Task, &cause_id)
            .await
        {
            crate::access::Beat::Delivered(_) => {}
            other => tracing::debug!(task = id, room, ?other, "a task's move was not told"),
        }
    }

    /// Runs `f` on the task store off the async threads.
    async fn task_db<T: Send + 'static>(
        &self,
        f: impl FnOnce(&TaskStore) -> Result<T, TaskError> + Send + 'static,
    ) -> Result<Result<T, String>, CallError> {
        let store = self.tasks.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(Ok(value)) => Ok(Ok(value)),
            Ok(Err(TaskError::State(e))) => Err(CallError::from(e)),
            Ok(Err(refused)) => Ok(Err(refused.to_string())),
            Err(e) => Err(CallError::Internal(e.to_string())),
        }
    }

    /// Task `id` when `caller`'s agent owns it or works on it.
    async fn task_of(
        &self,
        caller: &HubCaller,
        id: &str,
    ) -> Result<Result<Task, String>, CallError> {
        let key = id.to_string();
        let found = self.task_db(move |s| Ok(s.get(&key)?)).await?;
        Ok(match found {
            Ok(Some(task)) if task.owner == caller.agent_id || task.assignee == caller.agent_id => {
                Ok(task)
            }
            // Another agent's task is as unknown to the caller as one that does not exist.
            Ok(_) => Err(format!("no task `{id}` of yours (tasks_list shows yours)")),
            Err(why) => Err(why),
        })
    }

    /// Applies `event` by `caller` to task `id`.
    async fn task_move(
        &self,
        caller: &HubCaller,
        id: &str,
        event: Event,
    ) -> Result<Result<Applied, String>, CallError> {
        let actor = Actor::Agent {
            agent_id: caller.agent_id.clone(),
        };
        let id = id.to_string();
        self.task_db(move |s| s.apply(&id, &event, &actor, DOOR, &[], None))
            .await
    }

    pub(super) async fn tasks_create(
        self: &Arc<Self>,
        caller: &HubCaller,
        args: TaskCreateArgs,
    ) -> Result<ToolResult, CallError> {
        let title = args.title.trim();
        if title.is_empty()
            || title.chars().count() > MAX_TITLE_CHARS
            || title.chars().any(char::is_control)
        {
            return Ok(error(format!(
                "the title is a line of 1 to {MAX_TITLE_CHARS} characters: say what to do, and put the rest in `acceptance`"
            )));
        }
        if args.acceptance.trim().is_empty() || args.acceptance.len() > MAX_MESSAGE_BYTES {
            return Ok(error(format!(
                "`acceptance` is the condition the result is accepted on: 1 byte to {MAX_MESSAGE_BYTES} bytes"
            )));
        }
        let assignee = crate::ids::agent_id(&args.agent_id).into_owned();
        if assignee == caller.agent_id {
            return Ok(error(
                "a task is for another agent: work on your own directly, or spawn with sessions_spawn",
            ));
        }
        let policy = self.policy();
        match policy.agents.get(&assignee) {
            None => {
                return Ok(error(format!(
                    "no agent `{assignee}` (agents_list shows whom you may message)"
                )));
            }
            Some(a) if !a.runtime.takes_prompts() => {
                return Ok(error(format!(
                    "agent `{assignee}` has no ACP or A2A runtime: it takes no tasks"
                )));
            }
            Some(_) => {}
        }
        if let Err(denial) = policy.agent_to_agent(&caller.agent_id, &assignee) {
            return Ok(self.forbid(denial));
        }
        if let Err(refusal) = self.access.budget_allows_turn(&assignee) {
            return Ok(self.over_budget(&refusal, caller).await);
        }
        let new = NewTask {
            title: title.to_string(),
            acceptance: args.acceptance,
            requester: Requester::Session(caller.session_key.clone()),
            owner: caller.agent_id.clone(),
            assignee: assignee.clone(),
            room: Some(caller.session_key.clone()),
            parent: None,
        };
        let task = match self.task_db(move |s| Ok(s.create(&new, DOOR)?)).await? {
            Ok(task) => task,
            Err(why) => return Ok(error(why)),
        };
        let id = task.id.clone();
        let brief = format!(
            "[deepcli task {id}] agent `{}` gives you this task; this session is for it alone.\nTitle: {}\nAcceptance: {}\nIf something you need is unclear, ask with tasks_update {{\"taskId\": \"{id}\", \"action\": \"ask\", \"text\": \"<your question>\"}} and wait for the answer: do not guess. When you are done, hand in your result and its evidence with tasks_update {{\"taskId\": \"{id}\", \"action\": \"submit\", \"text\": \"<result and evidence>\"}}.",
            task.owner, task.title, task.acceptance
        );
        let run = self
            .start_send(
                Some(caller.clone()),
                &assignee,
                &task.session_key,
                brief,
                TASKS_CREATE,
            )
            .await?;
        let started = id.clone();
        self.task_db(move |s| s.apply(&started, &Event::Started, &Actor::Hub, DOOR, &[], None))
            .await?
            .map_err(CallError::Internal)?;
        self.tell_room(
            &id,
            task.room.as_deref(),
            format!(
                "{} gave {} a task: {}. Accepted when: {}",
                task.owner, task.assignee, task.title, task.acceptance
            ),
        )
        .await;
        Ok(ToolResult::Document(json!({
            "taskId": id,
            "sessionKey": task.session_key,
            "state": TaskState::Working.as_str(),
            "runId": run,
        })))
    }

    pub(super) async fn tasks_get(
        &self,
        caller: &HubCaller,
        args: TaskArgs,
    ) -> Result<ToolResult, CallError> {
        let task = match self.task_of(caller, &args.task_id).await? {
            Ok(task) => task,
            Err(why) => return Ok(error(why)),
        };
        let id = task.id.clone();
        let events = self.task_db(move |s| Ok(s.events(&id)?)).await?;
        let doc = shown(&task, Some(events.unwrap_or_default()));
        Ok(ToolResult::Document(doc))
    }

    pub(super) async fn tasks_list(
        &self,
        caller: &HubCaller,
        args: TaskListArgs,
    ) -> Result<ToolResult, CallError> {
        let limit = args.limit.unwrap_or(50).clamp(1, super::page::MAX_LIMIT);
        let agent = caller.agent_id.clone();
        let tasks = self
            .task_db(move |s| Ok(s.of_agent(&agent, limit)?))
            .await?
            .unwrap_or_default();
        let tasks: Vec<Value> = tasks.iter().map(|t| shown(t, None)).collect();
        Ok(ToolResult::Document(
            json!({"count": tasks.len(), "tasks": tasks}),
        ))
    }

    pub(super) async fn tasks_update(
        self: &Arc<Self>,
        caller: &HubCaller,
        args: TaskUpdateArgs,
    ) -> Result<ToolResult, CallError> {
        if args.text.len() > MAX_MESSAGE_BYTES {
            return Ok(error(format!(
                "the text is {} bytes; the limit is {MAX_MESSAGE_BYTES} bytes",
                args.text.len()
            )));
        }
        let task = match self.task_of(caller, &args.task_id).await? {
            Ok(task) => task,
            Err(why) => return Ok(error(why)),
        };
        // The assignee speaks for its task in the task's own session only.
        if matches!(args.action, TaskAction::Ask | TaskAction::Submit)
            && task.assignee == caller.agent_id
            && caller.session_key != task.session_key
        {
            return Ok(error(format!(
                "a task's assignee asks and submits from the task's own session, {}; this is {}",
                task.session_key, caller.session_key
            )));
        }
        let text = args.text;
        let event = match args.action {
            TaskAction::Ask => Event::Asked {
                question: text.clone(),
            },
            TaskAction::Answer => Event::Answered {
                answer: text.clone(),
            },
            TaskAction::Submit => Event::Submitted {
                summary: text.clone(),
            },
        };
        let applied = match self.task_move(caller, &task.id, event).await? {
            Ok(applied) => applied,
            Err(why) => return Ok(error(why)),
        };
        let Applied::Moved { to, .. } = applied else {
            return Ok(error(format!(
                "task `{}` is {} already: nothing changed",
                task.id, task.state
            )));
        };
        let id = &task.id;
        // The other party hears of it in its own session.
        let (agent, key, said) = match args.action {
            TaskAction::Ask => (
                &task.owner,
                task.room.clone().unwrap_or_default(),
                format!(
                    "[deepcli task {id}] agent `{}` asks before going on: {text}\nAnswer with tasks_update {{\"taskId\": \"{id}\", \"action\": \"answer\", \"text\": \"<your answer>\"}}.",
                    task.assignee
                ),
            ),
            TaskAction::Answer => (
                &task.assignee,
                task.session_key.clone(),
                format!(
                    "[deepcli task {id}] the answer to your question: {text}\nGo on with the task."
                ),
            ),
            TaskAction::Submit => (
                &task.owner,
                task.room.clone().unwrap_or_default(),
                format!(
                    "[deepcli task {id}] agent `{}` submitted its result: {text}\nCheck it yourself against the acceptance ({}), then record your verdict with tasks_review {{\"taskId\": \"{id}\", \"passed\": true|false, \"notes\": \"<what you checked and found>\"}}.",
                    task.assignee, task.acceptance
                ),
            ),
        };
        let run = if key.is_empty() {
            None
        } else {
            Some(
                self.start_send(Some(caller.clone()), agent, &key, said, TASKS_UPDATE)
                    .await?,
            )
        };
        let told = match args.action {
            TaskAction::Ask => format!("{} asks: {text}", caller.agent_id),
            TaskAction::Answer => format!("{} answered: {text}", caller.agent_id),
            TaskAction::Submit => format!("{} submitted its result: {text}", caller.agent_id),
        };
        self.tell_room(id, task.room.as_deref(), told).await;
        Ok(ToolResult::Document(
            json!({"taskId": id, "state": to.as_str(), "runId": run}),
        ))
    }

    pub(super) async fn tasks_review(
        self: &Arc<Self>,
        caller: &HubCaller,
        args: TaskReviewArgs,
    ) -> Result<ToolResult, CallError> {
        if args.notes.len() > MAX_MESSAGE_BYTES {
            return Ok(error(format!(
                "the notes are {} bytes; the limit is {MAX_MESSAGE_BYTES} bytes",
                args.notes.len()
            )));
        }
        let task = match self.task_of(caller, &args.task_id).await? {
            Ok(task) => task,
            Err(why) => return Ok(error(why)),
        };
        if task.state == TaskState::Submitted
            && let Err(why) = self.task_move(caller, &task.id, Event::ReviewBegun).await?
        {
            return Ok(error(why));
        }
        let verdict = Event::Reviewed {
            passed: args.passed,
            notes: args.notes.clone(),
        };
        let to = match self.task_move(caller, &task.id, verdict).await? {
            Ok(Applied::Moved { to, .. }) => to,
            Ok(Applied::Late { state }) => {
                return Ok(error(format!(
                    "task `{}` is {state} already: nothing changed",
                    task.id
                )));
            }
            Err(why) => return Ok(error(why)),
        };
        let told = if args.passed {
            format!(
                "{} checked the result: passes ({}). A person decides: /accept {} or /reject {} <reason>",
                task.owner, args.notes, task.id, task.id
            )
        } else {
            format!(
                "{} checked the result: not yet ({}); back to {}",
                task.owner, args.notes, task.assignee
            )
        };
        self.tell_room(&task.id, task.room.as_deref(), told).await;
        let mut run = None;
        if !args.passed {
            let said = format!(
                "[deepcli task {}] agent `{}` checked your result and it does not pass yet: {}\nWork on it and submit again.",
                task.id, task.owner, args.notes
            );
            run = Some(
                self.start_send(
                    Some(caller.clone()),
                    &task.assignee,
                    &task.session_key,
                    said,
                    TASKS_REVIEW,
                )
                .await?,
            );
        }
        Ok(ToolResult::Document(
            json!({"taskId": task.id, "state": to.as_str(), "runId": run}),
        ))
    }
}

/// Why a door's call on a task (the operator's, a person's) did nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskDoorError {
    #[error("{0}")]
    NotFound(String),
    /// Refused by the state machine, or a task already final.
    #[error("{0}")]
    Refused(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Call(#[from] CallError),
}

/// A task as the operator sees it (`tasks/show`, `tasks/list`, a decision's answer).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskView {
    pub task_id: String,
    pub title: String,
    pub acceptance: String,
    pub state: &'static str,
    pub runtime_state: Option<String>,
    pub owner: String,
    pub assignee: String,
    pub requester: String,
    pub session_key: String,
    pub room: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Its history (`tasks/show`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<crate::tasks::store::TaskEvent>>,
}

impl TaskView {
    fn of(task: &Task, events: Option<Vec<crate::tasks::store::TaskEvent>>) -> TaskView {
        TaskView {
            task_id: task.id.clone(),
            title: task.title.clone(),
            acceptance: task.acceptance.clone(),
            state: task.state.as_str(),
            runtime_state: task.runtime_state.clone(),
            owner: task.owner.clone(),
            assignee: task.assignee.clone(),
            requester: match &task.requester {
                Requester::Person(id) | Requester::Session(id) => id.clone(),
                Requester::Operator => "operator".into(),
            },
            session_key: task.session_key.clone(),
            room: task.room.clone(),
            created_at: task.created_at.clone(),
            updated_at: task.updated_at.clone(),
            events,
        }
    }
}

/// `tasks/list`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskList {
    pub count: usize,
    pub tasks: Vec<TaskView>,
}

/// A person's verdict or the operator's cancel (`tasks/accept|reject|cancel`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Accept,
    /// `reopen`: back to the assignee with the reason; else closed.
    Reject {
        reason: String,
        reopen: bool,
    },
    Cancel,
}

impl Hub {
    /// `tasks/list`: the tasks of `room` (all when `None`), newest first.
    pub(crate) async fn operator_tasks(
        &self,
        room: Option<String>,
        limit: usize,
    ) -> Result<TaskList, TaskDoorError> {
        let tasks = self
            .task_db(move |s| Ok(s.list(room.as_deref(), limit)?))
            .await?
            .map_err(TaskDoorError::Internal)?;
        let tasks: Vec<TaskView> = tasks.iter().map(|t| TaskView::of(t, None)).collect();
        Ok(TaskList {
            count: tasks.len(),
            tasks,
        })
    }

    /// `tasks/show`: one task with its history.
    pub(crate) async fn operator_task(&self, id: &str) -> Result<TaskView, TaskDoorError> {
        let key = id.to_string();
        let found = self
            .task_db(move |s| {
                let Some(task) = s.get(&key)? else {
                    return Ok(None);
                };
                let events = s.events(&key)?;
                Ok(Some((task, events)))
            })
            .await?
            .map_err(TaskDoorError::Internal)?;
        let Some((task, events)) = found else {
            return Err(TaskDoorError::NotFound(format!("no task `{id}`")));
        };
        Ok(TaskView::of(&task, Some(events)))
    }

    /// A verdict on task `id` by `actor` from `door`, with the owner's `approvers`: accepted,
    /// rejected (back to the assignee with the reason, or closed), or cancelled (the turn in
    /// the task's session cancelled; `cancelled` when the runtime confirms, else
    /// `uncertain`).
    pub(crate) async fn decide_task(
        self: &Arc<Self>,
        id: &str,
        verdict: Verdict,
        actor: Actor,
        door: &'static str,
        approvers: Vec<String>,
    ) -> Result<TaskView, TaskDoorError> {
        let who = actor.to_string();
        let event = match &verdict {
            Verdict::Accept => Event::Accepted,
            Verdict::Reject { reason, reopen } => Event::Rejected {
                reason: reason.clone(),
                reopen: *reopen,
            },
            Verdict::Cancel => Event::CancelRequested,
        };
        let key = id.to_string();
        let moved = self
            .task_db(move |s| s.apply(&key, &event, &actor, door, &approvers, None))
            .await?;
        let applied = match moved {
            Ok(applied) => applied,
            Err(why) if why.starts_with("no task") => return Err(TaskDoorError::NotFound(why)),
            Err(why) => return Err(TaskDoorError::Refused(why)),
        };
        if let Applied::Late { state } = applied {
            return Err(TaskDoorError::Refused(format!(
                "task `{id}` is {state} already: nothing changed"
            )));
        }
        let task = self.operator_task(id).await?;
        let told = match &verdict {
            Verdict::Accept => format!("accepted by {who}"),
            Verdict::Reject { reason, reopen } => format!(
                "rejected by {who}: {reason}{}",
                if *reopen {
                    format!("; back to {}", task.assignee)
                } else {
                    "; closed".to_string()
                }
            ),
            Verdict::Cancel => format!("cancel asked by {who}"),
        };
        self.tell_room(id, task.room.as_deref(), told).await;
        match verdict {
            Verdict::Reject {
                reason,
                reopen: true,
            } => {
                let said = format!(
                    "[deepcli task {id}] a person rejected the result: {reason}\nWork on it and submit again."
                );
                self.start_send(None, &task.assignee, &task.session_key, said, TASKS_REVIEW)
                    .await?;
            }
            Verdict::Cancel => {
                let cancel = self
                    .operator_cancel(&task.session_key)
                    .await
                    .map_err(|e| TaskDoorError::Internal(e.to_string()))?;
                let confirmed = cancel
                    .runs
                    .iter()
                    .all(|r| r.state == crate::state::RunState::Cancelled)
                    && !matches!(
                        cancel.turn_cancel,
                        Some(crate::access::CancelState::Uncertain)
                    );
                let settled = Event::CancelSettled { confirmed };
                let key = id.to_string();
                self.task_db(move |s| s.apply(&key, &settled, &Actor::Hub, door, &[], None))
                    .await?
                    .map_err(TaskDoorError::Internal)?;
                return self.operator_task(id).await;
            }
            _ => {}
        }
        Ok(task)
    }
}
