//! The `deepcli` MCP server (hub.md, "How an agent reaches the Hub"), on the official `rmcp`
//! crate: [`HttpServer`] answers MCP streamable HTTP at `/mcp` inside the controller (the caller
//! is the session whose bearer token the request carries, checked before rmcp sees it);
//! [`StdioServer`] is `deepcli hub mcp`, a small process an agent starts that speaks MCP on
//! stdio and forwards `tools/list` and `tools/call` to the controller over loopback HTTP with
//! the session token from its environment. The tools and their answers are the Hub's, the same
//! over both.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::tools::ToolCall;
use super::{CallError, Hub, HubCaller};

/// One tool call as MCP carries it: the tool's name and its JSON `arguments` in, its result in
/// OpenClaw's shape out (over `/mcp` and `/v1/hub/call` alike).
pub(super) async fn call(
    hub: &Arc<Hub>,
    caller: &HubCaller,
    tool: &str,
    args: Value,
) -> Result<Value, CallError> {
    let result = hub
        .call(caller, tool, || ToolCall::decode(tool, args))
        .await?;
    Ok(result.to_json())
}

fn info() -> ServerConfig {
    let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
    config.server_info = Implementation::new(super::SERVER_NAME, env!("CARGO_PKG_VERSION"));
    config.instructions = Some(
        "deepcli's Hub: work with the other agents of this hub. agents_list shows who you can reach; sessions_send messages a session and waits for its reply; sessions_spawn starts a child session on a task and announces its result to you; subagents lists, waits for and cancels your children; session_status describes your own session.".into(),
    );
    config
}

/// Tool definitions (JSON) as rmcp's `Tool`s.
fn as_tools(defs: Vec<Value>) -> Result<ListToolsResult, ErrorData> {
    let tools: Vec<Tool> = defs
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()
        .map_err(|e| ErrorData::internal_error(format!("tool definitions: {e}"), None))?;
    Ok(ListToolsResult::with_all_items(tools))
}

/// A call's outcome as MCP: a result (an `isError` one for bad arguments, so the model can
/// correct itself), or a JSON-RPC error for an unknown tool.
fn as_response(outcome: Result<Value, CallError>) -> Result<CallToolResponse, ErrorData> {
    match outcome {
        Ok(result) => Ok(CallToolResult::structured(result).into()),
        Err(e @ CallError::BadArguments(_)) => Ok(CallToolResult::structured_error(
            json!({"status": "error", "error": e.to_string()}),
        )
        .into()),
        Err(e @ CallError::UnknownTool(_)) => Err(ErrorData::invalid_params(e.to_string(), None)),
        Err(e @ CallError::Internal(_)) => Err(ErrorData::internal_error(e.to_string(), None)),
    }
}

/// The `/mcp` server: one per request (stateless streamable HTTP).
#[derive(Clone)]
pub(crate) struct HttpServer {
    pub hub: Arc<Hub>,
}

/// The caller the `/mcp` route found from the bearer token.
fn caller_of(context: &RequestContext<RoleServer>) -> Result<HubCaller, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<HubCaller>().cloned())
        .ok_or_else(|| ErrorData::invalid_request("no session token", None))
}

impl ServerHandler for HttpServer {
    fn get_info(&self) -> ServerConfig {
        info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller_of(&context)?;
        as_tools(self.hub.list_tools(&caller))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&context)?;
        let args = request.arguments.map_or(Value::Null, Value::Object);
        as_response(call(&self.hub, &caller, &request.name, args).await)
    }
}

/// `deepcli hub mcp`: MCP on stdio, forwarded to the controller.
#[derive(Clone)]
pub(crate) struct StdioServer {
    /// Where the controller is, as the messages name it: `HOST:PORT`, or the socket's path.
    at: String,
    /// `http://HOST:PORT`, or `http://localhost` over the socket.
    base: String,
    http: reqwest::Client,
    /// The session's token: exposed only in the `Authorization` header.
    token: secrecy::SecretString,
}

/// How long one forwarded call may take: a send may wait up to an hour for its reply.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(3700);

