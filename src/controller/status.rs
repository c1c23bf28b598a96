//! What the controller reports (`GET /v1/status`, `deepcli status`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::runtime::RuntimeStatus;

/// An edit the controller refused: the last good config keeps running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    pub config_hash: String,
    pub since: String,
    /// `file:line:col: error[rule]: message`, one per error.
    pub diagnostics: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStatus {
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
    pub reconciles: u64,
    pub rejections: u64,
    pub last_error: Option<String>,
}

/// A channel's accounts as the controller serves them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelLive {
    pub accounts: BTreeMap<String, AccountLive>,
}

/// One channel account, live: whether the Access API takes its signed messages now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountLive {
    /// `open` (signed messages are taken), `closed` (no usable `webhookSecret`: `reason` says
    /// why) or `disabled` (`enabled: false`).
    pub inbound: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
