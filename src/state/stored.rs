//! The words the state database stores for states and kinds, each an enum: written with
//! `ToSql`, read back with `FromSql` (a word this build does not know is a corrupt record, not a
//! silent default), serialized as the same word.

/// An enum whose variants are stored as fixed words.
macro_rules! stored_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// The stored word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The variant a stored word names.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }

        impl $crate::state::db::ToValue for $name {
            fn to_value(&self) -> $crate::state::db::DbResult<$crate::state::db::Value<'_>> {
                Ok($crate::state::db::Value::Text(self.as_str()))
            }
        }

        impl $crate::state::db::FromColumn for $name {
            fn from_column(column: $crate::state::db::Column<'_>) -> Result<$name, String> {
                match column {
                    $crate::state::db::Value::Text(text) => $name::parse(text).ok_or_else(|| {
                        format!(concat!("`{}` is not a ", stringify!($name)), text)
                    }),
                    other => Err(format!(
                        concat!("{} where a ", stringify!($name), " was expected"),
                        other.kind()
                    )),
                }
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<$name> {
                let text = value.as_str()?;
                $name::parse(text).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(
                        format!(concat!("`{}` is not a ", stringify!($name)), text).into(),
                    )
                })
            }
        }
    };
}

stored_enum! {
    /// What a runtime is doing.
    pub enum RuntimePhase {
        Starting = "starting",
        Ready = "ready",
        CrashLoop = "crash-loop",
        Failed = "failed",
        Stopped = "stopped",
        /// Never recorded: what a reader of the state says of a runtime recorded `starting` or
        /// `ready` whose process no longer runs, when no controller runs to say otherwise (its
        /// controller was killed). See [`super::RuntimeRecord::seen_now`].
        Gone = "gone",
    }
}

stored_enum! {
    /// What apply asked of an agent's runtime.
    pub enum Wanted {
        Run = "run",
        Stop = "stop",
    }
}

stored_enum! {
    /// Where a transcript row came from.
    pub enum Provenance {
        /// A message from a chat platform, through the Access API.
        Inbound = "inbound",
        /// The agent's reply.
        Agent = "agent",
        /// A message from another session, through the Hub.
        InterSession = "inter_session",
        /// A line about the runtime session itself (how it was opened).
        Acp = "acp",
        /// A heartbeat prompt of the controller, and the agent's answer to it.
        Heartbeat = "heartbeat",
        /// A message the operator spoke into a session (`deepcli sessions send`).
        Operator = "operator",
        /// A message from an A2A peer (a2a.md), and the agent's answer to it.
        A2a = "a2a",
        /// A new session under the same key (`/new`, `/reset`): the transcript's current
        /// segment begins here.
        Reset = "reset",
    }
}

stored_enum! {
    /// Where a Hub run is (hub.md, "Run states"): `accepted → running → (awaiting_input |
    /// awaiting_approval) → completed | failed | timed_out | cancel_requested → cancelled |
    /// uncertain`.
    pub enum RunState {
        /// Taken by the Hub, waiting in the target session's FIFO.
        Accepted = "accepted",
        /// Its turn is running in the target's runtime.
        Running = "running",
        /// Held by a loop pause (approvals.md) until the operator resumes or stops it.
        Paused = "paused",
        AwaitingInput = "awaiting_input",
        AwaitingApproval = "awaiting_approval",
        Completed = "completed",
        Failed = "failed",
        TimedOut = "timed_out",
        /// A cancel was sent; the runtime has not confirmed it yet.
        CancelRequested = "cancel_requested",
        /// The runtime confirmed the cancel (or the run never reached it).
        Cancelled = "cancelled",
        /// The outcome cannot be known: a cancel the runtime never confirmed, a runtime that
        /// died mid-turn, a controller restart during the run. Never retried.
        Uncertain = "uncertain",
    }
}

stored_enum! {
    /// Where an approval stands (approvals.md): pending until a person, a mode or a rule
    /// decides, it expires, or it is voided (withdrawn, session closed, permissions changed).
    pub enum ApprovalState {
        Pending = "pending",
        Approved = "approved",
        Denied = "denied",
        /// Nobody answered within `timeoutSeconds`, or nobody could be asked: denied.
        Expired = "expired",
        /// What it was bound to changed before a decision: denied to the agent.
        Void = "void",
    }
}

