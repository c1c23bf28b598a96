//! `deepcli channels …`: arguments → `manage::channels` → JSON or a few lines of text.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::emit::{WriteArgs, context, emit, print_written};
use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::{channel_policy, channels, rpc};
use crate::plural::plural;

#[derive(Debug, Subcommand)]
pub(super) enum ChannelsCommand {
    /// The channels and accounts of channels.yaml (credential references, never values).
    List {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per account: enabled, credentials referenced and present, live status; --probe checks
    /// that the platform's API answers.
    #[command(after_help = "\
Exit codes:
  0  every enabled account has its credentials, and none is refused or unreachable
  1  an enabled account misses a credential, its adapter is auth_failed, or --probe found
     the platform refusing it, failing, or out of reach
  2  could not run (unreadable config directory, bad flags)")]
    Status {
        /// Connect to each platform's API host (DNS + TCP, no credentials sent).
        #[arg(long)]
        probe: bool,
        /// Bound of each probe, in milliseconds (at most 30000).
        #[arg(long, value_name = "MS", default_value_t = rpc::DEFAULT_PROBE_TIMEOUT_MS)]
        timeout: u64,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What each platform supports (threads, several accounts, bot-to-bot mentions, …).
    Capabilities {
        /// Only this platform (telegram, slack, discord, …).
        #[arg(long, value_name = "NAME")]
        channel: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add an account to a channel, with credentials as references only.
    Add(Box<AddArgs>),
    /// Disable an account (or a whole channel); with --delete, remove it.
    Remove(RemoveArgs),
    /// Set an inbound policy key (dmPolicy, allowFrom, groupPolicy, requireMention, …) on a
    /// channel, one of its accounts or groups, or `defaults`; --unset removes it.
    Set(SetArgs),
    /// Check an account's credentials with the platform (Slack auth.test, Telegram getMe),
    /// record the bot identity, and let a logged-out account connect again.
    Login(LoginArgs),
    /// Take an account's connection down until `login` and forget its identity (Telegram:
    /// also deleteWebhook).
    Logout(LoginArgs),
    /// Turn names (`@alice`, `#eng`) into the ids bindings need, through the platform's
    /// directory.
    Resolve(ResolveArgs),
    /// The last lines of the channels' logs.
    Logs {
        /// Only this channel's log.
        #[arg(long, value_name = "NAME")]
        channel: Option<String>,
        /// How many of the last lines to show, per channel.
        #[arg(long, value_name = "N", default_value_t = rpc::DEFAULT_LOG_LINES)]
        lines: usize,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Credential flags: each takes a reference (`env:VAR`, `file:/path` or `${VAR}`), never the
/// secret itself.
#[derive(Debug, Args)]
#[command(after_help = "\
REF is where the secret is, never the secret: env:VAR, file:/path or ${VAR}. A literal
secret is refused, and neither written nor echoed.")]
pub(super) struct AddArgs {
    /// The platform: telegram, slack, discord, … (`deepcli channels capabilities` lists them).
    #[arg(long, value_name = "NAME")]
    channel: String,
    /// The account id [default: default].
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// Display name of the account.
    #[arg(long, value_name = "DISPLAY")]
    name: Option<String>,
    /// The bot token (Slack, Telegram).
    #[arg(long, value_name = "REF")]
    bot_token: Option<String>,
    /// The app-level token (Slack).
    #[arg(long, value_name = "REF")]
    app_token: Option<String>,
    /// The user token (Slack).
    #[arg(long, value_name = "REF")]
    user_token: Option<String>,
    /// The request signing secret (Slack).
    #[arg(long, value_name = "REF")]
    signing_secret: Option<String>,
    /// The webhook secret (Telegram); the Access API checks inbound signatures with it.
    #[arg(long, value_name = "REF")]
    webhook_secret: Option<String>,
    /// The token (Discord, Matrix, WhatsApp).
    #[arg(long, value_name = "REF")]
    token: Option<String>,
    /// The password (Matrix, Signal).
    #[arg(long, value_name = "REF")]
    password: Option<String>,
    /// The API key (Google Chat, WhatsApp).
    #[arg(long, value_name = "REF")]
    api_key: Option<String>,
    /// The client secret (Google Chat, Microsoft Teams).
    #[arg(long, value_name = "REF")]
    client_secret: Option<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Keys: dmPolicy (pairing|allowlist|open|disabled), allowFrom (ids), groupPolicy
(allowlist|open|disabled), groupAllowFrom (ids), requireMention (true|false),
requireExplicitMention (true|false), mentionPatterns (regexes), historyLimit (N). A list key
takes its items as separate values (`allowFrom 111 222`, `allowFrom '*'`, or none for an
empty list). The whole config is checked first: a value validate refuses writes nothing.
docs/policy.md says what each key does.

Examples:
  deepcli channels set --channel telegram dmPolicy open
  deepcli channels set --channel telegram allowFrom '*'
  deepcli channels set --channel telegram --group -1001234567890 requireMention false
  deepcli channels set --channel slack --account work --unset dmPolicy")]
pub(super) struct SetArgs {
    /// The channel, or `defaults` for what every channel inherits.
    #[arg(long, value_name = "NAME")]
    channel: String,
    /// Set it on this account of the channel [default: the channel, for all its accounts].
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// Set it on this group of the channel (`*`: every group).
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    group: Option<String>,
    /// Remove the key from that level: it inherits again.
    #[arg(long)]
    unset: bool,
    /// The key, as channels.yaml spells it.
    key: String,
    /// The value; a list key's items (after `--` when one starts with `-`).
    values: Vec<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub(super) struct LoginArgs {
    /// The channel (slack or telegram).
    #[arg(long, value_name = "NAME")]
    channel: String,
    /// The account; without it, the channel's default account.
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// How long the platform may take, in milliseconds (at most 30000).
    #[arg(long, value_name = "MS", default_value_t = 15_000)]
    timeout: u64,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct ResolveArgs {
    /// The names: `@user`, `#channel` or (Discord) `&role` (or plain, with --kind).
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
    /// The channel (slack, telegram or discord).
    #[arg(long, value_name = "NAME")]
    channel: String,
    /// The account whose token reads the directory; default: the channel's default account.
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// What the names are: user, group, channel or role (Discord) (default: `#name` a channel,
    /// `&name` a role, else a user).
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// How long the platform may take, in milliseconds (at most 30000).
    #[arg(long, value_name = "MS", default_value_t = 15_000)]
    timeout: u64,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RemoveArgs {
    /// The channel (platform) of channels.yaml.
    #[arg(long, value_name = "NAME")]
    channel: String,
    /// The account; without it, the whole channel.
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// Remove it from channels.yaml instead of disabling it.
    #[arg(long)]
    delete: bool,
    #[command(flatten)]
    write: WriteArgs,
}

pub(super) fn run(global: &GlobalSettings, command: ChannelsCommand) -> ExitStatus {
    let ctx = context(global);
    let out = global.output;
    match command {
        ChannelsCommand::List { json } => emit(out, channels::list(&ctx), json, human_list),
        ChannelsCommand::Status {
            probe,
            timeout,
            json,
        } => {
            let timeout = Duration::from_millis(timeout.min(rpc::MAX_PROBE_TIMEOUT_MS));
            // A running controller holds the credentials that count: it answers (its
            // environment, its files, its live view of each account).
            let status = match ask_controller(global, probe, timeout) {
                Some(status) => Ok(status),
                None => channels::status(&ctx, probe, timeout),
            };
            emit(out, status, json, human_status)
        }
        ChannelsCommand::Capabilities { channel, json } => emit(
            out,
            channels::capabilities(channel.as_deref()),
            json,
            human_capabilities,
        ),
        ChannelsCommand::Add(args) => {
            let json = args.write.json;
            emit(out, channels::add(&ctx, &args.request()), json, human_add)
        }
        ChannelsCommand::Remove(args) => {
            let json = args.write.json;
            emit(
                out,
                channels::remove(&ctx, &args.request()),
                json,
                human_remove,
            )
        }
        ChannelsCommand::Set(args) => {
            let json = args.write.json;
            let request = channel_policy::SetRequest {
                channel: args.channel,
                account: args.account,
                group: args.group,
                key: args.key,
                values: args.values,
                unset: args.unset,
                dry_run: args.write.dry_run,
            };
            emit(out, channel_policy::set(&ctx, &request), json, human_set)
        }
        ChannelsCommand::Login(args) => {
            let request = channels::AccountRequest {
                channel: args.channel,
                account: args.account,
            };
            let timeout = Duration::from_millis(args.timeout.min(rpc::PLATFORM_TIMEOUT_MS));
            let params = serde_json::json!({"channel": request.channel, "account": request.account, "timeoutMs": timeout.as_millis() as u64});
            let result = match ask(global, "channels/login", params) {
                Some(answer) => answer,
                None => channels::login(&ctx, &request, timeout),
            };
            emit(out, result, args.json, human_login)
        }
        ChannelsCommand::Logout(args) => {
            let request = channels::AccountRequest {
                channel: args.channel,
                account: args.account,
            };
            let timeout = Duration::from_millis(args.timeout.min(rpc::PLATFORM_TIMEOUT_MS));
            let params = serde_json::json!({"channel": request.channel, "account": request.account, "timeoutMs": timeout.as_millis() as u64});
            let result = match ask(global, "channels/logout", params) {
                Some(answer) => answer,
                None => channels::logout(&ctx, &request, timeout),
            };
            emit(out, result, args.json, human_logout)
        }
        ChannelsCommand::Resolve(args) => {
            let request = channels::ResolveRequest {
                channel: args.channel,
                account: args.account,
                names: args.names,
                kind: args.kind,
            };
            let timeout = Duration::from_millis(args.timeout.min(rpc::PLATFORM_TIMEOUT_MS));
            let params = serde_json::json!({"channel": request.channel, "account": request.account, "names": request.names, "kind": request.kind, "timeoutMs": timeout.as_millis() as u64});
            let result = match ask(global, "channels/resolve", params) {
                Some(answer) => answer,
                None => channels::resolve(&ctx, &request, timeout),
            };
            emit(out, result, args.json, human_resolve)
        }
        ChannelsCommand::Logs {
            channel,
            lines,
            json,
        } => emit(
            out,
            channels::logs(&ctx, channel.as_deref(), lines),
            json,
            human_logs,
        ),
    }
}

impl AddArgs {
    fn request(self) -> channels::AddRequest {
        let mut credentials = indexmap::IndexMap::new();
        for (field, value) in [
            ("botToken", self.bot_token),
            ("appToken", self.app_token),
            ("userToken", self.user_token),
            ("signingSecret", self.signing_secret),
            ("webhookSecret", self.webhook_secret),
            ("token", self.token),
            ("password", self.password),
            ("apiKey", self.api_key),
            ("clientSecret", self.client_secret),
        ] {
            if let Some(value) = value {
                credentials.insert(field.to_string(), value);
            }
        }
        channels::AddRequest {
            channel: self.channel,
            account: self.account,
            name: self.name,
            credentials,
            dry_run: self.write.dry_run,
        }
    }
}

impl RemoveArgs {
    fn request(self) -> channels::RemoveRequest {
        channels::RemoveRequest {
            channel: self.channel,
            account: self.account,
            delete: self.delete,
            dry_run: self.write.dry_run,
        }
    }
}

fn human_list(r: &channels::ChannelsList, out: Output) {
    let mut out = out.answer();
    if r.channels.is_empty() {
        let _ = writeln!(out, "No channels.");
    }
    for c in &r.channels {
        let _ = writeln!(
            out,
            "{}{}  ({})",
            c.channel,
            if c.enabled { "" } else { " (disabled)" },
            plural(c.bindings, "binding", "bindings")
        );
        for a in &c.accounts {
            let creds: Vec<String> = a
                .credentials
                .iter()
                .map(|c| format!("{}={}", c.field, c.reference))
                .collect();
            let _ = writeln!(
                out,
                "  {}{}{}  {}",
                a.id,
                if a.default { " (default)" } else { "" },
                if a.enabled { "" } else { " (disabled)" },
                creds.join(" ")
            );
        }
    }
}

/// `channels/status` answered by the running controller, if one runs on this state.
fn ask_controller(
    global: &GlobalSettings,
    probe: bool,
    timeout: Duration,
) -> Option<channels::StatusResult> {
    let dir = global.state();
    let store = crate::state::StateStore::open_existing(&dir).ok()??;
    let client = crate::controller::client::Client::find(&dir, &store)?;
    let request = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "_mustang.agent/channels/status",
        "params": {"probe": probe, "timeoutMs": timeout.as_millis() as u64},
    });
    let body = client
        .call(
            hyper::Method::POST,
            "/rpc",
            Some(request.to_string().into()),
        )
        .ok()?;
    let answer: serde_json::Value = serde_json::from_slice(&body).ok()?;
    serde_json::from_value(answer.get("result")?.clone()).ok()
}

/// Asks the running controller (its environment holds the credentials that count) to run a
/// management method; `None` when no controller answers, so the caller runs it here. A
/// refusal the controller answers is this command's refusal.
fn ask<T: serde::de::DeserializeOwned>(
    global: &GlobalSettings,
    method: &str,
    params: serde_json::Value,
) -> Option<crate::manage::Result<T>> {
    let dir = global.state();
    let store = crate::state::StateStore::open_existing(&dir).ok()??;
    let client = crate::controller::client::Client::find(&dir, &store)?;
    let request = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": format!("{}{method}", rpc::PREFIX), "params": params,
    });
    let body = client
        .call(
            hyper::Method::POST,
            "/rpc",
            Some(request.to_string().into()),
        )
        .ok()?;
    let answer: serde_json::Value = serde_json::from_slice(&body).ok()?;
    if let Some(result) = answer.get("result") {
        return serde_json::from_value(result.clone()).ok().map(Ok);
    }
    let error = answer.get("error")?;
    let message = error["message"].as_str().unwrap_or("refused").to_string();
    let hint = error["data"]["hint"].as_str().map(str::to_string);
    Some(Err(crate::manage::ManageError::Refused { message, hint }))
}

fn human_login(r: &channels::LoginResult, out: Output) {
    let mut out = out.answer();
    let _ = writeln!(
        out,
        "{}/{}: the platform knows these credentials as bot {} ({}){}",
        r.channel,
        r.account,
        r.identity.bot_user_id,
        r.identity.name.as_deref().unwrap_or("no name"),
        if r.recorded { "; recorded" } else { "" }
    );
}

fn human_logout(r: &channels::LogoutResult, out: Output) {
    let mut out = out.answer();
    let _ = writeln!(
        out,
        "{}/{}: logged out; the controller's connection stays down until `deepcli channels login --channel {} --account {}`",
        r.channel, r.account, r.channel, r.account
    );
    match (r.webhook_deleted, &r.webhook_error) {
        (Some(true), _) => {
            let _ = writeln!(out, "Telegram webhook deleted.");
        }
        (_, Some(why)) => {
            let _ = writeln!(out, "Telegram webhook not deleted: {why}");
        }
        _ => {}
    }
}

fn human_resolve(r: &channels::ResolveResult, out: Output) {
    let mut out = out.answer();
    for n in &r.names {
        let line = match (n.status.as_str(), &n.id) {
            ("found", Some(id)) => format!("{}\t{id}", n.name),
            ("ambiguous", _) => {
                let c: Vec<String> = n
                    .candidates
                    .iter()
                    .map(|c| format!("{} ({})", c.id, c.name))
                    .collect();
                format!("{}\tambiguous: {}", n.name, c.join(", "))
            }
            _ => match &n.note {
                Some(note) => format!("{}\tnot found ({note})", n.name),
                None => format!("{}\tnot found", n.name),
            },
        };
        let _ = writeln!(out, "{line}");
    }
}

fn human_status(r: &channels::StatusResult, out: Output) {
    let mut out = out.answer();
    let _ = writeln!(
        out,
        "{}",
        match r.status_source.as_deref() {
            Some("controller") => "credentials as the running controller finds them",
            _ => "no controller runs: credentials as this shell finds them (env, files)",
        }
    );
    for a in &r.accounts {
        let missing: Vec<&str> = a
            .credentials
            .iter()
            .filter(|c| c.present != Some(true))
            .map(|c| c.reference.as_str())
            .collect();
        let _ = writeln!(
            out,
            "{}:{}  {}  {}{}{}",
            a.channel,
            a.account,
            if a.enabled { "enabled" } else { "disabled" },
            if missing.is_empty() {
                "credentials present".to_string()
            } else {
                format!("missing {}", missing.join(", "))
            },
            a.live.as_ref().map(live_text).unwrap_or_default(),
            a.probe.as_ref().map_or(String::new(), |p| format!(
                "  probe: {}{}",
                p.result,
                p.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" ({e})"))
            ))
        );
    }
}

/// What the controller says of an account: its adapter's state when deepcli's own adapter
/// serves it (the signed envelope door does not matter then), else whether that door is open.
fn live_text(live: &serde_json::Value) -> String {
    let adapter = &live["adapter"];
    if let Some(state) = adapter["state"].as_str() {
        let mut text = format!("  adapter {state}");
        let mut details: Vec<String> = adapter["mode"]
            .as_str()
            .map(str::to_string)
            .into_iter()
            .collect();
        if let Some(bot) = adapter["identity"]["botUserId"].as_str() {
            let name = adapter["identity"]["name"].as_str().unwrap_or("-");
            details.push(format!("bot {bot} {name}"));
        }
        if let Some(error) = adapter["lastError"].as_str() {
            details.push(format!("last error: {error}"));
        }
        if !details.is_empty() {
            text.push_str(&format!(" ({})", details.join(", ")));
        }
        return text;
    }
    match (live["inbound"].as_str(), live["reason"].as_str()) {
        (Some(state), Some(reason)) => format!("  inbound {state}: {reason}"),
        (Some(state), None) => format!("  inbound {state}"),
        _ => String::new(),
    }
}

fn human_capabilities(r: &channels::CapabilitiesResult, out: Output) {
    let mut out = out.answer();
    let yn = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        out,
        "{:<11} {:<9} {:<8} {:<13} {:<11} {:<19} credentials",
        "channel", "adapter", "threads", "multiAccount", "bot-to-bot", "allowBots:mentions"
    );
    for c in &r.channels {
        let _ = writeln!(
            out,
            "{:<11} {:<9} {:<8} {:<13} {:<11} {:<19} {}",
            c.channel,
            c.adapter.as_str(),
            yn(c.threads),
            yn(c.multi_account),
            yn(c.bot_to_bot_mentions),
            yn(c.allow_bots_mentions),
            c.credentials.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nbuilt-in: `deepcli up` connects to the platform itself. bridge: an external bridge signs\nthe platform's messages to POST /v1/inbound (docs/access.md). local: `deepcli inbound send`."
    );
}

fn human_add(r: &channels::AddResult, out: Output) {
    let mut notes = out.note();
    let channel = &r.channel;
    let dry_run = r.written.dry_run;
    if let Some(old) = &r.moved_to_default {
        let becomes = if dry_run { "would become" } else { "is now" };
        let _ = writeln!(
            notes,
            "Account `{old}` of `{channel}` {becomes} `default` (same settings), so messages without an account id keep their route."
        );
    }
    if let Some(old) = &r.default_account {
        let set = if dry_run { "Would set" } else { "Set" };
        let _ = writeln!(
            notes,
            "{set} `defaultAccount: {old}` on `{channel}` so messages without an account id keep their route."
        );
    }
    print_written(&r.written, out);
}

fn human_set(r: &channel_policy::SetResult, out: Output) {
    print_written(&r.written, out);
    if r.written.files.is_empty() {
        return;
    }
    let dry = r.written.dry_run;
    let line = match &r.value {
        Some(v) if dry => format!("Would set `{}: {v}`.", r.path),
        Some(v) => format!("Set `{}: {v}`.", r.path),
        None if dry => format!("Would remove `{}`: it would inherit again.", r.path),
        None => format!("Removed `{}`: it inherits again.", r.path),
    };
    let _ = writeln!(out.note(), "{line}");
}

fn human_remove(r: &channels::RemoveResult, out: Output) {
    print_written(&r.written, out);
}

fn human_logs(r: &channels::LogsResult, out: Output) {
    let mut out = out.answer();
    if r.logs.is_empty() {
        let _ = writeln!(out, "No channel logs in {}.", r.dir.display());
    }
    for log in &r.logs {
        let _ = writeln!(out, "==> {} <==", log.file.display());
        for line in &log.lines {
            let _ = writeln!(out, "{line}");
        }
    }
}
