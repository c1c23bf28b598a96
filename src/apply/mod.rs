//! `deepcli apply`: executes a [`Plan`] against the world and records it in the state.
//!
//! Every action is a journal step: recorded as started before anything is touched, and marked
//! done in the same transaction as the records it changes. Each step is idempotent against what
//! it finds on disk, so when the process dies anywhere, the next plan sees the world as it is
//! and the next apply finishes the job: nothing lost, nothing done twice. A trash move resumes
//! into the entry the crashed attempt started (its name is in the journal); a create or update
//! resumes with what the crashed attempt found on disk before it created any directory (also in
//! the journal), so a directory it created is still recorded as created, not as adopted.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::desired::DesiredAgent;
use crate::plan::{Action, Desired, Plan};
use crate::state::{
    AgentRecord, BootstrapRecord, DirOrigin, HistoryRecord, LeasePurpose, Outcome, PlanRecord,
    StateError, StateStore, TrashRecord, Wanted,
};
use crate::{failpoint, hash, trash, workspace};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    #[error(transparent)]
    State(#[from] StateError),
    /// A step's effect on disk failed.
    #[error("{step}: {source}")]
    Step {
        step: String,
        #[source]
        source: std::io::Error,
    },
    /// A plan that does not fit the config it is applied with (a bug, or a plan made for
    /// another config).
    #[error("{step}: {message}")]
    Mismatch { step: String, message: String },
    #[error("the plan is blocked:\n{0}")]
    Blocked(String),
    /// A restore would put conversations back that the live state holds again.
    #[error(
        "trash entry `{entry}` holds conversations that are in use again: {}; nothing was restored",
        keys.join(", ")
    )]
    RestoreConflict { entry: String, keys: Vec<String> },
    #[error(transparent)]
    Saved(#[from] crate::plan::saved::SavedError),
    #[error(transparent)]
    Trash(#[from] trash::TrashError),
    /// The effect happened; recording it in the state failed.
    #[error("{what}, but the state could not record it: {source}")]
    Unrecorded {
        what: String,
        #[source]
        source: StateError,
    },
}

/// Who applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Cli,
    Controller,
}

impl Source {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Cli => "cli",
            Source::Controller => "controller",
        }
    }
}

pub(crate) struct Context<'a> {
    /// The commit the config directory is checked out at ([`git_commit`]), for the history.
    pub git_commit: Option<String>,
    pub source: Source,
    pub guard: &'a trash::Guard,
    /// Called after each step with (step, index, total).
    pub progress: &'a mut dyn FnMut(&str, usize, usize),
}

/// What an apply did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    pub serial: u64,
    pub counts: (u64, u64, u64),
    pub generation: Option<u64>,
    pub trashed: Vec<(String, PathBuf)>,
}

fn step_err(step: &str) -> impl Fn(std::io::Error) -> ApplyError + '_ {
    move |source| ApplyError::Step {
        step: step.to_string(),
        source,
    }
}

/// A plan that a guard stopped is not applied: the reasons say what to check or which flag
/// lets it through.
pub(crate) fn refuse_blocked(plan: &Plan) -> Result<(), ApplyError> {
    if plan.blocked.is_empty() {
        return Ok(());
    }
    let reasons: Vec<String> = plan
        .blocked
        .iter()
        .map(|b| format!("  {}", b.for_cli()))
        .collect();
    Err(ApplyError::Blocked(reasons.join("\n")))
}

