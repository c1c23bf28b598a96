//! Secrets end to end: an account whose webhook secret resolves to nothing takes no messages,
//! and referenced secrets with real values never reach an output, a file or a log.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::common::Up;
use serde_json::{Value, json};

/// One HTTP call: status and body (JSON when it parses, else the text).
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let answer = crate::common::http(addr, method, path, headers, body);
    (answer.status, answer.body)
}

/// `POST /v1/inbound` of `envelope`, signed with `secret`.
fn inbound(addr: SocketAddr, secret: &[u8], envelope: &Value) -> (u16, Value) {
    crate::common::signed_inbound(addr, secret, envelope)
}

fn envelope(account: &str, message_id: &str) -> Value {
    json!({"channel": "telegram", "accountId": account,
           "peer": {"kind": "direct", "id": "chat-1"}, "messageId": message_id,
           "sender": {"id": "u-7", "name": "Ada"}, "text": "hello"})
}

/// agents.yaml: `main`, running the demo echo agent.
const ECHO_AGENTS: &str = "agents:\n  list:\n    - id: main\n      runtime: {kind: acp, command: [deepcli, echo-agent]}\n";

const ALL_TO_MAIN: &str =
    "bindings:\n  - agentId: main\n    match: {channel: telegram, accountId: \"*\"}\n";

#[test]
fn an_empty_webhook_secret_takes_no_messages() {
    let dir = tempfile::tempdir().unwrap();
    let newline = dir.path().join("newline-secret");
    std::fs::write(&newline, "\n").unwrap();
    let blank = dir.path().join("blank-secret");
    std::fs::write(&blank, "  \t \r\n").unwrap();
    let log = dir.path().join("controller.log");
    let channels = format!(
        "channels:\n  defaults: {{dmPolicy: open, allowFrom: [\"*\"]}}\n  telegram:\n    accounts:\n      default:\n        webhookSecret: {{source: env, id: DEEPCLI_TEST_EMPTY_SECRET}}\n      newline:\n        webhookSecret: {{source: file, path: {}}}\n      blank:\n        webhookSecret: {{source: file, path: {}}}\n      good:\n        webhookSecret: {{source: env, id: DEEPCLI_TEST_GOOD_SECRET}}\n",
        newline.display(),
        blank.display()
    );
    let up = Up::start_config(ECHO_AGENTS, &channels, ALL_TO_MAIN, |cmd| {
        cmd.env("DEEPCLI_TEST_EMPTY_SECRET", "")
            .env("DEEPCLI_TEST_GOOD_SECRET", "a-good-secret")
            .stderr(std::fs::File::create(&log).unwrap());
    });
    let status = up.wait_for("main ready", |s| {
        Up::runtime(s, "main").is_some_and(|r| r["status"] == "ready")
    });

    // The account with a real secret takes messages: the refusals below are the secrets'.
    let (code, body) = inbound(up.addr, b"a-good-secret", &envelope("good", "m-1"));
    assert_eq!(code, 200, "{body}");

    for (account, why) in [
        ("default", "DEEPCLI_TEST_EMPTY_SECRET"),
        ("newline", "newline-secret"),
        ("blank", "blank-secret"),
    ] {
        // Signed with the empty key, and with what the file holds: both refused.
        for key in [&b""[..], b"\n", b"  \t \r\n"] {
            let (code, body) = inbound(up.addr, key, &envelope(account, "m-2"));
            assert_eq!(code, 401, "{account} with key {key:?}: {body}");
            let error = body["error"].as_str().unwrap_or_default();
            // As a wrong signature is: an unauthenticated caller cannot tell them apart.
            assert!(error.contains("does not verify"), "{account}: {error}");
            // The caller learns nothing of where the secret lives.
            let dir = dir.path().to_string_lossy();
            for hidden in [why, &dir, "environment variable", "secret file"] {
                assert!(!error.contains(hidden), "{account}: `{hidden}` in {error}");
            }
        }
        // The operator sees which reference and why: in the status and in the log.
        let closed = status["closedAccounts"].to_string();
        assert!(
            closed.contains(&format!("telegram/{account}")) && closed.contains(why),
            "{account}: {status:#}"
        );
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(
            log.contains(&format!("telegram/{account}")) && log.contains(why),
            "{account}: {log}"
        );
    }
    assert!(
        !status["closedAccounts"]
            .to_string()
            .contains("telegram/good"),
        "{status:#}"
    );
}

