//! The approval round trip's overhead, for `scripts/bench-approvals`:
//!
//! ```text
//! deepcli-bench-approvals --deepcli BIN --agent sdk-echo-agent.mjs [--rounds N] [--work DIR]
//! ```
//!
//! Starts `deepcli up` (BIN, loopback, port 0) with one agent, `sdk`, running the echo agent on
//! the official ACP TypeScript SDK, with `permissions: {route: origin}` and its Slack account's
//! `replyUrl` pointing at a listener of this program. Each round sends a signed envelope
//! `bench-permission`: the agent asks `session/request_permission` and times, with its own
//! clock, how long the answer takes. deepcli records the pending approval and announces it at
//! the reply URL; the moment this program reads the announce, "the person" approves it:
//!
//! * `http`: `POST /v1/approvals/<id>/approve` with the operator token;
//! * `cli`: `deepcli approvals approve <id>` (a new process: the state directory read, the
//!   controller found, its JSON-RPC called).
//!
//! The person's own time is what passes in this program between reading the announce and
//! starting the approve call (microseconds). The overhead of a round is the agent's wait minus
//! that: the request into deepcli, the approval written to SQLite, the announce posted and
//! received, the approve call, the decision written, the option sent back over ACP. p50/p99/max
//! in ms per mode; the issue's target is < 20 ms. Prints one JSON object.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;

#[path = "controller_addr.rs"]
mod controller_addr;
#[path = "loopback_http.rs"]
mod loopback_http;
use serde_json::{Value, json};

use loopback_http::http;

#[derive(Parser)]
struct Cli {
    /// The deepcli binary to run (a release build).
    #[arg(long)]
    deepcli: PathBuf,
    /// tests/peers/sdk-echo-agent.mjs.
    #[arg(long)]
    agent: PathBuf,
    /// Rounds per mode (after 5 warm-up rounds).
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Where the config and state go (a temp dir by default).
    #[arg(long)]
    work: Option<PathBuf>,
}

const SECRET: &str = "bench-approvals-secret";

/// Every POST to the reply URL: its body, and when it was read.
fn reply_listener() -> (String, mpsc::Receiver<(Instant, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/replies", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let _ = stream.set_nodelay(true);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        if header == "\r\n" {
                            break;
                        }
                        if let Some(n) = header.to_lowercase().strip_prefix("content-length:") {
                            length = n.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let read = Instant::now();
                    let mut s = &stream;
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                    let _ = tx.send((read, serde_json::from_slice(&body).unwrap_or(Value::Null)));
                }
            });
        }
    });
    (url, rx)
}

