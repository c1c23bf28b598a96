//! The demo ACP agent deepcli ships (`deepcli demo-agent`): a scripted agent that shows the hub
//! at work with no model and no npm. It acts on the last line of each prompt:
//!
//! * `CALL <tool> <json-args>` calls a Hub tool over the `deepcli` MCP server deepcli gave the
//!   session, and replies `<tool>: <the result's JSON>`;
//! * `PERMIT <kind> <title>` asks the client for permission and replies with the option chosen;
//! * `ASK <question>` asks back: in a task's session through `tasks_update` (action `ask`), else
//!   by ending its reply with the line `INPUT_REQUIRED`;
//! * `SLOW <seconds>` works that long, or until `session/cancel`;
//! * `SAY <text>` replies exactly the text;
//! * anything else is echoed (`echo: <the message>`).
//!
//! Every answer reports the session's running token count, a rough one (a token per four
//! bytes in and out), so budgets have something to count.
//!
//! stdout carries the protocol: this module writes nothing else there, and logs to stderr.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, Implementation,
    InitializeRequest, InitializeResponse, McpServer, NewSessionRequest, NewSessionResponse,
    PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, SessionId,
    SessionNotification, SessionUpdate, StopReason, Usage,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tokio_util::sync::CancellationToken;

/// What `deepcli demo-agent --help` says after its one line.
pub(crate) const HELP: &str = "\
It acts on the last line of each prompt:
  CALL <tool> <json-args>   call a Hub tool (sessions_send, sessions_spawn, agents_list, the
                            task tools, ...) and reply `<tool>: <result JSON>`; `$TASK` in the
                            arguments is the id of the task the session last heard
                            of (its own, in a task's session)
  PERMIT <kind> <title>     ask the client for permission (kind: read, edit, delete, move,
                            search, execute, think, fetch or other) and reply
                            `permission: <the option chosen, or cancelled>`
  ASK <question>            ask back: in a task's session with tasks_update (action ask), else
                            by ending the reply with a line `INPUT_REQUIRED` (an A2A peer then
                            sees TASK_STATE_INPUT_REQUIRED)
  SLOW <seconds>            work that long (at most 3600), or until the turn is cancelled, then
                            reply `slow: done after <seconds> s`
  SAY <text>                reply exactly <text>
Anything else is echoed: `echo: <the message>`. In a task's session it acts on the task's title
first, then on the last line of each prompt that is a command (the hub's own lines around an
answer are not). Every answer reports the session's running token count (a token per four
bytes in and out).

Run it as an agent's runtime: `runtime: {kind: acp, command: [deepcli, demo-agent]}`.";

/// The line a reply ends with to ask back (`a2a::wire::INPUT_REQUIRED`; this leaf uses no
/// other module).
const INPUT_REQUIRED: &str = "INPUT_REQUIRED";
/// The longest `SLOW`.
const SLOW_MAX_SECONDS: u64 = 3600;

