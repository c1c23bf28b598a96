//! Asking, waiting, deciding, voiding and expiring.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::policy;
use super::{ApprovalError, Approvals, MANAGEMENT_WAIT, Verdict, Waiter};
use crate::access::{ApprovalAsk, ChatCommand, Command, TurnOrigin};
use crate::config::model::{ApprovalRoute, PermissionMode};
use crate::hub::{CallError, HubCaller, ManagementAsk};
use crate::runtime::acp::PermissionAsk;
use crate::sessions::TurnEvent;
use crate::state::approvals::{ApprovalRecord, ApprovalRule, Decided, ManagementPreview, new_id};
use crate::state::{ApprovalSource, ApprovalState};

/// Who decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decider {
    /// The operator token (CLI, HTTP, JSON-RPC).
    Operator,
    /// A chat sender, `<channel>:<senderId>`.
    Chat(String),
}

impl Decider {
    fn name(&self) -> &str {
        match self {
            Decider::Operator => "operator",
            Decider::Chat(sender) => sender,
        }
    }
}

/// What a request is, before it is recorded.
struct Asked {
    source: ApprovalSource,
    agent_id: String,
    session_key: Option<String>,
    runtime_session_id: Option<String>,
    action: Value,
    options: Value,
    /// For the announce: what the agent wants, in a few words.
    summary: String,
    /// A management request's preview: what approving it would write.
    preview: Option<ManagementPreview>,
}

/// A request answered without a person, or recorded pending.
enum Filed {
    Now(ApprovalRecord),
    Pending(ApprovalRecord, oneshot::Receiver<Verdict>),
}

