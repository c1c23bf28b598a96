//! The audit trail (approvals.md, "Audit"): one timeline, oldest first, put together from what
//! the state database already records — config applies, inbound deliveries and their route,
//! Hub runs (sends and spawns with their correlation ids) and every state they entered — and
//! the records of budgets, cancels and loop pauses. Read only.
//!
//! No secret and no transcript text is copied into it: a message or reply is pointed at by its
//! transcript row (`transcript#<id>`), and only deepcli's own words (states, notes, refusals)
//! are shown. Each source is one function of [`SOURCES`]: adding a source (the approvals',
//! say) is adding one function there.

use super::db::{Backend, Conn, DbResult, Query, params};
use serde::Serialize;
use serde_json::Value;

use super::{Result, StateStore};

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub at: String,
    /// `apply`, `inbound`, `send`, `spawn`, `run`, `budget`, `cancel`, `loop`, `approval`,
    /// `outbound`, `task`, `push`.
    pub kind: &'static str,
    /// The sessions it involves (source first), for the filters and the reader.
    pub sessions: Vec<String>,
    pub run_id: Option<String>,
    pub correlation_id: Option<String>,
    /// The task it is a move or a message of (tasks.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The trace of the inbound message or Hub run, when traces were on (`up --otlp-endpoint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// deepcli's own sentence about it.
    pub summary: String,
    /// Rows that hold more (`transcript#12`): pointers, never copies.
    pub refs: Vec<String>,
}

/// Which events a timeline keeps.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Events involving a session of this agent.
    pub agent_id: Option<String>,
    /// Events involving this session.
    pub session_key: Option<String>,
    /// This run's events, and those of the runs its spawned session started.
    pub run_id: Option<String>,
    /// This task's story: its moves, the runs and approvals of its session, what its room
    /// was told.
    pub task_id: Option<String>,
    /// Events at or after this time (RFC 3339, as the state writes it).
    pub since: Option<String>,
    /// The newest this many (default 1000).
    pub limit: Option<usize>,
}

/// A source of events: reads its tables (from `filter.since` on) and says what happened.
pub(crate) type Source = fn(&Conn<'_>, &AuditFilter) -> DbResult<Vec<AuditEvent>>;

/// Every source, in the order events of one second are shown.
pub(crate) const SOURCES: &[(&str, Source)] = &[
    ("applies", applies),
    ("inbound", inbound),
    ("tasks", tasks),
    ("runs", runs),
    ("budgets", budget_refusals),
    ("cancels", cancels),
    ("loops", loop_pauses),
    ("approvals", approvals),
    ("outbound", outbound),
    ("prunes", prunes),
    ("push", push_attempts),
];

fn since(filter: &AuditFilter) -> &str {
    filter.since.as_deref().unwrap_or("")
}

fn agent_of(key: &str) -> Option<&str> {
    key.strip_prefix("agent:")?.split(':').next()
}

/// The timeline's length: the newest this many.
fn newest(filter: &AuditFilter) -> usize {
    filter.limit.unwrap_or(1000)
}

/// How many rows a busy source need read, newest first (its `LIMIT`). The timeline keeps the
/// newest [`newest`] events, so no source needs more than that many of its own — unless a
/// filter that drops events is left to [`keeps`] after the read: then every row from
/// `--since` on (SQLite's `LIMIT -1`, PostgreSQL's `LIMIT NULL`). `pushed` says which filters
/// the source's query applies itself.
fn bound(conn: &Conn<'_>, filter: &AuditFilter, pushed: Pushed) -> Option<i64> {
    let left = filter.run_id.is_some()
        || filter.task_id.is_some()
        || (filter.session_key.is_some() && !pushed.session)
        || (filter.agent_id.is_some() && !pushed.agent);
    let bound = (!left)
        .then(|| i64::try_from(newest(filter)).ok())
        .flatten();
    match conn.backend() {
        Backend::Sqlite => Some(bound.unwrap_or(-1)),
        Backend::Postgres => bound,
    }
}

/// A list of transcript rows' ids, `1,5,9`: the aggregate both backends take.
const IDS: &str = "string_agg(CAST(t.id AS TEXT), ',')";

/// The filters a source's query applies itself.
#[derive(Debug, Clone, Copy, Default)]
struct Pushed {
    session: bool,
    agent: bool,
}

/// A session key belongs to agent `?` as [`agent_of`] reads it: the SQL of `column`.
fn of_agent(column: &str, param: &str) -> String {
    let param = format!("CAST({param} AS TEXT)");
    format!(
        "({param} IS NULL OR {column} = 'agent:' || {param}
          OR substr({column}, 1, length({param}) + 7) = 'agent:' || {param} || ':')"
    )
}

