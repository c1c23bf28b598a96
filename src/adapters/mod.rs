//! The platform adapters (adapters.md): the controller's own connections to Slack, Telegram
//! and Discord, one per enabled account. An adapter only translates: a platform event becomes an
//! [`Envelope`] handed to the Access door ([`hand_in`]: the same routing, policy, idempotency
//! and delivery as `POST /v1/inbound`), and the reply in its [`DoorAnswer`] goes back through the
//! platform's API. It never routes, gates or opens sessions itself. The platform clients and
//! payloads are [`crate::platform`]'s; here are the connections, the inbox, the lanes and the
//! one pipeline every platform's events go through ([`Adapter`]).
//!
//! * [`Adapters::converge`] runs exactly the accounts the applied config asks for, after every
//!   apply (like the runtimes): new ones start, removed or disabled ones stop, one whose
//!   settings or resolved credentials changed starts again. A connection that fails starts
//!   again after a backoff (1 s doubling to 60 s, from the start after a minute connected).
//! * An event is taken into the inbox (state database) before it is acknowledged or its
//!   Telegram offset confirmed, and leaves it once handled to the end: a restart hands in
//!   what was left, and the Access records answer what was delivered already as a duplicate.
//! * Events of one conversation are handled in order ([`lanes`]), conversations side by side.

mod carry;
pub(crate) mod discord;
mod discussion;
mod lanes;
pub(crate) mod outbound;
mod pipeline;
pub(crate) mod slack;
pub(crate) mod store;
/// The adapters' store on each state backend, for `benches/state_backends.rs`.
#[cfg(feature = "bench-tools")]
pub mod store_bench;
pub(crate) mod telegram;
pub(crate) mod web;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use serde::{Deserialize, Serialize};

use crate::access::{Access, AccessError, Delivered, Delivery};
use crate::config::model::AdapterMode;
use crate::ids::AccountKey;
pub(crate) use crate::platform::{AdapterSpec, Identity, Platform, specs};
use store::AdapterStore;

/// `connected | connecting | auth_failed | disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ConnectionState {
    Connecting,
    Connected,
    AuthFailed,
    Disabled,
}

impl ConnectionState {
    /// The state as `/v1/status` and `/metrics` name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Connecting => "connecting",
            ConnectionState::Connected => "connected",
            ConnectionState::AuthFailed => "auth_failed",
            ConnectionState::Disabled => "disabled",
        }
    }
}

/// One account's adapter, live: what `deepcli status`, `/v1/status`, `channels status` and
/// `/metrics` show; `deepcli status` reads it back from `/v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdapterLive {
    pub platform: Platform,
    pub mode: AdapterMode,
    pub state: ConnectionState,
    pub identity: Option<Identity>,
    /// When the current state began.
    pub since: String,
    pub last_event_at: Option<String>,
    pub last_error: Option<String>,
    /// Connections made (a reconnect counts).
    pub connects: u64,
    /// Events taken from the platform (redeliveries included).
    pub events: u64,
    /// Replies posted (pieces of a long one each count).
    pub posted: u64,
    /// Replies kept as dead letters.
    pub dead_letters: u64,
}

/// One platform thread's seed-001 discussion, as `sessions show` tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadDiscussion {
    pub thread_id: String,
    /// The bots' rounds in the thread so far.
    pub rounds: u32,
    /// `open`, `limit` or `closed`.
    pub state: &'static str,
    /// Whether deepcli posted its notice in the thread.
    pub notice_sent: bool,
}

/// The seed-001 discussions in the conversation `session_key` names, for `sessions show`:
/// each thread's bot rounds and state (only the session's own thread when the key names one).
/// Empty when the key names no platform conversation or nothing was discussed in it.
pub(crate) fn discussions(cx: &AdapterCx, session_key: &str) -> Vec<ThreadDiscussion> {
    // agent:<agent>:<channel>:<kind>:<conversation>[:thread:<thread id>]
    let parts: Vec<&str> = session_key.splitn(7, ':').collect();
    let (channel, conversation) = match parts.as_slice() {
        ["agent", _, channel, _, conversation, ..] => (*channel, *conversation),
        _ => return Vec::new(),
    };
    let thread = match parts.as_slice() {
        [.., "thread", thread] if parts.len() == 7 => Some(*thread),
        _ => None,
    };
    let threads = match cx.store.threads_of(channel, conversation) {
        Ok(threads) => threads,
        Err(e) => {
            tracing::warn!(error = %e, "sessions show: the discussions could not be read");
            return Vec::new();
        }
    };
    threads
        .into_iter()
        .filter(|(id, _)| thread.is_none_or(|t| t.eq_ignore_ascii_case(id)))
        .map(|(id, t)| ThreadDiscussion {
            thread_id: id,
            rounds: t.rounds,
            state: t.state.as_str(),
            notice_sent: t.notice_sent,
        })
        .collect()
}

