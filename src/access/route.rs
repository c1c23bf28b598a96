//! Where an envelope goes: the routing tiers' answer, or the `acp` binding of its exact
//! conversation, which Access consults first (access.md, "acp bindings"). Serialized in the
//! shape of `deepcli route --json`, so the response's `route` reads the same either way.

use serde::Serialize;

use crate::routing::RouteResult;
use crate::routing::plan::BindingRef;
use crate::sessions::SessionOptions;

/// An `acp` binding that took a message: its agent, its session key, and how its runtime
/// sessions are held (`acp.mode`, `acp.label`, `acp.cwd`).
pub(super) struct AcpRoute {
    pub agent_id: String,
    pub session_key: String,
    pub binding: BindingRef,
    /// `acp.mode: oneshot`: a fresh runtime session per message, closed after the reply.
    pub oneshot: bool,
    /// `acp.label`: names the session in the response and the transcript.
    pub label: Option<String>,
    /// `acp.cwd`, resolved: the working directory of its runtime sessions.
    pub cwd: Option<std::path::PathBuf>,
}

pub(super) struct Route {
    pub result: RouteResult,
    pub acp: Option<AcpRoute>,
}

impl Route {
    pub(super) fn agent_id(&self) -> &str {
        match &self.acp {
            Some(acp) => &acp.agent_id,
            None => &self.result.agent_id,
        }
    }

    /// The session key, before a thread is added to it.
    pub(super) fn session_key(&self) -> &str {
        match &self.acp {
            Some(acp) => &acp.session_key,
            None => &self.result.session_key,
        }
    }

    /// How the runtime session of this route is held: an `acp` binding's settings, else the
    /// defaults (persistent, the runtime's working directory).
    pub(super) fn session_options(&self) -> SessionOptions {
        match &self.acp {
            Some(acp) => SessionOptions {
                oneshot: acp.oneshot,
                label: acp.label.clone(),
                cwd: acp.cwd.clone(),
                timeout: None,
                run_id: None,
                begun: None,
                files: Vec::new(),
            },
            None => SessionOptions::default(),
        }
    }

    pub(super) fn matched_by(&self) -> &'static str {
        match &self.acp {
            Some(_) => "binding.acp",
            None => self.result.matched_by.as_str(),
        }
    }
}

impl Serialize for Route {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let r = &self.result;
        let mut st = s.serialize_struct("Route", 11)?;
        st.serialize_field("agentId", self.agent_id())?;
        st.serialize_field("channel", &r.channel)?;
        st.serialize_field("accountId", &r.account_id)?;
        st.serialize_field("sessionKey", self.session_key())?;
        st.serialize_field("mainSessionKey", &r.main_session_key)?;
        // An acp binding's session is the conversation's own, always.
        st.serialize_field(
            "lastRoutePolicy",
            match &self.acp {
                Some(_) => "session",
                None => r.last_route_policy,
            },
        )?;
        st.serialize_field("matchedBy", self.matched_by())?;
        st.serialize_field("dmScope", &r.dm_scope)?;
        st.serialize_field("groupScope", &r.group_scope)?;
        match &self.acp {
            Some(acp) => {
                st.serialize_field("binding", &acp.binding)?;
                st.serialize_field(
                    "acp",
                    &serde_json::json!({
                        "mode": if acp.oneshot { "oneshot" } else { "persistent" },
                        "label": acp.label,
                    }),
                )?;
            }
            None => st.serialize_field("binding", &r.binding)?,
        }
        st.end()
    }
}
