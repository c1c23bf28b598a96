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
use crate::tasks::artifacts::{self, ArtifactError, ArtifactName, Stored};
use crate::tasks::state::{Actor, Event, TaskState};
use crate::tasks::store::{
    Applied, ArtifactRow, HandedIn, NewTask, Requester, Step, Task, TaskError, TaskEvent, TaskStore,
};

/// Whether a run from tool `tool` carries a task's message (and gets no reply-back loop).
pub(super) fn carries(tool: &str) -> bool {
    matches!(
        tool,
        tools::TASKS_CREATE | tools::TASKS_UPDATE | tools::TASKS_REVIEW
    )
}

/// The most bytes of an artifact `artifacts_get` gives inline, as text.
const INLINE_BYTES: u64 = 64 * 1024;

/// What a task's whole record holds besides the task: for `tasks_get` and `tasks/show`.
struct Record {
    events: Vec<TaskEvent>,
    steps: Vec<Step>,
    artifacts: Vec<ArtifactRow>,
}

fn record(store: &TaskStore, id: &str) -> Result<Record, TaskError> {
    Ok(Record {
        events: store.events(id)?,
        steps: store.steps(id)?,
        artifacts: store.artifacts(id)?,
    })
}

/// A task to create, as a door asked for it.
pub(crate) struct Asked {
    pub requester: Requester,
    pub owner: String,
    pub assignee: String,
    pub title: String,
    pub acceptance: String,
    /// The session key of the conversation it is discussed in.
    pub room: Option<String>,
}

/// Why a task was not created: said in words, or (to an agent) a policy refusal's result.
pub(crate) enum Refusal {
    Said(String),
    Result(ToolResult),
}

/// The door task events from an agent come through.
const DOOR: &str = "mcp";

fn error(message: impl Into<String>) -> ToolResult {
    ToolResult::Error(message.into())
}

/// A task as its tools show it: as the operator sees it.
fn shown(task: &Task, record: Option<Record>) -> Value {
    serde_json::to_value(TaskView::of(task, record)).unwrap_or(Value::Null)
}

/// File `path` of `caller`'s workspace, to hand on: its name, the workspace and the agent's
/// limits on an artifact's bytes (a file's, and all of a task's); `Err`: why not, for the
/// agent.
fn own_file(
    policy: &super::HubPolicy,
    caller: &HubCaller,
    path: &str,
) -> Result<(ArtifactName, std::path::PathBuf, Limits), String> {
    let Some(me) = policy.agents.get(&caller.agent_id) else {
        return Err(format!("no agent `{}` in force", caller.agent_id));
    };
    let name = ArtifactName::parse(path, &me.workspace)?;
    let limits = Limits {
        file: me.artifact_max_bytes,
        quota: me.artifact_quota_bytes,
    };
    Ok((name, me.workspace.clone(), limits))
}

/// An agent's limits on what it hands in: `artifactMaxBytes`, `artifactQuotaBytes`.
#[derive(Debug, Clone, Copy)]
struct Limits {
    file: u64,
    quota: u64,
}

/// An artifact's or the store's failure: the agent's to fix, or deepcli's.
fn artifact_failure(e: ArtifactError) -> Result<String, CallError> {
    match e {
        ArtifactError::Refused(why) => Ok(why),
        ArtifactError::Io(why) => Err(CallError::Internal(why)),
    }
}

/// Stores file `name` of `workspace` in `store` (within `limits`) and records it with
/// `record`; again when a sweep of the store took the stored copy before its row was written
/// (state::artifact_files), at most three times. `Ok(Err)`: refused, and why, for the agent.
fn store_and_record(
    workspace: &std::path::Path,
    name: &ArtifactName,
    store: &std::path::Path,
    limits: Limits,
    by: &str,
    record: impl Fn(&HandedIn<'_>) -> Result<(), TaskError>,
) -> Result<Result<Stored, String>, CallError> {
    let mut tries = 0;
    loop {
        let stored = match artifacts::hand_in(workspace, name, store, limits.file) {
            Ok(stored) => stored,
            Err(e) => return artifact_failure(e).map(Err),
        };
        let path = store.join(&stored.sha256);
        let file = HandedIn {
            name: name.as_str(),
            stored: &stored,
            path: &path,
            by,
            quota: limits.quota,
        };
        match record(&file) {
            Ok(()) => return Ok(Ok(stored)),
            Err(TaskError::Gone) if tries < 2 => tries += 1,
            Err(e) => return task_failure(e).map(Err),
        }
    }
}

fn task_failure(e: TaskError) -> Result<String, CallError> {
    match e {
        TaskError::State(e) => Err(CallError::from(e)),
        refused => Ok(refused.to_string()),
    }
}

/// The first 12 hex digits of a hash, as a room is told it.
fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}

