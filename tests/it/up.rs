//! `deepcli up` end to end: the real binary on a temp config, edited while it runs.

use std::process::Command;

use crate::common::{Leftovers, Proc, Up, alive, bin, pid_of, pids_in, wait_until};
use serde_json::Value;

const AGENTS: &str = "agents:\n  list:\n    - id: main\n    - id: ops\n";

#[test]
fn edits_reload_and_an_invalid_edit_keeps_the_last_good_config() {
    let mut up = Up::start(AGENTS, "bindings: []\n");
    let first = up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    // Reading the files (as every reconcile does) is not a change: the controller sees the
    // read, counts it as ignored, and stays idle.
    let ignored =
        || metric_value(&up, "deepcli_config_file_events_total{kind=\"ignored\"}").unwrap_or(0.0);
    let before = ignored();
    std::fs::read_to_string(up.config.join("agents.yaml")).unwrap();
    wait_until("the read seen and ignored", || ignored() > before);
    let idle = up.status().unwrap();
    assert_eq!(
        idle["reconciles"], first["reconciles"],
        "no reconcile without a change"
    );
    up.write_by_rename(
        "bindings.yaml",
        "bindings:\n  - {agentId: ops, match: {channel: slack}}\n",
    );
    up.wait_for("a reload after a rename-over save", |s| {
        s["routingGeneration"] == 2
    });
    let mut text = std::fs::read_to_string(up.config.join("bindings.yaml")).unwrap();
    text.push_str("  - {agentId: main, match: {channel: slack, teamId: t1}}\n");
    std::fs::write(up.config.join("bindings.yaml"), &text).unwrap();
    up.wait_for("a reload after an in-place edit", |s| {
        s["routingGeneration"] == 3
    });

    up.write_by_rename(
        "bindings.yaml",
        "bindings:\n  - {agentId: nobody, match: {channel: slack}}\n",
    );
    let doc = up.wait_for("the rejection", |s| !s["rejected"].is_null());
    assert_eq!(doc["routingGeneration"], 3, "the old plan keeps serving");
    assert_eq!(doc["rejections"], 1);
    let diagnostics = doc["rejected"]["diagnostics"].to_string();
    assert!(diagnostics.contains("unknown-agent"), "{diagnostics}");
    let plan = std::fs::read_to_string(up.state.join("routing-plan.json")).unwrap();
    assert!(
        plan.contains("\"generation\": 3"),
        "the published plan is untouched"
    );

    up.write_by_rename("bindings.yaml", &text);
    up.wait_for("the rejection to clear", |s| s["rejected"].is_null());
    assert!(up.terminate().success());
}

