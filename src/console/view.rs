//! What each page shows, as typed values made from the services' own answers (the same
//! `approvals/*`, `sessions/*`, `runs/*`, `tasks/*`, audit and route answers the CLI and the
//! JSON API give), and the askama templates that render them. Pure: no I/O, so the pages are
//! snapshot-tested from fixed data.

use askama::Template;

use crate::approvals::ApprovalAnswer;
use crate::hub::operator::{
    FoundLine, History, HistoryMessage, RunView, SessionDetail, SessionList, TranscriptSearch,
};
use crate::hub::tasks::TaskView;
use crate::routing::plan::TierOutcome;
use crate::routing::{MatchedBy, RouteInput, RoutingPlan};
use crate::state::approvals::ApprovalRecord;
use crate::state::audit::AuditEvent;

/// The overview, made by the controller from its status (`GET /v1/status`'s
/// `ControllerStatus`) each time the page is asked for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overview {
    /// `healthy` or `degraded`.
    pub health: &'static str,
    pub reasons: Vec<String>,
    pub config_hash: Option<String>,
    pub applied_at: Option<String>,
    pub routing_generation: Option<u64>,
    pub rejected: Option<RejectedEdit>,
    pub blocked: Vec<String>,
    pub agents: Vec<AgentRow>,
    pub adapters: Vec<AdapterRow>,
}

/// An edit the controller refused, with its diagnostics.
#[derive(Debug, Clone, Default)]
pub(crate) struct RejectedEdit {
    pub since: String,
    pub diagnostics: Vec<String>,
}

/// One agent's runtime as the overview shows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct AgentRow {
    pub agent_id: String,
    /// The runtime's kind (`acp`, `a2a`, …).
    pub kind: String,
    /// The runtime's phase (`ready`, `crash_loop`, …).
    pub state: String,
    pub restarts: u64,
    pub last_error: Option<String>,
    pub sandbox: String,
    pub model: String,
    /// Messages waiting in its sessions' FIFOs plus those being handled.
    pub queue: usize,
    /// `(budget, used, limit)`; usage a runtime did not report is `unknown`, never 0.
    pub budgets: Vec<(String, String, String)>,
}

/// One channel account and its adapter.
#[derive(Debug, Clone, Default)]
pub(crate) struct AdapterRow {
    pub channel: String,
    pub account: String,
    /// `open`, `closed` or `disabled`.
    pub inbound: String,
    pub reason: Option<String>,
    /// `connected (slack socket)`, or `no adapter (signed POSTs)`.
    pub connection: String,
    pub last_error: Option<String>,
    pub last_event: String,
}

/// One link of the navigation.
pub(crate) struct Link {
    pub href: &'static str,
    pub label: &'static str,
    pub current: bool,
}

/// What every page has around its content: its title, the navigation, and the session's
/// CSRF token for its forms.
pub(crate) struct Frame {
    pub title: &'static str,
    pub active: &'static str,
    pub csrf: String,
}

impl Frame {
    pub(crate) fn links(&self) -> Vec<Link> {
        [
            ("/console/", "Overview"),
            ("/console/approvals", "Approvals"),
            ("/console/conversations", "Conversations"),
            ("/console/runs", "Runs and tasks"),
            ("/console/audit", "Audit"),
            ("/console/routes", "Routes"),
        ]
        .into_iter()
        .map(|(href, label)| Link {
            href,
            label,
            current: label == self.active,
        })
        .collect()
    }
}

#[derive(Template)]
#[template(path = "login.html")]
pub(crate) struct LoginPage {
    pub error: Option<String>,
}

#[derive(Template)]
#[template(path = "overview.html")]
pub(crate) struct OverviewPage {
    pub frame: Frame,
    pub o: Overview,
}

/// A pending approval as the person deciding sees it: the exact action and its hash.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalCard {
    pub id: String,
    pub title: String,
    pub agent_id: String,
    pub session_key: Option<String>,
    pub source: String,
    pub content_hash: String,
    pub created_at: String,
    pub expires_at: String,
    /// The action as recorded, pretty JSON.
    pub action: String,
    /// A management request's diff.
    pub diff: Option<String>,
}

