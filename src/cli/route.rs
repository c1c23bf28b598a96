//! `deepcli route`: which agent and session a message would get, and why.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::PathBuf;

use anstyle::{AnsiColor, Style};
use clap::Args;
use serde_json::json;

use super::{ExitStatus, GlobalSettings};
use crate::config::model::{DmScope, GroupScope};
use crate::routing::plan::TierOutcome;
use crate::routing::{Peer, RouteInput, RouteResult, RoutingPlan, document};

#[derive(Debug, Args)]
#[command(after_help = "\
Peers are KIND:ID, split at the first colon (ids may contain colons): direct:+15551234,
group:-100123, channel:C0123:thread. KIND is direct (or dm), group or channel.

--batch reads one JSON route input per line on stdin, with OpenClaw's field names
(channel, accountId, peer {kind, id}, parentPeer, guildId, teamId, memberRoleIds,
dmScope, groupScope), and writes one JSON result per line on stdout. A line that is not a
route input gets {\"error\": …, \"line\": n} and the batch goes on; the exit code is then 1.

Exit codes:
  0  routed
  1  the config has errors (nothing is routed), or a batch line was bad
  2  the command could not run (bad flags, unreadable config or plan)")]
pub struct RouteArgs {
    /// The platform the message arrived on (telegram, discord, slack, …).
    #[arg(long, required_unless_present = "batch", value_name = "CH")]
    channel: Option<String>,
    /// The channel account that received it [default: default].
    #[arg(long, value_name = "ID")]
    account: Option<String>,
    /// The conversation.
    #[arg(long, value_name = "KIND:ID", value_parser = parse_peer)]
    peer: Option<Peer>,
    /// The parent conversation of a thread.
    #[arg(long, value_name = "KIND:ID", value_parser = parse_peer)]
    parent_peer: Option<Peer>,
    /// The Discord guild.
    #[arg(long, value_name = "ID")]
    guild: Option<String>,
    /// The Slack team.
    #[arg(long, value_name = "ID")]
    team: Option<String>,
    /// A role of the sender in the guild (repeatable).
    #[arg(long = "role", value_name = "ID")]
    roles: Vec<String>,
    /// Caller override of the DM session scope: main, per-peer, per-channel-peer,
    /// per-account-channel-peer.
    #[arg(long, value_name = "S", value_parser = parse_scope::<DmScope>)]
    dm_scope: Option<DmScope>,
    /// Caller override of the group session scope: main, per-group.
    #[arg(long, value_name = "S", value_parser = parse_scope::<GroupScope>)]
    group_scope: Option<GroupScope>,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// Also show, tier by tier, which bindings were considered and why each did not match.
    #[arg(long)]
    explain: bool,
    /// Route JSON lines from stdin to JSON lines on stdout.
    #[arg(long, conflicts_with_all = [
        "channel", "account", "peer", "parent_peer", "guild", "team", "roles",
        "dm_scope", "group_scope", "json", "explain",
    ])]
    batch: bool,
    /// Route with a published routing-plan.json instead of the config directory.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
}

fn parse_peer(text: &str) -> Result<Peer, String> {
    match text.split_once(':') {
        Some((kind, id)) if !kind.trim().is_empty() => Ok(Peer {
            kind: kind.to_string(),
            id: id.to_string(),
        }),
        _ => Err("expected KIND:ID, e.g. direct:+15551234 or channel:C0123".to_string()),
    }
}

fn parse_scope<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).map_err(|e| {
        // serde says "unknown variant `x`, expected one of `a`, `b`": keep the list.
        let message = e.to_string();
        message
            .split_once(", expected ")
            .map_or(message.clone(), |(_, expected)| {
                format!("expected {expected}")
            })
    })
}

