//! Telegram's adapter (adapters.md, "Telegram"), over [`crate::platform::telegram`].
//! `mode: polling` (default) deletes any webhook, then long-polls `getUpdates`, the next
//! offset recorded in the state database with the updates it confirms; `mode: webhook` registers `webhookUrl` with
//! `setWebhook` and a `secret_token`, and takes updates on the controller's listener
//! ([`super::web`]). `getMe` names the bot. Replies go by `sendMessage` in 4,096-unit pieces.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use super::outbound::{self, Failure};
use super::pipeline::{self, Adapter, NotTaken};
use super::{
    AdapterSpec, Choice, Click, Envelope, Identity, Peer, RunningAccount, Sender, Stop, Taken,
};
use crate::access::outbox::{Cause, Failed, Queued};
use crate::access::store::DeliveryKey;
use crate::config::model::AdapterMode;
pub(crate) use crate::platform::telegram::TEXT_LIMIT;
use crate::platform::telegram::{
    ALLOWED_UPDATES, AnswerCallbackQuery, Api, ApiError, DeleteWebhook, EditMessageText,
    GetUpdates, Ignored, InlineButton, InlineKeyboard, Raw, ReplyParameters, SendMessage, Sent,
    SetWebhook, Update,
};

/// Telegram's part of the pipeline.
pub(crate) struct Telegram;

impl Adapter for Telegram {
    type Event = Update;
    type Mapped = Mapped;
    const WHAT: &'static str = "update";
    const NO_ID: &'static str = "the update has no `update_id`";

    fn event_id(update: &Update) -> Option<String> {
        update.update_id.map(|id| id.to_string())
    }

    fn map(
        update: &Update,
        identity: &Identity,
        spec: &AdapterSpec,
    ) -> Result<Mapped, &'static str> {
        map(update, identity, &spec.channel, &spec.account)
    }

    fn lane(mapped: &Mapped) -> &str {
        &mapped.lane
    }

    fn envelope(mapped: &Mapped) -> &Envelope {
        &mapped.envelope
    }

    fn click(update: &Update) -> Option<Click> {
        click(update)
    }

    fn answer_click(
        running: &Arc<RunningAccount>,
        click: &Click,
        text: &str,
    ) -> impl std::future::Future<Output = Result<(), String>> + Send {
        answer_click(running, click, text)
    }

    fn post(
        running: &Arc<RunningAccount>,
        mapped: &Mapped,
        text: &str,
        taken: &Taken,
    ) -> impl std::future::Future<Output = ()> + Send {
        send_reply(running, mapped, text, taken)
    }
}

/// What an approval button carries: `deepcli:<choice>:<approval id>` (at most 64 bytes).
fn callback_data(choice: Choice, approval_id: &str) -> String {
    format!("deepcli:{}:{approval_id}", choice.word())
}

/// An approval's or a task verdict's inline keyboard; none when its id would not fit
/// Telegram's 64 bytes.
fn keyboard(choices: &[Choice], id: &str) -> Option<InlineKeyboard> {
    let row: Vec<InlineButton> = choices
        .iter()
        .map(|&choice| InlineButton {
            text: choice.label().to_string(),
            callback_data: callback_data(choice, id),
        })
        .collect();
    row.iter()
        .all(|b| b.callback_data.len() <= 64)
        .then(|| InlineKeyboard {
            inline_keyboard: vec![row],
        })
}

/// A `callback_query` on one of deepcli's buttons, as a click.
pub(crate) fn click(update: &Update) -> Option<Click> {
    let query = update.callback_query.as_ref()?;
    let data = query.data.as_deref()?.strip_prefix("deepcli:")?;
    let (word, approval_id) = data.split_once(':')?;
    let message = query.message.as_ref();
    let chat = message.and_then(|m| m.chat.as_ref()).and_then(|c| c.id);
    let topic = message.and_then(|m| m.message_thread_id);
    Some(Click {
        user_id: query.from.as_ref()?.id?.to_string(),
        approval_id: approval_id.to_string(),
        choice: Choice::parse(word)?,
        // Not the chat's lane: the turn that asked waits there for this very click.
        lane: match (chat, topic) {
            (Some(chat), Some(topic)) => format!("click/{chat}/{topic}"),
            (Some(chat), None) => format!("click/{chat}"),
            (None, _) => "click/-".to_string(),
        },
        answer_to: query.id.clone()?,
        thread: None,
    })
}

