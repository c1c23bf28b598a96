//! The platform adapters (adapters.md): the controller's own connections to Slack and
//! Telegram, one per enabled account. An adapter only translates: a platform event becomes an
//! envelope handed to the Access door ([`crate::access::http::hand_in`]: the same routing,
//! policy, idempotency and delivery as `POST /v1/inbound`), and the reply in its answer goes
//! back through the platform's API. It never routes, gates or opens sessions itself.
//!
//! * [`Adapters::converge`] runs exactly the accounts the applied config asks for, after every
//!   apply (like the runtimes): new ones start, removed or disabled ones stop, one whose
//!   settings or resolved credentials changed starts again. A connection that fails starts
//!   again after a backoff (1 s doubling to 60 s, from the start after a minute connected).
//! * An event is taken into the inbox (state database) before it is acknowledged or its
//!   Telegram offset confirmed, and leaves it once handled to the end: a restart hands in
//!   what was left, and the Access records answer what was delivered already as a duplicate.
//! * Events of one conversation are handled in order ([`lanes`]), conversations side by side.

mod lanes;
pub mod outbound;
pub mod probe;
pub mod slack;
pub mod store;
pub mod telegram;
pub mod web;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;

use crate::access::Access;
use crate::access::plan::resolve_secret;
use crate::config::Config;
use crate::config::model::{AdapterMode, Discussion, ReplyToMode, SecretRef};
use store::AdapterStore;

/// The platforms deepcli has an adapter for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Slack,
    Telegram,
}

impl Platform {
    /// The platform of a channel id (normalized), if deepcli has an adapter for it.
    pub fn of(channel: &str) -> Option<Platform> {
        match channel {
            "slack" => Some(Platform::Slack),
            "telegram" => Some(Platform::Telegram),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Slack => "slack",
            Platform::Telegram => "telegram",
        }
    }

    pub fn default_mode(self) -> AdapterMode {
        match self {
            Platform::Slack => AdapterMode::Socket,
            Platform::Telegram => AdapterMode::Polling,
        }
    }

    pub fn default_api_base(self) -> String {
        // Tests point every account without an `apiBase` at a closed loopback port, so that
        // no test can reach a real platform.
        #[cfg(feature = "failpoints")]
        if let Ok(base) = std::env::var("DEEPCLI_FAILPOINT_PLATFORM_API") {
            return base;
        }
        match self {
            Platform::Slack => "https://slack.com/api".into(),
            Platform::Telegram => "https://api.telegram.org".into(),
        }
    }

    /// The modes the platform takes.
    pub fn modes(self) -> &'static [AdapterMode] {
        match self {
            Platform::Slack => &[AdapterMode::Socket, AdapterMode::Http],
            Platform::Telegram => &[AdapterMode::Polling, AdapterMode::Webhook],
        }
    }
}

/// A credential resolved now; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credential(pub String);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(…)")
    }
}

/// One account's adapter, as the applied config asks for it. Two specs are equal when the
/// connection would be the same: a change of any field (resolved credentials included)
/// starts it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSpec {
    pub platform: Platform,
    /// Normalized channel and account ids.
    pub channel: String,
    pub account: String,
    pub enabled: bool,
    pub mode: AdapterMode,
    pub api_base: String,
    /// `botToken`, or why it cannot be used.
    pub bot_token: Result<Credential, String>,
    /// Slack `appToken` (socket mode).
    pub app_token: Option<Result<Credential, String>>,
    /// Slack `signingSecret` (http mode).
    pub signing_secret: Option<Result<Credential, String>>,
    /// Telegram `webhookSecret` (webhook mode).
    pub webhook_secret: Option<Result<Credential, String>>,
    pub webhook_url: Option<String>,
    pub reply_to_mode: ReplyToMode,
    /// The most platform messages one reply is posted as (`maxReplyMessages`).
    pub max_reply_messages: usize,
    /// The account's `discussion`, and each Slack channel's from its `groups` entry.
    pub discussion: Option<Discussion>,
    pub group_discussions: BTreeMap<String, Discussion>,
}

