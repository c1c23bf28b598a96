//! A2A's JSON shapes (a2a.md): the 1.0 ProtoJSON forms (`TASK_STATE_COMPLETED`, `ROLE_USER`,
//! parts by their `oneof` field) and, for the 0.3 method names, 0.3's (`kind` discriminators,
//! lower-case states). Tasks are rendered from what the Hub recorded of their runs; requests'
//! params are read into typed requests; the Agent Cards. Pure.

use base64::Engine as _;
use serde_json::{Value, json};

use super::store::{OutFile, PushRecord, TaskRecord};
use super::{Exposed, Incoming, ListQuery, MAX_TEXT_BYTES, Peer, RpcError, TaskPage};
use crate::hub::store::RunRecord;
use crate::state::RunState;

/// The protocol version a request speaks, told by its method name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// A2A 1.0: `SendMessage`, `GetTask`, …
    V1,
    /// A2A 0.3: `message/send`, `tasks/get`, …
    V03,
}

/// The line an agent ends its reply with to ask the peer back (`TASK_STATE_INPUT_REQUIRED`).
pub(crate) const INPUT_REQUIRED: &str = "INPUT_REQUIRED";

/// A2A task states, as 1.0 names them.
pub(crate) mod state {
    pub(crate) const SUBMITTED: &str = "TASK_STATE_SUBMITTED";
    pub(crate) const WORKING: &str = "TASK_STATE_WORKING";
    pub(crate) const COMPLETED: &str = "TASK_STATE_COMPLETED";
    pub(crate) const FAILED: &str = "TASK_STATE_FAILED";
    pub(crate) const CANCELED: &str = "TASK_STATE_CANCELED";
    pub(crate) const INPUT_REQUIRED: &str = "TASK_STATE_INPUT_REQUIRED";
    pub(crate) const REJECTED: &str = "TASK_STATE_REJECTED";

    /// Whether nothing more happens to a task in `state`.
    pub(crate) fn is_terminal(state: &str) -> bool {
        matches!(state, COMPLETED | FAILED | CANCELED | REJECTED)
    }

    /// A state as ListTasks' `status` filter may name it (1.0 or 0.3 spelling).
    pub(crate) fn parse(name: &str) -> Option<&'static str> {
        Some(match name {
            SUBMITTED | "submitted" => SUBMITTED,
            WORKING | "working" => WORKING,
            COMPLETED | "completed" => COMPLETED,
            FAILED | "failed" => FAILED,
            CANCELED | "canceled" => CANCELED,
            INPUT_REQUIRED | "input-required" => INPUT_REQUIRED,
            REJECTED | "rejected" => REJECTED,
            _ => return None,
        })
    }
}

/// The reply without its `INPUT_REQUIRED` line, and whether it had one.
pub(crate) fn asks_back(reply: &str) -> (String, bool) {
    let trimmed = reply.trim_end();
    match trimmed.rsplit_once('\n') {
        Some((before, last)) if last.trim() == INPUT_REQUIRED => {
            (before.trim_end().to_string(), true)
        }
        None if trimmed.trim() == INPUT_REQUIRED => (String::new(), true),
        _ => (reply.to_string(), false),
    }
}

/// What a run's record says of its task: the A2A state, and whether the outcome is unknown
/// (a cancel the runtime did not confirm, or a runtime that died mid-turn).
pub(crate) fn run_state(run: &RunRecord) -> (&'static str, bool) {
    match run.state {
        // A run a loop pause holds waits for the operator: submitted, not yet worked on.
        RunState::Accepted | RunState::Paused => (state::SUBMITTED, false),
        RunState::Running
        | RunState::AwaitingInput
        | RunState::AwaitingApproval
        | RunState::CancelRequested => (state::WORKING, false),
        RunState::Completed => {
            let asked = run.reply.as_deref().is_some_and(|r| asks_back(r).1);
            (
                if asked {
                    state::INPUT_REQUIRED
                } else {
                    state::COMPLETED
                },
                false,
            )
        }
        RunState::Failed | RunState::TimedOut => (state::FAILED, false),
        RunState::Cancelled => (state::CANCELED, false),
        RunState::Uncertain => (state::FAILED, true),
    }
}

/// A task's state now: its last run's, unless it was cancelled while waiting for input.
pub(crate) fn task_state(stored: &str, last: Option<&RunRecord>) -> (&'static str, bool) {
    let Some(run) = last else {
        return (state::SUBMITTED, false);
    };
    let (now, unknown) = run_state(run);
    if now == state::INPUT_REQUIRED && stored == state::CANCELED {
        return (state::CANCELED, false);
    }
    (now, unknown)
}

impl Wire {
    fn state(self, s: &str) -> Value {
        match self {
            Wire::V1 => s.into(),
            Wire::V03 => s
                .strip_prefix("TASK_STATE_")
                .unwrap_or(s)
                .to_ascii_lowercase()
                .replace('_', "-")
                .into(),
        }
    }

    fn text_part(self, text: &str) -> Value {
        match self {
            Wire::V1 => json!({"text": text}),
            Wire::V03 => json!({"kind": "text", "text": text}),
        }
    }

    /// A message of the agent (`agent: true`) or the peer.
    pub(crate) fn message(
        self,
        id: &str,
        agent: bool,
        text: &str,
        task_id: &str,
        context_id: &str,
    ) -> Value {
        let role = match (self, agent) {
            (Wire::V1, true) => "ROLE_AGENT",
            (Wire::V1, false) => "ROLE_USER",
            (Wire::V03, true) => "agent",
            (Wire::V03, false) => "user",
        };
        let mut m = json!({
            "messageId": id,
            "role": role,
            "parts": [self.text_part(text)],
            "taskId": task_id,
            "contextId": context_id,
        });
        if self == Wire::V03 {
            m["kind"] = "message".into();
        }
        m
    }

    pub(crate) fn artifact(self, id: &str, text: &str) -> Value {
        json!({"artifactId": id, "name": "reply", "parts": [self.text_part(text)]})
    }

