//! The A2A server's HTTP routes, merged into the controller's server (a2a.md):
//!
//! * `GET /.well-known/agent-card.json`, `GET /a2a/` and `GET /a2a/.well-known/agent-card.json`
//!   — the hub's card: its endpoint `/a2a/` routes each peer by bindings.yaml (channel `a2a`);
//!   its skills are the exposed agents;
//! * `GET /a2a/{agentId}/` and `GET /a2a/{agentId}/.well-known/agent-card.json` — an exposed
//!   agent's card;
//! * `POST /a2a/` and `POST /a2a/{agentId}/` — the JSON-RPC binding: `SendMessage`,
//!   `SendStreamingMessage` (SSE), `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`
//!   (SSE), and A2A 0.3's names `message/send`, `message/stream`, `tasks/get`, `tasks/cancel`,
//!   `tasks/resubscribe`; the push notification configs (`CreateTaskPushNotificationConfig`,
//!   `GetTaskPushNotificationConfig`, `ListTaskPushNotificationConfigs`,
//!   `DeleteTaskPushNotificationConfig`) and `GetExtendedAgentCard` (0.3:
//!   `agent/getAuthenticatedExtendedCard`).
//!
//! The door (bearer token → peer, inbound policy, route, exposed, allowed, rate) runs before the
//! body is read.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::streams::{StreamCap, StreamSlot};
use super::wire::{self, Wire, state};
use super::{A2a, A2aCaller, A2aRefusal, Endpoint, Exposed, RpcError, Sent};
use crate::state::RunState;

/// The largest request body taken: a 64 KiB message, JSON-escaped, fits.
pub(crate) const BODY_LIMIT: usize = 1024 * 1024;

/// The cards and the JSON-RPC binding (the HTTP+JSON binding's routes are `rest.rs`'s).
pub(super) fn routes() -> Router<Arc<A2a>> {
    Router::new()
        .route("/.well-known/agent-card.json", get(hub_card))
        .route("/a2a", get(hub_card).post(routed_rpc))
        .route("/a2a/", get(hub_card).post(routed_rpc))
        .route("/a2a/.well-known/agent-card.json", get(hub_card))
        .route("/a2a/{agent}", get(agent_card_at).post(rpc))
        .route("/a2a/{agent}/", get(agent_card_at).post(rpc))
        .route(
            "/a2a/{agent}/.well-known/agent-card.json",
            get(agent_card_at),
        )
}

/// The cards' base URL: the `Host` the caller used when it is a host and an optional port and
/// nothing else (a name, an IPv4 address or a bracketed IPv6 one); otherwise the loopback
/// address, so a forged `Host` (`evil.example/x?y=`) never lands in a card.
pub(super) fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| is_authority(h))
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

