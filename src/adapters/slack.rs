//! Slack's adapter (adapters.md, "Slack"), over [`crate::platform::slack`]. `mode: socket`
//! (default) opens a Socket Mode WebSocket with the app token (`apps.connections.open`),
//! acknowledges every envelope with its `envelope_id` once recorded, and connects again on a
//! `disconnect` message or a drop; `mode: http` takes the Events API on the controller's
//! listener ([`super::web`]). `auth.test` names the bot. Replies go by `chat.postMessage`, in
//! the thread. Discussions between bots in one thread are held to their rounds through
//! [`super::discussion`].

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::discussion;
use super::outbound::{self, Failure};
use super::pipeline::{self, Adapter, NotTaken};
use super::{
    AdapterSpec, Choice, Click, Envelope, Identity, Peer, RunningAccount, Sender, Stop, Taken,
};
use crate::access::outbox::{Cause, Failed, Queued};
use crate::access::store::DeliveryKey;
use crate::config::model::{AdapterMode, ReplyToMode};
use crate::platform::slack::{
    self as api, Ack, ApiError, ConnectionsOpen, Ephemeral, Event, Frame, Ignored, NoArgs, Payload,
    PostMessage, Posted, UpdateMessage,
};

/// The longest reply piece: Slack's advice for `text` (it truncates at 40,000).
pub(crate) const TEXT_LIMIT: usize = 4000;

/// Slack's part of the pipeline.
pub(crate) struct Slack;

impl Adapter for Slack {
    type Event = Payload;
    type Mapped = Mapped;
    const WHAT: &'static str = "event";
    const NO_ID: &'static str = "the event has no `event_id`";

    fn event_id(event: &Payload) -> Option<String> {
        event.event_id.clone().or_else(|| event.trigger_id.clone())
    }

    fn click(event: &Payload) -> Option<Click> {
        click(event)
    }

    fn answer_click(
        running: &Arc<RunningAccount>,
        click: &Click,
        text: &str,
    ) -> impl std::future::Future<Output = Result<(), String>> + Send {
        answer_click(running, click, text)
    }

    fn map(
        event: &Payload,
        identity: &Identity,
        spec: &AdapterSpec,
    ) -> Result<Mapped, &'static str> {
        let mut mapped = map(event, identity, &spec.channel, &spec.account)?;
        let discussed = spec.discussion_for(&mapped.conversation).is_some();
        mapped.lane = lane_of(&mapped.conversation, mapped.thread_ts.as_deref(), discussed);
        Ok(mapped)
    }

    fn lane(mapped: &Mapped) -> &str {
        &mapped.lane
    }

    fn envelope(mapped: &Mapped) -> &Envelope {
        &mapped.envelope
    }

    fn admit(
        running: &Arc<RunningAccount>,
        mapped: &Mapped,
    ) -> impl std::future::Future<Output = bool> + Send {
        admitted(running, mapped)
    }

    fn post(
        running: &Arc<RunningAccount>,
        mapped: &Mapped,
        text: &str,
        taken: &Taken,
    ) -> impl std::future::Future<Output = ()> + Send {
        reply(running, mapped, text, taken)
    }
}

fn bot_token(running: &RunningAccount) -> &str {
    running.spec.token()
}

fn stop(e: ApiError) -> Stop {
    match e {
        ApiError::Unauthorized(_) => Stop::Auth(e.to_string()),
        e => Stop::Failed(e.to_string()),
    }
}

