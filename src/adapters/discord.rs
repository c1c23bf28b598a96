//! Discord's adapter (adapters.md, "Discord"), over [`crate::platform::discord`]. One Gateway
//! (v10) connection per account, at the URL `GET /gateway/bot` names: HELLO, then IDENTIFY with
//! the intents the config needs (or RESUME with the session and the last sequence kept from the
//! connection before), heartbeats with the last sequence; READY names the bot; op 7 reconnects
//! and resumes, op 9 identifies again when the session cannot be resumed. MESSAGE_CREATE and
//! INTERACTION_CREATE are taken into the inbox with the message's channel as the Gateway
//! described it (a thread's type and parent), then go through the one pipeline. Replies go by
//! `POST /channels/{id}/messages` with a `message_reference`, in 2,000-character pieces, each
//! route's rate limit kept ([`crate::platform::discord::RateLimits`]). Bot discussions in
//! threads are held to their rounds ([`super::discussion`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use super::discussion;
use super::outbound::{self, Failure};
use super::pipeline::{self, Adapter, NotTaken};
use super::{
    AdapterSpec, Choice, Click, Envelope, Identity, Peer, RunningAccount, Sender, Stop, Taken,
};
use crate::access::outbox::{Cause, Conversation, Failed, Queued};
use crate::access::store::DeliveryKey;
use crate::platform::discord::{
    ActionRow, AllowedMentions, Api, ApiError, Body, Button, Callback, Channel, CreateMessage,
    EditMessage, Followup, Frame, GATEWAY_QUERY, GatewayBot, GuildCreate, Hello, Identify, Ignored,
    Interaction, Message, MessageReference, OpenDm, Posted, Properties, Ready, Resume, TEXT_LIMIT,
    intents, op, text_mentions,
};
use crate::platform::lenient;

/// What an account keeps across its Gateway connections.
#[derive(Debug, Default)]
pub(crate) struct Session {
    state: Mutex<State>,
    /// The last sequence number a dispatch carried (`i64::MIN`: none yet).
    seq: AtomicSeq,
    pub(crate) limits: crate::platform::discord::RateLimits,
}

#[derive(Debug)]
struct AtomicSeq(AtomicI64);

impl Default for AtomicSeq {
    fn default() -> AtomicSeq {
        AtomicSeq(AtomicI64::new(i64::MIN))
    }
}

#[derive(Debug, Default)]
struct State {
    /// The session READY opened, and where to resume it.
    resume: Option<Resumable>,
    /// The channels the Gateway described (GUILD_CREATE, THREAD_CREATE…) or REST answered.
    channels: HashMap<String, Channel>,
    /// The DM channel with each user the outbox wrote to.
    dms: HashMap<String, String>,
    /// The application READY named.
    application_id: Option<String>,
    /// The bot READY named (a RESUMED session is the same bot's).
    identity: Option<Identity>,
}

#[derive(Debug, Clone)]
struct Resumable {
    session_id: String,
    url: String,
}

impl Session {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn seq(&self) -> Option<i64> {
        Some(self.seq.0.load(Ordering::SeqCst)).filter(|s| *s != i64::MIN)
    }

    fn forget_session(&self) {
        self.state().resume = None;
        self.seq.0.store(i64::MIN, Ordering::SeqCst);
    }

    fn remember(&self, channel: Channel) {
        if let Some(id) = channel.id.clone() {
            self.state().channels.insert(id, channel);
        }
    }
}

fn api(running: &RunningAccount) -> Api<'_> {
    Api {
        http: &running.cx.http,
        base: &running.spec.api_base,
        token: running.spec.token(),
        limits: &running.discord.limits,
    }
}

fn stop(e: ApiError) -> Stop {
    match e {
        ApiError::Unauthorized(_) => Stop::Auth(e.to_string()),
        e => Stop::Failed(e.to_string()),
    }
}

/// The intents IDENTIFY asks for: guilds, guild and direct messages, their content; guild
/// members when a binding or the guilds' policy uses roles.
fn intents_of(spec: &AdapterSpec) -> u64 {
    let base = intents::GUILDS
        | intents::GUILD_MESSAGES
        | intents::DIRECT_MESSAGES
        | intents::MESSAGE_CONTENT;
    if spec.uses_roles {
        base | intents::GUILD_MEMBERS
    } else {
        base
    }
}

/// `url` with the Gateway's version and encoding.
fn gateway_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.contains('?') {
        format!("{url}&{GATEWAY_QUERY}")
    } else {
        format!("{url}/?{GATEWAY_QUERY}")
    }
}

fn frame<D: Serialize>(op: u8, d: D) -> WsMessage {
    WsMessage::Text(
        serde_json::to_string(&crate::platform::discord::Outgoing { op, d })
            .unwrap_or_default()
            .into(),
    )
}