impl ApprovalCard {
    pub(crate) fn of(r: &ApprovalRecord) -> ApprovalCard {
        let title = r
            .action
            .get("title")
            .and_then(|t| t.as_str())
            .or_else(|| r.action.get("method").and_then(|m| m.as_str()))
            .unwrap_or("an action")
            .to_string();
        ApprovalCard {
            id: r.id.clone(),
            title,
            agent_id: r.agent_id.clone(),
            session_key: r.session_key.clone(),
            source: r.source.to_string(),
            content_hash: r.content_hash.clone(),
            created_at: r.created_at.clone(),
            expires_at: r.expires_at.clone(),
            action: serde_json::to_string_pretty(&r.action).unwrap_or_default(),
            diff: r.preview.as_ref().and_then(|p| p.diff.clone()),
        }
    }

    /// The pending approvals of an `approvals/list` answer.
    pub(crate) fn of_answer(answer: &ApprovalAnswer) -> Vec<ApprovalCard> {
        match answer {
            ApprovalAnswer::List { approvals } => approvals.iter().map(ApprovalCard::of).collect(),
            _ => Vec::new(),
        }
    }
}

#[derive(Template)]
#[template(path = "approvals.html")]
pub(crate) struct ApprovalsPage {
    pub frame: Frame,
    pub approvals: Vec<ApprovalCard>,
    /// Tasks in `pending_acceptance`.
    pub tasks: Vec<TaskView>,
}

/// The conversations page's search, as typed.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct SessionFilter {
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub q: String,
    /// Words of a line said in any session (`sessions/search`).
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub cursor: String,
}

/// One session of the list.
pub(crate) struct SessionLine {
    pub session_key: String,
    pub agent_id: String,
    pub kind: &'static str,
    /// The channel its key names (`telegram`), or `-` (main, spawned).
    pub channel: String,
    pub label: Option<String>,
    pub last_activity: Option<String>,
    pub queue_depth: usize,
}

/// A line a search found, with the session it is in.
pub(crate) struct FoundView {
    pub id: i64,
    pub session_key: String,
    pub provenance: String,
    pub at: String,
    pub snippet: String,
}

impl FoundView {
    fn of(f: FoundLine) -> FoundView {
        FoundView {
            id: f.id,
            session_key: f.session_key,
            provenance: f.provenance.to_string(),
            at: f.at,
            snippet: f.snippet,
        }
    }
}

#[derive(Template)]
#[template(path = "conversations.html")]
pub(crate) struct ConversationsPage {
    pub frame: Frame,
    pub filter: SessionFilter,
    pub sessions: Vec<SessionLine>,
    /// A search by text: the lines found (the sessions list is not shown).
    pub found: Option<Vec<FoundView>>,
    pub next: Option<String>,
}

impl ConversationsPage {
    /// The link to the next page of the same search, at `cursor`.
    fn next_of(filter: &SessionFilter, cursor: &str) -> String {
        let mut url = form_urlencoded::Serializer::new(String::new());
        url.append_pair("agent", &filter.agent)
            .append_pair("kind", &filter.kind)
            .append_pair("q", &filter.q)
            .append_pair("text", &filter.text)
            .append_pair("cursor", cursor);
        format!("/console/conversations?{}", url.finish())
    }

    /// The lines of a `sessions/search` answer.
    pub(crate) fn of_search(
        frame: Frame,
        filter: SessionFilter,
        search: TranscriptSearch,
    ) -> ConversationsPage {
        let next = search
            .next_cursor
            .map(|c| ConversationsPage::next_of(&filter, &c));
        let found = search.found.into_iter().map(FoundView::of).collect();
        ConversationsPage {
            frame,
            filter,
            sessions: Vec::new(),
            found: Some(found),
            next,
        }
    }

    /// The page of a `sessions/list` answer (asked with `filter.q` as `contains`: the key
    /// names the channel and peer).
    pub(crate) fn of(frame: Frame, filter: SessionFilter, list: SessionList) -> ConversationsPage {
        let sessions = list
            .sessions
            .into_iter()
            .map(|s| SessionLine {
                channel: channel_of(&s.session_key),
                session_key: s.session_key,
                agent_id: s.agent_id,
                kind: s.kind,
                label: s.label,
                last_activity: s.last_activity,
                queue_depth: s.queue_depth,
            })
            .collect();
        let next = list
            .next_cursor
            .map(|c| ConversationsPage::next_of(&filter, &c));
        ConversationsPage {
            frame,
            filter,
            sessions,
            found: None,
            next,
        }
    }
}

