//! `deepcli route`: which agent and session a message would get, and why.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::PathBuf;

use anstyle::{AnsiColor, Style};
use clap::Args;
use serde_json::json;

use super::{ExitStatus, GlobalSettings};
use crate::config::model::{DmScope, GroupScope};
use crate::plural::plural;
use crate::policy::PolicyPlan;
use crate::routing::declared::{Declared, Undeclared};
use crate::routing::plan::TierOutcome;
use crate::routing::{Peer, RouteInput, RouteResult, RoutingPlan, batch, document};
use crate::shown::shown;

#[derive(Debug, Args)]
#[command(after_help = "\
Peers are KIND:ID, split at the first colon (ids may contain colons): direct:+15551234,
group:-100123, channel:C0123:thread. KIND is direct (or dm), group or channel.

--batch reads one JSON route input per line on stdin, with OpenClaw's field names
(channel, accountId, peer {kind, id}, parentPeer, guildId, teamId, memberRoleIds,
dmScope, groupScope), and writes one JSON result per line on stdout. A line that is not a
route input gets {\"error\": …, \"line\": n} and the batch goes on; the exit code is then 1.

A route to a channel channels.yaml does not declare, or to an account its channel does not
list, is still answered (routing follows the bindings), with a warning on stderr: the Access
API refuses such messages (404). --batch warns once, at the end, naming each undeclared
channel account and how many lines went to it. With --plan, the plan's accounts section (and
the channels its bindings name) stand for channels.yaml; a plan without one is not checked.

Exit codes:
  0  routed
  1  the config has errors (nothing is routed), a batch line was bad, or (with --strict) a
     route named an undeclared channel or account
  2  the command could not run (bad flags, unreadable config or plan)")]
pub(super) struct RouteArgs {
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
    /// Also show, tier by tier, which bindings were considered and why each did not match;
    /// with --sender, --bot, --mention or --text also the inbound policy's gate.
    #[arg(long)]
    explain: bool,
    /// With --explain: who sends the message (the gate checks allowFrom, groupAllowFrom).
    #[arg(long, value_name = "ID", requires = "explain")]
    sender: Option<String>,
    /// With --explain: the sender is a bot (allowBots).
    #[arg(long, requires = "explain")]
    bot: bool,
    /// With --explain: a user id the message mentions natively (repeatable).
    #[arg(long = "mention", value_name = "ID", requires = "explain")]
    mentions: Vec<String>,
    /// With --explain: the message's text (mention patterns are checked against it).
    #[arg(long, value_name = "TEXT", requires = "explain")]
    text: Option<String>,
    /// Route JSON lines from stdin to JSON lines on stdout.
    #[arg(long, conflicts_with_all = [
        "channel", "account", "peer", "parent_peer", "guild", "team", "roles",
        "dm_scope", "group_scope", "json", "explain",
    ])]
    batch: bool,
    /// Route with a published routing-plan.json instead of the config directory.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Exit 1 when a route names a channel or account that channels.yaml does not declare.
    #[arg(long)]
    strict: bool,
}

