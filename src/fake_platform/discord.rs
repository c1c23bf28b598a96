//! A local fake of Discord for deepcli's adapter: the REST API (v10) routes it uses
//! (`/gateway/bot`, `/users/@me`, channel messages, edits, DM channels, interaction callbacks,
//! follow-up webhooks, guild channels, roles and member search) and the Gateway WebSocket
//! (HELLO, IDENTIFY and RESUME, heartbeats and their ACKs, READY, GUILD_CREATE, THREAD_CREATE,
//! MESSAGE_CREATE and INTERACTION_CREATE with sequence numbers, op 7 and op 9, drops). Every
//! REST call and every frame a bot sends is recorded.
//!
//! Like Discord, a session's dispatches are numbered; a connection dropped and RESUMEd with the
//! last sequence gets what it missed, one IDENTIFYing anew does not. A message posted in a
//! guild channel is dispatched to every bot in the guild (two bots can talk in one thread).
//! Rate limits as Discord's: a posting route's bucket (per channel) allows so many calls per
//! window, its answers say what is left (`X-RateLimit-*`); a call to a bucket it said was used
//! up, or while a global limit holds, is answered 429 and counted as early.
//!
//! People chat through it ([`Platform`]): `alice`'s direct chat with the first bot, and the
//! guild's `#general` channel.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{Chat, Line, Platform};

/// The one guild, its `#general` channel and a second text channel.
pub const GUILD: &str = "100000000000000001";
pub const GENERAL: &str = "200000000000000001";
pub const OTHER: &str = "200000000000000002";
/// The guild's roles: `admin`, `member`.
pub const ADMIN_ROLE: &str = "500000000000000001";
pub const MEMBER_ROLE: &str = "500000000000000002";

/// One bot (application) installed in the fake guild.
#[derive(Clone, Debug, Default)]
pub struct Bot {
    pub name: String,
    pub token: String,
    pub user_id: String,
    pub application_id: String,
}

/// One recorded REST call.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// The path below `/api/v10`.
    pub path: String,
    /// The bot whose token it carried (its name), if any.
    pub bot: Option<String>,
    pub body: Value,
    /// What the fake answered.
    pub status: u16,
    /// Made to a bucket the fake had said was used up, or while the global limit held.
    pub early: bool,
    /// A posted message: its id.
    pub message_id: Option<String>,
}

/// One frame a bot sent on the Gateway (IDENTIFY, RESUME, a heartbeat), with the path it
/// connected to.
#[derive(Debug, Clone)]
pub struct Sent {
    pub bot: Option<String>,
    pub path: String,
    pub frame: Value,
}

/// A bot's Gateway session.
#[derive(Debug, Default)]
struct Session {
    id: String,
    /// Every dispatch of the session, by sequence number.
    events: Vec<(i64, Value)>,
    /// The open connection, if any: its id and its only sender (dropping it closes it).
    socket: Option<(u64, mpsc::UnboundedSender<Message>)>,
}

/// A posted message's buttons: its channel and id, each button's label and `custom_id`.
type Buttons = (String, String, Vec<(String, String)>);

#[derive(Default)]
struct Inner {
    bots: Vec<Bot>,
    calls: Vec<Call>,
    sent: Vec<Sent>,
    sessions: HashMap<String, Session>,
    /// Connections that did not IDENTIFY or RESUME yet, by id.
    pending: HashMap<u64, mpsc::UnboundedSender<Message>>,
    next_id: u64,
    heartbeat_ms: u64,
    /// Threads: id → (parent, name).
    threads: Vec<(String, String, String)>,
    /// DM channels: (bot name, user id) → channel id.
    dms: Vec<(String, String, String)>,
    /// Messages with buttons the bots posted.
    buttons: Vec<Buttons>,
    /// A posting bucket: this many calls per window, per channel.
    bucket: Option<(u32, Duration)>,
    /// Per channel: calls in the window, the window's end, whether the fake said it is used up.
    windows: HashMap<String, (u32, Instant, bool)>,
    /// The next posts answered 429 with their bucket's `retry_after` (1 s).
    limited_next: u32,
    /// The next calls answered 429 by the global limit, and until when it holds.
    global_next: u32,
    global_until: Option<Instant>,
    /// People by name: user ids 400…001 on.
    people: Vec<String>,
    transcript: Vec<Line>,
    /// Each person's roles.
    roles: HashMap<String, Vec<String>>,
}

