//! Telegram (adapters.md, "Telegram"): the Bot API over HTTPS. `mode: polling` (default)
//! deletes any webhook, then long-polls `getUpdates`, the next offset recorded in the state
//! database with the updates it confirms; `mode: webhook` registers `webhookUrl` with
//! `setWebhook` and a `secret_token`, and takes updates on the controller's listener
//! ([`super::web`]). `getMe` names the bot. Replies go by `sendMessage` in 4,096-unit pieces.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::outbound::{self, ATTEMPTS, MAX_RETRY_AFTER};
use super::{Identity, Running, Stop, Taken};
use crate::access::store::DeliveryKey;
use crate::config::model::AdapterMode;

/// Telegram's limit on a message's text, in UTF-16 code units.
pub const TEXT_LIMIT: usize = 4096;

/// The updates asked for: messages and channel posts (edits are not asked for).
const ALLOWED_UPDATES: [&str; 2] = ["message", "channel_post"];

/// A Bot API failure.
#[derive(Debug)]
pub enum ApiError {
    /// 401/404 on the token: the credentials are wrong.
    Unauthorized(String),
    /// 429 with `retry_after`.
    RateLimited(Duration),
    /// Any other refusal (400 chat not found, 403 blocked, 409 conflict…).
    Refused { code: u16, description: String },
    /// No answer, or not the Bot API's.
    Transport(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Unauthorized(d) => write!(f, "the bot token was refused: {d}"),
            ApiError::RateLimited(wait) => {
                write!(f, "rate limited: retry after {} s", wait.as_secs())
            }
            ApiError::Refused { code, description } => write!(f, "{code} {description}"),
            ApiError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// The Bot API of one bot.
pub struct Api<'a> {
    pub http: &'a reqwest::Client,
    pub base: &'a str,
    pub token: &'a str,
}

impl Api<'_> {
    /// Calls `method` with a JSON body; the `result` on success.
    pub async fn call(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, ApiError> {
        let url = format!("{}/bot{}/{method}", self.base, self.token);
        let response = self
            .http
            .post(url)
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| ApiError::Transport(super::transport_error(e)))?;
        let status = response.status().as_u16();
        let answer: Value = response.json().await.map_err(|e| {
            ApiError::Transport(format!(
                "HTTP {status}, not a Bot API answer: {}",
                super::transport_error(e)
            ))
        })?;
        if answer["ok"] == true {
            return Ok(answer["result"].clone());
        }
        let code = answer["error_code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(status);
        let description = answer["description"]
            .as_str()
            .unwrap_or("no description")
            .to_string();
        Err(match code {
            401 | 404 if method == "getMe" || code == 401 => ApiError::Unauthorized(description),
            429 => ApiError::RateLimited(Duration::from_secs(
                answer["parameters"]["retry_after"].as_u64().unwrap_or(1),
            )),
            _ => ApiError::Refused { code, description },
        })
    }
}

fn token(running: &Running) -> &str {
    match &running.spec.bot_token {
        Ok(t) => &t.0,
        Err(_) => "",
    }
}

fn api(running: &Running) -> Api<'_> {
    Api {
        http: &running.cx.http,
        base: &running.spec.api_base,
        token: token(running),
    }
}

/// `getMe`: the bot's identity.
pub async fn get_me(api: &Api<'_>) -> Result<Identity, ApiError> {
    let me = api
        .call("getMe", &json!({}), Duration::from_secs(15))
        .await?;
    let id = me["id"]
        .as_i64()
        .map(|i| i.to_string())
        .ok_or_else(|| ApiError::Transport("getMe answered without the bot's `id`".into()))?;
    Ok(Identity {
        bot_user_id: id,
        name: me["username"].as_str().map(str::to_string),
        bot_id: None,
        team_id: None,
    })
}

fn stop(e: ApiError) -> Stop {
    match e {
        ApiError::Unauthorized(_) => Stop::Auth(e.to_string()),
        e => Stop::Failed(e.to_string()),
    }
}