/// A metric of the running controller (`GET /metrics` with the operator token).
fn metric_value(up: &Up, name: &str) -> Option<f64> {
    let token = std::fs::read_to_string(up.state.join("operator-token")).ok()?;
    let text = ureq::get(format!("http://{}/metrics", up.addr))
        .header("authorization", &format!("Bearer {token}"))
        .call()
        .ok()?
        .into_body()
        .read_to_string()
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

/// A controller started on state that is already applied serves the published plan: its status
/// and metrics say which generation, as the `/v1/plan` answer and the response headers do (they
/// said none).
#[test]
fn a_restarted_controller_reports_the_routing_generation_in_force() {
    let mut up = Up::start(AGENTS, "bindings: []\n");
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    assert!(up.terminate().success());
    up.restart(|_| {});
    let status = up.wait_for("the restarted controller's first reconcile", |s| {
        s["reconciles"].as_u64() > Some(0)
    });
    assert_eq!(status["routingGeneration"], 1, "{status:#}");
    let token = std::fs::read_to_string(up.state.join("operator-token")).unwrap();
    let metrics = ureq::get(format!("http://{}/metrics", up.addr))
        .header("authorization", &format!("Bearer {token}"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "deepcli_routing_generation 1"),
        "{metrics}"
    );
    assert!(up.terminate().success());
}

/// The controller plans ahead while a save settles; a write after that start must win, and
/// the half-written file must never be judged.
#[test]
fn a_save_in_two_writes_is_applied_whole() {
    let mut up = Up::start_with(AGENTS, "bindings: []\n", |cmd| {
        cmd.args(["--debounce-ms", "2000"]);
    });
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let path = up.config.join("bindings.yaml");
    // Invalid on its own (no agent `nobody`), and planned ahead ~10 ms after it is written.
    std::fs::write(
        &path,
        "bindings:\n  - {agentId: nobody, match: {channel: slack}}\n",
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    std::fs::write(
        &path,
        "bindings:\n  - {agentId: ops, match: {channel: slack}}\n",
    )
    .unwrap();
    let doc = up.wait_for("the reload", |s| s["routingGeneration"] == 2);
    assert_eq!(doc["rejections"], 0, "the first write was never judged");
    let plan = std::fs::read_to_string(up.state.join("routing-plan.json")).unwrap();
    assert!(plan.contains("\"ops\""), "the second write is served");
    assert!(up.terminate().success());
}

#[test]
fn runtimes_are_supervised_restarted_and_stopped() {
    // The worker's grandchild writes its pid, so the test sees it go with each worker.
    let dir = tempfile::tempdir().unwrap();
    let grandchildren = dir.path().join("grandchildren");
    let _left = Leftovers(vec![grandchildren.clone()]);
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: echo\n      runtime: {{kind: acp, command: [deepcli, echo-agent]}}\n    - id: worker\n      runtime: {{kind: process, command: [sh, -c, \"echo to-stdout; echo to-stderr >&2; sleep 600 & echo $! >> {}; exec sleep 601\"]}}\n",
        grandchildren.display()
    );
    let grandchild = |n: usize| {
        wait_until("the worker's grandchild", || {
            pids_in(&grandchildren).len() > n
        });
        Proc::running(pids_in(&grandchildren)[n])
    };
    let mut up = Up::start(&crate::common::unsandboxed(&agents), "bindings: []\n");
    let ready = |id: &'static str| {
        move |s: &Value| Up::runtime(s, id).is_some_and(|r| r["status"] == "ready")
    };
    let doc = up.wait_for("both runtimes ready", |s| {
        ready("echo")(s) && ready("worker")(s)
    });
    let echo = Up::runtime(&doc, "echo").unwrap();
    assert_eq!(
        echo["info"]["agentInfo"]["name"], "deepcli-demo",
        "initialize answered"
    );
    let first = Up::runtime(&doc, "worker").unwrap()["pid"]
        .as_u64()
        .unwrap();
    let first_grandchild = grandchild(0);
    let log = up.state.join("logs/worker.log");
    wait_until("the worker's output in its log", || {
        std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("to-stdout") && l.contains("to-stderr"))
    });

    // A crash is restarted (after the first backoff step).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let doc = up.wait_for("the restart", |s| {
        Up::runtime(s, "worker").is_some_and(|r| r["restarts"] == 1 && r["status"] == "ready")
    });
    let second = Up::runtime(&doc, "worker").unwrap()["pid"]
        .as_u64()
        .unwrap();
    assert_ne!(first, second);
    assert!(
        first_grandchild.gone(),
        "the crashed worker's grandchild is gone"
    );
    let second_grandchild = grandchild(1);

    // A changed command restarts it with the new spec.
    let changed = agents.replace("sleep 601", "sleep 602");
    up.write_by_rename("agents.yaml", &crate::common::unsandboxed(&changed));
    let doc = up.wait_for("the restart for the new command", |s| {
        Up::runtime(s, "worker")
            .is_some_and(|r| r["status"] == "ready" && r["pid"].as_u64() != Some(second))
    });
    let third = Up::runtime(&doc, "worker").unwrap()["pid"]
        .as_u64()
        .unwrap();
    assert!(!alive(second), "the old runtime is gone");
    assert!(second_grandchild.gone(), "with its grandchild");
    let third_grandchild = grandchild(2);

    // A deleted agent: runtime stopped, then its files in trash.
    let without = "agents:\n  list:\n    - id: main\n    - id: echo\n      runtime: {kind: acp, command: [deepcli, echo-agent]}\n";
    up.write_by_rename("agents.yaml", without);
    up.wait_for("the worker to go", |s| {
        Up::runtime(s, "worker").is_none() && s["agents"].as_array().is_some_and(|a| a.len() == 2)
    });
    assert!(!alive(third), "its runtime stopped");
    assert!(third_grandchild.gone(), "with its grandchild");
    assert!(!up.state.join("workspaces/worker").exists());
    let trash: Vec<_> = std::fs::read_dir(up.state.join("trash")).unwrap().collect();
    assert_eq!(trash.len(), 1, "the worker's files are in trash");

    // On a loaded host the echo runtime may still be starting: its pid once it has one.
    let status = up.wait_for("the echo runtime's pid", |s| {
        Up::runtime(s, "echo").is_some_and(|r| r["pid"].is_u64())
    });
    let echo_pid = Up::runtime(&status, "echo").unwrap()["pid"]
        .as_u64()
        .unwrap();
    assert!(up.terminate().success(), "SIGTERM exits 0");
    assert!(!alive(echo_pid), "no runtime survives the controller");
}

#[test]
fn a_second_controller_is_refused_naming_the_holder() {
    let up = Up::start(AGENTS, "bindings: []\n");
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let out = Command::new(bin())
        .args([
            "--config",
            up.config.to_str().unwrap(),
            "--state-dir",
            up.state.to_str().unwrap(),
        ])
        .args(["up", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("locked by pid {}", up.child.id()))
            && stderr.contains("deepcli up"),
        "{stderr}"
    );
}

