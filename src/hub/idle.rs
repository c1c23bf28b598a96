//! Kept children closed when idle (hub.md, "Limits that bound growth"): a child whose run is
//! over but whose session stays open (`cleanup: keep`, `mode: session`) holds a runtime
//! session and a live token. Once it has been idle for its parent agent's
//! `subagents.keptIdleSeconds`, the Hub closes it: the runtime session ends, the token is
//! revoked, its spawn run gets a note; its transcript stays, so the parent still reads it.

use std::sync::Arc;
use std::time::Duration;

use crate::state::db::{Query, params};

use super::Hub;
use super::policy::HubPolicy;
use super::store::HubStore;
use crate::access::store::AccessStore;
use crate::state::StateError;

/// An open child whose spawn run is over, as the sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptChild {
    pub session_key: String,
    pub agent_id: String,
    pub parent_agent_id: String,
    pub run_id: String,
    /// When it last did anything: its spawn, its run's end, its last message or its runtime
    /// session's last use (RFC 3339).
    pub last_at: String,
    /// A run into it is not over yet.
    pub busy: bool,
}

/// The kept children idle for longer than their parent agent's `keptIdleSeconds` at `now`,
/// each with the limit that closed it. A busy child is never idle; a time that does not parse
/// counts as long ago.
pub(crate) fn idle_children<'a>(
    kept: &'a [KeptChild],
    policy: &HubPolicy,
    now: jiff::Timestamp,
) -> Vec<(&'a KeptChild, Duration)> {
    kept.iter()
        .filter(|c| !c.busy)
        .filter_map(|c| {
            let idle = policy.limits(&c.parent_agent_id).kept_idle?;
            let since = c.last_at.parse::<jiff::Timestamp>().ok();
            let quiet = since.is_none_or(|t| {
                now.duration_since(t)
                    .try_into()
                    .is_ok_and(|d: Duration| d >= idle)
            });
            quiet.then_some((c, idle))
        })
        .collect()
}

/// How often the sweep looks: a quarter of the shortest `keptIdleSeconds` in force, between a
/// quarter second and a minute.
pub(crate) fn sweep_every(policy: &HubPolicy) -> Duration {
    let shortest = policy
        .agents
        .values()
        .filter_map(|a| a.limits.kept_idle)
        .min()
        .unwrap_or(super::policy::DEFAULT_KEPT_IDLE);
    (shortest / 4).clamp(Duration::from_millis(250), Duration::from_secs(60))
}

impl HubStore {
    /// Every open child whose spawn run is over. Its last activity counts the Access layer's
    /// records of the session too (read through that layer's statements).
    pub(crate) fn kept_children(&self) -> Result<Vec<KeptChild>, StateError> {
        self.db.query(|c| {
            let larger = c.backend().greatest();
            let mut kept = c.query_map(
                &format!(
                    "SELECT s.session_key, s.agent_id, s.parent_agent_id, s.run_id,
                        {larger}(s.created_at, coalesce(r.finished_at, '')),
                        EXISTS (SELECT 1 FROM hub_runs b WHERE b.target_session_key = s.session_key
                            AND b.state NOT IN ('completed', 'failed', 'timed_out', 'cancelled', 'uncertain'))
                     FROM hub_sessions s JOIN hub_runs r ON r.run_id = s.run_id
                     WHERE s.closed_at IS NULL
                       AND r.state IN ('completed', 'failed', 'timed_out', 'cancelled', 'uncertain')"
                ),
                params![],
                |r| {
                    Ok(KeptChild {
                        session_key: r.get(0)?,
                        agent_id: r.get(1)?,
                        parent_agent_id: r.get(2)?,
                        run_id: r.get(3)?,
                        last_at: r.get(4)?,
                        busy: r.get(5)?,
                    })
                },
            )?;
            for child in &mut kept {
                let seen = AccessStore::session_last_activity(&*c, &child.session_key)?;
                if seen > child.last_at {
                    child.last_at = seen;
                }
            }
            Ok(kept)
        })
    }
}

