//! Desired against live: the decisions of reconcile.md, "plan" and "apply", with no I/O.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::desired::{Desired, DesiredAgent};
use super::observe::{DirState, World};
use super::{
    Action, Blocked, Drift, FieldChange, FileMove, FileState, FileWrite, Plan, RuntimeOp,
    TrashMove, WriteReason,
};
use crate::ids::MAIN_AGENT;
use crate::state::{AgentRecord, DirOrigin, LiveState};
use crate::trash::{RefusedPath, TrashError};
use crate::{hash, workspace};

/// What the operator allowed, and which paths are never moved.
pub(crate) struct Options<'a> {
    pub allow_destroy: bool,
    pub allow_mass_delete: bool,
    /// Plan a config directory that holds none of the three files (checked by
    /// [`super::prepare`]: the diff itself does not know the files).
    pub allow_empty: bool,
    pub guard: &'a crate::trash::Guard,
}

pub(crate) fn diff(
    desired: &Desired,
    live: &LiveState,
    world: &World,
    options: &Options<'_>,
) -> Plan {
    let mut plan = Plan {
        format_version: super::FORMAT_VERSION.to_string(),
        lineage: live.lineage.clone(),
        serial: live.serial,
        config_hash: desired.config_hash.clone(),
        actions: Vec::new(),
        drift: Vec::new(),
        blocked: Vec::new(),
    };
    let runtimes: HashMap<&str, &str> = live
        .runtimes
        .iter()
        .filter(|r| r.desired == crate::state::Wanted::Run)
        .map(|r| (r.agent_id.as_str(), r.spec_hash.as_str()))
        .collect();

    // Bindings removed go first: nothing may route to an agent that is about to go.
    bindings(desired, live, &mut plan);
    let removals: Vec<Action> = plan.actions.drain(..).collect();
    let (binding_removals, binding_rest): (Vec<_>, Vec<_>) = removals
        .into_iter()
        .partition(|a| matches!(a, Action::RemoveBinding { .. }));
    plan.actions.extend(binding_removals);
    agents(desired, live, world, &runtimes, options, &mut plan);
    plan.actions.extend(binding_rest);
    accounts(desired, live, &mut plan);
    deletions(desired, live, world, &runtimes, options, &mut plan);
    forgotten_trash(live, world, &mut plan);
    routing(desired, live, world, &mut plan);
    plan
}

/// Agents to create or update; a write into a directory the guard refuses blocks the plan.
fn agents(
    desired: &Desired,
    live: &LiveState,
    world: &World,
    runtimes: &HashMap<&str, &str>,
    options: &Options<'_>,
    plan: &mut Plan,
) {
    let live_agents: HashMap<&str, &AgentRecord> =
        live.agents.iter().map(|a| (a.id.as_str(), a)).collect();
    let recorded: HashMap<(&str, &str), &str> = live
        .bootstrap
        .iter()
        .map(|b| ((b.agent_id.as_str(), b.name.as_str()), b.hash.as_str()))
        .collect();
    for agent in &desired.agents {
        let runtime = runtime_op(agent, runtimes.get(agent.id.as_str()).copied());
        let before = plan.actions.len();
        let moved = match live_agents.get(agent.id.as_str()) {
            None => {
                plan.actions.push(create(agent, world, runtime));
                true
            }
            Some(record) => {
                update(agent, record, world, &recorded, runtime, plan);
                record.workspace != agent.workspace || record.agent_dir != agent.agent_dir
            }
        };
        let writes = match plan.actions.get(before) {
            Some(Action::CreateAgent { .. }) => true,
            Some(Action::UpdateAgent { dirs, files, .. }) => {
                moved || !dirs.is_empty() || !files.is_empty()
            }
            _ => false,
        };
        if !writes {
            continue;
        }
        // Bootstrapping into `/`, a home directory, a system tree, a mount point or deepcli's
        // own directories would scatter files there, and deleting the agent later could never
        // move them.
        let mut agent_dir_refused = false;
        for (label, path) in [
            ("workspace", &agent.workspace),
            ("agentDir", &agent.agent_dir),
            ("sessions", &agent.sessions_dir),
        ] {
            // The sessions directory follows the agentDir: one refusal says it all.
            if label == "sessions" && agent_dir_refused {
                continue;
            }
            if let Err(TrashError::Refused(refused)) = options.guard.check(path) {
                agent_dir_refused |= label == "agentDir";
                plan.blocked.push(refused_dir(&agent.id, label, &refused));
            }
        }
    }
}

