//! The platform adapters under load, for scripts/bench-adapters: a real `deepcli up` (the
//! binary next to this one) connected to in-process fakes of the Telegram Bot API, the Slack
//! Web API and Discord's REST API and Gateway on loopback.
//!
//! * telegram: polling mode, the shipped demo agent (`deepcli echo-agent`), CHATS private
//!   chats, each its own session (`dmScope: per-channel-peer`; with the default `main` every
//!   DM shares one session, whose FIFO serializes them all); messages offered open-loop at
//!   RATE per second for SECS seconds, round-robin over the chats. Per message, the time
//!   from the update being offered to `getUpdates` until its `sendMessage` arrives;
//!   throughput = answered / time from the first offer to the last answer.
//! * slack: `mode: http`, EVENTS_RATE signed Events API POSTs per second for EVENTS_SECS seconds
//!   (DMs over CHATS conversations) on CONC keep-alive connections; the ack latency of each POST
//!   (recorded, then 200), and how many replies `chat.postMessage` got by the end.
//!
//! * outbox: the Telegram setup, each of CHATS chats answered once (so that its session has a
//!   conversation), then SAY_RATE operator notices per second for SAY_SECS seconds
//!   (`sessions/say` over the operator JSON-RPC, open-loop, round-robin over the chats): each
//!   notice goes through the outbox (written with its transcript line, carried by the
//!   adapter). Per notice, the time from the call until its `sendMessage` arrives at the fake,
//!   and the call's own answer time.
//!
//! * discord: the Gateway (a WebSocket on loopback, after `GET /gateway/bot`), the demo agent,
//!   CHATS users each in their DM (`dmScope: per-channel-peer`), MESSAGE_CREATE dispatched
//!   open-loop at RATE per second for SECS seconds. Per message, the time from its dispatch
//!   until the reply that references it arrives at `POST /channels/{id}/messages`.
//!
//! Prints one JSON line per stage. Usage: deepcli-bench-adapters WORKDIR [telegram] [slack]
//! [outbox] [discord]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, State};
use axum::response::IntoResponse;
use axum::{Json, Router};
use serde_json::{Value, json};

#[path = "controller_addr.rs"]
mod controller_addr;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

// ---- the Telegram fake ---------------------------------------------------------------------

#[derive(Default)]
struct Telegram {
    queue: Vec<Value>,
    next_update: i64,
    /// update offered → when, by (chat, message id).
    offered: HashMap<(i64, i64), Instant>,
    /// (offered, answered) per message answered.
    answered: Vec<(Instant, Instant)>,
    polls: u64,
    /// When each operator notice (`notice <n>`) arrived, by n.
    notices: HashMap<u64, Instant>,
}

type Shared<T> = Arc<(Mutex<T>, tokio::sync::Notify)>;