impl Approvals {
    /// Records `asked`: answered at once by `auto` (mode or rule), refused when no person can
    /// be reached, else pending (announced where the route allows, expiring on its own).
    async fn file(
        self: &Arc<Self>,
        asked: Asked,
        auto: Option<(bool, String, String)>,
    ) -> Result<Filed, ApprovalError> {
        let policy = self.policy(&asked.agent_id);
        let run_id = match &asked.session_key {
            Some(key) => self.hub.run_of_turn(key).await,
            None => None,
        };
        let origin = asked
            .session_key
            .as_deref()
            .and_then(|k| self.access.turn_origin(k));
        let now = jiff::Timestamp::now();
        let expires = now
            .checked_add(jiff::SignedDuration::try_from(policy.timeout).unwrap_or_default())
            .unwrap_or(now);
        let stamp = |t: jiff::Timestamp| {
            t.round(jiff::Unit::Second)
                .map_or_else(|_| t.to_string(), |t| t.to_string())
        };
        let mut record = ApprovalRecord {
            id: new_id()?,
            source: asked.source,
            agent_id: asked.agent_id.clone(),
            session_key: asked.session_key.clone(),
            runtime_session_id: asked.runtime_session_id.clone(),
            run_id: run_id.clone(),
            requester: json!({
                "agent": format!("agent:{}", asked.agent_id),
                "sessionKey": asked.session_key,
                "runId": run_id,
                "origin": origin,
            }),
            content_hash: policy::content_hash(&asked.action),
            action: asked.action,
            options: asked.options,
            policy_hash: policy.hash.clone(),
            route: policy.route.as_str().to_string(),
            origin: origin.as_ref().and_then(|o| serde_json::to_value(o).ok()),
            state: ApprovalState::Pending,
            created_at: stamp(now),
            expires_at: stamp(expires),
            decided_at: None,
            decided_by: None,
            decision: None,
            note: String::new(),
            preview: asked.preview,
        };
        // Who can be asked: the operator unless the route is the origin alone; the origin
        // when the route names it and the turn has a conversation with a reply sink.
        let announce_to = origin
            .filter(|o| policy.route != ApprovalRoute::Operator && self.access.can_announce_to(o));
        let reachable = policy.route != ApprovalRoute::Origin || announce_to.is_some();
        let settled = match auto {
            Some(auto) => Some(auto),
            None if !reachable => Some((
                false,
                "deepcli".to_string(),
                "no route to a person: `permissions.route: origin`, and this turn answers no conversation with a carrier to ask in (a platform adapter or a reply sink)".to_string(),
            )),
            None => None,
        };
        if let Some((allow, by, note)) = settled {
            record.state = if allow {
                ApprovalState::Approved
            } else {
                ApprovalState::Denied
            };
            record.decided_at = Some(record.created_at.clone());
            record.decided_by = Some(by);
            record.note = note;
            let r = record.clone();
            self.db(move |s| s.insert(&r)).await?;
            return Ok(Filed::Now(record));
        }
        let (tx, rx) = oneshot::channel();
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.insert(
                record.id.clone(),
                Waiter {
                    tx,
                    session_key: record.session_key.clone(),
                    source: record.source,
                    since: std::time::Instant::now(),
                },
            );
        }
        let r = record.clone();
        if let Err(e) = self.db(move |s| s.insert(&r)).await {
            self.waiter(&record.id);
            return Err(e);
        }
        tracing::info!(
            approval = %record.id, agent = %record.agent_id, session = ?record.session_key,
            what = %asked.summary, "approval asked"
        );
        if let Some(key) = &record.session_key {
            self.hub
                .awaiting_approval(key, true, format!("awaiting approval {}", record.id))
                .await;
        }
        if let (Some(origin), Some(key)) = (announce_to, &record.session_key) {
            self.announce(&record, &origin, key, &asked.summary, policy.timeout)
                .await;
        }
        let this = self.clone();
        let (id, timeout) = (record.id.clone(), policy.timeout);
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            this.expire(&id, timeout).await;
        });
        Ok(Filed::Pending(record, rx))
    }

    async fn announce(
        &self,
        record: &ApprovalRecord,
        origin: &TurnOrigin,
        session_key: &str,
        summary: &str,
        timeout: Duration,
    ) {
        let id = &record.id;
        let details = record.preview.as_ref().map_or(String::new(), |p| {
            format!(
                "\n{}",
                super::preview::render(p, "", Some(super::preview::ANNOUNCE_DIFF_BYTES))
            )
        });
        let text = format!(
            "Approval needed ({id}): agent `{}` asks to {summary}.{details}\nReply /approve {id} or /deny {id} (an approver only); it expires in {} s and is then denied.",
            record.agent_id,
            timeout.as_secs()
        );
        let sent = self
            .access
            .announce_to(origin, session_key, id, &text)
            .await;
        let (id, note) = (
            id.clone(),
            format!(
                "{}:{} conversation {}",
                origin.channel, origin.account_id, origin.message_id
            ),
        );
        if sent {
            let _ = self
                .db(move |s| s.note(&id, "notified", Some("deepcli"), &note))
                .await;
        }
    }

    /// No answer within `timeoutSeconds`: denied (fail closed).
    async fn expire(&self, id: &str, timeout: Duration) {
        let key = id.to_string();
        let note = format!("no answer within {} s: denied", timeout.as_secs());
        if let Ok(Decided::Done(record)) = self
            .db(move |s| s.decide(&key, ApprovalState::Expired, "deepcli", None, &note))
            .await
        {
            tracing::info!(approval = %id, agent = %record.agent_id, "approval expired");
            self.settle(&record, Verdict::deny()).await;
        }
    }

    /// Tells a waiting request its verdict, and its run that it runs again.
    async fn settle(&self, record: &ApprovalRecord, verdict: Verdict) {
        let always = verdict.always;
        if let Some(waiter) = self.waiter(&record.id) {
            let _ = waiter.tx.send(verdict);
        }
        self.access
            .announce_outcome(&record.id, outcome(record, always))
            .await;
        if let Some(key) = &record.session_key
            && record.source == ApprovalSource::Permission
        {
            self.hub
                .awaiting_approval(
                    key,
                    false,
                    format!("approval {} {}", record.id, record.state),
                )
                .await;
        }
    }

    /// Voids the pending approvals that `which` picks (waited on here or not), with `why`.
    async fn void_where(&self, why: &str, which: impl Fn(&ApprovalRecord) -> bool) {
        self.void_with(why, which, Verdict::deny()).await;
    }

    /// [`Approvals::void_where`], the waiting requests told `verdict`.
    async fn void_with(
        &self,
        why: &str,
        which: impl Fn(&ApprovalRecord) -> bool,
        verdict: Verdict,
    ) {
        let Ok(pending) = self.db(|s| s.pending()).await else {
            return;
        };
        for record in pending.into_iter().filter(|r| which(r)) {
            let (id, note) = (record.id.clone(), why.to_string());
            if let Ok(Decided::Done(record)) = self
                .db(move |s| s.decide(&id, ApprovalState::Void, "deepcli", None, &note))
                .await
            {
                tracing::info!(approval = %record.id, agent = %record.agent_id, why, "approval void");
                self.settle(&record, verdict.clone()).await;
            }
        }
    }

    /// The controller is stopping: nothing it waits for will be answered by a person now, so
    /// every pending approval is void (the runtimes get a deny and their turns end, which lets
    /// the requests in flight finish).
    pub(crate) async fn stop(&self) {
        self.void_where("the controller stopped", |_| true).await;
    }

    /// The agents' `permissions` of a newly applied config are in force, replacing `before`: a
    /// pending approval of an agent whose permissions changed (or which is gone) is void.
    pub(crate) async fn policies_changed(&self, before: &super::Policies) {
        let next = self.policies.load();
        let changed: Vec<String> = next
            .iter()
            .filter(|(id, p)| {
                before
                    .get(*id)
                    .map_or_else(|| super::Policy::of(None).hash, |b| b.hash.clone())
                    != p.hash
            })
            .map(|(id, _)| id.clone())
            .chain(before.keys().filter(|id| !next.contains_key(*id)).cloned())
            .collect();
        if before.is_empty() {
            // What is pending now was asked under this config (the controller's first apply).
            return;
        }
        self.void_where("the agent's permissions changed in the config", |r| {
            changed.contains(&r.agent_id)
                || next
                    .get(&r.agent_id)
                    .is_none_or(|p| p.hash != r.policy_hash)
        })
        .await;
    }

    /// Decides approval `id` (approvals.md, "Rules"): only while pending, only by the operator
    /// or one of the agent's `approvers`, only while it still stands for what was asked (the
    /// content hash, the session waiting, the permissions it was asked under).
    pub(crate) async fn decide(
        &self,
        id: &str,
        allow: bool,
        always: bool,
        pattern: Option<&str>,
        by: Decider,
    ) -> Result<(ApprovalRecord, Option<ApprovalRule>), ApprovalError> {
        if pattern.is_some() && !(allow && always) {
            return Err(ApprovalError::Params(
                "a pattern is the title of an allow_always rule: it goes with approve --always"
                    .to_string(),
            ));
        }
        let record = self.pending(id).await?;
        let policy = self.policy(&record.agent_id);
        if let Decider::Chat(sender) = &by
            && !policy.is_approver(sender)
        {
            tracing::warn!(approval = %id, sender = %sender, agent = %record.agent_id, "approval refused: the sender is not an approver");
            let (key, actor) = (id.to_string(), sender.clone());
            let _ = self
                .db(move |s| {
                    s.note(
                        &key,
                        "refused",
                        Some(&actor),
                        "not in the agent's `permissions.approvers`",
                    )
                })
                .await;
            return Err(ApprovalError::Refused(format!(
                "{sender} is not an approver of agent `{}` (permissions.approvers): approval {id} stays pending",
                record.agent_id
            )));
        }
        if always && record.source == ApprovalSource::Management {
            return Err(ApprovalError::Params(
                "--always makes a rule for a tool kind and title: it applies to permission requests, not to management requests".to_string(),
            ));
        }
        // The rule, before anything is decided: a pattern that does not fit refuses the whole.
        let made = if allow && always {
            Some(rule_for(&record, pattern, &by)?)
        } else {
            None
        };
        // What it is bound to. A management request: also the diff its approver was shown.
        let changed_since_shown = match &record.preview {
            Some(shown) if allow && record.source == ApprovalSource::Management => {
                let now = self
                    .preview(
                        &record.agent_id,
                        record.action["method"].as_str().unwrap_or(""),
                        &record.action["params"],
                    )
                    .await;
                shown.diff != now.diff
            }
            _ => false,
        };
        let broken = if policy::content_hash(&record.action) != record.content_hash {
            Some("its action no longer matches the content hash it was asked with")
        } else if policy.hash != record.policy_hash {
            Some("the agent's permissions changed in the config")
        } else if record.source == ApprovalSource::Permission && !self.has_waiter(id) {
            Some("the request was withdrawn: nothing waits for it any more")
        } else if changed_since_shown {
            Some(
                "the config changed since it was asked: what approving it would write is no longer the diff shown",
            )
        } else {
            None
        };
        if let Some(why) = broken {
            let (key, note) = (id.to_string(), why.to_string());
            if let Decided::Done(voided) = self
                .db(move |s| s.decide(&key, ApprovalState::Void, "deepcli", None, &note))
                .await?
            {
                self.settle(&voided, Verdict::deny()).await;
            }
            return Err(ApprovalError::Voided {
                id: id.to_string(),
                why: why.to_string(),
            });
        }
        let decision = match record.source {
            ApprovalSource::Permission => {
                policy::option_for(&record.options, allow, always).map(|(_, kind)| kind)
            }
            ApprovalSource::Management => None,
        };
        let (key, who) = (id.to_string(), by.name().to_string());
        let state = if allow {
            ApprovalState::Approved
        } else {
            ApprovalState::Denied
        };
        let decided = self
            .db(move |s| s.decide(&key, state, &who, decision.as_deref(), ""))
            .await?;
        let record = match decided {
            Decided::Done(record) => record,
            Decided::AlreadyFinal(r) => {
                return Err(ApprovalError::NotPending {
                    id: id.to_string(),
                    state: r.state,
                    by: r.decided_by,
                });
            }
            Decided::Missing => return Err(ApprovalError::NotFound(id.to_string())),
        };
        tracing::info!(approval = %id, agent = %record.agent_id, by = by.name(), allow, always, "approval decided");
        let mut rule = None;
        let mut result = None;
        match record.source {
            ApprovalSource::Permission if allow && always => {
                if let Some(made) = made {
                    let r = made.clone();
                    self.db(move |s| s.add_rule(&r)).await?;
                    tracing::info!(rule = %made.id, agent = %made.agent_id, kind = %made.tool_kind, title = ?made.title_pattern, title_match = %made.title_match, "approval rule made");
                    rule = Some(made);
                }
            }
            ApprovalSource::Management if allow => {
                result = Some(self.execute(&record, by.name()).await);
            }
            _ => {}
        }
        self.settle(
            &record,
            Verdict {
                allow,
                always,
                result,
                cancelled: false,
            },
        )
        .await;
        let key = id.to_string();
        let record = self.db(move |s| s.get(&key)).await?.unwrap_or(record);
        Ok((record, rule))
    }

    /// Approval `id`, still pending: else not found, or what decided it.
    async fn pending(&self, id: &str) -> Result<ApprovalRecord, ApprovalError> {
        let key = id.to_string();
        let record = self
            .db(move |s| s.get(&key))
            .await?
            .ok_or_else(|| ApprovalError::NotFound(id.to_string()))?;
        if record.state != ApprovalState::Pending {
            return Err(ApprovalError::NotPending {
                id: id.to_string(),
                state: record.state,
                by: record.decided_by,
            });
        }
        Ok(record)
    }

    /// The rule `approve <id> --always` (with `pattern`) would save, nothing decided: what the
    /// CLI shows before it saves an operator's pattern.
    pub(crate) async fn preview_rule(
        &self,
        id: &str,
        pattern: Option<&str>,
    ) -> Result<(ApprovalRecord, ApprovalRule), ApprovalError> {
        let record = self.pending(id).await?;
        if record.source == ApprovalSource::Management {
            return Err(ApprovalError::Params(
                "--always makes a rule for a tool kind and title: it applies to permission requests, not to management requests".to_string(),
            ));
        }
        let rule = rule_for(&record, pattern, &Decider::Operator)?;
        Ok((record, rule))
    }

    /// What `method` with `params`, asked by `requester`, would change: the management
    /// service's own dry run (the operator's `dryRun`), and what it touches beyond `requester`.
    async fn preview(&self, requester: &str, method: &str, params: &Value) -> ManagementPreview {
        let answer = if super::preview::has_dry_run(method) {
            let executor = self.executor.clone();
            let mut dry = params.clone();
            dry["dryRun"] = true.into();
            let m = method.to_string();
            Some(
                tokio::task::spawn_blocking(move || executor.execute(&m, dry))
                    .await
                    .unwrap_or_else(|e| Err(json!({"message": format!("internal error: {e}")}))),
            )
        } else {
            None
        };
        super::preview::from_dry_run(requester, method, params, answer)
    }

    /// Runs an approved management request through the operator's management service;
    /// `{ok, result}` or `{ok: false, error}`, also kept in the approval's note and events.
    async fn execute(&self, record: &ApprovalRecord, approver: &str) -> Value {
        let executor = self.executor.clone();
        let method = record.action["method"].as_str().unwrap_or("").to_string();
        let params = record.action["params"].clone();
        let run = {
            let method = method.clone();
            tokio::task::spawn_blocking(move || executor.execute(&method, params)).await
        };
        let outcome = match run {
            Ok(Ok(result)) => json!({"ok": true, "result": result}),
            Ok(Err(error)) => json!({"ok": false, "error": error}),
            Err(e) => json!({"ok": false, "error": format!("internal error: {e}")}),
        };
        let provenance = format!("agent:{} approved by {approver}", record.agent_id);
        let note = if outcome["ok"] == true {
            format!("{method} done ({provenance})")
        } else {
            format!(
                "{method} failed, nothing written ({provenance}): {}",
                outcome["error"]
            )
        };
        tracing::info!(approval = %record.id, %method, provenance = %provenance, ok = %outcome["ok"], "management request run");
        let (id, actor, n) = (record.id.clone(), approver.to_string(), note.clone());
        let _ = self
            .db(move |s| {
                s.note(&id, "executed", Some(&actor), &n)?;
                s.set_note(&id, &n)
            })
            .await;
        outcome
    }

    /// A runtime's `session/request_permission`.
    async fn ask_permission(
        self: Arc<Self>,
        agent_id: String,
        req: RequestPermissionRequest,
    ) -> RequestPermissionResponse {
        let runtime_session = req.session_id.0.to_string();
        let session_key = self
            .acp
            .lock()
            .ok()
            .and_then(|m| m.get(&agent_id)?.holder(&runtime_session));
        let call = serde_json::to_value(&req.tool_call).unwrap_or_default();
        let kind = call["kind"].as_str().unwrap_or("other").to_string();
        let title = call["title"].as_str().unwrap_or("").to_string();
        let action = json!({
            "toolCallId": call["toolCallId"],
            "kind": kind,
            "title": title,
            "content": call.get("content").cloned().unwrap_or(Value::Null),
            "rawInput": call.get("rawInput").cloned().unwrap_or(Value::Null),
            "locations": call.get("locations").cloned().unwrap_or(Value::Null),
        });
        let options = serde_json::to_value(&req.options).unwrap_or_default();
        let policy = self.policy(&agent_id);
        let auto = match policy::by_mode(policy.mode, &kind) {
            Some(allow) => Some((
                allow,
                format!("mode:{}", policy.mode.as_str()),
                String::new(),
            )),
            None if policy.mode == PermissionMode::DenyAll => None,
            None => {
                let (agent, k, t) = (agent_id.clone(), kind.clone(), title.clone());
                let raw = action["rawInput"].clone();
                self.db(move |s| s.rules(Some(&agent), false))
                    .await
                    .ok()
                    .and_then(|rules| {
                        policy::matching_rule(&rules, &k, &t, &raw).map(|r| {
                            (
                                true,
                                format!("rule:{}", r.id),
                                format!("allow_always {}", policy::describe_rule(r)),
                            )
                        })
                    })
            }
        };
        let asked = Asked {
            source: ApprovalSource::Permission,
            agent_id: agent_id.clone(),
            session_key,
            runtime_session_id: Some(runtime_session),
            summary: format!("{kind} {title:?}"),
            preview: None,
            action,
            options: options.clone(),
        };
        let verdict = match self.file(asked, auto).await {
            Ok(Filed::Now(record)) => Verdict {
                allow: record.state == ApprovalState::Approved,
                always: false,
                result: None,
                cancelled: false,
            },
            Ok(Filed::Pending(_, rx)) => rx.await.unwrap_or_else(|_| Verdict::deny()),
            Err(e) => {
                tracing::error!(agent = %agent_id, error = %e, "cannot record a permission request: rejected");
                Verdict::deny()
            }
        };
        answer(&options, &verdict)
    }

    /// The Hub's `management_request`.
    async fn ask_management(
        self: Arc<Self>,
        caller: HubCaller,
        args: crate::hub::tools::ManagementArgs,
    ) -> Result<Value, CallError> {
        let method = args
            .method
            .strip_prefix(crate::manage::rpc::PREFIX)
            .unwrap_or(&args.method)
            .to_string();
        let invalid = |error: String| Ok(json!({"status": "invalid", "error": error}));
        if !crate::hub::tools::REQUESTABLE_METHODS.contains(&method.as_str()) {
            return invalid(format!(
                "`{method}` is not a management method an agent may ask for; they are {}",
                crate::hub::tools::REQUESTABLE_METHODS.join(", ")
            ));
        }
        let params = match args.params {
            Value::Null => json!({}),
            p @ Value::Object(_) => p,
            _ => return invalid("`params` must be an object: the method's parameters".to_string()),
        };
        let reason = args.reason.trim().to_string();
        if reason.is_empty() || reason.len() > 2000 {
            return invalid(
                "`reason` must say why, in 1 to 2000 bytes: the person deciding reads it"
                    .to_string(),
            );
        }
        let policy = self.policy(&caller.agent_id);
        // Management requests always need a person: modes and rules are for tool calls; only
        // `deny-all` answers them, with no.
        let auto = (policy.mode == PermissionMode::DenyAll)
            .then(|| (false, "mode:deny-all".to_string(), String::new()));
        let preview = self.preview(&caller.agent_id, &method, &params).await;
        let asked = Asked {
            preview: Some(preview),
            source: ApprovalSource::Management,
            agent_id: caller.agent_id.clone(),
            session_key: Some(caller.session_key.clone()),
            runtime_session_id: None,
            summary: format!("run the management method {method} (its reason: {reason:?})"),
            action: json!({"method": method, "params": params, "reason": reason}),
            options: json!([]),
        };
        let filed = self
            .file(asked, auto)
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?;
        let (record, rx) = match filed {
            Filed::Now(record) => {
                return Ok(json!({
                    "status": record.state,
                    "approvalId": record.id,
                    "decidedBy": record.decided_by,
                    "note": record.note,
                    "written": false,
                }));
            }
            Filed::Pending(record, rx) => (record, rx),
        };
        let wait = policy.timeout.min(MANAGEMENT_WAIT);
        let decided = tokio::time::timeout(wait, rx).await;
        let id = record.id.clone();
        let now = self
            .db(move |s| s.get(&id))
            .await
            .ok()
            .flatten()
            .unwrap_or(record);
        match decided {
            Ok(Ok(verdict)) => {
                let written = verdict.result.as_ref().is_some_and(|r| r["ok"] == true);
                Ok(json!({
                    "status": now.state,
                    "approvalId": now.id,
                    "decidedBy": now.decided_by,
                    "written": written,
                    "result": verdict.result,
                    "note": now.note,
                }))
            }
            _ => {
                // Still pending (or this controller is going away): the agent is told the id.
                // A later decision still runs it; the waiter is kept for `decide` to find.
                Ok(json!({
                    "status": now.state,
                    "approvalId": now.id,
                    "expiresAt": now.expires_at,
                    "written": false,
                    "note": "nobody answered yet; the operator or an approver may still approve it before it expires (deepcli approvals list)",
                }))
            }
        }
    }

    /// A chat's `/approve <id>` or `/deny <id>`: the text to answer with.
    /// A person's `/accept` or `/reject` of a task from a chat (tasks.md): decided by the
    /// Hub's task state machine with the owner agent's approvers.
    async fn task_verdict(&self, sender: String, command: crate::access::TaskCommand) -> String {
        use crate::hub::tasks::Verdict;
        let id = command.id;
        let owner = match self.hub.operator_task(&id).await {
            Ok(task) => task.owner,
            Err(e) => return format!("task {id}: {e}; nothing was decided"),
        };
        let approvers = self
            .policies
            .load()
            .get(&owner)
            .map(|p| p.approvers.clone())
            .unwrap_or_default();
        let verdict = match command.reject {
            None => Verdict::Accept,
            Some(reason) => Verdict::Reject {
                reason,
                reopen: true,
            },
        };
        let actor = crate::tasks::state::Actor::Person { id: sender.clone() };
        match self
            .hub
            .decide_task(&id, verdict, actor, "room", approvers)
            .await
        {
            Ok(task) => format!("task {id}: {} by {sender}", task.state),
            Err(e) => format!("task {id}: {e}; nothing was decided"),
        }
    }

    /// A person's `/task <agent> <title> | <acceptance>` (tasks.md): a task for the chat's
    /// agent to own, given by one of that agent's approvers.
    async fn new_task(&self, sender: String, command: crate::access::NewTaskCommand) -> String {
        let asked = match command.asked {
            Ok(asked) => asked,
            Err(usage) => return usage,
        };
        let owner = command.owner;
        let approver = self
            .policies
            .load()
            .get(&owner)
            .is_some_and(|p| p.approvers.contains(&sender));
        if !approver {
            return format!(
                "/task is taken only from agent `{owner}`'s approvers (permissions.approvers); no task was given"
            );
        }
        let asked = crate::hub::tasks::Asked {
            requester: crate::tasks::store::Requester::Person(sender),
            owner,
            assignee: crate::ids::agent_id(&asked.assignee).into_owned(),
            title: asked.title,
            acceptance: asked.acceptance,
            room: Some(command.room),
        };
        match self.hub.create_task(None, asked, "room").await {
            Ok(Ok((task, _run))) => format!(
                "task {}: {} works on it; {} checks the result, then /accept {} or /reject {} <reason>",
                task.id, task.assignee, task.owner, task.id, task.id
            ),
            Ok(Err(crate::hub::tasks::Refusal::Said(why))) => format!("no task was given: {why}"),
            Ok(Err(crate::hub::tasks::Refusal::Result(_))) => {
                "no task was given: refused by the Hub's policy".to_string()
            }
            Err(e) => format!("no task was given: {e}"),
        }
    }

    async fn chat(&self, sender: Option<String>, command: ChatCommand) -> String {
        let Some(sender) = sender else {
            return format!(
                "approval {}: this message names no sender, so nobody can be checked against `permissions.approvers`; nothing decided",
                command.id
            );
        };
        match self
            .decide(
                &command.id,
                command.approve,
                command.always,
                None,
                Decider::Chat(sender),
            )
            .await
        {
            Ok((record, rule)) => {
                let mut text = format!(
                    "approval {}: {} by {}",
                    record.id,
                    record.state,
                    record.decided_by.as_deref().unwrap_or("?")
                );
                if let Some(rule) = rule {
                    text.push_str(&format!(
                        "; {} (deepcli approvals revoke {})",
                        policy::describe_rule(&rule),
                        rule.id
                    ));
                }
                text
            }
            Err(e) => format!("approval {}: {e}", command.id),
        }
    }
}

