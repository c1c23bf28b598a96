//! What a Hub tool answers, typed (hub.md, "Tools"), and turned into OpenClaw's result shapes
//! only at the edge ([`ToolResult::to_json`]). A refusal is a result, not an error:
//! `{status: "forbidden", error, reason}`, counted by reason where the Hub makes it.
//!
//! Also what every part shows of a reply: the stop tokens, shortening, redaction.

use serde_json::{Value, json};

use super::policy::{Denial, Reason};
use super::store::RunRecord;
use crate::state::{RunState, SpawnMode};

/// What stops the reply-back loop (and, `ANNOUNCE_SKIP`, the announce).
pub(super) const REPLY_SKIP: &str = "REPLY_SKIP";
pub(super) const NO_REPLY: &str = "NO_REPLY";
pub(super) const ANNOUNCE_SKIP: &str = "ANNOUNCE_SKIP";

/// An empty reply or a stop token.
pub(super) fn is_stop(reply: &str) -> bool {
    matches!(reply.trim(), "" | REPLY_SKIP | NO_REPLY | ANNOUNCE_SKIP)
}

/// What stands in for a credential in what an agent reads.
pub(super) const REDACTED: &str = "[redacted]";

/// Text with anything shaped like a credential ([`crate::credentials`]), and the operator
/// token in force whatever its shape (`operator`), replaced by `[redacted]`.
pub(super) fn redact(text: &str, operator: Option<&str>) -> String {
    let also: Vec<&str> = operator.into_iter().collect();
    crate::credentials::redact(text, &also, REDACTED).into_owned()
}

/// At most `max` characters of `text`, with `…` when cut.
pub(super) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// One tool call's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ToolResult {
    /// Refused by policy.
    Forbidden(Denial),
    /// Refused by a budget (reason `budget_exceeded`): which budget, and in how many seconds
    /// to try again.
    OverBudget {
        error: String,
        budget: &'static str,
        retry_after: u64,
    },
    /// The call cannot be done as asked (`status: error`): the words say why.
    Error(String),
    /// A send accepted and not waited for (`timeoutSeconds: 0`).
    Accepted { run_id: String, session_key: String },
    /// A send waited for: its run as it stood when it ended or the wait ran out.
    Sent(SendOutcome),
    /// A send past a loop bound, recorded `paused` for an operator.
    Paused {
        run_id: String,
        session_key: String,
        error: String,
    },
    /// A spawn accepted.
    Spawned {
        child_session_key: String,
        run_id: String,
        mode: SpawnMode,
    },
    /// A child's run waited for or cancelled (`subagents wait|cancel`).
    ChildRun {
        session_key: String,
        run: Box<RunRecord>,
    },
    /// A listing or a status document (agents, sessions, history, children, session status),
    /// in its result shape already.
    Document(Value),
    /// The approvals service's answer to a management request, as it gave it.
    Management(Value),
}

impl ToolResult {
    /// The reason of a refusal.
    #[cfg(test)]
    pub(crate) fn denied(&self) -> Option<Reason> {
        match self {
            ToolResult::Forbidden(denial) => Some(denial.reason),
            ToolResult::OverBudget { .. } => Some(Reason::BudgetExceeded),
            _ => None,
        }
    }

    /// The result in OpenClaw's shape, as the agent reads it.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            ToolResult::Forbidden(denial) => forbidden(denial.reason, &denial.error),
            ToolResult::OverBudget {
                error,
                budget,
                retry_after,
            } => {
                let mut out = forbidden(Reason::BudgetExceeded, error);
                out["budget"] = (*budget).into();
                out["retryAfter"] = (*retry_after).into();
                out
            }
            ToolResult::Error(error) => json!({"status": "error", "error": error}),
            ToolResult::Accepted {
                run_id,
                session_key,
            } => json!({"runId": run_id, "status": "accepted", "sessionKey": session_key}),
            ToolResult::Sent(outcome) => outcome.to_json(),
            ToolResult::Paused {
                run_id,
                session_key,
                error,
            } => json!({
                "runId": run_id,
                "status": "paused",
                "sessionKey": session_key,
                "error": error,
            }),
            ToolResult::Spawned {
                child_session_key,
                run_id,
                mode,
            } => json!({
                "status": "accepted",
                "childSessionKey": child_session_key,
                "runId": run_id,
                "mode": mode,
            }),
            ToolResult::ChildRun { session_key, run } => json!({
                "status": "ok",
                "runId": run.run_id,
                "sessionKey": session_key,
                "state": run.state,
                "final": run.state.is_final(),
                "reply": run.reply,
                "error": run.error,
            }),
            ToolResult::Document(doc) | ToolResult::Management(doc) => doc.clone(),
        }
    }
}

fn forbidden(reason: Reason, error: &str) -> Value {
    json!({"status": "forbidden", "error": error, "reason": reason.as_str()})
}

/// How a waited-for send ended, for its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendStatus {
    /// Answered with a reply.
    Ok(String),
    /// Answered with nothing to say (empty, or a stop token).
    NoReply,
    /// Timed out, or still going when the wait ran out.
    Timeout,
    /// Queued, not waited for (a wait of 0 seconds).
    Accepted,
    /// Failed, cancelled or uncertain: why.
    Error(String),
}

/// `sessions_send`'s result for a run as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SendOutcome {
    pub run_id: String,
    pub session_key: String,
    pub status: SendStatus,
    pub state: RunState,
}