async fn telegram_api(
    State(tg): State<Shared<Telegram>>,
    UrlPath((_, method)): UrlPath<(String, String)>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let ok = |result: Value| Json(json!({"ok": true, "result": result})).into_response();
    match method.as_str() {
        "getMe" => {
            ok(json!({"id": 42, "is_bot": true, "first_name": "Bench", "username": "bench_bot"}))
        }
        "deleteWebhook" => ok(json!(true)),
        "getUpdates" => {
            let offset = body["offset"].as_i64().unwrap_or(0);
            let deadline = tokio::time::Instant::now()
                + Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(25));
            loop {
                let notified = tg.1.notified();
                let ready: Vec<Value> = {
                    let mut t = tg.0.lock().unwrap();
                    t.polls += 1;
                    t.queue
                        .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    t.queue.iter().take(100).cloned().collect()
                };
                if !ready.is_empty() || tokio::time::Instant::now() >= deadline {
                    return ok(Value::Array(ready));
                }
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
        "sendMessage" => {
            let now = Instant::now();
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            let id = body["reply_parameters"]["message_id"].as_i64().unwrap_or(0);
            let mut t = tg.0.lock().unwrap();
            if let Some(n) = body["text"]
                .as_str()
                .and_then(|t| t.strip_prefix("notice "))
                .and_then(|n| n.parse().ok())
            {
                t.notices.insert(n, now);
            }
            if let Some(at) = t.offered.remove(&(chat, id)) {
                t.answered.push((at, now));
            }
            ok(json!({"message_id": 1, "chat": {"id": chat}}))
        }
        _ => ok(json!(true)),
    }
}

// ---- the Slack fake ------------------------------------------------------------------------

#[derive(Default)]
struct Slack {
    posted: u64,
}

async fn slack_api(
    State(slack): State<Shared<Slack>>,
    UrlPath(method): UrlPath<String>,
) -> axum::response::Response {
    match method.as_str() {
        "auth.test" => Json(json!({"ok": true, "user_id": "UBENCH", "user": "bench", "bot_id": "BBENCH", "team_id": "TBENCH"})).into_response(),
        "chat.postMessage" => {
            slack.0.lock().unwrap().posted += 1;
            Json(json!({"ok": true, "ts": "1.1"})).into_response()
        }
        _ => Json(json!({"ok": false, "error": "unknown_method"})).into_response(),
    }
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

// ---- the Discord fake ----------------------------------------------------------------------

#[derive(Default)]
struct Discord {
    /// The Gateway's address.
    ws: String,
    /// The bot's connection, once it identified.
    socket: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    seq: i64,
    /// message dispatched → when, by message id.
    offered: HashMap<String, Instant>,
    /// (offered, answered) per message answered.
    answered: Vec<(Instant, Instant)>,
}

async fn discord_api(
    State(d): State<Shared<Discord>>,
    method: axum::http::Method,
    UrlPath(path): UrlPath<String>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let now = Instant::now();
    match (method.as_str(), path.as_str()) {
        ("GET", "gateway/bot") => {
            let ws = d.0.lock().unwrap().ws.clone();
            Json(json!({"url": format!("ws://{ws}"), "shards": 1})).into_response()
        }
        ("GET", "users/@me") => {
            Json(json!({"id": "42", "username": "bench", "bot": true})).into_response()
        }
        ("POST", p) if p.starts_with("channels/") && p.ends_with("/messages") => {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let mut t = d.0.lock().unwrap();
            if let Some(id) = body["message_reference"]["message_id"].as_str()
                && let Some(at) = t.offered.remove(id)
            {
                t.answered.push((at, now));
            }
            Json(json!({"id": "1", "channel_id": p})).into_response()
        }
        _ => Json(json!({})).into_response(),
    }
}

/// The bench's Gateway: HELLO; IDENTIFY gets READY; heartbeats are acknowledged.
async fn discord_gateway(d: Shared<Discord>, stream: tokio::net::TcpStream) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let _ = tx.send(json!({"op": 10, "d": {"heartbeat_interval": 41250}}).to_string());
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(text) => if sink.send(Message::Text(text.into())).await.is_err() { return },
                None => return,
            },
            inbound = source.next() => {
                let Some(Ok(Message::Text(text))) = inbound else { return };
                let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                match frame["op"].as_u64() {
                    Some(1) => { let _ = tx.send(json!({"op": 11}).to_string()); }
                    Some(2) => {
                        let mut t = d.0.lock().unwrap();
                        t.seq += 1;
                        let ready = json!({"op": 0, "t": "READY", "s": t.seq, "d": {"v": 10, "session_id": "bench",
                            "resume_gateway_url": format!("ws://{}", t.ws), "user": {"id": "42", "username": "bench", "bot": true},
                            "application": {"id": "43"}}});
                        let _ = tx.send(ready.to_string());
                        t.socket = Some(tx.clone());
                    }
                    _ => {}
                }
            }
        }
    }
}

