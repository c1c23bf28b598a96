//! Session keys (routing.md §6): main keys, peer keys per scope, identity links, thread
//! suffixes and the keys of spawned sessions.

use crate::config::model::{DmScope, GroupScope, SessionSection};
use crate::ids::PeerKind;

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

/// Appends `id` lowercased as the router lowercases peer ids: only an id with an uppercase
/// character changes (an ASCII id without one is copied as it is).
fn push_lower(out: &mut String, id: &str) {
    if id.is_ascii() {
        let start = out.len();
        out.push_str(id);
        out[start..].make_ascii_lowercase();
    } else if id.chars().any(char::is_uppercase) {
        out.push_str(&id.to_lowercase());
    } else {
        out.push_str(id);
    }
}

/// Appends `parts` joined with `:` (no formatting machinery: this is on the path of every
/// message).
fn push_parts(out: &mut String, parts: &[&str]) {
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(part);
    }
}

/// Writes the session key of a resolved route into `out` (cleared first), unless the scopes
/// make it the main key `agent:<agentId>:<mainKey>`: then `out` is left empty and the answer
/// is `false`.
#[allow(clippy::too_many_arguments)] // the facts of routing.md §6, each a plain value
pub fn write_session_key(
    settings: &SessionSettings,
    agent_id: &str,
    channel: &str,
    account_id: &str,
    peer: Option<(&PeerKind, &str)>,
    dm_scope: DmScope,
    group_scope: GroupScope,
    out: &mut String,
) -> bool {
    out.clear();
    let Some((kind, id)) = peer else {
        return false;
    };
    let id = crate::ids::trim(id);
    if *kind == PeerKind::Direct {
        if dm_scope == DmScope::Main {
            return false;
        }
        let id = settings.linked(channel, id).unwrap_or(id);
        match dm_scope {
            DmScope::Main => return false,
            DmScope::PerPeer => push_parts(out, &["agent", agent_id, "direct", ""]),
            DmScope::PerChannelPeer => push_parts(out, &["agent", agent_id, channel, "direct", ""]),
            DmScope::PerAccountChannelPeer => {
                push_parts(out, &["agent", agent_id, channel, account_id, "direct", ""]);
            }
        }
        if id.is_empty() {
            out.push_str("unknown");
        } else {
            push_lower(out, id);
        }
        return true;
    }
    if group_scope == GroupScope::Main {
        return false;
    }
    push_parts(out, &["agent", agent_id, channel, kind.as_str(), ""]);
    let keeps_case = (channel == "signal" && *kind == PeerKind::Group)
        || (channel == "matrix" && matches!(kind, PeerKind::Group | PeerKind::Channel));
    if id.is_empty() {
        out.push_str("unknown");
    } else if keeps_case {
        out.push_str(id);
    } else {
        push_lower(out, id);
    }
    true
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
    let main = settings.main_key(agent_id);
    let mut session = String::new();
    let is_peer_key = write_session_key(
        settings,
        agent_id,
        channel,
        account_id,
        peer,
        dm_scope,
        group_scope,
        &mut session,
    );
    if !is_peer_key {
        session.clone_from(&main);
    }
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
