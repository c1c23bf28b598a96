//! What each tool does (hub.md, "Tools"): decode the arguments, resolve the target, check
//! policy ([`super::checks`]), and answer with a typed [`ToolResult`] that the edge turns into
//! OpenClaw's result shapes. A refusal is a result (`ToolResult::Forbidden`), counted by reason
//! where it is made ([`Hub::forbid`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde_json::{Value, json};
use tracing::Instrument;

use super::checks::{self, Hop, HubView};
use super::page::{self, Page};
use super::policy::{Denial, HeldChildren, Reason};
use super::results::{SendOutcome, ToolResult, redact, shorten};
use super::spawns::Spawn;
use super::store::{ChildSession, KnownSession, agent_of};
use super::tools::{self, *};
use super::{CallError, Hub, HubCaller};
use crate::config::model::RuntimeKind;
use crate::state::{ChildKind, Cleanup, Provenance, RunState, SpawnMode};

/// A session's kind, from its key (`sessions_list`'s `kind`).
pub(super) fn kind_of(session_key: &str) -> &'static str {
    let rest: Vec<&str> = session_key.split(':').collect();
    match rest.as_slice() {
        ["agent", _, "main"] => "main",
        ["agent", _, "subagent", ..] => "subagent",
        ["agent", _, "acp", ..] => "acp",
        ["agent", _, "a2a", ..] => "a2a",
        ["agent", _, "task", ..] => "task",
        parts if parts.iter().any(|p| matches!(*p, "group" | "channel")) => "group",
        _ => "other",
    }
}

/// A message from `caller` into session `key` of agent `agent`, as the checks see it.
fn hop<'a>(caller: &'a HubCaller, agent: &'a str, key: &'a str) -> Hop<'a> {
    Hop {
        from_agent: &caller.agent_id,
        from_key: &caller.session_key,
        depth: caller.depth,
        to_agent: agent,
        to_key: key,
    }
}

fn error(message: impl Into<String>) -> ToolResult {
    ToolResult::Error(message.into())
}

/// A list's document, with `nextCursor` when there is a next page ([`page`]).
fn listing(mut doc: Value, next: Option<String>) -> ToolResult {
    if let Some(next) = next {
        doc["nextCursor"] = next.into();
    }
    ToolResult::Document(doc)
}

impl Hub {
    /// One call of tool `tool` from `caller`. Its arguments (`args`) are decoded only once
    /// the caller is known to have the tool: a refusal is the answer whatever they say.
    pub(crate) async fn call(
        self: &Arc<Self>,
        caller: &HubCaller,
        tool: &str,
        args: impl FnOnce() -> Result<ToolCall, CallError>,
    ) -> Result<ToolResult, CallError> {
        // In the trace of the turn the agent calls from, when one is traced.
        let turn = self.access.sessions().turn_span(&caller.session_key);
        let span = crate::traces::hub_tool(tool, turn.as_ref());
        self.answer(caller, tool, args).instrument(span).await
    }

    async fn answer(
        self: &Arc<Self>,
        caller: &HubCaller,
        tool: &str,
        args: impl FnOnce() -> Result<ToolCall, CallError>,
    ) -> Result<ToolResult, CallError> {
        self.metrics.calls.fetch_add(1, Relaxed);
        // Refused before its arguments are read: the caller does not have the tool.
        if tools::ALL.contains(&tool)
            && let Some(denial) = self
                .policy()
                .tool_denied(&caller.agent_id, caller.depth, tool)
        {
            return Ok(self.forbid(denial));
        }
        let result = match args()? {
            ToolCall::AgentsList(args) => {
                match Page::new(args.limit, args.cursor.as_deref(), page::DEFAULT_LIMIT) {
                    Ok(page) => self.agents_list(caller, page),
                    Err(bad) => error(bad.to_string()),
                }
            }
            ToolCall::SessionsList(args) => self.sessions_list(caller, args).await?,
            ToolCall::SessionsHistory(args) => self.sessions_history(caller, args).await?,
            ToolCall::SessionsSend(args) => self.sessions_send(caller, args).await?,
            ToolCall::SessionsSpawn(args) => self.sessions_spawn(caller, args).await?,
            ToolCall::Subagents(args) => self.subagents(caller, args).await?,
            ToolCall::SessionStatus => self.session_status(caller).await?,
            ToolCall::ManagementRequest(args) => self.management_request(caller, args).await?,
            ToolCall::TasksCreate(args) => self.tasks_create(caller, args).await?,
            ToolCall::TasksGet(args) => self.tasks_get(caller, args).await?,
            ToolCall::TasksList(args) => self.tasks_list(caller, args).await?,
            ToolCall::TasksUpdate(args) => self.tasks_update(caller, args).await?,
            ToolCall::TasksReview(args) => self.tasks_review(caller, args).await?,
            ToolCall::ArtifactsPut(args) => self.artifacts_put(caller, args).await?,
            ToolCall::ArtifactsGet(args) => self.artifacts_get(caller, args).await?,
            ToolCall::PlanUpdate(args) => self.plan_update(caller, args).await?,
        };
        Ok(result)
    }

