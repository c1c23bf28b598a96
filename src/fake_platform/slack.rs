//! A local fake of Slack for deepcli's adapter: the Web API methods it uses (auth.test,
//! apps.connections.open, chat.postMessage, chat.update, chat.postEphemeral, users.list,
//! conversations.list), the Socket Mode WebSocket (hello, events_api and interactive
//! envelopes, acks, disconnect, drops) and an Events API and interactivity sender that signs
//! its POSTs as Slack does. Like Slack, a message posted by one app is delivered
//! as an event to every app in the workspace (so two bots can talk in one thread), and a
//! message mentioning an app also brings that app an `app_mention`. Every call is recorded.
//! People chat through it ([`Platform`]): `alice` is user `U0ALICE`, her direct chat with the
//! bot `D0ALICE`, and the one group channel `C0GROUP`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::{Chat, Line, Platform};

pub const TEAM: &str = "T0TEAM";
/// The one group channel people can write in.
pub const GROUP: &str = "C0GROUP";

/// One app (bot) installed in the fake workspace.
#[derive(Clone, Debug)]
pub struct App {
    pub name: String,
    pub bot_token: String,
    pub app_token: String,
    pub user_id: String,
    pub bot_id: String,
    /// Events API: where to POST (`http://<controller>/v1/slack/<account>/events`) and the
    /// signing secret; `None`: Socket Mode.
    pub http: Option<(String, String)>,
}

/// A button of a message: where it is, and what it carries.
#[derive(Debug, Clone, Copy)]
pub struct Button<'a> {
    pub channel: &'a str,
    pub ts: &'a str,
    pub thread_ts: Option<&'a str>,
    pub action_id: &'a str,
    pub value: &'a str,
}

#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub token: String,
    pub body: Value,
    /// chat.postMessage: the ts of the message it made.
    pub ts: Option<String>,
}

#[derive(Default)]
struct Inner {
    apps: Vec<App>,
    calls: Vec<Call>,
    /// Open sockets by app name.
    sockets: Vec<(String, mpsc::UnboundedSender<Message>)>,
    /// Envelope ids acknowledged over a socket.
    acks: Vec<String>,
    /// HTTP deliveries: (app, status, elapsed).
    posts: Vec<(String, u16, Duration)>,
    next_ts: u64,
    next_event: u64,
    rate_limits: u32,
    /// Users and channels of the directory (users.list, conversations.list).
    users: Vec<Value>,
    channels: Vec<Value>,
    /// What people said and the apps posted, as a chat shows it.
    transcript: Vec<Line>,
    /// The people who spoke, by name.
    people: Vec<String>,
}