/// The secret values of the end-to-end test: distinctive, random per run, each reachable
/// only through a reference.
struct Secrets {
    /// (env var, value) pairs handed to every command.
    env: Vec<(&'static str, String)>,
    webhook_env: String,
    webhook_file: String,
    runtime_env: String,
    runtime_file: String,
    runtime_shorthand: String,
    /// Where the file secrets live (the only files that may hold values).
    dir: tempfile::TempDir,
}

impl Secrets {
    fn new() -> Secrets {
        let value = |label: &str| format!("{label}-{}", uuid::Uuid::new_v4().simple());
        let (webhook_env, runtime_env, runtime_shorthand) = (
            value("webhook-env"),
            value("runtime-env"),
            value("runtime-shorthand"),
        );
        let s = Secrets {
            env: vec![
                ("DEEPCLI_TEST_BOT_TOKEN", value("bot-token")),
                ("DEEPCLI_TEST_PERSONAL_TOKEN", value("personal-token")),
                ("DEEPCLI_TEST_WEBHOOK", webhook_env.clone()),
                ("DEEPCLI_TEST_RUNTIME", runtime_env.clone()),
                ("DEEPCLI_TEST_SHORTHAND", runtime_shorthand.clone()),
            ],
            webhook_env,
            webhook_file: value("webhook-file"),
            runtime_env,
            runtime_file: value("runtime-file"),
            runtime_shorthand,
            dir: tempfile::tempdir().unwrap(),
        };
        // Files end with a line break, as editors and `echo` write them.
        std::fs::write(s.file("webhook"), format!("{}\n", s.webhook_file)).unwrap();
        std::fs::write(s.file("runtime"), format!("{}\n", s.runtime_file)).unwrap();
        s
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn values(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self.env.iter().map(|(_, v)| v.as_str()).collect();
        all.extend([self.webhook_file.as_str(), self.runtime_file.as_str()]);
        all
    }

    /// The secrets `bytes` holds, as text or hex-encoded.
    fn found_in(&self, bytes: &[u8]) -> Vec<String> {
        let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        let mut found = Vec::new();
        for value in self.values() {
            let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
            if contains(value.as_bytes()) || contains(hex.as_bytes()) {
                found.push(value.to_string());
            }
        }
        found
    }
}

/// Everything deepcli printed or served, by what it was.
#[derive(Default)]
struct Seen {
    outputs: Vec<(String, Vec<u8>)>,
}

impl Seen {
    fn add(&mut self, what: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        self.outputs.push((what.into(), bytes.into()));
    }

    /// Runs the binary with the secrets in its environment; keeps stdout and stderr.
    fn run(&mut self, hub: &Hub, secrets: &Secrets, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(crate::common::bin());
        cmd.args(["--config", hub.config.to_str().unwrap()])
            .args(["--state-dir", hub.state.to_str().unwrap()])
            .args(args)
            .env("HOME", &hub.home)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG");
        for (name, value) in &secrets.env {
            cmd.env(name, value);
        }
        let out = cmd.output().unwrap();
        let what = format!("deepcli {}", args.join(" "));
        self.add(format!("{what} (stdout)"), out.stdout.clone());
        self.add(format!("{what} (stderr)"), out.stderr.clone());
        out
    }

