//! Who said a transcript line (`sessions/history`'s `sender`, the console's transcripts): read
//! from the row's provenance, its `sender` column (an inbound message's sender as the envelope
//! gave it) and its `route` column (a Hub message's provenance record: the requesting session,
//! agent, tool and run). The columns are this layer's to write, so this layer reads them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state::Provenance;

/// Who said a line. Serialized with a `kind` (`person`, `agent`, `peer_agent`, `a2a_peer`,
/// `operator`, `deepcli`, `unknown`) and the fields the record holds.
/// Read back (`Deserialize`) by the CLI from `sessions/history`'s JSON, to say it the way the
/// console does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub(crate) enum Sender {
    /// A person (or a bot) on a channel: the envelope's `sender`, as given.
    Person {
        #[serde(skip_serializing_if = "Option::is_none")]
        channel: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        is_bot: bool,
    },
    /// The session's own agent (its answer).
    Agent {
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        /// The Hub run the answer belongs to, when a run carried the message.
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    /// Another agent's session, through the Hub (`sessions_send`, a spawn, its announce).
    PeerAgent {
        #[serde(skip_serializing_if = "Option::is_none")]
        agent_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        session_key: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    /// A remote agent over A2A (a2a.md): the peer as the A2A binding names it.
    A2aPeer {
        peer: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    /// The operator (`deepcli sessions send|say`).
    Operator {
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
    /// deepcli itself: a heartbeat's prompt, a `reset` line, a note about the runtime session.
    Deepcli,
    /// A heartbeat line recorded before the prompt and the answer were told apart.
    Unknown,
}

/// What the `route` column of a heartbeat row says it is: the prompt or the agent's answer
/// (rows written before these were recorded say neither: [`Sender::Unknown`]).
pub(crate) const HEARTBEAT_PROMPT: &str = "prompt";
pub(crate) const HEARTBEAT_ANSWER: &str = "answer";

impl Sender {
    /// Who said a row of session `session_key`'s transcript, from its columns.
    pub(super) fn of_row(
        session_key: &str,
        provenance: Provenance,
        sender: Option<&Value>,
        route: Option<&Value>,
    ) -> Sender {
        let field = |v: Option<&Value>, name: &str| -> Option<String> {
            match v?.get(name)? {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        // `agent:<id>:…`, as the store reads a key.
        let session_agent = || {
            let rest = session_key.strip_prefix("agent:")?;
            rest.split_once(':').map(|(agent, _)| agent.to_string())
        };
        match provenance {
            Provenance::Inbound => Sender::Person {
                channel: field(route, "channel"),
                id: field(sender, "id"),
                name: field(sender, "name")
                    .or_else(|| field(sender, "displayName"))
                    .or_else(|| field(sender, "username")),
                is_bot: sender
                    .and_then(|s| s.get("isBot"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            },
            Provenance::Agent => Sender::Agent {
                agent_id: session_agent(),
                run_id: field(route, "runId"),
            },
            Provenance::InterSession => Sender::PeerAgent {
                agent_id: field(route, "sourceAgentId"),
                session_key: field(route, "sourceSessionKey"),
                tool: field(route, "sourceTool"),
                run_id: field(route, "runId"),
            },
            Provenance::A2a => {
                let source = field(route, "sourceSessionKey");
                match source.as_deref().and_then(|s| s.strip_prefix("a2a:")) {
                    Some(peer) => Sender::A2aPeer {
                        peer: peer.to_string(),
                        run_id: field(route, "runId"),
                    },
                    // An A2A run's answer carries the same record: the agent said it.
                    None => Sender::Agent {
                        agent_id: session_agent(),
                        run_id: field(route, "runId"),
                    },
                }
            }
            Provenance::Operator => Sender::Operator {
                run_id: field(route, "runId"),
            },
            Provenance::Heartbeat => match field(route, "heartbeat").as_deref() {
                Some(HEARTBEAT_PROMPT) => Sender::Deepcli,
                Some(HEARTBEAT_ANSWER) => Sender::Agent {
                    agent_id: session_agent(),
                    run_id: None,
                },
                _ => Sender::Unknown,
            },
            Provenance::Acp | Provenance::Reset => Sender::Deepcli,
        }
    }

    /// The `kind` it is serialized with.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Sender::Person { .. } => "person",
            Sender::Agent { .. } => "agent",
            Sender::PeerAgent { .. } => "peer_agent",
            Sender::A2aPeer { .. } => "a2a_peer",
            Sender::Operator { .. } => "operator",
            Sender::Deepcli => "deepcli",
            Sender::Unknown => "unknown",
        }
    }

    /// The sender in a few words, for a person to read (the console's transcript).
    pub(crate) fn label(&self) -> String {
        match self {
            Sender::Person {
                channel,
                id,
                name,
                is_bot,
            } => {
                let who = match (name, id) {
                    (Some(name), Some(id)) => format!("{name} ({id})"),
                    (Some(name), None) => name.clone(),
                    (None, Some(id)) => id.clone(),
                    (None, None) => "someone".to_string(),
                };
                let bot = if *is_bot { " [bot]" } else { "" };
                match channel {
                    Some(channel) => format!("{who}{bot} on {channel}"),
                    None => format!("{who}{bot}"),
                }
            }
            Sender::Agent { agent_id, .. } => match agent_id {
                Some(agent) => format!("agent {agent}"),
                None => "the agent".to_string(),
            },
            Sender::PeerAgent {
                agent_id,
                session_key,
                tool,
                ..
            } => {
                let who = agent_id
                    .as_deref()
                    .map_or("another agent".to_string(), |a| format!("agent {a}"));
                let from = session_key
                    .as_deref()
                    .map_or(String::new(), |k| format!(" from {k}"));
                let how = tool.as_deref().map_or(String::new(), |t| format!(" ({t})"));
                format!("{who}{from}{how}")
            }
            Sender::A2aPeer { peer, .. } => format!("A2A peer {peer}"),
            Sender::Operator { .. } => "the operator".to_string(),
            Sender::Deepcli => "deepcli".to_string(),
            Sender::Unknown => "heartbeat".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_provenance_names_its_sender_from_the_row() {
        let key = "agent:main:telegram:direct:42";
        let person = Sender::of_row(
            key,
            Provenance::Inbound,
            Some(&json!({"id": 42, "name": "Ada", "isBot": false})),
            Some(&json!({"channel": "telegram", "agentId": "main"})),
        );
        assert_eq!(person.label(), "Ada (42) on telegram");
        assert_eq!(person.kind(), "person");
        assert_eq!(
            serde_json::to_value(&person).unwrap(),
            json!({"kind": "person", "channel": "telegram", "id": "42", "name": "Ada", "isBot": false})
        );
        let agent = Sender::of_row(key, Provenance::Agent, None, None);
        assert_eq!(agent.label(), "agent main");
        let peer = Sender::of_row(
            "agent:research:main",
            Provenance::InterSession,
            None,
            Some(
                &json!({"sourceAgentId": "main", "sourceSessionKey": "agent:main:main",
                         "sourceTool": "sessions_send", "runId": "r-1"}),
            ),
        );
        assert_eq!(
            peer.label(),
            "agent main from agent:main:main (sessions_send)"
        );
        assert_eq!(
            serde_json::to_value(&peer).unwrap()["sessionKey"],
            "agent:main:main"
        );
        let a2a = Sender::of_row(
            key,
            Provenance::A2a,
            None,
            Some(&json!({"sourceSessionKey": "a2a:partner", "runId": "r-2"})),
        );
        assert_eq!(a2a.label(), "A2A peer partner");
        let bot = Sender::of_row(
            key,
            Provenance::Inbound,
            Some(&json!({"isBot": true})),
            None,
        );
        assert_eq!(bot.label(), "someone [bot]");
        let beat = |r| {
            Sender::of_row(
                key,
                Provenance::Heartbeat,
                None,
                Some(&json!({"heartbeat": r})),
            )
        };
        assert_eq!(beat(HEARTBEAT_PROMPT), Sender::Deepcli);
        assert_eq!(beat(HEARTBEAT_ANSWER).label(), "agent main");
        assert_eq!(
            Sender::of_row(key, Provenance::Heartbeat, None, None),
            Sender::Unknown
        );
        assert_eq!(
            Sender::of_row(key, Provenance::Reset, None, None),
            Sender::Deepcli
        );
    }
}