/// Ends the connection's helper tasks with it.
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// One Gateway connection, until it drops or Discord asks for another.
pub(super) async fn connect(running: &Arc<RunningAccount>) -> Stop {
    let api = api(running);
    let resume = running.discord.state().resume.clone();
    let url = match &resume {
        Some(r) => r.url.clone(),
        None => match api.get::<GatewayBot>("/gateway/bot").await {
            Ok(GatewayBot { url: Some(url) }) => url,
            Ok(_) => return Stop::Failed("GET /gateway/bot answered without a `url`".into()),
            Err(e) => return stop(e),
        },
    };
    let (socket, _) = match tokio::time::timeout(
        Duration::from_secs(15),
        tokio_tungstenite::connect_async(gateway_url(&url)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        failed => {
            // A resume URL that does not answer is given up: the next attempt identifies at
            // the URL `GET /gateway/bot` names.
            if resume.is_some() {
                running.discord.forget_session();
            }
            return Stop::Failed(match failed {
                Ok(Err(e)) => format!("cannot open the Gateway's WebSocket: {e}"),
                _ => "the Gateway's WebSocket did not open within 15 s".into(),
            });
        }
    };
    let (mut sink, mut stream) = socket.split();
    let interval = match tokio::time::timeout(Duration::from_secs(15), stream.next()).await {
        Ok(Some(Ok(WsMessage::Text(text)))) => {
            let hello = serde_json::from_str::<Frame>(&text).unwrap_or_default();
            let d = hello.d.as_deref().map_or("null", RawValue::get);
            match (hello.op, serde_json::from_str::<Hello>(d).ok()) {
                (
                    Some(op::HELLO),
                    Some(Hello {
                        heartbeat_interval: Some(ms),
                    }),
                ) => Duration::from_millis(ms.max(100)),
                _ => return Stop::Failed("the Gateway did not begin with HELLO".into()),
            }
        }
        _ => return Stop::Failed("the Gateway did not say HELLO within 15 s".into()),
    };
    let token = running.spec.token();
    let first = match (&resume, running.discord.seq()) {
        (Some(r), Some(seq)) => frame(
            op::RESUME,
            Resume {
                token,
                session_id: &r.session_id,
                seq,
            },
        ),
        _ => frame(
            op::IDENTIFY,
            Identify {
                token,
                intents: intents_of(&running.spec),
                properties: Properties {
                    os: std::env::consts::OS,
                    browser: "deepcli",
                    device: "deepcli",
                },
            },
        ),
    };
    if let Err(e) = sink.send(first).await {
        return Stop::Failed(format!("cannot identify on the Gateway: {e}"));
    }
    let (out, mut out_rx) = mpsc::unbounded_channel::<WsMessage>();
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            if sink.send(m).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let acked = Arc::new(AtomicBool::new(true));
    let zombie = Arc::new(Notify::new());
    let beat = tokio::spawn(heartbeat(
        running.clone(),
        out.clone(),
        interval,
        acked.clone(),
        zombie.clone(),
    ));
    let _tasks = Tasks(vec![writer, beat]);
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            () = zombie.notified() => {
                return Stop::Failed("the Gateway acknowledged no heartbeat: reconnecting".into());
            }
        };
        let text = match next {
            None => return Stop::Failed("the Gateway's WebSocket closed".into()),
            Some(Err(e)) => return Stop::Failed(format!("the Gateway's WebSocket failed: {e}")),
            Some(Ok(WsMessage::Text(t))) => t,
            Some(Ok(WsMessage::Close(close))) => {
                return closed(
                    running,
                    close.map(|c| (u16::from(c.code), c.reason.to_string())),
                );
            }
            Some(Ok(_)) => continue,
        };
        let frame = serde_json::from_str::<Frame>(&text).unwrap_or_default();
        match frame.op {
            Some(op::DISPATCH) => {
                let seq = frame.s;
                if !dispatched(running, &url, frame).await {
                    // Not recorded: the sequence stays before it, so that the resumed session
                    // dispatches it again.
                    return Stop::Failed(
                        "an event could not be recorded: resuming from before it".into(),
                    );
                }
                if let Some(s) = seq {
                    running.discord.seq.0.store(s, Ordering::SeqCst);
                }
            }
            Some(op::HEARTBEAT) => {
                let _ = out.send(beat_frame(running));
            }
            Some(op::HEARTBEAT_ACK) => acked.store(true, Ordering::SeqCst),
            Some(op::RECONNECT) => {
                running.log("gateway-reconnect op=7").await;
                return Stop::Failed("Discord asked to reconnect (op 7): resuming".into());
            }
            Some(op::INVALID_SESSION) => {
                let resumable = frame
                    .d
                    .as_deref()
                    .and_then(|d| serde_json::from_str::<bool>(d.get()).ok())
                    == Some(true);
                if !resumable {
                    running.discord.forget_session();
                }
                running
                    .log(&format!(
                        "gateway-invalid-session op=9 resumable={resumable}"
                    ))
                    .await;
                return Stop::Failed(format!(
                    "the Gateway invalidated the session (op 9): {}",
                    if resumable {
                        "resuming"
                    } else {
                        "identifying again"
                    }
                ));
            }
            _ => {}
        }
    }
}

