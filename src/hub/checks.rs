//! The Hub's checks on a message between sessions, pure (hub.md, "Policy"; approvals.md,
//! "Loop pauses"): whether the sender may see the target session (visibility, then
//! `agentToAgent`), whether a spawned session may speak into an external conversation, whether
//! a send passes a loop bound, and — again when the message's turn begins — whether it may
//! still be delivered. Each decides over a [`HubView`]: the policy in force and the facts the
//! Hub looked up for this message. The caller looks them up and counts a denial; nothing here
//! reads a store or a clock.

use super::policy::{Denial, HubPolicy, Reason, Visibility};

/// One message from a session into another, as the checks see it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hop<'a> {
    pub from_agent: &'a str,
    pub from_key: &'a str,
    /// The sender's spawn depth: 0 for a session the Hub did not spawn.
    pub depth: u32,
    pub to_agent: &'a str,
    pub to_key: &'a str,
}

/// What the checks decide by: the policy in force and what the Hub looked up for one hop.
#[derive(Debug, Clone, Copy)]
pub(super) struct HubView<'a> {
    pub policy: &'a HubPolicy,
    /// The target session was spawned, directly or further down, from the sender's (looked up
    /// only where [`needs_descent`] says so; `false` otherwise).
    pub descends: bool,
    /// The target session is an external conversation (it took a message from a channel);
    /// looked up only for a spawned sender.
    pub external: bool,
}

/// Whether deciding `hop` under `visibility` needs to know if the target descends from the
/// sender (the one lookup the checks cannot do without).
pub(super) fn needs_descent(visibility: Visibility, hop: &Hop<'_>) -> bool {
    visibility == Visibility::Tree && hop.to_key != hop.from_key
}

/// Whether the sender of `hop` sees its target under `visibility`.
pub(super) fn visible(visibility: Visibility, hop: &Hop<'_>, descends: bool) -> bool {
    match visibility {
        Visibility::All => true,
        Visibility::Agent => hop.to_agent == hop.from_agent,
        Visibility::SelfOnly => hop.to_key == hop.from_key,
        Visibility::Tree => hop.to_key == hop.from_key || descends,
    }
}

/// The visibility a hop is held to: reading (a list or a history) is the sender's own (a
/// sandboxed agent reads at most its tree); sending is the hub's, so agents still talk to
/// agents.
pub(super) fn visibility_for(policy: &HubPolicy, from_agent: &str, reading: bool) -> Visibility {
    if reading {
        policy.visibility_of(from_agent)
    } else {
        policy.visibility
    }
}

/// Whether the sender may see the target session: visibility, then `agentToAgent` for
/// another agent's session.
pub(super) fn may_see(view: &HubView<'_>, hop: &Hop<'_>, reading: bool) -> Result<(), Denial> {
    let p = view.policy;
    let visibility = visibility_for(p, hop.from_agent, reading);
    if !visible(visibility, hop, view.descends) {
        return Err(Denial::new(
            Reason::VisibilityRestricted,
            format!(
                "session `{}` is not visible to you (tools.sessions.visibility: {}{})",
                hop.to_key,
                visibility.as_str(),
                if visibility == p.visibility {
                    ""
                } else {
                    ", at most `tree` for a sandboxed agent"
                }
            ),
        ));
    }
    p.agent_to_agent(hop.from_agent, hop.to_agent)
}

/// A spawned session may not speak into an external conversation: it reports back through
/// its final answer.
pub(super) fn child_to_external(view: &HubView<'_>, hop: &Hop<'_>) -> Result<(), Denial> {
    if hop.depth == 0 || !view.external {
        return Ok(());
    }
    Err(Denial::new(
        Reason::VisibilityRestricted,
        format!(
            "`{}` is an external conversation: a spawned session reports back through its final answer and never speaks into chats",
            hop.to_key
        ),
    ))
}

/// The checks of a `sessions_send` at acceptance, in order: visibility and `agentToAgent`,
/// then a child speaking into an external conversation.
pub(super) fn accept_send(view: &HubView<'_>, hop: &Hop<'_>) -> Result<(), Denial> {
    may_see(view, hop, false)?;
    child_to_external(view, hop)
}

/// Why a message waiting in a session's FIFO is withdrawn when its turn comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Withdraw {
    /// Its run was cancelled while it waited.
    Cancelled,
    /// Its target agent is gone from the config in force.
    TargetDeleted(String),
    /// The policy in force refuses it now (counted as a denial).
    Denied(Denial),
}

