//! Where adapters meet HTTP on the controller's listener: `POST /v1/slack/<account>/events`
//! (Slack's Events API, v0 signature, 5-minute replay window, `url_verification`) and
//! `POST /v1/telegram/<account>/webhook` (`X-Telegram-Bot-Api-Secret-Token` in constant
//! time). An event is recorded, then acknowledged at once; delivery runs behind the
//! conversation's lane. Also [`hand_in`]: how every adapter hands an envelope to Access.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::{Cx, Running};

/// Attempts to hand in an envelope the Access layer cannot take now (a runtime starting, a
/// full queue): 1 s doubling, about a minute in all.
const HAND_IN_ATTEMPTS: u32 = 7;

/// Hands `envelope` to the Access door (`Caller::Adapter`) and returns its answer; `None` when
/// it was refused for good (logged on the channel by the door).
pub(super) async fn hand_in(running: &Arc<Running>, envelope: &Value) -> Option<Value> {
    let bytes = envelope.to_string().into_bytes();
    let mut wait = Duration::from_secs(1);
    for attempt in 1..=HAND_IN_ATTEMPTS {
        let (status, answer) = crate::access::http::hand_in(&running.cx.access, &bytes).await;
        if status.is_success() {
            return Some(answer);
        }
        let transient = status == StatusCode::SERVICE_UNAVAILABLE
            || status == StatusCode::TOO_MANY_REQUESTS
            || status.is_server_error();
        if !transient || attempt == HAND_IN_ATTEMPTS {
            tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, status = status.as_u16(), error = %answer["error"], "the Access layer refused an adapter's envelope");
            return None;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(16));
    }
    None
}

impl Cx {
    /// Makes a running account reachable over HTTP (webhook and events modes).
    pub(super) fn register(&self, running: &Arc<Running>) {
        if let Ok(mut endpoints) = self.endpoints.write() {
            endpoints.insert(running.spec.key(), running.clone());
        }
    }

    fn endpoint(&self, channel: &str, account: &str) -> Option<Arc<Running>> {
        let account = crate::ids::account_id(account).into_owned();
        self.endpoints
            .read()
            .ok()?
            .get(&(channel.to_string(), account))
            .cloned()
    }
}

/// The adapters' routes, for the controller to mount.
pub fn router(cx: Arc<Cx>) -> Router {
    Router::new()
        .route("/v1/slack/{account}/events", post(slack_events))
        .route("/v1/telegram/{account}/webhook", post(telegram_webhook))
        .with_state(cx)
}

fn refuse(status: StatusCode, error: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": error.into()}))).into_response()
}

async fn body_of(cx: &Cx, body: Body) -> Result<axum::body::Bytes, Response> {
    let settings = &cx.access.settings;
    crate::access::http::read_body(body, settings.body_limit, settings.idle_timeout)
        .await
        .map_err(IntoResponse::into_response)
}

async fn telegram_webhook(
    State(cx): State<Arc<Cx>>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Unknown account, not in webhook mode, or not connected: all alike to the caller.
    let Some(running) = cx.endpoint("telegram", &account) else {
        return refuse(
            StatusCode::NOT_FOUND,
            "no Telegram account takes webhooks here",
        );
    };
    let Some(Ok(secret)) = &running.spec.webhook_secret else {
        return refuse(
            StatusCode::NOT_FOUND,
            "no Telegram account takes webhooks here",
        );
    };
    let given = headers
        .get("x-telegram-bot-api-secret-token")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if !crate::access::http::constant_time_eq(given, secret.0.as_bytes()) {
        running
            .log("refused webhook=telegram why=wrong-secret-token")
            .await;
        return refuse(
            StatusCode::UNAUTHORIZED,
            "wrong or missing X-Telegram-Bot-Api-Secret-Token",
        );
    }
    let bytes = match body_of(&cx, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(update) = serde_json::from_slice::<Value>(&bytes) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not a JSON update");
    };
    match super::telegram::take(&running, update).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) if e.contains("update_id") => refuse(StatusCode::BAD_REQUEST, e),
        // Not recorded: Telegram delivers it again.
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

async fn slack_events(
    State(cx): State<Arc<Cx>>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(running) = cx.endpoint("slack", &account) else {
        return refuse(StatusCode::NOT_FOUND, "no Slack account takes events here");
    };
    let Some(Ok(secret)) = &running.spec.signing_secret else {
        return refuse(StatusCode::NOT_FOUND, "no Slack account takes events here");
    };
    let bytes = match body_of(&cx, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = jiff::Timestamp::now().as_second();
    if let Err(why) = super::slack::verify(
        secret.0.as_bytes(),
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &bytes,
        now,
    ) {
        running
            .log(&format!("refused events=slack why={why}"))
            .await;
        return refuse(StatusCode::UNAUTHORIZED, why);
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&bytes) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    match payload["type"].as_str() {
        Some("url_verification") => {
            axum::Json(json!({"challenge": payload["challenge"]})).into_response()
        }
        Some("event_callback") => match super::slack::take(&running, payload).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e),
        },
        // Rate-limit notices, app uninstalls…: acknowledged, nothing to hand in.
        _ => StatusCode::OK.into_response(),
    }
}
