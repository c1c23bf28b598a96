//! Config keys that act (issue 18, "Every config key acts, or says it does not"), end to end:
//! `deepcli up` with the echo agent on the official ACP TypeScript SDK
//! (`tests/peers/sdk-echo-agent.mjs`), signed envelopes through `POST /v1/inbound`, and what
//! the state database and `deepcli status` say afterwards. Model application, `acp.mode:
//! oneshot`, `acp.cwd`/`label`, heartbeats, and an agent's conversations going to trash with it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{Up, bin, sdk_echo_agent, transcript};
use serde_json::{Value, json};

const SECRET: &str = "config-keys-webhook-secret";

/// channels.yaml: one Telegram account whose webhook secret is [`SECRET`], replies POSTed to
/// `reply_url` when given, the inbound policy open.
fn channels(reply_url: Option<&str>) -> String {
    let reply = reply_url.map_or(String::new(), |u| format!("        replyUrl: \"{u}\"\n"));
    crate::common::open(&format!(
        "channels:\n  telegram:\n    accounts:\n      default:\n        webhookSecret: {{source: env, id: DEEPCLI_TEST_SECRET}}\n{reply}"
    ))
}

/// An agent entry running the SDK echo agent, with `extra` (YAML lines, indented six spaces).
fn sdk_agent(id: &str, extra: &str) -> String {
    format!(
        "    - id: {id}\n      runtime: {{kind: acp, command: [node, \"{}\"]}}\n{extra}",
        sdk_echo_agent().display()
    )
}

fn start(agents: &str, bindings: &str, env: &[(&str, &str)]) -> Up {
    start_with_channels(agents, &channels(None), bindings, env)
}

fn start_with_channels(agents: &str, channels: &str, bindings: &str, env: &[(&str, &str)]) -> Up {
    Up::start_config(agents, channels, bindings, |cmd| {
        cmd.env("DEEPCLI_TEST_SECRET", SECRET);
        for (k, v) in env {
            cmd.env(k, v);
        }
    })
}

fn wait_ready(up: &Up, id: &str) -> Value {
    up.wait_for(&format!("{id} ready"), |s| {
        Up::runtime(s, id).is_some_and(|r| r["status"] == "ready")
    })
}