fn beat_frame(running: &RunningAccount) -> WsMessage {
    frame(op::HEARTBEAT, running.discord.seq())
}

/// Heartbeats every `interval` (the first after a random part of it, as Discord asks), each
/// with the last sequence; one not acknowledged before the next makes the connection a zombie.
async fn heartbeat(
    running: Arc<RunningAccount>,
    out: mpsc::UnboundedSender<WsMessage>,
    interval: Duration,
    acked: Arc<AtomicBool>,
    zombie: Arc<Notify>,
) {
    let jitter = f64::from(getrandom::u32().unwrap_or(0)) / f64::from(u32::MAX);
    tokio::time::sleep(interval.mul_f64(jitter)).await;
    loop {
        if !acked.swap(false, Ordering::SeqCst) {
            zombie.notify_one();
            return;
        }
        if out.send(beat_frame(&running)).is_err() {
            return;
        }
        tokio::time::sleep(interval).await;
    }
}

/// Why the Gateway closed: the codes that no reconnect mends (authentication, intents,
/// sharding, the API version) say so; a session that timed out or an invalid sequence is
/// identified anew; the rest resume.
fn closed(running: &RunningAccount, close: Option<(u16, String)>) -> Stop {
    let Some((code, reason)) = close else {
        return Stop::Failed("the Gateway closed the connection".into());
    };
    let said = if reason.is_empty() {
        format!("close code {code}")
    } else {
        format!("close code {code}: {reason}")
    };
    match code {
        4004 => Stop::Auth(format!("the Gateway refused the token ({said})")),
        4013 | 4014 => Stop::Auth(format!(
            "the Gateway refused the intents ({said}): enable the Message Content intent (and Server Members, when roles are used) on the bot's page of the Developer Portal"
        )),
        4010..=4012 => Stop::Auth(format!("the Gateway refused the connection ({said})")),
        4007 | 4009 => {
            running.discord.forget_session();
            Stop::Failed(format!(
                "the Gateway ended the session ({said}): identifying again"
            ))
        }
        _ => Stop::Failed(format!("the Gateway closed the connection ({said})")),
    }
}

/// A dispatch (op 0): READY and RESUMED, the channels it describes, and the messages and clicks
/// it brings. False when a message or click could not be recorded.
async fn dispatched(running: &Arc<RunningAccount>, url: &str, frame: Frame) -> bool {
    let Some(d) = frame.d else { return true };
    let event = frame.t.as_deref().unwrap_or_default();
    match event {
        "READY" => {
            let ready = serde_json::from_str::<Ready>(d.get()).unwrap_or_default();
            let user = ready.user.unwrap_or_default();
            let Some(bot_user_id) = user.id else {
                running.log("gateway-ready-without-user").await;
                return true;
            };
            {
                let mut state = running.discord.state();
                state.resume = ready.session_id.map(|session_id| Resumable {
                    session_id,
                    url: ready.resume_gateway_url.unwrap_or_else(|| url.to_string()),
                });
                state.application_id = ready.application.and_then(|a| a.id);
            }
            let identity = Identity {
                bot_user_id,
                name: user.username,
                bot_id: None,
                team_id: None,
            };
            running.discord.state().identity = Some(identity.clone());
            running.connected(identity);
            running.log("connected mode=gateway").await;
            pipeline::replay::<Discord>(running).await;
        }
        "RESUMED" => {
            let identity = running.discord.state().identity.clone();
            if let Some(identity) = identity {
                running.connected(identity);
            }
            running
                .log(&format!(
                    "resumed mode=gateway seq={}",
                    running.discord.seq().unwrap_or_default()
                ))
                .await;
            pipeline::replay::<Discord>(running).await;
        }
        "GUILD_CREATE" => {
            let guild = serde_json::from_str::<GuildCreate>(d.get()).unwrap_or_default();
            for mut channel in guild
                .channels
                .into_iter()
                .flatten()
                .chain(guild.threads.into_iter().flatten())
            {
                channel.guild_id = channel.guild_id.or_else(|| guild.id.clone());
                running.discord.remember(channel);
            }
        }
        "CHANNEL_CREATE" | "CHANNEL_UPDATE" | "THREAD_CREATE" | "THREAD_UPDATE" => {
            if let Ok(channel) = serde_json::from_str::<Channel>(d.get()) {
                running.discord.remember(channel);
            }
        }
        "MESSAGE_CREATE" => {
            let message = serde_json::from_str::<Message>(d.get()).unwrap_or_default();
            let channel = match (&message.guild_id, &message.channel_id) {
                (Some(_), Some(id)) => channel_info(running, id).await,
                _ => None,
            };
            let body = Stored {
                t: event,
                message: Some(&*d),
                interaction: None,
                channel: channel.as_ref(),
            };
            let event = Event {
                message: Some(message),
                interaction: None,
                channel: channel.clone(),
            };
            return take(running, event, &body).await != Took::NotRecorded;
        }
        "INTERACTION_CREATE" => {
            let interaction = serde_json::from_str::<Interaction>(d.get()).unwrap_or_default();
            if interaction.kind != Some(3) {
                return true;
            }
            let ours = running
                .spec
                .application_id
                .clone()
                .or_else(|| running.discord.state().application_id.clone());
            if let (Some(ours), Some(theirs)) = (&ours, &interaction.application_id)
                && ours != theirs
            {
                running
                    .log(&format!(
                        "ignored interaction={} why=application {theirs} is not applicationId {ours}",
                        interaction.id.as_deref().unwrap_or("-")
                    ))
                    .await;
                return true;
            }
            let ack = (interaction.id.clone(), interaction.token.clone());
            let body = Stored {
                t: event,
                message: None,
                interaction: Some(&*d),
                channel: None,
            };
            let event = Event {
                message: None,
                interaction: Some(interaction),
                channel: None,
            };
            let taken = take(running, event, &body).await;
            if taken == Took::Recorded
                && let (Some(id), Some(token)) = ack
            {
                // Taken: Discord is told at once (it waits 3 s), the message stays as it is;
                // the clicker's answer follows once the click is decided.
                let running = running.clone();
                tokio::spawn(async move {
                    let path = format!("/interactions/{id}/{token}/callback");
                    let sent = api(&running)
                        .call_patiently::<_, Ignored>(
                            Method::POST,
                            &path,
                            Body::Json(&Callback { kind: 6 }),
                        )
                        .await;
                    if let Err(e) = sent {
                        running
                            .log(&format!("click-ack-failed interaction={id} error={e}"))
                            .await;
                    }
                });
            }
            return taken != Took::NotRecorded;
        }
        "MESSAGE_UPDATE" | "MESSAGE_DELETE" | "MESSAGE_DELETE_BULK" => {
            let id = serde_json::from_str::<Message>(d.get())
                .ok()
                .and_then(|m| m.id)
                .unwrap_or_else(|| "-".into());
            running
                .log(&format!(
                    "ignored dispatch={event} message={id} why=edits and deletions are not handed in"
                ))
                .await;
        }
        _ => {}
    }
    true
}

