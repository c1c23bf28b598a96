//! Slack (adapters.md, "Slack"): the Web API over HTTPS with the bot token. `mode: socket`
//! (default) opens a Socket Mode WebSocket with the app token (`apps.connections.open`),
//! acknowledges every envelope with its `envelope_id` once recorded, and connects again on a
//! `disconnect` message or a drop; `mode: http` takes the Events API on the controller's
//! listener ([`super::web`]). `auth.test` names the bot. Replies go by `chat.postMessage`, in
//! the thread. Seed 001's discussions between bots in one thread are enforced here: rounds
//! counted per thread in the state database, shared by every account of the workspace.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::outbound::{self, ATTEMPTS, MAX_RETRY_AFTER};
use super::store::{Thread, ThreadKey, ThreadState};
use super::{Identity, Running, Stop, Taken};
use crate::access::store::DeliveryKey;
use crate::config::model::{AdapterMode, ReplyToMode};

/// The longest reply piece: Slack's advice for `text` (it truncates at 40,000).
pub const TEXT_LIMIT: usize = 4000;

/// How old a signed request may be (replay protection).
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// `discussion` defaults (seed 001).
pub const MAX_ROUNDS: u32 = 8;
pub const CLOSE_MARKER: &str = "DISCUSSION_CLOSE";
pub const STALL_ROUNDS: u32 = 2;

/// Checks `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">` and that the
/// timestamp is within [`REPLAY_WINDOW_SECS`] of `now`.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), &'static str> {
    use hmac::Mac;
    let timestamp = timestamp.ok_or("missing X-Slack-Request-Timestamp")?;
    let at: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| "X-Slack-Request-Timestamp is not a number")?;
    if now.saturating_sub(at).saturating_abs() > REPLAY_WINDOW_SECS {
        return Err(
            "stale X-Slack-Request-Timestamp (more than 5 minutes off): refused as a replay",
        );
    }
    let given = signature
        .ok_or("missing X-Slack-Signature")?
        .trim()
        .strip_prefix("v0=")
        .and_then(hex)
        .ok_or("malformed X-Slack-Signature")?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
        .map_err(|_| "wrong X-Slack-Signature")?;
    mac.update(b"v0:");
    mac.update(timestamp.trim().as_bytes());
    mac.update(b":");
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| "wrong X-Slack-Signature")
}

/// `v0=<hex>` for `body` at `timestamp` (what Slack sends; the tests' sender signs with it).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    use hmac::Mac;
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    let mut out = String::from("v0=");
    for b in mac.finalize().into_bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A Web API failure.
#[derive(Debug)]
pub enum ApiError {
    /// `invalid_auth`, `not_authed`, `account_inactive`, `token_revoked`…
    Unauthorized(String),
    /// HTTP 429 with `Retry-After`.
    RateLimited(Duration),
    /// Any other `ok: false`.
    Refused(String),
    Transport(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Unauthorized(e) => write!(f, "the token was refused: {e}"),
            ApiError::RateLimited(w) => write!(f, "rate limited: retry after {} s", w.as_secs()),
            ApiError::Refused(e) => write!(f, "{e}"),
            ApiError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// Calls Web API `method` with `token` and a JSON body.
pub async fn call(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    method: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let request = http
        .post(format!("{base}/{method}"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30));
    // Slack takes JSON bodies for its write methods only: the others get a form.
    let request = if matches!(method, "chat.postMessage") {
        request.json(body)
    } else {
        let fields: Vec<(String, String)> = body
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_string),
                )
            })
            .collect();
        request.form(&fields)
    };
    let response = request
        .send()
        .await
        .map_err(|e| ApiError::Transport(super::transport_error(e)))?;
    if response.status().as_u16() == 429 {
        let wait = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1);
        return Err(ApiError::RateLimited(Duration::from_secs(wait)));
    }
    let status = response.status().as_u16();
    let answer: Value = response.json().await.map_err(|e| {
        ApiError::Transport(format!(
            "HTTP {status}, not a Web API answer: {}",
            super::transport_error(e)
        ))
    })?;
    if answer["ok"] == true {
        return Ok(answer);
    }
    let error = answer["error"]
        .as_str()
        .unwrap_or("unknown_error")
        .to_string();
    Err(match error.as_str() {
        "invalid_auth"
        | "not_authed"
        | "account_inactive"
        | "token_revoked"
        | "token_expired"
        | "not_allowed_token_type" => ApiError::Unauthorized(error),
        _ => ApiError::Refused(error),
    })
}