    /// Runs it and insists on success (for `status` and `channels status`, that it ran: they
    /// exit 1 on a degraded hub, such as a runtime no controller runs, or an account that
    /// cannot work).
    fn ok(&mut self, hub: &Hub, secrets: &Secrets, args: &[&str]) -> String {
        let out = self.run(hub, secrets, args);
        let reports_health =
            args.first() == Some(&"status") || args.starts_with(&["channels", "status"]);
        let ran = reports_health && out.status.code() == Some(1);
        assert!(
            out.status.success() || ran,
            "deepcli {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn http(&mut self, addr: SocketAddr, method: &str, path: &str, token: &str, body: &Value) {
        let (status, answer) = call(
            addr,
            method,
            path,
            &[
                ("authorization", &format!("Bearer {token}")),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        );
        assert!(status < 400, "{method} {path}: {status} {answer}");
        self.add(format!("{method} {path} {body}"), answer.to_string());
    }
}

struct Hub {
    root: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

/// Every file under `dir`, with its bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(path),
                Ok(t) if t.is_file() => {
                    if let Ok(bytes) = std::fs::read(&path) {
                        out.push((path, bytes));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// A reply sink: records every request it gets (raw: headers and body), answers 200.
fn reply_sink() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let record = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Headers, then as many body bytes as Content-Length says.
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            record.lock().unwrap().push(request);
        }
    });
    (addr, got)
}

/// Referenced secrets with real values, taken through validate, plan, apply, the management
/// commands, `deepcli up` with the Access API, a reply sink and a runtime whose env gets them:
/// none appears in any output, served document, log, file or database page.
#[test]
fn referenced_secrets_appear_in_no_output_file_or_log() {
    let secrets = Secrets::new();
    let root = tempfile::tempdir().unwrap();
    let hub = Hub {
        config: root.path().join("config"),
        state: root.path().join("state"),
        home: root.path().join("home"),
        root,
    };
    std::fs::create_dir_all(&hub.config).unwrap();
    std::fs::create_dir_all(&hub.home).unwrap();
    let (sink, replies) = reply_sink();
    std::fs::write(
        hub.config.join("agents.yaml"),
        format!(
            "agents:\n  list:\n    - id: main\n      runtime:\n        kind: acp\n        command: [deepcli, echo-agent]\n        env:\n          FROM_ENV: {{source: env, id: DEEPCLI_TEST_RUNTIME}}\n          FROM_FILE: {{source: file, path: {}}}\n          FROM_SHORTHAND: \"${{DEEPCLI_TEST_SHORTHAND}}\"\n          PLAIN: not-a-secret\n",
            secrets.file("runtime").display()
        ),
    )
    .unwrap();
    std::fs::write(
        hub.config.join("channels.yaml"),
        format!(
            "channels:\n  defaults: {{dmPolicy: open, allowFrom: [\"*\"]}}\n  telegram:\n    accounts:\n      default:\n        botToken: {{source: env, id: DEEPCLI_TEST_BOT_TOKEN}}\n        webhookSecret: {{source: env, id: DEEPCLI_TEST_WEBHOOK}}\n        replyUrl: \"http://{sink}/reply\"\n      personal:\n        botToken: \"${{DEEPCLI_TEST_PERSONAL_TOKEN}}\"\n        webhookSecret: {{source: file, path: {}}}\n",
            secrets.file("webhook").display()
        ),
    )
    .unwrap();
    std::fs::write(hub.config.join("bindings.yaml"), ALL_TO_MAIN).unwrap();
    let mut seen = Seen::default();

    // Before the controller: check, plan, apply, and every read-only command.
    for format in ["human", "json", "github", "sarif"] {
        seen.ok(&hub, &secrets, &["validate", "--format", format]);
    }
    let saved = hub.root.path().join("saved.plan");
    for args in [
        &["plan"][..],
        &["plan", "--json"],
        &["plan", "--diff"],
        &["plan", "--out", saved.to_str().unwrap()],
        &["apply", "--auto-approve"],
        &["state", "export"],
        &["history"],
        &["history", "--json"],
        &["status"],
        &["status", "--json"],
        &[
            "route",
            "--channel",
            "telegram",
            "--peer",
            "direct:chat-1",
            "--json",
            "--explain",
        ],
        &["agents", "list", "--bindings", "--json"],
        &["agents", "bindings", "--json"],
        &["channels", "list"],
        &["channels", "list", "--json"],
        &["channels", "status"],
        &["channels", "status", "--json"],
        &["trash", "list", "--json"],
    ] {
        seen.ok(&hub, &secrets, args);
    }
    // Management writes, as JSON, as a diff, and for real; then applied.
    for args in [
        &[
            "channels",
            "add",
            "--channel",
            "slack",
            "--bot-token",
            "env:DEEPCLI_TEST_BOT_TOKEN",
            "--dry-run",
        ][..],
        &[
            "channels",
            "add",
            "--channel",
            "slack",
            "--bot-token",
            "env:DEEPCLI_TEST_BOT_TOKEN",
            "--webhook-secret",
            "env:DEEPCLI_TEST_WEBHOOK",
            "--json",
        ],
        &["agents", "add", "helper", "--bind", "slack", "--json"],
        &[
            "agents",
            "set-identity",
            "main",
            "--theme",
            "calm",
            "--json",
        ],
        &["apply", "--auto-approve"],
    ] {
        seen.ok(&hub, &secrets, args);
    }
    // A literal where a reference belongs is refused (and, checked below, not echoed).
    let refused = seen.run(
        &hub,
        &secrets,
        &[
            "channels",
            "add",
            "--channel",
            "discord",
            "--bot-token",
            &secrets.webhook_file,
        ],
    );
    assert!(!refused.status.success());

    // The controller, with the Access API, the reply sink and the runtime.
    let captures = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (
        captures.path().join("up.stdout"),
        captures.path().join("up.stderr"),
    );
    let child = crate::common::controller(&hub.home, &hub.config, &hub.state, |cmd| {
        for (name, value) in &secrets.env {
            cmd.env(name, value);
        }
        cmd.env("RUST_LOG", "debug")
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
    });
    let addr = crate::common::listening(&hub.state, child.id());
    let mut up = Up {
        child,
        _tmp: tempfile::tempdir().unwrap(),
        config: hub.config.clone(),
        state: hub.state.clone(),
        postgres: None,
        addr,
    };
    let status = up.wait_for("main ready", |s| {
        Up::runtime(s, "main").is_some_and(|r| r["status"] == "ready")
    });

    // The secrets were resolved for real: the runtime's environment holds them.
    let pid = crate::common::pid_of(&status, "main");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    for (name, value) in [
        ("FROM_ENV", &secrets.runtime_env),
        ("FROM_FILE", &secrets.runtime_file),
        ("FROM_SHORTHAND", &secrets.runtime_shorthand),
    ] {
        let entry = format!("{name}={value}\0");
        assert!(
            environ.windows(entry.len()).any(|w| w == entry.as_bytes()),
            "{name} did not reach the runtime"
        );
    }
    // ... and the Access API takes calls signed with them, and only with them.
    let (code, answer) = inbound(
        addr,
        secrets.webhook_env.as_bytes(),
        &envelope("default", "m-1"),
    );
    assert_eq!(code, 200, "{answer}");
    seen.add("inbound default", answer.to_string());
    let (code, answer) = inbound(
        addr,
        secrets.webhook_file.as_bytes(),
        &envelope("personal", "m-2"),
    );
    assert_eq!(code, 200, "{answer}");
    seen.add("inbound personal", answer.to_string());
    let (code, answer) = inbound(addr, b"a-wrong-key", &envelope("default", "m-3"));
    assert_eq!(code, 401, "{answer}");
    seen.add("inbound refused", answer.to_string());
    let (code, answer) = inbound(
        addr,
        secrets.webhook_env.as_bytes(),
        &envelope("default", "m-1"),
    );
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["duplicate"], true, "{answer}");
    seen.add("inbound duplicate", answer.to_string());

