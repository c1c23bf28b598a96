//! The operator JSON-RPC 2.0 dispatcher: `_mustang.agent/agents/*`,
//! `_mustang.agent/channels/*` and `_mustang.agent/pairing/*` (management.md, policy.md) over the same service functions as the CLI,
//! returning the same result shapes. Transport-free: the controller mounts [`handle`] at
//! `POST /rpc` behind the operator token.
//!
//! Standard error codes (parse error, invalid request, method not found, invalid params,
//! internal error) plus [`super::ManageError::rpc_code`] for refused calls; batches are
//! answered as arrays; notifications (no `id`) run and get no answer.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ManageContext, ManageError, agents, channels, pairing};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// The method prefix of management.md.
pub const PREFIX: &str = "_mustang.agent/";

/// Every method [`handle`] answers.
pub const METHODS: &[&str] = &[
    "_mustang.agent/agents/list",
    "_mustang.agent/agents/create",
    "_mustang.agent/agents/update",
    "_mustang.agent/agents/delete",
    "_mustang.agent/agents/set_identity",
    "_mustang.agent/agents/list_bindings",
    "_mustang.agent/agents/bind",
    "_mustang.agent/agents/unbind",
    "_mustang.agent/channels/list",
    "_mustang.agent/channels/status",
    "_mustang.agent/channels/capabilities",
    "_mustang.agent/channels/logs",
    "_mustang.agent/channels/add",
    "_mustang.agent/channels/remove",
    "_mustang.agent/channels/login",
    "_mustang.agent/channels/logout",
    "_mustang.agent/channels/resolve",
    "_mustang.agent/config/import_openclaw",
    "_mustang.agent/config/export_openclaw",
    "_mustang.agent/pairing/list",
    "_mustang.agent/pairing/approve",
    "_mustang.agent/pairing/revoke",
];

/// Handles one HTTP body: a request or a batch. `None` when nothing is to be sent back (only
/// notifications, or an all-notification batch).
pub fn handle(ctx: &ManageContext, body: &[u8]) -> Option<Value> {
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Some(error(
                Value::Null,
                PARSE_ERROR,
                &format!("parse error: {e}"),
                None,
            ));
        }
    };
    match parsed {
        Value::Array(items) if items.is_empty() => Some(error(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: an empty batch",
            None,
        )),
        Value::Array(items) => {
            let answers: Vec<Value> = items.iter().filter_map(|r| handle_one(ctx, r)).collect();
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        single => handle_one(ctx, &single),
    }
}

fn error(id: Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut err = json!({"code": code, "message": message});
    if let Some(data) = data {
        err["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err})
}

fn handle_one(ctx: &ManageContext, request: &Value) -> Option<Value> {
    let Value::Object(obj) = request else {
        return Some(error(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: not an object",
            None,
        ));
    };
    let id = obj.get("id").cloned();
    let valid_id = matches!(
        id,
        None | Some(Value::Null | Value::Number(_) | Value::String(_))
    );
    let reply_id = id.clone().filter(|_| valid_id).unwrap_or(Value::Null);
    if obj.get("jsonrpc") != Some(&json!("2.0")) || !valid_id {
        return Some(error(
            reply_id,
            INVALID_REQUEST,
            "invalid request: needs \"jsonrpc\": \"2.0\" and a string or number id",
            None,
        ));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str) else {
        return Some(error(
            reply_id,
            INVALID_REQUEST,
            "invalid request: no method",
            None,
        ));
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return id.map(|id| {
                error(
                    id,
                    INVALID_PARAMS,
                    "invalid params: params must be an object",
                    None,
                )
            });
        }
    };
    let outcome = call(ctx, method, params);
    // A notification runs but is not answered.
    let id = id?;
    Some(match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(Failure::MethodNotFound) => error(
            id,
            METHOD_NOT_FOUND,
            &format!("method not found: `{method}`"),
            Some(json!({"methods": METHODS})),
        ),
        Err(Failure::Params(message)) => error(
            id,
            INVALID_PARAMS,
            &format!("invalid params: {message}"),
            None,
        ),
        Err(Failure::Manage(e)) => error(id, e.rpc_code(), &e.to_string(), Some(e.data())),
    })
}

enum Failure {
    MethodNotFound,
    Params(String),
    Manage(ManageError),
}

impl From<ManageError> for Failure {
    fn from(e: ManageError) -> Failure {
        Failure::Manage(e)
    }
}

fn params<T: DeserializeOwned>(value: Value) -> Result<T, Failure> {
    serde_json::from_value(value).map_err(|e| Failure::Params(e.to_string()))
}