/// `auth.test`: the bot's identity.
pub async fn auth_test(
    http: &reqwest::Client,
    base: &str,
    token: &str,
) -> Result<Identity, ApiError> {
    let me = call(http, base, token, "auth.test", &json!({})).await?;
    Ok(Identity {
        bot_user_id: me["user_id"]
            .as_str()
            .ok_or_else(|| ApiError::Transport("auth.test answered without `user_id`".into()))?
            .to_string(),
        name: me["user"].as_str().map(str::to_string),
        bot_id: me["bot_id"].as_str().map(str::to_string),
        team_id: me["team_id"].as_str().map(str::to_string),
    })
}

fn bot_token(running: &Running) -> &str {
    running.spec.bot_token.as_ref().map_or("", |t| t.0.as_str())
}

fn stop(e: ApiError) -> Stop {
    match e {
        ApiError::Unauthorized(_) => Stop::Auth(e.to_string()),
        e => Stop::Failed(e.to_string()),
    }
}

/// One connection: until the socket ends (socket mode) or forever (http mode).
pub(super) async fn connect(running: &Arc<Running>) -> Stop {
    let http = &running.cx.http;
    let base = running.spec.api_base.as_str();
    let identity = match auth_test(http, base, bot_token(running)).await {
        Ok(i) => i,
        Err(e) => return stop(e),
    };
    if running.spec.mode == AdapterMode::Http {
        running.connected(identity);
        running.cx.register(running);
        running.log("connected mode=http").await;
        replay(running).await;
        return std::future::pending::<Stop>().await;
    }
    let app_token = match &running.spec.app_token {
        Some(Ok(t)) => t.0.clone(),
        _ => return Stop::Auth("socket mode needs a usable appToken".into()),
    };
    let opened = match call(http, base, &app_token, "apps.connections.open", &json!({})).await {
        Ok(o) => o,
        Err(e) => return stop(e),
    };
    let Some(url) = opened["url"].as_str() else {
        return Stop::Failed("apps.connections.open answered without a `url`".into());
    };
    let (socket, _) = match tokio::time::timeout(
        Duration::from_secs(15),
        tokio_tungstenite::connect_async(url),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Stop::Failed(format!("cannot open the Socket Mode WebSocket: {e}")),
        Err(_) => return Stop::Failed("the Socket Mode WebSocket did not open within 15 s".into()),
    };
    let (mut tx, mut rx) = socket.split();
    let mut identity = Some(identity);
    replay(running).await;
    loop {
        let next = match tokio::time::timeout(Duration::from_secs(120), rx.next()).await {
            Ok(n) => n,
            Err(_) => return Stop::Failed("the Socket Mode WebSocket was silent for 120 s".into()),
        };
        let message = match next {
            None => return Stop::Failed("the Socket Mode WebSocket closed".into()),
            Some(Err(e)) => return Stop::Failed(format!("the Socket Mode WebSocket failed: {e}")),
            Some(Ok(m)) => m,
        };
        let text = match message {
            Message::Text(t) => t.to_string(),
            Message::Close(_) => return Stop::Failed("the Socket Mode WebSocket closed".into()),
            Message::Ping(p) => {
                let _ = tx.send(Message::Pong(p)).await;
                continue;
            }
            _ => continue,
        };
        let Ok(frame) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        match frame["type"].as_str() {
            Some("hello") => {
                if let Some(identity) = identity.take() {
                    running.connected(identity);
                    running.log("connected mode=socket").await;
                }
            }
            Some("disconnect") => {
                let reason = frame["reason"].as_str().unwrap_or("unknown").to_string();
                return Stop::Failed(format!("Slack asked to reconnect ({reason})"));
            }
            Some("events_api") => {
                let payload = frame["payload"].clone();
                let taken = take(running, payload).await;
                if let Err(e) = &taken {
                    tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, error = %e, "an event could not be recorded; Slack delivers it again");
                    running.log(&format!("not-recorded error={e}")).await;
                }
                // Acknowledged once recorded: an event not recorded is delivered again.
                if taken.is_ok()
                    && let Some(envelope_id) = frame["envelope_id"].as_str()
                {
                    let ack = json!({"envelope_id": envelope_id}).to_string();
                    if let Err(e) = tx.send(Message::Text(ack.into())).await {
                        return Stop::Failed(format!("cannot acknowledge an event: {e}"));
                    }
                }
            }
            _ => {
                // Other envelopes (slash commands, interactivity) are acknowledged unread.
                if let Some(envelope_id) = frame["envelope_id"].as_str() {
                    let ack = json!({"envelope_id": envelope_id}).to_string();
                    let _ = tx.send(Message::Text(ack.into())).await;
                }
            }
        }
    }
}

