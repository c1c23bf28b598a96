//! `deepcli sessions …`, `deepcli runs …` (the Hub's operator surface, through the running
//! controller's JSON-RPC: one service) and `deepcli hub mcp` (the stdio MCP server deepcli
//! names in every ACP session it opens; agents start it, people do not).

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{ExitStatus, GlobalSettings};
use crate::controller::client::{Client, ClientError};
use crate::state::StateStore;

const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  refused or failed: the message says why (an unknown session or run, bad arguments)
  2  no controller runs on this state directory, or it could not be reached";

#[derive(Debug, Subcommand)]
pub(super) enum HubCommand {
    /// The `deepcli` MCP server on stdio, forwarding to the controller (DEEPCLI_HUB_URL,
    /// DEEPCLI_HUB_TOKEN). deepcli names it in every ACP session it opens; agents start it.
    Mcp,
}

#[derive(Debug, Subcommand)]
pub(super) enum SessionsCommand {
    /// Every session the hub knows: key, agent, kind, label, last activity, queue depth.
    #[command(after_help = EXIT_CODES)]
    List(ListArgs),
    /// One session: its place in a spawn tree, its children, its latest runs (--prompt: the
    /// system section it was last given).
    #[command(after_help = EXIT_CODES)]
    Show(ShowArgs),
    /// A session's transcript, oldest first, each line with who said it.
    #[command(after_help = EXIT_CODES)]
    History(HistoryArgs),
    /// The transcript lines of every session with some words, newest first (by index, however
    /// long the transcripts).
    #[command(after_help = EXIT_CODES)]
    Search(SearchArgs),
    /// Follow a session's transcript as it grows (until Ctrl-C): what was said, then each new
    /// message. Read from the state database, with or without a controller.
    #[command(after_help = EXIT_CODES)]
    Watch(WatchArgs),
    /// Speak into a session as the operator (provenance `operator`) and wait for the reply.
    #[command(after_help = EXIT_CODES)]
    Send(SendArgs),
    /// Say something into a session's chat as the operator, without a turn: in its transcript
    /// (provenance `operator`) and posted through the outbox to the conversation it last took
    /// a message from.
    #[command(after_help = EXIT_CODES)]
    Say(SayArgs),
    /// Cancel what runs in a session: its unfinished runs (cancelled, or uncertain when the
    /// runtime does not confirm), else the turn running there.
    #[command(after_help = EXIT_CODES)]
    Cancel(KeyArgs),
    /// Close a session: its runtime session ended, its tokens revoked (--trash: its
    /// transcript moved to the trash tables).
    #[command(after_help = EXIT_CODES)]
    Close(CloseArgs),
}

#[derive(Debug, Subcommand)]
pub(super) enum RunsCommand {
    /// Runs (one per sessions_send or sessions_spawn), newest first.
    #[command(after_help = EXIT_CODES)]
    List(RunsArgs),
    /// One run with every state it went through.
    #[command(after_help = EXIT_CODES)]
    Show(RunArgs),
    /// Cancel a run: withdrawn if its turn has not begun, else ACP session/cancel; the cancel
    /// is `confirmed` when the runtime stops the turn, `uncertain` when it does not.
    #[command(after_help = EXIT_CODES)]
    Cancel(RunArgs),
    /// Resume a run a loop pause holds (state `paused`): it is delivered, and the loop's count
    /// starts over.
    #[command(after_help = EXIT_CODES)]
    Resume(RunArgs),
    /// Stop a run a loop pause holds: it is cancelled, never delivered.
    #[command(after_help = EXIT_CODES)]
    Stop(RunArgs),
}

#[derive(Debug, Subcommand)]
pub(super) enum TasksCommand {
    /// The tasks, newest first: id, state, owner -> assignee, title.
    #[command(after_help = EXIT_CODES)]
    List(TasksListArgs),
    /// One task: its parties, acceptance, state and every event of its history.
    #[command(after_help = EXIT_CODES)]
    Show(TaskIdArgs),
    /// Give agent --assignee a task that agent --owner checks; a person then accepts it.
    #[command(after_help = EXIT_CODES)]
    Create(TaskCreateArgs),
    /// Accept a task's result (it waits for a person: `pending_acceptance`).
    #[command(after_help = EXIT_CODES)]
    Accept(TaskIdArgs),
    /// Reject a task's result: back to the assignee with the reason (--close: closed).
    #[command(after_help = EXIT_CODES)]
    Reject(TaskRejectArgs),
    /// Cancel a task: the turn in its session cancelled; `cancelled` when the runtime confirms,
    /// else `uncertain`.
    #[command(after_help = EXIT_CODES)]
    Cancel(TaskIdArgs),
    /// A task's artifacts (name, size, SHA-256, who handed it in); with NAME, a copy of that
    /// one, its hash checked.
    #[command(after_help = EXIT_CODES)]
    Artifacts(TaskArtifactsArgs),
}