/// One connection: until the socket ends (socket mode) or forever (http mode).
pub(super) async fn connect(running: &Arc<RunningAccount>) -> Stop {
    let http = &running.cx.http;
    let base = running.spec.api_base.as_str();
    let identity = match api::auth_test(http, base, bot_token(running)).await {
        Ok(i) => i,
        Err(e) => return stop(e),
    };
    if running.spec.mode == AdapterMode::Http {
        running.connected(identity);
        running.cx.register(running);
        running.log("connected mode=http").await;
        pipeline::replay::<Slack>(running).await;
        return std::future::pending::<Stop>().await;
    }
    let app_token = match &running.spec.app_token {
        Some(Ok(t)) => t.clone(),
        _ => return Stop::Auth("socket mode needs a usable appToken".into()),
    };
    let opened: ConnectionsOpen = match api::call(
        http,
        base,
        app_token.expose(),
        "apps.connections.open",
        &NoArgs {},
    )
    .await
    {
        Ok(o) => o,
        Err(e) => return stop(e),
    };
    let Some(url) = opened.url.as_deref() else {
        return Stop::Failed("apps.connections.open answered without a `url`".into());
    };
    let (socket, _) = match tokio::time::timeout(
        Duration::from_secs(15),
        tokio_tungstenite::connect_async(url),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Stop::Failed(format!("cannot open the Socket Mode WebSocket: {e}")),
        Err(_) => return Stop::Failed("the Socket Mode WebSocket did not open within 15 s".into()),
    };
    let (mut tx, mut rx) = socket.split();
    let mut identity = Some(identity);
    pipeline::replay::<Slack>(running).await;
    loop {
        let next = match tokio::time::timeout(Duration::from_secs(120), rx.next()).await {
            Ok(n) => n,
            Err(_) => return Stop::Failed("the Socket Mode WebSocket was silent for 120 s".into()),
        };
        let message = match next {
            None => return Stop::Failed("the Socket Mode WebSocket closed".into()),
            Some(Err(e)) => return Stop::Failed(format!("the Socket Mode WebSocket failed: {e}")),
            Some(Ok(m)) => m,
        };
        let text = match message {
            Message::Text(t) => t.to_string(),
            Message::Close(_) => return Stop::Failed("the Socket Mode WebSocket closed".into()),
            Message::Ping(p) => {
                let _ = tx.send(Message::Pong(p)).await;
                continue;
            }
            _ => continue,
        };
        let Ok(frame) = serde_json::from_str::<Frame>(&text) else {
            continue;
        };
        let ack = |envelope_id: &str| {
            let ack = serde_json::to_string(&Ack { envelope_id }).unwrap_or_default();
            Message::Text(ack.into())
        };
        match frame.kind.as_deref() {
            Some("hello") => {
                if let Some(identity) = identity.take() {
                    running.connected(identity);
                    running.log("connected mode=socket").await;
                }
            }
            Some("disconnect") => {
                let reason = frame.reason.as_deref().unwrap_or("unknown");
                return Stop::Failed(format!("Slack asked to reconnect ({reason})"));
            }
            Some("events_api") => {
                let taken = take_raw(running, frame.payload.as_deref()).await;
                if let Err(e) = &taken {
                    tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, error = %e, "an event could not be recorded; Slack delivers it again");
                    running.log(&format!("not-recorded error={e}")).await;
                }
                // Acknowledged once recorded: an event not recorded is delivered again.
                if taken.is_ok()
                    && let Some(envelope_id) = frame.envelope_id.as_deref()
                    && let Err(e) = tx.send(ack(envelope_id)).await
                {
                    return Stop::Failed(format!("cannot acknowledge an event: {e}"));
                }
            }
            Some("interactive") => {
                // A button's click: taken like an event (recorded once, in its chat's lane),
                // acknowledged once recorded.
                let taken = take_raw(running, frame.payload.as_deref()).await;
                if taken.is_ok()
                    && let Some(envelope_id) = frame.envelope_id.as_deref()
                    && let Err(e) = tx.send(ack(envelope_id)).await
                {
                    return Stop::Failed(format!("cannot acknowledge an interaction: {e}"));
                }
            }
            _ => {
                // Other envelopes (slash commands) are acknowledged unread.
                if let Some(envelope_id) = frame.envelope_id.as_deref() {
                    let _ = tx.send(ack(envelope_id)).await;
                }
            }
        }
    }
}

/// Takes an `events_api` frame's payload, as sent.
async fn take_raw(
    running: &Arc<RunningAccount>,
    payload: Option<&serde_json::value::RawValue>,
) -> Result<(), NotTaken> {
    let body = payload.map_or("null", |p| p.get());
    let event = serde_json::from_str::<Payload>(body).unwrap_or_default();
    pipeline::take::<Slack>(running, event, body).await
}

/// Takes one `event_callback` from the Events API (`body` as sent).
pub(crate) async fn take(
    running: &Arc<RunningAccount>,
    event: Payload,
    body: &str,
) -> Result<(), NotTaken> {
    pipeline::take::<Slack>(running, event, body).await
}