    fn agents_list(&self, caller: &HubCaller, page: Page) -> ToolResult {
        let p = self.policy();
        let leaf = caller.depth >= p.limits(&caller.agent_id).max_spawn_depth;
        let agents: Vec<Value> = p
            .agents
            .values()
            .filter_map(|a| {
                let acp = a.runtime.takes_prompts();
                let can_send = acp && p.agent_to_agent(&caller.agent_id, &a.id).is_ok();
                let can_spawn = acp && !leaf && p.may_spawn_on(&caller.agent_id, &a.id).is_ok();
                let me = a.id == caller.agent_id;
                (me || can_send || can_spawn).then(|| {
                    json!({
                        "id": a.id,
                        "name": a.name,
                        "description": a.description,
                        "whenToUse": a.when_to_use,
                        "runtimeKind": a.runtime.as_str(),
                        "canSend": can_send,
                        "canSpawn": can_spawn,
                        "status": self.access.runtime_phase(&a.id),
                        "self": me,
                    })
                })
            })
            .collect();
        let allow_any =
            p.a2a_enabled && (p.a2a_allow.is_empty() || p.a2a_allow.iter().any(|a| a == "*"));
        let (agents, next) = page.of(agents);
        listing(
            json!({"requester": caller.agent_id, "allowAny": allow_any, "agents": agents}),
            next,
        )
    }

    /// Whether `caller` may see session `key` (of agent `agent`): [`checks::may_see`] over
    /// what the store says of the two sessions. `reading` (a list or a history, not a send): a
    /// sandboxed caller reads at most its own tree.
    async fn may_see(
        &self,
        caller: &HubCaller,
        key: &str,
        agent: &str,
        reading: bool,
    ) -> Result<(), Denial> {
        let p = self.policy();
        let hop = hop(caller, agent, key);
        let view = HubView {
            policy: &p,
            descends: self.descends(&p, &hop, reading).await,
            external: false,
        };
        checks::may_see(&view, &hop, reading)
    }

    /// Whether `hop`'s target descends from its sender, looked up only where the visibility
    /// `reading` holds it to needs it.
    async fn descends(&self, p: &super::HubPolicy, hop: &Hop<'_>, reading: bool) -> bool {
        let visibility = checks::visibility_for(p, hop.from_agent, reading);
        checks::needs_descent(visibility, hop) && self.descends_from(hop.to_key, hop.from_key).await
    }

    /// Whether session `key` was spawned, directly or further down, from `ancestor`.
    pub(super) async fn descends_from(&self, key: &str, ancestor: &str) -> bool {
        let (key, ancestor) = (key.to_string(), ancestor.to_string());
        self.db(move |s| s.descends_from(&key, &ancestor))
            .await
            .unwrap_or(false)
    }