/// Every account's live adapter status, by (channel, account).
pub(crate) type LiveMap = Arc<RwLock<BTreeMap<AccountKey, AdapterLive>>>;

/// What every connection shares.
pub(crate) struct AdapterCx {
    pub access: Arc<Access>,
    pub store: Arc<AdapterStore>,
    pub http: reqwest::Client,
    pub live: LiveMap,
    pub timings: Timings,
    /// Every running account, by (channel, account): the outbox's carriers.
    accounts: RwLock<HashMap<AccountKey, Arc<RunningAccount>>>,
    /// The accounts whose events arrive over the controller's listener (Slack http, Telegram
    /// webhook), by (channel, account).
    pub endpoints: RwLock<HashMap<AccountKey, Arc<RunningAccount>>>,
    /// Stall detection: per discussed thread, the last bot reply and how many
    /// replies in a row repeated it.
    stalls: Mutex<HashMap<store::ThreadKey, (String, u32)>>,
    /// One lane per conversation, kept across reconnects and restarts of a connection.
    lanes: lanes::Lanes,
    /// The events dispatched and not finished, by (channel, account, event id): a replay of
    /// the inbox after a reconnect skips them (they are in a lane already).
    in_hand: Mutex<std::collections::HashSet<(String, String, String)>>,
}

impl AdapterCx {
    /// Claims an event for handling: false when it is in hand already.
    fn claim(&self, spec: &AdapterSpec, event_id: &str) -> bool {
        let mut in_hand = match self.in_hand.lock() {
            Ok(h) => h,
            Err(p) => p.into_inner(),
        };
        in_hand.insert((
            spec.channel.clone(),
            spec.account.clone(),
            event_id.to_string(),
        ))
    }

    fn release(&self, spec: &AdapterSpec, event_id: &str) {
        let mut in_hand = match self.in_hand.lock() {
            Ok(h) => h,
            Err(p) => p.into_inner(),
        };
        in_hand.remove(&(
            spec.channel.clone(),
            spec.account.clone(),
            event_id.to_string(),
        ));
    }

    /// Runs `job` in the lane of `spec`'s conversation `lane`, then lets the event go: out of
    /// the inbox, out of hand.
    fn run_in_lane(
        self: &Arc<Self>,
        spec: &AdapterSpec,
        lane: &str,
        event_id: String,
        job: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let cx = self.clone();
        let spec = spec.clone();
        let key = format!("{}/{}/{lane}", spec.channel, spec.account);
        self.lanes.run(key, async move {
            job.await;
            let (store, c, a, id) = (
                cx.store.clone(),
                spec.channel.clone(),
                spec.account.clone(),
                event_id.clone(),
            );
            let _ = tokio::task::spawn_blocking(move || store.done(&c, &a, &id)).await;
            cx.release(&spec, &event_id);
        });
    }
}

/// A click on one of deepcli's approval buttons (conversations.md, "Approvals in the chat,
/// with buttons"): decided as the clicker's `/approve` or `/deny` would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Click {
    /// The clicker's platform user id (`U…`, a Telegram user id).
    pub user_id: String,
    pub approval_id: String,
    pub choice: Choice,
    /// The lane of the chat the button is in.
    pub lane: String,
    /// Where the answer for the clicker alone goes: Telegram's callback query id, Slack's
    /// channel (a message only the clicker sees).
    pub answer_to: String,
    /// The thread the button is in (Slack), if any.
    pub thread: Option<String>,
}

/// Which button was clicked: an approval's, or a task's (its id in the click's `approval_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    Once,
    Always,
    Deny,
    /// A task's result accepted.
    Accept,
    /// A task's result to reject: a reason is needed, so the clicker is told how to give it.
    Reject,
}

impl Choice {
    /// An approval prompt's buttons.
    pub(crate) const ALL: [Choice; 3] = [Choice::Once, Choice::Always, Choice::Deny];
    /// A task verdict's buttons.
    pub(crate) const TASK: [Choice; 2] = [Choice::Accept, Choice::Reject];

