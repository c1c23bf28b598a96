//! Budgets, cancels and the audit trail end to end (approvals.md): `deepcli up` with the echo
//! agent on the official ACP TypeScript SDK, its Hub tools called through the official MCP
//! TypeScript SDK client, inbound envelopes signed over loopback HTTP, counters read back from
//! the real state database after a controller restart.

use serde_json::{Value, json};

use crate::common::{Up, wait_until};
use crate::hub::{SECRET, agents, get, hub_up, run_until, tool};

/// A signed envelope from Slack group `group` with message id `id`: the status and body.
fn inbound(up: &Up, group: &str, id: &str, text: &str) -> (u16, Value) {
    let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": group},
        "messageId": id, "sender": {"id": "u1"}, "text": text});
    let body = envelope.to_string();
    let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
    crate::hub::http(
        up.addr,
        "POST",
        "/v1/inbound",
        &[
            ("x-deepcli-signature", &signature),
            ("content-type", "application/json"),
        ],
        &body,
    )
}

/// alpha with `budgets` (a YAML flow mapping).
fn budgeted(budgets: &str) -> String {
    agents("", &format!("      budgets: {budgets}\n"), "")
}

fn db(up: &Up) -> rusqlite::Connection {
    rusqlite::Connection::open(up.state.join("state.db")).unwrap()
}

fn refusals(up: &Up, budget: &str) -> i64 {
    db(up)
        .query_row(
            "SELECT count(*) FROM budget_events WHERE kind = 'refusal' AND budget = ?1",
            [budget],
            |r| r.get(0),
        )
        .unwrap()
}

fn alpha_budgets(up: &Up) -> Value {
    let doc = up.wait_for("alpha's budgets", |s| {
        Up::runtime(s, "alpha").is_some_and(|r| r["budgets"].is_object())
    });
    Up::runtime(&doc, "alpha").unwrap()["budgets"].clone()
}

#[test]
fn turns_per_hour_refuses_with_429_and_a_restart_does_not_reset_it() {
    let mut up = hub_up(&budgeted("{turnsPerHour: 2}"), |_| {});
    for n in 0..2 {
        let (status, body) = inbound(&up, "ga", &format!("t-{n}"), "hello");
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = inbound(&up, "ga", "t-2", "hello");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["reason"], "budget_exceeded", "{body}");
    assert_eq!(body["budget"], "turnsPerHour", "{body}");
    let retry = body["retryAfter"].as_u64().unwrap();
    assert!((3000..=3600).contains(&retry), "{body}");
    // Another conversation of the same agent counts against the same budget.
    let (status, _) = inbound(&up, "gc", "t-3", "hello");
    assert_eq!(status, 429);
    assert_eq!(refusals(&up, "turnsPerHour"), 2);
    assert_eq!(alpha_budgets(&up)["turnsLastHour"], 2);

    up.child.kill().unwrap();
    up.child.wait().unwrap();
    up.restart(|cmd| {
        cmd.env("HOOK", SECRET);
    });
    for id in ["alpha", "beta"] {
        up.wait_for(&format!("{id} ready"), |s| {
            Up::runtime(s, id).is_some_and(|r| r["status"] == "ready")
        });
    }
    let (status, body) = inbound(&up, "ga", "t-4", "hello");
    assert_eq!(status, 429, "a restart reset the budget: {body}");
    assert_eq!(refusals(&up, "turnsPerHour"), 3);
    // beta has no budget.
    let (status, _) = inbound(&up, "gb", "t-5", "hello");
    assert_eq!(status, 200);
    // The refusals are in the audit trail, by agent.
    let (_, audit) = cli(&up, &["audit", "--agent", "alpha"]);
    assert_eq!(
        audit
            .matches("refused by turnsPerHour: agent `alpha` is over its budget")
            .count(),
        3,
        "{audit}"
    );
    let (_, beta) = cli(&up, &["audit", "--agent", "beta"]);
    assert!(!beta.contains("refused"), "{beta}");
}

