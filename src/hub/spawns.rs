//! Spawned-run slots (hub.md, "Limits that bound growth"): how many spawned runs are not
//! final, hub-wide (`agents.defaults.subagents.maxConcurrent`) and by requester agent (an
//! agent's own `subagents.maxConcurrent`). A slot is taken under one lock when a spawn is
//! accepted, so a storm of spawns cannot all pass at once, and given back when its run ends.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::policy::{Denial, HubPolicy, Reason};
use crate::state::{ChildKind, Cleanup, SpawnMode};

/// What a spawn asks for, checked.
pub(super) struct Spawn {
    pub agent: String,
    pub kind: ChildKind,
    pub depth: u32,
    pub label: Option<String>,
    pub cwd: Option<String>,
    pub mode: SpawnMode,
    pub cleanup: Cleanup,
    pub timeout: Option<Duration>,
    pub task: String,
}

/// The spawned runs not final.
#[derive(Default)]
pub(super) struct Spawns {
    /// By requester agent; the hub-wide count is their sum, kept beside them.
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_agent: HashMap<String, usize>,
}

impl Spawns {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        match self.held.lock() {
            Ok(h) => h,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Takes a slot for a spawn by agent `agent_id` within `policy`'s hub-wide and the
    /// agent's `maxConcurrent`; a refusal says which limit held.
    pub(super) fn take(&self, policy: &HubPolicy, agent_id: &str) -> Result<(), Denial> {
        let mut held = self.held();
        if held.total >= policy.max_concurrent {
            return Err(Denial::new(
                Reason::BudgetExceeded,
                format!(
                    "the hub already runs {} spawned runs; subagents.maxConcurrent (agents.defaults) is {}: try again when one finished",
                    held.total, policy.max_concurrent
                ),
            ));
        }
        let mine = held.by_agent.get(agent_id).copied().unwrap_or(0);
        if let Some(cap) = policy.limits(agent_id).max_concurrent
            && mine >= cap
        {
            return Err(Denial::new(
                Reason::BudgetExceeded,
                format!(
                    "agent `{agent_id}` already runs {mine} spawned runs; its subagents.maxConcurrent is {cap}"
                ),
            ));
        }
        held.total += 1;
        *held.by_agent.entry(agent_id.to_string()).or_default() += 1;
        Ok(())
    }

    /// Gives agent `agent_id`'s slot back.
    pub(super) fn free(&self, agent_id: &str) {
        let mut held = self.held();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_agent.get_mut(agent_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_agent.remove(agent_id);
            }
        }
    }

    /// Spawned runs not final, hub-wide.
    pub(super) fn active(&self) -> usize {
        self.held().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::policy::{HubAgent, Limits};

    fn policy(hub_wide: usize, a_cap: Option<usize>) -> HubPolicy {
        let mut p = HubPolicy {
            max_concurrent: hub_wide,
            ..HubPolicy::default()
        };
        for (id, cap) in [("a", a_cap), ("b", None)] {
            p.agents.insert(
                id.into(),
                HubAgent {
                    id: id.into(),
                    name: None,
                    description: None,
                    when_to_use: None,
                    runtime: crate::config::model::RuntimeKind::Acp,
                    allow_agents: None,
                    limits: Limits {
                        max_concurrent: cap,
                        ..Limits::default()
                    },
                    workspace: format!("/ws/{id}").into(),
                    clamped: false,
                    private_network: false,
                    hub_socket: None,
                    artifact_max_bytes: crate::tasks::artifacts::DEFAULT_MAX_BYTES,
                    artifact_quota_bytes: crate::tasks::artifacts::DEFAULT_QUOTA_BYTES,
                },
            );
        }
        p
    }

    #[test]
    fn the_hub_wide_limit_holds_across_agents_until_a_slot_is_freed() {
        let p = policy(2, None);
        let spawns = Spawns::default();
        assert!(spawns.take(&p, "a").is_ok());
        assert!(spawns.take(&p, "b").is_ok());
        let denial = spawns.take(&p, "a").unwrap_err();
        assert_eq!(denial.reason, Reason::BudgetExceeded);
        assert!(
            denial
                .error
                .starts_with("the hub already runs 2 spawned runs; subagents.maxConcurrent (agents.defaults) is 2"),
            "{}",
            denial.error
        );
        assert_eq!(spawns.active(), 2);
        spawns.free("b");
        assert_eq!(spawns.active(), 1);
        assert!(spawns.take(&p, "a").is_ok());
    }

    #[test]
    fn an_agents_own_limit_holds_for_its_sessions_only() {
        let p = policy(10, Some(1));
        let spawns = Spawns::default();
        assert!(spawns.take(&p, "a").is_ok());
        let denial = spawns.take(&p, "a").unwrap_err();
        assert_eq!(
            denial.error,
            "agent `a` already runs 1 spawned runs; its subagents.maxConcurrent is 1"
        );
        assert!(spawns.take(&p, "b").is_ok());
        spawns.free("a");
        assert!(spawns.take(&p, "a").is_ok());
    }

    #[test]
    fn freeing_more_than_was_taken_never_goes_below_zero() {
        let p = policy(1, None);
        let spawns = Spawns::default();
        spawns.free("a");
        assert_eq!(spawns.active(), 0);
        assert!(spawns.take(&p, "a").is_ok());
        assert!(spawns.take(&p, "a").is_err());
    }
}
