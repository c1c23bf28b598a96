//! A route input and result, with OpenClaw's field names in JSON (routing.md §1, §7).

use serde::{Deserialize, Deserializer, Serialize};

use super::plan::{BindingRef, MatchedBy};
use super::shared_str::SharedStr;
use crate::config::model::{DmScope, GroupScope};

/// A conversation: `{kind, id}`. Ids that arrive as JSON numbers become their decimal string.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Peer {
    pub kind: String,
    #[serde(deserialize_with = "string_or_number")]
    pub id: String,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(serde_json::Number),
    }
    Ok(match Id::deserialize(d)? {
        Id::Text(text) => text,
        Id::Number(n) => n.to_string(),
    })
}

/// An inbound message's routing facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteInput {
    pub channel: String,
    #[serde(default)]
    pub account_id: Option<String>,
    #[serde(default)]
    pub peer: Option<Peer>,
    #[serde(default)]
    pub parent_peer: Option<Peer>,
    #[serde(default)]
    pub guild_id: Option<String>,
    #[serde(default)]
    pub team_id: Option<String>,
    #[serde(default)]
    pub member_role_ids: Vec<String>,
    #[serde(default)]
    pub dm_scope: Option<DmScope>,
    #[serde(default)]
    pub group_scope: Option<GroupScope>,
}

/// Which agent and session a message belongs to. The strings are shared with the plan where
/// they can be (agent ids, main keys, known channels and accounts): a result costs few
/// allocations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteResult {
    pub agent_id: SharedStr,
    pub channel: SharedStr,
    pub account_id: SharedStr,
    pub session_key: SharedStr,
    pub main_session_key: SharedStr,
    pub last_route_policy: &'static str,
    pub matched_by: MatchedBy,
    pub dm_scope: DmScope,
    pub group_scope: GroupScope,
    pub binding: Option<BindingRef>,
}

impl Serialize for RouteResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("RouteResult", 10)?;
        st.serialize_field("agentId", &self.agent_id)?;
        st.serialize_field("channel", &self.channel)?;
        st.serialize_field("accountId", &self.account_id)?;
        st.serialize_field("sessionKey", &self.session_key)?;
        st.serialize_field("mainSessionKey", &self.main_session_key)?;
        st.serialize_field("lastRoutePolicy", self.last_route_policy)?;
        st.serialize_field("matchedBy", self.matched_by.as_str())?;
        st.serialize_field("dmScope", &self.dm_scope)?;
        st.serialize_field("groupScope", &self.group_scope)?;
        st.serialize_field("binding", &self.binding)?;
        st.end()
    }
}
