//! The Hub's part in approvals (approvals.md): a run whose turn waits for a person shows
//! `awaiting_approval`, and the `management_request` tool hands an agent's management request
//! to whoever decides approvals — as a [`ManagementAsk`] over a channel the composition root
//! made, whose other end the `approvals` module serves. The Hub never decides one and never
//! writes config.

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::store::RunOutcome;
use super::{CallError, Hub, HubCaller};
use crate::state::RunState;

/// An agent's management request, on its way to the approvals: they record it as a pending
/// approval and wait a while for the decision, then `reply` with the tool result (approved and
/// its result, denied, expired, or still pending with its id), or a refusal of the request
/// itself (`status: invalid`).
pub(crate) struct ManagementAsk {
    pub caller: HubCaller,
    pub args: super::tools::ManagementArgs,
    pub reply: oneshot::Sender<Result<Value, CallError>>,
}

/// Where the Hub sends management requests: a channel made before it and the approvals.
#[derive(Clone)]
pub(crate) struct ManagementAsks(mpsc::UnboundedSender<ManagementAsk>);

impl ManagementAsks {
    /// The sending end, and the receiving end the approvals serve.
    pub(crate) fn channel() -> (ManagementAsks, mpsc::UnboundedReceiver<ManagementAsk>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ManagementAsks(tx), rx)
    }
}

impl Hub {
    pub(super) async fn management_request(
        &self,
        caller: &HubCaller,
        args: super::tools::ManagementArgs,
    ) -> Result<super::ToolResult, CallError> {
        let gone = || CallError::Internal("the approvals service is gone".into());
        let (reply, answer) = oneshot::channel();
        self.management
            .0
            .send(ManagementAsk {
                caller: caller.clone(),
                args,
                reply,
            })
            .map_err(|_| gone())?;
        answer
            .await
            .map_err(|_| gone())?
            .map(super::ToolResult::Management)
    }

    /// The run whose turn runs in `session_key` now waits for a person (`awaiting`), or no
    /// longer does; its id, when there is such a run.
    pub(crate) async fn awaiting_approval(
        &self,
        session_key: &str,
        awaiting: bool,
        note: String,
    ) -> Option<String> {
        if let Some(task) = super::tasks::task_of_session(session_key) {
            self.task_permission(task, awaiting).await;
        }
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
                &RunOutcome {
                    note,
                    ..RunOutcome::default()
                },
            )?;
            Ok(Some(run))
        })
        .await
        .ok()
        .flatten()
    }

    /// The run whose turn runs (or waits for a person) in `session_key`, if any.
    pub(crate) async fn run_of_turn(&self, session_key: &str) -> Option<String> {
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