    /// The artifacts of the files `task`'s agent handed to the peer (of run `run` only, when
    /// named), one per name (a later hand-in replaces an earlier one): a file part with the
    /// bytes inline up to [`MAX_FILE_BYTES`], else with the URL the peer GETs it at (with its
    /// own token). A peer whose `acceptedOutputModes` leave out the file's media type gets a
    /// text part instead, saying what the file is and why it was not sent.
    pub(crate) fn file_artifacts(self, task: &TaskRecord, run: Option<&str>) -> Vec<Value> {
        let mut out: Vec<(String, Value)> = Vec::new();
        for OutFile { file, url } in &task.files {
            if run.is_some_and(|r| r != file.run_id) {
                continue;
            }
            let part = if !accepts(task.output_modes.as_deref(), &file.media_type) {
                self.text_part(&format!(
                    "[file `{}`: {} bytes, {}, sha256 {} — not sent: this task's acceptedOutputModes ({}) do not take {}]",
                    file.name,
                    file.size,
                    file.media_type,
                    file.sha256,
                    task.output_modes.as_deref().unwrap_or_default().join(", "),
                    file.media_type
                ))
            } else {
                let (v1_key, v03_key, value) = match &file.bytes {
                    Some(bytes) => ("raw", "bytes", BASE64.encode(bytes)),
                    None => ("url", "uri", url.clone()),
                };
                match self {
                    Wire::V1 => {
                        let mut part = json!({"mediaType": file.media_type, "filename": file.name});
                        part[v1_key] = value.into();
                        part
                    }
                    Wire::V03 => {
                        let mut inner = json!({"mimeType": file.media_type, "name": file.name});
                        inner[v03_key] = value.into();
                        json!({"kind": "file", "file": inner})
                    }
                }
            };
            let artifact = json!({
                "artifactId": format!("{}-file-{}", task.task_id, file.name),
                "name": file.name,
                "parts": [part],
                "metadata": {"sha256": file.sha256, "size": file.size},
            });
            out.retain(|(name, _)| *name != file.name);
            out.push((file.name.clone(), artifact));
        }
        out.into_iter().map(|(_, a)| a).collect()
    }

    /// A task's status: its state, what the agent said with it, when.
    pub(crate) fn status(
        self,
        task_id: &str,
        context_id: &str,
        state: &'static str,
        unknown: bool,
        last: Option<&RunRecord>,
    ) -> Value {
        let mut status = json!({"state": self.state(state)});
        if let Some(run) = last {
            status["timestamp"] = run.updated_at.clone().into();
            let said = match state {
                state::INPUT_REQUIRED => run.reply.as_deref().map(|r| asks_back(r).0),
                state::FAILED if unknown => Some(format!(
                    "deepcli: the outcome is unknown (run {}): {}",
                    run.state,
                    run.error.as_deref().unwrap_or(
                        "a cancel was asked for and the agent's runtime did not confirm it"
                    )
                )),
                state::FAILED => run.error.clone(),
                _ => None,
            };
            if let Some(text) = said {
                status["message"] = self.message(
                    &format!("{}-status", run.run_id),
                    true,
                    &text,
                    task_id,
                    context_id,
                );
            }
        }
        status
    }

    /// A task from its record and its runs' records (in order; runs missing from the Hub's
    /// records are left out). `history`: how many of the latest messages (`None`: all).
    pub(crate) fn task(
        self,
        task: &TaskRecord,
        runs: &[RunRecord],
        history: Option<usize>,
        artifacts: bool,
    ) -> Value {
        let last = runs.last();
        let (state, unknown) = task_state(&task.state, last);
        let (tid, cid) = (task.task_id.as_str(), task.context_id.as_str());
        let mut doc = json!({
            "id": tid,
            "contextId": cid,
            "status": self.status(tid, cid, state, unknown, last),
        });
        if self == Wire::V03 {
            doc["kind"] = "task".into();
        }
        if artifacts {
            let mut list = Vec::new();
            if state == state::COMPLETED
                && let Some(reply) = last.and_then(|r| r.reply.as_deref())
            {
                list.push(self.artifact(&format!("{tid}-reply"), reply));
            }
            list.extend(self.file_artifacts(task, None));
            if !list.is_empty() {
                doc["artifacts"] = list.into();
            }
        }
        if history != Some(0) {
            let mut messages = Vec::new();
            for (run, (_, message_id)) in runs.iter().zip(&task.runs) {
                messages.push(self.message(message_id, false, &run.message, tid, cid));
                if let Some(reply) = &run.reply {
                    let text = asks_back(reply).0;
                    messages.push(self.message(&run.run_id, true, &text, tid, cid));
                }
            }
            if let Some(n) = history {
                let skip = messages.len().saturating_sub(n);
                messages.drain(..skip);
            }
            doc["history"] = messages.into();
        }
        if unknown {
            doc["metadata"] = json!({"deepcli": {"runState": last.map(|r| r.state)}});
        }
        doc
    }

    /// SendMessage's result holding a task.
    pub(crate) fn send_result(self, task: Value) -> Value {
        match self {
            Wire::V1 => json!({"task": task}),
            Wire::V03 => task,
        }
    }

    /// A stream event holding a task.
    pub(crate) fn task_event(self, task: Value) -> Value {
        self.send_result(task)
    }

    /// A stream event: the task's status changed.
    pub(crate) fn status_event(
        self,
        task_id: &str,
        context_id: &str,
        status: Value,
        last: bool,
    ) -> Value {
        match self {
            Wire::V1 => {
                json!({"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": status}})
            }
            Wire::V03 => {
                json!({"kind": "status-update", "taskId": task_id, "contextId": context_id, "status": status, "final": last})
            }
        }
    }

    /// A stream event: the task's artifact.
    pub(crate) fn artifact_event(self, task_id: &str, context_id: &str, artifact: Value) -> Value {
        match self {
            Wire::V1 => {
                json!({"artifactUpdate": {"taskId": task_id, "contextId": context_id, "artifact": artifact, "lastChunk": true}})
            }
            Wire::V03 => {
                json!({"kind": "artifact-update", "taskId": task_id, "contextId": context_id, "artifact": artifact, "lastChunk": true})
            }
        }
    }
}

// ---- requests ----------------------------------------------------------------------------

/// Field `name` (lowerCamelCase) of `object`, in either of ProtoJSON's spellings: a parser
/// accepts `contextId` and `context_id` alike, so a server must not ignore the second. `None`
/// when neither is given (or null); refused when both are, differently.
pub(crate) fn field<'a>(object: &'a Value, name: &str) -> Result<Option<&'a Value>, RpcError> {
    let snake = snake_case(name);
    let camel = object.get(name).filter(|v| !v.is_null());
    let other = object.get(&snake).filter(|v| !v.is_null());
    match (camel, other) {
        (Some(a), Some(b)) if a != b => Err(RpcError::invalid_params(format!(
            "`{name}` and `{snake}` are the same field, given twice with different values"
        ))),
        (Some(v), _) | (None, Some(v)) => Ok(Some(v)),
        (None, None) => Ok(None),
    }
}

