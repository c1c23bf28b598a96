//! The controller's HTTP surface so far: `GET /healthz`, `GET /v1/status` and `GET /metrics`
//! (operator token), the operator's `/v1/approvals` (approvals.md) and `POST /rpc`. The Access
//! endpoints join it with the Access layer.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::Shared;

fn authorized(shared: &Shared, headers: &HeaderMap) -> Result<(), Response> {
    crate::access::http::operator(&shared.token, headers)
}

async fn status(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    Json(shared.snapshot()).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    let s = shared.snapshot();
    let ready = s
        .runtimes
        .iter()
        .filter(|r| r.status == crate::runtime::Phase::Ready)
        .count();
    let text = format!(
        "# TYPE deepcli_reconciles_total counter\ndeepcli_reconciles_total {}\n\
         # TYPE deepcli_config_rejections_total counter\ndeepcli_config_rejections_total {}\n\
         # TYPE deepcli_config_rejected gauge\ndeepcli_config_rejected {}\n\
         # TYPE deepcli_routing_generation gauge\ndeepcli_routing_generation {}\n\
         # TYPE deepcli_runtimes_ready gauge\ndeepcli_runtimes_ready {ready}\n\
         # TYPE deepcli_runtimes gauge\ndeepcli_runtimes {}\n\
         # TYPE deepcli_runtime_restarts_total counter\ndeepcli_runtime_restarts_total {}\n\
         # TYPE deepcli_config_file_events_total counter\n\
         deepcli_config_file_events_total{{kind=\"change\"}} {}\n\
         deepcli_config_file_events_total{{kind=\"ignored\"}} {}\n",
        s.reconciles,
        s.rejections,
        u8::from(s.rejected.is_some()),
        s.routing_generation.unwrap_or(0),
        s.runtimes.len(),
        s.runtimes.iter().map(|r| r.restarts).sum::<u64>(),
        shared.file_events.changes.load(Relaxed),
        shared.file_events.ignored.load(Relaxed),
    );
    let mut text = text;
    shared.access.metrics.render(&mut text);
    crate::adapters::render_metrics(&shared.adapters.live, &mut text);
    shared.hub.render_metrics(&mut text);
    if let Ok(doors) = shared.doors.lock() {
        doors.render_metrics(&mut text);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `POST /rpc`: the operator JSON-RPC (management.md). Writes edit the files; the watcher
/// then applies them like any other edit.
async fn rpc(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    let settings = &shared.access.settings;
    let body = match crate::access::http::read_body(
        body,
        settings.body_limit,
        settings.idle_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    if let Some(answer) = approvals_rpc(&shared, &body).await {
        return Json(answer).into_response();
    }
    if let Some(answer) = hub_rpc(&shared, &body).await {
        return Json(answer).into_response();
    }
    let cx = shared.manage.clone();
    match tokio::task::spawn_blocking(move || crate::manage::rpc::handle(&cx, &body)).await {
        Ok(Some(answer)) => Json(answer).into_response(),
        // Only notifications: JSON-RPC answers nothing.
        Ok(None) => axum::http::StatusCode::NO_CONTENT.into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": format!("internal error: {e}")}})),
        )
            .into_response(),
    }
}

/// A single JSON-RPC request for `approvals/*` (approvals.md), which needs the running
/// approvals service: answered here.
async fn approvals_rpc(shared: &Arc<Shared>, body: &[u8]) -> Option<serde_json::Value> {
    use serde_json::json;
    let request: serde_json::Value = serde_json::from_slice(body).ok()?;
    let method = request["method"]
        .as_str()?
        .strip_prefix(crate::manage::rpc::PREFIX)?;
    let method = crate::approvals::OperatorMethod::parse(method)?;
    if request["jsonrpc"] != "2.0" {
        return None;
    }
    let id = request
        .get("id")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let params = request.get("params").cloned().unwrap_or(json!({}));
    Some(match shared.approvals.operator(method, params).await {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.rpc_code(), "message": e.to_string()}})
        }
    })
}

