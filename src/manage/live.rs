//! Live runtime status for `agents list` and `channels status`: from the running controller
//! (its `/v1/status` document, through [`super::ManageContext::live`]) or, without one, from
//! the state database. Never starts anything and never creates the state.

use serde_json::Value;

use super::ManageContext;
use crate::state::StateStore;

/// Where live status came from.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// `controller`, `state`, or `None` when there is neither.
    pub source: Option<&'static str>,
    /// Per agent id: `{status, pid, restarts, lastError, model}` (`model`: what became of the
    /// agent's `model`, from a controller only).
    pub runtimes: Vec<(String, Value)>,
    /// The controller's `channels` section, when it reports one.
    pub channels: Option<Value>,
    /// The pid of the controller that answered.
    pub controller_pid: Option<u32>,
}

impl Live {
    pub fn runtime(&self, agent: &str) -> Option<&Value> {
        self.runtimes
            .iter()
            .find(|(id, _)| id == agent)
            .map(|(_, v)| v)
    }
}

fn summary(r: &Value) -> Value {
    serde_json::json!({
        "status": r.get("status").cloned().unwrap_or(Value::Null),
        "pid": r.get("pid").cloned().unwrap_or(Value::Null),
        "restarts": r.get("restarts").cloned().unwrap_or(Value::Null),
        "lastError": r.get("lastError").cloned().unwrap_or(Value::Null),
        "model": r.get("model").cloned().unwrap_or(Value::Null),
    })
}

pub fn read(ctx: &ManageContext) -> Live {
    if let Some(doc) = ctx.live.as_ref().and_then(|f| f()) {
        let runtimes = doc["runtimes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let id = r["agentId"].as_str()?.to_string();
                let mut summary = summary(r);
                // The Hub's figures of the agent: queue depth and active runs.
                let hub = &doc["hub"]["agents"][&id];
                for key in ["queueDepth", "activeRuns"] {
                    if let Some(v) = hub.get(key) {
                        summary[key] = v.clone();
                    }
                }
                Some((id, summary))
            })
            .collect();
        return Live {
            source: Some("controller"),
            runtimes,
            channels: doc.get("channels").cloned(),
            controller_pid: doc["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
        };
    }
    let dir = ctx.state_dir();
    let Ok(Some(store)) = StateStore::open_existing(&dir) else {
        return Live::default();
    };
    let Ok(runtimes) = store.runtimes() else {
        return Live::default();
    };
    // Without a controller holding the state, a recorded process that is gone shows as gone
    // (as `deepcli status` shows it); with one that did not answer, its record stands.
    let controlled = store
        .lease_holder()
        .ok()
        .flatten()
        .is_some_and(|h| h.purpose == crate::state::LeasePurpose::Controller);
    let runtimes: Vec<_> = if controlled {
        runtimes
    } else {
        runtimes
            .into_iter()
            .map(crate::state::RuntimeRecord::seen_now)
            .collect()
    };
    Live {
        source: Some("state"),
        runtimes: runtimes
            .iter()
            .filter_map(|r| {
                let v = serde_json::to_value(r).ok()?;
                Some((r.agent_id.clone(), summary(&v)))
            })
            .collect(),
        channels: None,
        controller_pid: None,
    }
}