/// An event as an envelope, and where its reply goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mapped {
    pub lane: String,
    pub envelope: Envelope,
    pub conversation: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub team_id: String,
    pub is_bot: bool,
    pub text: String,
}

/// The lane a message waits in: its thread's, so that the threads of a channel run side by
/// side. A channel with bot discussions is one lane: a thread's rounds count in the order
/// they happened, and a bot's reply in a thread never overtakes the message that started the
/// thread (a top-level message, in the channel's lane).
fn lane_of(conversation: &str, thread_ts: Option<&str>, discussed: bool) -> String {
    match thread_ts {
        Some(thread) if !discussed => format!("{conversation}/{thread}"),
        _ => conversation.to_string(),
    }
}

/// Maps an `event_callback` (adapters.md, "Event → envelope"), or says why it is not a
/// message to hand in.
pub(crate) fn map(
    payload: &Payload,
    identity: &Identity,
    channel: &str,
    account: &str,
) -> Result<Mapped, &'static str> {
    let no_event = Event::default();
    let event = payload.event.as_ref().unwrap_or(&no_event);
    match (event.kind.as_deref(), event.subtype.as_deref()) {
        (
            Some("message"),
            None | Some("bot_message") | Some("thread_broadcast") | Some("file_share"),
        ) => {}
        (Some("app_mention"), _) => {}
        (Some("message"), Some(_)) => {
            return Err("a message edit, deletion, join or other change (ignored)");
        }
        _ => return Err("not a message event"),
    }
    let conversation = event
        .channel
        .as_deref()
        .ok_or("the event names no channel")?;
    let ts = event.ts.as_deref().ok_or("the event has no ts")?;
    let text = event.text.as_deref().unwrap_or_default();
    let kind = match event.channel_type.as_deref() {
        Some("im") => "direct",
        Some("mpim") => "group",
        Some(_) => "channel",
        // app_mention carries no channel_type: the id says it.
        None => match conversation.chars().next() {
            Some('D') => "direct",
            Some('G') => "group",
            _ => "channel",
        },
    };
    let bot_id = event.bot_id.as_deref();
    let is_bot = bot_id.is_some() || event.subtype.as_deref() == Some("bot_message");
    // This bot's own messages name its user id: the self-loop.
    let sender_id = match (event.user.as_deref(), bot_id) {
        (Some(user), _) => Some(user.to_string()),
        (None, Some(b)) if identity.bot_id.as_deref() == Some(b) => {
            Some(identity.bot_user_id.clone())
        }
        (None, Some(b)) => Some(b.to_string()),
        (None, None) => None,
    };
    let profile = event.user_profile.as_ref();
    let name = profile
        .and_then(|p| p.display_name.as_deref())
        .filter(|n| !n.is_empty())
        .or_else(|| profile.and_then(|p| p.real_name.as_deref()))
        .or(event.username.as_deref());
    let team_id = payload
        .team_id
        .as_deref()
        .or(event.team.as_deref())
        .unwrap_or_default()
        .to_string();
    let thread_ts = event.thread_ts.clone();
    let envelope = Envelope {
        channel: channel.to_string(),
        account_id: account.to_string(),
        peer: Peer {
            kind,
            id: conversation.to_string(),
        },
        message_id: ts.to_string(),
        sender: Sender {
            is_bot,
            id: sender_id,
            name: name.map(str::to_string),
        },
        text: text.to_string(),
        mentions: mentions(text),
        team_id: (!team_id.is_empty()).then(|| team_id.clone()),
        thread_id: thread_ts.clone(),
        reply_to_sender_id: event.parent_user_id.clone(),
        guild_id: None,
        member_role_ids: Vec::new(),
        parent_peer: None,
    };
    Ok(Mapped {
        lane: lane_of(conversation, thread_ts.as_deref(), false),
        envelope,
        conversation: conversation.to_string(),
        ts: ts.to_string(),
        thread_ts,
        team_id,
        is_bot,
        text: text.to_string(),
    })
}

/// The user ids of `<@U…>` and `<@U…|name>` in a message's text, each once.
pub(crate) fn mentions(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("<@") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find('>') else { break };
        let id = rest[..end].split('|').next().unwrap_or_default().trim();
        if !id.is_empty()
            && id.len() <= 64
            && id.chars().all(|c| c.is_ascii_alphanumeric())
            && !out.iter().any(|m| m == id)
        {
            out.push(id.to_string());
        }
        rest = &rest[end..];
    }
    out
}

