//! `deepcli a2a card|send|get|cancel URL …`: an A2A 1.0 client on the command line, to try
//! a hub's A2A endpoint (docs/a2a.md) or any other agent's: JSON-RPC over HTTP, the bearer token
//! read from the environment (never from a flag, which every user of the machine could read).

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::ExitStatus;

const EXIT_CODES: &str = "\
Exit codes:
  0  answered: a task completed or waiting for input, a card, a cancel done
  1  the agent answered with an error, or the task failed, was rejected or cancelled
  2  the call could not be made (bad URL, unreachable, no such variable)";

#[derive(Debug, Subcommand)]
pub(super) enum A2aCommand {
    /// Read an agent's card: its name, skills and endpoints.
    #[command(after_help = EXIT_CODES)]
    Card(CardArgs),
    /// Send a message (`SendMessage`) and wait for the task to stop working.
    #[command(after_help = EXIT_CODES)]
    Send(SendArgs),
    /// Show a task (`GetTask`).
    #[command(after_help = EXIT_CODES)]
    Get(TaskArgs),
    /// Cancel a task (`CancelTask`).
    #[command(after_help = EXIT_CODES)]
    Cancel(TaskArgs),
}

#[derive(Debug, Args)]
pub(super) struct CardArgs {
    /// The agent's A2A endpoint, e.g. http://127.0.0.1:7430/a2a/research/.
    url: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(super) struct SendArgs {
    /// The agent's A2A endpoint, e.g. http://127.0.0.1:7430/a2a/research/.
    url: String,
    /// The message's text.
    text: String,
    /// Continue this context (a conversation the agent keeps).
    #[arg(long, value_name = "ID")]
    context_id: Option<String>,
    /// Answer this task (one waiting for input).
    #[arg(long, value_name = "ID")]
    task_id: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(super) struct TaskArgs {
    /// The agent's A2A endpoint.
    url: String,
    /// The task's id.
    task_id: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct Common {
    /// The environment variable that holds the bearer token.
    #[arg(long, value_name = "VAR", default_value = "DEEPCLI_A2A_TOKEN")]
    token_env: String,
    /// How long to wait for the answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 150)]
    timeout: u64,
    /// Print the answer's JSON (the task, or the card) as it came.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(command: A2aCommand) -> ExitStatus {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return could_not(&format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(call(command))
}

fn could_not(why: &str) -> ExitStatus {
    let _ = writeln!(anstream::stderr(), "error: {why}");
    ExitStatus::Error
}

async fn call(command: A2aCommand) -> ExitStatus {
    let (url, common, method, params) = match &command {
        A2aCommand::Card(a) => (&a.url, &a.common, None, Value::Null),
        A2aCommand::Send(a) => {
            let mut message = json!({
                "messageId": uuid::Uuid::new_v4().to_string(),
                "role": "ROLE_USER",
                "parts": [{"text": a.text}],
            });
            if let Some(context) = &a.context_id {
                message["contextId"] = context.as_str().into();
            }
            if let Some(task) = &a.task_id {
                message["taskId"] = task.as_str().into();
            }
            (
                &a.url,
                &a.common,
                Some("SendMessage"),
                json!({"message": message}),
            )
        }
        A2aCommand::Get(a) => (&a.url, &a.common, Some("GetTask"), json!({"id": a.task_id})),
        A2aCommand::Cancel(a) => (
            &a.url,
            &a.common,
            Some("CancelTask"),
            json!({"id": a.task_id}),
        ),
    };
    let token = match std::env::var(&common.token_env) {
        Ok(token) if !token.trim().is_empty() => Some(token),
        _ if method.is_none() => None,
        _ => {
            return could_not(&format!(
                "`{}` is not set: export the bearer token the agent gave you (or name another variable with --token-env)",
                common.token_env
            ));
        }
    };
    let http = match crate::http_client::builder()
        .timeout(Duration::from_secs(common.timeout))
        .build()
    {
        Ok(http) => http,
        Err(e) => return could_not(&format!("cannot build an HTTP client: {e}")),
    };
    let request = match method {
        None => http.get(format!(
            "{}/.well-known/agent-card.json",
            url.trim_end_matches('/')
        )),
        Some(method) => http
            .post(url)
            .header("Content-Type", "application/json")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
            ),
    }
    .header("A2A-Version", "1.0");
    let request = match &token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => {
            let why =
                crate::http_client::io_cause(&e).map_or_else(|| e.to_string(), ToString::to_string);
            return could_not(&format!("cannot reach {url}: {why}"));
        }
    };
    let status = response.status();
    let body: Value = match response.text().await.map(|t| serde_json::from_str(&t)) {
        Ok(Ok(body)) => body,
        Ok(Err(_)) | Err(_) => {
            return could_not(&format!("{url} answered {status} with no JSON"));
        }
    };
    if method.is_none() {
        if !status.is_success() {
            return could_not(&format!("{url} answered {status}"));
        }
        return print(&body, common.json, card);
    }
    if let Some(error) = body.get("error") {
        if common.json {
            super::emit::print_json(&body);
        } else {
            let reason = error["data"]
                .as_array()
                .and_then(|d| d.iter().find_map(|i| i["reason"].as_str()))
                .map_or(String::new(), |r| format!(", {r}"));
            let _ = writeln!(
                anstream::stderr(),
                "error: {} ({}{reason}; HTTP {status})",
                error["message"].as_str().unwrap_or("no message"),
                error["code"],
            );
        }
        return ExitStatus::Failure;
    }
    // SendMessage answers `{task}` (or `{message}`); GetTask and CancelTask the task itself.
    let result = &body["result"];
    let task = result.get("task").unwrap_or(result);
    let shown = print(task, common.json, |t| task_human(t, url));
    let state = task["status"]["state"].as_str().unwrap_or("");
    match (shown, state) {
        (ExitStatus::Success, "TASK_STATE_FAILED" | "TASK_STATE_REJECTED") => ExitStatus::Failure,
        (ExitStatus::Success, "TASK_STATE_CANCELED")
            if !matches!(command, A2aCommand::Cancel(_)) =>
        {
            ExitStatus::Failure
        }
        (shown, _) => shown,
    }
}

fn print(value: &Value, json: bool, human: impl FnOnce(&Value) -> String) -> ExitStatus {
    if json {
        super::emit::print_json(value);
    } else {
        let _ = anstream::stdout().write_all(human(value).as_bytes());
    }
    ExitStatus::Success
}

/// A task for people: its id, state and context, then what it says (its artifacts' text, or its
/// status message when it asks back or failed).
fn task_human(task: &Value, url: &str) -> String {
    let state = task["status"]["state"].as_str().unwrap_or("unknown");
    let word = state
        .strip_prefix("TASK_STATE_")
        .unwrap_or(state)
        .to_lowercase()
        .replace('_', "-");
    let id = task["id"].as_str().unwrap_or("-");
    let mut out = format!(
        "task {id}  {word}  (context {})\n",
        task["contextId"].as_str().unwrap_or("-")
    );
    let texts = |parts: &Value| -> Vec<String> {
        parts
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .map(crate::shown::shown_lines)
            .collect()
    };
    let artifacts: Vec<String> = task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| texts(&a["parts"]))
        .collect();
    let said = if artifacts.is_empty() {
        texts(&task["status"]["message"]["parts"])
    } else {
        artifacts
    };
    for text in said {
        out.push_str(&text);
        out.push('\n');
    }
    if state == "TASK_STATE_INPUT_REQUIRED" {
        out.push_str(&format!(
            "(it asks back: answer with deepcli a2a send {url} --task-id {id} TEXT)\n"
        ));
    }
    out
}

fn card(card: &Value) -> String {
    let mut out = format!(
        "{}: {}\n",
        card["name"].as_str().unwrap_or("-"),
        card["description"].as_str().unwrap_or("")
    );
    for i in card["supportedInterfaces"].as_array().into_iter().flatten() {
        // A tenant (gRPC's, say) is part of where: the agent behind a shared endpoint.
        let tenant = match i["tenant"].as_str() {
            Some(t) if !t.is_empty() => format!(", tenant {t}"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  endpoint  {} ({} {}{tenant})\n",
            i["url"].as_str().unwrap_or("-"),
            i["protocolBinding"].as_str().unwrap_or("-"),
            i["protocolVersion"].as_str().unwrap_or("-"),
        ));
    }
    for s in card["skills"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  skill     {}: {}\n",
            s["id"].as_str().unwrap_or("-"),
            s["description"].as_str().unwrap_or("")
        ));
    }
    out
}