#[test]
fn concurrent_turns_refuse_a_second_turn_while_one_runs() {
    let up = hub_up(&budgeted("{concurrentTurns: 1}"), |_| {});
    // Inside alpha's workspace: its sandbox sees nothing else of the state directory.
    let gate = up.state.join("workspaces/alpha/release");
    let held = {
        let (addr, gate) = (up.addr, gate.clone());
        let text = format!("hold {}", gate.display());
        std::thread::spawn(move || {
            let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
                "messageId": "c-0", "sender": {"id": "u1"}, "text": text});
            let body = envelope.to_string();
            let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
            crate::hub::http(
                addr,
                "POST",
                "/v1/inbound",
                &[("x-deepcli-signature", &signature)],
                &body,
            )
        })
    };
    wait_until("the held turn runs", || {
        alpha_budgets(&up)["runningTurns"] == 1
    });
    let (status, body) = inbound(&up, "gc", "c-1", "hello");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["budget"], "concurrentTurns", "{body}");
    std::fs::write(&gate, "").unwrap();
    assert_eq!(held.join().unwrap().0, 200);
    let (status, body) = inbound(&up, "gc", "c-2", "hello");
    assert_eq!(status, 200, "the permit was not given back: {body}");
}

#[test]
fn spawns_per_hour_refuses_the_hub_tool_with_budget_exceeded() {
    let up = hub_up(&budgeted("{spawnsPerHour: 1}"), |_| {});
    let first = tool(&up, "sessions_spawn", json!({"task": "reply: ok"}));
    assert_eq!(first["status"], "accepted", "{first}");
    let second = tool(&up, "sessions_spawn", json!({"task": "reply: ok"}));
    assert_eq!(second["status"], "forbidden", "{second}");
    assert_eq!(second["reason"], "budget_exceeded", "{second}");
    assert_eq!(second["budget"], "spawnsPerHour", "{second}");
    assert!(second["retryAfter"].as_u64().unwrap() > 0);
    assert_eq!(refusals(&up, "spawnsPerHour"), 1);
    run_until(&up, first["runId"].as_str().unwrap(), |r| {
        r["state"] == "completed"
    });
}

#[test]
fn turn_seconds_cancels_a_slow_turn_and_its_redelivery_answers_with_the_state() {
    let up = hub_up(&budgeted("{turnSeconds: 1}"), |_| {});
    // The SDK agent confirms the cancel: 504, cancel confirmed, the message still uncertain.
    let (status, body) = inbound(&up, "ga", "slow-1", "slow");
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["cancelled"], true, "{body}");
    assert_eq!(body["cancel"], "confirmed", "{body}");
    // Redelivered: answered with its state, never prompted again.
    let (status, again) = inbound(&up, "ga", "slow-1", "slow");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["state"], "uncertain", "{again}");
    assert_eq!(again["cancel"], "confirmed", "{again}");
    let prompted: i64 = db(&up)
        .query_row(
            "SELECT count(*) FROM transcript WHERE message_id = 'slow-1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(prompted, 1, "the redelivery reached the agent again");

    // The stubborn agent ignores the cancel: uncertain.
    let (status, body) = inbound(&up, "ga", "stubborn-1", "stubborn");
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["cancel"], "uncertain", "{body}");
    let cancels: Vec<(String, String)> = {
        let conn = db(&up);
        let mut stmt = conn
            .prepare("SELECT why, state FROM turn_cancels ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        cancels,
        [
            ("turnSeconds".to_string(), "confirmed".to_string()),
            ("turnSeconds".to_string(), "uncertain".to_string())
        ]
    );
    let (_, audit) = cli(&up, &["audit", "--session", crate::hub::ALPHA]);
    assert!(
        audit.contains("message slow-1 → agent:alpha:slack:group:ga (route binding.account): uncertain (the turn was cancelled after its time; cancel confirmed)"),
        "{audit}"
    );
    assert!(audit.contains("cancel (turnSeconds): uncertain"), "{audit}");
    // The session takes the next message.
    let (status, _) = inbound(&up, "ga", "after", "hello");
    assert_eq!(status, 200);
}

