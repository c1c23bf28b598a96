//! `channels list | status | capabilities | add | remove | logs`: the service functions and
//! their result shapes. Channel config and credentials live in channels.yaml; route ownership
//! lives only in bindings.yaml (`agents bind`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::capabilities::{self, Capabilities};
use super::edit::{Yaml, key};
use super::files::Change;
use super::{ManageContext, ManageError, Result, Written, did_you_mean};
use crate::config::model::{SECRET_FIELDS, Secret, SecretRef};
use crate::config::{Channel, Config, FileKind};
use crate::ids::{self, DEFAULT_ACCOUNT};
use crate::platform::probe::CheckError;

// ---- results ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialView {
    pub field: String,
    /// `env:TELEGRAM_BOT_TOKEN`, `file:/run/secrets/x`, or `inline` (an error the validator
    /// reports; the value is never shown).
    pub reference: String,
    /// Whether the env var is set / the file exists (`status` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountView {
    pub id: String,
    pub name: Option<String>,
    pub enabled: bool,
    pub default: bool,
    pub credentials: Vec<CredentialView>,
    /// Senders the operator approved by pairing (`deepcli pairing approve`), from the state
    /// database: they may send direct messages besides `allowFrom`.
    pub paired_senders: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelView {
    pub channel: String,
    pub enabled: bool,
    pub default_account: String,
    pub accounts: Vec<AccountView>,
    /// How many bindings route this channel.
    pub bindings: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelsList {
    pub channels: Vec<ChannelView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountStatus {
    pub channel: String,
    pub account: String,
    pub enabled: bool,
    /// Every credential is referenced and its env var / file is there.
    pub configured: bool,
    pub credentials: Vec<CredentialView>,
    /// What the controller reports for this account, if it reports anything.
    pub live: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// Slack and Telegram: `connected` (the controller's live connection), `authenticated`,
    /// `refused` (the platform refused the credentials, or they do not resolve: nothing sent),
    /// `unreachable` (the platform's host was not reached: nothing is known of the
    /// credentials) or `failed` (an answer that is not the platform's API's). Elsewhere:
    /// `reachable`, `unreachable`, `local` (nothing to reach), `skipped` (disabled or no known
    /// endpoint).
    pub result: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// Slack and Telegram: the bot the credentials belong to (`id` and name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusResult {
    pub accounts: Vec<AccountStatus>,
    /// `controller`, `state`, or null.
    pub status_source: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitiesResult {
    pub channels: Vec<Capabilities>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddResult {
    pub channel: String,
    pub account: String,
    /// The channel was not declared before.
    pub created_channel: bool,
    /// The one existing account was renamed to `default` (its values kept) as the channel got
    /// its second account, so that messages without an account id keep their route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to_default: Option<String>,
    /// The one existing account became `defaultAccount` (bindings name it, so it kept its id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_account: Option<String>,
    pub credentials: Vec<CredentialView>,
    pub written: Written,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveResult {
    pub channel: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `disabled` or `deleted`.
    pub action: &'static str,
    pub written: Written,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogFile {
    pub channel: String,
    pub file: PathBuf,
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogsResult {
    pub logs: Vec<LogFile>,
    /// The directory channel logs are read from.
    pub dir: PathBuf,
}

// ---- requests --------------------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddRequest {
    pub channel: String,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Secret field → reference (`env:VAR`, `file:/path`, `${VAR}`).
    #[serde(default)]
    pub credentials: indexmap::IndexMap<String, String>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoveRequest {
    pub channel: String,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub delete: bool,
    #[serde(default)]
    pub dry_run: bool,
}

// ---- helpers ---------------------------------------------------------------------------------

fn reference_text(secret: &Secret) -> String {
    match secret {
        Secret::Ref(SecretRef::Env { id }) => format!("env:{id}"),
        Secret::Ref(SecretRef::File { path }) => format!("file:{path}"),
        Secret::Inline(_) => "inline".to_string(),
    }
}

fn present(secret: &Secret) -> bool {
    match secret {
        Secret::Ref(SecretRef::Env { id }) => std::env::var_os(id).is_some_and(|v| !v.is_empty()),
        Secret::Ref(SecretRef::File { path }) => std::path::Path::new(path).is_file(),
        Secret::Inline(_) => false,
    }
}

fn default_account(channel: &Channel) -> String {
    channel
        .spec
        .default_account
        .clone()
        .unwrap_or_else(|| DEFAULT_ACCOUNT.to_string())
}

fn find_channel<'c>(config: &'c Config, name: &str) -> Result<&'c Channel> {
    let wanted = ids::channel(name);
    config
        .channels
        .iter()
        .find(|c| ids::channel(&c.id) == wanted)
        .ok_or_else(|| {
            ManageError::not_found(
                format!("channels.yaml declares no channel `{name}`"),
                did_you_mean(name, config.channels.iter().map(|c| c.id.as_str()))
                    .or_else(|| Some("add it with `deepcli channels add --channel NAME`".into())),
            )
        })
}

/// Parses a credential reference; a literal secret is refused.
pub fn parse_reference(field: &str, raw: &str) -> Result<SecretRef> {
    let text = raw.trim();
    let hint = format!(
        "pass a reference, never the secret: --{} env:VAR, file:/path or '${{VAR}}'",
        kebab(field)
    );
    if let Some(id) = text.strip_prefix("env:") {
        if let Secret::Ref(r) = Secret::from_text(&format!("${{{id}}}")) {
            return Ok(r);
        }
        return Err(ManageError::usage(
            format!("`{field}`: `env:{id}` is not an environment variable name"),
            hint,
        ));
    }
    if let Some(path) = text.strip_prefix("file:") {
        if path.is_empty() {
            return Err(ManageError::usage(
                format!("`{field}`: `file:` needs a path"),
                hint,
            ));
        }
        return Ok(SecretRef::File {
            path: path.to_string(),
        });
    }
    match Secret::from_text(text) {
        Secret::Ref(r) => Ok(r),
        Secret::Inline(_) => Err(ManageError::refused(
            format!(
                "`{field}` looks like a literal secret; deepcli writes references only (the value was not written or shown)"
            ),
            hint,
        )),
    }
}

fn kebab(field: &str) -> String {
    let mut out = String::new();
    for c in field.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn reference_yaml(r: &SecretRef) -> Yaml {
    match r {
        SecretRef::Env { id } => Yaml::FlowMap(vec![
            ("source".into(), Yaml::str("env")),
            ("id".into(), Yaml::str(id)),
        ]),
        SecretRef::File { path } => Yaml::FlowMap(vec![
            ("source".into(), Yaml::str("file")),
            ("path".into(), Yaml::str(path)),
        ]),
    }
}

// ---- read-only commands ----------------------------------------------------------------------

pub fn list(ctx: &ManageContext) -> Result<ChannelsList> {
    let config = Change::read(ctx)?.current(ctx);
    let paired = super::pairing::paired_by_account(ctx)?;
    let mut channels: Vec<ChannelView> = config
        .channels
        .iter()
        .map(|c| channel_view(&config, c))
        .collect();
    for c in &mut channels {
        let channel = ids::channel(&c.channel).into_owned();
        for a in &mut c.accounts {
            let key = (channel.clone(), ids::account_id(&a.id).into_owned());
            a.paired_senders = paired.get(&key).cloned().unwrap_or_default();
        }
    }
    Ok(ChannelsList { channels })
}

fn channel_view(config: &Config, c: &Channel) -> ChannelView {
    let default = default_account(c);
    let mut accounts: Vec<AccountView> = c
        .accounts()
        .map(|a| AccountView {
            id: a.id.to_string(),
            name: a.spec.name.clone(),
            enabled: a.spec.enabled != Some(false),
            default: a.normalized == ids::account_id(&default),
            credentials: a
                .spec
                .secrets
                .iter()
                .map(|(field, s)| CredentialView {
                    field: field.clone(),
                    reference: reference_text(s),
                    present: None,
                })
                .collect(),
            paired_senders: Vec::new(),
        })
        .collect();
    if accounts.is_empty() {
        // A channel without accounts has exactly its implicit `default` account.
        accounts.push(AccountView {
            id: DEFAULT_ACCOUNT.to_string(),
            name: None,
            enabled: true,
            default: true,
            credentials: Vec::new(),
            paired_senders: Vec::new(),
        });
    }
    ChannelView {
        channel: c.id.clone(),
        enabled: c.spec.enabled != Some(false),
        default_account: default,
        accounts,
        bindings: config
            .bindings
            .iter()
            .filter(|b| ids::channel(&b.spec.matcher.channel) == ids::channel(&c.id))
            .count(),
    }
}

pub fn status(ctx: &ManageContext, probe: bool, timeout: Duration) -> Result<StatusResult> {
    let config = Change::read(ctx)?.current(ctx);
    let live = super::live::read(ctx);
    let mut accounts = Vec::new();
    for c in &config.channels {
        let view = channel_view(&config, c);
        for a in view.accounts {
            let spec = c.spec.accounts.get(&a.id);
            let credentials: Vec<CredentialView> = spec
                .map(|s| {
                    s.secrets
                        .iter()
                        .map(|(field, secret)| CredentialView {
                            field: field.clone(),
                            reference: reference_text(secret),
                            present: Some(present(secret)),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let enabled = view.enabled && a.enabled;
            let configured = credentials.iter().all(|c| c.present == Some(true));
            // The controller keys its channels and accounts by their normalized ids.
            let live_account = live
                .channels
                .as_ref()
                .and_then(|ch| ch.get(ids::channel(&c.id).as_ref()))
                .and_then(|ch| ch.get("accounts")?.get(ids::account_id(&a.id).as_ref()))
                .cloned();
            accounts.push(AccountStatus {
                channel: c.id.clone(),
                account: a.id.clone(),
                enabled,
                configured,
                credentials,
                probe: probe.then(|| {
                    adapter_probe(ctx, &c.id, &a.id, enabled, live_account.as_ref(), timeout)
                        .unwrap_or_else(|| run_probe(&c.id, enabled, timeout))
                }),
                live: live_account,
            });
        }
    }
    Ok(StatusResult {
        accounts,
        status_source: live.source.map(str::to_string),
    })
}

/// Slack and Telegram: the controller's live connection when it reports one connected, else a
/// real credential check (`getMe` / `auth.test`; `mode: bridge` accounts too: their token is
/// the bridge's). `None` for other channels.
fn adapter_probe(
    ctx: &ManageContext,
    channel: &str,
    account: &str,
    enabled: bool,
    live: Option<&Value>,
    timeout: Duration,
) -> Option<Probe> {
    crate::platform::Platform::of(&ids::channel(channel))?;
    let probe = |result: &str, error: Option<String>, bot: Option<String>, elapsed_ms| Probe {
        result: result.into(),
        target: None,
        error,
        elapsed_ms,
        bot,
    };
    if !enabled {
        return Some(probe(
            "skipped",
            Some("the account is disabled".into()),
            None,
            None,
        ));
    }
    let adapter = live.map(|l| &l["adapter"]);
    if let Some(adapter) = adapter.filter(|a| a["state"] == "connected") {
        let id = &adapter["identity"];
        return Some(probe(
            "connected",
            None,
            id["botUserId"]
                .as_str()
                .map(|b| format!("{b} ({})", id["name"].as_str().unwrap_or("-"))),
            None,
        ));
    }
    let spec = adapter_spec(ctx, channel, Some(account)).ok()?;
    let started = Instant::now();
    let resolved = spec.bot_token.is_ok();
    let checked = crate::platform::probe::check_now(&spec, timeout);
    let elapsed_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    let mut out = match checked {
        Ok(identity) => probe(
            "authenticated",
            None,
            Some(format!(
                "{} ({})",
                identity.bot_user_id,
                identity.name.as_deref().unwrap_or("-")
            )),
            elapsed_ms,
        ),
        // Not reached: the network's fault, not the credentials'.
        Err(CheckError::Unreachable(unreached)) => {
            probe("unreachable", Some(unreached.to_string()), None, elapsed_ms)
        }
        Err(e @ (CheckError::NoToken(_) | CheckError::Refused(_))) => {
            probe("refused", Some(e.to_string()), None, elapsed_ms)
        }
        Err(e @ CheckError::Failed(_)) => probe("failed", Some(e.to_string()), None, elapsed_ms),
    };
    // Said only when a call was made.
    out.target = resolved.then_some(spec.api_base);
    Some(out)
}

/// A bounded reachability check of the platform's API endpoint: DNS and a TCP connect, both
/// within `timeout`. It sends nothing and uses no credential; "reachable" means the platform's
/// API host answers from here, not that the token is good.
fn run_probe(channel: &str, enabled: bool, timeout: Duration) -> Probe {
    let skipped = |error: &str| Probe {
        result: "skipped".into(),
        target: None,
        error: Some(error.to_string()),
        elapsed_ms: None,
        bot: None,
    };
    if !enabled {
        return skipped("the account is disabled");
    }
    if ids::channel(channel) == "cli" {
        return Probe {
            result: "local".into(),
            target: None,
            error: None,
            elapsed_ms: None,
            bot: None,
        };
    }
    let Some(target) = probe_target(channel) else {
        return skipped("deepcli knows no API endpoint for this platform");
    };
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    // DNS resolution cannot be given a timeout; run it on a thread and stop waiting.
    let host = target.clone();
    std::thread::spawn(move || {
        use std::net::ToSocketAddrs;
        let _ = tx.send(host.to_socket_addrs().map(|a| a.collect::<Vec<_>>()));
    });
    let outcome = match rx.recv_timeout(timeout) {
        Err(_) => Err("timed out resolving the host".to_string()),
        Ok(Err(e)) => Err(format!("cannot resolve the host: {e}")),
        Ok(Ok(addrs)) => {
            let left = timeout.saturating_sub(started.elapsed());
            match addrs.first() {
                None => Err("the host has no address".to_string()),
                Some(_) if left.is_zero() => Err("timed out".to_string()),
                Some(addr) => std::net::TcpStream::connect_timeout(addr, left)
                    .map(|_| ())
                    .map_err(|e| format!("cannot connect: {e}")),
            }
        }
    };
    let elapsed_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    match outcome {
        Ok(()) => Probe {
            result: "reachable".into(),
            target: Some(target),
            error: None,
            elapsed_ms,
            bot: None,
        },
        Err(error) => Probe {
            result: "unreachable".into(),
            target: Some(target),
            error: Some(error),
            elapsed_ms,
            bot: None,
        },
    }
}

#[cfg(not(feature = "failpoints"))]
fn probe_target(channel: &str) -> Option<String> {
    capabilities::probe_host(channel).map(str::to_string)
}

/// With the `failpoints` feature, `DEEPCLI_PROBE_TARGETS=telegram=127.0.0.1:4000,slack=…` puts
/// a platform's probe on another address: the binary-level test of the probe's results, which
/// cannot depend on the network.
#[cfg(feature = "failpoints")]
fn probe_target(channel: &str) -> Option<String> {
    let overridden = std::env::var("DEEPCLI_PROBE_TARGETS")
        .ok()
        .and_then(|list| {
            list.split(',').find_map(|pair| {
                let (name, target) = pair.split_once('=')?;
                (name == ids::channel(channel)).then(|| target.to_string())
            })
        });
    overridden.or_else(|| capabilities::probe_host(channel).map(str::to_string))
}

pub fn capabilities(channel: Option<&str>) -> Result<CapabilitiesResult> {
    let channels = match channel {
        None => capabilities::TABLE.to_vec(),
        Some(name) => vec![capabilities::lookup(name).cloned().ok_or_else(|| {
            ManageError::not_found(
                format!("deepcli knows no platform `{name}`"),
                did_you_mean(name, capabilities::TABLE.iter().map(|c| c.channel)).or_else(|| {
                    Some(format!(
                        "known platforms: {}",
                        capabilities::TABLE
                            .iter()
                            .map(|c| c.channel)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }),
            )
        })?],
    };
    Ok(CapabilitiesResult { channels })
}

/// The last `lines` lines of each channel's log, `<state>/logs/channels/<channel>.log`.
pub fn logs(ctx: &ManageContext, channel: Option<&str>, lines: usize) -> Result<LogsResult> {
    let config = Change::read(ctx)?.current(ctx);
    let dir = ctx.state_dir().logs().join("channels");
    let channels: Vec<String> = match channel {
        Some(name) => vec![find_channel(&config, name)?.id.clone()],
        None => config.channels.iter().map(|c| c.id.clone()).collect(),
    };
    let mut logs = Vec::new();
    for c in channels {
        let file = dir.join(format!("{c}.log"));
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let all: Vec<&str> = text.lines().collect();
        let from = all.len().saturating_sub(lines);
        logs.push(LogFile {
            channel: c,
            file,
            lines: all[from..].iter().map(|l| l.to_string()).collect(),
        });
    }
    Ok(LogsResult { logs, dir })
}

// ---- add / remove ----------------------------------------------------------------------------

pub fn add(ctx: &ManageContext, request: &AddRequest) -> Result<AddResult> {
    let channel_name = request.channel.trim().to_string();
    if channel_name.is_empty() || channel_name.contains(char::is_whitespace) {
        return Err(ManageError::usage(
            format!("`{channel_name}` is not a channel id"),
            "pass --channel NAME, e.g. --channel telegram",
        ));
    }
    if ids::channel(&channel_name) == crate::config::model::CHANNEL_DEFAULTS {
        return Err(ManageError::usage(
            "`channels.defaults` is not a channel: it holds the inbound policy every channel inherits",
            "pass the platform's name, e.g. --channel telegram",
        ));
    }
    let account = request
        .account
        .clone()
        .unwrap_or_else(|| DEFAULT_ACCOUNT.to_string());
    let mut refs = Vec::new();
    for (field, raw) in &request.credentials {
        if !SECRET_FIELDS.contains(&field.as_str()) {
            return Err(ManageError::usage(
                format!("`{field}` is not a credential field"),
                format!("credential fields are {}", SECRET_FIELDS.join(", ")),
            ));
        }
        refs.push((field.clone(), parse_reference(field, raw)?));
    }
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let existing = config
        .channels
        .iter()
        .find(|c| ids::channel(&c.id) == ids::channel(&channel_name));
    let channel_key = existing.map_or(channel_name.clone(), |c| c.id.clone());
    let accounts_path = [key("channels"), key(&channel_key), key("accounts")];
    let mut moved_to_default = None;
    let mut default_account_set = None;
    if let Some(c) = existing {
        let wanted = ids::account_id(&account);
        if c.accounts().any(|a| a.normalized == wanted) {
            return Err(ManageError::refused(
                format!("channel `{}` already has an account `{account}`", c.id),
                "remove it first (`deepcli channels remove --channel … --account … --delete`), or pick another --account",
            ));
        }
        let ids: Vec<String> = c.spec.accounts.keys().cloned().collect();
        let new_is_default = wanted == DEFAULT_ACCOUNT;
        if c.spec.default_account.is_none() && !new_is_default {
            match ids.as_slice() {
                // The implicit `default` account becomes an explicit one.
                [] => change.edit(FileKind::Channels, |doc| {
                    let mut p = accounts_path.to_vec();
                    p.push(key(DEFAULT_ACCOUNT));
                    doc.set(&p, &Yaml::FlowMap(Vec::new()))
                })?,
                [only] if ids::account_id(only) != DEFAULT_ACCOUNT => {
                    let only_id = ids::account_id(only).into_owned();
                    let referenced = config.bindings.iter().any(|b| {
                        b.spec
                            .matcher
                            .account_id
                            .as_deref()
                            .is_some_and(|a| ids::account_id(a) == only_id)
                    });
                    if referenced {
                        change.edit(FileKind::Channels, |doc| {
                            doc.set(
                                &[key("channels"), key(&channel_key), key("defaultAccount")],
                                &Yaml::str(only),
                            )
                        })?;
                        default_account_set = Some(only.clone());
                    } else {
                        change.edit(FileKind::Channels, |doc| {
                            doc.rename_key(&accounts_path, only, DEFAULT_ACCOUNT)
                        })?;
                        moved_to_default = Some(only.clone());
                    }
                }
                _ => {}
            }
        }
    }
    let mut fields = Vec::new();
    if let Some(name) = &request.name {
        fields.push(("name".to_string(), Yaml::str(name)));
    }
    for (field, r) in &refs {
        fields.push((field.clone(), reference_yaml(r)));
    }
    let value = if fields.is_empty() {
        Yaml::FlowMap(Vec::new())
    } else {
        Yaml::Map(fields)
    };
    change.edit(FileKind::Channels, |doc| {
        let mut p = accounts_path.to_vec();
        p.push(key(&account));
        doc.set(&p, &value)
    })?;
    let written = change.commit(ctx, request.dry_run)?;
    Ok(AddResult {
        channel: channel_key,
        account,
        created_channel: existing.is_none(),
        moved_to_default,
        default_account: default_account_set,
        credentials: refs
            .iter()
            .map(|(field, r)| CredentialView {
                field: field.clone(),
                reference: reference_text(&Secret::Ref(r.clone())),
                present: None,
            })
            .collect(),
        written,
    })
}

pub fn remove(ctx: &ManageContext, request: &RemoveRequest) -> Result<RemoveResult> {
    let mut change = Change::read(ctx)?;
    let config = change.current(ctx);
    let c = find_channel(&config, &request.channel)?;
    let mut path = vec![key("channels"), key(&c.id)];
    if let Some(account) = &request.account {
        let wanted = ids::account_id(account);
        let Some(a) = c.accounts().find(|a| a.normalized == wanted) else {
            return Err(ManageError::not_found(
                format!("channel `{}` has no account `{account}`", c.id),
                did_you_mean(account, c.spec.accounts.keys().map(String::as_str)),
            ));
        };
        path.push(key("accounts"));
        path.push(key(a.id));
    }
    let action = if request.delete {
        change.edit(FileKind::Channels, |doc| doc.remove(&path))?;
        "deleted"
    } else {
        path.push(key("enabled"));
        change.edit(FileKind::Channels, |doc| doc.set(&path, &Yaml::Bool(false)))?;
        "disabled"
    };
    let written = change.commit(ctx, request.dry_run)?;
    Ok(RemoveResult {
        channel: c.id.clone(),
        account: request.account.clone(),
        action,
        written,
    })
}

// ---- login | logout | resolve (the platform adapters) ----------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoginResult {
    pub channel: String,
    pub account: String,
    /// The bot the platform says the credentials belong to.
    pub identity: crate::platform::Identity,
    /// Whether the identity was recorded in the state (not without a state directory).
    pub recorded: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogoutResult {
    pub channel: String,
    pub account: String,
    /// A recorded identity was forgotten.
    pub forgot_identity: bool,
    /// Telegram: whether `deleteWebhook` succeeded, and why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_deleted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolveResult {
    pub channel: String,
    pub account: String,
    pub names: Vec<crate::platform::probe::Resolution>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccountRequest {
    pub channel: String,
    #[serde(default)]
    pub account: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveRequest {
    pub channel: String,
    #[serde(default)]
    pub account: Option<String>,
    pub names: Vec<String>,
    /// `user`, `group` or `channel`; else `@name` a user and `#name` a channel.
    #[serde(default)]
    pub kind: Option<String>,
}

/// The adapter spec of a declared Slack or Telegram account (the channel's default account
/// when none is named).
fn adapter_spec(
    ctx: &ManageContext,
    channel: &str,
    account: Option<&str>,
) -> Result<crate::platform::AdapterSpec> {
    let config = Change::read(ctx)?.current(ctx);
    let declared = find_channel(&config, channel)?;
    let channel_id = ids::channel(&declared.id).into_owned();
    if crate::platform::Platform::of(&channel_id).is_none() {
        return Err(ManageError::refused(
            format!(
                "deepcli has no built-in adapter for channel `{}`: only slack and telegram",
                declared.id
            ),
            "an external bridge holds this channel's credentials",
        ));
    }
    let account = account.map_or_else(|| default_account(declared), str::to_string);
    let normalized = ids::account_id(&account).into_owned();
    if !declared.accounts().any(|a| a.normalized == normalized) {
        return Err(ManageError::not_found(
            format!("channel `{}` has no account `{account}`", declared.id),
            did_you_mean(&account, declared.spec.accounts.keys().map(String::as_str)),
        ));
    }
    let mut config = config;
    // A `bridge` account's credentials are checked all the same.
    for c in &mut config.channels {
        for a in c.spec.accounts.values_mut() {
            a.mode = None;
        }
    }
    crate::platform::specs(&config)
        .into_iter()
        .find(|s| s.channel == channel_id && s.account == normalized)
        .ok_or_else(|| ManageError::not_found(format!("no account `{account}`"), None))
}

fn platform_refused(what: &str, why: String) -> ManageError {
    ManageError::refused(
        format!("{what}: {why}"),
        "check the credential references (`deepcli channels status`) and `apiBase`",
    )
}

/// A failed credential check in the words of what happened: a platform that was not reached
/// said nothing of the credentials, and one that did not answer as its API is not a refusal.
fn check_failed(e: CheckError) -> ManageError {
    match e {
        CheckError::Refused(why) => platform_refused("the platform refused the credentials", why),
        CheckError::NoToken(why) => ManageError::refused(
            format!("the credentials do not resolve: {why}; nothing was sent"),
            "export the variable, or write the file, the reference names (`deepcli channels status`, `deepcli doctor`)",
        ),
        CheckError::Unreachable(unreached) => ManageError::refused(
            format!("{unreached}; the credentials were not checked"),
            "check this host's network, DNS and proxy (HTTPS_PROXY), or the account's `apiBase` (`deepcli doctor` tests each step)",
        ),
        CheckError::Failed(why) => ManageError::refused(
            format!("the platform did not answer as its API: {why}"),
            "try again later; check the account's `apiBase`",
        ),
    }
}

/// `channels login`: checks the credentials with the platform (`getMe` / `auth.test`),
/// records the bot identity, and lets a logged-out account connect again.
pub fn login(
    ctx: &ManageContext,
    request: &AccountRequest,
    timeout: Duration,
) -> Result<LoginResult> {
    let spec = adapter_spec(ctx, &request.channel, request.account.as_deref())?;
    let identity = crate::platform::probe::check_now(&spec, timeout).map_err(check_failed)?;
    let recorded = match adapter_store(ctx)? {
        Some(store) => {
            store
                .record_identity(&spec.channel, &spec.account, &identity)
                .and_then(|()| store.set_logged_out(&spec.channel, &spec.account, false))
                .map_err(state_error)?;
            true
        }
        None => false,
    };
    Ok(LoginResult {
        channel: spec.channel,
        account: spec.account,
        identity,
        recorded,
    })
}

/// `channels logout`: the controller's connection goes down and stays down until `login`;
/// the recorded identity is forgotten; Telegram's webhook is deleted.
pub fn logout(
    ctx: &ManageContext,
    request: &AccountRequest,
    timeout: Duration,
) -> Result<LogoutResult> {
    let spec = adapter_spec(ctx, &request.channel, request.account.as_deref())?;
    let forgot_identity = match adapter_store(ctx)? {
        Some(store) => {
            store
                .set_logged_out(&spec.channel, &spec.account, true)
                .map_err(state_error)?;
            store
                .forget_identity(&spec.channel, &spec.account)
                .map_err(state_error)?
        }
        None => false,
    };
    let deleted = (spec.platform == crate::platform::Platform::Telegram)
        .then(|| crate::platform::probe::delete_webhook_now(&spec, timeout));
    Ok(LogoutResult {
        channel: spec.channel,
        account: spec.account,
        forgot_identity,
        webhook_deleted: deleted.as_ref().map(Result::is_ok),
        webhook_error: deleted.and_then(Result::err),
    })
}

/// `channels resolve`: names to ids through the platform's directory.
pub fn resolve(
    ctx: &ManageContext,
    request: &ResolveRequest,
    timeout: Duration,
) -> Result<ResolveResult> {
    if request.names.is_empty() {
        return Err(ManageError::usage(
            "nothing to resolve",
            "name at least one `@user` or `#channel`",
        ));
    }
    if let Some(kind) = &request.kind
        && !["user", "group", "channel", "role"].contains(&kind.as_str())
    {
        return Err(ManageError::usage(
            format!("unknown kind `{kind}`"),
            "--kind user, group, channel or role (Discord)",
        ));
    }
    let spec = adapter_spec(ctx, &request.channel, request.account.as_deref())?;
    let names = crate::platform::probe::resolve_now(
        &spec,
        request.names.clone(),
        request.kind.clone(),
        timeout,
    )
    .map_err(|why| platform_refused("the platform's directory could not be read", why))?;
    Ok(ResolveResult {
        channel: spec.channel,
        account: spec.account,
        names,
    })
}

/// The adapters' rows of an existing state (none is created here).
fn adapter_store(ctx: &ManageContext) -> Result<Option<crate::platform::accounts::AccountStore>> {
    let dir = ctx.state_dir();
    match crate::state::StateStore::open_existing(&dir).map_err(state_error)? {
        None => Ok(None),
        Some(store) => {
            drop(store);
            crate::platform::accounts::AccountStore::open(&dir)
                .map(Some)
                .map_err(state_error)
        }
    }
}

fn state_error(e: crate::state::StateError) -> ManageError {
    ManageError::Io {
        context: "the state database".into(),
        source: std::io::Error::other(e.to_string()),
    }
}