/// One connection: until it fails (polling) or forever (webhook: updates arrive over HTTP).
pub(super) async fn connect(running: &Arc<Running>) -> Stop {
    let api = api(running);
    let short = Duration::from_secs(15);
    match running.spec.mode {
        AdapterMode::Webhook => {
            let (Some(url), Some(Ok(secret))) =
                (&running.spec.webhook_url, &running.spec.webhook_secret)
            else {
                return Stop::Failed("webhook mode needs webhookUrl and webhookSecret".into());
            };
            let identity = match get_me(&api).await {
                Ok(i) => i,
                Err(e) => return stop(e),
            };
            let body =
                json!({"url": url, "secret_token": secret.0, "allowed_updates": ALLOWED_UPDATES});
            if let Err(e) = api.call("setWebhook", &body, short).await {
                return stop(e);
            }
            running.connected(identity);
            running.cx.register(running);
            running.log("connected mode=webhook").await;
            replay(running).await;
            std::future::pending::<Stop>().await
        }
        _ => {
            if let Err(e) = api
                .call(
                    "deleteWebhook",
                    &json!({"drop_pending_updates": false}),
                    short,
                )
                .await
            {
                return stop(e);
            }
            let identity = match get_me(&api).await {
                Ok(i) => i,
                Err(e) => return stop(e),
            };
            running.connected(identity);
            running.log("connected mode=polling").await;
            replay(running).await;
            poll(running, &api).await
        }
    }
}

/// How long a `getUpdates` call waits for updates (Telegram's long polling `timeout`).
fn poll_seconds() -> u64 {
    #[cfg(feature = "failpoints")]
    if let Some(s) = super::failpoint_ms("telegram_poll_s") {
        return s;
    }
    25
}

async fn poll(running: &Arc<Running>, api: &Api<'_>) -> Stop {
    let (channel, account) = (running.spec.channel.clone(), running.spec.account.clone());
    let offset = {
        let (store, c, a) = (running.cx.store.clone(), channel.clone(), account.clone());
        tokio::task::spawn_blocking(move || store.offset(&c, &a))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
    };
    let mut offset = offset;
    let seconds = poll_seconds();
    loop {
        let mut body = json!({"timeout": seconds, "allowed_updates": ALLOWED_UPDATES});
        if let Some(o) = offset {
            body["offset"] = o.into();
        }
        let updates = match api
            .call("getUpdates", &body, Duration::from_secs(seconds + 15))
            .await
        {
            Ok(Value::Array(updates)) => updates,
            Ok(_) => return Stop::Failed("getUpdates answered something else than a list".into()),
            Err(ApiError::RateLimited(wait)) => {
                tokio::time::sleep(wait.min(MAX_RETRY_AFTER)).await;
                continue;
            }
            Err(e) => return stop(e),
        };
        if updates.is_empty() {
            continue;
        }
        let mut events = Vec::with_capacity(updates.len());
        let mut next = offset.unwrap_or(i64::MIN);
        for update in &updates {
            let Some(id) = update["update_id"].as_i64() else {
                continue;
            };
            next = next.max(id.saturating_add(1));
            events.push((id.to_string(), update.to_string()));
        }
        let taken = {
            let (store, c, a, events) = (
                running.cx.store.clone(),
                channel.clone(),
                account.clone(),
                events.clone(),
            );
            tokio::task::spawn_blocking(move || store.take(&c, &a, &events, Some(next))).await
        };
        let fresh = match taken {
            Ok(Ok(fresh)) => fresh,
            Ok(Err(e)) => return Stop::Failed(format!("cannot record the updates: {e}")),
            Err(e) => return Stop::Failed(format!("cannot record the updates: {e}")),
        };
        offset = Some(next);
        for ((id, _), (update, fresh)) in events.iter().zip(updates.into_iter().zip(fresh)) {
            if fresh {
                dispatch(running, Taken::fresh(id.clone()), update);
            }
        }
    }
}

/// Hands in again what an earlier run took and did not finish.
async fn replay(running: &Arc<Running>) {
    let pending = running.pending().await;
    if !pending.is_empty() {
        running
            .log(&format!("replaying updates={}", pending.len()))
            .await;
    }
    for (taken, update) in pending {
        dispatch(running, taken, update);
    }
}

/// Takes one update from the webhook: recorded, then handled in its chat's lane.
pub async fn take(running: &Arc<Running>, update: Value) -> Result<(), String> {
    let id = update["update_id"]
        .as_i64()
        .ok_or("the update has no `update_id`")?
        .to_string();
    if running.take_one("update", &id, &update).await? {
        dispatch(running, Taken::fresh(id), update);
    }
    Ok(())
}

