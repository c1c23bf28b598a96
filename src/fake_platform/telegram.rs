//! A local fake of the Telegram Bot API (the methods deepcli uses: getMe, deleteWebhook,
//! setWebhook, getUpdates with long polling and offsets confirmed as Telegram confirms them,
//! sendMessage, editMessageText, answerCallbackQuery), on axum, recording every call. People
//! chat through it ([`Fake::say`], [`Fake::press`]); tests also queue raw updates, script
//! refusals (a 429 with `retry_after`, a chat that cannot be written to) and hold sends.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::{Chat, Line, Platform};

/// The bot token the fake accepts.
pub const TOKEN: &str = "123456:FAKE-token";
/// The id of the one group people can write in.
pub const GROUP_ID: i64 = -100_777;
pub const BOT_ID: i64 = 999_001;
pub const BOT_NAME: &str = "fake_deepcli_bot";

/// One recorded call: the method and its JSON body.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    /// sendMessage: whether the fake answered it (a held one the client left is not).
    pub answered: bool,
    /// sendMessage: the id of the message it made, once answered.
    pub message_id: Option<i64>,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    /// What people said and the bot posted, as a chat shows it.
    transcript: Vec<Line>,
    /// The people who spoke, by name: their user ids are 1001, 1002, … in that order.
    people: Vec<String>,
    /// Updates not confirmed yet (an offset past them confirms them).
    updates: VecDeque<Value>,
    next_update: i64,
    next_message: i64,
    /// sendMessage calls to answer 429 (retry_after 1) before answering ok.
    rate_limits: u32,
    /// Chats sendMessage refuses with 400.
    unwritable: Vec<i64>,
    /// While set, sendMessage waits for release.
    hold_sends: bool,
    /// Once this many sendMessage calls were answered, the next ones wait for release.
    hold_after: Option<usize>,
    /// The token refused: every call answers 401.
    refuse_token: bool,
    /// Held sendMessage calls (by index) whose caller is gone: on release they fail and are
    /// not counted as taken. Whether a dropped connection cancels its handler before the
    /// release is a race on a loaded host.
    abandoned: Vec<usize>,
}

#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<tokio::sync::Notify>,
    released: Arc<tokio::sync::Notify>,
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

    /// The fake on `addr`, served by its own runtime until the server is dropped.
    pub fn bind(addr: SocketAddr) -> std::io::Result<Server> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let fake = Fake {
            inner: Arc::new(Mutex::new(Inner {
                next_update: 1000,
                next_message: 1,
                ..Inner::default()
            })),
            wake: Arc::default(),
            released: Arc::default(),
        };
        let app = Router::new()
            .route("/{bot}/{method}", axum::routing::post(api))
            .merge(super::control())
            .with_state(fake.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind(addr))?;
        let addr = listener.local_addr()?;
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Server {
            fake,
            addr,
            _runtime: runtime,
        })
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// `name`'s user: its id is fixed by the order people first spoke in.
    pub fn person(&self, name: &str) -> Value {
        let id = self.with(|i| {
            let at = match i.people.iter().position(|p| p == name) {
                Some(at) => at,
                None => {
                    i.people.push(name.to_string());
                    i.people.len() - 1
                }
            };
            FIRST_PERSON + at as i64
        });
        json!({"id": id, "is_bot": false, "first_name": name, "username": name})
    }

    /// The Telegram chat of `chat` for `person`: a private chat has the person's id; the group
    /// is one supergroup everyone shares.
    fn telegram_chat(chat: Chat, person: &Value) -> Value {
        match chat {
            Chat::Direct => {
                json!({"id": person["id"], "type": "private", "first_name": person["first_name"]})
            }
            Chat::Group => json!({"id": GROUP_ID, "type": "supergroup", "title": "fake group"}),
        }
    }

    /// Queues an update; returns its update_id.
    pub fn push(&self, update: Value) -> i64 {
        let id = self.with(|i| {
            let id = i.next_update;
            i.next_update += 1;
            let mut update = update;
            update["update_id"] = id.into();
            i.updates.push_back(update);
            id
        });
        self.wake.notify_waiters();
        id
    }

    /// A text message; returns the update.
    pub fn message(&self, chat: Value, from: Value, text: &str, extra: Value) -> Value {
        let message_id = self.with(|i| {
            i.next_message += 1;
            i.next_message
        });
        let mut message =
            json!({"message_id": message_id, "date": 1, "chat": chat, "from": from, "text": text});
        if let Value::Object(extra) = extra {
            for (k, v) in extra {
                message[k] = v;
            }
        }
        let mut update = json!({"message": message});
        let id = self.push(update.clone());
        update["update_id"] = id.into();
        update
    }

    /// A click by `from` on the inline button carrying `data` under message `message_id` of
    /// `chat`; returns the callback query's id.
    pub fn click(&self, chat: Value, from: Value, message_id: i64, data: &str) -> String {
        let id = self.with(|i| {
            i.next_message += 1;
            format!("cq-{}", i.next_message)
        });
        self.push(
            json!({"callback_query": {"id": id, "from": from, "data": data,
            "chat_instance": "1", "message": {"message_id": message_id, "date": 1, "chat": chat}}}),
        );
        id
    }

    pub fn rate_limit_next_sends(&self, n: u32) {
        self.with(|i| i.rate_limits = n);
    }

    pub fn unwritable(&self, chat: i64) {
        self.with(|i| i.unwritable.push(chat));
    }

    pub fn hold_sends(&self, hold: bool) {
        self.with(|i| {
            i.hold_sends = hold;
            i.hold_after = None;
        });
        if !hold {
            self.released.notify_waiters();
        }
    }

    /// Answers `n` more sendMessage calls, then holds the next ones until `hold_sends(false)`.
    pub fn hold_sends_after(&self, n: usize) {
        self.with(|i| {
            let answered = i
                .calls
                .iter()
                .filter(|c| c.method == "sendMessage" && c.answered)
                .count();
            i.hold_after = Some(answered + n);
        });
    }

    /// The caller of every sendMessage held now is gone (its controller was killed): those
    /// calls are released as failures the platform never took.
    pub fn abandon_held(&self) {
        self.with(|i| {
            let held: Vec<usize> = (0..i.calls.len())
                .filter(|&n| i.calls[n].method == "sendMessage" && !i.calls[n].answered)
                .collect();
            i.abandoned.extend(held);
            i.hold_sends = false;
            i.hold_after = None;
        });
        self.released.notify_waiters();
    }

    pub fn refuse_token(&self, refuse: bool) {
        self.with(|i| i.refuse_token = refuse);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.with(|i| i.calls.clone())
    }

    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// The texts of sendMessage calls answered ok, in order.
    pub fn sent(&self) -> Vec<Value> {
        self.calls_of("sendMessage")
            .into_iter()
            .filter(|c| c.answered)
            .map(|c| c.body)
            .collect()
    }
}