/// What became of an event taken from the Gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Took {
    Recorded,
    /// It names no id: nothing to know a redelivery by (logged).
    Nameless,
    /// The inbox could not record it: the session is resumed from before it.
    NotRecorded,
}

/// Takes an event into the inbox and its lane.
async fn take(running: &Arc<RunningAccount>, event: Event, body: &Stored<'_>) -> Took {
    let body = serde_json::to_string(body).unwrap_or_default();
    match pipeline::take::<Discord>(running, event, &body).await {
        Ok(()) => Took::Recorded,
        Err(e) => {
            tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, error = %e, "a Discord event could not be taken");
            running.log(&format!("not-recorded error={e}")).await;
            match e {
                NotTaken::NoId(_) => Took::Nameless,
                NotTaken::NotRecorded(_) => Took::NotRecorded,
            }
        }
    }
}

/// A guild channel as the Gateway described it, else as `GET /channels/{id}` answers (kept).
async fn channel_info(running: &Arc<RunningAccount>, id: &str) -> Option<Channel> {
    if let Some(known) = running.discord.state().channels.get(id).cloned() {
        return Some(known);
    }
    match api(running)
        .get::<Channel>(&format!("/channels/{id}"))
        .await
    {
        Ok(channel) => {
            running.discord.remember(channel.clone());
            Some(channel)
        }
        Err(e) => {
            running
                .log(&format!("channel-unknown channel={id} error={e}"))
                .await;
            None
        }
    }
}

/// An event as the inbox keeps it: the dispatch's name, its payload as sent, and (a message's)
/// channel.
#[derive(Serialize)]
struct Stored<'a> {
    t: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interaction: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a Channel>,
}

/// An event as the pipeline reads it back.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct Event {
    #[serde(default, deserialize_with = "lenient")]
    pub message: Option<Message>,
    #[serde(default, deserialize_with = "lenient")]
    pub interaction: Option<Interaction>,
    #[serde(default, deserialize_with = "lenient")]
    pub channel: Option<Channel>,
}

/// Discord's part of the pipeline.
pub(crate) struct Discord;

impl Adapter for Discord {
    type Event = Event;
    type Mapped = Mapped;
    const WHAT: &'static str = "event";
    const NO_ID: &'static str = "the event has no message or interaction `id`";

    fn event_id(event: &Event) -> Option<String> {
        match (&event.message, &event.interaction) {
            (Some(m), _) => m.id.as_ref().map(|id| format!("message/{id}")),
            (None, Some(i)) => i.id.as_ref().map(|id| format!("interaction/{id}")),
            _ => None,
        }
    }