/// Agents that left the config: runtime stopped, files to trash. A protected agent, a path the
/// guard refuses and a mass delete block the plan.
fn deletions(
    desired: &Desired,
    live: &LiveState,
    world: &World,
    runtimes: &HashMap<&str, &str>,
    options: &Options<'_>,
    plan: &mut Plan,
) {
    let mut deletes = 0usize;
    let wanted: HashSet<&str> = desired.agents.iter().map(|a| a.id.as_str()).collect();
    for record in &live.agents {
        if wanted.contains(record.id.as_str()) {
            continue;
        }
        deletes += 1;
        if record.id == MAIN_AGENT {
            // `main` always exists in the config; a record of it without a desired agent means
            // a broken state, never a reason to trash it.
            continue;
        }
        if record.protect && !options.allow_destroy {
            plan.blocked.push(Blocked {
                reason: format!(
                    "this plan deletes agent `{}`, which is protected (`protect: true` when it was applied)",
                    record.id
                ),
                flag: Some("--allow-destroy".into()),
            });
        }
        let moves = trash_moves(record, desired, live, world);
        for m in &moves {
            if m.kept.is_none()
                && let Err(TrashError::Refused(refused)) = options.guard.check(&m.path)
            {
                plan.blocked
                    .push(refused_move(&record.id, &m.label, &refused));
            }
            for f in m.files.iter().filter(|f| f.state != FileState::Missing) {
                if let Err(TrashError::Refused(refused)) = options.guard.check_file(&f.path) {
                    plan.blocked
                        .push(refused_move(&record.id, &m.label, &refused));
                }
            }
        }
        let runtime = runtimes
            .contains_key(record.id.as_str())
            .then_some(RuntimeOp::Stop);
        plan.actions.push(Action::DeleteAgent {
            id: record.id.clone(),
            moves,
            runtime,
        });
    }
    let managed = live.agents.len();
    if deletes > 0 && (deletes * 2 > managed || deletes == managed) && !options.allow_mass_delete {
        plan.blocked.push(Blocked {
            reason: format!(
                "this plan deletes {deletes} of {managed} managed agents; an emptied or truncated agents.yaml, or a wrong --config, looks like this. Check the config"
            ),
            flag: Some("--allow-mass-delete".into()),
        });
    }
}

/// Trash entries whose directory was removed by hand: drift, and forgotten.
fn forgotten_trash(live: &LiveState, world: &World, plan: &mut Plan) {
    for entry in &live.trash {
        if entry.restored_at.is_none() && world.trash_dirs.get(&entry.dir) == Some(&false) {
            plan.drift.push(Drift {
                object: format!("trash {}", entry.entry),
                what: vec![format!("{} was removed by hand", entry.dir.display())],
            });
            plan.actions.push(Action::ForgetTrash {
                entry: entry.entry.clone(),
                dir: entry.dir.clone(),
            });
        }
    }
}

/// The config key that sets an agent's directory: the sessions directory lies beside the
/// agentDir.
fn config_key(label: &str) -> &'static str {
    match label {
        "workspace" => "workspace",
        _ => "agentDir",
    }
}

/// A directory deepcli would bootstrap or create for an agent, and must not: where, why, and
/// what to change.
fn refused_dir(agent: &str, label: &str, refused: &RefusedPath) -> Blocked {
    let (what, beside) = match label {
        "sessions" => ("sessions directory", " (beside its agentDir)"),
        other => (other, ""),
    };
    let key = config_key(label);
    let place = if refused.reason == crate::trash::PathRefusal::MountPoint {
        format!(
            "a directory inside the mounted filesystem (e.g. `{}`)",
            refused.path.join(agent).display()
        )
    } else {
        "a directory of its own (below /srv, /opt/<name>, /var/lib/<name>, a home directory or the state directory)".to_string()
    };
    Blocked {
        reason: format!(
            "agent `{agent}`: its {what} {}{beside} is refused: {}, and deepcli neither writes into nor moves one. hint: set `{key}` of agent `{agent}` in agents.yaml to {place}, or remove `{key}` to use the default",
            refused.subject(),
            refused.reason
        ),
        flag: None,
    }
}

/// A deleted agent's path that the guard will not move: the plan stops, and says how to get
/// the agent deleted.
fn refused_move(agent: &str, label: &str, refused: &RefusedPath) -> Blocked {
    let fix = if let crate::trash::PathRefusal::ContainsMountPoint { dir } = &refused.reason {
        format!("unmount `{}`, then apply again", dir.display())
    } else if refused.reason.is_mount() {
        "unmount it, then apply again".to_string()
    } else {
        format!(
            "list the agent again with `{}` pointing at a directory of its own, apply (the old directory is left in place), then remove it",
            config_key(label)
        )
    };
    Blocked {
        reason: format!(
            "agent `{agent}`: its {label} {} cannot be moved to trash: {}; nothing is moved. hint: {fix}",
            refused.subject(),
            refused.reason
        ),
        flag: None,
    }
}

