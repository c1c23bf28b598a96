//! Session capability tokens (hub.md, "Identity"): minted for a runtime session when the
//! Access layer opens it (through the MCP door), revoked when it closes, when its agent is
//! deleted or when the controller restarts, and resolved to the one [`HubCaller`] a tool call
//! acts for. Only hashes are stored ([`super::token`]). Needs the store and nothing of Access.

use std::sync::Arc;

use super::HubCaller;
use super::store::{HubStore, TokenOwner};
use super::token;
use crate::state::StateError;

pub(super) struct Tokens {
    store: Arc<HubStore>,
}

impl Tokens {
    pub(super) fn new(store: Arc<HubStore>) -> Tokens {
        Tokens { store }
    }

    /// A new token for a runtime session of `agent_id` serving `session_key`; the session's
    /// earlier tokens are revoked.
    pub(super) fn mint(&self, agent_id: &str, session_key: &str) -> Option<String> {
        let token = token::mint().ok()?;
        let hash = token::hash(&token)?;
        let owner = TokenOwner {
            agent_id: agent_id.to_string(),
            session_key: session_key.to_string(),
        };
        match self.store.add_token(&hash, &owner) {
            Ok(_) => Some(token),
            Err(e) => {
                tracing::error!(error = %e, "hub: cannot record a session token");
                None
            }
        }
    }

    /// Who holds live token `token` (blocking: a store read); `None` for a malformed,
    /// unknown or revoked one.
    pub(super) fn caller(&self, token: &str) -> Result<Option<HubCaller>, StateError> {
        let Some(hash) = token::hash(token) else {
            return Ok(None);
        };
        let Some(owner) = self.store.token_owner(&hash)? else {
            return Ok(None);
        };
        let depth = self.store.child(&owner.session_key)?.map_or(0, |c| c.depth);
        Ok(Some(HubCaller {
            agent_id: owner.agent_id,
            session_key: owner.session_key,
            depth,
        }))
    }

    /// Revokes the live tokens of session `session_key`; how many.
    pub(super) fn revoke_session(&self, session_key: &str, why: &str) -> Result<usize, StateError> {
        self.store.revoke_session_tokens(session_key, why)
    }

    /// Revokes the live tokens of every session of agent `agent_id`; how many.
    pub(super) fn revoke_agent(&self, agent_id: &str, why: &str) -> Result<usize, StateError> {
        self.store.revoke_agent_tokens(agent_id, why)
    }

    /// Revokes every live token (an earlier controller's); how many.
    pub(super) fn revoke_all(&self, why: &str) -> Result<usize, StateError> {
        self.store.revoke_all_tokens(why)
    }

    /// How many tokens are live.
    pub(super) fn live(&self) -> u64 {
        self.store.live_tokens().unwrap_or(0)
    }
}
