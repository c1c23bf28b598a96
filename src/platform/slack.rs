//! Slack's Web API (with the bot or app token), the Events API's v0 signature, and the
//! payloads deepcli reads: the Socket Mode frame, the `event_callback` around a message event,
//! `auth.test`, `apps.connections.open`, and the `users.list` / `conversations.list` pages.
//! Every payload field is read leniently ([`super::lenient`]): a field of an unexpected type is
//! absent, as Slack's JSON was read before it was typed.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Identity, Unreached, lenient, lenient_items, send_failed, transport_error};

/// How old a signed request may be (replay protection).
pub(crate) const REPLAY_WINDOW_SECS: i64 = 300;

/// Checks `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">` and that the
/// timestamp is within [`REPLAY_WINDOW_SECS`] of `now`.
pub(crate) fn verify(
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
        .and_then(|h| hex::decode(h).ok())
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

/// `v0=<hex>` for `body` at `timestamp`, as Slack signs what it sends.
#[cfg(test)]
pub(crate) fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    use hmac::Mac;
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// A Web API failure.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// `invalid_auth`, `not_authed`, `account_inactive`, `token_revoked`…
    Unauthorized(String),
    /// HTTP 429 with `Retry-After`.
    RateLimited(Duration),
    /// Any other `ok: false`.
    Refused(String),
    /// No answer from the Web API's host (DNS, connect, TLS, timeout): nothing is known of the
    /// token.
    Unreachable(Unreached),
    /// An answer that is not the Web API's, or a request that could not be sent.
    Transport(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Unauthorized(e) => write!(f, "the token was refused: {e}"),
            ApiError::RateLimited(w) => write!(f, "rate limited: retry after {} s", w.as_secs()),
            ApiError::Refused(e) => write!(f, "{e}"),
            ApiError::Unreachable(u) => write!(f, "{u}"),
            ApiError::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// What every Web API answer says first.
#[derive(Debug, Default, Deserialize)]
struct Head {
    #[serde(default, deserialize_with = "lenient")]
    ok: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    error: Option<String>,
}

/// The arguments of a method that takes none.
#[derive(Debug, Serialize)]
pub(crate) struct NoArgs {}

/// Calls Web API `method` with `token` and `args`; the answer read as `T`.
pub(crate) async fn call<A: Serialize + ?Sized, T: DeserializeOwned>(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    method: &str,
    args: &A,
) -> Result<T, ApiError> {
    let request = http
        .post(format!("{base}/{method}"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30));
    // Slack takes JSON bodies for its write methods only: the others get a form.
    let request = if matches!(
        method,
        "chat.postMessage" | "chat.update" | "chat.postEphemeral"
    ) {
        request.json(args)
    } else {
        request.form(args)
    };
    let response = request
        .send()
        .await
        .map_err(|e| match send_failed(base, e) {
            Ok(unreached) => ApiError::Unreachable(unreached),
            Err(e) => ApiError::Transport(e),
        })?;
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
    let not_an_answer =
        |e: String| ApiError::Transport(format!("HTTP {status}, not a Web API answer: {e}"));
    let bytes = response
        .bytes()
        .await
        .map_err(|e| not_an_answer(transport_error(e)))?;
    let head: Head = serde_json::from_slice(&bytes).map_err(|e| not_an_answer(e.to_string()))?;
    if head.ok == Some(true) {
        return serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::Transport(format!("{method} answered in an unexpected shape: {e}"))
        });
    }
    let error = head.error.unwrap_or_else(|| "unknown_error".into());
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

/// `auth.test`'s answer.
#[derive(Debug, Default, Deserialize)]
struct AuthTest {
    #[serde(default, deserialize_with = "lenient")]
    user_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    user: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    bot_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    team_id: Option<String>,
}

/// `auth.test`: the bot's identity.
pub(crate) async fn auth_test(
    http: &reqwest::Client,
    base: &str,
    token: &str,
) -> Result<Identity, ApiError> {
    let me: AuthTest = call(http, base, token, "auth.test", &NoArgs {}).await?;
    Ok(Identity {
        bot_user_id: me
            .user_id
            .ok_or_else(|| ApiError::Transport("auth.test answered without `user_id`".into()))?,
        name: me.user,
        bot_id: me.bot_id,
        team_id: me.team_id,
    })
}

/// `apps.connections.open`'s answer: the Socket Mode WebSocket's URL.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConnectionsOpen {
    #[serde(default, deserialize_with = "lenient")]
    pub url: Option<String>,
}

