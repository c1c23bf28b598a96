//! The controller's HTTP surface so far: `GET /healthz`, and behind the operator token (checked
//! once, in [`crate::access::http::require_operator`]) `GET /v1/status`, `GET /metrics`, the
//! operator's `/v1/approvals` (approvals.md) and `POST /rpc`. The Access, Hub, adapter and A2A
//! endpoints are merged in.

use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::Shared;
use crate::approvals::{
    ApprovalError, ApprovalRequest, IdParams, ListParams, RevokeParams, RulesParams,
};
use crate::console::{AdapterRow, AgentRow, Overview, RejectedEdit};

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.snapshot()).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use std::sync::atomic::Ordering::Relaxed;
    let s = shared.snapshot();
    let ready = s
        .runtimes
        .iter()
        .filter(|r| r.status == crate::runtime::Phase::Ready)
        .count();
    let mut registry = crate::metrics::Registry::default();
    registry.register(
        "deepcli_reconciles",
        "Reconciles that applied (or found nothing to apply)",
        ConstCounter::new(s.reconciles),
    );
    registry.register(
        "deepcli_config_rejections",
        "Distinct edits rejected as invalid",
        ConstCounter::new(s.rejections),
    );
    registry.register(
        "deepcli_config_rejected",
        "1 while the config on disk is rejected",
        ConstGauge::new(i64::from(s.rejected.is_some())),
    );
    registry.register(
        "deepcli_routing_generation",
        "The routing plan generation in force",
        ConstGauge::new(s.routing_generation.unwrap_or(0)),
    );
    registry.register(
        "deepcli_runtimes_ready",
        "Runtimes supervised that are ready",
        ConstGauge::new(ready as i64),
    );
    registry.register(
        "deepcli_runtimes",
        "Runtimes supervised",
        ConstGauge::new(s.runtimes.len() as i64),
    );
    registry.register(
        "deepcli_runtime_restarts",
        "Restarts of the runtimes supervised now",
        ConstCounter::new(s.runtimes.iter().map(|r| r.restarts).sum::<u64>()),
    );
    registry.register(
        "deepcli_config_file_events",
        "Events on the config files: a change, or ignored",
        crate::metrics::Rows(vec![
            (
                [("kind", "change")],
                ConstCounter::new(shared.file_events.changes.load(Relaxed)),
            ),
            (
                [("kind", "ignored")],
                ConstCounter::new(shared.file_events.ignored.load(Relaxed)),
            ),
        ]),
    );
    registry.register(
        "deepcli_state_pruned_rows",
        "Rows state.retention deleted since start, by kind",
        crate::metrics::Rows(
            s.pruned
                .iter()
                .map(|(kind, rows)| ([("kind", kind.clone())], ConstCounter::new(*rows)))
                .collect(),
        ),
    );
    shared.access.metrics.register(&mut registry);
    crate::adapters::register_metrics(&shared.adapters.live, &mut registry);
    shared.hub.register_metrics(&mut registry);
    shared.a2a.register_metrics(&mut registry);
    if let Ok(doors) = shared.doors.lock() {
        doors.register_metrics(&mut registry);
    }
    crate::metrics::respond(&registry, &headers)
}

