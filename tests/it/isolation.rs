//! Isolation (isolation.md, "Tests that hold it"): an attacker agent on the official ACP SDK
//! (the SDK echo agent's `exec`, as a prompt-injected coding agent would run shell commands),
//! under `deepcli up`, probes from inside its runtime and from a `setsid` grandchild. With the
//! sandbox every probe is refused; the same probes with `sandbox.mode: off` show what is exposed,
//! so that these tests cannot pass for want of a working probe.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Up, sdk_echo_agent};

/// A controller with the attacker `evil` (whose `sandbox:` is `sandbox`) and `other`, whose
/// workspace outside the state directory holds a secret file.
fn attacker_up(sandbox: &str, configure: impl FnOnce(&mut std::process::Command)) -> Up {
    let other = tempfile::tempdir().unwrap().keep();
    std::fs::write(other.join("secret.txt"), "other agent's secret").unwrap();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: evil\n      runtime: {{kind: acp, command: [node, \"{}\"], env: {{OWN_KEY: \"${{EVIL_KEY}}\"}}}}\n      sandbox: {sandbox}\n    - id: other\n      workspace: {}\n      runtime: {{kind: process, command: [sleep, \"100000\"], env: {{KEY: \"${{OTHER_AGENT_KEY}}\"}}}}\n",
        sdk_echo_agent().display(),
        other.display(),
    );
    let up = Up::start_with(
        &agents,
        "bindings:\n  - {agentId: evil, match: {channel: slack}}\n",
        |cmd| {
            cmd.env("EVIL_KEY", "evil-own-key")
                .env("SLACK_TOKEN", "xoxb-controller-secret")
                .env("OTHER_AGENT_KEY", "other-secret");
            configure(cmd);
        },
    );
    up.wait_for("the attacker agent ready", |s| {
        Up::runtime(s, "evil").is_some_and(|r| r["status"] == "ready")
            && Up::runtime(s, "other").is_some_and(|r| r["status"] == "ready")
    });
    up
}

/// What the agent answers `text` (through the running controller, as the operator).
fn say(up: &Up, text: &str) -> String {
    let out = up.deepcli(&[
        "inbound",
        "send",
        "--channel",
        "slack",
        "--peer",
        "direct:u1",
        text,
    ]);
    assert!(
        out.status.success(),
        "inbound send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the probes inside the agent; each says `NAME=open` or `NAME=shut`.
fn probe(up: &Up, other_workspace: &Path) -> BTreeMap<String, String> {
    let root = up._tmp.path();
    let script = format!(
        r#"exec p() {{ if eval "$2" >/dev/null 2>&1; then echo "$1=open"; else echo "$1=shut"; fi; }}
p env_channel_token '[ -n "$SLACK_TOKEN" ]'
p env_other_agent '[ -n "$OTHER_AGENT_KEY" ]'
p env_own '[ "$OWN_KEY" = evil-own-key ]'
p controller_environ 'grep -q SLACK_TOKEN /proc/{ctl}/environ'
p controller_signal 'kill -0 {ctl}'
p state_db 'head -c 15 {state}/state.db | grep -q SQLite'
p operator_token 'test -s {state}/operator-token && cat {state}/operator-token'
p config_read 'grep -q evil {config}/agents.yaml'
p config_write 'touch {config}/probe'
p other_workspace 'grep -q secret {other}/secret.txt'
p write_outside 'touch {root}/outside-probe'
p controller_port 'exec 3<>/dev/tcp/127.0.0.1/{port}'
p own_workspace 'touch ./own-probe'
setsid env -u DEEPCLI_AGENT_ID sleep 987651 >/dev/null 2>&1 < /dev/null &
echo done"#,
        ctl = up.child.id(),
        state = up.state.display(),
        config = up.config.display(),
        other = other_workspace.display(),
        root = root.display(),
        port = up.addr.port(),
    );
    let answer = say(up, &script);
    assert!(answer.contains("done"), "the probe did not run: {answer}");
    answer
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, v)| !k.contains(' ') && (*v == "open" || *v == "shut"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn other_workspace(up: &Up) -> std::path::PathBuf {
    let agents = std::fs::read_to_string(up.config.join("agents.yaml")).unwrap();
    let line = agents
        .lines()
        .find_map(|l| l.trim().strip_prefix("workspace: "))
        .unwrap();
    line.into()
}

/// A controller stopped however the test ends (a failed assertion included).
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

/// The pids of processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

fn wait_gone(marker: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn shut(found: &BTreeMap<String, String>, names: &[&str]) {
    for name in names {
        assert_eq!(
            found.get(*name).map(String::as_str),
            Some("shut"),
            "`{name}` is reachable from inside the sandbox: {found:?}"
        );
    }
}

fn open(found: &BTreeMap<String, String>, names: &[&str]) {
    for name in names {
        assert_eq!(
            found.get(*name).map(String::as_str),
            Some("open"),
            "`{name}`: {found:?}"
        );
    }
}

#[test]
fn an_agent_in_its_sandbox_reaches_no_secret_state_process_or_other_agent() {
    let up = attacker_up("{network: none}", |_| {});
    let found = probe(&up, &other_workspace(&up));
    shut(
        &found,
        &[
            "env_channel_token",
            "env_other_agent",
            "controller_environ",
            "controller_signal",
            "state_db",
            "operator_token",
            "config_write",
            "other_workspace",
            "controller_port",
        ],
    );
    // The test's directory is under /tmp, which is the sandbox's own: the write lands there,
    // never on the host.
    assert!(!up._tmp.path().join("outside-probe").exists());
    // What is its own still works: its key, its workspace; the config reads (references only).
    open(&found, &["env_own", "own_workspace", "config_read"]);
    assert!(!up.config.join("probe").exists());

    hub_works_and_nothing_outlives_the_stop(up);
}

/// The sandboxed attacker's hub tools still reach it over its socket (stdio MCP), not the
/// controller's port; and nothing it started outlives the controller's stop, the `setsid`
/// grandchild included.
fn hub_works_and_nothing_outlives_the_stop(mut up: Up) {
    let answer = say(&up, "mcp session_status {}");
    assert!(answer.contains("mcp: "), "{answer}");
    assert!(answer.contains("agent:evil:"), "{answer}");

    assert!(
        !processes_with("987651").is_empty(),
        "the grandchild never ran"
    );
    assert!(up.terminate().success());
    assert!(
        wait_gone("987651"),
        "a setsid grandchild outlived the controller's stop"
    );
}

#[test]
fn the_same_probes_with_the_sandbox_off_show_the_exposure() {
    let mut up = attacker_up("{mode: off}", |_| {});
    let found = probe(&up, &other_workspace(&up));
    open(
        &found,
        &[
            "controller_signal",
            "state_db",
            "operator_token",
            "config_write",
            "other_workspace",
            "write_outside",
            "controller_port",
        ],
    );
    assert!(up._tmp.path().join("outside-probe").exists());
    // The environment is by allowlist whatever the sandbox says.
    shut(&found, &["env_channel_token", "env_other_agent"]);
    open(&found, &["env_own"]);
    let status = up.wait_for("the status", |_| true);
    assert_eq!(Up::runtime(&status, "evil").unwrap()["sandbox"], "off");
    assert!(up.terminate().success());
    // Without a PID namespace the grandchild that cleared DEEPCLI_AGENT_ID escapes the stop.
    let escaped = processes_with("987651");
    for pid in &escaped {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        !escaped.is_empty(),
        "the unsandboxed grandchild was stopped"
    );
}

/// The Landlock backend on a layout it can enforce (the state directory outside every grant):
/// every file, process and credential probe is refused as under bubblewrap, TCP included; what
/// Landlock leaves open is said in `status`. The `setsid` grandchild dies with the stop: the
/// runtime's cgroup is killed.
#[test]
fn an_agent_under_landlock_reaches_no_secret_state_process_or_other_agent() {
    let up = attacker_up("{backend: landlock, network: none}", |_| {});
    let status = up.wait_for("the status", |_| true);
    assert_eq!(
        Up::runtime(&status, "evil").unwrap()["sandbox"],
        "all (landlock, network none; not contained: UDP and Unix sockets, the process list)"
    );
    let found = probe(&up, &other_workspace(&up));
    shut(
        &found,
        &[
            "env_channel_token",
            "env_other_agent",
            "controller_environ",
            "controller_signal",
            "state_db",
            "operator_token",
            "config_write",
            "other_workspace",
            "write_outside",
            "controller_port",
        ],
    );
    assert!(!up._tmp.path().join("outside-probe").exists());
    assert!(!up.config.join("probe").exists());
    open(&found, &["env_own", "own_workspace", "config_read"]);

    hub_works_and_nothing_outlives_the_stop(up);
}

/// `backend: landlock` (and `auto` without bubblewrap) on the quickstart's layout, where the
/// state directory lies inside the package the agent's command runs from: Landlock cannot hide
/// it, so neither runtime starts, and `status` says why and how to fix it.
#[test]
fn landlock_on_a_layout_that_needs_hiding_leaves_the_runtime_stopped_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = tmp.path().join("checkout");
    let config = checkout.join("config");
    let state = checkout.join(".deepcli-demo");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(checkout.join("package.json"), "{}").unwrap();
    std::fs::write(checkout.join("agent.sh"), "exec sleep 600\n").unwrap();
    let script = checkout.join("agent.sh");
    std::fs::write(
        config.join("agents.yaml"),
        format!(
            "agents:\n  list:\n    - id: main\n    - id: pinned\n      runtime: {{kind: process, command: [sh, \"{s}\"]}}\n      sandbox: {{backend: landlock}}\n    - id: auto\n      runtime: {{kind: process, command: [sh, \"{s}\"]}}\n",
            s = script.display()
        ),
    )
    .unwrap();
    std::fs::write(config.join("bindings.yaml"), "bindings: []\n").unwrap();
    let child = Stop(crate::common::controller(
        tmp.path(),
        &config,
        &state,
        |cmd| {
            cmd.env("DEEPCLI_FAILPOINT_SANDBOX", "no-bwrap");
        },
    ));
    let _addr = crate::common::listening(&state, child.0.id());
    let status = || {
        let out = std::process::Command::new(crate::common::bin())
            .args(["--state-dir", state.to_str().unwrap(), "status", "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let failed = |doc: &serde_json::Value, id: &str| {
        Up::runtime(doc, id).is_some_and(|r| {
            r["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("Landlock only grants access"))
        })
    };
    let mut doc = status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(failed(&doc, "pinned") && failed(&doc, "auto")) {
        assert!(Instant::now() < deadline, "no reason given: {doc:#}");
        std::thread::sleep(Duration::from_millis(100));
        doc = status();
    }
    let hidden = format!(
        "{} must stay hidden but lies inside {}",
        state.display(),
        checkout.display()
    );
    for id in ["pinned", "auto"] {
        let runtime = Up::runtime(&doc, id).unwrap();
        let error = runtime["lastError"].as_str().unwrap();
        assert!(error.contains(&hidden), "{error}");
        assert!(error.contains("install bubblewrap"), "{error}");
        assert_ne!(runtime["status"], "ready");
        assert!(runtime["pid"].is_null(), "{runtime}");
        assert_eq!(runtime["sandbox"], "all (not applied, network host)");
    }
    assert!(
        Up::runtime(&doc, "pinned").unwrap()["lastError"]
            .as_str()
            .unwrap()
            .contains("the landlock backend cannot enforce")
    );
    drop(child);
}

/// A local fake "upstream" that answers every request with `fake-says-hi`.
fn fake_upstream() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\nconnection: close\r\n\r\nfake-says-hi",
                );
            });
        }
    });
    addr
}

#[test]
fn egress_allowlist_passes_named_hosts_through_the_proxy_and_counts_refusals() {
    let fake = fake_upstream();
    let up = attacker_up("{network: allowlist, allowedDomains: [fake.test]}", |cmd| {
        cmd.env(
            "DEEPCLI_FAILPOINT_EGRESS_RESOLVE",
            "fake.test=127.0.0.1,other.test=127.0.0.1",
        );
    });
    let port = fake.port();
    let answer = say(
        &up,
        &format!(
            "exec curl -s http://fake.test:{port}/; echo; curl -s -o /dev/null -w 'other=%{{http_code}}' http://other.test:{port}/; echo; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo raw=open || echo raw=shut"
        ),
    );
    assert!(answer.contains("fake-says-hi"), "{answer}");
    assert!(answer.contains("other=403"), "{answer}");
    assert!(answer.contains("raw=shut"), "{answer}");
    let answer = crate::common::http(
        up.addr,
        "GET",
        "/metrics",
        &[(
            "authorization",
            &format!(
                "Bearer {}",
                std::fs::read_to_string(up.state.join("operator-token"))
                    .unwrap()
                    .trim()
            ),
        )],
        b"",
    );
    let text = answer.body.as_str().unwrap_or_default().to_string();
    assert!(
        text.contains("deepcli_sandbox_egress_refused_total{agent=\"evil\"} 1"),
        "{text}"
    );
}

#[test]
fn a_missing_backend_leaves_the_runtime_stopped_with_the_reason() {
    let agents = format!(
        "agents:\n  list:\n    - id: main\n    - id: evil\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n",
        sdk_echo_agent().display()
    );
    let up = Up::start_with(&agents, "bindings: []\n", |cmd| {
        cmd.env("DEEPCLI_FAILPOINT_SANDBOX", "no-bwrap,no-landlock");
    });
    let status = up.wait_for("the runtime refused to start", |s| {
        Up::runtime(s, "evil").is_some_and(|r| {
            r["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("install bubblewrap"))
        })
    });
    let runtime = Up::runtime(&status, "evil").unwrap();
    assert_ne!(runtime["status"], "ready");
    assert!(runtime["pid"].is_null(), "{runtime}");
    assert_eq!(runtime["sandbox"], "all (not applied, network host)");
}

/// The quickstart's layout: the state directory inside the tree the agent's command runs from
/// (a checkout holding `package.json`, its script and `.deepcli-demo/`). That tree is readable;
/// the state inside it is not.
#[test]
fn a_state_directory_inside_the_agents_own_package_stays_hidden() {
    let tmp = tempfile::tempdir().unwrap();
    let checkout = tmp.path().join("checkout");
    let config = checkout.join("config");
    let state = checkout.join(".deepcli-demo");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(checkout.join("package.json"), "{}").unwrap();
    // Reads the operator token and the state database beside its own script, and says how each
    // went in its workspace (which the test reads from the host).
    std::fs::write(
        checkout.join("probe.sh"),
        format!(
            "cat {state}/operator-token >/dev/null 2>&1; echo $? > ./token-rc\nhead -c 1 {state}/state.db >/dev/null 2>&1; echo $? > ./db-rc\ncat {checkout}/package.json >/dev/null 2>&1; echo $? > ./package-rc\nexec sleep 600\n",
            state = state.display(),
            checkout = checkout.display()
        ),
    )
    .unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        format!(
            "agents:\n  list:\n    - id: main\n    - id: probe\n      runtime: {{kind: process, command: [sh, \"{}\"]}}\n",
            checkout.join("probe.sh").display()
        ),
    )
    .unwrap();
    std::fs::write(config.join("bindings.yaml"), "bindings: []\n").unwrap();
    let child = Stop(crate::common::controller(
        tmp.path(),
        &config,
        &state,
        |_| {},
    ));
    let _addr = crate::common::listening(&state, child.0.id());
    let workspace = state.join("workspaces/probe");
    crate::common::wait_until("the probe's answers", || {
        workspace.join("package-rc").exists()
    });
    let rc = |name: &str| {
        std::fs::read_to_string(workspace.join(name))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(rc("package-rc"), "0", "its own package is readable");
    assert_ne!(
        rc("token-rc"),
        "0",
        "the operator token beside its command was read"
    );
    assert_ne!(
        rc("db-rc"),
        "0",
        "the state database beside its command was read"
    );
    drop(child);
}

/// deepcli's own secret files stay unreadable from inside an agent's sandbox wherever they lie
/// (isolation.md: the system "minus deepcli's own files"): a channel's token kept beside the
/// config, which every agent reads, and the cluster token in a directory the agent binds.
#[test]
fn deepclis_secret_files_stay_unreadable_beside_the_config_and_in_a_bind() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, shared, state) = (
        tmp.path().join("config"),
        tmp.path().join("shared"),
        tmp.path().join("state"),
    );
    std::fs::create_dir_all(&config).unwrap();
    std::fs::create_dir_all(&shared).unwrap();
    let slack_token = config.join("slack.token");
    let cluster_token = shared.join("cluster.token");
    std::fs::write(&slack_token, "xoxb-kept-in-a-file\n").unwrap();
    std::fs::write(&cluster_token, "c".repeat(32)).unwrap();
    std::fs::write(shared.join("notes.txt"), "shared with the agent").unwrap();
    // Tries each file and writes how it went into its workspace, which the test reads.
    let probes = [
        ("slack", slack_token.clone()),
        ("cluster", cluster_token.clone()),
        ("notes", shared.join("notes.txt")),
        ("config", config.join("agents.yaml")),
    ];
    let mut script = String::new();
    for (name, path) in &probes {
        script.push_str(&format!(
            "cat {} >/dev/null 2>&1; echo $? > ./{name}.rc\n",
            path.display()
        ));
    }
    script.push_str("exec sleep 600\n");
    std::fs::write(tmp.path().join("probe.sh"), script).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        format!(
            "agents:\n  list:\n    - id: main\n    - id: probe\n      runtime: {{kind: process, command: [sh, \"{}\"]}}\n      sandbox: {{binds: [{{path: \"{}\", mode: ro}}]}}\n",
            tmp.path().join("probe.sh").display(),
            shared.display(),
        ),
    )
    .unwrap();
    std::fs::write(
        config.join("channels.yaml"),
        format!(
            "channels:\n  slack:\n    accounts:\n      default: {{botToken: {{source: file, path: \"{}\"}}, mode: bridge}}\n",
            slack_token.display()
        ),
    )
    .unwrap();
    std::fs::write(config.join("bindings.yaml"), "bindings: []\n").unwrap();
    // The cluster token needs a state in PostgreSQL: a replica, alone.
    let schema = crate::common::PgSchema::new();
    let child = Stop(crate::common::controller(
        tmp.path(),
        &config,
        &state,
        |cmd| {
            cmd.env("DEEPCLI_STATE_URL", schema.url())
                .args(["--cluster-token-file", cluster_token.to_str().unwrap()]);
        },
    ));
    let _addr = crate::common::listening_at(&state, Some(&schema), child.0.id());
    let workspace = state.join("workspaces/probe");
    crate::common::wait_until("the probe's answers", || {
        workspace.join("config.rc").exists()
    });
    let rc = |name: &str| {
        std::fs::read_to_string(workspace.join(format!("{name}.rc")))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(rc("notes"), "0", "the bind is readable");
    assert_eq!(rc("config"), "0", "the config is readable");
    assert_ne!(
        rc("slack"),
        "0",
        "a channel's token file beside the config was read"
    );
    assert_ne!(
        rc("cluster"),
        "0",
        "the cluster token file in a bind was read"
    );
    drop(child);
}

