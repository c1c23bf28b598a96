//! Why the Access layer did not deliver a message. A domain error: what went wrong, with the
//! data a message needs. `Display` is the whole story, for the operator's logs; the HTTP
//! response (status, and what an unauthenticated caller may learn) is chosen in `http.rs`.

/// Why a call was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unauthenticated {
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
pub(crate) enum AccessError {
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
    /// A turn the engine could not give an answer (its own words; the HTTP status is chosen
    /// in `http.rs` as for any refusal).
    #[error(transparent)]
    Turn(crate::sessions::TurnError),
    #[error("internal error: {0}")]
    Internal(String),
    /// Another replica runs the message's agent and refused the message (docs/scale-out.md):
    /// its status and body, passed on whole.
    #[error("replica {replica} runs agent `{agent}` and answered {status}: {error}")]
    Forwarded {
        replica: String,
        agent: String,
        status: u16,
        error: String,
        body: serde_json::Value,
    },
    /// The message's agent runs on no replica that can be reached now (the words say why).
    #[error("{0}")]
    Elsewhere(String),
}

impl AccessError {
    /// Whether the same envelope may be taken when handed in again later: no plan yet, a full
    /// queue, a runtime starting or failing, a budget, a turn that passed its time (answered
    /// `uncertain` then), an internal failure. A caller that cannot be authenticated, a bad
    /// envelope or a withdrawn message is refused for good.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            AccessError::NoPlan | AccessError::Internal(_) | AccessError::Elsewhere(_) => true,
            // As the owner's own refusal would be: a 408, a 429 or a 5xx may be tried again.
            AccessError::Forwarded { status, .. } => matches!(status, 408 | 429) || *status >= 500,
            AccessError::Turn(turn) => !matches!(turn, crate::sessions::TurnError::Withdrawn(_)),
            AccessError::TooLarge { .. }
            | AccessError::SlowBody { .. }
            | AccessError::BadEnvelope { .. }
            | AccessError::Unauthenticated(_)
            | AccessError::Disabled { .. } => false,
        }
    }

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

/// A turn the engine could not give an answer. A runtime that takes no prompts is an internal
/// error here: the plan routed a message to it.
impl From<crate::sessions::TurnError> for AccessError {
    fn from(e: crate::sessions::TurnError) -> AccessError {
        use crate::sessions::TurnError;
        match e {
            TurnError::Internal(why) => AccessError::Internal(why),
            e @ TurnError::TakesNoPrompts { .. } => AccessError::Internal(e.to_string()),
            e => AccessError::Turn(e),
        }
    }
}
