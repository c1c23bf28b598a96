//! `state.retention` (issue 42): the controller prunes on its own, in batches, what is older
//! than each kind's days — counted in its status, `/metrics` and the audit — and `deepcli state
//! prune` does the same at once (`--dry-run` counts); `keepPerSession` keeps the newest rows of
//! each session; `deliveries` cannot go under the platforms' redelivery windows.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Up, bin, count, http};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn deepcli(config: &Path, state: &Path, clock: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env("NO_COLOR", "1")
        .env("DEEPCLI_FAILPOINT_CLOCK_FILE", clock)
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .output()
        .unwrap()
}

const FORTY_DAYS: &str = "3456000";

/// The nice value of `pid`'s thread named `name` (as the kernel cuts it, 15 bytes), looked for
/// every millisecond for up to 10 s: a prune's thread lives only while the prune runs. A
/// thread is seen for a moment before it lowers itself, so 10 ends the search at once and
/// anything else only at the deadline.
fn nice_of_thread(pid: u32, name: &str) -> i64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut seen = None;
    while std::time::Instant::now() < deadline {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() != name {
                continue;
            }
            // stat's fields after the name in parentheses: the nice value is the 19th field.
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
            seen = after
                .split(' ')
                .nth(16)
                .and_then(|n| n.parse().ok())
                .or(seen);
            if seen == Some(10) {
                return 10;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    seen.unwrap_or_else(|| panic!("no thread {name} in process {pid} within 10 s"))
}

#[test]
fn the_controller_prunes_what_retention_lets_go_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = tmp.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n      runtime: {{kind: acp, command: [\"{}\", demo-agent]}}\nstate:\n  retention:\n    transcripts: {{days: 30}}\n    runs: {{days: 30}}\n",
        bin().display()
    );
    let up = Up::start_with(&agents, "bindings: []\n", |c| {
        c.env("DEEPCLI_FAILPOINT_CLOCK_FILE", &clock)
            .env("DEEPCLI_FAILPOINT_PRUNE_MS", "300");
    });
    up.wait_for("main ready", |s| {
        Up::runtime(s, "main").is_some_and(|r| r["status"] == "ready")
    });
    // Upkeep runs behind the turns: the checkpointer always, a prune's reads while it runs
    // (every 300 ms here).
    let pid = up.child.id();
    assert_eq!(nice_of_thread(pid, "wal-checkpointe"), 10);
    assert_eq!(nice_of_thread(pid, "prune-reads"), 10);
    for n in 0..3 {
        let out = deepcli(
            &up.config,
            &up.state,
            &clock,
            &["sessions", "send", "agent:main:main", &format!("SAY {n}")],
        );
        assert!(out.status.success(), "{}", text(&out));
    }
    let transcripts = || count(&up.state, "SELECT count(*) FROM transcript");
    let runs = || count(&up.state, "SELECT count(*) FROM hub_runs");
    assert!(transcripts() >= 6, "{}", transcripts());
    assert_eq!(runs(), 3);
    // Nothing is old yet: the controller's prunes so far took nothing.
    let out = deepcli(
        &up.config,
        &up.state,
        &clock,
        &["state", "prune", "--dry-run"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("transcripts  would delete 0 rows"),
        "{}",
        text(&out)
    );

    // Forty days on.
    std::fs::write(&clock, FORTY_DAYS).unwrap();
    let status = up.wait_for("the transcripts and runs pruned", |s| {
        s["pruned"]["transcripts"].as_u64() >= Some(6) && s["pruned"]["runs"].as_u64() >= Some(3)
    });
    assert_eq!(transcripts(), 0, "{status:#}");
    assert_eq!(runs(), 0);
    assert_eq!(count(&up.state, "SELECT count(*) FROM hub_run_events"), 0);
    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();
    let metrics = http(
        up.addr,
        "GET",
        "/metrics",
        &[("authorization", &format!("Bearer {token}"))],
        b"",
    );
    let metrics = metrics.body.as_str().unwrap().to_string();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("deepcli_state_pruned_rows_total{kind=\"transcripts\"} ")),
        "{metrics}"
    );
    let audit = deepcli(&up.config, &up.state, &clock, &["audit"]);
    assert!(
        text(&audit).contains("prune   retention pruned")
            && text(&audit).contains("by the controller"),
        "{}",
        text(&audit)
    );
}

#[test]
fn state_prune_keeps_the_newest_rows_of_each_session_and_refuses_short_deliveries() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    let state = tmp.path().join("state");
    let clock = tmp.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    std::fs::create_dir_all(&config).unwrap();
    let agents = |retention: &str| {
        std::fs::write(
            config.join("agents.yaml"),
            format!("agents:\n  list:\n    - id: main\n{retention}"),
        )
        .unwrap();
    };
    agents("");
    let out = deepcli(&config, &state, &clock, &["apply", "--auto-approve"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = deepcli(&config, &state, &clock, &["state", "prune"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("sets no state.retention"),
        "{}",
        text(&out)
    );

    let db = rusqlite::Connection::open(state.join("state.db")).unwrap();
    for (session, n) in [("agent:main:main", 5), ("agent:main:other", 1)] {
        for i in 0..n {
            db.execute(
                "INSERT INTO transcript (session_key, provenance, text, at) VALUES (?1, 'inbound', ?2, '2026-12-01T00:00:00Z')",
                rusqlite::params![session, format!("m{i}")],
            )
            .unwrap();
        }
    }
    drop(db);
    agents("state:\n  retention:\n    transcripts: {keepPerSession: 2}\n");
    let out = deepcli(
        &config,
        &state,
        &clock,
        &["state", "prune", "--dry-run", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["pruned"][0],
        serde_json::json!({"kind": "transcripts", "rows": 3})
    );
    assert_eq!(
        count(&state, "SELECT count(*) FROM transcript"),
        6,
        "a dry run deletes nothing"
    );
    let out = deepcli(&config, &state, &clock, &["state", "prune"]);
    assert!(out.status.success(), "{}", text(&out));
    let left: Vec<String> = rusqlite::Connection::open(state.join("state.db"))
        .unwrap()
        .prepare("SELECT text FROM transcript ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        left,
        ["m3", "m4", "m0"],
        "the two newest of main, the one of other"
    );
    let audit = deepcli(&config, &state, &clock, &["audit"]);
    assert!(
        text(&audit).contains("retention pruned 3 rows (3 transcripts) by the cli"),
        "{}",
        text(&audit)
    );

    // Deliveries outlive every platform's redelivery window: under 7 days is refused.
    agents("state:\n  retention:\n    deliveries: {days: 3}\n");
    let out = deepcli(&config, &state, &clock, &["validate"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("state.retention.deliveries.days"),
        "{}",
        text(&out)
    );
}

/// The artifact store's files go with the last row that names them (issue 37): a prune of
/// runs takes the files handed to A2A peers in them, and a task's file that a later hand-in
/// under the same name replaced; a file a row names stays, and so does a young one. `state
/// check` removes what no row names and names a row whose file is missing.
#[test]
fn pruned_runs_take_their_stored_files_and_state_check_finds_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    let state = tmp.path().join("state");
    let clock = tmp.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        "agents:\n  list:\n    - id: main\nstate:\n  retention:\n    runs: {days: 30}\n",
    )
    .unwrap();
    let out = deepcli(&config, &state, &clock, &["apply", "--auto-approve"]);
    assert!(out.status.success(), "{}", text(&out));

    let hash = |c: char| c.to_string().repeat(64);
    let (run_file, kept_run_file, replaced, current) = (hash('a'), hash('b'), hash('c'), hash('d'));
    let runs = state.join("artifacts/a2a-runs");
    let task = state.join("artifacts/task-1");
    for (dir, name) in [
        (runs.join("run-old"), &run_file),
        (runs.join("run-new"), &kept_run_file),
        (task.clone(), &replaced),
        (task.clone(), &current),
    ] {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), name.as_bytes()).unwrap();
    }
    let db = rusqlite::Connection::open(state.join("state.db")).unwrap();
    for (run, finished) in [
        ("run-old", "2026-01-01T00:00:00Z"),
        ("run-new", "2099-01-01T00:00:00Z"),
    ] {
        db.execute(
            "INSERT INTO hub_runs (run_id, kind, source_tool, state, requester_session_key, target_agent_id, target_session_key, correlation_id, message, created_at, finished_at, updated_at)
             VALUES (?1, 'send', 'a2a', 'completed', 'a2a:peer', 'main', 'agent:main:a2a', ?1, 'hi', ?2, ?2, ?2)",
            rusqlite::params![run, finished],
        )
        .unwrap();
    }
    for (run, sha) in [("run-old", &run_file), ("run-new", &kept_run_file)] {
        db.execute(
            "INSERT INTO run_artifacts (run_id, name, sha256, size, media_type, handed_in_by, at) VALUES (?1, 'r.txt', ?2, 64, 'text/plain', 'main', 'now')",
            rusqlite::params![run, sha],
        )
        .unwrap();
    }
    // The row of task-1's `r.txt` names the later hand-in; the earlier one's file is left.
    db.execute(
        "INSERT INTO task_artifacts (task_id, name, sha256, size, handed_in_by, at) VALUES ('task-1', 'r.txt', ?1, 64, 'main', 'now')",
        [&current],
    )
    .unwrap();
    drop(db);

    // Today: the old run goes, but its file is younger than the grace: it stays for now.
    let out = deepcli(&config, &state, &clock, &["state", "prune", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["pruned"][0]["kind"], "runs", "{report}");
    assert_eq!(
        report["pruned"][0]["rows"], 2,
        "the run and its file's row: {report}"
    );
    assert_eq!(report["files"]["files"], 0, "{report}");
    assert!(runs.join("run-old").join(&run_file).is_file());

    // An hour on: what no row names goes, with the directory left empty at the next sweep.
    std::fs::write(&clock, "3600").unwrap();
    let out = deepcli(&config, &state, &clock, &["state", "prune", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["files"],
        serde_json::json!({"files": 2, "bytes": 128}),
        "{report}"
    );
    assert!(!runs.join("run-old").join(&run_file).exists());
    assert!(
        !task.join(&replaced).exists(),
        "the replaced hand-in's file stayed"
    );
    assert!(runs.join("run-new").join(&kept_run_file).is_file());
    assert!(task.join(&current).is_file());
    std::fs::write(&clock, "7200").unwrap();
    let out = deepcli(&config, &state, &clock, &["state", "prune"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!runs.join("run-old").exists());

    // A crash between a prune's commit and its unlink leaves a file no row names: `state
    // check` removes it. A row whose file is missing is named, never left silent.
    std::fs::write(runs.join("run-new").join(&run_file), "orphan").unwrap();
    std::fs::remove_file(task.join(&current)).unwrap();
    std::fs::write(&clock, "10800").unwrap();
    let out = deepcli(&config, &state, &clock, &["state", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("Removed 1 stored artifact files no row named (6 bytes)"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("artifact: task task-1's artifact `r.txt` has no stored file"),
        "{}",
        text(&out)
    );
    assert!(!runs.join("run-new").join(&run_file).exists());
    assert!(runs.join("run-new").join(&kept_run_file).is_file());
}
