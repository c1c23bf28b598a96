//! The task state machine (tasks.md, "The model" and "Who may do what"): which event moves a
//! task from which state, and who may cause it. Pure: the store applies a [`Decision`] in the
//! transaction that read the task.

use std::fmt;

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TaskState {
    /// Created; its assignee's session has not taken it yet.
    Open,
    Working,
    /// The assignee asked a question bound to the task.
    AwaitingInput,
    /// A permission request of the assignee waits for a person.
    AwaitingApproval,
    /// The assignee handed in its result and evidence.
    Submitted,
    /// The owner runs its own check.
    InReview,
    /// The owner's check passed: a person decides.
    PendingAcceptance,
    Accepted,
    /// Rejected and closed (a rejection that reopens the task sends it back to `working`).
    Rejected,
    CancelRequested,
    /// The runtime confirmed the cancel.
    Cancelled,
    /// A cancel the runtime did not confirm: what it did is not known.
    Uncertain,
    Failed,
}

impl TaskState {
    pub(crate) const ALL: [TaskState; 13] = [
        TaskState::Open,
        TaskState::Working,
        TaskState::AwaitingInput,
        TaskState::AwaitingApproval,
        TaskState::Submitted,
        TaskState::InReview,
        TaskState::PendingAcceptance,
        TaskState::Accepted,
        TaskState::Rejected,
        TaskState::CancelRequested,
        TaskState::Cancelled,
        TaskState::Uncertain,
        TaskState::Failed,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaskState::Open => "open",
            TaskState::Working => "working",
            TaskState::AwaitingInput => "awaiting_input",
            TaskState::AwaitingApproval => "awaiting_approval",
            TaskState::Submitted => "submitted",
            TaskState::InReview => "in_review",
            TaskState::PendingAcceptance => "pending_acceptance",
            TaskState::Accepted => "accepted",
            TaskState::Rejected => "rejected",
            TaskState::CancelRequested => "cancel_requested",
            TaskState::Cancelled => "cancelled",
            TaskState::Uncertain => "uncertain",
            TaskState::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether nothing moves the task any more: a late event is recorded and ignored.
    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Accepted
                | TaskState::Rejected
                | TaskState::Cancelled
                | TaskState::Uncertain
                | TaskState::Failed
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The assignee's task session took the task.
    Started,
    /// The assignee asks a question it needs answered.
    Asked {
        question: String,
    },
    /// The question is answered (by the owner or a person).
    Answered {
        answer: String,
    },
    /// The assignee's runtime asked a person for permission.
    PermissionAsked,
    /// That permission request was decided.
    PermissionDecided,
    /// The assignee hands in its result.
    Submitted {
        summary: String,
    },
    /// The owner begins its own check.
    ReviewBegun,
    /// The owner's verdict: passed goes to a person, failed back to the assignee.
    Reviewed {
        passed: bool,
        notes: String,
    },
    Accepted,
    /// `reopen`: back to `working` with the reason; else closed as `rejected`.
    Rejected {
        reason: String,
        reopen: bool,
    },
    CancelRequested,
    /// The runtime answered the cancel: confirmed (`cancelled`) or not (`uncertain`).
    CancelSettled {
        confirmed: bool,
    },
    Failed {
        why: String,
    },
}

impl Event {
    /// The event's name in the task's history.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Event::Started => "started",
            Event::Asked { .. } => "asked",
            Event::Answered { .. } => "answered",
            Event::PermissionAsked => "permission_asked",
            Event::PermissionDecided => "permission_decided",
            Event::Submitted { .. } => "submitted",
            Event::ReviewBegun => "review_begun",
            Event::Reviewed { .. } => "reviewed",
            Event::Accepted => "accepted",
            Event::Rejected { .. } => "rejected",
            Event::CancelRequested => "cancel_requested",
            Event::CancelSettled { .. } => "cancel_settled",
            Event::Failed { .. } => "failed",
        }
    }
}