/// `POST /v1/inbound`, signed: (status, body).
fn inbound(addr: SocketAddr, envelope: &Value) -> (u16, Value) {
    let body = envelope.to_string();
    let signature = deepcli::sign(SECRET.as_bytes(), body.as_bytes());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let response = agent
        .post(&format!("http://{addr}/v1/inbound"))
        .header("x-deepcli-signature", &signature)
        .header("content-type", "application/json")
        .send(body.as_bytes())
        .unwrap();
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn message(peer: Value, id: &str, text: &str) -> Value {
    json!({"channel": "telegram", "peer": peer, "messageId": id, "text": text})
}

fn group(id: &str) -> Value {
    json!({"kind": "group", "id": id})
}

fn direct(id: &str) -> Value {
    json!({"kind": "direct", "id": id})
}

/// The reply text of a delivered message (asserting it was delivered).
fn reply(up: &Up, envelope: &Value) -> String {
    let (status, body) = inbound(up.addr, envelope);
    assert_eq!(status, 200, "{body:#}");
    body["reply"]["text"].as_str().unwrap().to_string()
}

fn db(state: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(state.join("state.db")).unwrap()
}

fn count(state: &Path, sql: &str) -> i64 {
    db(state).query_row(sql, [], |r| r.get(0)).unwrap()
}

fn deepcli(up: &Up, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(["--config", up.config.to_str().unwrap()])
        .args(["--state-dir", up.state.to_str().unwrap()])
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

// ---- deleting an agent takes its conversations to trash ----

#[test]
fn a_recreated_agent_starts_clean_and_restore_brings_the_conversations_back() {
    let agents = |with_sdk: bool| {
        let mut text = "agents:\n  list:\n    - id: main\n".to_string();
        if with_sdk {
            text.push_str(&sdk_agent("sdk", ""));
        }
        text
    };
    let bindings = |with_sdk: bool| match with_sdk {
        true => {
            "bindings:\n  - agentId: sdk\n    match: {channel: telegram, peer: {kind: group, id: \"-100\"}}\n"
        }
        false => "bindings: []\n",
    };
    let mut up = start(&agents(true), bindings(true), &[]);
    wait_ready(&up, "sdk");
    let key = "agent:sdk:telegram:group:-100";
    assert_eq!(
        reply(&up, &message(group("-100"), "m-1", "hello")),
        "echo: hello (turn 1)"
    );
    let remove = |up: &Up| {
        up.write_by_rename("bindings.yaml", bindings(false));
        up.write_by_rename("agents.yaml", &agents(false));
        up.wait_for("sdk deleted", |s| {
            s["agents"].as_array().is_some_and(|a| a.len() == 1) && Up::runtime(s, "sdk").is_none()
        });
    };
    remove(&up);
    // Its conversation left the live tables with it, into its trash entry.
    assert_eq!(transcript(&up.state, key), []);
    assert_eq!(
        count(
            &up.state,
            "SELECT count(*) FROM sessions WHERE agent_id = 'sdk'"
        ),
        0
    );
    assert_eq!(
        count(&up.state, "SELECT count(*) FROM trash_transcript"),
        3,
        "how the session opened, the inbound message and the reply"
    );

    // A new agent with the same id is not handed the deleted agent's conversation.
    up.write_by_rename("agents.yaml", &agents(true));
    up.write_by_rename("bindings.yaml", bindings(true));
    wait_ready(&up, "sdk");
    let again = reply(&up, &message(group("-100"), "m-2", "again"));
    assert_eq!(again, "echo: again (turn 1)", "no earlier turns as context");
    // The same message id as the deleted agent's first message is a new message now.
    assert_eq!(
        reply(&up, &message(group("-100"), "m-1", "hello")),
        "echo: hello (turn 2)"
    );

    // Deleted again: the second conversation goes to a second entry.
    remove(&up);
    up.terminate();
    let entries: Vec<String> = {
        let db = db(&up.state);
        let mut stmt = db
            .prepare("SELECT entry FROM trash WHERE agent_id = 'sdk' ORDER BY serial")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(entries.len(), 2, "{entries:?}");

    // Restoring the first entry puts its files and its conversation back.
    let out = deepcli(&up, &["trash", "restore", &entries[0]]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("restored 1 conversation"), "{said}");
    let turns: Vec<(String, String)> = transcript(&up.state, key)
        .into_iter()
        .filter(|(p, _)| p != "acp")
        .collect();
    assert_eq!(
        turns,
        [
            ("inbound".to_string(), "hello".to_string()),
            ("agent".to_string(), "echo: hello (turn 1)".to_string())
        ]
    );
    assert_eq!(
        count(
            &up.state,
            "SELECT count(*) FROM deliveries WHERE message_id = 'm-1'"
        ),
        1
    );

    // The second holds the same conversation, which is in use again: refused, nothing moved.
    let out = deepcli(&up, &["trash", "restore", &entries[1]]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("in use again"), "{said}");
    assert!(said.contains(key), "{said}");
    assert!(
        up.state
            .join("trash")
            .join(&entries[1])
            .join("workspace")
            .exists(),
        "the refused entry keeps its files"
    );
}

// ---- acp bindings: mode, cwd, label ----

#[test]
fn a_oneshot_acp_binding_gets_a_fresh_session_per_message_closed_after_the_reply() {
    let agents = format!("agents:\n  list:\n    - id: main\n{}", sdk_agent("sdk", ""));
    let bindings = "bindings:
  - type: acp
    agentId: sdk
    match: {channel: telegram, peer: {kind: direct, id: \"111\"}}
    acp: {mode: oneshot, label: one-room, cwd: rooms/one}
  - type: acp
    agentId: sdk
    match: {channel: telegram, peer: {kind: direct, id: \"222\"}}
    acp: {mode: persistent, label: two-room}
";
    let up = start(&agents, bindings, &[]);
    wait_ready(&up, "sdk");
    let workspace = up.state.join("workspaces/sdk");

    // acp.cwd is the session's working directory (relative to the workspace, made if missing).
    let (status, first) = inbound(up.addr, &message(direct("111"), "m-1", "cwd"));
    assert_eq!(status, 200, "{first:#}");
    assert_eq!(
        first["reply"]["text"],
        format!("cwd: {}", workspace.join("rooms/one").display())
    );
    assert_eq!(
        first["route"]["acp"],
        json!({"mode": "oneshot", "label": "one-room"})
    );
    // Each message its own session: every reply is that session's first turn.
    assert_eq!(
        reply(&up, &message(direct("111"), "m-2", "hello")),
        "echo: hello (turn 1)"
    );
    assert_eq!(
        reply(&up, &message(direct("111"), "m-3", "again")),
        "echo: again (turn 1)"
    );
    // Closed after each reply (the agent logs each close to the runtime's log) ...
    let log = up.state.join("logs/sdk.log");
    let closes = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("sdk-echo: closed session")
            .count()
    };
    crate::common::wait_until("three sessions closed", || closes() == 3);
    // ... and never kept in the session map.
    let key = first["sessionKey"].as_str().unwrap();
    assert_eq!(
        count(
            &up.state,
            &format!("SELECT count(*) FROM sessions WHERE session_key = '{key}'")
        ),
        0
    );
    let notes: Vec<String> = transcript(&up.state, key)
        .into_iter()
        .filter(|(p, _)| p == "acp")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(notes.len(), 6, "{notes:#?}");
    assert!(
        notes[0].contains("`one-room`"),
        "the label names it: {notes:#?}"
    );
    assert!(notes[0].contains("oneshot"), "{notes:#?}");
    assert!(notes[1].ends_with("closed after the reply"), "{notes:#?}");

    // A persistent binding keeps its session; without acp.cwd it is the runtime's.
    let (_, persistent) = inbound(up.addr, &message(direct("222"), "p-1", "cwd"));
    assert_eq!(
        persistent["reply"]["text"],
        format!("cwd: {}", workspace.display())
    );
    assert_eq!(persistent["route"]["acp"]["mode"], "persistent");
    assert_eq!(
        reply(&up, &message(direct("222"), "p-2", "hello")),
        "echo: hello (turn 2)"
    );
    assert_eq!(closes(), 3, "a persistent session stays open");
}

// ---- model ----

#[test]
fn the_model_is_applied_through_acp_with_fallbacks_and_switched_without_a_restart() {
    let models = "      runtime:\n        kind: acp\n        command: [node, \"{agent}\"]\n        env: {SDK_ECHO_MODELS: \"echo-default,echo-large,echo-small,echo-tiny\", SDK_ECHO_REFUSE_MODELS: echo-large}\n";
    let agents = |sdk_model: &str| {
        format!(
            "agents:\n  list:\n    - id: main\n    - id: sdk\n      model: {sdk_model}\n{}{}    - id: cfg\n      model: other/model\n",
            models.replace("{agent}", &sdk_echo_agent().display().to_string()),
            sdk_agent("plain", "      model: some/model\n"),
        )
    };
    let bindings = "bindings:
  - agentId: sdk
    match: {channel: telegram, peer: {kind: group, id: \"-1\"}}
  - agentId: plain
    match: {channel: telegram, peer: {kind: group, id: \"-2\"}}
";
    let up = start(
        &agents("{primary: vendor/echo-missing, fallbacks: [echo-large, echo/echo-small]}"),
        bindings,
        &[],
    );
    wait_ready(&up, "plain");
    let status = wait_ready(&up, "sdk");
    let pid = Up::runtime(&status, "sdk").unwrap()["pid"].clone();
    let model = |status: &Value, id: &str| Up::runtime(status, id).unwrap()["model"].clone();
    let pending = model(&status, "sdk");
    assert_eq!(pending["wanted"], "vendor/echo-missing", "{pending:#}");
    assert_eq!(pending["applied"], Value::Null, "{pending:#}");
    assert!(
        pending["why"].as_str().unwrap().starts_with("pending"),
        "{pending:#}"
    );

    // The primary is not offered, the first fallback is refused, the second (named with a
    // provider the agent leaves out) is applied.
    assert_eq!(
        reply(&up, &message(group("-1"), "m-1", "hello")),
        "echo: hello (turn 1) [model echo-small]"
    );
    // An agent that offers no model selection says so.
    assert_eq!(
        reply(&up, &message(group("-2"), "m-2", "hello")),
        "echo: hello (turn 1)"
    );
    let status = up.status().unwrap();
    let applied = model(&status, "sdk");
    assert_eq!(applied["applied"], "echo-small", "{applied:#}");
    let why = applied["why"].as_str().unwrap();
    assert!(
        why.contains("`vendor/echo-missing` is not offered"),
        "{why}"
    );
    assert!(why.contains("`echo-large` was refused: "), "{why}");
    assert!(why.contains("model echo-large is unavailable"), "{why}");
    let plain = model(&status, "plain");
    assert_eq!(plain["applied"], Value::Null, "{plain:#}");
    assert!(
        plain["why"]
            .as_str()
            .unwrap()
            .contains("the agent offers no model selection"),
        "{plain:#}"
    );
    let human = String::from_utf8(deepcli(&up, &["status"]).stdout).unwrap();
    assert!(
        human.contains("model vendor/echo-missing → echo-small (a fallback: "),
        "{human}"
    );
    assert!(
        human.contains("model some/model (model not applied: the agent offers no model selection"),
        "{human}"
    );
    let list = String::from_utf8(deepcli(&up, &["agents", "list"]).stdout).unwrap();
    assert!(
        list.contains("model      other/model (model not applied: `runtime.kind: none`"),
        "{list}"
    );
    assert!(
        list.contains("model      vendor/echo-missing → echo-small"),
        "{list}"
    );

    // A new model is switched to in the open session: same process, same session.
    up.write_by_rename("agents.yaml", &agents("echo-tiny"));
    up.wait_for("the new model in force", |s| {
        Up::runtime(s, "sdk").is_some_and(|r| r["model"]["wanted"] == "echo-tiny")
    });
    assert_eq!(
        reply(&up, &message(group("-1"), "m-3", "again")),
        "echo: again (turn 2) [model echo-tiny]"
    );
    let status = up.status().unwrap();
    assert_eq!(
        Up::runtime(&status, "sdk").unwrap()["pid"],
        pid,
        "not restarted"
    );
    assert_eq!(model(&status, "sdk")["applied"], "echo-tiny");
    let notes: Vec<String> = transcript(&up.state, "agent:sdk:telegram:group:-1")
        .into_iter()
        .filter(|(p, _)| p == "acp")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        notes.last().unwrap(),
        "model `echo-tiny` applied",
        "{notes:#?}"
    );
}

// ---- heartbeat ----

/// A reply sink on a loopback port that answers 200 to every POST and hands over each body.
fn recorder() -> (String, std::sync::mpsc::Receiver<Value>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/replies", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(n) = line.to_lowercase().strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if tx
                .send(serde_json::from_slice(&body).unwrap_or(Value::Null))
                .is_err()
            {
                return;
            }
        }
    });
    (url, rx)
}

#[test]
fn heartbeats_prompt_the_main_session_swallow_heartbeat_ok_and_send_the_rest_on() {
    let (url, posts) = recorder();
    let agents = format!(
        "agents:\n  list:\n    - id: main\n{}",
        sdk_agent("sdk", "      heartbeat: {every: 1s}\n")
    );
    let bindings = "bindings:
  - agentId: sdk
    match: {channel: telegram, peer: {kind: group, id: \"-5\"}}
  - agentId: sdk
    match: {channel: telegram, peer: {kind: direct, id: \"7\"}}
";
    let up = Up::start_config(&agents, &channels(Some(&url)), bindings, |cmd| {
        cmd.env("DEEPCLI_TEST_SECRET", SECRET)
            .args(["--prompt-timeout-ms", "3000"]);
    });
    wait_ready(&up, "sdk");
    let heartbeat = |s: &Value| s["heartbeats"]["sdk"].clone();
    let count = |s: &Value, what: &str| heartbeat(s)[what].as_u64().unwrap_or(0);

    // Before the agent had a message, an answer has nowhere to go: it stays in the transcript
    // of the main session, which the heartbeat prompted with HEARTBEAT.md.
    let status = up.wait_for("a heartbeat kept", |s| count(s, "kept") >= 1);
    let last = heartbeat(&status)["last"].as_str().unwrap().to_string();
    assert!(last.contains("no external route yet"), "{last}");
    assert_eq!(heartbeat(&status)["every"], "1s");
    let main = transcript(&up.state, "agent:sdk:main");
    assert!(
        main.iter()
            .any(|(p, t)| p == "heartbeat" && t.contains("# HEARTBEAT.md")),
        "{main:#?}"
    );

    // A delivered message makes its conversation the agent's last external route: the next
    // answers go there, through the account's reply sink.
    reply(&up, &message(group("-5"), "m-1", "hello"));
    let sent = loop {
        let post = posts.recv_timeout(Duration::from_secs(30)).unwrap();
        if post["heartbeat"] == true {
            break post;
        }
        assert_eq!(post["messageId"], "m-1", "{post:#}");
    };
    assert_eq!(
        sent["sessionKey"], "agent:sdk:telegram:group:-5",
        "{sent:#}"
    );
    assert_eq!(
        sent["peer"],
        json!({"kind": "group", "id": "-5"}),
        "{sent:#}"
    );
    let text = sent["reply"]["text"].as_str().unwrap();
    assert!(text.starts_with("echo: [deepcli heartbeat"), "{text}");
    let status = up.wait_for("a heartbeat delivered", |s| count(s, "delivered") >= 1);
    assert!(
        heartbeat(&status)["last"]
            .as_str()
            .unwrap()
            .contains("telegram/default group:-5"),
        "{status:#}"
    );
    assert!(
        transcript(&up.state, "agent:sdk:telegram:group:-5")
            .iter()
            .any(|(p, t)| p == "agent" && t == text),
        "the answer is in the conversation it went to"
    );

    // `HEARTBEAT_OK` is swallowed.
    std::fs::write(
        up.state.join("workspaces/sdk/HEARTBEAT.md"),
        "# HEARTBEAT.md\n\nreply: HEARTBEAT_OK\n",
    )
    .unwrap();
    up.wait_for("two heartbeats answered HEARTBEAT_OK", |s| {
        count(s, "ok") >= 2
    });
    while let Ok(post) = posts.try_recv() {
        assert_ne!(post["reply"]["text"], "HEARTBEAT_OK", "{post:#}");
    }

    // Skipped while the main session is busy (a direct message: dmScope main).
    let busy = up.status().map(|s| count(&s, "skipped")).unwrap_or(0);
    let addr = up.addr;
    let slow = std::thread::spawn(move || inbound(addr, &message(direct("7"), "m-2", "slow")));
    let status = up.wait_for("a heartbeat skipped", |s| count(s, "skipped") > busy);
    let last = heartbeat(&status)["last"].as_str().unwrap().to_string();
    assert!(last.contains("agent:sdk:main is busy"), "{last}");
    let (code, body) = slow.join().unwrap();
    assert_eq!(code, 504, "{body:#}");

    let human = String::from_utf8(deepcli(&up, &["status"]).stdout).unwrap();
    assert!(
        human.contains("heartbeat    sdk              every 1s: "),
        "{human}"
    );
}
