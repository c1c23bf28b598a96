//! The Access endpoints (access.md, "HTTP API"): `POST /v1/inbound` (signed by a channel
//! account), `POST /v1/route` and `GET /v1/plan` (operator token). Every response that used a
//! routing plan names its generation in `X-Deepcli-Plan-Generation`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{Access, AccessError};
use crate::routing::RouteInput;

pub const GENERATION_HEADER: &str = "x-deepcli-plan-generation";
pub const SIGNATURE_HEADER: &str = "x-deepcli-signature";

#[derive(Clone)]
struct Ctx {
    access: Arc<Access>,
    token: Arc<str>,
}

/// The Access routes, for the controller (or `access serve`) to mount.
pub fn router(access: Arc<Access>, token: Arc<str>) -> Router {
    Router::new()
        .route("/v1/inbound", post(inbound))
        .route("/v1/route", post(route))
        .route("/v1/plan", get(plan))
        .with_state(Ctx { access, token })
}

/// Compares in constant time (tokens, signatures).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `Authorization: Bearer <operator token>`, or the 401 that says how to get it.
pub fn operator(token: &str, headers: &HeaderMap) -> Result<(), Response> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(()),
        _ => Err(json_response(
            StatusCode::UNAUTHORIZED,
            None,
            json!({"error": "missing or wrong operator token: send `Authorization: Bearer <token>` (DEEPCLI_OPERATOR_TOKEN or <state>/operator-token)"}),
        )),
    }
}

fn json_response(status: StatusCode, generation: Option<u64>, body: Value) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(g) = generation {
        response
            .headers_mut()
            .insert(GENERATION_HEADER, HeaderValue::from(g));
    }
    response
}

/// Reads the body up to the limit; over it, a 413 that says the limit.
async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, AccessError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        AccessError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over the limit of {limit} bytes"),
        )
        .with("limit", limit)
    })
}

async fn inbound(State(cx): State<Ctx>, headers: HeaderMap, body: Body) -> Response {
    let access = &cx.access;
    let mut bytes = axum::body::Bytes::new();
    let (generation, outcome) = match read_body(body, access.settings.body_limit).await {
        Err(e) => (None, Err(e)),
        Ok(read) => {
            bytes = read;
            let signature = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
            access.inbound(&bytes, signature).await
        }
    };
    let (status, body) = match outcome {
        Ok(body) if body["reply"].is_null() && body["duplicate"] == false => {
            (StatusCode::ACCEPTED, body)
        }
        Ok(body) => (StatusCode::OK, body),
        Err(e) => (e.status, e.body),
    };
    access.metrics.request("inbound", status.as_u16());
    if status.is_client_error() || status.is_server_error() {
        // A refusal is logged on the channel the body names, when it names one.
        let channel = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| Some(v.get("channel")?.as_str()?.to_string()));
        if let Some(channel) = channel {
            let error = body["error"].as_str().unwrap_or("-");
            access
                .log_channel(&channel, &format!("{} {error}", status.as_u16()))
                .await;
        }
    } else if let Some(channel) = body["route"]["channel"].as_str() {
        let route = &body["route"];
        let line = format!(
            "{} account={} session={} agent={} matchedBy={}{}",
            status.as_u16(),
            route["accountId"].as_str().unwrap_or("-"),
            body["sessionKey"].as_str().unwrap_or("-"),
            route["agentId"].as_str().unwrap_or("-"),
            route["matchedBy"].as_str().unwrap_or("-"),
            if body["duplicate"] == true {
                " duplicate"
            } else {
                ""
            },
        );
        access.log_channel(channel, &line).await;
    }
    json_response(status, generation, body)
}

async fn route(State(cx): State<Ctx>, headers: HeaderMap, body: Body) -> Response {
    if let Err(denied) = operator(&cx.token, &headers) {
        cx.access.metrics.request("route", 401);
        return denied;
    }
    let access = &cx.access;
    let response = match read_body(body, access.settings.body_limit).await {
        Err(e) => json_response(e.status, None, e.body),
        Ok(bytes) => match (access.plan(), serde_json::from_slice::<RouteInput>(&bytes)) {
            (None, _) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                json!({"error": "no routing plan is in force yet: the first apply has not finished"}),
            ),
            (Some(plan), Err(e)) => json_response(
                StatusCode::BAD_REQUEST,
                Some(plan.generation),
                json!({"error": format!("not a route input: {e}")}),
            ),
            (Some(plan), Ok(input)) => {
                let result = plan.routing.resolve(&input);
                access.metrics.route(result.matched_by.as_str());
                json_response(
                    StatusCode::OK,
                    Some(plan.generation),
                    serde_json::to_value(&result).unwrap_or_default(),
                )
            }
        },
    };
    access.metrics.request("route", response.status().as_u16());
    response
}

async fn plan(State(cx): State<Ctx>, headers: HeaderMap) -> Response {
    if let Err(denied) = operator(&cx.token, &headers) {
        return denied;
    }
    match cx.access.plan() {
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            json!({"error": "no routing plan is in force yet"}),
        ),
        Some(plan) => json_response(
            StatusCode::OK,
            Some(plan.generation),
            json!({
                "generation": plan.generation,
                "contentHash": plan.content_hash,
                "configHash": plan.config_hash,
                "loadedAt": plan.loaded_at,
                "agents": plan.agents,
                "bindings": plan.bindings,
                "accounts": plan.accounts.len(),
            }),
        ),
    }
}