    /// The word a button carries (Telegram's `callback_data`, Slack's `action_id`).
    pub(crate) fn word(self) -> &'static str {
        match self {
            Choice::Once => "approve",
            Choice::Always => "always",
            Choice::Deny => "deny",
            Choice::Accept => "accept",
            Choice::Reject => "reject",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Choice::Once => "Approve once",
            Choice::Always => "Always",
            Choice::Deny => "Deny",
            Choice::Accept => "Accept",
            Choice::Reject => "Reject",
        }
    }

    pub(crate) fn parse(word: &str) -> Option<Choice> {
        Choice::ALL
            .into_iter()
            .chain(Choice::TASK)
            .find(|c| c.word() == word)
    }

    /// The buttons a message of `cause` carries, and the id they carry: an approval prompt's
    /// (its id), a task verdict's (the task's, its cause id being `<task>@<uuid>`).
    pub(crate) fn buttons(
        cause: crate::access::outbox::Cause,
        cause_id: &str,
    ) -> Option<(&'static [Choice], &str)> {
        use crate::access::outbox::Cause;
        match cause {
            Cause::Approval => Some((&Choice::ALL, cause_id)),
            Cause::TaskVerdict => Some((&Choice::TASK, cause_id.split('@').next()?)),
            _ => None,
        }
    }
}

/// What a clicker who is no approver is told, privately.
pub(crate) const NOT_AN_APPROVER_CLICK: &str =
    "You are not an approver of this request (permissions.approvers): nothing was decided.";

/// An event as its lane handles it.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// Its id in the inbox.
    pub event_id: String,
    /// Handed in again from the inbox after a restart or reconnect.
    pub replayed: bool,
    /// How many pieces of its reply were posted before (a replayed event's).
    pub posted: usize,
}

impl Taken {
    /// An event taken now from the platform.
    pub(crate) fn fresh(event_id: String) -> Taken {
        Taken {
            event_id,
            replayed: false,
            posted: 0,
        }
    }
}

/// One running account: its spec, identity and lanes.
pub(crate) struct RunningAccount {
    pub spec: AdapterSpec,
    pub cx: Arc<AdapterCx>,
    identity: RwLock<Option<Identity>>,
    /// Discord: what the account keeps across its Gateway connections (the session to resume,
    /// the channels seen, the rate limits).
    discord: discord::Session,
}

impl RunningAccount {
    pub(crate) fn identity(&self) -> Option<Identity> {
        self.identity.read().ok().and_then(|i| i.clone())
    }

    fn update(&self, f: impl FnOnce(&mut AdapterLive)) {
        if let Ok(mut live) = self.cx.live.write()
            && let Some(entry) = live.get_mut(&self.spec.key())
        {
            f(entry);
        }
    }

    /// The connection's state now, as the live map has it.
    fn state(&self) -> Option<ConnectionState> {
        let live = self.cx.live.read().ok()?;
        live.get(&self.spec.key()).map(|l| l.state)
    }

    fn set_state(&self, state: ConnectionState, error: Option<String>) {
        self.update(|l| {
            if l.state != state {
                l.state = state;
                l.since = crate::clock::now();
            }
            if state == ConnectionState::Connected {
                l.connects += 1;
            }
            if error.is_some() {
                l.last_error = error;
            }
        });
    }

    fn connected(&self, identity: Identity) {
        self.cx.access.set_live_bot(
            &self.spec.channel,
            &self.spec.account,
            Some(&identity.bot_user_id),
        );
        if let Ok(mut mine) = self.identity.write() {
            *mine = Some(identity.clone());
        }
        let (store, ch, acc, id) = (
            self.cx.store.clone(),
            self.spec.channel.clone(),
            self.spec.account.clone(),
            identity.clone(),
        );
        tokio::task::spawn_blocking(move || {
            if let Err(e) = store.accounts().record_identity(&ch, &acc, &id) {
                tracing::warn!(error = %e, "cannot record the bot identity");
            }
        });
        self.update(|l| l.identity = Some(identity));
        self.set_state(ConnectionState::Connected, None);
    }

    /// The first `pieces` pieces of event `taken`'s reply were posted: a replay after a crash
    /// posts only the rest.
    pub(crate) async fn posted_pieces(&self, taken: &Taken, pieces: usize) {
        let (store, c, a, id) = (
            self.cx.store.clone(),
            self.spec.channel.clone(),
            self.spec.account.clone(),
            taken.event_id.clone(),
        );
        let _ = tokio::task::spawn_blocking(move || store.set_posted(&c, &a, &id, pieces)).await;
    }

