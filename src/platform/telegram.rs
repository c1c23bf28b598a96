//! Telegram's Bot API of one bot, and the payloads deepcli reads: `getMe`, `getChat`, an
//! update (`message` / `channel_post`) with its chat, sender, entities and reply, and the
//! arguments of `getUpdates`, `setWebhook`, `deleteWebhook` and `sendMessage`. Every payload
//! field is read leniently ([`super::lenient`]): a field of an unexpected type is absent, as
//! the Bot API's JSON was read before it was typed.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Identity, Unreached, lenient, lenient_items, send_failed, transport_error};

/// Telegram's limit on a message's text, in UTF-16 code units.
pub(crate) const TEXT_LIMIT: usize = 4096;

/// The updates asked for: messages and channel posts (edits are not asked for).
pub(crate) const ALLOWED_UPDATES: [&str; 3] = ["message", "channel_post", "callback_query"];

/// A Bot API failure.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// 401/404 on the token: the credentials are wrong.
    Unauthorized(String),
    /// 429 with `retry_after`.
    RateLimited(Duration),
    /// Any other refusal (400 chat not found, 403 blocked, 409 conflict…).
    Refused { code: u16, description: String },
    /// No answer from the Bot API's host (DNS, connect, TLS, timeout): nothing is known of
    /// the token.
    Unreachable(Unreached),
    /// An answer that is not the Bot API's, or a request that could not be sent.
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
            ApiError::Unreachable(u) => write!(f, "{u}"),
            ApiError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// What every Bot API answer says besides its `result`.
#[derive(Debug, Default, Deserialize)]
struct Head {
    #[serde(default, deserialize_with = "lenient")]
    ok: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    error_code: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    description: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    parameters: Option<Parameters>,
}

#[derive(Debug, Default, Deserialize)]
struct Parameters {
    #[serde(default, deserialize_with = "lenient")]
    retry_after: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
struct Answer<T> {
    result: T,
}

/// The Bot API of one bot.
pub(crate) struct Api<'a> {
    pub http: &'a reqwest::Client,
    pub base: &'a str,
    pub token: &'a str,
}

impl Api<'_> {
    /// Calls `method` with `args` as JSON; its `result` read as `T`.
    pub(crate) async fn call<A: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        args: &A,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let url = format!("{}/bot{}/{method}", self.base, self.token);
        let response = self
            .http
            .post(url)
            .json(args)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| match send_failed(self.base, e) {
                Ok(unreached) => ApiError::Unreachable(unreached),
                Err(e) => ApiError::Transport(e),
            })?;
        let status = response.status().as_u16();
        let not_an_answer =
            |e: String| ApiError::Transport(format!("HTTP {status}, not a Bot API answer: {e}"));
        let bytes = response
            .bytes()
            .await
            .map_err(|e| not_an_answer(transport_error(e)))?;
        let head: Head =
            serde_json::from_slice(&bytes).map_err(|e| not_an_answer(e.to_string()))?;
        if head.ok == Some(true) {
            return serde_json::from_slice::<Answer<T>>(&bytes)
                .map(|a| a.result)
                .map_err(|e| {
                    ApiError::Transport(format!("{method} answered in an unexpected shape: {e}"))
                });
        }
        let code = head
            .error_code
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(status);
        let description = head
            .description
            .unwrap_or_else(|| "no description".to_string());
        Err(match code {
            401 | 404 if method == "getMe" || code == 401 => ApiError::Unauthorized(description),
            429 => ApiError::RateLimited(Duration::from_secs(
                head.parameters.and_then(|p| p.retry_after).unwrap_or(1),
            )),
            _ => ApiError::Refused { code, description },
        })
    }

    /// `getMe`: the bot's identity.
    pub(crate) async fn get_me(&self) -> Result<Identity, ApiError> {
        let me: Me = self
            .call("getMe", &NoArgs {}, Duration::from_secs(15))
            .await?;
        let id = me
            .id
            .map(|i| i.to_string())
            .ok_or_else(|| ApiError::Transport("getMe answered without the bot's `id`".into()))?;
        Ok(Identity {
            bot_user_id: id,
            name: me.username,
            bot_id: None,
            team_id: None,
        })
    }

    /// `deleteWebhook`, pending updates kept.
    pub(crate) async fn delete_webhook(&self, timeout: Duration) -> Result<(), ApiError> {
        self.call::<_, Ignored>(
            "deleteWebhook",
            &DeleteWebhook {
                drop_pending_updates: false,
            },
            timeout,
        )
        .await
        .map(drop)
    }
}