/// The echo agent written on the official ACP TypeScript SDK: its `initialize` answer is what
/// the status shows, and closing its stdin stops it (the first rung of the stop ladder).
#[test]
fn an_agent_on_the_acp_typescript_sdk_is_ready_and_stops_when_its_stdin_closes() {
    let agents = crate::common::sdk_agents();
    let mut up = Up::start(&agents, "bindings: []\n");
    let doc = up.wait_for("the SDK agent ready", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["status"] == "ready")
    });
    let sdk = Up::runtime(&doc, "sdk").unwrap();
    assert_eq!(sdk["info"]["agentInfo"]["name"], "sdk-echo", "{sdk:#}");
    assert_eq!(sdk["info"]["protocolVersion"], 1);
    assert_eq!(sdk["info"]["agentCapabilities"]["loadSession"], true);
    assert!(
        sdk["info"].get("authenticated").is_none(),
        "no auth method offered"
    );
    let pid = pid_of(&doc, "sdk");

    assert!(up.terminate().success());
    assert!(!alive(pid));
    let recorded = up.recorded();
    let sdk = Up::runtime(&recorded, "sdk").unwrap();
    assert_eq!(sdk["status"], "stopped", "{sdk:#}");
    assert_eq!(
        sdk["lastExit"], "exit code 0",
        "it left on stdin EOF, before any signal"
    );
}

/// codex-acp from the npm registry: authenticated with the env auth method whose variable its
/// config passes (a secret reference, resolved at spawn), ready, and stopped by SIGTERM since it
/// ignores stdin EOF.
#[test]
fn codex_acp_is_authenticated_from_its_env_and_stopped_by_sigterm() {
    let codex = crate::common::codex_acp();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: codex\n      runtime:\n        kind: acp\n        command: [\"{}\"]\n        env: {{OPENAI_API_KEY: {{source: env, id: DEEPCLI_TEST_OPENAI_KEY}}}}\n",
        codex.display()
    );
    let secret = "sk-deepcli-test-not-a-real-key";
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let log = stderr.reopen().unwrap();
    let mut up = Up::start_with(&agents, "bindings: []\n", |cmd| {
        cmd.env("DEEPCLI_TEST_OPENAI_KEY", secret)
            .env_remove("OPENAI_API_KEY")
            .env_remove("CODEX_API_KEY")
            .env("RUST_LOG", "debug")
            .stderr(log);
    });
    let doc = up.wait_for("codex-acp ready", |s| {
        Up::runtime(s, "codex").is_some_and(|r| r["status"] == "ready")
    });
    let codex = Up::runtime(&doc, "codex").unwrap();
    assert_eq!(codex["info"]["agentInfo"]["name"], "codex-acp", "{codex:#}");
    assert_eq!(codex["info"]["authenticated"], "openai-api-key");
    let pid = pid_of(&doc, "codex");

    // Stopping: its stdin closes, it stays, SIGTERM ends it (before SIGKILL would).
    assert!(up.terminate().success());
    assert!(!alive(pid));
    let recorded = up.recorded();
    let codex = Up::runtime(&recorded, "codex").unwrap();
    assert_eq!(codex["status"], "stopped", "{codex:#}");
    assert_eq!(codex["lastExit"], "killed by signal 15", "{codex:#}");
    let logs = std::fs::read_to_string(stderr.path()).unwrap()
        + &std::fs::read_to_string(up.state.join("logs/codex.log")).unwrap_or_default();
    assert!(logs.contains("codex"), "the log is the one written");
    assert!(!logs.contains(secret), "the secret is never logged");
}