impl AdapterSpec {
    pub fn key(&self) -> (String, String) {
        (self.channel.clone(), self.account.clone())
    }

    /// What the transport needs that is missing: said as the account's last error, and the
    /// connection is not tried.
    fn missing(&self) -> Option<String> {
        let need = |what: &Option<Result<Credential, String>>, field: &str| match what {
            None => Some(format!(
                "mode `{}` needs `{field}` on channels.{}.accounts.{}",
                self.mode.as_str(),
                self.channel,
                self.account
            )),
            Some(Err(why)) => Some(format!("`{field}`: {why}")),
            Some(Ok(_)) => None,
        };
        if let Err(why) = &self.bot_token {
            return Some(format!("`botToken`: {why}"));
        }
        match self.mode {
            AdapterMode::Socket => need(&self.app_token, "appToken"),
            AdapterMode::Http => need(&self.signing_secret, "signingSecret"),
            AdapterMode::Webhook => need(&self.webhook_secret, "webhookSecret").or_else(|| {
                self.webhook_url.is_none().then(|| {
                    format!(
                        "mode `webhook` needs `webhookUrl` on channels.{}.accounts.{}",
                        self.channel, self.account
                    )
                })
            }),
            AdapterMode::Polling | AdapterMode::Bridge => None,
        }
    }

    /// The discussion settings for a Slack channel: its `groups` entry's, else the account's.
    pub fn discussion_for(&self, conversation: &str) -> Option<&Discussion> {
        self.group_discussions
            .get(conversation)
            .or_else(|| self.group_discussions.get("*"))
            .or(self.discussion.as_ref())
    }
}

fn resolve(secret: Option<&crate::config::model::Secret>) -> Option<Result<Credential, String>> {
    use crate::config::model::Secret;
    Some(match secret? {
        Secret::Ref(r) => resolve_ref(r),
        Secret::Inline(_) => Err(
            "an inline secret is not used: write a reference (`${VAR}`, {source: env|file})".into(),
        ),
    })
}

fn resolve_ref(r: &SecretRef) -> Result<Credential, String> {
    let value = resolve_secret(r)?;
    let value = value.trim().to_string();
    if value.is_empty() {
        return Err("resolves to an empty value".into());
    }
    Ok(Credential(value))
}

/// The adapters `config` asks for: every account of a channel deepcli has an adapter for
/// (`slack`, `telegram`) that is not in `mode: bridge`, disabled ones too (to say so).
pub fn specs(config: &Config) -> Vec<AdapterSpec> {
    let mut out = Vec::new();
    for channel in &config.channels {
        let channel_id = crate::ids::channel(&channel.id).into_owned();
        let Some(platform) = Platform::of(&channel_id) else {
            continue;
        };
        let group_discussions: BTreeMap<String, Discussion> = channel
            .spec
            .groups
            .iter()
            .filter_map(|(id, g)| Some((id.trim().to_string(), g.discussion.clone()?)))
            .collect();
        for account in channel.accounts() {
            let spec = account.spec;
            let mode = spec.mode.unwrap_or(platform.default_mode());
            if mode == AdapterMode::Bridge {
                continue;
            }
            let secrets = &spec.secrets;
            out.push(AdapterSpec {
                platform,
                channel: channel_id.clone(),
                account: account.normalized.clone(),
                enabled: channel.spec.enabled != Some(false) && spec.enabled != Some(false),
                mode,
                api_base: spec
                    .api_base
                    .clone()
                    .unwrap_or_else(|| platform.default_api_base())
                    .trim_end_matches('/')
                    .to_string(),
                bot_token: resolve(secrets.get("botToken"))
                    .unwrap_or_else(|| Err("not set".into())),
                app_token: resolve(secrets.get("appToken")),
                signing_secret: resolve(secrets.get("signingSecret")),
                webhook_secret: resolve(secrets.get("webhookSecret")),
                webhook_url: spec.webhook_url.clone(),
                reply_to_mode: spec.reply_to_mode.unwrap_or_default(),
                max_reply_messages: spec
                    .max_reply_messages
                    .map_or(outbound::MAX_REPLY_MESSAGES, |n| n as usize),
                discussion: spec.discussion.clone(),
                group_discussions: group_discussions.clone(),
            });
        }
    }
    out
}