#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
    ws_addr: SocketAddr,
    /// The runtime the fake's own HTTP deliveries (Events API, interactivity) run on.
    runtime: tokio::runtime::Handle,
    http: reqwest::Client,
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

    /// The fake's Web API on `addr` (its Socket Mode sockets on another port of the same
    /// host), served by its own runtime until the server is dropped.
    pub fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (listener, ws) = runtime.block_on(async {
            let ws_addr = SocketAddr::new(addr.ip(), 0);
            Ok::<_, std::io::Error>((
                tokio::net::TcpListener::bind(addr).await?,
                tokio::net::TcpListener::bind(ws_addr).await?,
            ))
        })?;
        let http = crate::http_client::direct()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(std::io::Error::other)?;
        let fake = Fake {
            inner: Arc::new(Mutex::new(Inner {
                next_ts: 1_700_000_000,
                ..Inner::default()
            })),
            ws_addr: ws.local_addr()?,
            runtime: runtime.handle().clone(),
            http,
        };
        let app = Router::new()
            .route("/api/{method}", axum::routing::post(api))
            .merge(super::control())
            .with_state(fake.clone());
        let addr = listener.local_addr()?;
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let sockets = fake.clone();
        runtime.spawn(async move {
            while let Ok((stream, _)) = ws.accept().await {
                tokio::spawn(socket(sockets.clone(), stream));
            }
        });
        Ok(Server {
            fake,
            addr,
            _runtime: runtime,
        })
    }

    /// The Web API's base URL (`apiBase`).
    pub fn base(&self) -> String {
        format!("http://{}/api", self.addr)
    }
}

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Installs an app; `n` makes its tokens and ids.
    pub fn install(&self, name: &str, n: u32, http: Option<(String, String)>) -> App {
        let app = App {
            name: name.into(),
            bot_token: format!("xoxb-{n}-test"),
            app_token: format!("xapp-{n}-test"),
            user_id: format!("U0BOT{n}"),
            bot_id: format!("B0BOT{n}"),
            http,
        };
        self.with(|i| i.apps.push(app.clone()));
        app
    }

    pub fn set_http(&self, name: &str, http: Option<(String, String)>) {
        self.with(|i| {
            if let Some(a) = i.apps.iter_mut().find(|a| a.name == name) {
                a.http = http;
            }
        });
    }

    pub fn directory(&self, users: Vec<Value>, channels: Vec<Value>) {
        self.with(|i| {
            i.users = users;
            i.channels = channels;
        });
    }

    pub fn calls(&self) -> Vec<Call> {
        self.with(|i| i.calls.clone())
    }

    pub fn posted(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "chat.postMessage")
            .collect()
    }

    /// Messages posted by app `name`.
    pub fn posted_by(&self, app: &App) -> Vec<Value> {
        self.posted()
            .into_iter()
            .filter(|c| c.token == app.bot_token)
            .map(|c| c.body)
            .collect()
    }

    pub fn acks(&self) -> Vec<String> {
        self.with(|i| i.acks.clone())
    }

    pub fn posts(&self) -> Vec<(String, u16, Duration)> {
        self.with(|i| i.posts.clone())
    }

    pub fn sockets(&self, app: &App) -> usize {
        self.with(|i| {
            i.sockets
                .iter()
                .filter(|(n, tx)| n == &app.name && !tx.is_closed())
                .count()
        })
    }

    pub fn rate_limit_next_posts(&self, n: u32) {
        self.with(|i| i.rate_limits = n);
    }

    /// Drops every socket of `app` (no close frame).
    pub fn drop_sockets(&self, app: &App) {
        self.with(|i| i.sockets.retain(|(n, _)| n != &app.name));
    }

    /// Sends `disconnect` (refresh_requested) on every socket of `app`.
    pub fn ask_reconnect(&self, app: &App) {
        let frame = json!({"type": "disconnect", "reason": "refresh_requested"}).to_string();
        self.with(|i| {
            for (_, tx) in i.sockets.iter().filter(|(n, _)| n == &app.name) {
                let _ = tx.send(Message::Text(frame.clone().into()));
            }
        });
    }

    fn ts(&self) -> String {
        self.with(|i| {
            i.next_ts += 1;
            format!("{}.000100", i.next_ts)
        })
    }

    /// A human's message in `channel` (thread `thread_ts`), delivered to every app; returns
    /// its ts.
    pub fn human(&self, channel: &str, user: &str, text: &str, thread_ts: Option<&str>) -> String {
        let ts = self.ts();
        let mut event = json!({"type": "message", "channel": channel, "channel_type": channel_type(channel),
            "user": user, "text": text, "ts": ts, "team": TEAM});
        if let Some(t) = thread_ts {
            event["thread_ts"] = t.into();
            event["parent_user_id"] = "U0HUMAN".into();
        }
        self.broadcast(event);
        ts
    }

    /// Delivers `event` to every app (an `app_mention` too to the apps it mentions).
    pub fn broadcast(&self, event: Value) {
        let apps = self.with(|i| i.apps.clone());
        let text = event["text"].as_str().unwrap_or_default().to_string();
        for app in apps {
            self.deliver(&app, event.clone());
            if text.contains(&format!("<@{}>", app.user_id)) && event["channel_type"] != "im" {
                let mut mention = event.clone();
                mention["type"] = "app_mention".into();
                if let Some(fields) = mention.as_object_mut() {
                    fields.remove("channel_type");
                }
                self.deliver(&app, mention);
            }
        }
    }

    /// One event to one app, by its transport; returns the payload sent.
    pub fn deliver(&self, app: &App, event: Value) -> Value {
        let id = self.with(|i| {
            i.next_event += 1;
            i.next_event
        });
        let payload = json!({"token": "verification", "team_id": TEAM, "api_app_id": format!("A{}", app.name),
            "event": event, "type": "event_callback", "event_id": format!("Ev{id:06}"), "event_time": 1});
        self.send_payload(app, &payload, 0);
        payload
    }

    /// A click by `user` on button `on` of one of `app`'s messages: a `block_actions` interaction, over the app's socket (an
    /// `interactive` envelope) or POSTed signed as a form to its interactivity URL (its events
    /// URL's `/events` → `/interactive`); returns the payload.
    pub fn click(&self, app: &App, user: &str, on: &Button<'_>) -> Value {
        let Button {
            channel,
            ts,
            thread_ts,
            action_id,
            value,
        } = *on;
        let id = self.with(|i| {
            i.next_event += 1;
            i.next_event
        });
        let mut container = json!({"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": false});
        if let Some(t) = thread_ts {
            container["thread_ts"] = t.into();
        }
        let payload = json!({"type": "block_actions", "team": {"id": TEAM}, "user": {"id": user},
            "api_app_id": format!("A{}", app.name), "trigger_id": format!("trig-{id}"),
            "container": container, "channel": {"id": channel}, "message": {"ts": ts, "type": "message"},
            "actions": [{"type": "button", "action_id": action_id, "block_id": "deepcli_approval",
                "value": value, "action_ts": "1"}]});
        match &app.http {
            None => {
                let frame = json!({"type": "interactive", "envelope_id": format!("int-{id}"), "payload": payload, "accepts_response_payload": false});
                self.with(|i| {
                    for (_, tx) in i.sockets.iter().filter(|(n, _)| n == &app.name) {
                        let _ = tx.send(Message::Text(frame.to_string().into()));
                    }
                });
            }
            Some((url, secret)) => {
                let url = url.replace("/events", "/interactive");
                let body: String = form_urlencoded::Serializer::new(String::new())
                    .append_pair("payload", &payload.to_string())
                    .finish();
                let status =
                    self.post_signed(&url, secret, jiff::Timestamp::now().as_second(), &body, 0);
                self.with(|i| i.posts.push((app.name.clone(), status.0, status.1)));
            }
        }
        payload
    }

    /// Calls of `method` made with `app`'s bot token.
    pub fn calls_by(&self, app: &App, method: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method && c.token == app.bot_token)
            .map(|c| c.body)
            .collect()
    }

    /// Sends a payload again (a Slack retry: `X-Slack-Retry-Num`).
    pub fn send_payload(&self, app: &App, payload: &Value, retry: u32) {
        match &app.http {
            None => {
                let frame = json!({"type": "events_api", "envelope_id": format!("env-{}", payload["event_id"].as_str().unwrap_or("")), "payload": payload, "retry_attempt": retry, "accepts_response_payload": false});
                self.with(|i| {
                    for (_, tx) in i.sockets.iter().filter(|(n, _)| n == &app.name) {
                        let _ = tx.send(Message::Text(frame.to_string().into()));
                    }
                });
            }
            Some((url, secret)) => {
                let body = payload.to_string();
                let now = jiff::Timestamp::now().as_second();
                let status = self.post_signed(url, secret, now, &body, retry);
                self.with(|i| i.posts.push((app.name.clone(), status.0, status.1)));
            }
        }
    }

    /// POSTs `body` to `url` signed with `secret` at `timestamp` (Slack's v0 scheme, written
    /// here from Slack's documentation); the status and how long the answer took.
    pub fn post_signed(
        &self,
        url: &str,
        secret: &str,
        timestamp: i64,
        body: &str,
        retry: u32,
    ) -> (u16, Duration) {
        use hmac::Mac;
        // HMAC takes a key of any length.
        let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
            return (0, Duration::ZERO);
        };
        mac.update(format!("v0:{timestamp}:{body}").as_bytes());
        let signature = hex::encode(mac.finalize().into_bytes());
        self.post_raw(
            url,
            &[
                ("x-slack-request-timestamp", timestamp.to_string()),
                ("x-slack-signature", format!("v0={signature}")),
                ("x-slack-retry-num", retry.to_string()),
            ],
            body,
        )
    }

    /// POSTs `body` to `url` with `headers`, as Slack does: blocking until the answer; its
    /// status (0: none) and how long it took.
    pub fn post_raw(&self, url: &str, headers: &[(&str, String)], body: &str) -> (u16, Duration) {
        // Slack sends interactions as a form, events as JSON.
        let content_type = if body.starts_with("payload=") {
            "application/x-www-form-urlencoded"
        } else {
            "application/json"
        };
        let started = Instant::now();
        // reqwest's timers need the runtime: the request is made inside it.
        let status = self.runtime.block_on(async {
            let mut request = self.http.post(url);
            for (k, v) in headers {
                request = request.header(*k, v);
            }
            request
                .header("content-type", content_type)
                .body(body.to_string())
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        });
        (status, started.elapsed())
    }
}

