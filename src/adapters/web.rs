//! Where adapters meet HTTP on the controller's listener: `POST /v1/slack/<account>/events`
//! (Slack's Events API, v0 signature, 5-minute replay window, `url_verification`),
//! `POST /v1/slack/<account>/interactive` (a click on an approval's button, signed alike) and
//! `POST /v1/telegram/<account>/webhook` (`X-Telegram-Bot-Api-Secret-Token` in constant
//! time). An event is recorded, then acknowledged at once; delivery runs behind the
//! conversation's lane.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::IgnoredAny;
use serde_json::json;
use subtle::ConstantTimeEq;

use super::pipeline::NotTaken;
use super::{AdapterCx, RunningAccount};
use crate::platform::slack::{self as api, Challenge, Payload};
use crate::platform::telegram::Update;

impl AdapterCx {
    /// Makes a running account reachable over HTTP (webhook and events modes).
    pub(super) fn register(&self, running: &Arc<RunningAccount>) {
        if let Ok(mut endpoints) = self.endpoints.write() {
            endpoints.insert(running.spec.key(), running.clone());
        }
    }

    fn endpoint(&self, channel: &str, account: &str) -> Option<Arc<RunningAccount>> {
        let account = crate::ids::account_id(account).into_owned();
        self.endpoints
            .read()
            .ok()?
            .get(&crate::ids::AccountKey::new(channel, account))
            .cloned()
    }
}

/// The adapters' routes, for the controller to mount.
pub(crate) fn router(cx: Arc<AdapterCx>) -> Router {
    Router::new()
        .route("/v1/slack/{account}/events", post(slack_events))
        .route("/v1/slack/{account}/interactive", post(slack_interactive))
        .route("/v1/telegram/{account}/webhook", post(telegram_webhook))
        .with_state(cx)
}

fn refuse(status: StatusCode, error: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": error.into()}))).into_response()
}

async fn body_of(cx: &AdapterCx, body: Body) -> Result<axum::body::Bytes, Response> {
    let settings = &cx.access.settings;
    crate::access::http::read_body(body, settings.body_limit, settings.idle_timeout)
        .await
        .map_err(IntoResponse::into_response)
}

async fn telegram_webhook(
    State(cx): State<Arc<AdapterCx>>,
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
    if !bool::from(given.ct_eq(secret.expose().as_bytes())) {
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
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not a JSON update");
    };
    // JSON that is no update (a list, a number) is one without an `update_id`.
    let update = match serde_json::from_str::<Update>(text) {
        Ok(update) => update,
        Err(_) if serde_json::from_str::<IgnoredAny>(text).is_ok() => Update::default(),
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "the body is not a JSON update"),
    };
    match super::telegram::take(&running, update, text).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e @ NotTaken::NoId(_)) => refuse(StatusCode::BAD_REQUEST, e.to_string()),
        // Not recorded: Telegram delivers it again.
        Err(e @ NotTaken::NotRecorded(_)) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// A Slack request to `account`'s endpoint, its signature verified (v0, 5-minute window):
/// the account and the body, or the refusal.
async fn signed_slack(
    cx: &AdapterCx,
    account: &str,
    what: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<RunningAccount>, axum::body::Bytes), Response> {
    let nobody = || {
        refuse(
            StatusCode::NOT_FOUND,
            format!("no Slack account takes {what} here"),
        )
    };
    let running = cx.endpoint("slack", account).ok_or_else(nobody)?;
    let Some(Ok(secret)) = &running.spec.signing_secret else {
        return Err(nobody());
    };
    let bytes = body_of(cx, body).await?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = jiff::Timestamp::now().as_second();
    if let Err(why) = api::verify(
        secret.expose().as_bytes(),
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &bytes,
        now,
    ) {
        running
            .log(&format!("refused {what}=slack why={why}"))
            .await;
        return Err(refuse(StatusCode::UNAUTHORIZED, why));
    }
    Ok((running, bytes))
}

/// Slack's interactivity (a click on an approval's button): a signed form whose `payload` is
/// the interaction's JSON, recorded and acknowledged like an event.
async fn slack_interactive(
    State(cx): State<Arc<AdapterCx>>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (running, bytes) = match signed_slack(&cx, &account, "interactions", &headers, body).await {
        Ok(signed) => signed,
        Err(refused) => return refused,
    };
    let Some(text) = form_urlencoded::parse(&bytes)
        .find(|(key, _)| key == "payload")
        .map(|(_, value)| value.into_owned())
    else {
        return refuse(StatusCode::BAD_REQUEST, "no `payload` in the form");
    };
    let Ok(payload) = serde_json::from_str::<Payload>(&text) else {
        return refuse(StatusCode::BAD_REQUEST, "the `payload` is not JSON");
    };
    if super::slack::click(&payload).is_none() {
        // Not one of deepcli's buttons: acknowledged, nothing to do.
        return StatusCode::OK.into_response();
    }
    match super::slack::take(&running, payload, &text).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

async fn slack_events(
    State(cx): State<Arc<AdapterCx>>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (running, bytes) = match signed_slack(&cx, &account, "events", &headers, body).await {
        Ok(signed) => signed,
        Err(refused) => return refused,
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    // JSON that is no payload (a list, a number) has no type: acknowledged like one unknown.
    let payload = match serde_json::from_str::<Payload>(text) {
        Ok(payload) => payload,
        Err(_) if serde_json::from_str::<IgnoredAny>(text).is_ok() => Payload::default(),
        Err(_) => return refuse(StatusCode::BAD_REQUEST, "the body is not JSON"),
    };
    match payload.kind.as_deref() {
        Some("url_verification") => axum::Json(Challenge {
            challenge: payload.challenge.as_deref(),
        })
        .into_response(),
        Some("event_callback") => match super::slack::take(&running, payload, text).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        },
        // Rate-limit notices, app uninstalls…: acknowledged, nothing to hand in.
        _ => StatusCode::OK.into_response(),
    }
}
