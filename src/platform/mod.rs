//! The platform clients (adapters.md): Slack's Web API, Telegram's Bot API and Discord's REST
//! API over HTTPS, with typed payloads for the fields deepcli reads (Discord's Gateway frames
//! too), Slack's Events API signature check, Discord's rate limits, and what the
//! management service asks a platform outside any connection (login, probe, resolve). Also each
//! account as the applied config asks for it ([`AdapterSpec`]), and the account rows `channels
//! login` / `logout` and the running adapters share ([`accounts`]).
//!
//! Must not: hand anything to Access, route, or know the message path — that is
//! [`crate::adapters`]' work. `manage` uses this module without linking the serving half.

pub(crate) mod accounts;
pub(crate) mod discord;
pub(crate) mod probe;
pub(crate) mod slack;
pub(crate) mod telegram;

use crate::ids::AccountKey;
use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};

use crate::config::Config;
use crate::config::model::{AdapterMode, Discussion, ReplyToMode, Secret, SecretRef};

/// `maxReplyMessages` when unset: the most platform messages one reply is posted as.
pub(crate) const MAX_REPLY_MESSAGES: usize = 10;

/// The platforms deepcli has an adapter for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Platform {
    Slack,
    Telegram,
    Discord,
}

impl Platform {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Platform::Slack => "slack",
            Platform::Telegram => "telegram",
            Platform::Discord => "discord",
        }
    }

    /// The account's secret field that holds the bot's token.
    pub(crate) fn token_field(self) -> &'static str {
        match self {
            Platform::Discord => "token",
            Platform::Slack | Platform::Telegram => "botToken",
        }
    }

    /// The platform of a channel id (normalized), if deepcli has an adapter for it.
    pub(crate) fn of(channel: &str) -> Option<Platform> {
        match channel {
            "slack" => Some(Platform::Slack),
            "telegram" => Some(Platform::Telegram),
            "discord" => Some(Platform::Discord),
            _ => None,
        }
    }

    pub(crate) fn default_mode(self) -> AdapterMode {
        match self {
            Platform::Slack => AdapterMode::Socket,
            Platform::Telegram => AdapterMode::Polling,
            Platform::Discord => AdapterMode::Gateway,
        }
    }

    pub(crate) fn default_api_base(self) -> String {
        // Tests point every account without an `apiBase` at a closed loopback port, so that
        // no test can reach a real platform.
        #[cfg(feature = "failpoints")]
        if let Ok(base) = std::env::var("DEEPCLI_FAILPOINT_PLATFORM_API") {
            return base;
        }
        match self {
            Platform::Slack => "https://slack.com/api".into(),
            Platform::Telegram => "https://api.telegram.org".into(),
            Platform::Discord => "https://discord.com/api".into(),
        }
    }
}

/// A credential resolved now: held as a [`SecretString`] (wiped when dropped), shown by no
/// `Debug`, exposed only where it is sent ([`Credential::expose`]).
#[derive(Clone)]
pub(crate) struct Credential(SecretString);

impl Credential {
    pub(crate) fn new(value: String) -> Credential {
        Credential(value.into())
    }

    /// The value, for the header, signature check or request that sends it.
    pub(crate) fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

/// Equal when the values are: a changed credential restarts its adapter.
impl PartialEq for Credential {
    fn eq(&self, other: &Credential) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Credential {}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(…)")
    }
}

/// One account's adapter, as the applied config asks for it. Two specs are equal when the
/// connection would be the same: a change of any field (resolved credentials included)
/// starts it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdapterSpec {
    pub platform: Platform,
    /// Normalized channel and account ids.
    pub channel: String,
    pub account: String,
    pub enabled: bool,
    pub mode: AdapterMode,
    pub api_base: String,
    /// The bot's token (`botToken`; Discord's `token`), or why it cannot be used.
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
    /// The account's `discussion`, and each Slack or Discord channel's from its `groups` entry.
    pub discussion: Option<Discussion>,
    pub group_discussions: BTreeMap<String, Discussion>,
    /// Discord: `applicationId`.
    pub application_id: Option<String>,
    /// Discord: a binding or the guilds' policy uses roles, so the Gateway is asked for guild
    /// members too.
    pub uses_roles: bool,
}

impl AdapterSpec {
    pub(crate) fn key(&self) -> AccountKey {
        AccountKey::new(&self.channel, &self.account)
    }

    /// The bot token, or `""` when it did not resolve (a call with it is refused).
    pub(crate) fn token(&self) -> &str {
        self.bot_token.as_ref().map_or("", Credential::expose)
    }

    /// What the transport needs that is missing: said as the account's last error, and the
    /// connection is not tried.
    pub(crate) fn missing(&self) -> Option<String> {
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
            return Some(format!("`{}`: {why}", self.platform.token_field()));
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
            AdapterMode::Polling | AdapterMode::Gateway | AdapterMode::Bridge => None,
        }
    }

    /// The discussion settings for a Slack channel: its `groups` entry's, else the account's.
    pub(crate) fn discussion_for(&self, conversation: &str) -> Option<&Discussion> {
        self.group_discussions
            .get(conversation)
            .or_else(|| self.group_discussions.get("*"))
            .or(self.discussion.as_ref())
    }
}