/// `name`'s user id: `U0` and the name's letters and digits in capitals.
fn user_id(name: &str) -> String {
    let letters: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    format!("U0{letters}")
}

impl Inner {
    /// The name of `channel` as [`Line::chat`] says it.
    fn chat_name(&self, channel: &str) -> String {
        if channel == GROUP {
            return "group".into();
        }
        let person = channel
            .strip_prefix("D0")
            .and_then(|id| self.people.iter().find(|p| user_id(p)[2..] == *id));
        match person {
            Some(name) => format!("dm {name}"),
            None => channel.to_string(),
        }
    }
}

/// The channel of `chat` for `from`.
fn channel_of(from: &str, chat: Chat) -> String {
    match chat {
        Chat::Direct => format!("D0{}", &user_id(from)[2..]),
        Chat::Group => GROUP.into(),
    }
}

impl Fake {
    fn meet(&self, name: &str) {
        self.with(|i| {
            if !i.people.iter().any(|p| p == name) {
                i.people.push(name.to_string());
            }
        });
    }
}

impl Platform for Fake {
    /// `@name` of an installed app is written as Slack writes a mention, `<@U…>`.
    fn say(&self, from: &str, chat: Chat, text: &str) -> usize {
        self.meet(from);
        let channel = channel_of(from, chat);
        let mut wire = text.to_string();
        for app in self.with(|i| i.apps.clone()) {
            wire = wire.replace(&format!("@{}", app.name), &format!("<@{}>", app.user_id));
        }
        let mark = self.with(|i| {
            let mark = i.transcript.len();
            let name = i.chat_name(&channel);
            i.transcript.push(Line::said(name, from, text));
            mark
        });
        self.human(&channel, &user_id(from), &wire, None);
        mark
    }