    async fn sessions_list(
        &self,
        caller: &HubCaller,
        args: ListArgs,
    ) -> Result<ToolResult, CallError> {
        let page = match Page::new(args.limit, args.cursor.as_deref(), page::DEFAULT_LIMIT) {
            Ok(page) => page,
            Err(bad) => return Ok(error(bad.to_string())),
        };
        let wanted = page.offset.saturating_add(page.limit);
        // At most ten years back: any larger window is all of it.
        let since = args.active_minutes.and_then(|m| {
            let seconds = m.min(10 * 366 * 24 * 60).saturating_mul(60);
            jiff::Timestamp::now()
                .checked_sub(jiff::SignedDuration::from_secs(seconds as i64))
                .ok()
                .map(|t| t.to_string())
        });
        let agent = args.agent_id.clone();
        let mut out = Vec::new();
        let mut more = false;
        let mut after = None;
        'walk: loop {
            let (chunk, next) = {
                let (agent, after) = (agent.clone(), after.take());
                self.db(move |s| {
                    s.sessions_by_activity(agent.as_deref(), None, after.as_ref(), page::CHUNK)
                })
                .await?
            };
            for s in chunk {
                if out.len() >= wanted {
                    more = true;
                    break 'walk;
                }
                // Newest first: the rest are older still.
                if since.as_ref().is_some_and(|t| s.last_at < *t) {
                    break 'walk;
                }
                if let Some(entry) = self.listed(caller, &args, s).await? {
                    out.push(entry);
                }
            }
            match next {
                Some(mark) => after = Some(mark),
                None => break,
            }
        }
        // The entries before the page were checked (visibility is per entry), not shown.
        let out: Vec<Value> = out.into_iter().skip(page.offset).collect();
        let next = more.then(|| page.after(out.len()));
        Ok(listing(json!({"count": out.len(), "sessions": out}), next))
    }

    /// Session `s` as `sessions_list` shows it to `caller`, or `None` when `args` leave it out
    /// or the caller may not see it.
    async fn listed(
        &self,
        caller: &HubCaller,
        args: &ListArgs,
        s: KnownSession,
    ) -> Result<Option<Value>, CallError> {
        let kind = kind_of(&s.session_key);
        if args
            .kinds
            .as_ref()
            .is_some_and(|k| !k.iter().any(|k| k == kind))
            || self
                .may_see(caller, &s.session_key, &s.agent_id, true)
                .await
                .is_err()
        {
            return Ok(None);
        }
        let key = s.session_key.clone();
        let include_last = args.include_last_message;
        let (child, last) = self
            .db(move |st| {
                let last = if include_last {
                    st.last_message(&key)?
                } else {
                    None
                };
                Ok((st.child(&key)?, last))
            })
            .await?;
        let mut entry = json!({
            "sessionKey": s.session_key,
            "agentId": s.agent_id,
            "kind": kind,
            "label": child.as_ref().and_then(|c| c.label.clone()),
            "lastActivity": s.last_at,
            "self": s.session_key == caller.session_key,
        });
        if let Some(c) = &child {
            entry["parentSessionKey"] = c.parent_session_key.clone().into();
        }
        if let Some((provenance, text)) = &last {
            entry["lastMessage"] = json!({"provenance": provenance, "text": shorten(&redact(text, self.operator_token.as_deref()), 280)});
        }
        Ok(Some(entry))
    }

    /// The agent of a session key, checked against the config: `Err` is the result to give.
    async fn target_agent(&self, key: &str) -> Result<String, ToolResult> {
        let Some(agent) = agent_of(key) else {
            return Err(error(super::store::not_a_session_key(key)));
        };
        if self.policy().agents.contains_key(agent) {
            return Ok(agent.to_string());
        }
        let a = agent.to_string();
        let trashed = self
            .db(move |s| s.agent_in_trash(&a))
            .await
            .unwrap_or(false);
        if trashed {
            Err(self.forbid(Denial::new(
                Reason::TargetDeleted,
                format!("agent `{agent}` was deleted: its sessions take no messages"),
            )))
        } else {
            Err(error(format!(
                "there is no agent `{agent}` (agents_list names the agents you can reach)"
            )))
        }
    }

    async fn sessions_history(
        &self,
        caller: &HubCaller,
        args: HistoryArgs,
    ) -> Result<ToolResult, CallError> {
        let key = args.session_key.trim().to_string();
        let agent = match agent_of(&key) {
            Some(agent) => agent.to_string(),
            None => return Ok(error(super::store::not_a_session_key(&key))),
        };
        if let Err(denial) = self.may_see(caller, &key, &agent, true).await {
            return Ok(self.forbid(denial));
        }
        let page = match (&args.cursor, args.offset) {
            (None, Some(offset)) => Page {
                limit: args.limit.unwrap_or(20).clamp(1, page::MAX_LIMIT),
                offset,
            },
            (cursor, _) => match Page::new(args.limit, cursor.as_deref(), 20) {
                Ok(page) => page,
                Err(bad) => return Ok(error(bad.to_string())),
            },
        };
        let (limit, offset) = (page.limit, page.offset);
        let rows = {
            let key = key.clone();
            // Gated messages are not the agent's to read: it was never given them.
            self.db(move |s| s.history(&key, limit, offset, false, false))
                .await?
        };
        let mut messages = Vec::new();
        let mut bytes = 0;
        let mut truncated = false;
        // Rows looked at, newest first: the next page starts after them.
        let mut consumed = 0;
        // Newest first until the cap, then back in order.
        for row in rows.iter().rev() {
            if row.provenance == Provenance::Acp && !args.include_tools {
                consumed += 1;
                continue;
            }
            let text = redact(&row.text, self.operator_token.as_deref());
            bytes += text.len() + 64;
            if bytes > HISTORY_CAP_BYTES {
                truncated = true;
                // One message over the cap on its own is left out, not paged to forever.
                if messages.is_empty() {
                    consumed += 1;
                }
                break;
            }
            consumed += 1;
            messages.push(json!({
                "id": row.id,
                "provenance": row.provenance,
                "at": row.at,
                "text": text,
            }));
        }
        messages.reverse();
        // A full page may have older rows before it; a cut one does.
        let next = (truncated || rows.len() == limit).then(|| page.after(consumed));
        Ok(listing(
            json!({
                "sessionKey": key,
                "messages": messages,
                "truncated": truncated,
                "capBytes": HISTORY_CAP_BYTES,
            }),
            next,
        ))
    }

    /// The session a send goes to: by key, label or agent id (its main session).
    async fn send_target(
        &self,
        caller: &HubCaller,
        args: &SendArgs,
    ) -> Result<(String, String), ToolResult> {
        let named = [&args.session_key, &args.label, &args.agent_id]
            .iter()
            .filter(|a| a.is_some())
            .count();
        if named != 1 {
            return Err(error(
                "name exactly one target: sessionKey, label (of a session you spawned) or agentId (its main session)",
            ));
        }
        let key = if let Some(key) = &args.session_key {
            let key = key.trim().to_string();
            let agent = self.target_agent(&key).await?;
            let main = self.policy().main_keys.get(&agent).cloned();
            let exists = {
                let k = key.clone();
                self.db(move |s| s.session_exists(&k))
                    .await
                    .unwrap_or(false)
            };
            if !exists && main.as_deref() != Some(key.as_str()) {
                return Err(error(format!(
                    "there is no session `{key}` (sessions_list names the sessions you can see)"
                )));
            }
            key
        } else if let Some(label) = &args.label {
            let (label, parent) = (label.clone(), caller.session_key.clone());
            let found: Vec<ChildSession> = self
                .db(move |s| s.child_by_label(None, &label))
                .await
                .unwrap_or_default();
            // Own children first, then any visible one.
            let own = found.iter().find(|c| c.parent_session_key == parent);
            match own.or(found.first()) {
                Some(child) => child.session_key.clone(),
                None => {
                    return Err(error(format!(
                        "no open session is labelled `{}`",
                        args.label.as_deref().unwrap_or("")
                    )));
                }
            }
        } else {
            let agent = args.agent_id.as_deref().unwrap_or("").trim();
            match self.policy().main_keys.get(agent) {
                Some(main) => main.clone(),
                None => {
                    self.target_agent(&format!("agent:{agent}:main")).await?;
                    return Err(error(format!("there is no agent `{agent}`")));
                }
            }
        };
        let agent = self.target_agent(&key).await?;
        Ok((agent, key))
    }

    async fn sessions_send(
        self: &Arc<Self>,
        caller: &HubCaller,
        args: SendArgs,
    ) -> Result<ToolResult, CallError> {
        let begun = std::time::Instant::now();
        if args.message.len() > MAX_MESSAGE_BYTES {
            return Ok(error(format!(
                "the message is {} bytes; the limit is {MAX_MESSAGE_BYTES} bytes (64 KiB): send less, or put it in a file and send its path",
                args.message.len()
            )));
        }
        let (agent, key) = match self.send_target(caller, &args).await {
            Ok(target) => target,
            Err(result) => return Ok(result),
        };
        if key == caller.session_key {
            return Ok(error(
                "that is your own session: a message to yourself would wait behind your own turn",
            ));
        }
        if let Err(denial) = self.accept_check(caller, &agent, &key).await {
            return Ok(self.forbid(denial));
        }
        if !self
            .policy()
            .agents
            .get(&agent)
            .is_some_and(|a| a.runtime.takes_prompts())
        {
            return Ok(error(format!(
                "agent `{agent}` has no ACP or A2A runtime: it takes no messages"
            )));
        }
        if let Err(refusal) = self.access.budget_allows_turn(&agent) {
            return Ok(self.over_budget(&refusal, caller).await);
        }
        if let Some(trip) = self.loop_trip(caller, &key).await? {
            return self
                .pause_send(caller, (&agent, &key), args.message, trip)
                .await;
        }
        let wait = args.timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
        let run = self
            .start_send(
                Some(caller.clone()),
                &agent,
                &key,
                args.message,
                tools::SESSIONS_SEND,
            )
            .await?;
        if wait == 0 {
            return Ok(ToolResult::Accepted {
                run_id: run,
                session_key: key,
            });
        }
        let live = self.live_run(&run);
        let record = self
            .wait_run(&run, Duration::from_secs(wait.min(MAX_WAIT_SECONDS)))
            .await?;
        // The Hub's own share of the call: all of it but the target runtime's turn.
        if record.state == RunState::Completed
            && let Some(live) = live
        {
            let runtime = live.runtime_us.load(Relaxed);
            let total = begun.elapsed().as_micros() as u64;
            self.metrics
                .send_overhead
                .add(total.saturating_sub(runtime));
        }
        Ok(ToolResult::Sent(SendOutcome::of(&record, &key)))
    }

    /// The checks of a send from `caller` into session `key` of `agent` at acceptance
    /// ([`checks::accept_send`]): visibility and agentToAgent, then a child into an external
    /// conversation (hub.md: children never get `sessions_send` to their parent's external
    /// conversation).
    async fn accept_check(&self, caller: &HubCaller, agent: &str, key: &str) -> Result<(), Denial> {
        let p = self.policy();
        let hop = hop(caller, agent, key);
        let external = caller.depth > 0
            && self
                .access
                .store()
                .session_route(key)
                .ok()
                .flatten()
                .is_some();
        let view = HubView {
            policy: &p,
            descends: self.descends(&p, &hop, false).await,
            external,
        };
        checks::accept_send(&view, &hop)
    }

    async fn sessions_spawn(
        self: &Arc<Self>,
        caller: &HubCaller,
        args: SpawnArgs,
    ) -> Result<ToolResult, CallError> {
        if args.task.len() > MAX_MESSAGE_BYTES {
            return Ok(error(format!(
                "the task is {} bytes; the limit is {MAX_MESSAGE_BYTES} bytes (64 KiB)",
                args.task.len()
            )));
        }
        if args.task.trim().is_empty() {
            return Ok(error("`task` is empty: say what the child should do"));
        }
        let p = self.policy();
        let agent = args
            .agent_id
            .clone()
            .map_or_else(|| caller.agent_id.clone(), |a| a.trim().to_string());
        let limits = p.limits(&caller.agent_id);
        let depth = caller.depth + 1;
        if depth > limits.max_spawn_depth {
            return Ok(self.forbid(Denial::new(
                Reason::DepthExceeded,
                format!(
                    "a child here would be at depth {depth}; subagents.maxSpawnDepth of `{}` is {}",
                    caller.agent_id, limits.max_spawn_depth
                ),
            )));
        }
        if !p.agents.contains_key(&agent) {
            return Ok(
                match self.target_agent(&format!("agent:{agent}:main")).await {
                    Err(result) => result,
                    Ok(_) => error(format!("there is no agent `{agent}`")),
                },
            );
        }
        if let Err(denial) = p.may_spawn_on(&caller.agent_id, &agent) {
            return Ok(self.forbid(denial));
        }
        let runtime = p.agents.get(&agent).map(|a| a.runtime);
        // A subagent runs on any runtime that takes prompts (a remote A2A agent too); an
        // `acp` child needs an ACP runtime.
        let spawnable = match args.runtime {
            Some(SpawnRuntime::Acp) => runtime == Some(RuntimeKind::Acp),
            _ => runtime.is_some_and(RuntimeKind::takes_prompts),
        };
        if !spawnable {
            return Ok(error(format!(
                "agent `{agent}` has no runtime this spawn can run on (ACP, or A2A for `runtime: subagent`)"
            )));
        }
        let workspace = p.agents.get(&agent).map(|a| a.workspace.clone());
        let cwd = match (&args.cwd, workspace) {
            (Some(cwd), Some(workspace)) => match inside(cwd, &workspace) {
                Ok(()) => Some(cwd.clone()),
                Err(why) => return Ok(error(why)),
            },
            (cwd, _) => cwd.clone(),
        };
        if let Some(label) = &args.label
            && (label.trim().is_empty() || label.len() > 64)
        {
            return Ok(error("`label` must be 1 to 64 characters"));
        }
        let held = self.held_children(&caller.session_key).await?;
        if let Err(denial) = limits.may_add_child(&caller.agent_id, held) {
            return Ok(self.forbid(denial));
        }
        // The child's first turn must fit its agent's budgets, and the spawn the caller's.
        if let Err(refusal) = self.access.budget_allows_turn(&agent) {
            return Ok(self.over_budget(&refusal, caller).await);
        }
        if let Err(refusal) = self
            .access
            .budget_spawn(&caller.agent_id, &caller.session_key)
            .await
        {
            return Ok(self.over_budget(&refusal, caller).await);
        }
        // Taken now, under one lock, so that a storm of spawns cannot all pass at once.
        if let Err(denial) = self.spawns.take(&p, &caller.agent_id) {
            return Ok(self.forbid(denial));
        }
        let kind = match args.runtime.unwrap_or(SpawnRuntime::Subagent) {
            SpawnRuntime::Subagent => ChildKind::Subagent,
            SpawnRuntime::Acp => ChildKind::Acp,
        };
        let mode = args.mode.unwrap_or(SpawnMode::Run);
        let spawn = Spawn {
            agent,
            kind,
            depth,
            label: args.label.map(|l| l.trim().to_string()),
            cwd,
            mode,
            cleanup: args.cleanup.unwrap_or(Cleanup::Keep),
            timeout: args
                .run_timeout_seconds
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s.min(86_400)))
                .or(limits.run_timeout),
            task: args.task,
        };
        match self.start_spawn(caller, spawn).await {
            Ok((child, run)) => Ok(ToolResult::Spawned {
                child_session_key: child,
                run_id: run,
                mode,
            }),
            Err(e) => {
                self.spawns.free(&caller.agent_id);
                Err(e)
            }
        }
    }

    /// A budget's refusal as a tool result (`forbidden`, reason `budget_exceeded`, which
    /// budget and when to try again), recorded and counted once.
    pub(super) async fn over_budget(
        &self,
        refusal: &crate::access::budget::BudgetRefusal,
        caller: &HubCaller,
    ) -> ToolResult {
        self.denied(Reason::BudgetExceeded);
        self.access
            .refused(refusal, Some(&caller.session_key), None)
            .await;
        ToolResult::OverBudget {
            error: refusal.to_string(),
            budget: refusal.limit.as_str(),
            retry_after: refusal.retry_after,
        }
    }

    async fn subagents(
        self: &Arc<Self>,
        caller: &HubCaller,
        args: SubagentsArgs,
    ) -> Result<ToolResult, CallError> {
        let parent = caller.session_key.clone();
        let listed = self.db(move |s| s.children_with_state(&parent)).await?;
        if args.action == SubagentsAction::List {
            let page = match Page::new(args.limit, args.cursor.as_deref(), page::DEFAULT_LIMIT) {
                Ok(page) => page,
                Err(bad) => return Ok(error(bad.to_string())),
            };
            let (children, next) = page.of(listed.iter().map(|(child, state)| {
                json!({
                    "sessionKey": child.session_key,
                    "agentId": child.agent_id,
                    "label": child.label,
                    "runId": child.run_id,
                    "mode": child.mode,
                    "state": state,
                    "closed": child.closed_at.is_some(),
                    "createdAt": child.created_at,
                })
            }));
            return Ok(listing(
                json!({"status": "ok", "count": children.len(), "children": children}),
                next,
            ));
        }
        let Some(target) = args.target.as_deref().map(str::trim) else {
            return Ok(error(
                "`target` is required for wait and cancel: a child's runId, sessionKey or label",
            ));
        };
        let Some((child, _)) = listed.iter().find(|(c, _)| {
            c.run_id == target || c.session_key == target || c.label.as_deref() == Some(target)
        }) else {
            return Ok(error(format!(
                "`{target}` is none of your children (subagents list names them)"
            )));
        };
        let record = match args.action {
            SubagentsAction::Wait => {
                let wait = args.timeout_seconds.unwrap_or(DEFAULT_WAIT_SECONDS);
                self.wait_run(
                    &child.run_id,
                    Duration::from_secs(wait.min(MAX_WAIT_SECONDS)),
                )
                .await?
            }
            _ => self.cancel_run(&child.run_id).await?,
        };
        Ok(ToolResult::ChildRun {
            session_key: child.session_key.clone(),
            run: Box::new(record),
        })
    }

    /// What session `parent`'s children hold of its `maxChildrenPerAgent`.
    async fn held_children(&self, parent: &str) -> Result<HeldChildren, CallError> {
        let parent = parent.to_string();
        let children = self.db(move |s| s.children_with_state(&parent)).await?;
        Ok(HeldChildren::count(
            children
                .iter()
                .map(|(c, state)| (c.closed_at.is_some(), *state)),
        ))
    }

    async fn session_status(&self, caller: &HubCaller) -> Result<ToolResult, CallError> {
        let p = self.policy();
        let limits = p.limits(&caller.agent_id);
        let key = caller.session_key.clone();
        let child = self.db(move |s| s.child(&key)).await?;
        let held = self.held_children(&caller.session_key).await?;
        Ok(ToolResult::Document(json!({
            "sessionKey": caller.session_key,
            "agentId": caller.agent_id,
            "kind": kind_of(&caller.session_key),
            "model": self.access.model_report(&caller.agent_id),
            "queueDepth": self.access.queue_depth(&caller.session_key),
            "depth": caller.depth,
            "parentSessionKey": child.as_ref().map(|c| c.parent_session_key.clone()),
            "label": child.as_ref().and_then(|c| c.label.clone()),
            "budget": {
                "children": {"active": held.running, "kept": held.kept, "max": limits.max_children},
                "concurrent": {"active": self.spawns.active(), "max": p.max_concurrent},
                "depth": {"at": caller.depth, "max": limits.max_spawn_depth},
            },
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_kinds_come_from_keys() {
        assert_eq!(kind_of("agent:a:main"), "main");
        assert_eq!(kind_of("agent:a:subagent:x"), "subagent");
        assert_eq!(kind_of("agent:a:acp:x"), "acp");
        assert_eq!(kind_of("agent:a:slack:group:c1"), "group");
        assert_eq!(kind_of("agent:a:slack:direct:u1"), "other");
        assert_eq!(kind_of("agent:a:a2a:partner:c1"), "a2a");
        assert_eq!(kind_of("agent:a:task:task-1"), "task");
    }

    /// Review E6: `sessions_history` passed all of these through (six regexes of its own).
    #[test]
    fn sessions_history_redacted_only_six_shapes() {
        let hub_token = crate::hub::token::mint().unwrap();
        let operator = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END OPENSSH PRIVATE KEY-----";
        let shapes: Vec<(&str, String)> = vec![
            (
                "telegram",
                "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw".into(),
            ),
            (
                "jwt",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJFWEFNUExFIn0.c2lnbmF0dXJlMHNpZw".into(),
            ),
            ("pem", pem.into()),
            ("gitlab", "glpat-EXAMPLE0example0EXAM".into()),
            ("slack app", "xapp-1-A0EXAMPLE-1234567890-EXAMPLE".into()),
            ("google", "AIzaEXAMPLE0example0EXAMPLE0example0EXA".into()),
            ("hugging face", "hf_EXAMPLE0example0EXAMPLE0example0".into()),
            ("npm", "npm_EXAMPLE0example0EXAMPLE0example0EXAM".into()),
            (
                "github fine-grained",
                "github_pat_11EXAMPLE0example0EXAMPLE_EXAMPLE0example".into(),
            ),
            ("stripe", "sk_live_EXAMPLE0example0EXAM".into()),
            ("operator token", operator.clone()),
            ("hub token", hub_token.clone()),
            ("openai", "sk-proj-EXAMPLE0example0EXAMPLE0example0".into()),
            ("github", "ghp_EXAMPLE0example0EXAMPLE0example0EXAM".into()),
            ("slack bot", "xoxb-1234567890-EXAMPLE0example".into()),
            ("aws", "AKIAIOSFODNN7EXAMPLE".into()),
        ];
        for (name, secret) in &shapes {
            let text = format!("here: {secret} (end)");
            let out = redact(&text, None);
            assert_eq!(out, "here: [redacted] (end)", "{name}");
        }
        // Only the secret part: the scheme, the URL around a password.
        assert_eq!(
            redact("auth Bearer abcdefghijklmnopqrstu0 ok", None),
            "auth Bearer [redacted] ok"
        );
        assert_eq!(
            redact(
                "clone https://admin:hunter2pass@git.example.com/r.git now",
                None
            ),
            "clone https://admin:[redacted]@git.example.com/r.git now"
        );
        // The operator token in force, whatever its shape.
        assert_eq!(
            redact("the token is let-me-in-please", Some("let-me-in-please")),
            "the token is [redacted]"
        );
    }
}

/// A spawned child's `cwd`: an absolute path inside its agent's workspace (isolation.md), with
/// no `..` to climb out of it.
fn inside(cwd: &str, workspace: &std::path::Path) -> Result<(), String> {
    use std::path::{Component, Path};
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(format!("`cwd` must be an absolute path, not `{cwd}`"));
    }
    let climbs = path.components().any(|c| c == Component::ParentDir);
    let workspace = crate::config::paths::normalize(workspace);
    if climbs || !path.starts_with(&workspace) {
        return Err(format!(
            "`cwd` must lie inside the agent's workspace `{}`, not `{cwd}`",
            workspace.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod cwd_tests {
    use super::inside;
    use std::path::Path;

    #[test]
    fn a_spawn_cwd_must_lie_inside_the_workspace() {
        let ws = Path::new("/srv/state/workspaces/a");
        assert!(inside("/srv/state/workspaces/a", ws).is_ok());
        assert!(inside("/srv/state/workspaces/a/sub/dir", ws).is_ok());
        for bad in [
            "/etc",
            "/",
            "/srv/state",
            "/srv/state/workspaces/ab",
            "/srv/state/workspaces/a/../b",
            "relative/dir",
        ] {
            assert!(inside(bad, ws).is_err(), "{bad}");
        }
    }
}
