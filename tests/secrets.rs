//! Secrets end to end: an account whose webhook secret resolves to nothing takes no messages,
//! and referenced secrets with real values never reach an output, a file or a log.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::Up;
use serde_json::{Value, json};

/// One HTTP call: status and body (JSON when it parses, else the text).
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let url = format!("http://{addr}{path}");
    let response = if method == "GET" {
        let mut req = agent.get(&url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.call()
    } else {
        let mut req = agent.post(&url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send(body)
    }
    .unwrap();
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// `POST /v1/inbound` of `envelope`, signed with `secret`.
fn inbound(addr: SocketAddr, secret: &[u8], envelope: &Value) -> (u16, Value) {
    let body = envelope.to_string();
    let signature = deepcli::access::sign(secret, body.as_bytes());
    call(
        addr,
        "POST",
        "/v1/inbound",
        &[
            ("x-deepcli-signature", &signature),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    )
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
        "channels:\n  telegram:\n    accounts:\n      default:\n        webhookSecret: {{source: env, id: DEEPCLI_TEST_EMPTY_SECRET}}\n      newline:\n        webhookSecret: {{source: file, path: {}}}\n      blank:\n        webhookSecret: {{source: file, path: {}}}\n      good:\n        webhookSecret: {{source: env, id: DEEPCLI_TEST_GOOD_SECRET}}\n",
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
            assert!(error.contains("takes no messages"), "{account}: {error}");
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
