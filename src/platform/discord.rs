//! Discord's REST API (v10) with a bot token, its rate limits, and the payloads deepcli reads:
//! the Gateway's frames (HELLO, READY, a dispatch), a message with its author, member, mentions
//! and the message it answers, a channel (a thread's type and parent), an interaction (a click
//! on a button), and the directory pages `resolve` reads (guilds, channels, members, roles).
//! Every payload field is read leniently ([`super::lenient`]): a field of an unexpected type is
//! absent.
//!
//! Rate limits (Discord's "Rate Limits" documentation): each answer names its route's bucket
//! (`X-RateLimit-Bucket`) and what is left of it (`X-RateLimit-Remaining`,
//! `X-RateLimit-Reset-After`); a call to a bucket that is used up waits for its reset first. A
//! `429` says how long to wait (`retry_after`) and whether the limit is the bot's global one
//! (`global`): then every call of the account waits. [`RateLimits`] keeps this per account.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::{Identity, Unreached, lenient, lenient_items, send_failed, transport_error};

/// Discord's limit on a message's `content`.
pub(crate) const TEXT_LIMIT: usize = 2000;

/// The REST API's version, added to `apiBase`.
pub(crate) const API_VERSION: &str = "v10";

/// The Gateway's version and encoding, added to the URL `GET /gateway/bot` answers.
pub(crate) const GATEWAY_QUERY: &str = "v=10&encoding=json";

/// The longest wait a call makes for its bucket or the global limit before it is refused.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Gateway intents (Discord's "Gateway Intents").
pub(crate) mod intents {
    pub(crate) const GUILDS: u64 = 1 << 0;
    pub(crate) const GUILD_MEMBERS: u64 = 1 << 1;
    pub(crate) const GUILD_MESSAGES: u64 = 1 << 9;
    pub(crate) const DIRECT_MESSAGES: u64 = 1 << 12;
    pub(crate) const MESSAGE_CONTENT: u64 = 1 << 15;
}

/// Gateway opcodes.
pub(crate) mod op {
    pub(crate) const DISPATCH: u8 = 0;
    pub(crate) const HEARTBEAT: u8 = 1;
    pub(crate) const IDENTIFY: u8 = 2;
    pub(crate) const RESUME: u8 = 6;
    pub(crate) const RECONNECT: u8 = 7;
    pub(crate) const INVALID_SESSION: u8 = 9;
    pub(crate) const HELLO: u8 = 10;
    pub(crate) const HEARTBEAT_ACK: u8 = 11;
}

/// A REST failure.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// 401: the token was refused.
    Unauthorized(String),
    /// 429 with `retry_after`, or a wait for a bucket longer than deepcli makes.
    RateLimited(Duration),
    /// Any other refusal (403 missing access, 404 unknown channel, 400…).
    Refused { code: u16, message: String },
    /// No answer from the API's host (DNS, connect, TLS, timeout).
    Unreachable(Unreached),
    /// An answer that is not Discord's, or a request that could not be sent.
    Transport(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Unauthorized(e) => write!(f, "the bot token was refused: {e}"),
            ApiError::RateLimited(wait) => {
                write!(f, "rate limited: retry after {} ms", wait.as_millis())
            }
            ApiError::Refused { code, message } => write!(f, "{code} {message}"),
            ApiError::Unreachable(u) => write!(f, "{u}"),
            ApiError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// The rate limits one bot is under: each route's bucket, the buckets used up until their
/// reset, and the global limit. Shared by every call of an account.
#[derive(Debug, Default)]
pub(crate) struct RateLimits {
    inner: Mutex<Limits>,
}

#[derive(Debug, Default)]
struct Limits {
    /// Route (`POST /channels/{id}/messages`) → the bucket Discord named for it.
    buckets: HashMap<String, String>,
    /// Bucket (and its major parameter) → used up until then.
    exhausted: HashMap<String, Instant>,
    global_until: Option<Instant>,
}

/// A call's route (its method and path, ids but the major one's replaced) and its major
/// parameter (`channels/<id>`, `guilds/<id>`, `webhooks/<id>`): what a bucket is kept by.
fn route_of(method: &str, path: &str) -> (String, String) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let major = match parts.as_slice() {
        [first @ ("channels" | "guilds" | "webhooks"), id, ..] => format!("{first}/{id}"),
        _ => String::new(),
    };
    let route: Vec<&str> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let kept_major = i == 1 && !major.is_empty();
            // Ids, and an interaction's or a webhook's token.
            let variable = (!p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
                || (i >= 1 && parts[i - 1] == "interactions")
                || (i >= 2 && matches!(parts[i - 2], "interactions" | "webhooks"));
            if kept_major || !variable { p } else { "{id}" }
        })
        .collect();
    (format!("{method} /{}", route.join("/")), major)
}