/// `kill -9` in the middle of an apply (after a deleted agent's files went to trash, before the
/// trash entry and the new routing generation were recorded): the next controller stops the
/// runtimes the dead one left, resumes the journal and converges.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it)"
)]
fn a_controller_killed_mid_apply_converges_on_the_next_start() {
    let runtime = "runtime: {kind: process, command: [sleep, \"600\"]}";
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: keep\n      {runtime}\n    - id: gone\n      {runtime}\n"
    );
    let mark = tempfile::tempdir().unwrap();
    let paused = mark.path().join("paused");
    let mut up = Up::start_with(
        &crate::common::unsandboxed(&agents),
        "bindings: []\n",
        |cmd| {
            cmd.env("DEEPCLI_FAILPOINT", "after:agent.delete:gone")
                .env("DEEPCLI_FAILPOINT_PAUSE", &paused);
        },
    );
    let doc = up.wait_for("both runtimes ready", |s| {
        ["keep", "gone"]
            .iter()
            .all(|id| Up::runtime(s, id).is_some_and(|r| r["status"] == "ready"))
    });
    let keep = pid_of(&doc, "keep");
    assert_eq!(doc["routingGeneration"], 1);

    let edited = format!(
        "agents:\n  list:\n    - id: main\n    - id: keep\n      {runtime}\n    - id: fresh\n      {runtime}\n"
    );
    up.write_by_rename("agents.yaml", &crate::common::unsandboxed(&edited));
    wait_until("the apply to reach the failpoint", || paused.exists());
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    assert!(
        alive(keep),
        "a killed controller leaves its runtimes behind"
    );
    assert!(
        !up.state.join("workspaces/gone").exists(),
        "moved before the kill"
    );

    up.restart(|_| {});
    let doc = up.wait_for("convergence", |s| {
        s["routingGeneration"] == 2
            && ["keep", "fresh"]
                .iter()
                .all(|id| Up::runtime(s, id).is_some_and(|r| r["status"] == "ready"))
    });
    assert!(!alive(keep), "the runtime left behind was stopped");
    assert_ne!(pid_of(&doc, "keep"), keep);
    assert!(Up::runtime(&doc, "gone").is_none());
    assert!(up.state.join("workspaces/fresh/AGENTS.md").exists());
    let trash: Vec<_> = std::fs::read_dir(up.state.join("trash"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(trash.len(), 1, "one trash entry, not two: {trash:?}");
    assert!(trash[0].starts_with("gone"), "{trash:?}");
    let plan = std::fs::read_to_string(up.state.join("routing-plan.json")).unwrap();
    assert!(plan.contains("\"generation\": 2"));
    assert!(up.terminate().success());

    // Nothing is left to do.
    let out = Command::new(bin())
        .args([
            "--config",
            up.config.to_str().unwrap(),
            "--state-dir",
            up.state.to_str().unwrap(),
            "plan",
            "--detailed-exitcode",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `--log-format json`: one JSON object per line, with the level and the message.
#[test]
fn logs_are_json_lines_with_log_format_json() {
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let log = stderr.reopen().unwrap();
    let mut up = Up::start_with(AGENTS, "bindings: []\n", |cmd| {
        cmd.arg("--log-format").arg("json").stderr(log);
    });
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    // A deleted agent: where its files went and how to get them back are in the log.
    up.write_by_rename("agents.yaml", "agents:\n  list:\n    - id: main\n");
    up.wait_for("ops deleted", |s| {
        s["agents"].as_array().is_some_and(|a| a.len() == 1)
    });
    assert!(up.terminate().success());
    let text = std::fs::read_to_string(stderr.path()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    for want in ["deepcli up", "applied", "deepcli up: stopped"] {
        assert!(messages.contains(&want), "{want:?} not in {messages:?}");
    }
    let trashed = lines
        .iter()
        .find(|l| l["fields"]["message"] == "an agent's files moved to trash")
        .unwrap_or_else(|| panic!("no trash line in {messages:?}"));
    let restore = trashed["fields"]["restore"].as_str().unwrap();
    assert!(
        restore.starts_with("deepcli trash restore ops-"),
        "{trashed}"
    );
    assert!(
        trashed["fields"]["path"]
            .as_str()
            .unwrap()
            .contains("/trash/ops-"),
        "{trashed}"
    );
    assert!(lines.iter().all(|l| l["level"].is_string()));
}

/// A runtime that cannot start at all is `failed` (not `crash-loop`), says why, and is retried.
#[test]
fn a_runtime_that_cannot_start_is_failed_and_says_why() {
    let agents = "agents:\n  list:\n    - id: main\n    - id: ghost\n      runtime: {kind: process, command: [deepcli-no-such-program]}\n";
    let up = Up::start(agents, "bindings: []\n");
    let doc = up.wait_for("the failure", |s| {
        Up::runtime(s, "ghost").is_some_and(|r| r["status"] == "failed")
    });
    let ghost = Up::runtime(&doc, "ghost").unwrap();
    assert!(
        ghost["lastError"]
            .as_str()
            .unwrap()
            .starts_with("cannot start `deepcli-no-such-program`"),
        "{ghost:#}"
    );
    assert!(ghost["nextStart"].is_string(), "it is retried: {ghost:#}");
}

/// Regression: runtime logs and the operator token were world-readable under the usual umask;
/// the controller's database files too.
#[test]
fn runtime_logs_and_the_operator_token_are_private() {
    use std::os::unix::fs::PermissionsExt;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let agents = "agents:\n  list:\n    - id: main\n    - id: worker\n      runtime: {kind: process, command: [sh, -c, \"echo to-stdout; exec sleep 600\"]}\n";
    let mut up = Up::start(agents, "bindings: []\n");
    up.wait_for("the worker ready", |s| {
        Up::runtime(s, "worker").is_some_and(|r| r["status"] == "ready")
    });
    let log = up.state.join("logs/worker.log");
    wait_until("the worker's output in its log", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("to-stdout"))
    });
    // The controller holds its connections open: the WAL and shared memory files exist.
    for name in [
        "logs/worker.log",
        "operator-token",
        "state.db",
        "state.db-wal",
        "state.db-shm",
        "routing-plan.json",
    ] {
        assert_eq!(mode(&up.state.join(name)), 0o600, "{name}");
    }
    assert_eq!(mode(&up.state.join("logs")), 0o700, "logs/");
    assert_eq!(mode(&up.state), 0o700, "the state directory");
    assert!(up.terminate().success());
}

/// Regression: `main` executed itself again (to set the allocator's purge delay) whenever any
/// argument was `up` or `serve`, e.g. a state directory named `up`. Whether it did shows in the
/// environment of the running process.
#[test]
fn an_argument_named_up_does_not_reexec() {
    use std::io::{BufRead, Write};
    const KEY: &str = "MIMALLOC_PURGE_DELAY";
    let environ = |pid: u32| std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let has_key = |env: &[u8]| {
        env.split(|b| *b == 0)
            .any(|var| var.starts_with(format!("{KEY}=").as_bytes()))
    };

    // `deepcli up` does (what the test can see).
    let up = Up::start_with(AGENTS, "bindings: []\n", |cmd| {
        cmd.env_remove(KEY);
    });
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    assert!(
        has_key(&environ(up.child.id())),
        "`deepcli up` re-executed itself"
    );
    drop(up);

    // A command whose arguments only contain `up` or `serve` does not: the echo agent, once it
    // has answered `initialize`, is the image that will run.
    let tmp = tempfile::tempdir().unwrap();
    for args in [["--state-dir", "up"], ["--config", "serve"]] {
        let mut agent = Command::new(bin())
            .current_dir(tmp.path())
            .args(args)
            .arg("echo-agent")
            .env_remove(KEY)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = agent.stdin.take().unwrap();
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":1,"clientCapabilities":{{}}}}}}"#
        )
        .unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(agent.stdout.take().unwrap())
            .read_line(&mut answer)
            .unwrap();
        assert!(answer.contains("deepcli-demo"), "{args:?}: {answer}");
        let env = environ(agent.id());
        drop(stdin);
        assert!(agent.wait().unwrap().success());
        assert!(!has_key(&env), "{args:?}: it executed itself again");
    }
}

/// The `sh -c` runtime `script` for agent `id`, as a line of agents.yaml.
fn sh_runtime(kind: &str, script: &str) -> String {
    format!("runtime: {{kind: {kind}, command: [sh, -c, \"{script}\"]}}")
}

/// Regression (issue 15): a runtime's pid was recorded only once it was ready, so a runtime
/// left by a controller killed while it was `starting` (an ACP agent that had not answered
/// `initialize` yet) ran on: the next controller did not know it.
#[test]
fn a_runtime_killed_while_starting_is_stopped_by_the_next_controller() {
    let dir = tempfile::tempdir().unwrap();
    let leader_file = dir.path().join("leader");
    let _left = Leftovers(vec![leader_file.clone()]);
    // It never answers `initialize`: `starting` for 15 s.
    let script = format!("echo $$ >> {}; exec sleep 600", leader_file.display());
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: slow\n      {}\n",
        sh_runtime("acp", &script)
    );
    let mut up = Up::start(&crate::common::unsandboxed(&agents), "bindings: []\n");
    wait_until("the runtime started and recorded as starting", || {
        !pids_in(&leader_file).is_empty()
            && crate::common::recorded_runtime(&up.state, "slow")
                .is_some_and(|(s, _)| s == "starting")
    });
    let leader = Proc::running(pids_in(&leader_file)[0]);
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    assert!(
        !leader.gone(),
        "a killed controller leaves its runtime behind"
    );

    up.restart(|_| {});
    wait_until("the runtime left while starting to be stopped", || {
        leader.gone()
    });
    up.wait_for("the first reconcile", |s| {
        s["reconciles"].as_u64() >= Some(1)
    });
    assert!(up.terminate().success());
}

/// Issue 24: "no child outlives its runtime" held for the runtime's process group only; a
/// grandchild that called `setsid` (a session and group of its own) survived every stop.
#[test]
fn a_grandchild_that_calls_setsid_is_reaped_on_stop() {
    let dir = tempfile::tempdir().unwrap();
    let files = |id: &str| dir.path().join(id);
    let leaders = dir.path().join("leaders");
    let _left = Leftovers(vec![files("a"), files("b"), leaders.clone()]);
    let runtime = |id: &str| {
        let pids = files(id).display().to_string();
        sh_runtime(
            "process",
            &format!(
                "echo $$ >> {leaders}; setsid sleep 600 & echo $! >> {pids}; sleep 600 & echo $! >> {pids}; exec sleep 601",
                leaders = leaders.display()
            ),
        )
    };
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: a\n      {}\n    - id: b\n      {}\n",
        runtime("a"),
        runtime("b")
    );
    let mut up = Up::start(&crate::common::unsandboxed(&agents), "bindings: []\n");
    let grandchildren = |id: &str| {
        wait_until("the grandchildren's pids", || {
            pids_in(&files(id)).len() == 2
        });
        pids_in(&files(id))
            .into_iter()
            .map(Proc::running)
            .collect::<Vec<_>>()
    };
    let (a, b) = (grandchildren("a"), grandchildren("b"));

    // Stopped because the config no longer asks for it.
    let without_a = agents.replace(&format!("\n      {}", runtime("a")), "");
    up.write_by_rename("agents.yaml", &without_a);
    up.wait_for("a's runtime to stop", |s| {
        Up::runtime(s, "a").is_none() && Up::runtime(s, "b").is_some()
    });
    for p in &a {
        assert!(p.gone(), "{p:?} outlived its runtime's stop");
    }

    // Stopped because the controller stops.
    assert!(up.terminate().success());
    for p in &b {
        assert!(p.gone(), "{p:?} outlived the controller's shutdown");
    }
}