async fn discord(work: &Path) -> Value {
    let chats = env("CHATS", 100);
    let rate = env("RATE", 1000);
    let secs = env("SECS", 10);
    let fake: Shared<Discord> = Arc::default();
    let ws = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    fake.0.lock().unwrap().ws = ws.local_addr().unwrap().to_string();
    let gateway = fake.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = ws.accept().await {
            tokio::spawn(discord_gateway(gateway.clone(), stream));
        }
    });
    let addr = serve(
        Router::new()
            .route("/api/v10/{*path}", axum::routing::any(discord_api))
            .with_state(fake.clone()),
    )
    .await;
    let channels = format!(
        "channels:\n  discord:\n    accounts:\n      default:\n        token: {{source: env, id: BENCH_DISCORD}}\n        apiBase: \"http://{addr}/api\"\n        dmPolicy: open\n        allowFrom: [\"*\"]\n"
    );
    let dir = work.join("discord");
    let _controller = start(&dir, "discord", &channels);
    ready(&reqwest::Client::new(), &dir, &_controller).await;
    let total = rate * secs;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    for n in 0..total {
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let user = 1000 + n % chats;
        let id = (10_000_000 + n).to_string();
        let mut t = fake.0.lock().unwrap();
        t.seq += 1;
        let frame = json!({"op": 0, "t": "MESSAGE_CREATE", "s": t.seq, "d": {"id": id, "channel_id": (5000 + n % chats).to_string(),
            "author": {"id": user.to_string(), "username": format!("u{user}")}, "content": format!("bench {n}"), "type": 0}});
        t.offered.insert(id, Instant::now());
        if let Some(socket) = &t.socket {
            let _ = socket.send(frame.to_string());
        }
    }
    let offered_for = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while fake.0.lock().unwrap().answered.len() < total as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = fake.0.lock().unwrap();
    let mut latencies: Vec<f64> = t
        .answered
        .iter()
        .map(|(a, b)| b.duration_since(*a).as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let last = t.answered.iter().map(|(_, b)| *b).max().unwrap_or(started);
    let elapsed = last.duration_since(started).as_secs_f64();
    json!({
        "stage": "discord", "chats": chats, "offeredPerSec": rate, "offered": total,
        "offeredForSecs": offered_for.as_secs_f64(), "answered": t.answered.len(),
        "messagesPerSec": t.answered.len() as f64 / elapsed,
        "latencyMs": {"p50": percentile(&latencies, 0.5), "p90": percentile(&latencies, 0.9), "p99": percentile(&latencies, 0.99), "max": latencies.last()},
    })
}

// ---- the controller ------------------------------------------------------------------------

struct Controller {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn deepcli() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    me.with_file_name("deepcli")
}