impl RateLimits {
    fn lock(&self) -> std::sync::MutexGuard<'_, Limits> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key a route's bucket is kept by: the bucket Discord named (else the route), with the
    /// major parameter.
    fn key(limits: &Limits, route: &str, major: &str) -> String {
        let bucket = limits.buckets.get(route).map_or(route, String::as_str);
        format!("{bucket}@{major}")
    }

    /// How long a call of `route` must wait now: the global limit, or its used-up bucket.
    pub(crate) fn wait(&self, route: &str, major: &str) -> Duration {
        let now = Instant::now();
        let mut limits = self.lock();
        let key = RateLimits::key(&limits, route, major);
        let until = [limits.global_until, limits.exhausted.get(&key).copied()]
            .into_iter()
            .flatten()
            .max();
        match until {
            Some(until) if until > now => until - now,
            _ => {
                limits.exhausted.remove(&key);
                Duration::ZERO
            }
        }
    }

    /// What an answer said of its bucket: named, and used up for `reset_after` when
    /// `remaining` is 0.
    fn answered(&self, route: &str, major: &str, headers: &reqwest::header::HeaderMap) {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let mut limits = self.lock();
        if let Some(bucket) = text("x-ratelimit-bucket") {
            limits.buckets.insert(route.to_string(), bucket.to_string());
        }
        let remaining = text("x-ratelimit-remaining").and_then(|v| v.trim().parse::<u64>().ok());
        let reset_after = text("x-ratelimit-reset-after").and_then(seconds);
        if let (Some(0), Some(after)) = (remaining, reset_after) {
            let key = RateLimits::key(&limits, route, major);
            limits.exhausted.insert(key, Instant::now() + after);
        }
    }

    /// A 429: the bucket, or every call when `global`, waits `retry_after`.
    fn limited(&self, route: &str, major: &str, global: bool, retry_after: Duration) {
        let until = Instant::now() + retry_after;
        let mut limits = self.lock();
        if global {
            limits.global_until = Some(limits.global_until.map_or(until, |u| u.max(until)));
        } else {
            let key = RateLimits::key(&limits, route, major);
            limits.exhausted.insert(key, until);
        }
    }
}

/// Seconds as Discord writes them (`1.5`), as a duration.
fn seconds(text: &str) -> Option<Duration> {
    let s: f64 = text.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(3600.0)))
}

/// A refusal's body: Discord's `message`, and a 429's `retry_after` and `global`.
#[derive(Debug, Default, Deserialize)]
struct Refusal {
    #[serde(default, deserialize_with = "lenient")]
    message: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    retry_after: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    global: Option<bool>,
}

/// The REST API of one bot.
pub(crate) struct Api<'a> {
    pub http: &'a reqwest::Client,
    /// `apiBase`, without the version.
    pub base: &'a str,
    pub token: &'a str,
    pub limits: &'a RateLimits,
}

/// A request's body: JSON, or none.
pub(crate) enum Body<'b, B: Serialize + ?Sized> {
    None,
    Json(&'b B),
}