/// `contextId` → `context_id`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `historyLength` of a request (or of its `configuration`): `None` when not given.
pub(crate) fn history_length(params: &Value) -> Result<Option<usize>, RpcError> {
    match field(params, "historyLength")? {
        None => Ok(None),
        Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            RpcError::invalid_params("`historyLength` must be a non-negative integer")
        }),
    }
}

/// SendMessage's `configuration.historyLength`: how much of the task's history its answer
/// carries (`None`: all of it).
pub(crate) fn send_history(params: &Value) -> Result<Option<usize>, RpcError> {
    match field(params, "configuration")? {
        Some(configuration) => history_length(configuration),
        None => Ok(None),
    }
}

/// The message of a SendMessage request (`params.message`), in either wire's spelling.
pub(crate) fn incoming(params: &Value) -> Result<Incoming, RpcError> {
    let Some(message) = params.get("message").filter(|m| m.is_object()) else {
        return Err(RpcError::invalid_params(
            "`message` (an object) is required",
        ));
    };
    let message_id = field(message, "messageId")?
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .ok_or_else(|| {
            RpcError::invalid_params("`message.messageId` (1 to 256 characters) is required")
        })?
        .to_string();
    match message.get("role").and_then(Value::as_str) {
        Some("ROLE_USER" | "user") => {}
        other => {
            return Err(RpcError::invalid_params(format!(
                "`message.role` must be ROLE_USER (got {})",
                other.map_or("nothing".to_string(), |r| format!("`{r}`"))
            )));
        }
    }
    let Some(parts) = message
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
    else {
        return Err(RpcError::invalid_params(
            "`message.parts` must be a non-empty list",
        ));
    };
    let mut text = String::new();
    let mut files: Vec<FilePart> = Vec::new();
    let mut file_bytes = 0usize;
    for (i, part) in parts.iter().enumerate() {
        let piece =
            if let Some(t) = part.get("text").and_then(Value::as_str) {
                t.to_string()
            } else if let Some(data) = part.get("data") {
                // 0.3 nests the value: `{kind: "data", data: {…}}`; 1.0's `data` is the value.
                serde_json::to_string(data).map_err(RpcError::internal)?
            } else if let Some(file) = file_part(part, i)? {
                if files.len() == MAX_FILE_PARTS {
                    return Err(RpcError::invalid_params(format!(
                    "a message carries at most {MAX_FILE_PARTS} file parts (part {i} is one more)"
                ))
                .with_info("TOO_MANY_FILE_PARTS", &[("limit", MAX_FILE_PARTS.to_string())]));
                }
                if let FileContent::Bytes(bytes) = &file.content {
                    file_bytes += bytes.len();
                    if file_bytes > MAX_FILE_BYTES {
                        return Err(file_too_large(i, file_bytes));
                    }
                }
                files.push(file);
                continue;
            } else {
                return Err(RpcError::invalid_params(format!(
                    "part {i} has no `text`, `data`, `raw`, `url` or `file`"
                )));
            };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&piece);
        if text.len() > MAX_TEXT_BYTES {
            return Err(RpcError::invalid_params(format!(
                "the message's parts are over {MAX_TEXT_BYTES} bytes of text (the limit, at part {i})"
            )));
        }
    }
    let id = |k: &str| -> Result<Option<String>, RpcError> {
        Ok(field(message, k)?
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string))
    };
    let configuration = field(params, "configuration")?.cloned().unwrap_or_default();
    let flag = |k: &str| -> Result<Option<bool>, RpcError> {
        Ok(field(&configuration, k)?.and_then(Value::as_bool))
    };
    // 1.0 names it `taskPushNotificationConfig`; 0.3 (and early 1.0 drafts)
    // `pushNotificationConfig`.
    let push = match field(&configuration, "taskPushNotificationConfig")? {
        Some(v) => Some(v),
        None => field(&configuration, "pushNotificationConfig")?,
    };
    Ok(Incoming {
        message_id,
        text,
        context_id: id("contextId")?,
        task_id: id("taskId")?,
        files,
        accepted_output_modes: output_modes(&configuration)?,
        return_immediately: flag("returnImmediately")?.unwrap_or(false)
            || flag("blocking")? == Some(false),
        push: push.map(push_config).transpose()?,
    })
}

/// The file bytes one message may carry inline, all its file parts together: 512 KiB, so
/// that base64 (4/3) and the JSON around it stay within the 1 MiB request body and a message
/// over it is answered `-32602` saying so, not cut off at the body limit.
pub(crate) const MAX_FILE_BYTES: usize = 512 * 1024;
/// The most file parts in one message.
pub(crate) const MAX_FILE_PARTS: usize = 8;
/// The longest URL of a file reference taken.
const MAX_FILE_URL: usize = 2048;

/// ProtoJSON's `bytes`: standard base64, padded or not (a decoder takes both); the URL-safe
/// alphabet too, as ProtoJSON parsers do.
const BASE64_CONFIG: base64::engine::GeneralPurposeConfig =
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent);
pub(crate) const BASE64: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, BASE64_CONFIG);
const BASE64_URL: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(&base64::alphabet::URL_SAFE, BASE64_CONFIG);

/// A file a peer sent: its bytes, or a URL the hub does not fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilePart {
    /// The peer's `filename` (`file.name` in 0.3), as given: sanitized where it is written.
    pub name: Option<String>,
    /// `mediaType` (`file.mimeType` in 0.3), when it is a plain `type/subtype`.
    pub media_type: Option<String>,
    pub content: FileContent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileContent {
    Bytes(Vec<u8>),
    /// An `http`/`https` URL, passed to the agent as a reference only.
    Url(String),
}

fn file_too_large(part: usize, bytes: usize) -> RpcError {
    RpcError::invalid_params(format!(
        "the message's file parts hold {bytes} bytes or more (at part {part}); the limit is {MAX_FILE_BYTES} bytes of inline file content per message: send a larger file as a `url` reference"
    ))
    .with_info(
        "FILE_TOO_LARGE",
        &[
            ("limitBytes", MAX_FILE_BYTES.to_string()),
            ("part", part.to_string()),
        ],
    )
}