/// `host[:port]`: a DNS name or IPv4 address (letters, digits, `-`, `.`), or `[IPv6]`; a port
/// of 1 to 5 digits.
fn is_authority(text: &str) -> bool {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(port) => ("v6", Some(port)),
                None => return false,
            },
        }
    } else {
        match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_header_that_is_not_a_host_and_port_never_reaches_a_card() {
        for good in [
            "hub.example",
            "hub.example:7430",
            "127.0.0.1:80",
            "[::1]:7430",
            "[::1]",
        ] {
            assert!(is_authority(good), "{good}");
        }
        for bad in [
            "evil.example/x?y=",
            "evil.example:80/x",
            "a b",
            "",
            "hub:",
            "hub:123456",
            "user@hub",
            "[::1",
            "[zz]:1",
            "hub:80:90",
        ] {
            assert!(!is_authority(bad), "{bad}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("evil.example/x?y="));
        assert_eq!(base_url(&headers), "http://127.0.0.1");
    }
}

/// A card with its validator (A2A's "caching" SHOULD): an `ETag` of its bytes, and `304 Not
/// Modified` to a client whose `If-None-Match` names it. The card changes only with the config
/// (and the `Host` it is fetched through), so its bytes are its version.
fn cached_card(card: &Value, headers: &HeaderMap) -> Response {
    use sha2::Digest;
    let body = serde_json::to_vec(card).unwrap_or_default();
    let digest = hex::encode(sha2::Sha256::digest(&body));
    let etag = format!("\"{}\"", &digest[..32]);
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == etag || tag == "*");
    let cache = [
        (header::CACHE_CONTROL, "max-age=60".to_string()),
        (header::ETAG, etag),
    ];
    if matches {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    (cache, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn card_response(agent: Option<&Exposed>, headers: &HeaderMap) -> Response {
    match agent {
        Some(agent) => cached_card(&wire::agent_card(agent, &base_url(headers)), headers),
        None => (
            StatusCode::NOT_FOUND,
            Json(
                json!({"error": "no such agent is exposed over A2A (channels.yaml `a2a.expose`)"}),
            ),
        )
            .into_response(),
    }
}

async fn hub_card(State(a2a): State<Arc<A2a>>, headers: HeaderMap) -> Response {
    let plan = a2a.plan();
    if plan.exposed.is_empty() {
        return card_response(None, &headers);
    }
    cached_card(
        &wire::hub_card_of(&plan.exposed, &base_url(&headers)),
        &headers,
    )
}

async fn agent_card_at(
    State(a2a): State<Arc<A2a>>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    let plan = a2a.plan();
    card_response(plan.exposed(&agent), &headers)
}

/// A JSON-RPC error; an A2A one (-32001 … -32009) carries its `google.rpc.ErrorInfo` in
/// `data`, as A2A 1.0 requires: the error's name as `reason`, domain `a2a-protocol.org`.
fn rpc_error(id: &Value, e: &RpcError) -> Value {
    let mut error = json!({"code": e.code, "message": e.message});
    let details = e.details();
    if details.as_array().is_some_and(|d| !d.is_empty()) {
        error["data"] = details;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// The JSON-RPC id of a request refused at the door, so its error answers it: read from the
/// body (bounded as every body is) only once the refusal is decided; `null` when there is none.
async fn request_id(request: Request) -> Value {
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), BODY_LIMIT).await else {
        return Value::Null;
    };
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .filter(|id| matches!(id, Value::String(_) | Value::Number(_)))
        .unwrap_or(Value::Null)
}

/// A refusal at the door: an HTTP status and a body saying why in the binding's error shape
/// (a JSON-RPC error answering the request's id, or a `google.rpc.Status`).
pub(super) fn refused(refusal: A2aRefusal, binding: &Binding) -> Response {
    let metadata = match &refusal {
        A2aRefusal::Gated(gated) => {
            let mut m = json!({"gate": gated.reason, "rule": gated.rule});
            if let Some(code) = &gated.pairing_code {
                m["pairingCode"] = code.as_str().into();
            }
            m
        }
        A2aRefusal::RoutedNotExposed { agent, matched_by } => {
            json!({"agent": agent, "matchedBy": matched_by})
        }
        A2aRefusal::TooManyStreams(StreamCap::Peer(limit)) => {
            json!({"cap": "peer", "maxStreams": limit.to_string()})
        }
        A2aRefusal::TooManyStreams(StreamCap::Total(limit)) => {
            json!({"cap": "hub", "maxStreams": limit.to_string()})
        }
        _ => json!({}),
    };
    let (status, reason, message, retry) = match refusal {
        A2aRefusal::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "no valid peer token: send `Authorization: Bearer <token>` with the token channels.yaml `a2a.peers.<name>.token` names".to_string(),
            None,
        ),
        A2aRefusal::Forbidden => (
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "this peer may not reach this agent (its `allowAgents` does not list it)".to_string(),
            None,
        ),
        A2aRefusal::NotExposed => (
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "no such agent is exposed over A2A (channels.yaml `a2a.expose`)".to_string(),
            None,
        ),
        A2aRefusal::RoutedNotExposed { agent, matched_by } => (
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!(
                "bindings.yaml routes this peer to agent `{agent}` (matched by {matched_by}), which channels.yaml `a2a.expose` does not list: add a binding with `match: {{channel: a2a, peer: {{kind: direct, id: <peer>}}}}` to an exposed agent, or call an agent's own endpoint /a2a/<agentId>/"
            ),
            None,
        ),
        A2aRefusal::Gated(gated) => (
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            match &gated.pairing_code {
                Some(code) => format!(
                    "the hub's inbound policy refused this peer ({}, {}): give the hub's operator the pairing code {code} to approve (`deepcli pairing approve a2a {code}`)",
                    gated.reason, gated.rule
                ),
                None => format!(
                    "the hub's inbound policy refused this peer ({}, {}): {}",
                    gated.reason, gated.rule, gated.hint
                ),
            },
            None,
        ),
        A2aRefusal::TooManyStreams(cap) => (
            StatusCode::TOO_MANY_REQUESTS,
            "TOO_MANY_STREAMS",
            match cap {
                StreamCap::Peer(n) => format!(
                    "this peer holds {n} open streams, its limit (channels.yaml `a2a.peers.<name>.maxStreams`): close one, or poll with GetTask"
                ),
                StreamCap::Total(n) => format!(
                    "the hub holds {n} open streams, its limit (channels.yaml `a2a.maxStreams`): retry later, or poll with GetTask"
                ),
            },
            None,
        ),
        A2aRefusal::RateLimited(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMITED",
            format!("this peer went over its requests per minute (`requestsPerMinute`); retry in {secs} s"),
            Some(secs),
        ),
    };
    let details = json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "deepcli", "metadata": metadata}]);
    let mut response = match binding {
        Binding::JsonRpc(id) => (
            status,
            Json(json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32000,
                "message": message,
                "data": details,
            }})),
        )
            .into_response(),
        Binding::Rest => rest_body(
            status,
            json!({"error": {
                "code": status.as_u16(),
                "status": grpc_status(status),
                "message": message,
                "details": details,
            }}),
        ),
    };
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if let Some(secs) = retry
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// A2A-Version: absent, 0.3 or 1.0 (patch versions ignored) are served; any other is refused.
pub(super) fn version_ok(headers: &HeaderMap) -> Result<(), RpcError> {
    let Some(v) = headers.get("a2a-version") else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or("?").trim();
    let major_minor: Vec<&str> = v.splitn(3, '.').take(2).collect();
    match major_minor.as_slice() {
        [] | [""] | ["1", "0"] | ["1"] | ["0", "3"] => Ok(()),
        _ => Err(RpcError::new(
            -32009,
            format!(
                "A2A-Version `{v}` is not supported: this server speaks 1.0 (and 0.3's method names)"
            ),
        )),
    }
}