impl Api<'_> {
    /// `method` `path` (below `/v10`) with `body`; the answer read as `T` (`Ignored` for one
    /// whose content is not read, or a `204`). Waits first for the route's bucket and the global
    /// limit (at most a minute: longer is a [`ApiError::RateLimited`]).
    pub(crate) async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Body<'_, B>,
    ) -> Result<T, ApiError> {
        let (route, major) = route_of(method.as_str(), path);
        let wait = self.limits.wait(&route, &major);
        if wait > MAX_WAIT {
            return Err(ApiError::RateLimited(wait));
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let url = format!("{}/{API_VERSION}{path}", self.base);
        let request = self
            .http
            .request(method, url)
            .header("authorization", format!("Bot {}", self.token))
            .timeout(Duration::from_secs(30));
        let request = match body {
            Body::None => request,
            Body::Json(body) => request.json(body),
        };
        let response = request
            .send()
            .await
            .map_err(|e| match send_failed(self.base, e) {
                Ok(unreached) => ApiError::Unreachable(unreached),
                Err(e) => ApiError::Transport(e),
            })?;
        let status = response.status().as_u16();
        self.limits.answered(&route, &major, response.headers());
        let global_header = response
            .headers()
            .get("x-ratelimit-global")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let retry_header = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(seconds);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ApiError::Transport(transport_error(e)))?;
        if (200..300).contains(&status) {
            let text: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
            return serde_json::from_slice(text).map_err(|e| {
                ApiError::Transport(format!("{route} answered in an unexpected shape: {e}"))
            });
        }
        let refusal: Refusal = serde_json::from_slice(&bytes).unwrap_or_default();
        if status == 429 {
            let wait = refusal
                .retry_after
                .and_then(|s| seconds(&s.to_string()))
                .or(retry_header)
                .unwrap_or(Duration::from_secs(1));
            let global = refusal.global == Some(true) || global_header;
            self.limits.limited(&route, &major, global, wait);
            return Err(ApiError::RateLimited(wait));
        }
        let message = refusal
            .message
            .unwrap_or_else(|| format!("HTTP {status}, not a Discord answer"));
        Err(match status {
            401 => ApiError::Unauthorized(message),
            code => ApiError::Refused { code, message },
        })
    }

    /// [`Api::call`] that waits out up to three rate limits (for calls outside a reply, which
    /// `outbound::send_piece` retries itself).
    pub(crate) async fn call_patiently<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Body<'_, B>,
    ) -> Result<T, ApiError> {
        let mut tries = 0;
        loop {
            let body = match &body {
                Body::None => Body::None,
                Body::Json(b) => Body::Json(*b),
            };
            match self.call(method.clone(), path, body).await {
                Err(ApiError::RateLimited(wait)) if tries < 3 && wait <= MAX_WAIT => {
                    tries += 1;
                    tokio::time::sleep(wait).await;
                }
                answer => return answer,
            }
        }
    }

    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        self.call_patiently::<(), T>(reqwest::Method::GET, path, Body::None)
            .await
    }

    /// `GET /users/@me`: the bot's identity.
    pub(crate) async fn me(&self) -> Result<Identity, ApiError> {
        let me: User = self.get("/users/@me").await?;
        Ok(Identity {
            bot_user_id: me.id.clone().ok_or_else(|| {
                ApiError::Transport("GET /users/@me answered without the bot's `id`".into())
            })?,
            name: me.username,
            bot_id: None,
            team_id: None,
        })
    }
}

/// Any answer whose content is not read.
#[derive(Debug)]
pub(crate) struct Ignored;

impl<'de> Deserialize<'de> for Ignored {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Ignored)
    }
}

/// `GET /gateway/bot`'s answer: where the Gateway is.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct GatewayBot {
    #[serde(default, deserialize_with = "lenient")]
    pub url: Option<String>,
}

/// A user (a message's author, a mention, the bot itself).
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct User {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub username: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub global_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub bot: Option<bool>,
}

/// A guild member: the roles deepcli routes and gates by.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Member {
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<User>,
    #[serde(default, deserialize_with = "lenient")]
    pub nick: Option<String>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub roles: Option<Vec<String>>,
}

/// A message (MESSAGE_CREATE's `d`), the fields deepcli reads.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Message {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub guild_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub author: Option<User>,
    #[serde(default, deserialize_with = "lenient")]
    pub member: Option<Member>,
    #[serde(default, deserialize_with = "lenient")]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub mentions: Option<Vec<User>>,
    /// The message this one answers.
    #[serde(default, deserialize_with = "lenient")]
    pub referenced_message: Option<Box<Message>>,
    /// 0 a plain message, 19 a reply; the others (joins, pins, thread starters…) are no text
    /// a person wrote to the bot.
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub webhook_id: Option<String>,
}

/// A channel: what makes a message's channel a thread, and of which.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Channel {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub parent_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub guild_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub name: Option<String>,
}

impl Channel {
    /// Channel types 10–12: announcement, public and private threads.
    pub(crate) fn is_thread(&self) -> bool {
        matches!(self.kind, Some(10..=12))
    }
}

/// A guild as GUILD_CREATE brings it: its channels and active threads.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct GuildCreate {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub channels: Option<Vec<Channel>>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub threads: Option<Vec<Channel>>,
}