    fn map(event: &Event, identity: &Identity, spec: &AdapterSpec) -> Result<Mapped, &'static str> {
        let mut mapped = map(event, identity, &spec.channel, &spec.account)?;
        if let (Some(parent), Some(_)) = (&mapped.parent, &mapped.thread)
            && spec.discussion_for(parent).is_some()
        {
            // A discussed thread waits in its parent's lane: its rounds count in the order they
            // happened, and nothing overtakes the message that started it.
            mapped.lane = parent.clone();
        }
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

    fn click(event: &Event) -> Option<Click> {
        click(event.interaction.as_ref()?)
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
        reply(running, mapped, text, taken)
    }
}

/// A message as an envelope, and where its reply goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mapped {
    pub lane: String,
    pub envelope: Envelope,
    /// The channel the message was said in (a thread's own), where the reply goes.
    pub channel_id: String,
    pub message_id: String,
    /// A thread's id (its channel's) and its parent channel.
    pub thread: Option<String>,
    pub parent: Option<String>,
    pub guild_id: Option<String>,
    pub is_bot: bool,
}

/// Maps a MESSAGE_CREATE (adapters.md, "MESSAGE_CREATE → envelope"), or says why it is not a
/// message to hand in.
pub(crate) fn map(
    event: &Event,
    _identity: &Identity,
    channel: &str,
    account: &str,
) -> Result<Mapped, &'static str> {
    let message = event
        .message
        .as_ref()
        .ok_or("not a message (edits, deletions and reactions are not handed in)")?;
    if !matches!(message.kind, None | Some(0) | Some(19)) {
        return Err("not a message a person wrote (a join, a pin, a thread's start…)");
    }
    let message_id = message.id.clone().ok_or("the message has no id")?;
    let channel_id = message
        .channel_id
        .clone()
        .ok_or("the message names no channel")?;
    let text = message
        .content
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or("the message has no text (an attachment alone, or no Message Content intent)")?;
    let author = message.author.clone().unwrap_or_default();
    let member = message.member.clone().unwrap_or_default();
    let thread_of = event
        .channel
        .as_ref()
        .filter(|c| c.is_thread())
        .and_then(|c| c.parent_id.clone());
    let (peer, thread, parent) = match (&message.guild_id, thread_of) {
        (None, _) => (
            Peer {
                kind: "direct",
                id: author
                    .id
                    .clone()
                    .ok_or("the direct message has no author")?,
            },
            None,
            None,
        ),
        (Some(_), Some(parent)) => (
            Peer {
                kind: "channel",
                id: channel_id.clone(),
            },
            Some(channel_id.clone()),
            Some(parent),
        ),
        (Some(_), None) => (
            Peer {
                kind: "channel",
                id: channel_id.clone(),
            },
            None,
            None,
        ),
    };
    let is_bot = author.bot == Some(true) || message.webhook_id.is_some();
    let name = member
        .nick
        .clone()
        .or_else(|| author.global_name.clone())
        .or_else(|| author.username.clone())
        .filter(|n| !n.is_empty());
    let mut mentions: Vec<String> = Vec::new();
    let native = message
        .mentions
        .iter()
        .flatten()
        .filter_map(|u| u.id.clone());
    for id in native.chain(text_mentions(text)) {
        if !mentions.contains(&id) {
            mentions.push(id);
        }
    }
    let reply_to = message
        .referenced_message
        .as_ref()
        .and_then(|m| m.author.as_ref())
        .and_then(|a| a.id.clone());
    let envelope = Envelope {
        channel: channel.to_string(),
        account_id: account.to_string(),
        peer,
        message_id: message_id.clone(),
        sender: Sender {
            is_bot,
            id: author.id.clone(),
            name,
        },
        text: text.to_string(),
        mentions,
        team_id: None,
        thread_id: thread.clone(),
        reply_to_sender_id: reply_to,
        guild_id: message.guild_id.clone(),
        member_role_ids: member.roles.unwrap_or_default(),
        parent_peer: parent.clone().map(|id| Peer {
            kind: "channel",
            id,
        }),
    };
    Ok(Mapped {
        lane: channel_id.clone(),
        envelope,
        channel_id,
        message_id,
        thread,
        parent,
        guild_id: message.guild_id.clone(),
        is_bot,
    })
}

/// A click on one of deepcli's buttons (`custom_id` `deepcli:<choice>:<id>`), as a click.
pub(crate) fn click(interaction: &Interaction) -> Option<Click> {
    let custom = interaction.data.as_ref()?.custom_id.as_deref()?;
    let (word, id) = custom.strip_prefix("deepcli:")?.split_once(':')?;
    let clicker = interaction
        .member
        .as_ref()
        .and_then(|m| m.user.as_ref())
        .or(interaction.user.as_ref())?
        .id
        .clone()?;
    let channel = interaction.channel_id.clone().unwrap_or_else(|| "-".into());
    Some(Click {
        user_id: clicker,
        approval_id: id.to_string(),
        choice: Choice::parse(word)?,
        // Not the chat's lane: the turn that asked waits there for this very click.
        lane: format!("click/{channel}"),
        answer_to: interaction.token.clone()?,
        thread: None,
    })
}

