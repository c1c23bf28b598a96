//! What the Hub reports of itself (`/v1/status`'s `hub`, hub.md "Operator surface"): typed
//! here, turned into JSON only where the controller answers. `deepcli status` reads it back
//! from the controller's answer, so it deserializes too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::policy::Visibility;

/// The Hub's figures: calls, sends, spawns, runs, live tokens, denials by reason, the policy
/// in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HubStatus {
    /// Each agent of the config in force, by id.
    pub agents: BTreeMap<String, AgentLoad>,
    pub calls: u64,
    pub sends: u64,
    pub spawns: u64,
    pub active_runs: usize,
    pub active_spawns: usize,
    pub live_tokens: u64,
    pub idle_children_closed: u64,
    /// Runs paused at a loop bound, waiting for an operator (oldest first).
    pub loop_pauses: Vec<LoopPause>,
    /// Refusals by reason code.
    pub denials: BTreeMap<String, u64>,
    pub send_overhead: OverheadSummary,
    pub policy: PolicyView,
}

/// What an agent has waiting and running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentLoad {
    pub queue_depth: usize,
    pub active_runs: usize,
}

/// A run paused at a loop bound, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LoopPause {
    pub run_id: String,
    pub why: String,
}

/// The overheads kept of a kind of call, in µs (`None` while none is kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OverheadSummary {
    pub samples: usize,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
}

/// The Hub policy in force, as the operator reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicyView {
    pub agent_to_agent: AgentToAgentView,
    /// `tools.sessions.visibility`: `self`, `tree`, `agent` or `all`.
    pub visibility: Visibility,
    pub max_ping_pong_turns: u32,
    pub max_concurrent: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentToAgentView {
    pub enabled: bool,
    /// Empty: every agent.
    pub allow: Vec<String>,
}

/// The audit timeline (approvals.md) a filter asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AuditTimeline {
    pub count: usize,
    pub events: Vec<crate::state::audit::AuditEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_keeps_its_json_shape_and_reads_back() {
        let status = HubStatus {
            agents: BTreeMap::from([(
                "a".to_string(),
                AgentLoad {
                    queue_depth: 1,
                    active_runs: 2,
                },
            )]),
            calls: 3,
            sends: 4,
            spawns: 5,
            active_runs: 6,
            active_spawns: 7,
            live_tokens: 8,
            idle_children_closed: 9,
            loop_pauses: vec![LoopPause {
                run_id: "r".into(),
                why: "w".into(),
            }],
            denials: BTreeMap::from([("depth_exceeded".to_string(), 1)]),
            send_overhead: OverheadSummary {
                samples: 1,
                p50_us: Some(10),
                p99_us: Some(10),
                max_us: None,
            },
            policy: PolicyView {
                agent_to_agent: AgentToAgentView {
                    enabled: true,
                    allow: vec!["*".into()],
                },
                visibility: Visibility::Tree,
                max_ping_pong_turns: 5,
                max_concurrent: 8,
            },
        };
        let text = serde_json::to_string(&status).unwrap();
        assert_eq!(
            text,
            r#"{"agents":{"a":{"queueDepth":1,"activeRuns":2}},"calls":3,"sends":4,"spawns":5,"activeRuns":6,"activeSpawns":7,"liveTokens":8,"idleChildrenClosed":9,"loopPauses":[{"runId":"r","why":"w"}],"denials":{"depth_exceeded":1},"sendOverhead":{"samples":1,"p50Us":10,"p99Us":10,"maxUs":null},"policy":{"agentToAgent":{"enabled":true,"allow":["*"]},"visibility":"tree","maxPingPongTurns":5,"maxConcurrent":8}}"#
        );
        let back: HubStatus = serde_json::from_str(&text).unwrap();
        assert_eq!(back, status);
    }
}
