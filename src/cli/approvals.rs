//! `deepcli approvals …` (approvals.md): the running controller's approvals, through its
//! JSON-RPC `approvals/*` (one service for the CLI, HTTP and JSON-RPC).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::hub::{rpc, show, text};
use super::{ExitStatus, GlobalSettings};

const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  refused or failed: the message says why (an unknown or already decided approval, a void one)
  2  no controller runs on this state directory, or it could not be reached";

#[derive(Debug, Subcommand)]
pub(super) enum ApprovalsCommand {
    /// Pending approvals, newest first (--all: every state); a management request with what it
    /// would write (its dry run's diff) and what it touches beyond the agent asking.
    #[command(after_help = EXIT_CODES)]
    List(ListArgs),
    /// One approval: what was asked (a management request: its params and diff), by whom,
    /// bound to which content hash, and what happened.
    #[command(after_help = EXIT_CODES)]
    Show(IdArgs),
    /// Allow it (the runtime gets the allow option; a management request runs).
    #[command(after_help = EXIT_CODES)]
    Approve(DecideArgs),
    /// Deny it (the runtime gets the reject option; a management request writes nothing).
    #[command(after_help = EXIT_CODES)]
    Deny(DecideArgs),
    /// The allow_always rules: the agent's later requests of the same tool kind, the exact title
    /// (or the operator's pattern) and the same raw input shape are allowed without asking.
    #[command(after_help = EXIT_CODES)]
    Rules(RulesArgs),
    /// Revoke a rule: matching requests ask again.
    #[command(after_help = EXIT_CODES)]
    Revoke(RevokeArgs),
}