    /// What an earlier run took into the inbox and did not finish, oldest first: each with
    /// its body as taken.
    async fn pending(&self) -> Vec<(Taken, String)> {
        let (store, c, a) = (
            self.cx.store.clone(),
            self.spec.channel.clone(),
            self.spec.account.clone(),
        );
        let pending = tokio::task::spawn_blocking(move || store.pending(&c, &a))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        pending
            .into_iter()
            .map(|p| {
                (
                    Taken {
                        event_id: p.event_id,
                        replayed: true,
                        posted: p.posted,
                    },
                    p.body,
                )
            })
            .collect()
    }

    /// Records one event (`what` `id`, e.g. `event` or `update`) in the inbox: whether it is
    /// new. A redelivery of one taken before is counted and logged.
    async fn take_one(&self, what: &str, id: &str, body: &str) -> Result<bool, String> {
        let (store, c, a, events) = (
            self.cx.store.clone(),
            self.spec.channel.clone(),
            self.spec.account.clone(),
            vec![(id.to_string(), body.to_string())],
        );
        let fresh = tokio::task::spawn_blocking(move || store.take(&c, &a, &events, None))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let fresh = fresh.first() == Some(&true);
        if !fresh {
            self.event_taken();
            self.log(&format!("redelivery {what}={id} (taken before)"))
                .await;
        }
        Ok(fresh)
    }

    fn event_taken(&self) {
        self.update(|l| {
            l.events += 1;
            l.last_event_at = Some(crate::clock::now());
        });
    }

    fn posted(&self, pieces: u64) {
        self.update(|l| l.posted += pieces);
    }

    fn dead_lettered(&self, error: &str) {
        let error = error.to_string();
        self.update(|l| {
            l.dead_letters += 1;
            l.last_error = Some(error);
        });
    }

    /// Logs a line about this account on its channel's log.
    async fn log(&self, line: &str) {
        self.cx
            .access
            .log_call(
                Some(&self.spec.channel),
                &format!("adapter account={} {line}", self.spec.account),
            )
            .await;
    }
}

/// An envelope as an adapter hands it in: the fields of `POST /v1/inbound` it fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Envelope {
    pub channel: String,
    pub account_id: String,
    pub peer: Peer,
    pub message_id: String,
    pub sender: Sender,
    pub text: String,
    pub mentions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to_sender_id: Option<String>,
    /// Discord: the guild, the sender's roles in it, and a thread's parent channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub member_role_ids: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_peer: Option<Peer>,
}

/// Where a message was said: `direct`, `group` or `channel`, and the conversation's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Peer {
    pub kind: &'static str,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Sender {
    pub is_bot: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// What the Access door answered an envelope, read once ([`DoorAnswer::read`]).
#[derive(Debug, Clone)]
pub(crate) enum DoorAnswer {
    /// Delivered, and the agent replied.
    Answered { text: String },
    /// Answered before (a redelivery): the reply given then, if there was one.
    Duplicate { text: Option<String> },
    /// Held by a policy gate; some gates answer (a pairing code).
    Gated { text: Option<String> },
    /// Taken without a reply to post (delivered with none, or not delivered).
    NotDelivered,
    /// Refused for now (no plan yet, a full queue, a runtime starting): worth another try.
    Transient(AccessError),
    /// Refused for good.
    Refused(AccessError),
}

impl DoorAnswer {
    /// Reads the door's answer: taken or refused (for now or for good), and what came of it.
    /// The one place an adapter looks at it.
    pub(crate) fn read(answer: Result<Delivered, AccessError>) -> DoorAnswer {
        let delivered = match answer {
            Ok(delivered) => delivered,
            Err(e) if e.is_transient() => return DoorAnswer::Transient(e),
            Err(e) => return DoorAnswer::Refused(e),
        };
        if delivered.duplicate {
            return DoorAnswer::Duplicate {
                text: delivered.reply().map(str::to_string),
            };
        }
        match delivered.delivery {
            Delivery::Gated { reply, .. } => DoorAnswer::Gated { text: reply },
            Delivery::Answered { text } => DoorAnswer::Answered { text },
            Delivery::NotDelivered => DoorAnswer::NotDelivered,
        }
    }

    /// The reply to post: a redelivery's only when it was taken again from the inbox (the
    /// platform never saw it posted).
    pub(crate) fn reply(self, replayed: bool) -> Option<String> {
        match self {
            DoorAnswer::Answered { text } => Some(text),
            DoorAnswer::Gated { text } => text,
            DoorAnswer::Duplicate { text } if replayed => text,
            _ => None,
        }
    }
}