/// The user id of the first person who speaks; the next ones follow.
const FIRST_PERSON: i64 = 1001;

impl Inner {
    /// The name of chat `id` as [`Line::chat`] says it.
    fn chat_name(&self, id: i64) -> String {
        if id == GROUP_ID {
            return "group".into();
        }
        match usize::try_from(id - FIRST_PERSON)
            .ok()
            .and_then(|at| self.people.get(at))
        {
            Some(name) => format!("dm {name}"),
            None => format!("chat {id}"),
        }
    }
}

impl Platform for Fake {
    fn say(&self, from: &str, chat: Chat, text: &str) -> usize {
        let person = self.person(from);
        let telegram_chat = Fake::telegram_chat(chat, &person);
        let mark = self.with(|i| {
            let mark = i.transcript.len();
            let name = i.chat_name(telegram_chat["id"].as_i64().unwrap_or(0));
            i.transcript.push(Line::said(name, from, text));
            mark
        });
        self.message(
            telegram_chat,
            person,
            text,
            json!({"entities": mentions(text)}),
        );
        mark
    }

    fn press(&self, from: &str, chat: Chat, n: usize) -> Result<usize, String> {
        let person = self.person(from);
        let telegram_chat = Fake::telegram_chat(chat, &person);
        let id = telegram_chat["id"].as_i64().unwrap_or(0);
        let (mark, message_id, data) = self.with(|i| {
            let name = i.chat_name(id);
            let (message_id, buttons) = i
                .calls
                .iter()
                .rev()
                .filter(|c| c.method == "sendMessage" && c.body["chat_id"].as_i64() == Some(id))
                .find_map(|c| {
                    let buttons = buttons(&c.body);
                    (!buttons.is_empty()).then_some((c.message_id?, buttons))
                })
                .ok_or_else(|| format!("the bot posted no buttons in {name}"))?;
            let (label, data) = n
                .checked_sub(1)
                .and_then(|at| buttons.into_iter().nth(at))
                .ok_or_else(|| format!("the bot's latest buttons in {name} have no button {n}"))?;
            let mark = i.transcript.len();
            i.transcript
                .push(Line::said(name, from, &format!("[pressed {label}]")));
            Ok::<_, String>((mark, message_id, data))
        })?;
        self.click(telegram_chat, person, message_id, &data);
        Ok(mark)
    }

    fn transcript(&self, from: usize) -> Vec<Line> {
        self.with(|i| i.transcript.get(from..).unwrap_or_default().to_vec())
    }

