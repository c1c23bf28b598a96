//! Loop pauses (approvals.md, "Loop pauses"): two sessions that keep waking each other across
//! runs, or a tree of sessions that keeps starting runs, are paused for a person. The send
//! that would pass the bound is recorded as a `paused` run and not delivered; the operator
//! (and the tree's external conversation, when it has one) is told; `deepcli runs resume` or
//! `runs stop` decides. Counting starts over at each decision.
//!
//! The bounds are the sender's agent's `budgets.loopTurns` / `loopWindowSeconds` /
//! `treeTurns`; the counts are the Hub's own run records (`hub_runs`), so they hold across
//! runs and controller restarts.

use crate::access::outbox::Cause;
use std::sync::Arc;

use crate::state::db::{DbResult, Optional, Query, params};

use super::checks::{self, LoopBounds, LoopCounts, Trip, pair_scope};
use super::store::{HubStore, RunRecord};
use super::{CallError, Hub, HubCaller, ToolResult};
use crate::state::{RunKind, RunState, StateError};

/// Where counting stands for a scope: a pause still open (every send waits), or the first
/// `hub_runs` rowid that counts (after the last decision).
enum Since {
    Open,
    After(i64),
}

impl HubStore {
    fn loop_since(c: &impl Query, scope: &str) -> DbResult<Since> {
        // The newest pause by the order they were filed in (PostgreSQL's table carries a
        // `rowid` of its own).
        let last: Option<(String, Option<i64>)> = c
            .query_row(
                "SELECT state, after_rowid FROM loop_pauses WHERE scope = ?1
                 ORDER BY rowid DESC LIMIT 1",
                params![scope],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        // An older pause of the scope may still be open after a newer one was decided.
        let open: bool = c.query_row(
            "SELECT count(*) > 0 FROM loop_pauses WHERE scope = ?1 AND state = 'paused'",
            params![scope],
            |r| r.get(0),
        )?;
        Ok(match last {
            _ if open => Since::Open,
            Some((_, Some(after))) => Since::After(after),
            _ => Since::After(0),
        })
    }

    /// Sends between sessions `a` and `b` (either way) created since `since` and after the
    /// pair's last pause decision; `None` while a pause of the pair is open.
    pub(super) fn pair_sends(
        &self,
        a: &str,
        b: &str,
        since: &str,
    ) -> Result<Option<u64>, StateError> {
        let scope = pair_scope(a, b);
        self.db.query(|c| {
            let Since::After(after) = Self::loop_since(&*c, &scope)? else {
                return Ok(None);
            };
            c.query_row(
                "SELECT count(*) FROM hub_runs WHERE kind = 'send' AND rowid > ?4 AND created_at >= ?3 AND (
                     (requester_session_key = ?1 AND target_session_key = ?2)
                     OR (requester_session_key = ?2 AND target_session_key = ?1))",
                params![a, b, since, after],
                |r| r.get::<i64>(0),
            )
            .map(|n| Some(n.max(0) as u64))
        })
    }

    /// The root of `key`'s spawn tree (the session the Hub did not spawn).
    pub(super) fn tree_root(&self, key: &str) -> Result<String, StateError> {
        let mut root = key.to_string();
        // Spawn trees are at most 10 deep; the bound keeps a corrupt cycle finite.
        for _ in 0..64 {
            match self.child(&root)? {
                Some(child) => root = child.parent_session_key,
                None => break,
            }
        }
        Ok(root)
    }

