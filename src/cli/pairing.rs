//! `deepcli pairing …`: arguments → `manage::pairing` → JSON or a few lines of text.

use std::io::Write;

use clap::Subcommand;

use super::emit::{context, emit};
use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::pairing;

#[derive(Debug, Subcommand)]
pub(super) enum PairingCommand {
    /// The pending pairing requests (with their codes) and the approved senders.
    List {
        /// Only this channel.
        #[arg(long, value_name = "NAME")]
        channel: Option<String>,
        /// Only this account of the channel.
        #[arg(long, value_name = "ID")]
        account: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve the sender who was given CODE: it may send direct messages from now on.
    ///
    /// The channel is named by --channel, as in every other command, or first:
    /// `pairing approve telegram CODE`.
    #[command(override_usage = "deepcli pairing approve [OPTIONS] [CHANNEL] <CODE>")]
    Approve {
        /// [CHANNEL] CODE: the code the sender was given (case, spaces and dashes do not
        /// matter), after the channel the sender wrote on unless --channel names it.
        #[arg(value_name = "CODE", num_args = 1..=2, required = true)]
        words: Vec<String>,
        /// The channel the sender wrote on.
        #[arg(long, value_name = "NAME")]
        channel: Option<String>,
        /// Only a request of this account [default: any account of the channel].
        #[arg(long, value_name = "ID")]
        account: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Take back a sender's approval (and drop its pending request).
    ///
    /// The channel is named by --channel, or first: `pairing revoke telegram SENDER`.
    #[command(override_usage = "deepcli pairing revoke [OPTIONS] [CHANNEL] <SENDER>")]
    Revoke {
        /// [CHANNEL] SENDER: the sender id, after the channel unless --channel names it.
        #[arg(value_name = "SENDER", num_args = 1..=2, required = true)]
        words: Vec<String>,
        /// The channel.
        #[arg(long, value_name = "NAME")]
        channel: Option<String>,
        /// Only on this account [default: every account of the channel].
        #[arg(long, value_name = "ID")]
        account: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(global: &GlobalSettings, command: PairingCommand) -> ExitStatus {
    let ctx = context(global);
    let out = global.output;
    match command {
        PairingCommand::List {
            channel,
            account,
            json,
        } => emit(
            out,
            pairing::list(&ctx, &pairing::ListRequest { channel, account }),
            json,
            human_list,
        ),
        PairingCommand::Approve {
            words,
            channel,
            account,
            json,
        } => {
            let Some((channel, code)) = channel_and(words, channel, "CODE") else {
                return ExitStatus::Error;
            };
            emit(
                out,
                pairing::approve(
                    &ctx,
                    &pairing::ApproveRequest {
                        channel,
                        code,
                        account,
                    },
                ),
                json,
                |r, out| {
                    let p = &r.approved;
                    let _ = writeln!(
                        out.answer(),
                        "Approved sender {}{} on {}/{}: it may send direct messages now.",
                        p.sender_id,
                        p.sender_name
                            .as_deref()
                            .map_or_else(String::new, |n| format!(" ({n})")),
                        p.channel,
                        p.account_id
                    );
                },
            )
        }
        PairingCommand::Revoke {
            words,
            channel,
            account,
            json,
        } => {
            let Some((channel, sender)) = channel_and(words, channel, "SENDER") else {
                return ExitStatus::Error;
            };
            emit(
                out,
                pairing::revoke(
                    &ctx,
                    &pairing::RevokeRequest {
                        channel,
                        sender,
                        account,
                    },
                ),
                json,
                |r, out| {
                    let accounts: Vec<&str> =
                        r.revoked.iter().map(|p| p.account_id.as_str()).collect();
                    let _ = writeln!(
                        out.answer(),
                        "Revoked sender {} on {} (account {}).",
                        r.sender,
                        r.channel,
                        accounts.join(", ")
                    );
                },
            )
        }
    }
}

/// The channel and the one other word of `approve` and `revoke`: `[CHANNEL] WORD` or
/// `--channel CHANNEL WORD`. `None` after saying what is wrong.
fn channel_and(
    mut words: Vec<String>,
    flag: Option<String>,
    what: &str,
) -> Option<(String, String)> {
    let word = words.pop()?;
    match (words.pop(), flag) {
        (Some(first), Some(flag)) if first != flag => {
            eprintln!("error: two channels: `{first}` and --channel {flag}; name the channel once");
            None
        }
        (Some(channel), _) | (None, Some(channel)) => Some((channel, word)),
        (None, None) => {
            eprintln!("error: which channel? pass --channel NAME before {what}");
            eprintln!("hint: `deepcli pairing list` shows each request's channel");
            None
        }
    }
}

fn human_list(r: &pairing::PairingList, out: Output) {
    let mut w = out.answer();
    if r.pending.is_empty() && r.paired.is_empty() {
        let _ = writeln!(w, "No pairing requests, and no paired senders.");
        return;
    }
    if !r.pending.is_empty() {
        let _ = writeln!(
            w,
            "Pending (approve with `deepcli pairing approve <channel> <code>`):"
        );
        for p in &r.pending {
            let p_req = &p.request;
            let _ = writeln!(
                w,
                "  {}  {}/{}  sender {}{}  expires {}",
                p_req.code,
                p_req.channel,
                p_req.account_id,
                p_req.sender_id,
                p_req
                    .sender_name
                    .as_deref()
                    .map_or_else(String::new, |n| format!(" ({n})")),
                p.expires_at
            );
        }
    }
    if !r.paired.is_empty() {
        let _ = writeln!(w, "Paired:");
        for p in &r.paired {
            let _ = writeln!(
                w,
                "  {}/{}  sender {}{}  approved {}",
                p.channel,
                p.account_id,
                p.sender_id,
                p.sender_name
                    .as_deref()
                    .map_or_else(String::new, |n| format!(" ({n})")),
                p.approved_at
            );
        }
    }
}