impl Hub {
    /// Tells task `id`'s room (the conversation its owner's session last took a message
    /// from) of a move, through the outbox; a room with no external conversation hears
    /// nothing, which is said in the log.
    async fn tell_room(&self, id: &str, room: Option<&str>, text: String) {
        self.tell_room_as(id, room, text, crate::access::outbox::Cause::Task)
            .await;
    }

    /// [`Hub::tell_room`] with `cause` (`task-verdict`: a person decides, with buttons).
    async fn tell_room_as(
        &self,
        id: &str,
        room: Option<&str>,
        text: String,
        cause: crate::access::outbox::Cause,
    ) {
        let Some(room) = room else {
            return;
        };
        // Its own id: two moves in one second are two messages (an outcome edits its verdict).
        let cause_id = format!("{id}@{}", uuid::Uuid::new_v4().simple());
        let text = format!("[task {id}] {text}");
        match self
            .access
            .post_to_session_route(room, text, cause, &cause_id)
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
        let assignee = crate::ids::agent_id(&args.agent_id).into_owned();
        let asked = Asked {
            requester: Requester::Session(caller.session_key.clone()),
            owner: caller.agent_id.clone(),
            assignee,
            title: args.title,
            acceptance: args.acceptance,
            room: Some(caller.session_key.clone()),
        };
        match self.create_task(Some(caller), asked, DOOR).await? {
            Ok((task, run)) => Ok(ToolResult::Document(json!({
                "taskId": task.id,
                "sessionKey": task.session_key,
                "state": TaskState::Working.as_str(),
                "runId": run,
            }))),
            Err(Refusal::Said(why)) => Ok(error(why)),
            Err(Refusal::Result(result)) => Ok(result),
        }
    }

