//! The HTTP+JSON binding (A2A 1.0, "HTTP+JSON/REST Protocol Binding"): the JSON-RPC binding's
//! operations at resource URLs, with the same door, semantics and errors. Two bases, each
//! declared in its card's `supportedInterfaces`:
//!
//! * `/a2a-rest` — the hub's endpoint, routed by bindings.yaml like `/a2a/`;
//! * `/a2a-rest/agents/{agentId}` — an exposed agent's own.
//!
//! Under a base: `POST /message:send`, `POST /message:stream` (SSE), `GET /tasks/{id}`
//! (`?historyLength`), `GET /tasks` (`?contextId&status&pageSize&pageToken&historyLength&
//! includeArtifacts&statusTimestampAfter`), `POST /tasks/{id}:cancel`, `POST` or `GET
//! /tasks/{id}:subscribe` (SSE); `POST` and `GET /tasks/{id}/pushNotificationConfigs`, `GET` and
//! `DELETE /tasks/{id}/pushNotificationConfigs/{configId}`; `GET /extendedAgentCard`. Answers are the
//! results themselves (`application/a2a+json`); errors a `google.rpc.Status` with the HTTP
//! status of A2A's table and, for A2A's own, an `ErrorInfo` (`http::Binding`).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value};

use super::http::{BODY_LIMIT, Binding, Op, base_url, bearer, dispatch, refused, version_ok};
use super::wire::Wire;
use super::{A2a, Endpoint, RpcError};

const HUB: &str = "/a2a-rest";
const AGENT: &str = "/a2a-rest/agents/{agent}";

pub(super) fn routes() -> Router<Arc<A2a>> {
    let mut router = Router::new();
    for base in [HUB, AGENT] {
        router = router
            .route(&format!("{base}/message:send"), post(message_send))
            .route(&format!("{base}/message:stream"), post(message_stream))
            .route(&format!("{base}/tasks"), get(tasks_list))
            .route(
                &format!("{base}/tasks/{{task}}"),
                get(task_get).post(task_post),
            )
            .route(
                &format!("{base}/tasks/{{task}}/pushNotificationConfigs"),
                get(push_configs).post(push_configs),
            )
            .route(
                &format!("{base}/tasks/{{task}}/pushNotificationConfigs/{{config}}"),
                get(push_configs).delete(push_configs),
            )
            .route(
                &format!("{base}/tasks/{{task}}/artifacts/{{run}}/{{*name}}"),
                get(artifact_file),
            )
            .route(&format!("{base}/extendedAgentCard"), get(extended_card));
    }
    router
}

/// What a request asks, read from its route.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    Op(Op, Option<String>),
    /// `/tasks/{id}` with an action this binding does not have.
    Unknown(String),
    /// A push notification config operation on task `.1` (config `.2`).
    Push(Op, String, Option<String>),
    ExtendedCard,
}

/// `/tasks/{id}` (`GET`: the task), `/tasks/{id}:cancel` (`POST`) and `/tasks/{id}:subscribe`
/// (either).
fn task_route(method: &Method, task: &str) -> Asked {
    match task.rsplit_once(':') {
        Some((id, "cancel")) if method == Method::POST => Asked::Op(Op::Cancel, Some(id.into())),
        Some((id, "subscribe")) => Asked::Op(Op::Subscribe, Some(id.into())),
        None if method == Method::GET => Asked::Op(Op::Get, Some(task.into())),
        _ => Asked::Unknown(format!("{method} /tasks/{task}")),
    }
}