    fn press(&self, from: &str, chat: Chat, n: usize) -> Result<usize, String> {
        self.meet(from);
        let channel = channel_of(from, chat);
        let (mark, app, ts, thread_ts, action_id, value) = self.with(|i| {
            let name = i.chat_name(&channel);
            let (call, buttons) = i
                .calls
                .iter()
                .rev()
                .filter(|c| c.method == "chat.postMessage" && c.body["channel"] == channel)
                .find_map(|c| {
                    let buttons = buttons(&c.body);
                    (!buttons.is_empty() && c.ts.is_some()).then_some((c, buttons))
                })
                .ok_or_else(|| format!("the bot posted no buttons in {name}"))?;
            let button = n
                .checked_sub(1)
                .and_then(|at| buttons.into_iter().nth(at))
                .ok_or_else(|| format!("the bot's latest buttons in {name} have no button {n}"))?;
            let app = i
                .apps
                .iter()
                .find(|a| a.bot_token == call.token)
                .cloned()
                .ok_or_else(|| "the app that posted the buttons is gone".to_string())?;
            let ts = call.ts.clone().unwrap_or_default();
            let thread_ts = call.body["thread_ts"].as_str().map(str::to_string);
            let mark = i.transcript.len();
            i.transcript.push(Line::said(
                name,
                from,
                &format!("[pressed {}]", button.label),
            ));
            Ok::<_, String>((mark, app, ts, thread_ts, button.action_id, button.value))
        })?;
        self.click(
            &app,
            &user_id(from),
            &Button {
                channel: &channel,
                ts: &ts,
                thread_ts: thread_ts.as_deref(),
                action_id: &action_id,
                value: &value,
            },
        );
        Ok(mark)
    }