/// The timeline `filter` asks for, oldest first.
pub(crate) fn timeline(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let mut events = Vec::new();
    for (_, source) in SOURCES {
        events.extend(source(conn, filter)?);
    }
    let runs = runs_of(conn, filter)?;
    events.retain(|e| keeps(filter, &runs, e));
    // Stable: events of one second keep their sources' order.
    events.sort_by(|a, b| a.at.cmp(&b.at));
    let limit = newest(filter);
    if events.len() > limit {
        events.drain(..events.len() - limit);
    }
    Ok(events)
}

/// The run ids `--run` covers: the run, and the runs its spawned session started (its tree).
fn runs_of(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<String>> {
    let Some(run) = &filter.run_id else {
        return Ok(Vec::new());
    };
    let tree: Vec<String> = conn.query_map(
        "WITH RECURSIVE tree(k) AS (
             SELECT target_session_key FROM hub_runs WHERE run_id = ?1 AND kind = 'spawn'
             UNION SELECT h.session_key FROM hub_sessions h JOIN tree ON h.parent_session_key = tree.k)
         SELECT run_id FROM hub_runs WHERE requester_session_key IN (SELECT k FROM tree)",
        params![run],
        |r| r.get(0),
    )?;
    Ok(std::iter::once(run.clone()).chain(tree).collect())
}

fn keeps(filter: &AuditFilter, runs: &[String], e: &AuditEvent) -> bool {
    if !runs.is_empty() && !e.run_id.as_ref().is_some_and(|r| runs.contains(r)) {
        return false;
    }
    if let Some(key) = &filter.session_key
        && !e.sessions.iter().any(|s| s == key)
    {
        return false;
    }
    if let Some(task) = &filter.task_id {
        let session = format!(":task:{task}");
        if e.task_id.as_ref() != Some(task)
            && !e
                .sessions
                .iter()
                .any(|s| s.starts_with("agent:") && s.ends_with(&session))
        {
            return false;
        }
    }
    if let Some(agent) = &filter.agent_id
        && !e.sessions.iter().any(|s| agent_of(s) == Some(agent))
    {
        return false;
    }
    true
}

/// Config applies (`history`): who, from where, what changed, the outcome. Not a session's:
/// shown when no agent, session or run is asked for.
fn applies(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    if filter.agent_id.is_some()
        || filter.session_key.is_some()
        || filter.run_id.is_some()
        || filter.task_id.is_some()
    {
        return Ok(Vec::new());
    }
    let rows = conn.query_map(
        r#"SELECT id, started_at, serial, "user", host, source, added, changed, removed, outcome, git_commit
         FROM history WHERE started_at >= ?1 ORDER BY id"#,
        params![since(filter)], |r| {
        let id: i64 = r.get(0)?;
        let git: Option<String> = r.get(10)?;
        Ok(AuditEvent {
            at: r.get(1)?,
            kind: "apply",
            sessions: Vec::new(),
            run_id: None,
            correlation_id: None,
            task_id: None,
            trace_id: None,
            summary: format!(
                "apply #{} by {}@{} ({}): {} added, {} changed, {} removed: {}{}",
                r.get::<i64>(2)?,
                r.get::<String>(3)?,
                r.get::<String>(4)?,
                r.get::<String>(5)?,
                r.get::<i64>(6)?,
                r.get::<i64>(7)?,
                r.get::<i64>(8)?,
                r.get::<String>(9)?,
                git.map_or(String::new(), |g| format!(" (git {g})")),
            ),
            refs: vec![format!("history#{id}")],
        })
    })?;
    Ok(rows)
}

/// What `state.retention` pruned (`prunes`): the hub's, not one agent's.
fn prunes(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    if filter.agent_id.is_some()
        || filter.session_key.is_some()
        || filter.run_id.is_some()
        || filter.task_id.is_some()
    {
        return Ok(Vec::new());
    }
    let rows = conn.query_map(
        "SELECT id, at, by, rows, detail FROM prunes WHERE at >= ?1 ORDER BY id",
        params![since(filter)],
        |r| {
            let id: i64 = r.get(0)?;
            Ok(AuditEvent {
                at: r.get(1)?,
                kind: "prune",
                sessions: Vec::new(),
                run_id: None,
                correlation_id: None,
                task_id: None,
                trace_id: None,
                summary: format!(
                    "retention pruned {} rows ({}) by the {}",
                    r.get::<i64>(3)?,
                    r.get::<String>(4)?,
                    r.get::<String>(2)?,
                ),
                refs: vec![format!("prunes#{id}")],
            })
        },
    )?;
    Ok(rows)
}

