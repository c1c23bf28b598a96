//! Plans kept for later: a plan saved by `deepcli plan --out` and applied by `deepcli apply
//! FILE` only while it is fresh, and the `deepcli state export` snapshots `plan --live` plans
//! against.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{FORMAT_VERSION, Plan};
use crate::state::{LiveState, SNAPSHOT_FORMATS};

/// A saved plan: the plan and what it was made against. One saved by a deepcli of plan format
/// 1 (`saved_plan_version`) is read too.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SavedPlan {
    #[serde(alias = "saved_plan_version")]
    saved_plan_version: String,
    pub plan: Plan,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SavedError {
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("`{}` is not {what}: {message}", path.display())]
    NotOne {
        path: std::path::PathBuf,
        what: &'static str,
        message: String,
    },
    #[error("`{}` has snapshot format {found}, this deepcli reads {}", path.display(), SNAPSHOT_FORMATS.join(", "))]
    Format {
        path: std::path::PathBuf,
        found: String,
    },
    /// The plan no longer applies: why.
    #[error("the saved plan is stale: {0}. Run `deepcli plan --out FILE` again and review it")]
    Stale(String),
}

impl SavedPlan {
    pub(crate) fn new(plan: Plan) -> SavedPlan {
        SavedPlan {
            saved_plan_version: FORMAT_VERSION.into(),
            plan,
        }
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub(crate) fn read(path: &Path) -> Result<SavedPlan, SavedError> {
        let text = read(path)?;
        serde_json::from_str(&text).map_err(|e| SavedError::NotOne {
            path: path.to_path_buf(),
            what: "a saved plan",
            message: e.to_string(),
        })
    }

    /// A saved plan applies only to the state and config it was made against, and only while
    /// the world still asks for exactly its actions: `now` is the plan made now.
    pub(crate) fn check_fresh(&self, now: &Plan) -> Result<(), SavedError> {
        let saved = &self.plan;
        if !saved.lineage.is_empty() && saved.lineage != now.lineage {
            return Err(SavedError::Stale(format!(
                "it was made for state lineage {}, this state is {}",
                saved.lineage, now.lineage
            )));
        }
        if saved.serial != now.serial {
            return Err(SavedError::Stale(format!(
                "the state was applied since (serial {} → {})",
                saved.serial, now.serial
            )));
        }
        if saved.config_hash != now.config_hash {
            return Err(SavedError::Stale("the config files changed since".into()));
        }
        if saved.actions != now.actions {
            return Err(SavedError::Stale(
                "the world changed since (the same config now plans different actions)".into(),
            ));
        }
        Ok(())
    }
}

/// A `deepcli state export` snapshot, in a format this build reads.
pub(crate) fn read_snapshot(path: &Path) -> Result<LiveState, SavedError> {
    let text = read(path)?;
    let live: LiveState = serde_json::from_str(&text).map_err(|e| SavedError::NotOne {
        path: path.to_path_buf(),
        what: "a `deepcli state export` snapshot",
        message: e.to_string(),
    })?;
    if !SNAPSHOT_FORMATS.contains(&live.format_version.as_str()) {
        return Err(SavedError::Format {
            path: path.to_path_buf(),
            found: live.format_version,
        });
    }
    Ok(live)
}

fn read(path: &Path) -> Result<String, SavedError> {
    std::fs::read_to_string(path).map_err(|source| SavedError::Read {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_saved_in_format_1_is_read() {
        let plan = crate::plan::Plan {
            format_version: "1".into(),
            lineage: "l".into(),
            serial: 3,
            config_hash: "sha256:c".into(),
            actions: Vec::new(),
            drift: Vec::new(),
            blocked: Vec::new(),
        };
        let text = serde_json::json!({"saved_plan_version": "1", "plan": plan}).to_string();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.json");
        std::fs::write(&path, text).unwrap();
        let saved = SavedPlan::read(&path).unwrap();
        assert_eq!(saved.plan, plan);
        let written: serde_json::Value =
            serde_json::from_str(&SavedPlan::new(plan).to_json()).unwrap();
        assert_eq!(written["savedPlanVersion"], FORMAT_VERSION);
    }
}