    fn transcript(&self, from: usize) -> Vec<Line> {
        self.with(|i| i.transcript.get(from..).unwrap_or_default().to_vec())
    }

    fn chat_name(&self, from: &str, chat: Chat) -> String {
        self.meet(from);
        self.with(|i| i.chat_name(&channel_of(from, chat)))
    }
}

/// A button of a posted message's blocks.
struct Posted {
    label: String,
    action_id: String,
    value: String,
}

/// The buttons of a chat.postMessage or chat.update body, in order.
fn buttons(body: &Value) -> Vec<Posted> {
    body["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["elements"].as_array())
        .flatten()
        .filter(|e| e["type"] == "button")
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            Posted {
                label: text(&e["text"]["text"]),
                action_id: text(&e["action_id"]),
                value: text(&e["value"]),
            }
        })
        .collect()
}

/// What an app posted, as a transcript line.
fn posted(i: &Inner, body: &Value, edited: bool) -> Line {
    let labels = buttons(body).into_iter().map(|b| b.label).collect();
    Line::posted(
        i.chat_name(body["channel"].as_str().unwrap_or_default()),
        body["text"].as_str().unwrap_or_default(),
        labels,
        edited,
    )
}

fn channel_type(channel: &str) -> &'static str {
    match channel.chars().next() {
        Some('D') => "im",
        Some('G') => "mpim",
        _ => "channel",
    }
}

/// Percent-decoding of a form field (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string()
}