/// In OpenClaw's shape ([`SendOutcome::to_json`]), wherever it is written: a tool result or
/// the operator's `sessions/send`.
impl serde::Serialize for SendOutcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl SendOutcome {
    /// Run `run` into session `key`, as it stands.
    pub(crate) fn of(run: &RunRecord, key: &str) -> SendOutcome {
        let status = match run.state {
            RunState::Completed => {
                let reply = run.reply.clone().unwrap_or_default();
                if is_stop(&reply) {
                    SendStatus::NoReply
                } else {
                    SendStatus::Ok(reply)
                }
            }
            RunState::TimedOut => SendStatus::Timeout,
            RunState::Failed | RunState::Cancelled | RunState::Uncertain => SendStatus::Error(
                run.error
                    .clone()
                    .unwrap_or_else(|| format!("the run ended {}", run.state)),
            ),
            // Still going: the wait ran out.
            _ => SendStatus::Timeout,
        };
        SendOutcome {
            run_id: run.run_id.clone(),
            session_key: key.to_string(),
            status,
            state: run.state,
        }
    }

    /// `{runId, sessionKey, reply | error, status, state}`.
    pub(crate) fn to_json(&self) -> Value {
        let mut out = json!({"runId": self.run_id, "sessionKey": self.session_key});
        let status = match &self.status {
            SendStatus::Ok(reply) => {
                out["reply"] = reply.clone().into();
                "ok"
            }
            SendStatus::NoReply => "no_reply",
            SendStatus::Timeout => "timeout",
            SendStatus::Accepted => "accepted",
            SendStatus::Error(error) => {
                out["error"] = error.clone().into();
                "error"
            }
        };
        out["status"] = status.into();
        out["state"] = json!(self.state);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RunKind;

    fn run(state: RunState, reply: Option<&str>, error: Option<&str>) -> RunRecord {
        RunRecord {
            state,
            reply: reply.map(str::to_string),
            error: error.map(str::to_string),
            run_id: "r1".into(),
            ..RunRecord::new(
                RunKind::Send,
                "sessions_send",
                (Some("a".into()), Some("agent:a:main".into())),
                "b",
                "agent:b:main",
                "hi".into(),
            )
        }
    }

    #[test]
    fn stop_tokens_and_empty_replies_stop_the_loop() {
        for stop in ["", "  ", "REPLY_SKIP", " NO_REPLY\n", "ANNOUNCE_SKIP"] {
            assert!(is_stop(stop), "{stop:?}");
        }
        assert!(!is_stop("REPLY_SKIP please"));
        assert!(!is_stop("ok"));
    }

    #[test]
    fn a_sends_result_keeps_openclaws_shape_for_every_run_state() {
        // (state, reply, error, the result as text)
        let rows: &[(RunState, Option<&str>, Option<&str>, &str)] = &[
            (
                RunState::Completed,
                Some("hello"),
                None,
                r#"{"runId":"r1","sessionKey":"agent:b:main","reply":"hello","status":"ok","state":"completed"}"#,
            ),
            (
                RunState::Completed,
                Some(" NO_REPLY "),
                None,
                r#"{"runId":"r1","sessionKey":"agent:b:main","status":"no_reply","state":"completed"}"#,
            ),
            (
                RunState::TimedOut,
                None,
                Some("slow"),
                r#"{"runId":"r1","sessionKey":"agent:b:main","status":"timeout","state":"timed_out"}"#,
            ),
            (
                RunState::Running,
                None,
                None,
                r#"{"runId":"r1","sessionKey":"agent:b:main","status":"timeout","state":"running"}"#,
            ),
            (
                RunState::Failed,
                None,
                Some("boom"),
                r#"{"runId":"r1","sessionKey":"agent:b:main","error":"boom","status":"error","state":"failed"}"#,
            ),
            (
                RunState::Uncertain,
                None,
                None,
                r#"{"runId":"r1","sessionKey":"agent:b:main","error":"the run ended uncertain","status":"error","state":"uncertain"}"#,
            ),
        ];
        for (state, reply, error, want) in rows {
            let got = ToolResult::Sent(SendOutcome::of(
                &run(*state, *reply, *error),
                "agent:b:main",
            ))
            .to_json()
            .to_string();
            assert_eq!(got, *want, "{state:?}");
        }
    }

    #[test]
    fn refusals_keep_their_shape_and_say_their_reason() {
        let denial = Denial::new(Reason::DepthExceeded, "too deep");
        let forbidden = ToolResult::Forbidden(denial);
        assert_eq!(
            forbidden.to_json().to_string(),
            r#"{"status":"forbidden","error":"too deep","reason":"depth_exceeded"}"#
        );
        assert_eq!(forbidden.denied(), Some(Reason::DepthExceeded));
        let budget = ToolResult::OverBudget {
            error: "over".into(),
            budget: "turnsPerHour",
            retry_after: 30,
        };
        assert_eq!(
            budget.to_json().to_string(),
            r#"{"status":"forbidden","error":"over","reason":"budget_exceeded","budget":"turnsPerHour","retryAfter":30}"#
        );
        assert_eq!(budget.denied(), Some(Reason::BudgetExceeded));
        let error = ToolResult::Error("no".into());
        assert_eq!(
            error.to_json().to_string(),
            r#"{"status":"error","error":"no"}"#
        );
        assert_eq!(error.denied(), None);
        assert_eq!(
            ToolResult::Accepted {
                run_id: "r".into(),
                session_key: "k".into()
            }
            .to_json()
            .to_string(),
            r#"{"runId":"r","status":"accepted","sessionKey":"k"}"#
        );
    }

    #[test]
    fn long_text_is_shortened() {
        assert_eq!(shorten("héllo", 2), "hé…");
        assert_eq!(shorten("hi", 5), "hi");
    }
}