/// The agent a route names; `None` at the hub's base.
fn agent_of(params: &Option<Path<Map<String, Value>>>) -> Option<String> {
    params
        .as_ref()
        .and_then(|Path(p)| p.get("agent"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

async fn message_send(
    State(a2a): State<Arc<A2a>>,
    params: Option<Path<Map<String, Value>>>,
    request: Request,
) -> Response {
    call(a2a, agent_of(&params), Asked::Op(Op::Send, None), request).await
}

async fn message_stream(
    State(a2a): State<Arc<A2a>>,
    params: Option<Path<Map<String, Value>>>,
    request: Request,
) -> Response {
    call(a2a, agent_of(&params), Asked::Op(Op::Stream, None), request).await
}

async fn tasks_list(
    State(a2a): State<Arc<A2a>>,
    params: Option<Path<Map<String, Value>>>,
    request: Request,
) -> Response {
    call(a2a, agent_of(&params), Asked::Op(Op::List, None), request).await
}

async fn task_get(
    State(a2a): State<Arc<A2a>>,
    Path(params): Path<Map<String, Value>>,
    request: Request,
) -> Response {
    task(a2a, params, request).await
}

async fn task_post(
    State(a2a): State<Arc<A2a>>,
    Path(params): Path<Map<String, Value>>,
    request: Request,
) -> Response {
    task(a2a, params, request).await
}

async fn task(a2a: Arc<A2a>, params: Map<String, Value>, request: Request) -> Response {
    let task = params.get("task").and_then(Value::as_str).unwrap_or("");
    let asked = task_route(request.method(), task);
    let agent = params
        .get("agent")
        .and_then(Value::as_str)
        .map(str::to_string);
    call(a2a, agent, asked, request).await
}

/// `/tasks/{id}/pushNotificationConfigs[/{configId}]`: `POST` creates, `GET` lists (or gets
/// the one named), `DELETE` deletes.
async fn push_configs(
    State(a2a): State<Arc<A2a>>,
    Path(params): Path<Map<String, Value>>,
    request: Request,
) -> Response {
    let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_string);
    let (task, config) = (text("task").unwrap_or_default(), text("config"));
    let op = match (request.method(), &config) {
        (&Method::POST, None) => Op::PushCreate,
        (&Method::GET, None) => Op::PushList,
        (&Method::GET, Some(_)) => Op::PushGet,
        _ => Op::PushDelete,
    };
    call(a2a, text("agent"), Asked::Push(op, task, config), request).await
}

async fn extended_card(
    State(a2a): State<Arc<A2a>>,
    params: Option<Path<Map<String, Value>>>,
    request: Request,
) -> Response {
    call(a2a, agent_of(&params), Asked::ExtendedCard, request).await
}

/// `GET /tasks/{id}/artifacts/{runId}/{name}`: a file the task's agent handed to the peer
/// (the URL of its file part when it was over the inline limit), to the peer whose task it
/// is: the same door as every call, then the task looked up by (peer, agent) as GetTask does.
async fn artifact_file(
    State(a2a): State<Arc<A2a>>,
    Path(params): Path<Map<String, Value>>,
    request: Request,
) -> Response {
    let text = |k: &str| {
        params
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let agent = params
        .get("agent")
        .and_then(Value::as_str)
        .map(str::to_string);
    let endpoint = match &agent {
        Some(agent) => Endpoint::Agent(agent),
        None => Endpoint::Routed,
    };
    let caller = match a2a.admit(endpoint, bearer(request.headers())).await {
        Ok(c) => c,
        Err(r) => return refused(r, &Binding::Rest),
    };
    let (task_id, run, name) = (text("task"), text("run"), text("name"));
    let found = async {
        let (task, _) = a2a.load(&caller, &task_id).await?;
        let missing = || {
            RpcError::new(
                -32001,
                format!("task `{task_id}` has no file `{name}` of run `{run}`"),
            )
        };
        if !task.runs.iter().any(|(r, _)| *r == run) {
            return Err(missing());
        }
        a2a.hub
            .a2a_file_path(&run, &name)
            .await
            .map_err(RpcError::internal)?
            .ok_or_else(missing)
    };
    let (path, file) = match found.await {
        Ok(found) => found,
        Err(e) => return Binding::Rest.answer(Err(e)),
    };
    let opened = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => return Binding::Rest.answer(Err(RpcError::internal(e))),
    };
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(opened));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, file.media_type.clone()),
        (header::CONTENT_LENGTH, file.size.to_string()),
        (header::ETAG, format!("\"{}\"", file.sha256)),
        (header::CACHE_CONTROL, "private, no-store".to_string()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

/// One call: the door first (as for JSON-RPC), then the parameters from the path, the query
/// and the body, then the operation.
async fn call(a2a: Arc<A2a>, agent: Option<String>, asked: Asked, request: Request) -> Response {
    let begun = std::time::Instant::now();
    let endpoint = match &agent {
        Some(agent) => Endpoint::Agent(agent),
        None => Endpoint::Routed,
    };
    let mut caller = match a2a.admit(endpoint, bearer(request.headers())).await {
        Ok(c) => c,
        Err(r) => return refused(r, &Binding::Rest),
    };
    caller.base = base_url(request.headers());
    if let Err(e) = version_ok(request.headers()) {
        return Binding::Rest.answer(Err(e));
    }
    let (op, task) = match asked {
        Asked::Op(op, task) => (op, task),
        Asked::Push(op, task, config) => {
            let params = match push_params(op, task, config, request).await {
                Ok(params) => params,
                Err(e) => return Binding::Rest.answer(Err(e)),
            };
            return dispatch(&a2a, caller, Binding::Rest, Wire::V1, op, params, begun).await;
        }
        Asked::ExtendedCard => {
            let base = base_url(request.headers());
            return Binding::Rest.answer(a2a.extended_card(&caller, &base));
        }
        Asked::Unknown(what) => {
            return Binding::Rest.answer(Err(RpcError::new(
                -32601,
                format!(
                    "`{what}` is not an operation of this binding: GET /tasks/{{id}}, POST /tasks/{{id}}:cancel, POST /tasks/{{id}}:subscribe"
                ),
            )));
        }
    };
    let params = match params_of(op, task, request).await {
        Ok(params) => params,
        Err(e) => return Binding::Rest.answer(Err(e)),
    };
    dispatch(&a2a, caller, Binding::Rest, Wire::V1, op, params, begun).await
}

/// A push config operation's parameters, as the JSON-RPC binding has them: the body of a
/// create (a `TaskPushNotificationConfig`), the task and config ids from the path (which name
/// them, whatever the body says).
async fn push_params(
    op: Op,
    task: String,
    config: Option<String>,
    request: Request,
) -> Result<Value, RpcError> {
    let mut params = if op == Op::PushCreate {
        json_body(request, "a TaskPushNotificationConfig").await?
    } else {
        query(request.uri().query())?
    };
    params.insert("taskId".into(), Value::String(task));
    params.remove("task_id");
    if let Some(config) = config {
        params.insert("id".into(), Value::String(config));
    }
    Ok(Value::Object(params))
}

/// A request's body: a JSON object (`what` it should be, for the error).
async fn json_body(request: Request, what: &str) -> Result<Map<String, Value>, RpcError> {
    let bytes = axum::body::to_bytes(request.into_body(), BODY_LIMIT)
        .await
        .map_err(|_| {
            RpcError::new(
                -32600,
                format!("the request body is over {BODY_LIMIT} bytes"),
            )
        })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(body)) => Ok(body),
        Ok(_) => Err(RpcError::invalid_params(format!(
            "the body must be a JSON object: {what}"
        ))),
        Err(e) => Err(RpcError::new(-32700, format!("invalid JSON body: {e}"))),
    }
}