/// The `allow_always` rule answering `record` makes: its exact kind and title (or the
/// operator's `pattern`), bound to its raw input's shape.
fn rule_for(
    record: &ApprovalRecord,
    pattern: Option<&str>,
    by: &Decider,
) -> Result<ApprovalRule, ApprovalError> {
    let title = record.action["title"].as_str().unwrap_or("");
    let (title_pattern, title_match) =
        policy::rule_title(title, pattern).map_err(ApprovalError::Params)?;
    Ok(ApprovalRule {
        id: new_id()?,
        agent_id: record.agent_id.clone(),
        tool_kind: record.action["kind"]
            .as_str()
            .unwrap_or("other")
            .to_string(),
        title_pattern,
        title_match,
        input_shape: policy::input_shape(&record.action["rawInput"]),
        created_at: crate::clock::now(),
        created_by: by.name().to_string(),
        approval_id: record.id.clone(),
        revoked_at: None,
        revoked_by: None,
    })
}

/// What the conversation an approval was asked in is told of its outcome.
fn outcome(record: &ApprovalRecord, always: bool) -> String {
    let id = &record.id;
    let by = record.decided_by.as_deref().unwrap_or("deepcli");
    match record.state {
        ApprovalState::Approved if always => {
            format!("Approval {id}: approved by {by}, always (a rule now allows the same request).")
        }
        ApprovalState::Approved => format!("Approval {id}: approved by {by}, once."),
        ApprovalState::Denied => format!("Approval {id}: denied by {by}."),
        ApprovalState::Expired => format!("Approval {id} expired: {}", record.note),
        ApprovalState::Void => format!("Approval {id} is void: {}", record.note),
        ApprovalState::Pending => format!("Approval {id} is pending."),
    }
}