/// Runs `plan`. The caller holds the state lease.
pub(crate) fn apply(
    store: &mut StateStore,
    plan: &Plan,
    desired: &Desired,
    cx: &mut Context<'_>,
) -> Result<Applied, ApplyError> {
    refuse_blocked(plan)?;
    let serial = store.serial()?;
    if plan.is_empty() {
        return Ok(Applied {
            serial,
            counts: (0, 0, 0),
            generation: None,
            trashed: Vec::new(),
        });
    }
    let serial = serial + 1;
    let history = HistoryRecord {
        id: 0,
        serial,
        started_at: crate::clock::now(),
        finished_at: None,
        user: user(),
        host: crate::os::hostname(),
        source: cx.source.as_str().to_string(),
        config_hash: plan.config_hash.clone(),
        git_commit: cx.git_commit.clone(),
        added: 0,
        changed: 0,
        removed: 0,
        outcome: Outcome::Running,
        error: None,
    };
    let history_id = store.transaction(|tx| {
        // An apply that died left its row `running`; this one holds the lease, so it is over.
        tx.interrupt_history()?;
        tx.start_history(&history)
    })?;
    let mut applied = Applied {
        serial,
        counts: plan.counts(),
        generation: None,
        trashed: Vec::new(),
    };
    let total = plan.actions.len();
    // Steps a crashed apply left open, with their details (a delete's trash entry).
    let open: std::collections::HashMap<String, Option<String>> = store
        .unfinished_steps()?
        .into_iter()
        .map(|(_, step, detail)| (step, detail))
        .collect();
    let records = Records::new(desired);
    let mut i = 0;
    while i < plan.actions.len() {
        // A run of steps that only write the database commits as one transaction: all of it
        // or none, so it needs no `started` mark (its journal rows are written `done`).
        let batch = plan.actions[i..]
            .iter()
            .take(DB_BATCH)
            .take_while(|a| Records::db_only(a))
            .count();
        let done = if batch > 0 {
            run_db_steps(store, &plan.actions[i..i + batch], &records, serial).map(|()| batch)
        } else {
            let action = &plan.actions[i];
            let step = action.step();
            let resumed = open.get(&step).cloned().flatten();
            run_step(
                store,
                action,
                desired,
                serial,
                &step,
                resumed,
                cx,
                &mut applied,
            )
            .map(|()| 1)
        };
        match done {
            Ok(n) => {
                i += n;
                (cx.progress)(&plan.actions[i - 1].step(), i, total);
            }
            Err(e) => {
                let message = e.to_string();
                let _ = store.transaction(|tx| {
                    tx.finish_history(history_id, applied.counts, Outcome::Failed, Some(&message))
                });
                return Err(e);
            }
        }
    }
    store.transaction(|tx| {
        tx.set_serial(serial)?;
        tx.finish_history(history_id, applied.counts, Outcome::Applied, None)
    })?;
    Ok(applied)
}

/// How many database-only steps one transaction holds at most.
const DB_BATCH: usize = 2000;

/// The records of the desired config by key, looked up once per step.
struct Records<'a> {
    bindings: std::collections::HashMap<&'a str, &'a crate::state::BindingRecord>,
    accounts: std::collections::HashMap<(&'a str, &'a str), &'a crate::state::AccountRecord>,
}