fn runtime_op(agent: &DesiredAgent, live_hash: Option<&str>) -> Option<RuntimeOp> {
    match (&agent.runtime, live_hash) {
        (Some(_), None) => Some(RuntimeOp::Start),
        (Some((_, hash)), Some(live)) if hash != live => Some(RuntimeOp::Restart),
        (None, Some(_)) => Some(RuntimeOp::Stop),
        _ => None,
    }
}

fn file_write(
    agent: &DesiredAgent,
    name: &str,
    why: WriteReason,
    old_hash: Option<String>,
) -> FileWrite {
    let content = agent.file(name).unwrap_or_default();
    FileWrite {
        name: name.to_string(),
        path: agent.workspace.join(name),
        why,
        hash: hash::of(content.as_bytes()),
        old_hash,
    }
}

/// The bootstrap files a workspace in state `dir` gets: all eight into a brand-new or empty
/// one, else those that do not exist (never overwrite).
fn fresh_files(
    agent: &DesiredAgent,
    dir: DirState,
    world: &World,
    why: WriteReason,
) -> Vec<FileWrite> {
    if agent.skip_bootstrap {
        return Vec::new();
    }
    let brand_new = matches!(dir, DirState::Missing | DirState::Empty);
    workspace::FILES
        .iter()
        .filter(|name| brand_new || **name != workspace::FIRST_RUN)
        .filter(|name| brand_new || world.file(&agent.workspace.join(name)) == Some(None))
        .map(|name| file_write(agent, name, why, None))
        .collect()
}

fn create(agent: &DesiredAgent, world: &World, runtime: Option<RuntimeOp>) -> Action {
    Action::CreateAgent {
        id: agent.id.clone(),
        workspace: agent.workspace.clone(),
        agent_dir: agent.agent_dir.clone(),
        sessions_dir: agent.sessions_dir.clone(),
        files: fresh_files(agent, world.dir(&agent.workspace), world, WriteReason::New),
        runtime,
    }
}