/// An update as an envelope, and where its reply goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// The lane: chat and topic.
    pub lane: String,
    pub envelope: Value,
    pub chat_id: i64,
    pub message_id: i64,
    pub thread_id: Option<i64>,
}

/// Maps an update (adapters.md, "Update → envelope"), or says why it is not a message to hand
/// in.
pub fn map(
    update: &Value,
    identity: &Identity,
    channel: &str,
    account: &str,
) -> Result<Mapped, &'static str> {
    let message = match (update.get("message"), update.get("channel_post")) {
        (Some(m), _) | (None, Some(m)) => m,
        _ => return Err("not a message (edits and other updates are not handed in)"),
    };
    let chat = &message["chat"];
    let chat_id = chat["id"].as_i64().ok_or("the message has no chat id")?;
    let message_id = message["message_id"]
        .as_i64()
        .ok_or("the message has no message_id")?;
    let text = message["text"]
        .as_str()
        .or_else(|| message["caption"].as_str())
        .ok_or("the message has no text")?;
    let kind = match chat["type"].as_str() {
        Some("private") => "direct",
        Some("group") | Some("supergroup") => "group",
        Some("channel") => "channel",
        _ => return Err("unknown chat type"),
    };
    // A forum topic is a thread; a reply chain in a plain group is not.
    let thread_id = message["message_thread_id"]
        .as_i64()
        .filter(|_| message["is_topic_message"] == true || chat["is_forum"] == true);
    let (sender_id, sender_name, is_bot) = match message.get("from") {
        Some(from) => {
            let name = [from["first_name"].as_str(), from["last_name"].as_str()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ");
            let name = if name.is_empty() {
                from["username"].as_str().unwrap_or_default().to_string()
            } else {
                name
            };
            (
                from["id"].as_i64().map(|i| i.to_string()),
                name,
                from["is_bot"] == true,
            )
        }
        // A channel post speaks for the chat.
        None => (
            message["sender_chat"]["id"].as_i64().map(|i| i.to_string()),
            message["sender_chat"]["title"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            false,
        ),
    };
    let mut mentions = Vec::new();
    let entities = message["entities"]
        .as_array()
        .or_else(|| message["caption_entities"].as_array());
    for entity in entities.into_iter().flatten() {
        match entity["type"].as_str() {
            Some("mention") | Some("bot_command") => {
                let at = utf16_slice(
                    text,
                    entity["offset"].as_u64().unwrap_or(0) as usize,
                    entity["length"].as_u64().unwrap_or(0) as usize,
                );
                // `@name` or `/command@name`.
                let named = at.and_then(|t| t.rsplit_once('@').map(|(_, n)| n.to_string()));
                if let (Some(named), Some(bot)) = (named, identity.name.as_deref())
                    && named.eq_ignore_ascii_case(bot)
                    && !mentions.contains(&identity.bot_user_id)
                {
                    mentions.push(identity.bot_user_id.clone());
                }
            }
            Some("text_mention") => {
                if let Some(id) = entity["user"]["id"].as_i64() {
                    let id = id.to_string();
                    if !mentions.contains(&id) {
                        mentions.push(id);
                    }
                }
            }
            _ => {}
        }
    }
    let reply_to = message["reply_to_message"]["from"]["id"]
        .as_i64()
        .map(|i| i.to_string());
    let mut sender = json!({"isBot": is_bot});
    if let Some(id) = &sender_id {
        sender["id"] = id.clone().into();
    }
    if !sender_name.is_empty() {
        sender["name"] = sender_name.into();
    }
    let mut envelope = json!({
        "channel": channel,
        "accountId": account,
        "peer": {"kind": kind, "id": chat_id.to_string()},
        "messageId": message_id.to_string(),
        "sender": sender,
        "text": text,
        "mentions": mentions,
    });
    if let Some(t) = thread_id {
        envelope["threadId"] = t.to_string().into();
    }
    if let Some(r) = reply_to {
        envelope["replyToSenderId"] = r.into();
    }
    let lane = match thread_id {
        Some(t) => format!("{chat_id}/{t}"),
        None => chat_id.to_string(),
    };
    Ok(Mapped {
        lane,
        envelope,
        chat_id,
        message_id,
        thread_id,
    })
}

/// The part of `text` at UTF-16 `offset`, `length` units long (Telegram's entity positions).
fn utf16_slice(text: &str, offset: usize, length: usize) -> Option<String> {
    let units: Vec<u16> = text.encode_utf16().collect();
    let end = offset.checked_add(length)?;
    String::from_utf16(units.get(offset..end)?).ok()
}

fn dispatch(running: &Arc<Running>, taken: Taken, update: Value) {
    let event_id = taken.event_id.clone();
    // A replay after a reconnect skips what a lane holds already.
    if !running.cx.claim(&running.spec, &event_id) {
        return;
    }
    running.event_taken();
    let identity = running.identity().unwrap_or_default();
    let mapped = map(
        &update,
        &identity,
        &running.spec.channel,
        &running.spec.account,
    );
    let lane = match &mapped {
        Ok(m) => m.lane.clone(),
        Err(_) => String::from("-"),
    };
    let job = {
        let running = running.clone();
        let event_id = event_id.clone();
        async move {
            match mapped {
                Ok(mapped) => handle(&running, mapped, &taken).await,
                Err(why) => {
                    tracing::debug!(update = %event_id, %why, "telegram update not handed in");
                    running
                        .log(&format!("ignored update={event_id} why={why}"))
                        .await;
                }
            }
        }
    };
    running.cx.run_in_lane(&running.spec, &lane, event_id, job);
}

/// Hands an update in at the Access door, and posts the reply its answer holds.
async fn handle(running: &Arc<Running>, mapped: Mapped, taken: &Taken) {
    let Some(answer) = super::web::hand_in(running, &mapped.envelope).await else {
        return;
    };
    let duplicate = answer["duplicate"] == true;
    // A redelivery is not answered twice; one taken again after a restart is answered unless
    // its reply left before (the inbox keeps an update until its reply is posted).
    if duplicate && !taken.replayed {
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
        peer_id: mapped.chat_id.to_string(),
        thread_id: mapped.thread_id.map(|t| t.to_string()).unwrap_or_default(),
        message_id: mapped.message_id.to_string(),
    };
    send_reply(running, &mapped, text, key, taken).await;
}

/// Posts a reply in pieces; a piece that cannot be sent makes the rest a dead letter.
async fn send_reply(
    running: &Arc<Running>,
    mapped: &Mapped,
    text: &str,
    key: DeliveryKey,
    taken: &Taken,
) {
    let api = api(running);
    let pieces = outbound::split(
        text,
        TEXT_LIMIT,
        outbound::utf16,
        running.spec.max_reply_messages,
    );
    // A replay posts only what the platform had not taken.
    for (i, piece) in pieces.iter().enumerate().skip(taken.posted) {
        let mut body = json!({"chat_id": mapped.chat_id, "text": piece});
        if let Some(t) = mapped.thread_id {
            body["message_thread_id"] = t.into();
        }
        if i == 0 {
            body["reply_parameters"] =
                json!({"message_id": mapped.message_id, "allow_sending_without_reply": true});
        }
        let mut attempts = 0;
        let failed = loop {
            attempts += 1;
            match api
                .call("sendMessage", &body, Duration::from_secs(30))
                .await
            {
                Ok(_) => break None,
                Err(ApiError::RateLimited(wait))
                    if attempts < ATTEMPTS && wait <= MAX_RETRY_AFTER =>
                {
                    running
                        .log(&format!(
                            "rate-limited method=sendMessage retry_after_s={}",
                            wait.as_secs()
                        ))
                        .await;
                    tokio::time::sleep(wait).await;
                }
                Err(ApiError::Transport(_)) if attempts < ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(250 << attempts)).await;
                }
                Err(e) => break Some(e.to_string()),
            }
        };
        match failed {
            None => {
                running.posted(1);
                running.posted_pieces(taken, i + 1).await;
            }
            Some(error) => {
                running.dead_lettered(&error);
                let rest = pieces[i..].join("\n");
                outbound::dead_letter(
                    &running.cx.access,
                    key,
                    "telegram:sendMessage".into(),
                    json!({"chat_id": mapped.chat_id, "message_thread_id": mapped.thread_id, "text": rest}).to_string(),
                    attempts,
                    error,
                )
                .await;
                return;
            }
        }
    }
}

