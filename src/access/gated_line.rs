//! A gated inbound message as its session's history shows it (`sessions/history`'s `gated`,
//! the console's transcript, `deepcli sessions history`): which gate of the inbound policy
//! decided and by which setting, read from the answer its delivery recorded. The answer's
//! other fields (a pairing code above all) are never read into it.

use serde::{Deserialize, Serialize};

use crate::policy::Reason;

/// Why the agent was not given a message: the recorded answer's `gated.reason` (`reason`, as
/// `/v1/inbound`, the metrics and the audit say it) and `gated.rule` (the setting that decided,
/// with its `file:line` or the built-in default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Gated {
    pub reason: String,
    pub rule: String,
}

impl Gated {
    /// Whether the message was kept for the agent's next answer in its session (policy.md:
    /// `not-mentioned` group messages, up to `historyLimit`), rather than never given.
    pub(crate) fn kept_as_context(&self) -> bool {
        self.reason == Reason::NotMentioned.as_str()
    }

    /// What became of the message, for a person to read.
    pub(crate) fn fate(&self) -> &'static str {
        if self.kept_as_context() {
            "not delivered: kept as context for the agent's next answer here (up to historyLimit)"
        } else {
            "not delivered: the agent never saw it"
        }
    }

    /// The gate in a few words: `gated: not-mentioned by requireMention (…)`.
    pub(crate) fn label(&self) -> String {
        if self.rule.is_empty() {
            format!("gated: {}", self.reason)
        } else {
            format!("gated: {} by {}", self.reason, self.rule)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_not_mentioned_message_is_kept_and_any_other_gate_never_reaches_the_agent() {
        let kept = Gated {
            reason: "not-mentioned".into(),
            rule: "requireMention (built-in default: true)".into(),
        };
        assert!(kept.kept_as_context());
        assert!(kept.fate().contains("kept as context"));
        assert_eq!(
            kept.label(),
            "gated: not-mentioned by requireMention (built-in default: true)"
        );
        let never = Gated {
            reason: "pairing-required".into(),
            rule: String::new(),
        };
        assert!(!never.kept_as_context());
        assert_eq!(never.fate(), "not delivered: the agent never saw it");
        assert_eq!(never.label(), "gated: pairing-required");
    }
}