impl Verdict {
    fn deny() -> Verdict {
        Verdict {
            allow: false,
            always: false,
            result: None,
            cancelled: false,
        }
    }

    fn cancelled() -> Verdict {
        Verdict {
            cancelled: true,
            ..Verdict::deny()
        }
    }
}

/// The ACP answer to a verdict: the matching option, else `cancelled` (the agent offered no
/// option of that direction; never an allow it did not offer).
fn answer(options: &Value, verdict: &Verdict) -> RequestPermissionResponse {
    if verdict.cancelled {
        return RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled);
    }
    RequestPermissionResponse::new(
        match policy::option_for(options, verdict.allow, verdict.always) {
            Some((option_id, _)) => {
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option_id))
            }
            None => RequestPermissionOutcome::Cancelled,
        },
    )
}

/// Serves what the other layers ask of the approvals, each channel on a task of its own, for as
/// long as the approvals live (weak: the tasks do not keep them).
pub(super) fn serve(approvals: &Arc<Approvals>, asks: super::Asks) {
    let super::Asks {
        mut permissions,
        mut turns,
        mut commands,
        mut management,
    } = asks;
    // Each question is answered on a task of its own: a person may take minutes.
    let me = Arc::downgrade(approvals);
    tokio::spawn(async move {
        while let Some(PermissionAsk {
            agent_id,
            request,
            reply,
        }) = permissions.recv().await
        {
            let approvals = me.upgrade();
            tokio::spawn(async move {
                let answer = match approvals {
                    Some(a) => a.ask_permission(agent_id, request).await,
                    None => crate::runtime::acp::reject(&request),
                };
                let _ = reply.send(answer);
            });
        }
    });
    let me = Arc::downgrade(approvals);
    tokio::spawn(async move {
        while let Some(ManagementAsk {
            caller,
            args,
            reply,
        }) = management.recv().await
        {
            let approvals = me.upgrade();
            tokio::spawn(async move {
                let answer = match approvals {
                    Some(a) => a.ask_management(caller, args).await,
                    None => Err(CallError::Internal("the approvals service is gone".into())),
                };
                let _ = reply.send(answer);
            });
        }
    });
    let me = Arc::downgrade(approvals);
    tokio::spawn(async move {
        while let Some(ApprovalAsk {
            sender,
            command,
            reply,
        }) = commands.recv().await
        {
            let Some(approvals) = me.upgrade() else {
                let _ = reply.send(None);
                continue;
            };
            // Only an approver's command is answered as one.
            if !approvals
                .policies
                .load()
                .values()
                .any(|policy| policy.is_approver(&sender))
            {
                let _ = reply.send(None);
                continue;
            }
            tokio::spawn(async move {
                let answer = match command {
                    Command::Approval(command) => approvals.chat(Some(sender), command).await,
                    Command::Task(command) => approvals.task_verdict(sender, command).await,
                    Command::NewTask(command) => approvals.new_task(sender, command).await,
                };
                let _ = reply.send(Some(answer));
            });
        }
    });
    let me = Arc::downgrade(approvals);
    tokio::spawn(async move {
        while let Some(event) = turns.recv().await {
            let Some(approvals) = me.upgrade() else {
                continue;
            };
            match event {
                TurnEvent::Ended { session_key, at } => turn_ended(approvals, &session_key, at),
                TurnEvent::Closing { session_key, done } => {
                    tokio::spawn(async move {
                        approvals
                            .void_where("the session was closed", |r| {
                                r.session_key.as_deref() == Some(session_key.as_str())
                            })
                            .await;
                        let _ = done.send(());
                    });
                }
            }
        }
    });
}

