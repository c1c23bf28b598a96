//! `deepcli inbound send`: hand the running controller a message as a platform would, without
//! signing it: the operator token (found as `status` finds it) authorizes it instead. For trying
//! a hub out, and for checking a route end to end from a shell.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{ExitStatus, GlobalSettings};
use crate::controller::client::{Client, ClientError};
use crate::routing::Peer;
use crate::state::StateStore;

#[derive(Debug, Subcommand)]
pub(super) enum InboundCommand {
    /// Send a message into the hub through the running controller, as the channel account
    /// would: routed, delivered to the agent's runtime, answered; prints the reply.
    Send(SendArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
The inbound policy applies as to any message (docs/config.md, \"Inbound policy\"): in a group
that requires a mention, mention the bot with --mention ID (its botUserId) or in the text.

Exit codes:
  0  delivered and answered, or routed to an agent without a runtime (the route is the answer)
  1  refused: the answer says why (an undeclared or disabled account, a runtime down, …), or
     gated by the inbound policy (the reason and the setting that decided are printed)
  2  no controller runs on this state directory, or it could not be reached")]
pub(super) struct SendArgs {
    /// The channel: a key of `channels` in channels.yaml.
    #[arg(long, value_name = "NAME")]
    channel: String,
    /// The channel account [default: the channel's default account].
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// The conversation, as KIND:ID (direct:…, group:…, channel:…); none: the channel itself.
    #[arg(long, value_name = "KIND:ID", value_parser = super::route::parse_peer)]
    peer: Option<Peer>,
    /// A thread of the conversation: its own session.
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
    /// Who sends it [default: operator].
    #[arg(long, value_name = "ID")]
    sender: Option<String>,
    /// The sender is a bot (`sender.isBot`).
    #[arg(long)]
    bot: bool,
    /// A user id the message mentions natively, e.g. the account's botUserId (repeatable).
    #[arg(long = "mention", value_name = "ID")]
    mentions: Vec<String>,
    /// The message replies to one by this user id (`replyToSenderId`).
    #[arg(long, value_name = "ID")]
    reply_to: Option<String>,
    /// The platform's message id [default: a new one]; the same id twice in one conversation
    /// is one message, answered once.
    #[arg(long, value_name = "ID")]
    message_id: Option<String>,
    /// Print the whole answer (route, session key, reply or why it was gated) as JSON.
    #[arg(long)]
    json: bool,
    /// The message.
    text: String,
}

pub(super) fn run(global: &GlobalSettings, command: InboundCommand) -> ExitStatus {
    let InboundCommand::Send(args) = command;
    let mut err = anstream::stderr();
    let dir = global.state();
    let client = match StateStore::open_existing(&dir) {
        Ok(Some(store)) => Client::find(&dir, &store),
        Ok(None) => None,
        Err(e) => return super::state_error(&e),
    };
    let Some(client) = client else {
        let _ = writeln!(
            err,
            "error: no controller runs on state directory `{}`\nhint: start one with `deepcli up` (with the same --state-dir), or pass the --state-dir it runs with",
            dir.root().display()
        );
        return ExitStatus::Error;
    };
    let mut envelope = json!({
        "channel": args.channel,
        "accountId": args.account,
        "peer": args.peer,
        "threadId": args.thread,
        "messageId": args.message_id.unwrap_or_else(|| format!("cli-{}", uuid::Uuid::new_v4().simple())),
        "sender": {"id": args.sender.unwrap_or_else(|| "operator".into())},
        "text": args.text,
    });
    if args.bot {
        envelope["sender"]["isBot"] = true.into();
    }
    if !args.mentions.is_empty() {
        envelope["mentions"] = json!(args.mentions);
    }
    if let Some(to) = args.reply_to {
        envelope["replyToSenderId"] = to.into();
    }
    let answer = client.call(
        hyper::Method::POST,
        "/v1/send",
        Some(envelope.to_string().into()),
    );
    let body = match answer {
        Ok(body) => body,
        Err(ClientError::Refused { status, body }) => {
            let said: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
            if args.json {
                super::emit::print_json(&said);
            }
            let error = said["error"].as_str().unwrap_or("(no reason given)");
            let _ = writeln!(
                err,
                "error: the controller refused the message ({status}): {error}"
            );
            return ExitStatus::Failure;
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return ExitStatus::Error;
        }
    };
    let answer: Value = serde_json::from_slice(&body).unwrap_or_default();
    if args.json {
        super::emit::print_json(&answer);
        return if answer["gated"].is_object() {
            ExitStatus::Failure
        } else {
            ExitStatus::Success
        };
    }
    let mut out = anstream::stdout();
    let route = &answer["route"];
    let _ = writeln!(
        out,
        "{} → agent {} (session {}, {})",
        args.channel,
        route["agentId"].as_str().unwrap_or("?"),
        answer["sessionKey"].as_str().unwrap_or("?"),
        route["matchedBy"].as_str().unwrap_or("?"),
    );
    let gated = &answer["gated"];
    if let Some(reason) = gated["reason"].as_str() {
        let _ = writeln!(
            out,
            "not delivered: {reason} (decided by {})",
            gated["rule"].as_str().unwrap_or("?")
        );
        if let Some(code) = gated["pairingCode"].as_str() {
            let _ = writeln!(
                out,
                "pairing code {code}: approve it with `deepcli pairing approve {} {code}`",
                args.channel
            );
        }
        if gated["pairingPending"] == true {
            let _ = writeln!(
                out,
                "this sender's pairing request is pending (until {}): no new code; `deepcli pairing list` shows it",
                gated["expiresAt"].as_str().unwrap_or("?")
            );
        }
        // What the sender itself is told, where the policy answers it.
        if let Some(told) = answer["reply"]["text"].as_str() {
            let _ = writeln!(
                out,
                "the sender is told: {}",
                crate::shown::shown_lines(told)
            );
        }
        if reason == "not-mentioned" {
            let _ = writeln!(
                out,
                "(kept as context for the agent's next answer in this conversation; mention the bot with --mention ID or in the text)"
            );
        }
        return ExitStatus::Failure;
    }
    match answer["reply"]["text"].as_str() {
        Some(reply) => {
            let _ = writeln!(out, "{reply}");
        }
        None => {
            let _ = writeln!(
                out,
                "(no reply: {})",
                answer["note"].as_str().unwrap_or("not delivered")
            );
        }
    }
    ExitStatus::Success
}