fn json_rpc(body: Value) -> Response {
    Json(body).into_response()
}

async fn rpc(State(a2a): State<Arc<A2a>>, Path(agent): Path<String>, request: Request) -> Response {
    serve(a2a, Endpoint::Agent(&agent), request).await
}

async fn routed_rpc(State(a2a): State<Arc<A2a>>, request: Request) -> Response {
    serve(a2a, Endpoint::Routed, request).await
}

async fn serve(a2a: Arc<A2a>, endpoint: Endpoint<'_>, request: Request) -> Response {
    let begun = std::time::Instant::now();
    let base = base_url(request.headers());
    let mut caller = match a2a.admit(endpoint, bearer(request.headers())).await {
        Ok(c) => c,
        Err(r) => return refused(r, &Binding::JsonRpc(request_id(request).await)),
    };
    caller.base = base.clone();
    let version = version_ok(request.headers());
    let bytes = match axum::body::to_bytes(request.into_body(), BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                Json(rpc_error(
                    &Value::Null,
                    &RpcError::new(
                        -32600,
                        format!("the request body is over {BODY_LIMIT} bytes"),
                    ),
                )),
            )
                .into_response();
        }
    };
    let request: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return json_rpc(rpc_error(
                &Value::Null,
                &RpcError::new(-32700, format!("invalid JSON payload: {e}")),
            ));
        }
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let valid_id = matches!(id, Value::String(_) | Value::Number(_));
    let method = request.get("method").and_then(Value::as_str);
    let (Some(method), true, Some("2.0")) = (
        method,
        valid_id && request.is_object(),
        request.get("jsonrpc").and_then(Value::as_str),
    ) else {
        return json_rpc(rpc_error(
            &id,
            &RpcError::new(
                -32600,
                "not a JSON-RPC 2.0 request: it needs `jsonrpc: \"2.0\"`, a string or number `id` and a `method` (batches and notifications are not taken)",
            ),
        ));
    };
    if let Err(e) = version {
        return json_rpc(rpc_error(&id, &e));
    }
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return json_rpc(rpc_error(
            &id,
            &RpcError::invalid_params("`params` must be an object"),
        ));
    }
    let (wire, op) = match method {
        "SendMessage" => (Wire::V1, Op::Send),
        "SendStreamingMessage" => (Wire::V1, Op::Stream),
        "GetTask" => (Wire::V1, Op::Get),
        "ListTasks" => (Wire::V1, Op::List),
        "CancelTask" => (Wire::V1, Op::Cancel),
        "SubscribeToTask" => (Wire::V1, Op::Subscribe),
        "message/send" => (Wire::V03, Op::Send),
        "message/stream" => (Wire::V03, Op::Stream),
        "tasks/get" => (Wire::V03, Op::Get),
        "tasks/cancel" => (Wire::V03, Op::Cancel),
        "tasks/resubscribe" => (Wire::V03, Op::Subscribe),
        "CreateTaskPushNotificationConfig" => (Wire::V1, Op::PushCreate),
        "GetTaskPushNotificationConfig" => (Wire::V1, Op::PushGet),
        // The JS SDK's 0.3 compatibility layer spells it in the singular.
        "ListTaskPushNotificationConfigs" | "ListTaskPushNotificationConfig" => {
            (Wire::V1, Op::PushList)
        }
        "DeleteTaskPushNotificationConfig" => (Wire::V1, Op::PushDelete),
        "tasks/pushNotificationConfig/set" => (Wire::V03, Op::PushCreate),
        "tasks/pushNotificationConfig/get" => (Wire::V03, Op::PushGet),
        "tasks/pushNotificationConfig/list" => (Wire::V03, Op::PushList),
        "tasks/pushNotificationConfig/delete" => (Wire::V03, Op::PushDelete),
        "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => {
            let binding = Binding::JsonRpc(id);
            return binding.answer(a2a.extended_card(&caller, &base));
        }
        other => {
            return json_rpc(rpc_error(
                &id,
                &RpcError::new(
                    -32601,
                    format!(
                        "method `{other}` not found: this server takes SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, CreateTaskPushNotificationConfig, GetTaskPushNotificationConfig, ListTaskPushNotificationConfigs, DeleteTaskPushNotificationConfig, GetExtendedAgentCard (and 0.3's message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe, agent/getAuthenticatedExtendedCard)"
                    ),
                ),
            ));
        }
    };
    dispatch(&a2a, caller, Binding::JsonRpc(id), wire, op, params, begun).await
}