/// Answers a click for the clicker alone: a follow-up message with the ephemeral flag, through
/// the application's webhook (`applicationId`, else READY's).
async fn answer_click(
    running: &Arc<RunningAccount>,
    click: &Click,
    text: &str,
) -> Result<(), String> {
    let application = running
        .spec
        .application_id
        .clone()
        .or_else(|| running.discord.state().application_id.clone())
        .ok_or("no applicationId, and READY named none")?;
    let content = outbound::split(text, TEXT_LIMIT, outbound::utf16, 1)
        .into_iter()
        .next()
        .unwrap_or_default();
    let body = Followup {
        content: &content,
        flags: 64,
    };
    api(running)
        .call_patiently::<_, Ignored>(
            Method::POST,
            &format!("/webhooks/{application}/{}", click.answer_to),
            Body::Json(&body),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Whether a message reaches the agent: held back in a discussed thread that is paused or
/// closed ([`discussion::admitted`]).
async fn admitted(running: &Arc<RunningAccount>, mapped: &Mapped) -> bool {
    let Some(d) = thread_discussion(running, mapped) else {
        return true;
    };
    let heard = discussion::Heard {
        message_id: &mapped.message_id,
        sender_id: mapped.envelope.sender.id.as_deref(),
        is_bot: mapped.is_bot,
        text: &mapped.envelope.text,
    };
    discussion::admitted(running, &d, &heard).await
}

/// The discussion of the thread a message is in, if its parent channel has one.
fn thread_discussion(running: &RunningAccount, mapped: &Mapped) -> Option<discussion::Discussed> {
    discussion::of(
        running,
        mapped.guild_id.as_deref().unwrap_or_default(),
        mapped.parent.as_deref()?,
        mapped.thread.as_deref()?,
    )
}

fn classify(e: &ApiError) -> Failure {
    match e {
        ApiError::RateLimited(wait) => Failure::RateLimited(*wait),
        ApiError::Transport(_) | ApiError::Unreachable(_) => Failure::Transport,
        _ => Failure::Final,
    }
}

/// One `POST /channels/{id}/messages`, rate limits honoured; the message's id, or the attempts
/// made and the error.
async fn post(
    running: &RunningAccount,
    channel_id: &str,
    body: &CreateMessage<'_>,
) -> Result<Option<String>, (u32, String)> {
    let path = format!("/channels/{channel_id}/messages");
    let send = || async {
        api(running)
            .call::<_, Posted>(Method::POST, &path, Body::Json(body))
            .await
            .map(|posted| posted.id)
    };
    outbound::send_piece(running, "POST /channels/{id}/messages", send, classify).await
}

fn message<'a>(content: &'a str, reply_to: Option<&str>) -> CreateMessage<'a> {
    CreateMessage {
        content,
        message_reference: reply_to.map(|id| MessageReference {
            message_id: id.to_string(),
            fail_if_not_exists: false,
        }),
        components: None,
        allowed_mentions: AllowedMentions::USERS,
    }
}

/// What a dead letter keeps of a message.
fn kept(channel_id: &str, content: &str) -> String {
    #[derive(Serialize)]
    struct Kept<'a> {
        channel_id: &'a str,
        content: &'a str,
    }
    serde_json::to_string(&Kept {
        channel_id,
        content,
    })
    .unwrap_or_default()
}

/// Posts the reply to a message in its channel (a thread's own), the first piece referencing
/// it; one round of the thread's discussion when it has one.
async fn reply(running: &Arc<RunningAccount>, mapped: &Mapped, text: &str, taken: &Taken) {
    let round = match thread_discussion(running, mapped) {
        None => None,
        Some(d) => match discussion::reserve_round(running, &d, text, &mapped.message_id).await {
            Some(reached) => Some((d, reached)),
            None => return,
        },
    };
    if post_reply(running, mapped, text, taken).await
        && let Some((d, reached)) = round
        && let Some(notice) = discussion::after_round(running, &d, text, reached).await
        && let Err((_, error)) = post(running, &d.key.thread_id, &message(&notice, None)).await
    {
        running
            .log(&format!(
                "notice-failed thread={} error={error}",
                d.key.thread_id
            ))
            .await;
    }
}