#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
    ws_addr: SocketAddr,
}

pub struct Server {
    pub fake: Fake,
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    /// The fake on an ephemeral loopback port.
    pub fn start() -> std::io::Result<Server> {
        Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// The fake's REST API on `addr` (its Gateway on another port of the same host), served by
    /// its own runtime until the server is dropped.
    pub fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (listener, ws) = runtime.block_on(async {
            Ok::<_, std::io::Error>((
                tokio::net::TcpListener::bind(addr).await?,
                tokio::net::TcpListener::bind(SocketAddr::new(addr.ip(), 0)).await?,
            ))
        })?;
        let fake = Fake {
            inner: Arc::new(Mutex::new(Inner {
                next_id: 700_000_000_000_000_000,
                heartbeat_ms: 41_250,
                ..Inner::default()
            })),
            ws_addr: ws.local_addr()?,
        };
        let app = Router::new()
            .route("/api/v10/{*path}", axum::routing::any(api))
            .merge(super::control())
            .with_state(fake.clone());
        let addr = listener.local_addr()?;
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let sockets = fake.clone();
        runtime.spawn(async move {
            while let Ok((stream, _)) = ws.accept().await {
                tokio::spawn(gateway(sockets.clone(), stream));
            }
        });
        Ok(Server {
            fake,
            addr,
            _runtime: runtime,
        })
    }

