//! `deepcli agents …`: arguments → `manage::agents` → JSON or a few lines of text.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::emit::{WriteArgs, context, emit, print_written};
use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::{self, agents};
use crate::plural::plural;

#[derive(Debug, Subcommand)]
pub(super) enum AgentsCommand {
    /// Every agent: identity, workspace, model, runtime status, routes.
    List {
        /// Include each agent's bindings.
        #[arg(long)]
        bindings: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add an agent to agents.yaml (and bindings to bindings.yaml).
    Add(AddArgs),
    /// Set an agent's identity (name, emoji, theme, avatar), from flags or IDENTITY.md.
    SetIdentity(SetIdentityArgs),
    /// The bindings, of every agent or one.
    Bindings {
        /// Only this agent's bindings.
        #[arg(long, value_name = "ID")]
        agent: Option<String>,
        /// Print the result as JSON.
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
pub(super) struct AddArgs {
    /// The agent's name; its id is the name normalized (lowercase, `-` for other characters).
    name: String,
    /// The agent's workspace, made absolute [default: <state>/workspaces/<id>].
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// The agent's primary model, e.g. openai/gpt-4.1 [default: agents.defaults.model].
    #[arg(long, value_name = "ID")]
    model: Option<String>,
    /// The directory of the agent's private state, made absolute [default:
    /// <state>/agents/<id>/agent].
    #[arg(long, value_name = "DIR")]
    agent_dir: Option<PathBuf>,
    /// Route CHANNEL (its default account) or CHANNEL:ACCOUNT to the new agent; repeatable.
    #[arg(long = "bind", value_name = "CHANNEL[:ACCOUNT]")]
    bind: Vec<String>,
    /// The runtime deepcli starts for it: acp or process (with the command after `--`), or
    /// none [default: acp when a command is given].
    #[arg(long, value_name = "KIND")]
    runtime: Option<String>,
    /// The runtime's command and arguments, after `--`: `agents add coder --runtime acp --
    /// codex-acp`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub(super) struct SetIdentityArgs {
    /// The agent's id.
    agent_id: String,
    /// Read `- Name:`/`- Emoji:`/`- Theme:`/`- Avatar:` from the workspace's IDENTITY.md.
    #[arg(long)]
    from_identity: bool,
    /// Read them from this file instead.
    #[arg(long, value_name = "PATH")]
    identity_file: Option<PathBuf>,
    /// The identity's name (flags win over the file).
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// The identity's emoji.
    #[arg(long, value_name = "E")]
    emoji: Option<String>,
    /// A short description of the agent's tone and personality.
    #[arg(long, value_name = "T")]
    theme: Option<String>,
    /// An avatar image: a path relative to the workspace, or a URL.
    #[arg(long, value_name = "A")]
    avatar: Option<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub(super) struct BindArgs {
    /// The agent's id.
    agent_id: String,
    /// Route CHANNEL (its default account) or CHANNEL:ACCOUNT to the agent; repeatable.
    #[arg(long = "bind", value_name = "CHANNEL[:ACCOUNT]", required = true)]
    bind: Vec<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
pub(super) struct UnbindArgs {
    /// The agent's id.
    agent_id: String,
    /// Remove the agent's binding of CHANNEL or CHANNEL:ACCOUNT; repeatable.
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
pub(super) struct DeleteArgs {
    /// The agent's id.
    agent_id: String,
    /// Do not ask (required without a terminal).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    write: WriteArgs,
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

pub(super) fn run(global: &GlobalSettings, command: AgentsCommand) -> ExitStatus {
    let ctx = context(global);
    let out = global.output;
    match command {
        AgentsCommand::List { bindings, json } => {
            emit(out, agents::list(&ctx, bindings), json, |r, out| {
                human_list(r, bindings, out)
            })
        }
        AgentsCommand::Bindings { agent, json } => emit(
            out,
            agents::bindings(&ctx, agent.as_deref()),
            json,
            human_bindings,
        ),
        AgentsCommand::Add(args) => {
            let json = args.write.json;
            emit(out, agents::add(&ctx, &args.request()), json, human_add)
        }
        AgentsCommand::SetIdentity(args) => {
            let json = args.write.json;
            emit(
                out,
                agents::set_identity(&ctx, &args.request()),
                json,
                human_set_identity,
            )
        }
        AgentsCommand::Bind(args) => {
            let result = agents::parse_binds(&args.bind).and_then(|targets| {
                agents::bind(&ctx, &args.agent_id, &targets, args.write.dry_run)
            });
            emit(out, result, args.write.json, human_bind)
        }
        AgentsCommand::Unbind(args) => {
            let result = agents::parse_binds(&args.bind).and_then(|targets| {
                agents::unbind(&ctx, &args.agent_id, &targets, args.all, args.write.dry_run)
            });
            emit(out, result, args.write.json, human_unbind)
        }
        AgentsCommand::Delete(args) => {
            if !args.force && !args.write.dry_run && !confirm(&args.agent_id) {
                return ExitStatus::Error;
            }
            let result = agents::delete(&ctx, &args.agent_id, args.write.dry_run);
            emit(out, result, args.write.json, human_delete)
        }
    }
}

impl AddArgs {
    fn request(self) -> agents::AddRequest {
        agents::AddRequest {
            name: self.name,
            workspace: self.workspace.map(absolute),
            model: self.model,
            agent_dir: self.agent_dir.map(absolute),
            bind: self.bind,
            runtime: self.runtime,
            command: self.command,
            dry_run: self.write.dry_run,
        }
    }
}

impl SetIdentityArgs {
    fn request(self) -> agents::SetIdentityRequest {
        agents::SetIdentityRequest {
            agent_id: self.agent_id,
            from_identity: self.from_identity,
            identity_file: self.identity_file,
            name: self.name,
            emoji: self.emoji,
            theme: self.theme,
            avatar: self.avatar,
            dry_run: self.write.dry_run,
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

fn human_list(result: &agents::ListResult, with_bindings: bool, out: Output) {
    let mut out = out.answer();
    for a in &result.agents {
        let identity = [&a.identity.emoji, &a.identity.name]
            .iter()
            .filter_map(|s| s.as_deref())
            .collect::<Vec<_>>()
            .join(" ");
        let status = a.runtime.status.map_or("—", |s| s.as_str());
        let _ = writeln!(
            out,
            "{}{}  {}",
            a.id,
            if a.default { " (default)" } else { "" },
            identity
        );
        let _ = writeln!(out, "  workspace  {}", a.workspace.display());
        let _ = writeln!(out, "  agentDir   {}", a.agent_dir.display());
        let _ = writeln!(
            out,
            "  model      {}{}",
            a.model.as_deref().unwrap_or("—"),
            super::output::model_status(a.model_status.as_ref())
        );
        let _ = writeln!(out, "  runtime    {} ({status})", a.runtime.kind);
        if let Some(sandbox) = a.runtime.sandbox.as_deref() {
            let _ = writeln!(out, "  sandbox    {sandbox}");
        }
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

fn human_bindings(result: &agents::BindingsResult, out: Output) {
    let mut out = out.answer();
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
}

fn human_add(result: &agents::AddResult, out: Output) {
    print_conflicts(&result.bindings.conflicts);
    if !result.bindings.conflicts.is_empty() {
        return;
    }
    print_written(&result.written, out);
    let (agent, workspace) = (&result.agent_id, result.workspace.display());
    let dry = result.written.dry_run;
    let next = match &result.applied_by {
        agents::AppliedBy::Controller { pid } => format!(
            "the controller running on this state (pid {pid}) {} as soon as it sees the edit",
            if dry { "would apply it" } else { "applies it" }
        ),
        agents::AppliedBy::Elsewhere { pid, config_dir } => format!(
            "the controller running on this state (pid {pid}) watches {}, not this config directory: it {} (start `deepcli up` on this directory with a state directory of its own)",
            config_dir.display(),
            if dry {
                "would not see the edit"
            } else {
                "does not see the edit"
            }
        ),
        agents::AppliedBy::Apply { state_dir } => format!(
            "no controller runs on state directory {}: `deepcli apply` there {} (or `deepcli up`, which applies every edit)",
            state_dir.display(),
            if dry { "would create it" } else { "creates it" }
        ),
    };
    let done = if dry { "Would add" } else { "Added" };
    let _ = writeln!(
        out.note(),
        "{done} agent `{agent}` (workspace {workspace}); {next}."
    );
}

fn human_set_identity(result: &agents::SetIdentityResult, out: Output) {
    print_written(&result.written, out);
}

fn human_bind(result: &agents::BindResult, out: Output) {
    human_binding_change(
        &[
            (["added", "would add"], &result.added),
            (["updated", "would update"], &result.updated),
            (
                ["skipped (already bound)", "already bound"],
                &result.skipped,
            ),
        ],
        &result.conflicts,
        &result.written,
        out,
    );
}

fn human_unbind(result: &agents::UnbindResult, out: Output) {
    human_binding_change(
        &[
            (["removed", "would remove"], &result.removed),
            (["not bound", "not bound"], &result.missing),
        ],
        &result.conflicts,
        &result.written,
        out,
    );
}

/// What `bind` or `unbind` did to which binds — or would do, with --dry-run or when a conflict
/// stopped it (each list has both wordings) — then the conflicts, or else the files.
fn human_binding_change(
    lists: &[([&str; 2], &Vec<String>)],
    conflicts: &[agents::Conflict],
    written: &manage::Written,
    out: Output,
) {
    let mut notes = out.note();
    let done = !written.dry_run && conflicts.is_empty();
    for ([did, would], list) in lists {
        if !list.is_empty() {
            let what = if done { did } else { would };
            let _ = writeln!(notes, "{what}: {}", list.join(", "));
        }
    }
    print_conflicts(conflicts);
    if conflicts.is_empty() {
        print_written(written, out);
    }
}

fn human_delete(result: &agents::DeleteResult, out: Output) {
    let mut notes = out.note();
    let dry_run = result.written.dry_run;
    let _ = writeln!(
        notes,
        "{} agent `{}`: {}, {}, {}.",
        if dry_run { "Would remove" } else { "Removed" },
        result.agent_id,
        plural(result.removed_bindings, "binding", "bindings"),
        plural(
            result.removed_allow,
            "agentToAgent.allow entry",
            "agentToAgent.allow entries"
        ),
        plural(
            result.removed_allow_agents,
            "subagents.allowAgents entry",
            "subagents.allowAgents entries"
        ),
    );
    let (trash, stays) = if dry_run {
        ("would move to trash on the next apply", "would stay")
    } else {
        ("the next apply moves to trash", "stays")
    };
    for path in &result.trash {
        let _ = writeln!(notes, "  {trash}: {}", path.display());
    }
    for k in &result.kept {
        let _ = writeln!(notes, "  {stays}: {} ({})", k.path.display(), k.reason);
    }
    print_written(&result.written, out);
}