stored_enum! {
    /// What asked for an approval.
    pub enum ApprovalSource {
        /// An ACP `session/request_permission` of the agent's runtime.
        Permission = "permission",
        /// The Hub tool `management_request`.
        Management = "management",
    }
}

stored_enum! {
    /// How an `allow_always` rule matches a request's title.
    pub enum TitleMatch {
        /// The title as it was asked, character for character (`approve --always`).
        Exact = "exact",
        /// The operator's pattern, written on purpose (`--pattern`): `*` matches any run of
        /// characters.
        Pattern = "pattern",
    }
}

stored_enum! {
    /// What started a Hub run.
    pub enum RunKind {
        /// A message into an existing session (`sessions_send`, or the operator's).
        Send = "send",
        /// A new child session and its task (`sessions_spawn`).
        Spawn = "spawn",
    }
}

stored_enum! {
    /// How a spawned child lives (`sessions_spawn` `mode`).
    pub enum SpawnMode {
        /// Works on its task; its final reply is announced to the parent.
        Run = "run",
        /// Stays open after its first reply, for more messages.
        Session = "session",
    }
}

stored_enum! {
    /// What becomes of a `mode: run` child after its announce (`sessions_spawn` `cleanup`).
    pub enum Cleanup {
        /// Closed, its token revoked, its transcript moved to the trash tables.
        Delete = "delete",
        Keep = "keep",
    }
}

stored_enum! {
    /// Which runtime a child session was spawned on (`sessions_spawn` `runtime`).
    pub enum ChildKind {
        /// `agent:<id>:subagent:<uuid>` on the target agent's runtime.
        Subagent = "subagent",
        /// `agent:<id>:acp:<uuid>` on an ACP agent.
        Acp = "acp",
    }
}

impl RunState {
    /// A final state: nothing moves a run out of it (a late event is recorded and ignored).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Completed
                | RunState::Failed
                | RunState::TimedOut
                | RunState::Cancelled
                | RunState::Uncertain
        )
    }

    /// Whether a run may go from `self` to `next` (hub.md's graph).
    pub fn may_become(self, next: RunState) -> bool {
        use RunState::*;
        match self {
            Accepted => matches!(
                next,
                Running | Failed | CancelRequested | Cancelled | Uncertain
            ),
            Running | AwaitingInput | AwaitingApproval => matches!(
                next,
                AwaitingInput
                    | AwaitingApproval
                    | Running
                    | Completed
                    | Failed
                    | TimedOut
                    | CancelRequested
                    | Uncertain
            ),
            CancelRequested => matches!(next, Cancelled | Uncertain),
            Paused => matches!(next, Accepted | Cancelled),
            Completed | Failed | TimedOut | Cancelled | Uncertain => false,
        }
    }
}

stored_enum! {
    /// How an apply ended, as `deepcli history` shows it.
    pub enum Outcome {
        Running = "running",
        Applied = "applied",
        Failed = "failed",
        /// The process died while it ran; the next apply found it so.
        Interrupted = "interrupted",
    }
}

stored_enum! {
    /// Why the state is locked.
    pub enum LeasePurpose {
        Apply = "deepcli apply",
        Controller = "deepcli up",
        Trash = "deepcli trash",
        Edit = "deepcli edit",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_word_reads_back_as_its_variant_and_an_unknown_one_is_corrupt() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let back: RuntimePhase = conn
            .query_row("SELECT ?1", [RuntimePhase::CrashLoop], |r| r.get(0))
            .unwrap();
        assert_eq!(back, RuntimePhase::CrashLoop);
        let unknown = conn.query_row("SELECT 'crashing'", [], |r| r.get::<_, RuntimePhase>(0));
        assert!(unknown.is_err());
        assert_eq!(
            serde_json::to_string(&Provenance::InterSession).unwrap(),
            "\"inter_session\""
        );
    }
}