/// `KIND:ID`, KIND one the routing knows: a typo would make a new session key that no binding
/// matches, silently.
pub(crate) fn parse_peer(text: &str) -> Result<Peer, String> {
    const KINDS: [&str; 4] = ["direct", "dm", "group", "channel"];
    match text.split_once(':') {
        Some((kind, id)) if KINDS.iter().any(|k| k.eq_ignore_ascii_case(kind.trim())) => Ok(Peer {
            kind: kind.to_string(),
            id: id.to_string(),
        }),
        Some((kind, _)) if !kind.trim().is_empty() => Err(format!(
            "unknown peer kind `{kind}`: KIND is direct (or dm), group or channel{}",
            crate::suggest::closest(kind.trim(), KINDS)
                .map_or(String::new(), |k| format!(" (did you mean `{k}`?)"))
        )),
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

pub(super) fn run(global: &GlobalSettings, args: RouteArgs) -> ExitStatus {
    let Loaded {
        plan,
        declared,
        policy,
        a2a_exposed,
    } = match load_plan(global, args.plan.as_ref()) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let place = if args.plan.is_some() {
        "the routing plan"
    } else {
        "channels.yaml"
    };
    let gate_asked = args.explain
        && (args.sender.is_some() || args.bot || !args.mentions.is_empty() || args.text.is_some());
    if args.batch {
        return batch(&plan, declared.as_ref().map(|d| (d, place)), args.strict);
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
    let gate = gate_asked.then(|| {
        let result = plan.resolve(&input);
        super::route_gate::explain(
            policy.as_ref(),
            a2a_exposed.as_deref(),
            &input,
            &result,
            &super::route_gate::Sent {
                sender: args.sender.as_deref(),
                bot: args.bot,
                mentions: &args.mentions,
                text: args.text.as_deref().unwrap_or(""),
            },
        )
    });
    let written = if args.json {
        let mut value = serde_json::to_value(plan.resolve(&input)).expect("results serialize");
        if args.explain {
            let explanation = plan.explain(&input);
            value["explain"] = explanation.tiers_json(&plan, &input);
            let mut all = notes(&explanation);
            all.extend(acp_note(&plan, &input));
            value["notes"] = json!(all);
        }
        if let Some(gate) = &gate {
            value["gate"] = gate.json();
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
            let _ = writeln!(text, "{NOTE}note:{NOTE:#} {}", shown(&note));
        }
        if let Some(gate) = &gate {
            gate.human(&mut text);
        }
        anstream::stdout().write_all(text.as_bytes())
    };
    if written.is_err() {
        return ExitStatus::Error;
    }
    let result = plan.resolve(&input);
    let undeclared = declared
        .as_ref()
        .and_then(|d| Some((d, d.check(&result.channel, &result.account_id)?)));
    match undeclared {
        Some((declared, undeclared)) => {
            warn_undeclared(declared, &undeclared, place);
            if args.strict {
                ExitStatus::Failure
            } else {
                ExitStatus::Success
            }
        }
        None => ExitStatus::Success,
    }
}

/// `warning: …` and a `hint: …` for a route the Access API would refuse.
fn warn_undeclared(declared: &Declared, undeclared: &Undeclared, place: &str) {
    let mut err = anstream::stderr();
    let what = match undeclared {
        Undeclared::Channel { channel } => {
            format!("channel `{channel}` is not declared in {place}")
        }
        Undeclared::Account { channel, account } => {
            format!("channel `{channel}` has no account `{account}` in {place}")
        }
    };
    let _ = writeln!(
        err,
        "{WARNING}warning:{WARNING:#} {what}: the Access API refuses its messages (404); routed by the bindings all the same"
    );
    let hint = match (declared.closest(undeclared), undeclared) {
        (Some(close), _) => format!("did you mean `{close}`?"),
        (None, Undeclared::Channel { channel }) => {
            format!("declare `{channel}` under `channels` in channels.yaml, or check the name")
        }
        (None, Undeclared::Account { channel, .. }) => format!(
            "`{channel}` lists the accounts {}; pass one with --account",
            declared
                .accounts(channel)
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let _ = writeln!(err, "  {HINT}hint:{HINT:#} {hint}");
}

/// What `route` routes with.
struct Loaded {
    plan: RoutingPlan,
    /// What the hub declares, when that can be told.
    declared: Option<Declared>,
    /// The inbound policy, which only the config has.
    policy: Option<PolicyPlan>,
    /// The agents channels.yaml's `a2a.expose` lists, which only the config has.
    a2a_exposed: Option<Vec<String>>,
}

/// The plan to route with: compiled from a config without errors, or loaded from a file.
/// Diagnostics go to stderr: stdout carries only results.
fn load_plan(global: &GlobalSettings, plan_file: Option<&PathBuf>) -> Result<Loaded, ExitStatus> {
    let mut err = anstream::stderr();
    if let Some(path) = plan_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let _ = writeln!(err, "error: cannot read `{}`: {e}", path.display());
            ExitStatus::Error
        })?;
        let loaded = document::PlanDocument::parse(&text).and_then(|doc| {
            let declared = Declared::of_plan(&doc.plan);
            Ok(Loaded {
                plan: doc.into_plan()?,
                declared,
                policy: None,
                a2a_exposed: None,
            })
        });
        return loaded.map_err(|e| {
            let _ = writeln!(err, "error: `{}`: {e}", path.display());
            ExitStatus::Error
        });
    }
    // The plan is compiled while the rules run.
    let (report, (plan, policy)) =
        super::load_valid_with(global, "nothing is routed until they are fixed", |config| {
            (RoutingPlan::compile(config), PolicyPlan::compile(config))
        })?;
    let declared = Declared::of_config(&report.config);
    let a2a_exposed = Some(
        report
            .config
            .a2a
            .as_ref()
            .map(|a| a.expose.clone())
            .unwrap_or_default(),
    );
    crate::threads::drop_in_background(report);
    let plan = plan.map_err(|e| {
        let _ = writeln!(err, "error: {e}");
        ExitStatus::Failure
    })?;
    Ok(Loaded {
        plan,
        declared: Some(declared),
        policy: Some(policy),
        a2a_exposed,
    })
}

/// Most undeclared channel accounts a batch's warning names.
const NAMED: usize = 10;

/// JSON lines on stdin answered on stdout ([`batch::run`]); a bad line is an answer, the exit
/// code says there were some. Routes to undeclared channel accounts are counted and told in
/// one warning at the end, not one per line.
fn batch(plan: &RoutingPlan, declared: Option<(&Declared, &str)>, strict: bool) -> ExitStatus {
    let mut err = anstream::stderr();
    let done = batch::run(
        plan,
        declared.map(|(d, _)| d),
        &mut io::stdin().lock(),
        &mut io::stdout().lock(),
    );
    if let (Ok(done), Some((_, place))) = (&done, declared)
        && !done.undeclared.is_empty()
    {
        let lines: usize = done.undeclared.values().sum();
        let mut named: Vec<String> = done
            .undeclared
            .iter()
            .take(NAMED)
            .map(|(u, n)| format!("{u} ({})", plural(*n, "line", "lines")))
            .collect();
        if done.undeclared.len() > NAMED {
            named.push(format!("and {} more", done.undeclared.len() - NAMED));
        }
        let _ = writeln!(
            err,
            "{WARNING}warning:{WARNING:#} {lines} of {} went to channel accounts {place} does not declare, whose messages the Access API refuses (404): {}",
            plural(done.lines, "line", "lines"),
            named.join(", ")
        );
    }
    match done {
        Ok(done) if done.bad > 0 => {
            let _ = writeln!(
                err,
                "error: {} of {} {} (see the `error` lines)",
                done.bad,
                plural(done.lines, "line", "lines"),
                if done.bad == 1 {
                    "was not a route input"
                } else {
                    "were not route inputs"
                }
            );
            ExitStatus::Failure
        }
        Ok(done) if strict && !done.undeclared.is_empty() => ExitStatus::Failure,
        Ok(_) => ExitStatus::Success,
        // The reader went away (a closed pipe): nothing more to say.
        Err(batch::BatchError::Write(_)) => ExitStatus::Error,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            ExitStatus::Error
        }
    }
}

const LABEL: Style = Style::new().bold();
const AGENT: Style = AnsiColor::Green.on_default().bold();
const MISS: Style = AnsiColor::Yellow.on_default();
const HIT: Style = AnsiColor::Green.on_default().bold();
const DIM: Style = Style::new().dimmed();
const NOTE: Style = Style::new().bold();
const WARNING: Style = AnsiColor::Yellow.on_default().bold();
const HINT: Style = AnsiColor::Cyan.on_default().bold();

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
        ("agent", format!("{AGENT}{}{AGENT:#}", shown(&r.agent_id))),
        ("matched by", shown(&decided).into_owned()),
        ("session key", shown(r.session_key.as_ref()).into_owned()),
        ("main key", shown(r.main_session_key.as_ref()).into_owned()),
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
            shown(&format!("{} (account {})", r.channel, r.account_id)).into_owned(),
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
                    shown(&why.reason(input))
                );
            }
            TierOutcome::Tried { key, candidates } => {
                let at = key
                    .as_deref()
                    .map_or_else(String::new, |k| format!(" at `{}`", shown(k)));
                let count = match candidates.len() {
                    0 => "no candidates".to_string(),
                    n => plural(n, "candidate", "candidates"),
                };
                let _ = writeln!(out, "  {}. {tier:<22} {count}{at}", n + 1);
                for &(b, verdict) in candidates {
                    let binding = &plan.bindings[b];
                    let place = shown(&format!("{}:{}", binding.source.file, binding.source.line))
                        .into_owned();
                    let agent = shown(&binding.agent_id);
                    match verdict {
                        Ok(()) => {
                            let _ =
                                writeln!(out, "       {HIT}match{HIT:#}  {place}  agent {agent}");
                        }
                        Err(miss) => {
                            let _ = writeln!(
                                out,
                                "       {MISS}miss{MISS:#}   {place}  agent {agent}: {}",
                                shown(&miss.reason(plan, b, t.tier, input))
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
        shown(&r.agent_id)
    );
    for note in notes(explanation) {
        let _ = writeln!(out, "{NOTE}note:{NOTE:#} {}", shown(&note));
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