fn start(work: &Path, channel: &str, channels: &str) -> Controller {
    let config = work.join("config");
    let state = work.join("state");
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(&config).unwrap();
    let bin = deepcli();
    std::fs::write(
        config.join("agents.yaml"),
        format!(
            "agents:\n  list:\n    - id: demo\n      runtime: {{kind: acp, command: [\"{}\", echo-agent]}}\nsession:\n  dmScope: per-channel-peer\n",
            bin.display()
        ),
    )
    .unwrap();
    std::fs::write(config.join("channels.yaml"), channels).unwrap();
    std::fs::write(
        config.join("bindings.yaml"),
        format!("bindings:\n  - agentId: demo\n    match: {{channel: {channel}}}\n"),
    )
    .unwrap();
    let child = std::process::Command::new(&bin)
        .args([
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .args(["up", "--listen", "127.0.0.1:0", "-q"])
        .env("HOME", work)
        .env("BENCH_SIGNING", "bench-signing-secret")
        .env("BENCH_TG", "1:bench")
        .env("BENCH_SLACK", "xoxb-bench")
        .env("BENCH_DISCORD", "bench-discord-token")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let addr = controller_addr::wait(&state, child.id());
    Controller { child, addr }
}

/// Waits until the controller's status says every adapter is connected and the runtime ready.
async fn ready(http: &reqwest::Client, work: &Path, c: &Controller) {
    let token = loop {
        if let Ok(t) = std::fs::read_to_string(work.join("state/operator-token")) {
            break t.trim().to_string();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: Value = match http
            .get(format!("http://{}/v1/status", c.addr))
            .bearer_auth(&token)
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        let runtime_ready = status["runtimes"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["status"] == "ready"));
        let adapters: Vec<&Value> = status["channels"]
            .as_object()
            .into_iter()
            .flat_map(|c| c.values())
            .flat_map(|c| {
                c["accounts"]
                    .as_object()
                    .into_iter()
                    .flat_map(|a| a.values())
            })
            .map(|a| &a["adapter"])
            .collect();
        if runtime_ready
            && !adapters.is_empty()
            && adapters.iter().all(|a| a["state"] == "connected")
        {
            return;
        }
        assert!(Instant::now() < deadline, "not ready: {status:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Telegram fake, and a controller in `dir` polling it with DMs open to anyone, ready.
async fn telegram_controller(dir: &Path) -> (Shared<Telegram>, Controller) {
    let tg: Shared<Telegram> = Arc::default();
    let addr = serve(
        Router::new()
            .route("/{bot}/{method}", axum::routing::post(telegram_api))
            .with_state(tg.clone()),
    )
    .await;
    let channels = format!(
        "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: {{source: env, id: BENCH_TG}}\n        apiBase: \"http://{addr}\"\n        dmPolicy: open\n        allowFrom: [\"*\"]\n"
    );
    let controller = start(dir, "telegram", &channels);
    ready(&reqwest::Client::new(), dir, &controller).await;
    (tg, controller)
}

async fn telegram(work: &Path) -> Value {
    let chats = env("CHATS", 100) as i64;
    let rate = env("RATE", 1000);
    let secs = env("SECS", 10);
    // Kept until the stage ends: dropping it stops the controller.
    let (tg, _controller) = telegram_controller(&work.join("telegram")).await;
    let total = rate * secs;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    for n in 0..total {
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let chat = 1000 + (n as i64 % chats);
        let message_id = n as i64 + 1;
        {
            let mut t = tg.0.lock().unwrap();
            t.next_update += 1;
            let update = json!({"update_id": t.next_update, "message": {"message_id": message_id, "date": 1,
                "chat": {"id": chat, "type": "private"}, "from": {"id": chat, "is_bot": false, "first_name": "B"}, "text": format!("bench {n}")}});
            t.queue.push(update);
            t.offered.insert((chat, message_id), Instant::now());
        }
        tg.1.notify_waiters();
    }
    let offered_for = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while tg.0.lock().unwrap().answered.len() < total as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = tg.0.lock().unwrap();
    let mut latencies: Vec<f64> = t
        .answered
        .iter()
        .map(|(a, b)| b.duration_since(*a).as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let last = t.answered.iter().map(|(_, b)| *b).max().unwrap_or(started);
    let elapsed = last.duration_since(started).as_secs_f64();
    json!({
        "stage": "telegram", "chats": chats, "offeredPerSec": rate, "offered": total,
        "offeredForSecs": offered_for.as_secs_f64(), "answered": t.answered.len(),
        "messagesPerSec": t.answered.len() as f64 / elapsed,
        "latencyMs": {"p50": percentile(&latencies, 0.5), "p90": percentile(&latencies, 0.9), "p99": percentile(&latencies, 0.99), "max": latencies.last()},
        "getUpdatesCalls": t.polls,
    })
}

fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("v0={hex}")
}

async fn slack(work: &Path) -> Value {
    let chats = env("CHATS", 100);
    let rate = env("EVENTS_RATE", 1000);
    let secs = env("EVENTS_SECS", 5);
    let conc = env("CONC", 32) as usize;
    let fake: Shared<Slack> = Arc::default();
    let addr = serve(
        Router::new()
            .route("/api/{method}", axum::routing::post(slack_api))
            .with_state(fake.clone()),
    )
    .await;
    let channels = format!(
        "channels:\n  slack:\n    accounts:\n      default:\n        botToken: {{source: env, id: BENCH_SLACK}}\n        signingSecret: {{source: env, id: BENCH_SIGNING}}\n        mode: http\n        apiBase: \"http://{addr}/api\"\n        dmPolicy: open\n        allowFrom: [\"*\"]\n"
    );
    let controller = start(&work.join("slack"), "slack", &channels);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(conc)
        .build()
        .unwrap();
    ready(&http, &work.join("slack"), &controller).await;
    let url = format!("http://{}/v1/slack/default/events", controller.addr);
    let total = rate * secs;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(conc));
    let acks = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for n in 0..total {
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let permit = limit.clone().acquire_owned().await.unwrap();
        let (http, url, acks, errors) = (http.clone(), url.clone(), acks.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let body = json!({"type": "event_callback", "team_id": "TBENCH", "event_id": format!("Ev{n}"),
                "event": {"type": "message", "channel_type": "im", "channel": format!("D{}", n % chats), "user": format!("U{}", n % chats),
                    "text": format!("bench {n}"), "ts": format!("{}.{n:06}", 1_700_000_000 + n)}}).to_string();
            let ts = jiff::Timestamp::now().as_second();
            let sent = Instant::now();
            let answer = http
                .post(&url)
                .header("x-slack-request-timestamp", ts.to_string())
                .header("x-slack-signature", sign(b"bench-signing-secret", ts, body.as_bytes()))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            let ms = sent.elapsed().as_secs_f64() * 1000.0;
            match answer {
                Ok(r) if r.status().is_success() => acks.lock().unwrap().push(ms),
                _ => {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            drop(permit);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let sent_for = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    while fake.0.lock().unwrap().posted < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replied_after = started.elapsed().as_secs_f64();
    let mut acks = acks.lock().unwrap().clone();
    acks.sort_by(f64::total_cmp);
    json!({
        "stage": "slack-http", "offeredPerSec": rate, "offered": total, "connections": conc,
        "acked": acks.len(), "errors": errors.load(std::sync::atomic::Ordering::Relaxed),
        "ackedPerSec": acks.len() as f64 / sent_for,
        "ackMs": {"p50": percentile(&acks, 0.5), "p90": percentile(&acks, 0.9), "p99": percentile(&acks, 0.99), "max": acks.last()},
        "replied": fake.0.lock().unwrap().posted, "allRepliedAfterSecs": replied_after,
    })
}

/// Offers one message to each of `chats` chats and waits until every one is answered.
async fn warm(tg: &Shared<Telegram>, chats: i64) {
    for chat in 0..chats {
        let mut t = tg.0.lock().unwrap();
        t.next_update += 1;
        let (id, chat) = (t.next_update, 1000 + chat);
        t.queue.push(json!({"update_id": id, "message": {"message_id": id, "date": 1,
            "chat": {"id": chat, "type": "private"}, "from": {"id": chat, "is_bot": false, "first_name": "B"}, "text": "hello"}}));
        t.offered.insert((chat, id), Instant::now());
    }
    tg.1.notify_waiters();
    let deadline = Instant::now() + Duration::from_secs(60);
    while tg.0.lock().unwrap().answered.len() < chats as usize {
        assert!(Instant::now() < deadline, "the chats were not answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn outbox(work: &Path) -> Value {
    let chats = env("CHATS", 100) as i64;
    let rate = env("SAY_RATE", 200);
    let secs = env("SAY_SECS", 10);
    let dir = work.join("outbox");
    let (tg, controller) = telegram_controller(&dir).await;
    let http = reqwest::Client::new();
    warm(&tg, chats).await;
    let token = std::fs::read_to_string(dir.join("state/operator-token")).unwrap();
    let token = token.trim().to_string();
    let total = rate * secs;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let sent: Arc<Mutex<HashMap<u64, (Instant, f64)>>> = Arc::default();
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut calls = Vec::with_capacity(total as usize);
    for n in 0..total {
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let chat = 1000 + (n as i64 % chats);
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "_mustang.agent/sessions/say",
            "params": {"sessionKey": format!("agent:demo:telegram:direct:{chat}"), "text": format!("notice {n}")}});
        let (http, url, token, sent, errors) = (
            http.clone(),
            format!("http://{}/rpc", controller.addr),
            token.clone(),
            sent.clone(),
            errors.clone(),
        );
        calls.push(tokio::spawn(async move {
            let at = Instant::now();
            let answer = http.post(url).bearer_auth(token).json(&body).send().await;
            let took = at.elapsed().as_secs_f64() * 1000.0;
            let ok = match answer {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["result"]["queued"] == true),
                Err(_) => false,
            };
            if ok {
                sent.lock().unwrap().insert(n, (at, took));
            } else {
                errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for call in calls {
        let _ = call.await;
    }
    let offered_for = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    while tg.0.lock().unwrap().notices.len() < sent.lock().unwrap().len()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = tg.0.lock().unwrap();
    let sent = sent.lock().unwrap();
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(n, (at, _))| {
            Some(t.notices.get(n)?.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let mut calls: Vec<f64> = sent.values().map(|(_, took)| *took).collect();
    calls.sort_by(f64::total_cmp);
    let last = t.notices.values().max().copied().unwrap_or(started);
    json!({
        "stage": "outbox", "chats": chats, "offeredPerSec": rate, "offered": total,
        "offeredForSecs": offered_for, "queued": sent.len(),
        "errors": errors.load(std::sync::atomic::Ordering::Relaxed), "posted": t.notices.len(),
        "postedPerSec": t.notices.len() as f64 / last.duration_since(started).as_secs_f64(),
        "latencyMs": {"p50": percentile(&latencies, 0.5), "p90": percentile(&latencies, 0.9), "p99": percentile(&latencies, 0.99), "max": latencies.last()},
        "callMs": {"p50": percentile(&calls, 0.5), "p99": percentile(&calls, 0.99)},
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let work = PathBuf::from(
        args.first()
            .cloned()
            .unwrap_or_else(|| "/tmp/deepcli-bench-adapters".into()),
    );
    let stages: Vec<&str> = if args.len() > 1 {
        args[1..].iter().map(String::as_str).collect()
    } else {
        vec!["telegram", "slack", "discord"]
    };
    for stage in stages {
        let line = match stage {
            "telegram" => telegram(&work).await,
            "slack" => slack(&work).await,
            "outbox" => outbox(&work).await,
            "discord" => discord(&work).await,
            other => json!({"error": format!("unknown stage {other}")}),
        };
        println!("{line}");
    }
}