pub fn run(global: &GlobalSettings, args: RouteArgs) -> ExitStatus {
    let plan = match load_plan(global, args.plan.as_ref()) {
        Ok(plan) => plan,
        Err(status) => return status,
    };
    if args.batch {
        return batch(&plan);
    }
    let input = RouteInput {
        channel: args.channel.unwrap_or_default(),
        account_id: args.account,
        peer: args.peer,
        parent_peer: args.parent_peer,
        guild_id: args.guild,
        team_id: args.team,
        member_role_ids: args.roles,
        dm_scope: args.dm_scope,
        group_scope: args.group_scope,
    };
    let written = if args.json {
        let mut value = serde_json::to_value(plan.resolve(&input)).expect("results serialize");
        if args.explain {
            let explanation = plan.explain(&input);
            value["explain"] = explanation.tiers_json(&plan, &input);
            let mut all = notes(&explanation);
            all.extend(acp_note(&plan, &input));
            value["notes"] = json!(all);
        }
        let mut out = io::stdout().lock();
        writeln!(out, "{value:#}")
    } else {
        let text = if args.explain {
            let explanation = plan.explain(&input);
            let mut text = human(&explanation.result);
            explain_human(&mut text, &plan, &input, &explanation);
            text
        } else {
            human(&plan.resolve(&input))
        };
        let mut text = text;
        if let Some(note) = acp_note(&plan, &input) {
            let _ = writeln!(text, "{NOTE}note:{NOTE:#} {note}");
        }
        anstream::stdout().write_all(text.as_bytes())
    };
    if written.is_err() {
        return ExitStatus::Error;
    }
    ExitStatus::Success
}

/// The plan to route with: compiled from a config without errors, or loaded from a file.
/// Diagnostics go to stderr: stdout carries only results.
fn load_plan(
    global: &GlobalSettings,
    plan_file: Option<&PathBuf>,
) -> Result<RoutingPlan, ExitStatus> {
    let mut err = anstream::stderr();
    if let Some(path) = plan_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let _ = writeln!(err, "error: cannot read `{}`: {e}", path.display());
            ExitStatus::Error
        })?;
        return match document::load(&text) {
            Ok((_, plan)) => Ok(plan),
            Err(e) => {
                let _ = writeln!(err, "error: `{}`: {e}", path.display());
                Err(ExitStatus::Error)
            }
        };
    }
    // The plan is compiled while the rules run.
    let (report, plan) = super::load_valid_with(
        global,
        "nothing is routed until they are fixed",
        RoutingPlan::compile,
    )?;
    crate::threads::drop_in_background(report);
    Ok(plan)
}

/// JSON lines in, JSON lines out. Input is taken a block at a time (every complete line
/// buffered), and the answers to a block are written and flushed before the next read, so a
/// caller that writes one line and waits for the answer gets it.
///
/// A large block is cut at line ends into a piece per core, whose answers are made side by
/// side and written in order: the output is what one thread would write.
fn batch(plan: &RoutingPlan) -> ExitStatus {
    let mut stdin = io::stdin().lock();
    let mut out = io::stdout().lock();
    let mut lines = LineBuffer::with_capacity(256 * 1024);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut number = 0usize;
    let mut bad = 0usize;
    loop {
        let block = match lines.next_block(&mut stdin) {
            Ok(Some(block)) => block,
            Ok(None) => break,
            Err(e) => {
                let _ = writeln!(anstream::stderr(), "error: reading stdin: {e}");
                return ExitStatus::Error;
            }
        };
        let (answered, lines_read) = answer_block(plan, block, number, threads);
        for piece in answered {
            bad += piece.bad;
            if out.write_all(&piece.out).is_err() {
                // The reader went away (a closed pipe): nothing more to say.
                return ExitStatus::Error;
            }
            if piece.not_utf8 {
                let _ = out.flush();
                let _ = writeln!(
                    anstream::stderr(),
                    "error: reading stdin: stream did not contain valid UTF-8"
                );
                return ExitStatus::Error;
            }
        }
        number += lines_read;
        if out.flush().is_err() {
            return ExitStatus::Error;
        }
    }
    if bad > 0 {
        let _ = writeln!(
            anstream::stderr(),
            "error: {bad} of {number} lines were not route inputs (see the `error` lines)"
        );
        return ExitStatus::Failure;
    }
    ExitStatus::Success
}

/// The answers to the lines of one piece of input.
struct Answered {
    out: Vec<u8>,
    /// Lines that were not route inputs.
    bad: usize,
    /// A line was not UTF-8: `out` answers the lines before it, and the batch ends.
    not_utf8: bool,
}

/// Pieces smaller than this are not worth a thread.
const MIN_PIECE: usize = 32 * 1024;