/// How a call came and how it is answered: JSON-RPC (answering the request's `id`), or the
/// HTTP+JSON binding (the result itself; an error as a `google.rpc.Status` with the HTTP status
/// A2A's table gives).
#[derive(Debug, Clone)]
pub(super) enum Binding {
    JsonRpc(Value),
    Rest,
}

impl Binding {
    /// An answer's body: the JSON-RPC response, or the result itself.
    fn result(&self, result: Value) -> Value {
        match self {
            Binding::JsonRpc(id) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Binding::Rest => result,
        }
    }

    /// An error's body: the JSON-RPC error, or `{"error": google.rpc.Status}`.
    pub(super) fn error_body(&self, e: &RpcError) -> Value {
        match self {
            Binding::JsonRpc(id) => rpc_error(id, e),
            Binding::Rest => {
                let (status, name) = e.http_status();
                let details = e.details();
                json!({"error": {
                    "code": status.as_u16(),
                    "status": name,
                    "message": e.message,
                    "details": details,
                }})
            }
        }
    }

    pub(super) fn answer(&self, outcome: Result<Value, RpcError>) -> Response {
        match (self, outcome) {
            (Binding::JsonRpc(_), Ok(result)) => json_rpc(self.result(result)),
            (Binding::JsonRpc(_), Err(e)) => json_rpc(self.error_body(&e)),
            (Binding::Rest, Ok(result)) => rest_body(StatusCode::OK, result),
            (Binding::Rest, Err(e)) => rest_body(e.http_status().0, self.error_body(&e)),
        }
    }
}