#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// Only this agent's.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Only this state (pending, approved, denied, expired, void).
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    /// Every state, not only pending.
    #[arg(long)]
    all: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct IdArgs {
    /// The approval id.
    id: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct DecideArgs {
    /// The approval id.
    id: String,
    /// Approve: also allow this agent's later requests of the same tool kind, the exact same
    /// title and the same raw input shape (a rule, `approvals rules`); the runtime gets
    /// allow_always. Deny: the runtime gets reject_always.
    #[arg(long)]
    always: bool,
    /// With approve --always: the rule matches titles by this pattern (`*`: any run of
    /// characters) instead of the exact title. It must match the approval's own title; the
    /// rule is shown before it is saved.
    #[arg(long, value_name = "PATTERN", requires = "always")]
    pattern: Option<String>,
    /// Save a --pattern rule without asking (needed when there is no terminal to ask on).
    #[arg(long, requires = "pattern")]
    yes: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RulesArgs {
    /// Only this agent's.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Revoked rules too.
    #[arg(long)]
    all: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct RevokeArgs {
    /// The rule id (`approvals rules`).
    rule: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(global: &GlobalSettings, command: ApprovalsCommand) -> ExitStatus {
    let quick = Duration::from_secs(5);
    // A decided management request runs before the answer: give it the time an apply takes.
    let decide = Duration::from_secs(60);
    let (method, params, json, wait) = match &command {
        ApprovalsCommand::List(a) => (
            "approvals/list",
            json!({"agentId": a.agent, "state": a.state, "all": a.all}),
            a.json,
            quick,
        ),
        ApprovalsCommand::Show(a) => ("approvals/show", json!({"id": a.id}), a.json, quick),
        ApprovalsCommand::Approve(a) => {
            if let Some(pattern) = &a.pattern
                && let Err(status) = confirm_pattern(global, &a.id, pattern, a.yes)
            {
                return status;
            }
            (
                "approvals/approve",
                json!({"id": a.id, "always": a.always, "pattern": a.pattern}),
                a.json,
                decide,
            )
        }
        ApprovalsCommand::Deny(a) => (
            "approvals/deny",
            json!({"id": a.id, "always": a.always}),
            a.json,
            decide,
        ),
        ApprovalsCommand::Rules(a) => (
            "approvals/rules",
            json!({"agentId": a.agent, "all": a.all}),
            a.json,
            quick,
        ),
        ApprovalsCommand::Revoke(a) => {
            ("approvals/revoke", json!({"ruleId": a.rule}), a.json, quick)
        }
    };
    let result = match rpc(global, method, params, wait) {
        Ok(result) => result,
        Err(status) => return status,
    };
    match command {
        ApprovalsCommand::List(_) => show(&result, json, render_list),
        ApprovalsCommand::Show(_) => show(&result, json, render_show),
        ApprovalsCommand::Approve(_) | ApprovalsCommand::Deny(_) => {
            let failed = result["approval"]["note"]
                .as_str()
                .is_some_and(|n| n.contains("failed, nothing written"));
            let status = show(&result, json, render_decided);
            if failed { ExitStatus::Failure } else { status }
        }
        ApprovalsCommand::Rules(_) => show(&result, json, render_rules),
        ApprovalsCommand::Revoke(_) => show(&result, json, |r| {
            format!(
                "rule {} revoked: agent `{}` asks again for {} {:?}\n",
                text(&r["rule"]["id"]),
                text(&r["rule"]["agentId"]),
                text(&r["rule"]["toolKind"]),
                r["rule"]["titlePattern"].as_str().unwrap_or("")
            )
        }),
    }
}

/// Shows the rule an operator's `--pattern` would save, literally, and asks (or, without a
/// terminal, needs `--yes`): nothing is decided unless this passes.
fn confirm_pattern(
    global: &GlobalSettings,
    id: &str,
    pattern: &str,
    yes: bool,
) -> Result<(), ExitStatus> {
    let preview = rpc(
        global,
        "approvals/approve",
        json!({"id": id, "always": true, "pattern": pattern, "dryRun": true}),
        Duration::from_secs(5),
    )?;
    let mut err = anstream::stderr();
    let _ = writeln!(err, "rule to save: {}", rule_words(&preview["rule"]));
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        let _ = writeln!(
            err,
            "error: a --pattern rule is saved only once confirmed, and there is no terminal to confirm on\nhint: read the rule above; add --yes to save it as shown"
        );
        return Err(ExitStatus::Failure);
    }
    let _ = write!(err, "Approve {id} and save this rule? [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    let _ = std::io::stdin().read_line(&mut answer);
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        let _ = writeln!(err, "Nothing decided; approval {id} stays pending.");
        Err(ExitStatus::Failure)
    }
}

/// A rule in words, its title or pattern quoted literally (escaped: a title is the agent's
/// text): what the library's `policy::describe_rule` says, from the JSON.
fn rule_words(rule: &Value) -> String {
    let title = rule["titlePattern"].as_str().unwrap_or("");
    let title = match rule["titleMatch"].as_str() {
        Some("pattern") => {
            format!("with a title matching the pattern {title:?} (`*`: any run of characters)")
        }
        _ => format!("titled exactly {title:?}"),
    };
    let input = match rule["inputShape"].as_str() {
        Some(shape) => format!("raw input shaped {shape}"),
        None => "no raw input".to_string(),
    };
    format!(
        "later {} requests of agent `{}` {title}, with {input}, are allowed without asking",
        text(&rule["toolKind"]),
        text(&rule["agentId"]),
    )
}

/// What an approval asks for, in a few words.
fn what(a: &Value) -> String {
    match a["source"].as_str() {
        Some("management") => format!(
            "management {} (its reason: {:?})",
            text(&a["action"]["method"]),
            a["action"]["reason"].as_str().unwrap_or("")
        ),
        _ => format!(
            "{} {:?}",
            text(&a["action"]["kind"]),
            a["action"]["title"].as_str().unwrap_or("")
        ),
    }
}

/// A management request's preview (what approving it would write, what it touches), each
/// line indented by `indent`; empty for a permission request.
fn changes(a: &Value, indent: &str) -> String {
    serde_json::from_value::<crate::state::approvals::ManagementPreview>(a["preview"].clone())
        .map_or(String::new(), |p| {
            crate::approvals::preview::render(&p, indent, None)
        })
}

fn render_list(r: &Value) -> String {
    let mut out = String::new();
    for a in r["approvals"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{}  {}  agent {}  {}  expires {}\n",
            text(&a["id"]),
            text(&a["state"]),
            text(&a["agentId"]),
            what(a),
            text(&a["expiresAt"]),
        ));
        out.push_str(&changes(a, "    "));
    }
    if out.is_empty() {
        out.push_str("No approvals.\n");
    }
    out
}

fn render_show(r: &Value) -> String {
    let a = &r["approval"];
    let mut out = format!(
        "approval {}: {}\n  agent    {}\n  session  {}\n  run      {}\n  asks     {}\n  hash     {}\n  route    {}\n  created  {}\n  expires  {}\n",
        text(&a["id"]),
        text(&a["state"]),
        text(&a["agentId"]),
        text(&a["sessionKey"]),
        text(&a["runId"]),
        what(a),
        text(&a["contentHash"]),
        text(&a["route"]),
        text(&a["createdAt"]),
        text(&a["expiresAt"]),
    );
    if a["source"] == "management" {
        out.push_str(&format!("  params   {}\n", a["action"]["params"]));
        let changes = changes(a, "    ");
        if !changes.is_empty() {
            out.push_str(&format!("  changes\n{changes}"));
        }
    }
    if let Some(options) = a["options"].as_array().filter(|o| !o.is_empty()) {
        let kinds: Vec<String> = options
            .iter()
            .map(|o| format!("{} ({})", text(&o["optionId"]), text(&o["kind"])))
            .collect();
        out.push_str(&format!("  options  {}\n", kinds.join(", ")));
    }
    if a["decidedBy"].is_string() {
        out.push_str(&format!(
            "  decided  {} by {}{}\n",
            text(&a["decidedAt"]),
            text(&a["decidedBy"]),
            a["decision"]
                .as_str()
                .map_or(String::new(), |d| format!(" ({d})"))
        ));
    }
    if let Some(note) = a["note"].as_str().filter(|n| !n.is_empty()) {
        out.push_str(&format!("  note     {note}\n"));
    }
    out.push_str("  events:\n");
    for e in r["events"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "    {} {}{}{}\n",
            text(&e["at"]),
            text(&e["event"]),
            e["actor"]
                .as_str()
                .map_or(String::new(), |a| format!(" by {a}")),
            e["note"]
                .as_str()
                .map_or(String::new(), |n| format!(": {n}"))
        ));
    }
    out
}