async fn replay(running: &Arc<Running>) {
    for (taken, payload) in running.pending().await {
        dispatch(running, taken, payload);
    }
}

/// Takes one `event_callback`: recorded (a redelivery of the same `event_id` is not taken
/// twice), then handled in its conversation's lane.
pub async fn take(running: &Arc<Running>, payload: Value) -> Result<(), String> {
    let id = payload["event_id"]
        .as_str()
        .ok_or("the event has no `event_id`")?
        .to_string();
    if running.take_one("event", &id, &payload).await? {
        dispatch(running, Taken::fresh(id), payload);
    }
    Ok(())
}

/// An event as an envelope, and where its reply goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    pub lane: String,
    pub envelope: Value,
    pub conversation: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub team_id: String,
    pub is_bot: bool,
    pub text: String,
}

/// Maps an `event_callback` (adapters.md, "Event → envelope"), or says why it is not a
/// message to hand in.
pub fn map(
    payload: &Value,
    identity: &Identity,
    channel: &str,
    account: &str,
) -> Result<Mapped, &'static str> {
    let event = &payload["event"];
    match (event["type"].as_str(), event["subtype"].as_str()) {
        (
            Some("message"),
            None | Some("bot_message") | Some("thread_broadcast") | Some("file_share"),
        ) => {}
        (Some("app_mention"), _) => {}
        (Some("message"), Some(_)) => {
            return Err("a message edit, deletion, join or other change (ignored)");
        }
        _ => return Err("not a message event"),
    }
    let conversation = event["channel"]
        .as_str()
        .ok_or("the event names no channel")?;
    let ts = event["ts"].as_str().ok_or("the event has no ts")?;
    let text = event["text"].as_str().unwrap_or_default();
    let kind = match event["channel_type"].as_str() {
        Some("im") => "direct",
        Some("mpim") => "group",
        Some(_) => "channel",
        // app_mention carries no channel_type: the id says it.
        None => match conversation.chars().next() {
            Some('D') => "direct",
            Some('G') => "group",
            _ => "channel",
        },
    };
    let bot_id = event["bot_id"].as_str();
    let is_bot = bot_id.is_some() || event["subtype"] == "bot_message";
    // This bot's own messages name its user id: the self-loop.
    let sender_id = match (event["user"].as_str(), bot_id) {
        (Some(user), _) => Some(user.to_string()),
        (None, Some(b)) if identity.bot_id.as_deref() == Some(b) => {
            Some(identity.bot_user_id.clone())
        }
        (None, Some(b)) => Some(b.to_string()),
        (None, None) => None,
    };
    let name = event["user_profile"]["display_name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| event["user_profile"]["real_name"].as_str())
        .or_else(|| event["username"].as_str());
    let mut sender = json!({"isBot": is_bot});
    if let Some(id) = &sender_id {
        sender["id"] = id.clone().into();
    }
    if let Some(n) = name {
        sender["name"] = n.into();
    }
    let team_id = payload["team_id"]
        .as_str()
        .or_else(|| event["team"].as_str())
        .unwrap_or_default()
        .to_string();
    let thread_ts = event["thread_ts"].as_str().map(str::to_string);
    let mut envelope = json!({
        "channel": channel,
        "accountId": account,
        "peer": {"kind": kind, "id": conversation},
        "messageId": ts,
        "sender": sender,
        "text": text,
        "mentions": mentions(text),
    });
    if !team_id.is_empty() {
        envelope["teamId"] = team_id.clone().into();
    }
    if let Some(t) = &thread_ts {
        envelope["threadId"] = t.clone().into();
    }
    if let Some(parent) = event["parent_user_id"].as_str() {
        envelope["replyToSenderId"] = parent.into();
    }
    Ok(Mapped {
        lane: match &thread_ts {
            Some(t) => format!("{conversation}/{t}"),
            None => conversation.to_string(),
        },
        envelope,
        conversation: conversation.to_string(),
        ts: ts.to_string(),
        thread_ts,
        team_id,
        is_bot,
        text: text.to_string(),
    })
}