    /// Creates task `asked` from `door`, checked as `tasks.md` says (a title of one line, an
    /// acceptance, an assignee other than the owner that takes prompts, that the owner may
    /// message and whose budget allows a turn), delivers its brief to the task's session and
    /// tells the room. `caller`: the agent's session that asked, if one did.
    pub(crate) async fn create_task(
        self: &Arc<Self>,
        caller: Option<&HubCaller>,
        asked: Asked,
        door: &'static str,
    ) -> Result<Result<(Task, String), Refusal>, CallError> {
        let said = |why: String| Ok(Err(Refusal::Said(why)));
        let title = asked.title.trim();
        if title.is_empty()
            || title.chars().count() > MAX_TITLE_CHARS
            || title.chars().any(char::is_control)
        {
            return said(format!(
                "the title is a line of 1 to {MAX_TITLE_CHARS} characters: say what to do, and put the rest in `acceptance`"
            ));
        }
        if asked.acceptance.trim().is_empty() || asked.acceptance.len() > MAX_MESSAGE_BYTES {
            return said(format!(
                "`acceptance` is the condition the result is accepted on: 1 byte to {MAX_MESSAGE_BYTES} bytes"
            ));
        }
        let (owner, assignee) = (asked.owner.clone(), asked.assignee.clone());
        if assignee == owner {
            return said(format!(
                "a task is for another agent than `{owner}`, which checks its result: work on your own directly, or spawn with sessions_spawn"
            ));
        }
        let policy = self.policy();
        match policy.agents.get(&assignee) {
            None => {
                return said(format!(
                    "no agent `{assignee}` (agents_list shows whom you may message)"
                ));
            }
            // A remote A2A agent asks and submits by its task's states (tasks.md).
            Some(a)
                if !matches!(
                    a.runtime,
                    crate::config::model::RuntimeKind::Acp | crate::config::model::RuntimeKind::A2a
                ) =>
            {
                return said(format!(
                    "agent `{assignee}` has no ACP or A2A runtime (runtime.kind {}): it could not ask or submit, so it takes no tasks; message it with sessions_send",
                    a.runtime.as_str()
                ));
            }
            Some(_) => {}
        }
        if let Err(denial) = policy.agent_to_agent(&owner, &assignee) {
            return Ok(Err(match caller {
                Some(_) => Refusal::Result(self.forbid(denial)),
                None => Refusal::Said(format!(
                    "agent `{owner}` may not give agent `{assignee}` work (tools.agentToAgent)"
                )),
            }));
        }
        if let Err(refusal) = self.access.budget_allows_turn(&assignee) {
            return Ok(Err(match caller {
                Some(caller) => Refusal::Result(self.over_budget(&refusal, caller).await),
                None => Refusal::Said(format!("agent `{assignee}` is over its budget: {refusal}")),
            }));
        }
        let requested_by = match &asked.requester {
            Requester::Person(id) => {
                format!("{id} (a person) gives you this task; agent `{owner}` checks your result")
            }
            Requester::Session(_) => {
                format!("agent `{owner}` gives you this task and checks your result")
            }
            Requester::Operator => {
                format!("the operator gives you this task; agent `{owner}` checks your result")
            }
            // An A2A peer's task is made by the A2A server, never here.
            Requester::Peer(peer) => {
                format!("{peer} (an A2A peer) gives you this task")
            }
        };
        let new = NewTask {
            title: title.to_string(),
            acceptance: asked.acceptance,
            requester: asked.requester,
            owner,
            assignee: assignee.clone(),
            room: asked.room,
            parent: None,
        };
        let task = match self.task_db(move |s| Ok(s.create(&new, door)?)).await? {
            Ok(task) => task,
            Err(why) => return said(why),
        };
        let id = task.id.clone();
        let remote = policy
            .agents
            .get(&assignee)
            .is_some_and(|a| a.runtime == crate::config::model::RuntimeKind::A2a);
        // A remote A2A agent has no Hub tools: it gets the task as a message in the task's own
        // A2A context, and asks back or answers by its task's states (tasks.md).
        let brief = if remote {
            format!(
                "[deepcli task {id}] Accepted when: {}\n{}",
                task.acceptance, task.title
            )
        } else {
            format!(
                "[deepcli task {id}] {requested_by}. This session is for it alone.\nTitle: {}\nAcceptance: {}\nIf something you need is unclear, ask with tasks_update {{\"taskId\": \"{id}\", \"action\": \"ask\", \"text\": \"<your question>\"}} and wait for the answer: do not guess. When you are done, hand in your result and its evidence with tasks_update {{\"taskId\": \"{id}\", \"action\": \"submit\", \"text\": \"<result and evidence>\", \"artifacts\": [\"<files of your workspace>\"]}}.",
                task.title, task.acceptance
            )
        };
        let run = self
            .start_send(
                caller.cloned(),
                &assignee,
                &task.session_key,
                brief,
                TASKS_CREATE,
            )
            .await?;
        let started = id.clone();
        self.task_db(move |s| s.apply(&started, &Event::Started, &Actor::Hub, door, &[], None))
            .await?
            .map_err(CallError::Internal)?;
        let who = match &task.requester {
            Requester::Session(_) => task.owner.clone(),
            Requester::Person(id) => format!("{id}, for {},", task.owner),
            Requester::Operator => format!("the operator, for {},", task.owner),
            Requester::Peer(peer) => peer.clone(),
        };
        self.tell_room(
            &id,
            task.room.as_deref(),
            format!(
                "{who} gave {} a task: {}. Accepted when: {}",
                task.assignee, task.title, task.acceptance
            ),
        )
        .await;
        Ok(Ok((task, run)))
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
        let record = match self.task_db(move |s| record(s, &id)).await? {
            Ok(record) => record,
            Err(why) => return Ok(error(why)),
        };
        Ok(ToolResult::Document(shown(&task, Some(record))))
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
        if !args.artifacts.is_empty() && args.action != TaskAction::Submit {
            return Ok(error(
                "`artifacts` go with `submit`; hand in a file at another time with artifacts_put",
            ));
        }
        if args.artifacts.len() > tools::MAX_STEPS {
            return Ok(error(format!(
                "at most {} artifacts at once",
                tools::MAX_STEPS
            )));
        }
        // The files first: a result whose evidence could not be handed in is not submitted.
        let mut handed = Vec::new();
        for path in &args.artifacts {
            match self.hand_in(caller, &task, path).await? {
                Ok(row) => handed.push(row),
                Err(why) => {
                    return Ok(error(format!(
                        "not submitted: {why}{}",
                        if handed.is_empty() {
                            String::new()
                        } else {
                            format!(
                                " ({} handed in before it are kept)",
                                handed
                                    .iter()
                                    .map(|h: &Value| h["name"].as_str().unwrap_or("").to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        }
                    )));
                }
            }
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
            // A remote A2A agent gets the answer as the message's last line, with no tools
            // named: the next message of the task's A2A context.
            TaskAction::Answer
                if self
                    .policy()
                    .agents
                    .get(&task.assignee)
                    .is_some_and(|a| a.runtime == crate::config::model::RuntimeKind::A2a) =>
            {
                (
                    &task.assignee,
                    task.session_key.clone(),
                    format!("[deepcli task {id}] the answer to your question:\n{text}"),
                )
            }
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
        let mut answer = json!({"taskId": id, "state": to.as_str(), "runId": run});
        if !handed.is_empty() {
            answer["artifacts"] = Value::Array(handed);
        }
        Ok(ToolResult::Document(answer))
    }

    /// Hands in file `path` of `caller`'s workspace to `task`: stored under its hash, recorded,
    /// told to the room and, from the assignee, placed read-only in the owner's workspace.
    /// `Ok(Err)`: refused, and why, for the agent.
    async fn hand_in(
        &self,
        caller: &HubCaller,
        task: &Task,
        path: &str,
    ) -> Result<Result<Value, String>, CallError> {
        let policy = self.policy();
        let (name, workspace, limit) = match own_file(&policy, caller, path) {
            Ok(found) => found,
            Err(why) => return Ok(Err(why)),
        };
        // What the assignee hands in, the owner receives; the owner's own evidence stays with
        // the task (its workspace has it already).
        let owner_workspace = (task.assignee == caller.agent_id && task.owner != task.assignee)
            .then(|| policy.agents.get(&task.owner).map(|a| a.workspace.clone()))
            .flatten();
        let store = self.artifacts.join(&task.id);
        let tasks = self.tasks.clone();
        let id = task.id.clone();
        let by = caller.agent_id.clone();
        let done = tokio::task::spawn_blocking(move || {
            let stored = match store_and_record(&workspace, &name, &store, limit, &by, |file| {
                tasks.put_artifact(&id, file, DOOR)
            })? {
                Ok(stored) => stored,
                Err(why) => return Ok::<_, CallError>(Err(why)),
            };
            let mut answer =
                json!({"name": name.as_str(), "sha256": stored.sha256, "size": stored.size});
            if let Some(ws) = owner_workspace {
                match artifacts::place(&store, &stored, &ws, &id, &name) {
                    Ok(at) => answer["placedForOwner"] = json!(at),
                    // Kept and recorded all the same: the owner gets it with artifacts_get once
                    // its workspace is in order.
                    Err(e) => answer["notPlaced"] = json!(e.to_string()),
                }
            }
            Ok(Ok(answer))
        })
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
        if let Ok(answer) = &done {
            self.tell_room(
                &task.id,
                task.room.as_deref(),
                format!(
                    "{} handed in {} ({} bytes, sha256 {})",
                    caller.agent_id,
                    answer["name"].as_str().unwrap_or(""),
                    answer["size"],
                    short(answer["sha256"].as_str().unwrap_or(""))
                ),
            )
            .await;
        }
        Ok(done)
    }

    pub(super) async fn artifacts_put(
        &self,
        caller: &HubCaller,
        args: ArtifactPutArgs,
    ) -> Result<ToolResult, CallError> {
        let task = match self.task_of(caller, &args.task_id).await? {
            Ok(task) => task,
            Err(why) => {
                // An A2A peer's message this session is answering: the file goes to the peer.
                if let Some(run) = self.a2a_run_of(caller, &args.task_id).await? {
                    let mut answer = match self.hand_to_peer(caller, &run, &args.path).await? {
                        Ok(answer) => answer,
                        Err(why) => return Ok(error(why)),
                    };
                    // The peer's A2A task is a deepcli task: the file is its artifact, too.
                    if let Some(task) = self.peer_task_of_run(&run).await? {
                        match self.hand_in(caller, &task, &args.path).await? {
                            Ok(_) => answer["taskId"] = json!(task.id),
                            Err(why) => answer["notTheTasks"] = json!(why),
                        }
                    }
                    return Ok(ToolResult::Document(answer));
                }
                return Ok(error(why));
            }
        };
        Ok(match self.hand_in(caller, &task, &args.path).await? {
            Ok(answer) => ToolResult::Document(answer),
            Err(why) => error(why),
        })
    }

    /// Run `id` when it is an A2A peer's message that `caller`'s session is answering now.
    async fn a2a_run_of(&self, caller: &HubCaller, id: &str) -> Result<Option<String>, CallError> {
        let store = self.store.clone();
        let id = id.to_string();
        let run = tokio::task::spawn_blocking(move || store.run(&id))
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?
            .map_err(|e| CallError::Internal(e.to_string()))?;
        Ok(run
            .filter(|r| {
                r.source_tool == super::a2a::SOURCE_TOOL
                    && r.target_session_key == caller.session_key
                    && r.target_agent_id == caller.agent_id
                    && !r.state.is_final()
            })
            .map(|r| r.run_id))
    }

    /// Hands file `path` of `caller`'s workspace to the A2A peer of run `run_id`: stored under
    /// its hash (the same limit as a task's artifacts), recorded with its media type; the peer
    /// gets it as a file part of the task's artifacts. `Ok(Err)`: refused, and why.
    async fn hand_to_peer(
        &self,
        caller: &HubCaller,
        run_id: &str,
        path: &str,
    ) -> Result<Result<Value, String>, CallError> {
        let (name, workspace, limit) = match own_file(&self.policy(), caller, path) {
            Ok(found) => found,
            Err(why) => return Ok(Err(why)),
        };
        let store = super::a2a::run_store(&self.artifacts, run_id);
        let tasks = self.tasks.clone();
        let (run, by) = (run_id.to_string(), caller.agent_id.clone());
        tokio::task::spawn_blocking(move || {
            let media_type = std::cell::Cell::new("application/octet-stream");
            let stored = match store_and_record(&workspace, &name, &store, limit, &by, |file| {
                media_type.set(artifacts::media_type_of(&name, &store, file.stored));
                tasks.put_run_artifact(&run, file, media_type.get())
            })? {
                Ok(stored) => stored,
                Err(why) => return Ok(Err(why)),
            };
            let media_type = media_type.get();
            Ok(Ok(json!({
                "name": name.as_str(),
                "sha256": stored.sha256,
                "size": stored.size,
                "mediaType": media_type,
                "to": "the A2A peer, as a file part of its task's artifacts",
            })))
        })
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?
    }

    pub(super) async fn artifacts_get(
        &self,
        caller: &HubCaller,
        args: ArtifactGetArgs,
    ) -> Result<ToolResult, CallError> {
        let task = match self.task_of(caller, &args.task_id).await? {
            Ok(task) => task,
            Err(why) => return Ok(error(why)),
        };
        let id = task.id.clone();
        let rows = match self.task_db(move |s| Ok(s.artifacts(&id)?)).await? {
            Ok(rows) => rows,
            Err(why) => return Ok(error(why)),
        };
        let Some(wanted) = args.name else {
            return Ok(ToolResult::Document(
                json!({"taskId": task.id, "count": rows.len(), "artifacts": rows}),
            ));
        };
        let Some(row) = rows.into_iter().find(|r| r.name == wanted) else {
            return Ok(error(format!(
                "task `{}` has no artifact `{wanted}` (artifacts_get without a name lists them)",
                task.id
            )));
        };
        let Some(workspace) = self
            .policy()
            .agents
            .get(&caller.agent_id)
            .map(|a| a.workspace.clone())
        else {
            return Ok(error(format!("no agent `{}` in force", caller.agent_id)));
        };
        let store = self.artifacts.join(&task.id);
        // Stored by the replica whose agent handed it in (docs/scale-out.md).
        self.artifact_here(&store, &row.sha256).await;
        let id = task.id.clone();
        let placed = tokio::task::spawn_blocking(move || {
            let stored = row.stored();
            let name = ArtifactName::stored(row.name.clone());
            let at = artifacts::place(&store, &stored, &workspace, &id, &name)?;
            let text = artifacts::text_of(&store, &stored, INLINE_BYTES);
            Ok::<_, ArtifactError>((row, at, text))
        })
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
        match placed {
            Ok((row, at, text)) => {
                let mut answer = json!({"taskId": task.id, "name": row.name, "sha256": row.sha256, "size": row.size, "handedInBy": row.handed_in_by, "path": at});
                if let Some(text) = text {
                    answer["text"] = json!(text);
                }
                Ok(ToolResult::Document(answer))
            }
            Err(e) => Ok(error(artifact_failure(e)?)),
        }
    }

    pub(super) async fn plan_update(
        &self,
        caller: &HubCaller,
        args: PlanUpdateArgs,
    ) -> Result<ToolResult, CallError> {
        let task = match self.task_of(caller, &args.task_id).await? {
            Ok(task) => task,
            Err(why) => return Ok(error(why)),
        };
        if args.steps.is_empty() || args.steps.len() > tools::MAX_STEPS {
            return Ok(error(format!(
                "a plan update writes 1 to {} steps",
                tools::MAX_STEPS
            )));
        }
        let policy = self.policy();
        let mut steps = Vec::with_capacity(args.steps.len());
        for step in args.steps {
            let id_ok = !step.id.is_empty()
                && step.id.len() <= 64
                && !step.id.chars().any(char::is_control);
            let title_ok = !step.title.trim().is_empty()
                && step.title.chars().count() <= MAX_TITLE_CHARS
                && !step.title.chars().any(char::is_control);
            if !id_ok || !title_ok {
                return Ok(error(format!(
                    "step `{}`: an id of 1 to 64 characters and a title of one line of at most {MAX_TITLE_CHARS} characters",
                    step.id
                )));
            }
            let long = |t: &Option<String>| t.as_ref().is_some_and(|t| t.len() > MAX_MESSAGE_BYTES);
            if long(&step.acceptance) || long(&step.notes) {
                return Ok(error(format!(
                    "step `{}`: acceptance and notes are at most {MAX_MESSAGE_BYTES} bytes each",
                    step.id
                )));
            }
            // A run named is the caller's own, and tells where the step went.
            let (mut target, mut session) = (step.target_agent_id, None);
            if let Some(run_id) = &step.run_id {
                let key = run_id.clone();
                let run = self.db(move |s| s.run(&key)).await?;
                match run {
                    Some(run) if run.requester_agent_id.as_deref() == Some(&caller.agent_id) => {
                        target = Some(run.target_agent_id);
                        session = Some(run.target_session_key);
                    }
                    _ => {
                        return Ok(error(format!(
                            "step `{}`: no run `{run_id}` of yours (sessions_send and sessions_spawn return a runId)",
                            step.id
                        )));
                    }
                }
            }
            let runtime = match target.as_deref() {
                Some(agent) => match policy.agents.get(agent) {
                    Some(a) => Some(a.runtime.as_str().to_string()),
                    None => {
                        return Ok(error(format!(
                            "step `{}`: no agent `{agent}` (agents_list shows them)",
                            step.id
                        )));
                    }
                },
                None => None,
            };
            steps.push(Step {
                id: step.id,
                title: step.title,
                target_agent_id: target,
                session,
                runtime,
                run_id: step.run_id,
                acceptance: step.acceptance,
                status: step.status,
                notes: step.notes,
                updated_at: None,
            });
        }
        let id = task.id.clone();
        let actor = Actor::Agent {
            agent_id: caller.agent_id.clone(),
        };
        let written = steps.clone();
        if let Err(why) = self
            .task_db(move |s| s.put_steps(&id, &written, &actor, DOOR))
            .await?
        {
            return Ok(error(why));
        }
        let said: Vec<String> = steps
            .iter()
            .map(|s| format!("{} {} ({})", s.id, s.title, s.status.as_str()))
            .collect();
        self.tell_room(
            &task.id,
            task.room.as_deref(),
            format!("{} updated the plan: {}", caller.agent_id, said.join("; ")),
        )
        .await;
        let id = task.id.clone();
        let plan = self
            .task_db(move |s| Ok(s.steps(&id)?))
            .await?
            .unwrap_or_default();
        Ok(ToolResult::Document(
            json!({"taskId": task.id, "steps": plan}),
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
        let cause = if args.passed {
            crate::access::outbox::Cause::TaskVerdict
        } else {
            crate::access::outbox::Cause::Task
        };
        self.tell_room_as(&task.id, task.room.as_deref(), told, cause)
            .await;
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

/// The task whose session `key` is (`agent:<assignee>:task:<taskId>`).
/// How a remote A2A agent's turn in a task's session ended (its A2A task's state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RemoteTurn {
    /// `TASK_STATE_INPUT_REQUIRED`: its question.
    Asked(String),
    /// `TASK_STATE_COMPLETED`: its reply, and the file parts of its artifacts.
    Answered(String, Vec<crate::sessions::RemoteFile>),
    /// It failed (`TASK_STATE_FAILED`, or the turn broke or timed out): why.
    Failed(String),
}

impl Hub {
    /// Run `run`'s turn ended `turn`: when its target is a remote A2A agent
    /// (`runtime.kind: a2a`) working on a task in the task's session, its A2A task's state is
    /// its move (tasks.md, "Tasks for A2A agents"): input-required asks the question,
    /// completed submits the reply, failed fails the task; the raw A2A state kept beside.
    pub(super) async fn remote_task_turn(&self, run: &super::store::RunRecord, turn: RemoteTurn) {
        let Some(id) = task_of_session(&run.target_session_key).map(str::to_string) else {
            return;
        };
        let agent = run.target_agent_id.clone();
        let remote = self
            .policy()
            .agents
            .get(&agent)
            .is_some_and(|a| a.runtime == crate::config::model::RuntimeKind::A2a);
        if !remote {
            return;
        }
        let me = Actor::Agent {
            agent_id: agent.clone(),
        };
        let (event, actor, raw, said) = match turn {
            RemoteTurn::Asked(question) => (
                Event::Asked {
                    question: question.clone(),
                },
                me,
                "TASK_STATE_INPUT_REQUIRED",
                format!("{agent} asks: {question}"),
            ),
            RemoteTurn::Answered(summary, files) => {
                let summary = self.remote_files(&id, &agent, summary, files).await;
                (
                    Event::Submitted {
                        summary: summary.clone(),
                    },
                    me,
                    "TASK_STATE_COMPLETED",
                    format!("{agent} submitted its result: {summary}"),
                )
            }
            RemoteTurn::Failed(why) => (
                Event::Failed { why: why.clone() },
                Actor::Hub,
                "TASK_STATE_FAILED",
                format!("{agent}'s task failed: {why}"),
            ),
        };
        let task_id = id.clone();
        let applied = self
            .task_db(move |s| {
                let applied = s.apply(&task_id, &event, &actor, "a2a", &[], Some(raw))?;
                Ok((applied, s.get(&task_id)?))
            })
            .await;
        match applied {
            Ok(Ok((Applied::Moved { .. }, Some(task)))) => {
                self.tell_room(&id, task.room.as_deref(), said).await;
            }
            Ok(Ok(_)) => {}
            Ok(Err(why)) => {
                tracing::warn!(task = %id, why = %why, "a remote A2A agent's task did not move");
            }
            Err(e) => {
                tracing::warn!(task = %id, error = %e, "a remote A2A agent's task did not move");
            }
        }
    }
}

impl Hub {
    /// Hands in the files remote A2A agent `agent` answered task `id` with: inline bytes
    /// stored by their hash under its `artifactMaxBytes` and `artifactQuotaBytes`, as a
    /// workspace's file is; a URL only recorded (the summary names it), never fetched. The
    /// summary, saying which were kept.
    async fn remote_files(
        &self,
        id: &str,
        agent: &str,
        mut summary: String,
        files: Vec<crate::sessions::RemoteFile>,
    ) -> String {
        let Some(me) = self.policy().agents.get(agent).cloned() else {
            return summary;
        };
        let store = self.artifacts.join(id);
        let (tasks, id, by) = (self.tasks.clone(), id.to_string(), agent.to_string());
        let kept = tokio::task::spawn_blocking(move || {
            let mut said = Vec::new();
            for (i, file) in files.into_iter().enumerate() {
                let Some(bytes) = file.bytes else { continue };
                let name = artifacts::received_name(file.name.as_deref(), &format!("file-{i}"));
                let stored =
                    match artifacts::store_bytes(&bytes, &name, &store, me.artifact_max_bytes) {
                        Ok(stored) => stored,
                        Err(e) => {
                            said.push(format!("`{}` not kept: {e}", name.as_str()));
                            continue;
                        }
                    };
                let path = store.join(&stored.sha256);
                let handed = HandedIn {
                    name: name.as_str(),
                    stored: &stored,
                    path: &path,
                    by: &by,
                    quota: me.artifact_quota_bytes,
                };
                match tasks.put_artifact(&id, &handed, "a2a") {
                    Ok(()) => said.push(format!(
                        "`{}` kept as an artifact of the task ({} bytes, sha256 {})",
                        name.as_str(),
                        stored.size,
                        stored.sha256
                    )),
                    Err(e) => said.push(format!("`{}` not kept: {e}", name.as_str())),
                }
            }
            said
        })
        .await
        .unwrap_or_default();
        for line in kept {
            summary.push_str(&format!("\n[deepcli: {line}]"));
        }
        summary
    }
}

pub(crate) fn task_of_session(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("agent:")?;
    let (_agent, task) = rest.split_once(":task:")?;
    (task.starts_with("task-") && !task.contains(':')).then_some(task)
}

impl Hub {
    /// A permission request of task `id`'s session was filed (`asked`) or settled: the task
    /// waits for that approval, or works again. A task in another state (a final one, one
    /// waiting for an answer) is left as it is, and the log says so.
    pub(super) async fn task_permission(&self, id: &str, asked: bool) {
        let event = if asked {
            Event::PermissionAsked
        } else {
            Event::PermissionDecided
        };
        let key = id.to_string();
        let moved = self
            .task_db(move |s| s.apply(&key, &event, &Actor::Hub, "hub", &[], None))
            .await;
        match moved {
            Ok(Ok(Applied::Moved { .. })) => {}
            other => tracing::debug!(
                task = id,
                asked,
                ?other,
                "a task's permission request moved nothing"
            ),
        }
    }

    /// Agent `agent` was deleted: every unfinished task it owns or works on fails, and its
    /// room is told.
    pub(super) async fn fail_tasks_of(&self, agent: &str) {
        let who = agent.to_string();
        let tasks = match self
            .task_db(move |s| Ok(s.of_agent(&who, usize::MAX >> 1)?))
            .await
        {
            Ok(Ok(tasks)) => tasks,
            other => {
                tracing::error!(agent, ?other, "cannot read a deleted agent's tasks");
                return;
            }
        };
        for task in tasks.into_iter().filter(|t| !t.state.is_final()) {
            let why = format!("agent `{agent}` was deleted");
            let (key, event) = (task.id.clone(), Event::Failed { why: why.clone() });
            let moved = self
                .task_db(move |s| s.apply(&key, &event, &Actor::Hub, "hub", &[], None))
                .await;
            if let Ok(Ok(Applied::Moved { .. })) = moved {
                self.tell_room(&task.id, task.room.as_deref(), format!("failed: {why}"))
                    .await;
            }
        }
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
    /// Its plan, artifacts and history (`tasks/show`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<Step>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<ArtifactRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<TaskEvent>>,
}

impl TaskView {
    fn of(task: &Task, record: Option<Record>) -> TaskView {
        let (steps, artifacts, events) = match record {
            Some(r) => (Some(r.steps), Some(r.artifacts), Some(r.events)),
            None => (None, None, None),
        };
        TaskView {
            task_id: task.id.clone(),
            title: task.title.clone(),
            acceptance: task.acceptance.clone(),
            state: task.state.as_str(),
            runtime_state: task.runtime_state.clone(),
            owner: task.owner.clone(),
            assignee: task.assignee.clone(),
            requester: match &task.requester {
                Requester::Person(id) | Requester::Session(id) | Requester::Peer(id) => id.clone(),
                Requester::Operator => "operator".into(),
            },
            session_key: task.session_key.clone(),
            room: task.room.clone(),
            created_at: task.created_at.clone(),
            updated_at: task.updated_at.clone(),
            steps,
            artifacts,
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
    /// Task `id`'s artifact `name` for the operator's download: its row and its stored copy.
    pub(crate) async fn operator_artifact(
        &self,
        id: &str,
        name: &str,
    ) -> Result<(ArtifactRow, std::path::PathBuf), TaskDoorError> {
        let task = self.operator_task(id).await?;
        let row = task
            .artifacts
            .into_iter()
            .flatten()
            .find(|a| a.name == name)
            .ok_or_else(|| {
                TaskDoorError::NotFound(format!(
                    "task `{id}` has no artifact `{name}`; GET /v1/tasks/{id} lists them"
                ))
            })?;
        let store = self.artifacts.join(id);
        self.artifact_here(&store, &row.sha256).await;
        let stored = store.join(&row.sha256);
        Ok((row, stored))
    }

    pub(crate) async fn operator_task(&self, id: &str) -> Result<TaskView, TaskDoorError> {
        let key = id.to_string();
        let found = self
            .task_db(move |s| {
                let Some(task) = s.get(&key)? else {
                    return Ok(None);
                };
                Ok(Some((task, record(s, &key)?)))
            })
            .await?
            .map_err(TaskDoorError::Internal)?;
        let Some((task, record)) = found else {
            return Err(TaskDoorError::NotFound(format!("no task `{id}`")));
        };
        Ok(TaskView::of(&task, Some(record)))
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
        self.tell_room(id, task.room.as_deref(), told.clone()).await;
        // The verdict's message loses its buttons: it says what was decided.
        self.access.announce_task_outcome(id, told).await;
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

#[cfg(test)]
mod tests {
    use super::task_of_session;

    #[test]
    fn a_task_session_names_its_task_and_no_other_key_does() {
        assert_eq!(
            task_of_session("agent:beta:task:task-6f01"),
            Some("task-6f01")
        );
        for other in [
            "agent:beta:main",
            "agent:beta:slack:group:task:task-1:x",
            "agent:beta:task:notatask",
            "task:task-1",
        ] {
            assert_eq!(task_of_session(other), None, "{other}");
        }
    }
}