/// Answers a click with `answerCallbackQuery`: shown to the clicker alone.
async fn answer_click(
    running: &Arc<RunningAccount>,
    click: &Click,
    text: &str,
) -> Result<(), String> {
    let body = AnswerCallbackQuery {
        callback_query_id: &click.answer_to,
        text: &outbound::split(text, 200, outbound::utf16, 1)
            .into_iter()
            .next()
            .unwrap_or_default(),
        show_alert: true,
    };
    api(running)
        .call::<_, Ignored>("answerCallbackQuery", &body, Duration::from_secs(10))
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn api(running: &RunningAccount) -> Api<'_> {
    Api {
        http: &running.cx.http,
        base: &running.spec.api_base,
        token: running.spec.token(),
    }
}

fn stop(e: ApiError) -> Stop {
    match e {
        ApiError::Unauthorized(_) => Stop::Auth(e.to_string()),
        e => Stop::Failed(e.to_string()),
    }
}

/// One connection: until it fails (polling) or forever (webhook: updates arrive over HTTP).
pub(super) async fn connect(running: &Arc<RunningAccount>) -> Stop {
    let api = api(running);
    let short = Duration::from_secs(15);
    match running.spec.mode {
        AdapterMode::Webhook => {
            let (Some(url), Some(Ok(secret))) =
                (&running.spec.webhook_url, &running.spec.webhook_secret)
            else {
                return Stop::Failed("webhook mode needs webhookUrl and webhookSecret".into());
            };
            let identity = match api.get_me().await {
                Ok(i) => i,
                Err(e) => return stop(e),
            };
            let body = SetWebhook {
                url,
                secret_token: secret.expose(),
                allowed_updates: ALLOWED_UPDATES,
            };
            if let Err(e) = api.call::<_, Ignored>("setWebhook", &body, short).await {
                return stop(e);
            }
            running.connected(identity);
            running.cx.register(running);
            running.log("connected mode=webhook").await;
            pipeline::replay::<Telegram>(running).await;
            std::future::pending::<Stop>().await
        }
        _ => {
            let keep = DeleteWebhook {
                drop_pending_updates: false,
            };
            if let Err(e) = api.call::<_, Ignored>("deleteWebhook", &keep, short).await {
                return stop(e);
            }
            let identity = match api.get_me().await {
                Ok(i) => i,
                Err(e) => return stop(e),
            };
            running.connected(identity);
            running.log("connected mode=polling").await;
            pipeline::replay::<Telegram>(running).await;
            poll(running, &api).await
        }
    }
}