/// The bot an account speaks as, from `getMe` / `auth.test`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub bot_user_id: String,
    /// Telegram's username (without `@`), Slack's bot user name.
    pub name: Option<String>,
    /// Slack: the bot id (`B…`) its own messages carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
}

/// `connected | connecting | auth_failed | disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    Connecting,
    Connected,
    AuthFailed,
    Disabled,
}

/// One account's adapter, live: what `deepcli status`, `/v1/status`, `channels status` and
/// `/metrics` show.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterLive {
    pub platform: Platform,
    pub mode: &'static str,
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

/// The seed-001 discussions in the conversation `session_key` names, for `sessions show`:
/// each thread's bot rounds and state (only the session's own thread when the key names one).
/// Empty when the key names no platform conversation or nothing was discussed in it.
pub fn discussions(cx: &Cx, session_key: &str) -> Vec<serde_json::Value> {
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
        .map(|(id, t)| {
            serde_json::json!({
                "threadId": id,
                "rounds": t.rounds,
                "state": t.state.as_str(),
                "noticeSent": t.notice_sent,
            })
        })
        .collect()
}

/// Every account's live adapter status, by (channel, account).
pub type LiveMap = Arc<RwLock<BTreeMap<(String, String), AdapterLive>>>;

/// What every connection shares.
pub struct Cx {
    pub access: Arc<Access>,
    pub store: Arc<AdapterStore>,
    pub http: reqwest::Client,
    pub live: LiveMap,
    /// The accounts whose events arrive over the controller's listener (Slack http, Telegram
    /// webhook), by (channel, account).
    pub endpoints: RwLock<HashMap<(String, String), Arc<Running>>>,
    /// Seed 001's stall detection: per discussed thread, the last bot reply and how many
    /// replies in a row repeated it.
    stalls: Mutex<HashMap<store::ThreadKey, (String, u32)>>,
    /// One lane per conversation, kept across reconnects and restarts of a connection.
    lanes: lanes::Lanes,
    /// The events dispatched and not finished, by (channel, account, event id): a replay of
    /// the inbox after a reconnect skips them (they are in a lane already).
    in_hand: Mutex<std::collections::HashSet<(String, String, String)>>,
}

impl Cx {
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

/// An event as its lane handles it.
#[derive(Debug, Clone)]
pub struct Taken {
    /// Its id in the inbox.
    pub event_id: String,
    /// Handed in again from the inbox after a restart or reconnect.
    pub replayed: bool,
    /// How many pieces of its reply were posted before (a replayed event's).
    pub posted: usize,
}

impl Taken {
    /// An event taken now from the platform.
    pub fn fresh(event_id: String) -> Taken {
        Taken {
            event_id,
            replayed: false,
            posted: 0,
        }
    }
}

/// One running account: its spec, identity and lanes.
pub struct Running {
    pub spec: AdapterSpec,
    pub cx: Arc<Cx>,
    identity: RwLock<Option<Identity>>,
}

impl Running {
    pub fn identity(&self) -> Option<Identity> {
        self.identity.read().ok().and_then(|i| i.clone())
    }