/// Hands in an envelope the Access layer cannot take now (a runtime starting, a full queue)
/// again after 1 s, doubling to 16 s: 7 attempts, about a minute in all.
fn hand_in_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(16))
        .with_factor(2.0)
        .with_max_times(HAND_IN_ATTEMPTS as usize - 1)
}

/// Attempts to hand in one envelope.
const HAND_IN_ATTEMPTS: u32 = 7;

/// Hands `envelope` to the Access door (`HandedInBy::Adapter`) and reads its answer; a transient
/// refusal is tried again ([`hand_in_backoff`]). A refusal is logged on the channel by the
/// door.
pub(crate) async fn hand_in(running: &RunningAccount, envelope: &Envelope) -> DoorAnswer {
    use backon::Retryable;
    let bytes = match serde_json::to_vec(envelope) {
        Ok(bytes) => bytes,
        Err(e) => return DoorAnswer::Refused(AccessError::Internal(e.to_string())),
    };
    let attempt = || async {
        match DoorAnswer::read(crate::access::http::hand_in(&running.cx.access, &bytes).await) {
            transient @ DoorAnswer::Transient(_) => Err(transient),
            answer => Ok(answer),
        }
    };
    let answer = attempt
        .retry(hand_in_backoff())
        .sleep(tokio::time::sleep)
        .await
        .unwrap_or_else(|last| last);
    if let DoorAnswer::Transient(error) | DoorAnswer::Refused(error) = &answer {
        tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, error = %error, "the Access layer refused an adapter's envelope");
    }
    answer
}

/// Why a connection ended.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The platform refused the credentials.
    Auth(String),
    /// Anything else: tried again after the backoff.
    Failed(String),
}

/// The waits between connection attempts.
pub(crate) const BACKOFF_START: Duration = Duration::from_secs(1);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Connected this long, the next failure waits `BACKOFF_START` again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// The adapters' timings: the defaults in production; the tests shorten them (`deepcli up` with
/// the `failpoints` feature reads `DEEPCLI_FAILPOINT_ADAPTER` once at start-up, see
/// [`Timings::overridden`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timings {
    /// The first wait between connection attempts, doubling to `backoff_max`.
    pub backoff_start: Duration,
    pub backoff_max: Duration,
    /// How long a Telegram `getUpdates` call waits for updates (long polling's `timeout`).
    pub telegram_poll_seconds: u64,
}

impl Default for Timings {
    fn default() -> Timings {
        Timings {
            backoff_start: BACKOFF_START,
            backoff_max: BACKOFF_MAX,
            telegram_poll_seconds: 25,
        }
    }
}

impl Timings {
    /// These timings with the ones `list` names (`adapter_backoff_ms=50,telegram_poll_s=1`:
    /// the first wait in milliseconds, the longest four times it; the long poll in seconds);
    /// a name it does not know, or a value that is no number, is ignored.
    #[cfg(feature = "failpoints")]
    pub(crate) fn overridden(mut self, list: &str) -> Timings {
        for pair in list.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                continue;
            };
            let Ok(n) = value.trim().parse::<u64>() else {
                continue;
            };
            match key.trim() {
                "adapter_backoff_ms" => {
                    self.backoff_start = Duration::from_millis(n);
                    self.backoff_max = Duration::from_millis(n * 4);
                }
                "telegram_poll_s" => self.telegram_poll_seconds = n,
                _ => {}
            }
        }
        self
    }
}

/// The adapters of one controller.
pub(crate) struct Adapters {
    cx: Arc<AdapterCx>,
    running: HashMap<AccountKey, (AdapterSpec, tokio::task::JoinHandle<()>)>,
    /// The outbox's carriers ([`carry`]); none outside a runtime (a unit test's).
    carrier: Option<tokio::task::JoinHandle<()>>,
}

