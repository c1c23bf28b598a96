//! The Hub's figures, for `scripts/bench-hub`:
//!
//! ```text
//! deepcli-bench-hub --deepcli BIN --agent sdk-echo-agent.mjs [--sends N] [--spawns N] [--work DIR]
//! ```
//!
//! Starts `deepcli up` (BIN, loopback, port 0) on a config of three agents running the echo
//! agent on the official ACP TypeScript SDK: `alpha` (MCP over stdio, `deepcli hub mcp`),
//! `gamma` (MCP over streamable HTTP) and `beta`, the target; `session.maxPingPongTurns: 0`
//! (no reply-back exchange after a send), `agents.defaults.subagents` with room for the spawn
//! stage, and alpha's `budgets.spawnsPerHour` above the default 60 it would otherwise stop at.
//! Then:
//!
//! * `send-stdio`, `send-http`: alpha (then gamma) makes N `sessions_send` calls to beta's main
//!   session through the official MCP TypeScript SDK client, one after another, each waiting
//!   for the reply. The caller times each round trip; beta reports how long its own handler
//!   took; the hub overhead of a call is the difference — the MCP transport both ways (and the
//!   `deepcli hub mcp` forwarder for stdio), the Hub, its run records in SQLite, the session
//!   FIFO and ACP to beta and back. p50/p99/max in ms. Beside it, the Hub's own time as the
//!   controller measures it (`/v1/status` `hub.sendOverhead`: the call's time at the Hub minus
//!   the target runtime's turn, ACP included), after the stdio stage and after both.
//! * `concurrent`: 200 `sessions/send` (the Hub's operator send: the same runs, FIFO and
//!   delivery as `sessions_send`) at once across 50 sessions of beta, 4 each; every reply is
//!   checked, then the transcripts: each message delivered exactly once, and in each session
//!   in the order the Hub accepted the runs.
//! * `spawn`: the controller's VmRSS after a warm-up of 50 spawned runs, then alpha spawns N
//!   (`mode: run`, `cleanup: delete`); once every run is final and announced, VmRSS again (the
//!   target: within 10 % of the start), and what is left: unfinished runs, open child
//!   sessions, live tokens, processes.
//!
//! Prints one JSON object with every figure.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
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
    #[arg(long, default_value_t = 500)]
    sends: usize,
    #[arg(long, default_value_t = 1000)]
    spawns: usize,
    /// Spawn rounds of `spawns` each (RSS after each): tells growth from a high-water mark.
    #[arg(long, default_value_t = 1)]
    spawn_rounds: usize,
    /// Where the config and state go (a temp dir by default).
    #[arg(long)]
    work: Option<PathBuf>,
}

const SECRET: &str = "bench-hub-secret";

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

impl Controller {
    fn get(&self, path: &str) -> Value {
        let auth = format!("Bearer {}", self.token);
        http(self.addr, "GET", path, &[("authorization", &auth)], "").1
    }