/// An operation's parameters, as the JSON-RPC binding has them: the body of a send (a
/// `SendMessageRequest`), the query of a read (camelCase names, each once), the task id from
/// the path.
async fn params_of(op: Op, task: Option<String>, request: Request) -> Result<Value, RpcError> {
    let mut params = match op {
        Op::Send | Op::Stream | Op::PushCreate => {
            json_body(request, "a SendMessageRequest").await?
        }
        Op::Get
        | Op::List
        | Op::Cancel
        | Op::Subscribe
        | Op::PushGet
        | Op::PushList
        | Op::PushDelete => query(request.uri().query())?,
    };
    if let Some(task) = task {
        params.insert("id".into(), Value::String(task));
    }
    Ok(Value::Object(params))
}

/// A query string as parameters: numbers and booleans where the operation reads them so, every
/// name at most once.
fn query(text: Option<&str>) -> Result<Map<String, Value>, RpcError> {
    let mut params = Map::new();
    for (name, value) in form_urlencoded::parse(text.unwrap_or("").as_bytes()) {
        let typed = match name.as_ref() {
            "pageSize" | "page_size" | "historyLength" | "history_length" => value
                .parse::<u64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::String(value.to_string())),
            "includeArtifacts" | "include_artifacts" => match value.as_ref() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                other => Value::String(other.to_string()),
            },
            _ => Value::String(value.to_string()),
        };
        if params.insert(name.to_string(), typed).is_some() {
            return Err(RpcError::invalid_params(format!(
                "`{name}` is given more than once"
            )));
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_route_names_its_operation() {
        let (get, post) = (Method::GET, Method::POST);
        assert_eq!(
            task_route(&get, "t1"),
            Asked::Op(Op::Get, Some("t1".into()))
        );
        assert_eq!(
            task_route(&post, "t1:cancel"),
            Asked::Op(Op::Cancel, Some("t1".into()))
        );
        assert_eq!(
            task_route(&post, "t1:subscribe"),
            Asked::Op(Op::Subscribe, Some("t1".into()))
        );
        assert_eq!(
            task_route(&get, "t1:subscribe"),
            Asked::Op(Op::Subscribe, Some("t1".into()))
        );
        assert!(matches!(task_route(&get, "t1:cancel"), Asked::Unknown(_)));
        assert!(matches!(task_route(&post, "t1"), Asked::Unknown(_)));
        assert!(matches!(task_route(&post, "t1:delete"), Asked::Unknown(_)));
    }

    #[test]
    fn a_query_is_typed_as_the_operation_reads_it_and_names_each_field_once() {
        let params = query(Some(
            "contextId=c%201&pageSize=2&includeArtifacts=true&historyLength=x",
        ))
        .unwrap();
        assert_eq!(params["contextId"], "c 1");
        assert_eq!(params["pageSize"], 2);
        assert_eq!(params["includeArtifacts"], true);
        // Left as written: the operation refuses it with -32602, as it does in JSON-RPC.
        assert_eq!(params["historyLength"], "x");
        let twice = query(Some("pageSize=1&pageSize=2")).unwrap_err();
        assert_eq!(twice.code, -32602);
    }

    #[test]
    fn each_a2a_error_has_one_reason_and_one_http_status() {
        use axum::http::StatusCode as S;
        let table = [
            (-32001, "TASK_NOT_FOUND", S::NOT_FOUND),
            (-32002, "TASK_NOT_CANCELABLE", S::BAD_REQUEST),
            (-32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", S::BAD_REQUEST),
            (-32004, "UNSUPPORTED_OPERATION", S::BAD_REQUEST),
            (-32005, "CONTENT_TYPE_NOT_SUPPORTED", S::BAD_REQUEST),
            (-32006, "INVALID_AGENT_RESPONSE", S::INTERNAL_SERVER_ERROR),
            (-32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", S::BAD_REQUEST),
            (-32008, "EXTENSION_SUPPORT_REQUIRED", S::BAD_REQUEST),
            (-32009, "VERSION_NOT_SUPPORTED", S::BAD_REQUEST),
        ];
        for (code, reason, status) in table {
            let e = RpcError::new(code, "x");
            assert_eq!(e.reason(), Some(reason), "{code}");
            assert_eq!(e.http_status().0, status, "{code}");
            let body = Binding::Rest.error_body(&e);
            assert_eq!(body["error"]["code"], status.as_u16(), "{code}");
            assert_eq!(body["error"]["details"][0]["reason"], reason, "{code}");
            assert_eq!(
                body["error"]["details"][0]["domain"], "a2a-protocol.org",
                "{code}"
            );
        }
        // JSON-RPC's own codes carry no A2A reason, and never pass for a success.
        for code in [-32600, -32601, -32602, -32603, -32700, -32000] {
            let e = RpcError::new(code, "x");
            assert_eq!(e.reason(), None);
            assert!(!e.http_status().0.is_success(), "{code}");
        }
    }
}
