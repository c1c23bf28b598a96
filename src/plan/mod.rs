//! `deepcli plan`: the config (desired) against the live state and the world → typed actions
//! with reasons, and drift (reconcile.md, "plan").
//!
//! [`diff`] is pure: the world is observed first ([`World::observe`]) and handed in, so every
//! decision here is testable without a disk.

pub(crate) mod desired;
mod diff;
pub(crate) mod observe;
mod prepare;
pub(crate) mod render;
pub(crate) mod saved;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub(crate) use desired::Desired;
pub(crate) use diff::{Options, diff};
pub(crate) use observe::World;
pub(crate) use prepare::{Inputs, PrepareError, Prepared, Sight, Source, Stages, prepare};

/// The trash guard for a config and state directory: `/`, home directories, and these two
/// directories (absolute) and their ancestors are never moved or bootstrapped into.
pub(crate) fn guard(
    config_dir: &std::path::Path,
    load: &crate::config::LoadOptions,
) -> crate::trash::Guard {
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    crate::trash::Guard::new(
        &absolute(config_dir),
        &absolute(&load.state_dir),
        load.home.as_deref(),
    )
}

/// `formatVersion` of `plan --json` and saved plans. Version 2 spells every key in camelCase
/// (`formatVersion`, `configHash`, `savedPlanVersion`; version 1 had a few in snake_case).
pub(crate) const FORMAT_VERSION: &str = "2";

/// What `apply` would do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Plan {
    pub format_version: String,
    /// The state the plan was made against: a saved plan applies only to it.
    pub lineage: String,
    pub serial: u64,
    pub config_hash: String,
    pub actions: Vec<Action>,
    /// Things changed outside deepcli; the actions above repair them.
    pub drift: Vec<Drift>,
    /// What keeps this plan from being applied as it is.
    pub blocked: Vec<Blocked>,
}

impl Plan {
    pub(crate) fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// (to add, to change, to remove).
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let mut counts = (0, 0, 0);
        for action in &self.actions {
            match action.op() {
                Op::Add => counts.0 += 1,
                Op::Change => counts.1 += 1,
                Op::Remove => counts.2 += 1,
            }
        }
        counts
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Change,
    Remove,
}

/// One field that differs: `from` / `to` are absent when the field is added / removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FieldChange {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<serde_json::Value>,
}

/// Why apply writes a bootstrap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WriteReason {
    /// The workspace is new, or the file was never written.
    New,
    /// The file was deleted outside deepcli.
    Repair,
    /// The agent's identity changed: `IDENTITY.md`, while it still has the hash deepcli wrote,
    /// is rewritten (the only file that ever is).
    Identity,
}

impl std::fmt::Display for WriteReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteReason::New => "new",
            WriteReason::Repair => "repair",
            WriteReason::Identity => "identity",
        })
    }
}

/// A bootstrap file apply writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileWrite {
    pub name: String,
    pub path: PathBuf,
    pub why: WriteReason,
    pub hash: String,
    /// The content on disk now, for `--diff` (identity updates only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_hash: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RuntimeOp {
    Start,
    Restart,
    Stop,
}

/// One of a deleted agent's directories: moved to trash whole, or kept (with deepcli's own
/// files in it moved out when deepcli did not create it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TrashMove {
    pub label: String,
    pub path: PathBuf,
    /// Who made the directory, as recorded when the agent was applied.
    #[serde(default)]
    pub origin: crate::state::DirOrigin,
    /// Why the directory stays (shared with another agent, or deepcli did not create it);
    /// `None`: it moves to trash whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// The files deepcli wrote into a directory that stays because deepcli did not create it:
    /// these move to trash, the directory and everything else in it stay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileMove>,
}

/// A file deepcli wrote, moved to trash out of a directory that stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileMove {
    pub name: String,
    pub path: PathBuf,
    pub state: FileState,
}