/// Posts a reply in pieces; whether all of it was posted (else the rest is a dead letter).
async fn post_reply(
    running: &Arc<RunningAccount>,
    mapped: &Mapped,
    text: &str,
    taken: &Taken,
) -> bool {
    let pieces = outbound::split(
        text,
        TEXT_LIMIT,
        outbound::utf16,
        running.spec.max_reply_messages,
    );
    // A replay posts only what the platform had not taken.
    for (i, piece) in pieces.iter().enumerate().skip(taken.posted) {
        let reference = (i == 0).then_some(mapped.message_id.as_str());
        match post(running, &mapped.channel_id, &message(piece, reference)).await {
            Ok(_) => {
                running.posted(1);
                running.posted_pieces(taken, i + 1).await;
            }
            Err((attempts, error)) => {
                running.dead_lettered(&error);
                let key = DeliveryKey {
                    channel: running.spec.channel.clone(),
                    account_id: running.spec.account.clone(),
                    peer_kind: mapped.envelope.peer.kind.to_string(),
                    peer_id: mapped.envelope.peer.id.clone(),
                    thread_id: mapped.thread.clone().unwrap_or_default(),
                    message_id: mapped.message_id.clone(),
                };
                outbound::dead_letter(
                    &running.cx.access,
                    key,
                    "discord:POST /channels/{id}/messages".into(),
                    kept(&mapped.channel_id, &pieces[i..].join("\n")),
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

/// The channel a conversation's messages go to: its thread, its channel, or (a direct
/// conversation, named by the user) the DM channel with the user, opened once.
async fn target(running: &RunningAccount, to: &Conversation) -> Result<String, String> {
    if !to.thread_id.is_empty() {
        return Ok(to.thread_id.clone());
    }
    if to.peer_kind != "direct" {
        return Ok(to.peer_id.clone());
    }
    if let Some(dm) = running.discord.state().dms.get(&to.peer_id).cloned() {
        return Ok(dm);
    }
    let opened: Channel = api(running)
        .call_patiently(
            Method::POST,
            "/users/@me/channels",
            Body::Json(&OpenDm {
                recipient_id: &to.peer_id,
            }),
        )
        .await
        .map_err(|e| format!("cannot open the DM channel with {}: {e}", to.peer_id))?;
    let id = opened
        .id
        .ok_or("POST /users/@me/channels answered without the channel's id")?;
    running
        .discord
        .state()
        .dms
        .insert(to.peer_id.clone(), id.clone());
    Ok(id)
}

/// An approval's or a task verdict's buttons: one row, a button per choice whose `custom_id`
/// is `deepcli:<choice>:<id>` (at most 100 characters); none when the id would not fit.
fn buttons(choices: &[Choice], id: &str) -> Option<Vec<ActionRow>> {
    let components: Vec<Button> = choices
        .iter()
        .map(|&choice| Button {
            kind: 2,
            style: match choice {
                Choice::Once | Choice::Accept => 1,
                Choice::Deny | Choice::Reject => 4,
                Choice::Always => 2,
            },
            label: choice.label().to_string(),
            custom_id: format!("deepcli:{}:{id}", choice.word()),
        })
        .collect();
    components
        .iter()
        .all(|b| b.custom_id.chars().count() <= 100)
        .then(|| {
            vec![ActionRow {
                kind: 1,
                components,
            }]
        })
}

/// Posts an outbox row (`carry`): to its thread, channel or DM, the first piece referencing the
/// message it is about, an approval's buttons on the last; in pieces, from the first the
/// platform has not taken. An approval's outcome edits the prompt's message instead (its
/// buttons gone), when it was posted here. The posted message's id.
pub(super) async fn carry(
    running: &Arc<RunningAccount>,
    queued: &Queued,
) -> Result<Option<String>, Failed> {
    const TARGET: &str = "discord:POST /channels/{id}/messages";
    let said = &queued.said;
    let channel_id = match target(running, &said.to).await {
        Ok(id) => id,
        Err(error) => {
            return Err(Failed {
                target: TARGET.into(),
                body: kept("", &said.text),
                attempts: 1,
                error,
            });
        }
    };
    if matches!(
        said.cause,
        Cause::ApprovalOutcome | Cause::TaskVerdictOutcome
    ) && let Some(prompt) = running.posted_prompt(&said.cause_id, "discord").await
    {
        let text = format!("{}\n\n{}", prompt.text, said.text);
        let content = outbound::split(&text, TEXT_LIMIT, outbound::utf16, 1)
            .into_iter()
            .next()
            .unwrap_or_default();
        let path = format!("/channels/{channel_id}/messages/{}", prompt.posted_id);
        let body = EditMessage {
            content: &content,
            components: [],
        };
        let edit = || async {
            api(running)
                .call::<_, Ignored>(Method::PATCH, &path, Body::Json(&body))
                .await
        };
        // A message that cannot be edited (deleted) gets the outcome as a new one.
        if outbound::send_piece(
            running,
            "PATCH /channels/{id}/messages/{id}",
            edit,
            classify,
        )
        .await
        .is_ok()
        {
            return Ok(Some(prompt.posted_id));
        }
    }
    let pieces = outbound::split(
        &said.text,
        TEXT_LIMIT,
        outbound::utf16,
        running.spec.max_reply_messages,
    );
    let last = pieces.len().saturating_sub(1);
    let mut posted_id = None;
    for (i, piece) in pieces.iter().enumerate().skip(queued.pieces) {
        let mut body = message(piece, said.reply_to.as_deref().filter(|_| i == 0));
        body.components = Choice::buttons(said.cause, &said.cause_id)
            .filter(|_| i == last)
            .and_then(|(choices, id)| buttons(choices, id));
        match post(running, &channel_id, &body).await {
            Ok(id) => posted_id = id,
            Err((attempts, error)) => {
                return Err(Failed {
                    target: TARGET.into(),
                    body: kept(&channel_id, &pieces[i..].join("\n")),
                    attempts,
                    error,
                });
            }
        }
        running.outbox_progress(queued.seq, i + 1).await;
    }
    Ok(posted_id)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn event(value: Value) -> Event {
        serde_json::from_value(value).unwrap()
    }

    fn envelope(m: &Mapped) -> Value {
        serde_json::to_value(&m.envelope).unwrap()
    }

    fn bot() -> Identity {
        Identity {
            bot_user_id: "900".into(),
            name: Some("deep".into()),
            ..Identity::default()
        }
    }

    #[test]
    fn a_guild_message_names_its_guild_roles_mentions_and_the_author_it_answers() {
        let e = event(
            json!({"message": {"id": "11", "channel_id": "20", "guild_id": "1", "type": 19,
            "author": {"id": "7", "username": "ada", "global_name": "Ada L"},
            "member": {"roles": ["50", "51"], "nick": "ada-in-guild"},
            "content": "<@900> hi <@!901>", "mentions": [{"id": "900"}],
            "referenced_message": {"id": "3", "author": {"id": "900", "bot": true}}},
            "channel": {"id": "20", "type": 0, "guild_id": "1"}}),
        );
        let m = map(&e, &bot(), "discord", "a").unwrap();
        assert_eq!(
            envelope(&m),
            json!({"channel": "discord", "accountId": "a", "peer": {"kind": "channel", "id": "20"},
                "messageId": "11", "sender": {"isBot": false, "id": "7", "name": "ada-in-guild"},
                "text": "<@900> hi <@!901>", "mentions": ["900", "901"], "replyToSenderId": "900",
                "guildId": "1", "memberRoleIds": ["50", "51"]})
        );
        assert_eq!((m.lane.as_str(), m.channel_id.as_str()), ("20", "20"));
    }

    #[test]
    fn a_thread_is_a_thread_of_its_parent_and_a_dm_is_its_author() {
        let thread = event(
            json!({"message": {"id": "12", "channel_id": "30", "guild_id": "1",
            "author": {"id": "7", "bot": true}, "content": "x"},
            "channel": {"id": "30", "type": 11, "parent_id": "20"}}),
        );
        let e = envelope(&map(&thread, &bot(), "discord", "a").unwrap());
        assert_eq!(e["peer"], json!({"kind": "channel", "id": "30"}));
        assert_eq!(e["threadId"], "30");
        assert_eq!(e["parentPeer"], json!({"kind": "channel", "id": "20"}));
        assert_eq!(e["sender"]["isBot"], true);
        let dm = event(
            json!({"message": {"id": "13", "channel_id": "99", "author": {"id": "7"}, "content": "hi"}}),
        );
        let m = map(&dm, &bot(), "discord", "a").unwrap();
        assert_eq!(envelope(&m)["peer"], json!({"kind": "direct", "id": "7"}));
        assert!(envelope(&m).get("guildId").is_none());
        assert_eq!(m.channel_id, "99", "the reply goes to the DM channel");
        for (odd, why) in [
            (json!({"interaction": {"id": "1"}}), "not a message"),
            (
                json!({"message": {"id": "1", "channel_id": "2", "type": 7, "content": "x"}}),
                "not a message a person wrote",
            ),
            (
                json!({"message": {"id": "1", "channel_id": "2", "content": ""}}),
                "the message has no text",
            ),
        ] {
            assert!(
                map(&event(odd), &bot(), "discord", "a")
                    .unwrap_err()
                    .starts_with(why)
            );
        }
    }

    #[test]
    fn a_button_reads_back_as_the_click_it_is() {
        let rows = buttons(&Choice::ALL, "ap-1").unwrap();
        let ids: Vec<&str> = rows[0]
            .components
            .iter()
            .map(|b| b.custom_id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "deepcli:approve:ap-1",
                "deepcli:always:ap-1",
                "deepcli:deny:ap-1"
            ]
        );
        let i: Interaction = serde_json::from_value(json!({"id": "5", "type": 3, "token": "tok",
            "channel_id": "20", "data": {"custom_id": "deepcli:deny:ap-1"},
            "member": {"user": {"id": "7"}}}))
        .unwrap();
        let c = click(&i).unwrap();
        assert_eq!(
            (
                c.user_id.as_str(),
                c.approval_id.as_str(),
                c.choice,
                c.answer_to.as_str()
            ),
            ("7", "ap-1", Choice::Deny, "tok")
        );
        assert!(buttons(&Choice::ALL, &"x".repeat(100)).is_none());
    }
}
