//! The compiled binding and what is said about a match: [`CompiledBinding`] (one route binding
//! as the router needs it), [`BindingRef`] (where it is written), [`MatchedBy`] (the tier that
//! decided) and [`Miss`] (why a candidate did not match). The index, the tier walk and the
//! route result all speak these; they depend on nothing of the walk.

use std::sync::Arc;

use super::scope::Scope;
use crate::config::model::{DmScope, GroupScope};

/// Where a binding is written: the file, the line of its list entry and its index in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindingRef {
    pub file: Arc<str>,
    pub line: u32,
    pub index: usize,
}

/// One route binding as the router needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledBinding {
    pub agent_id: String,
    pub scope: Scope,
    pub dm_scope: Option<DmScope>,
    pub group_scope: Option<GroupScope>,
    pub source: BindingRef,
}

/// Which tier decided, as OpenClaw names it in `matchedBy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchedBy {
    Peer,
    Parent,
    Wildcard,
    GuildRoles,
    Guild,
    Team,
    Account,
    Channel,
    Default,
}

impl MatchedBy {
    /// The tiers in resolution order (`Default` is what is left when none matches).
    pub const TIERS: [MatchedBy; 8] = [
        MatchedBy::Peer,
        MatchedBy::Parent,
        MatchedBy::Wildcard,
        MatchedBy::GuildRoles,
        MatchedBy::Guild,
        MatchedBy::Team,
        MatchedBy::Account,
        MatchedBy::Channel,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MatchedBy::Peer => "binding.peer",
            MatchedBy::Parent => "binding.peer.parent",
            MatchedBy::Wildcard => "binding.peer.wildcard",
            MatchedBy::GuildRoles => "binding.guild+roles",
            MatchedBy::Guild => "binding.guild",
            MatchedBy::Team => "binding.team",
            MatchedBy::Account => "binding.account",
            MatchedBy::Channel => "binding.channel",
            MatchedBy::Default => "default",
        }
    }

    pub fn parse(text: &str) -> Option<MatchedBy> {
        MatchedBy::TIERS
            .into_iter()
            .chain([MatchedBy::Default])
            .find(|m| m.as_str() == text)
    }
}

/// Why a candidate binding did not match (the account pattern and the tier key already hold,
/// by where the binding is indexed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// The binding names a peer and the input has none.
    NoPeer,
    /// The binding's peer kind is not compatible with the input's.
    PeerKind,
    /// The binding's peer id differs from the input's.
    PeerId,
    Guild,
    Team,
    /// None of the binding's roles is among the input's `memberRoleIds`.
    Roles,
}