fn approvals_answer(
    outcome: Result<serde_json::Value, crate::approvals::ApprovalError>,
) -> Response {
    match outcome {
        Ok(doc) => Json(doc).into_response(),
        Err(e) => (
            axum::http::StatusCode::from_u16(e.http_status())
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
            Json(serde_json::json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}

/// `GET /v1/approvals?state=&agentId=&all=&limit=`: pending approvals (or others).
async fn approvals_list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    let mut params = serde_json::Map::new();
    for (k, v) in q {
        let value = match k.as_str() {
            "all" => serde_json::Value::Bool(v == "true" || v == "1"),
            "limit" => match v.parse::<u64>() {
                Ok(n) => n.into(),
                Err(_) => {
                    return approvals_answer(Err(crate::approvals::ApprovalError::Params(
                        format!("`limit` must be a number, not `{v}`"),
                    )));
                }
            },
            _ => v.into(),
        };
        params.insert(k, value);
    }
    approvals_answer(
        shared
            .approvals
            .operator(crate::approvals::OperatorMethod::List, params.into())
            .await,
    )
}

/// `GET /v1/approvals/{id}`: one approval and its events.
async fn approvals_show(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    approvals_answer(
        shared
            .approvals
            .operator(
                crate::approvals::OperatorMethod::Show,
                serde_json::json!({"id": id}),
            )
            .await,
    )
}

/// `POST /v1/approvals/{id}/approve` and `…/deny`, body `{"always": bool, "pattern": string,
/// "dryRun": bool}` (optional; approvals.md, "Rules").
async fn approvals_decide(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path((id, verb)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    let method = match verb.as_str() {
        "approve" => crate::approvals::OperatorMethod::Approve,
        "deny" => crate::approvals::OperatorMethod::Deny,
        other => {
            return approvals_answer(Err(crate::approvals::ApprovalError::Params(format!(
                "no `{other}` on an approval: POST …/approve or …/deny (a rule: POST /v1/approvals/rules/<id>/revoke)"
            ))));
        }
    };
    let mut params: serde_json::Value = if body.is_empty() {
        serde_json::json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            _ => {
                return approvals_answer(Err(crate::approvals::ApprovalError::Params(
                    "the body must be a JSON object, for example {\"always\": true}".to_string(),
                )));
            }
        }
    };
    params["id"] = id.into();
    approvals_answer(shared.approvals.operator(method, params).await)
}

/// `GET /v1/approvals/rules?agentId=&all=`: the `allow_always` rules.
async fn approvals_rules(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    let mut params =
        serde_json::json!({"all": q.get("all").is_some_and(|v| v == "true" || v == "1")});
    if let Some(agent) = q.get("agentId") {
        params["agentId"] = agent.clone().into();
    }
    approvals_answer(
        shared
            .approvals
            .operator(crate::approvals::OperatorMethod::Rules, params)
            .await,
    )
}

/// `POST /v1/approvals/rules/{id}/revoke`.
async fn approvals_revoke(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(denied) = authorized(&shared, &headers) {
        return denied;
    }
    approvals_answer(
        shared
            .approvals
            .operator(
                crate::approvals::OperatorMethod::Revoke,
                serde_json::json!({"ruleId": id}),
            )
            .await,
    )
}

/// A single JSON-RPC request for the Hub's operator methods (`sessions/*`, `runs/*`), which
/// need the running Hub: answered here; anything else goes to the management service.
async fn hub_rpc(shared: &Shared, body: &[u8]) -> Option<serde_json::Value> {
    use serde_json::json;
    let request: serde_json::Value = serde_json::from_slice(body).ok()?;
    let method = request["method"]
        .as_str()?
        .strip_prefix(crate::manage::rpc::PREFIX)?;
    if !(method.starts_with("sessions/") || method.starts_with("runs/"))
        || request["jsonrpc"] != "2.0"
    {
        return None;
    }
    let id = request
        .get("id")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let params = request.get("params").cloned().unwrap_or(json!({}));
    let session_key = (method == "sessions/show")
        .then(|| params["sessionKey"].as_str().map(str::to_string))
        .flatten();
    Some(match shared.hub.operator(method, params).await {
        Ok(mut result) => {
            // A platform thread's discussion (adapters.md, seed 001) is the adapters' to tell.
            if let Some(key) = session_key {
                let adapters = shared.adapters.clone();
                let threads = tokio::task::spawn_blocking(move || {
                    crate::adapters::discussions(&adapters, &key)
                })
                .await
                .unwrap_or_default();
                if !threads.is_empty() {
                    result["discussions"] = threads.into();
                }
            }
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
        Err(e) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.rpc_code(), "message": e.to_string()}})
        }
    })
}

pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/v1/status", get(status))
        .route("/metrics", get(metrics))
        .route("/rpc", axum::routing::post(rpc))
        .route("/v1/approvals", get(approvals_list))
        .route("/v1/approvals/rules", get(approvals_rules))
        .route(
            "/v1/approvals/rules/{id}/revoke",
            axum::routing::post(approvals_revoke),
        )
        .route("/v1/approvals/{id}", get(approvals_show))
        .route(
            "/v1/approvals/{id}/{verb}",
            axum::routing::post(approvals_decide),
        )
        .with_state(shared.clone())
        .merge(crate::access::http::router(
            shared.access.clone(),
            Arc::from(shared.token.as_str()),
        ))
        .merge(crate::adapters::web::router(shared.adapters.clone()))
        .merge(crate::hub::http::router(
            shared.hub.clone(),
            Arc::from(shared.token.as_str()),
        ))
        .merge(crate::a2a::http::router(shared.a2a.clone()))
        .fallback(crate::access::http::no_such_endpoint)
        .method_not_allowed_fallback(crate::access::http::wrong_method);
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let idle = shared.access.settings.idle_timeout;
    crate::http_server::serve(listener, app, idle, stop).await;
}
