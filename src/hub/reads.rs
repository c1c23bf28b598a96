//! The operator's reads that the state database answers alone — `sessions/list`,
//! `sessions/show`, `sessions/history`, `runs/list`, `runs/show` — so that the running
//! controller and the CLI without one (`operator::offline`) give the same answers from the same
//! code. What only a running controller knows (a session's queue depth) is filled in by it;
//! offline it is 0, nothing being queued where nothing runs.

use serde::{Deserialize, Serialize};

use super::calls::kind_of;
use super::runs::{RunDetail, RunView};
use super::store::{HubStore, RunFilter};
use crate::state::{RunState, StateError};

/// Why a read gave no answer.
#[derive(Debug)]
pub(super) enum ReadError {
    /// A paging parameter that does not read.
    Params(String),
    NotFound(String),
    State(StateError),
}

impl From<StateError> for ReadError {
    fn from(e: StateError) -> ReadError {
        ReadError::State(e)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SessionsParams {
    pub agent_id: Option<String>,
    pub kind: Option<String>,
    /// Only the sessions whose key contains this (any case): a channel, a peer's id.
    pub contains: Option<String>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HistoryParams {
    pub session_key: String,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
    /// Every segment of the transcript, not only the one since the last `/new`.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SearchParams {
    /// The words every line found has (the last one also as a prefix).
    pub text: String,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RunsParams {
    pub state: Option<RunState>,
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
    #[serde(default)]
    pub active: bool,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

/// `sessions/list`: one page of the sessions, newest activity first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionList {
    pub count: usize,
    pub sessions: Vec<SessionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionSummary {
    pub session_key: String,
    pub agent_id: String,
    pub kind: &'static str,
    pub label: Option<String>,
    pub parent_session_key: Option<String>,
    pub last_activity: Option<String>,
    pub queue_depth: usize,
}

/// `sessions/show`: a session, its spawn (if it is a child), its children and recent runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionDetail {
    pub session_key: String,
    pub agent_id: Option<String>,
    pub kind: &'static str,
    pub queue_depth: usize,
    pub child: Option<ChildView>,
    pub children: Vec<ChildLink>,
    pub runs: Vec<RunView>,
    /// Asked for (`prompt`): the system section the session was last given, or null when it
    /// was given none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_section: Option<Option<SectionView>>,
}

/// The system section a session was last given (conversations.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SectionView {
    /// The runtime session it went to.
    pub runtime_session_id: String,
    /// Of everything but its date and time.
    pub hash: String,
    pub at: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildView {
    pub parent_session_key: String,
    pub depth: u32,
    pub label: Option<String>,
    pub mode: crate::state::SpawnMode,
    pub cleanup: crate::state::Cleanup,
    pub run_id: String,
    pub closed_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildLink {
    pub session_key: String,
    pub run_id: String,
    pub closed_at: Option<String>,
}

/// `sessions/history`: one page of a session's transcript, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct History {
    pub session_key: String,
    pub messages: Vec<HistoryMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HistoryMessage {
    pub id: i64,
    pub provenance: crate::state::Provenance,
    /// Who said it (hub.md, "sessions history").
    pub sender: crate::access::sender::Sender,
    pub at: String,
    pub text: String,
    /// A gated inbound message (its provenance `inbound`): the gate that kept it from the
    /// agent and the setting that decided (hub.md, "sessions history"). Absent on every
    /// line the agent was given or said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gated: Option<crate::access::gated_line::Gated>,
}

/// `sessions/search`: the transcript lines of every session with the words, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TranscriptSearch {
    pub text: String,
    pub count: usize,
    pub found: Vec<FoundLine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FoundLine {
    /// The line's id in its session's history.
    pub id: i64,
    pub session_key: String,
    pub provenance: crate::state::Provenance,
    pub at: String,
    /// The words around the match (`…` where the text was cut).
    pub snippet: String,
}

/// `runs/list`: one page of the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunList {
    pub count: usize,
    pub runs: Vec<RunView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The page an operator list asks for (hub.md, "Paging").
pub(super) fn paged(
    limit: Option<usize>,
    cursor: Option<&str>,
) -> Result<super::page::Page, ReadError> {
    super::page::Page::new(limit, cursor, super::page::DEFAULT_LIMIT)
        .map_err(|bad| ReadError::Params(bad.to_string()))
}

pub(super) fn sessions(s: &HubStore, p: &SessionsParams) -> Result<SessionList, ReadError> {
    let page = paged(p.limit, p.cursor.as_deref())?;
    // The page and one more: whether there is a next page.
    let wanted = page.offset.saturating_add(page.limit).saturating_add(1);
    let mut found = Vec::new();
    let mut after = None;
    loop {
        let contains = p
            .contains
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty());
        let (chunk, next) = s.sessions_by_activity(
            p.agent_id.as_deref(),
            contains,
            after.as_ref(),
            super::page::CHUNK,
        )?;
        found.extend(
            chunk
                .into_iter()
                .filter(|s| p.kind.as_ref().is_none_or(|k| k == kind_of(&s.session_key))),
        );
        match next {
            Some(mark) if found.len() < wanted => after = Some(mark),
            _ => break,
        }
    }
    let (all, next_cursor) = page.of(found);
    let mut sessions = Vec::with_capacity(all.len());
    for known in all {
        let child = s.child(&known.session_key)?;
        sessions.push(SessionSummary {
            kind: kind_of(&known.session_key),
            label: child.as_ref().and_then(|c| c.label.clone()),
            parent_session_key: child.map(|c| c.parent_session_key),
            last_activity: Some(known.last_at),
            queue_depth: 0,
            agent_id: known.agent_id,
            session_key: known.session_key,
        });
    }
    Ok(SessionList {
        count: sessions.len(),
        sessions,
        next_cursor,
    })
}

pub(super) fn session(s: &HubStore, key: &str, prompt: bool) -> Result<SessionDetail, ReadError> {
    let child = s.child(key)?;
    if !s.session_exists(key)? && child.is_none() {
        return Err(ReadError::NotFound(format!("no session `{key}`")));
    }
    let runs = s.runs(&RunFilter {
        target_session_key: Some(key.to_string()),
        limit: 20,
        ..RunFilter::default()
    })?;
    let section = if prompt { s.given_section(key)? } else { None };
    Ok(SessionDetail {
        session_key: key.to_string(),
        agent_id: super::store::agent_of(key).map(str::to_string),
        kind: kind_of(key),
        queue_depth: 0,
        child: child.map(|c| ChildView {
            parent_session_key: c.parent_session_key,
            depth: c.depth,
            label: c.label,
            mode: c.mode,
            cleanup: c.cleanup,
            run_id: c.run_id,
            closed_at: c.closed_at,
        }),
        children: s
            .children_of(key)?
            .into_iter()
            .map(|c| ChildLink {
                session_key: c.session_key,
                run_id: c.run_id,
                closed_at: c.closed_at,
            })
            .collect(),
        runs: runs.iter().map(RunView::of).collect(),
        system_section: prompt.then(|| {
            section.map(|g| SectionView {
                runtime_session_id: g.runtime_session_id,
                hash: g.hash,
                at: g.at,
                text: g.text,
            })
        }),
    })
}

pub(super) fn history(s: &HubStore, p: &HistoryParams) -> Result<History, ReadError> {
    let page = paged(p.limit, p.cursor.as_deref())?;
    let rows = s.history(&p.session_key, page.limit, page.offset, p.all, true)?;
    let next_cursor = (rows.len() == page.limit).then(|| page.after(rows.len()));
    Ok(History {
        session_key: p.session_key.clone(),
        messages: rows
            .into_iter()
            .map(|r| HistoryMessage {
                id: r.id,
                provenance: r.provenance,
                sender: r.sender,
                at: r.at,
                text: r.text,
                gated: r.gated,
            })
            .collect(),
        next_cursor,
    })
}

/// `sessions/search`: a page of the lines found; the cursor is the last line's id (the next
/// page is older).
pub(super) fn search(s: &HubStore, p: &SearchParams) -> Result<TranscriptSearch, ReadError> {
    if p.text.split_whitespace().next().is_none() {
        return Err(ReadError::Params(
            "`text` is empty: which words? (`deploy failed`, say)".into(),
        ));
    }
    let limit = p
        .limit
        .unwrap_or(super::page::DEFAULT_LIMIT)
        .clamp(1, super::page::MAX_LIMIT);
    let before = match p.cursor.as_deref() {
        None => None,
        Some(c) => Some(c.parse::<i64>().map_err(|_| {
            ReadError::Params(format!(
                "cursor `{c}` is not one this search gave (a line id)"
            ))
        })?),
    };
    let rows = s.search_transcript(&p.text, before, limit)?;
    let next_cursor = (rows.len() == limit)
        .then(|| rows.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(TranscriptSearch {
        text: p.text.clone(),
        count: rows.len(),
        found: rows
            .into_iter()
            .map(|r| FoundLine {
                id: r.id,
                session_key: r.session_key,
                provenance: r.provenance,
                at: r.at,
                snippet: r.snippet,
            })
            .collect(),
        next_cursor,
    })
}

pub(super) fn runs(s: &HubStore, p: &RunsParams) -> Result<RunList, ReadError> {
    let page = paged(p.limit, p.cursor.as_deref())?;
    // One more than the page: whether there is a next.
    let filter = RunFilter {
        state: p.state,
        target_session_key: p.session_key.clone(),
        agent_id: p.agent_id.clone(),
        active: p.active,
        limit: page.limit + 1,
        offset: page.offset,
        ..RunFilter::default()
    };
    let mut runs = s.runs(&filter)?;
    let more = runs.len() > page.limit;
    runs.truncate(page.limit);
    Ok(RunList {
        count: runs.len(),
        runs: runs.iter().map(RunView::of).collect(),
        next_cursor: more.then(|| page.after(runs.len())),
    })
}

/// A run with its events; `NotFound` when there is no such run.
pub(super) fn run(s: &HubStore, id: &str) -> Result<RunDetail, ReadError> {
    let Some(run) = s.run(id)? else {
        return Err(ReadError::NotFound(format!("no run `{id}`")));
    };
    Ok(RunDetail {
        run: RunView::of(&run),
        events: s.run_events(id)?,
    })
}