fn resolve(secret: Option<&Secret>) -> Option<Result<Credential, String>> {
    Some(match secret? {
        Secret::Ref(r) => resolve_ref(r),
        Secret::Inline(_) => Err(
            "an inline secret is not used: write a reference (`${VAR}`, {source: env|file})".into(),
        ),
    })
}

fn resolve_ref(r: &SecretRef) -> Result<Credential, String> {
    let value = r.resolve().map_err(|e| e.to_string())?;
    let value = value.expose_secret().trim();
    if value.is_empty() {
        return Err("resolves to an empty value".into());
    }
    Ok(Credential::new(value.to_string()))
}

/// The adapters `config` asks for: every account of a channel deepcli has an adapter for
/// (`slack`, `telegram`, `discord`) that is not in `mode: bridge`, disabled ones too (to say so).
pub(crate) fn specs(config: &Config) -> Vec<AdapterSpec> {
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
        let guild_roles = |guilds: &indexmap::IndexMap<String, crate::config::model::GuildSpec>| {
            guilds.values().any(|g| {
                g.roles.as_ref().is_some_and(|r| !r.is_empty())
                    || g.channels
                        .values()
                        .any(|c| c.roles.as_ref().is_some_and(|r| !r.is_empty()))
            })
        };
        for account in channel.accounts() {
            let spec = account.spec;
            let mode = spec.mode.unwrap_or(platform.default_mode());
            if mode == AdapterMode::Bridge {
                continue;
            }
            let bound_by_role = config.bindings.iter().any(|b| {
                let m = &b.spec.matcher;
                crate::ids::channel(&m.channel) == channel_id
                    && m.account_id.as_deref().is_none_or(|a| {
                        a.trim() == "*" || crate::ids::account_id(a) == account.normalized
                    })
                    && m.roles.as_ref().is_some_and(|r| !r.is_empty())
            });
            let guilds = if spec.guilds.is_empty() {
                &channel.spec.guilds
            } else {
                &spec.guilds
            };
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
                bot_token: resolve(secrets.get(platform.token_field()))
                    .unwrap_or_else(|| Err("not set".into())),
                app_token: resolve(secrets.get("appToken")),
                signing_secret: resolve(secrets.get("signingSecret")),
                webhook_secret: resolve(secrets.get("webhookSecret")),
                webhook_url: spec.webhook_url.clone(),
                reply_to_mode: spec.reply_to_mode.unwrap_or_default(),
                max_reply_messages: spec
                    .max_reply_messages
                    .map_or(MAX_REPLY_MESSAGES, |n| n as usize),
                discussion: spec.discussion.clone(),
                group_discussions: group_discussions.clone(),
                application_id: spec.application_id.clone(),
                uses_roles: platform == Platform::Discord && (bound_by_role || guild_roles(guilds)),
            });
        }
    }
    out
}

/// The bot an account speaks as, from `getMe` / `auth.test` / Discord's READY or
/// `GET /users/@me`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// A call that got no answer from the platform: its host could not be resolved, connected to
/// or spoken TLS with, or it did not answer in time. Nothing is known of the credentials then:
/// it is never said as a refusal of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreached {
    /// The API's host (from `apiBase`), or the base itself when it names none.
    pub host: String,
    /// What failed, without the URL (a Telegram URL holds the bot token).
    pub detail: String,
}

impl std::fmt::Display for Unreached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot reach {}: {}", self.host, self.detail)
    }
}

/// The host (and port, when `base` gives one) of an API base URL, as [`Unreached`] names it;
/// the base itself when it names no host.
pub(crate) fn api_host(base: &str) -> String {
    match reqwest::Url::parse(base) {
        Ok(url) => match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            (None, _) => base.to_string(),
        },
        Err(_) => base.to_string(),
    }
}

/// How a request to the platform at `base` failed to be sent: [`Unreached`] when it never got
/// an answer (DNS, connect, TLS, timeout), else the transport error's words.
pub(crate) fn send_failed(base: &str, e: reqwest::Error) -> Result<Unreached, String> {
    use std::io::ErrorKind;
    if e.is_connect() || e.is_timeout() {
        let host = api_host(base);
        let detail = match crate::http_client::io_cause(&e).map(|io| (io.kind(), io)) {
            Some((
                ErrorKind::ConnectionRefused
                | ErrorKind::NetworkUnreachable
                | ErrorKind::HostUnreachable
                | ErrorKind::TimedOut,
                io,
            )) if e.is_connect() => crate::http_client::connect_why(io),
            // A name that does not resolve, a TLS failure: reqwest's chain says which.
            _ => transport_error(e),
        };
        return Ok(Unreached { host, detail });
    }
    Err(transport_error(e))
}

/// A platform API error worded without its URL (a Telegram URL holds the bot token).
pub(crate) fn transport_error(e: reqwest::Error) -> String {
    crate::http_client::error_text(e)
}

/// A payload field read as the platforms' JSON is read by hand: a field of another type than
/// the one expected counts as absent, and never fails the payload around it.
pub(crate) fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

/// A list whose items are read leniently: an item of another shape is left out.
pub(crate) fn lenient_items<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    let serde_json::Value::Array(items) = value else {
        return Ok(None);
    };
    Ok(Some(
        items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
    ))
}

/// A value read leniently as a whole: `None` when it has another shape.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lenient<T>(pub Option<T>);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d).map(Lenient)
    }
}
