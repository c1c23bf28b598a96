//! The Hub's HTTP routes, merged into the controller's server:
//!
//! * `/mcp` — MCP streamable HTTP (rmcp, stateless, JSON answers) for agents that take MCP
//!   over HTTP; `Authorization: Bearer <session token>`, checked here before rmcp sees the
//!   request (401 otherwise).
//! * `POST /v1/hub/tools`, `POST /v1/hub/call` — what `deepcli hub mcp` forwards to, with the
//!   same session token.
//! * `GET /v1/sessions`, `GET /v1/runs`, `GET /v1/runs/{id}`, `GET /v1/audit` — the
//!   operator's (operator token).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::mcp::HttpServer;
use super::operator::{HubRequest, OperatorError, RunParams, RunsParams, SessionsParams};
use super::{Hub, HubCaller};

/// The largest body `/mcp` and `/v1/hub/call` take: a 64 KiB message, JSON-escaped, fits.
pub(crate) const BODY_LIMIT: usize = 1024 * 1024;

#[derive(Clone)]
struct Ctx {
    hub: Arc<Hub>,
    /// A sandboxed agent's own door ([`agent_door`]): only this agent's tokens are taken.
    only_agent: Option<Arc<str>>,
}

fn unauthorized(message: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(json!({"error": message})),
    )
        .into_response()
}

const NO_TOKEN: &str = "no valid session token: the Hub takes `Authorization: Bearer <token>` with the token deepcli gave this session (a closed session's token is revoked)";

async fn session_caller(cx: &Ctx, headers: &HeaderMap) -> Option<HubCaller> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = super::token::from_bearer(value)?;
    let caller = cx.hub.caller(token).await?;
    match &cx.only_agent {
        Some(agent) if **agent != *caller.agent_id => None,
        _ => Some(caller),
    }
}

/// A request a web page made (it carries `Origin`): refused before anything else, whatever its
/// token (the MCP spec's MUST against DNS rebinding). The Hub's doors serve agents and
/// `deepcli hub mcp`, which send no `Origin`; a browser always does on a cross-origin POST.
fn from_a_page(headers: &HeaderMap) -> Option<Response> {
    let origin = headers.get(header::ORIGIN)?;
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    Some(
        (
            StatusCode::FORBIDDEN,
            Json(json!({"error": format!("a request from a web page (Origin `{origin}`) is refused: the Hub's doors serve agents, never pages")})),
        )
            .into_response(),
    )
}

/// Lets a `/mcp` request through only with a live session token and no `Origin`; the caller
/// rides along in the request's extensions (rmcp hands the handler the request's parts).
async fn mcp_auth(State(cx): State<Ctx>, mut request: Request, next: Next) -> Response {
    if let Some(refused) = from_a_page(request.headers()) {
        return refused;
    }
    match session_caller(&cx, request.headers()).await {
        Some(caller) => {
            request.extensions_mut().insert(caller);
            if request.method() == axum::http::Method::POST {
                request = match json_rpc_body(request).await {
                    Ok(request) => request,
                    Err(refused) => return refused,
                };
            }
            next.run(request).await
        }
        None => unauthorized(NO_TOKEN),
    }
}

/// A `/mcp` POST whose body is not JSON is a JSON-RPC parse error (`400`, `-32700`), answered
/// here: the MCP service would answer `415` as if the content type were wrong.
async fn json_rpc_body(request: Request) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, BODY_LIMIT).await.map_err(|_| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            Json(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": format!("the request body is over {BODY_LIMIT} bytes")}})),
        )
            .into_response()
    })?;
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return Err((
            StatusCode::BAD_REQUEST,
            Json(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": format!("parse error: the body is not JSON ({e})")}})),
        )
            .into_response());
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

async fn read_json(body: Body) -> Result<Value, Response> {
    let bytes = axum::body::to_bytes(body, BODY_LIMIT).await.map_err(|_| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            Json(json!({"error": format!("the body is over {BODY_LIMIT} bytes"), "limit": BODY_LIMIT})),
        )
            .into_response()
    })?;
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": format!("not JSON: {e}")})),
        )
            .into_response()
    })
}

async fn tools(State(cx): State<Ctx>, headers: HeaderMap) -> Response {
    if let Some(refused) = from_a_page(&headers) {
        return refused;
    }
    let Some(caller) = session_caller(&cx, &headers).await else {
        return unauthorized(NO_TOKEN);
    };
    let tools = cx.hub.list_tools(&caller);
    Json(json!({"tools": tools})).into_response()
}

