//! What the controller reports (`GET /v1/status`, `deepcli status`), and what a health check
//! makes of it: healthy, or degraded with the reasons.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::adapters::ConnectionState;
use crate::runtime::{Phase, RuntimeStatus};
use crate::state::{RuntimeRecord, Wanted};

/// An edit the controller refused: the last good config keeps running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rejection {
    pub config_hash: String,
    pub since: String,
    /// `file:line:col: error[rule]: message`, one per error.
    pub diagnostics: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ControllerStatus {
    pub pid: u32,
    pub started_at: String,
    pub config_dir: String,
    pub state_dir: String,
    /// The config in force: its hash and when it was applied.
    pub config_hash: Option<String>,
    pub applied_at: Option<String>,
    pub serial: u64,
    pub routing_generation: Option<u64>,
    /// The edit on disk that was refused, while it is still there.
    pub rejected: Option<Rejection>,
    /// A plan that waits for an operator (mass delete, protected agent, unsafe path).
    pub blocked: Vec<String>,
    /// Channel accounts that take no messages because their `webhookSecret` reference is
    /// unusable (unset, unreadable, empty): `channel/account: why`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed_accounts: Vec<String>,
    pub agents: Vec<String>,
    pub runtimes: Vec<RuntimeStatus>,
    /// What each agent's heartbeats did, by agent id (agents with `heartbeat.every` and an
    /// `acp` runtime).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub heartbeats: BTreeMap<String, super::heartbeat::HeartbeatReport>,
    /// Each channel account as the controller serves it (normalized ids).
    #[serde(default)]
    pub channels: BTreeMap<String, ChannelLive>,
    /// The Hub's figures (hub.md): calls, sends, spawns, runs, live tokens, denials by
    /// reason, the policy in force. Only a running controller has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<crate::hub::HubStatus>,
    /// The A2A server's figures (a2a.md): exposed agents, peers (whether each token
    /// resolved), requests, tasks, refusals. Only a running controller has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<crate::a2a::A2aStatus>,
    pub reconciles: u64,
    pub rejections: u64,
    pub last_error: Option<String>,
    /// This controller's id, as one of several replicas on a PostgreSQL state
    /// (docs/scale-out.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The replicas that share the state: which leads, who runs which agent and account.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<super::cluster::ReplicaStatus>,
    /// Rows `state.retention` pruned since start, by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pruned: BTreeMap<String, u64>,
    /// What the rest says for a health check ([`ControllerStatus::health`]), as served.
    #[serde(default)]
    pub health: Health,
}

/// Whether the hub does all its config asks, for a health check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HealthStatus {
    #[default]
    Healthy,
    /// Something the config asks for is not done, and waits for an operator or a fix:
    /// `reasons` say what.
    Degraded,
}

/// `status` and, when degraded, why: one short sentence per reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Health {
    pub status: HealthStatus,
    pub reasons: Vec<String>,
}

impl Health {
    fn of(reasons: Vec<String>) -> Health {
        Health {
            status: if reasons.is_empty() {
                HealthStatus::Healthy
            } else {
                HealthStatus::Degraded
            },
            reasons,
        }
    }

    /// What a state no controller answers for says: every runtime the last apply asked to run
    /// and that does not run (with a controller that holds the state and does not answer, why).
    /// `runtimes` as [`RuntimeRecord::seen_now`] sees them.
    /// `unanswered`: a controller holds the state but gave no status (why); its runtimes are
    /// then its own, not runtimes "without a controller".
    pub(crate) fn of_state(runtimes: &[RuntimeRecord], unanswered: Option<String>) -> Health {
        let held = unanswered.is_some();
        let mut reasons: Vec<String> = unanswered.into_iter().collect();
        for r in runtimes
            .iter()
            .filter(|r| r.desired == Wanted::Run && !held)
        {
            let pid = r.pid.map_or_else(String::new, |p| format!(" (pid {p})"));
            reasons.push(match r.status {
                Phase::Gone => format!(
                    "runtime `{}`{pid} is gone: its controller stopped without stopping it; start `deepcli up`",
                    r.agent_id
                ),
                Phase::Starting | Phase::Ready => format!(
                    "runtime `{}`{pid} runs without a controller: nothing delivers messages to it; start `deepcli up`, which stops it and starts it again",
                    r.agent_id
                ),
                _ => format!(
                    "runtime `{}` is not running: no controller runs; start `deepcli up`",
                    r.agent_id
                ),
            });
        }
        Health::of(reasons)
    }
}