impl<'a> Records<'a> {
    fn new(desired: &'a Desired) -> Records<'a> {
        Records {
            bindings: desired
                .bindings
                .iter()
                .map(|b| (b.record.key.as_str(), &b.record))
                .collect(),
            accounts: desired
                .accounts
                .iter()
                .map(|a| ((a.channel.as_str(), a.account.as_str()), a))
                .collect(),
        }
    }

    /// Whether a step touches nothing but the database.
    fn db_only(action: &Action) -> bool {
        matches!(
            action,
            Action::AddAccount { .. }
                | Action::ChangeAccount { .. }
                | Action::RemoveAccount { .. }
                | Action::AddBinding { .. }
                | Action::ChangeBinding { .. }
                | Action::RemoveBinding { .. }
                | Action::ForgetTrash { .. }
        )
    }
}

/// Runs database-only steps in one transaction.
fn run_db_steps(
    store: &mut StateStore,
    actions: &[Action],
    records: &Records<'_>,
    serial: u64,
) -> Result<(), ApplyError> {
    store.transaction(|tx| {
        for action in actions {
            let step = action.step();
            failpoint::hit(&format!("before:{step}"));
            match action {
                Action::AddAccount { channel, account }
                | Action::ChangeAccount {
                    channel, account, ..
                } => {
                    if let Some(r) = records.accounts.get(&(channel.as_str(), account.as_str())) {
                        tx.put_account(r)?;
                    }
                }
                Action::RemoveAccount { channel, account } => {
                    tx.delete_account(channel, account)?
                }
                Action::AddBinding { key, .. } | Action::ChangeBinding { key, .. } => {
                    if let Some(r) = records.bindings.get(key.as_str()) {
                        tx.put_binding(r)?;
                    }
                }
                Action::RemoveBinding { key, .. } => tx.delete_binding(key)?,
                Action::ForgetTrash { entry, .. } => tx.delete_trash(entry)?,
                _ => {}
            }
            tx.journal_done(serial, &step)?;
        }
        Ok(())
    })?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_step(
    store: &mut StateStore,
    action: &Action,
    desired: &Desired,
    serial: u64,
    step: &str,
    resumed: Option<String>,
    cx: &mut Context<'_>,
    applied: &mut Applied,
) -> Result<(), ApplyError> {
    let agent = match action {
        Action::CreateAgent { id, .. } | Action::UpdateAgent { id, .. } => {
            Some(desired.agents.iter().find(|a| &a.id == id).ok_or_else(|| {
                ApplyError::Mismatch {
                    step: step.to_string(),
                    message: format!("agent `{id}` is not in the config"),
                }
            })?)
        }
        _ => None,
    };
    // A delete resumes into the trash entry its crashed attempt started; a create or update
    // resumes with what its crashed attempt found on disk before it created anything.
    let found = agent.map(|agent| DirsBefore::find(agent, resumed.as_deref()));
    let detail = match action {
        Action::DeleteAgent { id, .. } => Some(resumed.unwrap_or_else(|| {
            trash::unique_entry_name(&store.dir().trash(), id, jiff::Timestamp::now())
        })),
        _ => found
            .as_ref()
            .and_then(|found| serde_json::to_string(found).ok()),
    };
    store.journal_start(serial, step, detail.as_deref())?;
    failpoint::hit(&format!("before:{step}"));
    let at = Step { serial, name: step };
    match action {
        Action::CreateAgent { files, .. } | Action::UpdateAgent { files, .. } => {
            let (Some(agent), Some(found)) = (agent, found) else {
                return Err(ApplyError::Mismatch {
                    step: step.to_string(),
                    message: "an agent step without its agent".into(),
                });
            };
            write_agent(store, agent, files, &found, at)
        }
        Action::DeleteAgent { id, moves, .. } => {
            let entry = detail.unwrap_or_default();
            let trash_root = delete_agent(store, id, moves, &entry, at, cx.guard)?;
            applied.trashed.push((entry, trash_root));
            Ok(())
        }
        Action::PublishRouting { to, .. } => {
            publish_routing(store, desired, *to, at)?;
            applied.generation = Some(*to);
            Ok(())
        }
        // Database-only steps run in batches (`run_db_steps`), never here.
        _ => Err(ApplyError::Mismatch {
            step: step.to_string(),
            message: "a database-only step reached the one-step path".into(),
        }),
    }
}

/// Which journal step an effect belongs to.
#[derive(Clone, Copy)]
struct Step<'a> {
    serial: u64,
    name: &'a str,
}

/// Creates or updates an agent: its directories, its bootstrap files, then its records (and
/// the step's `done`) in one transaction.
fn write_agent(
    store: &mut StateStore,
    agent: &crate::plan::desired::DesiredAgent,
    files: &[crate::plan::FileWrite],
    found: &DirsBefore,
    at: Step<'_>,
) -> Result<(), ApplyError> {
    let (serial, step) = (at.serial, at.name);
    let err = step_err(step);
    let applied_before = store.agent(&agent.id)?;
    let origin = |path: &std::path::Path, was: Option<(&std::path::Path, DirOrigin)>| {
        match was {
            // The same directory as last applied keeps its origin, even if it was deleted by
            // hand and is being recreated.
            Some((was, origin)) if was == path => origin,
            _ if found.existed(path) => DirOrigin::Adopted,
            _ => DirOrigin::Created,
        }
    };
    let applied = applied_before.as_ref();
    let workspace_origin = origin(
        &agent.workspace,
        applied.map(|a| (a.workspace.as_path(), a.workspace_origin)),
    );
    let agent_dir_origin = origin(
        &agent.agent_dir,
        applied.map(|a| (a.agent_dir.as_path(), a.agent_dir_origin)),
    );
    let sessions_origin = origin(
        &agent.sessions_dir,
        applied.map(|a| (a.sessions_dir.as_path(), a.sessions_origin)),
    );
    for dir in [&agent.workspace, &agent.agent_dir, &agent.sessions_dir] {
        std::fs::create_dir_all(dir).map_err(&err)?;
    }
    for file in files {
        let content = agent.file(&file.name).unwrap_or_default();
        let replace = file.why == crate::plan::WriteReason::Identity;
        crate::durable::write_file(&file.path, content.as_bytes(), replace).map_err(&err)?;
        failpoint::hit(&format!("file:{step}:{}", file.name));
    }
    crate::durable::sync_fs(&agent.workspace).map_err(&err)?;
    failpoint::hit(&format!("after:{step}"));
    // Record every bootstrap file that holds exactly what deepcli would write: the files of
    // this step and those of a crashed attempt alike.
    let mut records = Vec::new();
    if !agent.skip_bootstrap {
        for name in workspace::FILES {
            let path = agent.workspace.join(name);
            let want = hash::of(agent.file(name).unwrap_or_default().as_bytes());
            if std::fs::read(&path).is_ok_and(|b| hash::of(&b) == want) {
                records.push(BootstrapRecord {
                    agent_id: agent.id.clone(),
                    name: name.to_string(),
                    path,
                    hash: want,
                });
            }
        }
    }
    let record = AgentRecord {
        id: agent.id.clone(),
        spec_hash: agent.spec_hash.clone(),
        spec: agent.spec.clone(),
        workspace: agent.workspace.clone(),
        agent_dir: agent.agent_dir.clone(),
        sessions_dir: agent.sessions_dir.clone(),
        protect: agent.protect,
        workspace_origin,
        agent_dir_origin,
        sessions_origin,
        applied_serial: serial,
    };
    store
        .transaction(|tx| {
            tx.put_agent(&record)?;
            for r in &records {
                tx.put_bootstrap(r)?;
            }
            match &agent.runtime {
                Some((kind, h)) => tx.want_runtime(&agent.id, kind.as_str(), h, Wanted::Run)?,
                None => tx.want_runtime(&agent.id, "none", "", Wanted::Stop)?,
            }
            tx.finish_step(step)
        })
        .map_err(ApplyError::from)
}

/// Deletes an agent: its directories (or, from one deepcli did not create, the files it wrote
/// there) into trash entry `entry`, then its records in one transaction. Returns the trash
/// root.
fn delete_agent(
    store: &mut StateStore,
    id: &str,
    moves: &[crate::plan::TrashMove],
    entry: &str,
    at: Step<'_>,
    guard: &trash::Guard,
) -> Result<PathBuf, ApplyError> {
    let (serial, step) = (at.serial, at.name);
    stop_runtime(store, id);
    // A directory deepcli did not create stays; the files deepcli wrote into it go (all of
    // them, those already gone included, so that a resumed step asks for what its crashed
    // attempt asked for).
    let items: Vec<trash::TrashItem> = moves
        .iter()
        .filter(|m| m.kept.is_none() || !m.files.is_empty())
        .map(|m| trash::TrashItem {
            label: m.label.clone(),
            path: m.path.clone(),
            files: m
                .kept
                .is_some()
                .then(|| m.files.iter().map(|f| f.name.clone()).collect()),
        })
        .collect();
    let kept: Vec<trash::Kept> = moves
        .iter()
        .filter_map(|m| {
            m.kept.as_ref().map(|why| trash::Kept {
                label: m.label.clone(),
                path: m.path.clone(),
                reason: why.clone(),
            })
        })
        .collect();
    let trash_root = store.dir().trash();
    let manifest = trash::move_to_trash(&trash_root, entry, id, serial, &items, &kept, guard)?;
    // The agent's own directory under the state dir, when moving left it empty; never the
    // parent of an agentDir elsewhere, which deepcli may have found there.
    let root = store.dir().root();
    let own = std::path::absolute(root)
        .unwrap_or_else(|_| root.to_path_buf())
        .join("agents")
        .join(id);
    if moves
        .iter()
        .any(|m| m.label == "agentDir" && m.path.parent() == Some(own.as_path()))
    {
        let _ = std::fs::remove_dir(&own);
    }
    failpoint::hit(&format!("after:{step}"));
    let record = TrashRecord {
        entry: entry.to_string(),
        agent_id: id.to_string(),
        dir: trash_root.join(entry),
        serial,
        created_at: manifest.created_at.clone(),
        manifest: serde_json::to_value(&manifest).unwrap_or_default(),
        restored_at: None,
    };
    store.transaction(|tx| {
        tx.delete_agent(id)?;
        tx.delete_runtime(id)?;
        // Its conversations go with it: a new agent with this id starts clean.
        tx.trash_access(id, entry)?;
        tx.put_trash(&record)?;
        tx.finish_step(step)
    })?;
    Ok(trash_root)
}

/// What a replica that does not lead makes of the leader's apply on its own host
/// (docs/scale-out.md): each agent's directories and the bootstrap files missing from them,
/// so that the agents it takes over can run here. It records nothing (the leader did) and
/// replaces nothing.
pub(crate) fn materialize(desired: &Desired) -> std::io::Result<()> {
    for agent in &desired.agents {
        for dir in [&agent.workspace, &agent.agent_dir, &agent.sessions_dir] {
            std::fs::create_dir_all(dir)?;
        }
        if agent.skip_bootstrap {
            continue;
        }
        for name in workspace::FILES {
            if let Some(content) = agent.file(name) {
                crate::durable::write_file(&agent.workspace.join(name), content.as_bytes(), false)?;
            }
        }
    }
    Ok(())
}

/// Publishes routing plan generation `to`: the document, then its record.
fn publish_routing(
    store: &mut StateStore,
    desired: &Desired,
    to: u64,
    at: Step<'_>,
) -> Result<(), ApplyError> {
    let step = at.name;
    let path = store.dir().routing_plan();
    // Private: the plan names every account, the peers bindings match and the reply URLs.
    crate::durable::write_atomic_private(&path, desired.routing_json(to).as_bytes())
        .map_err(step_err(step))?;
    failpoint::hit(&format!("after:{step}"));
    let record = PlanRecord {
        generation: to,
        content_hash: desired.routing_hash.clone(),
        config_hash: desired.config_hash.clone(),
        bindings: desired.routing.bindings.len() as u64,
        published_at: crate::clock::now(),
    };
    store.transaction(|tx| {
        tx.put_plan(&record)?;
        tx.finish_step(step)
    })?;
    Ok(())
}

/// Whether each of an agent's directories existed before its create or update step first
/// touched it: one that did is adopted, never moved to trash whole. Journaled as the step's
/// detail before anything is created, so that a resumed step reads what its crashed attempt
/// found instead of mistaking a directory that attempt created for one that was there before.
#[derive(Debug, Default, Serialize, Deserialize)]
struct DirsBefore {
    dirs: Vec<(PathBuf, bool)>,
}

impl DirsBefore {
    /// The agent's directories as the crashed attempt (`resumed`, its journal detail) found
    /// them, and the others as they are now.
    fn find(agent: &DesiredAgent, resumed: Option<&str>) -> DirsBefore {
        let earlier: DirsBefore = resumed
            .and_then(|detail| serde_json::from_str(detail).ok())
            .unwrap_or_default();
        let dirs = [&agent.workspace, &agent.agent_dir, &agent.sessions_dir]
            .into_iter()
            .map(|path| {
                let existed = earlier
                    .dirs
                    .iter()
                    .find(|(p, _)| p == path)
                    .map_or_else(|| std::fs::symlink_metadata(path).is_ok(), |(_, e)| *e);
                (path.clone(), existed)
            })
            .collect();
        DirsBefore { dirs }
    }

