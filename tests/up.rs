//! `deepcli up` end to end: the real binary on a temp config, edited while it runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Up {
    child: Child,
    _tmp: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
}

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("deepcli")
}

impl Up {
    fn start(agents: &str, bindings: &str) -> Up {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("agents.yaml"), agents).unwrap();
        std::fs::write(config.join("bindings.yaml"), bindings).unwrap();
        std::fs::write(
            config.join("channels.yaml"),
            "channels:\n  slack:\n    accounts:\n      default: {botToken: {source: env, id: SLACK_TOKEN}}\n",
        )
        .unwrap();
        let child = Command::new(bin())
            .args([
                "--config",
                config.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
            ])
            .args(["up", "--listen", "127.0.0.1:0", "--debounce-ms", "100"])
            .env("HOME", tmp.path())
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Up {
            child,
            _tmp: tmp,
            config,
            state,
        }
    }

    fn status(&self) -> Option<Value> {
        let out = Command::new(bin())
            .args([
                "--state-dir",
                self.state.to_str().unwrap(),
                "status",
                "--json",
            ])
            .output()
            .ok()?;
        let doc: Value = serde_json::from_slice(&out.stdout).ok()?;
        (doc["source"] == "controller").then_some(doc)
    }

    /// Polls the status until `check` holds (30 s at most).
    fn wait_for(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some(doc) = self.status() {
                if check(&doc) {
                    return doc;
                }
                last = doc;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}; last status:\n{last:#}");
    }

    fn runtime<'a>(doc: &'a Value, id: &str) -> Option<&'a Value> {
        doc["runtimes"]
            .as_array()?
            .iter()
            .find(|r| r["agentId"] == id)
    }

    fn write_by_rename(&self, name: &str, text: &str) {
        let tmp = self.config.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.config.join(name)).unwrap();
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the controller did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

const AGENTS: &str = "agents:\n  list:\n    - id: main\n    - id: ops\n";

#[test]
fn edits_reload_and_an_invalid_edit_keeps_the_last_good_config() {
    let up = Up::start(AGENTS, "bindings: []\n");
    up.wait_for("the first apply", |s| s["routingGeneration"] == 1);
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

#[test]
fn runtimes_are_supervised_restarted_and_stopped() {
    let agents = "agents:\n  list:\n    - id: main\n    - id: echo\n      runtime: {kind: acp, command: [deepcli, echo-agent]}\n    - id: worker\n      runtime: {kind: process, command: [sh, -c, \"sleep 600 & exec sleep 601\"]}\n";
    let up = Up::start(agents, "bindings: []\n");
    let ready = |id: &'static str| {
        move |s: &Value| Up::runtime(s, id).is_some_and(|r| r["status"] == "ready")
    };
    let doc = up.wait_for("both runtimes ready", |s| {
        ready("echo")(s) && ready("worker")(s)
    });
    let echo = Up::runtime(&doc, "echo").unwrap();
    assert_eq!(
        echo["info"]["agentInfo"]["name"], "deepcli-echo",
        "initialize answered"
    );
    let first = Up::runtime(&doc, "worker").unwrap()["pid"]
        .as_u64()
        .unwrap();

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

    // A changed command restarts it with the new spec.
    let changed = agents.replace("sleep 601", "sleep 602");
    up.write_by_rename("agents.yaml", &changed);
    let doc = up.wait_for("the restart for the new command", |s| {
        Up::runtime(s, "worker")
            .is_some_and(|r| r["status"] == "ready" && r["pid"].as_u64() != Some(second))
    });
    let third = Up::runtime(&doc, "worker").unwrap()["pid"]
        .as_u64()
        .unwrap();
    assert!(!alive(second), "the old runtime is gone");

    // A deleted agent: runtime stopped, then its files in trash.
    let without = "agents:\n  list:\n    - id: main\n    - id: echo\n      runtime: {kind: acp, command: [deepcli, echo-agent]}\n";
    up.write_by_rename("agents.yaml", without);
    up.wait_for("the worker to go", |s| {
        Up::runtime(s, "worker").is_none() && s["agents"].as_array().is_some_and(|a| a.len() == 2)
    });
    assert!(!alive(third), "its runtime stopped");
    assert!(!up.state.join("workspaces/worker").exists());
    let trash: Vec<_> = std::fs::read_dir(up.state.join("trash")).unwrap().collect();
    assert_eq!(trash.len(), 1, "the worker's files are in trash");

    let echo_pid = Up::runtime(&up.status().unwrap(), "echo").unwrap()["pid"]
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