/// Inbound messages (`deliveries`): the conversation, the route, and what became of the
/// message; the message and the reply by transcript row.
fn inbound(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    // The newest deliveries the timeline can keep, read through the index on their times, put
    // back in time order; the transcript rows each recorded are kept with it (a delivery from
    // before schema 22 has none: they are looked for in its session's transcript).
    let sql = format!(
        "SELECT d.at, d.channel, d.account_id, d.peer_kind, d.peer_id, d.message_id, d.session_key, d.response,
                CASE WHEN d.asked_rows IS NOT NULL THEN d.asked_rows ELSE
                  (SELECT {IDS} FROM transcript t
                    WHERE t.session_key = d.session_key AND t.message_id = d.message_id AND t.provenance = 'inbound') END,
                CASE WHEN d.asked_rows IS NOT NULL THEN d.reply_row ELSE
                  (SELECT min(t.id) FROM transcript t
                    WHERE t.session_key = d.session_key AND t.provenance = 'agent'
                      AND t.id > (SELECT max(i.id) FROM transcript i
                                   WHERE i.session_key = d.session_key AND i.message_id = d.message_id)) END,
                d.trace_id
         FROM (SELECT rowid AS n, * FROM deliveries
                WHERE at >= ?1 AND (CAST(?3 AS TEXT) IS NULL OR session_key = ?3) AND {}
                ORDER BY at DESC, rowid DESC LIMIT ?2) d
         ORDER BY d.at, d.n",
        of_agent("session_key", "?4")
    );
    let pushed = Pushed {
        session: true,
        agent: true,
    };
    let args = params![
        since(filter),
        bound(conn, filter, pushed),
        filter.session_key,
        filter.agent_id
    ];
    let rows = conn.query_map(&sql, args, |r| {
        let peer_kind: String = r.get(3)?;
        let peer_id: String = r.get(4)?;
        let session: String = r.get(6)?;
        let response: Value = serde_json::from_str(&r.get::<String>(7)?).unwrap_or_default();
        let asked: Option<String> = r.get(8)?;
        let replied: Option<i64> = r.get(9)?;
        let matched = response["route"]["matchedBy"].as_str().unwrap_or("-");
        let outcome = if let Some(reason) = response["gated"]["reason"].as_str() {
            format!("gated ({reason})")
        } else if let Some(state) = response["state"].as_str() {
            format!(
                "{state} (the turn was cancelled after its time; cancel {})",
                response["cancel"].as_str().unwrap_or("?")
            )
        } else if response["reply"].is_object() {
            "answered".to_string()
        } else {
            "not delivered to a runtime".to_string()
        };
        let peer = if peer_kind.is_empty() {
            String::new()
        } else {
            format!(" {peer_kind}:{peer_id}")
        };
        let mut refs: Vec<String> = asked
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|id| format!("transcript#{id}"))
            .collect();
        if response["reply"].is_object()
            && let Some(id) = replied
        {
            refs.push(format!("transcript#{id}"));
        }
        Ok(AuditEvent {
            at: r.get(0)?,
            kind: "inbound",
            summary: format!(
                "{}/{}{peer} message {} → {session} (route {matched}): {outcome}",
                r.get::<String>(1)?,
                r.get::<String>(2)?,
                r.get::<String>(5)?,
            ),
            sessions: vec![session],
            run_id: None,
            correlation_id: None,
            task_id: None,
            trace_id: r.get(10)?,
            refs,
        })
    })?;
    Ok(rows)
}

/// Hub runs: each send or spawn (source → target, correlation id), then every state it
/// entered with deepcli's note; the message and the answer by transcript row (looked up for
/// the first event only, the one that shows them). In time order, as the index on the events'
/// times reads them: ordered by id alone, SQLite scanned every event there is.
fn runs(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    // The run a transcript row was written for, as its route records it.
    let run_of_row = match conn.backend() {
        Backend::Sqlite => "CASE WHEN json_valid(t.route) THEN t.route ->> '$.runId' END",
        Backend::Postgres => "t.route::jsonb ->> 'runId'",
    };
    let rows = conn.query_map(
        &format!(
            "SELECT r.run_id, r.kind, r.source_tool, r.requester_session_key, r.target_session_key,
                r.correlation_id, e.at, e.state, e.note, e.id,
                CASE WHEN e.note = 'accepted by the Hub' THEN
                  (SELECT {IDS} FROM transcript t
                    WHERE t.session_key = r.target_session_key AND {run_of_row} = r.run_id) END,
                r.trace_id
         FROM (SELECT * FROM hub_run_events WHERE at >= ?1 ORDER BY at DESC, id DESC LIMIT ?2) e
         JOIN hub_runs r ON r.run_id = e.run_id
         ORDER BY e.at, e.id"
        ),
        params![since(filter), bound(conn, filter, Pushed::default())],
        |r| {
            let run_id: String = r.get(0)?;
            let kind: String = r.get(1)?;
            let tool: String = r.get(2)?;
            let from: Option<String> = r.get(3)?;
            let to: String = r.get(4)?;
            let correlation: String = r.get(5)?;
            let state: Option<String> = r.get(7)?;
            let note: String = r.get(8)?;
            let rows: Option<String> = r.get(10)?;
            let trace_id: Option<String> = r.get(11)?;
            let sessions: Vec<String> = from.iter().cloned().chain([to.clone()]).collect();
            let first = note == "accepted by the Hub";
            let (kind, summary, refs) = if first {
                let refs = rows
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|id| format!("transcript#{id}"))
                    .collect();
                (
                    if kind == "spawn" { "spawn" } else { "send" },
                    format!(
                        "{} {} → {to} ({tool}, correlation {correlation}): {}",
                        kind,
                        from.as_deref().unwrap_or("operator"),
                        state.as_deref().unwrap_or("-"),
                    ),
                    refs,
                )
            } else {
                (
                    "run",
                    match &state {
                        Some(state) => format!("{state}: {note}"),
                        None => note,
                    },
                    Vec::new(),
                )
            };
            Ok(AuditEvent {
                at: r.get(6)?,
                kind,
                sessions,
                run_id: Some(run_id),
                correlation_id: Some(correlation),
                task_id: None,
                trace_id,
                summary,
                refs,
            })
        },
    )?;
    Ok(rows)
}