    fn existed(&self, path: &Path) -> bool {
        self.dirs.iter().any(|(p, existed)| p == path && *existed)
    }
}

/// Stops a runtime that state says is running (the controller normally does this; a CLI apply
/// with no controller must not leave it running against a workspace that moves to trash).
fn stop_runtime(store: &StateStore, agent_id: &str) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let Ok(runtimes) = store.runtimes() else {
        return;
    };
    let Some(pid) = runtimes
        .iter()
        .find(|r| r.agent_id == agent_id)
        .and_then(|r| {
            let pid = u32::try_from(r.pid?).ok()?;
            // Only the very process that was started: a reused pid is someone else's.
            (crate::os::process_start(pid) == r.process_start).then_some(pid)
        })
    else {
        return;
    };
    let Ok(raw) = i32::try_from(pid) else {
        return;
    };
    let group = Pid::from_raw(raw);
    if killpg(group, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if crate::os::process_start(pid).is_none() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = killpg(group, Signal::SIGKILL);
}

fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// The commit the config directory is checked out at, when it is a git checkout.
pub(crate) fn git_commit(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
}

/// What a restore put back.
#[derive(Debug)]
pub(crate) struct Restored {
    pub manifest: trash::Manifest,
    /// How many of the agent's conversations (session map, transcripts, delivery records) came
    /// back into the Access tables.
    pub conversations: u64,
}

/// `deepcli trash restore ENTRY`: puts a trash entry's files back where they came from (under
/// the lease, the guard checked again at each path) and its conversations back into the
/// Access tables, and records in the state that it was restored. Refused, with nothing moved,
/// when a conversation it holds is in use again (an agent with the same id talked in it since).
/// A restore whose record could not be written is an error: the files are back, and the
/// message says so.
pub(crate) fn restore(
    store: &mut StateStore,
    entry: &str,
    guard: &trash::Guard,
) -> Result<Restored, ApplyError> {
    store.acquire_lease(LeasePurpose::Trash, std::time::Duration::from_secs(3))?;
    let keys = store.access_restore_conflicts(entry)?;
    if !keys.is_empty() {
        return Err(ApplyError::RestoreConflict {
            entry: entry.to_string(),
            keys,
        });
    }
    let conversations = store.trashed_conversations(entry)?;
    let manifest = trash::restore(&store.dir().trash(), entry, guard)?;
    store
        .transaction(|tx| {
            tx.restore_access(entry)?;
            tx.mark_restored(entry)
        })
        .map_err(|e| ApplyError::Unrecorded {
            what: format!("trash entry `{entry}` was restored"),
            source: e,
        })?;
    Ok(Restored {
        manifest,
        conversations,
    })
}
