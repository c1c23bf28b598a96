//! The task path's own cost, for `benches/tasks.rs` (feature `bench-tools`): what deepcli does
//! between an agent's `tasks_create` and its assignee's `submit` with one artifact — the
//! state's transactions (created, started, the artifact's row, submitted) and the artifact
//! hashed into the store and placed read-only in the owner's workspace — on a real state
//! directory. The agents' turns and the Hub's MCP hops are not in it (scripts/bench-hub measures
//! those).

use std::path::{Path, PathBuf};

use super::artifacts::{self, ArtifactName};
use super::state::{Actor, Event};
use super::store::{HandedIn, NewTask, Requester, TaskStore};
use crate::state::StateDir;

pub struct TaskBench {
    store: TaskStore,
    artifacts: PathBuf,
    owner: PathBuf,
    assignee: PathBuf,
}

impl TaskBench {
    /// A state directory in `dir` (created), with the owner's and the assignee's workspaces.
    pub fn open(dir: &Path) -> Result<TaskBench, String> {
        let state = StateDir::new(dir.join("state"));
        state.create().map_err(|e| e.to_string())?;
        crate::state::StateStore::open(&state).map_err(|e| e.to_string())?;
        let owner = dir.join("ws-alpha");
        let assignee = dir.join("ws-beta");
        for ws in [&owner, &assignee] {
            std::fs::create_dir_all(ws).map_err(|e| e.to_string())?;
        }
        Ok(TaskBench {
            store: TaskStore::open(&state).map_err(|e| e.to_string())?,
            artifacts: state.artifacts(),
            owner,
            assignee,
        })
    }

    /// The assignee's workspace, where the artifacts handed in are written first.
    pub fn assignee_workspace(&self) -> &Path {
        &self.assignee
    }

    /// A new task, created and started: its id.
    pub fn start(&self) -> Result<String, String> {
        let new = NewTask {
            title: "bench".into(),
            acceptance: "it passes".into(),
            requester: Requester::Session("agent:alpha:main".into()),
            owner: "alpha".into(),
            assignee: "beta".into(),
            room: Some("agent:alpha:main".into()),
            parent: None,
        };
        let task = self.store.create(&new, "mcp").map_err(|e| e.to_string())?;
        self.store
            .apply(&task.id, &Event::Started, &Actor::Hub, "mcp", &[], None)
            .map_err(|e| e.to_string())?;
        Ok(task.id)
    }

    /// File `name` of the assignee's workspace handed in to task `id`: hashed into the store,
    /// recorded, placed in the owner's workspace. Its size.
    pub fn hand_in(&self, id: &str, name: &str) -> Result<u64, String> {
        let name = ArtifactName::parse(name, &self.assignee)?;
        let store = self.artifacts.join(id);
        let stored = artifacts::hand_in(&self.assignee, &name, &store, u64::MAX)
            .map_err(|e| e.to_string())?;
        self.store
            .put_artifact(
                id,
                &HandedIn {
                    name: name.as_str(),
                    stored: &stored,
                    path: &store.join(&stored.sha256),
                    by: "beta",
                    quota: u64::MAX,
                },
                "mcp",
            )
            .map_err(|e| e.to_string())?;
        artifacts::place(&store, &stored, &self.owner, id, &name).map_err(|e| e.to_string())?;
        Ok(stored.size)
    }

    /// Task `id` submitted by its assignee.
    pub fn submit(&self, id: &str) -> Result<(), String> {
        let beta = Actor::Agent {
            agent_id: "beta".into(),
        };
        let submitted = Event::Submitted {
            summary: "done".into(),
        };
        self.store
            .apply(id, &submitted, &beta, "mcp", &[], None)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
