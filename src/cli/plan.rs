//! `deepcli plan` and `deepcli apply`: the config against the live state.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::{ExitStatus, GlobalSettings, load_valid, state_error};
use crate::apply::{self, ApplyError, Source};
use crate::plan::render::{self, Paths};
use crate::plan::{Action, Desired, Options, Plan, World, diff};
use crate::state::{LeasePurpose, LiveState, StateDir, StateStore};

#[derive(Debug, Args)]
#[command(after_help = "\
Exit codes:
  0  no changes (or changes, without --detailed-exitcode)
  1  error: invalid config, unreadable snapshot, blocked plan; with --detailed-exitcode,
     also a plan that could not run
  2  changes to apply (with --detailed-exitcode); without it, the plan could not run
     (unreadable config directory, damaged state database)")]
pub struct PlanArgs {
    /// Add field-level and file-level diffs under each action.
    #[arg(long)]
    diff: bool,
    /// Print the plan as a versioned JSON document.
    #[arg(long)]
    json: bool,
    /// Save the plan for `deepcli apply FILE`.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Exit 2 when there are changes.
    #[arg(long)]
    detailed_exitcode: bool,
    /// Plan against a `deepcli state export` snapshot instead of the state directory.
    #[arg(long, value_name = "SNAPSHOT")]
    live: Option<PathBuf>,
    /// Let the plan delete protected agents.
    #[arg(long)]
    allow_destroy: bool,
    /// Let the plan delete more than half of the managed agents.
    #[arg(long)]
    allow_mass_delete: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Exit codes:
  0  applied (or nothing to do)
  1  refused or failed: invalid config, blocked or stale plan, no confirmation
  2  the command could not run")]
pub struct ApplyArgs {
    /// A plan saved by `deepcli plan --out`: apply exactly it, or refuse if it is stale.
    plan: Option<PathBuf>,
    /// Do not ask for confirmation.
    #[arg(long)]
    auto_approve: bool,
    /// Allow deleting protected agents (to trash).
    #[arg(long)]
    allow_destroy: bool,
    /// Allow deleting more than half of the managed agents (to trash).
    #[arg(long)]
    allow_mass_delete: bool,
}

/// A saved plan: the plan and what it was made against.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedPlan {
    saved_plan_version: String,
    plan: Plan,
}

fn stderr_error(message: impl std::fmt::Display) {
    let _ = writeln!(anstream::stderr(), "error: {message}");
}

fn paths(global: &GlobalSettings) -> Paths<'_> {
    Paths {
        home: global.load.home.as_deref(),
    }
}

fn bindings_file(desired: &Desired) -> String {
    std::path::Path::new(&desired.routing_body.bindings_file)
        .file_name()
        .map_or_else(
            || "bindings.yaml".into(),
            |n| n.to_string_lossy().into_owned(),
        )
}

/// The plan for this config, state and world, with the operator's allowances.
fn plan_for(
    global: &GlobalSettings,
    desired: &Desired,
    live: &LiveState,
    world: &World,
    allow_destroy: bool,
    allow_mass_delete: bool,
) -> Plan {
    let guard = crate::plan::guard(&global.config_dir, &global.load);
    diff(
        desired,
        live,
        world,
        &Options {
            allow_destroy,
            allow_mass_delete,
            guard: &guard,
        },
    )
}

/// The live state: the database if there is one (a missing one is an empty state, and plan
/// does not create it).
fn read_live(state: &StateDir) -> Result<LiveState, ExitStatus> {
    match StateStore::open_existing(state).and_then(|s| s.map(|s| s.snapshot()).transpose()) {
        Ok(live) => Ok(live.unwrap_or_else(LiveState::empty)),
        Err(e) => Err(state_error(&e)),
    }
}

pub fn plan(global: &GlobalSettings, args: PlanArgs) -> ExitStatus {
    match make_plan(global, &args) {
        Ok(changes) if changes && args.detailed_exitcode => ExitStatus::Error,
        Ok(_) => ExitStatus::Success,
        // With --detailed-exitcode, 2 says "changes to apply": a plan that could not run fails.
        Err(ExitStatus::Error) if args.detailed_exitcode => ExitStatus::Failure,
        Err(status) => status,
    }
}