    // The reply sink got the reply, signed with the webhook secret.
    crate::common::wait_until("the reply POST", || !replies.lock().unwrap().is_empty());
    let request = replies.lock().unwrap()[0].clone();
    let text = String::from_utf8_lossy(&request).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let signature = deepcli::sign(secrets.webhook_env.as_bytes(), body.as_bytes());
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("x-deepcli-signature: {signature}")),
        "{head}"
    );
    seen.add("reply sink request", request);

    // Every operator endpoint and management command while the controller runs.
    let token = std::fs::read_to_string(hub.state.join("operator-token")).unwrap();
    let rpc = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": format!("_mustang.agent/{method}"), "params": params});
    for (method, path, body) in [
        ("GET", "/v1/status", Value::Null),
        ("GET", "/metrics", Value::Null),
        ("GET", "/v1/plan", Value::Null),
        (
            "POST",
            "/v1/route",
            json!({"channel": "telegram", "accountId": "personal", "peer": {"kind": "direct", "id": "chat-1"}}),
        ),
        ("POST", "/rpc", rpc("agents/list", json!({}))),
        ("POST", "/rpc", rpc("agents/list_bindings", json!({}))),
        ("POST", "/rpc", rpc("channels/list", json!({}))),
        ("POST", "/rpc", rpc("channels/status", json!({}))),
        ("POST", "/rpc", rpc("channels/logs", json!({}))),
    ] {
        seen.http(addr, method, path, &token, &body);
    }
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["channels", "status", "--json"],
        &["channels", "logs"],
        &["channels", "logs", "--json"],
        &["agents", "list", "--json"],
        &["history", "--json"],
        &["state", "export"],
        &["plan", "--json"],
    ] {
        seen.ok(&hub, &secrets, args);
    }

    // The files while the controller runs: the database's WAL is there now.
    let running = files(hub.root.path());
    assert!(
        running
            .iter()
            .any(|(p, b)| p.ends_with("state.db-wal") && !b.is_empty()),
        "no WAL to search: {:?}",
        running.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    assert!(up.terminate().success());
    let mut leaks = Vec::new();
    let stopped = files(hub.root.path());
    for (path, bytes) in running
        .iter()
        .chain(&stopped)
        .chain(&files(captures.path()))
    {
        for secret in secrets.found_in(bytes) {
            leaks.push(format!("{}: {secret}", path.display()));
        }
    }
    for (what, bytes) in &seen.outputs {
        for secret in secrets.found_in(bytes) {
            leaks.push(format!("{what}: {secret}"));
        }
    }
    assert!(
        leaks.is_empty(),
        "secret values leaked:\n{}",
        leaks.join("\n")
    );
    // What was searched is what the issue lists.
    let names: Vec<String> = stopped
        .iter()
        .map(|(p, _)| {
            p.strip_prefix(hub.root.path())
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    for expected in [
        "state/state.db",
        "state/routing-plan.json",
        "state/logs/main.log",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not searched: {names:#?}"
        );
    }
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("state/logs/") && n.contains("telegram")),
        "no channel log searched: {names:#?}"
    );
    assert!(
        std::fs::metadata(&stderr).unwrap().len() > 0,
        "the controller logged nothing"
    );
}