/// Issue 24: a runtime that crashes is started again only once everything it started is gone,
/// including a grandchild in a session of its own.
#[test]
fn grandchildren_are_gone_after_a_crash_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, go) = (dir.path().join("pids"), dir.path().join("go"));
    let _left = Leftovers(vec![pids.clone()]);
    // The first attempt waits for `go`, so the test can look at its grandchildren; every
    // attempt then exits 3 at once.
    let script = format!(
        "setsid sleep 600 & echo $! >> {p}; sleep 600 & echo $! >> {p}; while [ ! -e {g} ]; do sleep 0.05; done; exit 3",
        p = pids.display(),
        g = go.display()
    );
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: crashy\n      {}\n",
        sh_runtime("process", &script)
    );
    let mut up = Up::start(&crate::common::unsandboxed(&agents), "bindings: []\n");
    wait_until("the first attempt's grandchildren", || {
        pids_in(&pids).len() == 2
    });
    let first: Vec<Proc> = pids_in(&pids).into_iter().map(Proc::running).collect();
    std::fs::write(&go, "").unwrap();
    wait_until("a second attempt", || pids_in(&pids).len() >= 4);
    for p in &first {
        assert!(p.gone(), "{p:?} outlived the crash of its runtime");
    }
    assert!(up.terminate().success());
}