fn render_decided(r: &Value) -> String {
    let a = &r["approval"];
    let mut out = format!(
        "approval {} {} by {}: {}\n",
        text(&a["id"]),
        text(&a["state"]),
        text(&a["decidedBy"]),
        what(a)
    );
    if let Some(note) = a["note"].as_str().filter(|n| !n.is_empty()) {
        out.push_str(&format!("  {note}\n"));
    }
    if r["rule"].is_object() {
        out.push_str(&format!(
            "  rule {}: {} (deepcli approvals revoke {})\n",
            text(&r["rule"]["id"]),
            rule_words(&r["rule"]),
            text(&r["rule"]["id"]),
        ));
    }
    out
}

fn render_rules(r: &Value) -> String {
    let mut out = String::new();
    for rule in r["rules"].as_array().into_iter().flatten() {
        let title = rule["titlePattern"].as_str().unwrap_or("");
        let title = match rule["titleMatch"].as_str() {
            Some("pattern") => format!("pattern {title:?}"),
            _ => format!("exactly {title:?}"),
        };
        out.push_str(&format!(
            "{}  agent {}  {} {title}  input {}  by {} at {}{}\n",
            text(&rule["id"]),
            text(&rule["agentId"]),
            text(&rule["toolKind"]),
            rule["inputShape"].as_str().unwrap_or("none"),
            text(&rule["createdBy"]),
            text(&rule["createdAt"]),
            rule["revokedAt"]
                .as_str()
                .map_or(String::new(), |at| format!("  revoked {at}"))
        ));
    }
    if out.is_empty() {
        out.push_str("No rules.\n");
    }
    out
}