impl Hub {
    /// Closes every kept child idle past its limit; how many.
    pub(crate) async fn close_idle_children(self: &Arc<Self>) -> usize {
        let Ok(kept) = self.db(|s| s.kept_children()).await else {
            return 0;
        };
        let policy = self.policy();
        let idle = idle_children(&kept, &policy, jiff::Timestamp::now());
        let n = idle.len();
        for (child, limit) in idle {
            let why = format!(
                "closed after {} s idle (subagents.keptIdleSeconds {})",
                limit.as_secs(),
                limit.as_secs()
            );
            let closed = self
                .close_session_because(&child.agent_id, &child.session_key, false, &why)
                .await;
            self.metrics
                .idle_closed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.note(
                &child.run_id,
                format!(
                    "kept child {why}: runtime session {}, {} token(s) revoked; its history stays readable",
                    closed.runtime_shown(),
                    closed.tokens_shown()
                ),
            )
            .await;
        }
        n
    }

    /// Closes idle kept children until `stop` says so, as often as [`sweep_every`] says.
    pub(crate) async fn sweep_idle_children(
        self: Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut last = tokio::time::Instant::now();
        loop {
            // Looked at again each second at most: an apply may shorten the limit.
            let every = sweep_every(&self.policy());
            let wait = every.min(Duration::from_secs(1));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            if last.elapsed() >= every {
                last = tokio::time::Instant::now();
                self.close_idle_children().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::policy::{HubAgent, Limits};

    fn policy(idle: Option<Duration>) -> HubPolicy {
        let mut p = HubPolicy::default();
        p.agents.insert(
            "a".into(),
            HubAgent {
                id: "a".into(),
                name: None,
                description: None,
                when_to_use: None,
                runtime: crate::config::model::RuntimeKind::Acp,
                allow_agents: None,
                limits: Limits {
                    kept_idle: idle,
                    ..Limits::default()
                },
                workspace: "/ws/a".into(),
                clamped: false,
                private_network: false,
                hub_socket: None,
                artifact_max_bytes: crate::tasks::artifacts::DEFAULT_MAX_BYTES,
                artifact_quota_bytes: crate::tasks::artifacts::DEFAULT_QUOTA_BYTES,
            },
        );
        p
    }

    fn kept(key: &str, last_at: &str, busy: bool) -> KeptChild {
        KeptChild {
            session_key: key.into(),
            agent_id: "a".into(),
            parent_agent_id: "a".into(),
            run_id: format!("run-{key}"),
            last_at: last_at.into(),
            busy,
        }
    }

    #[test]
    fn an_idle_kept_child_is_closed_and_its_token_revoked() {
        let now: jiff::Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let children = [
            kept("old", "2026-12-01T10:59:59Z", false),
            kept("exact", "2026-12-01T11:00:00Z", false),
            kept("recent", "2026-12-01T11:30:00Z", false),
            kept("busy", "2026-01-01T00:00:00Z", true),
            kept("garbled", "yesterday", false),
        ];
        let keys = |p: &HubPolicy| -> Vec<String> {
            idle_children(&children, p, now)
                .into_iter()
                .map(|(c, _)| c.session_key.clone())
                .collect()
        };
        // The default: an hour.
        assert_eq!(
            keys(&policy(Limits::default().kept_idle)),
            ["old", "exact", "garbled"]
        );
        assert_eq!(
            keys(&policy(Some(Duration::from_secs(60)))),
            ["old", "exact", "recent", "garbled"]
        );
        // keptIdleSeconds 0: never.
        assert!(keys(&policy(None)).is_empty());
        // The sweep looks often enough for the shortest limit, never busily.
        assert_eq!(
            sweep_every(&policy(Some(Duration::from_secs(1)))),
            Duration::from_millis(250)
        );
        assert_eq!(sweep_every(&policy(None)), Duration::from_secs(60));
    }
}