/// Posts the reply to a message: in its thread (or the one it starts), one round of the
/// thread's discussion when it has one.
async fn reply(running: &Arc<RunningAccount>, mapped: &Mapped, text: &str, taken: &Taken) {
    let key = DeliveryKey {
        channel: running.spec.channel.clone(),
        account_id: running.spec.account.clone(),
        peer_kind: mapped.envelope.peer.kind.to_string(),
        peer_id: mapped.conversation.clone(),
        thread_id: mapped.thread_ts.clone().unwrap_or_default(),
        message_id: mapped.ts.clone(),
    };
    // The thread the reply goes to: the message's, or the one the reply starts.
    let thread = mapped
        .thread_ts
        .clone()
        .or_else(|| (running.spec.reply_to_mode != ReplyToMode::Off).then(|| mapped.ts.clone()));
    let round = match thread
        .as_deref()
        .and_then(|t| discussion::of(running, &mapped.team_id, &mapped.conversation, t))
    {
        None => None,
        Some(d) => match discussion::reserve_round(running, &d, text, &mapped.ts).await {
            Some(reached) => Some((d, reached)),
            None => return,
        },
    };
    if post_reply(running, mapped, text, key, taken).await
        && let Some((d, reached)) = round
        && let Some(notice) = discussion::after_round(running, &d, text, reached).await
        && let Err((_, error)) = post(
            running,
            &mapped.conversation,
            Some(&d.key.thread_id),
            &notice,
        )
        .await
    {
        running
            .log(&format!(
                "notice-failed thread={} error={error}",
                d.key.thread_id
            ))
            .await;
    }
}

/// Whether a message reaches the agent: held back in a discussed thread that is paused or
/// closed ([`discussion::admitted`]).
async fn admitted(running: &Arc<RunningAccount>, mapped: &Mapped) -> bool {
    let Some(d) = mapped
        .thread_ts
        .as_deref()
        .and_then(|t| discussion::of(running, &mapped.team_id, &mapped.conversation, t))
    else {
        return true;
    };
    let heard = discussion::Heard {
        message_id: &mapped.ts,
        sender_id: mapped.envelope.sender.id.as_deref(),
        is_bot: mapped.is_bot,
        text: &mapped.text,
    };
    discussion::admitted(running, &d, &heard).await
}

/// Posts a reply in pieces (`chat.postMessage`); whether all of it was posted.
async fn post_reply(
    running: &Arc<RunningAccount>,
    mapped: &Mapped,
    text: &str,
    key: DeliveryKey,
    taken: &Taken,
) -> bool {
    let pieces = outbound::split(
        text,
        TEXT_LIMIT,
        outbound::chars,
        running.spec.max_reply_messages,
    );
    let thread = mapped.thread_ts.clone();
    // A replay posts only what the platform had not taken.
    for (i, piece) in pieces.iter().enumerate().skip(taken.posted) {
        let thread_ts = match (&thread, running.spec.reply_to_mode) {
            (Some(t), _) => Some(t.clone()),
            (None, ReplyToMode::All) => Some(mapped.ts.clone()),
            (None, ReplyToMode::First) if i == 0 => Some(mapped.ts.clone()),
            (None, _) => None,
        };
        match post(running, &mapped.conversation, thread_ts.as_deref(), piece).await {
            Ok(_) => {
                running.posted(1);
                running.posted_pieces(taken, i + 1).await;
            }
            Err((attempts, error)) => {
                running.dead_lettered(&error);
                let rest = pieces[i..].join("\n");
                outbound::dead_letter(
                    &running.cx.access,
                    key,
                    "slack:chat.postMessage".into(),
                    dead_letter_body(&mapped.conversation, thread_ts.as_deref(), &rest),
                    attempts,
                    error,
                )
                .await;
                return false;
            }
        }
    }
    true
}