impl Adapters {
    pub(crate) fn new(access: Arc<Access>, store: AdapterStore, timings: Timings) -> Adapters {
        let http = crate::http_client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot build the platform HTTP client with its TLS settings; using the defaults");
                reqwest::Client::new()
            });
        let cx = Arc::new(AdapterCx {
            access,
            store: Arc::new(store),
            http,
            live: LiveMap::default(),
            timings,
            accounts: RwLock::default(),
            endpoints: RwLock::default(),
            stalls: Mutex::default(),
            lanes: lanes::Lanes::default(),
            in_hand: Mutex::default(),
        });
        let carrier = tokio::runtime::Handle::try_current()
            .ok()
            .map(|rt| rt.spawn(carry::run(cx.clone())));
        Adapters {
            cx,
            running: HashMap::new(),
            carrier,
        }
    }

    pub(crate) fn cx(&self) -> Arc<AdapterCx> {
        self.cx.clone()
    }

    /// Runs exactly `desired`: stops what is gone, disabled or changed, starts what is new or
    /// changed.
    pub(crate) fn converge(&mut self, desired: Vec<AdapterSpec>) {
        let stale: Vec<AccountKey> = self
            .running
            .iter()
            .filter(|(key, (spec, _))| {
                !desired
                    .iter()
                    .any(|d| &d.key() == *key && d == spec && d.enabled)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some((spec, task)) = self.running.remove(&key) {
                tracing::info!(channel = %key.channel, account = %key.account, "platform adapter stopped");
                task.abort();
                self.forget(&spec);
            }
        }
        let wanted: std::collections::HashSet<_> = desired.iter().map(AdapterSpec::key).collect();
        if let Ok(mut live) = self.cx.live.write() {
            live.retain(|key, _| wanted.contains(key));
        }
        for spec in desired {
            let key = spec.key();
            if !spec.enabled {
                self.set_live(&spec, ConnectionState::Disabled, None);
                continue;
            }
            if self.running.contains_key(&key) {
                continue;
            }
            self.set_live(&spec, ConnectionState::Connecting, None);
            let running = Arc::new(RunningAccount {
                spec: spec.clone(),
                cx: self.cx.clone(),
                identity: RwLock::new(None),
                discord: discord::Session::default(),
            });
            if let Ok(mut accounts) = self.cx.accounts.write() {
                accounts.insert(key.clone(), running.clone());
            }
            tracing::info!(channel = %key.channel, account = %key.account, mode = spec.mode.as_str(), "platform adapter started");
            let task = tokio::spawn(supervise(running));
            self.running.insert(key, (spec, task));
        }
    }

    fn set_live(&self, spec: &AdapterSpec, state: ConnectionState, error: Option<String>) {
        if let Ok(mut live) = self.cx.live.write() {
            live.insert(
                spec.key(),
                AdapterLive {
                    platform: spec.platform,
                    mode: spec.mode,
                    state,
                    identity: None,
                    since: crate::clock::now(),
                    last_event_at: None,
                    last_error: error,
                    connects: 0,
                    events: 0,
                    posted: 0,
                    dead_letters: 0,
                },
            );
        }
    }

    fn forget(&self, spec: &AdapterSpec) {
        if let Ok(mut accounts) = self.cx.accounts.write() {
            accounts.remove(&spec.key());
        }
        self.cx
            .access
            .set_live_bot(&spec.channel, &spec.account, None);
        if let Ok(mut endpoints) = self.cx.endpoints.write() {
            endpoints.remove(&spec.key());
        }
    }

    /// Stops every connection (shutdown).
    pub(crate) fn stop_all(&mut self) {
        if let Some(carrier) = self.carrier.take() {
            carrier.abort();
        }
        if let Ok(mut accounts) = self.cx.accounts.write() {
            accounts.clear();
        }
        for (_, (spec, task)) in self.running.drain() {
            task.abort();
            if let Ok(mut endpoints) = self.cx.endpoints.write() {
                endpoints.remove(&spec.key());
            }
        }
    }
}

impl Drop for Adapters {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// One account's connection, again and again, with the backoff between attempts.
async fn supervise(running: Arc<RunningAccount>) {
    if let Some(missing) = running.spec.missing() {
        tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, why = %missing, "platform adapter cannot connect");
        running.set_state(ConnectionState::AuthFailed, Some(missing.clone()));
        running
            .log(&format!("cannot-connect error={missing}"))
            .await;
        return;
    }
    let mut waits = reconnect_backoff(&running.cx.timings).build();
    let mut wait = next_wait(&mut waits);
    loop {
        if logged_out(&running).await {
            running.set_state(
                ConnectionState::Disabled,
                Some(format!(
                    "logged out: `deepcli channels login --channel {} --account {}` connects it again",
                    running.spec.channel, running.spec.account
                )),
            );
            forget_endpoint(&running);
            running.log("logged-out").await;
            while logged_out(&running).await {
                tokio::time::sleep(LOGOUT_CHECK).await;
            }
            waits = reconnect_backoff(&running.cx.timings).build();
            wait = next_wait(&mut waits);
        }
        running.set_state(ConnectionState::Connecting, None);
        let started = tokio::time::Instant::now();
        let connection = async {
            match running.spec.platform {
                Platform::Telegram => telegram::connect(&running).await,
                Platform::Slack => slack::connect(&running).await,
                Platform::Discord => discord::connect(&running).await,
            }
        };
        let stop = tokio::select! {
            stop = connection => stop,
            () = until_logged_out(&running) => continue,
        };
        if started.elapsed() >= HEALTHY_AFTER {
            waits = reconnect_backoff(&running.cx.timings).build();
            wait = next_wait(&mut waits);
        }
        let (state, error) = match stop {
            Stop::Auth(why) => (ConnectionState::AuthFailed, why),
            Stop::Failed(why) => (ConnectionState::Connecting, why),
        };
        // A connection that never got up is not said to have dropped.
        let was = if running.state() == Some(ConnectionState::Connected) {
            "disconnected"
        } else {
            "connect-failed"
        };
        tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, error = %error, retry_in_ms = wait.as_millis() as u64, "platform connection ended ({was})");
        running.set_state(state, Some(error.clone()));
        running
            .log(&format!(
                "{was} error={error} retry_in_ms={}",
                wait.as_millis()
            ))
            .await;
        tokio::time::sleep(wait).await;
        wait = next_wait(&mut waits);
    }
}