/// `deleteWebhook` (logout).
pub async fn delete_webhook(
    http: &reqwest::Client,
    base: &str,
    token: &str,
) -> Result<(), ApiError> {
    let api = Api { http, base, token };
    api.call(
        "deleteWebhook",
        &json!({"drop_pending_updates": false}),
        Duration::from_secs(15),
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> Identity {
        Identity {
            bot_user_id: "999".into(),
            name: Some("deep_bot".into()),
            ..Identity::default()
        }
    }

    #[test]
    fn a_private_message_is_a_direct_envelope() {
        let update = json!({"update_id": 5, "message": {"message_id": 7, "chat": {"id": 42, "type": "private"}, "from": {"id": 42, "is_bot": false, "first_name": "Ada", "last_name": "L"}, "text": "hi"}});
        let m = map(&update, &bot(), "telegram", "default").unwrap();
        assert_eq!(
            m.envelope,
            json!({"channel": "telegram", "accountId": "default", "peer": {"kind": "direct", "id": "42"}, "messageId": "7", "sender": {"id": "42", "name": "Ada L", "isBot": false}, "text": "hi", "mentions": []})
        );
        assert_eq!(m.lane, "42");
    }

    #[test]
    fn a_forum_topic_is_a_thread_and_mentions_of_the_bot_count() {
        // "é @deep_bot": the mention starts at UTF-16 offset 2.
        let update = json!({"update_id": 6, "message": {"message_id": 8, "message_thread_id": 3, "is_topic_message": true,
            "chat": {"id": -100, "type": "supergroup", "is_forum": true}, "from": {"id": 1, "is_bot": true, "username": "other"},
            "text": "é @DEEP_bot and /help@deep_bot", "entities": [{"type": "mention", "offset": 2, "length": 9}, {"type": "bot_command", "offset": 16, "length": 14}, {"type": "text_mention", "offset": 0, "length": 1, "user": {"id": 77}}],
            "reply_to_message": {"message_id": 2, "from": {"id": 999}}}});
        let m = map(&update, &bot(), "telegram", "a").unwrap();
        assert_eq!(m.envelope["peer"], json!({"kind": "group", "id": "-100"}));
        assert_eq!(m.envelope["threadId"], "3");
        assert_eq!(m.envelope["mentions"], json!(["999", "77"]));
        assert_eq!(m.envelope["sender"]["isBot"], true);
        assert_eq!(m.envelope["replyToSenderId"], "999");
        assert_eq!(m.lane, "-100/3");
    }

    #[test]
    fn a_reply_chain_in_a_plain_group_is_no_thread_and_edits_are_ignored() {
        let update = json!({"update_id": 6, "message": {"message_id": 8, "message_thread_id": 3, "chat": {"id": -5, "type": "group"}, "from": {"id": 1}, "text": "x"}});
        assert!(
            map(&update, &bot(), "telegram", "a")
                .unwrap()
                .envelope
                .get("threadId")
                .is_none()
        );
        let edit = json!({"update_id": 7, "edited_message": {"message_id": 8, "chat": {"id": -5, "type": "group"}, "text": "y"}});
        assert!(map(&edit, &bot(), "telegram", "a").is_err());
        let sticker = json!({"update_id": 8, "message": {"message_id": 9, "chat": {"id": -5, "type": "group"}, "from": {"id": 1}}});
        assert!(map(&sticker, &bot(), "telegram", "a").is_err());
        let post = json!({"update_id": 9, "channel_post": {"message_id": 1, "chat": {"id": -7, "type": "channel"}, "sender_chat": {"id": -7, "title": "News"}, "text": "z"}});
        let m = map(&post, &bot(), "telegram", "a").unwrap();
        assert_eq!(m.envelope["peer"]["kind"], "channel");
        assert_eq!(m.envelope["sender"]["id"], "-7");
    }

    #[test]
    fn entity_offsets_out_of_range_are_no_mention_and_no_panic() {
        let update = json!({"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "from": {"id": 1}, "text": "ab", "entities": [{"type": "mention", "offset": 1, "length": 99}, {"type": "mention", "offset": u64::MAX, "length": u64::MAX}]}});
        assert_eq!(
            map(&update, &bot(), "telegram", "a").unwrap().envelope["mentions"],
            json!([])
        );
    }
}