/// How long an adapter may try its first connection before health says so.
const NEVER_CONNECTED_GRACE_SECONDS: i64 = 30;
/// How long an adapter may be reconnecting before health says so.
const RECONNECT_GRACE_SECONDS: i64 = 120;

impl ControllerStatus {
    /// Degraded while an edit is rejected, a plan is blocked, the last reconcile failed, a
    /// runtime crash-loops or cannot start, a channel account takes no messages, or its
    /// adapter is refused, never connected, or lost its connection for long.
    pub(crate) fn health(&self) -> Health {
        self.health_at(jiff::Timestamp::now())
    }

    /// [`ControllerStatus::health`] as of `now`.
    fn health_at(&self, now: jiff::Timestamp) -> Health {
        let mut reasons = Vec::new();
        if let Some(rejected) = &self.rejected {
            reasons.push(format!(
                "the config on disk is rejected ({}); the last good config keeps running",
                crate::plural::plural(rejected.diagnostics.len(), "error", "errors")
            ));
        }
        if !self.blocked.is_empty() {
            reasons.push(
                "a plan is blocked by a guard and waits for an operator (see `blocked`)".into(),
            );
        }
        if let Some(error) = &self.last_error {
            reasons.push(format!("the last reconcile failed: {error}"));
        }
        // Nothing else explains it: the controller is still starting.
        if self.config_hash.is_none() && reasons.is_empty() {
            reasons.push("no config applied yet: the first apply has not finished".into());
        }
        for r in &self.runtimes {
            match r.status {
                Phase::CrashLoop => reasons.push(format!(
                    "runtime `{}` is in a crash loop ({})",
                    r.agent_id,
                    crate::plural::plural(r.restarts as usize, "restart", "restarts")
                )),
                Phase::Failed => reasons.push(format!("runtime `{}` cannot start", r.agent_id)),
                _ => {}
            }
        }
        for account in &self.closed_accounts {
            reasons.push(format!("channel account {account} (takes no messages)"));
        }
        for (channel, live) in &self.channels {
            for (account, a) in &live.accounts {
                let Some(adapter) = &a.adapter else { continue };
                if adapter.state == ConnectionState::AuthFailed {
                    reasons.push(format!(
                        "channel account {channel}/{account} cannot connect to the platform: {}",
                        adapter
                            .last_error
                            .as_deref()
                            .unwrap_or("credentials refused")
                    ));
                    continue;
                }
                // Trying for a while: a first connection gets a short grace, a lost one
                // a longer one (reconnects are routine).
                let trying = adapter
                    .since
                    .parse::<jiff::Timestamp>()
                    .map(|since| now.duration_since(since).as_secs());
                let grace = if adapter.connects == 0 {
                    NEVER_CONNECTED_GRACE_SECONDS
                } else {
                    RECONNECT_GRACE_SECONDS
                };
                if adapter.state == ConnectionState::Connecting
                    && trying.is_ok_and(|secs| secs >= grace)
                {
                    let why = adapter
                        .last_error
                        .as_deref()
                        .map_or(String::new(), |e| format!(": {e}"));
                    reasons.push(if adapter.connects == 0 {
                        format!(
                            "channel account {channel}/{account} has never connected to the platform (trying since {}){why}",
                            adapter.since
                        )
                    } else {
                        format!(
                            "channel account {channel}/{account} lost its connection to the platform at {}{why}",
                            adapter.since
                        )
                    });
                }
            }
        }
        Health::of(reasons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `deepcli status --json` reads `/v1/status` back into a [`ControllerStatus`] and prints
    /// it again: the A2A and adapter figures come out as they went in, and a refused adapter
    /// degrades.
    #[test]
    fn a_read_back_status_keeps_its_a2a_and_adapter_figures() {
        let mut sent = serde_json::to_value(applied()).unwrap();
        sent["a2a"] = serde_json::json!({"exposed": ["main"],
            "peers": [{"name": "p", "token": "ok"}], "requests": 3, "tasks": 1, "streams": 0,
            "sendOverhead": {"samples": 1, "p50Us": 5, "p99Us": 5, "maxUs": 5},
            "refused": {"unauthenticated": 1, "forbidden": 0, "rateLimited": 0, "gated": 0,
                "tooManyStreams": 0}});
        sent["channels"] = serde_json::json!({"slack": {"accounts": {"work": {"inbound": "open",
            "adapter": {"platform": "slack", "mode": "socket", "state": "auth_failed",
                "identity": {"botUserId": "U1", "name": null}, "since": "t",
                "lastEventAt": null, "lastError": "invalid_auth", "connects": 1, "events": 0,
                "posted": 0, "deadLetters": 0}}}}});
        let read: ControllerStatus = serde_json::from_value(sent.clone()).unwrap();
        let again = serde_json::to_value(&read).unwrap();
        // Field for field, in order.
        for part in ["a2a", "channels"] {
            assert_eq!(again[part].to_string(), sent[part].to_string());
        }
        assert_eq!(
            read.health().reasons,
            ["channel account slack/work cannot connect to the platform: invalid_auth"]
        );
    }

    /// A status whose first apply is done.
    fn applied() -> ControllerStatus {
        ControllerStatus {
            config_hash: Some("sha256:x".into()),
            ..ControllerStatus::default()
        }
    }

    #[test]
    fn a_controller_is_not_healthy_before_its_first_apply() {
        let starting = ControllerStatus::default();
        assert_eq!(
            starting.health().reasons,
            ["no config applied yet: the first apply has not finished"]
        );
        assert_eq!(applied().health(), Health::default());
    }

    #[test]
    fn an_adapter_that_never_connects_or_stays_lost_degrades_after_a_grace() {
        let status = |connects: u64| -> ControllerStatus {
            let mut sent = serde_json::to_value(applied()).unwrap();
            sent["channels"] = serde_json::json!({"telegram": {"accounts": {"default": {
                "inbound": "open",
                "adapter": {"platform": "telegram", "mode": "polling", "state": "connecting",
                    "identity": null, "since": "2026-12-01T10:00:00Z", "lastEventAt": null,
                    "lastError": "dns error: failed to lookup address", "connects": connects,
                    "events": 0, "posted": 0, "deadLetters": 0}}}}});
            serde_json::from_value(sent).unwrap()
        };
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        let never = status(0);
        assert!(
            never
                .health_at(at("2026-12-01T10:00:29Z"))
                .reasons
                .is_empty()
        );
        assert_eq!(
            never.health_at(at("2026-12-01T10:00:30Z")).reasons,
            [
                "channel account telegram/default has never connected to the platform (trying since 2026-12-01T10:00:00Z): dns error: failed to lookup address"
            ]
        );
        let lost = status(3);
        assert!(
            lost.health_at(at("2026-12-01T10:01:59Z"))
                .reasons
                .is_empty()
        );
        assert_eq!(
            lost.health_at(at("2026-12-01T10:02:00Z")).status,
            HealthStatus::Degraded
        );
    }

    #[test]
    fn a_rejected_edit_or_a_blocked_plan_degrades() {
        let mut status = applied();
        assert_eq!(status.health(), Health::default());
        status.blocked = vec!["this plan deletes 2 of 3 managed agents".into()];
        status.rejected = Some(Rejection {
            config_hash: "sha256:x".into(),
            since: "now".into(),
            diagnostics: vec!["a".into()],
        });
        let health = status.health();
        assert_eq!(health.status, HealthStatus::Degraded);
        assert_eq!(
            health.reasons,
            [
                "the config on disk is rejected (1 error); the last good config keeps running",
                "a plan is blocked by a guard and waits for an operator (see `blocked`)"
            ]
        );
    }
}

/// A channel's accounts as the controller serves them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChannelLive {
    pub accounts: BTreeMap<String, AccountLive>,
}

/// One channel account, live: whether the Access API takes its signed messages now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountLive {
    /// `open` (signed messages are taken), `closed` (no usable `webhookSecret`: `reason` says
    /// why) or `disabled` (`enabled: false`).
    pub inbound: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The platform adapter the controller runs for the account (Slack, Telegram).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<crate::adapters::AdapterLive>,
}