#[derive(Debug, Args)]
pub(super) struct TaskCreateArgs {
    /// What to do, in a line.
    title: String,
    /// The agent that does the work, in a session of its own.
    #[arg(long, value_name = "AGENT")]
    assignee: String,
    /// The agent that checks the result before a person decides.
    #[arg(long, value_name = "AGENT")]
    owner: String,
    /// The condition the result is accepted on.
    #[arg(long, value_name = "TEXT")]
    acceptance: String,
    /// The conversation (session key) that is told of every move.
    #[arg(long, value_name = "SESSION_KEY")]
    room: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct TaskArtifactsArgs {
    /// The task's id (task-…).
    task_id: String,
    /// The artifact to copy out, as the list names it.
    name: Option<String>,
    /// Where to write it [default: its file name, in the current directory]; never over an
    /// existing file.
    #[arg(long, value_name = "PATH", requires = "name")]
    out: Option<std::path::PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct TasksListArgs {
    /// Only the tasks discussed in this session (its key).
    #[arg(long, value_name = "SESSION_KEY")]
    room: Option<String>,
    /// Most tasks [default: 50, at most 200].
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct TaskIdArgs {
    /// The task's id (task-…).
    task_id: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct TaskRejectArgs {
    /// The task's id (task-…).
    task_id: String,
    /// Why: the assignee reads it.
    reason: String,
    /// Close the task instead of sending it back to the assignee.
    #[arg(long)]
    close: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// Only this agent's sessions.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Only sessions of this kind (main, group, subagent, acp, other).
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// Only sessions whose key contains this, in any case (a channel, a peer's id).
    #[arg(long, value_name = "TEXT")]
    contains: Option<String>,
    #[command(flatten)]
    page: PageArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// A page of a list (hub.md, "Paging").
#[derive(Debug, Args)]
pub(super) struct PageArgs {
    /// Most entries [default: 50, at most 200].
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// The page after the last one: the cursor it printed (`nextCursor`).
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct KeyArgs {
    /// The session key (agent:<id>:…).
    session_key: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct ShowArgs {
    /// The session key (agent:<id>:…).
    session_key: String,
    /// Print the system section the session was last given (what deepcli told its agent at
    /// the start of its runtime session, or when the section last changed).
    #[arg(long)]
    prompt: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct HistoryArgs {
    /// The session key.
    session_key: String,
    #[command(flatten)]
    page: PageArgs,
    /// Every segment: also what came before the last `/new` or `/reset` in the chat.
    #[arg(long)]
    all: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct SearchArgs {
    /// The words every line found has (the last one also as a prefix).
    #[arg(required = true, num_args = 1..)]
    words: Vec<String>,
    #[command(flatten)]
    page: PageArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct WatchArgs {
    /// The session key.
    session_key: String,
    /// Begin with only the last N messages said so far [default: 20].
    #[arg(long, value_name = "N", default_value_t = 20)]
    last: usize,
}

#[derive(Debug, Args)]
pub(super) struct SayArgs {
    /// The session key.
    session_key: String,
    /// What to say.
    text: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct SendArgs {
    /// The session key.
    session_key: String,
    /// The message.
    message: String,
    /// How long to wait for the reply, in seconds (0: only queue it) [default: 30].
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct CloseArgs {
    /// The session key.
    session_key: String,
    /// Also move its transcript to the trash tables.
    #[arg(long)]
    trash: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RunsArgs {
    /// Only runs in this state (accepted, running, completed, failed, timed_out,
    /// cancel_requested, cancelled, uncertain).
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    /// Only runs from or to this agent.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Only runs not yet final.
    #[arg(long)]
    active: bool,
    #[command(flatten)]
    page: PageArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The run id.
    run_id: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn hub(command: HubCommand) -> ExitStatus {
    let HubCommand::Mcp = command;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitStatus::Error;
        }
    };
    match runtime.block_on(crate::hub::mcp::serve_stdio()) {
        Ok(()) => ExitStatus::Success,
        Err(e) => {
            eprintln!("deepcli hub mcp: {e}");
            ExitStatus::Error
        }
    }
}

/// One JSON-RPC call of the Hub's operator service; the result, or how the command ends.
pub(super) fn rpc(
    global: &GlobalSettings,
    method: &str,
    params: Value,
    wait: Duration,
) -> Result<Value, ExitStatus> {
    let mut err = anstream::stderr();
    let dir = global.state();
    let client = match StateStore::open_existing(&dir) {
        Ok(Some(store)) => Client::find(&dir, &store),
        Ok(None) => None,
        Err(e) => return Err(super::state_error(&e)),
    };
    let Some(client) = client else {
        // What the state database holds is read from it: a transcript outlives its controller.
        if dir.has_database()
            && let Some(answer) = crate::hub::operator::offline(&dir, method, params.clone())
        {
            return match answer {
                Ok(answer) => {
                    if !global.output.quiet {
                        let _ = writeln!(
                            err,
                            "note: no controller runs: read from the state database"
                        );
                    }
                    Ok(answer)
                }
                Err(e) => {
                    let _ = writeln!(err, "error: {e}");
                    Err(ExitStatus::Failure)
                }
            };
        }
        let _ = writeln!(
            err,
            "error: no controller runs on state directory `{}`\nhint: sending, cancelling and deciding need the running controller (listing and reading sessions and runs do not): start one with `deepcli up`, or pass the --state-dir it runs with",
            dir.root().display()
        );
        return Err(ExitStatus::Error);
    };
    let request = crate::rpc::request(1, &format!("{}{method}", crate::rpc::PREFIX), params);
    let body = match client.call_within(
        hyper::Method::POST,
        "/rpc",
        Some(request.to_string().into()),
        wait + Duration::from_secs(15),
    ) {
        Ok(body) => body,
        Err(e @ (ClientError::Connect { .. } | ClientError::Timeout { .. })) => {
            let _ = writeln!(err, "error: {e}");
            return Err(ExitStatus::Error);
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return Err(ExitStatus::Failure);
        }
    };
    let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
    crate::rpc::outcome(&answer).map_err(|error| {
        let _ = writeln!(err, "error: {}", error.message);
        ExitStatus::Failure
    })
}

pub(super) fn show(result: &Value, json: bool, human: impl FnOnce(&Value) -> String) -> ExitStatus {
    if json {
        super::emit::print_json(result);
    } else {
        let mut out = human(result);
        if let Some(next) = result["nextCursor"].as_str() {
            out.push_str(&format!("More: the next page with --cursor {next}\n"));
        }
        let _ = anstream::stdout().write_all(out.as_bytes());
    }
    ExitStatus::Success
}

pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn sessions(global: &GlobalSettings, command: SessionsCommand) -> ExitStatus {
    let quick = Duration::from_secs(5);
    let outcome = match &command {
        SessionsCommand::Watch(a) => return watch(global, a),
        SessionsCommand::List(a) => rpc(
            global,
            "sessions/list",
            json!({"agentId": a.agent, "kind": a.kind, "contains": a.contains, "limit": a.page.limit, "cursor": a.page.cursor}),
            quick,
        )
        .map(|r| (r, a.json)),
        SessionsCommand::Show(a) => rpc(
            global,
            "sessions/show",
            json!({"sessionKey": a.session_key, "prompt": a.prompt}),
            quick,
        )
        .map(|r| (r, a.json)),
        SessionsCommand::History(a) => rpc(
            global,
            "sessions/history",
            json!({"sessionKey": a.session_key, "limit": a.page.limit, "cursor": a.page.cursor, "all": a.all}),
            quick,
        )
        .map(|r| (r, a.json)),
        SessionsCommand::Search(a) => rpc(
            global,
            "sessions/search",
            json!({"text": a.words.join(" "), "limit": a.page.limit, "cursor": a.page.cursor}),
            quick,
        )
        .map(|r| (r, a.json)),
        SessionsCommand::Send(a) => {
            let wait = a.timeout.unwrap_or(30);
            rpc(
                global,
                "sessions/send",
                json!({"sessionKey": a.session_key, "message": a.message, "timeoutSeconds": wait}),
                Duration::from_secs(wait),
            )
            .map(|r| (r, a.json))
        }
        SessionsCommand::Say(a) => rpc(
            global,
            "sessions/say",
            json!({"sessionKey": a.session_key, "text": a.text}),
            quick,
        )
        .map(|r| (r, a.json)),
        SessionsCommand::Cancel(a) => rpc(
            global,
            "sessions/cancel",
            json!({"sessionKey": a.session_key}),
            Duration::from_secs(30),
        )
        .map(|r| (r, a.json)),
        SessionsCommand::Close(a) => rpc(
            global,
            "sessions/close",
            json!({"sessionKey": a.session_key, "trash": a.trash}),
            quick,
        )
        .map(|r| (r, a.json)),
    };
    let (result, json) = match outcome {
        Ok(done) => done,
        Err(status) => return status,
    };
    match command {
        SessionsCommand::Cancel(_) => show(&result, json, |r| {
            let mut out = String::new();
            for run in r["runs"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "run {}: {} (cancel {})\n",
                    text(&run["runId"]),
                    text(&run["state"]),
                    text(&run["cancel"])
                ));
            }
            match r["turnCancel"].as_str() {
                Some("not_running") => out.push_str("nothing runs in this session\n"),
                Some(state) => out.push_str(&format!("turn: cancel {state}\n")),
                None => {}
            }
            out
        }),
        SessionsCommand::List(_) => show(&result, json, |r| {
            let mut out = String::new();
            for s in r["sessions"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "{}  {}  {}  last {}  queue {}{}\n",
                    text(&s["sessionKey"]),
                    text(&s["agentId"]),
                    text(&s["kind"]),
                    text(&s["lastActivity"]),
                    text(&s["queueDepth"]),
                    s["label"]
                        .as_str()
                        .map_or(String::new(), |l| format!("  label {l}"))
                ));
            }
            if out.is_empty() {
                out.push_str("No sessions.\n");
            }
            out
        }),
        SessionsCommand::History(_) => show(&result, json, history_human),
        SessionsCommand::Search(_) => show(&result, json, |r| {
            let mut out = String::new();
            for f in r["found"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "{}  {}  #{} [{}] {}\n",
                    text(&f["at"]),
                    text(&f["sessionKey"]),
                    text(&f["id"]),
                    text(&f["provenance"]),
                    crate::shown::shown_lines(&text(&f["snippet"]))
                ));
            }
            if out.is_empty() {
                out.push_str("Nothing found.\n");
            }
            out
        }),
        SessionsCommand::Send(_) => {
            let ok = result["status"] == "ok" || result["status"] == "no_reply";
            let status = show(&result, json, |r| match r["reply"].as_str() {
                Some(reply) => format!("{reply}\n"),
                None if r["status"] == "accepted" => format!(
                    "queued (run {}): deepcli runs show {} follows it\n",
                    text(&r["runId"]),
                    text(&r["runId"])
                ),
                None => format!(
                    "{} (run {}){}\n",
                    text(&r["status"]),
                    text(&r["runId"]),
                    r["error"]
                        .as_str()
                        .map_or(String::new(), |e| format!(": {e}"))
                ),
            });
            if ok || result["status"] == "accepted" {
                status
            } else {
                ExitStatus::Failure
            }
        }
        SessionsCommand::Show(ShowArgs { prompt: true, .. }) => {
            show(&result, json, |r| match &r["systemSection"] {
                Value::Object(section) => format!(
                    "# given {} to runtime session {} ({})\n{}\n",
                    text(&section["at"]),
                    text(&section["runtimeSessionId"]),
                    text(&section["hash"]),
                    crate::shown::shown_lines(&text(&section["text"])),
                ),
                _ => format!(
                    "Session {} was given no system section yet: its agent gets one at the start of its next runtime session (an `acp` runtime only).\n",
                    crate::shown::shown(r["sessionKey"].as_str().unwrap_or("-"))
                ),
            })
        }
        SessionsCommand::Say(_) => show(&result, json, |r| {
            format!(
                "queued for {}\n",
                crate::shown::shown(r["to"].as_str().unwrap_or("-"))
            )
        }),
        SessionsCommand::Close(_) => {
            let failed = result.get("error").is_some();
            show(&result, json, closed_human);
            if failed {
                ExitStatus::Failure
            } else {
                ExitStatus::Success
            }
        }
        SessionsCommand::Show(_) => show(&result, json, session_human),
        // Answered above, without a call.
        SessionsCommand::Watch(_) => ExitStatus::Success,
    }
}

/// How often `sessions watch` and `audit --follow` look again.
pub(super) const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// `sessions watch KEY`: the transcript's last messages, then each new one as it is recorded,
/// read from the state database (the controller writes it there as the turn ends).
fn watch(global: &GlobalSettings, args: &WatchArgs) -> ExitStatus {
    let mut err = anstream::stderr();
    let dir = global.state();
    if !dir.has_database() {
        let _ = writeln!(
            err,
            "error: no deepcli state in `{}`\nhint: pass the --state-dir (or DEEPCLI_STATE_DIR) the controller runs with",
            dir.root().display()
        );
        return ExitStatus::Error;
    }
    const PAGE: usize = 200;
    let page = |cursor: &Option<String>| {
        crate::hub::operator::offline(
            &dir,
            "sessions/history",
            json!({"sessionKey": args.session_key, "limit": PAGE, "cursor": cursor}),
        )
    };
    // Where the page being read begins, and the newest message printed.
    let mut cursor: Option<String> = None;
    let mut last_id: Option<i64> = None;
    let mut first = true;
    loop {
        let mut fresh: Vec<Value> = Vec::new();
        loop {
            let result = match page(&cursor) {
                Some(Ok(result)) => result,
                Some(Err(e)) => {
                    let _ = writeln!(err, "error: {e}");
                    return ExitStatus::Failure;
                }
                None => return ExitStatus::Error,
            };
            let messages = result["messages"].as_array().cloned().unwrap_or_default();
            fresh.extend(
                messages
                    .into_iter()
                    .filter(|m| last_id.is_none_or(|last| m["id"].as_i64().unwrap_or(0) > last)),
            );
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        if first {
            let skip = fresh.len().saturating_sub(args.last);
            fresh.drain(..skip);
            first = false;
        }
        let mut out = String::new();
        for m in &fresh {
            last_id = m["id"].as_i64().or(last_id);
            out.push_str(&history_line(m));
        }
        if !print_live(&out) {
            return ExitStatus::Success;
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// `sessions history` for a person: a line for each message of the page, oldest first.
fn history_human(r: &Value) -> String {
    let mut out = String::new();
    for m in r["messages"].as_array().into_iter().flatten() {
        out.push_str(&history_line(m));
    }
    if out.is_empty() {
        out.push_str("No messages.\n");
    }
    out
}

/// A `sessions/history` message for a person: when, its provenance, who said it (as the
/// console says it) and what; a gated inbound message is marked `gated` in the brackets and
/// followed by a line with the gate, the setting that decided and what became of it.
fn history_line(m: &Value) -> String {
    use crate::access::gated_line::Gated;
    use crate::access::sender::Sender;
    let who = serde_json::from_value::<Sender>(m["sender"].clone())
        .map_or_else(|_| "someone".to_string(), |s| s.label());
    let gated = serde_json::from_value::<Option<Gated>>(m["gated"].clone())
        .ok()
        .flatten();
    let mut line = format!(
        "{} [{}{}] {}: {}\n",
        text(&m["at"]),
        text(&m["provenance"]),
        if gated.is_some() { ", gated" } else { "" },
        crate::shown::shown(&who),
        crate::shown::shown_lines(&text(&m["text"]))
    );
    if let Some(g) = gated {
        line.push_str(&format!(
            "    {}; {}\n",
            crate::shown::shown(&g.label()),
            g.fate()
        ));
    }
    line
}

/// A run on one line: id, state, tool, from -> to, when.
fn run_line(run: &Value) -> String {
    format!(
        "{}  {}  {}  {} -> {}  {}\n",
        text(&run["runId"]),
        text(&run["state"]),
        text(&run["sourceTool"]),
        text(&run["requesterSessionKey"]),
        text(&run["targetSessionKey"]),
        text(&run["createdAt"]),
    )
}

/// Prints what a following command found, at once; `false` when the reader went away
/// (`| head`), which ends the following.
pub(super) fn print_live(out: &str) -> bool {
    let mut stdout = anstream::stdout();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .is_ok()
}

/// `sessions show` for people: the session, its place in a spawn tree, its runs and its
/// platform threads' discussions.
fn session_human(r: &Value) -> String {
    let mut out = format!(
        "session {}
  agent    {}
  kind     {}
  queue    {}
",
        crate::shown::shown(&text(&r["sessionKey"])),
        text(&r["agentId"]),
        text(&r["kind"]),
        text(&r["queueDepth"]),
    );
    if let Value::Object(child) = &r["child"] {
        out.push_str(&format!(
            "  spawned  by {} (depth {}, run {}, mode {}, cleanup {}){}{}\n",
            text(&child["parentSessionKey"]),
            text(&child["depth"]),
            text(&child["runId"]),
            text(&child["mode"]),
            text(&child["cleanup"]),
            child["label"]
                .as_str()
                .map_or(String::new(), |l| format!(", label {l}")),
            child["closedAt"]
                .as_str()
                .map_or(String::new(), |at| format!(", closed {at}")),
        ));
    }
    let children = r["children"].as_array().into_iter().flatten();
    for (n, c) in children.enumerate() {
        out.push_str(&format!(
            "{}{}  run {}{}\n",
            if n == 0 { "  children " } else { "           " },
            text(&c["sessionKey"]),
            text(&c["runId"]),
            c["closedAt"]
                .as_str()
                .map_or(String::new(), |at| format!("  closed {at}")),
        ));
    }
    let runs: Vec<&Value> = r["runs"].as_array().into_iter().flatten().collect();
    if runs.is_empty() {
        out.push_str("  runs     none\n");
    } else {
        out.push_str("  runs\n");
        for run in runs {
            out.push_str(&format!("    {}", run_line(run)));
        }
    }
    for d in r["discussions"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  thread   {}: {} bot rounds, {}{}\n",
            text(&d["threadId"]),
            text(&d["rounds"]),
            text(&d["state"]),
            if d["noticeSent"] == true {
                " (deepcli's notice posted)"
            } else {
                ""
            },
        ));
    }
    out
}

/// `sessions close` for people: one line saying what was closed.
fn closed_human(r: &Value) -> String {
    let key = crate::shown::shown(r["sessionKey"].as_str().unwrap_or("-")).into_owned();
    if let Some(error) = r["error"].as_str() {
        return format!(
            "session {key} was not closed: {}\n",
            crate::shown::shown(error)
        );
    }
    let mut parts = vec![format!(
        "runtime session {}",
        match &r["runtime"] {
            Value::String(s) => crate::shown::shown(s).into_owned(),
            Value::Null => "none".into(),
            other => other.to_string(),
        }
    )];
    let tokens = r["tokensRevoked"].as_u64().unwrap_or(0);
    parts.push(crate::plural::plural(
        tokens,
        "token revoked",
        "tokens revoked",
    ));
    if r["childClosed"].as_bool() == Some(true) {
        parts.push("its subagent closed".into());
    }
    if r["trashed"].as_bool() == Some(true) {
        parts.push("moved to trash".into());
    }
    format!("closed session {key}: {}\n", parts.join(", "))
}

pub(super) fn runs(global: &GlobalSettings, command: RunsCommand) -> ExitStatus {
    let quick = Duration::from_secs(5);
    match command {
        RunsCommand::List(a) => {
            match rpc(
                global,
                "runs/list",
                json!({"state": a.state, "agentId": a.agent, "active": a.active, "limit": a.page.limit, "cursor": a.page.cursor}),
                quick,
            ) {
                Ok(result) => show(&result, a.json, |r| {
                    let mut out = String::new();
                    for run in r["runs"].as_array().into_iter().flatten() {
                        out.push_str(&run_line(run));
                    }
                    if out.is_empty() {
                        out.push_str("No runs.\n");
                    }
                    out
                }),
                Err(status) => status,
            }
        }
        RunsCommand::Resume(a) => decide(global, "runs/resume", &a),
        RunsCommand::Stop(a) => decide(global, "runs/stop", &a),
        RunsCommand::Cancel(a) => match rpc(
            global,
            "runs/cancel",
            json!({"runId": a.run_id}),
            Duration::from_secs(30),
        ) {
            Ok(result) => show(&result, a.json, |r| {
                format!(
                    "run {}: {} (cancel {})\n",
                    text(&r["runId"]),
                    text(&r["state"]),
                    text(&r["cancel"])
                )
            }),
            Err(status) => status,
        },
        RunsCommand::Show(a) => match rpc(global, "runs/show", json!({"runId": a.run_id}), quick) {
            Ok(result) => show(&result, a.json, |r| {
                let mut out = format!(
                    "run {}: {} ({})\n  from {}\n  to   {}\n",
                    text(&r["runId"]),
                    text(&r["state"]),
                    text(&r["sourceTool"]),
                    text(&r["requesterSessionKey"]),
                    text(&r["targetSessionKey"])
                );
                for e in r["events"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "  {} {} {}\n",
                        text(&e["at"]),
                        text(&e["state"]),
                        text(&e["note"])
                    ));
                }
                out
            }),
            Err(status) => status,
        },
    }
}

/// `runs resume|stop`: the operator's decision on a paused run; the run as it is then.
pub(super) fn tasks(global: &GlobalSettings, command: TasksCommand) -> ExitStatus {
    let quick = Duration::from_secs(5);
    let (method, params, json, wait) = match &command {
        TasksCommand::List(a) => (
            "tasks/list",
            json!({"room": a.room, "limit": a.limit}),
            a.json,
            quick,
        ),
        TasksCommand::Show(a) => ("tasks/show", json!({"taskId": a.task_id}), a.json, quick),
        TasksCommand::Create(a) => (
            "tasks/create",
            json!({"owner": a.owner, "assignee": a.assignee, "title": a.title, "acceptance": a.acceptance, "room": a.room}),
            a.json,
            Duration::from_secs(30),
        ),
        TasksCommand::Accept(a) => ("tasks/accept", json!({"taskId": a.task_id}), a.json, quick),
        TasksCommand::Reject(a) => (
            "tasks/reject",
            json!({"taskId": a.task_id, "reason": a.reason, "close": a.close}),
            a.json,
            quick,
        ),
        TasksCommand::Cancel(a) => (
            "tasks/cancel",
            json!({"taskId": a.task_id}),
            a.json,
            Duration::from_secs(30),
        ),
        TasksCommand::Artifacts(a) => ("tasks/show", json!({"taskId": a.task_id}), a.json, quick),
    };
    let result = match rpc(global, method, params, wait) {
        Ok(result) => result,
        Err(status) => return status,
    };
    let line = |t: &Value| {
        format!(
            "{}  {}  {} -> {}  {}\n",
            text(&t["taskId"]),
            text(&t["state"]),
            text(&t["owner"]),
            text(&t["assignee"]),
            crate::shown::shown(&text(&t["title"])),
        )
    };
    match command {
        TasksCommand::List(_) => show(&result, json, |r| {
            let mut out = String::new();
            for t in r["tasks"].as_array().into_iter().flatten() {
                out.push_str(&line(t));
            }
            if out.is_empty() {
                out.push_str("No tasks.\n");
            }
            out
        }),
        TasksCommand::Show(_) => show(&result, json, |t| {
            let mut out = line(t);
            out.push_str(&format!(
                "  acceptance: {}\n  session: {}\n  room: {}\n",
                crate::shown::shown_lines(&text(&t["acceptance"])),
                text(&t["sessionKey"]),
                text(&t["room"]),
            ));
            let steps = t["steps"].as_array().into_iter().flatten();
            for (i, step) in steps.enumerate() {
                if i == 0 {
                    out.push_str("  plan:\n");
                }
                out.push_str(&step_line(step));
            }
            for (i, a) in t["artifacts"].as_array().into_iter().flatten().enumerate() {
                if i == 0 {
                    out.push_str("  artifacts:\n");
                }
                out.push_str(&artifact_line(a));
            }
            out.push_str("  history:\n");
            for e in t["events"].as_array().into_iter().flatten() {
                let to = e["to"].as_str().unwrap_or("(late: nothing changed)");
                let detail = match e["detail"].as_object() {
                    Some(map) if !map.is_empty() => format!(" {}", e["detail"]),
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "    {} {} by {} via {} -> {}{}\n",
                    text(&e["at"]),
                    text(&e["kind"]),
                    text(&e["actor"]),
                    text(&e["door"]),
                    to,
                    crate::shown::shown(&detail),
                ));
            }
            out
        }),
        TasksCommand::Artifacts(a) => match a.name {
            None => show(
                &json!({"taskId": result["taskId"], "artifacts": result["artifacts"]}),
                json,
                |r| {
                    let mut out = String::new();
                    for a in r["artifacts"].as_array().into_iter().flatten() {
                        out.push_str(&artifact_line(a));
                    }
                    if out.is_empty() {
                        out.push_str("No artifacts.\n");
                    }
                    out
                },
            ),
            Some(name) => copy_artifact(global, &result, &name, a.out, json),
        },
        _ => show(&result, json, |t| {
            format!("task {}: {}\n", text(&t["taskId"]), text(&t["state"]))
        }),
    }
}

/// A step of a task's plan, as `tasks show` lists it.
fn step_line(s: &Value) -> String {
    let mut line = format!(
        "    {} [{}] {}",
        text(&s["id"]),
        text(&s["status"]),
        crate::shown::shown(&text(&s["title"]))
    );
    if let Some(agent) = s["targetAgentId"].as_str() {
        line.push_str(&format!(" -> {agent}"));
        if let Some(runtime) = s["runtime"].as_str() {
            line.push_str(&format!(" ({runtime})"));
        }
    }
    if let Some(run) = s["runId"].as_str() {
        line.push_str(&format!(" run {run}"));
    }
    for (key, label) in [("acceptance", "accepted when"), ("notes", "notes")] {
        if let Some(v) = s[key].as_str() {
            line.push_str(&format!("; {label}: {}", crate::shown::shown_lines(v)));
        }
    }
    line.push('\n');
    line
}

/// An artifact, as `tasks show` and `tasks artifacts` list it.
fn artifact_line(a: &Value) -> String {
    format!(
        "    {}  {} bytes  sha256 {}  by {}  {}\n",
        crate::shown::shown(&text(&a["name"])),
        text(&a["size"]),
        text(&a["sha256"]),
        text(&a["handedInBy"]),
        text(&a["at"]),
    )
}

/// `tasks artifacts ID NAME`: copies the stored artifact out of the state directory to `out`
/// (never over a file), checking its hash on the way.
fn copy_artifact(
    global: &GlobalSettings,
    task: &Value,
    name: &str,
    out: Option<std::path::PathBuf>,
    json: bool,
) -> ExitStatus {
    let mut err = anstream::stderr();
    let id = text(&task["taskId"]);
    let found = task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["name"] == name);
    let Some(artifact) = found else {
        let _ = writeln!(
            err,
            "error: task {id} has no artifact `{name}`\nhint: `deepcli tasks artifacts {id}` lists them"
        );
        return ExitStatus::Failure;
    };
    let sha256 = text(&artifact["sha256"]);
    let out = out.unwrap_or_else(|| {
        std::path::PathBuf::from(std::path::Path::new(name).file_name().unwrap_or_default())
    });
    let stored = global.state().artifacts().join(&id).join(&sha256);
    let copied = (|| -> Result<(), String> {
        let mut from = std::fs::File::open(&stored)
            .map_err(|e| format!("cannot read the stored copy `{}`: {e}", stored.display()))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".deepcli-")
            .tempfile_in(crate::durable::dir_of(&out))
            .map_err(|e| format!("cannot write `{}`: {e}", out.display()))?;
        use crate::tasks::artifacts::{Copied, CopyError, copy_hashed};
        let got = match copy_hashed(&mut from, &mut tmp, u64::MAX) {
            Ok(Copied::Whole { sha256, .. }) => sha256,
            Ok(Copied::Over(size)) => {
                return Err(format!("the stored copy has {size} bytes or more"));
            }
            Err(CopyError::Read(e)) => return Err(format!("cannot read the stored copy: {e}")),
            Err(CopyError::Write(e)) => {
                return Err(format!("cannot write `{}`: {e}", out.display()));
            }
        };
        if got != sha256 {
            return Err(format!(
                "the stored copy's SHA-256 is {got}, not {sha256}: the state directory was changed; nothing written"
            ));
        }
        tmp.persist_noclobber(&out).map_err(|e| {
            format!(
                "cannot write `{}`: {}{}",
                out.display(),
                e.error,
                if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                    " (choose another --out)"
                } else {
                    ""
                }
            )
        })?;
        Ok(())
    })();
    if let Err(why) = copied {
        let _ = writeln!(err, "error: {why}");
        return ExitStatus::Failure;
    }
    let result = json!({"taskId": id, "name": name, "sha256": sha256, "size": artifact["size"], "path": out});
    show(&result, json, |r| {
        format!(
            "{}: {} bytes, sha256 {} (checked)\n",
            out.display(),
            text(&r["size"]),
            text(&r["sha256"])
        )
    })
}

fn decide(global: &GlobalSettings, method: &str, a: &RunArgs) -> ExitStatus {
    match rpc(
        global,
        method,
        json!({"runId": a.run_id}),
        Duration::from_secs(30),
    ) {
        Ok(result) => show(&result, a.json, |r| {
            format!("run {}: {}\n", text(&r["runId"]), text(&r["state"]))
        }),
        Err(status) => status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_history_says_who_said_each_line_and_marks_the_gated_ones() {
        let page = json!({"sessionKey": "agent:main:telegram:group:-100", "messages": [
            {"id": 7, "provenance": "inbound", "at": "2026-12-05T10:00:00Z", "text": "@bot deploy?",
             "sender": {"kind": "person", "channel": "telegram", "id": "42", "name": "Ada", "isBot": false}},
            {"id": 8, "provenance": "agent", "at": "2026-12-05T10:00:02Z", "text": "deployed\nall green",
             "sender": {"kind": "agent", "agentId": "main"}},
            {"id": 9, "provenance": "inbound", "at": "2026-12-05T10:00:05Z", "text": "nice \u{1b}[2J",
             "sender": {"kind": "person", "channel": "telegram", "id": "43", "name": "Bob", "isBot": false},
             "gated": {"reason": "not-mentioned", "rule": "requireMention (built-in default: true)"}},
            {"id": 10, "provenance": "inbound", "at": "2026-12-05T10:00:06Z", "text": "me too",
             "sender": {"kind": "person", "channel": "telegram", "id": "77", "isBot": true},
             "gated": {"reason": "bot", "rule": "allowBots (channels.yaml:9)"}},
            {"id": 11, "provenance": "inter_session", "at": "2026-12-05T10:00:07Z", "text": "the numbers",
             "sender": {"kind": "peer_agent", "agentId": "research", "sessionKey": "agent:research:main",
                        "tool": "sessions_send", "runId": "r-1"}},
            {"id": 12, "provenance": "operator", "at": "2026-12-05T10:00:08Z", "text": "status?",
             "sender": {"kind": "operator"}},
            {"id": 13, "provenance": "reset", "at": "2026-12-05T10:00:09Z", "text": "new session",
             "sender": {"kind": "deepcli"}}
        ]});
        insta::assert_snapshot!("sessions_history_human", history_human(&page));
        assert_eq!(
            history_human(&json!({"sessionKey": "k", "messages": []})),
            "No messages.\n"
        );
    }
}