/// An HTTP+JSON answer: `application/a2a+json`, as the binding says.
pub(super) fn rest_body(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/a2a+json")],
        body.to_string(),
    )
        .into_response()
}

/// The `google.rpc.Code` name of a door's HTTP status.
fn grpc_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "UNAUTHENTICATED",
        StatusCode::FORBIDDEN => "PERMISSION_DENIED",
        StatusCode::NOT_FOUND => "NOT_FOUND",
        StatusCode::TOO_MANY_REQUESTS => "RESOURCE_EXHAUSTED",
        StatusCode::PAYLOAD_TOO_LARGE => "INVALID_ARGUMENT",
        s if s.is_client_error() => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

/// One call of `op` with `params` by `caller`, answered in `binding`'s shape: the same
/// semantics whatever the binding.
pub(super) async fn dispatch(
    a2a: &Arc<A2a>,
    caller: A2aCaller,
    binding: Binding,
    wire: Wire,
    op: Op,
    params: Value,
    begun: std::time::Instant,
) -> Response {
    // 0.3's push config params name the task `id`: read in 1.0's shape.
    let params = match (wire, op) {
        (Wire::V03, Op::PushGet | Op::PushList | Op::PushDelete) => {
            match wire::push_params_v03(&params) {
                Ok(p) => p,
                Err(e) => return binding.answer(Err(e)),
            }
        }
        _ => params,
    };
    let task_id = || {
        params
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| RpcError::invalid_params("`id` (the task id) is required"))
    };
    let mut agent_time = None;
    let result = match op {
        Op::Send => send(a2a, &caller, wire, &params)
            .await
            .map(|(result, runtime)| {
                agent_time = runtime;
                result
            }),
        Op::Get => match (task_id(), wire::history_length(&params)) {
            (Ok(t), Ok(h)) => a2a
                .get(&caller, &t)
                .await
                .map(|(task, runs)| wire.task(&task, &runs, h, true)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        Op::List => match wire::list_query(&params) {
            Ok(query) => a2a
                .list(&caller, &query)
                .await
                .map(|page| wire::task_page(&page, query.history, query.artifacts)),
            Err(e) => Err(e),
        },
        Op::Cancel => match task_id() {
            Ok(t) => a2a
                .cancel(&caller, &t)
                .await
                .map(|(task, runs)| wire.task(&task, &runs, None, true)),
            Err(e) => Err(e),
        },
        Op::PushCreate => push_create(a2a, &caller, wire, &params).await,
        // 0.3 may leave the config out: the task's first (by id).
        Op::PushGet if wire == Wire::V03 && params.get("id").is_none() => {
            match wire::push_task_id(&params) {
                Ok(task) => a2a.list_push(&caller, &task).await.and_then(|configs| {
                    configs
                        .iter()
                        .min_by(|a, b| a.config_id.cmp(&b.config_id))
                        .map(|c| wire.push_config_doc(c))
                        .ok_or_else(|| {
                            RpcError::new(-32001, "the task has no push notification config")
                        })
                }),
                Err(e) => Err(e),
            }
        }
        Op::PushGet => match wire::push_config_ref(&params) {
            Ok((task, config)) => a2a
                .get_push(&caller, &task, &config)
                .await
                .map(|c| wire.push_config_doc(&c)),
            Err(e) => Err(e),
        },
        Op::PushList => match wire::push_task_id(&params).and_then(|task| {
            let page = wire::push_page(&params)?;
            Ok((task, page))
        }) {
            Ok((task, page)) => a2a
                .list_push(&caller, &task)
                .await
                .map(|c| wire.push_config_list(&c, &page)),
            Err(e) => Err(e),
        },
        Op::PushDelete => match wire::push_config_ref(&params) {
            Ok((task, config)) => a2a
                .delete_push(&caller, &task, &config)
                .await
                // 1.0: `google.protobuf.Empty`; 0.3: `null`.
                .map(|()| match wire {
                    Wire::V1 => json!({}),
                    Wire::V03 => Value::Null,
                }),
            Err(e) => Err(e),
        },
        // A stream takes its slot before anything else: one over a cap reaches no agent.
        Op::Stream => match a2a.stream_slot(&caller) {
            Err(r) => return refused(r, &binding),
            Ok(slot) => match stream_send(a2a, &caller, wire, &params).await {
                Ok((task_id, run)) => {
                    let to = Until::Interrupted;
                    return sse(a2a.clone(), caller, wire, binding, task_id, run, slot, to);
                }
                Err(e) => Err(e),
            },
        },
        Op::Subscribe => match a2a.stream_slot(&caller) {
            Err(r) => return refused(r, &binding),
            Ok(slot) => match subscribe(a2a, &caller, task_id()).await {
                Ok((task_id, run)) => {
                    let to = Until::Terminal;
                    return sse(a2a.clone(), caller, wire, binding, task_id, run, slot, to);
                }
                Err(e) => Err(e),
            },
        },
    };
    let mut response = binding.answer(result);
    // A blocking send that completed: the hub's own share of it (W3C Server-Timing), and the
    // agent's turn beside it.
    if let Some(agent) = agent_time {
        let hub = begun.elapsed().saturating_sub(agent);
        a2a.metrics.send_overhead.add(hub.as_micros() as u64);
        let timing = format!(
            "hub;dur={:.3}, agent;dur={:.3}",
            hub.as_secs_f64() * 1e3,
            agent.as_secs_f64() * 1e3
        );
        if let Ok(v) = HeaderValue::from_str(&timing) {
            response.headers_mut().insert("server-timing", v);
        }
    }
    response
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Send,
    Stream,
    Get,
    List,
    Cancel,
    Subscribe,
    PushCreate,
    PushGet,
    PushList,
    PushDelete,
}

/// CreateTaskPushNotificationConfig: params are the `TaskPushNotificationConfig` itself.
async fn push_create(
    a2a: &Arc<A2a>,
    caller: &A2aCaller,
    wire: Wire,
    params: &Value,
) -> Result<Value, RpcError> {
    let task_id = wire::push_task_id(params)?;
    let input = wire::push_config(params)?;
    a2a.create_push(caller, &task_id, input)
        .await
        .map(|c| wire.push_config_doc(&c))
}

/// SendMessage; with the agent runtime's time for the turn when the task completed while the
/// request waited.
async fn send(
    a2a: &Arc<A2a>,
    caller: &A2aCaller,
    wire: Wire,
    params: &Value,
) -> Result<(Value, Option<std::time::Duration>), RpcError> {
    let incoming = wire::incoming(params)?;
    let history = wire::send_history(params)?;
    let immediately = incoming.return_immediately;
    let Sent {
        mut task,
        run,
        retry,
    } = a2a.send(caller, incoming).await?;
    if immediately {
        if !retry {
            a2a.watch(&task, run);
        }
        let (task, runs) = a2a.load(caller, &task.task_id).await?;
        return Ok((
            wire.send_result(wire.task(&task, &runs, history, true)),
            None,
        ));
    }
    let (ended, runtime) = a2a
        .hub
        .a2a_wait_timed(&run, super::BLOCKING_WAIT)
        .await
        .map_err(RpcError::internal)?;
    let runtime = runtime.filter(|_| ended.state == RunState::Completed && !retry);
    if !ended.state.is_final() && !retry {
        a2a.watch(&task, run);
    }
    // A new task's one run is the one waited for: nothing to read again.
    let runs = match task.runs.as_slice() {
        [(only, _)] if *only == ended.run_id => vec![ended],
        _ => a2a.runs(&task).await?,
    };
    a2a.fill_files(caller, &mut task).await?;
    task.state = a2a.note_state(&task, &runs).await.to_string();
    Ok((
        wire.send_result(wire.task(&task, &runs, history, true)),
        runtime,
    ))
}

async fn stream_send(
    a2a: &Arc<A2a>,
    caller: &A2aCaller,
    _wire: Wire,
    params: &Value,
) -> Result<(String, String), RpcError> {
    let incoming = wire::incoming(params)?;
    let Sent { task, run, retry } = a2a.send(caller, incoming).await?;
    if !retry {
        a2a.watch(&task, run.clone());
    }
    Ok((task.task_id, run))
}

async fn subscribe(
    a2a: &Arc<A2a>,
    caller: &A2aCaller,
    task_id: Result<String, RpcError>,
) -> Result<(String, String), RpcError> {
    let task_id = task_id?;
    let (task, runs) = a2a.load(caller, &task_id).await?;
    let (now, _) = wire::task_state(&task.state, runs.last());
    if state::is_terminal(now) {
        return Err(RpcError::new(
            -32004,
            format!("task `{task_id}` is {now}: there is nothing more to subscribe to"),
        ));
    }
    let run = runs
        .last()
        .map(|r| r.run_id.clone())
        .ok_or_else(|| RpcError::task_not_found(&task_id))?;
    Ok((task_id, run))
}

/// What became of a task waiting for input while a subscriber waited.
enum Waited {
    /// The peer's next message made run `.0` (in state `.1`), the task's `.2`-th.
    Run(String, RunState, usize),
    /// It became terminal (cancelled while it waited): its final status.
    Ended(Value),
    /// The subscriber went away.
    Gone,
}

/// Waits until task `task_id` has a run after its first `runs` (the peer's next message), or
/// became terminal, or the subscriber went away.
async fn next_run(
    a2a: &Arc<A2a>,
    caller: &A2aCaller,
    wire: Wire,
    task_id: &str,
    runs: usize,
    tx: &tokio::sync::mpsc::Sender<(Value, bool)>,
) -> Result<Waited, RpcError> {
    let mut steps = super::poll_steps();
    loop {
        let step = steps.next().unwrap_or(super::POLL_STEP_MAX);
        tokio::select! {
            () = tokio::time::sleep(step) => {}
            () = tx.closed() => return Ok(Waited::Gone),
        }
        let (task, all) = a2a.load(caller, task_id).await?;
        if all.len() > runs
            && let Some(last) = all.last()
        {
            return Ok(Waited::Run(last.run_id.clone(), last.state, all.len()));
        }
        let (now, unknown) = wire::task_state(&task.state, all.last());
        if state::is_terminal(now) {
            let status = wire.status(task_id, &task.context_id, now, unknown, all.last());
            return Ok(Waited::Ended(wire.status_event(
                task_id,
                &task.context_id,
                status,
                true,
            )));
        }
    }
}

/// When a task's stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// When the task stops working, waiting for input included (`SendStreamingMessage`).
    Interrupted,
    /// When the task is terminal (`SubscribeToTask`): a task waiting for input is followed
    /// into its next message's run, so a subscriber sees it finish.
    Terminal,
}