/// Posts an outbox row (`carry`): in its conversation's thread, or in the thread of the
/// message it answers (an approval's prompt) unless `replyToMode` is `off`; in pieces, from
/// the first the platform has not taken, an approval's buttons on the last. An approval's
/// outcome replaces the prompt's message (`chat.update`, the buttons gone) when it was posted
/// here. The posted message's `ts`.
pub(super) async fn carry(
    running: &Arc<RunningAccount>,
    queued: &Queued,
) -> Result<Option<String>, Failed> {
    let said = &queued.said;
    let conversation = &said.to.peer_id;
    if matches!(
        said.cause,
        Cause::ApprovalOutcome | Cause::TaskVerdictOutcome
    ) && let Some(prompt) = running.posted_prompt(&said.cause_id, "slack").await
    {
        let text = format!("{}\n\n{}", prompt.text, said.text);
        let body = UpdateMessage {
            channel: conversation,
            ts: &prompt.posted_id,
            text: &text,
            blocks: serde_json::json!([section(&text)]),
        };
        let update = || async {
            api::call::<_, Ignored>(
                &running.cx.http,
                &running.spec.api_base,
                bot_token(running),
                "chat.update",
                &body,
            )
            .await
        };
        // A message that cannot be updated (deleted) gets the outcome as a new one.
        if outbound::send_piece(running, "chat.update", update, classify)
            .await
            .is_ok()
        {
            return Ok(Some(prompt.posted_id));
        }
    }
    let thread_ts = if said.to.thread_id.is_empty() {
        said.reply_to
            .clone()
            .filter(|_| running.spec.reply_to_mode != ReplyToMode::Off)
    } else {
        Some(said.to.thread_id.clone())
    };
    let pieces = outbound::split(
        &said.text,
        TEXT_LIMIT,
        outbound::chars,
        running.spec.max_reply_messages,
    );
    let last = pieces.len().saturating_sub(1);
    let mut posted_id = None;
    for (i, piece) in pieces.iter().enumerate().skip(queued.pieces) {
        let blocks = Choice::buttons(said.cause, &said.cause_id)
            .filter(|_| i == last)
            .map(|(choices, id)| button_blocks(piece, choices, id));
        match post_blocks(running, conversation, thread_ts.as_deref(), piece, blocks).await {
            Ok(ts) => posted_id = ts,
            Err((attempts, error)) => {
                return Err(Failed {
                    target: "slack:chat.postMessage".into(),
                    body: dead_letter_body(
                        conversation,
                        thread_ts.as_deref(),
                        &pieces[i..].join("\n"),
                    ),
                    attempts,
                    error,
                });
            }
        }
        running.outbox_progress(queued.seq, i + 1).await;
    }
    Ok(posted_id)
}

/// What a dead letter keeps of a `chat.postMessage` (`thread_ts` null when there is none).
fn dead_letter_body(conversation: &str, thread_ts: Option<&str>, text: &str) -> String {
    #[derive(serde::Serialize)]
    struct Kept<'a> {
        channel: &'a str,
        thread_ts: Option<&'a str>,
        text: &'a str,
    }
    serde_json::to_string(&Kept {
        channel: conversation,
        thread_ts,
        text,
    })
    .unwrap_or_default()
}

/// One `chat.postMessage`, rate limits honoured; the message's `ts`, or the attempts made
/// and the error when it could not be sent.
async fn post(
    running: &RunningAccount,
    conversation: &str,
    thread_ts: Option<&str>,
    text: &str,
) -> Result<Option<String>, (u32, String)> {
    post_blocks(running, conversation, thread_ts, text, None).await
}

/// [`post`], with Block Kit `blocks` (an approval's buttons).
async fn post_blocks(
    running: &RunningAccount,
    conversation: &str,
    thread_ts: Option<&str>,
    text: &str,
    blocks: Option<serde_json::Value>,
) -> Result<Option<String>, (u32, String)> {
    let body = PostMessage {
        channel: conversation,
        text,
        thread_ts,
        blocks,
    };
    let send = || async {
        api::call::<_, Posted>(
            &running.cx.http,
            &running.spec.api_base,
            bot_token(running),
            "chat.postMessage",
            &body,
        )
        .await
        .map(|posted| posted.ts)
    };
    outbound::send_piece(running, "chat.postMessage", send, classify).await
}

fn classify(e: &ApiError) -> Failure {
    match e {
        ApiError::RateLimited(wait) => Failure::RateLimited(*wait),
        ApiError::Transport(_) | ApiError::Unreachable(_) => Failure::Transport,
        _ => Failure::Final,
    }
}

