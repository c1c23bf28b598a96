//! The tools the Hub offers over MCP (hub.md, "Tools"): their names, descriptions and input
//! schemas (written for a model to use them unprompted), and the typed arguments each call is
//! decoded into. Names, parameters and result shapes follow OpenClaw.

use serde::Deserialize;
use serde_json::{Value, json};

use super::CallError;

/// The longest message `sessions_send` carries, and the longest task `sessions_spawn` gives.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// `sessions_send`'s wait when `timeoutSeconds` is not given.
pub(crate) const DEFAULT_WAIT_SECONDS: u64 = 30;
/// The longest wait a call may ask for.
pub(crate) const MAX_WAIT_SECONDS: u64 = 3600;
/// The most sessions `sessions_list` returns.
pub(crate) const MAX_LIST: usize = 200;
/// The most bytes `sessions_history` returns.
pub(crate) const HISTORY_CAP_BYTES: usize = 80 * 1024;

pub(crate) const AGENTS_LIST: &str = "agents_list";
pub(crate) const SESSIONS_LIST: &str = "sessions_list";
pub(crate) const SESSIONS_HISTORY: &str = "sessions_history";
pub(crate) const SESSIONS_SEND: &str = "sessions_send";
pub(crate) const SESSIONS_SPAWN: &str = "sessions_spawn";
pub(crate) const SUBAGENTS: &str = "subagents";
pub(crate) const SESSION_STATUS: &str = "session_status";
pub(crate) const MANAGEMENT_REQUEST: &str = "management_request";
pub(crate) const TASKS_CREATE: &str = "tasks_create";
pub(crate) const TASKS_GET: &str = "tasks_get";
pub(crate) const TASKS_LIST: &str = "tasks_list";
pub(crate) const TASKS_UPDATE: &str = "tasks_update";
pub(crate) const TASKS_REVIEW: &str = "tasks_review";
pub(crate) const ARTIFACTS_PUT: &str = "artifacts_put";
pub(crate) const ARTIFACTS_GET: &str = "artifacts_get";
pub(crate) const PLAN_UPDATE: &str = "plan_update";

pub(crate) const ALL: [&str; 16] = [
    AGENTS_LIST,
    SESSIONS_LIST,
    SESSIONS_HISTORY,
    SESSIONS_SEND,
    SESSIONS_SPAWN,
    SUBAGENTS,
    SESSION_STATUS,
    MANAGEMENT_REQUEST,
    TASKS_CREATE,
    TASKS_GET,
    TASKS_LIST,
    TASKS_UPDATE,
    TASKS_REVIEW,
    ARTIFACTS_PUT,
    ARTIFACTS_GET,
    PLAN_UPDATE,
];

/// The most steps one `plan_update` writes.
pub(crate) const MAX_STEPS: usize = 50;

/// The longest task title.
pub(crate) const MAX_TITLE_CHARS: usize = 200;