#[test]
fn unreported_usage_is_unknown_and_reported_cost_is_enforced() {
    let up = hub_up(
        &budgeted("{tokensPerDay: 1000, costPerDayUsd: 0.5}"),
        |_| {},
    );
    let (status, _) = inbound(&up, "ga", "u-0", "hello");
    assert_eq!(status, 200);
    let budgets = alpha_budgets(&up);
    assert_eq!(budgets["tokensToday"], "unknown", "{budgets:#}");
    assert_eq!(budgets["costTodayUsd"], "unknown", "{budgets:#}");
    let notes = budgets["notes"].to_string();
    assert!(notes.contains("tokensPerDay is not enforceable"), "{notes}");
    assert!(
        notes.contains("costPerDayUsd is not enforceable"),
        "{notes}"
    );
    let human = std::process::Command::new(env!("CARGO_BIN_EXE_deepcli"))
        .args(["--state-dir", up.state.to_str().unwrap(), "status"])
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains("tokens unknown/1000 today, cost unknown/0.5 USD today"),
        "{human}"
    );

    // The SDK agent reports a running cost: 0.3, then 0.6 in total.
    assert_eq!(inbound(&up, "ga", "u-1", "usage 0.3").0, 200);
    assert_eq!(alpha_budgets(&up)["costTodayUsd"], 0.3);
    assert_eq!(inbound(&up, "ga", "u-2", "usage 0.3").0, 200);
    let budgets = alpha_budgets(&up);
    assert!(
        (budgets["costTodayUsd"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{budgets:#}"
    );
    let (status, body) = inbound(&up, "ga", "u-3", "hello");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["budget"], "costPerDayUsd", "{body}");
    // Tokens were never reported: still unknown, not 0.
    assert_eq!(alpha_budgets(&up)["tokensToday"], "unknown");
}

/// `deepcli <args>` against the controller of `up`: its stdout, and whether it succeeded.
fn cli(up: &Up, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_deepcli"))
        .args(["--state-dir", up.state.to_str().unwrap()])
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Sends `text` into Slack group `group` on a thread of its own; its answer when joined.
fn in_background(
    up: &Up,
    group: &str,
    id: &str,
    text: &str,
) -> std::thread::JoinHandle<(u16, Value)> {
    let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": group},
        "messageId": id, "sender": {"id": "u1"}, "text": text});
    let addr = up.addr;
    std::thread::spawn(move || {
        let body = envelope.to_string();
        let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
        crate::hub::http(
            addr,
            "POST",
            "/v1/inbound",
            &[("x-deepcli-signature", &signature)],
            &body,
        )
    })
}

