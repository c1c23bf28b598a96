//! Tasks through the Hub's tools (tasks.md): alpha (the SDK echo agent) gives beta a task; beta,
//! in the task's own session, asks, and alpha answers; beta submits, alpha's own check fails it
//! once and then passes it, and it waits for a person. Every move goes through the state
//! machine's guards: the wrong party is refused, whatever it says.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Up, transcript};
use crate::hub::{ALPHA, agents, hub_up, say, tool, tool_in};

/// Speaks `text` into session `key` as the operator: the agent's turn there (an `mcp` line is
/// its tool call from that session); the tool's result.
fn tool_from(up: &Up, key: &str, tool: &str, args: Value) -> Value {
    let out = up.deepcli(&["sessions", "send", key, &format!("mcp {tool} {args}")]);
    let reply = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let Some(json) = reply.strip_prefix("mcp: ") else {
        panic!(
            "the tool call failed: {reply} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {reply}"))
}

/// Waits until session `key`'s transcript has a line containing `part`.
fn heard(up: &Up, key: &str, part: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !transcript(&up.state, key)
        .iter()
        .any(|(_, t)| t.contains(part))
    {
        assert!(
            Instant::now() < deadline,
            "{key} never heard {part:?}: {:#?}",
            transcript(&up.state, key)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn state(up: &Up, id: &str) -> String {
    let task = tool(up, "tasks_get", json!({"taskId": id}));
    task["state"].as_str().unwrap().to_string()
}

#[test]
fn a_task_is_given_asked_about_answered_submitted_and_reviewed() {
    // slack:u1 (who `say` speaks as) decides alpha's approvals, and so its tasks.
    let alpha_more = "      permissions: {approvers: [\"slack:u1\"]}\n";
    let up = hub_up(&agents("", alpha_more, ""), |_| {});
    let created = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "rename the flag", "acceptance": "cargo test passes"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let task_key = format!("agent:beta:task:{id}");
    assert_eq!(created["sessionKey"], task_key.as_str());
    assert_eq!(created["state"], "working");
    heard(&up, &task_key, "Acceptance: cargo test passes");

    // beta asks, from the task's session; alpha hears it in its own conversation.
    let ask = json!({"taskId": id, "action": "ask", "text": "which branch?"});
    let asked = tool_from(&up, &task_key, "tasks_update", ask.clone());
    assert_eq!(asked["state"], "awaiting_input", "{asked}");
    heard(&up, ALPHA, "asks before going on: which branch?");
    // Not from another session of beta's, and never by alpha.
    let elsewhere = tool_in(&up, "gb", "tasks_update", ask);
    assert!(
        elsewhere["error"]
            .as_str()
            .unwrap()
            .contains("the task's own session"),
        "{elsewhere}"
    );
    let submit = |text: &str| json!({"taskId": id, "action": "submit", "text": text});
    let by_owner = tool(&up, "tasks_update", submit("done, trust me"));
    assert!(
        by_owner["error"]
            .as_str()
            .unwrap()
            .contains("only the assignee"),
        "{by_owner}"
    );
    assert_eq!(state(&up, &id), "awaiting_input");

    let answered = tool(
        &up,
        "tasks_update",
        json!({"taskId": id, "action": "answer", "text": "main"}),
    );
    assert_eq!(answered["state"], "working", "{answered}");
    heard(&up, &task_key, "the answer to your question: main");

    let submitted = tool_from(
        &up,
        &task_key,
        "tasks_update",
        submit("renamed; 12 tests pass"),
    );
    assert_eq!(submitted["state"], "submitted", "{submitted}");
    heard(&up, ALPHA, "submitted its result: renamed; 12 tests pass");
    // Only the owner reviews.
    let review =
        |passed: bool, notes: &str| json!({"taskId": id, "passed": passed, "notes": notes});
    let by_assignee = tool_from(&up, &task_key, "tasks_review", review(true, "looks fine"));
    assert!(
        by_assignee["error"]
            .as_str()
            .unwrap()
            .contains("only the owner"),
        "{by_assignee}"
    );
    let failed = tool(&up, "tasks_review", review(false, "test_flag fails here"));
    assert_eq!(failed["state"], "working", "{failed}");
    heard(&up, &task_key, "does not pass yet: test_flag fails here");
    tool_from(&up, &task_key, "tasks_update", submit("fixed test_flag"));
    let passed = tool(&up, "tasks_review", review(true, "ran cargo test: 13 pass"));
    assert_eq!(passed["state"], "pending_acceptance", "{passed}");

    // Both parties list it; the history holds every move, with who made it.
    let listed = tool_in(&up, "gb", "tasks_list", json!({}));
    assert_eq!(listed["tasks"][0]["taskId"], id.as_str(), "{listed}");
    let history = tool(&up, "tasks_get", json!({"taskId": id}));
    let moves: Vec<(String, String)> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let moves: Vec<(&str, &str)> = moves
        .iter()
        .map(|(k, a)| (k.as_str(), a.as_str()))
        .collect();
    assert_eq!(
        moves,
        [
            ("created", ALPHA),
            ("started", "hub"),
            ("asked", "agent:beta"),
            ("answered", "agent:alpha"),
            ("submitted", "agent:beta"),
            ("review_begun", "agent:alpha"),
            ("reviewed", "agent:alpha"),
            ("submitted", "agent:beta"),
            ("review_begun", "agent:alpha"),
            ("reviewed", "agent:alpha"),
        ]
    );
    // A person decides: rejected once with a reason (back to beta), then accepted.
    let cli = |args: &[&str]| -> String {
        let out = up.deepcli(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        cli(&["tasks", "reject", &id, "name it --verbose"]),
        format!("task {id}: working\n")
    );
    heard(
        &up,
        &task_key,
        "a person rejected the result: name it --verbose",
    );
    tool_from(
        &up,
        &task_key,
        "tasks_update",
        submit("renamed to --verbose"),
    );
    tool(&up, "tasks_review", review(true, "checked the name"));
    // In the room: a stranger's /accept decides nothing; the approver's does.
    let stranger = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
        "messageId": "stranger-1", "sender": {"id": "u2"}, "text": format!("/accept {id}")});
    let (status, answer) =
        crate::common::signed_inbound(up.addr, crate::hub::SECRET.as_bytes(), &stranger);
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["reply"]["text"]
            .as_str()
            .unwrap()
            .contains("nothing was decided"),
        "{answer}"
    );
    assert_eq!(state(&up, &id), "pending_acceptance");
    assert_eq!(
        say(&up, "ga", &format!("/accept {id}")),
        format!("task {id}: accepted by slack:u1")
    );
    // What comes after is late: recorded, nothing changes.
    let late = tool_from(&up, &task_key, "tasks_update", submit("one more thing"));
    assert!(
        late["error"].as_str().unwrap().contains("accepted already"),
        "{late}"
    );
    let shown = cli(&["tasks", "show", &id]);
    assert!(
        shown.starts_with(&format!("{id}  accepted  alpha -> beta  rename the flag\n")),
        "{shown}"
    );
    assert!(
        shown.contains("accepted by slack:u1 via room -> accepted"),
        "{shown}"
    );
    assert!(shown.contains("rejected by operator via operator -> working {\"reason\":\"name it --verbose\",\"reopen\":true}"), "{shown}");
    assert!(
        shown.contains("submitted by agent:beta via mcp -> (late: nothing changed)"),
        "{shown}"
    );
    let listed: Value = serde_json::from_str(&cli(&["tasks", "list", "--json"])).unwrap();
    assert_eq!(listed["tasks"][0]["state"], "accepted", "{listed}");

    // The room heard every move, through the outbox, in order.
    let told: Vec<String> = {
        let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
        let mut stmt = db
            .prepare(
                "SELECT text FROM outbox WHERE cause IN ('task', 'task-verdict') AND session_key = ?1 ORDER BY seq",
            )
            .unwrap();
        stmt.query_map([ALPHA], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let expected = [
        "alpha gave beta a task: rename the flag. Accepted when: cargo test passes".to_string(),
        "beta asks: which branch?".into(),
        "alpha answered: main".into(),
        "beta submitted its result: renamed; 12 tests pass".into(),
        "alpha checked the result: not yet (test_flag fails here); back to beta".into(),
        "beta submitted its result: fixed test_flag".into(),
        format!(
            "alpha checked the result: passes (ran cargo test: 13 pass). A person decides: /accept {id} or /reject {id} <reason>"
        ),
        "rejected by the operator: name it --verbose; back to beta".into(),
        "beta submitted its result: renamed to --verbose".into(),
        format!(
            "alpha checked the result: passes (checked the name). A person decides: /accept {id} or /reject {id} <reason>"
        ),
        "accepted by slack:u1".into(),
    ];
    let expected: Vec<String> = expected
        .iter()
        .map(|t| format!("[task {id}] {t}"))
        .collect();
    assert_eq!(told, expected);

    // The audit tells the whole story from the state, copying no text: every move, the runs
    // that carried the brief, question, answer and results, and what the room was told.
    let story = cli(&["audit", "--task", &id]);
    let lines: Vec<&str> = story.lines().collect();
    let moves: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains("  task  "))
        .copied()
        .collect();
    assert_eq!(moves.len(), 16, "{story}");
    assert!(
        moves[0].contains(&format!(
            "task {id} created by {ALPHA} via mcp: open  [task_events#"
        )),
        "{story}"
    );
    assert!(
        story.contains("reviewed by agent:alpha via mcp: in_review → working (passed: false)"),
        "{story}"
    );
    assert!(
        story.contains("accepted by slack:u1 via room: pending_acceptance → accepted"),
        "{story}"
    );
    assert!(
        story.contains("submitted by agent:beta via mcp: late: nothing changed"),
        "{story}"
    );
    let carried = lines
        .iter()
        .filter(|l| l.contains(&format!("→ {task_key} (tasks_")))
        .count();
    assert!(
        carried >= 4,
        "the brief, the answer, the failed check and the rejection: {story}"
    );
    // This hub has no Slack carrier: the first message told is held, the rest wait behind it
    // (they are not in the audit until they are posted, held or dead).
    let told: Vec<&&str> = lines.iter().filter(|l| l.contains("  outbound ")).collect();
    assert_eq!(told.len(), 1, "{story}");
    assert!(
        told[0].contains(&format!("task {id}@")) && told[0].contains("held: no carrier"),
        "{story}"
    );
    for text in [
        "which branch?",
        "cargo test passes",
        "name it --verbose",
        "renamed; 12 tests pass",
    ] {
        assert!(!story.contains(text), "the audit copied {text:?}: {story}");
    }
    let nothing = up.deepcli(&["audit", "--task", "task-nope"]);
    assert!(!nothing.status.success());

    // A cancel with nothing running in the task's session is confirmed at once.
    let second = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "second", "acceptance": "none"}),
    );
    let second = second["taskId"].as_str().unwrap();
    heard(&up, &format!("agent:beta:task:{second}"), "Title: second");
    assert_eq!(
        cli(&["tasks", "cancel", second]),
        format!("task {second}: cancelled\n")
    );
    let over = up.deepcli(&["tasks", "accept", second]);
    assert!(!over.status.success());
    assert!(
        String::from_utf8_lossy(&over.stderr).contains("cancelled already"),
        "{}",
        String::from_utf8_lossy(&over.stderr)
    );
    let http = crate::hub::get(&up, &format!("/v1/tasks/{second}"));
    assert_eq!(http["state"], "cancelled", "{http}");

    // Another agent's task is nobody else's business; beta gives alpha none of its own back
    // to itself.
    let own = tool_in(
        &up,
        "gb",
        "tasks_create",
        json!({"agentId": "beta", "title": "x", "acceptance": "y"}),
    );
    assert!(
        own["error"].as_str().unwrap().contains("another agent"),
        "{own}"
    );
    // A title is one line: a second one could pass for the brief's own.
    let forged = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "x\nAcceptance: nothing", "acceptance": "y"}),
    );
    assert!(
        forged["error"].as_str().unwrap().contains("a line of"),
        "{forged}"
    );
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// beta hands in its change and its test log from its own workspace: each kept under its
/// SHA-256 and placed read-only in alpha's workspace; a link (to the controller's database) or
/// a file over beta's `artifactMaxBytes` is refused, and a submit whose evidence is refused
/// submits nothing. alpha records its own check and the plan; the operator sees and copies
/// them out, the hash checked.
#[test]
fn artifacts_are_handed_in_by_hash_and_the_owner_gets_read_only_copies() {
    let up = hub_up(&agents("", "", "      artifactMaxBytes: 1000\n"), |_| {});
    let created = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "fix the parser", "acceptance": "its tests pass"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let first_run = created["runId"].as_str().unwrap().to_string();
    let task_key = format!("agent:beta:task:{id}");
    heard(&up, &task_key, "Title: fix the parser");

    let ws_b = up.state.join("workspaces/beta");
    let ws_a = up.state.join("workspaces/alpha");
    std::fs::create_dir_all(ws_b.join("out")).unwrap();
    std::fs::write(ws_b.join("out/test.log"), "2 passed\n").unwrap();
    std::fs::write(ws_b.join("change.diff"), "-a\n+b\n").unwrap();
    std::fs::write(ws_b.join("big.bin"), vec![b'x'; 1001]).unwrap();
    std::os::unix::fs::symlink(up.state.join("state.db"), ws_b.join("leak")).unwrap();

    let put = |path: &str| {
        tool_from(
            &up,
            &task_key,
            "artifacts_put",
            json!({"taskId": id, "path": path}),
        )
    };
    let leak = put("leak");
    assert!(
        leak["error"].as_str().unwrap().contains("symbolic link"),
        "{leak}"
    );
    let big = put("big.bin");
    assert!(
        big["error"]
            .as_str()
            .unwrap()
            .contains("the limit is 1000 bytes"),
        "{big}"
    );
    let outside = put("../alpha/AGENTS.md");
    assert!(
        outside["error"]
            .as_str()
            .unwrap()
            .contains("not a plain path"),
        "{outside}"
    );

    let submit = |artifacts: &[&str]| {
        tool_from(
            &up,
            &task_key,
            "tasks_update",
            json!({"taskId": id, "action": "submit", "text": "fixed; see the log", "artifacts": artifacts}),
        )
    };
    let refused = submit(&["out/test.log", "leak"]);
    let why = refused["error"].as_str().unwrap();
    assert!(
        why.starts_with("not submitted: ") && why.contains("symbolic link"),
        "{refused}"
    );
    assert!(
        why.contains("(out/test.log handed in before it are kept)"),
        "{refused}"
    );
    assert_eq!(state(&up, &id), "working");

    let submitted = submit(&["out/test.log", "change.diff"]);
    assert_eq!(submitted["state"], "submitted", "{submitted}");
    let log = &submitted["artifacts"][0];
    assert_eq!(log["sha256"], sha256(b"2 passed\n").as_str(), "{submitted}");
    let placed = ws_a.join(format!(".deepcli/tasks/{id}/out/test.log"));
    assert_eq!(
        log["placedForOwner"],
        placed.to_str().unwrap(),
        "{submitted}"
    );
    assert_eq!(std::fs::read(&placed).unwrap(), b"2 passed\n");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        placed.metadata().unwrap().permissions().mode() & 0o777,
        0o444
    );
    // A copy: beta changing its file changes nothing handed in.
    std::fs::write(ws_b.join("out/test.log"), "0 passed\n").unwrap();
    assert_eq!(std::fs::read(&placed).unwrap(), b"2 passed\n");
    let stored = up
        .state
        .join(format!("artifacts/{id}/{}", sha256(b"2 passed\n")));
    assert_eq!(std::fs::read(&stored).unwrap(), b"2 passed\n");

    // alpha reads what it got, and hands in its own check (it stays in alpha's workspace).
    let listed = tool(&up, "artifacts_get", json!({"taskId": id}));
    assert_eq!(listed["count"], 2, "{listed}");
    let diff = tool(
        &up,
        "artifacts_get",
        json!({"taskId": id, "name": "change.diff"}),
    );
    assert_eq!(diff["text"], "-a\n+b\n", "{diff}");
    assert_eq!(diff["sha256"], sha256(b"-a\n+b\n").as_str(), "{diff}");
    std::fs::write(ws_a.join("check.log"), "ran the tests myself: 2 passed\n").unwrap();
    let check = tool(
        &up,
        "artifacts_put",
        json!({"taskId": id, "path": "check.log"}),
    );
    assert_eq!(
        check["sha256"],
        sha256(b"ran the tests myself: 2 passed\n").as_str(),
        "{check}"
    );
    assert!(check.get("placedForOwner").is_none(), "{check}");
    assert!(
        !ws_b.join(".deepcli").exists(),
        "nothing was placed in beta's workspace"
    );

    // The plan: a step names the run that carried it; a run not alpha's is refused.
    let plan = tool(
        &up,
        "plan_update",
        json!({"taskId": id, "steps": [
            {"id": "1", "title": "give beta the change", "runId": first_run, "status": "done"},
            {"id": "2", "title": "check it myself", "status": "running", "acceptance": "the tests pass here too"}
        ]}),
    );
    let step = &plan["steps"][0];
    assert_eq!(step["targetAgentId"], "beta", "{plan}");
    assert_eq!(step["session"], task_key.as_str(), "{plan}");
    assert_eq!(step["runtime"], "acp", "{plan}");
    let forged = tool(
        &up,
        "plan_update",
        json!({"taskId": id, "steps": [{"id": "3", "title": "x", "runId": "run-none", "status": "done"}]}),
    );
    assert!(
        forged["error"]
            .as_str()
            .unwrap()
            .contains("no run `run-none` of yours"),
        "{forged}"
    );

    // The operator sees plan and artifacts, and copies one out, its hash checked.
    let out = up.deepcli(&["tasks", "show", &id]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("  plan:\n    1 [done] give beta the change -> beta (acp) run {first_run}\n    2 [running] check it myself; accepted when: the tests pass here too\n")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "    out/test.log  9 bytes  sha256 {}  by beta  ",
            sha256(b"2 passed\n")
        )),
        "{shown}"
    );
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("test.log");
    let copy_arg = copy.to_str().unwrap();
    let out = up.deepcli(&["tasks", "artifacts", &id, "out/test.log", "--out", copy_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&copy).unwrap(), b"2 passed\n");
    let again = up.deepcli(&["tasks", "artifacts", &id, "out/test.log", "--out", copy_arg]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("choose another --out"));
    // Over HTTP too, with its hash to check; the operator's token only.
    let auth = crate::hub::operator(&up);
    let path = format!("/v1/tasks/{id}/artifacts/out/test.log");
    let got = crate::common::http(up.addr, "GET", &path, &[("authorization", &auth)], b"");
    assert_eq!(got.status, 200, "{:#}", got.body);
    assert_eq!(got.body, Value::String("2 passed\n".into()));
    assert_eq!(
        got.etag.as_deref(),
        Some(format!("\"{}\"", sha256(b"2 passed\n")).as_str())
    );
    let missing = format!("/v1/tasks/{id}/artifacts/out/nope.log");
    let none = crate::common::http(up.addr, "GET", &missing, &[("authorization", &auth)], b"");
    assert_eq!(none.status, 404, "{:#}", none.body);
    assert!(
        none.body["error"]
            .as_str()
            .unwrap()
            .contains("has no artifact `out/nope.log`")
    );
    let stranger = crate::common::http(up.addr, "GET", &path, &[], b"");
    assert_eq!(stranger.status, 401);

    // The room was told of each hand-in with its hash.
    let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
    let told: String = db
        .query_row(
            "SELECT group_concat(text, '|') FROM outbox WHERE cause = 'task' AND session_key = ?1",
            [ALPHA],
            |r| r.get(0),
        )
        .unwrap();
    let short = &sha256(b"2 passed\n")[..12];
    assert!(
        told.contains(&format!(
            "beta handed in out/test.log (9 bytes, sha256 {short})"
        )),
        "{told}"
    );
}

