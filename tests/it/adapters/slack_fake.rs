//! A local fake of Slack for deepcli's adapter: the Web API methods it uses (auth.test,
//! apps.connections.open, chat.postMessage, chat.update, chat.postEphemeral, users.list,
//! conversations.list), the Socket Mode WebSocket (hello, events_api and interactive
//! envelopes, acks, disconnect, drops) and an Events API and interactivity sender that signs
//! its POSTs as Slack does. Like Slack, a message posted by one app is delivered
//! as an event to every app in the workspace (so two bots can talk in one thread), and a
//! message mentioning an app also brings that app an `app_mention`. Every call is recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

pub const TEAM: &str = "T0TEAM";

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
    pub fn start() -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (listener, ws) = runtime.block_on(async {
            (
                tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
                tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            )
        });
        let fake = Fake {
            inner: Arc::new(Mutex::new(Inner {
                next_ts: 1_700_000_000,
                ..Inner::default()
            })),
            ws_addr: ws.local_addr().unwrap(),
        };
        let app = Router::new()
            .route("/api/{method}", axum::routing::post(api))
            .with_state(fake.clone());
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let sockets = fake.clone();
        runtime.spawn(async move {
            while let Ok((stream, _)) = ws.accept().await {
                tokio::spawn(socket(sockets.clone(), stream));
            }
        });
        Server {
            fake,
            addr,
            _runtime: runtime,
        }
    }

    pub fn base(&self) -> String {
        format!("http://{}/api", self.addr)
    }
}

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap())
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

    pub fn wait(&self, what: &str, check: impl Fn(&Fake) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(40);
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; posted: {:#?}",
                self.posted()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
                mention.as_object_mut().unwrap().remove("channel_type");
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
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("v0:{timestamp}:{body}").as_bytes());
        let signature: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
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

    pub fn post_raw(&self, url: &str, headers: &[(&str, String)], body: &str) -> (u16, Duration) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut request = agent.post(url);
        for (k, v) in headers {
            request = request.header(*k, v);
        }
        let started = Instant::now();
        // Slack sends interactions as a form, events as JSON.
        let content_type = if body.starts_with("payload=") {
            "application/x-www-form-urlencoded"
        } else {
            "application/json"
        };
        let status = request
            .content_type(content_type)
            .send(body)
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        (status, started.elapsed())
    }
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
    fake.with(|i| {
        i.calls.push(Call {
            method: method.clone(),
            token: token.clone(),
            body: body.clone(),
        })
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
            assert_eq!(body["limit"], "200", "{body}");
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
