//! `deepcli agents …`: arguments → `manage::agents` → JSON or a few lines of text.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::emit::{WriteArgs, context, emit, print_written};
use super::{ExitStatus, GlobalSettings};
use crate::manage::{self, agents};
use crate::plural::plural;

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
        AgentsCommand::List { bindings, json } => emit(agents::list(&ctx, bindings), json, |r| {
            human_list(r, bindings)
        }),
        AgentsCommand::Bindings { agent, json } => emit(
            agents::bindings(&ctx, agent.as_deref()),
            json,
            human_bindings,
        ),
        AgentsCommand::Add(args) => {
            let json = args.write.json;
            emit(agents::add(&ctx, &args.request()), json, human_add)
        }
        AgentsCommand::SetIdentity(args) => {
            let json = args.write.json;
            emit(
                agents::set_identity(&ctx, &args.request()),
                json,
                human_set_identity,
            )
        }
        AgentsCommand::Bind(args) => {
            let result = agents::parse_binds(&args.bind).and_then(|targets| {
                agents::bind(&ctx, &args.agent_id, &targets, args.write.dry_run)
            });
            emit(result, args.write.json, human_bind)
        }
        AgentsCommand::Unbind(args) => {
            let result = agents::parse_binds(&args.bind).and_then(|targets| {
                agents::unbind(&ctx, &args.agent_id, &targets, args.all, args.write.dry_run)
            });
            emit(result, args.write.json, human_unbind)
        }
        AgentsCommand::Delete(args) => {
            if !args.force && !args.write.dry_run && !confirm(&args.agent_id) {
                return ExitStatus::Error;
            }
            let result = agents::delete(&ctx, &args.agent_id, args.write.dry_run);
            emit(result, args.write.json, human_delete)
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

fn human_bindings(result: &agents::BindingsResult) {
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
}

fn human_add(result: &agents::AddResult) {
    print_conflicts(&result.bindings.conflicts);
    if !result.bindings.conflicts.is_empty() {
        return;
    }
    print_written(&result.written);
    let (agent, workspace) = (&result.agent_id, result.workspace.display());
    let _ = if result.written.dry_run {
        writeln!(
            anstream::stdout(),
            "Would add agent `{agent}` (workspace {workspace}); `deepcli apply` would then create it."
        )
    } else {
        writeln!(
            anstream::stdout(),
            "Added agent `{agent}` (workspace {workspace}); `deepcli apply` creates it."
        )
    };
}

fn human_set_identity(result: &agents::SetIdentityResult) {
    print_written(&result.written);
}

fn human_bind(result: &agents::BindResult) {
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
    );
}

fn human_unbind(result: &agents::UnbindResult) {
    human_binding_change(
        &[
            (["removed", "would remove"], &result.removed),
            (["not bound", "not bound"], &result.missing),
        ],
        &result.conflicts,
        &result.written,
    );
}

/// What `bind` or `unbind` did to which binds — or would do, with --dry-run or when a conflict
/// stopped it (each list has both wordings) — then the conflicts, or else the files.
fn human_binding_change(
    lists: &[([&str; 2], &Vec<String>)],
    conflicts: &[agents::Conflict],
    written: &manage::Written,
) {
    let mut out = anstream::stdout();
    let done = !written.dry_run && conflicts.is_empty();
    for ([did, would], list) in lists {
        if !list.is_empty() {
            let what = if done { did } else { would };
            let _ = writeln!(out, "{what}: {}", list.join(", "));
        }
    }
    print_conflicts(conflicts);
    if conflicts.is_empty() {
        print_written(written);
    }
}

fn human_delete(result: &agents::DeleteResult) {
    let mut out = anstream::stdout();
    let dry_run = result.written.dry_run;
    let _ = writeln!(
        out,
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
        let _ = writeln!(out, "  {trash}: {}", path.display());
    }
    for k in &result.kept {
        let _ = writeln!(out, "  {stays}: {} ({})", k.path.display(), k.reason);
    }
    print_written(&result.written);
}