/// The channel a session key names: `agent:<id>:<channel>:…` for a conversation's key.
fn channel_of(key: &str) -> String {
    let mut parts = key.split(':').skip(2);
    match parts.next() {
        Some(rest) if parts.next().is_some() && rest != "spawn" => rest.to_string(),
        _ => "-".into(),
    }
}

/// One transcript line: who said it, its provenance, when, what.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Line {
    pub id: i64,
    pub provenance: String,
    /// The sender in a few words (`Ada (42) on telegram`, `agent main`, `A2A peer partner`).
    pub sender: String,
    /// The sender's kind (`person`, `agent`, `peer_agent`, …): the line's style.
    pub sender_kind: &'static str,
    pub at: String,
    pub text: String,
    /// A gated inbound message: the gate and the setting that decided
    /// (`gated: not-mentioned by requireMention (…)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// A gated message: what became of it (never given to the agent, or kept as context).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fate: Option<&'static str>,
}

impl Line {
    pub(crate) fn of(m: HistoryMessage) -> Line {
        Line {
            id: m.id,
            provenance: m.provenance.to_string(),
            sender: m.sender.label(),
            sender_kind: m.sender.kind(),
            at: m.at,
            text: m.text,
            gate: m.gated.as_ref().map(|g| g.label()),
            fate: m.gated.as_ref().map(|g| g.fate()),
        }
    }

    pub(crate) fn of_history(history: History) -> Vec<Line> {
        history.messages.into_iter().map(Line::of).collect()
    }
}

/// A run as a line of a list.
pub(crate) struct RunLine {
    pub run_id: String,
    pub kind: String,
    pub from: String,
    pub to: String,
    pub state: String,
    pub message: String,
    pub created_at: String,
    pub error: Option<String>,
    pub depth: usize,
}

impl RunLine {
    fn of(r: &RunView, depth: usize) -> RunLine {
        RunLine {
            run_id: r.run_id.clone(),
            kind: r.kind.to_string(),
            from: r
                .requester_session_key
                .clone()
                .unwrap_or_else(|| "operator".into()),
            to: r.target_session_key.clone(),
            state: r.state.to_string(),
            message: r.message.clone(),
            created_at: r.created_at.clone(),
            error: r.error.clone(),
            depth,
        }
    }
}

#[derive(Template)]
#[template(path = "session.html")]
pub(crate) struct SessionPage {
    pub frame: Frame,
    pub key: String,
    pub agent_id: String,
    pub kind: &'static str,
    pub queue_depth: usize,
    pub parent: Option<String>,
    pub lines: Vec<Line>,
    /// The newest line shown: the live view sends those after it.
    pub last_id: i64,
    pub runs: Vec<RunLine>,
    pub children: Vec<String>,
}

impl SessionPage {
    pub(crate) fn of(frame: Frame, detail: SessionDetail, history: History) -> SessionPage {
        let lines = Line::of_history(history);
        SessionPage {
            frame,
            agent_id: detail.agent_id.unwrap_or_default(),
            kind: detail.kind,
            queue_depth: detail.queue_depth,
            parent: detail.child.map(|c| c.parent_session_key),
            last_id: lines.last().map_or(0, |l| l.id),
            lines,
            runs: detail.runs.iter().map(|r| RunLine::of(r, 0)).collect(),
            children: detail.children.into_iter().map(|c| c.session_key).collect(),
            key: detail.session_key,
        }
    }
}

#[derive(Template)]
#[template(path = "runs.html")]
pub(crate) struct RunsPage {
    pub frame: Frame,
    pub count: usize,
    /// Runs held by a loop pause.
    pub paused: Vec<RunLine>,
    /// Every run of the page, each under the run that spawned its requester's session.
    pub nodes: Vec<RunLine>,
    pub tasks: Vec<TaskView>,
}

