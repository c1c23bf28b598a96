//! `deepcli audit`: the audit timeline (approvals.md) from the state database, oldest first —
//! readable, or `--json` as `GET /v1/audit` serves it. Reads only; works whether or not a
//! controller runs.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::{ExitStatus, GlobalSettings};
use crate::state::StateStore;
use crate::state::audit::{AuditEvent, AuditFilter, parse_since};

#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    /// Only what involves this agent's sessions.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Only what involves this session.
    #[arg(long, value_name = "KEY")]
    session: Option<String>,
    /// Only this run, and the runs its spawned session started.
    #[arg(long, value_name = "ID")]
    run: Option<String>,
    /// Only this task's story: its moves, the runs and approvals of its session, what its
    /// room was told.
    #[arg(long, value_name = "ID")]
    task: Option<String>,
    /// From this time on: RFC 3339, or a span back from now (`30m`, `2h`, `7d`).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// The newest N events (default 1000).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Keep following: print each new event as it is recorded, until Ctrl-C (the hub's log,
    /// live). One JSON event per line with --json.
    #[arg(short, long, conflicts_with = "limit")]
    follow: bool,
}

pub(super) fn run(global: &GlobalSettings, args: AuditArgs) -> ExitStatus {
    let since = match args.since.as_deref().map(parse_since) {
        None => None,
        Some(Ok(since)) => Some(since),
        Some(Err(why)) => {
            let _ = writeln!(anstream::stderr(), "error: --since {why}");
            return ExitStatus::Error;
        }
    };
    let dir = global.state();
    let mut store = match StateStore::open_existing(&dir) {
        Ok(Some(store)) => store,
        Ok(None) => {
            let _ = writeln!(
                anstream::stderr(),
                "error: no deepcli state in `{}`; nothing has happened there yet",
                dir.root().display()
            );
            return ExitStatus::Error;
        }
        Err(e) => {
            super::state_error(&e);
            return ExitStatus::Error;
        }
    };
    let filter = AuditFilter {
        agent_id: args.agent,
        session_key: args.session,
        run_id: args.run,
        task_id: args.task.clone(),
        since,
        limit: args.limit,
    };
    let events = match store.audit(&filter) {
        Ok(events) => events,
        Err(e) => {
            super::state_error(&e);
            return ExitStatus::Error;
        }
    };
    if let Some(task) = &args.task
        && events.is_empty()
        && !args.json
    {
        let _ = writeln!(
            anstream::stderr(),
            "error: nothing recorded for task `{task}`\nhint: `deepcli tasks list` shows the tasks"
        );
        return ExitStatus::Failure;
    }
    if args.follow {
        return follow(&mut store, filter, events, args.json);
    }
    let text = if args.json {
        let doc = json!({"count": events.len(), "events": events});
        serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
    } else {
        render(&events)
    };
    let _ = anstream::stdout().write_all(text.as_bytes());
    ExitStatus::Success
}

/// `audit --follow`: the events so far, then each new one, looked for every half second.
/// Times are to the second: an event is new when it was not printed among those of the latest
/// second already shown.
fn follow(
    store: &mut StateStore,
    mut filter: AuditFilter,
    events: Vec<AuditEvent>,
    json: bool,
) -> ExitStatus {
    let key = |e: &AuditEvent| {
        (
            e.kind,
            e.run_id.clone(),
            e.summary.clone(),
            e.refs.join(","),
        )
    };
    let mut latest = String::new();
    let mut shown_latest = std::collections::HashSet::new();
    let mut batch = events;
    loop {
        let mut out = String::new();
        for e in &batch {
            if e.at > latest {
                latest = e.at.clone();
                shown_latest.clear();
            }
            if e.at == latest && !shown_latest.insert(key(e)) {
                continue;
            }
            if e.at < latest {
                continue;
            }
            out.push_str(&if json {
                serde_json::to_string(e).unwrap_or_default() + "\n"
            } else {
                render(std::slice::from_ref(e))
            });
        }
        if !super::hub::print_live(&out) {
            return ExitStatus::Success;
        }
        std::thread::sleep(super::hub::FOLLOW_EVERY);
        if !latest.is_empty() {
            filter.since = Some(latest.clone());
        }
        batch = match store.audit(&filter) {
            Ok(events) => events,
            Err(e) => {
                super::state_error(&e);
                return ExitStatus::Error;
            }
        };
    }
}

/// One line per event: when, what, deepcli's sentence, and the rows that hold more.
pub(super) fn render(events: &[AuditEvent]) -> String {
    if events.is_empty() {
        return "Nothing recorded.\n".to_string();
    }
    let mut out = String::new();
    for e in events {
        let run = e
            .run_id
            .as_ref()
            .map_or(String::new(), |id| format!("run {id}: "));
        let refs = if e.refs.is_empty() {
            String::new()
        } else {
            format!("  [{}]", e.refs.join(", "))
        };
        let trace = e
            .trace_id
            .as_ref()
            .map_or(String::new(), |id| format!("  trace {id}"));
        out.push_str(&format!(
            "{}  {:<7} {run}{}{refs}{trace}\n",
            e.at, e.kind, e.summary
        ));
    }
    out
}