/// Part `i` as a file: 1.0's `{raw | url, mediaType?, filename?}` or 0.3's
/// `{kind: "file", file: {bytes | uri, mimeType?, name?}}`; `None` when it is not one.
fn file_part(part: &Value, i: usize) -> Result<Option<FilePart>, RpcError> {
    let (holder, bytes_key, url_key, type_key, name_key) =
        if let Some(f) = part.get("file").filter(|f| f.is_object()) {
            (f, "bytes", "uri", "mimeType", "name")
        } else if part.get("raw").is_some() || part.get("url").is_some() {
            (part, "raw", "url", "mediaType", "filename")
        } else {
            return Ok(None);
        };
    let text = |k: &str| -> Result<Option<&str>, RpcError> {
        match field(holder, k)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(RpcError::invalid_params(format!(
                "part {i}: `{k}` must be a string"
            ))),
        }
    };
    let content = match (text(bytes_key)?, text(url_key)?) {
        (Some(b64), None) => {
            // Refused before decoding when the encoded text alone is over the limit.
            if b64.len() / 4 * 3 > MAX_FILE_BYTES + 3 {
                return Err(file_too_large(i, b64.len() / 4 * 3));
            }
            let bytes = BASE64
                .decode(b64)
                .or_else(|_| BASE64_URL.decode(b64))
                .map_err(|e| {
                    RpcError::invalid_params(format!("part {i}: `{bytes_key}` is not base64 ({e})"))
                })?;
            FileContent::Bytes(bytes)
        }
        (None, Some(url)) => {
            let scheme_ok = url
                .split_once("://")
                .is_some_and(|(s, rest)| matches!(s, "http" | "https") && !rest.is_empty());
            if !scheme_ok
                || url.len() > MAX_FILE_URL
                || url.bytes().any(|b| b.is_ascii_control() || b == b' ')
            {
                return Err(RpcError::invalid_params(format!(
                    "part {i}: `{url_key}` must be an http or https URL of at most {MAX_FILE_URL} characters"
                )));
            }
            FileContent::Url(url.to_string())
        }
        (Some(_), Some(_)) => {
            return Err(RpcError::invalid_params(format!(
                "part {i} has both `{bytes_key}` and `{url_key}`: a file part is one or the other"
            )));
        }
        (None, None) => {
            return Err(RpcError::invalid_params(format!(
                "part {i} is a file without `{bytes_key}` or `{url_key}`"
            )));
        }
    };
    let media_type = text(type_key)?
        .filter(|t| is_media_type(t))
        .map(str::to_string);
    let name = text(name_key)?
        .filter(|n| !n.is_empty())
        .map(|n| n.chars().take(255).collect());
    Ok(Some(FilePart {
        name,
        media_type,
        content,
    }))
}

/// A file name as a URL path: each part percent-encoded but RFC 3986's unreserved
/// characters, the parts joined by `/`.
pub(crate) fn path_escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `type/subtype` (parameters allowed), printable ASCII, at most 255 bytes.
fn is_media_type(t: &str) -> bool {
    t.len() <= 255
        && t.split(';').next().is_some_and(|m| {
            m.trim().split_once('/').is_some_and(|(a, b)| {
                !a.is_empty() && !b.is_empty() && !a.contains(' ') && !b.contains(' ')
            })
        })
        && t.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

/// `configuration.acceptedOutputModes`: the media types the peer takes in the answer
/// (`None`: not said, anything goes).
fn output_modes(configuration: &Value) -> Result<Option<Vec<String>>, RpcError> {
    match field(configuration, "acceptedOutputModes")? {
        None => Ok(None),
        Some(Value::Array(modes)) => {
            let modes: Option<Vec<String>> = modes
                .iter()
                .map(|m| m.as_str().filter(|m| m.len() <= 255).map(str::to_string))
                .collect();
            match modes {
                Some(m) if m.is_empty() => Ok(None),
                Some(m) => Ok(Some(m)),
                None => Err(RpcError::invalid_params(
                    "`configuration.acceptedOutputModes` must be a list of media types",
                )),
            }
        }
        Some(_) => Err(RpcError::invalid_params(
            "`configuration.acceptedOutputModes` must be a list of media types",
        )),
    }
}

/// Whether a peer that takes `modes` takes a part of `media_type` (`*/*` and `type/*` match).
pub(crate) fn accepts(modes: Option<&[String]>, media_type: &str) -> bool {
    let Some(modes) = modes else {
        return true;
    };
    let base = |t: &str| {
        t.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let wanted = base(media_type);
    modes.iter().any(|m| {
        let m = base(m);
        m == "*/*"
            || m == wanted
            || m.strip_suffix("/*")
                .is_some_and(|top| wanted.split('/').next() == Some(top))
    })
}

/// The longest push config id, token, scheme or credentials taken.
const MAX_PUSH_FIELD: usize = 4096;

/// A push notification config as a peer gives it (`TaskPushNotificationConfig`): the URL is
/// not checked here (`push::check` does, against the SSRF rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PushConfigInput {
    pub id: Option<String>,
    pub task_id: Option<String>,
    pub url: String,
    pub token: Option<String>,
    /// `authentication`: (scheme, credentials).
    pub auth: Option<(String, String)>,
}

/// A `TaskPushNotificationConfig` (CreateTaskPushNotificationConfig's params, or
/// SendMessage's `configuration.taskPushNotificationConfig`), in either spelling.
pub(crate) fn push_config(value: &Value) -> Result<PushConfigInput, RpcError> {
    // Earlier shapes nest the config (`{taskId, pushNotificationConfig: {url, …}}`; 1.0
    // drafts: `config`): read it from there, the task id from the outside.
    if value.get("url").is_none()
        && let Some(inner) = [
            "pushNotificationConfig",
            "push_notification_config",
            "config",
        ]
        .iter()
        .find_map(|k| value.get(*k).filter(|v| v.is_object()))
    {
        let mut config = push_config(inner)?;
        if config.task_id.is_none() {
            config.task_id = field(value, "taskId")?
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        return Ok(config);
    }
    if !value.is_object() {
        return Err(RpcError::invalid_params(
            "a push notification config must be an object: {url, token?, authentication?: {scheme, credentials}}",
        ));
    }
    // A header value: visible ASCII and spaces, so it can go in a request as given.
    let text = |object: &Value, k: &str| -> Result<Option<String>, RpcError> {
        match field(object, k)? {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s))
                if s.len() <= MAX_PUSH_FIELD
                    && s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) =>
            {
                Ok(Some(s.clone()))
            }
            Some(_) => Err(RpcError::invalid_params(format!(
                "push config `{k}` must be a string of at most {MAX_PUSH_FIELD} printable ASCII characters"
            ))),
        }
    };
    let url = text(value, "url")?.ok_or_else(|| {
        RpcError::invalid_params(
            "a push notification config needs `url`: the webhook to POST the task's updates to",
        )
    })?;
    let auth = match field(value, "authentication")? {
        None => None,
        Some(a) if a.is_object() => {
            let scheme = match text(a, "scheme")? {
                Some(s) => s,
                // 0.3: `schemes: ["Bearer"]`.
                None => a
                    .get("schemes")
                    .and_then(Value::as_array)
                    .and_then(|l| l.first())
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| {
                        RpcError::invalid_params(
                            "push config `authentication.scheme` is required (e.g. `Bearer`)",
                        )
                    })?,
            };
            if !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                return Err(RpcError::invalid_params(format!(
                    "push config `authentication.scheme` `{scheme}` is not an HTTP authentication scheme (a token such as `Bearer` or `Basic`)"
                )));
            }
            Some((scheme, text(a, "credentials")?.unwrap_or_default()))
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                "push config `authentication` must be an object: {scheme, credentials}",
            ));
        }
    };
    let id = text(value, "id")?;
    if let Some(id) = &id
        && (id.len() > 256 || id.contains('/'))
    {
        return Err(RpcError::invalid_params(
            "push config `id` must be at most 256 characters, without `/`",
        ));
    }
    Ok(PushConfigInput {
        id,
        task_id: text(value, "taskId")?,
        url,
        token: text(value, "token")?,
        auth,
    })
}