async fn call(State(cx): State<Ctx>, headers: HeaderMap, body: Body) -> Response {
    if let Some(refused) = from_a_page(&headers) {
        return refused;
    }
    let Some(caller) = session_caller(&cx, &headers).await else {
        return unauthorized(NO_TOKEN);
    };
    let doc = match read_json(body).await {
        Ok(doc) => doc,
        Err(refused) => return refused,
    };
    let Some(name) = doc["name"].as_str() else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "missing `name`: the tool to call"})),
        )
            .into_response();
    };
    let outcome = super::mcp::call(
        &cx.hub,
        &caller,
        name,
        doc.get("arguments").cloned().unwrap_or(Value::Null),
    )
    .await;
    Json(super::mcp::forward_body(name, outcome)).into_response()
}

/// The HTTP status of an operator call that failed.
fn status_of(e: &OperatorError) -> StatusCode {
    match e {
        OperatorError::NoMethod(_) | OperatorError::NotFound(_) => StatusCode::NOT_FOUND,
        OperatorError::Params(_) => StatusCode::BAD_REQUEST,
        OperatorError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn operator_answer<T: serde::Serialize>(outcome: Result<T, OperatorError>) -> Response {
    match outcome {
        Ok(doc) => Json(doc).into_response(),
        Err(e) => (status_of(&e), Json(json!({"error": e.to_string()}))).into_response(),
    }
}

async fn sessions(
    State(cx): State<Ctx>,
    Query(p): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let params = SessionsParams {
        agent_id: p.get("agentId").cloned(),
        kind: p.get("kind").cloned(),
        contains: p.get("contains").cloned(),
        limit: p.get("limit").and_then(|l| l.parse().ok()),
        cursor: p.get("cursor").cloned(),
    };
    operator_answer(cx.hub.operator_sessions(params).await)
}

async fn runs(
    State(cx): State<Ctx>,
    Query(p): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let state = match p.get("state") {
        None => None,
        Some(s) => match serde_json::from_value(json!(s)) {
            Ok(state) => Some(state),
            Err(_) => {
                return operator_answer::<Value>(Err(OperatorError::Params(format!(
                    "unknown run state `{s}`"
                ))));
            }
        },
    };
    let params = RunsParams {
        state,
        agent_id: p.get("agentId").cloned(),
        session_key: p.get("sessionKey").cloned(),
        active: p.get("active").is_some_and(|a| a == "true" || a == "1"),
        limit: p.get("limit").and_then(|l| l.parse().ok()),
        cursor: p.get("cursor").cloned(),
    };
    operator_answer(cx.hub.operator_runs(params).await)
}

async fn run(State(cx): State<Ctx>, Path(id): Path<String>) -> Response {
    operator_answer(
        cx.hub
            .operator(HubRequest::RunsShow(RunParams { run_id: id }))
            .await,
    )
}

/// `GET /v1/tasks?room=&limit=`: the tasks, newest first (tasks.md).
async fn tasks(
    State(cx): State<Ctx>,
    Query(p): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let params = super::operator::TasksParams {
        room: p.get("room").cloned(),
        limit: p.get("limit").and_then(|l| l.parse().ok()),
    };
    operator_answer(cx.hub.operator(HubRequest::TasksList(params)).await)
}

/// `POST /v1/tasks` with `{owner, assignee, title, acceptance, room?}`: the operator gives a
/// task.
async fn task_create(State(cx): State<Ctx>, body: axum::body::Bytes) -> Response {
    let p: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return operator_answer::<Value>(Err(OperatorError::Params(format!(
                "the body is not JSON: {e}"
            ))));
        }
    };
    match HubRequest::parse("tasks/create", p) {
        Ok(request) => operator_answer(cx.hub.operator(request).await),
        Err(e) => operator_answer::<Value>(Err(e)),
    }
}

/// `GET /v1/tasks/{id}`: one task with its history.
async fn task(State(cx): State<Ctx>, Path(id): Path<String>) -> Response {
    let params = super::operator::TaskParams { task_id: id };
    operator_answer(cx.hub.operator(HubRequest::TasksShow(params)).await)
}

/// `GET /v1/tasks/{id}/artifacts/{name}`: the artifact's bytes as stored, with its SHA-256 as
/// the `ETag` and in `X-Deepcli-Sha256`, for a client to check what it got.
async fn task_artifact(
    State(cx): State<Ctx>,
    Path((id, name)): Path<(String, String)>,
) -> Response {
    let (row, stored) = match cx.hub.operator_artifact(&id, &name).await {
        Ok(found) => found,
        Err(e) => return operator_answer::<Value>(Err(e.into())),
    };
    let file = match tokio::fs::File::open(&stored).await {
        Ok(file) => file,
        Err(e) => {
            return operator_answer::<Value>(Err(OperatorError::Internal(format!(
                "the stored copy of `{name}` cannot be read: {e}"
            ))));
        }
    };
    let file_name = std::path::Path::new(&name)
        .file_name()
        .map(|f| f.to_string_lossy().replace(['"', '\\'], "_"))
        .unwrap_or_else(|| "artifact".into());
    let headers = [
        (header::CONTENT_TYPE, "application/octet-stream".to_string()),
        (header::CONTENT_LENGTH, row.size.to_string()),
        (header::ETAG, format!("\"{}\"", row.sha256)),
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{file_name}\""),
        ),
        (
            header::HeaderName::from_static("x-deepcli-sha256"),
            row.sha256,
        ),
    ];
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    (headers, body).into_response()
}