/// What the agent does with a prompt.
#[derive(Debug, PartialEq)]
enum Command<'a> {
    Call {
        tool: &'a str,
        args: &'a str,
    },
    Permit {
        kind: &'a str,
        title: &'a str,
    },
    Ask(&'a str),
    Slow(Duration),
    Say(&'a str),
    Echo(&'a str),
    /// A command word with arguments it cannot read: the reply says how to write it.
    Malformed(String),
}

/// The message of a prompt: without deepcli's system section and without the line that says
/// who speaks and where.
fn message(prompt: &str) -> &str {
    // `sessions::system::BEGIN` and `END`.
    const BEGIN: &str = "[deepcli: system section.";
    const END: &str = "[deepcli: end of the system section]";
    let text = match prompt.find(END) {
        Some(end) if prompt.starts_with(BEGIN) => {
            prompt[end + END.len()..].trim_start_matches('\n')
        }
        _ => prompt,
    };
    match text.split_once('\n') {
        // `access::prompt::HEADER_START`.
        Some((first, rest)) if first.starts_with("[deepcli: message from ") => rest,
        _ => text,
    }
}

/// The id of the task a prompt gives (a line `[deepcli task <id>] …`, the hub's brief, after
/// the framing line of the agent that gave it).
fn task_of(message: &str) -> Option<&str> {
    message.lines().find_map(|line| {
        let rest = line.strip_prefix("[deepcli task ")?;
        rest.split_once(']').map(|(id, _)| id)
    })
}

/// The words a command line begins with.
const WORDS: [&str; 5] = ["CALL", "PERMIT", "ASK", "SLOW", "SAY"];

/// The line a message is acted on by: its last non-empty line; in a task's session, a task
/// brief's title, or the last line that is a command (the hub's own lines around an answer are
/// not).
fn command_line(message: &str) -> &str {
    if task_of(message).is_some() {
        if let Some(title) = message.lines().find_map(|l| l.strip_prefix("Title: ")) {
            return title.trim();
        }
        let is_command = |l: &&str| WORDS.iter().any(|w| l.split(' ').next() == Some(*w));
        if let Some(line) = message.lines().rev().map(str::trim).find(is_command) {
            return line;
        }
    }
    message
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

fn command(message: &str) -> Command<'_> {
    let line = command_line(message);
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim();
    match word {
        "CALL" => match rest.split_once(' ') {
            Some((tool, args)) => Command::Call {
                tool,
                args: args.trim(),
            },
            None if !rest.is_empty() => Command::Call {
                tool: rest,
                args: "{}",
            },
            None => Command::Malformed("CALL needs a tool: CALL <tool> <json-args>".into()),
        },
        "PERMIT" => match rest.split_once(' ') {
            Some((kind, title)) => Command::Permit {
                kind,
                title: title.trim(),
            },
            None => {
                Command::Malformed("PERMIT needs a kind and a title: PERMIT <kind> <title>".into())
            }
        },
        "ASK" if !rest.is_empty() => Command::Ask(rest),
        "ASK" => Command::Malformed("ASK needs a question: ASK <question>".into()),
        "SLOW" => match rest.parse::<u64>() {
            Ok(s) if s <= SLOW_MAX_SECONDS => Command::Slow(Duration::from_secs(s)),
            _ => Command::Malformed(format!(
                "SLOW needs whole seconds from 0 to {SLOW_MAX_SECONDS}: SLOW <seconds>"
            )),
        },
        "SAY" => Command::Say(rest),
        _ => Command::Echo(message),
    }
}

/// A session's MCP client of the Hub, and the process serving it.
struct Hub {
    client: RunningService<RoleClient, ()>,
    _server: tokio::process::Child,
}

#[derive(Default)]
struct Session {
    /// The MCP servers deepcli gave the session.
    servers: Vec<McpServer>,
    /// The task the session last heard of (a prompt with a `[deepcli task <id>]` line): its
    /// own in a task's session, else the one its owner was last told about.
    task: Option<String>,
    /// The turn running, to cancel.
    turn: Option<CancellationToken>,
    /// Running totals, for `usage`.
    input_tokens: u64,
    output_tokens: u64,
    hub: Option<Arc<Hub>>,
}

type Sessions = Arc<Mutex<HashMap<SessionId, Session>>>;

/// Serves ACP on stdin/stdout until stdin closes.
pub(crate) async fn serve() -> agent_client_protocol::Result<()> {
    let sessions: Sessions = Arc::default();
    let opened = sessions.clone();
    let cancels = sessions.clone();
    let issued = Arc::new(AtomicU64::new(1));
    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    Agent
        .v1()
        .name("deepcli-demo")
        .on_receive_request(
            async |req: InitializeRequest, responder: Responder<InitializeResponse>, _cx| {
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .agent_capabilities(AgentCapabilities::new().load_session(false))
                        .agent_info(
                            Implementation::new("deepcli-demo", env!("CARGO_PKG_VERSION"))
                                .title("deepcli demo agent"),
                        ),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder: Responder<NewSessionResponse>, _cx| {
                let id = SessionId::new(format!("demo-{}", issued.fetch_add(1, Ordering::Relaxed)));
                if let Ok(mut sessions) = opened.lock() {
                    sessions.insert(
                        id.clone(),
                        Session {
                            servers: req.mcp_servers,
                            ..Session::default()
                        },
                    );
                }
                responder.respond(NewSessionResponse::new(id))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: Responder<PromptResponse>,
                        cx: ConnectionTo<Client>| {
                let token = CancellationToken::new();
                if let Ok(mut sessions) = sessions.lock() {
                    sessions.entry(req.session_id.clone()).or_default().turn = Some(token.clone());
                }
                // Handlers run inside the dispatch loop: a turn that waits (for a cancel, a
                // permission, a tool) runs on its own, or nothing else could be dispatched.
                let sessions = sessions.clone();
                cx.clone().spawn(async move {
                    let answer = turn(&cx, &sessions, &req, &token).await;
                    if let Ok(mut sessions) = sessions.lock()
                        && let Some(session) = sessions.get_mut(&req.session_id)
                    {
                        session.turn = None;
                    }
                    responder.respond(answer?)
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                let token = cancels
                    .lock()
                    .ok()
                    .and_then(|s| s.get(&n.session_id).and_then(|s| s.turn.clone()));
                if let Some(token) = token {
                    token.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
}

/// A token per four bytes, rounded up.
fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

async fn turn(
    cx: &ConnectionTo<Client>,
    sessions: &Sessions,
    req: &PromptRequest,
    token: &CancellationToken,
) -> agent_client_protocol::Result<PromptResponse> {
    let prompt: Vec<&str> = req
        .prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    let prompt = prompt.join("\n");
    let message = message(&prompt);
    if let Some(task) = task_of(message)
        && let Ok(mut sessions) = sessions.lock()
    {
        sessions.entry(req.session_id.clone()).or_default().task = Some(task.to_string());
    }
    let reply = match command(message) {
        Command::Echo(text) => format!("echo: {text}"),
        Command::Say(text) => text.to_string(),
        Command::Malformed(how) => format!("demo-agent: {how}"),
        Command::Slow(duration) => {
            tokio::select! {
                () = token.cancelled() => return Ok(PromptResponse::new(StopReason::Cancelled)),
                () = tokio::time::sleep(duration) => format!("slow: done after {} s", duration.as_secs()),
            }
        }
        Command::Permit { kind, title } => {
            let asked = permission(&req.session_id, kind, title);
            let answer = match asked {
                Ok(request) => tokio::select! {
                    () = token.cancelled() => return Ok(PromptResponse::new(StopReason::Cancelled)),
                    answer = cx.send_request(request).block_task() => answer.map_err(|e| e.to_string()),
                },
                Err(why) => Err(why),
            };
            match answer {
                Ok(answer) => match answer.outcome {
                    RequestPermissionOutcome::Selected(chosen) => {
                        format!("permission: {}", chosen.option_id)
                    }
                    _ => "permission: cancelled".to_string(),
                },
                Err(e) => format!("permission: not asked: {e}"),
            }
        }
        Command::Ask(question) => match session_task(sessions, &req.session_id) {
            Some(task) => {
                let args = serde_json::json!({"taskId": task, "action": "ask", "text": question});
                let called = call(sessions, &req.session_id, "tasks_update", args).await;
                format!("asked: {question}\n{}", called.unwrap_or_else(|e| e))
            }
            None => format!("{question}\n{INPUT_REQUIRED}"),
        },
        Command::Call { tool, args } => {
            let args = match session_task(sessions, &req.session_id) {
                Some(task) => args.replace("$TASK", &task),
                None => args.to_string(),
            };
            match serde_json::from_str::<serde_json::Value>(&args) {
                Ok(args) if args.is_object() => tokio::select! {
                    () = token.cancelled() => return Ok(PromptResponse::new(StopReason::Cancelled)),
                    called = call(sessions, &req.session_id, tool, args) => called.unwrap_or_else(|e| e),
                },
                Ok(_) => format!("{tool} failed: the arguments must be a JSON object"),
                Err(e) => format!("{tool} failed: the arguments are not JSON: {e}"),
            }
        }
    };
    cx.send_notification(SessionNotification::new(
        req.session_id.clone(),
        SessionUpdate::AgentMessageChunk(ContentChunk::new(reply.clone().into())),
    ))?;
    let usage = match sessions.lock() {
        Ok(mut sessions) => {
            let session = sessions.entry(req.session_id.clone()).or_default();
            session.input_tokens += tokens(&prompt);
            session.output_tokens += tokens(&reply);
            Usage::new(
                session.input_tokens + session.output_tokens,
                session.input_tokens,
                session.output_tokens,
            )
        }
        Err(_) => Usage::new(0, 0, 0),
    };
    Ok(PromptResponse::new(StopReason::EndTurn).usage(usage))
}

fn session_task(sessions: &Sessions, id: &SessionId) -> Option<String> {
    sessions.lock().ok()?.get(id)?.task.clone()
}

/// A permission request about a tool call of that kind and title, with all four option kinds.
fn permission(
    session: &SessionId,
    kind: &str,
    title: &str,
) -> Result<RequestPermissionRequest, String> {
    serde_json::from_value(serde_json::json!({
        "sessionId": session,
        "toolCall": {
            "toolCallId": format!("permit-{}", uuid::Uuid::new_v4()),
            "title": title,
            "kind": kind,
            "status": "pending",
            "content": [{"type": "content", "content": {"type": "text", "text": format!("{kind}: {title}")}}],
        },
        "options": [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
            {"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"},
        ],
    }))
    .map_err(|e| format!("PERMIT <kind> <title>: {e}"))
}

/// Calls a Hub tool; `Ok` is the reply `<tool>: <result>`, `Err` one that says what failed.
async fn call(
    sessions: &Sessions,
    session: &SessionId,
    tool: &str,
    args: serde_json::Value,
) -> Result<String, String> {
    let failed = |why: String| format!("{tool} failed: {why}");
    let hub = hub(sessions, session).await.map_err(failed)?;
    let serde_json::Value::Object(args) = args else {
        return Err(failed("the arguments must be a JSON object".into()));
    };
    let result = hub
        .client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .map_err(|e| failed(e.to_string()))?;
    let body = match result.structured_content {
        Some(json) => json.to_string(),
        None => result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect::<Vec<_>>()
            .join(""),
    };
    if result.is_error == Some(true) {
        return Err(format!("{tool} error: {body}"));
    }
    Ok(format!("{tool}: {body}"))
}

/// The session's MCP client of the Hub, started on first use: the stdio server deepcli named
/// `deepcli` at session/new.
async fn hub(sessions: &Sessions, session: &SessionId) -> Result<Arc<Hub>, String> {
    let server = {
        let sessions = sessions
            .lock()
            .map_err(|_| "the agent's state is poisoned")?;
        let Some(found) = sessions.get(session) else {
            return Err("no such session".into());
        };
        if let Some(hub) = &found.hub {
            return Ok(hub.clone());
        }
        found.servers.iter().find_map(|s| match s {
            McpServer::Stdio(stdio) if stdio.name == "deepcli" => Some(stdio.clone()),
            _ => None,
        })
    };
    let Some(server) = server else {
        return Err(
            "deepcli gave this session no `deepcli` MCP server (is the agent in the hub: hub.md)"
                .into(),
        );
    };
    let mut child = tokio::process::Command::new(&server.command)
        .args(&server.args)
        .envs(server.env.iter().map(|e| (&e.name, &e.value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", server.command.display()))?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the MCP server's pipes are missing".into());
    };
    let client =
        ().serve((stdout, stdin))
            .await
            .map_err(|e| format!("the MCP handshake failed: {e}"))?;
    let hub = Arc::new(Hub {
        client,
        _server: child,
    });
    if let Ok(mut sessions) = sessions.lock()
        && let Some(found) = sessions.get_mut(session)
    {
        found.hub = Some(hub.clone());
    }
    Ok(hub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_is_the_command() {
        assert_eq!(
            command("[Inter-session message] from main\nCALL agents_list {}"),
            Command::Call {
                tool: "agents_list",
                args: "{}"
            }
        );
        assert_eq!(
            command("CALL sessions_send {\"agentId\": \"research\", \"message\": \"hi\"}\n\n"),
            Command::Call {
                tool: "sessions_send",
                args: "{\"agentId\": \"research\", \"message\": \"hi\"}"
            }
        );
        assert_eq!(
            command("CALL agents_list"),
            Command::Call {
                tool: "agents_list",
                args: "{}"
            }
        );
        assert_eq!(
            command("PERMIT execute rm -rf build"),
            Command::Permit {
                kind: "execute",
                title: "rm -rf build"
            }
        );
        assert_eq!(command("ASK Which file?"), Command::Ask("Which file?"));
        assert_eq!(command("SLOW 2"), Command::Slow(Duration::from_secs(2)));
        assert_eq!(command("SAY  exactly this"), Command::Say("exactly this"));
        // An earlier line is context, not a command.
        assert_eq!(command("SAY x\nhello"), Command::Echo("SAY x\nhello"));
        assert_eq!(command("say x"), Command::Echo("say x"));
    }

    #[test]
    fn a_malformed_command_says_how_to_write_it() {
        for bad in ["CALL", "PERMIT execute", "ASK", "SLOW soon", "SLOW 3601"] {
            assert!(
                matches!(command(bad), Command::Malformed(_)),
                "{bad}: {:?}",
                command(bad)
            );
        }
    }

    #[test]
    fn a_task_brief_is_acted_on_by_its_title() {
        let brief = "[Inter-session message] from main/agent:main:main via tasks_create\n[deepcli task t-7] agent `main` gives you this task. This session is for it alone.\nTitle: ASK Which format?\nAcceptance: a file\nIf something you need is unclear, ask with tasks_update {…}";
        assert_eq!(task_of(brief), Some("t-7"));
        assert_eq!(command(brief), Command::Ask("Which format?"));
        assert_eq!(task_of("hello"), None);
        // An answer in the task's session: the command among the hub's lines.
        let answer = "[Inter-session message] from main\n[deepcli task t-7] the answer to your question: Markdown.\nSAY done, in Markdown\nGo on with the task.";
        assert_eq!(command(answer), Command::Say("done, in Markdown"));
    }

    #[test]
    fn the_message_leaves_out_the_system_section_and_the_speaker_line() {
        let prompt = "[deepcli: system section. x]\nabout you\n[deepcli: end of the system section]\n[deepcli: message from Ann in #dev]\nSAY hi";
        assert_eq!(message(prompt), "SAY hi");
        assert_eq!(message("SAY hi"), "SAY hi");
    }
}