    /// The REST API's base URL (`apiBase`; the adapter adds `/v10`).
    pub fn base(&self) -> String {
        format!("http://{}/api", self.addr)
    }
}

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn id(&self) -> String {
        self.with(|i| {
            i.next_id += 1;
            i.next_id.to_string()
        })
    }

    /// Installs bot `n` (its token, user and application ids derived from `n`).
    pub fn install(&self, name: &str, n: u32) -> Bot {
        let bot = Bot {
            name: name.into(),
            token: format!("fake-discord-token-{n}"),
            user_id: format!("90000000000000000{n}"),
            application_id: format!("80000000000000000{n}"),
        };
        self.with(|i| i.bots.push(bot.clone()));
        bot
    }

    /// The heartbeat interval HELLO gives (default 41,250 ms, as Discord's).
    pub fn heartbeat_every(&self, interval: Duration) {
        self.with(|i| i.heartbeat_ms = interval.as_millis() as u64);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.with(|i| i.calls.clone())
    }

    /// The messages `bot` posted (answered 200), in order: (channel, body).
    pub fn posted_by(&self, bot: &Bot) -> Vec<(String, Value)> {
        self.calls()
            .into_iter()
            .filter(|c| {
                c.method == "POST" && c.status == 200 && c.bot.as_deref() == Some(&bot.name)
            })
            .filter_map(|c| {
                let channel = c
                    .path
                    .strip_prefix("/channels/")?
                    .strip_suffix("/messages")?;
                Some((channel.to_string(), c.body))
            })
            .collect()
    }

    /// Calls whose path starts with `prefix`, with `method`.
    pub fn calls_to(&self, method: &str, prefix: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method && c.path.starts_with(prefix))
            .collect()
    }

    /// Frames bots sent on the Gateway with opcode `op`.
    pub fn sent(&self, op: u64) -> Vec<Sent> {
        self.with(|i| {
            i.sent
                .iter()
                .filter(|s| s.frame["op"].as_u64() == Some(op))
                .cloned()
                .collect()
        })
    }

    /// The last sequence number of `bot`'s session.
    pub fn last_seq(&self, bot: &Bot) -> Option<i64> {
        self.with(|i| {
            i.sessions
                .get(&bot.name)
                .and_then(|s| s.events.last())
                .map(|(s, _)| *s)
        })
    }

    /// Whether `bot` has a connection open.
    pub fn connected(&self, bot: &Bot) -> bool {
        self.with(|i| {
            i.sessions
                .get(&bot.name)
                .and_then(|s| s.socket.as_ref())
                .is_some_and(|(_, s)| !s.is_closed())
        })
    }

    /// Drops `bot`'s connection without a close frame; its session can be resumed.
    pub fn drop_connection(&self, bot: &Bot) {
        self.with(|i| {
            if let Some(s) = i.sessions.get_mut(&bot.name) {
                s.socket = None;
            }
        });
    }

    /// Sends op 7 (reconnect) on `bot`'s connection.
    pub fn ask_reconnect(&self, bot: &Bot) {
        self.send_op(bot, json!({"op": 7, "d": null}));
    }

    /// Sends op 9 (invalid session, not resumable) and forgets `bot`'s session.
    pub fn invalidate_session(&self, bot: &Bot) {
        self.send_op(bot, json!({"op": 9, "d": false}));
        self.with(|i| {
            if let Some(s) = i.sessions.get_mut(&bot.name) {
                s.id = String::new();
            }
        });
    }

    fn send_op(&self, bot: &Bot, frame: Value) {
        self.with(|i| {
            if let Some((_, socket)) = i.sessions.get(&bot.name).and_then(|s| s.socket.as_ref()) {
                let _ = socket.send(Message::Text(frame.to_string().into()));
            }
        });
    }

    /// A posting bucket of `limit` calls per `window` for each channel.
    pub fn bucket(&self, limit: u32, window: Duration) {
        self.with(|i| i.bucket = Some((limit, window)));
    }

    /// The next `n` posts are answered 429 for their bucket (`retry_after` 1 s).
    pub fn limit_next_posts(&self, n: u32) {
        self.with(|i| i.limited_next = n);
    }

    /// The next `n` calls are answered 429 by the global limit (`retry_after` 1 s).
    pub fn global_limit_next(&self, n: u32) {
        self.with(|i| i.global_next = n);
    }

    /// Gives person `name` these role ids in the guild.
    pub fn give_roles(&self, name: &str, roles: &[&str]) {
        self.meet(name);
        self.with(|i| {
            i.roles.insert(
                name.to_string(),
                roles.iter().map(|r| r.to_string()).collect(),
            )
        });
    }

    /// Person `name`'s user id (fixed by the order people are met in).
    pub fn user_id(&self, name: &str) -> String {
        self.meet(name);
        self.with(|i| person_id(i, name))
    }

    fn meet(&self, name: &str) {
        self.with(|i| {
            if !i.people.iter().any(|p| p == name) {
                i.people.push(name.to_string());
            }
        });
    }

    /// A thread named `name` in channel `parent`, made known to every bot (THREAD_CREATE).
    pub fn thread(&self, parent: &str, name: &str) -> String {
        let id = self.id();
        self.with(|i| i.threads.push((id.clone(), parent.into(), name.into())));
        let channel =
            json!({"id": id, "type": 11, "parent_id": parent, "guild_id": GUILD, "name": name});
        for bot in self.with(|i| i.bots.clone()) {
            self.dispatch(&bot, "THREAD_CREATE", channel.clone());
        }
        id
    }

    /// Dispatches event `t` with payload `d` in `bot`'s session: numbered, sent if connected,
    /// else kept for a RESUME.
    pub fn dispatch(&self, bot: &Bot, t: &str, d: Value) -> i64 {
        self.with(|i| {
            let session = i.sessions.entry(bot.name.clone()).or_default();
            let seq = session.events.last().map_or(1, |(s, _)| s + 1);
            let frame = json!({"op": 0, "t": t, "s": seq, "d": d});
            session.events.push((seq, frame.clone()));
            if let Some((_, socket)) = &session.socket {
                let _ = socket.send(Message::Text(frame.to_string().into()));
            }
            seq
        })
    }

    /// Person `name`'s message in guild channel (or thread) `channel`, dispatched to every
    /// bot; `extra` adds fields (`referenced_message`…). Mentions of installed bots written as
    /// `<@id>` are listed in `mentions`. Returns the message.
    pub fn human(&self, name: &str, channel: &str, text: &str, extra: Value) -> Value {
        let author = self.person(name);
        let roles = self.with(|i| i.roles.get(name).cloned().unwrap_or_default());
        let mut message = self.message(channel, author, text, Some(roles));
        merge(&mut message, extra);
        for bot in self.with(|i| i.bots.clone()) {
            self.dispatch(&bot, "MESSAGE_CREATE", message.clone());
        }
        message
    }

    /// Person `name`'s direct message to `bot`; returns the message.
    pub fn dm(&self, bot: &Bot, name: &str, text: &str) -> Value {
        let author = self.person(name);
        let channel = self.dm_channel(&bot.name, author["id"].as_str().unwrap_or_default());
        let message = self.message(&channel, author, text, None);
        self.dispatch(bot, "MESSAGE_CREATE", message.clone());
        message
    }

    /// A click by person `name` on the button `custom_id` of message `message_id` in
    /// `channel`, to `bot`; returns the interaction.
    pub fn click(
        &self,
        bot: &Bot,
        name: &str,
        channel: &str,
        message_id: &str,
        custom_id: &str,
    ) -> Value {
        let id = self.id();
        let user = self.person(name);
        let mut interaction = json!({"id": id, "application_id": bot.application_id, "type": 3,
            "token": format!("itok-{id}"), "version": 1, "channel_id": channel,
            "data": {"custom_id": custom_id, "component_type": 2},
            "message": {"id": message_id, "channel_id": channel}});
        if self.is_dm(channel) {
            interaction["user"] = user;
        } else {
            interaction["guild_id"] = GUILD.into();
            interaction["member"] = json!({"user": user, "roles": []});
        }
        self.dispatch(bot, "INTERACTION_CREATE", interaction.clone());
        interaction
    }

    fn person(&self, name: &str) -> Value {
        let id = self.user_id(name);
        json!({"id": id, "username": name, "global_name": name, "bot": false})
    }

    fn is_dm(&self, channel: &str) -> bool {
        self.with(|i| i.dms.iter().any(|(_, _, c)| c == channel))
    }

    fn dm_channel(&self, bot: &str, user: &str) -> String {
        if let Some(c) = self.with(|i| {
            i.dms
                .iter()
                .find(|(b, u, _)| b == bot && u == user)
                .map(|(_, _, c)| c.clone())
        }) {
            return c;
        }
        let id = self.id();
        self.with(|i| i.dms.push((bot.into(), user.into(), id.clone())));
        id
    }

    fn message(
        &self,
        channel: &str,
        author: Value,
        text: &str,
        roles: Option<Vec<String>>,
    ) -> Value {
        let id = self.id();
        let bots = self.with(|i| i.bots.clone());
        let mentions: Vec<Value> = bots
            .iter()
            .filter(|b| {
                text.contains(&format!("<@{}>", b.user_id))
                    || text.contains(&format!("<@!{}>", b.user_id))
            })
            .map(|b| json!({"id": b.user_id, "username": b.name, "bot": true}))
            .collect();
        let mut message = json!({"id": id, "channel_id": channel, "author": author, "content": text,
            "type": 0, "mentions": mentions, "timestamp": "2026-01-01T00:00:00Z"});
        if let Some(roles) = roles {
            message["guild_id"] = GUILD.into();
            message["member"] = json!({"roles": roles});
        }
        message
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(into), Value::Object(extra)) = (into, extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

/// Person `name`'s user id: `4000000000000000` and the order they were met in.
fn person_id(i: &Inner, name: &str) -> String {
    let at = i.people.iter().position(|p| p == name).unwrap_or(0);
    format!("{}", 400_000_000_000_000_001u64 + at as u64)
}

impl Inner {
    fn bot_by_token(&self, headers: &HeaderMap) -> Option<Bot> {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())?
            .strip_prefix("Bot ")?;
        self.bots.iter().find(|b| b.token == token).cloned()
    }

    fn channel(&self, id: &str) -> Option<Value> {
        match id {
            GENERAL => Some(json!({"id": GENERAL, "type": 0, "guild_id": GUILD, "name": "general"})),
            OTHER => Some(json!({"id": OTHER, "type": 0, "guild_id": GUILD, "name": "other"})),
            _ => self
                .threads
                .iter()
                .find(|(t, _, _)| t == id)
                .map(|(t, p, n)| json!({"id": t, "type": 11, "parent_id": p, "guild_id": GUILD, "name": n}))
                .or_else(|| {
                    self.dms
                        .iter()
                        .find(|(_, _, c)| c == id)
                        .map(|(_, _, c)| json!({"id": c, "type": 1}))
                }),
        }
    }

    /// The name of channel `id` as [`Line::chat`] says it.
    fn chat_name(&self, id: &str) -> String {
        if id == GENERAL {
            return "#general".into();
        }
        if let Some((_, user, _)) = self.dms.iter().find(|(_, _, c)| c == id) {
            let person = self
                .people
                .iter()
                .find(|p| person_id(self, p) == *user)
                .cloned()
                .unwrap_or_else(|| user.clone());
            return format!("dm {person}");
        }
        match self.threads.iter().find(|(t, _, _)| t == id) {
            Some((_, _, name)) => format!("thread {name}"),
            None => id.to_string(),
        }
    }
}