/// Turns and spawns a budget refused, in time order (the refusals' index on it; by id, SQLite
/// scanned every budget event).
fn budget_refusals(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(
        "SELECT * FROM (SELECT id, at, agent_id, session_key, run_id, budget, detail FROM budget_events
                        WHERE kind = 'refusal' AND at >= ?1 ORDER BY at DESC, id DESC LIMIT ?2)
         AS refusals ORDER BY at, id",
        params![since(filter), bound(conn, filter, Pushed::default())],
        |r| {
            let agent: String = r.get(2)?;
            let session: Option<String> = r.get(3)?;
            Ok(AuditEvent {
                at: r.get(1)?,
                kind: "budget",
                sessions: vec![session.unwrap_or_else(|| format!("agent:{agent}:main"))],
                run_id: r.get(4)?,
                correlation_id: None,
                task_id: None,
                trace_id: None,
                summary: format!(
                    "refused by {}: {}",
                    r.get::<String>(5)?,
                    r.get::<String>(6)?
                ),
                refs: vec![format!("budget_events#{}", r.get::<i64>(0)?)],
            })
        },
    )?;
    Ok(rows)
}

// The sources whose tables grow with the hub, each read from `--since` on through an index on
// its time (migrations 21 and 32), never by scanning the table: a year of them is a busy hub's
// hundreds of thousands of rows. `ORDER BY +id` sorts the rows found; a bare `ORDER BY id`
// has SQLite read the whole table in `id` order instead of seeking the time.

/// [`approvals`]' rows.
const APPROVAL_EVENTS: &str =
    "SELECT e.id, e.at, e.event, e.actor, e.note, a.id, a.source, a.agent_id,
        a.session_key, a.run_id, a.content_hash, a.decision
     FROM approval_events e JOIN approvals a ON a.id = e.approval_id
     WHERE e.at >= ?1 ORDER BY +e.id";

/// [`cancels`]' rows.
const CANCELS: &str =
    "SELECT id, requested_at, session_key, run_id, why, state, note FROM turn_cancels
     WHERE requested_at >= ?1 ORDER BY +id";

/// [`outbound`]'s rows: `coalesce(done_at, at) >= ?1`, written so an index can find it.
const OUTBOUND: &str =
    "SELECT seq, coalesce(done_at, at), session_key, cause, cause_id, channel, account_id,
        peer_kind, peer_id, thread_id, state, carrier, reason
     FROM outbox
     WHERE state IN ('posted', 'dead', 'held') AND (done_at >= ?1 OR (done_at IS NULL AND at >= ?1))
     ORDER BY +seq";

/// [`tasks`]' rows.
const TASK_EVENTS: &str =
    "SELECT e.seq, e.at, e.task_id, e.kind, e.actor, e.door, e.from_state, e.to_state,
        e.detail, t.session_key, t.room
     FROM task_events e JOIN tasks t ON t.id = e.task_id
     WHERE e.at >= ?1 AND (CAST(?2 AS TEXT) IS NULL OR e.task_id = ?2) ORDER BY +e.seq";

/// [`push_attempts`]' rows.
const PUSH_ATTEMPTS: &str =
    "SELECT p.id, p.at, p.task_id, p.peer, p.host, p.event, p.attempt, p.status, p.error,
        t.session_key
     FROM a2a_push_attempts p LEFT JOIN a2a_tasks t ON t.task_id = p.task_id
     WHERE p.at >= ?1 ORDER BY +p.id";