/// Issue 24: a controller killed with `kill -9` leaves its runtimes running; the next one stops
/// them, and with them every process they started: a grandchild in a session of its own, and
/// one whose parent exited (orphaned, so no longer found under the runtime).
#[test]
fn a_killed_controllers_successor_reaps_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, leader_file) = (dir.path().join("pids"), dir.path().join("leader"));
    let _left = Leftovers(vec![pids.clone(), leader_file.clone()]);
    // Each grandchild writes its own pid once it is what it will be (after `setsid`); the
    // runtime is ready (and so recorded) only after all three did.
    let grandchild = format!("sh -c 'echo $$ >> {}; exec sleep 600'", pids.display());
    let script = format!(
        "echo $$ >> {l}; (setsid {grandchild} &); setsid {grandchild} & {grandchild} & while [ $(cat {p} 2>/dev/null | wc -l) -lt 3 ]; do sleep 0.01; done; exec {bin} echo-agent",
        l = leader_file.display(),
        p = pids.display(),
        bin = bin().display()
    );
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: agent\n      {}\n",
        sh_runtime("acp", &script)
    );
    let mut up = Up::start(&crate::common::unsandboxed(&agents), "bindings: []\n");
    wait_until("the runtime recorded as ready", || {
        crate::common::recorded_runtime(&up.state, "agent").is_some_and(|(s, _)| s == "ready")
    });
    let leader = Proc::running(pids_in(&leader_file)[0]);
    let grandchildren: Vec<Proc> = pids_in(&pids).into_iter().map(Proc::running).collect();
    assert_eq!(grandchildren.len(), 3);
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    // (The echo agent itself may leave on its stdin's EOF.)
    assert!(
        grandchildren.iter().all(|p| !p.gone()),
        "a killed controller leaves its runtime's processes behind"
    );

    up.restart(|_| {});
    up.wait_for("the runtime started again", |s| {
        Up::runtime(s, "agent")
            .is_some_and(|r| r["status"] == "ready" && r["pid"].as_u64() != Some(leader.pid))
    });
    assert!(leader.gone(), "the runtime left behind was stopped");
    for p in &grandchildren {
        assert!(p.gone(), "{p:?} outlived its runtime's controller");
    }
    assert!(up.terminate().success());
}

/// `agents add` while a controller runs on the state says the controller applies it (it used
/// to send the user to `deepcli apply`, which is refused while `up` runs) — and it does.
#[test]
fn agents_add_under_a_running_controller_says_who_applies_it() {
    let up = Up::start(AGENTS, "bindings: []\n");
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let out = Command::new(bin())
        .args(["--config", up.config.to_str().unwrap()])
        .args(["--state-dir", up.state.to_str().unwrap()])
        .args(["agents", "add", "writer", "--json"])
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let added: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(added["appliedBy"]["by"], "controller", "{added:#}");
    assert_eq!(added["appliedBy"]["pid"], up.child.id(), "{added:#}");
    up.wait_for("writer applied by the controller", |s| {
        s["agents"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "writer"))
    });

    // An edit in another config directory, on the same state: that controller never sees it,
    // and the note says so rather than promising it.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("agents.yaml"), AGENTS).unwrap();
    let out = Command::new(bin())
        .args(["--config", other.path().to_str().unwrap()])
        .args(["--state-dir", up.state.to_str().unwrap()])
        .args(["agents", "add", "editor", "--dry-run"])
        .env_remove("DEEPCLI_OPERATOR_TOKEN")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains(&format!(
            "the controller running on this state (pid {}) watches {}, not this config directory: it would not see the edit",
            up.child.id(),
            std::fs::canonicalize(&up.config).unwrap().display()
        )),
        "{printed}"
    );
}