#[test]
fn operator_cancels_are_confirmed_or_uncertain_as_the_runtime_answers() {
    let up = hub_up(&budgeted("{concurrentTurns: 10}"), |cmd| {
        cmd.env("DEEPCLI_HUB_CANCEL_GRACE_MS", "1000");
    });
    let key = crate::hub::ALPHA;
    // Nothing runs yet.
    let (ok, out) = cli(&up, &["sessions", "cancel", key]);
    assert!(ok, "{out}");
    assert_eq!(out, "nothing runs in this session\n");

    // An inbound turn the SDK agent stops when told: confirmed.
    let slow = in_background(&up, "ga", "k-1", "slow");
    wait_until("the slow turn runs", || {
        alpha_budgets(&up)["runningTurns"] == 1
    });
    let (ok, out) = cli(&up, &["sessions", "cancel", key, "--json"]);
    assert!(ok, "{out}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["turnCancel"], "confirmed", "{answer}");
    assert_eq!(slow.join().unwrap().0, 200);

    // One that ignores session/cancel: uncertain.
    let stubborn = in_background(&up, "ga", "k-2", "stubborn");
    wait_until("the stubborn turn runs", || {
        alpha_budgets(&up)["runningTurns"] == 1
    });
    let (ok, out) = cli(&up, &["sessions", "cancel", key]);
    assert!(ok, "{out}");
    assert_eq!(out, "turn: cancel uncertain\n");
    let (status, body) = stubborn.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"]["text"], "stubborn: done anyway");
    let states: Vec<(String, String)> = {
        let conn = db(&up);
        let mut stmt = conn
            .prepare("SELECT why, state FROM turn_cancels ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        states,
        [
            ("operator".to_string(), "confirmed".to_string()),
            ("operator".to_string(), "uncertain".to_string())
        ]
    );

    // A run, by id.
    let spawned = tool(
        &up,
        "sessions_spawn",
        json!({"task": "slow", "label": "c1"}),
    );
    let run_id = spawned["runId"].as_str().unwrap().to_string();
    run_until(&up, &run_id, |r| r["state"] == "running");
    let (ok, out) = cli(&up, &["runs", "cancel", &run_id]);
    assert!(ok, "{out}");
    assert_eq!(out, format!("run {run_id}: cancelled (cancel confirmed)\n"));
    let (ok, _) = cli(&up, &["runs", "cancel", "no-such-run"]);
    assert!(!ok, "an unknown run is an error");
}

#[test]
fn a_loop_between_two_sessions_is_paused_then_resumed_and_stopped() {
    let up = hub_up(
        &agents(
            "",
            "      budgets: {loopTurns: 2}\n",
            "session:\n  maxPingPongTurns: 0\n",
        ),
        |_| {},
    );
    let send = || {
        tool(
            &up,
            "sessions_send",
            json!({"agentId": "beta", "message": "reply: pong", "timeoutSeconds": 30}),
        )
    };
    for _ in 0..2 {
        let sent = send();
        assert_eq!(sent["status"], "ok", "{sent}");
    }
    let paused = send();
    assert_eq!(paused["status"], "paused", "{paused}");
    let run_id = paused["runId"].as_str().unwrap().to_string();
    let run = get(&up, &format!("/v1/runs/{run_id}"));
    assert_eq!(run["state"], "paused", "{run:#}");
    // Not delivered: beta's main session got two messages, not three.
    let delivered = |n: &str| {
        crate::hub::transcript(&up.state, "agent:beta:main")
            .iter()
            .filter(|(p, t, _)| p == "inter_session" && t == n)
            .count()
    };
    assert_eq!(delivered("reply: pong"), 2);
    // The operator sees it, and so does the conversation the loop started from.
    let (_, listed) = cli(&up, &["runs", "list", "--state", "paused"]);
    assert!(listed.contains(&run_id), "{listed}");
    let (_, status) = cli(&up, &["status"]);
    assert!(
        status.contains(&format!("loop paused  run {run_id}: loop paused: sessions")),
        "{status}"
    );
    assert!(
        crate::hub::transcript(&up.state, crate::hub::ALPHA)
            .iter()
            .any(|(_, t, _)| t.contains("loop paused") && t.contains(&run_id)),
        "the origin conversation was not told"
    );
    let (ok, _) = cli(&up, &["runs", "stop", "no-such-run"]);
    assert!(!ok);

    // Resumed: delivered now, and the count starts over.
    let (ok, out) = cli(&up, &["runs", "resume", &run_id]);
    assert!(ok, "{out}");
    run_until(&up, &run_id, |r| r["state"] == "completed");
    assert_eq!(delivered("reply: pong"), 3);
    let again = send();
    assert_eq!(
        again["status"], "ok",
        "the count did not start over: {again}"
    );
    let (ok, out) = cli(&up, &["runs", "resume", &run_id]);
    assert!(!ok, "a completed run cannot be resumed: {out}");

    // Paused again, then stopped: never delivered.
    let stopped = (0..4)
        .map(|_| send())
        .find(|r| r["status"] == "paused")
        .expect("the loop was paused again");
    let stopped_id = stopped["runId"].as_str().unwrap();
    let before = delivered("reply: pong");
    let (ok, out) = cli(&up, &["runs", "stop", stopped_id]);
    assert!(ok, "{out}");
    assert_eq!(out, format!("run {stopped_id}: cancelled\n"));
    assert_eq!(delivered("reply: pong"), before);
    let (_, status) = cli(&up, &["status"]);
    assert!(!status.contains("loop paused  run"), "{status}");
    let (_, audit) = cli(&up, &["audit", "--run", &run_id]);
    assert!(audit.contains("loop paused: sessions"), "{audit}");
    assert!(
        audit.contains("the operator resumed the paused run"),
        "{audit}"
    );
    let (_, audit) = cli(&up, &["audit", "--run", stopped_id]);
    assert!(
        audit.contains("the operator stopped the paused run"),
        "{audit}"
    );
}

#[test]
fn the_audit_tells_a_spawned_runs_story_without_copying_its_text() {
    let up = hub_up(&agents("", "", "session:\n  maxPingPongTurns: 0\n"), |_| {});
    let spawned = tool(
        &up,
        "sessions_spawn",
        json!({"task": "reply: the secret plan", "label": "a1"}),
    );
    let run_id = spawned["runId"].as_str().unwrap().to_string();
    run_until(&up, &run_id, |r| {
        crate::hub::has_note(r, "announced to the parent")
    });
    // The parent's answer left the outbox's queue: held, this account having no carrier.
    up.wait_for("the announce held", |_| {
        crate::common::count(
            &up.state,
            "SELECT count(*) FROM outbox WHERE cause = 'announce' AND state = 'held'",
        ) == 1
    });

    let (ok, human) = cli(&up, &["audit", "--run", &run_id]);
    assert!(ok, "{human}");
    assert!(
        !human.contains("the secret plan"),
        "transcript text copied: {human}"
    );
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[TIME]");
    settings.add_filter(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[UUID]",
    );
    settings.add_filter(r"transcript#\d+", "transcript#[ID]");
    settings.bind(|| insta::assert_snapshot!("audit_spawned_run", human));

    // The same timeline as JSON and over HTTP (operator token only).
    let (ok, out) = cli(&up, &["audit", "--run", &run_id, "--json"]);
    assert!(ok);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let served = get(&up, &format!("/v1/audit?runId={run_id}"));
    assert_eq!(served["count"], doc["count"]);
    assert_eq!(served["events"], doc["events"]);
    let kinds: Vec<&str> = doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"spawn"), "{doc:#}");
    let (status, _) = crate::hub::http(up.addr, "GET", "/v1/audit", &[], "");
    assert_eq!(status, 401);

    // By agent: the inbound message that carried the tool call, with its route.
    let (_, by_agent) = cli(&up, &["audit", "--agent", "alpha"]);
    assert!(
        by_agent.contains("slack/default group:ga message") && by_agent.contains("(route "),
        "{by_agent}"
    );
    let (_, later) = cli(&up, &["audit", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(later, "Nothing recorded.\n");
    let (ok, _) = cli(&up, &["audit", "--since", "yesterday"]);
    assert!(!ok, "a bad --since is an error");
}

#[test]
fn a_spawn_tree_past_its_total_is_paused() {
    let up = hub_up(
        &agents(
            "",
            // A child may send only where its agent gives `sessions_send` back.
            "      budgets: {treeTurns: 2}\n      subagents: {tools: {alsoAllow: [sessions_send]}}\n",
            "session:\n  maxPingPongTurns: 0\n",
        ),
        |_| {},
    );
    // A child of alpha's conversation sends once; the root sends once: the tree's two runs.
    let child = tool(
        &up,
        "sessions_spawn",
        json!({"task": "mcp sessions_send {\"agentId\": \"beta\", \"message\": \"reply: one\"}", "label": "t1"}),
    );
    run_until(&up, child["runId"].as_str().unwrap(), |r| {
        r["state"] == "completed"
    });
    let sent = tool(
        &up,
        "sessions_send",
        json!({"agentId": "beta", "message": "reply: two"}),
    );
    assert_eq!(sent["status"], "ok", "{sent}");
    let paused = tool(
        &up,
        "sessions_send",
        json!({"agentId": "beta", "message": "reply: three"}),
    );
    assert_eq!(paused["status"], "paused", "{paused}");
    let why = paused["error"].as_str().unwrap();
    assert!(
        why.contains("the sessions of the tree under agent:alpha:slack:group:ga have started 2 runs (budgets.treeTurns 2)"),
        "{why}"
    );
}