/// The task's events as Server-Sent Events: the task first, then each change of its run's
/// state, the artifact and the final status; the stream ends as `until` says. `slot` is held
/// as long as the response body lives, and the events' task stops when the peer goes away.
#[allow(clippy::too_many_arguments)]
fn sse(
    a2a: Arc<A2a>,
    caller: A2aCaller,
    wire: Wire,
    binding: Binding,
    task_id: String,
    mut run_id: String,
    slot: StreamSlot,
    until: Until,
) -> Response {
    // Each event's data, and whether it is an error (an `error` event in HTTP+JSON).
    let (tx, rx) = tokio::sync::mpsc::channel::<(Value, bool)>(16);
    let rest = matches!(binding, Binding::Rest);
    tokio::spawn(async move {
        let emit = |result: Value| {
            let tx = tx.clone();
            let body = binding.result(result);
            async move { tx.send((body, false)).await.is_ok() }
        };
        let fail = |e: RpcError| {
            let tx = tx.clone();
            let body = binding.error_body(&e);
            async move {
                let _ = tx.send((body, true)).await;
            }
        };
        let (task, runs) = match a2a.load(&caller, &task_id).await {
            Ok(t) => t,
            Err(e) => return fail(e).await,
        };
        let context_id = task.context_id.clone();
        if !emit(wire.task_event(wire.task(&task, &runs, None, false))).await {
            return;
        }
        // The task event told the run's state as it was: only changes from it follow.
        let mut seen = runs.last().map_or(RunState::Accepted, |r| r.state);
        let mut told_runs = runs.len();
        loop {
            // The run ended and the task waits for input (subscribed then, or it came to it):
            // a subscriber follows it into the run of the peer's next message.
            if until == Until::Terminal && seen.is_final() {
                match next_run(&a2a, &caller, wire, &task_id, told_runs, &tx).await {
                    Ok(Waited::Run(run, state, count)) => {
                        (run_id, seen, told_runs) = (run, state, count)
                    }
                    Ok(Waited::Ended(last)) => {
                        let _ = emit(last).await;
                        return;
                    }
                    Ok(Waited::Gone) => return,
                    Err(e) => return fail(e).await,
                }
            }
            let next = a2a.next_state(&run_id, seen, std::time::Duration::from_secs(3600));
            let run = tokio::select! {
                run = next => match run {
                    Ok(r) => r,
                    Err(e) => return fail(e).await,
                },
                // The peer went away (the body, and its slot, were dropped).
                () = tx.closed() => return,
            };
            if run.state == seen && !run.state.is_final() {
                continue;
            }
            seen = run.state;
            let (now, unknown) = wire::run_state(&run);
            if !run.state.is_final() {
                if now != state::SUBMITTED {
                    let status = wire.status(&task_id, &context_id, now, unknown, Some(&run));
                    if !emit(wire.status_event(&task_id, &context_id, status, false)).await {
                        return;
                    }
                }
                continue;
            }
            // Final: the artifact, then the final status (from the task, which knows a cancel).
            let (task, runs) = match a2a.load(&caller, &task_id).await {
                Ok(t) => t,
                Err(e) => return fail(e).await,
            };
            let final_state = a2a.note_state(&task, &runs).await;
            if final_state == state::COMPLETED
                && let Some(reply) = &run.reply
                && !emit(wire.artifact_event(
                    &task_id,
                    &context_id,
                    wire.artifact(&format!("{task_id}-reply"), reply),
                ))
                .await
            {
                return;
            }
            for artifact in wire.file_artifacts(&task, Some(&run.run_id)) {
                if !emit(wire.artifact_event(&task_id, &context_id, artifact)).await {
                    return;
                }
            }
            let (st, unknown) = wire::task_state(&task.state, runs.last());
            let status = wire.status(&task_id, &context_id, st, unknown, runs.last());
            let waits = until == Until::Terminal && !state::is_terminal(st);
            if !emit(wire.status_event(&task_id, &context_id, status, !waits)).await || !waits {
                return;
            }
            told_runs = told_runs.max(runs.len());
        }
    });
    let events = futures_util::stream::unfold((rx, slot), move |(mut rx, slot)| async move {
        let (next, error) = rx.recv().await?;
        let event = Event::default().data(next.to_string());
        let event = if error && rest {
            event.event("error")
        } else {
            event
        };
        Some((Ok::<_, Infallible>(event), (rx, slot)))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