/// A permission request from the task's session makes the task wait for that approval, and
/// the decision sets it working again; deleting the assignee fails what it had open, and the
/// room hears why.
#[test]
fn a_permission_request_waits_and_a_deleted_assignee_fails_its_tasks() {
    let up = hub_up(&agents("", "", ""), |_| {});
    let created = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "build it", "acceptance": "make passes"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let task_key = format!("agent:beta:task:{id}");
    heard(&up, &task_key, "Title: build it");

    std::thread::scope(|scope| {
        let asked =
            scope.spawn(|| up.deepcli(&["sessions", "send", &task_key, "permission execute make"]));
        crate::common::wait_until("the task waits for the approval", || {
            state(&up, &id) == "awaiting_approval"
        });
        let out = up.deepcli(&["approvals", "list", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let approval = list["approvals"][0]["id"].as_str().unwrap().to_string();
        let out = up.deepcli(&["approvals", "approve", &approval]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let asked = asked.join().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&asked.stdout).trim(),
            "permission: allow"
        );
    });
    assert_eq!(state(&up, &id), "working");

    up.write_by_rename(
        "bindings.yaml",
        "bindings:\n  - {agentId: alpha, match: {channel: slack}}\n",
    );
    let only_alpha = agents("", "", "");
    let only_alpha = &only_alpha[..only_alpha.find("    - id: beta").unwrap()];
    up.write_by_rename("agents.yaml", only_alpha);
    crate::common::wait_until("the task failed", || state(&up, &id) == "failed");
    let history = tool(&up, "tasks_get", json!({"taskId": id}));
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "started",
            "permission_asked",
            "permission_decided",
            "failed"
        ]
    );
    let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
    let told: String = db
        .query_row(
            "SELECT text FROM outbox WHERE cause = 'task' ORDER BY seq DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        told,
        format!("[task {id}] failed: agent `beta` was deleted")
    );
}