/// `chat.postMessage`'s arguments.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PostMessage<'a> {
    pub channel: &'a str,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<&'a str>,
    /// Block Kit blocks (an approval's buttons); `text` is then the notification's fallback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<serde_json::Value>,
}

/// A posted message, the field deepcli reads (`chat.postMessage`'s answer).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Posted {
    #[serde(default, deserialize_with = "lenient")]
    pub ts: Option<String>,
}

/// `chat.update`'s arguments: the message's text and blocks replaced.
#[derive(Debug, Serialize)]
pub(crate) struct UpdateMessage<'a> {
    pub channel: &'a str,
    pub ts: &'a str,
    pub text: &'a str,
    pub blocks: serde_json::Value,
}

/// `chat.postEphemeral`'s arguments: a message only `user` sees.
#[derive(Debug, Serialize)]
pub(crate) struct Ephemeral<'a> {
    pub channel: &'a str,
    pub user: &'a str,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<&'a str>,
}

/// Any answer whose content is not read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Ignored {}

/// One Socket Mode frame.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Frame {
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub envelope_id: Option<String>,
    /// `disconnect`'s reason.
    #[serde(default, deserialize_with = "lenient")]
    pub reason: Option<String>,
    /// `events_api`'s payload: an `event_callback`, as sent (it goes to the inbox as is).
    #[serde(default)]
    pub payload: Option<Box<RawValue>>,
}

/// The acknowledgement of a Socket Mode frame.
#[derive(Debug, Serialize)]
pub(crate) struct Ack<'a> {
    pub envelope_id: &'a str,
}

/// An Events API payload: `event_callback` (or `url_verification`, rate-limit notices…).
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Payload {
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub event_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub team_id: Option<String>,
    /// `url_verification`'s challenge, echoed as sent.
    #[serde(default)]
    pub challenge: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "lenient")]
    pub event: Option<Event>,
    /// Interactivity (`block_actions`): who clicked, which buttons, where.
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<IdOf>,
    #[serde(default, deserialize_with = "lenient_items")]
    pub actions: Option<Vec<Action>>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel: Option<IdOf>,
    #[serde(default, deserialize_with = "lenient")]
    pub container: Option<Container>,
    /// What names an interaction once (it has no `event_id`).
    #[serde(default, deserialize_with = "lenient")]
    pub trigger_id: Option<String>,
}

/// An object deepcli reads the `id` of (an interaction's `user`, `channel`).
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct IdOf {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
}

/// A clicked button of a `block_actions` payload.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Action {
    #[serde(default, deserialize_with = "lenient")]
    pub action_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub value: Option<String>,
}

/// Where a clicked button is: its message and thread.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Container {
    #[serde(default, deserialize_with = "lenient")]
    pub channel_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub message_ts: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub thread_ts: Option<String>,
}

/// `url_verification`'s answer.
#[derive(Debug, Serialize)]
pub(crate) struct Challenge<'a> {
    pub challenge: Option<&'a RawValue>,
}

/// A message event (`message`, `app_mention`), the fields deepcli reads.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Event {
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub subtype: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel_type: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub ts: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub thread_ts: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub text: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub bot_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub username: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub user_profile: Option<UserProfile>,
    #[serde(default, deserialize_with = "lenient")]
    pub team: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub parent_user_id: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct UserProfile {
    #[serde(default, deserialize_with = "lenient")]
    pub display_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub real_name: Option<String>,
}

/// A `users.list` member.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct User {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub real_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub deleted: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub profile: Option<UserProfile>,
}

/// A `conversations.list` channel.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Conversation {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub name: Option<String>,
}

