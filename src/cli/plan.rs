//! `deepcli plan` and `deepcli apply`: the config against the live state.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{ExitStatus, GlobalSettings, state_error};
use crate::apply::{self, ApplyError, Source};
use crate::plan::render::{self, Paths};
use crate::plan::saved::{self, SavedPlan};
use crate::plan::{Action, Desired, Inputs, Options, Plan, PrepareError, Prepared, Sight};
use crate::state::{LeasePurpose, StateDir, StateStore};

#[derive(Debug, Args)]
#[command(after_help = "\
Exit codes:
  0  no changes (or changes, without --detailed-exitcode)
  1  error: invalid config, unreadable snapshot, blocked plan; with --detailed-exitcode,
     also a plan that could not run
  2  changes to apply (with --detailed-exitcode); without it, the plan could not run
     (unreadable or empty config directory, damaged state database)")]
pub(super) struct PlanArgs {
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
    /// Plan a config directory that holds none of agents.yaml, channels.yaml, bindings.yaml
    /// (a hub of only the implicit agent `main`); without it that is an error.
    #[arg(long)]
    allow_empty: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Exit codes:
  0  applied (or nothing to do)
  1  refused or failed: invalid config, blocked or stale plan, no confirmation
  2  the command could not run (unreadable or empty config directory, damaged state
     database)")]
pub(super) struct ApplyArgs {
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
    /// Apply a config directory that holds none of agents.yaml, channels.yaml, bindings.yaml
    /// (a hub of only the implicit agent `main`); without it that is an error.
    #[arg(long)]
    allow_empty: bool,
}

/// What the operator allowed a plan to do.
#[derive(Debug, Clone, Copy, Default)]
struct Allowances {
    destroy: bool,
    mass_delete: bool,
    empty: bool,
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

/// The plan of the config directory against `live`, with the operator's allowances. Its
/// diagnostics go to stderr (stdout carries only results); a config with errors is refused.
fn prepare<L>(
    global: &GlobalSettings,
    live: L,
    sight: Sight<'_>,
    allow: Allowances,
    render_routing: bool,
) -> Result<Prepared, ExitStatus>
where
    L: FnOnce() -> Result<Option<crate::state::LiveState>, crate::state::StateError> + Send,
{
    let guard = crate::plan::guard(&global.config_dir, &global.load);
    let state = global.state();
    let prepared = crate::plan::prepare(Inputs {
        config: crate::plan::Source::Dir {
            dir: &global.config_dir,
            load: &global.load,
        },
        live,
        state: &state,
        sight,
        options: Options {
            allow_destroy: allow.destroy,
            allow_mass_delete: allow.mass_delete,
            allow_empty: allow.empty,
            guard: &guard,
        },
        render_routing,
    });
    let mut err = anstream::stderr();
    let report = match &prepared {
        Ok(prepared) => Some(&prepared.report),
        Err(PrepareError::Rejected(report)) => Some(&**report),
        Err(_) => None,
    };
    if let Some(report) = report.filter(|r| !r.diagnostics.is_empty()) {
        let _ = err.write_all(crate::report::human(report).as_bytes());
    }
    prepared.map_err(|e| match e {
        PrepareError::Load(e) => {
            let _ = writeln!(err, "error: {e}");
            let _ = writeln!(
                err,
                "hint: pass the config directory with --config DIR (or DEEPCLI_CONFIG)"
            );
            ExitStatus::Error
        }
        PrepareError::Empty { .. } => {
            let _ = writeln!(err, "error: {e}");
            let _ = writeln!(
                err,
                "hint: point --config (or DEEPCLI_CONFIG) at the directory that holds your config files; for a hub of only the implicit agent `main`, pass --allow-empty"
            );
            ExitStatus::Error
        }
        PrepareError::Rejected(_) => {
            let _ = writeln!(
                err,
                "error: the config has errors; fix them first (nothing was changed)"
            );
            ExitStatus::Failure
        }
        PrepareError::State(crate::state::StateError::Locked(holder))
            if holder.purpose == LeasePurpose::Controller =>
        {
            let _ = writeln!(
                err,
                "error: a controller (deepcli up, pid {} on {}) manages this state and applies every saved change itself; nothing was applied\nhint: see what it did with `deepcli status`",
                holder.pid, holder.host
            );
            ExitStatus::Failure
        }
        PrepareError::State(e) => state_error(&e),
        PrepareError::Routing(e) => {
            let _ = writeln!(err, "error: {e}; nothing was changed");
            ExitStatus::Failure
        }
    })
}

pub(super) fn plan(global: &GlobalSettings, args: PlanArgs) -> ExitStatus {
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
    let state = global.state();
    let allowances = Allowances {
        destroy: args.allow_destroy,
        mass_delete: args.allow_mass_delete,
        empty: args.allow_empty,
    };
    let Prepared { plan, desired, .. } = match &args.live {
        Some(path) => {
            // Read first: a snapshot that does not load is the answer, whatever the config.
            let live = saved::read_snapshot(path).map_err(|e| {
                stderr_error(e);
                ExitStatus::Failure
            })?;
            prepare(global, || Ok(Some(live)), Sight::Assumed, allowances, false)?
        }
        // A missing database is an empty state; plan does not create one.
        None => prepare(
            global,
            || {
                StateStore::open_existing(&state)?
                    .map(|s| s.snapshot())
                    .transpose()
            },
            Sight::Observe(None),
            allowances,
            false,
        )?,
    };
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
    let blocked = !plan.blocked.is_empty();
    let changes = !plan.is_empty();
    if let Some(out) = &args.out {
        let text = SavedPlan::new(plan).to_json();
        if let Err(e) = crate::durable::write_atomic(out, text.as_bytes()) {
            stderr_error(format!("cannot write `{}`: {e}", out.display()));
            return Err(ExitStatus::Failure);
        }
    }
    if blocked {
        return Err(ExitStatus::Failure);
    }
    Ok(changes)
}

/// The state a plan made against no state is applied to: created now, and leased. `None` (and
/// said why) when another deepcli created it and applied meanwhile: the plan no longer fits.
fn new_state(state: &StateDir, plan: &Plan) -> Result<Option<StateStore>, ApplyError> {
    let mut store = StateStore::open(state)?;
    store.acquire_lease(LeasePurpose::Apply, Duration::from_secs(3))?;
    let serial = store.serial()?;
    if serial != plan.serial {
        stderr_error(format!(
            "another deepcli applied to `{}` while this plan was made (serial {} → {serial}); nothing was applied. Run `deepcli apply` again",
            state.root().display(),
            plan.serial
        ));
        return Ok(None);
    }
    Ok(Some(store))
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

pub(super) fn apply(global: &GlobalSettings, args: ApplyArgs) -> ExitStatus {
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
    let saved = args.plan.as_deref().map(SavedPlan::read).transpose()?;
    let state = global.state();
    // An existing state is leased before it is read: nothing applies in between. A missing one
    // is planned as empty and made only once the plan is to be applied, so that a refused
    // apply (invalid config, blocked plan, no confirmation) creates nothing.
    let mut store = None;
    let prepared = prepare(
        global,
        || {
            let Some(mut opened) = StateStore::open_existing(&state)? else {
                return Ok(None);
            };
            opened.acquire_lease(LeasePurpose::Apply, Duration::from_secs(3))?;
            let live = opened.snapshot()?;
            store = Some(opened);
            Ok(Some(live))
        },
        Sight::Observe(None),
        Allowances {
            destroy: args.allow_destroy,
            mass_delete: args.allow_mass_delete,
            empty: args.allow_empty,
        },
        true,
    );
    let Prepared { plan, desired, .. } = match prepared {
        Ok(prepared) => prepared,
        Err(status) => return Ok(status),
    };
    if let Some(saved) = &saved {
        saved.check_fresh(&plan)?;
    }
    let output = global.output;
    let mut out = output.answer();
    let mut notes = output.note();
    if plan.is_empty() {
        let _ = writeln!(notes, "No changes: the live state matches the config.");
        return Ok(ExitStatus::Success);
    }
    let asks = !args.auto_approve && saved.is_none();
    if saved.is_none() || !args.auto_approve {
        let text = render::human(&plan, &paths(global), &bindings_file(&desired), None);
        // The plan is what the question asks about: --quiet does not hide it then.
        let _ = if asks {
            out.write_all(text.as_bytes())
        } else {
            notes.write_all(text.as_bytes())
        };
    }
    apply::refuse_blocked(&plan)?;
    if asks {
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
    let mut store = match store {
        Some(store) => store,
        None => match new_state(&state, &plan)? {
            Some(store) => store,
            None => return Ok(ExitStatus::Failure),
        },
    };
    let terminal = std::io::stderr().is_terminal() && !output.quiet;
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
        notes,
        "\nApplied: {add} added, {change} changed, {remove} removed (serial {}{generation}).",
        applied.serial
    );
    for (entry, root) in &applied.trashed {
        let _ = writeln!(
            notes,
            "Moved to trash: {} (undo: deepcli trash restore {entry})",
            root.join(entry).display()
        );
    }
    Ok(ExitStatus::Success)
}