/// Prints (and saves) the plan; whether it has changes, or how the command ends without one.
fn make_plan(global: &GlobalSettings, args: &PlanArgs) -> Result<bool, ExitStatus> {
    let report = load_valid(global, "fix them first (nothing was changed)")?;
    let desired = Desired::from_config(&report.config);
    let state = StateDir::new(&global.load.state_dir);
    let (live, world) = match &args.live {
        Some(path) => match read_snapshot(path) {
            Ok(live) => {
                let world = World::assumed(&live);
                (live, world)
            }
            Err(e) => {
                stderr_error(e);
                return Err(ExitStatus::Failure);
            }
        },
        None => {
            let live = read_live(&state)?;
            let world = World::observe(&desired.agents, &live, &state);
            (live, world)
        }
    };
    let plan = plan_for(
        global,
        &desired,
        &live,
        &world,
        args.allow_destroy,
        args.allow_mass_delete,
    );
    let text = if args.json {
        render::json(&plan)
    } else {
        let diffs = args.diff.then(|| file_diffs(&plan, &desired));
        render::human(
            &plan,
            &paths(global),
            &bindings_file(&desired),
            diffs.as_ref(),
        )
    };
    let written = if args.json {
        std::io::stdout().lock().write_all(text.as_bytes())
    } else {
        anstream::stdout().write_all(text.as_bytes())
    };
    if written.is_err() {
        return Err(ExitStatus::Error);
    }
    if let Some(out) = &args.out {
        let saved = SavedPlan {
            saved_plan_version: crate::plan::FORMAT_VERSION.into(),
            plan: plan.clone(),
        };
        let text = serde_json::to_string_pretty(&saved).unwrap_or_default();
        if let Err(e) = crate::durable::write_atomic(out, text.as_bytes()) {
            stderr_error(format!("cannot write `{}`: {e}", out.display()));
            return Err(ExitStatus::Failure);
        }
    }
    if !plan.blocked.is_empty() {
        return Err(ExitStatus::Failure);
    }
    Ok(!plan.is_empty())
}

/// What rewriting each existing file would change (identity updates), as text diffs.
fn file_diffs(plan: &Plan, desired: &Desired) -> render::FileDiffs {
    let mut diffs = render::FileDiffs::new();
    for action in &plan.actions {
        let (Action::CreateAgent { id, files, .. } | Action::UpdateAgent { id, files, .. }) =
            action
        else {
            continue;
        };
        let Some(agent) = desired.agents.iter().find(|a| &a.id == id) else {
            continue;
        };
        for f in files {
            if let (Ok(old), Some(new)) = (std::fs::read_to_string(&f.path), agent.file(&f.name)) {
                diffs.insert(f.path.clone(), render::file_diff(&old, new, &f.path));
            }
        }
    }
    diffs
}

fn read_snapshot(path: &Path) -> Result<LiveState, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let live: LiveState = serde_json::from_str(&text).map_err(|e| {
        format!(
            "`{}` is not a `deepcli state export` snapshot: {e}",
            path.display()
        )
    })?;
    if !crate::state::SNAPSHOT_FORMATS.contains(&live.format_version.as_str()) {
        return Err(format!(
            "`{}` has snapshot format {}, this deepcli reads {}",
            path.display(),
            live.format_version,
            crate::state::SNAPSHOT_FORMATS.join(" and ")
        ));
    }
    Ok(live)
}

pub fn apply(global: &GlobalSettings, args: ApplyArgs) -> ExitStatus {
    match run_apply(global, &args) {
        Ok(status) => status,
        Err(ApplyError::State(e)) => state_error(&e),
        Err(e) => {
            stderr_error(e);
            ExitStatus::Failure
        }
    }
}