    fn update(&self, f: impl FnOnce(&mut AdapterLive)) {
        if let Ok(mut live) = self.cx.live.write()
            && let Some(entry) = live.get_mut(&self.spec.key())
        {
            f(entry);
        }
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
            if let Err(e) = store.record_identity(&ch, &acc, &id) {
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

    /// What an earlier run took into the inbox and did not finish, oldest first.
    async fn pending(&self) -> Vec<(Taken, serde_json::Value)> {
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
            .filter_map(|p| {
                let body = serde_json::from_str(&p.body).ok()?;
                Some((
                    Taken {
                        event_id: p.event_id,
                        replayed: true,
                        posted: p.posted,
                    },
                    body,
                ))
            })
            .collect()
    }

    /// Records one event (`what` `id`, e.g. `event` or `update`) in the inbox: whether it is
    /// new. A redelivery of one taken before is counted and logged.
    async fn take_one(
        &self,
        what: &str,
        id: &str,
        body: &serde_json::Value,
    ) -> Result<bool, String> {
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

/// Why a connection ended.
#[derive(Debug)]
pub enum Stop {
    /// The platform refused the credentials.
    Auth(String),
    /// Anything else: tried again after the backoff.
    Failed(String),
}

/// The waits between connection attempts.
pub const BACKOFF_START: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Connected this long, the next failure waits `BACKOFF_START` again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// The adapters of one controller.
pub struct Adapters {
    cx: Arc<Cx>,
    running: HashMap<(String, String), (AdapterSpec, tokio::task::JoinHandle<()>)>,
}

impl Adapters {
    pub fn new(access: Arc<Access>, store: AdapterStore) -> Adapters {
        // One process-wide TLS provider: ring (no OpenSSL). Installing it again is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("deepcli/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot build the platform HTTP client with its TLS settings; using the defaults");
                reqwest::Client::new()
            });
        Adapters {
            cx: Arc::new(Cx {
                access,
                store: Arc::new(store),
                http,
                live: LiveMap::default(),
                endpoints: RwLock::default(),
                stalls: Mutex::default(),
                lanes: lanes::Lanes::default(),
                in_hand: Mutex::default(),
            }),
            running: HashMap::new(),
        }
    }

    pub fn cx(&self) -> Arc<Cx> {
        self.cx.clone()
    }

    pub fn live(&self) -> LiveMap {
        self.cx.live.clone()
    }

    /// Runs exactly `desired`: stops what is gone, disabled or changed, starts what is new or
    /// changed.
    pub fn converge(&mut self, desired: Vec<AdapterSpec>) {
        let stale: Vec<(String, String)> = self
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
                tracing::info!(channel = %key.0, account = %key.1, "platform adapter stopped");
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
            let running = Arc::new(Running {
                spec: spec.clone(),
                cx: self.cx.clone(),
                identity: RwLock::new(None),
            });
            tracing::info!(channel = %key.0, account = %key.1, mode = spec.mode.as_str(), "platform adapter started");
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
                    mode: spec.mode.as_str(),
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
        self.cx
            .access
            .set_live_bot(&spec.channel, &spec.account, None);
        if let Ok(mut endpoints) = self.cx.endpoints.write() {
            endpoints.remove(&spec.key());
        }
    }

    /// Stops every connection (shutdown).
    pub fn stop_all(&mut self) {
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
async fn supervise(running: Arc<Running>) {
    if let Some(missing) = running.spec.missing() {
        tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, why = %missing, "platform adapter cannot connect");
        running.set_state(ConnectionState::AuthFailed, Some(missing.clone()));
        running
            .log(&format!("cannot-connect error={missing}"))
            .await;
        return;
    }
    let mut wait = backoff_start();
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
            wait = backoff_start();
        }
        running.set_state(ConnectionState::Connecting, None);
        let started = tokio::time::Instant::now();
        let connection = async {
            match running.spec.platform {
                Platform::Telegram => telegram::connect(&running).await,
                Platform::Slack => slack::connect(&running).await,
            }
        };
        let stop = tokio::select! {
            stop = connection => stop,
            () = until_logged_out(&running) => continue,
        };
        if started.elapsed() >= HEALTHY_AFTER {
            wait = backoff_start();
        }
        let (state, error) = match stop {
            Stop::Auth(why) => (ConnectionState::AuthFailed, why),
            Stop::Failed(why) => (ConnectionState::Connecting, why),
        };
        tracing::warn!(channel = %running.spec.channel, account = %running.spec.account, error = %error, retry_in_ms = wait.as_millis() as u64, "platform connection ended");
        running.set_state(state, Some(error.clone()));
        running
            .log(&format!(
                "disconnected error={error} retry_in_ms={}",
                wait.as_millis()
            ))
            .await;
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(backoff_max());
    }
}

/// How often a connection looks whether `channels logout` took it down (or `login` back up).
const LOGOUT_CHECK: Duration = Duration::from_secs(1);

async fn logged_out(running: &Running) -> bool {
    let (store, c, a) = (
        running.cx.store.clone(),
        running.spec.channel.clone(),
        running.spec.account.clone(),
    );
    tokio::task::spawn_blocking(move || store.logged_out(&c, &a))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(false)
}

async fn until_logged_out(running: &Running) {
    while !logged_out(running).await {
        tokio::time::sleep(LOGOUT_CHECK).await;
    }
}

fn forget_endpoint(running: &Running) {
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

fn backoff_start() -> Duration {
    #[cfg(feature = "failpoints")]
    if let Some(ms) = failpoint_ms("adapter_backoff_ms") {
        return Duration::from_millis(ms);
    }
    BACKOFF_START
}

fn backoff_max() -> Duration {
    #[cfg(feature = "failpoints")]
    if let Some(ms) = failpoint_ms("adapter_backoff_ms") {
        return Duration::from_millis(ms * 4);
    }
    BACKOFF_MAX
}

/// `DEEPCLI_FAILPOINT_ADAPTER=name=value,…`: shortened timings for the tests.
#[cfg(feature = "failpoints")]
pub(crate) fn failpoint_ms(name: &str) -> Option<u64> {
    std::env::var("DEEPCLI_FAILPOINT_ADAPTER")
        .ok()
        .and_then(|list| {
            list.split(',').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k.trim() == name).then(|| v.trim().parse().ok()).flatten()
            })
        })
}