fn to_json<T: serde::Serialize>(value: T) -> Result<Value, Failure> {
    serde_json::to_value(value).map_err(|e| {
        Failure::Manage(ManageError::Io {
            context: "cannot serialize the result".into(),
            source: std::io::Error::other(e),
        })
    })
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListParams {
    #[serde(default)]
    bindings: bool,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AgentParams {
    agent_id: String,
    #[serde(default)]
    force: bool,
    #[serde(default)]
    dry_run: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BindingsParams {
    #[serde(default)]
    agent_id: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BindParams {
    agent_id: String,
    #[serde(default)]
    bind: Vec<String>,
    #[serde(default)]
    all: bool,
    #[serde(default)]
    dry_run: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StatusParams {
    #[serde(default)]
    probe: bool,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// `channels/login|logout`: the account, and how long the platform may take.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LoginParams {
    channel: String,
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResolveParams {
    channel: String,
    #[serde(default)]
    account: Option<String>,
    names: Vec<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// How long a call to a platform may take (login, logout, resolve), at most.
pub const PLATFORM_TIMEOUT_MS: u64 = 30_000;

fn platform_timeout(ms: Option<u64>) -> std::time::Duration {
    std::time::Duration::from_millis(ms.unwrap_or(15_000).min(PLATFORM_TIMEOUT_MS))
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChannelParams {
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    lines: Option<usize>,
}

/// The default and the bound of `channels status --probe`'s timeout.
pub const DEFAULT_PROBE_TIMEOUT_MS: u64 = 3000;
pub const MAX_PROBE_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_LOG_LINES: usize = 100;

fn call(ctx: &ManageContext, method: &str, p: Value) -> Result<Value, Failure> {
    let Some(name) = method.strip_prefix(PREFIX) else {
        return Err(Failure::MethodNotFound);
    };
    match name {
        "agents/list" => {
            let p: ListParams = params(p)?;
            to_json(agents::list(ctx, p.bindings)?)
        }
        "agents/create" => to_json(agents::add(ctx, &params(p)?)?),
        "agents/update" => to_json(agents::update(ctx, &params(p)?)?),
        "agents/delete" => {
            let p: AgentParams = params(p)?;
            if !p.force {
                return Err(Failure::Manage(ManageError::refused(
                    format!("deleting agent `{}` needs \"force\": true", p.agent_id),
                    "there is no one to confirm over RPC: pass \"force\": true",
                )));
            }
            to_json(agents::delete(ctx, &p.agent_id, p.dry_run)?)
        }
        "agents/set_identity" => to_json(agents::set_identity(ctx, &params(p)?)?),
        "agents/list_bindings" => {
            let p: BindingsParams = params(p)?;
            to_json(agents::bindings(ctx, p.agent_id.as_deref())?)
        }
        "agents/bind" => {
            let p: BindParams = params(p)?;
            let targets = agents::parse_binds(&p.bind)?;
            to_json(agents::bind(ctx, &p.agent_id, &targets, p.dry_run)?)
        }
        "agents/unbind" => {
            let p: BindParams = params(p)?;
            let targets = agents::parse_binds(&p.bind)?;
            to_json(agents::unbind(
                ctx,
                &p.agent_id,
                &targets,
                p.all,
                p.dry_run,
            )?)
        }
        "channels/list" => {
            let _: ListNone = params(p)?;
            to_json(channels::list(ctx)?)
        }
        "channels/status" => {
            let p: StatusParams = params(p)?;
            let ms = p
                .timeout_ms
                .unwrap_or(DEFAULT_PROBE_TIMEOUT_MS)
                .min(MAX_PROBE_TIMEOUT_MS);
            to_json(channels::status(
                ctx,
                p.probe,
                std::time::Duration::from_millis(ms),
            )?)
        }
        "channels/capabilities" => {
            let p: ChannelParams = params(p)?;
            to_json(channels::capabilities(p.channel.as_deref())?)
        }
        "channels/logs" => {
            let p: ChannelParams = params(p)?;
            to_json(channels::logs(
                ctx,
                p.channel.as_deref(),
                p.lines.unwrap_or(DEFAULT_LOG_LINES),
            )?)
        }
        "channels/add" => to_json(channels::add(ctx, &params(p)?)?),
        "channels/remove" => to_json(channels::remove(ctx, &params(p)?)?),
        "channels/login" | "channels/logout" => {
            let p: LoginParams = params(p)?;
            let request = channels::AccountRequest {
                channel: p.channel,
                account: p.account,
            };
            let timeout = platform_timeout(p.timeout_ms);
            if method.ends_with("login") {
                to_json(channels::login(ctx, &request, timeout)?)
            } else {
                to_json(channels::logout(ctx, &request, timeout)?)
            }
        }
        "channels/resolve" => {
            let p: ResolveParams = params(p)?;
            let timeout = platform_timeout(p.timeout_ms);
            to_json(channels::resolve(
                ctx,
                &channels::ResolveRequest {
                    channel: p.channel,
                    account: p.account,
                    names: p.names,
                    kind: p.kind,
                },
                timeout,
            )?)
        }
        "config/import_openclaw" => {
            let p: ImportOpenclawParams = params(p)?;
            let out = p
                .out
                .map_or_else(|| ctx.config_dir.clone(), std::path::PathBuf::from);
            to_json(super::openclaw::import_openclaw(
                &ctx.load,
                p.source.as_bytes(),
                "openclaw.json",
                &out,
                p.force,
            )?)
        }
        "config/export_openclaw" => {
            let p: ExportOpenclawParams = params(p)?;
            to_json(super::openclaw::export_openclaw(ctx, p.json5)?)
        }
        "pairing/list" => to_json(pairing::list(ctx, &params(p)?)?),
        "pairing/approve" => to_json(pairing::approve(ctx, &params(p)?)?),
        "pairing/revoke" => to_json(pairing::revoke(ctx, &params(p)?)?),
        _ => Err(Failure::MethodNotFound),
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListNone {}

/// `config/import_openclaw`: the text of an `openclaw.json`, and where the files go (the
/// config directory unless `out` names another).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ImportOpenclawParams {
    source: String,
    #[serde(default)]
    out: Option<String>,
    #[serde(default)]
    force: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExportOpenclawParams {
    #[serde(default)]
    json5: bool,
}