/// The user ids of `<@U…>` and `<@U…|name>` in a message's text, each once.
pub fn mentions(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("<@") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find('>') else { break };
        let id = rest[..end].split('|').next().unwrap_or_default().trim();
        if !id.is_empty()
            && id.len() <= 64
            && id.chars().all(|c| c.is_ascii_alphanumeric())
            && !out.iter().any(|m| m == id)
        {
            out.push(id.to_string());
        }
        rest = &rest[end..];
    }
    out
}

fn dispatch(running: &Arc<Running>, taken: Taken, payload: Value) {
    let event_id = taken.event_id.clone();
    // A replay after a reconnect skips what a lane holds already.
    if !running.cx.claim(&running.spec, &event_id) {
        return;
    }
    running.event_taken();
    let identity = running.identity().unwrap_or_default();
    let mapped = map(
        &payload,
        &identity,
        &running.spec.channel,
        &running.spec.account,
    );
    let lane = mapped
        .as_ref()
        .map_or_else(|_| "-".to_string(), |m| m.lane.clone());
    let job = {
        let running = running.clone();
        let event_id = event_id.clone();
        async move {
            match mapped {
                Ok(mapped) => handle(&running, mapped, &taken).await,
                Err(why) => {
                    running
                        .log(&format!("ignored event={event_id} why={why}"))
                        .await;
                }
            }
        }
    };
    running.cx.run_in_lane(&running.spec, &lane, event_id, job);
}

async fn blocking<T: Send + 'static>(
    running: &Running,
    f: impl FnOnce(&super::store::AdapterStore) -> Result<T, crate::state::StateError> + Send + 'static,
) -> Option<T> {
    let store = running.cx.store.clone();
    match tokio::task::spawn_blocking(move || f(&store)).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "adapter state");
            None
        }
        Err(_) => None,
    }
}

/// The discussion settings of a thread, if its channel has any.
fn discussion(running: &Running, mapped: &Mapped) -> Option<(ThreadKey, u32, String, u32)> {
    discussion_in(running, mapped, mapped.thread_ts.as_deref()?)
}

fn discussion_in(
    running: &Running,
    mapped: &Mapped,
    thread: &str,
) -> Option<(ThreadKey, u32, String, u32)> {
    let d = running.spec.discussion_for(&mapped.conversation)?;
    Some((
        ThreadKey {
            channel: running.spec.channel.clone(),
            team_id: mapped.team_id.clone(),
            conversation: mapped.conversation.clone(),
            thread_id: thread.to_string(),
        },
        d.max_rounds.unwrap_or(MAX_ROUNDS),
        d.close_marker
            .clone()
            .unwrap_or_else(|| CLOSE_MARKER.to_string()),
        d.stall_rounds.unwrap_or(STALL_ROUNDS),
    ))
}

/// Seed 001: whether a message in a discussed thread reaches the agent. A human message
/// re-opens the thread (or closes it, with the marker); a bot message is held back once the
/// thread reached its rounds or was closed, and closes it with the marker.
async fn admitted(running: &Arc<Running>, mapped: &Mapped) -> bool {
    let Some((key, _, marker, _)) = discussion(running, mapped) else {
        return true;
    };
    let marked = mapped.text.contains(&marker);
    let own = running
        .identity()
        .is_some_and(|i| mapped.envelope["sender"]["id"] == i.bot_user_id.as_str());
    if own {
        // The self-loop gate answers it; the thread's state is this bot's own doing.
        return true;
    }
    let k = key.clone();
    let thread = blocking(running, move |s| s.thread(&k)).await.flatten();
    if !mapped.is_bot {
        let next = if marked {
            Thread {
                rounds: thread.as_ref().map_or(0, |t| t.rounds),
                state: ThreadState::Closed,
                notice_sent: true,
            }
        } else {
            // A human speaks: the discussion starts over.
            Thread {
                rounds: 0,
                state: ThreadState::Open,
                notice_sent: false,
            }
        };
        if thread.as_ref() != Some(&next) {
            let k = key.clone();
            blocking(running, move |s| s.set_thread(&k, &next)).await;
            if let Ok(mut stalls) = running.cx.stalls.lock() {
                stalls.remove(&key);
            }
        }
        return true;
    }
    if marked {
        let closed = Thread {
            rounds: thread.as_ref().map_or(0, |t| t.rounds),
            state: ThreadState::Closed,
            notice_sent: thread.as_ref().is_some_and(|t| t.notice_sent),
        };
        let k = key.clone();
        blocking(running, move |s| s.set_thread(&k, &closed)).await;
        running
            .log(&format!(
                "discussion closed thread={} by=close-marker",
                key.thread_id
            ))
            .await;
        return false;
    }
    match thread.map(|t| t.state) {
        Some(ThreadState::Limit) | Some(ThreadState::Closed) => {
            running
                .log(&format!(
                    "held message={} thread={} why=discussion-{} (a human reply re-opens it)",
                    mapped.ts,
                    key.thread_id,
                    thread_state_word(&running.cx.store, &key)
                ))
                .await;
            false
        }
        _ => true,
    }
}