/// The MCP tool definitions (`name`, `description`, `inputSchema`) a caller gets; a leaf (a
/// session at the deepest spawn depth) gets no `sessions_spawn`.
pub(crate) fn definitions(leaf: bool) -> Vec<Value> {
    let mut tools = vec![
        json!({
            "name": AGENTS_LIST,
            "description": "List the other agents of this hub that you may work with: their ids, names, what they are for, whether you may message them (canSend) or spawn work on them (canSpawn), and whether their runtime is up. Call this first when a task needs another agent.",
            "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
                "limit": LIMIT_SCHEMA.clone(),
                "cursor": CURSOR_SCHEMA.clone()
            }}
        }),
        json!({
            "name": SESSIONS_LIST,
            "description": "List the sessions (conversations) you may see: your own, the ones you spawned, and other agents' where policy allows. Each has a sessionKey you can pass to sessions_history or sessions_send.",
            "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "description": "Most sessions to return (default 50, at most 200), most recently active first."},
                "cursor": CURSOR_SCHEMA.clone(),
                "agentId": {"type": "string", "description": "Only this agent's sessions."},
                "kinds": {"type": "array", "items": {"type": "string", "enum": ["main", "group", "subagent", "acp", "a2a", "task", "other"]}, "description": "Only sessions of these kinds."},
                "activeMinutes": {"type": "integer", "minimum": 1, "description": "Only sessions active within this many minutes."},
                "includeLastMessage": {"type": "boolean", "description": "Include each session's last message (shortened)."}
            }}
        }),
        json!({
            "name": SESSIONS_HISTORY,
            "description": "Read a session's transcript, oldest first and newest last (at most 80 KB; secrets are redacted). Use it to catch up on what another session said before messaging it.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["sessionKey"], "properties": {
                "sessionKey": {"type": "string", "description": "The session to read (from sessions_list)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Most messages (default 20)."},
                "cursor": {"type": "string", "description": "The nextCursor of the last call: the page of older messages before it."},
                "offset": {"type": "integer", "minimum": 0, "description": "Skip this many of the newest messages (an older form of cursor)."},
                "includeTools": {"type": "boolean", "description": "Also include the notes deepcli recorded about the session (how it was opened, errors)."}
            }}
        }),
        json!({
            "name": SESSIONS_SEND,
            "description": "Send a message to another agent's session and (by default) wait for its reply. Address it by sessionKey, by the label of a session you spawned, or by agentId (that agent's main session). The reply comes back in `reply`. With timeoutSeconds 0 the message is only queued (status accepted). The other agent sees it as a message from you, not from the user.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["message"], "properties": {
                "message": {"type": "string", "maxLength": MAX_MESSAGE_BYTES, "description": "What to say (at most 64 KiB)."},
                "sessionKey": {"type": "string", "description": "The target session's key."},
                "label": {"type": "string", "description": "The label of a session spawned with sessions_spawn."},
                "agentId": {"type": "string", "description": "An agent id: its main session."},
                "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS, "description": "How long to wait for the reply (default 30; 0 = don't wait)."}
            }}
        }),
        json!({
            "name": SESSIONS_SPAWN,
            "description": "Start a child session that works on a task in the background, on your own agent or on another one you are allowed to use (see agents_list canSpawn). Returns at once with the child's sessionKey and runId; when the child finishes, its final answer is delivered to you as a message (subagent_announce). Use subagents to list, wait for or cancel children.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["task"], "properties": {
                "task": {"type": "string", "maxLength": MAX_MESSAGE_BYTES, "description": "What the child should do, self-contained (it does not see your conversation)."},
                "agentId": {"type": "string", "description": "The agent to run the child on (default: your own)."},
                "runtime": {"type": "string", "enum": ["subagent", "acp"], "description": "subagent (default): a subagent session on the agent's runtime; acp: an ACP session of an ACP agent."},
                "label": {"type": "string", "maxLength": 64, "description": "A short name to address the child by later."},
                "mode": {"type": "string", "enum": ["run", "session"], "description": "run (default): one task, then done; session: stays open for more sessions_send messages."},
                "cleanup": {"type": "string", "enum": ["delete", "keep"], "description": "After a run-mode child finishes: delete closes it and trashes its transcript; keep (default) leaves it readable."},
                "runTimeoutSeconds": {"type": "integer", "minimum": 0, "maximum": 86400, "description": "Stop the child's run after this many seconds (0 = no limit beyond the hub's)."},
                "cwd": {"type": "string", "description": "Absolute working directory for the child session (default: the agent's workspace)."}
            }}
        }),
        json!({
            "name": SUBAGENTS,
            "description": "Manage the children you spawned: list them with their run states, wait for one to finish, or cancel one. A cancel the runtime does not confirm ends as `uncertain`, never as `cancelled`.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["action"], "properties": {
                "action": {"type": "string", "enum": ["list", "wait", "cancel"], "description": "What to do."},
                "target": {"type": "string", "description": "wait/cancel: the child's runId, sessionKey or label."},
                "timeoutSeconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS, "description": "wait: how long to wait (default 30)."},
                "limit": LIMIT_SCHEMA.clone(),
                "cursor": CURSOR_SCHEMA.clone()
            }}
        }),
        json!({
            "name": SESSION_STATUS,
            "description": "Your own session: its key, your agent id, model, how many messages wait in its queue, its spawn depth and parent, and how much of the spawn budget you use.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false}
        }),
        json!({
            "name": MANAGEMENT_REQUEST,
            "description": "Ask a person to change this hub's configuration for you: create, update or delete an agent, bind or unbind one, add or remove a channel account, approve or revoke a pairing. You cannot change it yourself: the request waits for an operator or an approver, and runs only if they approve it, exactly as if the operator had made it. The result says approved (with the change's result), denied, expired, or pending with an approvalId when nobody answered yet.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["method", "reason"], "properties": {
                "method": {"type": "string", "enum": REQUESTABLE_METHODS, "description": "The management method (as the operator's JSON-RPC names it, without its prefix)."},
                "params": {"type": "object", "description": "The method's parameters, as the operator's JSON-RPC takes them (for example agents/create: {\"agent\": {\"id\": \"writer\"}})."},
                "reason": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "Why you need it: the person deciding reads this."}
            }}
        }),
        json!({
            "name": TASKS_CREATE,
            "description": "Give another agent a task with an acceptance condition. It works on it in a session of its own (one per task), may ask you a question, and hands in a result you then review with tasks_review; a person accepts or rejects it after your review. Returns the taskId.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["agentId", "title", "acceptance"], "properties": {
                "agentId": {"type": "string", "description": "The agent that does the work (agents_list shows whom you may message)."},
                "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS, "description": "What to do, in a line."},
                "acceptance": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES, "description": "The condition the result is accepted on, checkable by you and by a person (for example: `cargo test` passes and the flag is renamed)."}
            }}
        }),
        json!({
            "name": TASKS_GET,
            "description": "One task you own or work on: its state, acceptance, parties and its history (questions, answers, results, verdicts).",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["taskId"], "properties": {
                "taskId": {"type": "string", "description": "The task's id (task-…), as tasks_create or tasks_list gave it."}
            }}
        }),
        json!({
            "name": TASKS_LIST,
            "description": "The tasks you own or work on, newest first.",
            "inputSchema": {"type": "object", "additionalProperties": false, "properties": {
                "limit": LIMIT_SCHEMA.clone()
            }}
        }),
        json!({
            "name": TASKS_UPDATE,
            "description": "Move a task along. As its assignee: `ask` a question you need answered before going on (do not guess), or `submit` your result with its evidence. As its owner: `answer` the assignee's question.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["taskId", "action", "text"], "properties": {
                "taskId": {"type": "string", "description": "The task's id (task-…), as tasks_create or tasks_list gave it."},
                "action": {"type": "string", "enum": ["ask", "answer", "submit"], "description": "ask and submit: as the assignee, from the task's session; answer: as the owner."},
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES, "description": "The question, the answer, or the result with its evidence."},
                "artifacts": {"type": "array", "maxItems": MAX_STEPS, "items": {"type": "string"}, "description": "With submit: files of your workspace (paths relative to it) to hand in with the result, as artifacts_put does: the change, the test log."}
            }}
        }),
        json!({
            "name": TASKS_REVIEW,
            "description": "As a task's owner, record your own check of a submitted result: do not repeat the assignee's word, check it yourself. Passed: a person decides to accept it. Failed: it goes back to the assignee with your notes.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["taskId", "passed", "notes"], "properties": {
                "taskId": {"type": "string", "description": "The task's id (task-…), as tasks_create or tasks_list gave it."},
                "passed": {"type": "boolean", "description": "Whether the result meets the acceptance by your own check."},
                "notes": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES, "description": "What you checked and what you found."}
            }}
        }),
        json!({
            "name": ARTIFACTS_PUT,
            "description": "Hand in a file of your workspace to a task you work on or own: the change, a test log, your own check's output. deepcli keeps a copy with its SHA-256 (a later change to your file changes nothing handed in); the owner gets a read-only copy in its workspace at .deepcli/tasks/<taskId>/<path>. Answering an A2A peer's message, give the run id its framing names as taskId: the peer gets the file.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["taskId", "path"], "properties": {
                "taskId": {"type": "string", "description": "The task's id (task-…), or the A2A run id an A2A message names."},
                "path": {"type": "string", "minLength": 1, "description": "The file, relative to your workspace (or absolute inside it). Not a symbolic link; a regular file of at most artifactMaxBytes, the task's artifacts then totalling at most artifactQuotaBytes."}
            }}
        }),
        json!({
            "name": ARTIFACTS_GET,
            "description": "A task's artifacts: each name, SHA-256, size and who handed it in. With `name`: a read-only copy of that one placed in your workspace (.deepcli/tasks/<taskId>/<name>), its path, and its text when it is UTF-8 of at most 64 KiB.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["taskId"], "properties": {
                "taskId": {"type": "string", "description": "The task's id (task-…)."},
                "name": {"type": "string", "description": "The artifact to get, as the list names it."}
            }}
        }),
        json!({
            "name": PLAN_UPDATE,
            "description": "Write steps of a task's plan, each replacing the step of its id: what it is, whom it goes to, its acceptance, its status and notes. Give a step the runId sessions_send or sessions_spawn returned and deepcli records its target, session and runtime from the run.",
            "inputSchema": {"type": "object", "additionalProperties": false, "required": ["taskId", "steps"], "properties": {
                "taskId": {"type": "string", "description": "The task's id (task-…)."},
                "steps": {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "description": "The steps to write; a step of an id already in the plan replaces it.", "items": {"type": "object", "additionalProperties": false, "required": ["id", "title", "status"], "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The step's id within the task (1, 2, build, …)."},
                    "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS, "description": "What the step does, in a line."},
                    "targetAgentId": {"type": "string", "description": "The agent the step goes to."},
                    "runId": {"type": "string", "description": "The run that carries it, as sessions_send or sessions_spawn returned it."},
                    "acceptance": {"type": "string", "maxLength": MAX_MESSAGE_BYTES, "description": "When the step is done."},
                    "status": {"type": "string", "enum": ["pending", "running", "done", "failed", "skipped"], "description": "Where the step is."},
                    "notes": {"type": "string", "maxLength": MAX_MESSAGE_BYTES, "description": "What happened, what is left."}
                }}}
            }}
        }),
    ];
    if leaf {
        tools.retain(|t| t["name"] != SESSIONS_SPAWN);
    }
    tools
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskCreateArgs {
    pub agent_id: String,
    pub title: String,
    pub acceptance: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskArgs {
    pub task_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskListArgs {
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TaskAction {
    Ask,
    Answer,
    Submit,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskUpdateArgs {
    pub task_id: String,
    pub action: TaskAction,
    pub text: String,
    #[serde(default)]
    pub artifacts: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ArtifactPutArgs {
    pub task_id: String,
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ArtifactGetArgs {
    pub task_id: String,
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PlanUpdateArgs {
    pub task_id: String,
    pub steps: Vec<StepArgs>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct StepArgs {
    pub id: String,
    pub title: String,
    pub target_agent_id: Option<String>,
    pub run_id: Option<String>,
    pub acceptance: Option<String>,
    pub status: crate::tasks::store::StepStatus,
    pub notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TaskReviewArgs {
    pub task_id: String,
    pub passed: bool,
    pub notes: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoArgs {}

/// `limit` of a paged list (hub.md, "Paging").
static LIMIT_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"type": "integer", "minimum": 1, "maximum": super::page::MAX_LIMIT, "description": "Most entries to return (default 50, at most 200)."}),
);
/// `cursor` of a paged list.
static CURSOR_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"type": "string", "description": "The nextCursor of the last call, for the next page; a result without nextCursor is the last page."}),
);

/// `agents_list`'s arguments: a page.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct PageArgs {
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListArgs {
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    pub agent_id: Option<String>,
    pub kinds: Option<Vec<String>>,
    pub active_minutes: Option<u64>,
    #[serde(default)]
    pub include_last_message: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HistoryArgs {
    pub session_key: String,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    pub offset: Option<usize>,
    #[serde(default)]
    pub include_tools: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SendArgs {
    pub message: String,
    pub session_key: Option<String>,
    pub label: Option<String>,
    pub agent_id: Option<String>,
    pub timeout_seconds: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SpawnArgs {
    pub task: String,
    pub agent_id: Option<String>,
    pub runtime: Option<SpawnRuntime>,
    pub label: Option<String>,
    pub mode: Option<crate::state::SpawnMode>,
    pub cleanup: Option<crate::state::Cleanup>,
    pub run_timeout_seconds: Option<u64>,
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SpawnRuntime {
    Subagent,
    Acp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SubagentsArgs {
    pub action: SubagentsAction,
    pub target: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SubagentsAction {
    List,
    Wait,
    Cancel,
}

/// The operator JSON-RPC methods an agent may ask for through `management_request`: the ones
/// that change the config or the pairing records (management.md). Reads, logins and imports
/// are not requestable.
pub(crate) const REQUESTABLE_METHODS: [&str; 10] = [
    "agents/create",
    "agents/update",
    "agents/delete",
    "agents/set_identity",
    "agents/bind",
    "agents/unbind",
    "channels/add",
    "channels/remove",
    "pairing/approve",
    "pairing/revoke",
];

/// `management_request`'s arguments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ManagementArgs {
    pub method: String,
    #[serde(default)]
    pub params: Value,
    pub reason: String,
}

/// One tool call, its arguments decoded.
#[derive(Debug)]
pub(crate) enum ToolCall {
    AgentsList(PageArgs),
    SessionsList(ListArgs),
    SessionsHistory(HistoryArgs),
    SessionsSend(SendArgs),
    SessionsSpawn(SpawnArgs),
    Subagents(SubagentsArgs),
    SessionStatus,
    ManagementRequest(ManagementArgs),
    TasksCreate(TaskCreateArgs),
    TasksGet(TaskArgs),
    TasksList(TaskListArgs),
    TasksUpdate(TaskUpdateArgs),
    TasksReview(TaskReviewArgs),
    ArtifactsPut(ArtifactPutArgs),
    ArtifactsGet(ArtifactGetArgs),
    PlanUpdate(PlanUpdateArgs),
}

impl ToolCall {
    /// Tool `tool` called with `args` (MCP's `arguments`; `null` for none).
    pub(crate) fn decode(tool: &str, args: Value) -> Result<ToolCall, CallError> {
        fn args_of<T: serde::de::DeserializeOwned>(
            tool: &str,
            args: Value,
        ) -> Result<T, CallError> {
            decode(tool, args).map_err(CallError::BadArguments)
        }
        Ok(match tool {
            AGENTS_LIST => ToolCall::AgentsList(args_of(tool, args)?),
            SESSIONS_LIST => ToolCall::SessionsList(args_of(tool, args)?),
            SESSIONS_HISTORY => ToolCall::SessionsHistory(args_of(tool, args)?),
            SESSIONS_SEND => ToolCall::SessionsSend(args_of(tool, args)?),
            SESSIONS_SPAWN => ToolCall::SessionsSpawn(args_of(tool, args)?),
            SUBAGENTS => ToolCall::Subagents(args_of(tool, args)?),
            SESSION_STATUS => {
                args_of::<NoArgs>(tool, args)?;
                ToolCall::SessionStatus
            }
            MANAGEMENT_REQUEST => ToolCall::ManagementRequest(args_of(tool, args)?),
            TASKS_CREATE => ToolCall::TasksCreate(args_of(tool, args)?),
            TASKS_GET => ToolCall::TasksGet(args_of(tool, args)?),
            TASKS_LIST => ToolCall::TasksList(args_of(tool, args)?),
            TASKS_UPDATE => ToolCall::TasksUpdate(args_of(tool, args)?),
            TASKS_REVIEW => ToolCall::TasksReview(args_of(tool, args)?),
            ARTIFACTS_PUT => ToolCall::ArtifactsPut(args_of(tool, args)?),
            ARTIFACTS_GET => ToolCall::ArtifactsGet(args_of(tool, args)?),
            PLAN_UPDATE => ToolCall::PlanUpdate(args_of(tool, args)?),
            other => return Err(CallError::UnknownTool(other.to_string())),
        })
    }
}

/// The definitions of the tools `names` names, in [`definitions`]' order.
pub(crate) fn definitions_of(names: &[&str]) -> Vec<Value> {
    let mut tools = definitions(false);
    tools.retain(|t| t["name"].as_str().is_some_and(|name| names.contains(&name)));
    tools
}

/// Decodes a call's arguments; the error names what is wrong, for the model.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(tool: &str, args: Value) -> Result<T, String> {
    let args = if args.is_null() { json!({}) } else { args };
    serde_json::from_value(args).map_err(|e| {
        let message = e.to_string();
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m)
            .to_string();
        format!("bad arguments for `{tool}`: {message}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_decoded_by_its_tool_and_definitions_follow_the_names_given() {
        assert!(matches!(
            ToolCall::decode(SESSION_STATUS, Value::Null),
            Ok(ToolCall::SessionStatus)
        ));
        assert!(matches!(
            ToolCall::decode(AGENTS_LIST, json!({"limit": 3})),
            Ok(ToolCall::AgentsList(PageArgs { limit: Some(3), .. }))
        ));
        match ToolCall::decode(SESSIONS_SEND, json!({"nope": 1})) {
            Err(CallError::BadArguments(why)) => {
                assert!(
                    why.starts_with("bad arguments for `sessions_send`"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ToolCall::decode("nope", Value::Null).unwrap_err(),
            CallError::UnknownTool("nope".into())
        );
        let names = |defs: Vec<Value>| -> Vec<String> {
            defs.iter()
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            names(definitions_of(&[SUBAGENTS, AGENTS_LIST])),
            [AGENTS_LIST, SUBAGENTS]
        );
        assert_eq!(names(definitions_of(&ALL)), names(definitions(false)));
        let no_spawn: Vec<&str> = ALL.into_iter().filter(|n| *n != SESSIONS_SPAWN).collect();
        assert_eq!(names(definitions_of(&no_spawn)), names(definitions(true)));
    }

    #[test]
    fn every_tool_has_a_described_object_schema_and_a_leaf_cannot_spawn() {
        let all = definitions(false);
        assert_eq!(all.len(), ALL.len());
        for tool in &all {
            assert!(tool["description"].as_str().unwrap().len() > 40, "{tool}");
            assert_eq!(tool["inputSchema"]["type"], "object");
            for (name, prop) in tool["inputSchema"]["properties"].as_object().unwrap() {
                assert!(prop["description"].is_string(), "{name} of {tool}");
            }
        }
        assert!(
            !definitions(true)
                .iter()
                .any(|t| t["name"] == SESSIONS_SPAWN)
        );
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let e = decode::<SendArgs>(SESSIONS_SEND, json!({"mesage": "hi"})).unwrap_err();
        assert!(e.contains("unknown field `mesage`"), "{e}");
        let e = decode::<SendArgs>(SESSIONS_SEND, json!({"message": 3})).unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
        let e = decode::<SpawnArgs>(SESSIONS_SPAWN, json!({"task": "x", "mode": "forever"}))
            .unwrap_err();
        assert!(e.contains("unknown variant `forever`"), "{e}");
    }
}
