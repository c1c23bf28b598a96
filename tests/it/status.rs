//! `deepcli status` as a health check: exit codes and `health` that agree with what it prints,
//! from the controller and from the state database (issue 17).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{Proc, Up, bin, wait_until};

struct Status {
    code: i32,
    stdout: String,
    stderr: String,
}

fn status(state: &Path, json: bool) -> Status {
    let mut cmd = Command::new(bin());
    cmd.args(["--state-dir", state.to_str().unwrap(), "status"])
        .env("NO_COLOR", "1")
        .env_remove("DEEPCLI_OPERATOR_TOKEN");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    Status {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The human and the JSON status of `state`, which must agree: the same exit code, and the
/// `health` line saying what `health` says.
fn both(state: &Path) -> (i32, String, Value) {
    let human = status(state, false);
    let json = status(state, true);
    assert_eq!(human.code, json.code, "{}{}", human.stdout, json.stdout);
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    let mut expected = format!(
        "health       {}\n",
        doc["health"]["status"].as_str().unwrap()
    );
    for reason in doc["health"]["reasons"].as_array().unwrap() {
        expected.push_str(&format!("               {}\n", reason.as_str().unwrap()));
    }
    assert!(
        human.stdout.starts_with(&expected),
        "the human status says what the JSON says:\n{}\n{doc:#}",
        human.stdout
    );
    (human.code, human.stdout, doc)
}

const RUNTIME_AGENTS: &str = "agents:\n  list:\n    - id: main\n    - id: worker\n      runtime: {kind: process, command: [sleep, \"600\"]}\n";

/// Regression: `status` exited 0 with a rejected edit. Exit codes follow health: 0 healthy,
/// 1 degraded (with the reasons), 2 no state.
#[test]
fn status_exits_by_health_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let none = status(&dir.path().join("nothing"), true);
    assert_eq!(none.code, 2, "no state: a health check cannot tell");
    assert_eq!(none.stdout, "");
    assert!(
        none.stderr.contains("no deepcli state in"),
        "{}",
        none.stderr
    );

    let up = Up::start(RUNTIME_AGENTS, "bindings: []\n");
    up.wait_for("the runtime ready", |s| {
        Up::runtime(s, "worker").is_some_and(|r| r["status"] == "ready")
    });
    let (code, _, doc) = both(&up.state);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["health"], json!({"status": "healthy", "reasons": []}));
    assert_eq!(doc["source"], "controller");

    up.write_by_rename(
        "bindings.yaml",
        "bindings:\n  - agentId: nobody\n    match: {channel: slack}\n",
    );
    up.wait_for("the edit rejected", |s| !s["rejected"].is_null());
    let (code, human, doc) = both(&up.state);
    assert_eq!(code, 1, "{human}");
    assert_eq!(
        doc["health"],
        json!({"status": "degraded", "reasons": ["the config on disk is rejected (1 error); the last good config keeps running"]})
    );
    assert!(human.contains("rejected     edit"), "{human}");

    up.write_by_rename("bindings.yaml", "bindings: []\n");
    up.wait_for("the rejection cleared", |s| s["rejected"].is_null());
    assert_eq!(both(&up.state).0, 0);
}

/// A runtime that crash-loops degrades the hub.
#[test]
fn a_crash_looping_runtime_degrades_the_status() {
    let agents = "agents:\n  list:\n    - id: main\n    - id: flaky\n      runtime: {kind: process, command: [sh, -c, \"exit 3\"]}\n";
    let up = Up::start(agents, "bindings: []\n");
    up.wait_for("a crash loop", |s| {
        Up::runtime(s, "flaky").is_some_and(|r| r["status"] == "crash-loop")
    });
    let (code, _, doc) = both(&up.state);
    assert_eq!(code, 1);
    let reasons = doc["health"]["reasons"].to_string();
    assert!(
        reasons.contains("runtime `flaky` is in a crash loop"),
        "{reasons}"
    );
}

/// Regression: after `kill -9` of the controller, `status` (from the state database) showed
/// its runtimes `ready` with pids that were dead. A recorded process that still runs is
/// reported as running without a controller; one that is gone shows as `gone`.
#[test]
fn status_after_kill_9_shows_dead_runtimes_as_gone() {
    // Unsandboxed: a sandboxed runtime dies with the controller that started it.
    let mut up = Up::start(
        &crate::common::unsandboxed(RUNTIME_AGENTS),
        "bindings: []\n",
    );
    let running = up.wait_for("the runtime ready", |s| {
        Up::runtime(s, "worker").is_some_and(|r| r["status"] == "ready")
    });
    let pid = Up::runtime(&running, "worker").unwrap()["pid"]
        .as_u64()
        .unwrap();
    wait_until("the runtime recorded as ready", || {
        crate::common::recorded_runtime(&up.state, "worker").is_some_and(|(s, _)| s == "ready")
    });
    let sleeper = Proc::running(pid);
    up.child.kill().unwrap();
    up.child.wait().unwrap();

    let (code, human, doc) = both(&up.state);
    assert_eq!(code, 1, "{human}");
    assert_eq!(doc["source"], "state");
    assert_eq!(Up::runtime(&doc, "worker").unwrap()["status"], "ready");
    assert_eq!(
        doc["health"]["reasons"],
        json!([format!(
            "runtime `worker` (pid {pid}) runs without a controller: nothing delivers messages to it; start `deepcli up`, which stops it and starts it again"
        )])
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the runtime's process gone", || sleeper.gone());
    let (code, human, doc) = both(&up.state);
    assert_eq!(code, 1, "{human}");
    assert_eq!(Up::runtime(&doc, "worker").unwrap()["status"], "gone");
    assert!(
        human.contains(&format!(
            "runtime      worker           gone        pid {pid}"
        )),
        "{human}"
    );
    assert_eq!(
        doc["health"]["reasons"],
        json!([format!(
            "runtime `worker` (pid {pid}) is gone: its controller stopped without stopping it; start `deepcli up`"
        )])
    );
    // `agents list` reads the same record the same way.
    let agents = Command::new(bin())
        .args([
            "--state-dir",
            up.state.to_str().unwrap(),
            "--config",
            up.config.to_str().unwrap(),
        ])
        .args(["agents", "list", "--json"])
        .output()
        .unwrap();
    let agents: Value = serde_json::from_slice(&agents.stdout).unwrap();
    let worker = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "worker")
        .unwrap();
    assert_eq!(worker["runtime"]["status"], "gone", "{agents:#}");
}