/// `POST /v1/tasks/{id}/accept|reject|cancel` (reject's body: `{"reason", "close"}`): the
/// operator's verdict.
async fn task_verdict(
    State(cx): State<Ctx>,
    Path((id, verdict)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let mut p: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return operator_answer::<Value>(Err(OperatorError::Params(format!(
                    "the body is not JSON: {e}"
                ))));
            }
        }
    };
    if let Some(map) = p.as_object_mut() {
        map.insert("taskId".into(), json!(id));
    }
    let method = match verdict.as_str() {
        "accept" => "tasks/accept",
        "reject" => "tasks/reject",
        "cancel" => "tasks/cancel",
        other => {
            return operator_answer::<Value>(Err(OperatorError::NoMethod(format!(
                "tasks/{other} (accept, reject or cancel)"
            ))));
        }
    };
    match HubRequest::parse(method, p) {
        Ok(request) => operator_answer(cx.hub.operator(request).await),
        Err(e) => operator_answer::<Value>(Err(e)),
    }
}

/// `GET /v1/audit?agentId=&sessionKey=&runId=&taskId=&since=&limit=`: the audit timeline
/// (approvals.md), as `deepcli audit --json` prints it.
async fn audit(
    State(cx): State<Ctx>,
    Query(p): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let since = match p.get("since").map(|s| crate::state::audit::parse_since(s)) {
        None => None,
        Some(Ok(since)) => Some(since),
        Some(Err(why)) => return operator_answer::<Value>(Err(OperatorError::Params(why))),
    };
    let filter = crate::state::audit::AuditFilter {
        agent_id: p.get("agentId").cloned(),
        session_key: p.get("sessionKey").cloned(),
        run_id: p.get("runId").cloned(),
        task_id: p.get("taskId").cloned(),
        since,
        limit: p.get("limit").and_then(|l| l.parse().ok()),
    };
    operator_answer(cx.hub.audit(filter).await.map_err(OperatorError::from))
}

/// The door of one sandboxed agent whose network is not the host's (isolation.md): what its
/// `deepcli hub mcp` forwards to, served on a Unix socket inside its sandbox. It takes only
/// that agent's session tokens and serves nothing else of the controller.
pub(crate) fn agent_door(hub: Arc<Hub>, agent_id: &str) -> Router {
    let cx = Ctx {
        hub,
        only_agent: Some(Arc::from(agent_id)),
    };
    Router::new()
        .route("/v1/hub/tools", post(tools))
        .route("/v1/hub/call", post(call))
        .with_state(cx)
}

/// The Hub's routes; the operator's behind the operator token.
pub(crate) fn router(hub: Arc<Hub>, operator_token: Arc<str>) -> Router {
    let mcp_hub = hub.clone();
    // rmcp answers loopback hosts only (DNS rebinding); the address agents are given is
    // allowed too, when the controller listens elsewhere.
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if let Some(authority) = hub.endpoint().and_then(|e| e.strip_prefix("http://")) {
        hosts.push(authority.to_string());
    }
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        // No page may call it (also refused before, in `mcp_auth`).
        .enforce_origin_validation()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(BODY_LIMIT);
    config.sse_keep_alive = None;
    let service = StreamableHttpService::new(
        move || {
            Ok(HttpServer {
                hub: mcp_hub.clone(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    // Between replicas, with the cluster token (docs/scale-out.md).
    let internal = Router::new()
        .route("/internal/hub-turn", post(super::elsewhere::hub_turn))
        .route("/internal/hub-session", post(super::elsewhere::hub_session))
        .route("/internal/artifact", post(super::elsewhere::artifact))
        .route("/internal/received", post(super::elsewhere::received))
        .route_layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            super::elsewhere::admit,
        ))
        .with_state(hub.clone());
    let cx = Ctx {
        hub,
        only_agent: None,
    };
    let mcp = Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(cx.clone(), mcp_auth));
    let operator = crate::access::http::operator_only(
        Router::new()
            .route("/v1/sessions", get(sessions))
            .route("/v1/runs", get(runs))
            .route("/v1/runs/{id}", get(run))
            .route("/v1/tasks", get(tasks).post(task_create))
            .route("/v1/tasks/{id}", get(task))
            .route("/v1/tasks/{id}/{verdict}", post(task_verdict))
            .route("/v1/tasks/{id}/artifacts/{*name}", get(task_artifact))
            .route("/v1/audit", get(audit)),
        operator_token,
    );
    operator
        .route("/v1/hub/tools", post(tools))
        .route("/v1/hub/call", post(call))
        .with_state(cx)
        .merge(mcp)
        .merge(internal)
}