/// `{taskId, id}` of GetTaskPushNotificationConfig and DeleteTaskPushNotificationConfig.
pub(crate) fn push_config_ref(params: &Value) -> Result<(String, String), RpcError> {
    let text = |k: &str| -> Result<String, RpcError> {
        field(params, k)?
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| RpcError::invalid_params(format!("`{k}` is required")))
    };
    Ok((text("taskId")?, text("id")?))
}

/// `taskId` of ListTaskPushNotificationConfigs (and of a config being created).
pub(crate) fn push_task_id(params: &Value) -> Result<String, RpcError> {
    field(params, "taskId")?
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| RpcError::invalid_params("`taskId` is required"))
}

/// A stored push config as the peer reads it back: everything but the credentials (a secret
/// it gave; the scheme says there are some).
pub(crate) fn push_config_doc(config: &PushRecord) -> Value {
    let mut doc = json!({
        "id": config.config_id,
        "taskId": config.task_id,
        "url": config.url,
    });
    if let Some(token) = &config.token {
        doc["token"] = token.as_str().into();
    }
    if let Some((scheme, _)) = &config.auth {
        doc["authentication"] = json!({"scheme": scheme});
    }
    doc
}

/// The params of 0.3's `tasks/pushNotificationConfig/{get,list,delete}` (`{id: <the task>,
/// pushNotificationConfigId?}`) in 1.0's shape (`{taskId, id}`); `set`'s nested
/// `{taskId, pushNotificationConfig}` is read as it is ([`push_config`]).
pub(crate) fn push_params_v03(params: &Value) -> Result<Value, RpcError> {
    let text = |k: &str| -> Result<Option<Value>, RpcError> {
        Ok(field(params, k)?
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned())
    };
    let mut v1 = serde_json::Map::new();
    if let Some(task) = text("id")? {
        v1.insert("taskId".into(), task);
    }
    if let Some(config) = text("pushNotificationConfigId")? {
        v1.insert("id".into(), config);
    }
    Ok(Value::Object(v1))
}

impl Wire {
    /// A stored push config as the peer reads it back, in this version's shape: 1.0's flat
    /// `TaskPushNotificationConfig`, or 0.3's `{taskId, pushNotificationConfig: {id, url,
    /// token?, authentication?: {schemes}}}` — never the credentials.
    pub(crate) fn push_config_doc(self, config: &PushRecord) -> Value {
        let doc = push_config_doc(config);
        match self {
            Wire::V1 => doc,
            Wire::V03 => {
                let mut inner = json!({"id": doc["id"], "url": doc["url"]});
                if let Some(token) = doc.get("token") {
                    inner["token"] = token.clone();
                }
                if let Some((scheme, _)) = &config.auth {
                    inner["authentication"] = json!({"schemes": [scheme]});
                }
                json!({"taskId": config.task_id, "pushNotificationConfig": inner})
            }
        }
    }

    /// ListTaskPushNotificationConfigs' result: 1.0's page, or 0.3's list of every config.
    pub(crate) fn push_config_list(self, configs: &[PushRecord], page: &PushPage) -> Value {
        match self {
            Wire::V1 => push_config_list(configs, page),
            Wire::V03 => {
                let mut sorted: Vec<&PushRecord> = configs.iter().collect();
                sorted.sort_by(|a, b| a.config_id.cmp(&b.config_id));
                Value::Array(
                    sorted
                        .into_iter()
                        .map(|c| self.push_config_doc(c))
                        .collect(),
                )
            }
        }
    }
}

/// Which page of a task's push configs ListTaskPushNotificationConfigs asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PushPage {
    /// `pageSize`, 1–100; unset (or 0, proto3's unset): every config after the token.
    pub page_size: Option<usize>,
    /// `pageToken`: the last config id of the page before.
    pub page_token: Option<String>,
}

/// ListTaskPushNotificationConfigs' page parameters.
pub(crate) fn push_page(params: &Value) -> Result<PushPage, RpcError> {
    let page_size = match field(params, "pageSize")? {
        None => None,
        Some(v) => match v.as_u64() {
            Some(0) => None,
            Some(n @ 1..=100) => Some(n as usize),
            _ => {
                return Err(RpcError::invalid_params(
                    "`pageSize` must be an integer from 1 to 100",
                ));
            }
        },
    };
    let page_token = field(params, "pageToken")?
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Ok(PushPage {
        page_size,
        page_token,
    })
}