    fn say(&self, group: &str, text: &str, n: usize) -> String {
        let envelope = json!({"channel": "slack", "peer": {"kind": "group", "id": group},
            "messageId": format!("bench-{group}-{n}"), "sender": {"id": "u1"}, "text": text});
        let body = envelope.to_string();
        let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
        let (status, answer) = http(
            self.addr,
            "POST",
            "/v1/inbound",
            &[("x-deepcli-signature", &signature)],
            &body,
        );
        assert_eq!(status, 200, "{answer}");
        answer["reply"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn rss_kb(&self) -> u64 {
        self.proc_status("VmRSS:")
    }

    fn proc_status(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open_with_flags(
            self.state.join("state.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap()
    }
}

fn start(cli: &Cli, work: &Path) -> Controller {
    let config = work.join("config");
    let state = work.join("state");
    std::fs::create_dir_all(&config).unwrap();
    let agent = cli.agent.display();
    std::fs::write(
        config.join("agents.yaml"),
        format!(
            "agents:\n  defaults:\n    subagents: {{maxConcurrent: 64, maxChildrenPerAgent: 100}}\n  list:\n    - id: alpha\n      runtime: {{kind: acp, command: [node, \"{agent}\"]}}\n      budgets: {{spawnsPerHour: 100000}}\n    - id: gamma\n      runtime: {{kind: acp, command: [node, \"{agent}\"], env: {{SDK_ECHO_MCP_HTTP: \"1\"}}}}\n    - id: beta\n      runtime: {{kind: acp, command: [node, \"{agent}\"]}}\nsession: {{maxPingPongTurns: 0}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        config.join("channels.yaml"),
        "channels:\n  defaults: {dmPolicy: open, allowFrom: [\"*\"], groupPolicy: open, requireMention: false}\n  slack:\n    accounts:\n      default: {webhookSecret: {source: env, id: BENCH_HUB_SECRET}}\n",
    )
    .unwrap();
    std::fs::write(
        config.join("bindings.yaml"),
        "bindings:\n  - {agentId: beta, match: {channel: slack, peer: {kind: group, id: gb}}}\n  - {agentId: gamma, match: {channel: slack, peer: {kind: group, id: gg}}}\n  - {agentId: alpha, match: {channel: slack}}\n",
    )
    .unwrap();
    let child = Command::new(&cli.deepcli)
        .args([
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--prompt-timeout-ms",
            "900000",
            "--queue-limit",
            "64",
        ])
        .env("BENCH_HUB_SECRET", SECRET)
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
        let status = controller.get("/v1/status");
        let ready = status["runtimes"]
            .as_array()
            .is_some_and(|r| r.len() == 3 && r.iter().all(|r| r["status"] == "ready"));
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "runtimes not ready: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    controller
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn send_stage(up: &Controller, group: &str, n: usize) -> Value {
    // Warm-up: the MCP client connects, beta's session opens.
    let warm = up.say(group, "bench-send 20 beta", 0);
    assert!(warm.starts_with("bench-send: "), "{warm}");
    let reply = up.say(group, &format!("bench-send {n} beta"), 1);
    let Some(json) = reply.strip_prefix("bench-send: ") else {
        panic!("{reply}");
    };
    let doc: Value = serde_json::from_str(json).unwrap();
    let ms: Vec<f64> = doc["overheadUs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() / 1000.0)
        .collect();
    json!({"n": ms.len(), "p50_ms": percentile(&ms, 0.5), "p99_ms": percentile(&ms, 0.99), "max_ms": ms.last()})
}

fn concurrent_stage(up: &Controller) -> Value {
    let auth = format!("Bearer {}", up.token);
    let begun = Instant::now();
    let answers: Vec<(String, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..200)
            .map(|i| {
                let auth = auth.clone();
                s.spawn(move || {
                    let session = format!("agent:beta:bench:s{}", i % 50);
                    let text = format!("reply: s{}-m{i}", i % 50);
                    let body =
                        json!({"jsonrpc": "2.0", "id": i, "method": "_mustang.agent/sessions/send",
                        "params": {"sessionKey": session, "message": text, "timeoutSeconds": 120}})
                        .to_string();
                    let (_, answer) =
                        http(up.addr, "POST", "/rpc", &[("authorization", &auth)], &body);
                    (text, answer)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = begun.elapsed();
    let mut wrong = 0;
    for (text, answer) in &answers {
        if answer["result"]["reply"].as_str() != text.strip_prefix("reply: ") {
            wrong += 1;
        }
    }
    // The transcripts: each message once; per session, in the order the Hub accepted the runs.
    let db = up.db();
    let mut lost = 0;
    let mut duplicated = 0;
    let mut out_of_order = 0;
    for s in 0..50 {
        let key = format!("agent:beta:bench:s{s}");
        let delivered: Vec<String> = db
            .prepare("SELECT text FROM transcript WHERE session_key = ?1 AND provenance = 'operator' ORDER BY id")
            .unwrap()
            .query_map([&key], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let accepted: Vec<String> = db
            .prepare("SELECT message FROM hub_runs WHERE target_session_key = ?1 ORDER BY rowid")
            .unwrap()
            .query_map([&key], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut seen = std::collections::HashSet::new();
        for d in &delivered {
            if !seen.insert(d.clone()) {
                duplicated += 1;
            }
        }
        lost += accepted.iter().filter(|a| !seen.contains(*a)).count();
        if delivered != accepted {
            out_of_order += 1;
        }
    }
    json!({"sends": answers.len(), "sessions": 50, "wrong_replies": wrong, "lost": lost,
           "duplicated": duplicated, "sessions_out_of_accept_order": out_of_order,
           "wall_ms": elapsed.as_millis()})
}

fn children_of(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .chars()
                        .all(|c| c.is_ascii_digit())
                })
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("stat"))
                        .ok()
                        .is_some_and(|stat| {
                            stat.rsplit_once(')').and_then(|(_, rest)| {
                                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                            }) == Some(pid)
                        })
                })
                .count()
        })
        .unwrap_or(0)
}

fn settle(up: &Controller, spawns: usize) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let db = up.db();
        let unfinished: i64 = db
            .query_row("SELECT count(*) FROM hub_runs WHERE state NOT IN ('completed','failed','timed_out','cancelled','uncertain')", [], |r| r.get(0))
            .unwrap();
        let open: i64 = db
            .query_row(
                "SELECT count(*) FROM hub_sessions WHERE closed_at IS NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let announced: i64 = db
            .query_row(
                "SELECT count(DISTINCT run_id) FROM hub_run_events WHERE note LIKE 'announced%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if unfinished == 0 && open == 0 && announced as usize >= spawns {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "runs did not settle: {unfinished} unfinished, {open} open, {announced} announced"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn spawn_stage(up: &Controller, n: usize, rounds: usize) -> Value {
    let warm = up.say("gs", "bench-spawn 50", 0);
    assert!(warm.starts_with("bench-spawn: "), "{warm}");
    settle(up, 50);
    // Idle worker threads of the warm-up gone first (tokio's keep-alive is 10 s).
    std::thread::sleep(Duration::from_secs(12));
    let rss_before = up.rss_kb();
    let tokens_before = up.get("/v1/status")["hub"]["liveTokens"].clone();
    let procs_before = children_of(up.child.id());
    let begun = Instant::now();
    let mut reply = String::new();
    let mut rss_rounds = Vec::new();
    for round in 0..rounds.max(1) {
        reply = up.say("gs", &format!("bench-spawn {n}"), 1 + round);
        assert!(reply.starts_with("bench-spawn: "), "{reply}");
        settle(up, 50 + n * (round + 1));
        rss_rounds.push(json!({"rss_kb": up.rss_kb(), "threads": up.proc_status("Threads:")}));
    }
    let elapsed = begun.elapsed();
    // RSS right after the last announce holds what idle worker threads keep; they go after
    // their keep-alive (tokio: 10 s). Watch it come back, at most 60 s.
    let settled = Instant::now();
    let mut rss_after = up.rss_kb();
    while rss_after as f64 > rss_before as f64 * 1.1 && settled.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(500));
        rss_after = up.rss_kb();
    }
    let back_after_ms = settled.elapsed().as_millis();
    let status = up.get("/v1/status");
    json!({
        "spawned": n,
        "rss_kb_after_each_round": rss_rounds,
        "agent": serde_json::from_str::<Value>(reply.trim_start_matches("bench-spawn: ")).unwrap_or_default(),
        "wall_ms_until_all_announced": elapsed.as_millis(),
        "rss_kb_before": rss_before, "rss_kb_after": rss_after,
        "rss_back_within_10pct_after_ms": back_after_ms,
        "threads_after": up.proc_status("Threads:"),
        "rss_growth_pct": (rss_after as f64 - rss_before as f64) * 100.0 / rss_before.max(1) as f64,
        "live_tokens_before": tokens_before, "live_tokens_after": status["hub"]["liveTokens"],
        "active_runs_after": status["hub"]["activeRuns"], "active_spawns_after": status["hub"]["activeSpawns"],
        "controller_children_before": procs_before, "controller_children_after": children_of(up.child.id()),
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tmp = tempfile::tempdir().unwrap();
    let work = cli.work.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let up = start(&cli, &work);
    let send_stdio = send_stage(&up, "ga", cli.sends);
    let hub_stdio = up.get("/v1/status")["hub"]["sendOverhead"].clone();
    let send_http = send_stage(&up, "gg", cli.sends);
    let hub_both = up.get("/v1/status")["hub"]["sendOverhead"].clone();
    let concurrent = concurrent_stage(&up);
    let spawn = spawn_stage(&up, cli.spawns, cli.spawn_rounds);
    let out = json!({
        "send_stdio": send_stdio,
        "send_http": send_http,
        "hub_own_time_after_stdio_stage": hub_stdio,
        "hub_own_time_after_both_stages": hub_both,
        "concurrent": concurrent,
        "spawn": spawn,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    drop(up);
    ExitCode::SUCCESS
}