async fn poll(running: &Arc<RunningAccount>, api: &Api<'_>) -> Stop {
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
    let seconds = running.cx.timings.telegram_poll_seconds;
    loop {
        let body = GetUpdates {
            timeout: seconds,
            allowed_updates: ALLOWED_UPDATES,
            offset,
        };
        let updates: Vec<Box<RawValue>> = match api
            .call("getUpdates", &body, Duration::from_secs(seconds + 15))
            .await
        {
            Ok(updates) => updates,
            Err(ApiError::RateLimited(wait)) => {
                tokio::time::sleep(wait.min(outbound::MAX_RETRY_AFTER)).await;
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
            let Some(id) = Raw(update).update_id() else {
                continue;
            };
            next = next.max(id.saturating_add(1));
            events.push((id.to_string(), update.get().to_string()));
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
        for ((id, body), fresh) in events.iter().zip(fresh) {
            if fresh {
                let update = serde_json::from_str::<Update>(body).unwrap_or_default();
                pipeline::dispatch::<Telegram>(running, Taken::fresh(id.clone()), update);
            }
        }
    }
}

/// Takes one update from the webhook (`body` as sent): recorded, then handled in its chat's
/// lane.
pub(crate) async fn take(
    running: &Arc<RunningAccount>,
    update: Update,
    body: &str,
) -> Result<(), NotTaken> {
    pipeline::take::<Telegram>(running, update, body).await
}

/// An update as an envelope, and where its reply goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mapped {
    /// The lane: chat and topic.
    pub lane: String,
    pub envelope: Envelope,
    pub chat_id: i64,
    pub message_id: i64,
    pub thread_id: Option<i64>,
}

/// Maps an update (adapters.md, "Update → envelope"), or says why it is not a message to hand
/// in.
pub(crate) fn map(
    update: &Update,
    identity: &Identity,
    channel: &str,
    account: &str,
) -> Result<Mapped, &'static str> {
    let message = match (&update.message, &update.channel_post) {
        (Some(m), _) | (None, Some(m)) => m,
        _ => return Err("not a message (edits and other updates are not handed in)"),
    };
    let chat = message.chat.clone().unwrap_or_default();
    let chat_id = chat.id.ok_or("the message has no chat id")?;
    let message_id = message.message_id.ok_or("the message has no message_id")?;
    let text = message
        .text
        .as_deref()
        .or(message.caption.as_deref())
        .ok_or("the message has no text")?;
    let kind = match chat.kind.as_deref() {
        Some("private") => "direct",
        Some("group") | Some("supergroup") => "group",
        Some("channel") => "channel",
        _ => return Err("unknown chat type"),
    };
    // A forum topic is a thread; a reply chain in a plain group is not.
    let thread_id = message
        .message_thread_id
        .filter(|_| message.is_topic_message == Some(true) || chat.is_forum == Some(true));
    let (sender_id, sender_name, is_bot) = match &message.from {
        Some(from) => {
            let name = [from.first_name.as_deref(), from.last_name.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ");
            let name = if name.is_empty() {
                from.username.clone().unwrap_or_default()
            } else {
                name
            };
            (
                from.id.map(|i| i.to_string()),
                name,
                from.is_bot == Some(true),
            )
        }
        // A channel post speaks for the chat.
        None => {
            let chat = message.sender_chat.as_ref();
            (
                chat.and_then(|c| c.id).map(|i| i.to_string()),
                chat.and_then(|c| c.title.clone()).unwrap_or_default(),
                false,
            )
        }
    };
    let mut mentions = Vec::new();
    let entities = message
        .entities
        .as_ref()
        .or(message.caption_entities.as_ref());
    for entity in entities.into_iter().flatten() {
        match entity.kind.as_deref() {
            Some("mention") | Some("bot_command") => {
                let at = utf16_slice(
                    text,
                    entity.offset.unwrap_or(0) as usize,
                    entity.length.unwrap_or(0) as usize,
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
                if let Some(id) = entity.user.as_ref().and_then(|u| u.id) {
                    let id = id.to_string();
                    if !mentions.contains(&id) {
                        mentions.push(id);
                    }
                }
            }
            _ => {}
        }
    }
    let reply_to = message
        .reply_to_message
        .as_ref()
        .and_then(|r| r.from.as_ref())
        .and_then(|f| f.id)
        .map(|i| i.to_string());
    let envelope = Envelope {
        channel: channel.to_string(),
        account_id: account.to_string(),
        peer: Peer {
            kind,
            id: chat_id.to_string(),
        },
        message_id: message_id.to_string(),
        sender: Sender {
            is_bot,
            id: sender_id,
            name: (!sender_name.is_empty()).then_some(sender_name),
        },
        text: text.to_string(),
        mentions,
        team_id: None,
        thread_id: thread_id.map(|t| t.to_string()),
        reply_to_sender_id: reply_to,
        guild_id: None,
        member_role_ids: Vec::new(),
        parent_peer: None,
    };
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

/// Posts a reply in pieces; a piece that cannot be sent makes the rest a dead letter.
async fn send_reply(running: &Arc<RunningAccount>, mapped: &Mapped, text: &str, taken: &Taken) {
    let key = DeliveryKey {
        channel: running.spec.channel.clone(),
        account_id: running.spec.account.clone(),
        peer_kind: mapped.envelope.peer.kind.to_string(),
        peer_id: mapped.chat_id.to_string(),
        thread_id: mapped.thread_id.map(|t| t.to_string()).unwrap_or_default(),
        message_id: mapped.message_id.to_string(),
    };
    let api = api(running);
    let pieces = outbound::split(
        text,
        TEXT_LIMIT,
        outbound::utf16,
        running.spec.max_reply_messages,
    );
    // A replay posts only what the platform had not taken.
    for (i, piece) in pieces.iter().enumerate().skip(taken.posted) {
        let body = SendMessage {
            chat_id: mapped.chat_id,
            text: piece,
            message_thread_id: mapped.thread_id,
            reply_parameters: (i == 0).then_some(ReplyParameters {
                message_id: mapped.message_id,
                allow_sending_without_reply: true,
            }),
            reply_markup: None,
        };
        let send = || async {
            api.call::<_, Ignored>("sendMessage", &body, Duration::from_secs(30))
                .await
                .map(drop)
        };
        let sent = outbound::send_piece(running, "sendMessage", send, |e| match e {
            ApiError::RateLimited(wait) => Failure::RateLimited(*wait),
            ApiError::Transport(_) | ApiError::Unreachable(_) => Failure::Transport,
            _ => Failure::Final,
        })
        .await;
        match sent {
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
                    "telegram:sendMessage".into(),
                    dead_letter_body(mapped, &rest),
                    attempts,
                    error,
                )
                .await;
                return;
            }
        }
    }
}

/// Posts an outbox row (`carry`): to its chat and forum topic, answering the message it is
/// about (an approval's prompt, with its buttons on the last piece); in pieces, from the first
/// the platform has not taken. An approval's outcome edits the prompt's message instead, when
/// it was posted here. The posted message's id.
pub(super) async fn carry(
    running: &Arc<RunningAccount>,
    queued: &Queued,
) -> Result<Option<String>, Failed> {
    let said = &queued.said;
    let failed = |attempts, error: String, rest: &str, chat_id, thread_id| Failed {
        target: "telegram:sendMessage".into(),
        body: kept(chat_id, thread_id, rest),
        attempts,
        error,
    };
    let Ok(chat_id) = said.to.peer_id.parse::<i64>() else {
        return Err(failed(
            0,
            format!("`{}` is not a Telegram chat id", said.to.peer_id),
            &said.text,
            0,
            None,
        ));
    };
    let api = api(running);
    if matches!(
        said.cause,
        Cause::ApprovalOutcome | Cause::TaskVerdictOutcome
    ) && let Some(prompt) = running.posted_prompt(&said.cause_id, "telegram").await
        && let Ok(message_id) = prompt.posted_id.parse::<i64>()
    {
        let text = format!("{}\n\n{}", prompt.text, said.text);
        let text = outbound::split(&text, TEXT_LIMIT, outbound::utf16, 1)
            .into_iter()
            .next()
            .unwrap_or_default();
        let body = EditMessageText {
            chat_id,
            message_id,
            text: &text,
        };
        let edit = || async {
            api.call::<_, Ignored>("editMessageText", &body, Duration::from_secs(30))
                .await
        };
        // A message that cannot be edited (deleted, too old) gets the outcome as a new one.
        if outbound::send_piece(running, "editMessageText", edit, classify)
            .await
            .is_ok()
        {
            return Ok(Some(prompt.posted_id));
        }
    }
    let thread_id = said.to.thread_id.parse::<i64>().ok();
    let reply_to = said.reply_to.as_deref().and_then(|m| m.parse::<i64>().ok());
    let pieces = outbound::split(
        &said.text,
        TEXT_LIMIT,
        outbound::utf16,
        running.spec.max_reply_messages,
    );
    let last = pieces.len().saturating_sub(1);
    let mut posted_id = None;
    for (i, piece) in pieces.iter().enumerate().skip(queued.pieces) {
        let body = SendMessage {
            chat_id,
            text: piece,
            message_thread_id: thread_id,
            reply_parameters: reply_to
                .filter(|_| i == 0)
                .map(|message_id| ReplyParameters {
                    message_id,
                    allow_sending_without_reply: true,
                }),
            reply_markup: Choice::buttons(said.cause, &said.cause_id)
                .filter(|_| i == last)
                .and_then(|(choices, id)| keyboard(choices, id)),
        };
        let send = || async {
            api.call::<_, Sent>("sendMessage", &body, Duration::from_secs(30))
                .await
        };
        match outbound::send_piece(running, "sendMessage", send, classify).await {
            Ok(sent) => posted_id = sent.message_id.map(|id| id.to_string()),
            Err((attempts, error)) => {
                return Err(failed(
                    attempts,
                    error,
                    &pieces[i..].join("\n"),
                    chat_id,
                    thread_id,
                ));
            }
        }
        running.outbox_progress(queued.seq, i + 1).await;
    }
    Ok(posted_id)
}

fn classify(e: &ApiError) -> Failure {
    match e {
        ApiError::RateLimited(wait) => Failure::RateLimited(*wait),
        ApiError::Transport(_) | ApiError::Unreachable(_) => Failure::Transport,
        _ => Failure::Final,
    }
}

/// What a dead letter keeps of a `sendMessage` (`message_thread_id` null when there is none).
fn dead_letter_body(mapped: &Mapped, text: &str) -> String {
    kept(mapped.chat_id, mapped.thread_id, text)
}

fn kept(chat_id: i64, message_thread_id: Option<i64>, text: &str) -> String {
    #[derive(serde::Serialize)]
    struct Kept<'a> {
        chat_id: i64,
        message_thread_id: Option<i64>,
        text: &'a str,
    }
    serde_json::to_string(&Kept {
        chat_id,
        message_thread_id,
        text,
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// An update as the Bot API brings it, read as the adapter reads it.
    fn typed(update: &Value) -> Update {
        serde_json::from_value(update.clone()).unwrap()
    }

    fn envelope(m: &Mapped) -> Value {
        serde_json::to_value(&m.envelope).unwrap()
    }

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
        let m = map(&typed(&update), &bot(), "telegram", "default").unwrap();
        assert_eq!(
            envelope(&m),
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
        let m = map(&typed(&update), &bot(), "telegram", "a").unwrap();
        assert_eq!(envelope(&m)["peer"], json!({"kind": "group", "id": "-100"}));
        assert_eq!(envelope(&m)["threadId"], "3");
        assert_eq!(envelope(&m)["mentions"], json!(["999", "77"]));
        assert_eq!(envelope(&m)["sender"]["isBot"], true);
        assert_eq!(envelope(&m)["replyToSenderId"], "999");
        assert_eq!(m.lane, "-100/3");
    }

    #[test]
    fn a_reply_chain_in_a_plain_group_is_no_thread_and_edits_are_ignored() {
        let update = json!({"update_id": 6, "message": {"message_id": 8, "message_thread_id": 3, "chat": {"id": -5, "type": "group"}, "from": {"id": 1}, "text": "x"}});
        assert!(
            envelope(&map(&typed(&update), &bot(), "telegram", "a").unwrap())
                .get("threadId")
                .is_none()
        );
        let edit = json!({"update_id": 7, "edited_message": {"message_id": 8, "chat": {"id": -5, "type": "group"}, "text": "y"}});
        assert!(map(&typed(&edit), &bot(), "telegram", "a").is_err());
        let sticker = json!({"update_id": 8, "message": {"message_id": 9, "chat": {"id": -5, "type": "group"}, "from": {"id": 1}}});
        assert!(map(&typed(&sticker), &bot(), "telegram", "a").is_err());
        let post = json!({"update_id": 9, "channel_post": {"message_id": 1, "chat": {"id": -7, "type": "channel"}, "sender_chat": {"id": -7, "title": "News"}, "text": "z"}});
        let m = map(&typed(&post), &bot(), "telegram", "a").unwrap();
        assert_eq!(envelope(&m)["peer"]["kind"], "channel");
        assert_eq!(envelope(&m)["sender"]["id"], "-7");
    }

    #[test]
    fn entity_offsets_out_of_range_are_no_mention_and_no_panic() {
        let update = json!({"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "from": {"id": 1}, "text": "ab", "entities": [{"type": "mention", "offset": 1, "length": 99}, {"type": "mention", "offset": u64::MAX, "length": u64::MAX}]}});
        assert_eq!(
            envelope(&map(&typed(&update), &bot(), "telegram", "a").unwrap())["mentions"],
            json!([])
        );
    }

    /// The malformed updates the adapter meets: refused with the reason they always had.
    #[test]
    fn malformed_updates_are_refused_with_their_reason() {
        let why = |v: Value| map(&typed(&v), &bot(), "telegram", "a").unwrap_err();
        assert_eq!(
            why(json!({"update_id": 1, "message": {"message_id": 1, "text": "x"}})),
            "the message has no chat id"
        );
        assert_eq!(
            why(
                json!({"update_id": 1, "message": {"chat": {"id": 1, "type": "private"}, "text": "x"}})
            ),
            "the message has no message_id"
        );
        assert_eq!(
            why(
                json!({"update_id": 1, "message": {"message_id": 1, "chat": {"id": "1", "type": "private"}, "text": "x"}})
            ),
            "the message has no chat id",
            "an id that is a string is no id"
        );
        assert_eq!(
            why(
                json!({"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "secret"}, "text": "x"}})
            ),
            "unknown chat type"
        );
        assert_eq!(
            why(json!({"update_id": 1, "my_chat_member": {}})),
            "not a message (edits and other updates are not handed in)"
        );
        // A caption stands for the text, and its entities for the entities.
        let photo = json!({"update_id": 2, "message": {"message_id": 3, "chat": {"id": 5, "type": "group"}, "from": {"id": 4, "username": "ada"},
            "caption": "@deep_bot look", "caption_entities": [{"type": "mention", "offset": 0, "length": 9}]}});
        let m = map(&typed(&photo), &bot(), "telegram", "a").unwrap();
        let e = envelope(&m);
        assert_eq!(e["text"], "@deep_bot look");
        assert_eq!(e["mentions"], json!(["999"]));
        assert_eq!(
            e["sender"],
            json!({"isBot": false, "id": "4", "name": "ada"})
        );
        // A flag that is no boolean is not set.
        let odd = json!({"update_id": 3, "message": {"message_id": 1, "message_thread_id": 9, "is_topic_message": "yes", "chat": {"id": 5, "type": "supergroup"}, "from": {"id": 4, "is_bot": 1}, "text": "x"}});
        let e = envelope(&map(&typed(&odd), &bot(), "telegram", "a").unwrap());
        assert!(e.get("threadId").is_none());
        assert_eq!(e["sender"]["isBot"], false);
    }

    #[test]
    fn a_task_verdict_has_accept_and_reject_buttons_that_read_back_as_clicks() {
        use crate::access::outbox::Cause;
        let id = format!("task-{}", uuid::Uuid::new_v4());
        let cause_id = format!("{id}@2026-12-05T06:00:00Z");
        let (choices, carried) = Choice::buttons(Cause::TaskVerdict, &cause_id).unwrap();
        assert_eq!(carried, id);
        let keyboard = keyboard(choices, carried).expect("a task id fits Telegram's 64 bytes");
        let row = &keyboard.inline_keyboard[0];
        let labels: Vec<&str> = row.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(labels, ["Accept", "Reject"]);
        for (button, choice) in row.iter().zip([Choice::Accept, Choice::Reject]) {
            let update = typed(&json!({"update_id": 1, "callback_query": {
                "id": "q1", "from": {"id": 7, "is_bot": false, "first_name": "B"},
                "data": button.callback_data,
                "message": {"message_id": 3, "chat": {"id": -100, "type": "group"}, "date": 0}}}));
            let click = click(&update).unwrap();
            assert_eq!(
                (click.choice, click.approval_id.as_str()),
                (choice, id.as_str())
            );
        }
        assert!(Choice::buttons(Cause::Task, &cause_id).is_none());
    }
}
