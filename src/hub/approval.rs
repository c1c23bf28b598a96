//! The Hub's part in approvals (approvals.md): a run whose turn waits for a person shows
//! `awaiting_approval`, and the `management_request` tool hands an agent's management request
//! to whoever decides approvals — the [`ManagementDoor`] the controller sets. The Hub never
//! decides one and never writes config.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};

use super::store::Outcome;
use super::{CallError, Caller, Hub};
use crate::state::RunState;

/// What takes an agent's management request: the `approvals` module.
pub trait ManagementDoor: Send + Sync {
    /// Records the request of `caller` as a pending approval and waits a while for the
    /// decision; the tool result (approved and its result, denied, expired, or still pending
    /// with its id), or a refusal of the request itself (`status: invalid`).
    fn request(
        &self,
        caller: Caller,
        args: super::tools::ManagementArgs,
    ) -> Pin<Box<dyn Future<Output = Result<Value, CallError>> + Send>>;
}

impl Hub {
    /// Sets who takes management requests; only the first call counts.
    pub fn set_management_door(&self, door: Arc<dyn ManagementDoor>) {
        let _ = self.management.set(door);
    }

    pub(super) async fn management_request(
        &self,
        caller: &Caller,
        args: super::tools::ManagementArgs,
    ) -> Result<super::ToolResult, CallError> {
        match self.management.get() {
            Some(door) => door
                .request(caller.clone(), args)
                .await
                .map(super::ToolResult::Management),
            None => Ok(super::ToolResult::Management(json!({
                "status": "unavailable",
                "error": "this hub takes no management requests (no approvals service runs)",
            }))),
        }
    }

    /// The run whose turn runs in `session_key` now waits for a person (`awaiting`), or no
    /// longer does; its id, when there is such a run.
    pub async fn awaiting_approval(
        &self,
        session_key: &str,
        awaiting: bool,
        note: String,
    ) -> Option<String> {
        let key = session_key.to_string();
        let (from, to) = if awaiting {
            (RunState::Running, RunState::AwaitingApproval)
        } else {
            (RunState::AwaitingApproval, RunState::Running)
        };
        self.db(move |s| {
            let Some(run) = s.run_in(&key, from)? else {
                return Ok(None);
            };
            s.transition(
                &run,
                to,
                &Outcome {
                    note,
                    ..Outcome::default()
                },
            )?;
            Ok(Some(run))
        })
        .await
        .ok()
        .flatten()
    }

    /// The run whose turn runs (or waits for a person) in `session_key`, if any.
    pub async fn run_of_turn(&self, session_key: &str) -> Option<String> {
        let key = session_key.to_string();
        self.db(move |s| {
            Ok(match s.run_in(&key, RunState::Running)? {
                Some(run) => Some(run),
                None => s.run_in(&key, RunState::AwaitingApproval)?,
            })
        })
        .await
        .ok()
        .flatten()
    }
}