/// The arguments of a method that takes none.
#[derive(Debug, Serialize)]
pub(crate) struct NoArgs {}

/// Any result whose content is not read.
#[derive(Debug)]
pub(crate) struct Ignored;

impl<'de> Deserialize<'de> for Ignored {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Ignored)
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct DeleteWebhook {
    pub drop_pending_updates: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct SetWebhook<'a> {
    pub url: &'a str,
    pub secret_token: &'a str,
    pub allowed_updates: [&'static str; 3],
}

#[derive(Debug, Serialize)]
pub(crate) struct GetUpdates {
    pub timeout: u64,
    pub allowed_updates: [&'static str; 3],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct GetChat<'a> {
    pub chat_id: &'a str,
}

/// `sendMessage`'s arguments (also a dead letter's body, `message_thread_id` then written out
/// even when there is none).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SendMessage<'a> {
    pub chat_id: i64,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_thread_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_parameters: Option<ReplyParameters>,
    /// An inline keyboard (an approval's buttons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_markup: Option<InlineKeyboard>,
}

/// `reply_markup` of one row of buttons, each with its `callback_data`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InlineKeyboard {
    pub inline_keyboard: Vec<Vec<InlineButton>>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct InlineButton {
    pub text: String,
    pub callback_data: String,
}

/// A sent message, the field deepcli reads (`sendMessage`'s result).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Sent {
    #[serde(default, deserialize_with = "lenient")]
    pub message_id: Option<i64>,
}

/// `editMessageText`'s arguments: the text replaced, the keyboard gone.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EditMessageText<'a> {
    pub chat_id: i64,
    pub message_id: i64,
    pub text: &'a str,
}

/// `answerCallbackQuery`'s arguments: what the clicker alone is shown.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AnswerCallbackQuery<'a> {
    pub callback_query_id: &'a str,
    pub text: &'a str,
    pub show_alert: bool,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct ReplyParameters {
    pub message_id: i64,
    pub allow_sending_without_reply: bool,
}

/// `getMe`'s result.
#[derive(Debug, Default, Deserialize)]
struct Me {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    username: Option<String>,
}

/// One update of a `getUpdates` list: its id, and the update as sent (it goes to the inbox
/// as is).
pub(crate) struct Raw<'a>(pub &'a RawValue);

impl Raw<'_> {
    pub(crate) fn update_id(&self) -> Option<i64> {
        serde_json::from_str::<UpdateId>(self.0.get())
            .ok()
            .and_then(|u| u.update_id)
    }
}

#[derive(Debug, Default, Deserialize)]
struct UpdateId {
    #[serde(default, deserialize_with = "lenient")]
    update_id: Option<i64>,
}

/// An update, the fields deepcli reads.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Update {
    #[serde(default, deserialize_with = "lenient")]
    pub update_id: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub message: Option<Message>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel_post: Option<Message>,
    #[serde(default, deserialize_with = "lenient")]
    pub callback_query: Option<CallbackQuery>,
}