impl StdioServer {
    /// From the environment the controller gave it ([`super::URL_ENV`], [`super::TOKEN_ENV`]).
    pub(crate) fn from_env() -> Result<StdioServer, String> {
        let get = |name: &str| {
            std::env::var(name).map_err(|_| {
                format!("`{name}` is not set: `deepcli hub mcp` is started by an agent that deepcli gave it to, with the session's token")
            })
        };
        let url = get(super::URL_ENV)?;
        let token: secrecy::SecretString = get(super::TOKEN_ENV)?.into();
        let client = crate::http_client::direct();
        // `unix:PATH`: the sandbox's socket to the controller (isolation.md).
        if let Some(path) = url.strip_prefix("unix:") {
            return Ok(StdioServer {
                at: path.to_string(),
                base: "http://localhost".into(),
                http: build(client.unix_socket(std::path::Path::new(path)))?,
                token,
            });
        }
        let authority = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{}` must be an http:// URL, not `{url}`", super::URL_ENV))?;
        if authority.is_empty() || authority.contains('/') {
            return Err(format!(
                "`{}` must be http://HOST:PORT, not `{url}`",
                super::URL_ENV
            ));
        }
        Ok(StdioServer {
            at: authority.to_string(),
            base: format!("http://{authority}"),
            http: build(client)?,
            token,
        })
    }

    /// `POST path` to the controller with the session token; the JSON answer.
    async fn post(&self, path: &str, body: Value) -> Result<Value, ErrorData> {
        let failed = |what: String| ErrorData::internal_error(what, None);
        let failed_with = |e: reqwest::Error| match crate::http_client::io_cause(&e) {
            Some(io) if e.is_connect() => failed(format!(
                "cannot reach the deepcli controller at {}: {io}",
                self.at
            )),
            _ if e.is_timeout() => failed("the controller did not answer in time".into()),
            _ => failed(e.to_string()),
        };
        let answer = async {
            let response = self
                .http
                .post(format!("{}{path}", self.base))
                .bearer_auth(secrecy::ExposeSecret::expose_secret(&self.token))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .send()
                .await
                .map_err(failed_with)?;
            let status = response.status();
            let body = response.bytes().await.map_err(failed_with)?;
            Ok::<_, ErrorData>((status, body))
        };
        let (status, body) = tokio::time::timeout(FORWARD_TIMEOUT, answer)
            .await
            .map_err(|_| failed("the controller did not answer in time".into()))??;
        let doc: Value = serde_json::from_slice(&body).unwrap_or_else(
            |_| json!({"error": {"kind": "internal", "message": String::from_utf8_lossy(&body)}}),
        );
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(ErrorData::invalid_request(
                "the session token was refused (revoked when its session closed, or not deepcli's)",
                None,
            ));
        }
        Ok(doc)
    }
}

/// The forwarder's HTTP client.
fn build(client: reqwest::ClientBuilder) -> Result<reqwest::Client, String> {
    client
        .build()
        .map_err(|e| format!("cannot build the HTTP client to the controller: {e}"))
}

impl ServerHandler for StdioServer {
    fn get_info(&self) -> ServerConfig {
        info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let doc = self.post("/v1/hub/tools", json!({})).await?;
        let tools = doc["tools"].as_array().cloned().unwrap_or_default();
        as_tools(tools)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let doc = self
            .post(
                "/v1/hub/call",
                json!({"name": request.name, "arguments": request.arguments}),
            )
            .await?;
        as_response(forwarded(doc))
    }
}

/// The controller's answer to `/v1/hub/call`, back as the call's outcome.
fn forwarded(doc: Value) -> Result<Value, CallError> {
    if let Some(result) = doc.get("result") {
        return Ok(result.clone());
    }
    let message = doc["error"]["message"].as_str().unwrap_or("").to_string();
    Err(match doc["error"]["kind"].as_str() {
        Some("unknown_tool") => CallError::UnknownTool(
            doc["error"]["tool"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ),
        Some("bad_arguments") => CallError::BadArguments(message),
        _ => CallError::Internal(message),
    })
}

/// The outcome of a call as `/v1/hub/call` answers it.
pub(crate) fn forward_body(tool: &str, outcome: Result<Value, CallError>) -> Value {
    match outcome {
        Ok(result) => json!({"result": result}),
        Err(e) => {
            let kind = match &e {
                CallError::UnknownTool(_) => "unknown_tool",
                CallError::BadArguments(_) => "bad_arguments",
                CallError::Internal(_) => "internal",
            };
            json!({"error": {"kind": kind, "message": e.to_string(), "tool": tool}})
        }
    }
}

/// Runs `deepcli hub mcp` until stdin closes.
pub(crate) async fn serve_stdio() -> Result<(), String> {
    use rmcp::ServiceExt;
    // Its token is in its environment: no other process of its user reads it from /proc
    // (isolation.md; a sandbox also hides it from every other agent's processes).
    let _ = nix::sys::prctl::set_dumpable(false);
    let server = StdioServer::from_env()?;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("MCP on stdio: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("MCP on stdio: {e}"))?;
    Ok(())
}