impl RunsPage {
    /// The runs of a `runs/list` page drawn as a tree: a run made from a session that another
    /// run of the page spawned sits under that run (newest first among siblings).
    pub(crate) fn of(frame: Frame, runs: &[RunView], tasks: Vec<TaskView>) -> RunsPage {
        use std::collections::HashMap;
        // The run that spawned each session, among these.
        let spawned_by: HashMap<&str, usize> = runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind == crate::state::RunKind::Spawn)
            .map(|(i, r)| (r.target_session_key.as_str(), i))
            .collect();
        let parent_of = |r: &RunView| {
            r.requester_session_key
                .as_deref()
                .and_then(|k| spawned_by.get(k).copied())
        };
        let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut roots = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            match parent_of(r).filter(|&p| p != i) {
                Some(p) => children.entry(p).or_default().push(i),
                None => roots.push(i),
            }
        }
        let mut nodes = Vec::with_capacity(runs.len());
        let mut seen = vec![false; runs.len()];
        let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
        while let Some((i, depth)) = stack.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            nodes.push(RunLine::of(&runs[i], depth.min(12)));
            if let Some(kids) = children.get(&i) {
                stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
            }
        }
        // A cycle (never made by the Hub) still shows every run.
        for (i, r) in runs.iter().enumerate() {
            if !seen[i] {
                nodes.push(RunLine::of(r, 0));
            }
        }
        RunsPage {
            frame,
            count: runs.len(),
            paused: runs
                .iter()
                .filter(|r| r.state == crate::state::RunState::Paused)
                .map(|r| RunLine::of(r, 0))
                .collect(),
            nodes,
            tasks,
        }
    }
}

/// The audit page's filters, as typed (the names of `GET /v1/audit`'s query).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditQuery {
    #[serde(default)]
    pub agent_id: String,
    #[serde(default)]
    pub session_key: String,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub task_id: String,
    #[serde(default)]
    pub since: String,
}

impl AuditQuery {
    /// The same filters as a query string.
    pub(crate) fn query(&self) -> String {
        let mut url = form_urlencoded::Serializer::new(String::new());
        for (name, value) in [
            ("agentId", &self.agent_id),
            ("sessionKey", &self.session_key),
            ("runId", &self.run_id),
            ("taskId", &self.task_id),
            ("since", &self.since),
        ] {
            if !value.trim().is_empty() {
                url.append_pair(name, value.trim());
            }
        }
        url.finish()
    }
}

#[derive(Template)]
#[template(path = "audit.html")]
pub(crate) struct AuditPage {
    pub frame: Frame,
    pub filter: AuditQuery,
    pub events: Vec<AuditEvent>,
    /// The JSON export of the same filters.
    pub export: String,
}

/// The route form, as typed.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct RouteForm {
    #[serde(default)]
    pub channel: String,
    #[serde(default)]
    pub account: String,
    #[serde(default)]
    pub peer_kind: String,
    #[serde(default)]
    pub peer: String,
    #[serde(default)]
    pub sender: String,
    #[serde(default)]
    pub text: String,
}

impl RouteForm {
    /// The route input the form describes (as `POST /v1/route` takes it).
    pub(crate) fn input(&self) -> Result<RouteInput, String> {
        if self.channel.trim().is_empty() {
            return Err("a channel is needed (telegram, slack, discord, …)".into());
        }
        let peer = match (self.peer_kind.trim(), self.peer.trim()) {
            (_, "") => None,
            ("", _) => {
                return Err("a peer id needs its kind: direct, group or channel".into());
            }
            (kind, id) => Some(crate::routing::Peer {
                kind: kind.to_string(),
                id: id.to_string(),
            }),
        };
        Ok(RouteInput {
            channel: self.channel.trim().to_string(),
            account_id: Some(self.account.trim())
                .filter(|a| !a.is_empty())
                .map(str::to_string),
            peer,
            ..RouteInput::default()
        })
    }
}

/// What the router said, and the tiers it walked.
pub(crate) struct RouteAnswer {
    pub agent_id: String,
    pub session_key: String,
    pub tier: &'static str,
    /// `bindings.yaml:12`, or why no binding decided.
    pub binding: String,
    pub generation: u64,
    pub explanation: String,
    /// The inbound policy's verdict on the sender and text (policy.md).
    pub gate: String,
}