/// `POST /rpc`: the operator JSON-RPC (management.md, hub.md, approvals.md), read once;
/// each call answered by its own service. Writes edit the files; the watcher then applies
/// them like any other edit.
async fn rpc(State(shared): State<Arc<Shared>>, body: axum::body::Body) -> Response {
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
    match super::operator_rpc::handle(&shared, &body).await {
        Some(answer) => Json(answer).into_response(),
        // Only notifications: JSON-RPC answers nothing.
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// The HTTP status of an approvals call that failed.
fn status_of(e: &ApprovalError) -> StatusCode {
    match e {
        ApprovalError::NotFound(_) | ApprovalError::NoRule(_) => StatusCode::NOT_FOUND,
        ApprovalError::NotPending { .. } | ApprovalError::Voided { .. } => StatusCode::CONFLICT,
        ApprovalError::Refused(_) => StatusCode::FORBIDDEN,
        ApprovalError::Params(_) => StatusCode::BAD_REQUEST,
        ApprovalError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn approvals_answer(
    shared: &Shared,
    request: Result<ApprovalRequest, ApprovalError>,
) -> Response {
    let outcome = match request {
        Ok(request) => shared.approvals.operator(request).await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => (
            status_of(&e),
            Json(serde_json::json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}

/// A query's flag: `true` or `1`.
fn flag(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "true" || v == "1")
}

/// `GET /v1/approvals?state=&agentId=&all=&limit=`: pending approvals (or others).
async fn approvals_list(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    approvals_answer(&shared, list_params(&q).map(ApprovalRequest::List)).await
}

/// The list's params from its query; a key it does not take is refused as in JSON-RPC.
fn list_params(q: &HashMap<String, String>) -> Result<ListParams, ApprovalError> {
    const KEYS: [&str; 4] = ["state", "agentId", "all", "limit"];
    if let Some(unknown) = q.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ApprovalError::Params(format!(
            "invalid params for `approvals/list`: unknown field `{unknown}`, expected one of `state`, `agentId`, `all`, `limit`"
        )));
    }
    let limit =
        match q.get("limit") {
            None => None,
            Some(v) => Some(v.parse::<usize>().map_err(|_| {
                ApprovalError::Params(format!("`limit` must be a number, not `{v}`"))
            })?),
        };
    Ok(ListParams {
        state: q.get("state").cloned(),
        agent_id: q.get("agentId").cloned(),
        all: flag(q.get("all")),
        limit,
    })
}

/// `GET /v1/approvals/{id}`: one approval and its events.
async fn approvals_show(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    approvals_answer(&shared, Ok(ApprovalRequest::Show(IdParams { id }))).await
}

/// `POST /v1/approvals/{id}/approve` and `…/deny`, body `{"always": bool, "pattern": string,
/// "dryRun": bool}` (optional; approvals.md, "Rules").
async fn approvals_decide(
    State(shared): State<Arc<Shared>>,
    Path((id, verb)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    approvals_answer(&shared, decide_request(id, &verb, &body)).await
}

fn decide_request(id: String, verb: &str, body: &[u8]) -> Result<ApprovalRequest, ApprovalError> {
    let method = match verb {
        "approve" => "approvals/approve",
        "deny" => "approvals/deny",
        other => {
            return Err(ApprovalError::Params(format!(
                "no `{other}` on an approval: POST …/approve or …/deny (a rule: POST /v1/approvals/rules/<id>/revoke)"
            )));
        }
    };
    let mut params = if body.is_empty() {
        serde_json::Map::new()
    } else {
        match serde_json::from_slice(body) {
            Ok(serde_json::Value::Object(params)) => params,
            _ => {
                return Err(ApprovalError::Params(
                    "the body must be a JSON object, for example {\"always\": true}".to_string(),
                ));
            }
        }
    };
    params.insert("id".into(), id.into());
    ApprovalRequest::parse(method, params.into()).unwrap_or_else(|| {
        Err(ApprovalError::Internal(format!(
            "`{method}` is not an approvals method"
        )))
    })
}

/// `GET /v1/approvals/rules?agentId=&all=`: the `allow_always` rules.
async fn approvals_rules(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let params = RulesParams {
        agent_id: q.get("agentId").cloned(),
        all: flag(q.get("all")),
    };
    approvals_answer(&shared, Ok(ApprovalRequest::Rules(params))).await
}

/// `POST /v1/approvals/rules/{id}/revoke`.
async fn approvals_revoke(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let request = ApprovalRequest::Revoke(RevokeParams { rule_id: id });
    approvals_answer(&shared, Ok(request)).await
}

/// The web console (console.md), reading the status as [`overview`] makes it.
fn console(shared: &Arc<Shared>) -> axum::Router {
    let status = shared.clone();
    crate::console::router(crate::console::Sources {
        access: shared.access.clone(),
        hub: shared.hub.clone(),
        approvals: shared.approvals.clone(),
        overview: Box::new(move || overview(&status.snapshot(), &status.access.queue_depths())),
        token: Arc::from(shared.token.as_str()),
    })
}

/// The console's overview of `/v1/status` (the same [`super::status::ControllerStatus`]),
/// with each agent's queue.
fn overview(s: &super::status::ControllerStatus, queues: &HashMap<String, usize>) -> Overview {
    use crate::runtime::budget_report::Usage;
    let limit = |l: Option<String>| l.unwrap_or_else(|| "none".into());
    let known = |u: Usage<String>| match u {
        Usage::Known(v) => v,
        Usage::Unknown => "unknown".into(),
    };
    let health = s.health();
    let mut agents: Vec<AgentRow> = s
        .runtimes
        .iter()
        .map(|r| AgentRow {
            agent_id: r.agent_id.clone(),
            kind: r.kind.clone(),
            state: r.status.to_string(),
            restarts: r.restarts,
            last_error: r.last_error.clone(),
            sandbox: r.sandbox.clone().unwrap_or_else(|| "-".into()),
            model: r.model.as_ref().map_or_else(
                || "-".into(),
                |m| match (&m.applied, &m.why) {
                    (Some(applied), None) => applied.clone(),
                    (Some(applied), Some(why)) => format!("{applied} (wanted {}: {why})", m.wanted),
                    (None, why) => format!(
                        "{} (not applied{})",
                        m.wanted,
                        why.as_deref().map_or(String::new(), |w| format!(": {w}"))
                    ),
                },
            ),
            queue: queues.get(&r.agent_id).copied().unwrap_or(0),
            budgets: r.budgets.as_ref().map_or_else(Vec::new, |b| {
                vec![
                    (
                        "turns this hour".into(),
                        b.turns_last_hour.to_string(),
                        limit(b.turns_per_hour.map(|n| n.to_string())),
                    ),
                    (
                        "turns running".into(),
                        b.running_turns.to_string(),
                        limit(b.concurrent_turns.map(|n| n.to_string())),
                    ),
                    (
                        "spawns this hour".into(),
                        b.spawns_last_hour.to_string(),
                        limit(b.spawns_per_hour.map(|n| n.to_string())),
                    ),
                    (
                        "tokens today".into(),
                        known(match b.tokens_today {
                            Usage::Known(n) => Usage::Known(n.to_string()),
                            Usage::Unknown => Usage::Unknown,
                        }),
                        limit(b.tokens_per_day.map(|n| n.to_string())),
                    ),
                    (
                        "cost today (USD)".into(),
                        known(match b.cost_today_usd {
                            Usage::Known(n) => Usage::Known(format!("{n:.2}")),
                            Usage::Unknown => Usage::Unknown,
                        }),
                        limit(b.cost_per_day_usd.map(|n| format!("{n:.2}"))),
                    ),
                ]
            }),
        })
        .collect();
    // The agents that run no runtime here (none configured, or not started yet).
    let running: std::collections::HashSet<&str> =
        s.runtimes.iter().map(|r| r.agent_id.as_str()).collect();
    agents.extend(
        s.agents
            .iter()
            .filter(|id| !running.contains(id.as_str()))
            .map(|id| AgentRow {
                agent_id: id.clone(),
                kind: "-".into(),
                state: "no runtime".into(),
                sandbox: "-".into(),
                model: "-".into(),
                queue: queues.get(id).copied().unwrap_or(0),
                ..AgentRow::default()
            }),
    );
    let adapters = s
        .channels
        .iter()
        .flat_map(|(channel, live)| {
            live.accounts.iter().map(move |(account, a)| AdapterRow {
                channel: channel.clone(),
                account: account.clone(),
                inbound: a.inbound.clone(),
                reason: a.reason.clone(),
                connection: a.adapter.as_ref().map_or_else(
                    || "no adapter (signed POSTs to /v1/inbound)".into(),
                    |d| format!("{} since {}", d.state.as_str(), d.since),
                ),
                last_error: a.adapter.as_ref().and_then(|d| d.last_error.clone()),
                last_event: a
                    .adapter
                    .as_ref()
                    .and_then(|d| d.last_event_at.clone())
                    .unwrap_or_else(|| "-".into()),
            })
        })
        .collect();
    Overview {
        health: match health.status {
            super::status::HealthStatus::Healthy => "healthy",
            super::status::HealthStatus::Degraded => "degraded",
        },
        reasons: health.reasons,
        config_hash: s.config_hash.clone(),
        applied_at: s.applied_at.clone(),
        routing_generation: s.routing_generation,
        rejected: s.rejected.as_ref().map(|r| RejectedEdit {
            since: r.since.clone(),
            diagnostics: r.diagnostics.clone(),
        }),
        blocked: s.blocked.clone(),
        agents,
        adapters,
    }
}

/// A push notification from a remote A2A agent that cannot stream, for one of its tasks
/// (docs/a2a.md "Connecting a remote A2A agent"): taken when the webhook is open and the
/// `X-A2A-Notification-Token` is the one deepcli gave it.
async fn remote_push(
    State(shared): State<Arc<Shared>>,
    Path(hook): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    use crate::runtime::a2a::PushTaken;
    let token = headers
        .get("x-a2a-notification-token")
        .and_then(|v| v.to_str().ok());
    match shared.remote_push.take(&hook, token, &body) {
        PushTaken::Taken => StatusCode::OK,
        PushTaken::NoSuchHook => StatusCode::NOT_FOUND,
        PushTaken::WrongToken => StatusCode::UNAUTHORIZED,
        PushTaken::NotAnUpdate => StatusCode::BAD_REQUEST,
    }
}

pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let operator = Router::new()
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
        );
    let app = crate::access::http::operator_only(operator, Arc::from(shared.token.as_str()))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            &format!("{}/{{hook}}", crate::runtime::a2a::PUSH_PATH),
            axum::routing::post(remote_push),
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
        .merge(crate::a2a::router(shared.a2a.clone()))
        .merge(console(&shared))
        .fallback(crate::access::http::no_such_endpoint)
        .method_not_allowed_fallback(crate::access::http::wrong_method);
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let idle = shared.access.settings.idle_timeout;
    crate::http_server::serve(listener, app, idle, stop).await;
}