/// ListTaskPushNotificationConfigs' result: the task's configs in the order of their ids, those
/// after `pageToken`, at most `pageSize`; `nextPageToken` the page's last id when more follow
/// (a config deleted between pages moves no other from its page).
pub(crate) fn push_config_list(configs: &[PushRecord], page: &PushPage) -> Value {
    let mut after: Vec<&PushRecord> = configs
        .iter()
        .filter(|c| {
            page.page_token
                .as_deref()
                .is_none_or(|t| c.config_id.as_str() > t)
        })
        .collect();
    after.sort_by(|a, b| a.config_id.cmp(&b.config_id));
    let size = page.page_size.unwrap_or(after.len());
    let more = after.len() > size;
    after.truncate(size);
    let next = match after.last() {
        Some(last) if more => last.config_id.as_str(),
        _ => "",
    };
    json!({
        "configs": after.into_iter().map(push_config_doc).collect::<Vec<_>>(),
        "nextPageToken": next,
    })
}

/// ListTasks' params (`pageSize`, `status`, `pageToken`, `contextId`, `historyLength`,
/// `includeArtifacts`).
pub(crate) fn list_query(params: &Value) -> Result<ListQuery, RpcError> {
    let text = |k: &str| -> Result<Option<&str>, RpcError> {
        Ok(field(params, k)?
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty()))
    };
    let page_size = match field(params, "pageSize")? {
        None => 50,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=100) => n as usize,
            _ => {
                return Err(RpcError::invalid_params(
                    "`pageSize` must be an integer from 1 to 100",
                ));
            }
        },
    };
    let state = match text("status")? {
        None | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(state::parse(s).ok_or_else(|| {
            RpcError::invalid_params(format!("`status` `{s}` is not a task state (TASK_STATE_…)"))
        })?),
    };
    let before = match text("pageToken")? {
        None => None,
        Some(t) => Some(
            t.split_once('.')
                .and_then(|(us, id)| Some((us.parse::<i64>().ok()?, id.to_string())))
                .ok_or_else(|| {
                    RpcError::invalid_params("`pageToken` is not one this server gave")
                })?,
        ),
    };
    Ok(ListQuery {
        page_size,
        state,
        context_id: text("contextId")?.map(str::to_string),
        before,
        history: history_length(params)?,
        artifacts: field(params, "includeArtifacts")?
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// ListTasks' result: the page's tasks (in 1.0's shape), with `history` of their latest
/// messages each (`None`: none).
pub(crate) fn task_page(page: &TaskPage, history: Option<usize>, artifacts: bool) -> Value {
    let tasks: Vec<Value> = page
        .tasks
        .iter()
        .map(|(task, runs)| Wire::V1.task(task, runs, history.or(Some(0)), artifacts))
        .collect();
    json!({
        "tasks": tasks,
        "nextPageToken": page.next_page_token,
        "pageSize": page.page_size,
        "totalSize": page.total_size,
    })
}

// ---- Agent Cards -------------------------------------------------------------------------

/// An exposed agent's Agent Card (A2A 1.0 shape).
pub(crate) fn agent_card(agent: &Exposed, base: &str) -> Value {
    card(
        &agent.name,
        &agent.description,
        &format!("{base}/a2a/{}/", agent.id),
        &format!("{base}/a2a-rest/agents/{}", agent.id),
        Some(&agent.id),
        base,
        vec![skill(agent)],
    )
}

/// The URI of the extension an extended card names a peer's limits under.
pub(crate) const PEER_LIMITS_EXTENSION: &str = "https://deepcli.dev/a2a/extensions/peer-limits/v1";

/// The authenticated extended card (GetExtendedAgentCard): the public card of the endpoint
/// (`agent`'s, or the hub's when `None`) with only the skills `peer` may reach, and its limits
/// as an extension's params.
pub(crate) fn extended_card(
    agent: Option<&Exposed>,
    exposed: &[Exposed],
    peer: &Peer,
    max_push_configs: usize,
    base: &str,
) -> Value {
    let mut doc = match agent {
        Some(agent) => agent_card(agent, base),
        None => {
            let reachable: Vec<Exposed> = exposed
                .iter()
                .filter(|e| peer.allow.as_ref().is_none_or(|a| a.contains(&e.id)))
                .cloned()
                .collect();
            hub_card_of(&reachable, base)
        }
    };
    doc["capabilities"]["extensions"] = json!([{
        "uri": PEER_LIMITS_EXTENSION,
        "description": format!("What peer `{}` may do here: the agents it may reach, its requests per minute, the streams it may hold open, the push notification configs it may hold on unfinished tasks.", peer.name),
        "required": false,
        "params": {
            "peer": peer.name,
            "agents": doc["skills"].as_array().map(|s| s.iter().map(|k| k["id"].clone()).collect::<Vec<_>>()).unwrap_or_default(),
            "requestsPerMinute": peer.per_minute,
            "maxStreams": peer.max_streams,
            "maxPushConfigs": max_push_configs,
        },
    }]);
    doc
}

/// The hub's card: its endpoint `/a2a/` routes each peer by bindings.yaml, to one of the
/// exposed agents (its skills).
pub(crate) fn hub_card_of(exposed: &[Exposed], base: &str) -> Value {
    card(
        "deepcli hub",
        "This hub's agents. Each peer is answered by the agent the hub's bindings route it to (channel `a2a`); an agent's own card is at /a2a/<agentId>/.",
        &format!("{base}/a2a/"),
        &format!("{base}/a2a-rest"),
        None,
        base,
        exposed.iter().map(skill).collect(),
    )
}

fn skill(agent: &Exposed) -> Value {
    json!({
        "id": agent.id,
        "name": agent.name,
        "description": agent.when_to_use.as_deref().unwrap_or(&agent.description),
        "tags": ["deepcli"],
    })
}

/// A card: `url` is its JSON-RPC endpoint, `rest` the base of its HTTP+JSON one; its gRPC
/// service is at `base` (the listener), for the agent `tenant` names (none: the hub's endpoint,
/// routed).
fn card(
    name: &str,
    description: &str,
    url: &str,
    rest: &str,
    tenant: Option<&str>,
    base: &str,
    skills: Vec<Value>,
) -> Value {
    let mut grpc = json!({"url": base, "protocolBinding": "GRPC", "protocolVersion": "1.0"});
    if let Some(tenant) = tenant {
        grpc["tenant"] = tenant.into();
    }
    json!({
        "name": name,
        "description": description,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": rest, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            grpc,
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "provider": {"organization": "deepcli", "url": base},
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {"streaming": true, "pushNotifications": true, "extendedAgentCard": true},
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "The token channels.yaml `a2a.peers.<name>.token` names for the calling peer.",
            }},
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        // Text, data, and files of any type (a2a.md, "Files").
        "defaultInputModes": ["text/plain", "application/json", "*/*"],
        "defaultOutputModes": ["text/plain", "*/*"],
        "skills": skills,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ListTaskPushNotificationConfigs pages by `pageSize` and `pageToken` in the order of the
    /// configs' ids, in both spellings; unset (or gRPC's 0) is every config.
    #[test]
    fn push_configs_are_listed_in_pages() {
        let config = |id: &str| PushRecord {
            task_id: "t".into(),
            config_id: id.into(),
            peer: "p".into(),
            url: "https://h/hook".into(),
            token: None,
            auth: Some(("Bearer".into(), "secret".into())),
            created_at: String::new(),
        };
        let configs = [config("c"), config("a"), config("b")];
        let page = |params: Value| push_config_list(&configs, &push_page(&params).unwrap());
        let ids = |doc: &Value| -> Vec<String> {
            doc["configs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_string())
                .collect()
        };
        for all in [json!({}), json!({"pageSize": 0})] {
            let doc = page(all);
            assert_eq!(ids(&doc), ["a", "b", "c"]);
            assert_eq!(doc["nextPageToken"], "");
        }
        let first = page(json!({"pageSize": 2}));
        assert_eq!(ids(&first), ["a", "b"]);
        assert_eq!(first["nextPageToken"], "b");
        assert!(first["configs"][0].get("authentication").is_some());
        assert!(!first.to_string().contains("secret"), "{first}");
        let second = page(json!({"page_size": 2, "page_token": "b"}));
        assert_eq!(ids(&second), ["c"]);
        assert_eq!(second["nextPageToken"], "");
        for bad in [json!({"pageSize": 101}), json!({"pageSize": "x"})] {
            assert_eq!(push_page(&bad).unwrap_err().code, -32602);
        }
    }

    #[test]
    fn an_input_required_line_ends_the_reply() {
        assert_eq!(
            asks_back("Which city?\nINPUT_REQUIRED\n"),
            ("Which city?".into(), true)
        );
        assert_eq!(asks_back("INPUT_REQUIRED"), (String::new(), true));
        assert_eq!(
            asks_back("say INPUT_REQUIRED"),
            ("say INPUT_REQUIRED".into(), false)
        );
        assert_eq!(
            asks_back("INPUT_REQUIRED\nthen more"),
            ("INPUT_REQUIRED\nthen more".into(), false)
        );
    }

    #[test]
    fn list_params_read_into_a_query() {
        assert_eq!(
            list_query(&json!({})).unwrap(),
            ListQuery {
                page_size: 50,
                state: None,
                context_id: None,
                before: None,
                history: None,
                artifacts: false,
            }
        );
        let all = json!({"pageSize": 3, "status": "input-required", "pageToken": "17.t-1",
            "contextId": "c", "historyLength": 2, "includeArtifacts": true});
        assert_eq!(
            list_query(&all).unwrap(),
            ListQuery {
                page_size: 3,
                state: Some(state::INPUT_REQUIRED),
                context_id: Some("c".into()),
                before: Some((17, "t-1".into())),
                history: Some(2),
                artifacts: true,
            }
        );
        // ProtoJSON's other spelling reads the same (issue 38: `context_id` was ignored, and a
        // peer listing its context got every task).
        let snake = json!({"page_size": 3, "status": "input-required", "page_token": "17.t-1",
            "context_id": "c", "history_length": 2, "include_artifacts": true});
        assert_eq!(list_query(&snake).unwrap(), list_query(&all).unwrap());
        for bad in [
            json!({"pageSize": 0}),
            json!({"pageSize": 101}),
            json!({"status": "cancelled"}),
            json!({"pageToken": "x"}),
            json!({"historyLength": -1}),
            json!({"contextId": "a", "context_id": "b"}),
        ] {
            assert_eq!(list_query(&bad).unwrap_err().code, -32602, "{bad}");
        }
    }

    #[test]
    fn a_push_config_reads_in_its_shapes_and_refuses_what_cannot_be_sent() {
        let flat = json!({"taskId": "t1", "id": "c1", "url": "https://h.example/x", "token": "tk",
            "authentication": {"scheme": "Bearer", "credentials": "s3"}});
        let want = PushConfigInput {
            id: Some("c1".into()),
            task_id: Some("t1".into()),
            url: "https://h.example/x".into(),
            token: Some("tk".into()),
            auth: Some(("Bearer".into(), "s3".into())),
        };
        assert_eq!(push_config(&flat).unwrap(), want);
        let nested = json!({"taskId": "t1", "pushNotificationConfig": {"id": "c1",
            "url": "https://h.example/x", "token": "tk",
            "authentication": {"schemes": ["Bearer"], "credentials": "s3"}}});
        assert_eq!(push_config(&nested).unwrap(), want);
        for bad in [
            json!({}),
            json!({"url": 7}),
            json!({"url": "https://h.example/x", "token": "a\r\nX-Injected: 1"}),
            json!({"url": "https://h.example/x", "authentication": {"scheme": "Bear er"}}),
            json!({"url": "https://h.example/x", "authentication": "Bearer x"}),
            json!({"url": "https://h.example/x", "id": "a/b"}),
        ] {
            assert_eq!(push_config(&bad).unwrap_err().code, -32602, "{bad}");
        }
        // With a message, in 1.0's name or 0.3's.
        let msg = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]});
        for key in ["taskPushNotificationConfig", "pushNotificationConfig"] {
            let params =
                json!({"message": msg, "configuration": {key: {"url": "https://h.example/x"}}});
            assert_eq!(
                incoming(&params).unwrap().push.unwrap().url,
                "https://h.example/x"
            );
        }
    }

    #[test]
    fn file_parts_read_in_both_versions_within_the_limits() {
        let msg = |parts: Value| json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": parts}});
        // 1.0: raw bytes (padded or not), a URL; 0.3: file.bytes, file.uri.
        let got = incoming(&msg(json!([
            {"text": "see"},
            {"raw": "aGk=", "mediaType": "text/plain", "filename": "../a.txt"},
            {"raw": "aGk", "filename": "b"},
            {"url": "https://files.example/c.pdf", "mediaType": "application/pdf"},
            {"kind": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain", "name": "d.txt"}},
            {"kind": "file", "file": {"uri": "http://files.example/e"}},
        ])))
        .unwrap();
        assert_eq!(got.text, "see");
        let contents: Vec<_> = got.files.iter().map(|f| f.content.clone()).collect();
        assert_eq!(
            contents,
            [
                FileContent::Bytes(b"hi".to_vec()),
                FileContent::Bytes(b"hi".to_vec()),
                FileContent::Url("https://files.example/c.pdf".into()),
                FileContent::Bytes(b"hi".to_vec()),
                FileContent::Url("http://files.example/e".into()),
            ]
        );
        assert_eq!(got.files[0].name.as_deref(), Some("../a.txt"));
        assert_eq!(got.files[0].media_type.as_deref(), Some("text/plain"));
        assert_eq!(got.files[3].name.as_deref(), Some("d.txt"));
        // Over the inline limit: -32602 with deepcli's ErrorInfo.
        let big = BASE64.encode(vec![0u8; MAX_FILE_BYTES + 1]);
        let e = incoming(&msg(json!([{"raw": big}]))).unwrap_err();
        assert_eq!(
            (e.code, e.info.as_ref().map(|i| i.reason)),
            (-32602, Some("FILE_TOO_LARGE"))
        );
        let half = BASE64.encode(vec![0u8; MAX_FILE_BYTES / 2 + 1]);
        let e = incoming(&msg(json!([{"raw": half}, {"raw": half}]))).unwrap_err();
        assert_eq!(
            e.info.map(|i| i.reason),
            Some("FILE_TOO_LARGE"),
            "per message"
        );
        let many: Vec<Value> = (0..=MAX_FILE_PARTS)
            .map(|_| json!({"raw": "aGk="}))
            .collect();
        let e = incoming(&msg(Value::Array(many))).unwrap_err();
        assert_eq!(e.info.map(|i| i.reason), Some("TOO_MANY_FILE_PARTS"));
        for bad in [
            json!([{"raw": "not base64!"}]),
            json!([{"url": "file:///etc/passwd"}]),
            json!([{"url": "https://x.example/a b"}]),
            json!([{"raw": "aGk=", "url": "https://x.example/"}]),
            json!([{"kind": "file", "file": {}}]),
        ] {
            assert_eq!(
                incoming(&msg(bad.clone())).unwrap_err().code,
                -32602,
                "{bad}"
            );
        }
    }

    #[test]
    fn handed_files_are_parts_of_each_version_inline_by_url_or_said_in_text() {
        let file = |run: &str, name: &str, bytes: Option<&[u8]>| OutFile {
            file: crate::hub::a2a::RunFile {
                run_id: run.into(),
                name: name.into(),
                sha256: "ab".into(),
                size: 2,
                media_type: "application/octet-stream".into(),
                bytes: bytes.map(<[u8]>::to_vec),
            },
            url: format!("http://h/a2a-rest/tasks/t1/artifacts/{run}/{name}"),
        };
        let mut task = TaskRecord {
            task_id: "t1".into(),
            peer: "p".into(),
            agent_id: "a".into(),
            context_id: "c".into(),
            session_key: "k".into(),
            state: state::COMPLETED.into(),
            created_at: String::new(),
            updated_us: 0,
            runs: Vec::new(),
            output_modes: None,
            files: vec![
                file("r1", "a.bin", Some(b"hi")),
                file("r1", "big.bin", None),
                // A later hand-in under the same name replaces the first.
                file("r2", "a.bin", Some(b"yo")),
            ],
        };
        let parts = |wire: Wire, task: &TaskRecord, run: Option<&str>| -> Vec<Value> {
            wire.file_artifacts(task, run)
                .into_iter()
                .map(|a| a["parts"][0].clone())
                .collect()
        };
        assert_eq!(
            parts(Wire::V1, &task, None),
            [
                json!({"url": "http://h/a2a-rest/tasks/t1/artifacts/r1/big.bin", "mediaType": "application/octet-stream", "filename": "big.bin"}),
                json!({"raw": "eW8=", "mediaType": "application/octet-stream", "filename": "a.bin"}),
            ]
        );
        assert_eq!(
            parts(Wire::V03, &task, Some("r1"))[0],
            json!({"kind": "file", "file": {"bytes": "aGk=", "mimeType": "application/octet-stream", "name": "a.bin"}})
        );
        task.output_modes = Some(vec!["text/plain".into()]);
        for part in parts(Wire::V1, &task, None) {
            let text = part["text"].as_str().unwrap_or_else(|| panic!("{part}"));
            assert!(text.contains("not sent"), "{text}");
        }
    }

    #[test]
    fn output_modes_match_by_type_and_wildcard() {
        let modes = |m: &[&str]| Some(m.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(accepts(None, "image/png"));
        assert!(accepts(modes(&["*/*"]).as_deref(), "image/png"));
        assert!(accepts(modes(&["image/*"]).as_deref(), "image/png"));
        assert!(accepts(
            modes(&["text/plain"]).as_deref(),
            "text/plain; charset=utf-8"
        ));
        assert!(!accepts(
            modes(&["text/plain"]).as_deref(),
            "application/octet-stream"
        ));
        assert_eq!(path_escape("out/a b#.txt"), "out/a%20b%23.txt");
    }

    #[test]
    fn states_read_in_both_spellings() {
        assert_eq!(Wire::V03.state(state::INPUT_REQUIRED), "input-required");
        assert_eq!(state::parse("input-required"), Some(state::INPUT_REQUIRED));
        assert_eq!(state::parse("TASK_STATE_CANCELED"), Some(state::CANCELED));
        assert_eq!(state::parse("cancelled"), None);
    }

    #[test]
    fn a_message_and_its_configuration_read_in_both_spellings() {
        let part = json!([{"text": "hi"}]);
        let camel = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": part,
            "contextId": "c1", "taskId": "t1"}, "configuration": {"returnImmediately": true, "historyLength": 1}});
        let snake = json!({"message": {"message_id": "m1", "role": "ROLE_USER", "parts": part,
            "context_id": "c1", "task_id": "t1"}, "configuration": {"return_immediately": true, "history_length": 1}});
        for params in [&camel, &snake] {
            let incoming = incoming(params).unwrap();
            assert_eq!(
                (
                    incoming.message_id.as_str(),
                    incoming.context_id.as_deref(),
                    incoming.task_id.as_deref(),
                    incoming.return_immediately
                ),
                ("m1", Some("c1"), Some("t1"), true),
                "{params}"
            );
            assert_eq!(send_history(params).unwrap(), Some(1), "{params}");
        }
        assert_eq!(send_history(&json!({})).unwrap(), None);
    }
}