/// The waits between connection attempts: [`BACKOFF_START`] doubling to [`BACKOFF_MAX`],
/// without end (a connection is tried again for as long as the account is wanted).
fn reconnect_backoff(timings: &Timings) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(timings.backoff_start)
        .with_max_delay(timings.backoff_max)
        .with_factor(2.0)
        .without_max_times()
}

fn next_wait(waits: &mut impl Iterator<Item = Duration>) -> Duration {
    // The waits never end (`without_max_times`).
    waits.next().unwrap_or(BACKOFF_MAX)
}

/// How often a connection looks whether `channels logout` took it down (or `login` back up).
const LOGOUT_CHECK: Duration = Duration::from_secs(1);

async fn logged_out(running: &RunningAccount) -> bool {
    let (store, c, a) = (
        running.cx.store.clone(),
        running.spec.channel.clone(),
        running.spec.account.clone(),
    );
    tokio::task::spawn_blocking(move || store.accounts().logged_out(&c, &a))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(false)
}

async fn until_logged_out(running: &RunningAccount) {
    while !logged_out(running).await {
        tokio::time::sleep(LOGOUT_CHECK).await;
    }
}

fn forget_endpoint(running: &RunningAccount) {
    running
        .cx
        .access
        .set_live_bot(&running.spec.channel, &running.spec.account, None);
    if let Ok(mut endpoints) = running.cx.endpoints.write() {
        endpoints.remove(&running.spec.key());
    }
    if let Ok(mut me) = running.identity.write() {
        *me = None;
    }
}

/// The live adapters as the status shows them, by channel then account.
pub(crate) fn snapshot(live: &LiveMap) -> BTreeMap<AccountKey, AdapterLive> {
    live.read().map(|l| l.clone()).unwrap_or_default()
}