/// Answers `block`, whose first line is line `first + 1` of the input, in up to `threads`
/// pieces on as many threads; and how many lines it holds.
fn answer_block(
    plan: &RoutingPlan,
    block: &[u8],
    first: usize,
    threads: usize,
) -> (Vec<Answered>, usize) {
    let pieces = cut_at_lines(block, (block.len() / MIN_PIECE).clamp(1, threads));
    let mut firsts = Vec::with_capacity(pieces.len());
    let mut next = first;
    for piece in &pieces {
        firsts.push(next);
        next += lines_in(piece);
    }
    let answered = std::thread::scope(|scope| {
        let others: Vec<_> = pieces[1..]
            .iter()
            .zip(&firsts[1..])
            .map(|(&piece, &first)| scope.spawn(move || answer(plan, piece, first)))
            .collect();
        let mut answered = vec![answer(plan, pieces[0], firsts[0])];
        answered.extend(
            others
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        answered
    });
    (answered, next - first)
}

/// `bytes` cut after line ends into `n` pieces of about equal size (fewer when the lines run
/// out); never none.
fn cut_at_lines(bytes: &[u8], n: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::with_capacity(n);
    let mut rest = bytes;
    for left in (1..n).rev() {
        let target = rest.len() / (left + 1);
        let Some(end) = rest[target..].iter().position(|&b| b == b'\n') else {
            break;
        };
        let (piece, after) = rest.split_at(target + end + 1);
        pieces.push(piece);
        rest = after;
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(rest);
    }
    pieces
}

/// Lines in `bytes`, the last one counted without its newline.
fn lines_in(bytes: &[u8]) -> usize {
    bytes.split_inclusive(|&b| b == b'\n').count()
}

/// Answers the lines of `piece`, the first of which is line `first + 1` of the input.
fn answer(plan: &RoutingPlan, piece: &[u8], first: usize) -> Answered {
    let mut answered = Answered {
        out: Vec::with_capacity(piece.len() * 3),
        bad: 0,
        not_utf8: false,
    };
    for (number, line) in (first + 1..).zip(piece.split_inclusive(|&b| b == b'\n')) {
        let Ok(line) = std::str::from_utf8(line) else {
            answered.not_utf8 = true;
            break;
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RouteInput>(line) {
            Ok(input) => plan.resolve(&input).write_json(&mut answered.out),
            Err(e) => {
                answered.bad += 1;
                let error = json!({"error": input_error(&e), "line": number});
                // Writing JSON into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut answered.out, &error);
            }
        }
        answered.out.push(b'\n');
    }
    answered
}

/// Blocks of whole lines of a byte stream, each line with its `\n` (the last one may lack
/// it), cut out of one buffer that is refilled only when it holds no complete line.
struct LineBuffer {
    buf: Vec<u8>,
    /// Where the unread bytes start.
    start: usize,
}

impl LineBuffer {
    fn with_capacity(capacity: usize) -> LineBuffer {
        LineBuffer {
            buf: Vec::with_capacity(capacity),
            start: 0,
        }
    }

    /// Every complete line buffered, read first when there is none; at the end of the input
    /// the last line without its newline; `None` once everything was handed out.
    fn next_block(&mut self, from: &mut impl io::Read) -> io::Result<Option<&[u8]>> {
        let mut searched = 0;
        loop {
            let unread = &self.buf[self.start..];
            if let Some(end) = unread[searched..].iter().rposition(|&b| b == b'\n') {
                let block = self.start..self.start + searched + end + 1;
                self.start = block.end;
                return Ok(Some(&self.buf[block]));
            }
            searched = unread.len();
            // No complete line: keep the partial one at the front and read more behind it.
            self.buf.drain(..self.start);
            self.start = 0;
            if self.buf.len() == self.buf.capacity() {
                self.buf.reserve(self.buf.capacity());
            }
            let len = self.buf.len();
            self.buf.resize(self.buf.capacity(), 0);
            let read = loop {
                match from.read(&mut self.buf[len..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            match read {
                Ok(0) => {
                    self.buf.truncate(len);
                    if len == 0 {
                        return Ok(None);
                    }
                    // The last line, without its newline.
                    self.start = len;
                    return Ok(Some(&self.buf[..len]));
                }
                Ok(n) => self.buf.truncate(len + n),
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(e);
                }
            }
        }
    }
}

/// serde's message without its `at line 1 column N` (the line is always 1 here and would be
/// mistaken for the batch line), with the column kept.
fn input_error(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(m, _)| m);
    format!("not a route input: {message} (column {})", e.column())
}

const LABEL: Style = Style::new().bold();
const AGENT: Style = AnsiColor::Green.on_default().bold();
const MISS: Style = AnsiColor::Yellow.on_default();
const HIT: Style = AnsiColor::Green.on_default().bold();
const DIM: Style = Style::new().dimmed();
const NOTE: Style = Style::new().bold();

fn human(r: &RouteResult) -> String {
    let mut out = String::new();
    let decided = match &r.binding {
        Some(b) => format!(
            "{} ({}:{}, binding #{})",
            r.matched_by.as_str(),
            b.file,
            b.line,
            b.index
        ),
        None => format!(
            "{} (no binding matched: the default agent)",
            r.matched_by.as_str()
        ),
    };
    let rows = [
        ("agent", format!("{AGENT}{}{AGENT:#}", r.agent_id)),
        ("matched by", decided),
        ("session key", r.session_key.to_string()),
        ("main key", r.main_session_key.to_string()),
        ("last route", r.last_route_policy.to_string()),
        (
            "scopes",
            format!(
                "dmScope {}, groupScope {}",
                r.dm_scope.as_str(),
                r.group_scope.as_str()
            ),
        ),
        (
            "channel",
            format!("{} (account {})", r.channel, r.account_id),
        ),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "{LABEL}{label:<12}{LABEL:#} {value}");
    }
    out
}

fn explain_human(
    out: &mut String,
    plan: &RoutingPlan,
    input: &RouteInput,
    explanation: &crate::routing::Explanation,
) {
    let _ = writeln!(out, "\n{LABEL}tiers{LABEL:#}");
    for (n, t) in explanation.tiers.iter().enumerate() {
        let tier = t.tier.as_str();
        match &t.outcome {
            TierOutcome::Skipped(why) => {
                let _ = writeln!(
                    out,
                    "  {}. {tier:<22} {DIM}skipped: {}{DIM:#}",
                    n + 1,
                    why.reason(input)
                );
            }
            TierOutcome::Tried { key, candidates } => {
                let at = key
                    .as_deref()
                    .map_or_else(String::new, |k| format!(" at `{k}`"));
                let count = match candidates.len() {
                    0 => "no candidates".to_string(),
                    1 => "1 candidate".to_string(),
                    n => format!("{n} candidates"),
                };
                let _ = writeln!(out, "  {}. {tier:<22} {count}{at}", n + 1);
                for &(b, verdict) in candidates {
                    let binding = &plan.bindings[b];
                    let place = format!("{}:{}", binding.source.file, binding.source.line);
                    match verdict {
                        Ok(()) => {
                            let _ = writeln!(
                                out,
                                "       {HIT}match{HIT:#}  {place}  agent {}",
                                binding.agent_id
                            );
                        }
                        Err(miss) => {
                            let _ = writeln!(
                                out,
                                "       {MISS}miss{MISS:#}   {place}  agent {}: {}",
                                binding.agent_id,
                                miss.reason(plan, b, t.tier, input)
                            );
                        }
                    }
                }
            }
        }
    }
    let decided = explanation.tiers.len();
    if decided < crate::routing::MatchedBy::TIERS.len() {
        let _ = writeln!(out, "  {DIM}(later tiers are not tried){DIM:#}");
        return;
    }
    let r = &explanation.result;
    let _ = writeln!(
        out,
        "  {}. {:<22} agent {}",
        decided + 1,
        "default",
        r.agent_id
    );
    for note in notes(explanation) {
        let _ = writeln!(out, "{NOTE}note:{NOTE:#} {note}");
    }
}

/// An ACP binding of this exact conversation wins before any tier, in the Access layer.
fn acp_note(plan: &RoutingPlan, input: &RouteInput) -> Option<String> {
    let acp = plan.acp_binding(input)?;
    Some(format!(
        "an ACP binding ({}:{}) binds this conversation to agent `{}`: the Access layer delivers it there first (matchedBy binding.acp)",
        acp.source.file, acp.source.line, acp.agent_id
    ))
}

/// What a person looking at a default route most likely wants to know.
pub(crate) fn notes(explanation: &crate::routing::Explanation) -> Vec<String> {
    let r = &explanation.result;
    if r.binding.is_some() {
        return Vec::new();
    }
    if explanation.channel_bindings == 0 {
        return vec![format!("no route binding names channel `{}`", r.channel)];
    }
    explanation
        .other_accounts
        .iter()
        .map(|(account, n)| {
            let bindings = if *n == 1 { "binding is" } else { "bindings are" };
            let hint = if account == "default" {
                " (a binding without `accountId` covers only the `default` account; use `accountId: \"*\"` for all)"
            } else {
                ""
            };
            format!(
                "{n} {} {bindings} for account `{account}`, not `{}`{hint}",
                r.channel, r.account_id
            )
        })
        .collect()
}