/// An interaction (INTERACTION_CREATE's `d`): a click on a message component.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Interaction {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub application_id: Option<String>,
    /// 3: a message component.
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub token: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub data: Option<ComponentData>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel_id: Option<String>,
    /// In a guild: the clicker as a member.
    #[serde(default, deserialize_with = "lenient")]
    pub member: Option<Member>,
    /// In a DM: the clicker.
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<User>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct ComponentData {
    #[serde(default, deserialize_with = "lenient")]
    pub custom_id: Option<String>,
}

/// One Gateway frame: its opcode, payload as sent, sequence and event name.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Frame {
    #[serde(default, deserialize_with = "lenient")]
    pub op: Option<u8>,
    #[serde(default)]
    pub d: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "lenient")]
    pub s: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub t: Option<String>,
}

/// HELLO's `d`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Hello {
    #[serde(default, deserialize_with = "lenient")]
    pub heartbeat_interval: Option<u64>,
}

/// READY's `d`, the fields deepcli reads.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Ready {
    #[serde(default, deserialize_with = "lenient")]
    pub session_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub resume_gateway_url: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<User>,
    #[serde(default, deserialize_with = "lenient")]
    pub application: Option<Application>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Application {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
}

/// A frame deepcli sends: `{"op": …, "d": …}`.
#[derive(Debug, Serialize)]
pub(crate) struct Outgoing<D: Serialize> {
    pub op: u8,
    pub d: D,
}

#[derive(Debug, Serialize)]
pub(crate) struct Identify<'a> {
    pub token: &'a str,
    pub intents: u64,
    pub properties: Properties,
}

#[derive(Debug, Serialize)]
pub(crate) struct Properties {
    pub os: &'static str,
    pub browser: &'static str,
    pub device: &'static str,
}

#[derive(Debug, Serialize)]
pub(crate) struct Resume<'a> {
    pub token: &'a str,
    pub session_id: &'a str,
    pub seq: i64,
}

/// `POST /channels/{id}/messages`'s body.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CreateMessage<'a> {
    pub content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_reference: Option<MessageReference>,
    /// Approval buttons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<ActionRow>>,
    /// Only users are pinged: an agent's `@everyone` or a role in its text pings nobody.
    pub allowed_mentions: AllowedMentions,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct AllowedMentions {
    pub parse: [&'static str; 1],
}

impl AllowedMentions {
    pub(crate) const USERS: AllowedMentions = AllowedMentions { parse: ["users"] };
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct MessageReference {
    pub message_id: String,
    /// A reply to a message deleted meanwhile is posted without the reference.
    pub fail_if_not_exists: bool,
}

/// A row of buttons (component type 1).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ActionRow {
    #[serde(rename = "type")]
    pub kind: u8,
    pub components: Vec<Button>,
}

/// A button (component type 2) with its `custom_id`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Button {
    #[serde(rename = "type")]
    pub kind: u8,
    /// 1 primary, 2 secondary, 3 success, 4 danger.
    pub style: u8,
    pub label: String,
    pub custom_id: String,
}

/// `PATCH /channels/{id}/messages/{id}`'s body: the text replaced, the buttons gone.
#[derive(Debug, Serialize)]
pub(crate) struct EditMessage<'a> {
    pub content: &'a str,
    pub components: [ActionRow; 0],
}

/// A posted message, the fields deepcli reads.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Posted {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
}

/// `POST /interactions/{id}/{token}/callback`'s body.
#[derive(Debug, Serialize)]
pub(crate) struct Callback {
    /// 6: DEFERRED_UPDATE_MESSAGE (the click is taken; the message stays as it is).
    #[serde(rename = "type")]
    pub kind: u8,
}

/// `POST /webhooks/{application}/{token}`'s body: a follow-up message; `flags: 64` shows it to
/// the clicker alone.
#[derive(Debug, Serialize)]
pub(crate) struct Followup<'a> {
    pub content: &'a str,
    pub flags: u64,
}

/// `POST /users/@me/channels`'s body: the DM channel with a user.
#[derive(Debug, Serialize)]
pub(crate) struct OpenDm<'a> {
    pub recipient_id: &'a str,
}

/// A role (`GET /guilds/{id}/roles`).
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Role {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub name: Option<String>,
}

/// A guild the bot is in (`GET /users/@me/guilds`).
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Guild {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub name: Option<String>,
}