impl RouteAnswer {
    /// `input` routed and explained on `plan` (the walk `route --explain` shows), and what the
    /// inbound `policy` would do with `form`'s sender and text.
    pub(crate) fn of(
        plan: &RoutingPlan,
        policy: &crate::policy::PolicyPlan,
        generation: u64,
        input: &RouteInput,
        form: &RouteForm,
    ) -> RouteAnswer {
        use std::fmt::Write as _;
        let explanation = plan.explain(input);
        let r = &explanation.result;
        let mut walk = String::new();
        for (n, t) in explanation.tiers.iter().enumerate() {
            let tier = t.tier.as_str();
            match &t.outcome {
                TierOutcome::Skipped(why) => {
                    let _ = writeln!(walk, "{}. {tier}: skipped, {}", n + 1, why.reason(input));
                }
                TierOutcome::Tried { key, candidates } => {
                    let at = key
                        .as_deref()
                        .map_or_else(String::new, |k| format!(" at `{k}`"));
                    let _ = writeln!(
                        walk,
                        "{}. {tier}: {}{at}",
                        n + 1,
                        crate::plural::plural(candidates.len(), "candidate", "candidates")
                    );
                    for &(b, verdict) in candidates {
                        let binding = &plan.bindings[b];
                        let place = format!("{}:{}", binding.source.file, binding.source.line);
                        match verdict {
                            Ok(()) => {
                                let _ =
                                    writeln!(walk, "   match {place} agent {}", binding.agent_id);
                            }
                            Err(miss) => {
                                let _ = writeln!(
                                    walk,
                                    "   miss  {place} agent {}: {}",
                                    binding.agent_id,
                                    miss.reason(plan, b, t.tier, input)
                                );
                            }
                        }
                    }
                }
            }
        }
        if explanation.tiers.len() >= MatchedBy::TIERS.len() {
            let _ = writeln!(
                walk,
                "{}. default: agent {}",
                explanation.tiers.len() + 1,
                r.agent_id
            );
        }
        let sender = Some(form.sender.trim()).filter(|s| !s.is_empty());
        let message = crate::policy::Message {
            conversation: crate::policy::Conversation::of_peer_kind(
                input.peer.as_ref().map(|p| p.kind.as_str()),
            ),
            sender_id: sender,
            is_bot: false,
            mentions: &[],
            reply_to_sender_id: None,
            in_thread: false,
            text: &form.text,
            guild_id: None,
            roles: &[],
        };
        let gate = match policy.verdict(
            &r.channel,
            &r.account_id,
            &r.agent_id,
            input.peer.as_ref().map(|p| p.id.as_str()),
            None,
            &message,
            false,
        ) {
            None => format!(
                "not gated: channels.yaml declares no account `{}/{}`, so the Access API refuses the message before any gate",
                r.channel, r.account_id
            ),
            Some(crate::policy::Verdict::Deliver) => "deliver".to_string(),
            Some(crate::policy::Verdict::Gated { gate, unless }) => {
                let unless = match unless {
                    Some(crate::policy::Unless::SenderPaired) => {
                        ", unless the operator approved the sender by pairing"
                    }
                    Some(crate::policy::Unless::ThreadAnswered) => {
                        ", unless the agent already answered in the thread"
                    }
                    None => "",
                };
                format!(
                    "gated: {} (decided by {}){unless}; {}",
                    gate.reason.as_str(),
                    &*gate.rule,
                    gate.reason.hint()
                )
            }
        };
        RouteAnswer {
            gate,
            agent_id: r.agent_id.to_string(),
            session_key: r.session_key.to_string(),
            tier: r.matched_by.as_str(),
            binding: r.binding.as_ref().map_or_else(
                || "no binding: the default agent".to_string(),
                |b| format!("{}:{}", b.file, b.line),
            ),
            generation,
            explanation: walk,
        }
    }
}