/// One page of a paged list method: its entries under `members` or `channels`.
#[derive(Debug, Default, Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
pub(crate) struct Page<T> {
    #[serde(default, deserialize_with = "super::lenient_items")]
    pub members: Option<Vec<T>>,
    #[serde(default, deserialize_with = "super::lenient_items")]
    pub channels: Option<Vec<T>>,
    #[serde(default, deserialize_with = "lenient")]
    pub response_metadata: Option<ResponseMetadata>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseMetadata {
    #[serde(default, deserialize_with = "lenient")]
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Slack's own example (api.slack.com, "Verifying requests from Slack").
    #[test]
    fn the_signature_is_slacks_v0_hmac_in_lower_hex() {
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let sig = sign(secret, 1531420618, body);
        assert_eq!(
            sig,
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
        assert_eq!(
            verify(secret, Some("1531420618"), Some(&sig), body, 1531420618),
            Ok(())
        );
        // Upper-case hex is the same bytes.
        let upper = format!("v0={}", sig[3..].to_uppercase());
        assert_eq!(
            verify(secret, Some("1531420618"), Some(&upper), body, 1531420618),
            Ok(())
        );
        assert!(verify(secret, Some("1531420618"), Some("v0=abc"), body, 1531420618).is_err());
    }

    #[test]
    fn a_socket_frame_keeps_its_payload_as_sent() {
        let frame: Frame = serde_json::from_str(
            r#"{"type":"events_api","envelope_id":"E1","payload":{"event_id":"Ev1","x":[1, 2]}}"#,
        )
        .unwrap();
        assert_eq!(frame.kind.as_deref(), Some("events_api"));
        assert_eq!(frame.envelope_id.as_deref(), Some("E1"));
        assert_eq!(
            frame.payload.unwrap().get(),
            r#"{"event_id":"Ev1","x":[1, 2]}"#
        );
        let odd: Frame = serde_json::from_str(r#"{"type":7,"envelope_id":["x"]}"#).unwrap();
        assert!(odd.kind.is_none() && odd.envelope_id.is_none() && odd.payload.is_none());
        let hello: Frame =
            serde_json::from_str(r#"{"type":"disconnect","reason":"refresh_requested"}"#).unwrap();
        assert_eq!(hello.reason.as_deref(), Some("refresh_requested"));
    }

    #[test]
    fn a_payload_field_of_another_type_is_absent_not_an_error() {
        let p: Payload = serde_json::from_str(
            r#"{"type":"event_callback","event_id":5,"team_id":"T1","event":{"type":"message","channel":5,"text":null,"user_profile":"x","ts":"1.1"}}"#,
        )
        .unwrap();
        assert_eq!(p.kind.as_deref(), Some("event_callback"));
        assert!(p.event_id.is_none());
        let e = p.event.unwrap();
        assert!(e.channel.is_none() && e.text.is_none() && e.user_profile.is_none());
        assert_eq!(e.ts.as_deref(), Some("1.1"));
        let not_an_object: Payload = serde_json::from_str(r#"{"event":"x"}"#).unwrap();
        assert!(not_an_object.event.is_none());
        assert!(serde_json::from_str::<Payload>("5").is_err());
    }

    #[test]
    fn a_page_keeps_the_entries_it_can_read_and_its_cursor() {
        let page: Page<User> = serde_json::from_str(
            r#"{"ok":true,"members":[{"id":"U1","name":"ada","profile":{"display_name":"Ada"}},"junk",{"id":"U2","deleted":true}],"response_metadata":{"next_cursor":"c2"}}"#,
        )
        .unwrap();
        let members = page.members.unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(
            members[0].profile.as_ref().unwrap().display_name.as_deref(),
            Some("Ada")
        );
        assert_eq!(members[1].deleted, Some(true));
        assert_eq!(
            page.response_metadata.unwrap().next_cursor.as_deref(),
            Some("c2")
        );
        let empty: Page<Conversation> =
            serde_json::from_str(r#"{"ok":true,"channels":{}}"#).unwrap();
        assert!(empty.channels.is_none() && empty.response_metadata.is_none());
    }

    #[test]
    fn post_message_and_form_arguments_are_written_as_slack_reads_them() {
        let body = PostMessage {
            channel: "C1",
            text: "hi",
            thread_ts: None,
            blocks: None,
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"channel":"C1","text":"hi"}"#
        );
        let threaded = PostMessage {
            thread_ts: Some("1.0"),
            ..body
        };
        assert_eq!(
            serde_json::to_string(&threaded).unwrap(),
            r#"{"channel":"C1","text":"hi","thread_ts":"1.0"}"#
        );
        assert_eq!(
            serde_json::to_string(&Ack { envelope_id: "E1" }).unwrap(),
            r#"{"envelope_id":"E1"}"#
        );
    }
}