/// A turn of `session_key` ended at `at`: its permission requests still pending are withdrawn
/// (answered `cancelled`). Only permission requests die with the turn; a management request
/// outlives its call. A request that began waiting after `at` is the session's next turn's.
fn turn_ended(approvals: Arc<Approvals>, session_key: &str, at: std::time::Instant) {
    let ids: Vec<String> = approvals
        .waiting
        .lock()
        .map(|w| withdrawn_by(&w, session_key, at))
        .unwrap_or_default();
    if ids.is_empty() {
        return;
    }
    tokio::spawn(async move {
        approvals
            .void_with(
                "withdrawn: the turn that asked was cancelled or ended",
                |r| ids.contains(&r.id),
                Verdict::cancelled(),
            )
            .await;
    });
}

/// The permission requests of `session_key`, among those `waiting`, that began waiting by `at`.
fn withdrawn_by(
    waiting: &std::collections::HashMap<String, super::Waiter>,
    session_key: &str,
    at: std::time::Instant,
) -> Vec<String> {
    let mut ids: Vec<String> = waiting
        .iter()
        .filter(|(_, waiter)| {
            waiter.source == ApprovalSource::Permission
                && waiter.session_key.as_deref() == Some(session_key)
                && waiter.since <= at
        })
        .map(|(id, _)| id.clone())
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_turn_withdraws_only_its_sessions_permission_requests_made_before_it_ended() {
        let t0 = std::time::Instant::now();
        let later = t0 + Duration::from_millis(5);
        let waiter = |key: &str, source, since| super::super::Waiter {
            tx: oneshot::channel().0,
            session_key: Some(key.to_string()),
            source,
            since,
        };
        let waiting = std::collections::HashMap::from([
            ("a".to_string(), waiter("s", ApprovalSource::Permission, t0)),
            ("b".to_string(), waiter("s", ApprovalSource::Permission, t0)),
            // The session's next turn asked after this one ended.
            (
                "c".to_string(),
                waiter("s", ApprovalSource::Permission, later),
            ),
            // A management request outlives the call that made it.
            ("d".to_string(), waiter("s", ApprovalSource::Management, t0)),
            (
                "e".to_string(),
                waiter("other", ApprovalSource::Permission, t0),
            ),
        ]);
        assert_eq!(withdrawn_by(&waiting, "s", t0), ["a", "b"]);
        assert_eq!(withdrawn_by(&waiting, "s", later), ["a", "b", "c"]);
        assert!(withdrawn_by(&waiting, "nobody", later).is_empty());
    }

    #[test]
    fn a_verdict_becomes_the_offered_option_or_cancelled() {
        let options = json!([
            {"optionId": "ok", "name": "Allow", "kind": "allow_once"},
            {"optionId": "always", "name": "Always", "kind": "allow_always"},
            {"optionId": "no", "name": "Reject", "kind": "reject_once"},
        ]);
        let pick = |allow, always| {
            serde_json::to_value(answer(
                &options,
                &Verdict {
                    allow,
                    always,
                    ..Verdict::deny()
                },
            ))
            .unwrap()["outcome"]
                .clone()
        };
        assert_eq!(pick(true, false)["optionId"], "ok");
        assert_eq!(pick(true, true)["optionId"], "always");
        assert_eq!(pick(false, true)["optionId"], "no");
        let none = serde_json::to_value(answer(&json!([]), &Verdict::deny())).unwrap();
        assert_eq!(none["outcome"]["outcome"], "cancelled");
        // A cancelled turn's request: `cancelled`, whatever was offered.
        let cancelled = serde_json::to_value(answer(&options, &Verdict::cancelled())).unwrap();
        assert_eq!(cancelled["outcome"]["outcome"], "cancelled");
    }
}