/// A section of mrkdwn `text`, cut to Block Kit's 3,000 characters.
fn section(text: &str) -> serde_json::Value {
    let text = outbound::split(text, 3000, outbound::chars, 1)
        .into_iter()
        .next()
        .unwrap_or_default();
    serde_json::json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// An approval prompt's or a task verdict's blocks: its text, and one button per choice whose
/// `action_id` is `deepcli_<choice>` and `value` the approval's (the task's) id.
fn button_blocks(text: &str, choices: &[Choice], id: &str) -> serde_json::Value {
    let buttons: Vec<serde_json::Value> = choices
        .iter()
        .map(|&choice| {
            let mut button = serde_json::json!({
                "type": "button",
                "action_id": format!("deepcli_{}", choice.word()),
                "text": {"type": "plain_text", "text": choice.label()},
                "value": id,
            });
            match choice {
                Choice::Once | Choice::Accept => button["style"] = "primary".into(),
                Choice::Deny | Choice::Reject => button["style"] = "danger".into(),
                Choice::Always => {}
            }
            button
        })
        .collect();
    serde_json::json!([
        section(text),
        {"type": "actions", "block_id": "deepcli_approval", "elements": buttons}
    ])
}

/// A `block_actions` interaction on one of deepcli's buttons, as a click.
pub(crate) fn click(payload: &Payload) -> Option<Click> {
    if payload.kind.as_deref() != Some("block_actions") {
        return None;
    }
    let action = payload.actions.as_ref()?.first()?;
    let word = action.action_id.as_deref()?.strip_prefix("deepcli_")?;
    let container = payload.container.clone().unwrap_or_default();
    let channel = payload
        .channel
        .as_ref()
        .and_then(|c| c.id.clone())
        .or(container.channel_id)?;
    let thread = container.thread_ts.or(container.message_ts);
    Some(Click {
        user_id: payload.user.as_ref()?.id.clone()?,
        approval_id: action.value.clone().filter(|v| !v.is_empty())?,
        choice: Choice::parse(word)?,
        // Not the chat's lane: the turn that asked waits there for this very click.
        lane: format!("click/{channel}"),
        answer_to: channel,
        thread,
    })
}

/// Answers a click with `chat.postEphemeral`: a message only the clicker sees.
async fn answer_click(
    running: &Arc<RunningAccount>,
    click: &Click,
    text: &str,
) -> Result<(), String> {
    let body = Ephemeral {
        channel: &click.answer_to,
        user: &click.user_id,
        text,
        thread_ts: click.thread.as_deref(),
    };
    api::call::<_, Ignored>(
        &running.cx.http,
        &running.spec.api_base,
        bot_token(running),
        "chat.postEphemeral",
        &body,
    )
    .await
    .map(drop)
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bot() -> Identity {
        Identity {
            bot_user_id: "UBOT".into(),
            name: Some("deep".into()),
            bot_id: Some("BBOT".into()),
            team_id: Some("T1".into()),
        }
    }

    #[test]
    fn mentions_are_read_from_the_text_once_each() {
        assert_eq!(
            mentions("<@U1> hi <@U2|bob> and <@U1> <@> <#C1> <@U3"),
            ["U1", "U2"]
        );
        assert!(mentions("<@U1 > <@ü>").is_empty() || mentions("<@U1 > <@ü>") == ["U1"]);
    }

    /// A payload as the Events API or Socket Mode brings it, read as the adapter reads it.
    fn payload(value: serde_json::Value) -> Payload {
        serde_json::from_value(value).unwrap()
    }

    fn mapped(value: serde_json::Value) -> Result<Mapped, &'static str> {
        map(&payload(value), &bot(), "slack", "a")
    }

    fn envelope(value: serde_json::Value) -> serde_json::Value {
        serde_json::to_value(mapped(value).unwrap().envelope).unwrap()
    }

    #[test]
    fn events_map_to_envelopes_and_changes_are_ignored() {
        let m = mapped(
            json!({"team_id": "T1", "event_id": "Ev1", "event": {"type": "message", "channel_type": "channel", "channel": "C1", "user": "U7", "text": "<@UBOT> hi", "ts": "1.1", "thread_ts": "1.0", "parent_user_id": "UBOT"}}),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&m.envelope).unwrap(),
            json!({"channel": "slack", "accountId": "a", "peer": {"kind": "channel", "id": "C1"}, "messageId": "1.1", "sender": {"id": "U7", "isBot": false}, "text": "<@UBOT> hi", "mentions": ["UBOT"], "teamId": "T1", "threadId": "1.0", "replyToSenderId": "UBOT"})
        );
        assert_eq!(m.lane, "C1/1.0");
        // In a channel with discussions, the thread shares the channel's lane with its root.
        assert_eq!(lane_of("C1", Some("1.0"), true), "C1");
        assert_eq!(lane_of("C1", None, true), "C1");
        assert_eq!(lane_of("C1", None, false), "C1");
        let mention = json!({"team_id": "T1", "event": {"type": "app_mention", "channel": "C1", "user": "U7", "text": "<@UBOT> hi", "ts": "1.1", "thread_ts": "1.0", "parent_user_id": "UBOT"}});
        assert_eq!(
            mapped(mention).unwrap().envelope,
            m.envelope,
            "one message, one envelope, whichever event brings it"
        );
        let im = json!({"event": {"type": "message", "channel_type": "im", "channel": "D1", "user": "U7", "text": "x", "ts": "2"}});
        assert_eq!(envelope(im)["peer"]["kind"], "direct");
        let mpim = json!({"event": {"type": "message", "channel_type": "mpim", "channel": "G1", "user": "U7", "text": "x", "ts": "2"}});
        assert_eq!(envelope(mpim)["peer"]["kind"], "group");
        let own = json!({"event": {"type": "message", "subtype": "bot_message", "channel": "C1", "bot_id": "BBOT", "text": "x", "ts": "3"}});
        assert_eq!(
            envelope(own)["sender"],
            json!({"id": "UBOT", "isBot": true})
        );
        for subtype in ["message_changed", "message_deleted", "channel_join"] {
            let e = json!({"event": {"type": "message", "subtype": subtype, "channel": "C1", "ts": "4"}});
            assert!(mapped(e).is_err(), "{subtype}");
        }
        assert!(mapped(json!({})).is_err());
        assert!(mapped(json!({"event": {"type": "message", "channel": 5}})).is_err());
    }

    /// The malformed and partial events the adapter meets: each mapped as the hand-read JSON
    /// was, or refused with the same reason.
    #[test]
    fn partial_events_map_as_before_and_say_why_not() {
        let why = |v| mapped(v).unwrap_err();
        assert_eq!(why(json!({"event": "x"})), "not a message event");
        assert_eq!(
            why(json!({"event": {"type": "reaction_added", "channel": "C1", "ts": "1"}})),
            "not a message event"
        );
        assert_eq!(
            why(json!({"event": {"type": "message", "ts": "1"}})),
            "the event names no channel"
        );
        assert_eq!(
            why(json!({"event": {"type": "message", "channel": "C1", "ts": 1.5}})),
            "the event has no ts"
        );
        // A subtype that is no string is no subtype: a plain message.
        let odd = json!({"event": {"type": "message", "subtype": 3, "channel": "C1", "ts": "1", "text": 7, "user_profile": {"display_name": "", "real_name": "Ada"}, "user": "U7"}});
        let e = envelope(odd);
        assert_eq!(e["text"], "", "a text that is no string is empty");
        assert_eq!(
            e["sender"],
            json!({"isBot": false, "id": "U7", "name": "Ada"})
        );
        assert!(e.get("teamId").is_none(), "no team: no teamId");
        // app_mention names no channel_type: the id's first letter says it.
        let dm =
            json!({"event": {"type": "app_mention", "channel": "D9", "ts": "1", "user": "U7"}});
        assert_eq!(envelope(dm)["peer"]["kind"], "direct");
        let group =
            json!({"event": {"type": "app_mention", "channel": "G9", "ts": "1", "user": "U7"}});
        assert_eq!(envelope(group)["peer"]["kind"], "group");
        // Another bot: its bot id speaks, and the team comes from the event when the
        // payload names none.
        let other = json!({"event": {"type": "message", "channel": "C1", "ts": "1", "bot_id": "BOTHER", "username": "helper", "team": "T2"}});
        let e = envelope(other);
        assert_eq!(
            e["sender"],
            json!({"isBot": true, "id": "BOTHER", "name": "helper"})
        );
        assert_eq!(e["teamId"], "T2");
    }
}