/// The mentions of `<@id>` and `<@!id>` in a message's text, each once.
pub(crate) fn text_mentions(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("<@") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find('>') else { break };
        let id = rest[..end].strip_prefix('!').unwrap_or(&rest[..end]);
        if !id.is_empty()
            && id.len() <= 20
            && id.chars().all(|c| c.is_ascii_digit())
            && !out.iter().any(|m| m == id)
        {
            out.push(id.to_string());
        }
        rest = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keep_their_major_parameter_and_hide_other_ids() {
        assert_eq!(
            route_of("POST", "/channels/123/messages"),
            (
                "POST /channels/123/messages".to_string(),
                "channels/123".to_string()
            )
        );
        assert_eq!(
            route_of("PATCH", "/channels/123/messages/456").0,
            "PATCH /channels/123/messages/{id}"
        );
        assert_eq!(
            route_of("POST", "/interactions/9/tok-en/callback"),
            (
                "POST /interactions/{id}/{id}/callback".to_string(),
                String::new()
            )
        );
        assert_eq!(route_of("GET", "/users/@me").0, "GET /users/@me");
    }

    #[test]
    fn a_used_up_bucket_and_the_global_limit_make_calls_wait() {
        let limits = RateLimits::default();
        let (route, major) = route_of("POST", "/channels/1/messages");
        assert_eq!(limits.wait(&route, &major), Duration::ZERO);
        let headers = |remaining: &str, reset_after: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert("x-ratelimit-bucket", "abc".parse().unwrap());
            headers.insert("x-ratelimit-remaining", remaining.parse().unwrap());
            headers.insert("x-ratelimit-reset-after", reset_after.parse().unwrap());
            headers
        };
        limits.answered(&route, &major, &headers("1", "1.5"));
        assert_eq!(limits.wait(&route, &major), Duration::ZERO, "one left");
        limits.answered(&route, &major, &headers("0", "1.5"));
        let wait = limits.wait(&route, &major);
        assert!(
            wait > Duration::from_millis(1400) && wait <= Duration::from_millis(1500),
            "{wait:?}"
        );
        // Another channel is another bucket; a reset passed is no wait.
        assert_eq!(limits.wait(&route, "channels/2"), Duration::ZERO);
        limits.answered(&route, &major, &headers("0", "0"));
        assert_eq!(limits.wait(&route, &major), Duration::ZERO);
        // The global limit holds every route.
        limits.limited(&route, "channels/2", true, Duration::from_secs(2));
        assert!(limits.wait(&route, &major) > Duration::from_millis(1900));
        assert!(limits.wait("GET /users/@me", "") > Duration::from_millis(1900));
    }

    #[test]
    fn mentions_are_read_in_both_forms_once_each() {
        assert_eq!(
            text_mentions("<@123> hi <@!456> <@123> <@&789> <#1> <@x>"),
            ["123", "456"]
        );
    }

    #[test]
    fn a_message_reads_what_it_can_and_leaves_the_rest_out() {
        let m: Message = serde_json::from_str(
            r#"{"id":"9","channel_id":"5","guild_id":"1","author":{"id":"7","username":"ada","bot":"no"},
                "member":{"roles":["50",5,"51"],"nick":"Ada"},"content":"hi","type":19,
                "mentions":[{"id":"8"},"junk"],"referenced_message":{"id":"3","author":{"id":"8"}}}"#,
        )
        .unwrap();
        assert_eq!(m.author.as_ref().unwrap().bot, None, "a string is no flag");
        assert_eq!(m.member.unwrap().roles.unwrap(), ["50", "51"]);
        assert_eq!(m.mentions.unwrap().len(), 1);
        assert_eq!(
            m.referenced_message.unwrap().author.unwrap().id.as_deref(),
            Some("8")
        );
        let odd: Message = serde_json::from_str(r#"{"id":9,"referenced_message":"x"}"#).unwrap();
        assert!(odd.id.is_none() && odd.referenced_message.is_none());
    }

    #[test]
    fn a_reply_is_written_as_discord_reads_it() {
        let body = CreateMessage {
            content: "hi",
            message_reference: Some(MessageReference {
                message_id: "9".into(),
                fail_if_not_exists: false,
            }),
            components: None,
            allowed_mentions: AllowedMentions::USERS,
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"content":"hi","message_reference":{"message_id":"9","fail_if_not_exists":false},"allowed_mentions":{"parse":["users"]}}"#
        );
    }
}
