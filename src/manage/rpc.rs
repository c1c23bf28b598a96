//! The management area of the operator JSON-RPC 2.0: `_mustang.agent/agents/*`,
//! `_mustang.agent/channels/*`, `_mustang.agent/config/*` and `_mustang.agent/pairing/*`
//! (management.md, policy.md) as a typed [`ManageRequest`] over the same service functions as
//! the CLI, returning the same result types ([`ManageResult`]). Transport-free; the framing
//! (batches, notifications, standard codes) is [`crate::rpc`]'s, and a [`ManageError`] becomes
//! a JSON-RPC error in [`rpc_error`]. The controller serves it at `POST /rpc` together with the
//! Hub's and the approvals' areas; [`handle`] answers a body of management calls only.

use serde::Serialize;
use serde_json::Value;

use super::{ManageContext, ManageError, agents, channel_policy, channels, openclaw, pairing};
use crate::rpc;

pub use crate::rpc::{
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, PREFIX,
};

/// Every method [`ManageRequest::parse`] knows.
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
    "_mustang.agent/channels/set",
    "_mustang.agent/channels/login",
    "_mustang.agent/channels/logout",
    "_mustang.agent/channels/resolve",
    "_mustang.agent/config/import_openclaw",
    "_mustang.agent/config/export_openclaw",
    "_mustang.agent/pairing/list",
    "_mustang.agent/pairing/approve",
    "_mustang.agent/pairing/revoke",
];

/// Handles one HTTP body of management calls: a request or a batch. `None` when nothing is to
/// be sent back (only notifications, or an all-notification batch).
pub fn handle(ctx: &ManageContext, body: &[u8]) -> Option<Value> {
    rpc::handle(body, |call| answer(ctx, &call.method, call.params))
}

/// One management call (`method` with its prefix): the result, or the JSON-RPC error.
pub fn answer(ctx: &ManageContext, method: &str, params: Value) -> Result<Value, rpc::Error> {
    let request = ManageRequest::parse(method, params)?;
    let result = request.run(ctx).map_err(|e| rpc_error(&e))?;
    serde_json::to_value(result).map_err(rpc::Error::internal)
}

/// A [`ManageError`] as a JSON-RPC error: standard codes for bad params and internal errors,
/// the implementation-defined range (-32000…-32099) for the rest; `data` carries the hint, the
/// diagnostics of an invalid edit, the file that changed.
pub fn rpc_error(e: &ManageError) -> rpc::Error {
    let code = match e {
        ManageError::Usage { .. } => rpc::INVALID_PARAMS,
        ManageError::NotFound { .. } => -32001,
        ManageError::Refused { .. } => -32002,
        ManageError::Invalid { .. } => -32003,
        ManageError::Stale(_) => -32004,
        ManageError::Load(_)
        | ManageError::Edit { .. }
        | ManageError::Io { .. }
        | ManageError::State(_) => rpc::INTERNAL_ERROR,
    };
    rpc::Error::new(code, e.to_string()).with_data(error_data(e))
}

/// A [`ManageError`]'s structured details, for the JSON-RPC error's `data`: the hint, the
/// diagnostics of an invalid edit, the file that changed.
fn error_data(e: &ManageError) -> Value {
    let mut data = serde_json::json!({});
    if let Some(hint) = e.hint() {
        data["hint"] = hint.into();
    }
    match e {
        ManageError::Invalid { diagnostics, .. } => data["diagnostics"] = diagnostics.clone(),
        ManageError::Stale(path) => data["file"] = path.display().to_string().into(),
        _ => {}
    }
    data
}

/// A request's params that do not fit its method.
fn bad_params(e: serde_json::Error) -> rpc::Error {
    rpc::Error::new(rpc::INVALID_PARAMS, format!("invalid params: {e}"))
}

fn params<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, rpc::Error> {
    rpc::params(value).map_err(bad_params)
}