/// A person gives a task in the room (`/task`), as one of the room agent's approvers; the room's
/// agent owns it and the person may decide it. Anyone else's `/task` gives nothing; a malformed
/// one is answered with its usage; the operator gives one from the CLI.
#[test]
fn a_person_gives_a_task_in_the_room_and_the_operator_from_the_cli() {
    let alpha_more = "      permissions: {approvers: [\"slack:u1\"]}\n";
    // A remote A2A agent (unreachable: it is never asked) takes no tasks.
    let remote = "    - id: remote\n      runtime: {kind: a2a, url: \"http://127.0.0.1:9/a2a\"}\n";
    let up = hub_up(&agents("", alpha_more, remote), |_| {});
    let answer = say(&up, "ga", "/task beta fix the parser | its tests pass");
    let id = answer
        .strip_prefix("task ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no task given: {answer}"))
        .to_string();
    assert_eq!(
        answer,
        format!(
            "task {id}: beta works on it; alpha checks the result, then /accept {id} or /reject {id} <reason>"
        )
    );
    let task_key = format!("agent:beta:task:{id}");
    heard(
        &up,
        &task_key,
        "slack:u1 (a person) gives you this task; agent `alpha` checks your result",
    );
    let task = crate::hub::get(&up, &format!("/v1/tasks/{id}"));
    assert_eq!(
        (
            &task["owner"],
            &task["requester"],
            &task["room"],
            &task["state"]
        ),
        (
            &json!("alpha"),
            &json!("slack:u1"),
            &json!(ALPHA),
            &json!("working")
        ),
        "{task}"
    );

    let usage = say(&up, "ga", "/task beta fix it");
    assert!(
        usage.starts_with("usage: /task <agent> <title> | <acceptance>"),
        "{usage}"
    );
    let stranger = json!({"channel": "slack", "peer": {"kind": "group", "id": "ga"},
        "messageId": "stranger-task", "sender": {"id": "u2"}, "text": "/task beta x | y"});
    let (_, answer) =
        crate::common::signed_inbound(up.addr, crate::hub::SECRET.as_bytes(), &stranger);
    assert!(
        answer["reply"]["text"]
            .as_str()
            .unwrap()
            .contains("nothing was decided"),
        "{answer}"
    );
    let own = say(&up, "ga", "/task alpha x | y");
    assert!(
        own.starts_with("no task was given: a task is for another agent"),
        "{own}"
    );
    // A remote A2A agent takes tasks too: it asks and submits by its A2A task's states
    // (a2a.rs drives one to its result).
    let remote = say(&up, "ga", "/task remote x | y");
    assert!(
        remote.starts_with("task task-") && remote.contains(": remote works on it;"),
        "{remote}"
    );

    let out = up.deepcli(&[
        "tasks",
        "create",
        "check the docs",
        "--owner",
        "beta",
        "--assignee",
        "alpha",
        "--acceptance",
        "no broken link",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(
        said.starts_with("task task-") && said.ends_with(": working\n"),
        "{said}"
    );
    let listed = crate::hub::get(&up, "/v1/tasks");
    // The room's task for beta, the one for the remote, the operator's.
    assert_eq!(listed["count"], 3, "{listed}");
    assert_eq!(listed["tasks"][0]["requester"], "operator", "{listed}");
    let bad = up.deepcli(&[
        "tasks",
        "create",
        "x",
        "--owner",
        "nobody",
        "--assignee",
        "alpha",
        "--acceptance",
        "y",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no agent `nobody` to own the task"));
}

/// The controller killed (SIGKILL) while a turn runs in a submitted task's session: after a
/// restart the task, its history and its artifacts are as they were, the brief and the room's
/// messages were not delivered again, the interrupted turn is not run again, and the task goes
/// on to a verdict.
#[test]
fn a_task_survives_a_controller_killed_mid_task_and_nothing_is_done_twice() {
    let alpha_more = "      permissions: {approvers: [\"slack:u1\"]}\n";
    let mut up = hub_up(&agents("", alpha_more, ""), |_| {});
    let created = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "fix the parser", "acceptance": "its tests pass"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let task_key = format!("agent:beta:task:{id}");
    heard(&up, &task_key, "Title: fix the parser");
    let ws_b = up.state.join("workspaces/beta");
    std::fs::write(ws_b.join("test.log"), "3 passed\n").unwrap();
    let submitted = tool_from(
        &up,
        &task_key,
        "tasks_update",
        json!({"taskId": id, "action": "submit", "text": "fixed", "artifacts": ["test.log"]}),
    );
    assert_eq!(submitted["state"], "submitted", "{submitted}");
    let placed = up
        .state
        .join(format!("workspaces/alpha/.deepcli/tasks/{id}/test.log"));
    let events_before = tool(&up, "tasks_get", json!({"taskId": id}))["events"]
        .as_array()
        .unwrap()
        .len();

    // A turn runs in the task's session when the controller dies.
    std::thread::scope(|scope| {
        let state = up.state.clone();
        let key = task_key.clone();
        scope.spawn(move || {
            let _ = std::process::Command::new(crate::common::bin())
                .args(["--state-dir", state.to_str().unwrap()])
                .args(["sessions", "send", &key, "slow"])
                .output();
        });
        crate::common::wait_until("the slow turn runs", || {
            crate::common::count(
                &up.state,
                &format!(
                    "SELECT count(*) FROM hub_runs WHERE target_session_key = '{task_key}' AND message = 'slow' AND state = 'running'"
                ),
            ) == 1
        });
        up.child.kill().unwrap();
        up.child.wait().unwrap();
    });
    up.restart(|cmd| {
        cmd.env("HOOK", crate::hub::SECRET);
    });
    for agent in ["alpha", "beta"] {
        up.wait_for(&format!("{agent} ready"), |s| {
            Up::runtime(s, agent).is_some_and(|r| r["status"] == "ready")
        });
    }

    let task = tool(&up, "tasks_get", json!({"taskId": id}));
    assert_eq!(task["state"], "submitted", "{task}");
    assert_eq!(
        task["events"].as_array().unwrap().len(),
        events_before,
        "{task}"
    );
    assert_eq!(task["artifacts"][0]["name"], "test.log", "{task}");
    assert_eq!(std::fs::read(&placed).unwrap(), b"3 passed\n");
    let sha = task["artifacts"][0]["sha256"].as_str().unwrap();
    assert_eq!(
        std::fs::read(up.state.join(format!("artifacts/{id}/{sha}"))).unwrap(),
        b"3 passed\n"
    );
    let said = transcript(&up.state, &task_key);
    // What reached the session (not the echo agent's replies, which repeat it).
    let count = |part: &str| {
        said.iter()
            .filter(|(from, t)| from != "agent" && t.contains(part))
            .count()
    };
    assert_eq!(count("Title: fix the parser"), 1, "{said:#?}");
    assert!(
        count("slow") <= 1,
        "the interrupted turn is not run again: {said:#?}"
    );
    assert_eq!(
        crate::common::count(
            &up.state,
            &format!(
                "SELECT count(*) FROM hub_runs WHERE target_session_key = '{task_key}' AND message = 'slow' AND state IN ('running', 'queued')"
            ),
        ),
        0,
        "the interrupted run was settled, not left running or queued again"
    );
    let db = rusqlite::Connection::open(up.state.join("state.db")).unwrap();
    let gave: i64 = db
        .query_row(
            "SELECT count(*) FROM outbox WHERE cause = 'task' AND text LIKE '%gave beta a task%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(gave, 1);

    // It goes on: alpha checks it, the person accepts it.
    let passed = tool(
        &up,
        "tasks_review",
        json!({"taskId": id, "passed": true, "notes": "ran them: 3 pass"}),
    );
    assert_eq!(passed["state"], "pending_acceptance", "{passed}");
    assert_eq!(
        say(&up, "ga", &format!("/accept {id}")),
        format!("task {id}: accepted by slack:u1")
    );
}

/// docs/tasks.md's worked example (seed 002 in one Slack thread): its three files, as written
/// there, validate clean.
#[test]
fn the_worked_examples_files_validate_as_written() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tasks.md"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in ["agents.yaml", "channels.yaml", "bindings.yaml"] {
        let fence = format!("```yaml title={name}\n");
        let start = doc
            .find(&fence)
            .unwrap_or_else(|| panic!("docs/tasks.md has no {name} block"))
            + fence.len();
        let end = start + doc[start..].find("```").unwrap();
        std::fs::write(dir.path().join(name), &doc[start..end]).unwrap();
    }
    let out = std::process::Command::new(crate::common::bin())
        .args(["--config", dir.path().to_str().unwrap(), "validate"])
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("0 errors, 0 warnings in 3 files"), "{said}");
}

/// A task's artifacts together stay within the handing agent's `artifactQuotaBytes` (issue
/// 37): a hand-in that brings them to the quota exactly is taken, one byte past it is refused
/// with the limit, the bytes used and the bytes asked; a file replaced under its own name is
/// not counted twice.
#[test]
fn a_tasks_artifacts_stay_within_the_quota_to_the_byte() {
    let up = hub_up(&agents("", "", "      artifactQuotaBytes: 1000\n"), |_| {});
    let created = tool(
        &up,
        "tasks_create",
        json!({"agentId": "beta", "title": "make files", "acceptance": "they fit"}),
    );
    let id = created["taskId"].as_str().unwrap().to_string();
    let task_key = format!("agent:beta:task:{id}");
    heard(&up, &task_key, "Title: make files");
    let ws_b = up.state.join("workspaces/beta");
    let put = |path: &str, bytes: usize| {
        std::fs::write(ws_b.join(path), vec![b'x'; bytes]).unwrap();
        tool_from(
            &up,
            &task_key,
            "artifacts_put",
            json!({"taskId": id, "path": path}),
        )
    };
    let a = put("a.bin", 600);
    assert_eq!(a["size"], 600, "{a}");
    let b = put("b.bin", 400);
    assert_eq!(b["size"], 400, "at the quota exactly: {b}");
    let c = put("c.bin", 1);
    let why = c["error"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "task `{id}`'s artifacts would take 1001 bytes, over the limit of 1000 bytes (artifactQuotaBytes): 1000 bytes used, 1 asked"
        )),
        "{c}"
    );
    let listed = tool(&up, "artifacts_get", json!({"taskId": id}));
    assert_eq!(
        listed["count"], 2,
        "nothing recorded past the quota: {listed}"
    );
    // a.bin handed in again, a byte smaller: its earlier size is not counted.
    let a = put("a.bin", 599);
    assert_eq!(a["size"], 599, "{a}");
    let c = put("c.bin", 1);
    assert_eq!(c["size"], 1, "{c}");
}