/// `deepcli sandbox explain`, as docs/isolation.md runs it on the quickstart: the backend and
/// why, the state directory hidden, the config read-only, environment names only; and exit 1
/// where the sandbox cannot be applied.
#[test]
fn sandbox_explain_says_what_the_quickstarts_agent_can_touch() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join(".deepcli-demo");
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    let explain = |json: bool, failpoint: bool| {
        let mut cmd = std::process::Command::new(crate::common::bin());
        cmd.args(["--config", quickstart.to_str().unwrap()])
            .args(["--state-dir", state.to_str().unwrap()])
            .args(["sandbox", "explain", "research"])
            .env("NO_COLOR", "1")
            .env("DEEPCLI_TEST_CONTROLLER_SECRET", "x");
        if json {
            cmd.arg("--json");
        }
        if failpoint {
            cmd.env("DEEPCLI_FAILPOINT_SANDBOX", "no-bwrap,no-landlock");
        }
        cmd.output().unwrap()
    };
    let out = explain(false, false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with("agent research: sandbox all (bwrap, network host)\n"),
        "{text}"
    );
    let config = format!(
        "  {}  (the config directory, read-only)",
        quickstart.display()
    );
    assert!(text.contains(&config), "{text}");
    assert!(
        text.contains(&format!("  {}  (", state.display())),
        "{text}"
    );
    let environment = text
        .lines()
        .find(|l| l.starts_with("environment: "))
        .unwrap();
    assert!(environment.contains("HOME") && environment.contains("DEEPCLI_AGENT_ID"));
    assert!(
        !environment.contains("DEEPCLI_TEST_CONTROLLER_SECRET"),
        "{environment}"
    );

    let out = explain(true, false);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["backend"], "bwrap");
    assert_eq!(doc["network"]["kind"], "host");
    assert!(
        doc["hidden"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["path"] == state.display().to_string()),
        "{doc:#}"
    );

    let out = explain(false, true);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("the runtime does not start (fail closed)"),
        "{text}"
    );
}