fn thread_state_word(store: &super::store::AdapterStore, key: &ThreadKey) -> &'static str {
    store
        .thread(key)
        .ok()
        .flatten()
        .map_or("open", |t| t.state.as_str())
}

/// Hands an event in at the Access door and posts the reply its answer holds.
async fn handle(running: &Arc<Running>, mapped: Mapped, taken: &Taken) {
    if !admitted(running, &mapped).await {
        return;
    }
    let Some(answer) = super::web::hand_in(running, &mapped.envelope).await else {
        return;
    };
    if answer["duplicate"] == true && !taken.replayed {
        return;
    }
    let Some(text) = answer["reply"]["text"].as_str() else {
        return;
    };
    if !outbound::postable(text) {
        return;
    }
    let key = DeliveryKey {
        channel: running.spec.channel.clone(),
        account_id: running.spec.account.clone(),
        peer_kind: mapped.envelope["peer"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        peer_id: mapped.conversation.clone(),
        thread_id: mapped.thread_ts.clone().unwrap_or_default(),
        message_id: mapped.ts.clone(),
    };
    // The thread the reply goes to: the message's, or the one the reply starts.
    let thread = mapped
        .thread_ts
        .clone()
        .or_else(|| (running.spec.reply_to_mode != ReplyToMode::Off).then(|| mapped.ts.clone()));
    let round = match thread
        .as_deref()
        .and_then(|t| discussion_in(running, &mapped, t))
    {
        None => None,
        Some(d) => match reserve_round(running, &d, text).await {
            Some(reached) => Some((d, reached)),
            None => {
                running
                    .log(&format!(
                        "held reply-to={} thread={} why=discussion-paused (a human reply re-opens it)",
                        mapped.ts, d.0.thread_id
                    ))
                    .await;
                return;
            }
        },
    };
    if post_reply(running, &mapped, text, key, taken).await
        && let Some((d, reached)) = round
    {
        after_round(running, &mapped, &d, text, reached).await;
    }
}

/// Posts a reply in pieces (`chat.postMessage`); whether all of it was posted.
async fn post_reply(
    running: &Arc<Running>,
    mapped: &Mapped,
    text: &str,
    key: DeliveryKey,
    taken: &Taken,
) -> bool {
    let pieces = outbound::split(
        text,
        TEXT_LIMIT,
        outbound::chars,
        running.spec.max_reply_messages,
    );
    let thread = mapped.thread_ts.clone();
    // A replay posts only what the platform had not taken.
    for (i, piece) in pieces.iter().enumerate().skip(taken.posted) {
        let thread_ts = match (&thread, running.spec.reply_to_mode) {
            (Some(t), _) => Some(t.clone()),
            (None, ReplyToMode::All) => Some(mapped.ts.clone()),
            (None, ReplyToMode::First) if i == 0 => Some(mapped.ts.clone()),
            (None, _) => None,
        };
        match post(running, &mapped.conversation, thread_ts.as_deref(), piece).await {
            Ok(()) => {
                running.posted(1);
                running.posted_pieces(taken, i + 1).await;
            }
            Err((attempts, error)) => {
                running.dead_lettered(&error);
                let rest = pieces[i..].join("\n");
                outbound::dead_letter(
                    &running.cx.access,
                    key,
                    "slack:chat.postMessage".into(),
                    json!({"channel": mapped.conversation, "thread_ts": thread_ts, "text": rest})
                        .to_string(),
                    attempts,
                    error,
                )
                .await;
                return false;
            }
        }
    }
    true
}

/// One `chat.postMessage`, rate limits honoured; the attempts made and the error when it
/// could not be sent.
async fn post(
    running: &Running,
    conversation: &str,
    thread_ts: Option<&str>,
    text: &str,
) -> Result<(), (u32, String)> {
    let mut body = json!({"channel": conversation, "text": text});
    if let Some(t) = thread_ts {
        body["thread_ts"] = t.into();
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        match call(
            &running.cx.http,
            &running.spec.api_base,
            bot_token(running),
            "chat.postMessage",
            &body,
        )
        .await
        {
            Ok(_) => return Ok(()),
            Err(ApiError::RateLimited(wait)) if attempts < ATTEMPTS && wait <= MAX_RETRY_AFTER => {
                running
                    .log(&format!(
                        "rate-limited method=chat.postMessage retry_after_s={}",
                        wait.as_secs()
                    ))
                    .await;
                tokio::time::sleep(wait).await;
            }
            Err(ApiError::Transport(_)) if attempts < ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(250 << attempts)).await;
            }
            Err(e) => return Err((attempts, e.to_string())),
        }
    }
}