/// One management call, typed: the method and its params.
#[derive(Debug, Clone)]
pub enum ManageRequest {
    AgentsList(ListParams),
    AgentsCreate(agents::AddRequest),
    AgentsUpdate(agents::UpdateRequest),
    AgentsDelete(AgentParams),
    AgentsSetIdentity(agents::SetIdentityRequest),
    AgentsListBindings(BindingsParams),
    AgentsBind(BindParams),
    AgentsUnbind(BindParams),
    ChannelsList,
    ChannelsStatus(StatusParams),
    ChannelsCapabilities(ChannelParams),
    ChannelsLogs(ChannelParams),
    ChannelsAdd(channels::AddRequest),
    ChannelsRemove(channels::RemoveRequest),
    ChannelsSet(channel_policy::SetRequest),
    ChannelsLogin(LoginParams),
    ChannelsLogout(LoginParams),
    ChannelsResolve(ResolveParams),
    ImportOpenclaw(ImportOpenclawParams),
    ExportOpenclaw(ExportOpenclawParams),
    PairingList(pairing::ListRequest),
    PairingApprove(pairing::ApproveRequest),
    PairingRevoke(pairing::RevokeRequest),
}

impl ManageRequest {
    /// The request `method` (with its prefix) with `params` names; method not found (with
    /// [`METHODS`]) or invalid params otherwise.
    pub fn parse(method: &str, p: Value) -> Result<ManageRequest, rpc::Error> {
        let not_found = || rpc::Error::method_not_found(method, METHODS);
        let Some(name) = method.strip_prefix(PREFIX) else {
            return Err(not_found());
        };
        Ok(match name {
            "agents/list" => ManageRequest::AgentsList(params(p)?),
            "agents/create" => ManageRequest::AgentsCreate(params(p)?),
            "agents/update" => ManageRequest::AgentsUpdate(params(p)?),
            "agents/delete" => ManageRequest::AgentsDelete(params(p)?),
            "agents/set_identity" => ManageRequest::AgentsSetIdentity(params(p)?),
            "agents/list_bindings" => ManageRequest::AgentsListBindings(params(p)?),
            "agents/bind" => ManageRequest::AgentsBind(params(p)?),
            "agents/unbind" => ManageRequest::AgentsUnbind(params(p)?),
            "channels/list" => {
                let ListNone {} = params(p)?;
                ManageRequest::ChannelsList
            }
            "channels/status" => ManageRequest::ChannelsStatus(params(p)?),
            "channels/capabilities" => ManageRequest::ChannelsCapabilities(params(p)?),
            "channels/logs" => ManageRequest::ChannelsLogs(params(p)?),
            "channels/add" => ManageRequest::ChannelsAdd(params(p)?),
            "channels/remove" => ManageRequest::ChannelsRemove(params(p)?),
            "channels/set" => ManageRequest::ChannelsSet(params(p)?),
            "channels/login" => ManageRequest::ChannelsLogin(params(p)?),
            "channels/logout" => ManageRequest::ChannelsLogout(params(p)?),
            "channels/resolve" => ManageRequest::ChannelsResolve(params(p)?),
            "config/import_openclaw" => ManageRequest::ImportOpenclaw(params(p)?),
            "config/export_openclaw" => ManageRequest::ExportOpenclaw(params(p)?),
            "pairing/list" => ManageRequest::PairingList(params(p)?),
            "pairing/approve" => ManageRequest::PairingApprove(params(p)?),
            "pairing/revoke" => ManageRequest::PairingRevoke(params(p)?),
            _ => return Err(not_found()),
        })
    }