    fn chat_name(&self, from: &str, chat: Chat) -> String {
        let person = self.person(from);
        let id = Fake::telegram_chat(chat, &person)["id"]
            .as_i64()
            .unwrap_or(0);
        self.with(|i| i.chat_name(id))
    }
}

/// The `mention` entities of `text`, as Telegram marks each `@username`: offsets and lengths
/// in UTF-16 code units.
fn mentions(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut units = 0;
    for (at, c) in text.char_indices() {
        if c == '@' {
            let name: String = text[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(json!({"type": "mention", "offset": units, "length": 1 + name.len()}));
            }
        }
        units += c.len_utf16();
    }
    out
}

/// The inline buttons of a sendMessage or editMessageText body: each one's label and
/// callback data.
fn buttons(body: &Value) -> Vec<(String, String)> {
    body["reply_markup"]["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .map(|b| {
            let text = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            (text("text"), text("callback_data"))
        })
        .collect()
}

/// What the bot posted, as a transcript line.
fn posted(i: &Inner, body: &Value, edited: bool) -> Line {
    let labels = buttons(body).into_iter().map(|(label, _)| label).collect();
    Line::posted(
        i.chat_name(body["chat_id"].as_i64().unwrap_or(0)),
        body["text"].as_str().unwrap_or_default(),
        labels,
        edited,
    )
}

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

fn error(status: u16, description: &str, extra: Value) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if !extra.is_null() {
        body["parameters"] = extra;
    }
    (
        axum::http::StatusCode::from_u16(status)
            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
        Json(body),
    )
        .into_response()
}

async fn api(
    State(fake): State<Fake>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let index = fake.with(|i| {
        i.calls.push(Call {
            method: method.clone(),
            body: body.clone(),
            answered: method != "sendMessage",
            message_id: None,
        });
        i.calls.len() - 1
    });
    if bot != format!("bot{TOKEN}") || fake.with(|i| i.refuse_token) {
        return error(401, "Unauthorized", Value::Null);
    }
    match method.as_str() {
        "getMe" => {
            ok(json!({"id": BOT_ID, "is_bot": true, "first_name": "Deep", "username": BOT_NAME}))
        }
        "deleteWebhook" | "setWebhook" => ok(json!(true)),
        "getUpdates" => {
            let offset = body["offset"].as_i64();
            let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(5));
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                let notified = fake.wake.notified();
                let ready: Vec<Value> = fake.with(|i| {
                    // An offset confirms every update before it: Telegram forgets them.
                    if let Some(offset) = offset {
                        i.updates
                            .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    }
                    i.updates.iter().take(100).cloned().collect()
                });
                if !ready.is_empty() || tokio::time::Instant::now() >= deadline {
                    return ok(Value::Array(ready));
                }
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
        "sendMessage" => {
            loop {
                let released = fake.released.notified();
                let held = fake.with(|i| {
                    let answered = i
                        .calls
                        .iter()
                        .filter(|c| c.method == "sendMessage" && c.answered)
                        .count();
                    i.hold_sends || i.hold_after.is_some_and(|n| answered >= n)
                });
                if !held {
                    break;
                }
                released.await;
            }
            if fake.with(|i| i.abandoned.contains(&index)) {
                return error(502, "Bad Gateway: the caller is gone", Value::Null);
            }
            let chat = body["chat_id"].as_i64().unwrap_or(0);
            let refusal = fake.with(|i| {
                if i.unwritable.contains(&chat) {
                    Some((400, "Bad Request: chat not found"))
                } else if i.rate_limits > 0 {
                    i.rate_limits -= 1;
                    Some((429, "Too Many Requests: retry after 1"))
                } else {
                    None
                }
            });
            match refusal {
                Some((429, d)) => error(429, d, json!({"retry_after": 1})),
                Some((code, d)) => error(code, d, Value::Null),
                None => {
                    let message_id = fake.with(|i| {
                        i.next_message += 1;
                        i.calls[index].answered = true;
                        i.calls[index].message_id = Some(i.next_message);
                        let line = posted(i, &body, false);
                        i.transcript.push(line);
                        i.next_message
                    });
                    ok(
                        json!({"message_id": message_id, "chat": {"id": chat}, "text": body["text"]}),
                    )
                }
            }
        }
        // Answered as the Bot API does, recorded like every call.
        "answerCallbackQuery" => ok(json!(true)),
        "editMessageText" => {
            fake.with(|i| {
                let line = posted(i, &body, true);
                i.transcript.push(line);
            });
            ok(
                json!({"message_id": body["message_id"], "chat": {"id": body["chat_id"]}, "text": body["text"]}),
            )
        }
        _ => error(404, "Not Found: method not found", Value::Null),
    }
}
