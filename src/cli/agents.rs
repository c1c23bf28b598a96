//! `deepcli agents …`: arguments → `manage::agents` → JSON or a few lines of text.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::{ExitStatus, GlobalSettings};
use crate::manage::{self, ManageContext, ManageError, agents};

pub(crate) const MANAGE_EXIT_CODES: &str = "\
Exit codes:
  0  done (or, with --dry-run, the diff printed)
  1  refused or failed: a conflict, an unknown agent, an edit that would make the config
     invalid, a file changed by someone else meanwhile; nothing was written
  2  could not run: bad flags (a malformed --bind), unreadable config directory";

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every agent: identity, workspace, model, runtime status, routes.
    List {
        /// Include each agent's bindings.
        #[arg(long)]
        bindings: bool,
        #[arg(long)]
        json: bool,
    },
    /// Add an agent to agents.yaml (and bindings to bindings.yaml).
    Add(AddArgs),
    /// Set an agent's identity (name, emoji, theme, avatar), from flags or IDENTITY.md.
    SetIdentity(SetIdentityArgs),
    /// The bindings, of every agent or one.
    Bindings {
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Route CHANNEL[:ACCOUNT] to an agent.
    Bind(BindArgs),
    /// Remove route bindings of an agent.
    Unbind(UnbindArgs),
    /// Remove an agent and every reference to it; the next apply moves its files to trash.
    Delete(DeleteArgs),
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Show the diff of the files instead of writing them.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The agent's name; its id is the name normalized (lowercase, `-` for other characters).
    name: String,
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    #[arg(long, value_name = "DIR")]
    agent_dir: Option<PathBuf>,
    /// CHANNEL or CHANNEL:ACCOUNT; repeatable.
    #[arg(long = "bind", value_name = "CHANNEL[:ACCOUNT]")]
    bind: Vec<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub struct SetIdentityArgs {
    agent_id: String,
    /// Read `- Name:`/`- Emoji:`/`- Theme:`/`- Avatar:` from the workspace's IDENTITY.md.
    #[arg(long)]
    from_identity: bool,
    /// Read them from this file instead.
    #[arg(long, value_name = "PATH")]
    identity_file: Option<PathBuf>,
    #[arg(long, value_name = "N")]
    name: Option<String>,
    #[arg(long, value_name = "E")]
    emoji: Option<String>,
    #[arg(long, value_name = "T")]
    theme: Option<String>,
    #[arg(long, value_name = "A")]
    avatar: Option<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub struct BindArgs {
    agent_id: String,
    /// CHANNEL or CHANNEL:ACCOUNT; repeatable.
    #[arg(long = "bind", value_name = "CHANNEL[:ACCOUNT]", required = true)]
    bind: Vec<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub struct UnbindArgs {
    agent_id: String,
    /// CHANNEL or CHANNEL:ACCOUNT; repeatable.
    #[arg(
        long = "bind",
        value_name = "CHANNEL[:ACCOUNT]",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    bind: Vec<String>,
    /// Remove all the agent's route bindings.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    agent_id: String,
    /// Do not ask (required without a terminal).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    write: WriteArgs,
}

/// The management context of the CLI: live status from a running controller over HTTP.
pub(crate) fn context(global: &GlobalSettings) -> ManageContext {
    let mut ctx = ManageContext::new(&global.config_dir, global.load.clone());
    let dir = ctx.state_dir();
    ctx.live = Some(std::sync::Arc::new(move || {
        let store = crate::state::StateStore::open_existing(&dir).ok()??;
        serde_json::to_value(super::up::controller_status(&dir, &store)?).ok()
    }));
    ctx
}

/// Prints a failure (diagnostics of an invalid edit included) and maps it to an exit status.
pub(crate) fn fail(e: &ManageError) -> ExitStatus {
    let mut err = anstream::stderr();
    if let ManageError::Invalid { rendered, .. } = e {
        let _ = err.write_all(rendered.as_bytes());
    }
    let _ = writeln!(err, "error: {e}");
    if let Some(hint) = e.hint() {
        let _ = writeln!(err, "hint: {hint}");
    }
    match e.exit_code() {
        2 => ExitStatus::Error,
        _ => ExitStatus::Failure,
    }
}

pub(crate) fn print_json<T: Serialize>(value: &T) {
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Prints what a write did: the diff with --dry-run, else the files written.
pub(crate) fn print_written(written: &manage::Written) {
    let mut out = anstream::stdout();
    match &written.diff {
        Some(diff) if diff.is_empty() => {
            let _ = writeln!(out, "No changes.");
        }
        Some(diff) => {
            let _ = out.write_all(diff.as_bytes());
        }
        None if written.files.is_empty() => {
            let _ = writeln!(out, "No changes: the files already say so.");
        }
        None => {
            let _ = writeln!(out, "Wrote {}.", written.files.join(", "));
        }
    }
}

/// Paths given on the command line are relative to where the command runs; in agents.yaml a
/// relative path would mean "under the state directory", so write them absolute.
fn absolute(path: PathBuf) -> String {
    let text = path.to_string_lossy();
    if text.starts_with('~') {
        return text.into_owned();
    }
    std::path::absolute(&path)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

pub fn run(global: &GlobalSettings, command: AgentsCommand) -> ExitStatus {
    let ctx = context(global);
    match command {
        AgentsCommand::List { bindings, json } => match agents::list(&ctx, bindings) {
            Ok(result) if json => {
                print_json(&result);
                ExitStatus::Success
            }
            Ok(result) => {
                human_list(&result, bindings);
                ExitStatus::Success
            }
            Err(e) => fail(&e),
        },
        AgentsCommand::Bindings { agent, json } => match agents::bindings(&ctx, agent.as_deref()) {
            Ok(result) if json => {
                print_json(&result);
                ExitStatus::Success
            }
            Ok(result) => {
                let mut out = anstream::stdout();
                if result.bindings.is_empty() {
                    let _ = writeln!(out, "No bindings.");
                }
                for b in &result.bindings {
                    let _ = writeln!(
                        out,
                        "{:<16} {:<40} {}",
                        b.agent_id, b.description, b.location
                    );
                }
                ExitStatus::Success
            }
            Err(e) => fail(&e),
        },
        AgentsCommand::Add(args) => {
            let request = agents::AddRequest {
                name: args.name,
                workspace: args.workspace.map(absolute),
                model: args.model,
                agent_dir: args.agent_dir.map(absolute),
                bind: args.bind,
                dry_run: args.write.dry_run,
            };
            match agents::add(&ctx, &request) {
                Ok(result) => {
                    let conflicts = !result.bindings.conflicts.is_empty();
                    if args.write.json {
                        print_json(&result);
                    } else {
                        print_conflicts(&result.bindings.conflicts);
                        if !conflicts {
                            print_written(&result.written);
                            if !request.dry_run {
                                let _ = writeln!(
                                    anstream::stdout(),
                                    "Added agent `{}` (workspace {}); `deepcli apply` creates it.",
                                    result.agent_id,
                                    result.workspace.display()
                                );
                            }
                        }
                    }
                    if conflicts {
                        ExitStatus::Failure
                    } else {
                        ExitStatus::Success
                    }
                }
                Err(e) => fail(&e),
            }
        }
        AgentsCommand::SetIdentity(args) => {
            let request = agents::SetIdentityRequest {
                agent_id: args.agent_id,
                from_identity: args.from_identity,
                identity_file: args.identity_file,
                name: args.name,
                emoji: args.emoji,
                theme: args.theme,
                avatar: args.avatar,
                dry_run: args.write.dry_run,
            };
            match agents::set_identity(&ctx, &request) {
                Ok(result) if args.write.json => {
                    print_json(&result);
                    ExitStatus::Success
                }
                Ok(result) => {
                    print_written(&result.written);
                    ExitStatus::Success
                }
                Err(e) => fail(&e),
            }
        }
        AgentsCommand::Bind(args) => {
            let targets = match agents::parse_binds(&args.bind) {
                Ok(t) => t,
                Err(e) => return fail(&e),
            };
            match agents::bind(&ctx, &args.agent_id, &targets, args.write.dry_run) {
                Ok(result) => report_binding_change(
                    &result,
                    args.write.json,
                    &[
                        ("added", &result.added),
                        ("updated", &result.updated),
                        ("skipped (already bound)", &result.skipped),
                    ],
                    &result.conflicts,
                    &result.written,
                ),
                Err(e) => fail(&e),
            }
        }
        AgentsCommand::Unbind(args) => {
            let targets = match agents::parse_binds(&args.bind) {
                Ok(t) => t,
                Err(e) => return fail(&e),
            };
            match agents::unbind(&ctx, &args.agent_id, &targets, args.all, args.write.dry_run) {
                Ok(result) => report_binding_change(
                    &result,
                    args.write.json,
                    &[("removed", &result.removed), ("not bound", &result.missing)],
                    &result.conflicts,
                    &result.written,
                ),
                Err(e) => fail(&e),
            }
        }
        AgentsCommand::Delete(args) => {
            if !args.force && !args.write.dry_run && !confirm(&args.agent_id) {
                return ExitStatus::Error;
            }
            match agents::delete(&ctx, &args.agent_id, args.write.dry_run) {
                Ok(result) if args.write.json => {
                    print_json(&result);
                    ExitStatus::Success
                }
                Ok(result) => {
                    let mut out = anstream::stdout();
                    let _ = writeln!(
                        out,
                        "Removed agent `{}`: {} bindings, {} agentToAgent.allow entries, {} subagents.allowAgents entries.",
                        result.agent_id,
                        result.removed_bindings,
                        result.removed_allow,
                        result.removed_allow_agents
                    );
                    for path in &result.trash {
                        let _ =
                            writeln!(out, "  the next apply moves to trash: {}", path.display());
                    }
                    for k in &result.kept {
                        let _ = writeln!(out, "  stays: {} ({})", k.path.display(), k.reason);
                    }
                    print_written(&result.written);
                    ExitStatus::Success
                }
                Err(e) => fail(&e),
            }
        }
    }
}

/// Asks on the terminal; without one, refuses (`--force` is required).
fn confirm(agent: &str) -> bool {
    let mut err = anstream::stderr();
    if !std::io::stdin().is_terminal() {
        let _ = writeln!(
            err,
            "error: deleting agent `{agent}` needs --force when there is no terminal to confirm on"
        );
        let _ = writeln!(
            err,
            "hint: add --force, or --dry-run to see what would change"
        );
        return false;
    }
    let _ = write!(
        err,
        "Delete agent `{agent}` and its bindings? The next apply moves its files to trash. [y/N] "
    );
    let _ = err.flush();
    let mut answer = String::new();
    let _ = std::io::stdin().read_line(&mut answer);
    let yes = matches!(answer.trim(), "y" | "Y" | "yes");
    if !yes {
        let _ = writeln!(err, "Nothing deleted.");
    }
    yes
}

/// Prints what `bind` or `unbind` did (or its JSON); conflicts fail the command.
fn report_binding_change(
    result: &impl serde::Serialize,
    json: bool,
    lists: &[(&str, &Vec<String>)],
    conflicts: &[agents::Conflict],
    written: &manage::Written,
) -> ExitStatus {
    if json {
        print_json(result);
    } else {
        let mut out = anstream::stdout();
        for (what, list) in lists {
            if !list.is_empty() {
                let _ = writeln!(out, "{what}: {}", list.join(", "));
            }
        }
        print_conflicts(conflicts);
        if conflicts.is_empty() {
            print_written(written);
        }
    }
    if conflicts.is_empty() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    }
}

fn print_conflicts(conflicts: &[agents::Conflict]) {
    let mut err = anstream::stderr();
    for c in conflicts {
        let _ = writeln!(
            err,
            "error: `{}` is already bound to agent `{}` ({})",
            c.bind, c.agent_id, c.location
        );
    }
    if !conflicts.is_empty() {
        let _ = writeln!(
            err,
            "hint: nothing was written; unbind it from `{}` first (`deepcli agents unbind {} --bind {}`)",
            conflicts[0].agent_id, conflicts[0].agent_id, conflicts[0].bind
        );
    }
}

fn human_list(result: &agents::ListResult, with_bindings: bool) {
    let mut out = anstream::stdout();
    for a in &result.agents {
        let identity = [&a.identity.emoji, &a.identity.name]
            .iter()
            .filter_map(|s| s.as_deref())
            .collect::<Vec<_>>()
            .join(" ");
        let status = a
            .runtime
            .status
            .as_ref()
            .and_then(|s| s.as_str())
            .unwrap_or("—");
        let _ = writeln!(
            out,
            "{}{}  {}",
            a.id,
            if a.default { " (default)" } else { "" },
            identity
        );
        let _ = writeln!(out, "  workspace  {}", a.workspace.display());
        let _ = writeln!(out, "  agentDir   {}", a.agent_dir.display());
        let _ = writeln!(out, "  model      {}", a.model.as_deref().unwrap_or("—"));
        let _ = writeln!(out, "  runtime    {} ({status})", a.runtime.kind);
        let _ = writeln!(
            out,
            "  routes     {}",
            if a.routes.is_empty() {
                "none".to_string()
            } else {
                a.routes.join("; ")
            }
        );
        if with_bindings {
            for b in a.bindings.iter().flatten() {
                let _ = writeln!(out, "  binding    {} ({})", b.description, b.location);
            }
        }
    }
}