/// Registers the adapters' metrics in a scrape's `registry`: each account's connection state (1
/// for the state it is in), and its counters. None while no account has an adapter.
pub(crate) fn register_metrics(live: &LiveMap, registry: &mut crate::metrics::Registry) {
    use crate::metrics::Rows;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    let live = snapshot(live);
    if live.is_empty() {
        return;
    }
    let account = |key: &AccountKey| {
        [
            ("channel", key.channel.clone()),
            ("account", key.account.clone()),
        ]
    };
    registry.register(
        "deepcli_adapter_connected",
        "1 while the account's platform adapter is connected",
        Rows(
            live.iter()
                .map(|(key, l)| {
                    let [channel, account] = account(key);
                    (
                        [channel, account, ("state", l.state.as_str().to_string())],
                        ConstGauge::new(i64::from(l.state == ConnectionState::Connected)),
                    )
                })
                .collect(),
        ),
    );
    for (name, help, get) in [
        (
            "deepcli_adapter_events",
            "Events taken from the platform (redeliveries included)",
            (|l: &AdapterLive| l.events) as fn(&AdapterLive) -> u64,
        ),
        ("deepcli_adapter_posted", "Reply pieces posted", |l| {
            l.posted
        }),
        (
            "deepcli_adapter_dead_letters",
            "Replies kept as dead letters",
            |l| l.dead_letters,
        ),
        ("deepcli_adapter_connects", "Connections made", |l| {
            l.connects
        }),
    ] {
        registry.register(
            name,
            help,
            Rows(
                live.iter()
                    .map(|(key, l)| (account(key), ConstCounter::new(get(l))))
                    .collect(),
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder;
    use serde_json::json;

    use super::*;
    use serde_json::Value;

    #[test]
    fn the_doors_answer_is_read_once_into_what_an_adapter_does() {
        let read = |body: Value| DoorAnswer::read(Ok(Delivered::recorded(body.to_string())));
        assert!(matches!(
            read(json!({"reply": {"text": "hi"}, "duplicate": false})),
            DoorAnswer::Answered { text } if text == "hi"
        ));
        assert!(matches!(
            read(json!({"reply": {"text": "hi"}, "duplicate": true, "delivered": true})),
            DoorAnswer::Duplicate { text: Some(text) } if text == "hi"
        ));
        assert!(matches!(
            read(json!({"delivered": false, "gated": {"reason": "pairing", "rule": "dmPolicy"}, "reply": {"text": "code 1234"}, "duplicate": false})),
            DoorAnswer::Gated { text: Some(text) } if text == "code 1234"
        ));
        assert!(matches!(
            read(
                json!({"delivered": false, "gated": {"reason": "mention"}, "reply": null, "duplicate": false})
            ),
            DoorAnswer::Gated { text: None }
        ));
        assert!(matches!(
            read(json!({"reply": null, "duplicate": false, "delivered": false, "note": "x"})),
            DoorAnswer::NotDelivered
        ));
        // A reply without text is nothing to post.
        assert!(matches!(
            read(json!({"reply": {"text": 5}})),
            DoorAnswer::NotDelivered
        ));
        // Which refusals are transient is the door's to say (AccessError::is_transient, held
        // against the HTTP statuses in access/http.rs); the adapter only follows it.
        for e in [AccessError::NoPlan, AccessError::Internal("busy".into())] {
            assert!(matches!(DoorAnswer::read(Err(e)), DoorAnswer::Transient(_)));
        }
        for e in [
            AccessError::bad_field("text", "missing"),
            AccessError::Unauthenticated(crate::access::Unauthenticated::MissingSignature),
            AccessError::TooLarge { limit: 1 },
        ] {
            assert!(matches!(DoorAnswer::read(Err(e)), DoorAnswer::Refused(_)));
        }
    }

    #[test]
    fn a_reply_is_posted_once_unless_the_inbox_hands_it_in_again() {
        let answered = || DoorAnswer::Answered { text: "a".into() };
        assert_eq!(answered().reply(false).as_deref(), Some("a"));
        let duplicate = || DoorAnswer::Duplicate {
            text: Some("a".into()),
        };
        assert_eq!(duplicate().reply(false), None, "a redelivery");
        assert_eq!(
            duplicate().reply(true).as_deref(),
            Some("a"),
            "taken again after a restart: its reply may not have left"
        );
        assert_eq!(
            DoorAnswer::Gated {
                text: Some("code".into())
            }
            .reply(false)
            .as_deref(),
            Some("code")
        );
        assert_eq!(DoorAnswer::NotDelivered.reply(true), None);
        let refused = DoorAnswer::Refused(AccessError::bad_field("text", "x"));
        assert_eq!(refused.reply(true), None);
    }

    #[test]
    fn the_waits_are_those_of_the_loops_they_replace() {
        let hand_in: Vec<u64> = hand_in_backoff().build().map(|d| d.as_secs()).collect();
        assert_eq!(
            hand_in,
            [1, 2, 4, 8, 16, 16],
            "7 attempts, 1 s doubling to 16 s"
        );
        let reconnect: Vec<u64> = reconnect_backoff(&Timings::default())
            .build()
            .take(9)
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(reconnect, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn an_envelope_is_written_as_post_v1_inbound_reads_it() {
        let e = Envelope {
            channel: "slack".into(),
            account_id: "a".into(),
            peer: Peer {
                kind: "channel",
                id: "C1".into(),
            },
            message_id: "1.1".into(),
            sender: Sender {
                is_bot: false,
                id: Some("U7".into()),
                name: None,
            },
            text: "hi".into(),
            mentions: vec!["UBOT".into()],
            team_id: Some("T1".into()),
            thread_id: None,
            reply_to_sender_id: None,
            guild_id: None,
            member_role_ids: Vec::new(),
            parent_peer: None,
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"channel":"slack","accountId":"a","peer":{"kind":"channel","id":"C1"},"messageId":"1.1","sender":{"isBot":false,"id":"U7"},"text":"hi","mentions":["UBOT"],"teamId":"T1"}"#
        );
    }
}