impl Withdraw {
    /// The words the run records.
    pub(super) fn why(&self) -> String {
        match self {
            Withdraw::Cancelled => "the run was cancelled while it waited".to_string(),
            Withdraw::TargetDeleted(agent) => {
                format!("agent `{agent}` was deleted (target_deleted)")
            }
            Withdraw::Denied(denial) => format!("{} ({})", denial.error, denial.reason.as_str()),
        }
    }
}

/// A run's message as its turn begins: who it is from, where it goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct TurnStart<'a> {
    pub cancelled: bool,
    pub target_agent: &'a str,
    /// The requesting agent; `None` for the operator or an A2A peer.
    pub requester: Option<&'a str>,
    /// A `sessions_send` that addressed a session: (the sender's session, the target's).
    pub addressed: Option<(&'a str, &'a str)>,
}

/// The policy again when a run's turn begins: the config may have changed while its message
/// waited. `view.descends` is whether the addressed target descends from the sender.
pub(super) fn at_turn_start(view: &HubView<'_>, turn: &TurnStart<'_>) -> Result<(), Withdraw> {
    let p = view.policy;
    if turn.cancelled {
        return Err(Withdraw::Cancelled);
    }
    if !p.agents.contains_key(turn.target_agent) {
        return Err(Withdraw::TargetDeleted(turn.target_agent.to_string()));
    }
    let Some(requester) = turn.requester else {
        return Ok(());
    };
    p.agent_to_agent(requester, turn.target_agent)
        .map_err(Withdraw::Denied)?;
    if let Some((from_key, to_key)) = turn.addressed {
        // A send is held to the hub's visibility (a sandboxed caller's clamp is on what it
        // reads).
        let hop = Hop {
            from_agent: requester,
            from_key,
            depth: 0,
            to_agent: turn.target_agent,
            to_key,
        };
        if !visible(p.visibility, &hop, view.descends) {
            return Err(Withdraw::Denied(Denial::new(
                Reason::VisibilityRestricted,
                format!(
                    "session `{to_key}` is no longer visible to `{from_key}` (tools.sessions.visibility: {})",
                    p.visibility.as_str()
                ),
            )));
        }
    }
    Ok(())
}

/// Which bound a send passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trip {
    /// `pair` or `tree`.
    pub kind: &'static str,
    /// The pair's two session keys (sorted, space-joined), or the tree's root.
    pub scope: String,
    pub count: u64,
    pub bound: u32,
    /// The session whose external conversation hears of the pause: the tree's root.
    pub origin: String,
}

impl Trip {
    /// What the pause says, to the operator and the tree's conversation.
    pub(super) fn sentence(&self) -> String {
        match self.kind {
            "pair" => format!(
                "loop paused: sessions {} have sent each other {} messages within the window (budgets.loopTurns {})",
                self.scope.replace(' ', " and "),
                self.count,
                self.bound
            ),
            _ => format!(
                "loop paused: the sessions of the tree under {} have started {} runs (budgets.treeTurns {})",
                self.scope, self.count, self.bound
            ),
        }
    }
}

/// The scope of the pair of sessions `a` and `b`: their keys sorted, space-joined.
pub(super) fn pair_scope(a: &str, b: &str) -> String {
    if a <= b {
        format!("{a} {b}")
    } else {
        format!("{b} {a}")
    }
}

/// The loop bounds of the sender's agent (`budgets.loopTurns`, `budgets.treeTurns`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct LoopBounds {
    pub pair: Option<u32>,
    pub tree: Option<u32>,
}

/// What the Hub counted for a send: sends between the pair within the window, and runs the
/// tree started, each since the scope's last decision (`None`: a pause of the scope is still
/// open, so every send waits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LoopCounts {
    pub pair: Option<u64>,
    pub tree: Option<u64>,
    /// The root of the sender's spawn tree.
    pub root: String,
}

/// Whether a send from session `from` into `to` passes a loop bound: the pair's first, then
/// the tree's.
pub(super) fn loop_trip(
    bounds: LoopBounds,
    from: &str,
    to: &str,
    counts: &LoopCounts,
) -> Option<Trip> {
    if let Some(bound) = bounds.pair
        && counts.pair.is_none_or(|n| n >= u64::from(bound))
    {
        return Some(Trip {
            kind: "pair",
            scope: pair_scope(from, to),
            count: counts.pair.unwrap_or(u64::from(bound)),
            bound,
            origin: counts.root.clone(),
        });
    }
    if let Some(bound) = bounds.tree
        && counts.tree.is_none_or(|n| n >= u64::from(bound))
    {
        return Some(Trip {
            kind: "tree",
            scope: counts.root.clone(),
            count: counts.tree.unwrap_or(u64::from(bound)),
            bound,
            origin: counts.root.clone(),
        });
    }
    None
}

#[cfg(test)]
mod tests;