fn discord_error(status: u16, message: &str, code: u64) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

fn limited(retry_after: f64, global: bool, scope: &str) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": global})),
    )
        .into_response();
    let headers = response.headers_mut();
    let mut set = |k: &'static str, v: String| {
        if let Ok(v) = axum::http::HeaderValue::from_str(&v) {
            headers.insert(k, v);
        }
    };
    set("retry-after", format!("{}", retry_after.ceil() as u64));
    set("x-ratelimit-scope", scope.to_string());
    if global {
        set("x-ratelimit-global", "true".into());
    }
    response
}

async fn api(
    State(fake): State<Fake>,
    method: Method,
    Path(path): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = format!("/{path}");
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let bot = fake.with(|i| i.bot_by_token(&headers));
    let now = Instant::now();
    // The global limit first: a call while it holds is early.
    let global = fake.with(|i| {
        let holding = i.global_until.is_some_and(|u| now < u);
        if i.global_next > 0 {
            i.global_next -= 1;
            i.global_until = Some(now + Duration::from_secs(1));
            Some(false)
        } else if holding {
            Some(true)
        } else {
            None
        }
    });
    let record = |status: u16, early: bool, message_id: Option<String>| {
        fake.with(|i| {
            i.calls.push(Call {
                method: method.to_string(),
                path: path.clone(),
                bot: bot.as_ref().map(|b| b.name.clone()),
                body: body.clone(),
                status,
                early,
                message_id,
            })
        })
    };
    if let Some(early) = global {
        record(429, early, None);
        return limited(1.0, true, "global");
    }
    // A webhook's and an interaction's token are their own authorization.
    let webhook = path.starts_with("/webhooks/") || path.starts_with("/interactions/");
    if bot.is_none() && !webhook {
        record(401, false, None);
        return discord_error(401, "401: Unauthorized", 0);
    }
    let bot = bot.clone().unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("GET", ["gateway", "bot"]) => {
            record(200, false, None);
            Json(json!({"url": format!("ws://{}/gateway", fake.ws_addr), "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}))
                .into_response()
        }
        ("GET", ["users", "@me"]) => {
            record(200, false, None);
            Json(json!({"id": bot.user_id, "username": bot.name, "bot": true})).into_response()
        }
        ("GET", ["users", "@me", "guilds"]) => {
            record(200, false, None);
            Json(json!([{"id": GUILD, "name": "Fake Guild"}])).into_response()
        }
        ("POST", ["users", "@me", "channels"]) => {
            let user = body["recipient_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let id = fake.dm_channel(&bot.name, &user);
            record(200, false, None);
            Json(json!({"id": id, "type": 1, "recipients": [{"id": user}]})).into_response()
        }
        ("GET", ["channels", id]) => match fake.with(|i| i.channel(id)) {
            Some(channel) => {
                record(200, false, None);
                Json(channel).into_response()
            }
            None => {
                record(404, false, None);
                discord_error(404, "Unknown Channel", 10003)
            }
        },
        ("POST", ["channels", id, "messages"]) => post_message(&fake, &bot, id, &body, &record),
        ("PATCH", ["channels", id, "messages", message]) => {
            let line = fake.with(|i| posted_line(i, id, &body, true));
            fake.with(|i| i.transcript.push(line));
            record(200, false, None);
            Json(json!({"id": message, "channel_id": id, "content": body["content"]}))
                .into_response()
        }
        ("POST", ["interactions", _, _, "callback"]) => {
            record(204, false, None);
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["webhooks", _, _]) => {
            let id = fake.id();
            record(200, false, Some(id.clone()));
            Json(json!({"id": id, "content": body["content"], "flags": body["flags"]}))
                .into_response()
        }
        ("GET", ["guilds", GUILD, "channels"]) => {
            record(200, false, None);
            Json(json!([
                {"id": GENERAL, "type": 0, "guild_id": GUILD, "name": "general"},
                {"id": OTHER, "type": 0, "guild_id": GUILD, "name": "other"}
            ]))
            .into_response()
        }
        ("GET", ["guilds", GUILD, "roles"]) => {
            record(200, false, None);
            Json(json!([
                {"id": GUILD, "name": "@everyone"},
                {"id": ADMIN_ROLE, "name": "admin"},
                {"id": MEMBER_ROLE, "name": "member"}
            ]))
            .into_response()
        }
        ("GET", ["guilds", GUILD, "members", "search"]) => {
            let q = query
                .get("query")
                .cloned()
                .unwrap_or_default()
                .to_lowercase();
            let members: Vec<Value> = fake.with(|i| {
                i.people
                    .iter()
                    .filter(|p| p.to_lowercase().starts_with(&q))
                    .map(|p| json!({"user": {"id": person_id(i, p), "username": p, "global_name": p}, "roles": i.roles.get(p).cloned().unwrap_or_default()}))
                    .collect()
            });
            record(200, false, None);
            Json(Value::Array(members)).into_response()
        }
        _ => {
            record(404, false, None);
            discord_error(404, "404: Not Found", 0)
        }
    }
}

/// `POST /channels/{id}/messages`: the bucket kept, the message made, dispatched to the bots
/// that see the channel.
fn post_message(
    fake: &Fake,
    bot: &Bot,
    channel: &str,
    body: &Value,
    record: &dyn Fn(u16, bool, Option<String>),
) -> Response {
    let now = Instant::now();
    let exists = fake.with(|i| i.channel(channel).is_some());
    if !exists {
        record(404, false, None);
        return discord_error(404, "Unknown Channel", 10003);
    }
    // The bucket: per channel, `limit` calls a window.
    let verdict = fake.with(|i| {
        if i.limited_next > 0 {
            i.limited_next -= 1;
            i.windows.insert(
                channel.to_string(),
                (u32::MAX, now + Duration::from_secs(1), true),
            );
            return Err((false, 1.0));
        }
        let Some((limit, window)) = i.bucket else {
            return Ok(None);
        };
        let entry = i
            .windows
            .entry(channel.to_string())
            .or_insert((0, now + window, false));
        if now >= entry.1 {
            *entry = (0, now + window, false);
        }
        if entry.0 >= limit {
            let early = entry.2;
            return Err((early, (entry.1 - now).as_secs_f64()));
        }
        entry.0 += 1;
        let remaining = limit - entry.0;
        entry.2 = remaining == 0;
        Ok(Some((limit, remaining, (entry.1 - now).as_secs_f64())))
    });
    let headers = match verdict {
        Err((early, retry_after)) => {
            record(429, early, None);
            return limited(retry_after.max(0.001), false, "user");
        }
        Ok(headers) => headers,
    };
    let id = fake.id();
    let guild = fake
        .with(|i| i.channel(channel))
        .and_then(|c| c["guild_id"].as_str().map(str::to_string));
    let mut message = json!({"id": id, "channel_id": channel, "content": body["content"], "type": if body.get("message_reference").is_some() { 19 } else { 0 },
        "author": {"id": bot.user_id, "username": bot.name, "bot": true}, "mentions": [],
        "timestamp": "2026-01-01T00:00:00Z"});
    if let Some(reference) = body.get("message_reference") {
        message["message_reference"] = reference.clone();
    }
    if let Some(components) = body.get("components") {
        message["components"] = components.clone();
    }
    let buttons: Vec<(String, String)> = body["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row["components"].as_array())
        .flatten()
        .map(|b| {
            let text = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            (text("label"), text("custom_id"))
        })
        .collect();
    fake.with(|i| {
        let line = posted_line(i, channel, body, false);
        i.transcript.push(line);
        if !buttons.is_empty() {
            i.buttons.push((channel.to_string(), id.clone(), buttons));
        }
    });
    record(200, false, Some(id.clone()));
    // Like Discord: every bot that sees the channel gets the message (the poster too).
    let recipients: Vec<Bot> = match &guild {
        Some(g) => {
            message["guild_id"] = g.as_str().into();
            message["member"] = json!({"roles": []});
            fake.with(|i| i.bots.clone())
        }
        None => vec![bot.clone()],
    };
    let echo = fake.clone();
    let dispatched = message.clone();
    tokio::spawn(async move {
        for b in recipients {
            echo.dispatch(&b, "MESSAGE_CREATE", dispatched.clone());
        }
    });
    let mut response = Json(message).into_response();
    if let Some((limit, remaining, reset_after)) = headers {
        let h = response.headers_mut();
        let set = |h: &mut HeaderMap, k: &'static str, v: String| {
            if let Ok(v) = v.parse() {
                h.insert(k, v);
            }
        };
        set(h, "x-ratelimit-limit", limit.to_string());
        set(h, "x-ratelimit-remaining", remaining.to_string());
        set(h, "x-ratelimit-reset-after", format!("{reset_after:.3}"));
        set(h, "x-ratelimit-bucket", "fake-post-bucket".into());
    }
    response
}

/// What a bot posted or edited, as a transcript line.
fn posted_line(i: &Inner, channel: &str, body: &Value, edited: bool) -> Line {
    let labels = body["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row["components"].as_array())
        .flatten()
        .filter_map(|b| b["label"].as_str().map(str::to_string))
        .collect();
    Line::posted(
        i.chat_name(channel),
        body["content"].as_str().unwrap_or_default(),
        labels,
        edited,
    )
}

/// One Gateway connection: HELLO, then what the bot says. The connection's sender is held by
/// the fake only (pending, then its bot's session): when the fake drops it, the connection
/// ends without a close frame.
#[allow(clippy::result_large_err)] // tungstenite's handshake callback type
async fn gateway(fake: Fake, stream: tokio::net::TcpStream) {
    let mut path = String::new();
    let callback = |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                    response| {
        path = request.uri().path().to_string();
        Ok(response)
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let interval = fake.with(|i| i.heartbeat_ms);
    let _ = tx.send(Message::Text(
        json!({"op": 10, "d": {"heartbeat_interval": interval}})
            .to_string()
            .into(),
    ));
    let conn = fake.with(|i| {
        i.next_id += 1;
        i.pending.insert(i.next_id, tx);
        i.next_id
    });
    let mut bot: Option<Bot> = None;
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(m) => {
                    let close = matches!(m, Message::Close(_));
                    if sink.send(m).await.is_err() || close {
                        return;
                    }
                }
                // Dropped by the fake: gone without a close frame.
                None => return,
            },
            inbound = source.next() => {
                let text = match inbound {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(_)) => continue,
                    _ => {
                        fake.with(|i| i.pending.remove(&conn));
                        return;
                    }
                };
                let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if let Some(token) = frame["d"]["token"].as_str() {
                    bot = fake.with(|i| i.bots.iter().find(|b| b.token == token).cloned());
                }
                fake.with(|i| i.sent.push(Sent { bot: bot.as_ref().map(|b| b.name.clone()), path: path.clone(), frame: frame.clone() }));
                match (frame["op"].as_u64(), &bot) {
                    (Some(1), _) => fake.send_on(conn, &json!({"op": 11})),
                    (Some(2), Some(b)) => identify(&fake, b, conn),
                    (Some(6), Some(b)) => resume(&fake, b, conn, &frame["d"]),
                    (Some(2 | 6), None) => {
                        let refusal = Message::Close(Some(CloseFrame {
                            code: CloseCode::from(4004),
                            reason: "Authentication failed.".into(),
                        }));
                        fake.with(|i| {
                            if let Some(tx) = i.pending.get(&conn) {
                                let _ = tx.send(refusal);
                            }
                        });
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Fake {
    /// Sends `frame` on connection `conn`, wherever its sender is.
    fn send_on(&self, conn: u64, frame: &Value) {
        self.with(|i| {
            let pending = i.pending.get(&conn);
            let owned = i
                .sessions
                .values()
                .filter_map(|s| s.socket.as_ref())
                .find(|(c, _)| *c == conn)
                .map(|(_, tx)| tx);
            if let Some(tx) = pending.or(owned) {
                let _ = tx.send(Message::Text(frame.to_string().into()));
            }
        });
    }

    /// Connection `conn` becomes `bot`'s (a connection it had before is closed).
    fn adopt(&self, bot: &Bot, conn: u64) -> bool {
        self.with(|i| {
            let Some(tx) = i.pending.remove(&conn) else {
                return false;
            };
            i.sessions.entry(bot.name.clone()).or_default().socket = Some((conn, tx));
            true
        })
    }
}

/// IDENTIFY: a new session, READY and the guild.
fn identify(fake: &Fake, bot: &Bot, conn: u64) {
    if !fake.adopt(bot, conn) {
        return;
    }
    let session_id = format!("session-{}", fake.id());
    fake.with(|i| {
        let s = i.sessions.entry(bot.name.clone()).or_default();
        s.id = session_id.clone();
        s.events.clear();
    });
    fake.dispatch(
        bot,
        "READY",
        json!({"v": 10, "user": {"id": bot.user_id, "username": bot.name, "bot": true},
            "session_id": session_id, "resume_gateway_url": format!("ws://{}/resume", fake.ws_addr),
            "application": {"id": bot.application_id, "flags": 0},
            "guilds": [{"id": GUILD, "unavailable": true}]}),
    );
    let threads: Vec<Value> = fake.with(|i| {
        i.threads
            .iter()
            .map(|(t, p, n)| json!({"id": t, "type": 11, "parent_id": p, "guild_id": GUILD, "name": n}))
            .collect()
    });
    fake.dispatch(
        bot,
        "GUILD_CREATE",
        json!({"id": GUILD, "name": "Fake Guild",
            "channels": [{"id": GENERAL, "type": 0, "name": "general"}, {"id": OTHER, "type": 0, "name": "other"}],
            "threads": threads,
            "roles": [{"id": ADMIN_ROLE, "name": "admin"}, {"id": MEMBER_ROLE, "name": "member"}]}),
    );
}

/// RESUME: what the session dispatched after `seq`, then RESUMED; a session the fake does not
/// know (or invalidated) is op 9.
fn resume(fake: &Fake, bot: &Bot, conn: u64, d: &Value) {
    let asked = d["session_id"].as_str().unwrap_or_default();
    let seq = d["seq"].as_i64().unwrap_or(0);
    let known = fake.with(|i| {
        i.sessions
            .get(&bot.name)
            .is_some_and(|s| !s.id.is_empty() && s.id == asked)
    });
    if !known {
        fake.send_on(conn, &json!({"op": 9, "d": false}));
        return;
    }
    if !fake.adopt(bot, conn) {
        return;
    }
    let missed: Vec<Value> = fake.with(|i| {
        i.sessions
            .get(&bot.name)
            .map(|s| {
                s.events
                    .iter()
                    .filter(|(n, _)| *n > seq)
                    .map(|(_, f)| f.clone())
                    .collect()
            })
            .unwrap_or_default()
    });
    for frame in missed {
        fake.send_on(conn, &frame);
    }
    fake.dispatch(bot, "RESUMED", json!({}));
}

impl Platform for Fake {
    /// `@name` of an installed bot is written as Discord writes a mention, `<@id>`.
    fn say(&self, from: &str, chat: Chat, text: &str) -> usize {
        let mut wire = text.to_string();
        let bots = self.with(|i| i.bots.clone());
        for bot in &bots {
            wire = wire.replace(&format!("@{}", bot.name), &format!("<@{}>", bot.user_id));
        }
        let name = self.chat_name(from, chat);
        let mark = self.with(|i| {
            let mark = i.transcript.len();
            i.transcript.push(Line::said(name, from, text));
            mark
        });
        match (chat, bots.first()) {
            (Chat::Direct, Some(bot)) => {
                self.dm(bot, from, &wire);
            }
            _ => {
                self.human(from, GENERAL, &wire, Value::Null);
            }
        }
        mark
    }

    fn press(&self, from: &str, chat: Chat, n: usize) -> Result<usize, String> {
        let name = self.chat_name(from, chat);
        let channel = match chat {
            Chat::Group => GENERAL.to_string(),
            Chat::Direct => {
                let bot = self
                    .with(|i| i.bots.first().cloned())
                    .ok_or("no bot is installed")?;
                let user = self.user_id(from);
                self.dm_channel(&bot.name, &user)
            }
        };
        let (message, label, custom, bot) = self.with(|i| {
            let (_, message, buttons) = i
                .buttons
                .iter()
                .rev()
                .find(|(c, _, _)| *c == channel)
                .ok_or_else(|| format!("the bot posted no buttons in {name}"))?;
            let (label, custom) = n
                .checked_sub(1)
                .and_then(|at| buttons.get(at))
                .cloned()
                .ok_or_else(|| format!("the bot's latest buttons in {name} have no button {n}"))?;
            let bot = i.bots.first().cloned().ok_or("no bot is installed")?;
            Ok::<_, String>((message.clone(), label, custom, bot))
        })?;
        let mark = self.with(|i| {
            let mark = i.transcript.len();
            i.transcript
                .push(Line::said(name, from, &format!("[pressed {label}]")));
            mark
        });
        self.click(&bot, from, &channel, &message, &custom);
        Ok(mark)
    }

    fn transcript(&self, from: usize) -> Vec<Line> {
        self.with(|i| i.transcript.get(from..).unwrap_or_default().to_vec())
    }

    fn chat_name(&self, from: &str, chat: Chat) -> String {
        match chat {
            Chat::Group => "#general".into(),
            Chat::Direct => format!("dm {from}"),
        }
    }
}