/// A click on an inline keyboard's button, the fields deepcli reads.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct CallbackQuery {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub from: Option<User>,
    #[serde(default, deserialize_with = "lenient")]
    pub message: Option<Message>,
    #[serde(default, deserialize_with = "lenient")]
    pub data: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Message {
    #[serde(default, deserialize_with = "lenient")]
    pub message_id: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub chat: Option<Chat>,
    #[serde(default, deserialize_with = "lenient")]
    pub text: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub caption: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub message_thread_id: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub is_topic_message: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub from: Option<User>,
    #[serde(default, deserialize_with = "lenient")]
    pub sender_chat: Option<Chat>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub entities: Option<Vec<Entity>>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub caption_entities: Option<Vec<Entity>>,
    #[serde(default, deserialize_with = "lenient")]
    pub reply_to_message: Option<Reply>,
}

/// A chat (also `getChat`'s result).
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Chat {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<i64>,
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub is_forum: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub title: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub username: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct User {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub is_bot: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub first_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub last_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub username: Option<String>,
}

/// A message entity: where in the text, in UTF-16 units.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Entity {
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub offset: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub length: Option<u64>,
    /// `text_mention`'s user.
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<User>,
}

/// The message a message replies to: who sent it.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Reply {
    #[serde(default, deserialize_with = "lenient")]
    pub from: Option<User>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_reads_its_message_and_leaves_out_what_it_cannot_read() {
        let u: Update = serde_json::from_str(
            r#"{"update_id":5,"message":{"message_id":7,"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":"no","first_name":"Ada"},"text":"hi",
                "entities":[{"type":"mention","offset":0,"length":2},"junk",{"type":"text_mention","user":{"id":9}}]}}"#,
        )
        .unwrap();
        assert_eq!(u.update_id, Some(5));
        let m = u.message.unwrap();
        assert_eq!(m.chat.as_ref().unwrap().id, Some(42));
        let from = m.from.unwrap();
        assert_eq!(from.is_bot, None, "a string is no flag");
        assert_eq!(from.first_name.as_deref(), Some("Ada"));
        let entities = m.entities.unwrap();
        assert_eq!(entities.len(), 2, "the item that is no entity is left out");
        assert_eq!(entities[1].user.as_ref().unwrap().id, Some(9));
        let odd: Update =
            serde_json::from_str(r#"{"update_id":"5","message":5,"channel_post":{"chat":7}}"#)
                .unwrap();
        assert!(odd.update_id.is_none() && odd.message.is_none());
        assert!(odd.channel_post.unwrap().chat.is_none());
        assert!(serde_json::from_str::<Update>("5").is_err());
    }

    #[test]
    fn a_raw_update_gives_its_id_and_stays_as_sent() {
        let list: Vec<Box<RawValue>> =
            serde_json::from_str(r#"[{"update_id":3,"message":{"x":1}},{"nope":true},7]"#).unwrap();
        let ids: Vec<Option<i64>> = list.iter().map(|r| Raw(r).update_id()).collect();
        assert_eq!(ids, [Some(3), None, None]);
        assert_eq!(list[0].get(), r#"{"update_id":3,"message":{"x":1}}"#);
    }

    #[test]
    fn send_message_is_written_as_the_bot_api_reads_it() {
        let first = SendMessage {
            chat_id: -100,
            text: "hi",
            message_thread_id: Some(3),
            reply_parameters: Some(ReplyParameters {
                message_id: 8,
                allow_sending_without_reply: true,
            }),
            reply_markup: None,
        };
        assert_eq!(
            serde_json::to_string(&first).unwrap(),
            r#"{"chat_id":-100,"text":"hi","message_thread_id":3,"reply_parameters":{"message_id":8,"allow_sending_without_reply":true}}"#
        );
        let plain = SendMessage {
            message_thread_id: None,
            reply_parameters: None,
            ..first
        };
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            r#"{"chat_id":-100,"text":"hi"}"#
        );
        let poll = GetUpdates {
            timeout: 25,
            allowed_updates: ALLOWED_UPDATES,
            offset: Some(4),
        };
        assert_eq!(
            serde_json::to_string(&poll).unwrap(),
            r#"{"timeout":25,"allowed_updates":["message","channel_post","callback_query"],"offset":4}"#
        );
    }
}