    /// Sends started by the sessions of the tree under `root` after its last pause decision;
    /// `None` while a pause of the tree is open.
    pub(super) fn tree_sends(&self, root: &str) -> Result<Option<u64>, StateError> {
        self.db.query(|c| {
            let Since::After(after) = Self::loop_since(&*c, root)? else {
                return Ok(None);
            };
            c.query_row(
                "WITH RECURSIVE tree(k) AS (
                     SELECT CAST(?1 AS TEXT) UNION SELECT h.session_key FROM hub_sessions h JOIN tree ON h.parent_session_key = tree.k)
                 SELECT count(*) FROM hub_runs
                 WHERE kind = 'send' AND rowid > ?2 AND requester_session_key IN (SELECT k FROM tree)",
                params![root, after],
                |r| r.get::<i64>(0),
            )
            .map(|n| Some(n.max(0) as u64))
        })
    }

    /// Records a paused run and its pause, in one transaction.
    pub(super) fn insert_paused(&self, run: &RunRecord, trip: &Trip) -> Result<(), StateError> {
        self.insert_run(run)?;
        self.db.write(|c| {
            c.execute(
                "INSERT INTO loop_pauses (run_id, kind, scope, count, bound, state, created_at, note)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'paused', ?6, ?7)",
                params![
                    run.run_id,
                    trip.kind,
                    trip.scope,
                    trip.count as i64,
                    trip.bound,
                    run.created_at,
                    trip.sentence()
                ],
            )
            .map(drop)
        })?;
        self.note(&run.run_id, &trip.sentence())
    }

    /// Records the operator's decision on the pause of `run_id` (`resumed` | `stopped`);
    /// false when it has no open pause.
    pub(super) fn decide_pause(&self, run_id: &str, state: &str) -> Result<bool, StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE loop_pauses SET state = ?2, decided_at = ?3,
                     after_rowid = (SELECT coalesce(max(rowid), 0) FROM hub_runs)
                 WHERE run_id = ?1 AND state = 'paused'",
                params![run_id, state, crate::clock::now()],
            )
            .map(|n| n == 1)
        })
    }

    /// Open pauses, oldest first: `(run id, sentence)`.
    pub(crate) fn open_pauses(&self) -> Result<Vec<(String, String)>, StateError> {
        self.db.query(|c| {
            c.query_map(
                "SELECT run_id, coalesce(note, '') FROM loop_pauses WHERE state = 'paused' ORDER BY created_at",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
    }
}

impl Hub {
    /// Whether a send from `caller` into `key` would pass a loop bound of the caller's agent.
    pub(super) async fn loop_trip(
        &self,
        caller: &HubCaller,
        key: &str,
    ) -> Result<Option<Trip>, CallError> {
        let limits = self.access.limits(&caller.agent_id);
        if limits.loop_turns.is_none() && limits.tree_turns.is_none() {
            return Ok(None);
        }
        let since = jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_secs(
                limits.loop_window.as_secs().min(86_400 * 365) as i64,
            ))
            .ok()
            .and_then(|t| t.round(jiff::Unit::Second).ok())
            .map(|t| t.to_string())
            .unwrap_or_default();
        let (from, to) = (caller.session_key.clone(), key.to_string());
        let (pair, root, tree) = self
            .db(move |s| {
                let root = s.tree_root(&from)?;
                Ok((
                    s.pair_sends(&from, &to, &since)?,
                    root.clone(),
                    s.tree_sends(&root)?,
                ))
            })
            .await?;
        // A scope with a pause still open takes nothing more until the operator decides.
        let bounds = LoopBounds {
            pair: limits.loop_turns,
            tree: limits.tree_turns,
        };
        let counts = LoopCounts { pair, tree, root };
        Ok(checks::loop_trip(bounds, &caller.session_key, key, &counts))
    }

    /// Records the send as a `paused` run, tells the operator's list and the tree's external
    /// conversation, and answers the caller with `status: paused`.
    pub(super) async fn pause_send(
        self: &Arc<Self>,
        caller: &HubCaller,
        (agent, key): (&str, &str),
        message: String,
        trip: Trip,
    ) -> Result<ToolResult, CallError> {
        let run = RunRecord {
            state: RunState::Paused,
            ..RunRecord::new(
                RunKind::Send,
                super::tools::SESSIONS_SEND,
                (
                    Some(caller.agent_id.clone()),
                    Some(caller.session_key.clone()),
                ),
                agent,
                key,
                message,
            )
        };
        let sentence = trip.sentence();
        {
            let (run, trip) = (run.clone(), trip.clone());
            self.db(move |s| s.insert_paused(&run, &trip)).await?;
        }
        tracing::warn!(run = %run.run_id, "{sentence}");
        let text = format!(
            "{sentence}. Nothing more is delivered between them until an operator decides: `deepcli runs resume {id}` or `deepcli runs stop {id}`.",
            id = run.run_id
        );
        let posted = self
            .access
            .post_to_session_route(&trip.origin, text, Cause::LoopPause, &run.run_id)
            .await;
        self.note(&run.run_id, format!("the origin conversation: {posted}"))
            .await;
        Ok(ToolResult::Paused {
            error: format!(
                "{sentence}: the message waits for an operator (deepcli runs resume|stop {})",
                run.run_id
            ),
            run_id: run.run_id,
            session_key: key.to_string(),
        })
    }

    /// The operator resumes paused run `run_id`: it is accepted and delivered as it would have
    /// been, and the loop's counting starts over.
    pub(crate) async fn resume_run(
        self: &Arc<Self>,
        run_id: &str,
    ) -> Result<Option<RunRecord>, CallError> {
        let id = run_id.to_string();
        let Some(run) = self.db(move |s| s.run(&id)).await? else {
            return Ok(None);
        };
        if run.state != RunState::Paused {
            return Err(CallError::BadArguments(format!(
                "run `{run_id}` is {}, not paused: only a paused run can be resumed",
                run.state.as_str()
            )));
        }
        let id = run_id.to_string();
        self.db(move |s| {
            s.decide_pause(&id, "resumed")?;
            s.transition(
                &id,
                RunState::Accepted,
                &super::store::RunOutcome {
                    note: "resumed by the operator: the loop's count starts over".into(),
                    ..Default::default()
                },
            )
        })
        .await?;
        let from = match (&run.requester_agent_id, &run.requester_session_key) {
            (Some(agent), Some(key)) => {
                let k = key.clone();
                let depth = self.db(move |s| s.child(&k)).await?.map_or(0, |c| c.depth);
                Some(HubCaller {
                    agent_id: agent.clone(),
                    session_key: key.clone(),
                    depth,
                })
            }
            _ => None,
        };
        let resumed = RunRecord {
            state: RunState::Accepted,
            ..run
        };
        self.accept_send(resumed, from, false).await?;
        let id = run_id.to_string();
        self.db(move |s| s.run(&id)).await
    }

    /// The operator stops paused run `run_id`: it is cancelled, never delivered.
    pub(crate) async fn stop_run(&self, run_id: &str) -> Result<Option<RunRecord>, CallError> {
        let id = run_id.to_string();
        let Some(run) = self.db(move |s| s.run(&id)).await? else {
            return Ok(None);
        };
        if run.state != RunState::Paused {
            return Err(CallError::BadArguments(format!(
                "run `{run_id}` is {}, not paused: only a paused run can be stopped (a running one is cancelled: deepcli runs cancel)",
                run.state.as_str()
            )));
        }
        let id = run_id.to_string();
        self.db(move |s| {
            s.decide_pause(&id, "stopped")?;
            s.transition(
                &id,
                RunState::Cancelled,
                &super::store::RunOutcome {
                    note: "stopped by the operator (loop pause): never delivered".into(),
                    ..Default::default()
                },
            )?;
            s.run(&id)
        })
        .await
    }
}