/// A file deepcli wrote, as found now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FileState {
    /// As deepcli wrote it.
    Written,
    /// Changed since: it goes to trash all the same, so nothing is lost.
    Edited,
    /// Gone already: nothing to move.
    Missing,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub(crate) enum Action {
    #[serde(rename_all = "camelCase")]
    CreateAgent {
        id: String,
        workspace: PathBuf,
        agent_dir: PathBuf,
        sessions_dir: PathBuf,
        files: Vec<FileWrite>,
        runtime: Option<RuntimeOp>,
    },
    #[serde(rename_all = "camelCase")]
    UpdateAgent {
        id: String,
        changes: Vec<FieldChange>,
        /// Directories to (re)create.
        dirs: Vec<PathBuf>,
        files: Vec<FileWrite>,
        runtime: Option<RuntimeOp>,
        /// Workspaces the agent no longer uses: left where they are.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        left_behind: Vec<PathBuf>,
    },
    #[serde(rename_all = "camelCase")]
    DeleteAgent {
        id: String,
        moves: Vec<TrashMove>,
        runtime: Option<RuntimeOp>,
    },
    #[serde(rename_all = "camelCase")]
    AddAccount { channel: String, account: String },
    #[serde(rename_all = "camelCase")]
    ChangeAccount {
        channel: String,
        account: String,
        changes: Vec<FieldChange>,
    },
    #[serde(rename_all = "camelCase")]
    RemoveAccount { channel: String, account: String },
    #[serde(rename_all = "camelCase")]
    AddBinding {
        key: String,
        describe: String,
        agent_id: String,
        line: u32,
    },
    #[serde(rename_all = "camelCase")]
    ChangeBinding {
        key: String,
        describe: String,
        from_agent: String,
        agent_id: String,
        changes: Vec<FieldChange>,
        line: u32,
    },
    #[serde(rename_all = "camelCase")]
    RemoveBinding {
        key: String,
        describe: String,
        agent_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ForgetTrash { entry: String, dir: PathBuf },
    #[serde(rename_all = "camelCase")]
    PublishRouting {
        from: Option<u64>,
        to: u64,
        content_hash: String,
        /// Bindings added, changed or removed (order changes count as one).
        bindings_changed: u64,
    },
}

impl Action {
    pub(crate) fn op(&self) -> Op {
        match self {
            Action::CreateAgent { .. } | Action::AddAccount { .. } | Action::AddBinding { .. } => {
                Op::Add
            }
            Action::DeleteAgent { .. }
            | Action::RemoveAccount { .. }
            | Action::RemoveBinding { .. }
            | Action::ForgetTrash { .. } => Op::Remove,
            _ => Op::Change,
        }
    }

    /// The journal step name: stable, unique within a plan.
    pub(crate) fn step(&self) -> String {
        match self {
            Action::CreateAgent { id, .. } => format!("agent.create:{id}"),
            Action::UpdateAgent { id, .. } => format!("agent.update:{id}"),
            Action::DeleteAgent { id, .. } => format!("agent.delete:{id}"),
            Action::AddAccount {
                channel, account, ..
            } => format!("account.add:{channel}:{account}"),
            Action::ChangeAccount {
                channel, account, ..
            } => format!("account.change:{channel}:{account}"),
            Action::RemoveAccount { channel, account } => {
                format!("account.remove:{channel}:{account}")
            }
            Action::AddBinding { key, .. } => format!("binding.add:{key}"),
            Action::ChangeBinding { key, .. } => format!("binding.change:{key}"),
            Action::RemoveBinding { key, .. } => format!("binding.remove:{key}"),
            Action::ForgetTrash { entry, .. } => format!("trash.forget:{entry}"),
            Action::PublishRouting { to, .. } => format!("routing.publish:{to}"),
        }
    }
}

/// Something changed outside deepcli.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Drift {
    /// `agent main`, `routing plan`, `trash old-bot-20261130T…`.
    pub object: String,
    pub what: Vec<String>,
}

/// A guard that stops the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Blocked {
    /// What the guard saw (and, for a guard no flag lifts, what to change).
    pub reason: String,
    /// The flag that lets it through, if any (`--allow-destroy`, `--allow-mass-delete`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
}

impl Blocked {
    /// For `deepcli plan` and `apply`: the reason, and the flag to pass when it is meant.
    pub(crate) fn for_cli(&self) -> String {
        match &self.flag {
            Some(flag) => format!("{}; if it is meant, pass {flag}", self.reason),
            None => self.reason.clone(),
        }
    }

    /// For `deepcli status` while `deepcli up` runs, which takes no flag per plan: the reason,
    /// and how to let one plan through.
    pub(crate) fn for_controller(&self) -> String {
        match &self.flag {
            Some(flag) => format!(
                "{}; if it is meant, stop `deepcli up` and start it again with `deepcli up {flag}`: the flag lets through only the plan its first apply makes, later plans are guarded again",
                self.reason
            ),
            None => self.reason.clone(),
        }
    }
}