/// What happened to each approval an agent asked for: asked (what, its content hash), announced,
/// decided (by whom, which option), refused chat senders, expired, voided, a management
/// request's result. The action itself stays in its `approvals` row.
fn approvals(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(APPROVAL_EVENTS, params![since(filter)], |r| {
        let event: String = r.get(2)?;
        let actor: Option<String> = r.get(3)?;
        let note: String = r.get(4)?;
        let id: String = r.get(5)?;
        let source: String = r.get(6)?;
        let agent: String = r.get(7)?;
        let session: Option<String> = r.get(8)?;
        let hash: String = r.get(10)?;
        let decision: Option<String> = r.get(11)?;
        let what = match source.as_str() {
            "management" => "management request",
            _ => "permission request",
        };
        let mut summary = match event.as_str() {
            // The hash's first 12 hex digits name the content well enough to read.
            "asked" => format!("{what} {id} asked ({})", hash.get(..19).unwrap_or(&hash)),
            "decided" | "auto" => format!(
                "{what} {id} {event}: {}",
                decision.as_deref().unwrap_or("answered")
            ),
            _ => format!("{what} {id} {event}"),
        };
        if let Some(actor) = actor {
            summary.push_str(&format!(" by {actor}"));
        }
        // A decision's note is often the option again: said once.
        if !note.is_empty() && Some(note.as_str()) != decision.as_deref() {
            summary.push_str(&format!(": {note}"));
        }
        Ok(AuditEvent {
            at: r.get(1)?,
            kind: "approval",
            sessions: vec![session.unwrap_or_else(|| format!("agent:{agent}:main"))],
            run_id: r.get(9)?,
            correlation_id: None,
            task_id: None,
            trace_id: None,
            summary,
            refs: vec![
                format!("approvals#{id}"),
                format!("approval_events#{}", r.get::<i64>(0)?),
            ],
        })
    })?;
    Ok(rows)
}

/// Cancels of running turns and what came of them.
fn cancels(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(CANCELS, params![since(filter)], |r| {
        let note: Option<String> = r.get(6)?;
        Ok(AuditEvent {
            at: r.get(1)?,
            kind: "cancel",
            sessions: vec![r.get(2)?],
            run_id: r.get(3)?,
            correlation_id: None,
            task_id: None,
            trace_id: None,
            summary: format!(
                "cancel ({}): {}{}",
                r.get::<String>(4)?,
                r.get::<String>(5)?,
                note.map_or(String::new(), |n| format!(": {n}"))
            ),
            refs: vec![format!("turn_cancels#{}", r.get::<i64>(0)?)],
        })
    })?;
    Ok(rows)
}

/// What the outbox posted, held or dead-lettered (conversations.md): its cause, where it went
/// and by which carrier; the text stays in the transcript.
fn outbound(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(OUTBOUND, params![since(filter)], |r| {
        let seq: i64 = r.get(0)?;
        let cause: String = r.get(3)?;
        let cause_id: String = r.get(4)?;
        let mut to = format!("{}/{}", r.get::<String>(5)?, r.get::<String>(6)?);
        let (kind, peer, thread): (String, String, String) = (r.get(7)?, r.get(8)?, r.get(9)?);
        if !peer.is_empty() {
            to.push_str(&format!(" {kind}:{peer}"));
        }
        if !thread.is_empty() {
            to.push_str(&format!(" thread {thread}"));
        }
        let state: String = r.get(10)?;
        let carrier: Option<String> = r.get(11)?;
        let reason: Option<String> = r.get(12)?;
        let how = match (state.as_str(), carrier, reason) {
            ("posted", Some(carrier), _) => format!("posted by {carrier}"),
            ("dead", carrier, reason) => format!(
                "dead-lettered by {}: {}",
                carrier.unwrap_or_default(),
                reason.unwrap_or_default()
            ),
            (_, _, reason) => format!("held: {}", reason.unwrap_or_default()),
        };
        // An announce's or a loop pause's id is its run's, which the line names already.
        let run_id = (cause == "announce" || cause == "loop-pause").then(|| cause_id.clone());
        // A task's move told to its room: `<task>@<uuid>`.
        let task_id = cause
            .starts_with("task")
            .then(|| cause_id.split('@').next().unwrap_or_default().to_string());
        let what = match run_id {
            Some(_) => cause,
            None => format!("{cause} {cause_id}"),
        };
        Ok(AuditEvent {
            at: r.get(1)?,
            kind: "outbound",
            sessions: vec![r.get(2)?],
            run_id,
            correlation_id: None,
            task_id,
            trace_id: None,
            summary: format!("{what} to {to}: {how}"),
            refs: vec![format!("outbox#{seq}")],
        })
    })?;
    Ok(rows)
}