/// A platform API error worded without its URL (a Telegram URL holds the bot token).
pub(crate) fn transport_error(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The live adapters as the status shows them, by channel then account.
pub fn snapshot(live: &LiveMap) -> BTreeMap<(String, String), AdapterLive> {
    live.read().map(|l| l.clone()).unwrap_or_default()
}

/// The adapters' lines of `/metrics`: each account's connection state (1 for the state it is
/// in), and its counters.
pub fn render_metrics(live: &LiveMap, out: &mut String) {
    use std::fmt::Write;
    let live = snapshot(live);
    if live.is_empty() {
        return;
    }
    out.push_str("# TYPE deepcli_adapter_connected gauge\n");
    for ((channel, account), l) in &live {
        let _ = writeln!(
            out,
            "deepcli_adapter_connected{{channel=\"{channel}\",account=\"{account}\",state=\"{}\"}} {}",
            serde_json::to_value(l.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            u8::from(l.state == ConnectionState::Connected)
        );
    }
    for (name, help, get) in [
        (
            "deepcli_adapter_events_total",
            "events",
            (|l: &AdapterLive| l.events) as fn(&AdapterLive) -> u64,
        ),
        ("deepcli_adapter_posted_total", "posted", |l| l.posted),
        ("deepcli_adapter_dead_letters_total", "dead letters", |l| {
            l.dead_letters
        }),
        ("deepcli_adapter_connects_total", "connects", |l| l.connects),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for ((channel, account), l) in &live {
            let _ = writeln!(
                out,
                "{name}{{channel=\"{channel}\",account=\"{account}\"}} {}",
                get(l)
            );
        }
    }
}
