//! Live runtime status for `agents list` and `channels status`: from the running controller
//! (its `/v1/status` document, through [`super::ManageContext::live`]) or, without one, from
//! the state database. Never starts anything and never creates the state.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ManageContext;
use crate::state::{RuntimePhase, RuntimeRecord, StateStore};

/// Where live status came from.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// `controller`, `state`, or `None` when there is neither.
    pub source: Option<&'static str>,
    /// Per agent id: what its runtime is doing.
    pub runtimes: Vec<(String, RuntimeLive)>,
    /// The controller's `channels` section, when it reports one.
    pub channels: Option<Value>,
    /// The pid of the controller that answered.
    pub controller_pid: Option<u32>,
    /// The config directory that controller watches (absolute).
    pub controller_config: Option<std::path::PathBuf>,
}

/// An agent's runtime as live status tells it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeLive {
    pub status: Option<RuntimePhase>,
    pub pid: Option<i64>,
    /// What became of the agent's `model` (from a controller only).
    pub model: Option<ModelStatus>,
    /// Its sandbox in one line, as the controller applies it (from a controller only).
    pub sandbox: Option<String>,
    /// The Hub's figures of the agent: messages waiting in its sessions, runs not yet final
    /// (from a controller only).
    pub queue_depth: Option<u64>,
    pub active_runs: Option<u64>,
}

/// What became of an agent's `model`: the model asked for, the one applied (a fallback, or
/// none), and why it is not the one asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatus {
    pub wanted: String,
    pub applied: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Live {
    pub fn runtime(&self, agent: &str) -> Option<&RuntimeLive> {
        self.runtimes
            .iter()
            .find(|(id, _)| id == agent)
            .map(|(_, r)| r)
    }

    /// What a controller's status document says.
    fn of_controller(doc: &Value) -> Live {
        let text = |v: &Value| v.as_str().map(str::to_string);
        let runtimes = doc["runtimes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let id = r["agentId"].as_str()?.to_string();
                // The Hub's figures of the agent: queue depth and active runs.
                let hub = &doc["hub"]["agents"][&id];
                let runtime = RuntimeLive {
                    status: RuntimePhase::deserialize(&r["status"]).ok(),
                    pid: r["pid"].as_i64(),
                    model: ModelStatus::deserialize(&r["model"]).ok(),
                    sandbox: text(&r["sandbox"]),
                    queue_depth: hub["queueDepth"].as_u64(),
                    active_runs: hub["activeRuns"].as_u64(),
                };
                Some((id, runtime))
            })
            .collect();
        Live {
            source: Some("controller"),
            runtimes,
            channels: doc.get("channels").cloned(),
            controller_pid: doc["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
            controller_config: doc["configDir"].as_str().map(std::path::PathBuf::from),
        }
    }
}

impl RuntimeLive {
    /// What the state recorded of a runtime.
    fn of_record(r: &RuntimeRecord) -> RuntimeLive {
        RuntimeLive {
            status: Some(r.status),
            pid: r.pid,
            ..RuntimeLive::default()
        }
    }
}

pub fn read(ctx: &ManageContext) -> Live {
    if let Some(doc) = ctx.live.as_ref().and_then(|f| f()) {
        return Live::of_controller(&doc);
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
        runtimes.into_iter().map(RuntimeRecord::seen_now).collect()
    };
    Live {
        source: Some("state"),
        runtimes: runtimes
            .iter()
            .map(|r| (r.agent_id.clone(), RuntimeLive::of_record(r)))
            .collect(),
        channels: None,
        controller_pid: None,
        controller_config: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_s_runtime_keeps_its_applied_sandbox_model_and_hub_figures() {
        let doc = serde_json::json!({
            "pid": 41,
            "runtimes": [
                {"agentId": "main", "status": "ready", "pid": 7, "restarts": 0,
                 "sandbox": "all (bwrap, network host)",
                 "model": {"wanted": "m1", "applied": "m2", "why": "a fallback"}},
                {"agentId": "idle", "status": "stopped", "pid": null},
                {"status": "ready"},
            ],
            "hub": {"agents": {"main": {"queueDepth": 2, "activeRuns": 1}}},
        });
        let live = Live::of_controller(&doc);
        assert_eq!(live.controller_pid, Some(41));
        assert_eq!(live.runtimes.len(), 2);
        assert_eq!(
            live.runtime("main"),
            Some(&RuntimeLive {
                status: Some(RuntimePhase::Ready),
                pid: Some(7),
                model: Some(ModelStatus {
                    wanted: "m1".into(),
                    applied: Some("m2".into()),
                    why: Some("a fallback".into()),
                }),
                sandbox: Some("all (bwrap, network host)".into()),
                queue_depth: Some(2),
                active_runs: Some(1),
            })
        );
        assert_eq!(
            live.runtime("idle"),
            Some(&RuntimeLive {
                status: Some(RuntimePhase::Stopped),
                ..RuntimeLive::default()
            })
        );
    }

    #[test]
    fn a_model_status_reads_and_writes_the_controller_s_shape() {
        for text in [
            r#"{"wanted":"m1","applied":"m1"}"#,
            r#"{"wanted":"m1","applied":null,"why":"no ACP session"}"#,
        ] {
            let status: ModelStatus = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&status).unwrap(), text);
        }
    }
}