fn run_apply(global: &GlobalSettings, args: &ApplyArgs) -> Result<ExitStatus, ApplyError> {
    let saved = match &args.plan {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ApplyError::Stale(format!("cannot read `{}`: {e}", path.display())))?;
            let saved: SavedPlan = serde_json::from_str(&text).map_err(|e| {
                ApplyError::Stale(format!("`{}` is not a saved plan: {e}", path.display()))
            })?;
            Some(saved.plan)
        }
    };
    let report = match load_valid(global, "fix them first (nothing was changed)") {
        Ok(report) => report,
        Err(status) => return Ok(status),
    };
    let desired = Desired::from_config(&report.config);
    let state = StateDir::new(&global.load.state_dir);
    let mut store = StateStore::open(&state)?;
    match store.acquire_lease(LeasePurpose::Apply, Duration::from_secs(3)) {
        Err(crate::state::StateError::Locked(holder))
            if holder.purpose == LeasePurpose::Controller =>
        {
            let _ = writeln!(
                anstream::stderr(),
                "error: a controller (deepcli up, pid {} on {}) manages this state and applies every saved change itself; nothing was applied\nhint: see what it did with `deepcli status`",
                holder.pid,
                holder.host
            );
            return Ok(ExitStatus::Failure);
        }
        other => other?,
    }
    let live = store.snapshot()?;
    let world = World::observe(&desired.agents, &live, &state);
    let plan = plan_for(
        global,
        &desired,
        &live,
        &world,
        args.allow_destroy,
        args.allow_mass_delete,
    );
    if let Some(saved) = &saved {
        check_fresh(saved, &plan)?;
    }
    let mut out = anstream::stdout();
    if plan.is_empty() {
        let _ = writeln!(out, "No changes: the live state matches the config.");
        return Ok(ExitStatus::Success);
    }
    if saved.is_none() || !args.auto_approve {
        let _ = out.write_all(
            render::human(&plan, &paths(global), &bindings_file(&desired), None).as_bytes(),
        );
    }
    apply::refuse_blocked(&plan)?;
    if !args.auto_approve && saved.is_none() {
        if !std::io::stdin().is_terminal() {
            let _ = writeln!(
                anstream::stderr(),
                "error: no terminal to confirm on; review the plan and pass --auto-approve"
            );
            return Ok(ExitStatus::Failure);
        }
        let _ = write!(out, "\nApply these changes? Only `yes` is accepted: ");
        let _ = out.flush();
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if answer.trim() != "yes" {
            let _ = writeln!(out, "Nothing applied.");
            return Ok(ExitStatus::Failure);
        }
    }
    let terminal = std::io::stderr().is_terminal();
    let mut progress = |step: &str, i: usize, total: usize| {
        if terminal {
            let _ = writeln!(anstream::stderr(), "  [{i}/{total}] {step}");
        }
    };
    let guard = crate::plan::guard(&global.config_dir, &global.load);
    let mut cx = apply::Context {
        git_commit: apply::git_commit(&global.config_dir),
        source: Source::Cli,
        guard: &guard,
        progress: &mut progress,
    };
    let applied = apply::apply(&mut store, &plan, &desired, &mut cx)?;
    let (add, change, remove) = applied.counts;
    let generation = applied
        .generation
        .map_or_else(String::new, |g| format!(", routing plan generation {g}"));
    let _ = writeln!(
        out,
        "\nApplied: {add} added, {change} changed, {remove} removed (serial {}{generation}).",
        applied.serial
    );
    for (entry, root) in &applied.trashed {
        let _ = writeln!(
            out,
            "Moved to trash: {} (undo: deepcli trash restore {entry})",
            root.join(entry).display()
        );
    }
    Ok(ExitStatus::Success)
}

/// A saved plan applies only to the state and config it was made against, and only while the
/// world still asks for exactly its actions.
fn check_fresh(saved: &Plan, now: &Plan) -> Result<(), ApplyError> {
    if !saved.lineage.is_empty() && saved.lineage != now.lineage {
        return Err(ApplyError::Stale(format!(
            "it was made for state lineage {}, this state is {}",
            saved.lineage, now.lineage
        )));
    }
    if saved.serial != now.serial {
        return Err(ApplyError::Stale(format!(
            "the state was applied since (serial {} → {})",
            saved.serial, now.serial
        )));
    }
    if saved.config_hash != now.config_hash {
        return Err(ApplyError::Stale("the config files changed since".into()));
    }
    if saved.actions != now.actions {
        return Err(ApplyError::Stale(
            "the world changed since (the same config now plans different actions)".into(),
        ));
    }
    Ok(())
}
