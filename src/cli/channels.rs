//! `deepcli channels …`: arguments → `manage::channels` → JSON or a few lines of text.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::emit::{WriteArgs, context, emit, print_written};
use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::{channels, rpc};
use crate::plural::plural;

#[derive(Debug, Subcommand)]
pub enum ChannelsCommand {
    /// The channels and accounts of channels.yaml (credential references, never values).
    List {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Per account: enabled, credentials referenced and present, live status; --probe checks
    /// that the platform's API answers.
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
pub struct AddArgs {
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
pub struct RemoveArgs {
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

pub fn run(global: &GlobalSettings, command: ChannelsCommand) -> ExitStatus {
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
    let dir = crate::state::StateDir::new(&global.load.state_dir);
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
        let inbound = a.live.as_ref().and_then(|l| {
            let state = l["inbound"].as_str()?;
            Some(match l["reason"].as_str() {
                Some(reason) => format!("  inbound: {state} ({reason})"),
                None => format!("  inbound: {state}"),
            })
        });
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
            inbound.unwrap_or_default(),
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

fn human_capabilities(r: &channels::CapabilitiesResult, out: Output) {
    let mut out = out.answer();
    let yn = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        out,
        "{:<11} {:<8} {:<13} {:<12} {:<17} credentials",
        "channel", "threads", "multiAccount", "bot-to-bot", "allowBots:mentions"
    );
    for c in &r.channels {
        let _ = writeln!(
            out,
            "{:<11} {:<8} {:<13} {:<12} {:<17} {}",
            c.channel,
            yn(c.threads),
            yn(c.multi_account),
            yn(c.bot_to_bot_mentions),
            yn(c.allow_bots_mentions),
            c.credentials.join(", ")
        );
    }
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