async fn api(
    State(fake): State<Fake>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let token = bearer(&headers);
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    // Like Slack: JSON for write methods, a form for the rest.
    let body: Value = if form {
        Value::Object(
            String::from_utf8_lossy(&body)
                .split('&')
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((decode(k), Value::String(decode(v))))
                })
                .collect(),
        )
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    let json_method = matches!(
        method.as_str(),
        "chat.postMessage" | "chat.update" | "chat.postEphemeral"
    );
    if form == json_method {
        return Json(json!({"ok": false, "error": "invalid_form_data"})).into_response();
    }
    let index = fake.with(|i| {
        i.calls.push(Call {
            method: method.clone(),
            token: token.clone(),
            body: body.clone(),
            ts: None,
        });
        i.calls.len() - 1
    });
    let apps = fake.with(|i| i.apps.clone());
    let by_bot = apps.iter().find(|a| a.bot_token == token).cloned();
    let by_app = apps.iter().find(|a| a.app_token == token).cloned();
    let bad = || Json(json!({"ok": false, "error": "invalid_auth"})).into_response();
    match method.as_str() {
        "auth.test" => match by_bot {
            Some(a) => Json(json!({"ok": true, "url": "https://fake.slack.com/", "team": "Fake", "user": a.name, "team_id": TEAM, "user_id": a.user_id, "bot_id": a.bot_id})).into_response(),
            None => bad(),
        },
        "apps.connections.open" => match by_app {
            Some(a) => Json(json!({"ok": true, "url": format!("ws://{}/{}", fake.ws_addr, a.name)})).into_response(),
            None => bad(),
        },
        "chat.postMessage" => {
            let Some(app) = by_bot else { return bad() };
            let limited = fake.with(|i| {
                if i.rate_limits > 0 {
                    i.rate_limits -= 1;
                    true
                } else {
                    false
                }
            });
            if limited {
                return (axum::http::StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], Json(json!({"ok": false, "error": "ratelimited"}))).into_response();
            }
            let channel = body["channel"].as_str().unwrap_or_default().to_string();
            if !channel.starts_with(['C', 'D', 'G']) {
                return Json(json!({"ok": false, "error": "channel_not_found"})).into_response();
            }
            let ts = fake.ts();
            fake.with(|i| {
                i.calls[index].ts = Some(ts.clone());
                let line = posted(i, &body, false);
                i.transcript.push(line);
            });
            let mut event = json!({"type": "message", "channel": channel, "channel_type": channel_type(&channel),
                "user": app.user_id, "bot_id": app.bot_id, "text": body["text"], "ts": ts, "team": TEAM});
            if let Some(t) = body["thread_ts"].as_str() {
                event["thread_ts"] = t.into();
                event["parent_user_id"] = "U0HUMAN".into();
            }
            // Like Slack: every app in the workspace sees the bot's message (after the
            // answer, as Slack's events follow the API call).
            let echo = fake.clone();
            tokio::spawn(async move {
                tokio::task::spawn_blocking(move || echo.broadcast(event)).await.ok();
            });
            Json(json!({"ok": true, "channel": channel, "ts": ts})).into_response()
        }
        "chat.update" => {
            if by_bot.is_none() {
                return bad();
            }
            fake.with(|i| {
                let line = posted(i, &body, true);
                i.transcript.push(line);
            });
            Json(json!({"ok": true, "channel": body["channel"], "ts": body["ts"], "text": body["text"]}))
                .into_response()
        }
        "chat.postEphemeral" => {
            if by_bot.is_none() {
                return bad();
            }
            Json(json!({"ok": true, "message_ts": fake.ts()})).into_response()
        }
        "users.list" | "conversations.list" => {
            if by_bot.is_none() {
                return bad();
            }
            let (key, items) = if method == "users.list" {
                ("members", fake.with(|i| i.users.clone()))
            } else {
                ("channels", fake.with(|i| i.channels.clone()))
            };
            // Two per page: resolve must follow the cursor.
            let start: usize = body["cursor"].as_str().and_then(|c| c.parse().ok()).unwrap_or(0);
            // deepcli asks for pages of 200: anything else is a bug the tests must see.
            if body["limit"] != "200" {
                return Json(json!({"ok": false, "error": "invalid_limit"})).into_response();
            }
            let page: Vec<Value> = items.iter().skip(start).take(2).cloned().collect();
            let next = if start + 2 < items.len() { (start + 2).to_string() } else { String::new() };
            Json(json!({"ok": true, key: page, "response_metadata": {"next_cursor": next}})).into_response()
        }
        _ => Json(json!({"ok": false, "error": "unknown_method"})).into_response(),
    }
}

#[allow(clippy::result_large_err)] // tungstenite's handshake callback type
async fn socket(fake: Fake, stream: tokio::net::TcpStream) {
    let mut name = String::new();
    let callback = |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                    response| {
        name = request.uri().path().trim_start_matches('/').to_string();
        Ok(response)
    };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let _ = tx.send(Message::Text(
        json!({"type": "hello", "num_connections": 1})
            .to_string()
            .into(),
    ));
    fake.with(|i| i.sockets.push((name.clone(), tx)));
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(m) => {
                    if sink.send(m).await.is_err() {
                        return;
                    }
                }
                // Dropped by the test: gone without a close frame.
                None => return,
            },
            inbound = source.next() => match inbound {
                Some(Ok(Message::Text(t))) => {
                    if let Ok(v) = serde_json::from_str::<Value>(&t)
                        && let Some(id) = v["envelope_id"].as_str()
                    {
                        fake.with(|i| i.acks.push(id.to_string()));
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}