/// Who causes an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// A session of an agent (through the Hub's tools: its identity comes from its token).
    Agent { agent_id: String },
    /// A person, by platform id (`slack:U…`, `telegram:<id>`): from a room, or a button.
    Person { id: String },
    /// The operator token (CLI, HTTP, JSON-RPC), which always may decide.
    Operator,
    /// deepcli itself: the turn engine, the approvals, the runtime's answers.
    Hub,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Agent { agent_id } => write!(f, "agent `{agent_id}`"),
            Actor::Person { id } => write!(f, "{id}"),
            Actor::Operator => f.write_str("the operator"),
            Actor::Hub => f.write_str("deepcli"),
        }
    }
}

/// Who a task's parties are, as the guards need them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parties<'a> {
    pub owner: &'a str,
    pub assignee: &'a str,
    /// The requester, when a person asked for the task.
    pub requester_person: Option<&'a str>,
    /// Whether an A2A peer asked for it (a2a.md, "Tasks"): its `submitted` is the peer's
    /// `completed`, which a person accepts or rejects as it is (no owner's check comes), and
    /// which A2A never reopens.
    pub requester_peer: bool,
    /// `permissions.approvers` of the owner agent.
    pub approvers: &'a [String],
}

/// What an event does to a task in state `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The task moves to this state.
    Move(TaskState),
    /// The task is final: the event is recorded as late and changes nothing.
    Late,
    /// Refused, with why (said to whoever tried).
    Refused(String),
}

/// What `event` by `actor` does to a task in state `from` with `parties`.
pub(crate) fn decide(from: TaskState, event: &Event, actor: &Actor, parties: &Parties) -> Decision {
    use TaskState as S;
    if from.is_final() {
        return Decision::Late;
    }
    if let Err(why) = may(event, actor, parties) {
        return Decision::Refused(why);
    }
    let to = match (from, event) {
        (S::Open, Event::Started) => S::Working,
        (S::Working, Event::Asked { .. }) => S::AwaitingInput,
        (S::AwaitingInput, Event::Answered { .. }) => S::Working,
        (S::Working, Event::PermissionAsked) => S::AwaitingApproval,
        (S::AwaitingApproval, Event::PermissionDecided) => S::Working,
        (S::Working, Event::Submitted { .. }) => S::Submitted,
        (S::Submitted, Event::ReviewBegun) => S::InReview,
        (S::InReview, Event::Reviewed { passed: true, .. }) => S::PendingAcceptance,
        (S::InReview, Event::Reviewed { passed: false, .. }) => S::Working,
        (S::PendingAcceptance, Event::Accepted) => S::Accepted,
        (S::PendingAcceptance, Event::Rejected { reopen: true, .. }) => S::Working,
        (S::PendingAcceptance, Event::Rejected { reopen: false, .. }) => S::Rejected,
        (S::Submitted, Event::Accepted) if parties.requester_peer => S::Accepted,
        (S::Submitted, Event::Rejected { reopen: false, .. }) if parties.requester_peer => {
            S::Rejected
        }
        (_, Event::Rejected { reopen: true, .. }) if parties.requester_peer => {
            return Decision::Refused(
                "an A2A peer's task is `completed` to the peer, and A2A never reopens one: reject it without reopening, and let the peer send a new message".into(),
            );
        }
        (S::CancelRequested, Event::CancelRequested) => {
            return Decision::Refused("the task's cancel is already asked for".into());
        }
        (_, Event::CancelRequested) => S::CancelRequested,
        (S::CancelRequested, Event::CancelSettled { confirmed: true }) => S::Cancelled,
        (S::CancelRequested, Event::CancelSettled { confirmed: false }) => S::Uncertain,
        (_, Event::Failed { .. }) => S::Failed,
        // A cancel asked for: what the assignee still sends is too late.
        (S::CancelRequested, _) => return Decision::Late,
        _ => {
            return Decision::Refused(format!(
                "a task that is `{from}` cannot be `{}`",
                event.kind()
            ));
        }
    };
    Decision::Move(to)
}