    /// Runs the request on the management service. Blocking.
    pub fn run(self, ctx: &ManageContext) -> Result<ManageResult, ManageError> {
        Ok(match self {
            ManageRequest::AgentsList(p) => {
                ManageResult::AgentsList(agents::list(ctx, p.bindings)?)
            }
            ManageRequest::AgentsCreate(p) => ManageResult::AgentsCreate(agents::add(ctx, &p)?),
            ManageRequest::AgentsUpdate(p) => ManageResult::AgentsUpdate(agents::update(ctx, &p)?),
            ManageRequest::AgentsDelete(p) => {
                if !p.force {
                    return Err(ManageError::refused(
                        format!("deleting agent `{}` needs \"force\": true", p.agent_id),
                        "there is no one to confirm over RPC: pass \"force\": true",
                    ));
                }
                ManageResult::AgentsDelete(agents::delete(ctx, &p.agent_id, p.dry_run)?)
            }
            ManageRequest::AgentsSetIdentity(p) => {
                ManageResult::AgentsSetIdentity(agents::set_identity(ctx, &p)?)
            }
            ManageRequest::AgentsListBindings(p) => {
                ManageResult::AgentsListBindings(agents::bindings(ctx, p.agent_id.as_deref())?)
            }
            ManageRequest::AgentsBind(p) => {
                let targets = agents::parse_binds(&p.bind)?;
                ManageResult::AgentsBind(agents::bind(ctx, &p.agent_id, &targets, p.dry_run)?)
            }
            ManageRequest::AgentsUnbind(p) => {
                let targets = agents::parse_binds(&p.bind)?;
                ManageResult::AgentsUnbind(agents::unbind(
                    ctx,
                    &p.agent_id,
                    &targets,
                    p.all,
                    p.dry_run,
                )?)
            }
            ManageRequest::ChannelsList => ManageResult::ChannelsList(channels::list(ctx)?),
            ManageRequest::ChannelsStatus(p) => {
                let ms = p
                    .timeout_ms
                    .unwrap_or(DEFAULT_PROBE_TIMEOUT_MS)
                    .min(MAX_PROBE_TIMEOUT_MS);
                ManageResult::ChannelsStatus(channels::status(
                    ctx,
                    p.probe,
                    std::time::Duration::from_millis(ms),
                )?)
            }
            ManageRequest::ChannelsCapabilities(p) => {
                ManageResult::ChannelsCapabilities(channels::capabilities(p.channel.as_deref())?)
            }
            ManageRequest::ChannelsLogs(p) => ManageResult::ChannelsLogs(channels::logs(
                ctx,
                p.channel.as_deref(),
                p.lines.unwrap_or(DEFAULT_LOG_LINES),
            )?),
            ManageRequest::ChannelsAdd(p) => ManageResult::ChannelsAdd(channels::add(ctx, &p)?),
            ManageRequest::ChannelsRemove(p) => {
                ManageResult::ChannelsRemove(channels::remove(ctx, &p)?)
            }
            ManageRequest::ChannelsSet(p) => {
                ManageResult::ChannelsSet(channel_policy::set(ctx, &p)?)
            }
            ManageRequest::ChannelsLogin(p) => {
                let timeout = platform_timeout(p.timeout_ms);
                ManageResult::ChannelsLogin(channels::login(ctx, &p.account_request(), timeout)?)
            }
            ManageRequest::ChannelsLogout(p) => {
                let timeout = platform_timeout(p.timeout_ms);
                ManageResult::ChannelsLogout(channels::logout(ctx, &p.account_request(), timeout)?)
            }
            ManageRequest::ChannelsResolve(p) => {
                let timeout = platform_timeout(p.timeout_ms);
                ManageResult::ChannelsResolve(channels::resolve(
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
            ManageRequest::ImportOpenclaw(p) => {
                let out = p
                    .out
                    .map_or_else(|| ctx.config_dir.clone(), std::path::PathBuf::from);
                ManageResult::ImportOpenclaw(openclaw::import_openclaw(
                    &ctx.load,
                    p.source.as_bytes(),
                    "openclaw.json",
                    &out,
                    p.force,
                )?)
            }
            ManageRequest::ExportOpenclaw(p) => {
                ManageResult::ExportOpenclaw(openclaw::export_openclaw(ctx, p.json5)?)
            }
            ManageRequest::PairingList(p) => ManageResult::PairingList(pairing::list(ctx, &p)?),
            ManageRequest::PairingApprove(p) => {
                ManageResult::PairingApprove(pairing::approve(ctx, &p)?)
            }
            ManageRequest::PairingRevoke(p) => {
                ManageResult::PairingRevoke(pairing::revoke(ctx, &p)?)
            }
        })
    }
}

/// A management call's result: the service's own result type, serialized as it is.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ManageResult {
    AgentsList(agents::ListResult),
    AgentsCreate(agents::AddResult),
    AgentsUpdate(agents::UpdateResult),
    AgentsDelete(agents::DeleteResult),
    AgentsSetIdentity(agents::SetIdentityResult),
    AgentsListBindings(agents::BindingsResult),
    AgentsBind(agents::BindResult),
    AgentsUnbind(agents::UnbindResult),
    ChannelsList(channels::ChannelsList),
    ChannelsStatus(channels::StatusResult),
    ChannelsCapabilities(channels::CapabilitiesResult),
    ChannelsLogs(channels::LogsResult),
    ChannelsAdd(channels::AddResult),
    ChannelsRemove(channels::RemoveResult),
    ChannelsSet(channel_policy::SetResult),
    ChannelsLogin(channels::LoginResult),
    ChannelsLogout(channels::LogoutResult),
    ChannelsResolve(channels::ResolveResult),
    ImportOpenclaw(openclaw::ImportResult),
    ExportOpenclaw(openclaw::ExportResult),
    PairingList(pairing::PairingList),
    PairingApprove(pairing::Approved),
    PairingRevoke(pairing::Revoked),
}

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    pub bindings: bool,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentParams {
    pub agent_id: String,
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindingsParams {
    #[serde(default)]
    pub agent_id: Option<String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindParams {
    pub agent_id: String,
    #[serde(default)]
    pub bind: Vec<String>,
    #[serde(default)]
    pub all: bool,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusParams {
    #[serde(default)]
    pub probe: bool,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `channels/login|logout`: the account, and how long the platform may take.
#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoginParams {
    pub channel: String,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveParams {
    pub channel: String,
    #[serde(default)]
    pub account: Option<String>,
    pub names: Vec<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// How long a call to a platform may take (login, logout, resolve), at most.
pub const PLATFORM_TIMEOUT_MS: u64 = 30_000;

fn platform_timeout(ms: Option<u64>) -> std::time::Duration {
    std::time::Duration::from_millis(ms.unwrap_or(15_000).min(PLATFORM_TIMEOUT_MS))
}

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelParams {
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub lines: Option<usize>,
}

/// The default and the bound of `channels status --probe`'s timeout.
pub const DEFAULT_PROBE_TIMEOUT_MS: u64 = 3000;
pub const MAX_PROBE_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_LOG_LINES: usize = 100;

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListNone {}

/// `config/import_openclaw`: the text of an `openclaw.json`, and where the files go (the
/// config directory unless `out` names another).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportOpenclawParams {
    pub source: String,
    #[serde(default)]
    pub out: Option<String>,
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportOpenclawParams {
    #[serde(default)]
    pub json5: bool,
}

impl LoginParams {
    fn account_request(&self) -> channels::AccountRequest {
        channels::AccountRequest {
            channel: self.channel.clone(),
            account: self.account.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_method_parses_to_a_request() {
        for method in METHODS {
            let params = match *method {
                "_mustang.agent/agents/create" => json!({"name": "x"}),
                "_mustang.agent/agents/update" | "_mustang.agent/agents/set_identity" => {
                    json!({"agentId": "x"})
                }
                "_mustang.agent/agents/delete"
                | "_mustang.agent/agents/bind"
                | "_mustang.agent/agents/unbind" => json!({"agentId": "x"}),
                "_mustang.agent/channels/login"
                | "_mustang.agent/channels/logout"
                | "_mustang.agent/channels/add"
                | "_mustang.agent/channels/remove" => json!({"channel": "x"}),
                "_mustang.agent/channels/set" => json!({"channel": "x", "key": "dmPolicy"}),
                "_mustang.agent/channels/resolve" => json!({"channel": "x", "names": []}),
                "_mustang.agent/config/import_openclaw" => json!({"source": "{}"}),
                "_mustang.agent/pairing/approve" => json!({"channel": "x", "code": "c"}),
                "_mustang.agent/pairing/revoke" => json!({"channel": "x", "senderId": "s"}),
                _ => json!({}),
            };
            if let Err(e) = ManageRequest::parse(method, params) {
                assert_ne!(e.code, rpc::METHOD_NOT_FOUND, "{method}: {e:?}");
            }
        }
    }

    #[test]
    fn an_unknown_method_or_wrong_params_are_told_apart() {
        let e = ManageRequest::parse("_mustang.agent/agents/fly", json!({})).unwrap_err();
        assert_eq!(e.code, rpc::METHOD_NOT_FOUND);
        assert_eq!(e.data, Some(json!({"methods": METHODS})));
        let e =
            ManageRequest::parse("_mustang.agent/agents/bind", json!({"agent": "x"})).unwrap_err();
        assert_eq!(e.code, rpc::INVALID_PARAMS);
        assert!(e.message.starts_with("invalid params: "), "{e:?}");
    }
}