/// A task's moves (`task_events`): who, through which door, from which state to which, and
/// the facts a move carried (an artifact's name and hash, a check's pass or fail); its texts
/// (the brief, a question, a result, a reason) stay in the event's row, pointed at.
fn tasks(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(TASK_EVENTS, params![since(filter), filter.task_id], |r| {
        let task: String = r.get(2)?;
        let kind: String = r.get(3)?;
        let from: String = r.get(6)?;
        let to: Option<String> = r.get(7)?;
        let detail: Value = serde_json::from_str(&r.get::<String>(8)?).unwrap_or_default();
        let room: Option<String> = r.get(10)?;
        let moved = match (&to, from.as_str()) {
            (None, _) => "late: nothing changed".to_string(),
            (Some(to), "") => to.clone(),
            (Some(to), from) if from == to => to.clone(),
            (Some(to), from) => format!("{from} → {to}"),
        };
        let carried = facts(&kind, &detail);
        Ok(AuditEvent {
            at: r.get(1)?,
            kind: "task",
            sessions: std::iter::once(r.get(9)?).chain(room).collect(),
            run_id: None,
            correlation_id: None,
            summary: format!(
                "task {task} {kind} by {} via {}: {moved}{}",
                r.get::<String>(4)?,
                r.get::<String>(5)?,
                if carried.is_empty() {
                    String::new()
                } else {
                    format!(" ({carried})")
                }
            ),
            task_id: Some(task),
            trace_id: None,
            refs: vec![format!("task_events#{}", r.get::<i64>(0)?)],
        })
    })?;
    Ok(rows)
}

/// The facts of a task event's detail that are deepcli's, not someone's text.
fn facts(kind: &str, detail: &Value) -> String {
    let field = |k: &str| detail[k].clone();
    match kind {
        "artifact" => format!(
            "{} {} bytes, sha256 {}",
            field("name").as_str().unwrap_or("-"),
            field("size"),
            field("sha256").as_str().unwrap_or("-")
        ),
        "reviewed" => format!("passed: {}", field("passed")),
        "rejected" => format!("back to the assignee: {}", field("reopen")),
        "cancel_settled" => format!("confirmed: {}", field("confirmed")),
        "failed" => field("why").as_str().unwrap_or_default().to_string(),
        "plan" => format!("{} steps", field("steps").as_array().map_or(0, Vec::len)),
        _ => String::new(),
    }
}

/// Loop pauses, and the operator's decisions on them.
fn loop_pauses(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(
        "SELECT p.run_id, p.created_at, p.state, p.decided_at, coalesce(p.note, ''),
                r.requester_session_key, r.target_session_key
         FROM loop_pauses p JOIN hub_runs r ON r.run_id = p.run_id
         WHERE p.created_at >= ?1 OR p.decided_at >= ?1",
        params![since(filter)],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<String>(2)?,
                r.get::<Option<String>>(3)?,
                r.get::<String>(4)?,
                r.get::<Option<String>>(5)?,
                r.get::<String>(6)?,
            ))
        },
    )?;
    let mut out = Vec::new();
    for (run_id, created, state, decided, note, from, to) in rows {
        let sessions: Vec<String> = from.into_iter().chain([to]).collect();
        let event = |at: String, summary: String| AuditEvent {
            at,
            kind: "loop",
            sessions: sessions.clone(),
            run_id: Some(run_id.clone()),
            correlation_id: None,
            task_id: None,
            trace_id: None,
            summary,
            refs: Vec::new(),
        };
        out.push(event(created, note));
        if let Some(decided) = decided {
            out.push(event(
                decided,
                format!("the operator {state} the paused run"),
            ));
        }
    }
    Ok(out)
}

impl StateStore {
    /// The audit timeline `filter` asks for.
    pub fn audit(&mut self, filter: &AuditFilter) -> Result<Vec<AuditEvent>> {
        let events = timeline(&self.db.conn(), filter);
        events.map_err(|e| self.db(e))
    }
}

/// A2A push notification delivery attempts (a2a.md, "Push notifications"): the task, the
/// peer, the webhook's host (never its path or query, which may carry a secret), the update,
/// the attempt, and the HTTP status or why there was none.
fn push_attempts(conn: &Conn<'_>, filter: &AuditFilter) -> DbResult<Vec<AuditEvent>> {
    let rows = conn.query_map(PUSH_ATTEMPTS, params![since(filter)], |r| {
        let status: Option<i64> = r.get(7)?;
        let error: Option<String> = r.get(8)?;
        let outcome = match (status, error) {
            (Some(s), _) => format!("HTTP {s}"),
            (None, Some(e)) => e,
            (None, None) => "no answer".to_string(),
        };
        let session: Option<String> = r.get(9)?;
        Ok(AuditEvent {
            at: r.get(1)?,
            kind: "push",
            sessions: session.into_iter().collect(),
            run_id: None,
            correlation_id: None,
            task_id: None,
            trace_id: None,
            summary: format!(
                "push to {} for A2A task {} of peer {} ({}), attempt {}: {outcome}",
                r.get::<String>(4)?,
                r.get::<String>(2)?,
                r.get::<String>(3)?,
                r.get::<String>(5)?,
                r.get::<i64>(6)?,
            ),
            refs: vec![format!("a2a_push_attempts#{}", r.get::<i64>(0)?)],
        })
    })?;
    Ok(rows)
}