/// Whether `actor` may cause `event` (tasks.md, "Who may do what").
fn may(event: &Event, actor: &Actor, parties: &Parties) -> Result<(), String> {
    let agent = |id: &str| matches!(actor, Actor::Agent { agent_id } if agent_id == id);
    let person = match actor {
        Actor::Person { id } => Some(id.as_str()),
        _ => None,
    };
    let decider = matches!(actor, Actor::Operator)
        || person.is_some_and(|p| {
            parties.approvers.iter().any(|a| a == p) || parties.requester_person == Some(p)
        });
    let allowed = match event {
        Event::Started
        | Event::PermissionAsked
        | Event::PermissionDecided
        | Event::CancelSettled { .. } => matches!(actor, Actor::Hub),
        Event::Failed { .. } => matches!(actor, Actor::Hub | Actor::Operator),
        Event::Asked { .. } | Event::Submitted { .. } => agent(parties.assignee),
        Event::Answered { .. } => agent(parties.owner) || decider,
        Event::ReviewBegun | Event::Reviewed { .. } => agent(parties.owner),
        Event::Accepted | Event::Rejected { .. } => decider,
        Event::CancelRequested => agent(parties.owner) || decider,
    };
    if allowed {
        return Ok(());
    }
    Err(match event {
        Event::Asked { .. } | Event::Submitted { .. } => format!(
            "only the assignee, agent `{}`, may {} this task; {actor} is not it",
            parties.assignee,
            if matches!(event, Event::Asked { .. }) {
                "ask a question on"
            } else {
                "submit"
            }
        ),
        Event::ReviewBegun | Event::Reviewed { .. } => format!(
            "only the owner, agent `{}`, reviews this task; {actor} is not it",
            parties.owner
        ),
        Event::Accepted | Event::Rejected { .. } => format!(
            "only a person in agent `{}`'s permissions.approvers (or the person who asked for the task) decides it; {actor} is not one",
            parties.owner
        ),
        _ => format!("{actor} may not `{}` this task", event.kind()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parties(approvers: &[String]) -> Parties<'_> {
        Parties {
            owner: "alpha",
            assignee: "beta",
            requester_person: Some("slack:U0ASKER"),
            requester_peer: false,
            approvers,
        }
    }

    fn agent(id: &str) -> Actor {
        Actor::Agent {
            agent_id: id.into(),
        }
    }

    fn person(id: &str) -> Actor {
        Actor::Person { id: id.into() }
    }

    /// An A2A peer's task: a person decides it from `submitted` (the peer's `completed`),
    /// and no rejection reopens it; any other task still waits for the owner's check.
    #[test]
    fn a_peers_task_is_decided_from_submitted_and_never_reopened() {
        let approvers = ["slack:U0BOSS".to_string()];
        let peer = Parties {
            owner: "beta",
            requester_person: None,
            requester_peer: true,
            ..parties(&approvers)
        };
        let boss = person("slack:U0BOSS");
        assert_eq!(
            decide(TaskState::Submitted, &Event::Accepted, &boss, &peer),
            Decision::Move(TaskState::Accepted)
        );
        let close = Event::Rejected {
            reason: "wrong".into(),
            reopen: false,
        };
        assert_eq!(
            decide(TaskState::Submitted, &close, &Actor::Operator, &peer),
            Decision::Move(TaskState::Rejected)
        );
        let reopen = Event::Rejected {
            reason: "again".into(),
            reopen: true,
        };
        assert!(matches!(
            decide(TaskState::Submitted, &reopen, &boss, &peer),
            Decision::Refused(why) if why.contains("never reopens")
        ));
        // Not a person who may decide: refused as for any task.
        assert!(matches!(
            decide(
                TaskState::Submitted,
                &Event::Accepted,
                &person("slack:U0X"),
                &peer
            ),
            Decision::Refused(_)
        ));
        // Another task is not accepted before the owner's check.
        assert!(matches!(
            decide(
                TaskState::Submitted,
                &Event::Accepted,
                &Actor::Operator,
                &parties(&approvers)
            ),
            Decision::Refused(_)
        ));
    }

    /// The seed's scenario, state by state, each event by the one party that may cause it.
    #[test]
    fn the_scenario_walks_the_states() {
        use TaskState as S;
        let approvers = vec!["slack:U0BOSS".to_string()];
        let p = parties(&approvers);
        let steps = [
            (S::Open, Event::Started, Actor::Hub, S::Working),
            (
                S::Working,
                Event::Asked {
                    question: "which branch?".into(),
                },
                agent("beta"),
                S::AwaitingInput,
            ),
            (
                S::AwaitingInput,
                Event::Answered {
                    answer: "main".into(),
                },
                agent("alpha"),
                S::Working,
            ),
            (
                S::Working,
                Event::Submitted {
                    summary: "done".into(),
                },
                agent("beta"),
                S::Submitted,
            ),
            (
                S::Submitted,
                Event::ReviewBegun,
                agent("alpha"),
                S::InReview,
            ),
            (
                S::InReview,
                Event::Reviewed {
                    passed: true,
                    notes: "tests pass here too".into(),
                },
                agent("alpha"),
                S::PendingAcceptance,
            ),
            (
                S::PendingAcceptance,
                Event::Rejected {
                    reason: "name it better".into(),
                    reopen: true,
                },
                person("slack:U0BOSS"),
                S::Working,
            ),
            (
                S::PendingAcceptance,
                Event::Accepted,
                person("slack:U0ASKER"),
                S::Accepted,
            ),
        ];
        for (from, event, actor, to) in steps {
            assert_eq!(
                decide(from, &event, &actor, &p),
                Decision::Move(to),
                "{from} + {event:?} by {actor}"
            );
        }
    }

    #[test]
    fn each_guard_refuses_the_wrong_party() {
        use TaskState as S;
        let approvers = vec!["slack:U0BOSS".to_string()];
        let p = parties(&approvers);
        let refused = |from, event: Event, actor: Actor| {
            let Decision::Refused(why) = decide(from, &event, &actor, &p) else {
                panic!("{from} + {event:?} by {actor} was not refused");
            };
            why
        };
        let submit = Event::Submitted {
            summary: "done".into(),
        };
        assert!(refused(S::Working, submit.clone(), agent("alpha")).contains("only the assignee"));
        assert!(refused(S::Working, submit, person("slack:U0BOSS")).contains("only the assignee"));
        assert!(
            refused(S::Submitted, Event::ReviewBegun, agent("beta")).contains("only the owner")
        );
        // A bot, a stranger and an agent cannot accept; a display name is not an id.
        for actor in [
            agent("alpha"),
            person("slack:U0STRANGER"),
            person("Boss"),
            Actor::Hub,
        ] {
            assert!(
                refused(S::PendingAcceptance, Event::Accepted, actor)
                    .contains("permissions.approvers")
            );
        }
        assert_eq!(
            decide(S::PendingAcceptance, &Event::Accepted, &Actor::Operator, &p),
            Decision::Move(S::Accepted)
        );
        // The owner's "accepted" is a verdict only from in_review, never an acceptance.
        assert!(matches!(
            decide(
                S::Working,
                &Event::Reviewed {
                    passed: true,
                    notes: String::new()
                },
                &agent("alpha"),
                &p
            ),
            Decision::Refused(_)
        ));
    }

    #[test]
    fn a_cancel_settles_confirmed_or_uncertain_and_what_comes_late_is_ignored() {
        use TaskState as S;
        let p = parties(&[]);
        let cancel = decide(S::Submitted, &Event::CancelRequested, &agent("alpha"), &p);
        assert_eq!(cancel, Decision::Move(S::CancelRequested));
        assert_eq!(
            decide(
                S::CancelRequested,
                &Event::Submitted {
                    summary: "late".into()
                },
                &agent("beta"),
                &p
            ),
            Decision::Late
        );
        let settle = |confirmed| {
            decide(
                S::CancelRequested,
                &Event::CancelSettled { confirmed },
                &Actor::Hub,
                &p,
            )
        };
        assert_eq!(settle(true), Decision::Move(S::Cancelled));
        assert_eq!(settle(false), Decision::Move(S::Uncertain));
        for done in [
            S::Cancelled,
            S::Uncertain,
            S::Accepted,
            S::Rejected,
            S::Failed,
        ] {
            assert_eq!(
                decide(done, &Event::Started, &Actor::Hub, &p),
                Decision::Late,
                "{done}"
            );
        }
    }

    #[test]
    fn states_read_back_from_their_names() {
        for state in TaskState::ALL {
            assert_eq!(TaskState::parse(state.as_str()), Some(state));
        }
        assert_eq!(TaskState::parse("done"), None);
    }
}