#[derive(Template)]
#[template(path = "routes.html")]
pub(crate) struct RoutesPage {
    pub frame: Frame,
    pub form: RouteForm,
    pub error: Option<String>,
    pub result: Option<RouteAnswer>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ApprovalSource, ApprovalState, RunKind, RunState};

    fn frame(title: &'static str) -> Frame {
        Frame {
            title,
            active: title,
            csrf: "c5rf".into(),
        }
    }

    /// The page's `<main>`: what a snapshot holds (the frame around it is the same everywhere).
    fn main_of(html: &str) -> &str {
        let start = html.find("<main").unwrap();
        let end = html.find("</main>").unwrap();
        &html[start..end + "</main>".len()]
    }

    #[test]
    fn the_overview_shows_health_reasons_the_rejected_edit_agents_and_adapters() {
        let o = Overview {
            health: "degraded",
            reasons: vec!["runtime `beta` is in a crash loop (3 restarts)".into()],
            config_hash: Some("sha256:abc".into()),
            applied_at: Some("2026-12-05T10:00:00Z".into()),
            routing_generation: Some(7),
            rejected: Some(RejectedEdit {
                since: "2026-12-05T10:05:00Z".into(),
                diagnostics: vec!["agents.yaml:3:5: error[schema]: unknown key `modle`".into()],
            }),
            blocked: Vec::new(),
            agents: vec![AgentRow {
                agent_id: "beta".into(),
                kind: "acp".into(),
                state: "crash_loop".into(),
                restarts: 3,
                last_error: Some("exit status 1".into()),
                sandbox: "all (bwrap, network host)".into(),
                model: "gpt-5 (not applied: the runtime offers no model option)".into(),
                queue: 2,
                budgets: vec![
                    ("turns this hour".into(), "4".into(), "60".into()),
                    ("tokens today".into(), "unknown".into(), "100000".into()),
                ],
            }],
            adapters: vec![AdapterRow {
                channel: "telegram".into(),
                account: "default".into(),
                inbound: "open".into(),
                reason: None,
                connection: "connected since 2026-12-05T10:00:01Z".into(),
                last_error: None,
                last_event: "2026-12-05T10:06:00Z".into(),
            }],
        };
        let html = OverviewPage {
            frame: frame("Overview"),
            o,
        }
        .render()
        .unwrap();
        insta::assert_snapshot!("overview", main_of(&html));
        // The navigation marks the page, and the sign-out form carries the CSRF token.
        assert!(html.contains(r#"<a href="/console/" aria-current="page">Overview</a>"#));
        assert!(html.contains(r#"name="csrf" value="c5rf""#));
        assert!(!html.contains("<script>"), "no inline script");
    }

    fn approval(action: serde_json::Value) -> ApprovalRecord {
        ApprovalRecord {
            id: "ap12345678".into(),
            source: ApprovalSource::Permission,
            agent_id: "alpha".into(),
            session_key: Some("agent:alpha:slack:group:ga".into()),
            runtime_session_id: None,
            run_id: None,
            requester: serde_json::json!({}),
            action,
            content_hash: "sha256:0f0f".into(),
            options: serde_json::json!([]),
            policy_hash: "sha256:p".into(),
            route: "operator".into(),
            origin: None,
            state: ApprovalState::Pending,
            created_at: "2026-12-05T10:00:00Z".into(),
            expires_at: "2026-12-05T10:02:00Z".into(),
            decided_at: None,
            decided_by: None,
            decision: None,
            note: String::new(),
            preview: None,
        }
    }

    #[test]
    fn an_approval_shows_its_exact_action_and_hash_escaped_with_the_three_verdicts() {
        let record = approval(serde_json::json!({"kind": "execute",
            "title": "rm -rf build <script>alert(1)</script>"}));
        let page = ApprovalsPage {
            frame: frame("Approvals"),
            approvals: vec![ApprovalCard::of(&record)],
            tasks: Vec::new(),
        };
        let html = page.render().unwrap();
        insta::assert_snapshot!("approvals", main_of(&html));
        assert!(!html.contains("<script>alert"), "the action is escaped");
        assert!(html.contains("sha256:0f0f"));
        for verdict in ["approve", "always", "deny"] {
            assert!(html.contains(&format!(r#"value="{verdict}""#)), "{verdict}");
        }
    }

    fn run(id: &str, kind: RunKind, from: Option<&str>, to: &str, state: RunState) -> RunView {
        RunView {
            run_id: id.into(),
            kind,
            source_tool: "sessions_spawn".into(),
            state,
            requester_agent_id: None,
            requester_session_key: from.map(str::to_string),
            target_agent_id: "beta".into(),
            target_session_key: to.into(),
            correlation_id: "c".into(),
            mode: None,
            cleanup: None,
            timeout_seconds: None,
            message: "do it".into(),
            reply: None,
            error: None,
            created_at: "2026-12-05T10:00:00Z".into(),
            started_at: None,
            finished_at: None,
        }
    }

    #[test]
    fn runs_are_drawn_under_the_run_that_spawned_their_requester_and_pauses_get_buttons() {
        // Newest first, as `runs/list` gives them.
        let runs = [
            run(
                "r3",
                RunKind::Send,
                Some("agent:beta:spawn:s1"),
                "agent:gamma:main",
                RunState::Paused,
            ),
            run(
                "r2",
                RunKind::Send,
                None,
                "agent:alpha:main",
                RunState::Completed,
            ),
            run(
                "r1",
                RunKind::Spawn,
                Some("agent:alpha:main"),
                "agent:beta:spawn:s1",
                RunState::Running,
            ),
        ];
        let page = RunsPage::of(frame("Runs and tasks"), &runs, Vec::new());
        let order: Vec<(&str, usize)> = page
            .nodes
            .iter()
            .map(|n| (n.run_id.as_str(), n.depth))
            .collect();
        assert_eq!(order, [("r2", 0), ("r1", 0), ("r3", 1)]);
        assert_eq!(page.paused.len(), 1);
        let html = page.render().unwrap();
        insta::assert_snapshot!("runs", main_of(&html));
        assert!(html.contains(r#"action="/console/runs/r3/resume""#));
        assert!(html.contains(r#"action="/console/runs/r3/stop""#));
    }

    #[test]
    fn a_session_key_names_its_channel() {
        assert_eq!(channel_of("agent:alpha:slack:group:ga"), "slack");
        assert_eq!(channel_of("agent:alpha:main"), "-");
        assert_eq!(channel_of("agent:beta:spawn:s1"), "-");
        assert_eq!(channel_of("nonsense"), "-");
    }

    #[test]
    fn the_route_form_says_what_is_missing() {
        let form = RouteForm {
            channel: " ".into(),
            ..RouteForm::default()
        };
        assert!(form.input().unwrap_err().contains("channel"));
        let form = RouteForm {
            channel: "slack".into(),
            peer: "gb".into(),
            ..RouteForm::default()
        };
        assert!(form.input().unwrap_err().contains("kind"));
        let form = RouteForm {
            channel: "slack".into(),
            peer_kind: "group".into(),
            peer: "gb".into(),
            ..RouteForm::default()
        };
        let input = form.input().unwrap();
        assert_eq!(input.peer.unwrap().id, "gb");
        assert_eq!(input.account_id, None);
    }

    #[test]
    fn a_transcript_names_who_said_each_line_escaped() {
        use crate::access::sender::Sender;
        use crate::state::Provenance;
        let m = |id, provenance, sender, text: &str| HistoryMessage {
            id,
            provenance,
            sender,
            at: format!("2026-12-05T10:00:0{id}Z"),
            text: text.into(),
            gated: None,
        };
        let history = History {
            session_key: "agent:main:telegram:direct:42".into(),
            messages: vec![
                m(
                    1,
                    Provenance::Inbound,
                    Sender::Person {
                        channel: Some("telegram".into()),
                        id: Some("42".into()),
                        name: Some("<Ada>".into()),
                        is_bot: false,
                    },
                    "deploy <b>now</b>",
                ),
                m(
                    2,
                    Provenance::Agent,
                    Sender::Agent {
                        agent_id: Some("main".into()),
                        run_id: None,
                    },
                    "deployed",
                ),
                m(
                    3,
                    Provenance::InterSession,
                    Sender::PeerAgent {
                        agent_id: Some("research".into()),
                        session_key: Some("agent:research:main".into()),
                        tool: Some("sessions_send".into()),
                        run_id: Some("r-1".into()),
                    },
                    "the numbers",
                ),
                m(
                    4,
                    Provenance::A2a,
                    Sender::A2aPeer {
                        peer: "partner".into(),
                        run_id: Some("r-2".into()),
                    },
                    "a question",
                ),
                m(5, Provenance::Reset, Sender::Deepcli, "new session"),
                HistoryMessage {
                    gated: Some(crate::access::gated_line::Gated {
                        reason: "not-mentioned".into(),
                        rule: "requireMention (<channels.yaml>:7)".into(),
                    }),
                    ..m(
                        6,
                        Provenance::Inbound,
                        Sender::Person {
                            channel: Some("telegram".into()),
                            id: Some("43".into()),
                            name: Some("Bob".into()),
                            is_bot: false,
                        },
                        "an aside",
                    )
                },
            ],
            next_cursor: None,
        };
        let detail = SessionDetail {
            session_key: "agent:main:telegram:direct:42".into(),
            agent_id: Some("main".into()),
            kind: "direct",
            queue_depth: 0,
            child: None,
            children: Vec::new(),
            runs: Vec::new(),
            system_section: None,
        };
        let html = SessionPage::of(frame("Conversations"), detail, history)
            .render()
            .unwrap();
        insta::assert_snapshot!("session", main_of(&html));
        assert!(!html.contains("<Ada>"), "escaped");
        assert!(!html.contains("<b>now"));
        assert!(!html.contains("<channels.yaml>"), "the rule is escaped too");
        assert!(html.contains(r#"class="line inbound from-person gated" data-id="6""#));
        // The live view's event carries the same words.
        let line = serde_json::to_value(Line::of(HistoryMessage {
            id: 9,
            provenance: Provenance::A2a,
            sender: Sender::A2aPeer {
                peer: "partner".into(),
                run_id: None,
            },
            at: "t".into(),
            text: "x".into(),
            gated: None,
        }))
        .unwrap();
        assert_eq!(
            line,
            serde_json::json!({"id": 9, "provenance": "a2a", "sender": "A2A peer partner",
                               "senderKind": "a2a_peer", "at": "t", "text": "x"})
        );
        // A gated message's event says which gate and what became of it.
        let gated = serde_json::to_value(Line::of(HistoryMessage {
            id: 10,
            provenance: Provenance::Inbound,
            sender: Sender::Person {
                channel: Some("telegram".into()),
                id: Some("42".into()),
                name: None,
                is_bot: false,
            },
            at: "t".into(),
            text: "hello".into(),
            gated: Some(crate::access::gated_line::Gated {
                reason: "pairing-required".into(),
                rule: "dmPolicy (built-in default: pairing)".into(),
            }),
        }))
        .unwrap();
        assert_eq!(
            gated,
            serde_json::json!({"id": 10, "provenance": "inbound", "sender": "42 on telegram",
                               "senderKind": "person", "at": "t", "text": "hello",
                               "gate": "gated: pairing-required by dmPolicy (built-in default: pairing)",
                               "fate": "not delivered: the agent never saw it"})
        );
    }

    #[test]
    fn a_search_lists_the_lines_found_with_their_sessions_and_the_next_page() {
        use crate::hub::operator::TranscriptSearch;
        let search: TranscriptSearch = TranscriptSearch {
            text: "deploy".into(),
            count: 1,
            found: vec![FoundLine {
                id: 812,
                session_key: "agent:beta:slack:group:gb".into(),
                provenance: crate::state::Provenance::Inbound,
                at: "2026-12-05T10:00:00Z".into(),
                snippet: "…the <deploy> failed…".into(),
            }],
            next_cursor: Some("812".into()),
        };
        let filter = SessionFilter {
            text: "deploy".into(),
            ..SessionFilter::default()
        };
        let html = ConversationsPage::of_search(frame("Conversations"), filter, search)
            .render()
            .unwrap();
        insta::assert_snapshot!("search", main_of(&html));
        assert!(html.contains("text=deploy&#38;cursor=812"), "{html}");
        assert!(
            !html.contains("<table>"),
            "no session list beside the lines found"
        );
    }
}