/// A `--since` as written: RFC 3339, or a span back from now (`30m`, `2h`, `7d`, `45s`).
pub fn parse_since(text: &str) -> std::result::Result<String, String> {
    let text = text.trim();
    let span = text
        .strip_suffix('s')
        .map(|n| (n, 1))
        .or_else(|| text.strip_suffix('m').map(|n| (n, 60)))
        .or_else(|| text.strip_suffix('h').map(|n| (n, 3600)))
        .or_else(|| text.strip_suffix('d').map(|n| (n, 86_400)));
    if let Some((n, unit)) = span
        && let Ok(n) = n.parse::<i64>()
    {
        let back = jiff::SignedDuration::from_secs(n.saturating_mul(unit));
        return jiff::Timestamp::now()
            .checked_sub(back)
            .and_then(|t| t.round(jiff::Unit::Second))
            .map(|t| t.to_string())
            .map_err(|e| format!("`{text}` goes back too far: {e}"));
    }
    text.parse::<jiff::Timestamp>()
        .map(|t| t.to_string())
        .map_err(|_| {
            format!("`{text}` is not a time: give RFC 3339 (`2026-12-01T09:00:00Z`) or a span back from now (`30m`, `2h`, `7d`)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_spans_and_timestamps_and_refuses_anything_else() {
        assert_eq!(
            parse_since("2026-12-01T09:00:00Z").unwrap(),
            "2026-12-01T09:00:00Z"
        );
        let hour_ago = parse_since("1h").unwrap();
        assert!(hour_ago < crate::clock::now());
        assert!(parse_since("yesterday").unwrap_err().contains("RFC 3339"));
    }

    /// Runs `test` on a new state on each backend: SQLite, then PostgreSQL.
    fn on_both_backends(test: impl Fn(&mut StateStore)) {
        let tmp = tempfile::tempdir().unwrap();
        test(&mut StateStore::open(&crate::state::StateDir::new(tmp.path())).unwrap());
        let (_tmp, _schema, postgres) = crate::state::postgres_state();
        test(&mut StateStore::open(&postgres).unwrap());
    }

    /// The sources of the tables that grow with the hub seek `--since` through an index: none
    /// reads its whole table (a year's outbox, approvals, tasks, cancels, pushes).
    #[test]
    fn the_growing_sources_seek_their_time_and_scan_no_table() {
        let tmp = tempfile::tempdir().unwrap();
        let store = StateStore::open(&crate::state::StateDir::new(tmp.path())).unwrap();
        let conn = store.sqlite_for_tests();
        for sql in [
            APPROVAL_EVENTS,
            CANCELS,
            OUTBOUND,
            TASK_EVENTS,
            PUSH_ATTEMPTS,
        ] {
            let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let nulls = vec![rusqlite::types::Null; plan.parameter_count()];
            let lines: Vec<String> = plan
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(
                !lines.iter().any(|l| l.starts_with("SCAN ")),
                "{sql}: {lines:?}"
            );
        }
    }

    #[test]
    fn every_source_reads_a_fresh_state() {
        on_both_backends(|store| {
            let events = store.audit(&AuditFilter::default()).unwrap();
            assert!(events.is_empty(), "{events:?}");
        });
    }

    fn deliver(conn: &Conn<'_>, n: u32, session: &str, rows: Option<(&str, Option<i64>)>) {
        conn.execute(
            "INSERT INTO deliveries (channel, account_id, peer_kind, peer_id, thread_id, message_id,
                                     session_key, response, at, asked_rows, reply_row)
             VALUES ('webchat', 'default', 'direct', 'p', '', ?1, ?2, '{\"reply\":{}}', ?3, ?4, ?5)",
            params![
                format!("m{n}"),
                session,
                format!("2026-12-01T00:{:02}:{:02}Z", n / 60, n % 60),
                rows.map(|r| r.0),
                rows.and_then(|r| r.1)
            ],
        )
        .unwrap();
    }

    #[test]
    fn a_delivery_points_at_the_rows_it_recorded_or_else_they_are_looked_for() {
        on_both_backends(|store| {
            let c = &store.db.conn();
            for (text, provenance, message) in
                [("hello", "inbound", Some("m1")), ("hi", "agent", None)]
            {
                c.execute(
                    "INSERT INTO transcript (session_key, provenance, message_id, text, at)
                 VALUES ('agent:a:main', ?1, ?2, ?3, '2026-12-01T00:00:01Z')",
                    params![provenance, message, text],
                )
                .unwrap();
            }
            // Recorded before schema 22: searched for (rows 1 and 2).
            deliver(c, 1, "agent:a:main", None);
            // Kept with it: taken as they are.
            deliver(c, 2, "agent:a:main", Some(("7,8", Some(9))));
            // Known to have recorded none.
            deliver(c, 3, "agent:a:main", Some(("", None)));
            let events = timeline(c, &AuditFilter::default()).unwrap();
            let refs: Vec<Vec<String>> = events.into_iter().map(|e| e.refs).collect();
            assert_eq!(
                refs,
                [
                    vec!["transcript#1".to_string(), "transcript#2".into()],
                    vec![
                        "transcript#7".into(),
                        "transcript#8".into(),
                        "transcript#9".into()
                    ],
                    vec![],
                ]
            );
        });
    }

    #[test]
    fn a_short_timeline_is_the_end_of_the_long_one_whatever_the_filter() {
        on_both_backends(|store| {
            let c = &store.db.conn();
            for n in 0..120 {
                let session =
                    ["agent:a:main", "agent:ab:main", "agent:b:x", "agent:a"][n as usize % 4];
                deliver(c, n, session, Some(("", None)));
                if n % 3 == 0 {
                    c.execute(
                    "INSERT INTO budget_events (agent_id, kind, at_ms, at, session_key, budget, detail)
                     VALUES ('a', 'refusal', 0, ?1, ?2, 'turns', 'too many')",
                    params![format!("2026-12-01T00:{:02}:{:02}Z", n / 60, n % 60), session],
                )
                .unwrap();
                }
            }
            let filters = [
                AuditFilter::default(),
                AuditFilter {
                    agent_id: Some("a".into()),
                    ..AuditFilter::default()
                },
                AuditFilter {
                    session_key: Some("agent:b:x".into()),
                    ..AuditFilter::default()
                },
                AuditFilter {
                    since: Some("2026-12-01T00:01:00Z".into()),
                    ..AuditFilter::default()
                },
            ];
            for filter in filters {
                let all = timeline(
                    c,
                    &AuditFilter {
                        limit: Some(100_000),
                        ..filter.clone()
                    },
                )
                .unwrap();
                assert!(all.len() > 7, "{filter:?}");
                let short = timeline(
                    c,
                    &AuditFilter {
                        limit: Some(7),
                        ..filter.clone()
                    },
                )
                .unwrap();
                assert_eq!(short, all[all.len() - 7..], "{filter:?}");
            }
        });
    }

    /// A run's first event points at the transcript rows its message was written as (their
    /// route names the run); `--run` keeps the run's events and its child's.
    #[test]
    fn a_runs_events_point_at_its_rows_and_a_run_filter_keeps_its_tree() {
        on_both_backends(|store| {
            let c = &store.db.conn();
            let at = "2026-12-01T00:00:01Z";
            for (run, kind, from, to) in [
                ("r1", "spawn", "agent:a:main", "agent:b:subagent:1"),
                ("r2", "send", "agent:b:subagent:1", "agent:c:main"),
                ("r3", "send", "agent:x:main", "agent:y:main"),
            ] {
                c.execute(
                    "INSERT INTO hub_runs (run_id, kind, source_tool, state, requester_session_key,
                         target_agent_id, target_session_key, correlation_id, message, created_at, updated_at)
                     VALUES (?1, ?2, 'tool', 'done', ?3, 'b', ?4, 'c-' || ?1, 'm', ?5, ?5)",
                    params![run, kind, from, to, at],
                )
                .unwrap();
                c.execute(
                    "INSERT INTO hub_run_events (run_id, at, state, note) VALUES (?1, ?2, 'accepted', 'accepted by the Hub')",
                    params![run, at],
                )
                .unwrap();
                c.execute(
                    "INSERT INTO transcript (session_key, provenance, text, route, at) VALUES (?1, 'inter_session', 'hi', ?2, ?3)",
                    params![to, format!(r#"{{"runId":"{run}"}}"#), at],
                )
                .unwrap();
            }
            c.execute(
                "INSERT INTO hub_sessions (session_key, agent_id, kind, parent_session_key, parent_agent_id,
                     depth, mode, cleanup, run_id, created_at)
                 VALUES ('agent:b:subagent:1', 'b', 'subagent', 'agent:a:main', 'a', 1, 'run', 'keep', 'r1', ?1)",
                params![at],
            )
            .unwrap();
            let events = timeline(c, &AuditFilter::default()).unwrap();
            let refs: Vec<_> = events.iter().map(|e| e.refs.join(" ")).collect();
            assert_eq!(refs, ["transcript#1", "transcript#2", "transcript#3"]);
            let tree = AuditFilter {
                run_id: Some("r1".into()),
                ..AuditFilter::default()
            };
            let runs: Vec<_> = timeline(c, &tree)
                .unwrap()
                .into_iter()
                .filter_map(|e| e.run_id)
                .collect();
            assert_eq!(runs, ["r1", "r2"]);
        });
    }
}