fn update(
    agent: &DesiredAgent,
    record: &AgentRecord,
    world: &World,
    recorded: &HashMap<(&str, &str), &str>,
    runtime: Option<RuntimeOp>,
    plan: &mut Plan,
) {
    let changes = if record.spec_hash == agent.spec_hash {
        Vec::new()
    } else {
        let mut changes = field_changes(&record.spec, &agent.spec);
        for (label, from, to) in [
            ("workspace", &record.workspace, &agent.workspace),
            ("agentDir", &record.agent_dir, &agent.agent_dir),
        ] {
            if from != to {
                changes.push(FieldChange {
                    path: format!("{label} (resolved)"),
                    from: Some(Value::String(from.display().to_string())),
                    to: Some(Value::String(to.display().to_string())),
                });
            }
        }
        changes
    };
    let mut drift = Vec::new();
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    let moved = record.workspace != agent.workspace;
    let ws_state = world.dir(&agent.workspace);

    for (label, path, was) in [
        ("workspace", &agent.workspace, &record.workspace),
        ("agentDir", &agent.agent_dir, &record.agent_dir),
        ("sessions", &agent.sessions_dir, &record.sessions_dir),
    ] {
        if !world.dir(path).exists() {
            if world.observed && path == was {
                drift.push(format!("{label} {} was deleted", path.display()));
            }
            dirs.push(path.clone());
        }
    }

    if moved || !ws_state.exists() {
        // A new or recreated workspace is bootstrapped like a brand-new one.
        let why = if moved {
            WriteReason::New
        } else {
            WriteReason::Repair
        };
        files = fresh_files(agent, ws_state, world, why);
    } else if !agent.skip_bootstrap {
        for name in workspace::FILES
            .iter()
            .filter(|n| **n != workspace::FIRST_RUN)
        {
            let path = agent.workspace.join(name);
            let Some(current) = world.file(&path) else {
                continue;
            };
            let wrote = recorded.get(&(agent.id.as_str(), *name)).copied();
            let want = hash::of(agent.file(name).unwrap_or_default().as_bytes());
            match (current, wrote) {
                (None, Some(_)) => {
                    drift.push(format!("workspace file {name} was deleted"));
                    files.push(file_write(agent, name, WriteReason::Repair, None));
                }
                (None, None) => files.push(file_write(agent, name, WriteReason::New, None)),
                (Some(now), Some(wrote)) if *name == workspace::IDENTITY && now != want => {
                    if now == wrote {
                        files.push(file_write(
                            agent,
                            name,
                            WriteReason::Identity,
                            Some(now.to_string()),
                        ));
                    } else if wrote != want && !changes.is_empty() {
                        // The identity changed in the config, but the file is the operator's
                        // now: say so with the change, not on every plan after it.
                        drift.push(format!(
                            "{name} edited (kept; the new identity is not written)"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    let left_behind = if moved && world.dir(&record.workspace).exists() {
        vec![record.workspace.clone()]
    } else {
        Vec::new()
    };
    if !drift.is_empty() {
        plan.drift.push(Drift {
            object: format!("agent {}", agent.id),
            what: drift,
        });
    }
    let protect_changed = record.protect != agent.protect;
    if changes.is_empty()
        && dirs.is_empty()
        && files.is_empty()
        && runtime.is_none()
        && !protect_changed
    {
        return;
    }
    plan.actions.push(Action::UpdateAgent {
        id: agent.id.clone(),
        changes,
        dirs,
        files,
        runtime,
        left_behind,
    });
}

/// Paths overlap when one is the other or inside it.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// What deleting `record` does with each of its directories: a directory another agent also
/// uses stays; one deepcli created moves whole; one it did not create stays, and the files
/// deepcli wrote into it (its bootstrap files, as recorded) move out of it.
fn trash_moves(
    record: &AgentRecord,
    desired: &Desired,
    live: &LiveState,
    world: &World,
) -> Vec<TrashMove> {
    let others: Vec<(&str, [&PathBuf; 3])> = desired
        .agents
        .iter()
        .map(|a| (a.id.as_str(), [&a.workspace, &a.agent_dir, &a.sessions_dir]))
        .chain(
            live.agents
                .iter()
                .filter(|a| a.id != record.id && !desired.agents.iter().any(|d| d.id == a.id))
                .map(|a| (a.id.as_str(), [&a.workspace, &a.agent_dir, &a.sessions_dir])),
        )
        .filter(|(id, _)| *id != record.id)
        .collect();
    [
        ("workspace", &record.workspace, record.workspace_origin),
        ("agentDir", &record.agent_dir, record.agent_dir_origin),
        ("sessions", &record.sessions_dir, record.sessions_origin),
    ]
    .into_iter()
    .map(|(label, path, origin)| {
        let shared = others
            .iter()
            .find(|(_, paths)| paths.iter().any(|p| overlaps(p, path)))
            .map(|(id, _)| format!("shared with agent `{id}`"));
        let (kept, files) = match (shared, origin) {
            // The other agent still uses the bootstrap files too.
            (Some(shared), _) => (Some(shared), Vec::new()),
            (None, DirOrigin::Created) => (None, Vec::new()),
            (None, DirOrigin::Adopted) => (
                Some("existed before deepcli".to_string()),
                deepcli_files(record, label, live, world),
            ),
            (None, DirOrigin::Unknown) => (
                Some("may have existed before deepcli (applied by an older version)".to_string()),
                deepcli_files(record, label, live, world),
            ),
        };
        TrashMove {
            label: label.to_string(),
            path: path.clone(),
            origin,
            kept,
            files,
        }
    })
    .collect()
}

/// The files deepcli wrote into one of `record`'s directories, in bootstrap order: the
/// bootstrap files recorded for the agent at their place in its workspace (a record left at
/// an older workspace is not this directory's). deepcli writes nothing else there, and nothing
/// into the agentDir or sessions directory.
fn deepcli_files(
    record: &AgentRecord,
    label: &str,
    live: &LiveState,
    world: &World,
) -> Vec<FileMove> {
    if label != "workspace" {
        return Vec::new();
    }
    let mut files: Vec<(usize, FileMove)> = live
        .bootstrap
        .iter()
        .filter(|b| b.agent_id == record.id && b.path == record.workspace.join(&b.name))
        .filter_map(|b| {
            let order = workspace::FILES.iter().position(|n| *n == b.name)?;
            let state = match world.file(&b.path) {
                Some(None) => FileState::Missing,
                Some(Some(now)) if now != b.hash => FileState::Edited,
                _ => FileState::Written,
            };
            Some((
                order,
                FileMove {
                    name: b.name.clone(),
                    path: b.path.clone(),
                    state,
                },
            ))
        })
        .collect();
    files.sort_by_key(|(order, _)| *order);
    files.into_iter().map(|(_, f)| f).collect()
}

fn accounts(desired: &Desired, live: &LiveState, plan: &mut Plan) {
    let live_accounts: HashMap<(&str, &str), &crate::state::AccountRecord> = live
        .channel_accounts
        .iter()
        .map(|a| ((a.channel.as_str(), a.account.as_str()), a))
        .collect();
    for a in &desired.accounts {
        match live_accounts.get(&(a.channel.as_str(), a.account.as_str())) {
            None => plan.actions.push(Action::AddAccount {
                channel: a.channel.clone(),
                account: a.account.clone(),
            }),
            Some(l) if l.hash != a.hash => plan.actions.push(Action::ChangeAccount {
                channel: a.channel.clone(),
                account: a.account.clone(),
                changes: field_changes(&l.spec, &a.spec),
            }),
            Some(_) => {}
        }
    }
    let wanted: HashSet<(&str, &str)> = desired
        .accounts
        .iter()
        .map(|a| (a.channel.as_str(), a.account.as_str()))
        .collect();
    for l in &live.channel_accounts {
        if !wanted.contains(&(l.channel.as_str(), l.account.as_str())) {
            plan.actions.push(Action::RemoveAccount {
                channel: l.channel.clone(),
                account: l.account.clone(),
            });
        }
    }
}

fn bindings(desired: &Desired, live: &LiveState, plan: &mut Plan) {
    let live_bindings: HashMap<&str, &crate::state::BindingRecord> =
        live.bindings.iter().map(|b| (b.key.as_str(), b)).collect();
    let wanted: HashSet<&str> = desired
        .bindings
        .iter()
        .map(|d| d.record.key.as_str())
        .collect();
    for b in &live.bindings {
        if !wanted.contains(b.key.as_str()) {
            plan.actions.push(Action::RemoveBinding {
                key: b.key.clone(),
                describe: describe_record(&b.spec.value()),
                agent_id: b.agent_id.clone(),
            });
        }
    }
    for d in &desired.bindings {
        let r = &d.record;
        match live_bindings.get(r.key.as_str()) {
            None => plan.actions.push(Action::AddBinding {
                key: r.key.clone(),
                describe: d.describe.clone(),
                agent_id: r.agent_id.clone(),
                line: d.line,
            }),
            Some(l) if !l.spec.same(&r.spec) => plan.actions.push(Action::ChangeBinding {
                key: r.key.clone(),
                describe: d.describe.clone(),
                from_agent: l.agent_id.clone(),
                agent_id: r.agent_id.clone(),
                changes: field_changes(&l.spec.value(), &r.spec.value()),
                line: d.line,
            }),
            Some(_) => {}
        }
    }
}

fn describe_record(spec: &Value) -> String {
    serde_json::from_value::<crate::config::model::BindingSpec>(spec.clone())
        .map(|s| super::desired::describe_binding(&s))
        .unwrap_or_else(|_| "binding".to_string())
}

fn routing(desired: &Desired, live: &LiveState, world: &World, plan: &mut Plan) {
    let published = live.routing.as_ref();
    let same = published.is_some_and(|p| p.content_hash == desired.routing_hash);
    let file_ok = world.routing_file.as_deref() == Some(desired.routing_hash.as_str());
    if same && file_ok {
        return;
    }
    if same && world.observed {
        plan.drift.push(Drift {
            object: "routing plan".into(),
            what: vec![match &world.routing_file {
                None => "routing-plan.json is missing".to_string(),
                Some(_) => "routing-plan.json was changed by hand".to_string(),
            }],
        });
    }
    let changed = plan
        .actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::AddBinding { .. }
                    | Action::ChangeBinding { .. }
                    | Action::RemoveBinding { .. }
            )
        })
        .count() as u64;
    let reordered = !same && changed == 0 && published.is_some();
    plan.actions.push(Action::PublishRouting {
        from: published.map(|p| p.generation),
        to: published.map_or(1, |p| p.generation + 1),
        content_hash: desired.routing_hash.clone(),
        bindings_changed: changed + u64::from(reordered),
    });
}

/// Field-level differences between two JSON values, by dotted path.
pub(super) fn field_changes(from: &Value, to: &Value) -> Vec<FieldChange> {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    flatten("", from, &mut a);
    flatten("", to, &mut b);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| FieldChange {
            path: k.clone(),
            from: a.get(k).cloned(),
            to: b.get(k).cloned(),
        })
        .collect()
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&path, v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string(), value.clone());
        }
    }
}
