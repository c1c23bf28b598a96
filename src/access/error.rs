//! Why the Access layer did not deliver a message. A domain error: what went wrong, with the
//! data a message needs. `Display` is the whole story, for the operator's logs; the HTTP
//! response (status, and what an unauthenticated caller may learn) is chosen in `http.rs`.

/// Why a call was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No `X-Deepcli-Signature` header.
    MissingSignature,
    /// The header is not `sha256=<hex>`.
    MalformedSignature,
    /// The envelope names a channel account that is not declared.
    UnknownAccount { channel: String, account: String },
    /// The account has no usable `webhookSecret` (why: not set, unreadable, empty).
    NoSecret {
        channel: String,
        account: String,
        why: String,
    },
    /// The signature does not match the body and the account's secret.
    WrongSignature { channel: String, account: String },
}

impl std::fmt::Display for Unauthenticated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unauthenticated::MissingSignature => f.write_str(MISSING_SIGNATURE),
            Unauthenticated::MalformedSignature => f.write_str(MALFORMED_SIGNATURE),
            Unauthenticated::UnknownAccount { channel, account } => write!(
                f,
                "unknown channel account `{channel}/{account}`: declare it in channels.yaml (channels.{channel}.accounts.{account})"
            ),
            Unauthenticated::NoSecret {
                channel,
                account,
                why,
            } => write!(
                f,
                "channel account `{channel}/{account}` takes no messages: {why}"
            ),
            Unauthenticated::WrongSignature { channel, account } => write!(
                f,
                "wrong `X-Deepcli-Signature` for channel account `{channel}/{account}`: it does not match the body and the account's webhookSecret"
            ),
        }
    }
}

pub(crate) const MISSING_SIGNATURE: &str = "missing `X-Deepcli-Signature: sha256=<hex HMAC-SHA256 of the body with the account's webhookSecret>`";
pub(crate) const MALFORMED_SIGNATURE: &str = "`X-Deepcli-Signature` is not `sha256=<hex>`";

#[derive(Debug, Clone, thiserror::Error)]
pub enum AccessError {
    #[error("no routing plan is in force yet: the first apply has not finished")]
    NoPlan,
    #[error("the body is over the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the body did not arrive within {seconds} s")]
    SlowBody { seconds: u64 },
    /// Not an envelope; `field` names the field at fault when there is one.
    #[error("not an envelope: {message}")]
    BadEnvelope {
        message: String,
        field: Option<String>,
    },
    #[error("{0}")]
    Unauthenticated(Unauthenticated),
    #[error("channel account `{channel}/{account}` is disabled (enabled: false in channels.yaml)")]
    Disabled { channel: String, account: String },
    #[error("session `{session_key}` has {limit} messages waiting: send this one again later")]
    QueueFull { session_key: String, limit: usize },
    /// The agent's runtime is not ready: `status` is its phase, `why` the whole story.
    #[error("agent `{agent_id}` cannot take messages now: {why}; send it again later")]
    RuntimeDown {
        agent_id: String,
        status: &'static str,
        why: String,
    },
    #[error("agent `{agent_id}`'s runtime failed {stage}: {message}; send it again later")]
    RuntimeFailed {
        agent_id: String,
        stage: crate::sessions::Stage,
        message: String,
    },
    #[error(
        "agent `{agent_id}` opened runtime session `{session_id}`, which it already gave another conversation: it reuses session ids within one process, so this message was not delivered"
    )]
    SessionReused {
        agent_id: String,
        session_id: String,
    },
    /// The prompt took too long and was cancelled; `stop_reason` is what the agent answered
    /// the cancel with, if it did.
    #[error(
        "agent `{agent_id}` did not answer within {seconds} s: the prompt was cancelled (session/cancel); what it did is uncertain, so this message is not prompted again: send a new one to ask again"
    )]
    TimedOut {
        agent_id: String,
        seconds: f64,
        stop_reason: Option<serde_json::Value>,
        /// The runtime confirmed the cancel (stopReason `cancelled`); else it is uncertain.
        confirmed: bool,
        why: crate::sessions::CancelWhy,
    },
    /// A budget of the agent (approvals.md) refused the turn; nothing reached the runtime.
    #[error("{0}")]
    BudgetExceeded(super::budget::Refusal),
    /// A message the Hub withdrew when its turn came (a cancel, or policy that changed while
    /// it waited): it never reached the runtime.
    #[error("the message was withdrawn before it reached the agent: {0}")]
    Withdrawn(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl AccessError {
    pub(crate) fn bad_field(field: &str, message: impl Into<String>) -> AccessError {
        AccessError::BadEnvelope {
            message: message.into(),
            field: Some(field.to_string()),
        }
    }
}

impl From<crate::state::StateError> for AccessError {
    fn from(e: crate::state::StateError) -> AccessError {
        AccessError::Internal(e.to_string())
    }
}

/// A turn the engine could not give an answer: the same words, the HTTP status chosen in
/// `http.rs` as for any delivery.
impl From<crate::sessions::TurnError> for AccessError {
    fn from(e: crate::sessions::TurnError) -> AccessError {
        use crate::sessions::TurnError;
        match e {
            TurnError::TakesNoPrompts { .. } | TurnError::Internal(_) => {
                AccessError::Internal(match e {
                    TurnError::Internal(why) => why,
                    other => other.to_string(),
                })
            }
            TurnError::QueueFull { session_key, limit } => {
                AccessError::QueueFull { session_key, limit }
            }
            TurnError::RuntimeDown {
                agent_id,
                status,
                why,
            } => AccessError::RuntimeDown {
                agent_id,
                status,
                why,
            },
            TurnError::RuntimeFailed {
                agent_id,
                stage,
                message,
            } => AccessError::RuntimeFailed {
                agent_id,
                stage,
                message,
            },
            TurnError::SessionReused {
                agent_id,
                session_id,
            } => AccessError::SessionReused {
                agent_id,
                session_id,
            },
            TurnError::TimedOut {
                agent_id,
                seconds,
                stop_reason,
                confirmed,
                why,
            } => AccessError::TimedOut {
                agent_id,
                seconds,
                stop_reason,
                confirmed,
                why,
            },
            TurnError::BudgetExceeded(refusal) => AccessError::BudgetExceeded(refusal),
            TurnError::Withdrawn(why) => AccessError::Withdrawn(why),
        }
    }
}