struct Controller {
    child: Child,
    addr: SocketAddr,
    token: String,
    state: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn start(cli: &Cli, work: &Path, reply_url: &str) -> Controller {
    let config = work.join("config");
    let state = work.join("state");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("agents.yaml"),
        format!(
            "agents:\n  list:\n    - id: sdk\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n      permissions: {{route: origin, timeoutSeconds: 60}}\n",
            cli.agent.display()
        ),
    )
    .unwrap();
    std::fs::write(
        config.join("channels.yaml"),
        format!("channels:\n  defaults: {{dmPolicy: open, allowFrom: [\"*\"]}}\n  slack:\n    accounts:\n      default: {{webhookSecret: {{source: env, id: BENCH_APPROVALS_SECRET}}, replyUrl: \"{reply_url}\"}}\n"),
    )
    .unwrap();
    std::fs::write(
        config.join("bindings.yaml"),
        "bindings:\n  - {agentId: sdk, match: {channel: slack}}\n",
    )
    .unwrap();
    let child = Command::new(&cli.deepcli)
        .args([
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .args(["up", "--listen", "127.0.0.1:0"])
        .env("BENCH_APPROVALS_SECRET", SECRET)
        .env("HOME", work)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.join("up.log")).unwrap())
        .spawn()
        .unwrap();
    let addr = controller_addr::wait(&state, child.id());
    let token = std::fs::read_to_string(state.join("operator-token")).unwrap();
    let controller = Controller {
        child,
        addr,
        token,
        state,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let auth = format!("Bearer {}", controller.token);
        let status = http(
            controller.addr,
            "GET",
            "/v1/status",
            &[("authorization", &auth)],
            "",
        )
        .1;
        if status["runtimes"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["agentId"] == "sdk" && r["status"] == "ready")
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent is not ready: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    controller
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Http,
    Cli,
}

/// One round: the agent's wait and the person's time, in µs.
fn round(
    cli: &Cli,
    c: &Controller,
    posts: &mpsc::Receiver<(Instant, Value)>,
    mode: Mode,
    n: usize,
) -> (f64, f64) {
    let envelope = json!({"channel": "slack", "peer": {"kind": "direct", "id": "bench"},
        "sender": {"id": "bench"}, "messageId": format!("bench-{n}"), "text": "bench-permission"});
    let addr = c.addr;
    let sent = std::thread::spawn(move || {
        let body = envelope.to_string();
        let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
        http(
            addr,
            "POST",
            "/v1/inbound",
            &[("x-deepcli-signature", &signature)],
            &body,
        )
    });
    // The announce (replies of earlier rounds may arrive first: skipped).
    let (read, id) = loop {
        let (read, post) = posts
            .recv_timeout(Duration::from_secs(30))
            .expect("no announce within 30 s");
        if let Some(id) = post["approval"]["id"].as_str() {
            break (read, id.to_string());
        }
    };
    let person = read.elapsed();
    match mode {
        Mode::Http => {
            let auth = format!("Bearer {}", c.token);
            let (status, body) = http(
                c.addr,
                "POST",
                &format!("/v1/approvals/{id}/approve"),
                &[("authorization", &auth)],
                "",
            );
            assert_eq!(status, 200, "{body}");
        }
        Mode::Cli => {
            let out = Command::new(&cli.deepcli)
                .args([
                    "--state-dir",
                    c.state.to_str().unwrap(),
                    "approvals",
                    "approve",
                    &id,
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let (status, answer) = sent.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    let text = answer["reply"]["text"].as_str().unwrap_or_default();
    let waited: f64 = text
        .strip_prefix("bench-permission: allow ")
        .and_then(|us| us.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected reply: {text}"));
    (waited, person.as_secs_f64() * 1e6)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tmp = tempfile::tempdir().unwrap();
    let work = cli.work.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&work).unwrap();
    let (url, posts) = reply_listener();
    let controller = start(&cli, &work, &url);
    let mut report = json!({"rounds": cli.rounds, "targetMs": 20});
    let mut n = 0;
    let mut worst = 0.0f64;
    for (mode, name) in [(Mode::Http, "http"), (Mode::Cli, "cli")] {
        for _ in 0..5 {
            n += 1;
            round(&cli, &controller, &posts, mode, n);
        }
        let mut overhead = Vec::with_capacity(cli.rounds);
        let mut person = Vec::with_capacity(cli.rounds);
        for _ in 0..cli.rounds {
            n += 1;
            let (waited, p) = round(&cli, &controller, &posts, mode, n);
            overhead.push((waited - p) / 1000.0);
            person.push(p / 1000.0);
        }
        overhead.sort_by(f64::total_cmp);
        person.sort_by(f64::total_cmp);
        let p99 = percentile(&overhead, 0.99);
        worst = worst.max(p99);
        report[name] = json!({
            "overheadMs": {
                "p50": percentile(&overhead, 0.5),
                "p99": p99,
                "max": overhead.last(),
            },
            "personMs": {"p50": percentile(&person, 0.5), "max": person.last()},
        });
    }
    report["verdict"] = if worst < 20.0 { "PASS" } else { "MISS" }.into();
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    drop(controller);
    if worst < 20.0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