type DiscussionOf = (ThreadKey, u32, String, u32);

/// Seed 001: a bot reply in a discussed thread is a round, reserved before it is posted (none
/// once the thread is paused or closed, so at most `maxRounds` are posted); one with the close
/// marker closes the thread. Whether this reply may go, and whether it reached `maxRounds`.
async fn reserve_round(running: &Arc<Running>, d: &DiscussionOf, reply: &str) -> Option<bool> {
    let (key, max_rounds, marker, _) = d.clone();
    let closes = reply.contains(&marker);
    let k = key.clone();
    let (thread, reached) = blocking(running, move |s| s.reserve_round(&k, max_rounds, closes))
        .await
        .flatten()?;
    if closes {
        running
            .log(&format!(
                "discussion closed thread={} by=close-marker rounds={}",
                key.thread_id, thread.rounds
            ))
            .await;
    }
    Some(reached)
}

/// After a round was posted: a stall (`stallRounds` replies repeating the one before) pauses
/// the thread like `maxRounds`; the first to pause it posts the one notice.
async fn after_round(
    running: &Arc<Running>,
    mapped: &Mapped,
    d: &DiscussionOf,
    reply: &str,
    mut reached: bool,
) {
    let (key, max_rounds, _, stall_rounds) = d.clone();
    let stalled = {
        let normalized = reply.trim().to_string();
        match running.cx.stalls.lock() {
            Ok(mut stalls) => {
                let entry = stalls.entry(key.clone()).or_insert((String::new(), 0));
                if entry.0 == normalized {
                    entry.1 += 1;
                } else {
                    *entry = (normalized, 0);
                }
                entry.1 >= stall_rounds
            }
            Err(_) => false,
        }
    };
    if stalled && !reached {
        let k = key.clone();
        let thread = blocking(running, move |s| s.thread(&k)).await.flatten();
        if let Some(mut t) = thread.filter(|t| t.state == ThreadState::Open) {
            t.state = ThreadState::Limit;
            let k = key.clone();
            blocking(running, move |s| s.set_thread(&k, &t)).await;
            reached = true;
        }
    }
    if !reached {
        return;
    }
    let k = key.clone();
    if blocking(running, move |s| s.claim_notice(&k)).await != Some(true) {
        return;
    }
    let why = if stalled {
        format!("the bots repeated themselves for {stall_rounds} rounds")
    } else {
        format!("it reached {max_rounds} rounds")
    };
    let notice = format!(
        "This discussion is paused: {why}. Bot messages in this thread are no longer delivered. A human reply here re-opens it."
    );
    running
        .log(&format!(
            "discussion paused thread={} why={}",
            key.thread_id,
            if stalled { "stall" } else { "max-rounds" }
        ))
        .await;
    if let Err((_, error)) =
        post(running, &mapped.conversation, Some(&key.thread_id), &notice).await
    {
        running
            .log(&format!(
                "notice-failed thread={} error={error}",
                key.thread_id
            ))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> Identity {
        Identity {
            bot_user_id: "UBOT".into(),
            name: Some("deep".into()),
            bot_id: Some("BBOT".into()),
            team_id: Some("T1".into()),
        }
    }

    #[test]
    fn a_signature_verifies_within_the_window_only() {
        let body = br#"{"type":"event_callback"}"#;
        let sig = sign(b"s3cret", 1_000_000, body);
        assert_eq!(
            verify(b"s3cret", Some("1000000"), Some(&sig), body, 1_000_100),
            Ok(())
        );
        assert!(
            verify(b"s3cret", Some("1000000"), Some(&sig), body, 1_000_301)
                .unwrap_err()
                .contains("stale")
        );
        assert!(
            verify(b"other", Some("1000000"), Some(&sig), body, 1_000_000)
                .unwrap_err()
                .contains("wrong")
        );
        assert!(verify(b"s3cret", Some("1000001"), Some(&sig), body, 1_000_000).is_err());
        assert!(
            verify(b"s3cret", None, Some(&sig), body, 0)
                .unwrap_err()
                .contains("missing")
        );
        assert!(verify(b"s3cret", Some("x"), Some(&sig), body, 0).is_err());
        // Timestamps at the ends of the range: refused, no overflow.
        for ts in [i64::MIN.to_string(), i64::MAX.to_string()] {
            assert!(verify(b"s3cret", Some(&ts), Some(&sig), body, 1_000_000).is_err());
        }
        assert!(
            verify(b"s3cret", Some("1000000"), Some("v0=zz"), body, 1_000_000)
                .unwrap_err()
                .contains("malformed")
        );
        assert!(verify(b"s3cret", Some("1000000"), Some("v1=00"), body, 1_000_000).is_err());
    }

    #[test]
    fn mentions_are_read_from_the_text_once_each() {
        assert_eq!(
            mentions("<@U1> hi <@U2|bob> and <@U1> <@> <#C1> <@U3"),
            ["U1", "U2"]
        );
        assert!(mentions("<@U1 > <@ü>").is_empty() || mentions("<@U1 > <@ü>") == ["U1"]);
    }

    #[test]
    fn events_map_to_envelopes_and_changes_are_ignored() {
        let payload = json!({"team_id": "T1", "event_id": "Ev1", "event": {"type": "message", "channel_type": "channel", "channel": "C1", "user": "U7", "text": "<@UBOT> hi", "ts": "1.1", "thread_ts": "1.0", "parent_user_id": "UBOT"}});
        let m = map(&payload, &bot(), "slack", "a").unwrap();
        assert_eq!(
            m.envelope,
            json!({"channel": "slack", "accountId": "a", "peer": {"kind": "channel", "id": "C1"}, "messageId": "1.1", "sender": {"id": "U7", "isBot": false}, "text": "<@UBOT> hi", "mentions": ["UBOT"], "teamId": "T1", "threadId": "1.0", "replyToSenderId": "UBOT"})
        );
        let mention = json!({"team_id": "T1", "event": {"type": "app_mention", "channel": "C1", "user": "U7", "text": "<@UBOT> hi", "ts": "1.1", "thread_ts": "1.0", "parent_user_id": "UBOT"}});
        assert_eq!(
            map(&mention, &bot(), "slack", "a").unwrap().envelope,
            m.envelope,
            "one message, one envelope, whichever event brings it"
        );
        let im = json!({"event": {"type": "message", "channel_type": "im", "channel": "D1", "user": "U7", "text": "x", "ts": "2"}});
        assert_eq!(
            map(&im, &bot(), "slack", "a").unwrap().envelope["peer"]["kind"],
            "direct"
        );
        let mpim = json!({"event": {"type": "message", "channel_type": "mpim", "channel": "G1", "user": "U7", "text": "x", "ts": "2"}});
        assert_eq!(
            map(&mpim, &bot(), "slack", "a").unwrap().envelope["peer"]["kind"],
            "group"
        );
        let own = json!({"event": {"type": "message", "subtype": "bot_message", "channel": "C1", "bot_id": "BBOT", "text": "x", "ts": "3"}});
        let own = map(&own, &bot(), "slack", "a").unwrap();
        assert_eq!(own.envelope["sender"], json!({"id": "UBOT", "isBot": true}));
        for subtype in ["message_changed", "message_deleted", "channel_join"] {
            let e = json!({"event": {"type": "message", "subtype": subtype, "channel": "C1", "ts": "4"}});
            assert!(map(&e, &bot(), "slack", "a").is_err(), "{subtype}");
        }
        assert!(map(&json!({}), &bot(), "slack", "a").is_err());
        assert!(
            map(
                &json!({"event": {"type": "message", "channel": 5}}),
                &bot(),
                "slack",
                "a"
            )
            .is_err()
        );
    }
}