/// Issue 24: a reload that deletes most agents (an agents.yaml emptied by mistake) is a plan
/// that waits for an operator. Nothing of it is applied — neither the deletes nor the agent it
/// adds — the runtimes keep running, the status says why, and fixing the file unblocks it.
#[test]
fn a_mass_delete_under_up_is_blocked_and_a_fixed_config_unblocks_it() {
    let dir = tempfile::tempdir().unwrap();
    let leaders = dir.path().join("leaders");
    let _left = Leftovers(vec![leaders.clone()]);
    let runtime = sh_runtime(
        "process",
        &format!("echo $$ >> {}; exec sleep 600", leaders.display()),
    );
    let agents = |ids: &[&str]| {
        let mut text = "agents:\n  list:\n    - id: main\n".to_string();
        for id in ids {
            text.push_str(&format!("    - id: {id}\n      {runtime}\n"));
        }
        text
    };
    let mut up = Up::start(&agents(&["a", "b", "c"]), "bindings: []\n");
    let ready = |s: &Value, id: &str| Up::runtime(s, id).is_some_and(|r| r["status"] == "ready");
    let before = up.wait_for("three runtimes ready", |s| {
        ["a", "b", "c"].iter().all(|id| ready(s, id))
    });
    let pids: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|id| pid_of(&before, id))
        .collect();

    // Three of four agents deleted, one added.
    up.write_by_rename("agents.yaml", &agents(&["d"]));
    let blocked = up.wait_for("the plan blocked", |s| {
        s["blocked"].as_array().is_some_and(|b| !b.is_empty())
    });
    let reason = blocked["blocked"][0].as_str().unwrap();
    assert!(
        reason.contains("deletes 3 of 4 managed agents") && reason.contains("--allow-mass-delete"),
        "{reason}"
    );
    for key in ["serial", "routingGeneration", "configHash", "agents"] {
        assert_eq!(blocked[key], before[key], "{key}: nothing was applied");
    }
    for (id, pid) in ["a", "b", "c"].iter().zip(&pids) {
        assert!(ready(&blocked, id), "{id} keeps running: {blocked:#}");
        assert_eq!(pid_of(&blocked, id), *pid, "{id} was not restarted");
        assert!(alive(*pid), "{id}'s process is there");
        assert!(up.state.join("workspaces").join(id).exists(), "{id} stays");
    }
    assert!(Up::runtime(&blocked, "d").is_none(), "{blocked:#}");
    assert!(!up.state.join("workspaces/d").exists(), "the add waits too");
    let human = Command::new(bin())
        .args(["--state-dir", up.state.to_str().unwrap(), "status"])
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("blocked") && l.contains("deletes 3 of 4 managed agents")),
        "{human}"
    );

    // The file fixed (the agents back, the new one kept): applied, and unblocked.
    up.write_by_rename("agents.yaml", &agents(&["a", "b", "c", "d"]));
    let fixed = up.wait_for("the fixed config applied", |s| {
        s["blocked"].as_array().is_some_and(|b| b.is_empty()) && ready(s, "d")
    });
    assert_eq!(
        fixed["serial"].as_u64(),
        before["serial"].as_u64().map(|s| s + 1),
        "{fixed:#}"
    );
    assert!(up.state.join("workspaces/d/AGENTS.md").exists());
    for (id, pid) in ["a", "b", "c"].iter().zip(&pids) {
        assert_eq!(pid_of(&fixed, id), *pid, "{id} ran on throughout");
    }
    assert!(up.terminate().success());
}

/// The waits the controller logged before each new start of `agent`'s runtime (its JSON log,
/// at debug level for the runtime module), in order.
fn backoff_waits(log: &std::path::Path, agent: &str) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["fields"]["message"] == "runtime starts again after its backoff"
                && l["fields"]["agent"] == agent
        })
        .filter_map(|l| l["fields"]["wait_ms"].as_u64())
        .collect()
}

