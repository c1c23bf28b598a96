//! Session keys (routing.md §6): main keys, peer keys per scope, identity links, thread
//! suffixes and the keys of spawned sessions.

use super::normalize::PeerKind;
use crate::config::model::{DmScope, GroupScope, SessionSection};

/// The session settings of agents.yaml that shape keys.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionSettings {
    pub dm_scope: Option<DmScope>,
    pub group_scope: Option<GroupScope>,
    /// Trimmed, lowercased; `main` by default.
    pub main_key: String,
    /// Canonical name → its entries (trimmed, lowercased), in file order.
    pub identity_links: Vec<(String, Vec<String>)>,
}

impl SessionSettings {
    pub fn from_config(session: &SessionSection) -> SessionSettings {
        let main_key = session
            .main_key
            .as_deref()
            .map(|k| k.trim().to_lowercase())
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| "main".to_string());
        SessionSettings {
            dm_scope: session.dm_scope,
            group_scope: session.group_scope,
            main_key,
            identity_links: session
                .identity_links
                .iter()
                .map(|(name, entries)| {
                    (
                        name.clone(),
                        entries.iter().map(|e| e.trim().to_lowercase()).collect(),
                    )
                })
                .collect(),
        }
    }

    /// `agent:<agentId>:<mainKey>`.
    pub fn main_key(&self, agent_id: &str) -> String {
        format!("agent:{agent_id}:{}", self.main_key)
    }

    /// The canonical name a direct peer is linked to, if any.
    fn linked(&self, channel: &str, peer_id: &str) -> Option<&str> {
        if self.identity_links.is_empty() {
            return None;
        }
        let bare = peer_id.to_lowercase();
        let scoped = format!("{channel}:{peer_id}").to_lowercase();
        self.identity_links
            .iter()
            .find(|(_, entries)| entries.iter().any(|e| *e == bare || *e == scoped))
            .map(|(name, _)| name.as_str())
    }
}

pub struct SessionKeys {
    pub session: String,
    pub main: String,
}

/// `parts` joined with `:` into one allocation (no formatting machinery: this is on the path of
/// every message).
fn key(parts: &[&str]) -> String {
    let len = parts.iter().map(|p| p.len() + 1).sum::<usize>();
    let mut out = String::with_capacity(len);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(part);
    }
    out
}

/// Lowercased, borrowing when it already is.
fn lower(id: &str) -> std::borrow::Cow<'_, str> {
    if id.chars().any(char::is_uppercase) {
        std::borrow::Cow::Owned(id.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(id)
    }
}

/// The session key and main session key of a resolved route.
pub fn session_keys(
    settings: &SessionSettings,
    agent_id: &str,
    channel: &str,
    account_id: &str,
    peer: Option<(&PeerKind, &str)>,
    dm_scope: DmScope,
    group_scope: GroupScope,
) -> SessionKeys {
    let main = key(&["agent", agent_id, &settings.main_key]);
    let session = match peer {
        None => main.clone(),
        Some((PeerKind::Direct, id)) => {
            let id = id.trim();
            let linked = if dm_scope == DmScope::Main {
                None
            } else {
                settings.linked(channel, id)
            };
            let peer_id = lower(linked.unwrap_or(id));
            let peer_id = if peer_id.is_empty() {
                "unknown"
            } else {
                &peer_id
            };
            match dm_scope {
                DmScope::Main => main.clone(),
                DmScope::PerPeer => key(&["agent", agent_id, "direct", peer_id]),
                DmScope::PerChannelPeer => key(&["agent", agent_id, channel, "direct", peer_id]),
                DmScope::PerAccountChannelPeer => {
                    key(&["agent", agent_id, channel, account_id, "direct", peer_id])
                }
            }
        }
        Some((kind, id)) => match group_scope {
            GroupScope::Main => main.clone(),
            GroupScope::PerGroup => {
                let id = id.trim();
                let keeps_case = (channel == "signal" && *kind == PeerKind::Group)
                    || (channel == "matrix" && matches!(kind, PeerKind::Group | PeerKind::Channel));
                let peer_id = if keeps_case {
                    std::borrow::Cow::Borrowed(id)
                } else {
                    lower(id)
                };
                let peer_id = if peer_id.is_empty() {
                    "unknown"
                } else {
                    &peer_id
                };
                key(&["agent", agent_id, channel, kind.as_str(), peer_id])
            }
        },
    };
    SessionKeys { session, main }
}

/// Appends a thread to a session key: `:thread:<lowercased id>`; an empty id adds nothing.
pub fn with_thread(key: &str, thread_id: &str) -> String {
    let thread = thread_id.trim();
    if thread.is_empty() {
        key.to_string()
    } else {
        format!("{key}:thread:{}", thread.to_lowercase())
    }
}

/// The kind of a spawned session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spawned {
    Subagent,
    Acp,
}

/// `agent:<agentId>:subagent:<uuid v4>` or `agent:<agentId>:acp:<uuid v4>`.
pub fn spawned_key(agent_id: &str, kind: Spawned) -> String {
    let kind = match kind {
        Spawned::Subagent => "subagent",
        Spawned::Acp => "acp",
    };
    format!("agent:{agent_id}:{kind}:{}", uuid::Uuid::new_v4())
}