/// Issue 24: a runtime that keeps crashing waits twice as long before each new start, up to the
/// cap; after a run of the healthy time, the wait starts again from the first step. Timings
/// are shortened (failpoints) to 50 ms doubling to 400 ms, healthy after 2 s; the waits are read
/// from the controller's log, the attempts from the runtime's own record.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it)"
)]
fn the_backoff_doubles_to_its_cap_and_starts_over_after_a_healthy_run() {
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    // Every attempt exits 1 at once, but the sixth, which runs longer than the healthy time.
    let script = format!(
        "echo start >> {s}; n=$(($(wc -l < {s}))); if [ $n -eq 6 ]; then sleep 2.2; fi; exit 1",
        s = starts.display()
    );
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: crashy\n      {}\n",
        sh_runtime("process", &script)
    );
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let log = stderr.reopen().unwrap();
    let mut up = Up::start_with(
        &crate::common::unsandboxed(&agents),
        "bindings: []\n",
        |cmd| {
            cmd.env(
                "DEEPCLI_FAILPOINT_RUNTIME_MS",
                "backoff_start=50,backoff_max=400,healthy_after=2000",
            )
            .env("RUST_LOG", "info,deepcli::runtime=debug")
            .args(["--log-format", "json"])
            .stderr(log);
        },
    );
    wait_until("eight restarts", || {
        backoff_waits(stderr.path(), "crashy").len() >= 8
    });
    let waits = backoff_waits(stderr.path(), "crashy");
    assert_eq!(
        waits[..8],
        [50, 100, 200, 400, 400, 50, 100, 200],
        "doubling to the cap; the sixth attempt ran 2.2 s"
    );
    let doc = up.wait_for("the status to count them", |s| {
        Up::runtime(s, "crashy").is_some_and(|r| r["restarts"].as_u64() >= Some(8))
    });
    let crashy = Up::runtime(&doc, "crashy").unwrap();
    assert_eq!(crashy["lastExit"], "exit code 1", "{crashy:#}");
    let attempts = std::fs::read_to_string(&starts).unwrap().lines().count();
    assert!(attempts >= 8, "each restart is an attempt: {attempts}");
    assert!(up.terminate().success());
}

/// Issue 24: the last rung of the stop ladder. A runtime that stays when its stdin closes and
/// traps SIGTERM (it notes the signal, and goes on) is killed with SIGKILL once the stop
/// timeout (shortened with failpoints) is over, and the controller's stop completes.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs --features failpoints (scripts/test sets it)"
)]
fn a_runtime_that_ignores_sigterm_is_killed_after_the_stop_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (leader, signals) = (dir.path().join("leader"), dir.path().join("signals"));
    let _group = KillGroups(leader.clone());
    let script = format!(
        "trap 'echo TERM >> {signals}' TERM; echo $$ >> {leader}; while :; do sleep 0.05; done",
        signals = signals.display(),
        leader = leader.display()
    );
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: stubborn\n      {}\n",
        sh_runtime("process", &script)
    );
    let mut up = Up::start_with(
        &crate::common::unsandboxed(&agents),
        "bindings: []\n",
        |cmd| {
            cmd.env(
                "DEEPCLI_FAILPOINT_RUNTIME_MS",
                "stdin_grace=100,stop_timeout=500",
            );
        },
    );
    up.wait_for("the runtime ready", |s| {
        Up::runtime(s, "stubborn").is_some_and(|r| r["status"] == "ready")
    });
    wait_until("the runtime's pid", || !pids_in(&leader).is_empty());
    let stubborn = Proc::running(pids_in(&leader)[0]);

    assert!(up.terminate().success(), "the controller stopped");
    assert!(stubborn.gone(), "the runtime is gone");
    let said = std::fs::read_to_string(&signals).unwrap_or_default();
    assert!(
        said.lines().any(|l| l == "TERM"),
        "SIGTERM came first, and was survived: {said:?}"
    );
    let recorded = up.recorded();
    let stubborn = Up::runtime(&recorded, "stubborn").unwrap();
    assert_eq!(stubborn["status"], "stopped", "{stubborn:#}");
    assert_eq!(stubborn["lastExit"], "killed by signal 9", "{stubborn:#}");
}

/// Kills, when a test ends (failed or not), the process groups whose leaders' pids are in the
/// file: a runtime that outlives its controller must not outlive the test.
struct KillGroups(std::path::PathBuf);

impl Drop for KillGroups {
    fn drop(&mut self) {
        for pid in pids_in(&self.0) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The controller adopts orphans, and looks at what the host can sandbox with when it starts
/// (bubblewrap asked for its namespaces): that look leaves it no zombie child. It left one, the
/// probe's init, for as long as the controller ran.
#[test]
fn the_sandbox_probe_at_start_leaves_no_zombie() {
    let mut up = Up::start(AGENTS, "bindings: []\n");
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
    let me = up.child.id().to_string();
    let zombies = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                // `pid (comm) state ppid …`: the comm may hold spaces, so after its `)`.
                let after = stat.rsplit_once(") ").map_or("", |(_, after)| after);
                let fields: Vec<&str> = after.split_whitespace().collect();
                fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str())
            })
            .collect()
    };
    // Time for an orphan's exit to land, were there one.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(zombies(), Vec::<String>::new(), "zombies of the controller");
    assert!(up.terminate().success());
}
